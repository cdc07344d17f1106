"""umestored's UMP statistics: ``UMPMonMsg`` per Store, over UM, and the same figures for Prometheus.

Theory of operation
-------------------
The machinery -- per-category scheduling, lbmmon framing with the attribute block, the bounded
event queue, the UM source on the topic, ``--monitor-file`` -- is the daemons' shared publisher
(:mod:`umcore.daemon.statspub`).  This module is the Store's content on top of it.

- **When** (``<daemon-monitor>``): one monitoring context for the daemon (UM's "Daemon
  Controller"; its options from ``<daemon-monitor><lbm-config>``, applied over the process's),
  one statistics source on ``<daemon-monitor topic>`` (default ``umestore.monitor``), and per
  Store a :class:`~umcore.daemon.statspub.StatsPublisher` whose categories are the
  ``<publishing-interval>`` groups: ``config``, ``store``, ``source``, ``receiver``, ``disk``,
  ``memory`` (``ivl`` in seconds; ``default`` for the groups not given; a Store's own
  ``<publishing-interval>`` overrides the daemon's per group; no interval at all = nothing
  periodic, as for the SRS).
- **What**: pyum publishes the protobuf format (``UMPMonMsg``, lbmmon packet type 6, application
  ID = the ``<store name>``), not UM's deprecated binary C structs, whatever
  ``monitor_format`` says: each message carries ``attributes`` and exactly one of ``configs``,
  ``stats`` or ``events`` (persistence-store.md 4.2).

  * ``config``: ``Configs`` (version, store name, index, interface, port, directories, the
    retransmission rate, patterns, and per topic its repositories with their receivers) at
    start, then at each ``config`` tick *only when it changed* (a source or receiver
    registered, a state deleted); a snapshot request publishes it regardless.
  * ``store``: ``Stats`` with the store-level counters (retransmission requests received,
    serviced, dropped; seconds since start; source count).
  * ``source``: ``Stats.src_repo_stats`` with each repository's window, sizes, drops, flags.
  * ``receiver``: ``Stats.src_repo_stats`` naming the repository (RegID, topic, Session ID)
    with only its ``rcv_stats`` (``high_ack_sqn``, flags, last activity).
  * ``disk``: ``Stats.src_repo_stats`` of disk repositories with only ``src_disk_stat``.
  * ``memory``: nothing (UM's SmartHeap figures have no Python counterpart).

  So each group is a message of its own, as UM's binary groups are (STORE_STATS, REPO_STATS,
  RCV_STATS, DISK_STATS).  A group with more than :data:`MAX_REPOS_PER_MESSAGE` repositories
  is split over several messages.
- **Events** are queued as they happen (the shared publisher's bounded queue) and published
  at each tick of the ``store`` group, in order, one ``Events`` message per batch of at most
  :data:`MAX_EVENTS_PER_MESSAGE`: STORE_CREATED at start (so it reaches subscribers that
  joined the topic within an interval), STORE_DELETED at stop (at once), then the
  core's (:mod:`umcore.store.events`) with UM's kinds and deletion reasons -- TOPIC_CREATE,
  SOURCE_REGISTERED (``lead_sqn`` 0xFFFFFFFF for a fresh source) / REREGISTERED /
  RECREATED / DEREGISTERED / DELETED, RECEIVER_REGISTERED (``low_sqn``, ``high_sqn``) /
  REREGISTERED / RECREATED / DEREGISTERED / DELETED, RPP_WRITING, RPP_REPO_EMPTY.
- **Control** (:mod:`daemons.umestored.control`): requests on the monitoring context's
  request port go to one :class:`~daemons.umestored.control.StoreControl` for every Store.
- **Prometheus**: :func:`ump_collectors` exports the ``store``, ``source`` and ``receiver``
  figures built by the same functions, as ``pyum_ump_store_*``, ``pyum_ump_source_*``
  (labels ``store``, ``src_regid``, ``topic``) and ``pyum_ump_receiver_*`` (labels ``store``,
  ``src_regid``, ``rcv_regid``), at most :data:`MAX_UMP_SERIES` label sets per metric (the rest
  summed into one ``_other`` series, counted in ``*_series_overflow``).

IP addresses in ``Configs`` are the network-order address read as a host integer, as UM fills
them (trap 24).  ``dmon_topic_idx`` numbers a Store's topics in order of first appearance.
"""

from __future__ import annotations

import asyncio
import logging
import os
import socket
import sys
import time
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from typing import Any, Protocol

from prometheus_client.core import CounterMetricFamily, Metric

