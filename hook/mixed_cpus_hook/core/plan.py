"""The decision: what a mixed container's cgroups (and its pod's) should hold. No I/O.

Inputs are what was read from cgroupfs and what the records remember; the output is an
ordered list of writes (each with the value it replaces, for rollback and for logs) and the
quota bookkeeping to remember. Applying a plan whose writes are empty is the in-sync case.
"""

from __future__ import annotations

from .cgroup import Dirs, Layout, Quota, cpuset_file, format_quota, quota_file
from .cpuset import format_cpulist

TYPE_CHECKING = False
if TYPE_CHECKING:  # typing costs milliseconds on every container start
    from typing import FrozenSet, List, NamedTuple, Optional, Sequence, Tuple
else:
    from .compat import NamedTuple


class QuotaState(NamedTuple):
    """Bookkeeping for one quota file: kubelet's value (base) and what we wrote (applied).

    None means unlimited. ``ours`` lists every value this product wrote, or was about to
    write, since ``base`` was established: it is saved *before* each write, so whatever
    instant a run dies at, the next run can tell its own value in the file (base kept) from
    a value kubelet wrote (the new base). When the file holds neither, kubelet (or someone)
    wrote a new value: that becomes the base and the shared share goes on top again.
    """

    base: Optional[int]
    applied: Optional[int]
    period: int
    ours: Tuple[int, ...] = ()

    def is_ours(self, value: Optional[int], period: int) -> bool:
        """Whether ``value`` in the file is one this product wrote for the current base."""
        return (self.base is not None and value is not None and period == self.period
                and (value == self.applied or value in self.ours))


class Exclusive(NamedTuple):
    """The decision on a container's exclusive CPUs.

    ``cpus`` is None when nothing may be written: the container has no exclusive CPUs
    (``kind`` "not-applicable") or its cgroup holds CPUs that cannot be proved to be its own
    (``kind`` "conflict"). ``source`` says where the answer came from (kubelet-checkpoint, spec,
    record, cgroup); ``note`` says what was refused and why, for the journal and status.
    """

    cpus: Optional[FrozenSet[int]]
    source: str
    kind: str = "ok"
    note: str = ""


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


def compute_exclusive(assigned: Optional[FrozenSet[int]], spec_cpus: Optional[FrozenSet[int]],
                      current: FrozenSet[int], shared: FrozenSet[int],
                      prev: Optional[Tuple[FrozenSet[int], FrozenSet[int]]]) -> Exclusive:
    """The container's exclusive CPUs, never a CPU that is not provably its own.

    ``assigned`` is kubelet's checkpoint entry for this container (the truth where it
    exists); ``spec_cpus`` what kubelet asked the runtime for at creation; ``current`` what the
    cgroup holds; ``prev`` (exclusive, shared) from the record. kubelet never hands out a
    reserved (shared) CPU exclusively, so a set that overlaps the shared CPUs is kubelet's
    shared pool or a foreign write: it is never adopted as exclusive.
    """
    fmt = format_cpulist
    if assigned is not None:
        if not assigned:
            return Exclusive(None, "kubelet-checkpoint", "not-applicable", "kubelet's checkpoint entry is empty")
        if assigned & shared:
            return Exclusive(None, "kubelet-checkpoint", "conflict",
                             f"kubelet's checkpoint assigns {fmt(assigned)}, which overlaps the shared CPUs "
                             f"{fmt(shared)} (are they in kubelet's reservedSystemCPUs?)")
        foreign = current - assigned - shared - (prev[1] if prev else frozenset())
        note = (f"cgroup held {fmt(current)}: CPUs {fmt(foreign)} are not this container's in kubelet's checkpoint, "
                "refused" if foreign else "")
        return Exclusive(assigned, "kubelet-checkpoint", "ok", note)
    if spec_cpus:
        if spec_cpus & shared:
            return Exclusive(None, "spec", "not-applicable",
                             f"its cpuset {fmt(spec_cpus)} overlaps the shared {fmt(shared)}: it runs on the shared pool")
        return Exclusive(spec_cpus, "spec")
    if prev is not None:
        prev_exclusive, prev_shared = prev
        mixed = (prev_exclusive | prev_shared, prev_exclusive | shared)
        if current in mixed:
            return Exclusive(prev_exclusive, "record")
        if current and not current & (prev_shared | shared):
            return Exclusive(current, "cgroup")  # kubelet's rewrite: its (new) exclusive assignment
        if not current:
            return Exclusive(prev_exclusive, "record")
        if any(current > m for m in mixed):
            widened = current - mixed[1] - prev_shared
            return Exclusive(prev_exclusive, "record", "ok",
                             f"cpuset widened to {fmt(current)} by another writer: CPUs {fmt(widened)} refused")
        return Exclusive(None, "record", "conflict",
                         f"cpuset {fmt(current)} holds shared CPUs but is not the recorded mixed set "
                         f"{fmt(mixed[1])}: kubelet's shared pool or a foreign write, not adopted, nothing written")
    if current and not current & shared:
        return Exclusive(current, "cgroup")
    return Exclusive(None, "cgroup", "not-applicable",
                     f"its cpuset {fmt(current) or 'empty'} overlaps or lacks the shared {fmt(shared)}: "
                     "it runs on the shared pool")


