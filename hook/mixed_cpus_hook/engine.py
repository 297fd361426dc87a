"""apply, release, reconcile and status: the pure plan fed by thin reads, then checked writes.

Everything here runs on the container start path (apply) or from the reconcile service,
so it imports only the standard library and the package's own lean modules.
"""

from __future__ import annotations

import os
import time

from . import cgroups as cg
from .bounds import MAX_QUOTA
from .cgroups import Quota
from .config import Config, load_shared_cpus, read_online_cpus
from .cpuset import format_cpulist, parse_cpulist, require_subset
from .errors import CgroupError, HookError, PolicyError, RecordError, WriteError
from .log import Reporter, quote
from .oci import State, load_spec
from .plan import (Observed, QuotaState, Write, compute_exclusive, compute_plan, compute_quota, compute_quota_hint,
                   compute_release, describe)
from .records import (SCHEMA_VERSION, delete_record, list_records, load_record, mark_pending,
                      remove_stale_temporaries, save_record, state_lock)
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

    # skipped | not-applicable | conflict | in-sync | applied | planned | released | gone | broken | error
    status: str
    lines: Tuple[str, ...] = ()


class NodeView(NamedTuple):
    """Facts about the node every command needs: the cgroup layout, the shared CPUs, kubelet's record."""

    layout: cg.Layout
    shared: FrozenSet[int]
    shared_where: str
    online: FrozenSet[int] = frozenset()
    checkpoint: Optional[Any] = None  # kubelet.Checkpoint of the static policy, or None
    checkpoint_note: str = ""  # why the checkpoint is not used, when it exists but is refused


class ContainerFacts(NamedTuple):
    """A container as an NRI runtime describes it, in plain data (see docs: the engine contract)."""

    id: str
    annotations: Dict[str, str]
    cpus: FrozenSet[int]
    quota: Optional[int]
    period: int
    cgroups_path: str
    pod_cgroup: str


class Adjustment(NamedTuple):
    """What the NRI plugin answers the runtime with for one container."""

    cpus: FrozenSet[int]
    quota: Optional[int]
    period: int
    exclusive: FrozenSet[int]
    shared: FrozenSet[int]
    env: Tuple[Tuple[str, str], ...]
    lines: Tuple[str, ...] = ()


DEFAULT_PERIOD = 100000
# An NRI record is made before runc creates the container's cgroup: it is not forgotten as
# "cgroup gone" until it is this old (a creation that failed leaves such a record behind).
CREATE_GRACE = 120.0
ISOLATED_ENV = "OPENSHIFT_ISOLATED_CPUS"
SHARED_ENV = "OPENSHIFT_SHARED_CPUS"


def read_node(config: Config) -> NodeView:
    """Shared CPUs (must be online), the cgroup layout and kubelet's CPU manager checkpoint."""
    shared, where = load_shared_cpus(config)
    online = read_online_cpus(config.sys_root)
    require_subset(shared, online, "shared CPUs (offline or absent)", where)
    checkpoint, note = read_checkpoint(config)
    return NodeView(cg.read_layout(config.cgroup_root), shared, where, online, checkpoint, note)


def read_checkpoint(config: Config) -> Tuple[Optional[Any], str]:
    """kubelet's checkpoint when it exists and is of the static policy; else None and why.

    A checkpoint that cannot be read or is not of kubelet's shape is refused with a note (the
    run falls back to the records and the cgroup); kubelet writes it atomically, so a
    half-written file is never seen.
    """
    path = getattr(config, "kubelet_state_file", "") or ""
    if not path:
        return None, ""
    from .kubelet import load_checkpoint

    try:
        ckpt = load_checkpoint(path)
    except HookError as exc:
        return None, f"kubelet checkpoint refused, using the records and cgroups instead: {exc}"
    if ckpt is None:
        return None, ""
    if ckpt.policy != "static":
        return None, f"kubelet checkpoint {path}: policy {ckpt.policy!r}, not 'static': not used"
    return ckpt, ""


def _assigned(node: NodeView, pod_uid: str, container: str, cid: str) -> Optional[FrozenSet[int]]:
    """This container's entry in kubelet's checkpoint (online CPUs only), or None without one."""
    if node.checkpoint is None:
        return None
    from .kubelet import compute_assigned

    cpus = compute_assigned(node.checkpoint, pod_uid, container, cid)
    if cpus is not None and node.online:
        require_subset(cpus, node.online, f"kubelet checkpoint entry {pod_uid}/{container} (offline CPUs)",
                       node.checkpoint.where)
    if cpus:  # kubelet never gives one CPU to two containers: such a file is not kubelet's truth
        ckpt = node.checkpoint
        owners = [f"entries.{u}.{n}" for u, per in sorted(ckpt.entries.items()) for n, c in sorted(per.items())
                  if c & cpus and (u, n) != (pod_uid, container)]
        owners += [f"entries.{i}" for i, c in sorted(ckpt.by_container_id.items()) if c & cpus and i != cid]
        if owners:
            from .errors import KubeletStateError
            from .kubelet import compute_others

            raise KubeletStateError(
                f"assigns {format_cpulist(cpus)} to this container, but CPUs "
                f"{format_cpulist(cpus & compute_others(ckpt, pod_uid, container, cid))} also to "
                f"{', '.join(owners)}: kubelet never does, not used", ckpt.where)
    return cpus


def observe(layout: cg.Layout, dirs: cg.Dirs, pod: Optional[cg.Dirs]) -> Observed:
    """Read the current values a plan may touch."""
    anc = tuple((d, cg.read_requested_cpus(layout, d)) for d in cg.ancestors(layout, dirs.cpuset))
    pod_quota = None
    if pod is not None:
        pod_quota = cg.read_quota(layout, pod.cpu)
    return Observed(cg.read_cpus(layout, dirs.cpuset), cg.read_quota(layout, dirs.cpu), pod_quota, anc)


def execute(layout: cg.Layout, writes: Tuple[Write, ...], dirs: Optional[cg.Dirs], desired: FrozenSet[int]) -> None:
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


