"""The transit topology of seed 003 ("Routing Topologies"): TRD1 -- DRO1 -- TRD2 -- DRO2 -- TRD3.

TRD1 resolves topics through an lbmrd, TRD2 by multicast, TRD3 through the SRS (as
``make run ARGS="--dro"``).  A source in TRD1, a receiver of its topic in TRD3 and a wildcard
receiver in TRD2, all in this process with both DROs; the lbmrd and the SRS are processes.

- Interest crosses two DROs: the TRD3 receiver's interest reaches DRO2 from the SRS (its RIR,
  forward-interest mode), DRO2's proxy receiver in TRD2 sends interest records that DRO1 picks
  up, DRO1's proxy receiver resolves the source through the lbmrd.
- Every message arrives in order at both receivers, unrecoverable loss 0; the source's end
  reaches both as EOS (final advertisement in TRD2, SER in TRD3).
- The traffic took the DRO path: the source's one transport peer is DRO1's proxy receiver, the
  wildcard receiver's one session is DRO1's proxy source, the TRD3 receiver's one session is
  DRO2's proxy source, and DRO2's proxy receiver in TRD2 joined DRO1's proxy source.
- A UIM to the source (``SOURCE:`` + the proxy's source string) reaches it through both DROs.

Also: a UIM ``TCP:3:ip:port`` and a request/response across both DROs (the REQUEST header
rewritten hop by hop), a UIM through one DRO, and the transit through a TRD resolved by the SRS
(TRD1 -- DRO1 -- TRD2 (SRS) -- DRO2 -- TRD3): interest, data, routes and a UIM across it.
"""

from __future__ import annotations

import gc
import ipaddress
import struct
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

from daemons.tnwgd.app import DroRuntime
from tests.dro_proc.kit import (
    Recorder,
    Trd,
    dro_xml,
    proxy_ready,
    proxy_source_strings,
    running_dro,
)
from tests.integration.daemon_proc import DaemonProcess
from tests.integration.helpers import until
from tests.integration.test_srs import srs_xml
from umcore.api import Context, Message
from umcore.dro import InterestKey

TOPIC = "dro.transit.data"
PATTERN = r"^dro\.transit\."
COUNT = 2000
_SEQ = struct.Struct("!I")


@asynccontextmanager
async def transit(tmp: Path) -> AsyncIterator[tuple[Trd, Trd, Trd, DroRuntime, DroRuntime]]:
    """lbmrd (TRD1), SRS (TRD3), and the two DROs joining TRD1-TRD2 and TRD2-TRD3."""
    lbmrd = await DaemonProcess.start("lbmrd", "-i", "127.0.0.1", "-p", "0")
    srs = await DaemonProcess.start("srs", str(srs_xml(tmp)))
    try:
        t1, t2, t3 = Trd(lbmrd=lbmrd.address), Trd(), Trd(srs=srs.address)
        big = 64 << 20
        async with (
            running_dro(dro_xml([("TRD1", 1, t1), ("TRD2", 2, t2)], name="dro1", max_queue=big))
            as d1,
            running_dro(dro_xml([("TRD2", 2, t2), ("TRD3", 3, t3)], name="dro2", max_queue=big))
            as d2,
        ):  # fmt: skip
            yield t1, t2, t3, d1, d2
    finally:
        await srs.stop()
        await lbmrd.stop()


def _sessions(ctx: Context) -> list[str]:
    return [js.source_string for js in ctx.joined.values()]


