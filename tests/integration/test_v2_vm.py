"""The hook for real on cgroup v2, with runc and with crun, in one throwaway VM.

This machine kind has no cgroup v2 controllers (hybrid layout), and crun refuses hybrid
mode, so the scenario runs in a virtme-ng VM (Debian's kernel, qemu without KVM, 4 vCPUs,
the host's files read-only: see vm.py). Inside, ``vm_scenarios/v2_lifecycle.py`` runs with
the project's venv python, performs every step and writes exact values into a JSON file in
the VM's rwdir; the tests below assert each step from that file, so a failure names the
step, the runtime and the values seen.

The scenario is test_runc_v1's on v2: shared CPUs "0-1", a container with cpus "2-3",
quota 200000 / period 100000 in a pod whose cpu.max is "200000 100000". With the hook
(createRuntime apply, poststop release, rendered from the shipped hooks.d files with a
120 s timeout: python is slow under emulation) the container runs on "0-3", its cpu.max is
"400000 100000" (200000 + 2 shared CPUs x 100000) and its pod's "400000 100000"; a runtime
``update`` back to "2-3" / 200000 is restored by ``reconcile``; deleting the container
(poststop) gives the pod's share back; a second container in the same pod is applied again
with the pod quota raised once. Finally a pod whose cpuset.cpus is "2-3" does not grant the
shared CPUs: the kernel accepts the container's "0-3" but cpuset.cpus.effective stays
"2-3", which the hook's v2 verification must catch, rolling everything back.

Set ``MIXED_CPUS_HOOK_VM_RESULTS=/some/file.json`` to keep a copy of the results file.
"""

from __future__ import annotations

import json
import os
import shutil
import sys
import tempfile
from typing import Any, Dict, List, Optional

import pytest

try:
    from .helpers import hook_executable
except ImportError:  # collected as top-level modules (rootdir-relative)
    from helpers import hook_executable  # type: ignore[no-redef]

try:  # tests/integration as a package
    from . import vm
except ImportError:  # rootdir-relative import (no __init__.py)
    import vm  # type: ignore[no-redef]

pytestmark = [pytest.mark.integration, pytest.mark.vm]

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
SCENARIO = os.path.join(HERE, "vm_scenarios", "v2_lifecycle.py")
HOOKS_D = os.path.join(REPO, "hooks.d")
HOOK_FILES = {"createRuntime": "mixed-cpus-hook.json", "poststop": "mixed-cpus-hook-release.json"}
INSTALLED_PATH = "/usr/bin/mixed-cpus-hook"
HOOK_PATH_ENV = "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
BUSYBOX = "/bin/busybox"
PREFIX = "mixed-cpus.openshift.io"
RUNTIMES = ("runc", "crun")
HOOK_TIMEOUT = 120  # seconds; a cold python start takes several seconds under emulation
VM_TIMEOUT = 900  # a cap: ~3-4 min on an idle 2-CPU host, far more when other VMs compete
# The scenario saves its results at every step (a second or two each here; a hook may take HOOK_TIMEOUT):
# vm.run_in_vm's watchdog runs a guest that saved nothing for vm.STALL_TIMEOUT again, once (seen once:
# stopped inside a container's creation until VM_TIMEOUT).

# Paths inside the VM (tmpfs /run there: throwaway).
VM_BASE = "/run/mch-v2"
VM_CONFIG = f"{VM_BASE}/config.yaml"
VM_STATE = f"{VM_BASE}/state"
VM_CACHE = f"{VM_BASE}/config-cache"

SHARED, EXCLUSIVE, MIXED = "0-1", "2-3", "0-3"
PERIOD, QUOTA, POD_QUOTA = 100000, 200000, 200000
RAISED = QUOTA + 2 * PERIOD  # 2 shared CPUs
POD_RAISED = POD_QUOTA + 2 * PERIOD  # one mixed container in the pod


def cpu_max(quota: int) -> str:
    return f"{quota} {PERIOD}"


# ---------------------------------------------------------------------------------------
# preparing and running the VM


