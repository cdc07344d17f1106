"""A persistent receiver across two DROs recovers what it missed while stopped, exactly once.

TRD1 holds a persistent source and its Store (umestored, a process), DRO1 (endpoint TRD1, peer
acceptor) and DRO2 (peer initiator, endpoint TRD2) are processes, and the persistent receiver
lives in TRD2 (the source and receivers in the test process).  The receiver learns the Store
from the SRI the DROs relay (umcore.dro.persist), which names DRO2's portal as the Store's
address: registration, ACKs, keepalives and retransmission requests go to DRO2, over the peer
link to DRO1 and from there to the Store, the Store's answers back the same way
(umcore.dro.storepath).  It registers, receives 0..29 live and is
closed (its consumption ACKs go out); the source sends 30..59 while no receiver is there; a new
receiver with the same Session ID (the Store keeps its RegID and last ACK) recovers 30..59 from
the Store and goes on live with 60..69: every message once, in order.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

from tests.dro_peer.kit import LINK_UP, PeerSpec, free_tcp_port, peer_dro_xml, start_dro
from tests.dro_proc.kit import Trd
from tests.integration.helpers import until
from tests.integration.persistkit import Received, SourceEvents, Topology, send_all
from tests.integration.test_lbmrd import scrape
from umcore.api import Context
from umcore.engine import message as m
from umcore.persist import events as ev

TOPIC = "peer.persisted"
WAIT = 30.0  # cold daemons on a busy 2-core machine; the test takes a few seconds
# The receiver's Session ID: with it the Store keeps its RegID and last ACK across restarts.
RCV_ATTRS = {"ume_session_id": "0x4242"}


def _address(spec: str) -> str:
    """``ip:port`` of a ``ume_store`` entry (``[DomainID:]IP:port[:RegID...]``)."""
    parts = spec.split(":")
    i = next(n for n, p in enumerate(parts) if p.count(".") == 3)
    return f"{parts[i]}:{parts[i + 1]}"


def _payloads(first: int, last: int) -> list[bytes]:
    return [b"msg %d" % i for i in range(first, last)]


async def test_persistent_receiver_across_two_dros_recovers_exactly_once(tmp_path: Path) -> None:
    trd1, trd2 = Trd(), Trd()
    port = free_tcp_port()
    xml1 = peer_dro_xml("dro1", [("TRD1", 1, trd1)], [PeerSpec("PEER", "acceptor", port)])
    xml2 = peer_dro_xml("dro2", [("TRD2", 2, trd2)], [PeerSpec("PEER", "initiator", port)])
    store_cfg = "".join(f"context {k} {v}\n" for k, v in trd1.context().items())
    store_cfg += "".join(f"source {k} {v}\n" for k, v in trd1.source("tcp").items())
    topo = Topology(tmp_path, store_cfg)
    dro1, dro2, store = await asyncio.gather(
        start_dro(tmp_path, "dro1", xml1, metrics=True),
        start_dro(tmp_path, "dro2", xml2, metrics=True),
        topo.add_store("disk", topics={TOPIC: {}}),
    )
    try:
        await dro1.wait_for_line(LINK_UP, WAIT)
        await dro2.wait_for_line(LINK_UP, WAIT)
        events = SourceEvents()
        sattrs = {**trd1.source("tcp"), "ume_store": store.spec}
        rattrs = {**trd2.receiver(), **RCV_ATTRS}
        async with await Context.create(trd1.context()) as sctx:
            src = await sctx.create_source(TOPIC, attributes=sattrs, on_event=events)
            await asyncio.wait_for(src.wait_registered(), WAIT)

            # 1. a receiver in TRD2 registers with the Store through what the DROs relay
            first = Received()
            async with await Context.create(trd2.context()) as rctx:
                rcv = await rctx.create_receiver(TOPIC, first, attributes=rattrs)
                await until(
                    lambda: first.of(ev.MSG_UME_REGISTRATION_COMPLETE_EX),
                    "registration across the DROs",
                    timeout=WAIT,
                )
                (succ1,) = first.of(ev.MSG_UME_REGISTRATION_SUCCESS_EX)
                # ... through the DROs: the SRI relayed into TRD2 names DRO2's portal, not the
                # Store (so every PREG, ACK, keepalive and RXREQ went to DRO2 and on by the link)
                assert succ1.store != _address(store.spec)
                # Registration does not wait for the Store's join of the source's TCP session,
                # and a Store new to a source never sees what came before it joined (see
                # tests/integration/test_persist_checks.py): the Store and DRO1's proxy
                # receiver both connected before the first message.
                await until(lambda: src.receivers >= 2, "the Store and DRO1 joined", timeout=WAIT)
                await send_all(src, _payloads(0, 30))
                await until(lambda: len(first.data()) >= 30, "0..29 live", timeout=WAIT)
                assert first.sqns() == list(range(30))
                assert [x.data for x in first.data()] == _payloads(0, 30)
                await rcv.close()  # the consumption ACKs go out on the way

            # 2. stopped: the source goes on, the Store keeps what the receiver misses
            await send_all(src, _payloads(30, 60))
            await until(lambda: events.stable() >= set(range(60)), "0..59 stable", timeout=WAIT)

            # 3. restarted with its Session ID: recovery from the Store, then live
            again = Received()
            async with await Context.create(trd2.context()) as rctx:
                rcv = await rctx.create_receiver(TOPIC, again, attributes=rattrs)
                await until(
                    lambda: again.of(ev.MSG_UME_REGISTRATION_COMPLETE_EX),
                    "re-registration",
                    timeout=WAIT,
                )
                (succ2,) = again.of(ev.MSG_UME_REGISTRATION_SUCCESS_EX)
                assert succ2.flags & ev.RCV_REG_FLAG_OLD  # the Store knew it
                assert succ2.rcv_registration_id == succ1.rcv_registration_id
                assert succ2.store == succ1.store  # DRO2's portal again
                assert succ2.src_registration_id == succ1.src_registration_id
                assert succ2.sequence_number == 30  # its last ACK + 1
                await until(lambda: len(again.data()) >= 30, "30..59 recovered", timeout=WAIT)
                await send_all(src, _payloads(60, 71))
                # 70 is the sentinel: what came before it is all that came
                await until(lambda: 70 in again.sqns(), "60..70 live", timeout=WAIT)
                got = again.data()
                assert [x.sequence_number for x in got] == list(range(30, 71))
                assert [x.data for x in got] == _payloads(30, 71)
                assert all(x.flags & m.MSG_FLAG_RETRANSMIT for x in got[:30])
                assert not any(x.flags & m.MSG_FLAG_RETRANSMIT for x in got[30:])
                await rcv.close()
            await src.close()
        # the relaying shows in the DROs' Prometheus series (each DRO counts its own share)
        figures = [scrape(dro1), scrape(dro2)]
        for name in ("storepath_to_store", "storepath_to_receiver"):
            assert sum(_series(f, name) for f in figures) > 0, name
        assert sum(_series(f, "storepath_send_failed") for f in figures) == 0
    finally:
        await store.kill()
        await dro2.kill()
        await dro1.kill()


def _series(figures: dict[str, float], name: str) -> float:
    """``pyum_tnwgd_<name>`` (a counter: exported with ``_total``)."""
    return figures[f"pyum_tnwgd_{name}_total"]
