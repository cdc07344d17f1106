"""LBT-RM (reliable multicast over UDP) datagram codec.

Theory of operation
-------------------
An LBT-RM *source* multicasts DATA datagrams (each carrying one or more LBMC messages, opaque
here) and periodic session messages (SM, the heartbeat that announces the lead and trail
sequence numbers) to its group and destination port.  A *receiver* that sees a gap unicasts a
NAK listing the missing transport sequence numbers to the source's unicast port, which the
source announces in every datagram's header (``ucast_port``).  The source answers with a
retransmission (DATA with the RX flag) or multicasts a NAK confirmation (NCF) saying why it will
not, or not yet, retransmit.

Every datagram starts with the same 8-byte header (big-endian)::

    0  u8  ver_type    version << 4 | type   (version 0; type 0 DATA, 2 SM, 3 NAK, 4 NCF)
    1  u8  next_hdr    0 = no option headers; otherwise the type of the first option header
    2  u16 ucast_port  the source's unicast (NAK) port; part of the transport identity
    4  u32 session_id  random per transport; the TIR carries the same value

then a type-specific part (sizes below), then an optional chain of option headers
``{u8 next_hdr, u8 hdr_len, u16 res, body}`` (no option types are defined by UM's public
material; tshark skips them by ``hdr_len``), then, for DATA only, the LBMC payload to the end of
the datagram.  Layouts: ``wire-lbmr-transports-srs.md`` section 5, checked against tshark 4.0.17.

The hot path uses :func:`encode_data` / :func:`decode_header` (precompiled ``struct.Struct``,
tuples and a ``memoryview`` of the payload).  Everything else goes through the slotted records
and :func:`encode` / :func:`decode`.  Reserved fields are written as zero and ignored when read.
Decoders raise only :class:`LBTRMError`, whatever the input.
"""

from __future__ import annotations

import struct
from collections.abc import Iterable

from umcore.errors import LocalProtocolError, RemoteProtocolError
from umcore.wire._shared import Record as _Record

__all__ = [
    "DATA_FLAG_LATE_JOIN",
    "DATA_FLAG_MCAST_NAKS",
    "DATA_FLAG_RX",
    "DATA_FLAG_UCAST_NAKS",
    "FEC_TYPE_MASK",
    "HEADER_SIZE",
    "NAK_FORMAT_PARITY",
    "NAK_FORMAT_SELECTIVE",
    "NCF_REASON_IGNORED",
    "NCF_REASON_NO_RETRY",
    "NCF_REASON_RX_DELAY",
    "NCF_REASON_SHED",
    "SM_FLAG_UCAST_NAKS",
    "TYPE_DATA",
    "TYPE_NAK",
    "TYPE_NCF",
    "TYPE_SM",
    "LBTRMData",
    "LBTRMError",
    "LBTRMNak",
    "LBTRMNcf",
    "LBTRMOption",
    "LBTRMRecord",
    "LBTRMSessionMessage",
    "decode",
    "decode_header",
    "encode",
    "encode_data",
]


class LBTRMError(RemoteProtocolError):
    """A peer sent an LBT-RM datagram we cannot decode."""


# Packet types (low nibble of byte 0).
TYPE_DATA = 0x0
TYPE_SM = 0x2
TYPE_NAK = 0x3
TYPE_NCF = 0x4
_TYPE_NAMES = {TYPE_DATA: "DATA", TYPE_SM: "SM", TYPE_NAK: "NAK", TYPE_NCF: "NCF"}

VERSION = 0  # the only version; tshark's heuristic also requires it

# DATA flags_fec_type bits (high nibble flags, low nibble FEC type).
DATA_FLAG_UCAST_NAKS = 0x80  # receivers must NAK by unicast
DATA_FLAG_MCAST_NAKS = 0x40
DATA_FLAG_RX = 0x20  # this DATA is a retransmission
DATA_FLAG_LATE_JOIN = 0x10
FEC_TYPE_MASK = 0x0F
# SM flags_fec_type bits.
SM_FLAG_UCAST_NAKS = 0x80

# NAK / NCF list formats (low nibble).
NAK_FORMAT_SELECTIVE = 0x0
NAK_FORMAT_PARITY = 0x1
# NCF reasons (high nibble of the reason_format byte).
NCF_REASON_NO_RETRY = 0x0
NCF_REASON_IGNORED = 0x1
NCF_REASON_RX_DELAY = 0x2
NCF_REASON_SHED = 0x3

