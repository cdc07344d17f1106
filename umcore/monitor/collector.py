"""The Monitoring Collector Service's core: statistics messages in, rows for its connectors out.

Theory of operation
-------------------
UM's MCS subscribes to the statistics topic and writes every message it receives to a
*connector* (dro-monitoring-config.md B5).  This module is what happens between the two, with
no I/O (the daemon, ``daemons/mcs``, receives and writes):

- :meth:`Collector.receive` takes one message's bytes as the receiver delivered them (an lbmmon
  packet, :func:`~umcore.monitor.attributes.decode_stats`) and routes it by packet type to one
  of UM's four kinds (:data:`KINDS`): ``ums`` (the UM library: context, source, receiver,
  event queue, receiver topic and wildcard receiver packets, ``UMSMonMsg``), ``ump`` (the Store,
  ``UMPMonMsg``), ``dro`` (``DROMonMsg``) and ``srs`` (``SRSMonMsg``).  Control messages,
  payloads of other format modules (CSV), the SRS's deprecated bare JSON and anything that does
  not parse are counted (:attr:`Collector.counts`) and not stored.
- A stored message becomes a :class:`Record`: its kind, the message as protobuf's canonical
  JSON when a connector asks (:func:`canonical_json`: lowerCamelCase names, 64-bit integers as
  strings, enums by name, bytes in base64, fields at their default emitted, compact -- the
  form UM's SQLite rows have and its tools grep), its raw protobuf bytes, and the key columns
  an analytics table wants flat (time, application id, sender address, process id, object id, context instance,
  domain id, the publishing source's string).
- Records wait in a bounded queue (:data:`MAX_PENDING`); what does not fit is counted in
  ``dropped`` and never blocks the receiver.  The daemon takes them in batches
  (:meth:`Collector.take_batch`) for its writer thread.

For the Parquet connector the message is also kept as a nested structure whose Arrow type is
generated from the ``.proto`` descriptors (:func:`arrow_type`, :func:`message_row`: a message is
a struct, a repeated field a list, a ``oneof`` member a nullable field, an enum its name, a
64-bit integer an ``int64``/``uint64``).  pyarrow is imported only there: the SQLite connector
needs nothing beyond the standard library.
"""

from __future__ import annotations

import datetime as _dt
import functools
from collections import deque
from typing import Any

from google.protobuf.descriptor import FieldDescriptor
from google.protobuf.message import Message

from umcore.monitor.attributes import StatsMessage, decode_stats
from umcore.monitor.framing import LBMMonError, PacketType
from umcore.monitor.pbjson import to_json, to_row

__all__ = [
    "KEY_COLUMNS",
    "KINDS",
    "MAX_PENDING",
    "Collector",
    "Record",
    "arrow_type",
    "canonical_json",
    "kind_of",
    "message_row",
]

# Packet type -> UM's table kind (the MCS SQLite tables are <kind>monmsg).
KINDS: dict[int, str] = {
    PacketType.SOURCE: "ums",
    PacketType.RECEIVER: "ums",
    PacketType.EVENT_QUEUE: "ums",
    PacketType.CONTEXT: "ums",
    PacketType.RECEIVER_TOPIC: "ums",
    PacketType.WILDCARD_RECEIVER: "ums",
    PacketType.UMESTORE: "ump",
    PacketType.GATEWAY: "dro",
    PacketType.SRS: "srs",
}
# Records held for the writer at most: a minute of a busy network's statistics (a few hundred
# messages per second); beyond it the oldest work is the writer's, not the receiver's, to lose.
MAX_PENDING = 100_000
# The flat columns of every record (Parquet), in order.
KEY_COLUMNS = (
    "time",
    "application_id",
    "sender",
    "process_id",
    "object_id",
    "context_instance",
    "domain_id",
    "source",
)


def kind_of(packet_type: int) -> str | None:
    """UM's kind for a packet type (None: not stored)."""
    return KINDS.get(packet_type)


def canonical_json(message: Message) -> str:
    """``message`` as protobuf's canonical JSON, compact, every field without presence emitted
    (UM's MCS rows; :mod:`umcore.monitor.pbjson`)."""
    return to_json(message)


