"""Automatic monitoring of a real context on loopback: the statistics it publishes over UM
decode with our protos and carry what the library counted."""

from __future__ import annotations

import asyncio
import os
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from umcore.api import Context, Message
from umcore.api import message as m
from umcore.config.attributes import Configuration, reset_global_configuration
from umcore.errors import ConfigError
from umcore.monitor import automatic
from umcore.monitor.attributes import StatsMessage, decode_stats
from umcore.monitor.framing import PacketType

WAIT = 15.0  # bound on every wait: a sample comes each second, the machine is shared


@pytest.fixture
def loopback(unused_udp_port: int, tmp_path: Path) -> Iterator[Path]:
    """Multicast TR on loopback on a free port; the same settings as a flat file (for the
    monitoring module's ``config=``)."""
    text = f"""
        context resolver_multicast_interface 127.0.0.1
        context resolver_multicast_address 224.9.10.96
        context resolver_multicast_port {unused_udp_port}
        context transport_tcp_port_low 0
        context transport_tcp_port_high 0
        source transport_tcp_interface 127.0.0.1
        """
    cfg = Configuration()
    cfg.config_text(text, "test")
    reset_global_configuration(cfg)
    path = tmp_path / "mon.cfg"
    path.write_text("\n".join(line.strip() for line in text.splitlines()) + "\n")
    yield path
    reset_global_configuration(None)


class Collector:
    """A receiver of the statistics topic that decodes every packet it gets."""

    def __init__(self) -> None:
        self.got: list[StatsMessage] = []
        self.changed = asyncio.Event()

    def __call__(self, msg: Message) -> None:
        if msg.type == m.MSG_DATA:
            self.got.append(decode_stats(msg.data))
            self.changed.set()

    async def wait_for(self, pred: Callable[[StatsMessage], bool], what: str) -> StatsMessage:
        async def scan() -> StatsMessage:
            seen = 0
            while True:
                for sm in self.got[seen:]:
                    if pred(sm):
                        return sm
                seen = len(self.got)
                self.changed.clear()
                await self.changed.wait()

        try:
            return await asyncio.wait_for(scan(), WAIT)
        except TimeoutError:
            raise AssertionError(f"no statistics message {what} in {WAIT} s") from None


async def wait_until(cond: Callable[[], bool], what: str) -> None:
    async def poll() -> None:
        while not cond():
            await asyncio.sleep(0.01)

    try:
        await asyncio.wait_for(poll(), WAIT)
    except TimeoutError:
        raise AssertionError(f"timed out waiting for {what}") from None


def _receiver(sm: StatsMessage) -> Any:
    return sm.message.stats.receiver_transports[0]  # type: ignore[union-attr]


def _source(sm: StatsMessage) -> Any:
    return sm.message.stats.source_transports[0]  # type: ignore[union-attr]


