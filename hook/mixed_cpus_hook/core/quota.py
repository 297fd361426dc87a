"""CFS quota bookkeeping: kubelet's value (the base), ours on top, and telling the two apart. Pure.

A mixed container's quota, and its pod's, is kubelet's value plus a share for the shared CPUs.
kubelet rewrites these files (an in-place resize, a restart), and so do we: the record keeps the
base and every value we wrote for it, so that a file holding one of ours keeps the base and any
other value is kubelet's new base. Shares are in millicpus (a share of ``1000`` is one CPU's
worth: one period of runtime per period), so a budget may be fractional.
"""

from __future__ import annotations

from .cgroup import Quota

TYPE_CHECKING = False
if TYPE_CHECKING:  # typing costs milliseconds on every container start
    from typing import FrozenSet, NamedTuple, Optional, Tuple
else:
    from .compat import NamedTuple

MCPU = 1000  # millicpus per CPU


class QuotaState(NamedTuple):
    """Bookkeeping for one quota file: kubelet's value (base) and what we wrote (applied).

    None means unlimited. ``ours`` lists every value this product wrote, or was about to
    write, since ``base`` was established: it is saved *before* each write, so whatever
    instant a run dies at, the next run can tell its own value in the file (base kept) from
    a value kubelet wrote (the new base). When the file holds neither, kubelet (or someone)
    wrote a new value: that becomes the base and the share goes on top again.
    """

    base: Optional[int]
    applied: Optional[int]
    period: int
    ours: Tuple[int, ...] = ()

    def is_ours(self, value: Optional[int], period: int) -> bool:
        """Whether ``value`` in the file is one this product wrote for the current base."""
        return (self.base is not None and value is not None and period == self.period
                and (value == self.applied or value in self.ours))


def compute_share_us(share_mcpu: int, period: int) -> int:
    """The runtime per period a share of ``share_mcpu`` millicpus is worth."""
    return share_mcpu * period // MCPU


def compute_quota(current: Quota, prev: Optional[QuotaState], share_mcpu: int,
                  kubelet_hint: Optional[int] = None) -> QuotaState:
    """Raise a finite quota by ``share_mcpu`` millicpus' worth; unlimited stays unlimited.

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
    base = prev.base if keep and prev is not None and prev.base is not None else current.quota
    applied = base + compute_share_us(share_mcpu, current.period)
    # While the new value is being written the old one, if it is ours, stays recognisable.
    ours = (current.quota, applied) if keep and current.quota != applied else (applied,)
    return QuotaState(base, applied, current.period, ours)


def compute_in_flight(q: Optional[QuotaState], replaced: Optional[QuotaState]) -> Optional[QuotaState]:
    """``q`` as an NRI answer, which the runtime writes after the reply: until it does, the file
    still holds the value answered before (``replaced.applied``), which stays ours, so that a
    reconcile reading the file meanwhile keeps the base instead of adding the share on top of it."""
    if (q is None or replaced is None or q.applied is None or replaced.applied is None
            or replaced.period != q.period or replaced.applied in q.ours):
        return q
    return q._replace(ours=q.ours + (replaced.applied,))


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


def compute_pod_hint(prev_quota: Optional[QuotaState], quota: Optional[QuotaState],
                     prev_pod_quota: Optional[QuotaState]) -> Optional[int]:
    """The pod quota kubelet wrote with a container's resize: it moves by the container's change."""
    if (prev_quota is None or prev_quota.base is None or quota is None or quota.base is None
            or quota.base == prev_quota.base or prev_pod_quota is None or prev_pod_quota.base is None):
        return None
    return prev_pod_quota.base + quota.base - prev_quota.base


def compute_settled(q: Optional[QuotaState]) -> Optional[QuotaState]:
    """The bookkeeping once its write is verified: only the value now in the file is ours."""
    if q is None:
        return None
    return q._replace(ours=(q.applied,) if q.applied is not None else ())


def format_quota_value(q: Optional[int]) -> str:
    """A quota for people: ``max`` for unlimited."""
    return "max" if q is None else str(q)
