"""What a conversion worker runs: a batch of raw statistics messages to a connector's rows.

Theory of operation
-------------------
A worker (:mod:`daemons.mcs.workers`) is handed messages as the receiver delivered them --
``(bytes, source, arrival time)`` -- and calls its connector's converter (a factory named by
:attr:`~daemons.mcs.connectors.Connector.converter`, called once per worker).  A converter
returns ``(converted, counts, records, last_bad)``: what the connector's ``store`` takes, the
messages per :data:`DECODED` verdict, how many records were converted, the last unparsable
message's reason.  The verdicts are :class:`~umcore.monitor.collector.Collector`'s.

- :func:`parquet` needs every message's attributes (the Parquet key columns): :func:`records_of`
  takes them from the payload's ``UMMonAttributes`` (which the full decode gives precedence) when
  :func:`plain_frame` vouches for the framing, and builds the Arrow tables
  (:class:`~daemons.mcs.connectors.ParquetConverter`), handed over as Arrow IPC streams.
- :func:`sqlite` makes UM's JSON rows, which hold the protobuf message only: it checks a message's
  lbmmon framing with :func:`plain_frame` -- the attribute block walked in place, the format
  module read from it, nothing built -- parses the payload and writes its JSON.  Only a
  message :func:`plain_frame` does not vouch for (a malformed or unusual attribute block) goes
  through the Collector, whose verdict and words then count.

Either way the rows, records and counts are the Collector's (tests/mcs/test_convert.py compares
them on every kind of message and thousands of damaged ones).
"""

from __future__ import annotations

import struct
from collections.abc import Callable, Sequence
from typing import Any

from google.protobuf.message import DecodeError

from daemons.mcs.connectors import TABLES, ParquetConverter
from umcore.monitor.attributes import MESSAGE_CLASSES, MonAttributes, StatsMessage, decode_stats
from umcore.monitor.collector import KINDS, Collector, Record
from umcore.monitor.framing import (
    FORMAT_PB,
    HEADER_SIZE,
    MAX_ATTR_ENTRIES,
    SIGNATURE,
    AttrType,
    LBMMonError,
    PacketType,
)
from umcore.monitor.pbjson import to_json

__all__ = ["DECODED", "decode_batch", "json_rows", "parquet", "plain_frame", "records_of", "sqlite"]

#: The verdicts counted per batch: messages per kind, control, other formats (raw), unparsable.
DECODED = (*TABLES, "control", "raw", "bad")

Batch = Sequence[tuple[bytes, str, float]]
Converted = tuple[Any, dict[str, int], int, str]

_CONTROL = int(PacketType.CONTROL_MESSAGE)
_HDR = struct.Struct("!IHHHHHH").unpack_from  # the packet header and the block's own header
_ENTRY = struct.Struct("!HH").unpack_from
_MODULE = int(AttrType.FORMAT_MODULEID)
_APPSOURCEID = int(AttrType.APPSOURCEID)
# The attribute entries plain_frame accepts, by type: the value widths the attributes module
# accepts for them (anything else goes to the full decode).
_WIDTHS: dict[int, frozenset[int]] = {
    int(AttrType.SENDER_IPV4): frozenset({4}),
    int(AttrType.TIMESTAMP): frozenset({1, 2, 4, 8}),
    _MODULE: frozenset({1, 2, 4, 8}),
    int(AttrType.OBJECTID): frozenset({1, 2, 4, 8}),
    int(AttrType.PROCESSID): frozenset({1, 2, 4, 8}),
    int(AttrType.SOURCE): frozenset({1, 2, 4, 8}),
    int(AttrType.CTXINST): frozenset({8}),
    int(AttrType.DOMAINID): frozenset({1, 2, 4, 8}),
}


def plain_frame(data: bytes) -> tuple[int, int, int] | None:
    """``(packet type, format module id, the payload's offset)`` of a well-framed message whose attribute block holds
    only entries UM sends, each of a width the attributes module accepts -- one the full decode
    (:func:`~umcore.monitor.attributes.decode_stats`) takes apart without complaint; None for
    anything else (then the full decode decides)."""
    n = len(data)
    if n < HEADER_SIZE + 4:
        return None
    signature, ptype, block, length, _, count, block_len = _HDR(data, 0)
    if signature != SIGNATURE or n != HEADER_SIZE + block + length:
        return None
    if block == 0:
        return None  # no block: rare, the full decode handles it
    if block_len != block or count > MAX_ATTR_ENTRIES:
        return None
    end = HEADER_SIZE + block
    pos = HEADER_SIZE + 4
    module = 0
    widths = _WIDTHS
    for _ in range(count):
        if pos + 4 > end:
            return None
        atype, size = _ENTRY(data, pos)
        pos += 4
        if pos + size > end:
            return None
        ok = widths.get(atype)
        if ok is not None:
            if size not in ok:
                return None
            if atype == _MODULE:
                module = int.from_bytes(data[pos : pos + size], "big")
        elif atype == _APPSOURCEID:
            try:
                data[pos : pos + size].decode("utf-8")
            except UnicodeDecodeError:
                return None
        else:
            return None  # a type UM does not define: the full decode ignores it, we do not guess
        pos += size
    if pos != end:
        return None
    return ptype, module, end


