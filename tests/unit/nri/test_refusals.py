"""What the NRI front end refuses, and how it fails: through Handlers' methods and pure functions.

Each of issue 13's defects that is about a decision (not about the wire or the process, which
test_hostile.py drives) has its case here, on fake v1 and v2 nodes.
"""

from __future__ import annotations

import json
import os
import shutil
from typing import Any, Callable, Dict, List

import pytest

from mixed_cpus_hook.core import cgroup as cgroups
from mixed_cpus_hook.core import errors
from mixed_cpus_hook.core.errors import HookError
from mixed_cpus_hook.frontends.nri import handlers
from mixed_cpus_hook.frontends.nri.handlers import Handlers, RequestFailed
from mixed_cpus_hook.frontends.nri.wire import api
from mixed_cpus_hook.node.config import load_config

from .peer import POD_UID, create_request, pod_and_container

APP = "a1" * 32
OTHER = "b2" * 32
OTHER_UID = "11111111-2222-3333-4444-555555555555"
INT64_MAX = (1 << 63) - 1
U = POD_UID.replace("-", "_")

# -- the container cgroup NRI names must be inside the pod cgroup of the pod uid given ----------------

VALID_PATHS = [
    pytest.param(f"/kubepods/pod{POD_UID}/crio-{APP}", f"/kubepods/pod{POD_UID}",
                 (f"/kubepods/pod{POD_UID}/crio-{APP}", f"/kubepods/pod{POD_UID}"), id="cgroupfs-crio"),
    pytest.param(f"/kubepods/burstable/pod{POD_UID}/{APP}", f"/kubepods/burstable/pod{POD_UID}",
                 (f"/kubepods/burstable/pod{POD_UID}/{APP}", f"/kubepods/burstable/pod{POD_UID}"),
                 id="cgroupfs-containerd-burstable"),
    pytest.param(f"kubepods-burstable-pod{U}.slice:cri-containerd:{APP}", f"kubepods-burstable-pod{U}.slice",
                 (f"/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod{U}.slice/cri-containerd-{APP}.scope",
                  f"/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod{U}.slice"), id="systemd-containerd"),
    pytest.param(f"kubepods-pod{U}.slice:crio:{APP}", "",
                 (f"/kubepods.slice/kubepods-pod{U}.slice/crio-{APP}.scope", f"/kubepods.slice/kubepods-pod{U}.slice"),
                 id="systemd-crio-guaranteed-no-parent"),
]


@pytest.mark.parametrize("path,parent,expected", VALID_PATHS)
def test_nri_cgroup_accepted(path: str, parent: str, expected: Any) -> None:
    assert cgroups.compute_nri_cgroup(path, APP, POD_UID, parent, "here") == expected


REFUSED_PATHS = [
    pytest.param("/kubepods", "", POD_UID, "is not a container cgroup inside the cgroup of pod", id="kubepods"),
    pytest.param(f"/kubepods/pod{POD_UID}", "", POD_UID, "is not a container cgroup inside", id="pod-itself"),
    pytest.param(f"/kubepods/pod{OTHER_UID}/crio-{APP}", "", POD_UID, "is not a container cgroup inside",
                 id="another-pod"),
    pytest.param(f"/kubepods/pod{OTHER_UID}/crio-{APP}", "", "", "the pod uid is empty", id="empty-uid"),
    pytest.param(f"/kubepods/pod{POD_UID}/crio-{OTHER}", "", POD_UID, "not named after the container id",
                 id="another-container"),
    pytest.param(f"/kubepods/pod{POD_UID}/x{APP}", "", POD_UID, "not named after the container id",
                 id="id-as-a-suffix-only"),
    pytest.param("x" * 5000, "", POD_UID, "linux.cgroups_path of 5000 characters is longer than the 4096 allowed",
                 id="x-5000"),
    pytest.param(f"/kubepods/pod{POD_UID}/crio-{APP}\0", "", POD_UID, "linux.cgroups_path holds a NUL character",
                 id="nul"),
    pytest.param(f"/kubepods/pod{POD_UID}/../pod{OTHER_UID}/crio-{APP}", "", POD_UID, "climbs out", id="dot-dot"),
    pytest.param(f"kubepods.slice:crio:{APP}", "", POD_UID, "is not a container cgroup inside", id="systemd-no-pod"),
    pytest.param(f"/kubepods/pod{POD_UID}/crio-{APP}", f"/kubepods/pod{OTHER_UID}", POD_UID,
                 "the pod's linux.cgroup_parent '/kubepods/pod1111", id="parent-another-pod"),
    pytest.param(f"kubepods-pod{U}.slice:crio:{APP}", f"kubepods-pod{U}", POD_UID, "linux.cgroup_parent",
                 id="parent-not-a-slice"),
    pytest.param(f"/kubepods/pod{POD_UID}/crio-{APP}", "", "0f1e/../x", "is not a Kubernetes uid", id="uid-path"),
    pytest.param(f"/kubepods/pod{POD_UID}/crio-{APP}", "", "f" * 65, "is not a Kubernetes uid", id="uid-too-long"),
]


