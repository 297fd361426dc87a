"""NRI requests to engine calls and engine answers to NRI replies (the plugin's front end).

Messages become plain ``ContainerFacts`` here and Adjustments become NRI messages here; every
decision (does it ask, which CPUs, which quota, records) is the engine's, shared with hook
mode. ``failure_policy`` applies to CreateContainer: "fail" answers the request with an
error (the runtime then fails the container's creation), "ignore" logs and answers with no
adjustment. Updates, stops and the initial synchronization never fail a runtime request
for our sake: they log, and kubelet's values pass through unchanged.
"""

from __future__ import annotations

from typing import Callable, Dict, FrozenSet, List, Optional, Tuple

from .. import engine
from ..cgroups import Quota
from ..config import Config
from ..cpuset import format_cpulist, parse_cpulist
from ..errors import HookError
from ..log import Reporter
from ..records import list_records, load_record, state_lock
from ..request import CONTAINER_NAME, POD_NAME, POD_NAMESPACE, POD_UID, may_ask
from ..telemetry import Telemetry
from . import api

EVENTS = api.event_mask("CREATE_CONTAINER", "UPDATE_CONTAINER", "STOP_CONTAINER", "REMOVE_CONTAINER")
ENV_NAMES = ("OPENSHIFT_ISOLATED_CPUS", "OPENSHIFT_SHARED_CPUS")
STOPPED = api.CONTAINER_STATES["CONTAINER_STOPPED"]


class RequestFailed(Exception):
    """Answer this NRI request with an error status carrying this one-line message."""


# -- messages -> facts (pure) --------------------------------------------------------------

def compute_facts(pod: "api.PodSandbox", container: "api.Container") -> "engine.ContainerFacts":
    """The engine's view of a container; raises CpuListError for a malformed cpuset."""
    annotations: Dict[str, str] = dict(pod.annotations)
    annotations.update(container.annotations)
    annotations.update({POD_NAMESPACE: pod.namespace, POD_NAME: pod.name, POD_UID: pod.uid,
                        CONTAINER_NAME: container.name})
    cpus, quota, period = parse_cpu(container.linux.resources, f"container {container.id}: linux.resources.cpu")
    return engine.ContainerFacts(
        id=container.id, annotations=annotations, cpus=cpus, quota=quota.quota if quota else None,
        period=quota.period if quota else period, cgroups_path=container.linux.cgroups_path,
        pod_cgroup=pod.linux.cgroup_parent)


def parse_cpu(resources: "api.LinuxResources", where: str) -> Tuple[FrozenSet[int], Optional[Quota], int]:
    """(cpus, quota, period) of NRI resources: empty cpus when unset; quota None when not given.

    containerd passes a CRI update's quota even when kubelet left it out (the CPU manager sends
    only the cpuset): 0 then, which means "not in the update", never "unlimited". A negative
    quota (-1) is unlimited: Quota(None, period).
    """
    cpu = resources.cpu
    cpus = parse_cpulist(cpu.cpus, f"{where}.cpus") if cpu.cpus.strip() else frozenset()
    period = cpu.period.value if cpu.HasField("period") else 0
    if not cpu.HasField("quota") or cpu.quota.value == 0:
        return cpus, None, period
    value = cpu.quota.value
    return cpus, Quota(value if value > 0 else None, period), period


# -- adjustments -> messages (pure) ----------------------------------------------------------

def fill_cpu(resources: "api.LinuxResources", adj: "engine.Adjustment") -> None:
    """cpus, and the quota and period, of an Adjustment into NRI resources.

    An unlimited quota is left out: the container keeps kubelet's (unlimited) value.
    """
    cpu = resources.cpu
    cpu.cpus = format_cpulist(adj.cpus)
    if adj.quota is not None:
        cpu.quota.value = adj.quota
    if adj.period:
        cpu.period.value = adj.period


def format_adjustment(adj: "engine.Adjustment") -> "api.ContainerAdjustment":
    msg = api.ContainerAdjustment()
    fill_cpu(msg.linux.resources, adj)
    for key, value in adj.env:
        msg.env.add(key=key, value=value)
    return msg


def format_update(cid: str, adj: "engine.Adjustment", ignore_failure: bool = False) -> "api.ContainerUpdate":
    msg = api.ContainerUpdate(container_id=cid, ignore_failure=ignore_failure)
    fill_cpu(msg.linux.resources, adj)
    return msg


