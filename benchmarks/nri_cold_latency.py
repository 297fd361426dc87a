#!/usr/bin/env python3
"""One NRI event's wall time from cold caches, in-process: checkouts and measuring devices side by side.

In the reference tool (``nri_reference.py``) five containerd instances run between two requests of
the plugin and evict its code and data from the caches, the shared last-level cache too, so an answer
there costs two to four times what the same handler costs in a warm loop (``nri_request_cost.py``).
This reproduces that in-process on this machine's own caches: before every event a buffer
(``--flush`` MiB; default twice the largest cache sysfs lists, at least 8: every line the plugin used
is then fetched from memory again, as in the tool) is copied over, then the event's request is decoded, handled by the real
``Handlers`` and its answer encoded, timed with ``perf_counter_ns`` (as ``nri_request_cost.py``
builds them: containerd 1.7's requests, a real cgroup v1 pod cgroup, the state on tmpfs). Each
variant runs in a child process of its own; the children run interleaved in ``--rounds`` rounds
(the medians of their p50s are printed), since a run's figure moves by about 10% with the process's
memory layout.

Variants: each ``--hook`` (a checkout's ``hook`` directory, its ``benchmarks`` beside it: as in
``nri_request_counts.py``, that checkout's ``nri_request_cost.py`` builds the requests; default this
one's), and with ``--devices`` the first one's handlers replaced by the product's duties in straight-line Python
(``nri_duties.py``) and by the Go plugin's work in Python (``nri_go_work.py``), as
``nri_reference.py --duties/--go-work`` run them.

    sudo .venv/bin/python benchmarks/nri_cold_latency.py [--hook A/hook --hook hook] [--devices]

A ``--hook`` may hold a build of the request path compiled with mypyc (its extension modules load
before the sources): docs/DEVNOTES.md says how one measured. Prints p50 per event in microseconds and
each variant's ratio to the first; exits 0 once measured, 2 without root or cgroup v1 cpuset and cpu.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
from typing import Dict, List, Optional, Sequence, Tuple

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
EVENTS = ("CreateContainer", "UpdateContainer", "StopContainer")
WARMUP = 20

# The child: CYCLES asking containers (after WARMUP), each event decoded, handled and encoded after
# the flush. MCH_COLD_BENCH: the benchmarks directory beside the hook measured (its
# nri_request_cost puts that hook first); MCH_COLD_DEVICE: a device module there, installed first;
# MCH_COLD_STATE: a directory holding the plugin's config.yaml (write_config), its state below it.
# Prints {event: [ns, ...]} as JSON on its last line.
CHILD = r"""
import io, json, os, sys, time, uuid
sys.path.insert(0, os.environ["MCH_COLD_BENCH"])
import nri_request_cost as b  # puts its checkout's hook/ first on sys.path
if os.environ.get("MCH_COLD_DEVICE"):
    __import__(os.environ["MCH_COLD_DEVICE"]).install()
from mixed_cpus_hook.frontends.nri.handlers import Handlers
from mixed_cpus_hook.frontends.nri import plugin as plugin_module
from mixed_cpus_hook.frontends.nri.plugin import METHODS, settle_memory  # requests decoded as the plugin does
from mixed_cpus_hook.node.config import load_config
from mixed_cpus_hook.node.log import Reporter
flush = memoryview(bytearray(int(os.environ["MCH_COLD_FLUSH"])))  # copied into in place: no page faults
source = bytes(len(flush))
pod = b.Pod()
state = os.environ["MCH_COLD_STATE"]
out = {"CreateContainer": [], "UpdateContainer": [], "StopContainer": []}
try:
    reporter = Reporter(stream=io.StringIO(), sink=None)
    h = Handlers(load_config(os.path.join(state, "config.yaml"), cache_dir=os.path.join(state, "cache")), reporter)
    getattr(plugin_module, "defer_writes", lambda engine: None)(h.engine)  # as the plugin runs it (older checkouts: nothing)
    calls = [("CreateContainer", h.create_container), ("UpdateContainer", h.update_container),
             ("StopContainer", h.stop_container)]
    settle_memory()
    clock = time.perf_counter_ns
    warmup = int(os.environ["MCH_COLD_WARMUP"])
    for n in range(warmup + int(os.environ["MCH_COLD_CYCLES"])):
        wire = b.requests(pod.top, pod.uid, uuid.uuid4().hex * 2, True)
        for method, call in calls:
            flush[:] = source
            start = clock()
            reporter.hold()  # as the plugin does: the journal lines after the answer
            call(METHODS[method][0].FromString(wire[method])).SerializeToString()
            took = clock() - start
            reporter.release()
            h.after_answer()
            if n >= warmup:
                out[method].append(took)
