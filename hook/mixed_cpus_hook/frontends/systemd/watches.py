"""Per-container watch units: keep a systemd path unit on every tracked container's cgroup.

How reapply works (units in ``rpm/units/``; README "Reapply (systemd units)"):

* ``apply`` saves the record, then drops an empty file ``<state_dir>/pending/<id>``
  (``records.mark_pending``); ``release`` and the garbage collection do the same after
  removing a record. Nothing on the hook's path talks to systemd.
* ``mixed-cpus-hook-sync.path`` (``DirectoryNotEmpty=/run/mixed-cpus-hook/pending``, level
  triggered: it fires again as long as a mark is left) starts ``mixed-cpus-hook-sync.service``,
  which runs :func:`sync`: each mark is removed, then the container's record decides. A live
  record gets ``<state_dir>/watch/<id>/{cpus,quota,pod-quota}``, symlinks to its
  ``cpuset.cpus``, its quota file and its pod's (``cpu.cfs_quota_us`` on v1, ``cpu.max`` on
  v2), and a started watch unit for each: ``mixed-cpus-hook-watch@<id>.path``,
  ``mixed-cpus-hook-watch-quota@<id>.path``, ``mixed-cpus-hook-watch-pod@<id>.path``; a
  record that is gone (or whose cgroup is gone: it is forgotten here) gets its units stopped
  and its links removed.
* Each watch unit watches one link (systemd watches a symlink's target too) and starts
  ``mixed-cpus-hook-reconcile@<id>.service``: :func:`reconcile_container`, which reapplies
  this one container, reading only its own record and its pod's, then settles. One unit per
  file rather than one unit with three paths: when a path unit starts its service it closes
  one inotify instance per path, and each close waits for an RCU grace period (8-20 ms
  measured here), on the way from the rewrite to the restore.
* A path unit stops watching while its service runs, and a trigger from one of the other two
  units of the container while that service runs merges into it: a write that lands after the
  reapply's last read would be lost. So every watch-triggered reapply ends by marking the
  container in ``<state_dir>/recheck/``; the sync (the same path unit, also level-triggered)
  then reads it once more, after the watch units are watching again (starting the sync takes
  tens of milliseconds; the reapply's process has long exited), and fixes what it finds.
  Within the reapply, a settle (re-reading for 0.1 s) catches the quick second write sooner.
* The timer, the configuration path unit and the start-up service run ``reconcile
  --sync-watches``: every record is reconciled (stale ones dropped), then :func:`sync` with
  ``full=True`` compares records, link directories and the loaded watch units.

The command line ``python -m mixed_cpus_hook.frontends.systemd.watches`` (:func:`main`) is what the two
latency-sensitive services run: standard library only, no click (whose import alone costs
more than the whole reapply).
"""

from __future__ import annotations

import fcntl
import os
import sys

from ...core.errors import EXIT_OK, EXIT_USAGE, HookError, RecordError, SystemdError, UsageError
from ...node.config import load_config
from ...node.log import Reporter
from ...store.records import PENDING, RECHECK, list_records, load_container, mark_pending, watchable

TYPE_CHECKING = False
if TYPE_CHECKING:  # typing costs milliseconds on every start of the reconcile service
    from typing import Any, Dict, List, Mapping, NamedTuple, Optional, Sequence, Set, Tuple

    from ...core.model import ContainerRecord
    from ...node.config import Config
    from ...node.facts import NodeFacts as NodeView
else:
    from ...core.compat import NamedTuple

WATCH = "watch"
WATCH_LOCK = "watch.lock"
WATCH_SUFFIX = ".path"
RECONCILE_PREFIX = "mixed-cpus-hook-reconcile@"
# Link names in <state_dir>/watch/<id>/: the container's cpuset.cpus and quota file, its pod's
# quota file; and the template (rpm/units/) of the path unit that watches each.
LINK_CPUS, LINK_QUOTA, LINK_POD_QUOTA = "cpus", "quota", "pod-quota"
LINKS = (LINK_CPUS, LINK_QUOTA, LINK_POD_QUOTA)
WATCH_TEMPLATES = {LINK_CPUS: "mixed-cpus-hook-watch@", LINK_QUOTA: "mixed-cpus-hook-watch-quota@",
                   LINK_POD_QUOTA: "mixed-cpus-hook-watch-pod@"}
