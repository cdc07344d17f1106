"""Check 27 (persistence-store.md section 7): proxy sources, end to end with real umestored.

Three Stores with ``allow-proxy-source 1`` (timers shortened through their XML: source activity
timeout 1.5 s, proxy-election-interval 1 s, state kept 10 min); a source with
``ume_proxy_source 1`` and a Session ID sends 0..9 and exits without deregistering.  After the
activity timeout and the election wait, exactly one Store runs a proxy (its log line); a new
receiver gets the proxy's SRI, registers with the Stores and recovers 0..9; the real source
restarting with its Session ID deletes the proxy on every Store, PROXY_SOURCE_DELETED with
reason PROXY_SRC_REREGISTERED in the Stores' UMP events.

Election algorithm 2 (``proxy-source-repo-quorum-required 1``): with one of the three Stores
killed a proxy still appears (2 of 3 take part) and a new receiver recovers through it; the
Store running it killed too, the last one re-elects but finds no quorum ("no quorum", no
proxy).  Re-election: with all three alive, the Store running the proxy is killed; after its
announcements stop (umcore.store.proxy.silence_bound) another Store's proxy takes over and a
new receiver still recovers.
"""

from __future__ import annotations

import asyncio
import re
from collections.abc import Callable

import pytest

from tests.integration.helpers import until
from tests.integration.persistkit import (
    MONITOR_TOPIC,
    TOPIC,
    WAIT,
    Received,
    SourceEvents,
    Store,
    Topology,
    send_all,
    source_attrs,
)
from umcore.api import Context
from umcore.engine import message as m
from umcore.monitor.framing import LBMMonError, decode_packet
from umcore.monitor.pb import ump_mon_pb2
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
SRI_KEPT = re.compile(r"SRI naming 3 Store\(s\) kept for a proxy source")
FOLLOWING = re.compile(r"proxy source for topic .* runs at Store ([\d.]+:\d+): following it")
NO_QUORUM = re.compile(r"proxy source for topic .* no quorum, no proxy")
REELECT = re.compile(r"proxy source for topic .* silent for [\d.]+ s: electing again")
QUORUM = {"allow-proxy-source": "1", "proxy-source-repo-quorum-required": "1"}
_EV = ump_mon_pb2.UMPMonMsg.Events


class MonitorEvents:
    """The Stores' UMP events (``UMPMonMsg.events`` on :data:`MONITOR_TOPIC`): (store name,
    event type, deletion reason), in arrival order."""

    def __init__(self) -> None:
        self.got: list[tuple[str, int, int]] = []

    def __call__(self, msg: m.Message) -> None:
        if msg.type != m.MSG_DATA:
            return
        try:
            ump = ump_mon_pb2.UMPMonMsg.FromString(bytes(decode_packet(msg.data).data))
        except (LBMMonError, ValueError):
            return
        name = ump.attributes.application_id
        for e in ump.events.events:
            self.got.append((name, e.event_type, e.deletion_reason_code))

    def count(self, store: Store, kind: int, reason: int | None = None) -> int:
        return sum(
            1
            for name, k, r in self.got
            if name == store.name and k == kind and (reason is None or r == reason)
        )


def running(st: Store) -> int:
    """Proxies the Store's log says it runs (created minus deleted)."""
    lines = st.lines()
    made = sum(1 for line in lines if CREATED.search(line))
    gone = sum(1 for line in lines if DELETED.search(line))
    return made - gone


async def sent_and_gone(stores: list[Store], attrs: dict[str, str]) -> None:
    """A proxied source sends 0..9, sees them stable and exits without deregistering (a crash
    as the Stores see it)."""
    async with await Context.create() as sctx:
        events = SourceEvents()
        src = await sctx.create_source(TOPIC, attributes=attrs, on_event=events)
        await asyncio.wait_for(src.wait_registered(), WAIT)
        await send_all(src, [b"m%d" % i for i in range(10)])
        await until(lambda: events.stable() >= set(range(10)), "0..9 stable", timeout=WAIT)
        await sri_kept(stores)
        await src.close()


