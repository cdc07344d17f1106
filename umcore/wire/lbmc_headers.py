"""LBMC chained headers: one slotted record class per header type, and the registry by type ID.

Theory of operation
-------------------
An LBMC message (see :mod:`umcore.wire.lbmc`) is a fixed header followed by a chain of
"next headers".  Every chained header starts with the same two bytes, ``next_hdr`` (the type ID
of the *following* header; 0x00 = payload follows, 0xFF = end) and ``hdr_len`` (the length of
*this* header, those two bytes included), then type-specific fields, all big-endian.

Each class here describes the bytes *after* those two: ``_S`` is the precompiled
:class:`struct.Struct` of the fixed part, the dataclass fields are the struct's values in wire
order, and ``MIN_LEN`` is the smallest legal ``hdr_len``.  Classes with a variable tail (topic
name, TSNI records, EXTOPT data, ...) override ``body_bytes``/``decode_body``.  The chain walker in
:mod:`umcore.wire.lbmc` writes ``next_hdr``/``hdr_len`` itself, so a record never knows its
neighbours.

On decode, ``hdr_len`` larger than the fixed size is accepted and the extra bytes are skipped
(forward compatibility, as tshark does); smaller is an error.  Type IDs we do not model (the
UMQ family, 0x03 TGIDX, anything new) decode to :class:`RawHeader`, which keeps the ID and the
bytes so the message can be re-encoded unchanged.

Field names follow tshark's ``lbmc.<header>.<field>`` names (wire-lbmc-ump.md sections 5-8),
except ``type`` (renamed ``ack_type``/``ka_type``/``pattern_type``) and FRAG ``len``
(``total_len``).  IPv4 addresses are ``int`` in network order (``0x0A000001`` = 10.0.0.1); use
:func:`ip4_to_str`/:func:`ip4_from_str`.  Context instances are 8 opaque bytes, OTIDs 32.

Bit-packed bytes get separate fields where UM packs two things in one word: PREG/PREG_RESP byte 3
(``source`` = S bit 0x80, ``marker`` = low 7 bits), STOREID/APPHDR/TSNI (``ignore`` = bit 15 plus
a 15-bit value).  Everything else keeps its raw ``flags`` integer; the ``*_FLAG_*`` constants name
the bits.
"""

from __future__ import annotations

import struct
from collections.abc import Callable
from dataclasses import dataclass
from operator import attrgetter
from typing import Any, ClassVar, TypeVar, dataclass_transform

from umcore.errors import LocalProtocolError, RemoteProtocolError
from umcore.wire._shared import ip4_int, ip4_int_str

__all__ = [  # noqa: RUF022  (classes, then constants, as ruff --fix would mix them)
    "ACK_FLAG_E",
    "ACK_FLAG_F",
    "ACK_FLAG_O",
    "ACK_FLAG_U",
    "ACK_TYPE_CDELV",
    "ACK_TYPE_STABLE",
    "APPHDR_ELEM_APPHDR",
    "APPHDR_ELEM_CHANNEL",
    "APPHDR_ELEM_GW_INFO",
    "APPHDR_ELEM_HF_SQN",
    "APPHDR_ELEM_PROPERTIES",
    "APPHDR_ELEM_USER",
    "AUTH_OP_CHALLENGE",
    "AUTH_OP_CHALLENGE_RSP",
    "AUTH_OP_REQUEST",
    "AUTH_OP_RESULT",
    "Advertisement",
    "AppHeader",
    "ApphdrChain",
    "ApphdrElement",
    "AuthChallenge",
    "AuthChallengeResponse",
    "AuthRequest",
    "AuthResult",
    "BATCH_END",
    "BATCH_START",
    "Batch",
    "Buffer",
    "CAP_CLIENT_LIFETIME",
    "CAP_QC",
    "CTXINFO_ADDR",
    "CTXINFO_CTXINST",
    "CTXINFO_NAME",
    "CTXINFO_PROXY",
    "CTXINFO_QUERY",
    "CTXINFO_TNWG_RCV",
    "CTXINFO_TNWG_SRC",
    "CtxInfo",
    "CtxInst",
    "CtxInstD",
    "CtxInstR",
    "CtxInstS",
    "Destination",
    "Domain",
    "EXTOPT_CFGOPT",
    "EXTOPT_IGNORE_SUBTYPE",
    "EXTOPT_MAX_PIECE",
    "EXTOPT_MORE",
    "EXTOPT_MSGSEL",
    "ExtOpt",
    "Frag",
    "GatewayName",
    "HDR_DATA",
    "HDR_NONE",
    "HEADER_TYPES",
    "Header",
    "Hmac",
    "IGNORE16",
    "IGNORE8",
    "KA_FLAG_R",
    "KA_FLAG_T",
    "KA_TYPE_RECEIVER",
    "KA_TYPE_SOURCE",
    "KA_TYPE_STORE",
    "LBMCError",
    "LJI_REQ_L",
    "LJI_REQ_M",
    "LJI_REQ_O",
    "LjiReq",
    "MAX_HEADER_LEN",
    "ODomain",
    "Otid",
    "PREG_FLAG_D",
    "PREG_FLAG_F",
    "PREG_FLAG_P",
    "PREG_FLAG_W",
    "PREG_MARKER_PRIMARY",
    "PREG_MARKER_SECONDARY",
    "PREG_MARKER_TERTIARY",
    "PREG_RESP_D",
    "PREG_RESP_E",
    "PREG_RESP_EACTIVE",
    "PREG_RESP_ECONFIG",
    "PREG_RESP_ENOPATTERN",
    "PREG_RESP_EREGID",
    "PREG_RESP_ERR_MASK",
    "PREG_RESP_ESRCREGID",
    "PREG_RESP_ETOPICNAME",
    "PREG_RESP_N",
    "PREG_RESP_O",
    "PREG_RESP_W",
    "PROXY_SRC_COMPAT",
    "PROXY_SRC_ENABLE",
    "PatIdx",
    "PatternInterest",
    "PatternMdInterest",
    "RXREQ_FLAG_T",
    "RawHeader",
    "Request",
    "RouteInfo",
    "RouteInfoNeighbor",
    "SRI_ACKTOSRC",
    "SRI_INITIAL_SQN_KNOWN",
    "SrcIdx",
    "Sri",
    "SriReq",
    "SsfCreq",
    "SsfInit",
    "Stream",
    "TOPIC_SOURCE_EOS",
    "TSNI_MAX_RECORDS",
    "TcpSid",
    "TnwgCapabilities",
    "TnwgKa",
    "TopicIdx",
    "TopicInterest",
    "TopicMdInterest",
    "TopicName",
    "TopicSource",
    "TopicSourceExfunc",
    "Tsni",
    "UmeAck",
    "UmeAckId",
    "UmeCapability",
    "UmeClientLifetime",
    "UmeKeepalive",
    "UmeLjInfo",
    "UmePreg",
    "UmePregResp",
    "UmeProxySrc",
    "UmePser",
    "UmePsrcElectionToken",
    "UmeRangedAck",
    "UmeRcvKeepalive",
    "UmeRxReq",
    "UmeSid",
    "UmeStoreDomain",
    "UmeStoreGroup",
    "UmeStoreId",
    "UmeStoreInfo",
    "UmeStoreInfoExt",
    "UmeStoreName",
    "ip4_from_str",
    "ip4_to_str",
]