# Seconds a reconcile service keeps re-reading the files after a reapply (see usecases.reconcile).
DEFAULT_SETTLE = 0.1
SYSTEMCTL = "systemctl"


def watch_unit(cid: str, link: str = LINK_CPUS) -> str:
    """The path unit watching one of the container's links (by default its cpuset)."""
    return f"{WATCH_TEMPLATES[link]}{cid}{WATCH_SUFFIX}"


def watch_units(cid: str, links: Sequence[str] = LINKS) -> List[str]:
    return [watch_unit(cid, link) for link in LINKS if link in links]


def unit_container(unit: str) -> Optional[str]:
    """The container id of a watch unit's name; None for any other unit."""
    for template in WATCH_TEMPLATES.values():
        if unit.startswith(template) and unit.endswith(WATCH_SUFFIX):
            return unit[len(template):-len(WATCH_SUFFIX)]
    return None


def watch_dir(state_dir: str, cid: str = "") -> str:
    """``<state_dir>/watch`` or, with ``cid``, that container's link directory."""
    return os.path.join(state_dir, WATCH, cid) if cid else os.path.join(state_dir, WATCH)


# ---------------------------------------------------------------------------------------
# why a reconcile runs
#
# Each service passes its reason (--why). Not $TRIGGER_UNIT / $TRIGGER_PATH: systemd 252 keeps
# the activation details of a service's first trigger for as long as it stays loaded, so a
# service started by several path units (or by a timer and a path unit) would name the first
# one every time (checked with systemd 252).

WATCH_WHY = "its cgroup was written, seen by its watch units"
RECHECK_WHY = "written again while its last reapply ran, seen by the re-check"
CATCH_UP_WHY = "caught up when its watch units started"


# ---------------------------------------------------------------------------------------
# the link directories


def desired_links(layout: Any, rec: ContainerRecord, cid: str) -> Optional[Dict[str, str]]:
    """Link name -> cgroup file for a record; None when the container's cgroup is gone.

    The record's directories must resolve below the cgroup root (usecases.common.inside checks it).
    """
    from ...core.cgroup import cpuset_file, quota_file
    from ...usecases.common import inside

    own = inside(layout, rec.cgroup, f"record {cid}")
    if own is None or not (os.path.isdir(own.cpuset) and os.path.isdir(own.cpu)):
        return None
    links = {LINK_CPUS: cpuset_file(layout, own.cpuset), LINK_QUOTA: quota_file(layout, own.cpu)}
    pod = inside(layout, rec.pod_cgroup, f"record {cid}")
    if pod is not None and os.path.isdir(pod.cpu):
        links[LINK_POD_QUOTA] = quota_file(layout, pod.cpu)
    return links


def ensure_links(state_dir: str, cid: str, links: Dict[str, str]) -> bool:
    """Make ``<state_dir>/watch/<cid>/`` hold exactly ``links``; True when something changed.

    Each link is replaced atomically (a new symlink renamed over the old one), so the path unit
    never sees a half-made directory.
    """
    folder = watch_dir(state_dir, cid)
    changed = False
    refuse_links(state_dir, folder)
    try:
        os.makedirs(folder, mode=0o755, exist_ok=True)
        refuse_links(state_dir, folder)
        for name in LINKS:
            path = os.path.join(folder, name)
            try:
                current: Optional[str] = os.readlink(path)
            except FileNotFoundError:
                current = None
            except OSError:  # not a symlink: someone else's file, replace it
                current = ""
            target = links.get(name)
            if target == current:
                continue
            changed = True
            if target is None:
                os.unlink(path)
                continue
            tmp = os.path.join(folder, f".{name}.{os.getpid()}.tmp")
            try:
                os.unlink(tmp)
            except FileNotFoundError:
                pass
            os.symlink(target, tmp)
            os.replace(tmp, path)
    except OSError as exc:
        raise RecordError(f"cannot make the watch links: {exc.strerror}", folder) from None
    return changed


