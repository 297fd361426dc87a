"""The NRI replies carry updates for other containers than the event's (the reply's ``update`` field).

When a node fact changes between two events (kubelet's checkpoint moves a container; an admin
changes the shared CPUs), the next event's reply brings every other tracked container whose
decision changed to its new set, so that a CPU kubelet hands to the event's container is free
before that container starts. Nothing is sent unsolicited (containerd/nri#301): the plugin over
a socketpair with the in-test runtime, on a fake node.
"""

from __future__ import annotations

import json
import os
from typing import Any, Callable, Dict, Iterator, List, Tuple

import pytest

from mixed_cpus_hook.frontends.nri.handlers import Handlers
from mixed_cpus_hook.frontends.nri.wire import api
from mixed_cpus_hook.node.config import load_config

from .peer import POD_UID, Running, create_request, pod_and_container

APP, OTHER = "a1" * 32, "b2" * 32
OTHER_UID = "11111111-2222-3333-4444-555555555555"


def updates(reply: Any) -> Dict[str, Tuple[str, int]]:
    return {u.container_id: (u.linux.resources.cpu.cpus, u.linux.resources.cpu.quota.value) for u in reply.update}


class World:
    def __init__(self, node: Any, running: Running) -> None:
        self.node, self.running, self.peer = node, running, running.peer

    def checkpoint(self, app: str, other: str = "") -> None:
        entries: Dict[str, Dict[str, str]] = {POD_UID: {"app": app}}
        if other:
            entries[OTHER_UID] = {"other": other}
        self.node.write_checkpoint(entries)

    def create(self, cid: str, **kwargs: Any) -> Any:
        return self.peer.call("CreateContainer", create_request(cid, **kwargs), api.CreateContainerResponse)


@pytest.fixture
def world(fake_node: Callable[..., Any], reporter: Any) -> Iterator[World]:
    node = fake_node(version=1, online="0-7")
    node.add_container(APP, cpus="2-3", quota=200000, pod_quota=200000)
    node.add_container(OTHER, name="other", cpus="4-5", quota=200000, pod_quota=200000, pod_uid=OTHER_UID)
    running = Running(Handlers(load_config(node.config_path), reporter.reporter), reporter.reporter)
    try:
        running.peer.handshake()
        yield World(node, running)
    finally:
        running.finish()


def test_kubelet_moved_another_container_its_update_rides_on_the_next_create(world: World) -> None:
    world.checkpoint("2-3")
    first = world.create(APP)
    assert first.adjust.linux.resources.cpu.cpus == "0-3" and list(first.update) == []
    # kubelet restarted and reassigned: app moves to 6-7, and its old CPUs 2-3 go to "other"
    world.checkpoint("6-7", other="2-3")
    reply = world.create(OTHER, name="other", cpus="2-3", pod_uid=OTHER_UID)
    assert reply.adjust.linux.resources.cpu.cpus == "0-3"
    # app leaves 2-3 in the same reply, before "other" starts on them
    assert updates(reply) == {APP: ("0-1,6-7", 400000)}
    assert world.node.records("containers")[APP]["exclusive"] == "6-7"


def test_nothing_changed_no_updates(world: World) -> None:
    world.checkpoint("2-3", other="4-5")
    world.create(APP)
    reply = world.create(OTHER, name="other", pod_uid=OTHER_UID)
    assert list(reply.update) == []


def test_a_new_shared_set_reaches_every_container_at_the_next_event(world: World) -> None:
    world.checkpoint("2-3", other="4-5")
    world.create(APP)
    world.create(OTHER, name="other", pod_uid=OTHER_UID)
    world.node.write_config(shared="0")  # the admin shrinks the shared CPUs
    world.node.write(world.node.records("containers")[APP]["cgroup"]["cpuset"].split("cpuset/", 1)[1],
                     "cpuset.cpus", "0-3")  # what runc wrote from the first answer
    reply = world.peer.call("UpdateContainer", api.UpdateContainerRequest(
        container=pod_and_container(APP)[1], linux_resources=pod_and_container(APP, cpus="2-3")[1].linux.resources),
        api.UpdateContainerResponse)
    got: List[Tuple[str, str]] = [(u.container_id, u.linux.resources.cpu.cpus) for u in reply.update]
    # the event's container first (kubelet's update rewritten), then the other one
    assert got == [(APP, "0,2-3"), (OTHER, "0,4-5")]
    quotas = {u.container_id: u.linux.resources.cpu.quota.value for u in reply.update}
    assert quotas == {APP: 300000, OTHER: 300000}  # base 200000 + one shared CPU now