class Record:
    """One stored statistics message (see the module docstring)."""

    __slots__ = (
        "_json",
        "application_id",
        "context_instance",
        "domain_id",
        "kind",
        "message",
        "object_id",
        "process_id",
        "raw",
        "sender",
        "source",
        "time",
    )

    def __init__(self, kind: str, stats: StatsMessage, source: str, received: float) -> None:
        assert stats.message is not None
        a = stats.attributes
        self.kind = kind
        self.message = stats.message
        self._json: str | None = None
        self.raw = stats.data
        # the sender's timestamp (Unix seconds); the arrival time when it sent none
        self.time = float(a.timestamp) if a.timestamp else received
        self.application_id = a.application_id
        self.sender = a.sender_ipv4
        self.process_id = a.process_id
        self.object_id = a.object_id
        self.context_instance = a.context_instance.hex()
        self.domain_id = a.domain_id
        self.source = source

    @property
    def json(self) -> str:
        """The message as UM's JSON row (made when first asked: on the writer thread, and only
        by the connectors that store it)."""
        if self._json is None:
            self._json = canonical_json(self.message)
        return self._json

    @property
    def date(self) -> str:
        """The UTC date of :attr:`time` (the Parquet partition)."""
        return _utc_date(int(self.time // 86400))

    def keys(self) -> tuple[Any, ...]:
        """The :data:`KEY_COLUMNS` values, in order."""
        return (
            self.time,
            self.application_id,
            self.sender,
            self.process_id,
            self.object_id,
            self.context_instance,
            self.domain_id,
            self.source,
        )


@functools.lru_cache(maxsize=64)  # statistics arrive in time order: a few days at once at most
def _utc_date(day: int) -> str:
    """The UTC date (``YYYY-MM-DD``) of a day number since the Unix epoch."""
    return (_EPOCH + _dt.timedelta(days=day)).strftime("%Y-%m-%d")


_EPOCH = _dt.datetime(1970, 1, 1, tzinfo=_dt.UTC)


class Collector:
    """Statistics messages in, :class:`Record` batches out (module docstring)."""

    def __init__(self, *, max_pending: int = MAX_PENDING) -> None:
        self.max_pending = max_pending
        self._pending: deque[Record] = deque()
        #: messages received; stored per kind; not stored: control, other formats (raw),
        #: unparsable (bad); dropped because the queue was full.
        self.counts: dict[str, int] = {
            "received": 0,
            "ums": 0,
            "ump": 0,
            "dro": 0,
            "srs": 0,
            "control": 0,
            "raw": 0,
            "bad": 0,
            "dropped": 0,
        }
        #: the last unparsable message's reason (for the status page and the log)
        self.last_error = ""

    @property
    def pending(self) -> int:
        return len(self._pending)

    def receive(self, data: bytes, source: str, now: float) -> Record | None:
        """One message of the statistics topic; the record queued, or None (counted)."""
        c = self.counts
        c["received"] += 1
        try:
            stats = decode_stats(data)
        except LBMMonError as exc:
            c["bad"] += 1
            self.last_error = f"from {source}: {exc}"
            return None
        kind = KINDS.get(stats.packet_type)
        if kind is None or stats.message is None:
            c["control" if stats.packet_type == PacketType.CONTROL_MESSAGE else "raw"] += 1
            return None
        if len(self._pending) >= self.max_pending:
            c["dropped"] += 1
            return None
        rec = Record(kind, stats, source, now)
        c[kind] += 1
        self._pending.append(rec)
        return rec

    def take_batch(self, limit: int) -> list[Record]:
        """Up to ``limit`` queued records, oldest first."""
        n = min(limit, len(self._pending))
        pop = self._pending.popleft
        return [pop() for _ in range(n)]


# ---------------------------------------------------------------------------- Arrow (Parquet)

_SCALARS: dict[int, str] = {
    FieldDescriptor.TYPE_DOUBLE: "float64",
    FieldDescriptor.TYPE_FLOAT: "float32",
    FieldDescriptor.TYPE_INT64: "int64",
    FieldDescriptor.TYPE_SINT64: "int64",
    FieldDescriptor.TYPE_SFIXED64: "int64",
    FieldDescriptor.TYPE_UINT64: "uint64",
    FieldDescriptor.TYPE_FIXED64: "uint64",
    FieldDescriptor.TYPE_INT32: "int32",
    FieldDescriptor.TYPE_SINT32: "int32",
    FieldDescriptor.TYPE_SFIXED32: "int32",
    FieldDescriptor.TYPE_UINT32: "uint32",
    FieldDescriptor.TYPE_FIXED32: "uint32",
    FieldDescriptor.TYPE_BOOL: "bool_",
    FieldDescriptor.TYPE_STRING: "string",
    FieldDescriptor.TYPE_BYTES: "binary",
    FieldDescriptor.TYPE_ENUM: "string",
}


def _is_repeated(f: Any) -> bool:
    return bool(f.is_repeated)


def arrow_type(descriptor: Any) -> Any:
    """The Arrow struct type of a protobuf message type (fields in declaration order)."""
    import pyarrow as pa

    fields = []
    for f in descriptor.fields:
        if f.type == FieldDescriptor.TYPE_MESSAGE:
            t = arrow_type(f.message_type)
        else:
            t = getattr(pa, _SCALARS[f.type])()
        if _is_repeated(f):
            t = pa.list_(t)
        fields.append(pa.field(f.name, t, nullable=True))
    return pa.struct(fields)


def message_row(message: Message) -> dict[str, Any]:
    """``message`` as the Python value of its :func:`arrow_type`: every field present (a
    ``oneof`` member not set is None, other fields their default), enums by name
    (:func:`umcore.monitor.pbjson.to_row`, generated per type)."""
    return to_row(message)
