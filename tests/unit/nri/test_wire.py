"""The wire: ttrpc frames, the NRI mux, the NRI messages, against bytes built by hand from the specs.

The hand encoder below is written from the protobuf encoding rules (tag = number << 3 | wire
type; varints little-endian base 128; length-delimited fields) and the field numbers of
containerd/nri pkg/api/api.proto and containerd/ttrpc request.proto, so these tests fail if
a field number or a header layout in the package is wrong.
"""

from __future__ import annotations

import struct
from typing import List, Tuple

import pytest
from google.protobuf.message import DecodeError

from mixed_cpus_hook.frontends.nri.wire import api, mux, ttrpc


def varint(n: int) -> bytes:
    if n < 0:
        n += 1 << 64
    out = bytearray()
    while True:
        b = n & 0x7F
        n >>= 7
        out.append(b | (0x80 if n else 0))
        if not n:
            return bytes(out)


def vfield(num: int, value: int) -> bytes:
    return varint(num << 3) + varint(value)


def lfield(num: int, data: bytes) -> bytes:
    return varint(num << 3 | 2) + varint(len(data)) + data


def s(num: int, text: str) -> bytes:
    return lfield(num, text.encode())


# -- ttrpc ------------------------------------------------------------------------------------

def test_request_frame_by_hand() -> None:
    data = s(1, "svc") + s(2, "Do") + lfield(3, b"\x01\x02") + vfield(4, 2_000_000_000)
    expected = struct.pack(">IIBB", len(data), 5, 1, 0) + data
    assert ttrpc.format_request(5, "svc", "Do", b"\x01\x02", timeout_nano=2_000_000_000) == expected


def test_request_with_metadata_decodes() -> None:
    data = s(1, "svc") + s(2, "Do") + lfield(5, s(1, "k") + s(2, "v"))
    call = ttrpc.parse_request(ttrpc.Frame(3, ttrpc.TYPE_REQUEST, 0, data))
    assert call == ttrpc.Call(3, "svc", "Do", b"", 0, (("k", "v"),))


@pytest.mark.parametrize("code,message,payload,data", [
    pytest.param(0, "", b"ok", lfield(1, b"") + lfield(2, b"ok"), id="ok-status-present-and-empty"),
    pytest.param(12, "method X: not implemented", b"", lfield(1, vfield(1, 12) + s(2, "method X: not implemented")),
                 id="unimplemented"),
])
def test_response_frame_by_hand(code: int, message: str, payload: bytes, data: bytes) -> None:
    assert ttrpc.format_response(7, payload, code, message) == struct.pack(">IIBB", len(data), 7, 2, 0) + data


def test_response_decodes_status() -> None:
    data = lfield(1, vfield(1, 3) + s(2, "bad"))
    with pytest.raises(ttrpc.RpcError) as err:
        ttrpc.parse_response(ttrpc.Frame(1, ttrpc.TYPE_RESPONSE, 0, data))
    assert (err.value.code, err.value.message) == (3, "bad")
    assert ttrpc.parse_response(ttrpc.Frame(1, ttrpc.TYPE_RESPONSE, 0, lfield(2, b"xy"))) == b"xy"


def test_frame_reader_any_split() -> None:
    stream = (ttrpc.format_frame(1, 1, 0, b"abc") + ttrpc.format_frame(3, 3, 5, b"")
              + ttrpc.format_frame(5, 2, 0, b"z" * 5000))
    expected = [ttrpc.Frame(1, 1, 0, b"abc"), ttrpc.Frame(3, 3, 5, b""), ttrpc.Frame(5, 2, 0, b"z" * 5000)]
    whole = ttrpc.FrameReader().feed(stream)
    reader = ttrpc.FrameReader()
    bytewise: List[ttrpc.Frame] = []
    for i in range(len(stream)):
        bytewise += reader.feed(stream[i:i + 1])
    assert whole == bytewise == expected and reader.pending == 0