def verify(layout: cg.Layout, writes: Tuple[Write, ...], dirs: Optional[cg.Dirs], desired: FrozenSet[int]) -> None:
    """Read back every written file; on v2 the effective cpuset must be what we asked for."""
    for w in writes:
        got = cg.read_text(w.path)
        if w.path.endswith("cpuset.cpus"):
            same = parse_cpulist(got, w.path) == parse_cpulist(w.new, w.path)
        else:
            same = got.split() == w.new.split()
        if not same:
            raise WriteError(f"wrote {w.new!r} but it reads back {got!r}", w.path)
    if layout.version == 2 and dirs is not None and any(w.path == cg.cpuset_file(layout, dirs.cpuset) for w in writes):
        eff = cg.read_effective_cpus(layout, dirs.cpuset)
        if eff != desired:
            raise WriteError(
                f"cpuset.cpus.effective is {format_cpulist(eff) or 'empty'}, not {format_cpulist(desired)}"
                " (a parent cgroup does not grant the shared CPUs)", dirs.cpuset)


def _quota_state(doc: Any) -> Optional[QuotaState]:
    if not isinstance(doc, dict):
        return None
    return QuotaState(doc.get("base"), doc.get("applied"), doc.get("period", 0), tuple(doc.get("ours") or ()))


def _quota_doc(q: Optional[QuotaState]) -> Optional[Dict[str, Any]]:
    if q is None:
        return None
    return {"base": q.base, "applied": q.applied, "period": q.period, "ours": [v for v in q.ours if v is not None]}


def _settled(q: Optional[QuotaState]) -> Optional[QuotaState]:
    """The bookkeeping once its write is verified: only the value now in the file is ours."""
    if q is None:
        return None
    return q._replace(ours=(q.applied,) if q.applied is not None else ())


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


def _age(stamp: Any) -> float:
    """Seconds since a record timestamp (infinite when it cannot be read); not on the hook path."""
    import calendar

    try:
        return time.time() - calendar.timegm(time.strptime(str(stamp), "%Y-%m-%dT%H:%M:%SZ"))
    except ValueError:
        return float("inf")


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


class _PodView(NamedTuple):
    key: Optional[str]
    record: Optional[Dict[str, Any]]
    members: List[str]


def _load_pod(config: Config, cid: str, pod: Optional[cg.Dirs], adding: bool) -> _PodView:
    """The pod record and its members: the containers that hold a share of its quota.

    A member counts only while its container record exists: an apply killed after saving
    the pod record (which comes first) and before the container's leaves a member nobody
    tracks, and it must not keep a share.
    """
    key = _pod_key(pod)
    if key is None:
        return _PodView(None, None, [])
    rec = load_record(config.state_dir, "pods", key)
    members = _live_members(config, cid, rec["members"]) if rec else []
    if adding and cid not in members:
        members = sorted(set(members) | {cid})
    return _PodView(key, rec, members)


def _live_members(config: Config, cid: str, members: List[str]) -> List[str]:
    from .records import record_path

    return [m for m in members if m == cid or os.path.lexists(record_path(config.state_dir, "containers", m))]


def _sync(config: Config, node: NodeView, cid: str, dirs: cg.Dirs, pod: Optional[cg.Dirs],
          spec_cpus: Optional[FrozenSet[int]], prev: Optional[Dict[str, Any]], identity: Dict[str, str],
          dry_run: bool, reporter: Reporter, reason: str, adding: bool, mode: str = "hook",
          podv: Optional[_PodView] = None, pod_frozen: bool = False) -> Outcome:
    """Bring one container to its mixed set; the caller holds the state lock (unless dry-run).

    Crash safety: the records, with every quota value about to be written listed as ours,
    are saved before the first cgroup write; once the writes are verified, the values
    replaced are dropped from ``ours``. So whatever instant a run dies at, the next one tells
    its own writes from kubelet's and never adds a share twice.
    """
    layout, shared = node.layout, node.shared
    prev_pair = None
    if prev is not None:
        prev_pair = (parse_cpulist(prev["exclusive"], "record"), parse_cpulist(prev["shared"], "record"))
    if podv is None:
        podv = _load_pod(config, cid, pod, adding)
    assigned = _assigned(node, identity.get("pod_uid", ""), identity.get("container", ""), cid)
    lines: List[str] = []
    notes: List[str] = []
    pins_lost = False
    for _ in range(MAX_PASSES):
        observed = observe(layout, dirs, None if pod_frozen else pod)
        decision = compute_exclusive(assigned, spec_cpus, observed.cpus, shared, prev_pair)
        if decision.note and decision.note not in notes:
            notes.append(decision.note)
            if not dry_run and decision.cpus is not None:
                reporter.emit("warning", f"container {cid}: {decision.note}", to_stream=False)
        if decision.cpus is None:
            return Outcome(decision.kind, (f"container {cid}{' has no exclusive CPUs: ' if decision.kind == 'not-applicable' else ': '}"
                                           f"{decision.note}",))
        exclusive = decision.cpus
        source = _source(decision, prev)
        prev_quota = _quota_state(prev.get("quota")) if prev else None
        prev_pod_quota = _quota_state(podv.record.get("quota")) if podv.record else None
        hint = compute_quota_hint(prev_quota, prev_pair[0] if prev_pair else None, exclusive, observed.quota.period)
        plan = compute_plan(layout, dirs, None if pod_frozen else pod, observed, exclusive, shared, prev_quota,
                            prev_pod_quota, len(podv.members), hint)
        check_raised(plan.quota, "the container's quota", f"container {cid}")
        check_raised(plan.pod_quota, "its pod's quota", f"container {cid}")
        if dry_run:
            return Outcome("planned" if plan.writes else "in-sync", tuple(describe(plan.writes)))
        cpuset_path = cg.cpuset_file(layout, dirs.cpuset)
        grows_back = prev is not None and any(w.path == cpuset_path for w in plan.writes) and observed.cpus < plan.desired
        if grows_back and not pins_lost:
            pins_lost = not kernel_keeps_pins(config.state_dir)
        record = _container_doc(cid, identity, layout, dirs, pod, podv.key, exclusive, source, shared,
                                plan.desired, plan.quota, prev, mode, pins_lost)
        if plan.writes and not adding:
            record["last_reapply"] = _now()
            record["reapplies"] = int(record["reapplies"]) + 1
        new_pod = None if pod_frozen else _pod_doc(podv.key, pod, plan.pod_quota, podv.members)
        _save_changed(config, cid, prev, record, podv, new_pod)
        if not plan.writes:
            break
        try:
            execute(layout, plan.writes, dirs, plan.desired)
        except HookError:
            _restore_records(config, cid, prev, podv.key, podv.record)
            raise
        written = describe(plan.writes)
        lines.extend(written)
        for line in written:
            reporter.emit("info", f"container {cid}: {reason}: {line}", to_stream=False)
        # Verified: the replaced values are no longer ours.
        final = dict(record, quota=_quota_doc(_settled(plan.quota)))
        final_pod = None if new_pod is None else dict(new_pod, quota=_quota_doc(_settled(plan.pod_quota)))
        _save_changed(config, cid, record, final, _PodView(podv.key, new_pod, podv.members), final_pod)
        prev, prev_pair, spec_cpus = final, (exclusive, shared), None
        podv = _PodView(podv.key, final_pod, podv.members)
    else:
        raise CgroupError(f"still changing after {MAX_PASSES} passes; something else keeps rewriting it", dirs.cpuset)
    return Outcome("applied" if lines else "in-sync", tuple(lines))


