"""LBMC, UM's message-control layer: the message every UM transport and UIM connection carries.

Theory of operation
-------------------
An LBMC message is self-delimiting (wire-lbmc-ump.md sections 3-4, all big-endian)::

    0  ver_type   high nibble version (0), low nibble message type (MSG_*)
    1  next_hdr   type ID of the first chained header; 0x00 = payload follows at once
    2  msglen     u16, the whole message including these bytes
    4  tidx      \\ data types only (MESSAGE 0x0, PRORX 0x2, RETRANS 0xA): topic index and
    8  sqn       / topic sequence number.  CONTROL (0x8) and EOT (0x1) headers are 4 bytes.
    ...           chained headers (:mod:`umcore.wire.lbmc_headers`), each naming the next one;
                  a data chain ends with 0x00 and the rest of the message is the payload, a
                  control chain ends with 0xFF.

Carriers (LBT-RM, LBT-RU, LBT-TCP, UIM) concatenate messages ("implicit batching"), so
:func:`iter_messages`/:func:`decode_all` walk a buffer of back-to-back messages and
:class:`umcore.wire.lbttcp.LBTTCPDecoder` reframes a TCP stream.

Two paths:

* the **data path** (per message, must be cheap): :func:`encode_data`,
  :func:`encode_data_into` and :func:`decode_data` handle the plain data message (optionally with
  a TOPICNAME header) with one precompiled struct and no intermediate objects;
* the **general path**: :class:`LBMCMessage` with a list of header records, :func:`encode`,
  :func:`decode`, :func:`decode_at`, :func:`iter_messages`.

Decoders raise only :class:`LBMCError`, whatever the bytes; encoders raise
:class:`~umcore.errors.LocalProtocolError` for values the wire cannot carry.
"""

from __future__ import annotations

import struct
from collections.abc import Iterator
from dataclasses import dataclass, field
from operator import itemgetter
from typing import TypeVar

from umcore.errors import LocalProtocolError
from umcore.wire.lbmc_headers import *  # noqa: F403  (re-export: one import site for users)
from umcore.wire.lbmc_headers import (
    HDR_DATA,
    HDR_NONE,
    HEADER_TYPES,
    MAX_HEADER_LEN,
    Buffer,
    Frag,
    Header,
    LBMCError,
    RawHeader,
    TopicName,
)
from umcore.wire.lbmc_headers import __all__ as _header_names

__all__ = [
    *_header_names,
    "DATA_FRAG",
    "DATA_OTHER",
    "DATA_TOPIC",
    "DATA_TYPE_MASK",
    "HDR_DATA",
    "HDR_NONE",
    "MAX_HEADER_LEN",
    "MAX_LBMC_MESSAGE",
    "MSG_CONTROL",
    "MSG_DATA",
    "MSG_EOT",
    "MSG_PRORX",
    "MSG_RETRANS",
    "LBMCMessage",
    "decode",
    "decode_all",
    "decode_at",
    "decode_data",
    "encode",
    "encode_data",
    "encode_data_into",
    "iter_messages",
]

# Message types (low nibble of byte 0).
MSG_DATA = 0x0  # live data ("Message")
MSG_EOT = 0x1  # end of transport/topic (4-byte header)
MSG_PRORX = 0x2  # proactive retransmission (persistent source -> store)
MSG_CONTROL = 0x8  # control: registrations, ACKs, keepalives, SRI, TSNI, ...
MSG_RETRANS = 0xA  # retransmitted data (late join, OTR, store recovery)
_DATA_TYPES = frozenset((MSG_DATA, MSG_PRORX, MSG_RETRANS))
_HEADER_SIZE = {MSG_DATA: 12, MSG_PRORX: 12, MSG_RETRANS: 12, MSG_CONTROL: 4, MSG_EOT: 4}

# msglen is a u16 that counts the whole message: no LBMC message can be longer.  Bigger
# application messages are split with FRAG headers by the sender.
MAX_LBMC_MESSAGE = 0xFFFF

# decode_data() flags: the low nibble is the message type, the bits above say which headers
# were present.  Anything but a bare data message (and the payload) needs decode_at().
DATA_TYPE_MASK = 0x0F
DATA_FRAG = 0x100  # a FRAG header is present
DATA_TOPIC = 0x200  # a TOPICNAME header is present
DATA_OTHER = 0x400  # other headers, or a CONTROL/EOT message

_BASE = struct.Struct("!BBH")
_DATA_HDR = struct.Struct("!BBHII")
_TIDX_SQN = struct.Struct("!II")
_TOPIC_HDR = struct.Struct("!BBH")  # next_hdr, hdr_len, flags of a TOPICNAME header
_DATA_HDR_LEN = 12
_MAX_DATA_PAYLOAD = MAX_LBMC_MESSAGE - _DATA_HDR_LEN

