"""The record folders a resident plugin watches (store/records.py, "the watch"): what it knew of its
records used without a system call while only its own writes changed them, and dropped at any other
change.

Every test here uses real inotify on real folders. A change by anything but the store's own saves and
removals (raw os calls in this process, another process under the state lock) is a change the watch
did not count: the next use of the lock must see the truth, whatever the lookups remembered.
"""

from __future__ import annotations

import json
import multiprocessing
import os
import shutil
from pathlib import Path
from typing import Any, Callable, Dict, Iterator, List

import pytest

import mixed_cpus_hook.store.records as store
from mixed_cpus_hook.store.records import (HeldStateLock, container_exists, delete_record, format_document,
                                           list_records, list_remembered, load_container, load_pod, save_document,
                                           state_lock)

from test_records import container_doc, pod_doc


@pytest.fixture()
def state_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    monkeypatch.setattr(store, "WATCH_FROM", 0)  # watched from the first use (the threshold: its own test)
    path = str(tmp_path / "state")
    yield path
    for lock in list(_LOCKS):
        lock.close()
    _LOCKS.clear()


_LOCKS: List[HeldStateLock] = []


def _watched(state_dir: str, watching: bool = True) -> HeldStateLock:
    lock = HeldStateLock(state_dir)
    lock.watching = watching
    _LOCKS.append(lock)
    return lock


def _folder(state_dir: str, kind: str = "containers") -> str:
    return os.path.join(state_dir, kind)


def _truth(state_dir: str, kind: str = "containers") -> List[str]:
    """The records of ``kind`` as the folder holds them now (no cache of the store's in between)."""
    folder = _folder(state_dir, kind)
    if not os.path.isdir(folder):
        return []
    return sorted(f[:-5] for f in os.listdir(folder) if f.endswith(".json"))


def _namespace_on_disk(state_dir: str, cid: str) -> Any:
    with open(os.path.join(_folder(state_dir), cid + ".json"), encoding="utf-8") as f:
        return json.load(f)["namespace"]


def _learnt(state_dir: str) -> HeldStateLock:
    """A watching lock whose uses saved c1, c2 and pod p1 and looked them up (learnt), as a plugin's events do."""
    lock = _watched(state_dir)
    with lock:
        save_document(state_dir, "containers", "c1", container_doc("c1"))
        save_document(state_dir, "containers", "c2", container_doc("c2"))
        save_document(state_dir, "pods", "p1", pod_doc("p1"))
    with lock:
        assert list_records(state_dir, "containers") == ["c1", "c2"]
        assert load_container(state_dir, "c1") is not None and load_pod(state_dir, "p1") is not None
        assert load_container(state_dir, "nope") is None
    return lock


# -- what one use costs while nothing else changed ------------------------------------------------------


class Calls:
    """The system calls a lookup could make, counted (os's functions wrapped in place)."""

    NAMES = ("access", "stat", "fstat", "scandir", "open", "listdir", "unlink")

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.counts: Dict[str, int] = {}
        for name in self.NAMES:
            real = getattr(os, name)
            monkeypatch.setattr(os, name, self._counted(name, real))

    def _counted(self, name: str, real: Callable[..., Any]) -> Callable[..., Any]:
        def call(*args: Any, **kwargs: Any) -> Any:
            self.counts[name] = self.counts.get(name, 0) + 1
            return real(*args, **kwargs)
        return call


LOOKUPS = [
    pytest.param(lambda d: load_container(d, "c1"), id="a-record-read-before"),
    pytest.param(lambda d: load_container(d, "c9"), id="a-record-not-there"),
    pytest.param(lambda d: load_pod(d, "p9"), id="a-pod-record-not-there"),
    pytest.param(lambda d: list_records(d, "containers"), id="the-listing"),
    pytest.param(lambda d: list_remembered(d, "containers"), id="the-listing-with-records"),
    pytest.param(lambda d: delete_record(d, "containers", "c9"), id="removing-what-is-not-there"),
]