def _source(decision: Any, prev: Optional[Dict[str, Any]]) -> str:
    """Where the exclusive set came from: "record" only restates what the record already says."""
    if (prev is not None and prev.get("exclusive_source") and decision.source != "kubelet-checkpoint"
            and decision.cpus is not None and format_cpulist(decision.cpus) == prev.get("exclusive")):
        return str(prev["exclusive_source"])
    return decision.source


def _container_doc(cid: str, identity: Dict[str, str], layout: cg.Layout, dirs: cg.Dirs, pod: Optional[cg.Dirs],
                   pod_key: Optional[str], exclusive: FrozenSet[int], source: str, shared: FrozenSet[int],
                   desired: FrozenSet[int], quota: Optional[QuotaState], prev: Optional[Dict[str, Any]], mode: str,
                   pins_lost: bool, phase: str = "applied") -> Dict[str, Any]:
    old = prev or {}
    return {
        "schema": SCHEMA_VERSION, "id": cid, **identity,
        "mode": old.get("mode", mode), "phase": phase,
        "cgroup_version": layout.version,
        "cgroup": {"cpuset": dirs.cpuset, "cpu": dirs.cpu},
        "pod_cgroup": None if pod is None else {"cpuset": pod.cpuset, "cpu": pod.cpu},
        "pod_key": pod_key,
        "exclusive": format_cpulist(exclusive), "exclusive_source": source, "shared": format_cpulist(shared),
        "desired": format_cpulist(desired),
        "quota": _quota_doc(quota),
        "created": old.get("created") or _now(),
        "updated": old.get("updated") or _now(),
        "last_reapply": old.get("last_reapply"),
        "reapplies": old.get("reapplies", 0),
        "pins_maybe_lost": bool(old.get("pins_maybe_lost", False) or pins_lost),
    }


def _pod_doc(key: Optional[str], pod: Optional[cg.Dirs], quota: Optional[QuotaState],
             members: List[str]) -> Optional[Dict[str, Any]]:
    if key is None or pod is None:
        return None
    return {"schema": SCHEMA_VERSION, "key": key, "cgroup": {"cpuset": pod.cpuset, "cpu": pod.cpu},
            "quota": _quota_doc(quota), "members": members}


def _save_changed(config: Config, cid: str, prev: Optional[Dict[str, Any]], record: Dict[str, Any],
                  podv: _PodView, new_pod: Optional[Dict[str, Any]]) -> None:
    """Save what differs: the pod's record first, then the container's (which makes it a
    member that counts); ``updated`` changes only when something else did.

    A run that dies between the two leaves a pod member without a container record, which
    counts for nothing (see _load_pod), never a container record its pod does not list.
    """
    if new_pod is not None and podv.record != new_pod:
        save_record(config.state_dir, "pods", podv.key, new_pod)
    ignore = ("updated",)
    if prev is None or {k: v for k, v in prev.items() if k not in ignore} != {
            k: v for k, v in record.items() if k not in ignore}:
        record["updated"] = _now()
        save_record(config.state_dir, "containers", cid, record)


def _restore_records(config: Config, cid: str, prev: Optional[Dict[str, Any]], pod_key: Optional[str],
                     pod_rec: Optional[Dict[str, Any]]) -> None:
    """After a rolled-back write: the records as they were. Deleting always works (a full disk)."""
    try:
        if prev is None:
            delete_record(config.state_dir, "containers", cid)
        else:
            save_record(config.state_dir, "containers", cid, prev)
    except HookError:
        pass
    try:
        if pod_key:
            if pod_rec is None:
                delete_record(config.state_dir, "pods", pod_key)
            else:
                save_record(config.state_dir, "pods", pod_key, pod_rec)
    except HookError:
        pass


def _identity(request: Any) -> Dict[str, str]:
    return {"namespace": request.namespace, "pod": request.pod, "container": request.container,
            "pod_uid": request.pod_uid}


def _check_pod(pod: Optional[cg.Dirs], pod_uid: str, where: str) -> None:
    """The pod cgroup the container sits in must be the pod its annotations name."""
    if pod is None or not pod_uid:
        return
    if not cg.compute_pod_matches(os.path.basename(pod.cpu), pod_uid):
        raise CgroupError(f"the container's pod cgroup {pod.cpu} is not the cgroup of pod {pod_uid} "
                          "that its annotations name", where)


def apply_state(state: State, config: Config, reporter: Reporter, dry_run: bool = False) -> Outcome:
    """The createRuntime hook: give an asking container exclusive ∪ shared and raise quotas."""
    spec = load_spec(state.bundle)
    annotations = state.annotations if state.has_annotations else spec.annotations
    where = f"pod {annotations.get('io.kubernetes.pod.namespace', '?')}/{annotations.get('io.kubernetes.pod.name', '?')}"
    request = _compute_request(annotations, config, where, reporter, state.id)
    if request is None:
        return Outcome("skipped")
    node = read_node(config)
    if node.checkpoint_note:
        reporter.warning(node.checkpoint_note)
    spec_where = os.path.join(state.bundle, "config.json")
    dirs, _how = cg.locate_container(node.layout, state.id, state.pid, spec.cgroups_path, config.proc_root, spec_where)
    pod = cg.find_pod(node.layout, dirs)
    _check_pod(pod, request.pod_uid, spec_where)
    identity = _identity(request)
    if dry_run:
        prev = load_record(config.state_dir, "containers", state.id)
        return _sync(config, node, state.id, dirs, pod, spec.cpus, prev, identity, True, reporter, "apply", True)
    with state_lock(config.state_dir):
        prev = load_record(config.state_dir, "containers", state.id)
        if prev is not None and prev.get("mode") == "nri":
            reporter.emit("info", f"container {state.id}: handled by the NRI plugin; the hook does nothing",
                          to_stream=False)
            return Outcome("skipped", ("handled by the NRI plugin",))
        outcome = _sync(config, node, state.id, dirs, pod, spec.cpus, prev, identity, False, reporter, "apply", True)
    if outcome.status in ("not-applicable", "conflict"):
        reporter.warning(outcome.lines[0])
        return Outcome(outcome.status)  # said once, on stderr and in the journal; nothing was written
    else:
        # The watch unit is started by mixed-cpus-hook-sync.service, never from here.
        mark_pending(config.state_dir, state.id)
    return outcome


