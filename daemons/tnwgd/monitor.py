"""tnwgd's statistics: ``DROMonMsg`` over UM, the portal contexts' library statistics, Prometheus.

Theory of operation
-------------------
UM's DRO is monitored three ways (notes A14): its log, the UM library statistics of its portal
contexts, and its daemon statistics.  With ``<monitor interval="N">``, ``<transport-module
module="lbm" options="...">`` and ``<format-module module="pb"/>`` (the recommended set-up) it
publishes both on the monitoring topic (default ``/29west/statistics``):

- **library statistics** of every endpoint portal's contexts, under UM's application ids
  ``Gateway_Portal_<portal>_rcv_ctx`` and ``Gateway_Portal_<portal>_src_ctx`` (the DRO ignores
  ``monitor_appid``): one :class:`~umcore.monitor.automatic.AutomaticMonitor` per context, every
  N seconds, through the shared monitoring context ``29west_statistics_context`` that the
  transport-module options configure (``config=FILE``, ``topic=``, ``context|opt=value``);
- **daemon statistics** as ``DROMonMsg`` (lbmmon packet type 7, ``GATEWAY``) with application id
  ``<daemon><name>``, every N seconds, by the daemons' shared publisher
  (:class:`~umcore.daemon.statspub.StatsPublisher`; one category, ``dro``; the first
  publication one interval after start, so that collectors have resolved the topic).  The first message
  carries ``configs`` (the whole XML file in ``configs.gateway.config_data``, each portal's name,
  index and type) *and* ``stats``; later ones ``stats`` only, as UM's do (mcs_demo's output).

What :func:`stats_pb` fills, from the runtime's public views (:class:`DroRuntime`):

- ``stats.local``: the DRO's name and node id, its topology version (changes with its own
  links), ``graph_version`` (recalculations so far), DRO and TRD counts of the map, glibc's
  ``mallinfo2`` figures where they exist, and a ``topology_signature`` that is pyum's own: the
  CRC-32 of the sorted map (this DRO's links and every DRO heard with its links);
- ``stats.portals[]``: name, index, cost, proxy receivers and sources of the portal, the
  interest it advertises (receiver topics / PCRE / REGEX patterns) and, for an endpoint, its
  domain id, local interest (its own TRD) and remote interest (other domains, heard there);
  receive: frames and bytes its proxy receivers handed to the core; send: frames queued for the
  portal (``*_forwarded``), frames that left the queue (``*_sent``), frames the full queue
  refused (``*_dropped_would_block`` with their bytes), duplicate-window drops of frames
  arriving on the portal (``*_dropped_dup``), and the queue's current / maximum / limit bytes.
  A peer portal gets the same figures in its own message (and ``adjacent_gateway_id`` once the
  other DRO is known); ``unknown_source`` frames go to its
  ``transport_topic_fragment_data_msgs_rcvd_unknown_source``;
- ``stats.other_gateways[]``: every DRO heard (name, id, version, its links with costs, last
  activity on the wall clock).

A peer portal's link (its :class:`~umcore.dro.peer.PeerLink`, the portal view's ``link``) adds
its own figures: data messages and bytes received on the link, control messages and bytes each
way, data fragments and bytes sent on the link, drops while it was down (``*_not_operational``)
or full, batching (count, min/mean/max messages and bytes), keepalive RTT (samples, min/mean/max
in µs) and ``last_ka_time`` (wall-clock second of the last keepalive answer).  With ``<udp>``
the data frames travel on the UDP data link instead: its LBT-RU figures, summed over the link's
connections, are ``udp_send`` (our source: datagrams and bytes, NAKs received, ignored, shed,
retransmissions) and ``udp_receive`` (our receiver: datagrams, NAKs sent, loss, NCFs, duplicates,
unrecovered), and the TCP link's data counters stay 0 (it carries control only).

An endpoint portal's immediate-message figures: the MIMs it heard (``immediate_topic_*`` and
``immediate_topicless_*``, requests also in ``*_req_*``), forwarded out of it, sent, and
dropped (would block, send error, size error), from the core's
:meth:`~umcore.dro.DroCore.mim_stats`; its unicast figures from the UIM forwarder
(:class:`~daemons.tnwgd.uim.UimPortalStats`, the runtime's ``uim``): UIMs, requests and
responses arriving at its request port (``unicast_data_msgs_rcvd``, ``*_no_stream``,
``*_dropped_no_route``) and leaving by it (``unicast_msgs_forwarded``, ``_sent``,
``_dropped_error``).  Their bytes are the messages' payloads.  A peer portal has the same
figures for what crosses its link: MIMs and UIMs received over it (the ``immediate_*_rcvd`` and
``unicast_data_*`` fields of its Receive message) and UIMs routed over it (Send's
``unicast_msgs_forwarded``, ``_sent``, ``_dropped_not_operational`` for a link that was down,
``_dropped_would_block`` for a full one); Peer.Send has no immediate fields, so the MIMs it
sends are the core's counters only (``mim_stats``, the web monitor).

Fields nothing counts stay 0: ``unicast_data_msgs_dropped_dup`` (no duplicate detection of UIM
streams), the ``unicast_cntl_*`` figures, endpoint ``transport_*_bytes_forwarded``/``_sent``,
the recalculation durations, and a peer link's UDP figures when it has no ``<udp>``.

Only the ``lbm`` transport and the ``pb`` format are implemented: :func:`monitor_settings` refuses
anything else with a ConfigError before the daemon starts (UM's DRO with the ``csv`` format
publishes library statistics only).  The deprecated ``<daemon-monitor>`` binary structures are not
published (use ``<monitor>`` with ``pb``, or ``--metrics``).

**Prometheus** (``--metrics``): :func:`register_metrics` exports the same messages, built by the
same function, as ``pyum_dro_local_*``, ``pyum_dro_portal_*``, ``pyum_dro_endpoint_*``,
``pyum_dro_endpoint_receive_*``, ``pyum_dro_endpoint_send_*``, ``pyum_dro_peer_*``,
``pyum_dro_peer_receive_*``, ``pyum_dro_peer_send_*`` (label ``portal``), and the core's own
counters that UM's messages have no field for as ``pyum_dro_portal_core_*`` (ACL rejections,
hop-limit drops, sources refused, MIMs that went nowhere or past the hop limit:
``pyum_dro_portal_core_mim_<topic|topicless>_dropped_*``, ...) plus ``pyum_dro_portal_up``.
"""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import ctypes.util
import logging
import os
import time
import zlib
from collections.abc import Awaitable, Callable, Iterable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any, Protocol

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import CollectorRegistry