THIRD = "c3" * 32
THIRD_UID = "66666666-7777-8888-9999-000000000000"


def test_an_unchanged_entry_that_a_moved_one_now_overlaps_is_decided_again(world: World, reporter: Any) -> None:
    """Only kubelet's entries changed: the containers whose entries did not change are not decided
    again, except one whose CPUs another entry now claims too (the checkpoint is then not kubelet's
    truth for it: refused, as when every container was decided again)."""
    world.checkpoint("2-3", other="4-5")
    world.create(APP)
    world.create(OTHER, name="other", pod_uid=OTHER_UID)
    world.node.add_container(THIRD, name="third", cpus="6-7", quota=200000, pod_quota=200000, pod_uid=THIRD_UID)
    # kubelet's next write: "third" allocated, and "other" moved onto app's CPU 3 (app's entry as it was)
    world.node.write_checkpoint({POD_UID: {"app": "2-3"}, OTHER_UID: {"other": "3-5"}, THIRD_UID: {"third": "6-7"}})
    reply = world.create(THIRD, name="third", cpus="6-7", pod_uid=THIRD_UID)
    world.running.settle()
    assert reply.adjust.linux.resources.cpu.cpus == "0-1,6-7" and list(reply.update) == []
    refused = [m for _p, m in reporter.sink.messages if "kubelet never does" in m]
    assert sorted(m.split(":")[1].split()[-1] for m in refused) == sorted([APP, OTHER]), refused
    # nothing moved for the refused ones: their records as they were
    assert world.node.records("containers")[APP]["exclusive"] == "2-3"
    assert world.node.records("containers")[OTHER]["exclusive"] == "4-5"


def test_containers_a_move_leaves_alone_are_judged_from_their_remembered_records(
        world: World, monkeypatch: pytest.MonkeyPatch) -> None:
    """At each change of kubelet's checkpoint (every allocation on a static-policy node) the plugin
    looks over every tracked container: one whose record file is still the one it wrote is judged
    from the record it remembers (not loaded: no stat per container); one another writer replaced
    since is loaded, and judged as it is now."""
    from mixed_cpus_hook.usecases import nri as engine

    world.checkpoint("2-3", other="4-5")
    world.create(APP)
    world.create(OTHER, name="other", pod_uid=OTHER_UID)
    loaded: List[str] = []
    real = engine.load_container

    def counted(state_dir: str, cid: str) -> Any:
        loaded.append(cid)
        return real(state_dir, cid)

    monkeypatch.setattr(engine, "load_container", counted)
    world.node.add_container(THIRD, name="third", cpus="6-7", quota=200000, pod_quota=200000, pod_uid=THIRD_UID)
    world.node.write_checkpoint({POD_UID: {"app": "2-3"}, OTHER_UID: {"other": "4-5"}, THIRD_UID: {"third": "6-7"}})
    reply = world.create(THIRD, name="third", cpus="6-7", pod_uid=THIRD_UID)
    assert list(reply.update) == [] and loaded == [THIRD]  # the event's own record only
    # another writer replaces app's record (the same content, a new file)
    folder = world.node.state_dir + "/containers"
    doc = world.node.records("containers")[APP]
    with open(f"{folder}/.{APP}.1.tmp", "w", encoding="utf-8") as f:
        f.write(json.dumps(doc, sort_keys=True) + "\n")
    os.replace(f"{folder}/.{APP}.1.tmp", f"{folder}/{APP}.json")
    del loaded[:]
    # kubelet's next write: "third" shrinks to 7 (app's and other's entries as they were)
    world.node.write_checkpoint({POD_UID: {"app": "2-3"}, OTHER_UID: {"other": "4-5"}, THIRD_UID: {"third": "7"}})
    update = api.UpdateContainerRequest(container=pod_and_container(THIRD, name="third", pod_uid=THIRD_UID)[1])
    update.linux_resources.cpu.cpus = "7"
    reply = world.peer.call("UpdateContainer", update, api.UpdateContainerResponse)
    assert [(u.container_id, u.linux.resources.cpu.cpus) for u in reply.update] == [(THIRD, "0-1,7")]
    assert loaded == [THIRD, APP]  # the event's own, then app's replaced record; not other's