def refuse_links(state_dir: str, folder: str) -> None:
    """``<state_dir>/watch`` and ``folder`` must be real directories (or absent), never symlinks.

    A symlinked ``watch/<id>`` made ``sync`` delete every file in its target; the message
    names the link and where it leads.
    """
    top = os.path.realpath(state_dir)
    for d in (watch_dir(state_dir), folder):
        if os.path.islink(d):
            target = os.path.realpath(d)
            inside = target == top or target.startswith(top.rstrip("/") + "/")
            raise RecordError(f"is a symbolic link to {target}{'' if inside else ', outside the state directory'}; "
                              "the watch links live in a real directory: refusing to use it", d)


def remove_links(state_dir: str, cid: str) -> bool:
    """Remove ``<state_dir>/watch/<cid>/``; True when there was one. Never follows a symlink."""
    folder = watch_dir(state_dir, cid)
    refuse_links(state_dir, folder)
    try:
        fd = os.open(folder, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW)
    except FileNotFoundError:
        return False
    except OSError as exc:
        raise RecordError(f"cannot open: {exc.strerror}", folder) from None
    try:
        for name in os.listdir(fd):
            os.unlink(name, dir_fd=fd)
        os.rmdir(folder)
    except FileNotFoundError:
        pass
    except OSError as exc:
        raise RecordError(f"cannot remove the watch links: {exc.strerror}", folder) from None
    finally:
        os.close(fd)
    return True


def links_live(state_dir: str, cid: str) -> bool:
    """Whether the container's cpus and quota links exist and lead to existing files."""
    folder = watch_dir(state_dir, cid)
    return all(os.path.islink(os.path.join(folder, n)) and os.path.isfile(os.path.join(folder, n))
               for n in (LINK_CPUS, LINK_QUOTA))


def list_watch_dirs(state_dir: str) -> List[str]:
    try:
        return sorted(e for e in os.listdir(watch_dir(state_dir)) if not e.startswith("."))
    except FileNotFoundError:
        return []
    except OSError as exc:
        raise RecordError(f"cannot list: {exc.strerror}", watch_dir(state_dir)) from None


def take_pending(state_dir: str, queue: str = PENDING) -> List[str]:
    """The queued container ids; each mark is removed before it is acted on.

    A mark made again while the sync runs stays, and the sync path unit (level-triggered)
    starts another round for it. Names that cannot be ids are removed and ignored.
    """
    folder = os.path.join(state_dir, queue)
    try:
        names = os.listdir(folder)
    except FileNotFoundError:
        return []
    except OSError as exc:
        raise RecordError(f"cannot list: {exc.strerror}", folder) from None
    ids = []
    for name in sorted(names):
        try:
            os.unlink(os.path.join(folder, name))
        except FileNotFoundError:
            continue
        except OSError as exc:
            raise RecordError(f"cannot remove {name!r}: {exc.strerror}", folder) from None
        if watchable(name):
            ids.append(name)
    return ids


class watch_lock:  # noqa: N801 - used like a function: ``with watch_lock(dir):``
    """One sync at a time (the sync service, the timer's and a manual one may overlap).

    A lock of its own, not the state lock: a sync talks to systemd, and ``apply`` must never
    wait for that.
    """

    def __init__(self, state_dir: str) -> None:
        self.path = os.path.join(state_dir, WATCH_LOCK)
        self.fd = -1

    def __enter__(self) -> None:
        try:
            os.makedirs(os.path.dirname(self.path), mode=0o755, exist_ok=True)
            self.fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
        except OSError as exc:
            raise RecordError(f"cannot use the watch lock: {exc.strerror}", self.path) from None
        fcntl.flock(self.fd, fcntl.LOCK_EX)

    def __exit__(self, *exc: object) -> None:
        os.close(self.fd)
        self.fd = -1


