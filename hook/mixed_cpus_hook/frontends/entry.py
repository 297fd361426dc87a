"""The ``mixed-cpus-hook`` executable: the hook's fast path when the command line is one, the NRI
plugin when it is ``nri`` with plain options, else the CLI.

CRI-O runs this on every start of an asking container: only the fast path's modules load
for ``apply`` and ``release`` (standard library only). The NRI plugin is a resident process, so
it starts without click too (nri_entry: click would stay in its memory). Any other command hands
over to the click command line, imported then.
"""

from __future__ import annotations

import os
import sys

from .hook.fastpath import parse_fast_args, run_hook

TYPE_CHECKING = False
if TYPE_CHECKING:  # typing costs milliseconds on every container start
    from typing import List, Optional


def main(argv: Optional[List[str]] = None) -> int:
    """Entry point: the fast path when it applies, else the full CLI."""
    args_list = sys.argv[1:] if argv is None else argv
    fast = parse_fast_args(args_list)
    if fast is not None:
        return run_hook(fast)
    # Only a command line that may be `nri` imports nri_entry: the no-image MachineConfig lays none
    # down, and every other command there says that it needs the RPM, as before.
    if "nri" in args_list or (not args_list and os.environ.get("NRI_PLUGIN_SOCKET")):
        from . import nri_entry

        plugin = nri_entry.parse_nri_args(args_list)
        if plugin is not None:
            from ..node.log import Reporter

            return nri_entry.run_nri(plugin, Reporter(verbose=plugin.verbose))
    from .cli.main import main as cli_main

    return cli_main(args_list)


def entry() -> None:
    code = main()
    if parse_fast_args(sys.argv[1:]) is not None:
        _exit_now(code)
    sys.exit(code)


def _exit_now(code: int) -> None:
    """End a hook process without the interpreter's teardown (freeing every module and object).

    The teardown costs a runtime waiting on a container start milliseconds, for nothing:
    this does what shutdown does that anyone can see (flush stdout and stderr, exit with the
    code) and skips the rest. It returns, and sys.exit does the usual shutdown, whenever
    skipping could be seen: an atexit callback, a tracer or profiler (coverage, cProfile),
    another thread, -i or -X dev, or a flush that fails (shutdown then reports it as usual).
    """
    import os

    # Registering an atexit callback takes importing atexit: when nobody did, there is none.
    atexit = sys.modules.get("atexit")
    if ((atexit is not None and getattr(atexit, "_ncallbacks", lambda: 1)()) or sys.gettrace() is not None
            or sys.getprofile() is not None or "threading" in sys.modules or sys.flags.inspect or sys.flags.dev_mode
            or type(code) is not int):
        return
    try:
        sys.stdout.flush()
        sys.stderr.flush()
    except Exception:  # noqa: BLE001 - sys.exit's shutdown flushes again and reports it its own way
        return
    os._exit(code)
