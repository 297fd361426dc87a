"""A watch on one file's directory (Linux inotify): wakes a poll loop when the file is replaced.

The NRI plugin reads kubelet's CPU manager checkpoint again whenever it changed, and parsing it
(its JSON, each entry's cpulist, kubelet's fnv32a checksum over the whole of it in Python) grows
with the node's containers: about 2 ms for 400 entries. kubelet rewrites the checkpoint when it
admits a pod (its CPU manager's Allocate), well before the runtime's CreateContainer for it (the
sandbox, the image, the container's own creation come in between): with this watch in its poll
loop the plugin parses the new checkpoint then, and the request finds it read already (the same
stat key: nothing parsed on its path). A read at the event stays the truth either way: the
request still stats the file and parses what changed since.

kubelet replaces the file by rename (IN_MOVED_TO in its directory); a write in place
(IN_CLOSE_WRITE), a creation or a removal count too. The directory is watched, not the file,
since the file's inode changes at every rename. inotify has no Python binding in the standard
library: libc's three calls through ctypes (loaded only here, by the resident plugin).
"""

from __future__ import annotations

import os
import struct

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any, Dict, Iterator, Optional, Set, Tuple

IN_MODIFY = 0x00000002
IN_ATTRIB = 0x00000004
IN_CLOSE_WRITE = 0x00000008
IN_MOVED_FROM = 0x00000040
IN_MOVED_TO = 0x00000080
IN_CREATE = 0x00000100
IN_DELETE = 0x00000200
IN_DELETE_SELF = 0x00000400
IN_MOVE_SELF = 0x00000800
IN_Q_OVERFLOW = 0x00004000
IN_IGNORED = 0x00008000
IN_ONLYDIR = 0x01000000
IN_DONT_FOLLOW = 0x02000000
MASK = (IN_CLOSE_WRITE | IN_MOVED_FROM | IN_MOVED_TO | IN_CREATE | IN_DELETE | IN_DELETE_SELF | IN_MOVE_SELF
        | IN_ONLYDIR | IN_DONT_FOLLOW)
GONE = IN_DELETE_SELF | IN_MOVE_SELF | IN_IGNORED  # the directory itself went: watch it again later

_EVENT = struct.Struct("iIII")  # struct inotify_event: wd, mask, cookie, len (then len bytes of name)
READ_SIZE = 65536
MAX_READS = 16  # a drain reads at most this many buffers (the kernel queues at most max_queued_events)


def format_event_size(name_length: int) -> int:
    """Bytes of one queued event naming an entry of ``name_length`` bytes: the struct, then the name
    and its NUL padded to the struct's size (the kernel's rounding)."""
    return _EVENT.size + (name_length + _EVENT.size) // _EVENT.size * _EVENT.size


def open_inotify(libc: Any = None) -> Tuple[Optional[int], Any, str]:
    """(a non-blocking inotify descriptor or None, libc, why there is none): libc's inotify_init1
    through ctypes (loaded only by the resident plugin)."""
    import ctypes

    try:
        libc = libc or ctypes.CDLL(None, use_errno=True)
        fd = libc.inotify_init1(os.O_NONBLOCK | os.O_CLOEXEC)
    except (OSError, AttributeError) as exc:  # no libc inotify (not Linux)
        return None, libc, f"inotify is not available: {exc}"
    if fd < 0:
        return None, libc, f"inotify_init1: {os.strerror(ctypes.get_errno())}"
    return fd, libc, ""


def add_watch(libc: Any, fd: int, path: str, mask: int, what: str) -> Tuple[int, str]:
    """inotify_add_watch of ``path`` for the events of ``mask`` (with its flags): (the watch
    descriptor, "") or (-1, why not, naming ``what``)."""
    wd = int(libc.inotify_add_watch(fd, os.fsencode(path), mask))
    if wd >= 0:
        return wd, ""
    import ctypes  # loaded already: libc came from open_inotify

    return -1, f"inotify_add_watch {what}: {os.strerror(ctypes.get_errno())}"


