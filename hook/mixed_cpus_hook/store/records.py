"""The record store: typed records in the state directory, loaded, validated, migrated and saved here.

Layout under ``state_dir``: ``containers/<id>.json``, ``pods/<pod-cgroup-name>.json`` and a
``lock`` file. Names are validated as single path components before they are joined, every
write is a rename of a fully written temporary file, and all changes happen under an
exclusive flock so that concurrent hooks (two containers of one pod) never lose an update.

Records are input too: a file is read capped and without following links, then migrated to
the current schema (``schemas/record.schema.json``, SCHEMA_VERSION) and checked field by field
by the parse functions below, which mirror the schema (tests/unit/test_schemas.py runs both
over a corpus and requires that they agree: jsonschema itself is too slow to import on the
hook's path). Everything outside this module sees ContainerRecord and PodRecord only.

Schema history: 1 listed a pod's members as ids (each adding |shared| x period to the pod's
quota); 2 records each member's share (``{"id", "share_mcpu"}``), taken from the member's own
container record when a version 1 pod record is migrated.
"""

from __future__ import annotations

import fcntl
import json
from json.encoder import c_make_encoder, encode_basestring_ascii  # type: ignore[attr-defined]
import os
import stat
from collections import OrderedDict

from ..core.bounds import MAX_PERIOD, MAX_QUOTA
from ..core.cgroup import Dirs
from ..core.cpuset import format_cpulist, parse_cpulist
from ..core.errors import CpuListError, RecordError
from ..core.model import MODES, PHASES, SCHEMA_VERSION, SOURCES, ContainerRecord, Identity, Member, PodRecord
from ..core.quota import MCPU, QuotaState
from ..core.validate import ID_PATTERN, NAME_PATTERN, is_cpulist_text, is_plain_name, is_timestamp_text
from ..node.files import FileRefused, KeptFds, read_regular_file, read_regular_file_stat

TYPE_CHECKING = False
if TYPE_CHECKING:  # typing costs milliseconds on every container start
    from typing import Any, Callable, Dict, List, Optional, Sequence, Set, Tuple, TypeVar

    T = TypeVar("T")

KINDS = {"containers": ID_PATTERN, "pods": NAME_PATTERN}
SCHEMAS = (1, SCHEMA_VERSION)
# ``<state_dir>/pending/<id>``: empty files naming containers whose record appeared or went
# away; ``<state_dir>/recheck/<id>``: containers a watch-triggered reapply just handled, to be
# read once more after their watch units watch again. mixed-cpus-hook-sync.path
# (DirectoryNotEmpty= on both) starts the sync while any is there; the sync removes each one
# before it acts on it. Hook mode only: nothing consumes them on an NRI node.
PENDING = "pending"
RECHECK = "recheck"
# Container ids that can be a systemd unit instance (``mixed-cpus-hook-watch@<id>.path``, at most
# 256 characters with the prefix) and a file name that DirectoryNotEmpty= counts (systemd skips
# hidden and "backup" names: a leading ".", a trailing "~", extensions such as ".old").
# CRI-O's ids (64 hex digits) always are; other containers are only reconciled periodically.
UNIT_CHARS = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_.:-")
BACKUP_EXTENSIONS = frozenset(("rpmnew", "rpmsave", "rpmorig", "dpkg-old", "dpkg-new", "dpkg-tmp", "dpkg-dist",
                               "dpkg-bak", "dpkg-backup", "dpkg-remove", "ucf-new", "ucf-old", "ucf-dist", "swp",
                               "bak", "old", "new"))
MAX_WATCHABLE_ID = 200

# A record is at most this large (a container record is about 1 KiB; a pod record lists its
# members' ids): a bigger file is not one of ours and is not read whole.
MAX_RECORD_BYTES = 1 << 20
MAX_NAME = 242
# A member's share: at most every CPU a node can have (core.cpuset.MAX_CPU + 1), in millicpus.
MAX_SHARE_MCPU = 8192 * MCPU
MAX_PATH = 4096
# The schema's patterns (schemas/record.schema.json), compiled by re's own cache on first use.
CPULIST_PATTERN = r"[0-9]+(-[0-9]+)?(,[0-9]+(-[0-9]+)?)*\Z"
TIMESTAMP_PATTERN = r"[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9]{2}:[0-9]{2}:[0-9]{2}Z\Z"
CONTAINER_FIELDS = frozenset((
    "schema", "id", "namespace", "pod", "container", "pod_uid", "cgroup_version", "cgroup", "pod_cgroup", "pod_key",
    "exclusive", "shared", "desired", "quota", "created", "updated", "mode", "phase", "exclusive_source",
    "last_reapply", "reapplies", "pins_maybe_lost"))
POD_FIELDS = frozenset(("schema", "key", "cgroup", "quota", "members"))
QUOTA_FIELDS = frozenset(("base", "applied", "period", "ours"))


# Paths record_path gave: a resident process names the same few records on every event of their
# containers. Only names that passed are kept, and only while their record is there or was looked up
# among the last MAX_MISSED that were not: a node creates containers without end and most of them
# never have a record (their events only ask whether they do: each kept name held about 560 bytes,
# and the plugin's memory grew by 1 MiB per 1000 containers until MAX_PATHS cleared them), while a
# creation misses its container's and its pod's records and then saves both under the same names.
# A removed record's name counts as one that missed (a pod's record goes with its last member and
# comes back with the next). Bounded.
_PATHS: Dict[Tuple[str, str, str], str] = {}
MAX_PATHS = 4096
_MISSED: OrderedDict[Tuple[str, str, str], None] = OrderedDict()
MAX_MISSED = 16


def _missed(key: Tuple[str, str, str]) -> None:
    """A lookup of record_path's name ``key`` found no record (or its record was removed): the name
    missed longest ago beyond the last MAX_MISSED distinct ones is forgotten (a name saved since is
    only named again: record_path's check once more). A name that misses again is the newest again
    (a pod's record goes with its last member and comes back with the next)."""
    _MISSED[key] = None
    _MISSED.move_to_end(key)
    if len(_MISSED) > MAX_MISSED:
        _PATHS.pop(_MISSED.popitem(last=False)[0], None)


def record_path(state_dir: str, kind: str, name: str) -> str:
    """The record file for ``name``; refuses anything that is not one plain path component."""
    path = _PATHS.get((state_dir, kind, name))
    if path is None:
        folder = _FOLDERS.get((state_dir, kind))
        if folder is None:
            folder = _FOLDERS[(state_dir, kind)] = os.path.join(state_dir, kind)
        if not is_plain_name(name, KINDS[kind]) or len(name) > MAX_NAME:
            _refuse_name(folder, kind, name)
        # os.path.join(state_dir, kind, name + ".json") and its os.path.split, spelled: ``folder``
        # ends in ``kind`` (no "/"), and a plain name has no "/".
        base = name + ".json"
        path = folder + "/" + base
        if len(_PATHS) >= MAX_PATHS:
            _PATHS.clear()
            _FOLDERS.clear()
        _PATHS[(state_dir, kind, name)] = path
    return path


# (state dir, kind) -> os.path.join of them: the few state subdirectories a process uses.
_FOLDERS: Dict[Tuple[str, str], str] = {}


def _split(path: str) -> Tuple[str, str]:
    """(folder, file name) of a path record_path gave (its folder, "/", a plain name: os.path.split
    of it, which is a dozen Python calls)."""
    folder, _, base = path.rpartition("/")
    return folder, base


def _refuse_name(folder: str, kind: str, name: str) -> None:
    if not is_plain_name(name, KINDS[kind]):
        raise RecordError(f"{name[:80]!r} is not a plain name", folder)
    raise RecordError(f"{name[:40]!r}...: longer than {MAX_NAME} characters (its temporary file "
                      "'.<name>.<pid>.tmp' must fit a 255-byte file name)", folder)


def _check_dir(path: str) -> None:
    """Refuse a state subdirectory that is a symlink (records would land wherever it points)."""
    try:
        link = stat.S_ISLNK(os.lstat(path).st_mode)
    except OSError:
        return  # not there (yet): the read or write that follows says so
    if link:
        raise RecordError(f"is a symbolic link to {os.path.realpath(path)}; refusing to follow it", path)


# The state subdirectories ("containers", "pods") as descriptors, opened without following a link
# and kept: each record is then opened, renamed and removed by its name in the directory (openat,
# renameat, unlinkat), without walking the state directory's path and checking it for a link on
# every access. A directory removed since (an administrator cleaned /run) has no links left
# (st_nlink 0) and no entries (rmdir takes only an empty one): every name looked up in it is
# missing, so a lookup that finds its name proves the kept descriptor current, and only a missing
# name costs the check (_reopened): a removed directory is then opened again by its path, checked
# again, and the operation done once more there. At most MAX_DIRS are kept.
MAX_DIRS = 8
_DIRS = KeptFds(MAX_DIRS)
DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC


