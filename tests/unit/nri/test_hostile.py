"""A hostile runtime against the plugin as a real process: every class of misbehaviour, as tables.

One plugin process (``mixed-cpus-hook nri --socket PATH`` on a fake cgroup v2 node) serves the
table classes in turn; after every case a canary CreateContainer must be answered within
100 ms (hostile.CANARY_LIMIT), the process must be alive, and the fake node must have changed
only where the case allows (its own containers' cgroup files, their pods' quota and records).
Backpressure and signals get a process per case. The worst canary time is printed at the end
of the run (tests/unit/nri/conftest.py).

These cases drive the plugin only through its socket: they hold whatever the engine becomes.
"""

from __future__ import annotations

import json
import os
import select
import shutil
import signal
import socket
import struct
import tempfile
import time
from typing import Any, Callable, Iterator, List

import pytest

from mixed_cpus_hook.frontends.nri.wire import api, mux, ttrpc

from .hostile import (
    ANSWER_TIMES,
    APP,
    APP_UID,
    CANARY,
    CANARY_LIMIT,
    X_UID,
    Y_UID,
    Case,
    Served,
    X,
    Y,
    canary_request,
    listed,
    start_served,
    wait_for,
)
from .peer import create_request, pod_and_container

MiB = 1 << 20
INT64_MAX = (1 << 63) - 1
# Written out, not imported: the kernel's numbers (kernel/sched/core.c max_cfs_runtime = MAX_BW us,
# MAX_BW = 2^44 - 1) and the plugin's documented cpulist limit (docs/nri.md).
MAX_QUOTA = (1 << 44) - 1
MAX_CPULIST_TEXT = 64 << 10


@pytest.fixture(scope="module")
def served(node_class: type, fast_tmp_root: str, session_cache_dir: str) -> Iterator[Served]:
    workdir = tempfile.mkdtemp(dir=fast_tmp_root)
    s = start_served(node_class, workdir, session_cache_dir, ["--write-timeout", "1"])
    try:
        yield s
    finally:
        ANSWER_TIMES.update(s.times)
        s.plugin.close()
        shutil.rmtree(workdir, ignore_errors=True)


def run(served: Served, request: pytest.FixtureRequest, case: Case) -> None:
    served.run(request.node.name, case)


# -- helpers that build what a case sends ----------------------------------------------------------

def raw(s: Served, data: bytes, conn: int = mux.PLUGIN_SERVICE_CONN, chunk: int = mux.CHUNK) -> None:
    s.peer.send(conn, data, chunk)


def ttrpc_frame(sid: int, mtype: int, data: bytes, length: int = -1) -> bytes:
    return struct.pack(">IIBB", len(data) if length < 0 else length, sid, mtype, 0) + data


def expect(answer: Any, code: int, message: str = "") -> None:
    assert answer.code == code, (answer.code, answer.message[:300])
    assert message in answer.message, answer.message[:300]
    assert len(answer.message) <= 4096


def create_x(**kw: Any) -> Any:
    """CreateContainer of X (asking, its cgroup on the node) with some fields overridden."""
    kw.setdefault("pod_uid", X_UID)
    kw.setdefault("cpus", "5")
    kw.setdefault("quota", 100000)
    return create_request(X, **kw)


def create_case(req: Any, message: str, code: int = ttrpc.UNKNOWN, **kw: Any) -> Case:
    """A CreateContainer answered with an error (failure_policy fail), nothing written."""
    return Case(lambda s: expect(s.call("CreateContainer", req), code, message), **kw)


def no_update(s: Served, answer: Any) -> None:
    assert answer.code == ttrpc.OK, answer.message
    assert list(api.UpdateContainerResponse.FromString(answer.payload).update) == []


def update(cid: str, cpus: str = "", quota: Any = None, period: Any = None) -> Any:
    req = api.UpdateContainerRequest(container=api.Container(id=cid))
    cpu = req.linux_resources.cpu
    cpu.cpus = cpus
    if quota is not None:
        cpu.quota.value = quota
    if period is not None:
        cpu.period.value = period
    return req


def update_case(req: Any, **kw: Any) -> Case:
    """An UpdateContainer that passes through unchanged (an empty answer), nothing written."""
    return Case(lambda s: no_update(s, s.call("UpdateContainer", req)), **kw)


def pipelined(s: Served, n: int) -> None:
    sids = [s.peer.next_sid + 2 * i for i in range(n)]
    data = b"".join(ttrpc.format_request(sid, api.PLUGIN_SERVICE, "UpdateContainer",
                                         update("unknown-" + str(i)).SerializeToString()) for i, sid in enumerate(sids))
    s.peer.next_sid = sids[-1] + 2
    raw(s, data)
    for sid in sids:
        assert s.peer.answer(sid).code == ttrpc.OK


def split_socket_writes(s: Served) -> None:
    sid = s.peer.next_sid
    s.peer.next_sid += 2
    data = mux.format_frames(mux.PLUGIN_SERVICE_CONN, ttrpc.format_request(
        sid, api.PLUGIN_SERVICE, "CreateContainer", canary_request().SerializeToString()))
    for i in range(len(data)):
        s.peer.send_raw(data[i:i + 1])
    assert s.peer.answer(sid).code == ttrpc.OK


def closing(action: Callable[[Served], None]) -> Callable[[Served], None]:
    """Do ``action`` then close the connection from the runtime's side."""
    def act(s: Served) -> None:
        action(s)
        s.peer.close()
    return act


def oversized_then_more(s: Served) -> None:
    sid = s.peer.next_sid
    s.peer.next_sid += 2
    length = ttrpc.MAX_MESSAGE + 1
    raw(s, ttrpc_frame(sid, 1, b"\0" * length))
    expect(s.peer.answer(sid), ttrpc.RESOURCE_EXHAUSTED, "exceed maximum message size of 4194304")