@pytest.mark.parametrize("path,parent,uid,message", REFUSED_PATHS)
def test_nri_cgroup_refused(path: str, parent: str, uid: str, message: str) -> None:
    with pytest.raises(HookError) as err:
        cgroups.compute_nri_cgroup(path, APP, uid, parent, "container x")
    assert message in str(err.value) and str(err.value).startswith("container x: ")
    assert isinstance(err.value, (errors.CgroupError, errors.RuntimeInputError)) and len(str(err.value)) < 800


# -- through the handlers, on fake nodes ------------------------------------------------------------------

def make(node: Any, reporter: Any, **config: Any) -> Handlers:
    if config:
        node.configure(**config)
    return Handlers(load_config(node.config_path), reporter.reporter)


def logged(reporter: Any) -> str:
    return reporter.stream.getvalue() + "".join(f"{m}\n" for _, m in reporter.sink.messages)


def update(cid: str, cpus: str = "", quota: Any = None, period: Any = None) -> Any:
    req = api.UpdateContainerRequest(container=api.Container(id=cid))
    req.linux_resources.cpu.cpus = cpus
    if quota is not None:
        req.linux_resources.cpu.quota.value = quota
    if period is not None:
        req.linux_resources.cpu.period.value = period
    return req


def admitted(node: Any, h: Handlers, cid: str = APP, **kw: Any) -> Dict[str, str]:
    paths = node.add_container(cid, cpus=kw.get("cpus", "2-3"), quota=200000, pod_quota=200000,
                               pod_uid=kw.get("pod_uid", POD_UID))
    resp = h.create_container(create_request(cid, quota=200000, **kw))
    assert resp.HasField("adjust"), logged
    return paths


def test_update_with_an_overflowing_quota_keeps_the_record_and_reconcile_adds_nothing(node: Any,
                                                                                      reporter: Any) -> None:
    """Issue 13, defect 5: the record was saved, then the answer failed; the next reconcile took our
    400000 for kubelet's and raised it again (400000 -> 600000)."""
    h = make(node, reporter)
    paths = admitted(node, h)
    node.set_quota(paths["rel"], 400000)  # what the runtime wrote from our answer
    before = node.records("containers")[APP]
    resp = h.update_container(update(APP, "2-3", INT64_MAX - 100000, 100000))
    assert list(resp.update) == []  # kubelet's update passes unchanged; never an error status
    assert "quota 9223372036854675807 is outside the kernel's 1000..17592186044415 us" in logged(reporter)
    assert node.records("containers")[APP] == before
    h.reconcile()
    h.reconcile()
    assert (node.quota(paths["rel"]), node.quota(paths["pod_rel"])) == ("400000", "400000")


def test_raised_quota_above_the_kernel_maximum_is_refused_before_anything_is_saved(node: Any, reporter: Any) -> None:
    h = make(node, reporter)
    paths = admitted(node, h)
    before = (node.records("containers"), node.records("pods"), node.quota(paths["pod_rel"]))
    resp = h.update_container(update(APP, "2-3", (1 << 44) - 1, 100000))
    assert list(resp.update) == []
    assert "the container's quota raised to 17592186244415 (base 17592186044415 + the shared CPUs' share) would be " \
           "above the kernel's maximum quota 17592186044415: refused" in logged(reporter)
    assert (node.records("containers"), node.records("pods"), node.quota(paths["pod_rel"])) == before


