"""UM library statistics (automatic monitoring): samples, their ``UMSMonMsg`` messages, the clock.

Theory of operation
-------------------
Automatic monitoring (dro-monitoring-config.md B2) samples a context and its transport sessions
every ``monitor_interval`` seconds and publishes what it finds on the statistics topic.  This
module is the sans-IO half: no sockets, no event loop, no clock of its own.

- A :class:`ContextSample` is what the library counted at one instant: a mapping of
  ``UMSMonMsg.Stats.Context`` field names to values, and one :class:`TransportSample` per source
  transport session and per joined (receiver) transport session.  A transport sample names the
  ``TransportType`` oneof member that applies (``tcp``, ``lbtrm``, ``lbtru``, ``lbtipc``,
  ``lbtsmx``) and maps that member's field names to values.  Whoever samples (the asyncio glue
  in :mod:`umcore.monitor.automatic`, or a transport that counts more) fills these plain
  mappings; a field name the protobuf does not have is a programming error (AttributeError).
- :func:`encode_sample` turns a sample into lbmmon packets the way UM does (B2, observed in
  mcs_demo): **one message per object** -- a CONTEXT packet whose ``UMSMonMsg`` only has
  ``stats.context``, then a SOURCE packet per source transport session (only
  ``stats.source_transports[0]``), then a RECEIVER packet per receiver transport session (only
  ``stats.receiver_transports[0]``).  Every message carries the same attributes (application
  ID, object ID, process ID, timestamp...); the attribute block's SOURCE entry carries the
  session's normal/IM flag.
- :class:`SampleClock` says when the next sample is due (``next_timer``) and whether one is due
  now (``poll``): the first sample one interval after start, then every interval; a late poll
  samples once and restarts the period from there (no burst after a stall).

Values are clamped to the uint64 range the protobuf carries.  A "minimum" statistic with no
sample yet is :data:`NO_SAMPLE_MIN` (UM starts minimums at the largest unsigned long).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from umcore.monitor.attributes import SOURCE_IM, SOURCE_NORMAL, MonAttributes, encode_stats
from umcore.monitor.framing import PacketType
from umcore.monitor.pb import ums_mon_pb2

__all__ = [
    "CONTEXT_FIELDS",
    "NO_SAMPLE_MIN",
    "TRANSPORT_KINDS",
    "ContextSample",
    "SampleClock",
    "TransportSample",
    "context_message",
    "encode_sample",
    "transport_message",
]

UMSMonMsg = ums_mon_pb2.UMSMonMsg

UINT64_MAX = (1 << 64) - 1
NO_SAMPLE_MIN = UINT64_MAX
"""A minimum with no sample yet: UM's initial value (the largest unsigned long on 64-bit Linux)."""

CONTEXT_FIELDS: tuple[str, ...] = tuple(f.name for f in UMSMonMsg.Stats.Context.DESCRIPTOR.fields)
"""Every ``UMSMonMsg.Stats.Context`` field, in field-number order."""

TRANSPORT_KINDS: tuple[str, ...] = ("tcp", "lbtrm", "lbtru", "lbtipc", "lbtsmx")
"""The members of the ``TransportType`` oneof of source and receiver transport statistics."""

DIRECTION_SOURCE = "source"
DIRECTION_RECEIVER = "receiver"


class TransportSample:
    """The statistics of one transport session at one instant.

    ``direction`` is ``"source"`` (a session this context sends on) or ``"receiver"`` (a
    session it joined); ``kind`` is the oneof member (``"tcp"``...); ``source_string`` the
    session's UM source string without topic index (``TCP:10.0.0.1:14371:6f80ecc8``);
    ``flag`` SOURCE_NORMAL or SOURCE_IM; ``fields`` the member's field values.
    """

    __slots__ = ("direction", "fields", "flag", "kind", "source_string")

    def __init__(
        self,
        direction: str,
        kind: str,
        source_string: str,
        fields: Mapping[str, int],
        flag: int = SOURCE_NORMAL,
    ) -> None:
        if direction not in (DIRECTION_SOURCE, DIRECTION_RECEIVER):
            raise ValueError(f"direction {direction!r}: 'source' or 'receiver'")
        if kind not in TRANSPORT_KINDS:
            raise ValueError(f"transport kind {kind!r}: one of {', '.join(TRANSPORT_KINDS)}")
        if flag not in (SOURCE_NORMAL, SOURCE_IM):
            raise ValueError(f"source flag {flag}: 0 (normal) or 1 (IM)")
        self.direction = direction
        self.kind = kind
        self.source_string = source_string
        self.fields = fields
        self.flag = flag

    def __repr__(self) -> str:
        return (
            f"TransportSample({self.direction!r}, {self.kind!r}, {self.source_string!r}, "
            f"{dict(self.fields)!r}, flag={self.flag})"
        )