def header_only(length: int) -> Callable[[Served], None]:
    def act(s: Served) -> None:
        sid = s.peer.next_sid
        s.peer.next_sid += 2
        raw(s, ttrpc_frame(sid, 1, b"", length=length))
        expect(s.peer.answer(sid), ttrpc.RESOURCE_EXHAUSTED, f"message length {length} exceed maximum")
    return act


def no_answer(frame: bytes) -> Callable[[Served], None]:
    """A frame the plugin ignores (logged): the canary right after proves nothing was answered."""
    return lambda s: raw(s, frame)


def answered(frame_for_sid: Callable[[int], bytes], code: int, message: str) -> Callable[[Served], None]:
    def act(s: Served) -> None:
        sid = s.peer.next_sid
        s.peer.next_sid += 2
        raw(s, frame_for_sid(sid))
        expect(s.peer.answer(sid), code, message)
    return act


def stream_answered(sid: int, code: int, message: str) -> Callable[[Served], None]:
    return lambda s: (raw(s, ttrpc_frame(sid, 1, b"")), expect(s.peer.answer(sid), code, message))


# -- framing: ttrpc --------------------------------------------------------------------------------

FRAMING = [
    pytest.param(Case(oversized_then_more), id="ttrpc-oversized-frame"),
    pytest.param(Case(closing(header_only(0xFFFFFFFF)), drops=True), id="ttrpc-length-4GiB-no-data"),
    pytest.param(Case(closing(header_only(ttrpc.MAX_MESSAGE + 1)), drops=True), id="ttrpc-length-over-max-no-data"),
    pytest.param(Case(closing(lambda s: raw(s, ttrpc_frame(s.peer.next_sid, 1, b"x" * 50, length=100))), drops=True),
                 id="ttrpc-truncated-then-close"),
    pytest.param(Case(closing(lambda s: raw(s, b"\0\0\0")), drops=True), id="ttrpc-half-header-then-close"),
    pytest.param(Case(answered(lambda sid: ttrpc_frame(sid, 1, b"\xff" * 32), ttrpc.INVALID_ARGUMENT,
                               "unmarshal request error")), id="ttrpc-garbage-request"),
    pytest.param(Case(answered(lambda sid: ttrpc_frame(sid, 1, b""), ttrpc.UNIMPLEMENTED, "not implemented")),
                 id="ttrpc-empty-request"),
    pytest.param(Case(no_answer(ttrpc_frame(1001, 2, b"\x12\x00"))), id="ttrpc-response-frame-ignored"),
    pytest.param(Case(no_answer(ttrpc_frame(1003, 99, b"junk"))), id="ttrpc-unknown-type-ignored"),
    pytest.param(Case(answered(lambda sid: ttrpc_frame(sid, 3, b"x"), ttrpc.INVALID_ARGUMENT,
                               "StreamID is no longer active")), id="ttrpc-data-frame"),
    pytest.param(Case(lambda s: expect(s.peer.call_raw("Configure", b"", sid=s.peer.next_sid + 1),
                                       ttrpc.INVALID_ARGUMENT, "must be odd")), id="ttrpc-even-stream-id"),
    pytest.param(Case(stream_answered(0, ttrpc.INVALID_ARGUMENT, "must be odd")), id="ttrpc-stream-id-0"),
    pytest.param(Case(stream_answered(1, ttrpc.INVALID_ARGUMENT, "cannot be re-used")), id="ttrpc-reused-stream-id"),
    pytest.param(Case(closing(stream_answered(0xFFFFFFFF, ttrpc.UNIMPLEMENTED, "not implemented")), drops=True),
                 id="ttrpc-last-stream-id-then-close"),
    pytest.param(Case(lambda s: pipelined(s, 200)), id="ttrpc-200-pipelined"),
    pytest.param(Case(lambda s: expect(s.call("CreateContainer", canary_request(), chunk=1), ttrpc.OK)),
                 id="ttrpc-1-byte-mux-frames"),
    pytest.param(Case(split_socket_writes), id="ttrpc-1-byte-socket-writes"),
    pytest.param(Case(lambda s: expect(s.peer.call_raw("Shutdown", b""), ttrpc.OK)), id="ttrpc-shutdown-then-serve"),
]


@pytest.mark.parametrize("case", FRAMING)
def test_framing(served: Served, request: pytest.FixtureRequest, case: Case) -> None:
    run(served, request, case)


# -- the multiplexer ---------------------------------------------------------------------------------

def many_frames(conn: int, count: int, payload: bytes = b"x") -> Callable[[Served], None]:
    return lambda s: s.peer.send_raw((struct.pack(">II", conn, len(payload)) + payload) * count)


def interleaved(s: Served) -> None:
    sid = s.peer.next_sid
    s.peer.next_sid += 2
    data = ttrpc.format_request(sid, api.PLUGIN_SERVICE, "CreateContainer", canary_request().SerializeToString())
    half = len(data) // 2
    junk = ttrpc.format_response(999, b"")  # an answer to a call the plugin never made, on its client connection
    s.peer.send_raw(mux.format_frames(1, data[:half]) + mux.format_frames(2, junk) + mux.format_frames(9, b"zz")
                    + mux.format_frames(1, data[half:]))
    assert s.peer.answer(sid).code == ttrpc.OK


def split_mux_header(s: Served) -> None:
    sid = s.peer.next_sid
    s.peer.next_sid += 2
    data = mux.format_frames(1, ttrpc.format_request(sid, api.PLUGIN_SERVICE, "UpdateContainer",
                                                     update("nobody").SerializeToString()))
    s.peer.send_raw(data[:3])
    time.sleep(0.02)
    s.peer.send_raw(data[3:7])
    time.sleep(0.02)
    s.peer.send_raw(data[7:])
    assert s.peer.answer(sid).code == ttrpc.OK