def render_hooks(executable: str) -> Dict[str, dict]:
    """The shipped hooks.d entries by stage, made runnable in the VM (as conftest.render_hook).

    ``hook.path`` becomes ``executable``, ``--config`` is inserted before the subcommand,
    ``env`` is set, and the timeout is raised for the emulated VM.
    """
    hooks = {}
    for stage, name in HOOK_FILES.items():
        with open(os.path.join(HOOKS_D, name), encoding="utf-8") as f:
            doc = json.load(f)
        assert doc.get("stages") == [stage], f"{name}: stages {doc.get('stages')!r}"
        hook = dict(doc["hook"])
        assert hook["path"] == INSTALLED_PATH, f"{name}: hook.path {hook['path']!r}"
        args = list(hook["args"])
        hook["path"] = executable
        hook["args"] = [args[0], "--config", VM_CONFIG] + args[1:]
        hook["env"] = [HOOK_PATH_ENV, f"MIXED_CPUS_HOOK_CACHE_DIR={VM_CACHE}"]
        hook["timeout"] = HOOK_TIMEOUT
        hooks[stage] = hook
    return hooks


def check_prerequisites() -> None:
    """Everything the scenario needs from the host's file system (the VM sees the same)."""
    missing = [tool for tool in RUNTIMES if shutil.which(tool) is None]
    if missing:
        pytest.fail(f"not installed: {', '.join(missing)} (Debian packages runc, crun)")
    if not os.path.isfile(BUSYBOX):
        pytest.fail(f"{BUSYBOX} is missing (Debian package busybox-static)")
    with open(BUSYBOX, "rb") as f:
        if b"/ld-linux" in f.read(4096):
            pytest.fail(f"{BUSYBOX} is dynamically linked (Debian package busybox-static)")


class V2Run:
    """The VM's outcome and the results document."""

    def __init__(self, result: "vm.VMResult", doc: Optional[dict]) -> None:
        self.result = result
        self.doc = doc or {}

    def context(self) -> str:
        return self.result.describe()

    def steps(self, runtime: str) -> Dict[str, dict]:
        entry = self.doc.get("runtimes", {}).get(runtime, {})
        return {s["step"]: s for s in entry.get("steps", [])}

    def step(self, runtime: str, name: str) -> dict:
        steps = self.steps(runtime)
        if name not in steps:
            entry = self.doc.get("runtimes", {}).get(runtime, {})
            pytest.fail(f"{runtime}: step {name!r} did not run; steps run: {list(steps)}; "
                        f"scenario error: {entry.get('error') or self.doc.get('error')}\n{self.context()}")
        return steps[name]


@pytest.fixture(scope="module")
def v2() -> V2Run:
    reason = vm.skip_reason()
    if reason:
        pytest.skip(reason)
    check_prerequisites()
    executable = hook_executable()
    inp = {
        "hook_executable": executable,
        "hooks": render_hooks(executable),
        "config_path": VM_CONFIG,
        "config_text": f'# written by tests/integration/test_v2_vm.py\nshared_cpus: "{SHARED}"\nstate_dir: {VM_STATE}\n'
                       "allowed_namespaces: [vm-ns]\n",
        "state_dir": VM_STATE,
        "cache_dir": VM_CACHE,
        "work_dir": f"{VM_BASE}/work",
        "annotation_prefix": PREFIX,
        "runtimes": list(RUNTIMES),
        "shared": SHARED,
        "exclusive": EXCLUSIVE,
        "quota": QUOTA,
        "period": PERIOD,
        "pod_quota": POD_QUOTA,
        "busybox": BUSYBOX,
    }
    with tempfile.TemporaryDirectory(prefix="mch-v2-vm-") as rwdir:
        with open(os.path.join(rwdir, "input.json"), "w", encoding="utf-8") as f:
            json.dump(inp, f, indent=1)
        script = f'exec {sys.executable} -u {SCENARIO} "$VM_RWDIR/input.json" "$VM_RWDIR/results.json"\n'
        try:
            result = vm.run_in_vm(script, rwdir, cpus=4, timeout=VM_TIMEOUT)
            timeout = None
        except vm.VMTimeoutError as exc:
            result, timeout = None, exc
        doc = read_results(os.path.join(rwdir, "results.json"))
    if timeout is not None:
        pytest.fail(f"{timeout}\nprogress: {progress(doc)}\n{vm.format_console_tail(timeout.vng_output)}")
    run = V2Run(result, doc)
    if doc is None:
        pytest.fail(f"the VM wrote no results file\n{run.context()}")
    print(f"\nv2 VM: {result.elapsed:.1f} s in all, scenario {doc.get('elapsed')} s; "
          + ", ".join(f"{rt} {doc['runtimes'].get(rt, {}).get('seconds')} s" for rt in RUNTIMES))
    return run


