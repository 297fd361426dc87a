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

from .errors import RecordError
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


def record_path(state_dir: str, kind: str, name: str) -> str:
    """The record file for ``name``; refuses anything that is not one plain path component."""
    if not is_plain_name(name, KINDS[kind]):
        raise RecordError(f"{name[:80]!r} is not a plain name", os.path.join(state_dir, kind))
    return os.path.join(state_dir, kind, name + ".json")


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
    """The record, or None when there is none."""
    path = record_path(state_dir, kind, name)
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW)
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise RecordError(f"cannot read: {exc.strerror}", path) from None
    try:
        chunks = []
        while True:
            chunk = os.read(fd, 65536)
            if not chunk:
                break
            chunks.append(chunk)
    finally:
        os.close(fd)
    try:
        doc = json.loads(b"".join(chunks))
    except ValueError as exc:
        raise RecordError(f"not JSON ({exc})", path) from None
    if not isinstance(doc, dict) or doc.get("schema") != SCHEMA_VERSION:
        raise RecordError(f"not a schema {SCHEMA_VERSION} record", path)
    return doc


def save_record(state_dir: str, kind: str, name: str, doc: Dict[str, Any]) -> str:
    """Write the record atomically (temporary file, then rename); returns its path."""
    path = record_path(state_dir, kind, name)
    folder = os.path.dirname(path)
    tmp = os.path.join(folder, f".{name}.{os.getpid()}.tmp")
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


def list_records(state_dir: str, kind: str) -> List[str]:
    """Names of the records of one kind, sorted; temporary files are skipped."""
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
