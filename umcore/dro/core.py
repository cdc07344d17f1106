"""The DRO's sans-IO routing core: interest in, proxies and forwarded frames out.

Theory of operation
-------------------
:class:`DroCore` composes the parts of this package for one DRO (``tnwgd``): per portal an
interest table (:mod:`~umcore.dro.interest`), a byte-bounded egress queue
(:mod:`~umcore.dro.queue`), compiled ACLs (:mod:`~umcore.dro.acl`) and TR rate limiters
(:mod:`~umcore.dro.ratelimit`); per originating source a duplicate window
(:mod:`~umcore.dro.seqwindow`); proxy receivers and proxy sources (:mod:`~umcore.dro.proxy`);
and the topology map (:mod:`~umcore.dro.routing`).  It does no I/O and reads no clock: adapters
call ``receive_*`` with ``now`` (seconds), take ``take_*`` outputs, and call
:meth:`DroCore.handle_timer` at :meth:`DroCore.next_timer`.

Interest to proxy receivers.  Every portal's interest is a set of (key, domain) pairs: a topic or
pattern wanted by receivers in a domain behind that portal.  A proxy receiver for key K exists on
portal Pi while some other portal Pe has a pair (K, R) such that R is not Pi's own domain, we are
the designated forwarder on the shortest-path tree towards R from Pi's side to Pe
(:meth:`Router.forwards <umcore.dro.routing.Router.forwards>`; a domain not on our map is
served by every portal, as a lone DRO would), Pi's inbound ACL may accept K and Pe's outbound ACL
accepts it.  The same pairs are the interest Pi advertises into its TRD as TNWG interest records
tagged with R, for the DROs beyond (``<remote-topic-interest>`` pacing).

Sources to proxy sources.  A proxy receiver that resolves a source reports it
(:meth:`DroCore.receive_source`: OTID, topic, TRD-local transport, the COST option's cost and hop
count, the DOMAIN_ID option's domain).  Among the portals that report one source the cheapest
(incoming cost + portal cost, then portal order) is its active ingress; the others are standby and
take over when it goes (failover).  The source goes out of each portal Pe that has matching
interest (K, R) where the tree path from the source's domain to R enters us by the ingress and
leaves by Pe, and Pe's outbound ACL accepts the topic; there a proxy source advertises it with
cost = incoming + ingress portal + Pe's cost and one more hop.  A source we advertise ourselves
on a portal is never taken back in from that portal.  When a source stops routing out of a
portal its proxy source is deleted after ``source-deletion-delay`` with final advertisements.

Frames.  :meth:`DroCore.receive_frames` is the data path: a proxy receiver's read (TCP) or
datagram (LBT-RU/RM) at a time, whole LBMC frames.  One dict lookup finds the source's flow; the
read's frames are joined once and cut into *runs* -- data frames of the proxy receiver's topic
index, one size, consecutive sequence numbers -- by comparing strided columns of their headers
(all in C); a run's numbers go through the duplicate window at once
(:meth:`SeqWindow.check_run <umcore.dro.seqwindow.SeqWindow.check_run>`) and the run is offered
to each egress portal's queue as one :class:`~umcore.dro.queue.FrameRun` (a slice of the joined
read: the frames' bytes as received, fragments never reassembled, the original sequence numbers
kept); a full queue takes the prefix that fits and counts the rest, without touching the others.
Anything else -- a duplicate or an old number among a run's, a frame on its own, another size --
goes through :meth:`DroCore.receive_frame`, frame by frame, and the result is the same either
way: the same counters, window and queues.

Topic resolution out.  Per endpoint portal the core paces: use queries for aged local interest
(``<topic-use-query>``/``<pattern-use-query>``), TNWG interest records (new pairs at most every
``min-interval``, all of them with REFRESH every ``max-interval``, withdrawn pairs with CANCEL),
remote domain route records (the domains whose traffic from that TRD we carry, at most every
``min-interval`` after a change, every ``max-interval`` anyway) and, after the portal comes up,
``<initial-request>`` topic resolution requests (QUERY, WILDCARD_QUERY and GW_REMOTE_INTEREST,
every ``periodic-interval`` for ``duration`` seconds).  Each class has its own
:class:`~umcore.dro.ratelimit.TrafficLimiter`.  What is built is handed out as decoded
:class:`~umcore.wire.lbmr.LBMRPacket` objects per portal (:meth:`DroCore.take_lbmr`): the adapter
encodes and sends them with its portal context's resolver.  Peer portals get the interest
records too; how a peer link carries them is the peer protocol's business
(:mod:`umcore.dro.inferred`).
"""

from __future__ import annotations

import heapq
import ipaddress
import re
import struct
import sys
from array import array
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from enum import Enum

from umcore.config.dro import (
    DROConfig,
    Endpoint,
    Peer,
    RemotePattern,
    RemoteTopic,
    TopicResolution,
)
from umcore.dro.acl import CompiledAcl, SourceTransport, compile_acl
from umcore.dro.events import (
    InterestAdded,
    InterestRemoved,
    PortalCommand,
    SourceKey,
)
from umcore.dro.interest import (
    TOPIC,
    InterestChange,
    InterestKey,
    LocalState,
    PortalInterest,
)
from umcore.dro.mim import MimRoute, MimSendResult, MimStats
from umcore.dro.persist import PersistIdentity
from umcore.dro.proxy import ProxyReceiver, ProxySource, ReceiverEvent, SourceState
from umcore.dro.queue import SQN_MASK, ForwardedFrame, PortalQueue
from umcore.dro.ratelimit import TrafficLimiter
from umcore.dro.recovery import RecoveryForwarder
from umcore.dro.routing import Adjacency, RouteInfo, Router, domain_node, dro_node
from umcore.dro.seqwindow import SQN_MODULUS, SeqVerdict, SeqWindow, check_window_config
from umcore.errors import ConfigError
from umcore.events import CoreEvent
from umcore.wire import lbmr
from umcore.wire.lbmr_ext import (
    TMR_FLAG_RESPONSE,
    TMR_FLAG_WILDCARD_PCRE,
    TMR_FLAG_WILDCARD_REGEX,
    TMR_TOPIC_USE,
    TNWG_INTEREST_FLAG_CANCEL,
    TNWG_INTEREST_FLAG_PATTERN,
    TNWG_INTEREST_FLAG_REFRESH,
    TRREQ_GW_REMOTE_INTEREST,
    TRREQ_QUERY,
    TRREQ_WILDCARD_QUERY,
)
from umcore.wire.lbmr_options import SRC_TYPE_TNWGD

__all__ = [
    "INITIAL_REQUEST_FLAGS",
    "MAX_SOURCES",
    "MAX_SRS_ROUTES_PER_PORTAL",
    "TR_PAYLOAD_BUDGET",
    "DroCore",
    "PortalState",
    "PortalStats",
    "SourceAdvert",
    "advert_from_tir",
]

