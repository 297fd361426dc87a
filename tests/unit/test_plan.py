"""The pure decision: exclusive CPUs, quotas, the ordered writes, and giving a share back.

No files: layouts and directories are plain values, and expected writes are written out.
"""

from __future__ import annotations

from typing import List, Optional, Tuple

import pytest

from mixed_cpus_hook.cgroups import Dirs, Layout, Quota
from mixed_cpus_hook.cpuset import parse_cpulist
from mixed_cpus_hook.plan import (
    Observed,
    Plan,
    QuotaState,
    Write,
    compute_exclusive,
    compute_plan,
    compute_quota,
    compute_release,
    describe,
)

V1 = Layout(1, "/cg", "/cg/cpuset", "/cg/cpu,cpuacct")
V2 = Layout(2, "/cg", "/cg", "/cg")
POD = "kubepods/pod1"
CTR = "kubepods/pod1/c1"
P = 100000  # the CFS period


def c(text: str) -> frozenset:
    return parse_cpulist(text)


def dirs(layout: Layout, rel: str) -> Dirs:
    return Dirs(f"{layout.cpuset_root}/{rel}", f"{layout.cpu_root}/{rel}")


# -- compute_exclusive ----------------------------------------------------------------------

EXCLUSIVE = [
    pytest.param("2-3", "2-3", "0-1", None, "2-3", id="spec-disjoint-from-shared"),
    pytest.param("2-3", "0-3", "0-1", None, "2-3", id="spec-wins-over-the-cgroup"),
    pytest.param("0-3", "0-3", "0-1", None, None, id="spec-overlaps-shared-is-the-shared-pool"),
    pytest.param("1", "1", "0-1", None, None, id="spec-inside-shared"),
    pytest.param(None, "2-3", "0-1", None, "2-3", id="no-spec-cgroup-disjoint"),
    pytest.param(None, "0-3", "0-1", None, None, id="no-spec-cgroup-overlaps"),
    pytest.param(None, "", "0-1", None, None, id="no-spec-empty-cgroup"),
    pytest.param(None, "0-3", "0-1", ("2-3", "0-1"), "2-3", id="record-union-still-there"),
    pytest.param(None, "4-5", "0-1", ("2-3", "0-1"), "4-5", id="kubelet-moved-the-exclusive-cpus"),
    pytest.param(None, "0-1,4-5", "0-1", ("2-3", "0-1"), "4-5", id="mixed-with-new-exclusive"),
    pytest.param(None, "0-1", "0-1", ("2-3", "0-1"), "2-3", id="only-shared-left-keeps-record"),
    pytest.param(None, "", "0-1", ("2-3", "0-1"), "2-3", id="empty-cgroup-keeps-record"),
    pytest.param(None, "0-3", "0,4", ("2-3", "0-1"), "2-3", id="shared-changed-since-record"),
    pytest.param(None, "0,2-3,4", "0,4", ("2-3", "0-1"), "2-3", id="old-and-new-shared-both-removed"),
    pytest.param("6-7", "0-3", "0-1", ("2-3", "0-1"), "6-7", id="spec-wins-over-the-record"),
]


@pytest.mark.parametrize("spec,current,shared,prev,expected", EXCLUSIVE)
def test_compute_exclusive(spec: Optional[str], current: str, shared: str, prev: Optional[Tuple[str, str]],
                           expected: Optional[str]) -> None:
    prev_sets = None if prev is None else (c(prev[0]), c(prev[1]))
    got = compute_exclusive(c(spec) if spec is not None else None, c(current), c(shared), prev_sets)
    assert got == (None if expected is None else c(expected))


# -- compute_quota --------------------------------------------------------------------------

QUOTAS = [
    pytest.param(Quota(None, P), None, 2, QuotaState(None, None, P), id="unlimited-stays-unlimited"),
    pytest.param(Quota(200000, P), None, 2, QuotaState(200000, 400000, P), id="first-apply"),
    pytest.param(Quota(400000, P), QuotaState(200000, 400000, P), 2, QuotaState(200000, 400000, P),
                 id="again-adds-nothing"),
    pytest.param(Quota(300000, P), QuotaState(200000, 400000, P), 2, QuotaState(300000, 500000, P),
                 id="kubelet-resize-is-the-new-base"),
    pytest.param(Quota(200000, P), QuotaState(200000, 400000, P), 2, QuotaState(200000, 400000, P),
                 id="kubelet-restored-base"),
    pytest.param(Quota(400000, 50000), QuotaState(200000, 400000, P), 2, QuotaState(400000, 500000, 50000),
                 id="new-period-is-a-new-base"),
    pytest.param(Quota(200000, P), QuotaState(None, None, P), 2, QuotaState(200000, 400000, P),
                 id="was-unlimited-now-finite"),
    pytest.param(Quota(400000, P), QuotaState(None, 400000, P), 2, QuotaState(400000, 600000, P),
                 id="record-without-base-is-not-trusted"),
    pytest.param(Quota(200000, P), None, 0, QuotaState(200000, 200000, P), id="no-extra"),
    pytest.param(Quota(150000, 50000), None, 3, QuotaState(150000, 300000, 50000), id="extra-scales-with-period"),
]


