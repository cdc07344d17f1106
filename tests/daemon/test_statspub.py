"""The shared statistics publisher on its own: a fake daemon's categories published at their
intervals (fake clock), the bounded event queue, control requests, pb/json framing, and the
service on a loop with the --monitor-file sink."""

from __future__ import annotations

import asyncio
import json
import logging
import struct
from pathlib import Path
from typing import Any

import pytest
from google.protobuf import wrappers_pb2

from umcore.daemon.statspub import MonitorSettings, StatsPublisher, StatsService
from umcore.monitor.attributes import MonAttributes
from umcore.monitor.categories import Category
from umcore.monitor.control import Command, ControlHandler, build_request
from umcore.monitor.framing import PacketType, decode_packet

TOPIC = "/29west/statistics"
LOG = logging.getLogger("test.statspub")


class FakeDaemon:
    """Two categories: HEALTH (a counter) and CONFIG_OPTS (at start), plus queued events."""

    packet_type = PacketType.UMESTORE
    categories = ("HEALTH", "CONFIG_OPTS")
    publish_at_start = ("CONFIG_OPTS",)

    def __init__(self) -> None:
        self.counter = 0
        self.published: list[tuple[str, bool, list[str]]] = []
        self.seen: asyncio.Future[None] | None = None

    def accepts(self, event: str) -> bool:
        return not event.startswith("ignored")

    def publish(self, pub: StatsPublisher[str], category: str, snapshot: bool) -> None:
        events = pub.take_events()
        self.published.append((category, snapshot, events))
        if pub.pb:
            pub.send_pb(wrappers_pb2.StringValue(value=f"{category}={self.counter}"))
        else:
            pub.send_json({"category": category, "counter": self.counter, "events": events})
        if self.seen is not None and not self.seen.done():
            self.seen.set_result(None)


def _publisher(
    fmt: str = "json", *, topic: str | None = TOPIC, **kw: Any
) -> tuple[StatsPublisher[str], FakeDaemon, list[bytes]]:
    settings = MonitorSettings(
        topic,
        format=fmt,
        default_ms=1000,
        intervals={"CONFIG_OPTS": 60000},
        publish_events=True,
        allow_snapshot=True,
        allow_config=True,
        application_id="fake1",
    )
    daemon = FakeDaemon()
    out: list[bytes] = []
    pub = StatsPublisher(
        settings,
        daemon,
        out.append,
        ControlHandler("9.9", allow_snapshot=True, allow_config=True),
        now=100.0,
        wall_clock=lambda: 1.7e9,
        sender_ipv4="127.0.0.1",
        pid=4242,
        **kw,
    )
    return pub, daemon, out


def test_categories_are_published_at_their_intervals() -> None:
    pub, daemon, out = _publisher()
    assert pub.next_timer() == 100.0  # CONFIG_OPTS at start
    pub.handle_timer(100.0)
    assert [c for c, _s, _e in daemon.published] == ["CONFIG_OPTS"]
    assert pub.next_timer() == 101.0
    pub.handle_timer(100.9)  # early: nothing
    assert len(daemon.published) == 1
    pub.handle_timer(101.0)
    pub.handle_timer(102.0)
    assert [c for c, _s, _e in daemon.published] == ["CONFIG_OPTS", "HEALTH", "HEALTH"]
    assert pub.published == len(out) == 3
    assert json.loads(out[-1]) == {"category": "HEALTH", "counter": 0, "events": []}


def test_without_a_topic_nothing_is_published() -> None:
    pub, daemon, out = _publisher(topic=None)
    assert pub.next_timer() is None and not pub.wants_events
    pub.receive_events(["x"])
    pub.handle_timer(1e9)
    assert out == [] and daemon.published == [] and pub.events_dropped == 0


def test_events_beyond_the_bound_are_counted_not_queued() -> None:
    pub, daemon, _out = _publisher(max_queued_events=3)
    pub.receive_events(["a", "ignored-1", "b", "c", "d", "e"])
    assert pub.events_dropped == 2  # d and e; "ignored-1" is not the daemon's and not counted
    pub.handle_timer(101.0)
    health = [e for c, _s, e in daemon.published if c == "HEALTH"]
    assert health == [["a", "b", "c"]]
    pub.receive_events(["f"])  # room again once published
    assert pub.take_events() == ["f"] and pub.events_dropped == 2


