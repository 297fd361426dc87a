"""NRI messages to engine events and engine Answers to NRI replies (the plugin's front end).

One handler per event, as containerd/nri's stub has them: it parses the request into plain
facts, hands them to the NRI engine (``usecases.nri.NriEngine``: every decision, record and
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

from typing import Dict, FrozenSet, List, Optional, Sequence, Tuple

from ...core.cgroup import Quota
from ...core.cpuset import format_cpulist, parse_cpulist
from ...core.errors import HookError
from ...core.model import Adjustment, Answer, Outcome, Resources, Update
from ...core.request import CONTAINER_NAME, POD_NAME, POD_NAMESPACE, POD_UID, may_ask
from ...node.config import Config
from ...node.facts import FactsCache
from ...node.log import Reporter
from ...usecases.nri import ContainerFacts, NriEngine, describe_adjustment
from .wire import api

EVENTS = api.event_mask("CREATE_CONTAINER", "UPDATE_CONTAINER", "STOP_CONTAINER", "REMOVE_CONTAINER")
STOPPED = api.CONTAINER_STATES["CONTAINER_STOPPED"]


class RequestFailed(Exception):
    """Answer this NRI request with an error status carrying this one-line message."""


# -- messages -> facts (pure) --------------------------------------------------------------

def compute_annotations(pod: api.PodSandbox, container: api.Container) -> Dict[str, str]:
    """The pod's and the container's annotations, with kubelet's names as CRI-O would copy them."""
    annotations: Dict[str, str] = dict(pod.annotations)
    annotations.update(container.annotations)
    annotations.update({POD_NAMESPACE: pod.namespace, POD_NAME: pod.name, POD_UID: pod.uid,
                        CONTAINER_NAME: container.name})
    return annotations


def compute_facts(pod: api.PodSandbox, container: api.Container) -> ContainerFacts:
    """The engine's view of a container; raises CpuListError for a malformed cpuset."""
    cpus, quota = parse_cpu(container.linux.resources, f"container {container.id}: linux.resources.cpu")
    return ContainerFacts(id=container.id, annotations=compute_annotations(pod, container), cpus=cpus, quota=quota,
                          cgroups_path=container.linux.cgroups_path, pod_cgroup=pod.linux.cgroup_parent,
                          stopped=container.state == STOPPED)


def parse_cpu(resources: api.LinuxResources, where: str) -> Tuple[FrozenSet[int], Optional[Quota]]:
    """(cpus, quota) of NRI resources: empty cpus when unset; quota None when not given.

    containerd passes a CRI update's quota even when kubelet left it out (the CPU manager sends
    only the cpuset): 0 then, which means "not in the update", never "unlimited". A negative
    quota (-1) is unlimited: Quota(None, period).
    """
    cpu = resources.cpu
    cpus = parse_cpulist(cpu.cpus, f"{where}.cpus") if cpu.cpus.strip() else frozenset()
    period = cpu.period.value if cpu.HasField("period") else 0
    if not cpu.HasField("quota") or cpu.quota.value == 0:
        return cpus, None
    value = cpu.quota.value
    return cpus, Quota(value if value > 0 else None, period)


# -- answers -> messages (pure) ----------------------------------------------------------

def fill_cpu(resources: api.LinuxResources, res: Resources) -> None:
    """cpus, and the quota and period, into NRI resources (always both: a field left out keeps
    kubelet's value). An unlimited quota is left out: the container keeps kubelet's (unlimited)."""
    cpu = resources.cpu
    cpu.cpus = format_cpulist(res.cpus)
    if res.quota is not None:
        cpu.quota.value = res.quota
    if res.period:
        cpu.period.value = res.period


def format_adjustment(adj: Adjustment) -> api.ContainerAdjustment:
    msg = api.ContainerAdjustment()
    fill_cpu(msg.linux.resources, adj.resources)
    for key, value in adj.env:
        msg.env.add(key=key, value=value)
    return msg


def format_update(cid: str, res: Resources, ignore_failure: bool = False) -> api.ContainerUpdate:
    msg = api.ContainerUpdate(container_id=cid, ignore_failure=ignore_failure)
    fill_cpu(msg.linux.resources, res)
    return msg


def format_updates(updates: Sequence[Update], ignore_failure: bool = False) -> List[api.ContainerUpdate]:
    return [format_update(u.container_id, u.resources, ignore_failure) for u in updates]


# -- the handlers ----------------------------------------------------------------------------

