"""SRS messages: what travels inside the RSocket frames of an SRS session.

Theory of operation
-------------------
The Stateful Resolver Service (SRS) replaces multicast topic resolution with a TCP session
between each context and the SRS daemon.  The session is framed by RSocket (see
:mod:`umcore.wire.srs`); each RSocket payload holds one SRS message that starts with a big-endian
``u16`` message id:

- 1 registration request (client -> SRS, in a REQUEST_RESPONSE), exactly 21 body bytes;
- 2 registration response (SRS -> client, PAYLOAD), exactly 13 body bytes;
- 3 stream request (client -> SRS, REQUEST_STREAM), exactly 1 body byte;
- 4..18 a *batch*: one or more records back to back until the end of the payload, each
  starting with its own ``u16`` id, with no count and no per-record length.

Batch records, by id (UM's short names; tshark's labels in brackets where they differ):

==  ======  ================================================================================
4   SIR     source info: a source's OTID, topic, source string and transport details.  With
            ``cost == -1`` (``SER_COST``) the same record is a SER, "source end" [SER].
5   SDR     source delete (client -> SRS); the SRS never relays it, it sends SERs instead.
6   RIR     receiver info: a context's interest in one topic.
7   RDR     receiver delete.
8   RER     receiver end (SRS -> forward-interest clients when the interest expires).
9   WIR     wildcard receiver info (a pattern instead of a topic); 10 WDR, 11 WER likewise.
12  SLR     source leave [SLI, "SRS_LEAVE_INFO"]: a receiving context lost a source.
13  RTIR    route info (DRO): domains reachable through a DRO portal, its address, route index.
14  RTER    route end.
15  DIR     domain info (DRO): the domain id of the DRO's topic-resolution domain.
16  CNQR    context name query; 17 CNIR context name info; 18 CNER context name end.
==  ======  ================================================================================

Layouts (all integers big-endian, IPv4 addresses 4 raw bytes, shown here as dotted quads)
follow the structs in Wireshark's ``packet-lbmsrs.c``: ids 1-12 as decoded by tshark 4.0.17
(checked by our oracle tests), ids 13-18 (UM 6.14 "protocol version 3" records) from the
dissector in Wireshark's current master, which 4.0.17 does not have — those are checked by exact
bytes and round trips only.  Every layout is in the ``_LAYOUT`` table beside its class.

Decisions worth knowing:

- Strings (topic, pattern, source string, context name) are ``u8 length`` + bytes, and we
  include a terminating NUL inside the length (tshark labels records with a NUL-terminated read
  of the topic).  [I] — confirm against a real UM capture.  The decoder drops one trailing NUL
  if present.  Text is UTF-8; strings may not contain NUL.
- Registration response: the dissector's struct says ``u64 client_id, u32 local_domain_id,
  u8 protocol_version`` (13 bytes) but tshark 4.0.17 *displays* it with the domain as 1 byte and
  the version as 4 bytes (its length macros were swapped; fixed in later Wireshark, whose macros
  read 8/4/1).  We encode the struct order 8/4/1.  With local domain id 0 both readings give the
  same bytes, so tshark-based tests use domain 0.
- Reserved fields are written as zero and ignored when read.
- Unlike tshark, which silently stops at an unknown id or a short record, the decoder raises
  :class:`SRSError` for either: a peer's malformed batch costs it its connection.
"""

from __future__ import annotations

import struct
from collections.abc import Iterable
from typing import Any, ClassVar

from umcore.errors import LocalProtocolError, RemoteProtocolError
from umcore.wire._shared import Record, ip4_bytes, ip4_str

__all__ = [
    "APP_TYPE_APPLICATION",
    "APP_TYPE_STORE",
    "APP_TYPE_TNWGD",
    "BATCH_RECORD_TYPES",
    "INTEREST_MODE_FILTER",
    "INTEREST_MODE_FILTER_FORWARD_INTEREST",
    "INTEREST_MODE_FLOOD",
    "INTEREST_MODE_FLOOD_FORWARD_INTEREST",
    "SER_COST",
    "Batch",
    "BatchRecord",
    "ContextNameEnd",
    "ContextNameInfo",
    "ContextNameQuery",
    "DomainInfo",
    "ReceiverDelete",
    "ReceiverEnd",
    "ReceiverInfo",
    "RegistrationRequest",
    "RegistrationResponse",
    "RouteEnd",
    "RouteInfo",
    "SRSError",
    "SRSMessage",
    "SourceDelete",
    "SourceInfo",
    "SourceLeave",
    "StreamRequest",
    "WildcardReceiverDelete",
    "WildcardReceiverEnd",
    "WildcardReceiverInfo",
    "decode_message",
    "encode_message",
    "encode_records",
]


