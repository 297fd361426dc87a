"""exclusive_source dra: the pool follows the CPU DRA driver's claims (the plugin over a socketpair).

A fake node with 4 online CPUs, ``shared_cpus: pool``; containers are created as containerd
sends them, their claims in ``DRA_CPUSET_<uid>`` variables, their CPU shares as kubelet computes
them. The fake runtime applies what the plugin answers (adjustments and the reply's updates) to
the fake cgroups, as runc would; a test that wants an update "not applied" skips that.
"""

from __future__ import annotations

import os
from typing import Any, Callable, Dict, Iterator, List, Optional, Tuple

import pytest

from mixed_cpus_hook.frontends.nri.handlers import POOL_EVENTS, Handlers
from mixed_cpus_hook.frontends.nri.wire import api, ttrpc
from mixed_cpus_hook.node.config import load_config
from mixed_cpus_hook.testing.fakenode import container_rel

from .peer import Running, pod_and_container

POD_A, POD_B = "0a1e2d3c-aaaa-bbbb-cccc-00000000000a", "0b1e2d3c-aaaa-bbbb-cccc-00000000000b"
STD, CLAIMANT, MIXED, OTHER = "a1" * 32, "b2" * 32, "c3" * 32, "d4" * 32
UID1, UID2, UID3 = "11111111-1111-1111-1111-111111111111", "22222222-2222-2222-2222-222222222222", \
    "33333333-3333-3333-3333-333333333333"


class World:
    """The plugin, the peer, and the fake cgroups the runtime writes."""

    def __init__(self, node: Any, running: Running, reporter: Any) -> None:
        self.node, self.running, self.peer, self.reporter = node, running, running.peer, reporter
        self.pods: Dict[str, str] = {}

    def request(self, cid: str, pod: str = POD_A, name: str = "app", claims: Tuple[Tuple[str, str], ...] = (),
                shares: int = 2, cpus: str = "0-3", ask: Optional[str] = None, namespace: str = "ran",
                state: int = 1, own_env: Tuple[str, ...] = ()) -> Tuple[Any, Any]:
        """A container's request; ``claims``: prepared by the driver (a CDI spec each, the runtime's
        injected variable); ``own_env``: entries the pod spec writes itself (no spec)."""
        p, c = pod_and_container(cid, name=name, pod_uid=pod, cpus=cpus, quota=None, ask=ask, namespace=namespace,
                                 state=state)
        for uid, cl in claims:
            self.node.write_cdi_claim(uid, cl)
        c.env.extend(["PATH=/bin"] + list(own_env) + [f"DRA_CPUSET_{uid}={cl}" for uid, cl in claims])
        c.linux.resources.cpu.shares.value = shares
        self.pods[cid] = pod
        self.node.mkdir(container_rel("cgroupfs", pod, cid), cpus)
        return p, c

    def create(self, cid: str, apply: bool = True, **kwargs: Any) -> Any:
        pod, ctr = self.request(cid, **kwargs)
        reply = self.peer.call("CreateContainer", api.CreateContainerRequest(pod=pod, container=ctr),
                               api.CreateContainerResponse)
        if apply:
            self.apply(cid, reply.adjust.linux.resources.cpu.cpus)
            self.apply_updates(reply.update)
        return reply

    def apply(self, cid: str, cpus: str) -> None:
        if cpus:
            self.node.write(container_rel("cgroupfs", self.pods[cid], cid), "cpuset.cpus", cpus)

    def apply_updates(self, updates: Any) -> None:
        for u in updates:
            self.apply(u.container_id, u.linux.resources.cpu.cpus)

    def cpus(self, cid: str) -> str:
        return self.node.read(container_rel("cgroupfs", self.pods[cid], cid), "cpuset.cpus")

    def start(self, cid: str) -> Any:
        return self.peer.call("StateChange", api.StateChangeEvent(
            event=api.EVENTS["START_CONTAINER"], pod=api.PodSandbox(uid=self.pods[cid]),
            container=api.Container(id=cid, name="app")))

    def stop(self, cid: str) -> Any:
        reply = self.peer.call("StopContainer", api.StopContainerRequest(container=api.Container(id=cid)),
                               api.StopContainerResponse)
        self.apply_updates(reply.update)
        return reply