class LBMCError(RemoteProtocolError):
    """A peer sent bytes that are not a valid LBMC message (or LBT-TCP stream)."""


# Any single chained header: hdr_len is one byte (wire-lbmc-ump.md section 1).
MAX_HEADER_LEN = 255
# Type IDs that end a chain rather than name a header.
HDR_DATA = 0x00
HDR_NONE = 0xFF

Buffer = bytes | bytearray | memoryview

# -- flag bits (names as in tshark) ----------------------------------------------------------
IGNORE16 = 0x8000  # "May be ignored" bit of 16-bit flag words
IGNORE8 = 0x80  # same, 8-bit flag bytes
BATCH_START = 0x0002
BATCH_END = 0x0001
PREG_FLAG_F = 0x40  # do not forward ACKs
PREG_FLAG_P = 0x20  # proxy source
PREG_FLAG_W = 0x10  # receiver-paced persistence (RPP)
PREG_FLAG_D = 0x08  # de-registration
PREG_MARKER_PRIMARY, PREG_MARKER_SECONDARY, PREG_MARKER_TERTIARY = 1, 2, 3
PREG_RESP_O = 0x40  # old (returning) client
PREG_RESP_E = 0x20  # error: low nibble is the error code
PREG_RESP_N = 0x10  # no cache / no ACKs (only when E clear)
PREG_RESP_W = 0x02  # RPP granted (only when E clear)
PREG_RESP_D = 0x01  # de-registration acknowledged (only when E clear)
PREG_RESP_ERR_MASK = 0x0F
PREG_RESP_ENOPATTERN = 1
PREG_RESP_ESRCREGID = 2
PREG_RESP_EREGID = 3
PREG_RESP_ETOPICNAME = 4
PREG_RESP_EACTIVE = 5
PREG_RESP_ECONFIG = 6
ACK_FLAG_O = 0x40  # arrival-order delivery
ACK_FLAG_F = 0x20  # do not forward ACKs
ACK_FLAG_U = 0x10  # receiver RegID set by the user
ACK_FLAG_E = 0x08  # explicit (application) ACK
ACK_TYPE_CDELV = 0  # consumption / confirmed delivery
ACK_TYPE_STABLE = 1  # stability (store -> source)
RXREQ_FLAG_T = 0x40  # TSNI request (in the flags byte, i.e. 0x4000 of the 16-bit word)
KA_FLAG_R = 0x40  # response requested
KA_FLAG_T = 0x20  # store has not seen a TIR for the topic
KA_TYPE_STORE, KA_TYPE_RECEIVER, KA_TYPE_SOURCE = 0, 1, 2
CAP_QC = 0x4000
CAP_CLIENT_LIFETIME = 0x2000
PROXY_SRC_ENABLE = 0x4000
PROXY_SRC_COMPAT = 0x2000
LJI_REQ_L = 0x0001  # tx_low_sqn present
LJI_REQ_M = 0x0002  # rx_req_max present
LJI_REQ_O = 0x0004  # rx_req_outstanding_max present
SRI_ACKTOSRC = 0x0001
SRI_INITIAL_SQN_KNOWN = 0x0002
CTXINFO_QUERY = 0x4000
CTXINFO_ADDR = 0x2000
CTXINFO_CTXINST = 0x1000
CTXINFO_NAME = 0x0800
CTXINFO_TNWG_SRC = 0x0400
CTXINFO_TNWG_RCV = 0x0200
CTXINFO_PROXY = 0x0100
TOPIC_SOURCE_EOS = 0x4000
EXTOPT_IGNORE_SUBTYPE = 0x40
EXTOPT_MORE = 0x20  # more fragments follow
EXTOPT_CFGOPT = 0x0100
EXTOPT_MSGSEL = 0x0101
# Largest EXTOPT data piece: hdr_len (255) minus the 8-byte fixed part.
EXTOPT_MAX_PIECE = MAX_HEADER_LEN - 8
# APPHDR_CHAIN element types.
APPHDR_ELEM_CHANNEL = 1
APPHDR_ELEM_HF_SQN = 2
APPHDR_ELEM_GW_INFO = 3
APPHDR_ELEM_APPHDR = 4
APPHDR_ELEM_USER = 5
APPHDR_ELEM_PROPERTIES = 6
AUTH_OP_REQUEST, AUTH_OP_CHALLENGE, AUTH_OP_CHALLENGE_RSP, AUTH_OP_RESULT = 1, 2, 3, 4


def ip4_to_str(addr: int) -> str:
    """``0x0A000001`` -> ``"10.0.0.1"``."""
    return ip4_int_str(addr)


def ip4_from_str(text: str) -> int:
    """``"10.0.0.1"`` -> ``0x0A000001``; raises ValueError for anything else (the canonical
    dotted quad only: no leading zeros, as :func:`umcore.wire._shared.ip4_bytes`)."""
    try:
        return ip4_int(text)
    except LocalProtocolError:
        raise ValueError(f"not an IPv4 address: {text!r}") from None


class Header:
    """Base of every chained-header record.  Subclasses are slotted dataclasses (not frozen)."""

    __slots__ = ()
    ID: ClassVar[int]
    NAME: ClassVar[str]
    _S: ClassVar[struct.Struct]
    MIN_LEN: ClassVar[int]
    _get: ClassVar[Callable[..., tuple[Any, ...]]]

    def type_id(self) -> int:
        """The header's type ID, as written in the previous header's ``next_hdr``."""
        return self.ID

    def body_bytes(self) -> bytes:
        """The bytes after next_hdr/hdr_len."""
        return self._S.pack(*self._get(self))

    @classmethod
    def decode_body(cls, buf: Buffer, pos: int, hlen: int) -> Header:
        """Decode the header at ``buf[pos:pos+hlen]`` (hlen >= MIN_LEN already checked)."""
        return cls(*cls._S.unpack_from(buf, pos + 2))