_HDR = struct.Struct("!BBHI")
HEADER_SIZE = _HDR.size  # 8
_DATA = struct.Struct("!IIBBH")  # sqn, trail_sqn, flags_fec_type, flags_tgsz, fec_symbol
_HDR_DATA = struct.Struct("!BBHIIIBBH")  # the 20-byte DATA prefix in one go (hot path)
_SM = struct.Struct("!IIIBBH")  # sm_sqn, lead_sqn, trail_sqn, flags_fec_type, flags_tgsz, res
_NAK = struct.Struct("!HH")  # num_naks, format
_NCF = struct.Struct("!IHBB")  # trail_sqn, num_ncfs, reserved, reason<<4 | format
_OPT = struct.Struct("!BBH")  # next_hdr, hdr_len, res
_U32 = struct.Struct("!I")

# An option header's hdr_len is a u8 that counts its own 4-byte head.
MAX_OPTION_BODY = 255 - _OPT.size
# Bound on the option chain we walk: a datagram (<= 64 KiB) cannot hold more than this many
# 4-byte option heads, so a longer chain can only be a loop in a hostile datagram.
MAX_OPTIONS = 65536 // _OPT.size
# NAK/NCF counts are u16 on the wire.
MAX_LIST = 0xFFFF


def _check_u(value: int, bits: int, what: str) -> None:
    if not (isinstance(value, int) and 0 <= value < (1 << bits)):
        raise LocalProtocolError(f"LBT-RM {what} must be a u{bits}, got {value!r}")


class LBTRMOption:
    """One option header.  ``kind`` is the next-header value that announced it (UM defines no
    option types for LBT-RM; tshark skips them by length), ``body`` the bytes after its 4-byte
    head (``hdr_len = 4 + len(body)``)."""

    __slots__ = ("body", "kind")

    def __init__(self, kind: int, body: bytes = b"") -> None:
        self.kind = kind
        self.body = bytes(body)

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, LBTRMOption):
            return NotImplemented
        return self.kind == other.kind and self.body == other.body

    def __hash__(self) -> int:
        return hash((self.kind, self.body))

    def __repr__(self) -> str:
        return f"LBTRMOption(kind={self.kind}, body={self.body!r})"


class LBTRMData(_Record):
    """DATA: transport sequence number ``sqn``, the oldest sequence number still retransmittable
    ``trail_sqn``, flags (``DATA_FLAG_*`` | FEC type) and the LBMC ``payload`` (opaque)."""

    __slots__ = (
        "fec_symbol",
        "flags_fec_type",
        "flags_tgsz",
        "options",
        "payload",
        "session_id",
        "sqn",
        "trail_sqn",
        "ucast_port",
    )

    def __init__(
        self,
        session_id: int,
        ucast_port: int,
        sqn: int,
        trail_sqn: int,
        payload: bytes = b"",
        *,
        flags_fec_type: int = 0,
        flags_tgsz: int = 0,
        fec_symbol: int = 0,
        options: Iterable[LBTRMOption] = (),
    ) -> None:
        self.session_id = session_id
        self.ucast_port = ucast_port
        self.sqn = sqn
        self.trail_sqn = trail_sqn
        self.payload = bytes(payload)
        self.flags_fec_type = flags_fec_type
        self.flags_tgsz = flags_tgsz
        self.fec_symbol = fec_symbol
        self.options = tuple(options)

    @property
    def retransmission(self) -> bool:
        return bool(self.flags_fec_type & DATA_FLAG_RX)


class LBTRMSessionMessage(_Record):
    """SM (session message, the source's heartbeat): SM sequence number and the transport's
    lead (newest sent) and trail (oldest retransmittable) data sequence numbers."""

    __slots__ = (
        "flags_fec_type",
        "flags_tgsz",
        "lead_sqn",
        "options",
        "session_id",
        "sm_sqn",
        "trail_sqn",
        "ucast_port",
    )

    def __init__(
        self,
        session_id: int,
        ucast_port: int,
        sm_sqn: int,
        lead_sqn: int,
        trail_sqn: int,
        *,
        flags_fec_type: int = 0,
        flags_tgsz: int = 0,
        options: Iterable[LBTRMOption] = (),
    ) -> None:
        self.session_id = session_id
        self.ucast_port = ucast_port
        self.sm_sqn = sm_sqn
        self.lead_sqn = lead_sqn
        self.trail_sqn = trail_sqn
        self.flags_fec_type = flags_fec_type
        self.flags_tgsz = flags_tgsz
        self.options = tuple(options)


