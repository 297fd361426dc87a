"""Hook mode's events: ``apply`` (createRuntime) gives an asking container exclusive ∪ shared and
raises the quotas; ``release`` (poststop) gives its pod's share back.

Standard library only: CRI-O runs this on every start of an asking container.
"""

from __future__ import annotations

import os

from ..core.model import Identity, Outcome
from ..core.request import CONTAINER_NAME, POD_NAME, POD_NAMESPACE, compute_request
from ..node import cgroupfs as cg
from ..node.config import Config
from ..node.facts import read_node_facts
from ..node.log import Reporter
from ..node.oci import State, load_spec
from ..store.records import load_container, load_pod, mark_pending, state_lock
from .common import check_pod_uid, pod_key_of
from .converge import Target, converge

TYPE_CHECKING = False
if TYPE_CHECKING:  # typing costs milliseconds on every container start
    from typing import Any, Mapping


def read_request(annotations: Mapping[str, str], config: Config, reporter: Reporter, cid: str) -> Any:
    """The container's request (core.request); None, with the reason under -v, when it does not ask."""
    where = f"pod {annotations.get(POD_NAMESPACE, '?')}/{annotations.get(POD_NAME, '?')}"
    request = compute_request(annotations, config.annotation_prefix, config.allowed_namespaces, where,
                              config_where=config.source)
    if request is None and reporter.verbose:
        name = annotations.get(CONTAINER_NAME)
        reporter.info(f"container {cid}: skipped: " + (
            "no io.kubernetes.container.name annotation" if not name else
            f"no annotation {config.annotation_prefix}/{name} for it"))
    return request


def apply_state(state: State, config: Config, reporter: Reporter, dry_run: bool = False) -> Outcome:
    """The createRuntime hook: give an asking container exclusive ∪ shared and raise quotas."""
    spec = load_spec(state.bundle)
    annotations = state.annotations if state.has_annotations else spec.annotations
    request = read_request(annotations, config, reporter, state.id)
    if request is None:
        return Outcome("skipped")
    node = read_node_facts(config)
    if node.checkpoint_note:
        reporter.warning(node.checkpoint_note)
    spec_where = os.path.join(state.bundle, "config.json")
    dirs, _how = cg.locate_container(node.layout, state.id, state.pid, spec.cgroups_path, config.proc_root, spec_where)
    pod = cg.find_pod(node.layout, dirs)
    check_pod_uid(pod, request.pod_uid, spec_where)
    identity = Identity(request.namespace, request.pod, request.container, request.pod_uid)
    key = pod_key_of(pod)

    def target() -> Target:
        prev = load_container(config.state_dir, state.id)
        prev_pod = load_pod(config.state_dir, key) if key else None
        return Target(state.id, identity, dirs, pod, prev, prev_pod, spec.cpus,
                      adding=True)

    if dry_run:
        return converge(config.state_dir, node, target(), reporter, "apply", dry_run=True)
    with state_lock(config.state_dir):
        t = target()
        if t.prev is not None and t.prev.mode == "nri":
            reporter.emit("info", f"container {state.id}: handled by the NRI plugin; the hook does nothing",
                          to_stream=False)
            return Outcome("skipped", ("handled by the NRI plugin",))
        outcome = converge(config.state_dir, node, t, reporter, "apply")
    if outcome.status in ("not-applicable", "conflict"):
        reporter.warning(outcome.lines[0])
        return Outcome(outcome.status)  # said once, on stderr and in the journal; nothing was written
    # The watch unit is started by mixed-cpus-hook-sync.service, never from here.
    mark_pending(config.state_dir, state.id)
    return outcome


def release_state(state: State, config: Config, reporter: Reporter) -> Outcome:
    """The poststop hook (its module is loaded here: a container start does not need it)."""
    from .release import release_container

    return release_container(state.id, config.state_dir, config.cgroup_root, reporter)

