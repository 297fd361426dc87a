"""The full command line (click): everything except the hook's own fast path.

``apply`` and ``release`` here run the same code as the fast path; they exist so that
``--help`` documents them and odd spellings of their options still work.
"""

from __future__ import annotations

import json
import os
import sys
from typing import Any, Dict, List, Optional, Tuple

import click

from ... import __version__
from ...core.errors import EXIT_OK, HookError
from ...node.config import Config, load_config
from ...node.log import Reporter
from ..hook.fastpath import FastArgs, run_hook
from ..nri_entry import DEFAULT_RECONCILE, DEFAULT_WRITE_TIMEOUT, RECONCILE_RANGE, WRITE_TIMEOUT_RANGE

CONTEXT = {"help_option_names": ["-h", "--help"], "max_content_width": 100}


class Ctx:
    def __init__(self, config_path: Optional[str], verbose: bool) -> None:
        self.config_path = config_path
        self.verbose = verbose
        self.reporter = Reporter(verbose=verbose)

    def config(self) -> Config:
        return load_config(self.config_path)


def _set_config(ctx: click.Context, _param: click.Parameter, value: Optional[str]) -> None:
    if value is not None:
        ctx.find_object(Ctx).config_path = value


def _set_verbose(ctx: click.Context, _param: click.Parameter, value: bool) -> None:
    if value:
        obj = ctx.find_object(Ctx)
        obj.verbose = obj.reporter.verbose = True


