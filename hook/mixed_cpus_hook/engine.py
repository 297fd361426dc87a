"""apply, release, reconcile and status: the pure plan fed by thin reads, then checked writes.

Everything here runs on the container start path (apply) or from the reconcile service,
so it imports only the standard library and the package's own lean modules.
"""

from __future__ import annotations

import os
import time

from . import cgroups as cg
from .config import Config, load_shared_cpus, read_online_cpus
from .cpuset import format_cpulist, parse_cpulist, require_subset
from .errors import CgroupError, HookError, RecordError, WriteError
from .log import Reporter
from .oci import State, load_spec
from .plan import Observed, QuotaState, Write, compute_exclusive, compute_plan, compute_release, describe
from .records import SCHEMA_VERSION, delete_record, list_records, load_record, mark_pending, save_record, state_lock
from .request import compute_request

TYPE_CHECKING = False
if TYPE_CHECKING:  # typing costs milliseconds on every container start
    from typing import Any, Dict, FrozenSet, List, NamedTuple, Optional, Tuple
else:
    from ._compat import NamedTuple

# Passes of read-plan-write per container before giving up on a cgroup that keeps changing.
MAX_PASSES = 5
# After a reapply that wrote, ``reconcile(settle=S)`` re-reads the container's files every
# SETTLE_POLL seconds until they stayed put for S seconds (a path unit does not see writes made
# while its service runs), fixing again at most MAX_SETTLE_ROUNDS times.
SETTLE_POLL = 0.01
MAX_SETTLE_ROUNDS = 10


class Outcome(NamedTuple):
    """What one command did for one container: status and one line per write (or plan)."""

    status: str  # skipped | not-applicable | in-sync | applied | planned | released | gone
    lines: Tuple[str, ...] = ()


class NodeView(NamedTuple):
    """Facts about the node every command needs: the cgroup layout and the shared CPUs."""

    layout: cg.Layout
    shared: FrozenSet[int]
    shared_where: str


def read_node(config: Config) -> NodeView:
    """Shared CPUs (must be online) and the cgroup layout."""
    shared, where = load_shared_cpus(config)
    online = read_online_cpus(config.sys_root)
    require_subset(shared, online, "shared CPUs (offline or absent)", where)
    return NodeView(cg.read_layout(config.cgroup_root), shared, where)


def observe(layout: cg.Layout, dirs: cg.Dirs, pod: Optional[cg.Dirs]) -> Observed:
    """Read the current values a plan may touch."""
    anc = tuple((d, cg.read_requested_cpus(layout, d)) for d in cg.ancestors(layout, dirs.cpuset))
    pod_quota = None
    if pod is not None:
        pod_quota = cg.read_quota(layout, pod.cpu)
    return Observed(cg.read_cpus(layout, dirs.cpuset), cg.read_quota(layout, dirs.cpu), pod_quota, anc)


def execute(layout: cg.Layout, writes: Tuple[Write, ...], dirs: cg.Dirs, desired: FrozenSet[int]) -> None:
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


def verify(layout: cg.Layout, writes: Tuple[Write, ...], dirs: cg.Dirs, desired: FrozenSet[int]) -> None:
    """Read back every written file; on v2 the effective cpuset must be what we asked for."""
    for w in writes:
        got = cg.read_text(w.path)
        if w.path.endswith("cpuset.cpus"):
            same = parse_cpulist(got, w.path) == parse_cpulist(w.new, w.path)
        else:
            same = got.split() == w.new.split()
        if not same:
            raise WriteError(f"wrote {w.new!r} but it reads back {got!r}", w.path)
    if layout.version == 2 and writes:
        eff = cg.read_effective_cpus(layout, dirs.cpuset)
        if eff != desired:
            raise WriteError(
                f"cpuset.cpus.effective is {format_cpulist(eff) or 'empty'}, not {format_cpulist(desired)}"
                " (a parent cgroup does not grant the shared CPUs)", dirs.cpuset)