from daemons.umestored.control import StoreControl
from umcore import __version__ as pyum_version
from umcore.config.attributes import global_configuration
from umcore.config.flatfile import parse_file
from umcore.config.store import StoreDaemon, StoreInstance
from umcore.daemon.statspub import (
    FileSink,
    MonitorSettings,
    StatsPublisher,
    StatsService,
    UMSink,
    sender_address,
)
from umcore.errors import ConfigError
from umcore.features.latejoin import make_otid
from umcore.monitor.control import ControlReply
from umcore.monitor.framing import PacketType
from umcore.monitor.pb import ump_mon_pb2
from umcore.monitor.prometheus import StatsCollector
from umcore.store import events as ev
from umcore.store.core import StoreCore

__all__ = [
    "GROUPS",
    "MAX_EVENTS_PER_MESSAGE",
    "MAX_REPOS_PER_MESSAGE",
    "MAX_UMP_SERIES",
    "MonitorCollector",
    "StoreMonitor",
    "StoreStatsContent",
    "StoreView",
    "configs_pb",
    "event_pb",
    "monitor_settings",
    "stats_pb",
    "ump_collectors",
]

log = logging.getLogger("umestored.monitor")

UMPMonMsg = ump_mon_pb2.UMPMonMsg
_Events = UMPMonMsg.Events
_RepoConfig = UMPMonMsg.Configs.TopicConfig.RepoConfig

GROUPS: tuple[str, ...] = ("config", "store", "source", "receiver", "disk", "memory")
"""The ``<publishing-interval>`` groups (UM's), in publication order."""

CATEGORIES: tuple[str, ...] = ("events", *GROUPS)
"""The publisher's categories: the groups, and the queued events (on the ``store`` group's
interval)."""

MAX_REPOS_PER_MESSAGE = 500
"""Repositories per ``source``/``receiver``/``disk`` message (and topics per ``config``
message): a Store with thousands of sources publishes several messages of bounded size (a UM
message of ~100 KB) instead of one that a collector's receive buffer may refuse."""

MAX_EVENTS_PER_MESSAGE = 1000
"""Events per ``Events`` message (a reconnect storm publishes several)."""

MAX_UMP_SERIES = 1000
"""Label sets per Prometheus metric of the ``pyum_ump_source_*`` / ``pyum_ump_receiver_*``
families (as umestored's ``MAX_REPOSITORY_SERIES``): a scrape of a Store with many sources and
receivers stays bounded; the rest is summed into the ``_other`` series."""

NO_SQN = 0xFFFFFFFF

# Repository flags (persistence-store.md 4.3)
REPO_INTENTIONAL_DROPS = 0x1
REPO_ISN_SET = 0x2
REPO_DISK_CKSUM = 0x4
REPO_SHUTTING_DOWN = 0x8
REPO_RPP = 0x10
REPO_DELAY_WRITE = 0x20
# Receiver flags
RCV_FIRST_ACK = 0x1
RCV_RPP = 0x20
RCV_RPP_IS_NON_BLOCKING = 0x40

_REPO_TYPES = {
    "no-cache": _RepoConfig.REPO_TYPE_NOCACHE,
    "memory": _RepoConfig.REPO_TYPE_MEMORY,
    "disk": _RepoConfig.REPO_TYPE_DISK,
    "reduced-fd": _RepoConfig.REPO_TYPE_REDUCED_FD,
}
_TOPIC_TYPES = {
    "direct": UMPMonMsg.Configs.TOPIC_TYPE_DIRECT,
    "pcre": UMPMonMsg.Configs.TOPIC_TYPE_PCRE,
    "regexp": UMPMonMsg.Configs.TOPIC_TYPE_REGEXP,
}


class StoreView(Protocol):
    """What the statistics read of one running Store (:class:`daemons.umestored.app.StoreRuntime`)."""

    @property
    def name(self) -> str: ...
    @property
    def core(self) -> StoreCore | None: ...
    @property
    def address(self) -> tuple[str, int]: ...


def ip_as_host_int(ip: str) -> int:
    """An IPv4 address as UM's protobuf stats carry it: network-order bytes read as a host
    integer (trap 24); 0 for anything that is not an IPv4 address."""
    try:
        return int.from_bytes(socket.inet_aton(ip), sys.byteorder)
    except OSError:
        return 0


# ------------------------------------------------------------------------------- settings


