"""A DRO endpoint portal: two UM contexts in one topic resolution domain, driven by the core.

Theory of operation
-------------------
An endpoint portal (notes A2) is a **receiver context** and a **source context**
(:class:`~umcore.engine.context.Engine` objects) in its TRD, built from the portal's
``<lbm-config>``/``<lbm-attributes>`` (and the daemon's ``<xml-config>``): topic resolution by
multicast, lbmrd or the SRS, whatever those options say.  Their monitoring application ids are
UM's ``Gateway_Portal_<name>_rcv_ctx`` / ``_src_ctx`` (:meth:`EndpointPortal.context_app_ids`).

The routing core (:class:`umcore.dro.DroCore`) decides; the portal does what it says:

* **Topic resolution in.**  Every datagram the receiver context hears
  (:attr:`Engine.tr_listener <umcore.engine.context.Engine.tr_listener>`) is decoded and given to
  ``core.receive_lbmr`` -- except those this portal sent itself (a short-lived multiset of the
  exact bytes, so multicast loopback does not feed the core its own interest).  Every datagram
  both contexts send carries the packet options *source type TNWGD* and *local domain* (the
  portal's ``<domain-id>``: how applications learn their TRD's id, :mod:`umcore.engine.dro`), so
  the core of this and every other DRO ignores the TQRs of DRO proxy receivers (seed 7.3 "its
  TQR is ignored there"); the contexts do not answer use queries.  A
  datagram that does not decode is counted (``tr_malformed``) and dropped: it costs only itself.
* **Topic resolution out.**  ``core.take_lbmr()`` packets for this portal get the same option and
  leave through the receiver context's resolver (its multicast group or lbmrd).  A TRD resolved by
  the SRS only has no datagram path: the domain route becomes the RTIR the portal holds at the
  SRS (next to its DIR, the TRD's domain id); the rest are counted in ``tr_unsent``.  The
  other DROs' RTIRs (and RTERs) the SRS relays feed ``core.receive_srs_route``, which holds
  them as their remote domain route records [inferred]: this is how a DRO learns the domains
  reachable through a transit TRD resolved by the SRS, routes interest, data and UIMs there
  and advertises those domains into its other TRDs.
* **The SRS** (``resolver_service``).  Both contexts register as this DRO's (app type TNWGD,
  the portal's domain id; :class:`~umcore.engine.srsresolve.DroRole`), the receiver context in
  interest mode filter + forward-interest: the SRS reports the other contexts' RIR / WIR / RER
  / WER, which feed ``core.receive_srs_interest`` (counted per context instance).  Interest
  crossing a transit TRD resolved by the SRS [inferred]: the TNWG interest records have no
  datagram path there, so the core's interest records for this portal become **remote-interest
  records** the source context holds at the SRS (:meth:`SRSClient.send_remote_interest
  <umcore.srs.client.SRSClient.send_remote_interest>`): an RIR / WIR per topic / PCRE pattern
  whose ``domain_id`` is the domain of the receivers behind it (RDR / WDR when withdrawn).  The
  other DROs there (forward-interest mode) get them and hold that interest *for that domain*
  (held remote interest), as a TNWG interest record would have told them on UDP.  A DRO
  context's record naming this TRD's domain is a proxy receiver's RIR: ignored (on UDP the core
  ignores a proxy receiver's TQRs for the same reason), and so are this portal's own records.
  A source the SRS
  reports (SIR) for a proxy receiver's topic, or matching one of its patterns, is resolved as
  its TIR would be, before any data; its SER is the source gone.
* **Proxy receivers.**  :class:`~umcore.dro.CreateProxyReceiver` for a topic opens a raw receiver
  (:meth:`Engine.open_raw_receiver`) on the receiver context.  For a pattern the resolver queries
  the pattern (wildcard TQRs) and every TIR heard whose topic matches opens a raw receiver for that
  topic.  A raw receiver's session BOS becomes ``core.receive_source`` (the TIR's OTID, COST and
  DOMAIN_ID options, read like :func:`umcore.dro.advert_from_tir`), its EOS
  ``core.receive_source_gone``, and its frames ``core.receive_frames`` (every data frame of
  its topic index, with the frame's own sequence number): fragments stay frames, nothing is
  reassembled.
* **Proxy sources.**  :class:`~umcore.dro.CreateProxySource` opens a raw source
  (:meth:`Engine.open_raw_source`) on the source context whose TIRs carry OTID, COST (cost, hop
  count) and DOMAIN_ID; :class:`~umcore.dro.UpdateProxySource` re-advertises the new COST
  (:meth:`Engine.readvertise`); :class:`~umcore.dro.FinalAdvertisement` sends one TIR of it with
  COST cost -1 (the client library's final advertisement: its receivers see EOS at once);
  :class:`~umcore.dro.DeleteProxySource` closes it.  Commands are
  applied in order by one task per portal (opening a source awaits a listener).
* **Late join and OTR** (:mod:`umcore.dro.recovery`).  A source's LATE_JOIN option (its request
  port, transport and topic index) goes to ``core.recovery``; a proxy source of a source that
  offers late join advertises LATE_JOIN naming this portal's request port and a transport index
  of the DRO's, and the requests its receivers send there are forwarded to the origin by
  :mod:`daemons.tnwgd.recovery` (the proxy source retains nothing).
* **Forwarding.**  A proxy receiver's read goes to ``core.receive_frames`` whole (in pieces
  of :data:`DRAIN_BYTES`), and :meth:`EndpointPortal.drain` sends the portal's egress queue
  (``core.queue(name)``), a run of frames at a time, through the proxy sources with
  ``send_run_nowait`` and flushes them (a lone frame leaves at once): a
  :class:`~umcore.errors.WouldBlock` leaves the run at the head of the queue until the proxy
  source's WAKEUP; the queue's ``<max-queue>`` bound drops (and counts) what does not fit, in the
  core.  Nothing here awaits on the data path, so a blocked portal never slows another.

* **Persistence** (:mod:`daemons.tnwgd.persist`, :mod:`umcore.dro.persist`).  A source whose
  TIR carries the UME option is advertised with its persistent identity; its SRIs go to the
  core (``receive_control``), and the core's ``take_controls`` SRIs leave on the proxy sources,
  whose TIRs carry the origin's UME option.

OTIDs.  A source with an OTID option (a proxy source of another DRO) keeps it; for a source in
this TRD the portal derives one from its transport session identity (UM's source string): the
SHA-256 of it, 32 bytes.  How UM forms an OTID is not documented; only equality matters.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import hashlib
import logging
from collections import deque
from collections.abc import Callable
from pathlib import Path
from typing import Any, Protocol

from daemons.tnwgd.persist import PortalPersistence
from umcore.config.attributes import Attributes
from umcore.config.dro import DROConfig, Endpoint
from umcore.config.umxml import UMXml
from umcore.dro import (
    CreateProxyReceiver,
    CreateProxySource,
    DeleteProxyReceiver,
    DeleteProxySource,
    DroCore,
    FinalAdvertisement,
    InterestKey,
    PortalCommand,
    SourceAdvert,
    SourceKey,
    SourceTransport,
    UpdateProxySource,
    advert_from_tir,
)
from umcore.dro.core import MAX_SRS_ROUTES_PER_PORTAL
from umcore.dro.recovery import Origin
from umcore.engine import Engine, RawReceiver, RawSession, RawSource
from umcore.engine.message import SRC_EVENT_WAKEUP
from umcore.engine.srsresolve import DroRole, info_from_sir, parse_source_string
from umcore.errors import UMError, WouldBlock
from umcore.resolver.core import SourceInfo
from umcore.resolver.dro import FINAL_COST, is_final_advertisement
from umcore.srs.client import DroRecord, InterestReported, SourceResolved, SourceWithdrawn
from umcore.wire import lbmr
from umcore.wire import srs_messages as srsm
from umcore.wire.lbmr_options import (
    SRC_TYPE_TNWGD,
    CostOption,
    DomainIdOption,
    ExFuncOption,
    LateJoinOption,
    LocalDomainOption,
    OTIDOption,
    SrcTypeOption,
    encode_packet_options,
)

__all__ = ["EndpointPortal", "PortalHost", "derive_otid", "source_transport"]

# An SRS's WIR names a PCRE pattern (the wildcard receivers' default pattern type); an RIR a
# topic (InterestKey pattern type 0).
PCRE = 1
TOPIC = 0
# Sources whose request port a portal remembers for UIMs to sources: one per source its proxy
# receivers resolved; beyond this the oldest is forgotten (a UIM to it is then unroutable).
MAX_SOURCE_REQUESTS = 65536
# Other DROs' route records (RTIR) a portal tracks with the SRSes that relayed them: the core
# holds one per DRO portal of the TRD (MAX_SRS_ROUTES_PER_PORTAL); an SRS keeps older records of
# a portal until they expire, so a few times that; beyond it a new record is refused, counted.
MAX_SRS_ROUTE_RECORDS = 4 * MAX_SRS_ROUTES_PER_PORTAL

log = logging.getLogger("tnwgd")

# How long a datagram this portal sent is remembered to recognise it coming back (multicast
# loopback echoes within milliseconds; lbmrd does not echo, so entries must expire).
OWN_ECHO_S = 2.0
# Datagrams remembered at once: the core sends a few per second per portal; beyond this the
# oldest are forgotten (one echo of them may then reach the core, which tolerates it).
MAX_OWN_ECHOES = 1024


# Bytes of one read handed to the core before the egress queues are drained: a TCP read can
# hold hundreds of kilobytes, more than a small <max-queue>; draining every 32 KiB keeps such a
# queue from dropping while its proxy source is not even blocked (the default max-queue is
# 1 MB), at the cost of one pass over the portals per piece.
DRAIN_BYTES = 32 * 1024


class PortalHost(Protocol):
    """What a portal needs from the daemon: the core, the clock and a way to say "pump"."""

    core: DroCore

    def now(self) -> float: ...

    def kick(self) -> None: ...

    def drain(self) -> None: ...


def derive_otid(transport: Any) -> bytes:
    """The 32-byte OTID of a source in this TRD: the SHA-256 of its transport session's
    identity (kind, address, port, session id; LBT-RM adds group and destination port)."""
    key = SourceInfo("", 0, transport).key
    return hashlib.sha256(repr(key).encode()).digest()


def source_transport(session: RawSession) -> SourceTransport | None:
    """What an inbound ACL may test about a joined source, from its source string."""
    parts = session.source_string.split(":")
    try:
        if parts[0] == "TCP":
            return SourceTransport("tcp", source_ip=parts[1], tcp_source_port=int(parts[2]))
        if parts[0] == "LBT-RU":
            return SourceTransport("lbtru", source_ip=parts[1], udp_source_port=int(parts[2]))
        if parts[0] == "LBTRM":
            return SourceTransport(
                "lbtrm",
                source_ip=parts[1],
                udp_source_port=int(parts[2]),
                multicast_group=parts[4],
                udp_destination_port=int(parts[5]),
            )
    except (IndexError, ValueError):
        return None
    return None


def _from_dro(packet: lbmr.LBMRPacket) -> bool:
    return any(
        isinstance(o, SrcTypeOption) and o.src_type == SRC_TYPE_TNWGD for o in packet.options
    )


class _OwnEchoes:
    """Datagrams we sent, to drop their loopback copies (a multiset with expiry)."""

    __slots__ = ("counts", "order")

    def __init__(self) -> None:
        self.counts: dict[bytes, int] = {}
        self.order: deque[tuple[float, bytes]] = deque()

    def sent(self, data: bytes, now: float) -> None:
        self._expire(now)
        if len(self.order) >= MAX_OWN_ECHOES:
            self._forget(self.order.popleft()[1])
        self.order.append((now + OWN_ECHO_S, data))
        self.counts[data] = self.counts.get(data, 0) + 1

    def consume(self, data: bytes, now: float) -> bool:
        self._expire(now)
        n = self.counts.get(data)
        if not n:
            return False
        # the copy is consumed; its expiry entry stays and is skipped when it falls due
        if n == 1:
            del self.counts[data]
        else:
            self.counts[data] = n - 1
        return True

    def _forget(self, data: bytes) -> None:
        n = self.counts.get(data)
        if n is None:
            return
        if n <= 1:
            del self.counts[data]
        else:
            self.counts[data] = n - 1

    def _expire(self, now: float) -> None:
        order = self.order
        while order and order[0][0] <= now:
            self._forget(order.popleft()[1])


class _ProxyReceiver:
    __slots__ = ("raw", "reasons", "sessions")

    def __init__(self, raw: RawReceiver) -> None:
        self.raw = raw
        self.reasons: set[InterestKey] = set()
        #: sessions that gave BOS and no EOS yet, with their source key
        self.sessions: dict[RawSession, SourceKey] = {}


class _ProxySource:
    __slots__ = ("key", "raw")

    def __init__(self, key: SourceKey) -> None:
        self.key = key
        self.raw: RawSource | None = None  # None while it opens


class EndpointPortal:
    """One endpoint portal (see the module docstring).  Public, read-only for monitoring:
    ``name``, ``index``, ``domain_id``, ``kind``, ``cost``, :meth:`contexts`, the counters."""

    kind = "endpoint"

    def __init__(
        self,
        host: PortalHost,
        config: DROConfig,
        endpoint: Endpoint,
        index: int,
        *,
        xml: UMXml | None = None,
        base: Path | None = None,
    ) -> None:
        self.host = host
        self.core = host.core
        self.config = endpoint
        self.name = endpoint.name
        self.index = index
        self.domain_id = endpoint.domain_id
        self.cost = endpoint.cost
        attrs = config.portal_attributes

        def build(scope: str, role: str | None = None) -> Attributes:
            return attrs(endpoint, scope, xml=xml, base=base, role=role)

        self.receiver_context_attributes = build("context", "receiver")
        self.source_context_attributes = build("context", "source")
        self.source_attributes = build("source")
        self.receiver_attributes = build("receiver")
        #: What every TR datagram of this portal carries (the client library's contract,
        #: :mod:`umcore.engine.dro` 1): source type TNWGD and this TRD's domain id.
        self.packet_options = (
            SrcTypeOption(SRC_TYPE_TNWGD),
            LocalDomainOption(endpoint.domain_id),
        )
        self.rcv: Engine | None = None
        self.src: Engine | None = None
        self.up = False
        self.receivers: dict[str, _ProxyReceiver] = {}
        self.patterns: dict[InterestKey, Any] = {}
        self.sources: dict[tuple[bytes, str], _ProxySource] = {}
        self._commands: deque[PortalCommand] = deque()
        self._wake = asyncio.Event()
        self._worker: asyncio.Task[None] | None = None
        self._echoes = _OwnEchoes()
        self._session_keys: dict[RawSession, SourceKey] = {}
        #: interest the SRS reported: (key, domain or None for this TRD) -> context instances
        self._srs_interest: dict[tuple[InterestKey, int | None], set[bytes]] = {}
        #: the remote interest this portal holds at the SRS: (symbol, is pattern, domain)
        self._srs_remote: tuple[tuple[str, bool, int], ...] = ()
        self._srs_routes: tuple[tuple[str, int, tuple[int, ...]], ...] = ()
        #: other DROs' route records the SRS relayed: (ip, port, domains) -> SRS slots
        self._srs_route_slots: dict[tuple[str, int, tuple[int, ...]], set[int]] = {}
        # counters (cumulative)
        self.tr_received = 0
        self.tr_malformed = 0
        self.tr_from_dro_ignored = 0
        self.tr_sent = 0
        self.tr_unsent = 0
        self.frames_forwarded = 0
        self.bytes_forwarded = 0
        self.would_block = 0
        self.dropped_no_proxy = 0
        self.send_errors = 0
        self.command_errors = 0
        self.final_advertisements = 0
        self.own_joins_avoided = 0
        #: times the runtime restarted this portal after a failure (DroRuntime)
        self.restarts = 0
        self.srs_interest_records = 0
        #: records of another DRO's remote interest (their domain kept: held remote interest)
        self.srs_dro_interest = 0
        #: other DROs' proxy receivers' records (this TRD's domain): not interest of this TRD
        self.srs_proxy_interest_ignored = 0
        self.srs_sources = 0
        #: other DROs' route records (RTIR / RTER) the SRS relayed: the core's domain routes
        self.srs_route_records = 0
        self.srs_route_records_refused = 0  # MAX_SRS_ROUTE_RECORDS
        #: OTID -> the request port a source's TIR named (EXFUNC): UIMs to sources
        self.source_requests: dict[bytes, tuple[str, int]] = {}
        #: persistence across the DRO: identities, SRIs (daemons.tnwgd.persist)
        self.persist = PortalPersistence(self)

    # ------------------------------------------------------------------ life
    def context_names(self) -> tuple[str | None, str | None]:
        """(receiver, source) context names: ``<receiver-/source-context-name>``, else the
        ``context_name`` option of the portal's attributes."""
        cfg = self.config
        rcv = cfg.receiver_context_name or self.receiver_context_attributes.get_typed(
            "context_name"
        )
        src = cfg.source_context_name or self.source_context_attributes.get_typed("context_name")
        return (rcv or None, src or None)

    def context_app_ids(self) -> list[tuple[str, Engine]]:
        """UM's monitoring application ids of the portal's contexts, with the contexts."""
        out: list[tuple[str, Engine]] = []
        if self.rcv is not None:
            out.append((f"Gateway_Portal_{self.name}_rcv_ctx", self.rcv))
        if self.src is not None:
            out.append((f"Gateway_Portal_{self.name}_src_ctx", self.src))
        return out

    def contexts(self) -> list[Engine]:
        """The portal's contexts (receiver, source) once started."""
        return [e for e in (self.rcv, self.src) if e is not None]

    async def start(self) -> None:
        """Create and start both contexts; then the core hears the portal is up."""
        rcv_name, src_name = self.context_names()
        rcv = Engine(self.receiver_context_attributes, name=rcv_name)
        src = Engine(self.source_context_attributes, name=src_name)
        trailer = encode_packet_options(self.packet_options)
        rcv.tr_packet_options = trailer
        src.tr_packet_options = trailer
        # With the SRS: both register as this DRO's (app type TNWGD, domain id); the receiver
        # context also in forward-interest mode, and its SRS events come here.
        rcv.srs_dro = DroRole(self.domain_id, forward_interest=True)
        src.srs_dro = DroRole(self.domain_id)
        rcv.srs_listener = self._on_srs
        await rcv.start()
        try:
            await src.start()
        except BaseException:
            await rcv.close()
            raise
        # our proxy receivers are not receivers of this TRD (umcore.engine.dro 8)
        rcv.resolver.answer_use_queries = False
        src.resolver.answer_use_queries = False
        self.rcv, self.src = rcv, src
        if rcv.srs is not None:
            rcv.srs.send_dro_records(())  # the DIR: this TRD's domain id
        rcv.tr_listener = self._on_tr
        rcv.join_filter = self._may_join
        self._worker = asyncio.get_running_loop().create_task(self._work())
        port = src.features.port.port if src.features.port is not None else 0
        self.up = True
        self.core.receive_portal_up(self.name, self.host.now(), address=(src.advertised_ip, port))
        self.host.kick()

    async def close(self) -> None:
        """Tell the core the portal is down, close proxies and both contexts."""
        self.persist.close()
        if self.up:
            self.up = False
            self.core.receive_portal_down(self.name, self.host.now())
        if self._worker is not None:
            self._worker.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):  # a failed worker
                await self._worker
            self._worker = None
        self._commands.clear()
        rcv, src = self.rcv, self.src
        if rcv is not None:
            rcv.tr_listener = None
            rcv.srs_listener = None
            if not rcv.closed:
                for pr in self.receivers.values():
                    rcv.close_raw_receiver(pr.raw)
                for pattern in self.patterns:
                    rcv.resolver.remove_wildcard_receiver(pattern.symbol)
        self.receivers.clear()
        self.patterns.clear()
        for px in list(self.sources.values()):
            if px.raw is not None:
                with contextlib.suppress(UMError):  # its context may have closed under it
                    await px.raw.close()
        self.sources.clear()
        for eng in (src, rcv):
            if eng is not None:
                await eng.close()
        self.rcv = self.src = None
        # a restart begins afresh
        self._session_keys.clear()
        self._srs_interest.clear()
        self._srs_routes = ()
        self._srs_route_slots.clear()  # the core forgot them too (portal down)
        self._srs_remote = ()

    def failure(self) -> str | None:
        """Why this running portal no longer works (None: it does, or it is not running): a
        context closed under it, or its command worker ended.  The runtime restarts it."""
        if not self.up:
            return None
        for role, eng in (("receiver", self.rcv), ("source", self.src)):
            if eng is None or eng.closed:
                return f"its {role} context closed"
        w = self._worker
        if w is not None and w.done():
            exc = None if w.cancelled() else w.exception()
            return f"its command worker stopped ({exc!r})"
        return None

    # ------------------------------------------------------------------ topic resolution
    def _on_tr(self, data: bytes | memoryview, addr: tuple[str, int]) -> None:
        raw = bytes(data)
        now = self.host.now()
        if self._echoes.consume(raw, now):
            return
        self.tr_received += 1
        try:
            packet = lbmr.decode(raw)
        except lbmr.LBMRError:
            self.tr_malformed += 1
            return
        if packet.type == lbmr.LBMR_TYPE_TOPIC_MGMT and _from_dro(packet):
            # A DRO proxy receiver answering a use query is not a receiver of this TRD (as its
            # TQRs are not, which the core ignores itself).
            self.tr_from_dro_ignored += 1
            return
        try:
            self.core.receive_lbmr(self.name, packet, now)
        except Exception:  # the core promises not to raise on TRD input; never let it kill us
            self.tr_malformed += 1
            log.exception("portal %s: topic resolution datagram from %s refused", self.name, addr)
            return
        if packet.tirs:
            for tir in packet.tirs:
                for key, regex in self.patterns.items():
                    if regex is not None and regex.search(tir.topic):
                        self._open_topic(tir.topic, key)
                if tir.topic in self.receivers:
                    self._resolved(tir, now)
        self.host.kick()

    def _resolved(self, tir: lbmr.TIR, now: float) -> None:
        """A proxy receiver's topic was advertised: the core hears of the source (UM creates
        proxy sources on resolution, before any data)."""
        info = tir.transport_info
        if not isinstance(info, (lbmr.TCPInfo, lbmr.LBTRMInfo)):
            return  # a transport this client cannot join (IPC, SMX, RDMA)
        try:
            advert = advert_from_tir(tir, derive_otid(info))
        except ValueError:
            return
        if is_final_advertisement(tir.options):  # another DRO's proxy source is going
            self.core.receive_source_gone(self.name, advert.source, now)
            return
        self._learn_origin(advert.source, tir.options, tir.index)
        ident = self.persist.identity(tir.options, tir.index)
        if ident is not None:  # a persistent source (umcore.dro.persist)
            advert = dataclasses.replace(advert, persist=ident)
        self.core.receive_source(self.name, advert, now)
        for opt in tir.options:
            if isinstance(opt, ExFuncOption) and opt.src_tcp_port:
                # where a UIM to this source goes (daemons.tnwgd.uim: "SOURCE:" UIMs)
                reqs = self.source_requests
                if advert.source.otid not in reqs and len(reqs) >= MAX_SOURCE_REQUESTS:
                    reqs.pop(next(iter(reqs)))
                reqs[advert.source.otid] = (str(opt.src_ip_addr), opt.src_tcp_port)

    def _learn_origin(self, source: SourceKey, options: tuple[Any, ...], topic_idx: int) -> None:
        """Where the source takes late-join and OTR requests (its LATE_JOIN option): the
        recovery forwarder sends the requests of proxy sources' receivers there
        (:mod:`umcore.dro.recovery`)."""
        for opt in options:
            if isinstance(opt, LateJoinOption) and opt.src_tcp_port:
                origin = Origin(str(opt.src_ip_addr), opt.src_tcp_port, opt.transport_idx,
                                topic_idx)  # fmt: skip
                self.core.recovery.receive_origin(self.name, source, origin)
                return

    def request_address(self) -> tuple[str, int]:
        """The source context's request port (UIMs, responses): what the domain route names."""
        src = self.src
        if src is None or src.features.port is None:
            return ("0.0.0.0", 0)
        return (src.advertised_ip, src.features.port.port)

    def _may_join(self, info: SourceInfo) -> bool:
        """Not a source this portal advertises itself (its own proxy source, or another DRO's
        proxy of the same origin: the core ignores those anyway)."""
        for opt in info.options:
            if isinstance(opt, OTIDOption) and (bytes(opt.otid), info.topic) in self.sources:
                self.own_joins_avoided += 1
                return False
        return True

    def send_lbmr(self, packet: lbmr.LBMRPacket) -> None:
        """Send one of the core's packets into the TRD (with the TNWGD source type)."""
        rcv = self.rcv
        if rcv is None or rcv.endpoint is None:
            if rcv is not None and rcv.srs is not None and self._srs_route(packet, rcv):
                return
            if rcv is not None and rcv.srs is not None and self._srs_remote_interest(packet):
                return
            self.tr_unsent += 1  # SRS-only TRD (or not started): no datagram path
            return
        opts = (*packet.options, *self.packet_options)
        pkt = lbmr.LBMRPacket(
            packet.type, packet.tqrs, packet.tirs, opts, packet.version, packet.body
        )
        try:
            data = lbmr.encode(pkt)
        except UMError as exc:
            self.tr_unsent += 1
            log.warning("portal %s: cannot encode topic resolution: %s", self.name, exc)
            return
        self._echoes.sent(data, self.host.now())
        rcv.send_topic_resolution(data)
        self.tr_sent += 1

    def _srs_route(self, packet: lbmr.LBMRPacket, rcv: Engine) -> bool:
        """In an SRS-resolved TRD the core's domain route record becomes the RTIR this portal
        holds at the SRS (the SRS relays it to every context there, as DIR/RTIR: notes A4,
        seed SRS "DRO routing info").  Use queries, TR requests and interest records have no SRS
        form (the SRS reports receivers itself): False, counted unsent by the caller."""
        body = packet.body
        if packet.type != lbmr.LBMR_TYPE_EXT or not isinstance(body, lbmr.RemoteDomainRoute):
            return False
        routes = ((body.ip, body.port, tuple(body.domains)),)
        if routes != self._srs_routes:
            self._srs_routes = routes
            assert rcv.srs is not None
            rcv.srs.send_dro_records(routes)
        self.tr_sent += 1
        return True

    def _srs_remote_interest(self, packet: lbmr.LBMRPacket) -> bool:
        """In an SRS-resolved TRD the core's interest records become the remote-interest
        records the source context holds at the SRS (module docstring): the set advertised into
        this portal now, one domain per topic / pattern (the SRS keeps one record per topic and
        context; with several domains behind this DRO, the lowest id).  REGEX patterns have
        no WIR form and are left out."""
        if not isinstance(packet.body, lbmr.TNWGInterest):
            return False
        src = self.src
        if src is None or src.srs is None:
            return False
        chosen: dict[tuple[str, bool], int] = {}
        for key, dom in self.core.advertised_interest(self.name):
            if key.pattern_type not in (TOPIC, PCRE):
                continue
            k = (key.symbol, key.is_pattern)
            if k not in chosen or dom < chosen[k]:
                chosen[k] = dom
        entries = tuple(sorted((sym, pat, dom) for (sym, pat), dom in chosen.items()))
        if entries != self._srs_remote:
            self._srs_remote = entries
            src.srs.send_remote_interest(entries)
        self.tr_sent += 1
        return True

    def _on_srs(self, ev: object) -> None:
        """An SRS event of the receiver context (after the context handled it): other
        contexts' interest (RIR/WIR/RER/WER, forward-interest mode) feeds the core; sources
        of proxy receivers' topics (SIR/SER) are resolved or gone, as TIRs are on UDP."""
        now = self.host.now()
        if isinstance(ev, InterestReported):
            self._srs_interest_record(ev.record, now)
        elif isinstance(ev, DroRecord):
            if not self.receive_srs_route_record(ev, now):
                return
        elif isinstance(ev, SourceResolved):
            info = info_from_sir(ev.record)
            if info is None:
                return
            self.srs_sources += 1
            topic = info.topic
            for key, regex in self.patterns.items():
                if regex is not None and regex.search(topic):
                    self._open_topic(topic, key)
            if topic in self.receivers:
                tir = lbmr.TIR(topic, info.index, info.transport, info.options)
                self._resolved(tir, now)
        elif isinstance(ev, SourceWithdrawn):
            info = info_from_sir(ev.record)
            if info is None or info.topic not in self.receivers:
                return
            try:
                tir = lbmr.TIR(info.topic, info.index, info.transport, info.options)
                advert = advert_from_tir(tir, derive_otid(info.transport))
            except ValueError:
                return
            self.core.receive_source_gone(self.name, advert.source, now)
        else:
            return
        self.host.kick()

    def receive_srs_route_record(self, ev: DroRecord, now: float) -> bool:
        """Another DRO's RTIR / RTER: the core's held domain route (module docstring).  With
        several SRSes (hot/hot) each relays the record: it ends when every SRS that relayed
        it has ended it (one SRS's RTER may only mean the DRO lost that SRS).  False: nothing
        for the core."""
        rec = ev.record
        if isinstance(rec, srsm.DomainInfo):
            return False  # a DRO of this TRD names its domain: ours (the context's table has it)
        self.srs_route_records += 1
        key = (rec.ip, rec.port, tuple(rec.domains))
        held = self._srs_route_slots.get(key)
        if isinstance(rec, srsm.RouteInfo):
            if held is None:
                if len(self._srs_route_slots) >= MAX_SRS_ROUTE_RECORDS:
                    self.srs_route_records_refused += 1
                    return False
                held = self._srs_route_slots[key] = set()
            held.add(ev.slot)
            self.core.receive_srs_route(self.name, rec.ip, rec.port, key[2], now)
            return True
        if held is None:
            return False  # an end of a record not held
        held.discard(ev.slot)
        if held:
            return False  # another SRS still relays it
        del self._srs_route_slots[key]
        self.core.receive_srs_route(self.name, rec.ip, rec.port, key[2], now, present=False)
        return True

    def _srs_interest_record(self, rec: object, now: float) -> None:
        if isinstance(rec, (srsm.ReceiverInfo, srsm.ReceiverEnd)):
            key = InterestKey(rec.topic)
        elif isinstance(rec, (srsm.WildcardReceiverInfo, srsm.WildcardReceiverEnd)):
            key = InterestKey(rec.pattern, PCRE)
        else:
            return
        self.srs_interest_records += 1
        inst = bytes(rec.context_instance)
        domain: int | None = None
        if rec.context_type == srsm.APP_TYPE_TNWGD:
            if self.src is not None and inst == bytes(self.src.features.ctxinst):
                return  # this portal's own remote interest, back through forward-interest
            if rec.domain_id == self.domain_id:
                self.srs_proxy_interest_ignored += 1  # a proxy receiver (module docstring)
                return
            self.srs_dro_interest += 1
            domain = rec.domain_id  # another DRO's remote interest: the domain behind it
        hk = (key, domain)
        holders = self._srs_interest.get(hk)
        if isinstance(rec, (srsm.ReceiverInfo, srsm.WildcardReceiverInfo)):
            if holders is None:
                holders = self._srs_interest[hk] = set()
                self.core.receive_srs_interest(self.name, key, now, present=True, domain=domain)
            holders.add(inst)
            return
        if holders is None:
            return
        if inst in holders:
            holders.discard(inst)
        elif holders:  # an end the SRS sent without the context instance (expiry): one holder
            holders.pop()
        if not holders:
            del self._srs_interest[hk]
            self.core.receive_srs_interest(self.name, key, now, present=False, domain=domain)

    # ------------------------------------------------------------------ commands
    def apply(self, commands: list[PortalCommand]) -> None:
        """Queue the core's commands for this portal (applied in order by the worker)."""
        self._commands.extend(commands)
        self._wake.set()

    async def _work(self) -> None:
        while True:
            await self._wake.wait()
            self._wake.clear()
            while self._commands:
                cmd = self._commands.popleft()
                try:
                    await self._apply(cmd)
                except asyncio.CancelledError:
                    raise
                except Exception as exc:
                    self.command_errors += 1
                    log.error("portal %s: %s failed: %s", self.name, type(cmd).__name__, exc)
                self.host.kick()

    async def _apply(self, cmd: PortalCommand) -> None:
        if isinstance(cmd, CreateProxyReceiver):
            self._create_receiver(cmd.key)
        elif isinstance(cmd, DeleteProxyReceiver):
            self._delete_receiver(cmd.key)
        elif isinstance(cmd, CreateProxySource):
            await self._create_source(cmd)
        elif isinstance(cmd, UpdateProxySource):
            px = self.sources.get(cmd.source)
            if px is not None and px.raw is not None and self.src is not None:
                self.src.readvertise(px.raw.source, (CostOption(cmd.hop_count, cmd.cost),))
        elif isinstance(cmd, FinalAdvertisement):
            px = self.sources.get(cmd.source)
            if px is not None and px.raw is not None:
                self._final_advertisement(px.raw)
        elif isinstance(cmd, DeleteProxySource):
            self.core.recovery.proxy_deleted(self.name, cmd.source)
            self.persist.proxy_gone(cmd.source)
            px = self.sources.pop(cmd.source, None)
            if px is not None and px.raw is not None:
                await px.raw.close()

    def _final_advertisement(self, raw: RawSource) -> None:
        """One TIR of the proxy source with COST cost -1 (:data:`FINAL_COST`, the client
        library's final advertisement, :mod:`umcore.engine.dro` 6): its receivers see EOS now."""
        src = self.src
        es = raw.source
        if src is None or src.endpoint is None:
            return
        for info in src.resolver.cached_sources(es.topic):
            if info.index == es.tidx and info.transport == es.transport_info:
                hops = next((o.hop_count for o in info.options if isinstance(o, CostOption)), 1)
                options = tuple(o for o in info.options if not isinstance(o, CostOption))
                tir = lbmr.TIR(
                    es.topic, es.tidx, es.transport_info, (*options, CostOption(hops, FINAL_COST))
                )
                pkt = lbmr.LBMRPacket(lbmr.LBMR_TYPE_NORMAL, tirs=[tir])
                src.send_topic_resolution(lbmr.encode(pkt))
                self.final_advertisements += 1
                return

    # ------------------------------------------------------------------ proxy receivers
    def _create_receiver(self, key: InterestKey) -> None:
        rcv = self.rcv
        if rcv is None:
            return
        if not key.is_pattern:
            self._open_topic(key.symbol, key)
            return
        if key in self.patterns:
            return
        try:
            found = rcv.resolver.add_wildcard_receiver(key.symbol, self.host.now())
        except Exception as exc:  # re.error: the core compiled it, but be safe
            log.warning("portal %s: pattern %r refused: %s", self.name, key.symbol, exc)
            return
        self.patterns[key] = rcv.resolver.wildcard_pattern(key.symbol)
        rcv.flush_resolver()
        for info in found:
            self._open_topic(info.topic, key)

    def _open_topic(self, topic: str, reason: InterestKey) -> None:
        rcv = self.rcv
        if rcv is None:
            return
        pr = self.receivers.get(topic)
        if pr is None:
            holder: list[_ProxyReceiver] = []
            raw = rcv.open_raw_receiver(
                topic,
                on_frames=self._frames_handler(holder),
                on_session=self._session_handler(holder),
                attributes=self.receiver_attributes,
            )
            pr = self.receivers[topic] = _ProxyReceiver(raw)
            holder.append(pr)
        pr.reasons.add(reason)

    def _delete_receiver(self, key: InterestKey) -> None:
        rcv = self.rcv
        if key.is_pattern and self.patterns.pop(key, None) is not None and rcv is not None:
            rcv.resolver.remove_wildcard_receiver(key.symbol)
        for topic in [t for t, pr in self.receivers.items() if key in pr.reasons]:
            pr = self.receivers[topic]
            pr.reasons.discard(key)
            if pr.reasons:
                continue
            del self.receivers[topic]
            if rcv is not None:
                rcv.close_raw_receiver(pr.raw)
            now = self.host.now()
            for sk in pr.sessions.values():
                self.core.receive_source_gone(self.name, sk, now)
            pr.sessions.clear()

    def _source_key(self, session: RawSession) -> SourceKey:
        sk = self._session_keys.get(session)
        if sk is None:
            otid: bytes | None = None
            for opt in session.options:
                if isinstance(opt, OTIDOption):
                    otid = bytes(opt.otid)
            if otid is None:
                transport = parse_source_string(session.source_string)
                otid = derive_otid(transport) if transport is not None else bytes(32)
            sk = self._session_keys[session] = SourceKey(otid, session.topic)
        return sk

    def _session_handler(self, holder: list[_ProxyReceiver]) -> Callable[[RawSession, bool], None]:
        def on_session(session: RawSession, active: bool) -> None:
            pr = holder[0]
            sk = self._source_key(session)
            now = self.host.now()
            if active:
                # known since its TIR (:meth:`_resolved`); said again in case that was missed
                cost = hops = 0
                domain: int | None = None
                for opt in session.options:
                    if isinstance(opt, CostOption):
                        cost, hops = opt.cost, opt.hop_count
                    elif isinstance(opt, DomainIdOption):
                        domain = opt.domain_id
                pr.sessions[session] = sk
                self._learn_origin(sk, session.options, session.topic_index)
                ident = self.persist.identity(session.options, session.topic_index)
                advert = SourceAdvert(sk, source_transport(session), cost, hops, domain, ident)
                self.core.receive_source(self.name, advert, now)
                self.persist.session_up(session, sk, ident, now)
            else:
                self.persist.session_down(session, sk)
                pr.sessions.pop(session, None)
                self._session_keys.pop(session, None)
                self.core.receive_source_gone(self.name, sk, now)
            self.host.kick()

        return on_session

    def _frames_handler(
        self, holder: list[_ProxyReceiver]
    ) -> Callable[[RawSession, list[bytes]], None]:
        name = self.name
        receive = self.core.receive_frames
        keys = self._session_keys
        kick = self.host.kick
        drain = self.host.drain
        persistent = self.persist.sessions

        def on_frames(session: RawSession, frames: list[bytes]) -> None:
            sk = keys.get(session)
            if sk is None:
                sk = self._source_key(session)
            if session in persistent:  # its SRIs (umcore.dro.persist)
                self.persist.frames(session, sk, frames)
            tidx = session.topic_index
            n = len(frames)
            total = sum(map(len, frames))
            if total <= DRAIN_BYTES:
                if receive(name, sk, tidx, frames):
                    drain()
                    kick()
                return
            step = max(1, n * DRAIN_BYTES // total)  # frames of about DRAIN_BYTES a piece
            queued = 0
            for i in range(0, n, step):  # one read may hold more than a small <max-queue>
                if receive(name, sk, tidx, frames[i : i + step]):
                    queued += 1
                    drain()
            if queued:
                kick()

        return on_frames

    # ------------------------------------------------------------------ proxy sources
    async def _create_source(self, cmd: CreateProxySource) -> None:
        src = self.src
        if src is None or cmd.source in self.sources:
            return
        px = self.sources[cmd.source] = _ProxySource(cmd.source)
        options: tuple[Any, ...] = (
            OTIDOption(cmd.source.otid),
            CostOption(cmd.hop_count, cmd.cost),
            DomainIdOption(cmd.origin_domain),
        )
        recovery = self.core.recovery
        if recovery.offers_late_join(cmd.source):
            # late join / OTR requests come to this portal's request port and go on to the
            # origin (umcore.dro.recovery); the proxy source retains nothing itself
            tidx = recovery.proxy_created(self.name, cmd.source)
            if tidx is not None:
                ip, port = self.request_address()
                options = (*options, LateJoinOption(port, ip, tidx, 0, 0))
        options = (*options, *self.persist.proxy_options(cmd.source, options))
        kick = self.host.kick

        def on_event(code: int, info: object) -> None:
            if code == SRC_EVENT_WAKEUP:
                kick()

        try:
            raw = await src.open_raw_source(
                cmd.source.topic,
                attributes=self.source_attributes,
                on_event=on_event,
                tir_options=options,
            )
        except BaseException:
            self.sources.pop(cmd.source, None)
            recovery.proxy_deleted(self.name, cmd.source)
            raise
        if self.sources.get(cmd.source) is px:
            px.raw = raw
        else:  # deleted while it opened
            await raw.close()

    def send_control(self, source: SourceKey, frame: bytes) -> None:
        """A control frame (SRI) the core queued for this portal (``take_controls``)."""
        self.persist.send(source, frame)

    def drain(self, max_frames: int = 0) -> bool:
        """Send what the core queued for this portal until a proxy source would block (or
        ``max_frames`` were sent, 0 = no limit); True when it stopped at that limit.  The
        queue's runs go to their proxy sources whole (``RawSource.send_run_nowait``: one check,
        one clock read, one write per run)."""
        q = self.core.queue(self.name)
        run = q.peek_run()
        if run is None:
            return False
        sources = self.sources
        touched: set[RawSource] = set()
        sent = nbytes = 0
        limited = False
        while run is not None:
            if max_frames and sent >= max_frames:
                limited = True
                break
            px = sources.get((run.otid, run.topic))
            if px is None:
                self.dropped_no_proxy += run.count
                q.consume(run.count)
                run = q.peek_run()
                continue
            raw = px.raw
            if raw is None:
                break  # still opening: the worker kicks when it is open
            k = run.count if not max_frames else min(run.count, max_frames - sent)
            try:
                n = raw.send_run_nowait(run.data, run.size, k, flush=True)
            except WouldBlock:
                self.would_block += 1
                break  # WAKEUP kicks
            except UMError as exc:
                # not data frames, or longer than the proxy session's datagram max size (UM's
                # *_dropped_size_error: datagram sizes differ between TRDs): the frames of that
                # run only (one size: every one of them would be refused)
                self.send_errors += run.count
                q.consume(run.count)
                log.debug("portal %s: frames refused: %s", self.name, exc)
                run = q.peek_run()
                continue
            touched.add(raw)
            nbytes += n * run.size
            sent += n
            q.consume(n)
            if n < k and raw.source.writer.paused:
                self.would_block += 1
                break  # blocked midway: WAKEUP kicks
            run = q.peek_run()
        self.frames_forwarded += sent
        self.bytes_forwarded += nbytes
        for raw in touched:
            try:
                raw.flush()
            except UMError:
                self.send_errors += 1
        return limited