def global_options(config: bool = True) -> Any:
    """The group's --config and -v, accepted after the command's name as well ("status --config c.yaml")."""
    def decorate(f: Any) -> Any:
        if config:
            f = click.option("--config", "_config", metavar="PATH", expose_value=False, callback=_set_config,
                             help="The same as the global --config (before or after the command; here wins).")(f)
        return click.option("-v", "--verbose", "_verbose", is_flag=True, expose_value=False, callback=_set_verbose,
                            help="The same as the global -v.")(f)
    return decorate


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
    One node, one mode. Hook mode: CRI-O or podman runs `apply` at createRuntime and `release`
    at poststop (hooks.d), and systemd units run `reconcile` when kubelet rewrites a container.
    NRI mode: `nri`, a plugin for containerd and CRI-O, adjusts containers as they are created
    and rewrites kubelet's updates in flight. `status` shows every tracked container; `check`
    tells whether the node is ready.

    The global options may also follow the command's name (`status --config c.yaml`).

    \b
    Exit codes:
      0  success, nothing to do, or an error under failure_policy: ignore
      1  error (one line on stderr and in the journal, tag mixed-cpus-hook)
      2  usage error (a bad command line)
      3  status only: some container drifted (`reconcile` fixes it)
    """
    ctx.obj = Ctx(config_path, verbose)


@cli.command(context_settings=CONTEXT, short_help='createRuntime hook: run the container on exclusive + shared CPUs.')
@click.option("--state", "state_path", metavar="FILE", help="Read the OCI state from FILE instead of stdin.")
@click.option("--dry-run", is_flag=True, help="Print the planned writes; write nothing.")
@global_options()
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
@global_options()
@click.pass_obj
def release(obj: Ctx, state_path: Optional[str]) -> None:
    """poststop hook: give back the container's share of its pod's quota and forget it."""
    args = FastArgs()
    args.config, args.command, args.state, args.verbose = obj.config_path, "release", state_path, obj.verbose
    sys.exit(run_hook(args, reporter=obj.reporter))


@cli.command(context_settings=CONTEXT, short_help='Re-apply what kubelet rewrote (quiet when all is in sync).')
@click.option("--container", "container_id", metavar="ID",
              help="Only this container (any unique prefix of its id; unknown or ambiguous: exit 1).")
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
@global_options()
@click.pass_obj
def reconcile(obj: Ctx, container_id: Optional[str], dry_run: bool, settle: float, sync_watches: bool,
              why: Optional[str]) -> None:
    """Re-apply every tracked container whose cgroup no longer holds its mixed set.

    Writes nothing where all is in sync; prints one line per fix. Records of containers
    whose cgroup is gone are removed (and their pod's quota given back). A container that
    cannot be fixed (a broken record, a write the kernel refuses) is one error line on stderr
    and in the journal; every other container is still reconciled.

    \b
    Exit codes:
      0  every tracked container is as it should be (fixed or in sync)
      1  some container could not be fixed, or its record is broken
      2  usage error
    """
    from ...core.model import Outcome
    from ...node.facts import read_node_facts as read_node
    from ...usecases.reconcile import reconcile as run_reconcile
    from ..systemd.watches import sync

    if sync_watches and (dry_run or container_id):
        obj.reporter.error("usage error: --sync-watches goes with neither --dry-run nor --container")
        sys.exit(2)
    reason = f"reapplied ({why})" if why else "reapplied"
    try:
        config = obj.config()
        if container_id:
            from ...store.records import list_records

            container_id = compute_match_id(container_id, list_records(config.state_dir, "containers"))
        node = read_node(config)
        results = run_reconcile(config, obj.reporter, only=container_id, dry_run=dry_run, reason=reason,
                                settle=settle, node=node)
        if sync_watches:
            report = sync(config, obj.reporter, full=True, node=node)
            results = list(results) + [("-", Outcome("error", (line,))) for line in report.errors]
    except HookError as exc:
        _fail(obj, exc)
    if not dry_run:
        from ...usecases.metrics import update_metrics

        update_metrics(config, results, why or "manual", full=container_id is None, reporter=obj.reporter)
    failed = False
    for cid, outcome in results:
        if outcome.status in ("error", "broken"):  # already said on stderr and in the journal
            failed = True
            continue
        for line in outcome.lines:
            if line.startswith("/"):
                line = f"container {cid}: {'would write ' if dry_run else ''}{line}"
            click.echo(line)
    sys.exit(1 if failed else EXIT_OK)


@cli.group(context_settings=CONTEXT, short_help='Per-container watch units (run by the systemd units).')
@global_options()
def watches() -> None:
    """The per-container watch units (mixed-cpus-hook-watch@ID.path) that trigger reapplies.

    mixed-cpus-hook-sync.service keeps them in step with the records by itself; see the README,
    "Reapply (systemd units)".
    """


@watches.command("sync", context_settings=CONTEXT)
@click.option("--full", is_flag=True,
              help="Compare every record, link directory and loaded watch unit, not only the queued "
                   "containers (<state_dir>/pending/); restart watch units that failed.")
@global_options()
@click.pass_obj
def watches_sync(obj: Ctx, full: bool) -> None:
    """Start the watch unit of every new tracked container and stop those of gone ones.

    Prints one line per unit started or stopped and per container forgotten (cgroup gone).
    Exit 1 when systemctl or a record failed.
    """
    from ..systemd.watches import sync

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


EXIT_DRIFT = 3


@cli.command(context_settings=CONTEXT, short_help='Every tracked container: desired vs actual, in sync or not.')
@click.option("--json", "as_json", is_flag=True,
              help='Print one JSON object, every value whole: {"rows": [one object per container], "problems": '
                   '[the node\'s problems]}; the problems (and each row\'s that is not in sync) also go to stderr.')
@click.option("--wide", is_flag=True, help="Every column, nothing shortened (wider than 100 columns).")
@click.option("--container", "container_id", metavar="ID", help="Only this container (any unique prefix of its id).")
@global_options()
@click.pass_obj
def status(obj: Ctx, as_json: bool, wide: bool, container_id: Optional[str]) -> None:
    """Every tracked container: its cpuset and quotas, desired against actual.

    One line per container (short ids and names; --wide for every column, --json for whole
    values), then each container's problem and the node's problems once. A bad fact (a shared
    set, an unreadable cgroup, a broken record) is the problem of the rows it concerns: every
    container is still listed.

    \b
    Exit codes:
      0  every container is in sync
      1  error: a broken record, an unreadable fact, a node-wide problem, an unknown --container
      3  drift: some container differs from what it should be (`reconcile` fixes it)
    """
    from ...usecases.status import format_pool_lines, read_pool_report, read_status_report

    try:
        config = obj.config()
        rows, problems = read_status_report(config)
        pool = read_pool_report(config)
        if container_id:
            wanted = compute_match_id(container_id, [r.get("id", "") for r in rows])
            rows = [r for r in rows if r.get("id") == wanted]
    except HookError as exc:
        _fail(obj, exc)
    if as_json:
        doc: Dict[str, Any] = {"rows": rows, "problems": problems}
        if pool is not None:
            doc["pool"] = pool
        click.echo(json.dumps(doc, indent=2))
        # stdout is for programs: say on stderr too why the exit code is not 0 (not in the journal:
        # status only reads).
        quiet = Reporter(stream=obj.reporter.stream, sink=None)
        for problem in problems:
            quiet.error(problem)
        for r in rows:
            state = compute_row_state(r)
            if state != "ok":
                (quiet.error if state == "error" else quiet.warning)(
                    f"container {_cell(r.get('id'))[:12]}: {format_row_problem(r) or state}")
    else:
        click.echo(format_status_table(rows, problems, wide))
        if pool is not None:
            click.echo("\n".join(format_pool_lines(pool, wide)))
    code = compute_status_exit(rows, problems)
    if pool is not None and code == 0:
        code = 1 if pool["problem"] and pool["source"] == "kubelet" else 3 if pool["drift"] else 0
    sys.exit(code)


def compute_match_id(prefix: str, ids: List[str]) -> str:
    """The one id that ``prefix`` names: the id itself, or the only id starting with it."""
    from ...core.errors import UnknownContainerError

    if prefix in ids:
        return prefix
    found = sorted(i for i in ids if prefix and i.startswith(prefix))
    if len(found) == 1:
        return found[0]
    if not found:
        raise UnknownContainerError(f"no tracked container has an id starting with {prefix!r}", "--container")
    shown = ", ".join(i[:16] for i in found[:5]) + (", ..." if len(found) > 5 else "")
    raise UnknownContainerError(f"{prefix!r} is ambiguous: {len(found)} tracked containers start with it ({shown}); "
                                "give more of the id", "--container")


def compute_row_state(row: dict) -> str:
    """ok | drift (reconcile fixes it) | error, for one status row."""
    if row.get("in_sync") and not row.get("broken"):
        return "ok"
    problem = str(row.get("problem") or "")
    if not row.get("broken") and (row.get("drift") or problem.startswith(("cgroup gone", "release did not finish"))):
        return "drift"
    return "error"


def compute_status_exit(rows: List[dict], problems: List[str]) -> int:
    states = {compute_row_state(r) for r in rows}
    if problems or "error" in states:
        return 1
    return EXIT_DRIFT if "drift" in states else EXIT_OK


def _cell(value: object) -> str:
    """Never "None": a missing value is "-"."""
    if value is None or value == "" or value == []:
        return "-"
    if isinstance(value, bool):
        return "yes" if value else "no"
    return str(value)


def _short(text: str, width: int) -> str:
    """Cut in the middle, keeping both ends (ids and names differ at either end)."""
    if len(text) <= width:
        return text
    keep = width - 2
    return text[: (keep + 1) // 2] + ".." + text[len(text) - keep // 2:]


def _quota_cell(q: object) -> str:
    q = q if isinstance(q, dict) else {}
    have, want = _cell(q.get("actual")), _cell(q.get("desired"))
    return have if have == want or want == "-" else f"{have}!"


def _when(stamp: object) -> str:
    text = _cell(stamp)
    return text.replace("T", " ").rstrip("Z")[5:16] if len(text) >= 16 else text


NARROW = (("ID", 12), ("NAMESPACE/POD/CONTAINER", 28), ("MODE", 4), ("EXCL", 9), ("ACTUAL", 9), ("QUOTA", 7),
          ("POD QUOTA", 9), ("STATE", 5))
WIDE = ("ID", "MODE", "NAMESPACE", "POD", "CONTAINER", "CGROUP", "EXCLUSIVE", "SOURCE", "SHARED", "DESIRED",
        "ACTUAL", "QUOTA WANT/HAVE", "POD QUOTA WANT/HAVE", "STATE", "LAST REAPPLY", "PINS", "PROBLEM")


def _narrow_row(r: dict) -> List[str]:
    name = "/".join(_cell(r.get(k)) for k in ("namespace", "pod", "container"))
    state = compute_row_state(r)
    cells = [_cell(r.get("id"))[:12], name, _cell(r.get("mode")), _cell(r.get("exclusive")), _cell(r.get("actual")),
             _quota_cell(r.get("quota")), _quota_cell(r.get("pod_quota")), "ok" if state == "ok" else state.upper()]
    return [_short(c, w) for c, (_, w) in zip(cells, NARROW)]


def _wide_row(r: dict) -> List[str]:
    def pair(q: object) -> str:
        q = q if isinstance(q, dict) else {}
        return f"{_cell(q.get('desired'))}/{_cell(q.get('actual'))}"

    return [_cell(r.get("id")), _cell(r.get("mode")), _cell(r.get("namespace")), _cell(r.get("pod")),
            _cell(r.get("container")), _cell(r.get("cgroup")), _cell(r.get("exclusive")),
            _cell(r.get("exclusive_source")), _cell(r.get("shared")), _cell(r.get("desired")), _cell(r.get("actual")),
            pair(r.get("quota")), pair(r.get("pod_quota")), compute_row_state(r), _cell(r.get("last_reapply")),
            "maybe lost" if r.get("pins_maybe_lost") else "-", _cell(r.get("problem"))]


def format_row_problem(r: dict) -> str:
    """What is wrong with one row, in words: the drift's fields, the problem, lost pins."""
    parts = []
    drift = r.get("drift") or []
    if drift and not r.get("problem"):
        parts.append("; ".join(f"{d.get('field')} is {_cell(d.get('actual'))}, should be {_cell(d.get('desired'))}"
                               for d in drift if isinstance(d, dict)))
    if r.get("problem"):
        parts.append(str(r["problem"]))
    if r.get("pins_maybe_lost"):
        parts.append(f"thread pins may have been lost (reapplied at {_when(r.get('last_reapply'))} on a kernel that "
                     "widens them; `check` tells, NRI mode avoids it)")
    return "; ".join(p for p in parts if p)


def format_status_table(rows: List[dict], problems: Optional[List[str]] = None, wide: bool = False) -> str:
    """One line per container, then each row's problem (by short id), then the node's problems once."""
    lines = _format_container_lines(rows, wide) if rows else ["no tracked containers"]
    if problems:
        lines.append("node problems:")
        lines += [_wrap(f"  {p}") for p in problems]
    return "\n".join(lines)


def _format_container_lines(rows: List[dict], wide: bool) -> List[str]:
    """The table's lines; the narrow table is followed by the shared CPUs and each row's problem."""
    head = list(WIDE) if wide else [h for h, _ in NARROW]
    table = [head] + [_wide_row(r) if wide else _narrow_row(r) for r in rows]
    widths = [max(len(row[i]) for row in table) for i in range(len(head))]
    lines = ["  ".join(c.ljust(w) for c, w in zip(row, widths)).rstrip() for row in table]
    if wide:
        return lines
    shared = sorted({_cell(r.get("shared")) for r in rows} - {"-"})
    if shared:
        lines.append(f"shared CPUs: {', '.join(shared)}")
    per_row = [(r, format_row_problem(r)) for r in rows]
    per_row = [(r, p) for r, p in per_row if p]
    if per_row:
        lines.append("problems:")
        lines += [_wrap(f"  {_cell(r.get('id'))[:12]}: {p}") for r, p in per_row]
    return lines


def _wrap(text: str, width: int = 100) -> str:
    import textwrap

    return "\n".join(textwrap.wrap(text, width, subsequent_indent="      ", break_long_words=False,
                                   break_on_hyphens=False)) or text


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
@click.option("--containerd-config", metavar="FILE",
              help="containerd's configuration. Default: containerd's --config, else /etc/containerd/config.toml.")
@click.option("--nri-socket", metavar="PATH",
              help="The runtime's NRI socket. Default: containerd's socket_path or CRI-O's nri_listen, else "
                   "/var/run/nri/nri.sock.")
@click.option("--hooks-dir", "hooks_dirs", metavar="DIR", multiple=True,
              help="Look for the hooks.d files here instead of CRI-O's hooks_dir (repeatable).")
@click.option("--preset", metavar="FILE", default=None,
              help="The systemd preset naming the units to check. Default: the installed mode's, "
                   "/usr/lib/systemd/system-preset/90-mixed-cpus-hook.preset (hook mode) or "
                   "90-mixed-cpus-hook-nri.preset (NRI mode).")
@click.option("--systemctl", metavar="PATH",
              help="Query units with this systemctl (also when systemd is not PID 1 here).")
@click.option("--no-systemd", is_flag=True, help="Do not check the units (reported as a warning).")
@click.option("--no-detect", is_flag=True,
              help="Do not read the running kubelet's, crio's and containerd's command lines for their paths.")
@click.option("--no-probe", is_flag=True,
              help="Skip the thread-affinity probe: it makes (and removes) a scratch cgroup with a child process "
                   "under the cgroup root, and writes its verdict to <state_dir>/thread-affinity (read by `status`).")
@global_options()
@click.pass_obj
def check(obj: Ctx, as_json: bool, kubelet_config: Optional[str], kubelet_state: Optional[str],
          crio_config: Optional[str], crio_config_dir: Optional[str], containerd_config: Optional[str],
          nri_socket: Optional[str], hooks_dirs: tuple, preset: Optional[str], systemctl: Optional[str],
          no_systemd: bool, no_detect: bool, no_probe: bool) -> None:
    """The node doctor: is this node ready for mixed CPUs? Each finding comes with its fix.

    Checks the configuration; that the shared CPUs are online and not isolated (isolcpus);
    kubelet's CPU manager (policy static, reservedSystemCPUs covering the shared CPUs, no
    exclusive assignment in cpu_manager_state on a shared CPU); the runtime kubelet uses
    (CRI-O or containerd); the mode (hook mode: CRI-O's hooks_dir holds the apply and release
    files; NRI mode: the plugin's unit runs and the runtime serves NRI; never both); that the
    units are enabled and active; the cgroup version and both drivers. With shared_cpus: pool:
    NRI mode (hook mode is refused), kubelet's CPU manager for the exclusive source (none
    beside the CPU DRA driver, static with reservedSystemCPUs = reserved_cpus), and whether a
    claim anywhere resets thread pins (kernels before 6.2). Another NRI plugin that pins CPUs
    (in the runtime's plugin dir, or running): NRI refuses a container two plugins pin.

    It writes two things, both only as root on a real node (--no-probe: neither): the
    thread-affinity probe makes a scratch cgroup under the cgroup root with a child process
    in it, and removes both; its verdict goes to <state_dir>/thread-affinity. The report
    names both.

    Exit 0 when nothing is an error (warnings allowed), 1 otherwise.
    """
    from ...ops.doctor import Paths, compute_findings, format_table, read_facts, to_json, worst

    paths = Paths(config=obj.config_path, kubelet_config=kubelet_config, kubelet_state=kubelet_state,
                  crio_config=crio_config, crio_config_dir=crio_config_dir, hooks_dirs=tuple(hooks_dirs),
                  preset=preset, systemctl=systemctl, skip_units=no_systemd, detect=not no_detect,
                  containerd_config=containerd_config, nri_socket=nri_socket, probe=not no_probe)
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
@click.option("--no-image", "no_image", is_flag=True,
              help="Also lay down the code, for RHCOS without a custom image: the hook's standard-library-only "
                   "modules and executables under /usr/local, the hooks.d files in /etc/containers/oci/hooks.d, "
                   "the units in /etc/systemd/system, the configuration as JSON (no click or PyYAML on the node).")
@click.option("--mode", type=click.Choice(["hook", "nri"]), default="hook", show_default=True,
              help="hook: CRI-O runs the hook (hooks.d) and the hook-mode units are enabled; nri: CRI-O's NRI "
                   "enabled (a crio.conf.d drop-in) and the NRI plugin's unit instead (docs/nri.md). One node, one "
                   "mode: the image layers that mode's RPM (nri: mixed-cpus-hook-nri-mode, python3-protobuf).")
@click.option("-o", "--output", type=click.Choice(["yaml", "json"]), default="yaml", show_default=True,
              help="Output format.")
@global_options(config=False)
@click.pass_obj
def machineconfig(obj: Ctx, role: str, shared_cpus: str, mc_config: Optional[str], name: Optional[str],
                  preset: Optional[str], allow_namespace: Tuple[str, ...], no_image: bool, mode: str,
                  output: str) -> None:
    """Print an OpenShift MachineConfig (Ignition 3.2) that configures the hook on a role's nodes.

    It writes /etc/mixed-cpus-hook/config.yaml and the shared-CPU file and enables the units;
    the RPM (layered into the RHCOS image) brings the code, or with --no-image the MachineConfig
    brings it too. Apply it with `oc apply -f -`, and put the same CPUs into kubelet's
    reservedSystemCPUs (see docs/openshift.md).
    """
    from ...core.errors import UsageError
    from ...ops.machineconfig import DEFAULT_UNITS, compute_machineconfig, mc_allowed_namespaces, parse_preset, render

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
        if no_image and mode == "nri":
            raise UsageError("NRI mode needs python3-protobuf, which RHCOS does not ship: layer the RPM into the "
                             "image instead of --no-image", "--mode nri")
        if no_image:
            from ...ops.machineconfig import compute_noimage_machineconfig, read_noimage_files

            mc = compute_noimage_machineconfig(role, shared_cpus, *read_noimage_files(), config_text=text,
                                               config_where=source or "--config", enabled=units, name=name,
                                               allowed_namespaces=allow_namespace)
        else:
            mc = compute_machineconfig(role, shared_cpus, config_text=text, config_where=source or "--config",
                                       units=units, name=name, allowed_namespaces=allow_namespace)
        if mode == "nri":
            from ...ops.machineconfig import compute_nri_mode

            mc = compute_nri_mode(mc)
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
@click.option("--reconcile-interval", type=click.FloatRange(*RECONCILE_RANGE), default=DEFAULT_RECONCILE,
              show_default=True,
              metavar="SECONDS", help="Re-apply every tracked container this often (kubelet rewrites pod quotas "
                                      "directly); 0: never.")
@click.option("--write-timeout", type=click.FloatRange(*WRITE_TIMEOUT_RANGE), default=DEFAULT_WRITE_TIMEOUT,
              show_default=True,
              metavar="SECONDS", help="Drop the connection when the runtime reads none of the plugin's answers for "
                                      "this long (the plugin then reconnects).")
@click.option("--metrics-address", metavar="HOST:PORT",
              help="Serve /metrics (Prometheus text) and /healthz (503 while not registered with the runtime) "
                   "over HTTP there, e.g. 127.0.0.1:9470 or :9470 (every interface). Default: off.")
@global_options()
@click.pass_obj
def nri(obj: Ctx, socket_path: Optional[str], name: Optional[str], index: Optional[str],
        reconcile_interval: float, write_timeout: float, metrics_address: Optional[str]) -> None:
    """Run the NRI plugin: mixed CPUs at CreateContainer, kubelet's updates rewritten in flight.

    Registers with the runtime, answers CreateContainer (cpuset exclusive + shared, quota,
    OPENSHIFT_ISOLATED_CPUS / OPENSHIFT_SHARED_CPUS), UpdateContainer (kubelet's rewrite keeps
    the mixed set and the raised quota), Stop/RemoveContainer (the pod's share given back) and
    Synchronize (containers created before it connected). Reconnects with backoff when the
    runtime goes away. Stops on SIGTERM or SIGINT.
    """
    from ..nri_entry import NriArgs, run_nri  # the start `mixed-cpus-hook nri` makes without click too

    sys.exit(run_nri(NriArgs(obj.config_path, obj.verbose, socket_path, name, index, reconcile_interval,
                             write_timeout, metrics_address), obj.reporter))


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