# Reads as the socket gives them -> the frames each read yields (a read of exactly one whole frame, the
# usual one, is taken without the reassembly buffer; every other shape goes through it).
TT_READS = [
    ("one-whole-frame", [ttrpc.format_frame(1, 1, 0, b"abc")], [[ttrpc.Frame(1, 1, 0, b"abc")]]),
    ("empty-data", [ttrpc.format_frame(3, 1, 0, b"")], [[ttrpc.Frame(3, 1, 0, b"")]]),
    ("one-and-a-half", [ttrpc.format_frame(1, 1, 0, b"abc") + ttrpc.format_frame(3, 1, 0, b"xyz")[:12],
                        ttrpc.format_frame(3, 1, 0, b"xyz")[12:]],
     [[ttrpc.Frame(1, 1, 0, b"abc")], [ttrpc.Frame(3, 1, 0, b"xyz")]]),
    ("whole-frame-after-held-bytes", [ttrpc.format_frame(1, 1, 0, b"abc")[:4], ttrpc.format_frame(1, 1, 0, b"abc")[4:],
                                      ttrpc.format_frame(3, 1, 0, b"z")],
     [[], [ttrpc.Frame(1, 1, 0, b"abc")], [ttrpc.Frame(3, 1, 0, b"z")]]),
    ("oversized-whole", [struct.pack(">IIBB", 9, 5, 1, 0) + b"x" * 9, ttrpc.format_frame(7, 1, 0, b"ok")],
     [[ttrpc.Frame(5, 1, 0, b"", discarded=9)], [ttrpc.Frame(7, 1, 0, b"ok")]]),
]


@pytest.mark.parametrize("reads,frames", [c[1:] for c in TT_READS], ids=[c[0] for c in TT_READS])
def test_frame_reader_takes_each_read_as_it_comes(reads: List[bytes], frames: List[List[ttrpc.Frame]]) -> None:
    reader = ttrpc.FrameReader(max_message=8)
    assert [reader.feed(r) for r in reads] == frames and reader.pending == 0


MUX_READS = [
    ("one-whole-frame", [mux.format_frames(1, b"abc")], [[(1, b"abc")]]),
    ("empty-payload", [mux.format_frames(2, b"")], [[(2, b"")]]),
    ("one-and-a-half", [mux.format_frames(1, b"abc") + mux.format_frames(2, b"xyz")[:9],
                        mux.format_frames(2, b"xyz")[9:]], [[(1, b"abc")], [(2, b"xyz")]]),
    ("whole-frame-after-held-bytes", [mux.format_frames(1, b"abc")[:3], mux.format_frames(1, b"abc")[3:],
                                      mux.format_frames(2, b"z")], [[], [(1, b"abc")], [(2, b"z")]]),
    ("two-whole-frames", [mux.format_frames(1, b"a") + mux.format_frames(2, b"b")], [[(1, b"a"), (2, b"b")]]),
]


@pytest.mark.parametrize("reads,chunks", [c[1:] for c in MUX_READS], ids=[c[0] for c in MUX_READS])
def test_demux_takes_each_read_as_it_comes(reads: List[bytes], chunks: List[List[Tuple[int, bytes]]]) -> None:
    demux = mux.Demux()
    assert [demux.feed(r) for r in reads] == chunks and demux.pending == 0


def test_demux_refuses_a_whole_oversized_frame() -> None:
    with pytest.raises(mux.MuxError, match="frame of 9 bytes for connection 1 exceeds the maximum of 8"):
        mux.Demux(max_payload=8).feed(struct.pack(">II", 1, 9) + b"x" * 9)


def test_frame_reader_discards_oversized_and_goes_on() -> None:
    reader = ttrpc.FrameReader(max_message=8)
    frames = reader.feed(struct.pack(">IIBB", 20, 9, 1, 0) + b"x" * 12)
    assert frames == [ttrpc.Frame(9, 1, 0, b"", discarded=20)] and reader.pending == 8
    assert reader.feed(b"y" * 8 + ttrpc.format_frame(11, 1, 0, b"ok")) == [ttrpc.Frame(11, 1, 0, b"ok")]


def test_format_frame_refuses_oversized() -> None:
    with pytest.raises(ttrpc.ProtocolError, match=r"^ttrpc: message of 4194305 bytes exceeds the maximum of 4194304$"):
        ttrpc.format_frame(1, 1, 0, b"\0" * (ttrpc.MAX_MESSAGE + 1))


