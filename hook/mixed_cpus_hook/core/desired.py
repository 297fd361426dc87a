"""The one decision: what a container should hold, and what its pod's quota should be. Pure.

Every front end and use case asks this module and nothing else: the hook's apply and the
periodic reconcile (from the cgroup's current values), NRI's CreateContainer, UpdateContainer
and Synchronize (from the runtime's values), and status (which compares the answer with the
cgroup). The inputs are plain facts:

- what kubelet says now (``Kubelet``): the cpuset and quota it wrote or asks for, its
  cpuset at creation, and its checkpoint's entry for the container (the truth where it exists);
- the node's shared CPUs;
- what the product remembers (the container's record, its pod's record).
"""

from __future__ import annotations

from .cpuset import format_cpulist
from .model import ContainerRecord
from .quota import MCPU, QuotaState, compute_pod_hint, compute_quota, compute_quota_hint

TYPE_CHECKING = False
if TYPE_CHECKING:  # typing costs milliseconds on every container start
    from typing import Dict, FrozenSet, Iterable, NamedTuple, Optional, Tuple

    from .cgroup import Quota
else:
    from .compat import NamedTuple


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


class Kubelet(NamedTuple):
    """What kubelet says about one container at this event.

    ``cpus`` and ``quota``: what the cgroup holds (hook mode, reconcile, status) or what kubelet
    asks the runtime to write (NRI's create and update); an empty ``cpus`` means "not in this
    update". ``spec_cpus``: kubelet's cpuset at creation (only when the container is new).
    ``assigned``: kubelet's checkpoint entry (None without one).
    """

    cpus: FrozenSet[int]
    quota: Quota
    spec_cpus: Optional[FrozenSet[int]] = None
    assigned: Optional[FrozenSet[int]] = None


class Desired(NamedTuple):
    """What one container should hold.

    ``kind`` is "mixed" (then every field is set), or "not-applicable" / "conflict" (nothing is
    to be written for it; ``note`` says why). ``share_mcpu`` is what it adds to its pod's quota.
    ``source`` is what the record keeps (where the exclusive set first came from), ``decided_by``
    what decided it this time (status shows that).
    """

    kind: str
    exclusive: FrozenSet[int]
    shared: FrozenSet[int]
    source: str
    quota: Optional[QuotaState]
    share_mcpu: int = 0
    note: str = ""
    decided_by: str = ""

    @property
    def cpus(self) -> FrozenSet[int]:
        return self.exclusive | self.shared

    @property
    def mixed(self) -> bool:
        return self.kind == "mixed"


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
    if assigned is not None:
        return _from_checkpoint(assigned, current, shared, prev)
    if spec_cpus:
        if spec_cpus & shared:
            return Exclusive(None, "spec", "not-applicable",
                             f"its cpuset {format_cpulist(spec_cpus)} overlaps the shared {format_cpulist(shared)}: "
                             "it runs on the shared pool")
        return Exclusive(spec_cpus, "spec")
    if prev is not None:
        return _from_record(current, shared, prev)
    if current and not current & shared:
        return Exclusive(current, "cgroup")
    return Exclusive(None, "cgroup", "not-applicable",
                     f"its cpuset {format_cpulist(current) or 'empty'} overlaps or lacks the shared "
                     f"{format_cpulist(shared)}: it runs on the shared pool")


def _from_checkpoint(assigned: FrozenSet[int], current: FrozenSet[int], shared: FrozenSet[int],
                     prev: Optional[Tuple[FrozenSet[int], FrozenSet[int]]]) -> Exclusive:
    fmt = format_cpulist
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


