"""/metrics and /healthz (nri/httpd.py, telemetry.py): the plugin over a socketpair with the real
handlers on a fake node, scraped over real loopback HTTP and parsed with prometheus_client's parser."""

from __future__ import annotations

import http.client
import socket
import time
from typing import Any, Callable, Dict, Iterator, List, Tuple

import pytest
from prometheus_client.parser import text_string_to_metric_families

from mixed_cpus_hook.core.errors import UsageError
from mixed_cpus_hook.frontends.nri.wire import api
from mixed_cpus_hook.frontends.nri.httpd import REQUEST_TIMEOUT, TelemetryServer, parse_address
from mixed_cpus_hook.usecases.telemetry import Telemetry, format_exposition

from .peer import create_request
from .test_plugin import APP, SIDECAR, Env, make_env  # noqa: F401 - the fixture

ADDRESSES = [
    ("host-port", "127.0.0.1:9470", ("127.0.0.1", 9470)),
    ("every-interface", ":9470", ("", 9470)),
    ("ipv6", "[::1]:9470", ("::1", 9470)),
    ("name", "localhost:1", ("localhost", 1)),
]
NOT = " is not HOST:PORT (a port 1-65535; [::1]:PORT for IPv6, :PORT for every interface)"
MALFORMED = [  # id, --metrics-address, the whole message
    ("no-port", "127.0.0.1", "--metrics-address: '127.0.0.1'" + NOT),
    ("port-zero", "127.0.0.1:0", "--metrics-address: '127.0.0.1:0'" + NOT),
    ("port-too-big", ":65536", "--metrics-address: ':65536'" + NOT),
    ("port-not-a-number", "host:http", "--metrics-address: 'host:http'" + NOT),
    ("ipv6-without-brackets", "::1:9470", "--metrics-address: '::1:9470': write an IPv6 host in brackets, [::1]:9470"),
    ("empty", "", "--metrics-address: ''" + NOT),
]


@pytest.mark.parametrize("text,expected", [a[1:] for a in ADDRESSES], ids=[a[0] for a in ADDRESSES])
def test_parse_address(text: str, expected: Tuple[str, int]) -> None:
    assert parse_address(text) == expected


@pytest.mark.parametrize("text,message", [m[1:] for m in MALFORMED], ids=[m[0] for m in MALFORMED])
def test_parse_address_malformed(text: str, message: str) -> None:
    with pytest.raises(UsageError) as err:
        parse_address(text)
    assert str(err.value) == message
    assert err.value.exit_code == 2


def samples(text: str) -> Dict[Tuple[str, Tuple[Tuple[str, str], ...]], float]:
    """Every sample of an exposition, parsed by prometheus_client: (name, sorted labels) -> value."""
    out = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            out[(s.name, tuple(sorted(s.labels.items())))] = s.value
    return out


def test_exposition_parses_and_counts() -> None:
    t = Telemetry(count_tracked=lambda: 3, buckets=(0.01, 0.1))
    t.request("CreateContainer", 0.004)
    t.request("CreateContainer", 0.05)
    t.request("UpdateContainer", 0.5)
    t.error("CreateContainer", "policy error")
    t.admitted(pod_quota_raised=True)
    t.admitted(pod_quota_raised=False)
    t.set_connected(True)
    got = samples(format_exposition(t.snapshot(), "0.1.0", buckets=(0.01, 0.1)))
    create = (("event", "CreateContainer"),)
    assert got[("mixed_cpus_hook_nri_requests_total", create)] == 2
    assert got[("mixed_cpus_hook_nri_answer_seconds_bucket", create + (("le", "0.01"),))] == 1
    assert got[("mixed_cpus_hook_nri_answer_seconds_bucket", create + (("le", "0.1"),))] == 2
    assert got[("mixed_cpus_hook_nri_answer_seconds_bucket", create + (("le", "+Inf"),))] == 2
    assert got[("mixed_cpus_hook_nri_answer_seconds_count", create)] == 2
    assert got[("mixed_cpus_hook_nri_answer_seconds_sum", create)] == pytest.approx(0.054)
    assert got[("mixed_cpus_hook_nri_answer_seconds_bucket",
                (("event", "UpdateContainer"), ("le", "0.1")))] == 0
    assert got[("mixed_cpus_hook_nri_errors_total", (("event", "CreateContainer"), ("reason", "policy_error")))] == 1
    assert got[("mixed_cpus_hook_containers_admitted_total", ())] == 2
    assert got[("mixed_cpus_hook_pod_quota_raised_total", ())] == 1
    assert got[("mixed_cpus_hook_mixed_containers", ())] == 3
    assert got[("mixed_cpus_hook_nri_connected", ())] == 1
    assert got[("mixed_cpus_hook_build_info", (("version", "0.1.0"),))] == 1