_T = TypeVar("_T", bound=Header)


@dataclass(slots=True)
class LBMCMessage:
    """One LBMC message.  ``tidx``/``sqn`` exist only on data types and are 0 otherwise.

    ``headers`` is the chain in wire order.  ``payload`` follows the chain; on a CONTROL or EOT
    message it is normally empty (a non-empty one is sent with the 0x00 terminator, which tshark
    then labels as data).
    """

    msg_type: int
    tidx: int = 0
    sqn: int = 0
    headers: list[Header] = field(default_factory=list)
    payload: bytes = b""

    def find(self, kind: type[_T]) -> _T | None:
        """The first header of class ``kind``, or None."""
        for hdr in self.headers:
            if type(hdr) is kind:
                return hdr
        return None

    def find_all(self, kind: type[_T]) -> list[_T]:
        """Every header of class ``kind``, in wire order."""
        return [h for h in self.headers if type(h) is kind]


# ============================================================================================
# Data path
# ============================================================================================


def encode_data(
    tidx: int, sqn: int, payload: Buffer, *, topic: bytes | None = None, msg_type: int = MSG_DATA
) -> bytes:
    """A data message: topic index, sequence number, optional TOPICNAME header, payload.

    ``topic`` is sent as given (append ``b"\\0"`` for UM's C-string convention).  ``msg_type``
    may be MSG_RETRANS or MSG_PRORX for the same layout.
    """
    n = len(payload)
    if topic is None:
        if n > _MAX_DATA_PAYLOAD:
            raise LocalProtocolError(f"LBMC payload too long: {n} > {_MAX_DATA_PAYLOAD}")
        try:
            return _DATA_HDR.pack(msg_type, 0, _DATA_HDR_LEN + n, tidx, sqn) + payload
        except struct.error as exc:
            raise LocalProtocolError(f"cannot encode LBMC data header: {exc}") from None
    hlen = 4 + len(topic)
    if hlen > MAX_HEADER_LEN or hlen == 4:
        raise LocalProtocolError(f"topic name must be 1..251 bytes, not {len(topic)}")
    total = _DATA_HDR_LEN + hlen + n
    if total > MAX_LBMC_MESSAGE:
        raise LocalProtocolError(f"LBMC message too long: {total} > {MAX_LBMC_MESSAGE}")
    try:
        head = _DATA_HDR.pack(msg_type, TopicName.ID, total, tidx, sqn)
    except struct.error as exc:
        raise LocalProtocolError(f"cannot encode LBMC data header: {exc}") from None
    return b"".join((head, _TOPIC_HDR.pack(HDR_DATA, hlen, 0), topic, payload))


def encode_data_into(buf: bytearray, offset: int, tidx: int, sqn: int, payload: Buffer) -> int:
    """Write a bare data message at ``buf[offset:]`` (growing ``buf`` as needed) and return the
    offset just past it: append several to one bytearray to build a batch datagram."""
    n = len(payload)
    if n > _MAX_DATA_PAYLOAD:
        raise LocalProtocolError(f"LBMC payload too long: {n} > {_MAX_DATA_PAYLOAD}")
    end = offset + _DATA_HDR_LEN + n
    try:
        if offset == len(buf):
            buf += _DATA_HDR.pack(MSG_DATA, 0, _DATA_HDR_LEN + n, tidx, sqn)
            buf += payload
            return end
        if offset > len(buf):
            raise LocalProtocolError(f"offset {offset} past the end of the buffer ({len(buf)})")
        if end > len(buf):
            buf.extend(bytes(end - len(buf)))
        _DATA_HDR.pack_into(buf, offset, MSG_DATA, 0, _DATA_HDR_LEN + n, tidx, sqn)
    except struct.error as exc:
        raise LocalProtocolError(f"cannot encode LBMC data header: {exc}") from None
    buf[offset + _DATA_HDR_LEN : end] = payload
    return end