class LBTRMNak(_Record):
    """NAK (receiver to the source's ``ucast_port``): the missing data sequence numbers."""

    __slots__ = ("format", "options", "session_id", "sqns", "ucast_port")

    def __init__(
        self,
        session_id: int,
        ucast_port: int,
        sqns: Iterable[int],
        *,
        format: int = NAK_FORMAT_SELECTIVE,
        options: Iterable[LBTRMOption] = (),
    ) -> None:
        self.session_id = session_id
        self.ucast_port = ucast_port
        self.sqns = tuple(sqns)
        self.format = format
        self.options = tuple(options)


class LBTRMNcf(_Record):
    """NCF (NAK confirmation, multicast by the source): the NAKed sequence numbers it will not
    retransmit now and why (``NCF_REASON_*``)."""

    __slots__ = ("format", "options", "reason", "session_id", "sqns", "trail_sqn", "ucast_port")

    def __init__(
        self,
        session_id: int,
        ucast_port: int,
        trail_sqn: int,
        sqns: Iterable[int],
        reason: int,
        *,
        format: int = NAK_FORMAT_SELECTIVE,
        options: Iterable[LBTRMOption] = (),
    ) -> None:
        self.session_id = session_id
        self.ucast_port = ucast_port
        self.trail_sqn = trail_sqn
        self.sqns = tuple(sqns)
        self.reason = reason
        self.format = format
        self.options = tuple(options)


LBTRMRecord = LBTRMData | LBTRMSessionMessage | LBTRMNak | LBTRMNcf


# --------------------------------------------------------------------------------------------
# Encoding


def _encode_options(options: tuple[LBTRMOption, ...]) -> tuple[int, bytes]:
    """(first next_hdr, option bytes); each option's next_hdr names the following one."""
    if not options:
        return 0, b""
    parts = []
    for i, opt in enumerate(options):
        _check_u(opt.kind, 8, "option type")
        if opt.kind == 0:
            raise LocalProtocolError("LBT-RM option type 0 means 'no more options'")
        if len(opt.body) > MAX_OPTION_BODY:
            raise LocalProtocolError(f"LBT-RM option body longer than {MAX_OPTION_BODY} bytes")
        nxt = options[i + 1].kind if i + 1 < len(options) else 0
        parts.append(_OPT.pack(nxt, _OPT.size + len(opt.body), 0) + opt.body)
    return options[0].kind, b"".join(parts)


def _check_list(sqns: tuple[int, ...], what: str) -> None:
    if len(sqns) > MAX_LIST:
        raise LocalProtocolError(f"LBT-RM {what} lists at most {MAX_LIST} sequence numbers")
    for sqn in sqns:
        _check_u(sqn, 32, f"{what} sequence number")


def encode(record: LBTRMRecord) -> bytes:
    """The datagram for ``record``; :class:`LocalProtocolError` if a value does not fit."""
    try:
        first, opts = _encode_options(record.options)
        if isinstance(record, LBTRMData):
            head = _HDR_DATA.pack(
                TYPE_DATA,
                first,
                record.ucast_port,
                record.session_id,
                record.sqn,
                record.trail_sqn,
                record.flags_fec_type,
                record.flags_tgsz,
                record.fec_symbol,
            )
            return head + opts + record.payload
        if isinstance(record, LBTRMSessionMessage):
            body = _SM.pack(
                record.sm_sqn,
                record.lead_sqn,
                record.trail_sqn,
                record.flags_fec_type,
                record.flags_tgsz,
                0,
            )
            ptype = TYPE_SM
        elif isinstance(record, LBTRMNak):
            _check_list(record.sqns, "NAK")
            _check_u(record.format, 4, "NAK format")
            body = _NAK.pack(len(record.sqns), record.format) + b"".join(
                _U32.pack(s) for s in record.sqns
            )
            ptype = TYPE_NAK
        elif isinstance(record, LBTRMNcf):
            _check_list(record.sqns, "NCF")
            _check_u(record.format, 4, "NCF format")
            _check_u(record.reason, 4, "NCF reason")
            body = _NCF.pack(
                record.trail_sqn, len(record.sqns), 0, (record.reason << 4) | record.format
            ) + b"".join(_U32.pack(s) for s in record.sqns)
            ptype = TYPE_NCF
        else:
            raise LocalProtocolError(f"not an LBT-RM record: {record!r}")
        return _HDR.pack(ptype, first, record.ucast_port, record.session_id) + body + opts
    except struct.error as exc:
        raise LocalProtocolError(f"LBT-RM value out of range in {record!r}: {exc}") from None


