"""LBT-RU (reliable unicast over UDP) datagram codec.

Theory of operation
-------------------
An LBT-RU *source* listens on one UDP port (announced in its TIR).  A *receiver* connects by
sending a connection request (CREQ); the source answers with a session message carrying the SYN
flag, then sends DATA datagrams (LBMC messages, opaque here) to every connected receiver and
periodic session messages (SM) while idle.  Receivers acknowledge (ACK) and NAK missing
sequence numbers; the source retransmits (DATA with the RX flag) or confirms the NAK (NCF).  A
source that no longer knows a receiver answers with RST.

Every datagram starts with a 4-byte header (big-endian)::

    0  u8  ver_type      version << 4 | type  (0 DATA, 2 SM, 3 NAK, 4 NCF, 5 ACK, 6 CREQ, 7 RST)
    1  u8  next_hdr      first option: 0 none, 1 SID (session id), 2 CID (client id)
    2  u16 flags_or_res  DATA 0x4000 retransmission; SM 0x8000 SYN; CREQ request code;
                         RST reason; reserved (0) otherwise

then the type-specific part, then the option chain ``{u8 next_hdr, u8 hdr_len, u16 flags,
u32 value}`` (the SID option must carry the TIR's session id: tshark ties data to the TIR by
it), then, for DATA only, the LBMC payload.  Layouts: ``wire-lbmr-transports-srs.md`` section 6,
checked against tshark 4.0.17.

Records keep the session id and client id options as ``session_id`` / ``client_id``
(``None`` = option absent); the encoder writes SID before CID with option flags 0.  Unknown
options are skipped when their ignore flag (0x8000) is set and refused otherwise.  The hot path
uses :func:`encode_data` / :func:`decode_header`.  Decoders raise only :class:`LBTRUError`.
"""

from __future__ import annotations

import struct
from collections.abc import Iterable

from umcore.errors import LocalProtocolError, RemoteProtocolError
from umcore.wire._shared import Record as _Record

__all__ = [
    "FLAG_RX",
    "FLAG_SYN",
    "HEADER_SIZE",
    "NCF_REASON_IGNORED",
    "NCF_REASON_NO_RETRY",
    "NCF_REASON_RX_DELAY",
    "NCF_REASON_SHED",
    "OPT_CID",
    "OPT_SID",
    "TYPE_ACK",
    "TYPE_CREQ",
    "TYPE_DATA",
    "TYPE_NAK",
    "TYPE_NCF",
    "TYPE_RST",
    "TYPE_SM",
    "LBTRUAck",
    "LBTRUConnectionRequest",
    "LBTRUData",
    "LBTRUError",
    "LBTRUNak",
    "LBTRUNcf",
    "LBTRURecord",
    "LBTRUReset",
    "LBTRUSessionMessage",
    "decode",
    "decode_header",
    "encode",
    "encode_data",
]


class LBTRUError(RemoteProtocolError):
    """A peer sent an LBT-RU datagram we cannot decode."""


TYPE_DATA = 0x0
TYPE_SM = 0x2
TYPE_NAK = 0x3
TYPE_NCF = 0x4
TYPE_ACK = 0x5
TYPE_CREQ = 0x6  # connection request (receiver -> source)
TYPE_RST = 0x7  # reset (source -> receiver)
_TYPE_NAMES = {
    TYPE_DATA: "DATA",
    TYPE_SM: "SM",
    TYPE_NAK: "NAK",
    TYPE_NCF: "NCF",
    TYPE_ACK: "ACK",
    TYPE_CREQ: "CREQ",
    TYPE_RST: "RST",
}
VERSION = 0

FLAG_RX = 0x4000  # DATA: retransmission
FLAG_SYN = 0x8000  # SM: answer to a CREQ, (re)starts the session
CREQ_REQUEST_SYN = 0
RST_REASON_DEFAULT = 0

OPT_SID = 0x01  # session id option: u32, equals the TIR session id
OPT_CID = 0x02  # client id option: u32 the receiver's client session id
OPT_FLAG_IGNORE = 0x8000  # an unknown option with this flag may be skipped

NAK_FORMAT_SELECTIVE = 0x0
NCF_REASON_NO_RETRY = 0x0
NCF_REASON_IGNORED = 0x1
NCF_REASON_RX_DELAY = 0x2
NCF_REASON_SHED = 0x3

