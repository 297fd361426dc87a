"""The thread-affinity probe's judgement, and its refusals on nodes where it cannot measure."""

from __future__ import annotations

import os
from typing import Any

import pytest

from mixed_cpus_hook.core.cpuset import format_cpulist
from mixed_cpus_hook.ops.affinity import CANNOT_TELL, KEPT, SCRATCH_PREFIX, WIDENED, compute_verdict, probe

VERDICTS = [
    pytest.param(0, (0, 1), {0}, KEPT, id="pin-kept-6.2+"),
    pytest.param(0, (0, 1), {0, 1}, WIDENED, id="pin-widened-to-the-set-before-6.2"),
    pytest.param(4, (4, 7), {4}, KEPT, id="other-cpus-kept"),
    pytest.param(4, (4, 7), {4, 7}, WIDENED, id="other-cpus-widened"),
    pytest.param(0, (0, 1), {1}, CANNOT_TELL, id="still-on-the-shrunk-set"),
    pytest.param(0, (0, 1), set(), CANNOT_TELL, id="empty-mask"),
    pytest.param(0, (0, 1), {0, 1, 2}, CANNOT_TELL, id="wider-than-the-set"),
]


@pytest.mark.parametrize("pinned,cpus,after,verdict", VERDICTS)
def test_compute_verdict(pinned: int, cpus: Any, after: set, verdict: str) -> None:
    got, seen = compute_verdict(pinned, cpus, frozenset(after))
    assert got == verdict
    both = format_cpulist(cpus)
    assert seen.startswith(f"pinned to CPU {pinned}, cpuset {both} shrunk to {cpus[1]} and regrown: the mask reads ")


def _v1_tree(root: Any, cpus: str = "0-1") -> None:
    for hier, files in (("cpuset", {"cpuset.cpus": cpus, "cpuset.effective_cpus": cpus, "cpuset.mems": "0"}),
                        ("cpu,cpuacct", {"cpu.cfs_quota_us": "-1"})):
        (root / hier).mkdir()
        for name, text in files.items():
            (root / hier / name).write_text(text)
    os.symlink("cpu,cpuacct", root / "cpu")


REFUSALS = [
    pytest.param(lambda root: None, "no usable cgroup file system", id="nothing-mounted"),
    pytest.param(lambda root: _v1_tree(root, "0"), "needs 2 or more CPUs", id="one-cpu"),
    pytest.param(lambda root: _v1_tree(root), "not a cgroup file system", id="plain-directories"),
]


@pytest.mark.parametrize("make,message", REFUSALS)
def test_probe_cannot_tell(tmp_path: Any, make: Any, message: str) -> None:
    make(tmp_path)
    result = probe(str(tmp_path))
    if os.geteuid() != 0 and "usable" not in message:
        message = "needs root"
    elif message == "not a cgroup file system" and len(os.sched_getaffinity(0) & {0, 1}) < 2:
        message = "needs 2 or more CPUs"
    assert (result.verdict, message in result.detail) == (CANNOT_TELL, True), result
    assert result.kernel == os.uname().release
    assert not list(tmp_path.glob(f"*/{SCRATCH_PREFIX}*"))  # the scratch cgroup is always removed
