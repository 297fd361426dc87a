#!/usr/bin/env python3
"""Run ``mixed-cpus-hook nri`` doing only the Go reference plugin's work: a measuring device, never a product mode.

``benchmarks/nri_reference.py --go-work`` runs the plugin through this (the reference tool's
NRI_REFERENCE_WRAP, with the plugin's own interpreter) to measure what the interpreter costs for
exactly the work the Go plugin does (the tool's ``kit/gosrc/src/perfanchor/gostub/main.go``):
the product's own event loop, ttrpc, protobuf messages and cpulist functions, but handlers that,
like the Go plugin's, check the annotation and the namespace, read and raise the pod's
``cpu.cfs_quota_us`` (one open, read, write each), answer cpus = requested + shared, quota + the
share and the two ``OPENSHIFT_*`` variables, remember the container in a dict and give the share
back at StopContainer/RemoveContainer. Everything the product does beyond that is left out: no
record, no state lock, no kubelet checkpoint, no check of the runtime's values or of the cgroup
paths, no read-back, no log line. Its ratios to the Go plugin are the floor of a Python plugin
for this job on this framework; the product's ratios above them are what its duties cost.

    PYTHON nri_go_work.py MIXED-CPUS-HOOK-ARGV...

The handlers are patched on the class before the plugin builds its method table.
"""

from __future__ import annotations

import os
import sys
from typing import Any, Dict, List, Tuple


def install() -> Dict[str, Tuple[str, int]]:
    """Replace the four container handlers with the Go plugin's work; returns the tracked containers
    (id -> (pod quota file, share)), the Go plugin's map."""
    from mixed_cpus_hook.core.cpuset import format_cpulist, parse_cpulist
    from mixed_cpus_hook.frontends.nri import handlers as h
    from mixed_cpus_hook.frontends.nri import plugin
    from mixed_cpus_hook.frontends.nri.wire import api
    from mixed_cpus_hook.frontends.nri.wire.protodesc import build_file, load_classes

    # The Go plugin checks the annotation at UpdateContainer too: decoded with the pod's and the
    # container's annotations (the product decodes only their names there, api.BY_REF).
    whole = load_classes(build_file("go_work_read.proto", api.PACKAGE,
                                    api.compute_read_view(api.MESSAGES, api.READ_FIELDS), api.ENUMS))
    plugin.METHODS["UpdateContainer"] = (whole["UpdateContainerRequest"], "update_container")

    tracked: Dict[str, Tuple[str, int]] = {}

    def add_quota(path: str, delta: int) -> None:
        with open(path, "rb") as f:
            quota = int(f.read().strip())
        if quota > 0:  # an unlimited pod: nothing to raise
            with open(path, "wb") as f:
                f.write(str(quota + delta).encode())

    def asks(self: Any, pod: Any, ctr: Any) -> bool:
        allowed = self.config.allowed_namespaces
        if allowed and "*" not in allowed and pod.namespace not in allowed:
            return False
        key = f"{self.config.annotation_prefix}/{ctr.name}"
        return any(e.key == key and e.value == "enable" for e in pod.annotations)

    known: List[Tuple[frozenset, str]] = []

    def shared(self: Any) -> Tuple[frozenset, str]:
        """The shared CPUs, read once (the Go plugin takes them from its command line)."""
        if not known:
            from mixed_cpus_hook.node.facts import read_node_facts

            cpus = read_node_facts(self.config).shared
            known.append((cpus, format_cpulist(cpus)))
        return known[0]

    def create_container(self: Any, req: Any) -> Any:
        pod, ctr = req.pod, req.container
        if not asks(self, pod, ctr):
            return api.CreateContainerResponse()
        cpus, shared_text = shared(self)
        cpu = ctr.linux.resources.cpu
        reply = api.CreateContainerResponse()
        adj = reply.adjust
        adj.linux.resources.cpu.cpus = format_cpulist(parse_cpulist(cpu.cpus, "cpus") | cpus)
        period = cpu.period.value or 100000
        share = len(cpus) * period
        if cpu.quota.value > 0:
            path = os.path.join(self.config.cgroup_root, "cpu", pod.linux.cgroup_parent.lstrip("/"), "cpu.cfs_quota_us")
            add_quota(path, share)
            adj.linux.resources.cpu.quota.value = cpu.quota.value + share
            tracked[ctr.id] = (path, share)
        adj.env.add(key="OPENSHIFT_ISOLATED_CPUS", value=cpu.cpus)
        adj.env.add(key="OPENSHIFT_SHARED_CPUS", value=shared_text)
        return reply

    def update_container(self: Any, req: Any) -> Any:
        if not asks(self, req.pod, req.container):
            return api.UpdateContainerResponse()
        cpus, _ = shared(self)
        res = req.linux_resources.cpu
        reply = api.UpdateContainerResponse()
        update = reply.update.add(container_id=req.container.id)
        update.linux.resources.cpu.cpus = format_cpulist(parse_cpulist(res.cpus, "cpus") | cpus)
        if res.quota.value > 0:
            update.linux.resources.cpu.quota.value = res.quota.value + len(cpus) * (res.period.value or 100000)
        return reply

    def release(cid: str) -> None:
        held = tracked.pop(cid, None)
        if held is not None:
            try:
                add_quota(held[0], -held[1])
            except OSError as exc:
                print(f"nri_go_work: giving back the pod share of {cid}: {exc}", file=sys.stderr)

    def stop_container(self: Any, req: Any) -> Any:
        release(req.container.id)
        return api.StopContainerResponse()

    def remove_container(self: Any, req: Any) -> Any:
        release(req.container.id)
        return api.RemoveContainerResponse()

    h.Handlers.create_container = create_container
    h.Handlers.update_container = update_container
    h.Handlers.stop_container = stop_container
    h.Handlers.remove_container = remove_container
    return tracked


def main(argv: List[str]) -> int:
    from nri_memory_records import run_plugin  # beside this script

    return run_plugin(argv, install, __doc__.split("\n\n")[2].strip())


if __name__ == "__main__":
    sys.exit(main(sys.argv))