@pytest.mark.parametrize("watching", [pytest.param(True, id="watched"), pytest.param(False, id="unwatched")])
@pytest.mark.parametrize("lookup", LOOKUPS)
def test_a_lookup_makes_no_system_call_while_only_this_process_changed_the_records(
        state_dir: str, monkeypatch: pytest.MonkeyPatch, lookup: Callable[[str], Any], watching: bool) -> None:
    lock = _learnt(state_dir) if watching else _watched(state_dir, watching=False)
    if not watching:
        with lock:
            save_document(state_dir, "containers", "c1", container_doc("c1"))
            save_document(state_dir, "containers", "c2", container_doc("c2"))
            load_container(state_dir, "c1")
    with lock:  # the check reads the queue (one read) before the lookups
        expected = lookup(state_dir)
        calls = Calls(monkeypatch)
        assert lookup(state_dir) == expected
    if watching:
        assert calls.counts == {}, calls.counts
    else:  # the same lookups without the watch stat, access or list: what the watch saves
        assert calls.counts, "an unwatched lookup made no system call: the test cannot tell"


def test_the_store_counts_exactly_the_events_of_its_own_saves_and_removals(state_dir: str) -> None:
    """A hundred saves and removals of names of every length later, nothing was dropped: the bytes the
    store expects are the bytes inotify queued (else every use would list and stat again)."""
    lock = _learnt(state_dir)
    assert lock.watch is not None
    known = lock.watch.known[_folder(state_dir)]
    for n in range(100):
        name = "c" * (1 + n % 70)
        with lock:
            save_document(state_dir, "containers", name, container_doc(name))
            if n % 3:
                delete_record(state_dir, "containers", name)
            save_document(state_dir, "pods", f"pod-{n}", pod_doc(f"pod-{n}"))
    with lock:
        assert lock.watch.known[_folder(state_dir)] is known, "the watch was dropped: its count is wrong"
        assert list_records(state_dir, "containers") == _truth(state_dir)
        assert list_records(state_dir, "pods") == _truth(state_dir, "pods")


def test_the_journal_done_after_the_answer_is_counted_too(state_dir: str) -> None:
    lock = _learnt(state_dir)
    lock.journaling = True
    assert lock.watch is not None
    known = lock.watch.known[_folder(state_dir)]
    with lock:
        save_document(state_dir, "containers", "c3", container_doc("c3"))
        delete_record(state_dir, "containers", "c1")
    lock.complete()
    with lock:
        assert lock.watch.known[_folder(state_dir)] is known
        assert list_records(state_dir, "containers") == ["c2", "c3"] == _truth(state_dir)
    lock.complete()


def test_a_save_under_state_lock_in_the_same_process_is_counted(state_dir: str) -> None:
    """The plugin's reconcile writes under state_lock, not the watching lock: its saves are counted alike."""
    lock = _learnt(state_dir)
    assert lock.watch is not None
    known = lock.watch.known[_folder(state_dir)]
    with state_lock(state_dir):
        save_document(state_dir, "containers", "c4", container_doc("c4"))
    with lock:
        assert lock.watch.known[_folder(state_dir)] is known
        assert list_records(state_dir, "containers") == ["c1", "c2", "c4"]


# -- every other change is seen at the next use ----------------------------------------------------------


def _edit_in_place_same_size_same_time(state_dir: str) -> None:
    """The same number of bytes and the modification time set back: the identity a stat compares (inode,
    size, time) is unchanged, and only the watch tells."""
    path = os.path.join(_folder(state_dir), "c1.json")
    before = os.stat(path)
    data = format_document(container_doc("c1", namespace="zz"))
    assert len(data) == before.st_size
    with open(path, "r+b") as f:
        f.write(data)
    os.utime(path, ns=(before.st_atime_ns, before.st_mtime_ns))


def _save_in_another_process(state_dir: str) -> None:
    def child() -> None:
        with state_lock(state_dir):
            save_document(state_dir, "containers", "c9", container_doc("c9"))
            delete_record(state_dir, "containers", "c2")
    proc = multiprocessing.get_context("fork").Process(target=child)
    proc.start()
    proc.join(30)
    assert proc.exitcode == 0


def _folder_made_again(state_dir: str) -> None:
    shutil.rmtree(_folder(state_dir))
    os.mkdir(_folder(state_dir))
    with open(os.path.join(_folder(state_dir), "c7.json"), "wb") as f:
        f.write(format_document(container_doc("c7")))


def _state_dir_made_again(state_dir: str) -> None:
    shutil.rmtree(state_dir)
    os.makedirs(_folder(state_dir))
    with open(os.path.join(_folder(state_dir), "c8.json"), "wb") as f:
        f.write(format_document(container_doc("c8")))


def _many(state_dir: str) -> None:
    """More events than one read of the queue takes."""
    for n in range(1500):
        with open(os.path.join(_folder(state_dir), f"x{n:04d}{'y' * 40}.json"), "wb") as f:
            f.write(format_document(container_doc(f"x{n:04d}{'y' * 40}")))