def _quota_state(doc: Any) -> Optional[QuotaState]:
    if not isinstance(doc, dict):
        return None
    return QuotaState(doc.get("base"), doc.get("applied"), doc.get("period", 0))


def _quota_doc(q: Optional[QuotaState]) -> Optional[Dict[str, Any]]:
    return None if q is None else {"base": q.base, "applied": q.applied, "period": q.period}


def _dirs(doc: Any, layout: cg.Layout, what: str) -> Optional[cg.Dirs]:
    if doc is None:
        return None
    if not isinstance(doc, dict) or not all(isinstance(doc.get(k), str) for k in ("cpuset", "cpu")):
        raise RecordError(f"{what} is not a pair of cgroup dirs", what)
    return cg.Dirs(cg._inside(layout.root, doc["cpuset"], what), cg._inside(layout.root, doc["cpu"], what))


def _pod_key(pod: Optional[cg.Dirs]) -> Optional[str]:
    return None if pod is None else os.path.basename(pod.cpu)


def _now() -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())


def _sync(config: Config, node: NodeView, cid: str, dirs: cg.Dirs, pod: Optional[cg.Dirs],
          spec_cpus: Optional[FrozenSet[int]], prev: Optional[Dict[str, Any]], identity: Dict[str, str],
          dry_run: bool, reporter: Reporter, reason: str) -> Outcome:
    """Bring one container to its mixed set; the caller holds the state lock (unless dry-run)."""
    layout, shared = node.layout, node.shared
    prev_pair = None
    if prev is not None:
        prev_pair = (parse_cpulist(prev["exclusive"], "record"), parse_cpulist(prev["shared"], "record"))
    pod_key = _pod_key(pod)
    pod_rec = load_record(config.state_dir, "pods", pod_key) if pod_key else None
    members = sorted(set(pod_rec["members"] if pod_rec else []) | {cid}) if pod_key else []
    lines: List[str] = []
    for _ in range(MAX_PASSES):
        observed = observe(layout, dirs, pod)
        exclusive = compute_exclusive(spec_cpus, observed.cpus, shared, prev_pair)
        if exclusive is None:
            return Outcome("not-applicable", (
                f"container {cid} has no exclusive CPUs (cpuset {format_cpulist(observed.cpus) or 'empty'}"
                f" overlaps or lacks the shared {format_cpulist(shared)}): it already runs on the shared pool",))
        prev_quota = _quota_state(prev.get("quota")) if prev else None
        prev_pod_quota = _quota_state(pod_rec.get("quota")) if pod_rec else None
        plan = compute_plan(layout, dirs, pod, observed, exclusive, shared, prev_quota, prev_pod_quota,
                            len(members))
        record = {
            "schema": SCHEMA_VERSION, "id": cid, **identity,
            "cgroup_version": layout.version,
            "cgroup": {"cpuset": dirs.cpuset, "cpu": dirs.cpu},
            "pod_cgroup": None if pod is None else {"cpuset": pod.cpuset, "cpu": pod.cpu},
            "pod_key": pod_key,
            "exclusive": format_cpulist(exclusive), "shared": format_cpulist(shared),
            "desired": format_cpulist(plan.desired),
            "quota": _quota_doc(plan.quota),
            "created": (prev or {}).get("created") or _now(),
        }
        new_pod = None
        if pod_key:
            new_pod = {"schema": SCHEMA_VERSION, "key": pod_key,
                       "cgroup": {"cpuset": pod.cpuset, "cpu": pod.cpu},
                       "quota": _quota_doc(plan.pod_quota), "members": members}
        if dry_run:
            return Outcome("planned" if plan.writes else "in-sync", tuple(describe(plan.writes)))
        same = prev is not None and {k: v for k, v in prev.items() if k != "updated"} == record
        if not same or (new_pod is not None and pod_rec != new_pod):
            record["updated"] = _now()
            # The records go first: a hook killed between the two leaves a record that
            # reconcile can finish from; the cgroup writes are rolled back on failure.
            save_record(config.state_dir, "containers", cid, record)
            if new_pod is not None:
                save_record(config.state_dir, "pods", pod_key, new_pod)
        if not plan.writes:
            break
        try:
            execute(layout, plan.writes, dirs, plan.desired)
        except HookError:
            _restore_records(config, cid, prev, pod_key, pod_rec)
            raise
        written = describe(plan.writes)
        lines.extend(written)
        for line in written:
            reporter.emit("info", f"container {cid}: {reason}: {line}", to_stream=False)
        prev, prev_pair, pod_rec, spec_cpus = record, (exclusive, shared), new_pod, None
    else:
        raise CgroupError(f"still changing after {MAX_PASSES} passes; something else keeps rewriting it", dirs.cpuset)
    return Outcome("applied" if lines else "in-sync", tuple(lines))


