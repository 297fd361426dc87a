"""kubelet's side of the NRI tests: pods and containers over CRI, the NRI plugin process, a cgroup watcher.

* :class:`Kube` makes pods as kubelet's cgroupfs driver does (the pod cgroup
  ``<top>/kubepods/pod<uid>`` made first, with a CFS quota, then ``RunPodSandbox`` with it as
  ``cgroup_parent`` and the pod's annotations), containers with ``linux.resources`` (cpuset,
  quota, period), and reads what a container got: its cgroup files, ``Cpus_allowed_list`` of its
  init process (/proc/1 inside, through ``ExecSync``) and its environment.
* :class:`Plugin` runs ``mixed-cpus-hook --config CFG nri --socket SOCK`` in the foreground as a
  child (its own session, stopped by pid) and waits until containerd has synchronized it.
* :class:`Watcher` samples a cgroup file as fast as it can in a thread while something runs
  (and counts inotify IN_MODIFY events on it), so a transient value cannot slip by unseen.
"""

from __future__ import annotations

import ctypes
import json
import os
import select
import signal
import struct
import subprocess
import threading
import time
import uuid
from typing import Callable, Dict, List, Optional

try:
    from .containerd import BUSYBOX_IMAGE, Containerd
    from .helpers import hook_executable, read_file, write_file
except ImportError:  # collected as top-level modules (rootdir-relative)
    from containerd import BUSYBOX_IMAGE, Containerd  # type: ignore[no-redef]
    from helpers import hook_executable, read_file, write_file  # type: ignore[no-redef]

CGROUP_ROOT = "/sys/fs/cgroup"
PREFIX = "mixed-cpus.openshift.io"
PERIOD = 100000
IN_MODIFY = 0x2
PLUGIN_READY_TIMEOUT = 30.0


def cgroup_v2() -> bool:
    """A pure cgroup v2 layout (the VM): no v1 cpuset hierarchy, controllers at the root."""
    return os.path.isfile(f"{CGROUP_ROOT}/cgroup.controllers") and not os.path.isdir(f"{CGROUP_ROOT}/cpuset")


def parse_quota(text: str, v2: bool) -> int:
    """The CFS quota of cpu.cfs_quota_us (v1) or cpu.max "<quota|max> <period>" (v2); -1 = unlimited."""
    value = text.split()[0] if v2 else text
    return -1 if value == "max" else int(value)


def wait_for(read: Callable[[], object], expected: object, timeout: float, pause: float = 0.05) -> object:
    """Poll ``read()`` until it returns ``expected`` or the time is up; returns the last value."""
    deadline = time.monotonic() + timeout
    while True:
        value = read()
        if value == expected or time.monotonic() > deadline:
            return value
        time.sleep(pause)


class PodHandle:
    """A pod sandbox: its CRI id and config, its cgroup (relative path) and uid."""

    def __init__(self, pod_id: str, config, rel: str, uid: str, v2: bool) -> None:
        self.id, self.config, self.rel, self.uid, self.v2 = pod_id, config, rel, uid, v2

    def quota(self) -> int:
        if self.v2:
            return parse_quota(read_file(f"{CGROUP_ROOT}{self.rel}/cpu.max"), True)
        return parse_quota(read_file(f"{CGROUP_ROOT}/cpu{self.rel}/cpu.cfs_quota_us"), False)


