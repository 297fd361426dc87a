"""`mixed-cpus-hook check`, the node doctor, on fake nodes: one healthy, and one broken per row.

A fake node here is the conftest's fake cgroup/sysfs tree plus kubelet's configuration and
CPU manager state, CRI-O's configuration and hooks dir, the preset and a fake systemctl that
answers `show` from a JSON file. Every row breaks one thing and names the finding it expects,
with its status, message and fix.
"""

from __future__ import annotations

import importlib
import importlib.util
import json
import os
import shutil
import stat
from pathlib import Path
from typing import Any, Callable, Dict, List, Optional

import pytest

from mixed_cpus_hook.ops import doctor
from mixed_cpus_hook.ops.doctor import (ERROR,
                                        OK,
                                        WARNING,
                                        Finding,
                                        Paths,
                                        compute_findings,
                                        flag_values,
                                        format_table,
                                        parse_toml,
                                        read_facts,
                                        when_problem,
                                        worst)

REPO = Path(__file__).resolve().parents[2]
PRESET = REPO / "rpm" / "90-mixed-cpus-hook.preset"
HOOKS_D = REPO / "hooks.d"
UNITS = doctor.parse_preset(PRESET.read_text())
UNIT = UNITS[0]
HEALTHY_UNIT = {"LoadState": "loaded", "UnitFileState": "enabled", "ActiveState": "active", "SubState": "waiting",
                "Type": "", "Result": "success"}

# `systemctl show --property=... -- UNIT` answered from <state>/<UNIT> (key=value lines); a
# <state>/<UNIT>.fail file makes it fail; an unknown unit is "not-found", as systemd says.
FAKE_SYSTEMCTL = """#!/bin/sh
[ "$1" = show ] || exit 2
case "$2" in --property=*) ;; *) exit 2 ;; esac
for unit; do :; done
if [ -e "{state}/$unit.fail" ]; then echo "Failed to connect to bus" >&2; exit 1; fi
if [ -f "{state}/$unit" ]; then cat "{state}/$unit"; exit 0; fi
printf 'LoadState=not-found\\nUnitFileState=\\nActiveState=inactive\\nSubState=dead\\nType=\\nResult=success\\n'
"""


class DoctorNode:
    """A fake node that the doctor reads (all paths under ``root``)."""

    def __init__(self, node: Any) -> None:
        self.node = node
        root = Path(node.root)
        self.root = root
        self.kubelet_config = root / "etc/kubernetes/kubelet.conf"
        self.kubelet_state = root / "var/lib/kubelet/cpu_manager_state"
        self.crio_config = root / "etc/crio/crio.conf"
        self.crio_dir = root / "etc/crio/crio.conf.d"
        self.hooks_dir = root / "usr/share/containers/oci/hooks.d"
        self.exe = root / "usr/bin/mixed-cpus-hook"
        self.preset = root / "usr/lib/systemd/system-preset/90-mixed-cpus-hook.preset"
        self.systemctl = root / "bin/systemctl"
        self.systemctl_state = root / "systemctl-state"
        self.isolated = Path(node.sys_root) / "devices/system/cpu/isolated"
        self.online = Path(node.sys_root) / "devices/system/cpu/online"
        for d in (self.kubelet_config.parent, self.kubelet_state.parent, self.crio_dir, self.hooks_dir,
                  self.exe.parent, self.preset.parent, self.systemctl.parent):
            d.mkdir(parents=True, exist_ok=True)
        self.write_kubelet()
        self.write_state()
        self.crio_config.write_text(
            "# The CRI-O configuration (a subset)\n[crio]\n\n[crio.runtime]\n"
            "default_runtime = \"crun\"  # comment\n"
            "cgroup_manager = \"systemd\"\n"
            f"hooks_dir = [\n  \"{self.hooks_dir}\",  # ours\n]\n"
            "[crio.runtime.runtimes.crun]\nruntime_path = '/usr/bin/crun'\nallowed_annotations = []\n")
        self.exe.write_text("#!/bin/sh\nexit 0\n")
        self.exe.chmod(0o755)
        self.install_hooks()
        self.preset.write_text(PRESET.read_text())
        self.isolated.write_text("\n")
        self.set_units({u: dict(HEALTHY_UNIT) for u in UNITS})
        self.systemctl.write_text(FAKE_SYSTEMCTL.format(state=str(self.systemctl_state)))
        self.systemctl.chmod(0o755)

    def write_kubelet(self, **changes: Any) -> None:
        doc = {"apiVersion": "kubelet.config.k8s.io/v1beta1", "kind": "KubeletConfiguration",
               "cpuManagerPolicy": "static", "reservedSystemCPUs": "0-3", "cgroupDriver": "systemd"}
        doc.update(changes)
        doc = {k: v for k, v in doc.items() if v is not None}
        # OpenShift writes JSON; YAML readers read it too.
        self.kubelet_config.write_text(json.dumps(doc, indent=2))

    def write_state(self, entries: Optional[Dict[str, Dict[str, str]]] = None, policy: str = "static") -> None:
        entries = {"0f1e2d3c-aaaa-bbbb-cccc-123456789abc": {"app": "4-5"}} if entries is None else entries
        self.node.write_checkpoint(entries, default="0-3,6-7", policy=policy, path=str(self.kubelet_state))

    def install_hooks(self, exe: Optional[str] = None) -> None:
        for src in sorted(HOOKS_D.glob("*.json")):
            doc = json.loads(src.read_text())
            doc["hook"]["path"] = exe or str(self.exe)
            (self.hooks_dir / src.name).write_text(json.dumps(doc, indent=2))

    def edit_hook(self, name: str, edit: Callable[[Dict[str, Any]], None]) -> None:
        path = self.hooks_dir / name
        doc = json.loads(path.read_text())
        edit(doc)
        path.write_text(json.dumps(doc))

    def set_units(self, units: Dict[str, Dict[str, str]], fail: Optional[List[str]] = None) -> None:
        if self.systemctl_state.exists():
            for p in self.systemctl_state.iterdir():
                p.unlink()
        self.systemctl_state.mkdir(exist_ok=True)
        for unit, props in units.items():
            (self.systemctl_state / unit).write_text("".join(f"{k}={v}\n" for k, v in props.items()))
        for unit in fail or []:
            (self.systemctl_state / f"{unit}.fail").write_text("")

    def set_unit(self, unit: str, **props: str) -> None:
        (self.systemctl_state / unit).write_text("".join(f"{k}={v}\n" for k, v in dict(HEALTHY_UNIT, **props).items()))

    def paths(self, **changes: Any) -> Paths:
        base = Paths(config=self.node.config_path, kubelet_config=str(self.kubelet_config),
                     kubelet_state=str(self.kubelet_state), crio_config=str(self.crio_config),
                     crio_config_dir=str(self.crio_dir), preset=str(self.preset), systemctl=str(self.systemctl),
                     detect=False, containerd_config=str(self.root / "etc/containerd/config.toml"),
                     nri_socket=str(self.root / "run/nri/nri.sock"), nri_plugin_dir=str(self.root / "opt/nri/plugins"))
        return base._replace(**changes)

    def argv(self, **changes: Any) -> List[str]:
        """The same as a `check` command line."""
        p = self.paths(**changes)
        argv = ["--config", p.config, "check", "--no-detect", "--preset", p.preset]
        for opt, value in (("--kubelet-config", p.kubelet_config), ("--kubelet-state", p.kubelet_state),
                           ("--crio-config", p.crio_config), ("--crio-config-dir", p.crio_config_dir),
                           ("--systemctl", p.systemctl)):
            if value:
                argv += [opt, value]
        return argv


