"""A source that sends the moment its registration completes, before the Store has joined its
transport: the Store still ends up with every message (umcore.store.catchup: late join to the
source, which retains what is not stable), and a receiver that registers afterwards recovers all
of them from the Store.  Real umestored, pyum source and receiver.

The Store's join normally wins the race against the source's first send (its context already
knows the source's TIR), so the test makes the join never happen: the Store resolves topics
through an lbmrd that does not exist, and the source makes no proactive retransmissions
(``ume_message_stability_timeout`` 0).  Everything the Store holds then came by late join."""

from __future__ import annotations

import asyncio

import pytest

from tests.integration.helpers import lbmrd_client_lines, until
from tests.integration.persistkit import (
    TCP_LINES,
    TOPIC,
    WAIT,
    Received,
    SourceEvents,
    Topology,
    free_port,
    send_all,
    source_attrs,
)
from umcore.api import Context
from umcore.persist import events as ev

pytestmark = pytest.mark.usefixtures("reset_configuration")


async def test_messages_sent_before_the_store_joined_are_all_stored(topo: Topology) -> None:
    st = await topo.add_store("disk", start=False)
    nowhere = lbmrd_client_lines(("127.0.0.1", free_port())) + TCP_LINES
    (st.dir / "store.cfg").write_text(nowhere)  # the Store never resolves the source's TIR
    await st.start()
    n = 100
    payloads = [b"early %d" % i for i in range(n)]
    events = SourceEvents()
    async with await Context.create() as sctx:
        # no proactive retransmissions: what the Store gets, it gets by late join
        attrs = source_attrs([st], ume_message_stability_timeout="0")
        src = await sctx.create_source(TOPIC, attributes=attrs, on_event=events)
        await asyncio.wait_for(src.wait_registered(), WAIT)
        await send_all(src, payloads)  # at once, no wait for a join
        await until(lambda: events.stable() >= set(range(n)), "all stable", timeout=WAIT)
        assert not events.of(ev.SRC_EVENT_UME_MESSAGE_NOT_STABLE)
        assert any(f"{n} message(s) from sqn 0 to {n - 1}" in line for line in st.lines())
        assert not any("transport session" in line for line in st.lines())  # never joined

        got = Received()
        async with await Context.create() as rctx:
            rcv = await rctx.create_receiver(TOPIC, got)
            await until(lambda: len(got.data()) >= n, "the recovered messages", timeout=WAIT)
            (rsucc,) = got.of(ev.MSG_UME_REGISTRATION_SUCCESS_EX)
            assert rsucc.sequence_number == 0  # the Store holds the stream from its start
            assert got.sqns()[:n] == list(range(n))
            assert [x.data for x in got.data()[:n]] == payloads
            await rcv.close()
        await src.close()
