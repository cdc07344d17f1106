"""Sans-IO UDP topic resolution for one context: multicast or unicast through lbmrd.

Theory of operation
-------------------
Topic resolution (TR) is how a receiver learns where the sources of its topic are.  A context's
:class:`TopicResolver` keeps UM's two resolver caches (seed 003 7.1.1, notes 2.2):

- the **source-side cache**: this context's own sources (topic, topic index, transport info);
  it answers TQRs and feeds the advertising schedules;
- the **receiver-side cache**: every source heard of (own ones included), keyed by topic and by
  the source's transport identity; a new receiver is matched against it at once.  As in UM with
  UDP TR, entries are never removed when a source goes away (a re-created source is a new
  entry); the cache is bounded by ``resolver_receiver_map_tablesz`` entries and counts what it
  refused beyond that.

It produces TIRs (advertisements) on each source topic's :class:`PhaseSchedule` and TQRs
(queries) on each receiver topic's, packs what is due at one instant into as few LBMR datagrams
as ``resolver_datagram_max_size`` allows, answers each TQR for one of its topics with an
immediate TIR in a datagram of its own (``resolver_advertisement_send_immediate_response``) and
restarts that topic's sustaining phase.

Where datagrams go depends on the mode: **multicast** (default; group 224.9.10.11, port 12965)
or **unicast** when ``resolver_unicast_daemon`` lists lbmrds (:mod:`umcore.resolver.unicast`
chooses the lbmrd and the keepalives).  Unicast wins when both are configured (seed 7.2).  In
unicast mode nothing is sent until the context has a source or a receiver unless
``resolver_unicast_force_alive`` is set, and datagrams from unknown addresses are dropped
(``resolver_unicast_ignore_unknown_source``).

Context names (Store name resolution: context-info records, LBMR extended type 0x03) are kept
by :class:`~umcore.resolver.names.ContextNames`, which the resolver owns (:attr:`TopicResolver.names`):
it feeds it those records, sends what it produces through the same output path and folds its
timers into :meth:`TopicResolver.next_timer`.

Interface: the caller (``umcore.api``) calls :meth:`handle_timer` at :meth:`next_timer`,
hands every received datagram to :meth:`receive_datagram` and sends what
:meth:`take_datagrams` returns.  Sources found for topics with local receivers come back as
:class:`SourceInfo` events.  A peer's malformed datagram is counted and dropped.
"""

from __future__ import annotations

import random
import re
from collections.abc import Iterable
from typing import Any

from umcore.config.options import OptionReader
from umcore.resolver.dro import (
    DomainTable,
    TrLimiter,
    UseAnswers,
    is_final_advertisement,
    is_proxy_source,
    use_queries,
)
from umcore.resolver.names import ContextName, ContextNames, NameEvent, NameTimings
from umcore.resolver.schedule import (
    PhaseSchedule,
    PhaseTimings,
    advertisement_timings,
    query_timings,
)
from umcore.resolver.unicast import UnicastDaemons, UnicastTimings
from umcore.wire import lbmr, lbmr_options
from umcore.wire.lbmr_ext import (
    TMR_FLAG_WILDCARD_PCRE,
    TRREQ_ADVERTISEMENT,
    TRREQ_CONTEXT_ADVERTISEMENT,
    TRREQ_QUERY,
    TRREQ_WILDCARD_QUERY,
)

__all__ = [
    "DEFAULT_MULTICAST_ADDRESS",
    "DEFAULT_MULTICAST_PORT",
    "ResolverConfig",
    "ResolverStats",
    "SourceInfo",
    "TopicResolver",
    "wildcard_query_timings",
]

Address = tuple[str, int]

DEFAULT_MULTICAST_ADDRESS = "224.9.10.11"
DEFAULT_MULTICAST_PORT = 12965
# A TR datagram's LBMR header: ver/type, TQR count (u8), TIR count (u16).
_LBMR_HEADER = 4
# The TQR count field is one byte: at most 255 TQRs per datagram.
_MAX_TQRS_PER_DATAGRAM = 255
# TIR fixed part after the topic's NUL: transport u8, tlen u8, ttl u16, index u32.
_TIR_FIXED = 8
# TCP transport block with a session id: ip u32, sid u32, port u16.
_TCP_BLOCK = 10
# Wildcard TQRs per datagram: a pattern is at most 255 bytes plus its type byte and NUL, so 30
# of them fit the default 8192-byte resolver_datagram_max_size.
_WC_PER_DATAGRAM = 30
# Packet options a context propagating its domain id appends: LOCAL_DOMAIN (8) and the option
# length record (4); the packers keep this much of each datagram free for them.
_PROPAGATION_BYTES = 12
# Datagrams waiting to be sent: the caller drains them after every call, so this bound only
# trips when the caller stops draining; what it refuses is counted in stats.outbox_dropped.
MAX_OUTBOX = 4096


