"""The long-running NRI plugin: one unix connection to the runtime, served until it goes away.

Single-threaded: ``poll`` on the non-blocking socket (and a wake-up pipe for signals) with a
timeout that is the next periodic reconcile, so an idle plugin uses no CPU. Requests are
handled in order as they arrive; the engine's work per request is a few file reads and
writes, far inside NRI's 2 s request timeout. Answers go to an outbound buffer that the loop
drains as the runtime reads: a runtime that stops reading never blocks the plugin. While the
buffer holds more than bounds.MAX_OUTBOUND no further request is read, and a runtime that
reads nothing for bounds.WRITE_TIMEOUT is dropped (the plugin reconnects). SIGTERM and SIGINT
end the loop within one request, whatever it was doing.

Flow (containerd/nri pkg/stub/stub.go, pkg/adaptation/plugin.go): connect (or use the
pre-connected socket whose fd is in NRI_PLUGIN_SOCKET), multiplex it, serve the Plugin service
on connection 1, call Runtime/RegisterPlugin on connection 2; the runtime answers, calls
Configure (possibly before the answer arrives) and Synchronize, then sends the events asked
for. When the connection drops the plugin reconnects with backoff and is synchronized
again; the records make that lossless.
"""

from __future__ import annotations

import collections
import errno
import os
import re
import select
import signal
import socket
import time
import traceback
from typing import TYPE_CHECKING, Any, Callable, Deque, Dict, Mapping, NamedTuple, Optional, Tuple

from google.protobuf.message import DecodeError

from ...core.bounds import MAX_OUTBOUND, REPEAT_LOG_INTERVAL, WRITE_TIMEOUT, quote
from ...core.errors import HookError, UsageError
from ...node.config import Config
from ...node.log import Reporter
from ...usecases.telemetry import Telemetry
from .handlers import Handlers, Interrupted, RequestFailed
from .wire import api, mux, ttrpc

if TYPE_CHECKING:
    from ...node.inotify import FileWatch
    from ...usecases.nri import NriEngine

DEFAULT_SOCKET = "/var/run/nri/nri.sock"
DEFAULT_NAME = "mixed-cpus-hook"
DEFAULT_INDEX = "10"
NAME_ENV, INDEX_ENV, SOCKET_ENV = "NRI_PLUGIN_NAME", "NRI_PLUGIN_IDX", "NRI_PLUGIN_SOCKET"
REGISTRATION_TIMEOUT = 5.0  # api.DefaultPluginRegistrationTimeout
SLOW_REQUEST = 1.0  # warn when a request took this long (NRI's default timeout is 2 s)
BACKOFF_FIRST, BACKOFF_MAX = 0.2, 5.0
RECV_SIZE = 1 << 16
POLLIN, POLLOUT, POLLHUP_ERR = select.POLLIN, select.POLLOUT, select.POLLHUP | select.POLLERR
NAME_RE = re.compile(r"[A-Za-z0-9_.+-]+\Z")
INDEX_RE = re.compile(r"[0-9][0-9]\Z")

# Plugin service method -> (request class, Handlers method). Shutdown is the plugin's own.
# Requests are decoded into api.READ's classes: only the fields the plugin reads, maps as entries.
METHODS = {
    "Configure": (api.READ["ConfigureRequest"], "configure"),
    "Synchronize": (api.READ["SynchronizeRequest"], "synchronize"),
    "CreateContainer": (api.READ["CreateContainerRequest"], "create_container"),
    "UpdateContainer": (api.READ["UpdateContainerRequest"], "update_container"),
    "StopContainer": (api.READ["StopContainerRequest"], "stop_container"),
    "RemoveContainer": (api.READ["RemoveContainerRequest"], "remove_container"),
    "StateChange": (api.READ["StateChangeEvent"], "state_change"),
    # NRI >= 0.12 sends StartContainer as its own call (older ones as a StateChange event).
    "StartContainer": (api.READ["StartContainerRequest"], "start_container"),
}