def poison(node: Any, cid: str) -> None:
    """A record as a version without the bounds left it: its quota never was in a quota file."""
    path = os.path.join(node.state_dir, "containers", f"{cid}.json")
    doc = json.loads(open(path, encoding="utf-8").read())
    doc["quota"] = {"base": INT64_MAX - 100000, "applied": INT64_MAX + 100000, "period": 100000,
                    "ours": [INT64_MAX + 100000]}
    with open(path, "w", encoding="utf-8") as f:
        json.dump(doc, f)


def test_a_poisoned_record_fails_neither_synchronize_nor_reconcile(fake_node: Callable[..., Any],
                                                                   reporter: Any) -> None:
    node = fake_node(version=2, online="0-7")
    h = make(node, reporter)
    admitted(node, h)
    other = admitted(node, h, OTHER, cpus="4", pod_uid=OTHER_UID)
    poison(node, OTHER)
    node.set_quota(other["rel"], 200000)
    snapshot = node.snapshot()
    pods, containers = zip(pod_and_container(APP, cpus="0-3", quota=400000),
                           pod_and_container(OTHER, cpus="0-1,4", quota=400000, pod_uid=OTHER_UID))
    resp = h.synchronize(api.SynchronizeRequest(pods=pods, containers=containers))
    assert [u.container_id for u in resp.update] == [APP]
    assert f"nri: Synchronize: container {OTHER} (ran/du-0/app): record error: " in logged(reporter)
    assert "quota.base 9223372036854675807 is above the kernel's maximum quota" in logged(reporter)
    h.reconcile()  # the poisoned record is reported and left alone: never a share added twice
    assert [p for p in node.changes(snapshot) if OTHER in p or OTHER_UID in p] == []
    assert node.quota(other["rel"]) == "200000" and node.quota(f"kubepods/pod{OTHER_UID}") == "400000"


def test_failure_policy_ignore_covers_every_failure(node: Any, reporter: Any) -> None:
    """An overflowing quota failed the creation with INTERNAL, even under failure_policy ignore."""
    h = make(node, reporter, failure_policy="ignore", allowed_namespaces=["ran"])
    node.add_container(APP, cpus="2-3", quota=200000, pod_quota=200000)
    snapshot = node.snapshot()
    resp = h.create_container(create_request(APP, quota=INT64_MAX - 100000))
    assert not resp.HasField("adjust")
    assert "(failure_policy ignore: created unadjusted)" in logged(reporter)
    assert node.changes(snapshot) == []


def test_failure_policy_fail_answers_a_bug_with_an_error(node: Any, reporter: Any, monkeypatch: Any) -> None:
    h = make(node, reporter)
    node.add_container(APP, cpus="2-3", quota=200000, pod_quota=200000)
    monkeypatch.setattr(h.engine, "create", lambda *a, **k: 1 / 0)
    with pytest.raises(RequestFailed) as err:
        h.create_container(create_request(APP))
    assert str(err.value) == "mixed-cpus-hook: internal error: ZeroDivisionError('division by zero')"


def test_nri_mode_leaves_nothing_in_pending(node: Any, reporter: Any) -> None:
    """pending/ marks are hook mode's trigger for its systemd sync; on a containerd node nothing reads them."""
    h = make(node, reporter)
    paths = admitted(node, h)
    h.stop_container(api.StopContainerRequest(container=api.Container(id=APP)))
    other = admitted(node, h, OTHER, cpus="3", pod_uid=OTHER_UID)
    for hierarchy in {os.path.dirname(node.path(other["rel"], n)) for n in ("cpuset.cpus", node.quota_name())}:
        shutil.rmtree(hierarchy)
    h.reconcile()  # its cgroup is gone: forgotten
    assert node.records("containers") == {} and node.quota(paths["pod_rel"]) == "200000"
    assert not os.path.exists(os.path.join(node.state_dir, "pending"))


def test_empty_resynchronize_keeps_records_whose_cgroups_exist(node: Any, reporter: Any) -> None:
    h = make(node, reporter)
    paths = admitted(node, h)
    resp = h.synchronize(api.SynchronizeRequest())
    assert list(resp.update) == [] and set(node.records("containers")) == {APP}
    assert f"Synchronize did not list container {APP}, but its cgroup is there: record kept" in logged(reporter)
    # kubelet's next update is still rewritten to the mixed set
    assert h.update_container(update(APP, "2-3")).update[0].linux.resources.cpu.cpus == "0-3"
    for d in {os.path.dirname(node.path(paths["rel"], n)) for n in ("cpuset.cpus", node.quota_name())}:
        shutil.rmtree(d)
    h.synchronize(api.SynchronizeRequest())
    assert node.records("containers") == {} and node.quota(paths["pod_rel"]) == "200000"


