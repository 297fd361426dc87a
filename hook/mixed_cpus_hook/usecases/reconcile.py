"""Reconcile: re-apply what drifted, forget what is gone (the units, the timer, the CLI, NRI's timer).

Standard library only: the watch units' reapply service runs it on every rewrite.
"""

from __future__ import annotations

import os
import time

from ..core.cgroup import cpuset_file, quota_file
from ..core.errors import HookError, RecordError
from ..core.model import ContainerRecord, Outcome
from ..node import cgroupfs as cg
from ..node.config import Config
from ..node.facts import NodeFacts, read_node_facts
from ..node.log import Reporter
from ..store.records import list_records, load_container, load_pod, remove_stale_temporaries, state_lock
from .common import exists, inside, is_answer_written, is_being_created, require_whole
from .converge import Target, converge
from .release import prune_pods, release_locked

TYPE_CHECKING = False
if TYPE_CHECKING:  # typing costs milliseconds on every start of the reconcile service
    from typing import Callable, Dict, FrozenSet, List, Optional, Sequence, Tuple

    from ..core.cgroup import Layout

# After a reapply that wrote, ``reconcile(settle=S)`` re-reads the container's files every
# SETTLE_POLL seconds until they stayed put for S seconds (a path unit does not see writes made
# while its service runs), fixing again at most MAX_SETTLE_ROUNDS times.
SETTLE_POLL = 0.01
MAX_SETTLE_ROUNDS = 10
def read_inconsistent_pods(state_dir: str, ids: Sequence[str]) -> FrozenSet[str]:
    """Pods whose record does not list a container that names it: their quota is left alone.

    Such a pod record was edited or damaged (a crash never produces it: the pod record is
    saved first); its member count cannot be trusted, so nobody writes the pod's quota until
    it is mended. Read by the full reconcile and status, which see every record anyway.
    """
    members: Dict[str, Optional[Tuple[str, ...]]] = {}
    bad = set()
    for cid in ids:
        try:
            rec = load_container(state_dir, cid)
        except HookError:
            continue
        if rec is None or not rec.pod_key or rec.phase == "releasing":
            continue
        key = rec.pod_key
        if key not in members:
            try:
                pod_rec = load_pod(state_dir, key)
            except HookError:
                pod_rec = None
            members[key] = pod_rec.member_ids if pod_rec is not None else None
        listed = members[key]
        if listed is None or cid not in listed:
            bad.add(key)
    return frozenset(bad)


def reconcile_one(cid: str, state_dir: str, node: NodeFacts, reporter: Reporter, dry_run: bool,
                  reason: str = "reapplied", frozen_pods: FrozenSet[str] = frozenset()) -> Outcome:
    """Re-apply one tracked container, or garbage-collect it when its cgroup is gone.

    Reads only this container's record and its pod's: the cost does not grow with the number
    of tracked containers. ``reason`` starts each journal line ("reapplied (why)"). A record
    that is not whole (its pod record lost it) is reported and left alone, never applied.
    The caller holds the state lock (unless dry-run).
    """
    rec = load_container(state_dir, cid)
    if rec is None:
        return Outcome("gone")
    if rec.phase == "releasing":
        if dry_run:
            return Outcome("gone", (f"container {cid}: release did not finish, would finish it",))
        release_locked(state_dir, node.layout, cid, reporter, why="release finished")
        return Outcome("gone", (f"container {cid}: release finished",))
    dirs = inside(node.layout, rec.cgroup, f"record {cid}")
    if not exists(dirs):
        if is_being_created(rec):
            return Outcome("in-sync", ())
        if dry_run:
            return Outcome("gone", (f"container {cid}: cgroup gone, would forget it",))
        release_locked(state_dir, node.layout, cid, reporter, why="cgroup gone, forgotten")
        return Outcome("gone", (f"container {cid}: cgroup gone, forgotten",))
    assert dirs is not None
    if is_being_created(rec) and not is_answer_written(rec, cg.read_cpus(node.layout, dirs.cpuset),
                                                       cg.read_quota(node.layout, dirs.cpu)):
        return Outcome("in-sync", ())  # the runtime is still making it: nothing there is anybody's yet
    pod_rec = require_whole(state_dir, rec)
    pod = inside(node.layout, rec.pod_cgroup, f"record {cid}")
    target = Target(cid, rec.identity, dirs, pod, rec, pod_rec, mode=rec.mode, pod_frozen=rec.pod_key in frozen_pods)
    outcome = converge(state_dir, node, target, reporter, reason, dry_run)
    if outcome.status == "conflict" and not dry_run:
        reporter.error(outcome.lines[0])
    return outcome


