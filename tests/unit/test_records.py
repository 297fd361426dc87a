"""Records in the state directory: plain names only, atomic writes, the lock, concurrent hooks."""

from __future__ import annotations

import io
import json
import multiprocessing
import os
from pathlib import Path
from typing import Any, Callable, Dict, List

import pytest

import mixed_cpus_hook.store.records as store
from mixed_cpus_hook.core.errors import RecordError
from mixed_cpus_hook.core.validate import is_plain_name
from mixed_cpus_hook.store.records import (SCHEMA_VERSION,
                                           container_exists,
                                           delete_record,
                                           format_document,
                                           list_records,
                                           list_remembered,
                                           load_container,
                                           load_record,
                                           read_document,
                                           record_path,
                                           save_container,
                                           save_document,
                                           state_lock)


def container_doc(cid: str, **extra: Any) -> Dict[str, Any]:
    """A valid container record (records are checked when loaded)."""
    doc = {"schema": SCHEMA_VERSION, "id": cid, "namespace": "ns", "pod": "p", "container": "c", "pod_uid": "u",
           "cgroup_version": 1, "cgroup": {"cpuset": "/sys/fs/cgroup/cpuset/x", "cpu": "/sys/fs/cgroup/cpu/x"},
           "pod_cgroup": None, "pod_key": None, "exclusive": "2-3", "shared": "0-1", "desired": "0-3",
           "quota": {"base": None, "applied": None, "period": 100000}, "created": "2026-01-01T00:00:00Z",
           "updated": "2026-01-01T00:00:00Z"}
    doc.update(extra)
    return doc


def pod_doc(key: str, **extra: Any) -> Dict[str, Any]:
    doc = {"schema": SCHEMA_VERSION, "key": key, "cgroup": {"cpuset": "/a", "cpu": "/b"},
           "quota": None, "members": [{"id": "c1", "share_mcpu": 2000}]}
    doc.update(extra)
    return doc


def doc_for(kind: str, name: str, **extra: Any) -> Dict[str, Any]:
    return container_doc(name, **extra) if kind == "containers" else pod_doc(name, **extra)


REFUSED_NAMES = [
    pytest.param("containers", "../x", id="parent-dir"),
    pytest.param("containers", "..", id="dotdot"),
    pytest.param("containers", ".", id="dot"),
    pytest.param("containers", "a/b", id="slash"),
    pytest.param("containers", "/etc/passwd", id="absolute"),
    pytest.param("containers", "", id="empty"),
    pytest.param("containers", "x\n", id="trailing-newline"),
    pytest.param("containers", "a\0b", id="nul"),
    pytest.param("containers", "a:b", id="colon-is-not-an-id-char"),
    pytest.param("containers", "a" * 1025, id="id-too-long"),
    pytest.param("pods", "../pods", id="pod-parent-dir"),
    pytest.param("pods", "kubepods.slice/x", id="pod-slash"),
    pytest.param("pods", "a" * 256, id="pod-name-too-long"),
]


@pytest.mark.parametrize("kind,name", REFUSED_NAMES)
def test_names_that_are_not_one_component_are_refused(tmp_path: Path, kind: str, name: str) -> None:
    state_dir = str(tmp_path / "state")
    for call in (lambda: record_path(state_dir, kind, name),
                 lambda: load_record(state_dir, kind, name),
                 lambda: save_document(state_dir, kind, name, {"schema": 1}),
                 lambda: delete_record(state_dir, kind, name)):
        with pytest.raises(RecordError) as info:
            call()
        assert "is not a plain name" in info.value.message
        assert info.value.where == os.path.join(state_dir, kind)
    assert not os.path.exists(state_dir)
    assert not os.path.exists(tmp_path / "x.json")


def test_remembered_record_paths_are_only_of_names_that_passed_and_bounded(tmp_path: Path) -> None:
    from mixed_cpus_hook.store import records

    state_dir = str(tmp_path / "state")
    for _ in range(2):  # a refused name stays refused: it is never remembered
        with pytest.raises(RecordError, match="is not a plain name"):
            record_path(state_dir, "containers", "../x")
    assert record_path(state_dir, "containers", "c1") == os.path.join(state_dir, "containers", "c1.json")
    assert record_path(state_dir, "pods", "c1") == os.path.join(state_dir, "pods", "c1.json")  # kind is in the key
    for i in range(2 * records.MAX_PATHS):
        record_path(state_dir, "containers", f"c{i}")
    assert len(records._PATHS) <= records.MAX_PATHS