# Bytes of LBMR records the core puts in one datagram it builds: the default
# resolver_datagram_max_size (8192) less room for the header and packet options an adapter's
# context may append.  Datagram sizes must match network-wide (notes A2), so the default is the
# safe choice.
TR_PAYLOAD_BUDGET = 8192 - 256
# Originating sources tracked at once.  Each costs a duplicate window (size/8 bytes, 2 KiB by
# default); 1M sources is 2 GiB, more than a DRO process should take, so the table stops there
# and counts what it refused (sources_refused) rather than grow without bound.
MAX_SOURCES = 1_000_000
# Control frames (SRIs, umcore.dro.persist) queued for the portals between two pumps: a source
# sends a few SRIs per registration change, so beyond this they are dropped and counted
# (``controls_dropped``; the relay asks again).
MAX_CONTROLS = 4096
# Other DROs' route records (RTIR) one SRS-resolved portal holds: one per DRO portal in that
# TRD (the SRS itself allows a client 256, umcore.srs.common.MAX_ROUTES_PER_CLIENT); a TRD with
# more DRO portals than this is beyond any documented topology, so the rest are refused, counted.
MAX_SRS_ROUTES_PER_PORTAL = 1024
# What a DRO endpoint's start-up requests ask (notes A4 "initial request"): receivers and
# wildcard receivers to query again (and so answer use queries), other DROs to re-send interest.
INITIAL_REQUEST_FLAGS = TRREQ_QUERY | TRREQ_WILDCARD_QUERY | TRREQ_GW_REMOTE_INTEREST
# The LBMR header version of the extended messages a DRO originates ("gateway", our wire notes).
DRO_LBMR_VERSION = 1

_INF = float("inf")

# The LBMC data frame header (ver/type, next header, msglen, topic index, sqn) and its parts.
_HEAD = struct.Struct("!BBHII")
_TIDX = struct.Struct("!I")
_SQN = _TIDX
FRAME_HEADER = _HEAD.size
# ver/type of a data frame (version 0, type DATA).
_DATA = 0x00
# Fewest frames of a read checked as one run (below it, frame by frame costs no more).
RUN_MIN_FRAMES = 4
# A run's sequence numbers are built as one array of u32 (big-endian on the wire).
assert array("I").itemsize == 4
_SWAP = sys.byteorder == "little"


def _prefix(col: bytes, ref: bytes) -> int:
    """How many leading bytes ``col`` and ``ref`` (the same length) share: a binary search of
    C-level comparisons."""
    if col == ref:
        return len(col)
    lo, hi = 0, len(col)  # col[:lo] matches, col[:hi] does not
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if col[:mid] == ref[:mid]:
            lo = mid
        else:
            hi = mid
    return lo


def _run_length(buf: bytes, pos: int, size: int, most: int) -> int:
    """How many of the (at most ``most``) frames at ``buf[pos:]`` form a run with the first,
    a data frame of ``size`` bytes: plain data frames of that size (ver/type, next header and
    msglen as the first's), the same topic index, consecutive sequence numbers (wrapping at
    2**32).  Every test is a comparison of strided slices, in C."""
    good = most
    stop = pos + good * size
    for off in range(8):  # ver/type, next header, msglen, topic index: the first's
        col = buf[pos + off : stop : size]
        good = _prefix(col, col[:1] * good)
        if good == 1:
            return 1
        stop = pos + good * size
    first = _SQN.unpack_from(buf, pos + 8)[0]
    if first + good <= SQN_MODULUS:
        numbers = array("I", range(first, first + good))
    else:
        numbers = array("I", [(first + i) & SQN_MASK for i in range(good)])
    if _SWAP:
        numbers.byteswap()
    want = numbers.tobytes()
    for j in range(4):  # the sequence numbers, one byte column at a time
        good = _prefix(buf[pos + 8 + j : stop : size], want[j : 4 * good : 4])
        if good == 1:
            return 1
        stop = pos + good * size
    return good


class PortalState(Enum):
    DOWN = "down"
    UP = "up"


class PortalEvent(Enum):
    UP = "up"
    DOWN = "down"


# The one transition table of a portal (its contexts, or its peer link, are running or not).
PORTAL_TRANSITIONS: dict[tuple[PortalState, PortalEvent], PortalState] = {
    (PortalState.DOWN, PortalEvent.UP): PortalState.UP,
    (PortalState.UP, PortalEvent.UP): PortalState.UP,
    (PortalState.UP, PortalEvent.DOWN): PortalState.DOWN,
    (PortalState.DOWN, PortalEvent.DOWN): PortalState.DOWN,
}


@dataclass(frozen=True, slots=True)
class SourceAdvert:
    """A source a proxy receiver resolved: who it is, how it was reached, at what cost."""

    source: SourceKey
    transport: SourceTransport | None = None
    cost: int = 0  # the COST option's cost (0: a source in this TRD)
    hop_count: int = 0  # the COST option's hop count (DROs crossed so far)
    origin_domain: int | None = None  # the DOMAIN_ID option (None: the portal's own domain)
    # a persistent source's identity (its TIR's UME option; :mod:`umcore.dro.persist`)
    persist: PersistIdentity | None = None


def _transport_of(info: object) -> SourceTransport | None:
    if isinstance(info, lbmr.LBTRUInfo):
        return SourceTransport("lbtru", source_ip=info.ip, udp_source_port=info.port)
    if isinstance(info, lbmr.TCPInfo):
        return SourceTransport("tcp", source_ip=info.ip, tcp_source_port=info.port)
    if isinstance(info, lbmr.LBTRMInfo):
        return SourceTransport(
            "lbtrm",
            source_ip=info.src_ip,
            multicast_group=info.mc_group,
            udp_source_port=info.sport,
            udp_destination_port=info.dport,
        )
    if isinstance(info, lbmr.LBTSMXInfo):
        return SourceTransport("lbtsmx", xport_id=info.xport_id)
    if isinstance(info, lbmr.LBTIPCInfo):
        return SourceTransport("lbtipc", xport_id=info.xport_id)
    return None


def advert_from_tir(tir: lbmr.TIR, otid: bytes | None = None) -> SourceAdvert:
    """Read a TIR's OTID, COST and DOMAIN_ID options into a :class:`SourceAdvert`; ``otid``
    stands in when the TIR has no OTID option (the adapter derives one from the transport)."""
    cost = hops = 0
    domain: int | None = None
    for opt in tir.options:
        if isinstance(opt, lbmr.OTIDOption):
            otid = opt.otid
        elif isinstance(opt, lbmr.CostOption):
            cost, hops = opt.cost, opt.hop_count
        elif isinstance(opt, lbmr.DomainIdOption):
            domain = opt.domain_id
    if otid is None:
        raise ValueError(f"TIR for {tir.topic!r} has no OTID option and none was given")
    return SourceAdvert(
        SourceKey(bytes(otid), tir.topic), _transport_of(tir.transport_info), cost, hops, domain
    )


class PortalStats:
    """Counters of one portal (cumulative since start; the DROMonMsg portal statistics)."""

    __slots__ = (
        "acl_rejected",
        "bytes_received",
        "dropped_dup",
        "dropped_old",
        "frames_received",
        "hop_limit_dropped",
        "own_sources_ignored",
        "sources_refused",
        "srs_routes_refused",
        "tqrs_from_dros_ignored",
        "unknown_source",
    )

    def __init__(self) -> None:
        self.frames_received = 0
        self.bytes_received = 0
        self.dropped_dup = 0  # *_dropped_dup: a frame already forwarded
        self.dropped_old = 0  # below the duplicate window
        self.unknown_source = 0  # a frame from a source this portal has not reported
        self.acl_rejected = 0  # sources refused by an inbound or outbound ACL
        self.hop_limit_dropped = 0  # sources that crossed max-hop-count DROs already
        self.own_sources_ignored = 0  # our own proxy sources seen by our proxy receiver
        self.sources_refused = 0  # MAX_SOURCES reached
        self.srs_routes_refused = 0  # other DROs' RTIRs past MAX_SRS_ROUTES_PER_PORTAL
        self.tqrs_from_dros_ignored = 0  # TQRs of other DROs' proxy receivers


