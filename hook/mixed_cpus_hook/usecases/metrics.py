"""Prometheus metrics for node_exporter's textfile collector (setting ``metrics_file``).

Every reconcile and reapply ends with :func:`update_metrics`: the ``reconcile`` command
(cli.py), the watch units' reapply and the sync (watches.py), and the NRI plugin. It folds
that run's results into a small JSON state file, ``<state_dir>/metrics.json``, under the state
lock (counters must survive the short-lived processes that bump them), then rewrites the
metrics file atomically (a temporary file in the same directory, renamed over the old one:
node_exporter never reads half a file).

Standard library only, like the rest of the reapply path: ``prometheus_client`` would add its
import (measured with ``python -X importtime``: 95-130 ms with Python 3.11 on the CI machine,
many times the whole reapply) to every watch-triggered run, for seven lines of text format. The tests parse the
file with prometheus_client's own parser.
"""

from __future__ import annotations

import json
import os
import time

from ..core.errors import RecordError
from ..store.records import list_records, load_container, state_lock

TYPE_CHECKING = False
if TYPE_CHECKING:  # typing costs milliseconds on every start of the reconcile service
    from typing import Any, Dict, List, Optional, Sequence, Tuple

    from ..core.model import Outcome
    from ..node.config import Config

STATE_FILE = "metrics.json"
PREFIX = "mixed_cpus_hook_"
# Outcome.status -> what the container is after the run; None: no longer tracked.
IN_SYNC, DRIFTED = "in-sync", "drifted"
STATUS_STATE = {"in-sync": IN_SYNC, "applied": IN_SYNC, "planned": DRIFTED, "error": DRIFTED, "broken": DRIFTED,
                "conflict": DRIFTED, "gone": None, "released": None, "skipped": None, "not-applicable": None}
ERROR_STATUSES = ("error", "broken")


def empty_state() -> Dict[str, Any]:
    return {"containers": {}, "reapplies": {}, "errors": 0, "last_full_reconcile": None}


def compute_state(state: Dict[str, Any], results: Sequence[Tuple[str, Outcome]], reason: str,
                  records: Sequence[str], pins: Dict[str, bool], full: bool, now: float) -> Dict[str, Any]:
    """The metrics state after one run (pure).

    ``records``: the container ids tracked now; ``pins``: container id -> its record's
    ``pins_maybe_lost`` for the containers of this run. A full run (every record) sets the last
    full reconcile time and forgets containers it did not see.
    """
    containers: Dict[str, Dict[str, Any]] = dict(state.get("containers") or {})
    reapplies: Dict[str, int] = dict(state.get("reapplies") or {})
    errors = int(state.get("errors") or 0)
    for cid, outcome in results:
        if cid == "-":  # a line of the watch sync, not a container
            errors += outcome.status in ERROR_STATUSES
            continue
        if outcome.status == "applied":
            reapplies[reason] = reapplies.get(reason, 0) + 1
        if outcome.status in ERROR_STATUSES:
            errors += 1
        new = STATUS_STATE.get(outcome.status, DRIFTED)
        if new is None:
            containers.pop(cid, None)
        else:
            containers[cid] = {"state": new, "pins_maybe_lost": bool(pins.get(cid, False))}
    tracked = set(records)
    return {"containers": {cid: v for cid, v in containers.items() if cid in tracked}, "reapplies": reapplies,
            "errors": errors, "last_full_reconcile": now if full else state.get("last_full_reconcile")}


def _label(value: str) -> str:
    return value.replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')


