"""LBMR options: TIR topic options, packet options (the datagram trailer), and the option chains
shared by the TNWG and remote-context-info extended messages.

Theory of operation
-------------------
Every LBMR option starts ``u8 type, u8 len`` (len = whole option, these two bytes included) and,
for all the options here, a ``u16`` or ``u8`` flags field; the option classes below hold the
fields after that head.  Options of a known type have a fixed size (except the name-carrying
ones): the decoder insists the len byte equals it, so every decoded option re-encodes to the same
bytes.  Options of an unknown type are kept whole as ``Unknown*Option(opt_type, raw)`` where
``raw`` is everything after the type and len bytes; a len below 4 is refused (the dissector reads
a 4-byte head, and a len of 0 would never advance).

Chains (layouts from shared/spec/wire-lbmr-transports-srs.md 3.5, 3.6, 3.10):

- **TIR topic options** (types 0x00-0x0E): a length option ``00 04 <u16 total>`` comes FIRST and
  counts the whole block including itself; it is derived, never part of ``TIR.options``.
- **Packet options** (types 0x80-0x84): follow the body when header bit 0x08 is set; the
  length record ``80 04 <u16 total>`` is the LAST four bytes of the datagram (Wireshark finds the
  block from the end) and is derived too.
- **TNWG options** (ext type 0x05) and **remote context info options** (ext type 0x07): plain
  chains delimited by the enclosing record's length.

Flags fields are kept verbatim (``flags=0`` by default); IPv4 addresses are dotted-quad strings,
context instances 8 raw bytes, the OTID 32 raw bytes.
"""

# __slots__ are in constructor order on purpose: Record derives repr and equality from them.
# ruff: noqa: RUF023

from __future__ import annotations

import struct
from typing import Any, ClassVar

from umcore.errors import LocalProtocolError
from umcore.wire.lbmr_base import (
    MAX_NAME_LEN,
    OPT_HDR,
    U16,
    LBMRError,
    Record,
    fixed_bytes,
    ip_bytes,
    ip_str,
    name_bytes,
    need,
    trailing_name,
)

__all__ = [
    "CostOption",
    "CtxInstOption",
    "CtxInstQueueOption",
    "CtxInstStoreOption",
    "DomainIdOption",
    "ExFuncOption",
    "LateJoinOption",
    "LocalDomainOption",
    "OTIDOption",
    "RCtxAddressOption",
    "RCtxInstanceOption",
    "RCtxNameOption",
    "RCtxODomainOption",
    "SrcIdOption",
    "SrcTypeOption",
    "TNWGAddressOption",
    "TNWGCtxInstOption",
    "TNWGDomainOption",
    "TNWGNameOption",
    "UMEOption",
    "UMEStoreGroupOption",
    "UMEStoreOption",
    "UMQQInfoOption",
    "UMQRcrIdxOption",
    "UMQULBOption",
    "UnknownPacketOption",
    "UnknownRCtxOption",
    "UnknownTNWGOption",
    "UnknownTopicOption",
    "VersionOption",
]

# Option flag bits (the "ignore" bit tells a receiver it may skip an option it does not know).
TOPT_FLAG_IGNORE = 0x8000  # u16-flag options
TOPT_FLAG_IGNORE_8 = 0x80  # u8-flag options
UME_FLAG_LATEJOIN = 0x4000
UME_FLAG_STORE = 0x2000
UME_FLAG_QCCAP = 0x1000
UME_FLAG_ACKTOSRC = 0x0800
LATEJOIN_FLAG_ACKTOSRC = 0x4000
EXFUNC_LATE_JOIN = 0x1
EXFUNC_UME = 0x2
EXFUNC_UMQ = 0x4
EXFUNC_ULB = 0x8
# [inferred] pyum's bits for "this source's context uses TLS / LZ4 compression" (seed 003
# 10.4.4, 10.5.1: receivers ignore sources whose settings differ).  UM's TIR encoding of these
# settings is not public (no field in the notes or Wireshark's dissector; the SRS SIR has
# separate encryption/compression bytes), so these two bits are pyum's own.
EXFUNC_TLS = 0x10
EXFUNC_COMPRESSION = 0x20
SRC_TYPE_APPLICATION = 0
SRC_TYPE_TNWGD = 1  # a DRO (tnwgd) context
SRC_TYPE_STORE = 2
VERSION_FLAG_UME = 0x0001
VERSION_FLAG_UMQ = 0x0002