def test_synchronize_past_its_bounds_releases_nothing(node: Any, reporter: Any, monkeypatch: Any) -> None:
    h = make(node, reporter)
    admitted(node, h)
    monkeypatch.setattr(handlers, "MAX_SYNC_CONTAINERS", 3)
    h.synchronize(api.SynchronizeRequest(containers=[api.Container(id=f"c{i}") for i in range(3)], more=True))
    resp = h.synchronize(api.SynchronizeRequest(containers=[api.Container(id="c3"), api.Container(id="c4")]))
    assert list(resp.update) == [] and set(node.records("containers")) == {APP}
    assert "(0 pod(s) and 2 container(s) past bounds.MAX_SYNC_*); no record is released" in logged(reporter)


def test_synchronize_keeps_only_what_it_reads(reporter: Any, fake_node: Callable[..., Any]) -> None:
    h = make(fake_node(), reporter)
    pod = api.PodSandbox(id="p", uid=POD_UID)
    pod.annotations.update({"mixed-cpus.openshift.io/app": "enable", "huge": "h" * 100000})
    ctr = api.Container(id=APP, pod_sandbox_id="p", name="app")
    ctr.annotations.update({"x.example/app": "1", "big": "b" * 100000})
    ctr.linux.resources.cpu.cpus = "0" * 1000000
    h.synchronize(api.SynchronizeRequest(pods=[pod], containers=[ctr], more=True))
    kept = h.pending_sync
    assert dict(kept.pods["p"].annotations) == {"mixed-cpus.openshift.io/app": "enable"}
    assert dict(kept.containers[0].annotations) == {"x.example/app": "1"}
    assert len(kept.containers[0].cpus) == 65537 and kept.kept < 70000


def test_synchronize_parts_past_the_bounds_are_cut_before_they_are_decoded(reporter: Any,
                                                                            fake_node: Callable[..., Any]) -> None:
    h = make(fake_node(), reporter)
    part = api.SynchronizeRequest(pods=[api.PodSandbox(id=f"p{i}") for i in range(3000)],
                                  containers=[api.Container(id=f"c{i}") for i in range(5000)], more=True)
    first = h.decode_synchronize(part.SerializeToString())
    assert (len(first.pods), len(first.containers), first.more) == (2048, 5000, True)
    h.synchronize(first)
    second = h.decode_synchronize(part.SerializeToString())
    assert (len(second.pods), len(second.containers)) == (0, 3192)
    assert (h.pending_sync.dropped_pods, h.pending_sync.dropped_containers) == (952 + 3000, 1808)


def test_synchronize_updates_past_one_message_are_left_to_reconcile(node: Any, reporter: Any,
                                                                      monkeypatch: Any) -> None:
    h = make(node, reporter)
    admitted(node, h)
    monkeypatch.setattr(handlers, "SYNC_RESPONSE_BUDGET", 10)
    pod, ctr = pod_and_container(APP, cpus="0-3", quota=400000)
    resp = h.synchronize(api.SynchronizeRequest(pods=[pod], containers=[ctr]))
    assert list(resp.update) == [] and set(node.records("containers")) == {APP}
    assert f"1 update(s) did not fit one answer (first '{APP}'); the periodic reconcile applies them" in \
        logged(reporter)


def test_a_stop_ends_a_long_synchronize(node: Any, reporter: Any) -> None:
    h = make(node, reporter)
    h.stopping = lambda: True
    with pytest.raises(handlers.Interrupted):
        h.synchronize(api.SynchronizeRequest(containers=[api.Container(id="c1")]))


CPUSET_REFUSALS = [
    pytest.param("2-9", "cpuset names CPUs 8-9 not in 0-7", id="offline"),
    pytest.param("4", "cpuset 4 holds CPUs already exclusive to other containers (4 by " + OTHER + ")",
                 id="held-by-another"),
]