def read_results(path: str) -> Optional[dict]:
    """The scenario's results document (None when it wrote none); copied out on request."""
    if not os.path.isfile(path):
        return None
    keep = os.environ.get("MIXED_CPUS_HOOK_VM_RESULTS")
    if keep:
        shutil.copyfile(path, keep)
    with open(path, encoding="utf-8") as f:
        return json.load(f)


def progress(doc: Optional[dict]) -> str:
    """How far the scenario got: the steps each runtime finished, with their times."""
    if not doc:
        return "no results file (the VM did not boot, or the scenario did not start)"
    return "; ".join(f"{rt}: " + ", ".join(f"{s['step']}@{s['t']}s" for s in entry.get("steps", []))
                     for rt, entry in doc.get("runtimes", {}).items()) or "no step finished"


# ---------------------------------------------------------------------------------------
# assertions


def show(value: Any) -> str:
    return json.dumps(value, indent=1, sort_keys=True)[:6000]


def only_lines(text: str) -> List[str]:
    return [line for line in text.splitlines() if line.strip()]


def assert_cli(step: dict, key: str, rc: int) -> dict:
    cli = step[key]
    assert cli["rc"] == rc, f"{step['step']}: {' '.join(cli['argv'][3:])} exited {cli['rc']}, expected {rc}\n{show(cli)}"
    return cli


def assert_status(step: dict, key: str, rc: int, cid: str, in_sync: bool, actual: str, quota: int) -> dict:
    cli = assert_cli(step, key, rc)
    rows = json.loads(cli["stdout"])["rows"]
    assert [r["id"] for r in rows] == [cid], show(rows)
    row = rows[0]
    assert (row["in_sync"], row["actual"], row["desired"], row["exclusive"], row["shared"]) == (
        in_sync, actual, MIXED, EXCLUSIVE, SHARED), show(row)
    assert row["quota"] == {"desired": str(RAISED), "actual": str(quota)}, show(row)
    assert row["pod_quota"] == {"desired": str(POD_RAISED), "actual": str(POD_RAISED)}, show(row)
    if in_sync:
        assert (row["problem"], row["drift"]) == ("", []), show(row)
    else:  # a drifted row names each field with its desired and actual values
        assert {d["field"] for d in row["drift"]} >= {"cpuset"}, show(row)
        assert f"cpuset is {actual}, should be {MIXED}" in row["problem"], show(row)
    return row


def assert_mixed(runtime: str, step: dict, cid: str, cgroup: str, pod_key: str) -> None:
    """A created (or reconciled) container: mixed cpuset, raised quotas, records as expected."""
    name = f"{runtime} {step['step']}"
    c, pod = step["container"], step["pod"]
    assert c is not None, f"{name}: container cgroup {cgroup} missing"
    assert (c["cpuset.cpus"], c["cpuset.cpus.effective"], c["cpu.max"]) == (MIXED, MIXED, cpu_max(RAISED)), (
        f"{name}: container cgroup\n{show(c)}")
    assert pod["cpu.max"] == cpu_max(POD_RAISED), f"{name}: pod cgroup\n{show(pod)}"
    assert pod["cpuset.cpus.effective"] == MIXED, f"{name}: pod cgroup\n{show(pod)}"
    assert step["host_cpus_allowed"] == MIXED, f"{name}: pid {step['pid']} Cpus_allowed_list {step['host_cpus_allowed']}"
    recs = step["records"]
    assert list(recs["containers"]) == [cid] and list(recs["pods"]) == [pod_key], f"{name}: records\n{show(recs)}"
    rec = recs["containers"][cid]
    assert (rec["exclusive"], rec["shared"], rec["desired"], rec["cgroup_version"]) == (EXCLUSIVE, SHARED, MIXED, 2), (
        f"{name}: record\n{show(rec)}")
    assert rec["cgroup"] == {"cpuset": cgroup, "cpu": cgroup}, f"{name}: record\n{show(rec)}"
    assert rec["pod_key"] == pod_key, f"{name}: record\n{show(rec)}"
    assert rec["quota"] == {"base": QUOTA, "applied": RAISED, "period": PERIOD, "ours": [RAISED]}, (
        f"{name}: record\n{show(rec)}")
    assert (rec["namespace"], rec["container"]) == ("vm-ns", "du"), f"{name}: record\n{show(rec)}"
    prec = recs["pods"][pod_key]
    assert [m["id"] for m in prec["members"]] == [cid], f"{name}: pod record\n{show(prec)}"
    assert prec["quota"] == {"base": POD_QUOTA, "applied": POD_RAISED, "period": PERIOD, "ours": [POD_RAISED]}, (
        f"{name}: pod record\n{show(prec)}")


