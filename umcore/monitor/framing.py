"""The lbmmon packet: how UM frames one statistics message on the monitoring topic.

Theory of operation
-------------------
Every UM message on the statistics topic (default ``/29west/statistics``) is one *lbmmon packet*
(dro-monitoring-config.md B3; UM's ``lbmmon.h``)::

    packet header   12 bytes, network byte order
        u32 mSignature              0x1b33041b
        u16 mType                   packet type: what the statistics describe (PacketType)
        u16 mAttributeBlockLength   length of the attribute block that follows (may be 0)
        u16 mDataLength             length of the statistics data after the attribute block
        u16 mFiller                 alignment; we write 0 and ignore it on input
    attribute block mAttributeBlockLength bytes (absent when 0)
        u16 mEntryCount             number of entries
        u16 mEntryLength            total length of the block, this 4-byte header included
        entries, back to back:      u16 type, u16 length, then ``length`` bytes of data
    statistics data mDataLength bytes: a serialised protobuf message for the PB format module,
                    text for the legacy CSV module.

This module is the sans-IO byte codec only: :func:`encode_packet` builds a packet from a type,
raw attribute entries and data; :func:`decode_packet` takes a received payload apart.  What the
attribute values mean (sender address, timestamp, application ID, ...) is
:mod:`umcore.monitor.attributes`' business.  The decoder raises only :class:`LBMMonError`, whatever
the input: a peer's bad packet costs that packet, never the receiver.

Both length fields are 16 bits wide, so a statistics payload over 65,535 bytes cannot be framed;
the encoder refuses it with :class:`~umcore.errors.LocalProtocolError` rather than writing a
length that lies.  (Our notes mention that large Store statistics exceed 64 KiB over the UDP
transport module; how UM frames such payloads is not documented.)
"""

from __future__ import annotations

import enum
import struct
from collections.abc import Iterable, Sequence

from umcore.errors import LocalProtocolError, RemoteProtocolError

SIGNATURE = 0x1B33041B
"""``LBMMON_PACKET_SIGNATURE``: the first four bytes of every packet (network order)."""

HEADER = struct.Struct("!IHHHH")
HEADER_SIZE = HEADER.size  # 12
ATTR_BLOCK_HEADER = struct.Struct("!HH")
ATTR_ENTRY_HEADER = struct.Struct("!HH")

MAX_FIELD_LENGTH = 0xFFFF
"""Largest attribute block or data length: both header fields are u16."""

MAX_ATTR_ENTRIES = 64
"""Most attribute entries we accept in one block.  UM defines nine attribute types (B3) and
sends each at most once; 64 leaves room for future types while bounding the work a hostile
packet can make us do (a 64 KiB block of empty entries would otherwise be 16,383 entries)."""


class PacketType(enum.IntEnum):
    """``LBMMON_PACKET_TYPE_*``: what the statistics in a packet describe."""

    SOURCE = 0
    RECEIVER = 1
    EVENT_QUEUE = 2
    CONTEXT = 3
    RECEIVER_TOPIC = 4
    WILDCARD_RECEIVER = 5
    UMESTORE = 6
    GATEWAY = 7  # the DRO
    UMDS = 8
    CONTROL_MESSAGE = 9
    SRS = 10


class AttrType(enum.IntEnum):
    """``LBMMON_ATTR_*``: the attribute entry types of the attribute block."""

    SENDER_IPV4 = 0
    TIMESTAMP = 1
    APPSOURCEID = 2  # the application ID string (monitor_appid)
    FORMAT_MODULEID = 3  # (format << 8) | version of the module that serialised the data
    OBJECTID = 4  # also LBMMON_ATTR_CONTEXTID
    PROCESSID = 5
    SOURCE = 6  # 0 = normal transport session, 1 = IM (MIM) transport session
    CTXINST = 7
    DOMAINID = 8


FORMAT_CSV = 1
"""``LBMMON_FORMAT_CSV_MODULE_ID``: the legacy comma-separated format module."""
FORMAT_PB = 2
"""``LBMMON_FORMAT_PB_MODULE_ID``: the protobuf format module."""
PB_VERSION = 1
"""``LBMMON_FORMAT_PB_VERSION_CURRENT`` in UM 6.17."""


def make_module_id(fmt: int, version: int) -> int:
    """``MAKE_MODULE_VERSION``: the u16 format-module ID, format in the high byte."""
    return ((fmt & 0xFF) << 8) | (version & 0xFF)


def module_format(module_id: int) -> int:
    """``MODULE_ID``: the format (1 CSV, 2 PB, >= 10 custom) a receiver dispatches on."""
    return (module_id >> 8) & 0xFF


MODULE_ID_PB = make_module_id(FORMAT_PB, PB_VERSION)  # 0x0201


class LBMMonError(RemoteProtocolError):
    """A received lbmmon packet (or its attribute block) cannot be decoded."""


class Packet:
    """One decoded lbmmon packet.

    ``packet_type`` is a :class:`PacketType` when known, else the raw number; ``attributes`` are
    the raw ``(type, value bytes)`` entries in wire order; ``data`` is the statistics payload (a
    zero-copy view of the input buffer).
    """

    __slots__ = ("attributes", "data", "packet_type")

    def __init__(
        self, packet_type: int, attributes: Sequence[tuple[int, bytes]], data: memoryview
    ) -> None:
        self.packet_type = packet_type
        self.attributes = attributes
        self.data = data

    def __repr__(self) -> str:
        return (
            f"Packet(packet_type={self.packet_type!r}, attributes={list(self.attributes)!r}, "
            f"data=<{len(self.data)} bytes>)"
        )


