"""NRI messages to engine events and engine Answers to NRI replies (the plugin's front end).

One handler per event, as containerd/nri's stub has them: it bounds and parses the request into
plain facts (every value from the runtime is checked against core.bounds before it costs
anything), hands them to the NRI engine (``usecases.nri.NriEngine``: every decision, record and
pod-quota write is there, shared with hook mode), and turns the Answer into the reply: the
adjustment for the event's container and, in the reply's ``update`` field, new resources for
any other container the event changed. Unsolicited UpdateContainers are never sent:
containerd up to 2.3.4 can deadlock on them (containerd/nri#301).

``failure_policy`` applies to CreateContainer: "fail" answers the request with an error (the
runtime then fails the container's creation), "ignore" logs and answers with no adjustment.
Updates, stops and synchronization never fail a runtime request for our sake: they log, and
kubelet's values pass through unchanged.
"""

from __future__ import annotations

from operator import attrgetter, methodcaller
from typing import Any, Callable, Dict, FrozenSet, Iterable, List, NamedTuple, Optional, Sequence, Tuple

from ...core.bounds import (MAX_ANNOTATIONS, MAX_ANNOTATIONS_BYTES, MAX_CGROUPS_PATH, MAX_CPULIST_TEXT, MAX_ENV_BYTES,
                            MAX_ENV_ENTRIES, MAX_ID,
                            MAX_NAME, MAX_SYNC_CONTAINERS, MAX_SYNC_KEPT_BYTES, MAX_SYNC_PODS, MAX_UID, check_length,
                            check_period, check_quota, quote, QUOTE_LIMIT)
from ...core.cgroup import Quota
from ...core.cpuset import format_cpulist, parse_cpulist
from ...core.errors import CpuListError, HookError, RuntimeInputError
from ...core.model import Adjustment, Answer, Outcome, Resources, Update
from ...core.request import CONTAINER_NAME, POD_NAME, POD_NAMESPACE, POD_UID, may_ask
from ...core.validate import ID_CHARS, is_plain_name
from ...node.config import Config
from ...node.facts import FactsCache
from ...node.log import Reporter
from ...core.pool import CLAIM_PREFIX
from ...node.config import is_pool
from ...usecases.dra import DraEngine
from ...usecases.nri import ContainerFacts, NriEngine, describe_adjustment
from .wire import api
from .wire.ttrpc import MAX_MESSAGE

EVENTS = api.event_mask("CREATE_CONTAINER", "UPDATE_CONTAINER", "STOP_CONTAINER", "REMOVE_CONTAINER")
# With the pool (shared_cpus: pool), a claimant's start is checked too (the others' updates landed).
POOL_EVENTS = EVENTS | api.event_mask("START_CONTAINER")
STOPPED = api.CONTAINER_STATES["CONTAINER_STOPPED"]
# The updates of one SynchronizeResponse: one ttrpc message, less room for the response around them.
SYNC_RESPONSE_BUDGET = MAX_MESSAGE - 4096


class RequestFailed(Exception):
    """Answer this NRI request with an error status carrying this one-line message."""


class Interrupted(Exception):
    """The plugin is stopping (SIGTERM): a long Synchronize ends between two containers."""


# -- messages -> facts (pure) --------------------------------------------------------------

def check_id(cid: str, what: str, where: str) -> str:
    """A container id that can name a record: bounded, one plain path component."""
    check_length(cid, MAX_ID, what, where)
    if not is_plain_name(cid):
        raise RuntimeInputError(f"{what} {quote(cid)} is not a plain container id", where)
    return cid


def annotation_pairs(field: Any) -> Iterable[Tuple[str, str]]:
    """(key, value) of a message's annotations: a map (a message built in this process) or the
    repeated entries of api.READ, which requests are decoded into."""
    return field.items() if hasattr(field, "items") else ((e.key, e.value) for e in field)


def count_annotations(field: Any, what: str, where: str) -> Dict[str, str]:
    """A message's annotations as a dict; their count is checked before any is read
    (bounds.MAX_ANNOTATIONS: the count is known from the decoded entries, a map is not built)."""
    if len(field) > MAX_ANNOTATIONS:
        raise RuntimeInputError(f"{what} has {len(field)} annotations, more than the {MAX_ANNOTATIONS} read", where)
    if hasattr(field, "items"):
        return dict(field.items())
    return dict(map(_KEY_VALUE, field))  # (key, value) of each entry in C: no bytecode per annotation


_KEY_VALUE = attrgetter("key", "value")