def _dir_fd(folder: str, create: bool = False) -> Optional[int]:
    """The kept descriptor of state subdirectory ``folder`` (unchecked: a name missing in it is
    checked by _reopened); None when it does not exist and ``create`` is false. A symbolic link
    there is refused (RecordError), as _check_dir does."""
    fd = _DIRS.get(folder)
    if fd is not None:
        return fd
    return _open_dir(folder, create)


def _reopened(folder: str, create: bool = False) -> Optional[int]:
    """After a name was missing in ``folder``'s kept descriptor: a new descriptor when the kept one
    is of a directory removed since (the name is to be looked up again there), else None (the kept
    one is current, or the directory is gone and ``create`` is false: the name is missing)."""
    fd = _DIRS.get(folder)
    if fd is not None:
        try:
            if os.fstat(fd).st_nlink > 0:
                return None
        except OSError:
            pass
        _DIRS.close(folder)
    _lost(folder)  # the folder was made again: what its watch knew is of the old one
    return _open_dir(folder, create)


def _in_dir(folder: str, op: Callable[..., T], *args: Any, **kwargs: Any) -> T:
    """``op(*args, dir_fd=fd, **kwargs)`` with ``folder``'s kept descriptor, and once more in the
    directory made again when a missing name says it was removed since; FileNotFoundError when the
    name (or the folder) is not there."""
    fd = _dir_fd(folder)
    if fd is None:
        raise FileNotFoundError(folder)
    try:
        return op(*args, dir_fd=fd, **kwargs)
    except FileNotFoundError:
        fd = _reopened(folder)
        if fd is None:
            raise
        return op(*args, dir_fd=fd, **kwargs)


def _exists(folder: str, name: str) -> bool:
    """Whether ``name`` is in state subdirectory ``folder`` (a link counts: what reads it refuses
    one), asked without an exception for the usual answer no (faccessat: a failed open or stat
    raises, which costs about 6 us from cold caches): most of a node's containers have no record,
    and each of their events asks. A kept descriptor of a directory removed since is replaced
    (_reopened) and the name asked again there."""
    if _TRUSTED:
        known = _TRUSTED.get(folder)
        if known is not None:
            return name in (known.names if known.names is not None else _known_names(folder, known))
    fd = _dir_fd(folder)
    if fd is None:
        return False
    if os.access(name, os.F_OK, dir_fd=fd, follow_symlinks=False):
        return True
    fd = _reopened(folder)
    return fd is not None and os.access(name, os.F_OK, dir_fd=fd, follow_symlinks=False)


def _open_dir(folder: str, create: bool) -> Optional[int]:
    try:
        try:
            fd = os.open(folder, DIR_FLAGS)
        except FileNotFoundError:
            if not create:
                return None
            os.makedirs(folder, mode=0o755, exist_ok=True)
            fd = os.open(folder, DIR_FLAGS)
    except OSError as exc:
        _check_dir(folder)  # a link: says so and where it points
        raise RecordError(f"cannot open the directory: {exc.strerror}", folder) from None
    _DIRS.keep(folder, fd)
    return fd


# -- parse (validate) and format: pure ---------------------------------------------------------


def _bad(path: str, problem: str) -> RecordError:
    return RecordError(f"invalid record: {problem}", path)


def _unknown(doc: Dict[str, Any], allowed: frozenset, path: str, what: str) -> None:
    extra = sorted(k for k in doc if k not in allowed)
    if extra:
        raise _bad(path, f"{what}unknown field {str(extra[0])[:40]!r}")


def _is_timestamp(value: Any) -> bool:
    return isinstance(value, str) and is_timestamp_text(value)


def parse_quota(q: Any, path: str, field: str) -> QuotaState:
    """Quota bookkeeping, within what the kernel accepts: a value above bounds.MAX_QUOTA was never
    in a quota file, so a record holding one (written by a version without the bound) cannot tell
    its own writes from kubelet's and is not used."""
    if not isinstance(q, dict):
        raise _bad(path, f"{field} is not an object")
    _unknown(q, QUOTA_FIELDS, path, f"{field}: ")
    for key in ("base", "applied"):
        if key not in q:
            raise _bad(path, f"{field}.{key} is missing")
        v = q[key]
        if v is not None and (type(v) is not int or v < 0):
            raise _bad(path, f"{field}.{key} is not a non-negative integer or null")
        if v is not None and v > MAX_QUOTA:
            raise _bad(path, f"{field}.{key} {v} is above the kernel's maximum quota {MAX_QUOTA}")
    period = q.get("period")
    if type(period) is not int or period < 1:
        raise _bad(path, f"{field}.period is not a positive integer")
    if period > MAX_PERIOD:
        raise _bad(path, f"{field}.period {period} is above the kernel's maximum period {MAX_PERIOD}")
    ours = q.get("ours", [])
    if not isinstance(ours, list) or not all(type(v) is int and 0 <= v <= MAX_QUOTA for v in ours):
        raise _bad(path, f"{field}.ours is not a list of non-negative integers up to {MAX_QUOTA}")
    return QuotaState(q["base"], q["applied"], period, tuple(ours))


def format_quota_doc(q: QuotaState) -> Dict[str, Any]:
    return {"base": q.base, "applied": q.applied, "period": q.period, "ours": [v for v in q.ours if v is not None]}


def parse_dirs(d: Any, path: str, field: str) -> Dirs:
    if not (isinstance(d, dict) and set(d) == {"cpuset", "cpu"}
            and all(isinstance(v, str) and v.startswith("/") and len(v) <= MAX_PATH and "\0" not in v
                    for v in d.values())):
        raise _bad(path, f"{field} is not a pair of absolute cgroup paths")
    return Dirs(d["cpuset"], d["cpu"])


def _format_dirs(d: Optional[Dirs]) -> Optional[Dict[str, str]]:
    return None if d is None else {"cpuset": d.cpuset, "cpu": d.cpu}


def _check_schema(doc: Any, path: str) -> None:
    if not isinstance(doc, dict):
        raise _bad(path, "not a JSON object")
    if doc.get("schema") not in SCHEMAS or type(doc.get("schema")) is not int:
        raise _bad(path, f"not a schema {' or '.join(str(s) for s in SCHEMAS)} record")


def _cpulist_field(doc: Dict[str, Any], key: str, path: str) -> frozenset:
    value = doc.get(key)
    if not isinstance(value, str):
        raise _bad(path, f"{key} is missing or not a cpulist string")
    try:
        if not is_cpulist_text(value):
            raise CpuListError("not as the kernel prints it", path)
        cpus = parse_cpulist(value, path)
    except CpuListError:
        raise _bad(path, f"{key} {value[:40]!r} is not a cpulist") from None
    if not cpus:
        raise _bad(path, f"{key} is empty")
    return cpus


def _optional(doc: Dict[str, Any], key: str, allowed: Any, default: Any, path: str) -> Any:
    if key not in doc:
        return default
    if doc[key] not in allowed:
        raise _bad(path, f"{key} is not one of {', '.join(allowed)}")
    return doc[key]


def parse_container_record(doc: Any, name: str, path: str) -> ContainerRecord:
    """A container record from its JSON document (any known schema); RecordError names the problem."""
    _check_schema(doc, path)
    _unknown(doc, CONTAINER_FIELDS, path, "")
    if doc.get("id") != name or not is_plain_name(name, ID_PATTERN):
        raise _bad(path, "id does not match the file name")
    for key in ("namespace", "pod", "container", "pod_uid", "created", "updated"):
        if not isinstance(doc.get(key), str):
            raise _bad(path, f"{key} is missing or not a string")
    for key in ("created", "updated"):
        if not _is_timestamp(doc[key]):
            raise _bad(path, f"{key} is not a timestamp (YYYY-MM-DDTHH:MM:SSZ)")
    if doc.get("cgroup_version") not in (1, 2) or type(doc.get("cgroup_version")) is not int:
        raise _bad(path, "cgroup_version is not 1 or 2")
    cgroup = parse_dirs(doc.get("cgroup"), path, "cgroup")
    pod_cgroup = None if doc.get("pod_cgroup") is None else parse_dirs(doc.get("pod_cgroup"), path, "pod_cgroup")
    pod_key = doc.get("pod_key")
    if pod_key is not None and not (isinstance(pod_key, str) and is_plain_name(pod_key, NAME_PATTERN)):
        raise _bad(path, "pod_key is not null or a plain name")
    if (pod_key is None) != (pod_cgroup is None):
        raise _bad(path, "pod_key and pod_cgroup must be both set or both null")
    exclusive, shared, desired = (_cpulist_field(doc, key, path) for key in ("exclusive", "shared", "desired"))
    if desired != exclusive | shared:
        raise _bad(path, "desired is not exclusive + shared")
    quota = parse_quota(doc.get("quota"), path, "quota")
    mode = _optional(doc, "mode", MODES, "hook", path)
    phase = _optional(doc, "phase", PHASES, "applied", path)
    source = _optional(doc, "exclusive_source", SOURCES, "", path)
    reapplies = doc.get("reapplies", 0)
    if type(reapplies) is not int or reapplies < 0:
        raise _bad(path, "reapplies is not a non-negative integer")
    pins = doc.get("pins_maybe_lost", False)
    if type(pins) is not bool:
        raise _bad(path, "pins_maybe_lost is not true or false")
    last = doc.get("last_reapply")
    if last is not None and not _is_timestamp(last):
        raise _bad(path, "last_reapply is not null or a timestamp")
    return ContainerRecord(
        id=name, identity=Identity(doc["namespace"], doc["pod"], doc["container"], doc["pod_uid"]), mode=mode,
        phase=phase, cgroup_version=doc["cgroup_version"], cgroup=cgroup, pod_cgroup=pod_cgroup, pod_key=pod_key,
        exclusive=exclusive, exclusive_source=source, shared=shared, quota=quota, created=doc["created"],
        updated=doc["updated"], last_reapply=last, reapplies=reapplies, pins_maybe_lost=pins)