MUX = [
    pytest.param(Case(lambda s: s.peer.send_raw(struct.pack(">II", 1, mux.MAX_PAYLOAD + 1)), drops=True),
                 id="mux-oversized-frame"),
    pytest.param(Case(many_frames(7, 20000), log_limit=2048), id="mux-20000-frames-unknown-connection"),
    pytest.param(Case(many_frames(0, 100), log_limit=2048), id="mux-connection-0"),
    pytest.param(Case(many_frames(0xFFFFFFFF, 100), log_limit=2048), id="mux-connection-max"),
    pytest.param(Case(many_frames(1, 5000, b"")), id="mux-5000-empty-frames"),
    pytest.param(Case(interleaved), id="mux-interleaved-connections"),
    pytest.param(Case(split_mux_header), id="mux-split-header"),
    pytest.param(Case(lambda s: s.peer.send(2, ttrpc.format_request(5, api.RUNTIME_SERVICE, "RegisterPlugin", b"")),
                      log_limit=2048), id="mux-request-on-the-runtime-connection"),
    pytest.param(Case(lambda s: s.peer.send(2, b"\xff" * 64), log_limit=2048), id="mux-garbage-on-the-runtime-connection"),
]


@pytest.mark.parametrize("case", MUX)
def test_multiplexer(served: Served, request: pytest.FixtureRequest, case: Case) -> None:
    run(served, request, case)


# -- undecodable payloads ---------------------------------------------------------------------------

def non_utf8_id() -> bytes:
    data = create_x().SerializeToString()
    return data.replace(X.encode(), b"\xff\xfe" + X.encode()[2:], 1)


def unknown_field(size: int) -> bytes:
    """Field 15 (no field of CreateContainerRequest), length-delimited, ``size`` bytes."""
    varint, n = b"", size
    while True:
        varint += bytes([(n & 0x7F) | (0x80 if n > 0x7F else 0)])
        n >>= 7
        if not n:
            break
    return b"\x7a" + varint + b"u" * size


def nested_groups(depth: int) -> bytes:
    return b"\x7b" * depth + b"\x7c" * depth  # field 15, start-group / end-group, nested


UNDECODABLE = [
    pytest.param(Case(lambda s: expect(s.call("CreateContainer", b"\x0a\x80"), ttrpc.INVALID_ARGUMENT,
                                       "CreateContainer: undecodable request")), id="create-truncated"),
    pytest.param(Case(lambda s: expect(s.call("Synchronize", b"\x0a\xff\xff\xff\xff\x0f"), ttrpc.INVALID_ARGUMENT,
                                       "undecodable")), id="synchronize-length-past-end"),
    pytest.param(Case(lambda s: expect(s.call("UpdateContainer", b"\x08"), ttrpc.INVALID_ARGUMENT, "undecodable")),
                 id="update-truncated-varint"),
    pytest.param(Case(lambda s: expect(s.call("CreateContainer", non_utf8_id()), ttrpc.INVALID_ARGUMENT,
                                       "undecodable")), id="create-non-utf8-string"),
    pytest.param(Case(lambda s: expect(s.call("CreateContainer", nested_groups(5000)), ttrpc.INVALID_ARGUMENT,
                                       "undecodable")), id="create-groups-nested-5000-deep"),
    pytest.param(Case(lambda s: expect(s.call("CreateContainer", b"\x08\x01"), ttrpc.OK)),
                 id="create-wrong-wire-type-skipped"),
    pytest.param(Case(lambda s: expect(s.call("CreateContainer", unknown_field(4 * MiB - 1000)), ttrpc.OK)),
                 id="create-4MiB-unknown-field"),
    pytest.param(Case(lambda s: expect(s.call("Frobnicate", b""), ttrpc.UNIMPLEMENTED, "method Frobnicate")),
                 id="unknown-method"),
    pytest.param(Case(lambda s: expect(s.peer.answer(s.peer.request("Ping", b"", service="other.Service")),
                                       ttrpc.UNIMPLEMENTED, "service other.Service")), id="unknown-service"),
    pytest.param(Case(lambda s: expect(s.call("M" * (4 * MiB - 200), b""), ttrpc.UNIMPLEMENTED, "characters)")),
                 id="method-name-4MiB"),
    pytest.param(Case(lambda s: expect(s.peer.answer(s.peer.request("Ping", b"", service="\x1b[2J" * 250000)),
                                       ttrpc.UNIMPLEMENTED, "\\x1b")), id="service-name-1MiB-of-escapes"),
]


@pytest.mark.parametrize("case", UNDECODABLE)
def test_undecodable(served: Served, request: pytest.FixtureRequest, case: Case) -> None:
    run(served, request, case)


# -- hostile strings (an asking container; failure_policy "fail": the creation fails, cleanly) ----

def x_with(edit: Callable[[Any], None]) -> Any:
    req = create_x()
    edit(req)
    return req


def asking_name(name: str) -> Any:
    def edit(req: Any) -> None:
        req.container.name = name
        req.pod.annotations[f"mixed-cpus.openshift.io/{name}"] = "enable"
    return x_with(edit)


def log_escapes(s: Served) -> None:
    before = s.plugin.log_size()
    expect(s.call("CreateContainer", create_x(namespace="bad\x1b[31mns\x07\x9b")), ttrpc.UNKNOWN,
           "may not ask for mixed CPUs")

    def added_now() -> str:
        with open(s.plugin.log_path, "rb") as f:
            f.seek(before)
            return f.read().decode()

    # The journal lines are written after the answer (the runtime is answered first): waited for.
    wait_for(lambda: "may not ask for mixed CPUs" in added_now(), what="the refusal's log line")
    added = added_now()
    assert not [c for c in added if c != "\n" and not c.isprintable()], added
    assert "\\x1b[31mns\\x07\\x9b" in added, added