from daemons.tnwgd.uim import UimForwarder, UimPortalStats
from umcore.aio.timer import CoreTimer
from umcore.config.dro import DROConfig
from umcore.daemon.statspub import MonitorSettings, StatsPublisher, sender_address
from umcore.dro import DroCore, InterestKey, MimStats
from umcore.dro.peer import PeerLink
from umcore.errors import ConfigError, LocalProtocolError
from umcore.monitor.automatic import AutomaticMonitor, MonitoringPublisher
from umcore.monitor.control import ControlReply
from umcore.monitor.framing import PacketType
from umcore.monitor.modopts import MonitorSettings as LibraryMonitorSettings
from umcore.monitor.modopts import TransportOpts, parse_transport_opts
from umcore.monitor.pb import dro_mon_pb2
from umcore.monitor.prometheus import StatsCollector

__all__ = [
    "DRO_CATEGORY",
    "MAX_CONFIG_TEXT",
    "MAX_PORTALS_PER_MESSAGE",
    "PORTAL_TYPE",
    "DroMonitor",
    "DroRuntime",
    "DroStatsContent",
    "PortalView",
    "configs_pb",
    "context_appids",
    "dro_publisher",
    "interest_counts",
    "malloc_info",
    "mim_drop_counts",
    "monitor_settings",
    "register_metrics",
    "stats_pb",
    "topology_signature",
]

log = logging.getLogger("tnwgd.monitor")

DROMonMsg = dro_mon_pb2.DROMonMsg

DRO_CATEGORY = "dro"
"""The publisher's one category: the DRO publishes everything at the ``<monitor>`` interval."""

PORTAL_TYPE = {"endpoint": 0, "peer": 1}
"""``Configs.Portal.portal_type``: TNWG_DSTAT_Portal_Type_Endpoint / _Peer."""

MAX_CONFIG_TEXT = 60_000
"""Bytes of the configuration file put in ``config_data``.  An lbmmon packet's data length is a
16-bit field (65,535 bytes); a larger file is cut there (and the cut logged) rather than making
the configuration message impossible to send."""

MAX_PORTALS_PER_MESSAGE = 32
"""Portals per statistics message: a portal's statistics take up to ~900 bytes, so 32 stay well
inside an lbmmon packet's 64 KiB; a DRO with more portals publishes several messages, each with
``stats.local`` and its share of the portals."""

ROLE_SUFFIXES = ("rcv_ctx", "src_ctx")
"""The application-id suffixes of an endpoint portal's contexts, in ``contexts()`` order."""

_U32 = 2**32 - 1


class PortalView(Protocol):
    """One portal of the running DRO as the monitor reads it (the runtime's portal object)."""

    @property
    def name(self) -> str: ...
    @property
    def index(self) -> int: ...
    @property
    def domain_id(self) -> int | None: ...
    @property
    def kind(self) -> str:
        """``endpoint`` or ``peer``."""
        ...

    def contexts(self) -> Sequence[Any]:
        """The portal's running UM contexts (:class:`umcore.engine.Engine`): an endpoint's
        receiver context then its source context; none for a peer or a portal that is down."""
        ...


class DroRuntime(Protocol):
    """What the monitor, the web monitor and the metrics read of a running tnwgd."""

    @property
    def core(self) -> DroCore: ...
    @property
    def config(self) -> DROConfig: ...
    @property
    def portals(self) -> Mapping[str, PortalView]: ...
    @property
    def started_at(self) -> float:
        """``loop.time()`` when the daemon started (the monitors' monotonic clock)."""
        ...


# ----------------------------------------------------------------------------- content


def interest_counts(pairs: Iterable[tuple[InterestKey, int]]) -> tuple[int, int, int]:
    """(topics, PCRE patterns, REGEX patterns) among the distinct keys of ``pairs``."""
    keys = {k for k, _ in pairs}
    counts = [0, 0, 0]
    for k in keys:
        if 0 <= k.pattern_type <= 2:
            counts[k.pattern_type] += 1
    return counts[0], counts[1], counts[2]


def topology_signature(core: DroCore) -> int:
    """pyum's topology signature: CRC-32 of the sorted map (our links and every DRO heard with
    its links); equal on two DROs that know the same map, different after any link change."""
    own = core.router.own_route_info()
    parts = [(own.node_id, tuple((a.node, a.cost) for a in own.adjacencies))]
    for node_id, heard in core.router.heard.items():
        parts.append((node_id, tuple((a.node, a.cost) for a in heard.info.adjacencies)))
    return zlib.crc32(repr(sorted(parts)).encode())


class _MallInfo2(ctypes.Structure):
    _fields_ = [
        (name, ctypes.c_size_t)
        for name in (
            "arena",
            "ordblks",
            "smblks",
            "hblks",
            "hblkhd",
            "usmblks",
            "fsmblks",
            "uordblks",
            "fordblks",
            "keepcost",
        )
    ]


_mallinfo2: Any = None
_looked_up = False