class Identity(NamedTuple):
    name: str
    index: str  # type: ignore[assignment]  # shadows tuple.index: NRI's word for it (NRI_PLUGIN_IDX)


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


class RepeatLog:
    """Errors that a runtime can repeat without end (frames for an unknown connection, malformed
    requests): the first of a kind is logged, the next ones only counted, with one summary line
    at most every ``interval`` seconds and when the connection ends. A kind is the message with
    its numbers taken out (stream ids and lengths differ between repeats)."""

    def __init__(self, reporter: Reporter, clock: Callable[[], float], interval: float = REPEAT_LOG_INTERVAL) -> None:
        self.reporter = reporter
        self.clock = clock
        self.interval = interval
        self._seen: Dict[str, list] = {}  # kind -> [count since the last line, time of the last line, message]

    def error(self, message: str) -> None:
        kind = re.sub(r"[0-9]+", "N", message[:200])
        now = self.clock()
        entry = self._seen.get(kind)
        if entry is None:
            if len(self._seen) >= 1000:  # kinds are few; a flood of new ones is summarized as it goes
                self.flush()
            self._seen[kind] = [0, now, message]
            self.reporter.error(message)
            return
        entry[0] += 1
        entry[2] = message
        if now - entry[1] >= self.interval:
            self._summary(entry)
            entry[0], entry[1] = 0, now

    def _summary(self, entry: list) -> None:
        if entry[0]:
            self.reporter.error(f"{entry[2]} ({entry[0]} like it since the last report)")

    def flush(self) -> None:
        for entry in self._seen.values():
            self._summary(entry)
        self._seen.clear()


class Outbox:
    """Bytes for the runtime, sent as fast as it reads them and never blocking the plugin."""

    def __init__(self, sock: socket.socket, clock: Callable[[], float]) -> None:
        self.sock = sock
        self.clock = clock
        self._chunks: Deque[bytes] = collections.deque()
        self.pending = 0
        self.since = 0.0  # when the runtime last took a byte (or the buffer went from empty to not)

    def add(self, data: bytes) -> None:
        if not self.pending:
            self.since = self.clock()
        self._chunks.append(data)
        self.pending += len(data)

    def flush(self) -> None:
        """Send what the socket takes now; OSError when the connection is gone."""
        while self._chunks:
            head = self._chunks[0]
            try:
                n = self.sock.send(head)
            except (BlockingIOError, InterruptedError):
                return
            self.since = self.clock()
            self.pending -= n
            if n == len(head):
                self._chunks.popleft()
            else:
                self._chunks[0] = head[n:]
                return

    def stalled(self, timeout: float) -> bool:
        return bool(self.pending) and self.clock() - self.since >= timeout


def format_traceback_tail() -> str:
    """Where the exception being handled was raised, in one line: the last frame of its traceback
    (file, line, function and source), for a log line that a bug must not end the plugin with."""
    return " | ".join(traceback.format_exc().strip().splitlines()[-3:-1])


def defer_writes(engine: "NriEngine") -> None:
    """What the engine writes for an event waits until the answers are sent (after_answer): its
    reports, and its records (journaled in the state lock's file meanwhile: store.records)."""
    engine.defer_reports = True
    engine.lock.journaling = True
    engine.lock.watching = True