class ResolverConfig:
    """The context options topic resolution reads, already typed (times in seconds)."""

    __slots__ = (
        "advertisement",
        "context_names",
        "datagram_max_size",
        "domain_id_propagation_timeout",
        "force_alive",
        "ignore_unknown_source",
        "multicast_address",
        "multicast_port",
        "pattern_answer_limits",
        "query",
        "query_threshold",
        "receiver_map_max",
        "security_flags",
        "send_immediate_response",
        "send_initial_advertisement",
        "topic_answer_limits",
        "unicast_daemons",
        "unicast_timings",
    )

    def __init__(
        self,
        *,
        unicast_daemons: Iterable[Address] = (),
        multicast_address: str = DEFAULT_MULTICAST_ADDRESS,
        multicast_port: int = DEFAULT_MULTICAST_PORT,
        advertisement: PhaseTimings | None = None,
        query: PhaseTimings | None = None,
        unicast_timings: UnicastTimings | None = None,
        datagram_max_size: int = 8192,
        force_alive: bool = False,
        ignore_unknown_source: bool = True,
        send_immediate_response: bool = True,
        send_initial_advertisement: bool = True,
        query_threshold: int = 10_000_000,
        receiver_map_max: int = 131111,
        context_names: NameTimings | None = None,
        security_flags: int = 0,
        domain_id_propagation_timeout: int = 0,
        topic_answer_limits: tuple[int, int] = (0, 0),
        pattern_answer_limits: tuple[int, int] = (0, 0),
    ) -> None:
        self.unicast_daemons = list(unicast_daemons)
        #: ``resolver_domain_id_active_propagation_timeout`` (seconds; -1, 0 or N).
        self.domain_id_propagation_timeout = domain_id_propagation_timeout
        #: (bits/s, records/s) budgets of Use Query Responses for topics and for patterns
        #: (:mod:`umcore.resolver.dro`; 0 = no limit).
        self.topic_answer_limits = topic_answer_limits
        self.pattern_answer_limits = pattern_answer_limits
        #: This context's TLS/LZ4 bits (``use_tls``, ``compression``): TIRs of sources whose
        #: bits differ are ignored and counted (seed 10.4.4, 10.5.1).
        self.security_flags = security_flags
        self.multicast_address = multicast_address
        self.multicast_port = multicast_port
        self.advertisement = advertisement or advertisement_timings()
        self.query = query or query_timings()
        self.unicast_timings = unicast_timings or UnicastTimings()
        self.datagram_max_size = datagram_max_size
        self.force_alive = force_alive
        self.ignore_unknown_source = ignore_unknown_source
        self.send_immediate_response = send_immediate_response
        self.send_initial_advertisement = send_initial_advertisement
        self.query_threshold = query_threshold
        self.receiver_map_max = receiver_map_max
        self.context_names = context_names or NameTimings()

    @classmethod
    def from_options(cls, o: OptionReader) -> ResolverConfig:
        """From a context's options (the registry's defaults and units)."""
        return cls(
            unicast_daemons=unicast_daemons(o.get("resolver_unicast_daemon")),
            multicast_address=str(o.get("resolver_multicast_address")),
            multicast_port=int(o.get("resolver_multicast_port")),
            unicast_timings=UnicastTimings(
                o.seconds("resolver_unicast_keepalive_interval"),
                o.seconds("resolver_unicast_activity_timeout"),
                o.seconds("resolver_unicast_check_interval"),
                o.seconds("resolver_unicast_change_interval"),
            ),
            datagram_max_size=int(o.get("resolver_datagram_max_size")),
            force_alive=bool(o.get("resolver_unicast_force_alive")),
            ignore_unknown_source=bool(o.get("resolver_unicast_ignore_unknown_source")),
            context_names=NameTimings.from_options(o),
            security_flags=(lbmr_options.EXFUNC_TLS if bool(o.get("use_tls")) else 0)
            | (lbmr_options.EXFUNC_COMPRESSION if str(o.get("compression")) == "lz4" else 0),
            domain_id_propagation_timeout=int(
                o.get("resolver_domain_id_active_propagation_timeout")
            ),
            # [inferred] use-query answers are receiver-side TR traffic (umcore.resolver.dro)
            topic_answer_limits=(
                int(o.get("resolver_sustain_query_bps")),
                int(o.get("resolver_sustain_queries_per_second")),
            ),
            pattern_answer_limits=(
                int(o.get("resolver_wildcard_query_bps")),
                int(o.get("resolver_wildcard_queries_per_second")),
            ),
        )


def unicast_daemons(value: Any) -> list[Address]:
    """``resolver_unicast_daemon`` entries (:class:`~umcore.config.values.ResolverEntry`) as
    (ip, port); their ``Iface[:SrcPort]->`` parts are the engine's (they name local
    interfaces)."""
    out: list[Address] = []
    for entry in value or ():
        address = getattr(entry, "address", None)
        port = getattr(entry, "port", None)
        if address is not None and port is not None:
            out.append((str(address), int(port)))
    return out