ANSWER_TIMES = {
    "on-a-bound": [0.001, 0.0025, 2.0],
    "between-bounds": [0.0011, 0.3, 0.7],
    "above-every-bucket": [2.5, 30.0],
    "zero": [0.0],
    "many": [i / 1000 for i in range(0, 3000, 7)],
}


@pytest.mark.parametrize("times", ANSWER_TIMES.values(), ids=list(ANSWER_TIMES))
def test_answer_time_buckets_count_what_is_at_most_each_bound(times: List[float]) -> None:
    """Each bucket counts the answers that took at most its bound (Prometheus' le), whichever
    slot a request was counted in on its path; the count and the sum are every answer's."""
    t = Telemetry()
    for seconds in times:
        t.request("StopContainer", seconds)
    counts, total, n = t.snapshot().histograms["StopContainer"]
    assert counts == [sum(1 for x in times if x <= bound) for bound in t.buckets]
    assert (n, total) == (len(times), pytest.approx(sum(times)))


def test_unreadable_state_dir_leaves_the_gauge_out() -> None:
    def broken() -> int:
        raise OSError("state dir gone")
    got = samples(format_exposition(Telemetry(count_tracked=broken).snapshot(), "0.1.0"))
    assert ("mixed_cpus_hook_mixed_containers", ()) not in got
    assert got[("mixed_cpus_hook_nri_connected", ())] == 0


def get(port: int, path: str, timeout: float = 5.0) -> Tuple[int, str, str]:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    try:
        conn.request("GET", path)
        resp = conn.getresponse()
        return resp.status, resp.getheader("Content-Type") or "", resp.read().decode()
    finally:
        conn.close()


@pytest.fixture
def served(make_env: Callable[..., Env]) -> Iterator[Callable[..., Tuple[Env, int]]]:  # noqa: F811
    servers = []

    def start(**kwargs: Any) -> Tuple[Env, int]:
        env = make_env(**kwargs)
        server = TelemetryServer("127.0.0.1:1", env.running.plugin.telemetry)
        server.port = 0  # any free port
        servers.append(server)
        return env, server.start()[1]

    yield start
    for s in servers:
        s.stop()


def test_healthz_follows_the_registration(served: Callable[..., Tuple[Env, int]]) -> None:
    env, port = served(handshake=False)
    assert get(port, "/healthz")[:1] == (503,)
    assert get(port, "/healthz")[2] == "not registered with the runtime\n"
    env.peer.handshake()
    assert get(port, "/healthz") == (200, "text/plain; charset=utf-8", "ok\n")
    env.running.finish()
    assert get(port, "/healthz")[0] == 503
    assert get(port, "/nothing")[0] == 404


