"""A second NRI plugin that pins every container's CPUs, as the CPU DRA driver's NRI half does.

``python nri_clash_plugin.py SOCKET NAME INDEX CPUS``: connects to the runtime's NRI socket,
registers as ``INDEX-NAME`` (the driver registers as ``00-dra.cpu``), subscribes to
CreateContainer and answers every one with ``linux.resources.cpu.cpus = CPUS`` in the adjustment,
the field this product's plugin sets too. containerd/nri's adaptation (pkg/adaptation/result.go,
``owners.claimCpusetCpus``) lets one plugin own a container's cpuset per request and fails the
request when a second one sets it: "plugins %q and %q both tried to set CPU pinning".

Built on the project's own wire modules (mixed_cpus_hook.frontends.nri.wire: the multiplexer,
ttrpc framing, NRI messages); single-threaded, blocking, prints "registered" once the runtime
accepted it, exits when the runtime closes the connection or on SIGTERM.
"""

from __future__ import annotations

import signal
import socket
import sys

from mixed_cpus_hook.frontends.nri.wire import api, mux, ttrpc


def serve(path: str, name: str, index: str, cpus: str) -> int:
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    sock.connect(path)
    demux = mux.Demux()
    readers = {mux.PLUGIN_SERVICE_CONN: ttrpc.FrameReader(), mux.RUNTIME_SERVICE_CONN: ttrpc.FrameReader()}
    client = ttrpc.Client()

    def configure(call: ttrpc.Call) -> bytes:
        return api.ConfigureResponse(events=api.event_mask("CREATE_CONTAINER")).SerializeToString()

    def synchronize(call: ttrpc.Call) -> bytes:
        more = api.READ["SynchronizeRequest"].FromString(call.payload).more
        return api.SynchronizeResponse(more=more).SerializeToString()

    def create(call: ttrpc.Call) -> bytes:
        reply = api.CreateContainerResponse()
        reply.adjust.linux.resources.cpu.cpus = cpus
        return reply.SerializeToString()

    server = ttrpc.Server({(api.PLUGIN_SERVICE, "Configure"): configure,
                           (api.PLUGIN_SERVICE, "Synchronize"): synchronize,
                           (api.PLUGIN_SERVICE, "CreateContainer"): create,
                           (api.PLUGIN_SERVICE, "Shutdown"): lambda call: api.Empty().SerializeToString()})
    _sid, frame = client.request(api.RUNTIME_SERVICE, "RegisterPlugin",
                                 api.RegisterPluginRequest(plugin_name=name, plugin_idx=index).SerializeToString())
    sock.sendall(mux.format_frames(mux.RUNTIME_SERVICE_CONN, frame))
    while True:
        data = sock.recv(1 << 16)
        if not data:
            return 0
        for conn_id, payload in demux.feed(data):
            for f in readers[conn_id].feed(payload):
                if conn_id == mux.RUNTIME_SERVICE_CONN:
                    _sid, method, _payload, error = client.response(f)
                    print(f"{method}: {error or 'registered'}", flush=True)
                    if error is not None:
                        return 1
                    continue
                out = server.handle(f)
                if out is not None:
                    sock.sendall(mux.format_frames(mux.PLUGIN_SERVICE_CONN, out))


def main(argv: list) -> int:
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    return serve(*argv[1:5])


if __name__ == "__main__":
    sys.exit(main(sys.argv))