def _write(state_dir: str, name: str, doc: Dict[str, Any]) -> None:
    with open(os.path.join(_folder(state_dir), name), "wb") as f:
        f.write(format_document(doc))


FOREIGN = [
    pytest.param(_save_in_another_process, ["c1", "c9"], "ns", id="another-process-saved-and-removed"),
    pytest.param(lambda d: os.unlink(os.path.join(_folder(d), "c1.json")), ["c2"], None, id="removed-by-hand"),
    pytest.param(lambda d: _write(d, "c1.json", container_doc("c1", namespace="other")), ["c1", "c2"], "other",
                 id="rewritten-in-place"),
    pytest.param(_edit_in_place_same_size_same_time, ["c1", "c2"], "zz", id="same-size-and-time-edit"),
    pytest.param(lambda d: os.utime(os.path.join(_folder(d), "c1.json"), (1, 1)), ["c1", "c2"], "ns",
                 id="touched"),
    pytest.param(lambda d: (_write(d, ".c5.tmp", container_doc("c5")),
                            os.rename(os.path.join(_folder(d), ".c5.tmp"), os.path.join(_folder(d), "c5.json"))),
                 ["c1", "c2", "c5"], "ns", id="renamed-in"),
    pytest.param(lambda d: os.rename(os.path.join(_folder(d), "c1.json"), os.path.join(d, "c1.json")), ["c2"], None,
                 id="renamed-out"),
    pytest.param(lambda d: _write(d, ".c1.12345.tmp", {}), ["c1", "c2"], "ns", id="a-temporary-left"),
    pytest.param(_folder_made_again, ["c7"], None, id="folder-made-again"),
    pytest.param(_state_dir_made_again, ["c8"], None, id="state-directory-made-again"),
    pytest.param(_many, ["c1", "c2"] + [f"x{n:04d}{'y' * 40}" for n in range(1500)], "ns",
                 id="more-than-one-read"),
]


@pytest.mark.parametrize("change, names, namespace", FOREIGN)
def test_a_change_the_watch_did_not_count_is_seen_at_the_next_use(
        state_dir: str, change: Callable[[str], None], names: List[str], namespace: Any) -> None:
    lock = _learnt(state_dir)
    assert lock.watch is not None
    inotify = lock.watch.fd
    change(state_dir)
    with lock:
        assert list_records(state_dir, "containers") == names == _truth(state_dir)
        if os.path.exists(os.path.join(state_dir, "lock")) and change is not _state_dir_made_again:
            # the descriptor kept: closing an inotify instance waits for the kernel (milliseconds)
            assert lock.watch.fd == inotify
        rec = load_container(state_dir, "c1")
        assert (rec.identity.namespace if rec is not None else None) == namespace
        assert container_exists(state_dir, "c1") == (namespace is not None)
        assert [n for n, _r in list_remembered(state_dir, "containers")] == names
    with lock:  # and learnt again: the next use agrees too
        assert list_records(state_dir, "containers") == _truth(state_dir)


def test_a_pod_record_changed_by_hand_is_seen(state_dir: str) -> None:
    lock = _learnt(state_dir)
    with open(os.path.join(_folder(state_dir, "pods"), "p1.json"), "wb") as f:
        f.write(format_document(pod_doc("p1", members=[{"id": "c2", "share_mcpu": 1000}])))
    with lock:
        rec = load_pod(state_dir, "p1")
        assert rec is not None and [m.id for m in rec.members] == ["c2"]


def test_an_edit_while_the_lock_is_held_is_seen_at_the_next_use(state_dir: str) -> None:
    """Only the lock's holders write records; an edit by hand meanwhile is seen from the next use on."""
    lock = _learnt(state_dir)
    with lock:
        load_container(state_dir, "c1")
        _write(state_dir, "c1.json", container_doc("c1", namespace="hand"))
    with lock:
        rec = load_container(state_dir, "c1")
        assert rec is not None and rec.identity.namespace == "hand" == _namespace_on_disk(state_dir, "c1")


# -- where there is no watch ----------------------------------------------------------------------------


class NoInotify:
    def inotify_init1(self, flags: int) -> int:
        return -1


def test_without_inotify_the_lookups_stat_and_list_as_before(state_dir: str, monkeypatch: pytest.MonkeyPatch) -> None:
    lock = _watched(state_dir)
    lock.watch = store.RecordWatch(state_dir, libc=NoInotify())
    with lock:
        save_document(state_dir, "containers", "c1", container_doc("c1"))
    assert lock.watch.fd is None and lock.watch.problem.startswith("inotify_init1")
    _write(state_dir, "c1.json", container_doc("c1", namespace="other"))
    with lock:
        calls = Calls(monkeypatch)
        rec = load_container(state_dir, "c1")
        assert rec is not None and rec.identity.namespace == "other"
        assert calls.counts


