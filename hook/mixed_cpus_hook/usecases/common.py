"""What every use case shares: the checkpoint lookup, reading a container's cgroups, the pod's
members, saving records around writes (the crash-safety protocol) and checked writes.

The crash-safety protocol, for every use case that writes a quota:

1. every quota value about to be written is listed as ours (``QuotaState.ours``) in the
   records, and the records are saved BEFORE the write (the pod's record first: a pod member
   counts only while its container record exists, so a run that dies between the two leaves a
   member that counts for nothing, never a container its pod does not list);
2. the writes are made in the plan's order, read back, and rolled back newest first on any
   refusal (the records too);
3. once verified, the replaced values are no longer ours (the records are saved settled).

Whatever instant a run dies at, the next one tells its own values from kubelet's and never adds
a share twice (tests/integration/test_crash_points.py kills each command before each step).
"""

from __future__ import annotations

import os
import time

from ..core.cgroup import Dirs, Layout, Quota, compute_pod_matches, cpuset_file, format_quota, quota_file
from ..core.cpuset import format_cpulist, parse_cpulist, require_subset
from ..core.bounds import MAX_QUOTA, quote
from ..core.errors import CgroupError, HookError, KubeletStateError, PolicyError, RecordError, WriteError
from ..core.desired import Desired, compute_pod_quota
from ..core.model import ContainerRecord, Identity, Member, PodRecord
from ..core.plan import Observed, Write
from ..core.quota import compute_settled
from ..node import cgroupfs as cg
from ..node.facts import NodeFacts
from ..store.records import (
    container_exists,
    delete_record,
    list_records,
    load_container,
    load_pod,
    record_path,
    save_container,
    save_pod,
    save_pod_and_container,
)

TYPE_CHECKING = False
if TYPE_CHECKING:  # typing costs milliseconds on every container start
    from typing import Any, Dict, FrozenSet, List, NamedTuple, Optional, Sequence, Tuple

    from ..core.quota import QuotaState
else:
    from ..core.compat import NamedTuple


_STAMP: Tuple[int, str] = (-1, "")  # the last second stamped, and its text


def now_stamp() -> str:
    """The record timestamp of this second (formatted once per second: a resident plugin stamps
    records at every event)."""
    global _STAMP
    now = int(time.time())
    if now != _STAMP[0]:
        _STAMP = (now, time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(now)))
    return _STAMP[1]


def age_of(stamp: str) -> float:
    """Seconds since a record timestamp (infinite when it cannot be read); not on the hook path."""
    import calendar

    try:
        return time.time() - calendar.timegm(time.strptime(str(stamp), "%Y-%m-%dT%H:%M:%SZ"))
    except ValueError:
        return float("inf")


# -- kubelet's checkpoint --------------------------------------------------------------------


# The last checkpoint's CPUs that two entries claim (kubelet.compute_claimed_twice), by the checkpoint
# object itself: a resident plugin looks up every tracked container in the same checkpoint, which
# stays the same object until the file changes (FactsCache).
_CLAIMED_TWICE: List[Any] = [None, frozenset()]


def read_claimed_twice(ckpt: Any) -> FrozenSet[int]:
    """compute_claimed_twice of ``ckpt``, computed once per checkpoint object."""
    if _CLAIMED_TWICE[0] is not ckpt:
        from ..node.kubelet import compute_claimed_twice

        _CLAIMED_TWICE[:] = [ckpt, compute_claimed_twice(ckpt)]
    return _CLAIMED_TWICE[1]


