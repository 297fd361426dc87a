"""The record store's journal: a resident plugin's records saved after its answer (store/records.py).

The crash points of the plugin with and without it are in test_nri_crash_points.py; here the
journal itself: its format (whole entries, an entry cut short), what a process reads while its
journal waits, what another process sees (the lock held until the journal is done), and a journal
that a plugin left when it died, done by whoever takes the lock next.
"""

from __future__ import annotations

import json
import multiprocessing
import os
import time
from pathlib import Path
from typing import Any, List, Optional, Tuple

import pytest

import mixed_cpus_hook.store.records as store
from mixed_cpus_hook.core.errors import RecordError
from mixed_cpus_hook.store.records import (JOURNAL_HEAD, HeldStateLock, container_exists, delete_record,
                                           format_document, format_journal_entry, list_records, list_remembered,
                                           load_container, parse_journal, record_path, replay_journal,
                                           save_document, state_lock)

from test_records import container_doc, pod_doc

SAVE_C1 = format_journal_entry("containers", "c1", b'{"a":1}')
REMOVE_C2 = format_journal_entry("containers", "c2", None)

PARSED = [
    pytest.param(b"", [], 0, id="empty"),
    pytest.param(JOURNAL_HEAD, [], 0, id="head-only"),
    pytest.param(JOURNAL_HEAD + SAVE_C1, [("containers", "c1", b'{"a":1}')], 0, id="one-save"),
    pytest.param(JOURNAL_HEAD + SAVE_C1 + REMOVE_C2,
                 [("containers", "c1", b'{"a":1}'), ("containers", "c2", None)], 0, id="save-then-remove"),
    pytest.param(JOURNAL_HEAD + SAVE_C1[:10], [], 10, id="cut-in-a-header"),
    pytest.param(JOURNAL_HEAD + SAVE_C1[:-3], [], len(SAVE_C1) - 3, id="cut-in-the-record"),
    pytest.param(JOURNAL_HEAD + SAVE_C1[:-1], [], len(SAVE_C1) - 1, id="record-without-its-newline"),
    pytest.param(JOURNAL_HEAD + SAVE_C1 + REMOVE_C2[:-1], [("containers", "c1", b'{"a":1}')], len(REMOVE_C2) - 1,
                 id="second-entry-cut"),
    pytest.param(JOURNAL_HEAD + b"rename containers c1 c2\n", [], 24, id="unknown-operation"),
    pytest.param(JOURNAL_HEAD + b"save containers c1 x7\n{}\n", [], 25, id="length-not-digits"),
    pytest.param(JOURNAL_HEAD + b"save containers c1 99999999\n{}\n", [], 31, id="length-past-the-end"),
    pytest.param(JOURNAL_HEAD + b"save containers c1 2\n{}X", [], 24, id="record-followed-by-no-newline"),
    pytest.param(b"mixed-cpus-hook journal 9\n" + SAVE_C1, [], 26 + len(SAVE_C1), id="another-version"),
    pytest.param(b"x" * 5000, [], 5000, id="not-a-journal"),
]


@pytest.mark.parametrize("data, entries, left", PARSED)
def test_parse_journal(data: bytes, entries: List[Tuple[str, str, Optional[bytes]]], left: int) -> None:
    assert parse_journal(data) == (entries, left)


def _journal(*entries: bytes) -> bytes:
    return JOURNAL_HEAD + b"".join(entries)


def _record(cid: str) -> bytes:
    return format_document(container_doc(cid))


def _lock_file(state_dir: str, data: bytes) -> int:
    os.makedirs(state_dir, exist_ok=True)
    fd = os.open(os.path.join(state_dir, "lock"), os.O_RDWR | os.O_CREAT, 0o600)
    os.pwrite(fd, data, 0)
    return fd


