"""umestored's UMP statistics content (sans-IO, against a real StoreCore) and its Prometheus
twin: configs at start and on change, stats per group, events in order with UM's kinds and
reasons, the same figures on /metrics (promtool-clean)."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace
from typing import Any

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families

from daemons.umestored.monitor import (
    MAX_UMP_SERIES,
    StoreStatsContent,
    ip_as_host_int,
    monitor_settings,
    ump_collectors,
)
from tests.conftest import promtool_check
from tests.store.corekit import STORE_ADDR, Receiver, Rig, Source, make_rig, topic_config
from umcore.config.store import StoreDaemon
from umcore.daemon.statspub import StatsPublisher
from umcore.monitor.attributes import decode_stats
from umcore.monitor.control import ControlHandler
from umcore.monitor.framing import PacketType
from umcore.monitor.pb import ump_mon_pb2
from umcore.store import events as ev

UMP = ump_mon_pb2.UMPMonMsg
EV = UMP.Events


class View(SimpleNamespace):
    """What StoreRuntime offers the statistics, over a corekit rig."""


def view_of(rig: Rig) -> View:
    return View(
        name="store1",
        core=rig.core,
        address=STORE_ADDR,
        plan=SimpleNamespace(index=3, bind_ip=STORE_ADDR[0], instance=rig.core.instance),
        wall_offset=1_700_000_000.0,
        loop=SimpleNamespace(time=lambda: rig.now),
        started_at=rig.now,
    )


class Harness:
    def __init__(self, tmp: Path, **groups: int) -> None:
        self.rig = make_rig(
            tmp, [topic_config("t", repository_type="disk"), topic_config("m.*", "PCRE")]
        )
        self.view = view_of(self.rig)
        daemon = StoreDaemon(daemon_monitor=True, daemon_monitor_intervals=dict(groups))
        self.settings = monitor_settings(daemon, self.rig.core.instance)
        self.content = StoreStatsContent(
            self.view, 3, wall_offset=self.view.wall_offset, clock=lambda: self.rig.now
        )
        self.out: list[bytes] = []
        self.pub: StatsPublisher[Any] = StatsPublisher(
            self.settings,
            self.content,
            self.out.append,
            ControlHandler("x", allow_snapshot=False, allow_config=False),
            now=self.rig.now,
            wall_clock=lambda: 1_700_000_123.5,
            sender_ipv4="10.0.0.100",
        )
        self.seen = 0

    def events(self) -> None:
        """What the daemon's flush does: the core's events to the publisher, published."""
        self.rig.pump()
        self.pub.receive_events(self.rig.events[self.seen :])
        self.seen = len(self.rig.events)
        self.pub.publish("events")

    def take(self) -> list[Any]:
        msgs = []
        for raw in self.out:
            got = decode_stats(raw)
            assert got.packet_type == PacketType.UMESTORE
            assert got.attributes.application_id == "store1"
            msgs.append(got.message)
        self.out.clear()
        return msgs


def test_settings_map_groups_seconds_and_the_store_override(tmp_path: Path) -> None:
    h = Harness(tmp_path)
    daemon = StoreDaemon(
        daemon_monitor=True,
        daemon_monitor_intervals={"default": 5, "config": 60},
        remote_snapshot_request=True,
    )
    inst = h.rig.core.instance
    inst.publishing_interval = {"source": 1}
    s = monitor_settings(daemon, inst)
    assert (s.topic, s.format, s.default_ms) == ("umestore.monitor", "pb", 5000)
    assert s.intervals == {"config": 60000, "source": 1000}
    assert s.application_id == "store1" and s.allow_snapshot and not s.allow_config
    assert monitor_settings(StoreDaemon(), inst).topic is None  # no <daemon-monitor>: off


def test_configs_at_start_and_only_on_change(tmp_path: Path) -> None:
    h = Harness(tmp_path, default=5)
    h.pub.handle_timer(h.rig.now)  # start: configs
    (first,) = h.take()
    assert first.HasField("configs")
    assert not first.HasField("stats") and not first.HasField("events")
    c = first.configs
    assert (c.store_name, c.store_idx, c.port) == ("store1", 3, STORE_ADDR[1])
    assert c.ip_addr == ip_as_host_int(STORE_ADDR[0])
    assert c.max_retransmission_processing_rate == 262144
    assert [(p.pattern, p.topic_type) for p in c.pattern_configs] == [
        ("t", UMP.Configs.TOPIC_TYPE_DIRECT),
        ("m.*", UMP.Configs.TOPIC_TYPE_PCRE),
    ]
    assert not c.topic_configs
    h.pub.publish("config")
    assert h.take() == []  # unchanged: not republished
    assert h.content.configs_unchanged == 1
    src = Source(h.rig, "t")
    src.register()
    h.pub.publish("config")
    (second,) = h.take()
    (tc,) = second.configs.topic_configs
    (rc,) = tc.repo_configs
    assert tc.topic_name == "t" and rc.src_regid == src.reg_id
    assert rc.repository_type == UMP.Configs.TopicConfig.RepoConfig.REPO_TYPE_DISK
    assert not rc.rcv_configs
    rcv = Receiver(h.rig, src)
    rcv.register()
    h.pub.publish("config")
    (third,) = h.take()
    (r,) = third.configs.topic_configs[0].repo_configs[0].rcv_configs
    assert (r.rcv_regid, r.src_regid, r.port) == (rcv.reg_id, src.reg_id, rcv.reply_to[1])
    h.pub.publish("config", snapshot=True)  # a snapshot publishes regardless
    assert len(h.take()) == 1


def test_stats_groups_track_lead_and_acks(tmp_path: Path) -> None:
    h = Harness(tmp_path, default=5)
    src = Source(h.rig, "t")
    src.register()
    rcv = Receiver(h.rig, src)
    rcv.register()
    src.send(*range(7))
    rcv.ack(4)
    rcv.request(1, 2)
    h.rig.advance(6.0)
    for group in ("store", "source", "receiver", "disk", "memory"):
        h.pub.publish(group)
    store, source, receiver, disk = h.take()  # memory: nothing
    assert store.stats.store_idx == 3 and store.stats.src_count == 1
    assert store.stats.ume_retx_req_rcv_count == 2
    assert store.stats.ume_retx_req_serviced_count == 2
    assert store.stats.ume_retx_stat_interval == 6
    (s,) = source.stats.src_repo_stats
    assert (s.src_regid, s.topic_name, s.lead_sqn, s.rcvr_count) == (src.reg_id, "t", 6, 1)
    assert s.flags & 0x2  # ISN_SET
    assert not s.rcv_stats
    (rs,) = receiver.stats.src_repo_stats
    (r,) = rs.rcv_stats
    assert (r.rcv_regid, r.high_ack_sqn, r.flags & 0x1) == (rcv.reg_id, 4, 1)
    assert rs.lead_sqn == 0  # the receiver group names the repository only
    (ds,) = disk.stats.src_repo_stats
    assert ds.HasField("src_disk_stat") and ds.src_disk_stat.offset > 0
    src.send(7, 8)
    h.pub.publish("source")
    (again,) = h.take()
    assert again.stats.src_repo_stats[0].lead_sqn == 8


def test_events_in_order_with_um_kinds_and_reasons(tmp_path: Path) -> None:
    h = Harness(tmp_path, default=5)
    from daemons.umestored.monitor import StoreCreated

    h.pub.receive_events([StoreCreated()])
    h.pub.publish("events")
    src = Source(h.rig, "t")
    src.register()
    h.events()
    src.send(*range(7))
    rcv = Receiver(h.rig, src)
    rcv.register()
    h.events()
    h.rig.core.deregister_receiver(src.reg_id, rcv.reg_id, h.rig.now)
    h.events()
    kinds = [
        (e.event_type, e.src_regid, e.rcv_regid, e.lead_sqn, e.high_sqn, e.deletion_reason_code)
        for m in h.take()
        for e in m.events.events
    ]
    assert kinds == [
        (EV.STORE_CREATED_EVENT, 0, 0, 0, 0, 0),
        (EV.TOPIC_CREATE_EVENT, 0, 0, 0, 0, 0),
        (EV.SOURCE_REGISTERED_EVENT, src.reg_id, 0, 0xFFFFFFFF, 0, 0),
        (EV.RECEIVER_REGISTERED_EVENT, src.reg_id, rcv.reg_id, 0, 6, 0),
        (EV.RECEIVER_DELETED_EVENT, src.reg_id, rcv.reg_id, 0, 0, EV.DELETED),
    ]
    # a plain log line is no statistics event
    assert not h.content.accepts(ev.StoreEvent(20, "note"))


def test_prometheus_exposes_the_same_figures_and_passes_promtool(
    tmp_path: Path, promtool: str
) -> None:
    h = Harness(tmp_path)
    src = Source(h.rig, "t")
    src.register()
    rcv = Receiver(h.rig, src)
    rcv.register()
    src.send(*range(10))
    rcv.ack(9)
    registry = CollectorRegistry(auto_describe=True)
    collectors = ump_collectors(lambda: [h.view])
    assert all(c.max_series == MAX_UMP_SERIES for c in collectors)
    for c in collectors:
        registry.register(c)
    body = generate_latest(registry)
    samples = {
        (s.name, frozenset(s.labels.items())): s.value
        for fam in text_string_to_metric_families(body.decode())
        for s in fam.samples
    }
    repo = frozenset({("store", "store1"), ("src_regid", str(src.reg_id)), ("topic", "t")})
    assert samples[("pyum_ump_source_lead_sqn", repo)] == 9
    rl = frozenset(
        {("store", "store1"), ("src_regid", str(src.reg_id)), ("rcv_regid", str(rcv.reg_id))}
    )
    assert samples[("pyum_ump_receiver_high_ack_sqn", rl)] == 9
    assert samples[("pyum_ump_store_src", frozenset({("store", "store1")}))] == 1
    h.pub.publish("source")
    (pb,) = h.take()
    assert pb.stats.src_repo_stats[0].lead_sqn == 9  # the same figure as published
    result = promtool_check(promtool, body)
    assert result.returncode == 0, (result.stdout + result.stderr).decode()