# What names a lookup leaves in the record store's path memo: a resident plugin sees containers come
# and go without end, and most of a node's never have a record (their events only ask whether they do):
# only the last MAX_MISSED names that missed stay.
@pytest.mark.parametrize("kind, lookup", [
    pytest.param("containers", lambda s, n: store.load_container(s, n), id="container-load-misses"),
    pytest.param("containers", lambda s, n: store.container_exists(s, n), id="container-exists-misses"),
    pytest.param("pods", lambda s, n: store.load_pod(s, n), id="pod-load-misses"),
    pytest.param("containers", lambda s, n: store.delete_record(s, "containers", n), id="container-deleted"),
    pytest.param("pods", lambda s, n: store.delete_record(s, "pods", n), id="pod-deleted"),
])
def test_names_without_a_record_leave_only_the_last_misses_in_the_path_memo(
        tmp_path: Path, kind: str, lookup: Callable[[str, str], Any]) -> None:
    from mixed_cpus_hook.store import records

    state_dir = str(tmp_path / "state")
    records.save_document(state_dir, kind, "kept", {"schema": 2})  # the folder, and one record that stays
    before = dict(records._PATHS)
    for i in range(50):
        name = f"gone{i}"
        records.save_document(state_dir, kind, name, {"schema": 2})
        records.delete_record(state_dir, kind, name)
        assert not lookup(state_dir, name)
    left = {k: v for k, v in records._PATHS.items() if k not in before}
    assert len(left) <= records.MAX_MISSED
    assert all(k[2].startswith("gone") for k in left)
    assert (state_dir, kind, "kept") in records._PATHS  # a name whose record is there stays
    assert os.listdir(os.path.join(state_dir, kind)) == ["kept.json"]
    assert records.read_document(state_dir, kind, "kept") == {"schema": 2}


ACCEPTED_NAMES = [
    pytest.param("containers", "0123abcdef", id="hex-id"),
    pytest.param("containers", "my_ctr-1.2+x", id="runc-id-chars"),
    pytest.param("containers", "...", id="three-dots"),
    pytest.param("pods", "pod0f1e2d3c-aaaa-bbbb-cccc-123456789abc", id="cgroupfs-pod"),
    pytest.param("pods", "kubepods-burstable-pod0f1e2d3c_aaaa.slice", id="systemd-pod"),
    pytest.param("pods", "a:b@c", id="colon-and-at"),
]


@pytest.mark.parametrize("kind,name", ACCEPTED_NAMES)
def test_plain_names_round_trip(tmp_path: Path, kind: str, name: str) -> None:
    state_dir = str(tmp_path / "state")
    doc = doc_for(kind, name)
    path = save_document(state_dir, kind, name, doc)
    assert path == os.path.join(state_dir, kind, name + ".json")
    assert read_document(state_dir, kind, name) == doc
    assert load_record(state_dir, kind, name)[0] == name  # the typed record: its id, or its key
    assert list_records(state_dir, kind) == [name]
    assert delete_record(state_dir, kind, name) is True
    assert delete_record(state_dir, kind, name) is False
    assert load_record(state_dir, kind, name) is None


def test_save_replaces_the_file_whole(tmp_path: Path) -> None:
    """A reader holding the old file keeps reading the old record: the new one is a new inode."""
    state_dir = str(tmp_path)
    path = save_document(state_dir, "containers", "c1", container_doc("c1", pod="old" * 1000))
    with open(path, encoding="utf-8") as reader:
        inode = os.stat(path).st_ino
        save_document(state_dir, "containers", "c1", container_doc("c1", pod="new"))
        assert json.load(reader)["pod"] == "old" * 1000
    assert os.stat(path).st_ino != inode
    assert load_record(state_dir, "containers", "c1").identity.pod == "new"
    assert sorted(os.listdir(tmp_path / "containers")) == ["c1.json"]


def test_failed_save_keeps_the_old_record(tmp_path: Path) -> None:
    state_dir = str(tmp_path)
    save_document(state_dir, "containers", "c1", container_doc("c1"))
    with pytest.raises(TypeError):
        save_document(state_dir, "containers", "c1", container_doc("c1", pod=object()))
    assert read_document(state_dir, "containers", "c1") == container_doc("c1")


def test_failed_rename_removes_the_temporary(tmp_path: Path) -> None:
    state_dir = str(tmp_path)
    (tmp_path / "containers" / "c2.json").mkdir(parents=True)
    with pytest.raises(RecordError, match="cannot write"):
        save_document(state_dir, "containers", "c2", {"schema": 1})
    assert os.listdir(tmp_path / "containers") == ["c2.json"]


def _record_bytes(**changes: Any) -> bytes:
    doc = container_doc("c1")
    for key, value in changes.items():
        if value is KeyError:
            del doc[key]
        else:
            doc[key] = value
    return json.dumps(doc).encode()