def read_annotations(field: Any, what: str, where: str, counted: Optional[Dict[str, str]] = None) -> Dict[str, str]:
    """count_annotations (or ``counted``, what it gave for ``field``, itself: not a copy), and their
    size within MAX_ANNOTATIONS_BYTES (an asking container's)."""
    annotations = counted if counted is not None else count_annotations(field, what, where)
    size = sum(map(len, annotations)) + sum(map(len, annotations.values()))
    if size > MAX_ANNOTATIONS_BYTES:
        raise RuntimeInputError(f"{what} annotations of {size} characters exceed the {MAX_ANNOTATIONS_BYTES} "
                                "Kubernetes allows", where)
    return annotations


def check_request(pod: "api.PodSandbox", container: "api.Container", where: str) -> None:
    """Every string and map of an asking container's request within bounds.py's bounds, before
    anything is looked up, parsed or written (a RuntimeInputError names the first that is not)."""
    check_id(container.id, "container id", where)
    for value, what in ((container.name, "container name"), (pod.name, "pod name"), (pod.namespace, "namespace")):
        check_length(value, MAX_NAME, what, where)
    check_length(pod.uid, MAX_UID, "pod uid", where)
    check_length(container.linux.resources.cpu.cpus, MAX_CPULIST_TEXT, "linux.resources.cpu.cpus", where)


def compute_facts(pod: "api.PodSandbox", container: "api.Container", cpus_limit: int = MAX_CPULIST_TEXT,
                  counted: Tuple[Optional[Dict[str, str]], Optional[Dict[str, str]]] = (None, None),
                  merged: Optional[Dict[str, str]] = None, claims: bool = True) -> ContainerFacts:
    """The engine's view of a container; raises a HookError for a value out of bounds or malformed.

    ``cpus_limit``: the longest cpulist text parsed (compute_cpus_limit of the node's online CPUs).
    ``counted``: the pod's and the container's annotations as count_annotations gave them, when
    the caller read them already; ``merged``: a new dict the caller made of them (the pod's, then
    the container's), which becomes the facts' annotations (not copied again). ``claims``: the
    environment's ``DRA_CPUSET_`` entries are read (bounded first); false where the engine never reads
    them (exclusive_source kubelet): the environment is then not read at all, and the facts have none.

    One pass over plain values (every CreateContainer of an asking container comes here): the
    bounds of check_request tested at once, check_request itself run only to name what is out of
    them; annotations, cpulist, quota and period as read_annotations and parse_cpu_values have them.
    """
    cid, name, pod_name, namespace, uid = container.id, container.name, pod.name, pod.namespace, pod.uid
    cpu = container.linux.resources.cpu
    cpus_text = cpu.cpus
    where = f"container {cid}" if len(cid) <= QUOTE_LIMIT else f"container {quote(cid, bare=True)}"
    if not (0 < len(cid) <= MAX_ID and not cid.strip(ID_CHARS) and cid != "." and cid != ".."
            and len(name) <= MAX_NAME and len(pod_name) <= MAX_NAME and len(namespace) <= MAX_NAME
            and len(uid) <= MAX_UID and len(cpus_text) <= MAX_CPULIST_TEXT
            and "\0" not in name + pod_name + namespace + uid + cpus_text):
        check_request(pod, container, f"container {quote(cid, bare=True)}")
    if merged is None:
        annotations = dict(read_annotations(pod.annotations, "pod", where, counted[0]))  # a copy: ``counted`` stays
        annotations.update(read_annotations(container.annotations, "container", where, counted[1]))
    else:
        read_annotations(pod.annotations, "pod", where, counted[0])
        read_annotations(container.annotations, "container", where, counted[1])
        annotations = merged
    annotations[POD_NAMESPACE] = namespace
    annotations[POD_NAME] = pod_name
    annotations[POD_UID] = uid
    annotations[CONTAINER_NAME] = name
    quota_value = cpu.quota.value if cpu.HasField("quota") else None
    period_value = cpu.period.value if cpu.HasField("period") else None
    cpus, quota, period = parse_cpu_values(cpus_text, quota_value, period_value, f"{where}: linux.resources.cpu",
                                           cpus_limit)
    return ContainerFacts(cid, annotations, cpus, quota, container.linux.cgroups_path, pod.linux.cgroup_parent,
                          container.state == STOPPED, period, read_claim_env(container.env, where) if claims else (),
                          cpu.shares.value if cpu.HasField("shares") else 0)


def read_claim_env(env: Sequence[str], where: str) -> Tuple[str, ...]:
    """The container's DRA_CPUSET_* entries (the claims); the environment's size within bounds first."""
    if len(env) > MAX_ENV_ENTRIES:
        raise RuntimeInputError(f"environment of {len(env)} entries, more than the {MAX_ENV_ENTRIES} read", where)
    if sum(map(len, env)) > MAX_ENV_BYTES:
        raise RuntimeInputError(f"environment larger than {MAX_ENV_BYTES} characters", where)
    return tuple(filter(_IS_CLAIM, env))


_IS_CLAIM = methodcaller("startswith", CLAIM_PREFIX)