def malloc_info() -> dict[str, int] | None:
    """glibc's ``mallinfo2()`` (the fields UM's "GNU malloc info" shows), None elsewhere."""
    global _mallinfo2, _looked_up
    if not _looked_up:
        _looked_up = True
        try:
            fn = ctypes.CDLL(ctypes.util.find_library("c")).mallinfo2
            fn.restype = _MallInfo2
            fn.argtypes = []
            _mallinfo2 = fn
        except (OSError, AttributeError, TypeError):
            _mallinfo2 = None
    if _mallinfo2 is None:
        return None
    mi = _mallinfo2()
    names = ("arena", "ordblks", "hblks", "hblkhd", "uordblks", "fordblks")
    return {n: int(getattr(mi, n)) for n in names}


def configs_pb(config: DROConfig, portals: Mapping[str, PortalView], text: str, out: Any) -> None:
    """``DROMonMsg.Configs``: the configuration file's text, each portal's name, index, type."""
    out.gateway.config_data = text
    for p in portals.values():
        c = out.portals.add()
        c.portal_name = p.name
        c.portal_index = p.index
        c.portal_type = PORTAL_TYPE.get(p.kind, 0)


def _portal_pb(rt: DroRuntime, p: PortalView, out: Any, wall_offset: float = 0.0) -> None:
    core = rt.core
    cfg = rt.config.portal(p.name)
    st = core.stats(p.name)
    q = core.queue(p.name)
    out.portal_name = p.name
    out.portal_index = p.index
    out.cost = cfg.cost
    out.proxy_receivers = sum(1 for name, _ in core.proxy_receivers() if name == p.name)
    out.proxy_sources = sum(1 for name, _ in core.proxy_sources() if name == p.name)
    out.receiver_topics, out.receiver_pcre_patterns, out.receiver_regex_patterns = (
        interest_counts(core.advertised_interest(p.name))
    )  # fmt: skip
    taken = max(0, q.enqueued - len(q))
    if p.kind == "peer":
        e = out.peer
        adj = core.router.own.get(p.name)
        if adj is not None and adj.node[0] == 1:
            e.adjacent_gateway_id = adj.node[1]
        e.interest_topics, e.interest_pcre_patterns, e.interest_regex_patterns = (
            interest_counts(core.interest(p.name))
        )  # fmt: skip
        r = e.receive
        r.data_msgs_rcvd = r.transport_topic_fragment_data_msgs_rcvd = st.frames_received
        r.data_msg_bytes_rcvd = st.bytes_received
        r.transport_topic_fragment_data_msg_bytes_rcvd = st.bytes_received
        r.transport_topic_fragment_data_msgs_rcvd_unknown_source = st.unknown_source
        s = e.send
        s.data_fragments_forwarded = q.enqueued
        s.data_fragments_sent = taken
        s.data_fragments_dropped_dup = st.dropped_dup
        s.data_fragments_dropped_would_block = q.dropped_would_block
        s.data_fragment_bytes_dropped_would_block = q.dropped_bytes
        s.data_bytes_enqueued = q.bytes_enqueued
        s.data_bytes_enqueued_max = q.bytes_enqueued_max
        s.data_bytes_enqueued_limit = q.limit
        _immediate_peer_pb(core.mim_stats(p.name), r)
        uim = getattr(rt, "uim", None)
        if isinstance(uim, UimForwarder):
            _unicast_pb(uim.stats(p.name), r, s, peer=True)
        link = getattr(p, "link", None)
        if isinstance(link, PeerLink):
            _link_pb(link, r, s, wall_offset)
            _udp_pb(link, e)
    else:
        e = out.endpoint
        e.domain_id = p.domain_id or 0
        pairs = core.interest(p.name)
        local = [(k, d) for k, d in pairs if d == p.domain_id]
        remote = [(k, d) for k, d in pairs if d != p.domain_id]
        e.local_interest_topics, e.local_interest_pcre_patterns, e.local_interest_regex_patterns = (
            interest_counts(local)
        )  # fmt: skip
        (
            e.remote_interest_topics,
            e.remote_interest_pcre_patterns,
            e.remote_interest_regex_patterns,
        ) = interest_counts(remote)
        r = e.receive
        r.transport_topic_fragments_rcvd = st.frames_received
        r.transport_topic_fragment_bytes_rcvd = st.bytes_received
        s = e.send
        s.transport_topic_fragments_forwarded = q.enqueued
        s.transport_topic_fragments_sent = taken
        s.transport_topic_fragments_dropped_dup = st.dropped_dup
        s.transport_topic_fragments_dropped_would_block = q.dropped_would_block
        s.transport_topic_fragment_bytes_dropped_would_block = q.dropped_bytes
        s.data_bytes_enqueued = q.bytes_enqueued
        s.data_bytes_enqueued_max = q.bytes_enqueued_max
        s.data_bytes_enqueued_limit = q.limit
        _immediate_pb(core.mim_stats(p.name), r, s)
        uim = getattr(rt, "uim", None)
        if isinstance(uim, UimForwarder):
            _unicast_pb(uim.stats(p.name), r, s)


def _immediate_peer_pb(ms: MimStats, r: Any) -> None:
    """A peer portal's MIM counters (what came over its link) into its Receive message (its
    Send message has no immediate fields)."""
    for kind in ("topic", "topicless"):
        c = getattr(ms, kind)
        rcv = f"immediate_{kind}_"
        for field, value in (
            ("fragment_data_msgs_rcvd", c.rcvd),
            ("fragment_data_msg_bytes_rcvd", c.bytes_rcvd),
            ("req_fragment_data_msgs_rcvd", c.req_rcvd),
            ("req_fragment_data_msg_bytes_rcvd", c.req_bytes_rcvd),
        ):
            setattr(r, rcv + field, value)


