"""LZ4 framing for compressed TCP (``compression lz4``, seed 003 10.5): pyum's own, per direction.

Theory of operation
-------------------
UM compresses every TCP connection of a context whose ``compression`` is ``lz4`` (seed 10.5.1),
before TLS encrypts it (10.4.9).  How UM frames the compressed stream is not public (neither
the seeds nor our notes in ``shared/spec`` describe it, and Wireshark's LBM dissectors have no
field for it), so this framing is pyum's and **not claimed interoperable with UM**: a pyum
context with compression talks to pyum contexts with compression.

Each direction of a connection is, on top of the byte stream (plain or TLS):

1. a *hello* of :data:`HELLO_SIZE` bytes: ``b"UMZ"``, version ``1``, algorithm ``1`` (LZ4
   block format), three zero bytes.  Both sides send theirs first and check the peer's; a
   stream that does not start with it is not a compressed pyum peer (a plain peer, another
   version) and costs that connection;
2. then blocks, each ``u32 stored_len, u32 raw_len`` (network order) and ``stored_len`` bytes:
   when ``stored_len < raw_len`` the bytes are one LZ4 block that decompresses to exactly
   ``raw_len`` bytes; when ``stored_len == raw_len`` they are the raw bytes (data LZ4 cannot
   shrink travels as is); anything else, a ``raw_len`` of 0 or above :data:`MAX_BLOCK` is a
   protocol error.

The decoder (:class:`Lz4Decoder`) is fed whatever the socket gave and returns the raw bytes of
every whole block; it never holds more than one block plus a header (:data:`MAX_BLOCK` bounds
the memory a peer can make it hold).  The encoder (:func:`encode_blocks`) cuts its input into
blocks of at most :data:`MAX_BLOCK` raw bytes.  No I/O here; :mod:`umcore.aio.tls` drives it.
"""

from __future__ import annotations

import struct

import lz4.block

from umcore.errors import RemoteProtocolError

__all__ = ["HELLO", "HELLO_SIZE", "MAX_BLOCK", "Lz4Decoder", "encode_blocks"]

HELLO = b"UMZ\x01\x01\x00\x00\x00"
HELLO_SIZE = len(HELLO)
# Largest raw block: 64 KiB is LZ4's own block unit (its match window), enough for a whole
# batch of a TCP session, and it bounds what one peer makes the decoder buffer.
MAX_BLOCK = 65536

_HEADER = struct.Struct("!II")
_HEADER_SIZE = _HEADER.size


def encode_blocks(data: bytes | bytearray | memoryview) -> list[bytes]:
    """``data`` as framed blocks (header and body separately, ready for ``writelines``)."""
    out: list[bytes] = []
    view = memoryview(data)
    for start in range(0, len(view), MAX_BLOCK):
        raw = view[start : start + MAX_BLOCK]
        packed = lz4.block.compress(raw, store_size=False)
        if len(packed) < len(raw):
            out.append(_HEADER.pack(len(packed), len(raw)))
            out.append(packed)
        else:
            out.append(_HEADER.pack(len(raw), len(raw)))
            out.append(bytes(raw))
    return out


class Lz4Decoder:
    """One direction's decoder: the peer's hello, then its blocks (see the module docstring)."""

    __slots__ = ("_buf", "bytes_in", "bytes_out", "hello_seen")

    def __init__(self) -> None:
        self._buf = bytearray()
        self.hello_seen = False
        #: Bytes received (framed) and delivered (raw): the compression ratio seen.
        self.bytes_in = 0
        self.bytes_out = 0

    def receive_data(self, data: bytes | bytearray | memoryview) -> list[bytes]:
        """Feed bytes from the stream; returns the raw bytes of each whole block.

        Raises :class:`~umcore.errors.RemoteProtocolError` for a stream that is not this
        framing (wrong hello, bad header, a block that does not decompress to its length)."""
        buf = self._buf
        buf += data
        self.bytes_in += len(data)
        out: list[bytes] = []
        pos = 0
        if not self.hello_seen:
            if len(buf) < HELLO_SIZE:
                if not HELLO.startswith(bytes(buf)):
                    raise RemoteProtocolError("peer is not LZ4-compressed (no compression hello)")
                return out
            if bytes(buf[:HELLO_SIZE]) != HELLO:
                raise RemoteProtocolError("peer is not LZ4-compressed (no compression hello)")
            self.hello_seen = True
            pos = HELLO_SIZE
        end = len(buf)
        while end - pos >= _HEADER_SIZE:
            stored, raw = _HEADER.unpack_from(buf, pos)
            if raw == 0 or raw > MAX_BLOCK or stored > raw:
                raise RemoteProtocolError(f"bad LZ4 block header (stored {stored}, raw {raw})")
            if end - pos - _HEADER_SIZE < stored:
                break
            body = bytes(buf[pos + _HEADER_SIZE : pos + _HEADER_SIZE + stored])
            pos += _HEADER_SIZE + stored
            if stored == raw:
                out.append(body)
            else:
                try:
                    block = lz4.block.decompress(body, uncompressed_size=raw)
                except lz4.block.LZ4BlockError as exc:
                    raise RemoteProtocolError(f"bad LZ4 block: {exc}") from None
                if len(block) != raw:
                    raise RemoteProtocolError("LZ4 block shorter than its header says")
                out.append(block)
            self.bytes_out += raw
        if pos:
            del buf[:pos]
        return out