def parse_cpu(resources: "api.LinuxResources", where: str,
              cpus_limit: int = MAX_CPULIST_TEXT) -> Tuple[FrozenSet[int], Optional[Quota], int]:
    """(cpus, quota, period) of NRI resources: empty cpus when unset; quota None when not given.

    containerd passes a CRI update's quota even when kubelet left it out (the CPU manager sends
    only the cpuset): 0 then, which means "not in the update", never "unlimited". -1 is
    unlimited: Quota(None, period). Anything else must be a quota and a period the kernel
    accepts (bounds.py); a RuntimeInputError says which is not.
    """
    cpu = resources.cpu
    return parse_cpu_values(cpu.cpus, cpu.quota.value if cpu.HasField("quota") else None,
                            cpu.period.value if cpu.HasField("period") else None, where, cpus_limit)


# parse_cpu_values' answers for short cpulists, by their inputs (kubelet asks for the same few cpusets
# and quotas again and again); only values that passed, at most MEMO_ENTRIES, then forgotten at once.
MEMO_TEXT = 64
MEMO_ENTRIES = 256
_PARSED_CPU: Dict[Tuple[str, Optional[int], Optional[int], int], Tuple[FrozenSet[int], Optional[Quota], int]] = {}


def parse_cpu_values(cpus_text: str, quota_value: Optional[int], period_value: Optional[int],
                     where: str, cpus_limit: int = MAX_CPULIST_TEXT) -> Tuple[FrozenSet[int], Optional[Quota], int]:
    """parse_cpu of the three values (None: the field is not set)."""
    key = (cpus_text, quota_value, period_value, cpus_limit)
    known = _PARSED_CPU.get(key)
    if known is not None:
        return known
    parsed = _parse_cpu_values(cpus_text, quota_value, period_value, where, cpus_limit)
    if len(cpus_text) <= MEMO_TEXT:
        if len(_PARSED_CPU) >= MEMO_ENTRIES:
            _PARSED_CPU.clear()
        _PARSED_CPU[key] = parsed
    return parsed


def _parse_cpu_values(cpus_text: str, quota_value: Optional[int], period_value: Optional[int],
                      where: str, cpus_limit: int) -> Tuple[FrozenSet[int], Optional[Quota], int]:
    if len(cpus_text) > cpus_limit:
        raise CpuListError(f"cpulist of {len(cpus_text)} characters is longer than the {cpus_limit} that any list "
                           "of this node's online CPUs takes", f"{where}.cpus")
    cpus = parse_cpulist(cpus_text, f"{where}.cpus") if cpus_text.strip() else frozenset()
    period = check_period(period_value or 0, "period", where)
    if not quota_value:
        return cpus, None, period
    if quota_value != -1:
        check_quota(quota_value, "quota", where)
    return cpus, Quota(quota_value if quota_value > 0 else None, period), period


def compute_cpus_limit(online: FrozenSet[int]) -> int:
    """The longest cpulist text worth parsing on a node with these online CPUs: every one of them
    written alone, comma-separated (kubelet writes shorter, canonical lists). A longer list names
    a CPU twice or one that is not online: refused before it costs a parse."""
    if not online:
        return MAX_CPULIST_TEXT
    return min(MAX_CPULIST_TEXT, sum(len(str(c)) + 1 for c in online) + 2)


# -- answers -> messages (pure) ----------------------------------------------------------

def fill_cpu(resources: "api.LinuxResources", res: Resources) -> None:
    """cpus, and the quota and period, into NRI resources (always both: a field left out keeps
    kubelet's value). An unlimited quota is left out: the container keeps kubelet's (unlimited)."""
    cpu = resources.cpu
    cpu.cpus = format_cpulist(res.cpus)
    if res.quota is not None:
        cpu.quota.value = res.quota
    if res.period:
        cpu.period.value = res.period


# The wire bytes of the adjustments made so far (equal containers get equal ones: core.model's memo);
# bounded, then forgotten at once.
_ADJUSTMENT_BYTES: Dict[Adjustment, bytes] = {}


def format_adjustment(adj: Adjustment, msg: Optional["api.ContainerAdjustment"] = None) -> "api.ContainerAdjustment":
    """The adjustment message (filled into ``msg``, a reply's field, when given: no copy): its
    fields, or the bytes they encoded to for an equal adjustment before, merged in (one call)."""
    msg = api.ContainerAdjustment() if msg is None else msg
    data = _ADJUSTMENT_BYTES.get(adj)
    if data is None:
        built = api.ContainerAdjustment()
        fill_cpu(built.linux.resources, adj.resources)
        for key, value in adj.env:
            built.env.add(key=key, value=value)
        data = built.SerializeToString()
        if len(_ADJUSTMENT_BYTES) >= MEMO_ENTRIES:
            _ADJUSTMENT_BYTES.clear()
        _ADJUSTMENT_BYTES[adj] = data
    msg.MergeFromString(data)
    return msg


