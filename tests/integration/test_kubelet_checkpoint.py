"""kubelet's CPU manager checkpoint as the truth, on this machine's real cgroup v1 with runc.

Two CPUs: shared "0", the container's exclusive CPU "1". The checkpoint is a file in the
test's tmp dir (``kubelet_state_file``), written in kubelet's format with kubelet's checksum.
A widening cannot be shown with two CPUs; what can: the container runs on the checkpoint's
entry ∪ shared, a shared-pool rewrite (``runc update --cpuset-cpus 0``) is never adopted as
exclusive (with the checkpoint it is written back; without it, it is a conflict and nothing is
written), and an entry overlapping the shared CPU is refused as a conflict.
(The cgroup v2 half runs in the VM: vm_scenarios/kubelet_checkpoint_v2.py, test_v2_vm.py style.)
"""

from __future__ import annotations

import json
import os

import pytest

from mixed_cpus_hook.fakenode import format_checkpoint

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


def status(node) -> tuple:
    proc = node.cli("status", "--json")
    assert proc.returncode in (0, 1, 3), proc.stderr
    return proc.returncode, json.loads(proc.stdout)


def test_checkpoint_entry_is_the_truth(mch_node, mch_runc):
    node, runc = mch_node, mch_runc
    ckpt = use_checkpoint(node)
    pod = node.make_pod(quota=200000)
    write_checkpoint(ckpt, {pod.uid: {"app": "1"}})
    cid = runc.new_id("ckpt")
    rel = pod.container_path(f"crio-{cid}")
    cpus_file = f"{node.cgroup_dir('cpuset', rel)}/cpuset.cpus"
    proc = runc.run(runc.bundle(cid, rel, annotations(pod)), cid)
    assert proc.returncode == 0, proc.stderr
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
    ckpt = use_checkpoint(node)
    pod = node.make_pod(quota=200000)
    write_checkpoint(ckpt, {pod.uid: {"app": "0-1"}})
    cid = runc.new_id("shared")
    rel = pod.container_path(f"crio-{cid}")
    with node.watch([f"{pod.cpu}/cpu.cfs_quota_us", f"{pod.cpuset}/cpuset.cpus"]) as ino:
        proc = runc.run(runc.bundle(cid, rel, annotations(pod)), cid)
        modified = ino.modified()
    assert proc.returncode == 0, proc.stderr
    assert modified == [] and pod.quota() == 200000
    assert node.read(f"{node.cgroup_dir('cpuset', rel)}/cpuset.cpus") == "1"
    assert inside(runc, cid) == "1"
    assert node.records() == []
    runc.stop(cid)
    assert runc.cmd("delete", cid).returncode == 0


def test_corrupt_checkpoint_falls_back(mch_node, mch_runc):
    """A file kubelet did not write: refused with a warning naming it, the container gets config.json's cpus."""
    node, runc = mch_node, mch_runc
    ckpt = use_checkpoint(node)
    with open(ckpt, "w", encoding="utf-8") as f:
        f.write('{"policyName": "static", "defaultCpuSet": ')
    pod = node.make_pod(quota=200000)
    cid = runc.new_id("corrupt")
    rel = pod.container_path(f"crio-{cid}")
    proc = runc.run(runc.bundle(cid, rel, annotations(pod)), cid)
    assert proc.returncode == 0, proc.stderr
    assert inside(runc, cid) == "0-1"
    assert node.record(cid)["exclusive_source"] == "spec"
    proc = node.cli("status")
    assert proc.returncode == 1 and f"kubelet checkpoint refused, using the records and cgroups instead: {ckpt}: " \
        "not valid JSON" in " ".join(proc.stdout.split()), proc.stdout
    runc.stop(cid)
    assert runc.cmd("delete", cid).returncode == 0
