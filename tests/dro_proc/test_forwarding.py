"""Messages through one DRO: TCP->TCP, LBT-RM->TCP, LBT-RU->TCP, in order, unrecoverable loss 0.

One process holds the source's context (TRD1), the DRO (two endpoint portals, TRD1 and TRD2)
and the receiver's context (TRD2), each TRD with its own multicast topic resolution on
loopback.  Loopback reaches every address, so each test also checks that the traffic took the
DRO path: the source's only transport peer is the DRO's proxy receiver, and the receiver's only
joined session is the DRO's proxy source.
"""

from __future__ import annotations

import asyncio
import struct
import time

import pytest

from daemons.tnwgd.portal import EndpointPortal
from tests.dro_proc.kit import (
    Recorder,
    Trd,
    dro_xml,
    proxy_ready,
    proxy_source_strings,
    running_dro,
)
from tests.integration.helpers import until
from umcore.api import Context, Message
from umcore.api import message as m

TOPIC = "dro.fwd"
_SEQ = struct.Struct("!I")
# Large enough that this test's in-process receiver never makes the DRO drop (a DRO drops when
# a receiver is slower than the source: no flow control crosses it).
BIG_QUEUE = 256 << 20


# LBT-RM/RU sources send at 20 Mbit/s, not UM's default 10 Mbit/s (100,000 messages of 16 bytes
# are ~2.7 MB of datagrams: 2.2 s at the default, a test of the rate limiter), refilled every
# 10 ms as LBT-RM's limiter is (LBT-RU's default tick, 100 ms, releases 250 kB bursts that
# overflow a small SO_RCVBUF).  Not unlimited: with the whole burst at once the DRO's receive
# socket overflows wherever net.core.rmem_max is small, by more datagrams than NAKs repair.
FAST_LBT = {
    "transport_lbtrm_data_rate_limit": "20000000",
    "transport_lbtru_data_rate_limit": "20000000",
    "transport_lbtru_rate_interval": "10",
}
# A datagram lost before the DRO is repaired there by NAK and forwarded when it comes, after
# later ones: reordered.  A TCP receiver of a DRO proxy source waits that long for it (UM 6.12+
# "DRO reliable loss"; default 0 declares the gap lost at once): loss 0 holds with drops too.
DRO_LOSS_WAIT = {"transport_tcp_dro_loss_recovery_timeout": "10000"}


async def _through_dro(transport: str, count: int) -> None:
    trd1, trd2 = Trd(), Trd()
    xml = dro_xml([("TRD1", 1, trd1), ("TRD2", 2, trd2)], max_queue=BIG_QUEUE)
    rec = Recorder()
    rec.keep_payloads = True
    async with (
        running_dro(xml) as rt,
        await Context.create({**trd1.context(), **FAST_LBT}) as a,
        await Context.create(trd2.context()) as b,
    ):
        wait = DRO_LOSS_WAIT if transport != "tcp" else {}
        rcv = await b.create_receiver(TOPIC, rec, attributes={**trd2.receiver(), **wait})
        src = await a.create_source(TOPIC, attributes=trd1.source(transport))
        await until(lambda: proxy_ready(rt, "TRD2", TOPIC), "the receiver joined the proxy")
        # ... and the DRO's proxy receiver has joined the source's session in TRD1: the proxy
        # source above exists from the source's TIR on, while the proxy receiver may still be
        # connecting (LBT-RU: its session request not yet answered, so what is sent now would
        # never reach the DRO).  TCP and LBT-RU: the source counts the DRO as its receiver;
        # LBT-RM (no connection): the proxy receiver's socket has joined the group.
        ingress = rt.portals["TRD1"]
        assert isinstance(ingress, EndpointPortal)
        dro_rcv = ingress.rcv
        assert dro_rcv is not None
        if transport == "lbtrm":
            await until(
                lambda: any(js.conn is not None for js in dro_rcv.joined.values()),
                "the DRO's proxy receiver joined the LBT-RM group",
            )
        else:
            await until(lambda: src.receivers >= 1, "the DRO's proxy receiver connected")
        t0 = time.perf_counter()
        for i in range(count):
            await src.send(_SEQ.pack(i) + bytes(12), flush=i % 500 == 499)
        src.flush()
        await until(lambda: len(rec.sqns) >= count, f"{count} messages", timeout=60)
        elapsed = time.perf_counter() - t0
        # in order, nothing lost, the payloads as sent
        assert rec.sqns == list(range(rec.sqns[0], rec.sqns[0] + count))
        assert [_SEQ.unpack_from(p)[0] for p in rec.payloads] == list(range(count))
        assert rec.losses == 0
        # the DRO path: the source's one peer is the DRO, the receiver's one session the proxy
        if transport == "tcp":
            assert src.receivers == 1
        assert a.joined == {}
        assert [js.source_string for js in b.joined.values()] == proxy_source_strings(
            rt, "TRD2", TOPIC
        )
        assert rt.portals["TRD1"].rcv is not None
        assert len(rt.portals["TRD1"].rcv.joined) == 1
        assert rt.core.stats("TRD1").frames_received >= count
        assert rt.portals["TRD2"].frames_forwarded >= count
        assert rt.core.queue("TRD2").dropped_would_block == 0
        print(f"{transport}: {count} messages in {elapsed:.2f} s")
        await rcv.close()
        await src.close()


