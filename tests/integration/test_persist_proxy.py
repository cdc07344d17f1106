"""Check 27 (persistence-store.md section 7): proxy sources, end to end with real umestored.

Three Stores with ``allow-proxy-source 1`` (timers shortened through their XML: source activity
timeout 1.5 s, proxy-election-interval 1 s, state kept 10 min); a source with
``ume_proxy_source 1`` and a Session ID sends 0..9 and exits without deregistering.  After the
activity timeout and the election wait, exactly one Store runs a proxy (its log line); a new
receiver gets the proxy's SRI, registers with the Stores and recovers 0..9; the real source
restarting with its Session ID deletes the proxy (PROXY_SRC_REREGISTERED).
"""

from __future__ import annotations

import asyncio
import re
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from tests.integration.daemon_proc import DaemonProcess
from tests.integration.helpers import until
from tests.integration.persistkit import (
    TOPIC,
    WAIT,
    Received,
    SourceEvents,
    Store,
    Topology,
    send_all,
    source_attrs,
    topology,
)
from umcore.api import Context
from umcore.engine import message as m
from umcore.persist import events as ev

pytestmark = pytest.mark.usefixtures("reset_configuration")

TIMERS = {
    "source-activity-timeout": "1500",
    "receiver-activity-timeout": "1500",
    "source-check-interval": "250",
    "source-state-lifetime": "600000",
    "receiver-state-lifetime": "600000",
    "proxy-election-interval": "1000",
}
CREATED = re.compile(r"proxy source for topic '[^']+' \(source RegID (\d+)\) created")
DELETED = re.compile(r"proxy source for topic '[^']+' \(source RegID (\d+)\) deleted: (\w+)")


@pytest.fixture
async def topo(tmp_path: Path, lbmrd: DaemonProcess) -> AsyncIterator[Topology]:
    async with topology(tmp_path, lbmrd) as t:
        yield t


def running(st: Store) -> int:
    """Proxies the Store's log says it runs (created minus deleted)."""
    lines = st.lines()
    made = sum(1 for line in lines if CREATED.search(line))
    gone = sum(1 for line in lines if DELETED.search(line))
    return made - gone


async def test_check27_proxy_source_elected_serves_recovery_and_yields(topo: Topology) -> None:
    stores = [
        await topo.add_store(
            "memory", topics={TOPIC: TIMERS}, store_options={"allow-proxy-source": "1"}
        )
        for _ in range(3)
    ]
    attrs = source_attrs(stores, ume_proxy_source="1", ume_session_id="0x2701")
    async with await Context.create() as sctx:
        events = SourceEvents()
        src = await sctx.create_source(TOPIC, attributes=attrs, on_event=events)
        await asyncio.wait_for(src.wait_registered(), WAIT)
        await send_all(src, [b"m%d" % i for i in range(10)])
        await until(lambda: events.stable() >= set(range(10)), "0..9 stable", timeout=WAIT)
        await src.close()  # a crash as the Stores see it: no deregistration

    await until(lambda: any(running(s) for s in stores), "a proxy elected", timeout=WAIT)
    async with await Context.create() as rctx:
        got = Received()
        rcv = await rctx.create_receiver(TOPIC, got)
        await until(lambda: got.sqns() == list(range(10)), "0..9 recovered", timeout=WAIT)
        assert all(x.flags & m.MSG_FLAG_RETRANSMIT for x in got.data())
        assert [x.data for x in got.data()] == [b"m%d" % i for i in range(10)]
        assert got.of(ev.MSG_UME_REGISTRATION_COMPLETE_EX)
        await rcv.close()
    # exactly one survives the election (a collision's loser has withdrawn by now: the proxies
    # announce their token every half interval and the receiver needed longer than that)
    await until(
        lambda: (
            [running(s) for s in stores].count(1) == 1 and all(running(s) in (0, 1) for s in stores)
        ),
        "exactly one proxy",
        timeout=WAIT,
    )
    (owner,) = [s for s in stores if running(s) == 1]

    async with await Context.create() as sctx:
        events = SourceEvents()
        src = await sctx.create_source(TOPIC, attributes=attrs, on_event=events)
        await asyncio.wait_for(src.wait_registered(), WAIT)
        assert owner.proc is not None
        await owner.proc.wait_for_line(DELETED, WAIT)
        assert any(
            (mt := DELETED.search(line)) and mt.group(2) == "PROXY_SRC_REREGISTERED"
            for line in owner.lines()
        )
        assert all(running(s) == 0 for s in stores)
        await src.close()
