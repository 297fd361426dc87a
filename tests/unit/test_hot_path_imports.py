"""The container start path imports no heavy module: not click, PyYAML, jsonschema, psutil or typing.

Each case runs the hook's fast path in a fresh interpreter (``python -I -S``: no site, so
nothing but the standard library's start-up and the hook is loaded), with a YAML config
whose JSON cache is warm, as on a node after the first container, and then checks
``sys.modules``. How long the path takes is measured by ``benchmarks/run.py``, not here.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any, Dict, List

import pytest

from mixed_cpus_hook.node.config import load_config

SOURCE_ROOT = str(Path(__file__).resolve().parents[2] / "hook")
FORBIDDEN = ("click", "yaml", "jsonschema", "psutil", "typing")
APP_ID = "a1" * 32
SIDECAR_ID = "5c" * 32
POD_UID = "0f1e2d3c-aaaa-bbbb-cccc-123456789abc"

# Runs entry.main (entry() would end the process before sys.modules can be read).
PROBE = """
import json, os, sys
sys.path.insert(0, os.environ["PROBE_SOURCE_ROOT"])
from mixed_cpus_hook.frontends import entry
code = entry.main(sys.argv[1:])
with open(os.environ["PROBE_OUT"], "w") as f:
    json.dump({"code": code, "modules": sorted(sys.modules)}, f)
"""


def run_probe(tmp_path: Path, argv: List[str], state_file: str, cache_dir: str) -> Dict[str, Any]:
    out = tmp_path / "probe.json"
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "MIXED_CPUS_HOOK_CACHE_DIR": cache_dir,
           "PROBE_SOURCE_ROOT": SOURCE_ROOT, "PROBE_OUT": str(out)}
    with open(state_file, "rb") as stdin:
        proc = subprocess.run([sys.executable, "-I", "-S", "-c", PROBE, *argv], stdin=stdin, env=env,
                              capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0 and out.exists(), f"exit {proc.returncode}\n{proc.stdout}\n{proc.stderr}"
    with open(out, encoding="utf-8") as f:
        result = json.load(f)
    out.unlink()
    result.update(stdout=proc.stdout, stderr=proc.stderr)
    return result


def assert_lean(result: Dict[str, Any]) -> None:
    assert result["code"] == 0, result["stderr"]
    loaded = [m for m in result["modules"] if m.split(".")[0] in FORBIDDEN]
    assert loaded == [], f"the hook path imported {loaded}"


@pytest.fixture
def pod(node: Any, config_cache_dir: str) -> Dict[str, Any]:
    """An asking container and, in the same pod, one that does not ask; the config cache is warm."""
    app = node.add_container(APP_ID, name="app", pod_uid=POD_UID, cpus="2-3", quota=200000, pid=4242)
    sidecar = node.add_container(SIDECAR_ID, name="sidecar", pod_uid=POD_UID, cpus="2-3", ask=None, pid=4243)
    # CRI-O copies the pod's annotations into every container, so the hook runs for the
    # sidecar too (hooks.d's "when" matches) and must bow out.
    for path in (sidecar["state"], os.path.join(sidecar["bundle"], "config.json")):
        doc = node.load_json(path)
        doc["annotations"]["mixed-cpus.openshift.io/app"] = "enable"
        node.save_json(path, doc)
    load_config(node.config_path, cache_dir=config_cache_dir)  # PyYAML runs here, in the test process
    return {"node": node, "app": app, "sidecar": sidecar, "cache": config_cache_dir}


def test_apply_then_steady_state(pod: Dict[str, Any], tmp_path: Path) -> None:
    argv = ["--config", pod["node"].config_path, "apply"]
    first = run_probe(tmp_path, argv, pod["app"]["state"], pod["cache"])
    assert_lean(first)
    assert first["stdout"], "the first apply should have written the mixed cpuset"
    steady = run_probe(tmp_path, argv, pod["app"]["state"], pod["cache"])
    assert_lean(steady)
    assert steady["stdout"] == "" and steady["stderr"] == ""
    assert "mixed_cpus_hook.usecases.apply" in steady["modules"], "the probe did not reach the engine"


def test_container_that_does_not_ask(pod: Dict[str, Any], tmp_path: Path) -> None:
    result = run_probe(tmp_path, ["--config", pod["node"].config_path, "apply"], pod["sidecar"]["state"],
                       pod["cache"])
    assert_lean(result)
    assert result["stdout"] == "" and result["stderr"] == ""
    # It bows out before the configuration: not even the engine is loaded.
    assert "mixed_cpus_hook.usecases.apply" not in result["modules"]
    assert "mixed_cpus_hook.node.config" not in result["modules"]


def test_release(pod: Dict[str, Any], tmp_path: Path) -> None:
    config = pod["node"].config_path
    assert_lean(run_probe(tmp_path, ["--config", config, "apply"], pod["app"]["state"], pod["cache"]))
    result = run_probe(tmp_path, ["--config", config, "release"], pod["app"]["state"], pod["cache"])
    assert_lean(result)
    assert pod["node"].records("containers") == {}
