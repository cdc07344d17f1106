"""LBMR: UM's topic resolution (TR) datagrams — complete sans-IO codec.

Theory of operation
-------------------
Topic resolution is how UM receivers find sources.  A receiver multicasts (or sends to lbmrd)
**TQRs** (topic query records: a topic name) and wildcard TQRs (a pattern); a source answers and
periodically advertises with **TIRs** (topic information records: topic name, topic index, and
the transport session a receiver must join — TCP, LBT-RU, LBT-RM, LBT-IPC, LBT-SMX, LBT-RDMA —
plus optional *topic options* for persistence, DRO routing and the like).  Every LBMR datagram
starts with a 4-byte header::

    u8 ver_type  (version << 4 | 0x08 if packet options follow the body | type)
    u8 tqrs      (TQR count, or the ext type for type 7)
    u16 tirs     (TIR count)

Types: 0 TQRs+TIRs (0/0 = the unicast resolver keepalive), 1 wildcard TQRs+TIRs, 2/3 client
keepalives to lbmrd (receiver-only / source context), 4 topic management, 6 UMQ queue resolution,
7 extended messages (proxy source election, context info, topic resolution request, DRO messages
…).  When bit 0x08 is set, packet options (source id, source type, version, local domain) follow
the body, and the datagram ends with their length record.

This module holds the header, TQR/TIR records and transport blocks, :class:`LBMRPacket`,
:func:`encode` / :func:`decode`, and three fast helpers for lbmrd (:func:`peek_header`,
:func:`is_client_keepalive`, :func:`tir_address_slots`) that read a datagram without building
records.  Options live in :mod:`umcore.wire.lbmr_options`, the other bodies in
:mod:`umcore.wire.lbmr_ext`; everything is re-exported here, so ``from umcore.wire import lbmr``
is all a caller needs.

Layouts follow Wireshark 4.0.17's packet-lbmr.c as recorded in
shared/spec/wire-lbmr-transports-srs.md sections 3 and 9; every integer is big-endian.  The
decoder raises only :class:`LBMRError`, whatever the bytes; it accepts exactly what the encoder
produces (so ``encode(decode(b)) == b``) except the [I] fields listed in :mod:`lbmr_ext`, and
refuses trailing bytes.  Encoders raise :class:`~umcore.errors.LocalProtocolError` for anything
the wire cannot carry (a 256th TQR, a topic over 246 bytes, a port over 65535 …).

Packet model: one class, ``LBMRPacket(type, tqrs, tirs, options, version, body)``:

=====  ============================  =========================================================
type   ``tqrs`` / ``tirs``           ``body``
=====  ============================  =========================================================
0      TQR / TIR                     None  (no records at all = the resolver keepalive)
1      WildcardTQR / TIR             None
2, 3   empty (client keepalives)     None
4      empty                         TopicManagement
6      QQR / QIR                     None
7      empty                         an ext record: PSER, UMQQueueMgmt, ContextInfo,
                                     TopicResRequest, TNWGInterest, TNWGContextInfo,
                                     TNWGTopicResRequest, UnknownTNWG, RemoteDomainRoute,
                                     RemoteContextInfo, UnknownExt
=====  ============================  =========================================================

Type 5 is undefined and refused.
"""

# __slots__ are in constructor order on purpose: Record derives repr and equality from them.
# ruff: noqa: RUF023

from __future__ import annotations

import struct
from typing import Any