def test_replay_saves_and_removes_in_order_then_empties_the_file(tmp_path: Path) -> None:
    state_dir = str(tmp_path / "state")
    save_document(state_dir, "containers", "old", container_doc("old"))
    fd = _lock_file(state_dir, _journal(format_journal_entry("containers", "c1", _record("c1")),
                                        format_journal_entry("containers", "old", None),
                                        format_journal_entry("containers", "c2", _record("c2")),
                                        format_journal_entry("containers", "c2", None),
                                        format_journal_entry("containers", "c3", _record("c3"))[:-5]))
    try:
        assert replay_journal(state_dir, fd) == 4
        assert os.fstat(fd).st_size == 0
    finally:
        os.close(fd)
    assert list_records(state_dir, "containers") == ["c1"]
    assert load_container(state_dir, "c1").id == "c1"


REFUSED = [
    pytest.param(format_journal_entry("secrets", "c1", b"{}"), "entry 2 names no kind of record ('secrets')",
                 id="unknown-kind"),
    pytest.param(format_journal_entry("containers", "..", b"{}"), "entry 2 (containers ..): ", id="name-not-plain"),
    pytest.param(format_journal_entry("containers", "c9", b"{not json"), "entry 2 (containers c9): ", id="not-json"),
    pytest.param(format_journal_entry("containers", "c9", format_document(container_doc("c9", exclusive="x"))),
                 "entry 2 (containers c9): ", id="invalid-record"),
    pytest.param(format_journal_entry("containers", "c9", _record("other")), "entry 2 (containers c9): ",
                 id="record-of-another-name"),
]


@pytest.mark.parametrize("bad, message", REFUSED)
def test_replay_stops_at_an_entry_that_is_not_a_valid_record(tmp_path: Path, bad: bytes, message: str) -> None:
    """What came before it is done, the rest dropped, the file emptied, and the error names the lock file."""
    state_dir = str(tmp_path / "state")
    fd = _lock_file(state_dir, _journal(format_journal_entry("containers", "c1", _record("c1")), bad,
                                        format_journal_entry("containers", "c2", _record("c2"))))
    try:
        with pytest.raises(RecordError) as info:
            replay_journal(state_dir, fd)
        assert os.fstat(fd).st_size == 0
    finally:
        os.close(fd)
    assert str(info.value.message).startswith(f"the journal of a plugin that stopped: {message}")
    assert info.value.message.endswith("1 entries done, the rest dropped")
    assert info.value.where == os.path.join(state_dir, "lock")
    assert list_records(state_dir, "containers") == ["c1"]


def test_state_lock_does_the_journal_a_dead_plugin_left(tmp_path: Path) -> None:
    state_dir = str(tmp_path / "state")
    os.close(_lock_file(state_dir, _journal(format_journal_entry("containers", "c1", _record("c1")))))
    with state_lock(state_dir):
        assert list_records(state_dir, "containers") == ["c1"]
    assert os.path.getsize(os.path.join(state_dir, "lock")) == 0


def _journaling(state_dir: str) -> HeldStateLock:
    lock = HeldStateLock(state_dir)
    lock.journaling = True
    return lock


def _held_with_c1(tmp_path: Path) -> Tuple[str, HeldStateLock]:
    """A journaling lock after an event that saved container c1: held, its answer not yet sent."""
    state_dir = str(tmp_path / "state")
    lock = _journaling(state_dir)
    with lock:
        save_document(state_dir, "containers", "c1", container_doc("c1"))
    assert lock.held
    return state_dir, lock


def test_what_a_held_journal_saves_this_process_reads_before_any_file_is_written(tmp_path: Path) -> None:
    state_dir = str(tmp_path / "state")
    save_document(state_dir, "containers", "gone", container_doc("gone"))
    lock = _journaling(state_dir)
    with lock:
        save_document(state_dir, "containers", "c1", container_doc("c1"))
        assert delete_record(state_dir, "containers", "gone")
        assert not delete_record(state_dir, "containers", "never")
    # The event is over, its answer not yet sent: the lock is held, nothing but the journal written.
    assert lock.held
    assert sorted(os.listdir(os.path.join(state_dir, "containers"))) == ["gone.json"]
    journal = Path(state_dir, "lock").read_bytes()
    assert journal.startswith(JOURNAL_HEAD) and b"save containers c1 " in journal
    assert b"remove containers gone\n" in journal
    assert list_records(state_dir, "containers") == ["c1"]
    assert [name for name, _rec in list_remembered(state_dir, "containers")] == ["c1"]
    assert container_exists(state_dir, "c1") and not container_exists(state_dir, "gone")
    assert load_container(state_dir, "c1").id == "c1" and load_container(state_dir, "gone") is None
    lock.complete()
    assert not lock.held and os.path.getsize(os.path.join(state_dir, "lock")) == 0
    assert sorted(os.listdir(os.path.join(state_dir, "containers"))) == ["c1.json"]
    assert not store._OVERLAY and not store._JOURNALS
    assert json.loads(Path(record_path(state_dir, "containers", "c1")).read_bytes())["id"] == "c1"
    lock.close()