class SRSError(RemoteProtocolError):
    """A peer sent SRS or RSocket bytes we cannot decode."""


# Registration request app_type / SRS context_type values.
APP_TYPE_APPLICATION = 0
APP_TYPE_TNWGD = 1  # a DRO (tnwgd) endpoint
APP_TYPE_STORE = 2
# Registration request interest_mode (bit 0x01 filter adverts by interest, 0x02 forward
# interest to this client).
INTEREST_MODE_FLOOD = 0
INTEREST_MODE_FILTER = 1
INTEREST_MODE_FLOOD_FORWARD_INTEREST = 2
INTEREST_MODE_FILTER_FORWARD_INTEREST = 3
# A SIR whose cost is -1 is a SER (source end record).
SER_COST = -1

OTID_SIZE = 32  # originating transport id: opaque bytes
CTXINST_SIZE = 8  # context instance: opaque bytes
MAX_STRING = 254  # u8 length field, which also counts our terminating NUL

_ZERO_CTX = bytes(CTXINST_SIZE)
_ZERO_OTID = bytes(OTID_SIZE)
_U16 = struct.Struct("!H")

# --------------------------------------------------------------------------------------------
# Field kinds of the layout tables: name -> (struct format or None for variable-size).

_FIXED = {
    "u8": struct.Struct("!B"),
    "u16": struct.Struct("!H"),
    "u32": struct.Struct("!I"),
    "u64": struct.Struct("!Q"),
    "i32": struct.Struct("!i"),
}
_RESERVED = {"r8": 1, "r16": 2, "r32": 4}
_OPAQUE = {"ctx": CTXINST_SIZE, "otid": OTID_SIZE, "ip": 4}


def _encode_str(value: str, what: str) -> bytes:
    if not isinstance(value, str) or "\0" in value:
        raise LocalProtocolError(f"SRS {what} must be a str without NUL: {value!r}")
    raw = value.encode("utf-8")
    if len(raw) > MAX_STRING:
        raise LocalProtocolError(f"SRS {what} longer than {MAX_STRING} bytes: {value!r}")
    return bytes((len(raw) + 1,)) + raw + b"\0"


def _encode_fields(obj: Any, layout: tuple[tuple[str, str], ...]) -> bytes:
    out = []
    for name, kind in layout:
        if kind in _RESERVED:
            out.append(bytes(_RESERVED[kind]))
            continue
        value = getattr(obj, name)
        fixed = _FIXED.get(kind)
        if fixed is not None:
            try:
                out.append(fixed.pack(value))
            except struct.error:
                raise LocalProtocolError(f"SRS {name}={value!r} does not fit {kind}") from None
        elif kind == "ip":
            out.append(ip4_bytes(value))
        elif kind in _OPAQUE:
            if not isinstance(value, bytes) or len(value) != _OPAQUE[kind]:
                raise LocalProtocolError(f"SRS {name} must be {_OPAQUE[kind]} bytes: {value!r}")
            out.append(value)
        elif kind == "str":
            out.append(_encode_str(value, name))
        elif kind == "domains":
            if len(value) > 0xFFFF:
                raise LocalProtocolError("SRS route lists at most 65535 domains")
            try:
                out.append(_U16.pack(len(value)) + struct.pack(f"!{len(value)}I", *value))
            except struct.error:
                raise LocalProtocolError(f"SRS domain ids must be u32: {value!r}") from None
        else:  # pragma: no cover - layout tables are static
            raise AssertionError(kind)
    return b"".join(out)


