"""TCP-based topic resolution for an :class:`~umcore.engine.context.Engine`: ``resolver_service``.

Theory of operation
-------------------
When the context option ``resolver_service`` lists SRS addresses (seed 7.3; at most five), the
context keeps one TCP connection to **every** SRS (hot/hot) through an
:class:`~umcore.srs.client.SRSClient` core and its :class:`~umcore.aio.srs.SRSClientConnector`
adapter, owned by one :class:`SRSResolution`.  The context talks to it through its topic
resolver: :class:`SRSTopicResolver` is the UDP :class:`~umcore.resolver.core.TopicResolver`
whose local-object calls are also told to the SRSes:

- a source (``add_source``/``remove_source``) becomes an SIR (source information record) /
  SDR (source delete record).  The SIR carries UM's source string (``TCP:ip:port:sid``,
  ``LBT-RU:ip:port:sid``, ``LBTRM:ip:nakport:sid:group:dport``), the topic index, the
  context's request port and the EXFUNC functionality flags; its OTID (originating transport
  id) is the late-join OTID of :func:`umcore.features.latejoin.make_otid` when the source
  offers late join (so a receiver recovers the transport index from it), else one built from
  the transport's own address and session id [inferred: real UM's OTID layout is not public];
- a receiver topic is an RIR (one per topic, reference counted), a wildcard receiver a WIR.

What the SRSes report comes back as events: :class:`~umcore.srs.client.SourceResolved` is
turned into the same :class:`~umcore.resolver.core.SourceInfo` a TIR gives (the source string
parsed back into a transport info, the late-join and EXFUNC options rebuilt from the SIR) and
joined through ``Engine.join`` exactly like a TIR from UDP resolution: same transport join,
same BOS/EOS.  A receiver created later finds the SRS-known sources of its topic through
``add_receiver``/``add_wildcard_receiver`` (the SRS sends an SIR once, not periodically).
:class:`~umcore.srs.client.SourceWithdrawn` is a source going away: the topic's receivers of it
get EOS and the context leaves that topic of the session (the whole session when it was the
last topic).  One exception: a withdrawal decided by the client itself after a re-sync
(``slot`` -1: no SRS re-sent the source within the grace period) does not tear down a TCP
session that is still connected — the live connection is better evidence than silence; the
source is only forgotten, and its end will show as the connection's end.

The SRS sends an SIR once, where UDP TR repeats TIRs: a join that fails before BOS (connect
refused or timed out) is retried every ``REJOIN_INTERVAL_S``, at most ``MAX_REJOIN_ATTEMPTS``
times, while the SRSes vouch for the source.  A session that ended after BOS is not rejoined
(its receivers had EOS; as in UM, the source is gone until advertised again).

Context names (Store name resolution) travel both ways too: a name this context advertises is
also a CNIR, a name it queries a CNQR (sent once: the SRS keeps the query and relays a CNIR for
the name whenever one arrives); the SRS's CNIR and CNER answers feed the resolver's context-name
table (:mod:`umcore.resolver.names`), whose events the engine reports.

``resolver_disable_udp_topic_resolution`` 1 turns UDP TR off entirely: the context opens no
resolver socket and :class:`SRSTopicResolver` (``udp=False``) neither schedules nor hands out a
datagram; its caches still join a context's own sources to its own receivers.

Reconnects, keepalives and re-synchronisation after an SRS restart are the client core's; the
context does nothing for them.  Limitations: the ``Iface[:SrcPort]->`` part of a
``resolver_service`` entry is not honoured (the kernel picks the local address and port), and
DNS names are resolved by each connect, not cached.
"""

from __future__ import annotations

import asyncio
import logging
import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any, Protocol, cast