TOPIC_OPT_LEN = 0x00
PACKET_OPT_LEN = 0x80
_LEN_RECORD = struct.Struct(">BBH")  # type, len=4, total_len
_LEN_RECORD_SIZE = 4
# A u16 total_len bounds every option block.
MAX_OPTION_BLOCK = 0xFFFF
# Option len is a u8: no option may exceed 255 bytes, so a name option holds at most 250 bytes
# of name plus its NUL after the 4-byte head.
MAX_OPTION_NAME_LEN = 255 - 4 - 1


class FixedOption(Record):
    """An option with a fixed size.  ``_layout`` lists, in wire order after ``type, len``, the
    attribute names (``None`` for a reserved field, written 0 and ignored when read); names in
    ``_ips`` are IPv4 strings and names in ``_raw`` fixed-size byte strings."""

    __slots__ = ()
    opt_type: ClassVar[int]
    _struct: ClassVar[struct.Struct]
    _layout: ClassVar[tuple[str | None, ...]]
    _ips: ClassVar[frozenset[str]] = frozenset()
    _raw: ClassVar[dict[str, int]] = {}

    def encode(self) -> bytes:
        values: list[Any] = [self.opt_type, self._struct.size]
        ips, raw = self._ips, self._raw
        for name in self._layout:
            if name is None:
                values.append(0)
            elif name in ips:
                values.append(ip_bytes(getattr(self, name)))
            elif name in raw:
                values.append(
                    fixed_bytes(getattr(self, name), raw[name], f"{type(self).__name__}.{name}")
                )
            else:
                values.append(getattr(self, name))
        return self._struct.pack(*values)

    @classmethod
    def decode(cls, data: bytes, pos: int, length: int) -> FixedOption:
        if length != cls._struct.size:
            raise LBMRError(
                f"option 0x{cls.opt_type:02x} has len {length}, expected {cls._struct.size}",
                record=cls.__name__,
                offset=pos,
            )
        values = cls._struct.unpack_from(data, pos)
        obj = cls.__new__(cls)
        for name, value in zip(cls._layout, values[2:], strict=True):
            if name is not None:
                setattr(obj, name, ip_str(value) if name in cls._ips else value)
        return obj


class NameOption(Record):
    """An option ``type, len, u16 flags, name NUL`` (len = 4 + name bytes + 1)."""

    __slots__ = ("flags", "name")
    opt_type: ClassVar[int]
    _head = struct.Struct(">BBH")

    def __init__(self, name: str, flags: int = 0) -> None:
        self.name = name
        self.flags = flags

    def encode(self) -> bytes:
        raw = name_bytes(self.name, MAX_OPTION_NAME_LEN, f"{type(self).__name__}.name")
        return self._head.pack(self.opt_type, 4 + len(raw) + 1, self.flags) + raw + b"\0"

    @classmethod
    def decode(cls, data: bytes, pos: int, length: int) -> NameOption:
        (flags,) = U16.unpack_from(data, pos + 2)
        name = trailing_name(data[pos + 4 : pos + length], MAX_NAME_LEN, cls.__name__, pos)
        return cls(name, flags)


class UnknownOption(Record):
    """An option of a type this codec does not know, kept whole."""

    __slots__ = ("opt_type", "raw")

    def __init__(self, opt_type: int, raw: bytes) -> None:
        self.opt_type = opt_type
        self.raw = raw

    def encode(self) -> bytes:
        raw = bytes(self.raw)
        if not 2 <= len(raw) <= 253:
            raise LocalProtocolError(f"{type(self).__name__}.raw must be 2..253 bytes")
        return OPT_HDR.pack(self.opt_type, 2 + len(raw)) + raw

    @classmethod
    def decode_unknown(cls, opt_type: int, data: bytes, pos: int, length: int) -> UnknownOption:
        return cls(opt_type, data[pos + 2 : pos + length])


