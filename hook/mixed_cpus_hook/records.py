"""Per-container and per-pod records in the state directory: what reconcile needs to restore.

Layout under ``state_dir``: ``containers/<id>.json``, ``pods/<pod-cgroup-name>.json`` and a
``lock`` file. Names are validated as single path components before they are joined, every
write is a rename of a fully written temporary file, and all changes happen under an
exclusive flock so that concurrent hooks (two containers of one pod) never lose an update.
"""

from __future__ import annotations

import fcntl
import json
import os

from .bounds import MAX_PERIOD, MAX_QUOTA
from .cpuset import parse_cpulist
from .errors import CpuListError, RecordError
from .validate import ID_PATTERN, NAME_PATTERN, is_plain_name

TYPE_CHECKING = False
if TYPE_CHECKING:  # typing costs milliseconds on every container start
    from typing import Any, Dict, List, Optional

SCHEMA_VERSION = 1
KINDS = {"containers": ID_PATTERN, "pods": NAME_PATTERN}
# ``<state_dir>/pending/<id>``: empty files naming containers whose record appeared or went
# away; ``<state_dir>/recheck/<id>``: containers a watch-triggered reapply just handled, to be
# read once more after their watch units watch again. mixed-cpus-hook-sync.path
# (DirectoryNotEmpty= on both) starts the sync while any is there; the sync removes each one
# before it acts on it.
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
MODES = ("hook", "nri")
MAX_NAME = 242
PHASES = ("creating", "applied", "releasing")
SOURCES = ("kubelet-checkpoint", "spec", "record", "cgroup")


def record_path(state_dir: str, kind: str, name: str) -> str:
    """The record file for ``name``; refuses anything that is not one plain path component."""
    if not is_plain_name(name, KINDS[kind]):
        raise RecordError(f"{name[:80]!r} is not a plain name", os.path.join(state_dir, kind))
    if len(name) > MAX_NAME:
        raise RecordError(f"{name[:40]!r}...: longer than {MAX_NAME} characters (its temporary file "
                          "'.<name>.<pid>.tmp' must fit a 255-byte file name)", os.path.join(state_dir, kind))
    return os.path.join(state_dir, kind, name + ".json")


def _check_dir(path: str) -> None:
    """Refuse a state subdirectory that is a symlink (records would land wherever it points)."""
    if os.path.islink(path):
        raise RecordError(f"is a symbolic link to {os.path.realpath(path)}; refusing to follow it", path)


def _bad(path: str, problem: str) -> RecordError:
    return RecordError(f"invalid record: {problem}", path)


def _check_quota(q: Any, path: str, field: str, nullable: bool) -> None:
    """Quota bookkeeping, within what the kernel accepts: a value above bounds.MAX_QUOTA was never
    in a quota file, so a record holding one (written by a version without the bound) cannot tell
    its own writes from kubelet's and is not used."""
    if q is None and nullable:
        return
    if not isinstance(q, dict):
        raise _bad(path, f"{field} is not an object")
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


def _check_dirs(d: Any, path: str, field: str, nullable: bool) -> None:
    if d is None and nullable:
        return
    if not (isinstance(d, dict) and all(isinstance(d.get(k), str) and d[k].startswith("/") for k in ("cpuset", "cpu"))):
        raise _bad(path, f"{field} is not a pair of absolute cgroup paths")


def check_record(doc: Any, kind: str, name: str, path: str) -> None:
    """Raise RecordError naming the file and the first problem: records are input too.

    Mirrors schemas/record.schema.json (kept in step by tests/unit/test_schemas.py) in the
    standard library: jsonschema is not loaded on the hook path.
    """
    if not isinstance(doc, dict):
        raise _bad(path, "not a JSON object")
    if doc.get("schema") != SCHEMA_VERSION:
        raise _bad(path, f"not a schema {SCHEMA_VERSION} record")
    if kind == "pods":
        if doc.get("key") != name:
            raise _bad(path, "key does not match the file name")
        _check_dirs(doc.get("cgroup"), path, "cgroup", False)
        _check_quota(doc.get("quota"), path, "quota", True)
        members = doc.get("members")
        if (not isinstance(members, list) or not members or len(set(members)) != len(members)
                or not all(isinstance(m, str) and is_plain_name(m, ID_PATTERN) for m in members)):
            raise _bad(path, "members is not a non-empty list of distinct container ids")
        return
    if doc.get("id") != name:
        raise _bad(path, "id does not match the file name")
    for key in ("namespace", "pod", "container", "pod_uid", "created", "updated"):
        if not isinstance(doc.get(key), str):
            raise _bad(path, f"{key} is missing or not a string")
    if doc.get("cgroup_version") not in (1, 2) or type(doc.get("cgroup_version")) is not int:
        raise _bad(path, "cgroup_version is not 1 or 2")
    _check_dirs(doc.get("cgroup"), path, "cgroup", False)
    _check_dirs(doc.get("pod_cgroup"), path, "pod_cgroup", True)
    pod_key = doc.get("pod_key")
    if pod_key is not None and not (isinstance(pod_key, str) and is_plain_name(pod_key, NAME_PATTERN)):
        raise _bad(path, "pod_key is not null or a plain name")
    if (pod_key is None) != (doc.get("pod_cgroup") is None):
        raise _bad(path, "pod_key and pod_cgroup must be both set or both null")
    for key in ("exclusive", "shared", "desired"):
        value = doc.get(key)
        if not isinstance(value, str):
            raise _bad(path, f"{key} is missing or not a cpulist string")
        try:
            if not parse_cpulist(value, path):
                raise _bad(path, f"{key} is empty")
        except CpuListError:
            raise _bad(path, f"{key} {value[:40]!r} is not a cpulist") from None
    _check_quota(doc.get("quota"), path, "quota", False)
    for key, allowed in (("mode", MODES), ("phase", PHASES), ("exclusive_source", SOURCES)):
        if key in doc and doc[key] not in allowed:
            raise _bad(path, f"{key} is not one of {', '.join(allowed)}")
    if "reapplies" in doc and (type(doc["reapplies"]) is not int or doc["reapplies"] < 0):
        raise _bad(path, "reapplies is not a non-negative integer")
    if "pins_maybe_lost" in doc and type(doc["pins_maybe_lost"]) is not bool:
        raise _bad(path, "pins_maybe_lost is not true or false")
    if doc.get("last_reapply") is not None and not isinstance(doc.get("last_reapply"), str):
        raise _bad(path, "last_reapply is not null or a timestamp")