def _compute_request(annotations: Dict[str, str], config: Config, where: str, reporter: Reporter, cid: str) -> Any:
    """The container's request; None (with the reason under -v) when it does not ask."""
    request = compute_request(annotations, config.annotation_prefix, config.allowed_namespaces, where,
                              config_where=config.source)
    if request is None and reporter.verbose:
        name = annotations.get("io.kubernetes.container.name")
        reporter.info(f"container {cid}: skipped: " + (
            "no io.kubernetes.container.name annotation" if not name else
            f"no annotation {config.annotation_prefix}/{name} for it"))
    return request


def release_container(cid: str, config: Config, reporter: Reporter, why: str = "released") -> Outcome:
    """Forget a container and give back its share of its pod's quota (a pod already gone is fine).

    The caller holds the state lock. Crash safety: the container record is marked
    "releasing" and the pod record saved with the member removed and the new quota listed as
    ours *before* the pod's quota is written; a run that dies anywhere is finished by the
    next reconcile, which sees the mark, and the pod's quota is never lowered twice.
    """
    rec = load_record(config.state_dir, "containers", cid)
    if rec is None:
        return Outcome("skipped")
    if rec.get("phase") != "releasing":
        rec = dict(rec, phase="releasing")
        save_record(config.state_dir, "containers", cid, rec)
    layout = cg.read_layout(config.cgroup_root)
    lines: List[str] = []
    shared = parse_cpulist(rec["shared"], "record")
    own = _dirs(rec.get("cgroup"), layout, f"record {cid}")
    own_quota = _quota_state(rec.get("quota"))
    if own is not None and own_quota is not None and os.path.isdir(own.cpu):
        # NRI's StopContainer: the container still runs. Lower its quota to kubelet's first:
        # cgroup v1 refuses a pod quota below a child's.
        lines.extend(describe(_lower_to_base(layout, own.cpu, own_quota, "quota: back to kubelet's base")))
    pod_key = rec.get("pod_key")
    if pod_key:
        pod_rec = load_record(config.state_dir, "pods", pod_key)
        if pod_rec is not None:
            members = [m for m in _live_members(config, cid, pod_rec["members"]) if m != cid]
            pod = _dirs(pod_rec.get("cgroup"), layout, f"pod record {pod_key}")
            if pod is not None and os.path.isdir(pod.cpu):
                current = cg.read_quota(layout, pod.cpu)
                write, target = compute_release(layout, pod, current, _quota_state(pod_rec.get("quota")),
                                                len(shared), len(members))
                if members:
                    pending = dict(pod_rec, members=members, quota=_quota_doc(target))
                    if pending != pod_rec:
                        save_record(config.state_dir, "pods", pod_key, pending)
                elif write is not None:
                    # The last member: keep the record (listing nobody but this container, so a
                    # rerun finds the same target) until the quota is back at its base.
                    save_record(config.state_dir, "pods", pod_key, dict(pod_rec, quota=_quota_doc(target)))
                if write is not None:
                    cg.write_text(write.path, write.new)
                    lines.extend(describe((write,)))
                if members:
                    settled = dict(pod_rec, members=members, quota=_quota_doc(_settled(target)))
                    save_record(config.state_dir, "pods", pod_key, settled)
                else:
                    delete_record(config.state_dir, "pods", pod_key)
            elif members:
                save_record(config.state_dir, "pods", pod_key, dict(pod_rec, members=members))
            else:
                delete_record(config.state_dir, "pods", pod_key)
    delete_record(config.state_dir, "containers", cid)
    if rec.get("mode", "hook") != "nri":
        # Hook mode: the sync stops its watch unit. An NRI container has none (the plugin's own
        # reconcile covers it), and nothing consumes the mark on a containerd node.
        mark_pending(config.state_dir, cid)
    for line in lines:
        reporter.emit("info", f"container {cid}: {why}: {line}", to_stream=False)
    reporter.emit("info", f"container {cid}: {why}, record removed", to_stream=False)
    return Outcome("released", tuple(lines))


def _lower_to_base(layout: cg.Layout, cpu_dir: str, q: QuotaState, why: str) -> Tuple[Write, ...]:
    """Put a quota this product raised back at kubelet's base (nothing when the file holds another's value)."""
    current = cg.read_quota(layout, cpu_dir)
    if not q.is_ours(current.quota, current.period) or current.quota == q.base:
        return ()
    w = Write(cg.quota_file(layout, cpu_dir), cg.format_quota(layout, current),
              cg.format_quota(layout, Quota(q.base, current.period)), why)
    cg.write_text(w.path, w.new)
    return (w,)


def prune_pod(config: Config, layout: cg.Layout, key: str, reporter: Reporter) -> None:
    """Drop the members of a pod record that have no container record (an apply killed between
    saving the two); a pod left with none gets its quota back at its base and is forgotten.
    The caller holds the state lock."""
    rec = load_record(config.state_dir, "pods", key)
    if rec is None:
        return
    live = _live_members(config, "", rec["members"])
    if live == rec["members"]:
        return
    if live:
        save_record(config.state_dir, "pods", key, dict(rec, members=live))
        return
    pod = _dirs(rec.get("cgroup"), layout, f"pod record {key}")
    q = _quota_state(rec.get("quota"))
    if pod is not None and q is not None and os.path.isdir(pod.cpu):
        for line in describe(_lower_to_base(layout, pod.cpu, q, "pod quota: back to its base")):
            reporter.emit("info", f"pod {key}: no tracked container left: {line}", to_stream=False)
    delete_record(config.state_dir, "pods", key)