def monitor_settings(
    daemon: StoreDaemon, instance: StoreInstance, context_attributes: Any = None
) -> MonitorSettings:
    """The shared publisher's settings for one Store (module docstring: intervals in ms)."""
    groups = dict(daemon.daemon_monitor_intervals)
    groups.update(instance.publishing_interval)
    default_s = groups.pop("default", 0)
    if "store" in groups:
        groups["events"] = groups["store"]
    return MonitorSettings(
        daemon.daemon_monitor_topic if daemon.daemon_monitor else None,
        format="pb",
        default_ms=default_s * 1000,
        intervals={g: s * 1000 for g, s in groups.items()},
        publish_events=True,
        allow_snapshot=daemon.remote_snapshot_request,
        allow_config=daemon.remote_config_changes_request,
        application_id=instance.name,
        context_attributes=context_attributes,
    )


def monitoring_context_attributes(daemon: StoreDaemon, warn: Callable[[str], None]) -> Any:
    """The monitoring context's options: the process's (umestored's ``<lbm-config>`` and
    ``<xml-config>``) with ``<daemon-monitor><lbm-config>``'s context lines over them.  A bad
    file is a warning, as UM's Store treats ``<lbm-config>``."""
    attrs = global_configuration().attributes("context")
    path = daemon.daemon_monitor_lbm_config
    if path:
        try:
            attrs.apply_settings(parse_file(path))
        except ConfigError as exc:
            warn(f"<daemon-monitor><lbm-config>: {exc} (going on without it)")
    return attrs


# -------------------------------------------------------------------------------- content


class TopicIndex:
    """``dmon_topic_idx``: a Store's topics numbered in order of first appearance (a deleted
    topic's number is forgotten; it gets a new one if it comes back)."""

    __slots__ = ("_idx", "_next")

    def __init__(self) -> None:
        self._idx: dict[str, int] = {}
        self._next = 0

    def __call__(self, topic: str) -> int:
        idx = self._idx.get(topic)
        if idx is None:
            idx = self._idx[topic] = self._next
            self._next += 1
        return idx

    def forget(self, topic: str) -> None:
        self._idx.pop(topic, None)


def configs_pb(view: StoreView, index: int, topic_idx: TopicIndex, out: Any) -> None:
    """Fill ``UMPMonMsg.Configs`` ``out`` for one Store."""
    core = view.core
    ip, port = view.address
    out.lbm_version = f"pyum {pyum_version}"
    out.store_name = view.name
    out.store_idx = index
    out.ip_addr = ip_as_host_int(ip)
    out.port = port
    if core is None:
        return
    inst = core.instance
    out.disk_cache_dir_name = core.cache_dir
    out.disk_state_dir_name = core.state_dir
    out.max_retransmission_processing_rate = int(
        inst.options["retransmission-request-processing-rate"]
    )
    sources = core.registry.sources
    out.src_count = len(sources)
    for t in inst.topics:
        pc = out.pattern_configs.add()
        pc.topic_type = _TOPIC_TYPES.get(t.type.lower(), UMPMonMsg.Configs.TOPIC_TYPE_DIRECT)
        pc.pattern = t.pattern
    by_topic: dict[str, list[Any]] = {}
    for src in sources.values():
        by_topic.setdefault(src.topic, []).append(src)
    for topic in sorted(by_topic, key=topic_idx):
        tc = out.topic_configs.add()
        tc.dmon_topic_idx = topic_idx(topic)
        tc.topic_name = topic
        for src in by_topic[topic]:
            cfg = src.repository.config
            rc = tc.repo_configs.add()
            rc.src_regid = src.reg_id
            rc.dmon_topic_idx = tc.dmon_topic_idx
            rc.otid = make_otid(src.reply_to[0], src.reply_to[1], src.transport_idx).hex()
            rc.src_session_id = src.session_id
            rc.src_flightsz_bytes = src.flight_size_bytes
            rc.repo_sz_threshold = min(cfg.size_threshold, 0xFFFFFFFF)
            rc.repo_sz_limit = min(cfg.size_limit, 0xFFFFFFFF)
            rc.repo_disk_sz_limit = cfg.disk_file_size_limit
            rc.repo_disk_write_delay = round(cfg.write_delay * 1000)
            rc.repository_type = _REPO_TYPES.get(cfg.kind, _RepoConfig.REPO_TYPE_MEMORY)
            rc.allow_ack_on_reception = (
                _RepoConfig.ALLOW_ACK_ON_RECEPTION
                if src.ack_on_reception
                else _RepoConfig.DO_NOT_ALLOW_ACK_ON_RECEPTION
            )
            rc.age_threshold = round(cfg.age_threshold)
            rc.disk_max_write_aiocbs = 1
            rc.disk_max_read_aiocbs = cfg.max_read_jobs
            rc.disk_aio_buffer_len = min(cfg.async_buffer_length, 0xFFFFFFFF)
            for rcv in src.receivers.values():
                r = rc.rcv_configs.add()
                r.rcv_regid = rcv.reg_id
                r.src_regid = src.reg_id
                r.dmon_topic_idx = tc.dmon_topic_idx
                r.rcv_session_id = rcv.session_id
                r.transport_idx = rcv.transport_idx
                r.topic_idx = rcv.topic_idx
                r.ip_addr = ip_as_host_int(rcv.reply_to[0])
                r.port = rcv.reply_to[1]