@pytest.fixture(params=[1, 2], ids=["v1", "v2"])
def dnode(request: pytest.FixtureRequest, fake_node: Callable[..., Any]) -> DoctorNode:
    return DoctorNode(fake_node(version=request.param, online="0-7", shared="2-3"))


def findings_of(dn: DoctorNode, **paths: Any) -> List[Finding]:
    return compute_findings(read_facts(dn.paths(**paths)))


def by_check(findings: List[Finding], check: str) -> Finding:
    matches = [f for f in findings if f.check == check]
    assert matches, f"no finding {check!r} in {[f.check for f in findings]}"
    bad = [f for f in matches if f.status != OK]
    return bad[0] if bad else matches[0]


# -- healthy --------------------------------------------------------------------------------------

def test_healthy_node(dnode: DoctorNode) -> None:
    findings = findings_of(dnode)
    assert [f for f in findings if f.status != OK] == []
    checks = [f.check for f in findings]
    assert checks == (["config", "shared-cpus", "isolation", "kubelet-config", "cpu-manager-policy", "reserved-cpus",
                       "cpu-manager-state", "exclusive-source", "runtime", "crio-config", "hook-apply", "hook-release", "hook-bundle", "mode",
                       "crio-shared-cpuset"]
                      + [f"unit:{u}" for u in UNITS] + ["cgroup", "allowed-namespaces"])
    assert all(f.fix == "" for f in findings)
    assert by_check(findings, "shared-cpus").message.startswith("2-3 (from ")
    assert f"cgroup v{dnode.node.version}" in by_check(findings, "cgroup").message
    assert "CRI-O systemd" in by_check(findings, "cgroup").message and "kubelet systemd" in by_check(
        findings, "cgroup").message
    assert str(dnode.crio_config) in by_check(findings, "crio-config").message
    assert worst(findings) == OK


def test_healthy_node_cli(dnode: DoctorNode, run_cli: Any) -> None:
    res = run_cli(dnode.argv())
    assert res.code == 0, res.out + res.err
    lines = res.out.splitlines()
    assert lines[0].split() == ["CHECK", "STATUS", "FINDING"]
    assert lines[-1] == "0 error(s), 0 warning(s)"
    assert "fix:" not in res.out
    res = run_cli(dnode.argv() + ["--json"])
    assert res.code == 0
    doc = json.loads(res.out)
    assert all(set(item) == {"check", "status", "message", "fix"} for item in doc)
    assert {item["status"] for item in doc} == {"ok"}


# -- broken, one thing per row --------------------------------------------------------------------

def _bad_config(dn: DoctorNode) -> None:
    dn.node.configure(failure_policy="sometimes")


def _no_shared_file(dn: DoctorNode) -> None:
    os.unlink(dn.node.shared_file)


def _offline(dn: DoctorNode) -> None:
    dn.online.write_text("0-2\n")


def _isolated(dn: DoctorNode) -> None:
    dn.isolated.write_text("3-7\n")


def _hooks_elsewhere(dn: DoctorNode) -> None:
    (dn.crio_dir / "10-hooks.conf").write_text("[crio.runtime]\nhooks_dir = [\"/nonexistent/hooks.d\"]\n")


def _exe_not_executable(dn: DoctorNode) -> None:
    dn.exe.chmod(0o644)


def _exe_missing(dn: DoctorNode) -> None:
    dn.install_hooks(exe=str(dn.root / "nonexistent/mixed-cpus-hook"))


def _unreadable_hook(dn: DoctorNode) -> None:
    (dn.hooks_dir / "mixed-cpus-hook.json").write_text("{not json")


def _wrong_stage(dn: DoctorNode) -> None:
    dn.edit_hook("mixed-cpus-hook.json", lambda d: d.update(stages=["prestart"]))


def _custom_prefix(dn: DoctorNode) -> None:
    dn.node.configure(annotation_prefix="cpus.example.com")


def _no_when(dn: DoctorNode) -> None:
    dn.edit_hook("mixed-cpus-hook-release.json", lambda d: d.update(when={}))


def _crio_syntax(dn: DoctorNode) -> None:
    (dn.crio_dir / "20-bad.conf").write_text("[crio.runtime\nhooks_dir = 1\n")


def _crio_shared_cpuset(dn: DoctorNode) -> None:
    (dn.crio_dir / "05-shared.conf").write_text('[crio.runtime]\nshared_cpuset = "0-1"\n')


def _nri_without_runtime(dn: DoctorNode) -> None:
    dn.set_unit(doctor.NRI_UNIT)
    for p in dn.hooks_dir.iterdir():
        p.unlink()


def _driver_mismatch(dn: DoctorNode) -> None:
    dn.write_kubelet(cgroupDriver="cgroupfs")


def _driver_default(dn: DoctorNode) -> None:
    dn.write_kubelet(cgroupDriver=None)  # KubeletConfiguration's default is cgroupfs


def _no_cgroup(dn: DoctorNode) -> None:
    empty = dn.root / "empty-cgroup"
    empty.mkdir()
    dn.node.configure(cgroup_root=str(empty))