from umcore.aio.shm import host_id as shm_host_id
from umcore.aio.srs import SRSClientConnector
from umcore.aio.timer import CoreTimer
from umcore.engine.features import ContextFeatures
from umcore.engine.options import Options
from umcore.engine.receive import JoinedSession
from umcore.errors import LocalProtocolError
from umcore.features.latejoin import make_otid, parse_otid
from umcore.resolver.core import ResolverConfig, SourceInfo, TopicResolver
from umcore.resolver.names import ContextName, ContextNames
from umcore.resolver.schedule import PhaseTimings
from umcore.srs.client import (
    MAX_SERVERS,
    ContextNameAnswered,
    ContextNameEnded,
    DroRecord,
    SourceResolved,
    SourceWithdrawn,
    SRSClient,
)
from umcore.srs.client import Event as SRSEvent
from umcore.transport import lbtrm, lbtru
from umcore.wire import lbmr, lbmr_options
from umcore.wire import srs_messages as srsm
from umcore.wire.lbmr_base import ip_bytes

__all__ = [
    "MAX_REJOIN_ATTEMPTS",
    "REJOIN_INTERVAL_S",
    "DroRole",
    "SRSResolution",
    "SRSTopicResolver",
    "info_from_sir",
    "parse_source_string",
    "sir_from_source",
    "source_string",
    "srs_servers",
]

log = logging.getLogger("umcore.api.srs")

# A source the SRSes still vouch for but that this context could not join (or whose session
# ended) is tried again this often: the SRS sends an SIR once, unlike UDP TR's repeated TIRs.
REJOIN_INTERVAL_S = 1.0
# ... at most this many times per transport session (30 s at 1 s): long enough for a source's
# host to come back from a brief network fault, short enough not to knock on a dead port for
# the SRS's whole source state lifetime.
MAX_REJOIN_ATTEMPTS = 30

Transport = lbmr.TCPInfo | lbmr.LBTRMInfo
SIRKey = tuple[bytes, str]


@dataclass(frozen=True, slots=True)
class DroRole:
    """A DRO endpoint portal's context (:mod:`daemons.tnwgd.portal`) registers with the SRS as
    a DRO (app type TNWGD) of TRD ``domain_id``; with ``forward_interest`` (the portal's
    receiver context) in interest mode filter + forward-interest, so the SRS tells it the
    other contexts' RIR/WIR/RER/WER.  Its records (RIR, WIR, SIR) carry that domain and type."""

    domain_id: int
    forward_interest: bool = False


class SRSHost(Protocol):
    """What SRS resolution needs of its context (the engine)."""

    #: A DRO portal's role (None: an application) and the listener its portal hears SRS
    #: events on (after the context handled them).
    srs_dro: DroRole | None
    srs_listener: Callable[[object], object] | None

    @property
    def loop(self) -> asyncio.AbstractEventLoop: ...

    @property
    def options(self) -> Options: ...

    @property
    def features(self) -> ContextFeatures: ...

    @property
    def advertised_ip(self) -> str: ...

    @property
    def closed(self) -> bool: ...

    @property
    def resolver(self) -> TopicResolver: ...

    @property
    def joined(self) -> dict[tuple[object, ...], JoinedSession]: ...

    def join(self, info: SourceInfo) -> JoinedSession | None: ...

    def wants(self, topic: str) -> bool: ...

    def flush_resolver(self) -> None: ...


# ------------------------------------------------------------------ records <-> source info
def source_string(transport: Transport) -> str:
    """UM's source string of a transport session (what an SIR carries)."""
    if isinstance(transport, lbmr.LBTRMInfo):
        t = transport
        return lbtrm.source_string(t.src_ip, t.sport, t.session_id, t.mc_group, t.dport)
    if type(transport) is lbmr.LBTRUInfo:
        return lbtru.source_string(transport.ip, transport.port, transport.session_id)
    shm: Any = transport
    if isinstance(shm, lbmr.LBTIPCInfo):  # LBT-IPC / LBT-SMX (UM's source string: no host id)
        label = "LBT-SMX" if type(shm) is lbmr.LBTSMXInfo else "LBT-IPC"
        return f"{label}:{shm.session_id:08x}:{shm.xport_id}"
    sid = transport.session_id
    return f"TCP:{transport.ip}:{transport.port}" + ("" if sid is None else f":{sid:08x}")


