#!/usr/bin/env python3
"""The pool (shared_cpus: pool, exclusive_source dra): what a claim costs with N other containers to update.

1. **The plugin's answer** (``--sizes``, default 10, 100, 1000 other containers): the real plugin process
   (``python -m mixed_cpus_hook nri --socket PATH``) on a fake cgroup v1 node with 16 online CPUs
   (mixed_cpus_hook.testing.fakenode, on tmpfs), connected to this script over a unix socket; this script
   plays containerd (tests/unit/nri/peer.py). N standard containers (no claim, CPU shares 2) are created
   first, each with its cgroup; then ``--rounds`` times: a claimant's CreateContainer (a claim of one CPU:
   the reply carries an update for each of the N), its StartContainer (the plugin reads the N cgroups back)
   and its StopContainer (the claim back: N updates again), each timed from send to answer (p50, p99,
   max), with the size of the CreateContainer reply in bytes. NRI gives a plugin 2 s per request; the goal
   is p99 <= 100 ms at 1000. Each claim's CDI spec is written before its CreateContainer and removed after
   its removal, as the driver's prepare and unprepare do (a claim counts only when a spec holds it:
   core.cdi); ``--cdi-specs K`` puts K other claims' specs in the spec directory first (other prepared
   claims on the node: the plugin lists the directory and stats each spec at every claimant's request).
2. **The full CRI round trip** on a real containerd (``--cri-sizes``, default 10, 100; root, cgroup v1,
   2 CPUs, the integration tests' harness: tests/integration/containerd.py, pool_kube.py): N running
   standard containers (50 per pod: containerd's runc shim serves one pod), the plugin connected, then
   ``--cri-rounds`` times a claimant of CPU 1 created over CRI (kubelet's CreateContainer: containerd
   calls the plugin, then applies each of the N updates with its own runc call), started, stopped and
   removed; CreateContainer and StopContainer timed as kubelet sees them (p50, p99, max), the per-update
   cost derived. ``--containerd 1.7|2.1``.

Prints the figures and exits 0 (``--skip-cri`` for the plugin part alone, which needs no root).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from typing import Dict, List, Tuple

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(REPO, "hook"))
sys.path.insert(0, os.path.join(REPO, "tests", "unit", "nri"))
sys.path.insert(0, os.path.join(REPO, "tests", "integration"))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from nri_latency import summary  # noqa: E402 (the benchmark beside this file)
from peer import RuntimePeer, pod_and_container  # noqa: E402

from mixed_cpus_hook.frontends.nri.wire import api  # noqa: E402
from mixed_cpus_hook.testing.fakenode import FakeNode, container_rel  # noqa: E402

ONLINE = "0-15"
CLAIMED = "15"


# ---------------------------------------------------------------------------------------------
# 1. the plugin's answer


class PluginBench:
    """The plugin process on a fake node, and this script as its runtime."""

    def __init__(self, root: str, python: str, cdi_specs: int = 0) -> None:
        self.node = FakeNode(os.path.join(root, "node"), version=1, online=ONLINE)
        self.specs: List[str] = []
        for _ in range(cdi_specs):  # other claims prepared on the node (specs the plugin stats at each claim)
            self.node.write_cdi_claim(str(uuid.uuid4()), CLAIMED)
        self.config = self.node.write_config("0", {"shared_cpus": "pool", "exclusive_source": "dra",
                                                   "failure_policy": "fail", "allowed_namespaces": ["*"]})
        sock_path = os.path.join(root, "nri.sock")
        listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        listener.bind(sock_path)
        listener.listen(1)
        listener.settimeout(60)
        env = dict(os.environ, MIXED_CPUS_HOOK_CACHE_DIR=os.path.join(root, "cache"), MIXED_CPUS_HOOK_NO_SYSLOG="1",
                   PYTHONPATH=os.path.join(REPO, "hook"))
        env.pop("JOURNAL_STREAM", None)
        self.proc = subprocess.Popen([python, "-m", "mixed_cpus_hook", "--config", self.config, "nri",
                                      "--socket", sock_path], env=env, stderr=subprocess.DEVNULL)
        conn, _ = listener.accept()
        listener.close()
        self.peer = RuntimePeer(conn)
        self.peer.sock.settimeout(120)
        self.peer.handshake()

    def request(self, cid: str, pod_uid: str, claims: Tuple[str, ...] = ()) -> Tuple[object, object]:
        pod, ctr = pod_and_container(cid, name="c", pod_uid=pod_uid, cpus="", quota=None, ask=None, namespace="bench")
        for uid in claims:  # the driver's prepare: the spec that vouches for the variable (core.cdi)
            self.specs.append(self.node.write_cdi_claim(uid, CLAIMED))
        ctr.env.extend(["PATH=/bin"] + [f"DRA_CPUSET_{uid}={CLAIMED}" for uid in claims])
        ctr.linux.resources.cpu.shares.value = 2
        self.node.mkdir(container_rel("cgroupfs", pod_uid, cid), ONLINE)
        return pod, ctr

    def timed(self, method: str, msg: object) -> Tuple[float, int]:
        """(seconds from send to answer, the answer's payload size in bytes)."""
        start = time.perf_counter()
        answer = self.peer.call(method, msg)
        took = time.perf_counter() - start
        if answer.code != 0:
            raise RuntimeError(f"{method}: error {answer.code}: {answer.message}")
        return took, len(answer.payload or b"")

    def populate(self, count: int) -> None:
        for _ in range(count):
            cid, uid = uuid.uuid4().hex * 2, str(uuid.uuid4())
            pod, ctr = self.request(cid, uid)
            self.timed("CreateContainer", api.CreateContainerRequest(pod=pod, container=ctr))

    def claim_round(self) -> Dict[str, Tuple[float, int]]:
        cid, uid = uuid.uuid4().hex * 2, str(uuid.uuid4())
        pod, ctr = self.request(cid, uid, claims=(str(uuid.uuid4()),))
        out = {"CreateContainer": self.timed("CreateContainer", api.CreateContainerRequest(pod=pod, container=ctr))}
        start = api.StateChangeEvent(event=api.EVENTS["START_CONTAINER"], pod=pod, container=api.Container(
            id=cid, name="c"))
        out["StartContainer"] = self.timed("StateChange", start)
        out["StopContainer"] = self.timed("StopContainer", api.StopContainerRequest(container=api.Container(id=cid)))
        self.timed("StateChange", api.StateChangeEvent(event=api.EVENTS["REMOVE_CONTAINER"],
                                                      container=api.Container(id=cid)))
        while self.specs:  # the driver's unprepare
            os.unlink(self.specs.pop())
        return out

    def close(self) -> None:
        self.peer.sock.close()
        self.proc.terminate()
        self.proc.wait(30)


def bench_plugin(sizes: List[int], rounds: int, python: str, cdi_specs: int = 0) -> None:
    print(f"1. the plugin's answers (real process {python} -m mixed_cpus_hook nri, unix socket, fake cgroup v1 node "
          f"on tmpfs, {ONLINE} online; a claim of CPU {CLAIMED} per round, {rounds} rounds; {cdi_specs} other "
          "claims' CDI specs)")
    base = "/dev/shm" if os.path.isdir("/dev/shm") else None
    populated = 0
    root = tempfile.mkdtemp(prefix="nri-pool-bench-", dir=base)
    bench = None
    try:
        bench = PluginBench(root, python, cdi_specs)
        for size in sorted(sizes):
            bench.populate(size - populated)
            populated = size
            seen: Dict[str, List[float]] = {}
            sizes_seen: List[int] = []
            for _ in range(rounds):
                for event, (took, nbytes) in bench.claim_round().items():
                    seen.setdefault(event, []).append(took)
                    if event == "CreateContainer":
                        sizes_seen.append(nbytes)
            print(f" {size} other containers to update: CreateContainer reply {statistics.median(sizes_seen):.0f} bytes "
                  f"({statistics.median(sizes_seen) / size:.1f} per update)")
            for event, times in seen.items():
                print(summary(event, times))
    finally:
        if bench is not None:
            bench.close()
        shutil.rmtree(root, ignore_errors=True)


# ---------------------------------------------------------------------------------------------
# 2. the full CRI round trip on a real containerd


def bench_cri(sizes: List[int], rounds: int, version: str) -> None:
    import containerd as ctd_mod  # noqa: PLC0415 (the integration tests' harness)
    from cri_kube import Kube, Plugin  # noqa: PLC0415
    from helpers import hook_executable  # noqa: PLC0415
    from pool_kube import Claims, PoolKube  # noqa: PLC0415

    print(f"2. the full CRI round trip (containerd {version}, runc, cgroup v1, a claim of CPU 1 per round, "
          f"{rounds} rounds; the plugin {hook_executable()})")
    tmp = tempfile.mkdtemp(prefix="nri-pool-cri-")
    top = f"/nri-pool-bench-{os.getpid()}"
    try:
        with ctd_mod.running(version, cdi=True, owned_cgroups=[top]) as ctd:
            ctd.cri.timeout = 60 + 0.1 * max(sizes)  # containerd applies one update per container inside the call
            kube = Kube(ctd, top, os.path.join(tmp, "logs"))
            k = PoolKube(kube, Claims(ctd.cdi_dir))
            config = os.path.join(tmp, "config.yaml")
            with open(config, "w", encoding="utf-8") as f:
                f.write(f"shared_cpus: pool\nexclusive_source: dra\nstate_dir: {tmp}/state\nfailure_policy: fail\n"
                        f"kubelet_state_file: {tmp}/none\ncdi_spec_dirs: [{json.dumps(ctd.cdi_dir)}]\n")
            plugin = Plugin(config, ctd.nri_sock, os.path.join(tmp, "plugin.log"), ctd,
                            env={"MIXED_CPUS_HOOK_CACHE_DIR": os.path.join(tmp, "cache")})
            plugin.start()
            try:
                running = 0
                pod = None
                for size in sorted(sizes):
                    t0 = time.monotonic()
                    while running < size:
                        if running % 50 == 0:
                            pod = k.pod(f"std{running // 50}")
                        k.container(pod, f"s{running}")
                        running += 1
                    made = time.monotonic() - t0
                    cri_rounds(k, size, rounds, made)
            finally:
                problems = kube.cleanup()
                plugin.stop()
                if problems:
                    print(f"  cleanup: {problems}")
    finally:
        for mount in sorted(os.listdir("/sys/fs/cgroup")):  # every hierarchy runc made the pods' cgroups in
            path = f"/sys/fs/cgroup/{mount}{top}"
            for cur, _dirs, _files in os.walk(path, topdown=False):  # deepest first
                try:
                    os.rmdir(cur)
                except OSError as exc:
                    print(f"  cleanup: {cur}: {exc}")
        shutil.rmtree(tmp, ignore_errors=True)


def cri_rounds(k, size: int, rounds: int, made: float) -> None:
    creates, stops = [], []
    for i in range(rounds):
        claim = k.claims.prepare("1")
        pod = k.pod(f"claimant{size}-{i}")
        start = time.perf_counter()
        cid = k.container(pod, "claimant", claims=(claim,), start=False)
        creates.append(time.perf_counter() - start)
        k.kube.cri.start(cid)
        start = time.perf_counter()
        k.kube.cri.stop(cid, timeout=0)
        stops.append(time.perf_counter() - start)
        k.kube.cri.remove(cid)
        k.kube.cri.stop_pod(pod.id)
        k.kube.cri.remove_pod(pod.id)
        k.claims.unprepare(claim)
    per = (statistics.median(creates) / size) * 1000
    print(f" {size} running containers to update (made in {made:.0f} s): ~{per:.1f} ms per update in CreateContainer")
    print(summary("CRI CreateContainer", creates))
    print(summary("CRI StopContainer", stops))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--sizes", default="10,100,1000", help="other containers for the plugin's answer times")
    ap.add_argument("--rounds", type=int, default=100)
    ap.add_argument("--cri-sizes", default="10,100", help="running containers for the CRI round trip")
    ap.add_argument("--cri-rounds", type=int, default=20)
    ap.add_argument("--containerd", default="1.7", choices=("1.7", "2.1"))
    ap.add_argument("--skip-cri", action="store_true")
    ap.add_argument("--python", default=sys.executable)
    ap.add_argument("--cdi-specs", type=int, default=0, help="other claims' CDI specs in the spec directory")
    args = ap.parse_args()
    bench_plugin([int(s) for s in args.sizes.split(",")], args.rounds, args.python, args.cdi_specs)
    if not args.skip_cri:
        if os.geteuid() != 0:
            print("2. the CRI round trip needs root (it runs containerd): skipped")
        else:
            bench_cri([int(s) for s in args.cri_sizes.split(",")], args.cri_rounds, args.containerd)
    return 0


if __name__ == "__main__":
    sys.exit(main())