@pytest.mark.parametrize("current,prev,extra,expected", QUOTAS)
def test_compute_quota(current: Quota, prev: Optional[QuotaState], extra: int, expected: QuotaState) -> None:
    assert compute_quota(current, prev, extra) == expected


def test_compute_quota_is_idempotent() -> None:
    state = compute_quota(Quota(200000, P), None, 2)
    for _ in range(5):
        state = compute_quota(Quota(state.applied, P), state, 2)
    assert state == QuotaState(200000, 400000, P)


# -- compute_plan ---------------------------------------------------------------------------

class PlanCase:
    """Inputs of compute_plan in a readable form; ``writes`` lists (file under /cg, old, new)."""

    def __init__(self, layout: Layout = V1, cpus: str = "2-3", quota: Optional[int] = 200000,
                 pod_quota: Optional[int] = 200000, ancestors: Tuple[Tuple[str, str], ...] = (("kubepods", "0-3"),
                                                                                              (POD, "0-3")),
                 exclusive: str = "2-3", shared: str = "0-1", prev_quota: Optional[QuotaState] = None,
                 prev_pod_quota: Optional[QuotaState] = None, members: int = 1, pod: bool = True,
                 period: int = P) -> None:
        self.layout, self.exclusive, self.shared, self.members = layout, c(exclusive), c(shared), members
        self.prev_quota, self.prev_pod_quota = prev_quota, prev_pod_quota
        self.dirs = dirs(layout, CTR)
        self.pod = dirs(layout, POD) if pod else None
        self.observed = Observed(c(cpus), Quota(quota, period), Quota(pod_quota, period) if pod else None,
                                 tuple((f"{layout.cpuset_root}/{rel}", c(v)) for rel, v in ancestors))

    def plan(self, observed: Optional[Observed] = None, prev_quota: Optional[QuotaState] = None,
             prev_pod_quota: Optional[QuotaState] = None) -> Plan:
        return compute_plan(self.layout, self.dirs, self.pod, observed or self.observed, self.exclusive, self.shared,
                            prev_quota if observed else self.prev_quota,
                            prev_pod_quota if observed else self.prev_pod_quota, self.members)


def short(plan: Plan) -> List[Tuple[str, str, str]]:
    return [(w.path[len("/cg/"):], w.old, w.new) for w in plan.writes]