def _immediate_pb(ms: MimStats, r: Any, s: Any) -> None:
    """An endpoint portal's MIM counters into its Receive (``r``) and Send (``s``) messages."""
    for kind in ("topic", "topicless"):
        c = getattr(ms, kind)
        rcv = f"immediate_{kind}_"
        for field, value in (
            ("fragments_rcvd", c.rcvd),
            ("fragment_bytes_rcvd", c.bytes_rcvd),
            ("req_fragments_rcvd", c.req_rcvd),
            ("req_fragment_bytes_rcvd", c.req_bytes_rcvd),
        ):
            setattr(r, rcv + field, value)
        for field, value in (
            ("fragments_forwarded", c.forwarded),
            ("fragment_bytes_forwarded", c.bytes_forwarded),
            ("fragments_sent", c.sent),
            ("fragment_bytes_sent", c.bytes_sent),
            ("req_fragments_sent", c.req_sent),
            ("req_fragment_bytes_sent", c.req_bytes_sent),
            ("fragments_dropped_would_block", c.dropped_would_block),
            ("fragment_bytes_dropped_would_block", c.bytes_dropped_would_block),
            ("fragments_dropped_error", c.dropped_error),
            ("fragment_bytes_dropped_error", c.bytes_dropped_error),
            ("fragments_dropped_size_error", c.dropped_size_error),
            ("fragment_bytes_dropped_size_error", c.bytes_dropped_size_error),
        ):
            setattr(s, rcv + field, value)


def _unicast_pb(us: UimPortalStats, r: Any, s: Any, *, peer: bool = False) -> None:
    """A portal's UIM counters into its Receive (``r``) and Send (``s``) messages."""
    r.unicast_data_msgs_rcvd = us.rcvd
    r.unicast_data_msg_bytes_rcvd = us.bytes_rcvd
    r.unicast_data_msgs_rcvd_no_stream = us.rcvd_no_stream
    r.unicast_data_msg_bytes_rcvd_no_stream = us.bytes_rcvd_no_stream
    r.unicast_data_msgs_dropped_no_route = us.dropped_no_route
    r.unicast_data_msg_bytes_dropped_no_route = us.bytes_dropped_no_route
    s.unicast_msgs_forwarded = us.forwarded
    s.unicast_msg_bytes_forwarded = us.bytes_forwarded
    s.unicast_msgs_sent = us.sent
    s.unicast_msg_bytes_sent = us.bytes_sent
    if peer:  # Peer.Send: the link was down, or full; no error field
        s.unicast_msgs_dropped_not_operational = us.dropped_not_operational
        s.unicast_msg_bytes_dropped_not_operational = us.bytes_dropped_not_operational
        s.unicast_msgs_dropped_would_block = us.dropped_would_block
        s.unicast_msg_bytes_dropped_would_block = us.bytes_dropped_would_block
        return
    s.unicast_msgs_dropped_error = us.dropped_error
    s.unicast_msg_bytes_dropped_error = us.bytes_dropped_error


def _link_pb(link: PeerLink, r: Any, s: Any, wall_offset: float) -> None:
    """The peer link's own figures (:class:`~umcore.dro.peer.LinkStats`): messages and bytes
    each way as they crossed the link, control messages, batching, keepalive RTT (µs) and the
    wall-clock second of the last keepalive answer, drops while the link was down."""
    ls = link.stats
    r.data_msgs_rcvd = ls.data_msgs_rcvd
    r.data_msg_bytes_rcvd = ls.data_msg_bytes_rcvd
    r.transport_topic_fragment_data_msgs_rcvd_unknown_source += ls.data_msgs_rcvd_unknown_source
    r.gateway_cntl_msgs_rcvd = ls.gateway_cntl_msgs_rcvd
    r.gateway_cntl_msg_bytes_rcvd = ls.gateway_cntl_msg_bytes_rcvd
    r.unicast_cntl_msgs_rcvd_unhandled = ls.cntl_msgs_unhandled
    s.data_fragments_sent = ls.data_fragments_sent
    s.data_fragment_bytes_sent = ls.data_fragment_bytes_sent
    s.data_fragments_dropped_not_operational = ls.data_fragments_dropped_not_operational
    s.data_fragment_bytes_dropped_not_operational = ls.data_fragment_bytes_dropped_not_operational
    s.data_fragments_dropped_would_block += ls.data_fragments_dropped_would_block
    s.data_fragment_bytes_dropped_would_block += ls.data_fragment_bytes_dropped_would_block
    s.gateway_cntl_msgs = s.gateway_cntl_msgs_sent = ls.gateway_cntl_msgs_sent
    s.gateway_cntl_msg_bytes = s.gateway_cntl_msg_bytes_sent = ls.gateway_cntl_msg_bytes_sent
    s.gateway_cntl_msgs_dropped_not_operational = ls.gateway_cntl_msgs_dropped_not_operational
    s.batches = ls.batches
    s.batch_msgs_min, s.batch_msgs_mean, s.batch_msgs_max = (
        ls.batch_msgs_min, ls.batch_msgs_mean, ls.batch_msgs_max
    )  # fmt: skip
    s.batch_bytes_min, s.batch_bytes_mean, s.batch_bytes_max = (
        ls.batch_bytes_min, ls.batch_bytes_mean, ls.batch_bytes_max
    )  # fmt: skip
    s.data_bytes_enqueued += ls.data_bytes_enqueued
    s.rtt_samples = ls.rtt_samples
    s.rtt_min, s.rtt_mean, s.rtt_max = ls.rtt_min, ls.rtt_mean, ls.rtt_max
    if ls.last_ka_time is not None:
        s.last_ka_time = int(max(0.0, ls.last_ka_time + wall_offset))


