"""Late join and OTR through one DRO, answered by the origin (issue 19; notes A2, A7).

One process holds the origin's context (TRD1), the DRO (TRD1 and TRD2 endpoint portals) and
the receiver's context (TRD2); in the last test two DROs joined by a peer link
(TRD1 -DRO1~DRO2- TRD2).  The receiver only knows the DRO's proxy source; its late-join and
OTR requests go to the DRO's portal, which forwards them to the origin and relays the answers.
Each test proves the origin answered (its late-join service counted the retransmissions) and the
DRO relayed them (its forwarder's counters), and that the receiver's only session is the proxy.
"""

from __future__ import annotations

import asyncio
import struct
from collections.abc import Callable

from daemons.tnwgd.app import metric_specs
from daemons.tnwgd.portal import EndpointPortal
from tests.dro_peer.kit import PeerSpec, free_tcp_port, peer_dro_xml
from tests.dro_proc.kit import Trd, dro_xml, proxy_ready, proxy_source_strings, running_dro
from tests.integration.helpers import until
from umcore.api import Context, Message, Receiver, Source
from umcore.api import message as m
from umcore.dro import SourceKey

_SEQ = struct.Struct("!I")
# Every message retained by the origin (UM's default retains one).
RETAIN = {"late_join": "1", "retransmit_retention_size_threshold": "50000000"}


def _data(got: list[Message]) -> list[Message]:
    return [x for x in got if x.type == m.MSG_DATA]


async def _late_join(
    src: Source,
    ctx: Context,
    topic: str,
    rattrs: dict[str, str],
    joined: list[tuple[Callable[[], bool], str]],
    early: int,
    live: int,
    before_join: Callable[[], bool] = lambda: True,
) -> tuple[list[Message], Receiver]:
    """Send ``early`` messages nobody across the DRO wants yet, create a receiver in ``ctx``,
    wait for every ``joined`` condition (the proxies and the origin joined), send ``live``
    more; return the data messages the receiver got (every one, in order, the early ones as
    late-join retransmissions) and the receiver (for the caller to close).  ``before_join``
    must hold once the early messages are out, before the receiver exists."""
    for i in range(early):
        await src.send(_SEQ.pack(i), flush=i % 50 == 49)
    src.flush()
    assert before_join()
    got: list[Message] = []
    rcv = await ctx.create_receiver(topic, got.append, attributes=rattrs)
    for cond, what in joined:
        await until(cond, what)
    for i in range(early, early + live):
        await src.send(_SEQ.pack(i), flush=True)
    total = early + live
    await until(lambda: len(_data(got)) >= total, f"{total} messages", timeout=20)
    data = _data(got)
    assert [x.sequence_number for x in data] == list(range(total))
    assert [_SEQ.unpack(x.data)[0] for x in data] == list(range(total))
    rx = [x.sequence_number for x in data if x.flags & m.MSG_FLAG_RETRANSMIT]
    assert rx[:early] == list(range(early))  # every early message came by late join
    return data, rcv