async def test_three_trds_transit_with_wildcard_receiver(tmp_path: Path) -> None:
    rec3, wrec2 = Recorder(), Recorder()
    rec3.keep_payloads = True
    async with (
        transit(tmp_path) as (t1, t2, t3, d1, d2),
        await Context.create(t1.context()) as a,
        await Context.create(t2.context()) as b,
        await Context.create(t3.context()) as c,
    ):
        await c.create_receiver(TOPIC, rec3, attributes=t3.receiver())
        await b.create_wildcard_receiver(PATTERN, wrec2)
        src = await a.create_source(TOPIC, attributes=t1.source("tcp"))
        # the SRS told DRO2 of the TRD3 receiver; interest crossed DRO2 into TRD2 and DRO1
        await until(lambda: TOPIC in d2.portals["TRD2"].receivers, "DRO2's proxy receiver")
        await until(lambda: TOPIC in d1.portals["TRD1"].receivers, "DRO1's proxy receiver")
        # both receivers joined their proxy sources (resolved from the SRS in TRD3)
        await until(lambda: len(c.joined) == 1 and len(b.joined) == 1, "receivers joined")
        await until(lambda: src.receivers == 1, "DRO1 joined the source")
        await until(lambda: proxy_ready(d2, "TRD3", TOPIC), "the TRD3 receiver joined DRO2")
        await until(
            lambda: (
                d1.portals["TRD2"].sources
                and all(
                    px.raw is not None and px.raw.source.receivers >= 2
                    for px in d1.portals["TRD2"].sources.values()
                )
            ),
            "DRO1's proxy source in TRD2 has both the wildcard receiver and DRO2",
        )
        for i in range(COUNT):
            await src.send(_SEQ.pack(i) + bytes(12), flush=i % 200 == 199)
        src.flush()
        await until(lambda: len(rec3.sqns) >= COUNT and len(wrec2.sqns) >= COUNT, "all data")
        for r in (rec3, wrec2):
            assert r.sqns == list(range(r.sqns[0], r.sqns[0] + COUNT))
            assert r.losses == 0 and r.bos == 1
        assert [_SEQ.unpack_from(p)[0] for p in rec3.payloads] == list(range(COUNT))
        # the DRO path, hop by hop
        assert a.joined == {}
        assert _sessions(b) == proxy_source_strings(d1, "TRD2", TOPIC)
        assert _sessions(c) == proxy_source_strings(d2, "TRD3", TOPIC)
        dro2_in = d2.portals["TRD2"].rcv
        assert dro2_in is not None
        assert _sessions(dro2_in) == proxy_source_strings(d1, "TRD2", TOPIC)
        assert d2.portals["TRD3"].srs_interest_records >= 1
        # a UIM to the source ("SOURCE:" + the proxy's source string) reaches its origin
        got_a: list[Message] = []
        a.immediate_message_callback = got_a.append
        c.send_uim("SOURCE:" + _sessions(c)[0], b"to the source")
        await until(lambda: len(got_a) == 1, "the source UIM in TRD1")
        assert bytes(got_a[0].data) == b"to the source"
        assert (d1.uim.forwarded, d2.uim.forwarded) == (1, 1)
        # the source ends: EOS through both DROs
        await src.close()
        await until(lambda: rec3.eos == 1 and wrec2.eos == 1, "EOS at both receivers")


def _addr(ctx: Context) -> tuple[str, int]:
    addr = ctx.request_address
    assert addr is not None
    _tcp, ip, port = addr.split(":")
    return ip, int(port)