def _udp_pb(link: PeerLink, e: Any) -> None:
    """The UDP data link's LBT-RU figures (``<udp>``), over every connection of the link."""
    if link.udp_config is None:
        return
    for stats, out in zip(link.udp_stats(), (e.udp_send, e.udp_receive), strict=True):
        names = out.DESCRIPTOR.fields_by_name
        for name, value in stats.items():
            if name in names:
                setattr(out, name, min(value, 2**64 - 1))


def _local_pb(rt: DroRuntime, out: Any) -> None:
    core = rt.core
    router = core.router
    out.gateway_name = rt.config.daemon.name or ""
    out.gateway_id = core.node_id
    out.version = router.version & _U32
    out.topology_signature = topology_signature(core)
    out.graph_version = router.recalcs & _U32
    out.gateway_count = 1 + len(router.heard)
    out.trd_count = len(router.domains())
    mi = malloc_info()
    if mi is not None:
        for name, value in mi.items():
            setattr(out.malloc_info, name, min(value, _U32))


def _others_pb(rt: DroRuntime, out: Any, wall_offset: float) -> None:
    for node_id, heard in sorted(rt.core.router.heard.items()):
        info = heard.info
        g = out.add()
        g.gateway_name = info.name
        g.gateway_id = node_id
        g.version = info.version & _U32
        g.topology_signature = zlib.crc32(
            repr(sorted((a.node, a.cost) for a in info.adjacencies)).encode()
        )
        wall = max(0.0, heard.last + wall_offset)
        g.last_activity_sec = int(wall)
        g.last_activity_usec = int((wall - int(wall)) * 1e6)
        for a in info.adjacencies:
            o = g.other_portals.add()
            o.cost = a.cost
            if a.node[0] == 0:
                o.adjacent_domain_id = a.node[1]
            else:
                o.adjacent_gateway_id = a.node[1]


def stats_pb(
    rt: DroRuntime,
    out: Any,
    *,
    wall_offset: float = 0.0,
    portals: Sequence[PortalView] | None = None,
) -> None:
    """Fill ``DROMonMsg.Stats`` (see the module docstring); ``portals``: only these (default:
    all).  ``wall_offset`` turns the core's clock into the wall clock (other DROs' activity)."""
    _local_pb(rt, out.local)
    for p in portals if portals is not None else list(rt.portals.values()):
        _portal_pb(rt, p, out.portals.add(), wall_offset)
    _others_pb(rt, out.other_gateways, wall_offset)


def config_text(config: DROConfig) -> str:
    """The configuration file as read (empty when it was not loaded from a file), cut at
    :data:`MAX_CONFIG_TEXT` bytes."""
    path = Path(config.source)
    try:
        data = path.read_bytes() if path.is_file() else b""
    except OSError:
        data = b""
    if len(data) > MAX_CONFIG_TEXT:
        log.warning(
            "configuration file %s is %d bytes: config_data carries the first %d",
            config.source,
            len(data),
            MAX_CONFIG_TEXT,
        )
        data = data[:MAX_CONFIG_TEXT]
    return data.decode("utf-8", errors="replace")


class DroStatsContent:
    """The DRO's content for :class:`~umcore.daemon.statspub.StatsPublisher`."""

    packet_type = PacketType.GATEWAY
    categories: tuple[str, ...] = (DRO_CATEGORY,)
    # The first publication is one interval after start, as UM samples: a collector has that
    # long to resolve the topic before the message with the configuration goes out.
    publish_at_start: tuple[str, ...] = ()

    def __init__(
        self,
        runtime: DroRuntime,
        *,
        text: str | None = None,
        monotonic: Callable[[], float] = time.monotonic,
    ) -> None:
        self.runtime = runtime
        self.text = config_text(runtime.config) if text is None else text
        self.monotonic = monotonic
        #: True once the configuration went out (it goes with the first statistics).
        self.configs_sent = False

    def accepts(self, event: object) -> bool:
        return False  # the DRO publishes no events

    def messages(self, *, with_configs: bool, wall_offset: float) -> list[Any]:
        """The messages of one publication: ``configs`` (if asked) with the first share of
        the portals, at most :data:`MAX_PORTALS_PER_MESSAGE` portals per message."""
        rt = self.runtime
        views = list(rt.portals.values())
        chunks = [
            views[i : i + MAX_PORTALS_PER_MESSAGE]
            for i in range(0, len(views), MAX_PORTALS_PER_MESSAGE)
        ] or [[]]
        out = []
        for n, chunk in enumerate(chunks):
            msg = DROMonMsg()
            if with_configs and n == 0:
                configs_pb(rt.config, rt.portals, self.text, msg.configs)
            stats_pb(rt, msg.stats, wall_offset=wall_offset, portals=chunk)
            out.append(msg)
        return out

    def publish(self, pub: StatsPublisher[Any], category: str, snapshot: bool) -> None:
        if category != DRO_CATEGORY:
            return
        first = not self.configs_sent
        offset = pub.wall_clock() - self.monotonic()
        for msg in self.messages(with_configs=first, wall_offset=offset):
            try:
                pub.send_pb(msg)
            except LocalProtocolError:
                # configuration and statistics together too large: send them apart
                configs = DROMonMsg()
                configs.configs.CopyFrom(msg.configs)
                msg.ClearField("configs")
                pub.send_pb(configs)
                pub.send_pb(msg)
        self.configs_sent = True


class _NoControl:
    """The DRO's ``<monitor>`` statistics take no control requests (UM's deprecated DRO control
    requests belong to ``<daemon-monitor>``, which pyum does not run)."""

    def handle(self, payload: bytes | bytearray | memoryview) -> ControlReply:
        return ControlReply("ERROR: tnwgd takes no control requests", False)


NO_CONTROL = _NoControl()