def encode_data(
    session_id: int,
    ucast_port: int,
    sqn: int,
    trail_sqn: int,
    payload: bytes | bytearray,
    flags_fec_type: int = 0,
) -> bytes:
    """Hot path: a DATA datagram without options (what a source sends for every message)."""
    try:
        return (
            _HDR_DATA.pack(
                TYPE_DATA, 0, ucast_port, session_id, sqn, trail_sqn, flags_fec_type, 0, 0
            )
            + payload
        )
    except struct.error as exc:
        raise LocalProtocolError(f"LBT-RM DATA value out of range: {exc}") from None


# --------------------------------------------------------------------------------------------
# Decoding


def _skip_options(buf: memoryview, offset: int, first: int, record: str) -> int:
    """Offset after the option chain starting at ``offset`` (hot path: no objects built)."""
    nxt = first
    count = 0
    end = len(buf)
    while nxt != 0:
        if offset + _OPT.size > end:
            raise LBTRMError("truncated option header", record=record, offset=offset)
        nxt = buf[offset]
        hdr_len = buf[offset + 1]
        if hdr_len < _OPT.size or offset + hdr_len > end:
            raise LBTRMError(f"bad option length {hdr_len}", record=record, offset=offset)
        offset += hdr_len
        count += 1
        if count > MAX_OPTIONS:  # unreachable for a real datagram; keeps the loop bounded
            raise LBTRMError("too many option headers", record=record, offset=offset)
    return offset


def _parse_options(
    buf: memoryview, offset: int, first: int, record: str
) -> tuple[int, tuple[LBTRMOption, ...]]:
    opts: list[LBTRMOption] = []
    kind = first
    end = len(buf)
    while kind != 0:
        if len(opts) >= MAX_OPTIONS:
            raise LBTRMError("too many option headers", record=record, offset=offset)
        if offset + _OPT.size > end:
            raise LBTRMError("truncated option header", record=record, offset=offset)
        nxt, hdr_len, _res = _OPT.unpack_from(buf, offset)
        if hdr_len < _OPT.size or offset + hdr_len > end:
            raise LBTRMError(f"bad option length {hdr_len}", record=record, offset=offset)
        opts.append(LBTRMOption(kind, bytes(buf[offset + _OPT.size : offset + hdr_len])))
        offset += hdr_len
        kind = nxt
    return offset, tuple(opts)


def _common(buf: memoryview) -> tuple[int, int, int, int]:
    if len(buf) < HEADER_SIZE:
        raise LBTRMError(f"datagram of {len(buf)} bytes is shorter than the header", offset=0)
    ver_type, next_hdr, ucast_port, session_id = _HDR.unpack_from(buf, 0)
    if ver_type >> 4 != VERSION:
        raise LBTRMError(f"unsupported LBT-RM version {ver_type >> 4}", offset=0)
    ptype = ver_type & 0x0F
    if ptype not in _TYPE_NAMES:
        raise LBTRMError(f"unknown LBT-RM packet type {ptype}", offset=0)
    return ptype, next_hdr, ucast_port, session_id