# ---------------------------------------------------------------------------------------
# systemd


class Systemd:
    """The few systemctl calls a sync makes; tests pass a stand-in with the same methods."""

    def __init__(self, systemctl: str = SYSTEMCTL) -> None:
        self.systemctl = systemctl

    def _run(self, args: Sequence[str]) -> Tuple[int, str, str]:
        import subprocess  # not on the hook's path: only a sync talks to systemd

        try:
            proc = subprocess.run([self.systemctl, "--no-pager", "--no-ask-password", *args],
                                  stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=120)
        except (OSError, subprocess.SubprocessError) as exc:
            return 127, "", str(exc)
        return proc.returncode, proc.stdout, proc.stderr

    def units(self) -> Dict[str, str]:
        """Unit name -> ActiveState of every loaded watch unit."""
        code, out, err = self._run(["list-units", "--all", "--plain", "--no-legend", "--full",
                                    *(f"{t}*{WATCH_SUFFIX}" for t in WATCH_TEMPLATES.values())])
        if code != 0:
            raise SystemdError(f"systemctl list-units failed: {err.strip() or code}")
        states = {}
        for line in out.splitlines():
            words = [w for w in line.split() if w not in ("●", "*")]
            if len(words) >= 3 and unit_container(words[0]) is not None:
                states[words[0]] = words[2]
        return states

    def act(self, verb: str, units: Sequence[str]) -> None:
        """``systemctl start|stop|reset-failed UNIT...`` (nothing when there are no units)."""
        if not units:
            return
        code, _out, err = self._run([verb, *units])
        if code != 0:
            raise SystemdError(f"systemctl {verb} failed: {' '.join(err.split()) or code}")


class SyncReport(NamedTuple):
    started: Tuple[str, ...] = ()
    stopped: Tuple[str, ...] = ()
    forgotten: Tuple[str, ...] = ()
    restarted: Tuple[str, ...] = ()
    unwatchable: Tuple[str, ...] = ()
    errors: Tuple[str, ...] = ()
    rechecked: Tuple[str, ...] = ()


class SyncScope(NamedTuple):
    """The containers one sync looks at and, for a full sync, the loaded watch units' states."""

    ids: Set[str]
    states: Optional[Dict[str, str]]  # unit -> ActiveState; None: not asked (a queue-only sync)
    records: Set[str]  # containers with a record (full sync only)


class LinkPlan(NamedTuple):
    """What a sync found out container by container, before it talks to systemd."""

    want: Dict[str, List[str]]  # container -> the watch units it should have
    unwanted: List[str]  # containers whose watch units go
    forgotten: List[str]  # containers released here: their cgroup is gone
    unwatchable: List[str]  # ids that cannot name a systemd unit
    errors: List[str]


class UnitChanges(NamedTuple):
    """The systemctl work of one sync."""

    stop: List[str]
    start: List[str]
    failed: List[str]  # watch units to reset and start again (their trigger limit was hit)