def decode_batch(batch: Batch) -> tuple[list[Record], dict[str, int], str]:
    """Every message decoded in full: the records, the counts per verdict, the last bad one."""
    col = Collector(max_pending=len(batch) + 1)
    for data, source, now in batch:
        col.receive(data, source, now)
    records = col.take_batch(len(batch))
    return records, {k: col.counts[k] for k in DECODED}, col.last_error


def records_of(batch: Batch) -> tuple[list[Record], dict[str, int], str]:
    """:func:`decode_batch`'s records, counts and last bad one, the short way where
    :func:`plain_frame` vouches for the framing and the payload carries its ``UMMonAttributes``
    with a sender (as UM's PB format module sends them): the attributes are then the payload's
    alone (:func:`~umcore.monitor.attributes.decode_stats` gives them precedence), the
    attribute block is not taken apart."""
    records: list[Record] = []
    counts = dict.fromkeys(DECODED, 0)
    last_bad = ""
    classes = MESSAGE_CLASSES
    for data, source, now in batch:
        frame = plain_frame(data)
        if frame is not None:
            ptype, module, offset = frame
            cls = classes.get(ptype)
            kind = KINDS.get(ptype)
            if cls is None or not (module == 0 or (module >> 8) & 0xFF == FORMAT_PB):
                counts["control" if ptype == _CONTROL else "raw"] += 1
                continue
            if kind is not None and "attributes" in cls.DESCRIPTOR.fields_by_name:
                message = cls()
                try:
                    message.ParseFromString(data[offset:])
                except (DecodeError, ValueError, RecursionError):
                    pass  # the full decode below says why
                else:
                    pb = message.attributes  # type: ignore[attr-defined]
                    if message.HasField("attributes") and pb.sender_ipv4_address:
                        attributes = MonAttributes.from_pb(pb)
                        stats = StatsMessage(ptype, attributes, message, data[offset:])
                        records.append(Record(kind, stats, source, now))
                        counts[kind] += 1
                        continue
        more, verdict, bad = decode_batch([(data, source, now)])
        records.extend(more)
        for k, v in verdict.items():
            counts[k] += v
        if bad:
            last_bad = bad
    return records, counts, last_bad


def parquet() -> Callable[[Batch], Converted]:
    """The Parquet connector's converter factory: each table as an Arrow IPC stream (what
    crosses the pipe: written at memory speed, read back without a copy -- pickling the tables
    instead cost the daemon's process about half a decode per message)."""
    import pyarrow as pa

    tables = ParquetConverter()

    def convert(batch: Batch) -> Converted:
        records, counts, last_bad = records_of(batch)
        out = []
        for kind, date, table in tables(records):
            sink = pa.BufferOutputStream()
            with pa.ipc.new_stream(sink, table.schema) as stream:
                stream.write_table(table)
            out.append((kind, date, sink.getvalue()))
        return out, counts, len(records), last_bad

    return convert


def sqlite() -> Callable[[Batch], Converted]:
    """The SQLite connector's converter factory: UM's JSON rows by table."""
    return json_rows


def json_rows(batch: Batch) -> Converted:
    """UM's JSON rows of ``batch``, by table (module docstring)."""
    rows: dict[str, list[tuple[str]]] = {}
    counts = dict.fromkeys(DECODED, 0)
    last_bad = ""
    classes = MESSAGE_CLASSES
    stored = 0
    for data, source, now in batch:
        frame = plain_frame(data)
        if frame is None:  # the Collector's verdict
            records, verdict, bad = decode_batch([(data, source, now)])
            for k, v in verdict.items():
                counts[k] += v
            if bad:
                last_bad = bad
            for r in records:
                rows.setdefault(TABLES[r.kind], []).append((r.json,))
                stored += 1
            continue
        ptype, module, offset = frame
        cls = classes.get(ptype)
        kind = KINDS.get(ptype)
        if cls is None or not (module == 0 or (module >> 8) & 0xFF == FORMAT_PB):
            counts["control" if ptype == _CONTROL else "raw"] += 1
            continue
        message = cls()
        try:
            message.ParseFromString(data[offset:])
        except (DecodeError, ValueError, RecursionError):
            try:  # the decode's own words
                decode_stats(data)
                reason = "payload does not parse"
            except LBMMonError as exc:
                reason = str(exc)
            counts["bad"] += 1
            last_bad = f"from {source}: {reason}"
            continue
        if kind is None:
            counts["control" if ptype == _CONTROL else "raw"] += 1
            continue
        rows.setdefault(TABLES[kind], []).append((to_json(message),))
        counts[kind] += 1
        stored += 1
    return rows, counts, stored, last_bad
