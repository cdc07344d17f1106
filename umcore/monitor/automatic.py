"""Automatic monitoring of application contexts: sample, encode, publish over UM (asyncio glue).

Theory of operation
-------------------
A :class:`~umcore.api.Context` whose ``monitor_interval`` is above 0 gets an
:class:`AutomaticMonitor` when it starts (dro-monitoring-config.md B2).  Every interval the monitor

1. *samples* the context (:func:`sample_context`): plain integer counters the library keeps
   anyway -- the topic-resolution socket's datagram and byte counts, the resolver's drops, the
   context's blocked-send and loss counters, and per transport session the TCP cores'
   :class:`~umcore.transport.tcp.SourceStats` / :class:`~umcore.transport.tcp.ReceiverStats`;
   nothing is counted per message for monitoring's sake;
2. *encodes* the sample with the sans-IO :func:`umcore.monitor.umsstats.encode_sample` (one
   ``UMSMonMsg`` per object, PB format, lbmmon framing with attributes: ``monitor_appid``,
   object ID = the context's identity, process ID, timestamp);
3. *publishes* each packet with an ordinary UM source on the statistics topic of a separate
   **monitoring context** (``29west_statistics_context``) configured by
   ``monitor_transport_opts`` (:func:`umcore.monitor.modopts.monitoring_attributes`).

As in UM, the monitoring context is shared: every monitored context of one event loop whose
transport options are equal publishes through one monitoring context and source (reference
counted; the last monitored context to close closes it).  A packet the source cannot take now
(:class:`~umcore.errors.WouldBlock`: the collector is slow) is dropped and counted in
:attr:`AutomaticMonitor.dropped`, never queued: statistics are periodic, the next sample
supersedes it.

Every transport session reports itself: the engine's ``transport_samples()`` gives (direction,
transport, source string, ums_mon.proto fields) per source and joined session, TCP, LBT-RU and
LBT-RM alike (:meth:`umcore.engine.context.Engine.transport_samples`).  The monitoring context
is created with the monitored context's own ``create`` (this module imports no API).
"""

from __future__ import annotations

import asyncio
import logging
import os
import time
from collections.abc import Callable
from typing import Any

from umcore.errors import UMError, WouldBlock
from umcore.monitor.attributes import MonAttributes
from umcore.monitor.modopts import (
    MONITOR_CONTEXT_NAME,
    MonitorSettings,
    TransportOpts,
    monitoring_attributes,
)
from umcore.monitor.umsstats import (
    NO_SAMPLE_MIN,
    ContextSample,
    SampleClock,
    TransportSample,
    encode_sample,
)

__all__ = [
    "AutomaticMonitor",
    "MonitoringPublisher",
    "sample_context",
    "start_automatic_monitoring",
]

log = logging.getLogger("umcore.monitor.automatic")


# ------------------------------------------------------------------------------ sampling
def sample_context(ctx: Any) -> ContextSample:
    """What ``ctx`` (an :class:`umcore.engine.context.Engine`: the API's Context) counted so far.

    Context fields we cannot count are left out (0 in the message); see the module docstring
    of :mod:`umcore.monitor.umsstats` for the "no sample" minimum.
    """
    ep = ctx.endpoint
    rstats = ctx.resolver.stats
    receivers: dict[str, Any] = ctx.receivers
    resolved: set[str] = set()
    for js in ctx.joined.values():
        for f in js.fanouts.values():
            resolved.add(f.topic)
    lost = int(ctx.fragments_unrecoverably_lost)
    fields: dict[str, int] = {
        "tr_src_topics": len({s.topic for s in ctx.sources}),
        "tr_rcv_topics": len(receivers),
        "tr_rcv_unresolved_topics": sum(1 for t in receivers if t not in resolved),
        "send_blocked": int(ctx.send_blocked),
        "send_would_block": int(ctx.send_would_block),
        # TCP cannot retransmit: every detected gap is lost for good.
        "fragments_lost": lost,
        "fragments_unrecoverably_lost": lost,
        "rcv_cb_svc_time_min": NO_SAMPLE_MIN,  # callbacks are not timed: no sample
        "tr_dgrams_dropped_malformed": rstats.datagrams_dropped_malformed,
        "tr_dgrams_dropped_type": rstats.datagrams_dropped_type,
    }
    if ep is not None:
        fields["tr_dgrams_sent"] = ep.datagrams_sent
        fields["tr_bytes_sent"] = ep.bytes_sent
        fields["tr_dgrams_rcved"] = ep.datagrams_received
        fields["tr_bytes_rcved"] = ep.bytes_received
        fields["tr_dgrams_send_failed"] = ep.send_errors + ep.send_dropped
    lbt = ctx.lbt  # LBT-RU / LBT-RM state (umcore.aio.lbt.LbtContext)
    if lbt is not None:
        fields["lbtrm_unknown_msgs_rcved"] = int(lbt.lbtrm_unknown_msgs_rcved)
    transports = [TransportSample(*t) for t in ctx.transport_samples()]
    return ContextSample(fields, transports)