from umcore.errors import LocalProtocolError
from umcore.wire import lbmr_ext as _ext
from umcore.wire import lbmr_options as _opts
from umcore.wire.lbmr_base import (
    MAX_DATAGRAM_SIZE,
    MAX_NAME_LEN,
    MAX_TOPIC_LEN,
    RESOLVER_DATAGRAM_MAX_SIZE_DEFAULT,
    LBMRError,
    Record,
    ip_bytes,
    ip_str,
    name_bytes,
    need,
    read_cstring,
)
from umcore.wire.lbmr_ext import *  # noqa: F403  (re-exported: the whole LBMR API lives here)
from umcore.wire.lbmr_ext import (
    EXT_DECODERS,
    ExtRecord,
    TopicManagement,
    UnknownExt,
    decode_qir,
    decode_qqr,
    decode_topic_management,
)
from umcore.wire.lbmr_options import *  # noqa: F403
from umcore.wire.lbmr_options import (
    decode_packet_options,
    decode_topic_options,
    encode_packet_options,
    encode_topic_options,
    packet_options_start,
)

__all__ = [
    "LBMR_TYPE_EXT",
    "LBMR_TYPE_NORMAL",
    "LBMR_TYPE_QUEUE_RES",
    "LBMR_TYPE_TOPIC_MGMT",
    "LBMR_TYPE_UCAST_RCV_ALIVE",
    "LBMR_TYPE_UCAST_SRC_ALIVE",
    "LBMR_TYPE_WC_TQRS",
    "MAX_DATAGRAM_SIZE",
    "MAX_NAME_LEN",
    "MAX_TOPIC_LEN",
    "MAX_TQRS",
    "MAX_TIRS",
    "PATTERN_PCRE",
    "PATTERN_REGEX",
    "RCV_ALIVE",
    "RESOLVER_DATAGRAM_MAX_SIZE_DEFAULT",
    "RESOLVER_KEEPALIVE",
    "SRC_ALIVE",
    "TIR",
    "TQR",
    "TRANSPORT_LBTIPC",
    "TRANSPORT_LBTRDMA",
    "TRANSPORT_LBTRM",
    "TRANSPORT_LBTRU",
    "TRANSPORT_LBTSMX",
    "TRANSPORT_TCP",
    "TRANSPORT_TCP6",
    "LBMRError",
    "LBMRPacket",
    "LBTIPCInfo",
    "LBTRDMAInfo",
    "LBTRMInfo",
    "LBTRUInfo",
    "LBTSMXInfo",
    "TCPInfo",
    "UnknownTransportInfo",
    "WildcardTQR",
    "decode",
    "encode",
    "is_client_keepalive",
    "peek_header",
    "tir_address_slots",
    *_ext.__all__,
    *_opts.__all__,
]

# --- header -----------------------------------------------------------------------------------

LBMR_TYPE_NORMAL = 0
LBMR_TYPE_WC_TQRS = 1
LBMR_TYPE_UCAST_RCV_ALIVE = 2
LBMR_TYPE_UCAST_SRC_ALIVE = 3
LBMR_TYPE_TOPIC_MGMT = 4
LBMR_TYPE_QUEUE_RES = 6
LBMR_TYPE_EXT = 7
_KNOWN_TYPES = frozenset({0, 1, 2, 3, 4, 6, 7})

HDR_OPTS_FLAG = 0x08
HDR_TYPE_MASK = 0x07
_HDR = struct.Struct(">BBH")
_HDR_SIZE = 4

# The TQR count is a u8 and the TIR count a u16 (trap 2 of the wire notes): more records need
# another datagram.
MAX_TQRS = 0xFF
MAX_TIRS = 0xFFFF

# Canned 4-byte keepalives (3.7): the resolver's own, and the two a client sends to lbmrd.
RESOLVER_KEEPALIVE = b"\x00\x00\x00\x00"
RCV_ALIVE = b"\x02\x00\x00\x00"
SRC_ALIVE = b"\x03\x00\x00\x00"

# Wildcard TQR pattern types.
PATTERN_PCRE = 1
PATTERN_REGEX = 2

# --- transport types (3.3, 3.4) -------------------------------------------------------------

