"""`make demo` (examples/quickstart.py): both modes, lines a terminal holds, no root, nothing to the journal.

Run as `make demo` runs it, as a process; as an unprivileged user when the tests run as root
(setpriv), and under strace where it is installed, to see that no process of the demo connects to
/dev/log (syslog, the host's journal).
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Iterator, List

import pytest


REPO = Path(__file__).resolve().parents[2]
DEMO = REPO / "examples" / "quickstart.py"
NOBODY = 65534


def demo_command(*args: str) -> List[str]:
    """The demo as user nobody when the tests run as root and an interpreter with the dependencies
    (this one, or the system's python3 with its distribution packages) is reachable by nobody; else
    as the current user."""
    argv = [sys.executable, str(DEMO), *args]
    if os.geteuid() != 0 or not shutil.which("setpriv"):
        return argv
    drop = ["setpriv", f"--reuid={NOBODY}", f"--regid={NOBODY}", "--clear-groups"]
    for python in (sys.executable, "/usr/bin/python3"):
        probe = subprocess.run(drop + [python, "-c", f"import subprocess, sys; open({str(DEMO)!r}).close(); "
                                       "import click, yaml, jsonschema, psutil, google.protobuf; "
                                       "subprocess.run([sys.executable, '-c', 'pass'], check=True)"],
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=False)
        if probe.returncode == 0:
            return drop + [python, str(DEMO), *args]
    return argv


@pytest.fixture
def demo_tmp() -> Iterator[Path]:
    """The demo's TMPDIR: one the unprivileged user can write (pytest's own is root's, mode 0700); removed after."""
    path = Path(tempfile.mkdtemp(prefix="mch-demo-test-"))
    os.chmod(path, 0o777)
    try:
        yield path
    finally:
        shutil.rmtree(path)


def run_demo(tmp_path: Path, *args: str) -> subprocess.CompletedProcess:
    argv = demo_command(*args)
    trace = tmp_path / "strace.out"
    if shutil.which("strace"):
        argv = ["strace", "-f", "-qq", "-e", "trace=connect", "-o", str(trace), *argv]
    env = {k: v for k, v in os.environ.items() if not k.startswith("MIXED_CPUS_HOOK_")}
    env["TMPDIR"] = str(tmp_path)
    return subprocess.run(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, universal_newlines=True,
                          timeout=300, env=env, check=False, cwd=str(tmp_path))


def test_demo_shows_both_modes_in_100_columns(demo_tmp: Path) -> None:
    tmp_path = demo_tmp
    proc = run_demo(tmp_path)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    out = proc.stdout
    wide = [line for line in out.splitlines() if len(line) > 100]
    assert not wide, wide
    assert "=== Hook mode" in out and "=== NRI mode" in out
    for needle in ("after kubelet's rewrite", "<ctr>/cpuset.cpus: 2-3 -> 0-3",  # hook mode: rewrite, reapply
                   "plugin 10-mixed-cpus-hook registered",
                   "adjust cpus 0-3, quota 400000, env OPENSHIFT_ISOLATED_CPUS=2-3 OPENSHIFT_SHARED_CPUS=0-1",
                   "<pod> cfs_quota_us=400000   (the plugin raised the pod's quota before answering)",
                   "plugin -> runtime: cpus 0-3, quota 400000 (kubelet's update rewritten in flight)",
                   "<pod> cfs_quota_us=200000   (the plugin gave the pod its share back"):
        assert " ".join(needle.split()) in " ".join(out.split()), needle
    assert re.search(r"^9c7e1b2a9c7e +ran/du-1/du +nri +2-3 +0-3 ", out, re.M), out
    assert not re.search(r"[0-9a-f]{13,}", out), "a container id longer than 12 characters"
    assert str(tmp_path) not in out and "/sys/fs/cgroup" not in out
    assert "make demo DEMO_ARGS=--keep" in out  # --keep is advertised
    assert not list(tmp_path.glob("mixed-cpus-demo-*")), "the fake nodes are removed"
    trace = tmp_path / "strace.out"
    if trace.exists():
        assert "/dev/log" not in trace.read_text(), "something of the demo connected to syslog"


def test_demo_keep_leaves_the_path_it_prints(demo_tmp: Path) -> None:
    tmp_path = demo_tmp
    proc = run_demo(tmp_path, "--keep")
    assert proc.returncode == 0, proc.stderr[-3000:]
    m = re.search(r"^Kept: (\S+) \(hook-node/, nri-node/\)", proc.stdout, re.M)
    assert m, proc.stdout[-500:]
    kept = Path(m.group(1))
    assert kept.parent == tmp_path and (kept / "hook-node").is_dir() and (kept / "nri-node").is_dir()
    assert not (kept / "nri-node" / "nri.sock").exists()


def test_make_demo_keeps_the_host_journal_out_and_passes_demo_args() -> None:
    recipe = re.search(r"^demo:.*\n((?:\t.*\n)+)", (REPO / "Makefile").read_text(), re.M)
    assert recipe and "MIXED_CPUS_HOOK_NO_SYSLOG=1" in recipe.group(1) and "$(DEMO_ARGS)" in recipe.group(1)
