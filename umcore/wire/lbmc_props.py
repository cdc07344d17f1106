"""Message properties (inside the LBMC payload) and EXTOPT configuration options.

Theory of operation
-------------------
*Message properties* (wire-lbmc-ump.md section 8) are a typed key/value block placed at the
**end** of a data message's (reassembled) payload; its length travels in an APPHDR_CHAIN
element of type 6 (:meth:`ApphdrChain.for_properties`).  The block carries its own byte order,
announced by a magic: wire bytes ``ba da ac ab`` = little-endian block, ``ab ac da ba`` =
big-endian.  Layout: magic(4), num_fields(2), version/type(1), reserved(1), then num_fields
16-byte field headers (key_offset, value_offset, hash, type; offsets from the block start), then
the NUL-terminated keys and the values.  We write hash 0 (tshark does not check it; what real UM
puts there is unknown [inferred]).

*EXTOPT* headers (0xFE) carry options too long for one header, split into pieces of at most
``EXTOPT_MAX_PIECE`` bytes with the M flag on all but the last piece.  A CFGOPT option (subtype
0x0100) is a list of ``scope(1) parent(1) name\\0 value\\0`` entries: how an RPP source sends its
repository overrides with its registration.

Everything here is plain byte work; decoders raise only :class:`LBMCError`.
"""

from __future__ import annotations

import struct
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from umcore.errors import LocalProtocolError
from umcore.wire.lbmc_headers import (
    EXTOPT_CFGOPT,
    EXTOPT_MAX_PIECE,
    EXTOPT_MORE,
    ApphdrChain,
    Buffer,
    ExtOpt,
    LBMCError,
)

__all__ = [
    "PROP_BOOLEAN",
    "PROP_BYTE",
    "PROP_DOUBLE",
    "PROP_FLOAT",
    "PROP_INT",
    "PROP_LONG",
    "PROP_SHORT",
    "PROP_STRING",
    "CfgOpt",
    "Property",
    "decode_cfgopts",
    "decode_properties",
    "encode_cfgopts",
    "encode_properties",
    "extopt_headers",
    "reassemble_extopts",
    "split_properties",
]

PROP_BOOLEAN = 1
PROP_BYTE = 2
PROP_SHORT = 3
PROP_INT = 4
PROP_LONG = 5
PROP_FLOAT = 6
PROP_DOUBLE = 7
PROP_STRING = 8
# Fixed-size value formats (without byte-order prefix); strings are NUL-terminated.
_VALUE_FMT = {
    PROP_BOOLEAN: "B",
    PROP_BYTE: "b",
    PROP_SHORT: "h",
    PROP_INT: "i",
    PROP_LONG: "q",
    PROP_FLOAT: "f",
    PROP_DOUBLE: "d",
}
_MAGIC_LE = b"\xba\xda\xac\xab"
_MAGIC_BE = b"\xab\xac\xda\xba"
_PROP_HEAD = 8
_FIELD_HEAD = 16
# num_fields is a u16.
MAX_PROPERTIES = 0xFFFF


@dataclass(slots=True)
class Property:
    """One message property.  ``value``: bool (BOOLEAN), int (BYTE/SHORT/INT/LONG, signed),
    float (FLOAT/DOUBLE) or str (STRING)."""

    name: str
    prop_type: int
    value: bool | int | float | str


def encode_properties(props: Sequence[Property], *, big_endian: bool = False) -> bytes:
    """The properties block for ``props`` (UM's x86 senders write little-endian)."""
    if len(props) > MAX_PROPERTIES:
        raise LocalProtocolError(f"too many properties: {len(props)}")
    order = ">" if big_endian else "<"
    head = struct.Struct(order + "IIII")
    offset = _PROP_HEAD + _FIELD_HEAD * len(props)
    fields: list[bytes] = []
    data: list[bytes] = []
    try:
        for prop in props:
            key = prop.name.encode() + b"\0"
            if prop.prop_type == PROP_STRING:
                if not isinstance(prop.value, str):
                    raise LocalProtocolError(f"property {prop.name!r}: STRING needs a str")
                value = prop.value.encode() + b"\0"
            elif prop.prop_type in _VALUE_FMT:
                if isinstance(prop.value, str):
                    raise LocalProtocolError(f"property {prop.name!r}: numeric type needs a number")
                value = struct.pack(order + _VALUE_FMT[prop.prop_type], prop.value)
            else:
                raise LocalProtocolError(f"property {prop.name!r}: unknown type {prop.prop_type}")
            fields.append(head.pack(offset, offset + len(key), 0, prop.prop_type))
            data += (key, value)
            offset += len(key) + len(value)
    except (struct.error, UnicodeEncodeError) as exc:
        raise LocalProtocolError(f"cannot encode property: {exc}") from None
    magic = _MAGIC_BE if big_endian else _MAGIC_LE
    return b"".join([magic, struct.pack(order + "HBB", len(props), 0, 0), *fields, *data])


def _cstring(buf: Buffer, start: int, end: int) -> tuple[str, int]:
    raw = bytes(buf[start:end])
    nul = raw.find(b"\0")
    if nul < 0:
        raise LBMCError("unterminated string", record="LBMC properties", offset=start)
    try:
        return raw[:nul].decode(), start + nul + 1
    except UnicodeDecodeError:
        raise LBMCError("string is not UTF-8", record="LBMC properties", offset=start) from None


