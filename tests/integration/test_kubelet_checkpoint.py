"""kubelet's CPU manager checkpoint as the truth, on this machine's real cgroup v1 with runc.

Two CPUs: shared "0", the container's exclusive CPU "1". The checkpoint is a file in the
test's tmp dir (``kubelet_state_file``), written in kubelet's format with kubelet's checksum.
A widening cannot be shown with two CPUs; what can: the container runs on the checkpoint's
entry ∪ shared, a shared-pool rewrite (``runc update --cpuset-cpus 0``) is never adopted as
exclusive (with the checkpoint it is written back; without it, it is a conflict and nothing is
written), and an entry overlapping the shared CPU is refused as a conflict.
On cgroup v2, in one VM boot (vm_scenarios/kubelet_checkpoint_v2.py, 4 vCPUs, runc): shared
"0", entry "2"; a foreign ``echo 0-3`` is brought back to 0,2; kubelet's restart (file removed,
then an entry "3") moves the container to 0,3.
"""

from __future__ import annotations

import json
import os
import sys
import tempfile
from typing import Any, List, NamedTuple, Optional

import pytest

from mixed_cpus_hook.testing.fakenode import format_checkpoint

try:  # tests/integration as a package
    from . import test_v2_vm as v2vm
    from . import vm
except ImportError:  # rootdir-relative import (no __init__.py)
    import test_v2_vm as v2vm  # type: ignore[no-redef]
    import vm  # type: ignore[no-redef]

pytestmark = pytest.mark.integration

PREFIX = "mixed-cpus.openshift.io"


def annotations(pod) -> dict:
    return {"io.kubernetes.container.name": "app", "io.kubernetes.pod.namespace": "it-ns",
            "io.kubernetes.pod.name": "it-pod", "io.kubernetes.pod.uid": pod.uid, f"{PREFIX}/app": "enable"}


def use_checkpoint(node) -> str:
    """Point the hook at a checkpoint file in the test's tmp dir (not written yet)."""
    path = os.path.join(node.tmp, "kubelet", "cpu_manager_state")
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(node.config_path, "a", encoding="utf-8") as f:
        f.write(f"kubelet_state_file: {path}\n")
    return path


def write_checkpoint(path: str, entries: dict) -> None:
    """As kubelet does: the whole file, then a rename."""
    with open(path + ".tmp", "w", encoding="utf-8") as f:
        f.write(format_checkpoint(entries, online="0-1"))
    os.replace(path + ".tmp", path)


def inside(runc, cid: str) -> str:
    out = runc.cmd("exec", cid, "/bin/busybox", "grep", "Cpus_allowed_list", "/proc/1/status", check=True).stdout
    return out.split()[-1]


class Started(NamedTuple):
    ckpt: str
    pod: Any
    cid: str
    rel: str
    cpus_file: str
    run: Any  # runc run's CompletedProcess
    modified: List[str]  # pod cgroup files written while the container started


def start(node, runc, what: str, entry: Optional[str] = None, text: Optional[str] = None) -> Started:
    """kubelet's checkpoint (this container's ``entry``, or raw ``text``), a pod, and the container started."""
    ckpt = use_checkpoint(node)
    pod = node.make_pod(quota=200000)
    if entry is not None:
        write_checkpoint(ckpt, {pod.uid: {"app": entry}})
    elif text is not None:
        with open(ckpt, "w", encoding="utf-8") as f:
            f.write(text)
    cid = runc.new_id(what)
    rel = pod.container_path(f"crio-{cid}")
    with node.watch([f"{pod.cpu}/cpu.cfs_quota_us", f"{pod.cpuset}/cpuset.cpus"]) as ino:
        proc = runc.run(runc.bundle(cid, rel, annotations(pod)), cid)
        modified = ino.modified()
    assert proc.returncode == 0, proc.stderr
    return Started(ckpt, pod, cid, rel, f"{node.cgroup_dir('cpuset', rel)}/cpuset.cpus", proc, modified)


def status(node) -> tuple:
    proc = node.cli("status", "--json")
    assert proc.returncode in (0, 1, 3), proc.stderr
    return proc.returncode, json.loads(proc.stdout)["rows"]


