"""`machineconfig --no-image`: the MachineConfig that brings the code to RHCOS without a custom image.

Its files are laid out on a node tree (a fake node from tests/conftest.py, whose cgroup files the
hook writes) the way Ignition and MCO write them, /usr/local a symlink to /var/usrlocal as on
RHCOS; then the laid-out executables run, exactly as the laid-out hooks.d files and units name
them, under a Python that cannot import click or PyYAML (``-I -S``: the standard library only,
like RHCOS's platform Python). ``systemctl`` is a recording stand-in on PATH (as in
test_watches.py): starting units on this host's systemd is the integration tests' business.
"""

from __future__ import annotations

import json
import os
import shlex
import stat
import subprocess
import sys
from pathlib import Path
from typing import Any, Dict, List, Tuple

import pytest
import yaml
from test_machineconfig import ignition_validator, validate_mc  # noqa: F401 - the fixture is used by name

from mixed_cpus_hook.core.errors import ConfigError, UsageError
from mixed_cpus_hook.node.config import NOT_JSON, Config, parse_config_text, parse_json_config
from mixed_cpus_hook.ops.machineconfig import (DEFAULT_UNITS,
                                               NOIMAGE_BIN,
                                               NOIMAGE_MODULES,
                                               NOIMAGE_SKIPPED_UNITS,
                                               NOIMAGE_WATCHES_BIN,
                                               compute_noimage_hook,
                                               compute_noimage_machineconfig,
                                               compute_noimage_unit,
                                               decode_data_url,
                                               embedded_files,
                                               read_noimage_files)

CID = "4f2a" + "0" * 60
CONFIG = "/etc/mixed-cpus-hook/config.yaml"
HOOKS_D = "/etc/containers/oci/hooks.d"
UNIT_DIR = "/etc/systemd/system"
# The stdlib-only interpreter: no site-packages, no environment (RHCOS's python3 has neither
# click nor PyYAML).
BARE = [sys.executable, "-I", "-S"]


def node_path(root: str, path: str) -> str:
    """Where a node's absolute ``path`` is in the tree at ``root``.

    The test's configuration already names paths inside the tree (its cgroup root, shared-CPU
    file, state directory): those stay where they are.
    """
    return path if path.startswith(root + "/") else root + path


def lay_out(mc: Dict[str, Any], root: str) -> None:
    """Write a MachineConfig's files and units under ``root`` as Ignition and MCO do on a node.

    /usr/local is a symlink to /var/usrlocal (RHCOS); an enabled unit gets the symlink
    ``systemctl enable`` makes from its [Install] WantedBy= target.
    """
    os.makedirs(os.path.join(root, "var/usrlocal"), exist_ok=True)
    os.makedirs(os.path.join(root, "usr"), exist_ok=True)
    os.symlink("../var/usrlocal", os.path.join(root, "usr/local"))
    config = mc["spec"]["config"]
    for f in config["storage"]["files"]:
        path = node_path(root, f["path"])
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "wb") as out:
            out.write(decode_data_url(f["contents"]["source"]))
        os.chmod(path, f["mode"])
    for unit in config["systemd"]["units"]:
        path = node_path(root, f"{UNIT_DIR}/{unit['name']}")
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "w", encoding="utf-8") as out:
            out.write(unit["contents"])
        if unit.get("enabled"):
            wanted = [line.split("=", 1)[1].strip() for line in unit["contents"].splitlines()
                      if line.startswith("WantedBy=")]
            assert wanted, f"{unit['name']} is enabled but has no WantedBy="
            wants = node_path(root, f"{UNIT_DIR}/{wanted[0]}.wants")
            os.makedirs(wants, exist_ok=True)
            os.symlink(f"{UNIT_DIR}/{unit['name']}", os.path.join(wants, unit["name"]))


def exec_start(root: str, unit: str, instance: str = "") -> List[str]:
    """The laid-out unit's ExecStart= as an argv (systemd's quoting, %i expanded)."""
    with open(node_path(root, f"{UNIT_DIR}/{unit}"), encoding="utf-8") as f:
        lines = [line.split("=", 1)[1] for line in f.read().splitlines() if line.startswith("ExecStart=")]
    assert len(lines) == 1, unit
    return [w.replace("%i", instance) for w in shlex.split(lines[0])]