def parse_source_string(text: str) -> Transport | None:
    """The transport info of a source string, or None for one we cannot join (IPC, SMX, ...
    or garbage)."""
    parts = text.split(":")
    try:
        kind = parts[0]
        if kind in ("TCP", "LBT-RU") and len(parts) in (3, 4):
            ip, port = parts[1], int(parts[2])
            sid = int(parts[3], 16) if len(parts) == 4 else None
            if not 0 < port <= 0xFFFF or (sid is not None and not 0 <= sid <= 0xFFFFFFFF):
                return None
            ip_bytes(ip)  # a dotted IPv4 address, or LocalProtocolError
            return lbmr.TCPInfo(ip, port, sid) if kind == "TCP" else lbmr.LBTRUInfo(ip, port, sid)
        if kind == "LBTRM" and len(parts) == 6:
            ip, group = parts[1], parts[4]
            nak, sid, dport = int(parts[2]), int(parts[3], 16), int(parts[5])
            if not (0 < nak <= 0xFFFF and 0 < dport <= 0xFFFF and 0 <= sid <= 0xFFFFFFFF):
                return None
            ip_bytes(ip)
            ip_bytes(group)
            return lbmr.LBTRMInfo(ip, group, sid, dport, nak)
        if kind in ("LBT-IPC", "LBT-SMX") and len(parts) == 3:
            # [inferred] an SIR's source string names no host: taken as this host's (a join of
            # another host's segment finds no segment and fails cleanly, as a refused TCP
            # connection does)
            sid, xid = int(parts[1], 16), int(parts[2])
            if not (0 <= sid <= 0xFFFFFFFF and 0 < xid <= 0xFFFF):
                return None
            cls = lbmr.LBTSMXInfo if kind == "LBT-SMX" else lbmr.LBTIPCInfo
            return cast(Transport, cls(shm_host_id(), sid, xid))
    except (ValueError, LocalProtocolError):
        return None
    return None


def sir_from_source(
    topic: str,
    index: int,
    transport: Transport,
    options: Iterable[Any],
    *,
    request: tuple[str, int] | None,
    context_instance: bytes,
    domain_id: int = 0,
    context_type: int = srsm.APP_TYPE_APPLICATION,
) -> srsm.SourceInfo:
    """The SIR advertising a local source (the TIR's content, in SRS form).  A DRO's proxy
    source (TIR options OTID, COST, DOMAIN_ID) keeps its originating OTID, cost and domain."""
    flags = 0
    lj: lbmr_options.LateJoinOption | None = None
    proxy_otid: bytes | None = None
    cost = 0
    for opt in options:
        otype = type(opt)
        if otype is lbmr_options.ExFuncOption:
            flags |= opt.functionality_flags
        elif otype is lbmr_options.LateJoinOption:
            lj = opt
        elif otype is lbmr_options.OTIDOption:
            proxy_otid = bytes(opt.otid)
        elif otype is lbmr_options.CostOption:
            cost = max(int(opt.cost), 0)  # a SIR with cost -1 would be a SER
        elif otype is lbmr_options.DomainIdOption:
            domain_id = int(opt.domain_id)
    if lj is not None:
        flags |= lbmr_options.EXFUNC_LATE_JOIN
        request = (str(lj.src_ip_addr), lj.src_tcp_port)
        otid = make_otid(request[0], request[1], lj.transport_idx)
    elif isinstance(transport, lbmr.LBTRMInfo):
        otid = make_otid(transport.src_ip, transport.sport, transport.session_id, 2)
    elif isinstance(cast(Any, transport), lbmr.LBTIPCInfo):
        t: Any = transport  # [inferred] LBT-IPC/SMX: transport type 0x40 / 0x04, no address
        otid = make_otid("0.0.0.0", t.xport_id, t.session_id, t.transport_type)
    else:
        kind = 1 if type(transport) is lbmr.LBTRUInfo else 0
        otid = make_otid(transport.ip, transport.port, transport.session_id or 0, 0x10 | kind)
    if proxy_otid is not None:
        otid = proxy_otid
    rip, rport = request if request is not None else ("0.0.0.0", 0)
    # TLS / LZ4 travel in the SIR's own encryption and compression bytes (1 = on: the value
    # is inferred, the notes give the fields, not their values), not as functionality bits.
    secure = flags & (lbmr_options.EXFUNC_TLS | lbmr_options.EXFUNC_COMPRESSION)
    flags &= ~secure
    return srsm.SourceInfo(
        otid,
        topic,
        source_string(transport),
        topic_idx=index,
        functionality_flags=flags,
        encryption=1 if secure & lbmr_options.EXFUNC_TLS else 0,
        compression=1 if secure & lbmr_options.EXFUNC_COMPRESSION else 0,
        request_ip=rip,
        request_port=rport,
        domain_id=domain_id,
        context_instance=context_instance,
        context_type=context_type,
        cost=cost,
    )