def sync(config: Config, reporter: Reporter, full: bool = False, systemd: Optional[Systemd] = None,
         node: Optional[NodeView] = None) -> SyncReport:
    """Start the watch units of every live record and stop those without one.

    Without ``full`` only the queued ids (``pending/``) are looked at: the cost follows the
    number of containers that came or went, not the number tracked. With ``full`` (start-up,
    timer) every record, link directory and loaded watch unit is compared too, and watch units
    that failed (trigger limit hit) are reset and started again. A container whose cgroup is
    gone is forgotten here as in ``reconcile``. Newly watched containers are reconciled once
    more, for a rewrite that came between ``apply`` and the watch, and so are the containers
    queued in ``recheck/`` by a watch-triggered reapply.
    """
    from ...node.facts import read_node_facts as read_node

    systemd = systemd or Systemd()
    state_dir = config.state_dir
    with watch_lock(state_dir):
        pending = take_pending(state_dir)
        rechecks = [c for c in take_pending(state_dir, RECHECK) if c not in pending]
        scope = read_sync_scope(state_dir, pending, systemd if full else None)
        if not scope.ids:
            return _recheck(config, reporter, rechecks, node)
        node = node or read_node(config)
        plan = sync_links(config, reporter, node, scope, pending)
        changes, act_errors = act_on_units(systemd, compute_unit_changes(plan.want, plan.unwanted, scope.states),
                                           scope.states)
    errors = plan.errors + act_errors
    started, stopped = group_by_container(changes.start), group_by_container(changes.stop)
    _report_unit_changes(reporter, full, plan.unwatchable, changes.failed, stopped)
    errors += _catch_up(config, reporter, started, node)
    for line in errors:
        reporter.error(line)
    rechecked = _recheck(config, reporter, [c for c in rechecks if c not in started], node)
    return SyncReport(tuple(sorted(started)), tuple(sorted(stopped)), tuple(plan.forgotten),
                      tuple(sorted({unit_container(u) or "" for u in changes.failed})), tuple(plan.unwatchable),
                      tuple(errors) + rechecked.errors, rechecked.rechecked)


def read_sync_scope(state_dir: str, pending: Sequence[str], systemd: Optional[Systemd]) -> SyncScope:
    """The queued containers; with ``systemd`` (a full sync) also every record, link directory and watch unit."""
    ids = set(pending)
    if systemd is None:
        return SyncScope(ids, None, set())
    states = systemd.units()
    records = set(list_records(state_dir, "containers"))
    ids |= records | set(list_watch_dirs(state_dir)) | {unit_container(u) or "" for u in states}
    ids.discard("")
    return SyncScope(ids, states, records)


def sync_links(config: Config, reporter: Reporter, node: NodeView, scope: SyncScope,
               pending: Sequence[str]) -> LinkPlan:
    """Bring each container's link directory in line with its record; say which watch units it needs."""
    state_dir = config.state_dir
    plan = LinkPlan({}, [], [], [], [])
    for cid in sorted(scope.ids):
        if not watchable(cid):
            plan.unwatchable.append(cid)
            continue
        if scope.states is not None and cid in scope.records and cid not in pending and links_live(state_dir, cid):
            # its links lead to live cgroups: no need to read its record
            plan.want[cid] = watch_units(cid, present_links(state_dir, cid))
            continue
        try:
            links = load_links_or_forget(config, reporter, node, cid, plan.forgotten)
            if links is None:
                remove_links(state_dir, cid)
                plan.unwanted.append(cid)
            else:
                ensure_links(state_dir, cid, links)
                plan.want[cid] = watch_units(cid, list(links))
        except HookError as exc:
            plan.errors.append(f"container {cid}: {exc}")
    return plan


def present_links(state_dir: str, cid: str) -> List[str]:
    """The names of the links the container's directory holds."""
    folder = watch_dir(state_dir, cid)
    return [n for n in LINKS if os.path.lexists(os.path.join(folder, n))]


def load_links_or_forget(config: Config, reporter: Reporter, node: NodeView, cid: str,
                         forgotten: List[str]) -> Optional[Dict[str, str]]:
    """The links the container's record asks for; None without a record or a cgroup.

    A record whose cgroup is gone is released here (and the id added to ``forgotten``), as
    ``reconcile`` does.
    """
    from ...usecases.release import release_container

    rec = load_container(config.state_dir, cid)
    if rec is None:
        return None
    links = desired_links(node.layout, rec, cid)
    if links is None:
        release_container(cid, config.state_dir, config.cgroup_root, reporter, why="cgroup gone, forgotten")
        forgotten.append(cid)
    return links


