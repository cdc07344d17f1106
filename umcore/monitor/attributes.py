"""Monitoring attributes, and whole statistics messages: protobuf payload inside an lbmmon packet.

Theory of operation
-------------------
Every statistics message says who sent it and when: sender IPv4 address, timestamp (Unix
seconds), application ID (``monitor_appid``; a daemon's configured name), object ID (the
monitored context), process ID, 8-byte context instance and TRD domain ID.  UM carries these
twice: as entries of the lbmmon attribute block (:mod:`umcore.monitor.framing`) and, with the PB
format module, inside the payload as ``UMMonAttributes`` (field 1 of every ``*MonMsg``).
:class:`MonAttributes` holds them once and converts both ways.

:func:`encode_stats` copies the attributes into the message, serialises it and frames it with an
attribute block; :func:`decode_stats` does the reverse and picks the protobuf class from the packet
type (0-5 ``UMSMonMsg``, 6 ``UMPMonMsg``, 7 ``DROMonMsg``, 9 ``UMMonControlMsg``, 10
``SRSMonMsg``).  A payload from another format module (CSV, custom) is handed back raw.

Inferred, not documented (B3 "Uncertain"): which attribute entries accompany PB payloads and how
wide each value is.  We send FORMAT_MODULEID (2 bytes), SENDER_IPV4 (4 bytes, network order),
TIMESTAMP (8 bytes), APPSOURCEID (the ID's UTF-8 bytes, no NUL), OBJECTID and PROCESSID (8 bytes),
SOURCE (4 bytes), CTXINST (8 bytes, when known) and DOMAINID (4 bytes), all big-endian.  On input
integers of 1, 2, 4 or 8 bytes are accepted and trailing NULs are stripped from the ID, so a
sender that chose other widths still decodes; the payload's ``UMMonAttributes`` is what UM's own
PB deserialiser reads, so it is the authority when both are present.
"""

from __future__ import annotations

import ipaddress
from typing import Any

from google.protobuf.message import DecodeError, Message

from umcore.monitor.framing import (
    FORMAT_PB,
    MODULE_ID_PB,
    AttrType,
    LBMMonError,
    Packet,
    PacketType,
    decode_packet,
    encode_packet,
    module_format,
)
from umcore.monitor.pb import (
    dro_mon_pb2,
    srs_mon_pb2,
    um_mon_attributes_pb2,
    um_mon_control_pb2,
    ump_mon_pb2,
    ums_mon_pb2,
)

CONTEXT_INSTANCE_SIZE = 8
"""``LBM_CONTEXT_INSTANCE_BLOCK_SZ``: bytes in a context instance."""

SOURCE_NORMAL = 0
SOURCE_IM = 1

#: Protobuf class of the PB payload for each packet type.
MESSAGE_CLASSES: dict[int, type[Message]] = {
    PacketType.SOURCE: ums_mon_pb2.UMSMonMsg,
    PacketType.RECEIVER: ums_mon_pb2.UMSMonMsg,
    PacketType.EVENT_QUEUE: ums_mon_pb2.UMSMonMsg,
    PacketType.CONTEXT: ums_mon_pb2.UMSMonMsg,
    PacketType.RECEIVER_TOPIC: ums_mon_pb2.UMSMonMsg,
    PacketType.WILDCARD_RECEIVER: ums_mon_pb2.UMSMonMsg,
    PacketType.UMESTORE: ump_mon_pb2.UMPMonMsg,
    PacketType.GATEWAY: dro_mon_pb2.DROMonMsg,
    PacketType.CONTROL_MESSAGE: um_mon_control_pb2.UMMonControlMsg,
    PacketType.SRS: srs_mon_pb2.SRSMonMsg,
}

_INT_WIDTHS = (1, 2, 4, 8)
# Attribute entries holding an integer -> the MonAttributes slot (plain ints: a dict lookup per
# entry instead of IntEnum comparisons).
_INT_ATTRS: dict[int, str] = {
    int(AttrType.TIMESTAMP): "timestamp",
    int(AttrType.FORMAT_MODULEID): "module_id",
    int(AttrType.OBJECTID): "object_id",
    int(AttrType.PROCESSID): "process_id",
    int(AttrType.SOURCE): "source_flag",
    int(AttrType.DOMAINID): "domain_id",
}
_ATTR_NAMES = {int(t): t.name for t in AttrType}
_SENDER_IPV4 = int(AttrType.SENDER_IPV4)
_APPSOURCEID = int(AttrType.APPSOURCEID)
_CTXINST = int(AttrType.CTXINST)