_HDR = struct.Struct("!BBH")
HEADER_SIZE = _HDR.size  # 4
_DATA = struct.Struct("!II")  # sqn, trail_sqn
_HDR_DATA = struct.Struct("!BBHII")
_HDR_DATA_SID = struct.Struct("!BBHIIBBHI")  # DATA + SID option: what a source always sends
_SM = struct.Struct("!III")  # sm_sqn, lead_sqn, trail_sqn
_NAK = struct.Struct("!HH")  # num_naks, format
_NCF = struct.Struct("!IHBB")  # trail_sqn, num_ncfs, reserved, reason<<4 | format
_ACK = struct.Struct("!I")
_OPT = struct.Struct("!BBH")  # next_hdr, hdr_len, flags
_OPT_VALUE = struct.Struct("!BBHI")  # SID/CID: 8 bytes
_SID_CID_LEN = _OPT_VALUE.size

MAX_LIST = 0xFFFF  # NAK/NCF counts are u16
# A datagram (<= 64 KiB) holds at most this many 4-byte option heads; bounds the option walk.
MAX_OPTIONS = 65536 // _OPT.size


class LBTRUData(_Record):
    """DATA: sequence number, trail (oldest retransmittable) sequence number, header flags
    (``FLAG_RX``) and the LBMC ``payload`` (opaque)."""

    __slots__ = ("client_id", "flags", "payload", "session_id", "sqn", "trail_sqn")

    def __init__(
        self,
        sqn: int,
        trail_sqn: int,
        payload: bytes = b"",
        *,
        flags: int = 0,
        session_id: int | None = None,
        client_id: int | None = None,
    ) -> None:
        self.sqn = sqn
        self.trail_sqn = trail_sqn
        self.payload = bytes(payload)
        self.flags = flags
        self.session_id = session_id
        self.client_id = client_id

    @property
    def retransmission(self) -> bool:
        return bool(self.flags & FLAG_RX)


class LBTRUSessionMessage(_Record):
    """SM: session-message sequence number and the lead/trail data sequence numbers; ``flags``
    ``FLAG_SYN`` marks the answer to a connection request."""

    __slots__ = ("client_id", "flags", "lead_sqn", "session_id", "sm_sqn", "trail_sqn")

    def __init__(
        self,
        sm_sqn: int,
        lead_sqn: int,
        trail_sqn: int,
        *,
        flags: int = 0,
        session_id: int | None = None,
        client_id: int | None = None,
    ) -> None:
        self.sm_sqn = sm_sqn
        self.lead_sqn = lead_sqn
        self.trail_sqn = trail_sqn
        self.flags = flags
        self.session_id = session_id
        self.client_id = client_id

    @property
    def syn(self) -> bool:
        return bool(self.flags & FLAG_SYN)


class LBTRUNak(_Record):
    """NAK (receiver -> source): missing data sequence numbers."""

    __slots__ = ("client_id", "format", "session_id", "sqns")

    def __init__(
        self,
        sqns: Iterable[int],
        *,
        format: int = NAK_FORMAT_SELECTIVE,
        session_id: int | None = None,
        client_id: int | None = None,
    ) -> None:
        self.sqns = tuple(sqns)
        self.format = format
        self.session_id = session_id
        self.client_id = client_id


class LBTRUNcf(_Record):
    """NCF (source -> receiver): NAKed sequence numbers not retransmitted now, and why."""

    __slots__ = ("client_id", "format", "reason", "session_id", "sqns", "trail_sqn")

    def __init__(
        self,
        trail_sqn: int,
        sqns: Iterable[int],
        reason: int,
        *,
        format: int = NAK_FORMAT_SELECTIVE,
        session_id: int | None = None,
        client_id: int | None = None,
    ) -> None:
        self.trail_sqn = trail_sqn
        self.sqns = tuple(sqns)
        self.reason = reason
        self.format = format
        self.session_id = session_id
        self.client_id = client_id


class LBTRUAck(_Record):
    """ACK (receiver -> source): highest sequence number received in order."""

    __slots__ = ("ack_sqn", "client_id", "session_id")

    def __init__(
        self, ack_sqn: int, *, session_id: int | None = None, client_id: int | None = None
    ) -> None:
        self.ack_sqn = ack_sqn
        self.session_id = session_id
        self.client_id = client_id