finally:
    pod.remove()
print(json.dumps(out))
"""


def parse_child_output(text: str) -> Dict[str, List[int]]:
    """The child's timings: the JSON object on its last non-empty line (a device may print before it)."""
    lines = [line for line in text.splitlines() if line.strip()]
    if not lines:
        raise ValueError("the child printed nothing")
    doc = json.loads(lines[-1])
    if not isinstance(doc, dict) or any(not isinstance(doc.get(e), list) for e in EVENTS):
        raise ValueError(f"not the child's timings: {lines[-1][:80]!r}")
    return {e: [int(v) for v in doc[e]] for e in EVENTS}


def compute_p50s(rounds: Sequence[Dict[str, List[int]]]) -> Dict[str, float]:
    """Per event, the median over rounds of each round's p50, in microseconds."""
    return {e: statistics.median(statistics.median(r[e]) for r in rounds) / 1e3 for e in EVENTS}


def format_row(label: str, p50s: Dict[str, float], first: Optional[Dict[str, float]]) -> str:
    """One variant's line: p50 per event and its ratio to ``first`` (None: this is the first)."""
    cells = []
    for e in EVENTS:
        ratio = f" ({p50s[e] / first[e]:4.2f})" if first is not None and first[e] else ""
        cells.append(f"{p50s[e]:8.1f}{ratio:7s}")
    return f"{label:44.44s} " + " ".join(cells)


def parse_cache_size(text: str) -> int:
    """KiB of a cache as sysfs writes its size ("32K", "32768K", "1M"); 0 for anything else."""
    text = text.strip()
    scale = {"K": 1, "M": 1024}.get(text[-1:], 0)
    return int(text[:-1]) * scale if scale and text[:-1].isdigit() else 0


