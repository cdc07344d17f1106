"""Statistics messages as text (UM's lbmmon example output) and as JSON lines.

Theory of operation
-------------------
:func:`format_text` renders one decoded :class:`~umcore.monitor.attributes.StatsMessage` the way
UM's ``lbmmon`` example prints it (dro-monitoring-config.md B7):

- a blank line, then a header ``<Title>[ from <appid>][ at <sender IP>][, process ID=<hex>]
  [, object ID=<hex>][, context instance=<16 hex>][, domain ID=<n>][, sent <ctime>]``; context
  instance and domain ID only for context, transport, receiver-topic, wildcard and Store
  records;
- for library statistics, one line per field: a TAB, the label padded to the longest label of
  its record, ``: `` and the value in unsigned decimal (NAK recovery times suffixed ``ms``,
  event-queue times ``us``); transport records first print ``Source:`` and ``Transport:``;
- for daemon statistics (Store, DRO, SRS; also any message type we have no table for) every
  field that is set, nested messages indented by one more TAB (lbmmon's own DRO/Store printers
  are long hand-written walks of their C structures; a walk of the protobuf is the same idea and
  covers the SRS, which the example predates).

:func:`format_json` renders the same message as one JSON object on one line: the packet type's
name, the attributes, and the protobuf in canonical JSON (lowerCamelCase names, 64-bit integers
as strings, enums by name, default values included: the MCS conventions of B5).  Both functions
are pure; printing is the tool's business (:mod:`umcore.tools.lbmmon`).
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterator, Sequence
from typing import Any

from google.protobuf.descriptor import FieldDescriptor
from google.protobuf.json_format import MessageToDict

from umcore.monitor.attributes import SOURCE_IM, MonAttributes, StatsMessage
from umcore.monitor.framing import PacketType

__all__ = ["format_json", "format_text", "format_unframed_json", "title"]

MAX_DEPTH = 10
"""Deepest nesting indented with TABs (lbmmon keeps an 11-entry table of TAB strings)."""

# -- label tables: (protobuf field, label, unit suffix) ------------------------------------------

Table = Sequence[tuple[str, str, str]]

CONTEXT_TABLE: Table = (
    ("tr_dgrams_sent", "Topic resolution datagrams sent", ""),
    ("tr_bytes_sent", "Topic resolution datagram bytes sent", ""),
    ("tr_dgrams_rcved", "Topic resolution datagrams received", ""),
    ("tr_bytes_rcved", "Topic resolution datagram bytes received", ""),
    ("tr_dgrams_dropped_ver", "Topic resolution datagrams dropped (version)", ""),
    ("tr_dgrams_dropped_type", "Topic resolution datagrams dropped (type)", ""),
    ("tr_dgrams_dropped_malformed", "Topic resolution datagrams dropped (malformed)", ""),
    ("tr_dgrams_send_failed", "Topic resolution send failures", ""),
    ("tr_src_topics", "Topics in source topic map", ""),
    ("tr_rcv_topics", "Topics in receiver topic map", ""),
    ("tr_rcv_unresolved_topics", "Unresolved topics in receiver topic map", ""),
    ("lbtrm_unknown_msgs_rcved", "Unknown LBT-RM datagrams received", ""),
    ("lbtru_unknown_msgs_rcved", "Unknown LBT-RU datagrams received", ""),
    ("send_blocked", "Number of times message send blocked", ""),
    ("send_would_block", "Number of times message send returned EWOULDBLOCK", ""),
    ("resp_blocked", "Number of times response send blocked", ""),
    ("resp_would_block", "Number of times response send returned EWOULDBLOCK", ""),
    ("uim_dup_msgs_rcved", "Number of duplicate UIM messages dropped", ""),
    ("uim_msgs_no_stream_rcved", "Number of UIM messages received without stream info", ""),
    ("fragments_lost", "Number of data message fragments lost", ""),
    ("fragments_unrecoverably_lost", "Number of data message fragments unrecoverably lost", ""),
    ("rcv_cb_svc_time_min", "Receiver callbacks min service time (microseconds)", ""),
    ("rcv_cb_svc_time_max", "Receiver callbacks max service time (microseconds)", ""),
    ("rcv_cb_svc_time_mean", "Receiver callbacks mean service time (microseconds)", ""),
)


def _reliable_receiver(t: str, *, sid: bool) -> Table:
    rows = [
        ("msgs_rcved", f"{t} datagrams received", ""),
        ("bytes_rcved", f"{t} datagram bytes received", ""),
        ("nak_pckts_sent", f"{t} NAK packets sent", ""),
        ("naks_sent", f"{t} NAKs sent", ""),
        ("lost", f"Lost {t} datagrams detected", ""),
        ("ncfs_ignored", "NCFs received (ignored)", ""),
        ("ncfs_shed", "NCFs received (shed)", ""),
        ("ncfs_rx_delay", "NCFs received (retransmit delay)", ""),
        ("ncfs_unknown", "NCFs received (unknown)", ""),
        ("nak_stm_min", "Loss recovery minimum time", "ms"),
        ("nak_stm_mean", "Loss recovery mean time", "ms"),
        ("nak_stm_max", "Loss recovery maximum time", "ms"),
        ("nak_tx_min", "Minimum transmissions per individual NAK", ""),
        ("nak_tx_mean", "Mean transmissions per individual NAK", ""),
        ("nak_tx_max", "Maximum transmissions per individual NAK", ""),
        ("duplicate_data", f"Duplicate {t} datagrams received", ""),
        ("unrecovered_txw", f"{t} datagrams unrecoverable (window advance)", ""),
        ("unrecovered_tmo", f"{t} datagrams unrecoverable (NAK generation expiration)", ""),
        ("lbm_msgs_rcved", f"{t} LBM messages received", ""),
        ("lbm_msgs_no_topic_rcved", f"{t} LBM messages received with uninteresting topic", ""),
        ("lbm_reqs_rcved", f"{t} LBM requests received", ""),
        ("dgrams_dropped_size", f"{t} datagrams dropped (size)", ""),
        ("dgrams_dropped_type", f"{t} datagrams dropped (type)", ""),
        ("dgrams_dropped_version", f"{t} datagrams dropped (version)", ""),
        ("dgrams_dropped_hdr", f"{t} datagrams dropped (hdr)", ""),
    ]
    if sid:
        rows.append(("dgrams_dropped_sid", f"{t} datagrams dropped (SID)", ""))
    rows.append(("dgrams_dropped_other", f"{t} datagrams dropped (other)", ""))
    if not sid:
        rows.append(("out_of_order", f"{t} datagrams received out of order", ""))
    return tuple(rows)


RECEIVER_TABLES: dict[str, Table] = {
    "tcp": (
        ("bytes_rcved", "LBT-TCP bytes received", ""),
        ("lbm_msgs_rcved", "LBM messages received", ""),
        ("lbm_msgs_no_topic_rcved", "LBM messages received with uninteresting topic", ""),
        ("lbm_reqs_rcved", "LBM requests received", ""),
    ),
    "lbtrm": _reliable_receiver("LBT-RM", sid=False),
    "lbtru": _reliable_receiver("LBT-RU", sid=True),
    "lbtipc": (
        ("msgs_rcved", "LBT-IPC datagrams received", ""),
        ("bytes_rcved", "LBT-IPC datagram bytes received", ""),
        ("lbm_msgs_rcved", "LBT-IPC LBM messages received", ""),
        ("lbm_msgs_no_topic_rcved", "LBT-IPC LBM messages received with uninteresting topic", ""),
        ("lbm_reqs_rcved", "LBT-IPC LBM requests received", ""),
    ),
    "lbtsmx": (
        ("msgs_rcved", "LBT-SMX datagrams received", ""),
        ("bytes_rcved", "LBT-SMX datagram bytes received", ""),
        ("lbm_msgs_rcved", "LBT-SMX LBM messages received", ""),
        ("lbm_msgs_no_topic_rcved", "LBT-SMX LBM messages received with uninteresting topic", ""),
    ),
}

SOURCE_TABLES: dict[str, Table] = {
    "tcp": (
        ("num_clients", "Clients", ""),
        ("bytes_buffered", "Bytes buffered", ""),
    ),
    "lbtrm": (
        ("msgs_sent", "LBT-RM datagrams sent", ""),
        ("bytes_sent", "LBT-RM datagram bytes sent", ""),
        ("txw_msgs", "LBT-RM datagrams in transmission window", ""),
        ("txw_bytes", "LBT-RM datagram bytes in transmission window", ""),
        ("nak_pckts_rcved", "LBT-RM NAK packets received", ""),
        ("naks_rcved", "LBT-RM NAKs received", ""),
        ("naks_ignored", "LBT-RM NAKs ignored", ""),
        ("naks_shed", "LBT-RM NAKs shed", ""),
        ("naks_rx_delay_ignored", "LBT-RM NAKs ignored (retransmit delay)", ""),
        ("rxs_sent", "LBT-RM retransmission datagrams sent", ""),
        ("rctlr_data_msgs", "LBT-RM datagrams queued by rate control", ""),
        ("rctlr_rx_msgs", "LBT-RM retransmission datagrams queued by rate control", ""),
        ("rx_bytes_sent", "LBT-RM retransmission datagram bytes sent", ""),
    ),
    "lbtru": (
        ("msgs_sent", "LBT-RU datagrams sent", ""),
        ("bytes_sent", "LBT-RU datagram bytes sent", ""),
        ("nak_pckts_rcved", "LBT-RU NAK packets received", ""),
        ("naks_rcved", "LBT-RU NAKs received", ""),
        ("naks_ignored", "LBT-RU NAKs ignored", ""),
        ("naks_shed", "LBT-RU NAKs shed", ""),
        ("naks_rx_delay_ignored", "LBT-RU NAKs ignored (retransmit delay)", ""),
        ("rxs_sent", "LBT-RU retransmission datagrams sent", ""),
        ("num_clients", "Clients", ""),
        ("rx_bytes_sent", "LBT-RU retransmission datagram bytes sent", ""),
    ),
    "lbtipc": (
        ("num_clients", "Clients", ""),
        ("msgs_sent", "LBT-IPC datagrams sent", ""),
        ("bytes_sent", "LBT-IPC datagram bytes sent", ""),
    ),
    "lbtsmx": (
        ("num_clients", "Clients", ""),
        ("msgs_sent", "LBT-SMX datagrams sent", ""),
        ("bytes_sent", "LBT-SMX datagram bytes sent", ""),
    ),
}

TRANSPORT_NAMES = {
    "tcp": "TCP",
    "lbtrm": "LBT-RM",
    "lbtru": "LBT-RU",
    "lbtipc": "LBT-IPC",
    "lbtsmx": "LBT-SMX",
}


def _event_queue_table() -> Table:
    # (field prefix, plural, plural in mid-sentence, singular, has service times)
    cats = (
        ("data_msgs", "Data messages", "data messages", "Data message", True),
        ("resp_msgs", "Responses", "responses", "Response", True),
        (
            "topicless_im_msgs",
            "Topicless immediate messages",
            "topicless immediate messages",
            "Topicless immediate message",
            True,
        ),
        ("wrcv_msgs", "Wildcard messages", "wildcard messages", "Wildcard message", True),
        ("io_events", "I/O events", "I/O events", "I/O event", True),
        ("timer_events", "Timer events", "timer events", "Timer event", True),
        ("source_events", "Source events", "source events", "Source event", True),
        ("unblock_events", "Unblock events", "unblock events", "Unblock event", False),
        ("cancel_events", "Cancel events", "cancel events", "Cancel event", True),
        ("callback_events", "Callback events", "callback events", "Callback event", True),
        (
            "context_source_events",
            "Context source events",
            "context source events",
            "Context source event",
            True,
        ),
    )
    rows: list[tuple[str, str, str]] = []
    for field, plural, mid, singular, svc in cats:
        rows.append((field, f"{plural} currently enqueued", ""))
        rows.append((f"{field}_tot", f"Total {mid} enqueued", ""))
        if svc:
            for stat, word in (("min", "minimum"), ("mean", "mean"), ("max", "maximum")):
                rows.append((f"{field}_svc_{stat}", f"{singular} service {word} time", "us"))
    rows.append(("events", "Events currently enqueued", ""))
    rows.append(("events_tot", "Total events enqueued", ""))
    for stat, word in (("min", "minimum"), ("mean", "mean"), ("max", "maximum")):
        rows.append((f"age_{stat}", f"Event latency {word} time", "us"))
    return tuple(rows)


EVENT_QUEUE_TABLE: Table = _event_queue_table()


def _table_lines(msg: Any, table: Table) -> Iterator[str]:
    width = max(len(label) for _, label, _ in table)
    for field, label, unit in table:
        yield f"\t{label.ljust(width)}: {int(getattr(msg, field))}{unit}"


# -- headers -------------------------------------------------------------------------------------

_WITH_CONTEXT = frozenset(
    {
        PacketType.SOURCE,
        PacketType.RECEIVER,
        PacketType.CONTEXT,
        PacketType.RECEIVER_TOPIC,
        PacketType.WILDCARD_RECEIVER,
        PacketType.UMESTORE,
    }
)


def title(sm: StatsMessage) -> str:
    """The header title lbmmon prints for this message."""
    pt = sm.packet_type
    im = sm.attributes.source_flag == SOURCE_IM
    msg = sm.message
    if pt == PacketType.SOURCE:
        return "IM source statistics received" if im else "Source statistics received"
    if pt == PacketType.RECEIVER:
        return "IM receiver statistics received" if im else "Receiver statistics received"
    if pt == PacketType.EVENT_QUEUE:
        return "Event queue statistics received"
    if pt == PacketType.CONTEXT:
        return "Context statistics received"
    if pt == PacketType.RECEIVER_TOPIC:
        return "Receiver topic statistics received"
    if pt == PacketType.WILDCARD_RECEIVER:
        return "Wildcard receiver statistics received"
    if pt == PacketType.CONTROL_MESSAGE:
        return "Control message received"
    names: dict[int, str] = {
        PacketType.UMESTORE: "Store",
        PacketType.GATEWAY: "Gateway",
        PacketType.SRS: "SRS",
        PacketType.UMDS: "UMDS",
    }
    who = names.get(pt)
    if who is None:
        return f"Statistics of unknown type {int(pt)} received"
    if msg is not None:
        for field, what in (("configs", "configuration"), ("events", "events")):
            if msg.DESCRIPTOR.fields_by_name.get(field) is not None and msg.HasField(field):
                return f"{who} {what} received"
    return f"{who} statistics received"


def header(sm: StatsMessage, *, ctime: Callable[[float], str] = time.ctime) -> str:
    """The header line (without the leading blank line), as lbmmon's ``print_attributes``."""
    a: MonAttributes = sm.attributes
    parts = [title(sm)]
    if a.application_id:
        parts.append(f" from {a.application_id}")
    if a.sender_ipv4:
        parts.append(f" at {a.sender_ipv4}")
    parts.append(f", process ID={a.process_id:x}")
    parts.append(f", object ID={a.object_id:x}")
    if sm.packet_type in _WITH_CONTEXT:
        if a.context_instance:
            parts.append(f", context instance={bytes(a.context_instance).hex()}")
        parts.append(f", domain ID={a.domain_id}")
    if a.timestamp:
        parts.append(f", sent {ctime(a.timestamp)}")
    return "".join(parts)


