"""A daemon's statistics publisher (``<daemon-monitor>``): when, in which frame, to where.

Theory of operation
-------------------
UM's daemons (SRS, store, DRO) publish their statistics on a *daemon-monitor topic*
(``<daemon-monitor topic="...">``) through a UM source of a monitoring context of their own, in
*categories* (the SRS's SRS_STATS, CONFIG_OPTS, ...), each at its own publishing interval, and
answer *control requests* (a snapshot now, a new interval) sent as topicless unicast immediate
requests to that context's request port.  Only the content differs from daemon to daemon; this
module is the rest, so the store and the DRO get it as the SRS has it.

- :class:`MonitorSettings` is the daemon-independent part of the configuration (topic, format,
  intervals, the ``allow`` switches, ``<lbm-attributes>`` of the monitoring context).
- :class:`StatsContent` is what a daemon supplies: its categories, which are published at start,
  which of its events it queues, the lbmmon packet type of its pb messages, and a ``publish``
  method that builds one category's messages and hands them to the publisher's
  :meth:`~StatsPublisher.send_pb` / :meth:`~StatsPublisher.send_json`.
- :class:`StatsPublisher` is sans-IO (time comes in as ``now``; the wall clock is a callable the
  daemon passes): a :class:`~umcore.monitor.scheduler.PublishingScheduler` over the content's
  categories (``next_timer`` / ``handle_timer``), the framing (pb: the message is framed as an
  lbmmon packet with the attribute block, :func:`~umcore.monitor.attributes.encode_stats`; json:
  the text itself, with the "only changed statistics" filter the content may use), the bounded
  event queue (``MAX_QUEUED_EVENTS``, overflow counted in ``events_dropped``, never an error),
  and control requests (:meth:`~StatsPublisher.receive_control`: the daemon's responder answers,
  the publisher applies a snapshot or an interval to the categories it knows).  Nothing is
  published without a topic (trap 3).  Every message goes to a ``sink`` callable.
- :class:`StatsService` runs a publisher on the event loop: it opens the sink — a UM source on
  the topic (:class:`UMSink`, which also serves the control requests) or pyum's
  ``--monitor-file`` (:class:`FileSink`) — drives the timer, and closes it all.  A publisher
  that cannot start is logged and left out: the daemon does its work without statistics.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import socket
import struct
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any, Generic, Protocol, TypeVar

from umcore.aio.timer import CoreTimer
from umcore.monitor import jsonfmt
from umcore.monitor.attributes import MonAttributes, encode_stats
from umcore.monitor.control import ControlReply
from umcore.monitor.scheduler import PublishingScheduler

__all__ = [
    "MAX_QUEUED_EVENTS",
    "ControlReceiver",
    "ControlResponder",
    "FileSink",
    "MonitorSettings",
    "StatsContent",
    "StatsPublisher",
    "StatsService",
    "UMSink",
    "sender_address",
]

# Events waiting for the next publication of their category.  A reconnect storm of every client
# of a large TRD fits; beyond it events are counted (events_dropped), not queued.
MAX_QUEUED_EVENTS = 50_000
# Name of the monitoring context (the statistics source's context), as UM's daemons call it.
CONTEXT_NAME = "statsLbmContext"

Sink = Callable[[bytes], None]
E = TypeVar("E")
_LEN = struct.Struct("!I")


def sender_address(interface: str) -> str:
    """The dotted IPv4 of a daemon's interface (a host name is resolved; 0.0.0.0 if it fails)."""
    try:
        return socket.gethostbyname(interface)
    except OSError:
        return "0.0.0.0"


class MonitorSettings:
    """The daemon-independent part of ``<daemon-monitor>``.

    ``intervals`` maps a category's wire name to its interval in ms (absent: ``default_ms``; 0 is
    off); ``context_attributes`` are the monitoring context's attributes (``<lbm-attributes>``
    applied; None: factory defaults).
    """

    __slots__ = (
        "allow_config",
        "allow_snapshot",
        "application_id",
        "context_attributes",
        "default_ms",
        "format",
        "intervals",
        "publish_events",
        "topic",
    )

    def __init__(
        self,
        topic: str | None,
        *,
        format: str = "json",
        default_ms: int = 0,
        intervals: Mapping[str, int] | None = None,
        publish_events: bool = False,
        allow_snapshot: bool = False,
        allow_config: bool = False,
        application_id: str = "",
        context_attributes: Any = None,
    ) -> None:
        if format not in ("pb", "json"):
            raise ValueError(f"monitor format {format!r} is neither pb nor json")
        self.topic = topic
        self.format = format
        self.default_ms = default_ms
        self.intervals = dict(intervals or {})
        self.publish_events = publish_events
        self.allow_snapshot = allow_snapshot
        self.allow_config = allow_config
        self.application_id = application_id
        self.context_attributes = context_attributes