async def sri_kept(stores: list[Store]) -> None:
    """Every Store holds the source's SRI (what it needs to take part in the election)."""
    await watch(
        stores,
        lambda: all(any(SRI_KEPT.search(line) for line in s.lines()) for s in stores),
        "the SRI at every Store",
    )


async def recovers(stores: list[Store], what: str) -> None:
    """A new receiver gets a proxy's SRI, registers and recovers 0..9."""
    async with await Context.create() as rctx:
        got = Received()
        rcv = await rctx.create_receiver(TOPIC, got)
        await watch(stores, lambda: got.sqns() == list(range(10)), f"0..9 recovered {what}")
        assert all(x.flags & m.MSG_FLAG_RETRANSMIT for x in got.data())
        assert [x.data for x in got.data()] == [b"m%d" % i for i in range(10)]
        assert got.of(ev.MSG_UME_REGISTRATION_COMPLETE_EX)
        await rcv.close()


async def watch(stores: list[Store], pred: Callable[[], object], what: str) -> None:
    """:func:`until` ``pred``; on a timeout the Stores' logs are printed (captured output)."""
    try:
        await until(pred, what, timeout=WAIT)
    except AssertionError:
        for s in stores:
            print(f"===== {s.name} (last 60 lines)", *s.lines()[-60:], sep="\n")
        raise


def settled(stores: list[Store]) -> Store | None:
    """The Store running the one proxy when every other one's last "following" line names
    it, else None."""
    if not one_running(stores):
        return None
    (owner,) = [s for s in stores if running(s) == 1]
    for s in stores:
        if s is not owner:
            follows = [m for line in s.lines() if (m := FOLLOWING.search(line))]
            if not follows or follows[-1].group(1) != f"127.0.0.1:{owner.port}":
                return None
    return owner


def one_running(stores: list[Store]) -> bool:
    counts = [running(s) for s in stores]
    return counts.count(1) == 1 and all(c in (0, 1) for c in counts)


async def test_check27_proxy_source_elected_serves_recovery_and_yields(topo: Topology) -> None:
    stores = [
        await topo.add_store(
            "memory", topics={TOPIC: TIMERS}, store_options={"allow-proxy-source": "1"},
            control=True, publish=True,
        )
        for _ in range(3)
    ]  # fmt: skip
    attrs = source_attrs(stores, ume_proxy_source="1", ume_session_id="0x2701")
    async with await Context.create() as mctx:
        mon = MonitorEvents()
        await mctx.create_receiver(MONITOR_TOPIC, mon)
        await sent_and_gone(stores, attrs)

        # exactly one survives the election (a collision's loser withdraws once it hears the
        # winner's SRI: the proxies announce their token every half interval), then check 27's
        # new receiver registers through its SRI and recovers
        await watch(stores, lambda: settled(stores) is not None, "exactly one proxy")
        owner = settled(stores)
        assert owner is not None
        await recovers(stores, "through the proxy")

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
            # the UMP events: the owner's proxy went with reason PROXY_SRC_REREGISTERED, and
            # every Store deleted each proxy it created (a collision's loser: DELETED)
            await until(
                lambda: mon.count(
                    owner, _EV.PROXY_SOURCE_DELETED_EVENT, _EV.PROXY_SRC_REREGISTERED
                ) == 1 and all(
                    mon.count(s, _EV.PROXY_SOURCE_CREATED_EVENT)
                    == mon.count(s, _EV.PROXY_SOURCE_DELETED_EVENT)
                    for s in stores
                ),
                "PROXY_SOURCE_DELETED (PROXY_SRC_REREGISTERED) in the UMP events",
                timeout=WAIT,
            )  # fmt: skip
            assert mon.count(owner, _EV.PROXY_SOURCE_CREATED_EVENT) == 1
            await src.close()