def format_update(cid: str, res: Resources, ignore_failure: bool = False) -> "api.ContainerUpdate":
    msg = api.ContainerUpdate(container_id=cid, ignore_failure=ignore_failure)
    fill_cpu(msg.linux.resources, res)
    return msg


def format_updates(updates: Sequence[Update], ignore_failure: bool = False) -> List["api.ContainerUpdate"]:
    """Other containers' new resources, for a reply's ``update`` field."""
    return [format_update(u.container_id, u.resources, ignore_failure) for u in updates]


# -- Synchronize: the parts collected, bounded --------------------------------------------

class SyncPod(NamedTuple):
    """What a Synchronize keeps of a pod (plain values: a pure-Python protobuf message costs
    a hundred times more to build)."""

    id: str
    name: str
    uid: str
    namespace: str
    cgroup_parent: str
    annotations: Tuple[Tuple[str, str], ...]


class SyncContainer(NamedTuple):
    """What a Synchronize keeps of a container (quota and period None: not set)."""

    id: str
    pod_sandbox_id: str
    name: str
    state: int
    cgroups_path: str
    cpus: str
    quota: Optional[int]
    period: Optional[int]
    shares: int
    env: Tuple[str, ...]  # the DRA_CPUSET_* entries only (bounded)
    annotations: Tuple[Tuple[str, str], ...]


NO_POD = SyncPod("", "", "", "", "", ())
EMPTY_LINUX = api.Container().linux
EMPTY_CPU = api.LinuxResources().cpu
ENTRY_COST = 128  # bytes counted for an entry on top of its strings


class SyncParts:
    """What the plugin keeps of a Synchronize split in parts (``more``): bounded whatever is sent.

    Pods and containers past bounds.MAX_SYNC_PODS and MAX_SYNC_CONTAINERS (across the parts) are
    cut from each part before it is decoded (``room`` and ``count_cut``); each one kept is
    trimmed to the fields the plugin reads (a pod's annotations under the configured prefix, a
    container's ending in its own name, every string cut one past its bound), and at most
    MAX_SYNC_KEPT_BYTES are kept. Past any bound the rest is only counted, and the Synchronize
    is ``cut``: no record is then taken as gone.
    """

    def __init__(self, prefix: str, stopping: Callable[[], bool] = lambda: False) -> None:
        self.prefix = prefix + "/"
        self.stopping = stopping
        self.pods: Dict[str, SyncPod] = {}
        self.containers: List[SyncContainer] = []
        self.pod_count = 0
        self.kept = 0
        self.dropped_pods = 0
        self.dropped_containers = 0

    @property
    def cut(self) -> bool:
        return bool(self.dropped_pods or self.dropped_containers)

    def room(self) -> Dict[int, int]:
        """How many more pods (field 1) and containers (field 2) a part may bring."""
        return {1: max(0, MAX_SYNC_PODS - self.pod_count), 2: max(0, MAX_SYNC_CONTAINERS - len(self.containers))}

    def count_cut(self, dropped: Dict[int, int]) -> None:
        self.dropped_pods += dropped.get(1, 0)
        self.dropped_containers += dropped.get(2, 0)

    def add(self, req: "api.SynchronizeRequest") -> None:
        for pod in req.pods:
            if self.stopping():
                raise Interrupted("the plugin is stopping")
            if self.pod_count >= MAX_SYNC_PODS:
                self.dropped_pods += 1
                continue
            parent = pod.linux.cgroup_parent if pod.HasField("linux") else ""
            small = SyncPod(_cut(pod.id, MAX_ID), _cut(pod.name, MAX_NAME), _cut(pod.uid, MAX_UID),
                            _cut(pod.namespace, MAX_NAME), _cut(parent, MAX_CGROUPS_PATH),
                            tuple((k, v) for k, v in _bounded_pairs(pod.annotations) if k.startswith(self.prefix)))
            if not self._keep(small):
                self.dropped_pods += 1
                continue
            self.pod_count += 1
            self.pods[small.id] = small
        for ctr in req.containers:
            if self.stopping():
                raise Interrupted("the plugin is stopping")
            if len(self.containers) >= MAX_SYNC_CONTAINERS:
                self.dropped_containers += 1
                continue
            # An unset sub-message costs as much to read as to build (pure-Python protobuf): ask first.
            linux = ctr.linux if ctr.HasField("linux") else EMPTY_LINUX
            cpu = linux.resources.cpu if linux.HasField("resources") and linux.resources.HasField("cpu") else EMPTY_CPU
            suffix = "/" + ctr.name
            kept = SyncContainer(_cut(ctr.id, MAX_ID), _cut(ctr.pod_sandbox_id, MAX_ID), _cut(ctr.name, MAX_NAME),
                                  ctr.state, _cut(linux.cgroups_path, MAX_CGROUPS_PATH),
                                  _cut(cpu.cpus, MAX_CPULIST_TEXT),
                                  cpu.quota.value if cpu.HasField("quota") else None,
                                  cpu.period.value if cpu.HasField("period") else None,
                                  cpu.shares.value if cpu.HasField("shares") else 0, _claims_kept(ctr.env),
                                  tuple((k, v) for k, v in _bounded_pairs(ctr.annotations) if k.endswith(suffix)))
            if not self._keep(kept):
                self.dropped_containers += 1
                continue
            self.containers.append(kept)

    def _keep(self, entry: Tuple[Any, ...]) -> bool:
        size = ENTRY_COST + sum(len(v) for v in entry if isinstance(v, str)) + sum(
            len(k) + len(v) for k, v in entry[-1]) + sum(len(e) for e in getattr(entry, "env", ()))
        if self.kept + size > MAX_SYNC_KEPT_BYTES:
            return False
        self.kept += size
        return True


