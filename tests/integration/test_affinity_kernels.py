"""The thread-affinity probe for real: this machine's kernel (cgroup v1) and the VM's (cgroup v2).

The probe (mixed_cpus_hook/ops/affinity.py) pins a child of its own to one CPU in a scratch
cgroup, shrinks the cpuset to exclude that CPU, regrows it and reads the mask back. Linux
6.2 and later keep the pin (the requested mask is remembered); older kernels widen it to
the whole set. Each test checks the verdict against the kernel's version, and that neither
the scratch cgroup nor the child outlives the probe.

Set ``MIXED_CPUS_HOOK_AFFINITY_RESULTS=/some/file.json`` to keep the VM's result.
"""

from __future__ import annotations

import glob
import json
import os
import shutil
import subprocess
import sys
import tempfile
from typing import Any, Dict, Tuple

import pytest

try:  # tests/integration as a package
    from . import vm
except ImportError:  # rootdir-relative import (no __init__.py)
    import vm  # type: ignore[no-redef]

from mixed_cpus_hook.ops.affinity import CANNOT_TELL, KEPT, SCRATCH_PREFIX, WIDENED, probe

pytestmark = [pytest.mark.integration]

HERE = os.path.dirname(os.path.abspath(__file__))
HOOK_SRC = os.path.join(os.path.dirname(os.path.dirname(HERE)), "hook")
VM_TIMEOUT = 600


def expected_for(release: str) -> str:
    """The verdict the kernel's version predicts (commits 8f9ea86fdf99, da019032819a in 6.2)."""
    major, minor = (int(x) for x in release.split("-")[0].split(".")[:2])
    return KEPT if (major, minor) >= (6, 2) else WIDENED


def scratch_left(root: str) -> list:
    return glob.glob(os.path.join(root, "cpuset", SCRATCH_PREFIX + "*")) + glob.glob(
        os.path.join(root, SCRATCH_PREFIX + "*"))


def children_of_this_process() -> set:
    out = set()
    for status in glob.glob("/proc/[0-9]*/status"):
        try:
            with open(status, encoding="ascii", errors="replace") as f:
                fields = dict(line.split(":", 1) for line in f if ":" in line)
        except OSError:
            continue
        if fields.get("PPid", "").strip() == str(os.getpid()):
            out.add(int(fields["Pid"]))
    return out


def test_probe_on_this_kernel() -> None:
    if os.geteuid() != 0:
        pytest.skip("needs root")
    if len(os.sched_getaffinity(0)) < 2:
        pytest.skip("needs 2 CPUs")
    before = children_of_this_process()
    result = probe("/sys/fs/cgroup")
    print(f"\nthis machine: kernel {result.kernel}, cgroup v{result.cgroup_version}: {result.verdict}: "
          f"{result.detail}")
    assert result.verdict == expected_for(os.uname().release), result
    assert "pinned to CPU" in result.detail
    assert scratch_left("/sys/fs/cgroup") == []
    assert children_of_this_process() == before


def test_probe_refuses_a_tree_that_is_not_cgroupfs(tmp_path: Any) -> None:
    """A plain directory tree shaped like cgroup v1 must not give a verdict."""
    if os.geteuid() != 0:
        pytest.skip("needs root")
    for hier, files in (("cpuset", {"cpuset.cpus": "0-1", "cpuset.effective_cpus": "0-1", "cpuset.mems": "0"}),
                        ("cpu,cpuacct", {"cpu.cfs_quota_us": "-1"})):
        (tmp_path / hier).mkdir()
        for name, text in files.items():
            (tmp_path / hier / name).write_text(text)
    os.symlink("cpu,cpuacct", tmp_path / "cpu")
    result = probe(str(tmp_path))
    if len(os.sched_getaffinity(0) & {0, 1}) < 2:
        assert result.verdict == CANNOT_TELL
        return
    assert (result.verdict, "not a cgroup file system" in result.detail) == (CANNOT_TELL, True), result
    assert list((tmp_path / "cpuset").glob(SCRATCH_PREFIX + "*")) == []


VM_SCRIPT = """
import glob, json, os, sys
sys.path.insert(0, {src!r})
from mixed_cpus_hook.ops.affinity import probe, SCRATCH_PREFIX
# A throwaway VM without systemd: nobody enabled cpuset for the root's children (a node's
# systemd does, for kubepods.slice at least); the probe looks for such a cgroup.
with open("/sys/fs/cgroup/cgroup.subtree_control", "w") as f:
    f.write("+cpuset +cpu")
r = probe("/sys/fs/cgroup")
left = glob.glob("/sys/fs/cgroup/" + SCRATCH_PREFIX + "*")
with open(sys.argv[1], "w") as f:
    json.dump({{"result": r._asdict(), "release": os.uname().release, "left": left,
               "controllers": open("/sys/fs/cgroup/cgroup.controllers").read().split()}}, f)
"""


def run_vm_probe() -> Tuple[Dict[str, Any], "vm.VMResult"]:
    with tempfile.TemporaryDirectory(prefix="mch-affinity-vm-") as rwdir:
        script_py = os.path.join(rwdir, "probe.py")
        with open(script_py, "w", encoding="utf-8") as f:
            f.write(VM_SCRIPT.format(src=HOOK_SRC))
        out = os.path.join(rwdir, "result.json")
        result = vm.run_in_vm(f"exec {sys.executable} -I {script_py} {out}\n", rwdir, cpus=2, timeout=VM_TIMEOUT)
        doc: Dict[str, Any] = {}
        if os.path.isfile(out):
            keep = os.environ.get("MIXED_CPUS_HOOK_AFFINITY_RESULTS")
            if keep:
                shutil.copyfile(out, keep)
            with open(out, encoding="utf-8") as f:
                doc = json.load(f)
    return doc, result


@pytest.mark.vm
def test_probe_in_the_v2_vm() -> None:
    reason = vm.skip_reason()
    if reason:
        pytest.skip(reason)
    doc, result = run_vm_probe()
    assert doc, f"the VM wrote no result\n{result.describe()}"
    r = doc["result"]
    print(f"\nVM: kernel {r['kernel']}, cgroup v{r['cgroup_version']}: {r['verdict']}: {r['detail']}")
    assert r["cgroup_version"] == 2 and "cpuset" in doc["controllers"], doc
    assert r["verdict"] == expected_for(doc["release"]), doc
    assert doc["left"] == [], doc


def test_check_reports_the_finding(tmp_path: Any) -> None:
    """`check --json` on this machine carries a thread-affinity finding with the probe's verdict."""
    if os.geteuid() != 0:
        pytest.skip("needs root")
    config = tmp_path / "config.yaml"
    config.write_text(f"shared_cpus: \"0\"\nstate_dir: {tmp_path / 'state'}\n")
    env = dict(os.environ, PYTHONPATH=HOOK_SRC, MIXED_CPUS_HOOK_CACHE_DIR=str(tmp_path / "cache"))
    res = subprocess.run([sys.executable, "-m", "mixed_cpus_hook", "--config", str(config), "check", "--json",
                          "--no-detect", "--no-systemd"], capture_output=True, text=True, env=env, timeout=120)
    findings = {f["check"]: f for f in json.loads(res.stdout)}
    f = findings["thread-affinity"]
    want = expected_for(os.uname().release)
    assert f["status"] == ("ok" if want == KEPT else "warning"), f
    assert (f["fix"] == "") is (want == KEPT), f
    with open(tmp_path / "state" / "thread-affinity", encoding="ascii") as fh:
        assert fh.read().strip() == want