def _decode_fields(
    obj: Any, layout: tuple[tuple[str, str], ...], buf: memoryview, offset: int, record: str
) -> int:
    """Set ``obj``'s attributes from ``buf`` at ``offset``; return the offset after them."""
    end = len(buf)
    for name, kind in layout:
        if kind in _RESERVED:
            size = _RESERVED[kind]
        elif kind in _FIXED:
            size = _FIXED[kind].size
        elif kind in _OPAQUE:
            size = _OPAQUE[kind]
        elif kind == "str":
            if offset >= end:
                raise SRSError(f"truncated {name} length", record=record, offset=offset)
            size = buf[offset]
            offset += 1
        else:  # domains
            if offset + 2 > end:
                raise SRSError("truncated domain count", record=record, offset=offset)
            size = 4 * _U16.unpack_from(buf, offset)[0]
            offset += 2
        if offset + size > end:
            raise SRSError(f"truncated {name}", record=record, offset=offset)
        if kind in _FIXED:
            setattr(obj, name, _FIXED[kind].unpack_from(buf, offset)[0])
        elif kind == "ip":
            setattr(obj, name, ip4_str(buf[offset : offset + 4]))
        elif kind in _OPAQUE:
            setattr(obj, name, bytes(buf[offset : offset + size]))
        elif kind == "str":
            raw = bytes(buf[offset : offset + size])
            if raw.endswith(b"\0"):
                raw = raw[:-1]
            try:
                text = raw.decode("utf-8")
            except UnicodeDecodeError:
                raise SRSError(f"{name} is not UTF-8", record=record, offset=offset) from None
            if "\0" in text:
                raise SRSError(f"{name} contains NUL", record=record, offset=offset)
            setattr(obj, name, text)
        elif kind == "domains":
            setattr(obj, name, struct.unpack_from(f"!{size // 4}I", buf, offset))
        offset += size
    return offset


class _Message(Record):
    """Base of every SRS message and batch record: slotted, compared by value (:class:`Record`),
    fields in sorted order."""

    __slots__ = ()
    MSG_ID: ClassVar[int]
    SHORT: ClassVar[str]
    _LAYOUT: ClassVar[tuple[tuple[str, str], ...]]

    @classmethod
    def _order_fields(cls, names: tuple[str, ...]) -> tuple[str, ...]:
        """Every slot along the class hierarchy, in layout-independent sorted order."""
        return tuple(sorted(names))

    def encode(self) -> bytes:
        """The message bytes, starting with the u16 message id."""
        return _U16.pack(self.MSG_ID) + _encode_fields(self, self._LAYOUT)

    @classmethod
    def _decode_at(cls, buf: memoryview, offset: int) -> tuple[Any, int]:
        obj = cls.__new__(cls)
        return obj, _decode_fields(obj, cls._LAYOUT, buf, offset, cls.SHORT)


# --------------------------------------------------------------------------------------------
# Session messages (ids 1-3)


class RegistrationRequest(_Message):
    """Client -> SRS, first message of a session (in a REQUEST_RESPONSE)."""

    MSG_ID = 1
    SHORT = "REGISTRATION_REQUEST"
    _LAYOUT = (
        ("app_type", "u8"),
        ("client_addr", "ip"),
        ("client_port", "u16"),
        ("session_id", "u32"),
        ("host_id", "u32"),
        ("protocol_version", "u8"),
        ("interest_mode", "u8"),
        ("local_domain_id", "u32"),
    )
    BODY_SIZE = 21
    __slots__ = (
        "app_type",
        "client_addr",
        "client_port",
        "host_id",
        "interest_mode",
        "local_domain_id",
        "protocol_version",
        "session_id",
    )

    def __init__(
        self,
        client_addr: str,
        client_port: int,
        session_id: int,
        *,
        app_type: int = APP_TYPE_APPLICATION,
        host_id: int = 0,
        protocol_version: int = 3,
        interest_mode: int = INTEREST_MODE_FILTER,
        local_domain_id: int = 0,
    ) -> None:
        self.app_type = app_type
        self.client_addr = client_addr
        self.client_port = client_port
        self.session_id = session_id
        self.host_id = host_id
        self.protocol_version = protocol_version
        self.interest_mode = interest_mode
        self.local_domain_id = local_domain_id