def updates(reply: Any) -> Dict[str, str]:
    return {u.container_id: u.linux.resources.cpu.cpus for u in reply.update}


@pytest.fixture
def make_world(fake_node: Callable[..., Any], reporter: Any) -> Iterator[Callable[..., World]]:
    started: List[Running] = []

    def make(reserved: Optional[str] = None, policy: str = "fail") -> World:
        config: Dict[str, Any] = {"shared_cpus": "pool", "exclusive_source": "dra", "failure_policy": policy}
        if reserved is not None:
            config["reserved_cpus"] = reserved
        node = fake_node(version=1, online="0-3", config=config)
        running = Running(Handlers(load_config(node.config_path), reporter.reporter), reporter.reporter)
        started.append(running)
        running.peer.handshake()
        return World(node, running, reporter)

    yield make
    for running in started:
        running.finish()


def test_subscribes_to_start_container(make_world: Callable[..., World]) -> None:
    world = make_world()
    assert world.peer.call("Configure", api.ConfigureRequest(), api.ConfigureResponse).events == POOL_EVENTS


def test_the_issues_walk_through_on_four_cpus(make_world: Callable[..., World]) -> None:
    """A standard container on the pool; a claim shrinks it first; a mixed claim; stop gives back."""
    world = make_world()
    reply = world.create(STD)
    assert reply.adjust.linux.resources.cpu.cpus == "0-3" and not reply.adjust.linux.resources.cpu.HasField("quota")
    # a claim of CPU 1, no CPU request (shares 2): the claimant on 1, the standard container off 1 first
    reply = world.create(CLAIMANT, pod=POD_B, claims=((UID1, "1"),))
    assert reply.adjust.linux.resources.cpu.cpus == "1"
    assert updates(reply) == {STD: "0,2-3"}
    # a mixed container: claim 2 and a CPU request (shares 512): claim + pool
    reply = world.create(MIXED, pod=POD_B, name="mixed", claims=((UID2, "2"),), shares=512)
    assert reply.adjust.linux.resources.cpu.cpus == "0,2-3"
    assert dict((e.key, e.value) for e in reply.adjust.env) == {"OPENSHIFT_ISOLATED_CPUS": "2"}
    assert updates(reply) == {STD: "0,3"}
    assert world.cpus(STD) == "0,3"
    assert world.start(CLAIMANT).code == ttrpc.OK
    # the claimant goes: CPU 1 back in everybody's pool part
    reply = world.stop(CLAIMANT)
    assert updates(reply) == {STD: "0-1,3", MIXED: "0-3"}
    snapshot = world.node.records("containers")  # no records: the model is in memory
    assert snapshot == {}
    with open(os.path.join(world.node.state_dir, "pool.json"), encoding="utf-8") as f:
        assert '"pool": "0-1,3"' in f.read()


def test_start_redoes_an_update_the_runtime_did_not_apply(make_world: Callable[..., World]) -> None:
    world = make_world()
    world.create(STD)
    reply = world.create(CLAIMANT, pod=POD_B, claims=((UID1, "1"),), apply=False)
    world.apply(CLAIMANT, reply.adjust.linux.resources.cpu.cpus)  # the update for STD is "lost"
    assert world.cpus(STD) == "0-3"
    answer = world.start(CLAIMANT)
    assert answer.code == ttrpc.OK
    assert world.cpus(STD) == "0,2-3"  # written back before the claimant started
    assert "had not applied the update" in world.reporter.stream.getvalue()


def test_start_fails_when_exclusivity_cannot_hold(make_world: Callable[..., World]) -> None:
    world = make_world()
    world.create(STD)
    world.create(CLAIMANT, pod=POD_B, claims=((UID1, "1"),), apply=False)
    path = world.node.path(container_rel("cgroupfs", POD_A, STD), "cpuset.cpus")
    os.replace(path, path + ".real")
    os.symlink(os.path.basename(path) + ".real", path)  # a write there is refused: the CPU stays
    answer = world.start(CLAIMANT)
    assert answer.code != ttrpc.OK and "exclusivity cannot hold" in answer.message


