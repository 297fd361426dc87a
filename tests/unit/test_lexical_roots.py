"""Layout.lexical: controller roots on a cgroup file system, where a path of plain names needs no resolving.

A cgroup file system holds no symbolic link, so below a controller root that is one (and has
nothing else mounted below it) ``root/a/b`` is the directory it spells: the NRI plugin takes such
paths without a stat per event. Anything else (a root that is not a cgroup mount, a mount below
it, a path with "", "." or ".." parts, a path beside the root) is resolved and checked as before.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, List, Tuple

import pytest

from mixed_cpus_hook.core.cgroup import compute_lexical_roots, compute_mount_type, is_lexically_below, parse_mountinfo
from mixed_cpus_hook.core.errors import CgroupError, WriteError
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
    ("/cg/cpu", "/cg/cpu/.", False),
    ("/cg/cpu", "/cg/cpu//a", False),
    ("/cg/cpu", "/cg/cpu/...", True),  # a name, not a step
    ("/cg/cpu", "/cg/cpu/a/..b/.c", True),
]


@pytest.mark.parametrize("base, path, expected", BELOW, ids=[p for _, p, _ in BELOW])
def test_is_lexically_below(base: str, path: str, expected: bool) -> None:
    assert is_lexically_below(base, path) is expected


JOINS = [("/cg/cpu/pod1", "cpu.max"), ("/cg/cpu/pod1/", "cpu.max"), ("/", "cpu.max"), ("", "cpu.max"),
         ("relative/dir", "cpuset.cpus")]


@pytest.mark.parametrize("d, name", JOINS, ids=[f"{d!r}+{n}" for d, n in JOINS])
def test_join_file_is_os_path_join_for_a_file_name(d: str, name: str) -> None:
    from mixed_cpus_hook.core.cgroup import join_file

    assert join_file(d, name) == os.path.join(d, name)


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
    # A path once taken as spelled under one layout's roots is remembered for that layout only.
    linked = str(root / "cpu" / "pod1" / "link")
    assert cg.resolve_inside_root(str(root), linked, "container cgroup", lexical) == linked
    for other in ((), (str(root / "cpuset"),)):
        with pytest.raises(CgroupError, match="outside the cgroup root"):
            cg.resolve_inside_root(str(root), linked, "container cgroup", other)


def test_read_layout_reads_the_mounts_only_when_asked(tmp_path: Path) -> None:
    """The hook's container start never reads mountinfo; the plugin's layout says what it found."""
    if not (os.path.isfile("/sys/fs/cgroup/cpuset/cpuset.cpus") or os.path.isfile("/sys/fs/cgroup/cgroup.controllers")):
        pytest.skip("no cgroup file system at /sys/fs/cgroup")
    plain = cg.read_layout("/sys/fs/cgroup")
    assert plain.lexical == ()
    layout = cg.read_layout("/sys/fs/cgroup", mounts=cg.read_mounts())
    assert layout._replace(lexical=()) == plain
    assert set(layout.lexical) <= {plain.cpuset_root, plain.cpu_root} and layout.lexical
    assert cg.read_mounts(str(tmp_path / "no-proc")) == []  # unreadable: no mounts, nothing lexical
    assert cg.read_layout("/sys/fs/cgroup", mounts=[]).lexical == ()


@pytest.fixture
def real_cpu_cgroup() -> Any:
    """A cgroup of this machine's cgroup v1 cpu hierarchy (removed after), with the plugin's layout."""
    layout = cg.read_layout("/sys/fs/cgroup", mounts=cg.read_mounts())
    if os.geteuid() != 0 or layout.version != 1 or layout.cpu_root not in layout.lexical:
        pytest.skip("needs root and a cgroup v1 cpu hierarchy mounted as a cgroup file system")
    made = os.path.join(layout.cpu_root, f"mch-kept-{os.getpid()}")
    os.mkdir(made)
    try:
        yield layout, made
    finally:
        cg.forget_kept(made)
        if os.path.isdir(made):
            os.rmdir(made)


def open_fds() -> int:
    return len(os.listdir("/proc/self/fd"))


def test_kept_descriptors_read_fresh_values_and_go_with_their_cgroup(real_cpu_cgroup: Any) -> None:
    layout, made = real_cpu_cgroup
    quota = os.path.join(made, "cpu.cfs_quota_us")
    assert cg.read_quota(layout, made).quota is None  # -1: unlimited; a container's: nothing kept
    assert quota not in cg._KEPT
    assert cg.read_quota(layout, made, keep=True).quota is None  # a pod's: kept
    assert quota in cg._KEPT and os.path.join(made, "cpu.cfs_period_us") in cg._KEPT
    with open(quota, "w", encoding="ascii") as f:  # another descriptor writes: a pread at 0 sees it
        f.write("50000")
    assert cg.read_quota(layout, made, keep=True).quota == 50000
    assert cg.read_text_in(layout, quota) == "50000"
    fds = open_fds()
    cg.forget_kept(made)
    assert [p for p in cg._KEPT if p.startswith(made)] == [] and open_fds() == fds - 2
    cg.read_quota(layout, made, keep=True)
    os.rmdir(made)  # kubelet removes the pod: the kept descriptors fail, are dropped, and the read says why
    with pytest.raises(CgroupError, match="cannot read"):
        cg.read_quota(layout, made)
    assert [p for p in cg._KEPT if p.startswith(made)] == []


def test_a_kept_quota_is_written_through_its_descriptor(real_cpu_cgroup: Any, monkeypatch: Any) -> None:
    """A pod's kept quota file takes writes without an open; the kernel's refusal still reaches the
    caller; a cgroup removed since is reported as a missing file and its descriptors dropped."""
    layout, made = real_cpu_cgroup
    quota = os.path.join(made, "cpu.cfs_quota_us")
    cg.read_quota(layout, made, keep=True)
    real_open = os.open
    opened: List[str] = []
    monkeypatch.setattr(cg.os, "open", lambda path, *a, **k: opened.append(path) or real_open(path, *a, **k))
    cg.write_text(quota, "50000")
    cg.write_text(quota, "150000")  # a longer value after a shorter one: written at offset 0, whole
    assert opened == []
    with open(quota, encoding="ascii") as f:
        assert f.read().strip() == "150000"
    with pytest.raises(WriteError, match=r"kernel refused '500': Invalid argument"):
        cg.write_text(quota, "500")  # below the kernel's 1 ms minimum
    assert quota in cg._KEPT
    os.rmdir(made)
    with pytest.raises(WriteError, match="cannot open for writing: No such file or directory"):
        cg.write_text(quota, "50000")
    assert [p for p in cg._KEPT if p.startswith(made)] == []


def test_a_kept_quota_on_a_read_only_mount_is_read_and_its_write_refused_as_before(real_cpu_cgroup: Any,
                                                                                   tmp_path: Path) -> None:
    """Where the quota file cannot be opened for writing (a read-only mount of the cgroup file
    system), it is read as usual (no descriptor kept), and a write fails as it always did."""
    import subprocess

    layout, made = real_cpu_cgroup
    mnt = tmp_path / "ro"
    mnt.mkdir()
    subprocess.run(["mount", "--bind", made, str(mnt)], check=True)
    try:
        subprocess.run(["mount", "-o", "remount,ro,bind", str(mnt)], check=True)
        ro = layout._replace(lexical=(str(mnt),))
        pod = os.path.join(str(mnt), "pod1")
        os.mkdir(os.path.join(made, "pod1"))
        quota = os.path.join(pod, "cpu.cfs_quota_us")
        assert cg.read_quota(ro, pod, keep=True).quota is None
        assert quota not in cg._KEPT
        with pytest.raises(WriteError, match="cannot open for writing: Read-only file system"):
            cg.write_text(quota, "50000")
    finally:
        cg.forget_kept(os.path.join(str(mnt), "pod1"))
        subprocess.run(["umount", str(mnt)], check=True)
        if os.path.isdir(os.path.join(made, "pod1")):
            os.rmdir(os.path.join(made, "pod1"))


def test_kept_descriptors_are_bounded(real_cpu_cgroup: Any) -> None:
    layout, made = real_cpu_cgroup
    dirs = [os.path.join(made, f"p{i}") for i in range(cg.MAX_KEPT)]
    try:
        for d in dirs:
            os.mkdir(d)
            cg.read_quota(layout, d, keep=True)
        assert len(cg._KEPT) <= cg.MAX_KEPT
    finally:
        for d in dirs:
            cg.forget_kept(d)
            if os.path.isdir(d):
                os.rmdir(d)


def test_paths_off_cgroup_file_systems_are_read_each_time(tmp_path: Path) -> None:
    """A fake node's files (no lexical root) are opened and read every time, never kept."""
    layout = cg.Layout(1, str(tmp_path), str(tmp_path / "cpuset"), str(tmp_path / "cpu"))
    (tmp_path / "cpu" / "pod1").mkdir(parents=True)
    (tmp_path / "cpu" / "pod1" / "cpu.cfs_quota_us").write_text("100000\n")
    (tmp_path / "cpu" / "pod1" / "cpu.cfs_period_us").write_text("100000\n")
    assert cg.read_quota(layout, str(tmp_path / "cpu" / "pod1"), keep=True).quota == 100000
    assert not any(p.startswith(str(tmp_path)) for p in cg._KEPT)