def echo_server(log: List[str]) -> ttrpc.Server:
    return ttrpc.Server({("svc", "Echo"): lambda call: call.payload}, on_error=log.append)


def request(sid: int, service: str = "svc", method: str = "Echo", payload: bytes = b"hi") -> ttrpc.Frame:
    return ttrpc.FrameReader().feed(ttrpc.format_request(sid, service, method, payload))[0]


def answer(out: bytes) -> ttrpc.RpcError:
    frame = ttrpc.FrameReader().feed(out)[0]
    assert frame.type == ttrpc.TYPE_RESPONSE
    with pytest.raises(ttrpc.RpcError) as err:
        ttrpc.parse_response(frame)
    return err.value


# Each case: frames sent after a good request on stream 1, then the status the last one gets.
MALFORMED_FRAMES = [
    pytest.param(ttrpc.Frame(2, 1, 0, b""), 3, "StreamID must be odd for client initiated streams", id="even-stream"),
    pytest.param(ttrpc.Frame(1, 1, 0, b""), 3, "StreamID cannot be re-used and must increment", id="reused-stream"),
    pytest.param(ttrpc.Frame(3, 3, 0, b"x"), 3, "StreamID is no longer active", id="data-frame"),
    pytest.param(ttrpc.Frame(3, 1, 0, b"\xff\xff\xff"), 3, "unmarshal request error: ", id="undecodable-request"),
    pytest.param(request(3, service="other"), 12, "service other: not implemented", id="unknown-service"),
    pytest.param(request(3, method="Nope"), 12, "method Nope: not implemented", id="unknown-method"),
    pytest.param(ttrpc.Frame(3, 1, 0, b"", discarded=5 << 20), 8,
                 "message length 5242880 exceed maximum message size of 4194304", id="oversized"),
]


@pytest.mark.parametrize("frame,code,message", MALFORMED_FRAMES)
def test_server_answers_malformed_and_keeps_serving(frame: ttrpc.Frame, code: int, message: str) -> None:
    log: List[str] = []
    server = echo_server(log)
    assert ttrpc.parse_response(ttrpc.FrameReader().feed(server.handle(request(1)))[0]) == b"hi"
    err = answer(server.handle(frame))
    assert err.code == code and err.message.startswith(message), err.message
    assert len(log) == 1 and message in log[0]
    assert ttrpc.parse_response(ttrpc.FrameReader().feed(server.handle(request(5)))[0]) == b"hi"


def _boom(exc: BaseException) -> ttrpc.Handler:
    def handler(call: ttrpc.Call) -> bytes:
        raise exc
    return handler


# A handler that fails in any way ends that request only: the server answers and never raises.
SERVER_FAILURES = [
    pytest.param(_boom(ttrpc.ProtocolError("ttrpc: message of 5000000 bytes exceeds the maximum")), ttrpc.INTERNAL,
                 "internal error: ProtocolError('ttrpc: message of 5000000 bytes", id="protocol-error"),
    pytest.param(_boom(ValueError("Value out of range: 9223372036854875807")), ttrpc.INTERNAL,
                 "internal error: ValueError('Value out of range", id="value-error"),
    pytest.param(_boom(RecursionError()), ttrpc.INTERNAL, "internal error: RecursionError()", id="recursion"),
    pytest.param(_boom(ttrpc.RpcError(ttrpc.UNKNOWN, "x" * (5 << 20))), ttrpc.UNKNOWN, "x" * 100, id="huge-status"),
    pytest.param(_boom(ttrpc.RpcError(ttrpc.UNKNOWN, "\x1b[2J\0")), ttrpc.UNKNOWN, "\\x1b[2J\\x00",
                 id="status-control-characters"),
    pytest.param(lambda call: b"p" * (4 << 20), ttrpc.RESOURCE_EXHAUSTED,
                 "response of 4194311 bytes exceeds the maximum message size of 4194304", id="oversized-response"),
]


