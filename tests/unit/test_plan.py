"""The pure decision: exclusive CPUs, quotas, the ordered writes, and giving a share back.

No files: layouts and directories are plain values, and expected writes are written out.
"""

from __future__ import annotations

from typing import List, NamedTuple, Optional, Tuple

import pytest

from mixed_cpus_hook.core.cgroup import Dirs, Layout, Quota
from mixed_cpus_hook.core.cpuset import parse_cpulist
from mixed_cpus_hook.core.desired import Desired, compute_exclusive, compute_pod_quota
from mixed_cpus_hook.core.plan import Observed, Write, compute_plan, compute_release, describe
from mixed_cpus_hook.core.quota import MCPU, QuotaState, compute_in_flight, compute_quota, compute_quota_hint

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

def X(cpus: Optional[str], source: str, kind: str = "ok", note: str = "") -> Tuple[Optional[str], str, str, str]:
    """An expected Exclusive decision; ``note`` is a substring of the decision's note."""
    return (cpus, source, kind, note)


EXCLUSIVE = [
    # assigned (kubelet's checkpoint), spec, current, shared, prev (exclusive, shared) -> decision
    pytest.param(None, "2-3", "2-3", "0-1", None, X("2-3", "spec"), id="spec-disjoint-from-shared"),
    pytest.param(None, "2-3", "0-3", "0-1", None, X("2-3", "spec"), id="spec-wins-over-the-cgroup"),
    pytest.param(None, "0-3", "0-3", "0-1", None, X(None, "spec", "not-applicable", "overlaps the shared"),
                 id="spec-overlaps-shared-is-the-shared-pool"),
    pytest.param(None, "1", "1", "0-1", None, X(None, "spec", "not-applicable"), id="spec-inside-shared"),
    pytest.param(None, None, "2-3", "0-1", None, X("2-3", "cgroup"), id="no-spec-cgroup-disjoint"),
    pytest.param(None, None, "0-3", "0-1", None, X(None, "cgroup", "not-applicable"), id="no-spec-cgroup-overlaps"),
    pytest.param(None, None, "", "0-1", None, X(None, "cgroup", "not-applicable"), id="no-spec-empty-cgroup"),
    pytest.param(None, None, "0-3", "0-1", ("2-3", "0-1"), X("2-3", "record"), id="record-union-still-there"),
    pytest.param(None, None, "4-5", "0-1", ("2-3", "0-1"), X("4-5", "cgroup"), id="kubelet-moved-the-exclusive-cpus"),
    pytest.param(None, None, "0-1,4-5", "0-1", ("2-3", "0-1"), X(None, "record", "conflict", "not adopted"),
                 id="shared-plus-unknown-cpus-is-not-adopted"),
    pytest.param(None, None, "0-1", "0-1", ("2-3", "0-1"), X(None, "record", "conflict", "kubelet's shared pool"),
                 id="kubelet-wrote-only-the-shared-cpus-nothing-written-back"),
    # A superset of the recorded mixed set (a foreign write, or kubelet's shared pool): its extra CPUs are never
    # adopted; the set shrinks back to the recorded one, which it holds anyway (no CPU is granted).
    pytest.param(None, None, "0-7", "0-1", ("2-3", "0-1"), X("2-3", "record", "ok", "CPUs 4-7 refused"),
                 id="kubelet-shared-pool-not-recorded-as-exclusive"),
    pytest.param(None, None, "0-5", "0-1", ("2-3", "0-1"), X("2-3", "record", "ok", "widened to 0-5"),
                 id="foreign-widening-without-checkpoint-shrinks-back"),
    pytest.param(None, None, "", "0-1", ("2-3", "0-1"), X("2-3", "record"), id="empty-cgroup-keeps-record"),
    pytest.param(None, None, "0-3", "0,4", ("2-3", "0-1"), X("2-3", "record"), id="shared-changed-since-record"),
    pytest.param(None, None, "0,2-4", "0,4", ("2-3", "0-1"), X("2-3", "record"),
                 id="old-and-new-shared-both-removed"),
    pytest.param(None, "6-7", "0-3", "0-1", ("2-3", "0-1"), X("6-7", "spec"), id="spec-wins-over-the-record"),
    # kubelet's checkpoint is the truth
    pytest.param("2-3", None, "0-7", "0-1", ("2-3", "0-1"), X("2-3", "kubelet-checkpoint", "ok", "CPUs 4-7 are not"),
                 id="checkpoint-refuses-a-foreign-widening"),
    pytest.param("4-5", None, "0-3", "0-1", ("2-3", "0-1"), X("4-5", "kubelet-checkpoint", "ok", "CPUs 2-3"),
                 id="checkpoint-follows-kubelets-new-assignment"),
    pytest.param("2-3", "2-7", "2-7", "0-1", None, X("2-3", "kubelet-checkpoint", "ok", "CPUs 4-7"),
                 id="checkpoint-wins-over-the-spec"),
    pytest.param("2-3", None, "0-1", "0-1", ("2-3", "0-1"), X("2-3", "kubelet-checkpoint"),
                 id="checkpoint-after-kubelet-wrote-the-shared-pool"),
    pytest.param("1-2", None, "1-2", "0-1", None, X(None, "kubelet-checkpoint", "conflict", "overlaps the shared"),
                 id="checkpoint-entry-overlapping-shared"),
    pytest.param("", None, "2-3", "0-1", None, X(None, "kubelet-checkpoint", "not-applicable"),
                 id="checkpoint-entry-empty"),
]