async def test_late_join_through_the_dro_is_answered_by_the_origin() -> None:
    early, live = 300, 50
    topic = "dro.lj"
    trd1, trd2 = Trd(), Trd()
    xml = dro_xml([("TRD1", 1, trd1), ("TRD2", 2, trd2)])
    async with (
        running_dro(xml) as rt,
        await Context.create(trd1.context()) as a,
        await Context.create(trd2.context()) as b,
    ):
        src = await a.create_source(topic, attributes={**trd1.source(), **RETAIN})
        service = a.features.service
        assert service is not None
        joined = [
            (lambda: proxy_ready(rt, "TRD2", topic), "the receiver joined the proxy"),
            (lambda: src.receivers >= 1, "the DRO's proxy receiver joined the origin"),
        ]
        # nobody in TRD2 wants the topic before the receiver: the DRO forwards nothing
        data, rcv = await _late_join(
            src, b, topic, trd2.receiver(), joined, early, live,
            before_join=lambda: service.stats.retransmissions == 0,
        )  # fmt: skip
        n_rx = sum(1 for x in data if x.flags & m.MSG_FLAG_RETRANSMIT)
        assert not any(x.flags for x in data[n_rx:])
        # the DRO path: the receiver's source is the proxy source, not the origin
        assert {x.source for x in data} <= set(proxy_source_strings(rt, "TRD2", topic))
        # answered by the origin, relayed by the DRO (which has no retention buffer)
        assert service.stats.lji_requests >= 1
        assert service.stats.retransmissions >= early
        fwd = rt.core.recovery.stats
        assert fwd.lji_forwarded >= 1 and fwd.lj_info_relayed >= 1
        assert fwd.rxreq_forwarded >= early and fwd.retrans_relayed >= early
        assert fwd.unknown_proxy == 0 and fwd.no_route == 0
        figures = {spec.name: spec.getter() for spec in metric_specs(rt)}
        assert figures["pyum_tnwgd_recovery_retrans_relayed"] == fwd.retrans_relayed
        assert figures["pyum_tnwgd_recovery_send_failed"] == rt.recovery.send_failed
        # no Store here: the Store path's series exist, and say nothing was relayed
        assert figures["pyum_tnwgd_storepath_to_store"] == 0 == rt.stores.path.stats.to_store
        await rcv.close()
        await src.close()


async def test_otr_through_the_dro_recovers_from_the_origin() -> None:
    n = 400
    topic = "dro.otr"
    trd1, trd2 = Trd(), Trd()
    # LBT-RU out of the DRO: the receiver's context drops some of those datagrams and does not
    # NAK, so the transport gives the gaps up and OTR must fetch them from the origin
    xml = dro_xml([("TRD1", 1, trd1), ("TRD2", 2, trd2)], transport="lbtru")
    ropts = {
        **trd2.receiver(),
        "transport_lbtru_send_naks": "0",
        "transport_lbtru_nak_generation_interval": "300",
        "delivery_control_loss_check_interval": "100",
        "use_late_join": "0",
        "use_otr": "1",
        "otr_request_initial_delay": "50",
        "otr_request_minimum_interval": "50",
    }
    async with (
        running_dro(xml) as rt,
        await Context.create(trd1.context()) as a,
        await Context.create(trd2.context()) as b,
    ):
        got: list[Message] = []
        rcv = await b.create_receiver(topic, got.append, attributes=ropts)
        src = await a.create_source(topic, attributes={**trd1.source(), **RETAIN})
        await until(lambda: proxy_ready(rt, "TRD2", topic), "the receiver joined the proxy")
        await until(lambda: src.receivers >= 1, "the DRO's proxy receiver joined the origin")
        # message 0 before any loss (OTR does not recover a stream's leading loss)
        await src.send(_SEQ.pack(0), flush=True)
        await until(lambda: len(_data(got)) >= 1, "message 0 before loss starts")
        lbt = b.lbt
        assert lbt is not None  # the context's LBT-RU/RM side, with its fault injector
        lbt.drop_receive = 0.1
        for i in range(1, n):
            await src.send(_SEQ.pack(i), flush=True)
            await asyncio.sleep(0.001)  # pacing: one datagram per message on the LBT-RU hop
        await until(lambda: len(_data(got)) >= n, f"{n} messages", timeout=20)
        data = _data(got)
        assert [x.sequence_number for x in data] == list(range(n))
        assert [_SEQ.unpack(x.data)[0] for x in data] == list(range(n))
        otr = [x for x in data if x.flags & m.MSG_FLAG_OTR]
        assert otr, "no message came through OTR"
        assert lbt.fault_dropped > 0
        assert not any(x.type in (m.MSG_UNRECOVERABLE_LOSS, m.MSG_UNRECOVERABLE_LOSS_BURST)
                       for x in got)  # fmt: skip
        assert {x.source for x in data} <= set(proxy_source_strings(rt, "TRD2", topic))
        service = a.features.service
        assert service is not None
        assert service.stats.rx_requests >= len(otr)
        assert service.stats.retransmissions >= len(otr)
        fwd = rt.core.recovery.stats
        assert fwd.rxreq_forwarded >= len(otr) and fwd.retrans_relayed >= len(otr)
        await rcv.close()
        await src.close()


