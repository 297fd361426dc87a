"""The decision: what a mixed container's cgroups (and its pod's) should hold. No I/O.

Inputs are what was read from cgroupfs and what the records remember; the output is an
ordered list of writes (each with the value it replaces, for rollback and for logs) and the
quota bookkeeping to remember. Applying a plan whose writes are empty is the in-sync case.
"""

from __future__ import annotations


from .cgroups import Dirs, Layout, Quota, cpuset_file, format_quota, quota_file
from .cpuset import format_cpulist

TYPE_CHECKING = False
if TYPE_CHECKING:  # typing costs milliseconds on every container start
    from typing import FrozenSet, List, NamedTuple, Optional, Sequence, Tuple
else:
    from ._compat import NamedTuple


class QuotaState(NamedTuple):
    """Bookkeeping for one quota file: kubelet's value (base) and what we wrote (applied).

    None means unlimited. When the file no longer holds ``applied``, kubelet (or someone)
    wrote a new value: that becomes the base and the shared share goes on top again.
    """

    base: Optional[int]
    applied: Optional[int]
    period: int


class Write(NamedTuple):
    path: str
    old: str
    new: str
    why: str


class Observed(NamedTuple):
    """The current values of everything a plan may touch."""

    cpus: FrozenSet[int]
    quota: Quota
    pod_quota: Optional[Quota]
    ancestor_cpus: Tuple[Tuple[str, FrozenSet[int]], ...]


class Plan(NamedTuple):
    writes: Tuple[Write, ...]
    desired: FrozenSet[int]
    quota: QuotaState
    pod_quota: Optional[QuotaState]


def compute_exclusive(spec_cpus: Optional[FrozenSet[int]], current: FrozenSet[int], shared: FrozenSet[int],
                      prev: Optional[Tuple[FrozenSet[int], FrozenSet[int]]]) -> Optional[FrozenSet[int]]:
    """The container's exclusive CPUs, or None when it has none (it runs on the shared pool).

    kubelet never hands out a reserved CPU exclusively, so a cpuset that overlaps the shared
    CPUs is the shared pool, not an exclusive allocation. ``prev`` is (exclusive, shared)
    from the record: when the cgroup still holds their union, the exclusive part is known;
    when kubelet rewrote it to a set without shared CPUs, that set is the new exclusive one.
    """
    if spec_cpus:
        return None if spec_cpus & shared else spec_cpus
    if prev is not None:
        prev_exclusive, prev_shared = prev
        if current == prev_exclusive | prev_shared:
            return prev_exclusive
        if current and not current & (prev_shared | shared):
            return current
        return (current - prev_shared - shared) or prev_exclusive
    return current if current and not current & shared else None


def compute_quota(current: Quota, prev: Optional[QuotaState], extra_cpus: int) -> QuotaState:
    """Raise a finite quota by ``extra_cpus`` CPUs' worth; unlimited stays unlimited.

    Idempotent: while the file holds what we applied, the remembered base is kept, so
    applying again never adds twice.
    """
    if current.quota is None:
        return QuotaState(None, None, current.period)
    if prev is not None and prev.applied == current.quota and prev.period == current.period and prev.base is not None:
        base = prev.base
    else:
        base = current.quota
    return QuotaState(base, base + extra_cpus * current.period, current.period)


def compute_plan(layout: Layout, dirs: Dirs, pod: Optional[Dirs], observed: Observed,
                 exclusive: FrozenSet[int], shared: FrozenSet[int],
                 prev_quota: Optional[QuotaState], prev_pod_quota: Optional[QuotaState],
                 pod_members: int) -> Plan:
    """The ordered writes that bring the container (and its pod) to exclusive ∪ shared.

    Order: widen ancestors' cpusets top-down (a v1 child must fit in its parent), raise the
    pod's quota, then the container's cpuset and quota, and lower the pod's quota last.
    Only values that differ are written.
    """
    desired = frozenset(exclusive | shared)
    n = len(shared)
    writes: List[Write] = []
    for d, cpus in observed.ancestor_cpus:
        if cpus and not desired <= cpus:
            writes.append(Write(cpuset_file(layout, d), format_cpulist(cpus), format_cpulist(cpus | desired),
                                "ancestor cpuset widened to fit the mixed set"))
    quota = compute_quota(observed.quota, prev_quota, n)
    pod_quota = None
    pod_first: List[Write] = []
    pod_last: List[Write] = []
    if pod is not None and observed.pod_quota is not None:
        pod_quota = compute_quota(observed.pod_quota, prev_pod_quota, n * pod_members)
        if pod_quota.applied != observed.pod_quota.quota:
            w = Write(quota_file(layout, pod.cpu), format_quota(layout, observed.pod_quota),
                      format_quota(layout, Quota(pod_quota.applied, pod_quota.period)),
                      f"pod quota: base {pod_quota.base} + {pod_members} mixed container(s) x {n} shared CPU(s)")
            raising = observed.pod_quota.quota is not None and (
                pod_quota.applied is None or pod_quota.applied > observed.pod_quota.quota)
            (pod_first if raising else pod_last).append(w)
    writes.extend(pod_first)
    if observed.cpus != desired:
        writes.append(Write(cpuset_file(layout, dirs.cpuset), format_cpulist(observed.cpus), format_cpulist(desired),
                            f"cpuset: exclusive {format_cpulist(exclusive)} + shared {format_cpulist(shared)}"))
    if quota.applied != observed.quota.quota:
        writes.append(Write(quota_file(layout, dirs.cpu), format_quota(layout, observed.quota),
                            format_quota(layout, Quota(quota.applied, quota.period)),
                            f"quota: base {quota.base} + {n} shared CPU(s) x period {quota.period}"))
    writes.extend(pod_last)
    return Plan(tuple(writes), desired, quota, pod_quota)


def compute_release(layout: Layout, pod: Dirs, current: Quota, prev: Optional[QuotaState],
                    shared_count: int, members_left: int) -> Tuple[Optional[Write], QuotaState]:
    """Give back one container's share of its pod's quota; the others keep theirs."""
    target = compute_quota(current, prev, shared_count * members_left)
    if target.applied == current.quota:
        return None, target
    return (Write(quota_file(layout, pod.cpu), format_quota(layout, current),
                  format_quota(layout, Quota(target.applied, target.period)),
                  f"pod quota: base {target.base} + {members_left} mixed container(s) x {shared_count} shared CPU(s)"),
            target)


def describe(writes: Sequence[Write]) -> List[str]:
    """One human line per write, for --dry-run and the journal."""
    return [f"{w.path}: {w.old} -> {w.new} ({w.why})" for w in writes]