@pytest.mark.parametrize("assigned,spec,current,shared,prev,expected", EXCLUSIVE)
def test_compute_exclusive(assigned: Optional[str], spec: Optional[str], current: str, shared: str,
                           prev: Optional[Tuple[str, str]], expected: Tuple[Optional[str], str, str, str]) -> None:
    prev_sets = None if prev is None else (c(prev[0]), c(prev[1]))
    got = compute_exclusive(c(assigned) if assigned is not None else None, c(spec) if spec is not None else None,
                            c(current), c(shared), prev_sets)
    cpus, source, kind, note = expected
    assert (got.cpus, got.source, got.kind) == (None if cpus is None else c(cpus), source, kind)
    assert note in got.note
    assert (got.note == "") == (kind == "ok" and not note)


# -- compute_quota --------------------------------------------------------------------------


def Q(base: Optional[int], applied: Optional[int], period: int = P, *ours: int) -> QuotaState:
    """Quota bookkeeping; ``ours`` defaults to just the applied value."""
    return QuotaState(base, applied, period, tuple(ours) if ours else ((applied,) if applied is not None else ()))


QUOTAS = [
    pytest.param(Quota(None, P), None, 2, Q(None, None), id="unlimited-stays-unlimited"),
    pytest.param(Quota(200000, P), None, 2, Q(200000, 400000), id="first-apply"),
    pytest.param(Quota(400000, P), Q(200000, 400000), 2, Q(200000, 400000), id="again-adds-nothing"),
    pytest.param(Quota(300000, P), Q(200000, 400000), 2, Q(300000, 500000), id="kubelet-resize-is-the-new-base"),
    pytest.param(Quota(200000, P), Q(200000, 400000), 2, Q(200000, 400000), id="kubelet-restored-base"),
    pytest.param(Quota(400000, 50000), Q(200000, 400000), 2, Q(400000, 500000, 50000),
                 id="new-period-is-a-new-base"),
    pytest.param(Quota(200000, P), Q(None, None), 2, Q(200000, 400000), id="was-unlimited-now-finite"),
    pytest.param(Quota(400000, P), QuotaState(None, 400000, P), 2, Q(400000, 600000),
                 id="record-without-base-is-not-trusted"),
    pytest.param(Quota(200000, P), None, 0, Q(200000, 200000), id="no-extra"),
    pytest.param(Quota(150000, 50000), None, 3, Q(150000, 300000, 50000), id="extra-scales-with-period"),
    # crash safety: the value being replaced stays ours until the write is verified
    pytest.param(Quota(1200000, P), Q(1000000, 1200000), 4, Q(1000000, 1400000, P, 1200000, 1400000),
                 id="second-member-keeps-the-old-value-ours-during-the-write"),
    pytest.param(Quota(1200000, P), Q(1000000, 1400000, P, 1200000, 1400000), 4, Q(1000000, 1400000, P, 1200000, 1400000),
                 id="killed-before-the-write-old-value-is-still-ours"),
    pytest.param(Quota(1400000, P), Q(1000000, 1400000, P, 1200000, 1400000), 4, Q(1000000, 1400000),
                 id="killed-after-the-write-new-value-is-ours"),
    pytest.param(Quota(1300000, P), Q(1000000, 1400000, P, 1200000, 1400000), 4, Q(1300000, 1700000),
                 id="neither-value-is-kubelets-new-base"),
    pytest.param(Quota(1200000, P), Q(1000000, 1000000, P, 1200000, 1000000), 0, Q(1000000, 1000000, P, 1200000, 1000000),
                 id="release-killed-before-its-write"),
]