class StatsContent(Protocol[E]):
    """What one daemon publishes (see the module docstring)."""

    @property
    def packet_type(self) -> int:
        """The lbmmon packet type of this daemon's pb messages."""
        ...

    @property
    def categories(self) -> Sequence[str]:
        """Every category, in publication order (wire names)."""
        ...

    @property
    def publish_at_start(self) -> Sequence[str]:
        """Categories also published at once at start (configuration, typically)."""
        ...

    def accepts(self, event: E) -> bool:
        """True for an event that goes to the queue (when events are published at all)."""
        ...

    def publish(self, pub: StatsPublisher[E], category: str, snapshot: bool) -> None:
        """Build ``category``'s messages now and hand them to ``pub.send_pb``/``send_json``."""
        ...


class ControlResponder(Protocol):
    """Answers a control request payload (:class:`umcore.monitor.control.ControlHandler`)."""

    def handle(self, payload: bytes | bytearray | memoryview) -> ControlReply: ...


class ControlReceiver(Protocol):
    """What answers a control request arriving at the monitoring context: a
    :class:`StatsPublisher`, or a daemon's own dispatcher over several (umestored's)."""

    def receive_control(self, payload: bytes | bytearray | memoryview, now: float) -> bytes: ...


class StatsPublisher(Generic[E]):
    """Publishes one daemon's statistics through ``sink``; sans-IO (module docstring)."""

    def __init__(
        self,
        settings: MonitorSettings,
        content: StatsContent[E],
        sink: Sink,
        control: ControlResponder,
        *,
        now: float,
        wall_clock: Callable[[], float],
        sender_ipv4: str,
        pid: int = 0,
        max_queued_events: int = MAX_QUEUED_EVENTS,
    ) -> None:
        self.settings = settings
        self.content = content
        self.sink = sink
        self.control_handler = control
        self.wall_clock = wall_clock
        self.sender_ipv4 = sender_ipv4
        self.pid = pid
        self.max_queued_events = max_queued_events
        self.pb = settings.format == "pb"
        self.enabled = bool(settings.topic)
        self.scheduler = PublishingScheduler(
            settings.intervals,
            default_ms=settings.default_ms,
            categories=content.categories,
            publish_at_start=content.publish_at_start,
        )
        self._known = frozenset(content.categories)
        #: The JSON "only changed statistics" filter, for the content's stats categories.
        self.changes = jsonfmt.ChangeFilter()
        self._events: list[E] = []
        #: Messages handed to the sink, and events not queued (queue full).
        self.published = 0
        self.events_dropped = 0
        if self.enabled:
            self.scheduler.start(now)

    @property
    def wants_events(self) -> bool:
        return self.enabled and self.settings.publish_events

    # ------------------------------------------------------------------------------ inputs

    def receive_events(self, events: Iterable[E]) -> None:
        """Queue the events the content accepts, up to the bound; the rest are counted."""
        if not self.wants_events:
            return
        for ev in events:
            if not self.content.accepts(ev):
                continue
            if len(self._events) >= self.max_queued_events:
                self.events_dropped += 1
                continue
            self._events.append(ev)

    def take_events(self) -> list[E]:
        """The queued events, oldest first; the queue is empty afterwards (for ``publish``)."""
        events, self._events = self._events, []
        return events

    def receive_control(self, payload: bytes | bytearray | memoryview, now: float) -> bytes:
        """Answer a control request (UIM request payload) and apply it; the response text.

        A request without a category applies to every category of this daemon; a snapshot or an
        interval for a category this daemon does not have is answered and ignored."""
        reply = self.control_handler.handle(payload)
        if not reply.ok:
            return reply.payload()
        every = reply.request is not None and reply.request.category is None
        if reply.snapshot:
            if every:
                self.scheduler.request_snapshot(None)
            else:
                cats = [str(c) for c in reply.snapshot if str(c) in self._known]
                if cats:
                    self.scheduler.request_snapshot(cats)
        if reply.interval is not None:
            targets, ms = reply.interval
            if every:
                self.scheduler.set_interval(None, ms, now)
            else:
                for c in targets:
                    if str(c) in self._known:
                        self.scheduler.set_interval(str(c), ms, now)
        return reply.payload()

    def handle_timer(self, now: float) -> None:
        if not self.enabled:
            return
        for item in self.scheduler.poll(now):
            self.publish(item.category, snapshot=item.snapshot)

    def next_timer(self) -> float | None:
        if not self.enabled:
            return None
        return self.scheduler.next_timer()

    def publish(self, category: str, *, snapshot: bool = False) -> None:
        """Publish one category now (what a scheduler tick or a snapshot request does)."""
        self.content.publish(self, category, snapshot)

    # ----------------------------------------------------------------------------- outputs

    def attributes(self) -> MonAttributes:
        """The attribute block of a message sent now."""
        return MonAttributes(
            sender_ipv4=self.sender_ipv4,
            timestamp=int(self.wall_clock()),
            application_id=self.settings.application_id,
            process_id=self.pid,
        )

    def send_pb(self, msg: Any) -> None:
        """Frame a protobuf message (lbmmon packet of the content's type) and publish it."""
        self.sink(encode_stats(self.content.packet_type, msg, self.attributes()))
        self.published += 1

    def send_json(self, obj: dict[str, Any]) -> None:
        """Publish a JSON envelope (:mod:`umcore.monitor.jsonfmt`) as its text."""
        self.sink(jsonfmt.dumps(obj))
        self.published += 1