class Laid:
    """A node tree with the no-image MachineConfig laid out, and a way to run what it names."""

    def __init__(self, node: Any, tmp: Path) -> None:
        self.node = node
        self.root = node.root
        self.systemctl_log = tmp / "systemctl.log"
        bindir = tmp / "bin"
        bindir.mkdir()
        fake = bindir / "systemctl"
        fake.write_text(f'#!/bin/sh\necho "$@" >> {shlex.quote(str(self.systemctl_log))}\n')
        fake.chmod(0o755)
        self.env = {"PATH": f"{bindir}:/usr/bin:/bin", "MIXED_CPUS_HOOK_CONFIG": node_path(self.root, CONFIG),
                    "MIXED_CPUS_HOOK_CACHE_DIR": str(tmp / "cache"), "MIXED_CPUS_HOOK_NO_SYSLOG": "1"}
        self.metrics = os.path.join(self.root, "var/lib/node_exporter/textfile_collector/mixed_cpus_hook.prom")
        os.makedirs(os.path.dirname(self.metrics))  # node_exporter's directory

    def run(self, argv: List[str], stdin: str = "") -> subprocess.CompletedProcess:
        """Run a laid-out executable (argv[0] a node path) with the stdlib-only Python."""
        exe = node_path(self.root, argv[0])
        assert os.stat(exe).st_mode & stat.S_IXUSR, f"{exe} is not executable"
        with open(exe, encoding="utf-8") as f:
            assert f.readline() == "#!/usr/bin/python3 -I\n"
        return subprocess.run(BARE + [exe, *argv[1:]], input=stdin, capture_output=True, text=True,
                              env=self.env, timeout=60)

    def hook(self, name: str, state: str) -> subprocess.CompletedProcess:
        """Run the hook as CRI-O would from the laid-out hooks.d file ``name``."""
        with open(node_path(self.root, f"{HOOKS_D}/{name}"), encoding="utf-8") as f:
            doc = json.load(f)
        return self.run([doc["hook"]["path"], *doc["hook"]["args"][1:]], stdin=state)


def node_config(node: Any) -> str:
    """The fake node's configuration (YAML, every root in its tree) plus a metrics file and checkpoint."""
    with open(node.config_path, encoding="utf-8") as f:
        text = f.read()
    return text + (f"metrics_file: {node.root}/var/lib/node_exporter/textfile_collector/mixed_cpus_hook.prom\n"
                   f"kubelet_state_file: {node.root}/var/lib/kubelet/cpu_manager_state\n")


def make_mc(node: Any) -> Dict[str, Any]:
    return compute_noimage_machineconfig("worker", node.shared, *read_noimage_files(),
                                         config_text=node_config(node))


def ok(proc: subprocess.CompletedProcess) -> subprocess.CompletedProcess:
    assert proc.returncode == 0, (proc.returncode, proc.stdout, proc.stderr)
    return proc


# -- the MachineConfig --------------------------------------------------------------------------