def _repo_flags(src: Any, closing: bool) -> int:
    repo = src.repository
    cfg = repo.config
    flags = 0
    if repo.intentional_drops:
        flags |= REPO_INTENTIONAL_DROPS
    if repo.lead_sqn != NO_SQN:
        flags |= REPO_ISN_SET
    if cfg.verify_checksums:
        flags |= REPO_DISK_CKSUM
    if closing:
        flags |= REPO_SHUTTING_DOWN
    if src.rpp:
        flags |= REPO_RPP
        if cfg.write_delay > 0:
            flags |= REPO_DELAY_WRITE
    return flags


def _rcv_flags(rcv: Any) -> int:
    flags = RCV_FIRST_ACK if rcv.high_ack_sqn != NO_SQN else 0
    if rcv.rpp_mode:
        flags |= RCV_RPP
        if rcv.rpp_mode == 2:
            flags |= RCV_RPP_IS_NON_BLOCKING
    return flags


def stats_pb(
    view: StoreView,
    index: int,
    parts: Iterable[str],
    out: Any,
    *,
    wall_offset: float,
    now: float,
    started: float,
    sources: Sequence[Any] | None = None,
) -> None:
    """Fill ``UMPMonMsg.Stats`` ``out`` with the groups in ``parts`` (store, source, receiver,
    disk) for one Store; ``sources`` limits the repositories (None: all).  ``now`` is the
    core's clock and ``now + wall_offset`` wall-clock time."""
    core = view.core
    out.store_idx = index
    if core is None:
        return
    want = set(parts)
    if "store" in want:
        retx = core.retx
        out.ume_retx_req_rcv_count = retx.received & 0xFFFFFFFF
        out.ume_retx_req_serviced_count = retx.serviced & 0xFFFFFFFF
        out.ume_retx_req_drop_count = retx.dropped & 0xFFFFFFFF
        out.ume_retx_req_total_dropped = retx.dropped & 0xFFFFFFFF
        out.ume_retx_stat_interval = max(0, int(now - started))
        out.src_count = len(core.registry.sources)
    repo_parts = want & {"source", "receiver", "disk"}
    if not repo_parts:
        return
    chosen = sources if sources is not None else list(core.registry.sources.values())
    for src in chosen:
        repo = src.repository
        disk = repo.kind in ("disk", "reduced-fd")
        if repo_parts == {"disk"} and not disk:
            continue
        s = out.src_repo_stats.add()
        s.src_regid = src.reg_id
        s.topic_name = src.topic
        s.src_session_id = src.session_id
        if "source" in want:
            r = repo.stats()
            s.message_map_sz = r["frames_held"]
            s.memory_sz = r["mem_bytes"]
            s.rpp_memory_sz = r["mem_bytes"] if src.rpp else 0
            s.lead_sqn = r["lead_sqn"]
            s.sync_sqn = r["sync_sqn"]
            s.sync_complete_sqn = r["sync_complete_sqn"]
            s.trail_sqn = r["trail_sqn"]
            s.mem_trail_sqn = r["mem_trail_sqn"]
            s.contig_sqn = r["contig_sqn"]
            s.map_intentional_drops = r["intentional_drops"] & 0xFFFFFFFF
            s.uls = r["lost"]
            s.sz_limit_drops = r["size_limit_drops"]
            s.flags = _repo_flags(src, core.closing)
            s.rcvr_count = len(src.receivers)
            s.last_activity_timestamp_sec = int(src.clock.last_heard + wall_offset)
        if "disk" in want and disk:
            r = repo.stats()
            d = s.src_disk_stat
            d.max_offset = repo.config.disk_file_size_limit
            d.num_ios_pending = r["writes_pending"] + r["reads_pending"]
            d.num_read_ios_pending = r["reads_pending"]
            d.offset = r["disk_bytes"]
        if "receiver" in want:
            for rcv in src.receivers.values():
                rs = s.rcv_stats.add()
                rs.rcv_regid = rcv.reg_id
                rs.high_ack_sqn = rcv.high_ack_sqn
                rs.flags = _rcv_flags(rcv)
                rs.rcv_session_id = rcv.session_id
                rs.last_activity_timestamp_sec = int(rcv.clock.last_heard + wall_offset)