# -- bodies --------------------------------------------------------------------------------------


def _transport_lines(ts: Any, tables: dict[str, Table]) -> Iterator[str]:
    yield f"Source: {ts.source_string}"
    kind = ts.WhichOneof("TransportType")
    yield f"Transport: {TRANSPORT_NAMES.get(kind or '', 'Unknown')}"
    if kind is not None:
        yield from _table_lines(getattr(ts, kind), tables[kind])


def _ums_lines(sm: StatsMessage) -> Iterator[str]:
    msg: Any = sm.message
    assert msg is not None
    stats, events = msg.stats, msg.events
    if msg.HasField("stats") and stats.HasField("context"):
        yield from _table_lines(stats.context, CONTEXT_TABLE)
    for ts in stats.source_transports:
        yield from _transport_lines(ts, SOURCE_TABLES)
    for ts in stats.receiver_transports:
        yield from _transport_lines(ts, RECEIVER_TABLES)
    for eq in stats.event_queues:
        yield from _table_lines(eq, EVENT_QUEUE_TABLE)
    for rt in events.receiver_topics:
        yield f"\tTopic       : {rt.topic}"
        if not rt.sources:
            yield "\tNo known sources"
        for s in rt.sources:
            yield f"\tSource      : {s.source_string}"
            yield f"\tOTID        : {s.otid}"
            yield f"\tTopic index : {s.topic_idx}"
            if s.timestamp_sec:
                state = "Created" if s.source_state == 1 else "Deleted"
                when = time.ctime(s.timestamp_sec)
                yield f"\tSource state: {state} on {when} ({s.timestamp_usec} usec)"
    for wr in events.wildcard_receivers:
        yield f"\tWildcard receiver pattern: {wr.pattern}"
        yield f"\tWildcard receiver type   : 0x{wr.type & 0xFFFFFFFF:x}"


