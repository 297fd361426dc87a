"""Messages for people: one line on stderr and the same line in syslog (journald).

The hook's stderr is only ever seen inside a runtime's error text, so everything that
matters also goes to syslog with the tag ``mixed-cpus-hook``. The ``syslog`` module is a
small C extension, imported only when a line is logged: a container start that logs nothing
(the usual case) does not load it.
"""

from __future__ import annotations

import sys

from ..core.bounds import MAX_LOG_LINE, quote  # noqa: F401 - quote: what log users call

TYPE_CHECKING = False
if TYPE_CHECKING:  # typing costs milliseconds on every container start
    from typing import Any, Callable, Dict, List, Optional, TextIO, Tuple

    SyslogSink = Callable[[int, str], None]

TAG = "mixed-cpus-hook"
# syslog.LOG_ERR, LOG_WARNING, LOG_INFO, LOG_DEBUG: the priorities of <syslog.h>, the same on
# every platform; written out so that importing this module does not load syslog.
LEVELS = {"error": 3, "warning": 4, "info": 6, "debug": 7}
MAX_HELD = 10000  # lines a Reporter keeps while held; more are logged at once
RELEASE_WRITE = 1 << 16  # released lines go to the stream in writes of about this many characters


def format_line(message: str) -> str:
    """One line that any sink can take: newlines joined, control characters escaped, cut.

    Names in messages come from pods and runtimes (a JSON ``"\\udc80"`` in an annotation is a
    lone surrogate, which syslog's UTF-8 encoding refuses; a NUL ends a C string; an ESC drives
    the terminal of whoever reads the log): each is written as repr would (``\\x1b``), and a
    line longer than bounds.MAX_LOG_LINE is cut.
    """
    line = " ".join(message.split("\n"))
    if len(line) > MAX_LOG_LINE:
        line = f"{line[:MAX_LOG_LINE]}... (cut: {len(line)} characters)"
    if not line.isprintable():
        line = line.translate(_control_table())
    try:
        line.encode("utf-8")
    except UnicodeEncodeError:
        line = line.encode("utf-8", "backslashreplace").decode("utf-8")
    return line


_CONTROLS: Dict[int, str] = {}


def _control_table() -> Dict[int, str]:
    """C0 and C1 control characters and DEL, each to its ``\\xNN`` escape (built on first use)."""
    if not _CONTROLS:
        _CONTROLS.update({c: f"\\x{c:02x}" for c in list(range(0x20)) + list(range(0x7f, 0xa0))})
    return _CONTROLS


def _default_sink(priority: int, message: str) -> None:
    import os

    if os.environ.get("MIXED_CPUS_HOOK_NO_SYSLOG"):  # `make demo` on a fake node: nothing for the host's journal
        return
    import syslog

    syslog.openlog(TAG, syslog.LOG_PID, syslog.LOG_DAEMON)
    syslog.syslog(priority, message)


class Reporter:
    """Where messages go; tests pass their own sink and stream instead of patching globals."""

    def __init__(self, stream: Optional[TextIO] = None, sink: Optional["SyslogSink"] = _default_sink,
                 verbose: bool = False, stream_is_log: bool = False) -> None:
        self.stream = stream if stream is not None else sys.stderr
        self.sink = sink
        self.verbose = verbose
        # The stream is where the log is read (the journal under systemd, ``kubectl logs`` in a
        # pod): the lines meant for the log only (emit's to_stream=False) are written there too.
        self.stream_is_log = stream_is_log
        # (level, message or (function, arguments) that make it, to_stream)
        self._held: Optional[List[Tuple[str, Any, bool]]] = None

    def hold(self) -> None:
        """Keep the lines logged from now until ``release``: the NRI plugin logs what a request did
        once its answer is on its way (formatting and syslog are not on the runtime's clock)."""
        if self._held is None:
            self._held = []

    @property
    def holding(self) -> bool:
        """Whether lines are being kept (between ``hold`` and ``release``)."""
        return self._held is not None

    def release(self) -> None:
        """Log the lines kept since ``hold``, in order (those for the stream in one write)."""
        held, self._held = self._held, None
        parts: List[str] = []
        size = 0
        for level, message, to_stream in held or ():
            if type(message) is tuple:  # emit_made's: made now
                message = message[0](*message[1])
            text = self._log(level, message, to_stream)
            if text:
                parts.append(text)
                size += len(text)
                if size >= RELEASE_WRITE:  # a flood of lines is written as it goes, not held whole
                    self._write("".join(parts))
                    parts, size = [], 0
        if parts:
            self._write("".join(parts))

    def _write(self, text: str) -> None:
        self.stream.write(text)
        self.stream.flush()

    def emit(self, level: str, message: str, to_stream: bool = True) -> None:
        """Log one line; ``info`` reaches stderr only when verbose, errors and warnings always."""
        held = self._held
        if held is not None and len(held) < MAX_HELD:
            held.append((level, message, to_stream))
            return
        text = self._log(level, message, to_stream)
        if text:
            self._write(text)

    def emit_made(self, level: str, make: Callable[..., str], args: Tuple[Any, ...], to_stream: bool = True) -> None:
        """emit ``make(*args)``, made only when the line is logged: while lines are held (the NRI
        plugin's answer is on its way), after the answer."""
        held = self._held
        if held is not None and len(held) < MAX_HELD:
            held.append((level, (make, args), to_stream))
            return
        self.emit(level, make(*args), to_stream)

    def _log(self, level: str, message: str, to_stream: bool) -> str:
        """The line to the sink; returns what is for the stream ("" when nothing is)."""
        line = format_line(message)
        if self.sink is not None and level != "debug":
            try:
                self.sink(LEVELS[level], line)
            except (OSError, ValueError):  # a line the sink still cannot take must not end the hook
                pass
        if (to_stream or self.stream_is_log) and (level in ("error", "warning") or self.verbose):
            return f"{TAG}: {level}: {line}\n" if level != "info" else f"{TAG}: {line}\n"
        return ""

    def error(self, message: str) -> None:
        self.emit("error", message)

    def warning(self, message: str) -> None:
        self.emit("warning", message)

    def info(self, message: str) -> None:
        self.emit("info", message)
