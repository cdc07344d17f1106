"""The engine: one UM context's topic resolution, transport sessions and request port.

Theory of operation
-------------------
An :class:`Engine` is what UM calls a context, without the public facade
(:class:`umcore.api.Context` is an Engine): the asyncio loop plays UM's context thread, and
callbacks run on it and must not block.

- **Topic resolution.**  A :class:`~umcore.resolver.core.TopicResolver` (sans-IO) behind one UDP
  socket (:class:`~umcore.aio.udp.DatagramEndpoint`): bound to a port of
  ``resolver_unicast_port_low..high`` and talking to lbmrds when ``resolver_unicast_daemon`` is
  set, otherwise joined to the multicast group.  One :class:`~umcore.aio.timer.CoreTimer`
  drives its schedules.  With ``resolver_service`` the engine also resolves through SRSes over
  TCP, and ``resolver_disable_udp_topic_resolution`` 1 removes the UDP socket altogether
  (:mod:`umcore.engine.srsresolve`).
- **Context names** (Store name resolution, :mod:`umcore.engine.names`): names this context
  advertises, names it resolves, through the same topic resolution (UDP and SRS).
- **Sources.**  Each topic source is mapped onto a transport session
  (:mod:`umcore.engine.source`): TCP sessions round robin over up to
  ``transport_tcp_maximum_ports`` listeners on ``transport_tcp_port_low..high``; LBT-RU and
  LBT-RM sessions through :mod:`umcore.engine.lbt`.  The source's TIR advertises the session.
- **Receivers.**  A TIR (or SRS record) for a topic with subscribers makes the engine join that
  source's session once (:class:`~umcore.engine.receive.JoinedSession`) and add a fan-out for
  the topic index (:mod:`umcore.engine.receive`).
- **Raw receivers and raw sources** (:mod:`umcore.engine.raw`): what the store and the DRO
  stand on -- a source's LBMC frames handed over as they arrive, and pre-framed messages sent
  keeping their sequence numbers.
- **Features** (late join, OTR, request/response, UIM/MIM) live in
  :mod:`umcore.engine.features`, behind the request port.

Every option is read through :class:`~umcore.engine.options.Options` (the registry's defaults,
units and ranges).  Deletion order follows UM (seed 003 "UM Objects", rules 5-7): sources and
receivers are closed before their context; :meth:`Engine.close` with live ones raises
:class:`~umcore.errors.UMError` and changes nothing.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable, Coroutine
from typing import Any

from umcore.aio.multicast import open_multicast_socket, route_address
from umcore.aio.ports import first_free
from umcore.aio.tcp import ReceiverConnection, SourceListener
from umcore.aio.timer import CoreTimer
from umcore.aio.tls import Security
from umcore.aio.udp import DatagramEndpoint
from umcore.engine import dro, lbt, shm, srsresolve
from umcore.engine.features import ContextFeatures
from umcore.engine.message import Message
from umcore.engine.names import EngineNames, NameResolution, OnResolved
from umcore.engine.options import (
    Options,
    daemon_bindings,
    random_session_id,
)
from umcore.engine.raw import OnFrame, OnFrames, OnSession, RawReceiver, RawSource
from umcore.engine.receive import JoinedSession, OnMessage, Subscriber
from umcore.engine.source import EngineSource, OnSourceEvent, SourceSession, completed_future
from umcore.errors import ConfigError, UMError
from umcore.resolver.core import (
    ResolverConfig,
    SourceInfo,
    TopicResolver,
    wildcard_query_timings_from,
)
from umcore.resolver.names import ContextName, NameRow
from umcore.resolver.schedule import advertisement_timings_from, query_timings_from
from umcore.transport.tcp import TcpSourceSession
from umcore.wire import lbmc, lbmr, lbmr_options

__all__ = ["CONNECT_TIMEOUT_S", "Engine", "with_packet_options"]

log = logging.getLogger("umcore.engine")

# Bound on one connect attempt to a source's TCP port.
CONNECT_TIMEOUT_S = 5.0


def with_packet_options(data: bytes, trailer: bytes) -> bytes:
    """An LBMR datagram with the packet-option ``trailer`` appended and the header's options
    bit set; a datagram that carries options already is returned as it is."""
    head = data[0]
    if head & lbmr.HDR_OPTS_FLAG:
        return data
    return bytes((head | lbmr.HDR_OPTS_FLAG,)) + data[1:] + trailer


class Engine:
    """One context's resolver, sessions and request port (see the module docstring).

    Subclasses (the API's ``Context``) name the classes the engine builds for topic sources
    and receivers in :attr:`source_class` and :attr:`subscriber_class`."""

    source_class: type[EngineSource] = EngineSource
    subscriber_class: type[Subscriber] = Subscriber

    def __init__(self, attributes: Any = None, *, name: str | None = None) -> None:
        self.loop = asyncio.get_running_loop()
        self.name = name
        #: The context's effective options.
        self.options = Options("context", attributes, name)
        #: TLS and LZ4 on every TCP connection (``use_tls``, ``compression``; seed 10.4-10.5),
        #: checked here: bad certificate files fail the context's creation.
        self.security = Security.from_options(self.options)
        self.sources: set[EngineSource] = set()
        self.receivers: dict[str, list[Subscriber]] = {}
        self.wildcards: list[Subscriber] = []
        #: Raw receivers by topic, with their options (:mod:`umcore.engine.raw`).
        self.raw_receivers: dict[str, list[tuple[RawReceiver, Options]]] = {}
        self.sessions: list[SourceSession] = []
        self._next_session = 0
        #: Source transport sessions joined as a receiver, by transport key.
        self.joined: dict[tuple[object, ...], JoinedSession] = {}
        self._tasks: set[asyncio.Task[Any]] = set()
        #: The resolver's UDP socket (None without UDP topic resolution).
        self.endpoint: DatagramEndpoint | None = None
        #: lbmrd (ip, port) -> the resolver socket of its ``Iface[:SrcPort]->`` entry part.
        self._daemon_endpoints: dict[tuple[str, int], DatagramEndpoint] = {}
        self.resolver: TopicResolver
        self._timer = CoreTimer(self.loop, self._on_timer)
        #: What a send returns when it sent at once (see :func:`completed_future`).
        self.done = completed_future(self.loop)
        self.advertised_ip = "127.0.0.1"
        self.closed = False
        self.features = ContextFeatures(self)
        #: LBT-RU / LBT-RM state (rate limiters, sessions), made on first use.
        self.lbt: lbt.LbtState | None = None
        #: TCP-based topic resolution (``resolver_service``), None without SRSes.
        self.srs: srsresolve.SRSResolution | None = None
        # Statistics for automatic monitoring: sends that blocked or raised WouldBlock, and
        # messages lost for good (gaps a receiver was told about).
        self.send_blocked = 0
        self.send_would_block = 0
        self.fragments_unrecoverably_lost = 0
        #: ``immediate_message_receiver_function``: topicless UIM/MIM.
        self.immediate_message_callback: Callable[[Message], object] | None = None
        #: ``immediate_message_topic_receiver_function``: topic UIM/MIM without a receiver.
        self.immediate_topic_message_callback: Callable[[Message], object] | None = None
        #: ``mim_unrecoverable_loss_function``: called with the number of MIM datagrams lost.
        self.mim_loss_callback: Callable[[int], object] | None = None
        #: Context names advertised and resolved (:mod:`umcore.engine.names`).
        self.ctx_names = EngineNames(self)
        #: A DRO portal's hooks (:mod:`daemons.tnwgd.portal`): ``tr_listener(data, addr)`` is
        #: handed every topic resolution datagram heard, before the resolver reads it;
        #: ``tr_packet_options`` (an encoded LBMR packet-option trailer, e.g. source type TNWGD)
        #: is appended to every datagram this context's resolver sends.
        self.tr_listener: Callable[[bytes | memoryview, tuple[str, int]], object] | None = None
        self.tr_packet_options = b""
        #: ``join_filter(info)`` False: do not join that source for the raw receivers (a DRO
        #: portal's proxy receivers leave its own proxy sources alone).
        self.join_filter: Callable[[SourceInfo], bool] | None = None
        #: With ``resolver_service``: ``srs_dro`` (set before start) registers the context with
        #: the SRS as a DRO portal's (:class:`~umcore.engine.srsresolve.DroRole`);
        #: ``srs_listener(event)`` hears every SRS event after the context handled it.
        self.srs_dro: srsresolve.DroRole | None = None
        self.srs_listener: Callable[[object], object] | None = None
        #: ``uim_interceptor(msg, peer_ip, kind)`` True: a DRO portal took that UIM, request or
        #: response arriving at the request port (to forward it) instead of delivering it.
        self.uim_interceptor: Callable[[lbmc.LBMCMessage, str, str], bool] | None = None

    # -------------------------------------------------------------- topic resolution
    async def start(self) -> None:
        """Open the resolver socket(s), the request port and the SRS connections."""
        o = self.options
        cfg = ResolverConfig.from_options(o)
        self.resolver, self.srs, udp = srsresolve.make_resolver(self, cfg, self.loop.time())
        default_if = o.interface("default_interface")
        if not udp:  # SRS only (or no TR at all): no resolver socket
            srs = self.srs.servers[0][0] if self.srs is not None else "127.0.0.1"
            self.advertised_ip = default_if or route_address(srs)
        elif cfg.unicast_daemons:
            iface = o.interface("resolver_unicast_interface") or default_if
            low = int(o.get("resolver_unicast_port_low"))
            high = int(o.get("resolver_unicast_port_high"))
            bindings = daemon_bindings(o.get("resolver_unicast_daemon"))
            named = next((ip for ip, _ in bindings.values() if ip is not None), None)
            self.advertised_ip = iface or named or route_address(cfg.unicast_daemons[0][0])
            rcvbuf = int(o.get("resolver_unicast_receiver_socket_buffer"))

            async def bind(port: int) -> DatagramEndpoint:
                return await DatagramEndpoint.bind(
                    iface or "0.0.0.0", port, self._on_datagram, rcvbuf=rcvbuf
                )

            self.endpoint = await first_free(
                [0] if low == 0 else range(low, high + 1),
                bind,
                f"resolver_unicast port {low}-{high}",
            )
            await self._bind_daemon_endpoints(bindings, iface, low, high, rcvbuf)
        else:
            iface = o.interface("resolver_multicast_interface") or default_if
            self.advertised_ip = iface or route_address(cfg.multicast_address)
            sock = open_multicast_socket(
                cfg.multicast_address,
                cfg.multicast_port,
                iface or self.advertised_ip,
                ttl=int(o.get("resolver_multicast_ttl")),
                rcvbuf=int(o.get("resolver_multicast_receiver_socket_buffer")),
            )
            self.endpoint = DatagramEndpoint(self.loop, sock, self._on_datagram)
        self.features.ip = self.advertised_ip
        try:
            await self.features.start()
        except BaseException:
            self._close_resolver_sockets()
            raise
        if self.srs is not None:
            self.srs.start()  # after the request port: the SIRs name it
        self.flush_resolver()

    def _close_resolver_sockets(self) -> None:
        self._timer.cancel()
        if self.endpoint is not None:
            self.endpoint.close()
        for ep in set(self._daemon_endpoints.values()):
            ep.close()

    def _on_datagram(self, data: bytes | memoryview, addr: tuple[str, int]) -> None:
        if self.tr_listener is not None:
            self.tr_listener(data, addr)
        found = self.resolver.receive_datagram(data, addr, self.loop.time())
        for info in found:
            self.join(info)
        for info in self.resolver.take_ended():
            self.source_ended(info)
        self.flush_resolver()

    def source_ended(self, info: SourceInfo) -> None:
        """A (proxy) source's final advertisement: EOS to its topic's receivers at once, and
        leave that topic index (the session when it was the last; :mod:`umcore.engine.dro`)."""
        js = self.joined.get(info.key)
        if js is not None:
            js.drop_topic(info.index, info.topic)

    # -------------------------------------------------------------- DRO (umcore.engine.dro)
    @property
    def domain_id(self) -> int | None:
        """This context's topic resolution domain id as a DRO advertised it (directly, through
        the SRS, or from peers as ``resolver_domain_id_active_propagation_timeout`` allows);
        None until then (no DRO: UM's domain 0)."""
        return self.resolver.domains.domain_id

    @property
    def domain_routes(self) -> dict[int, Any]:
        """Remote domain id -> :class:`~umcore.resolver.dro.DomainRoute` (the DRO portal's UIM
        address ``ip:port`` that reaches it), as the DROs of this TRD advertise them."""
        return self.resolver.domains.live_routes(self.loop.time())

    def uim_route(self, dest: str) -> tuple[tuple[str, int], list[Any]]:
        """Where a UIM to ``dest`` (``TCP:[domain:]ip:port``) is written and the LBMC headers it
        needs: straight to ``ip:port``, or to the DRO route of another domain with a
        DESTINATION header (:mod:`umcore.engine.dro`, contract item 4).  ValueError for a bad
        address; UMError when no DRO advertises a route to the domain."""
        feat = self.features
        own = (feat.ip, feat.port.port if feat.port is not None else 0)
        return dro.uim_route(self.resolver.domains, dest, own, self.loop.time())

    def source_uim_headers(self, source: str) -> list[Any]:
        """The headers a UIM to ``"SOURCE:" + source`` needs when that source is a DRO proxy
        source (contract item 5); [] otherwise."""
        key = source.split("[", 1)[0]
        feat = self.features
        own = (feat.ip, feat.port.port if feat.port is not None else 0)
        for js in self.joined.values():
            if js.source_string == key:
                return dro.source_headers(js.options, self.resolver.domains.domain_id, own)
        return []

    def _on_timer(self) -> None:
        self.resolver.handle_timer(self.loop.time())
        self.flush_resolver()

    async def _bind_daemon_endpoints(
        self,
        bindings: dict[tuple[str, int], tuple[str | None, int | None]],
        iface: str | None,
        low: int,
        high: int,
        rcvbuf: int,
    ) -> None:
        """One more resolver socket per distinct ``Iface[:SrcPort]`` of the
        ``resolver_unicast_daemon`` entries; datagrams to such an lbmrd leave (and its answers
        arrive) there, the others use the context's resolver socket."""
        by_local: dict[tuple[str, int | None], DatagramEndpoint] = {}
        for daemon, (ip, sport) in bindings.items():
            host = ip or iface or "0.0.0.0"
            ep = by_local.get((host, sport))
            if ep is None:
                ports = [sport] if sport is not None else [0] if low == 0 else range(low, high + 1)

                async def bind(port: int, host: str = host) -> DatagramEndpoint:
                    return await DatagramEndpoint.bind(host, port, self._on_datagram, rcvbuf=rcvbuf)

                try:
                    ep = await first_free(ports, bind, f"the resolver socket for lbmrd {daemon}")
                except UMError:
                    for other in by_local.values():
                        other.close()
                    raise
                by_local[(host, sport)] = ep
            self._daemon_endpoints[daemon] = ep

    def flush_resolver(self) -> None:
        """Send what the resolver queued; re-arm its timer."""
        ep = self.endpoint
        if ep is not None:
            per_daemon = self._daemon_endpoints
            trailer = self.tr_packet_options
            for data, addr in self.resolver.take_datagrams():
                if trailer:
                    data = with_packet_options(data, trailer)
                (per_daemon.get(addr, ep) if per_daemon else ep).sendto(data, addr)
        self._timer.arm(self.resolver.next_timer())
        events = self.resolver.take_name_events()
        if events:
            self.ctx_names.dispatch(events)

    def send_topic_resolution(self, data: bytes) -> None:
        """Send one LBMR datagram built elsewhere (a DRO portal's interest, use queries, domain
        routes) where this context's topic resolution goes: its multicast group or lbmrd."""
        self.resolver.emit_datagram(data, self.loop.time())
        self.flush_resolver()

    def topic_resolution_request(self) -> None:
        """``lbm_context_topic_resolution_request()``: restart sustaining phases."""
        self.resolver.request_resolution(self.loop.time())
        self.flush_resolver()

    # -------------------------------------------------------------- context names
    def advertise_context_name(
        self, name: str, ip: str, port: int, domain_id: int = 0
    ) -> ContextName:
        """Advertise this context's ``name`` at ``domain_id:ip:port`` (a Store's
        ``context-name`` and its listener address) at once and in answer to every query for it.
        UMError for an invalid name (1..128 of ``[A-Za-z0-9_-]``), address or port."""
        return self.ctx_names.advertise(name, ip, port, domain_id)

    def withdraw_context_name(self, name: str) -> bool:
        """Stop advertising ``name``; False if it was not advertised."""
        return self.ctx_names.withdraw(name)

    def resolve_context_name(self, name: str, on_resolved: OnResolved) -> NameResolution:
        """Resolve ``name`` (UM's ``ume_store_name``): queries on UM's schedule until it
        resolves; ``on_resolved`` gets the :class:`ContextName` then and whenever its address
        changes.  The handle's ``cancel()`` stops it."""
        return self.ctx_names.resolve(name, on_resolved)

    async def wait_context_name(self, name: str, timeout: float | None = None) -> ContextName:
        """The address ``name`` resolves to; TimeoutError after ``timeout`` seconds."""
        return await self.ctx_names.wait(name, timeout)

    def context_names(self) -> list[NameRow]:
        """Every name this context advertises, queries or has heard of (monitoring)."""
        return self.ctx_names.table()

    # -------------------------------------------------------------- sources
    async def open_source(
        self,
        topic: str,
        options: Options,
        on_event: OnSourceEvent | None,
        *,
        tir_options: tuple[Any, ...] = (),
    ) -> EngineSource:
        """A topic source of :attr:`source_class` on a session chosen by ``options``,
        advertised by topic resolution.  ``tir_options``: TIR topic options advertised before
        the features' own (a Store's proxy source: the UME option naming the Store)."""
        self.check()
        self.features.check_source(topic, options)
        if self.security.enabled and lbt.transport_kind(options) != "tcp":
            # seed 10.4.4 / 10.5.1: such a context "will not accept source creation with
            # transports other than TCP"
            raise ConfigError(
                f"source {topic!r}: a context with use_tls or compression accepts TCP sources "
                f"only, not {lbt.transport_kind(options)}",
                what="transport",
                allowed="tcp",
            )
        session = await self.session_for(options)
        src = self.source_class(self, topic, session, on_event)
        session.sources.append(src)
        self.sources.add(src)
        self.advertise(src, options, tir_options)
        return src

    def advertise(self, src: EngineSource, so: Options, extra: tuple[Any, ...] = ()) -> None:
        local = self.resolver.add_source(
            src.topic,
            src.tidx,
            src.transport_info,
            self.loop.time(),
            timings=advertisement_timings_from(so),
            send_initial=bool(so.get("resolver_send_initial_advertisement")),
            options=self.security_options((*extra, *self.features.source_created(src, so))),
        )
        for info in local:
            self.join(info)
        self.flush_resolver()

    def security_options(self, options: tuple[Any, ...]) -> tuple[Any, ...]:
        """A source's TIR options with this context's TLS/LZ4 bits in its extended-functionality
        option (added when there is none): receivers ignore sources whose bits differ."""
        flags = self.security.flags
        if not flags:
            return options
        out: list[Any] = []
        found = False
        for opt in options:
            if type(opt) is lbmr_options.ExFuncOption:
                opt = lbmr_options.ExFuncOption(
                    opt.src_tcp_port, opt.src_ip_addr, opt.functionality_flags | flags, opt.flags
                )
                found = True
            out.append(opt)
        if not found:
            port = self.features.port.port if self.features.port is not None else 0
            out.append(lbmr_options.ExFuncOption(port, self.advertised_ip, flags))
        return tuple(out)

    async def session_for(self, o: Options) -> SourceSession:
        """The session a new source with options ``o`` maps onto (existing or new)."""
        kind = lbt.transport_kind(o)
        if kind in shm.KINDS:
            return await shm.source_session(self, kind, o)
        if kind != "tcp":
            return await lbt.source_session(self, kind, o)
        maximum = int(self.options.get("transport_tcp_maximum_ports"))
        if len(self.sessions) >= maximum:
            s = self.sessions[self._next_session % len(self.sessions)]
            self._next_session += 1
            return s
        core = TcpSourceSession.from_options(random_session_id(), o, self.options)
        listener = SourceListener(
            core,
            max_buffer=int(o.get("transport_session_maximum_buffer")),
            nodelay=bool(o.get("transport_tcp_nodelay")),
        )
        # Seed 003 / notes 1.1: transport_tcp_interface defaults to default_interface, else any.
        host = (
            o.interface("transport_tcp_interface")
            or self.options.interface("default_interface")
            or "0.0.0.0"
        )
        port = int(o.get("transport_tcp_port"))
        if port:
            low = high = port
        else:
            low = int(self.options.get("transport_tcp_port_low"))
            high = int(self.options.get("transport_tcp_port_high"))
        await listener.start(
            host,
            low,
            high,
            int(o.get("transport_tcp_listen_backlog")),
            wrap=self.security.server_factory,
        )
        s = SourceSession(self, "tcp", core, listener)
        if host != "0.0.0.0":
            s.ip = host  # the TIR names the address listened on
        self.sessions.append(s)
        self._next_session += 1
        return s

    async def source_closed(self, src: EngineSource) -> None:
        """A source closed (:meth:`EngineSource.close`): withdraw it; a session left without
        sources closes."""
        self.sources.discard(src)
        self.features.source_closed(src)
        self.resolver.remove_source(src.topic, src.tidx, src.transport_info)
        session = src.session
        session.core.remove_topic(src.tidx)
        session.sources.remove(src)
        if not session.sources:
            await self.close_session(session)

    async def close_session(self, s: SourceSession) -> None:
        if s in self.sessions:
            self.sessions.remove(s)
        if self.lbt is not None:
            self.lbt.forget(s)
        await s.close()

    # -------------------------------------------------------------- receivers
    def subscribe(
        self,
        topic: str,
        on_message: OnMessage | None,
        options: Options,
        setup: Callable[[Subscriber], object] | None = None,
    ) -> Subscriber:
        """A receiver of ``topic`` (of :attr:`subscriber_class`); joins what resolution
        already knows.  ``setup`` runs on the new receiver before anything can be delivered
        to it (a session already joined gives BOS at once)."""
        self.check()
        r = self.subscriber_class(self, topic, on_message, options=options)
        if setup is not None:
            setup(r)
        self.receivers.setdefault(topic, []).append(r)
        self._query(topic, options)
        return r

    def _query(self, topic: str, options: Options) -> None:
        """Topic resolution for a new receiver (or raw receiver) of ``topic``: its queries
        scheduled, the sources already known joined."""
        found = self.resolver.add_receiver(
            topic,
            self.loop.time(),
            timings=query_timings_from(options),
            query_threshold=int(options.get("resolution_number_of_sources_query_threshold")),
        )
        for info in found:
            self.join(info)
        self.flush_resolver()

    def subscribe_pattern(
        self,
        pattern: Any,
        on_message: OnMessage | None,
        options: Options,
        setup: Callable[[Subscriber], object] | None = None,
    ) -> Subscriber:
        """A receiver of every topic matching the compiled ``pattern`` (``setup``: as for
        :meth:`subscribe`)."""
        self.check()
        r = self.subscriber_class(self, pattern.pattern, on_message, pattern=pattern)
        if setup is not None:
            setup(r)
        self.wildcards.append(r)
        found = self.resolver.add_wildcard_receiver(
            pattern.pattern,
            self.loop.time(),
            timings=wildcard_query_timings_from(options),
        )
        for info in found:  # the receiver-side cache holds this context's own sources too
            self.join(info)
        self.flush_resolver()
        return r

    def unsubscribe(self, r: Subscriber) -> None:
        r.detach()
        if r.pattern is not None:
            if r in self.wildcards:
                self.wildcards.remove(r)
                self.resolver.remove_wildcard_receiver(r.topic)
                for js in list(self.joined.values()):
                    js.remove(r)
            return
        rs = self.receivers.get(r.topic)
        if rs is None or r not in rs:
            return
        rs.remove(r)
        if not rs:
            del self.receivers[r.topic]
        self.resolver.remove_receiver(r.topic)
        for js in list(self.joined.values()):
            js.remove(r)

    def receivers_of(self, topic: str) -> list[Subscriber]:
        found = list(self.receivers.get(topic, ()))
        for w in self.wildcards:
            if w.pattern is not None and w.pattern.search(topic):
                found.append(w)
        return found

    def wants(self, topic: str) -> bool:
        """Has this context a receiver (or raw receiver) for ``topic``?"""
        return (
            topic in self.receivers
            or topic in self.raw_receivers
            or bool(self.wildcards and self.receivers_of(topic))
        )

    def join(self, info: SourceInfo) -> JoinedSession | None:
        """A source was resolved: join its session for the subscribers and raw receivers of
        its topic."""
        receivers = self.receivers_of(info.topic)
        raws = self.raw_receivers.get(info.topic) or []
        if not receivers and not raws:
            return self.joined.get(info.key)
        if not receivers and self.join_filter is not None and not self.join_filter(info):
            return self.joined.get(info.key)
        js = self.joined.get(info.key)
        new = js is None
        if js is None:
            opts = receivers[0].options if receivers else raws[0][1]
            js = self.open_join(info, opts)
        for r in receivers:
            js.add(info.topic, info.index, r)
        for raw, _opts in raws:
            self._attach_raw(raw, js, info)
        if new:
            self.spawn(self._connect(js, info))
        return js

    def _attach_raw(self, raw: RawReceiver, js: JoinedSession, info: SourceInfo) -> None:
        if any(key == js.key for key, _sink in raw.attached):
            return
        sink = raw.sink_for(info, js.source_string)
        raw.attached.append((js.key, sink))
        js.add_frame_sink(sink)
        source_string = js.source_string
        js.session_watchers.append(lambda active: raw.session_event(info, source_string, active))
        if js.active:
            raw.session_event(info, source_string, True)

    # -------------------------------------------------------------- raw receivers and sources
    def open_raw_receiver(
        self,
        topic: str,
        on_frame: OnFrame | None = None,
        *,
        on_frames: OnFrames | None = None,
        on_session: OnSession | None = None,
        attributes: Any = None,
    ) -> RawReceiver:
        """A raw receiver of ``topic`` (:mod:`umcore.engine.raw`): its sources' LBMC frames, as
        they arrive, one at a time (``on_frame``) or a read's at a time (``on_frames``);
        receiver-scope ``attributes`` set its topic resolution and joins."""
        self.check()
        options = Options("receiver", attributes, topic)
        raw = RawReceiver(topic, on_frame, on_session, on_frames)
        self.raw_receivers.setdefault(topic, []).append((raw, options))
        self._query(topic, options)
        return raw

    def close_raw_receiver(self, raw: RawReceiver) -> None:
        if raw.closed:
            return
        raw.closed = True
        entries = self.raw_receivers.get(raw.topic, [])
        entries[:] = [e for e in entries if e[0] is not raw]
        if not entries:
            self.raw_receivers.pop(raw.topic, None)
        self.resolver.remove_receiver(raw.topic)
        for key, sink in raw.attached:
            js = self.joined.get(key)
            if js is not None:
                js.remove_frame_sink(sink)
        raw.attached.clear()

    async def open_raw_source(
        self,
        topic: str,
        *,
        attributes: Any = None,
        on_event: OnSourceEvent | None = None,
        tir_options: tuple[Any, ...] = (),
    ) -> RawSource:
        """A raw source of ``topic`` (:mod:`umcore.engine.raw`): pre-framed messages sent
        keeping their sequence numbers; source-scope ``attributes`` pick its transport;
        ``tir_options``: TIR topic options it advertises (a DRO proxy source's OTID, COST and
        DOMAIN_ID)."""
        src = await self.open_source(
            topic, Options("source", attributes, topic), on_event, tir_options=tir_options
        )
        return RawSource(src)

    def readvertise(self, src: EngineSource, tir_options: tuple[Any, ...]) -> None:
        """Advertise ``src`` from now on with ``tir_options`` in place of the TIR options of the
        same types it had (a DRO proxy source's new COST after a route change)."""
        replaced = {type(o) for o in tir_options}
        now = self.loop.time()
        for info in self.resolver.cached_sources(src.topic):
            if info.index == src.tidx and info.transport == src.transport_info:
                kept = tuple(o for o in info.options if type(o) not in replaced)
                self.resolver.remove_source(src.topic, src.tidx, src.transport_info)
                self.resolver.add_source(
                    src.topic, src.tidx, src.transport_info, now, options=(*tir_options, *kept)
                )
                self.flush_resolver()
                return

    def open_join(self, info: SourceInfo, options: Options | None) -> JoinedSession:
        """A new joined session for ``info``, not connected yet (:meth:`join` connects it)."""
        js = self.joined[info.key] = JoinedSession(self, info)
        if info.proxy and options is not None:
            # DRO reliable loss (umcore.features.droloss): only for a proxy source's session
            name = "transport_lbtipc_dro_loss_recovery_timeout" if js.kind == "LBT-IPC" else (
                "transport_tcp_dro_loss_recovery_timeout" if js.kind == "TCP" else None
            )  # fmt: skip
            timeout = options.seconds(name) if name is not None else 0.0
            if timeout > 0:
                limit = int(self.options.get("delivery_control_maximum_total_map_entries"))
                js.dc_factory = dro.loss_dc_factory(self.loop, timeout, lambda: js.closed, limit)
        if js.kind in shm.JOIN_KINDS:
            if not shm.prepare_join(self, js, info, options):
                js.closed = True  # another host's LBT-IPC/SMX: nothing to join (seed 6.4.2)
        elif js.kind != "TCP":
            lbt.prepare_join(self, js, info, options)
        return js

    async def _connect(self, js: JoinedSession, info: SourceInfo) -> None:
        if js.kind in shm.JOIN_KINDS:
            if not js.closed:
                await shm.join(self, js, info)
            return
        if js.kind != "TCP":
            await lbt.join(self, js, info)
            return
        conn = ReceiverConnection(js.core, on_active=js.bos, on_closed=js.eos)
        js.conn = conn
        try:
            await self.security.connect(lambda: conn, js.ip, js.port, timeout=CONNECT_TIMEOUT_S)
        except (TimeoutError, OSError) as exc:
            # Never connected: no BOS was given, so no EOS either; a later TIR retries.
            log.info("cannot join %s: %s", js.source_string, exc)
            self.join_failed(js)

    def join_failed(self, js: JoinedSession) -> None:
        js.closed = True
        if self.joined.get(js.key) is js:
            del self.joined[js.key]

    def session_ended(self, js: JoinedSession) -> None:
        if self.joined.get(js.key) is js:
            del self.joined[js.key]

    def count_loss(self, count: int) -> None:
        self.fragments_unrecoverably_lost += count

    def pause_feeding(self, topic: str) -> None:
        for js in self.joined.values():
            if js.conn is not None and js.feeds(topic):
                js.conn.pause_reading()

    def resume_feeding(self, topic: str) -> None:
        for js in self.joined.values():
            if js.conn is not None and js.feeds(topic):
                js.conn.resume_reading()

    # -------------------------------------------------------------- lifetime
    def spawn(self, coro: Coroutine[Any, Any, Any]) -> None:
        task = self.loop.create_task(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    def check(self) -> None:
        if self.closed:
            raise UMError("context is closed")

    def live_objects(self) -> int:
        return len(self.sources) + sum(map(len, self.receivers.values())) + len(self.wildcards)

    async def close(self) -> None:
        """Delete the context; its sources and receivers must be closed first (UM's rule)."""
        if self.closed:
            return
        if self.sources or self.receivers or self.wildcards or self.raw_receivers:
            raise UMError(
                "close the context's sources and receivers first "
                f"({len(self.sources)} sources, {sum(map(len, self.receivers.values()))} "
                "receivers remain)"
            )
        self.closed = True
        self.ctx_names.close()
        self._timer.cancel()
        for t in list(self._tasks):
            t.cancel()
        for t in list(self._tasks):
            with contextlib.suppress(BaseException):
                await t
        for js in list(self.joined.values()):
            if js.conn is not None:
                js.conn.abort()
        self.joined.clear()
        self.security.close()
        for s in list(self.sessions):
            await self.close_session(s)
        if self.lbt is not None:
            for s in self.lbt.source_sessions():
                await self.close_session(s)
        if self.srs is not None:
            await self.srs.close()
        await self.features.close()
        self._close_resolver_sockets()

    # -------------------------------------------------------------- statistics
    def transport_samples(self) -> list[tuple[str, str, str, dict[str, int]]]:
        """(direction, kind, source string, ums_mon.proto fields) per transport session, for
        automatic monitoring."""
        out: list[tuple[str, str, str, dict[str, int]]] = []
        ip = self.advertised_ip
        for s in self.sessions:
            core: Any = s.core
            writer: Any = s.writer
            buffered = core.batch_len + writer.buffered_bytes
            out.append(
                (
                    "source",
                    "tcp",
                    s.transport_info(ip)[1],
                    {"num_clients": int(writer.receivers), "bytes_buffered": buffered},
                )
            )
        if self.lbt is not None:
            for s in self.lbt.source_sessions():
                core = s.core
                out.append(("source", s.kind, s.transport_info(ip)[1], core.monitor_fields()))
        for js in self.joined.values():
            if js.sample is not None:
                out.append(js.sample())
            else:
                st = js.core.stats
                out.append(
                    (
                        "receiver",
                        "tcp",
                        js.source_string,
                        {
                            "bytes_rcved": st.bytes_received,
                            "lbm_msgs_rcved": st.messages_received,
                            "lbm_msgs_no_topic_rcved": st.messages_no_topic,
                            # lbm_reqs_rcved: 0, requests over TCP are not counted yet
                        },
                    )
                )
        return out