async def test_uim_and_request_response_across_two_dros(tmp_path: Path) -> None:
    """A UIM TCP:3:ip:port from TRD1 reaches TRD3 through both DROs and its answer to the
    reported source comes back; a request's REQUEST header is rewritten hop by hop, so the
    response retraces the path (each DRO forwards one request and one response)."""
    got_a: list[Message] = []
    got_c: list[Message] = []
    responses: list[Message] = []
    async with (
        transit(tmp_path) as (t1, _t2, t3, d1, d2),
        await Context.create(t1.context()) as a,
        await Context.create(t3.context()) as c,
    ):
        a.immediate_message_callback = got_a.append
        c.immediate_message_callback = got_c.append
        # each application learns its domain and a route to the other's (lbmrd; SRS DIR/RTIR)
        await until(lambda: a.domain_id == 1 and 3 in a.domain_routes, "TRD1 learns domain 3")
        await until(lambda: c.domain_id == 3 and 1 in c.domain_routes, "TRD3 learns domain 1")
        cip, cport = _addr(c)
        aip, aport = _addr(a)
        a.send_uim(f"TCP:3:{cip}:{cport}", b"hello across two DROs")
        await until(lambda: len(got_c) == 1, "the UIM in TRD3")
        assert bytes(got_c[0].data) == b"hello across two DROs"
        assert got_c[0].source == f"TCP:1:{aip}:{aport}"  # the originator, not a DRO
        c.send_uim(got_c[0].source, b"and back")
        await until(lambda: len(got_a) == 1, "the answer in TRD1")
        assert bytes(got_a[0].data) == b"and back"
        assert got_a[0].source == f"TCP:3:{cip}:{cport}"
        assert (d1.uim.forwarded, d2.uim.forwarded) == (2, 2)

        def answer(msg: Message) -> None:
            got_c.append(msg)
            msg.respond(b"response:" + bytes(msg.data))

        c.immediate_message_callback = answer
        req = a.send_uim_request(f"TCP:3:{cip}:{cport}", b"q1", responses.append)
        await until(lambda: len(responses) == 1, "the response in TRD1")
        assert bytes(responses[0].data) == b"response:q1"
        assert req.responses == 1
        # the request's REQUEST header named a DRO, not the requester: rewritten
        assert got_c[-1].response is not None
        assert (d1.uim.responses_forwarded, d2.uim.responses_forwarded) == (1, 1)
        assert d1.uim.no_route == d2.uim.no_route == 0
        req.close()
        # a request's response object holds the connection back to the requester until it is
        # collected: let that happen while the loop still runs
        got_c.clear()
        gc.collect()


# A short route recalculation backoff (UM's default is 5 s) for the routes a test waits for.
_QUICK_RECALC = '<route-recalculation backoff-interval="300" warning-interval="2000"/></daemon>'


