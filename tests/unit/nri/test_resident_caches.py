"""A resident plugin sees a new container id for every container the node ever runs: nothing it
keeps between requests may grow with them. Found by benchmarks/nri_plugin.py (RSS 22.4 -> 24.4 MiB
over 1000 create/stop cycles): node.cgroupfs remembered each released container's cgroup paths
until its bound (4096) cleared them all, about 2 MiB later.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Callable, Optional

import pytest

from mixed_cpus_hook.core.bounds import MAX_QUOTA
from mixed_cpus_hook.frontends.nri.handlers import Handlers, RequestFailed
from mixed_cpus_hook.frontends.nri.wire import api
from mixed_cpus_hook.node import cgroupfs as cg
from mixed_cpus_hook.node.config import load_config
from mixed_cpus_hook.store import records

from .peer import POD_UID, create_request
from . import test_pool_dra
from .test_pool_dra import World

CYCLES = 30
OTHER_POD = "11111111-2222-3333-4444-555555555555"
make_world = test_pool_dra.make_world  # the pool tests' fixture


def remembered(cid: str, below: str = "") -> list:
    """Remembered paths and records that name the container (the caches' own dicts), ``below`` a
    directory (a node's root: other tests' nodes use the same pod uids)."""
    caches = (vars(cg)["_RESOLVED"], vars(cg)["_LEXICAL"], vars(records)["_PARSED"])
    return [k for cache in caches for k in cache if cid in k and k.startswith(below)]


def test_released_containers_leave_nothing_remembered(node: Any, reporter: Any) -> None:
    h = Handlers(load_config(node.config_path), reporter.reporter)
    for n in range(CYCLES):
        cid = f"{n:064x}"
        node.add_container(cid, cpus="2-3", quota=200000, pod_quota=200000)
        resp = h.create_container(create_request(cid, quota=200000))
        assert resp.adjust.linux.resources.cpu.cpus == "0-3"
        h.update_container(api.UpdateContainerRequest(container=api.Container(id=cid)))
        h.stop_container(api.StopContainerRequest(container=api.Container(id=cid)))
        assert remembered(cid) == [], n


def test_released_pool_containers_leave_nothing_remembered(make_world: Callable[..., World]) -> None:
    world = make_world()
    for n in range(CYCLES):
        cid = f"{n:064x}"
        world.create(cid, claims=((f"c{n}", "1"),))
        world.start(cid)
        world.stop(cid)
        assert remembered(cid) == [], n


# An asking container that is not placed: (its cgroup's cpus and quota, its pod's quota, what other
# container holds, what the answer says). compute_nri_dirs remembered its paths before deciding.
UNPLACED = {
    "cpuset-overlaps-the-shared-cpus": ("0-3", 400000, 400000, None, "has no exclusive CPUs"),
    "cpus-held-by-another-record": ("2-3", 200000, 200000, "2-3", "already exclusive to other containers"),
    "pod-quota-raise-above-the-kernel-max": ("2-3", 200000, MAX_QUOTA - 1000, None, "kernel's maximum quota"),
}


@pytest.mark.parametrize("cpus, quota, pod_quota, held, said", UNPLACED.values(), ids=list(UNPLACED))
def test_unplaced_creations_leave_nothing_remembered(node: Any, reporter: Any, cpus: str, quota: int,
                                                     pod_quota: int, held: Optional[str], said: str) -> None:
    """Refused, not applicable or failed: no record will ever ask for the container's paths, nor for its
    pod's when the pod has no record (each stayed until the bound cleared them all, 4096 entries)."""
    h = Handlers(load_config(node.config_path), reporter.reporter)
    if held is not None:  # another pod's mixed container holds the CPUs (no kubelet checkpoint)
        other = "b" * 64
        node.add_container(other, cpus=held, quota=200000, pod_quota=200000, pod_uid=OTHER_POD)
        assert h.create_container(create_request(other, cpus=held, pod_uid=OTHER_POD)).adjust.linux.resources.cpu.cpus
    for n in range(3):
        cid = f"{n:064x}"
        node.add_container(cid, cpus=cpus, quota=quota, pod_quota=pod_quota)
        try:
            resp = h.create_container(create_request(cid, cpus=cpus, quota=quota))
            assert not resp.HasField("adjust"), n
        except RequestFailed as exc:  # failure_policy fail: the runtime gets the error
            assert said in str(exc), exc
        else:
            assert said in reporter.stream.getvalue(), reporter.stream.getvalue()
        assert remembered(cid) == [], n
        assert remembered(POD_UID, node.root) == [], n


def test_an_unplaced_creation_keeps_what_its_pods_members_use(node: Any, reporter: Any) -> None:
    """A pod with a record (a mixed member) keeps its paths when another of its containers is not placed."""
    h = Handlers(load_config(node.config_path), reporter.reporter)
    node.add_container("a" * 64, cpus="2-3", quota=200000, pod_quota=400000)
    assert h.create_container(create_request("a" * 64)).adjust.linux.resources.cpu.cpus == "0-3"
    before = remembered(POD_UID, node.root)
    assert before
    node.add_container("c" * 64, name="dpdk", cpus="0-3", quota=400000)  # overlaps the shared CPUs
    assert not h.create_container(create_request("c" * 64, name="dpdk", cpus="0-3", quota=400000)).HasField("adjust")
    assert remembered("c" * 64) == []
    assert remembered(POD_UID, node.root) == before


def test_a_failed_creation_closes_its_pods_kept_quota_descriptors(tmp_path: Any, reporter: Any) -> None:
    """On a real cgroup v1 cpu hierarchy a pod's quota is read through descriptors kept for its
    members; a decision that read it and then failed (the raise would pass the kernel's maximum)
    leaves the pod without a record, and so without kept descriptors or remembered paths."""
    layout = cg.read_layout("/sys/fs/cgroup", mounts=cg.read_mounts())
    if os.geteuid() != 0 or layout.version != 1 or not {layout.cpu_root, layout.cpuset_root} <= set(layout.lexical):
        pytest.skip("needs root and cgroup v1 cpu and cpuset hierarchies mounted as cgroup file systems")
    top, uid, cid = f"mch-unplaced-{os.getpid()}", "22222222-3333-4444-5555-666666666666", "d" * 64
    made = [os.path.join(root, rel) for root in (layout.cpuset_root, layout.cpu_root)
            for rel in (top, f"{top}/pod{uid}")]
    try:
        for d in made:
            os.mkdir(d)
            if d.startswith(layout.cpuset_root):
                for name in ("cpuset.cpus", "cpuset.mems"):
                    with open(os.path.join(layout.cpuset_root, name), encoding="ascii") as src:
                        Path(d, name).write_text(src.read(), encoding="ascii")
        pod_cpu = made[3]
        Path(pod_cpu, "cpu.cfs_quota_us").write_text(str(MAX_QUOTA - 1000), encoding="ascii")
        config = tmp_path / "config.yaml"
        config.write_text(f'shared_cpus: "0"\nstate_dir: {tmp_path}/state\ncgroup_root: /sys/fs/cgroup\n'
                          f'failure_policy: fail\nallowed_namespaces: ["ran"]\n'
                          f'kubelet_state_file: {tmp_path}/none/cpu_manager_state\n', encoding="utf-8")
        h = Handlers(load_config(str(config)), reporter.reporter)
        req = create_request(cid, cpus="1", quota=100000, pod_uid=uid)
        req.pod.linux.cgroup_parent = f"/{top}/pod{uid}"
        req.container.linux.cgroups_path = f"/{top}/pod{uid}/{cid}"
        with pytest.raises(RequestFailed, match="kernel's maximum quota"):
            h.create_container(req)
        assert [p for p in cg._KEPT if p.startswith(pod_cpu)] == []
        assert remembered(uid) == []
    finally:
        for d in made:
            cg.forget_kept(d)
        for d in reversed(made):
            if os.path.isdir(d):
                os.rmdir(d)