def compute_quota(current: Quota, prev: Optional[QuotaState], extra_cpus: int,
                  kubelet_hint: Optional[int] = None) -> QuotaState:
    """Raise a finite quota by ``extra_cpus`` CPUs' worth; unlimited stays unlimited.

    Idempotent: while the file holds a value we wrote, the remembered base is kept, so
    applying again never adds twice; ``ours`` of the result holds the value being replaced
    (when it is ours) and the new one, to be saved before the write.

    ``kubelet_hint`` is the value kubelet itself would write now (a Guaranteed container's
    quota is its CPU count x period; its pod's moves by the same amount): a file holding it
    is kubelet's resize even when it equals a value we wrote (a resize by exactly the shared
    CPUs' share), so it becomes the new base.
    """
    if current.quota is None:
        return QuotaState(None, None, current.period)
    keep = prev is not None and prev.is_ours(current.quota, current.period)
    if keep and prev is not None and kubelet_hint is not None and current.quota == kubelet_hint != prev.base:
        keep = False
    base = prev.base if keep and prev is not None else current.quota
    applied = base + extra_cpus * current.period
    # While the new value is being written the old one, if it is ours, stays recognisable.
    ours = (current.quota, applied) if keep and current.quota != applied else (applied,)
    return QuotaState(base, applied, current.period, ours)


def compute_quota_hint(prev_quota: Optional[QuotaState], prev_exclusive: Optional[FrozenSet[int]],
                       exclusive: FrozenSet[int], period: int) -> Optional[int]:
    """The quota kubelet would write for ``exclusive``, when kubelet's quota follows the CPU count.

    kubelet gives a Guaranteed container with integer CPUs a quota of CPUs x period (when
    finite). When the recorded base did follow that rule and the exclusive set changed size
    (an in-place resize), this is what kubelet wrote with it; else None (nothing to go by).
    """
    if (prev_quota is None or prev_quota.base is None or prev_exclusive is None
            or len(prev_exclusive) == len(exclusive) or prev_quota.base != len(prev_exclusive) * prev_quota.period):
        return None
    return len(exclusive) * period


def compute_plan(layout: Layout, dirs: Dirs, pod: Optional[Dirs], observed: Observed,
                 exclusive: FrozenSet[int], shared: FrozenSet[int],
                 prev_quota: Optional[QuotaState], prev_pod_quota: Optional[QuotaState],
                 pod_members: int, quota_hint: Optional[int] = None) -> Plan:
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
    quota = compute_quota(observed.quota, prev_quota, n, quota_hint)
    pod_quota = None
    pod_first: List[Write] = []
    pod_last: List[Write] = []
    if pod is not None and observed.pod_quota is not None:
        # kubelet resizes the pod with the container: its pod quota moved by the same amount.
        pod_hint = None
        if (prev_quota is not None and prev_quota.base is not None and quota.base is not None
                and quota.base != prev_quota.base and prev_pod_quota is not None and prev_pod_quota.base is not None):
            pod_hint = prev_pod_quota.base + quota.base - prev_quota.base
        pod_quota = compute_quota(observed.pod_quota, prev_pod_quota, n * pod_members, pod_hint)
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