_EVENT_TYPES: dict[type, int] = {
    ev.TopicCreated: _Events.TOPIC_CREATE_EVENT,
    ev.SourceRecreated: _Events.SOURCE_RECREATED_EVENT,
    ev.SourceDeregistered: _Events.SOURCE_DEREGISTERED_EVENT,
    ev.SourceDeleted: _Events.SOURCE_DELETED_EVENT,
    ev.ReceiverRecreated: _Events.RECEIVER_RECREATED_EVENT,
    ev.ReceiverDeregistered: _Events.RECEIVER_DEREGISTERED_EVENT,
    ev.ReceiverDeleted: _Events.RECEIVER_DELETED_EVENT,
    ev.RppWriting: _Events.RPP_WRITING_EVENT,
    ev.RppRepoEmpty: _Events.RPP_REPO_EMPTY_EVENT,
    ev.SourceRegistered: _Events.SOURCE_REGISTERED_EVENT,
    ev.ReceiverRegistered: _Events.RECEIVER_REGISTERED_EVENT,
    ev.ProxySourceCreated: _Events.PROXY_SOURCE_CREATED_EVENT,
    ev.ProxySourceDeleted: _Events.PROXY_SOURCE_DELETED_EVENT,
}


class StoreCreated:
    """Marker queued at start (STORE_CREATED_EVENT) and at stop (``deleted``: STORE_DELETED)."""

    __slots__ = ("deleted",)

    def __init__(self, deleted: bool = False) -> None:
        self.deleted = deleted


def event_pb(e: Any, index: int, topic_idx: TopicIndex, when: float, out: Any) -> None:
    """Fill ``UMPMonMsg.Events.Event`` ``out`` from a store event (or a :class:`StoreCreated`)."""
    out.timestamp_sec = int(when)
    out.timestamp_usec = int((when % 1.0) * 1e6)
    out.store_idx = index
    if isinstance(e, StoreCreated):
        out.event_type = _Events.STORE_DELETED_EVENT if e.deleted else _Events.STORE_CREATED_EVENT
        return
    kind = _EVENT_TYPES[type(e)]
    if isinstance(e, ev.SourceRegistered) and e.old:
        kind = _Events.SOURCE_REREGISTERED_EVENT
    if isinstance(e, ev.ReceiverRegistered) and e.old:
        kind = _Events.RECEIVER_REREGISTERED_EVENT
    out.event_type = kind
    topic = getattr(e, "topic", "")
    out.topic_name = topic
    if topic:
        out.dmon_topic_idx = topic_idx(topic)
    if isinstance(
        e,
        ev.ReceiverRegistered | ev.ReceiverRecreated | ev.ReceiverDeleted | ev.ReceiverDeregistered,
    ):
        out.src_regid = e.src_reg_id
        out.rcv_regid = e.reg_id
    elif not isinstance(e, ev.TopicCreated):
        out.src_regid = e.reg_id
    if isinstance(e, ev.SourceRegistered | ev.SourceRecreated):
        out.lead_sqn = e.lead_sqn
    elif isinstance(e, ev.ReceiverRegistered):
        out.low_sqn = e.low_sqn
        out.high_sqn = e.high_sqn
    elif isinstance(e, ev.ReceiverRecreated):
        out.high_sqn = e.high_ack_sqn
    if isinstance(e, ev.SourceDeleted | ev.ReceiverDeleted | ev.ProxySourceDeleted):
        out.deletion_reason_code = int(e.reason)