LOAD_ERRORS = [
    pytest.param(b"{", "invalid record: not JSON", id="not-json"),
    pytest.param(_record_bytes()[:-9], "invalid record: not JSON", id="truncated"),
    pytest.param(b"[]", "invalid record: not a JSON object", id="array"),
    pytest.param(b'{"id": "c1"}', "invalid record: not a schema 1 or 2 record", id="no-schema"),
    pytest.param(b'{"schema": 3}', "invalid record: not a schema 1 or 2 record", id="future-schema"),
    pytest.param(b"[" * 100000 + b"]" * 100000, "invalid record: nested too deeply", id="deeply-nested"),
    pytest.param(_record_bytes(exclusive=5), "invalid record: exclusive is missing or not a cpulist string",
                 id="exclusive-wrong-type"),
    pytest.param(_record_bytes(exclusive="2-x"), "invalid record: exclusive '2-x' is not a cpulist",
                 id="exclusive-not-a-cpulist"),
    pytest.param(_record_bytes(quota=KeyError), "invalid record: quota is not an object", id="quota-missing"),
    pytest.param(_record_bytes(quota={"base": 1, "applied": "2", "period": 100000}),
                 "invalid record: quota.applied is not a non-negative integer or null", id="quota-applied-string"),
    pytest.param(_record_bytes(quota={"base": 1, "applied": 2, "period": 0}),
                 "invalid record: quota.period is not a positive integer", id="quota-period-zero"),
    pytest.param(_record_bytes(quota={"base": (1 << 63) - 100000, "applied": 2, "period": 100000}),
                 "invalid record: quota.base 9223372036854675808 is above the kernel's maximum quota 17592186044415",
                 id="quota-base-above-kernel-max"),
    pytest.param(_record_bytes(quota={"base": 1, "applied": 1 << 44, "period": 100000}),
                 "invalid record: quota.applied 17592186044416 is above the kernel's maximum quota", id="applied-above"),
    pytest.param(_record_bytes(quota={"base": 1, "applied": 2, "period": 1000001}),
                 "invalid record: quota.period 1000001 is above the kernel's maximum period 1000000",
                 id="period-above-kernel-max"),
    pytest.param(_record_bytes(quota={"base": 1, "applied": 2, "period": 100000, "ours": [1 << 63]}),
                 "invalid record: quota.ours is not a list of non-negative integers up to 17592186044415",
                 id="ours-above-kernel-max"),
    pytest.param(_record_bytes(quota={"base": 1, "applied": 2, "period": 1, "ours": [True]}),
                 "invalid record: quota.ours is not a list of non-negative integers", id="quota-ours-bool"),
    pytest.param(_record_bytes(id="c2"), "invalid record: id does not match the file name", id="id-mismatch"),
    pytest.param(_record_bytes(cgroup={"cpuset": "x", "cpu": "/y"}),
                 "invalid record: cgroup is not a pair of absolute cgroup paths", id="cgroup-relative"),
    pytest.param(_record_bytes(pod_key="p"), "invalid record: pod_key and pod_cgroup must be both set or both null",
                 id="pod-key-without-cgroup"),
    pytest.param(_record_bytes(mode="cri"), "invalid record: mode is not one of hook, nri", id="unknown-mode"),
    pytest.param(_record_bytes(cgroup_version=True), "invalid record: cgroup_version is not 1 or 2",
                 id="cgroup-version-bool"),
    pytest.param(b" " * (2 << 20), "invalid record: larger than 1048576 bytes", id="huge"),
]


@pytest.mark.parametrize("content,message", LOAD_ERRORS)
def test_load_record_errors(tmp_path: Path, content: bytes, message: str) -> None:
    (tmp_path / "containers").mkdir()
    (tmp_path / "containers" / "c1.json").write_bytes(content)
    with pytest.raises(RecordError) as info:
        load_record(str(tmp_path), "containers", "c1")
    assert info.value.message.startswith(message)
    assert info.value.where == str(tmp_path / "containers" / "c1.json")


def test_load_record_does_not_follow_a_symlink(tmp_path: Path) -> None:
    secret = tmp_path / "secret.json"
    secret.write_text('{"schema": 1, "stolen": true}')
    (tmp_path / "containers").mkdir()
    os.symlink(secret, tmp_path / "containers" / "c1.json")
    with pytest.raises(RecordError, match="is a symbolic link; refusing to follow it"):
        load_record(str(tmp_path), "containers", "c1")


@pytest.mark.parametrize("kind", ["containers", "pods"])
def test_a_symlinked_state_subdirectory_is_refused(tmp_path: Path, kind: str) -> None:
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    state = tmp_path / "state"
    state.mkdir()
    os.symlink(elsewhere, state / kind)
    name = "c1" if kind == "containers" else "pod1"
    for call in (lambda: save_document(str(state), kind, name, doc_for(kind, name)),
                 lambda: load_record(str(state), kind, name), lambda: list_records(str(state), kind)):
        with pytest.raises(RecordError, match="is a symbolic link to .*refusing to follow it"):
            call()
    assert os.listdir(elsewhere) == []


def test_save_record_does_not_write_through_a_planted_temporary_symlink(tmp_path: Path) -> None:
    victim = tmp_path / "victim"
    victim.write_text("untouched")
    (tmp_path / "containers").mkdir()
    os.symlink(victim, tmp_path / "containers" / f".c1.{os.getpid()}.tmp")
    with pytest.raises(RecordError):
        save_document(str(tmp_path), "containers", "c1", {"schema": 1})
    assert victim.read_text() == "untouched"


