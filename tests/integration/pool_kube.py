"""The pool tests' world (shared_cpus: pool): the CPU DRA driver's prepare step, kubelet's CPU manager
checkpoint, and a watcher that reads every container's cpuset while claims come and go.

* :class:`Claims` writes CDI spec files as the CPU DRA driver's prepare step does
  (kubernetes-sigs/dra-driver-cpu pkg/driver/cdi.go): one file per claim,
  ``<vendor>-<class>_claim-<uid>.json`` (CDI's transient spec name), kind ``dra.k8s.io/cpu``,
  one device ``claim-<uid>`` whose only edit is ``DRA_CPUSET_<uid>=<cpulist>``, ``cdiVersion``
  0.8.0; written atomically (a temporary name that CDI does not read, then a rename), removed at
  unprepare. kubelet passes the qualified name ``dra.k8s.io/cpu=claim-<uid>`` in CRI's
  ContainerConfig.CDI_devices.
* :class:`PoolKube` makes containers as kubelet does with the CPU manager policy ``none`` (the DRA
  driver's setting): no cpuset, the CPU shares of the request (2 without one: kubelet's
  MinShares), no quota without a limit, the claims' CDI devices; and reads what they got.
* :class:`PoolWatcher` samples the cpuset of every container it is told about (cgroup v1
  ``cpuset.cpus``, v2 ``cpuset.cpus.effective``, what the kernel grants) in one thread, keeping
  every value change with its time; :func:`find_violations` checks the invariant against the
  claims' lifetimes: from a claimant's start until its stop, no other container's set holds a
  claimed CPU.
* :func:`write_checkpoint` replaces kubelet's ``cpu_manager_state`` as kubelet does (a new file
  renamed over the old), in kubelet's own format (``mixed_cpus_hook.testing.fakenode``).
"""

from __future__ import annotations

import ctypes
import json
import os
import select
import struct
import threading
import time
import uuid
from typing import Dict, Iterable, List, NamedTuple, Optional, Tuple

from mixed_cpus_hook.core.cpuset import format_cpulist, parse_cpulist

try:
    from .images import BUSYBOX_IMAGE
except ImportError:  # collected as top-level modules (rootdir-relative), or the VM scenarios' sys.path
    from images import BUSYBOX_IMAGE  # type: ignore[no-redef]
from mixed_cpus_hook.testing.fakenode import format_checkpoint

CDI_VENDOR, CDI_CLASS = "dra.k8s.io", "cpu"
CDI_KIND = f"{CDI_VENDOR}/{CDI_CLASS}"
DRIVER_CDI_VERSION = "0.8.0"  # dra-driver-cpu's cdiSpecVersion
CLAIM_ENV = "DRA_CPUSET_"
MIN_SHARES = 2  # kubelet's CPU shares for a container without a CPU request
PERIOD = 100000
IN_MODIFY = 0x2
EVENT = struct.Struct("iIII")  # struct inotify_event without its name (none for a watched file)


def parse_cpus(text: str) -> frozenset:
    return parse_cpulist(text)


def format_cpus(cpus: Iterable[int]) -> str:
    return format_cpulist(cpus)


# ---------------------------------------------------------------------------------------------
# the DRA driver's prepare step


class Claim(NamedTuple):
    uid: str
    cpus: str
    device: str  # the qualified CDI name kubelet passes

    @property
    def env(self) -> str:
        return f"{CLAIM_ENV}{self.uid}={self.cpus}"


def spec_doc(uid: str, cpus: str, version: str = DRIVER_CDI_VERSION) -> dict:
    """The CDI spec the driver writes for one claim."""
    return {"cdiVersion": version, "kind": CDI_KIND,
            "devices": [{"name": f"claim-{uid}", "containerEdits": {"env": [f"{CLAIM_ENV}{uid}={cpus}"]}}]}


class Claims:
    """The driver's prepare (a spec file per claim) and unprepare (the file removed) in ``cdi_dir``."""

    def __init__(self, cdi_dir: str) -> None:
        self.cdi_dir = cdi_dir
        self.files: Dict[str, str] = {}

    def path(self, uid: str) -> str:
        return os.path.join(self.cdi_dir, f"{CDI_VENDOR}-{CDI_CLASS}_claim-{uid}.json")

    def prepare(self, cpus: str, uid: Optional[str] = None, version: str = DRIVER_CDI_VERSION) -> Claim:
        uid = uid or str(uuid.uuid4())
        path = self.path(uid)
        tmp = os.path.join(self.cdi_dir, f".claim-{uid}.tmp")  # CDI reads only *.json and *.yaml
        with open(tmp, "w", encoding="utf-8") as f:
            json.dump(spec_doc(uid, cpus, version), f, indent=2)
        os.replace(tmp, path)
        self.files[uid] = path
        return Claim(uid, cpus, f"{CDI_KIND}=claim-{uid}")

    def unprepare(self, claim: Claim) -> None:
        path = self.files.pop(claim.uid, None)
        if path and os.path.exists(path):
            os.unlink(path)

    def cleanup(self) -> None:
        for path in self.files.values():
            if os.path.exists(path):
                os.unlink(path)
        self.files.clear()


