"""deploy/base/config.yaml is what scripts/gen-deploy-config.py makes of the schema, and the plugin
accepts it; deploy/'s image tag is this version."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest
import yaml

from mixed_cpus_hook import __version__
from mixed_cpus_hook.node.config import load_config

REPO = Path(__file__).resolve().parents[2]


def generator():
    spec = importlib.util.spec_from_file_location("gen_deploy_config", REPO / "scripts" / "gen-deploy-config.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_shipped_config_is_current() -> None:
    gen = generator()
    schema = json.loads((REPO / "schemas" / "config.schema.json").read_text())
    assert (REPO / "deploy" / "base" / "config.yaml").read_text() == gen.format_deploy_config(schema), \
        "deploy/base/config.yaml is out of date: run python3 scripts/gen-deploy-config.py"


def test_every_setting_is_listed_and_the_file_loads(tmp_path: Path) -> None:
    text = (REPO / "deploy" / "base" / "config.yaml").read_text()
    schema = json.loads((REPO / "schemas" / "config.schema.json").read_text())
    for key in schema["properties"]:
        assert f"\n{key}: " in text or f"\n#{key}:" in text, key
    config = load_config(str(REPO / "deploy" / "base" / "config.yaml"), cache_dir=str(tmp_path))
    assert config.shared_cpus == "0"


def test_a_new_schema_setting_reaches_the_file() -> None:
    schema = {"properties": {"knob": {"title": "Knob", "description": "Turns.", "default": 3},
                             "list": {"description": "Items.", "examples": [["a"]]}}}
    text = generator().format_deploy_config(schema, values={}, notes={})
    assert "# knob (Knob): Turns.\n#knob: 3\n" in text
    assert '#list: ["a"]    # an example; default: not set' in text


def test_image_tag_is_this_version() -> None:
    kustomization = yaml.safe_load((REPO / "deploy" / "base" / "kustomization.yaml").read_text())
    assert kustomization["images"] == [{"name": "mixed-cpus-hook", "newName": "localhost/mixed-cpus-hook",
                                        "newTag": __version__}]


def _daemonset_mounts() -> dict:
    """mountPath -> (the host path of its volume or None, readOnly) of the base DaemonSet's container."""
    ds = yaml.safe_load((REPO / "deploy" / "base" / "daemonset.yaml").read_text())
    spec = ds["spec"]["template"]["spec"]
    [ctr] = spec["containers"]
    volumes = {v["name"]: v for v in spec["volumes"]}
    return {m["mountPath"]: (volumes[m["name"]].get("hostPath", {}).get("path"), m.get("readOnly", False))
            for m in ctr["volumeMounts"]}


@pytest.mark.parametrize("overlay", ["base", "overlays/containerd", "overlays/openshift"])
def test_the_plugin_pod_sees_the_cdi_spec_dirs_read_only(overlay: str, tmp_path: Path) -> None:
    """With exclusive_source dra a claim counts only when a CDI spec of cdi_spec_dirs holds it: the pod
    mounts every directory its configuration names, read-only, at the host's path (the runtime's)."""
    config = load_config(str(REPO / "deploy" / overlay / "config.yaml"), cache_dir=str(tmp_path))
    mounts = _daemonset_mounts()
    assert config.cdi_spec_dirs == ("/etc/cdi", "/var/run/cdi")
    for d in config.cdi_spec_dirs:
        assert mounts.get(d) == (d, True), (d, mounts)


def test_only_the_cgroups_and_the_state_dir_are_writable() -> None:
    writable = sorted(p for p, (_host, ro) in _daemonset_mounts().items() if not ro)
    assert writable == ["/run/mixed-cpus-hook", "/sys/fs/cgroup"]