@pytest.mark.parametrize("handler,code,message", SERVER_FAILURES)
def test_server_answers_every_failure_within_the_limits(handler: ttrpc.Handler, code: int, message: str) -> None:
    log: List[str] = []
    server = ttrpc.Server({("svc", "Echo"): handler}, on_error=log.append)
    out = server.handle(request(1))
    assert len(out) <= ttrpc.HEADER_LEN + 4096 + 16  # a short status, whatever the handler did
    err = answer(out)
    assert err.code == code and err.message.startswith(message), err.message[:200]
    assert len(err.message) <= 4096 and err.message.isprintable()
    assert len(log) == 1 and len(log[0]) < 20000


@pytest.mark.parametrize("method,expected", [
    pytest.param("M" * ((4 << 20) - 100), "method 'MMMM", id="method-4MiB"),
    pytest.param("Nope\x1b[2J", "method 'Nope\\x1b[2J': not implemented", id="method-escape"),
    pytest.param("Nope", "method Nope: not implemented", id="method-plain-as-go-says-it"),
])
def test_unknown_method_status_is_cut_and_escaped(method: str, expected: str) -> None:
    log: List[str] = []
    err = answer(echo_server(log).handle(request(1, method=method)))
    assert err.code == ttrpc.UNIMPLEMENTED and err.message.startswith(expected) and len(err.message) < 400
    assert len(log[0]) < 1000


# What the journal line of a refused request names: the frame, and the method once its handler was
# found; then what it answered (quoted as repr quotes it: the protobuf versions word decode errors
# differently).
NAMED = [
    pytest.param(request(3, method="Nope"), "ttrpc request on stream 3: answered ", "method Nope", id="unknown-method"),
    pytest.param(ttrpc.Frame(3, 1, 0, b"\xff\xff\xff"), "ttrpc request on stream 3: answered ", "unmarshal",
                 id="undecodable"),
    pytest.param(request(3, method="Boom"), "ttrpc request on stream 3: svc/Boom: answered ", "internal error",
                 id="handler-raised"),
    pytest.param(request(3, method="Refuse"), "ttrpc request on stream 3: svc/Refuse: answered ", "'no' (code 9)",
                 id="handler-refused"),
    pytest.param(request(1), "ttrpc request on stream 1: answered ", "StreamID cannot be re-used", id="reused"),
    pytest.param(ttrpc.Frame(4, 1, 0, b""), "ttrpc request on stream 4: answered ", "StreamID must be odd", id="even"),
    pytest.param(ttrpc.Frame(7, 9, 0, b""), "ttrpc type-9 on stream 7: ", "ignored", id="unknown-type"),
]


@pytest.mark.parametrize("frame,named,said", NAMED)
def test_a_refused_request_is_named_in_the_journal(frame: ttrpc.Frame, named: str, said: str) -> None:
    log: List[str] = []
    server = ttrpc.Server({("svc", "Echo"): lambda call: call.payload,
                           ("svc", "Boom"): _boom(KeyError("k")),
                           ("svc", "Refuse"): _boom(ttrpc.RpcError(9, "no"))}, on_error=log.append)
    server.handle(request(1))
    server.handle(frame)
    assert len(log) == 1 and log[0].startswith(named) and said in log[0][len(named):len(named) + 40], log


def test_format_response_cuts_the_status() -> None:
    frame = ttrpc.FrameReader().feed(ttrpc.format_response(1, code=2, message="y" * (1 << 20)))[0]
    with pytest.raises(ttrpc.RpcError) as err:
        ttrpc.parse_response(frame)
    assert len(err.value.message) == 4096


def test_server_ignores_a_response_frame() -> None:
    log: List[str] = []
    assert echo_server(log).handle(ttrpc.Frame(1, 2, 0, b"")) is None
    assert log == ["ttrpc response on stream 1: ignored (a server only takes requests)"]


@pytest.mark.parametrize("frame,message", [
    pytest.param(ttrpc.Frame(9, 2, 0, b""), "ttrpc: response frame on stream 9, which no call of ours is waiting on",
                 id="unknown-stream"),
    pytest.param(ttrpc.Frame(1, 3, 0, b""), "ttrpc: data frame answers the unary call svc/M on stream 1", id="data"),
])
def test_client_refuses_unexpected_frames(frame: ttrpc.Frame, message: str) -> None:
    client = ttrpc.Client()
    client.request("svc", "M", b"")
    with pytest.raises(ttrpc.ProtocolError) as err:
        client.response(frame)
    assert str(err.value) == message