def _value(field: FieldDescriptor, value: Any) -> str:
    if field.type == FieldDescriptor.TYPE_ENUM and field.enum_type is not None:
        ev = field.enum_type.values_by_number.get(value)
        return ev.name if ev is not None else str(value)
    if field.type == FieldDescriptor.TYPE_BYTES:
        return bytes(value).hex()
    if field.type == FieldDescriptor.TYPE_STRING:
        return str(value)
    if field.type == FieldDescriptor.TYPE_BOOL:
        return "true" if value else "false"
    return str(value)


def tree_lines(msg: Any, depth: int = 1) -> Iterator[str]:
    """Every set field of ``msg``, nested messages one TAB deeper (lbmmon's DRO style)."""
    tabs = "\t" * min(depth, MAX_DEPTH)
    for field, value in msg.ListFields():
        if field.name == "attributes" and depth == 1:
            continue  # printed in the header
        if field.type == FieldDescriptor.TYPE_MESSAGE:
            items = list(value) if _is_repeated(field) else [value]
            for i, item in enumerate(items):
                label = f"{field.name}[{i}]" if _is_repeated(field) else field.name
                yield f"{tabs}--- {label} ---"
                yield from tree_lines(item, depth + 1)
        elif _is_repeated(field):
            yield f"{tabs}{field.name} = [{', '.join(_value(field, v) for v in value)}]"
        else:
            yield f"{tabs}{field.name} = {_value(field, value)}"