@pytest.mark.slow
async def test_algorithm2_quorum_with_one_store_killed_then_none_with_two(
    topo: Topology,
) -> None:
    stores = [
        await topo.add_store("memory", topics={TOPIC: TIMERS}, store_options=QUORUM)
        for _ in range(3)
    ]
    attrs = source_attrs(stores, ume_proxy_source="1", ume_session_id="0x2702")
    async with await Context.create() as sctx:
        events = SourceEvents()
        src = await sctx.create_source(TOPIC, attributes=attrs, on_event=events)
        await asyncio.wait_for(src.wait_registered(), WAIT)
        await send_all(src, [b"m%d" % i for i in range(10)])
        await until(lambda: events.stable() >= set(range(10)), "0..9 stable", timeout=WAIT)
        await sri_kept(stores)
        await stores[2].kill()  # one of three gone before the source dies
        await src.close()
    alive = stores[:2]
    await watch(alive, lambda: settled(alive) is not None, "one proxy with 2 of 3")
    owner = settled(alive)
    assert owner is not None
    await recovers(alive, "through the proxy, one Store dead")
    (last,) = [s for s in alive if s is not owner]
    await owner.kill()  # two of three gone: the last one re-elects and finds no quorum
    assert last.proc is not None
    await last.proc.wait_for_line(REELECT, WAIT)
    await last.proc.wait_for_line(NO_QUORUM, WAIT)
    assert running(last) == 0


@pytest.mark.slow
async def test_reelection_when_the_proxy_store_dies(topo: Topology) -> None:
    stores = [
        await topo.add_store("memory", topics={TOPIC: TIMERS}, store_options=QUORUM)
        for _ in range(3)
    ]
    attrs = source_attrs(stores, ume_proxy_source="1", ume_session_id="0x2703")
    await sent_and_gone(stores, attrs)
    # the election settled: one Store runs the proxy and the two others follow it (else a
    # Store still waiting, or a collision's loser not yet withdrawn, would simply win the first
    # election once that Store is killed)
    await watch(stores, lambda: settled(stores) is not None, "one proxy, followed by the others")
    first = settled(stores)
    assert first is not None
    others = [s for s in stores if s is not first]
    await first.kill()
    await watch(others, lambda: settled(others) is not None, "another Store's proxy")
    assert any(REELECT.search(line) for s in others for line in s.lines())
    await recovers(others, "through the re-elected proxy")


def state_keeps_sri(st: Store) -> bool:
    """The Store's state file of the source holds its proxy request and SRI (JSON body after
    the 24-byte header, umcore.store.state)."""
    files = list((st.dir / "state").glob("*-state"))
    return (
        len(files) == 1
        and b'"proxy":true' in (body := files[0].read_bytes()[24:])
        and (b'"proxy_sri":""' not in body)
    )


@pytest.mark.slow
async def test_stores_restarted_from_disk_elect_a_proxy(topo: Topology) -> None:
    stores = [
        await topo.add_store("disk", topics={TOPIC: TIMERS}, store_options=QUORUM) for _ in range(3)
    ]
    attrs = source_attrs(stores, ume_proxy_source="1", ume_session_id="0x2704")
    async with await Context.create() as sctx:
        events = SourceEvents()
        src = await sctx.create_source(TOPIC, attributes=attrs, on_event=events)
        await asyncio.wait_for(src.wait_registered(), WAIT)
        await send_all(src, [b"m%d" % i for i in range(10)])
        await until(lambda: events.stable() >= set(range(10)), "0..9 stable", timeout=WAIT)
        await sri_kept(stores)
        await until(lambda: all(state_keeps_sri(s) for s in stores), "SRIs in state files")
        for st in stores:  # every Store dies while the source still runs ...
            await st.kill()
        await src.close()  # ... and the source dies too
    for st in stores:  # the Stores come back from their disk state, the source does not
        await st.start()
    await watch(stores, lambda: any(running(s) for s in stores), "a proxy from restored state")
    await recovers(stores, "through a proxy of restored Stores")