def format_container_record(rec: ContainerRecord) -> Dict[str, Any]:
    """The JSON document of a container record (schema SCHEMA_VERSION)."""
    doc = {
        "schema": SCHEMA_VERSION, "id": rec.id, "namespace": rec.identity.namespace, "pod": rec.identity.pod,
        "container": rec.identity.container, "pod_uid": rec.identity.pod_uid, "mode": rec.mode, "phase": rec.phase,
        "cgroup_version": rec.cgroup_version, "cgroup": _format_dirs(rec.cgroup),
        "pod_cgroup": _format_dirs(rec.pod_cgroup), "pod_key": rec.pod_key,
        "exclusive": format_cpulist(rec.exclusive), "exclusive_source": rec.exclusive_source,
        "shared": format_cpulist(rec.shared), "desired": format_cpulist(rec.desired),
        "quota": format_quota_doc(rec.quota), "created": rec.created, "updated": rec.updated,
        "last_reapply": rec.last_reapply, "reapplies": rec.reapplies, "pins_maybe_lost": rec.pins_maybe_lost,
    }
    if not rec.exclusive_source:  # records of older versions did not say
        del doc["exclusive_source"]
    return doc


def compute_migrated_pod(doc: Dict[str, Any], legacy_share: Callable[[str], int]) -> Dict[str, Any]:
    """A version 1 pod document as version 2: each member's share from ``legacy_share(id)``."""
    if not isinstance(doc, dict) or doc.get("schema") != 1 or not isinstance(doc.get("members"), list):
        return doc
    members = [{"id": m, "share_mcpu": legacy_share(m)} if isinstance(m, str) and is_plain_name(m, ID_PATTERN) else m
               for m in doc["members"]]
    return dict(doc, schema=SCHEMA_VERSION, members=members)


def _parse_member(m: Any) -> Optional[Member]:
    if not (isinstance(m, dict) and set(m) == {"id", "share_mcpu"} and isinstance(m["id"], str)
            and is_plain_name(m["id"], ID_PATTERN) and type(m["share_mcpu"]) is int
            and 0 <= m["share_mcpu"] <= MAX_SHARE_MCPU):
        return None
    return Member(m["id"], m["share_mcpu"])


def parse_pod_record(doc: Any, name: str, path: str) -> PodRecord:
    """A pod record from its (migrated) JSON document; RecordError names the problem."""
    _check_schema(doc, path)
    _unknown(doc, POD_FIELDS, path, "")
    if "quota" not in doc:
        raise _bad(path, "quota is missing")
    if doc.get("key") != name or not is_plain_name(name, NAME_PATTERN):
        raise _bad(path, "key does not match the file name")
    cgroup = parse_dirs(doc.get("cgroup"), path, "cgroup")
    quota = None if doc.get("quota") is None else parse_quota(doc.get("quota"), path, "quota")
    raw = doc.get("members")
    members = [_parse_member(m) for m in raw] if isinstance(raw, list) else []
    if (not members or any(m is None for m in members)
            or len({m.id for m in members if m is not None}) != len(members)):
        raise _bad(path, "members is not a non-empty list of distinct container ids, each with its share_mcpu")
    return PodRecord(name, cgroup, quota, tuple(m for m in members if m is not None))


def format_pod_record(rec: PodRecord) -> Dict[str, Any]:
    return {"schema": SCHEMA_VERSION, "key": rec.key, "cgroup": _format_dirs(rec.cgroup),
            "quota": None if rec.quota is None else format_quota_doc(rec.quota),
            "members": [{"id": m.id, "share_mcpu": m.share_mcpu} for m in rec.members]}


# -- the files ----------------------------------------------------------------------------------


class state_lock:  # noqa: N801 - used like a function: ``with state_lock(dir):``
    """Hold the state directory's exclusive lock; creates the directory (0755) on first use.

    A class rather than contextlib.contextmanager: contextlib is not otherwise loaded on
    the hook path. Every use case takes it itself, around the whole of its read-decide-write.
    Once held, the journal a plugin that died left in the lock file is done first (replay_journal:
    one pread when there is none); a journal this process's own HeldStateLock keeps waiting is done
    before the lock is asked for (two descriptors of one process would wait for each other).
    """

    def __init__(self, state_dir: str) -> None:
        self.state_dir = state_dir
        self.fd = -1

    def __enter__(self) -> None:
        waiting = _JOURNALS.get(self.state_dir)
        if waiting is not None:
            waiting.complete()
        try:
            os.makedirs(self.state_dir, mode=0o755, exist_ok=True)
            self.fd = os.open(os.path.join(self.state_dir, "lock"), os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW, 0o600)
        except OSError as exc:
            raise RecordError(f"cannot use the state directory: {exc.strerror}", self.state_dir) from None
        fcntl.flock(self.fd, fcntl.LOCK_EX)
        try:
            replay_journal(self.state_dir, self.fd)
        except BaseException:
            self.__exit__()
            raise

    def __exit__(self, *exc: object) -> None:
        os.close(self.fd)
        self.fd = -1


# -- the journal: a resident plugin's records saved after its answer ----------------------------
# The NRI plugin answers the runtime while the runtime waits to create the container; the records
# an event saves (a creation: its pod's and its own) are two files each made and renamed. With
# ``HeldStateLock.journaling`` an event's saves and removals are appended to the state lock's own
# file instead (one pwrite each, in the order made), which this process reads from memory
# (_OVERLAY) while it holds the lock, and the lock stays held past the event until the answer is
# sent (``complete``): then each record is saved or removed as the journal says, and the file
# emptied. A process that takes the lock finds the file empty unless the plugin died holding it:
# the journal is then done by whoever takes the lock next (replay_journal), before anything is read.
# Every change a journaled event made outside the state directory (a pod's quota raised, the
# answer) came after the journal entry of the records that describe it, as after their files before:
# a plugin killed at any point leaves, once the journal is done, the records it would have left
# without one (tests/unit/test_nri_crash_points.py). An entry cut short (a kill within its pwrite)
# is the journal's end: nothing after it happened.
JOURNAL_HEAD = b"mixed-cpus-hook journal 1\n"
# A use that journals more than this (a Synchronize releasing many records at once) does its journal
# so far and starts another: a journal is at most this and one more write (at most
# MAX_ENTRIES_WRITTEN entries, each a record of at most MAX_RECORD_BYTES and its line), and
# replay_journal reads no more than MAX_JOURNAL_BYTES.
JOURNAL_FLUSH = 1 << 20
MAX_ENTRIES_WRITTEN = 2  # a creation's pod record and its own, a stop's two removals
MAX_JOURNAL_BYTES = JOURNAL_FLUSH + MAX_ENTRIES_WRITTEN * (MAX_RECORD_BYTES + 1024)
# path -> (bytes, record) journaled as saved, None as removed: this process's journals not done yet.
_OVERLAY: Dict[str, Optional[Tuple[bytes, Any]]] = {}
# state dir -> the HeldStateLock that journals its saves (while it holds the lock).
_JOURNALS: Dict[str, "HeldStateLock"] = {}


def _not_the_holder() -> None:
    """In a forked child: the parent holds the lock and its journal; the child neither (its flock
    would release the parent's: they share the lock file's description)."""
    _JOURNALS.clear()
    _OVERLAY.clear()
    _WATCHED.clear()  # the parent's inotify descriptor: its events are the parent's to read
    _TRUSTED.clear()


os.register_at_fork(after_in_child=_not_the_holder)


def format_journal_entry(kind: str, name: str, data: Optional[bytes]) -> bytes:
    """One journal entry: ``save <kind> <name> <length>`` and the record's bytes, or ``remove <kind> <name>``
    (names are plain: no space or newline)."""
    if data is None:
        return b"remove %s %s\n" % (kind.encode(), name.encode())
    return b"save %s %s %d\n%s\n" % (kind.encode(), name.encode(), len(data), data)


