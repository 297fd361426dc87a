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



SOURCE_ROOT = str(Path(__file__).resolve().parents[2] / "hook")
FORBIDDEN = ("click", "yaml", "jsonschema", "psutil", "typing")

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


def test_apply_then_steady_state(hook_pod: Dict[str, Any], tmp_path: Path) -> None:
    argv = ["--config", hook_pod["node"].config_path, "apply"]
    first = run_probe(tmp_path, argv, hook_pod["app"]["state"], hook_pod["cache"])
    assert_lean(first)
    assert first["stdout"], "the first apply should have written the mixed cpuset"
    steady = run_probe(tmp_path, argv, hook_pod["app"]["state"], hook_pod["cache"])
    assert_lean(steady)
    assert steady["stdout"] == "" and steady["stderr"] == ""
    assert "mixed_cpus_hook.usecases.apply" in steady["modules"], "the probe did not reach the engine"


def test_container_that_does_not_ask(hook_pod: Dict[str, Any], tmp_path: Path) -> None:
    result = run_probe(tmp_path, ["--config", hook_pod["node"].config_path, "apply"], hook_pod["sidecar"]["state"],
                       hook_pod["cache"])
    assert_lean(result)
    assert result["stdout"] == "" and result["stderr"] == ""
    # It bows out before the configuration: not even the engine is loaded.
    assert "mixed_cpus_hook.usecases.apply" not in result["modules"]
    assert "mixed_cpus_hook.node.config" not in result["modules"]


def test_release(hook_pod: Dict[str, Any], tmp_path: Path) -> None:
    config = hook_pod["node"].config_path
    assert_lean(run_probe(tmp_path, ["--config", config, "apply"], hook_pod["app"]["state"], hook_pod["cache"]))
    result = run_probe(tmp_path, ["--config", config, "release"], hook_pod["app"]["state"], hook_pod["cache"])
    assert_lean(result)
    assert hook_pod["node"].records("containers") == {}