class ResolverStats:
    """Counters of one resolver (what it sent, received and refused)."""

    __slots__ = (
        "cache_refused",
        "datagrams_dropped_malformed",
        "datagrams_dropped_type",
        "datagrams_dropped_unknown_source",
        "datagrams_received",
        "datagrams_sent",
        "final_advertisements",
        "keepalives_sent",
        "outbox_dropped",
        "tirs_received",
        "tirs_sent",
        "tqrs_received",
        "tqrs_sent",
        "tr_requests_received",
        "use_queries_received",
    )

    def __init__(self) -> None:
        self.datagrams_received = 0
        self.datagrams_sent = 0
        self.datagrams_dropped_malformed = 0
        #: Advertisements ignored because the source's TLS/compression setting differs from
        #: this context's (UM's ``tr_dgrams_dropped_type``: counted, never logged).
        self.datagrams_dropped_type = 0
        self.datagrams_dropped_unknown_source = 0
        self.tirs_received = 0
        self.tirs_sent = 0
        self.tqrs_received = 0
        self.tqrs_sent = 0
        self.keepalives_sent = 0
        self.cache_refused = 0  # receiver-side cache full (resolver_receiver_map_tablesz)
        self.outbox_dropped = 0  # datagrams refused because the caller stopped draining
        self.use_queries_received = 0  # TOPIC_USE queries (TMRs) from DRO portals
        self.tr_requests_received = 0  # topic resolution requests (LBMR ext 0x04)
        self.final_advertisements = 0  # TIRs marking a (proxy) source's end


# Transports this client can join (TIRs of other types are cached nowhere and ignored).
_JOINABLE = (lbmr.TCPInfo, lbmr.LBTRUInfo, lbmr.LBTRMInfo, lbmr.LBTIPCInfo, lbmr.LBTSMXInfo)
_SECURITY_FLAGS = lbmr_options.EXFUNC_TLS | lbmr_options.EXFUNC_COMPRESSION


class SourceInfo:
    """A source of a topic, as learned from a TIR (or from this context's own source cache).

    ``key`` identifies the transport session (type, ip, port, session id; LBT-RM adds group and
    destination port, ``port`` being its NAK port); with ``index`` it identifies the topic
    source.  ``transport`` is the codec's transport-info object (TCP, LBT-RU, LBT-RM, LBT-IPC or
    LBT-SMX; the last two keyed by host id, session id and transport id).
    """

    __slots__ = (
        "index", "ip", "key", "options", "port", "proxy", "session_id", "topic", "transport",
    )  # fmt: skip

    def __init__(
        self,
        topic: str,
        index: int,
        transport: lbmr.TCPInfo | lbmr.LBTRMInfo,
        options: tuple[Any, ...] = (),
        *,
        proxy: bool = False,
    ) -> None:
        self.topic = topic
        #: Published by a DRO proxy source (:func:`umcore.resolver.dro.is_proxy_source`): the
        #: ``transport_*_dro_loss_recovery_timeout`` options apply to its session.
        self.proxy = proxy
        self.index = index
        self.transport = transport
        #: The TIR's topic options (late join 0x04, extended functionality 0x0E, ...).
        self.options = options
        self.session_id: int | None
        self.key: tuple[object, ...]
        shm: Any = transport
        if isinstance(shm, lbmr.LBTIPCInfo):  # LBT-IPC and LBT-SMX: one host's memory
            self.ip, self.port = "", shm.xport_id
            self.session_id = shm.session_id
            kind = "LBT-SMX" if type(shm) is lbmr.LBTSMXInfo else "LBT-IPC"
            self.key = (kind, shm.host_id, shm.session_id, shm.xport_id)
        elif isinstance(transport, lbmr.LBTRMInfo):
            self.ip, self.port = transport.src_ip, transport.sport
            self.session_id = transport.session_id
            self.key = (
                "LBTRM",
                transport.src_ip,
                transport.sport,
                transport.session_id,
                transport.mc_group,
                transport.dport,
            )
        else:
            self.ip = transport.ip
            self.port = transport.port
            self.session_id = transport.session_id
            kind = "LBT-RU" if type(transport) is lbmr.LBTRUInfo else "TCP"
            self.key = (kind, transport.ip, transport.port, transport.session_id or 0)

    def __repr__(self) -> str:
        sid = self.session_id or 0
        kind = self.key[0]
        return f"SourceInfo({self.topic!r}, {kind}:{self.ip}:{self.port}:{sid:08x}[{self.index}])"


class _SourceTopic:
    __slots__ = ("schedule", "sources")

    def __init__(self, schedule: PhaseSchedule) -> None:
        self.schedule = schedule
        self.sources: list[SourceInfo] = []


class _ReceiverTopic:
    __slots__ = ("count", "schedule", "threshold")

    def __init__(self, schedule: PhaseSchedule) -> None:
        self.schedule = schedule
        self.count = 1  # receivers of this topic in the context
        self.threshold = 10_000_000