def _restore_records(config: Config, cid: str, prev: Optional[Dict[str, Any]], pod_key: Optional[str],
                     pod_rec: Optional[Dict[str, Any]]) -> None:
    try:
        if prev is None:
            delete_record(config.state_dir, "containers", cid)
        else:
            save_record(config.state_dir, "containers", cid, prev)
        if pod_key:
            if pod_rec is None:
                delete_record(config.state_dir, "pods", pod_key)
            else:
                save_record(config.state_dir, "pods", pod_key, pod_rec)
    except HookError:
        pass


def apply_state(state: State, config: Config, reporter: Reporter, dry_run: bool = False) -> Outcome:
    """The createRuntime hook: give an asking container exclusive ∪ shared and raise quotas."""
    spec = load_spec(state.bundle)
    annotations = state.annotations if state.has_annotations else spec.annotations
    where = f"pod {annotations.get('io.kubernetes.pod.namespace', '?')}/{annotations.get('io.kubernetes.pod.name', '?')}"
    request = compute_request(annotations, config.annotation_prefix, config.allowed_namespaces, where)
    if request is None:
        return Outcome("skipped")
    node = read_node(config)
    dirs, _how = cg.locate_container(node.layout, state.id, state.pid, spec.cgroups_path, config.proc_root,
                                     os.path.join(state.bundle, "config.json"))
    pod = cg.find_pod(node.layout, dirs)
    identity = {"namespace": request.namespace, "pod": request.pod, "container": request.container,
                "pod_uid": request.pod_uid}
    if dry_run:
        prev = load_record(config.state_dir, "containers", state.id)
        return _sync(config, node, state.id, dirs, pod, spec.cpus, prev, identity, True, reporter, "apply")
    with state_lock(config.state_dir):
        prev = load_record(config.state_dir, "containers", state.id)
        outcome = _sync(config, node, state.id, dirs, pod, spec.cpus, prev, identity, False, reporter, "apply")
    if outcome.status == "not-applicable":
        reporter.warning(outcome.lines[0])
    else:
        # The watch unit is started by mixed-cpus-hook-sync.service, never from here.
        mark_pending(config.state_dir, state.id)
    return outcome


def release_container(cid: str, config: Config, reporter: Reporter, why: str = "released") -> Outcome:
    """Forget a container and give back its share of its pod's quota (a pod already gone is fine).

    The caller holds the state lock.
    """
    rec = load_record(config.state_dir, "containers", cid)
    if rec is None:
        return Outcome("skipped")
    lines: List[str] = []
    pod_key = rec.get("pod_key")
    if pod_key:
        pod_rec = load_record(config.state_dir, "pods", pod_key)
        if pod_rec is not None:
            members = [m for m in pod_rec.get("members", []) if m != cid]
            layout = cg.read_layout(config.cgroup_root)
            pod = _dirs(pod_rec.get("cgroup"), layout, f"pod record {pod_key}")
            if pod is not None and os.path.isdir(pod.cpu):
                shared = parse_cpulist(rec["shared"], "record")
                current = cg.read_quota(layout, pod.cpu)
                write, target = compute_release(layout, pod, current, _quota_state(pod_rec.get("quota")),
                                                len(shared), len(members))
                if write is not None:
                    cg.write_text(write.path, write.new)
                    lines.extend(describe((write,)))
                pod_rec = dict(pod_rec, members=members, quota=_quota_doc(target))
            else:
                pod_rec = dict(pod_rec, members=members)
            if members and pod is not None and os.path.isdir(pod.cpu):
                save_record(config.state_dir, "pods", pod_key, pod_rec)
            else:
                delete_record(config.state_dir, "pods", pod_key)
    delete_record(config.state_dir, "containers", cid)
    mark_pending(config.state_dir, cid)  # the sync stops its watch unit
    for line in lines:
        reporter.emit("info", f"container {cid}: {why}: {line}", to_stream=False)
    reporter.emit("info", f"container {cid}: {why}, record removed", to_stream=False)
    return Outcome("released", tuple(lines))