STRINGS = [
    pytest.param(create_case(x_with(lambda r: setattr(r.container.linux.resources.cpu, "cpus", "a" * 2200000)),
                             "longer than the 65536 allowed"), id="cpus-2.2MB-of-a"),
    pytest.param(create_case(x_with(lambda r: setattr(r.container.linux.resources.cpu, "cpus", "\x01" * 1100000)),
                             "longer than the 65536 allowed"), id="cpus-1.1MB-of-control"),
    pytest.param(create_case(x_with(lambda r: setattr(r.container.linux, "cgroups_path", "\x01" * 1100000)),
                             "linux.cgroups_path of 1100000 characters"), id="cgroups-path-1.1MB-of-control"),
    pytest.param(create_case(asking_name("n" * MiB), "container name of 1048576 characters"), id="container-name-1MiB"),
    pytest.param(create_case(x_with(lambda r: setattr(r.pod, "namespace", "n" * MiB)), "namespace of 1048576"),
                 id="namespace-1MiB"),
    pytest.param(Case(lambda s: expect(s.call("CreateContainer", x_with(
        lambda r: r.container.annotations.update({f"{i:x}": "" for i in range(100000)}))), ttrpc.OK)),
        id="100000-annotations"),
    pytest.param(Case(lambda s: expect(s.call("CreateContainer", x_with(
        lambda r: r.pod.annotations.update({f"{i:x}": "" for i in range(100000)}))), ttrpc.OK)),
        id="100000-pod-annotations"),
    pytest.param(create_case(x_with(lambda r: r.pod.annotations.update({"big": "v" * 300000})),
                             "pod annotations of 300"), id="annotations-300KB"),
    pytest.param(create_case(x_with(lambda r: setattr(r.container, "id", X + "\0")), "holds a NUL"), id="id-with-NUL"),
    pytest.param(create_case(asking_name("app\0"), "holds a NUL"), id="name-with-NUL"),
    pytest.param(create_case(x_with(lambda r: setattr(r.pod, "uid", X_UID + "\0")), "holds a NUL"),
                 id="uid-with-NUL"),
    pytest.param(Case(log_escapes), id="escapes-in-the-log"),
]


@pytest.mark.parametrize("case", STRINGS)
def test_hostile_strings(served: Served, request: pytest.FixtureRequest, case: Case) -> None:
    run(served, request, case)


# -- cpusets -----------------------------------------------------------------------------------------

def timed_update(cid: str, cpus: str) -> Callable[[Served], None]:
    def act(s: Served) -> None:
        start = time.monotonic()
        no_update(s, s.call("UpdateContainer", update(cid, cpus)))
        took = time.monotonic() - start
        assert took < 0.5, f"{took:.2f} s"
    return act


CPUSETS = [
    pytest.param(create_case(create_x(cpus="0" * (MAX_CPULIST_TEXT + 1)), "longer than the 65536 allowed"),
                 id="cpus-over-64KiB"),
    pytest.param(create_case(create_x(cpus=",".join(["0-8191"] * 9000)), "longer than the 18 that any list of this "
                             "node's online CPUs takes"), id="cpus-wide-ranges-x9000"),
    pytest.param(create_case(create_x(cpus="0-8191,0-8191"), "cpuset names CPUs 8-8191 not in 0-7"),
                 id="cpus-wide-ranges-short"),
    pytest.param(create_case(create_x(cpus="4-8191"), "cpuset names CPUs 8-8191 not in 0-7"), id="cpus-offline"),
    pytest.param(create_case(create_x(cpus=",".join(str(c) for c in range(1, 8191, 2))), "longer than the 18"),
                 id="cpus-4095-single-offline"),
    pytest.param(create_case(create_x(cpus="5," * 10 + "5"), "longer than the 18"), id="cpus-repeated"),
    pytest.param(create_case(create_x(cpus="3"), "already exclusive to other containers (3 by " + APP),
                 id="cpus-held-by-another-container"),
    pytest.param(create_case(create_x(cpus="5-4"), "is reversed"), id="cpus-reversed"),
    pytest.param(create_case(create_x(cpus="\uff15"), "not a cpulist"), id="cpus-fullwidth-digit"),
    pytest.param(create_case(create_x(cpus="5-"), "not a cpulist"), id="cpus-open-range"),
    pytest.param(create_case(create_x(cpus="99999999999"), "not a cpulist"), id="cpus-huge-number"),
    pytest.param(Case(timed_update("not-tracked", "0-8191," * 9000)), id="update-untracked-64KB-cpus"),
    pytest.param(Case(timed_update("not-tracked", "0" * MiB)), id="update-untracked-1MiB-cpus"),
    pytest.param(Case(timed_update(APP, "0" * MiB)), id="update-tracked-1MiB-cpus"),
    pytest.param(update_case(update(APP, "2-9")), id="update-tracked-offline"),
    pytest.param(update_case(update(APP, "7")), id="update-tracked-to-anothers-cpus"),
]


@pytest.mark.parametrize("case", CPUSETS)
def test_cpusets(served: Served, request: pytest.FixtureRequest, case: Case) -> None:
    run(served, request, case)


# -- quotas and periods ---------------------------------------------------------------------------

def pod_quota_near_max(s: Served) -> None:
    s.node.set_quota(f"kubepods/pod{X_UID}", MAX_QUOTA - 1000)


