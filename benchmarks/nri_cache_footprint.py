#!/usr/bin/env python3
"""How much memory one cold CreateContainer touches: cache lines fetched from memory, counted.

In the reference tool (``nri_reference.py``) the plugin answers between requests of five
containerd instances, which evict its code and data from the caches: an answer's time there
follows the cache lines a request touches more than the instructions it runs, and moves by
0.1-0.15 of the ratio between runs of the same code. This counts them instead, the same on
every run (``valgrind --tool=callgrind --cache-sim=yes``, user space only: the kernel's side of a
system call is not in it): before each CreateContainer a buffer twice the simulated last-level
cache (2 MiB) is copied over, so the request is decoded and handled from cold caches, as in the
tool. Per CreateContainer, the difference of a run of A and of B cycles divided by B - A, less
a run that flushes and decodes without a handler:

* ``lines``: last-level cache misses (instruction and data lines fetched from memory);
* ``instructions``: user-space instructions (the warm UpdateContainer and StopContainer that
  follow each creation are in both, as in ``nri_request_counts.py``).

Three handlers, as ``nri_reference.py`` runs them: the product, every duty straight-line
(``nri_duties.py``) and the Go plugin's work in Python (``nri_go_work.py``); the ratios of their
lines are printed beside the tool's answer ratios for comparison.

    sudo .venv/bin/python benchmarks/nri_cache_footprint.py [--cycles A B]

Exits 0 once measured, 2 when it cannot measure (no root, no cgroup v1 cpuset and cpu, no valgrind).
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
from typing import Dict, List, Optional, Tuple

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
LL_BYTES = 2 << 20  # the simulated last-level cache
CACHE_ARGS = ["--cache-sim=yes", "--I1=32768,8,64", "--D1=32768,8,64", f"--LL={LL_BYTES},16,64"]
VARIANTS = (("product", ""), ("every duty, straight-line", "nri_duties"), ("Go's work in Python", "nri_go_work"))

# The child: CYCLES creations (after 20 of warm-up), each after the flush; the UpdateContainer and
# StopContainer that follow run warm. MCH_FOOTPRINT_DEVICE: a device module to install first;
# MCH_FOOTPRINT_NOCALL: flush and decode only (the baseline).
DRIVER = r"""
import io, os, shutil, sys, tempfile, uuid
sys.path.insert(0, os.path.join(os.environ["MCH_FOOTPRINT_REPO"], "benchmarks"))
import nri_request_cost as b  # puts the checkout's hook/ first on sys.path
if os.environ.get("MCH_FOOTPRINT_DEVICE"):
    __import__(os.environ["MCH_FOOTPRINT_DEVICE"]).install()
from mixed_cpus_hook.frontends.nri.handlers import Handlers
from mixed_cpus_hook.frontends.nri import plugin as plugin_module
from mixed_cpus_hook.frontends.nri.plugin import METHODS, settle_memory  # requests decoded as the plugin does
from mixed_cpus_hook.node.config import load_config
from mixed_cpus_hook.node.log import Reporter
flush = bytearray(int(os.environ["MCH_FOOTPRINT_FLUSH"]))
source = bytes(len(flush))
nocall = bool(os.environ.get("MCH_FOOTPRINT_NOCALL"))
settle_memory()
pod = b.Pod()
state = tempfile.mkdtemp(prefix="mch-footprint-", dir=os.environ["MCH_FOOTPRINT_TMP"])
try:
    config = os.path.join(state, "config.yaml")
    with open(config, "w") as f:
        f.write(f'shared_cpus: "0"\nstate_dir: {state}/state\ncgroup_root: {b.CG}\nfailure_policy: fail\n'
                f'allowed_namespaces: ["perf"]\nkubelet_state_file: {state}/none/cpu_manager_state\n')
    reporter = Reporter(stream=io.StringIO(), sink=None)
    h = Handlers(load_config(config, cache_dir=os.path.join(state, "cache")), reporter)
    getattr(plugin_module, "defer_writes", lambda engine: None)(h.engine)  # as the plugin runs it (older checkouts: nothing)
    calls = [("CreateContainer", h.create_container), ("UpdateContainer", h.update_container),
             ("StopContainer", h.stop_container)]
    for _ in range(20 + int(os.environ["MCH_FOOTPRINT_CYCLES"])):
        wire = b.requests(pod.top, pod.uid, uuid.uuid4().hex * 2, True)
        for method, call in calls:
            if method == "CreateContainer":
                flush[:] = source
            req = METHODS[method][0].FromString(wire[method])
            if nocall:
                continue
            reporter.hold()  # as the plugin does: the journal lines after the answer
            call(req).SerializeToString()
            reporter.release()
            h.after_answer()