class _Pacer:
    """When one class of TR message of one portal is next due, and its limiter."""

    __slots__ = (
        "dirty",
        "dirty_at",
        "last_sent",
        "limiter",
        "max_interval",
        "min_interval",
        "next_full",
    )

    def __init__(self, min_ms: int, max_ms: int, bps: int, ops: int, now: float) -> None:
        self.min_interval = min_ms / 1000
        self.max_interval = max_ms / 1000
        self.limiter = TrafficLimiter(bps, ops, now)
        self.last_sent = -_INF
        self.next_full = now
        self.dirty = False
        self.dirty_at = now

    def mark(self, now: float) -> None:
        """Something new to send (at most every min-interval)."""
        if not self.dirty:
            self.dirty = True
            self.dirty_at = now

    def due(self) -> float:
        if self.dirty:
            return min(self.next_full, max(self.dirty_at, self.last_sent + self.min_interval))
        return self.next_full


class _Portal:
    __slots__ = (
        "acl",
        "address",
        "advertised",
        "advertised_doms",
        "cancelled",
        "cost",
        "deletion_delay",
        "domain_id",
        "domain_pacer",
        "domain_routes",
        "index",
        "initial_flags",
        "initial_interval",
        "initial_left",
        "initial_next",
        "interest",
        "interest_pacer",
        "name",
        "peer_node",
        "query_limiter",
        "queue",
        "sqn_increment",
        "sqn_size",
        "srs_routes",
        "state",
        "stats",
        "unsent",
    )

    def __init__(self, cfg: Endpoint | Peer, index: int, source: str, now: float) -> None:
        self.name = cfg.name
        self.index = index
        self.cost = cfg.cost
        self.domain_id = cfg.domain_id if isinstance(cfg, Endpoint) else None
        self.deletion_delay = cfg.source_deletion_delay / 1000
        self.acl: CompiledAcl = compile_acl(cfg.acl, source)
        check_window_config(cfg.sqn_window.size, cfg.sqn_window.increment)
        self.sqn_size = cfg.sqn_window.size
        self.sqn_increment = cfg.sqn_window.increment
        self.queue = PortalQueue(cfg.max_queue)
        self.stats = PortalStats()
        self.state = PortalState.DOWN
        self.address: tuple[str, int] | None = None
        self.peer_node: int | None = None
        tr = cfg.topic_resolution if isinstance(cfg, Endpoint) else TopicResolution()
        rt = cfg.remote_topic if isinstance(cfg, Endpoint) else RemoteTopic()
        rp = cfg.remote_pattern if isinstance(cfg, Endpoint) else RemotePattern()
        self.interest = PortalInterest(
            cfg.name,
            self.domain_id,
            topic_use_query=tr.topic_use_query,
            pattern_use_query=tr.pattern_use_query,
            remote_topic=rt,
            remote_pattern=rp,
            now=now,
        )
        self.query_limiter = {
            is_pattern: TrafficLimiter(q.rate_limit.bps, q.rate_limit.objects_per_second, now)
            for is_pattern, q in ((False, tr.topic_use_query), (True, tr.pattern_use_query))
        }
        self.interest_pacer = {
            is_pattern: _Pacer(
                i.min_interval,
                i.max_interval,
                i.rate_limit.bps,
                i.rate_limit.objects_per_second,
                now,
            )
            for is_pattern, i in (
                (False, tr.remote_topic_interest),
                (True, tr.remote_pattern_interest),
            )
        }
        dr = tr.domain_route
        self.domain_pacer = _Pacer(
            dr.min_interval,
            dr.max_interval,
            dr.rate_limit.bps,
            dr.rate_limit.objects_per_second,
            now,
        )
        self.domain_routes: tuple[int, ...] = ()
        # other DROs' routes the portal's SRS relayed (RTIR): (ip, port) -> domains, held
        # until their RTER and fed to the router again on every timer (it ages domain routes)
        self.srs_routes: dict[tuple[str, int], tuple[int, ...]] = {}
        ir = tr.initial_request
        self.initial_interval = ir.periodic_interval / 1000
        self.initial_left = 0
        self.initial_next = _INF
        self.initial_flags = INITIAL_REQUEST_FLAGS
        # interest we advertise into this portal's side: pair -> None (ordered set)
        self.advertised: dict[tuple[InterestKey, int], None] = {}
        self.advertised_doms: dict[InterestKey, set[int]] = {}  # the same, by key
        self.unsent: dict[tuple[InterestKey, int], None] = {}  # new since the last send
        self.cancelled: dict[tuple[InterestKey, int], None] = {}  # withdrawn, CANCEL to send

    @property
    def up(self) -> bool:
        return self.state is PortalState.UP


class _Seen:
    __slots__ = ("cost", "hop_count", "origin", "persist", "transport")

    def __init__(self, advert: SourceAdvert, origin: int | None) -> None:
        self.cost = advert.cost
        self.hop_count = advert.hop_count
        self.origin = origin
        self.transport = advert.transport
        self.persist = advert.persist


class _Flow:
    """One originating source: where it is seen, its window, where its frames go."""

    __slots__ = ("egress", "ingress", "seen", "window")

    def __init__(self, window: SeqWindow) -> None:
        self.window = window
        self.seen: dict[str, _Seen] = {}  # ingress portal -> how it was seen there
        self.ingress: str | None = None  # the active ingress
        self.egress: tuple[PortalQueue, ...] = ()