class Kube:
    """kubelet's CRI calls against one containerd, inside one test's top cgroup (``top``)."""

    def __init__(self, ctd: Containerd, top: str, log_dir: str) -> None:
        self.ctd, self.top, self.log_dir = ctd, top, log_dir
        self.v2 = cgroup_v2()
        self.exec_timeout = 20
        os.makedirs(log_dir, exist_ok=True)

    @property
    def cri(self):
        return self.ctd.cri

    def pod_cgroup(self, quota: int, period: int = PERIOD) -> tuple:
        """``<top>/kubepods/pod<uid>`` made as kubelet does, its CFS quota set first.

        v1: in the cpuset and cpu hierarchies, cpus/mems copied down; v2: ``+cpuset +cpu`` in the
        subtree_control of every level (kubelet's parents have them), cpu.max written.
        """
        uid = str(uuid.uuid4())
        rel = f"{self.top}/kubepods/pod{uid}"
        for controller in (("",) if self.v2 else ("cpuset", "cpu")):
            cur = f"{CGROUP_ROOT}/{controller}".rstrip("/")
            if self.v2:
                write_file(f"{cur}/cgroup.subtree_control", "+cpuset +cpu")
            for part in rel.strip("/").split("/"):
                parent, cur = cur, f"{cur}/{part}"
                if not os.path.isdir(cur):
                    os.mkdir(cur)  # removed with the whole top by the caller (conftest.Node.cleanup)
                if self.v2:
                    write_file(f"{cur}/cgroup.subtree_control", "+cpuset +cpu")
                elif controller == "cpuset":
                    for f in ("cpuset.cpus", "cpuset.mems"):
                        if not read_file(f"{cur}/{f}"):
                            write_file(f"{cur}/{f}", read_file(f"{parent}/{f}"))
        if self.v2:  # -1: no limit ("max")
            write_file(f"{CGROUP_ROOT}{rel}/cpu.max", f"{'max' if quota < 0 else quota} {period}")
        else:
            write_file(f"{CGROUP_ROOT}/cpu{rel}/cpu.cfs_period_us", str(period))
            write_file(f"{CGROUP_ROOT}/cpu{rel}/cpu.cfs_quota_us", str(quota))
        return rel, uid

    def pod(self, name: str = "du", namespace: str = "mixed-ns", annotations: Optional[Dict[str, str]] = None,
            quota: int = 200000, asks: str = "app", value: str = "enable") -> PodHandle:
        """A pod whose annotation asks mixed CPUs for container ``asks`` (none when empty)."""
        rel, uid = self.pod_cgroup(quota)
        ann = dict(annotations or {})
        if asks:
            ann[f"{PREFIX}/{asks}"] = value
        config = self.cri.sandbox_config(name, uid, namespace, rel, ann, os.path.join(self.log_dir, uid))
        return PodHandle(self.cri.run_pod(config), config, rel, uid, self.v2)

    def container(self, pod: PodHandle, name: str = "app", cpus: str = "1", quota: int = 100000,
                  period: int = PERIOD, start: bool = True, command: Optional[List[str]] = None) -> str:
        res = self.cri.resources(cpus, quota, period, shares=1024)
        cid = self.cri.create(pod.id, pod.config, name, BUSYBOX_IMAGE, command or ["sleep", "3600"], res,
                              annotations={"io.kubernetes.container.name": name})
        if start:
            self.cri.start(cid)
        return cid

    def update(self, cid: str, cpus: str = "1", quota: int = 0, period: int = 0) -> None:
        """kubelet's UpdateContainerResources: the CPU manager's rewrite (cpuset only) or a resize."""
        self.cri.update(cid, self.cri.resources(cpus, quota, period))

    # what a container got -----------------------------------------------------------
    def cgroup(self, pod: PodHandle, cid: str, controller: str) -> str:
        """The container's cgroup dir for ``controller`` (v2: the one hierarchy)."""
        return f"{CGROUP_ROOT}{pod.rel}/{cid}" if self.v2 else f"{CGROUP_ROOT}/{controller}{pod.rel}/{cid}"

    def quota_file(self, pod: PodHandle, cid: str) -> str:
        return self.cgroup(pod, cid, "cpu") + ("/cpu.max" if self.v2 else "/cpu.cfs_quota_us")

    def values(self, pod: PodHandle, cid: str) -> Dict[str, object]:
        """cpuset.cpus and CFS quota of the container's cgroup, and its pod's quota (v2: and the
        effective cpuset, which is what the kernel granted)."""
        out = {"cpus": read_file(f"{self.cgroup(pod, cid, 'cpuset')}/cpuset.cpus"),
               "quota": parse_quota(read_file(self.quota_file(pod, cid)), self.v2),
               "pod_quota": pod.quota()}
        if self.v2:
            out["effective"] = read_file(f"{self.cgroup(pod, cid, 'cpuset')}/cpuset.cpus.effective")
        return out

    def pid(self, cid: str) -> int:
        return int(json.loads(self.cri.status(cid, verbose=True).info["info"])["pid"])

    def inside(self, cid: str) -> Dict[str, str]:
        """Cpus_allowed_list of PID 1 in the container and its OPENSHIFT_* environment, read inside."""
        script = "grep Cpus_allowed_list: /proc/1/status; tr '\\0' '\\n' < /proc/1/environ | grep ^OPENSHIFT_ || true"
        rc, out, err = self.cri.exec_sync(cid, ["sh", "-c", script], timeout=self.exec_timeout)
        assert rc == 0, f"exec in {cid} exited {rc}: {err}"
        got = {}
        for line in out.splitlines():
            if line.startswith("Cpus_allowed_list:"):
                got["Cpus_allowed_list"] = line.split(":", 1)[1].strip()
            elif "=" in line:
                k, v = line.split("=", 1)
                got[k] = v
        return got

    def cleanup(self) -> List[str]:
        """Every pod over CRI, then the processes left in this test's cgroups (by pid)."""
        problems = self.ctd.remove_pods()
        self.ctd.owned_cgroups = [self.top]
        killed = self.ctd.kill_leftovers()
        if killed:
            problems.append(f"container processes left after pod removal (killed): {killed}")
        return problems