HEADER_TYPES: dict[int, type[Header]] = {}
_H = TypeVar("_H", bound=type[Header])


@dataclass_transform()
def _header(cls: _H) -> _H:
    """Make ``cls`` a slotted dataclass, derive its accessors and register its type ID."""
    out: Any = dataclass(slots=True)(cls)
    names = tuple(out.__dataclass_fields__)
    if hasattr(out, "_S") and "MIN_LEN" not in cls.__dict__:
        out.MIN_LEN = 2 + out._S.size
    if len(names) == 1:
        single = names[0]
        out._get = staticmethod(lambda obj: (getattr(obj, single),))
    elif names:
        out._get = staticmethod(attrgetter(*names))
    if "ID" in cls.__dict__ and out.ID not in HEADER_TYPES:
        HEADER_TYPES[out.ID] = out
    return out  # type: ignore[no-any-return]


def _tail(buf: Buffer, start: int, end: int) -> bytes:
    return bytes(buf[start:end])


# ============================================================================================
# Raw (unknown / UMQ) headers
# ============================================================================================


@dataclass(slots=True)
class RawHeader(Header):
    """A header we do not model (UMQ, TGIDX, future IDs): its type ID and the bytes after
    next_hdr/hdr_len, kept so the message re-encodes unchanged."""

    hdr_type: int
    data: bytes = b""
    MIN_LEN: ClassVar[int] = 2

    def type_id(self) -> int:
        return self.hdr_type

    def body_bytes(self) -> bytes:
        return bytes(self.data)


# ============================================================================================
# Data-path headers (wire-lbmc-ump.md section 5)
# ============================================================================================


@_header
class Frag(Header):
    """0x01 FRAG: one fragment of a larger application message.  Each fragment is its own LBMC
    data message with its own sqn; ``first_sqn`` is the sqn of the first fragment (reassembly
    key), ``offset`` this fragment's byte offset, ``total_len`` the whole message's length."""

    ID = 0x01
    NAME = "frag"
    _S = struct.Struct("!HIII")
    first_sqn: int = 0
    offset: int = 0
    total_len: int = 0
    flags: int = 0

    def body_bytes(self) -> bytes:
        return self._S.pack(self.flags, self.first_sqn, self.offset, self.total_len)

    @classmethod
    def decode_body(cls, buf: Buffer, pos: int, hlen: int) -> Header:
        flags, first, off, total = cls._S.unpack_from(buf, pos + 2)
        return cls(first, off, total, flags)


@_header
class Batch(Header):
    """0x02 BATCH: explicit batch start (0x0002) / end (0x0001) markers."""

    ID = 0x02
    NAME = "batch"
    _S = struct.Struct("!H")
    flags: int = 0


@_header
class Request(Header):
    """0x04 REQUEST: this data message is a request; responses go to ipaddr:port (the
    requester's UIM port), correlated by ``qidx``.  ``transport`` 0 = TCP (the only value)."""

    ID = 0x04
    NAME = "tcp_request"
    _S = struct.Struct("!BBIHHI")
    flags: int = 0
    transport: int = 0
    qidx: int = 0
    port: int = 0
    reserved: int = 0
    ipaddr: int = 0


@_header
class TopicName(Header):
    """0x05 TOPICNAME: the topic string, bytes exactly as on the wire (UM's C-string habit is to
    end it with one NUL; pass ``b"name\\0"`` to send one)."""

    ID = 0x05
    NAME = "topicname"
    _S = struct.Struct("!H")
    topic: bytes = b""
    flags: int = 0

    def body_bytes(self) -> bytes:
        return self._S.pack(self.flags) + bytes(self.topic)

    @classmethod
    def decode_body(cls, buf: Buffer, pos: int, hlen: int) -> Header:
        if hlen == cls.MIN_LEN:
            raise LBMCError("empty topic name", record="LBMC TOPICNAME", offset=pos)
        return cls(_tail(buf, pos + 4, pos + hlen), cls._S.unpack_from(buf, pos + 2)[0])


@_header
class AppHeader(Header):
    """0x06 APPHDR: legacy application header, a 15-bit code and data."""

    ID = 0x06
    NAME = "apphdr"
    _S = struct.Struct("!H")
    code: int = 0
    data: bytes = b""
    ignore: bool = False

    def body_bytes(self) -> bytes:
        if not 0 <= self.code <= 0x7FFF:
            raise LocalProtocolError(f"APPHDR code out of range: {self.code}")
        return self._S.pack((IGNORE16 if self.ignore else 0) | self.code) + bytes(self.data)

    @classmethod
    def decode_body(cls, buf: Buffer, pos: int, hlen: int) -> Header:
        word = cls._S.unpack_from(buf, pos + 2)[0]
        return cls(word & 0x7FFF, _tail(buf, pos + 4, pos + hlen), bool(word & IGNORE16))


@dataclass(slots=True)
class ApphdrElement:
    """One element of an APPHDR_CHAIN: its type (``APPHDR_ELEM_*``), the 16-bit reserved word
    and its data.  Properties-length elements (type 6) carry ``proplen`` as 4 big-endian bytes."""

    elem_type: int
    data: bytes = b""
    res: int = 0


_ELEM_HEAD = struct.Struct("!BBH")
_U32 = struct.Struct("!I")


