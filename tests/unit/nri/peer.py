"""An in-test NRI runtime: the runtime's end of the plugin's socket, driven by the test.

It plays the part of containerd/nri's adaptation (pkg/adaptation/plugin.go): it serves the
Runtime service on mux connection 2 (RegisterPlugin), and calls the Plugin service on
connection 1. It can also send raw bytes, which a real runtime never would: the error paths.
"""

from __future__ import annotations

import socket
import threading
import time
from typing import Any, Callable, List, Optional, Sequence, Tuple

from mixed_cpus_hook.frontends.nri.plugin import Identity, Plugin
from mixed_cpus_hook.frontends.nri.wire import api, mux, ttrpc


class Answer:
    """A response to one call: ``payload`` (bytes) or ``code``/``message`` of an error status."""

    def __init__(self, payload: Optional[bytes], code: int, message: str) -> None:
        self.payload, self.code, self.message = payload, code, message

    def decode(self, cls: Any) -> Any:
        assert self.code == ttrpc.OK, f"error {self.code}: {self.message}"
        return cls.FromString(self.payload)


class RuntimePeer:
    def __init__(self, sock: socket.socket, register_error: Optional[str] = None) -> None:
        self.sock = sock
        self.sock.settimeout(10)
        self.demux = mux.Demux()
        self.readers = {1: ttrpc.FrameReader(), 2: ttrpc.FrameReader()}
        self.next_sid = 1
        # Called once an answer is read: a peer of an in-thread plugin waits there for its log.
        self.settle: Callable[[], None] = lambda: None
        self.registered: List[Any] = []
        self.register_error = register_error
        self.frames: List[Tuple[int, ttrpc.Frame]] = []
        self.closed = False

    def send_raw(self, data: bytes) -> None:
        self.sock.sendall(data)

    def send(self, conn_id: int, data: bytes, chunk: int = mux.CHUNK) -> None:
        self.sock.sendall(mux.format_frames(conn_id, data, chunk))

    def _pump(self) -> None:
        data = self.sock.recv(1 << 16)
        if not data:
            self.closed = True
            raise EOFError("the plugin closed the connection")
        for conn_id, payload in self.demux.feed(data):
            assert len(payload) <= mux.CHUNK, f"mux frame of {len(payload)} bytes: Go's reader would fail it"
            for frame in self.readers[conn_id].feed(payload):
                if conn_id == mux.RUNTIME_SERVICE_CONN:
                    self._serve_runtime(frame)
                else:
                    self.frames.append((conn_id, frame))

    def _serve_runtime(self, frame: ttrpc.Frame) -> None:
        call = ttrpc.parse_request(frame)
        assert (call.service, call.method) == (api.RUNTIME_SERVICE, "RegisterPlugin"), call
        self.registered.append(api.RegisterPluginRequest.FromString(call.payload))
        if self.register_error:
            out = ttrpc.format_response(frame.stream_id, code=ttrpc.INVALID_ARGUMENT, message=self.register_error)
        else:
            out = ttrpc.format_response(frame.stream_id, api.Empty().SerializeToString())
        self.send(mux.RUNTIME_SERVICE_CONN, out)

    def wait_registered(self) -> Any:
        while not self.registered:
            self._pump()
        return self.registered[-1]

    def read_frame(self) -> ttrpc.Frame:
        while not self.frames:
            self._pump()
        return self.frames.pop(0)[1]

    def answer(self, sid: int) -> Answer:
        frame = self.read_frame()
        assert frame.stream_id == sid and frame.type == ttrpc.TYPE_RESPONSE, frame
        self.settle()
        resp = ttrpc.ResponseMessage.FromString(frame.data)
        return Answer(resp.payload if resp.status.code == 0 else None, resp.status.code, resp.status.message)

    def call_raw(self, method: str, payload: bytes, chunk: int = mux.CHUNK, sid: Optional[int] = None) -> Answer:
        sid = self.next_sid if sid is None else sid
        self.next_sid = max(self.next_sid, sid + 1) | 1  # the next odd id above every one used
        self.send(mux.PLUGIN_SERVICE_CONN, ttrpc.format_request(sid, api.PLUGIN_SERVICE, method, payload), chunk)
        return self.answer(sid)

    def call(self, method: str, msg: Any, reply_cls: Any = None, chunk: int = mux.CHUNK) -> Any:
        answer = self.call_raw(method, msg.SerializeToString(), chunk)
        return answer if reply_cls is None else answer.decode(reply_cls)

    def handshake(self, pods: Sequence[Any] = (), containers: Sequence[Any] = ()) -> Any:
        """Register (answered), Configure and Synchronize, as a runtime does; the Synchronize reply."""
        self.wait_registered()
        self.call("Configure", api.ConfigureRequest(runtime_name="peer", runtime_version="0", request_timeout=2000),
                  api.ConfigureResponse)
        return self.call("Synchronize", api.SynchronizeRequest(pods=pods, containers=containers),
                         api.SynchronizeResponse)


