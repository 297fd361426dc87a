"""The full command line (click): everything except the hook's own fast path.

``apply`` and ``release`` here run the same code as the fast path; they exist so that
``--help`` documents them and odd spellings of their options still work.
"""

from __future__ import annotations

import json
import os
import sys
from typing import List, Optional, Tuple

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


def _fail(ctx: Ctx, exc: HookError) -> None:
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


@cli.command(context_settings=CONTEXT, short_help='createRuntime hook: run the container on exclusive + shared CPUs.')
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


@cli.command(context_settings=CONTEXT, short_help="poststop hook: give back the pod's quota share, forget the container.")
@click.option("--state", "state_path", metavar="FILE", help="Read the OCI state from FILE instead of stdin.")
@click.pass_obj
def release(obj: Ctx, state_path: Optional[str]) -> None:
    """poststop hook: give back the container's share of its pod's quota and forget it."""
    args = FastArgs()
    args.config, args.command, args.state, args.verbose = obj.config_path, "release", state_path, obj.verbose
    sys.exit(run_hook(args, reporter=obj.reporter))


@cli.command(context_settings=CONTEXT, short_help='Re-apply what kubelet rewrote (quiet when all is in sync).')
@click.option("--container", "container_id", metavar="ID", help="Only this container.")
@click.option("--dry-run", is_flag=True, help="Print the planned writes; write nothing.")
@click.option("--settle", type=click.FloatRange(0, 10), default=0.0, metavar="SECONDS",
              help="With --container: re-read its files for SECONDS after the pass and fix again what "
                   "changes meanwhile (what the watch units' service does). Default: 0.")
@click.option("--sync-watches", is_flag=True,
              help="Afterwards start a watch unit (mixed-cpus-hook-watch@ID.path) for every tracked container "
                   "and stop the others (what the start-up service and the timer run).")
@click.option("--why", metavar="TEXT",
              help="The reason the journal gives for each fix (\"reapplied (TEXT): FILE: OLD -> NEW ...\"), "
                   "e.g. what started this run.")
@click.pass_obj
def reconcile(obj: Ctx, container_id: Optional[str], dry_run: bool, settle: float, sync_watches: bool,
              why: Optional[str]) -> None:
    """Re-apply every tracked container whose cgroup no longer holds its mixed set.

    Writes nothing where all is in sync; prints one line per fix. Records of containers
    whose cgroup is gone are removed (and their pod's quota given back).
    """
    from .engine import Outcome, read_node
    from .engine import reconcile as run_reconcile
    from .watches import sync

    if sync_watches and (dry_run or container_id):
        obj.reporter.error("usage error: --sync-watches goes with neither --dry-run nor --container")
        sys.exit(2)
    reason = f"reapplied ({why})" if why else "reapplied"
    try:
        config = obj.config()
        node = read_node(config)
        results = run_reconcile(config, obj.reporter, only=container_id, dry_run=dry_run, reason=reason,
                                settle=settle, node=node)
        if sync_watches:
            report = sync(config, obj.reporter, full=True, node=node)
            results = list(results) + [("-", Outcome("error", (line,))) for line in report.errors]
    except HookError as exc:
        _fail(obj, exc)
    if not dry_run:
        from .metrics import update_metrics

        update_metrics(config, results, why or "manual", full=container_id is None, reporter=obj.reporter)
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


@cli.group(context_settings=CONTEXT, short_help='Per-container watch units (run by the systemd units).')
def watches() -> None:
    """The per-container watch units (mixed-cpus-hook-watch@ID.path) that trigger reapplies.

    mixed-cpus-hook-sync.service keeps them in step with the records by itself; see the README,
    "Reapply (systemd units)".
    """


@watches.command("sync", context_settings=CONTEXT)
@click.option("--full", is_flag=True,
              help="Compare every record, link directory and loaded watch unit, not only the queued "
                   "containers (<state_dir>/pending/); restart watch units that failed.")
@click.pass_obj
def watches_sync(obj: Ctx, full: bool) -> None:
    """Start the watch unit of every new tracked container and stop those of gone ones.

    Prints one line per unit started or stopped and per container forgotten (cgroup gone).
    Exit 1 when systemctl or a record failed.
    """
    from .watches import sync

    try:
        report = sync(obj.config(), obj.reporter, full=full)
    except HookError as exc:
        _fail(obj, exc)
    for what, ids in (("watching", report.started), ("restarted a failed watch of", report.restarted),
                      ("stopped watching", report.stopped)):
        for cid in ids:
            click.echo(f"{what} container {cid}")
    for cid in report.forgotten:
        click.echo(f"container {cid}: cgroup gone, forgotten")
    sys.exit(1 if report.errors else EXIT_OK)