@pytest.mark.parametrize("cpus,message", CPUSET_REFUSALS)
def test_without_a_checkpoint_cpus_are_checked(fake_node: Callable[..., Any], reporter: Any, cpus: str,
                                               message: str) -> None:
    node = fake_node(version=2, online="0-7")
    h = make(node, reporter)
    admitted(node, h, OTHER, cpus="4", pod_uid=OTHER_UID)
    node.add_container(APP, cpus=cpus, quota=200000, pod_quota=200000)
    with pytest.raises(RequestFailed) as err:
        h.create_container(create_request(APP, cpus=cpus))
    assert message in str(err.value)
    assert set(node.records("containers")) == {OTHER}
    # and kubelet's update to such a set is passed through, the record unchanged
    admitted(node, h, APP, cpus="5")
    assert list(h.update_container(update(APP, cpus)).update) == []
    assert node.records("containers")[APP]["exclusive"] == "5"


def test_a_gone_container_holds_no_cpus(fake_node: Callable[..., Any], reporter: Any) -> None:
    """A record whose cgroup is gone (its stop was missed) does not block kubelet's next assignment."""
    node = fake_node(version=2, online="0-7")
    h = make(node, reporter)
    gone = admitted(node, h, OTHER, cpus="4", pod_uid=OTHER_UID)
    shutil.rmtree(os.path.join(node.cgroup_root, gone["rel"]))
    admitted(node, h, APP, cpus="4")


@pytest.mark.parametrize("gone", [pytest.param("cpu,cpuacct", id="cpu-hierarchy"), pytest.param("", id="whole-pod")])
def test_a_container_whose_pod_cgroup_is_gone_is_refused_and_nothing_is_saved(node: Any, reporter: Any,
                                                                              gone: str) -> None:
    """The pod cgroup is looked for only when its quota cannot be read (no lookup on every creation):
    the error still names it, and neither record is saved (on v2 both cases remove the one pod cgroup)."""
    h = make(node, reporter)
    paths = node.add_container(APP, cpus="2-3", quota=200000, pod_quota=200000)
    if gone and node.version == 1:
        shutil.rmtree(os.path.join(node.cgroup_root, gone, paths["pod_rel"]))
    else:
        node.remove_cgroup(paths["pod_rel"])
    with pytest.raises(RequestFailed) as err:
        h.create_container(create_request(APP, quota=200000))
    pod_cpu = os.path.join(node.cgroup_root, "cpu,cpuacct" if node.version == 1 else "", paths["pod_rel"])
    assert f"cgroup error: {os.path.normpath(pod_cpu)}: pod cgroup not found" in str(err.value)
    assert (node.records("containers"), node.records("pods")) == ({}, {})


def test_the_same_id_in_a_second_pod_gives_the_first_pods_share_back(fake_node: Callable[..., Any],
                                                                        reporter: Any) -> None:
    node = fake_node(version=1)
    h = make(node, reporter)
    first = admitted(node, h)
    assert node.quota(first["pod_rel"]) == "400000"
    second = admitted(node, h, APP, pod_uid=OTHER_UID)
    assert (node.quota(first["pod_rel"]), node.quota(second["pod_rel"])) == ("200000", "400000")
    assert list(node.records("pods")) == [f"pod{OTHER_UID}"]