class LBTRUConnectionRequest(_Record):
    """CREQ (receiver -> source): ``request`` code (0 = SYN), no body."""

    __slots__ = ("client_id", "request", "session_id")

    def __init__(
        self,
        request: int = CREQ_REQUEST_SYN,
        *,
        session_id: int | None = None,
        client_id: int | None = None,
    ) -> None:
        self.request = request
        self.session_id = session_id
        self.client_id = client_id


class LBTRUReset(_Record):
    """RST (source -> receiver): ``reason`` code (0 = default), no body.

    The encoder never puts options on a RST: tshark 4.0.17 does not locate them correctly
    (trap 9 of the wire note).  The decoder accepts them."""

    __slots__ = ("client_id", "reason", "session_id")

    def __init__(
        self,
        reason: int = RST_REASON_DEFAULT,
        *,
        session_id: int | None = None,
        client_id: int | None = None,
    ) -> None:
        self.reason = reason
        self.session_id = session_id
        self.client_id = client_id


LBTRURecord = (
    LBTRUData
    | LBTRUSessionMessage
    | LBTRUNak
    | LBTRUNcf
    | LBTRUAck
    | LBTRUConnectionRequest
    | LBTRUReset
)


# --------------------------------------------------------------------------------------------
# Encoding


def _options(session_id: int | None, client_id: int | None) -> tuple[int, bytes]:
    if session_id is None and client_id is None:
        return 0, b""
    if client_id is None:
        return OPT_SID, _OPT_VALUE.pack(0, _SID_CID_LEN, 0, session_id)
    if session_id is None:
        return OPT_CID, _OPT_VALUE.pack(0, _SID_CID_LEN, 0, client_id)
    return OPT_SID, _OPT_VALUE.pack(OPT_CID, _SID_CID_LEN, 0, session_id) + _OPT_VALUE.pack(
        0, _SID_CID_LEN, 0, client_id
    )


def _check_list(sqns: tuple[int, ...], fmt: int, what: str) -> bytes:
    if len(sqns) > MAX_LIST:
        raise LocalProtocolError(f"LBT-RU {what} lists at most {MAX_LIST} sequence numbers")
    if not 0 <= fmt <= 0x0F:
        raise LocalProtocolError(f"LBT-RU {what} format must fit 4 bits, got {fmt}")
    return struct.pack(f"!{len(sqns)}I", *sqns)


def encode(record: LBTRURecord) -> bytes:
    """The datagram for ``record``; :class:`LocalProtocolError` if a value does not fit."""
    try:
        if isinstance(record, LBTRUData):
            first, opts = _options(record.session_id, record.client_id)
            return (
                _HDR_DATA.pack(TYPE_DATA, first, record.flags, record.sqn, record.trail_sqn)
                + opts
                + record.payload
            )
        if isinstance(record, LBTRUSessionMessage):
            ptype, word = TYPE_SM, record.flags
            body = _SM.pack(record.sm_sqn, record.lead_sqn, record.trail_sqn)
        elif isinstance(record, LBTRUNak):
            lst = _check_list(record.sqns, record.format, "NAK")
            ptype, word = TYPE_NAK, 0
            body = _NAK.pack(len(record.sqns), record.format) + lst
        elif isinstance(record, LBTRUNcf):
            lst = _check_list(record.sqns, record.format, "NCF")
            if not 0 <= record.reason <= 0x0F:
                raise LocalProtocolError(f"LBT-RU NCF reason must fit 4 bits: {record.reason}")
            ptype, word = TYPE_NCF, 0
            body = (
                _NCF.pack(
                    record.trail_sqn, len(record.sqns), 0, (record.reason << 4) | record.format
                )
                + lst
            )
        elif isinstance(record, LBTRUAck):
            ptype, word, body = TYPE_ACK, 0, _ACK.pack(record.ack_sqn)
        elif isinstance(record, LBTRUConnectionRequest):
            ptype, word, body = TYPE_CREQ, record.request, b""
        elif isinstance(record, LBTRUReset):
            if record.session_id is not None or record.client_id is not None:
                raise LocalProtocolError("LBT-RU RST carries no options (tshark misplaces them)")
            ptype, word, body = TYPE_RST, record.reason, b""
        else:
            raise LocalProtocolError(f"not an LBT-RU record: {record!r}")
        first, opts = _options(record.session_id, record.client_id)
        return _HDR.pack(ptype, first, word) + body + opts
    except struct.error as exc:
        raise LocalProtocolError(f"LBT-RU value out of range in {record!r}: {exc}") from None