def read_assigned(node: NodeFacts, identity: Identity, cid: str) -> Optional[FrozenSet[int]]:
    """This container's entry in kubelet's checkpoint (online CPUs only), or None without one.

    An entry on offline CPUs, or sharing CPUs with another container's entry, is not kubelet's
    truth (kubelet never writes one): KubeletStateError, nothing is written for the container.
    """
    ckpt = node.checkpoint
    if ckpt is None:
        return None
    from ..node.kubelet import compute_assigned, compute_others

    cpus = compute_assigned(ckpt, identity.pod_uid, identity.container, cid)
    if cpus is not None and node.online:
        require_subset(cpus, node.online, f"kubelet checkpoint entry {identity.pod_uid}/{identity.container} "
                       "(offline CPUs)", ckpt.where)
    if cpus and cpus & read_claimed_twice(ckpt):  # then some other entry holds one of them: named
        owners = [f"entries.{u}.{n}" for u, per in sorted(ckpt.entries.items()) for n, c in sorted(per.items())
                  if c & cpus and (u, n) != (identity.pod_uid, identity.container)]
        owners += [f"entries.{i}" for i, c in sorted(ckpt.by_container_id.items()) if c & cpus and i != cid]
        if owners:
            others = compute_others(ckpt, identity.pod_uid, identity.container, cid)
            raise KubeletStateError(
                f"assigns {format_cpulist(cpus)} to this container, but CPUs {format_cpulist(cpus & others)} also "
                f"to {', '.join(owners)}: kubelet never does, not used", ckpt.where)
    return cpus


# -- bounds the kernel sets --------------------------------------------------------------------


def check_raised(q: Optional[QuotaState], what: str, where: str) -> None:
    """Refuse a raised quota the kernel would refuse (bounds.MAX_QUOTA): checked before any
    record is saved or file written, so nothing is half done and no record holds a value that
    was never in a quota file."""
    if q is not None and q.applied is not None and q.applied > MAX_QUOTA:
        raise PolicyError(f"{what} raised to {q.applied} (base {q.base} + the shared CPUs' share) would be above the "
                          f"kernel's maximum quota {MAX_QUOTA}: refused", where)


# -- cgroups ------------------------------------------------------------------------------------


def inside(layout: Layout, dirs: Optional[Dirs], what: str) -> Optional[Dirs]:
    """A record's cgroup dirs, resolved, refused unless below the cgroup root (records are input)."""
    if dirs is None:
        return None
    return Dirs(cg.resolve_inside_root(layout.root, dirs.cpuset, what, layout.lexical),
                cg.resolve_inside_root(layout.root, dirs.cpu, what, layout.lexical))


def exists(dirs: Optional[Dirs]) -> bool:
    """Whether both of a container's cgroups are there (on a cgroup file system a name is a
    directory). Asked with faccessat, which answers no without raising: at CreateContainer they
    never are yet (the runtime makes them when it creates the task), and a failed stat raises, about
    6 us from cold caches."""
    return dirs is not None and os.access(dirs.cpuset, os.F_OK) and os.access(dirs.cpu, os.F_OK)


def observe(layout: Layout, dirs: Dirs, pod: Optional[Dirs]) -> Observed:
    """Read the current values a plan may touch."""
    anc = tuple((d, cg.read_requested_cpus(layout, d)) for d in cg.ancestors(layout, dirs.cpuset))
    pod_quota = cg.read_quota(layout, pod.cpu, keep=True) if pod is not None else None
    return Observed(cg.read_cpus(layout, dirs.cpuset), cg.read_quota(layout, dirs.cpu), pod_quota, anc)


def execute(layout: Layout, writes: Sequence[Write], dirs: Optional[Dirs], desired: FrozenSet[int]) -> None:
    """Write in order and verify; on any failure put back what was written, newest first."""
    done: List[Write] = []
    try:
        for w in writes:
            cg.write_text(w.path, w.new)
            done.append(w)
        verify(layout, writes, dirs, desired)
    except HookError as exc:
        failures = []
        for w in reversed(done):
            try:
                cg.write_text(w.path, w.old)
            except HookError as undo:
                failures.append(str(undo))
        note = f"; rollback failed: {'; '.join(failures)}" if failures else (
            f"; rolled back {len(done)} earlier write(s)" if done else "")
        raise WriteError(f"{exc.message}{note}", exc.where) from None