def parse_journal(data: bytes) -> Tuple[List[Tuple[str, str, Optional[bytes]]], int]:
    """The whole entries of a journal, in order, as (kind, name, bytes or None for a removal), and how
    many bytes at its end are not one (an entry cut short, or anything that is not an entry: the
    journal ends there). Kinds and names are not checked here (replay_journal does)."""
    if not data:
        return [], 0
    if not data.startswith(JOURNAL_HEAD):
        return [], len(data)
    out: List[Tuple[str, str, Optional[bytes]]] = []
    at = len(JOURNAL_HEAD)
    while at < len(data):
        end = data.find(b"\n", at, at + 1024)
        if end < 0:
            break
        words = data[at:end].split(b" ")
        if len(words) == 3 and words[0] == b"remove":
            out.append((words[1].decode("ascii", "replace"), words[2].decode("ascii", "replace"), None))
            at = end + 1
            continue
        if len(words) != 4 or words[0] != b"save" or not words[3].isdigit():
            break
        size = int(words[3])
        stop = end + 1 + size
        if size > MAX_RECORD_BYTES or stop >= len(data) or data[stop:stop + 1] != b"\n":
            break
        out.append((words[1].decode("ascii", "replace"), words[2].decode("ascii", "replace"), data[end + 1:stop]))
        at = stop + 1
    return out, len(data) - at


def replay_journal(state_dir: str, fd: int) -> int:
    """Do the journal in the lock file ``fd`` (held) that a plugin left when it died: each whole entry
    in order (a record saved, as checked as a load checks it, or removed), then the file emptied.
    Returns how many entries were done. An entry that names no record or holds no valid one ends the
    journal there: RecordError, once the file is emptied (what came before it is done). A record that
    cannot be written or removed (a full disk) raises its RecordError and leaves the whole journal in
    the file for the next holder (doing an entry twice gives the same file)."""
    data = os.pread(fd, 4096, 0)  # empty but after a plugin died: no larger buffer for that
    if not data:
        return 0
    if len(data) == 4096:
        data = os.pread(fd, MAX_JOURNAL_BYTES + 1, 0)
    lock = os.path.join(state_dir, "lock")
    entries, _torn = parse_journal(data)
    problem = "" if len(data) <= MAX_JOURNAL_BYTES else f"larger than {MAX_JOURNAL_BYTES} bytes"
    done = 0
    for kind, name, record in entries:
        if kind not in KINDS:
            problem = f"entry {done + 1} names no kind of record ({kind[:40]!r})"
            break
        try:
            path = record_path(state_dir, kind, name)
            rec = None
            if record is not None:
                doc = parse_document(record, path)
                rec = (parse_container_record(doc, name, path) if kind == "containers"
                       else parse_pod_record(doc, name, path))
        except RecordError as exc:
            problem = f"entry {done + 1} ({kind} {name[:80]}): {exc}"
            break
        if record is None:
            _delete_file(state_dir, kind, name, path)
        else:
            _write_record(path, record, rec)
        done += 1
    os.ftruncate(fd, 0)
    if problem:
        raise RecordError(f"the journal of a plugin that stopped: {problem}; {done} entries done, the rest "
                          "dropped", lock)
    return done


def read_journal_size(state_dir: str) -> int:
    """How many bytes of journal the state lock's file holds (0: none, or no file), by a stat: for
    ``status``, which reads without the lock."""
    try:
        return os.stat(os.path.join(state_dir, "lock"), follow_symlinks=False).st_size
    except OSError:
        return 0


# -- the watch: what a resident plugin knows of its record folders between its uses of the lock ----
# The plugin looks its records up at every event (a creation: its container's and its pod's, both
# missing, and with no kubelet checkpoint every record, to see that no other holds its CPUs): a
# system call or more each (faccessat, fstat, a listing), paid from cold caches on the runtime's
# clock. With ``HeldStateLock.watching`` (the plugin sets it) an inotify watch on ``containers/``
# and ``pods/`` says whether anything changed in them since this process last held the lock:
# every change to a folder (an entry made, renamed, removed, written or touched) queues an event,
# synchronously, within the system call that made it, so a writer's events are queued before its
# lock is released. This process's own writes queue events too: each one it makes adds their bytes
# (a save's temporary made, written and renamed, a removal) to what it expects, and when the bytes
# queued at its next taking of the lock are exactly those, no one else changed the folders (an
# event is never split or dropped but whole, and one identical to the event before it, the only
# merging, never follows one of ours). Then what it knew stays true: the names in each folder
# (listed once, then kept by its own saves and removals) and the identity of each record it read
# or wrote while so watched, and a lookup needs no system call. Its own events are read when it
# releases the lock (after the answer), so the next taking usually finds the queue empty. Any other
# byte (another process's write, an edit by hand, a queue that overflowed, a folder removed) drops
# all of it, the descriptor kept: the lookups stat and list as without a watch until they have
# learnt again. A use of the lock that is not the watching one (the plugin's reconcile under
# state_lock) reads as without a watch; its writes are counted like any other of this process.
WATCH_MASK = 0x2 | 0x4 | 0x40 | 0x80 | 0x100 | 0x200 | 0x400 | 0x800  # modify, attrib, moved from/to, create, delete, self deleted/moved
# One read of the queue: a read takes every whole event that fits, so one that left more than the
# largest event's room (16 bytes and a 255-byte name, padded) took all there was. More than that
# queued: read on, and what is known dropped.
MAX_WATCH_READ = 1 << 16
MAX_WATCH_READS = 64  # reads of one check at most (the kernel queues 16384 events by default): then closed
RETRY_USES = 1000  # inotify refused (no more instances for root, say): asked again after this many uses
# The watch starts once a listing of a folder (every creation without kubelet's checkpoint, every
# change of the checkpoint) finds at least this many records: below that a listing costs less than
# the watch itself (ctypes, 450-700 KiB of memory, and a read of its events after each event that
# wrote), and a node that runs few mixed containers gains little from it. Where kubelet's checkpoint
# is watched (ctypes loaded already: a node with kubelet), the plugin watches from the first use
# (HeldStateLock.watch_from_now): each event's lookups of its own record and its pod's, both system calls
# from cold caches, then cost none. 0: from the first use (tests).
WATCH_FROM = 16
# State directories where a listing found WATCH_FROM records: their watching lock starts the watch.
_WANTED: Set[str] = set()


class _Known:
    """What the watching process knows of one record folder: its ``*.json`` names and their inodes
    (None: not listed since the watch began), and the identity (inode, size, time) of each record it
    read or wrote since."""

    __slots__ = ("names", "verified")

    def __init__(self) -> None:
        self.names: Optional[Dict[str, int]] = None
        self.verified: Dict[str, Tuple[int, int, int]] = {}


