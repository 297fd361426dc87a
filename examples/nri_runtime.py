"""A small NRI runtime: containerd's side of one plugin connection, for `make demo` (no containerd).

It listens on a unix socket, accepts the plugin (`mixed-cpus-hook nri --socket PATH`), answers its
RegisterPlugin (the Runtime service, mux connection 2), and calls the Plugin service on mux
connection 1 as containerd/nri's adaptation does (pkg/adaptation/plugin.go): Configure,
Synchronize, then one event at a time (CreateContainer, UpdateContainer, StopContainer,
RemoveContainer). It speaks the wire with the package's own multiplexer, ttrpc framing and NRI
messages (mixed_cpus_hook.frontends.nri); it makes no cgroup itself: the demo plays runc with what the
plugin answers. Single-threaded: every call waits for its answer (2 s per call, NRI's default).
"""

from __future__ import annotations

import os
import socket
from typing import Any, Dict, List, Optional

from mixed_cpus_hook.testing.fakenode import cgroups_path
from mixed_cpus_hook.frontends.nri.wire import api, mux, ttrpc

REQUEST_TIMEOUT = 2.0  # containerd's plugin_request_timeout default


class DemoRuntime:
    """The runtime end: ``accept`` the plugin, then ``call`` its methods."""

    def __init__(self, path: str) -> None:
        self.path = path
        self.listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.listener.bind(path)
        self.listener.listen(1)
        self.sock: Optional[socket.socket] = None
        self.demux = mux.Demux()
        self.readers = {mux.PLUGIN_SERVICE_CONN: ttrpc.FrameReader(), mux.RUNTIME_SERVICE_CONN: ttrpc.FrameReader()}
        self.client = ttrpc.Client()
        self.server = ttrpc.Server({(api.RUNTIME_SERVICE, "RegisterPlugin"): self._register})
        self.registered: List[Any] = []
        self.answers: Dict[int, Any] = {}

    def _register(self, call: ttrpc.Call) -> bytes:
        self.registered.append(api.RegisterPluginRequest.FromString(call.payload))
        return api.Empty().SerializeToString()

    def accept(self, timeout: float = 30.0) -> api.RegisterPluginRequest:
        """Wait for the plugin to connect and register; its RegisterPluginRequest."""
        self.listener.settimeout(timeout)
        self.sock, _ = self.listener.accept()
        self.sock.settimeout(timeout)
        while not self.registered:
            self._pump()
        self.sock.settimeout(REQUEST_TIMEOUT)
        return self.registered[0]

    def _pump(self) -> None:
        data = self.sock.recv(1 << 16)
        if not data:
            raise EOFError("the plugin closed the connection")
        for conn_id, payload in self.demux.feed(data):
            for frame in self.readers[conn_id].feed(payload):
                if conn_id == mux.RUNTIME_SERVICE_CONN:  # the plugin calls us: RegisterPlugin
                    out = self.server.handle(frame)
                    if out is not None:
                        self.sock.sendall(mux.format_frames(mux.RUNTIME_SERVICE_CONN, out))
                else:  # an answer to one of our calls
                    sid, method, payload_bytes, error = self.client.response(frame)
                    self.answers[sid] = error if error is not None else payload_bytes

    def call(self, method: str, request: Any, reply_class: Any) -> Any:
        """Call a Plugin method and wait for its answer (raises ttrpc.RpcError for an error answer)."""
        sid, frame = self.client.request(api.PLUGIN_SERVICE, method, request.SerializeToString(),
                                         int(REQUEST_TIMEOUT * 1e9))
        self.sock.sendall(mux.format_frames(mux.PLUGIN_SERVICE_CONN, frame))
        while sid not in self.answers:
            self._pump()
        answer = self.answers.pop(sid)
        if isinstance(answer, ttrpc.RpcError):
            raise answer
        return reply_class.FromString(answer)

    def handshake(self) -> Any:
        """Configure and an empty Synchronize, as a runtime does after registration; the ConfigureResponse."""
        configured = self.call("Configure", api.ConfigureRequest(runtime_name="demo-runtime", runtime_version="1",
                                                                 request_timeout=int(REQUEST_TIMEOUT * 1000)),
                               api.ConfigureResponse)
        self.call("Synchronize", api.SynchronizeRequest(), api.SynchronizeResponse)
        return configured

    def close(self) -> None:
        for s in (self.sock, self.listener):
            if s is not None:
                s.close()
        if os.path.exists(self.path):
            os.unlink(self.path)


def subscribed(configured: Any) -> List[str]:
    """The event names a ConfigureResponse subscribes to."""
    return [name for name, number in api.EVENTS.items() if number and configured.events & (1 << (number - 1))]


def pod_and_container(cid: str, name: str, pod_uid: str, namespace: str, pod_name: str, annotations: Dict[str, str],
                      cpus: str, quota: int) -> Any:
    """NRI's PodSandbox and Container as containerd describes a new container (cgroupfs driver)."""
    pod = api.PodSandbox(id="sandbox-" + pod_uid[:8], name=pod_name, uid=pod_uid, namespace=namespace)
    pod.annotations.update(annotations)
    pod.linux.cgroup_parent = "/kubepods/pod" + pod_uid
    ctr = api.Container(id=cid, name=name, pod_sandbox_id=pod.id, state=api.CONTAINER_STATES["CONTAINER_CREATED"])
    ctr.linux.cgroups_path = cgroups_path("cgroupfs", pod_uid, cid)
    cpu = ctr.linux.resources.cpu
    cpu.cpus, cpu.period.value, cpu.quota.value = cpus, 100000, quota
    return pod, ctr
