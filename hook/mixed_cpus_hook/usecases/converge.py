"""Bring one container's cgroups to the decision, writing them ourselves (hook mode and reconcile).

Read the cgroups, decide (``core.desired``), plan (``core.plan``), save the records, write,
verify, settle the records; again while something else keeps changing the files under us.
Standard library only: the createRuntime hook runs this on every start of an asking container.
"""

from __future__ import annotations

import os

from ..core.cgroup import Dirs, cpuset_file
from ..core.desired import Desired, Kubelet, compute_desired
from ..core.errors import CgroupError, HookError
from ..core.model import ContainerRecord, Identity, Outcome, PodRecord
from ..core.plan import compute_plan, describe
from ..node.facts import NodeFacts
from ..node.log import Reporter
from .common import (
    build_record,
    decide_pod_share,
    execute,
    live_members,
    now_stamp,
    observe,
    pod_key_of,
    read_assigned,
    restore_records,
    save_changed,
    settle_records,
)

TYPE_CHECKING = False
if TYPE_CHECKING:  # typing costs milliseconds on every container start
    from typing import FrozenSet, List, NamedTuple, Optional, Sequence

    from ..core.cgroup import Layout
    from ..core.plan import Write
else:
    from ..core.compat import NamedTuple

# Passes of read-plan-write per container before giving up on a cgroup that keeps changing.
MAX_PASSES = 5


class Target(NamedTuple):
    """One container to converge: where it is, who it is, what is remembered of it."""

    cid: str
    identity: Identity
    dirs: Dirs
    pod: Optional[Dirs]
    prev: Optional[ContainerRecord]
    prev_pod: Optional[PodRecord]
    spec_cpus: Optional[FrozenSet[int]] = None  # kubelet's cpuset at creation (apply only)
    adding: bool = False  # apply: the container joins its pod's members
    mode: str = "hook"
    pod_frozen: bool = False  # the pod's record cannot be trusted: its quota is left alone


def kernel_keeps_pins(state_dir: str) -> bool:
    """Whether a cpuset shrink and regrow keeps the threads' own affinity (Linux 6.2+).

    ``check`` measures it and leaves its finding in ``<state_dir>/thread-affinity``
    ("kept" or "widened"); without that, the kernel version decides.
    """
    try:
        with open(os.path.join(state_dir, "thread-affinity"), "rb") as f:
            found = f.read(64).decode("ascii", "replace").strip()
        if found in ("kept", "widened"):
            return found == "kept"
    except OSError:
        pass
    try:
        major, minor = (int(x) for x in os.uname().release.split(".")[:2])
    except ValueError:
        return True
    return (major, minor) >= (6, 2)


def _warn_once(reporter: Reporter, cid: str, desired: Desired, notes: List[str], dry_run: bool) -> None:
    """The decision's note (CPUs refused, a widening undone) in the journal, once per run."""
    if desired.note and desired.note not in notes:
        notes.append(desired.note)
        if not dry_run and desired.mixed:
            reporter.emit("warning", f"container {cid}: {desired.note}", to_stream=False)


def _loses_pins(state_dir: str, layout: Layout, t: Target, prev: Optional[ContainerRecord],
                current: FrozenSet[int], target: FrozenSet[int], writes: Sequence[Write]) -> bool:
    """Whether this pass grows a reapplied cpuset back on a kernel that resets threads' pins then."""
    grows_back = prev is not None and current < target and any(
        w.path == cpuset_file(layout, t.dirs.cpuset) for w in writes)
    return grows_back and not kernel_keeps_pins(state_dir)


def converge(state_dir: str, node: NodeFacts, t: Target, reporter: Reporter, reason: str,
             dry_run: bool = False) -> Outcome:
    """Bring ``t`` to its mixed set; the caller holds the state lock (unless dry-run).

    Crash safety: the records, with every quota value about to be written listed as ours,
    are saved before the first cgroup write (see usecases.common); once the writes are
    verified, the values replaced are dropped from ``ours``.
    """
    layout = node.layout
    assigned = read_assigned(node, t.identity, t.cid)
    pod = None if t.pod_frozen else t.pod
    prev, prev_pod, spec_cpus = t.prev, t.prev_pod, t.spec_cpus
    others = live_members(state_dir, prev_pod, keep=t.cid)
    lines: List[str] = []
    notes: List[str] = []
    pins_lost = False
    for _ in range(MAX_PASSES):
        observed = observe(layout, t.dirs, pod)
        desired = compute_desired(Kubelet(observed.cpus, observed.quota, spec_cpus, assigned), node.shared, prev,
                                  node.share_mcpu)
        _warn_once(reporter, t.cid, desired, notes, dry_run)
        if not desired.mixed:
            lead = " has no exclusive CPUs: " if desired.kind == "not-applicable" else ": "
            return Outcome(desired.kind, (f"container {t.cid}{lead}{desired.note}",))
        share = decide_pod_share(t.cid, desired, others, observed.pod_quota if pod is not None else None,
                                 prev_pod, prev)
        writes = compute_plan(layout, t.dirs, pod, observed, desired, share.quota, len(share.members),
                              share.shares_mcpu)
        if dry_run:
            return Outcome("planned" if writes else "in-sync", tuple(describe(writes)))
        pins_lost = pins_lost or _loses_pins(state_dir, layout, t, prev, observed.cpus, desired.cpus, writes)
        rec = build_record(t.cid, t.identity, t.mode, "applied", layout, t.dirs, t.pod, desired, prev, pins_lost)
        if writes and not t.adding:
            rec = rec._replace(last_reapply=now_stamp(), reapplies=rec.reapplies + 1)
        new_pod = None if pod is None else PodRecord(pod_key_of(pod) or "", pod, share.quota, share.members)
        rec = save_changed(state_dir, prev, rec, prev_pod, new_pod)
        if not writes:
            break
        try:
            execute(layout, writes, t.dirs, desired.cpus)
        except HookError:
            restore_records(state_dir, t.cid, t.prev, pod_key_of(pod), t.prev_pod)
            raise
        written = describe(writes)
        lines.extend(written)
        for line in written:
            reporter.emit("info", f"container {t.cid}: {reason}: {line}", to_stream=False)
        prev, settled_pod = settle_records(state_dir, rec, new_pod)
        prev_pod = settled_pod if settled_pod is not None else prev_pod
        spec_cpus = None
    else:
        raise CgroupError(f"still changing after {MAX_PASSES} passes; something else keeps rewriting it",
                          t.dirs.cpuset)
    return Outcome("applied" if lines else "in-sync", tuple(lines))