@_header
class ApphdrChain(Header):
    """0x07 APPHDR_CHAIN: a chain of application elements; element 6 holds the length of the
    message-properties block at the end of the payload."""

    ID = 0x07
    NAME = "apphdr_chain"
    _S = struct.Struct("!BB")
    elements: tuple[ApphdrElement, ...] = ()
    res: int = 0

    @classmethod
    def for_properties(cls, proplen: int) -> ApphdrChain:
        """The chain real UM sends with message properties: one properties-length element."""
        return cls((ApphdrElement(APPHDR_ELEM_PROPERTIES, _U32.pack(proplen)),))

    def properties_length(self) -> int | None:
        """``proplen`` from the first properties element, or None."""
        for elem in self.elements:
            if elem.elem_type == APPHDR_ELEM_PROPERTIES and len(elem.data) >= 4:
                value: int = _U32.unpack_from(elem.data)[0]
                return value
        return None

    def body_bytes(self) -> bytes:
        first = self.elements[0].elem_type if self.elements else HDR_NONE
        parts = [self._S.pack(self.res, first)]
        for i, elem in enumerate(self.elements):
            nxt = self.elements[i + 1].elem_type if i + 1 < len(self.elements) else HDR_NONE
            elen = 4 + len(elem.data)
            if elen > 255:
                raise LocalProtocolError(f"APPHDR_CHAIN element too long: {elen}")
            parts.append(_ELEM_HEAD.pack(nxt, elen, elem.res))
            parts.append(bytes(elem.data))
        return b"".join(parts)

    @classmethod
    def decode_body(cls, buf: Buffer, pos: int, hlen: int) -> Header:
        res, etype = cls._S.unpack_from(buf, pos + 2)
        end = pos + hlen
        p = pos + 4
        elements = []
        while p < end:
            if end - p < 4:
                raise LBMCError(
                    "truncated APPHDR_CHAIN element", record="LBMC APPHDR_CHAIN", offset=p
                )
            nxt, elen, eres = _ELEM_HEAD.unpack_from(buf, p)
            if elen < 4 or p + elen > end:
                raise LBMCError(f"bad element length {elen}", record="LBMC APPHDR_CHAIN", offset=p)
            elements.append(ApphdrElement(etype, _tail(buf, p + 4, p + elen), eres))
            p += elen
            etype = nxt
        return cls(tuple(elements), res)


@_header
class Otid(Header):
    """0x0B OTID: originating transport ID (32 opaque bytes)."""

    ID = 0x0B
    NAME = "otid"
    _S = struct.Struct("!H32s")
    flags: int = 0
    otid: bytes = bytes(32)


@_header
class _CtxInstBase(Header):
    """The layout the four context-instance headers share: u16 flags, 8-byte instance."""

    _S = struct.Struct("!H8s")
    flags: int = 0
    ctxinst: bytes = bytes(8)


@_header
class CtxInstD(_CtxInstBase):
    """0x0C CTXINSTD: destination context instance (8 bytes)."""

    ID = 0x0C
    NAME = "ctxinstd"


@_header
class CtxInstR(_CtxInstBase):
    """0x0D CTXINSTR: return context instance."""

    ID = 0x0D
    NAME = "ctxinstr"


@_header
class CtxInstS(_CtxInstBase):
    """0x3C UME_CTXINSTS: the store's context instance."""

    ID = 0x3C
    NAME = "ctxinst"


@_header
class CtxInst(_CtxInstBase):
    """0x42 CTXINST: the sender's context instance."""

    ID = 0x42
    NAME = "ctxinst"


@_header
class SrcIdx(Header):
    """0x0E SRCIDX: source index (64-bit)."""

    ID = 0x0E
    NAME = "srcidx"
    _S = struct.Struct("!HQ")
    flags: int = 0
    srcidx: int = 0


@_header
class SsfInit(Header):
    """0x10 SSF_INIT: source-side filtering initialisation (LBT-TCP)."""

    ID = 0x10
    NAME = "ssf_init"
    _S = struct.Struct("!BBIIHHI")
    flags: int = 0
    transport: int = 0
    transport_idx: int = 0
    client_idx: int = 0
    ssf_port: int = 0
    res: int = 0
    ssf_ip: int = 0


@_header
class SsfCreq(Header):
    """0x11 SSF_CREQ: source-side filtering control request (mode 0 include, 1 exclude)."""

    ID = 0x11
    NAME = "ssf_creq"
    _S = struct.Struct("!BBIII")
    flags: int = 0
    mode: int = 0
    transport_idx: int = 0
    topic_idx: int = 0
    client_idx: int = 0


# ============================================================================================
# Persistence (UME) headers (wire-lbmc-ump.md section 6)
# ============================================================================================


@_header
class UmePreg(Header):
    """0x12 UME_PREG: persistent registration (source ``source=True`` or receiver -> store).
    ``marker`` 1/2/3 = primary/secondary/tertiary; resp_ip:resp_port is where the PREG_RESP goes."""

    ID = 0x12
    NAME = "ume_preg"
    _S = struct.Struct("!BBIIIIHHI")
    flags: int = 0
    source: bool = False
    marker: int = 0
    reg_id: int = 0
    transport_idx: int = 0
    topic_idx: int = 0
    src_reg_id: int = 0
    resp_port: int = 0
    res2: int = 0
    resp_ip: int = 0

    def body_bytes(self) -> bytes:
        if not 0 <= self.marker <= 0x7F:
            raise LocalProtocolError(f"PREG marker out of range: {self.marker}")
        s = (0x80 if self.source else 0) | self.marker
        return self._S.pack(
            self.flags, s, self.reg_id, self.transport_idx, self.topic_idx,
            self.src_reg_id, self.resp_port, self.res2, self.resp_ip,
        )  # fmt: skip

    @classmethod
    def decode_body(cls, buf: Buffer, pos: int, hlen: int) -> Header:
        f, s, *rest = cls._S.unpack_from(buf, pos + 2)
        return cls(f, bool(s & 0x80), s & 0x7F, *rest)


@_header
class UmePregResp(Header):
    """0x13 UME_PREG_RESP: the store's answer.  ``code``: O/E bits, and either N/W/D flags
    (E clear) or an error code in the low nibble (E set; ``PREG_RESP_E*``)."""

    ID = 0x13
    NAME = "ume_preg_resp"
    _S = struct.Struct("!BBIIIII")
    code: int = 0
    source: bool = False
    marker: int = 0
    reg_id: int = 0
    transport_idx: int = 0
    topic_idx: int = 0
    low_seqnum: int = 0
    high_seqnum: int = 0

    @property
    def error(self) -> int | None:
        """The error code when E is set, else None."""
        return self.code & PREG_RESP_ERR_MASK if self.code & PREG_RESP_E else None

    def body_bytes(self) -> bytes:
        if not 0 <= self.marker <= 0x7F:
            raise LocalProtocolError(f"PREG_RESP marker out of range: {self.marker}")
        s = (0x80 if self.source else 0) | self.marker
        return self._S.pack(
            self.code, s, self.reg_id, self.transport_idx, self.topic_idx,
            self.low_seqnum, self.high_seqnum,
        )  # fmt: skip

    @classmethod
    def decode_body(cls, buf: Buffer, pos: int, hlen: int) -> Header:
        c, s, *rest = cls._S.unpack_from(buf, pos + 2)
        return cls(c, bool(s & 0x80), s & 0x7F, *rest)