async def test_tcp_to_tcp_100k() -> None:
    await _through_dro("tcp", 100_000)


@pytest.mark.parametrize("transport", ["lbtrm", "lbtru"])
async def test_lbt_to_tcp(transport: str) -> None:
    await _through_dro(transport, 100_000)


async def test_tcp_to_lbtrm_and_final_advertisement() -> None:
    """Protocol conversion the other way (proxy sources on LBT-RM), and the end of a source: the
    origin closes, the DRO deletes its proxy source after ``source-deletion-delay`` with final
    advertisements, and the LBT-RM receiver sees EOS at once (without them it would wait for
    LBT-RM's 60 s activity timeout)."""
    trd1, trd2 = Trd(), Trd()
    xml = dro_xml([("TRD1", 1, trd1), ("TRD2", 2, trd2)], max_queue=BIG_QUEUE, transport="lbtrm")
    rec = Recorder()
    async with (
        running_dro(xml) as rt,
        await Context.create(trd1.context()) as a,
        await Context.create(trd2.context()) as b,
    ):
        rcv = await b.create_receiver(TOPIC, rec, attributes=trd2.receiver())
        src = await a.create_source(TOPIC, attributes=trd1.source("tcp"))
        # LBT-RM has no connection to wait for: probe until the receiver has joined
        probes = 0
        async with asyncio.timeout(20):
            while not rec.sqns:
                await src.send(b"probe", flush=True)
                probes += 1
                await asyncio.sleep(0.02)
        first = rec.sqns[-1] + 1
        for i in range(5000):
            await src.send(_SEQ.pack(i) + bytes(12), flush=i % 100 == 99)
        src.flush()
        await until(lambda: rec.sqns and rec.sqns[-1] >= first + 4999, "5000 over LBT-RM")
        assert rec.sqns[-5000:] == list(range(first, first + 5000))
        assert rec.losses == 0
        assert [js.source_string.split(":")[0] for js in b.joined.values()] == ["LBTRM"]
        t0 = time.perf_counter()
        await src.close()
        await until(lambda: rec.eos >= 1, "EOS at the LBT-RM receiver", timeout=15)
        assert time.perf_counter() - t0 < 10  # well before LBT-RM's activity timeout
        assert rt.portals["TRD2"].final_advertisements >= 1
        await rcv.close()


async def test_wildcard_receiver_across_the_dro() -> None:
    """A wildcard receiver in TRD2: the DRO queries the pattern in TRD1 (wildcard TQRs), opens a
    proxy receiver per matching topic it hears advertised, and each source reaches it."""
    trd1, trd2 = Trd(), Trd()
    got: dict[str, list[int]] = {}

    def on_message(msg: Message) -> None:
        if msg.type == m.MSG_DATA:
            got.setdefault(msg.topic, []).append(_SEQ.unpack_from(msg.data)[0])

    async with (
        running_dro(dro_xml([("TRD1", 1, trd1), ("TRD2", 2, trd2)], max_queue=BIG_QUEUE)) as rt,
        await Context.create(trd1.context()) as a,
        await Context.create(trd2.context()) as b,
    ):
        rcv = await b.create_wildcard_receiver(r"^dro\.wc\.", on_message)
        srcs = [
            await a.create_source(t, attributes=trd1.source("tcp"))
            for t in ("dro.wc.a", "dro.wc.b", "dro.other")
        ]
        await until(lambda: proxy_ready(rt, "TRD2", "dro.wc.a"), "a proxy for dro.wc.a")
        await until(lambda: proxy_ready(rt, "TRD2", "dro.wc.b"), "a proxy for dro.wc.b")
        for i in range(1000):
            for s in srcs:
                await s.send(_SEQ.pack(i), flush=i % 100 == 99)
        for s in srcs:
            s.flush()
        await until(lambda: all(len(got.get(t, [])) >= 1000 for t in ("dro.wc.a", "dro.wc.b")))
        assert got["dro.wc.a"][-1000:] == list(range(1000))
        assert got["dro.wc.b"][-1000:] == list(range(1000))
        assert "dro.other" not in got
        assert not rt.portals["TRD1"].receivers.get("dro.other")  # never even received
        await rcv.close()
        for s in srcs:
            await s.close()


