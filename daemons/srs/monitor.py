"""SRS daemon statistics: what the SRS publishes under ``<daemon-monitor>``.

Theory of operation
-------------------
The machinery — scheduling per category, pb/json framing with the attribute block, the bounded
event queue, control requests, the UM source on the ``<daemon-monitor topic>`` and
``--monitor-file`` — is the daemons' shared publisher (:mod:`umcore.daemon.statspub`).  This
module is the SRS's content on top of it: :class:`SRSStats` reads the
:class:`~umcore.srs.server.SRSServer` core's counters, the effective
:class:`~umcore.config.srs.SRSConfig` and the core's connection events;
:func:`monitor_settings` and :func:`control_handler` turn the configuration into the shared
pieces' settings.

- **Categories**: the seven of :class:`~umcore.monitor.categories.Category` (seed 1.4:
  ``<default>`` = 0 means off; CONFIG_OPTS and INTERNAL_CONFIG_OPTS are also published at
  start).
- **pb** (``monitor-format pb``): each message is an ``SRSMonMsg`` with ``attributes`` and
  exactly one of ``configs`` / ``stats`` / ``events``, framed as an lbmmon packet of type 10
  (SRS).  Full values every interval; SRS_ERROR_STATS is skipped while every error counter is 0
  (OBS); the internal configuration is its own message (trap 18).  ``sender_ipv4_address`` is
  the SRS interface (trap 19).
- **json** (deprecated default): the envelopes of :mod:`umcore.monitor.jsonfmt`, periodic
  updates carrying only changed statistics; the UM message is the JSON text itself [I].
- **Per client**: UM_CLIENT_STATS / UM_CLIENT_ERROR_STATS, one message per connected client.
- **CONNECTION_EVENTS**: only with ``publish-connection-events allow="true"``; the connection
  and record events are queued by the shared publisher and published at the category's
  interval, one message each.
- **Control requests**: REPORT_SRS_VERSION (answered ``SRS Version <version>``),
  REPORT_MONITOR_INFO and SET_PUBLISHING_INTERVAL, by
  :class:`~umcore.monitor.control.ControlHandler` with the configuration's ``allow`` switches.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from umcore import __version__ as pyum_version
from umcore.config.srs import PUBLISH_CATEGORIES, SRSConfig
from umcore.daemon.statspub import MonitorSettings, StatsPublisher, sender_address
from umcore.monitor import jsonfmt
from umcore.monitor.categories import ALL_CATEGORIES, Category
from umcore.monitor.control import ControlHandler
from umcore.monitor.framing import PacketType
from umcore.monitor.pb import srs_mon_pb2
from umcore.monitor.scheduler import DEFAULT_PUBLISH_AT_START
from umcore.srs.server import Client, SRSEvent, SRSServer
from umcore.srs.stats import fill_pb

__all__ = [
    "SRSPublisher",
    "SRSStats",
    "configs_pb",
    "control_handler",
    "monitor_settings",
    "srs_publisher",
]

SRSPublisher = StatsPublisher[SRSEvent]

SRSMonMsg = srs_mon_pb2.SRSMonMsg

_EVENT_TYPES = frozenset(
    {"UM_CLIENT_CONNECT", "UM_CLIENT_DISCONNECT", "SIR", "SDR", "SLR", "RIR", "RDR", "WIR", "WDR"}
    | {"RTIR", "CNIR", "CNQR"}
)


def configs_pb(cfg: SRSConfig, out: Any = None) -> Any:
    """``SRSMonMsg.Configs`` of an effective configuration (every value a string)."""
    c = out if out is not None else SRSMonMsg.Configs()

    def tf(flag: bool) -> str:
        return "true" if flag else "false"

    c.version = cfg.version
    c.daemon_log = cfg.log.file
    c.daemon_log_type = cfg.log.type
    c.daemon_log_frequency = cfg.log.frequency
    c.daemon_log_size = str(cfg.log.size)
    c.daemon_log_max_history = str(cfg.log.max_history)
    c.daemon_log_total_size_cap = str(cfg.log.total_size_cap)
    c.daemon_log_compression = cfg.log.compression
    c.daemon_pid_file = cfg.pid_file or ""
    c.srs_interface = cfg.interface
    c.srs_port = str(cfg.port)
    c.srs_state_lifetime = "" if cfg.state_lifetime is None else str(cfg.state_lifetime)
    c.srs_source_state_lifetime = str(cfg.source_state_lifetime)
    c.srs_interest_state_lifetime = str(cfg.interest_state_lifetime)
    c.srs_route_state_lifetime = str(cfg.route_state_lifetime)
    c.srs_context_name_state_lifetime = str(cfg.context_name_state_lifetime)
    c.srs_source_leave_backoff = str(cfg.source_leave_backoff)
    c.srs_clientactor_request_stream_max_msg_count = str(cfg.request_stream_max_msg_count)
    c.srs_clientactor_record_queue_service_interval = str(cfg.record_queue_service_interval)
    c.srs_clientactor_batch_frame_max_record_count = str(cfg.batch_frame_max_record_count)
    c.srs_clientactor_batch_frame_max_datagram_size = str(cfg.batch_frame_max_datagram_size)
    c.srs_application_id = cfg.application_id or ""
    c.debug_monitor_interface = cfg.debug_monitor_interface
    c.debug_monitor_port = str(cfg.debug_monitor_port)
    c.debug_monitor_enabled = tf(cfg.debug_monitor_enabled)
    c.debug_monitor_ping_interval = str(cfg.ping_interval)
    c.daemon_monitor_topic = cfg.monitor_topic or ""
    c.daemon_monitor_ping_interval = str(cfg.ping_interval)
    c.daemon_monitor_publishing_interval_default = str(cfg.publishing_default)
    for cat in PUBLISH_CATEGORIES:
        setattr(
            c,
            "daemon_monitor_publishing_interval_" + cat.replace("-", "_"),
            str(cfg.publishing[cat]),
        )
    c.daemon_monitor_publish_connection_events_allow = tf(cfg.publish_connection_events)
    c.daemon_monitor_remote_snapshot_request_allow = tf(cfg.remote_snapshot_request)
    c.daemon_monitor_remote_config_changes_request_allow = tf(cfg.remote_config_changes_request)
    c.daemon_monitor_monitor_format = cfg.monitor_format
    for s in sorted(cfg.lbm_attributes, key=lambda s: (s.scope, s.name)):
        a = c.daemon_monitor_lbm_attributes.add()
        a.scope, a.name, a.value = s.scope, s.name, s.text
    return c


def _internal_pb(cfg: SRSConfig, out: Any) -> None:
    out.srs_otidmap_shards = str(cfg.otidmap_shards)
    out.srs_topicmap_shards = str(cfg.topicmap_shards)
    out.srs_routemap_shards = str(cfg.routemap_shards)
    out.srs_namemap_shards = str(cfg.namemap_shards)


def _client_info(client: Client, out: Any) -> None:
    out.ip = client.addr
    out.port = client.port
    out.session_id = f"0x{client.session_id:08x}"


def monitor_settings(config: SRSConfig) -> MonitorSettings:
    """The shared publisher's settings from the SRS's ``<daemon-monitor>``."""
    return MonitorSettings(
        config.monitor_topic,
        format=config.monitor_format,
        default_ms=config.publishing_default,
        intervals={Category.from_element(cat).value: ms for cat, ms in config.publishing.items()},
        publish_events=config.publish_connection_events,
        allow_snapshot=config.remote_snapshot_request,
        allow_config=config.remote_config_changes_request,
        application_id=config.application_id or "",
        context_attributes=config.monitor_attributes("context"),
    )


def control_handler(config: SRSConfig) -> ControlHandler:
    """The SRS's control requests: REPORT_SRS_VERSION answers pyum's version."""
    return ControlHandler(
        pyum_version,
        allow_snapshot=config.remote_snapshot_request,
        allow_config=config.remote_config_changes_request,
    )


class SRSStats:
    """The SRS's statistics content for :class:`~umcore.daemon.statspub.StatsPublisher`."""

    packet_type = PacketType.SRS
    categories: tuple[str, ...] = tuple(c.value for c in ALL_CATEGORIES)
    publish_at_start: tuple[str, ...] = DEFAULT_PUBLISH_AT_START

    def __init__(self, config: SRSConfig, core: SRSServer) -> None:
        self.config = config
        self.core = core

    def accepts(self, event: SRSEvent) -> bool:
        return event.kind in _EVENT_TYPES

    def publish(self, pub: SRSPublisher, category: str, snapshot: bool) -> None:
        cat = Category(category)
        if cat is Category.CONNECTION_EVENTS:
            self._publish_events(pub)
        elif cat is Category.CONFIG_OPTS:
            if pub.pb:
                msg = SRSMonMsg()
                configs_pb(self.config, msg.configs)
                pub.send_pb(msg)
            else:
                opts = jsonfmt.config_from_pb(configs_pb(self.config))
                pub.send_json(jsonfmt.config_message(cat, opts))
        elif cat is Category.INTERNAL_CONFIG_OPTS:
            msg = SRSMonMsg()
            _internal_pb(self.config, msg.configs.internal)
            if pub.pb:
                pub.send_pb(msg)
            else:
                opts = jsonfmt.internal_config_from_pb(msg.configs)
                pub.send_json(jsonfmt.config_message(cat, opts))
        elif cat is Category.SRS_STATS:
            self._publish_stats(pub, cat, self.core.snapshot_stats(), "srs", snapshot)
        elif cat is Category.SRS_ERROR_STATS:
            errors = self.core.errors
            if pub.pb and not snapshot and not any(errors.as_dict().values()):
                return  # OBS: never published while every error counter is 0
            self._publish_stats(pub, cat, errors, "srs_error", snapshot)
        elif cat in (Category.UM_CLIENT_STATS, Category.UM_CLIENT_ERROR_STATS):
            for client in self.core.connected_clients():
                counters = client.stats if cat is Category.UM_CLIENT_STATS else client.err
                field = "um_client" if cat is Category.UM_CLIENT_STATS else "um_client_error"
                self._publish_stats(pub, cat, counters, field, snapshot, client)

    def _publish_stats(
        self,
        pub: SRSPublisher,
        category: Category,
        counters: Any,
        field: str,
        snapshot: bool,
        client: Client | None = None,
    ) -> None:
        msg = SRSMonMsg()
        part = getattr(msg.stats, field)
        fill_pb(counters, part)
        if client is not None:
            _client_info(client, part.um_client_info)
        if pub.pb:
            pub.send_pb(msg)
            return
        stats = jsonfmt.stats_from_pb(category, part)
        reg = (
            jsonfmt.Registration(client.addr, client.port, client.session_id)
            if client is not None
            else None
        )
        items = pub.changes.filter(category, stats, reg.key() if reg else None, snapshot=snapshot)
        if items is not None:
            pub.send_json(jsonfmt.stats_message(category, items, reg))

    def _publish_events(self, pub: SRSPublisher) -> None:
        for ev in pub.take_events():
            c = ev.client
            when = int(pub.wall_clock())
            if pub.pb:
                msg = SRSMonMsg()
                e = msg.events
                _client_info(c, e.um_client_info)
                rec: Any = ev.record
                lst: Any
                if ev.kind == "UM_CLIENT_CONNECT":
                    e.um_client_connect.timestamp = when
                elif ev.kind == "UM_CLIENT_DISCONNECT":
                    e.um_client_disconnect.timestamp = when
                elif ev.kind in ("SIR", "SDR", "SLR"):
                    lst = {
                        "SIR": e.source_info_records,
                        "SDR": e.source_delete_records,
                        "SLR": e.source_leave_records,
                    }[ev.kind]
                    info = lst.add().source_info
                    info.topic = rec.topic
                    info.source = getattr(rec, "source", "")
                    info.timestamp = when
                elif ev.kind in ("RIR", "RDR"):
                    lst = e.receiver_info_records if ev.kind == "RIR" else e.receiver_delete_records
                    r = lst.add().receiver_info
                    r.topic, r.domain_id, r.timestamp = rec.topic, rec.domain_id, when
                elif ev.kind in ("WIR", "WDR"):
                    lst = (
                        e.wildcard_receiver_info_records
                        if ev.kind == "WIR"
                        else e.wildcard_receiver_delete_records
                    )
                    w = lst.add().wildcard_receiver_info
                    w.pattern, w.domain_id, w.timestamp = rec.pattern, rec.domain_id, when
                else:
                    continue  # route / context-name records: not in this proto's events
                pub.send_pb(msg)
            else:
                if ev.kind not in jsonfmt.CONNECTION_EVENT_TYPES:
                    continue  # JSON has connect, disconnect, SIR and SDR only (trap 14)
                reg = jsonfmt.Registration(c.addr, c.port, c.session_id)
                topic = getattr(ev.record, "topic", None)
                source = getattr(ev.record, "source", "")
                if ev.kind == "SDR":
                    source = ""  # an SDR carries no source string
                pub.send_json(
                    jsonfmt.connection_event(
                        ev.kind, reg, pub.wall_clock(), topic=topic, source=source
                    )
                )


def srs_publisher(
    config: SRSConfig,
    core: SRSServer,
    sink: Callable[[bytes], None],
    *,
    now: float,
    wall_clock: Callable[[], float],
    pid: int = 0,
    sender_ipv4: str | None = None,
) -> SRSPublisher:
    """A publisher of this SRS's statistics into ``sink`` (without the loop: tests, tools)."""
    return StatsPublisher(
        monitor_settings(config),
        SRSStats(config, core),
        sink,
        control_handler(config),
        now=now,
        wall_clock=wall_clock,
        sender_ipv4=sender_ipv4 or sender_address(config.interface),
        pid=pid,
    )