@_header
class UmeAck(Header):
    """0x14 UME_ACK: ``ack_type`` 1 = stability (store -> source), 0 = consumption/delivery.
    ``id_2`` is the topic index or the source RegID, depending on the addressee."""

    ID = 0x14
    NAME = "ume_ack"
    _S = struct.Struct("!BBIIII")
    flags: int = 0
    ack_type: int = 0
    transport_idx: int = 0
    id_2: int = 0
    rcv_reg_id: int = 0
    seqnum: int = 0


@_header
class UmeRxReq(Header):
    """0x15 UME_RXREQ: retransmission request; retransmissions go to rx_ip:rx_port.
    ``flags`` is the high byte of the 16-bit word (0x80 ignore, 0x40 T = TSNI request),
    ``marker`` the low byte."""

    ID = 0x15
    NAME = "ume_rxreq"
    _S = struct.Struct("!BBIIIIHHI")
    flags: int = 0
    marker: int = 0
    request_idx: int = 0
    transport_idx: int = 0
    id_2: int = 0
    seqnum: int = 0
    rx_port: int = 0
    res: int = 0
    rx_ip: int = 0


@_header
class UmeKeepalive(Header):
    """0x16 UME_KEEPALIVE: ``ka_type`` 0 store, 1 receiver, 2 source; flags R (0x40) asks for a
    response, T (0x20) = the store has not seen a TIR for the topic."""

    ID = 0x16
    NAME = "ume_keepalive"
    _S = struct.Struct("!BBIII")
    flags: int = 0
    ka_type: int = 0
    transport_idx: int = 0
    topic_idx: int = 0
    reg_id: int = 0


@_header
class UmeStoreId(Header):
    """0x17 UME_STOREID: which store (index in the source's list, 15 bits)."""

    ID = 0x17
    NAME = "ume_storeid"
    _S = struct.Struct("!H")
    store_id: int = 0
    ignore: bool = False

    def body_bytes(self) -> bytes:
        if not 0 <= self.store_id <= 0x7FFF:
            raise LocalProtocolError(f"store_id out of range: {self.store_id}")
        return self._S.pack((IGNORE16 if self.ignore else 0) | self.store_id)

    @classmethod
    def decode_body(cls, buf: Buffer, pos: int, hlen: int) -> Header:
        word = cls._S.unpack_from(buf, pos + 2)[0]
        return cls(word & 0x7FFF, bool(word & IGNORE16))


@_header
class UmeRangedAck(Header):
    """0x18 UME_RANGED_ACK: acknowledges first_seqnum..last_seqnum."""

    ID = 0x18
    NAME = "ume_ranged_ack"
    _S = struct.Struct("!HII")
    flags: int = 0
    first_seqnum: int = 0
    last_seqnum: int = 0


@_header
class UmeAckId(Header):
    """0x19 UME_ACK_ID: 32-bit ACK id."""

    ID = 0x19
    NAME = "ume_ack_id"
    _S = struct.Struct("!HI")
    flags: int = 0
    id: int = 0


@_header
class UmeCapability(Header):
    """0x1A UME_CAPABILITY: QC (0x4000) and client-lifetime (0x2000) support."""

    ID = 0x1A
    NAME = "ume_capability"
    _S = struct.Struct("!H")
    flags: int = 0


@_header
class UmeProxySrc(Header):
    """0x1B UME_PROXY_SRC: enable (0x4000) / pre-6.0 compatibility (0x2000)."""

    ID = 0x1B
    NAME = "ume_proxy_src"
    _S = struct.Struct("!H")
    flags: int = 0


@_header
class UmeStoreGroup(Header):
    """0x1C UME_STORE_GROUP: a quorum/consensus group: index and number of stores."""

    ID = 0x1C
    NAME = "ume_store_group"
    _S = struct.Struct("!BBHH")
    flags: int = 0
    grp_idx: int = 0
    grp_sz: int = 0
    res1: int = 0


@_header
class UmeStoreInfo(Header):
    """0x1D UME_STORE_INFO: a store's address, index, group and the source's RegID there."""

    ID = 0x1D
    NAME = "ume_store"
    _S = struct.Struct("!BBHHII")
    flags: int = 0
    grp_idx: int = 0
    store_tcp_port: int = 0
    store_idx: int = 0
    store_ip_addr: int = 0
    src_reg_id: int = 0


@_header
class UmeLjInfo(Header):
    """0x1E UME_LJ_INFO: late-join information; ``qidx`` echoes LJI_REQ.request_idx."""

    ID = 0x1E
    NAME = "ume_lj_info"
    _S = struct.Struct("!HIII")
    flags: int = 0
    low_seqnum: int = 0
    high_seqnum: int = 0
    qidx: int = 0


_TSNI_REC = struct.Struct("!II")
# 4 + 8 * 31 = 252 <= 255: the most records one TSNI header can hold.
TSNI_MAX_RECORDS = 31


@_header
class Tsni(Header):
    """0x20 TSNI: topic sequence-number info, records of (topic index, last sqn sent)."""

    ID = 0x20
    NAME = "tsni"
    _S = struct.Struct("!H")
    records: tuple[tuple[int, int], ...] = ()
    ignore: bool = False

    def body_bytes(self) -> bytes:
        n = len(self.records)
        if n > TSNI_MAX_RECORDS:
            raise LocalProtocolError(f"TSNI holds at most {TSNI_MAX_RECORDS} records, not {n}")
        parts = [self._S.pack((IGNORE16 if self.ignore else 0) | n)]
        parts += [_TSNI_REC.pack(tidx, sqn) for tidx, sqn in self.records]
        return b"".join(parts)

    @classmethod
    def decode_body(cls, buf: Buffer, pos: int, hlen: int) -> Header:
        word = cls._S.unpack_from(buf, pos + 2)[0]
        if (hlen - 4) % 8 or (hlen - 4) // 8 != word & 0x7FFF:
            # tshark walks records by hdr_len, UM may trust num_recs: refuse any disagreement.
            raise LBMCError(
                f"TSNI num_recs {word & 0x7FFF} does not match hdr_len {hlen}",
                record="LBMC TSNI",
                offset=pos,
            )
        recs = tuple(_TSNI_REC.unpack_from(buf, p) for p in range(pos + 4, pos + hlen, 8))
        return cls(recs, bool(word & IGNORE16))


