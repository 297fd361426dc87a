"""The hook for real: runc + busybox-static in a kubelet-like pod cgroup on cgroup v1.

The hook entries in each config.json are the shipped hooks.d files rendered for this
checkout (see conftest.render_hook): createRuntime runs ``apply``, poststop ``release``.
The node's shared CPUs are "0"; each container gets cpus "1" (its exclusive CPU), quota
100000 / period 100000, so the mixed set is "0-1", the container's quota becomes 200000
and its pod's (200000 for kubelet) 300000.
"""

from __future__ import annotations

import json
import os

import pytest

pytestmark = pytest.mark.integration

PREFIX = "mixed-cpus.openshift.io"
EXCLUSIVE = "1"
MIXED = "0-1"


def annotations(pod, container: str = "app", value: str = "enable", asks_for: str = "") -> dict:
    """What CRI-O puts in a container's OCI annotations: kube names (the pod's own uid: the hook checks
    that the pod cgroup is that pod's) plus the pod's annotations."""
    return {
        "io.kubernetes.container.name": container,
        "io.kubernetes.pod.namespace": "it-ns",
        "io.kubernetes.pod.name": "it-pod",
        "io.kubernetes.pod.uid": pod.uid,
        f"{PREFIX}/{asks_for or container}": value,
    }


def container_files(node, rel: str) -> dict:
    return {"cpus": f"{node.cgroup_dir('cpuset', rel)}/cpuset.cpus",
            "quota": f"{node.cgroup_dir('cpu', rel)}/cpu.cfs_quota_us"}


def status_rows(node) -> tuple:
    proc = node.cli("status", "--json")
    assert proc.returncode in (0, 3), proc.stderr  # 0 in sync, 3 drift
    return proc.returncode, json.loads(proc.stdout)["rows"]


def test_mixed_container_lifecycle(mch_node, mch_runc):
    node, runc = mch_node, mch_runc
    pod = node.make_pod(quota=200000)
    cid = runc.new_id("mixed")
    rel = pod.container_path(f"crio-{cid}")
    bundle = runc.bundle(cid, rel, annotations(pod))

    proc = runc.run(bundle, cid)
    assert proc.returncode == 0, proc.stderr

    # Created: the init process already runs on the mixed set, quotas are raised.
    files = container_files(node, rel)
    pid = runc.pid(cid)
    assert node.cpus_allowed(pid) == MIXED
    inside = runc.cmd("exec", cid, "/bin/busybox", "grep", "Cpus_allowed_list", "/proc/1/status", "/proc/self/status",
                      check=True).stdout.split("\n")
    assert [line.split()[-1] for line in inside if line] == [MIXED, MIXED], inside
    assert node.read(files["cpus"]) == MIXED
    assert int(node.read(files["quota"])) == 200000
    assert pod.quota() == 300000

    assert node.records() == [cid]
    rec = node.record(cid)
    assert (rec["exclusive"], rec["shared"], rec["desired"]) == (EXCLUSIVE, "0", MIXED)
    assert rec["cgroup"]["cpuset"] == node.cgroup_dir("cpuset", rel)
    assert rec["pod_key"] == f"pod{pod.uid}"
    assert (rec["namespace"], rec["pod"], rec["container"]) == ("it-ns", "it-pod", "app")
    assert [m["id"] for m in node.record(f"pod{pod.uid}", "pods")["members"]] == [cid]
    code, rows = status_rows(node)
    assert code == 0 and [r["in_sync"] for r in rows] == [True], rows

    # kubelet's CPU manager rewrite (UpdateContainerResources -> runc update).
    runc.cmd("update", "--cpuset-cpus", EXCLUSIVE, "--cpu-quota", "100000", cid, check=True)
    assert node.read(files["cpus"]) == EXCLUSIVE
    assert int(node.read(files["quota"])) == 100000
    assert node.cpus_allowed(pid) == EXCLUSIVE
    code, rows = status_rows(node)
    assert code == 3 and rows[0]["in_sync"] is False and rows[0]["actual"] == EXCLUSIVE

    proc = node.cli("reconcile")
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    assert len(lines) == 2, proc.stdout
    assert lines[0].startswith(f"container {cid}: {files['cpus']}: {EXCLUSIVE} -> {MIXED}"), lines
    assert lines[1].startswith(f"container {cid}: {files['quota']}: 100000 -> 200000"), lines
    assert node.read(files["cpus"]) == MIXED
    assert int(node.read(files["quota"])) == 200000
    assert pod.quota() == 300000
    assert node.cpus_allowed(pid) == MIXED

    # In sync: a second reconcile prints nothing, writes no cgroup file and no record.
    watched = [files["cpus"], files["quota"], f"{pod.cpu}/cpu.cfs_quota_us", f"{pod.cpuset}/cpuset.cpus"]
    rec_path = node.record_path(cid)
    before = os.stat(rec_path).st_mtime_ns
    with node.watch(watched) as ino:
        proc = node.cli("reconcile")
        modified = ino.modified()
    assert (proc.returncode, proc.stdout, modified) == (0, "", []), proc.stderr
    assert os.stat(rec_path).st_mtime_ns == before
    code, rows = status_rows(node)
    assert code == 0 and rows[0]["in_sync"] is True, rows
    assert rows[0]["quota"] == {"desired": "200000", "actual": "200000"}
    assert rows[0]["pod_quota"] == {"desired": "300000", "actual": "300000"}

    # Stop and delete: runc runs the poststop hook, which forgets the container.
    runc.stop(cid)
    proc = runc.cmd("delete", cid)
    assert proc.returncode == 0, proc.stderr
    assert cid not in runc.listed()
    assert node.records() == [] and node.records("pods") == []
    assert pod.quota() == 200000


