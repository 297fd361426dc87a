"""The resident plugin's counters and their Prometheus text (``/metrics``), behind one small object.

The NRI front end updates a :class:`Telemetry` (a request answered and how long it took, an
error and its reason, a container made mixed and whether its pod's quota was raised, the
connection to the runtime); the HTTP endpoint (``nri/httpd.py``) reads a snapshot and renders
it with :func:`format_exposition`. The engine is to own these counters (issue 14): it then
takes the same object, and nothing else moves.

Thread-safe with one lock held only to update or copy a few dicts: the NRI loop writes, the
HTTP thread reads, and a scraper never holds the lock while it talks to the network.

Standard library only, like ``metrics.py`` (hook mode's textfile): the text format is a few
lines, and prometheus_client would be one more package to ship in the image and the RPM (the
tests parse the output with prometheus_client's own parser). "Mixed containers" is counted
at scrape time from the state directory (the records are the truth, and a listing costs the
scraper's thread, never an NRI answer).
"""

from __future__ import annotations

import threading
import time
from bisect import bisect_left
from itertools import accumulate
from typing import Any, Callable, Dict, List, Optional, Tuple

PREFIX = "mixed_cpus_hook_"
# Answer-time buckets in seconds: NRI's request timeout is 2 s; a plugin answer is a few ms.
BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.0)


class Snapshot:
    """A consistent copy of the counters (what one scrape renders)."""

    def __init__(self, requests: Dict[str, int], errors: Dict[Tuple[str, str], int],
                 histograms: Dict[str, Tuple[List[int], float, int]], admitted: int, pod_quota_raised: int,
                 connected: bool, connected_since: Optional[float], tracked: Optional[int]) -> None:
        self.requests, self.errors, self.histograms = requests, errors, histograms
        self.admitted, self.pod_quota_raised = admitted, pod_quota_raised
        self.connected, self.connected_since, self.tracked = connected, connected_since, tracked
        # shared_cpus: pool: {"cpus": size, "containers": {kind: count}, "exclusivity_failures": n,
        # "rewrites": n} (None otherwise)
        self.pool: Optional[Dict[str, Any]] = None


class Telemetry:
    """Counters of one plugin process; every method is safe from any thread."""

    def __init__(self, count_tracked: Optional[Callable[[], int]] = None, buckets: Tuple[float, ...] = BUCKETS,
                 clock: Callable[[], float] = time.time) -> None:
        self.buckets = buckets
        self._count_tracked = count_tracked
        self._clock = clock
        self._lock = threading.Lock()
        self._errors: Dict[Tuple[str, str], int] = {}
        # event -> [count per bucket (not cumulative; the last slot: above every bucket), sum, count]:
        # one slot is counted on the request path, the cumulative counts are summed at a scrape (the
        # count is also the event's requests).
        self._histograms: Dict[str, List[Any]] = {}
        self._admitted = 0
        self._pod_quota_raised = 0
        self._connected = False
        self._connected_since: Optional[float] = None
        # Set by the engine in pool mode: the pool's figures, read at scrape time.
        self.pool_stats: Optional[Callable[[], Dict[str, Any]]] = None

    # -- what the front end reports ----------------------------------------------------------
    def request(self, event: str, seconds: float) -> None:
        """One runtime request answered (or failed) after ``seconds``."""
        slot = bisect_left(self.buckets, seconds)  # the first bucket with seconds <= its bound
        with self._lock:
            hist = self._histograms.get(event) or self._histograms.setdefault(
                event, [[0] * (len(self.buckets) + 1), 0.0, 0])
            hist[0][slot] += 1
            hist[1] += seconds
            hist[2] += 1

    def error(self, event: str, reason: str) -> None:
        """An error while handling ``event``; ``reason`` is the error's kind ("config error" counts as
        ``config_error``)."""
        with self._lock:
            key = (event, reason.replace(" ", "_"))
            self._errors[key] = self._errors.get(key, 0) + 1

    def admitted(self, pod_quota_raised: bool) -> None:
        """A container made mixed (at creation or at Synchronize)."""
        with self._lock:
            self._admitted += 1
            self._pod_quota_raised += bool(pod_quota_raised)

    def set_connected(self, connected: bool) -> None:
        """Registered and configured by the runtime (True) or not (False)."""
        with self._lock:
            if connected and not self._connected:
                self._connected_since = self._clock()
            self._connected = connected
            if not connected:
                self._connected_since = None

    # -- what the endpoint reads ---------------------------------------------------------------
    @property
    def connected(self) -> bool:
        with self._lock:
            return self._connected

    def snapshot(self) -> Snapshot:
        with self._lock:
            snap = Snapshot({k: n for k, (_c, _t, n) in self._histograms.items()}, dict(self._errors),
                            {k: (list(accumulate(c[:-1])), t, n) for k, (c, t, n) in self._histograms.items()},
                            self._admitted, self._pod_quota_raised, self._connected, self._connected_since, None)
        if self.pool_stats is not None:
            try:
                snap.pool = self.pool_stats()
            except Exception:  # noqa: BLE001 - a scrape must not fail on the pool's figures
                snap.pool = None
        if self._count_tracked is not None:  # outside the lock: a directory listing
            try:
                snap.tracked = self._count_tracked()
            except Exception:  # noqa: BLE001 - a scrape must not fail on an unreadable state dir
                snap.tracked = None
        return snap


