"""``mixed-cpus-hook nri`` without the command line library: its arguments and its start.

The NRI plugin is a resident process: what it imports stays in its memory for as long as it runs.
click (the command line of every other command) is about 2.3 MiB of it, a tenth of the plugin's
resident memory, used once to read a few options. ``entry`` hands ``nri`` here when its command
line is one of the plain forms ``parse_nri_args`` reads, and the click command calls ``run_nri``
with what it parsed: one start for both. Anything else (``--help``, a value click must check and
report, an option given twice, an unknown word) goes to click, which says what is wrong.

This module imports neither click nor protobuf: ``run_nri`` imports the plugin (and with it
protobuf) when it starts it, and says so when protobuf is missing.
"""

from __future__ import annotations

import os
import sys

from ..core.errors import DependencyError, HookError
from ..node.log import Reporter

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Dict, List, Mapping, NamedTuple, Optional
else:
    from ..core.compat import NamedTuple

# The option ranges and defaults of ``nri`` (the click command is declared with them too), checked here
# before a value is taken; a value outside them, or not a plain decimal number, is click's to refuse.
RECONCILE_RANGE = (0, 86400)  # as click shows them in --help: [0<=x<=86400]
WRITE_TIMEOUT_RANGE = (0.1, 3600)
DEFAULT_RECONCILE = 10.0
DEFAULT_WRITE_TIMEOUT = 5.0
_VALUED = {"--socket": "socket_path", "--name": "plugin_name", "--index": "plugin_index",
           "--reconcile-interval": "reconcile_interval", "--write-timeout": "write_timeout",
           "--metrics-address": "metrics_address", "--config": "config"}
_RANGES = {"reconcile_interval": RECONCILE_RANGE, "write_timeout": WRITE_TIMEOUT_RANGE}


class NriArgs(NamedTuple):
    """What ``mixed-cpus-hook [--config P] [-v] nri [options]`` asks for (click's defaults where not given)."""

    config: Optional[str] = None
    verbose: bool = False
    socket_path: Optional[str] = None
    plugin_name: Optional[str] = None
    plugin_index: Optional[str] = None
    reconcile_interval: float = DEFAULT_RECONCILE
    write_timeout: float = DEFAULT_WRITE_TIMEOUT
    metrics_address: Optional[str] = None


def _parse_seconds(text: str, bounds: tuple) -> Optional[float]:
    """``text`` as click's FloatRange takes it, when it is a plain decimal number within ``bounds``;
    None for anything else (click then refuses it, or takes a spelling this does not: 1e1, inf)."""
    whole, _, fraction = text.partition(".")
    if not (whole.isdigit() or (not whole and fraction)) or not (fraction == "" or fraction.isdigit()):
        return None
    if not whole.isascii() or not fraction.isascii():
        return None
    value = float(text)
    return value if bounds[0] <= value <= bounds[1] else None


def parse_nri_args(argv: List[str], environ: Optional[Mapping[str, str]] = None) -> Optional[NriArgs]:
    """``[--config P] [-v] nri [--socket P] [--name N] [--index NN] [--reconcile-interval S]
    [--write-timeout S] [--metrics-address A] [--config P] [-v]`` (``--opt=value`` too; the
    command's own --config wins, as in click), or no arguments at all when the runtime started the
    plugin ($NRI_PLUGIN_SOCKET, as the click command line takes it). None for anything else: an
    option twice, a value that is empty or starts with "-", a number click would have to judge,
    ``--help``, any other word."""
    env = os.environ if environ is None else environ
    if not argv:
        return NriArgs() if env.get("NRI_PLUGIN_SOCKET") else None
    given: Dict[str, object] = {}
    command = False
    seen = set()
    i = 0
    while i < len(argv):
        tok = argv[i]
        if tok == "nri" and not command:
            command = True
        elif tok in ("-v", "--verbose"):
            given["verbose"] = True
        else:
            opt, eq, value = tok.partition("=")
            field = _VALUED.get(opt)
            if field is None or (field != "config" and not command) or (field, command) in seen:
                return None
            seen.add((field, command))
            if not eq:
                if i + 1 >= len(argv):
                    return None
                i += 1
                value = argv[i]
            if not value or value.startswith("-"):
                return None
            if field in _RANGES:
                seconds = _parse_seconds(value, _RANGES[field])
                if seconds is None:
                    return None
                given[field] = seconds
            else:
                given[field] = value
        i += 1
    return NriArgs(**given) if command else None  # type: ignore[arg-type]


def choose_plugin_reporter(reporter: Reporter, environ: Mapping[str, str], dev_log: str = "/dev/log") -> Reporter:
    """Where the resident plugin's lines go: every line (info too) to stderr, once, when stderr is
    the log: under systemd (JOURNAL_STREAM: stderr is the journal) or where no syslog socket is
    reachable (a DaemonSet's container: ``kubectl logs`` is stderr, and syslog would drop every
    line); else ``reporter`` (syslog, and stderr for warnings and errors)."""
    import stat

    try:
        syslog_there = stat.S_ISSOCK(os.stat(dev_log).st_mode)
    except OSError:
        syslog_there = False
    if environ.get("JOURNAL_STREAM") or not syslog_there:
        return Reporter(sink=None, verbose=True, stream_is_log=True)
    return reporter


def run_nri(args: NriArgs, reporter: Reporter, environ: Optional[Mapping[str, str]] = None) -> int:
    """Run the NRI plugin in the foreground until SIGTERM/SIGINT; its exit code. An error before or
    while it runs (no protobuf, a bad configuration, a bad socket or identity) is one line through
    ``reporter`` (stderr and the journal) and its exit code."""
    env = os.environ if environ is None else environ
    try:
        try:
            from .nri.plugin import main as run_plugin
        except ImportError as exc:
            if (exc.name or "").partition(".")[0] != "google":
                raise
            raise DependencyError(f"NRI mode needs protobuf, which this python3 cannot import ({exc}): install "
                                  "python3-protobuf (the mixed-cpus-hook-nri-mode RPM requires it) or protobuf "
                                  "from PyPI", "nri") from None
        from ..node.config import load_config

        config = load_config(args.config, environ=env)
        return run_plugin(config, args.socket_path, args.plugin_name, args.plugin_index, args.reconcile_interval,
                          choose_plugin_reporter(reporter, env), environ=env, argv0=sys.argv[0] if sys.argv else "",
                          write_timeout=args.write_timeout, metrics_address=args.metrics_address)
    except HookError as exc:
        reporter.error(f"{exc.kind}: {exc}")
        return exc.exit_code