def test_list_records_skips_temporaries_and_strange_names(tmp_path: Path) -> None:
    folder = tmp_path / "containers"
    folder.mkdir()
    for name in ("b.json", "a.json", ".a.123.tmp", ".dot.json", "notes.txt", "..json", "x y.json", "a:b.json"):
        (folder / name).write_text("{}")
    assert list_records(str(tmp_path), "containers") == [".dot", "a", "b"]
    assert list_records(str(tmp_path), "pods") == []


# File names in a state subdirectory -> whether each kind lists them (a record's name, then ".json").
LISTED = [
    ("abc.json", True, True),
    ("0a1B" * 16 + ".json", True, True),  # containerd's ids: the listing's shortcut
    ("\u0661\u0662.json", False, False),  # letters and digits, not ASCII ones
    ("a" * 250 + ".json", True, True),
    ("A-b_c+d.e.json", True, True),
    (".x.json", True, True),          # a leading dot is legal in an id
    ("....json", True, True),         # "...", a legal id
    ("..json", False, False),         # "."
    ("...json", False, False),        # ".."
    (".json", False, False),          # no name
    ("pod:x@y.json", False, True),    # ":" and "@" only in a pod key
    ("a b.json", False, False),
    ("é.json", False, False),
    ("abc.json.tmp", False, False),
    (".abc.4242.tmp", False, False),  # a temporary
    ("abc.JSON", False, False),
    ("abc.json\n", False, False),
    ("abc", False, False),
]


@pytest.mark.parametrize("name, container, pod", LISTED, ids=[repr(e[0][:24]) for e in LISTED])
def test_a_listing_takes_exactly_the_names_a_record_can_have(tmp_path: Path, name: str, container: bool,
                                                              pod: bool) -> None:
    """The listing (its shortcut for names of ASCII letters and digits, is_plain_name for the others)
    takes exactly the names record_path takes."""
    for kind, listed in (("containers", container), ("pods", pod)):
        (tmp_path / kind).mkdir()
        (tmp_path / kind / name).write_text("{}")
        stem = name[:-len(".json")]
        assert (list_records(str(tmp_path), kind) == [stem]) is listed, kind
        assert listed == (name.endswith(".json") and is_plain_name(stem, store.KINDS[kind])), kind


def test_list_remembered_gives_a_record_only_while_its_file_is_the_one_remembered(tmp_path: Path) -> None:
    """The NRI plugin's look over every tracked container at a checkpoint change: the records it
    saved or loaded come from memory while their files are at the inodes it saw (no stat each); one
    never loaded, one another writer replaced since (renamed a new file over it), one gone: not."""
    state_dir = str(tmp_path / "state")
    for cid in ("a", "b", "c", "r"):
        save_document(state_dir, "containers", cid, container_doc(cid))  # as another process writes them
    assert list_remembered(state_dir, "containers") == [("a", None), ("b", None), ("c", None), ("r", None)]
    recs = {cid: load_container(state_dir, cid) for cid in ("a", "b", "c")}  # read: remembered as read
    save_container(state_dir, recs["a"])  # saved: remembered as written
    got = list_remembered(state_dir, "containers")
    assert [(name, rec is not None and rec is recs.get(name)) for name, rec in got] == [
        ("a", True), ("b", True), ("c", True), ("r", False)]
    folder = tmp_path / "state" / "containers"
    (folder / ".b.999.tmp").write_text(json.dumps(container_doc("b", exclusive="4-5", desired="0-1,4-5")))
    os.replace(folder / ".b.999.tmp", folder / "b.json")  # another writer's save
    (folder / "c.json").unlink()
    (folder / "d.json").write_text(json.dumps(container_doc("d")))
    got = list_remembered(state_dir, "containers")
    assert [(name, rec is not None) for name, rec in got] == [("a", True), ("b", False), ("d", False), ("r", False)]
    b = load_container(state_dir, "b")
    assert b is not None and b.exclusive == frozenset({4, 5})  # what the other writer saved
    assert dict(list_remembered(state_dir, "containers"))["b"] is b


