#!/usr/bin/env python3
"""The NRI plugin's answer times, resident memory over create/remove cycles, and idle CPU time.

The real plugin process (``mixed-cpus-hook nri --socket PATH``) connects to a unix socket this
script listens on; the runtime's end is tests/unit/nri/peer.py (RegisterPlugin answered,
Configure, Synchronize, then requests over the multiplexed ttrpc connection, as containerd's
NRI adaptation sends them). The node is real: a kubelet-like pod cgroup (cgroup v1 cpuset and
cpu, quota 200000) and, per container, its cgroup made before the requests (cpuset "1", quota
100000), so the engine writes the pod quota and reads real files, as with containerd.

1. Answer times: ``--requests`` cycles of CreateContainer (an asking container: the adjustment
   and the pod quota raise), UpdateContainer (kubelet's cpuset rewrite "1", rewritten) and
   StopContainer + StateChange REMOVE_CONTAINER (the pod's share back, records forgotten); each
   request timed from send to answer; p50, p99, max.
2. Memory: VmRSS of the plugin after the handshake, after the answer-time cycles, and after
   ``--cycles`` more create/remove cycles (growth is what matters).
3. Idle: the plugin's CPU time (utime + stime, /proc/PID/stat) over ``--idle`` seconds without
   requests, with the periodic reconcile off and at its default (10 s).

Needs root and cgroup v1 cpuset+cpu (this machine kind). NRI's budget per request is 2 s.
"""

from __future__ import annotations

import argparse
import os
import socket
import subprocess
import sys
import time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
INTEGRATION = os.path.join(REPO, "tests", "integration")
sys.path.insert(0, os.path.join(REPO, "tests", "unit", "nri"))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from reapply_latency import load, percentile  # noqa: E402 (the benchmark helpers beside this file)

CGROUP_ROOT = "/sys/fs/cgroup"


def rss_kib(pid: int) -> int:
    with open(f"/proc/{pid}/status", encoding="ascii") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    raise RuntimeError(f"no VmRSS for pid {pid}")


def cpu_seconds(pid: int) -> float:
    with open(f"/proc/{pid}/stat", encoding="ascii") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")  # utime, stime