def describe(adj: "engine.Adjustment") -> str:
    quota = "unlimited" if adj.quota is None else f"{adj.quota}/{adj.period}"
    return (f"cpus {format_cpulist(adj.cpus)} (exclusive {format_cpulist(adj.exclusive)}, shared "
            f"{format_cpulist(adj.shared)}), quota {quota}")


# -- the handlers ----------------------------------------------------------------------------

class Handlers:
    """One plugin's handlers; the state they keep is only the Synchronize being collected."""

    def __init__(self, config: Config, reporter: Reporter,
                 read_node: Optional[Callable[[Config], "engine.NodeView"]] = None,
                 telemetry: Optional[Telemetry] = None) -> None:
        self.config = config
        self.reporter = reporter
        # counters for /metrics (the engine's, later); the mixed-container gauge counts the records
        self.telemetry = telemetry or Telemetry(count_tracked=lambda: len(list_records(config.state_dir, "containers")))
        self._read_node = read_node or engine.read_node
        self.node: Optional["engine.NodeView"] = None
        self._sync_pods: List["api.PodSandbox"] = []
        self._sync_containers: List["api.Container"] = []

    def refresh_node(self) -> None:
        """Re-read the shared CPUs and the cgroup layout (at connect and every reconcile)."""
        try:
            self.node = self._read_node(self.config)
        except HookError as exc:
            self.node = None  # the engine reads it again per call and reports the problem there
            self.reporter.error(f"nri: {exc}")

    def connected(self) -> None:
        """A new runtime connection: forget a half-received Synchronize."""
        self._sync_pods, self._sync_containers = [], []
        self.refresh_node()

    # Configure -------------------------------------------------------------------------
    def configure(self, req: "api.ConfigureRequest") -> "api.ConfigureResponse":
        self.reporter.info(f"nri: configured by {req.runtime_name or 'runtime'} {req.runtime_version}".rstrip()
                           + (f" (NRI {req.NRI_version})" if req.NRI_version else "")
                           + f", request timeout {req.request_timeout} ms")
        return api.ConfigureResponse(events=EVENTS)

    # CreateContainer -------------------------------------------------------------------
    def create_container(self, req: "api.CreateContainerRequest") -> "api.CreateContainerResponse":
        cid = req.container.id
        where = f"nri: CreateContainer {cid} ({req.pod.namespace}/{req.pod.name}/{req.container.name})"
        annotations = dict(req.pod.annotations)
        annotations.update(req.container.annotations)
        annotations[CONTAINER_NAME] = req.container.name
        if not may_ask(annotations):
            return api.CreateContainerResponse()
        try:
            adj = engine.admit_container(compute_facts(req.pod, req.container), self.config, self.reporter,
                                         node=self.node)
        except HookError as exc:
            self.telemetry.error("CreateContainer", exc.kind)
            if self.config.failure_policy == "fail":
                self.reporter.error(f"{where}: {exc.kind}: {exc}")
                raise RequestFailed(f"mixed-cpus-hook: {exc.kind}: {exc}") from None
            self.reporter.warning(f"{where}: {exc.kind}: {exc} (failure_policy ignore: created unadjusted)")
            return api.CreateContainerResponse()
        if adj is None:
            return api.CreateContainerResponse()
        self.reporter.info(f"{where}: {describe(adj)}")
        self.telemetry.admitted(pod_quota_raised=bool(adj.lines))  # lines: the pod quota writes
        return api.CreateContainerResponse(adjust=format_adjustment(adj))

    # UpdateContainer -------------------------------------------------------------------
    def update_container(self, req: "api.UpdateContainerRequest") -> "api.UpdateContainerResponse":
        cid = req.container.id
        where = f"nri: UpdateContainer {cid}"
        try:
            cpus, quota, _period = parse_cpu(req.linux_resources, f"{where}: linux_resources.cpu")
            adj = engine.update_container(cid, cpus, quota, self.config, self.reporter, node=self.node)
        except HookError as exc:
            self.telemetry.error("UpdateContainer", exc.kind)
            self.reporter.error(f"{where}: {exc.kind}: {exc} (kubelet's update passes unchanged)")
            return api.UpdateContainerResponse()
        if adj is None:
            return api.UpdateContainerResponse()
        self.reporter.info(f"{where}: kubelet's update rewritten: {describe(adj)}")
        return api.UpdateContainerResponse(update=[format_update(cid, adj)])

    # StopContainer, RemoveContainer ------------------------------------------------------
    def release(self, cid: str, why: str) -> None:
        try:
            with state_lock(self.config.state_dir):
                engine.release_container(cid, self.config, self.reporter, why=why)
        except HookError as exc:
            self.telemetry.error("StopContainer" if why == "stopped" else "RemoveContainer", exc.kind)
            self.reporter.error(f"nri: {why} {cid}: {exc.kind}: {exc}")

    def stop_container(self, req: "api.StopContainerRequest") -> "api.StopContainerResponse":
        self.release(req.container.id, "stopped")
        return api.StopContainerResponse()

    def remove_container(self, req: "api.RemoveContainerRequest") -> "api.RemoveContainerResponse":
        self.release(req.container.id, "removed")
        return api.RemoveContainerResponse()

    def state_change(self, req: "api.StateChangeEvent") -> "api.Empty":
        if req.event == api.EVENTS["REMOVE_CONTAINER"] and req.container.id:
            self.release(req.container.id, "removed")
        return api.Empty()

    # Synchronize -----------------------------------------------------------------------
    def synchronize(self, req: "api.SynchronizeRequest") -> "api.SynchronizeResponse":
        """Collect a split Synchronize (``more``); at the last part, answer with the updates."""
        self._sync_pods.extend(req.pods)
        self._sync_containers.extend(req.containers)
        if req.more:
            return api.SynchronizeResponse(more=True)
        pods, containers = self._sync_pods, self._sync_containers
        self._sync_pods, self._sync_containers = [], []
        return api.SynchronizeResponse(update=self.compute_sync(pods, containers))

    def compute_sync(self, pods: List["api.PodSandbox"], containers: List["api.Container"]) -> List["api.ContainerUpdate"]:
        """Tracked containers back to their mixed set (from the records); asking ones admitted.

        Records of NRI-mode containers the runtime no longer knows are released. Nothing here
        fails the Synchronize: a runtime drops a plugin whose Synchronize fails.
        """
        by_id = {p.id: p for p in pods}
        updates: List["api.ContainerUpdate"] = []
        known = set()
        for ctr in containers:
            known.add(ctr.id)
            if ctr.state == STOPPED:
                continue
            pod = by_id.get(ctr.pod_sandbox_id, api.PodSandbox())
            where = f"nri: Synchronize: container {ctr.id} ({pod.namespace}/{pod.name}/{ctr.name})"
            try:
                # The runtime's current values: what landed while no plugin was connected (kubelet's
                # update, a resize) is kubelet's and must not be taken for the record's.
                cpus, quota, _period = parse_cpu(ctr.linux.resources, f"{where}: linux.resources.cpu")
                adj = engine.update_container(ctr.id, cpus, quota, self.config, self.reporter, node=self.node)
                admitted = adj is None
                if adj is None:
                    annotations = dict(pod.annotations)
                    annotations.update(ctr.annotations)
                    annotations[CONTAINER_NAME] = ctr.name
                    if not may_ask(annotations):
                        continue
                    adj = engine.admit_container(compute_facts(pod, ctr), self.config, self.reporter,
                                                 node=self.node)
            except HookError as exc:
                self.telemetry.error("Synchronize", exc.kind)
                self.reporter.error(f"{where}: {exc.kind}: {exc}")
                continue
            if adj is not None:
                if admitted:
                    self.telemetry.admitted(pod_quota_raised=bool(adj.lines))
                self.reporter.info(f"{where}: {describe(adj)}")
                updates.append(format_update(ctr.id, adj, ignore_failure=True))
        for cid in self.nri_records():
            if cid not in known:
                self.release(cid, "gone from the runtime")
        return updates

    def nri_records(self) -> List[str]:
        """Ids of the records this mode made (hook-mode records belong to the hook)."""
        out = []
        for cid in list_records(self.config.state_dir, "containers"):
            try:
                rec = load_record(self.config.state_dir, "containers", cid)
            except HookError as exc:
                self.reporter.error(f"nri: {exc}")
                continue
            if rec is not None and rec.get("mode") == "nri":
                out.append(cid)
        return out

    # periodic reconcile ------------------------------------------------------------------
    def reconcile(self) -> None:
        """Re-apply what kubelet rewrote directly (pod quotas): every record, both modes."""
        self.refresh_node()
        try:
            engine.reconcile(self.config, self.reporter, reason="reapplied (nri periodic)", node=self.node)
        except HookError as exc:
            self.telemetry.error("reconcile", exc.kind)
            self.reporter.error(f"nri: reconcile: {exc.kind}: {exc}")