class RegistrationResponse(_Message):
    """SRS -> client: the id the SRS gave this connection, its domain and protocol version.

    Layout u64 client_id, u32 local_domain_id, u8 protocol_version: the dissector's struct and
    the length macros of current Wireshark.  tshark 4.0.17 reads 8/1/4 (swapped macros), so
    its display is right only for local_domain_id 0; our tshark tests use 0 (trap 12)."""

    MSG_ID = 2
    SHORT = "REGISTRATION_RESPONSE"
    _LAYOUT = (("client_id", "u64"), ("local_domain_id", "u32"), ("protocol_version", "u8"))
    BODY_SIZE = 13
    __slots__ = ("client_id", "local_domain_id", "protocol_version")

    def __init__(self, client_id: int, *, local_domain_id: int = 0, protocol_version: int = 3):
        self.client_id = client_id
        self.local_domain_id = local_domain_id
        self.protocol_version = protocol_version


class StreamRequest(_Message):
    """Client -> SRS (in a REQUEST_STREAM): open the stream of record batches."""

    MSG_ID = 3
    SHORT = "STREAM_REQUEST"
    _LAYOUT = (("unused", "r8"),)
    BODY_SIZE = 1
    __slots__ = ()


# --------------------------------------------------------------------------------------------
# Batch records (ids 4-18)

_CTX_TAIL = (
    ("context_instance", "ctx"),
    ("context_type", "u8"),
    ("version", "u32"),
    ("version_flags", "u32"),
)


class SourceInfo(_Message):
    """SIR: a source's advertisement (``cost == SER_COST`` makes it a SER, source end)."""

    MSG_ID = 4
    SHORT = "SIR"
    _LAYOUT = (
        ("otid", "otid"),
        ("topic", "str"),
        ("source", "str"),
        ("host_id", "u32"),
        ("topic_idx", "u32"),
        ("functionality_flags", "u32"),
        ("request_ip", "ip"),
        ("request_port", "u16"),
        ("domain_id", "u32"),
        ("encryption", "u8"),
        ("compression", "u8"),
        ("ulb_src_id", "u32"),
        ("ulb_queue_id", "u32"),
        ("ulb_reg_id", "u64"),
        *_CTX_TAIL,
        ("ttl", "u16"),
        ("cost", "i32"),
    )
    __slots__ = (
        "compression",
        "context_instance",
        "context_type",
        "cost",
        "domain_id",
        "encryption",
        "functionality_flags",
        "host_id",
        "otid",
        "request_ip",
        "request_port",
        "source",
        "topic",
        "topic_idx",
        "ttl",
        "ulb_queue_id",
        "ulb_reg_id",
        "ulb_src_id",
        "version",
        "version_flags",
    )

    def __init__(
        self,
        otid: bytes,
        topic: str,
        source: str,
        *,
        host_id: int = 0,
        topic_idx: int = 0,
        functionality_flags: int = 0,
        request_ip: str = "0.0.0.0",
        request_port: int = 0,
        domain_id: int = 0,
        encryption: int = 0,
        compression: int = 0,
        ulb_src_id: int = 0,
        ulb_queue_id: int = 0,
        ulb_reg_id: int = 0,
        context_instance: bytes = _ZERO_CTX,
        context_type: int = APP_TYPE_APPLICATION,
        version: int = 0,
        version_flags: int = 0,
        ttl: int = 0,
        cost: int = 0,
    ) -> None:
        self.otid = otid
        self.topic = topic
        self.source = source
        self.host_id = host_id
        self.topic_idx = topic_idx
        self.functionality_flags = functionality_flags
        self.request_ip = request_ip
        self.request_port = request_port
        self.domain_id = domain_id
        self.encryption = encryption
        self.compression = compression
        self.ulb_src_id = ulb_src_id
        self.ulb_queue_id = ulb_queue_id
        self.ulb_reg_id = ulb_reg_id
        self.context_instance = context_instance
        self.context_type = context_type
        self.version = version
        self.version_flags = version_flags
        self.ttl = ttl
        self.cost = cost

    @property
    def is_end(self) -> bool:
        """True for a SER (source end record): a SIR with cost -1."""
        return self.cost == SER_COST


class SourceDelete(_Message):
    """SDR: a client deleted a source (client -> SRS only)."""

    MSG_ID = 5
    SHORT = "SDR"
    _LAYOUT = (("otid", "otid"), ("topic", "str"))
    __slots__ = ("otid", "topic")

    def __init__(self, otid: bytes, topic: str) -> None:
        self.otid = otid
        self.topic = topic