def test_a_forked_child_does_not_use_the_parents_watch(state_dir: str) -> None:
    """The child shares the inotify descriptor's queue: reading it would take the parent's events."""
    lock = _learnt(state_dir)
    with lock:
        assert store._TRUSTED

        def child(out: Any) -> None:
            out.put((len(store._WATCHED), len(store._TRUSTED)))
        queue = multiprocessing.get_context("fork").SimpleQueue()
        proc = multiprocessing.get_context("fork").Process(target=child, args=(queue,))
        proc.start()
        proc.join(30)
        assert queue.get() == (0, 0)
    assert not store._TRUSTED, "trusted outside the lock"


class CountedLibc:
    """libc's inotify calls, counted; ``refuse``: which of them fail."""

    def __init__(self, refuse: str = "") -> None:
        import ctypes

        self.libc = ctypes.CDLL(None, use_errno=True)
        self.refuse = refuse
        self.calls: Dict[str, int] = {}

    def inotify_init1(self, flags: int) -> int:
        self.calls["init"] = self.calls.get("init", 0) + 1
        return -1 if self.refuse == "init" else int(self.libc.inotify_init1(flags))

    def inotify_add_watch(self, fd: int, path: bytes, mask: int) -> int:
        self.calls["add"] = self.calls.get("add", 0) + 1
        return -1 if self.refuse == "add" else int(self.libc.inotify_add_watch(fd, path, mask))


@pytest.mark.parametrize("refuse, calls", [
    pytest.param("", {"init": 1, "add": 2}, id="watched-once"),
    pytest.param("init", {"init": 1}, id="inotify-refused-asked-again-later"),
    pytest.param("add", {"init": 1, "add": 2}, id="a-folder-refused-not-asked-again"),
])
def test_inotify_is_asked_once_not_at_every_use(state_dir: str, refuse: str, calls: Dict[str, int]) -> None:
    libc = CountedLibc(refuse)
    lock = _watched(state_dir)
    lock.watch = store.RecordWatch(state_dir, libc=libc)
    for n in range(20):
        with lock:
            save_document(state_dir, "containers", f"c{n}", container_doc(f"c{n}"))
            save_document(state_dir, "pods", f"p{n}", pod_doc(f"p{n}"))
        with lock:
            assert list_records(state_dir, "containers") == _truth(state_dir)
    assert libc.calls == calls
    assert bool(lock.watch.problem) == bool(refuse)
    if refuse == "init":
        lock.watch.retry = 1
        with lock:
            pass
        with lock:
            pass
        assert libc.calls == {"init": 2}


def test_the_events_of_a_use_are_read_before_its_lock_is_released(state_dir: str) -> None:
    """Off the next event's path: that event's check then finds the queue empty."""
    lock = _learnt(state_dir)
    assert lock.watch is not None and lock.watch.fd is not None
    with lock:
        save_document(state_dir, "containers", "c3", container_doc("c3"))
        delete_record(state_dir, "containers", "c1")
        assert lock.watch.expected > 0
    with pytest.raises(BlockingIOError):
        os.read(lock.watch.fd, 4096)
    assert lock.watch.expected == 0 and lock.watch.known


def test_the_watch_starts_once_a_listing_finds_watch_from_records(state_dir: str, monkeypatch: pytest.MonkeyPatch
                                                                   ) -> None:
    """A node with few mixed containers never loads inotify (ctypes): a listing costs less than the watch."""
    monkeypatch.setattr(store, "WATCH_FROM", 16)
    monkeypatch.setattr(store, "_WANTED", set())
    lock = _watched(state_dir)
    for n in range(15):
        with lock:
            save_document(state_dir, "containers", f"c{n:02d}", container_doc(f"c{n:02d}"))
            assert len(list_records(state_dir, "containers")) == n + 1
    assert lock.watch is None
    with lock:
        save_document(state_dir, "containers", "c15", container_doc("c15"))
        assert len(list_records(state_dir, "containers")) == 16  # the listing that finds 16
    assert lock.watch is None
    with lock:  # the next use watches
        assert lock.watch is not None and store._TRUSTED
        assert list_records(state_dir, "containers") == _truth(state_dir)