def assert_created(runtime: str, step: dict, cid: str, pod_key: str) -> None:
    name = f"{runtime} {step['step']}"
    run = step["run"]
    assert run["rc"] == 0, f"{name}: {runtime} run exited {run['rc']}\n{run['stderr']}"
    assert step["cgroup"].endswith(f"/{pod_key}/crio-{cid}"), step["cgroup"]
    assert_mixed(runtime, step, cid, step["cgroup"], pod_key)
    inside = step["inside"]
    assert inside["rc"] == 0 and inside["values"] == {"/proc/1/status": MIXED, "/proc/self/status": MIXED}, (
        f"{name}: Cpus_allowed_list inside\n{show(inside)}")
    st = step["runtime_state"]
    assert st["id"] == cid and st["status"] == "running" and st["pid"] == step["pid"], f"{name}: state\n{show(st)}"
    hook_state = step["hook_state"]  # what the runtime sent the createRuntime hooks on stdin
    assert hook_state is not None, f"{name}: the state capture hook did not run"
    assert (hook_state["id"], hook_state["pid"]) == (cid, step["pid"]), f"{name}: hook state\n{show(hook_state)}"
    assert hook_state["bundle"].endswith(f"/bundle-{cid}"), show(hook_state)


def assert_deleted(runtime: str, step: dict, cid: str) -> None:
    name = f"{runtime} {step['step']}"
    assert step["kill"]["rc"] == 0 and step["kill"]["status_after"] == "stopped", f"{name}: kill\n{show(step['kill'])}"
    assert step["delete"]["rc"] == 0, f"{name}: {runtime} delete\n{show(step['delete'])}"
    assert step["runtime_state"] is None, f"{name}: still known to {runtime}\n{show(step['runtime_state'])}"
    assert step["container_cgroup_exists"] is False, f"{name}: container cgroup left"
    assert step["hook_state"] is not None and step["hook_state"]["id"] == cid, (
        f"{name}: the poststop hooks did not run\n{show(step['hook_state'])}")
    assert step["pod"]["cpu.max"] == cpu_max(POD_QUOTA), f"{name}: pod quota not given back\n{show(step['pod'])}"
    assert step["records"] == {"containers": {}, "pods": {}}, f"{name}: records left\n{show(step['records'])}"


# ---------------------------------------------------------------------------------------
# tests


def test_vm_has_cgroup_v2_cpuset_and_cpu_on_4_cpus(v2):
    doc = v2.doc
    assert doc["error"] is None, doc["error"]
    assert doc["done"] is True, v2.context()
    env = doc["env"]
    assert [m[2] for m in env["cgroup_mount"]] == ["cgroup2"], show(env)
    assert {"cpuset", "cpu"} <= set(env["controllers"].split()), show(env)
    assert env["online"] == "0-3", show(env)
    setup = doc["setup"]
    for level in ("root", "kubepods"):
        assert {"cpuset", "cpu"} <= set(setup[level]["cgroup.subtree_control"].split()), show(setup)


