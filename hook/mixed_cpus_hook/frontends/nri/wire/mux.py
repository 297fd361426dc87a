"""containerd/nri pkg/net/multiplex: several logical connections over one unix socket.

Each frame is an 8-byte header (big-endian uint32 connection id, uint32 payload length) and
the payload. NRI uses two connections (pkg/net/multiplex ttrpc.go): 1, PluginServiceConn,
where the runtime calls the plugin (the plugin serves ttrpc there), and 2,
RuntimeServiceConn, where the plugin calls the runtime (RegisterPlugin, UpdateContainers).
Id 0 is reserved; the Go side drops frames for a connection nobody opened.

The Go reader hands one mux frame to one ``Read`` and fails it with ENOMEM when the reader's
buffer is smaller; ttrpc reads through a 4096-byte bufio.Reader. So frames sent here carry
at most ``CHUNK`` bytes; frames received are only a byte stream per connection (the Go side
cuts its messages where its bufio.Writer flushes, not at message boundaries).
"""

from __future__ import annotations

import struct
from typing import List, Tuple

HEADER = struct.Struct(">II")
HEADER_LEN = HEADER.size  # 8
PLUGIN_SERVICE_CONN = 1
RUNTIME_SERVICE_CONN = 2
RESERVED_CONN = 0
CHUNK = 4096
# multiplex.maxPayloadSize: a ttrpc header plus ttrpc's 4 MiB maximum message.
MAX_PAYLOAD = 10 + (4 << 20)


class MuxError(Exception):
    """The trunk's framing is broken; the whole connection has to go."""


def format_frames(conn_id: int, data: bytes, chunk: int = CHUNK) -> bytes:
    """``data`` for connection ``conn_id`` as frames of at most ``chunk`` payload bytes."""
    if conn_id == RESERVED_CONN:
        raise MuxError("mux: connection id 0 is reserved")
    if len(data) <= chunk:  # one frame (every answer but a large Synchronize's)
        return HEADER.pack(conn_id, len(data)) + data
    out = bytearray()
    for start in range(0, max(len(data), 1), chunk):
        piece = data[start:start + chunk]
        out += HEADER.pack(conn_id, len(piece)) + piece
    return bytes(out)


class Demux:
    """Splits the trunk's byte stream, fed in arbitrary pieces, into (connection id, payload)."""

    def __init__(self, max_payload: int = MAX_PAYLOAD) -> None:
        self.max_payload = max_payload
        self._buf = bytearray()

    def feed(self, data: bytes) -> List[Tuple[int, bytes]]:
        if not self._buf and len(data) >= HEADER_LEN:  # nothing held: a read of exactly one frame is the usual one
            conn_id, length = HEADER.unpack_from(data)
            if len(data) == HEADER_LEN + length and length <= self.max_payload:
                return [(conn_id, data[HEADER_LEN:])]
        self._buf += data
        out: List[Tuple[int, bytes]] = []
        buf, at, end = self._buf, 0, len(self._buf)
        while end - at >= HEADER_LEN:  # one pass, one deletion at the end: the cost follows the bytes
            conn_id, length = HEADER.unpack_from(buf, at)
            if length > self.max_payload:
                raise MuxError(f"mux: frame of {length} bytes for connection {conn_id} exceeds the maximum "
                               f"of {self.max_payload}")
            if end - at < HEADER_LEN + length:
                break
            out.append((conn_id, bytes(buf[at + HEADER_LEN:at + HEADER_LEN + length])))
            at += HEADER_LEN + length
        del buf[:at]
        return out

    @property
    def pending(self) -> int:
        """Bytes of an incomplete frame held (0 at a frame boundary)."""
        return len(self._buf)