def release_state(state: State, config: Config, reporter: Reporter) -> Outcome:
    """The poststop hook."""
    with state_lock(config.state_dir):
        # Leftover temporaries are the full reconcile's to remove: a stop never lists the state dir.
        return release_container(state.id, config, reporter)


def check_membership(config: Config, cid: str, rec: Dict[str, Any]) -> Tuple[str, Optional[Dict[str, Any]]]:
    """Why a container record is not whole ("" when it is), and its pod record: that must list it."""
    pod_key = rec.get("pod_key")
    if not pod_key:
        return "", None
    pod_rec = load_record(config.state_dir, "pods", pod_key)
    path = os.path.join(config.state_dir, "pods", pod_key + ".json")
    if pod_rec is None:
        return f"its pod record {path} is missing: skipped", None
    if cid not in pod_rec["members"]:
        return f"its pod record {path} does not list it: skipped", pod_rec
    return "", pod_rec


def reconcile_one(cid: str, config: Config, node: NodeView, reporter: Reporter, dry_run: bool,
                  reason: str = "reapplied", frozen_pods: FrozenSet[str] = frozenset()) -> Outcome:
    """Re-apply one tracked container, or garbage-collect it when its cgroup is gone.

    Reads only this container's record and its pod's: the cost does not grow with the number
    of tracked containers. ``reason`` starts each journal line ("reapplied (why)"). A record
    that is not whole (its pod record lost it) is reported and left alone, never applied.
    """
    rec = load_record(config.state_dir, "containers", cid)
    if rec is None:
        return Outcome("gone")
    if rec.get("phase") == "releasing":
        if dry_run:
            return Outcome("gone", (f"container {cid}: release did not finish, would finish it",))
        release_container(cid, config, reporter, why="release finished")
        return Outcome("gone", (f"container {cid}: release finished",))
    dirs = _dirs(rec.get("cgroup"), node.layout, f"record {cid}")
    if dirs is None or not (os.path.isdir(dirs.cpuset) and os.path.isdir(dirs.cpu)):
        if rec.get("phase") == "creating" and _age(rec.get("created")) < CREATE_GRACE:
            return Outcome("in-sync", ())
        if dry_run:
            return Outcome("gone", (f"container {cid}: cgroup gone, would forget it",))
        release_container(cid, config, reporter, why="cgroup gone, forgotten")
        return Outcome("gone", (f"container {cid}: cgroup gone, forgotten",))
    broken, pod_rec = check_membership(config, cid, rec)
    if broken:
        raise RecordError(broken, os.path.join(config.state_dir, "containers", cid + ".json"))
    pod = _dirs(rec.get("pod_cgroup"), node.layout, f"record {cid}")
    identity = {k: rec.get(k, "") for k in ("namespace", "pod", "container", "pod_uid")}
    podv = _PodView(rec.get("pod_key"), pod_rec, _live_members(config, cid, pod_rec["members"]) if pod_rec else [])
    outcome = _sync(config, node, cid, dirs, pod, None, rec, identity, dry_run, reporter, reason, False,
                    rec.get("mode", "hook"), podv, pod_frozen=rec.get("pod_key") in frozen_pods)
    if outcome.status == "conflict" and not dry_run:
        reporter.error(outcome.lines[0])
    return outcome


def reconcile(config: Config, reporter: Reporter, only: Optional[str] = None,
              dry_run: bool = False, reason: str = "reapplied", settle: float = 0.0,
              node: Optional[NodeView] = None) -> List[Tuple[str, Outcome]]:
    """Re-apply every tracked container (or ``only``) whose cgroups drifted; quiet when in sync.

    One bad record or cgroup is an error for that container only: every other one is still
    reconciled. With ``only`` and ``settle`` > 0 (what a watch unit's service runs), the pass
    is followed by a settle: the container's files are re-read until they stay put for
    ``settle`` seconds, and fixed again when they change. A path unit does not watch while
    its service runs, and rewrites come in pairs (the systemd driver's unit properties, then
    runc's own writes; two quick updates). The state lock is not held while settling.
    """
    node = node or read_node(config)
    if node.checkpoint_note:
        reporter.warning(node.checkpoint_note)
    results: List[Tuple[str, Outcome]] = []

    ids = [only] if only else list_records(config.state_dir, "containers")
    frozen = frozenset() if only else read_inconsistent_pods(config, ids)

    def run_all(ids: List[str], why: str) -> None:
        for cid in ids:
            try:
                results.append((cid, reconcile_one(cid, config, node, reporter, dry_run, why, frozen)))
            except HookError as exc:
                reporter.error(f"container {cid}: {exc}")
                results.append((cid, Outcome("broken" if isinstance(exc, RecordError) else "error", (str(exc),))))

    if dry_run:
        run_all(ids, reason)
        return results
    if not only and not dry_run:
        with state_lock(config.state_dir):
            remove_stale_temporaries(config.state_dir, config.proc_root)
            for key in list_records(config.state_dir, "pods"):
                try:
                    prune_pod(config, node.layout, key, reporter)
                except HookError as exc:
                    reporter.error(f"pod record {key}: {exc}")
    # The lock is taken per container: a container start (apply) never waits for more than one.
    for cid in ids:
        with state_lock(config.state_dir):
            run_all([cid], reason)
    if not (only and settle > 0 and results and results[-1][1].status in ("applied", "in-sync")):
        return results
    try:
        rec = load_record(config.state_dir, "containers", only)
    except HookError:
        return results
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


# ---- NRI: the same decisions, answered to the runtime instead of written by the hook --------


def _nri_dirs(layout: cg.Layout, facts: ContainerFacts, pod_uid: str) -> Tuple[cg.Dirs, cg.Dirs]:
    """The container's cgroup dirs (which may not exist yet) and its pod's, from NRI's
    linux.cgroups_path and the pod's cgroup parent; refused unless they name a container cgroup
    inside the cgroup of the pod ``pod_uid`` (cgroups.compute_nri_cgroup)."""
    where = f"container {facts.id}"
    rel, pod_rel = cg.compute_nri_cgroup(facts.cgroups_path, facts.id, pod_uid, facts.pod_cgroup, where)
    dirs = cg.Dirs(cg._join(layout.cpuset_root, rel, "container cgroup", layout.root),
                   cg._join(layout.cpu_root, rel, "container cgroup", layout.root))
    pod = cg.Dirs(os.path.dirname(dirs.cpuset), os.path.dirname(dirs.cpu))
    if not all(os.path.basename(d) == os.path.basename(pod_rel) for d in pod):  # a symbolic link on the way
        raise CgroupError(f"the container cgroup resolves to {dirs.cpu}, not inside its pod cgroup {pod_rel}", where)
    return dirs, pod