class DroCore:
    """The routing core of one DRO; the public API is in :mod:`umcore.dro`."""

    def __init__(self, config: DROConfig, node_id: int, now: float = 0.0) -> None:
        if not config.portals:
            raise ConfigError("a DRO needs portals", source=config.source, what="<portals>")
        self.config = config
        self.node_id = node_id
        d = config.daemon
        self.router = Router(node_id, d.name or "", d.route_info, d.route_recalculation, now)
        self.portals: dict[str, _Portal] = {}
        for i, cfg in enumerate(config.portals):
            self.portals[cfg.name] = _Portal(cfg, i, config.source, now)
        self.route_info_next = now
        self._commands: list[PortalCommand] = []
        self._events: list[CoreEvent] = []
        self._lbmr: list[tuple[str, lbmr.LBMRPacket]] = []
        self._route_infos: list[tuple[str, RouteInfo]] = []
        # interest index: key -> portal -> domains
        self._interest: dict[InterestKey, dict[str, set[int]]] = {}
        self._patterns: dict[InterestKey, re.Pattern[str]] = {}
        self._receivers: dict[tuple[str, InterestKey], ProxyReceiver] = {}
        self._sources: dict[tuple[str, SourceKey], ProxySource] = {}
        self._source_heap: list[tuple[float, int, str, SourceKey]] = []
        self._seq = 0
        self._flows: dict[SourceKey, _Flow] = {}
        self._by_topic: dict[str, set[SourceKey]] = {}
        # control frames (SRIs) for each egress portal, and those refused (MAX_CONTROLS)
        self._controls: list[tuple[str, SourceKey, bytes]] = []
        self.controls_dropped = 0
        #: late join / OTR requests forwarded to the origins (umcore.dro.recovery)
        self.recovery = RecoveryForwarder(self.ingress_of, self.portal_address, self.is_peer)
        self._mim: dict[str, MimStats] = {name: MimStats() for name in self.portals}

    # --- portals ------------------------------------------------------------------------------

    def ingress_of(self, source: SourceKey) -> str | None:
        """The portal ``source``'s frames are taken from now (its cheapest path), or None."""
        flow = self._flows.get(source)
        return None if flow is None else flow.ingress

    def is_peer(self, portal: str) -> bool:
        """``portal`` is a peer portal (a link to another DRO, no TRD of its own)."""
        p = self.portals.get(portal)
        return p is not None and p.domain_id is None

    def portal_address(self, portal: str) -> tuple[str, int] | None:
        """An up endpoint portal's request port (what its domain-route records name)."""
        p = self.portals.get(portal)
        return p.address if p is not None and p.up else None

    def _portal(self, name: str) -> _Portal:
        try:
            return self.portals[name]
        except KeyError:
            raise ValueError(f"no portal named {name!r}") from None

    def receive_portal_up(
        self,
        portal: str,
        now: float,
        *,
        address: tuple[str, int] | None = None,
        peer_node_id: int | None = None,
    ) -> None:
        """The portal's contexts run (endpoint: ``address`` is its domain-route ip and port) or
        its peer link is up (``peer_node_id``: the DRO at the other end, once known)."""
        p = self._portal(portal)
        was_up = p.up
        p.state = PORTAL_TRANSITIONS[(p.state, PortalEvent.UP)]
        if address is not None:
            p.address = address
        if peer_node_id is not None:
            p.peer_node = peer_node_id
        if p.domain_id is not None:
            link: Adjacency | None = Adjacency(domain_node(p.domain_id), p.cost)
        else:
            link = None if p.peer_node is None else Adjacency(dro_node(p.peer_node), p.cost)
        self.router.set_portal(portal, link, now)
        if not was_up:
            if p.domain_id is not None:
                p.initial_left = max(1, round(self._initial_duration(p) / p.initial_interval))
                p.initial_next = now
            for pacer in (*p.interest_pacer.values(), p.domain_pacer):
                pacer.next_full = now
            self._refresh_all(now)

    def _initial_duration(self, p: _Portal) -> float:
        cfg = self.config.portal(p.name)
        assert isinstance(cfg, Endpoint)
        return float(cfg.topic_resolution.initial_request.duration)  # seconds (notes A10)

    def receive_portal_down(self, portal: str, now: float) -> None:
        """The portal's contexts or peer link are gone: its interest, proxies and queue too."""
        p = self._portal(portal)
        if not p.up:
            return
        p.state = PORTAL_TRANSITIONS[(p.state, PortalEvent.DOWN)]
        self.router.set_portal(portal, None, now)
        self.recovery.portal_down(portal)
        for rk in [rk for rk in self._receivers if rk[0] == portal]:
            self._receivers.pop(rk).step(ReceiverEvent.PORTAL_DOWN)  # no command: contexts gone
        for sk_key in [k for k in self._sources if k[0] == portal]:
            self._sources.pop(sk_key).portal_down()
        p.queue.clear()
        p.srs_routes.clear()  # the SRS relays them again when the portal's contexts return
        p.advertised.clear()
        p.advertised_doms.clear()
        p.unsent.clear()
        p.cancelled.clear()
        p.initial_left = 0
        p.initial_next = _INF
        emptied = []
        for sk, flow in self._flows.items():
            if flow.seen.pop(portal, None) is not None and not flow.seen:
                emptied.append(sk)
        self._apply(p.interest.clear(), now)
        self._refresh_all(now)
        for sk in emptied:
            self._forget(sk)

    # --- topic resolution heard in a portal's TRD -----------------------------------------------

    def receive_lbmr(self, portal: str, packet: lbmr.LBMRPacket, now: float) -> None:
        """A decoded LBMR datagram heard by the portal's context (the adapter drops its own)."""
        from_dro = any(
            isinstance(o, lbmr.SrcTypeOption) and o.src_type == SRC_TYPE_TNWGD
            for o in packet.options
        )
        body = packet.body
        if packet.type in (0, 1):
            for q in packet.tqrs:
                if from_dro:
                    self._portal(portal).stats.tqrs_from_dros_ignored += 1
                elif isinstance(q, lbmr.WildcardTQR):
                    self.receive_wildcard_tqr(portal, q.pattern, q.pattern_type, now)
                else:
                    self.receive_tqr(portal, q.topic, now)
        elif isinstance(body, lbmr.TopicManagement):
            for tmr in body.tmrs:
                if tmr.tmr_type != TMR_TOPIC_USE or not tmr.flags & TMR_FLAG_RESPONSE:
                    continue
                ptype = (
                    lbmr.PATTERN_PCRE
                    if tmr.flags & TMR_FLAG_WILDCARD_PCRE
                    else lbmr.PATTERN_REGEX
                    if tmr.flags & TMR_FLAG_WILDCARD_REGEX
                    else TOPIC
                )
                self.receive_use_response(portal, InterestKey(tmr.topic, ptype), now)
        elif isinstance(body, lbmr.TNWGInterest):
            for rec in body.records:
                ptype = (
                    (rec.pattern_type or lbmr.PATTERN_PCRE)
                    if rec.flags & TNWG_INTEREST_FLAG_PATTERN
                    else TOPIC
                )
                self.receive_interest(
                    portal,
                    InterestKey(rec.symbol, ptype),
                    rec.domain_id,
                    now,
                    cancel=bool(rec.flags & TNWG_INTEREST_FLAG_CANCEL),
                )
        elif isinstance(body, lbmr.TopicResRequest):
            self.receive_tr_request(portal, body.flags, now)
        elif isinstance(body, lbmr.RemoteDomainRoute):
            self.receive_domain_route(portal, body.ip, body.port, body.domains, now)

    def receive_tqr(self, portal: str, topic: str, now: float) -> None:
        """A receiver in the portal's TRD queried ``topic``."""
        self._apply(self._portal(portal).interest.refresh_local(InterestKey(topic), now), now)

    def receive_wildcard_tqr(
        self, portal: str, pattern: str, pattern_type: int, now: float
    ) -> None:
        """A wildcard receiver in the portal's TRD queried ``pattern`` (1 PCRE, 2 REGEX)."""
        key = InterestKey(pattern, pattern_type or lbmr.PATTERN_PCRE)
        if key not in self._patterns and not self._compile(key):
            return
        self._apply(self._portal(portal).interest.refresh_local(key, now), now)

    def receive_use_response(self, portal: str, key: InterestKey, now: float) -> None:
        """A receiver answered a use query (or the SRS reported its interest)."""
        if key.is_pattern and key not in self._patterns and not self._compile(key):
            return
        self._apply(self._portal(portal).interest.refresh_local(key, now), now)

    def receive_srs_interest(
        self,
        portal: str,
        key: InterestKey,
        now: float,
        *,
        present: bool = True,
        domain: int | None = None,
    ) -> None:
        """The portal's SRS reports a receiver (``present``) or its deletion for ``key``:
        interest that holds until withdrawn, without ageing or use queries.  ``domain``: the
        record is another DRO's remote interest on behalf of the receivers in that domain
        (held remote interest, keeping its domain); None or the portal's own domain: a
        receiver in the portal's TRD."""
        if key.is_pattern and key not in self._patterns and not self._compile(key):
            return
        p = self._portal(portal)
        if domain is not None and domain != p.domain_id:
            self._apply(p.interest.hold_remote(key, domain, present), now)
            return
        self._apply(p.interest.hold(key, present), now)

    def receive_interest(
        self, portal: str, key: InterestKey, domain: int, now: float, *, cancel: bool = False
    ) -> None:
        """Another DRO's interest record (heard in the TRD, or over a peer link)."""
        if key.is_pattern and key not in self._patterns and not self._compile(key):
            return
        p = self._portal(portal)
        if domain == p.domain_id:
            return  # receivers in this very TRD: their own queries tell us
        self._apply(p.interest.refresh_remote(key, domain, now, cancel=cancel), now)

    def receive_tr_request(self, portal: str, flags: int, now: float) -> None:
        """A topic resolution request: GW_REMOTE_INTEREST asks DROs to re-send interest."""
        p = self._portal(portal)
        if flags & TRREQ_GW_REMOTE_INTEREST:
            for pacer in p.interest_pacer.values():
                pacer.next_full = min(pacer.next_full, now)
            p.domain_pacer.next_full = min(p.domain_pacer.next_full, now)

    def receive_domain_route(
        self, portal: str, ip: str, port: int, domains: Iterable[int], now: float
    ) -> None:
        """A remote domain route record (LBMR ext 0x06) heard in the portal's TRD."""
        p = self._portal(portal)
        if p.domain_id is None or (ip, port) == p.address:
            return
        self.router.receive_domain_route(
            p.domain_id, int(ipaddress.IPv4Address(ip)), port, tuple(domains), now
        )

    def receive_srs_route(
        self,
        portal: str,
        ip: str,
        port: int,
        domains: Iterable[int],
        now: float,
        *,
        present: bool = True,
    ) -> None:
        """Another DRO's route record relayed by the portal's SRS [inferred]: an RTIR
        (``present``: the domains reachable through that DRO's portal at ``ip``:``port``, as its
        remote domain route record would say on UDP) or its RTER.  The SRS relays an RTIR once,
        where UDP repeats the record: the core holds the latest one per address until its RTER
        (an RTER naming other domains ends an older record: ignored) and refreshes it in the
        router on every timer, so it does not age out while held; an ended one ages out."""
        p = self._portal(portal)
        if p.domain_id is None or (ip, port) == p.address:
            return
        doms = tuple(domains)
        addr = (ip, port)
        if not present:
            if p.srs_routes.get(addr) == doms:
                del p.srs_routes[addr]
            return
        if addr not in p.srs_routes and len(p.srs_routes) >= MAX_SRS_ROUTES_PER_PORTAL:
            p.stats.srs_routes_refused += 1
            return
        p.srs_routes[addr] = doms
        self.receive_domain_route(portal, ip, port, doms, now)

    def receive_route_info(self, portal: str, info: RouteInfo, now: float) -> None:
        """Another DRO's route information (how it travels: :mod:`umcore.dro.inferred`)."""
        p = self._portal(portal)
        if p.domain_id is None and p.up and info.hop_count == 0 and p.peer_node != info.node_id:
            # the DRO at the other end of this peer link: now the link has an end
            self.receive_portal_up(portal, now, peer_node_id=info.node_id)
        if self.router.receive_route_info(info, now) and self.router.relay_due(info.node_id, now):
            relayed = RouteInfo(
                info.node_id, info.name, info.version, info.hop_count + 1, info.adjacencies
            )
            self._route_infos += [
                (q.name, relayed) for q in self.portals.values() if q.up and q.name != portal
            ]

    def _compile(self, key: InterestKey) -> bool:
        try:
            self._patterns[key] = re.compile(key.symbol)
        except (re.error, RecursionError):
            return False
        return True

    # --- interest -> proxy receivers ----------------------------------------------------------

    def _apply(self, changes: list[InterestChange], now: float) -> None:
        keys: set[InterestKey] = set()
        for ch in changes:
            per = self._interest.setdefault(ch.key, {})
            doms = per.setdefault(ch.portal, set())
            if ch.added:
                doms.add(ch.domain)
                self._events.append(InterestAdded(ch.portal, ch.key, ch.domain))
            else:
                doms.discard(ch.domain)
                self._events.append(InterestRemoved(ch.portal, ch.key, ch.domain))
                if not doms:
                    del per[ch.portal]
                if not per:
                    del self._interest[ch.key]
            keys.add(ch.key)
        for key in sorted(keys):
            self._update_key(key, now)

    def _wanted_pairs(self, key: InterestKey, pi: _Portal) -> list[tuple[InterestKey, int]]:
        """The (key, domain) pairs that make ``key`` wanted from ``pi``'s side."""
        out: list[tuple[InterestKey, int]] = []
        if not pi.up:
            return out
        per = self._interest.get(key)
        if not per:
            return out
        if not key.is_pattern and not pi.acl.inbound_may_accept(key.symbol):
            return out
        for pe_name, doms in per.items():
            pe = self.portals[pe_name]
            if pe is pi or not pe.up:
                continue
            if not key.is_pattern and not pe.acl.outbound_accepts(key.symbol):
                continue
            for dom in sorted(doms):
                if dom == pi.domain_id:
                    continue
                if self.router.known(dom) and not self.router.forwards(dom, pe_name, pi.name):
                    continue
                out.append((key, dom))
        return out

    def _update_key(self, key: InterestKey, now: float) -> None:
        for pi in self.portals.values():
            pairs = self._wanted_pairs(key, pi)
            rk = (pi.name, key)
            rcv = self._receivers.get(rk)
            if pairs:
                if rcv is None:
                    rcv = self._receivers[rk] = ProxyReceiver(pi.name, key)
                self._commands += rcv.step(ReceiverEvent.WANTED)
            elif rcv is not None:
                self._commands += rcv.step(ReceiverEvent.UNWANTED)
                del self._receivers[rk]
            self._advertise(pi, key, pairs, now)
        # sources this interest may route
        if key.is_pattern:
            regex = self._patterns.get(key)
            topics = [t for t in self._by_topic if regex is not None and regex.search(t)]
        else:
            topics = [key.symbol] if key.symbol in self._by_topic else []
        for topic in topics:
            for sk in sorted(self._by_topic[topic]):
                self._update_source(sk, now)

    def _advertise(
        self, p: _Portal, key: InterestKey, pairs: list[tuple[InterestKey, int]], now: float
    ) -> None:
        wanted = {dom for _, dom in pairs}
        before = p.advertised_doms.get(key, set())
        for dom in sorted(before - wanted):
            pair = (key, dom)
            del p.advertised[pair]
            p.unsent.pop(pair, None)
            p.cancelled[pair] = None
            p.interest_pacer[key.is_pattern].mark(now)
        for pair in pairs:
            if pair not in p.advertised:
                p.advertised[pair] = None
                p.cancelled.pop(pair, None)
                p.unsent[pair] = None
                p.interest_pacer[key.is_pattern].mark(now)
        if wanted:
            p.advertised_doms[key] = wanted
        else:
            p.advertised_doms.pop(key, None)

    def _refresh_all(self, now: float) -> None:
        """Recompute every proxy after routes or portals changed."""
        for key in sorted(set(self._interest) | {k for (_, k) in self._receivers}):
            self._update_key(key, now)
        for sk in sorted(self._flows):
            self._update_source(sk, now)
        for p in self.portals.values():
            if p.domain_id is not None:
                routes = tuple(self.router.served_domains(p.name))
                if routes != p.domain_routes:
                    p.domain_routes = routes
                    p.domain_pacer.mark(now)

    # --- sources -> proxy sources ---------------------------------------------------------------

    def receive_source(self, portal: str, advert: SourceAdvert, now: float) -> None:
        """A proxy receiver of ``portal`` resolved a source (again)."""
        p = self._portal(portal)
        sk = advert.source
        own = self._sources.get((portal, sk))
        if own is not None and own.state is not SourceState.ABSENT:
            p.stats.own_sources_ignored += 1
            return
        if advert.hop_count + 1 > self.router.max_hop_count:
            p.stats.hop_limit_dropped += 1
            return
        if not p.acl.inbound_accepts(sk.topic, advert.transport):
            p.stats.acl_rejected += 1
            return
        flow = self._flows.get(sk)
        if flow is None:
            if len(self._flows) >= MAX_SOURCES:
                p.stats.sources_refused += 1
                return
            flow = self._flows[sk] = _Flow(SeqWindow(p.sqn_size, p.sqn_increment))
            self._by_topic.setdefault(sk.topic, set()).add(sk)
        origin = advert.origin_domain if advert.origin_domain is not None else p.domain_id
        flow.seen[portal] = _Seen(advert, origin)
        self._update_source(sk, now)

    def receive_source_gone(self, portal: str, source: SourceKey, now: float) -> None:
        """The source is gone from ``portal`` (EOS, or its advertisements timed out)."""
        self.recovery.receive_origin_gone(portal, source)
        flow = self._flows.get(source)
        if flow is None or flow.seen.pop(portal, None) is None:
            return
        self._update_source(source, now)
        if not flow.seen:
            self._forget(source)

    def _forget(self, source: SourceKey) -> None:
        """A source seen nowhere any more: its flow and duplicate window go."""
        del self._flows[source]
        topic = self._by_topic[source.topic]
        topic.discard(source)
        if not topic:
            del self._by_topic[source.topic]

    def _matching_interest(self, topic: str) -> Iterable[tuple[InterestKey, dict[str, set[int]]]]:
        per = self._interest.get(InterestKey(topic))
        if per:
            yield InterestKey(topic), per
        for key, regex in self._patterns.items():
            per = self._interest.get(key)
            if per and regex.search(topic):
                yield key, per

    def _update_source(self, sk: SourceKey, now: float) -> None:
        flow = self._flows.get(sk)
        egress: dict[str, tuple[int, int, int]] = {}  # portal -> cost, hops, origin
        if flow is not None:
            candidates = [
                (seen.cost + self.portals[name].cost, self.portals[name].index, name)
                for name, seen in flow.seen.items()
                if self.portals[name].up
            ]
            flow.ingress = min(candidates)[2] if candidates else None
            if flow.ingress is not None:
                egress = self._egress_of(sk, flow.ingress, flow.seen[flow.ingress])
        for name, p in self.portals.items():
            ps = self._sources.get((name, sk))
            if name in egress:
                cost, hops, origin = egress[name]
                if ps is None:
                    ps = self._sources[(name, sk)] = ProxySource(
                        name, sk, cost, hops, origin, p.deletion_delay
                    )
                self._commands += ps.seen(cost, hops, origin)
            elif ps is not None and ps.state is not SourceState.ABSENT:
                self._commands += ps.gone(now)
            if ps is not None:
                self._arm(ps)
                if ps.state is SourceState.ABSENT:
                    del self._sources[(name, sk)]
        if flow is not None:
            flow.egress = tuple(
                self.portals[name].queue for name in egress if self._sources[(name, sk)].forwarding
            )

    def _egress_of(
        self, sk: SourceKey, ingress: str, seen: _Seen
    ) -> dict[str, tuple[int, int, int]]:
        pi = self.portals[ingress]
        out: dict[str, tuple[int, int, int]] = {}
        origin = seen.origin
        for _key, per in self._matching_interest(sk.topic):
            for pe_name, doms in per.items():
                if pe_name == ingress or pe_name in out:
                    continue
                pe = self.portals[pe_name]
                if not pe.up or not pe.acl.outbound_accepts(sk.topic):
                    continue
                for dom in doms:
                    if dom == origin or dom == pi.domain_id:
                        continue
                    if self.router.known(dom):
                        path = (
                            self.router.on_path(origin, dom, ingress)
                            if origin is not None
                            else None
                        )
                        if path is None:
                            if not self.router.forwards(dom, pe_name, ingress):
                                continue
                        elif not path or self.router.toward(dom) != pe_name:
                            continue
                    out[pe_name] = (
                        seen.cost + pi.cost + pe.cost,
                        seen.hop_count + 1,
                        origin if origin is not None else (pi.domain_id or 0),
                    )
                    break
        return out

    def _arm(self, ps: ProxySource) -> None:
        if ps.due is not None:
            self._seq += 1
            heapq.heappush(self._source_heap, (ps.due, self._seq, ps.portal, ps.source))

    # --- the data path --------------------------------------------------------------------------

    def receive_frame(
        self, portal: str, source: SourceKey, sqn: int, data: bytes | memoryview
    ) -> bool:
        """A frame (one message or fragment, as received) of ``source`` from ``portal``'s proxy
        receiver.  True if it was queued on at least one egress portal."""
        st = self.portals[portal].stats
        size = len(data)
        st.frames_received += 1
        st.bytes_received += size
        flow = self._flows.get(source)
        if flow is None or portal not in flow.seen:
            st.unknown_source += 1
            return False
        verdict = flow.window.check(sqn)
        if verdict is not SeqVerdict.NEW:
            if verdict is SeqVerdict.DUPLICATE:
                st.dropped_dup += 1
            else:
                st.dropped_old += 1
            return False
        queued = False
        otid, topic = source.otid, source.topic
        for q in flow.egress:
            if q.offer_run(otid, topic, sqn, data, size, 1):
                queued = True
        return queued

    def receive_frames(
        self,
        portal: str,
        source: SourceKey,
        tidx: int,
        frames: Sequence[bytes | memoryview],
    ) -> int:
        """The frames of one read (TCP) or datagram (LBT-RU/RM) of ``source``'s transport
        session, as ``portal``'s proxy receiver got them: whole LBMC frames (each exactly its
        ``msglen`` long), data and control, of any topic index.  Every data frame of topic index
        ``tidx`` is :meth:`receive_frame` with its own sequence number, in order -- the same
        counters, duplicate window and queues as frame by frame -- and the others are skipped.
        Returns how many frames were queued on at least one egress portal (module docstring,
        "Frames": runs of a read are taken whole)."""
        n = len(frames)
        if n < RUN_MIN_FRAMES:  # the latency case: a read of a frame or two, one by one
            queued = 0
            for f in frames:
                if len(f) >= FRAME_HEADER:
                    ver_type, _nh, _len, ftidx, sqn = _HEAD.unpack_from(f)
                    if ver_type == _DATA and ftidx == tidx:
                        queued += self.receive_frame(portal, source, sqn, f)
            return queued
        p = self.portals[portal]
        flow = self._flows.get(source)
        if flow is not None and portal not in flow.seen:
            flow = None
        buf = b"".join(frames)
        view = memoryview(buf)
        unpack = _HEAD.unpack_from
        queued = i = pos = 0
        while i < n:
            f = frames[i]
            size = len(f)
            k = 1
            if (
                n - i >= RUN_MIN_FRAMES
                and size >= FRAME_HEADER
                and buf[pos] == _DATA
                and buf[pos + 2] << 8 | buf[pos + 3] == size
            ):
                k = _run_length(buf, pos, size, n - i)
            if k > 1:
                ftidx = _TIDX.unpack_from(buf, pos + 4)[0]
                if ftidx == tidx:
                    queued += self._receive_run(p, flow, source, frames, i, view, pos, size, k)
            elif size >= FRAME_HEADER:
                ver_type, _nh, _len, ftidx, sqn = unpack(f)
                if ver_type == _DATA and ftidx == tidx:
                    queued += self.receive_frame(portal, source, sqn, f)
            i += k
            pos += k * size
        return queued

    def _receive_run(
        self,
        p: _Portal,
        flow: _Flow | None,
        source: SourceKey,
        frames: Sequence[bytes | memoryview],
        i: int,
        view: memoryview,
        pos: int,
        size: int,
        k: int,
    ) -> int:
        """``k`` data frames of ``size`` bytes with consecutive sequence numbers, ``frames[i:]``
        and ``view[pos:]``: what ``k`` calls of :meth:`receive_frame` do, at once."""
        sqn = _SQN.unpack_from(view, pos + 8)[0]
        if flow is not None and not flow.window.check_run(sqn, k):
            # a duplicate or an old frame among them: frame by frame, exactly
            queued = 0
            for j in range(k):
                queued += self.receive_frame(p.name, source, (sqn + j) & SQN_MASK, frames[i + j])
            return queued
        st = p.stats
        st.frames_received += k
        st.bytes_received += k * size
        if flow is None:
            st.unknown_source += k
            return 0
        data = view[pos : pos + k * size]
        otid, topic = source.otid, source.topic
        queued = 0
        for q in flow.egress:
            took = q.offer_run(otid, topic, sqn, data, size, k)
            if took > queued:
                queued = took
        return queued

    def receive_control(
        self, portal: str, source: SourceKey, frame: bytes | memoryview, now: float
    ) -> int:
        """A control frame of ``source`` (an SRI, :mod:`umcore.dro.persist`) from ``portal``:
        queued, without the duplicate window (it has no sequence number), for every portal the
        source's frames go to (``take_controls``); returns how many."""
        flow = self._flows.get(source)
        if flow is None or portal not in flow.seen or portal != flow.ingress:
            self.portals[portal].stats.unknown_source += 1
            return 0
        n = 0
        data = bytes(frame)
        for name, p in self.portals.items():
            if p.queue in flow.egress:
                if len(self._controls) >= MAX_CONTROLS:
                    self.controls_dropped += 1
                    continue
                self._controls.append((name, source, data))
                n += 1
        return n

    def take_controls(self) -> list[tuple[str, SourceKey, bytes]]:
        """(egress portal, source, control frame) queued by :meth:`receive_control`."""
        out, self._controls = self._controls, []
        return out

    def persistence(self, source: SourceKey) -> PersistIdentity | None:
        """The persistent identity of ``source`` as its active ingress saw it (None: not a
        persistent source, or not seen)."""
        flow = self._flows.get(source)
        if flow is None or flow.ingress is None:
            return None
        seen = flow.seen.get(flow.ingress)
        return None if seen is None else seen.persist

    def queue(self, portal: str) -> PortalQueue:
        """The egress queue of ``portal`` (its counters are the portal's enqueued-bytes stats)."""
        return self._portal(portal).queue

    def take_frames(self, portal: str, max_frames: int = 0) -> list[ForwardedFrame]:
        """Frames to send out of ``portal``'s proxy sources, in order (0 = all queued)."""
        return self._portal(portal).queue.take(max_frames)

    # --- multicast immediate messages (umcore.dro.mim) -------------------------------------------

    def receive_mim(
        self,
        portal: str,
        topic: str | None,
        size: int,
        *,
        request: bool = False,
        origin_domain: int | None = None,
        hops_taken: int = 0,
    ) -> MimRoute:
        """A MIM heard at ``portal`` (``size``: its payload bytes; ``origin_domain`` and
        ``hops_taken`` from its DESTINATION header, None/0 without one): where it goes
        (:mod:`umcore.dro.mim`).  Counted as received at ``portal`` and forwarded at each
        egress portal, or dropped at ``portal``."""
        pi = self._portal(portal)
        c = self._mim[portal].of(topic)
        c.rcvd += 1
        c.bytes_rcvd += size
        if request:
            c.req_rcvd += 1
            c.req_bytes_rcvd += size
        origin = origin_domain if origin_domain is not None else pi.domain_id
        if hops_taken + 1 > self.router.max_hop_count:
            c.dropped_hop_limit += 1
            c.bytes_dropped_hop_limit += size
            return MimRoute((), origin or 0, hops_taken)
        egress = self._mim_egress(pi, topic, origin) if pi.up else ()
        if not egress:
            c.dropped_no_interest += 1
            c.bytes_dropped_no_interest += size
        for name in egress:
            e = self._mim[name].of(topic)
            e.forwarded += 1
            e.bytes_forwarded += size
        return MimRoute(egress, origin or 0, hops_taken + 1)

    def _mim_egress(self, pi: _Portal, topic: str | None, origin: int | None) -> tuple[str, ...]:
        wanted: dict[str, set[int]] = {}  # egress portal -> domains that want the MIM there
        if topic is not None:
            for _key, per in self._matching_interest(topic):
                for name, doms in per.items():
                    wanted.setdefault(name, set()).update(doms)
        else:  # topicless: every TRD (notes A7)
            for name, p in self.portals.items():
                doms = {d for d in self.router.domains() if self.router.toward(d) == name}
                if p.domain_id is not None:
                    doms.add(p.domain_id)
                wanted[name] = doms
        router = self.router
        out: list[str] = []
        for name, pe in self.portals.items():
            targets = wanted.get(name)
            if name == pi.name or not targets or not pe.up:
                continue
            for dom in sorted(targets):
                if dom == origin or dom == pi.domain_id:
                    continue
                if router.known(dom):
                    path = router.on_path(origin, dom, pi.name) if origin is not None else None
                    if path is None:
                        if not router.forwards(dom, name, pi.name):
                            continue
                    elif not path or router.toward(dom) != name:
                        continue
                out.append(name)
                break
        return tuple(out)

    def receive_mim_sent(
        self, portal: str, topic: str | None, size: int, result: MimSendResult, request: bool
    ) -> None:
        """How the adapter's send of a MIM the core routed out of ``portal`` went."""
        self._mim[self._portal(portal).name].of(topic).sent_result(result, size, request)

    def mim_stats(self, portal: str) -> MimStats:
        """``portal``'s MIM counters (:class:`~umcore.dro.mim.MimStats`)."""
        return self._mim[self._portal(portal).name]

    # --- outputs --------------------------------------------------------------------------------

    def take_commands(self) -> list[PortalCommand]:
        out, self._commands = self._commands, []
        return out

    def take_events(self) -> list[CoreEvent]:
        out = self._events + self.router.take_events()
        self._events = []
        return out

    def take_lbmr(self) -> list[tuple[str, lbmr.LBMRPacket]]:
        out, self._lbmr = self._lbmr, []
        return out

    def take_route_info(self) -> list[tuple[str, RouteInfo]]:
        out, self._route_infos = self._route_infos, []
        return out

    def stats(self, portal: str) -> PortalStats:
        return self._portal(portal).stats

    def proxy_receivers(self) -> set[tuple[str, InterestKey]]:
        return set(self._receivers)

    def proxy_sources(self) -> dict[tuple[str, SourceKey], SourceState]:
        return {k: ps.state for k, ps in self._sources.items()}

    def advertised_interest(self, portal: str) -> list[tuple[InterestKey, int]]:
        """The (key, domain) pairs this DRO advertises into ``portal``'s side."""
        return list(self._portal(portal).advertised)

    def local_interest_state(self, portal: str, key: InterestKey) -> LocalState | None:
        return self._portal(portal).interest.local_state(key)

    def interest(self, portal: str) -> set[tuple[InterestKey, int]]:
        """The (key, domain) pairs wanted behind ``portal`` (for monitoring): its local interest
        (an endpoint's own domain) and the remote interest heard there (other domains)."""
        return self._portal(portal).interest.pairs()

    # --- time -----------------------------------------------------------------------------------

    def next_timer(self) -> float | None:
        times: list[float] = [self.router.next_timer(), self.route_info_next]
        while self._source_heap:
            due, _, name, sk = self._source_heap[0]
            ps = self._sources.get((name, sk))
            if ps is not None and ps.due == due:
                times.append(due)
                break
            heapq.heappop(self._source_heap)
        for p in self.portals.values():
            t = p.interest.next_timer()
            if t is not None:
                times.append(t)
            if not p.up:
                continue
            times.append(p.initial_next)
            for is_pattern, pending in p.interest.pending.items():
                if pending:
                    limiter = p.query_limiter[is_pattern]
                    nbytes = 5 + len(pending[0].symbol.encode())
                    times.append(limiter.ready_at(limiter.last, nbytes))
            for pacer in p.interest_pacer.values():
                if p.advertised or p.cancelled:
                    times.append(pacer.due())
            if p.domain_id is not None and p.address is not None and p.domain_routes:
                times.append(p.domain_pacer.due())
        return min(times) if times else None

    def handle_timer(self, now: float) -> None:
        for p in self.portals.values():
            for (ip, port), doms in p.srs_routes.items():  # held: never aged (receive_srs_route)
                self.receive_domain_route(p.name, ip, port, doms, now)
        if self.router.handle_timer(now):
            self._refresh_all(now)
        while self._source_heap and self._source_heap[0][0] <= now:
            due, _, name, sk = heapq.heappop(self._source_heap)
            ps = self._sources.get((name, sk))
            if ps is None or ps.due != due:
                continue
            self._commands += ps.timer(now)
            self._arm(ps)
            if ps.state is SourceState.ABSENT:
                del self._sources[(name, sk)]
            flow = self._flows.get(sk)
            if flow is not None and ps.state is SourceState.ACTIVE:
                self._update_source(sk, now)
        for p in self.portals.values():
            self._apply(p.interest.handle_timer(now), now)
        for p in self.portals.values():  # after every change of this instant is known
            if p.up:
                self._send_tr(p, now)
        if now >= self.route_info_next:
            self.route_info_next = now + self.router.propagation_interval
            info = self.router.own_route_info()
            self._route_infos += [(p.name, info) for p in self.portals.values() if p.up]

    # --- building topic resolution --------------------------------------------------------------

    def _send_tr(self, p: _Portal, now: float) -> None:
        if p.initial_left and now >= p.initial_next:
            p.initial_left -= 1
            p.initial_next = now + p.initial_interval if p.initial_left else _INF
            self._ext(p, lbmr.TopicResRequest(p.initial_flags))
        for is_pattern in (False, True):
            self._send_use_queries(p, is_pattern, now)
            self._send_interest(p, is_pattern, now)
        self._send_domain_route(p, now)

    def _ext(self, p: _Portal, body: object) -> None:
        self._lbmr.append(
            (p.name, lbmr.LBMRPacket(lbmr.LBMR_TYPE_EXT, version=DRO_LBMR_VERSION, body=body))
        )

    def _send_use_queries(self, p: _Portal, is_pattern: bool, now: float) -> None:
        pending = p.interest.pending[is_pattern]
        limiter = p.query_limiter[is_pattern]
        tmrs: list[lbmr.TMR] = []
        size = 0
        while pending:
            key = pending[0]
            if p.interest.local_state(key) is not LocalState.QUERYING:
                pending.popleft()  # answered or gone meanwhile
                continue
            nbytes = 5 + len(key.symbol.encode())
            if size + nbytes > TR_PAYLOAD_BUDGET:
                self._flush_tmrs(p, tmrs)
                tmrs, size = [], 0
            if not limiter.try_take(now, nbytes):
                break
            pending.popleft()
            flags = 0
            if key.pattern_type == lbmr.PATTERN_PCRE:
                flags = TMR_FLAG_WILDCARD_PCRE
            elif key.pattern_type == lbmr.PATTERN_REGEX:
                flags = TMR_FLAG_WILDCARD_REGEX
            tmrs.append(lbmr.TMR(key.symbol, TMR_TOPIC_USE, flags))
            size += nbytes
            p.interest.query_sent(key, now)
        self._flush_tmrs(p, tmrs)

    def _flush_tmrs(self, p: _Portal, tmrs: list[lbmr.TMR]) -> None:
        if tmrs:
            body = lbmr.TopicManagement(tmrs)
            self._lbmr.append((p.name, lbmr.LBMRPacket(lbmr.LBMR_TYPE_TOPIC_MGMT, body=body)))

    def _send_interest(self, p: _Portal, is_pattern: bool, now: float) -> None:
        pacer = p.interest_pacer[is_pattern]
        full = now >= pacer.next_full
        if not full and not (pacer.dirty and now >= pacer.last_sent + pacer.min_interval):
            return
        records: list[lbmr.TNWGInterestRecord] = []
        for key, dom in p.cancelled:
            if key.is_pattern == is_pattern:
                records.append(self._interest_record(key, dom, TNWG_INTEREST_FLAG_CANCEL))
        pairs = p.advertised if full else p.unsent
        flag = TNWG_INTEREST_FLAG_REFRESH if full else 0
        records += [
            self._interest_record(key, dom, flag)
            for (key, dom) in pairs
            if key.is_pattern == is_pattern
        ]
        if records:
            nbytes = sum(9 + len(r.symbol.encode()) for r in records)
            if not pacer.limiter.try_take(now, nbytes, len(records)):
                pacer.next_full = min(
                    pacer.next_full, pacer.limiter.ready_at(now, nbytes, len(records))
                )
                return
            self._chunk_interest(p, records)
            pacer.last_sent = now
        for pair in [pr for pr in p.cancelled if pr[0].is_pattern == is_pattern]:
            del p.cancelled[pair]
        for pair in [pr for pr in p.unsent if pr[0].is_pattern == is_pattern]:
            del p.unsent[pair]
        pacer.dirty = False
        if full:
            pacer.next_full = now + pacer.max_interval

    @staticmethod
    def _interest_record(key: InterestKey, dom: int, flags: int) -> lbmr.TNWGInterestRecord:
        if key.is_pattern:
            return lbmr.TNWGInterestRecord(
                key.symbol, flags | TNWG_INTEREST_FLAG_PATTERN, key.pattern_type, dom
            )
        return lbmr.TNWGInterestRecord(key.symbol, flags, 0, dom)

    def _chunk_interest(self, p: _Portal, records: list[lbmr.TNWGInterestRecord]) -> None:
        chunk: list[lbmr.TNWGInterestRecord] = []
        size = 0
        for rec in records:
            n = 9 + len(rec.symbol.encode())
            if chunk and size + n > TR_PAYLOAD_BUDGET:
                self._ext(p, lbmr.TNWGInterest(chunk))
                chunk, size = [], 0
            chunk.append(rec)
            size += n
        if chunk:
            self._ext(p, lbmr.TNWGInterest(chunk))

    def _send_domain_route(self, p: _Portal, now: float) -> None:
        pacer = p.domain_pacer
        if p.domain_id is None or p.address is None or not p.domain_routes:
            return
        full = now >= pacer.next_full
        if not full and not (pacer.dirty and now >= pacer.last_sent + pacer.min_interval):
            return
        nbytes = 16 + 4 * len(p.domain_routes)
        if not pacer.limiter.try_take(now, nbytes):
            pacer.next_full = min(pacer.next_full, pacer.limiter.ready_at(now, nbytes))
            return
        ip, port = p.address
        self._ext(p, lbmr.RemoteDomainRoute(ip, port, p.domain_routes))
        pacer.last_sent = now
        pacer.dirty = False
        pacer.next_full = now + pacer.max_interval