# --- TIR topic options (3.5) ------------------------------------------------------------------


class UMEOption(FixedOption):
    """0x01 UME (persistence) info of a source: store and source TCP endpoints, registration id,
    transport index and sequence-number range."""

    __slots__ = (
        "store_tcp_port",
        "src_tcp_port",
        "store_tcp_addr",
        "src_tcp_addr",
        "src_reg_id",
        "transport_idx",
        "high_seqnum",
        "low_seqnum",
        "flags",
    )
    opt_type = 0x01
    _struct = struct.Struct(">BBHHH4s4sIIII")
    _layout = (
        "flags",
        "store_tcp_port",
        "src_tcp_port",
        "store_tcp_addr",
        "src_tcp_addr",
        "src_reg_id",
        "transport_idx",
        "high_seqnum",
        "low_seqnum",
    )
    _ips = frozenset({"store_tcp_addr", "src_tcp_addr"})

    def __init__(
        self,
        store_tcp_port: int = 0,
        src_tcp_port: int = 0,
        store_tcp_addr: str = "0.0.0.0",
        src_tcp_addr: str = "0.0.0.0",
        src_reg_id: int = 0,
        transport_idx: int = 0,
        high_seqnum: int = 0,
        low_seqnum: int = 0,
        flags: int = 0,
    ) -> None:
        self.store_tcp_port = store_tcp_port
        self.src_tcp_port = src_tcp_port
        self.store_tcp_addr = store_tcp_addr
        self.src_tcp_addr = src_tcp_addr
        self.src_reg_id = src_reg_id
        self.transport_idx = transport_idx
        self.high_seqnum = high_seqnum
        self.low_seqnum = low_seqnum
        self.flags = flags


class UMEStoreOption(FixedOption):
    """0x02 one store of the source: group index, store TCP endpoint, store index, RegID."""

    __slots__ = ("grp_idx", "store_tcp_port", "store_idx", "store_ip_addr", "src_reg_id", "flags")
    opt_type = 0x02
    _struct = struct.Struct(">BBBBHH4sI")
    _layout = ("flags", "grp_idx", "store_tcp_port", "store_idx", "store_ip_addr", "src_reg_id")
    _ips = frozenset({"store_ip_addr"})

    def __init__(
        self,
        grp_idx: int,
        store_tcp_port: int,
        store_idx: int,
        store_ip_addr: str,
        src_reg_id: int,
        flags: int = 0,
    ) -> None:
        self.grp_idx = grp_idx
        self.store_tcp_port = store_tcp_port
        self.store_idx = store_idx
        self.store_ip_addr = store_ip_addr
        self.src_reg_id = src_reg_id
        self.flags = flags


class UMEStoreGroupOption(FixedOption):
    """0x03 a store group (quorum/consensus): index and size."""

    __slots__ = ("grp_idx", "grp_sz", "flags")
    opt_type = 0x03
    _struct = struct.Struct(">BBBBHH")
    _layout = ("flags", "grp_idx", "grp_sz", None)

    def __init__(self, grp_idx: int, grp_sz: int, flags: int = 0) -> None:
        self.grp_idx = grp_idx
        self.grp_sz = grp_sz
        self.flags = flags


class LateJoinOption(FixedOption):
    """0x04 late join offered by the source: its retransmission endpoint and sequence range."""

    __slots__ = (
        "src_tcp_port",
        "src_ip_addr",
        "transport_idx",
        "high_seqnum",
        "low_seqnum",
        "flags",
    )
    opt_type = 0x04
    _struct = struct.Struct(">BBHHH4sIII")
    _layout = (
        "flags",
        "src_tcp_port",
        None,
        "src_ip_addr",
        "transport_idx",
        "high_seqnum",
        "low_seqnum",
    )
    _ips = frozenset({"src_ip_addr"})

    def __init__(
        self,
        src_tcp_port: int,
        src_ip_addr: str,
        transport_idx: int,
        high_seqnum: int,
        low_seqnum: int,
        flags: int = 0,
    ) -> None:
        self.src_tcp_port = src_tcp_port
        self.src_ip_addr = src_ip_addr
        self.transport_idx = transport_idx
        self.high_seqnum = high_seqnum
        self.low_seqnum = low_seqnum
        self.flags = flags