class ContextSample:
    """One context's statistics at one instant: context counters and transport sessions."""

    __slots__ = ("context", "transports")

    def __init__(
        self, context: Mapping[str, int], transports: Iterable[TransportSample] = ()
    ) -> None:
        self.context = context
        self.transports = list(transports)

    def __repr__(self) -> str:
        return f"ContextSample({dict(self.context)!r}, {self.transports!r})"


def _u64(value: int) -> int:
    v = int(value)
    if v < 0:
        return 0
    return v if v <= UINT64_MAX else UINT64_MAX


def _fill(target: Any, fields: Mapping[str, int]) -> None:
    for name, value in fields.items():
        setattr(target, name, _u64(value))


def context_message(fields: Mapping[str, int]) -> Any:
    """A ``UMSMonMsg`` holding only ``stats.context`` (attributes are added on encoding)."""
    msg = UMSMonMsg()
    ctx = msg.stats.context
    ctx.SetInParent()  # present even when every counter is 0
    _fill(ctx, fields)
    return msg


def transport_message(sample: TransportSample) -> Any:
    """A ``UMSMonMsg`` holding one source or receiver transport session."""
    msg = UMSMonMsg()
    ts: Any
    if sample.direction == DIRECTION_SOURCE:
        ts = msg.stats.source_transports.add()
    else:
        ts = msg.stats.receiver_transports.add()
    ts.source_string = sample.source_string
    ts.source_flag = sample.flag
    member = getattr(ts, sample.kind)
    member.SetInParent()  # selects the oneof member even when every counter is 0
    _fill(member, sample.fields)
    return msg


def encode_sample(sample: ContextSample, attributes: MonAttributes) -> list[bytes]:
    """The lbmmon packets of one sample: context first, then source, then receiver sessions.

    ``attributes`` is used as a template: its ``source_flag`` is set per transport session and
    restored afterwards.
    """
    saved_flag = attributes.source_flag
    out = [encode_stats(PacketType.CONTEXT, context_message(sample.context), attributes)]
    try:
        for direction, ptype in (
            (DIRECTION_SOURCE, PacketType.SOURCE),
            (DIRECTION_RECEIVER, PacketType.RECEIVER),
        ):
            for ts in sample.transports:
                if ts.direction != direction:
                    continue
                attributes.source_flag = ts.flag
                out.append(encode_stats(ptype, transport_message(ts), attributes))
    finally:
        attributes.source_flag = saved_flag
    return out


class SampleClock:
    """When to sample: every ``interval`` seconds from :meth:`start` (sans-IO)."""

    __slots__ = ("_due", "interval", "samples")

    def __init__(self, interval: float) -> None:
        if interval <= 0:
            raise ValueError(f"monitoring interval {interval} s: must be > 0")
        self.interval = float(interval)
        self._due: float | None = None
        #: Samples taken (polls that returned True).
        self.samples = 0

    def start(self, now: float) -> None:
        self._due = now + self.interval

    def stop(self) -> None:
        self._due = None

    def next_timer(self) -> float | None:
        """When :meth:`poll` should next be called; None when stopped."""
        return self._due

    def poll(self, now: float) -> bool:
        """True when a sample is due at ``now`` (the schedule then moves on one period)."""
        due = self._due
        if due is None or now < due:
            return False
        nxt = due + self.interval
        self._due = nxt if nxt > now else now + self.interval
        self.samples += 1
        return True