def restore_pod_quota(s: Served) -> None:
    s.node.set_quota(f"kubepods/pod{X_UID}", 100000)


def pod_near_max_refused(s: Served) -> None:
    try:
        expect(s.call("CreateContainer", create_x()), ttrpc.UNKNOWN, "its pod's quota raised to")
    finally:
        restore_pod_quota(s)


def update_keeps_the_mixed_set(s: Served, req: Any) -> None:
    cpu = api.UpdateContainerResponse.FromString(s.call("UpdateContainer", req).payload).update[0].linux.resources.cpu
    assert (cpu.cpus, cpu.quota.value, cpu.period.value) == ("0-3", 400000, 100000)


QUOTAS = [
    pytest.param(create_case(create_x(quota=-2), "quota -2 is outside the kernel's 1000..17592186044415 us"),
                 id="quota-minus-2"),
    pytest.param(create_case(create_x(quota=-(1 << 63)), "is outside the kernel's"), id="quota-int64-min"),
    pytest.param(create_case(create_x(quota=1), "quota 1 is outside"), id="quota-1"),
    pytest.param(create_case(create_x(quota=999), "quota 999 is outside"), id="quota-999"),
    pytest.param(create_case(create_x(quota=MAX_QUOTA + 1), "is outside the kernel's"), id="quota-above-kernel-max"),
    pytest.param(create_case(create_x(quota=INT64_MAX), "is outside the kernel's"), id="quota-int64-max"),
    pytest.param(create_case(create_x(quota=INT64_MAX - 100000), "is outside the kernel's"),
                 id="quota-int64-overflow-when-raised"),
    pytest.param(create_case(create_x(quota=MAX_QUOTA - 1000), "the container's quota raised to"),
                 id="quota-raised-above-kernel-max"),
    pytest.param(Case(pod_near_max_refused, setup=pod_quota_near_max, allowed=(X,)),
                 id="pod-quota-raised-above-kernel-max"),
    pytest.param(create_case(x_with(lambda r: setattr(r.container.linux.resources.cpu.period, "value", 999)),
                             "period 999 is outside"), id="period-999"),
    pytest.param(create_case(x_with(lambda r: setattr(r.container.linux.resources.cpu.period, "value", 1000001)),
                             "period 1000001 is outside"), id="period-1000001"),
    pytest.param(create_case(x_with(lambda r: setattr(r.container.linux.resources.cpu.period, "value", (1 << 64) - 1)),
                             "is outside"), id="period-uint64-max"),
    pytest.param(update_case(update(APP, quota=INT64_MAX - 100000)), id="update-quota-int64-overflow"),
    pytest.param(update_case(update(APP, quota=MAX_QUOTA)), id="update-quota-raised-above-kernel-max"),
    pytest.param(update_case(update(APP, quota=-5)), id="update-quota-negative"),
    pytest.param(update_case(update(APP, period=(1 << 64) - 1)), id="update-period-uint64-max"),
    pytest.param(Case(lambda s: update_keeps_the_mixed_set(s, update(APP, "2-3", quota=0, period=0))),
                 id="update-quota-and-period-zero-are-not-in-the-update"),
]


@pytest.mark.parametrize("case", QUOTAS)
def test_quotas_and_periods(served: Served, request: pytest.FixtureRequest, case: Case) -> None:
    run(served, request, case)


# -- cgroups paths: only a container cgroup inside the pod cgroup of the pod uid given ---------------

OTHER_POD = f"/kubepods/pod{Y_UID}"
X_SLICE = f"kubepods-pod{X_UID.replace('-', '_')}.slice"


def x_path(path: str, parent: Any = None, uid: Any = None) -> Any:
    def edit(req: Any) -> None:
        req.container.linux.cgroups_path = path
        if parent is not None:
            req.pod.linux.cgroup_parent = parent
        if uid is not None:
            req.pod.uid = uid
    return x_with(edit)


PATHS = [
    pytest.param(create_case(x_path("/kubepods"), "is not a container cgroup inside the cgroup of pod"),
                 id="kubepods"),
    pytest.param(create_case(x_path(f"/kubepods/pod{X_UID}"), "is not a container cgroup inside"), id="the-pod-itself"),
    pytest.param(create_case(x_path(f"{OTHER_POD}/crio-{X}"), "is not a container cgroup inside"),
                 id="another-pods-cgroup"),
    pytest.param(create_case(x_path(f"/kubepods/pod{X_UID}/crio-{Y}"), "not named after the container id"),
                 id="another-containers-cgroup"),
    pytest.param(create_case(x_path(f"/kubepods/pod{X_UID}/crio-{X}-other"), "not named after the container id"),
                 id="id-inside-another-name"),
    pytest.param(create_case(x_path(f"{OTHER_POD}/crio-{X}", parent="", uid=""), "the pod uid is empty"),
                 id="empty-uid-another-pod"),
    pytest.param(create_case(x_path(f"/kubepods/pod{X_UID}/crio-{X}", uid="../../etc"), "is not a Kubernetes uid"),
                 id="uid-climbing"),
    pytest.param(create_case(x_path("x" * 5000), "linux.cgroups_path of 5000 characters"), id="x-5000"),
    pytest.param(create_case(x_path(f"/kubepods/pod{X_UID}/" + "x" * 300 + X), "component longer than 255"),
                 id="component-300"),
    pytest.param(create_case(x_path(f"/kubepods/pod{X_UID}/crio-{X}\0"), "holds a NUL"), id="NUL"),
    pytest.param(create_case(x_path(f"/kubepods/pod{X_UID}/../pod{Y_UID}/crio-{X}"), "climbs out"), id="dot-dot"),
    pytest.param(create_case(x_path("/"), "is not a container cgroup inside"), id="root"),
    pytest.param(create_case(x_path(""), "is not a container cgroup inside"), id="empty"),
    pytest.param(create_case(x_path(f"kubepods.slice:crio:{X}"), "is not a container cgroup inside"),
                 id="systemd-kubepods-slice"),
    pytest.param(create_case(x_path(f"kubepods-pod{Y_UID.replace('-', '_')}.slice:crio:{X}"),
                             "is not a container cgroup inside"), id="systemd-another-pods-slice"),
    pytest.param(create_case(x_path(f"-.slice:crio:{X}"), "is not a container cgroup inside"), id="systemd-root-slice"),
    pytest.param(create_case(x_path(f"{X_SLICE}:crio:other"), "not named after the container id"),
                 id="systemd-another-container"),
    pytest.param(create_case(x_path(f"/kubepods/pod{X_UID}/crio-{X}", parent=OTHER_POD), "linux.cgroup_parent"),
                 id="cgroup-parent-another-pod"),
    pytest.param(create_case(x_path(f"/kubepods/pod{X_UID}/crio-{X}", parent="/kubepods"), "linux.cgroup_parent"),
                 id="cgroup-parent-kubepods"),
    pytest.param(create_case(x_path(f"/kubepods/pod{X_UID}/crio-{X}", parent=X_SLICE), "linux.cgroup_parent"),
                 id="cgroup-parent-systemd-for-cgroupfs-path"),
]