@_header
class UmeStoreName(Header):
    """0x3D UME_STORENAME: store name (named stores), bytes as on the wire."""

    ID = 0x3D
    NAME = "ume_storename"
    _S = struct.Struct("!H")
    store: bytes = b""
    flags: int = 0

    def body_bytes(self) -> bytes:
        return self._S.pack(self.flags) + bytes(self.store)

    @classmethod
    def decode_body(cls, buf: Buffer, pos: int, hlen: int) -> Header:
        return cls(_tail(buf, pos + 4, pos + hlen), cls._S.unpack_from(buf, pos + 2)[0])


@_header
class UmePser(Header):
    """0x41 UME_PSER: proxy-source election record."""

    ID = 0x41
    NAME = "ume_pser"
    _S = struct.Struct("!HIIIIHH8s8s")
    flags: int = 0
    source_ip: int = 0
    store_ip: int = 0
    transport_idx: int = 0
    topic_idx: int = 0
    source_port: int = 0
    store_port: int = 0
    source_ctxinst: bytes = bytes(8)
    store_ctxinst: bytes = bytes(8)


@_header
class UmeClientLifetime(Header):
    """0x46 UME_CLIENT_LIFETIME: activity timeout, state lifetime and ttl (ms [inferred])."""

    ID = 0x46
    NAME = "ume_client_lifetime"
    _S = struct.Struct("!HIII")
    flags: int = 0
    activity_tmo: int = 0
    lifetime: int = 0
    ttl: int = 0


@_header
class UmeSid(Header):
    """0x47 UME_SID: 64-bit persistence session ID."""

    ID = 0x47
    NAME = "ume_sid"
    _S = struct.Struct("!HQ")
    flags: int = 0
    sid: int = 0


@_header
class LjiReq(Header):
    """0x4E LJI_REQ: late-join information request (receiver -> source)."""

    ID = 0x4E
    NAME = "lji_req"
    _S = struct.Struct("!HIIIIHHIII")
    flags: int = 0
    request_idx: int = 0
    transport_idx: int = 0
    topic_idx: int = 0
    req_ip: int = 0
    req_port: int = 0
    res: int = 0
    tx_low_sqn: int = 0
    rx_req_max: int = 0
    rx_req_outstanding_max: int = 0


@_header
class UmeRcvKeepalive(Header):
    """0x50 UME_RCV_KEEPALIVE: receiver -> store keepalive."""

    ID = 0x50
    NAME = "ume_receiver_keepalive"
    _S = struct.Struct("!HIQ8s")
    flags: int = 0
    rcv_regid: int = 0
    session_id: int = 0
    ctxinst: bytes = bytes(8)


@_header
class SriReq(Header):
    """0x53 SRI_REQ: source registration information request."""

    ID = 0x53
    NAME = "sri_req"
    _S = struct.Struct("!HII")
    flags: int = 0
    transport_idx: int = 0
    topic_idx: int = 0


@_header
class UmeStoreDomain(Header):
    """0x54 UME_STORE_DOMAIN: the store's domain ID."""

    ID = 0x54
    NAME = "ume_store_domain"
    _S = struct.Struct("!HI")
    flags: int = 0
    domain: int = 0


@_header
class Sri(Header):
    """0x55 SRI: source registration information (followed by STORE_INFO_EXT per store)."""

    ID = 0x55
    NAME = "sri"
    _S = struct.Struct("!HIII")
    flags: int = 0
    version: int = 0
    low_sqn: int = 0
    high_sqn: int = 0


@_header
class UmeStoreInfoExt(Header):
    """0x69 UME_STORE_INFO_EXT: per-store SRI entry (STORE_INFO + domain ID and version)."""

    ID = 0x69
    NAME = "ume_store_ext"
    _S = struct.Struct("!BBHHIIII")
    flags: int = 0
    grp_idx: int = 0
    store_tcp_port: int = 0
    store_idx: int = 0
    store_ip_addr: int = 0
    src_reg_id: int = 0
    domain_id: int = 0
    version: int = 0


@_header
class UmePsrcElectionToken(Header):
    """0x6A UME_PSRC_ELECTION_TOKEN: proxy-source election token."""

    ID = 0x6A
    NAME = "ume_psrc_election_token"
    _S = struct.Struct("!BBI")
    flags: int = 0
    store_index: int = 0
    token: int = 0


# ============================================================================================
# DRO / context / stream headers (wire-lbmc-ump.md section 7)
# ============================================================================================


@_header
class TopicInterest(Header):
    """0x39 TOPIC_INTEREST (flags 0x4000 cancel, 0x2000 refresh)."""

    ID = 0x39
    NAME = "topic_interest"
    _S = struct.Struct("!HI")
    flags: int = 0
    domain_id: int = 0


@_header
class PatternInterest(Header):
    """0x3A PATTERN_INTEREST (pattern_type 1 PCRE, 2 REGEX; ``index`` is signed 64-bit)."""

    ID = 0x3A
    NAME = "pattern_interest"
    _S = struct.Struct("!BBIq")
    flags: int = 0
    pattern_type: int = 0
    domain_id: int = 0
    index: int = 0


@_header
class Advertisement(Header):
    """0x3B ADVERTISEMENT: DRO proxied advertisement."""

    ID = 0x3B
    NAME = "advertisement"
    _S = struct.Struct("!BBIIIIIIIq8s")
    flags: int = 0
    hop_count: int = 0
    ad_flags: int = 0
    cost: int = 0
    transport_idx: int = 0
    topic_idx: int = 0
    low_seqno: int = 0
    high_seqno: int = 0
    domain_id: int = 0
    pat_idx: int = 0
    ctxinst: bytes = bytes(8)


@_header
class CtxInfo(Header):
    """0x40 CTXINFO: context information; ``name`` (set flag 0x0800) runs to hdr_len."""

    ID = 0x40
    NAME = "ctxinfo"
    _S = struct.Struct("!HBBHII8s")
    flags: int = 0
    reserved: int = 0
    hop_count: int = 0
    port: int = 0
    addr: int = 0
    domain_id: int = 0
    ctxinst: bytes = bytes(8)
    name: bytes = b""

    def body_bytes(self) -> bytes:
        return self._S.pack(
            self.flags, self.reserved, self.hop_count, self.port, self.addr,
            self.domain_id, self.ctxinst,
        ) + bytes(self.name)  # fmt: skip

    @classmethod
    def decode_body(cls, buf: Buffer, pos: int, hlen: int) -> Header:
        return cls(*cls._S.unpack_from(buf, pos + 2), _tail(buf, pos + 24, pos + hlen))  # type: ignore[call-arg]


@_header
class Domain(Header):
    """0x43 DOMAIN: TRD domain ID (flag 0x4000 active)."""

    ID = 0x43
    NAME = "domain"
    _S = struct.Struct("!HI")
    flags: int = 0
    domain: int = 0


