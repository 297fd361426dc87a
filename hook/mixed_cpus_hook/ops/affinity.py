"""Does this kernel keep a thread's own CPU pinning when a cpuset shrinks and grows back?

kubelet's reconcile writes the exclusive CPUs alone into a container's cpuset, and hook mode
puts the shared ones back right after: the set shrinks, then regrows. Before Linux 6.2 every
thread's affinity is replaced by the cpuset on each change, so an application that pinned
its busy threads ends with every thread on every CPU. Since 6.2 the kernel remembers what
``sched_setaffinity`` asked for (``user_cpus_ptr``) and restores it when the set grows back.

The probe measures it instead of trusting the version: in a scratch cgroup of its own it
starts a child process, pins it to one CPU of a two-CPU set, shrinks the set to exclude that
CPU, regrows it and reads the child's mask back. It always removes the child and the cgroup.
Imported by ``doctor.py`` (``check``) only.
"""

from __future__ import annotations

import glob
import os
import subprocess
import sys
import time
from typing import List, NamedTuple, Optional, Tuple

from ..core.cgroup import Layout
from ..core.cpuset import format_cpulist, parse_cpulist
from ..core.errors import HookError
from ..node.cgroupfs import read_layout

KEPT, WIDENED, CANNOT_TELL = "kept", "widened", "cannot-tell"
SCRATCH_PREFIX = "mixed-cpus-hook-affinity-probe-"
# The child waits for "pin", pins itself (so the kernel records *its* request), answers with its
# mask, then waits for end of input.
CHILD = ("import os, sys\n"
         "sys.stdin.readline()\n"
         "os.sched_setaffinity(0, {int(sys.argv[1])})\n"
         "print(','.join(map(str, sorted(os.sched_getaffinity(0)))), flush=True)\n"
         "sys.stdin.read()\n")
TIMEOUT = 10.0


class ProbeResult(NamedTuple):
    """The verdict, and what was seen (for the report)."""

    verdict: str  # kept | widened | cannot-tell
    detail: str
    kernel: str = ""
    cgroup_version: int = 0
    scratch: str = ""  # the scratch cgroup it made (and removed), for the report


def compute_verdict(pinned: int, cpus: Tuple[int, int], after: frozenset) -> Tuple[str, str]:
    """Judge the mask read back after shrink and regrow (pure)."""
    a, b = cpus
    seen = (f"pinned to CPU {pinned}, cpuset {format_cpulist(cpus)} shrunk to {b} and regrown: "
            f"the mask reads {format_cpulist(after) or 'empty'}")
    if after == frozenset({pinned}):
        return KEPT, seen
    if after == frozenset(cpus):
        return WIDENED, seen
    return CANNOT_TELL, seen + " (neither the pin nor the whole set)"


def _write(path: str, text: str) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_NOFOLLOW)
    try:
        os.write(fd, text.encode("ascii"))
    finally:
        os.close(fd)


def _read(path: str) -> str:
    with open(path, encoding="ascii") as f:
        return f.read().strip()


def _remove_stale(parent: str) -> None:
    """Scratch cgroups a killed probe left behind (rmdir only succeeds on an empty cgroup)."""
    for d in glob.glob(os.path.join(parent, SCRATCH_PREFIX + "*")):
        try:
            os.rmdir(d)
        except OSError:
            pass


def find_cpuset_parent(root: str, depth: int = 3) -> Optional[str]:
    """cgroup v2: the shallowest cgroup whose children get the cpuset controller (root first).

    Such a cgroup holds no processes of its own (cgroup v2's rule), so a scratch child of it
    disturbs nobody; on a Kubernetes node kubepods.slice is one when the root is not.
    """
    level = [root]
    for _ in range(depth + 1):
        nxt = []
        for d in sorted(level):
            try:
                if "cpuset" in _read(os.path.join(d, "cgroup.subtree_control")).split():
                    return d
                nxt += [e.path for e in os.scandir(d) if e.is_dir(follow_symlinks=False)
                        and not e.name.startswith(SCRATCH_PREFIX)]
            except OSError:
                continue
        level = nxt
    return None


def _cgroup_of(pid: int) -> List[str]:
    with open(f"/proc/{pid}/cgroup", encoding="utf-8") as f:
        return [line.split(":", 2)[2].strip() for line in f if line.count(":") >= 2]