def verify(layout: Layout, writes: Sequence[Write], dirs: Optional[Dirs], desired: FrozenSet[int]) -> None:
    """Read back every written file; on v2 the effective cpuset must be what we asked for."""
    for w in writes:
        got = cg.read_text_in(layout, w.path)
        if w.path.endswith("cpuset.cpus"):
            same = parse_cpulist(got, w.path) == parse_cpulist(w.new, w.path)
        else:
            same = got.split() == w.new.split()
        if not same:
            raise WriteError(f"wrote {w.new!r} but it reads back {got!r}", w.path)
    if layout.version == 2 and dirs is not None and any(w.path == cpuset_file(layout, dirs.cpuset) for w in writes):
        eff = cg.read_effective_cpus(layout, dirs.cpuset)
        if eff != desired:
            raise WriteError(
                f"cpuset.cpus.effective is {format_cpulist(eff) or 'empty'}, not {format_cpulist(desired)}"
                " (a parent cgroup does not grant the shared CPUs)", dirs.cpuset)


def lower_to_base(layout: Layout, cpu_dir: str, q: QuotaState, why: str) -> Tuple[Write, ...]:
    """Put a quota this product raised back at kubelet's base (nothing when the file holds another's value)."""
    current = cg.read_quota(layout, cpu_dir)
    if not q.is_ours(current.quota, current.period) or current.quota == q.base:
        return ()
    w = Write(quota_file(layout, cpu_dir), format_quota(layout, current),
              format_quota(layout, Quota(q.base, current.period)), why)
    cg.write_text(w.path, w.new)
    return (w,)


def check_pod_uid(pod: Optional[Dirs], pod_uid: str, where: str) -> None:
    """The pod cgroup the container sits in must be the pod its annotations name."""
    if pod is None or not pod_uid:
        return
    if not compute_pod_matches(os.path.basename(pod.cpu), pod_uid):
        raise CgroupError(f"the container's pod cgroup {pod.cpu} is not the cgroup of pod {pod_uid} "
                          "that its annotations name", where)


# -- records ---------------------------------------------------------------------------------------


def pod_key_of(pod: Optional[Dirs]) -> Optional[str]:
    """The pod cgroup's name: os.path.basename of its cpu dir (what follows the last "/")."""
    return None if pod is None else pod.cpu.rpartition("/")[2]


def live_members(state_dir: str, pod: Optional[PodRecord], keep: str = "") -> Tuple[Member, ...]:
    """A pod's members that count: those whose container record exists (and ``keep``).

    An apply killed after saving the pod record (which comes first) and before the container's
    leaves a member nobody tracks: it must not keep a share.
    """
    if pod is None:
        return ()
    return tuple(m for m in pod.members if m.id == keep or container_exists(state_dir, m.id))


def with_member(members: Sequence[Member], cid: str, share_mcpu: int) -> Tuple[Member, ...]:
    """The members with ``cid`` holding ``share_mcpu`` (added, or its share updated), ordered by id."""
    if not members:  # the pod's first mixed container
        return (Member(cid, share_mcpu),)
    out = {m.id: m for m in members}
    out[cid] = Member(cid, share_mcpu)
    return tuple(out[k] for k in sorted(out))


def check_membership(state_dir: str, rec: ContainerRecord) -> Tuple[str, Optional[PodRecord]]:
    """Why a container record is not whole ("" when it is), and its pod record: that must list it."""
    if not rec.pod_key:
        return "", None
    pod = load_pod(state_dir, rec.pod_key)
    path = os.path.join(state_dir, "pods", rec.pod_key + ".json")
    if pod is None:
        return f"its pod record {path} is missing: skipped", None
    if rec.id not in pod.member_ids:
        return f"its pod record {path} does not list it: skipped", pod
    return "", pod


