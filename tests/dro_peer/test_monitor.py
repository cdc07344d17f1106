"""A peer portal's figures in tnwgd's monitoring: DROMonMsg, the web monitor page, Prometheus.

Two DRO runtimes in this process (TRD1 - DRO1 ~peer~ DRO2 - TRD2, short keepalive), 500
messages across: DRO2's peer portal shows the adjacent DRO, link state up, keepalive RTT samples,
data messages and bytes received on the link, control messages each way; DRO1's shows the
data fragments sent and the batches; the web monitor's page of the peer portal has its "Peer
Link" table; Prometheus has ``pyum_dro_peer_*`` and ``pyum_dro_peer_link_*`` per portal.
"""

from __future__ import annotations

import asyncio
import struct
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from prometheus_client import generate_latest

from daemons.tnwgd.app import DroRuntime
from daemons.tnwgd.monitor import DROMonMsg, register_metrics, stats_pb
from daemons.tnwgd.webmon import DroWebMonitor
from tests.dro_peer.kit import PeerSpec, free_tcp_port, peer_dro_xml
from tests.dro_proc.kit import Recorder, Trd
from tests.integration.helpers import until
from umcore.api import Context
from umcore.config import dro as dro_config
from umcore.daemon.metrics import new_registry

_SEQ = struct.Struct("!I")
COUNT = 500


@asynccontextmanager
async def runtime(xml: str, name: str) -> AsyncIterator[DroRuntime]:
    rt = DroRuntime(dro_config.load_text(xml, f"{name}.xml"))
    await rt.start()
    try:
        yield rt
    finally:
        await rt.close()


def peer_stats(rt: DroRuntime) -> object:
    msg = DROMonMsg()
    offset = time.time() - asyncio.get_running_loop().time()
    stats_pb(rt, msg.stats, wall_offset=offset, portals=[rt.portals["PEER"]])
    return msg.stats.portals[0].peer


async def test_peer_portal_figures() -> None:
    trd1, trd2 = Trd(), Trd()
    port = free_tcp_port()
    xml1 = peer_dro_xml("dro1", [("TRD1", 1, trd1)], [PeerSpec("PEER", "acceptor", port)])
    xml2 = peer_dro_xml("dro2", [("TRD2", 2, trd2)], [PeerSpec("PEER", "initiator", port)])
    rec = Recorder()
    async with (
        runtime(xml1, "dro1") as r1,
        runtime(xml2, "dro2") as r2,
        await Context.create(trd1.context()) as a,
        await Context.create(trd2.context()) as b,
    ):
        rcv = await b.create_receiver("peer.mon", rec, attributes=trd2.receiver())
        src = await a.create_source("peer.mon", attributes=trd1.source("tcp"))
        async with asyncio.timeout(20):
            while not rec.sqns:
                await src.send(b"probe", flush=True)
                await asyncio.sleep(0.05)
        for i in range(COUNT):
            await src.send(_SEQ.pack(i), flush=i % 50 == 49)
        src.flush()
        await until(lambda: len(rec.sqns) > COUNT, f"{COUNT} messages")
        await until(lambda: peer_stats(r2).send.rtt_samples >= 2, "keepalive RTT samples")  # type: ignore[attr-defined]
        p1, p2 = peer_stats(r1), peer_stats(r2)
        assert p2.adjacent_gateway_id == r1.node_id  # type: ignore[attr-defined]
        assert p1.adjacent_gateway_id == r2.node_id  # type: ignore[attr-defined]
        assert p2.receive.data_msgs_rcvd >= COUNT + 1  # type: ignore[attr-defined]
        assert p2.receive.data_msg_bytes_rcvd > 0  # type: ignore[attr-defined]
        assert p2.receive.gateway_cntl_msgs_rcvd > 0  # type: ignore[attr-defined]
        assert p1.send.data_fragments_sent >= COUNT + 1  # type: ignore[attr-defined]
        assert p1.send.batches > 0 and p1.send.gateway_cntl_msgs_sent > 0  # type: ignore[attr-defined]
        s2 = p2.send  # type: ignore[attr-defined]
        assert 0 < s2.rtt_min <= s2.rtt_mean <= s2.rtt_max and s2.last_ka_time > 1e9
        # the web monitor's page of the peer portal
        page = DroWebMonitor(r2, monotonic=asyncio.get_running_loop().time).portal(
            {"portal": "PEER"}
        )
        assert page is not None and page["type"] == "peer" and page["up"]
        rows = dict(page["link"])
        assert rows["state"] == "up" and rows["peer DRO"].startswith("dro1 ")
        assert rows["data messages received"] >= COUNT and rows["bytes received"] > 0
        # Prometheus, per peer portal
        registry = new_registry([])
        register_metrics(registry, r2)
        text = generate_latest(registry).decode()
        assert 'pyum_dro_peer_link_up{portal="PEER"} 1.0' in text
        assert 'pyum_dro_peer_link_bytes_received_total{portal="PEER"}' in text
        assert 'pyum_dro_peer_receive_data_msgs_rcvd_total{portal="PEER"}' in text
        assert 'pyum_dro_peer_send_rtt_mean{portal="PEER"}' in text
        await rcv.close()
        await src.close()