class Plugin:
    """Serves one runtime connection at a time; ``run`` reconnects until stopped."""

    def __init__(self, handlers: Handlers, identity: Identity, reporter: Reporter,
                 reconcile_interval: float = 10.0, registration_timeout: float = REGISTRATION_TIMEOUT,
                 clock: Callable[[], float] = time.monotonic, write_timeout: float = WRITE_TIMEOUT,
                 telemetry: Optional[Telemetry] = None, watch: Optional["FileWatch"] = None) -> None:
        """``watch``: kubelet's checkpoint (node/inotify.FileWatch); when it says the file changed and
        no request is waiting, the node's facts are read then (Handlers.refresh), not on the next
        request's path."""
        self.handlers = handlers
        self.watch = watch
        defer_writes(handlers.engine)
        self._note_watch()
        self.telemetry = telemetry or handlers.engine.telemetry
        self.identity = identity
        self.reporter = reporter
        self.reconcile_interval = reconcile_interval
        self.registration_timeout = registration_timeout
        self.write_timeout = write_timeout
        self.clock = clock
        self.stopping = False
        handlers.stopping = lambda: self.stopping
        self._repeats = RepeatLog(reporter, clock)
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
        if self.watch is not None:
            self.watch.close()

    def install_signals(self) -> None:
        for sig in (signal.SIGTERM, signal.SIGINT):
            signal.signal(sig, lambda signum, frame: self.stop())

    # -- requests ----------------------------------------------------------------------------
    def _log_protocol(self, message: str) -> None:
        self._repeats.error(f"nri: {message}")

    def _method_table(self) -> Dict[Tuple[str, str], ttrpc.Handler]:
        table: Dict[Tuple[str, str], ttrpc.Handler] = {}
        for method, (req_class, attr) in METHODS.items():
            # A handler may decode its own requests (Synchronize: bounded before it is decoded).
            decode = getattr(self.handlers, f"decode_{attr}", req_class.FromString)
            table[(api.PLUGIN_SERVICE, method)] = self._wrap(method, decode, getattr(self.handlers, attr))
        table[(api.PLUGIN_SERVICE, "Shutdown")] = self._wrap("Shutdown", api.Empty.FromString, self._shutdown)
        return table

    def _wrap(self, method: str, decode: Callable[[bytes], Any], handler: Callable) -> ttrpc.Handler:
        def call(c: ttrpc.Call) -> bytes:
            self.requests += 1
            try:
                req = decode(c.payload)
            except (DecodeError, ValueError, RecursionError) as exc:
                raise ttrpc.RpcError(ttrpc.INVALID_ARGUMENT, f"{method}: undecodable request: {quote(str(exc))}") from None
            start = self.clock()
            took = 0.0
            try:
                reply = handler(req).SerializeToString()
            except RequestFailed as exc:
                raise ttrpc.RpcError(ttrpc.UNKNOWN, str(exc)) from None
            except HookError as exc:
                self.telemetry.error(method, exc.kind)
                raise ttrpc.RpcError(ttrpc.UNKNOWN, f"mixed-cpus-hook: {exc.kind}: {exc}") from None
            except Interrupted:
                raise ttrpc.RpcError(ttrpc.UNAVAILABLE, f"mixed-cpus-hook: {method}: the plugin is stopping") from None
            except Exception as exc:  # noqa: BLE001 - one bad request must not end the plugin
                self.telemetry.error(method, "internal")
                where = format_traceback_tail()
                self.reporter.error(f"nri: {method}: internal error: {quote(exc)}: {where}")
                raise ttrpc.RpcError(ttrpc.INTERNAL, f"mixed-cpus-hook: internal error in {method}: {quote(exc)}") from None
            finally:
                took = self.clock() - start
                self.telemetry.request(method, took)
            if took > SLOW_REQUEST:
                self.reporter.warning(f"nri: {method} took {took:.2f} s (the runtime gives up after 2 s)")
            if method == "Configure":
                self.configured = True
                self.telemetry.set_connected(True)
            return reply
        return call

    def _shutdown(self, req: "api.Empty") -> "api.Empty":
        self.reporter.info("nri: the runtime is shutting down")
        return api.Empty()

    # -- one connection ------------------------------------------------------------------------
    def _maybe_reconcile(self) -> None:
        if self._next_reconcile is not None and self.clock() >= self._next_reconcile:
            try:
                self.handlers.reconcile()
            except Exception as exc:  # noqa: BLE001 - a bug in one reconcile must not end the plugin
                self.reporter.error(f"nri: reconcile: internal error: {quote(exc)}: " + format_traceback_tail())
            if self.watch is not None:
                self.watch.ensure()  # kubelet's directory made since (a node where kubelet started later)
                self._note_watch()
            self._next_reconcile = self.clock() + self.reconcile_interval

    def _note_watch(self) -> None:
        """Kubelet's checkpoint watched (inotify loaded): the record folders are watched from the next
        use of the state lock on (store.records.HeldStateLock.watch_from_now), not only once a node
        holds many records: what held the watch back (ctypes' memory) is paid already."""
        if self.watch is not None and self.watch.fileno() is not None:
            self.handlers.engine.lock.watch_from_now()

    def _refresh(self) -> None:
        """The watch saw kubelet's checkpoint change and no request is waiting: read it now."""
        try:
            self.handlers.refresh()
        except Exception as exc:  # noqa: BLE001 - a bug here must not end the plugin; the next request reads again
            self.reporter.error(f"nri: reading the node's facts: internal error: {quote(exc)}: " + format_traceback_tail())

    def _timeout(self, deadline: Optional[float], out: Optional[Outbox] = None) -> Optional[float]:
        """Seconds until the next thing to do (None: block until the socket or a signal)."""
        first = self._next_reconcile  # the earliest of it, the deadline and the stalled answer's (one turn each)
        if deadline is not None and (first is None or deadline < first):
            first = deadline
        if out is not None and out.pending:
            stalled = out.since + self.write_timeout
            if first is None or stalled < first:
                first = stalled
        return None if first is None else max(0.0, first - self.clock())

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
        """Register on ``sock`` and serve it until it closes; returns why it ended.

        Whatever goes wrong ends this connection only (a bug outside any one request, say): the
        plugin reconnects as after a runtime restart.
        """
        try:
            return self._serve(sock)
        except Exception as exc:  # noqa: BLE001 - nothing the runtime sends may end the process
            return f"internal error: {quote(exc)}: " + format_traceback_tail()
        finally:
            self._repeats.flush()

    def is_stopping(self) -> bool:
        """Whether stop() was called (a signal handler may call it at any moment)."""
        return self.stopping

    def _read(self, sock: socket.socket, demux: mux.Demux, readers: Dict[int, ttrpc.FrameReader],
              inbox: Deque[Tuple[int, ttrpc.Frame]]) -> Optional[str]:
        """Read what the runtime sent into ``inbox`` (frames per connection); a reason to drop it, or None."""
        try:
            data = sock.recv(RECV_SIZE)
        except (BlockingIOError, InterruptedError):
            return None
        except OSError as exc:
            return f"connection lost: {exc.strerror or exc}"
        if not data:
            return "connection closed by the runtime"
        try:
            chunks = demux.feed(data)
        except mux.MuxError as exc:
            return f"protocol error: {exc}"
        dropped: Dict[int, int] = {}
        for conn_id, payload in chunks:
            reader = readers.get(conn_id)
            if reader is None:
                dropped[conn_id] = dropped.get(conn_id, 0) + len(payload)
                continue
            for frame in reader.feed(payload):
                inbox.append((conn_id, frame))
        for conn_id, size in dropped.items():  # one line per read, not per frame
            self._repeats.error(f"nri: mux: {size} bytes for connection {conn_id} dropped (only 1 and 2 are NRI's)")
        return None

    def _serve(self, sock: socket.socket) -> str:
        self.configured = False
        self.handlers.connected()
        self._server.last_stream_id = 0
        sock.setblocking(False)
        out = Outbox(sock, self.clock)
        demux = mux.Demux()
        readers = {mux.PLUGIN_SERVICE_CONN: ttrpc.FrameReader(), mux.RUNTIME_SERVICE_CONN: ttrpc.FrameReader()}
        inbox: Deque[Tuple[int, ttrpc.Frame]] = collections.deque()  # frames read, not yet handled
        client = ttrpc.Client()
        reg = api.RegisterPluginRequest(plugin_name=self.identity.name, plugin_idx=self.identity.index)
        _sid, register = client.request(api.RUNTIME_SERVICE, "RegisterPlugin", reg.SerializeToString(),
                                        timeout_nano=int(self.registration_timeout * 1e9))
        out.add(mux.format_frames(mux.RUNTIME_SERVICE_CONN, register))
        deadline: Optional[float] = self.clock() + self.registration_timeout
        poller = select.poll()
        poller.register(self._wake_r, select.POLLIN)
        fd = sock.fileno()
        registered = -1
        watched: Optional[int] = None  # the watch's descriptor registered with the poller
        while True:
            # Handle what was read while the answers fit; read more only once all is handled.
            # What the handlers log is logged once their answers are sent (off the runtime's clock).
            self.reporter.hold()
            try:
                while inbox and out.pending < MAX_OUTBOUND and not self.stopping:
                    conn_id, frame = inbox.popleft()
                    failure = self._handle_frame(client, conn_id, frame, out)
                    if failure:
                        return failure
                if self.stopping:
                    return "stopped"
                try:
                    out.flush()
                except OSError as exc:
                    return f"connection lost: {exc.strerror or exc}"
            finally:
                self.handlers.after_answer()
                self.reporter.release()
            if out.stalled(self.write_timeout):
                return (f"the runtime read nothing of {out.pending} bytes of answers for {self.write_timeout:g} s: "
                        "connection dropped")
            events = (POLLIN if not inbox and out.pending < MAX_OUTBOUND else 0) | (POLLOUT if out.pending else 0)
            if events != registered:
                poller.register(fd, events)  # re-registering replaces the mask
                registered = events
            if self.watch is not None:
                watched = self._register_watch(poller, watched)
            timeout = self._timeout(deadline, out)
            ready = dict(poller.poll(None if timeout is None else timeout * 1000))
            if self.is_stopping():
                return "stopped"
            if self._wake_r in ready:
                self._drain_wake()
            revents = ready.get(fd, 0)
            if watched is not None and watched in ready and self.watch is not None and self.watch.drain() \
                    and not revents & POLLIN:
                self._refresh()  # with a request waiting, the request reads the facts itself
            if revents & (POLLIN | POLLHUP_ERR) and events & POLLIN:
                failure = self._read(sock, demux, readers, inbox)
                if failure:
                    return failure
            elif revents & POLLHUP_ERR and not events & POLLIN:
                try:
                    out.flush()
                except OSError as exc:
                    return f"connection lost: {exc.strerror or exc}"
            if deadline is not None and self.configured:
                deadline = None
            elif deadline is not None and self.clock() >= deadline:
                return f"not configured by the runtime within {self.registration_timeout:g} s of registering"
            if not inbox:  # requests just read are answered first: a due reconcile runs at the next turn
                self._maybe_reconcile()

    def _register_watch(self, poller: "select.poll", watched: Optional[int]) -> Optional[int]:
        """Keep the poller on the watch's current descriptor (it changes when the directory went and
        was watched again); returns the one registered."""
        now = self.watch.fileno() if self.watch is not None else None
        if now != watched:
            if watched is not None:
                try:
                    poller.unregister(watched)
                except KeyError:
                    pass
            if now is not None:
                poller.register(now, select.POLLIN)
        return now

    def _handle_frame(self, client: ttrpc.Client, conn_id: int, frame: ttrpc.Frame, out: Outbox) -> Optional[str]:
        """One frame: a request served (its answer queued), or an answer to one of our calls."""
        if conn_id == mux.PLUGIN_SERVICE_CONN:
            answer = self._server.handle(frame)
            if answer is not None:
                out.add(mux.format_frames(conn_id, answer))
            return None
        return self._client_answer(client, frame)

    def _client_answer(self, client: ttrpc.Client, frame: ttrpc.Frame) -> Optional[str]:
        """Handle the answer to one of our calls; a reason to drop the connection, or None."""
        try:
            _sid, method, _payload, err = client.response(frame)
        except ttrpc.ProtocolError as exc:
            self._repeats.error(f"nri: {exc} (ignored)")
            return None
        if err is not None:
            return f"{method} refused: {quote(err.message, bare=True)} (code {err.code})"
        if method.endswith("/RegisterPlugin"):
            self.reporter.info(f"nri: registered as {self.identity.index}-{self.identity.name}")
        return None

    # -- the whole life ---------------------------------------------------------------------------
    def run(self, connect: Callable[[], socket.socket], reconnect: bool = True, where: str = "") -> int:
        """Connect, serve, and (with ``reconnect``) reconnect with backoff until stopped.

        ``where`` names the socket in the messages ("at /var/run/nri/nri.sock").

        Returns the exit code: 0 when stopped (or, without ``reconnect``, when the runtime
        closed the connection), 1 when a single connection ended for any other reason.
        """
        backoff = BACKOFF_FIRST
        down_since: Optional[str] = None
        at = f" at {where}" if where else ""
        while not self.stopping:
            try:
                sock = connect()
            except OSError as exc:
                if not reconnect:
                    self.reporter.error(f"nri: cannot connect{at}: {exc.strerror or exc}")
                    return 1
                if down_since is None:
                    down_since = f"{exc.strerror or exc}"
                    self.reporter.warning(f"nri: cannot connect to the runtime{at} ({down_since}); retrying")
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
            if self.is_stopping():
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