class StoreStatsContent:
    """One Store's statistics content for :class:`~umcore.daemon.statspub.StatsPublisher`."""

    packet_type = PacketType.UMESTORE
    categories: tuple[str, ...] = CATEGORIES
    publish_at_start: tuple[str, ...] = ("config",)

    def __init__(
        self,
        view: StoreView,
        index: int,
        *,
        wall_offset: float,
        clock: Callable[[], float],
    ) -> None:
        self.view = view
        self.index = index
        self.wall_offset = wall_offset
        self.clock = clock
        self.started = clock()
        self.topic_idx = TopicIndex()
        self._last_configs: bytes | None = None
        #: Configs messages not published because nothing changed since the last one.
        self.configs_unchanged = 0

    def accepts(self, event: Any) -> bool:
        return isinstance(event, StoreCreated) or type(event) in _EVENT_TYPES

    def publish(self, pub: StatsPublisher[Any], category: str, snapshot: bool) -> None:
        if category == "events":
            self._publish_events(pub)
        elif category == "config":
            msgs = self._configs()
            blob = b"".join(m.SerializeToString(deterministic=True) for m in msgs)
            if not snapshot and blob == self._last_configs:
                self.configs_unchanged += 1
                return
            self._last_configs = blob
            for m in msgs:
                pub.send_pb(m)
        elif category == "store":
            msg = UMPMonMsg()
            self._stats(("store",), msg.stats)
            pub.send_pb(msg)
        elif category in ("source", "receiver", "disk"):
            core = self.view.core
            sources = list(core.registry.sources.values()) if core is not None else []
            if category == "disk":
                sources = [s for s in sources if s.repository.kind in ("disk", "reduced-fd")]
            for i in range(0, len(sources), MAX_REPOS_PER_MESSAGE):
                msg = UMPMonMsg()
                self._stats((category,), msg.stats, sources[i : i + MAX_REPOS_PER_MESSAGE])
                pub.send_pb(msg)
        # "memory": SmartHeap statistics have no Python counterpart; nothing is published

    def _configs(self) -> list[Any]:
        msg = UMPMonMsg()
        configs_pb(self.view, self.index, self.topic_idx, msg.configs)
        topics = list(msg.configs.topic_configs)
        if len(topics) <= MAX_REPOS_PER_MESSAGE:
            return [msg]
        out = []
        for i in range(0, len(topics), MAX_REPOS_PER_MESSAGE):
            part = UMPMonMsg()
            part.configs.CopyFrom(msg.configs)
            del part.configs.topic_configs[:]
            part.configs.topic_configs.extend(topics[i : i + MAX_REPOS_PER_MESSAGE])
            out.append(part)
        return out

    def _stats(self, parts: Iterable[str], out: Any, sources: Sequence[Any] | None = None) -> None:
        stats_pb(
            self.view,
            self.index,
            parts,
            out,
            wall_offset=self.wall_offset,
            now=self.clock(),
            started=self.started,
            sources=sources,
        )

    def _publish_events(self, pub: StatsPublisher[Any]) -> None:
        events = pub.take_events()
        for e in events:  # a deleted topic's number is forgotten after its last use
            if isinstance(e, ev.TopicDeleted):
                self.topic_idx.forget(e.topic)
        for i in range(0, len(events), MAX_EVENTS_PER_MESSAGE):
            msg = UMPMonMsg()
            when = pub.wall_clock()
            for e in events[i : i + MAX_EVENTS_PER_MESSAGE]:
                if isinstance(e, ev.TopicDeleted):
                    continue
                event_pb(e, self.index, self.topic_idx, when, msg.events.events.add())
            if msg.events.events:
                pub.send_pb(msg)


# --------------------------------------------------------------------------------- runner


class _Target:
    """One Store as daemon control acts on it (:class:`daemons.umestored.control.ControlTarget`)."""

    def __init__(self, monitor: StoreMonitor, view: Any, publisher: StatsPublisher[Any]) -> None:
        self.monitor = monitor
        self.view = view
        self.publisher = publisher

    @property
    def name(self) -> str:
        return str(self.view.name)

    def listens_on(self, address: tuple[str, int]) -> bool:
        ip, port = address
        own_ip, own_port = self.view.address
        bind_ip = self.view.plan.bind_ip
        return port == own_port and (ip in (own_ip, bind_ip) or bind_ip == "0.0.0.0")

    def snapshot(self, group: str) -> None:
        self.publisher.scheduler.request_snapshot([group])

    def set_interval(self, group: str, ms: int) -> None:
        now = self.monitor.loop_time()
        self.publisher.scheduler.set_interval(group, ms, now)
        if group == "store":  # the events go with the store group
            self.publisher.scheduler.set_interval("events", ms, now)

    def mark(self, src_reg_id: int, sqn: int) -> bool:
        core = self.view.core
        ok = core is not None and core.mark_invalid(src_reg_id, sqn)
        self.view.flush()
        return bool(ok)

    def deregister(self, src_reg_id: int, rcv_reg_id: int) -> bool:
        core = self.view.core
        ok = core is not None and core.deregister_receiver(
            src_reg_id, rcv_reg_id, self.monitor.loop_time()
        )
        self.view.flush()
        return bool(ok)


class _DaemonControlOnly:
    """The per-Store publishers' control responder, never asked: control requests reach the
    daemon's :class:`~daemons.umestored.control.StoreControl` (one for every Store)."""

    def handle(self, payload: bytes | bytearray | memoryview) -> ControlReply:
        return ControlReply("ERROR: requests go to the daemon's control", False)


_REQUESTS_GO_TO_THE_DAEMON = _DaemonControlOnly()


