"""NRI mode's events: the same decision as hook mode, answered to the runtime instead of written.

``NriEngine`` is the resident plugin's policy (one per plugin process), in the shape of
containerd/nri's stub and nri-plugins' resource manager: one method per event, each taking the
state lock, reading the node's facts fresh (through a stat-keyed cache), deciding with
``core.desired`` and returning an Answer: the adjustment for the event's container and updates
for every other container whose decision changed (a new shared set, kubelet's checkpoint moving
another container). The front end turns Answers into NRI messages; nothing here knows protobuf.

What NRI cannot reach, the pod cgroup's quota, is written here, and only upwards: raising a
pod's quota before the runtime raises the container's keeps cgroup v1's rule (a child's quota
never above its parent's); lowering waits for the periodic reconcile, which orders it after the
container's own (the lowered value stays listed as ours meanwhile, so nothing is added twice).
"""

from __future__ import annotations

import os

from ..core.cgroup import Dirs, Layout, Quota, compute_nri_cgroup
from ..core.cpuset import require_subset
from ..core.cpuset import format_cpulist
from ..core.desired import Desired, Kubelet, compute_desired
from ..core.errors import CgroupError, HookError, PolicyError
from ..core.model import Adjustment, Answer, ContainerRecord, Identity, Outcome, PodRecord, Update, compute_adjustment
from ..core.plan import Write, compute_pod_write, describe
from ..core.quota import compute_in_flight, compute_settled, format_quota_value
from ..node import cgroupfs as cg
from ..node.config import Config, is_pool
from ..node.facts import FactsCache, NodeFacts, read_node_facts
from ..node.kubelet import Moved, compute_assigned, compute_moved
from ..node.log import Reporter
from ..store.records import (HeldStateLock, container_exists, list_records, list_remembered, load_container, load_pod,
                              save_pod)
from .apply import read_request
from .common import (
    PodShare,
    decide_pod_share,
    is_gone,
    require_free,
    build_record,
    execute,
    exists,
    inside,
    live_members,
    pod_key_of,
    read_assigned,
    restore_records,
    save_changed,
)
from .metrics import update_metrics
from .reconcile import reconcile
from .telemetry import Telemetry
from .release import forget_pod, release_locked

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Dict, FrozenSet, List, NamedTuple, Optional, Sequence, Set, Tuple
else:
    from ..core.compat import NamedTuple

DEFAULT_PERIOD = 100000


class ContainerFacts(NamedTuple):
    """A container as an NRI runtime describes it, in plain data (the front end's parse)."""

    id: str
    annotations: Dict[str, str]
    cpus: FrozenSet[int]  # empty: not given
    quota: Optional[Quota]  # None: not given (Quota(None, period): unlimited)
    cgroups_path: str
    pod_cgroup: str
    stopped: bool = False
    period: int = 0  # the period given without a quota (0: none)
    env: Tuple[str, ...] = ()  # "NAME=value" (the claims of the dra source are there)
    shares: int = 0  # CPU shares (kubelet gives 2 to a container without a CPU request)


def compute_nri_dirs(layout: Layout, facts: ContainerFacts, pod_uid: str) -> Tuple[Dirs, Dirs]:
    """The container's cgroup dirs (which may not exist yet) and its pod's, from NRI's
    linux.cgroups_path and the pod's cgroup parent; refused unless they name a container cgroup
    inside the cgroup of the pod ``pod_uid`` (core.cgroup.compute_nri_cgroup)."""
    where = f"container {facts.id}"
    rel, pod_rel = compute_nri_cgroup(facts.cgroups_path, facts.id, pod_uid, facts.pod_cgroup, where)
    # ``rel`` is "/name/name..." of plain names (checked there).
    spelled = cg.join_plain_in_lexical_roots(layout, rel, pod_rel)
    if spelled is not None:  # both on cgroup file systems: as spelled
        return spelled
    cpuset = cg.join_plain_inside_root(layout.cpuset_root, rel, "container cgroup", layout.root, layout.lexical)
    cpu = cg.join_plain_inside_root(layout.cpu_root, rel, "container cgroup", layout.root, layout.lexical)
    pod = Dirs(os.path.dirname(cpuset), os.path.dirname(cpu))
    # A path resolved through a symbolic link must still end in the pod's cgroup.
    if not all(os.path.basename(d) == os.path.basename(pod_rel) for d in pod):
        raise CgroupError(f"the container cgroup resolves to {cpu}, not inside its pod cgroup {pod_rel}", where)
    return Dirs(cpuset, cpu), pod


