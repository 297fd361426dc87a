"""The production defaults, read where a node has them: /etc, /run, /var/lib/kubelet, /usr/share.

Code that takes its paths as parameters is tested elsewhere with temporary directories; here
nothing is passed, so the code reads and writes its fixed absolute defaults, in pyfakefs's fake
file system (the ``fs`` fixture: works with pyfakefs 5.10 of .venv-py39 and 6.x of .venv). The
kernel's and runtimes' files are not involved; what pyfakefs does not emulate faithfully (the
stat of an open descriptor, ctime) is tested on real files elsewhere.
"""

from __future__ import annotations

import json
import os
from typing import Any

import pytest

from mixed_cpus_hook.core.errors import ConfigError
from mixed_cpus_hook.node import config as cfg
from mixed_cpus_hook.node import kubelet
from mixed_cpus_hook.node.config import Config, load_config, load_shared_cpus
from mixed_cpus_hook.ops import doctor

CACHE_FILE = "/run/mixed-cpus-hook/config-cache/%2Fetc%2Fmixed-cpus-hook%2Fconfig.yaml.json"


@pytest.fixture
def node_fs(fs: Any, monkeypatch: pytest.MonkeyPatch) -> Any:
    """An empty fake file system and no test overrides of the configuration's paths."""
    monkeypatch.delenv(cfg.CACHE_DIR_ENV, raising=False)
    monkeypatch.delenv(cfg.CONFIG_ENV, raising=False)
    return fs


@pytest.mark.parametrize("text", [
    pytest.param('{"failure_policy": "ignore", "allowed_namespaces": ["ran"]}\n', id="json"),
    pytest.param("failure_policy: ignore\nallowed_namespaces: [ran]\n", id="yaml"),
])
def test_default_config_and_its_cache_under_run(node_fs: Any, text: str) -> None:
    node_fs.create_file(cfg.DEFAULT_CONFIG_PATH, contents=text)
    config = load_config()
    assert config == Config(failure_policy="ignore", allowed_namespaces=("ran",), source=cfg.DEFAULT_CONFIG_PATH)
    # Cached as JSON in the default cache directory, readable only by its owner.
    assert stat_mode(CACHE_FILE) == 0o600 and stat_mode(os.path.dirname(CACHE_FILE)) == 0o700
    with open(CACHE_FILE, encoding="utf-8") as f:
        cached = json.load(f)
    assert cached["config"] == {"failure_policy": "ignore", "allowed_namespaces": ["ran"]}
    # Reading the cache back is not checked here: in pyfakefs (5.10 and 6.3) os.fstat on an
    # os.open descriptor reports mode 0o755 and reading a file moves its ctime, so the cache's
    # trust and key checks would (rightly) refuse it. test_config.py checks them on real files.
    assert load_config() == config


def stat_mode(path: str) -> int:
    return os.stat(path).st_mode & 0o777


def test_missing_default_config_means_defaults(node_fs: Any) -> None:
    assert load_config() == Config()
    assert not os.path.exists("/run/mixed-cpus-hook")  # nothing cached, nothing made


def test_config_env_names_another_file(node_fs: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(cfg.CONFIG_ENV, "/etc/other.yaml")
    with pytest.raises(ConfigError, match="configuration file not found") as info:
        load_config()
    assert info.value.where == "/etc/other.yaml"


def test_default_shared_cpu_file(node_fs: Any) -> None:
    with pytest.raises(ConfigError, match="shared-CPU file not found") as info:
        load_shared_cpus(Config())
    assert info.value.where == "/etc/mixed-cpus-hook/shared-cpus"
    node_fs.create_file("/etc/mixed-cpus-hook/shared-cpus", contents="# reservedSystemCPUs covers them\n2-3\n")
    assert load_shared_cpus(Config()) == (frozenset({2, 3}), "/etc/mixed-cpus-hook/shared-cpus")


CHECKPOINT = {"policyName": "static", "defaultCpuSet": "0,4-7",
              "entries": {"6d1c3b0e-1f0a-4c7e-9b7a-2a3c4d5e6f70": {"du": "1-3"}}}


def test_default_kubelet_checkpoint(node_fs: Any) -> None:
    assert kubelet.load_checkpoint() is None  # not a kubelet node / no static policy
    node_fs.create_file(kubelet.DEFAULT_STATE_FILE, contents=json.dumps(CHECKPOINT))
    ckpt = kubelet.load_checkpoint()
    assert ckpt is not None and ckpt.where == "/var/lib/kubelet/cpu_manager_state"
    assert kubelet.compute_assigned(ckpt, "6d1c3b0e-1f0a-4c7e-9b7a-2a3c4d5e6f70", "du") == frozenset({1, 2, 3})
    assert Config().kubelet_state_file == kubelet.DEFAULT_STATE_FILE


def test_doctor_reads_crio_defaults(node_fs: Any) -> None:
    paths = doctor.Paths(detect=False)
    facts = doctor.read_crio_facts(paths)
    assert (facts["files"], facts["hooks_dir"], facts["hooks_dir_source"]) == (
        [], ["/usr/share/containers/oci/hooks.d"], "CRI-O's default")
    # MCO's crio.conf, then a drop-in that wins (crio.conf.d in name order).
    node_fs.create_file("/etc/crio/crio.conf", contents=(
        '[crio.runtime]\ncgroup_manager = "systemd"\n'
        'hooks_dir = ["/etc/containers/oci/hooks.d", "/usr/share/containers/oci/hooks.d"]\n'))
    node_fs.create_file("/etc/crio/crio.conf.d/99-shared.conf", contents='[crio.runtime]\nshared_cpuset = "2-3"\n')
    facts = doctor.read_crio_facts(paths)
    assert facts["files"] == ["/etc/crio/crio.conf", "/etc/crio/crio.conf.d/99-shared.conf"]
    assert facts["hooks_dir"] == ["/etc/containers/oci/hooks.d", "/usr/share/containers/oci/hooks.d"]
    assert (facts["shared_cpuset"], facts["shared_cpuset_source"]) == ("2-3", "/etc/crio/crio.conf.d/99-shared.conf")
    assert facts["errors"] == []


def test_doctor_reads_the_default_hooks_dir(node_fs: Any) -> None:
    assert doctor.read_hook_files(doctor.DEFAULT_HOOKS_DIRS) == []
    doc = {"version": "1.0.0", "hook": {"path": "/usr/bin/mixed-cpus-hook", "args": ["mixed-cpus-hook", "apply"]},
           "when": {"annotations": {"^mixed-cpus\\.openshift\\.io/.+$": ".*"}}, "stages": ["createRuntime"]}
    node_fs.create_file("/usr/share/containers/oci/hooks.d/mixed-cpus-hook.json", contents=json.dumps(doc))
    node_fs.create_file("/usr/share/containers/oci/hooks.d/other.json", contents='{"hook": {"path": "/bin/x"}}')
    found = doctor.read_hook_files(doctor.DEFAULT_HOOKS_DIRS)
    assert [f["file"] for f in found] == ["/usr/share/containers/oci/hooks.d/mixed-cpus-hook.json"]
    assert found[0]["error"] is None