def test_noimage_machineconfig_is_valid_ignition(ignition_validator: Any) -> None:  # noqa: F811
    mc = compute_noimage_machineconfig("worker-cnf", "2-3", *read_noimage_files(), allowed_namespaces=["ran"])
    validate_mc(ignition_validator, mc)
    files = embedded_files(mc)
    lib = "/usr/local/lib/mixed-cpus-hook/mixed_cpus_hook/"
    assert sorted(p for p in files if p.startswith(lib)) == sorted(lib + m + ".py" for m in NOIMAGE_MODULES)
    assert {NOIMAGE_BIN, NOIMAGE_WATCHES_BIN, f"{HOOKS_D}/mixed-cpus-hook.json",
            f"{HOOKS_D}/mixed-cpus-hook-release.json", "/etc/tmpfiles.d/mixed-cpus-hook.conf"} <= set(files)
    modes = {f["path"]: f["mode"] for f in mc["spec"]["config"]["storage"]["files"]}
    assert modes[NOIMAGE_BIN] == modes[NOIMAGE_WATCHES_BIN] == 0o755
    # The configuration is JSON, and says what the YAML would.
    text = files[CONFIG].decode()
    assert json.loads(text) == {"allowed_namespaces": ["ran"]}
    assert parse_config_text(text, CONFIG) == Config(allowed_namespaces=("ran",), source=CONFIG)
    # Every unit of the package but the NRI plugin's, in /etc/systemd/system; the preset's enabled.
    units = {u["name"]: u for u in mc["spec"]["config"]["systemd"]["units"]}
    _sources, package_units, _hooks, _tmpfiles = read_noimage_files()
    assert set(units) == set(package_units) - set(NOIMAGE_SKIPPED_UNITS)
    assert sorted(n for n, u in units.items() if u.get("enabled")) == sorted(DEFAULT_UNITS)
    for name, unit in units.items():
        for line in unit["contents"].splitlines():
            if line.startswith("Exec"):
                assert line.split("=", 1)[1].split()[0] in (NOIMAGE_WATCHES_BIN, NOIMAGE_BIN), (name, line)
    # The hooks.d files name the laid-down executable.
    for name in ("mixed-cpus-hook.json", "mixed-cpus-hook-release.json"):
        assert json.loads(files[f"{HOOKS_D}/{name}"])["hook"]["path"] == NOIMAGE_BIN


def test_noimage_units_keep_the_rest_of_each_unit() -> None:
    _sources, units, _hooks, _tmpfiles = read_noimage_files()
    for name, text in units.items():
        if name in NOIMAGE_SKIPPED_UNITS:
            continue
        changed = [(a, b) for a, b in zip(text.splitlines(), compute_noimage_unit(name, text).splitlines()) if a != b]
        assert all(a.startswith("ExecStart=") for a, _b in changed), (name, changed)
    assert compute_noimage_unit("x.service", "[Service]\nExecStart=/usr/bin/mixed-cpus-hook reconcile --why x\n") == (
        "[Service]\nExecStart=/usr/local/bin/mixed-cpus-hook-watches reconcile-all --why x\n")


@pytest.mark.parametrize("name,text,match", [
    pytest.param("a.service", "[Service]\nExecStart=/usr/bin/mixed-cpus-hook nri\n",
                 "a.service: 'ExecStart=/usr/bin/mixed-cpus-hook nri' needs the RPM", id="click-only-command"),
    pytest.param("b.service", "[Service]\nExecStartPre=/usr/bin/python3 -m mixed_cpus_hook.frontends.systemd.watches sync\n",
                 "b.service: 'ExecStartPre=/usr/bin/python3 -m mixed_cpus_hook.frontends.systemd.watches sync' needs the RPM",
                 id="package-not-on-sys-path"),
])
def test_noimage_unit_refused(name: str, text: str, match: str) -> None:
    with pytest.raises(UsageError, match=match):
        compute_noimage_unit(name, text)


@pytest.mark.parametrize("text,match", [
    pytest.param('{"hook": {"path": "/usr/local/bin/other"}}', "hook.path is '/usr/local/bin/other'", id="other-path"),
    pytest.param("{}", "hook.path is None", id="no-hook"),
])
def test_noimage_hook_refused(text: str, match: str) -> None:
    with pytest.raises(UsageError, match=match):
        compute_noimage_hook("x.json", text)


def test_noimage_refusals(tmp_path: Path) -> None:
    sources, units, hooks, tmpfiles = read_noimage_files()
    with pytest.raises(UsageError, match="the package's modules usecases/apply.py are missing"):
        compute_noimage_machineconfig("worker", "2", {k: v for k, v in sources.items() if k != "usecases/apply.py"},
                                      units, hooks, tmpfiles)
    with pytest.raises(UsageError, match="cannot enable nope.path: no such unit in the package"):
        compute_noimage_machineconfig("worker", "2", sources, units, hooks, tmpfiles, enabled=["nope.path"])
    # Outside a source tree: the RPM's files, under the root given.
    with pytest.raises(UsageError, match=f"no units or hooks.d files found \\({tmp_path}/usr/lib/systemd/system/"):
        read_noimage_files(repo_dir=str(tmp_path / "nowhere"), root=str(tmp_path))
    # The configuration is validated as for the RPM's MachineConfig.
    with pytest.raises(ConfigError, match="failure_policy"):
        compute_noimage_machineconfig("worker", "2", sources, units, hooks, tmpfiles, config_text="failure_policy: x\n")