def check_raised(q: Optional[QuotaState], what: str, where: str) -> None:
    """Refuse a raised quota the kernel would refuse (bounds.MAX_QUOTA): checked before any
    record is saved or file written, so nothing is half done and no record holds a value that
    was never in a quota file."""
    if q is not None and q.applied is not None and q.applied > MAX_QUOTA:
        raise PolicyError(f"{what} raised to {q.applied} (base {q.base} + the shared CPUs' share) would be above the "
                          f"kernel's maximum quota {MAX_QUOTA}: refused", where)


def read_held_cpus(config: Config, cid: str) -> Dict[str, FrozenSet[int]]:
    """The exclusive CPUs of every other live recorded container, by id: records being released,
    records whose cgroup is gone (reconcile forgets them) and broken records hold nothing.
    The caller holds the state lock."""
    held: Dict[str, FrozenSet[int]] = {}
    for other in list_records(config.state_dir, "containers"):
        if other == cid:
            continue
        try:
            rec = load_record(config.state_dir, "containers", other)
        except HookError:
            continue  # a broken record is reported by reconcile and status; it holds nothing we can trust
        if rec is None or rec.get("phase") == "releasing":
            continue
        if _cgroup_gone(rec):
            continue
        held[other] = parse_cpulist(rec["exclusive"], "record")
    return held


def _cgroup_gone(rec: Dict[str, Any]) -> bool:
    """Whether a record's container is gone: no cgroup, and past the creation grace."""
    own = rec.get("cgroup") or {}
    if any(os.path.isdir(own.get(k, "")) for k in ("cpuset", "cpu")):
        return False
    return not (rec.get("phase") == "creating" and _age(rec.get("created")) < CREATE_GRACE)


def _require_free(config: Config, cid: str, cpus: FrozenSet[int], where: str) -> None:
    """Without kubelet's checkpoint: the exclusive CPUs taken from the runtime's cpuset must be
    held by no other live recorded container (kubelet never gives one CPU to two containers; a
    cpuset that says otherwise is not kubelet's)."""
    held = read_held_cpus(config, cid)
    taken = {other: c & cpus for other, c in held.items() if c & cpus}
    if taken:
        owners = ", ".join(f"{quote(format_cpulist(c), bare=True)} by {other}" for other, c in sorted(taken.items())[:3])
        more = f" and {len(taken) - 3} more" if len(taken) > 3 else ""
        raise PolicyError(f"cpuset {quote(format_cpulist(cpus), bare=True)} holds CPUs already exclusive to other containers "
                          f"({owners}{more}): not kubelet's assignment, refused", where)


def forget_if_gone(cid: str, config: Config, reporter: Reporter, why: str) -> bool:
    """Release an NRI container's record when its container is gone (its cgroup is not there and
    it is past its creation grace); True if it was. A runtime that does not list a container
    (an empty or partial Synchronize) is not proof that it is gone: the cgroup is."""
    with state_lock(config.state_dir):
        rec = load_record(config.state_dir, "containers", cid)
        if rec is None:
            return True
        if not _cgroup_gone(rec):
            return False
        release_container(cid, config, reporter, why=why)
        return True


def _adjustment(rec: Dict[str, Any], lines: Tuple[str, ...] = ()) -> Adjustment:
    q = _quota_state(rec["quota"])
    exclusive = parse_cpulist(rec["exclusive"], "record")
    shared = parse_cpulist(rec["shared"], "record")
    period = q.period if q else DEFAULT_PERIOD
    return Adjustment(exclusive | shared, q.applied if q else None, period, exclusive, shared,
                      ((ISOLATED_ENV, rec["exclusive"]), (SHARED_ENV, rec["shared"])), lines)


