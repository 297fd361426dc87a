"""A runtime that misbehaves, and the plugin as a real process on a fake node.

``PluginProcess`` runs ``mixed-cpus-hook nri --socket PATH`` (what systemd runs) on a fake node
and plays the runtime's listening socket; ``HostilePeer`` is the runtime's end of a connection
(tests/unit/nri/peer.py's, which also checks every mux frame the plugin sends against Go's
4096-byte reader), able to send what no runtime should: raw bytes, pipelined and split requests,
frames for unknown streams and connections, and to stop reading. ``Served`` runs one hostile
case: the case, then a *canary* request that must be answered within ``CANARY_LIMIT``, then the
check that the fake node changed nowhere but where the case allows.
"""

from __future__ import annotations

import os
import select
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, Callable, Dict, Iterable, List, NamedTuple, Optional, Sequence, Tuple

from mixed_cpus_hook.frontends.nri.wire import api, mux, ttrpc
from mixed_cpus_hook.store.records import read_journal_size

from .peer import POD_UID, Answer, RuntimePeer, create_request, pod_and_container

REPO = Path(__file__).resolve().parents[3]
CANARY_LIMIT = 0.1  # seconds: the plugin still serves, promptly, after every case
CANARY = "ca" * 32
CANARY_UID = "cccccccc-0000-4000-8000-00000000000c"
APP = "a1" * 32  # admitted at start-up: the tracked container of update cases
APP_UID = POD_UID


class HostilePeer(RuntimePeer):
    """The runtime's end of one connection; answers for other streams are kept in ``stray``."""

    def __init__(self, sock: socket.socket) -> None:
        super().__init__(sock)
        self.stray: List[ttrpc.Frame] = []

    def answer(self, sid: int) -> Answer:
        while True:
            frame = self.read_frame()
            if frame.stream_id == sid:
                break
            self.stray.append(frame)
        assert frame.type == ttrpc.TYPE_RESPONSE, frame
        resp = ttrpc.ResponseMessage.FromString(frame.data)
        return Answer(resp.payload if resp.status.code == 0 else None, resp.status.code, resp.status.message)

    def request(self, method: str, payload: bytes, sid: Optional[int] = None, chunk: int = mux.CHUNK,
                service: str = api.PLUGIN_SERVICE) -> int:
        """Send a request without waiting for its answer; its stream id."""
        sid = self.next_sid if sid is None else sid
        self.next_sid = max(self.next_sid, sid + 1) | 1
        self.send(mux.PLUGIN_SERVICE_CONN, ttrpc.format_request(sid, service, method, payload), chunk)
        return sid

    def wait_closed(self, timeout: float = 10.0) -> bool:
        """Read (and keep) whatever comes until the plugin closes the connection; False on timeout."""
        end = time.monotonic() + timeout
        while time.monotonic() < end:
            try:
                self.sock.settimeout(max(0.01, end - time.monotonic()))
                self._pump()
            except (EOFError, ConnectionResetError, BrokenPipeError):
                return True
            except socket.timeout:
                return False
            finally:
                if not self.closed:
                    self.sock.settimeout(10)
        return False

    def close(self) -> None:
        self.closed = True
        self.sock.close()