def _is_repeated(field: FieldDescriptor) -> bool:
    rep = getattr(field, "is_repeated", None)
    if rep is not None:
        return bool(rep)
    return bool(getattr(field, "label", 0) == FieldDescriptor.LABEL_REPEATED)


def format_text(sm: StatsMessage, *, ctime: Callable[[float], str] = time.ctime) -> str:
    """The text lbmmon prints for one message: a blank line, the header, the body lines.

    The result ends with a newline.  A payload that is not protobuf (CSV, custom format
    modules) is shown as text when printable, else as hex.
    """
    lines = ["", header(sm, ctime=ctime)]
    msg = sm.message
    if msg is None:
        try:
            text = sm.data.decode("ascii")
            printable = text.isprintable() or all(c.isprintable() or c in "\r\n\t" for c in text)
        except UnicodeDecodeError:
            printable = False
        lines.append(f"\t(raw payload, format module 0x{sm.attributes.module_id:04x})")
        lines.append("\t" + (text if printable else sm.data.hex()))
    elif sm.packet_type in (
        PacketType.SOURCE,
        PacketType.RECEIVER,
        PacketType.EVENT_QUEUE,
        PacketType.CONTEXT,
        PacketType.RECEIVER_TOPIC,
        PacketType.WILDCARD_RECEIVER,
    ):
        lines.extend(_ums_lines(sm))
    else:
        lines.extend(tree_lines(msg))
    return "\n".join(lines) + "\n"


