#!/usr/bin/env python3
"""What one container's NRI events cost the plugin, in counts that do not move with the machine.

Timings on a shared 2-core machine move by up to 1.7x between runs of the same code; two versions
of the request path are compared here by counts instead, per cycle of an asking container's
CreateContainer, UpdateContainer (kubelet's rewrite) and StopContainer, on the real handlers (as
``benchmarks/nri_request_cost.py`` builds them: containerd 1.7's requests, a real cgroup v1 pod
cgroup, the state on tmpfs):

* user-space instructions (``valgrind --tool=callgrind``; the same total to 0.1% run to run,
  whatever else the machine does; kernel time is not in it);
* system calls by name (``strace -f -c``).

Each is the difference of a run of ``--cycles A B`` cycles (default 20 and 120), divided by
B - A: start-up, imports and the warm-up cancel out.

    sudo .venv/bin/python benchmarks/nri_request_counts.py                      # this checkout
    sudo .venv/bin/python benchmarks/nri_request_counts.py --hook /path/to/other/hook --hook hook

Each ``--hook`` is a checkout's ``hook`` directory; its own ``benchmarks/nri_request_cost.py``
builds the requests. Prints a line per checkout; exits 0 once measured, 2 when it cannot measure
(no root, no cgroup v1 cpuset and cpu, no valgrind or strace).
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile
from typing import Dict, List, Optional, Tuple

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# The child: the handlers of HOOK (a checkout's hook/) in a loop, CYCLES cycles after 50 of warm-up.
DRIVER = r"""
import io, os, shutil, sys, tempfile, uuid
hook = os.environ["MCH_COUNT_HOOK"]
sys.path.insert(0, os.path.join(os.path.dirname(hook), "benchmarks"))
import nri_request_cost as b  # puts its own checkout's hook/ first on sys.path
from mixed_cpus_hook.frontends.nri.handlers import Handlers
from mixed_cpus_hook.frontends.nri import plugin as plugin_module
from mixed_cpus_hook.frontends.nri.plugin import METHODS, settle_memory  # requests decoded as the plugin does
from mixed_cpus_hook.node.config import load_config
from mixed_cpus_hook.node.log import Reporter
settle_memory()
pod = b.Pod()
state = tempfile.mkdtemp(prefix="mch-request-counts-", dir=os.environ["MCH_COUNT_TMP"])
try:
    config = os.path.join(state, "config.yaml")
    with open(config, "w") as f:
        f.write(f'shared_cpus: "0"\nstate_dir: {state}/state\ncgroup_root: {b.CG}\nfailure_policy: fail\n'
                f'allowed_namespaces: ["perf"]\nkubelet_state_file: {state}/none/cpu_manager_state\n')
    h = Handlers(load_config(config, cache_dir=os.path.join(state, "cache")), Reporter(stream=io.StringIO(), sink=None))
    getattr(plugin_module, "defer_writes", lambda engine: None)(h.engine)  # as the plugin runs it (older checkouts: nothing)
    wire = b.requests(pod.top, pod.uid, uuid.uuid4().hex * 2, True)
    calls = [("CreateContainer", h.create_container), ("UpdateContainer", h.update_container),
             ("StopContainer", h.stop_container)]
    for _ in range(50 + int(os.environ["MCH_COUNT_CYCLES"])):
        for method, call in calls:
            call(METHODS[method][0].FromString(wire[method])).SerializeToString()
            h.after_answer()  # what the plugin does once the answer is sent (the records saved) counts too
finally:
    shutil.rmtree(state, ignore_errors=True)
    pod.remove()
"""


def parse_callgrind_total(text: str) -> Optional[int]:
    """The instructions a callgrind run collected, from its stderr ("==N== Collected : 1234")."""
    found = re.findall(r"Collected\s*:\s*([0-9]+)", text)
    return int(found[-1]) if found else None


def parse_strace_summary(text: str) -> Dict[str, int]:
    """Calls per system call name from ``strace -c``'s table (its "total" line left out)."""
    calls: Dict[str, int] = {}
    for line in text.splitlines():
        fields = line.split()
        if len(fields) >= 5 and fields[-1] != "total" and re.fullmatch(r"[a-z_0-9]+", fields[-1]) \
                and fields[3].isdigit() and re.fullmatch(r"[0-9.]+", fields[0]):
            calls[fields[-1]] = int(fields[3])
    return calls


def run_child(hook: str, cycles: int, prefix: List[str], tmp: str) -> subprocess.CompletedProcess:
    env = dict(os.environ, MCH_COUNT_HOOK=os.path.abspath(hook), MCH_COUNT_CYCLES=str(cycles), MCH_COUNT_TMP=tmp)
    return subprocess.run(prefix + [sys.executable, "-c", DRIVER], env=env, capture_output=True, text=True,
                          check=False, cwd="/")


def count(hook: str, low: int, high: int, tmp: str) -> Tuple[float, Dict[str, float]]:
    """(instructions, {system call: calls}) per cycle for the handlers of ``hook``."""
    totals = []
    for cycles in (low, high):
        done = run_child(hook, cycles, ["valgrind", "--tool=callgrind", "--callgrind-out-file=/dev/null"], tmp)
        total = parse_callgrind_total(done.stderr)
        if done.returncode != 0 or total is None:
            raise RuntimeError(f"callgrind run of {hook} failed: {done.stderr[-1500:]}")
        totals.append(total)
    summaries = []
    for cycles in (low, high):
        with tempfile.NamedTemporaryFile("r", dir=tmp, suffix=".strace") as out:
            done = run_child(hook, cycles, ["strace", "-f", "-c", "-o", out.name], tmp)
            if done.returncode != 0:
                raise RuntimeError(f"strace run of {hook} failed: {done.stderr[-1500:]}")
            summaries.append(parse_strace_summary(out.read()))
    per = high - low
    syscalls = {name: (summaries[1].get(name, 0) - summaries[0].get(name, 0)) / per
                for name in set(summaries[0]) | set(summaries[1])}
    return (totals[1] - totals[0]) / per, {k: v for k, v in syscalls.items() if v >= 0.5}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--hook", action="append", help="a checkout's hook/ directory (default: this checkout's); repeatable")
    ap.add_argument("--cycles", type=int, nargs=2, default=(20, 120), metavar=("A", "B"))
    args = ap.parse_args()
    missing = [tool for tool in ("valgrind", "strace") if shutil.which(tool) is None]
    if os.geteuid() != 0 or not os.path.isfile("/sys/fs/cgroup/cpuset/cpuset.cpus") or missing:
        print("nri_request_counts: needs root, cgroup v1 cpuset and cpu under /sys/fs/cgroup, valgrind and strace"
              + (f" (missing: {', '.join(missing)})" if missing else ""))
        return 2
    low, high = args.cycles
    tmp_base = "/dev/shm" if os.path.isdir("/dev/shm") else None
    print(f"per Create + Update + Stop cycle of an asking container (difference of {low} and {high} cycles, "
          f"Python {sys.version.split()[0]})")
    with tempfile.TemporaryDirectory(prefix="mch-request-counts-", dir=tmp_base) as tmp:
        for hook in args.hook or [os.path.join(REPO, "hook")]:
            instructions, syscalls = count(hook, low, high, tmp)
            top = ", ".join(f"{name} {n:g}" for name, n in sorted(syscalls.items(), key=lambda x: (-x[1], x[0])))
            print(f"{hook}: {instructions / 1e6:.3f}M instructions, {sum(syscalls.values()):g} system calls ({top})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