def watched_files(layout: Layout, rec: ContainerRecord) -> List[str]:
    """The files a container's watch units watch: its cpuset and quota, its pod's quota."""
    files = [cpuset_file(layout, rec.cgroup.cpuset), quota_file(layout, rec.cgroup.cpu)]
    if rec.pod_cgroup is not None:
        files.append(quota_file(layout, rec.pod_cgroup.cpu))
    return files


def read_files(paths: Sequence[str]) -> Tuple[Optional[bytes], ...]:
    """Raw contents (None when unreadable): enough to tell that something was written."""
    out: List[Optional[bytes]] = []
    for path in paths:
        try:
            fd = os.open(path, os.O_RDONLY)
        except OSError:
            out.append(None)
            continue
        try:
            out.append(os.read(fd, 4096))
        except OSError:
            out.append(None)
        finally:
            os.close(fd)
    return tuple(out)


def reconcile(config: Config, reporter: Reporter, only: Optional[str] = None,
              dry_run: bool = False, reason: str = "reapplied", settle: float = 0.0,
              node: Optional[NodeFacts] = None) -> List[Tuple[str, Outcome]]:
    """Re-apply every tracked container (or ``only``) whose cgroups drifted; quiet when in sync.

    One bad record or cgroup is an error for that container only: every other one is still
    reconciled. With ``only`` and ``settle`` > 0 (what a watch unit's service runs), the pass
    is followed by a settle: the container's files are re-read until they stay put for
    ``settle`` seconds, and fixed again when they change. A path unit does not watch while
    its service runs, and rewrites come in pairs (the systemd driver's unit properties, then
    runc's own writes; two quick updates). The state lock is taken per container (a container
    start never waits for more than one) and not held while settling.
    """
    node = node or read_node_facts(config)
    if node.checkpoint_note:
        reporter.warning(node.checkpoint_note)
    state_dir = config.state_dir
    ids = [only] if only else list_records(state_dir, "containers")
    frozen = frozenset() if only else read_inconsistent_pods(state_dir, ids)
    results: List[Tuple[str, Outcome]] = []

    def run(cid: str, why: str) -> None:
        try:
            results.append((cid, reconcile_one(cid, state_dir, node, reporter, dry_run, why, frozen)))
        except HookError as exc:
            reporter.error(f"container {cid}: {exc}")
            results.append((cid, Outcome("broken" if isinstance(exc, RecordError) else "error", (str(exc),))))

    if dry_run:
        for cid in ids:
            run(cid, reason)
        return results
    if not only:
        with state_lock(state_dir):
            remove_stale_temporaries(state_dir, config.proc_root)
            prune_pods(state_dir, node.layout, reporter)
    for cid in ids:
        with state_lock(state_dir):
            run(cid, reason)
    if only and settle > 0 and results and results[-1][1].status in ("applied", "in-sync"):
        _settle(config, node, only, reason, settle, reporter, results, run)
    return results


def _settle(config: Config, node: NodeFacts, cid: str, reason: str, settle: float, reporter: Reporter,
            results: List[Tuple[str, Outcome]], run: Callable[[str, str], None]) -> None:
    try:
        rec = load_container(config.state_dir, cid)
    except HookError:
        return
    files = watched_files(node.layout, rec) if rec is not None else []
    snapshot = read_files(files)
    rounds = 0
    deadline = time.monotonic() + settle
    while files and time.monotonic() < deadline:
        time.sleep(SETTLE_POLL)
        current = read_files(files)
        if current == snapshot:
            continue
        rounds += 1
        if rounds > MAX_SETTLE_ROUNDS:
            reporter.error(f"container {cid}: still rewritten after {MAX_SETTLE_ROUNDS} reapplies within "
                           f"{settle:g} s of each other; leaving it to the next trigger")
            results.append((cid, Outcome("error", ("still being rewritten",))))
            break
        with state_lock(config.state_dir):
            run(cid, f"{reason}; written again {rounds} time(s) while settling")
        snapshot = read_files(files)
        deadline = time.monotonic() + settle