def decode_header(
    buf: bytes | bytearray | memoryview,
) -> tuple[int, int, int, int, int, int, memoryview]:
    """Hot path: ``(type, ucast_port, session_id, sqn, trail_sqn, flags_fec_type, payload)``.

    For DATA, ``payload`` is a memoryview of the LBMC bytes (option headers skipped).  For the
    other types the sequence fields are 0 and ``payload`` is empty: call :func:`decode`.
    """
    mv = memoryview(buf)
    if len(mv) >= _HDR_DATA.size and mv[0] == TYPE_DATA and mv[1] == 0:
        # The common case, one unpack: version 0 DATA without option headers.
        _vt, _nh, port, sid, sqn, trail, flags, _tgsz, _sym = _HDR_DATA.unpack_from(mv)
        return TYPE_DATA, port, sid, sqn, trail, flags, mv[_HDR_DATA.size :]
    ptype, next_hdr, ucast_port, session_id = _common(mv)
    if ptype != TYPE_DATA:
        return ptype, ucast_port, session_id, 0, 0, 0, mv[0:0]
    if len(mv) < _HDR_DATA.size:
        raise LBTRMError("truncated DATA header", record="DATA", offset=HEADER_SIZE)
    sqn, trail_sqn, flags_fec_type, _tgsz, _sym = _DATA.unpack_from(mv, HEADER_SIZE)
    offset = _HDR_DATA.size
    if next_hdr:
        offset = _skip_options(mv, offset, next_hdr, "DATA")
    return ptype, ucast_port, session_id, sqn, trail_sqn, flags_fec_type, mv[offset:]


def _sqn_list(buf: memoryview, offset: int, count: int, record: str) -> tuple[int, ...]:
    end = offset + 4 * count
    if end > len(buf):
        raise LBTRMError(
            f"{record} lists {count} entries but is truncated", record=record, offset=offset
        )
    return struct.unpack_from(f"!{count}I", buf, offset)


def decode(buf: bytes | bytearray | memoryview) -> LBTRMRecord:
    """One datagram as a record.  Trailing bytes after a SM/NAK/NCF are an error."""
    mv = memoryview(buf)
    ptype, next_hdr, ucast_port, session_id = _common(mv)
    name = _TYPE_NAMES[ptype]
    offset = HEADER_SIZE
    record: LBTRMRecord
    if ptype == TYPE_DATA:
        if len(mv) < offset + _DATA.size:
            raise LBTRMError("truncated DATA header", record=name, offset=offset)
        sqn, trail, flags, tgsz, sym = _DATA.unpack_from(mv, offset)
        offset, opts = _parse_options(mv, offset + _DATA.size, next_hdr, name)
        return LBTRMData(
            session_id,
            ucast_port,
            sqn,
            trail,
            bytes(mv[offset:]),
            flags_fec_type=flags,
            flags_tgsz=tgsz,
            fec_symbol=sym,
            options=opts,
        )
    if ptype == TYPE_SM:
        if len(mv) < offset + _SM.size:
            raise LBTRMError("truncated SM", record=name, offset=offset)
        sm_sqn, lead, trail, flags, tgsz, _res = _SM.unpack_from(mv, offset)
        offset, opts = _parse_options(mv, offset + _SM.size, next_hdr, name)
        record = LBTRMSessionMessage(
            session_id,
            ucast_port,
            sm_sqn,
            lead,
            trail,
            flags_fec_type=flags,
            flags_tgsz=tgsz,
            options=opts,
        )
    elif ptype == TYPE_NAK:
        if len(mv) < offset + _NAK.size:
            raise LBTRMError("truncated NAK", record=name, offset=offset)
        count, fmt = _NAK.unpack_from(mv, offset)
        offset += _NAK.size
        sqns = _sqn_list(mv, offset, count, name)
        offset, opts = _parse_options(mv, offset + 4 * count, next_hdr, name)
        record = LBTRMNak(session_id, ucast_port, sqns, format=fmt & 0x0F, options=opts)
    else:
        if len(mv) < offset + _NCF.size:
            raise LBTRMError("truncated NCF", record=name, offset=offset)
        trail, count, _res, reason_format = _NCF.unpack_from(mv, offset)
        offset += _NCF.size
        sqns = _sqn_list(mv, offset, count, name)
        offset, opts = _parse_options(mv, offset + 4 * count, next_hdr, name)
        record = LBTRMNcf(
            session_id,
            ucast_port,
            trail,
            sqns,
            reason_format >> 4,
            format=reason_format & 0x0F,
            options=opts,
        )
    if offset != len(mv):
        raise LBTRMError(f"{len(mv) - offset} trailing bytes", record=name, offset=offset)
    return record