class PluginProcess:
    """``python -m mixed_cpus_hook -v nri --socket PATH ...`` on ``node``; this object is the runtime."""

    def __init__(self, node: Any, workdir: str, cache_dir: str, args: Sequence[str] = ()) -> None:
        self.node = node
        self.socket_path = os.path.join(workdir, "nri.sock")
        self.listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.listener.bind(self.socket_path)
        self.listener.listen(4)
        self.log_path = os.path.join(workdir, "plugin.log")
        self._log = open(self.log_path, "wb")  # a file, not a pipe: a full pipe would block the plugin
        env = dict(os.environ, MIXED_CPUS_HOOK_CACHE_DIR=cache_dir, MIXED_CPUS_HOOK_CONFIG=node.config_path,
                   MIXED_CPUS_HOOK_NO_SYSLOG="1", PYTHONPATH=str(REPO / "hook"))
        env.pop("JOURNAL_STREAM", None)
        argv = [sys.executable, "-m", "mixed_cpus_hook", "-v", "nri", "--socket", self.socket_path,
                "--reconcile-interval", "0", *args]
        self.proc = subprocess.Popen(argv, env=env, stdin=subprocess.DEVNULL, stdout=self._log, stderr=self._log)

    def accept(self, timeout: float = 15.0) -> HostilePeer:
        """The plugin's next connection (it connects at start and after every drop)."""
        ready, _, _ = select.select([self.listener], [], [], timeout)
        assert ready, f"the plugin did not connect within {timeout} s; its log:\n{self.log()[-3000:]}"
        conn, _ = self.listener.accept()
        return HostilePeer(conn)

    def alive(self) -> bool:
        return self.proc.poll() is None

    def log(self) -> str:
        with open(self.log_path, "rb") as f:
            return f.read().decode("utf-8", "replace")

    def log_size(self) -> int:
        return os.path.getsize(self.log_path)

    def rss(self) -> int:
        """Resident memory of the plugin, in bytes (/proc/<pid>/status VmRSS)."""
        with open(f"/proc/{self.proc.pid}/status", encoding="ascii") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) * 1024
        raise AssertionError("no VmRSS")

    def stop(self, sig: int = signal.SIGTERM, timeout: float = 10.0) -> Tuple[int, float]:
        """(exit code, seconds from the signal to the exit)."""
        start = time.monotonic()
        self.proc.send_signal(sig)
        code = self.proc.wait(timeout)
        return code, time.monotonic() - start

    def close(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()
        self.listener.close()
        self._log.close()


def node_containers(node: Any) -> None:
    """The fake node every hostile case starts from (online 0-7, shared 0-1): the canary's
    container, the tracked APP, and the cgroups (not yet admitted) of the cases' containers."""
    node.add_container(CANARY, pod_uid=CANARY_UID, cpus="7", quota=100000, pod_quota=100000)
    node.add_container(APP, pod_uid=APP_UID, cpus="2-3", quota=200000, pod_quota=200000)
    for cid, uid, cpus in SPARE:
        node.add_container(cid, pod_uid=uid, cpus=cpus, quota=100000, pod_quota=100000)


# Containers with cgroups on the node, admitted by no one at start: the cases' subjects.
X = "e5" * 32
X_UID = "eeeeeeee-0000-4000-8000-00000000000e"
Y = "f6" * 32
Y_UID = "ffffffff-0000-4000-8000-00000000000f"
SPARE = [(X, X_UID, "5"), (Y, Y_UID, "6")]
UIDS = {CANARY: CANARY_UID, APP: APP_UID, X: X_UID, Y: Y_UID}


def canary_request() -> Any:
    return create_request(CANARY, pod_uid=CANARY_UID, cpus="7", quota=100000)


def listed() -> Tuple[List[Any], List[Any]]:
    """What the runtime lists in Synchronize after a reconnect: the canary and APP, as adjusted."""
    pod_c, ctr_c = pod_and_container(CANARY, pod_uid=CANARY_UID, cpus="0-1,7", quota=300000)
    pod_a, ctr_a = pod_and_container(APP, pod_uid=APP_UID, cpus="0-1,2-3", quota=400000)
    return [pod_c, pod_a], [ctr_c, ctr_a]


class Case(NamedTuple):
    """One hostile case: ``act(served)`` does it (and checks the answers); ``setup`` prepares the
    node first (not counted as a change); ``drops``: the connection ends (the plugin's doing or the
    peer's), so the canary goes over the plugin's next one; ``allowed``: containers whose own cgroup
    files, pod quota and records may change; ``log_limit``: bytes the case may add to the log."""

    act: Callable[["Served"], None]
    setup: Optional[Callable[["Served"], None]] = None
    drops: bool = False
    allowed: Tuple[str, ...] = ()
    log_limit: int = 64 << 10


class Served:
    """The module's plugin process, its current connection, and the cases' bookkeeping."""

    def __init__(self, node: Any, plugin: PluginProcess) -> None:
        self.node = node
        self.plugin = plugin
        self.peer: HostilePeer = plugin.accept()
        self.times: Dict[str, float] = {}
        self.slowest = 0.0
        self.peer.handshake()

    def handshake(self) -> None:
        """Register, Configure and Synchronize as a runtime does after a reconnect: listing what runs."""
        pods, containers = listed()
        self.peer.handshake(pods, containers)

    def reconnect(self) -> None:
        if not self.peer.closed:
            assert self.peer.wait_closed(), "the plugin did not drop the connection"
            self.peer.close()
        self.peer = self.plugin.accept()
        self.handshake()

    def call(self, method: str, msg: Any, chunk: int = mux.CHUNK) -> Answer:
        """One request and its answer; the time from sending it to the answer is kept (the case's worst)."""
        payload = msg if isinstance(msg, bytes) else msg.SerializeToString()
        start = time.monotonic()
        answer = self.peer.call_raw(method, payload, chunk)
        self.slowest = max(self.slowest, time.monotonic() - start)
        return answer

    def canary(self) -> float:
        start = time.monotonic()
        resp = self.peer.call("CreateContainer", canary_request(), api.CreateContainerResponse)
        took = time.monotonic() - start
        assert resp.adjust.linux.resources.cpu.cpus == "0-1,7", resp
        return took

    def allowed_paths(self, cids: Iterable[str]) -> List[str]:
        """The files a case may change for these containers: their own cgroup directories (a
        trailing "/": everything below), their pods' quota files and their records (and their pods')."""
        out = []
        for cid in cids:
            uid = UIDS[cid]
            rel = f"kubepods/pod{uid}/crio-{cid}"
            out += [os.path.dirname(self.node.path(rel, name)) + "/" for name in ("cpuset.cpus", self.node.quota_name())]
            out += [self.node.path(f"kubepods/pod{uid}", self.node.quota_name()),
                    os.path.join(self.node.state_dir, "containers", cid + ".json"),
                    os.path.join(self.node.state_dir, "pods", f"pod{uid}.json")]
        return out

    def settled(self) -> None:
        """Wait until the records of the answers given so far are on the node. The plugin journals
        them in the state lock's file before its answer and writes them after it, then empties the
        journal (store/records.py): an empty journal is the barrier. Without it a loaded machine let
        the start's last creation land its records inside the first case."""
        wait_for(lambda: read_journal_size(self.node.state_dir) == 0, what="the plugin's records after its answer")

    def run(self, name: str, case: Case) -> None:
        if case.setup is not None:
            case.setup(self)
        self.settled()
        before = self.node.snapshot()
        log_before = self.plugin.log_size()
        self.slowest = 0.0
        try:
            case.act(self)
            DURATIONS[name] = self.slowest
        finally:
            if case.drops or self.peer.closed:
                self.reconnect()
        took = self.canary()
        self.times[name] = took
        assert self.plugin.alive(), f"the plugin died: {self.plugin.log()[-3000:]}"
        self.settled()
        allowed = self.allowed_paths(case.allowed)
        changed = [p for p in self.node.changes(before)
                   if not any(p.startswith(a) if a.endswith("/") else p == a for a in allowed)]
        assert changed == [], f"written outside the case's containers: {changed}"
        assert self.peer.stray == [], f"answers nobody asked for: {self.peer.stray[:3]}"
        grown = self.plugin.log_size() - log_before
        assert grown <= case.log_limit, f"the case logged {grown} bytes (at most {case.log_limit})"
        assert took <= CANARY_LIMIT, f"the canary took {took * 1000:.0f} ms (limit {CANARY_LIMIT * 1000:.0f} ms)"


def start_served(node_class: type, workdir: str, cache_dir: str, args: Sequence[str] = ()) -> Served:
    node = node_class(os.path.join(workdir, "node"), version=2, online="0-7", shared="0-1")
    node_containers(node)
    plugin = PluginProcess(node, workdir, cache_dir, args)
    try:
        served = Served(node, plugin)
        served.canary()  # admits the canary: every later canary is answered from its record
        served.call("CreateContainer", create_request(APP, pod_uid=APP_UID, cpus="2-3", quota=200000))
    except BaseException:
        plugin.close()
        raise
    return served


def wait_for(predicate: Callable[[], bool], timeout: float = 10.0, what: str = "") -> None:
    end = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < end, f"timed out waiting for {what}"
        time.sleep(0.01)


# Every canary time, by case, for the summary at the end of the run (tests/unit/nri/conftest.py),
# and each case's slowest answer to a request sent with Served.call (from sending it: the wait of
# a request right behind it).
ANSWER_TIMES: Dict[str, float] = {}
DURATIONS: Dict[str, float] = {}