CASES = [
    # (id, break, check, status, in message, in fix)
    ("config-invalid", _bad_config, "config", ERROR, "failure_policy", "correct that setting"),
    ("shared-file-missing", _no_shared_file, "shared-cpus", ERROR, "shared-CPU file not found",
     "write the node's shared cpulist"),
    ("shared-offline", _offline, "shared-cpus", ERROR, "3 not online", "bring CPU(s) 3 online"),
    ("shared-isolated", _isolated, "isolation", ERROR, "shared CPU(s) 3 are isolated", "take 3 out of isolcpus="),
    ("policy-none", lambda dn: dn.write_kubelet(cpuManagerPolicy="none"), "cpu-manager-policy", ERROR,
     "cpuManagerPolicy is 'none'", "set cpuManagerPolicy: static"),
    ("policy-unset", lambda dn: dn.write_kubelet(cpuManagerPolicy=None), "cpu-manager-policy", ERROR,
     "cpuManagerPolicy is 'none'", "set cpuManagerPolicy: static"),
    ("reserved-unset", lambda dn: dn.write_kubelet(reservedSystemCPUs=None), "reserved-cpus", ERROR,
     "reservedSystemCPUs is not set", "set reservedSystemCPUs to a set that includes 2-3"),
    ("reserved-short", lambda dn: dn.write_kubelet(reservedSystemCPUs="0-2"), "reserved-cpus", ERROR,
     "lacks shared CPU(s) 3", "add 3 to reservedSystemCPUs, then drain the node"),
    ("reserved-garbage", lambda dn: dn.write_kubelet(reservedSystemCPUs="two"), "reserved-cpus", ERROR,
     "is not a cpulist", "correct reservedSystemCPUs"),
    ("kubelet-config-missing", lambda dn: dn.kubelet_config.unlink(), "kubelet-config", ERROR, "not found",
     "--kubelet-config"),
    ("kubelet-config-kubeconfig", lambda dn: dn.kubelet_config.write_text("apiVersion: v1\nkind: Config\n"),
     "kubelet-config", ERROR, "not a KubeletConfiguration", "--kubelet-config"),
    ("kubelet-config-garbage", lambda dn: dn.kubelet_config.write_text("a: [\n"), "kubelet-config", ERROR,
     "cannot read", "--kubelet-config"),
    ("state-overlap", lambda dn: dn.write_state({"pod-1": {"app": "3-4", "side": "6"}, "pod-2": {"x": "2"}}),
     "cpu-manager-state", ERROR, "pod pod-1 container app: 3; pod pod-2 container x: 2",
     "remove " ),
    ("state-policy", lambda dn: dn.write_state(policy="none"), "cpu-manager-state", ERROR,
     "policyName 'none' but kubelet is configured with 'static'", "stop kubelet, remove"),
    ("state-missing", lambda dn: dn.kubelet_state.unlink(), "cpu-manager-state", ERROR, "not found",
     "--kubelet-state"),
    ("state-garbage", lambda dn: dn.kubelet_state.write_text("{"), "cpu-manager-state", ERROR, "cannot read",
     "--kubelet-state"),
    ("hooks-dir-empty", lambda dn: [p.unlink() for p in dn.hooks_dir.iterdir()], "hook-apply", ERROR,
     "runs `mixed-cpus-hook apply` at createRuntime", "install mixed-cpus-hook.json"),
    ("release-missing", lambda dn: (dn.hooks_dir / "mixed-cpus-hook-release.json").unlink(), "hook-release", ERROR,
     "runs `mixed-cpus-hook release` at poststop", "install mixed-cpus-hook-release.json"),
    ("hooks-dir-elsewhere", _hooks_elsewhere, "hook-apply", ERROR, "(/nonexistent/hooks.d)",
     "into /nonexistent/hooks.d"),
    ("hook-not-executable", _exe_not_executable, "hook-apply", ERROR, "is not an executable file",
     "install the executable at"),
    ("hook-exe-missing", _exe_missing, "hook-release", ERROR, "is not an executable file",
     "install the executable at"),
    ("hook-unreadable", _unreadable_hook, "hook-apply", ERROR, "mixed-cpus-hook.json: cannot read",
     "install mixed-cpus-hook.json"),
    ("hook-wrong-stage", _wrong_stage, "hook-apply", ERROR, "at createRuntime", "install mixed-cpus-hook.json"),
    ("hook-prefix", _custom_prefix, "hook-apply", ERROR, "the hook never runs",
     "\"^cpus\\.example\\.com/.+$\": \".*\""),
    ("hook-no-when", _no_when, "hook-release", ERROR, "sets no condition", "make a \"when\" annotations key match"),
    ("crio-syntax", _crio_syntax, "crio-config", WARNING, "20-bad.conf: line 1", "correct the file"),
    ("unit-disabled", lambda dn: dn.set_unit(UNIT, UnitFileState="disabled", ActiveState="inactive"),
     f"unit:{UNIT}", ERROR, "disabled, inactive", f"systemctl enable --now {UNIT}"),
    ("unit-failed", lambda dn: dn.set_unit(UNIT, ActiveState="failed", Result="trigger-limit-hit"),
     f"unit:{UNIT}", ERROR, "failed (trigger-limit-hit)", f"journalctl -u {UNIT}"),
    ("unit-stopped", lambda dn: dn.set_unit(UNIT, ActiveState="inactive", SubState="dead"), f"unit:{UNIT}", ERROR,
     "enabled, inactive (dead)", f"systemctl start {UNIT}"),
    ("unit-not-found", lambda dn: dn.set_units({}), f"unit:{UNIT}", ERROR, "not loaded (not-found)",
     "install the RPM"),
    ("unit-systemctl-fails", lambda dn: dn.set_units({u: HEALTHY_UNIT for u in UNITS}, fail=[UNIT]),
     f"unit:{UNIT}", ERROR, "Failed to connect to bus", "systemctl status"),
    ("preset-missing", lambda dn: dn.preset.unlink(), "units", WARNING, "checked the built-in list",
     "ships the preset"),
    ("driver-mismatch", _driver_mismatch, "cgroup", ERROR, "CRI-O systemd (from", "same value (systemd)"),
    ("driver-default", _driver_default, "cgroup", ERROR, "kubelet cgroupfs: they differ", "same value"),
    ("no-cgroup", _no_cgroup, "cgroup", ERROR, "no cgroup v1 cpuset hierarchy and no cgroup v2", "cgroup_root"),
    ("crio-shared-cpuset", _crio_shared_cpuset, "crio-shared-cpuset", WARNING,
     "shared_cpuset = '0-1' (from", "remove shared_cpuset"),
    ("mode-both", lambda dn: dn.set_unit(doctor.NRI_UNIT), "mode", WARNING, "both modes are set up",
     f"systemctl disable --now {doctor.NRI_UNIT}"),
    ("mode-nri-no-runtime", _nri_without_runtime, "mode", ERROR, "no runtime calls it", "enable_nri = true"),
]


@pytest.mark.parametrize("case", CASES, ids=[c[0] for c in CASES])
def test_broken_node(dnode: DoctorNode, case: tuple) -> None:
    _id, breaker, check, status, in_message, in_fix = case
    breaker(dnode)
    findings = findings_of(dnode)
    f = by_check(findings, check)
    assert f.status == status, f
    assert in_message in f.message, f.message
    assert in_fix in f.fix, f.fix
    # Every finding that is not ok says what to do.
    assert all(x.fix for x in findings if x.status != OK), [x for x in findings if x.status != OK and not x.fix]
    assert worst(findings) == status


@pytest.mark.parametrize("case", [c for c in CASES if c[0] in (
    "shared-isolated", "reserved-short", "state-overlap", "hook-prefix", "unit-failed", "crio-syntax")],
    ids=lambda c: c[0])
def test_broken_node_cli(dnode: DoctorNode, run_cli: Any, case: tuple) -> None:
    _id, breaker, check, status, in_message, in_fix = case
    breaker(dnode)
    res = run_cli(dnode.argv())
    assert res.code == (1 if status == ERROR else 0), res.out + res.err
    row = [line for line in res.out.splitlines() if line.startswith(check + " ")]
    assert row and status.upper() in row[0] and in_message in row[0]
    assert any(line.strip() == f"fix: {by_check(findings_of(dnode), check).fix}" for line in res.out.splitlines())
    doc = json.loads(run_cli(dnode.argv() + ["--json"]).out)
    assert any(d["check"] == check and d["status"] == status and d["fix"] for d in doc)


# -- units: skipped, oneshot ------------------------------------------------------------------------

def test_units_skipped_without_systemd(dnode: DoctorNode, tmp_path: Path, run_cli: Any) -> None:
    findings = findings_of(dnode, systemctl=None, systemd_run_dir=str(tmp_path / "no-systemd"))
    f = by_check(findings, "units")
    assert f.status == WARNING and "systemd is not PID 1" in f.message and "--systemctl" in f.fix
    assert not [x for x in findings if x.check.startswith("unit:")]
    assert worst(findings) == WARNING
    res = run_cli(dnode.argv(systemctl=None) + ["--no-systemd"])
    assert res.code == 0, res.out
    assert "units not checked: skipped on request (--no-systemd)" in res.out
    assert res.out.splitlines()[-1] == "0 error(s), 1 warning(s)"


def test_units_systemctl_not_runnable(dnode: DoctorNode) -> None:
    f = by_check(findings_of(dnode, systemctl=str(dnode.root / "nonexistent/systemctl")), "units")
    assert f.status == WARNING and "cannot run" in f.message