def info_from_sir(rec: srsm.SourceInfo) -> SourceInfo | None:
    """What an SIR tells a receiver, as UDP TR's :class:`SourceInfo`; None if not joinable."""
    transport = parse_source_string(rec.source)
    if transport is None:
        return None
    options: tuple[Any, ...] = ()
    flags = rec.functionality_flags
    if rec.encryption:
        flags |= lbmr_options.EXFUNC_TLS
    if rec.compression:
        flags |= lbmr_options.EXFUNC_COMPRESSION
    if flags or rec.request_port:  # the request port: where "SOURCE:" UIMs go
        options = (lbmr_options.ExFuncOption(rec.request_port, rec.request_ip, flags),)
        ident = parse_otid(rec.otid)
        if flags & lbmr_options.EXFUNC_LATE_JOIN and ident is not None:
            ip, port, tix = ident
            options = (lbmr_options.LateJoinOption(port, ip, tix, 0, 0), *options)
    # [inferred] a DRO's proxy source registers with the DRO's context type (umcore.engine.dro)
    proxy = rec.context_type == srsm.APP_TYPE_TNWGD
    if proxy:  # what its TIR would say: originating OTID, cost (a DRO crossed), origin domain
        options = (
            *options,
            lbmr_options.OTIDOption(rec.otid),
            lbmr_options.CostOption(1, max(rec.cost, 0)),
            lbmr_options.DomainIdOption(rec.domain_id),
        )
    return SourceInfo(rec.topic, rec.topic_idx, transport, options, proxy=proxy)


def srs_servers(value: Any) -> list[tuple[str, int]]:
    """``resolver_service`` entries (:class:`~umcore.config.values.ResolverEntry`) as
    (host, port), at most ``MAX_SERVERS``."""
    out: list[tuple[str, int]] = []
    for entry in value or ():
        address = getattr(entry, "address", None)
        port = getattr(entry, "port", None)
        if address is not None and port is not None and int(port) != 0:
            out.append((str(address), int(port)))
    return out[:MAX_SERVERS]