class UMQRcrIdxOption(FixedOption):
    """0x05 UMQ receiver-control-record index."""

    __slots__ = ("rcr_idx", "flags")
    opt_type = 0x05
    _struct = struct.Struct(">BBHI")
    _layout = ("flags", "rcr_idx")

    def __init__(self, rcr_idx: int, flags: int = 0) -> None:
        self.rcr_idx = rcr_idx
        self.flags = flags


class UMQQInfoOption(NameOption):
    """0x06 UMQ queue info: flags and the queue name (``name``)."""

    __slots__ = ()
    opt_type = 0x06


class CostOption(FixedOption):
    """0x07 route cost and hop count of a (DRO proxy) source; cost is signed."""

    __slots__ = ("hop_count", "cost", "flags")
    opt_type = 0x07
    _struct = struct.Struct(">BBBBi")
    _layout = ("flags", "hop_count", "cost")

    def __init__(self, hop_count: int, cost: int, flags: int = 0) -> None:
        self.hop_count = hop_count
        self.cost = cost
        self.flags = flags


class OTIDOption(FixedOption):
    """0x08 originating transport id (32 opaque bytes) that keys DRO proxy sources."""

    __slots__ = ("otid", "flags")
    opt_type = 0x08
    _struct = struct.Struct(">BBH32s")
    _layout = ("flags", "otid")
    _raw = {"otid": 32}

    def __init__(self, otid: bytes, flags: int = 0) -> None:
        self.otid = otid
        self.flags = flags


class CtxInstOption(FixedOption):
    """0x09 context instance (8 opaque bytes) of the source's context."""

    __slots__ = ("ctxinst", "flags")
    opt_type = 0x09
    _struct = struct.Struct(">BBBB8s")
    _layout = ("flags", None, "ctxinst")
    _raw = {"ctxinst": 8}

    def __init__(self, ctxinst: bytes, flags: int = 0) -> None:
        self.ctxinst = ctxinst
        self.flags = flags


class CtxInstStoreOption(FixedOption):
    """0x0A context instance of store number ``idx``."""

    __slots__ = ("idx", "ctxinst", "flags")
    opt_type = 0x0A
    _struct = struct.Struct(">BBBB8s")
    _layout = ("flags", "idx", "ctxinst")
    _raw = {"ctxinst": 8}

    def __init__(self, idx: int, ctxinst: bytes, flags: int = 0) -> None:
        self.idx = idx
        self.ctxinst = ctxinst
        self.flags = flags


class UMQULBOption(FixedOption):
    """0x0B UMQ ULB (load-balanced) source info."""

    __slots__ = ("queue_id", "regid", "ulb_src_id", "src_ip_addr", "src_tcp_port", "flags")
    opt_type = 0x0B
    _struct = struct.Struct(">BBHIQI4sHH")
    _layout = ("flags", "queue_id", "regid", "ulb_src_id", "src_ip_addr", "src_tcp_port", None)
    _ips = frozenset({"src_ip_addr"})

    def __init__(
        self,
        queue_id: int,
        regid: int,
        ulb_src_id: int,
        src_ip_addr: str,
        src_tcp_port: int,
        flags: int = 0,
    ) -> None:
        self.queue_id = queue_id
        self.regid = regid
        self.ulb_src_id = ulb_src_id
        self.src_ip_addr = src_ip_addr
        self.src_tcp_port = src_tcp_port
        self.flags = flags


class CtxInstQueueOption(FixedOption):
    """0x0C context instance of queue number ``idx``."""

    __slots__ = ("idx", "ctxinst", "flags")
    opt_type = 0x0C
    _struct = struct.Struct(">BBBB8s")
    _layout = ("flags", "idx", "ctxinst")
    _raw = {"ctxinst": 8}

    def __init__(self, idx: int, ctxinst: bytes, flags: int = 0) -> None:
        self.idx = idx
        self.ctxinst = ctxinst
        self.flags = flags