def test_finished_oneshot_service_is_fine() -> None:
    def unit_facts(**props: str) -> Dict[str, Any]:
        return {"skipped": None, "preset_note": None, "checked": ["x.service"], "units": {"x.service": dict(
            HEALTHY_UNIT, **props)}}

    fine = doctor._unit_findings({"units": unit_facts(Type="oneshot", ActiveState="inactive", SubState="dead")})
    assert fine == [Finding("unit:x.service", OK, "enabled, inactive (dead)")]
    failed = doctor._unit_findings({"units": unit_facts(Type="oneshot", ActiveState="inactive", Result="exit-code")})
    assert failed[0].status == ERROR and failed[0].fix == "systemctl start x.service"
    static = doctor._unit_findings({"units": unit_facts(UnitFileState="static")})
    assert static[0].status == OK


# -- kubelet and CRI-O found through their command lines (psutil) ------------------------------------

def test_paths_from_command_lines(dnode: DoctorNode, monkeypatch: pytest.MonkeyPatch) -> None:
    root_dir = dnode.root / "kubelet-root"
    root_dir.mkdir()
    (root_dir / "cpu_manager_state").write_text(json.dumps({"policyName": "static", "entries": {
        "p": {"c": "2"}}}))
    conf_dir = dnode.root / "crio-d"
    conf_dir.mkdir()
    (conf_dir / "00-default.conf").write_text("[crio.runtime]\ncgroup_manager = 'cgroupfs'\n")
    argvs = {
        "kubelet": ["/usr/bin/kubelet", "--config=" + str(dnode.kubelet_config), "--root-dir", str(root_dir),
                    "--reserved-cpus=0-2", "--cgroup-driver", "cgroupfs"],
        "crio": ["/usr/bin/crio", "--config", str(dnode.root / "none.conf"), "-d", str(conf_dir),
                 "--hooks-dir", str(dnode.hooks_dir)],
    }
    monkeypatch.setattr(doctor, "process_args", lambda name: argvs.get(name))
    facts = read_facts(dnode.paths(kubelet_config=None, kubelet_state=None, crio_config=None, crio_config_dir=None,
                                   detect=True))
    assert facts["kubelet"]["config_path"] == str(dnode.kubelet_config)
    assert facts["kubelet"]["config_source"] == "kubelet's command line"
    assert facts["kubelet"]["state_path"] == str(root_dir / "cpu_manager_state")
    assert facts["crio"]["files"] == [str(conf_dir / "00-default.conf")]
    assert facts["crio"]["hooks_dir_source"] == "crio's command line"
    findings = compute_findings(facts)
    # --reserved-cpus on the command line overrides the file's 0-3.
    assert "lacks shared CPU(s) 3" in by_check(findings, "reserved-cpus").message
    assert "pod p container c: 2" in by_check(findings, "cpu-manager-state").message
    assert "CRI-O cgroupfs" in by_check(findings, "cgroup").message
    assert by_check(findings, "cgroup").status == OK
    assert by_check(findings, "hook-apply").status == OK


