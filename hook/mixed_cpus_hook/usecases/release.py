"""Give back: forget a container and return its share of its pod's quota (poststop, NRI stop, GC).

Standard library only (the poststop hook runs it).
"""

from __future__ import annotations

import os

from ..core.errors import CgroupError
from ..core.model import Outcome, PodRecord
from ..core.plan import compute_release, describe
from ..core.quota import compute_settled
from ..node import cgroupfs as cg
from ..node.log import Reporter
from ..store.records import (
    delete_record,
    delete_records,
    list_records,
    load_container,
    load_pod,
    mark_pending,
    save_container,
    save_pod,
    state_lock,
)
from .common import inside, live_members, lower_to_base

TYPE_CHECKING = False
if TYPE_CHECKING:  # typing costs milliseconds on every container start
    from typing import List, Optional, Tuple

    from ..core.cgroup import Dirs, Layout, Quota


def release_locked(state_dir: str, layout: Layout, cid: str, reporter: Reporter, why: str = "released") -> Outcome:
    """Forget a container and give back its share of its pod's quota (a pod already gone is fine).

    The caller holds the state lock. Crash safety: the container record is marked
    "releasing" and the pod record saved with the member removed and the new quota listed as
    ours *before* the pod's quota is written; a run that dies anywhere is finished by the
    next reconcile, which sees the mark, and the pod's quota is never lowered twice.
    """
    rec = load_container(state_dir, cid)
    if rec is None:
        return Outcome("skipped")
    if rec.phase != "releasing":
        rec = rec._replace(phase="releasing")
        save_container(state_dir, rec)
    lines: List[str] = []
    own = inside(layout, rec.cgroup, f"record {cid}")
    if own is not None and os.path.isdir(own.cpu):
        # NRI's StopContainer: the container still runs. Lower its quota to kubelet's first:
        # cgroup v1 refuses a pod quota below a child's.
        lines.extend(describe(lower_to_base(layout, own.cpu, rec.quota, "quota: back to kubelet's base")))
    gone = [("containers", cid)]  # removed at the end, with the pod's record when it was the last member
    if rec.pod_key:
        pod_rec = load_pod(state_dir, rec.pod_key)
        if pod_rec is not None:
            written, last = _give_back(state_dir, layout, cid, pod_rec)
            lines.extend(written)
            if last:
                gone.insert(0, ("pods", pod_rec.key))
    delete_records(state_dir, gone)
    if rec.cgroup is not None:
        cg.forget_resolved(rec.cgroup.cpuset, rec.cgroup.cpu)
        cg.forget_kept(rec.cgroup.cpu)
    if rec.mode == "hook":
        mark_pending(state_dir, cid)  # the sync stops its watch unit (hook mode's systemd units)
    for line in lines:
        reporter.emit("info", f"container {cid}: {why}: {line}", to_stream=False)
    reporter.emit("info", f"container {cid}: {why}, record removed", to_stream=False)
    return Outcome("released", tuple(lines))


def _give_back(state_dir: str, layout: Layout, cid: str, pod_rec: PodRecord) -> Tuple[List[str], bool]:
    """The pod without ``cid``: its record first (the new quota listed as ours), then its quota.
    Returns what was written and whether ``cid`` was its last member: the caller then removes the
    pod's record with the container's (one journal write under the plugin's lock)."""
    members = tuple(m for m in live_members(state_dir, pod_rec, keep=cid) if m.id != cid)
    pod = inside(layout, pod_rec.cgroup, f"pod record {pod_rec.key}")
    current = _read_pod_quota(layout, pod)
    if pod is None or current is None:
        if members:
            save_pod(state_dir, pod_rec._replace(members=members))
            return [], False
        if pod is not None:
            forget_pod(pod)
        return [], True
    write, target = compute_release(layout, pod, current, pod_rec.quota, [m.share_mcpu for m in members])
    if members:
        pending = pod_rec._replace(members=members, quota=target)
        if pending != pod_rec:
            save_pod(state_dir, pending)
    # The last member: its record is kept as it is until the quota is back at its base. A rerun
    # after a crash past the write finds the base in the file, which is not one of ours: it is
    # taken as the base, and nobody's share goes on top (compute_release), so nothing is written
    # twice and one save fewer is made on every stop.
    if write is not None:
        cg.write_text(write.path, write.new)
    if members:
        save_pod(state_dir, pod_rec._replace(members=members, quota=compute_settled(target)))
    else:
        forget_pod(pod)
    return (describe((write,)) if write is not None else []), not members


def forget_pod(pod: Dirs) -> None:
    """A pod without a record: its quota's descriptors closed, its paths no longer remembered."""
    cg.forget_kept(pod.cpu)
    cg.forget_resolved(pod.cpuset, pod.cpu)


def _read_pod_quota(layout: Layout, pod: Optional[Dirs]) -> Optional[Quota]:
    """The pod's quota, None when its cgroup is gone (a read that fails is looked at only then:
    an unreadable quota of a pod that is there is an error)."""
    if pod is None:
        return None
    try:
        return cg.read_quota(layout, pod.cpu, keep=True)
    except CgroupError:
        if os.path.isdir(pod.cpu):
            raise
        return None


def release_container(cid: str, state_dir: str, cgroup_root: str, reporter: Reporter,
                      why: str = "released") -> Outcome:
    """The poststop hook and NRI's StopContainer/RemoveContainer: ``release_locked`` under the lock.

    Leftover temporaries are the full reconcile's to remove: a stop never lists the state dir.
    """
    with state_lock(state_dir):
        return release_locked(state_dir, cg.read_layout(cgroup_root), cid, reporter, why)


def prune_pod(state_dir: str, layout: Layout, key: str, reporter: Reporter) -> None:
    """Drop the members of a pod record that have no container record (an apply killed between
    saving the two); a pod left with none gets its quota back at its base and is forgotten.
    The caller holds the state lock."""
    rec = load_pod(state_dir, key)
    if rec is None:
        return
    live = live_members(state_dir, rec)
    if live == rec.members:
        return
    if live:
        save_pod(state_dir, rec._replace(members=live))
        return
    pod = inside(layout, rec.cgroup, f"pod record {key}")
    if pod is not None and rec.quota is not None and os.path.isdir(pod.cpu):
        for line in describe(lower_to_base(layout, pod.cpu, rec.quota, "pod quota: back to its base")):
            reporter.emit("info", f"pod {key}: no tracked container left: {line}", to_stream=False)
    delete_record(state_dir, "pods", key)


def prune_pods(state_dir: str, layout: Layout, reporter: Reporter) -> None:
    """prune_pod for every pod record (the full reconcile); one bad record is reported, not fatal."""
    from ..core.errors import HookError

    for key in list_records(state_dir, "pods"):
        try:
            prune_pod(state_dir, layout, key, reporter)
        except HookError as exc:
            reporter.error(f"pod record {key}: {exc}")