@pytest.mark.parametrize("claims,pod,message", [
    pytest.param(((UID2, "1"),), POD_B, "are claim 11111111", id="another-claim-on-the-same-cpu"),
    pytest.param(((UID1, "1"),), POD_B + "x", "", id="same-claim-in-another-pod"),
    pytest.param(((UID3, "7"),), POD_B, "not online", id="offline-cpu"),
    pytest.param(((UID3, "0,2-3"),), POD_B, "leave the shared pool empty", id="pool-would-be-empty"),
    pytest.param(((UID3, "2-x"),), POD_B, "not a cpulist", id="bad-cpulist"),
])
def test_claims_refused(make_world: Callable[..., World], claims: Any, pod: str, message: str) -> None:
    world = make_world()
    world.create(STD)
    world.create(CLAIMANT, pod=POD_A, name="claimant", claims=((UID1, "1"),))
    pod_uid = POD_B if pod.endswith("x") else pod
    p, c = world.request(OTHER, pod=pod_uid, name="other", claims=claims)
    answer = world.peer.call("CreateContainer", api.CreateContainerRequest(pod=p, container=c))
    assert answer.code != ttrpc.OK
    assert message in answer.message


UNDER = "is not in any CDI spec under {dirs}: not the CPU DRA driver's claim"
FORGED = [
    pytest.param((), ("DRA_CPUSET_0000=3",), "DRA_CPUSET_0000 " + UNDER, id="forged-no-spec"),
    pytest.param((), (f"DRA_CPUSET_{UID1}=3",), f"DRA_CPUSET_{UID1}=3 is not in any CDI spec under {{dirs}} (a spec "
                 f"holds DRA_CPUSET_{UID1}=1)", id="claimants-uid-another-value"),
    pytest.param(((UID2, "2"),), (f"DRA_CPUSET_{UID3}=3",), f"DRA_CPUSET_{UID3} " + UNDER,
                 id="a-real-claim-and-a-forged-one"),
    pytest.param(((UID2, "2"),), (f"DRA_CPUSET_{UID2}=3",), f"DRA_CPUSET_{UID2}=3 is not in any CDI spec",
                 id="the-pod-spec-overrides-its-own-claim"),
    pytest.param((), ("DRA_CPUSET_ASSIGNED=3",), "DRA_CPUSET_ASSIGNED " + UNDER, id="a-summary-no-spec-holds"),
    pytest.param((), ("DRA_CPUSET_not-a-uid!=2",), "DRA_CPUSET_not-a-uid! " + UNDER, id="not-a-uid"),
]


@pytest.mark.parametrize("claims,own_env,message", FORGED)
def test_a_claim_the_pod_spec_wrote_is_refused(make_world: Callable[..., World], claims: Any, own_env: Any,
                                               message: str) -> None:
    """The runtime's environment holds the pod author's variables too: only what a CDI spec holds counts.
    The refusal names the variable and the directories; nobody's cpuset moved for it."""
    world = make_world()
    world.create(STD)
    world.create(CLAIMANT, pod=POD_A, name="claimant", claims=((UID1, "1"),))
    p, c = world.request(OTHER, pod=POD_B, name="other", claims=claims, own_env=own_env)
    answer = world.peer.call("CreateContainer", api.CreateContainerRequest(pod=p, container=c))
    assert answer.code != ttrpc.OK
    expected = message.format(dirs=", ".join(world.node.cdi_dirs))
    assert f"refused: container {OTHER}: {expected}" in answer.message, answer.message
    assert world.cpus(STD) == "0,2-3" and world.cpus(CLAIMANT) == "1"
    assert expected in world.reporter.stream.getvalue()  # the journal has it too