def _packet_name(pt: int) -> str:
    try:
        return PacketType(pt).name
    except ValueError:
        return str(int(pt))


def format_json(sm: StatsMessage) -> str:
    """One JSON object, on one line, for one message."""
    a = sm.attributes
    obj: dict[str, Any] = {
        "packetType": _packet_name(sm.packet_type),
        "attributes": {
            "senderIpv4Address": a.sender_ipv4,
            "timestamp": str(a.timestamp),
            "applicationId": a.application_id,
            "objectId": str(a.object_id),
            "processId": str(a.process_id),
            "contextInstance": bytes(a.context_instance).hex(),
            "domainId": a.domain_id,
            "sourceFlag": "SOURCE_IM" if a.source_flag == SOURCE_IM else "SOURCE_NORMAL",
            "formatModuleId": a.module_id,
        },
    }
    if sm.message is not None:
        obj["message"] = MessageToDict(sm.message, always_print_fields_with_no_presence=True)
    else:
        obj["raw"] = sm.data.hex()
    return json.dumps(obj, separators=(",", ":"), ensure_ascii=True, allow_nan=False)


MAX_JSON_DEPTH = 32
"""Deepest nesting we accept in an unframed JSON statistics message (the SRS's use two levels)."""


def _depth(obj: Any, level: int = 0) -> int:
    if level > MAX_JSON_DEPTH:
        return level
    if isinstance(obj, dict):
        return max((_depth(v, level + 1) for v in obj.values()), default=level)
    if isinstance(obj, list):
        return max((_depth(v, level + 1) for v in obj), default=level)
    return level