class Plugin:
    """The NRI plugin as a foreground child process; ``stop`` / ``kill`` by pid."""

    def __init__(self, config_path: str, socket_path: str, log_path: str, ctd: Containerd,
                 env: Optional[Dict[str, str]] = None, reconcile_interval: Optional[float] = None) -> None:
        self.config_path, self.socket_path, self.log_path, self.ctd = config_path, socket_path, log_path, ctd
        self.env = dict(os.environ, **(env or {}))
        self.env.pop("MIXED_CPUS_HOOK_CONFIG", None)
        self.proc: Optional[subprocess.Popen] = None
        self.argv = [hook_executable(), "-v", "--config", config_path, "nri", "--socket", socket_path]
        if reconcile_interval is not None:  # the periodic reconcile, made frequent enough to be exercised
            self.argv += ["--reconcile-interval", f"{reconcile_interval:g}"]
        self.ready_timeout = PLUGIN_READY_TIMEOUT

    def start(self, wait: bool = True) -> None:
        assert self.proc is None or self.proc.poll() is not None, "plugin already running"
        mark = self.ctd.log_mark()
        with open(self.log_path, "ab") as log:
            self.proc = subprocess.Popen(self.argv, stdin=subprocess.DEVNULL, stdout=log, stderr=log,
                                         env=self.env, start_new_session=True)
        if wait:
            self.wait_synchronized(mark)

    def wait_synchronized(self, mark: int, timeout: Optional[float] = None) -> None:
        """Until containerd's log (after ``mark``) says the plugin is synchronized."""
        timeout = timeout or self.ready_timeout
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc is not None and self.proc.poll() is not None:
                raise AssertionError(f"plugin exited {self.proc.returncode}:\n{self.log()}")
            if self.ctd.plugin_synchronized(mark):
                return
            time.sleep(0.05)
        raise AssertionError(f"plugin not synchronized within {timeout} s\nplugin log:\n{self.log()}\n"
                             f"containerd log:\n{self.ctd.log_since(mark)[-4000:]}")

    def log(self) -> str:
        try:
            with open(self.log_path, encoding="utf-8", errors="replace") as f:
                return f.read()[-8000:]
        except OSError:
            return ""

    def running(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def stop(self, sig: int = signal.SIGTERM, timeout: float = 10.0) -> Optional[int]:
        """Signal the plugin (by pid) and wait; SIGKILL when it does not exit in time. Its exit code."""
        if self.proc is None:
            return None
        if self.proc.poll() is None:
            self.proc.send_signal(sig)
            try:
                self.proc.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=timeout)
        return self.proc.returncode

    def kill(self) -> Optional[int]:
        return self.stop(signal.SIGKILL)


class Watcher:
    """Sample one cgroup file in a tight loop (a thread) and count inotify IN_MODIFY events on it."""

    def __init__(self, path: str, pause: float = 0.0) -> None:
        self.path, self.pause = path, pause  # pause: between samples (the emulated VM has little CPU)
        self.seen: Dict[str, int] = {}
        self.samples = 0
        self.transitions: List[tuple] = []  # (time.perf_counter(), value) whenever the sampled value changed
        self.event_times: List[float] = []  # when inotify batches arrived
        self.events = 0
        self.after_event: List[str] = []  # the value read right after each batch of events
        self._stop = threading.Event()
        libc = ctypes.CDLL(None, use_errno=True)
        self.ifd = libc.inotify_init1(os.O_NONBLOCK | os.O_CLOEXEC)
        if self.ifd < 0 or libc.inotify_add_watch(self.ifd, os.fsencode(path), IN_MODIFY) < 0:
            raise OSError(ctypes.get_errno(), f"inotify on {path}")
        self.fd = os.open(path, os.O_RDONLY)
        self._threads = [threading.Thread(target=self._poll, daemon=True),
                         threading.Thread(target=self._inotify, daemon=True)]

    def _read(self) -> str:
        return os.pread(self.fd, 4096, 0).decode("ascii").strip()

    def _poll(self) -> None:
        last = None
        while not self._stop.is_set():
            v = self._read()
            if v != last:
                self.transitions.append((time.perf_counter(), v))
                last = v
            self.seen[v] = self.seen.get(v, 0) + 1
            self.samples += 1
            if self.pause:
                time.sleep(self.pause)

    def _inotify(self) -> None:
        while not self._stop.is_set():
            ready, _, _ = select.select([self.ifd], [], [], 0.05)
            if ready:
                try:
                    data = os.read(self.ifd, 65536)
                except BlockingIOError:
                    continue
                self.event_times.append(time.perf_counter())
                self.events += len(data) // struct.calcsize("iIII")
                self.after_event.append(self._read())

    def __enter__(self) -> "Watcher":
        for t in self._threads:
            t.start()
        return self

    def __exit__(self, *exc) -> None:
        time.sleep(0.05)  # let a last event arrive
        self._stop.set()
        for t in self._threads:
            t.join(timeout=5)
        os.close(self.fd)
        os.close(self.ifd)

    def values(self) -> set:
        return set(self.seen) | set(self.after_event)

    def time_at(self, value: str, until: float) -> float:
        """Seconds the sampled file held ``value`` (up to ``until``, a perf_counter() time)."""
        total = 0.0
        for (t, v), nxt in zip(self.transitions, self.transitions[1:] + [(until, None)]):
            if v == value:
                total += max(0.0, min(nxt[0], until) - t)
        return total