MOUNT_TYPES = [
    ("/sys/devices/system/cpu/online", "sysfs"),
    ("/sys/fs/cgroup/cpu,cpuacct/kubepods", "cgroup"),
    ("/sys/fs/cgroup", "tmpfs"),
    ("/sys/fs/cgroupx", "sysfs"),  # beside a mount point, not below it
    ("/mnt/with space/x", "cgroup"),
    ("/", ""),
]


@pytest.mark.parametrize("path, expected", MOUNT_TYPES, ids=[p for p, _ in MOUNT_TYPES])
def test_compute_mount_type(path: str, expected: str) -> None:
    assert compute_mount_type(parse_mountinfo(MOUNTINFO), path) == expected


def test_online_cpus_on_sysfs_through_a_kept_descriptor(tmp_path: Path) -> None:
    """The plugin reads the online CPUs every event: on sysfs with one pread of a kept descriptor;
    a fake node's file (not on sysfs) is opened and read each time, so a change is seen at once."""
    from mixed_cpus_hook.node.config import read_online_text
    from mixed_cpus_hook.node.facts import FactsCache

    cache = FactsCache()
    real = "/sys/devices/system/cpu/online"
    if os.path.isfile(real):
        assert cache.read_sysfs_text(real, "/proc") == read_online_text(real)
        assert cache._sysfs[real] is not None  # kept
        assert cache.read_sysfs_text(real, "/proc") == read_online_text(real)
    fake = tmp_path / "online"
    fake.write_text("0-3\n")
    assert cache.read_sysfs_text(str(fake), "/proc") == "0-3\n"
    assert cache._sysfs[str(fake)] is None
    fake.write_text("0-1\n")
    assert cache.read_sysfs_text(str(fake), "/proc") == "0-1\n"
    no_proc = FactsCache()
    assert no_proc.read_sysfs_text(str(fake), str(tmp_path / "no-proc")) == "0-1\n"  # mountinfo unreadable: read as usual