class DomainIdOption(FixedOption):
    """0x0D the topic resolution domain (TRD) id the source is in."""

    __slots__ = ("domain_id", "flags")
    opt_type = 0x0D
    _struct = struct.Struct(">BBHI")
    _layout = ("flags", "domain_id")

    def __init__(self, domain_id: int, flags: int = 0) -> None:
        self.domain_id = domain_id
        self.flags = flags


class ExFuncOption(FixedOption):
    """0x0E extended functionality: the source's request port/address and what it offers
    (``functionality_flags``: EXFUNC_LATE_JOIN, EXFUNC_UME, EXFUNC_UMQ, EXFUNC_ULB)."""

    __slots__ = ("src_tcp_port", "src_ip_addr", "functionality_flags", "flags")
    opt_type = 0x0E
    _struct = struct.Struct(">BBHHH4sI")
    _layout = ("flags", "src_tcp_port", None, "src_ip_addr", "functionality_flags")
    _ips = frozenset({"src_ip_addr"})

    def __init__(
        self, src_tcp_port: int, src_ip_addr: str, functionality_flags: int, flags: int = 0
    ) -> None:
        self.src_tcp_port = src_tcp_port
        self.src_ip_addr = src_ip_addr
        self.functionality_flags = functionality_flags
        self.flags = flags


class UnknownTopicOption(UnknownOption):
    """A TIR topic option of a type outside 0x01-0x0E."""

    __slots__ = ()


TopicOption = (
    UMEOption
    | UMEStoreOption
    | UMEStoreGroupOption
    | LateJoinOption
    | UMQRcrIdxOption
    | UMQQInfoOption
    | CostOption
    | OTIDOption
    | CtxInstOption
    | CtxInstStoreOption
    | UMQULBOption
    | CtxInstQueueOption
    | DomainIdOption
    | ExFuncOption
    | UnknownTopicOption
)

_TOPIC_OPTIONS: dict[int, type[FixedOption] | type[NameOption]] = {
    cls.opt_type: cls
    for cls in (
        UMEOption,
        UMEStoreOption,
        UMEStoreGroupOption,
        LateJoinOption,
        UMQRcrIdxOption,
        UMQQInfoOption,
        CostOption,
        OTIDOption,
        CtxInstOption,
        CtxInstStoreOption,
        UMQULBOption,
        CtxInstQueueOption,
        DomainIdOption,
        ExFuncOption,
    )
}


class _Chain:
    """What differs between the four option chains: the classes of the known types (by type
    code), the class that keeps the others, the length-record type that may not appear among
    the options (-1: none) and the words of the errors."""

    __slots__ = ("classes", "known", "not_one", "reserved", "reserved_error", "unknown")

    def __init__(
        self,
        known: dict[int, type[FixedOption] | type[NameOption]],
        unknown: type[UnknownOption],
        not_one: str,
        reserved: int = -1,
        reserved_error: str = "",
    ) -> None:
        self.known = known
        self.classes = frozenset(known.values())
        self.unknown = unknown
        self.not_one = not_one  # "not <not_one>: <option>" when encoding a foreign object
        self.reserved = reserved
        self.reserved_error = reserved_error


def _check_unknown(opt: UnknownOption, known: dict[int, Any], reserved: int) -> None:
    if not 0 <= opt.opt_type <= 255 or opt.opt_type in known or opt.opt_type == reserved:
        raise LocalProtocolError(
            f"{type(opt).__name__}.opt_type 0x{opt.opt_type:02x} is a known type; use its class"
        )


def _encode_each(options: tuple[Any, ...] | list[Any], chain: _Chain) -> list[bytes]:
    """The bytes of each option of ``chain``'s kind; refuses objects of another kind."""
    parts = []
    for opt in options:
        if type(opt) not in chain.classes:
            if not isinstance(opt, chain.unknown):
                raise LocalProtocolError(f"not {chain.not_one}: {opt!r}")
            _check_unknown(opt, chain.known, chain.reserved)
        parts.append(opt.encode())
    return parts


