"""Issue 16 end to end: a receiver returning to a memory Store at its default retention.

A real umestored with a ``memory`` repository at the default ``repository-size-threshold``
(1024 bytes: the Store keeps the newest kilobyte, per UM), a pyum source and receiver in one
TRD (no DRO).  The receiver consumes 0..29 and is closed; 30..59 are sent and become stable;
the receiver returns with its Session ID (OLD, low 30).  The Store logs which of 30..59 it no
longer holds, serves the newest ones, and the receiver reports the rest as unrecoverable loss
(its request timeout shortened to 500 ms) and goes on live: every sequence number exactly once,
delivered or lost.  The sans-IO side is tests/store/test_core_memory_retention.py.
"""

from __future__ import annotations

import asyncio
import re

import pytest

from tests.integration.helpers import until
from tests.integration.persistkit import (
    TOPIC,
    WAIT,
    Received,
    SourceEvents,
    Topology,
    send_all,
    source_attrs,
)
from tests.integration.test_persist_checks import lost
from tests.integration.test_umestored import scrape
from umcore.api import Context
from umcore.engine import message as m
from umcore.persist import events as ev

pytestmark = pytest.mark.usefixtures("reset_configuration")

RCV_ATTRS = {
    "ume_session_id": "0x4242",
    "retransmit_request_interval": "100",
    # then unrecoverable loss (default 10 s: the test would take ~20 s)
    "retransmit_request_message_timeout": "500",
}


def _payloads(first: int, last: int) -> list[bytes]:
    return [b"msg %d" % i for i in range(first, last)]


async def test_issue16_returning_receiver_gets_what_a_default_memory_store_holds(
    topo: Topology,
) -> None:
    st = await topo.add_store("memory", metrics=True)  # every retention option at its default
    events = SourceEvents()
    async with await Context.create() as sctx:
        src = await sctx.create_source(TOPIC, attributes=source_attrs([st]), on_event=events)
        await asyncio.wait_for(src.wait_registered(), WAIT)

        first = Received()
        async with await Context.create() as rctx:
            rcv = await rctx.create_receiver(TOPIC, first, attributes=RCV_ATTRS)
            await until(
                lambda: first.of(ev.MSG_UME_REGISTRATION_COMPLETE_EX), "registered", timeout=WAIT
            )
            # the Store and the receiver joined before the first message (a Store new to a
            # source never sees what came before it joined)
            await until(lambda: src.receivers >= 2, "the Store and receiver joined", timeout=WAIT)
            await send_all(src, _payloads(0, 30))
            await until(lambda: first.sqns() == list(range(30)), "0..29 live", timeout=WAIT)
            await rcv.close()  # its consumption ACK of 29 goes out on the way
        (succ1,) = first.of(ev.MSG_UME_REGISTRATION_SUCCESS_EX)

        await send_all(src, _payloads(30, 60))
        await until(lambda: events.stable() >= set(range(60)), "0..59 stable", timeout=WAIT)

        again = Received()
        async with await Context.create() as rctx:
            rcv = await rctx.create_receiver(TOPIC, again, attributes=RCV_ATTRS)
            await until(
                lambda: set(again.sqns()) | lost(again) >= set(range(30, 60)),
                "30..59 recovered or reported lost",
                timeout=WAIT,
            )
            (succ2,) = again.of(ev.MSG_UME_REGISTRATION_SUCCESS_EX)
            assert succ2.flags & ev.RCV_REG_FLAG_OLD
            assert succ2.rcv_registration_id == succ1.rcv_registration_id
            assert succ2.sequence_number == 30  # its last ACK + 1, held or not

            got = again.data()
            trail = got[0].sequence_number  # the oldest the Store still held
            assert 30 < trail < 60, trail  # ~1 KiB: some of the backlog, not all of it
            assert [x.sequence_number for x in got] == list(range(trail, 60))
            assert [x.data for x in got] == _payloads(trail, 60)
            assert all(x.flags & m.MSG_FLAG_RETRANSMIT for x in got)
            assert lost(again) == set(range(30, trail))
            assert st.proc is not None
            await st.proc.wait_for_line(
                rf"resumes at sqn 30, but sqns 30\.\.{trail - 1} are before the repository's "
                rf"oldest, not held \(released by the memory repository's retention: "
                rf"{re.escape('repository-size-threshold 1024 bytes')}",
                WAIT,
            )

            await src.send(b"msg 60", flush=True)
            await until(lambda: again.sqns()[-1:] == [60], "60 live", timeout=WAIT)
            live = again.data()[-1]
            assert live.data == b"msg 60" and not live.flags & m.MSG_FLAG_RETRANSMIT
            assert again.sqns() == list(range(trail, 61))
            await rcv.close()
        await src.close()
    samples = await scrape(st.proc)
    counts = {n: v for (n, _labels), v in samples.items() if n.startswith("pyum_umestored_")}
    assert counts["pyum_umestored_rx_released_total"] >= trail - 30
    assert counts["pyum_umestored_retransmissions_total"] >= 60 - trail