# ---------------------------------------------------------------------------------------------
# kubelet's calls with claims


ENV_SCRIPT = ("grep Cpus_allowed_list: /proc/1/status; tr '\\0' '\\n' < /proc/1/environ | "
              "grep -E '^(OPENSHIFT_|DRA_CPUSET_)' || true")


class PoolKube:
    """kubelet's CRI calls (cri_kube.Kube) with the CPU DRA driver's claims, and what a container got."""

    def __init__(self, kube, claims: Claims) -> None:
        self.kube, self.claims = kube, claims

    def pod(self, name: str, namespace: str = "mixed-ns", quota: int = -1, asks: str = ""):
        """A pod (its cgroup's quota unlimited: no CPU limit) that asks for nothing by annotation."""
        return self.kube.pod(name=name, namespace=namespace, quota=quota, asks=asks)

    def container(self, pod, name: str, claims: Iterable[Claim] = (), shares: int = MIN_SHARES, start: bool = True,
                  cpus: str = "", quota: int = 0, command: Optional[List[str]] = None,
                  envs: Optional[Dict[str, str]] = None) -> str:
        """CreateContainer (and StartContainer) as kubelet sends them; ``cpus``/``quota``: the static CPU
        manager's values (none with the policy none); ``envs``: the pod spec's own variables (CRI's envs)."""
        cri = self.kube.cri
        cid = cri.create(pod.id, pod.config, name, BUSYBOX_IMAGE, command or ["sleep", "3600"],
                         cri.resources(cpus, quota, PERIOD, shares=shares),
                         annotations={"io.kubernetes.container.name": name}, envs=envs,
                         cdi_devices=tuple(c.device for c in claims))
        if start:
            cri.start(cid)
        return cid

    def cpuset_file(self, pod, cid: str) -> str:
        """The set the kernel grants: cgroup v2 cpuset.cpus.effective, v1 cpuset.cpus."""
        return self.kube.cgroup(pod, cid, "cpuset") + ("/cpuset.cpus.effective" if self.kube.v2 else "/cpuset.cpus")

    def watch(self, watcher: "PoolWatcher", name: str, pod, cid: str) -> None:
        """Have ``watcher`` sample the container's granted set, reading it at every write to its cpuset.cpus."""
        watcher.add(name, self.cpuset_file(pod, cid), self.kube.cgroup(pod, cid, "cpuset") + "/cpuset.cpus")

    def cpus(self, pod, cid: str) -> str:
        with open(self.cpuset_file(pod, cid), encoding="ascii") as f:
            return f.read().strip()

    def allowed(self, cid: str, pid: Optional[int] = None) -> str:
        """Cpus_allowed_list of the container's PID 1 (or ``pid``), read from the host's /proc (no exec)."""
        with open(f"/proc/{pid or self.kube.pid(cid)}/status", encoding="ascii") as f:
            for line in f:
                if line.startswith("Cpus_allowed_list:"):
                    return line.split(":", 1)[1].strip()
        raise AssertionError("no Cpus_allowed_list")

    def inside(self, cid: str) -> Dict[str, str]:
        """Cpus_allowed_list of PID 1 and its OPENSHIFT_* and DRA_CPUSET_* variables, read inside."""
        rc, out, err = self.kube.cri.exec_sync(cid, ["sh", "-c", ENV_SCRIPT], timeout=self.kube.exec_timeout)
        assert rc == 0, err
        got = {}
        for line in out.splitlines():
            key, sep, value = line.partition(":" if line.startswith("Cpus_allowed_list:") else "=")
            if sep:
                got[key] = value.strip()
        return got

    def release(self, cid: str) -> None:
        """kubelet's StopContainer and RemoveContainer."""
        self.kube.cri.stop(cid, timeout=0)
        self.kube.cri.remove(cid)


# ---------------------------------------------------------------------------------------------
# kubelet's checkpoint


def write_checkpoint(path: str, entries: Dict[str, Dict[str, str]], default: str) -> None:
    """kubelet's cpu_manager_state (policy static) with these entries, replaced atomically."""
    os.makedirs(os.path.dirname(path), exist_ok=True)
    tmp = path + ".tmp"
    with open(tmp, "w", encoding="utf-8") as f:
        f.write(format_checkpoint(entries, default))
    os.replace(tmp, path)


# ---------------------------------------------------------------------------------------------
# the watcher and the invariant