@pytest.mark.parametrize("transport", ["tcp", "lbtrm"])
async def test_fragmented_messages_cross_as_frames(transport: str) -> None:
    """Messages larger than a datagram cross the DRO as their fragments (each frame forwarded
    with its own sequence number, never reassembled by the DRO); the receiver reassembles them
    intact.  100 kB messages: two TCP frames (65535-byte datagrams), thirteen LBT-RM ones."""
    trd1, trd2 = Trd(), Trd()
    rec = Recorder()
    rec.keep_payloads = True
    big = [bytes([i]) * (100_000 + i) for i in range(30)]
    async with (
        running_dro(dro_xml([("TRD1", 1, trd1), ("TRD2", 2, trd2)], max_queue=BIG_QUEUE)) as rt,
        await Context.create({**trd1.context(), **FAST_LBT}) as a,
        await Context.create(trd2.context()) as b,
    ):
        rcv = await b.create_receiver(TOPIC, rec, attributes=trd2.receiver())
        src = await a.create_source(TOPIC, attributes=trd1.source(transport))
        await until(lambda: proxy_ready(rt, "TRD2", TOPIC), "the path")
        ingress = rt.portals["TRD1"]
        assert isinstance(ingress, EndpointPortal)
        dro_rcv = ingress.rcv
        assert dro_rcv is not None
        # ... up to the DRO's proxy receiver in TRD1 (LBT-RM: its socket joined the group)
        await until(
            lambda: any(js.conn is not None for js in dro_rcv.joined.values()),
            "the DRO's proxy receiver joined the source",
        )
        for payload in big:
            await src.send(payload, flush=True)
        await until(lambda: len(rec.payloads) >= len(big), "the large messages")
        assert rec.payloads == big
        assert rec.losses == 0
        # the DRO forwarded frames: more of them than messages
        assert rt.core.stats("TRD1").frames_received >= 2 * len(big)
        await rcv.close()
        await src.close()


async def test_a_frame_too_large_for_the_egress_costs_only_itself() -> None:
    """Datagram sizes that differ (a warning at start): a 60 kB TCP frame does not fit the
    LBT-RM proxy session's 8192-byte datagrams; that frame is dropped and counted, the stream
    goes on (notes A2 "Datagram size parity")."""
    trd1, trd2 = Trd(), Trd()
    rec = Recorder()
    xml = dro_xml([("TRD1", 1, trd1), ("TRD2", 2, trd2)], max_queue=BIG_QUEUE, transport="lbtrm")
    async with (
        running_dro(xml) as rt,
        await Context.create(trd1.context()) as a,
        await Context.create(trd2.context()) as b,
    ):
        # the dropped frame's sequence number is a gap: declared lost after 0.5 s, not 10 s, and
        # checked every 100 ms (without the check the loss waits for the next TSNI, ~5 s later)
        quick = {
            **trd2.receiver(),
            "transport_lbtrm_nak_generation_interval": "500",
            "delivery_control_loss_check_interval": "100",
        }
        rcv = await b.create_receiver(TOPIC, rec, attributes=quick)
        src = await a.create_source(TOPIC, attributes=trd1.source("tcp"))
        async with asyncio.timeout(20):
            while not rec.sqns:
                await src.send(b"probe", flush=True)
                await asyncio.sleep(0.02)
        await until(lambda: rec.sqns[-1] >= 0, "")
        first = rec.sqns[-1] + 1
        await src.send(bytes(60_000), flush=True)  # one TCP frame, too big for LBT-RM
        for i in range(100):
            await src.send(_SEQ.pack(i), flush=True)
        await until(lambda: rt.portals["TRD2"].send_errors >= 1, "the big frame refused")
        await until(lambda: rec.sqns[-1] >= first + 100, "the stream after it")
        assert rt.portals["TRD2"].send_errors == 1
        assert rec.sqns[-100:] == list(range(first + 1, first + 101))
        assert rec.losses == 1  # the receiver is told of the one frame that could not go
        await rcv.close()
        await src.close()