async def test_transit_through_an_srs_trd(tmp_path: Path) -> None:
    """TRD1 -- DRO1 -- TRD2 (SRS) -- DRO2 -- TRD3: interest crosses a transit TRD resolved by
    the SRS, where no TNWG interest record can travel: DRO1 learns it from DRO2's
    remote-interest RIR (domain 3, the SRS forwards it to DROs) and keeps its domain, and the
    source's SIR there is DRO1's proxy.  Routes cross it as the DROs' RTIRs (no remote domain
    route record travels there either): DRO1 reaches domain 3 through DRO2's portal, and a UIM
    ``TCP:3:ip:port`` from TRD1 reaches TRD3 (and its answer comes back)."""
    srs = await DaemonProcess.start("srs", str(srs_xml(tmp_path)))
    rec = Recorder()
    got_a: list[Message] = []
    got_c: list[Message] = []
    try:
        t1, t2, t3 = Trd(), Trd(srs=srs.address), Trd()
        x1 = dro_xml([("TRD1", 1, t1), ("TRD2", 2, t2)], name="dro1")
        x2 = dro_xml([("TRD2", 2, t2), ("TRD3", 3, t3)], name="dro2")
        async with (
            running_dro(x1.replace("</daemon>", _QUICK_RECALC)) as d1,
            running_dro(x2.replace("</daemon>", _QUICK_RECALC)) as d2,
            await Context.create(t1.context()) as a,
            await Context.create(t3.context()) as c,
        ):
            await c.create_receiver(TOPIC, rec, attributes=t3.receiver())
            src = await a.create_source(TOPIC, attributes=t1.source("tcp"))
            await until(lambda: proxy_ready(d2, "TRD3", TOPIC), "the path through TRD2")
            # the interest crossing TRD2 keeps TRD3's domain id at DRO1 (not TRD2's: DRO2's
            # proxy receiver there is no receiver of TRD2), and DRO1 passes it on as domain 3
            key = InterestKey(TOPIC)
            assert d2.core.interest("TRD3") == {(key, 3)}
            assert d2.core.advertised_interest("TRD2") == [(key, 3)]
            assert d1.core.interest("TRD2") == {(key, 3)}
            assert d1.core.advertised_interest("TRD1") == [(key, 3)]
            assert d1.portals["TRD2"].srs_dro_interest >= 1
            # DRO2's proxy receiver's own RIR (domain 2) reached DRO1 too, and was not interest
            p12 = d1.portals["TRD2"]
            await until(lambda: p12.srs_proxy_interest_ignored >= 1, "the proxy receiver's RIR")
            assert d1.core.interest("TRD2") == {(key, 3)}
            for i in range(200):
                await src.send(_SEQ.pack(i), flush=i % 50 == 49)
            src.flush()
            await until(lambda: len(rec.sqns) >= 200, "200 messages")
            assert rec.sqns == list(range(rec.sqns[0], rec.sqns[0] + 200))
            assert rec.losses == 0
            assert a.joined == {} and src.receivers == 1
            dro2_in = d2.portals["TRD2"].rcv
            assert dro2_in is not None
            assert _sessions(dro2_in) == proxy_source_strings(d1, "TRD2", TOPIC)
            await src.close()
            await until(lambda: rec.eos == 1, "EOS through the SRS TRD")
            # routes: DRO2's RTIR in TRD2 names domain 3 at its portal's request port; DRO1
            # holds it as that portal's domain route (a UDP record would give the same)
            r1 = d1.core.router
            await until(lambda: r1.cost_to(3) is not None, "DRO1's route to domain 3")
            assert r1.cost_to(3) == (3, 2)  # TRD2 portal 1 + DRO2 1 + TRD3 1; DRO1, DRO2
            assert r1.toward(3) == "TRD2"
            ip2, port2 = d2.portals["TRD2"].request_address()
            assert r1.next_hop(2, 3) == (int(ipaddress.IPv4Address(ip2)), port2)
            assert d1.portals["TRD2"].srs_route_records >= 1
            # ... and advertises it into TRD1 (DRO2 likewise domain 1 into TRD3): a UIM crosses
            a.immediate_message_callback = got_a.append
            c.immediate_message_callback = got_c.append
            await until(lambda: 3 in a.domain_routes, "TRD1 learns domain 3")
            await until(lambda: 1 in c.domain_routes, "TRD3 learns domain 1")
            cip, cport = _addr(c)
            aip, aport = _addr(a)
            a.send_uim(f"TCP:3:{cip}:{cport}", b"through the SRS TRD")
            await until(lambda: len(got_c) == 1, "the UIM in TRD3")
            assert bytes(got_c[0].data) == b"through the SRS TRD"
            assert got_c[0].source == f"TCP:1:{aip}:{aport}"
            c.send_uim(got_c[0].source, b"and back")
            await until(lambda: len(got_a) == 1, "the answer in TRD1")
            assert bytes(got_a[0].data) == b"and back"
            assert (d1.uim.forwarded, d2.uim.forwarded) == (2, 2)
            assert d1.uim.no_route == d2.uim.no_route == 0
    finally:
        await srs.stop()


async def test_uim_through_one_dro() -> None:
    """TCP:2:ip:port from TRD1 through one DRO (multicast TRDs), and the answer back."""
    got_a: list[Message] = []
    got_b: list[Message] = []
    t1, t2 = Trd(), Trd()
    async with (
        running_dro(dro_xml([("TRD1", 1, t1), ("TRD2", 2, t2)])) as rt,
        await Context.create(t1.context()) as a,
        await Context.create(t2.context()) as b,
    ):
        a.immediate_message_callback = got_a.append
        b.immediate_topic_message_callback = got_b.append  # a UIM with a topic, no receiver
        await until(lambda: a.domain_id == 1 and 2 in a.domain_routes, "TRD1 learns domain 2")
        await until(lambda: b.domain_id == 2 and 1 in b.domain_routes, "TRD2 learns domain 1")
        bip, bport = _addr(b)
        aip, aport = _addr(a)
        a.send_uim(f"TCP:2:{bip}:{bport}", b"one hop", topic="dro.uim.topic")
        await until(lambda: len(got_b) == 1, "the UIM in TRD2")
        assert bytes(got_b[0].data) == b"one hop" and got_b[0].topic == "dro.uim.topic"
        assert got_b[0].source == f"TCP:1:{aip}:{aport}"
        b.send_uim(got_b[0].source, b"back")
        await until(lambda: len(got_a) == 1, "the answer in TRD1")
        assert rt.uim.forwarded == 2 and rt.uim.no_route == 0