@cli.command(context_settings=CONTEXT, short_help='Every tracked container: desired vs actual, in sync or not.')
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


@cli.command(context_settings=CONTEXT, short_help='Node doctor: config, shared CPUs, kubelet, CRI-O, units, cgroups.')
@click.option("--json", "as_json", is_flag=True, help="Print a JSON list of findings.")
@click.option("--kubelet-config", metavar="FILE",
              help="kubelet's KubeletConfiguration. Default: kubelet's --config, else /etc/kubernetes/kubelet.conf "
                   "or /var/lib/kubelet/config.yaml.")
@click.option("--kubelet-state", metavar="FILE",
              help="The CPU manager's state. Default: <kubelet --root-dir>/cpu_manager_state, "
                   "/var/lib/kubelet/cpu_manager_state.")
@click.option("--crio-config", metavar="FILE", help="CRI-O's main file. Default: crio's --config, else /etc/crio/crio.conf.")
@click.option("--crio-config-dir", metavar="DIR",
              help="CRI-O's drop-in directory. Default: crio's --config-dir, else /etc/crio/crio.conf.d.")
@click.option("--hooks-dir", "hooks_dirs", metavar="DIR", multiple=True,
              help="Look for the hooks.d files here instead of CRI-O's hooks_dir (repeatable).")
@click.option("--preset", metavar="FILE", default=None,
              help="The systemd preset naming the units to check. Default: the installed "
                   "/usr/lib/systemd/system-preset/90-mixed-cpus-hook.preset.")
@click.option("--systemctl", metavar="PATH",
              help="Query units with this systemctl (also when systemd is not PID 1 here).")
@click.option("--no-systemd", is_flag=True, help="Do not check the units (reported as a warning).")
@click.option("--no-detect", is_flag=True,
              help="Do not read the running kubelet's and crio's command lines for their paths.")
@click.pass_obj
def check(obj: Ctx, as_json: bool, kubelet_config: Optional[str], kubelet_state: Optional[str],
          crio_config: Optional[str], crio_config_dir: Optional[str], hooks_dirs: tuple, preset: Optional[str],
          systemctl: Optional[str], no_systemd: bool, no_detect: bool) -> None:
    """The node doctor: is this node ready for mixed CPUs? Each finding comes with its fix.

    Checks the configuration; that the shared CPUs are online and not isolated (isolcpus);
    kubelet's CPU manager (policy static, reservedSystemCPUs covering the shared CPUs, no
    exclusive assignment in cpu_manager_state on a shared CPU); that CRI-O's hooks_dir holds the
    hook's apply and release files; that the units are enabled and active; the cgroup version
    and driver. Exit 0 when nothing is an error (warnings allowed), 1 otherwise.
    """
    from .doctor import PRESET_PATH, Paths, compute_findings, format_table, read_facts, to_json, worst

    paths = Paths(config=obj.config_path, kubelet_config=kubelet_config, kubelet_state=kubelet_state,
                  crio_config=crio_config, crio_config_dir=crio_config_dir, hooks_dirs=tuple(hooks_dirs),
                  preset=preset or PRESET_PATH, systemctl=systemctl, skip_units=no_systemd, detect=not no_detect)
    findings = compute_findings(read_facts(paths))
    if as_json:
        click.echo(json.dumps(to_json(findings), indent=2))
    else:
        click.echo(format_table(findings))
    sys.exit(1 if worst(findings) == "error" else EXIT_OK)


@cli.command(context_settings=CONTEXT, short_help='Print an OpenShift MachineConfig for a node role.')
@click.option("--role", required=True, metavar="ROLE",
              help="The MachineConfigPool role (worker, or a custom pool such as worker-cnf).")
@click.option("--shared-cpus", required=True, metavar="CPULIST", help="The nodes' shared CPUs, e.g. 2-3.")
@click.option("--config", "mc_config", metavar="FILE",
              help="The hook configuration to lay down. Default: a comments-only file (every default).")
@click.option("--name", metavar="NAME", help="The MachineConfig's name. Default: 99-<role>-mixed-cpus-hook.")
@click.option("--preset", metavar="FILE",
              help="Enable the units this systemd preset enables. Default: the units the RPM's preset enables.")
@click.option("--allow-namespace", "allow_namespace", multiple=True, metavar="GLOB",
              help="A namespace (shell glob) whose pods may ask; repeat for more. Without one (and without "
                   "allowed_namespaces in --config) no pod may ask.")
@click.option("-o", "--output", type=click.Choice(["yaml", "json"]), default="yaml", show_default=True,
              help="Output format.")