def test_metrics_count_what_the_plugin_answered(served: Callable[..., Tuple[Env, int]]) -> None:
    env, port = served()
    env.peer.call("CreateContainer", create_request(APP), api.CreateContainerResponse)
    env.peer.call("CreateContainer", create_request(SIDECAR, name="sidecar", ask=None), api.CreateContainerResponse)
    with pytest.raises(AssertionError):  # failure_policy fail: the runtime gets an error
        env.peer.call("CreateContainer", create_request("c3" * 32, name="bad", ask="yes"),
                      api.CreateContainerResponse)
    status, ctype, body = get(port, "/metrics")
    assert (status, ctype) == (200, "text/plain; version=0.0.4; charset=utf-8")
    got = samples(body)
    create = (("event", "CreateContainer"),)
    assert got[("mixed_cpus_hook_nri_requests_total", create)] == 3
    assert got[("mixed_cpus_hook_nri_requests_total", (("event", "Configure"),))] == 1
    assert got[("mixed_cpus_hook_nri_answer_seconds_count", create)] == 3
    assert got[("mixed_cpus_hook_containers_admitted_total", ())] == 1
    assert got[("mixed_cpus_hook_pod_quota_raised_total", ())] == 1
    assert got[("mixed_cpus_hook_mixed_containers", ())] == 1  # the records in the state dir
    errors = {labels: v for (name, labels), v in got.items() if name == "mixed_cpus_hook_nri_errors_total"}
    assert errors == {(("event", "CreateContainer"), ("reason", "invalid_request")): 1}, errors


def test_a_silent_scraper_never_delays_an_answer(served: Callable[..., Tuple[Env, int]]) -> None:
    """A client that connects and sends nothing holds the HTTP thread, not the NRI loop: the
    plugin answers while it is connected, and the endpoint serves again once it timed out."""
    env, port = served()
    silent = socket.create_connection(("127.0.0.1", port))
    try:
        start = time.monotonic()
        env.peer.call("CreateContainer", create_request(APP), api.CreateContainerResponse)
        answered = time.monotonic() - start
        assert answered < REQUEST_TIMEOUT / 2, f"CreateContainer answered after {answered:.3f} s"
        assert get(port, "/healthz", timeout=REQUEST_TIMEOUT * 3)[0] == 200  # after the silent one's timeout
    finally:
        silent.close()


def test_address_in_use_is_a_usage_error() -> None:
    taken = socket.socket()
    taken.bind(("127.0.0.1", 0))
    taken.listen(1)
    try:
        port = taken.getsockname()[1]
        with pytest.raises(UsageError) as err:
            TelemetryServer(f"127.0.0.1:{port}", Telemetry()).start()
        assert str(err.value).startswith(f"--metrics-address: cannot listen on 127.0.0.1:{port}: ")
        assert err.value.exit_code == 2
    finally:
        taken.close()


# In a fresh interpreter: the server answers /metrics and /healthz, and ssl (OpenSSL, about 4.5 MiB
# resident) was never imported for it; a later import of ssl works as usual.
NO_SSL = """
import socket, sys
sys.path.insert(0, {source!r})
from mixed_cpus_hook.frontends.nri.httpd import TelemetryServer
from mixed_cpus_hook.usecases.telemetry import Telemetry
server = TelemetryServer("127.0.0.1:1", Telemetry(count_tracked=lambda: 0))
server.port = 0
port = server.start()[1]
answers = []
for path in ("/metrics", "/healthz"):
    with socket.create_connection(("127.0.0.1", port), timeout=5) as conn:
        conn.sendall(b"GET " + path.encode() + b" HTTP/1.0\\r\\n\\r\\n")
        data = b""
        while True:
            chunk = conn.recv(65536)
            if not chunk:
                break
            data += chunk
    answers.append(data.split(b" ", 2)[1].decode())
server.stop()
print(" ".join(answers), "ssl" in sys.modules)
import ssl
print(ssl.OPENSSL_VERSION_INFO >= (1,))
"""


def test_the_metrics_server_never_imports_ssl() -> None:
    import os
    import subprocess
    import sys

    source = os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))),
                          "hook")
    done = subprocess.run([sys.executable, "-I", "-c", NO_SSL.format(source=source)], capture_output=True, text=True,
                          timeout=60)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["200", "503", "False", "True"], done.stdout