async def test_late_join_across_a_peer_link_is_answered_by_the_origin() -> None:
    early, live = 100, 20
    topic = "dro.lj.peer"
    trd1, trd2 = Trd(), Trd()
    port = free_tcp_port()
    xml1 = peer_dro_xml("dro1", [("TRD1", 1, trd1)], [PeerSpec("PEER", "acceptor", port)])
    xml2 = peer_dro_xml("dro2", [("TRD2", 2, trd2)], [PeerSpec("PEER", "initiator", port)])
    async with (
        running_dro(xml1) as rt1,
        running_dro(xml2) as rt2,
        await Context.create(trd1.context()) as a,
        await Context.create(trd2.context()) as b,
    ):
        await until(lambda: rt1.portals["PEER"].up and rt2.portals["PEER"].up, "link up")
        src = await a.create_source(topic, attributes={**trd1.source(), **RETAIN})
        joined = [
            (lambda: proxy_ready(rt2, "TRD2", topic), "the receiver joined DRO2's proxy"),
            (lambda: src.receivers >= 1, "DRO1's proxy receiver joined the origin"),
        ]
        _, rcv = await _late_join(src, b, topic, trd2.receiver(), joined, early, live)
        service = a.features.service
        assert service is not None and service.stats.retransmissions >= early
        for rt in (rt1, rt2):  # each DRO relayed them: DRO1 over the link, DRO2 to the receiver
            fwd = rt.core.recovery.stats
            assert fwd.lji_forwarded >= 1 and fwd.lj_info_relayed >= 1
            assert fwd.retrans_relayed >= early and fwd.no_route == 0
        egress = rt2.portals["TRD2"]
        assert isinstance(egress, EndpointPortal)
        (key,) = egress.sources  # DRO2's proxy source of the origin takes its frames off the link
        assert rt2.core.ingress_of(SourceKey(*key)) == "PEER"
        await rcv.close()
        await src.close()


async def test_late_join_through_two_dros_in_a_row() -> None:
    """TRD1 -DRO1- TRD2 -DRO2- TRD3: DRO2 forwards to DRO1's proxy source, DRO1 to the origin."""
    early, live = 100, 20
    topic = "dro.lj.transit"
    trd1, trd2, trd3 = Trd(), Trd(), Trd()
    xml1 = dro_xml([("TRD1", 1, trd1), ("TRD2", 2, trd2)], name="dro1")
    xml2 = dro_xml([("TRD2", 2, trd2), ("TRD3", 3, trd3)], name="dro2")
    async with (
        running_dro(xml1) as rt1,
        running_dro(xml2) as rt2,
        await Context.create(trd1.context()) as a,
        await Context.create(trd3.context()) as c,
    ):
        src = await a.create_source(topic, attributes={**trd1.source(), **RETAIN})
        joined = [
            (lambda: proxy_ready(rt2, "TRD3", topic), "the receiver joined DRO2's proxy"),
            (lambda: proxy_ready(rt1, "TRD2", topic), "DRO2 joined DRO1's proxy"),
            (lambda: src.receivers >= 1, "DRO1's proxy receiver joined the origin"),
        ]
        _, rcv = await _late_join(src, c, topic, trd3.receiver(), joined, early, live)
        service = a.features.service
        assert service is not None and service.stats.retransmissions >= early
        for rt in (rt1, rt2):
            fwd = rt.core.recovery.stats
            assert fwd.lj_info_relayed >= 1 and fwd.retrans_relayed >= early
            assert fwd.no_route == 0
        await rcv.close()
        await src.close()