def decode_properties(block: Buffer) -> list[Property]:
    """The properties of a block built by :func:`encode_properties` (or real UM)."""
    n = len(block)
    if n < _PROP_HEAD:
        raise LBMCError("properties block too short", record="LBMC properties", offset=0)
    magic = bytes(block[:4])
    if magic == _MAGIC_LE:
        order = "<"
    elif magic == _MAGIC_BE:
        order = ">"
    else:
        raise LBMCError(f"bad properties magic {magic.hex()}", record="LBMC properties", offset=0)
    count = struct.unpack_from(order + "H", block, 4)[0]
    if _PROP_HEAD + _FIELD_HEAD * count > n:
        raise LBMCError(f"{count} fields do not fit", record="LBMC properties", offset=4)
    out = []
    for i in range(count):
        at = _PROP_HEAD + _FIELD_HEAD * i
        key_off, value_off, _hash, ptype = struct.unpack_from(order + "IIII", block, at)
        if key_off >= n or value_off >= n:
            raise LBMCError("property offset past block", record="LBMC properties", offset=at)
        name, _ = _cstring(block, key_off, n)
        value: bool | int | float | str
        try:
            if ptype == PROP_STRING:
                value, _ = _cstring(block, value_off, n)
            elif ptype == PROP_BOOLEAN:
                value = bool(block[value_off])
            elif ptype in _VALUE_FMT:
                value = struct.unpack_from(order + _VALUE_FMT[ptype], block, value_off)[0]
            else:
                raise LBMCError(
                    f"unknown property type {ptype}", record="LBMC properties", offset=at
                )
        except (struct.error, IndexError):
            raise LBMCError(
                "property value past block", record="LBMC properties", offset=at
            ) from None
        out.append(Property(name, ptype, value))
    return out


def split_properties(payload: bytes, chain: ApphdrChain | None) -> tuple[bytes, list[Property]]:
    """Split a (reassembled) payload into application data and properties, using the
    properties length from the message's APPHDR_CHAIN (None or no element: no properties).
    A length that does not fit the payload, or is too short for a block (0 included), is an
    :class:`LBMCError`."""
    proplen = chain.properties_length() if chain is not None else None
    if proplen is None:
        return payload, []
    if proplen > len(payload):
        raise LBMCError(
            f"proplen {proplen} exceeds payload {len(payload)}", record="LBMC properties"
        )
    cut = len(payload) - proplen
    return payload[:cut], decode_properties(payload[cut:])


# ============================================================================================
# EXTOPT
# ============================================================================================


@dataclass(slots=True)
class CfgOpt:
    """One configuration option in an EXTOPT CFGOPT: ``scope`` 1 source, 2 receiver,
    3 context, 4 wildcard receiver, 5 event queue, 6 connection factory, 7 destination, 8 HFX."""

    scope: int
    name: str
    value: str
    parent: int = 0


def encode_cfgopts(options: Iterable[CfgOpt]) -> bytes:
    """The CFGOPT option data (to be split by :func:`extopt_headers`)."""
    try:
        return b"".join(
            bytes((o.scope, o.parent)) + o.name.encode() + b"\0" + o.value.encode() + b"\0"
            for o in options
        )
    except (ValueError, UnicodeEncodeError) as exc:
        raise LocalProtocolError(f"cannot encode cfgopt: {exc}") from None


def decode_cfgopts(data: Buffer) -> list[CfgOpt]:
    """The entries of CFGOPT option data."""
    out = []
    pos, n = 0, len(data)
    while pos < n:
        if n - pos < 2:
            raise LBMCError("truncated cfgopt", record="LBMC EXTOPT", offset=pos)
        scope, parent = data[pos], data[pos + 1]
        name, pos = _cstring(data, pos + 2, n)
        value, pos = _cstring(data, pos, n)
        out.append(CfgOpt(scope, name, value, parent))
    return out


# EXTOPT fragment_offset is a u16: a reassembled option is at most 65535 + one piece long.
MAX_EXTOPT_DATA = 0xFFFF


def extopt_headers(
    data: bytes, *, opt_id: int = 0, subtype: int = EXTOPT_CFGOPT, flags: int = 0
) -> list[ExtOpt]:
    """Split option ``data`` into EXTOPT pieces for one message (M flag on all but the last)."""
    if len(data) > MAX_EXTOPT_DATA:
        raise LocalProtocolError(f"EXTOPT data too long: {len(data)}")
    pieces = [data[i : i + EXTOPT_MAX_PIECE] for i in range(0, len(data), EXTOPT_MAX_PIECE)] or [
        b""
    ]
    last = len(pieces) - 1
    return [
        ExtOpt(flags | (EXTOPT_MORE if i < last else 0), opt_id, subtype, i * EXTOPT_MAX_PIECE, p)
        for i, p in enumerate(pieces)
    ]


def reassemble_extopts(headers: Iterable[object]) -> list[tuple[int, int, bytes]]:
    """``(id, subtype, data)`` for every option in a message's headers (non-EXTOPT headers are
    skipped); pieces must arrive in order, starting at offset 0."""
    out: list[tuple[int, int, bytes]] = []
    parts: list[bytes] = []
    expect = 0
    for hdr in headers:
        if not isinstance(hdr, ExtOpt):
            continue
        if hdr.fragment_offset != expect:
            raise LBMCError(
                f"EXTOPT piece at offset {hdr.fragment_offset}, expected {expect}",
                record="LBMC EXTOPT",
            )
        parts.append(hdr.data)
        expect += len(hdr.data)
        if hdr.flags & EXTOPT_MORE:
            continue
        out.append((hdr.id, hdr.subtype, b"".join(parts)))
        parts, expect = [], 0
    if parts:
        raise LBMCError("EXTOPT option ends with the M flag set", record="LBMC EXTOPT")
    return out