def format_metrics(state: Dict[str, Any], tracked: int) -> str:
    """The Prometheus text exposition format (version 0.0.4) of a metrics state (pure)."""
    containers = state["containers"].values()
    families: List[Tuple[str, str, str, List[str]]] = [
        ("containers_tracked", "gauge", "Containers with a record (hook and NRI mode).", [f"{tracked}"]),
        ("containers_in_sync", "gauge", "Tracked containers whose cgroup held the mixed set at their last check.",
         [str(sum(c["state"] == IN_SYNC for c in containers))]),
        ("containers_drifted", "gauge",
         "Tracked containers whose mixed set was not in place at their last check (not restored, or a dry run).",
         [str(sum(c["state"] == DRIFTED for c in containers))]),
        ("pins_possibly_lost", "gauge",
         "Tracked containers whose threads' CPU pinning may be lost (cpuset shrunk and regrown on a kernel "
         "before 6.2).", [str(sum(bool(c.get("pins_maybe_lost")) for c in containers))]),
        ("reapplies_total", "counter", "Reapplies that rewrote a container's cgroup, by what started them.",
         [f'{{reason="{_label(r)}"}} {n}' for r, n in sorted(state["reapplies"].items())]),
        ("errors_total", "counter", "Containers a reconcile or reapply failed for.", [str(state["errors"])]),
    ]
    if state.get("last_full_reconcile") is not None:
        families.append(("last_full_reconcile_timestamp_seconds", "gauge",
                         "When every tracked container was last reconciled (Unix time).",
                         [f"{state['last_full_reconcile']:.3f}"]))
    lines = []
    for name, kind, text, samples in families:
        lines += [f"# HELP {PREFIX}{name} {text}", f"# TYPE {PREFIX}{name} {kind}"]
        lines += [f"{PREFIX}{name}{s}" if s.startswith("{") else f"{PREFIX}{name} {s}" for s in samples]
    return "\n".join(lines) + "\n"


def load_state(state_dir: str) -> Dict[str, Any]:
    """The metrics state; a missing or unreadable file starts from zero (metrics never fail a run)."""
    try:
        with open(os.path.join(state_dir, STATE_FILE), encoding="utf-8") as f:
            doc = json.load(f)
    except (OSError, ValueError):
        return empty_state()
    return doc if isinstance(doc, dict) else empty_state()


def write_atomic(path: str, text: str, mode: int = 0o644) -> None:
    """Write ``text`` to ``path`` through a temporary file in the same directory and a rename."""
    folder = os.path.dirname(path) or "."
    tmp = os.path.join(folder, f".{os.path.basename(path)}.{os.getpid()}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, mode)
    try:
        os.write(fd, text.encode("utf-8"))
        os.fchmod(fd, mode)
    finally:
        os.close(fd)
    os.replace(tmp, path)


def update_metrics(config: Config, results: Sequence[Tuple[str, Outcome]], reason: str, full: bool = False,
                   reporter: Any = None, now: Optional[float] = None) -> bool:
    """Fold one run's results into the metrics and rewrite ``config.metrics_file``.

    ``results``: what ``usecases.reconcile`` (or the NRI plugin, one entry per container it handled)
    returned; ``reason``: a short label of what started the run ("watch", "periodic check", "nri",
    ...); ``full``: every record was reconciled. Does nothing when ``metrics_file`` is unset.
    Never raises: a metrics problem is logged as a warning (when a reporter is given) and the run's
    own result stands. Returns whether the file was written.
    """
    if not config.metrics_file:
        return False
    try:
        with state_lock(config.state_dir):
            records = list_records(config.state_dir, "containers")
            pins = {}
            for cid, _outcome in results:
                if cid in records:
                    try:
                        rec = load_container(config.state_dir, cid)
                    except RecordError:
                        rec = None
                    pins[cid] = rec is not None and rec.pins_maybe_lost
            state = compute_state(load_state(config.state_dir), results, reason, records, pins, full,
                                  time.time() if now is None else now)
            write_atomic(os.path.join(config.state_dir, STATE_FILE), json.dumps(state, sort_keys=True), 0o600)
            write_atomic(config.metrics_file, format_metrics(state, len(records)))
        return True
    except (OSError, RecordError) as exc:
        if reporter is not None:
            reporter.warning(f"metrics not written: {getattr(exc, 'strerror', None) or exc}: {config.metrics_file}")
        return False