def encode_attribute_block(entries: Iterable[tuple[int, bytes]]) -> bytes:
    """The attribute block for ``entries`` (``b""`` when there are none)."""
    parts: list[bytes] = []
    count = 0
    length = ATTR_BLOCK_HEADER.size
    for attr_type, value in entries:
        if not 0 <= attr_type <= 0xFFFF:
            raise LocalProtocolError(f"attribute type {attr_type} does not fit in 16 bits")
        if len(value) > MAX_FIELD_LENGTH:
            raise LocalProtocolError(f"attribute {attr_type} value of {len(value)} bytes too long")
        parts.append(ATTR_ENTRY_HEADER.pack(attr_type, len(value)))
        parts.append(bytes(value))
        count += 1
        length += ATTR_ENTRY_HEADER.size + len(value)
    if count == 0:
        return b""
    if count > MAX_ATTR_ENTRIES:
        raise LocalProtocolError(f"{count} attribute entries; at most {MAX_ATTR_ENTRIES}")
    if length > MAX_FIELD_LENGTH:
        raise LocalProtocolError(f"attribute block of {length} bytes exceeds {MAX_FIELD_LENGTH}")
    return ATTR_BLOCK_HEADER.pack(count, length) + b"".join(parts)


def encode_packet(
    packet_type: int, data: bytes, attributes: Iterable[tuple[int, bytes]] = ()
) -> bytes:
    """One lbmmon packet: header, attribute block built from ``attributes``, then ``data``."""
    if not 0 <= packet_type <= 0xFFFF:
        raise LocalProtocolError(f"packet type {packet_type} does not fit in 16 bits")
    if len(data) > MAX_FIELD_LENGTH:
        raise LocalProtocolError(
            f"statistics data of {len(data)} bytes exceeds the u16 mDataLength ({MAX_FIELD_LENGTH})"
        )
    block = encode_attribute_block(attributes)
    return HEADER.pack(SIGNATURE, packet_type, len(block), len(data), 0) + block + bytes(data)


def decode_attribute_block(buf: bytes | memoryview, base: int = 0) -> list[tuple[int, bytes]]:
    """The ``(type, value)`` entries of an attribute block; ``base`` offsets error positions.

    The block must be exactly filled by its entries, and its own length and entry count must
    agree with what is found.
    """
    view = memoryview(buf)
    if len(view) == 0:
        return []
    if len(view) < ATTR_BLOCK_HEADER.size:
        raise LBMMonError("attribute block shorter than its header", record="ATTR", offset=base)
    count, length = ATTR_BLOCK_HEADER.unpack_from(view, 0)
    if length != len(view):
        raise LBMMonError(
            f"attribute block says {length} bytes but the packet header gives {len(view)}",
            record="ATTR",
            offset=base + 2,
        )
    if count > MAX_ATTR_ENTRIES:
        raise LBMMonError(
            f"{count} attribute entries (at most {MAX_ATTR_ENTRIES})", record="ATTR", offset=base
        )
    entries: list[tuple[int, bytes]] = []
    pos = ATTR_BLOCK_HEADER.size
    for _ in range(count):
        if pos + ATTR_ENTRY_HEADER.size > len(view):
            raise LBMMonError("attribute entry header truncated", record="ATTR", offset=base + pos)
        attr_type, value_len = ATTR_ENTRY_HEADER.unpack_from(view, pos)
        pos += ATTR_ENTRY_HEADER.size
        if pos + value_len > len(view):
            raise LBMMonError(
                f"attribute {attr_type} value of {value_len} bytes runs past the block",
                record="ATTR",
                offset=base + pos - 2,
            )
        entries.append((attr_type, bytes(view[pos : pos + value_len])))
        pos += value_len
    if pos != len(view):
        raise LBMMonError(
            f"{len(view) - pos} bytes left in the attribute block after {count} entries",
            record="ATTR",
            offset=base + pos,
        )
    return entries


# Known packet types by value (a dict lookup instead of constructing the enum per packet).
_PACKET_TYPES: dict[int, PacketType] = {int(t): t for t in PacketType}


def decode_packet(buf: bytes | bytearray | memoryview) -> Packet:
    """Take one received lbmmon packet apart.  Raises only :class:`LBMMonError`."""
    view = memoryview(buf)
    if view.ndim != 1 or view.itemsize != 1:
        view = view.cast("B")
    if len(view) < HEADER_SIZE:
        raise LBMMonError(f"{len(view)} bytes: shorter than the 12-byte header", record="HDR")
    signature, packet_type, block_len, data_len, _filler = HEADER.unpack_from(view, 0)
    if signature != SIGNATURE:
        raise LBMMonError(f"bad signature 0x{signature:08x}", record="HDR", offset=0)
    expected = HEADER_SIZE + block_len + data_len
    if len(view) != expected:
        raise LBMMonError(
            f"packet of {len(view)} bytes, header announces {expected}", record="HDR", offset=6
        )
    attributes = decode_attribute_block(view[HEADER_SIZE : HEADER_SIZE + block_len], HEADER_SIZE)
    ptype: int = _PACKET_TYPES.get(packet_type, packet_type)
    return Packet(ptype, attributes, view[HEADER_SIZE + block_len :])