TRANSPORT_TCP = 0x00
TRANSPORT_LBTRU = 0x01
TRANSPORT_TCP6 = 0x02  # defined by UM, but decoded (by Wireshark and by us) as unknown
TRANSPORT_LBTSMX = 0x04
TRANSPORT_LBTRM = 0x10
TRANSPORT_LBTRDMA = 0x20
TRANSPORT_LBTIPC = 0x40
TIR_OPTIONS_FLAG = 0x80  # in the TIR transport byte: topic options precede the transport block
TIR_TRANSPORT_MASK = 0x7F

_TIR_HEAD = struct.Struct(">BBHI")  # transport, tlen, ttl, topic index
_ADDR6 = struct.Struct(">4sH")  # ip, port  (TCP / LBT-RU without session id)
_ADDR10 = struct.Struct(">4sIH")  # ip, session id, port  (TCP / LBT-RU / LBT-RDMA with sid)
_ID10 = struct.Struct(">IIH")  # host id, session id, xport id  (LBT-IPC / LBT-SMX)
_LBTRM = struct.Struct(">4s4sIHH")  # src ip, group, session id, dest port, src (NAK) port


class TCPInfo(Record):
    """TCP transport: the source's listening IP and port; ``session_id`` None = 6-byte form."""

    __slots__ = ("ip", "port", "session_id")
    transport_type = TRANSPORT_TCP

    def __init__(self, ip: str, port: int, session_id: int | None = None) -> None:
        self.ip = ip
        self.port = port
        self.session_id = session_id

    def encode(self) -> bytes:
        if self.session_id is None:
            return _ADDR6.pack(ip_bytes(self.ip), self.port)
        return _ADDR10.pack(ip_bytes(self.ip), self.session_id, self.port)


class LBTRUInfo(TCPInfo):
    """LBT-RU transport: the source's IP and UDP port; ``session_id`` None = 6-byte form."""

    __slots__ = ()
    transport_type = TRANSPORT_LBTRU


class LBTRMInfo(Record):
    """LBT-RM transport: source IP, multicast group, session id, destination UDP port and the
    source's unicast (NAK) port — which LBT-RM headers carry as ``ucast_port``."""

    __slots__ = ("src_ip", "mc_group", "session_id", "dport", "sport")
    transport_type = TRANSPORT_LBTRM

    def __init__(self, src_ip: str, mc_group: str, session_id: int, dport: int, sport: int) -> None:
        self.src_ip = src_ip
        self.mc_group = mc_group
        self.session_id = session_id
        self.dport = dport
        self.sport = sport

    def encode(self) -> bytes:
        return _LBTRM.pack(
            ip_bytes(self.src_ip), ip_bytes(self.mc_group), self.session_id, self.dport, self.sport
        )


class LBTIPCInfo(Record):
    """LBT-IPC transport (shared memory on one host): host id, session id, transport id."""

    __slots__ = ("host_id", "session_id", "xport_id")
    transport_type = TRANSPORT_LBTIPC

    def __init__(self, host_id: int, session_id: int, xport_id: int) -> None:
        self.host_id = host_id
        self.session_id = session_id
        self.xport_id = xport_id

    def encode(self) -> bytes:
        return _ID10.pack(self.host_id, self.session_id, self.xport_id)


class LBTSMXInfo(LBTIPCInfo):
    """LBT-SMX transport (shared-memory acceleration): same layout as LBT-IPC."""

    __slots__ = ()
    transport_type = TRANSPORT_LBTSMX


class LBTRDMAInfo(Record):
    """LBT-RDMA transport: IP, session id, port."""

    __slots__ = ("ip", "session_id", "port")
    transport_type = TRANSPORT_LBTRDMA

    def __init__(self, ip: str, session_id: int, port: int) -> None:
        self.ip = ip
        self.session_id = session_id
        self.port = port

    def encode(self) -> bytes:
        return _ADDR10.pack(ip_bytes(self.ip), self.session_id, self.port)