def read_pod_quota(layout: Layout, pod: Dirs) -> Quota:
    """The pod's CFS quota and period (its descriptors kept for its next containers); a pod cgroup
    that is not there is said so ("pod cgroup not found"), looked at only when the read fails: a
    lookup before it would be a system call on every creation."""
    try:
        return cg.read_quota(layout, pod.cpu, keep=True)
    except CgroupError:
        if not os.path.isdir(pod.cpu):
            raise CgroupError("pod cgroup not found", pod.cpu) from None
        raise


def compute_raise(layout: Layout, pod: Dirs, observed: Quota, share: PodShare) -> Optional[Write]:
    """The pod quota write NRI mode makes itself: only upwards (a raise comes before the runtime
    raises the container's; a lowering waits for the reconcile, which orders it after the
    container's own, the lowered value staying listed as ours meanwhile)."""
    assert share.quota is not None
    write = compute_pod_write(layout, pod, observed, share.quota, len(share.members), share.shares_mcpu)
    raising = observed.quota is not None and share.quota.applied is not None and share.quota.applied > observed.quota
    return write if raising else None


def describe_adjustment(adj: Adjustment) -> str:
    quota = "unlimited" if adj.quota is None else f"{adj.quota}/{adj.period}"
    return (f"cpus {format_cpulist(adj.cpus)} (exclusive {format_cpulist(adj.exclusive)}, shared "
            f"{format_cpulist(adj.shared)}), quota {quota}")


def format_admitted(rec: ContainerRecord, source: str) -> str:
    """The one line of a creation: who, what, from where."""
    identity = rec.identity
    return (f"container {rec.id} ({identity.namespace}/{identity.pod}/{identity.container}): mixed CPUs "
            f"{format_cpulist(rec.desired)} (exclusive {format_cpulist(rec.exclusive)} from {source} + shared "
            f"{format_cpulist(rec.shared)}), quota {format_quota_value(rec.quota.applied)}/{rec.quota.period}")


def format_rewritten(cid: str, cpus: FrozenSet[int], quota: Optional[Quota], rec: ContainerRecord) -> str:
    """The journal line of kubelet's update (``cpus``, ``quota``; empty, None: not in it) rewritten to
    what ``rec`` holds."""
    return (f"container {cid}: update rewritten: cpus {format_cpulist(cpus) or '(unchanged)'} -> "
            f"{format_cpulist(rec.desired)}, quota {'(unchanged)' if quota is None else format_quota_value(quota.quota)}"
            f" -> {format_quota_value(rec.quota.applied)}")


def compute_checkpoint_moved(before: Optional[NodeFacts], now: NodeFacts) -> Optional[Moved]:
    """What changed between two facts when only kubelet's checkpoint entries did (kubelet allocated
    or released a container's CPUs: the shared CPUs, the online ones, the pool, the layout are the
    same); None when anything else may have changed (every tracked container is decided again)."""
    if before is None or before.checkpoint is None or now.checkpoint is None:
        return None
    if before._replace(checkpoint=None, generation=0) != now._replace(checkpoint=None, generation=0):
        return None
    return compute_moved(before.checkpoint, now.checkpoint)


class Placed(NamedTuple):
    """One container decided: its record (saved) and the journal lines of what was written for it."""

    record: ContainerRecord
    lines: Tuple[str, ...]


