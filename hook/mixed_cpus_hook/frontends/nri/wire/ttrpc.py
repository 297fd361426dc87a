"""ttrpc, the small RPC protocol NRI speaks: frames, requests, responses, one client and one server.

Facts from containerd/ttrpc (PROTOCOL.md, channel.go, server.go, request.proto):
- a frame is a 10-byte header (big-endian uint32 data length, uint32 stream id, uint8 type:
  1 request, 2 response, 3 data; uint8 flags) and at most 4 MiB of data;
- a client opens streams with odd, increasing ids; a unary call is one Request
  ``{service=1, method=2, payload=3, timeout_nano=4, metadata=5 [{key=1, value=2}]}`` and one
  Response ``{status=1 (google.rpc.Status: code=1, message=2), payload=2}`` on that stream;
- a server answers a bad request on its stream id with a status (InvalidArgument for an
  undecodable request, a reused or even stream id; Unimplemented for an unknown method;
  ResourceExhausted for an oversized frame, whose data it discards) and keeps serving.

Everything here is pure (bytes in, bytes or values out): the socket lives in plugin.py.
"""

from __future__ import annotations

import struct
from typing import Callable, Dict, List, NamedTuple, Optional, Tuple

from google.protobuf.message import DecodeError

from ....core.bounds import MAX_STATUS_MESSAGE, quote
from ....node.log import format_line
from .api import build_file, load_classes

HEADER = struct.Struct(">IIBB")
HEADER_LEN = HEADER.size  # 10
MAX_MESSAGE = 4 << 20

TYPE_REQUEST = 1
TYPE_RESPONSE = 2
TYPE_DATA = 3
TYPE_NAMES = {TYPE_REQUEST: "request", TYPE_RESPONSE: "response", TYPE_DATA: "data"}
FLAG_REMOTE_CLOSED = 0x1
FLAG_REMOTE_OPEN = 0x2
FLAG_NO_DATA = 0x4

# google.golang.org/grpc/codes
OK = 0
UNKNOWN = 2
INVALID_ARGUMENT = 3
RESOURCE_EXHAUSTED = 8
UNIMPLEMENTED = 12
INTERNAL = 13
UNAVAILABLE = 14

_FILE = build_file("mixed_cpus_hook/frontends/nri/ttrpc.proto", "ttrpc", {
    "KeyValue": [("key", 1, "string"), ("value", 2, "string")],
    "Request": [("service", 1, "string"), ("method", 2, "string"), ("payload", 3, "bytes"),
                ("timeout_nano", 4, "int64"), ("metadata", 5, "*KeyValue")],
    "Status": [("code", 1, "int32"), ("message", 2, "string")],
    "Response": [("status", 1, "Status"), ("payload", 2, "bytes")],
}, {})
_CLASSES = load_classes(_FILE)
RequestMessage = _CLASSES["Request"]
ResponseMessage = _CLASSES["Response"]


class ProtocolError(Exception):
    """A peer broke the framing: the connection cannot go on (the message says how)."""


class RpcError(Exception):
    """A call answered with a non-OK status, or one that could not be made."""

    def __init__(self, code: int, message: str) -> None:
        super().__init__(f"{message} (code {code})")
        self.code = code
        self.message = message


class Frame(NamedTuple):
    stream_id: int
    type: int
    flags: int
    data: bytes
    # Length of an oversized frame whose data was discarded (data is then b"").
    discarded: int = 0


def format_frame(stream_id: int, mtype: int, flags: int, data: bytes) -> bytes:
    """One frame's bytes; refuses data over the 4 MiB the peer would refuse."""
    if len(data) > MAX_MESSAGE:
        raise ProtocolError(f"ttrpc: message of {len(data)} bytes exceeds the maximum of {MAX_MESSAGE}")
    return HEADER.pack(len(data), stream_id, mtype, flags) + data


def parse_header(header: bytes) -> Tuple[int, int, int, int]:
    """(length, stream id, type, flags) of a 10-byte header."""
    return HEADER.unpack(header)


class FrameReader:
    """Reassembles frames from a byte stream fed in arbitrary pieces.

    An oversized frame's data is skipped, as ttrpc's channel does, and reported as a Frame
    with ``discarded`` set so that the server can answer ResourceExhausted on its stream.
    """

    def __init__(self, max_message: int = MAX_MESSAGE) -> None:
        self.max_message = max_message
        self._buf = bytearray()
        self._skip = 0

    def feed(self, data: bytes) -> List[Frame]:
        if not self._buf and not self._skip and len(data) >= HEADER_LEN:  # nothing held: exactly one frame?
            length, stream_id, mtype, flags = HEADER.unpack_from(data)
            if len(data) == HEADER_LEN + length and length <= self.max_message:
                return [Frame(stream_id, mtype, flags, data[HEADER_LEN:])]
        self._buf += data
        frames: List[Frame] = []
        while True:
            if self._skip:
                n = min(self._skip, len(self._buf))
                del self._buf[:n]
                self._skip -= n
                if self._skip:
                    return frames
            if len(self._buf) < HEADER_LEN:
                return frames
            length, stream_id, mtype, flags = HEADER.unpack_from(self._buf)
            if length > self.max_message:
                del self._buf[:HEADER_LEN]
                self._skip = length
                frames.append(Frame(stream_id, mtype, flags, b"", discarded=length))
                continue
            if len(self._buf) < HEADER_LEN + length:
                return frames
            frames.append(Frame(stream_id, mtype, flags, bytes(self._buf[HEADER_LEN:HEADER_LEN + length])))
            del self._buf[:HEADER_LEN + length]

    @property
    def pending(self) -> int:
        """Bytes of an incomplete frame held (0 at a frame boundary)."""
        return len(self._buf) + self._skip