def compute_flush_mib(sizes_kib: Sequence[int]) -> int:
    """The buffer that evicts every cache: twice the largest (the shared last-level cache), at least
    8 MiB (a machine whose sysfs lists no cache)."""
    return max(8, -(-2 * max(sizes_kib, default=0) // 1024))


def read_cache_sizes(sys_root: str = "/sys") -> List[int]:
    """KiB of each cache of CPU 0 that sysfs lists (none when it lists none)."""
    folder = os.path.join(sys_root, "devices/system/cpu/cpu0/cache")
    sizes = []
    for entry in sorted(os.listdir(folder)) if os.path.isdir(folder) else []:
        try:
            with open(os.path.join(folder, entry, "size"), encoding="ascii") as f:
                sizes.append(parse_cache_size(f.read()))
        except OSError:
            continue
    return sizes


def write_config(state: str) -> str:
    """The plugin's config for a run in ``state`` (its records below it; the pod's namespace "perf"
    allowed, no kubelet checkpoint, as in nri_request_cost.py); returns its path."""
    path = os.path.join(state, "config.yaml")
    with open(path, "w", encoding="utf-8") as f:
        f.write(f'shared_cpus: "0"\nstate_dir: {state}/state\ncgroup_root: /sys/fs/cgroup\nfailure_policy: fail\n'
                f'allowed_namespaces: ["perf"]\nkubelet_state_file: {state}/none/cpu_manager_state\n')
    return path


def run_child(hook: str, device: str, flush_mib: int, cycles: int, tmp: str) -> Dict[str, List[int]]:
    state = tempfile.mkdtemp(prefix="mch-cold-", dir=tmp)
    try:
        write_config(state)
        env = dict(os.environ, MCH_COLD_BENCH=os.path.join(os.path.dirname(hook), "benchmarks"),
                   MCH_COLD_DEVICE=device, MCH_COLD_FLUSH=str(flush_mib << 20), MCH_COLD_CYCLES=str(cycles),
                   MCH_COLD_WARMUP=str(WARMUP), MCH_COLD_STATE=state)
        done = subprocess.run([sys.executable, "-c", CHILD], env=env, capture_output=True, text=True, check=False,
                              cwd="/")
    finally:
        shutil.rmtree(state, ignore_errors=True)
    if done.returncode != 0:
        raise RuntimeError(f"{hook} {device or ''}: exit {done.returncode}: {done.stderr.strip()[-1500:]}")
    return parse_child_output(done.stdout)


def add_cold_args(ap: argparse.ArgumentParser, what: str) -> None:
    """--hook, --flush and --rounds, as the memory-cold benchmarks take them (``what``: flushed before each)."""
    ap.add_argument("--hook", action="append", default=[], help="a checkout's hook directory (repeatable; "
                    "default: this checkout's)")
    ap.add_argument("--flush", type=int, help=f"MiB copied over before each {what} (default: twice the largest "
                    "cache, at least 8)")
    ap.add_argument("--rounds", type=int, default=3, help="interleaved rounds (default 3)")


def main(argv: Sequence[str]) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    add_cold_args(ap, "event")
    ap.add_argument("--devices", action="store_true", help="also the duties device and the Go plugin's work in "
                    "Python, on the first --hook")
    ap.add_argument("--cycles", type=int, default=250, help="asking containers per child (default 250)")
    args = ap.parse_args(argv)
    if os.geteuid() != 0 or not os.path.isfile("/sys/fs/cgroup/cpuset/cpuset.cpus") \
            or not os.path.isdir("/sys/fs/cgroup/cpu"):
        print("nri_cold_latency: needs root and cgroup v1 cpuset and cpu under /sys/fs/cgroup")
        return 2
    if args.flush is None:
        args.flush = compute_flush_mib(read_cache_sizes())
    hooks = [os.path.abspath(h) for h in args.hook] or [os.path.join(REPO, "hook")]
    for h in hooks:
        if not os.path.isfile(os.path.join(os.path.dirname(h), "benchmarks", "nri_request_cost.py")):
            print(f"nri_cold_latency: {h}: not a checkout's hook directory (no benchmarks/nri_request_cost.py "
                  "beside it)")
            return 2
    variants: List[Tuple[str, str, str]] = [(h, "", h) for h in hooks]
    if args.devices:
        variants += [(hooks[0], "nri_duties", "every duty, straight-line (nri_duties)"),
                     (hooks[0], "nri_go_work", "Go's work in Python (nri_go_work)")]
    tmp = "/dev/shm" if os.path.isdir("/dev/shm") else "/tmp"
    results: Dict[int, List[Dict[str, List[int]]]] = {i: [] for i in range(len(variants))}
    for _ in range(args.rounds):
        for i, (hook, device, _label) in enumerate(variants):
            results[i].append(run_child(hook, device, args.flush, args.cycles, tmp))
    print(f"wall time per event from cold caches ({args.flush} MiB flushed before each), p50 us, medians of "
          f"{args.rounds} interleaved rounds of {args.cycles} cycles; Python {sys.version.split()[0]}")
    print(f"{'variant':44} " + " ".join(f"{e[:-len('Container')]:>15}" for e in EVENTS))
    first = compute_p50s(results[0])
    for i, (_hook, _device, label) in enumerate(variants):
        print(format_row(label, compute_p50s(results[i]), first if i else None))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