def test_two_mixed_containers_share_the_pod_quota(mch_node, mch_runc):
    node, runc = mch_node, mch_runc
    pod = node.make_pod(quota=200000)
    ids = [runc.new_id("a"), runc.new_id("b")]
    for name, cid in zip(("a", "b"), ids):
        bundle = runc.bundle(cid, pod.container_path(f"crio-{cid}"), annotations(pod, container=name))
        proc = runc.run(bundle, cid)
        assert proc.returncode == 0, proc.stderr
    assert pod.quota() == 400000  # 200000 + 2 containers x 1 shared CPU x 100000
    assert node.records() == sorted(ids)
    assert [m["id"] for m in node.record(f"pod{pod.uid}", "pods")["members"]] == sorted(ids)

    runc.stop(ids[0])
    assert runc.cmd("delete", ids[0]).returncode == 0
    assert pod.quota() == 300000
    assert node.records() == [ids[1]]
    code, rows = status_rows(node)
    assert code == 0 and [r["id"] for r in rows] == [ids[1]]

    runc.stop(ids[1])
    assert runc.cmd("delete", ids[1]).returncode == 0
    assert pod.quota() == 200000
    assert node.records() == [] and node.records("pods") == []


def test_container_that_does_not_ask_is_left_alone(mch_node, mch_runc):
    """The pod asks for another container ("sidecar"): hooks.d injects the hook, which writes nothing."""
    node, runc = mch_node, mch_runc
    pod = node.make_pod(quota=200000)
    cid = runc.new_id("plain")
    rel = pod.container_path(f"crio-{cid}")
    bundle = runc.bundle(cid, rel, annotations(pod, container="app", asks_for="sidecar"))
    with node.watch([f"{pod.cpu}/cpu.cfs_quota_us", f"{pod.cpuset}/cpuset.cpus"]) as ino:
        proc = runc.run(bundle, cid)
        modified = ino.modified()
    assert proc.returncode == 0, proc.stderr
    assert modified == []
    files = container_files(node, rel)
    assert node.read(files["cpus"]) == EXCLUSIVE
    assert int(node.read(files["quota"])) == 100000
    assert node.cpus_allowed(runc.pid(cid)) == EXCLUSIVE
    assert pod.quota() == 200000
    assert not os.path.exists(node.state_dir)  # the fast path returned before touching anything

    runc.stop(cid)
    assert runc.cmd("delete", cid).returncode == 0
    assert node.records() == [] and pod.quota() == 200000


def test_invalid_annotation_value_fails_creation(mch_node, mch_runc):
    node, runc = mch_node, mch_runc
    pod = node.make_pod(quota=200000)
    cid = runc.new_id("bad")
    bundle = runc.bundle(cid, pod.container_path(f"crio-{cid}"), annotations(pod, value="yes"))
    with node.watch([f"{pod.cpu}/cpu.cfs_quota_us", f"{pod.cpuset}/cpuset.cpus"]) as ino:
        proc = runc.run(bundle, cid)
        modified = ino.modified()
    assert proc.returncode != 0
    # runc quotes the hook's stderr: one line naming the container, the kind and the annotation.
    hook_said = proc.stderr.split("stderr: ", 1)[-1]
    assert hook_said.startswith(f"mixed-cpus-hook: error: container {cid}: invalid request: "), proc.stderr
    assert hook_said.count(f"annotation {PREFIX}/app: value 'yes' is not 'enable'") == 1, proc.stderr
    assert hook_said.count("mixed-cpus-hook") == 1 and hook_said.count("\\n") == 1, proc.stderr
    assert "Traceback" not in proc.stderr
    assert modified == []
    assert pod.quota() == 200000
    assert node.records() == []
    assert cid not in runc.listed()