def test_a_record_read_is_looked_up_again_by_one_stat(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A record only read (the plugin after a restart) is remembered with the identity it was read
    at, as a saved one is: its next lookup is a stat, not a read; a write in place (another size or
    time) is read again."""
    state_dir = str(tmp_path / "state")
    save_document(state_dir, "containers", "a", container_doc("a"))
    first = load_container(state_dir, "a")
    reads: List[str] = []
    real = store.read_regular_file_stat

    def counted(*args: Any, **kwargs: Any) -> Any:
        reads.append(args[0])
        return real(*args, **kwargs)

    monkeypatch.setattr(store, "read_regular_file_stat", counted)
    assert load_container(state_dir, "a") is first and reads == []
    path = tmp_path / "state" / "containers" / "a.json"
    with open(path, "r+", encoding="utf-8") as f:  # in place, by hand: another size
        doc = json.load(f)
        f.seek(0)
        f.write(json.dumps(dict(doc, namespace="ns2")))
        f.truncate()
    again = load_container(state_dir, "a")
    assert again is not None and again.identity.namespace == "ns2" and reads == ["a.json"]


def test_state_lock_creates_the_directory(tmp_path: Path) -> None:
    state_dir = tmp_path / "run" / "hook"
    with state_lock(str(state_dir)):
        assert (state_dir / "lock").exists()
    assert oct(os.stat(state_dir).st_mode & 0o777) == oct(0o755)


def test_state_lock_unusable_directory(tmp_path: Path) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("")
    with pytest.raises(RecordError) as info:
        with state_lock(str(blocker / "state")):
            pass
    assert info.value.message.startswith("cannot use the state directory")


def _hold_lock_then_write(state_dir: str, path: str, ready: Any) -> None:
    with state_lock(state_dir):
        ready.set()
        import time

        time.sleep(0.3)
        with open(path, "a", encoding="utf-8") as f:
            f.write("first\n")


def test_state_lock_excludes_other_processes(tmp_path: Path) -> None:
    ctx = multiprocessing.get_context("fork")
    ready = ctx.Event()
    out = str(tmp_path / "order")
    proc = ctx.Process(target=_hold_lock_then_write, args=(str(tmp_path), out, ready))
    proc.start()
    assert ready.wait(10)
    with state_lock(str(tmp_path)):
        with open(out, "a", encoding="utf-8") as f:
            f.write("second\n")
    proc.join(10)
    assert Path(out).read_text() == "first\nsecond\n"


# -- concurrent hooks on one pod --------------------------------------------------------------

WORKERS = 2
PER_WORKER = 20


def _apply_many(config_path: str, cache_dir: str, state_files: List[str], command: str, errors: Any) -> None:
    from mixed_cpus_hook.frontends.hook.fastpath import parse_fast_args, run_hook
    from mixed_cpus_hook.node.log import Reporter

    for state_file in state_files:
        stream = io.StringIO()
        args = parse_fast_args(["--config", config_path, command, "--state", state_file])
        code = run_hook(args, stdout=io.StringIO(), reporter=Reporter(stream=stream, sink=None),
                        environ={"MIXED_CPUS_HOOK_CACHE_DIR": cache_dir})
        if code != 0:
            errors.put(f"{state_file}: exit {code}: {stream.getvalue()}")


def _run_workers(command: str, node: Any, cache_dir: str, states: List[List[str]]) -> None:
    ctx = multiprocessing.get_context("fork")
    errors = ctx.Queue()
    procs = [ctx.Process(target=_apply_many, args=(node.config_path, cache_dir, files, command, errors))
             for files in states]
    for p in procs:
        p.start()
    for p in procs:
        p.join(60)
        assert p.exitcode == 0
    found = []
    while not errors.empty():
        found.append(errors.get())
    assert found == []


@pytest.mark.parametrize("version", [1, 2], ids=["v1", "v2"])
def test_concurrent_hooks_of_one_pod_lose_no_update(fake_node: Callable[..., Any], config_cache_dir: str,
                                                    version: int) -> None:
    node = fake_node(version=version)
    states: List[List[str]] = [[] for _ in range(WORKERS)]
    rels: Dict[str, str] = {}
    pod_rel = ""
    for w in range(WORKERS):
        for i in range(PER_WORKER):
            cid = f"w{w}c{i:02d}"
            paths = node.add_container(cid, name=f"app{w}{i}", quota=100000, pod_quota=200000)
            states[w].append(paths["state"])
            rels[cid] = paths["rel"]
            pod_rel = paths["pod_rel"]
    ids = sorted(rels)

    _run_workers("apply", node, config_cache_dir, states)

    pods = node.records("pods")
    assert [m["id"] for m in list(pods.values())[0]["members"]] == ids
    members = len(ids)
    expected_pod = 200000 + members * 2 * 100000
    assert list(pods.values())[0]["quota"] == {"base": 200000, "applied": expected_pod, "period": 100000,
                                             "ours": [expected_pod]}
    assert node.quota(pod_rel) == str(expected_pod)
    assert sorted(node.records("containers")) == ids
    for rel in rels.values():
        assert node.read(rel, "cpuset.cpus") == "0-3"
        assert node.quota(rel) == "300000"

    _run_workers("release", node, config_cache_dir, states)

    assert node.records("pods") == {}
    assert node.records("containers") == {}
    assert node.quota(pod_rel) == "200000"


def test_concurrent_apply_and_release_end_consistent(fake_node: Callable[..., Any], config_cache_dir: str) -> None:
    """One worker releases the first half while another applies the second half."""
    node = fake_node(version=1)
    first, second = [], []
    for i in range(PER_WORKER * 2):
        paths = node.add_container(f"c{i:02d}", name=f"app{i}", quota=100000, pod_quota=200000)
        (first if i < PER_WORKER else second).append(paths)
    pod_rel = first[0]["pod_rel"]
    _run_workers("apply", node, config_cache_dir, [[p["state"] for p in first]])
    ctx = multiprocessing.get_context("fork")
    errors = ctx.Queue()
    procs = [ctx.Process(target=_apply_many, args=(node.config_path, config_cache_dir, [p["state"] for p in first],
                                                   "release", errors)),
             ctx.Process(target=_apply_many, args=(node.config_path, config_cache_dir, [p["state"] for p in second],
                                                   "apply", errors))]
    for p in procs:
        p.start()
    for p in procs:
        p.join(60)
    assert errors.empty()
    pod = list(node.records("pods").values())[0]
    assert [m["id"] for m in pod["members"]] == [f"c{i:02d}" for i in range(PER_WORKER, PER_WORKER * 2)]
    assert node.quota(pod_rel) == str(200000 + PER_WORKER * 2 * 100000) == str(pod["quota"]["applied"])


@pytest.mark.parametrize("kind", ["containers", "pods"])
def test_names_too_long_for_their_temporary_are_refused_up_front(tmp_path: Path, kind: str) -> None:
    state_dir = str(tmp_path / "state")
    with pytest.raises(RecordError, match="longer than 242 characters"):
        save_document(state_dir, kind, "a" * 243, doc_for(kind, "a" * 243))
    assert not os.path.exists(state_dir)
    save_document(state_dir, kind, "a" * 242, doc_for(kind, "a" * 242))
    assert list_records(state_dir, kind) == ["a" * 242]


def _changed_by_another_writer(path: Path, text: str) -> None:
    """What the hook, a CLI command or an editor does: a new file renamed over the record."""
    tmp = path.with_name(".other.tmp")
    tmp.write_text(text)
    os.replace(tmp, path)


def _edited_in_place_same_size(path: Path, text: str) -> None:
    st = path.stat()
    with open(path, "r+") as f:
        f.write(text)
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns + 1_000_000))  # a later write: a later time


def _edited_in_place_other_size(path: Path, text: str) -> None:
    st = path.stat()
    path.write_text(text + " ")
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns))  # even with the time put back


def _replaced_by_a_symlink(path: Path, text: str) -> None:
    target = path.with_name("elsewhere.json")
    target.write_text(text)
    path.unlink()
    os.symlink(target, path)


@pytest.mark.parametrize("change, expect", [
    (None, "saved"),
    (_changed_by_another_writer, "changed"),
    (_edited_in_place_same_size, "changed"),
    (_edited_in_place_other_size, "changed"),
    (lambda path, text: path.unlink(), None),
    (_replaced_by_a_symlink, "symlink"),
], ids=["untouched", "renamed-over", "edited-same-size", "edited-other-size", "removed", "symlink"])
def test_a_remembered_record_is_used_only_while_the_file_is_the_one_saved(
        tmp_path: Path, change: Any, expect: Any) -> None:
    """The plugin loads a record it saved with one lstat; any other writer's change is read and parsed."""
    from mixed_cpus_hook.store import records

    state = str(tmp_path)
    saved = records.parse_container_record(container_doc("c1"), "c1", "x")
    records.save_container(state, saved)
    path = tmp_path / "containers" / "c1.json"
    old = path.read_text()
    text = old.replace("2026-01-01T00:00:00Z", "2026-01-02T00:00:00Z")  # the same size
    assert len(text) == len(old) and text != old
    if change is not None:
        change(path, text)
    if expect == "symlink":
        with pytest.raises(RecordError, match="symbolic link"):
            records.load_container(state, "c1")
        return
    got = records.load_container(state, "c1")
    if expect is None:
        assert got is None
    elif expect == "saved":
        assert got is saved
    else:
        assert got is not None and got.created.startswith("2026-01-02"), got


def test_a_state_directory_removed_and_made_again_is_opened_again(tmp_path: Path) -> None:
    """The kept descriptor of a removed directory (an administrator cleaned /run) is not written through."""
    import shutil

    from mixed_cpus_hook.store import records

    state = tmp_path / "state"
    rec = records.parse_container_record(container_doc("c1"), "c1", "x")
    records.save_container(str(state), rec)
    shutil.rmtree(state)
    assert records.load_container(str(state), "c1") is None  # the directory is gone: no record
    records.save_container(str(state), rec)
    assert os.listdir(state / "containers") == ["c1.json"]
    assert records.delete_record(str(state), "containers", "c1") and os.listdir(state / "containers") == []


def _remade_with(state: Path, files: Dict[str, Dict[str, Any]]) -> None:
    """The state directory removed and made again, holding ``files`` (written by someone else)."""
    import shutil

    shutil.rmtree(state)
    (state / "containers").mkdir(parents=True)
    for name, doc in files.items():
        (state / "containers" / f"{name}.json").write_text(json.dumps(doc))


# Each operation through a kept descriptor of a directory removed since sees the new directory.
REMADE_CASES = [
    ("load-finds-the-new-record", {"c2": container_doc("c2")},
     lambda s, rec: load_record(s, "containers", "c2") is not None),
    ("load-misses-the-old-record", {}, lambda s, rec: load_record(s, "containers", "c1") is None),
    ("exists-in-the-new", {"c2": container_doc("c2")}, lambda s, rec: container_exists(s, "c2")),
    ("delete-in-the-new", {"c2": container_doc("c2")},
     lambda s, rec: delete_record(s, "containers", "c2") and not os.listdir(Path(s) / "containers")),
    ("save-lands-in-the-new", {}, lambda s, rec: bool(save_container(s, rec))
     and os.listdir(Path(s) / "containers") == ["c1.json"]),
]


@pytest.mark.parametrize("files,check", [c[1:] for c in REMADE_CASES], ids=[c[0] for c in REMADE_CASES])
def test_a_kept_directory_removed_since_is_seen_by_every_operation(tmp_path: Path, files: Dict[str, Dict[str, Any]],
                                                                   check: Callable[[str, Any], bool]) -> None:
    from mixed_cpus_hook.store import records

    state = tmp_path / "state"
    rec = records.parse_container_record(container_doc("c1"), "c1", "x")
    records.save_container(str(state), rec)  # the directory's descriptor is kept
    _remade_with(state, files)
    assert check(str(state), rec)


def test_a_kept_directory_is_checked_only_when_a_name_is_missing(tmp_path: Path, monkeypatch: Any) -> None:
    """A name found in the kept directory proves it current: loads, saves and deletes of records
    that are there cost no fstat of the directory (one per missing name)."""
    import stat as stat_mod

    from mixed_cpus_hook.store import records

    state = str(tmp_path / "state")
    rec = records.parse_container_record(container_doc("c1"), "c1", "x")
    records.save_container(state, rec)
    real_fstat = os.fstat
    dir_checks: List[int] = []

    def fstat(fd: int) -> os.stat_result:
        st = real_fstat(fd)
        if stat_mod.S_ISDIR(st.st_mode):
            dir_checks.append(fd)
        return st

    monkeypatch.setattr(records.os, "fstat", fstat)
    records._PARSED.clear()
    assert records.load_container(state, "c1") == rec
    assert records.load_container(state, "c1") == rec
    assert records.container_exists(state, "c1")
    records.save_container(state, rec)
    assert dir_checks == []
    assert records.load_container(state, "c9") is None
    assert len(dir_checks) == 1


def test_a_kept_state_directory_replaced_by_a_symlink_is_refused(tmp_path: Path) -> None:
    import shutil

    from mixed_cpus_hook.store import records

    state = tmp_path / "state"
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    rec = records.parse_container_record(container_doc("c1"), "c1", "x")
    records.save_container(str(state), rec)
    shutil.rmtree(state / "containers")
    os.symlink(elsewhere, state / "containers")
    with pytest.raises(RecordError, match="is a symbolic link to .*refusing to follow it"):
        records.save_container(str(state), rec)
    with pytest.raises(RecordError, match="is a symbolic link to .*refusing to follow it"):
        records.load_container(str(state), "c1")
    assert os.listdir(elsewhere) == []


def test_kept_state_directories_are_bounded(tmp_path: Path) -> None:
    from mixed_cpus_hook.store import records

    before = len(os.listdir("/proc/self/fd"))
    for i in range(3 * records.MAX_DIRS):
        records.save_document(str(tmp_path / f"s{i}"), "containers", "c1", container_doc("c1"))
    assert len(records._DIRS) <= records.MAX_DIRS
    assert len(os.listdir("/proc/self/fd")) <= before + records.MAX_DIRS


def test_a_forked_child_names_its_temporaries_with_its_own_pid(tmp_path: Path) -> None:
    """The pid in '.<name>.<pid>.tmp' is asked once per process (records._PID): a forked child asks
    again, or two writers would share a temporary name (and remove_stale_temporaries would take a
    live writer's for its parent's)."""
    from mixed_cpus_hook.store import records as store

    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: report the pid its temporaries would carry
        os.close(read)
        os.write(write, f"{store._PID[0]} {os.getpid()}".encode())
        os._exit(0)
    os.close(write)
    try:
        named, own = os.read(read, 100).decode().split()
    finally:
        os.close(read)
        os.waitpid(pid, 0)
    assert named == own != str(os.getpid())
    assert store._PID[0] == os.getpid()


@pytest.mark.parametrize("seconds", [0, 1_700_000_000, 1_700_000_001, 4_102_444_799], ids=str)
def test_now_stamp_is_the_second_it_is_asked_in(monkeypatch: pytest.MonkeyPatch, seconds: int) -> None:
    """now_stamp formats once per second (a resident plugin stamps at every event): the text is
    strftime's for the second asked, whatever was asked before."""
    import time

    from mixed_cpus_hook.usecases import common

    for now in (seconds + 0.2, seconds + 0.9, seconds + 1.0):
        monkeypatch.setattr(time, "time", lambda now=now: now)
        assert common.now_stamp() == time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(int(now)))