class Call(NamedTuple):
    """A decoded request."""

    stream_id: int
    service: str
    method: str
    payload: bytes
    timeout_nano: int
    metadata: Tuple[Tuple[str, str], ...]


def format_request(stream_id: int, service: str, method: str, payload: bytes, timeout_nano: int = 0,
                   metadata: Tuple[Tuple[str, str], ...] = ()) -> bytes:
    req = RequestMessage(service=service, method=method, payload=payload, timeout_nano=timeout_nano)
    for key, value in metadata:
        req.metadata.add(key=key, value=value)
    return format_frame(stream_id, TYPE_REQUEST, 0, req.SerializeToString())


def parse_request(frame: Frame) -> Call:
    """Decode a request frame's data; raises RpcError(INVALID_ARGUMENT) as ttrpc's server does."""
    try:
        req = RequestMessage.FromString(frame.data)
    except (DecodeError, ValueError) as exc:
        raise RpcError(INVALID_ARGUMENT, f"unmarshal request error: {exc}") from None
    return Call(frame.stream_id, req.service, req.method, req.payload, req.timeout_nano,
                tuple((kv.key, kv.value) for kv in req.metadata))


def format_response_data(payload: bytes = b"", code: int = OK, message: str = "") -> bytes:
    """A Response message's bytes; an error status's message is cut to bounds.MAX_STATUS_MESSAGE."""
    resp = ResponseMessage(payload=payload)
    if code != OK:
        resp.status.code = code
        resp.status.message = format_line(message)[:MAX_STATUS_MESSAGE]
    else:
        resp.status.SetInParent()  # an OK status is present but empty, like Go's status.Proto()
    return resp.SerializeToString()


# The Response bytes of the OK answers given so far, by their payload: the same few come again and
# again (the empty answer to every event of every container on the node; equal containers' creations
# get equal adjustments). Payloads up to OK_MEMO_PAYLOAD bytes (a longer one is not hashed), at most
# OK_MEMO of them, then all forgotten at once. From cold caches a Response built and encoded took
# 4 us with upb, 8 us with protobuf 3's C++ build; a lookup 1 us.
OK_MEMO = 64
OK_MEMO_PAYLOAD = 1024
_OK_DATA: Dict[bytes, bytes] = {}


def format_ok_data(payload: bytes) -> bytes:
    """format_response_data of an OK answer carrying ``payload`` (remembered when it is short)."""
    if len(payload) > OK_MEMO_PAYLOAD:
        return format_response_data(payload)
    data = _OK_DATA.get(payload)
    if data is None:
        data = format_response_data(payload)
        if len(_OK_DATA) >= OK_MEMO:
            _OK_DATA.clear()
        _OK_DATA[payload] = data
    return data


def format_response(stream_id: int, payload: bytes = b"", code: int = OK, message: str = "") -> bytes:
    """A response frame. A payload too large for one frame becomes a short RESOURCE_EXHAUSTED
    status instead: no frame built here exceeds the protocol's maximum."""
    data = format_response_data(payload, code, message)
    if len(data) > MAX_MESSAGE:
        data = format_response_data(code=RESOURCE_EXHAUSTED, message=f"response of {len(data)} bytes exceeds the "
                                    f"maximum message size of {MAX_MESSAGE}")
    return format_frame(stream_id, TYPE_RESPONSE, 0, data)


def parse_response(frame: Frame) -> bytes:
    """The payload of a response frame; RpcError for a non-OK status or undecodable data."""
    try:
        resp = ResponseMessage.FromString(frame.data)
    except (DecodeError, ValueError) as exc:
        raise RpcError(INTERNAL, f"ttrpc: undecodable response on stream {frame.stream_id}: {exc}") from None
    if resp.status.code != OK:
        raise RpcError(resp.status.code, resp.status.message)
    return resp.payload


# A method handler: (call) -> response payload; raises RpcError for an error status.
Handler = Callable[[Call], bytes]


