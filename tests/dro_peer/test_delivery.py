"""TRD1 - DRO1 ~peer~ DRO2 - TRD2 with both DROs as ``tnwgd`` processes: messages in order.

A source in TRD1 and a receiver in TRD2 live in the test process; DRO1 (endpoint TRD1, peer
acceptor) and DRO2 (peer initiator, endpoint TRD2) are processes.  The receiver's interest
crosses the link, DRO1's proxy receiver joins the source, DRO2 advertises a proxy source in
TRD2, and every message arrives in order with nothing lost -- plain, and with LZ4 + TLS
(self-signed certificates made by the test) ending at each peer portal.
"""

from __future__ import annotations

import asyncio
import struct
import time
from pathlib import Path

import pytest

from tests.dro_peer.kit import (
    BURST_TIMERS,
    LINK_UP,
    PeerSpec,
    free_tcp_port,
    peer_dro_xml,
    start_dro,
)
from tests.dro_proc.kit import Recorder, Trd
from tests.integration.helpers import until
from umcore.api import Context
from umcore.tools.certs import make_certificates

TOPIC = "peer.fwd"
COUNT = 100_000
_SEQ = struct.Struct("!I")


@pytest.mark.parametrize("mode", ["plain", "lz4+tls"])
async def test_messages_in_order_over_a_peer_link(tmp_path: Path, mode: str) -> None:
    trd1, trd2 = Trd(), Trd()
    port = free_tcp_port()
    certs = make_certificates(tmp_path, "dro") if mode != "plain" else None
    secure = {"lz4": certs is not None, "tls": certs}
    acc = PeerSpec("PEER", "acceptor", port, **secure)  # type: ignore[arg-type]
    ini = PeerSpec("PEER", "initiator", port, **secure)  # type: ignore[arg-type]
    xml1 = peer_dro_xml("dro1", [("TRD1", 1, trd1)], [acc], timers=BURST_TIMERS)
    xml2 = peer_dro_xml("dro2", [("TRD2", 2, trd2)], [ini], timers=BURST_TIMERS)
    dro1 = await start_dro(tmp_path, "dro1", xml1)
    dro2 = await start_dro(tmp_path, "dro2", xml2)
    rec = Recorder()
    rec.keep_payloads = True
    try:
        await dro1.wait_for_line(LINK_UP, 20)
        await dro2.wait_for_line(LINK_UP, 20)
        async with (
            await Context.create(trd1.context()) as a,
            await Context.create(trd2.context()) as b,
        ):
            rcv = await b.create_receiver(TOPIC, rec, attributes=trd2.receiver())
            src = await a.create_source(TOPIC, attributes=trd1.source("tcp"))
            # the path is there when DRO1's proxy receiver joined and DRO2's proxy source has
            # its receiver: probe until one message arrives
            async with asyncio.timeout(30):
                while not rec.sqns:
                    await src.send(b"probe", flush=True)
                    await asyncio.sleep(0.05)
            await asyncio.sleep(0)
            before = len(rec.sqns)
            t0 = time.perf_counter()
            for i in range(COUNT):
                await src.send(_SEQ.pack(i) + bytes(12), flush=i % 500 == 499)
            src.flush()
            try:
                await until(
                    lambda: len(rec.sqns) >= before + COUNT, f"{COUNT} messages", timeout=30
                )
            except AssertionError:  # what the DROs said, for the failure report
                print(f"got {len(rec.sqns) - before}, losses {rec.losses}")
                print("\n".join(dro1.all_lines()[-15:] + dro2.all_lines()[-15:]))
                raise
            elapsed = time.perf_counter() - t0
            got = rec.payloads[before:]
            assert [_SEQ.unpack_from(p)[0] for p in got] == list(range(COUNT))
            sqns = rec.sqns[before:]
            assert sqns == list(range(sqns[0], sqns[0] + COUNT))  # originating sqns kept
            assert rec.losses == 0
            # the path crossed the DROs: the receiver's one session is DRO2's proxy source
            assert a.joined == {}
            assert len(b.joined) == 1
            print(f"{mode}: {COUNT} messages over the peer link in {elapsed:.2f} s")
            await rcv.close()
            await src.close()
        if certs is not None:
            assert any("TLS" in line for line in dro1.all_lines())
    finally:
        await dro2.stop()
        await dro1.stop()