@pytest.mark.parametrize("runtime", RUNTIMES)
def test_mixed_container_lifecycle_on_v2(v2, runtime):
    entry = v2.doc["runtimes"].get(runtime, {})
    assert entry.get("error") is None, f"{runtime}: scenario raised\n{entry.get('error')}"
    step = v2.step
    cid_a, cid_b = f"{runtime}-a", f"{runtime}-b"

    pod = step(runtime, "pod")
    pod_key = pod["key"]
    assert pod["files"]["cpu.max"] == cpu_max(POD_QUOTA), show(pod)
    assert pod["files"]["cpuset.cpus.effective"] == MIXED, show(pod)

    # Created: the init process already runs on the mixed set, quotas are raised.
    s = step(runtime, "create_a")
    assert_created(runtime, s, cid_a, pod_key)
    cgroup_a = s["cgroup"]

    # kubelet's CPU manager rewrite, through the runtime's update.
    s = step(runtime, "update_a")
    assert s["update"]["rc"] == 0, show(s["update"])
    c = s["container"]
    assert (c["cpuset.cpus"], c["cpuset.cpus.effective"], c["cpu.max"]) == (EXCLUSIVE, EXCLUSIVE, cpu_max(QUOTA)), show(c)
    assert s["host_cpus_allowed"] == EXCLUSIVE, show(s)
    assert s["pod"]["cpu.max"] == cpu_max(POD_RAISED), show(s["pod"])

    # A dry run shows the drift and writes nothing; status reports it (exit 1).
    cpus_line = f"{cgroup_a}/cpuset.cpus: {EXCLUSIVE} -> {MIXED} ("
    quota_line = f"{cgroup_a}/cpu.max: {cpu_max(QUOTA)} -> {cpu_max(RAISED)} ("
    s = step(runtime, "reconcile_dry_run")
    lines = only_lines(assert_cli(s, "cli", 0)["stdout"])
    assert len(lines) == 2, show(s["cli"])
    assert lines[0].startswith(f"container {cid_a}: would write " + cpus_line), lines
    assert lines[1].startswith(f"container {cid_a}: would write " + quota_line), lines
    assert s["unchanged"] is True, show(s)
    assert_status(step(runtime, "status_drift"), "cli", 3, cid_a, False, EXCLUSIVE, QUOTA)

    # reconcile puts the mixed set and the raised quota back; the pod's quota is left as is.
    s = step(runtime, "reconcile")
    lines = only_lines(assert_cli(s, "cli", 0)["stdout"])
    assert len(lines) == 2, show(s["cli"])
    assert lines[0].startswith(f"container {cid_a}: " + cpus_line), lines
    assert lines[1].startswith(f"container {cid_a}: " + quota_line), lines
    assert_mixed(runtime, s, cid_a, cgroup_a, pod_key)
    assert s["inside"]["values"] == {"/proc/1/status": MIXED, "/proc/self/status": MIXED}, show(s["inside"])
    s = step(runtime, "reconcile_again")
    assert (assert_cli(s, "cli", 0)["stdout"], s["unchanged"]) == ("", True), show(s)

    # Delete: the runtime runs the poststop hook, which gives the pod's share back.
    assert_deleted(runtime, step(runtime, "delete_a"), cid_a)

    # A second container in the same pod: applied again, the pod's quota raised once.
    s = step(runtime, "create_b")
    assert_created(runtime, s, cid_b, pod_key)
    assert_deleted(runtime, step(runtime, "delete_b"), cid_b)
    assert step(runtime, "pod_removed")["left"] == []
    assert entry.get("cleanup_problems") == [], entry.get("cleanup_problems")


@pytest.mark.parametrize("runtime", RUNTIMES)
def test_shared_cpus_not_granted_fails_creation_on_v2(v2, runtime):
    """cpuset.cpus.effective, not cpuset.cpus, tells whether v2 granted the mixed set.

    A partition root next to kubepods holds the shared CPUs: kubepods and the pod keep an
    empty cpuset.cpus (nothing to widen), the kernel accepts the container's "0-3" and
    leaves its effective set at "2-3". The hook must refuse, roll back and fail creation.
    """
    s = v2.step(runtime, "parent_denies")
    assert s["partition"] == "root" and s["partition_cpus"] == SHARED, show(s)
    assert s["root_effective"] == EXCLUSIVE and s["kubepods"]["cpuset.cpus.effective"] == EXCLUSIVE, show(s)
    assert s["kubepods"]["cpuset.cpus"] == "" and s["pod_before"]["cpuset.cpus"] == "", show(s)
    run = s["run"]
    assert run["rc"] != 0, f"{runtime} run succeeded although the shared CPUs are not granted\n{show(s)}"
    # runc quotes the hook's stderr in its error; crun wrote it to its run.oci.hooks.stderr file.
    said = run["stderr"] if runtime == "runc" else s["hook_stderr"]
    assert said, show(s)
    expected = (f"mixed-cpus-hook: error: container {s['id']}: write refused: {s['cgroup']}: cpuset.cpus.effective"
                f" is {EXCLUSIVE}, not {MIXED} (a parent cgroup does not grant the shared CPUs); rolled back 3 earlier"
                " write(s)")
    assert expected in said, f"{runtime} run: {run['stderr']}\nhook stderr: {s['hook_stderr']}"
    assert "Traceback" not in said, said
    assert s["pod"]["cpu.max"] == cpu_max(POD_QUOTA), f"pod quota not rolled back\n{show(s['pod'])}"
    assert s["pod"]["cpuset.cpus"] == "", show(s["pod"])
    assert s["records"] == {"containers": {}, "pods": {}}, show(s["records"])
    assert s["runtime_state"] is None and s["container_cgroup_exists"] is False, show(s)
    s = v2.step(runtime, "parent_denies_cleanup")
    assert (s["problems"], s["left"], s["root_effective"]) == ([], [], MIXED), show(s)