def encode_data(
    sqn: int,
    trail_sqn: int,
    payload: bytes | bytearray,
    session_id: int | None = None,
    flags: int = 0,
) -> bytes:
    """Hot path: a DATA datagram, with the SID option when ``session_id`` is given."""
    try:
        if session_id is None:
            return _HDR_DATA.pack(TYPE_DATA, 0, flags, sqn, trail_sqn) + payload
        return (
            _HDR_DATA_SID.pack(
                TYPE_DATA, OPT_SID, flags, sqn, trail_sqn, 0, _SID_CID_LEN, 0, session_id
            )
            + payload
        )
    except struct.error as exc:
        raise LocalProtocolError(f"LBT-RU DATA value out of range: {exc}") from None


# --------------------------------------------------------------------------------------------
# Decoding


def _parse_options(
    buf: memoryview, offset: int, first: int, record: str
) -> tuple[int, int | None, int | None]:
    """(offset after the chain, session id or None, client id or None)."""
    sid: int | None = None
    cid: int | None = None
    kind = first
    end = len(buf)
    count = 0
    while kind != 0:
        count += 1
        if count > MAX_OPTIONS:  # unreachable for a real datagram; keeps the loop bounded
            raise LBTRUError("too many option headers", record=record, offset=offset)
        if offset + _OPT.size > end:
            raise LBTRUError("truncated option header", record=record, offset=offset)
        nxt, hdr_len, flags = _OPT.unpack_from(buf, offset)
        if hdr_len < _OPT.size or offset + hdr_len > end:
            raise LBTRUError(f"bad option length {hdr_len}", record=record, offset=offset)
        if kind in (OPT_SID, OPT_CID):
            if hdr_len != _SID_CID_LEN:
                raise LBTRUError(
                    f"option {kind} has length {hdr_len}", record=record, offset=offset
                )
            value = int.from_bytes(buf[offset + 4 : offset + 8], "big")
            if kind == OPT_SID:
                if sid is not None:
                    raise LBTRUError("duplicate SID option", record=record, offset=offset)
                sid = value
            else:
                if cid is not None:
                    raise LBTRUError("duplicate CID option", record=record, offset=offset)
                cid = value
        elif not flags & OPT_FLAG_IGNORE:
            raise LBTRUError(f"unknown option type {kind}", record=record, offset=offset)
        offset += hdr_len
        kind = nxt
    return offset, sid, cid


def _common(buf: memoryview) -> tuple[int, int, int]:
    if len(buf) < HEADER_SIZE:
        raise LBTRUError(f"datagram of {len(buf)} bytes is shorter than the header", offset=0)
    ver_type, next_hdr, word = _HDR.unpack_from(buf, 0)
    if ver_type >> 4 != VERSION:
        raise LBTRUError(f"unsupported LBT-RU version {ver_type >> 4}", offset=0)
    ptype = ver_type & 0x0F
    if ptype not in _TYPE_NAMES:
        raise LBTRUError(f"unknown LBT-RU packet type {ptype}", offset=0)
    return ptype, next_hdr, word


def decode_header(
    buf: bytes | bytearray | memoryview,
) -> tuple[int, int, int, int, int | None, memoryview]:
    """Hot path: ``(type, flags, sqn, trail_sqn, session_id, payload)``.

    For DATA, ``payload`` is a memoryview of the LBMC bytes after the options and
    ``session_id`` the SID option's value (``None`` without one).  For the other types the
    sequence fields are 0, ``session_id`` is ``None`` and ``payload`` is empty: call
    :func:`decode`.
    """
    mv = memoryview(buf)
    if len(mv) >= _HDR_DATA_SID.size and mv[0] == TYPE_DATA and mv[1] == OPT_SID:
        # The common case, one unpack: DATA whose only option is the SID option.
        _vt, _n, word, sqn, trail, nxt, hdr_len, _fl, sid = _HDR_DATA_SID.unpack_from(mv)
        if nxt == 0 and hdr_len == _SID_CID_LEN:
            return TYPE_DATA, word, sqn, trail, sid, mv[_HDR_DATA_SID.size :]
    ptype, next_hdr, word = _common(mv)
    if ptype != TYPE_DATA:
        return ptype, word, 0, 0, None, mv[0:0]
    if len(mv) < _HDR_DATA.size:
        raise LBTRUError("truncated DATA header", record="DATA", offset=HEADER_SIZE)
    sqn, trail = _DATA.unpack_from(mv, HEADER_SIZE)
    offset, sid_opt, _cid = _parse_options(mv, _HDR_DATA.size, next_hdr, "DATA")
    return ptype, word, sqn, trail, sid_opt, mv[offset:]


