"""LBT-TCP (and UIM) stream framing: a TCP byte stream of back-to-back LBMC messages.

Theory of operation
-------------------
LBT-TCP has no header of its own (wire-lbmr-transports-srs.md section 7): the source (the TCP
server, listening in ``transport_tcp_port_low..high``) writes LBMC messages one after another and
each is delimited by its own ``msglen`` (u16 at offset 2).  A receiver first sends one CONTROL
message holding a TCP_SID header (0x6B) with the session ID from the TIR, which is what lets
tshark (and the source) tie the connection to the advertised transport.  UIM connections (and
the store's persistence port) use exactly the same framing.

:class:`LBTTCPDecoder` is the incremental reader: ``feed(data)`` returns every message completed
by ``data`` and keeps the partial tail, so feeding a stream one byte at a time gives the same
messages as feeding it at once.  The first four bytes of each message are checked as soon as
they arrive (version 0, known type, msglen within bounds), so garbage is refused before anything
is buffered for it.  The buffer is bounded: it never holds more than one partial message, and a
message is at most ``max_message`` bytes (``MAX_LBMC_MESSAGE`` = 65535, the u16 ceiling; a
smaller limit may be configured).  After an error the decoder stays failed: the connection must
be closed, as UM does with a peer that desynchronised its stream.

:func:`tcp_sid_message` builds the receiver's session-ID confirmation.
"""

from __future__ import annotations

from umcore.wire.lbmc import (
    MAX_LBMC_MESSAGE,
    MSG_CONTROL,
    LBMCError,
    LBMCMessage,
    TcpSid,
    decode,
    encode,
)
from umcore.wire.lbmc_headers import Buffer

__all__ = ["DEFAULT_SOURCE_PORTS", "LBTTCPDecoder", "tcp_sid_message"]

# UM's default transport_tcp_port_low..high; tshark's LBT-TCP heuristic uses the same range.
DEFAULT_SOURCE_PORTS = range(14371, 14391)
# Smallest msglen per message type (low nibble of byte 0): 12 for data types, 4 for CONTROL/EOT.
_MIN_LEN = {0x0: 12, 0x2: 12, 0xA: 12, 0x8: 4, 0x1: 4}


def tcp_sid_message(session_id: int) -> bytes:
    """The CONTROL message a receiver sends first to confirm the transport session ID."""
    return encode(LBMCMessage(MSG_CONTROL, headers=[TcpSid(0, session_id)]))


class LBTTCPDecoder:
    """Incremental LBMC-over-TCP reader; see the module docstring."""

    __slots__ = ("_buf", "_failed", "bytes_in", "max_message", "messages_out")

    def __init__(self, max_message: int = MAX_LBMC_MESSAGE) -> None:
        if not 4 <= max_message <= MAX_LBMC_MESSAGE:
            raise ValueError(f"max_message must be 4..{MAX_LBMC_MESSAGE}, not {max_message}")
        self.max_message = max_message
        self._buf = bytearray()
        self._failed: LBMCError | None = None
        self.bytes_in = 0
        self.messages_out = 0

    @property
    def pending(self) -> int:
        """Bytes of an incomplete message held until more data arrives."""
        return len(self._buf)

    def feed_frames(self, data: Buffer) -> list[bytes]:
        """The complete raw messages (bytes, each one LBMC message) that ``data`` finishes;
        decode them with :func:`~umcore.wire.lbmc.decode_data` or
        :func:`~umcore.wire.lbmc.decode`."""
        if self._failed is not None:
            raise LBMCError(f"stream already failed: {self._failed.message}", record="LBT-TCP")
        self.bytes_in += len(data)
        buf = self._buf
        if buf:
            buf += data
            src: Buffer = buf
        else:
            src = data
        out: list[bytes] = []
        pos = 0
        n = len(src)
        limit = self.max_message
        while n - pos >= 4:
            vt = src[pos]
            msglen = src[pos + 2] << 8 | src[pos + 3]
            least = _MIN_LEN.get(vt)  # version nibble must be 0, so vt is the type itself
            if least is None or msglen < least or msglen > limit:
                err = LBMCError(
                    f"bad LBMC message start (byte0 {vt:#04x}, msglen {msglen}, limit {limit})",
                    record="LBT-TCP",
                    offset=self.bytes_in - n + pos,
                )
                self._failed = err
                raise err
            if n - pos < msglen:
                break
            out.append(bytes(src[pos : pos + msglen]))
            pos += msglen
        if src is buf:
            if pos:
                del buf[:pos]
        elif pos < n:
            buf += src[pos:]
        self.messages_out += len(out)
        return out

    def feed(self, data: Buffer) -> list[LBMCMessage]:
        """The decoded messages that ``data`` completes."""
        frames = self.feed_frames(data)
        try:
            return [decode(frame) for frame in frames]
        except LBMCError as exc:
            self._failed = exc
            raise

    def eof(self) -> None:
        """The peer closed the stream: raise if it stopped in the middle of a message."""
        if self._buf:
            raise LBMCError(
                f"stream ended inside a message ({len(self._buf)} bytes)", record="LBT-TCP"
            )