def settle_memory() -> None:
    """Once everything is imported: the objects made so far (modules, protobuf descriptors, click)
    live as long as the process. gc.freeze moves them out of the collector's generations, so a
    full collection no longer walks them all (a pause of milliseconds that lands on whichever
    request triggers it); a request's own short-lived objects are freed by reference counting.
    The record classes get their compiled constructors first (core.compat: the hook's start does
    without them; a resident process builds records on every request)."""
    import gc

    from ...core.compat import compile_constructors

    compile_constructors()
    gc.collect()
    gc.freeze()


def main(config: Config, socket_path: Optional[str], name: Optional[str], index: Optional[str],
         reconcile_interval: float, reporter: Reporter, environ: Optional[Mapping[str, str]] = None,
         argv0: str = "", write_timeout: float = WRITE_TIMEOUT, metrics_address: Optional[str] = None) -> int:
    """``mixed-cpus-hook nri``: run the plugin in the foreground until SIGTERM/SIGINT.

    ``metrics_address``: serve /metrics and /healthz there (frontends/nri/httpd.py) while the plugin runs.
    """
    env = os.environ if environ is None else environ
    identity = compute_identity(name, index, env, argv0)
    fd = None if socket_path else parse_socket_fd(env)
    watch = None
    if getattr(config, "kubelet_state_file", ""):
        from ...node.inotify import FileWatch  # ctypes, for the resident plugin only

        watch = FileWatch(config.kubelet_state_file)
        if watch.problem:
            reporter.info(f"nri: kubelet's checkpoint is read at each event ({watch.problem}; watched again "
                          "at each reconcile)")
    plugin = Plugin(Handlers(config, reporter), identity, reporter, reconcile_interval=reconcile_interval,
                    write_timeout=write_timeout, watch=watch)
    http = None
    if metrics_address:
        from .httpd import TelemetryServer  # http.server only when asked for

        http = TelemetryServer(metrics_address, plugin.telemetry)
        host, port = http.start()
        reporter.info(f"nri: /metrics and /healthz on {host}:{port}")
    plugin.install_signals()
    settle_memory()
    where = f"fd {fd} from the runtime" if fd is not None else (socket_path or DEFAULT_SOCKET)
    reporter.info(f"nri: plugin {identity.index}-{identity.name} starting on {where}")
    try:
        if fd is not None:
            return plugin.run(connect_fd(fd), reconnect=False, where=where)
        return plugin.run(connect_unix(socket_path or DEFAULT_SOCKET), reconnect=True, where=where)
    finally:
        plugin.close()
        if http is not None:
            http.stop()