@pytest.mark.parametrize("case", PATHS)
def test_cgroups_paths(served: Served, request: pytest.FixtureRequest, case: Case) -> None:
    run(served, request, case)


# -- odd container ids -------------------------------------------------------------------------------

ODD_IDS = ["", ".", "..", "a/b", "a b", "x" * MiB, "\0", "é" * 10, "x" * 243, "-"]


def odd_id_everywhere(cid: str) -> Callable[[Served], None]:
    def act(s: Served) -> None:
        req = create_x()
        req.container.id = cid
        answer = s.call("CreateContainer", req)
        assert answer.code == ttrpc.UNKNOWN, answer.message
        no_update(s, s.call("UpdateContainer", update(cid, "5")))
        assert s.call("StopContainer", api.StopContainerRequest(container=api.Container(id=cid))).code == ttrpc.OK
        assert s.call("RemoveContainer", api.RemoveContainerRequest(container=api.Container(id=cid))).code == ttrpc.OK
    return act


@pytest.mark.parametrize("cid", [pytest.param(c, id=repr(c[:12]) + (f"x{len(c)}" if len(c) > 12 else ""))
                                 for c in ODD_IDS])
def test_odd_ids(served: Served, request: pytest.FixtureRequest, cid: str) -> None:
    run(served, request, Case(odd_id_everywhere(cid)))


# -- lifecycle misuse -----------------------------------------------------------------------------------

def stop(cid: str) -> api.StopContainerRequest:
    return api.StopContainerRequest(container=api.Container(id=cid))


def x_admitted_and_stopped(s: Served) -> None:
    resp = s.call("CreateContainer", create_x())
    assert api.CreateContainerResponse.FromString(resp.payload).adjust.linux.resources.cpu.cpus == "0-1,5"
    assert s.node.quota(f"kubepods/pod{X_UID}") == "300000"
    again = s.call("CreateContainer", create_x())  # the runtime retries: the same answer, nothing added twice
    assert again.payload == resp.payload and s.node.quota(f"kubepods/pod{X_UID}") == "300000"
    s.call("StopContainer", stop(X))
    assert s.node.quota(f"kubepods/pod{X_UID}") == "100000"


def same_id_in_two_pods(s: Served) -> None:
    s.call("CreateContainer", create_x())
    assert s.node.quota(f"kubepods/pod{X_UID}") == "300000"
    in_y = create_request(X, pod_uid=Y_UID, cpus="5", quota=100000)
    s.node.add_container(X, pod_uid=Y_UID, cpus="5", quota=100000)  # its cgroup in pod Y
    try:
        resp = s.call("CreateContainer", in_y)
        assert resp.code == ttrpc.OK, resp.message
        assert s.node.quota(f"kubepods/pod{X_UID}") == "100000"  # pod X's share given back first
        assert s.node.quota(f"kubepods/pod{Y_UID}") == "300000"
        s.call("StopContainer", stop(X))
        assert s.node.quota(f"kubepods/pod{Y_UID}") == "100000"
    finally:
        shutil.rmtree(os.path.join(s.node.cgroup_root, f"kubepods/pod{Y_UID}/crio-{X}"))


def update_after_stop(s: Served) -> None:
    s.call("CreateContainer", create_x())
    s.call("StopContainer", stop(X))
    no_update(s, s.call("UpdateContainer", update(X, "5", 100000)))


def stop_before_create(s: Served) -> None:
    assert s.call("StopContainer", stop(X)).code == ttrpc.OK
    assert s.call("RemoveContainer", api.RemoveContainerRequest(container=api.Container(id=X))).code == ttrpc.OK
    x_admitted_and_stopped(s)


LIFECYCLE = [
    pytest.param(update_case(update("f" * 64, "5", 100000)), id="update-unknown"),
    pytest.param(Case(lambda s: expect(s.call("StopContainer", stop("f" * 64)), ttrpc.OK)), id="stop-unknown"),
    pytest.param(Case(lambda s: expect(s.call("RemoveContainer", api.RemoveContainerRequest(
        container=api.Container(id="f" * 64))), ttrpc.OK)), id="remove-unknown"),
    pytest.param(Case(lambda s: expect(s.call("StateChange", api.StateChangeEvent(event=99)), ttrpc.OK)),
                 id="state-change-unknown-event"),
    pytest.param(Case(x_admitted_and_stopped, allowed=(X,)), id="double-create"),
    pytest.param(Case(same_id_in_two_pods, allowed=(X, Y)), id="same-id-in-two-pods"),
    pytest.param(Case(stop_before_create, allowed=(X,)), id="stop-before-create"),
    pytest.param(Case(update_after_stop, allowed=(X,)), id="update-after-stop"),
    pytest.param(Case(lambda s: expect(s.call("Configure", api.ConfigureRequest(runtime_name="\x1b]0;pwned\x07")),
                                       ttrpc.OK)), id="configure-again-mid-connection"),
]


