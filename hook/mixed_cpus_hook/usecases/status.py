"""Status: the decision, checked against the cgroups ("verify" of the same knobs reconcile writes).

Never fails as a whole: a bad shared set, an unreadable cgroup or a broken record is the problem
of the rows it concerns (and, when node-wide, listed once). A row's ``drift`` names each field
that differs with its desired and actual values; ``problem`` is "" when fine.
"""

from __future__ import annotations

import os

from ..core.cpuset import format_cpulist, parse_cpulist
from ..core.desired import Kubelet, compute_desired, compute_pod_quota
from ..core.errors import HookError, RecordError
from ..core.model import ContainerRecord
from ..core.plan import Observed
from ..core.quota import format_quota_value
from ..node.config import Config
from ..node.facts import NodeFacts, read_node_facts
from ..store.records import list_records, load_container, read_journal_size
from .common import check_membership, exists, inside, is_answer_written, live_members, observe, read_assigned
from .reconcile import is_being_created, read_inconsistent_pods

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any, Dict, FrozenSet, List, Optional, Tuple

    from ..core.desired import Desired
    from ..core.model import PodRecord


def empty_row(cid: str) -> Dict[str, Any]:
    return {
        "id": cid, "mode": "", "namespace": "", "pod": "", "container": "", "cgroup": "",
        "exclusive": "", "exclusive_source": "", "shared": "", "desired": "", "actual": "",
        "quota": {"desired": "", "actual": ""}, "pod_quota": {"desired": "", "actual": ""},
        "in_sync": False, "broken": False, "problem": "", "drift": [],
        "last_reapply": "", "reapplies": 0, "pins_maybe_lost": False,
    }


def read_status_report(config: Config) -> Tuple[List[Dict[str, Any]], List[str]]:
    """The truth for every tracked container (both modes), and the node-wide problems."""
    problems: List[str] = []
    node: Optional[NodeFacts] = None
    try:
        node = read_node_facts(config)
        if node.checkpoint_note:
            problems.append(node.checkpoint_note)
    except HookError as exc:
        problems.append(str(exc))
    try:
        ids = list_records(config.state_dir, "containers")
    except HookError as exc:
        problems.append(str(exc))
        ids = []
    journal = read_journal_size(config.state_dir)
    if journal:
        problems.append(f"{os.path.join(config.state_dir, 'lock')}: a journal of {journal} bytes waits: the NRI "
                        "plugin's records of its last event, written once its answer is sent (after a plugin "
                        "that stopped, by its restart or the next command): the rows may not show them yet")
    frozen = read_inconsistent_pods(config.state_dir, ids)
    rows = [read_status_row(config.state_dir, node, cid, problems, frozen) for cid in ids]
    return rows, problems


def read_status(config: Config) -> List[Dict[str, Any]]:
    """The rows of read_status_report."""
    return read_status_report(config)[0]


def read_status_row(state_dir: str, node: Optional[NodeFacts], cid: str, problems: List[str],
                    frozen: FrozenSet[str] = frozenset()) -> Dict[str, Any]:
    row = empty_row(cid)
    try:
        rec = load_container(state_dir, cid)
    except HookError as exc:
        row.update(broken=True, problem=str(exc))
        return row
    if rec is None:
        row.update(problem="record removed while reading")
        return row
    row.update(mode=rec.mode, namespace=rec.identity.namespace, pod=rec.identity.pod,
               container=rec.identity.container, exclusive=format_cpulist(rec.exclusive),
               exclusive_source=rec.exclusive_source, last_reapply=rec.last_reapply or "",
               reapplies=rec.reapplies, pins_maybe_lost=rec.pins_maybe_lost, cgroup=rec.cgroup.cpuset)
    if node is None:
        row["problem"] = f"node facts unreadable: {problems[0] if problems else 'unknown'}"
        return row
    row["shared"] = format_cpulist(node.shared)
    try:
        _verify(state_dir, node, rec, row, frozen)
    except HookError as exc:
        row["problem"] = str(exc)
        row["broken"] = isinstance(exc, RecordError)
    return row


def _verify(state_dir: str, node: NodeFacts, rec: ContainerRecord, row: Dict[str, Any],
            frozen: FrozenSet[str]) -> None:
    """Fill ``row`` with the decision for ``rec`` now and where the cgroups differ from it."""
    if rec.phase == "releasing":
        row["problem"] = "release did not finish (reconcile finishes it)"
        return
    broken, pod_rec = check_membership(state_dir, rec)
    if broken:
        row.update(broken=True, problem=f"{os.path.join(state_dir, 'containers', rec.id + '.json')}: {broken}")
        return
    dirs = inside(node.layout, rec.cgroup, f"record {rec.id}")
    pod = inside(node.layout, rec.pod_cgroup, f"record {rec.id}")
    if dirs is None or not exists(dirs):
        creating = is_being_created(rec)
        row["problem"] = "being created (its cgroup is not there yet)" if creating else (
            "cgroup gone (reconcile will forget it)")
        row["in_sync"] = creating
        return
    observed = observe(node.layout, dirs, pod if pod is not None and os.path.isdir(pod.cpu) else None)
    if is_being_created(rec) and not is_answer_written(rec, observed.cpus, observed.quota):
        row.update(problem="being created (the runtime has not written its answer yet)", in_sync=True,
                   actual=format_cpulist(observed.cpus))
        return
    assigned = read_assigned(node, rec.identity, rec.id)
    desired = compute_desired(Kubelet(observed.cpus, observed.quota, None, assigned), node.shared, rec,
                              node.share_mcpu)
    exclusive = desired.exclusive if desired.mixed else rec.exclusive
    row.update(exclusive=format_cpulist(exclusive), exclusive_source=desired.decided_by,
               desired=format_cpulist(exclusive | node.shared), actual=format_cpulist(observed.cpus))
    drift = _drift(state_dir, rec, desired, observed, pod_rec, row, frozen)
    row["drift"] = drift
    problem = "; ".join(f"{d['field']} is {d['actual']}, should be {d['desired']}" for d in drift)
    if desired.kind == "conflict" or desired.note:
        problem = "; ".join(p for p in (desired.note, problem) if p)
    row["problem"] = problem
    row["in_sync"] = not drift and desired.kind != "conflict"