def release_state(state: State, config: Config, reporter: Reporter) -> Outcome:
    """The poststop hook."""
    with state_lock(config.state_dir):
        return release_container(state.id, config, reporter)


def reconcile_one(cid: str, config: Config, node: NodeView, reporter: Reporter, dry_run: bool,
                  reason: str = "reapplied") -> Outcome:
    """Re-apply one tracked container, or garbage-collect it when its cgroup is gone.

    Reads only this container's record and its pod's: the cost does not grow with the number
    of tracked containers. ``reason`` starts each journal line ("reapplied (why)").
    """
    rec = load_record(config.state_dir, "containers", cid)
    if rec is None:
        return Outcome("gone")
    dirs = _dirs(rec.get("cgroup"), node.layout, f"record {cid}")
    if dirs is None or not (os.path.isdir(dirs.cpuset) and os.path.isdir(dirs.cpu)):
        if dry_run:
            return Outcome("gone", (f"container {cid}: cgroup gone, would forget it",))
        release_container(cid, config, reporter, why="cgroup gone, forgotten")
        return Outcome("gone", (f"container {cid}: cgroup gone, forgotten",))
    pod = _dirs(rec.get("pod_cgroup"), node.layout, f"record {cid}")
    identity = {k: rec.get(k, "") for k in ("namespace", "pod", "container", "pod_uid")}
    return _sync(config, node, cid, dirs, pod, None, rec, identity, dry_run, reporter, reason)


def reconcile(config: Config, reporter: Reporter, only: Optional[str] = None,
              dry_run: bool = False, reason: str = "reapplied", settle: float = 0.0,
              node: Optional[NodeView] = None) -> List[Tuple[str, Outcome]]:
    """Re-apply every tracked container (or ``only``) whose cgroups drifted; quiet when in sync.

    With ``only`` and ``settle`` > 0 (what a watch unit's service runs), the pass is followed by
    a settle: the container's files are re-read until they stay put for ``settle`` seconds, and
    fixed again when they change. A path unit does not watch while its service runs, and
    rewrites come in pairs (the systemd driver's unit properties, then runc's own writes; two
    quick updates). The state lock is not held while settling.
    """
    node = node or read_node(config)
    results: List[Tuple[str, Outcome]] = []

    def run_all(ids: List[str], why: str) -> None:
        for cid in ids:
            try:
                results.append((cid, reconcile_one(cid, config, node, reporter, dry_run, why)))
            except HookError as exc:
                reporter.error(f"container {cid}: {exc}")
                results.append((cid, Outcome("error", (str(exc),))))

    ids = [only] if only else list_records(config.state_dir, "containers")
    if dry_run:
        run_all(ids, reason)
        return results
    # The lock is taken per container: a container start (apply) never waits for more than one.
    for cid in ids:
        with state_lock(config.state_dir):
            run_all([cid], reason)
    if not (only and settle > 0 and results and results[-1][1].status in ("applied", "in-sync")):
        return results
    rec = load_record(config.state_dir, "containers", only)
    files = _watched_files(node.layout, rec) if rec else []
    snapshot = _read_files(files)
    rounds = 0
    deadline = time.monotonic() + settle
    while files and time.monotonic() < deadline:
        time.sleep(SETTLE_POLL)
        current = _read_files(files)
        if current == snapshot:
            continue
        rounds += 1
        if rounds > MAX_SETTLE_ROUNDS:
            reporter.error(f"container {only}: still rewritten after {MAX_SETTLE_ROUNDS} reapplies within "
                           f"{settle:g} s of each other; leaving it to the next trigger")
            results.append((only, Outcome("error", ("still being rewritten",))))
            break
        with state_lock(config.state_dir):
            run_all([only], f"{reason}; written again {rounds} time(s) while settling")
        snapshot = _read_files(files)
        deadline = time.monotonic() + settle
    return results


