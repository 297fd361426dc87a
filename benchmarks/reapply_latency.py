#!/usr/bin/env python3
"""Time from kubelet's rewrite of a container's cpuset to the mixed set being back.

What runs: a real systemd 252 booted in private namespaces (tests/integration/systemd_ns.py)
with the units of rpm/units/ installed and enabled as the RPM would (ReapplyNode of
tests/integration/test_reapply_systemd.py), a real runc container in a kubelet-like pod that
the hook applied (cpuset 0-1 = exclusive 1 + shared 0), and then N rewrites, each one:

* ``--via write`` (default): ``write(2)`` of the exclusive cpuset "1" to the container's
  cpuset.cpus from the host, the single write runc makes for ``runc update --cpuset-cpus``;
  the clock starts just before that write;
* ``--via runc``: ``runc update --cpuset-cpus 1 --cpu-quota 100000`` inside; the clock starts
  at runc's write of cpuset.cpus, as inotify reports it;

and the clock stops when inotify reports the write that puts "0-1" back (the file is read on
each IN_MODIFY). Rewrites are ``--gap`` seconds apart, so each one meets an idle, re-armed path
unit (the service settles for 0.1 s after a reapply). ``--entry cli`` runs the per-container
service through the full click command line instead of ``python -m mixed_cpus_hook.frontends.systemd.watches``,
to show what that choice is worth. Prints every latency, p50/p95/max and the target (p95 at most
100 ms). Needs root, cgroup v1 cpuset+cpu, runc and busybox-static (as the integration tests).
"""

from __future__ import annotations

import argparse
import ctypes
import importlib.util
import os
import select
import statistics
import struct
import sys
import threading
import time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
INTEGRATION = os.path.join(REPO, "tests", "integration")
TARGET_P95 = 0.100
IN_MODIFY = 0x2


def load(name: str, path: str):
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


def percentile(values, q):
    s = sorted(values)
    if not s:
        return float("nan")
    k = (len(s) - 1) * q
    lo, hi = int(k), min(int(k) + 1, len(s) - 1)
    return s[lo] + (s[hi] - s[lo]) * (k - lo)


