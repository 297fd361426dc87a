#!/usr/bin/env python3
"""What one NRI request costs the plugin's own thread, and where: CPU time per event, in-process.

The NRI handlers (the real ``Handlers`` and engine, as ``mixed-cpus-hook nri`` builds them) are
called directly with the requests containerd 1.7 sends for a container of an asking pod (the
same fields and annotations, captured from containerd by nri-reference), on a real cgroup v1 pod
(root: a pod cgroup made under /sys/fs/cgroup/{cpuset,cpu}, removed at the end). Each event's
thread CPU time (``time.thread_time_ns``) is measured, warm, 400 cycles of CreateContainer,
UpdateContainer (kubelet's rewrite) and StopContainer, in three setups:

* ``not asking``: the same CreateContainer for a pod that does not ask: decoding, the
  annotations, and the answer; the floor of any request this plugin handles;
* ``state on tmpfs``: the records under a tmpfs directory, as on a node (/run is a tmpfs on a
  systemd host, and the DaemonSet mounts the host's /run/mixed-cpus-hook);
* ``state on disk``: the records under the disk's /tmp (nri-reference keeps the plugin's state
  in its temporary directory, on this machine's ext4): every record written is a file created
  and renamed on a journaled file system.

Prints p50 and p90 in microseconds per event and setup; exits 0 once it ran, 2 without root or
cgroup v1 cpuset+cpu. The socket, the ttrpc framing and the runtime's own time are not in these
figures (benchmarks/nri_reference.py measures the whole answer beside a Go plugin).
"""

from __future__ import annotations

import io
import os
import shutil
import statistics
import sys
import tempfile
import time
import uuid
from typing import Dict, List, Optional, Tuple

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(REPO, "hook"))

from mixed_cpus_hook.frontends.nri.handlers import Handlers  # noqa: E402
from mixed_cpus_hook.frontends.nri.plugin import defer_writes, settle_memory  # noqa: E402
from mixed_cpus_hook.frontends.nri.wire import api  # noqa: E402
from mixed_cpus_hook.node.config import load_config  # noqa: E402
from mixed_cpus_hook.node.log import Reporter  # noqa: E402

CG = "/sys/fs/cgroup"
PREFIX = "mixed-cpus.openshift.io"
CYCLES = 400
WARMUP = 50


def requests(top: str, uid: str, cid: str, ask: bool) -> Dict[str, bytes]:
    """CreateContainer, UpdateContainer and StopContainer as containerd 1.7's NRI sends them."""
    sandbox = uuid.uuid4().hex * 2
    pod = api.PodSandbox(id=sandbox, name="perf", uid=uid, namespace="perf", pid=4242)
    for k, v in (("io.kubernetes.pod.uid", uid), ("io.kubernetes.pod.name", "perf"),
                 ("io.kubernetes.pod.namespace", "perf"), ("io.cri-containerd.kind", "sandbox")):
        pod.labels[k] = v
    if ask:
        pod.annotations[f"{PREFIX}/app"] = "enable"
    for k, v in (("io.kubernetes.cri.sandbox-uid", uid), ("io.kubernetes.cri.sandbox-name", "perf"),
                 ("io.kubernetes.cri.sandbox-namespace", "perf"), ("io.kubernetes.cri.sandbox-log-directory",
                                                                   "/var/log/pods/perf_perf_" + uid),
                 ("io.kubernetes.cri.sandbox-id", sandbox), ("io.kubernetes.cri.container-type", "sandbox")):
        pod.annotations[k] = v
    pod.linux.cgroup_parent = f"/{top}/pod{uid}"
    pod.linux.cgroups_path = f"/{top}/pod{uid}/{sandbox}"
    pod.linux.resources.cpu.shares.value = 2
    ctr = api.Container(id=cid, pod_sandbox_id=sandbox, name="app", args=["/bin/sh", "-c", "sleep inf"],
                        env=["PATH=/bin", "HOSTNAME=perf"])
    for k, v in (("io.kubernetes.pod.uid", uid), ("io.kubernetes.pod.name", "perf"),
                 ("io.kubernetes.pod.namespace", "perf"), ("io.kubernetes.container.name", "app"),
                 ("io.cri-containerd.kind", "container")):
        ctr.labels[k] = v
    for k, v in (("io.kubernetes.cri.sandbox-uid", uid), ("io.kubernetes.cri.sandbox-name", "perf"),
                 ("io.kubernetes.cri.sandbox-namespace", "perf"), ("io.kubernetes.cri.sandbox-id", sandbox),
                 ("io.kubernetes.cri.image-name", "busybox:1"), ("io.kubernetes.cri.container-type", "container"),
                 ("io.kubernetes.cri.container-name", "app")):
        ctr.annotations[k] = v
    cpu = ctr.linux.resources.cpu
    cpu.shares.value, cpu.quota.value, cpu.period.value, cpu.cpus = 1024, 100000, 100000, "1"
    ctr.linux.cgroups_path = f"/{top}/pod{uid}/{cid}"
    update = api.UpdateContainerRequest(pod=pod, container=ctr)
    update.linux_resources.cpu.cpus = "1"
    update.linux_resources.cpu.quota.value = 100000
    update.linux_resources.cpu.period.value = 100000
    return {"CreateContainer": api.CreateContainerRequest(pod=pod, container=ctr).SerializeToString(),
            "UpdateContainer": update.SerializeToString(),
            "StopContainer": api.StopContainerRequest(pod=pod, container=ctr).SerializeToString()}


