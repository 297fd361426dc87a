"""From desired to written: the ordered writes that bring a container's cgroups to a decision. Pure.

``core.desired`` says what a container (and its pod's quota) should hold; this module compares
that with what was read from cgroupfs and returns the writes, in the order the kernel accepts
them, each with the value it replaces (for rollback and the journal). No writes: in sync.
"""

from __future__ import annotations

from .cgroup import Dirs, Layout, Quota, cpuset_file, format_quota, quota_file
from .cpuset import format_cpulist
from .quota import MCPU, QuotaState, compute_quota

TYPE_CHECKING = False
if TYPE_CHECKING:  # typing costs milliseconds on every container start
    from typing import FrozenSet, List, NamedTuple, Optional, Sequence, Tuple

    from .desired import Desired
else:
    from .compat import NamedTuple


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


def format_pod_why(q: QuotaState, members: int, shares_mcpu: int) -> str:
    """Why a pod's quota is what it is, for the journal."""
    return f"pod quota: base {q.base} + {members} mixed container(s) x {shares_mcpu / MCPU:g} CPU(s) in all"


def compute_pod_write(layout: Layout, pod: Dirs, observed: Quota, target: QuotaState, members: int,
                      shares_mcpu: int) -> Optional[Write]:
    """The write that puts a pod's quota at ``target`` (None when it is there)."""
    if target.applied == observed.quota:
        return None
    return Write(quota_file(layout, pod.cpu), format_quota(layout, observed),
                 format_quota(layout, Quota(target.applied, target.period)), format_pod_why(target, members, shares_mcpu))


def compute_plan(layout: Layout, dirs: Dirs, pod: Optional[Dirs], observed: Observed, desired: Desired,
                 pod_quota: Optional[QuotaState], members: int = 0, shares_mcpu: int = 0) -> Tuple[Write, ...]:
    """The ordered writes that bring the container (and its pod) to ``desired``.

    Order: widen ancestors' cpusets top-down (a v1 child must fit in its parent), raise the
    pod's quota, then the container's cpuset and quota, and lower the pod's quota last (a v1
    child's quota may not exceed its parent's). Only values that differ are written.
    """
    target = desired.cpus
    quota = desired.quota
    assert quota is not None, "a plan is made for a mixed container only"
    writes: List[Write] = []
    for d, cpus in observed.ancestor_cpus:
        if cpus and not target <= cpus:
            writes.append(Write(cpuset_file(layout, d), format_cpulist(cpus), format_cpulist(cpus | target),
                                "ancestor cpuset widened to fit the mixed set"))
    pod_first: List[Write] = []
    pod_last: List[Write] = []
    if pod is not None and observed.pod_quota is not None and pod_quota is not None:
        w = compute_pod_write(layout, pod, observed.pod_quota, pod_quota, members, shares_mcpu)
        if w is not None:
            raising = observed.pod_quota.quota is not None and (
                pod_quota.applied is None or pod_quota.applied > observed.pod_quota.quota)
            (pod_first if raising else pod_last).append(w)
    writes.extend(pod_first)
    if observed.cpus != target:
        writes.append(Write(cpuset_file(layout, dirs.cpuset), format_cpulist(observed.cpus), format_cpulist(target),
                            f"cpuset: exclusive {format_cpulist(desired.exclusive)} + shared "
                            f"{format_cpulist(desired.shared)}"))
    if quota.applied != observed.quota.quota:
        writes.append(Write(quota_file(layout, dirs.cpu), format_quota(layout, observed.quota),
                            format_quota(layout, Quota(quota.applied, quota.period)),
                            f"quota: base {quota.base} + {desired.share_mcpu / MCPU:g} shared CPU(s) x period "
                            f"{quota.period}"))
    writes.extend(pod_last)
    return tuple(writes)


def compute_release(layout: Layout, pod: Dirs, current: Quota, prev: Optional[QuotaState],
                    shares_left: Sequence[int]) -> Tuple[Optional[Write], QuotaState]:
    """Give back one container's share of its pod's quota; the others (``shares_left``) keep theirs."""
    total = sum(shares_left)
    target = compute_quota(current, prev, total)
    return compute_pod_write(layout, pod, current, target, len(shares_left), total), target


def describe(writes: Sequence[Write]) -> List[str]:
    """One human line per write, for --dry-run and the journal."""
    return [f"{w.path}: {w.old} -> {w.new} ({w.why})" for w in writes]