PLANS = [
    pytest.param(PlanCase(), [
        (f"cpu,cpuacct/{POD}/cpu.cfs_quota_us", "200000", "400000"),
        (f"cpuset/{CTR}/cpuset.cpus", "2-3", "0-3"),
        (f"cpu,cpuacct/{CTR}/cpu.cfs_quota_us", "200000", "400000"),
    ], id="v1-first-apply-pod-before-container"),
    pytest.param(PlanCase(V2), [
        (f"{POD}/cpu.max", "200000 100000", "400000 100000"),
        (f"{CTR}/cpuset.cpus", "2-3", "0-3"),
        (f"{CTR}/cpu.max", "200000 100000", "400000 100000"),
    ], id="v2-first-apply-pod-before-container"),
    pytest.param(PlanCase(cpus="0-3", quota=400000, pod_quota=400000, prev_quota=QuotaState(200000, 400000, P),
                          prev_pod_quota=QuotaState(200000, 400000, P)), [], id="in-sync-writes-nothing"),
    pytest.param(PlanCase(ancestors=(("kubepods", "2-3"), (POD, "2-3"))), [
        ("cpuset/kubepods/cpuset.cpus", "2-3", "0-3"),
        (f"cpuset/{POD}/cpuset.cpus", "2-3", "0-3"),
        (f"cpu,cpuacct/{POD}/cpu.cfs_quota_us", "200000", "400000"),
        (f"cpuset/{CTR}/cpuset.cpus", "2-3", "0-3"),
        (f"cpu,cpuacct/{CTR}/cpu.cfs_quota_us", "200000", "400000"),
    ], id="v1-ancestors-widened-top-down-first"),
    pytest.param(PlanCase(ancestors=(("kubepods", "0-7"), (POD, "2-5"))), [
        (f"cpuset/{POD}/cpuset.cpus", "2-5", "0-5"),
        (f"cpu,cpuacct/{POD}/cpu.cfs_quota_us", "200000", "400000"),
        (f"cpuset/{CTR}/cpuset.cpus", "2-3", "0-3"),
        (f"cpu,cpuacct/{CTR}/cpu.cfs_quota_us", "200000", "400000"),
    ], id="only-the-ancestor-that-does-not-fit-is-widened-and-keeps-its-cpus"),
    pytest.param(PlanCase(V2, ancestors=(("kubepods", ""), (POD, ""))), [
        (f"{POD}/cpu.max", "200000 100000", "400000 100000"),
        (f"{CTR}/cpuset.cpus", "2-3", "0-3"),
        (f"{CTR}/cpu.max", "200000 100000", "400000 100000"),
    ], id="v2-empty-ancestor-request-inherits-and-is-left-alone"),
    pytest.param(PlanCase(pod_quota=400000, prev_pod_quota=QuotaState(200000, 400000, P), members=2), [
        (f"cpu,cpuacct/{POD}/cpu.cfs_quota_us", "400000", "600000"),
        (f"cpuset/{CTR}/cpuset.cpus", "2-3", "0-3"),
        (f"cpu,cpuacct/{CTR}/cpu.cfs_quota_us", "200000", "400000"),
    ], id="second-member-of-a-pod"),
    pytest.param(PlanCase(cpus="0-3", quota=400000, pod_quota=600000, prev_quota=QuotaState(200000, 400000, P),
                          prev_pod_quota=QuotaState(200000, 600000, P), members=1, exclusive="2-3"), [
        (f"cpu,cpuacct/{POD}/cpu.cfs_quota_us", "600000", "400000"),
    ], id="pod-quota-lowered"),
    pytest.param(PlanCase(cpus="2-3", pod_quota=600000, prev_pod_quota=QuotaState(200000, 600000, P), members=1), [
        (f"cpuset/{CTR}/cpuset.cpus", "2-3", "0-3"),
        (f"cpu,cpuacct/{CTR}/cpu.cfs_quota_us", "200000", "400000"),
        (f"cpu,cpuacct/{POD}/cpu.cfs_quota_us", "600000", "400000"),
    ], id="pod-quota-lowered-after-the-container"),
    pytest.param(PlanCase(quota=None, pod_quota=None), [
        (f"cpuset/{CTR}/cpuset.cpus", "2-3", "0-3"),
    ], id="unlimited-quotas-only-the-cpuset"),
    pytest.param(PlanCase(pod=False, ancestors=(("custom", "0-3"),)), [
        (f"cpuset/{CTR}/cpuset.cpus", "2-3", "0-3"),
        (f"cpu,cpuacct/{CTR}/cpu.cfs_quota_us", "200000", "400000"),
    ], id="no-pod-cgroup"),
    pytest.param(PlanCase(cpus="0-3", quota=300000, pod_quota=400000, prev_quota=QuotaState(200000, 400000, P),
                          prev_pod_quota=QuotaState(200000, 400000, P)), [
        (f"cpu,cpuacct/{CTR}/cpu.cfs_quota_us", "300000", "500000"),
    ], id="kubelet-resized-the-container"),
    pytest.param(PlanCase(cpus="0-3", quota=300000, pod_quota=300000, prev_quota=QuotaState(200000, 400000, P),
                          prev_pod_quota=QuotaState(200000, 400000, P)), [
        (f"cpu,cpuacct/{POD}/cpu.cfs_quota_us", "300000", "500000"),
        (f"cpu,cpuacct/{CTR}/cpu.cfs_quota_us", "300000", "500000"),
    ], id="kubelet-resized-pod-and-container"),
    pytest.param(PlanCase(cpus="2-3", quota=400000, pod_quota=400000, prev_quota=QuotaState(200000, 400000, P),
                          prev_pod_quota=QuotaState(200000, 400000, P)), [
        (f"cpuset/{CTR}/cpuset.cpus", "2-3", "0-3"),
    ], id="kubelet-rewrote-the-cpuset"),
    pytest.param(PlanCase(V2, quota=150000, pod_quota=150000, period=50000), [
        (f"{POD}/cpu.max", "150000 50000", "250000 50000"),
        (f"{CTR}/cpuset.cpus", "2-3", "0-3"),
        (f"{CTR}/cpu.max", "150000 50000", "250000 50000"),
    ], id="v2-share-scales-with-period"),
    pytest.param(PlanCase(shared="0", exclusive="2-3", ancestors=()), [
        (f"cpu,cpuacct/{POD}/cpu.cfs_quota_us", "200000", "300000"),
        (f"cpuset/{CTR}/cpuset.cpus", "2-3", "0,2-3"),
        (f"cpu,cpuacct/{CTR}/cpu.cfs_quota_us", "200000", "300000"),
    ], id="one-shared-cpu"),
]