def test_the_next_use_does_a_waiting_journal_first(tmp_path: Path) -> None:
    """Two events answered in one read: the second's use of the lock saves the first's records."""
    state_dir, lock = _held_with_c1(tmp_path)
    with lock:
        assert os.listdir(os.path.join(state_dir, "containers")) == ["c1.json"]
        save_document(state_dir, "containers", "c2", container_doc("c2"))
    lock.complete()
    assert list_records(state_dir, "containers") == ["c1", "c2"]
    lock.close()


class Killed(BaseException):
    """A SIGKILL, in-process."""


ENDINGS = [
    # what it saved stays saved, as without a journal
    pytest.param(RecordError("the decision failed", "here"), True, id="exception-saves-at-once"),
    # the process is going away: the journal stays in the file for the next holder
    pytest.param(Killed(), False, id="kill-leaves-it-in-the-file"),
]


@pytest.mark.parametrize("raised, saved_at_once", ENDINGS)
def test_an_event_that_ends_in_an_exception(tmp_path: Path, raised: BaseException, saved_at_once: bool) -> None:
    state_dir = str(tmp_path / "state")
    lock = _journaling(state_dir)
    with pytest.raises(type(raised)):
        with lock:
            save_document(state_dir, "containers", "c1", container_doc("c1"))
            raise raised
    assert not lock.held and not store._OVERLAY and not store._JOURNALS
    assert os.path.isdir(os.path.join(state_dir, "containers")) == saved_at_once
    assert (os.path.getsize(os.path.join(state_dir, "lock")) == 0) == saved_at_once
    with lock:  # released; the same process's next event does a journal left in the file first
        assert list_records(state_dir, "containers") == ["c1"]
    assert os.path.getsize(os.path.join(state_dir, "lock")) == 0
    lock.close()


def test_a_state_lock_in_the_same_process_does_a_waiting_journal_first(tmp_path: Path) -> None:
    """flock between two descriptors of one process would wait forever (the plugin's reconcile and
    metrics take state_lock)."""
    state_dir, lock = _held_with_c1(tmp_path)
    with state_lock(state_dir):
        assert os.listdir(os.path.join(state_dir, "containers")) == ["c1.json"]
    assert not lock.held
    lock.close()


def _take_lock_and_list(state_dir: str, out: Any) -> None:
    started = time.monotonic()
    with state_lock(state_dir):
        out.put((time.monotonic() - started, os.listdir(os.path.join(state_dir, "containers"))))


def test_another_process_waits_until_the_journal_is_done(tmp_path: Path) -> None:
    state_dir, lock = _held_with_c1(tmp_path)
    ctx = multiprocessing.get_context("fork")
    out = ctx.Queue()
    proc = ctx.Process(target=_take_lock_and_list, args=(state_dir, out))
    proc.start()
    try:
        time.sleep(0.3)  # the answer being sent
        lock.complete()
        waited, listed = out.get(timeout=10)
    finally:
        proc.join(10)
        lock.close()
    assert waited >= 0.25 and listed == ["c1.json"]


