#!/usr/bin/env python3
"""NRI mode: how fast the plugin answers, how much memory it keeps, what it costs idle.

What runs: ``mixed-cpus-hook nri --socket PATH`` as its own process (the real command, the
real handlers and engine) on a fake node (mixed_cpus_hook.testing.fakenode: cgroup v1 or v2 files in
a temporary directory, so no root is needed), connected to this script over a real unix
socket; this script plays the runtime (the in-test peer of tests/unit/nri/peer.py): it
registers the plugin, configures and synchronizes it, then

* ``--requests`` CreateContainer requests for asking containers (distinct pods), then as many
  UpdateContainer requests (kubelet's cpuset-only rewrite), then RemoveContainer for each:
  the time from sending a request to its answer, p50/p99/max for each kind;
* create/remove cycles: the plugin's resident memory (VmRSS) after ``--cycles-warm`` and after
  ``--cycles`` cycles (no growth expected);
* ``--idle`` seconds without a request: the plugin's CPU time (utime + stime) meanwhile.

``--checkpoint``: kubelet's CPU manager checkpoint is kept as kubelet keeps it on a node with the
static policy, written (replaced whole, with its checksum) with a container's entry before its
CreateContainer and without it after its RemoveContainer, outside the timed calls. Every creation
then meets a changed checkpoint: the plugin reads it again (its checksum too), lists the containers
it tracks and decides again those whose entries changed; the CreateContainer figures are printed
per quarter of the live containers (the first quarter meets few, the last nearly ``--requests``).

Prints the figures and exits 0. The in-process path (fake files on tmpfs) makes this the
plugin's own cost, not a real kernel's cgroup writes.
"""

from __future__ import annotations

import argparse
import os
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from typing import Dict, List, Optional

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(REPO, "hook"))
sys.path.insert(0, os.path.join(REPO, "tests", "unit", "nri"))

from peer import RuntimePeer, create_request  # noqa: E402

from mixed_cpus_hook.frontends.nri.wire import api  # noqa: E402
from mixed_cpus_hook.testing.fakenode import FakeNode  # noqa: E402

CLK_TCK = os.sysconf("SC_CLK_TCK")
MAX_LIVE = 1000


def rss_kib(pid: int) -> int:
    with open(f"/proc/{pid}/status", encoding="ascii") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    raise RuntimeError("no VmRSS")


def cpu_seconds(pid: int) -> float:
    with open(f"/proc/{pid}/stat", encoding="ascii") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / CLK_TCK  # utime, stime (fields 14, 15)


def pct(values: List[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(round(q * (len(ordered) - 1))))]


def summary(name: str, seconds: List[float]) -> str:
    ms = [s * 1000 for s in seconds]
    return (f"{name:<16} n={len(ms):<5} p50 {statistics.median(ms):7.3f} ms   p99 {pct(ms, 0.99):7.3f} ms   "
            f"max {max(ms):7.3f} ms")