# ------------------------------------------------------------------------------ publishing
class MonitoringPublisher:
    """The monitoring context and its source on the statistics topic (shared, ref-counted)."""

    def __init__(
        self, opts: TransportOpts, key: tuple[object, ...], create: Callable[..., Any]
    ) -> None:
        self.opts = opts
        #: Creates the monitoring context: the monitored context's own ``create``.
        self.create = create
        self.key = key
        self.refs = 0
        self.ctx: Any = None
        self.source: Any = None
        self.ready: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        #: Packets handed to the source, and packets dropped (source blocked or closed).
        self.sent = 0
        self.dropped = 0

    async def open(self) -> None:
        try:
            attrs = monitoring_attributes(self.opts)
            self.ctx = await self.create(attrs["context"], name=MONITOR_CONTEXT_NAME)
            self.source = await self.ctx.create_source(self.opts.topic, attributes=attrs["source"])
        except BaseException as exc:
            if self.ctx is not None:
                await self.ctx.close()
            self.ready.set_exception(exc)
            self.ready.exception()  # retrieved: waiters re-raise it, no "never retrieved" noise
            raise
        self.ready.set_result(None)

    @property
    def sender_ipv4(self) -> str:
        return str(getattr(self.ctx, "advertised_ip", "0.0.0.0"))

    def publish(self, packets: list[bytes]) -> int:
        """Send ``packets``; returns how many were dropped (counted in :attr:`dropped`)."""
        src = self.source
        dropped = 0
        last = len(packets) - 1
        for i, data in enumerate(packets):
            try:
                src.send_nowait(data, flush=i == last)
                self.sent += 1
            except (WouldBlock, UMError) as exc:
                dropped += 1
                log.debug("statistics packet dropped: %s", exc)
        if dropped:
            self.dropped += dropped
            src.flush()
        return dropped

    async def close(self) -> None:
        if self.source is not None:
            await self.source.close()
            self.source = None
        if self.ctx is not None:
            await self.ctx.close()
            self.ctx = None


_PUBLISHERS: dict[tuple[object, ...], MonitoringPublisher] = {}


async def _acquire(opts: TransportOpts, create: Callable[..., Any]) -> MonitoringPublisher:
    loop = asyncio.get_running_loop()
    key = (id(loop), *opts.key())
    pub = _PUBLISHERS.get(key)
    if pub is None:
        pub = _PUBLISHERS[key] = MonitoringPublisher(opts, key, create)
        pub.refs += 1
        try:
            await pub.open()
        except BaseException:
            _PUBLISHERS.pop(key, None)
            raise
        return pub
    pub.refs += 1
    try:
        await asyncio.shield(pub.ready)
    except BaseException:
        pub.refs -= 1
        raise
    return pub


async def _release(pub: MonitoringPublisher) -> None:
    pub.refs -= 1
    if pub.refs <= 0:
        if _PUBLISHERS.get(pub.key) is pub:
            del _PUBLISHERS[pub.key]
        await pub.close()


class AutomaticMonitor:
    """Samples one context every ``settings.interval`` seconds and publishes the statistics."""

    def __init__(self, ctx: Any, settings: MonitorSettings, publisher: MonitoringPublisher) -> None:
        from umcore.aio.timer import CoreTimer

        self.ctx = ctx
        self.settings = settings
        self.publisher = publisher
        self._loop = asyncio.get_running_loop()
        self.clock = SampleClock(settings.interval)
        self._timer = CoreTimer(self._loop, self._on_timer)
        self.attributes = MonAttributes(
            application_id=settings.appid,
            object_id=id(ctx),
            process_id=os.getpid(),
            context_instance=bytes(getattr(ctx, "context_instance", b"") or b""),
        )
        #: Statistics packets published and dropped by this monitor.
        self.published = 0
        self.dropped = 0
        #: Samples that failed (logged; monitoring never breaks the application).
        self.errors = 0
        self.closed = False

    def start(self) -> None:
        self.clock.start(self._loop.time())
        self._timer.arm(self.clock.next_timer())

    def packets(self) -> list[bytes]:
        """Sample the context now and encode the statistics packets (not published)."""
        attrs = self.attributes
        attrs.sender_ipv4 = self.publisher.sender_ipv4
        attrs.timestamp = int(time.time())
        return encode_sample(sample_context(self.ctx), attrs)

    def sample(self) -> int:
        """Sample and publish now (UM's SAMPLE); returns the number of packets published."""
        if self.closed:
            return 0
        try:
            packets = self.packets()
        except Exception:
            self.errors += 1
            log.exception("automatic monitoring: sampling failed")
            return 0
        dropped = self.publisher.publish(packets)
        self.dropped += dropped
        self.published += len(packets) - dropped
        return len(packets) - dropped

    def _on_timer(self) -> None:
        if self.closed:
            return
        if self.clock.poll(self._loop.time()):
            self.sample()
        self._timer.arm(self.clock.next_timer())

    async def close(self) -> None:
        if self.closed:
            return
        self.closed = True
        self._timer.cancel()
        self.clock.stop()
        await _release(self.publisher)


async def start_automatic_monitoring(
    ctx: Any, settings: MonitorSettings | None = None
) -> AutomaticMonitor | None:
    """Start monitoring ``ctx`` when its ``monitor_interval`` is above 0 (else None).

    ``settings``: already-checked settings (:meth:`MonitorSettings.from_options`), else read
    from ``ctx``'s options.  Raises ConfigError for settings pyum cannot honour.
    """
    if settings is None:
        settings = MonitorSettings.from_options(ctx.options.get)
    if not settings.enabled:
        return None
    publisher = await _acquire(settings.transport_opts, type(ctx).create)
    mon = AutomaticMonitor(ctx, settings, publisher)
    mon.start()
    log.info(
        "automatic monitoring every %d s on topic %r (appid %r)",
        settings.interval,
        settings.transport_opts.topic,
        settings.appid,
    )
    return mon
