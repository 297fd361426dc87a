"""node.files.KeptFds: descriptors kept by name, bounded, closed by name or by directory."""

from __future__ import annotations

import os
from typing import Dict, List, Tuple

import pytest

from mixed_cpus_hook.node.files import KeptFds


def is_open(fd: int) -> bool:
    try:
        os.fstat(fd)
    except OSError:
        return False
    return True


# (names kept in order, limit, the directory closed, the names still kept after)
CASES: List[Tuple[str, List[str], int, str, List[str]]] = [
    ("only-that-directory", ["/cg/pod1/cpu.cfs_quota_us", "/cg/pod1/cpu.cfs_period_us", "/cg/pod2/cpu.cfs_quota_us"],
     8, "/cg/pod1", ["/cg/pod2/cpu.cfs_quota_us"]),
    ("not-a-subdirectory", ["/cg/pod1/c1/cpu.cfs_quota_us", "/cg/pod1/cpu.cfs_quota_us"],
     8, "/cg/pod1", ["/cg/pod1/c1/cpu.cfs_quota_us"]),
    ("not-a-prefix", ["/cg/pod10/cpu.cfs_quota_us", "/cg/pod1/cpu.cfs_quota_us"], 8, "/cg/pod1",
     ["/cg/pod10/cpu.cfs_quota_us"]),
    ("nothing-kept-there", ["/cg/pod2/cpu.max"], 8, "/cg/pod1", ["/cg/pod2/cpu.max"]),
    ("the-oldest-made-room", ["/cg/pod1/a", "/cg/pod2/a", "/cg/pod3/a"], 2, "/cg/pod9", ["/cg/pod2/a", "/cg/pod3/a"]),
    ("evicted-then-closed-in", ["/cg/pod1/a", "/cg/pod1/b", "/cg/pod2/a"], 2, "/cg/pod1", ["/cg/pod2/a"]),
    ("kept-again-by-name", ["/cg/pod1/a", "/cg/pod1/a"], 8, "/cg/pod9", ["/cg/pod1/a"]),
]


@pytest.mark.parametrize("names,limit,closed_dir,left", [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_close_in_closes_the_descriptors_of_one_directory(names: List[str], limit: int, closed_dir: str,
                                                         left: List[str]) -> None:
    kept = KeptFds(limit)
    fds: Dict[int, str] = {}
    try:
        for name in names:
            fd = os.open("/dev/null", os.O_RDONLY | os.O_CLOEXEC)
            fds[fd] = name
            kept.keep(name, fd)
        kept.close_in(closed_dir)
        assert sorted(kept) == sorted(left)
        # every descriptor no longer kept is closed, every kept one open; the index names exactly the kept ones
        assert sorted(fd for fd in fds if is_open(fd)) == sorted(kept.get(n) for n in left)
        assert sorted(n for names in kept.by_dir.values() for n in names) == sorted(left)
        assert all(kept.by_dir.values())
    finally:
        for name in list(kept):
            kept.close(name)
    assert not any(is_open(fd) for fd in fds) and kept.by_dir == {}