def test_checkpoint_entry_is_the_truth(mch_node, mch_runc):
    node, runc = mch_node, mch_runc
    ckpt, pod, cid, _rel, cpus_file, _run, _modified = start(node, runc, "ckpt", entry="1")
    assert (node.read(cpus_file), inside(runc, cid)) == ("0-1", "0-1")
    rec = node.record(cid)
    assert (rec["exclusive"], rec["exclusive_source"]) == ("1", "kubelet-checkpoint")

    # kubelet's shared pool written into the container: never exclusive; the entry ∪ shared goes back
    runc.cmd("update", "--cpuset-cpus", "0", cid, check=True)
    assert inside(runc, cid) == "0"
    code, rows = status(node)
    assert code == 3 and rows[0]["drift"][0] == {"field": "cpuset", "desired": "0-1", "actual": "0"}, rows
    proc = node.cli("reconcile")
    assert proc.returncode == 0, proc.stderr
    assert f"{cpus_file}: 0 -> 0-1" in proc.stdout
    assert (node.read(cpus_file), inside(runc, cid)) == ("0-1", "0-1")
    assert (node.record(cid)["exclusive"], node.record(cid)["exclusive_source"]) == ("1", "kubelet-checkpoint")

    # kubelet restarts (OpenShift removes the file): the same rewrite is now a conflict, nothing written
    os.unlink(ckpt)
    runc.cmd("update", "--cpuset-cpus", "0", cid, check=True)
    with node.watch([cpus_file, node.record_path(cid)]) as ino:
        proc = node.cli("reconcile")
        modified = ino.modified()
    assert modified == [] and node.read(cpus_file) == "0", proc.stdout
    assert "holds shared CPUs but is not the recorded mixed set 0-1" in proc.stderr
    assert node.record(cid)["exclusive"] == "1"
    code, rows = status(node)
    assert code == 3 and rows[0]["exclusive"] == "1" and "not adopted" in rows[0]["problem"], rows

    # kubelet writes its checkpoint again: reconcile follows it
    write_checkpoint(ckpt, {pod.uid: {"app": "1"}})
    proc = node.cli("reconcile")
    assert proc.returncode == 0, proc.stderr
    assert (node.read(cpus_file), inside(runc, cid)) == ("0-1", "0-1")
    assert status(node)[0] == 0

    runc.stop(cid)
    assert runc.cmd("delete", cid).returncode == 0
    assert node.records() == [] and pod.quota() == 200000


def test_checkpoint_entry_on_the_shared_cpu_is_a_conflict(mch_node, mch_runc):
    """kubelet assigned the shared CPU exclusively (reservedSystemCPUs lacks it): nothing is written."""
    node, runc = mch_node, mch_runc
    s = start(node, runc, "shared", entry="0-1")
    assert s.modified == [] and s.pod.quota() == 200000
    assert node.read(s.cpus_file) == "1" and inside(runc, s.cid) == "1"
    assert node.records() == []
    runc.stop(s.cid)
    assert runc.cmd("delete", s.cid).returncode == 0


def test_corrupt_checkpoint_falls_back(mch_node, mch_runc):
    """A file kubelet did not write: refused with a warning naming it, the container gets config.json's cpus."""
    node, runc = mch_node, mch_runc
    ckpt, _pod, cid = start(node, runc, "corrupt", text='{"policyName": "static", "defaultCpuSet": ')[:3]
    assert inside(runc, cid) == "0-1"
    assert node.record(cid)["exclusive_source"] == "spec"
    proc = node.cli("status")
    assert proc.returncode == 1 and f"kubelet checkpoint refused, using the records and cgroups instead: {ckpt}: " \
        "not valid JSON" in " ".join(proc.stdout.split()), proc.stdout
    runc.stop(cid)
    assert runc.cmd("delete", cid).returncode == 0


# ---------------------------------------------------------------------------------------
# cgroup v2, in the VM

VM_CKPT = f"{v2vm.VM_BASE}/kubelet/cpu_manager_state"
SCENARIO = os.path.join(os.path.dirname(os.path.abspath(__file__)), "vm_scenarios", "kubelet_checkpoint_v2.py")