def test_cli_no_image(run_cli: Any, ignition_validator: Any) -> None:  # noqa: F811
    res = run_cli(["machineconfig", "--role", "worker", "--shared-cpus", "2-3", "--allow-namespace", "ran",
                   "--no-image"])
    assert res.code == 0, res.err
    mc = yaml.safe_load(res.out)
    validate_mc(ignition_validator, mc)
    assert mc == compute_noimage_machineconfig("worker", "2-3", *read_noimage_files(), allowed_namespaces=["ran"])


# -- laid out on a node tree, run without click or PyYAML ----------------------------------------

def test_bare_python_has_no_click_or_yaml() -> None:
    for module in ("click", "yaml"):
        proc = subprocess.run(BARE + ["-c", f"import {module}"], capture_output=True, text=True)
        assert proc.returncode != 0 and "ModuleNotFoundError" in proc.stderr, module


def test_laid_out_files_run_without_click_or_yaml(node: Any, tmp_path: Path) -> None:
    paths = node.add_container(CID, cpus="2-3", quota=200000, pod_quota=400000)
    laid = Laid(node, tmp_path)
    lay_out(make_mc(node), laid.root)
    assert os.path.realpath(node_path(laid.root, NOIMAGE_BIN)).startswith(os.path.join(laid.root, "var/usrlocal/"))
    quota = "400000" if node.version == 1 else "400000 100000"  # 200000 + 2 shared CPUs x 100000

    # createRuntime: the hooks.d file's command, the OCI state on stdin.
    with open(paths["state"], encoding="utf-8") as f:
        state = f.read()
    ok(laid.hook("mixed-cpus-hook.json", state))
    assert node.read(paths["rel"], "cpuset.cpus") == "0-3"
    assert node.read(paths["rel"], node.quota_name()) == quota
    assert os.path.exists(os.path.join(node.state_dir, "pending", CID))

    # The sync (its path unit saw the pending mark): links made, watch units started.
    ok(laid.run(exec_start(laid.root, "mixed-cpus-hook-sync.service")))
    assert f"start mixed-cpus-hook-watch@{CID}.path" in laid.systemctl_log.read_text()
    assert os.path.islink(os.path.join(node.state_dir, "watch", CID, "cpus"))

    # kubelet rewrites the cpuset: the watch's reapply service puts the mixed set back.
    node.write(paths["rel"], "cpuset.cpus", "2-3")
    proc = ok(laid.run(exec_start(laid.root, "mixed-cpus-hook-reconcile@.service", CID)))
    assert node.read(paths["rel"], "cpuset.cpus") == "0-3", proc.stderr

    # The timer's, the configuration's and the start-up service: click's `reconcile --sync-watches`.
    for unit in ("mixed-cpus-hook-reconcile.service", "mixed-cpus-hook-config.service", "mixed-cpus-hook.service"):
        node.write(paths["rel"], "cpuset.cpus", "2-3")
        calls = len(laid.systemctl_log.read_text().splitlines())
        argv = exec_start(laid.root, unit)
        assert argv[:3] == [NOIMAGE_WATCHES_BIN, "reconcile-all", "--sync-watches"], unit
        proc = ok(laid.run(argv))
        assert node.read(paths["rel"], "cpuset.cpus") == "0-3", unit
        assert f"container {CID}: " in proc.stdout, unit
        # --sync-watches: the full sync asked systemd for the loaded watch units
        assert "list-units" in laid.systemctl_log.read_text().splitlines()[calls], unit
    with open(laid.metrics, encoding="utf-8") as f:
        assert "mixed_cpus_hook_containers_tracked 1\n" in f.read()

    # poststop: the release hook forgets the container.
    ok(laid.hook("mixed-cpus-hook-release.json", state))
    assert node.records("containers") == {}

    # What needs click says so in one line.
    proc = laid.run([NOIMAGE_BIN, "status"])
    assert proc.returncode == 1
    assert proc.stderr.startswith("mixed-cpus-hook: error: No module named 'mixed_cpus_hook.frontends.cli': this command "
                                  "needs the RPM (click, PyYAML)"), proc.stderr
    assert "Traceback" not in proc.stderr


