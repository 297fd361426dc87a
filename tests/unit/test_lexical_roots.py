"""Layout.lexical: controller roots on a cgroup file system, where a path of plain names needs no resolving.

A cgroup file system holds no symbolic link, so below a controller root that is one (and has
nothing else mounted below it) ``root/a/b`` is the directory it spells: the NRI plugin takes such
paths without a stat per event. Anything else (a root that is not a cgroup mount, a mount below
it, a path with "", "." or ".." parts, a path beside the root) is resolved and checked as before.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import List, Tuple

import pytest

from mixed_cpus_hook.core.cgroup import compute_lexical_roots, is_lexically_below, parse_mountinfo
from mixed_cpus_hook.core.errors import CgroupError
from mixed_cpus_hook.node import cgroupfs as cg

MOUNTINFO = """\
22 1 0:21 / /sys rw,nosuid shared:7 - sysfs sysfs rw
25 22 0:23 / /sys/fs/cgroup ro,nosuid shared:9 - tmpfs tmpfs ro,mode=755
28 25 0:26 / /sys/fs/cgroup/cpuset rw,nosuid shared:12 - cgroup cgroup rw,cpuset
29 25 0:27 / /sys/fs/cgroup/cpu,cpuacct rw,nosuid shared:13 - cgroup cgroup rw,cpu,cpuacct
30 25 0:28 / /sys/fs/cgroup/unified rw,nosuid shared:14 - cgroup2 cgroup2 rw
31 22 0:29 / /mnt/with\\040space rw - cgroup cgroup rw,cpu
not a mountinfo line
"""


def test_parse_mountinfo() -> None:
    assert parse_mountinfo(MOUNTINFO) == [
        ("/sys", "sysfs"), ("/sys/fs/cgroup", "tmpfs"), ("/sys/fs/cgroup/cpuset", "cgroup"),
        ("/sys/fs/cgroup/cpu,cpuacct", "cgroup"), ("/sys/fs/cgroup/unified", "cgroup2"), ("/mnt/with space", "cgroup")]


V1_ROOTS = ("/sys/fs/cgroup/cpuset", "/sys/fs/cgroup/cpu,cpuacct")
LEXICAL_CASES: List[Tuple[str, List[Tuple[str, str]], Tuple[str, ...], Tuple[str, ...]]] = [
    ("v1-both-cgroup", parse_mountinfo(MOUNTINFO), V1_ROOTS, V1_ROOTS),
    ("v2", [("/sys/fs/cgroup", "cgroup2")], ("/sys/fs/cgroup", "/sys/fs/cgroup"), ("/sys/fs/cgroup",)),
    ("fake-node-on-tmpfs", [("/dev/shm", "tmpfs")], ("/dev/shm/node/cpuset",), ()),
    ("not-mounted-there", [("/sys/fs/cgroup", "tmpfs")], V1_ROOTS, ()),
    ("a-mount-below", parse_mountinfo(MOUNTINFO) + [("/sys/fs/cgroup/cpuset/kubepods/x", "tmpfs")], V1_ROOTS,
     ("/sys/fs/cgroup/cpu,cpuacct",)),
    ("over-mounted-by-tmpfs", parse_mountinfo(MOUNTINFO) + [("/sys/fs/cgroup/cpuset", "tmpfs")], V1_ROOTS,
     ("/sys/fs/cgroup/cpu,cpuacct",)),
    ("v2-with-a-mount-below", [("/sys/fs/cgroup", "cgroup2"), ("/sys/fs/cgroup/a", "cgroup2")],
     ("/sys/fs/cgroup",), ()),
]


@pytest.mark.parametrize("mounts, roots, expected", [c[1:] for c in LEXICAL_CASES], ids=[c[0] for c in LEXICAL_CASES])
def test_compute_lexical_roots(mounts: List[Tuple[str, str]], roots: Tuple[str, ...], expected: Tuple[str, ...]) -> None:
    assert compute_lexical_roots(mounts, roots) == expected


BELOW = [
    ("/cg/cpu", "/cg/cpu/kubepods/pod1/abc", True),
    ("/cg/cpu", "/cg/cpu/a", True),
    ("/cg/cpu", "/cg/cpu", False),  # the root itself: resolved as before
    ("/cg/cpu", "/cg/cpu/", False),
    ("/cg/cpu", "/cg/cpu/a/../../../etc", False),
    ("/cg/cpu", "/cg/cpu/a/./b", False),
    ("/cg/cpu", "/cg/cpu/a//b", False),
    ("/cg/cpu", "/cg/cpu/a/", False),
    ("/cg/cpu", "/cg/cpu,cpuacct/a", False),
    ("/cg/cpu", "/cg/cpuset/a", False),
    ("/cg/cpu", "cg/cpu/a", False),
    ("/cg/cpu", "/cg/cpu/..", False),
]


@pytest.mark.parametrize("base, path, expected", BELOW, ids=[p for _, p, _ in BELOW])
def test_is_lexically_below(base: str, path: str, expected: bool) -> None:
    assert is_lexically_below(base, path) is expected


def test_paths_off_the_lexical_roots_are_still_resolved_and_refused(tmp_path: Path) -> None:
    """The plugin's layout on a fake node (not a cgroup mount) has no lexical roots; and a path
    that is not plain below a lexical root still goes through the resolving check."""
    root = tmp_path / "cg"
    (root / "cpu" / "pod1").mkdir(parents=True)
    outside = tmp_path / "outside"
    outside.mkdir()
    os.symlink(outside, root / "cpu" / "pod1" / "link")
    mountinfo = tmp_path / "mountinfo"
    mountinfo.write_text(f"1 0 0:1 / {tmp_path} rw - tmpfs tmpfs rw\n")
    assert compute_lexical_roots(parse_mountinfo(mountinfo.read_text()), (str(root / "cpu"),)) == ()
    with pytest.raises(CgroupError, match="outside the cgroup root"):
        cg.resolve_inside_root(str(root), str(root / "cpu" / "pod1" / "link"), "container cgroup")
    # Declared lexical (as on a real cgroup file system, where no link can exist): a plain path is
    # taken as spelled, a climbing one is still resolved, and refused.
    lexical = (str(root / "cpu"),)
    plain = str(root / "cpu" / "pod1" / "c1")
    assert cg.resolve_inside_root(str(root), plain, "container cgroup", lexical) == plain
    with pytest.raises(CgroupError, match="outside the cgroup root"):
        cg.resolve_inside_root(str(root), str(root / "cpu" / "pod1" / ".." / ".." / ".." / "outside"),
                               "container cgroup", lexical)
    with pytest.raises(CgroupError, match="climbs out of its hierarchy"):
        cg.join_inside_root(str(root / "cpu"), "pod1/../../..", "container cgroup", str(root), lexical)


def test_read_layout_reads_the_mounts_only_when_asked(tmp_path: Path) -> None:
    """The hook's container start never reads mountinfo; the plugin's layout says what it found."""
    if not (os.path.isfile("/sys/fs/cgroup/cpuset/cpuset.cpus") or os.path.isfile("/sys/fs/cgroup/cgroup.controllers")):
        pytest.skip("no cgroup file system at /sys/fs/cgroup")
    plain = cg.read_layout("/sys/fs/cgroup")
    assert plain.lexical == ()
    layout = cg.read_layout("/sys/fs/cgroup", mountinfo="/proc/self/mountinfo")
    assert layout._replace(lexical=()) == plain
    assert set(layout.lexical) <= {plain.cpuset_root, plain.cpu_root} and layout.lexical
    missing = cg.read_layout("/sys/fs/cgroup", mountinfo=str(tmp_path / "none"))
    assert missing.lexical == ()