def _decode_each(data: bytes, pos: int, end: int, chain: _Chain, record: str) -> tuple[Any, ...]:
    """The options of ``chain``'s kind from ``pos`` up to ``end``."""
    out: list[Any] = []
    known, reserved = chain.known, chain.reserved
    while pos < end:
        opt_type, opt_len = _opt_head(data, pos, end, record)
        cls = known.get(opt_type)
        if cls is not None:
            out.append(cls.decode(data, pos, opt_len))
        elif opt_type == reserved:
            raise LBMRError(chain.reserved_error, record=record, offset=pos)
        else:
            out.append(chain.unknown.decode_unknown(opt_type, data, pos, opt_len))
        pos += opt_len
    return tuple(out)


_TOPIC = _Chain(
    _TOPIC_OPTIONS,
    UnknownTopicOption,
    "a TIR topic option",
    TOPIC_OPT_LEN,
    "second topic length option",
)


def encode_topic_options(options: tuple[TopicOption, ...] | list[TopicOption]) -> bytes:
    """The options block of a TIR or QIR: length option first, then ``options``."""
    body = b"".join(_encode_each(options, _TOPIC))
    total = _LEN_RECORD_SIZE + len(body)
    if total > MAX_OPTION_BLOCK:
        raise LocalProtocolError(f"topic options block of {total} bytes exceeds {MAX_OPTION_BLOCK}")
    return _LEN_RECORD.pack(TOPIC_OPT_LEN, _LEN_RECORD_SIZE, total) + body


def decode_topic_options(
    data: bytes, pos: int, end: int, record: str
) -> tuple[tuple[Any, ...], int]:
    """Decode a topic options block at ``pos``; return the options and the offset after it."""
    need(pos, _LEN_RECORD_SIZE, end, record)
    opt_type, opt_len, total = _LEN_RECORD.unpack_from(data, pos)
    if opt_type != TOPIC_OPT_LEN or opt_len != _LEN_RECORD_SIZE:
        raise LBMRError(
            "topic options do not start with the length option", record=record, offset=pos
        )
    if total < _LEN_RECORD_SIZE:
        raise LBMRError(f"topic options total_len {total} < 4", record=record, offset=pos)
    block_end = pos + total
    if block_end > end:
        raise LBMRError("topic options block overruns the record", record=record, offset=pos)
    return _decode_each(data, pos + _LEN_RECORD_SIZE, block_end, _TOPIC, record), block_end


def _opt_head(data: bytes, pos: int, end: int, record: str) -> tuple[int, int]:
    need(pos, 2, end, record)
    opt_type, opt_len = OPT_HDR.unpack_from(data, pos)
    if opt_len < 4:
        raise LBMRError(f"option 0x{opt_type:02x} has len {opt_len} < 4", record=record, offset=pos)
    if pos + opt_len > end:
        raise LBMRError(f"option 0x{opt_type:02x} overruns its block", record=record, offset=pos)
    return opt_type, opt_len


# --- packet options (3.6) ---------------------------------------------------------------------


class SrcIdOption(FixedOption):
    """0x81 source id: the sending context's instance (8 bytes)."""

    __slots__ = ("src_id", "flags")
    opt_type = 0x81
    _struct = struct.Struct(">BBH8s")
    _layout = ("flags", "src_id")
    _raw = {"src_id": 8}

    def __init__(self, src_id: bytes, flags: int = 0) -> None:
        self.src_id = src_id
        self.flags = flags


class SrcTypeOption(FixedOption):
    """0x82 source type: SRC_TYPE_APPLICATION, SRC_TYPE_TNWGD (a DRO) or SRC_TYPE_STORE."""

    __slots__ = ("src_type", "flags")
    opt_type = 0x82
    _struct = struct.Struct(">BBBB")
    _layout = ("flags", "src_type")

    def __init__(self, src_type: int, flags: int = 0) -> None:
        self.src_type = src_type
        self.flags = flags


class VersionOption(FixedOption):
    """0x83 UM version of the sender; flags VERSION_FLAG_UME / _UMQ.  [I] the u32 encoding of
    the version is not defined by the dissector."""

    __slots__ = ("version", "flags")
    opt_type = 0x83
    _struct = struct.Struct(">BBHI")
    _layout = ("flags", "version")

    def __init__(self, version: int, flags: int = 0) -> None:
        self.version = version
        self.flags = flags