def _watched_files(layout: cg.Layout, rec: Dict[str, Any]) -> List[str]:
    """The files a container's watch unit watches: its cpuset and quota, its pod's quota."""
    files: List[str] = []
    own, pod = rec.get("cgroup"), rec.get("pod_cgroup")
    if isinstance(own, dict) and isinstance(own.get("cpuset"), str) and isinstance(own.get("cpu"), str):
        files += [cg.cpuset_file(layout, own["cpuset"]), cg.quota_file(layout, own["cpu"])]
    if isinstance(pod, dict) and isinstance(pod.get("cpu"), str):
        files.append(cg.quota_file(layout, pod["cpu"]))
    return files


def _read_files(paths: List[str]) -> Tuple[Optional[bytes], ...]:
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


def read_status(config: Config) -> List[Dict[str, Any]]:
    """The truth for every tracked container: desired (from record and config) against actual."""
    node = read_node(config)
    rows: List[Dict[str, Any]] = []
    for cid in list_records(config.state_dir, "containers"):
        rec = load_record(config.state_dir, "containers", cid)
        if rec is None:
            continue
        exclusive = parse_cpulist(rec.get("exclusive", ""), f"record {cid}")
        desired = exclusive | node.shared
        row: Dict[str, Any] = {
            "id": cid, "namespace": rec.get("namespace", ""), "pod": rec.get("pod", ""),
            "container": rec.get("container", ""), "cgroup": (rec.get("cgroup") or {}).get("cpuset"),
            "exclusive": format_cpulist(exclusive), "shared": format_cpulist(node.shared),
            "desired": format_cpulist(desired), "actual": None,
            "quota": {"desired": None, "actual": None}, "pod_quota": {"desired": None, "actual": None},
            "in_sync": False, "problem": None,
        }
        try:
            dirs = _dirs(rec.get("cgroup"), node.layout, f"record {cid}")
            pod = _dirs(rec.get("pod_cgroup"), node.layout, f"record {cid}")
            if dirs is None or not os.path.isdir(dirs.cpuset) or not os.path.isdir(dirs.cpu):
                row["problem"] = "cgroup gone (reconcile will forget it)"
            else:
                observed = observe(node.layout, dirs, pod if pod and os.path.isdir(pod.cpu) else None)
                row["actual"] = format_cpulist(observed.cpus)
                want = _quota_state(rec.get("quota"))
                row["quota"] = {"desired": _fmt_quota(want.applied if want else None),
                                "actual": _fmt_quota(observed.quota.quota)}
                pod_rec = load_record(config.state_dir, "pods", rec["pod_key"]) if rec.get("pod_key") else None
                ok_pod = True
                if pod_rec is not None and observed.pod_quota is not None:
                    pq = _quota_state(pod_rec.get("quota"))
                    row["pod_quota"] = {"desired": _fmt_quota(pq.applied if pq else None),
                                        "actual": _fmt_quota(observed.pod_quota.quota)}
                    ok_pod = pq is not None and pq.applied == observed.pod_quota.quota
                ok_quota = want is not None and want.applied == observed.quota.quota
                row["in_sync"] = observed.cpus == desired and ok_quota and ok_pod
        except HookError as exc:
            row["problem"] = str(exc)
        rows.append(row)
    return rows


def _fmt_quota(q: Optional[int]) -> str:
    return "max" if q is None else str(q)
