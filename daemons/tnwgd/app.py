"""tnwgd wired up: one routing core, its endpoint portals, one timer, logs, pid file, metrics.

Theory of operation
-------------------
:class:`DroRuntime` owns one :class:`umcore.dro.DroCore` and an
:class:`~daemons.tnwgd.portal.EndpointPortal` per ``<endpoint>``.  Inputs reach the core from the
portals (topic resolution heard, sources resolved, frames); after any of them the portal calls
:meth:`DroRuntime.kick`, which schedules one **pump** on the loop (coalesced: one per loop turn
however many inputs came): the core's commands go to their portals, its topic resolution
packets out of their TRDs, every portal's egress queue is drained as far as its proxy sources
take it, events are logged, and the one timer is re-armed at ``core.next_timer()``
(:class:`~umcore.aio.timer.CoreTimer`; its expiry calls ``core.handle_timer`` and pumps).

Public, read-only view (the monitor, the web monitor and the metrics read it; nothing else):
``core``, ``config``, ``portals`` (name -> portal, in configuration order; each with ``name``,
``index``, ``domain_id``, ``kind`` and ``contexts()``), ``started_at`` (``loop.time()`` at start),
``started_wall`` (``time.time()`` then), ``node_id``.

Around it :func:`serve` runs what the other modules of this package provide on that view:
``<monitor>`` statistics (:class:`~daemons.tnwgd.monitor.DroMonitor`), the ``<web-monitor>``
pages (:mod:`daemons.tnwgd.webmon`) and, with ``--metrics``, their Prometheus collectors plus this
module's per-portal forwarding counters (``pyum_tnwgd_<portal>_*``).

A portal that fails at run time (a context closed under it, its command worker gone:
:meth:`EndpointPortal.failure`) is logged as failed, closed and started again (checked every
:data:`PORTAL_CHECK_INTERVAL_S`; a restart that fails is retried after a doubling back-off);
UIMs and requests cross the portals through :class:`~daemons.tnwgd.uim.UimForwarder`, multicast
immediate messages through :class:`~daemons.tnwgd.mim.MimForwarder`, peer links included (what
a link brings reaches them through :meth:`DroRuntime.receive_immediate`).

Log lines carry UM's message ids where our notes give them (``Gwd-7136-1`` version,
``Gwd-7122-1`` started with node id, ``Gwd-9574-01`` RecalcTrigger).  A full portal queue is
logged (at most once per :data:`DROP_LOG_INTERVAL`) with its drop counter.

Peer portals (DRO-to-DRO links, ``<peer>``) are :class:`~daemons.tnwgd.peerportal.PeerPortal`
objects in the same ``portals`` table (``kind`` ``"peer"``): the pump hands them their commands,
interest, route information and egress queue like an endpoint portal's.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import random
import time
from collections.abc import Callable
from pathlib import Path

from daemons.tnwgd.mim import MimForwarder
from daemons.tnwgd.monitor import DroMonitor, register_metrics
from daemons.tnwgd.peerportal import PeerPortal
from daemons.tnwgd.portal import EndpointPortal
from daemons.tnwgd.recovery import RecoveryAdapter
from daemons.tnwgd.storepath import StoreAdapter
from daemons.tnwgd.uim import UimForwarder
from daemons.tnwgd.webmon import DroWebMonitor, start_dro_web_monitor
from umcore import __version__ as pyum_version
from umcore.aio.timer import CoreTimer
from umcore.config.attributes import Attributes
from umcore.config.dro import DROConfig, Endpoint, Peer
from umcore.config.umxml import UMXml
from umcore.daemon.lifecycle import StopSignals
from umcore.daemon.logs import LogSetup
from umcore.daemon.metrics import MetricSpec, MetricsServer, new_registry
from umcore.daemon.pidfile import PidFile
from umcore.dro import DroCore, InterestAdded, InterestRemoved, RecalcDone, RecalcHeldUp
from umcore.errors import ConfigError
from umcore.wire import lbmc

__all__ = ["DROP_LOG_INTERVAL", "DroRuntime", "check_supported", "serve"]

log = logging.getLogger("tnwgd")

# Seconds between two log lines about one portal's queue drops (the counter says how many).
DROP_LOG_INTERVAL = 5.0
# Frames a pump sends from one portal before it lets the loop run (the other portal's reads,
# timers): bounds the time one busy portal holds the loop.
MAX_FRAMES_PER_PUMP = 4096
# How often the runtime checks that its endpoint portals still work (a context closed under
# one, its command worker gone); a failed portal is logged, closed and started again, at once
# and then, while starting fails, after a back-off doubling up to PORTAL_RESTART_MAX_S.
PORTAL_CHECK_INTERVAL_S = 1.0
PORTAL_RESTART_MAX_S = 30.0


def _opt(attrs: Attributes, name: str) -> object:
    try:
        return attrs.get_typed(name)
    except ConfigError:
        return None


def _trd_identity(a: Attributes) -> tuple[object, ...]:
    """What makes two contexts share a TRD: their topic resolution settings."""
    srs = _opt(a, "resolver_service")
    no_udp = _opt(a, "resolver_disable_udp_topic_resolution")
    daemons = _opt(a, "resolver_unicast_daemon")
    if no_udp and srs:
        return ("srs", repr(srs))
    if daemons:
        return ("lbmrd", repr(daemons))
    return (
        "multicast",
        str(_opt(a, "resolver_multicast_address")),
        str(_opt(a, "resolver_multicast_port")),
    )


# The options whose values must match network-wide (notes A2 "Datagram size parity").
_SIZE_OPTIONS = (
    "resolver_datagram_max_size",
    "transport_tcp_datagram_max_size",
    "transport_lbtrm_datagram_max_size",
    "transport_lbtru_datagram_max_size",
)


def check_supported(
    config: DROConfig, *, xml: UMXml | None = None, base: Path | None = None
) -> list[str]:
    """Refuse what UM does not support (ConfigError naming the portal's line): two endpoints in
    one TRD (the same topic resolution settings; two endpoints with one domain id are refused by
    the loader already).  Returns warnings for what UM warns about: datagram max sizes that
    differ between portals."""
    seen_trd: dict[tuple[object, ...], Endpoint] = {}
    sizes: dict[str, dict[str, str]] = {name: {} for name in _SIZE_OPTIONS}
    for p in config.endpoints:
        rcv = config.portal_attributes(p, xml=xml, base=base, role="receiver")
        src = config.portal_attributes(p, xml=xml, base=base, role="source")
        trd = _trd_identity(rcv)
        other = seen_trd.get(trd)
        if other is not None:
            raise ConfigError(
                f"endpoints {other.name!r} and {p.name!r} resolve topics the same way "
                f"({trd[0]} {', '.join(map(str, trd[1:]))}): two endpoints of one DRO in one "
                "topic resolution domain are not supported",
                source=config.source,
                line=p.line,
                what="<endpoint>",
            )
        seen_trd[trd] = p
        for name in _SIZE_OPTIONS:
            for attrs in (rcv, src):
                v = _opt(attrs, name)
                if v is not None:
                    sizes[name].setdefault(str(v), p.name)
    warnings: list[str] = []
    for name, values in sizes.items():
        if len(values) > 1:
            listed = ", ".join(f"{v} ({n})" for v, n in values.items())
            warnings.append(
                f"{name} differs between portals: {listed}; a message fragment that fits one "
                "side may be dropped on the other (use one datagram max size network-wide)"
            )
    return warnings


class DroRuntime:
    """The running DRO (see the module docstring)."""

    def __init__(
        self,
        config: DROConfig,
        *,
        node_id: int | None = None,
        base: Path | None = None,
        xml: UMXml | None = None,
    ) -> None:
        self.loop = asyncio.get_running_loop()
        self.config = config
        self.node_id = node_id if node_id is not None else random.getrandbits(64) or 1
        self.started_at = self.loop.time()
        self.started_wall = time.time()
        self.core = DroCore(config, self.node_id, self.started_at)
        self.portals: dict[str, EndpointPortal | PeerPortal] = {}
        for index, cfg in enumerate(config.portals):
            if isinstance(cfg, Endpoint):
                self.portals[cfg.name] = EndpointPortal(
                    self, config, cfg, index, xml=xml, base=base
                )
            elif isinstance(cfg, Peer):
                self.portals[cfg.name] = PeerPortal(self, config, cfg, index)
        self.warnings = check_supported(config, xml=xml, base=base)
        #: UIMs, requests and responses across the DRO (daemons.tnwgd.uim)
        endpoints = {n: p for n, p in self.portals.items() if isinstance(p, EndpointPortal)}
        peers = {n: p for n, p in self.portals.items() if isinstance(p, PeerPortal)}
        self.uim = UimForwarder(self.core, endpoints, self.now, peers)
        #: multicast immediate messages across the DRO, by interest (daemons.tnwgd.mim)
        self.mim = MimForwarder(self.core, endpoints, self.now, self.uim, peers)
        #: late join and OTR requests to the origins, answers back (daemons.tnwgd.recovery)
        self.recovery = RecoveryAdapter(self.core, self.portals, self.now)
        #: receivers' traffic to the Stores of persistent sources, answers back (.storepath)
        self.stores = StoreAdapter(self.core, self.portals, self.now)
        self._timer = CoreTimer(self.loop, self._on_timer)
        self._pump_handle: asyncio.Handle | None = None
        self._closed = False
        self._drop_logged: dict[str, tuple[int, float]] = {}
        self._watcher: asyncio.Task[None] | None = None

    # ------------------------------------------------------------------ PortalHost
    def now(self) -> float:
        return self.loop.time()

    def kick(self) -> None:
        """Pump once, soon (coalesced)."""
        if self._pump_handle is None and not self._closed:
            self._pump_handle = self.loop.call_soon(self._pump)

    def receive_immediate(self, portal: str, message: lbmc.LBMCMessage, multicast: bool) -> None:
        """A UIM/request/response or MIM another DRO sent over peer portal ``portal``'s link:
        forwarded as if it had arrived at that portal (daemons.tnwgd.uim / .mim)."""
        if multicast:
            self.mim.receive_peer(portal, message)
        else:
            self.uim.receive_peer(portal, message)

    def drain(self) -> None:
        """Send what the portals' queues hold now, as far as their proxy sources take it (the
        data path calls this at the end of every read; the pump does the rest)."""
        again = False
        for p in self.portals.values():
            again = p.drain(MAX_FRAMES_PER_PUMP) or again
        if again:
            self.kick()

    # ------------------------------------------------------------------ life
    async def start(self) -> None:
        """Start every endpoint portal (in order); any failure closes those started."""
        for w in self.warnings:
            log.warning("%s", w)
        try:
            for p in self.portals.values():
                await p.start()
                if isinstance(p, PeerPortal):
                    log.info("%s", p.describe())
                    continue
                self.uim.attach(p)
                self.mim.attach(p)
                self.recovery.attach(p)
                self.stores.attach(p)
                rcv, src = p.context_names()
                log.info(
                    "endpoint portal [%s] domain id %d up (receiver context %s, source context %s)",
                    p.name,
                    p.domain_id,
                    rcv or "-",
                    src or "-",
                )
        except BaseException:
            await self.close()
            raise
        self._watcher = self.loop.create_task(self._watch())
        self.kick()

    async def _watch(self) -> None:
        """Restart endpoint portals that failed at run time (see PORTAL_CHECK_INTERVAL_S)."""
        retry: dict[str, tuple[float, float]] = {}  # portal -> (next attempt, back-off)
        while not self._closed:
            await asyncio.sleep(PORTAL_CHECK_INTERVAL_S)  # a periodic check, not a wait
            for p in list(self.portals.values()):
                if not isinstance(p, EndpointPortal) or self._closed:
                    continue
                now = self.loop.time()
                if p.name not in retry:
                    reason = p.failure()
                    if reason is None:
                        continue
                    log.error("endpoint portal [%s] failed: %s; restarting it", p.name, reason)
                    await p.close()
                    retry[p.name] = (now, PORTAL_CHECK_INTERVAL_S)
                at, backoff = retry[p.name]
                if now < at:
                    continue
                try:
                    await p.start()
                except Exception as exc:
                    await p.close()
                    backoff = min(backoff * 2, PORTAL_RESTART_MAX_S)
                    retry[p.name] = (now + backoff, backoff)
                    log.error(
                        "endpoint portal [%s] could not be restarted: %s; next attempt in %.0f s",
                        p.name, exc, backoff,
                    )  # fmt: skip
                    continue
                del retry[p.name]
                p.restarts += 1
                self.uim.attach(p)
                self.mim.attach(p)
                self.recovery.attach(p)
                self.stores.attach(p)
                log.warning("endpoint portal [%s] restarted (%d so far)", p.name, p.restarts)
                self.kick()

    async def close(self) -> None:
        """Portals down and closed (their proxies and contexts), timer cancelled."""
        self._closed = True
        if self._watcher is not None:
            self._watcher.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._watcher
            self._watcher = None
        self._timer.cancel()
        if self._pump_handle is not None:
            self._pump_handle.cancel()
            self._pump_handle = None
        self.mim.close()
        for p in reversed(list(self.portals.values())):
            await p.close()

    # ------------------------------------------------------------------ the pump
    def _on_timer(self) -> None:
        self.core.handle_timer(self.loop.time())
        self._pump()

    def _pump(self) -> None:
        self._pump_handle = None
        if self._closed:
            return
        core = self.core
        portals = self.portals
        commands = core.take_commands()
        if commands:
            by_portal: dict[str, list[object]] = {}
            for cmd in commands:
                by_portal.setdefault(cmd.portal, []).append(cmd)
            for name, cmds in by_portal.items():
                p = portals.get(name)
                if p is not None:
                    p.apply(cmds)  # type: ignore[arg-type]
        for name, packet in core.take_lbmr():
            p = portals.get(name)
            if p is not None:
                p.send_lbmr(packet)
        for name, info in core.take_route_info():
            peer = portals.get(name)
            if isinstance(peer, PeerPortal):
                peer.send_route_info(info)
        for name, source, frame in core.take_controls():  # SRIs (umcore.dro.persist)
            p = portals.get(name)
            if p is not None:
                p.send_control(source, frame)
        self.recovery.flush()  # late join / OTR messages the peer links' input produced
        self.stores.flush()  # and Store traffic
        again = False
        for p in portals.values():
            # frames left only because the pump's share ran out: come back after the loop ran
            again = p.drain(MAX_FRAMES_PER_PUMP) or again
            self._log_drops(p.name, core.queue(p.name).dropped_would_block)
        for ev in core.take_events():
            self._log_event(ev)
        self._timer.arm(core.next_timer())
        if again:
            self.kick()

    def _log_drops(self, name: str, dropped: int) -> None:
        last, at = self._drop_logged.get(name, (0, -DROP_LOG_INTERVAL))
        now = self.loop.time()
        if dropped > last and now - at >= DROP_LOG_INTERVAL:
            self._drop_logged[name] = (dropped, now)
            log.warning(
                "endpoint portal [%s] queue full (max-queue %d bytes): %d messages dropped "
                "due to blocking so far",
                name,
                self.core.queue(name).limit,
                dropped,
            )

    def _log_event(self, ev: object) -> None:
        if isinstance(ev, RecalcDone):
            log.info(
                "Gwd-9574-01: RecalcTrigger:ROUTE CHANGE:Version = %d:NodeId = %d",
                ev.version,
                self.node_id,
            )
        elif isinstance(ev, RecalcHeldUp):
            log.warning("route recalculation held up for %.1f s by a changing topology", ev.waiting)
        elif isinstance(ev, InterestAdded):
            log.debug("portal [%s] interest in %r for domain %d", ev.portal, ev.key, ev.domain)
        elif isinstance(ev, InterestRemoved):
            log.debug("portal [%s] no interest in %r for domain %d", ev.portal, ev.key, ev.domain)

    # ------------------------------------------------------------------ figures
    def forwarded(self) -> int:
        return sum(p.frames_forwarded for p in self.portals.values())

    def dropped(self) -> int:
        return sum(self.core.queue(n).dropped_would_block for n in self.portals)


def _getter(obj: object, attr: str) -> Callable[[], float]:
    return lambda: float(getattr(obj, attr))


def metric_specs(rt: DroRuntime) -> list[MetricSpec]:
    """``--metrics``: per-portal forwarding figures (pyum_tnwgd_*, one series per portal)."""
    specs: list[MetricSpec] = []
    for name, p in rt.portals.items():
        q = rt.core.queue(name)
        st = rt.core.stats(name)
        n = name.replace("-", "_")
        for metric, kind, what, obj, attr in (
            ("frames_received", "counter", "frames its proxy receivers handed to the router",
             st, "frames_received"),
            ("frames_forwarded", "counter", "frames its proxy sources sent", p,
             "frames_forwarded"),
            ("dropped_would_block", "counter", "frames its full queue refused", q,
             "dropped_would_block"),
            ("bytes_enqueued", "gauge", "bytes waiting in its queue", q, "bytes_enqueued"),
            ("tr_malformed", "counter", "topic resolution datagrams it could not read", p,
             "tr_malformed"),
        ):  # fmt: skip
            specs.append(
                MetricSpec(
                    f"pyum_tnwgd_{n}_{metric}",
                    kind,  # type: ignore[arg-type]
                    f"portal {name}: {what}",
                    _getter(obj, attr),
                )
            )
    fwd = rt.core.recovery.stats
    for metric, what in (
        ("lji_forwarded", "late-join information requests forwarded to origins"),
        ("rxreq_forwarded", "retransmission requests forwarded to origins"),
        ("lj_info_relayed", "late-join information answers relayed to receivers"),
        ("retrans_relayed", "retransmissions relayed to receivers"),
        ("no_route", "late-join/OTR requests for a source with no route to its origin"),
        ("unknown_reply", "late-join/OTR answers nobody waited for"),
    ):
        specs.append(
            MetricSpec(f"pyum_tnwgd_recovery_{metric}", "counter",
                       f"late join / OTR through the DRO: {what}", _getter(fwd, metric))
        )  # fmt: skip
    path = rt.stores.path.stats
    for metric, what in (
        (
            "to_store",
            "receiver messages (registrations, ACKs, keepalives, RXREQs) relayed to Stores",
        ),
        ("to_receiver", "Store answers, keepalives and retransmissions relayed to receivers"),
        ("no_route", "messages for a Store or receiver with no route"),
        ("unknown_answer", "Store answers nobody waited for"),
        ("evicted", "remembered requests forgotten for the table bounds"),
        ("sris_rewritten", "source registration information rewritten for the egress portal"),
    ):
        specs.append(
            MetricSpec(f"pyum_tnwgd_storepath_{metric}", "counter",
                       f"persistence through the DRO: {what}", _getter(path, metric))
        )  # fmt: skip
    for metric, obj, what in (
        ("recovery_send_failed", rt.recovery, "late-join/OTR messages the DRO could not write"),
        ("storepath_send_failed", rt.stores, "Store-path messages the DRO could not write"),
    ):
        specs.append(
            MetricSpec(f"pyum_tnwgd_{metric}", "counter", what, _getter(obj, "send_failed"))
        )
    return specs


async def serve(
    config: DROConfig,
    *,
    log_setup: LogSetup | None = None,
    metrics: tuple[str, int] | None = None,
    stopping: asyncio.Event | None = None,
    base: Path | None = None,
    xml: UMXml | None = None,
) -> int:
    """Run the DRO until SIGTERM/SIGINT (or ``stopping``); returns the exit status."""
    loop = asyncio.get_running_loop()
    if stopping is None:
        signals = StopSignals(loop, on_reload=log_setup.reopen if log_setup else None)
        signals.install()
        stopping = signals.stopping
    log.info("Gwd-7136-1: Ultra Messaging Gateway version pyum %s (tnwgd)", pyum_version)
    rt = DroRuntime(config, base=base, xml=xml)
    name = config.daemon.name or ""
    metrics_server: MetricsServer | None = None
    monitor: DroMonitor | None = None
    web: DroWebMonitor | None = None
    pid: PidFile | None = None
    try:
        await rt.start()
        monitor = await DroMonitor.open(rt)
        web = await start_dro_web_monitor(rt, monotonic=loop.time, log=log)
        if metrics is not None:
            registry = new_registry(metric_specs(rt))
            register_metrics(registry, rt, monitor)
            metrics_server = MetricsServer(registry)
            mhost, mport = await metrics_server.start(*metrics)
            log.info("metrics on http://%s:%d/metrics", mhost, mport)
        for p in rt.portals.values():
            for app_id, eng in p.context_app_ids():
                log.info("%s resolver on %s", app_id, eng.advertised_ip)
        if config.daemon.pidfile:
            pid = PidFile(config.daemon.pidfile)
            pid.write()
        # The readiness lines last: whoever waits for one may use all of the above at once.
        log.info("Gwd-7122-1: Gateway named [%s] with node id: %d has started.", name, rt.node_id)
        log.info("tnwgd running (pid %d)", os.getpid())
        await stopping.wait()
        log.info(
            "stopping: %d messages forwarded, %d dropped due to blocking",
            rt.forwarded(),
            rt.dropped(),
        )
    finally:
        if metrics_server is not None:
            await metrics_server.close()
        if web is not None:
            await web.close()
        if monitor is not None:
            await monitor.close()
        await rt.close()
        if pid is not None:
            pid.remove()
    return 0