@pytest.mark.parametrize("case,expected", PLANS)
def test_compute_plan(case: PlanCase, expected: List[Tuple[str, str, str]]) -> None:
    plan = case.plan()
    assert short(plan) == expected
    assert plan.desired == case.exclusive | case.shared


@pytest.mark.parametrize("case,expected", PLANS)
def test_compute_plan_again_after_its_writes_writes_nothing(case: PlanCase, expected) -> None:
    """Idempotence: the cgroups as the plan left them, with the plan's bookkeeping, are in sync."""
    plan = case.plan()
    o = case.observed
    after = Observed(
        plan.desired,
        Quota(plan.quota.applied, plan.quota.period),
        None if plan.pod_quota is None else Quota(plan.pod_quota.applied, plan.pod_quota.period),
        tuple((d, cpus | plan.desired if cpus and not plan.desired <= cpus else cpus) for d, cpus in o.ancestor_cpus),
    )
    again = case.plan(after, plan.quota, plan.pod_quota)
    assert again.writes == ()
    assert (again.quota, again.pod_quota) == (plan.quota, plan.pod_quota)


def test_compute_plan_bookkeeping() -> None:
    plan = PlanCase(pod_quota=400000, prev_pod_quota=QuotaState(200000, 400000, P), members=2).plan()
    assert plan.quota == QuotaState(200000, 400000, P)
    assert plan.pod_quota == QuotaState(200000, 600000, P)


def test_pod_members_are_counted_not_accumulated() -> None:
    """Re-planning a pod of 3 members never adds more than 3 shares, however often it runs."""
    case = PlanCase(members=3)
    state = None
    pod_quota = 200000
    for _ in range(4):
        plan = compute_plan(case.layout, case.dirs, case.pod, case.observed._replace(pod_quota=Quota(pod_quota, P)),
                            case.exclusive, case.shared, None, state, 3)
        state = plan.pod_quota
        pod_quota = state.applied
    assert pod_quota == 200000 + 3 * 2 * P


# -- compute_release ------------------------------------------------------------------------

RELEASES = [
    pytest.param(Quota(400000, P), QuotaState(200000, 400000, P), 0, ("400000", "200000"),
                 QuotaState(200000, 200000, P), id="last-member-back-to-base"),
    pytest.param(Quota(600000, P), QuotaState(200000, 600000, P), 1, ("600000", "400000"),
                 QuotaState(200000, 400000, P), id="others-keep-their-share"),
    pytest.param(Quota(200000, P), QuotaState(200000, 200000, P), 0, None, QuotaState(200000, 200000, P),
                 id="nothing-to-give-back"),
    pytest.param(Quota(None, P), QuotaState(None, None, P), 0, None, QuotaState(None, None, P), id="unlimited"),
    pytest.param(Quota(300000, P), QuotaState(200000, 600000, P), 1, ("300000", "500000"),
                 QuotaState(300000, 500000, P), id="kubelet-resized-since-is-the-new-base"),
    pytest.param(Quota(400000, P), None, 0, None, QuotaState(400000, 400000, P), id="no-bookkeeping-no-guessing"),
]


@pytest.mark.parametrize("current,prev,left,write,target", RELEASES)
def test_compute_release(current: Quota, prev: Optional[QuotaState], left: int, write, target: QuotaState) -> None:
    pod = dirs(V1, POD)
    got_write, got_target = compute_release(V1, pod, current, prev, 2, left)
    assert got_target == target
    if write is None:
        assert got_write is None
    else:
        assert got_write is not None
        assert (got_write.path, got_write.old, got_write.new) == (f"/cg/cpu,cpuacct/{POD}/cpu.cfs_quota_us",) + write


def test_compute_release_v2_format() -> None:
    write, _ = compute_release(V2, dirs(V2, POD), Quota(400000, P), QuotaState(200000, 400000, P), 2, 0)
    assert (write.old, write.new) == ("400000 100000", "200000 100000")


def test_describe() -> None:
    w = Write("/cg/x/cpuset.cpus", "2-3", "0-3", "cpuset: exclusive 2-3 + shared 0-1")
    assert describe([w]) == ["/cg/x/cpuset.cpus: 2-3 -> 0-3 (cpuset: exclusive 2-3 + shared 0-1)"]