def test_client_numbers_odd_streams_and_matches() -> None:
    client = ttrpc.Client()
    assert [client.request("s", "m", b"")[0] for _ in range(3)] == [1, 3, 5]
    resp = ttrpc.FrameReader().feed(ttrpc.format_response(3, b"p"))[0]
    assert client.response(resp) == (3, "s/m", b"p", None)
    err = client.response(ttrpc.FrameReader().feed(ttrpc.format_response(1, code=2, message="no"))[0])
    assert err[:3] == (1, "s/m", None) and (err[3].code, err[3].message) == (2, "no")


# -- mux --------------------------------------------------------------------------------------

def test_mux_frames_by_hand_and_chunked() -> None:
    assert mux.format_frames(2, b"abc") == b"\0\0\0\x02\0\0\0\x03abc"
    data = bytes(range(256)) * 20  # 5120 bytes: one 4096-byte frame and one of 1024
    out = mux.format_frames(1, data)
    assert out == struct.pack(">II", 1, 4096) + data[:4096] + struct.pack(">II", 1, 1024) + data[4096:]


def test_demux_any_split() -> None:
    stream = mux.format_frames(1, b"x" * 5000) + mux.format_frames(2, b"yz")
    demux = mux.Demux()
    got = []
    for i in range(0, len(stream), 7):
        got += demux.feed(stream[i:i + 7])
    assert got == [(1, b"x" * 4096), (1, b"x" * 904), (2, b"yz")] and demux.pending == 0


@pytest.mark.parametrize("action,message", [
    pytest.param(lambda: mux.Demux().feed(struct.pack(">II", 1, mux.MAX_PAYLOAD + 1)),
                 "mux: frame of 4194315 bytes for connection 1 exceeds the maximum of 4194314", id="oversized"),
    pytest.param(lambda: mux.format_frames(0, b"x"), "mux: connection id 0 is reserved", id="reserved-conn"),
])
def test_mux_malformed(action, message: str) -> None:
    with pytest.raises(mux.MuxError) as err:
        action()
    assert str(err.value) == message


def test_demux_many_tiny_frames_in_one_read() -> None:
    """20,000 frames in one read: one pass over the bytes (the buffer is cut once, not per frame)."""
    stream = (struct.pack(">II", 7, 1) + b"x") * 20000 + struct.pack(">II", 1, 2)
    demux = mux.Demux()
    got = demux.feed(stream)
    assert len(got) == 20000 and got[0] == (7, b"x") and demux.pending == 8
    assert demux.feed(b"ok") == [(1, b"ok")] and demux.pending == 0


def test_cut_repeated_keeps_the_first_and_counts_the_rest() -> None:
    """Top-level fields read from hand-built bytes: pods (1) and containers (2) interleaved, more (3)."""
    data = lfield(1, s(1, "p0")) + lfield(2, s(1, "c0")) + lfield(1, s(1, "p1")) + vfield(3, 1) + lfield(2, s(1, "c1"))
    out, dropped = api.cut_repeated(data, {1: 1, 2: 1})
    assert out == lfield(1, s(1, "p0")) + lfield(2, s(1, "c0")) + vfield(3, 1) and dropped == {1: 1, 2: 1}
    assert api.cut_repeated(data, {1: 9})[0] is data


@pytest.mark.parametrize("data", [b"\x0a\x05ab", b"\x0a", b"\x08", b"\x0b\x0c", b"\x80" * 11],
                         ids=["length-past-end", "no-length", "no-varint", "group", "varint-overlong"])
def test_cut_repeated_refuses_what_is_not_a_message(data: bytes) -> None:
    with pytest.raises(DecodeError):
        api.cut_repeated(data, {1: 0})


# -- NRI messages -------------------------------------------------------------------------------

def test_event_mask_matches_api_eventmask() -> None:
    # api.EventMask.Set: bit (event - 1); CREATE 4, UPDATE 8, STOP 10, REMOVE 11
    assert api.event_mask("CREATE_CONTAINER", "UPDATE_CONTAINER", "STOP_CONTAINER", "REMOVE_CONTAINER") == \
        (1 << 3) | (1 << 7) | (1 << 9) | (1 << 10)
    assert api.ConfigureResponse(events=0x688).SerializeToString() == vfield(2, 0x688)