def decode_data(buf: Buffer, offset: int = 0) -> tuple[int, int, int, memoryview, int]:
    """Decode the message at ``buf[offset:]`` cheaply.

    Returns ``(tidx, sqn, flags, payload, next_offset)``: ``flags & DATA_TYPE_MASK`` is the
    message type; ``DATA_FRAG``/``DATA_TOPIC``/``DATA_OTHER`` say which headers were present (then
    call :func:`decode_at` for them).  CONTROL/EOT messages return tidx = sqn = 0 and
    ``DATA_OTHER``.  ``payload`` is a memoryview into ``buf`` (it pins a bytearray's size while
    alive).  The whole message is validated either way.
    """
    try:
        vt, nh, msglen, tidx, sqn = _DATA_HDR.unpack_from(buf, offset)
    except (struct.error, TypeError, ValueError):
        pass
    else:
        end = offset + msglen
        if nh == 0 and msglen >= _DATA_HDR_LEN and vt in _DATA_TYPES and end <= len(buf):
            return tidx, sqn, vt, memoryview(buf)[offset + _DATA_HDR_LEN : end], end
    return _decode_data_slow(buf, offset)


def _decode_data_slow(buf: Buffer, offset: int) -> tuple[int, int, int, memoryview, int]:
    msg, end = decode_at(buf, offset)
    flags = msg.msg_type
    if msg.msg_type not in _DATA_TYPES:
        flags |= DATA_OTHER
    for hdr in msg.headers:
        kind = type(hdr)
        flags |= DATA_FRAG if kind is Frag else DATA_TOPIC if kind is TopicName else DATA_OTHER
    plen = len(msg.payload)
    return msg.tidx, msg.sqn, flags, memoryview(buf)[end - plen : end], end


# ============================================================================================
# General path
# ============================================================================================


def encode(message: LBMCMessage) -> bytes:
    """The wire bytes of ``message``."""
    mtype = message.msg_type
    size = _HEADER_SIZE.get(mtype)
    if size is None:
        raise LocalProtocolError(f"unknown LBMC message type {mtype!r}")
    headers = message.headers
    payload = message.payload
    data_type = size == _DATA_HDR_LEN
    if not data_type and not headers and not payload:
        raise LocalProtocolError("a CONTROL/EOT message needs at least one header")
    terminator = HDR_DATA if data_type or payload else HDR_NONE
    parts: list[bytes] = [b""]
    ids = [h.type_id() for h in headers]
    for tid in ids:
        if tid in (HDR_DATA, HDR_NONE) or not 0 < tid < 0xFF:
            raise LocalProtocolError(f"invalid LBMC header type {tid!r}")
    try:
        for i, hdr in enumerate(headers):
            body = hdr.body_bytes()
            hlen = 2 + len(body)
            if hlen > MAX_HEADER_LEN:
                raise LocalProtocolError(
                    f"LBMC {type(hdr).__name__} header too long: {hlen} > {MAX_HEADER_LEN}"
                )
            parts.append(bytes((ids[i + 1] if i + 1 < len(ids) else terminator, hlen)))
            parts.append(body)
        parts.append(bytes(payload))
        total = size + sum(len(p) for p in parts)
        if total > MAX_LBMC_MESSAGE:
            raise LocalProtocolError(f"LBMC message too long: {total} > {MAX_LBMC_MESSAGE}")
        first = ids[0] if ids else terminator
        if data_type:
            parts[0] = _DATA_HDR.pack(mtype, first, total, message.tidx, message.sqn)
        else:
            parts[0] = _BASE.pack(mtype, first, total)
    except (struct.error, TypeError, ValueError, OverflowError) as exc:
        raise LocalProtocolError(f"cannot encode LBMC message: {exc}") from None
    return b"".join(parts)


def decode_at(buf: Buffer, offset: int = 0) -> tuple[LBMCMessage, int]:
    """Decode the message starting at ``buf[offset]``; return it and the offset just past it."""
    try:
        return _decode_at(buf, offset)
    except LBMCError:
        raise
    except (struct.error, IndexError, ValueError, TypeError, OverflowError) as exc:
        raise LBMCError(f"malformed LBMC message: {exc}", offset=offset) from None