def test_a_forged_claim_under_failure_policy_ignore_is_created_unadjusted(make_world: Callable[..., World]) -> None:
    world = make_world(policy="ignore")
    world.create(STD)
    reply = world.create(OTHER, pod=POD_B, own_env=("DRA_CPUSET_0000=3",))
    assert not reply.HasField("adjust") and list(reply.update) == []
    assert world.cpus(STD) == "0-3"  # CPU 3 was not taken from anybody
    assert "DRA_CPUSET_0000 is not in any CDI spec" in world.reporter.stream.getvalue()
    assert "failure_policy ignore: created unadjusted" in world.reporter.stream.getvalue()


def test_a_summary_a_spec_holds_is_not_a_claim(make_world: Callable[..., World]) -> None:
    """A fork of the driver also writes DRA_CPUSET_ASSIGNED through its spec: the driver's, not a claim."""
    world = make_world()
    world.create(STD)
    world.node.write_cdi_claim(UID1, "1")
    spec = world.node.write_cdi_claim("ASSIGNED", "1")  # the same shape: device claim-ASSIGNED
    reply = world.create(CLAIMANT, pod=POD_B, claims=((UID1, "1"),), own_env=("DRA_CPUSET_ASSIGNED=1",))
    assert reply.adjust.linux.resources.cpu.cpus == "1"
    journal = "".join(f"{m}\n" for _, m in world.reporter.sink.messages)  # an info line: the journal's only
    assert "DRA_CPUSET_ASSIGNED (held by a CDI spec) not a claim uid: not a claim" in journal, journal
    assert os.path.exists(spec)


def test_a_claim_whose_spec_went_is_refused(make_world: Callable[..., World]) -> None:
    """The specs are read at every request (each file kept while its stat key says it is unchanged):
    once the driver unprepared a claim, its variable vouches for nothing."""
    world = make_world()
    world.create(STD)
    spec = world.node.write_cdi_claim(UID1, "1")
    world.create(CLAIMANT, pod=POD_B, claims=((UID1, "1"),))
    world.stop(CLAIMANT)
    os.unlink(spec)
    p, c = world.request(OTHER, pod=POD_B)
    c.env.append(f"DRA_CPUSET_{UID1}=1")
    answer = world.peer.call("CreateContainer", api.CreateContainerRequest(pod=p, container=c))
    assert answer.code != ttrpc.OK and f"DRA_CPUSET_{UID1} is not in any CDI spec" in answer.message


def test_a_broken_spec_is_logged_once_and_the_others_count(make_world: Callable[..., World]) -> None:
    world = make_world()
    world.create(STD)
    broken = os.path.join(world.node.cdi_dirs[1], "broken.json")
    os.makedirs(world.node.cdi_dirs[1], exist_ok=True)
    with open(broken, "w", encoding="utf-8") as f:
        f.write('{"kind": "dra.k8s.io/cpu", "devices": [{"name": "DRA_CPUSET_')
    assert world.create(CLAIMANT, pod=POD_B, claims=((UID1, "1"),)).adjust.linux.resources.cpu.cpus == "1"
    assert world.create(MIXED, pod=POD_B, name="mixed", claims=((UID2, "2"),)).adjust.linux.resources.cpu.cpus == "2"
    log = world.reporter.stream.getvalue()
    assert log.count(f"CDI spec {broken}: not valid JSON or YAML") == 1, log


def test_synchronize_leaves_a_forged_claim_as_it_is(make_world: Callable[..., World]) -> None:
    """A container whose variable no spec holds is not placed (nor its CPUs taken from the pool): left as
    it is and logged; the others are placed."""
    world = make_world()
    std = world.request(STD)
    claimant = world.request(CLAIMANT, pod=POD_B, claims=((UID1, "1"),), cpus="1")
    forged = world.request(OTHER, pod=POD_B, name="forged", own_env=("DRA_CPUSET_0000=3",), cpus="3")
    reply = world.peer.call("Synchronize", api.SynchronizeRequest(
        pods=[std[0], claimant[0]], containers=[std[1], claimant[1], forged[1]]), api.SynchronizeResponse)
    assert updates(reply) == {STD: "0,2-3"}, world.reporter.stream.getvalue()
    log = world.reporter.stream.getvalue()
    assert f"Synchronize: container {OTHER}: refused: container {OTHER}: DRA_CPUSET_0000 is not in any CDI spec" \
        in log and "(left as it is)" in log


