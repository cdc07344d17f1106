"""The monitor, the web monitor and the metrics on the real tnwgd runtime
(:class:`daemons.tnwgd.app.DroRuntime`): two TRDs on loopback, a source in TRD1, a receiver in
TRD2; the DROMonMsg statistics, the portal contexts' library statistics, the portal page and the
Prometheus figures all show the messages the DRO forwarded."""

from __future__ import annotations

import asyncio
from pathlib import Path

import aiohttp
from prometheus_client import CollectorRegistry, generate_latest

from daemons.tnwgd.monitor import DroMonitor, register_metrics
from daemons.tnwgd.webmon import start_dro_web_monitor
from tests.dro_monitor.test_over_um import Collector
from tests.dro_proc.kit import Recorder, Trd, dro_xml, proxy_ready, running_dro
from tests.integration.helpers import until
from umcore.api import Context
from umcore.monitor.framing import PacketType

TOPIC = "dro.mon"
COUNT = 200


async def test_monitoring_a_running_dro(tmp_path: Path) -> None:
    trd1, trd2 = Trd(), Trd()
    mon_cfg = tmp_path / "mon.cfg"  # the statistics travel in TRD1
    mon_cfg.write_text("".join(f"context {k} {v}\n" for k, v in trd1.context().items()))
    xml = dro_xml([("TRD1", 1, trd1), ("TRD2", 2, trd2)], name="dro-live").replace(
        "</daemon>",
        f'<monitor interval="1"><transport-module module="lbm" options="config={mon_cfg}"/>'
        '<format-module module="pb"/></monitor>'
        "<web-monitor>127.0.0.1:0</web-monitor></daemon>",
    )
    rec = Recorder()
    collector = Collector()
    loop = asyncio.get_running_loop()
    async with (
        running_dro(xml) as rt,
        await Context.create(trd1.context()) as a,
        await Context.create(trd2.context()) as b,
    ):
        stats_rcv = await a.create_receiver("/29west/statistics", collector)
        mon = await DroMonitor.open(rt)
        web = await start_dro_web_monitor(rt, monotonic=loop.time)
        assert mon is not None and web is not None and web.pages.address is not None
        registry = CollectorRegistry()
        register_metrics(registry, rt, mon)
        try:
            rcv = await b.create_receiver(TOPIC, rec, attributes=trd2.receiver())
            src = await a.create_source(TOPIC, attributes=trd1.source("tcp"))
            await until(lambda: proxy_ready(rt, "TRD2", TOPIC), "the receiver joined the proxy")
            for i in range(COUNT):
                await src.send(i.to_bytes(4, "big"))
            src.flush()
            await until(lambda: len(rec.sqns) >= COUNT, f"{COUNT} messages")

            def forwarded(sm: object) -> bool:
                if sm.packet_type != PacketType.GATEWAY:  # type: ignore[attr-defined]
                    return False
                ps = {p.portal_name: p for p in sm.message.stats.portals}  # type: ignore[attr-defined]
                return ps["TRD2"].endpoint.send.transport_topic_fragments_forwarded >= COUNT

            sm = await collector.wait_for(forwarded, "counting the forwarded messages")
            assert sm.attributes.application_id == "dro-live"
            trd2 = next(p for p in sm.message.stats.portals if p.portal_name == "TRD2")
            assert trd2.proxy_sources == 1 and trd2.endpoint.local_interest_topics >= 1
            for role in ("rcv_ctx", "src_ctx"):
                appid = f"Gateway_Portal_TRD2_{role}"
                await collector.wait_for(
                    lambda sm, a=appid: sm.attributes.application_id == a,  # type: ignore[misc]
                    f"from {appid}",
                )
            host, port = web.pages.address
            async with (
                aiohttp.ClientSession() as s,
                s.get(f"http://{host}:{port}/json/portals/TRD2") as r,
            ):
                page = await r.json()
            assert page["proxy_sources"][0]["topic"] == TOPIC
            send = {row[0]: row[1] for row in page["send"]}
            assert send["transport_topic_fragments_forwarded"] >= COUNT
            text = generate_latest(registry).decode()
            line = next(
                ln
                for ln in text.splitlines()
                if ln.startswith(
                    'pyum_dro_endpoint_receive_transport_topic_fragments_rcvd_total{portal="TRD1"}'
                )
            )
            assert float(line.split()[-1]) >= COUNT
            await rcv.close()
            await src.close()
        finally:
            await web.close()
            await mon.close()
            await stats_rcv.close()