class RecordWatch:
    """The inotify watch of one state directory's record folders (see above); ``check`` once the lock
    is taken: what is known may be used (``_TRUSTED``) until ``release``. Never raises OSError: a
    node where inotify is refused is served by stat and listing, as without one."""

    def __init__(self, state_dir: str, libc: Any = None) -> None:
        self.folders = tuple(os.path.join(state_dir, kind) for kind in KINDS)
        self.libc = libc
        self.fd: Optional[int] = None
        self.problem = ""  # why there is no watch, when there is none
        self.wds: Dict[str, int] = {}  # folder -> watch descriptor
        self.known: Dict[str, _Known] = {}
        self.expected = 0  # bytes of events this process's own writes queued since the last check
        self.size: Callable[[int], int] = int  # node.inotify.format_event_size, once started
        self.refused: Set[str] = set()  # folders inotify would not watch (until the watch starts again)
        self.poller: Any = None  # select.poll of the descriptor, once started: whether anything is queued
        self.retry = 0  # uses of the lock left before inotify is asked again, after it was refused
        self.dirty = False  # this process made events it did not count (a write that failed)

    def settle(self) -> None:
        """Under the lock, once this process's writes are done (before it is released): the events
        they queued read now, off the next event's path, which then finds the queue empty (one poll
        that says so); what is known kept when they are exactly those, else dropped."""
        if (self.expected or self.dirty) and self.fd is not None:
            self._take(self.fd)

    def _take(self, fd: int) -> None:
        """The queued events read; unless they are exactly the ``expected`` bytes (whole: a read that
        left room for more took all), the rest read too and what is known dropped (the descriptor
        kept: closing an inotify instance waits for the kernel's grace period, milliseconds)."""
        data = _read_events(fd)
        if data is not None and len(data) == self.expected and len(data) <= MAX_WATCH_READ - 512 \
                and not self.dirty:
            self.expected = 0
            return
        reads = 1
        while data is not None and len(data) > MAX_WATCH_READ - 512:  # more may be queued
            self._unverified(data, True)
            if reads == MAX_WATCH_READS:
                self.stop()
                return
            data = _read_events(fd)
            reads += 1
        self._unverified(data, data is None)
        self.forget()

    def check(self) -> None:
        """Under the lock, once taken: the events queued since it was last released, polled (no read,
        no exception, while none are) and read when there are any; what is known kept when they are
        exactly this process's own, else dropped. Each folder there and watched is then trusted
        until ``release``."""
        fd = self.fd
        if fd is not None:
            if self.expected or self.dirty or self.poller.poll(0):
                self._take(fd)
        if self.fd is None:
            if self.retry:
                self.retry -= 1
                return
            self.start()
            if self.fd is None:
                self.retry = RETRY_USES
                return
        for folder in self.folders:
            known = self.known.get(folder)
            if known is None and folder not in self.refused:
                known = self._watch(folder)
            if known is not None:
                _TRUSTED[folder] = known

    def start(self) -> None:
        import select

        from ..node.inotify import format_event_size, open_inotify

        self.size = format_event_size
        self.fd, self.libc, self.problem = open_inotify(self.libc)
        if self.fd is not None:
            self.poller = select.poll()
            self.poller.register(self.fd, select.POLLIN)

    def _watch(self, folder: str) -> Optional[_Known]:
        """Watch ``folder`` once it has been there (a kept descriptor: the first save makes it): the
        directory at its path opened again and watched through that descriptor (/proc/self/fd), so
        that what is listed and what is watched are one directory."""
        if _DIRS.get(folder) is None or self.fd is None:
            return None
        from ..node.inotify import IN_ONLYDIR, add_watch  # loaded by start()

        _DIRS.close(folder)
        try:
            fd = _open_dir(folder, create=False)
        except RecordError:
            return None  # a link there, say: the lookups without the watch say so
        if fd is None:
            return None
        wd, problem = add_watch(self.libc, self.fd, f"/proc/self/fd/{fd}", WATCH_MASK | IN_ONLYDIR, folder)
        if wd < 0:
            self.problem = problem
            self.refused.add(folder)
            return None
        self.wds[folder] = wd
        known = self.known[folder] = _Known()
        _WATCHED[folder] = self
        return known

    def _unverified(self, data: Optional[bytes], everything: bool) -> None:
        """Events this process did not count: the records they name (all in a folder that went, all
        when ``everything`` or the events were lost) are remembered without their identity. A change
        may have kept a file's inode, size and time (an edit in place, its time set back): each such
        record is read again and its bytes compared (_read_remembered: the same bytes give the same
        record, unparsed); the others keep the identity a stat compares, as without a watch. A
        folder whose watch went (the folder removed or moved) is watched again at the next check."""
        from ..node.inotify import parse_event_names

        names, whole = parse_event_names(data or b"")
        went = [folder for folder, wd in self.wds.items() if wd in whole]
        if everything or -1 in whole:
            whole = set(self.wds.values())
        for folder, wd in self.wds.items():
            if wd in whole:
                prefix = folder + "/"
                paths = [path for path in _PARSED if path.startswith(prefix)]
            else:
                paths = [folder + "/" + name for name in names.get(wd, ())]
            for path in paths:
                hit = _PARSED.get(path)
                if hit is not None:
                    _PARSED[path] = (hit[0], hit[1], None)
        for folder in went:
            del self.wds[folder]
            self.known.pop(folder, None)
            _WATCHED.pop(folder, None)

    def forget(self) -> None:
        """All that is known dropped, the inotify descriptor kept: each folder is watched again at the
        next check (its directory opened again at its path: one made again since is the one watched
        and listed then) and learnt again from the files."""
        for folder in self.wds:
            _TRUSTED.pop(folder, None)
        self.known = {}
        self.expected = 0
        self.dirty = False

    def stop(self) -> None:
        """The watch closed (its queue with it) and all it knew dropped."""
        if self.fd is not None:
            try:
                os.close(self.fd)
            except OSError:
                pass
            self.fd = None
        for folder in self.wds:
            _WATCHED.pop(folder, None)
            _TRUSTED.pop(folder, None)
        self.wds = {}
        self.known = {}
        self.expected = 0
        self.dirty = False
        self.refused = set()

    def saved(self, folder: str, base: str, key: Tuple[int, int, int]) -> None:
        """This process saved record file ``base`` in ``folder`` (_write_bytes: its temporary
        ``.<name>.<pid>.tmp`` made, written and renamed over it), with identity ``key``."""
        length = _name_bytes(base)
        tmp = length + 1 + len(str(_PID[0]))  # ".<base minus .json>.<pid>.tmp"
        self.expected += 3 * self.size(tmp) + self.size(length)
        known = self.known.get(folder)
        if known is not None:
            if known.names is not None:
                known.names[base] = key[0]
            known.verified[base] = key

    def removed(self, folder: str, base: str) -> None:
        self.expected += self.size(_name_bytes(base))
        known = self.known.get(folder)
        if known is not None:
            if known.names is not None:
                known.names.pop(base, None)
            known.verified.pop(base, None)


# folder -> the watch of its state directory (this process's); folder -> what may be used now.
_WATCHED: Dict[str, RecordWatch] = {}
_TRUSTED: Dict[str, _Known] = {}


def _lost(folder: str) -> None:
    """This process changed ``folder`` in a way the watch does not count (a failed write, the
    folder made again): what its watch knows is dropped at once, and the events queued are read
    and dropped at the next check (or release)."""
    watch = _WATCHED.get(folder)
    if watch is not None:
        watch.forget()
        watch.dirty = True


def _name_bytes(name: str) -> int:
    """Bytes of ``name`` as the kernel has it (an event carries them)."""
    return len(name) if name.isascii() else len(os.fsencode(name))


def _read_events(fd: int) -> Optional[bytes]:
    """One read of an inotify queue: b"" when it is empty, None when the read fails."""
    try:
        return os.read(fd, MAX_WATCH_READ)
    except BlockingIOError:
        return b""
    except OSError:
        return None


def _known_names(folder: str, known: _Known) -> Dict[str, int]:
    """The ``*.json`` names in trusted ``folder`` and their inodes: listed once (its kept
    descriptor), then kept by this process's saves and removals."""
    names = known.names
    if names is None:
        fd = _dir_fd(folder)
        names = {}
        if fd is not None:
            try:
                with os.scandir(fd) as it:
                    for entry in it:
                        if entry.name.endswith(".json"):
                            names[entry.name] = entry.inode()
            except OSError as exc:
                raise RecordError(f"cannot list: {exc.strerror}", folder) from None
        known.names = names
    return names