@pytest.mark.parametrize("current,prev,extra,hint,expected", [
    # A resize by exactly the shared share: kubelet's new quota is the value we wrote. The hint (what
    # kubelet writes for the container's new CPU count) tells it apart.
    pytest.param(Quota(200000, P), Q(100000, 200000), 1, 200000, Q(200000, 300000), id="resize-onto-our-value"),
    pytest.param(Quota(200000, P), Q(100000, 200000), 1, None, Q(100000, 200000), id="no-hint-is-ours"),
    pytest.param(Quota(200000, P), Q(100000, 200000), 1, 300000, Q(100000, 200000), id="hint-elsewhere-is-ours"),
    pytest.param(Quota(100000, P), Q(100000, 200000), 1, 100000, Q(100000, 200000), id="hint-equal-to-base"),
])
def test_compute_quota_with_kubelets_hint(current: Quota, prev: QuotaState, extra: int, hint: Optional[int],
                                          expected: QuotaState) -> None:
    assert compute_quota(current, prev, extra * MCPU, hint) == expected


@pytest.mark.parametrize("prev,prev_excl,excl,expected", [
    pytest.param(Q(100000, 200000), "1", "1-2", 200000, id="one-more-cpu"),
    pytest.param(Q(100000, 200000), "1", "2", None, id="same-count"),
    pytest.param(Q(150000, 250000), "1", "1-2", None, id="base-not-per-cpu"),
    pytest.param(Q(None, None), "1", "1-2", None, id="unlimited"),
    pytest.param(None, None, "1-2", None, id="first-apply"),
])
def test_compute_quota_hint(prev: Optional[QuotaState], prev_excl: Optional[str], excl: str,
                            expected: Optional[int]) -> None:
    assert compute_quota_hint(prev, c(prev_excl) if prev_excl else None, c(excl), P) == expected


@pytest.mark.parametrize("current,prev,extra,expected", QUOTAS)
def test_compute_quota(current: Quota, prev: Optional[QuotaState], extra: int, expected: QuotaState) -> None:
    assert compute_quota(current, prev, extra * MCPU) == expected


@pytest.mark.parametrize("q,replaced,expected", [
    # resized down: the answer 400000 is in flight, the file still holds the last answer 500000
    (QuotaState(200000, 400000, 100000, (400000,)), QuotaState(300000, 500000, 100000, (500000,)),
     QuotaState(200000, 400000, 100000, (400000, 500000))),
    # the same answer again: nothing to add
    (QuotaState(200000, 400000, 100000, (400000,)), QuotaState(200000, 400000, 100000, (400000,)),
     QuotaState(200000, 400000, 100000, (400000,))),
    # another period: the old value is not read as ours anyway (is_ours checks the period)
    (QuotaState(20000, 40000, 10000, (40000,)), QuotaState(300000, 500000, 100000, (500000,)),
     QuotaState(20000, 40000, 10000, (40000,))),
    # unlimited, before or now: nothing is ours
    (QuotaState(None, None, 100000), QuotaState(300000, 500000, 100000, (500000,)), QuotaState(None, None, 100000)),
    (QuotaState(200000, 400000, 100000, (400000,)), QuotaState(None, None, 100000),
     QuotaState(200000, 400000, 100000, (400000,))),
    (QuotaState(200000, 400000, 100000, (400000,)), None, QuotaState(200000, 400000, 100000, (400000,))),
])
def test_compute_in_flight(q: QuotaState, replaced: Optional[QuotaState], expected: QuotaState) -> None:
    assert compute_in_flight(q, replaced) == expected
    # a file still holding the replaced value keeps the base: nothing added twice
    if replaced is not None and replaced.applied is not None and expected.ours != q.ours:
        again = compute_quota(Quota(replaced.applied, replaced.period), expected, 2 * MCPU)
        assert (again.base, again.applied) == (q.base, q.applied)