@pytest.mark.parametrize("edit,message", [
    pytest.param(lambda r: setattr(r.container, "id", "x" * 300), "container id of 300 characters", id="id"),
    pytest.param(lambda r: setattr(r.container, "id", "../x"), "container id '../x' is not a plain container id",
                 id="id-path"),
    pytest.param(lambda r: setattr(r.pod, "name", "p" * 254), "pod name of 254 characters", id="pod-name"),
    pytest.param(lambda r: setattr(r.pod, "uid", "u" * 65), "pod uid of 65 characters", id="uid"),
    pytest.param(lambda r: setattr(r.container, "id", ".."), "container id '..' is not a plain container id",
                 id="id-dotdot"),
    pytest.param(lambda r: setattr(r.container, "id", "a b"), "container id 'a b' is not a plain container id",
                 id="id-space"),
    pytest.param(lambda r: setattr(r.pod, "namespace", "n" * 254), "namespace of 254 characters", id="namespace"),
    pytest.param(lambda r: setattr(r.pod, "name", "p\0"), "pod name holds a NUL character", id="pod-name-nul"),
    pytest.param(lambda r: setattr(r.pod, "uid", "\0"), "pod uid holds a NUL character", id="uid-nul"),
    pytest.param(lambda r: setattr(r.container.linux.resources.cpu, "cpus", "1\0"),
                 "linux.resources.cpu.cpus holds a NUL character", id="cpus-nul"),
    pytest.param(lambda r: setattr(r.container.linux.resources.cpu, "cpus", "1," * 40000),
                 "linux.resources.cpu.cpus of 80000 characters", id="cpus-long"),
    pytest.param(lambda r: r.container.annotations.update({"k": "v" * (256 << 10)}), "container annotations of",
                 id="annotations"),
])
def test_request_bounds(node: Any, reporter: Any, edit: Callable[[Any], None], message: str) -> None:
    h = make(node, reporter)
    req = create_request(APP)
    edit(req)
    with pytest.raises(RequestFailed) as err:
        h.create_container(req)
    assert message in str(err.value) and "invalid runtime input" in str(err.value)


def test_a_container_that_does_not_ask_is_never_refused(node: Any, reporter: Any) -> None:
    """Bounds apply to containers that ask: another container's odd values never fail its creation."""
    h = make(node, reporter)
    req = create_request("x" * 300, ask=None)
    req.container.annotations["huge"] = "h" * (300 << 10)
    assert not h.create_container(req).HasField("adjust")
    assert logged(reporter) == ""


def test_untracked_update_costs_nothing(node: Any, reporter: Any, monkeypatch: Any) -> None:
    """Defect 3: a long cpulist was parsed before the record was looked up."""
    calls: List[str] = []
    monkeypatch.setattr(handlers, "parse_cpulist", lambda text, where: calls.append(where) or frozenset())
    h = make(node, reporter)
    assert list(h.update_container(update("not-ours", "0-8191," * 9000)).update) == []
    assert calls == [] and logged(reporter) == ""


THIRD = "c3" * 32
THIRD_UID = "66666666-7777-8888-9999-000000000000"


@pytest.mark.parametrize("watch_from", [pytest.param(0, id="watched"), pytest.param(10**6, id="unwatched")])
def test_without_a_checkpoint_cpus_another_process_recorded_between_events_are_held(
        fake_node: Callable[..., Any], reporter: Any, monkeypatch: Any, watch_from: int) -> None:
    """The plugin's record folders watched (store/records.py, "the watch"): a record that another process
    (the hook, a command, a second plugin) saved under the state lock since the last event is seen at
    the next one, so its CPUs stay its own (a watch that missed it would admit a second container on them)."""
    import multiprocessing

    from mixed_cpus_hook.frontends.nri.plugin import defer_writes
    from mixed_cpus_hook.store import records as store

    monkeypatch.setattr(store, "WATCH_FROM", watch_from)
    node = fake_node(version=2, online="0-7")
    h = make(node, reporter)
    defer_writes(h.engine)  # as the plugin runs it: journaled, and watched
    admitted(node, h, APP, cpus="2-3")
    h.after_answer()
    admitted(node, h, THIRD, cpus="6", pod_uid=THIRD_UID)  # learnt: the folders listed while watched
    h.after_answer()
    assert (h.engine.lock.watch is not None) == (watch_from == 0)
    node.add_container(OTHER, cpus="4", quota=200000, pod_quota=200000, pod_uid=OTHER_UID)

    def another_process() -> None:
        other = make(node, reporter)  # its own engine and lock (state_lock per event), no watch
        other.create_container(create_request(OTHER, cpus="4", quota=200000, pod_uid=OTHER_UID))
    child = multiprocessing.get_context("fork").Process(target=another_process)
    child.start()
    child.join(30)
    assert child.exitcode == 0 and set(node.records("containers")) == {APP, THIRD, OTHER}
    node.add_container("d4" * 32, cpus="4", quota=200000, pod_quota=200000, pod_uid=OTHER_UID)
    with pytest.raises(RequestFailed) as err:
        h.create_container(create_request("d4" * 32, cpus="4", quota=200000, pod_uid=OTHER_UID))
    assert f"cpuset 4 holds CPUs already exclusive to other containers (4 by {OTHER})" in str(err.value)
    h.after_answer()