def test_pb_messages_are_lbmmon_packets_with_the_attribute_block() -> None:
    pub, daemon, out = _publisher("pb")
    daemon.counter = 7
    pub.handle_timer(101.0)
    packet = decode_packet(out[0])  # HEALTH, then CONFIG_OPTS (category order)
    assert packet.packet_type == PacketType.UMESTORE
    attrs = MonAttributes.from_entries(list(packet.attributes))
    assert (attrs.sender_ipv4, attrs.application_id) == ("127.0.0.1", "fake1")
    assert (attrs.process_id, attrs.timestamp) == (4242, 1_700_000_000)
    assert wrappers_pb2.StringValue.FromString(bytes(packet.data)).value == "HEALTH=7"


def test_control_requests_apply_to_the_daemons_categories_only() -> None:
    pub, daemon, _out = _publisher()
    pub.handle_timer(100.0)
    daemon.published.clear()
    assert pub.receive_control(build_request(Command.REPORT_SRS_VERSION), 100.1) == (
        b"SRS Version 9.9"
    )
    # no category: every category of this daemon (not the SRS's list the handler knows)
    assert pub.receive_control(build_request(Command.REPORT_MONITOR_INFO), 100.1) == (
        b"snap ALL - OK!"
    )
    assert pub.next_timer() == float("-inf")
    pub.handle_timer(100.2)
    assert [(c, s) for c, s, _e in daemon.published] == [("HEALTH", True), ("CONFIG_OPTS", True)]
    # an interval for a category this daemon does not have: answered, nothing changes
    reply = pub.receive_control(
        build_request(Command.SET_PUBLISHING_INTERVAL, Category.SRS_STATS, 60000), 100.3
    )
    assert reply == b"SRS_STATS 60000 - OK!" and pub.scheduler.interval("HEALTH") == 1000
    reply = pub.receive_control(build_request(Command.SET_PUBLISHING_INTERVAL, None, 5000), 100.3)
    assert reply == b"ALL 5000 - OK!" and pub.scheduler.interval("HEALTH") == 5000
    assert pub.next_timer() == pytest.approx(105.3)
    assert pub.receive_control(b"\xff not json", 100.4).startswith(b"ERROR:")


def _settings() -> MonitorSettings:
    return MonitorSettings(TOPIC, format="json", intervals={"CONFIG_OPTS": 60000})


async def test_service_publishes_into_the_monitor_file_on_the_loop(tmp_path: Path) -> None:
    path = tmp_path / "stats.bin"
    daemon = FakeDaemon()
    daemon.seen = asyncio.get_running_loop().create_future()
    control = ControlHandler("9.9", allow_snapshot=False, allow_config=False)
    service = await StatsService.start(
        _settings(), daemon, control, sender_ipv4="127.0.0.1", log=LOG, monitor_file=str(path)
    )
    assert service is not None
    try:
        await asyncio.wait_for(daemon.seen, 10)  # CONFIG_OPTS at start: the timer fired
    finally:
        await service.close()
    raw = path.read_bytes()
    (n,) = struct.unpack_from("!I", raw)
    assert json.loads(raw[4 : 4 + n])["category"] == "CONFIG_OPTS"
    assert len(raw) == 4 + n and service.timer.deadline is None


async def test_service_without_topic_or_sink_is_none(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    control = ControlHandler("9.9", allow_snapshot=False, allow_config=False)
    none = MonitorSettings(None)
    assert await StatsService.start(none, FakeDaemon(), control, sender_ipv4="", log=LOG) is None
    bad = str(tmp_path / "no" / "such" / "dir" / "stats.bin")
    service = await StatsService.start(
        _settings(), FakeDaemon(), control, sender_ipv4="", log=LOG, monitor_file=bad
    )
    assert service is None
    assert "cannot start the statistics publisher" in caplog.text


def test_settings_refuse_an_unknown_format() -> None:
    with pytest.raises(ValueError):
        MonitorSettings(TOPIC, format="xml")