class UnknownTransportInfo(Record):
    """A transport type this codec does not know (including TCP6): its block kept raw."""

    __slots__ = ("transport_type", "raw")

    def __init__(self, transport_type: int, raw: bytes) -> None:
        self.transport_type = transport_type
        self.raw = raw

    def encode(self) -> bytes:
        if self.transport_type in _TRANSPORT_DECODERS or not 0 <= self.transport_type <= 0x7F:
            raise LocalProtocolError(
                f"UnknownTransportInfo.transport_type 0x{self.transport_type:02x} is known or out "
                "of range; use the transport's class"
            )
        return bytes(self.raw)


TransportInfo = (
    TCPInfo | LBTRUInfo | LBTRMInfo | LBTIPCInfo | LBTSMXInfo | LBTRDMAInfo | UnknownTransportInfo
)


def _dec_addr(cls: type[TCPInfo]) -> Any:
    def decode(data: bytes, pos: int, tlen: int) -> TCPInfo:
        if tlen == 6:
            ip, port = _ADDR6.unpack_from(data, pos)
            return cls(ip_str(ip), port)
        if tlen == 10:
            ip, sid, port = _ADDR10.unpack_from(data, pos)
            return cls(ip_str(ip), port, sid)
        raise LBMRError(f"{cls.__name__} tlen {tlen} is neither 6 nor 10", record="TIR", offset=pos)

    return decode


def _dec_fixed(size: int, build: Any, name: str) -> Any:
    def decode(data: bytes, pos: int, tlen: int) -> Any:
        if tlen != size:
            raise LBMRError(f"{name} tlen {tlen} != {size}", record="TIR", offset=pos)
        return build(data, pos)

    return decode


def _build_lbtrm(data: bytes, pos: int) -> LBTRMInfo:
    src, grp, sid, dport, sport = _LBTRM.unpack_from(data, pos)
    return LBTRMInfo(ip_str(src), ip_str(grp), sid, dport, sport)


def _build_rdma(data: bytes, pos: int) -> LBTRDMAInfo:
    ip, sid, port = _ADDR10.unpack_from(data, pos)
    return LBTRDMAInfo(ip_str(ip), sid, port)


_TRANSPORT_DECODERS: dict[int, Any] = {
    TRANSPORT_TCP: _dec_addr(TCPInfo),
    TRANSPORT_LBTRU: _dec_addr(LBTRUInfo),
    TRANSPORT_LBTRM: _dec_fixed(16, _build_lbtrm, "LBT-RM"),
    TRANSPORT_LBTIPC: _dec_fixed(10, lambda d, p: LBTIPCInfo(*_ID10.unpack_from(d, p)), "LBT-IPC"),
    TRANSPORT_LBTSMX: _dec_fixed(10, lambda d, p: LBTSMXInfo(*_ID10.unpack_from(d, p)), "LBT-SMX"),
    TRANSPORT_LBTRDMA: _dec_fixed(10, _build_rdma, "LBT-RDMA"),
}
_TRANSPORT_CLASSES = (TCPInfo, LBTRUInfo, LBTRMInfo, LBTIPCInfo, LBTSMXInfo, LBTRDMAInfo)

# --- TQR / TIR ------------------------------------------------------------------------------


class TQR(Record):
    """Topic query record: a receiver asks sources of ``topic`` to advertise."""

    __slots__ = ("topic",)

    def __init__(self, topic: str) -> None:
        self.topic = topic


class WildcardTQR(Record):
    """Wildcard topic query (header type 1): PATTERN_PCRE or PATTERN_REGEX and the pattern."""

    __slots__ = ("pattern_type", "pattern")

    def __init__(self, pattern_type: int, pattern: str) -> None:
        self.pattern_type = pattern_type
        self.pattern = pattern