# format_document's C encoder, made once, against json's own encode with the store's options.
DOCUMENTS = [
    ("empty", {}),
    ("keys-sorted", {"b": 1, "a": 2, "C": 3}),
    ("nested", {"quota": {"base": None, "applied": 150000, "ours": [150000, 250000]}, "z": [{"y": 1, "x": 2}]}),
    ("literals", {"t": True, "f": False, "n": None, "neg": -1, "big": 2 ** 70}),
    ("non-ascii-and-controls", {"é": "ü\u2028\n\t\"\\\x00", "emoji": "\U0001F600"}),
    ("float", {"f": 0.1, "g": 1e300}),
]


@pytest.mark.parametrize("doc", [d for _, d in DOCUMENTS], ids=[i for i, _ in DOCUMENTS])
def test_record_bytes_are_json_encode_of_the_document(doc: Dict[str, Any]) -> None:
    assert format_document(doc) == (json.JSONEncoder(sort_keys=True).encode(doc) + "\n").encode()


def test_a_document_that_is_not_json_is_refused_as_json_refuses_it() -> None:
    with pytest.raises(TypeError, match="not JSON serializable"):
        format_document({"x": object()})


@pytest.mark.parametrize("state_dir", ["/run/mixed-cpus-hook", "/run/mixed-cpus-hook/", "/", "relative/dir", "",
                                       "/a//b"], ids=["plain", "trailing-slash", "root", "relative", "empty",
                                                      "double-slash"])