def _from_record(current: FrozenSet[int], shared: FrozenSet[int],
                 prev: Tuple[FrozenSet[int], FrozenSet[int]]) -> Exclusive:
    prev_exclusive, prev_shared = prev
    mixed = (prev_exclusive | prev_shared, prev_exclusive | shared)
    if current in mixed or not current:
        return Exclusive(prev_exclusive, "record")
    if not current & (prev_shared | shared):
        return Exclusive(current, "cgroup")  # kubelet's rewrite: its (new) exclusive assignment
    if any(current > m for m in mixed):
        widened = current - mixed[1] - prev_shared
        return Exclusive(prev_exclusive, "record", "ok",
                         f"cpuset widened to {format_cpulist(current)} by another writer: CPUs "
                         f"{format_cpulist(widened)} refused")
    return Exclusive(None, "record", "conflict",
                     f"cpuset {format_cpulist(current)} holds shared CPUs but is not the recorded mixed set "
                     f"{format_cpulist(mixed[1])}: kubelet's shared pool or a foreign write, not adopted, nothing written")


def compute_source(decision: Exclusive, rec: Optional[ContainerRecord]) -> str:
    """Where the exclusive set came from: "record" only restates what the record already says."""
    if (rec is not None and rec.exclusive_source and decision.source != "kubelet-checkpoint"
            and decision.cpus is not None and decision.cpus == rec.exclusive):
        return rec.exclusive_source
    return decision.source


# The decisions for new containers (no record), by their inputs: a resident process (the NRI plugin)
# decides the same few cpusets and quotas on every creation. Pure and bounded (MEMO_ENTRIES, then
# forgotten at once); a key's hash is bounded by the CPUs a node can have.
MEMO_ENTRIES = 256
_NEW: Dict[Tuple[Kubelet, FrozenSet[int], Optional[int]], Desired] = {}


def compute_desired(now: Kubelet, shared: FrozenSet[int], rec: Optional[ContainerRecord],
                    share_mcpu: Optional[int] = None) -> Desired:
    """THE decision for one container: exclusive ∪ shared, its quota raised by its share.

    The share is the shared CPUs' worth (|shared| x period per period), or ``share_mcpu`` when the
    shared CPUs are a pool whose size changes (its configured budget); the quota follows
    kubelet's value (a resize is a new base; our own earlier value is recognised, so deciding
    again never adds twice). Unlimited stays unlimited.

    Without a record the decision depends on its three other inputs alone: one made for equal
    inputs before is given back (the same immutable value).
    """
    if rec is not None:
        return _compute_desired(now, shared, rec, share_mcpu)
    key = (now, shared, share_mcpu)
    known = _NEW.get(key)
    if known is None:
        known = _compute_desired(now, shared, None, share_mcpu)
        if len(_NEW) >= MEMO_ENTRIES:
            _NEW.clear()
        _NEW[key] = known
    return known


def _compute_desired(now: Kubelet, shared: FrozenSet[int], rec: Optional[ContainerRecord],
                     share_mcpu: Optional[int]) -> Desired:
    prev_pair = (rec.exclusive, rec.shared) if rec is not None else None
    decision = compute_exclusive(now.assigned, now.spec_cpus, now.cpus, shared, prev_pair)
    if decision.cpus is None:
        return Desired(decision.kind, frozenset(), shared, decision.source, None, 0, decision.note, decision.source)
    prev_quota = rec.quota if rec is not None else None
    hint = compute_quota_hint(prev_quota, rec.exclusive if rec is not None else None, decision.cpus,
                              now.quota.period)
    share = len(shared) * MCPU if share_mcpu is None else share_mcpu
    quota = compute_quota(now.quota, prev_quota, share, hint)
    return Desired("mixed", decision.cpus, shared, compute_source(decision, rec), quota, share, decision.note,
                   decision.source)


def compute_pod_quota(observed: Quota, prev_pod: Optional[QuotaState], shares_mcpu: Iterable[int],
                      prev_quota: Optional[QuotaState] = None, quota: Optional[QuotaState] = None) -> QuotaState:
    """The pod's quota: kubelet's base plus every member's share.

    ``prev_pod``: the pod record's bookkeeping. ``prev_quota`` and ``quota``: the event's
    container's bookkeeping before and after this decision, when it changed base (kubelet resized
    it, and the pod with it by the same amount).
    """
    return compute_quota(observed, prev_pod, sum(shares_mcpu), compute_pod_hint(prev_quota, quota, prev_pod))