def require_whole(state_dir: str, rec: ContainerRecord) -> Optional[PodRecord]:
    """The record's pod record; RecordError when the two do not agree (the container is skipped)."""
    broken, pod = check_membership(state_dir, rec)
    if broken:
        raise RecordError(broken, record_path(state_dir, "containers", rec.id))
    return pod


def build_record(cid: str, identity: Identity, mode: str, phase: str, layout: Layout, dirs: Dirs,
                 pod: Optional[Dirs], desired: Desired, prev: Optional[ContainerRecord],
                 pins_lost: bool = False) -> ContainerRecord:
    """The container record for ``desired``, keeping what the previous record knew."""
    assert desired.quota is not None
    if prev is None:  # a new container: created and updated now, never reapplied
        stamp = now_stamp()
        return ContainerRecord(cid, identity, mode, phase, layout.version, dirs, pod, pod_key_of(pod),
                               desired.exclusive, desired.source, desired.shared, desired.quota, stamp, stamp,
                               None, 0, pins_lost)
    return ContainerRecord(
        id=cid, identity=identity, mode=prev.mode, phase=phase, cgroup_version=layout.version, cgroup=dirs,
        pod_cgroup=pod, pod_key=pod_key_of(pod), exclusive=desired.exclusive, exclusive_source=desired.source,
        shared=desired.shared, quota=desired.quota, created=prev.created, updated=prev.updated,
        last_reapply=prev.last_reapply, reapplies=prev.reapplies, pins_maybe_lost=prev.pins_maybe_lost or pins_lost)


def save_changed(state_dir: str, prev: Optional[ContainerRecord], rec: ContainerRecord,
                 prev_pod: Optional[PodRecord], pod: Optional[PodRecord]) -> ContainerRecord:
    """Save what differs: the pod's record first, then the container's (which makes it a member
    that counts); ``updated`` changes only when something else did. Returns the record saved.
    A new container's record (``prev`` None) is saved as build_record stamped it: created and
    updated now."""
    if prev is not None:
        if prev._replace(updated="") == rec._replace(updated=""):
            if pod is not None and pod != prev_pod:
                save_pod(state_dir, pod)
            return rec._replace(updated=prev.updated)
        rec = rec._replace(updated=now_stamp())
    if pod is not None and pod != prev_pod:
        save_pod_and_container(state_dir, pod, rec)  # under the plugin's journal: one write for both
    else:
        save_container(state_dir, rec)
    return rec


def settle_records(state_dir: str, rec: ContainerRecord, pod: Optional[PodRecord]
                   ) -> Tuple[ContainerRecord, Optional[PodRecord]]:
    """After the writes are verified: the replaced values are no longer ours (step 3)."""
    quota = compute_settled(rec.quota)
    assert quota is not None
    final = rec._replace(quota=quota)
    final_pod = None if pod is None else pod._replace(quota=compute_settled(pod.quota))
    return save_changed(state_dir, rec, final, pod, final_pod), final_pod


def restore_records(state_dir: str, cid: str, prev: Optional[ContainerRecord], pod_key: Optional[str],
                    prev_pod: Optional[PodRecord]) -> None:
    """After a rolled-back write: the records as they were. Deleting always works (a full disk)."""
    try:
        if prev is None:
            delete_record(state_dir, "containers", cid)
        else:
            save_container(state_dir, prev)
    except HookError:
        pass
    try:
        if pod_key:
            if prev_pod is None:
                delete_record(state_dir, "pods", pod_key)
            else:
                save_pod(state_dir, prev_pod)
    except HookError:
        pass


def load_tracked(state_dir: str, cid: str) -> Optional[ContainerRecord]:
    """A container's record (None when untracked), the RecordError naming the file otherwise."""
    return load_container(state_dir, cid)