async def test_context_publishes_what_it_counted(loopback: Path) -> None:
    collector = Collector()
    mon = await Context.create()
    stats_rcv = await mon.create_receiver("/29west/statistics", collector)
    app = await Context.create(
        {
            "monitor_interval": "1",
            "monitor_format": "pb",
            "monitor_appid": "test-app",
            "monitor_transport_opts": f"config={loopback}",
        }
    )
    delivered: list[bytes] = []

    def on_data(msg: Message) -> None:
        if msg.type == m.MSG_DATA:
            delivered.append(msg.data)

    src = await app.create_source("monitored/topic")
    rcv = await app.create_receiver("monitored/topic", on_data)
    unresolved = await app.create_receiver("nobody/sends/this", lambda msg: None)
    try:
        await wait_until(lambda: src.receivers == 1, "the receiver to join the source")
        n, size = 37, 100
        for i in range(n):
            await src.send(i.to_bytes(4, "big") * (size // 4))
        src.flush()
        await wait_until(lambda: len(delivered) == n, f"{n} deliveries")

        def is_app(sm: StatsMessage) -> bool:
            return sm.attributes.application_id == "test-app"

        r = await collector.wait_for(
            lambda sm: (
                is_app(sm)
                and sm.packet_type == PacketType.RECEIVER
                and _receiver(sm).tcp.lbm_msgs_rcved == n
            ),
            f"with the receiver transport counting {n} messages",
        )
        rt = _receiver(r)
        assert rt.source_string == src.source_string
        assert rt.WhichOneof("TransportType") == "tcp"
        assert rt.tcp.lbm_msgs_no_topic_rcved == 0
        assert rt.tcp.bytes_rcved >= n * size  # payloads plus LBMC headers
        assert rt.tcp.bytes_rcved == app.joined[next(iter(app.joined))].core.stats.bytes_received
        assert r.attributes.process_id == os.getpid()
        assert r.attributes.object_id == id(app)
        assert r.attributes.sender_ipv4 == "127.0.0.1"

        s = await collector.wait_for(
            lambda sm: is_app(sm) and sm.packet_type == PacketType.SOURCE,
            "for the source transport",
        )
        assert _source(s).source_string == src.source_string
        assert _source(s).tcp.num_clients == src.receivers == 1

        c = await collector.wait_for(
            lambda sm: is_app(sm) and sm.packet_type == PacketType.CONTEXT,
            "for the context",
        )
        ctx = c.message.stats.context  # type: ignore[union-attr]
        assert ctx.tr_src_topics == 1
        assert ctx.tr_rcv_topics == 2
        assert ctx.tr_rcv_unresolved_topics == 1
        ep = app.endpoint
        assert ep is not None
        assert 0 < ctx.tr_dgrams_sent <= ep.datagrams_sent
        assert 0 < ctx.tr_bytes_sent <= ep.bytes_sent
        assert 0 < ctx.tr_dgrams_rcved <= ep.datagrams_received
        assert ctx.fragments_unrecoverably_lost == 0
        assert ctx.rcv_cb_svc_time_min == (1 << 64) - 1  # callbacks are not timed
        assert c.attributes.timestamp > 0
        assert app._monitor is not None and app._monitor.published >= 3
    finally:
        await unresolved.close()
        await rcv.close()
        await src.close()
        await app.close()
        await stats_rcv.close()
        await mon.close()
    assert not automatic._PUBLISHERS  # the monitoring context went with the last monitored one


async def test_topic_option_and_shared_monitoring_context(loopback: Path) -> None:
    collector = Collector()
    mon = await Context.create()
    stats_rcv = await mon.create_receiver("/other/stats", collector)
    opts = {
        "monitor_interval": "1",
        "monitor_format": "pb",
        "monitor_transport_opts": "topic=/other/stats",
    }
    a = await Context.create({**opts, "monitor_appid": "a"})
    b = await Context.create({**opts, "monitor_appid": "b"})
    try:
        assert a._monitor is not None and b._monitor is not None
        assert a._monitor.publisher is b._monitor.publisher  # one monitoring context
        assert a._monitor.publisher.refs == 2
        for appid in ("a", "b"):
            got = await collector.wait_for(
                lambda sm, appid=appid: (
                    sm.attributes.application_id == appid  # type: ignore[misc]
                    and sm.packet_type == PacketType.CONTEXT
                ),
                f"from {appid}",
            )
            assert got.attributes.object_id == id(a if appid == "a" else b)
        pub = a._monitor.publisher
        await a.close()
        assert pub.refs == 1 and pub.ctx is not None
    finally:
        await a.close()
        await b.close()
        await stats_rcv.close()
        await mon.close()
    assert not automatic._PUBLISHERS


async def test_csv_is_refused_before_any_socket(loopback: Path) -> None:
    with pytest.raises(ConfigError) as info:
        await Context.create({"monitor_interval": "1", "monitor_format": "csv"})
    assert "monitor_format pb" in str(info.value)


async def test_off_by_default(loopback: Path) -> None:
    async with await Context.create() as ctx:
        assert ctx._monitor is None
    assert not automatic._PUBLISHERS


async def test_bad_transport_opts_fail_context_creation(loopback: Path) -> None:
    with pytest.raises(ConfigError):
        await Context.create(
            {
                "monitor_interval": "1",
                "monitor_format": "pb",
                "monitor_transport_opts": "context|no_such_option=1",
            }
        )
    assert not automatic._PUBLISHERS


async def test_environment_turns_monitoring_on(loopback: Path) -> None:
    """``LBM_MONITOR_*`` override the defaults of every context (B2)."""
    from umcore.config.attributes import global_configuration

    global_configuration().load_environment(
        {
            "LBM_MONITOR_INTERVAL": "1",
            "LBM_MONITOR_FORMAT": "pb",
            "LBM_MONITOR_APPID": "from-env",
            "LBM_MONITOR_TRANSPORT_OPTS": "topic=/env/stats",
        }
    )
    collector = Collector()
    # The listening context is monitored too (the environment applies to every context).
    mon = await Context.create()
    stats_rcv = await mon.create_receiver("/env/stats", collector)
    try:
        got = await collector.wait_for(
            lambda sm: sm.packet_type == PacketType.CONTEXT and sm.attributes.object_id == id(mon),
            "from the context monitored through the environment",
        )
        assert got.attributes.application_id == "from-env"
    finally:
        await stats_rcv.close()
        await mon.close()


async def test_unrecoverable_loss_is_counted(loopback: Path) -> None:
    app = await Context.create()
    losses: list[int] = []
    delivered = asyncio.Event()

    def on_msg(msg: Message) -> None:
        if msg.type == m.MSG_DATA:
            delivered.set()
        elif msg.type in (m.MSG_UNRECOVERABLE_LOSS, m.MSG_UNRECOVERABLE_LOSS_BURST):
            losses.append(msg.count or 1)

    src = await app.create_source("lossy")
    rcv = await app.create_receiver("lossy", on_msg)
    try:
        await wait_until(lambda: src.receivers == 1, "the receiver to join")
        await src.send(b"first", flush=True)
        await asyncio.wait_for(delivered.wait(), WAIT)
        assert automatic.sample_context(app).context["fragments_unrecoverably_lost"] == 0
        (js,) = app.joined.values()
        (fan,) = js.fanouts.values()
        # A gap of three sequence numbers, as a DRO or a broken peer could cause: TCP cannot
        # repair it, the receiver is told at once.
        fan.dc.on_data(fan.dc.expected + 3, b"after the gap")
        assert sum(losses) == 3
        sample = automatic.sample_context(app).context
        assert sample["fragments_unrecoverably_lost"] == 3
        assert sample["fragments_lost"] == 3
    finally:
        await rcv.close()
        await src.close()
        await app.close()