def admit_container(facts: ContainerFacts, config: Config, reporter: Reporter,
                    node: Optional[NodeView] = None) -> Optional[Adjustment]:
    """NRI CreateContainer (and Synchronize of an untracked or tracked container).

    Decides like the hook (annotation, namespace, exclusive CPUs from kubelet's checkpoint or
    kubelet's own cpuset), raises the pod's quota (NRI does not reach pod cgroups; cgroup v1
    refuses a child quota above its parent's, so this comes before the runtime writes the
    container's), records it all (mode "nri"), and returns what the runtime must write for
    the container. Idempotent for the same facts.
    """
    where = (f"pod {facts.annotations.get('io.kubernetes.pod.namespace', '?')}/"
             f"{facts.annotations.get('io.kubernetes.pod.name', '?')}")
    request = _compute_request(facts.annotations, config, where, reporter, facts.id)
    if request is None:
        return None
    node = node or read_node(config)
    layout, shared = node.layout, node.shared
    where = f"container {facts.id}"
    dirs, pod = _nri_dirs(layout, facts, request.pod_uid)
    if not os.path.isdir(pod.cpu):
        raise CgroupError("pod cgroup not found", pod.cpu)
    if node.online:
        require_subset(facts.cpus, node.online, "cpuset names CPUs", where)
    identity = _identity(request)
    period = facts.period or DEFAULT_PERIOD
    with state_lock(config.state_dir):
        prev = load_record(config.state_dir, "containers", facts.id)
        if prev is not None and prev.get("phase") == "releasing":
            release_container(facts.id, config, reporter, why="release finished")
            prev = None
        if prev is not None and (prev.get("pod_key") != _pod_key(pod) or prev["cgroup"]["cpu"] != dirs.cpu):
            # The same id in another pod (or cgroup): the first one's share goes back before this one's is added.
            release_container(facts.id, config, reporter, why=f"created again in pod {_pod_key(pod)}")
            prev = None
        prev_pair = None if prev is None else (parse_cpulist(prev["exclusive"], "record"),
                                                parse_cpulist(prev["shared"], "record"))
        assigned = _assigned(node, request.pod_uid, request.container, facts.id)
        spec_cpus = facts.cpus if prev is None else None
        decision = compute_exclusive(assigned, spec_cpus, facts.cpus, shared, prev_pair)
        if decision.cpus is None:
            message = f"container {facts.id}: {'has no exclusive CPUs: ' if decision.kind == 'not-applicable' else ''}{decision.note}"
            reporter.warning(message)
            return None
        if decision.note:
            reporter.emit("warning", f"container {facts.id}: {decision.note}", to_stream=False)
        if assigned is None:
            _require_free(config, facts.id, decision.cpus, where)
        exclusive = decision.cpus
        prev_quota = _quota_state(prev.get("quota")) if prev else None
        quota = compute_quota(Quota(facts.quota, period), prev_quota, len(shared))
        check_raised(quota, "the container's quota", where)
        podv = _load_pod(config, facts.id, pod, True)
        observed = cg.read_quota(layout, pod.cpu)
        prev_pod_quota = _quota_state(podv.record.get("quota")) if podv.record else None
        pod_quota = compute_quota(observed, prev_pod_quota, len(shared) * len(podv.members))
        check_raised(pod_quota, "its pod's quota", where)
        pod_writes: Tuple[Write, ...] = ()
        if pod_quota.applied != observed.quota:
            pod_writes = (Write(cg.quota_file(layout, pod.cpu), cg.format_quota(layout, observed),
                                cg.format_quota(layout, Quota(pod_quota.applied, pod_quota.period)),
                                f"pod quota: base {pod_quota.base} + {len(podv.members)} mixed container(s) x "
                                f"{len(shared)} shared CPU(s)"),)
        exists = os.path.isdir(dirs.cpuset) and os.path.isdir(dirs.cpu)
        phase = "applied" if exists else "creating"
        record = _container_doc(facts.id, identity, layout, dirs, pod, podv.key, exclusive, _source(decision, prev),
                                shared,
                                exclusive | shared, quota, prev, "nri", False, phase)
        record["mode"] = "nri" if prev is None else prev.get("mode", "nri")
        new_pod = _pod_doc(podv.key, pod, pod_quota, podv.members)
        _save_changed(config, facts.id, prev, record, podv, new_pod)
        if pod_writes:
            try:
                execute(layout, pod_writes, None, frozenset())
            except HookError:
                _restore_records(config, facts.id, prev, podv.key, podv.record)
                raise
            final_pod = dict(new_pod or {}, quota=_quota_doc(_settled(pod_quota)))
            _save_changed(config, facts.id, record, dict(record), _PodView(podv.key, new_pod, podv.members), final_pod)
        lines = tuple(describe(pod_writes))
        for line in lines:
            reporter.emit("info", f"container {facts.id}: create: {line}", to_stream=False)
        reporter.emit("info", f"container {facts.id}: mixed CPUs {record['desired']} (exclusive "
                      f"{record['exclusive']} from {decision.source} + shared {record['shared']})", to_stream=False)
        return _adjustment(record, lines)


def update_container(cid: str, cpus: FrozenSet[int], quota: Optional[Quota], config: Config, reporter: Reporter,
                     node: Optional[NodeView] = None) -> Optional[Adjustment]:
    """NRI UpdateContainer: rewrite kubelet's update so the cgroup never holds the exclusive-only set.

    kubelet's new cpuset is its new exclusive assignment (kubelet's checkpoint wins where it
    exists); its new quota is the new base (unless it is one this product wrote, as when the
    runtime fills in the fields kubelet left out). None: not tracked, pass the update through.
    """
    node = node or read_node(config)
    with state_lock(config.state_dir):
        rec = load_record(config.state_dir, "containers", cid)
        if rec is None or rec.get("phase") == "releasing":
            return None
        shared = node.shared
        prev_pair = (parse_cpulist(rec["exclusive"], "record"), parse_cpulist(rec["shared"], "record"))
        assigned = _assigned(node, rec.get("pod_uid", ""), rec.get("container", ""), cid)
        current = cpus or (prev_pair[0] | prev_pair[1])
        if cpus and node.online:
            require_subset(cpus, node.online, "cpuset names CPUs", f"container {cid}")
        decision = compute_exclusive(assigned, None, current, shared, prev_pair)
        if decision.cpus is None:
            reporter.warning(f"container {cid}: update passed through unchanged: {decision.note}")
            return None
        if decision.note:
            reporter.emit("warning", f"container {cid}: {decision.note}", to_stream=False)
        if assigned is None and decision.cpus != prev_pair[0]:
            _require_free(config, cid, decision.cpus, f"container {cid}")
        prev_quota = _quota_state(rec.get("quota"))
        period = (quota.period if quota is not None and quota.period else None) or (
            prev_quota.period if prev_quota else DEFAULT_PERIOD)
        if quota is None:
            given = Quota(prev_quota.applied if prev_quota else None, period)
        else:
            given = Quota(quota.quota, period)
        new_quota = compute_quota(given, prev_quota, len(shared),
                                  compute_quota_hint(prev_quota, prev_pair[0], decision.cpus, period))
        check_raised(new_quota, "the container's quota", f"container {cid}")
        record = _container_doc(cid, {k: rec.get(k, "") for k in ("namespace", "pod", "container", "pod_uid")},
                                node.layout, cg.Dirs(rec["cgroup"]["cpuset"], rec["cgroup"]["cpu"]),
                                None if rec.get("pod_cgroup") is None else cg.Dirs(rec["pod_cgroup"]["cpuset"],
                                                                                   rec["pod_cgroup"]["cpu"]),
                                rec.get("pod_key"), decision.cpus, _source(decision, rec), shared, decision.cpus | shared,
                                new_quota, rec, rec.get("mode", "nri"), False, rec.get("phase", "applied"))
        podv = _PodView(rec.get("pod_key"), None, [])
        _save_changed(config, cid, rec, record, podv, None)
        lines = ()
        if record["desired"] != format_cpulist(current) or (quota is not None and quota.quota != new_quota.applied):
            lines = (f"update rewritten: cpus {format_cpulist(cpus) or '(unchanged)'} -> {record['desired']}, quota "
                     f"{'(unchanged)' if quota is None else _fmt_quota(quota.quota)} -> {_fmt_quota(new_quota.applied)}",)
            reporter.emit("info", f"container {cid}: {lines[0]}", to_stream=False)
        return _adjustment(record, lines)


