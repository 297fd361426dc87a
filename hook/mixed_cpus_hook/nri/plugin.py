"""The long-running NRI plugin: one unix connection to the runtime, served until it goes away.

Single-threaded and blocking: ``poll`` on the socket (and a wake-up pipe for signals) with a
timeout that is the next periodic reconcile, so an idle plugin uses no CPU. A request is
handled as it arrives and answered before the next is read; the engine's work per request
is a few file reads and writes, far inside NRI's 2 s request timeout.

Flow (containerd/nri pkg/stub/stub.go, pkg/adaptation/plugin.go): connect (or use the
pre-connected socket whose fd is in NRI_PLUGIN_SOCKET), multiplex it, serve the Plugin service
on connection 1, call Runtime/RegisterPlugin on connection 2; the runtime answers, calls
Configure (possibly before the answer arrives) and Synchronize, then sends the events asked
for. When the connection drops the plugin reconnects with backoff and is synchronized
again; the records make that lossless.
"""

from __future__ import annotations

import errno
import os
import re
import select
import signal
import socket
import time
import traceback
from typing import Callable, Dict, Mapping, NamedTuple, Optional, Tuple

from google.protobuf.message import DecodeError

from ..errors import HookError, UsageError
from ..log import Reporter
from ..telemetry import Telemetry
from . import api, mux, ttrpc
from .handlers import Handlers, RequestFailed

DEFAULT_SOCKET = "/var/run/nri/nri.sock"
DEFAULT_NAME = "mixed-cpus-hook"
DEFAULT_INDEX = "10"
NAME_ENV, INDEX_ENV, SOCKET_ENV = "NRI_PLUGIN_NAME", "NRI_PLUGIN_IDX", "NRI_PLUGIN_SOCKET"
REGISTRATION_TIMEOUT = 5.0  # api.DefaultPluginRegistrationTimeout
SLOW_REQUEST = 1.0  # warn when a request took this long (NRI's default timeout is 2 s)
BACKOFF_FIRST, BACKOFF_MAX = 0.2, 5.0
RECV_SIZE = 1 << 16
NAME_RE = re.compile(r"[A-Za-z0-9_.+-]+\Z")
INDEX_RE = re.compile(r"[0-9][0-9]\Z")

# Plugin service method -> (request class, Handlers method). Shutdown is the plugin's own.
METHODS = {
    "Configure": (api.ConfigureRequest, "configure"),
    "Synchronize": (api.SynchronizeRequest, "synchronize"),
    "CreateContainer": (api.CreateContainerRequest, "create_container"),
    "UpdateContainer": (api.UpdateContainerRequest, "update_container"),
    "StopContainer": (api.StopContainerRequest, "stop_container"),
    "RemoveContainer": (api.RemoveContainerRequest, "remove_container"),
    "StateChange": (api.StateChangeEvent, "state_change"),
}


class Identity(NamedTuple):
    name: str
    index: str


def compute_identity(name: Optional[str], index: Optional[str], environ: Mapping[str, str],
                     argv0: str) -> Identity:
    """Name and index: options, else NRI_PLUGIN_NAME/NRI_PLUGIN_IDX (a runtime-launched plugin),
    else an ``NN-name`` executable name (/opt/nri/plugins/NN-name), else the defaults."""
    name = name or environ.get(NAME_ENV) or None
    index = index or environ.get(INDEX_ENV) or None
    base = os.path.basename(argv0)
    parts = base.split("-", 1)
    if len(parts) == 2 and INDEX_RE.match(parts[0]):
        name, index = name or parts[1], index or parts[0]
    name, index = name or DEFAULT_NAME, index or DEFAULT_INDEX
    if not NAME_RE.match(name):
        raise UsageError(f"plugin name {name!r} may only hold letters, digits and _.+-", "nri")
    if not INDEX_RE.match(index):
        raise UsageError(f"plugin index {index!r} is not two digits", "nri")
    return Identity(name, index)