def test_a_journal_whose_saving_failed_is_done_at_the_next_use(tmp_path: Path) -> None:
    state_dir, lock = _held_with_c1(tmp_path)
    containers = os.path.join(state_dir, "containers")
    os.makedirs(os.path.dirname(containers), exist_ok=True)
    with open(containers, "w", encoding="utf-8"):  # a file where the directory is to be made
        pass
    with pytest.raises(RecordError):
        lock.complete()
    assert not lock.held and os.path.getsize(os.path.join(state_dir, "lock")) > 0
    os.unlink(containers)
    with lock:
        assert list_records(state_dir, "containers") == ["c1"]
    lock.close()


def test_a_long_journal_is_done_as_it_goes(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A use that saves many records (a Synchronize releasing many at once) never journals much more
    than JOURNAL_FLUSH: what came before is saved, and a new journal begun."""
    monkeypatch.setattr(store, "JOURNAL_FLUSH", 4096)
    state_dir = str(tmp_path / "state")
    lock = _journaling(state_dir)
    largest = 0
    with lock:
        for i in range(40):
            save_document(state_dir, "containers", f"c{i}", container_doc(f"c{i}"))
            largest = max(largest, os.path.getsize(os.path.join(state_dir, "lock")))
        assert len(os.listdir(os.path.join(state_dir, "containers"))) > 30
    lock.complete()
    assert 0 < largest <= 4096 + 2 * len(_record("c39"))
    assert list_records(state_dir, "containers") == sorted(f"c{i}" for i in range(40))
    lock.close()


def test_closing_a_held_lock_leaves_its_journal_to_the_next_holder(tmp_path: Path) -> None:
    state_dir, lock = _held_with_c1(tmp_path)
    lock.close()
    assert not store._OVERLAY and not store._JOURNALS
    with state_lock(state_dir):
        assert list_records(state_dir, "containers") == ["c1"]


def test_replay_reads_a_journal_longer_than_its_first_read(tmp_path: Path) -> None:
    state_dir = str(tmp_path / "state")
    names = [f"c{i}" for i in range(20)]
    data = _journal(*(format_journal_entry("containers", n, _record(n)) for n in names))
    assert len(data) > 4096
    fd = _lock_file(state_dir, data)
    try:
        assert replay_journal(state_dir, fd) == len(names)
    finally:
        os.close(fd)
    assert list_records(state_dir, "containers") == sorted(names)


def test_a_journal_that_cannot_be_written_stays_for_the_next_holder(tmp_path: Path) -> None:
    """A record that cannot be written (here: a file where its directory is to be made) is not a
    bad entry: the whole journal stays, and is done once it can be."""
    state_dir = str(tmp_path / "state")
    data = _journal(format_journal_entry("containers", "c1", _record("c1")))
    os.close(_lock_file(state_dir, data))
    blocker = os.path.join(state_dir, "containers")
    with open(blocker, "w", encoding="utf-8"):
        pass
    with pytest.raises(RecordError, match="cannot"):
        with state_lock(state_dir):
            pass
    assert Path(state_dir, "lock").read_bytes() == data
    os.unlink(blocker)
    with state_lock(state_dir):
        assert list_records(state_dir, "containers") == ["c1"]
    assert os.path.getsize(os.path.join(state_dir, "lock")) == 0


def test_status_says_a_journal_waits(tmp_path: Path, fake_node: Any) -> None:
    """status reads without the lock: a journal in the lock file (the plugin's answer being sent, or
    a plugin that stopped) is named as a node-wide problem, and gone once it is done."""
    from mixed_cpus_hook.node.config import load_config
    from mixed_cpus_hook.usecases.status import read_status_report

    node = fake_node(version=1)
    config = load_config(node.config_path)
    lock = _journaling(config.state_dir)
    with lock:
        save_document(config.state_dir, "containers", "c1", container_doc("c1"))
    _rows, problems = read_status_report(config)
    size = os.path.getsize(os.path.join(config.state_dir, "lock"))
    assert [p for p in problems if "journal" in p] == [
        f"{os.path.join(config.state_dir, 'lock')}: a journal of {size} bytes waits: the NRI plugin's records of "
        "its last event, written once its answer is sent (after a plugin that stopped, by its restart or the next "
        "command): the rows may not show them yet"]
    lock.complete()
    assert not [p for p in read_status_report(config)[1] if "journal" in p]
    lock.close()


def _counting_pwrites(monkeypatch: pytest.MonkeyPatch) -> List[bytes]:
    """The bytes of each pwrite the store makes from now on (the journal's writes)."""
    written: List[bytes] = []
    real = os.pwrite

    def pwrite(fd: int, data: bytes, offset: int) -> int:
        written.append(bytes(data))
        return real(fd, data, offset)

    monkeypatch.setattr(store.os, "pwrite", pwrite)
    return written


def test_a_creations_two_records_are_journaled_by_one_write(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """save_pod_and_container: the pod's record then the container's, in one pwrite (a kill before it
    leaves neither, after it both); read back from the journal, then saved once the answer is sent."""
    state_dir = str(tmp_path / "state")
    pod = store.parse_pod_record(pod_doc("k1"), "k1", "x")
    rec = store.parse_container_record(container_doc("c1"), "c1", "x")
    lock = _journaling(state_dir)
    written = _counting_pwrites(monkeypatch)
    with lock:
        store.save_pod_and_container(state_dir, pod, rec)
        assert store.load_pod(state_dir, "k1") == pod and load_container(state_dir, "c1") == rec
    assert len(written) == 1
    entries, left = parse_journal(written[0])
    assert [(kind, name) for kind, name, _data in entries] == [("pods", "k1"), ("containers", "c1")] and left == 0
    assert entries[1][2] == format_document(store.format_container_record(rec))
    lock.complete()
    assert list_records(state_dir, "pods") == ["k1"] and list_records(state_dir, "containers") == ["c1"]
    lock.close()


def test_without_a_journal_the_pod_record_is_written_before_the_containers(tmp_path: Path,
                                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    """The hook's path (no journal): two files, the pod's first (the container's makes it a member that counts)."""
    state_dir = str(tmp_path / "state")
    order: List[str] = []
    real = store._write_record
    monkeypatch.setattr(store, "_write_record", lambda path, data, rec: (order.append(os.path.basename(path)),
                                                                         real(path, data, rec)))
    store.save_pod_and_container(state_dir, store.parse_pod_record(pod_doc("k1"), "k1", "x"),
                                 store.parse_container_record(container_doc("c1"), "c1", "x"))
    assert order == ["k1.json", "c1.json"]


def test_a_stops_two_removals_are_journaled_by_one_write(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """delete_records: the last member's pod record and its own, one pwrite; a record that is not
    there is not journaled."""
    state_dir = str(tmp_path / "state")
    save_document(state_dir, "pods", "k1", pod_doc("k1"))
    save_document(state_dir, "containers", "c1", container_doc("c1"))
    lock = _journaling(state_dir)
    written = _counting_pwrites(monkeypatch)
    with lock:
        store.delete_records(state_dir, [("pods", "k1"), ("containers", "c1")])
        store.delete_records(state_dir, [("containers", "never")])
        assert store.load_pod(state_dir, "k1") is None and load_container(state_dir, "c1") is None
    assert [parse_journal(w) for w in written] == [([("pods", "k1", None), ("containers", "c1", None)], 0)]
    lock.complete()
    assert list_records(state_dir, "pods") == [] and list_records(state_dir, "containers") == []
    lock.close()


def test_max_journal_bytes_holds_a_journal_at_its_bound_and_one_more_write() -> None:
    """JOURNAL_FLUSH is checked before a write, so a journal can hold that much and one more write of
    MAX_ENTRIES_WRITTEN records of MAX_RECORD_BYTES: replay_journal's read (MAX_JOURNAL_BYTES) must
    take all of it (with the bound of one entry before it, this fails)."""
    biggest = format_journal_entry("containers", "c" * store.MAX_NAME, b"x" * store.MAX_RECORD_BYTES)
    assert len(JOURNAL_HEAD) + store.JOURNAL_FLUSH + store.MAX_ENTRIES_WRITTEN * len(biggest) \
        <= store.MAX_JOURNAL_BYTES