def read_inconsistent_pods(config: Config, ids: List[str]) -> FrozenSet[str]:
    """Pods whose record does not list a container that names it: their quota is left alone.

    Such a pod record was edited or damaged (a crash never produces it: the pod record is
    saved first); its member count cannot be trusted, so nobody writes the pod's quota until
    it is mended. Read by the full reconcile and status, which see every record anyway.
    """
    members: Dict[str, Optional[List[str]]] = {}
    bad = set()
    for cid in ids:
        try:
            rec = load_record(config.state_dir, "containers", cid)
        except HookError:
            continue
        key = rec.get("pod_key") if rec else None
        if not key or rec.get("phase") == "releasing":
            continue
        if key not in members:
            try:
                pod_rec = load_record(config.state_dir, "pods", key)
            except HookError:
                pod_rec = None
            members[key] = list(pod_rec["members"]) if pod_rec else None
        if members[key] is None or cid not in (members[key] or []):
            bad.add(key)
    return frozenset(bad)


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


def read_status_report(config: Config) -> Tuple[List[Dict[str, Any]], List[str]]:
    """The truth for every tracked container (both modes), and the node-wide problems.

    Never fails as a whole: a bad shared set, an unreadable cgroup or a broken record is the
    problem of the rows it concerns (and, when node-wide, listed once). A row's ``drift`` names
    each field that differs with its desired and actual values; ``problem`` is "" when fine.
    """
    problems: List[str] = []
    node: Optional[NodeView] = None
    try:
        node = read_node(config)
        if node.checkpoint_note:
            problems.append(node.checkpoint_note)
    except HookError as exc:
        problems.append(str(exc))
    try:
        ids = list_records(config.state_dir, "containers")
    except HookError as exc:
        problems.append(str(exc))
        ids = []
    frozen = read_inconsistent_pods(config, ids)
    rows = [_status_row(config, node, cid, problems, frozen) for cid in ids]
    return rows, problems


def read_status(config: Config) -> List[Dict[str, Any]]:
    """The rows of read_status_report."""
    return read_status_report(config)[0]


def _status_row(config: Config, node: Optional[NodeView], cid: str, problems: List[str],
                frozen: FrozenSet[str] = frozenset()) -> Dict[str, Any]:
    row: Dict[str, Any] = {
        "id": cid, "mode": "", "namespace": "", "pod": "", "container": "", "cgroup": "",
        "exclusive": "", "exclusive_source": "", "shared": "", "desired": "", "actual": "",
        "quota": {"desired": "", "actual": ""}, "pod_quota": {"desired": "", "actual": ""},
        "in_sync": False, "broken": False, "problem": "", "drift": [],
        "last_reapply": "", "reapplies": 0, "pins_maybe_lost": False,
    }
    try:
        rec = load_record(config.state_dir, "containers", cid)
    except HookError as exc:
        row.update(broken=True, problem=str(exc))
        return row
    if rec is None:
        row.update(problem="record removed while reading")
        return row
    row.update({k: rec.get(k) or row[k] for k in ("mode", "namespace", "pod", "container", "exclusive",
                                                  "exclusive_source", "last_reapply", "reapplies",
                                                  "pins_maybe_lost")})
    row["mode"] = rec.get("mode", "hook")
    row["cgroup"] = rec["cgroup"]["cpuset"]
    if node is None:
        row["problem"] = f"node facts unreadable: {problems[0] if problems else 'unknown'}"
        return row
    shared = node.shared
    row["shared"] = format_cpulist(shared)
    try:
        if rec.get("phase") == "releasing":
            row["problem"] = "release did not finish (reconcile finishes it)"
            return row
        broken, _pod_rec = check_membership(config, cid, rec)
        if broken:
            row.update(broken=True, problem=f"{os.path.join(config.state_dir, 'containers', cid + '.json')}: {broken}")
            return row
        dirs = _dirs(rec.get("cgroup"), node.layout, f"record {cid}")
        pod = _dirs(rec.get("pod_cgroup"), node.layout, f"record {cid}")
        if dirs is None or not os.path.isdir(dirs.cpuset) or not os.path.isdir(dirs.cpu):
            creating = rec.get("phase") == "creating" and _age(rec.get("created")) < CREATE_GRACE
            row["problem"] = "being created (its cgroup is not there yet)" if creating else (
                "cgroup gone (reconcile will forget it)")
            row["in_sync"] = creating
            return row
        observed = observe(node.layout, dirs, pod if pod and os.path.isdir(pod.cpu) else None)
        prev_pair = (parse_cpulist(rec["exclusive"], "record"), parse_cpulist(rec["shared"], "record"))
        assigned = _assigned(node, rec.get("pod_uid", ""), rec.get("container", ""), cid)
        decision = compute_exclusive(assigned, None, observed.cpus, shared, prev_pair)
        exclusive = decision.cpus if decision.cpus is not None else prev_pair[0]
        desired = exclusive | shared
        row.update(exclusive=format_cpulist(exclusive), exclusive_source=decision.source,
                   desired=format_cpulist(desired), actual=format_cpulist(observed.cpus))
        drift: List[Dict[str, str]] = []
        if observed.cpus != desired:
            drift.append({"field": "cpuset", "desired": row["desired"], "actual": row["actual"] or "empty"})
        want = compute_quota(observed.quota, _quota_state(rec.get("quota")), len(shared))
        row["quota"] = {"desired": _fmt_quota(want.applied), "actual": _fmt_quota(observed.quota.quota)}
        if want.applied != observed.quota.quota:
            drift.append({"field": "quota", **row["quota"]})
        pod_rec = load_record(config.state_dir, "pods", rec["pod_key"]) if rec.get("pod_key") else None
        if pod_rec is not None and observed.pod_quota is not None and rec.get("pod_key") not in frozen:
            pq = compute_quota(observed.pod_quota, _quota_state(pod_rec.get("quota")),
                               len(shared) * len(_live_members(config, cid, pod_rec["members"])))
            row["pod_quota"] = {"desired": _fmt_quota(pq.applied), "actual": _fmt_quota(observed.pod_quota.quota)}
            if pq.applied != observed.pod_quota.quota:
                drift.append({"field": "pod_quota", **row["pod_quota"]})
        row["drift"] = drift
        problem = "; ".join(f"{d['field']} is {d['actual']}, should be {d['desired']}" for d in drift)
        if decision.kind == "conflict" or decision.note:
            problem = "; ".join(p for p in (decision.note, problem) if p)
        row["problem"] = problem
        row["in_sync"] = not drift and decision.kind != "conflict"
    except HookError as exc:
        row["problem"] = str(exc)
        row["broken"] = isinstance(exc, RecordError)
    return row


def _fmt_quota(q: Optional[int]) -> str:
    return "max" if q is None else str(q)