# --------------------------------------------------------------------------------- sinks


class UMSink:
    """Statistics published over UM: a monitoring context (the settings' context attributes) and
    one source on the topic.  The context also takes the control requests: topicless UIM requests
    to its request port, answered by :meth:`StatsPublisher.receive_control`
    (:meth:`serve_control`)."""

    def __init__(self, log: logging.Logger) -> None:
        self.log = log
        self.ctx: Any = None
        self.source: Any = None
        #: Messages the source refused (would block, session closed).
        self.dropped = 0
        #: Topicless immediate messages that were not requests (nothing to answer).
        self.not_requests = 0

    async def open(self, settings: MonitorSettings) -> None:
        from umcore.api import Context

        self.ctx = await Context.create(settings.context_attributes, name=CONTEXT_NAME)
        self.source = await self.ctx.create_source(settings.topic)

    def serve_control(
        self,
        publisher: ControlReceiver,
        now: Callable[[], float],
        rearm: Callable[[], None],
    ) -> None:
        """Answer control requests arriving at the monitoring context's request port."""

        def on_request(msg: Any) -> None:
            if msg.response is None:
                self.not_requests += 1
                return
            reply = publisher.receive_control(bytes(msg.data), now())
            try:
                msg.respond(reply)
            except Exception as exc:  # the requester went away: its problem, not the daemon's
                self.log.info("control response not sent: %s", exc)
            rearm()  # a snapshot is due at once; a changed interval moves the deadline

        self.ctx.immediate_message_callback = on_request
        address = self.ctx.request_address
        if address is not None:
            self.log.info("control requests on %s", address)
        else:
            self.log.warning("no request port in the monitoring context: no control requests")

    def __call__(self, data: bytes) -> None:
        try:
            self.source.send_nowait(data, flush=True)
        except Exception as exc:  # WouldBlock or a closed session: count, never stop the daemon
            self.dropped += 1
            self.log.debug("statistics message dropped: %s", exc)

    async def close(self) -> None:
        if self.source is not None:
            await self.source.close()
        if self.ctx is not None:
            await self.ctx.close()


class FileSink:
    """pyum's ``--monitor-file``: framed statistics messages appended to a file, each preceded
    by its u32 length (for tests and offline inspection)."""

    def __init__(self, path: str) -> None:
        self.f = open(path, "ab", buffering=0)  # noqa: SIM115 - closed in close()

    def __call__(self, data: bytes) -> None:
        self.f.write(_LEN.pack(len(data)) + data)

    async def close(self) -> None:
        self.f.close()


class StatsService(Generic[E]):
    """A :class:`StatsPublisher` running on the loop: its sink, its timer, its control requests.

    Build it with :meth:`start`; feed it the daemon's events with :meth:`receive_events`; stop it
    with :meth:`close`."""

    def __init__(
        self,
        publisher: StatsPublisher[E],
        sink: UMSink | FileSink,
        loop: asyncio.AbstractEventLoop,
    ) -> None:
        self.publisher = publisher
        self.sink = sink
        self.loop = loop
        self.timer = CoreTimer(loop, self._on_timer)
        self.timer.arm(publisher.next_timer())

    @classmethod
    async def start(
        cls,
        settings: MonitorSettings,
        content: StatsContent[E],
        control: ControlResponder,
        *,
        sender_ipv4: str,
        log: logging.Logger,
        monitor_file: str | None = None,
        wall_clock: Callable[[], float] = time.time,
        pid: int = 0,
    ) -> StatsService[E] | None:
        """Open the sink and start publishing; None without a topic or when the sink cannot be
        opened (logged: the daemon goes on without statistics)."""
        if not settings.topic:
            return None
        loop = asyncio.get_running_loop()
        sink: UMSink | FileSink
        try:
            if monitor_file:
                sink = FileSink(monitor_file)
            else:
                um = UMSink(log)
                try:
                    await um.open(settings)
                except BaseException:
                    with contextlib.suppress(Exception):  # the open error is the one to report
                        await um.close()
                    raise
                sink = um
        except Exception as exc:  # the daemon does its work even without statistics
            log.error("cannot start the statistics publisher: %s", exc)
            return None
        publisher = StatsPublisher(
            settings,
            content,
            sink,
            control,
            now=loop.time(),
            wall_clock=wall_clock,
            sender_ipv4=sender_ipv4,
            pid=pid,
        )
        service = cls(publisher, sink, loop)
        if isinstance(sink, UMSink):
            sink.serve_control(publisher, loop.time, service.rearm)
        log.info("publishing statistics on topic %s (%s)", settings.topic, settings.format)
        return service

    def _on_timer(self) -> None:
        self.publisher.handle_timer(self.loop.time())
        self.rearm()

    def rearm(self) -> None:
        """Arm the timer to the publisher's next deadline (after a control request)."""
        self.timer.arm(self.publisher.next_timer())

    def receive_events(self, events: Iterable[E]) -> None:
        self.publisher.receive_events(events)

    async def close(self) -> None:
        self.timer.cancel()
        await self.sink.close()