class HeldStateLock:
    """``state_lock`` for a resident process (the NRI plugin): the lock file stays open between
    uses, and each use checks (one stat) that it is still the file at its path before flock.

    Two system calls a use where state_lock makes six; a state directory removed and made again
    (the lock file with it) is seen and the new file is opened.

    ``journaling`` (the plugin sets it): what a use saves or removes is journaled (see above) and the
    lock stays held after it until ``complete`` (once the answer is sent) or the next use. A use that
    ends in an Exception does its journal at once (what it saved stays saved, as without one); one
    that ends in any other BaseException (the process is going away) leaves it to the next holder.
    """

    def __init__(self, state_dir: str) -> None:
        self.state_dir = state_dir
        self.path = os.path.join(state_dir, "lock")
        self.fd = -1
        self.ident = (-1, -1)
        self.journaling = False
        self.watching = False  # the record folders watched (RecordWatch): set before the first use
        self.watch: Optional[RecordWatch] = None
        self.size = 0  # the journal's bytes in the lock file
        self.held = False  # past the use that journaled: until complete()
        self.unfinished = False  # a journal whose doing failed: replayed from the file at the next use
        self.entries: Dict[str, Tuple[str, Optional[bytes], Any]] = {}  # path -> (kind, bytes or None, record)

    def __enter__(self) -> None:
        if self.held:  # a journal of an event answered in the same read: done now, the lock still held
            self.held = False
            try:
                self._done()
            except BaseException:
                self._release()
                raise
            return
        if self.fd >= 0:
            try:
                st = os.stat(self.path, follow_symlinks=False)
                same = (st.st_dev, st.st_ino) == self.ident
            except OSError:
                same = False
            if not same:
                self.close()
        if self.fd < 0:
            opened = state_lock(self.state_dir)
            opened.__enter__()  # made, opened, locked, and a journal left there done
            st = os.fstat(opened.fd)
            self.fd, self.ident = opened.fd, (st.st_dev, st.st_ino)
        else:
            fcntl.flock(self.fd, fcntl.LOCK_EX)
            if self.unfinished:
                try:
                    replay_journal(self.state_dir, self.fd)
                except BaseException:
                    fcntl.flock(self.fd, fcntl.LOCK_UN)
                    raise
                self.unfinished = False
        if self.watching:
            if self.watch is None and (self.state_dir in _WANTED or WATCH_FROM <= 0):
                self.watch = RecordWatch(self.state_dir)
            if self.watch is not None:
                self.watch.check()
        if self.journaling:
            _JOURNALS[self.state_dir] = self

    def __exit__(self, kind: Optional[type] = None, *exc: object) -> None:
        if self.size:
            if kind is None:
                self.held = True  # done by complete(), once the answer is sent
                return
            if issubclass(kind, Exception):
                try:
                    self._done()
                finally:
                    self._release()
                return
            self._forget()  # the process is going away: the file keeps the journal for the next holder
            self.unfinished = True
        self._release()

    def watch_from_now(self) -> None:
        """Watch the record folders from the next use on, not only once a listing finds WATCH_FROM
        records: the plugin asks for it where inotify (ctypes) is loaded already (kubelet's checkpoint
        watched: node.inotify.FileWatch), so the watch costs no more memory."""
        _WANTED.add(self.state_dir)

    def complete(self) -> None:
        """Once the answer is sent: the journal done (each record saved or removed, the file emptied)
        and the lock released. Raises the RecordError of a record that could not be written (the
        journal stays in the file and is done at the next use)."""
        if not self.held:
            return
        self.held = False
        try:
            self._done()
        finally:
            self._release()

    def save(self, kind: str, path: str, data: bytes, rec: Any) -> None:
        """One save journaled (save_all's, without its loops: most events save one record)."""
        self._append(format_journal_entry(kind, path.rpartition("/")[2][:-5], data))
        self.entries[path] = (kind, data, rec)
        _OVERLAY[path] = (data, rec)

    def save_all(self, saves: Sequence[Tuple[str, str, bytes, Any]]) -> None:
        """Saves (kind, path, bytes, record), journaled in order by one write: a creation's pod
        record and its own (a kill before the write leaves neither, as one before the first of two
        writes did; what the event changes outside the state directory comes after the write)."""
        assert len(saves) <= MAX_ENTRIES_WRITTEN, "replay_journal reads a journal of at most that many more"
        entry = b""
        for kind, path, data, _rec in saves:
            entry += format_journal_entry(kind, path.rpartition("/")[2][:-5], data)
        self._append(entry)
        entries = self.entries
        for kind, path, data, rec in saves:
            entries[path] = (kind, data, rec)
            _OVERLAY[path] = (data, rec)

    def delete(self, kind: str, path: str) -> bool:
        return self.delete_all(((kind, path),)) > 0

    def delete_all(self, paths: Sequence[Tuple[str, str]]) -> int:
        """Removals (kind, path), journaled in order by one write (a stop's last member: its pod's
        record and its own); a record that is not there is skipped. Returns how many were there."""
        assert len(paths) <= MAX_ENTRIES_WRITTEN, "replay_journal reads a journal of at most that many more"
        entry = b""
        gone = []
        for kind, path in paths:
            journaled = _OVERLAY.get(path, _ABSENT)
            if _exists(*_split(path)) if journaled is _ABSENT else journaled is not None:
                entry += format_journal_entry(kind, path.rpartition("/")[2][:-5], None)
                gone.append((kind, path))
        if gone:
            self._append(entry)
            for kind, path in gone:
                self.entries[path] = (kind, None, None)
                _OVERLAY[path] = None
        return len(gone)

    def _append(self, entry: bytes) -> None:
        """``entry`` (whole entries: at most MAX_ENTRIES_WRITTEN) written at the journal's end, by one pwrite."""
        if self.size and self.size + len(entry) > JOURNAL_FLUSH:
            self._done()  # bounded: what is journaled so far saved now, a new journal begun
        if not self.size:
            entry = JOURNAL_HEAD + entry
        try:
            written = os.pwrite(self.fd, entry, self.size)
        except OSError as exc:
            raise RecordError(f"cannot write the journal: {exc.strerror}", self.path) from None
        if written != len(entry):
            os.ftruncate(self.fd, self.size)
            raise RecordError("cannot write the journal: short write", self.path)
        self.size += written

    def _done(self) -> None:
        """Each journaled record saved or removed (the last of each: the file keeps every step until
        all are done), then the journal emptied."""
        entries = self.entries
        try:
            for path, (kind, data, rec) in entries.items():
                _OVERLAY.pop(path, None)
                if data is None:
                    _delete_file(self.state_dir, kind, path.rpartition("/")[2][:-5], path)
                else:
                    _write_record(path, data, rec)
            os.ftruncate(self.fd, 0)
        except BaseException:
            self.unfinished = True
            raise
        finally:
            self._forget()

    def _forget(self) -> None:
        for path in self.entries:
            _OVERLAY.pop(path, None)
        self.entries = {}
        self.size = 0

    def _release(self) -> None:
        _JOURNALS.pop(self.state_dir, None)
        _TRUSTED.clear()
        if self.watch is not None:
            self.watch.settle()
        fcntl.flock(self.fd, fcntl.LOCK_UN)

    def close(self) -> None:
        """The lock file closed (and with it the lock); a journal not done yet is left in the file
        for the next holder, as by a process that goes away."""
        if self.size:
            self._forget()
            self.unfinished = True
        self.held = False
        if self.watch is not None:  # the lock file went (the state directory made again, say)
            self.watch.stop()
        if _JOURNALS.get(self.state_dir) is self:
            del _JOURNALS[self.state_dir]
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1

    def __del__(self) -> None:
        self.close()


_ABSENT = object()


def read_record_bytes(state_dir: str, kind: str, name: str) -> Optional[bytes]:
    """A record file's bytes, read capped and without following links; None when there is none."""
    return _read_record_file(state_dir, kind, record_path(state_dir, kind, name))


def _read_record_file(state_dir: str, kind: str, path: str) -> Optional[bytes]:
    return _read_record_stat(state_dir, kind, path)[0]


def _read_record_stat(state_dir: str, kind: str, path: str) -> Tuple[Optional[bytes], Optional[Tuple[int, int, int]]]:
    """A record file's bytes and the identity they were read at (inode, size, modification time);
    (None, None) when there is no file (or it is journaled as removed)."""
    if _OVERLAY and path in _OVERLAY:
        journaled = _OVERLAY[path]
        return (None, None) if journaled is None else (journaled[0], None)
    folder, name = _split(path)
    if not _exists(folder, name):
        return None, None
    try:
        data, st = _in_dir(folder, read_regular_file_stat, name, MAX_RECORD_BYTES, follow=False)
        key = _identity(st)
        if _TRUSTED:
            known = _TRUSTED.get(folder)
            if known is not None:
                known.verified[name] = key
        return data, key
    except FileNotFoundError:
        return None, None
    except FileRefused as exc:
        raise RecordError(f"invalid record: {exc}", path) from None
    except OSError as exc:
        import errno

        if exc.errno == errno.ELOOP:
            raise RecordError("is a symbolic link; refusing to follow it", path) from None
        raise RecordError(f"cannot read: {exc.strerror}", path) from None


# One encoder for every record (json.dumps with an option builds a new JSONEncoder per call), and
# the C function its encode() would make on every call (json.encoder.c_make_encoder, with
# JSONEncoder's own arguments for these options; no circular check: a record is a tree the store
# builds), made once; None where the interpreter has no C accelerator (encode() then runs in Python).
_ENCODER = json.JSONEncoder(sort_keys=True)
_C_ENCODE = None if c_make_encoder is None else c_make_encoder(
    None, _ENCODER.default, encode_basestring_ascii, None, _ENCODER.key_separator, _ENCODER.item_separator,
    True, False, True)


def format_document(doc: Dict[str, Any]) -> bytes:
    """A record file's bytes: one line of JSON (json's C encoder; an indented dump runs in
    Python), keys sorted, a newline: exactly ``_ENCODER.encode(doc)``'s text
    (tests/unit/test_records.py compares them)."""
    if _C_ENCODE is None:
        return (_ENCODER.encode(doc) + "\n").encode()
    return ("".join(_C_ENCODE(doc, 0)) + "\n").encode()


def parse_document(data: bytes, path: str) -> Any:
    """A record file's JSON; RecordError names the file when it is not JSON."""
    try:
        return json.loads(data)
    except (ValueError, RecursionError) as exc:
        what = "nested too deeply" if isinstance(exc, RecursionError) else f"not JSON ({exc})"
        raise RecordError(f"invalid record: {what}", path) from None


def read_document(state_dir: str, kind: str, name: str) -> Any:
    """A record file's JSON, read capped and without following links; None when there is none."""
    data = read_record_bytes(state_dir, kind, name)
    return None if data is None else parse_document(data, record_path(state_dir, kind, name))