@pytest.mark.parametrize("case", LIFECYCLE)
def test_lifecycle(served: Served, request: pytest.FixtureRequest, case: Case) -> None:
    run(served, request, case)


# -- Synchronize ----------------------------------------------------------------------------------------

def sync(s: Served, pods: List[Any], containers: List[Any], more: bool = False) -> Any:
    answer = s.call("Synchronize", api.SynchronizeRequest(pods=pods, containers=containers, more=more))
    assert answer.code == ttrpc.OK, answer.message
    return api.SynchronizeResponse.FromString(answer.payload)


def huge_cpusets(s: Served) -> None:
    pods, containers = [], []
    cpus = ",".join(str(c) for c in range(0, 8190, 2))  # 4,095 CPUs
    for i in range(220):
        cid = f"{i:064x}"
        pod, ctr = pod_and_container(cid, pod_uid=X_UID, cpus=cpus)
        pods.append(pod)
        containers.append(ctr)
    first = sync(s, pods[:1], containers[:110], more=True)  # 4.4 MB: the runtime splits it in two parts
    assert first.more and list(first.update) == []
    answer = sync(s, [], containers[110:])
    assert list(answer.update) == []
    assert s.node.quota(f"kubepods/pod{X_UID}") == "100000"


def count_past_bound(s: Served) -> None:
    containers = [api.Container(id=f"c{i}", pod_sandbox_id="p") for i in range(70000)]
    pods, listed_containers = listed()
    sync(s, pods, listed_containers + containers)
    # a request's lines are logged once its answer is sent
    wait_for(lambda: "past bounds.MAX_SYNC_" in s.plugin.log(), what="the warning on the containers past the bound")


def split_without_end(s: Served) -> None:
    for i in range(50):
        part = sync(s, [], [api.Container(id=f"part{i}-{j}", pod_sandbox_id="p") for j in range(20)], more=True)
        assert part.more and list(part.update) == []
    assert s.canary() <= CANARY_LIMIT  # the plugin serves between the parts
    s.peer.close()  # and the runtime goes away: the parts are forgotten


def big_parts(s: Served) -> None:
    blob = "v" * (460 << 10)
    before = s.plugin.rss()
    for i in range(120):
        ctr = api.Container(id=f"big{i}", pod_sandbox_id="p", name="app")
        ctr.annotations["not-ours"] = blob
        sync(s, [], [ctr], more=True)
    grown = s.plugin.rss() - before
    assert grown < 24 * MiB, f"RSS grew by {grown >> 20} MiB over 120 parts of 460 KiB"
    pods, containers = listed()
    sync(s, pods, containers)


def empty_resync(s: Served) -> None:
    assert list(sync(s, [], []).update) == []
    assert set(s.node.records("containers")) >= {APP, CANARY}


def partial_resync(s: Served) -> None:
    pods, containers = listed()
    answer = sync(s, pods[1:], containers[1:])  # APP only
    assert [u.container_id for u in answer.update] == [APP]
    assert CANARY in s.node.records("containers")


def one_bad_among_good(s: Served) -> None:
    pods, containers = listed()
    pod_x, bad = pod_and_container(X, pod_uid=X_UID, cpus="5")
    bad.linux.cgroups_path += "\0"
    pod_y, good = pod_and_container(Y, pod_uid=Y_UID, cpus="6")
    answer = sync(s, pods + [pod_x, pod_y], containers + [bad, good])
    assert {u.container_id for u in answer.update} == {CANARY, APP, Y}
    wait_for(lambda: f"container {X}" in s.plugin.log() and "holds a NUL" in s.plugin.log(), what="the NUL warning")
    s.call("StopContainer", stop(Y))


def poisoned_record(s: Served) -> None:
    path = os.path.join(s.node.state_dir, "containers", f"{X}.json")
    doc = json.loads(json.dumps(s.node.records("containers")[APP]))
    doc.update(id=X, pod_uid=X_UID, pod_key=None, pod_cgroup=None, exclusive="5", desired="0-1,5",
               cgroup={k: os.path.join(s.node.cgroup_root, f"kubepods/pod{X_UID}/crio-{X}") for k in ("cpuset", "cpu")},
               quota={"base": INT64_MAX - 100000, "applied": INT64_MAX + 100000, "period": 100000,
                      "ours": [INT64_MAX + 100000]})
    with open(path, "w", encoding="utf-8") as f:
        json.dump(doc, f)
    try:
        pods, containers = listed()
        pod_x, ctr_x = pod_and_container(X, pod_uid=X_UID, cpus="0-1,5")
        answer = sync(s, pods + [pod_x], containers + [ctr_x])
        assert {u.container_id for u in answer.update} == {CANARY, APP}
        wait_for(lambda: "above the kernel's maximum quota" in s.plugin.log(), what="the quota refusal")
    finally:
        os.unlink(path)