def _claims_kept(env: Sequence[str]) -> Tuple[str, ...]:
    """What a Synchronize keeps of a container's environment: its claims, none past the bounds."""
    if len(env) > MAX_ENV_ENTRIES:
        return ()
    return tuple(_cut(e, MAX_CPULIST_TEXT + 256) for e in env if e.startswith(CLAIM_PREFIX))


def _bounded_pairs(field: Any) -> Iterable[Tuple[str, str]]:
    """The annotations kept of a Synchronize entry: none past bounds.MAX_ANNOTATIONS (it cannot
    ask then; a tracked container is still brought back from its record)."""
    return () if len(field) > MAX_ANNOTATIONS else annotation_pairs(field)


def to_messages(pod: SyncPod, ctr: SyncContainer) -> Tuple["api.PodSandbox", "api.Container"]:
    """The NRI messages again, for the few containers of a Synchronize that ask."""
    pod_msg = api.PodSandbox(id=pod.id, name=pod.name, uid=pod.uid, namespace=pod.namespace)
    pod_msg.linux.cgroup_parent = pod.cgroup_parent
    pod_msg.annotations.update(dict(pod.annotations))
    ctr_msg = api.Container(id=ctr.id, pod_sandbox_id=ctr.pod_sandbox_id, name=ctr.name, state=ctr.state)
    ctr_msg.linux.cgroups_path = ctr.cgroups_path
    cpu = ctr_msg.linux.resources.cpu
    cpu.cpus = ctr.cpus
    if ctr.quota is not None:
        cpu.quota.value = ctr.quota
    if ctr.period is not None:
        cpu.period.value = ctr.period
    if ctr.shares:
        cpu.shares.value = ctr.shares
    ctr_msg.env.extend(ctr.env)
    ctr_msg.annotations.update(dict(ctr.annotations))
    return pod_msg, ctr_msg


def _cut(value: str, limit: int) -> str:
    """At most one character past ``limit``: what is kept of a value is still refused by its bound
    later, and costs no more than that."""
    return value if len(value) <= limit else value[:limit + 1]


# -- the handlers ----------------------------------------------------------------------------

