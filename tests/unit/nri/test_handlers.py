"""NRI messages to engine facts and back (pure), and the periodic reconcile of the plugin."""

from __future__ import annotations

import time
from typing import Any, Callable, Optional

import pytest

from mixed_cpus_hook.core.bounds import MAX_ENV_ENTRIES
from mixed_cpus_hook.core.cgroup import Quota
from mixed_cpus_hook.core.errors import CpuListError, RuntimeInputError
from mixed_cpus_hook.core.model import Adjustment, Resources
from mixed_cpus_hook.frontends.nri.handlers import (Handlers,
                                                    compute_facts,
                                                    format_adjustment,
                                                    format_update,
                                                    parse_cpu)
from mixed_cpus_hook.frontends.nri.wire import api
from mixed_cpus_hook.node.config import load_config

from .peer import POD_UID, Running, create_request, pod_and_container

APP = "a1" * 32


def resources(cpus: str = "", quota: Optional[int] = None, period: Optional[int] = None) -> Any:
    r = api.LinuxResources()
    r.cpu.cpus = cpus
    if quota is not None:
        r.cpu.quota.value = quota
    if period is not None:
        r.cpu.period.value = period
    return r


@pytest.mark.parametrize("res,expected", [
    pytest.param(resources(), (frozenset(), None, 0), id="nothing-set"),
    pytest.param(resources("2-3"), (frozenset({2, 3}), None, 0), id="cpuset-only"),
    pytest.param(resources("2", 100000, 100000), (frozenset({2}), Quota(100000, 100000), 100000), id="finite"),
    pytest.param(resources("2", -1, 100000), (frozenset({2}), Quota(None, 100000), 100000), id="unlimited"),
    pytest.param(resources("", 0, 50000), (frozenset(), None, 50000), id="zero-is-not-in-the-update"),
])
def test_parse_cpu(res: Any, expected: Any) -> None:
    assert parse_cpu(res, "here") == expected


@pytest.mark.parametrize("cpus,message", [
    pytest.param("2-", "here.cpus", id="open-range"),
    pytest.param("a", "here.cpus", id="letters"),
])
def test_parse_cpu_malformed(cpus: str, message: str) -> None:
    with pytest.raises(CpuListError) as err:
        parse_cpu(resources(cpus), "here")
    assert str(err.value).startswith(message + ": ")


def test_compute_facts() -> None:
    pod, ctr = pod_and_container(APP, quota=-1)
    pod.annotations["io.kubernetes.pod.name"] = "spoofed"  # the structured fields win
    ctr.annotations["io.kubernetes.cri.container-type"] = "container"
    facts = compute_facts(pod, ctr)
    assert facts.id == APP and facts.cpus == frozenset({2, 3}) and facts.quota == Quota(None, 100000)
    assert facts.annotations == {
        "mixed-cpus.openshift.io/app": "enable", "io.kubernetes.cri.container-type": "container",
        "io.kubernetes.pod.namespace": "ran", "io.kubernetes.pod.name": "du-0", "io.kubernetes.pod.uid": POD_UID,
        "io.kubernetes.container.name": "app"}
    assert facts.cgroups_path == f"/kubepods/pod{POD_UID}/crio-{APP}"
    assert facts.pod_cgroup == f"/kubepods/pod{POD_UID}"


@pytest.mark.parametrize("claims,env,expected", [
    pytest.param(True, ["PATH=/bin", "DRA_CPUSET_c1=2-3"], ("DRA_CPUSET_c1=2-3",), id="dra-reads-its-claims"),
    pytest.param(False, ["PATH=/bin", "DRA_CPUSET_c1=2-3"], (), id="kubelet-source-reads-no-claim"),
    # not read at all where no claim is: the environment's bounds do not refuse what is never used
    pytest.param(False, ["X=x"] * (MAX_ENV_ENTRIES + 1), (), id="kubelet-source-ignores-a-huge-environment"),
])
def test_compute_facts_claims(claims: bool, env: Any, expected: Any) -> None:
    pod, ctr = pod_and_container(APP)
    ctr.env.extend(env)
    assert compute_facts(pod, ctr, claims=claims).env == expected


def test_compute_facts_bounds_the_environment_it_reads() -> None:
    pod, ctr = pod_and_container(APP)
    ctr.env.extend(["X=x"] * (MAX_ENV_ENTRIES + 1))
    with pytest.raises(RuntimeInputError, match=f"environment of {MAX_ENV_ENTRIES + 1} entries, more than"):
        compute_facts(pod, ctr, claims=True)


def test_the_kubelet_source_creates_a_container_whatever_its_environment(fake_node: Callable[..., Any],
                                                                        reporter: Any) -> None:
    """The handler passes claims=False where no claim is read: an environment past the bounds that
    the dra source refuses does not stop an asking container of the kubelet source."""
    node = fake_node(version=1)
    node.add_container(APP, cpus="2-3", quota=200000, pod_quota=200000)
    req = create_request(APP)
    req.container.env.extend(["X=x"] * (MAX_ENV_ENTRIES + 1))
    reply = Handlers(load_config(node.config_path), reporter.reporter).create_container(req)
    assert reply.adjust.linux.resources.cpu.cpus == "0-3"


ADJ = Adjustment(Resources(frozenset({0, 1, 2, 3}), None, 100000), frozenset({2, 3}), frozenset({0, 1}),
                 (("OPENSHIFT_ISOLATED_CPUS", "2-3"), ("OPENSHIFT_SHARED_CPUS", "0-1")))


def test_unlimited_quota_is_left_out() -> None:
    adj = format_adjustment(ADJ)
    assert not adj.linux.resources.cpu.HasField("quota") and adj.linux.resources.cpu.period.value == 100000
    upd = format_update("c", ADJ.resources._replace(quota=300000))
    assert (upd.linux.resources.cpu.cpus, upd.linux.resources.cpu.quota.value) == ("0-3", 300000)


def test_periodic_reconcile_restores_the_pod_quota(fake_node: Callable[..., Any], reporter: Any) -> None:
    """kubelet rewrites pod quotas directly (no NRI event): the plugin's timer puts them back."""
    node = fake_node(version=1)
    paths = node.add_container(APP, cpus="2-3", quota=200000, pod_quota=200000)
    running = Running(Handlers(load_config(node.config_path), reporter.reporter), reporter.reporter,
                      reconcile_interval=0.2)
    try:
        running.peer.handshake()
        running.peer.call("CreateContainer", create_request(APP), api.CreateContainerResponse)
        assert node.quota(paths["pod_rel"]) == "400000"
        node.set_quota(paths["pod_rel"], 200000)  # kubelet's pod-level rewrite
        deadline = time.monotonic() + 10
        while node.quota(paths["pod_rel"]) != "400000" and time.monotonic() < deadline:
            time.sleep(0.05)
        assert node.quota(paths["pod_rel"]) == "400000"
    finally:
        running.finish()
