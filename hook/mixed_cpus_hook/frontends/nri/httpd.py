"""``/metrics`` and ``/healthz`` over HTTP for the resident NRI plugin (``nri --metrics-address``).

One small daemon thread runs a single-threaded ``http.server``: the NRI loop never waits for
it (it only updates the :class:`~mixed_cpus_hook.usecases.telemetry.Telemetry` under a lock held for a
few dict copies), and a slow or silent scraper holds only this thread, for at most
``REQUEST_TIMEOUT`` seconds per connection, never an NRI answer.

* ``GET /metrics``: the Prometheus text format (``telemetry.format_exposition``).
* ``GET /healthz``: 200 ``ok`` while the plugin is registered with and configured by the
  runtime, else 503 with the reason: a plugin the runtime dropped (a reply later than 2 s, a
  runtime restart) is not healthy until it has reconnected and been synchronized.
"""

from __future__ import annotations

import socket
import sys
import threading
from typing import Optional, Tuple

from ... import __version__
from ...core.errors import UsageError
from ...usecases.telemetry import Telemetry, format_exposition

# http.server imports http.client, which imports ssl when it can: OpenSSL's libraries, about 4.5 MiB
# of the resident plugin's memory (18.5 -> 23.0 MiB, Python 3.11) for HTTPS, which this server
# never speaks. While nothing has imported ssl or http.client yet, ssl's import is refused for that
# moment (a None entry in sys.modules raises ImportError), as http.client allows: it then leaves out
# its HTTPSConnection only. Anything imported later gets ssl as usual (frontends.nri.import_protobuf
# does the same for pkg_resources).
_REFUSE_SSL = "ssl" not in sys.modules and "http.client" not in sys.modules
if _REFUSE_SSL:
    sys.modules["ssl"] = None  # type: ignore[assignment]
try:
    from http.server import BaseHTTPRequestHandler, HTTPServer
finally:
    if _REFUSE_SSL:
        _left = sys.modules.pop("ssl", None)  # the None put there
        if _left is not None:  # a module someone put there meanwhile: kept
            sys.modules["ssl"] = _left

REQUEST_TIMEOUT = 2.0  # seconds a connection may take to send its request and read the answer
CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"
OPTION = "--metrics-address"


def parse_address(text: str) -> Tuple[str, int]:
    """``HOST:PORT``, ``[IPv6]:PORT`` or ``:PORT`` (every interface) -> (host, port)."""
    host, sep, port = text.rpartition(":")
    if not sep or not port.isdigit() or not 0 < int(port) < 65536:
        raise UsageError(f"{text!r} is not HOST:PORT (a port 1-65535; [::1]:PORT for IPv6, :PORT for every "
                         "interface)", OPTION)
    if host.startswith("[") and host.endswith("]"):
        host = host[1:-1]
    elif ":" in host:
        raise UsageError(f"{text!r}: write an IPv6 host in brackets, [{host}]:{port}", OPTION)
    return host, int(port)


def _handler_class(telemetry: Telemetry) -> type:
    class Handler(BaseHTTPRequestHandler):
        timeout = REQUEST_TIMEOUT  # socket timeout: a silent client is dropped
        server_version = f"mixed-cpus-hook/{__version__}"

        def do_GET(self) -> None:  # noqa: N802 - http.server's name
            path = self.path.split("?", 1)[0]
            if path == "/metrics":
                self._answer(200, format_exposition(telemetry.snapshot(), __version__), CONTENT_TYPE)
            elif path == "/healthz":
                if telemetry.connected:
                    self._answer(200, "ok\n")
                else:
                    self._answer(503, "not registered with the runtime\n")
            else:
                self._answer(404, "not found: /metrics and /healthz only\n")

        def _answer(self, code: int, body: str, ctype: str = "text/plain; charset=utf-8") -> None:
            data = body.encode("utf-8")
            self.send_response(code)
            self.send_header("Content-Type", ctype)
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def log_message(self, format: str, *args: object) -> None:  # noqa: A002 - http.server's signature
            pass  # probes every few seconds: not for the journal

    return Handler


class _Server(HTTPServer):
    allow_reuse_address = True

    def handle_error(self, request: object, client_address: object) -> None:
        pass  # a client that hung up or timed out: nothing to report


class TelemetryServer:
    """The endpoint in one daemon thread: ``start`` binds (or raises UsageError), ``stop`` ends it."""

    def __init__(self, address: str, telemetry: Telemetry) -> None:
        self.host, self.port = parse_address(address)
        self.telemetry = telemetry
        self._server: Optional[_Server] = None
        self._thread: Optional[threading.Thread] = None

    def start(self) -> Tuple[str, int]:
        """Listen now (so a bad address fails the start, not a later scrape); returns the bound address."""
        server_class = type("_Server", (_Server,), {"address_family": socket.AF_INET6 if ":" in self.host
                                                    else socket.AF_INET})
        try:
            self._server = server_class((self.host, self.port), _handler_class(self.telemetry))
        except OSError as exc:
            raise UsageError(f"cannot listen on {self.host or '*'}:{self.port}: {exc.strerror or exc}", OPTION) from None
        self._thread = threading.Thread(target=self._server.serve_forever, kwargs={"poll_interval": 0.5},
                                        name="mixed-cpus-hook-http", daemon=True)
        self._thread.start()
        bound = self._server.server_address
        return str(bound[0]), int(bound[1])

    def stop(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None