DEFAULT_IDENTITY = Identity("mixed-cpus-hook", "10")


class Running:
    """A plugin serving one end of a socketpair in a thread; the test holds the peer."""

    def __init__(self, handlers: Any, reporter: Any, register_error: Optional[str] = None,
                 reconcile_interval: float = 0, registration_timeout: float = 5.0,
                 identity: Identity = DEFAULT_IDENTITY, watch: Any = None,
                 clock: Callable[[], float] = time.monotonic) -> None:
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        self.plugin = Plugin(handlers, identity, reporter, reconcile_interval=reconcile_interval,
                             registration_timeout=registration_timeout, watch=watch, clock=clock)
        self.peer = RuntimePeer(theirs, register_error)
        self.peer.settle = self.settle
        self.code: Optional[int] = None
        connect: Callable[[], socket.socket] = iter([ours]).__next__
        self.thread = threading.Thread(target=self._run, args=(connect,), daemon=True)
        self.thread.start()

    def settle(self, timeout: float = 5.0) -> None:
        """Wait until the plugin logged what the request just answered did: it logs once the
        answer is sent (the peer may read the answer first)."""
        end = time.monotonic() + timeout
        while self.plugin.reporter.holding and self.thread.is_alive() and time.monotonic() < end:
            time.sleep(0.0005)

    def _run(self, connect: Callable[[], socket.socket]) -> None:
        self.code = self.plugin.run(connect, reconnect=False)

    def finish(self, timeout: float = 10) -> Optional[int]:
        self.plugin.stop()
        self.thread.join(timeout)
        assert not self.thread.is_alive(), "the plugin did not stop"
        self.peer.sock.close()
        self.plugin.close()
        return self.code


POD_UID = "0f1e2d3c-aaaa-bbbb-cccc-123456789abc"


def pod_and_container(cid: str, name: str = "app", pod_uid: str = POD_UID, cpus: str = "2-3",
                      quota: Optional[int] = 200000, ask: Optional[str] = "enable", namespace: str = "ran",
                      state: int = 1) -> Tuple[Any, Any]:
    """NRI's PodSandbox and Container for a fake node's container (cgroupfs driver), as containerd sends."""
    from mixed_cpus_hook.testing.fakenode import cgroups_path

    pod = api.PodSandbox(id="sandbox-" + pod_uid[:8], name="du-0", uid=pod_uid, namespace=namespace)
    if ask is not None:
        pod.annotations[f"mixed-cpus.openshift.io/{name}"] = ask
    pod.linux.cgroup_parent = "/kubepods/pod" + pod_uid
    ctr = api.Container(id=cid, name=name, pod_sandbox_id=pod.id, state=state)
    ctr.linux.cgroups_path = cgroups_path("cgroupfs", pod_uid, cid)
    cpu = ctr.linux.resources.cpu
    cpu.cpus = cpus
    cpu.period.value = 100000
    if quota is not None:
        cpu.quota.value = quota
    return pod, ctr


def create_request(cid: str, **kwargs: Any) -> Any:
    pod, ctr = pod_and_container(cid, **kwargs)
    return api.CreateContainerRequest(pod=pod, container=ctr)