# The record last parsed from each file, with the file's bytes then and its identity (inode, size,
# modification time; None: not known): a resident process (the NRI plugin) reads a record on every
# event of its container, and parsing and checking it costs more than reading it. While the file
# has that identity it is the file whose bytes these are (every writer replaces a record by renaming
# a new file over it, which changes the inode; an edit in place changes the time), so a hit costs
# one stat; otherwise the bytes are read and compared, and a hit is exactly what parsing would
# give. One entry per record file (forgotten with it); bounded.
_PARSED: Dict[str, Tuple[bytes, Any, Optional[Tuple[int, int, int]]]] = {}
MAX_PARSED = 8192


def _identity(st: os.stat_result) -> Tuple[int, int, int]:
    return st.st_ino, st.st_size, st.st_mtime_ns


def _remember(path: str, data: bytes, rec: Any, key: Optional[Tuple[int, int, int]] = None) -> Any:
    if len(_PARSED) >= MAX_PARSED:
        _PARSED.clear()
    _PARSED[path] = (data, rec, key)
    return rec


def _read_remembered(state_dir: str, kind: str, path: str) -> Tuple[Optional[bytes], Any, Optional[Tuple[int, int, int]]]:
    """A record file's bytes, the record remembered for exactly those bytes (None: parse them) and
    the file's identity then; (None, None, None) when there is no file (and nothing is remembered for
    it any more). A record remembered without an identity (or at another one) gets the one it was
    read at: the next lookup costs a stat, and list_remembered gives it."""
    if _OVERLAY and path in _OVERLAY:  # journaled by this process, not saved yet
        journaled = _OVERLAY[path]
        return (None, None, None) if journaled is None else (journaled[0], journaled[1], None)
    hit = _PARSED.get(path)
    if hit is not None and hit[2] is not None:
        folder, name = _split(path)
        if _TRUSTED:
            known = _TRUSTED.get(folder)
            if known is not None and known.verified.get(name) == hit[2]:
                return hit[0], hit[1], hit[2]  # the file it was when read or written: unchanged since
        fd = _dir_fd(folder)
        try:
            st = None if fd is None else os.stat(name, dir_fd=fd, follow_symlinks=False)
        except OSError:
            st = None  # gone, or unreadable: the read below says which
        if st is not None and stat.S_ISREG(st.st_mode) and _identity(st) == hit[2]:
            if _TRUSTED:
                known = _TRUSTED.get(folder)
                if known is not None:
                    known.verified[name] = hit[2]
            return hit[0], hit[1], hit[2]
    data, key = _read_record_stat(state_dir, kind, path)
    if data is None:
        _PARSED.pop(path, None)
        return None, None, None
    if hit is not None and hit[0] == data:
        _PARSED[path] = (data, hit[1], key)
        return data, hit[1], key
    return data, None, key


def load_container(state_dir: str, cid: str) -> Optional[ContainerRecord]:
    """A container's record, checked (RecordError names the file and the problem), or None."""
    path = record_path(state_dir, "containers", cid)
    data, known, key = _read_remembered(state_dir, "containers", path)
    if data is None:
        _missed((state_dir, "containers", cid))
        return None
    if known is not None:
        return known
    return _remember(path, data, parse_container_record(parse_document(data, path), cid, path), key)


def load_pod(state_dir: str, key: str) -> Optional[PodRecord]:
    """A pod's record, migrated and checked, or None.

    A version 1 record's members get the share their container records say (|shared| CPUs); a
    member without a readable container record gets none (it does not count anyway).
    """
    path = record_path(state_dir, "pods", key)
    data, known, ident = _read_remembered(state_dir, "pods", path)
    if data is None:
        _missed((state_dir, "pods", key))
        return None
    if known is not None:
        return known
    migrated = []

    def legacy_share(cid: str) -> int:
        migrated.append(cid)
        try:
            rec = load_container(state_dir, cid)
        except RecordError:
            return 0
        return 0 if rec is None else len(rec.shared) * MCPU

    rec = parse_pod_record(compute_migrated_pod(parse_document(data, path), legacy_share), key, path)
    # A migrated record depends on its members' records too: parsed again each time.
    return rec if migrated else _remember(path, data, rec, ident)


def load_record(state_dir: str, kind: str, name: str) -> Any:
    """``load_container`` or ``load_pod`` by kind ("containers" or "pods")."""
    return load_container(state_dir, name) if kind == "containers" else load_pod(state_dir, name)


def save_document(state_dir: str, kind: str, name: str, doc: Dict[str, Any]) -> str:
    """Write a record file atomically (temporary file, then rename); returns its path."""
    return _save(state_dir, kind, name, doc)


def _save(state_dir: str, kind: str, name: str, doc: Dict[str, Any], rec: Any = None) -> str:
    """``doc`` saved as record ``name``; ``rec``: what it parses to, remembered (save_container). Under
    a journaling HeldStateLock the save is journaled and done once the answer is sent."""
    path = record_path(state_dir, kind, name)
    data = format_document(doc)
    journal = _JOURNALS.get(state_dir)
    if journal is not None:
        journal.save(kind, path, data, rec)
        return path
    _write_record(path, data, rec)
    return path


def _write_record(path: str, data: bytes, rec: Any) -> None:
    """``data`` as the record file ``path`` (record_path's), through its folder's kept descriptor;
    ``rec`` (what they parse to; None: not known) remembered for them."""
    folder, base = _split(path)
    watch = _WATCHED.get(folder) if _WATCHED else None
    try:
        key = _write_bytes(path, f".{base[:-5]}.{_PID[0]}.tmp", data, _dir_fd(folder, create=True), base)
    except BaseException:
        _lost(folder)  # some of the save's events queued, not counted
        raise
    if watch is not None:
        watch.saved(folder, base, key)
    if rec is not None:
        _remember(path, data, rec, key)


# This process's id, for the temporaries' names (asked once, and again in a forked child).
_PID = [os.getpid()]
os.register_at_fork(after_in_child=lambda: _PID.__setitem__(0, os.getpid()))

WRITE_FLAGS = os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW | os.O_CLOEXEC


def _write_whole(path: str, tmp: str, doc: Dict[str, Any]) -> None:
    """``doc`` as JSON (format_document's bytes) in ``path``, as _write_bytes writes them."""
    _write_bytes(path, tmp, format_document(doc))


def _write_bytes(path: str, tmp: str, data: bytes, dir_fd: Optional[int] = None, base: str = "") -> Tuple[int, int, int]:
    """``data`` in ``path``: written to ``tmp`` (never through a link) and renamed over it.

    With ``dir_fd`` (the folder's kept descriptor) ``tmp`` is a name in it and ``path``'s name is used
    there; without, the folder is made only when the first open says it is missing. Returns the
    file's identity (inode, size, modification time: a rename changes none of them). ``base``:
    ``path``'s file name, when the caller has it.
    """
    target = path if dir_fd is None else (base or os.path.basename(path))
    try:
        try:
            fd = os.open(tmp, WRITE_FLAGS, 0o644, dir_fd=dir_fd)
        except FileNotFoundError:
            if dir_fd is not None:  # the kept directory removed since: made and opened again
                dir_fd = _reopened(os.path.dirname(path), create=True)
                if dir_fd is None:
                    raise
            else:
                os.makedirs(os.path.dirname(path), mode=0o755, exist_ok=True)
            fd = os.open(tmp, WRITE_FLAGS, 0o644, dir_fd=dir_fd)
        try:
            if os.write(fd, data) != len(data):
                raise OSError(0, "short write")
            key = _identity(os.fstat(fd))
        finally:
            os.close(fd)
        os.replace(tmp, target, src_dir_fd=dir_fd, dst_dir_fd=dir_fd)
    except OSError as exc:
        try:
            os.unlink(tmp, dir_fd=dir_fd)
        except OSError:
            pass
        raise RecordError(f"cannot write: {exc.strerror}", path) from None
    return key


def save_container(state_dir: str, rec: ContainerRecord) -> str:
    """Save a container record; the next load of these bytes gives ``rec`` without parsing them
    (format and parse are inverse: tests/unit/test_records.py checks it on the engine's records)."""
    return _save(state_dir, "containers", rec.id, format_container_record(rec), rec)


def save_pod(state_dir: str, rec: PodRecord) -> str:
    """Save a pod record (remembered as save_container's are)."""
    return _save(state_dir, "pods", rec.key, format_pod_record(rec), rec)


def save_pod_and_container(state_dir: str, pod: PodRecord, rec: ContainerRecord) -> None:
    """Save a pod record, then a container record (save_pod, then save_container): under a journaling
    HeldStateLock both are journaled by one write (a creation's two records), else each file is
    written in that order."""
    journal = _JOURNALS.get(state_dir)
    if journal is None:
        save_pod(state_dir, pod)
        save_container(state_dir, rec)
        return
    journal.save_all((("pods", record_path(state_dir, "pods", pod.key), format_document(format_pod_record(pod)), pod),
                      ("containers", record_path(state_dir, "containers", rec.id),
                       format_document(format_container_record(rec)), rec)))


