"""node/inotify.py: the watch on kubelet's checkpoint directory, on real inotify in temporary directories."""

from __future__ import annotations

import os
import select
import struct
from pathlib import Path
from typing import Any, Tuple

import pytest

from mixed_cpus_hook.node.inotify import (IN_CLOSE_WRITE, IN_DELETE_SELF, IN_IGNORED, IN_MOVED_TO, IN_Q_OVERFLOW,
                                          FileWatch, parse_events)

NAME = b"cpu_manager_state"


def event(mask: int, name: bytes = b"", pad: int = 0) -> bytes:
    """One struct inotify_event as the kernel writes it (the name NUL-padded)."""
    raw = name + b"\0" * pad if name or pad else b""
    return struct.pack("iIII", 1, mask, 0, len(raw)) + raw


@pytest.mark.parametrize("data,expected", [
    pytest.param(event(IN_MOVED_TO, NAME, 3), (True, False), id="renamed-over-the-file"),
    pytest.param(event(IN_CLOSE_WRITE, NAME), (True, False), id="written-in-place"),
    pytest.param(event(IN_CLOSE_WRITE, NAME + b".tmp", 4), (False, False), id="kubelet-temporary-only"),
    pytest.param(event(IN_CLOSE_WRITE, NAME + b".tmp", 4) + event(IN_MOVED_TO, NAME, 15), (True, False),
                 id="temporary-then-rename"),
    pytest.param(event(IN_MOVED_TO, b"cpu_manager_stat", 16), (False, False), id="a-prefix-of-the-name"),
    pytest.param(event(IN_Q_OVERFLOW), (True, False), id="events-lost"),
    pytest.param(event(IN_DELETE_SELF) + event(IN_IGNORED), (True, True), id="directory-removed"),
    pytest.param(event(IN_MOVED_TO, NAME)[:10], (False, False), id="a-partial-header-ignored"),
    pytest.param(b"", (False, False), id="nothing"),
])
def test_parse_events(data: bytes, expected: Tuple[bool, bool]) -> None:
    assert parse_events(data, NAME) == expected


def readable(watch: FileWatch, timeout: float = 2.0) -> bool:
    fd = watch.fileno()
    assert fd is not None
    poller = select.poll()
    poller.register(fd, select.POLLIN)
    return bool(poller.poll(timeout * 1000))


def replace(path: Path, text: str) -> None:
    """As kubelet writes its checkpoint: a temporary beside it, renamed over it."""
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(text)
    os.replace(tmp, path)


def test_a_replaced_file_wakes_the_poll_loop(tmp_path: Path) -> None:
    path = tmp_path / "cpu_manager_state"
    watch = FileWatch(str(path))
    try:
        assert watch.fileno() is not None and watch.problem == ""
        assert watch.drain() is False  # nothing queued
        (tmp_path / "other").write_text("x")
        assert readable(watch) and watch.drain() is False  # another file of the directory
        replace(path, "{}")
        assert readable(watch) and watch.drain() is True
        assert watch.drain() is False  # drained
        path.write_text("{}")  # in place
        assert readable(watch) and watch.drain() is True
        path.unlink()
        assert readable(watch) and watch.drain() is True
    finally:
        watch.close()
    assert watch.fileno() is None


def test_the_directory_made_later_and_removed(tmp_path: Path) -> None:
    folder = tmp_path / "kubelet"
    watch = FileWatch(str(folder / "cpu_manager_state"))
    try:
        assert watch.fileno() is None
        assert watch.problem == f"{folder}: no such directory"
        assert watch.drain() is False and watch.ensure() is False
        folder.mkdir()
        assert watch.ensure() is True and watch.fileno() is not None and watch.problem == ""
        assert watch.ensure() is True  # kept
        replace(folder / "cpu_manager_state", "{}")
        assert readable(watch) and watch.drain() is True
        for name in os.listdir(folder):
            os.unlink(folder / name)
        folder.rmdir()
        assert readable(watch) and watch.drain() is True
        assert watch.fileno() is None  # the directory went: watched again once it is back
        folder.mkdir()
        assert watch.ensure() is True
    finally:
        watch.close()


def test_a_directory_symlink_is_not_followed(tmp_path: Path) -> None:
    (tmp_path / "real").mkdir()
    (tmp_path / "link").symlink_to(tmp_path / "real")
    watch = FileWatch(str(tmp_path / "link" / "cpu_manager_state"))
    try:
        assert watch.fileno() is None and "Not a directory" in watch.problem
    finally:
        watch.close()


class NoInotify:
    """A libc without inotify (another platform): the plugin reads the checkpoint at each event."""

    def __getattr__(self, name: str) -> Any:
        raise AttributeError(name)


class Refusing:
    """A libc whose inotify_init1 fails (no more inotify instances for this user)."""

    def inotify_init1(self, flags: int) -> int:
        import ctypes

        ctypes.set_errno(24)  # EMFILE
        return -1


@pytest.mark.parametrize("libc,problem", [
    pytest.param(NoInotify(), "inotify is not available: inotify_init1", id="no-inotify"),
    pytest.param(Refusing(), "inotify_init1: Too many open files", id="init-refused"),
])
def test_no_watch_is_said_not_raised(tmp_path: Path, libc: Any, problem: str) -> None:
    watch = FileWatch(str(tmp_path / "cpu_manager_state"), libc=libc)  # tmp_path is there
    assert watch.fileno() is None and watch.problem == problem
    assert watch.drain() is False and watch.ensure() is False