def test_register_request_by_hand() -> None:
    msg = api.RegisterPluginRequest(plugin_name="mixed-cpus-hook", plugin_idx="10")
    assert msg.SerializeToString() == s(1, "mixed-cpus-hook") + s(2, "10")


def cpu_bytes(cpus: str, quota: int, period: int) -> bytes:
    return lfield(2, vfield(1, quota)) + lfield(3, vfield(1, period)) + s(6, cpus)


def test_container_update_by_hand() -> None:
    msg = api.ContainerUpdate(container_id="c1", ignore_failure=True)
    msg.linux.resources.cpu.cpus = "0-3"
    msg.linux.resources.cpu.quota.value = 400000
    msg.linux.resources.cpu.period.value = 100000
    linux = lfield(1, lfield(2, cpu_bytes("0-3", 400000, 100000)))  # LinuxContainerUpdate.resources.cpu
    assert msg.SerializeToString() == s(1, "c1") + lfield(2, linux) + vfield(3, 1)


def test_adjustment_by_hand() -> None:
    msg = api.ContainerAdjustment()
    msg.env.add(key="OPENSHIFT_ISOLATED_CPUS", value="2-3")
    msg.linux.resources.cpu.cpus = "0-3"
    msg.linux.resources.cpu.quota.value = -1
    msg.linux.resources.cpu.period.value = 100000
    expected = (lfield(4, s(1, "OPENSHIFT_ISOLATED_CPUS") + s(2, "2-3"))
                + lfield(6, lfield(2, lfield(2, cpu_bytes("0-3", -1, 100000)))))
    assert msg.SerializeToString() == expected


def create_request_bytes(extra_container: bytes = b"") -> bytes:
    pod = (s(1, "p1") + s(2, "du-0") + s(3, "uid-1") + s(4, "ran")
           + lfield(6, s(1, "mixed-cpus.openshift.io/app") + s(2, "enable"))
           + lfield(8, s(3, "/kubepods/poduid-1")))
    container = (s(1, "c1") + s(2, "p1") + s(3, "app") + vfield(4, 1)
                 + lfield(11, lfield(3, lfield(2, cpu_bytes("2", 100000, 100000))) + s(5, "/kubepods/poduid-1/c1"))
                 + extra_container)
    return lfield(1, pod) + lfield(2, container)


def test_create_request_from_hand_bytes() -> None:
    req = api.CreateContainerRequest.FromString(create_request_bytes())
    assert (req.pod.id, req.pod.name, req.pod.uid, req.pod.namespace) == ("p1", "du-0", "uid-1", "ran")
    assert dict(req.pod.annotations) == {"mixed-cpus.openshift.io/app": "enable"}
    assert req.pod.linux.cgroup_parent == "/kubepods/poduid-1"
    c = req.container
    assert (c.id, c.pod_sandbox_id, c.name, c.state) == ("c1", "p1", "app", 1)
    assert c.linux.cgroups_path == "/kubepods/poduid-1/c1"
    cpu = c.linux.resources.cpu
    assert (cpu.cpus, cpu.quota.value, cpu.period.value, cpu.HasField("shares")) == ("2", 100000, 100000, False)


def test_newer_runtime_fields_are_skipped() -> None:
    # Container.user = 21 (User{uid=1}), CDI_devices = 20, mounts = 9: not in our subset.
    extra = lfield(21, vfield(1, 1000)) + lfield(20, s(1, "vendor/dev=0")) + lfield(9, s(1, "/data"))
    req = api.CreateContainerRequest.FromString(create_request_bytes(extra))
    assert req.container.name == "app" and req.container.linux.resources.cpu.cpus == "2"


@pytest.mark.parametrize("data", [
    pytest.param(create_request_bytes()[:-3], id="truncated"),
    pytest.param(b"\x0a\x80", id="length-past-end"),
    pytest.param(b"\x07", id="wire-type-7"),
])
def test_malformed_message_raises_decode_error(data: bytes) -> None:
    with pytest.raises(DecodeError):
        api.CreateContainerRequest.FromString(data)


