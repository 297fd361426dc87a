"""Reading the small files the hook trusts nobody to keep small: config.yaml, config.json, shared-cpus.

A runtime waits for the hook with a timeout, so a read must never block or run on: a FIFO
(open(2) waits for a writer), a device such as /dev/zero (endless) or a file of gigabytes
is refused before or instead of being read. Standard library only (the hook's path).
"""

from __future__ import annotations

import errno
import os
import stat

TYPE_CHECKING = False
if TYPE_CHECKING:  # typing costs milliseconds on every container start
    from typing import Any, Callable, Dict, Iterator, Optional, Set, Tuple, Type

    from ..core.errors import HookError

# What a file is when it is not a regular file (stat.S_IFMT -> words for the message).
KINDS = {stat.S_IFIFO: "a FIFO", stat.S_IFCHR: "a character device", stat.S_IFBLK: "a block device",
         stat.S_IFSOCK: "a socket"}


class KeptFds:
    """Descriptors a resident process keeps open by name (a file it reads on every event, a
    directory it works in), at most ``limit``: the oldest is closed to make room. The names are
    indexed by their directory (the text before their last "/"), so that the descriptors kept in
    one directory are closed (``close_in``) without looking at the others."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.fds: Dict[str, int] = {}
        # directory -> the names kept in it
        self.by_dir: Dict[str, Set[str]] = {}
        # The kept descriptor of ``name`` (None: none): the dict's own get, asked on every event.
        self.get: Callable[[str], Optional[int]] = self.fds.get

    def keep(self, name: str, fd: int) -> None:
        if name in self.fds:
            self.close(name)
        elif len(self.fds) >= self.limit:
            self.close(next(iter(self.fds)))
        self.fds[name] = fd
        self.by_dir.setdefault(name.rpartition("/")[0], set()).add(name)

    def close(self, name: str) -> None:
        fd = self.fds.pop(name, None)
        if fd is None:
            return
        folder = name.rpartition("/")[0]
        names = self.by_dir.get(folder)
        if names is not None:
            names.discard(name)
            if not names:
                del self.by_dir[folder]
        try:
            os.close(fd)
        except OSError:
            pass

    def close_in(self, folder: str) -> None:
        """Close the descriptors kept for the names directly in ``folder`` (``folder + "/" + base``)."""
        for name in list(self.by_dir.get(folder, ())):
            self.close(name)

    def __contains__(self, name: object) -> bool:
        return name in self.fds

    def __iter__(self) -> Iterator[str]:
        return iter(list(self.fds))

    def __len__(self) -> int:
        return len(self.fds)


class FileRefused(ValueError):
    """The file exists but is not a regular file, or is larger than the limit; the message says which."""


def read_regular_file(path: str, limit: int, follow: bool = True, dir_fd: Optional[int] = None) -> bytes:
    """The bytes of ``path``, a regular file of at most ``limit`` bytes (read_regular_file_stat's)."""
    return read_regular_file_stat(path, limit, follow, dir_fd)[0]


def read_regular_file_stat(path: str, limit: int, follow: bool = True,
                           dir_fd: Optional[int] = None) -> Tuple[bytes, os.stat_result]:
    """The bytes of ``path``, a regular file of at most ``limit`` bytes, and the fstat they were
    checked by (taken before the read: a file renamed over ``path`` meanwhile is not the one read,
    and a write in place during the read changes the times after it).

    Raises FileNotFoundError or another OSError as open/read do (ELOOP for a symlink when
    ``follow`` is false), FileRefused otherwise. Opened non-blocking so that a FIFO is seen
    (by fstat) instead of waited on; a file that grows while it is read is refused once more
    than ``limit`` bytes came. ``dir_fd``: ``path`` is relative to that directory (openat).
    """
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC | (0 if follow else os.O_NOFOLLOW), dir_fd=dir_fd)
    try:
        st = os.fstat(fd)
        if stat.S_ISDIR(st.st_mode):  # read(2) would say so: keep the usual "Is a directory"
            raise IsADirectoryError(errno.EISDIR, os.strerror(errno.EISDIR), path)
        if not stat.S_ISREG(st.st_mode):
            raise FileRefused(f"not a regular file ({KINDS.get(stat.S_IFMT(st.st_mode), 'a special file')})")
        if st.st_size > limit:
            raise FileRefused(f"larger than {limit} bytes ({st.st_size})")
        chunks = []
        size = 0
        while size <= limit:
            want = min(65536, limit + 1 - size)
            chunk = os.read(fd, want)
            if not chunk:
                break
            chunks.append(chunk)
            size += len(chunk)
            if len(chunk) < want and size == st.st_size:
                break  # a regular file read short at the size fstat gave: its end, no read(2) to confirm
    finally:
        os.close(fd)
    if size > limit:
        raise FileRefused(f"larger than {limit} bytes (it grew while read)")
    return b"".join(chunks), st


def parse_yaml_text(text: str, where: str, err: "Type[HookError]", what: str = "YAML") -> Any:
    """``yaml.safe_load`` of ``text`` (PyYAML imported only now: it doubles the hook's start-up), its
    failures as ``err`` with one line: where the parser stopped and why (``not valid <what> at line L,
    column C: ...``), or that it is nested too deeply (the pure-Python composer recurses per level, so
    Python's recursion limit bounds it)."""
    import yaml  # noqa: PLC0415 - deliberately lazy

    try:
        return yaml.safe_load(text)
    except RecursionError:
        raise err("not valid YAML: nested too deeply", where) from None
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        at = f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
        raise err(f"not valid {what}{at}: {problem}", where) from None