@pytest.fixture(scope="module")
def v2run() -> "v2vm.V2Run":
    reason = vm.skip_reason()
    if reason:
        pytest.skip(reason)
    v2vm.check_prerequisites()
    executable = v2vm.hook_executable()
    inp = {
        "hook_executable": executable, "hooks": v2vm.render_hooks(executable), "config_path": v2vm.VM_CONFIG,
        "config_text": f'shared_cpus: "0"\nstate_dir: {v2vm.VM_STATE}\nallowed_namespaces: [vm-ns]\n'
                       f"kubelet_state_file: {VM_CKPT}\n",
        "state_dir": v2vm.VM_STATE, "cache_dir": v2vm.VM_CACHE, "work_dir": f"{v2vm.VM_BASE}/work",
        "kubelet_state_file": VM_CKPT, "annotation_prefix": PREFIX, "shared": "0", "exclusive": "2",
        "quota": 100000, "period": 100000, "pod_quota": 200000, "busybox": v2vm.BUSYBOX, "runtimes": ["runc"],
    }
    with tempfile.TemporaryDirectory(prefix="mch-ckpt-vm-") as rwdir:
        with open(os.path.join(rwdir, "input.json"), "w", encoding="utf-8") as f:
            json.dump(inp, f, indent=1)
        script = f'exec {sys.executable} -u {SCENARIO} "$VM_RWDIR/input.json" "$VM_RWDIR/results.json"\n'
        try:
            # The emulated guest can stop mid-step and stay so (seen in CI: no step finished in 900 s):
            # run_in_vm's watchdog runs it again once.
            result = vm.run_in_vm(script, rwdir, cpus=4, timeout=v2vm.VM_TIMEOUT)
        except vm.VMTimeoutError as exc:
            pytest.fail(f"{exc}\nprogress: {v2vm.progress(v2vm.read_results(os.path.join(rwdir, 'results.json')))}\n"
                        + vm.format_console_tail(exc.vng_output))
        doc = v2vm.read_results(os.path.join(rwdir, "results.json"))
    run = v2vm.V2Run(result, doc)
    if doc is None:
        pytest.fail(f"the VM wrote no results file\n{run.context()}")
    print(f"\nkubelet checkpoint v2 VM: {result.elapsed:.1f} s in all, scenario {doc.get('elapsed')} s")
    return run


def _inside(step: dict) -> set:
    assert step["inside"]["rc"] == 0, step["inside"]
    return set(step["inside"]["values"].values())


@pytest.mark.vm
def test_v2_checkpoint_is_the_truth(v2run):
    create = v2run.step("runc", "create")
    assert create["run"]["rc"] == 0, create["run"]
    assert create["container"]["cpuset.cpus"] == "0,2" and _inside(create) == {"0,2"}, create
    rec = create["records"]["containers"]["runc-ckpt"]
    assert (rec["exclusive"], rec["exclusive_source"]) == ("2", "kubelet-checkpoint")

    foreign = v2run.step("runc", "foreign_write")
    assert foreign["container"]["cpuset.cpus"] == "0-3" and _inside(foreign) == {"0-3"}
    status = v2run.step("runc", "status_drift")["status"]
    assert status["rc"] == 3, status
    (row,) = json.loads(status["stdout"])["rows"]
    assert row["drift"] == [{"field": "cpuset", "desired": "0,2", "actual": "0-3"}]
    assert "CPUs 1,3 are not this container's in kubelet's checkpoint, refused" in row["problem"]
    back = v2run.step("runc", "reconcile")
    assert back["reconcile"]["rc"] == 0 and "cpuset.cpus: 0-3 -> 0,2" in back["reconcile"]["stdout"], back["reconcile"]
    assert back["container"]["cpuset.cpus.effective"] == "0,2" and _inside(back) == {"0,2"}

    removed = v2run.step("runc", "checkpoint_removed")
    assert (removed["reconcile"]["rc"], removed["reconcile"]["stdout"]) == (0, ""), removed["reconcile"]
    assert removed["records_unchanged"] and removed["container"]["cpuset.cpus"] == "0,2"

    moved = v2run.step("runc", "checkpoint_new_entry")
    assert moved["reconcile"]["rc"] == 0 and "cpuset.cpus: 0,2 -> 0,3" in moved["reconcile"]["stdout"], moved
    assert moved["container"]["cpuset.cpus.effective"] == "0,3" and _inside(moved) == {"0,3"}
    rec = moved["records"]["containers"]["runc-ckpt"]
    assert (rec["exclusive"], rec["exclusive_source"], rec["desired"]) == ("3", "kubelet-checkpoint", "0,3")
    assert v2run.step("runc", "status_after")["status"]["rc"] == 0

    done = v2run.step("runc", "delete")
    assert done["delete"]["rc"] == 0 and done["records"]["containers"] == {} and done["pod_removed"] == []
    assert v2run.doc["runtimes"]["runc"]["cleanup_problems"] == []