def parse_socket_fd(environ: Mapping[str, str]) -> Optional[int]:
    """The pre-connected socket's fd (NRI_PLUGIN_SOCKET, set by the runtime that launched us)."""
    value = environ.get(SOCKET_ENV, "")
    if not value:
        return None
    if not value.isdigit():
        raise UsageError(f"{SOCKET_ENV}={value!r} is not a file descriptor number", "nri")
    return int(value)


class Plugin:
    """Serves one runtime connection at a time; ``run`` reconnects until stopped."""

    def __init__(self, handlers: Handlers, identity: Identity, reporter: Reporter,
                 reconcile_interval: float = 10.0, registration_timeout: float = REGISTRATION_TIMEOUT,
                 clock: Callable[[], float] = time.monotonic, telemetry: Optional[Telemetry] = None) -> None:
        self.handlers = handlers
        self.telemetry = telemetry or handlers.telemetry
        self.identity = identity
        self.reporter = reporter
        self.reconcile_interval = reconcile_interval
        self.registration_timeout = registration_timeout
        self.clock = clock
        self.stopping = False
        self.configured = False
        self.requests = 0
        self._wake_r, self._wake_w = os.pipe()
        os.set_blocking(self._wake_r, False)
        os.set_blocking(self._wake_w, False)
        self._next_reconcile = clock() + reconcile_interval if reconcile_interval > 0 else None
        self._server = ttrpc.Server(self._method_table(), on_error=self._log_protocol)

    # -- lifecycle ---------------------------------------------------------------------------
    def stop(self) -> None:
        """Ask the loop to end (signal handlers and other threads may call it)."""
        self.stopping = True
        try:
            os.write(self._wake_w, b"x")
        except OSError:
            pass

    def close(self) -> None:
        for fd in (self._wake_r, self._wake_w):
            try:
                os.close(fd)
            except OSError:
                pass

    def install_signals(self) -> None:
        for sig in (signal.SIGTERM, signal.SIGINT):
            signal.signal(sig, lambda signum, frame: self.stop())

    # -- requests ----------------------------------------------------------------------------
    def _log_protocol(self, message: str) -> None:
        self.reporter.error(f"nri: {message}")

    def _method_table(self) -> Dict[Tuple[str, str], ttrpc.Handler]:
        table: Dict[Tuple[str, str], ttrpc.Handler] = {}
        for method, (req_class, attr) in METHODS.items():
            table[(api.PLUGIN_SERVICE, method)] = self._wrap(method, req_class, getattr(self.handlers, attr))
        table[(api.PLUGIN_SERVICE, "Shutdown")] = self._wrap("Shutdown", api.Empty, self._shutdown)
        return table

    def _wrap(self, method: str, req_class: type, handler: Callable) -> ttrpc.Handler:
        def call(c: ttrpc.Call) -> bytes:
            self.requests += 1
            try:
                req = req_class.FromString(c.payload)
            except (DecodeError, ValueError) as exc:
                raise ttrpc.RpcError(ttrpc.INVALID_ARGUMENT, f"{method}: undecodable request: {exc}") from None
            start = self.clock()
            try:
                reply = handler(req)
            except RequestFailed as exc:  # the handler counted the error
                raise ttrpc.RpcError(ttrpc.UNKNOWN, str(exc)) from None
            except HookError as exc:
                self.telemetry.error(method, exc.kind)
                raise ttrpc.RpcError(ttrpc.UNKNOWN, f"mixed-cpus-hook: {exc.kind}: {exc}") from None
            except Exception as exc:  # noqa: BLE001 - one bad request must not end the plugin
                self.telemetry.error(method, "internal")
                self.reporter.error(f"nri: {method}: internal error: {exc!r}: "
                                    + " | ".join(traceback.format_exc().strip().splitlines()[-3:]))
                raise ttrpc.RpcError(ttrpc.INTERNAL, f"mixed-cpus-hook: internal error in {method}: {exc!r}") from None
            finally:
                self.telemetry.request(method, self.clock() - start)
            took = self.clock() - start
            if took > SLOW_REQUEST:
                self.reporter.warning(f"nri: {method} took {took:.2f} s (the runtime gives up after 2 s)")
            if method == "Configure":
                self.configured = True
                self.telemetry.set_connected(True)
            return reply.SerializeToString()
        return call

    def _shutdown(self, req: "api.Empty") -> "api.Empty":
        self.reporter.info("nri: the runtime is shutting down")
        return api.Empty()

    # -- one connection ------------------------------------------------------------------------
    def _send(self, sock: socket.socket, conn_id: int, data: bytes) -> None:
        sock.sendall(mux.format_frames(conn_id, data))

    def _maybe_reconcile(self) -> None:
        if self._next_reconcile is not None and self.clock() >= self._next_reconcile:
            self.handlers.reconcile()
            self._next_reconcile = self.clock() + self.reconcile_interval

    def _timeout(self, deadline: Optional[float]) -> Optional[float]:
        """Seconds until the next thing to do (None: block until the socket or a signal)."""
        times = [t for t in (self._next_reconcile, deadline) if t is not None]
        return max(0.0, min(times) - self.clock()) if times else None

    def _drain_wake(self) -> None:
        try:
            while os.read(self._wake_r, 512):
                pass
        except OSError:
            pass

    def wait(self, seconds: float) -> None:
        """Sleep (between connection attempts) yet reconcile on time and wake for stop()."""
        end = self.clock() + seconds
        poller = select.poll()
        poller.register(self._wake_r, select.POLLIN)
        while not self.stopping and self.clock() < end:
            timeout = min(t for t in (end, self._next_reconcile or end))
            poller.poll(max(0.0, timeout - self.clock()) * 1000)
            self._drain_wake()
            self._maybe_reconcile()

    def serve(self, sock: socket.socket) -> str:
        """Register on ``sock`` and serve it until it closes; returns why it ended."""
        self.configured = False
        self.handlers.connected()
        self._server.last_stream_id = 0
        demux = mux.Demux()
        readers = {mux.PLUGIN_SERVICE_CONN: ttrpc.FrameReader(), mux.RUNTIME_SERVICE_CONN: ttrpc.FrameReader()}
        client = ttrpc.Client()
        reg = api.RegisterPluginRequest(plugin_name=self.identity.name, plugin_idx=self.identity.index)
        _sid, frame = client.request(api.RUNTIME_SERVICE, "RegisterPlugin", reg.SerializeToString(),
                                     timeout_nano=int(self.registration_timeout * 1e9))
        self._send(sock, mux.RUNTIME_SERVICE_CONN, frame)
        deadline: Optional[float] = self.clock() + self.registration_timeout
        poller = select.poll()
        poller.register(sock.fileno(), select.POLLIN)
        poller.register(self._wake_r, select.POLLIN)
        while True:
            timeout = self._timeout(deadline)
            events = poller.poll(None if timeout is None else timeout * 1000)
            if self.stopping:
                return "stopped"
            self._drain_wake()
            if any(fd == sock.fileno() for fd, _ in events):
                try:
                    data = sock.recv(RECV_SIZE)
                except OSError as exc:
                    return f"connection lost: {exc.strerror or exc}"
                if not data:
                    return "connection closed by the runtime"
                try:
                    chunks = demux.feed(data)
                except mux.MuxError as exc:
                    return f"protocol error: {exc}"
                for conn_id, payload in chunks:
                    reader = readers.get(conn_id)
                    if reader is None:
                        self.reporter.error(f"nri: mux: {len(payload)} bytes for connection {conn_id} dropped "
                                            "(only 1 and 2 are NRI's)")
                        continue
                    for frame in reader.feed(payload):
                        if conn_id == mux.PLUGIN_SERVICE_CONN:
                            out = self._server.handle(frame)
                            if out is not None:
                                self._send(sock, conn_id, out)
                        else:
                            failure = self._client_answer(client, frame)
                            if failure:
                                return failure
            if deadline is not None and self.configured:
                deadline = None
            elif deadline is not None and self.clock() >= deadline:
                return f"not configured by the runtime within {self.registration_timeout:g} s of registering"
            self._maybe_reconcile()

    def _client_answer(self, client: ttrpc.Client, frame: ttrpc.Frame) -> Optional[str]:
        """Handle the answer to one of our calls; a reason to drop the connection, or None."""
        try:
            _sid, method, _payload, err = client.response(frame)
        except ttrpc.ProtocolError as exc:
            self.reporter.error(f"nri: {exc} (ignored)")
            return None
        if err is not None:
            return f"{method} refused: {err.message} (code {err.code})"
        if method.endswith("/RegisterPlugin"):
            self.reporter.info(f"nri: registered as {self.identity.index}-{self.identity.name}")
        return None

    # -- the whole life ---------------------------------------------------------------------------
    def run(self, connect: Callable[[], socket.socket], reconnect: bool = True) -> int:
        """Connect, serve, and (with ``reconnect``) reconnect with backoff until stopped.

        Returns the exit code: 0 when stopped (or, without ``reconnect``, when the runtime
        closed the connection), 1 when a single connection ended for any other reason.
        """
        backoff = BACKOFF_FIRST
        down_since: Optional[str] = None
        while not self.stopping:
            try:
                sock = connect()
            except OSError as exc:
                if not reconnect:
                    self.reporter.error(f"nri: cannot connect: {exc.strerror or exc}")
                    return 1
                if down_since is None:
                    down_since = f"{exc.strerror or exc}"
                    self.reporter.warning(f"nri: cannot connect to the runtime ({down_since}); retrying")
                self.wait(backoff)
                backoff = min(backoff * 2, BACKOFF_MAX)
                continue
            down_since = None
            try:
                why = self.serve(sock)
            finally:
                sock.close()
                self.telemetry.set_connected(False)
            if self.configured:
                backoff = BACKOFF_FIRST
            if self.stopping:
                break
            level = "info" if why == "connection closed by the runtime" else "error"
            self.reporter.emit(level, f"nri: {why}" + ("; reconnecting" if reconnect else ""))
            if not reconnect:
                return 0 if level == "info" else 1
            self.wait(backoff)
            backoff = min(backoff * 2, BACKOFF_MAX)
        return 0


