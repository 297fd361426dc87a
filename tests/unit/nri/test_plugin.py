"""The plugin against an in-test runtime over a socketpair, with the real handlers on a fake node.

A real containerd (tests/integration) cannot be made to send broken frames, unknown methods,
split messages or a refused registration: those paths are driven here. The peer checks that
every mux frame the plugin sends fits Go's 4096-byte ttrpc reader.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import socket
import struct
import subprocess
import io
import sys
import threading
import time
from pathlib import Path
from typing import Any, Callable, Iterator, List

import pytest

from mixed_cpus_hook.core.errors import UsageError
from mixed_cpus_hook.frontends.nri.handlers import EVENTS, Handlers
from mixed_cpus_hook.frontends.nri.plugin import (Identity,
                                                  Outbox,
                                                  Plugin,
                                                  RepeatLog,
                                                  compute_identity,
                                                  parse_socket_fd)
from mixed_cpus_hook.frontends.nri.wire import api, mux, ttrpc
from mixed_cpus_hook.node.config import load_config

from .hostile import wait_for
from .peer import Running, RuntimePeer, create_request, pod_and_container

APP = "a1" * 32
OTHER = "b2" * 32
OTHER_UID = "11111111-2222-3333-4444-555555555555"
SIDECAR = "5c" * 32
REPO = Path(__file__).resolve().parents[3]


class Env:
    def __init__(self, node: Any, cap: Any, running: Running) -> None:
        self.node, self.cap, self.running, self.peer = node, cap, running, running.peer

    @property
    def log(self) -> str:
        return logged(self.cap)


def logged(cap: Any) -> str:
    """Everything logged: stderr lines and the syslog lines (info goes only to syslog)."""
    return cap.stream.getvalue() + "".join(f"{message}\n" for _, message in cap.sink.messages)


@pytest.fixture
def make_env(fake_node: Callable[..., Any], reporter: Any) -> Iterator[Callable[..., Env]]:
    started: List[Running] = []

    def make(handshake: bool = True, config: Any = None, handlers_class: type = Handlers, online: str = "0-3",
             **kwargs: Any) -> Env:
        node = fake_node(version=1, config=config, online=online)
        node.add_container(APP, cpus="2-3", quota=200000, pod_quota=200000)
        handlers = handlers_class(load_config(node.config_path), reporter.reporter)
        running = Running(handlers, reporter.reporter, **kwargs)
        started.append(running)
        env = Env(node, reporter, running)
        if handshake:
            env.peer.handshake()
        return env

    yield make
    for running in started:
        running.finish()


def test_handshake_registers_and_subscribes(make_env: Callable[..., Env]) -> None:
    env = make_env(handshake=False)
    reg = env.peer.wait_registered()
    assert (reg.plugin_name, reg.plugin_idx) == ("mixed-cpus-hook", "10")
    cfg = env.peer.call("Configure", api.ConfigureRequest(runtime_name="containerd", runtime_version="1.7.24"),
                        api.ConfigureResponse)
    assert cfg.events == EVENTS == 0x688


def test_create_update_stop(make_env: Callable[..., Env]) -> None:
    env = make_env()
    resp = env.peer.call("CreateContainer", create_request(APP), api.CreateContainerResponse)
    cpu = resp.adjust.linux.resources.cpu
    assert (cpu.cpus, cpu.quota.value, cpu.period.value) == ("0-3", 400000, 100000)
    assert [(kv.key, kv.value) for kv in resp.adjust.env] == [("OPENSHIFT_ISOLATED_CPUS", "2-3"),
                                                             ("OPENSHIFT_SHARED_CPUS", "0-1")]
    assert env.node.records("containers")[APP]["mode"] == "nri"
    pod_rel = "kubepods/pod" + pod_and_container(APP)[0].uid
    assert env.node.quota(pod_rel) == "400000"
    update = api.UpdateContainerRequest(container=api.Container(id=APP))
    update.linux_resources.cpu.cpus = "2-3"  # kubelet's rewrite after a restart: cpuset only
    resp = env.peer.call("UpdateContainer", update, api.UpdateContainerResponse)
    assert [u.container_id for u in resp.update] == [APP]
    cpu = resp.update[0].linux.resources.cpu
    assert (cpu.cpus, cpu.quota.value, cpu.period.value) == ("0-3", 400000, 100000)
    env.peer.call("StopContainer", api.StopContainerRequest(container=api.Container(id=APP)),
                  api.StopContainerResponse)
    assert env.node.records("containers") == {}
    assert env.node.quota(pod_rel) == "200000"


def test_not_asking_and_untracked_pass_through(make_env: Callable[..., Env]) -> None:
    env = make_env()
    resp = env.peer.call("CreateContainer", create_request(SIDECAR, name="sidecar", ask=None),
                         api.CreateContainerResponse)
    assert not resp.HasField("adjust")
    update = api.UpdateContainerRequest(container=api.Container(id=SIDECAR))
    update.linux_resources.cpu.cpus = "2-3"
    assert list(env.peer.call("UpdateContainer", update, api.UpdateContainerResponse).update) == []
    assert env.node.records("containers") == {}


@pytest.mark.parametrize("policy,ask,namespace,code,message", [
    pytest.param("fail", "yes", "ran", ttrpc.UNKNOWN, "mixed-cpus-hook: invalid request: pod ran/du-0: annotation "
                 "mixed-cpus.openshift.io/app: value 'yes' is not 'enable'", id="fail-bad-annotation"),
    pytest.param("fail", "enable", "default", ttrpc.UNKNOWN, "mixed-cpus-hook: refused: pod default/du-0: namespace "
                 "'default' may not ask for mixed CPUs", id="fail-refused-namespace"),
    pytest.param("ignore", "yes", "ran", ttrpc.OK, "", id="ignore-bad-annotation"),
])
def test_failure_policy(make_env: Callable[..., Env], policy: str, ask: str, namespace: str, code: int,
                        message: str) -> None:
    env = make_env(config={"failure_policy": policy, "allowed_namespaces": ["ran"]})
    answer = env.peer.call_raw("CreateContainer", create_request(APP, ask=ask, namespace=namespace).SerializeToString())
    assert answer.code == code and answer.message.startswith(message), answer.message
    if code == ttrpc.OK:
        assert not api.CreateContainerResponse.FromString(answer.payload).HasField("adjust")
        assert "failure_policy ignore: created unadjusted" in env.log
    assert env.node.records("containers") == {}
    # and the plugin goes on serving
    env.peer.call("CreateContainer", create_request(SIDECAR, name="sidecar", ask=None), api.CreateContainerResponse)


# Requests a runtime would never send; each gets its error status and the next request is served.
BAD_REQUESTS = [
    pytest.param(lambda p: p.call_raw("CreateContainer", b"\x0a\x80"), ttrpc.INVALID_ARGUMENT,
                 "CreateContainer: undecodable request: ", id="undecodable-payload"),
    pytest.param(lambda p: p.call_raw("Frobnicate", b""), ttrpc.UNIMPLEMENTED, "method Frobnicate: not implemented",
                 id="unknown-method"),
    pytest.param(lambda p: p.call_raw("Configure", b"", sid=p.next_sid + 1), ttrpc.INVALID_ARGUMENT,
                 "StreamID must be odd for client initiated streams", id="even-stream-id"),
    pytest.param(lambda p: p.call_raw("Configure", b"", sid=1), ttrpc.INVALID_ARGUMENT,
                 "StreamID cannot be re-used and must increment", id="reused-stream-id"),
]


@pytest.mark.parametrize("send,code,message", BAD_REQUESTS)
def test_bad_request_answered_and_serving_goes_on(make_env: Callable[..., Env], send: Callable, code: int,
                                                   message: str) -> None:
    env = make_env()
    answer = send(env.peer)
    assert answer.code == code and answer.message.startswith(message), answer.message
    assert message in env.log
    resp = env.peer.call("CreateContainer", create_request(APP), api.CreateContainerResponse)
    assert resp.adjust.linux.resources.cpu.cpus == "0-3"


def test_oversized_frame_discarded(make_env: Callable[..., Env]) -> None:
    env = make_env()
    sid = env.peer.next_sid
    env.peer.next_sid += 2
    length = ttrpc.MAX_MESSAGE + 1
    env.peer.send(mux.PLUGIN_SERVICE_CONN, struct.pack(">IIBB", length, sid, 1, 0) + b"\0" * length)
    answer = env.peer.answer(sid)
    assert (answer.code, answer.message) == (ttrpc.RESOURCE_EXHAUSTED, "message length 4194305 exceed maximum "
                                                                       "message size of 4194304")
    env.peer.call("Shutdown", api.Empty(), api.Empty)


def test_split_and_pipelined_frames(make_env: Callable[..., Env]) -> None:
    env = make_env()
    # one request cut into 1-byte mux frames
    resp = env.peer.call("CreateContainer", create_request(APP), api.CreateContainerResponse, chunk=1)
    assert resp.adjust.linux.resources.cpu.cpus == "0-3"
    # two requests in one write: answered in order
    first = ttrpc.format_request(env.peer.next_sid, api.PLUGIN_SERVICE, "Shutdown", b"")
    second = ttrpc.format_request(env.peer.next_sid + 2, api.PLUGIN_SERVICE, "Shutdown", b"")
    env.peer.send(mux.PLUGIN_SERVICE_CONN, first + second)
    assert env.peer.answer(env.peer.next_sid).code == 0
    assert env.peer.answer(env.peer.next_sid + 2).code == 0


def test_unknown_mux_connection_dropped(make_env: Callable[..., Env]) -> None:
    env = make_env()
    env.peer.send(7, b"whatever")
    env.peer.call("Shutdown", api.Empty(), api.Empty)
    assert "nri: mux: 8 bytes for connection 7 dropped (only 1 and 2 are NRI's)" in env.log


def test_broken_mux_ends_the_connection(make_env: Callable[..., Env]) -> None:
    env = make_env()
    env.peer.send_raw(struct.pack(">II", 1, mux.MAX_PAYLOAD + 1))
    with pytest.raises(EOFError):
        env.peer.read_frame()
    env.running.thread.join(10)
    assert env.running.code == 1
    assert "nri: protocol error: mux: frame of 4194315 bytes for connection 1 exceeds the maximum" in env.log


def test_registration_refused(make_env: Callable[..., Env]) -> None:
    env = make_env(handshake=False, register_error="invalid plugin index")
    env.peer.wait_registered()
    with pytest.raises(EOFError):
        env.peer.read_frame()
    env.running.thread.join(10)
    assert env.running.code == 1
    assert "RegisterPlugin refused: invalid plugin index (code 3)" in env.log


def test_not_configured_in_time(make_env: Callable[..., Env]) -> None:
    env = make_env(handshake=False, registration_timeout=0.3)
    env.peer.wait_registered()
    with pytest.raises(EOFError):
        env.peer.read_frame()
    env.running.thread.join(10)
    assert "not configured by the runtime within 0.3 s of registering" in env.log


class Exploding(Handlers):
    """Handlers whose UpdateContainer has a bug: the plugin must answer INTERNAL and live on."""

    def update_container(self, req: Any) -> Any:
        raise KeyError("boom")


def test_internal_error_answered(make_env: Callable[..., Env]) -> None:
    env = make_env(handlers_class=Exploding)
    answer = env.peer.call_raw("UpdateContainer", api.UpdateContainerRequest().SerializeToString())
    assert (answer.code, answer.message) == (ttrpc.INTERNAL, "mixed-cpus-hook: internal error in UpdateContainer: "
                                                             "KeyError('boom')")
    assert "nri: UpdateContainer: internal error: KeyError('boom')" in env.log
    env.peer.call("CreateContainer", create_request(APP), api.CreateContainerResponse)


def test_synchronize_split_tracked_untracked_gone(make_env: Callable[..., Env]) -> None:
    env = make_env(online="0-7")
    env.node.add_container(OTHER, cpus="4", quota=100000, pod_uid="11111111-2222-3333-4444-555555555555")
    env.node.add_container(SIDECAR, name="sidecar", cpus="2-3", ask=None)
    env.peer.call("CreateContainer", create_request(APP), api.CreateContainerResponse)
    gone = "dd" * 32
    paths = env.node.add_container(gone, name="old", cpus="5", pod_uid="99999999-2222-3333-4444-555555555555")
    env.peer.call("CreateContainer", create_request(gone, name="old", cpus="5",
                                                    pod_uid="99999999-2222-3333-4444-555555555555"),
                  api.CreateContainerResponse)
    assert set(env.node.records("containers")) == {APP, gone}
    for hierarchy in ("cpuset", "cpu,cpuacct"):  # the runtime removed it while the plugin was away
        shutil.rmtree(os.path.join(env.node.cgroup_root, hierarchy, paths["rel"]))
    pod_a, app = pod_and_container(APP, cpus="0-3", quota=400000)  # as containerd shows it: already adjusted
    pod_b, other = pod_and_container(OTHER, cpus="4", quota=100000, pod_uid="11111111-2222-3333-4444-555555555555")
    _, sidecar = pod_and_container(SIDECAR, name="sidecar", ask=None)
    part1 = env.peer.call("Synchronize", api.SynchronizeRequest(pods=[pod_a], containers=[app], more=True),
                          api.SynchronizeResponse)
    assert part1.more and list(part1.update) == []
    final = env.peer.call("Synchronize", api.SynchronizeRequest(pods=[pod_b], containers=[other, sidecar]),
                          api.SynchronizeResponse)
    got = {u.container_id: (u.linux.resources.cpu.cpus, u.linux.resources.cpu.quota.value, u.ignore_failure)
           for u in final.update}
    assert got == {APP: ("0-3", 400000, True), OTHER: ("0-1,4", 300000, True)}
    assert set(env.node.records("containers")) == {APP, OTHER}


def test_state_change_remove_releases(make_env: Callable[..., Env]) -> None:
    env = make_env()
    env.peer.call("CreateContainer", create_request(APP), api.CreateContainerResponse)
    env.peer.call("StateChange", api.StateChangeEvent(event=api.EVENTS["REMOVE_CONTAINER"],
                                                      container=api.Container(id=APP)), api.Empty)
    assert env.node.records("containers") == {}
    env.peer.call("RemoveContainer", api.RemoveContainerRequest(container=api.Container(id=APP)),
                  api.RemoveContainerResponse)  # twice: nothing left to do, still answered


def test_reconnects_after_the_runtime_goes_away(fake_node: Callable[..., Any], reporter: Any) -> None:
    node = fake_node(version=1)
    node.add_container(APP, cpus="2-3", quota=200000, pod_quota=200000)
    pairs = [socket.socketpair() for _ in range(2)]
    refused = [True]

    def connect() -> socket.socket:
        if refused[0]:  # the runtime is down at first: connection refused, then back
            refused[0] = False
            raise ConnectionRefusedError(111, "Connection refused")
        return pairs.pop(0)[0] if len(pairs) == 2 else pairs[0][0]

    peers = [RuntimePeer(pairs[0][1]), RuntimePeer(pairs[1][1])]
    plugin = Plugin(Handlers(load_config(node.config_path), reporter.reporter), Identity("mixed-cpus-hook", "10"),
                    reporter.reporter, reconcile_interval=0)
    thread = threading.Thread(target=plugin.run, args=(connect,), daemon=True)
    thread.start()
    try:
        peers[0].handshake()
        peers[0].call("CreateContainer", create_request(APP), api.CreateContainerResponse)
        peers[0].sock.close()  # containerd restarts
        pod, ctr = pod_and_container(APP, cpus="0-3", quota=400000)
        sync = peers[1].handshake([pod], [ctr])  # the plugin is back: registered, configured, synchronized
        assert len(peers[1].registered) == 1
        assert [(u.container_id, u.linux.resources.cpu.cpus) for u in sync.update] == [(APP, "0-3")]
        update = api.UpdateContainerRequest(container=api.Container(id=APP))
        update.linux_resources.cpu.cpus = "2-3"
        resp = peers[1].call("UpdateContainer", update, api.UpdateContainerResponse)
        assert resp.update[0].linux.resources.cpu.cpus == "0-3"  # the record survived the reconnect
    finally:
        plugin.stop()
        thread.join(10)
        plugin.close()
        for p in peers:
            p.sock.close()
    assert not thread.is_alive()
    log = logged(reporter)
    assert "cannot connect to the runtime (Connection refused); retrying" in log
    assert "nri: connection closed by the runtime; reconnecting" in log


@pytest.mark.parametrize("opts,environ,argv0,expected", [
    pytest.param((None, None), {}, "/usr/bin/mixed-cpus-hook", ("mixed-cpus-hook", "10"), id="defaults"),
    pytest.param(("mine", "42"), {"NRI_PLUGIN_NAME": "x", "NRI_PLUGIN_IDX": "01"}, "/opt/nri/plugins/05-y",
                 ("mine", "42"), id="options-win"),
    pytest.param((None, None), {"NRI_PLUGIN_NAME": "mixed", "NRI_PLUGIN_IDX": "07"}, "/opt/nri/plugins/07-mixed",
                 ("mixed", "07"), id="launched-by-runtime"),
    pytest.param((None, None), {}, "/opt/nri/plugins/20-mixed-cpus", ("mixed-cpus", "20"), id="from-executable"),
])
def test_identity(opts: Any, environ: Any, argv0: str, expected: Any) -> None:
    assert compute_identity(opts[0], opts[1], environ, argv0) == Identity(*expected)


@pytest.mark.parametrize("opts,environ,message", [
    pytest.param(("bad name", None), {}, "nri: plugin name 'bad name' may only hold letters, digits and _.+-",
                 id="name"),
    pytest.param((None, "1"), {}, "nri: plugin index '1' is not two digits", id="index"),
    pytest.param((None, None), {"NRI_PLUGIN_IDX": "x1"}, "nri: plugin index 'x1' is not two digits", id="env-index"),
])
def test_identity_malformed(opts: Any, environ: Any, message: str) -> None:
    with pytest.raises(UsageError) as err:
        compute_identity(opts[0], opts[1], environ, "mixed-cpus-hook")
    assert str(err.value) == message


def test_socket_fd_env() -> None:
    assert parse_socket_fd({}) is None and parse_socket_fd({"NRI_PLUGIN_SOCKET": "3"}) == 3
    with pytest.raises(UsageError) as err:
        parse_socket_fd({"NRI_PLUGIN_SOCKET": "/run/x.sock"})
    assert str(err.value) == "nri: NRI_PLUGIN_SOCKET='/run/x.sock' is not a file descriptor number"


def _plugin_process(node: Any, argv: List[str], cache: str, **popen: Any) -> subprocess.Popen:
    env = dict(os.environ, MIXED_CPUS_HOOK_CACHE_DIR=cache, MIXED_CPUS_HOOK_CONFIG=node.config_path,
               PYTHONPATH=str(REPO / "hook"))
    env.pop("JOURNAL_STREAM", None)
    return subprocess.Popen([sys.executable, "-m", "mixed_cpus_hook", *argv], env=dict(env, **popen.pop("env", {})),
                            stderr=subprocess.PIPE, text=True, **popen)


@contextlib.contextmanager
def _reaped(proc: subprocess.Popen) -> Iterator[subprocess.Popen]:
    """The plugin process is ours: killed by its pid if a test ends before it stopped."""
    try:
        yield proc
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def _terminate(proc: subprocess.Popen) -> str:
    """SIGTERM, as systemd stops the unit; its stderr."""
    proc.send_signal(signal.SIGTERM)
    return proc.communicate(timeout=30)[1]


def test_command_on_a_unix_socket(fake_node: Callable[..., Any], fast_tmp: Path, config_cache_dir: str) -> None:
    """`mixed-cpus-hook nri --socket PATH` as a process: registers, serves, ends on SIGTERM with 0."""
    node = fake_node(version=1)
    node.add_container(APP, cpus="2-3", quota=200000, pod_quota=200000)
    path = str(fast_tmp / "nri.sock")
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(path)
    listener.listen(1)
    listener.settimeout(30)
    proc = _plugin_process(node, ["-v", "nri", "--socket", path, "--name", "mixed", "--index", "33"], config_cache_dir)
    with _reaped(proc), listener:
        conn, _ = listener.accept()
        peer = RuntimePeer(conn)
        peer.handshake()
        assert (peer.registered[0].plugin_name, peer.registered[0].plugin_idx) == ("mixed", "33")
        resp = peer.call("CreateContainer", create_request(APP), api.CreateContainerResponse)
        assert resp.adjust.linux.resources.cpu.cpus == "0-3"
        err = _terminate(proc)
    assert proc.returncode == 0, err
    assert f"nri: plugin 33-mixed starting on {path}" in err


def test_preconnected_plugin_without_arguments(fake_node: Callable[..., Any], config_cache_dir: str) -> None:
    """Started by the runtime (/opt/nri/plugins/NN-name): no arguments; NRI_PLUGIN_* name the plugin
    and the inherited socket's fd (the runtime passes fd 3; any number works the same way)."""
    node = fake_node(version=1)
    ours, theirs = socket.socketpair()
    env = {"NRI_PLUGIN_NAME": "mixed-cpus-hook", "NRI_PLUGIN_IDX": "15", "NRI_PLUGIN_SOCKET": str(theirs.fileno())}
    proc = _plugin_process(node, [], config_cache_dir, env=env, pass_fds=(theirs.fileno(),))
    try:
        theirs.close()
        peer = RuntimePeer(ours)
        peer.handshake()
        assert (peer.registered[0].plugin_name, peer.registered[0].plugin_idx) == ("mixed-cpus-hook", "15")
        ours.close()  # the runtime goes away: a pre-connected plugin cannot reconnect, it ends
        _, err = proc.communicate(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 0, err


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_repeated_protocol_errors_are_counted_not_logged(reporter: Any) -> None:
    clock = Clock()
    repeats = RepeatLog(reporter.reporter, clock, interval=60)
    for i in range(20000):
        repeats.error(f"nri: mux: {i} bytes for connection 7 dropped")
    clock.now += 61
    repeats.error("nri: mux: 5 bytes for connection 7 dropped")
    repeats.error("nri: ttrpc request on stream 9: answered 'x' (code 3)")
    repeats.error("nri: mux: 6 bytes for connection 7 dropped")
    repeats.flush()
    assert logged(reporter).splitlines() == [
        "mixed-cpus-hook: error: nri: mux: 0 bytes for connection 7 dropped",
        "mixed-cpus-hook: error: nri: mux: 5 bytes for connection 7 dropped (20000 like it since the last report)",
        "mixed-cpus-hook: error: nri: ttrpc request on stream 9: answered 'x' (code 3)",
        "mixed-cpus-hook: error: nri: mux: 6 bytes for connection 7 dropped (1 like it since the last report)",
        "nri: mux: 0 bytes for connection 7 dropped",
        "nri: mux: 5 bytes for connection 7 dropped (20000 like it since the last report)",
        "nri: ttrpc request on stream 9: answered 'x' (code 3)",
        "nri: mux: 6 bytes for connection 7 dropped (1 like it since the last report)",
    ]


def test_outbox_never_blocks_and_sees_a_runtime_that_stopped_reading() -> None:
    ours, theirs = socket.socketpair()
    try:
        ours.setblocking(False)
        clock = Clock()
        out = Outbox(ours, clock)
        for _ in range(64):
            out.add(b"a" * 65536)  # 4 MiB: far more than the socket holds
        out.flush()  # takes what fits, returns at once
        assert 0 < out.pending < 64 * 65536 and not out.stalled(5)
        clock.now += 5
        out.flush()
        assert out.stalled(5)
        got = theirs.recv(1 << 20)
        out.flush()  # the runtime read: progress, no longer stalled
        assert got and not out.stalled(5)
    finally:
        ours.close()
        theirs.close()


class ReconcileBug(Handlers):
    """Handlers whose periodic reconcile has a bug: logged, the plugin serves on."""

    def reconcile(self) -> None:
        raise KeyError("reconcile")


def test_a_bug_outside_any_request_ends_no_process(fake_node: Callable[..., Any], reporter: Any) -> None:
    node = fake_node(version=1)
    node.add_container(APP, cpus="2-3", quota=200000, pod_quota=200000)
    running = Running(ReconcileBug(load_config(node.config_path), reporter.reporter), reporter.reporter,
                      reconcile_interval=0.01)
    try:
        running.peer.handshake()
        deadline = time.monotonic() + 10
        while "nri: reconcile: internal error: KeyError('reconcile')" not in logged(reporter):
            assert time.monotonic() < deadline, logged(reporter)
            time.sleep(0.01)
        running.peer.call("CreateContainer", create_request(APP), api.CreateContainerResponse)
    finally:
        running.finish()


class Ordered(Handlers):
    """Handlers that note the order of creations and periodic reconciles."""

    def __init__(self, *args: Any) -> None:
        super().__init__(*args)
        self.order: List[str] = []

    def create_container(self, req: Any) -> Any:
        self.order.append("create")
        return super().create_container(req)

    def reconcile(self) -> None:
        self.order.append("reconcile")
        super().reconcile()


def test_a_request_read_when_the_reconcile_is_due_is_answered_before_it(fake_node: Callable[..., Any],
                                                                         reporter: Any) -> None:
    """The periodic reconcile looks at every record (about 0.4 ms each): a request that arrives as it
    falls due is answered first, not after it."""
    node = fake_node(version=1)
    node.add_container(APP, cpus="2-3", quota=200000, pod_quota=200000)
    now = [0.0]
    handlers = Ordered(load_config(node.config_path), reporter.reporter)
    running = Running(handlers, reporter.reporter, reconcile_interval=10, clock=lambda: now[0])
    try:
        running.peer.handshake()
        assert handlers.order == []
        now[0] = 100.0  # the reconcile is due when the next request is read
        running.peer.call("CreateContainer", create_request(APP), api.CreateContainerResponse)
        wait_for(lambda: len(handlers.order) >= 2, 5, "the reconcile")
        assert handlers.order == ["create", "reconcile"]
    finally:
        running.finish()


@pytest.mark.parametrize("journal, dev_log, to_stderr", [
    (False, "socket", False),  # a host with journald: syslog, and stderr for warnings and errors
    (True, "socket", True),  # under systemd: stderr is the journal
    (False, "none", True),  # a DaemonSet's container: kubectl logs is stderr, nothing listens on /dev/log
    (False, "file", True),  # /dev/log that is not a socket: nothing to send to
], ids=["host", "systemd-unit", "container", "not-a-socket"])
def test_plugin_lines_go_where_they_are_read(tmp_path: Path, journal: bool, dev_log: str, to_stderr: bool) -> None:
    import socket as socketlib

    from mixed_cpus_hook.frontends.nri_entry import choose_plugin_reporter
    from mixed_cpus_hook.node.log import Reporter

    path = str(tmp_path / "log")
    if dev_log == "socket":
        listener = socketlib.socket(socketlib.AF_UNIX, socketlib.SOCK_DGRAM)
        listener.bind(path)
    elif dev_log == "file":
        Path(path).write_text("")
    given = Reporter(stream=io.StringIO(), sink=lambda p, m: None)
    got = choose_plugin_reporter(given, {"JOURNAL_STREAM": "8:123"} if journal else {}, dev_log=path)
    if to_stderr:
        assert got is not given and got.sink is None and got.verbose and got.stream is sys.stderr
        assert got.stream_is_log  # the lines meant for the journal only are written there too
        out = io.StringIO()
        got.stream = out
        got.emit("info", "container c1: mixed CPUs 0-3", to_stream=False)
        assert out.getvalue() == "mixed-cpus-hook: container c1: mixed CPUs 0-3\n"
    else:
        assert got is given
    if dev_log == "socket":
        listener.close()


def test_connect_warning_names_the_socket(fake_node: Callable[..., Any], fast_tmp: Path,
                                          config_cache_dir: str) -> None:
    """No runtime listening yet: the warning says which socket it tries (the first thing an admin asks)."""
    node = fake_node(version=1)
    path = str(fast_tmp / "no-runtime-here.sock")
    proc = _plugin_process(node, ["nri", "--socket", path], config_cache_dir)
    with _reaped(proc):
        # Where no syslog socket is (a container, this machine) the info lines come first on stderr.
        seen = [proc.stderr.readline() for _ in range(1)]
        while "warning" not in seen[-1] and len(seen) < 5:
            seen.append(proc.stderr.readline())
        err = _terminate(proc)
    line = seen[-1]
    assert proc.returncode == 0, "".join(seen) + err
    assert line.strip() == (f"mixed-cpus-hook: warning: nri: cannot connect to the runtime at {path} "
                            "(No such file or directory); retrying"), seen


@pytest.mark.parametrize("watched,parsed_by_the_request", [
    pytest.param(True, [], id="watched-read-while-idle"),
    pytest.param(False, [True], id="unwatched-read-by-the-request"),
])
def test_kubelets_checkpoint_read_between_requests(fake_node: Callable[..., Any], reporter: Any,
                                                   monkeypatch: pytest.MonkeyPatch, watched: bool,
                                                   parsed_by_the_request: List[bool]) -> None:
    """kubelet writes its checkpoint when it admits the pod, before the runtime's CreateContainer:
    a watched checkpoint is parsed while the plugin waits, and the request finds it read; the
    request's answer is kubelet's entry either way (3, not the request's 2-3)."""
    from mixed_cpus_hook.node import facts
    from mixed_cpus_hook.node.inotify import FileWatch

    node = fake_node(version=1, online="0-3")
    node.add_container(APP, cpus="2-3", quota=200000, pod_quota=200000)
    node.write_checkpoint({})
    parses: List[bool] = []  # at each parse: whether a request was being answered (its lines held)
    real = facts._parse_checkpoint_file

    def counted(path: str) -> Any:
        parses.append(running.plugin.reporter.holding)
        return real(path)

    monkeypatch.setattr(facts, "_parse_checkpoint_file", counted)
    watch = FileWatch(node.kubelet_state) if watched else None
    running = Running(Handlers(load_config(node.config_path), reporter.reporter), reporter.reporter, watch=watch)
    try:
        running.peer.handshake()
        del parses[:]
        node.write_checkpoint({pod_and_container(APP)[0].uid: {"app": "3"}})  # kubelet admits the pod
        if watched:
            wait_for(lambda: bool(parses), 5, "the parse while idle")
        assert parses == ([False] if watched else [])
        del parses[:]
        resp = running.peer.call("CreateContainer", create_request(APP), api.CreateContainerResponse)
        assert resp.adjust.linux.resources.cpu.cpus == "0-1,3"
        assert parses == parsed_by_the_request
    finally:
        running.finish()
    assert watch is None or watch.fileno() is None  # closed with the plugin


@pytest.mark.parametrize("kubelet,records_watched", [
    pytest.param(True, True, id="kubelets-checkpoint-watched-records-watched-from-the-first-use"),
    pytest.param(False, False, id="no-kubelet-records-watched-once-many"),
])
def test_the_record_folders_are_watched_from_the_first_use_where_kubelets_checkpoint_is(
        fake_node: Callable[..., Any], reporter: Any, monkeypatch: pytest.MonkeyPatch, kubelet: bool,
        records_watched: bool) -> None:
    """inotify (ctypes) loaded for kubelet's checkpoint: the record folders' watch costs no more
    memory, and the plugin starts it at its first use of the state lock (the next creation's lookups
    of its record and its pod's make no system call); a node without kubelet's directory loads ctypes
    only once a listing finds store.records.WATCH_FROM records."""
    from mixed_cpus_hook.node.inotify import FileWatch
    from mixed_cpus_hook.store import records as store

    monkeypatch.setattr(store, "_WANTED", set())
    node = fake_node(version=1, online="0-7")
    node.add_container(APP, cpus="2-3", quota=200000, pod_quota=200000)
    if kubelet:
        node.write_checkpoint({pod_and_container(APP)[0].uid: {"app": "2-3"}})
    else:
        node.configure(kubelet_state_file=os.path.join(node.root, "no-kubelet", "cpu_manager_state"))
    config = load_config(node.config_path)
    watch = FileWatch(config.kubelet_state_file)
    assert (watch.fileno() is not None) == kubelet
    running = Running(Handlers(config, reporter.reporter), reporter.reporter, watch=watch)
    try:
        running.peer.handshake()
        resp = running.peer.call("CreateContainer", create_request(APP), api.CreateContainerResponse)
        assert resp.adjust.linux.resources.cpu.cpus == "0-3"
        lock = running.plugin.handlers.engine.lock
        assert (lock.watch is not None) == records_watched
    finally:
        running.finish()


@pytest.mark.parametrize("watched,moved_by_the_request", [
    pytest.param(True, [], id="watched-compared-while-idle"),
    pytest.param(False, [True], id="unwatched-compared-by-the-request"),
])
def test_what_kubelets_checkpoint_moved_is_found_between_requests(fake_node: Callable[..., Any], reporter: Any,
                                                                   monkeypatch: pytest.MonkeyPatch, watched: bool,
                                                                   moved_by_the_request: List[bool]) -> None:
    """Once a watched checkpoint changed, the plugin compares it with the one its tracked containers
    were decided on while it waits (every entry: O(kubelet's containers)); the next request uses that
    comparison. The answers are the same either way: the new container gets kubelet's entry, the
    tracked one (its entry unchanged) no update."""
    from mixed_cpus_hook.node.inotify import FileWatch
    from mixed_cpus_hook.usecases import nri as engine

    node = fake_node(version=1, online="0-7")
    node.add_container(APP, cpus="2-3", quota=200000, pod_quota=200000)
    node.add_container(OTHER, name="other", cpus="4-5", quota=200000, pod_quota=200000, pod_uid=OTHER_UID)
    app_uid = pod_and_container(APP)[0].uid
    node.write_checkpoint({app_uid: {"app": "2-3"}})
    compared: List[bool] = []  # at each comparison: whether a request was being answered
    real = engine.compute_checkpoint_moved

    def counted(before: Any, now: Any) -> Any:
        compared.append(running.plugin.reporter.holding)
        return real(before, now)

    monkeypatch.setattr(engine, "compute_checkpoint_moved", counted)
    watch = FileWatch(node.kubelet_state) if watched else None
    running = Running(Handlers(load_config(node.config_path), reporter.reporter), reporter.reporter, watch=watch)
    try:
        running.peer.handshake()
        running.peer.call("CreateContainer", create_request(APP), api.CreateContainerResponse)
        del compared[:]
        node.write_checkpoint({app_uid: {"app": "2-3"}, OTHER_UID: {"other": "5"}})  # kubelet admits other's pod
        if watched:
            wait_for(lambda: bool(compared), 5, "the comparison while idle")
        assert compared == ([False] if watched else [])
        del compared[:]
        resp = running.peer.call("CreateContainer", create_request(OTHER, name="other", cpus="4-5", pod_uid=OTHER_UID),
                                 api.CreateContainerResponse)
        assert resp.adjust.linux.resources.cpu.cpus == "0-1,5" and list(resp.update) == []
        assert compared == moved_by_the_request
    finally:
        running.finish()