def _drift(state_dir: str, rec: ContainerRecord, desired: Desired, observed: Observed,
           pod_rec: Optional[PodRecord], row: Dict[str, Any], frozen: FrozenSet[str]) -> List[Dict[str, str]]:
    drift: List[Dict[str, str]] = []
    if observed.cpus != (desired.cpus if desired.mixed else rec.exclusive | desired.shared):
        drift.append({"field": "cpuset", "desired": row["desired"], "actual": row["actual"] or "empty"})
    want = desired.quota.applied if desired.quota is not None else rec.quota.applied
    row["quota"] = {"desired": format_quota_value(want), "actual": format_quota_value(observed.quota.quota)}
    if want != observed.quota.quota:
        drift.append({"field": "quota", **row["quota"]})
    if pod_rec is not None and observed.pod_quota is not None and rec.pod_key not in frozen:
        members = live_members(state_dir, pod_rec, keep=rec.id)
        shares = [m.share_mcpu if m.id != rec.id or not desired.mixed else desired.share_mcpu for m in members]
        pq = compute_pod_quota(observed.pod_quota, pod_rec.quota, shares)
        row["pod_quota"] = {"desired": format_quota_value(pq.applied),
                            "actual": format_quota_value(observed.pod_quota.quota)}
        if pq.applied != observed.pod_quota.quota:
            drift.append({"field": "pod_quota", **row["pod_quota"]})
    return drift


def read_pool_report(config: Config) -> Optional[Dict[str, Any]]:
    """shared_cpus: pool: the pool now, its size, who is on it, and each placement checked against its
    cgroup (None when the shared CPUs are a fixed set).

    With exclusive_source dra the placements are the NRI plugin's (``<state_dir>/pool.json``, its
    report of what it placed where); with kubelet the pool is kubelet's defaultCpuSet less
    reserved_cpus, and the mixed containers are the rows.
    """
    from ..node.config import is_pool
    from ..store.records import load_pool_snapshot

    if not is_pool(config):
        return None
    report: Dict[str, Any] = {"source": config.exclusive_source, "pool": "", "size": 0, "members": [],
                              "drift": [], "problem": ""}
    if config.exclusive_source != "dra":
        try:
            node = read_node_facts(config)
            report.update(pool=format_cpulist(node.shared), size=len(node.shared))
        except HookError as exc:
            report["problem"] = str(exc)
        return report
    try:
        snap = load_pool_snapshot(config.state_dir)
    except HookError as exc:
        report["problem"] = str(exc)
        return report
    if snap is None:
        report["problem"] = "no placements yet: the NRI plugin has not synchronized with the runtime"
        return report
    pool = str(snap.get("pool", ""))
    report.update(pool=pool, size=len(parse_cpulist(pool)) if pool else 0,
                  exclusivity_failures=snap.get("exclusivity_failures", 0), rewrites=snap.get("redone", 0))
    for cid, m in sorted(snap["members"].items()):
        member = {"id": cid, "kind": m.get("kind", ""), "namespace": m.get("namespace", ""),
                  "claims": m.get("claims", {}), "desired": m.get("cpus", ""), "actual": ""}
        cgroup = m.get("cgroup")
        if isinstance(cgroup, str) and os.path.isfile(os.path.join(cgroup, "cpuset.cpus")):
            member["actual"] = _read_cpuset(cgroup)
            if member["desired"] and member["actual"] != member["desired"]:
                report["drift"].append(cid)
        report["members"].append(member)
    return report


def _read_cpuset(cgroup: str) -> str:
    from ..node import cgroupfs as cg

    try:
        return format_cpulist(parse_cpulist(cg.read_text(os.path.join(cgroup, "cpuset.cpus"))))
    except HookError as exc:
        return f"unreadable: {exc.message}"


def format_pool_lines(report: Dict[str, Any], wide: bool = False) -> List[str]:
    """The pool section of ``status``: one summary line, and with ``wide`` one line per container."""
    members = report["members"]
    kinds: Dict[str, int] = {}
    for m in members:
        kinds[m["kind"]] = kinds.get(m["kind"], 0) + 1
    counts = ", ".join(f"{n} {k}" for k, n in sorted(kinds.items())) or "no container placed"
    lines = [f"pool ({report['source']}): {report['pool'] or 'empty'} ({report['size']} CPU(s)); {counts}"]
    if report.get("problem"):
        lines.append(f"  pool: {report['problem']}")
    for cid in report["drift"]:
        m = next(x for x in members if x["id"] == cid)
        lines.append(f"  {cid[:12]}: cpuset is {m['actual']}, should be {m['desired']} ({m['kind']})")
    if wide:
        for m in members:
            claims = ", ".join(f"{u} {c}" for u, c in sorted(m["claims"].items())) or "-"
            lines.append(f"  {m['id'][:12]} {m['kind']:<5} claims {claims} cpuset {m['desired']}")
    return lines