class _Interest(_Message):
    """Shared tail of RIR/RDR/RER (topic) and WIR/WDR/WER (pattern)."""

    __slots__ = ("context_instance", "context_type", "domain_id", "version", "version_flags")

    def _init(
        self,
        domain_id: int,
        context_instance: bytes,
        context_type: int,
        version: int,
        version_flags: int,
    ) -> None:
        self.domain_id = domain_id
        self.context_instance = context_instance
        self.context_type = context_type
        self.version = version
        self.version_flags = version_flags


_TOPIC_INTEREST = (("topic", "str"), ("domain_id", "u32"), *_CTX_TAIL, ("reserved", "r32"))
_PATTERN_INTEREST = (("pattern", "str"), ("domain_id", "u32"), *_CTX_TAIL, ("reserved", "r32"))


class _TopicInterest(_Interest):
    _LAYOUT = _TOPIC_INTEREST
    __slots__ = ("topic",)

    def __init__(
        self,
        topic: str,
        *,
        domain_id: int = 0,
        context_instance: bytes = _ZERO_CTX,
        context_type: int = APP_TYPE_APPLICATION,
        version: int = 0,
        version_flags: int = 0,
    ) -> None:
        self.topic = topic
        self._init(domain_id, context_instance, context_type, version, version_flags)


class _PatternInterest(_Interest):
    _LAYOUT = _PATTERN_INTEREST
    __slots__ = ("pattern",)

    def __init__(
        self,
        pattern: str,
        *,
        domain_id: int = 0,
        context_instance: bytes = _ZERO_CTX,
        context_type: int = APP_TYPE_APPLICATION,
        version: int = 0,
        version_flags: int = 0,
    ) -> None:
        self.pattern = pattern
        self._init(domain_id, context_instance, context_type, version, version_flags)


class ReceiverInfo(_TopicInterest):
    """RIR: a context has receivers for ``topic``."""

    MSG_ID = 6
    SHORT = "RIR"
    __slots__ = ()


class ReceiverDelete(_TopicInterest):
    """RDR: a context no longer has receivers for ``topic``."""

    MSG_ID = 7
    SHORT = "RDR"
    __slots__ = ()


class ReceiverEnd(_TopicInterest):
    """RER: the SRS tells forward-interest clients an interest ended (expired)."""

    MSG_ID = 8
    SHORT = "RER"
    __slots__ = ()


class WildcardReceiverInfo(_PatternInterest):
    """WIR: a context has a wildcard receiver for ``pattern``."""

    MSG_ID = 9
    SHORT = "WIR"
    __slots__ = ()


class WildcardReceiverDelete(_PatternInterest):
    """WDR: wildcard receiver deleted."""

    MSG_ID = 10
    SHORT = "WDR"
    __slots__ = ()


class WildcardReceiverEnd(_PatternInterest):
    """WER: wildcard interest ended (SRS -> forward-interest clients)."""

    MSG_ID = 11
    SHORT = "WER"
    __slots__ = ()


class SourceLeave(_Message):
    """SLR (tshark "SLI"): a receiving context left or lost the source ``otid`` on ``topic``."""

    MSG_ID = 12
    SHORT = "SLR"
    _LAYOUT = (("otid", "otid"), ("topic", "str"), ("source", "str"), *_CTX_TAIL, ("r", "r32"))
    __slots__ = (
        "context_instance",
        "context_type",
        "otid",
        "source",
        "topic",
        "version",
        "version_flags",
    )

    def __init__(
        self,
        otid: bytes,
        topic: str,
        source: str,
        *,
        context_instance: bytes = _ZERO_CTX,
        context_type: int = APP_TYPE_APPLICATION,
        version: int = 0,
        version_flags: int = 0,
    ) -> None:
        self.otid = otid
        self.topic = topic
        self.source = source
        self.context_instance = context_instance
        self.context_type = context_type
        self.version = version
        self.version_flags = version_flags