class StoreMonitor:
    """``<daemon-monitor>`` running: the monitoring context and statistics source (or
    ``--monitor-file``), a publisher per Store, and daemon control.

    :meth:`open` (None without ``<daemon-monitor>`` or when the sink cannot open: logged, the
    Stores run without statistics); :meth:`attach` each Store before it starts (so its first
    events are queued); :meth:`started` once it listens (its configuration is then known);
    :meth:`close` at stop (STORE_DELETED is published first)."""

    def __init__(
        self,
        daemon: StoreDaemon,
        sink: UMSink | FileSink,
        *,
        wall_offset: float,
        monitor_attributes: Any,
    ) -> None:
        self.daemon = daemon
        self.sink = sink
        self.loop = asyncio.get_running_loop()
        self.wall_offset = wall_offset
        self.monitor_attributes = monitor_attributes
        self.services: list[StatsService[Any]] = []
        self.publishers: dict[str, StatsPublisher[Any]] = {}
        self.contents: dict[str, StoreStatsContent] = {}
        self.targets: list[_Target] = []
        self.control = StoreControl(
            pyum_version,
            lambda: self.targets,
            allow_snapshot=daemon.remote_snapshot_request,
            allow_config=daemon.remote_config_changes_request,
            on_done=self.rearm,
        )

    def loop_time(self) -> float:
        return self.loop.time()

    @classmethod
    async def open(
        cls, daemon: StoreDaemon, *, wall_offset: float, monitor_file: str | None = None
    ) -> StoreMonitor | None:
        if not daemon.daemon_monitor:
            return None
        attrs = monitoring_context_attributes(daemon, log.warning)
        sink: UMSink | FileSink
        try:
            if monitor_file:
                sink = FileSink(monitor_file)
            else:
                um = UMSink(log)
                settings = MonitorSettings(
                    daemon.daemon_monitor_topic, format="pb", context_attributes=attrs
                )
                try:
                    await um.open(settings)
                except BaseException:
                    await um.close()
                    raise
                sink = um
        except Exception as exc:  # the Stores do their work even without statistics
            log.error("cannot start the daemon monitor: %s", exc)
            return None
        mon = cls(daemon, sink, wall_offset=wall_offset, monitor_attributes=attrs)
        if isinstance(sink, UMSink):
            sink.serve_control(mon.control, mon.loop_time, mon.rearm)
        log.info(
            "publishing UMP statistics on topic %s (pb)%s",
            daemon.daemon_monitor_topic,
            f", control requests on {sink.ctx.request_address}"
            if isinstance(sink, UMSink) and sink.ctx.request_address is not None
            else "",
        )
        return mon

    def attach(self, view: Any) -> None:
        """A Store about to start: its publisher, STORE_CREATED queued, its events hooked."""
        plan = view.plan
        settings = monitor_settings(self.daemon, plan.instance, self.monitor_attributes)
        content = StoreStatsContent(
            view, plan.index, wall_offset=self.wall_offset, clock=self.loop.time
        )
        pub: StatsPublisher[Any] = StatsPublisher(
            settings,
            content,
            self.sink,
            _REQUESTS_GO_TO_THE_DAEMON,
            now=self.loop.time(),
            wall_clock=time.time,
            sender_ipv4=sender_address(plan.bind_ip),
            pid=os.getpid(),
        )
        self.publishers[view.name] = pub
        self.contents[view.name] = content
        self.targets.append(_Target(self, view, pub))
        pub.receive_events([StoreCreated()])
        view.on_events = pub.receive_events

    def started(self, view: Any) -> None:
        """The Store listens: its schedule runs (configuration at once)."""
        pub = self.publishers[view.name]
        pub.scheduler.start(self.loop.time())
        self.services.append(StatsService(pub, self.sink, self.loop))

    def rearm(self) -> None:
        for s in self.services:
            s.rearm()

    @property
    def published(self) -> int:
        return sum(p.published for p in self.publishers.values())

    @property
    def events_dropped(self) -> int:
        return sum(p.events_dropped for p in self.publishers.values())

    async def close(self) -> None:
        for name, pub in self.publishers.items():
            pub.receive_events([StoreCreated(deleted=True)])
            pub.publish("events")
            log.debug("store %s: %d statistics messages published", name, pub.published)
        for s in self.services:
            s.timer.cancel()
        await self.sink.close()


# ----------------------------------------------------------------------------- Prometheus


