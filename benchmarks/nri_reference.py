#!/usr/bin/env python3
"""The NRI plugin beside a Go NRI plugin doing the same work: answer times, CPU and memory ratios.

What runs: the reference tool of this machine kind (``../shared/tools/nri-reference/run``, its
README says everything it does): five private containerd 1.7.24 instances driven interleaved
over CRI (no plugin; a Go plugin on containerd/nri's ``pkg/stub`` doing the same cgroup work;
``mixed-cpus-hook nri``; both plugins behind a relay that times each NRI answer), 200 cycles of
CreateContainer, UpdateContainerResources and RemoveContainer each. It measures ``git archive
HEAD`` of this checkout: commit first.

This script runs it ``--runs`` times (each run is its own interleaved comparison) and prints, per
run, the ratios the goals are about and each answer's p99, then their medians over the runs, and
the last run's whole table. Goals (issue 16): CRI CreateContainer p50 within 5% of the Go plugin's;
each answer p50 (CreateContainer, UpdateContainer, StopContainer) at most 2x the Go plugin's and its
p99 at most 5 ms, also while the machine is busy (``--busy``); plugin CPU per container at most
1.5x; RSS at most 1.5x, flat over 1000 containers (``--cycles 1000``). The tool's own last line
judges all but the p99, which this script judges from the same result. Informational: exits 0 once
the tool ran, 2 when it could not run (not there, no root).

``--busy`` keeps the machine busy through every run, as the issue measured it ("with a test suite
running beside it"): this checkout's unit suite in a loop (``python -m pytest tests/unit``, its
temporary files in a temporary directory), in a session of its own that is stopped (its whole
process group) when the runs end; the load averages at its start and stop are printed. Every figure
of such a run, the devices' too, is a busy one (``make bench-nri NRI_BUSY=1``).

    .venv/bin/python benchmarks/nri_reference.py              # one run, about 1 minute once set up
    .venv/bin/python benchmarks/nri_reference.py --runs 5     # five, and the medians
    .venv/bin/python benchmarks/nri_reference.py --runs 3 --tmpfs --floor --no-record-io --go-work --duties   # `make bench-nri`

``--tmpfs`` runs the tool with TMPDIR=/dev/shm: every configuration's directories (containerd's
roots, the plugin's state directory) on tmpfs, as the plugin's state is on a node (/run). Without
it they are on the disk that holds /tmp, where each record the plugin renames into place costs
ext4 a flush of its data (auto_da_alloc: about 200 us more per save on this machine).

``--state-tmpfs`` is a node's layout: containerd's directories where the tool puts them (the disk,
as /var/lib/containerd is on a node), the plugin's state on tmpfs (as /run is): the wrapper points
the configuration the tool wrote at a directory below /dev/shm, one per configuration and run
(``format_state_tmpfs``; every wrapper below gets it too). The issue measured on the disk layout
(the tool's default), where the plugin's records cost ext4 a flush each, which a node's /run never does.

``--floor`` adds one run in which no container asks (the plugin's configuration gets an
``annotation_prefix`` no pod uses, through the tool's NRI_REFERENCE_WRAP): the plugin then answers
every event without deciding anything, so its ratios to the Go plugin (which still does the work)
are the cost of the plugin's framework alone: ttrpc, protobuf, the event loop, the interpreter.
That run's verification problems are expected (nothing is mixed) and its ratios are not goals.

``--go-work`` adds one run in which the plugin's handlers do only the Go plugin's work
(``benchmarks/nri_go_work.py``, through NRI_REFERENCE_WRAP): the product's event loop, ttrpc and
protobuf, and handlers that check the annotation, read and raise the pod's quota, answer and
remember the container in a dict, as the Go plugin's do. Its ratios are the floor of a Python
plugin for this job on this framework: what is above them in the product's is its own duties
(records, the state lock, kubelet's checkpoint, checking every value the runtime sends, reading
back what it wrote, the journal).

``--duties`` adds one run in which the plugin's handlers do every duty the product keeps on the
request path (bounds, node facts, the lock, record lookups, the check that no other record holds
the CPUs, both records journaled before the answer and written after it, the pod quota read,
written and read back, a log line) with the system calls the product makes for them, in one straight-line function per event
(``benchmarks/nri_duties.py``): the floor of a Python plugin that keeps the product's guarantees.
Between it and ``--go-work`` is what the duties cost; between the product and it, what the
product's structure (engine, layers, record classes) costs.

``--python PATH`` runs the plugin on that interpreter (default: the ``python3`` on PATH, as the
tool's own setup picks it): the tool's ``H/venv-mch`` is made again with it whenever it was made with
another one (a ``python3`` shim first on the tool's PATH; nothing else of the tool changes). A node
runs the plugin on its distribution's interpreter (the RPM's ``/usr/bin/python3``, the image's
UBI python3), built with profile-guided and link-time optimization; a pyenv build without
``--enable-optimizations`` runs the same Python code about 20% slower (on this machine, 2026-12-05).
The machine (its CPU model and CPUs) and the interpreter are printed with the results. Python 3.9's
``-m venv`` leaves a ``tmp*cacert.pem`` in the tool's TMPDIR at every build of venv-mch: those that
appear during the run are removed after it.
A venv-mch made through the shim cannot start once the shim's directory is gone, and the tool's setup
checks only the commit: it is removed after the run, and the tool's next run makes it again.

``--rootfs DIR`` runs the plugin (and the devices) on another tree's interpreter and its distribution's
packages of the dependencies: ``DIR/usr/bin/python3`` started through ``DIR``'s own dynamic loader
and libraries (nothing of the tree but the kernel is this machine's), the measured commit's source
(the tool's ``H/src/hook``) first on its path, as ``python3 -m mixed_cpus_hook``. With the Debian
bullseye tree of ``scripts/fetch-bullseye.sh deps`` (Python 3.9.2 built with PGO and LTO, protobuf
3.12.4 with its C++ implementation, as Debian and Fedora build it) this is the closest this archive
has to a RHEL 9 node's RPM (its python3 3.9, its python3-protobuf 3.14): ``make bench-nri
NRI_ROOTFS=$(sh scripts/fetch-bullseye.sh deps)``.

``--cycles N`` runs N containers per run instead of the tool's 200; each run prints our plugin's RSS
after the warm-up and after the cycles, and the growth per 1000 containers (the RSS goal asks for it
flat over 1000: ``--cycles 1000``).

``--no-record-io`` adds one run in which the plugin keeps its records in memory only
(``benchmarks/nri_memory_records.py``, through NRI_REFERENCE_WRAP): every record is still built
and formatted as JSON, but never opened, written, renamed or removed. It measures what the record
files cost an answer, and so what dropping them (and with them every crash-exactness guarantee)
could win at most; such a plugin is not a product mode.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shlex
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
from typing import Dict, List, Optional, Tuple

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def find_tool() -> str:
    """``shared/tools/nri-reference/run`` beside this checkout or beside one of its parents."""
    here = REPO
    while True:
        parent = os.path.dirname(here)
        candidate = os.path.join(parent, "shared", "tools", "nri-reference", "run")
        if os.path.exists(candidate) or parent == here:
            return candidate
        here = parent


DEFAULT_TOOL = find_tool()
HOME = os.environ.get("NRI_REFERENCE_HOME", os.path.expanduser("~/.cache/nri-reference"))
GOALS = {"cri_create": 1.05, "create": 2.0, "update": 2.0, "stop": 2.0, "cpu": 1.5, "rss": 1.5}
LABELS = {"cri_create": "CRI CreateContainer p50 c/b", "create": "answer CreateContainer p50 c'/b'",
          "update": "answer UpdateContainer p50 c'/b'", "stop": "answer StopContainer p50 c'/b'",
          "cpu": "plugin CPU per container c/b", "rss": "plugin RSS c/b"}
# The other answer goal is absolute: each answer's p99 at most 5 ms, also while the machine is
# busy (--busy). The tool's own last line does not judge it; read_p99s reads it from the same result.
P99_GOAL_MS = 5.0
P99_METHODS = (("create", "CreateContainer"), ("update", "UpdateContainer"), ("stop", "StopContainer"))


def pct(values: List[float], q: float) -> float:
    """The q-quantile, interpolated (as the tool's kit/report.py)."""
    xs = sorted(values)
    if not xs:
        return float("nan")
    k = (len(xs) - 1) * q
    lo = int(k)
    hi = min(lo + 1, len(xs) - 1)
    return xs[lo] + (xs[hi] - xs[lo]) * (k - lo)


# The goal ratios read from per-cycle samples (the others, CPU and RSS, are one figure per run):
# key -> (our configuration, the Go plugin's, the samples' place in a configuration, paired).
# The CRI round trips are paired by cycle (the tool drives every configuration once a cycle, in a
# shuffled order, so cycle i's two samples met the same moment of the machine); the relay's answers
# are not (a configuration's answers are counted apart, and one may be missing).
SAMPLED = {
    "cri_create": ("c", "b", ("times_ms", "create"), True),
    "create": ("cp", "bp", ("answers_ms", "CreateContainer"), False),
    "update": ("cp", "bp", ("answers_ms", "UpdateContainer"), False),
    "stop": ("cp", "bp", ("answers_ms", "StopContainer"), False),
}
INTERVAL_DRAWS = 1000
INTERVAL_LEVEL = 0.95


def read_samples(result: Dict) -> Dict[str, Tuple[List[float], List[float]]]:
    """One result.json's per-cycle samples of each SAMPLED ratio: {key: (ours, the Go plugin's)}."""
    c = result["configs"]
    return {key: (list(c[ours][field][name]), list(c[theirs][field][name]))
            for key, (ours, theirs, (field, name), _paired) in SAMPLED.items()}


def read_ratios(result: Dict) -> Dict[str, float]:
    """The goal ratios of one result.json (as the tool's kit/goals.py computes them)."""
    c = result["configs"]
    out = {key: pct(ours, .5) / pct(theirs, .5) for key, (ours, theirs) in read_samples(result).items()}
    cpu = {k: c[k]["cpu_per_100_containers"]["plugin"]["sched_ms_per_100"] for k in "bc"}
    out["cpu"] = cpu["c"] / cpu["b"]
    out["rss"] = c["c"]["sample_end"]["plugin"]["rss_kib"] / c["b"]["sample_end"]["plugin"]["rss_kib"]
    return out


def compute_median_ratio_interval(runs: List[Tuple[List[float], List[float]]], paired: bool, seed: int = 0,
                                  draws: int = INTERVAL_DRAWS, level: float = INTERVAL_LEVEL) -> Tuple[float, float]:
    """The ``level`` percentile interval of the judged figure, the median over the runs of each run's
    p50(ours) / p50(theirs), by a bootstrap stratified by run: every draw resamples each run's cycles
    (the same cycles for both sides when ``paired``), so the interval is that of the figure the goal
    is judged on with the runs that were made, from the spread of their own samples. Pure and
    reproducible (``seed``); ValueError for a run without samples or a paired run of unequal sides."""
    import random

    if not runs or any(not ours or not theirs for ours, theirs in runs):
        raise ValueError("every run needs samples on both sides")
    if paired and any(len(ours) != len(theirs) for ours, theirs in runs):
        raise ValueError("paired samples of unequal length")
    rng = random.Random(seed)
    figures = []
    for _ in range(draws):
        ratios = []
        for ours, theirs in runs:
            picked = rng.choices(range(len(ours)), k=len(ours))
            mine = [ours[i] for i in picked]
            other = [theirs[i] for i in picked] if paired else rng.choices(theirs, k=len(theirs))
            ratios.append(pct(mine, .5) / pct(other, .5))
        figures.append(statistics.median(ratios))
    tail = (1 - level) / 2
    return pct(figures, tail), pct(figures, 1 - tail)


def format_verdict(value: float, goal: float, interval: Optional[Tuple[float, float]] = None) -> str:
    """The goal's verdict on the judged figure (the issue's: its median over the runs), and what its
    interval says of it when there is one: held or missed beyond the tool's spread, or the goal
    inside the interval (then more runs, not this verdict, would tell)."""
    verdict = "holds" if value <= goal else "falls short"
    if interval is None:
        return verdict
    lo, hi = interval
    if hi <= goal:
        where = "all of it within the goal"
    elif lo > goal:
        where = "all of it beyond the goal"
    else:
        where = "the goal inside it: within the tool's spread"
    return f"{verdict}  [{INTERVAL_LEVEL:.0%}: {lo:.3f}-{hi:.3f}, {where}]"


def format_median_lines(per_run: List[Dict[str, float]],
                        sample_runs: List[Dict[str, Tuple[List[float], List[float]]]]) -> List[str]:
    """Each goal's median over the runs and its verdict; for a ratio read from per-cycle samples (when
    every run's are there), its interval too (compute_median_ratio_interval), to three decimals."""
    lines = []
    for key, label in LABELS.items():
        med = statistics.median(r[key] for r in per_run)
        interval = None
        if key in SAMPLED and sample_runs:
            interval = compute_median_ratio_interval([s[key] for s in sample_runs], SAMPLED[key][3])
        lines.append(f"  {label:36} {med:6.3f}  (<= {GOALS[key]})  {format_verdict(med, GOALS[key], interval)}")
    return lines


def read_p99s(result: Dict) -> Dict[str, Tuple[float, float]]:
    """Each answer's p99 at the relay, in ms: {create|update|stop: (ours c', the Go plugin's b')}."""
    c = result["configs"]
    return {key: (pct(c["cp"]["answers_ms"][method], .99), pct(c["bp"]["answers_ms"][method], .99))
            for key, method in P99_METHODS}


def format_p99s(p99s: Dict[str, Tuple[float, float]]) -> str:
    """One run's answer p99s, ours with the Go plugin's in brackets."""
    return "answer p99 ms " + "  ".join(f"{key} {ours:.2f} (Go {go:.2f})" for key, (ours, go) in p99s.items())


def format_p99_medians(per_run: List[Dict[str, Tuple[float, float]]]) -> List[str]:
    """The medians over the runs of each answer's p99, judged against P99_GOAL_MS (absolute, not a ratio)."""
    lines = []
    for key, method in P99_METHODS:
        ours = statistics.median(p[key][0] for p in per_run)
        go = statistics.median(p[key][1] for p in per_run)
        verdict = "holds" if ours <= P99_GOAL_MS else "falls short"
        lines.append(f"  {'answer ' + method + ' p99 c (ms)':36} {ours:5.2f}  (<= {P99_GOAL_MS:.0f} ms)  {verdict}"
                     f"  (Go {go:.2f})")
    return lines


# --busy: the machine kept busy beside the tool, as the issue measured it ("with a test suite
# running beside it"): this checkout's unit suite, over and over.
def format_busy_command(python: str, scratch: str) -> Tuple[List[str], Dict[str, str]]:
    """The unit suite's command line and environment, run again and again by BusyLoad: everything it
    writes below ``scratch`` (its TMPDIR, pytest's --basetemp, the suite's tmpfs root MCH_TESTS_SHM),
    so that removing ``scratch`` removes it all, even after a run that was killed."""
    argv = [python, "-m", "pytest", "-q", "-p", "no:cacheprovider", "--basetemp", os.path.join(scratch, "basetemp"),
            os.path.join(REPO, "tests", "unit")]
    return argv, dict(os.environ, TMPDIR=os.path.join(scratch, "tmp"), MCH_TESTS_SHM=os.path.join(scratch, "shm"))


class BusyLoad:
    """``argv`` run again and again beside the measurement (with ``env``), each run in a session of its
    own, from a thread started on enter. On exit the run under way gets SIGINT (pytest then tears its
    fixtures down), and its whole group SIGKILL once it ended or ``grace`` seconds passed (a run that
    ignored SIGINT, and whatever it left in its group). A run's leader is reaped only after it ended,
    and the last one only after that SIGKILL: while ``_proc`` is set its pid is still its group's, so
    the signals reach only what this class started. ``load`` says the load averages at
    start and stop, ``runs`` how many runs began."""

    def __init__(self, argv: List[str], env: Optional[Dict[str, str]] = None, grace: float = 20.0) -> None:
        self.argv = argv
        self.env = env
        self.grace = grace
        self.load = ""
        self.runs = 0
        self._proc: Optional[subprocess.Popen] = None
        self._stop = False
        self._lock = threading.Lock()
        self._thread = threading.Thread(target=self._loop, daemon=True)

    def _loop(self) -> None:
        while True:
            with self._lock:
                if self._stop:
                    return
                proc = self._proc = subprocess.Popen(self.argv, env=self.env, start_new_session=True,
                                                     stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                                     stderr=subprocess.DEVNULL)
                self.runs += 1
            os.waitid(os.P_PID, proc.pid, os.WEXITED | os.WNOWAIT)  # ended, not reaped: the pid stays reserved
            with self._lock:
                if self._stop:
                    return  # left unreaped: __exit__ kills what is left in its group, then reaps it
                proc.wait()
                self._proc = None

    def _signal(self, sig: int) -> None:
        with self._lock:
            if self._proc is not None:
                try:
                    os.killpg(self._proc.pid, sig)
                except ProcessLookupError:
                    pass

    def __enter__(self) -> "BusyLoad":
        self.load = f"load {os.getloadavg()[0]:.1f}"
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        import signal

        self.load += f" -> {os.getloadavg()[0]:.1f}"
        with self._lock:
            self._stop = True
        self._signal(signal.SIGINT)
        self._thread.join(self.grace)
        self._signal(signal.SIGKILL)  # the group: a run that ignored SIGINT, and what a run left in it
        self._thread.join()
        if self._proc is not None:
            self._proc.wait()
            self._proc = None


def format_rss_growth(result: Dict) -> str:
    """Our plugin's resident memory after the tool's warm-up and after its cycles (the RSS goal asks
    for it flat over 1000), and the growth; per 1000 containers only from 1000 on (the first few
    hundred after the tool's short warm-up still fill the allocator's pools: a shorter run's growth
    says nothing per container)."""
    start = result["configs"]["c"]["sample_start"]["plugin"]["rss_kib"]
    end = result["configs"]["c"]["sample_end"]["plugin"]["rss_kib"]
    cycles = len(result["configs"]["c"]["times_ms"]["create"])
    per = f", {(end - start) * 1000 / cycles:+.0f} KiB per 1000" if cycles >= 1000 else ""
    return f"plugin RSS {start} -> {end} KiB over {cycles} containers ({end - start:+d} KiB{per})"


# NRI_REFERENCE_WRAP's command for --floor: the tool calls it as `WRAP KEY ARGV...`; for our plugin
# ARGV is `mixed-cpus-hook --config FILE nri --socket PATH` (the tool's kit/perfanchor.py).
FLOOR_WRAP = """#!/bin/sh
key=$1; shift
case "$1" in
  *mixed-cpus-hook) [ "$2" = --config ] && echo 'annotation_prefix: floor.invalid' >> "$3"
      {run_plugin} ;;
esac
exec "$@"
"""

# How a wrapper starts our plugin, ``$1`` being the venv's mixed-cpus-hook and the rest its arguments:
# as the tool would, or (--rootfs) as ``python3 -m mixed_cpus_hook`` on another tree's interpreter.
RUN_AS_IS = 'exec "$@"'
# The interpreter a device script runs on: the venv's, beside its mixed-cpus-hook.
VENV_PYTHON = '"$(dirname "$1")/python"'


def format_rootfs_python(root: str, hook: str) -> str:
    """The shell words that run ``root``'s /usr/bin/python3 on this machine with nothing of it but
    the kernel: through the tree's own dynamic loader and its libraries (its libc, its libprotobuf),
    the product's source ``hook`` first on its path, the tree's site directories after it."""
    lib = os.path.join(root, "usr", "lib", "x86_64-linux-gnu")
    return " ".join(shlex.quote(w) for w in ("env", f"PYTHONPATH={hook}", os.path.join(lib, "ld-linux-x86-64.so.2"),
                                             "--library-path", lib, os.path.join(root, "usr", "bin", "python3")))


def format_run_plugin(python: Optional[str]) -> str:
    """The wrapper's line that starts our plugin (``python``: format_rootfs_python's words, or None for
    the venv's own mixed-cpus-hook)."""
    return RUN_AS_IS if python is None else f'shift; exec {python} -m mixed_cpus_hook "$@"'


ROOTFS_WRAP = """#!/bin/sh
key=$1; shift
case "$1" in
  *mixed-cpus-hook) {run_plugin} ;;
esac
exec "$@"
"""


# --no-record-io: our plugin runs under its own interpreter with the store patched to memory;
# --go-work: with its handlers replaced by the Go plugin's work. The same wrapper, another script.
SCRIPT_WRAP = """#!/bin/sh
key=$1; shift
case "$1" in
  *mixed-cpus-hook) exec {python} {script} "$@" ;;
esac
exec "$@"
"""


# --sections: our plugin under nri_sections.py, its sections written per configuration key (c, cp).
SECTIONS_WRAP = """#!/bin/sh
key=$1; shift
case "$1" in
  *mixed-cpus-hook) MCH_SECTIONS_OUT={out}/sections-$key.json MCH_SECTIONS_GO_WORK={go_work} \\
      exec {python} {script} "$@" ;;
esac
exec "$@"
"""


def run_sections(tool: str, env: Dict[str, str], go_work: bool, python: str = VENV_PYTHON,
                 state_root: Optional[str] = None) -> Optional[Tuple[Dict[str, float], Dict[str, List[int]]]]:
    """One run of the tool with the plugin cut into timed sections (nri_sections.py): the run's
    ratios and the sections of the plugin behind the relay (the one whose answers are timed)."""
    with tempfile.TemporaryDirectory(prefix="nri-reference-sections-") as tmp:
        wrap = format_wrap_env(tmp, SECTIONS_WRAP.format(
            out=shlex.quote(tmp), go_work=int(go_work), python=python,
            script=shlex.quote(os.path.join(REPO, "benchmarks", "nri_sections.py"))), state_root)
        run = run_tool(tool, dict(env, NRI_REFERENCE_WRAP=wrap))
        try:
            with open(os.path.join(tmp, "sections-cp.json"), encoding="utf-8") as f:
                sections = json.load(f)
        except (OSError, ValueError) as exc:
            print(f"nri_reference: no sections from the plugin ({exc})")
            return None
    if run is None:
        return None
    return read_ratios(run["result"]), sections


def format_sections(product: Dict[str, List[int]], go_work: Dict[str, List[int]]) -> List[str]:
    """The framework's sections, then per event its call, its handler and the handler's sections:
    calls per container cycle (inside a handler: per event) and the median in microseconds (inside
    a handler: of the section's sum in one event), the product's beside the Go plugin's work in
    Python (empty where its handlers have no such section). What runs once per connection
    (Configure, Synchronize) is left out."""
    from nri_sections import SECTIONS  # beside this script

    inner = [label for _m, _o, attr, label in SECTIONS if not label.endswith(" handler") and attr != "_read"]
    order: List[Tuple[str, str]] = [("frame read (recv, demux)", "frame read (recv, demux)")]
    for event in ("CreateContainer", "UpdateContainer", "StopContainer", "StateChange"):
        order.append((f"{event} call (decode, handler, encode)", f"{event} call (decode, handler, encode)"))
        order.append((f"{event} handler", f"{event} handler"))
        order.extend((f"{event} / {label}", f"  {label}") for label in inner)

    def cell(sections: Dict[str, List[int]], key: str) -> str:
        times = sections.get(key)
        cycles = len(sections.get("CreateContainer handler", [])) or 1
        if not times:
            return ""
        calls = sections.get(key + " (calls)")
        per = sum(calls) / len(calls) if calls else len(times) / cycles
        return f"{per:5.2f} {statistics.median(times) / 1000:9.1f}"

    cycles = len(product.get("CreateContainer handler", [])) or 1
    lines = [f"  {'section (wall time in the tool)':46} {'product':>16} {'Go work in Python':>18}",
             f"  {'':46} {'calls  median us':>16} {'calls  median us':>18}"]
    for key, label in order:
        if len(product.get(key, [])) < cycles / 10:  # not there, or once per connection
            continue
        lines.append(f"  {label:46} {cell(product, key):>16} {cell(go_work, key):>18}")
    return lines


def run_tool(tool: str, env: Dict[str, str]) -> Optional[Dict]:
    """One run of the tool: its result.json and table.txt, or None (printed why) when it could not run."""
    done = subprocess.run([tool], env=env, capture_output=True, text=True, check=False)
    result_path = os.path.join(HOME, "out", "result.json")
    if not os.path.exists(os.path.join(HOME, "out", "table.txt")) or "cannot run" in done.stdout:
        print(done.stdout[-2000:] + done.stderr[-2000:])
        return None
    with open(result_path, encoding="utf-8") as f:
        result = json.load(f)
    with open(os.path.join(HOME, "out", "table.txt"), encoding="utf-8") as f:
        table = f.read()
    load = done.stdout.strip().splitlines()[-1] if done.stdout.strip() else ""
    return {"result": result, "table": table, "load": load}


def parse_cpu_model(cpuinfo: str) -> str:
    """The first ``model name`` of /proc/cpuinfo's text, its spaces squeezed ("" where there is none:
    an architecture that names its CPUs otherwise)."""
    for line in cpuinfo.splitlines():
        key, sep, value = line.partition(":")
        if sep and key.strip() == "model name":
            return " ".join(value.split())
    return ""


def read_machine(proc_root: str = "/proc") -> str:
    """What the ratios were measured on, printed with them: they move with the CPU (Go gains more
    from a faster one than the interpreter does; docs/DEVNOTES.md, "A second machine")."""
    try:
        with open(os.path.join(proc_root, "cpuinfo"), encoding="utf-8", errors="replace") as f:
            model = parse_cpu_model(f.read())
    except OSError:
        model = ""
    return f"{model or 'CPU model not listed'}, {len(os.sched_getaffinity(0))} CPUs"


def read_interpreter(python: str, env: Dict[str, str]) -> Optional[Tuple[str, str]]:
    """(the real path of ``python``'s binary, its version), asked of it; None when it does not run."""
    done = subprocess.run([python, "-c", "import os, platform, sys; "
                           "print(os.path.realpath(sys.executable)); print(platform.python_version())"],
                          env=env, capture_output=True, text=True, check=False)
    lines = done.stdout.split()
    return (lines[0], lines[1]) if done.returncode == 0 and len(lines) == 2 else None


def use_interpreter(python: Optional[str], env: Dict[str, str], shim_dir: str) -> Optional[str]:
    """Make the tool build its venv-mch with ``python`` (None: the ``python3`` on PATH): a ``python3``
    shim first on ``env``'s PATH, and venv-mch removed when another interpreter made it (the tool's
    setup makes it again). Returns the interpreter's description, or None (printed why)."""
    if python is not None:
        os.symlink(os.path.abspath(python), os.path.join(shim_dir, "python3"))
        env["PATH"] = shim_dir + os.pathsep + env.get("PATH", "")
    wanted = read_interpreter(python or "python3", env)
    if wanted is None:
        print(f"nri_reference: {python or 'python3'} does not run")
        return None
    venv = os.path.join(HOME, "venv-mch")
    made_with = os.path.realpath(os.path.join(venv, "bin", "python"))
    if os.path.isdir(venv) and made_with != wanted[0]:
        print(f"nri_reference: the tool's venv-mch was made with {made_with}: made again with {wanted[0]}")
        shutil.rmtree(venv)
    return f"{wanted[0]} (Python {wanted[1]})"


def read_rootfs_interpreter(python: str) -> Optional[str]:
    """What format_rootfs_python's words run (Python and protobuf versions, protobuf's implementation),
    asked of it; None (printed why) when it does not run or has no protobuf."""
    probe = ("import platform, sys, google.protobuf as pb; from google.protobuf.internal import api_implementation as a; "
             "print(sys.executable, platform.python_version(), pb.__version__, a.Type())")
    done = subprocess.run(["sh", "-c", f"exec {python} -I -c {shlex.quote(probe)}"], capture_output=True, text=True,
                          check=False, cwd="/")
    words = done.stdout.split()
    if done.returncode != 0 or len(words) != 4:
        print(f"nri_reference: {python}: does not run with protobuf: {done.stderr.strip()[-500:]}")
        return None
    return f"{words[0]} (Python {words[1]}, its distribution's protobuf {words[2]}, {words[3]})"


def forget_broken_venv(venv: str) -> bool:
    """Remove the tool's venv-mch when its interpreter no longer resolves: one made with ``--python``
    links to the ``python3`` shim, which goes with its temporary directory, and the tool's setup
    checks only the commit, so a plain run of the tool at the same commit would start a venv that
    cannot run (its next setup makes it again). Returns whether it was removed."""
    if os.path.isdir(venv) and not os.path.exists(os.path.join(venv, "bin", "python")):
        shutil.rmtree(venv, ignore_errors=True)
        return True
    return False


def list_cacerts(tmpdir: str) -> List[str]:
    """The ``tmp*cacert.pem`` files in ``tmpdir``: what Python 3.9's ensurepip leaves there at every
    ``python3 -m venv`` (pip, run from its wheel, copies certifi's bundle to a temporary file and never
    removes it); the tool's setup makes its venv-mch with the plugin's interpreter at every commit."""
    try:
        return sorted(n for n in os.listdir(tmpdir) if n.startswith("tmp") and n.endswith("cacert.pem"))
    except OSError:
        return []


def remove_leaked_cacerts(tmpdir: str, before: List[str]) -> List[str]:
    """Remove the ``tmp*cacert.pem`` files of ``tmpdir`` that were not there ``before`` the tool ran
    (its venv build left them: run the benchmark alone); returns their names."""
    left = [n for n in list_cacerts(tmpdir) if n not in before]
    for name in left:
        try:
            os.unlink(os.path.join(tmpdir, name))
        except OSError:
            pass
    return left


# --state-tmpfs: the line a wrapper runs before it starts our plugin, which points the configuration
# the tool wrote (``$3``, in the run's own directory) at a state directory below ``root`` (tmpfs),
# one per configuration key and run.
STATE_LINE = ('[ "$2" = --config ] && d=$(dirname "$3") && '
              'sed -i "s|^state_dir: .*|state_dir: {root}/$key-${{d##*/}}|" "$3"\n      ')


def format_state_tmpfs(wrapper: str, root: str) -> str:
    """``wrapper`` (one of the templates above, formatted) with our plugin's state moved below ``root``."""
    head = "*mixed-cpus-hook) "
    if head not in wrapper:
        raise ValueError("not a wrapper of our plugin")
    if not root.startswith("/") or any(c in root for c in '|"$`\\\n:#'):
        raise ValueError(f"state root {root!r}: not an absolute path that sed and YAML take as it is")
    return wrapper.replace(head, head + STATE_LINE.format(root=root), 1)


def format_wrap_env(folder: str, wrapper: str, state_root: Optional[str] = None) -> str:
    """NRI_REFERENCE_WRAP's value for ``wrapper`` (a shell script's text), written to ``folder``/wrap.sh;
    with ``state_root`` (--state-tmpfs), our plugin's state goes below it (format_state_tmpfs)."""
    wrap = os.path.join(folder, "wrap.sh")
    if state_root is not None:
        wrapper = format_state_tmpfs(wrapper, state_root)
    with open(wrap, "w", encoding="utf-8") as f:
        f.write(wrapper)
    os.chmod(wrap, 0o755)
    return f"{wrap} {{key}}"


def run_wrapped(tool: str, env: Dict[str, str], wrapper: str, state_root: Optional[str] = None
                ) -> Optional[Dict[str, float]]:
    """One run of the tool with NRI_REFERENCE_WRAP set to ``wrapper`` (a shell script's text)."""
    with tempfile.TemporaryDirectory(prefix="nri-reference-wrap-") as tmp:
        run = run_tool(tool, dict(env, NRI_REFERENCE_WRAP=format_wrap_env(tmp, wrapper, state_root)))
    if run is None:
        return None
    try:
        return read_ratios(run["result"])
    except (KeyError, TypeError, ZeroDivisionError) as exc:
        print(f"nri_reference: the wrapped run's result.json not as expected ({exc!r})")
        return None


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--runs", type=int, default=1, help="comparisons to run (each about 1 minute)")
    ap.add_argument("--tool", default=DEFAULT_TOOL, help="the reference tool's run script (default: %(default)s)")
    ap.add_argument("--tmpfs", action="store_true", help="TMPDIR=/dev/shm for the tool (the plugin's state on tmpfs, as /run)")
    ap.add_argument("--state-tmpfs", action="store_true",
                    help="a node's layout: containerd's directories on the disk (the tool's TMPDIR), the plugin's "
                         "state on tmpfs (as /run), through the tool's NRI_REFERENCE_WRAP")
    ap.add_argument("--floor", action="store_true", help="one more run in which no container asks: the framework's cost")
    ap.add_argument("--no-record-io", action="store_true",
                    help="one more run with the plugin's records in memory only: what the record files cost")
    ap.add_argument("--go-work", action="store_true",
                    help="one more run with the plugin doing only the Go plugin's work: the interpreter's floor for it")
    ap.add_argument("--duties", action="store_true",
                    help="one more run with the plugin doing the product's duties in the leanest straight-line Python "
                         "(nri_duties.py): the floor of a plugin that keeps the product's guarantees")
    ap.add_argument("--python", metavar="PATH",
                    help="the interpreter the plugin runs on (default: the python3 on PATH, as the tool's setup picks it)")
    ap.add_argument("--cycles", type=int, metavar="N",
                    help="containers per run (the tool's NRI_REFERENCE_CYCLES; default its 200): the RSS goal asks "
                         "for the memory flat over 1000")
    ap.add_argument("--rootfs", metavar="DIR",
                    help="run the plugin on DIR's /usr/bin/python3 and its distribution packages, through DIR's own "
                         "loader and libraries (scripts/fetch-bullseye.sh deps: RHEL 9's stand-in)")
    ap.add_argument("--busy", action="store_true",
                    help="keep the machine busy through every run: this checkout's unit suite in a loop beside the "
                         "tool (the issue's 'also while the machine is busy'; its figures are then busy ones)")
    ap.add_argument("--sections", action="store_true",
                    help="two more runs with the plugin cut into timed sections (nri_sections.py), the product's "
                         "and the Go plugin's work in Python: where an answer's time goes in the tool")
    args = ap.parse_args()
    if not os.access(args.tool, os.X_OK):
        print(f"nri_reference: no reference tool at {args.tool} (this machine kind's ../shared/tools): not run")
        return 2
    if os.geteuid() != 0:
        print("nri_reference: the reference tool runs containerd: needs root")
        return 2
    if args.python and args.rootfs:
        print("nri_reference: --python or --rootfs, not both")
        return 2
    if args.tmpfs and args.state_tmpfs:
        print("nri_reference: --tmpfs or --state-tmpfs, not both (--tmpfs puts the plugin's state on tmpfs too)")
        return 2
    env = dict(os.environ, PROJECT=REPO)
    if args.cycles:
        env["NRI_REFERENCE_CYCLES"] = str(args.cycles)
    if args.tmpfs:
        env["TMPDIR"] = "/dev/shm"
    tmpdir = env.get("TMPDIR") or tempfile.gettempdir()
    before = list_cacerts(tmpdir)
    try:
        with contextlib.ExitStack() as stack:
            shim_dir = stack.enter_context(tempfile.TemporaryDirectory(prefix="nri-reference-python-"))
            state_root = None
            if args.state_tmpfs:
                state_root = stack.enter_context(tempfile.TemporaryDirectory(prefix="nri-reference-state-",
                                                                             dir="/dev/shm"))
            plugin_python = None
            if args.rootfs:
                plugin_python = format_rootfs_python(os.path.abspath(args.rootfs), os.path.join(HOME, "src", "hook"))
                interpreter = read_rootfs_interpreter(plugin_python)
            else:
                interpreter = use_interpreter(args.python, env, shim_dir)
            if args.rootfs or state_root:
                env["NRI_REFERENCE_WRAP"] = format_wrap_env(
                    shim_dir, ROOTFS_WRAP.format(run_plugin=format_run_plugin(plugin_python)), state_root)
            if interpreter is None:
                return 2
            print(f"the machine: {read_machine()}")
            print(f"the plugin's interpreter: {interpreter}")
            if not args.busy:
                return measure(args, env, plugin_python, state_root)
            with tempfile.TemporaryDirectory(prefix="nri-reference-busy-", dir="/dev/shm") as scratch:
                argv, busy_env = format_busy_command(sys.executable, scratch)
                for key in ("TMPDIR", "MCH_TESTS_SHM"):
                    os.makedirs(busy_env[key])
                with BusyLoad(argv, busy_env) as busy:
                    print("busy: this checkout's unit suite in a loop beside the tool, through every run")
                    status = measure(args, env, plugin_python, state_root)
                print(f"busy: the unit suite ran beside every run (runs of it begun: {busy.runs}; {busy.load})")
                return status
    finally:
        if forget_broken_venv(os.path.join(HOME, "venv-mch")):
            print("nri_reference: the tool's venv-mch ran through this run's python3 shim: removed (the tool's "
                  "next run makes it again with its own python3)")
        left = remove_leaked_cacerts(tmpdir, before)
        if left:
            print(f"nri_reference: removed {len(left)} cacert.pem the tool's venv build left in {tmpdir} "
                  "(Python 3.9's ensurepip)")


def measure(args: argparse.Namespace, env: Dict[str, str], plugin_python: Optional[str] = None,
            state_root: Optional[str] = None) -> int:
    """The runs ``args`` asks for, printed; ``plugin_python``: format_rootfs_python's words (--rootfs),
    which the devices' runs start their plugin with too; ``state_root``: --state-tmpfs's directory."""
    per_run: List[Dict[str, float]] = []
    p99_runs: List[Dict[str, Tuple[float, float]]] = []
    sample_runs: List[Dict[str, Tuple[List[float], List[float]]]] = []
    table = ""
    for n in range(1, args.runs + 1):
        run = run_tool(args.tool, env)
        if run is None:
            return 2
        table = run["table"]
        try:
            ratios = read_ratios(run["result"])
        except (KeyError, TypeError, ZeroDivisionError) as exc:
            print(f"nri_reference: result.json not as expected ({exc!r}): ratios not computed")
            ratios = {}
        per_run.append(ratios)
        try:
            sample_runs.append(read_samples(run["result"]))
        except (KeyError, TypeError):
            pass
        try:
            p99s = read_p99s(run["result"])
            p99_runs.append(p99s)
            p99_line = f"\n  {format_p99s(p99s)}"
        except (KeyError, TypeError):
            p99_line = ""
        load = run["load"]
        try:
            growth = f"\n  {format_rss_growth(run['result'])}"
        except (KeyError, TypeError):
            growth = ""
        print(f"run {n}: " + "  ".join(f"{k} {v:.2f}" for k, v in ratios.items()) + p99_line + growth
              + (f"\n  {load}" if load else ""))
    print()
    print(table)
    if per_run and all(per_run):
        print(f"medians over {len(per_run)} run(s), goal in brackets:")
        print("\n".join(format_median_lines(per_run, sample_runs if len(sample_runs) == len(per_run) else [])))
    if p99_runs and len(p99_runs) == len(per_run):
        print("\n".join(format_p99_medians(p99_runs)))
    extra = []
    python = plugin_python or VENV_PYTHON
    if args.floor:
        extra.append(("the floor: one run in which no container asks (the plugin decides nothing; the Go plugin "
                      "still works)", FLOOR_WRAP.format(run_plugin=format_run_plugin(plugin_python))))
    if args.no_record_io:
        script = shlex.quote(os.path.join(REPO, "benchmarks", "nri_memory_records.py"))
        extra.append(("no record I/O: one run with the plugin's records in memory only (built and formatted, "
                      "never written: not crash-exact, not a product mode)", SCRIPT_WRAP.format(script=script, python=python)))
    if args.go_work:
        script = shlex.quote(os.path.join(REPO, "benchmarks", "nri_go_work.py"))
        extra.append(("the Go plugin's work in Python: one run in which the plugin's handlers do only what the Go "
                      "plugin does (no record, lock, checkpoint, checks or log; not a product mode)",
                      SCRIPT_WRAP.format(script=script, python=python)))
    if args.duties:
        script = shlex.quote(os.path.join(REPO, "benchmarks", "nri_duties.py"))
        extra.append(("the product's duties in straight-line Python: one run in which the plugin's handlers do every "
                      "duty the product keeps on the request path with its system calls and no engine (not a "
                      "product mode)", SCRIPT_WRAP.format(script=script, python=python)))
    for title, wrapper in extra:
        ratios = run_wrapped(args.tool, env, wrapper, state_root)
        if ratios is None:
            return 2
        print(f"\n{title}:")
        for key in ("create", "update", "stop", "cpu", "cri_create"):
            print(f"  {LABELS[key]:36} {ratios[key]:5.2f}")
    if args.sections:
        done = [run_sections(args.tool, env, go_work, python, state_root) for go_work in (False, True)]
        if done[0] is None or done[1] is None:
            return 2
        (ratios, product), (go_ratios, go_work_sections) = done[0], done[1]
        print(f"\nwhere the time goes: one run each, the plugin behind the relay cut into timed sections "
              f"(nri_sections.py: a section's wrapper adds about 1 us; answer p50 c'/b' Create {ratios['create']:.2f} "
              f"with them, {go_ratios['create']:.2f} for the Go work):")
        print("\n".join(format_sections(product, go_work_sections)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
