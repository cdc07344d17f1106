"""``<monitor>`` running over UM on loopback: DROMonMsg under the DRO's name (configs in the
first message) and the portal contexts' library statistics under UM's Gateway_Portal_* ids,
on the monitoring topic, as lbmmon receives them."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from daemons.tnwgd.monitor import DroMonitor
from tests.dro.kit import config
from tests.dro_monitor.kit import feed, runtime
from umcore.api import Context, Message
from umcore.api import message as m
from umcore.config.attributes import Configuration, reset_global_configuration
from umcore.engine import Engine
from umcore.monitor.attributes import StatsMessage, decode_stats
from umcore.monitor.framing import PacketType

WAIT = 20.0  # bound on every wait: samples come each second, the machine is shared


@pytest.fixture
def loopback(unused_udp_port: int, tmp_path: Path) -> Iterator[Path]:
    """Multicast topic resolution on loopback on a free port, also as a flat file."""
    text = f"""
        context resolver_multicast_interface 127.0.0.1
        context resolver_multicast_address 224.9.10.97
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


async def test_dro_and_portal_context_statistics_over_um(loopback: Path) -> None:
    cfg = config(
        [("TRD1", 1, 1), ("TRD2", 2, 1)],
        name="dro-um",
        daemon_extra=(
            '<monitor interval="1">'
            f'<transport-module module="lbm" options="config={loopback}"/>'
            '<format-module module="pb"/></monitor>'
        ),
    )
    rt = runtime(cfg)
    rt.core.receive_portal_up("TRD1", 0.0, address=("127.0.0.1", 1))
    rt.core.receive_portal_up("TRD2", 0.0, address=("127.0.0.1", 2))
    collector = Collector()
    listener = await Context.create()
    stats_rcv = await listener.create_receiver("/29west/statistics", collector)
    ctxs = [Engine(name=f"TRD1-{role}") for role in ("rcv", "src")]  # as the portals make them
    for c in ctxs:
        await c.start()
    rt.portals["TRD1"].ctxs = ctxs
    mon = await DroMonitor.open(rt)
    assert mon is not None
    try:
        first = await collector.wait_for(
            lambda sm: sm.packet_type == PacketType.GATEWAY, "from the DRO"
        )
        assert first.attributes.application_id == "dro-um"
        assert first.message.HasField("configs")  # the configuration comes first
        assert [p.portal_name for p in first.message.stats.portals] == ["TRD1", "TRD2"]
        later = await collector.wait_for(
            lambda sm: sm.packet_type == PacketType.GATEWAY and sm is not first, "a second time"
        )
        assert not later.message.HasField("configs")
        for appid in ("Gateway_Portal_TRD1_rcv_ctx", "Gateway_Portal_TRD1_src_ctx"):
            sm = await collector.wait_for(
                lambda sm, a=appid: (
                    sm.packet_type == PacketType.CONTEXT  # type: ignore[misc]
                    and sm.attributes.application_id == a
                ),
                f"of context {appid}",
            )
            assert sm.message.HasField("stats")
        assert len(mon.library) == 2
        # a portal context that goes away loses its monitor
        rt.portals["TRD1"].ctxs = ctxs[:1]
        for closing in mon.sync():
            await closing
        assert len(mon.library) == 1
        assert mon.publisher.published >= 2 and mon.dropped == 0
        # one monitoring context carries it all: the DRO's and the contexts' statistics
        assert {sm.attributes.sender_ipv4 for sm in collector.got} == {mon.sink.sender_ipv4}
    finally:
        await mon.close()
        for c in ctxs:
            await c.close()
        await stats_rcv.close()
        await listener.close()


async def test_no_monitor_element_no_monitor() -> None:
    rt = runtime()
    feed(rt)
    assert await DroMonitor.open(rt) is None