def delete_record(state_dir: str, kind: str, name: str) -> bool:
    """Forget a record; True if there was one (journaled, as _save is, under a journaling lock)."""
    path = record_path(state_dir, kind, name)
    journal = _JOURNALS.get(state_dir)
    if journal is not None:
        return journal.delete(kind, path)
    return _delete_file(state_dir, kind, name, path)


def delete_records(state_dir: str, names: Sequence[Tuple[str, str]]) -> None:
    """Forget records (kind, name), in order (delete_record each): under a journaling HeldStateLock
    by one journal write (a stop's last member: its pod's record and its own)."""
    journal = _JOURNALS.get(state_dir)
    if journal is None:
        for kind, name in names:
            delete_record(state_dir, kind, name)
        return
    paths = []
    for kind, name in names:  # a loop, not a comprehension: no function call for two names
        paths.append((kind, record_path(state_dir, kind, name)))
    journal.delete_all(paths)


def _delete_file(state_dir: str, kind: str, name: str, path: str) -> bool:
    _PARSED.pop(path, None)
    folder, base = _split(path)
    _missed((state_dir, kind, name))
    if _TRUSTED and folder in _TRUSTED and not _exists(folder, base):
        return False
    try:
        _in_dir(folder, os.unlink, base)
    except FileNotFoundError:
        return False
    except OSError as exc:
        raise RecordError(f"cannot remove: {exc.strerror}", path) from None
    watch = _WATCHED.get(folder) if _WATCHED else None
    if watch is not None:
        watch.removed(folder, base)
    return True


def container_exists(state_dir: str, cid: str) -> bool:
    """Whether a container record file is there (a pod member counts only while it is)."""
    path = record_path(state_dir, "containers", cid)
    if _OVERLAY and path in _OVERLAY:
        return _OVERLAY[path] is not None
    folder, name = _split(path)
    if _exists(folder, name):
        return True
    _missed((state_dir, "containers", cid))
    return False


def remove_stale_temporaries(state_dir: str, proc_root: str = "/proc") -> List[str]:
    """Remove the temporary files of runs that died before their rename; returns their paths.

    A temporary is ``.<name>.<pid>.tmp``; one whose pid is no longer running (or is this
    process) is left over. The caller holds the state lock, so no live writer is mid-rename
    under it except through a pid that still runs.
    """
    removed: List[str] = []
    for kind in KINDS:
        folder = os.path.join(state_dir, kind)
        try:
            _check_dir(folder)
            entries = os.listdir(folder)
        except (OSError, RecordError):
            continue
        for entry in entries:
            if not (entry.startswith(".") and entry.endswith(".tmp")):
                continue
            pid = entry[: -len(".tmp")].rsplit(".", 1)[-1]
            if pid.isdigit() and int(pid) != os.getpid() and os.path.exists(os.path.join(proc_root, pid)):
                continue
            try:
                os.unlink(os.path.join(folder, entry))
                removed.append(os.path.join(folder, entry))
            except OSError:
                pass
    return removed


def list_records(state_dir: str, kind: str) -> List[str]:
    """Names of the records of one kind, sorted; temporary files are skipped."""
    return [entry[0] for entry in _scan_records(state_dir, kind)]


def list_remembered(state_dir: str, kind: str) -> List[Tuple[str, Any]]:
    """(name, the record remembered for its file, or None) of each record of one kind, sorted.

    A record is given only while its file has the inode it had when it was remembered, as the
    directory listing says (no stat per record: the NRI plugin looks over every tracked container
    when kubelet's checkpoint changes, at each allocation of a static-policy node): every writer
    replaces a record by renaming a new file over it, which gives it a new inode. What only an
    edit in place would change (by hand, not by this product) is seen when the record is loaded
    (load_container: the stat compares size and time too). None: load it.
    """
    out = []
    parsed = _PARSED
    for name, path, inode in _scan_records(state_dir, kind):
        hit = parsed.get(path)
        out.append((name, hit[1] if hit is not None and hit[2] is not None and hit[2][0] == inode else None))
    return out


def _scan_records(state_dir: str, kind: str) -> List[Tuple[str, str, int]]:
    """(name, path, inode) of the records of one kind, sorted by name (one getdents: no stat)."""
    folder = _FOLDERS.get((state_dir, kind)) or os.path.join(state_dir, kind)
    known = _TRUSTED.get(folder) if _TRUSTED else None
    if known is not None:  # watched: the names this process knows there
        names = known.names if known.names is not None else _known_names(folder, known)
        prefix = folder + "/"
        entries = [(base[:-5], prefix + base, inode) for base, inode in names.items()]
    else:
        _check_dir(folder)
        try:
            with os.scandir(folder) as it:
                entries = [(e.name[:-5], e.path, e.inode()) for e in it if e.name.endswith(".json")]
        except FileNotFoundError:
            return []
        except OSError as exc:
            raise RecordError(f"cannot list: {exc.strerror}", folder) from None
    # Temporaries end in ".tmp"; a leading dot is legal in an id ("...", ".x") and is listed. A name of
    # ASCII letters and digits (containerd's and CRI-O's ids) is plain without a Python call per name
    # (the NRI plugin lists its records at each change of kubelet's checkpoint).
    pattern = KINDS[kind]
    entries = [e for e in entries if (e[0].isascii() and e[0].isalnum()) or is_plain_name(e[0], pattern)]
    if len(entries) >= WATCH_FROM and known is None:
        _WANTED.add(state_dir)
    if _OVERLAY:
        entries = _overlaid(folder, entries)
    entries.sort()  # by name: names are distinct
    return entries


def _overlaid(folder: str, entries: List[Tuple[str, str, int]]) -> List[Tuple[str, str, int]]:
    """A listing of ``folder`` as this process's journal has it: its records journaled as saved are
    listed (inode -1: not the inode of any file, so list_remembered gives them to be loaded, from the
    journal), those journaled as removed are not."""
    journaled = {path: value for path, value in _OVERLAY.items() if path.rpartition("/")[0] == folder}
    if not journaled:
        return entries
    out = [e for e in entries if e[1] not in journaled]
    out += [(path.rpartition("/")[2][:-5], path, -1) for path, value in journaled.items() if value is not None]
    return out


def mark_pending(state_dir: str, name: str, queue: str = PENDING) -> bool:
    """Queue container ``name`` for the watch sync (hook mode); best effort (False when it could not).

    An empty file ``<state_dir>/<queue>/<name>``: one open(2) on the hook's path, no systemctl.
    The sync starts or stops the container's watch units from what the records say (queue
    PENDING) or reconciles it once more (RECHECK); a mark that is lost (read-only /run, say)
    only delays that to the next periodic reconcile.
    """
    if not watchable(name) or queue not in (PENDING, RECHECK):
        return False
    folder = os.path.join(state_dir, queue)
    path = os.path.join(folder, name)
    flags = os.O_WRONLY | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC
    try:
        try:
            fd = os.open(path, flags, 0o644)
        except FileNotFoundError:
            os.makedirs(folder, mode=0o755, exist_ok=True)
            fd = os.open(path, flags, 0o644)
        os.close(fd)
    except OSError:
        return False
    return True


def watchable(name: str) -> bool:
    """Whether container ``name`` can have a watch unit and a pending mark (see UNIT_CHARS)."""
    if not 0 < len(name) <= MAX_WATCHABLE_ID or name[0] == "." or not UNIT_CHARS.issuperset(name):
        return False
    return "." not in name or name.rsplit(".", 1)[1] not in BACKUP_EXTENSIONS


# -- the pool's placements (shared_cpus: pool, exclusive_source dra) ----------------------------
# One file, ``<state_dir>/pool.json``: what the NRI plugin placed where (the pool, each container's
# kind, claims and cpuset), written whole after every change, for `status`, `check` and metrics
# (other processes). The plugin itself rebuilds this from the runtime at every Synchronize: the
# file is a report, never its input.
POOL_FILE = "pool.json"


def save_pool_snapshot(state_dir: str, doc: Dict[str, Any]) -> str:
    """Write the pool's placements atomically (temporary file, then rename); returns its path."""
    path = os.path.join(state_dir, POOL_FILE)
    _write_whole(path, os.path.join(state_dir, f".{POOL_FILE}.{os.getpid()}.tmp"), doc)
    return path


def load_pool_snapshot(state_dir: str) -> Optional[Dict[str, Any]]:
    """The pool's placements as the plugin last wrote them; None when there are none (not pool mode)."""
    path = os.path.join(state_dir, POOL_FILE)
    try:
        doc = json.loads(read_regular_file(path, MAX_RECORD_BYTES * 16, follow=False))
    except FileNotFoundError:
        return None
    except (OSError, FileRefused, ValueError, RecursionError) as exc:
        raise RecordError(f"cannot read the pool's placements: {exc}", path) from None
    if not isinstance(doc, dict) or not isinstance(doc.get("members"), dict):
        raise RecordError("not the pool's placements", path)
    return doc
