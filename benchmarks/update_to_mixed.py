#!/usr/bin/env python3
"""kubelet's UpdateContainerResources to the cgroup holding the mixed set: NRI mode against hook mode.

Both on this machine's cgroup v1, 2 CPUs, exclusive "1", shared "0", mixed "0-1".

* NRI mode: a private containerd 1.7 (tests/integration/containerd.py), the plugin
  (``mixed-cpus-hook nri``) connected, a kubelet-like pod and a mixed container made over CRI;
  then N ``UpdateContainerResources`` calls with kubelet's CPU manager rewrite (cpuset "1"),
  ``--gap`` seconds apart. A thread samples the container's cpuset.cpus as fast as it can and
  inotify reports each write. Per update: the time from the CRI call to the write that lands
  (runc's, with the plugin's rewritten value), and how long the file held the exclusive-only "1"
  (the window). The plugin rewrites the update before runc sees it, so the window should be 0.
* Hook mode: ``benchmarks/reapply_latency.py --via runc`` (real systemd 252 in namespaces, the
  shipped path units, ``runc update --cpuset-cpus 1``): runc writes "1", the path unit's service
  writes "0-1" back; that script's latency, from runc's write to the restore, is the window.

Prints one table with both modes. Needs root, cgroup v1 cpuset+cpu, runc, busybox-static and
the containerd cache (scripts/fetch-containerd.sh).
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
INTEGRATION = os.path.join(REPO, "tests", "integration")
REAPPLY = os.path.join(REPO, "benchmarks", "reapply_latency.py")
EXCLUSIVE, SHARED, MIXED = "1", "0", "0-1"
sys.path.insert(0, os.path.dirname(REAPPLY))
from reapply_latency import load, percentile  # noqa: E402 (the hook-mode benchmark beside this file)


def summary(ms) -> str:
    return f"{percentile(ms, 0.5):7.1f} {percentile(ms, 0.95):7.1f} {max(ms):7.1f}" if ms else "      -       -       -"


def nri_mode(n: int, gap: float, warmup: int) -> dict:
    """Updates over CRI with the plugin connected; per update the landing time and the window (ms)."""
    sys.path.insert(0, INTEGRATION)
    conftest = load("mch_bench_conftest", os.path.join(INTEGRATION, "conftest.py"))
    import containerd as ctd_mod  # noqa: PLC0415
    from cri_kube import Kube, Plugin, Watcher  # noqa: PLC0415

    node = conftest.Node()
    ctd = ctd_mod.Containerd(owned_cgroups=[node.top])
    kube = plugin = None
    out = {"land": [], "window": [], "call": [], "seen_exclusive": 0, "writes": 0, "problems": []}
    try:
        ctd.start()
        ctd.import_images()
        kube = Kube(ctd, node.top, os.path.join(node.tmp, "pod-logs"))
        config = os.path.join(node.tmp, "nri-config.yaml")
        with open(config, "w", encoding="utf-8") as f:
            f.write(f'shared_cpus: "{SHARED}"\nstate_dir: {node.state_dir}\nallowed_namespaces: [mixed-ns]\n'
                    f"kubelet_state_file: {node.tmp}/none/cpu_manager_state\n")
        plugin = Plugin(config, ctd.nri_sock, os.path.join(node.tmp, "plugin.log"), ctd,
                        env={"MIXED_CPUS_HOOK_CACHE_DIR": node.cache_dir})
        plugin.start()
        pod = kube.pod()
        cid = kube.container(pod)
        got = kube.values(pod, cid)["cpus"]
        if got != MIXED:
            raise RuntimeError(f"the container was created with cpuset {got!r}, not {MIXED!r}: is the plugin working?")
        path = kube.cgroup(pod, cid, "cpuset") + "/cpuset.cpus"
        for i in range(warmup + n):
            time.sleep(gap)
            with Watcher(path) as w:
                t0 = time.perf_counter()
                kube.update(cid, cpus=EXCLUSIVE)
                t1 = time.perf_counter()
                time.sleep(0.02)  # a late write (a reapply) would show here
            if i < warmup:
                continue
            landed = [t for t in w.event_times if t >= t0]
            out["land"].append(((landed[0] if landed else t1) - t0) * 1000)
            out["call"].append((t1 - t0) * 1000)
            out["window"].append(w.time_at(EXCLUSIVE, time.perf_counter()) * 1000)
            out["seen_exclusive"] += EXCLUSIVE in w.values()
            out["writes"] += w.events
    finally:
        if kube is not None:
            out["problems"] += kube.cleanup()
        if plugin is not None:
            plugin.stop()
        out["problems"] += ctd.cleanup()
        out["problems"] += node.cleanup()
    return out


def hook_mode(n: int) -> dict:
    """reapply_latency.py --via runc, its per-rewrite latencies parsed from its output."""
    proc = subprocess.run([sys.executable, REAPPLY, "--via", "runc", "-n", str(max(n, 20))],
                          capture_output=True, text=True, timeout=900)
    if proc.returncode != 0:
        return {"window": [], "error": f"{REAPPLY} exited {proc.returncode}:\n{proc.stdout}\n{proc.stderr[-3000:]}"}
    lines = proc.stdout.splitlines()
    for i, line in enumerate(lines):
        if line.startswith("reapply latency") and i + 1 < len(lines):
            ms = [float(x) for x in re.findall(r"\d+(?:\.\d+)?", lines[i + 1].replace(" ms", ""))]
            return {"window": ms, "output": proc.stdout}
    return {"window": [], "error": f"cannot read the latencies in {REAPPLY}'s output:\n{proc.stdout}"}


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("-n", "--updates", type=int, default=30, help="measured updates per mode (default 30)")
    p.add_argument("--warmup", type=int, default=3)
    p.add_argument("--gap", type=float, default=0.3, help="seconds between NRI-mode updates (default 0.3)")
    p.add_argument("--skip-hook", action="store_true", help="NRI mode only")
    args = p.parse_args(argv)
    if os.geteuid() != 0:
        print("needs root (containerd, cgroups, systemd in namespaces)", file=sys.stderr)
        return 2
    nri = nri_mode(args.updates, args.gap, args.warmup)
    hook = None if args.skip_hook else hook_mode(args.updates)
    n = len(nri["window"])
    print(f"kubelet's cpuset rewrite (UpdateContainerResources cpuset \"{EXCLUSIVE}\") on a mixed container "
          f"(\"{MIXED}\"), cgroup v1, {os.cpu_count()} CPUs")
    print(f"{'mode':<44} {'n':>3}  {'update -> mixed written (ms)':>27}  {'exclusive-only window (ms)':>26}  "
          f"{'seen exclusive-only':>19}")
    print(f"{'':<44} {'':>3}  {'p50     p95     max':>27}  {'p50     p95     max':>26}")
    print(f"{'NRI: containerd 1.7 + plugin (rewritten)':<44} {n:>3}  {summary(nri['land']):>27}  "
          f"{summary(nri['window']):>26}  {nri['seen_exclusive']:>8} of {n}")
    if hook is not None and hook.get("error"):
        print(f"{'hook: runc update + systemd path unit reapply':<44} failed: see below")
    elif hook is not None:
        hw = hook["window"]
        print(f"{'hook: runc update + systemd path unit reapply':<44} {len(hw):>3}  {summary(hw):>27}  "
              f"{summary(hw):>26}  {len(hw):>8} of {len(hw)}")
    print(f"NRI: the CRI call itself took p50 {percentile(nri['call'], 0.5):.1f} ms, p95 "
          f"{percentile(nri['call'], 0.95):.1f} ms (containerd, the plugin's answer, runc update); "
          f"{nri['writes']} writes to cpuset.cpus seen for {n} updates.")
    if hook is not None and not hook.get("error"):
        print("hook: the cgroup holds the exclusive-only set from runc's write until the reapply (the same "
              "figure in both columns; runc's start before its write is not counted).")
    load = os.getloadavg()[0]
    print(f"load average (1 min) {load:.2f} on {os.cpu_count()} CPUs"
          + ("  (a busy machine: the numbers include waiting for a CPU)" if load > (os.cpu_count() or 1) * 0.5 else ""))
    if hook is not None and hook.get("error"):
        print(f"hook mode: {hook['error']}", file=sys.stderr)
    if nri["problems"]:
        print(f"cleanup problems: {nri['problems']}", file=sys.stderr)
    return 1 if nri["problems"] or (hook is not None and hook.get("error")) else 0


if __name__ == "__main__":
    sys.exit(main())