class Watch:
    """inotify IN_MODIFY on one file; ``wait(pred)`` returns the time of the event after which pred holds."""

    def __init__(self, path: str) -> None:
        libc = ctypes.CDLL(None, use_errno=True)
        self.fd = libc.inotify_init1(os.O_NONBLOCK | os.O_CLOEXEC)
        if self.fd < 0 or libc.inotify_add_watch(self.fd, os.fsencode(path), IN_MODIFY) < 0:
            raise OSError(ctypes.get_errno(), f"inotify on {path}")
        self.path = path

    def drain(self) -> int:
        n = 0
        while True:
            try:
                data = os.read(self.fd, 4096)
            except BlockingIOError:
                return n
            n += len(data) // struct.calcsize("iIII")

    def next_event(self, timeout: float) -> float:
        """perf_counter() when the next IN_MODIFY (batch) arrived; the queue is drained."""
        ready, _, _ = select.select([self.fd], [], [], timeout)
        if not ready:
            raise TimeoutError(f"{self.path}: no write within {timeout} s")
        t = time.perf_counter()
        self.drain()
        return t

    def wait(self, pred, timeout: float) -> float:
        """The time of the first write after which ``pred()`` holds."""
        deadline = time.monotonic() + timeout
        while True:
            t = self.next_event(max(0.0, deadline - time.monotonic()))
            if pred():
                return t

    def close(self) -> None:
        os.close(self.fd)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("-n", "--rewrites", type=int, default=30, help="measured rewrites (at least 20; default 30)")
    p.add_argument("--warmup", type=int, default=3, help="rewrites first, not counted")
    p.add_argument("--gap", type=float, default=0.4, help="seconds between rewrites (default 0.4)")
    p.add_argument("--via", choices=("write", "runc"), default="write", help="how to rewrite (default write)")
    p.add_argument("--entry", choices=("watches", "cli"), default="watches",
                   help="the per-container service's command: the shipped unit (python -m mixed_cpus_hook."
                        "watches) or the click CLI (mixed-cpus-hook reconcile --container)")
    args = p.parse_args(argv)
    if args.rewrites < 20:
        p.error("--rewrites must be at least 20")
    if os.geteuid() != 0:
        print("needs root (namespaces, cgroups, runc)", file=sys.stderr)
        return 2
    sys.path.insert(0, INTEGRATION)
    conftest = load("mch_bench_conftest", os.path.join(INTEGRATION, "conftest.py"))
    it = load("mch_bench_reapply", os.path.join(INTEGRATION, "test_reapply_systemd.py"))

    node = conftest.Node()
    rn = it.ReapplyNode(node, conftest.Runc)
    if args.entry == "cli":
        name = "mixed-cpus-hook-reconcile@.service"
        text = rn.units[name]
        rn.units[name] = text.replace("/usr/bin/python3 -I -m mixed_cpus_hook.frontends.systemd.watches reconcile %i",
                                      "/usr/bin/mixed-cpus-hook reconcile --container %i")
        assert rn.units[name] != text, "the reconcile@ unit's ExecStart changed: update this option"
        rn.sd.etc_files[f"/etc/systemd/system/{name}"] = it.render_unit(rn.units[name], node.exe, sys.executable)
    latencies = []
    problems = []
    settles = 0
    load_before = os.getloadavg()
    try:
        rn.start()
        pod_rel, uid = rn.make_pod_cgroupfs()
        c = rn.run_container("lat", pod_rel + "/crio-{id}", uid)
        rn.wait_watch(c)
        assert c.values() == it.MIXED_VALUES, c.values()
        watch = Watch(c.cpus)
        try:
            for i in range(args.warmup + args.rewrites):
                time.sleep(args.gap)
                watch.drain()
                if args.via == "write":
                    t0 = time.perf_counter()
                    it.write_file(c.cpus, it.EXCLUSIVE)
                    watch.drain()  # our own write's event
                else:
                    runner = threading.Thread(target=rn.rewrite, args=(c,))
                    runner.start()
                    t0 = watch.next_event(10.0)  # runc's write, the first of this cycle
                    if it.read_file(c.cpus) == it.MIXED:  # already restored: events coalesced
                        problems.append(f"rewrite {i}: runc's write and the restore came as one event")
                t1 = watch.wait(lambda: it.read_file(c.cpus) == it.MIXED, 5.0)
                if args.via == "runc":
                    runner.join()
                if i >= args.warmup:
                    latencies.append(t1 - t0)
        finally:
            watch.close()
        time.sleep(0.3)
        log = rn.journal()
        settles = log.count("while settling")
    finally:
        problems += rn.close()
        problems += node.cleanup()
    ms = [x * 1000 for x in latencies]
    print(f"reapply latency, rewrite ({args.via}) -> cpuset restored, service entry {args.entry!r},"
          f" {len(ms)} rewrites {args.gap:g} s apart:")
    print("  " + " ".join(f"{x:.0f}" for x in ms) + " ms")
    p50, p95 = percentile(ms, 0.5), percentile(ms, 0.95)
    print(f"  p50 {p50:.1f} ms  p95 {p95:.1f} ms  max {max(ms):.1f} ms  mean {statistics.mean(ms):.1f} ms")
    print(f"  target p95 <= {TARGET_P95 * 1000:.0f} ms: {'PASS' if p95 <= TARGET_P95 * 1000 else 'MISS'}")
    print(f"  settle re-fixes in the journal: {settles}")
    load_after = os.getloadavg()
    print(f"  load average (1 min) before/after: {load_before[0]:.2f}/{load_after[0]:.2f} on {os.cpu_count()} CPUs"
          + ("  (a busy machine: the numbers include waiting for a CPU)" if max(load_before[0], load_after[0]) >
             (os.cpu_count() or 1) * 0.5 else ""))
    if problems:
        print(f"cleanup problems: {problems}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