@_header
class TnwgCapabilities(Header):
    """0x44 TNWG_CAPABILITIES: DRO capabilities (flags bits 0-14 = version)."""

    ID = 0x44
    NAME = "tnwg_capabilities"
    _S = struct.Struct("!HIIII")
    flags: int = 0
    capabilities1: int = 0
    capabilities2: int = 0
    capabilities3: int = 0
    capabilities4: int = 0


@_header
class PatIdx(Header):
    """0x45 PATIDX: pattern index (64-bit)."""

    ID = 0x45
    NAME = "patidx"
    _S = struct.Struct("!HQ")
    flags: int = 0
    patidx: int = 0


@_header
class ODomain(Header):
    """0x4A ODOMAIN: originating domain."""

    ID = 0x4A
    NAME = "odomain"
    _S = struct.Struct("!HI")
    flags: int = 0
    domain: int = 0


@_header
class Stream(Header):
    """0x4B STREAM: UIM stream id, per-stream sqn and the sender's context instance."""

    ID = 0x4B
    NAME = "stream"
    _S = struct.Struct("!HII8s")
    flags: int = 0
    stream_id: int = 0
    sqn: int = 0
    ctxinst: bytes = bytes(8)


_DOMAIN_IDS_MAX = (MAX_HEADER_LEN - 16) // 4


def _domains(buf: Buffer, start: int, end: int, count: int, record: str) -> tuple[int, ...]:
    if (end - start) // 4 < count:
        raise LBMCError(f"domain_count {count} exceeds hdr_len", record=record, offset=start)
    return struct.unpack_from(f"!{count}I", buf, start)


@_header
class TopicMdInterest(Header):
    """0x4C TOPIC_MD_INTEREST: multi-domain topic interest; ``domains`` is the ID list."""

    ID = 0x4C
    NAME = "topic_md_interest"
    _S = struct.Struct("!HHH")
    flags: int = 0
    domains: tuple[int, ...] = ()
    res1: int = 0

    def body_bytes(self) -> bytes:
        n = len(self.domains)
        return self._S.pack(self.flags, n, self.res1) + struct.pack(f"!{n}I", *self.domains)

    @classmethod
    def decode_body(cls, buf: Buffer, pos: int, hlen: int) -> Header:
        flags, count, res1 = cls._S.unpack_from(buf, pos + 2)
        doms = _domains(buf, pos + 8, pos + hlen, count, "LBMC TOPIC_MD_INTEREST")
        return cls(flags, doms, res1)


@_header
class PatternMdInterest(Header):
    """0x4D PATTERN_MD_INTEREST: multi-domain pattern interest."""

    ID = 0x4D
    NAME = "pattern_md_interest"
    _S = struct.Struct("!BBHHq")
    flags: int = 0
    pattern_type: int = 0
    index: int = 0
    domains: tuple[int, ...] = ()
    res1: int = 0

    def body_bytes(self) -> bytes:
        n = len(self.domains)
        head = self._S.pack(self.flags, self.pattern_type, n, self.res1, self.index)
        return head + struct.pack(f"!{n}I", *self.domains)

    @classmethod
    def decode_body(cls, buf: Buffer, pos: int, hlen: int) -> Header:
        flags, ptype, count, res1, index = cls._S.unpack_from(buf, pos + 2)
        doms = _domains(buf, pos + 16, pos + hlen, count, "LBMC PATTERN_MD_INTEREST")
        return cls(flags, ptype, index, doms, res1)


@_header
class TnwgKa(Header):
    """0x4F TNWG_KA: DRO peer keepalive (flags 0x4000 query, 0x2000 response)."""

    ID = 0x4F
    NAME = "tnwg_ka"
    _S = struct.Struct("!HIQIIQQQQQ")
    flags: int = 0
    index: int = 0
    ts_seconds: int = 0
    ts_microseconds: int = 0
    reserved_1: int = 0
    reserved_2: int = 0
    reserved_3: int = 0
    reserved_4: int = 0
    reserved_5: int = 0
    reserved_6: int = 0


@_header
class RouteInfo(Header):
    """0x56 ROUTE_INFO: DRO routing information."""

    ID = 0x56
    NAME = "route_info"
    _S = struct.Struct("!HIIQIHHBBH")
    flags: int = 0
    gateway_version: int = 0
    configuration_signature: int = 0
    node_id: int = 0
    topology: int = 0
    vers: int = 0
    sqn: int = 0
    ttl: int = 0
    reserved1: int = 0
    reserved2: int = 0


@_header
class RouteInfoNeighbor(Header):
    """0x57 ROUTE_INFO_NEIGHBOR."""

    ID = 0x57
    NAME = "route_info_neighbor"
    _S = struct.Struct("!HQII")
    flags: int = 0
    node_id: int = 0
    ingress_cost: int = 0
    egress_cost: int = 0


@_header
class GatewayName(Header):
    """0x58 GATEWAY_NAME: the DRO's name, bytes to hdr_len."""

    ID = 0x58
    NAME = "gateway_name"
    _S = struct.Struct("!H")
    gateway_name: bytes = b""
    flags: int = 0

    def body_bytes(self) -> bytes:
        return self._S.pack(self.flags) + bytes(self.gateway_name)

    @classmethod
    def decode_body(cls, buf: Buffer, pos: int, hlen: int) -> Header:
        return cls(_tail(buf, pos + 4, pos + hlen), cls._S.unpack_from(buf, pos + 2)[0])


# -- AUTHENTICATION (0x60): one ID, four layouts chosen by the opid byte ----------------------

_AUTH_ID = 0x60


def _blob_lengths(blobs: tuple[bytes, ...]) -> bytes:
    for blob in blobs:
        if len(blob) > 255:
            raise LocalProtocolError(f"authentication field longer than 255 bytes: {len(blob)}")
    return bytes(len(b) for b in blobs)


def _split_blobs(
    buf: Buffer, start: int, end: int, lengths: bytes | tuple[int, ...]
) -> list[bytes]:
    out = []
    for n in lengths:
        if start + n > end:
            raise LBMCError("authentication field past hdr_len", record="LBMC AUTH", offset=start)
        out.append(_tail(buf, start, start + n))
        start += n
    return out


@_header
class AuthRequest(Header):
    """0x60 AUTHENTICATION, opid 1 (request): the user name."""

    ID = _AUTH_ID
    NAME = "auth_request"
    _S = struct.Struct("!BBB")
    user_name: bytes = b""
    flags: int = 0

    def body_bytes(self) -> bytes:
        return (
            bytes((self.flags, AUTH_OP_REQUEST)) + _blob_lengths((self.user_name,)) + self.user_name
        )