def test_defaults_when_nothing_is_found(dnode: DoctorNode, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(doctor, "DEFAULT_KUBELET_CONFIGS", (str(dnode.root / "nope.yaml"),))
    monkeypatch.setattr(doctor, "DEFAULT_KUBELET_ROOT", str(dnode.root / "nope"))
    findings = findings_of(dnode, kubelet_config=None, kubelet_state=None)
    k = by_check(findings, "kubelet-config")
    assert k.status == WARNING and "no KubeletConfiguration found" in k.message
    s = by_check(findings, "cpu-manager-state")
    assert s.status == WARNING and "(from default): not found" in s.message
    assert not [f for f in findings if f.check in ("cpu-manager-policy", "reserved-cpus")]


def test_process_args(monkeypatch: pytest.MonkeyPatch) -> None:
    import psutil

    # A real scan finds some process with this process's name (maybe this one) and its argv.
    argv = doctor.process_args(psutil.Process().name())
    assert argv and all(isinstance(a, str) for a in argv)
    assert doctor.process_args("no-such-process-name-xyz") is None

    class Proc:
        def __init__(self, name: str, cmdline: Optional[List[str]]) -> None:
            self.info = {"name": name, "cmdline": cmdline}

    procs = [Proc("systemd", ["/sbin/init"]), Proc("crio", None), Proc("hyperkube", ["/usr/bin/kubelet", "--v=2"]),
             Proc("crio", ["/usr/bin/crio", "--config", "/x"])]
    monkeypatch.setattr(psutil, "process_iter", lambda attrs=None: iter(procs))
    assert doctor.process_args("kubelet") == ["/usr/bin/kubelet", "--v=2"]  # by argv[0]
    assert doctor.process_args("crio") == ["/usr/bin/crio", "--config", "/x"]  # skips the one without cmdline


def test_flag_values() -> None:
    argv = ["kubelet", "--config", "/a", "--config=/b", "-c", "/c", "--configx=/d", "--config"]
    assert flag_values(argv, "--config") == ["/a", "/b"]
    assert flag_values(argv, "--config", "-c") == ["/a", "/b", "/c"]
    assert flag_values(["crio"], "--config") == []


# -- TOML: the real parser (tomllib on 3.11+, tomli on RHEL 9's 3.9) ---------------------------------

TOML_PARSERS = [name for name in ("tomllib", "tomli", "toml") if importlib.util.find_spec(name)]


@pytest.fixture(params=TOML_PARSERS)
def toml_parser(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """parse_toml with each parser installed here (the doctor takes the first it finds)."""
    mod = importlib.import_module(request.param)
    monkeypatch.setattr(doctor, "_toml_module", lambda: mod)
    return request.param


def test_toml(toml_parser: str) -> None:
    text = "\n".join([
        "# comment",
        "top = 1",
        "[crio]",
        'root = "/var/lib/containers/storage"  # trailing',
        "storage_option = [",
        '    "overlay.mountopt=nodev",  # a comment inside',
        "    'literal\\no-escape',",
        "]",
        "[ crio.runtime ]",
        'hooks_dir = ["/a", "/b",]',
        'shared_cpuset = "0-1,50"',
        "pids_limit = 0x10",
        "read_only = false",
        'inline = { a = "}", b = [1, 2] }',
        'dotted.key = "v"',
        "[crio.runtime.runtimes.runc]",
        'runtime_path = ""',
        "[crio.nri]",
        "enable_nri = true",
        "",
    ])
    t = parse_toml(text)
    assert t["top"] == 1
    assert t["crio"]["storage_option"] == ["overlay.mountopt=nodev", "literal\\no-escape"]
    rt = doctor.toml_get(t, "crio.runtime")
    assert rt["hooks_dir"] == ["/a", "/b"] and rt["shared_cpuset"] == "0-1,50"
    assert rt["pids_limit"] == 16 and rt["read_only"] is False and rt["inline"] == {"a": "}", "b": [1, 2]}
    assert rt["dotted"] == {"key": "v"} and rt["runtimes"]["runc"] == {"runtime_path": ""}
    assert doctor.toml_get(t, "crio.nri.enable_nri") is True
    assert doctor.toml_get(t, "crio.missing.key") is None


@pytest.mark.parametrize("text,line", [
    ("[crio.runtime\n", 1),
    ("a = 1\nb = \"open\n", 2),
    ("a = [1 2]\n", 1),
    ("a 1\n", 1),
    ("x = 1\na = 1 b = 2\n", 2),
    ("a = 1\na = 2\n", 2),
])
def test_toml_errors(toml_parser: str, text: str, line: int) -> None:
    with pytest.raises(doctor.TomlError, match=f"^line {line}, column \\d+: "):
        parse_toml(text)


def test_toml_without_parser(monkeypatch: pytest.MonkeyPatch) -> None:
    def missing() -> None:
        raise ImportError("no")

    monkeypatch.setattr(doctor, "_toml_module", missing)
    with pytest.raises(doctor.TomlError, match="no TOML parser"):
        parse_toml("a = 1")


@pytest.mark.parametrize("enable", ["crio", "containerd", "socket"])
def test_nri_mode(dnode: DoctorNode, enable: str) -> None:
    """NRI mode: the plugin's unit active and the runtime serving NRI; no hooks.d file needed then."""
    dnode.set_unit(doctor.NRI_UNIT)
    for p in dnode.hooks_dir.iterdir():
        p.unlink()
    if enable == "crio":
        (dnode.crio_dir / "10-nri.conf").write_text("[crio.nri]\nenable_nri = true\n")
    elif enable == "containerd":
        path = dnode.root / "etc/containerd/config.toml"
        path.parent.mkdir(parents=True)
        path.write_text('version = 2\n[plugins."io.containerd.nri.v1.nri"]\n  disable = false\n')
    else:
        (dnode.root / "run/nri").mkdir(parents=True)
        (dnode.root / "run/nri/nri.sock").write_text("")
    findings = compute_findings(read_facts(dnode.paths()))
    mode = by_check(findings, "mode")
    assert (mode.status, mode.message.split(":")[0]) == (OK, "NRI mode"), mode
    assert by_check(findings, "hook-apply").status == OK and "not needed in NRI mode" in by_check(
        findings, "hook-apply").message
    assert worst(findings) == OK, [f for f in findings if f.status != OK]


def test_neither_mode(dnode: DoctorNode) -> None:
    for p in dnode.hooks_dir.iterdir():
        p.unlink()
    f = by_check(compute_findings(read_facts(dnode.paths())), "mode")
    assert f.status == WARNING and "neither mode is set up" in f.message and "install the hooks.d files" in f.fix


def test_crio_shared_cpuset_differs(dnode: DoctorNode) -> None:
    (dnode.crio_dir / "05-shared.conf").write_text('[crio.runtime]\nshared_cpuset = "4-5"\n')
    f = by_check(compute_findings(read_facts(dnode.paths())), "crio-shared-cpuset")
    assert f.status == WARNING and "differ from this product's shared CPUs 2-3" in f.message, f


# -- pure pieces -------------------------------------------------------------------------------------

@pytest.mark.parametrize("when,prefix,problem", [
    ({"annotations": {"^mixed-cpus\\.openshift\\.io/.+$": ".*"}}, "mixed-cpus.openshift.io", None),
    ({"annotations": {"^mixed-cpus\\.openshift\\.io/.+$": ".*"}}, "example.com", "never runs"),
    ({"annotations": {"^mixed-cpus\\.openshift\\.io/.+$": "^disable$"}}, "mixed-cpus.openshift.io", "never runs"),
    ({"always": True}, "example.com", None),
    ({"always": False}, "example.com", "sets no condition"),
    ({}, "x", "sets no condition"),
    ({"commands": [".*/sleep$"]}, "x", None),
    ({"annotations": {"(": ".*"}}, "x", "not a regular expression"),
    ({"annotations": ["x"]}, "x", "not an object"),
])
def test_when_problem(when: Any, prefix: str, problem: Optional[str]) -> None:
    got = when_problem(when, prefix)
    assert (got is None) if problem is None else (problem in (got or ""))


NAMESPACES = [
    pytest.param(["ran", "du-*"], OK, "ran, du-* (from {config})", "", id="listed"),
    pytest.param(["ran", "*"], WARNING, "\"*\": every namespace may ask", "instead of \"*\"", id="star-warns"),
    pytest.param([], WARNING, "none listed: no pod may ask for mixed CPUs", "'allowed_namespaces' ({config})",
                 id="empty-warns"),
]


@pytest.mark.parametrize("allowed,status,message,fix", NAMESPACES)
def test_allowed_namespaces(dnode: DoctorNode, allowed: List[str], status: str, message: str, fix: str) -> None:
    dnode.node.configure(allowed_namespaces=allowed)
    f = by_check(findings_of(dnode), "allowed-namespaces")
    config = dnode.node.config_path
    assert (f.status, message.format(config=config) in f.message, fix.format(config=config) in f.fix) == (
        status, True, True), f


PROBES = [
    pytest.param("kept", OK, "pins survive a cpuset shrink and regrow (kernel 6.18, cgroup v1: seen)", "",
                 id="kept"),
    pytest.param("widened", WARNING, "pins are lost when a cpuset shrinks and regrows (kernel 6.18, cgroup v1: seen)",
                 "use NRI mode (`systemctl enable --now mixed-cpus-hook-nri.service`), which never shrinks the set",
                 id="widened-says-nri-mode"),
    pytest.param("cannot-tell", WARNING, "cannot tell whether pins survive", "as root", id="cannot-tell"),
]


@pytest.mark.parametrize("verdict,status,message,fix", PROBES)
def test_thread_affinity_finding(dnode: DoctorNode, verdict: str, status: str, message: str, fix: str) -> None:
    facts = read_facts(dnode.paths())
    assert facts["thread_affinity"] is None  # a fake node has no cgroup mount: the probe does not run
    assert "thread-affinity" not in [f.check for f in compute_findings(facts)]
    facts["thread_affinity"] = {"verdict": verdict, "detail": "seen", "kernel": "6.18", "cgroup_version": 1}
    f = by_check(compute_findings(facts), "thread-affinity")
    assert (f.status, message in f.message, fix in f.fix) == (status, True, True), f


def test_format_table() -> None:
    table = format_table([Finding("config", OK, "fine"), Finding("a-longer-check", ERROR, "bad", "do this"),
                          Finding("w", WARNING, "hm", "maybe that")])
    assert table.splitlines() == [
        "CHECK           STATUS   FINDING",
        "config          ok       fine",
        "a-longer-check  ERROR    bad",
        "                         fix: do this",
        "w               WARNING  hm",
        "                         fix: maybe that",
        "1 error(s), 1 warning(s)",
    ]


def test_hooks_d_files_of_the_repo_pass(tmp_path: Path) -> None:
    """The shipped hooks.d files themselves: the right stages and args, and a `when` that matches."""
    entries = doctor.read_hook_files([str(HOOKS_D)])
    kinds = {(tuple(e["stages"]), e["args"][-1]) for e in entries}
    assert kinds == {(("createRuntime",), "apply"), (("poststop",), "release")}
    for e in entries:
        assert e["path"] == "/usr/bin/mixed-cpus-hook"
        assert when_problem(e["when"], "mixed-cpus.openshift.io") is None


def test_executable_bits_matter(tmp_path: Path) -> None:
    exe = tmp_path / "mixed-cpus-hook"
    exe.write_text("#!/bin/sh\n")
    exe.chmod(stat.S_IRUSR)
    (tmp_path / "h.json").write_text(json.dumps({"version": "1.0.0", "hook": {"path": str(exe), "args": [
        "mixed-cpus-hook", "apply"]}, "when": {"always": True}, "stages": ["createRuntime"]}))
    (tmp_path / "other.json").write_text(json.dumps({"hook": {"path": "/usr/bin/other"}}))
    (tmp_path / "broken-other.json").write_text("{")
    entries = doctor.read_hook_files([str(tmp_path)])
    assert [e["file"] for e in entries] == [str(tmp_path / "h.json")]
    assert entries[0]["path_ok"] is False  # not even root may execute a file without an x bit


# -- a containerd node ------------------------------------------------------------------------------

CONTAINERD_V2 = """version = 2
[plugins."io.containerd.nri.v1.nri"]
  disable = false
  socket_path = "{socket}"
[plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
  SystemdCgroup = {systemd}
"""


def containerd_node(dn: DoctorNode, systemd: str = "true", keep_hooks: bool = False) -> Path:
    """CRI-O's files gone, containerd's config (NRI on, its own socket path), kubelet pointed at containerd."""
    dn.crio_config.unlink()
    if not keep_hooks:
        for p in dn.hooks_dir.iterdir():
            p.unlink()
    socket = dn.root / "run/containerd-nri/nri.sock"
    socket.parent.mkdir(parents=True)
    socket.write_text("")
    path = dn.root / "etc/containerd/config.toml"
    path.parent.mkdir(parents=True)
    path.write_text(CONTAINERD_V2.format(socket=socket, systemd=systemd))
    dn.write_kubelet(containerRuntimeEndpoint="unix:///run/containerd/containerd.sock")
    dn.set_units({doctor.NRI_UNIT: dict(HEALTHY_UNIT, SubState="running")})
    (dn.root / "nri.preset").write_text(f"enable {doctor.NRI_UNIT}\n")
    return socket


def test_containerd_node(dnode: DoctorNode) -> None:
    """containerd: its driver and NRI socket, no CRI-O or hooks.d finding, NRI mode."""
    socket = containerd_node(dnode)
    findings = findings_of(dnode, nri_socket=None, preset=str(dnode.root / "nri.preset"))
    assert [f for f in findings if f.status != OK] == []
    checks = [f.check for f in findings]
    assert "runtime" in checks and not {"crio-config", "hook-apply", "hook-release", "crio-shared-cpuset"} & set(checks)
    assert by_check(findings, "runtime").message.startswith("containerd (kubelet's containerRuntimeEndpoint")
    cgroup = by_check(findings, "cgroup").message
    assert "containerd systemd (SystemdCgroup = true" in cgroup and "CRI-O" not in cgroup, cgroup
    assert f"the runtime's NRI socket {socket} exists" in by_check(findings, "mode").message


def test_containerd_driver_mismatch(dnode: DoctorNode) -> None:
    containerd_node(dnode, systemd="false")
    f = by_check(findings_of(dnode, nri_socket=None, preset=str(dnode.root / "nri.preset")), "cgroup")
    assert f.status == ERROR and "containerd cgroupfs" in f.message and "kubelet systemd" in f.message, f
    assert "SystemdCgroup" in f.fix


def test_containerd_node_with_hooks_d_files(dnode: DoctorNode) -> None:
    """hooks.d files do nothing under containerd: one node, one mode says remove them."""
    containerd_node(dnode, keep_hooks=True)
    f = by_check(findings_of(dnode, nri_socket=None, preset=str(dnode.root / "nri.preset"),
                             hooks_dirs=(str(dnode.hooks_dir),)), "hooks-d")
    assert f.status == WARNING and "containerd runs no hooks.d files" in f.message, f
    assert "make uninstall MODE=hook" in f.fix or "hook-mode" in f.fix


def test_containerd_node_cli(dnode: DoctorNode, run_cli: Any) -> None:
    socket = containerd_node(dnode)
    argv = dnode.argv(preset=str(dnode.root / "nri.preset"))
    res = run_cli(argv + ["--containerd-config", str(dnode.root / "etc/containerd/config.toml"),
                          "--nri-socket", str(socket)])
    assert res.code == 0, res.out + res.err
    assert "containerd systemd" in res.out and "CRI-O" not in res.out, res.out


RUNTIMES = [
    pytest.param({"kubelet_endpoint": "unix:///var/run/crio/crio.sock", "containerd_running": True}, "crio",
                 "kubelet's", id="kubelet-endpoint-wins-over-processes"),
    pytest.param({"containerd_running": True}, "containerd", "running", id="containerd-process"),
    pytest.param({"crio_running": True, "containerd_running": True}, "crio", "running", id="both-running-crio"),
    pytest.param({"containerd_config": True}, "containerd", "config.toml", id="containerd-config-file-only"),
    pytest.param({"crio_files": True, "containerd_config": True}, "crio", "crio.conf", id="crio-files-first"),
    pytest.param({}, None, "no container runtime", id="nothing-found"),
]


@pytest.mark.parametrize("seen,runtime,why", RUNTIMES)
def test_compute_runtime(seen: Dict[str, Any], runtime: Optional[str], why: str) -> None:
    facts = {"kubelet": {"flags": {}, "config": {"containerRuntimeEndpoint": seen.get("kubelet_endpoint")}},
             "crio": {"running": seen.get("crio_running", False),
                      "files": ["/etc/crio/crio.conf"] if seen.get("crio_files") else []},
             "mode": {"containerd_running": seen.get("containerd_running", False),
                      "containerd_config": "/etc/containerd/config.toml" if seen.get("containerd_config") else None}}
    got, because = doctor.compute_runtime(facts)
    assert got == runtime and why in because, because


def test_no_probe(dnode: DoctorNode, run_cli: Any) -> None:
    """--no-probe: no scratch cgroup, no thread-affinity file; the report says it was not probed."""
    facts = read_facts(dnode.paths(probe=False))
    f = by_check(compute_findings(facts), "thread-affinity")
    assert f.status == OK and "not probed (--no-probe)" in f.message
    assert not os.path.exists(os.path.join(dnode.node.state_dir, "thread-affinity"))


def test_the_probe_says_what_it_wrote(dnode: DoctorNode) -> None:
    facts = read_facts(dnode.paths())
    facts["thread_affinity"] = {"verdict": "kept", "detail": "seen", "kernel": "6.18", "cgroup_version": 1,
                                "scratch": "/sys/fs/cgroup/cpuset/mixed-cpus-hook-affinity-probe-7",
                                "saved": "/run/mixed-cpus-hook/thread-affinity"}
    f = by_check(compute_findings(facts), "thread-affinity")
    assert ("made and removed the scratch cgroup /sys/fs/cgroup/cpuset/mixed-cpus-hook-affinity-probe-7" in f.message
            and "wrote the verdict to /run/mixed-cpus-hook/thread-affinity" in f.message), f


def test_units_of_the_installed_mode_s_preset(dnode: DoctorNode, monkeypatch: pytest.MonkeyPatch) -> None:
    """Without --preset: the units of whichever mode's preset is installed (an NRI node has no hook-mode one)."""
    presets = dnode.root / "usr/lib/systemd/system-preset"
    dnode.preset.unlink()
    (presets / "90-mixed-cpus-hook-nri.preset").write_text(f"enable {doctor.NRI_UNIT}\n")
    monkeypatch.setattr(doctor, "PRESET_PATHS", (str(presets / "90-mixed-cpus-hook.preset"),
                                                 str(presets / "90-mixed-cpus-hook-nri.preset")))
    dnode.set_units({doctor.NRI_UNIT: dict(HEALTHY_UNIT, SubState="running")})
    findings = findings_of(dnode, preset=None)
    assert [f.check for f in findings if f.check.startswith("unit")] == [f"unit:{doctor.NRI_UNIT}"]
    for p in presets.iterdir():
        p.unlink()
    f = by_check(findings_of(dnode, preset=None), "units")
    assert f.status == WARNING and "no preset of either mode is installed" in f.message, f


# -- the pool (shared_cpus: pool) ----------------------------------------------------------------

def pool_node(dn: DoctorNode, source: str = "dra", mode: str = "nri") -> None:
    """shared_cpus: pool with reserved_cpus 0-1; kubelet set up for the source (none beside the CPU DRA driver;
    static with reservedSystemCPUs = reserved_cpus and its checkpoint); NRI mode on containerd, or hook mode."""
    dn.node.configure(shared_cpus="pool", exclusive_source=source, reserved_cpus="0-1")
    kubelet = {"cpuManagerPolicy": "none"} if source == "dra" else {"reservedSystemCPUs": "0-1"}
    if mode == "nri":
        containerd_node(dn)
        kubelet["containerRuntimeEndpoint"] = "unix:///run/containerd/containerd.sock"
    dn.write_kubelet(**kubelet)
    if source == "dra":
        dn.write_state(entries={}, policy="none")
        dn.node.write_cdi_claim(CLAIM_UID, "4-5")  # the CPU DRA driver's prepare of one claim
    else:
        dn.node.write_checkpoint({"0f1e2d3c-aaaa-bbbb-cccc-123456789abc": {"app": "4-5"}}, default="0-3,6-7")


CLAIM_UID = "0f1e2d3c-aaaa-bbbb-cccc-123456789abc"


def pool_findings(dn: DoctorNode, **paths: Any) -> List[Finding]:
    return findings_of(dn, nri_socket=None, preset=str(dn.root / "nri.preset"), **paths)


@pytest.mark.parametrize("source", ["dra", "kubelet"])
def test_pool_node_in_nri_mode(dnode: DoctorNode, source: str) -> None:
    pool_node(dnode, source)
    findings = pool_findings(dnode)
    assert [f for f in findings if f.status != OK] == []
    shared = by_check(findings, "shared-cpus").message
    assert shared.startswith("the pool (shared_cpus: pool): the online CPUs outside reserved_cpus 0-1"), shared
    assert ("CPU DRA driver's claims" if source == "dra" else "kubelet's checkpoint") in shared
    assert by_check(findings, "cpu-manager-policy").message == ("none (exclusive_source dra)" if source == "dra"
                                                                else "static (exclusive_source kubelet)")
    assert by_check(findings, "pool").message == f"shared_cpus: pool (exclusive_source {source}) in NRI mode"
    assert by_check(findings, "nri-plugins").message.startswith("no other NRI plugin that pins CPUs (looked in ")
    if source == "dra":
        assert "DRA_CPUSET_<claim uid>" in by_check(findings, "exclusive-source").message
        etc, run = dnode.node.cdi_dirs
        assert by_check(findings, "cdi-specs").message == (
            f"a claim counts only when a spec holds it; {etc}: does not exist; {run}: 1 spec file(s), 1 of the CPU "
            "DRA driver (dra.k8s.io/cpu: 1 device(s), 1 claim(s))")
    else:
        assert "cdi-specs" not in [f.check for f in findings]  # the kubelet source reads no CDI spec


def test_pool_is_refused_in_hook_mode(dnode: DoctorNode) -> None:
    """Hook mode cannot shrink the other containers before a new one starts: one line says so."""
    pool_node(dnode, mode="hook")
    f = by_check(findings_of(dnode), "pool")
    assert f.status == ERROR and f.message == ("shared_cpus: pool is refused in hook mode: a hook cannot shrink the "
                                               "other containers' cpusets before a new container starts"), f
    assert "NRI mode" in f.fix and "fixed cpulist" in f.fix


POOL_KUBELET = [
    pytest.param("dra", {"cpuManagerPolicy": "static"}, "cpu-manager-policy",
                 "cpuManagerPolicy is 'static': with exclusive_source dra", "cpuManagerPolicy: none", id="dra-static"),
    pytest.param("kubelet", {"cpuManagerPolicy": "none"}, "cpu-manager-policy",
                 "cpuManagerPolicy is 'none': with exclusive_source kubelet the pool is kubelet's defaultCpuSet",
                 "cpuManagerPolicy: static", id="kubelet-none"),
    pytest.param("kubelet", {"reservedSystemCPUs": "0"}, "reserved-cpus",
                 "kubelet's reservedSystemCPUs 0 differ from reserved_cpus 0-1", "same list", id="reserved-differ"),
]


@pytest.mark.parametrize("source,kubelet,check,message,fix", POOL_KUBELET)
def test_pool_kubelet_settings(dnode: DoctorNode, source: str, kubelet: Dict[str, str], check: str, message: str,
                               fix: str) -> None:
    pool_node(dnode, source)
    dnode.write_kubelet(containerRuntimeEndpoint="unix:///run/containerd/containerd.sock",
                        **dict({"cpuManagerPolicy": "none"} if source == "dra" else {}, **kubelet))
    f = by_check(pool_findings(dnode), check)
    assert (f.status, message in f.message, fix in f.fix) == (ERROR, True, True), f


def test_pool_kubelet_source_needs_the_checkpoint(dnode: DoctorNode) -> None:
    pool_node(dnode, "kubelet")
    os.unlink(dnode.node.kubelet_state)
    f = by_check(pool_findings(dnode), "exclusive-source")
    assert f.status == ERROR and "every container is refused" in f.message, f


@pytest.mark.parametrize("name,what", [
    ("dracpu", doctor.DRA_DRIVER), ("/dracpu", doctor.DRA_DRIVER), ("00-dra.cpu", doctor.DRA_DRIVER),
    ("dra-driver-cpu-v0.2", None), ("dra-driver-cpu", doctor.DRA_DRIVER),
    ("/usr/bin/nri-resource-policy-topology-aware", doctor.NRI_POLICY), ("90-balloons", doctor.NRI_POLICY),
    ("10-mixed-cpus-hook", None), ("nri-memory-qos", None), ("containerd", None), ("balloons-helper", None),
])
def test_match_cpu_plugin(name: str, what: Optional[str]) -> None:
    assert doctor.match_cpu_plugin(name) == what


@pytest.mark.parametrize("where", ["plugin-dir", "process"])
@pytest.mark.parametrize("program,fix", [
    ("dracpu", "run this plugin in place of its NRI half (shared_cpus: pool, exclusive_source: dra"),
    ("nri-resource-policy-balloons", "one CPU policy per node"),
])
def test_another_nri_plugin_that_pins_cpus(dnode: DoctorNode, monkeypatch: pytest.MonkeyPatch, where: str,
                                           program: str, fix: str) -> None:
    """Found pre-installed in the runtime's plugin dir (containerd's plugin_path) or running: NRI refuses a
    container whose cpuset two plugins set, so in NRI mode it is an error, naming it and what to run instead."""
    pool_node(dnode)
    plugin_dir = dnode.root / "opt/nri/plugins"
    plugin_dir.mkdir(parents=True)
    (plugin_dir / "10-mixed-cpus-hook").write_text("")
    monkeypatch.setattr(doctor, "process_args", lambda name: None)
    monkeypatch.setattr(doctor, "list_processes", lambda: [(1, "systemd", ["/sbin/init"]), (7, "python3", [])])
    if where == "plugin-dir":
        (plugin_dir / f"00-{program}").write_text("")
        expected = str(plugin_dir / f"00-{program}")
    else:
        monkeypatch.setattr(doctor, "list_processes", lambda: [(4242, program, [f"/{program}", "--v=4"])])
        expected = f"process 4242 (/{program} --v=4)"
    f = by_check(pool_findings(dnode, detect=where == "process"), "nri-plugins")
    assert f.status == ERROR, f
    assert f.message.startswith("another NRI plugin pins CPUs: ") and expected in f.message, f
    assert "both tried to set CPU pinning" in f.message and fix in f.fix, f


def test_plugin_dir_from_containerds_config(dnode: DoctorNode) -> None:
    """containerd's plugin_path is where its pre-installed plugins are (default /opt/nri/plugins)."""
    pool_node(dnode)
    elsewhere = dnode.root / "srv/nri"
    elsewhere.mkdir(parents=True)
    (elsewhere / "05-topology-aware").write_text("")
    config = dnode.root / "etc/containerd/config.toml"
    config.write_text(config.read_text().replace("  disable = false\n", f'  disable = false\n  plugin_path = "{elsewhere}"\n'))
    f = by_check(pool_findings(dnode, nri_plugin_dir=None), "nri-plugins")
    assert f.status == ERROR and str(elsewhere / "05-topology-aware") in f.message, f


def test_another_cpu_plugin_outside_nri_mode_is_a_warning(dnode: DoctorNode) -> None:
    plugin_dir = dnode.root / "opt/nri/plugins"
    plugin_dir.mkdir(parents=True)
    (plugin_dir / "00-dracpu").write_text("")
    f = by_check(findings_of(dnode), "nri-plugins")
    assert f.status == WARNING, f
    plugin_dir.joinpath("00-dracpu").unlink()
    assert "nri-plugins" not in [f.check for f in findings_of(dnode)]  # hook mode, fixed set: nothing to say


POOL_PINS = [
    pytest.param({"verdict": "widened", "detail": "seen", "kernel": "6.1.0", "cgroup_version": 2}, "6.1.0-57-amd64",
                 WARNING, "pins are lost when a cpuset changes (kernel 6.1.0, cgroup v2: seen): with shared_cpus: pool",
                 id="probed-widened"),
    pytest.param({"skipped": "not probed (--no-probe)"}, "6.1.0-57-amd64", WARNING,
                 "kernel 6.1.0-57-amd64 (from its version; not probed (--no-probe)): with shared_cpus: pool every "
                 "claim or release anywhere on the node changes every mixed container's cpuset", id="kernel-6.1"),
    pytest.param({"skipped": "not probed (--no-probe)"}, "6.18.4", OK, "not probed", id="kernel-6.18"),
    pytest.param({"verdict": "kept", "detail": "seen", "kernel": "6.18", "cgroup_version": 1}, "6.18", OK,
                 "pins survive", id="probed-kept"),
]


@pytest.mark.parametrize("probe,kernel,status,message", POOL_PINS)
def test_pool_thread_pins(dnode: DoctorNode, probe: Dict[str, Any], kernel: str, status: str, message: str) -> None:
    """With the pool, every claim anywhere changes every mixed container's set: before 6.2 each resets pins."""
    pool_node(dnode)
    facts = read_facts(dnode.paths(nri_socket=None, preset=str(dnode.root / "nri.preset")))
    facts["thread_affinity"], facts["cpus"]["kernel"] = probe, kernel
    f = by_check(compute_findings(facts), "thread-affinity")
    assert (f.status, message in f.message) == (status, True), f
    if status == WARNING:
        assert "threads an application pinned in a mixed container lose their pins at every claim" in f.message
        assert f.fix == "a kernel 6.2 or later, or a fixed shared set (shared_cpus: a cpulist) in NRI mode"


# -- the CDI specs (exclusive_source dra: a claim counts only when a spec holds it) ------------------

def _unreadable_dir(dn: DoctorNode) -> None:
    etc = Path(dn.node.cdi_dirs[0])
    etc.parent.mkdir(parents=True, exist_ok=True)
    etc.write_text("a file, not a directory")


def _no_dir(dn: DoctorNode) -> None:
    for d in dn.node.cdi_dirs:
        shutil.rmtree(d, ignore_errors=True)


def _broken_spec(dn: DoctorNode) -> None:
    (Path(dn.node.cdi_dirs[1]) / "gpu.yaml").write_text("kind: nvidia.com/gpu\ndevices: [\n")


def _containerd_elsewhere(dn: DoctorNode) -> None:
    with open(dn.root / "etc/containerd/config.toml", "a", encoding="utf-8") as f:
        f.write('[plugins."io.containerd.grpc.v1.cri"]\n  enable_cdi = true\n  cdi_spec_dirs = ["/srv/cdi"]\n')


def _containerd_cdi_off(dn: DoctorNode) -> None:
    with open(dn.root / "etc/containerd/config.toml", "a", encoding="utf-8") as f:
        f.write('[plugins."io.containerd.grpc.v1.cri"]\n  enable_cdi = false\n')


CDI_CASES = [  # id, how the node is broken, status, message (with {etc} and {run}), fix
    pytest.param(_unreadable_dir, ERROR, "CDI spec directory {etc}: cannot be read (Not a directory): a claim only "
                 "there is refused", "set cdi_spec_dirs to the runtime's CDI spec directories", id="unreadable-dir"),
    pytest.param(_no_dir, WARNING, "no CDI spec directory exists ({etc}, {run}): until the CPU DRA driver writes a "
                 "spec into one, every container with a DRA_CPUSET_ variable is refused", "mount them read-only",
                 id="no-dir"),
    pytest.param(_broken_spec, WARNING, "1 CDI spec file(s) skipped: CDI spec {run}/gpu.yaml: not valid JSON or YAML "
                 "at line 3, column 1: expected the node content, but found '<stream end>': skipped",
                 "correct or remove the file", id="broken-spec"),
    pytest.param(_containerd_elsewhere, WARNING, "containerd reads CDI specs from /srv/cdi ({root}/etc/containerd/"
                 "config.toml), the plugin from {etc}, {run}: a claim containerd injects from a directory the plugin "
                 "does not read is refused", 'set cdi_spec_dirs: ["/srv/cdi"]', id="containerd-reads-elsewhere"),
    pytest.param(_containerd_cdi_off, ERROR, "containerd's CDI is off (enable_cdi = false in {root}/etc/containerd/"
                 "config.toml): the CPU DRA driver's claims never reach a container", "enable_cdi = true",
                 id="containerd-cdi-off"),
]


@pytest.mark.parametrize("breaks,status,message,fix", CDI_CASES)
def test_cdi_spec_dirs(dnode: DoctorNode, breaks: Callable[[DoctorNode], None], status: str, message: str,
                       fix: str) -> None:
    pool_node(dnode)
    breaks(dnode)
    etc, run = dnode.node.cdi_dirs
    f = by_check(pool_findings(dnode), "cdi-specs")
    assert (f.status, f.message) == (status, message.format(etc=etc, run=run, root=dnode.root)), f
    assert fix in f.fix, f


def test_cdi_spec_dirs_cli(dnode: DoctorNode, run_cli: Any) -> None:
    """The same facts through `check --json`: the driver's specs counted per directory, a broken one named."""
    pool_node(dnode)
    dnode.node.write_cdi_claim("11111111-2222-3333-4444-555555555555", "6")
    _broken_spec(dnode)
    argv = dnode.argv(preset=str(dnode.root / "nri.preset"))
    res = run_cli(argv + ["--json", "--no-probe", "--containerd-config", str(dnode.root / "etc/containerd/config.toml")])
    found = [f for f in json.loads(res.out) if f["check"] == "cdi-specs"]
    run = dnode.node.cdi_dirs[1]
    assert [f["status"] for f in found] == [OK, WARNING], found
    assert f"{run}: 3 spec file(s), 2 of the CPU DRA driver (dra.k8s.io/cpu: 2 device(s), 2 claim(s))" \
        in found[0]["message"], found