class Server:
    """The server side of one ttrpc connection: frames in, response frames out, never raising.

    Unary methods only (NRI has no streaming method). ``handlers`` maps (service, method).
    ``on_error(message)`` hears about every request answered with an error and every frame
    ignored, so that the plugin can log it. Whatever a handler raises (an RpcError is its
    status; anything else is answered INTERNAL) ends only that request.
    """

    def __init__(self, handlers: Dict[Tuple[str, str], Handler],
                 on_error: Optional[Callable[[str], None]] = None) -> None:
        self.handlers = handlers
        self.on_error = on_error or (lambda message: None)
        self.last_stream_id = 0

    def _status(self, stream_id: int, code: int, message: str, what: str) -> bytes:
        self.on_error(f"{what}: answered {quote(message, MAX_STATUS_MESSAGE)} (code {code})")
        return format_response(stream_id, code=code, message=message)

    def handle(self, frame: Frame) -> Optional[bytes]:
        """The bytes to send back for ``frame`` (None: nothing to answer)."""
        sid = frame.stream_id
        if (frame.type == TYPE_REQUEST and not frame.discarded and sid % 2 == 1
                and sid > self.last_stream_id):  # a new request: the message naming it only on an error
            self.last_stream_id = sid
            return self._serve(frame)
        where = describe_frame(frame)
        if frame.discarded:
            return self._status(sid, RESOURCE_EXHAUSTED, f"message length {frame.discarded} exceed maximum "
                                f"message size of {MAX_MESSAGE}", where)
        if sid % 2 != 1:
            return self._status(sid, INVALID_ARGUMENT, "StreamID must be odd for client initiated streams", where)
        if frame.type == TYPE_DATA:
            return self._status(sid, INVALID_ARGUMENT, "StreamID is no longer active", where)
        if frame.type != TYPE_REQUEST:
            self.on_error(f"{where}: ignored (a server only takes requests)")
            return None
        if sid <= self.last_stream_id:
            return self._status(sid, INVALID_ARGUMENT, "StreamID cannot be re-used and must increment", where)
        raise AssertionError("unreachable: a new request is served above")  # pragma: no cover

    def _serve(self, frame: Frame) -> bytes:
        """A new request's answer: the handler's response, or the status saying why there is none."""
        sid = frame.stream_id
        served: Optional[Call] = None  # the call, once its handler is found (then messages name it)
        try:
            call = parse_request(frame)
            handler = self.handlers.get((call.service, call.method))
            if handler is None:
                known = {service for service, _ in self.handlers}
                missing = (f"method {quote(call.method, bare=True)}" if call.service in known
                           else f"service {quote(call.service, bare=True)}")
                raise RpcError(UNIMPLEMENTED, f"{missing}: not implemented")
            served = call
            data = format_ok_data(handler(call))
            if len(data) > MAX_MESSAGE:
                return self._status(sid, RESOURCE_EXHAUSTED, f"response of {len(data)} bytes exceeds the maximum "
                                    f"message size of {MAX_MESSAGE}", describe_frame(frame, served))
            return format_frame(sid, TYPE_RESPONSE, 0, data)
        except RpcError as exc:
            return self._status(sid, exc.code, exc.message, describe_frame(frame, served))
        except Exception as exc:  # noqa: BLE001 - one request must never end the connection's server
            return self._status(sid, INTERNAL, f"internal error: {quote(exc)}", describe_frame(frame, served))


def describe_frame(frame: Frame, call: Optional[Call] = None) -> str:
    """A frame as messages name it: "ttrpc request on stream 7", then ": service/Method" once its
    handler was found (an unknown method is named by the error itself)."""
    where = f"ttrpc {TYPE_NAMES.get(frame.type, f'type-{frame.type}')} on stream {frame.stream_id}"
    return where if call is None else f"{where}: {call.service}/{call.method}"


class Client:
    """The client side of one ttrpc connection: numbers streams, matches responses to calls."""

    def __init__(self) -> None:
        self.next_stream_id = 1
        self.pending: Dict[int, str] = {}

    def request(self, service: str, method: str, payload: bytes, timeout_nano: int = 0) -> Tuple[int, bytes]:
        """(stream id, frame bytes) of a new call."""
        sid = self.next_stream_id
        self.next_stream_id += 2
        self.pending[sid] = f"{service}/{method}"
        return sid, format_request(sid, service, method, payload, timeout_nano)

    def response(self, frame: Frame) -> Tuple[int, str, Optional[bytes], Optional[RpcError]]:
        """(stream id, method, payload or None, error or None) of an answer frame.

        Raises ProtocolError for a frame that answers no pending call or is not a response.
        """
        method = self.pending.pop(frame.stream_id, None)
        if method is None:
            raise ProtocolError(f"ttrpc: {TYPE_NAMES.get(frame.type, f'type-{frame.type}')} frame on stream "
                                f"{frame.stream_id}, which no call of ours is waiting on")
        if frame.type != TYPE_RESPONSE:
            raise ProtocolError(f"ttrpc: {TYPE_NAMES.get(frame.type, f'type-{frame.type}')} frame answers the "
                                f"unary call {method} on stream {frame.stream_id}")
        try:
            return frame.stream_id, method, parse_response(frame), None
        except RpcError as exc:
            return frame.stream_id, method, None, exc