class LocalDomainOption(FixedOption):
    """0x84 the sender's local topic resolution domain id."""

    __slots__ = ("local_domain_id", "flags")
    opt_type = 0x84
    _struct = struct.Struct(">BBHI")
    _layout = ("flags", "local_domain_id")

    def __init__(self, local_domain_id: int, flags: int = 0) -> None:
        self.local_domain_id = local_domain_id
        self.flags = flags


class UnknownPacketOption(UnknownOption):
    """A packet option of a type outside 0x80-0x84."""

    __slots__ = ()


PacketOption = SrcIdOption | SrcTypeOption | VersionOption | LocalDomainOption | UnknownPacketOption

_PACKET_OPTIONS: dict[int, type[FixedOption] | type[NameOption]] = {
    cls.opt_type: cls for cls in (SrcIdOption, SrcTypeOption, VersionOption, LocalDomainOption)
}
_PACKET = _Chain(
    _PACKET_OPTIONS,
    UnknownPacketOption,
    "an LBMR packet option",
    PACKET_OPT_LEN,
    "packet length option not last",
)


def encode_packet_options(options: tuple[PacketOption, ...] | list[PacketOption]) -> bytes:
    """The packet-option trailer: ``options`` then the length record as the last 4 bytes."""
    parts = _encode_each(options, _PACKET)
    total = _LEN_RECORD_SIZE + sum(len(p) for p in parts)
    if total > MAX_OPTION_BLOCK:
        raise LocalProtocolError(f"packet options of {total} bytes exceed {MAX_OPTION_BLOCK}")
    parts.append(_LEN_RECORD.pack(PACKET_OPT_LEN, _LEN_RECORD_SIZE, total))
    return b"".join(parts)


def packet_options_start(data: bytes, body_start: int) -> int:
    """Where the trailer of a datagram with header bit 0x08 begins (the body ends there)."""
    size = len(data)
    need(body_start, _LEN_RECORD_SIZE, size, "packet options")
    opt_type, opt_len, total = _LEN_RECORD.unpack_from(data, size - _LEN_RECORD_SIZE)
    if opt_type != PACKET_OPT_LEN or opt_len != _LEN_RECORD_SIZE:
        raise LBMRError(
            "options bit set but the datagram does not end with a packet length option",
            record="packet options",
            offset=size - _LEN_RECORD_SIZE,
        )
    if total < _LEN_RECORD_SIZE or size - total < body_start:
        raise LBMRError(
            f"packet options total_len {total} does not fit the datagram",
            record="packet options",
            offset=size - _LEN_RECORD_SIZE,
        )
    start: int = size - total
    return start


def decode_packet_options(data: bytes, start: int) -> tuple[Any, ...]:
    """Decode the trailer from ``start`` up to (not including) the final length record."""
    return _decode_each(data, start, len(data) - _LEN_RECORD_SIZE, _PACKET, "packet options")


# --- TNWG options (ext type 0x05, 3.10) ---------------------------------------------------------


class TNWGCtxInstOption(FixedOption):
    """TNWG option 0x00: a context instance."""

    __slots__ = ("instance", "flags")
    opt_type = 0x00
    _struct = struct.Struct(">BBH8s")
    _layout = ("flags", "instance")
    _raw = {"instance": 8}

    def __init__(self, instance: bytes, flags: int = 0) -> None:
        self.instance = instance
        self.flags = flags


class TNWGAddressOption(FixedOption):
    """TNWG option 0x01: an address (port, IP)."""

    __slots__ = ("port", "ip", "flags")
    opt_type = 0x01
    _struct = struct.Struct(">BBHHH4s")
    _layout = ("flags", "port", None, "ip")
    _ips = frozenset({"ip"})

    def __init__(self, port: int, ip: str, flags: int = 0) -> None:
        self.port = port
        self.ip = ip
        self.flags = flags