def test_compute_quota_is_idempotent() -> None:
    state = compute_quota(Quota(200000, P), None, 2 * MCPU)
    for _ in range(5):
        state = compute_quota(Quota(state.applied, P), state, 2 * MCPU)
    assert state == Q(200000, 400000)


# -- compute_plan ---------------------------------------------------------------------------

class Plan(NamedTuple):
    """compute_plan's writes with the decision they carry out."""

    writes: Tuple[Write, ...]
    desired: frozenset
    quota: QuotaState
    pod_quota: Optional[QuotaState]


def plan_for(layout: Layout, dirs_: Dirs, pod: Optional[Dirs], observed: Observed, exclusive: frozenset,
             shared: frozenset, prev_quota: Optional[QuotaState], prev_pod_quota: Optional[QuotaState],
             members: int) -> Plan:
    """The decision (quota and pod quota, as core.desired makes them) and the plan that writes it."""
    share = len(shared) * MCPU
    quota = compute_quota(observed.quota, prev_quota, share)
    desired = Desired("mixed", exclusive, shared, "spec", quota, share)
    pod_quota = None
    if pod is not None and observed.pod_quota is not None:
        pod_quota = compute_pod_quota(observed.pod_quota, prev_pod_quota, [share] * members, prev_quota, quota)
    writes = compute_plan(layout, dirs_, pod, observed, desired, pod_quota, members, share * members)
    return Plan(writes, desired.cpus, quota, pod_quota)


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
        return plan_for(self.layout, self.dirs, self.pod, observed or self.observed, self.exclusive, self.shared,
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
    pytest.param(PlanCase(cpus="0-3", quota=400000, pod_quota=400000, prev_quota=Q(200000, 400000),
                          prev_pod_quota=Q(200000, 400000)), [], id="in-sync-writes-nothing"),
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
    pytest.param(PlanCase(pod_quota=400000, prev_pod_quota=Q(200000, 400000), members=2), [
        (f"cpu,cpuacct/{POD}/cpu.cfs_quota_us", "400000", "600000"),
        (f"cpuset/{CTR}/cpuset.cpus", "2-3", "0-3"),
        (f"cpu,cpuacct/{CTR}/cpu.cfs_quota_us", "200000", "400000"),
    ], id="second-member-of-a-pod"),
    pytest.param(PlanCase(cpus="0-3", quota=400000, pod_quota=600000, prev_quota=Q(200000, 400000),
                          prev_pod_quota=Q(200000, 600000), members=1, exclusive="2-3"), [
        (f"cpu,cpuacct/{POD}/cpu.cfs_quota_us", "600000", "400000"),
    ], id="pod-quota-lowered"),
    pytest.param(PlanCase(cpus="2-3", pod_quota=600000, prev_pod_quota=Q(200000, 600000), members=1), [
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
    pytest.param(PlanCase(cpus="0-3", quota=300000, pod_quota=400000, prev_quota=Q(200000, 400000),
                          prev_pod_quota=Q(200000, 400000)), [
        (f"cpu,cpuacct/{CTR}/cpu.cfs_quota_us", "300000", "500000"),
    ], id="kubelet-resized-the-container"),
    pytest.param(PlanCase(cpus="0-3", quota=300000, pod_quota=300000, prev_quota=Q(200000, 400000),
                          prev_pod_quota=Q(200000, 400000)), [
        (f"cpu,cpuacct/{POD}/cpu.cfs_quota_us", "300000", "500000"),
        (f"cpu,cpuacct/{CTR}/cpu.cfs_quota_us", "300000", "500000"),
    ], id="kubelet-resized-pod-and-container"),
    pytest.param(PlanCase(cpus="2-3", quota=400000, pod_quota=400000, prev_quota=Q(200000, 400000),
                          prev_pod_quota=Q(200000, 400000)), [
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
    # Once the writes are done only the new values are ours: the bookkeeping settles.
    settled = [None if q is None else q._replace(ours=(q.applied,) if q.applied is not None else ())
               for q in (plan.quota, plan.pod_quota)]
    assert [again.quota, again.pod_quota] == settled


def test_compute_plan_bookkeeping() -> None:
    plan = PlanCase(pod_quota=400000, prev_pod_quota=Q(200000, 400000), members=2).plan()
    assert plan.quota == Q(200000, 400000)
    # The pod's old value (one share) stays ours until the new one (two shares) is verified.
    assert plan.pod_quota == Q(200000, 600000, P, 400000, 600000)


def test_pod_members_are_counted_not_accumulated() -> None:
    """Re-planning a pod of 3 members never adds more than 3 shares, however often it runs."""
    case = PlanCase(members=3)
    state = None
    pod_quota = 200000
    for _ in range(4):
        plan = plan_for(case.layout, case.dirs, case.pod, case.observed._replace(pod_quota=Quota(pod_quota, P)),
                        case.exclusive, case.shared, None, state, 3)
        state = plan.pod_quota
        pod_quota = state.applied
    assert pod_quota == 200000 + 3 * 2 * P


# -- compute_release ------------------------------------------------------------------------

RELEASES = [
    pytest.param(Quota(400000, P), Q(200000, 400000), 0, ("400000", "200000"),
                 Q(200000, 200000, P, 400000, 200000), id="last-member-back-to-base"),
    pytest.param(Quota(600000, P), Q(200000, 600000), 1, ("600000", "400000"),
                 Q(200000, 400000, P, 600000, 400000), id="others-keep-their-share"),
    pytest.param(Quota(200000, P), Q(200000, 200000), 0, None, Q(200000, 200000),
                 id="nothing-to-give-back"),
    pytest.param(Quota(None, P), Q(None, None), 0, None, Q(None, None), id="unlimited"),
    pytest.param(Quota(300000, P), Q(200000, 600000), 1, ("300000", "500000"),
                 Q(300000, 500000), id="kubelet-resized-since-is-the-new-base"),
    pytest.param(Quota(400000, P), None, 0, None, Q(400000, 400000), id="no-bookkeeping-no-guessing"),
]


@pytest.mark.parametrize("current,prev,left,write,target", RELEASES)
def test_compute_release(current: Quota, prev: Optional[QuotaState], left: int, write, target: QuotaState) -> None:
    pod = dirs(V1, POD)
    got_write, got_target = compute_release(V1, pod, current, prev, [2 * MCPU] * left)
    assert got_target == target
    if write is None:
        assert got_write is None
    else:
        assert got_write is not None
        assert (got_write.path, got_write.old, got_write.new) == (f"/cg/cpu,cpuacct/{POD}/cpu.cfs_quota_us",) + write


def test_compute_release_v2_format() -> None:
    write, _ = compute_release(V2, dirs(V2, POD), Quota(400000, P), Q(200000, 400000), [])
    assert (write.old, write.new) == ("400000 100000", "200000 100000")


def test_describe() -> None:
    w = Write("/cg/x/cpuset.cpus", "2-3", "0-3", "cpuset: exclusive 2-3 + shared 0-1")
    assert describe([w]) == ["/cg/x/cpuset.cpus: 2-3 -> 0-3 (cpuset: exclusive 2-3 + shared 0-1)"]