class Pod:
    """A kubelet-like pod cgroup (cpuset, and cpu with a quota of one CPU) under a top cgroup."""

    def __init__(self) -> None:
        self.top = f"mch-request-cost-{os.getpid()}"
        self.uid = str(uuid.uuid4())
        self.made: List[str] = []
        for hier in ("cpuset", "cpu"):
            for rel in (self.top, f"{self.top}/pod{self.uid}"):
                d = f"{CG}/{hier}/{rel}"
                os.mkdir(d)
                self.made.append(d)
                if hier == "cpuset":
                    for name in ("cpuset.cpus", "cpuset.mems"):
                        with open(f"{CG}/cpuset/{name}", encoding="ascii") as src, \
                                open(f"{d}/{name}", "w", encoding="ascii") as dst:
                            dst.write(src.read())
        with open(f"{CG}/cpu/{self.top}/pod{self.uid}/cpu.cfs_quota_us", "w", encoding="ascii") as f:
            f.write("100000")

    def remove(self) -> None:
        for d in reversed(self.made):
            os.rmdir(d)


def measure(pod: Pod, state_base: str, ask: bool) -> Dict[str, List[int]]:
    state = tempfile.mkdtemp(prefix="mch-request-cost-", dir=state_base)
    try:
        config = os.path.join(state, "config.yaml")
        with open(config, "w", encoding="utf-8") as f:
            f.write(f'shared_cpus: "0"\nstate_dir: {state}/state\ncgroup_root: {CG}\nfailure_policy: fail\n'
                    f'allowed_namespaces: ["perf"]\nkubelet_state_file: {state}/none/cpu_manager_state\n')
        handlers = Handlers(load_config(config, cache_dir=os.path.join(state, "cache")), Reporter(stream=io.StringIO(), sink=None))
        defer_writes(handlers.engine)  # as the plugin runs it: records saved once the answer is sent (untimed below)
        calls = (("CreateContainer", handlers.create_container), ("UpdateContainer", handlers.update_container),
                 ("StopContainer", handlers.stop_container))
        read = api.READ
        cid = uuid.uuid4().hex * 2
        wire = requests(pod.top, pod.uid, cid, ask)
        out: Dict[str, List[int]] = {m: [] for m, _ in calls}
        for n in range(CYCLES + WARMUP):
            for method, call in (calls[:1] if not ask else calls):
                start = time.thread_time_ns()
                call(read[method + "Request"].FromString(wire[method])).SerializeToString()
                took = time.thread_time_ns() - start
                handlers.after_answer()  # the records saved once the answer is sent: not the answer's time
                if n >= WARMUP:
                    out[method].append(took)
        return {m: v for m, v in out.items() if v}
    finally:
        shutil.rmtree(state, ignore_errors=True)


def fs_type(path: str) -> str:
    best: Tuple[int, str] = (-1, "?")
    with open("/proc/self/mounts", encoding="utf-8") as f:
        for line in f:
            parts = line.split()
            mnt, kind = parts[1], parts[2]
            if (path == mnt or path.startswith(mnt.rstrip("/") + "/")) and len(mnt) > best[0]:
                best = (len(mnt), kind)
    return best[1]


def tmpfs_dir() -> Optional[str]:
    for candidate in ("/dev/shm", "/run"):
        if os.path.isdir(candidate) and fs_type(candidate) == "tmpfs":
            return candidate
    return None


def main() -> int:
    if os.geteuid() != 0 or not os.path.isfile(f"{CG}/cpuset/cpuset.cpus") or not os.path.isdir(f"{CG}/cpu"):
        print("nri_request_cost: needs root and cgroup v1 cpuset and cpu under /sys/fs/cgroup")
        return 2
    setups = [("not asking", tmpfs_dir() or "/tmp", False)]
    if tmpfs_dir():
        setups.append((f"state on {fs_type(tmpfs_dir() or '')} ({tmpfs_dir()})", tmpfs_dir() or "", True))
    setups.append((f"state on {fs_type('/tmp')} (/tmp)", "/tmp", True))
    settle_memory()  # as the plugin does once started (compiled record constructors, gc.freeze)
    pod = Pod()
    try:
        print(f"thread CPU per event, us (p50 / p90), {CYCLES} cycles after {WARMUP}, Python "
              f"{sys.version.split()[0]}, real cgroup v1 pod")
        print(f"{'setup':28} {'CreateContainer':>17} {'UpdateContainer':>17} {'StopContainer':>17}")
        for name, base, ask in setups:
            res = measure(pod, base, ask)
            cols = []
            for method in ("CreateContainer", "UpdateContainer", "StopContainer"):
                v = sorted(res.get(method, []))
                cols.append(f"{statistics.median(v) / 1e3:7.0f} / {v[int(len(v) * 0.9)] / 1e3:5.0f}" if v else "-")
            print(f"{name:28} " + " ".join(f"{c:>17}" for c in cols))
    finally:
        pod.remove()
    return 0


if __name__ == "__main__":
    sys.exit(main())