def connect_unix(path: str) -> Callable[[], socket.socket]:
    def connect() -> socket.socket:
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            sock.connect(path)
        except OSError:
            sock.close()
            raise
        return sock
    return connect


def connect_fd(fd: int) -> Callable[[], socket.socket]:
    """The runtime's pre-connected socket; a second connect is impossible (ENOTCONN)."""
    used = [False]

    def connect() -> socket.socket:
        if used[0]:
            raise OSError(errno.ENOTCONN, "the runtime's pre-connected socket is gone")
        used[0] = True
        return socket.socket(fileno=fd)
    return connect


def main(config, socket_path: Optional[str], name: Optional[str], index: Optional[str],
         reconcile_interval: float, reporter: Reporter, environ: Optional[Mapping[str, str]] = None,
         argv0: str = "", metrics_address: Optional[str] = None) -> int:
    """``mixed-cpus-hook nri``: run the plugin in the foreground until SIGTERM/SIGINT.

    ``metrics_address``: serve /metrics and /healthz there (nri/httpd.py) while the plugin runs.
    """
    env = os.environ if environ is None else environ
    identity = compute_identity(name, index, env, argv0)
    fd = None if socket_path else parse_socket_fd(env)
    plugin = Plugin(Handlers(config, reporter), identity, reporter, reconcile_interval=reconcile_interval)
    http = None
    if metrics_address:
        from .httpd import TelemetryServer  # noqa: PLC0415 - http.server only when asked for

        http = TelemetryServer(metrics_address, plugin.telemetry)
        host, port = http.start()
        reporter.info(f"nri: /metrics and /healthz on {host}:{port}")
    plugin.install_signals()
    where = f"fd {fd} from the runtime" if fd is not None else (socket_path or DEFAULT_SOCKET)
    reporter.info(f"nri: plugin {identity.index}-{identity.name} starting on {where}")
    try:
        if fd is not None:
            return plugin.run(connect_fd(fd), reconnect=False)
        return plugin.run(connect_unix(socket_path or DEFAULT_SOCKET), reconnect=True)
    finally:
        plugin.close()
        if http is not None:
            http.stop()