class state_lock:  # noqa: N801 - used like a function: ``with state_lock(dir):``
    """Hold the state directory's exclusive lock; creates the directory (0755) on first use.

    A class rather than contextlib.contextmanager: contextlib is not otherwise loaded on
    the hook path.
    """

    def __init__(self, state_dir: str) -> None:
        self.state_dir = state_dir
        self.fd = -1

    def __enter__(self) -> None:
        try:
            os.makedirs(self.state_dir, mode=0o755, exist_ok=True)
            self.fd = os.open(os.path.join(self.state_dir, "lock"), os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW, 0o600)
        except OSError as exc:
            raise RecordError(f"cannot use the state directory: {exc.strerror}", self.state_dir) from None
        fcntl.flock(self.fd, fcntl.LOCK_EX)

    def __exit__(self, *exc: object) -> None:
        os.close(self.fd)
        self.fd = -1


def load_record(state_dir: str, kind: str, name: str) -> Optional[Dict[str, Any]]:
    """The record, checked (RecordError names the file and the problem), or None when there is none."""
    path = record_path(state_dir, kind, name)
    _check_dir(os.path.join(state_dir, kind))
    from .files import FileRefused, read_regular_file

    try:
        data = read_regular_file(path, MAX_RECORD_BYTES, follow=False)
    except FileNotFoundError:
        return None
    except FileRefused as exc:
        raise RecordError(f"invalid record: {exc}", path) from None
    except OSError as exc:
        import errno

        if exc.errno == errno.ELOOP:
            raise RecordError("is a symbolic link; refusing to follow it", path) from None
        raise RecordError(f"cannot read: {exc.strerror}", path) from None
    try:
        doc = json.loads(data)
    except (ValueError, RecursionError) as exc:
        what = "nested too deeply" if isinstance(exc, RecursionError) else f"not JSON ({exc})"
        raise RecordError(f"invalid record: {what}", path) from None
    check_record(doc, kind, name, path)
    return doc


def save_record(state_dir: str, kind: str, name: str, doc: Dict[str, Any]) -> str:
    """Write the record atomically (temporary file, then rename); returns its path."""
    path = record_path(state_dir, kind, name)
    folder = os.path.dirname(path)
    tmp = os.path.join(folder, f".{name}.{os.getpid()}.tmp")
    _check_dir(folder)
    try:
        os.makedirs(folder, mode=0o755, exist_ok=True)
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, 0o644)
        try:
            data = json.dumps(doc, indent=1, sort_keys=True).encode()
            if os.write(fd, data) != len(data):
                raise OSError(0, "short write")
        finally:
            os.close(fd)
        os.replace(tmp, path)
    except OSError as exc:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise RecordError(f"cannot write: {exc.strerror}", path) from None
    return path


def delete_record(state_dir: str, kind: str, name: str) -> bool:
    """Forget a record; True if there was one."""
    path = record_path(state_dir, kind, name)
    try:
        os.unlink(path)
        return True
    except FileNotFoundError:
        return False
    except OSError as exc:
        raise RecordError(f"cannot remove: {exc.strerror}", path) from None


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
    _check_dir(os.path.join(state_dir, kind))
    try:
        entries = os.listdir(os.path.join(state_dir, kind))
    except FileNotFoundError:
        return []
    except OSError as exc:
        raise RecordError(f"cannot list: {exc.strerror}", os.path.join(state_dir, kind)) from None
    # Temporaries end in ".tmp"; a leading dot is legal in an id ("...", ".x") and is listed.
    names = [e[: -len(".json")] for e in entries if e.endswith(".json")]
    return sorted(n for n in names if is_plain_name(n, KINDS[kind]))


def mark_pending(state_dir: str, name: str, queue: str = PENDING) -> bool:
    """Queue container ``name`` for the watch sync; best effort (False when it could not).

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