class _WildcardPattern:
    __slots__ = ("count", "regex", "schedule")

    def __init__(self, regex: re.Pattern[str], schedule: PhaseSchedule) -> None:
        self.regex = regex
        self.schedule = schedule
        self.count = 1


def wildcard_query_timings(
    min_interval_ms: float = 50, max_interval_ms: float = 1000, duration_s: float = 60
) -> PhaseTimings:
    """Wildcard receivers query in an initial phase only (``resolver_query_minimum_interval``
    50 ms doubling to ``resolver_query_maximum_interval`` 1000 ms for
    ``resolver_query_minimum_duration`` 60 s), then go quiescent: no sustaining phase."""
    return PhaseTimings(min_interval_ms / 1000, max_interval_ms / 1000, duration_s, 0, 0)


def wildcard_query_timings_from(o: OptionReader) -> PhaseTimings:
    """A wildcard receiver's query timings from its options."""
    return wildcard_query_timings(
        o.get("resolver_query_minimum_interval"),
        o.get("resolver_query_maximum_interval"),
        o.get("resolver_query_minimum_duration"),
    )


class TopicResolver:
    """UDP topic resolution of one context (see the module docstring)."""

    def __init__(
        self,
        config: ResolverConfig,
        now: float,
        *,
        rng: random.Random | None = None,
        instance: bytes = bytes(8),
    ) -> None:
        """``instance``: the context's instance (ctxinst), carried by its context-info records."""
        self.config = config
        self.stats = ResolverStats()
        self._sources: dict[str, _SourceTopic] = {}
        self._receivers: dict[str, _ReceiverTopic] = {}
        # Wildcard receivers: pattern -> (compiled, schedule, count); topic -> matches (memo).
        self._wildcards: dict[str, _WildcardPattern] = {}
        self._wc_memo: dict[str, bool] = {}
        # Receiver-side cache: topic -> {(key, index): SourceInfo}
        self._cache: dict[str, dict[tuple[object, ...], SourceInfo]] = {}
        self._cache_size = 0
        self._outbox: list[tuple[bytes, Address]] = []
        self.unicast: UnicastDaemons | None = None
        if config.unicast_daemons:
            self.unicast = UnicastDaemons(
                config.unicast_daemons, now, timings=config.unicast_timings, rng=rng
            )
        self._alive = config.force_alive
        #: The context-name table (:mod:`umcore.resolver.names`).
        self.names = ContextNames(config.context_names, instance=instance)
        #: This context's TRD id and the routes to other domains, as the DROs advertise them
        #: (:mod:`umcore.resolver.dro`).
        self.domains = DomainTable(config.domain_id_propagation_timeout)
        #: Use Query Responses waiting for their rate budget.
        self.use_answers = UseAnswers(
            TrLimiter(*config.topic_answer_limits, now),
            TrLimiter(*config.pattern_answer_limits, now),
        )
        # Sources whose final advertisement arrived, for take_ended().
        self._ended: list[SourceInfo] = []
        #: Answer DRO use queries and TR requests for this context's receivers.  A DRO portal's
        #: own contexts set it False: their proxy receivers are not interest (umcore.engine.dro).
        self.answer_use_queries = True

    # ----------------------------------------------------------------- local objects
    @property
    def multicast_group(self) -> Address:
        return (self.config.multicast_address, self.config.multicast_port)

    def add_source(
        self,
        topic: str,
        index: int,
        transport: lbmr.TCPInfo | lbmr.LBTRMInfo,
        now: float,
        *,
        timings: PhaseTimings | None = None,
        send_initial: bool | None = None,
        options: tuple[Any, ...] = (),
    ) -> list[SourceInfo]:
        """A local source of ``topic`` exists; returns it as an event if local receivers want it.

        ``timings``/``send_initial``: the source's own ``resolver_advertisement_*`` and
        ``resolver_send_initial_advertisement`` (first source of a topic wins); default: the
        config's."""
        self._alive = True
        entry = self._sources.get(topic)
        if entry is None:
            if send_initial is None:
                send_initial = self.config.send_initial_advertisement
            sched = PhaseSchedule(
                timings or self.config.advertisement, now, send_first=send_initial
            )
            entry = self._sources[topic] = _SourceTopic(sched)
        info = SourceInfo(topic, index, transport, options)
        entry.sources.append(info)
        new = self._remember(info)
        wanted = topic in self._receivers or (self._wildcards and self._wildcard_wants(topic))
        return [info] if new and wanted else []

    def remove_source(
        self, topic: str, index: int, transport: lbmr.TCPInfo | lbmr.LBTRMInfo
    ) -> None:
        entry = self._sources.get(topic)
        if entry is None:
            return
        entry.sources = [
            s for s in entry.sources if not (s.index == index and s.transport == transport)
        ]
        if not entry.sources:
            del self._sources[topic]

    def add_receiver(
        self,
        topic: str,
        now: float,
        *,
        timings: PhaseTimings | None = None,
        query_threshold: int | None = None,
    ) -> list[SourceInfo]:
        """A local receiver of ``topic`` exists; returns the sources already in the cache.

        ``timings``/``query_threshold``: the receiver's ``resolver_query_*`` and
        ``resolution_number_of_sources_query_threshold`` (first receiver of a topic wins)."""
        self._alive = True
        entry = self._receivers.get(topic)
        if entry is None:
            entry = self._receivers[topic] = _ReceiverTopic(
                PhaseSchedule(timings or self.config.query, now)
            )
            entry.threshold = query_threshold or self.config.query_threshold
        else:
            entry.count += 1
        known = list(self._cache.get(topic, {}).values())
        if len(known) >= entry.threshold:
            entry.schedule.stop()
        return known

    def has_receiver(self, topic: str) -> bool:
        """A receiver of ``topic`` is registered here."""
        return topic in self._receivers

    def wildcard_pattern(self, pattern: str) -> re.Pattern[str] | None:
        """The compiled regex of a registered wildcard receiver's ``pattern``, else None."""
        entry = self._wildcards.get(pattern)
        return None if entry is None else entry.regex

    def remove_receiver(self, topic: str) -> None:
        entry = self._receivers.get(topic)
        if entry is None:
            return
        entry.count -= 1
        if entry.count <= 0:
            del self._receivers[topic]

    def add_wildcard_receiver(
        self, pattern: str, now: float, *, timings: PhaseTimings | None = None
    ) -> list[SourceInfo]:
        """A wildcard receiver for ``pattern`` (PCRE, matched with Python's ``re.search``);
        returns the cached sources whose topics match.  Raises ``re.error`` for a bad pattern."""
        self._alive = True
        entry = self._wildcards.get(pattern)
        if entry is None:
            regex = re.compile(pattern)
            sched = PhaseSchedule(timings or wildcard_query_timings(), now)
            self._wildcards[pattern] = _WildcardPattern(regex, sched)
            self._wc_memo.clear()
        else:
            entry.count += 1
            regex = entry.regex
        return [
            info
            for topic, per in self._cache.items()
            if regex.search(topic)
            for info in per.values()
        ]

    def remove_wildcard_receiver(self, pattern: str) -> None:
        entry = self._wildcards.get(pattern)
        if entry is None:
            return
        entry.count -= 1
        if entry.count <= 0:
            del self._wildcards[pattern]
            self._wc_memo.clear()

    def _wildcard_wants(self, topic: str) -> bool:
        hit = self._wc_memo.get(topic)
        if hit is None:
            hit = any(w.regex.search(topic) for w in self._wildcards.values())
            if len(self._wc_memo) < self.config.receiver_map_max:
                self._wc_memo[topic] = hit
        return hit

    def cached_sources(self, topic: str) -> list[SourceInfo]:
        return list(self._cache.get(topic, {}).values())

    def request_resolution(self, now: float) -> None:
        """``lbm_context_topic_resolution_request()``: quiescent topics restart sustaining."""
        for s in self._sources.values():
            s.schedule.restart_sustaining(now)
        for r in self._receivers.values():
            r.schedule.restart_sustaining(now)

    def _remember(self, info: SourceInfo) -> bool:
        per_topic = self._cache.get(info.topic)
        if per_topic is None:
            per_topic = self._cache[info.topic] = {}
        k = (info.key, info.index)
        if k in per_topic:
            return False
        if self._cache_size >= self.config.receiver_map_max:
            self.stats.cache_refused += 1
            return False
        per_topic[k] = info
        self._cache_size += 1
        return True

    # ----------------------------------------------------------------- input
    def receive_datagram(
        self, data: bytes | memoryview, addr: Address, now: float
    ) -> list[SourceInfo]:
        """One TR datagram from ``addr``; returns the sources it announced to local receivers.

        Every TIR for a topic with local receivers is returned (not only new ones): the caller
        joins what it has not joined and ignores the rest, which lets it re-join a source whose
        connection dropped.
        """
        st = self.stats
        st.datagrams_received += 1
        uc = self.unicast
        if uc is not None:
            idx = uc.index_of(addr)
            if idx is None:
                if self.config.ignore_unknown_source:
                    st.datagrams_dropped_unknown_source += 1
                    return []
            else:
                uc.heard_from(idx, now)
        try:
            packet = lbmr.decode(bytes(data))
        except lbmr.LBMRError:
            st.datagrams_dropped_malformed += 1
            return []
        found: list[SourceInfo] = []
        from_dro = False
        if packet.options:
            from_dro = self._packet_options(packet.options, now)
        body = packet.body
        if type(body) is lbmr.ContextInfo:
            self.names.receive_record(body, now)
            self._flush_names(now)
            return found
        if packet.type not in (lbmr.LBMR_TYPE_NORMAL, lbmr.LBMR_TYPE_WC_TQRS):
            if body is not None:
                self._receive_other(body, now)
            return []  # keepalives (lbmrd's type 0 has no records) and other types
        for tqr in packet.tqrs:
            if type(tqr) is lbmr.WildcardTQR:
                st.tqrs_received += 1
                self._answer_wildcard(tqr, now)
                continue
            if type(tqr) is not lbmr.TQR:
                continue
            st.tqrs_received += 1
            topic = tqr.topic
            entry = self._sources.get(topic)
            if entry is None:
                continue
            entry.schedule.restart_sustaining(now)
            if self.config.send_immediate_response:
                self._emit(self._pack([], [self._tir(s) for s in entry.sources]), now)
        for tir in packet.tirs:
            st.tirs_received += 1
            transport = tir.transport_info
            if type(transport) not in _JOINABLE:
                continue  # other transports (RDMA, unknown) are not implemented by this client
            if self.security_mismatch(tir.options):
                continue
            info = SourceInfo(
                tir.topic,
                tir.index,
                transport,
                tir.options,
                proxy=is_proxy_source(tir.options, from_dro=from_dro),
            )
            if is_final_advertisement(tir.options):
                self._final(info)
                continue
            self._remember(info)
            rcv = self._receivers.get(tir.topic)
            if rcv is None:
                if self._wildcards and self._wildcard_wants(tir.topic):
                    found.append(info)
            else:
                found.append(info)
                if len(self._cache[tir.topic]) >= rcv.threshold:
                    rcv.schedule.stop()
        return found

    # ----------------------------------------------------------------- DROs
    def _packet_options(self, options: tuple[Any, ...], now: float) -> bool:
        """A datagram's packet options (LOCAL_DOMAIN, SRC_TYPE); True if a DRO sent it."""
        self.domains.receive_packet(options, now)
        return any(
            type(o) is lbmr_options.SrcTypeOption and o.src_type == lbmr_options.SRC_TYPE_TNWGD
            for o in options
        )

    def _receive_other(self, body: Any, now: float) -> None:
        """Topic management (use queries), TR requests and remote domain routes."""
        t = type(body)
        if t is lbmr.TopicManagement:
            if not self.answer_use_queries:
                return
            for symbol, pattern_flag in use_queries(body):
                self.stats.use_queries_received += 1
                if pattern_flag:
                    # our wildcard receivers are PCRE (their TQRs say so)
                    if pattern_flag & TMR_FLAG_WILDCARD_PCRE and symbol in self._wildcards:
                        self.use_answers.add(symbol, TMR_FLAG_WILDCARD_PCRE)
                elif symbol in self._receivers:
                    self.use_answers.add(symbol)
            self._send_use_answers(now)
        elif t is lbmr.TopicResRequest:
            self.stats.tr_requests_received += 1
            self.receive_tr_request(body.flags, now)
        elif t is lbmr.RemoteDomainRoute:
            self.domains.receive_route(body.ip, body.port, body.domains, now)

    def receive_tr_request(self, flags: int, now: float) -> None:
        """A topic resolution request (LBMR ext 0x04) with ``flags`` TRREQ_*: receivers and
        wildcard receivers answer with Use Query Responses, sources restart advertising,
        CONTEXT_ADVERTISEMENT re-sends this context's names (context-name queries keep their
        own schedule: CONTEXT_QUERY changes nothing)."""
        if not self.answer_use_queries:
            flags &= ~(TRREQ_QUERY | TRREQ_WILDCARD_QUERY)
        if flags & TRREQ_QUERY:
            for topic in self._receivers:
                self.use_answers.add(topic)
        if flags & TRREQ_WILDCARD_QUERY:
            for pattern in self._wildcards:
                self.use_answers.add(pattern, TMR_FLAG_WILDCARD_PCRE)
        if flags & TRREQ_ADVERTISEMENT:
            for s in self._sources.values():
                s.schedule.restart_sustaining(now)
        if flags & TRREQ_CONTEXT_ADVERTISEMENT:
            for e in self.names.own():  # the names this context advertises, once more now
                self.names.advertise(e.name, e.ip, e.port, domain_id=e.domain_id)
            self._flush_names(now)
        self._send_use_answers(now)

    def _send_use_answers(self, now: float) -> None:
        tmrs = self.use_answers.take(now)
        if not tmrs:
            return
        # TMB head + LBMR header, then TMRs up to the datagram size
        limit = self.config.datagram_max_size - _LBMR_HEADER - 4 - self._reserve()
        chunk: list[lbmr.TMR] = []
        size = 0
        out: list[bytes] = []
        for tmr in tmrs:
            n = 5 + len(tmr.topic.encode())
            if chunk and size + n > limit:
                out.append(self._tmb(chunk))
                chunk, size = [], 0
            chunk.append(tmr)
            size += n
        if chunk:
            out.append(self._tmb(chunk))
        self._emit(out, now)

    @staticmethod
    def _tmb(tmrs: list[lbmr.TMR]) -> bytes:
        body = lbmr.TopicManagement(tmrs)
        return lbmr.encode(lbmr.LBMRPacket(lbmr.LBMR_TYPE_TOPIC_MGMT, body=body))

    def _final(self, info: SourceInfo) -> None:
        """A final advertisement: forget the source; its receivers get EOS (take_ended)."""
        self.stats.final_advertisements += 1
        per_topic = self._cache.get(info.topic)
        if per_topic is not None and per_topic.pop((info.key, info.index), None) is not None:
            self._cache_size -= 1
            if not per_topic:
                del self._cache[info.topic]
        if info.topic in self._receivers or (self._wildcards and self._wildcard_wants(info.topic)):
            self._ended.append(info)

    def take_ended(self) -> list[SourceInfo]:
        """Sources whose final advertisement arrived since the last call (for EOS)."""
        out, self._ended = self._ended, []
        return out

    def _reserve(self) -> int:
        """Bytes kept free in our datagrams for the LOCAL_DOMAIN packet options."""
        d = self.domains
        return _PROPAGATION_BYTES if d.domain_id is not None and d.propagation_timeout else 0

    def security_mismatch(self, options: tuple[Any, ...]) -> bool:
        """Do a source's TIR ``options`` advertise TLS/LZ4 settings other than this context's?
        Counted in ``datagrams_dropped_type`` when they do (the SRS path asks here too)."""
        flags = 0
        for opt in options:
            if type(opt) is lbmr_options.ExFuncOption:
                flags = opt.functionality_flags & _SECURITY_FLAGS
                break
        if flags == self.config.security_flags:
            return False
        self.stats.datagrams_dropped_type += 1
        return True

    def _answer_wildcard(self, tqr: lbmr.WildcardTQR, now: float) -> None:
        """Every local source whose topic matches the pattern answers (immediate TIRs)."""
        try:
            regex = re.compile(tqr.pattern)
        except (re.error, RecursionError):
            self.stats.datagrams_dropped_malformed += 1
            return
        tirs: list[lbmr.TIR] = []
        for topic, entry in self._sources.items():
            if regex.search(topic):
                entry.schedule.restart_sustaining(now)
                tirs.extend(self._tir(s) for s in entry.sources)
        if tirs and self.config.send_immediate_response:
            self._emit(self._pack([], tirs), now)

    # ----------------------------------------------------------------- output
    @staticmethod
    def _tir(info: SourceInfo) -> lbmr.TIR:
        return lbmr.TIR(info.topic, info.index, info.transport, info.options)

    def _pack(self, tqrs: list[str], tirs: list[lbmr.TIR]) -> list[bytes]:
        """LBMR datagrams holding ``tqrs`` then ``tirs``, each within the datagram max size."""
        out: list[bytes] = []
        limit = self.config.datagram_max_size - self._reserve()
        cur_q: list[lbmr.TQR] = []
        cur_t: list[lbmr.TIR] = []
        size = _LBMR_HEADER

        def flush() -> None:
            nonlocal cur_q, cur_t, size
            if cur_q or cur_t:
                pkt = lbmr.LBMRPacket(lbmr.LBMR_TYPE_NORMAL, tqrs=tuple(cur_q), tirs=tuple(cur_t))
                out.append(lbmr.encode(pkt))
            cur_q, cur_t, size = [], [], _LBMR_HEADER

        for topic in tqrs:
            n = len(topic.encode()) + 1
            if size + n > limit or len(cur_q) >= _MAX_TQRS_PER_DATAGRAM or cur_t:
                flush()
            cur_q.append(lbmr.TQR(topic))
            size += n
            self.stats.tqrs_sent += 1
        for tir in tirs:
            n = len(tir.topic.encode()) + 1 + _TIR_FIXED + _TCP_BLOCK
            if size + n > limit:
                flush()
            cur_t.append(tir)
            size += n
            self.stats.tirs_sent += 1
        flush()
        return out

    def emit_datagram(self, data: bytes, now: float) -> None:
        """Queue one LBMR datagram built by the caller (a DRO portal's interest, use queries,
        domain routes) to where this resolver's datagrams go: the multicast group, or the
        current lbmrd (nothing is sent in unicast mode before the context is alive)."""
        self._alive = True
        self._emit([data], now)

    def _emit(self, datagrams: list[bytes], now: float) -> None:
        uc = self.unicast
        if uc is not None:
            if not self._alive:
                return
            uc.advance(now)
            dest = uc.destination()
            uc.sent_to(uc.current, now)
        else:
            dest = self.multicast_group
        domain = self.domains.propagate(now)
        if domain is not None:
            trailer = lbmr_options.encode_packet_options((lbmr_options.LocalDomainOption(domain),))
            datagrams = [bytes((d[0] | lbmr.HDR_OPTS_FLAG,)) + d[1:] + trailer for d in datagrams]
        for d in datagrams:
            if len(self._outbox) >= MAX_OUTBOX:
                self.stats.outbox_dropped += 1
                continue
            self._outbox.append((d, dest))
            self.stats.datagrams_sent += 1

    # ----------------------------------------------------------------- context names
    def advertise_context_name(
        self, name: str, ip: str, port: int, now: float, *, domain_id: int = 0
    ) -> ContextName:
        """Advertise this context's ``name`` at ``domain_id:ip:port`` (sent at once; answered
        to every query for it); UMError for an invalid name."""
        self._alive = True
        entry = self.names.advertise(name, ip, port, domain_id=domain_id)
        self._flush_names(now)
        return entry

    def withdraw_context_name(self, name: str) -> bool:
        """Stop advertising ``name``; False if it was not advertised."""
        return self.names.withdraw(name)

    def query_context_name(self, name: str, now: float) -> ContextName | None:
        """Want ``name`` resolved (reference counted): its address if known, else the queries
        start (the first at once); the answer comes as a NameResolved event."""
        self._alive = True
        known = self.names.query(name, now)
        self.names.handle_timer(now)
        self._flush_names(now)
        return known

    def cancel_context_name(self, name: str) -> None:
        """One fewer want of ``name``."""
        self.names.cancel(name)

    def take_name_events(self) -> list[NameEvent]:
        """What happened to the names (resolved, changed, duplicates...) since the last call."""
        return self.names.take_events()

    def _flush_names(self, now: float) -> None:
        records = self.names.take_records()
        if records:
            pkts = [lbmr.LBMRPacket(lbmr.LBMR_TYPE_EXT, body=r) for r in records]
            self._emit([lbmr.encode(p) for p in pkts], now)

    def handle_timer(self, now: float) -> None:
        """Send every record whose time has come, and the unicast keepalives."""
        tirs: list[lbmr.TIR] = []
        for entry in self._sources.values():
            sched = entry.schedule
            if sched.due(now):
                sched.fire(now)
                tirs.extend(self._tir(s) for s in entry.sources)
        tqrs: list[str] = []
        for topic, rcv in self._receivers.items():
            if rcv.schedule.due(now):
                rcv.schedule.fire(now)
                tqrs.append(topic)
        wc = []
        for pattern, w in self._wildcards.items():
            if w.schedule.due(now):
                w.schedule.fire(now)
                wc.append(lbmr.WildcardTQR(lbmr.PATTERN_PCRE, pattern))
        self.names.handle_timer(now)
        self._flush_names(now)
        self._send_use_answers(now)
        uc = self.unicast
        if uc is not None:
            uc.advance(now)
        if tirs or tqrs:
            self._emit(self._pack(tqrs, tirs), now)
        for i in range(0, len(wc), _WC_PER_DATAGRAM):
            pkt = lbmr.LBMRPacket(lbmr.LBMR_TYPE_WC_TQRS, tqrs=wc[i : i + _WC_PER_DATAGRAM])
            self.stats.tqrs_sent += len(pkt.tqrs)
            self._emit([lbmr.encode(pkt)], now)
        if uc is not None and self._alive:
            kind = (
                lbmr.LBMR_TYPE_UCAST_SRC_ALIVE if self._sources else lbmr.LBMR_TYPE_UCAST_RCV_ALIVE
            )
            for i in uc.keepalives_due(now):
                if len(self._outbox) >= MAX_OUTBOX:
                    self.stats.outbox_dropped += 1
                    continue
                self._outbox.append((lbmr.encode(lbmr.LBMRPacket(kind)), uc.daemons[i]))
                self.stats.keepalives_sent += 1

    def take_datagrams(self) -> list[tuple[bytes, Address]]:
        """What to send now, with destinations; the outbox is emptied."""
        out, self._outbox = self._outbox, []
        return out

    def next_timer(self) -> float | None:
        deadline: float | None = None
        for entry in self._sources.values():
            d = entry.schedule.next_due
            if d is not None and (deadline is None or d < deadline):
                deadline = d
        for rcv in self._receivers.values():
            d = rcv.schedule.next_due
            if d is not None and (deadline is None or d < deadline):
                deadline = d
        for w in self._wildcards.values():
            d = w.schedule.next_due
            if d is not None and (deadline is None or d < deadline):
                deadline = d
        d = self.names.next_timer()
        if d is not None and (deadline is None or d < deadline):
            deadline = d
        d = self.use_answers.next_timer()
        if d is not None and (deadline is None or d < deadline):
            deadline = d
        uc = self.unicast
        if uc is not None and self._alive:
            d = uc.next_timer(keepalives=True)
            if deadline is None or d < deadline:
                deadline = d
        return deadline

    @property
    def source_topics(self) -> list[str]:
        return list(self._sources)

    @property
    def receiver_topics(self) -> list[str]:
        return list(self._receivers)