def format_unframed_json(data: bytes, source: str, *, as_json: bool = False) -> str | None:
    """The deprecated SRS JSON format travels as bare JSON text, not as an lbmmon packet
    (:mod:`umcore.monitor.jsonfmt`).  Its rendering, or None when ``data`` is not a JSON
    object.  ``source`` is the UM source string it came from (JSON carries no attributes)."""
    if data[:1] != b"{":
        return None
    try:
        obj = json.loads(data.decode("utf-8"))
    except (UnicodeDecodeError, ValueError, RecursionError):
        return None
    if not isinstance(obj, dict) or _depth(obj) > MAX_JSON_DEPTH:
        return None
    category = obj.get("monitorInfoCategory")
    if as_json:
        out = {"packetType": "JSON", "source": source, "message": obj}
        return json.dumps(out, separators=(",", ":"), ensure_ascii=True)
    lines = ["", f"JSON statistics received from {source}"]
    if isinstance(category, str):
        lines.append(f"\tmonitorInfoCategory = {category}")
    for key, value in obj.items():
        if key == "monitorInfoCategory":
            continue
        if isinstance(value, list) and all(isinstance(v, dict) and "name" in v for v in value):
            lines.append(f"\t--- {key} ---")
            for item in value:
                lines.append(f"\t\t{item.get('name')} = {item.get('value')}")
        else:
            lines.append(f"\t{key} = {json.dumps(value, ensure_ascii=True)}")
    return "\n".join(lines) + "\n"