class _Route(_Message):
    """Shared shape of RTIR and RTER: the domains a DRO portal reaches and its address."""

    _LAYOUT = (
        ("domains", "domains"),
        ("ip", "ip"),
        ("port", "u16"),
        *_CTX_TAIL,
        ("route_index", "u16"),
        ("reserved", "r16"),
    )
    __slots__ = (
        "context_instance",
        "context_type",
        "domains",
        "ip",
        "port",
        "route_index",
        "version",
        "version_flags",
    )

    def __init__(
        self,
        domains: Iterable[int],
        ip: str,
        port: int,
        *,
        route_index: int = 0,
        context_instance: bytes = _ZERO_CTX,
        context_type: int = APP_TYPE_TNWGD,
        version: int = 0,
        version_flags: int = 0,
    ) -> None:
        self.domains = tuple(domains)
        self.ip = ip
        self.port = port
        self.route_index = route_index
        self.context_instance = context_instance
        self.context_type = context_type
        self.version = version
        self.version_flags = version_flags


class RouteInfo(_Route):
    """RTIR (DRO -> SRS -> everyone): a route through a DRO portal."""

    MSG_ID = 13
    SHORT = "RTIR"
    __slots__ = ()


class RouteEnd(_Route):
    """RTER: a route ended (the DRO's route-state lifetime expired)."""

    MSG_ID = 14
    SHORT = "RTER"
    __slots__ = ()


class DomainInfo(_Message):
    """DIR (DRO -> SRS): the domain id of the DRO endpoint's topic-resolution domain."""

    MSG_ID = 15
    SHORT = "DIR"
    _LAYOUT = (("domain_id", "u32"), *_CTX_TAIL, ("reserved", "r32"))
    __slots__ = ("context_instance", "context_type", "domain_id", "version", "version_flags")

    def __init__(
        self,
        domain_id: int,
        *,
        context_instance: bytes = _ZERO_CTX,
        context_type: int = APP_TYPE_TNWGD,
        version: int = 0,
        version_flags: int = 0,
    ) -> None:
        self.domain_id = domain_id
        self.context_instance = context_instance
        self.context_type = context_type
        self.version = version
        self.version_flags = version_flags


class ContextNameQuery(_Message):
    """CNQR: a context looks for the context (typically a Store) called ``name``."""

    MSG_ID = 16
    SHORT = "CNQR"
    _LAYOUT = (("name", "str"), ("domain_id", "u32"), *_CTX_TAIL, ("reserved", "r32"))
    __slots__ = (
        "context_instance",
        "context_type",
        "domain_id",
        "name",
        "version",
        "version_flags",
    )

    def __init__(
        self,
        name: str,
        *,
        domain_id: int = 0,
        context_instance: bytes = _ZERO_CTX,
        context_type: int = APP_TYPE_APPLICATION,
        version: int = 0,
        version_flags: int = 0,
    ) -> None:
        self.name = name
        self.domain_id = domain_id
        self.context_instance = context_instance
        self.context_type = context_type
        self.version = version
        self.version_flags = version_flags


class _ContextName(_Message):
    """Shared shape of CNIR and CNER: a named context's address and instances."""

    _LAYOUT = (
        ("name", "str"),
        ("domain_id", "u32"),
        ("ip", "ip"),
        ("port", "u16"),
        ("origin_context_instance", "ctx"),
        *_CTX_TAIL,
        ("reserved", "r32"),
    )
    __slots__ = (
        "context_instance",
        "context_type",
        "domain_id",
        "ip",
        "name",
        "origin_context_instance",
        "port",
        "version",
        "version_flags",
    )

    def __init__(
        self,
        name: str,
        ip: str,
        port: int,
        *,
        domain_id: int = 0,
        origin_context_instance: bytes = _ZERO_CTX,
        context_instance: bytes = _ZERO_CTX,
        context_type: int = APP_TYPE_STORE,
        version: int = 0,
        version_flags: int = 0,
    ) -> None:
        self.name = name
        self.domain_id = domain_id
        self.ip = ip
        self.port = port
        self.origin_context_instance = origin_context_instance
        self.context_instance = context_instance
        self.context_type = context_type
        self.version = version
        self.version_flags = version_flags


class ContextNameInfo(_ContextName):
    """CNIR: a named context (Store) announces itself or answers a CNQR."""

    MSG_ID = 17
    SHORT = "CNIR"
    __slots__ = ()


