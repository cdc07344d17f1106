"""Faults at a DRO: garbage in a portal's topic resolution domain, and a receiver that stops.

- A datagram that is not LBMR, sent to TRD1's resolver group while messages flow, is counted by
  the portal (``tr_malformed``) and costs nothing else: the stream goes on, in order, no loss.
- One DRO, three TRDs: a source in TRD1, a healthy receiver in TRD3 and, in TRD2, a "receiver"
  that confirms the proxy source's session and then never reads.  TRD2's proxy source blocks,
  its portal queue fills to ``<max-queue>`` and drops with a counter (UM: no flow control crosses
  a DRO); TRD3 gets every message in order, never slowed by TRD2.
"""

from __future__ import annotations

import asyncio
import socket
import struct

from tests.dro_proc.kit import Recorder, Trd, dro_xml, proxy_ready, running_dro
from tests.integration.helpers import until
from umcore.aio.multicast import set_multicast_sender
from umcore.api import Context
from umcore.transport.tcp import encode_tcp_sid

_SEQ = struct.Struct("!I")


async def test_garbage_datagram_costs_only_itself() -> None:
    trd1, trd2 = Trd(), Trd()
    rec = Recorder()
    async with (
        running_dro(dro_xml([("TRD1", 1, trd1), ("TRD2", 2, trd2)])) as rt,
        await Context.create(trd1.context()) as a,
        await Context.create(trd2.context()) as b,
    ):
        rcv = await b.create_receiver("dro.garbage", rec, attributes=trd2.receiver())
        src = await a.create_source("dro.garbage", attributes=trd1.source("tcp"))
        await until(lambda: proxy_ready(rt, "TRD2", "dro.garbage"), "path through the DRO")
        portal = rt.portals["TRD1"]
        before = portal.tr_malformed
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
            set_multicast_sender(s, "127.0.0.1", 1)
            s.sendto(b"\xff\x07garbage, not LBMR", (trd1.group, trd1.port))
            for i in range(2000):
                await src.send(_SEQ.pack(i), flush=i % 100 == 99)
            src.flush()
            await until(lambda: portal.tr_malformed > before, "the garbage counted")
        await until(lambda: len(rec.sqns) >= 2000, "the stream after the garbage")
        assert portal.tr_malformed == before + 1
        assert rec.sqns == list(range(rec.sqns[0], rec.sqns[0] + 2000))
        assert rec.losses == 0
        assert portal.up and rt.portals["TRD2"].up
        await rcv.close()
        await src.close()


async def test_full_queue_drops_and_never_blocks_the_other_portal() -> None:
    limit = 64_000
    trd1, trd3 = Trd(), Trd()
    # TRD2's proxy source buffers little, its portal queue holds 64 kB
    trd2 = Trd(dro_source={"transport_session_maximum_buffer": "8192"}, max_queue=limit)
    xml = dro_xml([("TRD1", 1, trd1), ("TRD2", 2, trd2), ("TRD3", 3, trd3)], max_queue=256 << 20)
    healthy, stalled_app = Recorder(), Recorder()
    count, payload = 20_000, bytes(500)
    async with (
        running_dro(xml) as rt,
        await Context.create(trd1.context()) as a,
        await Context.create(trd2.context()) as b,
        await Context.create(trd3.context()) as c,
    ):
        r2 = await b.create_receiver("dro.q", stalled_app, attributes=trd2.receiver())
        r3 = await c.create_receiver("dro.q", healthy, attributes=trd3.receiver())
        src = await a.create_source("dro.q", attributes=trd1.source("tcp"))
        await until(lambda: proxy_ready(rt, "TRD2", "dro.q"), "TRD2's proxy source")
        await until(lambda: proxy_ready(rt, "TRD3", "dro.q"), "TRD3's proxy source")
        (px,) = rt.portals["TRD2"].sources.values()
        assert px.raw is not None
        proxy = px.raw.source
        # the receiver that stops: confirms the session, then never reads
        stuck = socket.socket()
        stuck.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        stuck.setblocking(False)
        loop = asyncio.get_running_loop()
        try:
            _tcp, ip, port, sid = proxy.source_string.split(":")  # TCP:ip:port:sid
            await loop.sock_connect(stuck, (ip, int(port)))
            await loop.sock_sendall(stuck, encode_tcp_sid(int(sid, 16)))
            await until(lambda: proxy.receivers >= 2, "the stalled receiver confirmed")
            # TRD2's application and the stalled one: the DRO's own proxy receiver for TRD3's
            # interest in TRD2 leaves its own proxy source alone
            assert proxy.receivers == 2
            assert rt.portals["TRD2"].own_joins_avoided >= 1
            for i in range(count):
                await src.send(_SEQ.pack(i) + payload, flush=i % 100 == 99)
            src.flush()
            await until(lambda: len(healthy.sqns) >= count, "every message in TRD3", timeout=60)
            q2 = rt.core.queue("TRD2")
            assert q2.dropped_would_block > 0  # dropped, counted
            assert q2.bytes_enqueued_max <= limit  # never past <max-queue>
            assert rt.portals["TRD2"].would_block > 0
            assert rt.core.queue("TRD3").dropped_would_block == 0
            assert healthy.sqns == list(range(healthy.sqns[0], healthy.sqns[0] + count))
            assert healthy.losses == 0
        finally:
            stuck.close()
        await r2.close()
        await r3.close()
        await src.close()
