#!/usr/bin/env python3
"""How the reapply's cost grows with the number of tracked containers (1, 100, 1000 records).

A fake cgroup v1 node (mixed_cpus_hook.testing.fakenode: plain files, no root needed) with N mixed
containers, each in its own pod, all applied by the hook (in-process ``apply``), so the state
directory holds N container records and N pod records. Then one container's cpuset and quota
are rewritten (kubelet's rewrite) and each of these runs is measured in-process:

* ``reconcile --container ID`` with the settle off: what a watch unit's service does;
* ``sync`` of one queued container (a container started or stopped), systemctl stubbed out;
* full ``reconcile`` of every record (the timer, the configuration path unit);
* full ``sync`` (the timer and start-up run after the full reconcile), systemctl stubbed out.

Files are counted with an audit hook (sys.addaudithook): every ``open`` (os.open and open(),
split into reads and writes by their flags; the state lock is counted apart), ``os.listdir`` /
``os.scandir``, and ``os.rename`` (a record's atomic replace). Times are the median of
``--repeat`` runs (each after a fresh rewrite, so every run really reapplies). Also the whole
service as a process: ``python -I -m mixed_cpus_hook.frontends.systemd.watches reconcile ID --settle 0``.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(REPO, "hook"))

from mixed_cpus_hook.frontends.systemd import watches  # noqa: E402
from mixed_cpus_hook.node.config import load_config  # noqa: E402
from mixed_cpus_hook.node.log import Reporter  # noqa: E402
from mixed_cpus_hook.node.oci import State  # noqa: E402
from mixed_cpus_hook.store.records import mark_pending  # noqa: E402
from mixed_cpus_hook.testing.fakenode import FakeNode  # noqa: E402
from mixed_cpus_hook.usecases.apply import apply_state  # noqa: E402
from mixed_cpus_hook.usecases.reconcile import reconcile  # noqa: E402

SHARED, EXCLUSIVE, MIXED = "0-1", "2-3", "0-3"


class Counter:
    """Audit-hook counts of file operations, split into cgroup files and the state directory."""

    def __init__(self, cgroup_root: str, state_dir: str) -> None:
        self.cgroup_root, self.state_dir = cgroup_root, state_dir
        self.active = False
        self.reset()
        sys.addaudithook(self.hook)

    def reset(self) -> None:
        self.c = {"cg_read": 0, "cg_write": 0, "rec_read": 0, "rec_write": 0, "lock": 0, "other_open": 0,
                  "listdir": 0, "rename": 0}

    def hook(self, event: str, args: tuple) -> None:
        if not self.active:
            return
        if event == "open":
            path = os.fsdecode(args[0]) if isinstance(args[0], (str, bytes)) else ""
            mode, flags = args[1], args[2]
            writing = bool(flags & (os.O_WRONLY | os.O_RDWR)) or (isinstance(mode, str) and any(c in mode for c in "wax+"))
            if path.startswith(self.cgroup_root):
                self.c["cg_write" if writing else "cg_read"] += 1
            elif path.endswith("/lock") or path.endswith(".lock"):
                self.c["lock"] += 1
            elif path.startswith(self.state_dir):
                self.c["rec_write" if writing else "rec_read"] += 1
            else:
                self.c["other_open"] += 1
        elif event in ("os.listdir", "os.scandir"):
            self.c["listdir"] += 1
        elif event == "os.rename":
            self.c["rename"] += 1


class StubSystemd:
    """watches.Systemd without systemctl: every loaded unit is active, actions are counted."""

    def __init__(self, active=()) -> None:
        self.active = set(active)
        self.calls = 0

    def units(self):
        self.calls += 1
        return {unit: "active" for unit in self.active}

    def act(self, verb, units):
        if units:
            self.calls += 1
            for unit in units:
                (self.active.add if verb == "start" else self.active.discard)(unit)


def build(root: str, n: int):
    node = FakeNode(root, version=1, online="0-7")
    config_path = node.write_config(shared=SHARED)
    config = load_config(config_path, cache_dir=os.path.join(root, "cache"))  # never the node's /run
    rep = Reporter(sink=None)
    ids = []
    for i in range(n):
        cid = f"{i:064x}"
        paths = node.add_container(cid, pod_uid=f"00000000-0000-0000-0000-{i:012x}", cpus=EXCLUSIVE,
                                   quota=200000, pod_quota=200000)
        state = State(id=cid, pid=0, bundle=paths["bundle"], annotations={}, has_annotations=False)
        apply_state(state, config, rep)
        ids.append((cid, paths["rel"]))
    return node, config, rep, ids


def rewrite(node: FakeNode, rel: str) -> None:
    node.write(rel, "cpuset.cpus", EXCLUSIVE)
    node.write(rel, "cpu.cfs_quota_us", "200000")


def measure(counter: Counter, fn, prepare, repeat: int):
    times = []
    counts = None
    for _ in range(repeat):
        prepare()
        counter.reset()
        counter.active = True
        t0 = time.perf_counter()
        fn()
        dt = time.perf_counter() - t0
        counter.active = False
        times.append(dt)
        counts = dict(counter.c)  # the last run's: every run does the same work
    return statistics.median(times), counts


def fmt_counts(c) -> str:
    return (f"cgroup r/w {c['cg_read']}/{c['cg_write']}, records r/w {c['rec_read']}/{c['rec_write']}"
            f" (+{c['rename']} rename), lock {c['lock']}, listdir {c['listdir']}")


def run_size(n: int, args: argparse.Namespace) -> tuple:
    """Build a node with ``n`` tracked containers and measure every kind of run on it."""
    tmp = tempfile.mkdtemp(prefix=f"mch-scaling-{n}-")
    try:
        t0 = time.perf_counter()
        node, config, rep, ids = build(os.path.join(tmp, "node"), n)
        built = time.perf_counter() - t0
        counter = Counter(os.path.realpath(node.cgroup_root), node.state_dir)
        cid, rel = ids[n // 2]
        one_t, one_c = measure(counter, lambda: reconcile(config, rep, only=cid),
                               lambda: rewrite(node, rel), args.repeat)
        assert node.read(rel, "cpuset.cpus") == MIXED
        # the in-sync case: a trigger that finds nothing to do
        insync_t, insync_c = measure(counter, lambda: reconcile(config, rep, only=cid),
                                     lambda: None, args.repeat)
        stub = StubSystemd()
        watches.sync(config, rep, systemd=stub)  # the marks every apply left: watch them all
        assert len(stub.active) == 3 * n  # cpuset, quota and pod quota of each
        sync_t, sync_c = measure(counter, lambda: watches.sync(config, rep, systemd=stub),
                                 lambda: mark_pending(config.state_dir, cid), args.repeat)
        all_t, all_c = measure(counter, lambda: reconcile(config, rep),
                               lambda: rewrite(node, rel), args.repeat)
        full_t, full_c = measure(counter, lambda: watches.sync(config, rep, full=True, systemd=stub),
                                 lambda: None, args.repeat)
        env = dict(os.environ, MIXED_CPUS_HOOK_CACHE_DIR=os.path.join(tmp, "cache"))
        cmd = [sys.executable, "-I", "-m", "mixed_cpus_hook.frontends.systemd.watches", "--config",
               os.path.join(node.etc, "config.yaml"), "reconcile", cid, "--settle", "0"]
        proc_times = []
        for _ in range(args.process_runs + 1):
            rewrite(node, rel)
            t = time.perf_counter()
            res = subprocess.run(cmd, env=env, capture_output=True, text=True)
            proc_times.append(time.perf_counter() - t)
            if res.returncode != 0 or node.read(rel, "cpuset.cpus") != MIXED:
                raise SystemExit(f"process run failed: {res.returncode} {res.stderr}")
        proc_t = statistics.median(proc_times[1:])  # the first one fills the config cache
        return (n, built, one_t, one_c, insync_t, insync_c, sync_t, sync_c, all_t, all_c, full_t, full_c, proc_t)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--sizes", default="1,100,1000", help="numbers of tracked containers (default 1,100,1000)")
    p.add_argument("--repeat", type=int, default=5, help="runs per measurement (median; default 5)")
    p.add_argument("--process-runs", type=int, default=5, help="runs of the service as a process (median)")
    args = p.parse_args(argv)
    sizes = [int(x) for x in args.sizes.split(",")]
    rows = [run_size(n, args) for n in sizes]

    print("reconcile cost against the number of tracked containers (fake cgroup v1 node, in-process,"
          f" median of {args.repeat}):")
    for (n, built, one_t, one_c, insync_t, insync_c, sync_t, sync_c, all_t, all_c, full_t, full_c,
         proc_t) in rows:
        print(f"\n{n} tracked container(s) (applied in {built:.1f} s):")
        print(f"  reconcile --container ID (rewritten) {one_t * 1000:8.2f} ms   {fmt_counts(one_c)}")
        print(f"  reconcile --container ID (in sync)   {insync_t * 1000:8.2f} ms   {fmt_counts(insync_c)}")
        print(f"  sync of one queued container        {sync_t * 1000:8.2f} ms   {fmt_counts(sync_c)}")
        print(f"  reconcile (all records)              {all_t * 1000:8.2f} ms   {fmt_counts(all_c)}")
        print(f"  sync --full                          {full_t * 1000:8.2f} ms   {fmt_counts(full_c)}")
        print(f"  the service as a process (python -I -m mixed_cpus_hook.frontends.systemd.watches reconcile ID): "
              f"{proc_t * 1000:.1f} ms")
    print("\nsummary (ms):")
    print(f"  {'records':>8} {'one, rewritten':>15} {'one, in sync':>13} {'sync one':>9} {'all':>9}"
          f" {'sync --full':>12} {'process':>8}")
    for (n, _b, one_t, _1, insync_t, _2, sync_t, _3, all_t, _4, full_t, _5, proc_t) in rows:
        print(f"  {n:>8} {one_t * 1000:>15.2f} {insync_t * 1000:>13.2f} {sync_t * 1000:>9.2f} {all_t * 1000:>9.1f}"
              f" {full_t * 1000:>12.1f} {proc_t * 1000:>8.1f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