class TNWGDomainOption(FixedOption):
    """TNWG option 0x02: a domain id."""

    __slots__ = ("domain_id", "flags")
    opt_type = 0x02
    _struct = struct.Struct(">BBHI")
    _layout = ("flags", "domain_id")

    def __init__(self, domain_id: int, flags: int = 0) -> None:
        self.domain_id = domain_id
        self.flags = flags


class TNWGNameOption(NameOption):
    """TNWG option 0x03: a name (NUL-terminated)."""

    __slots__ = ()
    opt_type = 0x03


class UnknownTNWGOption(UnknownOption):
    """A TNWG option of a type outside 0x00-0x03."""

    __slots__ = ()


TNWGOption = (
    TNWGCtxInstOption | TNWGAddressOption | TNWGDomainOption | TNWGNameOption | UnknownTNWGOption
)

_TNWG_OPTIONS: dict[int, type[FixedOption] | type[NameOption]] = {
    cls.opt_type: cls
    for cls in (TNWGCtxInstOption, TNWGAddressOption, TNWGDomainOption, TNWGNameOption)
}
_TNWG = _Chain(_TNWG_OPTIONS, UnknownTNWGOption, "a TNWGOption")


# --- remote context information options (ext type 0x07, 3.10) -----------------------------------


class RCtxAddressOption(FixedOption):
    """Remote context info option 0x01: domain id, IP and port of the context."""

    __slots__ = ("domain_id", "ip", "port", "flags")
    opt_type = 0x01
    _struct = struct.Struct(">BBHI4sHH")
    _layout = ("flags", "domain_id", "ip", "port", None)
    _ips = frozenset({"ip"})

    def __init__(self, domain_id: int, ip: str, port: int, flags: int = 0) -> None:
        self.domain_id = domain_id
        self.ip = ip
        self.port = port
        self.flags = flags


class RCtxInstanceOption(FixedOption):
    """Remote context info option 0x02: the context instance."""

    __slots__ = ("instance", "flags")
    opt_type = 0x02
    _struct = struct.Struct(">BBH8s")
    _layout = ("flags", "instance")
    _raw = {"instance": 8}

    def __init__(self, instance: bytes, flags: int = 0) -> None:
        self.instance = instance
        self.flags = flags


class RCtxODomainOption(FixedOption):
    """Remote context info option 0x03: the originating domain id."""

    __slots__ = ("domain_id", "flags")
    opt_type = 0x03
    _struct = struct.Struct(">BBHI")
    _layout = ("flags", "domain_id")

    def __init__(self, domain_id: int, flags: int = 0) -> None:
        self.domain_id = domain_id
        self.flags = flags


class RCtxNameOption(NameOption):
    """Remote context info option 0x04: the context name."""

    __slots__ = ()
    opt_type = 0x04


class UnknownRCtxOption(UnknownOption):
    """A remote context info option of a type outside 0x01-0x04."""

    __slots__ = ()


RCtxOption = (
    RCtxAddressOption | RCtxInstanceOption | RCtxODomainOption | RCtxNameOption | UnknownRCtxOption
)

_RCTX_OPTIONS: dict[int, type[FixedOption] | type[NameOption]] = {
    cls.opt_type: cls
    for cls in (RCtxAddressOption, RCtxInstanceOption, RCtxODomainOption, RCtxNameOption)
}
_RCTX = _Chain(_RCTX_OPTIONS, UnknownRCtxOption, "a RCtxOption")


def encode_tnwg_options(options: tuple[Any, ...] | list[Any]) -> bytes:
    return b"".join(_encode_each(options, _TNWG))


def decode_tnwg_options(data: bytes, pos: int, end: int) -> tuple[Any, ...]:
    return _decode_each(data, pos, end, _TNWG, "TNWG option")


def encode_rctx_options(options: tuple[Any, ...] | list[Any]) -> bytes:
    return b"".join(_encode_each(options, _RCTX))


def decode_rctx_options(data: bytes, pos: int, end: int) -> tuple[Any, ...]:
    return _decode_each(data, pos, end, _RCTX, "RCTXINFO option")


# The named constants (flag bits, type codes, limits) are part of the public API as well.
__all__ += sorted(name for name in dir() if name.isupper() and not name.startswith("_"))