@pytest.mark.parametrize("kind,name", [("containers", "abc"), ("containers", ".x"), ("pods", "pod1:2@3")],
                         ids=["id", "dot-id", "pod-key"])
def test_record_path_is_os_path_join(state_dir: str, kind: str, name: str) -> None:
    path = record_path(state_dir, kind, name)
    assert path == os.path.join(state_dir, kind, name + ".json")


def count_name_checks(monkeypatch: pytest.MonkeyPatch) -> List[str]:
    """The names record_path checks from now on (its is_plain_name), in order."""
    from mixed_cpus_hook.store import records

    checked: List[str] = []

    def counted(value: str, pattern: str = records.ID_PATTERN) -> bool:
        checked.append(value)
        return is_plain_name(value, pattern)

    monkeypatch.setattr(records, "is_plain_name", counted)
    return checked


# A creation looks its container's and its pod's records up, finds none, and saves both: each name is
# checked once (record_path's is_plain_name), not again at its save.
@pytest.mark.parametrize("kind, lookup", [
    pytest.param("containers", lambda s, n: store.load_container(s, n), id="container-load"),
    pytest.param("containers", lambda s, n: store.container_exists(s, n), id="container-exists"),
    pytest.param("pods", lambda s, n: store.load_pod(s, n), id="pod-load"),
])
def test_a_name_that_missed_is_checked_once_for_its_save(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                        kind: str, lookup: Callable[[str, str], Any]) -> None:
    from mixed_cpus_hook.store import records

    state_dir = str(tmp_path / "state")
    checked = count_name_checks(monkeypatch)
    assert not lookup(state_dir, "new1")
    records.save_document(state_dir, kind, "new1", {"schema": 2})
    assert checked == ["new1"]


def test_a_name_that_misses_again_is_the_newest_miss_again(tmp_path: Path) -> None:
    """A pod's record goes with its last member and comes back with the next: its name misses at every
    creation, between the misses of many containers' names, and stays named."""
    from mixed_cpus_hook.store import records

    state_dir = str(tmp_path / "state")
    for i in range(3 * records.MAX_MISSED):
        assert store.load_pod(state_dir, "pod1") is None
        assert store.load_container(state_dir, f"c{i}") is None
    assert (state_dir, "pods", "pod1") in records._PATHS
    assert sum(1 for k in records._PATHS if k[0] == state_dir) <= records.MAX_MISSED


def test_a_removed_pods_name_is_not_checked_again_when_its_record_comes_back(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A pod's record goes with its last member and comes back with the next (a restarted container)."""
    from mixed_cpus_hook.store import records

    state_dir = str(tmp_path / "state")
    checked = count_name_checks(monkeypatch)
    for _ in range(3):
        records.save_document(state_dir, "pods", "pod1", {"schema": 2})
        assert records.delete_record(state_dir, "pods", "pod1")
        assert store.load_pod(state_dir, "pod1") is None
    assert checked == ["pod1"]
