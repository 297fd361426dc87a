"""NRI mode with exclusive_source dra: every container placed on its claims, the pool, or both.

The CPU DRA driver hands out exclusive CPUs as resource claims (``DRA_CPUSET_<uid>`` variables in
the container's environment, core.pool); the pool is every online CPU outside ``reserved_cpus``
that no claim holds. Nobody else pins containers in this model (kubelet's CPU manager is ``none``),
so the plugin places every container it is told about, in every namespace:

- CreateContainer: the container's own cpuset in the adjustment; when its claims take CPUs from
  the pool, updates in the same reply shrink every other container's pool part first;
- StartContainer: the updates of that reply may not have landed (a runtime ignores an update it
  cannot apply): before the claimant starts, the others' cgroups are read back and what did not
  land is written again; when a claimed CPU is still in another container's cpuset the start
  fails under ``failure_policy: fail`` (containerd fails the CRI StartContainer before the task
  starts, and sends StopContainer);
- StopContainer: the claims go back to the pool, and the reply's updates grow every pool part
  (RemoveContainer carries no updates, in any NRI version);
- Synchronize: the whole model rebuilt from the runtime's containers (their variables), updates
  for every container whose cpuset differs.

The CFS quota is left to kubelet: a CPU limit then throttles the claimed CPUs too. The model lives
in memory (the runtime is its source after every restart); ``<state_dir>/pool.json`` reports it
to ``status``.
"""

from __future__ import annotations

import os
from typing import Dict, FrozenSet, List, NamedTuple, Optional, Sequence, Set, Tuple

from ..core.bounds import quote
from ..core.cdi import select_claim_env
from ..core.cgroup import Dirs, Quota
from ..core.cpuset import format_cpulist
from ..core.errors import HookError, PolicyError
from ..core.model import ISOLATED_ENV, Adjustment, Answer, Outcome, Resources, Update
from ..core.pool import (CLAIM, MIXED, POOL, Member, check_pool_not_empty, compute_changes, compute_claim_conflicts,
                         compute_kind, compute_placements, parse_claims)
from ..core.request import POD_NAMESPACE, POD_UID
from ..node import cgroupfs as cg
from ..node.cdi import CdiSpecCache, read_vouched
from ..node.config import Config
from ..node.facts import FactsCache, NodeFacts
from ..node.log import Reporter
from ..store.records import save_pool_snapshot
from .apply import read_request
from .nri import ContainerFacts, NriEngine, compute_nri_dirs
from .telemetry import Telemetry


class Placed(NamedTuple):
    """A container in the model: the decision's view of it, its cgroup, and the cpuset it was given."""

    member: Member
    dirs: Optional[Dirs]
    cpus: FrozenSet[int]
    namespace: str = ""


def format_member_line(p: Placed) -> str:
    claims = ", ".join(f"{c.uid} {format_cpulist(c.cpus)}" for c in p.member.claims) or "no claim"
    return f"{p.member.kind} ({claims}) on {format_cpulist(p.cpus)}"