class Handlers:
    """One plugin's handlers; the state they keep is the engine and the Synchronize being collected."""

    def __init__(self, config: Config, reporter: Reporter, cache: Optional[FactsCache] = None) -> None:
        self.config = config
        self.reporter = reporter
        self.engine = NriEngine(config, reporter, cache)
        self._sync_pods: List[api.PodSandbox] = []
        self._sync_containers: List[api.Container] = []

    def connected(self) -> None:
        """A new runtime connection: forget a half-received Synchronize."""
        self._sync_pods, self._sync_containers = [], []

    # Configure -------------------------------------------------------------------------
    def configure(self, req: api.ConfigureRequest) -> api.ConfigureResponse:
        self.reporter.info(f"nri: configured by {req.runtime_name or 'runtime'} {req.runtime_version}".rstrip()
                           + (f" (NRI {req.NRI_version})" if req.NRI_version else "")
                           + f", request timeout {req.request_timeout} ms")
        return api.ConfigureResponse(events=EVENTS)

    # CreateContainer -------------------------------------------------------------------
    def create_container(self, req: api.CreateContainerRequest) -> api.CreateContainerResponse:
        cid = req.container.id
        where = f"nri: CreateContainer {cid} ({req.pod.namespace}/{req.pod.name}/{req.container.name})"
        annotations = dict(req.pod.annotations)
        annotations.update(req.container.annotations)
        annotations[CONTAINER_NAME] = req.container.name
        if not may_ask(annotations):
            return api.CreateContainerResponse()
        try:
            answer = self.engine.create(compute_facts(req.pod, req.container))
        except HookError as exc:
            if self.config.failure_policy == "fail":
                self.reporter.error(f"{where}: {exc.kind}: {exc}")
                raise RequestFailed(f"mixed-cpus-hook: {exc.kind}: {exc}") from None
            self.reporter.warning(f"{where}: {exc.kind}: {exc} (failure_policy ignore: created unadjusted)")
            return api.CreateContainerResponse()
        reply = api.CreateContainerResponse(update=format_updates(answer.updates))
        if answer.adjust is not None:
            self.reporter.info(f"{where}: {describe_adjustment(answer.adjust)}")
            reply.adjust.CopyFrom(format_adjustment(answer.adjust))
        return reply

    # UpdateContainer -------------------------------------------------------------------
    def update_container(self, req: api.UpdateContainerRequest) -> api.UpdateContainerResponse:
        cid = req.container.id
        where = f"nri: UpdateContainer {cid}"
        try:
            cpus, quota = parse_cpu(req.linux_resources, f"{where}: linux_resources.cpu")
            answer = self.engine.update(cid, cpus, quota)
        except HookError as exc:
            self.reporter.error(f"{where}: {exc.kind}: {exc} (kubelet's update passes unchanged)")
            return api.UpdateContainerResponse()
        updates = format_updates(answer.updates)
        if answer.adjust is not None:
            self.reporter.info(f"{where}: kubelet's update rewritten: {describe_adjustment(answer.adjust)}")
            updates.insert(0, format_update(cid, answer.adjust.resources))
        return api.UpdateContainerResponse(update=updates)

    # StopContainer, RemoveContainer ------------------------------------------------------
    def _stop(self, cid: str, why: str) -> Answer:
        try:
            return self.engine.stop(cid, why)
        except HookError as exc:
            self.reporter.error(f"nri: {why} {cid}: {exc.kind}: {exc}")
            return Answer(Outcome("error", (str(exc),)))

    def stop_container(self, req: api.StopContainerRequest) -> api.StopContainerResponse:
        answer = self._stop(req.container.id, "stopped")
        return api.StopContainerResponse(update=format_updates(answer.updates))

    def remove_container(self, req: api.RemoveContainerRequest) -> api.RemoveContainerResponse:
        self._stop(req.container.id, "removed")  # RemoveContainer carries no updates (any NRI version)
        return api.RemoveContainerResponse()

    def state_change(self, req: api.StateChangeEvent) -> api.Empty:
        if req.event == api.EVENTS["REMOVE_CONTAINER"] and req.container.id:
            self._stop(req.container.id, "removed")
        return api.Empty()

    # Synchronize -----------------------------------------------------------------------
    def synchronize(self, req: api.SynchronizeRequest) -> api.SynchronizeResponse:
        """Collect a split Synchronize (``more``); at the last part, answer with the updates."""
        self._sync_pods.extend(req.pods)
        self._sync_containers.extend(req.containers)
        if req.more:
            return api.SynchronizeResponse(more=True)
        pods, containers = self._sync_pods, self._sync_containers
        self._sync_pods, self._sync_containers = [], []
        return api.SynchronizeResponse(update=self.compute_sync(pods, containers))

    def compute_sync(self, pods: Sequence[api.PodSandbox], containers: Sequence[api.Container]
                     ) -> List[api.ContainerUpdate]:
        """Tracked containers back to their mixed set; asking ones admitted; nothing fails the whole.

        The runtime's current values are passed (what landed while no plugin was connected is
        kubelet's); a container whose message cannot be parsed is skipped and named.
        """
        by_id = {p.id: p for p in pods}
        facts: List[ContainerFacts] = []
        for ctr in containers:
            pod = by_id.get(ctr.pod_sandbox_id, api.PodSandbox())
            if not may_ask(compute_annotations(pod, ctr)):  # a tracked container always asks
                facts.append(ContainerFacts(ctr.id, {}, frozenset(), None, "", "", stopped=True))
                continue
            try:
                facts.append(compute_facts(pod, ctr))
            except HookError as exc:
                self.reporter.error(f"nri: Synchronize: container {ctr.id} ({pod.namespace}/{pod.name}/{ctr.name}): "
                                    f"{exc.kind}: {exc}")
                facts.append(ContainerFacts(ctr.id, {}, frozenset(), None, "", "", stopped=True))
        answer = self.engine.synchronize(facts)
        for update in answer.updates:
            self.reporter.info(f"nri: Synchronize: container {update.container_id}: cpus "
                               f"{format_cpulist(update.resources.cpus)}")
        return format_updates(answer.updates, ignore_failure=True)

    # periodic reconcile ------------------------------------------------------------------
    def reconcile(self) -> None:
        """Re-apply what kubelet rewrote directly (pod quotas): every record, both modes."""
        self.engine.reconcile()