def _decode_at(buf: Buffer, off: int) -> tuple[LBMCMessage, int]:
    limit = len(buf)
    if limit - off < 4:
        raise LBMCError("truncated LBMC header", record="LBMC", offset=off)
    vt, nh, msglen = _BASE.unpack_from(buf, off)
    if vt & 0xF0:
        raise LBMCError(f"LBMC version {vt >> 4} is not 0", record="LBMC", offset=off)
    mtype = vt & 0x0F
    size = _HEADER_SIZE.get(mtype)
    if size is None:
        raise LBMCError(f"invalid LBMC message type {mtype:#x}", record="LBMC", offset=off)
    if msglen < size:
        raise LBMCError(f"LBMC msglen {msglen} below {size}", record="LBMC", offset=off + 2)
    end = off + msglen
    if end > limit:
        raise LBMCError(
            f"LBMC message truncated: msglen {msglen}, {limit - off} bytes",
            record="LBMC",
            offset=off,
        )
    tidx = sqn = 0
    if size == _DATA_HDR_LEN:
        tidx, sqn = _TIDX_SQN.unpack_from(buf, off + 4)
    pos = off + size
    headers: list[Header] = []
    while nh != HDR_DATA and nh != HDR_NONE:
        if end - pos < 2:
            raise LBMCError("truncated LBMC chained header", record=f"LBMC {nh:#x}", offset=pos)
        nxt = buf[pos]
        hlen = buf[pos + 1]
        cls = HEADER_TYPES.get(nh)
        if cls is None:
            if hlen < 2 or pos + hlen > end:
                raise LBMCError(f"bad hdr_len {hlen}", record=f"LBMC {nh:#x}", offset=pos + 1)
            headers.append(RawHeader(nh, bytes(buf[pos + 2 : pos + hlen])))
        else:
            if hlen < cls.MIN_LEN or pos + hlen > end:
                raise LBMCError(
                    f"bad hdr_len {hlen} (minimum {cls.MIN_LEN}, {end - pos} bytes left)",
                    record=f"LBMC {nh:#x}",
                    offset=pos + 1,
                )
            headers.append(cls.decode_body(buf, pos, hlen))
        pos += hlen
        nh = nxt
    payload = bytes(buf[pos:end]) if nh == HDR_DATA else b""
    return LBMCMessage(mtype, tidx, sqn, headers, payload), end


def decode(buf: Buffer) -> LBMCMessage:
    """Decode exactly one LBMC message filling ``buf``."""
    msg, end = decode_at(buf, 0)
    if end != len(buf):
        raise LBMCError(f"{len(buf) - end} bytes after the LBMC message", offset=end)
    return msg


def split_frames(buf: Buffer, offset: int = 0) -> tuple[list[bytes], int]:
    """The whole LBMC messages ("frames", header and payload) in ``buf[offset:]`` as ``bytes``
    each, undecoded, and the offset just after the last whole one (a partial frame may follow).
    Raises LBMCError on a ``msglen`` below 4 (no frame can be that short).

    A run of frames of one length (a busy source's batch) is cut in C: its ``msglen`` columns
    are compared as strided slices, probing 8, 16, 32 ... frames ahead (work linear in the
    buffer whatever the lengths), and the run is sliced by one ``Struct.iter_unpack``."""
    data = buf if type(buf) is bytes else bytes(buf)
    out: list[bytes] = []
    append = out.append
    pos = offset
    end = len(data)
    while end - pos >= 4:
        msglen = data[pos + 2] << 8 | data[pos + 3]
        if msglen < 4:
            raise LBMCError(f"LBMC msglen {msglen} at offset {pos}")
        nxt = pos + msglen
        if nxt > end:
            break
        most = (end - pos) // msglen
        if most >= _SPLIT_RUN_MIN:
            probe = _SPLIT_RUN_MIN
            good = 0
            while True:
                stop = pos + probe * msglen
                hi = data[pos + 2 : stop : msglen]
                lo = data[pos + 3 : stop : msglen]
                if hi != hi[:1] * probe or lo != lo[:1] * probe:
                    break
                good = probe
                if probe == most:
                    break
                probe = min(2 * probe, most)
            if good:
                stop = pos + good * msglen
                out += map(_first, _frame_struct(msglen).iter_unpack(memoryview(data)[pos:stop]))
                pos = stop
                continue
        append(data[pos:nxt])
        pos = nxt
    return out, pos


# Fewest frames of one length cut as a run by split_frames (below it, one by one is as cheap).
_SPLIT_RUN_MIN = 8
# Structs cached per frame length for split_frames (bounded: a peer choosing lengths cannot
# grow the cache).
_MAX_FRAME_STRUCTS = 64
_FRAME_STRUCTS: dict[int, struct.Struct] = {}
_first = itemgetter(0)


def _frame_struct(msglen: int) -> struct.Struct:
    fmt = _FRAME_STRUCTS.get(msglen)
    if fmt is None:
        if len(_FRAME_STRUCTS) >= _MAX_FRAME_STRUCTS:
            _FRAME_STRUCTS.clear()
        fmt = _FRAME_STRUCTS[msglen] = struct.Struct(f"{msglen}s")
    return fmt


def iter_messages(buf: Buffer) -> Iterator[LBMCMessage]:
    """Each message of a buffer holding back-to-back messages (implicit batching)."""
    pos = 0
    limit = len(buf)
    while pos < limit:
        msg, pos = decode_at(buf, pos)
        yield msg


def decode_all(buf: Buffer) -> list[LBMCMessage]:
    """Every message of a datagram/segment of back-to-back messages; raises if one is bad."""
    return list(iter_messages(buf))
