"""The Store crash loop (issue 18): SIGKILL at random moments under load, nothing acknowledged lost.

One Store (disk repository), a persistent source sending without pause (retrying while the
Store is gone: UMENoReg) and a persistent receiver consuming; twenty cycles of SIGKILL at a
random moment (during registration, mid-stream, during recovery) and a restart on the same
port; for two fixed seeds (the machine's timing moves the kills anyway, so each run lands
them at new moments).  Then: every message the source saw stable is recovered by a fresh
receiver, byte-identical; the consuming receiver got every message once (it consumes live from
the source's transport: a Store restart gives it nothing twice); the Store kept the source's
RegID through every restart.  And with three Stores under quorum, one Store killed per cycle:
the source never blocks (no UMENoReg) and everything becomes stable.
"""

from __future__ import annotations

import asyncio
import random
from typing import Any

import pytest

from tests.integration.helpers import until
from tests.integration.persistkit import (
    TOPIC,
    WAIT,
    Received,
    SourceEvents,
    Topology,
    source_attrs,
)
from umcore.api import Context
from umcore.errors import UMENoReg
from umcore.persist import events as ev

pytestmark = [pytest.mark.usefixtures("reset_configuration"), pytest.mark.slow]

CYCLES = 20
PACE_S = 0.002  # between sends: ~500 msgs/s, enough that every kill lands mid-stream
FAST = {
    "ume_store_activity_timeout": "800",
    "ume_store_check_interval": "100",
    "ume_registration_interval": "200",
    "ume_message_stability_timeout": "1000",
}


class Sender:
    """Sends numbered payloads until stopped; a refused send (no quorum) is retried."""

    def __init__(self, src: Any) -> None:
        self.src = src
        self.sent: dict[int, bytes] = {}
        self.refused = 0
        self.stop = False
        self.task = asyncio.ensure_future(self._run())

    async def _run(self) -> None:
        i = 0
        while not self.stop:
            payload = b"crash-loop message %08d " % i + bytes(range(i % 7, i % 7 + 24))
            try:
                await self.src.send(payload, flush=True)
            except UMENoReg:
                self.refused += 1
                await asyncio.sleep(0.05)  # the Store is gone: try again (umesrc's retry)
                continue
            self.sent[i] = payload
            i += 1
            await asyncio.sleep(PACE_S)

    async def finish(self) -> None:
        self.stop = True
        await asyncio.wait_for(self.task, WAIT)


@pytest.mark.parametrize("seed", [1, 2])
async def test_twenty_kills_lose_nothing_acknowledged(topo: Topology, seed: int) -> None:
    rng = random.Random(seed)
    st = await topo.add_store("disk")
    events = SourceEvents()
    consumed = Received()
    async with await Context.create() as sctx, await Context.create() as rctx:
        src = await sctx.create_source(
            TOPIC, attributes=source_attrs([st], ume_session_id="0x5eed", **FAST),
            on_event=events,
        )  # fmt: skip
        await asyncio.wait_for(src.wait_registered(), WAIT)
        reg_ids = {events.of(ev.SRC_EVENT_UME_REGISTRATION_SUCCESS_EX)[0].registration_id}
        rcv = await rctx.create_receiver(TOPIC, consumed, attributes={"ume_session_id": "0xc0"})
        await until(
            lambda: consumed.of(ev.MSG_UME_REGISTRATION_COMPLETE_EX), "receiver", timeout=WAIT
        )
        sender = Sender(src)
        for _ in range(CYCLES):
            await asyncio.sleep(rng.uniform(0.0, 0.6))
            await st.kill()
            await st.start()
            # the restarted Store makes messages stable again (the source re-registers when it
            # noticed the Store gone; a Store back within the activity timeout just goes on)
            n = events.stable_count()
            await until(lambda n=n: events.stable_count() > n + 10, "stability again", timeout=WAIT)
        await sender.finish()
        sent = sender.sent
        await until(lambda: events.all_stable(sent), "everything stable", timeout=WAIT)
        reg_ids |= {i.registration_id for i in events.of(ev.SRC_EVENT_UME_REGISTRATION_SUCCESS_EX)}
        assert len(reg_ids) == 1  # the Store kept the source's RegID through every restart
        again = events.of(ev.SRC_EVENT_UME_REGISTRATION_SUCCESS_EX)[1:]
        assert all(i.flags & ev.REG_FLAG_OLD for i in again)  # state kept: never registered new

        await until(lambda: len(consumed.data()) >= len(sent), "consumed", timeout=WAIT)
        assert consumed.sqns() == sorted(sent)  # each once, in order
        # a fresh receiver recovers every stable message, byte-identical
        fresh = Received()
        async with await Context.create() as fctx:
            frcv = await fctx.create_receiver(TOPIC, fresh)
            await until(lambda: len(fresh.data()) >= len(sent), "recovery", timeout=WAIT)
            assert {x.sequence_number: x.data for x in fresh.data()} == sent
            await frcv.close()
        await rcv.close()
        await src.close()


async def test_one_of_three_stores_killed_per_cycle_never_blocks_the_source(
    topo: Topology,
) -> None:
    rng = random.Random(4)
    stores = [await topo.add_store("disk") for _ in range(3)]
    events = SourceEvents()
    attrs = source_attrs(stores, ume_session_id="0x3", **FAST)
    # the source keeps what it sent, so a Store back from a kill catches up from it
    attrs["retransmit_retention_size_threshold"] = "10000000"
    async with await Context.create() as sctx:
        src = await sctx.create_source(TOPIC, attributes=attrs, on_event=events)
        await asyncio.wait_for(src.wait_registered(), WAIT)
        sender = Sender(src)
        for _ in range(CYCLES // 2):
            index = rng.randrange(len(stores))
            victim = stores[index]
            await asyncio.sleep(rng.uniform(0.0, 0.5))
            await victim.kill()
            await victim.start()
            # Up again once the source hears from it: the Store back at work ACKs a message
            # sent after its restart.  (A quorum alone is no sign: the two others make one
            # while the restarted Store still re-registers; the next kill then left one.)
            mark = len(events.got)
            await until(
                lambda mark=mark, index=index: any(
                    code == ev.SRC_EVENT_UME_MESSAGE_STABLE_EX
                    and info.flags & ev.STABLE_FLAG_STORE
                    and info.store_index == index
                    for code, info in events.got[mark:]
                ),
                f"{victim.name} ACKing again",
                timeout=WAIT,
            )
        await sender.finish()
        assert sender.refused == 0  # two of three Stores were always up: never blocked
        await until(lambda: events.all_stable(sender.sent), "all stable", timeout=WAIT)
        await src.close()