def read_held_cpus(state_dir: str, cid: str) -> Dict[str, FrozenSet[int]]:
    """The exclusive CPUs of every other live recorded container, by id: records being released,
    records whose cgroup is gone (reconcile forgets them) and broken records hold nothing.
    The caller holds the state lock."""
    held: Dict[str, FrozenSet[int]] = {}
    for other in list_records(state_dir, "containers"):
        if other == cid:
            continue
        try:
            rec = load_container(state_dir, other)
        except HookError:
            continue  # a broken record is reported by reconcile and status; it holds nothing we can trust
        if rec is None or rec.phase == "releasing" or is_gone(rec):
            continue
        held[other] = rec.exclusive
    return held


CREATE_GRACE = 120.0


def is_being_created(rec: ContainerRecord) -> bool:
    """An NRI record whose cgroup the runtime has not made yet (within the grace period: a creation
    that failed leaves such a record behind, forgotten once it is this old)."""
    return rec.phase == "creating" and age_of(rec.created) < CREATE_GRACE


def is_answer_written(rec: ContainerRecord, cpus: FrozenSet[int], quota: Quota) -> bool:
    """Whether a container's cgroup holds the answer its record says the runtime was given. Pure.

    For a record still "creating" (is_being_created), a cgroup that does not is one the runtime
    is still making: runc and crun make it (cpuset empty, quota unlimited) before they write its
    resources, and what it holds is neither kubelet's nor ours. Deciding from it would take the
    unlimited quota, then our own raised one, for kubelet's base and add the share twice. A quota
    answered earlier and still in flight counts as written (it is listed as ours).
    """
    q = rec.quota
    written = quota.quota == q.applied if q.base is None else q.is_ours(quota.quota, quota.period)
    return cpus == rec.desired and written


def is_gone(rec: ContainerRecord) -> bool:
    """Whether a record's container is gone: no cgroup, and past the creation grace."""
    if os.path.isdir(rec.cgroup.cpuset) or os.path.isdir(rec.cgroup.cpu):
        return False
    return not is_being_created(rec)


def require_free(state_dir: str, cid: str, cpus: FrozenSet[int], where: str) -> None:
    """Without kubelet's checkpoint: exclusive CPUs taken from the runtime's cpuset must be held by
    no other live recorded container (kubelet never gives one CPU to two containers; a cpuset that
    says otherwise is not kubelet's)."""
    held = read_held_cpus(state_dir, cid)
    if not held:  # no other record: nothing to hold them
        return
    taken = {other: c & cpus for other, c in held.items() if c & cpus}
    if taken:
        owners = ", ".join(f"{quote(format_cpulist(c), bare=True)} by {other}" for other, c in sorted(taken.items())[:3])
        more = f" and {len(taken) - 3} more" if len(taken) > 3 else ""
        raise PolicyError(f"cpuset {quote(format_cpulist(cpus), bare=True)} holds CPUs already exclusive to other "
                          f"containers ({owners}{more}): not kubelet's assignment, refused", where)


class PodShare(NamedTuple):
    """A pod's side of one container's decision: its members with the container's share, the total,
    and the pod quota that gives (None without a pod cgroup or a readable quota)."""

    members: Tuple[Member, ...]
    shares_mcpu: int
    quota: Optional[QuotaState]


def decide_pod_share(cid: str, desired: Desired, others: Sequence[Member], observed: Optional[Quota],
                     prev_pod: Optional[PodRecord], prev: Optional[ContainerRecord]) -> PodShare:
    """The pod's members and quota once ``cid`` holds ``desired``'s share; both raised quotas are checked
    against the kernel's maximum here, before anything is saved or written."""
    members = with_member(others, cid, desired.share_mcpu)
    shares = sum(m.share_mcpu for m in members)
    quota = None
    if observed is not None:
        quota = compute_pod_quota(observed, prev_pod.quota if prev_pod is not None else None, (shares,),
                                  prev.quota if prev is not None else None, desired.quota)
    check_raised(desired.quota, "the container's quota", f"container {cid}")
    check_raised(quota, "its pod's quota", f"container {cid}")
    return PodShare(members, shares, quota)