class TIR(Record):
    """Topic information record (advertisement): topic, topic index (the ``tidx`` of the
    source's LBMC data), transport block, topic options and the uninterpreted u16 ``ttl`` [I]."""

    __slots__ = ("topic", "index", "transport_info", "options", "ttl")

    def __init__(
        self,
        topic: str,
        index: int,
        transport_info: TransportInfo,
        options: tuple[Any, ...] | list[Any] = (),
        ttl: int = 0,
    ) -> None:
        self.topic = topic
        self.index = index
        self.transport_info = transport_info
        self.options = tuple(options)
        self.ttl = ttl


class LBMRPacket(Record):
    """One LBMR datagram; see the module docstring for which fields each type uses."""

    __slots__ = ("type", "tqrs", "tirs", "options", "version", "body")

    def __init__(
        self,
        type: int,
        tqrs: tuple[Any, ...] | list[Any] = (),
        tirs: tuple[Any, ...] | list[Any] = (),
        options: tuple[Any, ...] | list[Any] = (),
        version: int = 0,
        body: Any = None,
    ) -> None:
        self.type = type
        self.tqrs = tuple(tqrs)
        self.tirs = tuple(tirs)
        self.options = tuple(options)
        self.version = version
        self.body = body

    @property
    def ext_type(self) -> int | None:
        """Byte 1 of an extended (type 7) datagram, else None."""
        if self.type != LBMR_TYPE_EXT or self.body is None:
            return None
        return _ext_code(self.body)


def _ext_code(body: Any) -> int:
    if isinstance(body, UnknownExt):
        return body.ext_code
    if isinstance(body, ExtRecord) and type(body) is not ExtRecord:
        return body.ext_type
    raise LocalProtocolError(f"type 7 LBMR body must be an extended-message record, got {body!r}")


# --- encode -----------------------------------------------------------------------------------


def encode(packet: LBMRPacket, max_size: int = MAX_DATAGRAM_SIZE) -> bytes:
    """The datagram for ``packet``; LocalProtocolError if it cannot be encoded or is longer than
    ``max_size`` (pass the context's resolver_datagram_max_size to enforce it)."""
    try:
        data = _encode(packet)
    except (struct.error, OverflowError, TypeError, AttributeError) as exc:
        raise LocalProtocolError(f"cannot encode LBMR packet: {exc}") from exc
    if len(data) > max_size:
        raise LocalProtocolError(f"LBMR datagram of {len(data)} bytes exceeds {max_size}")
    return data