def monitor_settings(config: DROConfig) -> tuple[int, TransportOpts] | None:
    """``<monitor>``'s interval (s) and transport options; None when off.  ConfigError (file,
    element, what is allowed) for a transport or format module pyum does not implement."""
    d = config.daemon
    if d.monitor_interval <= 0:
        return None
    if d.monitor_transport.lower() != "lbm":
        raise ConfigError(
            f"the {d.monitor_transport!r} monitoring transport module is not implemented",
            source=config.source,
            what="<monitor><transport-module>",
            allowed="lbm",
        )
    if d.monitor_format.lower() != "pb":
        raise ConfigError(
            f"the {d.monitor_format!r} monitoring format module is not implemented by pyum",
            source=config.source,
            what="<monitor><format-module>",
            allowed='pb (<format-module module="pb"/>)',
        )
    opts = parse_transport_opts(
        d.monitor_transport_options or "", source=f"{config.source}: <transport-module options>"
    )
    return d.monitor_interval, opts


def context_appids(portal: str) -> tuple[str, ...]:
    """UM's application ids of an endpoint portal's contexts, in ``contexts()`` order."""
    return tuple(f"Gateway_Portal_{portal}_{suffix}" for suffix in ROLE_SUFFIXES)


def dro_publisher(
    runtime: DroRuntime,
    sink: Callable[[bytes], None],
    *,
    now: float,
    interval_s: int,
    wall_clock: Callable[[], float] = time.time,
    monotonic: Callable[[], float] = time.monotonic,
    topic: str = "/29west/statistics",
    text: str | None = None,
    pid: int = 0,
) -> StatsPublisher[Any]:
    """A sans-IO publisher of this DRO's ``DROMonMsg`` into ``sink`` (tests, tools)."""
    return StatsPublisher(
        _daemon_settings(runtime.config, interval_s, topic),
        DroStatsContent(runtime, text=text, monotonic=monotonic),
        sink,
        NO_CONTROL,
        now=now,
        wall_clock=wall_clock,
        sender_ipv4=sender_address("localhost"),
        pid=pid,
    )


def _daemon_settings(config: DROConfig, interval_s: int, topic: str) -> MonitorSettings:
    return MonitorSettings(
        topic, format="pb", default_ms=interval_s * 1000, application_id=config.daemon.name or ""
    )


# ------------------------------------------------------------------------- on the loop