def _label(value: str) -> str:
    return value.replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')


def _float(value: float) -> str:
    return repr(float(value))


def format_exposition(snap: Snapshot, version: str, buckets: Tuple[float, ...] = BUCKETS) -> str:
    """The Prometheus text exposition format (0.0.4) of a snapshot (pure)."""
    p = PREFIX
    out = [f"# HELP {p}build_info The plugin's version.", f"# TYPE {p}build_info gauge",
           f'{p}build_info{{version="{_label(version)}"}} 1',
           f"# HELP {p}nri_connected 1 while the plugin is registered with and configured by the runtime.",
           f"# TYPE {p}nri_connected gauge", f"{p}nri_connected {int(snap.connected)}",
           f"# HELP {p}nri_requests_total NRI requests answered, by event.", f"# TYPE {p}nri_requests_total counter"]
    out += [f'{p}nri_requests_total{{event="{_label(e)}"}} {n}' for e, n in sorted(snap.requests.items())]
    out += [f"# HELP {p}nri_errors_total Errors while handling NRI requests, by event and reason.",
            f"# TYPE {p}nri_errors_total counter"]
    out += [f'{p}nri_errors_total{{event="{_label(e)}",reason="{_label(r)}"}} {n}'
            for (e, r), n in sorted(snap.errors.items())]
    out += [f"# HELP {p}nri_answer_seconds Time to answer an NRI request, by event.",
            f"# TYPE {p}nri_answer_seconds histogram"]
    for event, (counts, total, n) in sorted(snap.histograms.items()):
        ev = _label(event)
        for bound, c in zip(buckets, counts):
            out.append(f'{p}nri_answer_seconds_bucket{{event="{ev}",le="{_float(bound)}"}} {c}')
        out += [f'{p}nri_answer_seconds_bucket{{event="{ev}",le="+Inf"}} {n}',
                f'{p}nri_answer_seconds_sum{{event="{ev}"}} {_float(total)}',
                f'{p}nri_answer_seconds_count{{event="{ev}"}} {n}']
    out += [f"# HELP {p}containers_admitted_total Containers made mixed (creation or Synchronize).",
            f"# TYPE {p}containers_admitted_total counter", f"{p}containers_admitted_total {snap.admitted}",
            f"# HELP {p}pod_quota_raised_total Pod CFS quotas raised for a mixed container.",
            f"# TYPE {p}pod_quota_raised_total counter", f"{p}pod_quota_raised_total {snap.pod_quota_raised}"]
    if snap.tracked is not None:
        out += [f"# HELP {p}mixed_containers Containers tracked as mixed now (records in the state directory).",
                f"# TYPE {p}mixed_containers gauge", f"{p}mixed_containers {snap.tracked}"]
    if snap.pool is not None:
        out += format_pool_exposition(snap.pool)
    return "\n".join(out) + "\n"


def format_pool_exposition(pool: Dict[str, Any]) -> List[str]:
    """The pool's figures (shared_cpus: pool)."""
    p = PREFIX
    out = [f"# HELP {p}pool_cpus CPUs in the shared pool now.", f"# TYPE {p}pool_cpus gauge",
           f"{p}pool_cpus {int(pool.get('cpus', 0))}",
           f"# HELP {p}pool_containers Containers the plugin places, by kind (mixed: claim or exclusive + pool; "
           "claim: the claim alone; pool: the pool alone).", f"# TYPE {p}pool_containers gauge"]
    out += [f'{p}pool_containers{{kind="{_label(k)}"}} {n}' for k, n in sorted(pool.get("containers", {}).items())]
    out += [f"# HELP {p}pool_exclusivity_failures_total Starts refused: a claimed or exclusive CPU stayed in another "
            "container's cpuset.", f"# TYPE {p}pool_exclusivity_failures_total counter",
            f"{p}pool_exclusivity_failures_total {int(pool.get('exclusivity_failures', 0))}",
            f"# HELP {p}pool_rewrites_total Cpusets written back at a start (an update the runtime had not applied).",
            f"# TYPE {p}pool_rewrites_total counter", f"{p}pool_rewrites_total {int(pool.get('rewrites', 0))}"]
    return out