def _encode(p: LBMRPacket) -> bytes:
    ptype = p.type
    if ptype not in _KNOWN_TYPES:
        raise LocalProtocolError(f"LBMR type {ptype!r} is not defined")
    if not 0 <= p.version <= 15:
        raise LocalProtocolError(f"LBMR version {p.version} does not fit 4 bits")
    ver_type = (p.version << 4) | (HDR_OPTS_FLAG if p.options else 0) | ptype
    if ptype == LBMR_TYPE_EXT:
        if p.tqrs or p.tirs:
            raise LocalProtocolError("type 7 LBMR carries no TQRs or TIRs")
        parts = [bytes((ver_type, _ext_code(p.body))), p.body.encode()]
    else:
        if len(p.tqrs) > MAX_TQRS:
            raise LocalProtocolError(f"{len(p.tqrs)} TQRs; at most {MAX_TQRS} per datagram")
        if len(p.tirs) > MAX_TIRS:
            raise LocalProtocolError(f"{len(p.tirs)} TIRs; at most {MAX_TIRS} per datagram")
        parts = [_HDR.pack(ver_type, len(p.tqrs), len(p.tirs))]
        if ptype in (LBMR_TYPE_NORMAL, LBMR_TYPE_WC_TQRS):
            _check_body_none(p)
            if ptype == LBMR_TYPE_NORMAL:
                for tqr in p.tqrs:
                    if type(tqr) is not TQR:
                        raise LocalProtocolError(f"type 0 LBMR TQRs must be TQR, got {tqr!r}")
                    parts.append(name_bytes(tqr.topic, MAX_TOPIC_LEN, "TQR topic") + b"\0")
            else:
                for tqr in p.tqrs:
                    if type(tqr) is not WildcardTQR:
                        raise LocalProtocolError(f"type 1 LBMR TQRs must be WildcardTQR: {tqr!r}")
                    raw = name_bytes(tqr.pattern, MAX_NAME_LEN, "wildcard pattern")
                    parts.append(bytes((tqr.pattern_type,)) + raw + b"\0")
            for tir in p.tirs:
                parts.append(_encode_tir(tir))
        elif ptype == LBMR_TYPE_QUEUE_RES:
            _check_body_none(p)
            for qqr in p.tqrs:
                if type(qqr) is not _ext.QQR:
                    raise LocalProtocolError(f"type 6 LBMR queries must be QQR, got {qqr!r}")
                parts.append(qqr.encode())
            for qir in p.tirs:
                if type(qir) is not _ext.QIR:
                    raise LocalProtocolError(f"type 6 LBMR records must be QIR, got {qir!r}")
                parts.append(qir.encode())
        else:
            if p.tqrs or p.tirs:
                raise LocalProtocolError(f"type {ptype} LBMR carries no TQRs or TIRs")
            if ptype == LBMR_TYPE_TOPIC_MGMT:
                if type(p.body) is not TopicManagement:
                    raise LocalProtocolError("type 4 LBMR body must be a TopicManagement")
                parts.append(p.body.encode())
            else:
                _check_body_none(p)
    if p.options:
        parts.append(encode_packet_options(p.options))
    return b"".join(parts)


def _check_body_none(p: LBMRPacket) -> None:
    if p.body is not None:
        raise LocalProtocolError(f"type {p.type} LBMR has no body record; got {p.body!r}")


def _encode_tir(tir: TIR) -> bytes:
    if type(tir) is not TIR:
        raise LocalProtocolError(f"not a TIR: {tir!r}")
    info = tir.transport_info
    if not isinstance(info, (*_TRANSPORT_CLASSES, UnknownTransportInfo)):
        raise LocalProtocolError(f"not a transport info record: {info!r}")
    block = info.encode()
    if len(block) > 255:
        raise LocalProtocolError("transport block longer than 255 bytes")
    transport = info.transport_type
    topic = name_bytes(tir.topic, MAX_TOPIC_LEN, "TIR topic") + b"\0"
    if tir.options:
        head = _TIR_HEAD.pack(transport | TIR_OPTIONS_FLAG, len(block), tir.ttl, tir.index)
        return topic + head + encode_topic_options(tir.options) + block
    return topic + _TIR_HEAD.pack(transport, len(block), tir.ttl, tir.index) + block


# --- decode -----------------------------------------------------------------------------------


def decode(data: bytes | bytearray | memoryview) -> LBMRPacket:
    """Decode one LBMR datagram; LBMRError (only) if it is not one we would have encoded."""
    if not isinstance(data, bytes):
        data = bytes(data)
    try:
        return _decode(data)
    except (struct.error, IndexError) as exc:  # safety net: every read is bounds-checked first
        raise LBMRError(f"truncated LBMR datagram: {exc}") from exc


