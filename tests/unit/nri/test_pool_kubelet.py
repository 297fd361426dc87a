"""shared_cpus: pool with exclusive_source kubelet: mixed containers follow kubelet's defaultCpuSet.

kubelet's static CPU manager keeps its own containers on its default set; the plugin keeps the
mixed ones on exclusive + (default set - reserved_cpus), their quota raised by pool_quota_cpus.
When kubelet gives CPUs of the default set to a new container (its checkpoint changes before the
container is created), the new container's CreateContainer reply shrinks every mixed container
first; its StartContainer checks that it landed.
"""

from __future__ import annotations

import os
from typing import Any, Callable, Dict, Iterator, List

import pytest

from mixed_cpus_hook.frontends.nri.handlers import Handlers
from mixed_cpus_hook.frontends.nri.wire import api, ttrpc
from mixed_cpus_hook.node.config import load_config

from .peer import POD_UID, Running, create_request

APP, OTHER = "a1" * 32, "b2" * 32
OTHER_UID = "11111111-2222-3333-4444-555555555555"


class World:
    def __init__(self, node: Any, running: Running) -> None:
        self.node, self.peer = node, running.peer
        self.paths: Dict[str, Dict[str, str]] = {}

    def checkpoint(self, entries: Dict[str, Dict[str, str]]) -> None:
        self.node.write_checkpoint(entries)

    def create(self, cid: str, apply: bool = True, **kwargs: Any) -> Any:
        reply = self.peer.call("CreateContainer", create_request(cid, **kwargs), api.CreateContainerResponse)
        if apply:
            for u in reply.update:
                self.node.write(self.paths[u.container_id]["rel"], "cpuset.cpus", u.linux.resources.cpu.cpus)
        return reply


@pytest.fixture
def world(fake_node: Callable[..., Any], reporter: Any) -> Iterator[World]:
    node = fake_node(version=1, online="0-7", config={"shared_cpus": "pool", "reserved_cpus": "0",
                                                       "pool_quota_cpus": 1})
    running = Running(Handlers(load_config(node.config_path), reporter.reporter), reporter.reporter)
    w = World(node, running)
    w.paths[APP] = node.add_container(APP, cpus="2-3", quota=200000, pod_quota=200000)
    w.paths[OTHER] = node.add_container(OTHER, name="other", cpus="4-5", quota=200000, pod_quota=200000,
                                        pod_uid=OTHER_UID, ask=None)
    w.checkpoint({POD_UID: {"app": "2-3"}})
    try:
        running.peer.handshake()
        yield w
    finally:
        running.finish()


def test_mixed_container_on_exclusive_plus_the_pool(world: World) -> None:
    reply = world.create(APP)
    cpu = reply.adjust.linux.resources.cpu
    # default set 0-1,4-7 (kubelet's) less reserved 0: the pool is 1,4-7
    assert cpu.cpus == "1-7"
    assert cpu.quota.value == 300000  # kubelet's 200000 + pool_quota_cpus (1) x period
    assert world.node.quota(world.paths[APP]["pod_rel"]) == "300000"


def test_a_new_exclusive_container_shrinks_the_pool_first(world: World) -> None:
    world.create(APP)
    world.node.write(world.paths[APP]["rel"], "cpuset.cpus", "1-7")
    world.checkpoint({POD_UID: {"app": "2-3"}, OTHER_UID: {"other": "4-5"}})  # kubelet's allocation
    reply = world.create(OTHER, name="other", cpus="4-5", pod_uid=OTHER_UID, ask=None)
    assert not reply.HasField("adjust")  # not ours to place
    assert {u.container_id: u.linux.resources.cpu.cpus for u in reply.update} == {APP: "1-3,6-7"}
    assert world.node.read(world.paths[APP]["rel"], "cpuset.cpus") == "1-3,6-7"