def compute_unit_changes(want: Dict[str, List[str]], unwanted: Sequence[str],
                         states: Optional[Dict[str, str]]) -> UnitChanges:
    """Which watch units to stop, start, and reset first (pure).

    Without ``states`` (a queue-only sync) every wanted unit is started and every unwanted one
    stopped; with them only what is not already so, and a container's units that its links no
    longer call for are stopped too.
    """
    stop: List[str] = []
    start: List[str] = []
    failed: List[str] = []
    for cid in unwanted:
        stop += [u for u in watch_units(cid) if states is None or states.get(u, "inactive") != "inactive"]
    for cid, units in want.items():
        start += [u for u in units if states is None or states.get(u) != "active"]
        if states is not None:
            failed += [u for u in units if states.get(u) == "failed"]
            stop += [u for u in watch_units(cid) if u not in units and states.get(u, "inactive") != "inactive"]
    return UnitChanges(stop, start, failed)


def act_on_units(systemd: Systemd, changes: UnitChanges,
                 states: Optional[Dict[str, str]]) -> Tuple[UnitChanges, List[str]]:
    """Stop, then reset and start; the changes as made (nothing started when starting failed) and the errors."""
    errors: List[str] = []
    try:
        systemd.act("stop", changes.stop)
        if states is not None:
            systemd.act("reset-failed", [u for u in changes.stop if states.get(u) == "failed"])
    except HookError as exc:
        errors.append(str(exc))
    try:
        systemd.act("reset-failed", changes.failed)
        systemd.act("start", changes.start)
    except HookError as exc:
        errors.append(str(exc))
        changes = changes._replace(start=[])
    return changes, errors


def group_by_container(units: Sequence[str]) -> Dict[str, List[str]]:
    """Container id -> its units among ``units``, in their order."""
    grouped: Dict[str, List[str]] = {}
    for unit in units:
        grouped.setdefault(unit_container(unit) or "", []).append(unit)
    return grouped


def _report_unit_changes(reporter: Reporter, full: bool, unwatchable: Sequence[str], failed: Sequence[str],
                         stopped: Dict[str, List[str]]) -> None:
    if full:
        for cid in unwatchable:
            reporter.emit("info", f"container {cid}: id cannot name a systemd unit; only the periodic "
                                  "reconcile covers it", to_stream=False)
    for unit in failed:
        reporter.warning(f"container {unit_container(unit)}: {unit} had failed (trigger limit hit? something keeps "
                         "rewriting its cgroup); started it again")
    for cid in sorted(stopped):
        reporter.emit("info", f"container {cid}: stopped watching its cgroup ({', '.join(stopped[cid])})",
                      to_stream=False)


def _catch_up(config: Config, reporter: Reporter, started: Dict[str, List[str]], node: NodeView) -> List[str]:
    """Reconcile each newly watched container once: a rewrite may have come before its watch. The errors."""
    if not started:
        return []
    from ...usecases.metrics import update_metrics
    from ...usecases.reconcile import reconcile

    errors = []
    for cid in sorted(started):
        reporter.emit("info", f"container {cid}: watching its cgroup ({', '.join(started[cid])})", to_stream=False)
        caught_up = reconcile(config, reporter, only=cid, reason=f"reapplied ({CATCH_UP_WHY})", node=node)
        update_metrics(config, caught_up, "catch-up", reporter=reporter)
        errors += [f"container {cid}: {outcome.lines[0] if outcome.lines else 'error'}"
                   for _cid, outcome in caught_up if outcome.status == "error"]
    return errors


def _recheck(config: Config, reporter: Reporter, ids: List[str], node: Optional[NodeView]) -> SyncReport:
    """Reconcile once more the containers a watch-triggered reapply just handled."""
    if not ids:
        return SyncReport()
    from ...node.facts import read_node_facts as read_node
    from ...usecases.metrics import update_metrics
    from ...usecases.reconcile import reconcile

    node = node or read_node(config)
    errors = []
    results = []
    for cid in ids:
        results += reconcile(config, reporter, only=cid, node=node, reason=f"reapplied ({RECHECK_WHY})")
    for cid, outcome in results:
        if outcome.status == "error":
            errors.append(f"container {cid}: {outcome.lines[0] if outcome.lines else 'error'}")
    update_metrics(config, results, "recheck", reporter=reporter)
    return SyncReport(errors=tuple(errors), rechecked=tuple(ids))