class Bench:
    """One plugin process connected to our socket, on one real pod cgroup."""

    def __init__(self, node, pod, reconcile_interval: float) -> None:
        import peer  # noqa: PLC0415 (tests/unit/nri/peer.py: the runtime's end)

        from mixed_cpus_hook.frontends.nri.wire import api  # noqa: PLC0415

        self.peer_mod, self.api, self.node, self.pod = peer, api, node, pod
        self.path = os.path.join(node.tmp, f"nri-{reconcile_interval:g}.sock")
        self.listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.listener.bind(self.path)
        self.listener.listen(1)
        self.listener.settimeout(60)
        argv = [node.exe, "--config", node.config_path, "nri", "--socket", self.path,
                "--reconcile-interval", f"{reconcile_interval:g}"]
        self.log = open(os.path.join(node.tmp, f"plugin-{reconcile_interval:g}.log"), "wb")
        self.proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=self.log, stderr=self.log,
                                     env=node.env(), start_new_session=True)
        conn, _ = self.listener.accept()
        self.peer = peer.RuntimePeer(conn)
        self.peer.sock.settimeout(30)
        self.peer.handshake()
        self.serial = 0

    def cgroup(self, controller: str, cid: str) -> str:
        return f"{CGROUP_ROOT}/{controller}{self.pod.rel}/{cid}"

    def request_parts(self, cid: str):
        pod, ctr = self.peer_mod.pod_and_container(cid, pod_uid=self.pod.uid, cpus="1", quota=100000, namespace="ran")
        pod.linux.cgroup_parent = self.pod.rel
        ctr.linux.cgroups_path = f"{self.pod.rel}/{cid}"
        return pod, ctr

    def make_container_cgroup(self, cid: str) -> None:
        from helpers import read_file, write_file  # noqa: PLC0415 (tests/integration/helpers.py)

        for controller in ("cpuset", "cpu"):
            os.mkdir(self.cgroup(controller, cid))
        write_file(self.cgroup("cpuset", cid) + "/cpuset.mems", read_file(f"{CGROUP_ROOT}/cpuset{self.pod.rel}/cpuset.mems"))
        write_file(self.cgroup("cpuset", cid) + "/cpuset.cpus", "1")
        write_file(self.cgroup("cpu", cid) + "/cpu.cfs_quota_us", "100000")

    def timed(self, method: str, msg, reply_cls=None):
        t0 = time.perf_counter()
        answer = self.peer.call(method, msg, reply_cls)
        return (time.perf_counter() - t0) * 1000, answer

    def cycle(self, times: dict) -> None:
        """CreateContainer, (its cgroup made, as runc would), UpdateContainer, Stop, REMOVE."""
        api = self.api
        self.serial += 1
        cid = f"bench{self.serial:06d}" + "0" * 52
        pod, ctr = self.request_parts(cid)
        ms, resp = self.timed("CreateContainer", api.CreateContainerRequest(pod=pod, container=ctr),
                              api.CreateContainerResponse)
        times.setdefault("CreateContainer", []).append(ms)
        if resp.adjust.linux.resources.cpu.cpus != "0-1":
            raise RuntimeError(f"CreateContainer {cid}: adjusted to {resp.adjust.linux.resources.cpu.cpus!r}, "
                               f"not '0-1' (see {self.log.name})")
        self.make_container_cgroup(cid)
        ctr.linux.resources.cpu.cpus = "0-1"
        ctr.linux.resources.cpu.quota.value = 200000
        res = api.LinuxResources()
        res.cpu.cpus = "1"
        ms, resp = self.timed("UpdateContainer", api.UpdateContainerRequest(pod=pod, container=ctr, linux_resources=res),
                              api.UpdateContainerResponse)
        times.setdefault("UpdateContainer", []).append(ms)
        if not resp.update or resp.update[0].linux.resources.cpu.cpus != "0-1":
            raise RuntimeError(f"UpdateContainer {cid}: not rewritten to '0-1': {resp}")
        ms, _ = self.timed("StopContainer", api.StopContainerRequest(pod=pod, container=ctr), api.StopContainerResponse)
        times.setdefault("StopContainer", []).append(ms)
        for controller in ("cpu", "cpuset"):
            os.rmdir(self.cgroup(controller, cid))
        ev = api.StateChangeEvent(event=api.EVENTS["REMOVE_CONTAINER"], pod=pod, container=ctr)
        ms, _ = self.timed("StateChange", ev)
        times.setdefault("StateChange REMOVE", []).append(ms)

    def close(self) -> int:
        self.proc.terminate()
        try:
            code = self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            code = self.proc.wait(timeout=10)
        self.peer.sock.close()
        self.listener.close()
        self.log.close()
        return code


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--requests", type=int, default=250, help="timed cycles (at least 200; default 250)")
    p.add_argument("--cycles", type=int, default=1000, help="create/remove cycles for the memory check")
    p.add_argument("--idle", type=float, default=12.0, help="seconds of idling per reconcile setting")
    args = p.parse_args(argv)
    if args.requests < 200:
        p.error("--requests must be at least 200")
    if os.geteuid() != 0 or not os.path.isdir(f"{CGROUP_ROOT}/cpuset"):
        print("needs root and cgroup v1 cpuset+cpu", file=sys.stderr)
        return 2
    sys.path.insert(0, INTEGRATION)
    conftest = load("mch_bench_conftest", os.path.join(INTEGRATION, "conftest.py"))
    node = conftest.Node()
    node.config_path = os.path.join(node.tmp, "nri-config.yaml")
    with open(node.config_path, "w", encoding="utf-8") as f:
        f.write(f'shared_cpus: "0"\nstate_dir: {node.state_dir}\nallowed_namespaces: [ran]\n'
                f"kubelet_state_file: {node.tmp}/none/cpu_manager_state\n")
    pod = node.make_pod(quota=200000)
    problems, out = [], {}
    try:
        b = Bench(node, pod, reconcile_interval=0)
        rss = {"after handshake": rss_kib(b.proc.pid)}
        times: dict = {}
        for _ in range(10):  # warm-up, not counted
            b.cycle({})
        for _ in range(args.requests):
            b.cycle(times)
        rss[f"after {args.requests + 10} cycles"] = rss_kib(b.proc.pid)
        for _ in range(args.cycles):
            b.cycle({})
        rss[f"after {args.requests + 10 + args.cycles} cycles"] = rss_kib(b.proc.pid)
        if pod.quota() != 200000 or node.records():
            problems.append(f"after the cycles: pod quota {pod.quota()}, records {node.records()}")
        c0 = cpu_seconds(b.proc.pid)
        time.sleep(args.idle)
        idle = {"reconcile off": cpu_seconds(b.proc.pid) - c0}
        code = b.close()
        if code != 0:
            problems.append(f"plugin exited {code} on SIGTERM")
        b = Bench(node, pod, reconcile_interval=10)
        c0 = cpu_seconds(b.proc.pid)
        time.sleep(args.idle)
        idle["reconcile every 10 s"] = cpu_seconds(b.proc.pid) - c0
        b.close()
        out = {"times": times, "rss": rss, "idle": idle}
    finally:
        problems += node.cleanup()
    print(f"NRI plugin (real process, unix socket, peer = tests/unit/nri/peer.py), cgroup v1, "
          f"{os.cpu_count()} CPUs, load {os.getloadavg()[0]:.2f}")
    print(f"{'request':<22} {'n':>5} {'p50 ms':>8} {'p99 ms':>8} {'max ms':>8}")
    for name, ms in out.get("times", {}).items():
        print(f"{name:<22} {len(ms):>5} {percentile(ms, 0.5):8.2f} {percentile(ms, 0.99):8.2f} {max(ms):8.2f}")
    for what, kib in out.get("rss", {}).items():
        print(f"VmRSS {what}: {kib} KiB")
    for what, sec in out.get("idle", {}).items():
        print(f"CPU time idle {args.idle:g} s, {what}: {sec * 1000:.0f} ms (clock tick {1000 / os.sysconf('SC_CLK_TCK'):.0f} ms)")
    if problems:
        print(f"problems: {problems}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