def test_start_writes_back_what_did_not_land(world: World, reporter: Any) -> None:
    world.create(APP)
    world.node.write(world.paths[APP]["rel"], "cpuset.cpus", "1-7")
    world.checkpoint({POD_UID: {"app": "2-3"}, OTHER_UID: {"other": "4-5"}})
    world.create(OTHER, apply=False, name="other", cpus="4-5", pod_uid=OTHER_UID, ask=None)
    answer = world.peer.call("StateChange", api.StateChangeEvent(
        event=api.EVENTS["START_CONTAINER"], pod=api.PodSandbox(uid=OTHER_UID),
        container=api.Container(id=OTHER, name="other")))
    assert answer.code == ttrpc.OK
    assert world.node.read(world.paths[APP]["rel"], "cpuset.cpus") == "1-3,6-7"


def test_start_fails_when_a_mixed_container_keeps_the_cpus(world: World) -> None:
    world.create(APP)
    world.node.write(world.paths[APP]["rel"], "cpuset.cpus", "1-7")
    world.checkpoint({POD_UID: {"app": "2-3"}, OTHER_UID: {"other": "4-5"}})
    world.create(OTHER, apply=False, name="other", cpus="4-5", pod_uid=OTHER_UID, ask=None)
    path = world.node.path(world.paths[APP]["rel"], "cpuset.cpus")
    os.replace(path, path + ".real")
    os.symlink(os.path.basename(path) + ".real", path)
    answer = world.peer.call("StateChange", api.StateChangeEvent(
        event=api.EVENTS["START_CONTAINER"], pod=api.PodSandbox(uid=OTHER_UID),
        container=api.Container(id=OTHER, name="other")))
    assert answer.code != ttrpc.OK and "exclusivity cannot hold" in answer.message


def test_no_checkpoint_is_an_error_naming_the_setting(world: World) -> None:
    world.node.remove_checkpoint()
    answer = world.peer.call("CreateContainer", create_request(APP))
    assert answer.code != ttrpc.OK
    assert "shared_cpus: pool with exclusive_source kubelet follows kubelet's checkpoint" in answer.message


def test_the_pool_grows_back_at_the_next_event_after_kubelet_frees_cpus(world: World) -> None:
    world.create(APP)
    world.checkpoint({POD_UID: {"app": "2-3"}, OTHER_UID: {"other": "4-5"}})
    world.create(OTHER, name="other", cpus="4-5", pod_uid=OTHER_UID, ask=None)
    world.checkpoint({POD_UID: {"app": "2-3"}})  # "other" removed: kubelet frees its entry
    third = "c3" * 32
    world.paths[third] = world.node.add_container(third, name="third", cpus="1-7", pod_uid="99999999-2222-3333-4444-555555555555",
                                                  ask=None)
    reply = world.create(third, name="third", cpus="1,4-7", pod_uid="99999999-2222-3333-4444-555555555555", ask=None)
    assert {u.container_id: u.linux.resources.cpu.cpus for u in reply.update} == {APP: "1-7"}
    updates: List[Any] = list(reply.update)
    assert updates[0].linux.resources.cpu.quota.value == 300000  # the budget, whatever the pool's size


def test_a_mixed_container_whose_cgroup_came_after_its_creation_is_shrunk_too(world: World) -> None:
    """As containerd does it: the runtime makes the container's cgroup after CreateContainer answered (the
    record says "creating" until a reconcile sees the cgroup); a new exclusive container's reply must
    still shrink it, and its start must still check it (seen on containerd 2.1 in the VM: the reply came
    before the periodic reconcile had looked at the mixed container)."""
    rel = world.paths[APP]["rel"]
    world.node.remove_cgroup(rel)
    world.create(APP)
    world.node.mkdir(rel, "1-7")  # runc, with the adjustment
    world.checkpoint({POD_UID: {"app": "2-3"}, OTHER_UID: {"other": "4-5"}})
    reply = world.create(OTHER, apply=False, name="other", cpus="4-5", pod_uid=OTHER_UID, ask=None)
    assert {u.container_id: u.linux.resources.cpu.cpus for u in reply.update} == {APP: "1-3,6-7"}
    assert world.node.read(rel, "cpuset.cpus") == "1-7"  # the update "not applied": the start writes it
    answer = world.peer.call("StateChange", api.StateChangeEvent(
        event=api.EVENTS["START_CONTAINER"], pod=api.PodSandbox(uid=OTHER_UID),
        container=api.Container(id=OTHER, name="other")))
    assert answer.code == ttrpc.OK
    assert world.node.read(rel, "cpuset.cpus") == "1-3,6-7"