# ---------------------------------------------------------------------------------------
# the services' command line (standard library only)


def reconcile_container(config: Config, cid: str, reporter: Reporter, settle: float = DEFAULT_SETTLE,
                        why: str = WATCH_WHY) -> int:
    """What ``mixed-cpus-hook-reconcile@<id>.service`` runs: reapply one container, then settle."""
    from ...usecases.reconcile import reconcile

    results = reconcile(config, reporter, only=cid, reason=f"reapplied ({why})", settle=settle)
    from ...usecases.metrics import update_metrics

    update_metrics(config, results, "watch" if why == WATCH_WHY else why, reporter=reporter)
    if results and results[-1][1].status in ("applied", "in-sync"):
        # Last, so that the sync reads again only after this process is gone and its watch
        # units watch again (see the module's docstring).
        mark_pending(config.state_dir, cid, RECHECK)
    return 1 if any(outcome.status == "error" for _cid, outcome in results) else EXIT_OK


def reconcile_all(config: Config, reporter: Reporter, sync_watches: bool = False, why: Optional[str] = None,
                  stdout: Any = None) -> int:
    """``mixed-cpus-hook reconcile [--sync-watches] [--why TEXT]`` without click.

    What the timer, configuration and start-up units run where only the standard library is
    (RHCOS without a custom image: ``machineconfig --no-image``): every record reconciled, then
    with ``sync_watches`` a full sync of the watch units; one line per fix on stdout, as the
    click command prints them; the metrics updated. Exit 1 when a container failed.
    """
    from ...core.model import Outcome
    from ...node.facts import read_node_facts as read_node
    from ...usecases.metrics import update_metrics
    from ...usecases.reconcile import reconcile

    out = stdout or sys.stdout
    node = read_node(config)
    results = list(reconcile(config, reporter, reason=f"reapplied ({why})" if why else "reapplied", node=node))
    if sync_watches:
        report = sync(config, reporter, full=True, node=node)
        results += [("-", Outcome("error", (line,))) for line in report.errors]
    update_metrics(config, results, why or "manual", full=True, reporter=reporter)
    for cid, outcome in results:
        if outcome.status != "error":
            out.write("".join(f"container {cid}: {line}\n" if line.startswith("/") else f"{line}\n"
                              for line in outcome.lines))
    return 1 if any(outcome.status == "error" for _cid, outcome in results) else EXIT_OK


USAGE = """\
usage: python -m mixed_cpus_hook.frontends.systemd.watches [--config PATH] [-v] reconcile ID [--settle SECONDS] [--why TEXT]
       python -m mixed_cpus_hook.frontends.systemd.watches [--config PATH] [-v] sync [--full]
       python -m mixed_cpus_hook.frontends.systemd.watches [--config PATH] [-v] reconcile-all [--sync-watches] [--why TEXT]

reconcile  reapply one tracked container (what its watch units' service runs), then re-read
           its files for SECONDS (default 0.1) and fix again what changes meanwhile; the
           journal gives TEXT as the reason (default: "its cgroup was written, seen by its
           watch units"); then queue it for one more read by the sync
sync       start/stop the per-container watch units for the queued containers (--full: all)
           and re-check the containers queued by reconcile
reconcile-all  `mixed-cpus-hook reconcile [--sync-watches] [--why TEXT]` without click: every
           tracked container (what the timer, configuration and start-up units run on a node
           without click, e.g. RHCOS without a custom image)
"""


COMMANDS = ("reconcile", "sync", "reconcile-all")
WHERE_ARGS = "command line"