# ------------------------------------------------------------------------------ resolver
class SRSTopicResolver(TopicResolver):
    """UDP topic resolution (or, with ``udp=False``, only its caches) whose local sources,
    receivers and wildcard receivers are also registered with the SRSes (when ``srs`` is set)."""

    def __init__(
        self,
        config: ResolverConfig,
        now: float,
        srs: SRSResolution | None,
        *,
        udp: bool = True,
        instance: bytes = bytes(8),
    ) -> None:
        super().__init__(config, now, instance=instance)
        self.srs = srs
        self.udp = udp
        if srs is not None:
            srs.names = self.names

    def add_source(
        self,
        topic: str,
        index: int,
        transport: Transport,
        now: float,
        *,
        timings: PhaseTimings | None = None,
        send_initial: bool | None = None,
        options: tuple[Any, ...] = (),
    ) -> list[SourceInfo]:
        found = super().add_source(
            topic, index, transport, now, timings=timings, send_initial=send_initial,
            options=options,
        )  # fmt: skip
        if self.srs is not None:
            self.srs.source_added(topic, index, transport, options)
        return found

    def remove_source(self, topic: str, index: int, transport: Transport) -> None:
        super().remove_source(topic, index, transport)
        if self.srs is not None:
            self.srs.source_removed(topic, index, transport)

    def add_receiver(
        self,
        topic: str,
        now: float,
        *,
        timings: PhaseTimings | None = None,
        query_threshold: int | None = None,
    ) -> list[SourceInfo]:
        found = super().add_receiver(topic, now, timings=timings, query_threshold=query_threshold)
        if self.srs is not None:
            self.srs.receiver_added(topic)
            found.extend(self.srs.known(topic))
        return found

    def remove_receiver(self, topic: str) -> None:
        known = self.has_receiver(topic)
        super().remove_receiver(topic)
        if self.srs is not None and known:
            self.srs.receiver_removed(topic)

    def add_wildcard_receiver(
        self, pattern: str, now: float, *, timings: PhaseTimings | None = None
    ) -> list[SourceInfo]:
        found = super().add_wildcard_receiver(pattern, now, timings=timings)
        if self.srs is not None:
            self.srs.wildcard_added(pattern)
            regex = self.wildcard_pattern(pattern)
            if regex is not None:
                found.extend(self.srs.matching(regex))
        return found

    def remove_wildcard_receiver(self, pattern: str) -> None:
        known = self.wildcard_pattern(pattern) is not None
        super().remove_wildcard_receiver(pattern)
        if self.srs is not None and known:
            self.srs.wildcard_removed(pattern)

    def advertise_context_name(
        self, name: str, ip: str, port: int, now: float, *, domain_id: int = 0
    ) -> ContextName:
        entry = super().advertise_context_name(name, ip, port, now, domain_id=domain_id)
        if self.srs is not None:
            self.srs.name_advertised(entry)
        return entry

    def withdraw_context_name(self, name: str) -> bool:
        known = super().withdraw_context_name(name)
        if self.srs is not None and known:
            self.srs.name_withdrawn(name)
        return known

    def query_context_name(self, name: str, now: float) -> ContextName | None:
        known = super().query_context_name(name, now)
        if self.srs is not None:
            self.srs.name_queried(name)
        return known

    def cancel_context_name(self, name: str) -> None:
        super().cancel_context_name(name)
        if self.srs is not None and name not in self.names.wanted():
            self.srs.name_cancelled(name)

    # UDP TR off: no schedule runs and nothing leaves (the context has no resolver socket).
    def handle_timer(self, now: float) -> None:
        if self.udp:
            super().handle_timer(now)

    def next_timer(self) -> float | None:
        return super().next_timer() if self.udp else None

    def take_datagrams(self) -> list[tuple[bytes, tuple[str, int]]]:
        out = super().take_datagrams()
        return out if self.udp else []