def test_one_claim_shared_inside_a_pod(make_world: Callable[..., World]) -> None:
    world = make_world()
    world.create(STD)
    world.create(CLAIMANT, pod=POD_B, claims=((UID1, "1"),))
    reply = world.create(OTHER, pod=POD_B, name="sidecar", claims=((UID1, "1"),))
    assert reply.adjust.linux.resources.cpu.cpus == "1" and list(reply.update) == []


def test_reserved_cpus_are_never_in_the_pool_nor_claimable(make_world: Callable[..., World]) -> None:
    world = make_world(reserved="0")
    assert world.create(STD).adjust.linux.resources.cpu.cpus == "1-3"
    p, c = world.request(CLAIMANT, pod=POD_B, claims=((UID1, "0"),))
    answer = world.peer.call("CreateContainer", api.CreateContainerRequest(pod=p, container=c))
    assert answer.code != ttrpc.OK and "reserved for the system" in answer.message


def test_failure_policy_ignore_creates_unadjusted(make_world: Callable[..., World]) -> None:
    world = make_world(policy="ignore")
    world.create(STD)
    reply = world.create(CLAIMANT, pod=POD_B, claims=((UID3, "0-3"),))
    assert not reply.HasField("adjust") and list(reply.update) == []


def test_synchronize_rebuilds_the_pool_from_the_containers(make_world: Callable[..., World]) -> None:
    world = make_world()
    std = world.request(STD)
    claimant = world.request(CLAIMANT, pod=POD_B, claims=((UID1, "1"),), cpus="1")
    mixed = world.request(MIXED, pod=POD_B, name="mixed", claims=((UID2, "2"),), shares=512, cpus="2")
    reply = world.peer.call("Synchronize", api.SynchronizeRequest(
        pods=[std[0], claimant[0]], containers=[std[1], claimant[1], mixed[1]]), api.SynchronizeResponse)
    assert updates(reply) == {STD: "0,3", MIXED: "0,2-3"}, world.reporter.stream.getvalue()
    # the claimant already holds its claim: no update for it


def test_status_shows_the_pool_and_a_drifted_placement(make_world: Callable[..., World], run_cli: Any) -> None:
    import json

    world = make_world()
    world.create(STD)
    world.create(CLAIMANT, pod=POD_B, claims=((UID1, "1"),))
    res = run_cli(["--config", world.node.config_path, "status", "--json"])
    pool = json.loads(res.out)["pool"]
    assert (pool["source"], pool["pool"], pool["size"], pool["drift"]) == ("dra", "0,2-3", 3, [])
    assert {m["id"]: (m["kind"], m["desired"], m["actual"]) for m in pool["members"]} == {
        STD: ("pool", "0,2-3", "0,2-3"), CLAIMANT: ("claim", "1", "1")}
    assert res.code == 0
    world.apply(STD, "0-3")  # someone gave the claimed CPU back to the standard container
    res = run_cli(["--config", world.node.config_path, "status"])
    assert res.code == 3 and f"{STD[:12]}: cpuset is 0-3, should be 0,2-3 (pool)" in res.out


def test_metrics_show_the_pool(make_world: Callable[..., World]) -> None:
    from prometheus_client.parser import text_string_to_metric_families

    from mixed_cpus_hook.usecases.telemetry import format_exposition

    world = make_world()
    world.create(STD)
    world.create(CLAIMANT, pod=POD_B, claims=((UID1, "1"),))
    text = format_exposition(world.running.plugin.telemetry.snapshot(), "test")
    samples = {(s.name, tuple(sorted(s.labels.items()))): s.value
               for fam in text_string_to_metric_families(text) for s in fam.samples}
    assert samples[("mixed_cpus_hook_pool_cpus", ())] == 3
    assert samples[("mixed_cpus_hook_pool_containers", (("kind", "claim"),))] == 1
    assert samples[("mixed_cpus_hook_pool_containers", (("kind", "pool"),))] == 1