class Bench:
    def __init__(self, root: str, version: int, python: str, checkpoint: bool = False, lead: float = 0.0) -> None:
        # One exclusive CPU per live container (the plugin refuses, as kubelet never does, two
        # containers with one exclusive CPU): a node with enough of them.
        self.node = FakeNode(os.path.join(root, "node"), version=version, online=f"0-{MAX_LIVE + 1}")
        self.config = self.node.write_config("0-1")
        # kubelet's checkpoint (--checkpoint): pod uid -> {container name: cpus} of the live containers;
        # there before the plugin starts, as on a node (the plugin watches its directory from its start)
        self.entries: Optional[Dict[str, Dict[str, str]]] = {} if checkpoint else None
        if self.entries is not None:
            self.node.write_checkpoint(self.entries)
        self.lead = lead
        self.sock_path = os.path.join(root, "nri.sock")
        listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        listener.bind(self.sock_path)
        listener.listen(1)
        listener.settimeout(60)
        env = dict(os.environ, MIXED_CPUS_HOOK_CACHE_DIR=os.path.join(root, "cache"),
                   PYTHONPATH=os.path.join(REPO, "hook"))
        env.pop("JOURNAL_STREAM", None)
        self.proc = subprocess.Popen([python, "-m", "mixed_cpus_hook", "--config", self.config, "nri",
                                      "--socket", self.sock_path], env=env, stderr=subprocess.DEVNULL)
        conn, _ = listener.accept()
        listener.close()
        self.peer = RuntimePeer(conn)
        self.peer.handshake()
        self._uids: Dict[str, str] = {}
        self._cpus: Dict[str, str] = {}
        self._free = [str(c) for c in range(MAX_LIVE + 1, 1, -1)]

    def new_container(self) -> str:
        cid = uuid.uuid4().hex + uuid.uuid4().hex
        uid = str(uuid.uuid4())
        cpu = self._cpus[cid] = self._free.pop()
        self.node.add_container(cid, pod_uid=uid, cpus=cpu, quota=100000, pod_quota=100000)
        self._uids[cid] = uid
        return cid

    def timed(self, method: str, msg: object, reply: object) -> float:
        start = time.perf_counter()
        self.peer.call(method, msg, reply)
        return time.perf_counter() - start

    def create(self, cid: str) -> float:
        if self.entries is not None:  # kubelet allocated the CPUs before it asks for the container
            self.entries[self._uids[cid]] = {"app": self._cpus[cid]}
            self.node.write_checkpoint(self.entries)
            if self.lead:  # the sandbox, the image and the container made between (--checkpoint-lead)
                time.sleep(self.lead)
        return self.timed("CreateContainer", create_request(cid, pod_uid=self._uids[cid], cpus=self._cpus[cid],
                                                          quota=100000), api.CreateContainerResponse)

    def update(self, cid: str) -> float:
        req = api.UpdateContainerRequest(container=api.Container(id=cid))
        req.linux_resources.cpu.cpus = self._cpus[cid]
        return self.timed("UpdateContainer", req, api.UpdateContainerResponse)

    def remove(self, cid: str) -> float:
        event = api.StateChangeEvent(event=api.EVENTS["REMOVE_CONTAINER"], container=api.Container(id=cid))
        took = self.timed("StateChange", event, api.Empty)
        uid = self._uids.pop(cid)
        if self.entries is not None:  # kubelet forgets the removed container's CPUs
            del self.entries[uid]
            self.node.write_checkpoint(self.entries)
        rel = f"kubepods/pod{uid}"
        self._free.append(self._cpus.pop(cid))
        for hier in (("cpuset", "cpu,cpuacct") if self.node.version == 1 else ("",)):
            shutil.rmtree(os.path.join(self.node.cgroup_root, hier, rel), ignore_errors=True)
        return took

    def close(self) -> None:
        self.peer.sock.close()
        self.proc.terminate()
        self.proc.wait(30)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--requests", type=int, default=300, help="CreateContainer/UpdateContainer requests (>= 200)")
    ap.add_argument("--cycles-warm", type=int, default=100)
    ap.add_argument("--cycles", type=int, default=1000)
    ap.add_argument("--idle", type=float, default=5.0)
    ap.add_argument("--cgroup", type=int, choices=(1, 2), default=1)
    ap.add_argument("--python", default=sys.executable)
    ap.add_argument("--checkpoint", action="store_true",
                    help="kubelet's checkpoint kept as on a static-policy node (an entry per live container)")
    ap.add_argument("--checkpoint-lead", type=float, default=0.0, metavar="MS",
                    help="with --checkpoint: milliseconds between kubelet's write of an entry and the "
                         "CreateContainer it was made for (default 0: at once)")
    args = ap.parse_args()
    if args.requests > MAX_LIVE:
        ap.error(f"--requests: at most {MAX_LIVE}")
    base = "/dev/shm" if os.path.isdir("/dev/shm") else None
    root = tempfile.mkdtemp(prefix="nri-bench-", dir=base)
    bench = None
    try:
        bench = Bench(root, args.cgroup, args.python, args.checkpoint, args.checkpoint_lead / 1000)
        ids = [bench.new_container() for _ in range(args.requests)]
        creates = [bench.create(cid) for cid in ids]
        updates = [bench.update(cid) for cid in ids]
        removes = [bench.remove(cid) for cid in ids]
        print(f"plugin: {args.python} -m mixed_cpus_hook nri (pid {bench.proc.pid}), fake cgroup v{args.cgroup} "
              f"node on {base or 'disk'}, over a unix socket"
              + (", kubelet's checkpoint written around each container" if args.checkpoint else "")
              + (f" ({args.checkpoint_lead:g} ms before its CreateContainer)" if args.checkpoint and args.checkpoint_lead else ""))
        print(summary("CreateContainer", creates))
        quarter = len(creates) // 4
        for q in range(4):
            print(summary(f"  {q * quarter}-{(q + 1) * quarter} live", creates[q * quarter:(q + 1) * quarter]))
        print(summary("UpdateContainer", updates))
        print(summary("RemoveContainer", removes))
        rss = {}
        for n in range(1, args.cycles + 1):
            cid = bench.new_container()
            bench.create(cid)
            bench.remove(cid)
            if n in (args.cycles_warm, args.cycles):
                rss[n] = rss_kib(bench.proc.pid)
        print(f"RSS after {args.cycles_warm} create/remove cycles: {rss[args.cycles_warm]} KiB; after {args.cycles}: "
              f"{rss[args.cycles]} KiB (growth {rss[args.cycles] - rss[args.cycles_warm]:+d} KiB)")
        before = cpu_seconds(bench.proc.pid)
        time.sleep(args.idle)
        idle = cpu_seconds(bench.proc.pid) - before
        print(f"CPU time while idle for {args.idle:g} s: {idle * 1000:.0f} ms (clock tick {1000 / CLK_TCK:.0f} ms)")
    finally:
        if bench is not None:
            bench.close()
        shutil.rmtree(root, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