def _sqn_list(buf: memoryview, offset: int, count: int, record: str) -> tuple[int, ...]:
    if offset + 4 * count > len(buf):
        raise LBTRUError(
            f"{record} lists {count} entries but is truncated", record=record, offset=offset
        )
    return struct.unpack_from(f"!{count}I", buf, offset)


def decode(buf: bytes | bytearray | memoryview) -> LBTRURecord:
    """One datagram as a record.  Trailing bytes after a non-DATA datagram are an error."""
    mv = memoryview(buf)
    ptype, next_hdr, word = _common(mv)
    name = _TYPE_NAMES[ptype]
    offset = HEADER_SIZE
    end = len(mv)
    if ptype == TYPE_DATA:
        if end < offset + _DATA.size:
            raise LBTRUError("truncated DATA header", record=name, offset=offset)
        sqn, trail = _DATA.unpack_from(mv, offset)
        offset, sid, cid = _parse_options(mv, offset + _DATA.size, next_hdr, name)
        return LBTRUData(sqn, trail, bytes(mv[offset:]), flags=word, session_id=sid, client_id=cid)
    record: LBTRURecord
    if ptype == TYPE_SM:
        if end < offset + _SM.size:
            raise LBTRUError("truncated SM", record=name, offset=offset)
        sm_sqn, lead, trail = _SM.unpack_from(mv, offset)
        offset, sid, cid = _parse_options(mv, offset + _SM.size, next_hdr, name)
        record = LBTRUSessionMessage(sm_sqn, lead, trail, flags=word, session_id=sid, client_id=cid)
    elif ptype == TYPE_NAK:
        if end < offset + _NAK.size:
            raise LBTRUError("truncated NAK", record=name, offset=offset)
        count, fmt = _NAK.unpack_from(mv, offset)
        sqns = _sqn_list(mv, offset + _NAK.size, count, name)
        offset, sid, cid = _parse_options(mv, offset + _NAK.size + 4 * count, next_hdr, name)
        record = LBTRUNak(sqns, format=fmt & 0x0F, session_id=sid, client_id=cid)
    elif ptype == TYPE_NCF:
        if end < offset + _NCF.size:
            raise LBTRUError("truncated NCF", record=name, offset=offset)
        trail, count, _res, reason_format = _NCF.unpack_from(mv, offset)
        sqns = _sqn_list(mv, offset + _NCF.size, count, name)
        offset, sid, cid = _parse_options(mv, offset + _NCF.size + 4 * count, next_hdr, name)
        record = LBTRUNcf(
            trail,
            sqns,
            reason_format >> 4,
            format=reason_format & 0x0F,
            session_id=sid,
            client_id=cid,
        )
    elif ptype == TYPE_ACK:
        if end < offset + _ACK.size:
            raise LBTRUError("truncated ACK", record=name, offset=offset)
        (ack,) = _ACK.unpack_from(mv, offset)
        offset, sid, cid = _parse_options(mv, offset + _ACK.size, next_hdr, name)
        record = LBTRUAck(ack, session_id=sid, client_id=cid)
    elif ptype == TYPE_CREQ:
        offset, sid, cid = _parse_options(mv, offset, next_hdr, name)
        record = LBTRUConnectionRequest(word, session_id=sid, client_id=cid)
    else:
        offset, sid, cid = _parse_options(mv, offset, next_hdr, name)
        record = LBTRUReset(word, session_id=sid, client_id=cid)
    if offset != end:
        raise LBTRUError(f"{end - offset} trailing bytes", record=name, offset=offset)
    return record