def test_noimage_modules_are_all_that_runs(node: Any, tmp_path: Path) -> None:
    """The laid-out package is complete: each module it imports while running is one it ships."""
    node.add_container(CID)
    laid = Laid(node, tmp_path)
    lay_out(make_mc(node), laid.root)
    lib = node_path(laid.root, "/usr/local/lib/mixed-cpus-hook")
    probe = ("import sys; sys.path.insert(0, sys.argv[1]); import mixed_cpus_hook.frontends.entry, mixed_cpus_hook.frontends.systemd.watches, "
             "mixed_cpus_hook.usecases.apply, mixed_cpus_hook.usecases.metrics, mixed_cpus_hook.node.kubelet, "
             "mixed_cpus_hook.usecases.reconcile; "
             "print(' '.join(sorted(m.split('.', 1)[1].replace('.', '/') + ('/__init__' if hasattr(mod, '__path__') "
             "else '') for m, mod in sys.modules.items() if m.startswith('mixed_cpus_hook.'))))")
    proc = ok(subprocess.run(BARE + ["-c", probe, lib], capture_output=True, text=True))
    assert sorted(proc.stdout.split() + ["__init__"]) == sorted(NOIMAGE_MODULES)


# -- a configuration written as JSON -------------------------------------------------------------

JSON_CONFIGS = [
    pytest.param('{"failure_policy": "ignore"}', {"failure_policy": "ignore"}, id="json-object"),
    pytest.param('\n  {"allowed_namespaces": ["ran"], "shared_cpus": "0-1"}\n',
                 {"allowed_namespaces": ["ran"], "shared_cpus": "0-1"}, id="leading-whitespace"),
    pytest.param("{}", {}, id="empty-object"),
    pytest.param("failure_policy: ignore\n", NOT_JSON, id="yaml-is-not-json"),
    pytest.param("{failure_policy: ignore}", NOT_JSON, id="yaml-flow-mapping-goes-to-yaml"),
    pytest.param("# {json}\n{}", NOT_JSON, id="comment-first"),
]


@pytest.mark.parametrize("text,expected", JSON_CONFIGS)
def test_parse_json_config(text: str, expected: Any) -> None:
    assert parse_json_config(text, "c.yaml") == expected
    # Both paths give the same configuration.
    assert parse_config_text(text, "c.yaml") == parse_config_text(
        yaml.safe_dump(yaml.safe_load(text)) if expected is NOT_JSON else text, "c.yaml")


MALFORMED_JSON_CONFIGS: List[Tuple[str, str]] = [
    ('{"failure_policy": "maybe"}', "c.yaml: setting 'failure_policy'"),
    ('{"bogus": 1}', "unknown setting"),
    ('{"a": ' + "[" * 100000, "c.yaml: not valid YAML: nested too deeply"),
    ('{"a": [1,', "not valid YAML"),
]


@pytest.mark.parametrize("text,match", MALFORMED_JSON_CONFIGS, ids=["bad-value", "unknown-key", "nested-deeply",
                                                                   "truncated-json-goes-to-yaml"])
def test_json_config_refused(text: str, match: str) -> None:
    with pytest.raises(ConfigError, match=match):
        parse_config_text(text, "c.yaml")


def test_json_config_loads_without_yaml(tmp_path: Path) -> None:
    """load_config on a JSON file in a Python without PyYAML (the no-image node's)."""
    cfg = tmp_path / "config.yaml"
    cfg.write_text('{"failure_policy": "ignore", "allowed_namespaces": ["ran"]}\n')
    probe = ("import sys; sys.path.insert(0, sys.argv[1]); from mixed_cpus_hook.node.config import load_config; "
             "c = load_config(sys.argv[2], cache_dir=sys.argv[3]); print(c.failure_policy, c.allowed_namespaces, "
             "'yaml' in sys.modules)")
    src = os.path.dirname(os.path.dirname(__import__("mixed_cpus_hook").__file__))
    proc = ok(subprocess.run(BARE + ["-c", probe, src, str(cfg), str(tmp_path / "cache")], capture_output=True,
                             text=True))
    assert proc.stdout == "ignore ('ran',) False\n"