class NriEngine:
    """The NRI plugin's policy: one method per event, each returning an Answer."""

    def __init__(self, config: Config, reporter: Reporter, cache: Optional[FactsCache] = None,
                 telemetry: Optional[Telemetry] = None) -> None:
        self.config = config
        self.state_dir = config.state_dir
        self.reporter = reporter
        self.cache = cache or FactsCache()
        self.lock = HeldStateLock(config.state_dir)  # the state lock, its file kept open between events
        # Reports (not inputs) written after the runtime has its answer (after_answer), and records
        # journaled (self.lock.journaling): the plugin sets both (frontends.nri.plugin.defer_writes).
        self.defer_reports = False
        self._snapshot_due = False
        # The live counters (/metrics): the engine counts what it decides (containers made mixed,
        # pod quotas raised, reconcile errors), the front end requests, answer times and their errors.
        self.telemetry = telemetry or Telemetry(
            count_tracked=lambda: len(list_records(config.state_dir, "containers")))
        # The node facts' generation the other tracked containers were last decided on.
        self.decided_generation = 0
        self._decided: Optional[NodeFacts] = None  # those facts
        # compute_checkpoint_moved's last answer: (before, now, moved).
        self._moved: Tuple[Optional[NodeFacts], Optional[NodeFacts], Optional[Moved]] = (None, None, None)
        self._last: Optional[NodeFacts] = None
        self.exclusivity_failures = 0
        self.redone = 0
        if is_pool(config) and config.exclusive_source != "dra":
            self.telemetry.pool_stats = self._kubelet_pool_stats

    def _kubelet_pool_stats(self) -> Dict[str, object]:
        last = self._last
        return {"cpus": len(last.shared) if last is not None else 0, "containers": {},
                "exclusivity_failures": self.exclusivity_failures, "rewrites": self.redone}

    def facts(self) -> NodeFacts:
        """The node's facts now (kubelet's checkpoint as it is at this event)."""
        self._last = read_node_facts(self.config, self.cache)
        return self._last

    def refresh(self) -> None:
        """Read the node's facts between events (the plugin's watch saw kubelet's checkpoint change):
        what changed is parsed now, off the next request's path, which then finds it read (its own
        stat of the file still decides), and so is what moved since the tracked containers were last
        decided (_moved_since). A fact that cannot be read is left for that request to report, as it
        would be without this read."""
        try:
            node = self.facts()
        except HookError:
            return
        if self._decided is not None and node.generation != self.decided_generation:
            self._moved_since(self._decided, node)  # what _others will ask for these facts

    def _moved_since(self, before: Optional[NodeFacts], now: NodeFacts) -> Optional[Moved]:
        """compute_checkpoint_moved(before, now), computed once per pair of facts (O(kubelet's
        entries): refresh computes it while the plugin waits, the next event's _others finds it)."""
        known = self._moved
        if known[0] is before and known[1] is now:
            return known[2]
        moved = compute_checkpoint_moved(before, now)
        self._moved = (before, now, moved)
        return moved

    def last_online(self) -> FrozenSet[int]:
        """The online CPUs of the facts read last (read now when none were): bounds the runtime's
        cpulists before they are parsed (handlers.compute_cpus_limit)."""
        if self._last is None:
            try:
                self.facts()
            except HookError:
                return frozenset()
        return self._last.online if self._last is not None else frozenset()

    # -- one container -----------------------------------------------------------------------

    def _place(self, node: NodeFacts, cid: str, identity: Identity, dirs: Dirs, pod: Optional[Dirs],
               now: Kubelet, prev: Optional[ContainerRecord], why: str) -> Tuple[Desired, Optional[Placed]]:
        """Decide for one container; for a mixed one save its records and raise its pod's quota first.

        The caller holds the state lock. The runtime writes the container's own cgroup from the
        answer; the pod's cgroup is written here (raised now; lowered by the reconcile). Without
        kubelet's checkpoint, a new exclusive set must be held by no other recorded container; the
        raised quotas must be ones the kernel takes: both checked before anything is saved.
        """
        desired = compute_desired(now, node.shared, prev, node.share_mcpu)
        if desired.kind != "mixed":
            return desired, None
        if prev is not None:  # the runtime writes the answer after the reply: the last one stays ours
            desired = desired._replace(quota=compute_in_flight(desired.quota, prev.quota))
        if now.assigned is None and (prev is None or desired.exclusive != prev.exclusive):
            require_free(self.state_dir, cid, desired.exclusive, f"container {cid}")
        layout = node.layout
        key = pod_key_of(pod)
        prev_pod = load_pod(self.state_dir, key) if key else None
        observed = read_pod_quota(layout, pod) if pod is not None else None
        share = decide_pod_share(cid, desired, live_members(self.state_dir, prev_pod, keep=cid), observed, prev_pod,
                                 prev)
        pod_write = None
        if pod is not None and observed is not None and share.quota is not None:
            pod_write = compute_raise(layout, pod, observed, share)
        # "creating" until the runtime made the cgroup; the record is not saved again only to say it
        # did (the reconcile does): an UpdateContainer that changes nothing writes nothing.
        phase = prev.phase if prev is not None else ("applied" if exists(dirs) else "creating")
        rec = build_record(cid, identity, "nri", phase, layout, dirs, pod, desired, prev)
        new_pod = PodRecord(key or "", pod, share.quota, share.members) if pod is not None else None
        rec = save_changed(self.state_dir, prev, rec, prev_pod, new_pod)
        lines: Tuple[str, ...] = ()
        if pod_write is not None and new_pod is not None:
            try:
                execute(layout, (pod_write,), None, frozenset())
            except HookError:
                restore_records(self.state_dir, cid, prev, key, prev_pod)
                raise
            raised = new_pod.quota
            if raised is not None and raised.ours != (raised.applied,):  # a first raise lists only it already
                save_pod(self.state_dir, new_pod._replace(quota=compute_settled(raised)))
            lines = tuple(describe((pod_write,)))
            for line in lines:
                self.reporter.emit("info", f"container {cid}: {why}: {line}", to_stream=False)
        return desired, Placed(rec, lines)

    def _note(self, cid: str, desired: Desired) -> None:
        if desired.note and desired.mixed:
            self.reporter.emit("warning", f"container {cid}: {desired.note}", to_stream=False)

    # -- other containers ----------------------------------------------------------------------

    def _others(self, node: NodeFacts, exclude: str) -> Tuple[Update, ...]:
        """Updates for every other tracked NRI container whose decision changed since it was made.

        Only when a node fact changed (the shared CPUs, kubelet's checkpoint): then each record is
        decided again from what the runtime was last told for it, and a container whose answer
        differs (kubelet's checkpoint moved it; the shared set changed) is updated in this reply,
        so that its old exclusive CPUs are free before the event's container starts on them. When
        only kubelet's entries changed (kubelet allocated or released CPUs: on a static-policy node,
        at every container), only the containers whose entries changed, or whose CPUs two entries
        claim, are decided again (compute_checkpoint_moved): the others' inputs are as they were.
        One whose decision failed here is retried by the periodic reconcile, not at every change.
        The caller holds the state lock.
        """
        if node.generation == self.decided_generation:
            return ()
        before, self._decided = self._decided, node
        self.decided_generation = node.generation
        moved = self._moved_since(before, node)
        updates: List[Update] = []
        for cid, known in list_remembered(self.state_dir, "containers"):
            if cid == exclude or (known is not None and moved is not None and self._unmoved(node, cid, known, moved)):
                continue  # the record as remembered (its file not replaced since) says so: not loaded
            try:
                update = self._redecide(node, cid, moved)
            except HookError as exc:
                self.reporter.error(f"nri: container {cid}: {exc.kind}: {exc}")
                continue
            if update is not None:
                updates.append(update)
        return tuple(updates)

    def _redecide(self, node: NodeFacts, cid: str, moved: Optional[Moved] = None) -> Optional[Update]:
        """The update for tracked container ``cid`` when its decision on ``node`` differs from its
        record's; ``moved``: only kubelet's checkpoint entries changed since the last pass, and these:
        a container whose entry is not among them (and none of whose CPUs two entries claim) is
        decided on the same inputs as before, so not again."""
        rec = load_container(self.state_dir, cid)
        # "creating": the runtime makes the cgroup after CreateContainer is answered; once it exists the
        # container is live (the record says "applied" only after a reconcile has seen it)
        if rec is None or rec.mode != "nri" or rec.phase == "releasing":
            return None
        if moved is not None and self._unmoved(node, cid, rec, moved):
            return None
        dirs = inside(node.layout, rec.cgroup, f"record {cid}")
        pod = inside(node.layout, rec.pod_cgroup, f"record {cid}")
        if dirs is None or not exists(dirs):
            return None  # gone: the reconcile forgets it
        assigned = read_assigned(node, rec.identity, cid)
        now = Kubelet(rec.desired, Quota(rec.quota.applied, rec.quota.period), None, assigned)
        desired, placed = self._place(node, cid, rec.identity, dirs, pod, now, rec, "node changed")
        if placed is None:
            self.reporter.warning(f"container {cid}: left as it is: {desired.note}")
            return None
        new = placed.record
        if new.desired == rec.desired and new.quota.applied == rec.quota.applied:
            return None
        why = (f"node changed: cpus {format_cpulist(rec.desired)} -> {format_cpulist(new.desired)}, quota "
               f"{format_quota_value(rec.quota.applied)} -> {format_quota_value(new.quota.applied)}")
        self.reporter.info(f"container {cid}: {why}")
        return Update(cid, compute_adjustment(new).resources, why)

    @staticmethod
    def _unmoved(node: NodeFacts, cid: str, rec: ContainerRecord, moved: Moved) -> bool:
        """Whether tracked container ``cid`` (``rec``) is decided on the same inputs as before when
        only kubelet's checkpoint entries ``moved``: its entry is not among them and none of its
        CPUs is one two entries claim. A record that is not NRI's, or is being released, is never
        decided again either."""
        if rec.mode != "nri" or rec.phase == "releasing":
            return True
        if node.checkpoint is None:
            return False
        identity = rec.identity
        if (identity.pod_uid, identity.container) in moved.keys or cid in moved.ids:
            return False
        if not moved.contested:  # no CPU that two entries claim (the usual case): no entry to look up
            return True
        entry = compute_assigned(node.checkpoint, identity.pod_uid, identity.container, cid) or frozenset()
        return not ((rec.exclusive | entry) & moved.contested)

    # -- the events ----------------------------------------------------------------------------

    def create(self, facts: ContainerFacts) -> Answer:
        """CreateContainer: admit an asking container, raise its pod's quota, answer its adjustment.

        Idempotent for the same facts (Synchronize admits again what it finds).
        """
        request = read_request(facts.annotations, self.config, self.reporter, facts.id)
        if request is None:
            if not self.places_all():
                return Answer(Outcome("skipped"))
            # With the pool, another container's creation may change the mixed ones' pool part
            # (kubelet's checkpoint gave it CPUs from the default set): their updates ride on its reply.
            node = self.facts()
            with self.lock:
                return Answer(Outcome("skipped"), None, self._others(node, facts.id))
        node = self.facts()
        dirs, pod = compute_nri_dirs(node.layout, facts, request.pod_uid)
        answered = False  # with an adjustment: else what was remembered for it is forgotten (finally)
        try:
            if node.online and not facts.cpus <= node.online:
                require_subset(facts.cpus, node.online, "cpuset names CPUs", f"container {facts.id}")
            identity = Identity(request.namespace, request.pod, request.container, request.pod_uid)
            given = facts.quota or Quota(None, facts.period)
            if not given.period:
                given = Quota(given.quota, DEFAULT_PERIOD)
            with self.lock:
                prev = load_container(self.state_dir, facts.id)
                if prev is not None and (prev.phase == "releasing" or prev.pod_key != pod_key_of(pod)
                                         or prev.cgroup.cpu != dirs.cpu):
                    # A release that did not finish, or the same id again in another pod (or cgroup):
                    # the old pod gets its share back first.
                    why = "release finished" if prev.phase == "releasing" else f"created again in pod {pod_key_of(pod)}"
                    release_locked(self.state_dir, node.layout, facts.id, self.reporter, why=why)
                    prev = None
                assigned = read_assigned(node, identity, facts.id)
                now = Kubelet(facts.cpus, given, facts.cpus if prev is None else None, assigned)
                desired, placed = self._place(node, facts.id, identity, dirs, pod, now, prev, "create")
                if placed is None:
                    lead = "has no exclusive CPUs: " if desired.kind == "not-applicable" else ""
                    self.reporter.warning(f"container {facts.id}: {lead}{desired.note}")
                    return Answer(Outcome(desired.kind, (desired.note,)), None, self._others(node, facts.id))
                self._note(facts.id, desired)
                rec = placed.record
                # The one line of a creation (the pod quota's write has its own), made after the answer.
                self.reporter.emit_made("info", format_admitted, (rec, desired.source), to_stream=False)
                self.telemetry.admitted(pod_quota_raised=bool(placed.lines))
                answered = True
                return Answer(Outcome("applied", placed.lines), compute_adjustment(rec), self._others(node, facts.id))
        finally:
            if not answered:
                self._forget_unplaced(dirs, pod)

    def _forget_unplaced(self, dirs: Dirs, pod: Dirs) -> None:
        """After a creation that placed nothing (not applicable, refused, failed): compute_nri_dirs
        remembered its cgroups' paths, and no record will ask for them; its pod's paths and quota
        descriptors (a decision that failed may have read the quota) go too when the pod has no
        record. A pod with one keeps them for its members."""
        cg.forget_resolved(dirs.cpuset, dirs.cpu)
        key = pod_key_of(pod)
        try:
            if key and load_pod(self.state_dir, key) is not None:
                return
        except HookError:  # an unreadable pod record: left to the reconcile, which names it
            return
        forget_pod(pod)

    def update(self, cid: str, cpus: FrozenSet[int], quota: Optional[Quota]) -> Answer:
        """UpdateContainer: rewrite kubelet's update so the cgroup never holds the exclusive-only set.

        kubelet's new cpuset is its new exclusive assignment (kubelet's checkpoint, read now, wins
        where it exists); its new quota is the new base (unless it is one this product wrote, as
        when the runtime fills in the fields kubelet left out). Untracked: passed through.
        """
        node = self.facts()
        with self.lock:
            rec = load_container(self.state_dir, cid)
            if rec is None or rec.phase == "releasing":
                return Answer(Outcome("skipped"), None, self._others(node, cid))
            dirs = inside(node.layout, rec.cgroup, f"record {cid}")
            pod = inside(node.layout, rec.pod_cgroup, f"record {cid}")
            assert dirs is not None
            if cpus and node.online:
                require_subset(cpus, node.online, "cpuset names CPUs", f"container {cid}")
            current = cpus or rec.desired
            period = (quota.period if quota is not None and quota.period else None) or rec.quota.period
            given = Quota(rec.quota.applied if quota is None else quota.quota, period)
            assigned = read_assigned(node, rec.identity, cid)
            desired, placed = self._place(node, cid, rec.identity, dirs, pod, Kubelet(current, given, None, assigned),
                                          rec, "update")
            if placed is None:
                self.reporter.warning(f"container {cid}: update passed through unchanged: {desired.note}")
                return Answer(Outcome(desired.kind, (desired.note,)), None, self._others(node, cid))
            self._note(cid, desired)
            new = placed.record
            if new.desired != current or (quota is not None and quota.quota != new.quota.applied):
                # The rewrite's line, made after the answer (the runtime writes the rewrite, not this
                # engine: it is logged, not one of the Outcome's lines of what was written).
                self.reporter.emit_made("info", format_rewritten, (cid, cpus, quota, new), to_stream=False)
            return Answer(Outcome("applied", placed.lines), compute_adjustment(new), self._others(node, cid))

    def start(self, cid: str, pod_uid: str = "", name: str = "") -> Answer:
        """StartContainer, with the pool (exclusive_source kubelet): before a container with exclusive
        CPUs starts, no mixed container holds them.

        The reply to its CreateContainer carried the updates that took those CPUs out of every
        mixed container's pool part, but a runtime ignores an update it cannot apply: the mixed
        containers' cgroups are read back here, and a cpuset that still holds one of the CPUs is
        written again (its record says what it should be). PolicyError when one still does.
        """
        if not self.places_all():
            return Answer(Outcome("skipped"))
        node = self.facts()
        assigned = None
        if node.checkpoint is not None:
            from ..node.kubelet import compute_assigned

            assigned = compute_assigned(node.checkpoint, pod_uid, name, cid)
        if not assigned:
            return Answer(Outcome("skipped"))
        lines: List[str] = []
        stuck: List[str] = []
        with self.lock:
            self._others(node, cid)  # the records follow the pool that kubelet's new assignment left
            for other in list_records(self.state_dir, "containers"):
                if other == cid:
                    continue
                try:
                    line = self._enforce(node, other, assigned)
                except HookError as exc:
                    self.reporter.error(f"nri: container {other}: {exc}")
                    line = ""
                if line:
                    lines.append(line)
                elif line == "":
                    stuck.append(other)
        self.redone += len(lines)
        if stuck:
            self.exclusivity_failures += 1
            raise PolicyError(f"its exclusive CPUs {format_cpulist(assigned)} are still in the cpuset of mixed "
                              f"container(s) {', '.join(stuck[:3])}: exclusivity cannot hold, refused",
                              f"container {cid}")
        return Answer(Outcome("applied" if lines else "in-sync", tuple(lines)))

    def _enforce(self, node: NodeFacts, cid: str, claimed: FrozenSet[int]) -> Optional[str]:
        """None: ``cid`` (a mixed NRI container) holds none of ``claimed``; a line: it did and was
        written back to its record's set; "": it still does."""
        rec = load_container(self.state_dir, cid)
        if rec is None or rec.mode != "nri" or rec.phase == "releasing":  # "creating" too (see _redecide)
            return None
        dirs = inside(node.layout, rec.cgroup, f"record {cid}")
        if not exists(dirs):
            return None
        assert dirs is not None
        current = cg.read_cpus(node.layout, dirs.cpuset)
        if not current & claimed:
            return None
        path = cg.cpuset_file(node.layout, dirs.cpuset)
        cg.write_text(path, format_cpulist(rec.desired))
        if cg.read_cpus(node.layout, dirs.cpuset) & claimed:
            return ""
        line = f"container {cid}: {path}: {format_cpulist(current)} -> {format_cpulist(rec.desired)} (pool shrunk)"
        self.reporter.warning(f"nri: {line}")
        return line

    def after_answer(self) -> None:
        """What waits until the answer is sent: the records the events saved, journaled in the state
        lock's file while the lock stays held (HeldStateLock.journaling: the plugin sets it), saved
        now and the lock released (DraEngine: the pool's report file too)."""
        try:
            self.lock.complete()
        except HookError as exc:  # the journal stays in the lock file: done at the next event
            self.telemetry.error("records", exc.kind)
            self.reporter.error(f"nri: saving the records after the answer: {exc}")

    def tracks(self, cid: str) -> bool:
        """Whether ``cid`` (a plain id, checked by the caller) has a record (the store's own
        container_exists: one stat in the kept directory). A state directory that cannot be used
        tracks nothing here: kubelet's update passes, and reconcile and status name the problem.
        Records an earlier answer left unwritten (its journal's writing failed) are written first
        (a use of the lock does it): until then their containers would look untracked."""
        try:
            if self.lock.unfinished:
                with self.lock:
                    pass
            return container_exists(self.state_dir, cid)
        except HookError:
            return False

    def places_all(self) -> bool:
        """Whether every container's creation matters (shared_cpus: pool), not only the asking ones'."""
        return is_pool(self.config)

    def stop(self, cid: str, why: str = "stopped") -> Answer:
        """StopContainer / RemoveContainer: give the pod's share back, forget the container."""
        node = self.facts()
        with self.lock:
            outcome = release_locked(self.state_dir, node.layout, cid, self.reporter, why=why)
            return Answer(outcome, None, self._others(node, cid))

    def synchronize(self, containers: Sequence[ContainerFacts]) -> Answer:
        """Synchronize: every running container as the runtime has it now; answer updates for all.

        Tracked containers are decided again from the runtime's current values (what landed while
        no plugin was connected, kubelet's update or a resize, is kubelet's, never the record's);
        asking ones that are not tracked are admitted. One bad container is skipped and named in
        the journal, never failing the others. Records of NRI containers the runtime did not list
        are released only when their cgroup is gone too (a partial or empty re-synchronization
        must not drop running containers' records).
        """
        updates: List[Update] = []
        known = set()
        for facts in containers:
            known.add(facts.id)
            if facts.stopped:
                continue
            try:
                answer = self._sync_one(facts)
            except HookError as exc:
                self.reporter.error(f"nri: Synchronize: container {facts.id}: {exc.kind}: {exc}")
                continue
            except Exception as exc:  # noqa: BLE001 - one container never fails the others
                self.reporter.error(f"nri: Synchronize: container {facts.id}: internal error: {exc!r}")
                continue
            if answer.adjust is not None:
                updates.append(Update(facts.id, answer.adjust.resources, "synchronize"))
        self.release_unlisted(known)
        return Answer(Outcome("applied"), None, tuple(updates))

    def _sync_one(self, facts: ContainerFacts) -> Answer:
        answer = self.update(facts.id, facts.cpus, facts.quota)
        if answer.outcome.status == "skipped":
            answer = self.create(facts)
        return answer

    def release_unlisted(self, known: Set[str]) -> None:
        """After a whole Synchronize: release the NRI records of containers the runtime did not list
        whose cgroup is gone too. A runtime that does not list a container (an empty or partial
        Synchronize) is not proof that it is gone: the cgroup is."""
        node = self.facts()
        with self.lock:
            for cid in list_records(self.state_dir, "containers"):
                if cid in known:
                    continue
                try:
                    rec = load_container(self.state_dir, cid)
                    if rec is None or rec.mode != "nri":
                        continue
                    if not is_gone(rec):
                        self.reporter.warning(f"nri: Synchronize did not list container {cid}, but its cgroup is "
                                              "there: record kept (released when the cgroup goes)")
                        continue
                    release_locked(self.state_dir, node.layout, cid, self.reporter, why="gone from the runtime")
                except HookError as exc:
                    self.reporter.error(f"nri: {exc}")

    def reconcile(self) -> None:
        """The periodic reconcile: every record, both modes (what kubelet wrote directly: pod quotas).

        Its results feed the node_exporter textfile (``metrics_file``) as hook mode's do, so the
        documented errors alert covers NRI mode too.
        """
        try:
            results = reconcile(self.config, self.reporter, reason="reapplied (nri periodic)", node=self.facts())
        except HookError as exc:
            self.telemetry.error("reconcile", exc.kind)
            self.reporter.error(f"nri: reconcile: {exc.kind}: {exc}")
            results = [("-", Outcome("error", (str(exc),)))]
        for _cid, outcome in results:
            if outcome.status in ("error", "broken"):
                self.telemetry.error("reconcile", outcome.status)
        update_metrics(self.config, results, "nri periodic", full=True, reporter=self.reporter)

    def count_error(self, event: str, exc: BaseException) -> None:
        """An event that failed: the live counters and the textfile's error count."""
        self.telemetry.error(event, exc.kind if isinstance(exc, HookError) else "internal")
        update_metrics(self.config, [("-", Outcome("error", (str(exc),)))], "nri", reporter=self.reporter)