# ------------------------------------------------------------------------------ SRS side
class SRSResolution:
    """A context's SRS connections and what they resolved (see the module docstring)."""

    def __init__(self, ctx: SRSHost, servers: list[tuple[str, int]], *, flood: bool) -> None:
        self.ctx = ctx
        self.servers = servers
        self.flood = flood
        self.core: SRSClient | None = None
        self.connector: SRSClientConnector | None = None
        #: The context's name table (set by its :class:`SRSTopicResolver`).
        self.names: ContextNames | None = None
        # own names and queried names, replayed to the core when it starts
        self._own_names: dict[str, ContextName] = {}
        self._queried: set[str] = set()
        # SIRs the SRSes vouch for, as joinable source infos (unjoinable ones are counted).
        self._infos: dict[SIRKey, SourceInfo] = {}
        self._by_topic: dict[str, dict[SIRKey, SourceInfo]] = {}
        # our own sources: (topic, index, transport key) -> (otid, topic) of their SIR
        self._mine: dict[tuple[str, int, tuple[object, ...]], SIRKey] = {}
        self._rejoin = CoreTimer(ctx.loop, self._on_rejoin)
        self._rejoin_armed = False
        # transport key -> the joined session we started for it, and failed re-join attempts
        self._joins: dict[tuple[object, ...], Any] = {}
        self._attempts: dict[tuple[object, ...], int] = {}
        #: SIRs whose source string names a transport this client cannot join.
        self.unjoinable = 0
        #: SourceResolved / SourceWithdrawn events handled.
        self.resolved_events = 0
        self.withdrawn_events = 0
        #: Joins tried again after a failed connect.
        self.rejoins = 0

    @classmethod
    def from_options(cls, ctx: SRSHost) -> SRSResolution | None:
        servers = srs_servers(ctx.options.get("resolver_service"))
        if not servers:
            return None
        mode = str(ctx.options.get("resolver_service_interest_mode"))
        return cls(ctx, servers, flood=mode == "flood")

    def start(self) -> None:
        """Connect to every SRS (call once the context knows its address and request port)."""
        ctx = self.ctx
        feat = ctx.features
        port = feat.port.port if feat.port is not None else 0
        mode = srsm.INTEREST_MODE_FLOOD if self.flood else srsm.INTEREST_MODE_FILTER
        role = ctx.srs_dro
        if role is not None and role.forward_interest:
            mode |= srsm.INTEREST_MODE_FLOOD_FORWARD_INTEREST  # 0 -> 2, 1 -> 3
        self.core = SRSClient(
            self.servers,
            now=ctx.loop.time(),
            client_addr=ctx.advertised_ip,
            client_port=port,
            interest_mode=mode,
            app_type=srsm.APP_TYPE_TNWGD if role is not None else srsm.APP_TYPE_APPLICATION,
            local_domain_id=role.domain_id if role is not None else 0,
            context_instance=feat.ctxinst,
        )
        for entry in self._own_names.values():
            self._send_name(entry)
        for name in self._queried:
            self.core.send_context_name_query(name)
        self.connector = SRSClientConnector(self.core, on_events=self._on_events)
        self.connector.start()

    async def close(self) -> None:
        self._rejoin.cancel()
        if self.connector is not None:
            await self.connector.close()

    # ---------------------------------------------------------------- registered slots
    def registered(self) -> int:
        """SRS connections currently registered and streaming."""
        return len(self.core.registered_slots()) if self.core is not None else 0

    # ---------------------------------------------------------------- local objects
    def _flush(self) -> None:
        if self.connector is not None:
            self.connector.flush()

    def source_added(
        self, topic: str, index: int, transport: Transport, options: tuple[Any, ...]
    ) -> None:
        if self.core is None:
            return
        feat = self.ctx.features
        request = (feat.ip, feat.port.port) if feat.port is not None else None
        role = self.ctx.srs_dro
        rec = sir_from_source(
            topic,
            index,
            transport,
            options,
            request=request,
            context_instance=feat.ctxinst,
            domain_id=role.domain_id if role is not None else 0,
            context_type=srsm.APP_TYPE_TNWGD if role is not None else srsm.APP_TYPE_APPLICATION,
        )
        key = SourceInfo(topic, index, transport).key
        self._mine[(topic, index, key)] = (rec.otid, topic)
        self.core.send_source(rec)
        self._flush()

    def source_removed(self, topic: str, index: int, transport: Transport) -> None:
        if self.core is None:
            return
        key = SourceInfo(topic, index, transport).key
        sir = self._mine.pop((topic, index, key), None)
        if sir is not None:
            self.core.send_source_delete(*sir)
            self._flush()

    def receiver_added(self, topic: str) -> None:
        if self.core is not None:
            self.core.send_receiver(topic)
            self._flush()

    def receiver_removed(self, topic: str) -> None:
        if self.core is not None:
            self.core.send_receiver_delete(topic)
            self._flush()

    def wildcard_added(self, pattern: str) -> None:
        if self.core is not None:
            self.core.send_wildcard(pattern)
            self._flush()

    def wildcard_removed(self, pattern: str) -> None:
        if self.core is not None:
            self.core.send_wildcard_delete(pattern)
            self._flush()

    def send_dro_records(self, routes: Iterable[tuple[str, int, tuple[int, ...]]]) -> None:
        """A DRO portal's DIR (its ``srs_dro`` domain) and one RTIR per route (ip, port of the
        portal's request port, remote domains reached through it): the set held now."""
        role = self.ctx.srs_dro
        if self.core is None or role is None:
            return
        inst = self.ctx.features.ctxinst
        recs: list[srsm.DomainInfo | srsm.RouteInfo] = [
            srsm.DomainInfo(role.domain_id, context_instance=inst)
        ]
        recs += [
            srsm.RouteInfo(domains, ip, port, route_index=i, context_instance=inst)
            for i, (ip, port, domains) in enumerate(routes)
            if domains
        ]
        self.core.send_dro_records(recs)
        self._flush()

    def send_remote_interest(self, entries: Iterable[tuple[str, bool, int]]) -> None:
        """A DRO portal's remote interest (topic or PCRE pattern, is pattern, the domain of the
        receivers behind it): the set held now, as RIR / WIR naming that domain
        (:meth:`SRSClient.send_remote_interest <umcore.srs.client.SRSClient.send_remote_interest>`)."""
        if self.core is None or self.ctx.srs_dro is None:
            return
        self.core.send_remote_interest(entries)
        self._flush()

    def name_advertised(self, entry: ContextName) -> None:
        self._own_names[entry.name] = entry
        if self.core is not None:
            self._send_name(entry)
            self._flush()

    def _send_name(self, entry: ContextName) -> None:
        assert self.core is not None
        self.core.send_context_name_info(
            entry.name, entry.ip, entry.port, domain_id=entry.domain_id
        )

    def name_withdrawn(self, name: str) -> None:
        self._own_names.pop(name, None)
        if self.core is not None:
            self.core.withdraw_context_name(name)

    def name_queried(self, name: str) -> None:
        self._queried.add(name)
        if self.core is not None:
            self.core.send_context_name_query(name)
            self._flush()

    def name_cancelled(self, name: str) -> None:
        self._queried.discard(name)
        if self.core is not None:
            self.core.cancel_context_name_query(name)

    def known(self, topic: str) -> list[SourceInfo]:
        """Sources of ``topic`` the SRSes vouch for."""
        return list(self._by_topic.get(topic, {}).values())

    def matching(self, regex: re.Pattern[str]) -> list[SourceInfo]:
        return [
            info
            for topic, per in self._by_topic.items()
            if regex.search(topic)
            for info in per.values()
        ]

    # ---------------------------------------------------------------- SRS events
    def _on_events(self, events: list[SRSEvent]) -> None:
        ctx = self.ctx
        if ctx.closed:
            return
        for ev in events:
            if isinstance(ev, SourceResolved):
                self.resolved_events += 1
                self._resolved(ev)
            elif isinstance(ev, SourceWithdrawn):
                self.withdrawn_events += 1
                self._withdrawn(ev)
            elif isinstance(ev, (ContextNameAnswered, ContextNameEnded)):
                self._context_name(ev)
            elif isinstance(ev, DroRecord):
                self._dro_record(ev)
            else:
                log.debug("SRS %s", ev)
            listener = ctx.srs_listener
            if listener is not None:
                listener(ev)

    def _dro_record(self, ev: DroRecord) -> None:
        """A DRO's DIR / RTIR / RTER relayed by the SRS: the context's domain table
        (:mod:`umcore.resolver.dro`; SRS routes hold until their RTER)."""
        domains = self.ctx.resolver.domains
        rec = ev.record
        now = self.ctx.loop.time()
        if isinstance(rec, srsm.DomainInfo):
            domains.receive_dro_domain(rec.domain_id, now)
        elif isinstance(rec, srsm.RouteEnd):
            domains.end_route(rec.ip, rec.port, rec.domains)
        else:
            domains.receive_route(rec.ip, rec.port, rec.domains, now, lifetime=False)

    def _context_name(self, ev: ContextNameAnswered | ContextNameEnded) -> None:
        names = self.names
        if names is None:
            return
        rec = ev.record
        entry = ContextName(rec.name, rec.domain_id, rec.ip, rec.port, rec.origin_context_instance)
        now = self.ctx.loop.time()
        if isinstance(ev, ContextNameAnswered):
            names.receive_srs_info(entry, now)
        else:
            names.receive_srs_end(entry, now)
        self.ctx.flush_resolver()  # the table's events reach the context there

    def _resolved(self, ev: SourceResolved) -> None:
        rec = ev.record
        sk = (rec.otid, rec.topic)
        info = info_from_sir(rec)
        old = self._infos.get(sk)
        if old is not None and (info is None or old.key != info.key or old.index != info.index):
            self._forget(sk, old)  # the advertisement moved: the old transport is gone
            self._leave(old)
        if info is None:
            self.unjoinable += 1
            return
        if self.ctx.resolver.security_mismatch(info.options):
            return  # another TLS/LZ4 setting: ignored, counted (seed 10.4.4, 10.5.1)
        self._infos[sk] = info
        self._by_topic.setdefault(rec.topic, {})[sk] = info
        self._attempts.pop(info.key, None)
        self._join(info)

    def _join(self, info: SourceInfo) -> None:
        js = self.ctx.join(info)
        if js is not None and self._joins.get(info.key) is not js:
            self._joins[info.key] = js
            self._arm_rejoin()  # a connect may fail: check back

    def _withdrawn(self, ev: SourceWithdrawn) -> None:
        rec = ev.record
        sk = (rec.otid, rec.topic)
        info = self._infos.get(sk)
        if info is None:
            return
        self._forget(sk, info)
        js = self.ctx.joined.get(info.key)
        live = js is not None and js.conn is not None and not js.closed
        if ev.slot < 0 and live and info.key[0] == "TCP":
            return  # see the module docstring: the live connection outranks silence
        self._leave(info)

    def _forget(self, sk: SIRKey, info: SourceInfo) -> None:
        self._infos.pop(sk, None)
        self._joins.pop(info.key, None)
        self._attempts.pop(info.key, None)
        per = self._by_topic.get(info.topic)
        if per is not None:
            per.pop(sk, None)
            if not per:
                del self._by_topic[info.topic]

    def _leave(self, info: SourceInfo) -> None:
        """The source went away: EOS to its topic's receivers, leave that topic index."""
        js = self.ctx.joined.get(info.key)
        if js is not None:
            js.drop_topic(info.index, info.topic)

    # ---------------------------------------------------------------- re-joins
    def _retryable(self) -> list[SourceInfo]:
        """Wanted sources whose join failed before BOS, with attempts left."""
        ctx = self.ctx
        joined = ctx.joined
        out: list[SourceInfo] = []
        for topic, per in self._by_topic.items():
            if not ctx.wants(topic):
                continue
            for info in per.values():
                key = info.key
                if key in joined:
                    continue
                js = self._joins.get(key)
                if js is not None and js.active:
                    continue  # ended after BOS: not rejoined
                if self._attempts.get(key, 0) < MAX_REJOIN_ATTEMPTS:
                    out.append(info)
        return out

    def _arm_rejoin(self) -> None:
        if not self._rejoin_armed:
            self._rejoin_armed = True
            self._rejoin.arm(self.ctx.loop.time() + REJOIN_INTERVAL_S)

    def _on_rejoin(self) -> None:
        self._rejoin_armed = False
        ctx = self.ctx
        if ctx.closed:
            return
        retry = self._retryable()
        for info in retry:
            n = self._attempts[info.key] = self._attempts.get(info.key, 0) + 1
            self.rejoins += 1
            if n == MAX_REJOIN_ATTEMPTS:
                log.info("giving up joining %r after %d attempts", info, n)
            self._joins.pop(info.key, None)
            self._join(info)
        # pending connects are in ctx.joined: look again while any join may still fail
        if retry or any(not js.active and not js.closed for js in self._joins.values()):
            self._arm_rejoin()


def make_resolver(
    ctx: SRSHost, config: ResolverConfig, now: float
) -> tuple[SRSTopicResolver, SRSResolution | None, bool]:
    """The context's resolver, its SRS side (None without ``resolver_service``) and whether
    UDP TR is on (``resolver_disable_udp_topic_resolution`` 0)."""
    srs = SRSResolution.from_options(ctx)
    udp = not bool(ctx.options.get("resolver_disable_udp_topic_resolution"))
    if not udp and srs is None:
        log.warning(
            "resolver_disable_udp_topic_resolution is 1 and resolver_service is empty: "
            "this context has no topic resolution at all"
        )
    resolver = SRSTopicResolver(config, now, srs, udp=udp, instance=ctx.features.ctxinst)
    return resolver, srs, udp