finally:
    shutil.rmtree(state, ignore_errors=True)
    pod.remove()
"""


def parse_callgrind_events(text: str) -> Optional[Dict[str, int]]:
    """The event totals of a callgrind output file ("events:" names, "summary:" or "totals:" counts)."""
    names: List[str] = []
    counts: Optional[List[int]] = None
    for line in text.splitlines():
        if line.startswith("events:"):
            names = line.split()[1:]
        elif line.startswith(("summary:", "totals:")):
            counts = [int(v) for v in line.split()[1:]]
    if not names or counts is None:
        return None
    return dict(zip(names, counts + [0] * (len(names) - len(counts))))


def compute_footprint(low: Dict[str, int], high: Dict[str, int], cycles: int) -> Tuple[float, float, float]:
    """(instructions, instruction lines, data lines fetched from memory) per cycle, from two runs'
    totals (``cycles`` more in ``high``)."""
    per = {k: (high.get(k, 0) - low.get(k, 0)) / cycles for k in high}
    return per.get("Ir", 0.0), per.get("ILmr", 0.0), per.get("DLmr", 0.0) + per.get("DLmw", 0.0)


def format_row(label: str, footprint: Tuple[float, float, float], base: Tuple[float, float, float],
               reference: Optional[float]) -> str:
    """One variant's line: its counts over the baseline, and its lines over the reference's."""
    ir, il, dl = (a - b for a, b in zip(footprint, base))
    ratio = f"{(il + dl) / reference:5.2f}" if reference else "     "
    return (f"  {label:28s} lines {(il + dl) / 1e3:6.2f}k (code {il / 1e3:5.2f}k, data {dl / 1e3:5.2f}k)  "
            f"{ratio}  instructions {ir / 1e3:7.1f}k")


def run_child(tmp: str, cycles: int, device: str, nocall: bool, out: str) -> subprocess.CompletedProcess:
    env = dict(os.environ, MCH_FOOTPRINT_REPO=REPO, MCH_FOOTPRINT_CYCLES=str(cycles), MCH_FOOTPRINT_TMP=tmp,
               MCH_FOOTPRINT_FLUSH=str(2 * LL_BYTES), MCH_FOOTPRINT_DEVICE=device,
               MCH_FOOTPRINT_NOCALL="1" if nocall else "")
    return subprocess.run(["valgrind", "--tool=callgrind", *CACHE_ARGS, f"--callgrind-out-file={out}",
                           sys.executable, "-c", DRIVER], env=env, capture_output=True, text=True, check=False,
                          cwd="/")


def measure(tmp: str, low: int, high: int, device: str, nocall: bool = False) -> Tuple[float, float, float]:
    totals = []
    for cycles in (low, high):
        out = os.path.join(tmp, f"callgrind.{cycles}.out")
        done = run_child(tmp, cycles, device, nocall, out)
        try:
            with open(out, encoding="ascii") as f:
                events = parse_callgrind_events(f.read())
        except FileNotFoundError:
            events = None
        if done.returncode != 0 or events is None:
            raise RuntimeError(f"callgrind run ({device or 'product'}) failed: {done.stderr[-1500:]}")
        totals.append(events)
    return compute_footprint(totals[0], totals[1], high - low)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--cycles", type=int, nargs=2, default=(10, 40), metavar=("A", "B"))
    args = ap.parse_args()
    if os.geteuid() != 0 or not os.path.isfile("/sys/fs/cgroup/cpuset/cpuset.cpus") or not shutil.which("valgrind"):
        print("nri_cache_footprint: needs root, cgroup v1 cpuset and cpu under /sys/fs/cgroup and valgrind")
        return 2
    low, high = args.cycles
    tmp_base = "/dev/shm" if os.path.isdir("/dev/shm") else None
    print(f"per cold CreateContainer (a {2 * LL_BYTES >> 20} MiB flush before each; simulated caches: "
          f"L1 32 KiB, last level {LL_BYTES >> 20} MiB; difference of {low} and {high} cycles, Python "
          f"{sys.version.split()[0]}), over a flush-and-decode baseline; ratio: lines over Go's work in Python")
    with tempfile.TemporaryDirectory(prefix="mch-footprint-", dir=tmp_base) as tmp:
        base = measure(tmp, low, high, "", nocall=True)
        measured = [(label, measure(tmp, low, high, device)) for label, device in VARIANTS]
    go = measured[-1][1]
    reference = go[1] + go[2] - base[1] - base[2]
    for label, footprint in measured:
        print(format_row(label, footprint, base, reference))
    return 0


if __name__ == "__main__":
    sys.exit(main())