class DroMonitor:
    """``<monitor>`` running: one monitoring context (``29west_statistics_context``, configured
    by the transport-module options) and its source on the statistics topic, carrying both the
    daemon statistics (:class:`~umcore.daemon.statspub.StatsPublisher` on a timer of its own)
    and one :class:`~umcore.monitor.automatic.AutomaticMonitor` per portal context, kept in step
    with the portals' contexts every interval (a portal restarted gets monitors for its new
    contexts).  A statistics message the source cannot take is dropped and counted, never queued.

    :meth:`open` (None when ``<monitor>`` is off, or when the monitoring context cannot be
    created: logged, the DRO runs without statistics); :meth:`close` at stop."""

    def __init__(
        self,
        runtime: DroRuntime,
        interval_s: int,
        opts: TransportOpts,
        sink: MonitoringPublisher,
        *,
        wall_clock: Callable[[], float] = time.time,
    ) -> None:
        self.runtime = runtime
        self.interval_s = interval_s
        self.opts = opts
        self.sink = sink
        sink.refs += 1  # ours: the library monitors closing never close the shared context
        self.loop = asyncio.get_running_loop()
        self.publisher: StatsPublisher[Any] = StatsPublisher(
            _daemon_settings(runtime.config, interval_s, opts.topic),
            DroStatsContent(runtime, monotonic=self.loop.time),
            self._send,
            NO_CONTROL,
            now=self.loop.time(),
            wall_clock=wall_clock,
            sender_ipv4=sink.sender_ipv4,
            pid=os.getpid(),
        )
        #: DROMonMsg messages the statistics source refused (would block).
        self.dropped = 0
        self.timer = CoreTimer(self.loop, self._on_timer)
        self.timer.arm(self.publisher.next_timer())
        #: Automatic monitors by (portal, context id).
        self.library: dict[tuple[str, int], AutomaticMonitor] = {}
        self._task: asyncio.Task[None] | None = None

    @classmethod
    async def open(
        cls, runtime: DroRuntime, *, wall_clock: Callable[[], float] = time.time
    ) -> DroMonitor | None:
        """Start ``<monitor>`` for ``runtime`` (ConfigError as :func:`monitor_settings`)."""
        settings = monitor_settings(runtime.config)
        if settings is None:
            return None
        interval_s, opts = settings
        from umcore.api import Context  # only when statistics are published

        sink = MonitoringPublisher(opts, ("tnwgd", *opts.key()), Context.create)
        try:
            await sink.open()
        except Exception as exc:  # the DRO does its work even without statistics
            log.error("statistics not published: %s", exc)
            return None
        mon = cls(runtime, interval_s, opts, sink, wall_clock=wall_clock)
        mon.sync()
        mon._task = mon.loop.create_task(mon._keep_in_step())
        log.info(
            "publishing DRO and portal context statistics every %d s on topic %s (pb)",
            interval_s,
            opts.topic,
        )
        return mon

    def _send(self, data: bytes) -> None:
        self.dropped += self.sink.publish([data])

    def _on_timer(self) -> None:
        self.publisher.handle_timer(self.loop.time())
        self.timer.arm(self.publisher.next_timer())

    def sync(self) -> list[Awaitable[None]]:
        """Start monitors for portal contexts that have none; stop those of contexts gone
        (returns their closings, which :meth:`_keep_in_step` awaits)."""
        want: dict[tuple[str, int], tuple[Any, str]] = {}
        for p in self.runtime.portals.values():
            if p.kind != "endpoint":
                continue
            for ctx, appid in zip(p.contexts(), context_appids(p.name), strict=False):
                want[(p.name, id(ctx))] = (ctx, appid)
        closing: list[Awaitable[None]] = [
            self.library.pop(k).close() for k in list(self.library) if k not in want
        ]
        for key, (ctx, appid) in want.items():
            if key in self.library:
                continue
            settings = LibraryMonitorSettings(
                interval=self.interval_s, transport_opts=self.opts, format="pb", appid=appid
            )
            self.sink.refs += 1  # released by the monitor's close
            mon = AutomaticMonitor(ctx, settings, self.sink)
            mon.start()
            self.library[key] = mon
        return closing

    async def _keep_in_step(self) -> None:
        while True:
            await asyncio.sleep(self.interval_s)
            try:
                for c in self.sync():
                    await c
            except Exception:  # never let monitoring take the daemon down
                log.exception("portal context monitors not updated")

    async def close(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None
        self.timer.cancel()
        for mon in self.library.values():
            await mon.close()
        self.library.clear()
        self.sink.refs -= 1
        await self.sink.close()


# ----------------------------------------------------------------------------- Prometheus

_PORTAL_EXCLUDE = {"portal_index", "recalc_duration_sec", "recalc_duration_usec"} | {
    "proxy_rec_recalc_duration_sec",
    "proxy_rec_recalc_duration_usec",
}
_CORE_COUNTERS: tuple[tuple[str, str], ...] = (
    ("dropped_old", "frames below the duplicate window, dropped"),
    ("unknown_source", "frames from a source the portal has not reported"),
    ("acl_rejected", "sources refused by an inbound or outbound ACL"),
    ("hop_limit_dropped", "sources that had crossed max-hop-count DROs already"),
    ("own_sources_ignored", "our own proxy sources seen by our proxy receivers"),
    ("sources_refused", "sources refused because the source table was full"),
    ("tqrs_from_dros_ignored", "TQRs of other DROs' proxy receivers, ignored"),
)

_MIM_DROPS: tuple[tuple[str, str], ...] = (
    ("dropped_no_interest", "MIMs heard here that went nowhere (no interest beyond)"),
    ("dropped_hop_limit", "MIMs heard here that had crossed max-hop-count DROs already"),
)
"""The core's MIM drops at the ingress portal that DROMonMsg has no field for."""


def mim_drop_counts(core: DroCore, portal: str) -> dict[str, int]:
    """``mim_<topic|topicless>_<drop>`` -> count, for ``portal`` (metrics, web monitor)."""
    ms = core.mim_stats(portal)
    return {
        f"mim_{kind}_{field}": getattr(getattr(ms, kind), field)
        for kind in ("topic", "topicless")
        for field, _ in _MIM_DROPS
    }


class _CoreCollector:
    """The core's per-portal counters that UM's messages have no field for, and portal up."""

    def __init__(self, runtime: DroRuntime) -> None:
        self.runtime = runtime

    def describe(self) -> Iterator[Metric]:
        return iter(())

    def collect(self) -> Iterator[Metric]:
        core = self.runtime.core
        names = list(self.runtime.portals)
        for field, text in _CORE_COUNTERS:
            fam = CounterMetricFamily(
                f"pyum_dro_portal_core_{field}", f"DRO core, per portal: {text}", labels=["portal"]
            )
            for name in names:
                fam.add_metric([name], getattr(core.stats(name), field))
            yield fam
        drops = {name: mim_drop_counts(core, name) for name in names}
        for kind in ("topic", "topicless"):
            for field, text in _MIM_DROPS:
                key = f"mim_{kind}_{field}"
                fam = CounterMetricFamily(
                    f"pyum_dro_portal_core_{key}",
                    f"DRO core, per portal: {kind} {text}",
                    labels=["portal"],
                )
                for name in names:
                    fam.add_metric([name], drops[name][key])
                yield fam
        up = GaugeMetricFamily(
            "pyum_dro_portal_up",
            "1 while the portal's contexts or peer link run",
            labels=["portal"],
        )
        for name in names:
            up.add_metric([name], 1 if name in core.router.own else 0)
        yield up


def register_metrics(
    registry: CollectorRegistry, runtime: DroRuntime, monitor: DroMonitor | None = None
) -> None:
    """Register the DRO's collectors (module docstring) with a daemon's own registry; with a
    running ``monitor``, also its messages published and refused."""
    Stats = DROMonMsg.Stats

    def portal_msgs() -> list[tuple[PortalView, Any]]:
        out = []
        for p in runtime.portals.values():
            msg = Stats.Portal()
            # the loop's clock is the monotonic one: to wall-clock time (peers' last_ka_time)
            _portal_pb(runtime, p, msg, time.time() - time.monotonic())
            out.append((p, msg))
        return out

    def local() -> Iterator[tuple[Any, Mapping[str, str]]]:
        msg = Stats.Local()
        _local_pb(runtime, msg)
        yield msg, {}

    def portals() -> Iterator[tuple[Any, Mapping[str, str]]]:
        for p, m in portal_msgs():
            yield m, {"portal": p.name}

    def part(kind: str, *path: str) -> Callable[[], Iterator[tuple[Any, Mapping[str, str]]]]:
        def read() -> Iterator[tuple[Any, Mapping[str, str]]]:
            for p, m in portal_msgs():
                if p.kind != kind:
                    continue
                sub = getattr(m, kind)
                for name in path:
                    sub = getattr(sub, name)
                yield sub, {"portal": p.name}

        return read

    levels = {"data_bytes_enqueued", "data_bytes_enqueued_max", "data_bytes_enqueued_limit"}
    collectors = [
        StatsCollector(
            "pyum", "dro_local", Stats.Local.DESCRIPTOR, local,  # type: ignore[arg-type]
            exclude={"gateway_id", "topology_signature", "recalc_duration_sec", "recalc_duration_usec"},
        ),
        StatsCollector(
            "pyum", "dro_portal", Stats.Portal.DESCRIPTOR, portals,  # type: ignore[arg-type]
            labelnames=("portal",), exclude=_PORTAL_EXCLUDE,
        ),
        StatsCollector(
            "pyum", "dro_endpoint", Stats.Portal.Endpoint.DESCRIPTOR,  # type: ignore[arg-type]
            part("endpoint"), labelnames=("portal",), exclude={"domain_id"},
        ),
        StatsCollector(
            "pyum", "dro_endpoint_receive",
            Stats.Portal.Endpoint.Receive.DESCRIPTOR,  # type: ignore[arg-type]
            part("endpoint", "receive"), labelnames=("portal",),
        ),
        StatsCollector(
            "pyum", "dro_endpoint_send",
            Stats.Portal.Endpoint.Send.DESCRIPTOR,  # type: ignore[arg-type]
            part("endpoint", "send"), labelnames=("portal",), gauges=levels,
        ),
        StatsCollector(
            "pyum", "dro_peer", Stats.Portal.Peer.DESCRIPTOR,  # type: ignore[arg-type]
            part("peer"), labelnames=("portal",), exclude={"adjacent_gateway_id"},
        ),
        StatsCollector(
            "pyum", "dro_peer_receive",
            Stats.Portal.Peer.Receive.DESCRIPTOR,  # type: ignore[arg-type]
            part("peer", "receive"), labelnames=("portal",),
        ),
        StatsCollector(
            "pyum", "dro_peer_send", Stats.Portal.Peer.Send.DESCRIPTOR,  # type: ignore[arg-type]
            part("peer", "send"), labelnames=("portal",), gauges=levels | _PEER_LEVELS,
        ),
        StatsCollector(
            "pyum", "dro_peer_udp_send",
            Stats.Portal.Peer.UDPSend.DESCRIPTOR,  # type: ignore[arg-type]
            part("peer", "udp_send"), labelnames=("portal",),
        ),
        StatsCollector(
            "pyum", "dro_peer_udp_receive",
            Stats.Portal.Peer.UDPReceive.DESCRIPTOR,  # type: ignore[arg-type]
            part("peer", "udp_receive"), labelnames=("portal",), gauges=_UDP_LEVELS,
        ),
    ]  # fmt: skip
    for c in collectors:
        registry.register(c)
    registry.register(_CoreCollector(runtime))
    registry.register(_LinkCollector(runtime))
    if monitor is not None:
        registry.register(_MonitorCollector(monitor))


_PEER_LEVELS = {
    "last_ka_time", "rtt_min", "rtt_mean", "rtt_max", "batch_msgs_min", "batch_msgs_mean",
    "batch_msgs_max", "batch_bytes_min", "batch_bytes_mean", "batch_bytes_max",
}  # fmt: skip
"""Peer send fields that are levels (gauges), not cumulative counters."""
_UDP_LEVELS = {f"nak_{k}_{m}" for k in ("stm", "tx") for m in ("min", "mean", "max")}
"""UDP receive fields that are levels: NAK recovery times and transmissions per NAK."""

# (LinkStats field, metric suffix, help): the peer link figures DROMonMsg has no field for.
_LINK_COUNTERS = (
    ("bytes_sent", "bytes_sent", "bytes written on the link (after batching, before LZ4/TLS)"),
    ("bytes_rcvd", "bytes_received", "bytes read from the link (after LZ4/TLS)"),
    ("connects", "connections", "connections a link session started on"),
    ("losses", "losses", "link sessions lost (keepalive timeout, garbage, peer gone)"),
)


class _LinkCollector:
    """Per peer portal: its link's bytes each way, sessions and losses, and whether it is up
    (``pyum_dro_peer_link_*``, label ``portal``)."""

    def __init__(self, runtime: DroRuntime) -> None:
        self.runtime = runtime

    def describe(self) -> Iterator[Metric]:
        return iter(())

    def collect(self) -> Iterator[Metric]:
        links = [
            (p.name, link)
            for p in self.runtime.portals.values()
            if isinstance(link := getattr(p, "link", None), PeerLink)
        ]
        for field, suffix, text in _LINK_COUNTERS:
            fam = CounterMetricFamily(
                f"pyum_dro_peer_link_{suffix}", f"peer link: {text}", labels=["portal"]
            )
            for name, link in links:
                fam.add_metric([name], getattr(link.stats, field))
            yield fam
        up = GaugeMetricFamily(
            "pyum_dro_peer_link_up", "1 while the peer link is up", labels=["portal"]
        )
        for name, link in links:
            up.add_metric([name], 1 if link.up else 0)
        yield up


class _MonitorCollector:
    def __init__(self, monitor: DroMonitor) -> None:
        self.monitor = monitor

    def describe(self) -> Iterator[Metric]:
        return iter(())

    def collect(self) -> Iterator[Metric]:
        pub = self.monitor.publisher
        yield CounterMetricFamily(
            "pyum_dro_monitor_messages_dropped",
            "DROMonMsg statistics messages the statistics source refused (would block)",
            value=self.monitor.dropped,
        )
        yield CounterMetricFamily(
            "pyum_dro_monitor_messages_published",
            "DROMonMsg statistics messages published",
            value=pub.published,
        )
        yield CounterMetricFamily(
            "pyum_dro_monitor_library_packets_published",
            "library statistics packets of the portal contexts published",
            value=sum(m.published for m in self.monitor.library.values()),
        )
        yield CounterMetricFamily(
            "pyum_dro_monitor_library_packets_dropped",
            "library statistics packets of the portal contexts dropped (source blocked)",
            value=sum(m.dropped for m in self.monitor.library.values()),
        )