# The events that only name a container, as containerd sends them (the whole pod and container,
# here from hand bytes): (the request's field numbers of pod and container, the event number or None).
BY_REF = {
    "UpdateContainerRequest": (1, 2, None),
    "StopContainerRequest": (1, 2, None),
    "RemoveContainerRequest": (1, 2, None),
    "StateChangeEvent": (2, 3, 7),
    "StartContainerRequest": (1, 2, None),
}


@pytest.mark.parametrize("name", list(BY_REF))
def test_events_that_name_a_container_decode_its_names_only(name: str) -> None:
    """The plugin reads the names of their pod and container (api.BY_REF: every event of every
    container on the node comes this way): the annotations, environment and cgroups are skipped
    unread, and what is read is what the whole message says."""
    pod_field, ctr_field, event = BY_REF[name]
    whole = api.CreateContainerRequest.FromString(create_request_bytes())
    data = lfield(pod_field, whole.pod.SerializeToString()) + lfield(ctr_field, whole.container.SerializeToString())
    data = (vfield(1, event) if event is not None else b"") + data
    req = api.READ[name].FromString(data)
    assert (req.pod.id, req.pod.name, req.pod.uid, req.pod.namespace) == ("p1", "du-0", "uid-1", "ran")
    assert (req.container.id, req.container.pod_sandbox_id, req.container.name, req.container.state) == (
        "c1", "p1", "app", 1)
    assert name in api.BY_REF
    for msg, skipped in ((req.pod, ("annotations", "linux", "labels")), (req.container, ("annotations", "env", "linux"))):
        assert not {f.name for f in msg.DESCRIPTOR.fields} & set(skipped)
    if event is not None:
        assert req.event == event


def test_compute_read_view_puts_refs_in_place_of_their_sources() -> None:
    messages = {"Req": [("pod", 1, "Pod"), ("n", 2, "int64")], "Pod": [("id", 1, "string"), ("tags", 2, "map")]}
    fields = {"Req": ("pod", "n"), "Pod": ("id", "tags")}
    assert api.compute_read_view(messages, fields) == {
        "MapEntry": [("key", 1, "string"), ("value", 2, "string")],
        "Req": [("pod", 1, "Pod"), ("n", 2, "int64")], "Pod": [("id", 1, "string"), ("tags", 2, "*MapEntry")]}
    view = api.compute_read_view(messages, fields, {"PodRef": ("Pod", ("id",))}, ("Req",))
    assert view["Req"] == [("pod", 1, "PodRef"), ("n", 2, "int64")]
    assert view["PodRef"] == [("id", 1, "string")] and view["Pod"] == [("id", 1, "string"), ("tags", 2, "*MapEntry")]


@pytest.mark.parametrize("payload, remembered", [
    pytest.param(b"", True, id="empty"),
    pytest.param(b"\x0a\x03abc", True, id="short"),
    pytest.param(b"x" * ttrpc.OK_MEMO_PAYLOAD, True, id="at-the-bound"),
    pytest.param(b"x" * (ttrpc.OK_MEMO_PAYLOAD + 1), False, id="past-the-bound"),
    pytest.param(b"y" * (4 << 20), False, id="4MiB"),
])
def test_ok_answers_are_formatted_once_by_payload(payload: bytes, remembered: bool) -> None:
    memo = vars(ttrpc)["_OK_DATA"]
    memo.clear()
    first = ttrpc.format_ok_data(payload)
    assert first == ttrpc.format_response_data(payload)
    assert ttrpc.parse_response(ttrpc.Frame(1, ttrpc.TYPE_RESPONSE, 0, first)) == payload
    assert (payload in memo) is remembered
    assert (ttrpc.format_ok_data(payload) is first) is remembered


def test_the_ok_memo_is_bounded() -> None:
    for n in range(3 * ttrpc.OK_MEMO + 5):
        assert ttrpc.format_ok_data(str(n).encode()) == ttrpc.format_response_data(str(n).encode())
        assert len(vars(ttrpc)["_OK_DATA"]) <= ttrpc.OK_MEMO