def _decode(data: bytes) -> LBMRPacket:
    size = len(data)
    if size < _HDR_SIZE:
        raise LBMRError(f"datagram of {size} bytes is shorter than the LBMR header", offset=0)
    if size > MAX_DATAGRAM_SIZE:
        raise LBMRError(f"datagram of {size} bytes exceeds {MAX_DATAGRAM_SIZE}", offset=0)
    ver_type, tqr_count, tir_count = _HDR.unpack_from(data, 0)
    ptype = ver_type & HDR_TYPE_MASK
    version = ver_type >> 4
    end = size
    options: tuple[Any, ...] = ()
    if ver_type & HDR_OPTS_FLAG:
        end = packet_options_start(data, 2 if ptype == LBMR_TYPE_EXT else _HDR_SIZE)
        options = decode_packet_options(data, end)
    tqrs: list[Any] = []
    tirs: list[Any] = []
    body: Any = None
    pos = _HDR_SIZE
    if ptype == LBMR_TYPE_EXT:
        decoder = EXT_DECODERS.get(tqr_count)
        body = decoder(data, end) if decoder is not None else UnknownExt(tqr_count, data[2:end])
        pos = end
    elif ptype in (LBMR_TYPE_NORMAL, LBMR_TYPE_WC_TQRS):
        if ptype == LBMR_TYPE_NORMAL:
            for _ in range(tqr_count):
                topic, pos = read_cstring(data, pos, end, MAX_TOPIC_LEN, "TQR")
                tqrs.append(TQR(topic))
        else:
            for _ in range(tqr_count):
                need(pos, 2, end, "wildcard TQR")
                pattern, after = read_cstring(data, pos + 1, end, MAX_NAME_LEN, "wildcard TQR")
                tqrs.append(WildcardTQR(data[pos], pattern))
                pos = after
        for _ in range(tir_count):
            tir, pos = _decode_tir(data, pos, end)
            tirs.append(tir)
    elif ptype == LBMR_TYPE_QUEUE_RES:
        for _ in range(tqr_count):
            qqr, pos = decode_qqr(data, pos, end)
            tqrs.append(qqr)
        for _ in range(tir_count):
            qir, pos = decode_qir(data, pos, end)
            tirs.append(qir)
    elif ptype == LBMR_TYPE_TOPIC_MGMT:
        body = decode_topic_management(data, pos, end)
        pos = end
    elif ptype in (LBMR_TYPE_UCAST_RCV_ALIVE, LBMR_TYPE_UCAST_SRC_ALIVE):
        if tqr_count or tir_count:
            raise LBMRError(
                f"type {ptype} keepalive with non-zero counts", record="header", offset=1
            )
    else:
        raise LBMRError(f"undefined LBMR type {ptype}", record="header", offset=0)
    if pos != end:
        raise LBMRError(f"{end - pos} bytes after the last record", record="body", offset=pos)
    return LBMRPacket(ptype, tqrs, tirs, options, version, body)


def _decode_tir(data: bytes, pos: int, end: int) -> tuple[TIR, int]:
    # hot path: read_cstring and need() inlined
    nul = data.find(b"\0", pos, end)
    if nul < 0 or nul - pos > MAX_TOPIC_LEN:
        raise LBMRError("TIR topic not NUL-terminated or too long", record="TIR", offset=pos)
    topic = data[pos:nul].decode("utf-8", "surrogateescape")
    pos = nul + 9
    if pos > end:
        raise LBMRError("truncated TIR", record="TIR", offset=nul + 1)
    transport, tlen, ttl, index = _TIR_HEAD.unpack_from(data, nul + 1)
    options: tuple[Any, ...] = ()
    if transport & TIR_OPTIONS_FLAG:
        options, pos = decode_topic_options(data, pos, end, "TIR")
    need(pos, tlen, end, "TIR transport")
    ttype = transport & TIR_TRANSPORT_MASK
    decoder = _TRANSPORT_DECODERS.get(ttype)
    if decoder is None:
        info: Any = UnknownTransportInfo(ttype, data[pos : pos + tlen])
    else:
        info = decoder(data, pos, tlen)
    return TIR(topic, index, info, options, ttl), pos + tlen


# --- fast helpers for lbmrd -----------------------------------------------------------------