class Handlers:
    """One plugin's handlers: the NRI engine, and the Synchronize being collected."""

    def __init__(self, config: Config, reporter: Reporter, cache: Optional[FactsCache] = None) -> None:
        self.config = config
        self.reporter = reporter
        # Every container is placed (not only those that ask) when the shared CPUs are a pool: with
        # exclusive_source dra all of them move with the claims; with kubelet, a new exclusive
        # container changes the pool of the mixed ones.
        self.places_all = is_pool(config)
        self.engine: NriEngine = (DraEngine if config.exclusive_source == "dra" else NriEngine)(config, reporter, cache)
        # Only the dra source takes a container's CPUs from its claims (DRA_CPUSET_ variables): elsewhere a
        # CreateContainer's environment is not read (nor converted from the request, entry by entry).
        self.reads_claims = config.exclusive_source == "dra"
        # Set by the plugin: True once it was asked to stop (a long Synchronize then ends early).
        self.stopping: Callable[[], bool] = lambda: False
        # The Synchronize being collected (its parts so far), bounded.
        self.pending_sync = self._new_sync()
        self._limit: Tuple[Optional[FrozenSet[int]], int] = (None, 0)  # cpus_limit's last: online CPUs, limit

    def _new_sync(self) -> SyncParts:
        return SyncParts(self.config.annotation_prefix, lambda: self.stopping())

    def cpus_limit(self) -> int:
        """compute_cpus_limit of the online CPUs the engine read last (kept while they are the same set)."""
        online = self.engine.last_online()
        if online is not self._limit[0]:
            self._limit = (online, compute_cpus_limit(online))
        return self._limit[1]

    def after_answer(self) -> None:
        """Once the answers of a read are sent: what the engine kept for then (its reports)."""
        self.engine.after_answer()

    def connected(self) -> None:
        """A new runtime connection: forget a half-received Synchronize."""
        self.pending_sync = self._new_sync()

    # Configure -------------------------------------------------------------------------
    def configure(self, req: "api.ConfigureRequest") -> "api.ConfigureResponse":
        self.reporter.info(f"nri: configured by {quote(req.runtime_name or 'runtime', bare=True)} "
                           f"{quote(req.runtime_version, bare=True)}".rstrip()
                           + (f" (NRI {quote(req.NRI_version, bare=True)})" if req.NRI_version else "")
                           + f", request timeout {req.request_timeout} ms")
        return api.ConfigureResponse(events=POOL_EVENTS if self.places_all else EVENTS)

    # CreateContainer -------------------------------------------------------------------
    def create_container(self, req: "api.CreateContainerRequest") -> "api.CreateContainerResponse":
        where = "nri: CreateContainer"  # + describe_container, spelled only for a message
        try:
            pod_annotations = count_annotations(req.pod.annotations, "the pod", where)
            container_annotations = count_annotations(req.container.annotations, "the container", where)
        except RuntimeInputError as exc:  # whether it asks cannot be read: it is not refused for that
            self.reporter.warning(f"{where} {describe_container(req.pod, req.container)}: {exc.message}: "
                                  "annotations not read, created unadjusted")
            return api.CreateContainerResponse()
        annotations = dict(pod_annotations)
        annotations.update(container_annotations)
        annotations[CONTAINER_NAME] = req.container.name
        if not (self.places_all or may_ask(annotations)):
            return api.CreateContainerResponse()
        try:
            answer = self.engine.create(compute_facts(req.pod, req.container, self.cpus_limit(),
                                                      (pod_annotations, container_annotations), annotations,
                                                      self.reads_claims))
            reply = (api.CreateContainerResponse(update=format_updates(answer.updates)) if answer.updates
                     else api.CreateContainerResponse())
            if answer.adjust is not None:
                format_adjustment(answer.adjust, reply.adjust)
        except Exception as exc:  # noqa: BLE001 - failure_policy decides, whatever went wrong
            self.apply_failure_policy("CreateContainer", f"{where} {describe_container(req.pod, req.container)}", exc,
                                      "created unadjusted")
            return api.CreateContainerResponse()
        return reply  # the engine logged the decision (one line) and its writes

    def apply_failure_policy(self, method: str, where: str, exc: BaseException, ignored: str) -> None:
        """A request that may fail the container (CreateContainer, StartContainer) failed: counted;
        under ``failure_policy: fail`` the runtime gets the one-line error (RequestFailed), under
        ``ignore`` a warning says what the runtime does instead (``ignored``)."""
        self.engine.count_error(method, exc)
        problem = format_problem(exc)
        if self.config.failure_policy == "fail":
            self.reporter.error(f"{where}: {problem}")
            raise RequestFailed(f"mixed-cpus-hook: {problem}") from None
        self.reporter.warning(f"{where}: {problem} (failure_policy ignore: {ignored})")

    # UpdateContainer -------------------------------------------------------------------
    def update_container(self, req: "api.UpdateContainerRequest") -> "api.UpdateContainerResponse":
        cid = req.container.id
        if not self.tracked(cid):
            return api.UpdateContainerResponse()  # not ours: kubelet's update passes, nothing parsed
        where = f"nri: UpdateContainer {cid}"
        try:
            cpus, quota, _period = parse_cpu(req.linux_resources, f"{where}: linux_resources.cpu", self.cpus_limit())
            answer = self.engine.update(cid, cpus, quota)
            updates = format_updates(answer.updates)
            if answer.adjust is not None:
                updates.insert(0, format_update(cid, answer.adjust.resources))
        except Exception as exc:  # noqa: BLE001 - an update never fails for our sake
            self.engine.count_error("UpdateContainer", exc)
            self.reporter.error(f"{where}: {format_problem(exc)} (kubelet's update passes unchanged)")
            return api.UpdateContainerResponse()
        return api.UpdateContainerResponse(update=updates)  # a rewrite is logged by the engine, with before and after

    def tracked(self, cid: str) -> bool:
        """Whether ``cid`` can have a record and has one (one stat; the id is checked first, as
        records.record_path checks it)."""
        if not cid or len(cid) > MAX_ID or not is_plain_name(cid):
            return False
        return self.engine.tracks(cid)

    # StopContainer, RemoveContainer ------------------------------------------------------
    def release(self, cid: str, why: str) -> Answer:
        """Give the container's pod its share back; the answer's updates are other containers'."""
        if not self.tracked(cid):
            return Answer(Outcome("skipped"))
        try:
            return self.engine.stop(cid, why)
        except Exception as exc:  # noqa: BLE001 - a stop never fails for our sake
            self.engine.count_error("StopContainer" if why == "stopped" else "RemoveContainer", exc)
            self.reporter.error(f"nri: {why} {cid}: {format_problem(exc)}")
            return Answer(Outcome("error", (format_problem(exc),)))

    def stop_container(self, req: "api.StopContainerRequest") -> "api.StopContainerResponse":
        return api.StopContainerResponse(update=format_updates(self.release(req.container.id, "stopped").updates))

    def remove_container(self, req: "api.RemoveContainerRequest") -> "api.RemoveContainerResponse":
        self.release(req.container.id, "removed")  # RemoveContainer carries no updates (any NRI version)
        return api.RemoveContainerResponse()

    def state_change(self, req: "api.StateChangeEvent") -> "api.Empty":
        if req.event == api.EVENTS["REMOVE_CONTAINER"] and req.container.id:
            self.release(req.container.id, "removed")
        elif req.event == api.EVENTS["START_CONTAINER"] and req.container.id:
            self.start(req.pod, req.container)
        return api.Empty()

    # StartContainer ---------------------------------------------------------------------
    def start_container(self, req: "api.StartContainerRequest") -> "api.StartContainerResponse":
        self.start(req.pod, req.container)
        return api.StartContainerResponse()

    def start(self, pod: "api.PodSandbox", container: "api.Container") -> None:
        """Before a container with exclusive CPUs starts, nobody else holds them (shared_cpus: pool).

        An error fails the start (containerd fails the CRI StartContainer before the task starts)
        under ``failure_policy: fail``; under ``ignore`` it is logged and the container starts.
        """
        where = f"nri: StartContainer {describe_container(pod, container)}"
        try:
            check_length(container.id, MAX_ID, "container id", where)
            check_length(pod.uid, MAX_UID, "pod uid", where)
            check_length(container.name, MAX_NAME, "container name", where)
            answer = self.engine.start(container.id, pod.uid, container.name)
        except Exception as exc:  # noqa: BLE001 - failure_policy decides
            self.apply_failure_policy("StartContainer", where, exc, "started anyway")
            return
        for line in answer.outcome.lines:
            self.reporter.info(f"{where}: {line}")

    # Synchronize -----------------------------------------------------------------------
    def decode_synchronize(self, payload: bytes) -> "api.SynchronizeRequest":
        """A Synchronize part, decoded without the pods and containers past the bounds (counted)."""
        data, dropped = api.cut_repeated(payload, self.pending_sync.room())
        self.pending_sync.count_cut(dropped)
        return api.READ["SynchronizeRequest"].FromString(data)

    def synchronize(self, req: "api.SynchronizeRequest") -> "api.SynchronizeResponse":
        """Collect a split Synchronize (``more``); at the last part, answer with the updates."""
        self.pending_sync.add(req)
        if req.more:
            return api.SynchronizeResponse(more=True)
        parts, self.pending_sync = self.pending_sync, self._new_sync()
        return api.SynchronizeResponse(update=self.compute_sync(parts))

    def compute_sync(self, parts: SyncParts) -> List["api.ContainerUpdate"]:
        """Tracked containers back to their mixed set; asking ones admitted; nothing fails the whole.

        Nothing here fails the Synchronize (a runtime drops a plugin whose Synchronize fails): a
        container that cannot be handled, for any reason, is skipped and named in the log. The
        updates fit one ttrpc message: those past it are left to the periodic reconcile (their
        records say what they need). Records of NRI containers the runtime did not list are
        released only when their cgroup is gone too, and not at all when the Synchronize was cut.
        """
        if isinstance(self.engine, DraEngine):
            return self._sync_all(parts)
        updates: List["api.ContainerUpdate"] = []
        size = 0
        known = set()
        over_budget: List[str] = []
        for ctr in parts.containers:
            if self.stopping():
                raise Interrupted("the plugin is stopping")
            known.add(ctr.id)
            if ctr.state == STOPPED:
                continue
            pod = parts.pods.get(ctr.pod_sandbox_id, NO_POD)
            try:
                update = self._sync_one(pod, ctr)
            except Exception as exc:  # noqa: BLE001 - one container never fails the others
                self.engine.count_error("Synchronize", exc)
                self.reporter.error(f"{sync_where(pod, ctr)}: {format_problem(exc)} (skipped)")
                continue
            if update is None:
                continue
            cost = update.ByteSize() + 16  # the field's tag and length
            if size + cost > SYNC_RESPONSE_BUDGET:
                over_budget.append(ctr.id)
                continue
            size += cost
            updates.append(update)
        if over_budget:
            self.reporter.error(f"nri: Synchronize: {len(over_budget)} update(s) did not fit one answer "
                                f"(first {quote(over_budget[0])}); the periodic reconcile applies them")
        if parts.cut:
            self.reporter.error(f"nri: Synchronize: more than the plugin keeps ({parts.dropped_pods} pod(s) and "
                                f"{parts.dropped_containers} container(s) past bounds.MAX_SYNC_*); no record is "
                                "released for a container not listed")
            return updates
        self.engine.release_unlisted(known)
        return updates

    def _sync_all(self, parts: SyncParts) -> List["api.ContainerUpdate"]:
        """exclusive_source dra: the whole model rebuilt from every container, updates for all."""
        facts: List[ContainerFacts] = []
        for ctr in parts.containers:
            if self.stopping():
                raise Interrupted("the plugin is stopping")
            if ctr.state == STOPPED:
                continue
            pod = parts.pods.get(ctr.pod_sandbox_id, NO_POD)
            try:
                facts.append(compute_facts(*to_messages(pod, ctr), self.cpus_limit()))
            except Exception as exc:  # noqa: BLE001 - one container never fails the others
                self.engine.count_error("Synchronize", exc)
                self.reporter.error(f"{sync_where(pod, ctr)}: {format_problem(exc)} (skipped)")
        if parts.cut:
            self.reporter.error(f"nri: Synchronize: more than the plugin keeps ({parts.dropped_pods} pod(s) and "
                                f"{parts.dropped_containers} container(s) past bounds.MAX_SYNC_*): the pool is "
                                "computed from the containers kept")
        answer = self.engine.synchronize(facts)
        return self._budgeted([format_update(u.container_id, u.resources, ignore_failure=True)
                               for u in answer.updates])

    def _budgeted(self, updates: List["api.ContainerUpdate"]) -> List["api.ContainerUpdate"]:
        """The updates that fit one answer; the rest is left to the periodic reconcile."""
        kept: List["api.ContainerUpdate"] = []
        size = 0
        for update in updates:
            cost = update.ByteSize() + 16
            if size + cost > SYNC_RESPONSE_BUDGET:
                self.reporter.error(f"nri: Synchronize: {len(updates) - len(kept)} update(s) did not fit one "
                                    "answer; the periodic reconcile applies them")
                break
            size += cost
            kept.append(update)
        return kept

    def _sync_one(self, pod: SyncPod, ctr: SyncContainer) -> Optional["api.ContainerUpdate"]:
        """One container of a Synchronize: its update, or None (most are neither tracked nor asking:
        one stat and one look at their few annotations, nothing formatted)."""
        answer: Optional[Answer] = None
        where = ""
        if self.tracked(ctr.id):
            where = sync_where(pod, ctr)
            # The runtime's current values: what landed while no plugin was connected (kubelet's
            # update, a resize) is kubelet's and must not be taken for the record's.
            cpus, quota, _period = parse_cpu_values(ctr.cpus, ctr.quota, ctr.period, f"{where}: linux.resources.cpu",
                                                    self.cpus_limit())
            answer = self.engine.update(ctr.id, cpus, quota)
        if answer is None or answer.adjust is None:
            annotations = dict(pod.annotations)
            annotations.update(ctr.annotations)
            annotations[CONTAINER_NAME] = ctr.name
            if not may_ask(annotations):
                return None
            answer = self.engine.create(compute_facts(*to_messages(pod, ctr), self.cpus_limit()))
        if answer.adjust is None:
            return None
        update = format_update(ctr.id, answer.adjust.resources, ignore_failure=True)
        self.reporter.info(f"{where or sync_where(pod, ctr)}: {describe_adjustment(answer.adjust)}")
        return update

    # periodic reconcile ------------------------------------------------------------------
    def reconcile(self) -> None:
        """Re-apply what kubelet rewrote directly (pod quotas): every record, both modes."""
        self.engine.reconcile()

    def refresh(self) -> None:
        """Between events: read the node's facts that changed (kubelet's checkpoint), off the next
        request's path."""
        self.engine.refresh()


def sync_where(pod: SyncPod, ctr: SyncContainer) -> str:
    return f"nri: Synchronize: container {describe_container(pod, ctr)}"


def describe_container(pod: Any, container: Any) -> str:
    """"<id> (<namespace>/<pod>/<container>)" with every part quoted and cut (they come from the runtime)."""
    names = "/".join(quote(v, bare=True) for v in (pod.namespace, pod.name, container.name))
    return f"{quote(container.id, bare=True)} ({names})"


def format_problem(exc: BaseException) -> str:
    """One line for a failure: a HookError's kind and message, anything else as an internal error."""
    if isinstance(exc, HookError):
        return f"{exc.kind}: {exc}"
    return f"internal error: {quote(exc)}"