@_header
class AuthChallenge(Header):
    """0x60 AUTHENTICATION, opid 2 (challenge): modulus, generator, salt and public key."""

    ID = _AUTH_ID
    NAME = "auth_challenge"
    _S = struct.Struct("!BBBBBB")
    mod: bytes = b""
    gen: bytes = b""
    salt: bytes = b""
    pubkey: bytes = b""
    flags: int = 0

    def body_bytes(self) -> bytes:
        blobs = (self.mod, self.gen, self.salt, self.pubkey)
        return bytes((self.flags, AUTH_OP_CHALLENGE)) + _blob_lengths(blobs) + b"".join(blobs)


@_header
class AuthChallengeResponse(Header):
    """0x60 AUTHENTICATION, opid 3 (challenge response): public key and evidence."""

    ID = _AUTH_ID
    NAME = "auth_challenge_rsp"
    _S = struct.Struct("!BBBB")
    pubkey: bytes = b""
    evidence: bytes = b""
    flags: int = 0

    def body_bytes(self) -> bytes:
        blobs = (self.pubkey, self.evidence)
        return bytes((self.flags, AUTH_OP_CHALLENGE_RSP)) + _blob_lengths(blobs) + b"".join(blobs)


@_header
class AuthResult(Header):
    """0x60 AUTHENTICATION, opid 4 (result)."""

    ID = _AUTH_ID
    NAME = "auth_result"
    _S = struct.Struct("!BBB")
    result: int = 0
    flags: int = 0

    def body_bytes(self) -> bytes:
        return bytes((self.flags, AUTH_OP_RESULT, self.result))


class _AuthDispatch(Header):
    """Registry entry for 0x60: picks the layout by the opid byte."""

    __slots__ = ()
    ID = _AUTH_ID
    MIN_LEN = 4

    @classmethod
    def decode_body(cls, buf: Buffer, pos: int, hlen: int) -> Header:
        flags, opid = buf[pos + 2], buf[pos + 3]
        end = pos + hlen
        if opid == AUTH_OP_REQUEST and hlen >= 5:
            (user,) = _split_blobs(buf, pos + 5, end, (buf[pos + 4],))
            return AuthRequest(user, flags)
        if opid == AUTH_OP_CHALLENGE and hlen >= 8:
            lens = bytes(buf[pos + 4 : pos + 8])
            mod, gen, salt, pub = _split_blobs(buf, pos + 8, end, lens)
            return AuthChallenge(mod, gen, salt, pub, flags)
        if opid == AUTH_OP_CHALLENGE_RSP and hlen >= 6:
            pub, evidence = _split_blobs(buf, pos + 6, end, bytes(buf[pos + 4 : pos + 6]))
            return AuthChallengeResponse(pub, evidence, flags)
        if opid == AUTH_OP_RESULT and hlen >= 5:
            return AuthResult(buf[pos + 4], flags)
        if opid in (AUTH_OP_REQUEST, AUTH_OP_CHALLENGE, AUTH_OP_CHALLENGE_RSP, AUTH_OP_RESULT):
            raise LBMCError(f"AUTH opid {opid} header too short", record="LBMC AUTH", offset=pos)
        return RawHeader(_AUTH_ID, _tail(buf, pos + 2, end))


HEADER_TYPES[_AUTH_ID] = _AuthDispatch


@_header
class Hmac(Header):
    """0x62 HMAC: 20-byte HMAC."""

    ID = 0x62
    NAME = "hmac"
    _S = struct.Struct("!BB20s")
    flags: int = 0
    padding: int = 0
    data: bytes = bytes(20)


@_header
class Destination(Header):
    """0x64 DESTINATION: UIM destination across DROs (domain streams)."""

    ID = 0x64
    NAME = "destination"
    _S = struct.Struct("!HIIHHIIHH")
    flags: int = 0
    domain_id: int = 0
    ipaddr: int = 0
    port: int = 0
    hops_taken: int = 0
    orig_domain_id: int = 0
    orig_ipaddr: int = 0
    orig_port: int = 0
    reserved: int = 0


@_header
class TopicIdx(Header):
    """0x65 TOPIC_IDX: topic index."""

    ID = 0x65
    NAME = "topic_idx"
    _S = struct.Struct("!HI")
    flags: int = 0
    tidx: int = 0


@_header
class TopicSource(Header):
    """0x67 TOPIC_SOURCE: topic source domain (flag 0x4000 EOS)."""

    ID = 0x67
    NAME = "topic_source"
    _S = struct.Struct("!HI")
    flags: int = 0
    domain_id: int = 0


@_header
class TopicSourceExfunc(Header):
    """0x68 TOPIC_SOURCE_EXFUNC: source address and functionality flags (1 LJ, 2 UME, 4 UMQ,
    8 ULB)."""

    ID = 0x68
    NAME = "topic_source_exfunc"
    _S = struct.Struct("!HIHHI")
    flags: int = 0
    src_ip: int = 0
    src_port: int = 0
    unused: int = 0
    functionality_flags: int = 0


@_header
class TcpSid(Header):
    """0x6B TCP_SID: LBT-TCP transport session ID (receiver -> source confirmation)."""

    ID = 0x6B
    NAME = "tcp_sid"
    _S = struct.Struct("!HI")
    flags: int = 0
    sid: int = 0


@_header
class ExtOpt(Header):
    """0xFE EXTOPT: one piece of an extended option.  Options longer than
    ``EXTOPT_MAX_PIECE`` are split across consecutive EXTOPT headers of one message (flag
    ``EXTOPT_MORE`` on all but the last, ``fragment_offset`` = offset of the piece); see
    :func:`umcore.wire.lbmc_props.extopt_headers`."""

    ID = 0xFE
    NAME = "extopt"
    _S = struct.Struct("!BBHH")
    flags: int = 0
    id: int = 0
    subtype: int = 0
    fragment_offset: int = 0
    data: bytes = b""

    def body_bytes(self) -> bytes:
        head = self._S.pack(self.flags, self.id, self.subtype, self.fragment_offset)
        return head + bytes(self.data)

    @classmethod
    def decode_body(cls, buf: Buffer, pos: int, hlen: int) -> Header:
        return cls(*cls._S.unpack_from(buf, pos + 2), _tail(buf, pos + 8, pos + hlen))  # type: ignore[call-arg]