class MonAttributes:
    """Who sent a statistics message, and when."""

    __slots__ = (
        "application_id",
        "context_instance",
        "domain_id",
        "module_id",
        "object_id",
        "process_id",
        "sender_ipv4",
        "source_flag",
        "timestamp",
    )

    def __init__(
        self,
        *,
        sender_ipv4: str = "0.0.0.0",
        timestamp: int = 0,
        application_id: str = "",
        object_id: int = 0,
        process_id: int = 0,
        context_instance: bytes = b"",
        domain_id: int = 0,
        source_flag: int = SOURCE_NORMAL,
        module_id: int = MODULE_ID_PB,
    ) -> None:
        self.sender_ipv4 = sender_ipv4
        self.timestamp = timestamp
        self.application_id = application_id
        self.object_id = object_id
        self.process_id = process_id
        self.context_instance = context_instance
        self.domain_id = domain_id
        self.source_flag = source_flag
        self.module_id = module_id

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, MonAttributes):
            return NotImplemented
        return all(getattr(self, s) == getattr(other, s) for s in self.__slots__)

    __hash__ = None  # type: ignore[assignment]  # mutable

    def __repr__(self) -> str:
        inner = ", ".join(f"{s}={getattr(self, s)!r}" for s in self.__slots__)
        return f"MonAttributes({inner})"

    # -- the attribute block --------------------------------------------------------------------

    def to_entries(self) -> list[tuple[int, bytes]]:
        """Attribute-block entries (see the module docstring for the widths we chose)."""
        entries = [
            (AttrType.FORMAT_MODULEID, self.module_id.to_bytes(2, "big")),
            (AttrType.SENDER_IPV4, ipaddress.IPv4Address(self.sender_ipv4).packed),
            (AttrType.TIMESTAMP, self.timestamp.to_bytes(8, "big")),
        ]
        if self.application_id:
            entries.append((AttrType.APPSOURCEID, self.application_id.encode("utf-8")))
        entries.append((AttrType.OBJECTID, self.object_id.to_bytes(8, "big")))
        entries.append((AttrType.PROCESSID, self.process_id.to_bytes(8, "big")))
        entries.append((AttrType.SOURCE, self.source_flag.to_bytes(4, "big")))
        if self.context_instance:
            entries.append((AttrType.CTXINST, bytes(self.context_instance)))
        entries.append((AttrType.DOMAINID, self.domain_id.to_bytes(4, "big")))
        return [(int(t), v) for t, v in entries]

    @classmethod
    def from_entries(cls, entries: list[tuple[int, bytes]]) -> MonAttributes:
        """Attributes from decoded block entries; unknown types are ignored.

        Raises only :class:`~umcore.monitor.framing.LBMMonError`.
        """
        attrs = cls(module_id=0)
        for attr_type, value in entries:
            name = _INT_ATTRS.get(attr_type)
            if name is not None:
                if len(value) not in _INT_WIDTHS:
                    raise LBMMonError(
                        f"{_ATTR_NAMES[attr_type]} of {len(value)} bytes", record="ATTR"
                    )
                setattr(attrs, name, int.from_bytes(value, "big"))
            elif attr_type == _SENDER_IPV4:
                if len(value) != 4:
                    raise LBMMonError(f"SENDER_IPV4 of {len(value)} bytes", record="ATTR")
                attrs.sender_ipv4 = f"{value[0]}.{value[1]}.{value[2]}.{value[3]}"
            elif attr_type == _APPSOURCEID:
                try:
                    attrs.application_id = value.rstrip(b"\0").decode("utf-8")
                except UnicodeDecodeError as exc:
                    raise LBMMonError("APPSOURCEID is not UTF-8", record="ATTR") from exc
            elif attr_type == _CTXINST:
                if len(value) != CONTEXT_INSTANCE_SIZE:
                    raise LBMMonError(f"CTXINST of {len(value)} bytes", record="ATTR")
                attrs.context_instance = value
        return attrs

    # -- UMMonAttributes ------------------------------------------------------------------------

    def to_pb(self, out: Any = None) -> Any:
        """Fill ``out`` (a ``UMMonAttributes``; a new one when None) and return it."""
        pb = um_mon_attributes_pb2.UMMonAttributes() if out is None else out
        pb.sender_ipv4_address = self.sender_ipv4
        pb.timestamp = self.timestamp
        pb.application_id = self.application_id
        pb.object_id = self.object_id
        pb.process_id = self.process_id
        pb.context_instance = bytes(self.context_instance)
        pb.domain_id = self.domain_id
        return pb

    @classmethod
    def from_pb(cls, pb: Any, *, source_flag: int = SOURCE_NORMAL) -> MonAttributes:
        """Attributes from a ``UMMonAttributes`` (the source flag lives elsewhere in PB)."""
        return cls(
            sender_ipv4=pb.sender_ipv4_address or "0.0.0.0",
            timestamp=pb.timestamp,
            application_id=pb.application_id,
            object_id=pb.object_id,
            process_id=pb.process_id,
            context_instance=bytes(pb.context_instance),
            domain_id=pb.domain_id,
            source_flag=source_flag,
            module_id=MODULE_ID_PB,
        )