def iter_events(data: bytes) -> Iterator[Tuple[int, int, bytes]]:
    """(watch descriptor, mask, the entry's name or b"") of each event in a buffer inotify gave (whole
    events only: the kernel never splits one across reads)."""
    offset, end = 0, len(data)
    while offset + _EVENT.size <= end:
        wd, mask, _cookie, length = _EVENT.unpack_from(data, offset)
        start = offset + _EVENT.size
        offset = start + length
        yield wd, mask, data[start:offset].split(b"\0", 1)[0] if length else b""


def parse_event_names(data: bytes) -> Tuple[Dict[int, Set[str]], Set[int]]:
    """(the entry names each watch's events name, the watches whose directory itself went or whose
    events were lost (-1: the queue overflowed)) of a buffer inotify gave."""
    names: Dict[int, Set[str]] = {}
    whole: Set[int] = set()
    for wd, mask, name in iter_events(data):
        if mask & IN_Q_OVERFLOW:
            whole.add(-1)
        elif mask & GONE:
            whole.add(wd)
        elif name:
            names.setdefault(wd, set()).add(os.fsdecode(name))
    return names, whole


def parse_events(data: bytes, name: bytes) -> Tuple[bool, bool]:
    """(whether an event names ``name`` or lost events, whether the directory itself went) of a
    buffer inotify gave."""
    touched = gone = False
    for _wd, mask, entry in iter_events(data):
        if mask & IN_Q_OVERFLOW:
            touched = True
        if mask & GONE:
            gone = touched = True
        elif entry and entry == name:
            touched = True
    return touched, gone


class FileWatch:
    """A non-blocking inotify descriptor on ``path``'s directory, for a poll loop (``fileno``).

    ``fileno()`` is None while there is no watch (the directory is not there yet, or inotify is
    refused: no more instances, an unsupported file system); ``ensure()`` tries again (the
    plugin's periodic reconcile calls it). ``drain()`` reads what is queued and says whether the
    file may have changed. Never raises OSError: a node without the watch is served as before.
    """

    def __init__(self, path: str, libc: Any = None) -> None:
        self.path = path
        self.directory = os.path.dirname(path) or "."
        self.name = os.fsencode(os.path.basename(path))
        self._libc = libc
        self._fd: Optional[int] = None
        self.problem = ""  # why there is no watch, when there is none
        self.ensure()

    def fileno(self) -> Optional[int]:
        return self._fd

    def ensure(self) -> bool:
        """Watch the directory when not watching it yet; whether it is watched now."""
        if self._fd is not None:
            return True
        if not os.path.isdir(self.directory):  # asked before ctypes is loaded: a node without kubelet
            self.problem = f"{self.directory}: no such directory"
            return False
        fd, libc, problem = open_inotify(self._libc)
        self._libc = libc
        if fd is None:
            self.problem = problem
            return False
        wd, problem = add_watch(libc, fd, self.directory, MASK, self.directory)
        if wd < 0:
            self.problem = problem
            os.close(fd)
            return False
        self._fd, self.problem = fd, ""
        return True

    def drain(self) -> bool:
        """Read every queued event (at most MAX_READS buffers); whether the file may have changed
        (an event names it, events were lost, or the directory went: then the watch is dropped
        and ``ensure`` watches the directory made again)."""
        fd = self._fd
        if fd is None:
            return False
        touched = gone = False
        for _ in range(MAX_READS):
            try:
                data = os.read(fd, READ_SIZE)
            except BlockingIOError:
                break
            except OSError:
                gone = True
                break
            if not data:
                break
            hit, went = parse_events(data, self.name)
            touched, gone = touched or hit, gone or went
        if gone:
            self.close()
            touched = True
        return touched

    def close(self) -> None:
        if self._fd is not None:
            try:
                os.close(self._fd)
            except OSError:
                pass
            self._fd = None