class MonitorCollector:
    """Prometheus: the daemon monitor's own counters -- control requests by outcome and
    accepted ones by request, statistics messages published, events not queued (full),
    messages the statistics source refused."""

    def __init__(self, monitor: StoreMonitor) -> None:
        self.monitor = monitor

    def describe(self) -> Iterator[Metric]:
        return iter(())

    def collect(self) -> Iterator[Metric]:
        mon = self.monitor
        ctl = mon.control
        outcome = CounterMetricFamily(
            "pyum_umestored_control_requests",
            "Daemon control requests by outcome (ok, refused by configuration, malformed, "
            "failed: no such store, source or receiver)",
            labels=["outcome"],
        )
        for name, value in ctl.counts.items():
            outcome.add_metric([name], value)
        yield outcome
        accepted = CounterMetricFamily(
            "pyum_umestored_control_accepted",
            "Daemon control requests carried out, by request",
            labels=["request"],
        )
        for name, value in ctl.accepted.items():
            accepted.add_metric([name], value)
        yield accepted
        yield CounterMetricFamily(
            "pyum_umestored_monitor_messages_published",
            "UMPMonMsg statistics messages published",
            value=mon.published,
        )
        yield CounterMetricFamily(
            "pyum_umestored_monitor_events_dropped",
            "Statistics events not queued (queue full)",
            value=mon.events_dropped,
        )
        refused = mon.sink.dropped if isinstance(mon.sink, UMSink) else 0
        yield CounterMetricFamily(
            "pyum_umestored_monitor_messages_refused",
            "Statistics messages the statistics source refused (would block)",
            value=refused,
        )


def ump_collectors(views: Callable[[], Sequence[Any]]) -> list[StatsCollector]:
    """Prometheus collectors of the ``store``, ``source`` and ``receiver`` figures of every
    Store in ``views()`` (:class:`daemons.umestored.app.StoreRuntime`: ``plan``,
    ``wall_offset``, ``loop``, ``started_at``); the function that fills the published messages
    fills these."""
    stats = UMPMonMsg.Stats

    def fill(view: Any, parts: tuple[str, ...]) -> Any:
        msg = stats()
        stats_pb(
            view,
            view.plan.index,
            parts,
            msg,
            wall_offset=view.wall_offset,
            now=view.loop.time(),
            started=view.started_at,
        )
        return msg

    def read_store() -> Iterator[tuple[Any, Mapping[str, str]]]:
        for v in views():
            if v.core is not None:
                yield fill(v, ("store",)), {"store": v.name}

    def read_sources() -> Iterator[tuple[Any, Mapping[str, str]]]:
        for v in views():
            if v.core is None:
                continue
            for s in fill(v, ("source",)).src_repo_stats:
                yield s, {"store": v.name, "src_regid": str(s.src_regid), "topic": s.topic_name}

    def read_receivers() -> Iterator[tuple[Any, Mapping[str, str]]]:
        for v in views():
            if v.core is None:
                continue
            for s in fill(v, ("receiver",)).src_repo_stats:
                for r in s.rcv_stats:
                    labels = {
                        "store": v.name,
                        "src_regid": str(s.src_regid),
                        "rcv_regid": str(r.rcv_regid),
                    }
                    yield r, labels

    sqns = {
        "lead_sqn",
        "sync_sqn",
        "sync_complete_sqn",
        "trail_sqn",
        "mem_trail_sqn",
        "contig_sqn",
        "high_ulb_sqn",
        "high_ack_sqn",
    }
    levels = sqns | {
        "message_map_sz",
        "memory_sz",
        "rpp_memory_sz",
        "rcvr_count",
        "src_count",
        "ume_retx_stat_interval",
        "last_activity_timestamp_sec",
    }
    ids = {"store_idx", "src_regid", "rcv_regid", "src_session_id", "rcv_session_id", "flags"}
    return [
        StatsCollector(
            "pyum",
            "ump_store",
            stats.DESCRIPTOR,  # type: ignore[arg-type]
            read_store,
            labelnames=("store",),
            max_series=MAX_UMP_SERIES,
            gauges=levels,
            exclude=ids,
            scales={"ume_retx_stat_interval": 1.0},
        ),
        StatsCollector(
            "pyum",
            "ump_source",
            stats.SrcRepoStat.DESCRIPTOR,  # type: ignore[arg-type]
            read_sources,
            labelnames=("store", "src_regid", "topic"),
            max_series=MAX_UMP_SERIES,
            gauges=levels,
            exclude=ids,
        ),
        StatsCollector(
            "pyum",
            "ump_receiver",
            stats.SrcRepoStat.RcvStat.DESCRIPTOR,  # type: ignore[arg-type]
            read_receivers,
            labelnames=("store", "src_regid", "rcv_regid"),
            max_series=MAX_UMP_SERIES,
            gauges=levels,
            exclude=ids,
        ),
    ]
