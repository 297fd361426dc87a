"""The full command line (click): everything except the hook's own fast path.

``apply`` and ``release`` here run the same code as the fast path; they exist so that
``--help`` documents them and odd spellings of their options still work.
"""

from __future__ import annotations

import json
import sys
from typing import List, Optional

import click

from . import __version__
from .config import Config, load_config
from .errors import EXIT_OK, HookError
from .fastpath import FastArgs, run_hook
from .log import Reporter

CONTEXT = {"help_option_names": ["-h", "--help"], "max_content_width": 100}


class Ctx:
    def __init__(self, config_path: Optional[str], verbose: bool) -> None:
        self.config_path = config_path
        self.verbose = verbose
        self.reporter = Reporter(verbose=verbose)

    def config(self) -> Config:
        return load_config(self.config_path)


def _fail(ctx: Ctx, exc: HookError, config: Optional[Config] = None) -> None:
    ctx.reporter.error(f"{exc.kind}: {exc}")
    sys.exit(exc.exit_code)


@click.group(context_settings=CONTEXT)
@click.option("--config", "config_path", metavar="PATH",
              help="Configuration file. Default: $MIXED_CPUS_HOOK_CONFIG, else /etc/mixed-cpus-hook/config.yaml "
                   "(a missing default file means built-in defaults).")
@click.option("-v", "--verbose", is_flag=True, help="Also print informational messages on stderr.")
@click.version_option(__version__, prog_name="mixed-cpus-hook")
@click.pass_context
def cli(ctx: click.Context, config_path: Optional[str], verbose: bool) -> None:
    """Give Kubernetes containers their exclusive CPUs plus the node's shared CPUs.

    A pod asks with the annotation mixed-cpus.openshift.io/<container-name>: "enable".
    CRI-O runs `apply` at createRuntime and `release` at poststop (see hooks.d);
    `reconcile` re-applies what kubelet rewrote; `status` shows every tracked container.

    Exit codes: 0 success (or nothing to do, or failure_policy: ignore), 1 error, 2 usage error.
    Errors are one line on stderr and in the journal (tag mixed-cpus-hook).
    """
    ctx.obj = Ctx(config_path, verbose)


@cli.command(context_settings=CONTEXT)
@click.option("--state", "state_path", metavar="FILE", help="Read the OCI state from FILE instead of stdin.")
@click.option("--dry-run", is_flag=True, help="Print the planned writes; write nothing.")
@click.pass_obj
def apply(obj: Ctx, state_path: Optional[str], dry_run: bool) -> None:
    """createRuntime hook: apply exclusive + shared CPUs and raise CFS quotas.

    Reads the OCI state JSON (stdin, or --state FILE) and <bundle>/config.json. A container
    that does not ask exits 0 at once; one without exclusive CPUs exits 0 with a warning.
    """
    args = FastArgs()
    args.config, args.command, args.state, args.dry_run, args.verbose = (
        obj.config_path, "apply", state_path, dry_run, obj.verbose)
    sys.exit(run_hook(args, reporter=obj.reporter))


@cli.command(context_settings=CONTEXT)
@click.option("--state", "state_path", metavar="FILE", help="Read the OCI state from FILE instead of stdin.")
@click.pass_obj
def release(obj: Ctx, state_path: Optional[str]) -> None:
    """poststop hook: give back the container's share of its pod's quota and forget it."""
    args = FastArgs()
    args.config, args.command, args.state, args.verbose = obj.config_path, "release", state_path, obj.verbose
    sys.exit(run_hook(args, reporter=obj.reporter))


@cli.command(context_settings=CONTEXT)
@click.option("--container", "container_id", metavar="ID", help="Only this container.")
@click.option("--dry-run", is_flag=True, help="Print the planned writes; write nothing.")
@click.pass_obj
def reconcile(obj: Ctx, container_id: Optional[str], dry_run: bool) -> None:
    """Re-apply every tracked container whose cgroup no longer holds its mixed set.

    Writes nothing where all is in sync; prints one line per fix. Records of containers
    whose cgroup is gone are removed (and their pod's quota given back).
    """
    from .engine import reconcile as run_reconcile

    try:
        results = run_reconcile(obj.config(), obj.reporter, only=container_id, dry_run=dry_run)
    except HookError as exc:
        _fail(obj, exc)
    failed = False
    for cid, outcome in results:
        if outcome.status == "error":
            failed = True
            continue
        for line in outcome.lines:
            if line.startswith("/"):
                line = f"container {cid}: {'would write ' if dry_run else ''}{line}"
            click.echo(line)
    sys.exit(1 if failed else EXIT_OK)


@cli.command(context_settings=CONTEXT)
@click.option("--json", "as_json", is_flag=True, help="Print a JSON list of objects.")
@click.pass_obj
def status(obj: Ctx, as_json: bool) -> None:
    """Every tracked container: ids, cgroup, exclusive/shared/desired/actual cpuset, quotas, in sync?

    Exit 0 when all are in sync, 1 when any is not (or on error).
    """
    from .engine import read_status

    try:
        rows = read_status(obj.config())
    except HookError as exc:
        _fail(obj, exc)
    if as_json:
        click.echo(json.dumps(rows, indent=2))
    else:
        click.echo(format_status_table(rows))
    sys.exit(EXIT_OK if all(r["in_sync"] for r in rows) else 1)


def format_status_table(rows: List[dict]) -> str:
    """A fixed-width table, one row per container; problems on their own line below."""
    if not rows:
        return "no tracked containers"
    head = ("ID", "NAMESPACE/POD/CONTAINER", "EXCL", "SHARED", "DESIRED", "ACTUAL", "QUOTA(want/have)",
            "POD QUOTA", "SYNC")
    table = [head]
    for r in rows:
        table.append((
            r["id"][:13], f"{r['namespace']}/{r['pod']}/{r['container']}", r["exclusive"], r["shared"],
            r["desired"], r["actual"] or "-", f"{r['quota']['desired']}/{r['quota']['actual']}",
            f"{r['pod_quota']['desired']}/{r['pod_quota']['actual']}", "yes" if r["in_sync"] else "NO",
        ))
    widths = [max(len(str(row[i])) for row in table) for i in range(len(head))]
    lines = ["  ".join(str(c).ljust(w) for c, w in zip(row, widths)).rstrip() for row in table]
    for r in rows:
        lines.append(f"  {r['id']}: cgroup {r['cgroup']}")
        if r["problem"]:
            lines.append(f"  {r['id']}: {r['problem']}")
    return "\n".join(lines)


@cli.command(context_settings=CONTEXT)
@click.pass_obj
def check(obj: Ctx) -> None:
    """Validate the configuration and the shared CPUs against this node."""
    from .engine import read_node

    try:
        config = obj.config()
        node = read_node(config)
    except HookError as exc:
        _fail(obj, exc)
    from .cpuset import format_cpulist

    click.echo(f"config: {config.source}: valid")
    click.echo(f"shared CPUs: {format_cpulist(node.shared)} (from {node.shared_where}), online")
    click.echo(f"cgroup: v{node.layout.version} at {node.layout.root}")


def main(argv: Optional[List[str]] = None) -> int:
    """Run click without letting it call sys.exit, so callers get the exit code."""
    try:
        cli.main(args=argv, prog_name="mixed-cpus-hook", standalone_mode=True)
    except SystemExit as exc:
        code = exc.code
        return code if isinstance(code, int) else (0 if code is None else 1)
    return EXIT_OK