class PoolWatcher:
    """Samples every watched container's cpuset file in one thread; keeps each value change.

    Between rounds it waits on inotify (IN_MODIFY, which every write to a cgroup file raises) for
    at most ``pause`` seconds, and reads a file right after a write to it: a value that lasts
    less than a round is still seen. ``add(name, path)`` starts watching (call it once the container's CreateContainer returned:
    runc creates a cgroup with its parent's CPUs and writes the container's own set a moment
    later, a value the container never runs a process of its own on); ``remove(name)`` stops.
    ``transitions[name]`` is ``[(time.monotonic(), value), ...]``; a file that disappears ends its
    container's history with ``(t, None)``.
    """

    def __init__(self, pause: float = 0.0005) -> None:
        self.pause = pause
        self.transitions: Dict[str, List[Tuple[float, Optional[str]]]] = {}
        self.samples = 0
        self.writes: Dict[str, int] = {}  # inotify IN_MODIFY events per container
        self._fds: Dict[str, int] = {}
        self._wds: Dict[int, str] = {}
        self._libc = ctypes.CDLL(None, use_errno=True)
        self._ifd = self._libc.inotify_init1(os.O_NONBLOCK | os.O_CLOEXEC)
        if self._ifd < 0:
            raise OSError(ctypes.get_errno(), "inotify_init1")
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def add(self, name: str, path: str, notify: str = "") -> None:
        """Watch ``path``; a write to ``notify`` (default: ``path``) triggers a read (cgroup v2: the kernel
        changes cpuset.cpus.effective without a write to it: writes go to cpuset.cpus)."""
        fd = os.open(path, os.O_RDONLY)
        wd = self._libc.inotify_add_watch(self._ifd, os.fsencode(notify or path), IN_MODIFY)
        if wd < 0:
            raise OSError(ctypes.get_errno(), f"inotify on {notify or path}")
        with self._lock:
            self._fds[name] = fd
            self._wds[wd] = name
            self.transitions.setdefault(name, [])
            self.writes.setdefault(name, 0)
            self._sample(name, fd)

    def remove(self, name: str) -> None:
        with self._lock:
            fd = self._fds.pop(name, None)
        if fd is not None:
            os.close(fd)
            self.transitions[name].append((time.monotonic(), None))

    def value(self, name: str) -> Optional[str]:
        seen = self.transitions.get(name) or [(0.0, None)]
        return seen[-1][1]

    def _sample(self, name: str, fd: int) -> None:
        try:
            value: Optional[str] = os.pread(fd, 4096, 0).decode("ascii").strip()
        except OSError:
            value = None
        history = self.transitions[name]
        if not history or history[-1][1] != value:
            history.append((time.monotonic(), value))

    def _run(self) -> None:
        while not self._stop.is_set():
            with self._lock:
                for name, fd in list(self._fds.items()):
                    self._sample(name, fd)
            self.samples += 1
            ready, _, _ = select.select([self._ifd], [], [], self.pause)
            if ready:
                self._events()

    def _events(self) -> None:
        try:
            data = os.read(self._ifd, 65536)
        except BlockingIOError:
            return
        with self._lock:
            for at in range(0, len(data), EVENT.size):
                wd, _mask, _cookie, length = EVENT.unpack_from(data, at)
                name = self._wds.get(wd)
                if name in self._fds:
                    self.writes[name] += 1
                    self._sample(name, self._fds[name])

    def __enter__(self) -> "PoolWatcher":
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join(timeout=10)
        for name in list(self._fds):
            self.remove(name)
        os.close(self._ifd)

    def summary(self) -> Dict[str, List[Tuple[float, Optional[str]]]]:
        return {k: [(round(t, 4), v) for t, v in h] for k, h in self.transitions.items()}


class Window(NamedTuple):
    """A claim held by ``owner`` (and the containers ``sharing`` it, one pod's) from ``start`` to ``end``."""

    owner: str
    cpus: frozenset
    start: float
    end: float
    sharing: Tuple[str, ...] = ()


def find_violations(transitions: Dict[str, List[Tuple[float, Optional[str]]]], windows: Iterable[Window],
                    until: float, excluded: Iterable[Tuple[float, float]] = ()) -> List[str]:
    """Every time another container's set held a claimed CPU while the claim was held (``excluded``:
    time spans where the invariant is not expected, e.g. while no plugin runs)."""
    out: List[str] = []
    excluded = list(excluded)
    for w in windows:
        for name, history in transitions.items():
            if name == w.owner or name in w.sharing:
                continue
            for (t, value), nxt in zip(history, history[1:] + [(until, None)]):
                lo, hi = max(t, w.start), min(nxt[0], w.end)
                if value is None or lo >= hi or not parse_cpus(value) & w.cpus:
                    continue
                if any(a <= lo and hi <= b for a, b in excluded):
                    continue
                out.append(f"{name} held {value} for {hi - lo:.4f} s while {w.owner} held claim "
                           f"{format_cpus(w.cpus)} (from {lo:.4f})")
    return out