@click.pass_obj
def machineconfig(obj: Ctx, role: str, shared_cpus: str, mc_config: Optional[str], name: Optional[str],
                  preset: Optional[str], allow_namespace: Tuple[str, ...], output: str) -> None:
    """Print an OpenShift MachineConfig (Ignition 3.2) that configures the hook on a role's nodes.

    It writes /etc/mixed-cpus-hook/config.yaml and the shared-CPU file and enables the units;
    the RPM (layered into the RHCOS image) brings the code. Apply it with `oc apply -f -`, and
    put the same CPUs into kubelet's reservedSystemCPUs (see docs/openshift.md).
    """
    from .errors import UsageError
    from .machineconfig import DEFAULT_UNITS, compute_machineconfig, mc_allowed_namespaces, parse_preset, render

    source = mc_config or obj.config_path
    try:
        text = None
        if source:
            try:
                with open(source, encoding="utf-8") as f:
                    text = f.read()
            except (OSError, UnicodeDecodeError) as exc:
                raise UsageError(f"cannot read: {getattr(exc, 'strerror', None) or exc}", source) from None
        units = list(DEFAULT_UNITS)
        if preset:
            try:
                with open(preset, encoding="utf-8") as f:
                    units = parse_preset(f.read())
            except (OSError, UnicodeDecodeError) as exc:
                raise UsageError(f"cannot read: {getattr(exc, 'strerror', None) or exc}", preset) from None
        mc = compute_machineconfig(role, shared_cpus, config_text=text, config_where=source or "--config",
                                   units=units, name=name, allowed_namespaces=allow_namespace)
    except HookError as exc:
        _fail(obj, exc)
    if not mc_allowed_namespaces(mc):
        obj.reporter.warning("the configuration lists no allowed_namespaces: no pod may ask for mixed CPUs "
                             "(add --allow-namespace GLOB)")
    click.echo(render(mc, output), nl=False)

@cli.command(context_settings=CONTEXT, short_help="NRI plugin for containerd and CRI-O (runs in the foreground).")
@click.option("--socket", "socket_path", metavar="PATH",
              help="The runtime's NRI socket. Default: the pre-connected socket in $NRI_PLUGIN_SOCKET when the "
                   "runtime launched the plugin, else /var/run/nri/nri.sock.")
@click.option("--name", metavar="NAME",
              help="Plugin name. Default: $NRI_PLUGIN_NAME, else from an NN-name executable, else mixed-cpus-hook.")
@click.option("--index", metavar="NN",
              help="Plugin index (two digits; plugins are called in ascending order). Default: $NRI_PLUGIN_IDX, "
                   "else from an NN-name executable, else 10.")
@click.option("--reconcile-interval", type=click.FloatRange(0, 86400), default=10.0, show_default=True,
              metavar="SECONDS", help="Re-apply every tracked container this often (kubelet rewrites pod quotas "
                                      "directly); 0: never.")
@click.pass_obj
def nri(obj: Ctx, socket_path: Optional[str], name: Optional[str], index: Optional[str],
        reconcile_interval: float) -> None:
    """Run the NRI plugin: mixed CPUs at CreateContainer, kubelet's updates rewritten in flight.

    Registers with the runtime, answers CreateContainer (cpuset exclusive + shared, quota,
    OPENSHIFT_ISOLATED_CPUS / OPENSHIFT_SHARED_CPUS), UpdateContainer (kubelet's rewrite keeps
    the mixed set and the raised quota), Stop/RemoveContainer (the pod's share given back) and
    Synchronize (containers created before it connected). Reconnects with backoff when the
    runtime goes away. Stops on SIGTERM or SIGINT.
    """
    from .nri.plugin import main as run_plugin

    reporter = obj.reporter
    if os.environ.get("JOURNAL_STREAM"):  # under systemd stderr is the journal: log there once
        reporter = Reporter(sink=None, verbose=True)
    try:
        code = run_plugin(obj.config(), socket_path, name, index, reconcile_interval, reporter,
                          argv0=sys.argv[0] if sys.argv else "")
    except HookError as exc:
        _fail(obj, exc)
    sys.exit(code)


def main(argv: Optional[List[str]] = None) -> int:
    """Run click without letting it call sys.exit, so callers get the exit code."""
    if not argv and os.environ.get("NRI_PLUGIN_SOCKET"):
        argv = ["nri"]  # started by the runtime as a pre-installed plugin (/opt/nri/plugins/NN-name)
    try:
        cli.main(args=argv, prog_name="mixed-cpus-hook", standalone_mode=True)
    except SystemExit as exc:
        code = exc.code
        return code if isinstance(code, int) else (0 if code is None else 1)
    return EXIT_OK