def duplicates_and_orphans(s: Served) -> None:
    pods, containers = listed()
    pod_x, ctr_x = pod_and_container(X, pod_uid=X_UID, cpus="5")
    orphan = api.Container(id=Y, name="app", pod_sandbox_id="no-such-pod")
    orphan.annotations["mixed-cpus.openshift.io/app"] = "enable"
    answer = sync(s, pods, containers + containers + [ctr_x, orphan])  # X's pod is not listed
    assert sorted(u.container_id for u in answer.update) == sorted([APP, APP, CANARY, CANARY])


SYNCHRONIZE = [
    pytest.param(Case(huge_cpusets, log_limit=256 << 10), id="220-asking-with-4095-cpus"),
    pytest.param(Case(count_past_bound, log_limit=4096), id="70000-containers"),
    pytest.param(Case(split_without_end, drops=True), id="split-without-end"),
    pytest.param(Case(big_parts), id="120-parts-of-460KiB"),
    pytest.param(Case(empty_resync), id="empty-resync-keeps-records"),
    pytest.param(Case(partial_resync), id="partial-resync-keeps-records"),
    pytest.param(Case(one_bad_among_good, allowed=(Y,)), id="one-bad-container-among-good"),
    pytest.param(Case(poisoned_record, allowed=(X,)), id="poisoned-record-skipped"),
    pytest.param(Case(duplicates_and_orphans), id="duplicates-and-orphans"),
]


@pytest.mark.parametrize("case", SYNCHRONIZE)
def test_synchronize(served: Served, request: pytest.FixtureRequest, case: Case) -> None:
    run(served, request, case)


# -- backpressure and signals: a process each ------------------------------------------------------------

@pytest.fixture
def fresh(node_class: type, fast_tmp_root: str, session_cache_dir: str) -> Iterator[Callable[..., Served]]:
    made: List[Any] = []

    def make(*args: str) -> Served:
        workdir = tempfile.mkdtemp(dir=fast_tmp_root)
        made.append(workdir)
        s = start_served(node_class, workdir, session_cache_dir, args)
        made.append(s)
        return s

    yield make
    for item in made:
        if isinstance(item, Served):
            item.plugin.close()
        else:
            shutil.rmtree(item, ignore_errors=True)


def stop_reading(s: Served) -> int:
    """Ask and never read: answers pile up in the socket until the plugin cannot write (it may also
    stop reading: then the runtime cannot send either). The number of requests sent."""
    s.peer.sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    s.peer.sock.setblocking(False)
    request = ttrpc.format_request(1, api.PLUGIN_SERVICE, "M" * 100, b"")
    sent = 0
    for _ in range(20000):
        data = mux.format_frames(1, request[:4] + struct.pack(">I", s.peer.next_sid) + request[8:])
        _, writable, _ = select.select([], [s.peer.sock], [], 1.0)
        if not writable:
            break  # the plugin stopped reading too: its answers fill the socket
        try:
            s.peer.sock.sendall(data)
        except (BrokenPipeError, ConnectionResetError):
            break  # the plugin dropped the connection already
        s.peer.next_sid += 2
        sent += 1
    return sent


def test_backpressure_runtime_stops_reading(fresh: Callable[..., Served]) -> None:
    s = fresh("--write-timeout", "1")
    start = time.monotonic()
    sent = stop_reading(s)
    # the plugin drops the connection after the write timeout and connects again
    s.peer = s.plugin.accept(timeout=10)
    took = time.monotonic() - start
    assert sent > 3000, sent  # it read on while its answers waited: some 170 bytes each, more than a socket holds
    s.handshake()
    assert s.canary() <= CANARY_LIMIT
    assert 1 <= took < 5, took
    assert "connection dropped" in s.plugin.log()
    ANSWER_TIMES["backpressure"] = s.canary()


def mid_synchronize(s: Served) -> None:
    s.peer.request("Synchronize", api.SynchronizeRequest(
        containers=[api.Container(id=f"c{i}", pod_sandbox_id="p") for i in range(65000)]).SerializeToString())
    time.sleep(0.3)


def mid_split_synchronize(s: Served) -> None:
    s.peer.call("Synchronize", api.SynchronizeRequest(containers=[api.Container(id="c1")], more=True))


def in_backoff(s: Served) -> None:
    s.plugin.listener.close()  # the runtime is gone: the plugin retries with backoff
    s.peer.close()
    os.unlink(s.plugin.socket_path)
    wait_for(lambda: "cannot connect to the runtime" in s.plugin.log(), what="the plugin to retry")


SIGNALS = [
    pytest.param(signal.SIGTERM, lambda s: None, id="sigterm-idle"),
    pytest.param(signal.SIGINT, lambda s: None, id="sigint-idle"),
    pytest.param(signal.SIGTERM, stop_reading, id="sigterm-mid-write"),
    pytest.param(signal.SIGTERM, mid_synchronize, id="sigterm-mid-synchronize"),
    pytest.param(signal.SIGTERM, mid_split_synchronize, id="sigterm-mid-split-synchronize"),
    pytest.param(signal.SIGTERM, in_backoff, id="sigterm-in-backoff"),
]


@pytest.mark.parametrize("sig,state", SIGNALS)
def test_signal_ends_the_plugin(fresh: Callable[..., Served], sig: int, state: Callable[[Served], None]) -> None:
    s = fresh("--write-timeout", "30")
    quota = s.node.quota(f"kubepods/pod{APP_UID}")
    state(s)
    code, took = s.plugin.stop(sig)
    assert code == 0, s.plugin.log()[-2000:]
    assert took < 3, f"{took:.2f} s to stop"
    # nothing given back: the containers keep running, their records and raised quotas stay
    assert set(s.node.records("containers")) == {CANARY, APP}
    assert s.node.quota(f"kubepods/pod{APP_UID}") == quota == "400000"
    assert os.listdir(s.node.state_dir) and not os.path.exists(os.path.join(s.node.state_dir, "pending"))

