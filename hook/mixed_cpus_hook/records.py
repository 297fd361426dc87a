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
from .validate import ID_RE, NAME_RE, is_plain_name

TYPE_CHECKING = False
if TYPE_CHECKING:  # typing costs milliseconds on every container start
    from typing import Any, Dict, List, Optional

SCHEMA_VERSION = 1
KINDS = {"containers": ID_RE, "pods": NAME_RE}


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
    names = [e[: -len(".json")] for e in entries if e.endswith(".json") and not e.startswith(".")]
    return sorted(n for n in names if is_plain_name(n, KINDS[kind]))