def parse_args(argv: Sequence[str]) -> Dict[str, Any]:
    """The command line as a dict (``command`` "help" for -h/--help anywhere); UsageError when it is wrong.

    ``--config`` and ``-v`` come before the command; each command's own arguments after it.
    """
    args: Dict[str, Any] = {"config": None, "verbose": False, "command": "", "id": None,
                            "settle": DEFAULT_SETTLE, "full": False, "why": WATCH_WHY, "sync_watches": False}
    rest = list(argv)
    while rest:
        tok = rest.pop(0)
        if tok in ("-h", "--help"):
            args["command"] = "help"
            return args
        taken = _take_command_arg(tok, rest, args) if args["command"] else _take_global_arg(tok, rest, args)
        if not taken:
            raise UsageError(f"unexpected argument {tok!r}", WHERE_ARGS)
    if not args["command"]:
        raise UsageError("a command is required (reconcile ID, sync, or reconcile-all)", WHERE_ARGS)
    if args["command"] == "reconcile" and not args["id"]:
        raise UsageError("reconcile needs a container id", WHERE_ARGS)
    return args


def _take_global_arg(tok: str, rest: List[str], args: Dict[str, Any]) -> bool:
    """An option before the command, or the command; False when ``tok`` is neither."""
    if tok == "--config" and rest:
        args["config"] = rest.pop(0)
    elif tok in ("-v", "--verbose"):
        args["verbose"] = True
    elif tok in COMMANDS:
        args["command"] = tok
        if tok == "reconcile-all":
            args["why"] = None
    else:
        return False
    return True


def _take_command_arg(tok: str, rest: List[str], args: Dict[str, Any]) -> bool:
    """One of the command's own arguments; False when ``tok`` is none of them."""
    command = args["command"]
    if command == "reconcile" and tok == "--settle" and rest:
        args["settle"] = parse_settle(rest.pop(0))
    elif command == "reconcile-all" and tok == "--sync-watches":
        args["sync_watches"] = True
    elif command in ("reconcile", "reconcile-all") and tok == "--why" and rest:
        args["why"] = rest.pop(0)
    elif command == "reconcile" and args["id"] is None and not tok.startswith("-"):
        args["id"] = tok
    elif command == "sync" and tok == "--full":
        args["full"] = True
    else:
        return False
    return True


def parse_settle(text: str) -> float:
    """``--settle``'s seconds: a number from 0 to 10."""
    try:
        seconds = float(text)
    except ValueError:
        raise UsageError("--settle takes a number of seconds", WHERE_ARGS) from None
    if not 0 <= seconds <= 10:
        raise UsageError("--settle must be between 0 and 10 seconds", WHERE_ARGS)
    return seconds


def main(argv: Optional[Sequence[str]] = None, reporter: Optional[Reporter] = None,
         environ: Optional[Mapping[str, str]] = None) -> int:
    """The services' entry; ``environ`` is what the configuration is resolved from."""
    try:
        args = parse_args(sys.argv[1:] if argv is None else argv)
    except UsageError as exc:
        sys.stderr.write(f"mixed-cpus-hook: usage error: {exc}\n{USAGE}")
        return EXIT_USAGE
    if args["command"] == "help":
        sys.stdout.write(USAGE)
        return EXIT_OK
    rep = reporter or Reporter(verbose=args["verbose"])
    try:
        config = load_config(args["config"], environ=dict(os.environ if environ is None else environ))
        if args["command"] == "reconcile":
            return reconcile_container(config, args["id"], rep, settle=args["settle"], why=args["why"])
        if args["command"] == "reconcile-all":
            return reconcile_all(config, rep, sync_watches=args["sync_watches"], why=args["why"])
        report = sync(config, rep, full=args["full"])
        return 1 if report.errors else EXIT_OK
    except HookError as exc:
        rep.error(f"{exc.kind}: {exc}")
        return exc.exit_code


if __name__ == "__main__":
    sys.exit(main())