class DraEngine(NriEngine):
    """The NRI plugin's policy for exclusive_source dra (one per plugin process)."""

    def __init__(self, config: Config, reporter: Reporter, cache: Optional[FactsCache] = None,
                 telemetry: Optional[Telemetry] = None) -> None:
        super().__init__(config, reporter, cache,
                         telemetry or Telemetry(count_tracked=lambda: len(self.placed)))
        self.placed: Dict[str, Placed] = {}
        # The CDI specs' results between events (a claim counts only when a spec holds it: core.cdi).
        self.cdi = CdiSpecCache()
        self.pool: FrozenSet[int] = frozenset()
        # Starts refused because a claimed CPU stayed in another container's cpuset (metrics, status).
        self.exclusivity_failures = 0
        self.redone = 0
        self.telemetry.pool_stats = self.pool_stats

    def pool_stats(self) -> Dict[str, object]:
        """The pool's figures for /metrics (read from the HTTP thread: only whole objects are read)."""
        placed = self.placed
        kinds: Dict[str, int] = {MIXED: 0, CLAIM: 0, POOL: 0}
        for p in placed.values():
            kinds[p.member.kind] = kinds.get(p.member.kind, 0) + 1
        return {"cpus": len(self.pool), "containers": kinds, "exclusivity_failures": self.exclusivity_failures,
                "rewrites": self.redone}

    # -- the model ------------------------------------------------------------------------------

    def _recompute(self, node: NodeFacts, placed: Dict[str, Placed]) -> Tuple[FrozenSet[int], Dict[str, Placed]]:
        """The pool and every container's cpuset for ``placed`` (node.shared: online less reserved)."""
        members = [p.member for p in placed.values()]
        pool, cpus = compute_placements(node.shared, frozenset(), members)
        return pool, {cid: p._replace(cpus=cpus[cid]) for cid, p in placed.items()}

    def _updates(self, before: Dict[str, Placed], after: Dict[str, Placed], skip: str, why: str
                 ) -> Tuple[Update, ...]:
        changes = compute_changes({k: v.cpus for k, v in before.items()}, {k: v.cpus for k, v in after.items()}, skip)
        return tuple(Update(cid, Resources(cpus, None, 0), why) for cid, cpus in sorted(changes.items()) if cpus)

    def _commit(self, pool: FrozenSet[int], placed: Dict[str, Placed]) -> None:
        self.pool, self.placed = pool, placed
        self.save_snapshot()

    def save_snapshot(self) -> None:
        """``<state_dir>/pool.json`` for status and metrics; a failure to write it is only logged.

        A report, never an input: with ``defer_reports`` (the plugin sets it) it is written by
        ``after_answer``, once the runtime has its answer (at 1000 containers, writing it was
        most of an answer's time)."""
        if self.defer_reports:
            self._snapshot_due = True
            return
        self._write_snapshot()

    def after_answer(self) -> None:
        super().after_answer()
        if self._snapshot_due:
            self._snapshot_due = False
            self._write_snapshot()

    def _write_snapshot(self) -> None:
        doc = {"pool": format_cpulist(self.pool), "exclusive_source": "dra",
               "exclusivity_failures": self.exclusivity_failures, "redone": self.redone,
               "members": {cid: {"kind": p.member.kind, "pod_uid": p.member.pod_uid, "namespace": p.namespace,
                                 "cgroup": p.dirs.cpuset if p.dirs is not None else None,
                                 "claims": {c.uid: format_cpulist(c.cpus) for c in p.member.claims},
                                 "cpus": format_cpulist(p.cpus)} for cid, p in self.placed.items()}}
        try:
            save_pool_snapshot(self.state_dir, doc)
        except HookError as exc:
            self.reporter.warning(f"nri: {exc}")

    def read_vouched(self, containers: Sequence[ContainerFacts]) -> Dict[str, FrozenSet[str]]:
        """The DRA_CPUSET_ entries the CDI specs hold now, when one of ``containers`` has such a variable
        (node.cdi: a directory listing and a stat per spec file; a spec parsed again only when it changed);
        a spec skipped for the first time is logged."""
        if not any(f.env for f in containers):
            return {}
        vouched, scan = read_vouched(self.config.cdi_spec_dirs, self.cdi)
        for problem in scan.new_problems:
            self.reporter.warning(f"nri: {problem} (a claim only it holds is refused)")
        return vouched

    def _member(self, node: NodeFacts, facts: ContainerFacts, vouched: Dict[str, FrozenSet[str]]
                ) -> Tuple[Member, Optional[Dirs], str]:
        """The decision's view of a container from the runtime's facts (claims vouched for by a CDI spec
        and validated)."""
        where = f"container {facts.id}"
        claim_env, ignored = select_claim_env(facts.env, vouched, self.config.cdi_spec_dirs, where)
        if ignored:
            self.reporter.info(f"nri: {where}: {', '.join(ignored)} (held by a CDI spec) not a claim uid: not a claim")
        claims = parse_claims(claim_env, where, node.online, node.reserved)
        pod_uid = facts.annotations.get(POD_UID, "")
        namespace = facts.annotations.get(POD_NAMESPACE, "")
        asks = read_request(facts.annotations, self.config, self.reporter, facts.id) is not None
        if claims and facts.shares > 2 and not asks and not self._namespace_allowed(namespace):
            self.reporter.warning(f"{where}: holds a claim and a CPU request, but namespace {quote(namespace)} may not "
                                  "use the shared pool (setting 'allowed_namespaces'): runs on its claim only")
            kind = CLAIM
        else:
            kind = compute_kind(claims, facts.shares, asks)
        dirs = None
        if facts.cgroups_path:
            dirs, _pod = compute_nri_dirs(node.layout, facts, pod_uid)
        return Member(facts.id, pod_uid, kind, claims), dirs, namespace

    def _namespace_allowed(self, namespace: str) -> bool:
        from fnmatch import fnmatchcase

        return any(g == "*" or fnmatchcase(namespace, g) for g in self.config.allowed_namespaces)

    def _adjustment(self, p: Placed) -> Adjustment:
        env = ((ISOLATED_ENV, format_cpulist(p.member.claimed)),) if p.member.kind == MIXED else ()
        return Adjustment(Resources(p.cpus, None, 0), p.member.claimed, self.pool if p.member.kind != CLAIM
                          else frozenset(), env)

    def tracks(self, cid: str) -> bool:
        return cid in self.placed

    # -- the events -----------------------------------------------------------------------------

    def create(self, facts: ContainerFacts) -> Answer:
        """CreateContainer: place the container; shrink the others' pool part when it claims CPUs."""
        node = self.facts()
        member, dirs, namespace = self._member(node, facts, self.read_vouched((facts,)))
        where = f"container {facts.id}"
        others = {cid: p for cid, p in self.placed.items() if cid != facts.id}
        conflicts = compute_claim_conflicts(member, [p.member for p in others.values()])
        if conflicts:
            raise PolicyError("; ".join(conflicts[:3]) + ": refused", where)
        after = dict(others)
        after[facts.id] = Placed(member, dirs, frozenset(), namespace)
        pool, after = self._recompute(node, after)
        check_pool_not_empty(pool, [p.member for p in others.values()], member, where)
        updates = self._updates(self.placed, after, facts.id, f"claims of {facts.id}")
        self._commit(pool, after)
        placed = after[facts.id]
        self.reporter.info(f"nri: container {facts.id}: {format_member_line(placed)}; pool {format_cpulist(pool)}"
                           + (f"; {len(updates)} other container(s) updated" if updates else ""))
        if member.kind == MIXED:
            self.telemetry.admitted(pod_quota_raised=False)
        return Answer(Outcome("applied"), self._adjustment(placed), updates)

    def update(self, cid: str, cpus: FrozenSet[int], quota: Optional[Quota]) -> Answer:
        """UpdateContainer (a resize): the container keeps the cpuset the model gives it."""
        placed = self.placed.get(cid)
        if placed is None or not placed.cpus:
            return Answer(Outcome("skipped"))
        return Answer(Outcome("applied"), self._adjustment(placed))

    def stop(self, cid: str, why: str = "stopped") -> Answer:
        """StopContainer / RemoveContainer: the container's claims go back to the pool; every pool
        part grows in the reply's updates."""
        if cid not in self.placed:
            return Answer(Outcome("skipped"))
        node = self.facts()
        after = {k: v for k, v in self.placed.items() if k != cid}
        pool, after = self._recompute(node, after)
        updates = self._updates(self.placed, after, cid, f"{cid} {why}")
        gone = self.placed[cid]
        self._commit(pool, after)
        if gone.dirs is not None:
            cg.forget_resolved(gone.dirs.cpuset, gone.dirs.cpu)
        if gone.member.claims:
            self.reporter.info(f"nri: container {cid} {why}: claims {', '.join(c.uid for c in gone.member.claims)} "
                               f"back in the pool {format_cpulist(pool)}")
        return Answer(Outcome("released"), None, updates)

    def start(self, cid: str, pod_uid: str = "", name: str = "") -> Answer:
        """StartContainer: before a claimant starts, no other container may hold its claimed CPUs.

        The others' cgroups are read back; a cpuset that still holds a claimed CPU (an update the
        runtime did not apply) is written again; PolicyError when it still holds one (the start
        then fails under failure_policy: fail).
        """
        placed = self.placed.get(cid)
        if placed is None or not placed.member.claims:
            return Answer(Outcome("skipped"))
        layout = self.facts().layout
        claimed = placed.member.claimed
        stuck: List[str] = []
        lines: List[str] = []
        for other_id, other in sorted(self.placed.items()):
            if other_id == cid or other.dirs is None or not os.path.isdir(other.dirs.cpuset):
                continue
            if other.member.claims and other.member.pod_uid == placed.member.pod_uid and \
                    {c.uid for c in other.member.claims} & {c.uid for c in placed.member.claims}:
                continue  # one claim shared inside one pod
            line = self._enforce_placed(layout, other_id, other, claimed)
            if line is None:
                continue
            if line:
                lines.append(line)
            else:
                stuck.append(other_id)
        if stuck:
            self.exclusivity_failures += 1
            self.save_snapshot()
            raise PolicyError(f"claimed CPUs {format_cpulist(claimed)} are still in the cpuset of "
                              f"{', '.join(stuck[:3])}{' and more' if len(stuck) > 3 else ''}: exclusivity cannot "
                              "hold, refused", f"container {cid}")
        if lines:
            self.redone += len(lines)
            self.save_snapshot()
        return Answer(Outcome("applied" if lines else "in-sync", tuple(lines)))

    def _enforce_placed(self, layout: cg.Layout, cid: str, p: Placed, claimed: FrozenSet[int]) -> Optional[str]:
        """None: ``cid``'s cgroup holds none of ``claimed``; a journal line: it did and now does not
        (written again); "": it still does."""
        assert p.dirs is not None
        current = cg.read_cpus(layout, p.dirs.cpuset)
        if not current & claimed:
            return None
        path = cg.cpuset_file(layout, p.dirs.cpuset)
        try:
            cg.write_text(path, format_cpulist(p.cpus))
            now = cg.read_cpus(layout, p.dirs.cpuset)
        except HookError as exc:
            self.reporter.error(f"nri: container {cid}: {exc}")
            return ""
        if now & claimed:
            return ""
        line = (f"container {cid}: {path}: {format_cpulist(current)} -> {format_cpulist(p.cpus)} (the runtime had "
                "not applied the update that took claimed CPUs from it)")
        self.reporter.warning(f"nri: {line}")
        return line

    def synchronize(self, containers: Sequence[ContainerFacts]) -> Answer:
        """Rebuild the model from the runtime's containers; updates for those whose cpuset differs."""
        node = self.facts()
        placed: Dict[str, Placed] = {}
        current: Dict[str, FrozenSet[int]] = {}
        vouched = self.read_vouched([f for f in containers if not f.stopped])
        for facts in containers:
            if facts.stopped:
                continue
            try:
                member, dirs, namespace = self._member(node, facts, vouched)
                conflicts = compute_claim_conflicts(member, [p.member for p in placed.values()])
                if conflicts:
                    raise PolicyError("; ".join(conflicts[:3]), f"container {facts.id}")
            except HookError as exc:
                self.reporter.error(f"nri: Synchronize: container {facts.id}: {exc.kind}: {exc} (left as it is)")
                continue
            placed[facts.id] = Placed(member, dirs, frozenset(), namespace)
            current[facts.id] = facts.cpus
        pool, placed = self._recompute(node, placed)
        if not pool and any(p.member.kind != CLAIM for p in placed.values()):
            self.reporter.error("nri: Synchronize: the claims leave the pool empty while containers run on it: "
                                "those keep their cpusets until a claim goes")
            placed = {k: (v if v.cpus else v._replace(cpus=current.get(k, frozenset()))) for k, v in placed.items()}
        self._commit(pool, placed)
        updates = tuple(Update(cid, Resources(p.cpus, None, 0), "synchronize") for cid, p in sorted(placed.items())
                        if p.cpus and p.cpus != current.get(cid))
        self.reporter.info(f"nri: Synchronize: {len(placed)} container(s) placed, pool {format_cpulist(pool)}, "
                           f"{len(updates)} update(s)")
        return Answer(Outcome("applied"), None, updates)

    def release_unlisted(self, known: Set[str]) -> None:
        """Nothing to release: the model was rebuilt from the runtime's list."""

    def reconcile(self) -> None:
        """The periodic check: every container's cgroup against the model; what drifted is written back."""
        try:
            layout = self.facts().layout
        except HookError as exc:
            self.telemetry.error("reconcile", exc.kind)
            self.reporter.error(f"nri: reconcile: {exc.kind}: {exc}")
            return
        for cid, p in sorted(self.placed.items()):
            if p.dirs is None or not p.cpus or not os.path.isdir(p.dirs.cpuset):
                continue
            try:
                current = cg.read_cpus(layout, p.dirs.cpuset)
                if current != p.cpus:
                    cg.write_text(cg.cpuset_file(layout, p.dirs.cpuset), format_cpulist(p.cpus))
                    self.reporter.info(f"nri: container {cid}: reapplied (nri periodic): cpuset "
                                       f"{format_cpulist(current)} -> {format_cpulist(p.cpus)}")
            except HookError as exc:
                self.telemetry.error("reconcile", exc.kind)
                self.reporter.error(f"nri: reconcile: container {cid}: {exc}")