def probe(cgroup_root: str = "/sys/fs/cgroup", name: Optional[str] = None) -> ProbeResult:
    """Run the probe; never raises for an unsuitable node (the verdict is then cannot-tell)."""
    kernel = os.uname().release
    try:
        layout = read_layout(cgroup_root)
    except HookError as exc:
        return ProbeResult(CANNOT_TELL, f"no usable cgroup file system: {exc}", kernel)

    def result(verdict: str, detail: str, scratch: str = "") -> ProbeResult:
        return ProbeResult(verdict, detail, kernel, layout.version, scratch)

    if os.geteuid() != 0:
        return result(CANNOT_TELL, "needs root (it makes a scratch cgroup)")
    parent = layout.cpuset_root if layout.version == 1 else find_cpuset_parent(layout.root)
    if parent is None:
        return result(CANNOT_TELL, f"no cgroup at or below {layout.root} (3 levels) has the cpuset controller in its "
                                   "cgroup.subtree_control")
    try:
        eff_name = "cpuset.effective_cpus" if layout.version == 1 else "cpuset.cpus.effective"
        usable = sorted(parse_cpulist(_read(os.path.join(parent, eff_name))) & os.sched_getaffinity(0))
    except (OSError, HookError) as exc:
        return result(CANNOT_TELL, f"cannot read {parent}: {exc}")
    if len(usable) < 2:
        return result(CANNOT_TELL, f"needs 2 or more CPUs, this process may use {format_cpulist(usable) or 'none'}")
    cpus = (usable[0], usable[1])
    _remove_stale(parent)
    scratch = os.path.join(parent, name or f"{SCRATCH_PREFIX}{os.getpid()}")
    try:
        os.mkdir(scratch)
    except OSError as exc:
        return result(CANNOT_TELL, f"cannot make the scratch cgroup {scratch}: {exc.strerror}")
    try:
        return result(*_run(layout, scratch, cpus), scratch=scratch)
    finally:
        _cleanup(scratch)


def _run(layout: Layout, scratch: str, cpus: Tuple[int, int]) -> Tuple[str, str]:
    a, b = cpus
    both = f"{a},{b}"
    child = None
    try:
        if not os.path.exists(os.path.join(scratch, "cgroup.procs")):
            return CANNOT_TELL, f"{scratch} has no cgroup.procs: not a cgroup file system"
        if layout.version == 1:
            _write(os.path.join(scratch, "cpuset.mems"), _read(os.path.join(layout.cpuset_root, "cpuset.mems")))
        _write(os.path.join(scratch, "cpuset.cpus"), both)
        child = subprocess.Popen([sys.executable, "-I", "-S", "-c", CHILD, str(a)], stdin=subprocess.PIPE,
                                 stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
        _write(os.path.join(scratch, "cgroup.procs"), str(child.pid))
        rel = "/" + os.path.relpath(scratch, layout.cpuset_root if layout.version == 1 else layout.root)
        if rel not in _cgroup_of(child.pid):
            return CANNOT_TELL, f"the child did not move into {scratch} (not a cgroup file system)"
        assert child.stdin is not None and child.stdout is not None
        child.stdin.write("pin\n")
        child.stdin.flush()
        pinned = parse_cpulist(_readline(child))
        if pinned != frozenset({a}):
            return CANNOT_TELL, f"the child could not pin itself to CPU {a} (its mask: {format_cpulist(pinned)})"
        _write(os.path.join(scratch, "cpuset.cpus"), str(b))
        shrunk = frozenset(os.sched_getaffinity(child.pid))
        _write(os.path.join(scratch, "cpuset.cpus"), both)
        after = frozenset(os.sched_getaffinity(child.pid))
        verdict, seen = compute_verdict(a, cpus, after)
        return verdict, f"{seen} (while shrunk: {format_cpulist(shrunk)})"
    except (OSError, HookError, ValueError) as exc:
        return CANNOT_TELL, f"probe failed in {scratch}: {exc}"
    finally:
        _stop(child)


def _readline(child: subprocess.Popen) -> str:
    """One answer from the child, or an error when it does not answer within TIMEOUT."""
    import select

    assert child.stdout is not None
    ready, _, _ = select.select([child.stdout], [], [], TIMEOUT)
    if not ready:
        raise ValueError("the child did not answer")
    return child.stdout.readline().strip()


def _stop(child: Optional[subprocess.Popen]) -> None:
    """End the child we started (by its own handle), and reap it."""
    if child is None:
        return
    try:
        if child.stdin is not None:
            child.stdin.close()
        child.wait(timeout=TIMEOUT)
    except (OSError, subprocess.TimeoutExpired):
        child.kill()
        child.wait()
    if child.stdout is not None:
        child.stdout.close()


def _cleanup(scratch: str) -> None:
    """Remove the scratch cgroup; an exited child may take a moment to leave it."""
    for _ in range(100):
        try:
            os.rmdir(scratch)
            return
        except FileNotFoundError:
            return
        except OSError:
            time.sleep(0.01)