class StatsMessage:
    """One received statistics message.

    ``message`` is the decoded protobuf (None when the payload came from a non-PB format module,
    e.g. legacy CSV; ``data`` holds the raw payload either way).  ``attributes`` are those of the
    attribute block, overlaid with the payload's ``UMMonAttributes`` when it has them.
    """

    __slots__ = ("attributes", "data", "message", "packet_type")

    def __init__(
        self,
        packet_type: int,
        attributes: MonAttributes,
        message: Message | None,
        data: bytes,
    ) -> None:
        self.packet_type = packet_type
        self.attributes = attributes
        self.message = message
        self.data = data

    def __repr__(self) -> str:
        kind = type(self.message).__name__ if self.message is not None else "raw"
        return f"StatsMessage({self.packet_type!r}, {self.attributes!r}, {kind})"


def encode_stats(packet_type: int, message: Message, attributes: MonAttributes) -> bytes:
    """Frame ``message`` for the statistics topic.

    ``attributes`` are written into the message's ``attributes`` field (the message is modified)
    and into the packet's attribute block.
    """
    if message.DESCRIPTOR.fields_by_name.get("attributes") is not None:
        attributes.to_pb(getattr(message, "attributes"))  # noqa: B009 - protobuf field
    return encode_packet(packet_type, message.SerializeToString(), attributes.to_entries())


def decode_stats(buf: bytes | bytearray | memoryview) -> StatsMessage:
    """Decode one packet from the statistics topic.  Raises only ``LBMMonError``."""
    packet: Packet = decode_packet(buf)
    attributes = MonAttributes.from_entries(list(packet.attributes))
    data = bytes(packet.data)
    cls = MESSAGE_CLASSES.get(packet.packet_type)
    pb_module = attributes.module_id == 0 or module_format(attributes.module_id) == FORMAT_PB
    if cls is None or not pb_module:
        return StatsMessage(packet.packet_type, attributes, None, data)
    message = cls()
    try:
        message.ParseFromString(data)
    except (DecodeError, ValueError, RecursionError) as exc:
        raise LBMMonError(
            f"{cls.__name__} payload does not parse: {exc}", record=cls.__name__, offset=None
        ) from exc
    if message.DESCRIPTOR.fields_by_name.get("attributes") is not None and message.HasField(
        "attributes"
    ):
        pb_attrs = getattr(message, "attributes")  # noqa: B009 - protobuf field
        merged = MonAttributes.from_pb(pb_attrs, source_flag=attributes.source_flag)
        merged.module_id = attributes.module_id or MODULE_ID_PB
        if not pb_attrs.sender_ipv4_address:
            merged.sender_ipv4 = attributes.sender_ipv4
        attributes = merged
    return StatsMessage(packet.packet_type, attributes, message, data)