def peek_header(data: bytes | bytearray | memoryview) -> tuple[int, int, bool, int, int]:
    """(version, type, has_packet_options, tqr_count_or_ext_type, tir_count) of a datagram.

    For type 7 the last item is the u16 at bytes 2-3 (ext-type specific).  LBMRError if the
    datagram is shorter than 4 bytes."""
    if len(data) < _HDR_SIZE:
        raise LBMRError(f"datagram of {len(data)} bytes is shorter than the LBMR header", offset=0)
    ver_type, tqrs, tirs = _HDR.unpack_from(data, 0)
    return ver_type >> 4, ver_type & HDR_TYPE_MASK, bool(ver_type & HDR_OPTS_FLAG), tqrs, tirs


def is_client_keepalive(data: bytes | bytearray | memoryview) -> bool:
    """True for a client's keepalive to lbmrd: type 2 or 3 with zero counts (a packet-option
    trailer may follow)."""
    if len(data) < _HDR_SIZE:
        return False
    ver_type, tqrs, tirs = _HDR.unpack_from(data, 0)
    return (ver_type & HDR_TYPE_MASK) in (2, 3) and tqrs == 0 and tirs == 0


def tir_address_slots(data: bytes | bytearray | memoryview) -> list[tuple[int, int, int]]:
    """``(transport_type, ip_offset, port_offset)`` of every TCP and LBT-RU address in the TIRs
    of a type 0 or 1 datagram (absolute offsets: a 4-byte IP and a 2-byte port), for lbmrd's NAT
    rewriting.  Other transports are skipped; other LBMR types give ``[]``.  Walks the records
    without building them; LBMRError on anything malformed, truncated records included."""
    if not isinstance(data, bytes):
        data = bytes(data)
    size = len(data)
    if size < _HDR_SIZE:
        raise LBMRError(f"datagram of {size} bytes is shorter than the LBMR header", offset=0)
    ver_type, tqr_count, tir_count = _HDR.unpack_from(data, 0)
    ptype = ver_type & HDR_TYPE_MASK
    if ptype > LBMR_TYPE_WC_TQRS:
        return []
    end = packet_options_start(data, _HDR_SIZE) if ver_type & HDR_OPTS_FLAG else size
    find = data.find
    pos = _HDR_SIZE
    skip = 1 if ptype == LBMR_TYPE_WC_TQRS else 0
    for _ in range(tqr_count):
        nul = find(b"\0", pos + skip, end)
        if nul < 0:
            raise LBMRError("TQR not NUL-terminated", record="TQR", offset=pos)
        pos = nul + 1
    slots: list[tuple[int, int, int]] = []
    unpack_head = _TIR_HEAD.unpack_from
    for _ in range(tir_count):
        nul = find(b"\0", pos, end)
        if nul < 0:
            raise LBMRError("TIR topic not NUL-terminated", record="TIR", offset=pos)
        pos = nul + 1
        if pos + 8 > end:
            raise LBMRError("truncated TIR", record="TIR", offset=pos)
        transport, tlen, _ttl, _index = unpack_head(data, pos)
        pos += 8
        if transport & TIR_OPTIONS_FLAG:
            if pos + 4 > end or data[pos] != 0 or data[pos + 1] != 4:
                raise LBMRError("bad TIR topic options", record="TIR", offset=pos)
            total = (data[pos + 2] << 8) | data[pos + 3]
            if total < 4 or pos + total > end:
                raise LBMRError("TIR topic options overrun", record="TIR", offset=pos)
            pos += total
        if pos + tlen > end:
            raise LBMRError("truncated TIR transport block", record="TIR", offset=pos)
        ttype = transport & TIR_TRANSPORT_MASK
        if ttype in (TRANSPORT_TCP, TRANSPORT_LBTRU):
            if tlen == 6:
                slots.append((ttype, pos, pos + 4))
            elif tlen == 10:
                slots.append((ttype, pos, pos + 8))
            else:
                raise LBMRError(f"TCP/LBT-RU tlen {tlen}", record="TIR", offset=pos)
        pos += tlen
    if pos != end:
        raise LBMRError(f"{end - pos} bytes after the last TIR", record="body", offset=pos)
    return slots