class ContextNameEnd(_ContextName):
    """CNER: a named context went away."""

    MSG_ID = 18
    SHORT = "CNER"
    __slots__ = ()


BatchRecord = (
    SourceInfo
    | SourceDelete
    | ReceiverInfo
    | ReceiverDelete
    | ReceiverEnd
    | WildcardReceiverInfo
    | WildcardReceiverDelete
    | WildcardReceiverEnd
    | SourceLeave
    | RouteInfo
    | RouteEnd
    | DomainInfo
    | ContextNameQuery
    | ContextNameInfo
    | ContextNameEnd
)

BATCH_RECORD_TYPES: dict[int, type[BatchRecord]] = {
    cls.MSG_ID: cls
    for cls in (
        SourceInfo,
        SourceDelete,
        ReceiverInfo,
        ReceiverDelete,
        ReceiverEnd,
        WildcardReceiverInfo,
        WildcardReceiverDelete,
        WildcardReceiverEnd,
        SourceLeave,
        RouteInfo,
        RouteEnd,
        DomainInfo,
        ContextNameQuery,
        ContextNameInfo,
        ContextNameEnd,
    )
}
_SESSION_TYPES: dict[int, type[RegistrationRequest | RegistrationResponse | StreamRequest]] = {
    RegistrationRequest.MSG_ID: RegistrationRequest,
    RegistrationResponse.MSG_ID: RegistrationResponse,
    StreamRequest.MSG_ID: StreamRequest,
}


class Batch:
    """A payload of one or more batch records (ids 4-18), in wire order."""

    __slots__ = ("records",)

    def __init__(self, records: Iterable[BatchRecord]) -> None:
        self.records = tuple(records)

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Batch):
            return NotImplemented
        return self.records == other.records

    def __hash__(self) -> int:
        return hash(self.records)

    def __repr__(self) -> str:
        return f"Batch({list(self.records)!r})"

    def encode(self) -> bytes:
        if not self.records:
            raise LocalProtocolError("an SRS batch holds at least one record")
        return encode_records(self.records)


SRSMessage = RegistrationRequest | RegistrationResponse | StreamRequest | Batch


def encode_records(records: Iterable[BatchRecord]) -> bytes:
    """The concatenated bytes of batch records (the payload of a batch PAYLOAD frame)."""
    out = []
    for rec in records:
        if type(rec) not in BATCH_RECORD_TYPES.values():
            raise LocalProtocolError(f"not an SRS batch record: {rec!r}")
        out.append(rec.encode())
    return b"".join(out)


def encode_message(message: SRSMessage) -> bytes:
    """The RSocket payload bytes for one SRS message."""
    if not isinstance(message, (Batch, RegistrationRequest, RegistrationResponse, StreamRequest)):
        raise LocalProtocolError(f"not an SRS message: {message!r}")
    return message.encode()


def decode_message(buf: bytes | bytearray | memoryview) -> SRSMessage:
    """Decode one RSocket payload as an SRS message; raises only :class:`SRSError`."""
    mv = memoryview(buf)
    if len(mv) < 2:
        raise SRSError("SRS message shorter than its id", offset=0)
    (msg_id,) = _U16.unpack_from(mv, 0)
    session = _SESSION_TYPES.get(msg_id)
    if session is not None:
        if len(mv) - 2 != session.BODY_SIZE:
            raise SRSError(
                f"body of {len(mv) - 2} bytes, expected {session.BODY_SIZE}",
                record=session.SHORT,
                offset=2,
            )
        obj, _end = session._decode_at(mv, 2)
        return obj  # type: ignore[no-any-return]
    records: list[BatchRecord] = []
    offset = 0
    end = len(mv)
    while offset < end:
        if end - offset < 2:
            raise SRSError("truncated record id", record="batch", offset=offset)
        (msg_id,) = _U16.unpack_from(mv, offset)
        cls = BATCH_RECORD_TYPES.get(msg_id)
        if cls is None:
            what = "session message inside a batch" if msg_id in _SESSION_TYPES else "unknown id"
            raise SRSError(f"{what} {msg_id}", record="batch", offset=offset)
        rec, offset = cls._decode_at(mv, offset + 2)
        records.append(rec)
    return Batch(records)
