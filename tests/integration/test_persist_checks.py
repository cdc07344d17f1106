"""The rest of persistence-store.md section 7's client-side checks, end to end with real umestored
processes (the pattern and helpers of test_persist.py, in tests/integration/persistkit.py).

Each test names the check it covers: 3, 4, 5, 8, 10, 14, 17, 18, 19, 26.  Store timers are
shortened through the Stores' XML (activity timeouts, check intervals, keepalives) and the
clients' through their options, so that every check shows within a few seconds; every wait is
bounded.  Where a check is scaled or differs from its text:

- 3: the activity timeout is 1.5 s, not 30 s.
- 8: the burst is paced (a few messages per Store read) so that unbatched ACKs would show as
  many small ones; the trickle's ACK must come after the batch delay, before the next message.
- 10: the Store's high ACK is read from its /metrics (``pyum_ump_receiver_high_ack_sqn``, the
  protobuf ``RcvStat.high_ack_sqn``), not a web page.
- 17: Store A loses the messages through daemon control's ``mark`` (every one of them, since the
  round robin decides which requests go to A).
- 19: 600 messages instead of 10,000 (100 s at 100 requests/s); the first burst still overflows
  the queue (4 x the rate) and re-requests complete the recovery.
- 26: "a late receiver recovers" (through a proxy source in the check's text) is shown here after
  the source returns with its Session ID: the kept state answers OLD and a new receiver recovers
  the messages sent before the exit; the deleted one answers as new.  Recovery through a proxy
  source is check 27, in test_persist_proxy.py.
"""

from __future__ import annotations

import asyncio
import re
import signal
from typing import Any

import pytest

from tests.integration.helpers import until
from tests.integration.persistkit import (
    TOPIC,
    WAIT,
    Received,
    SourceEvents,
    Topology,
    control_request,
    send_all,
    source_attrs,
)
from tests.integration.test_umestored import scrape
from umcore.api import Context
from umcore.engine import message as m
from umcore.persist import events as ev

pytestmark = pytest.mark.usefixtures("reset_configuration")

# A source that notices a Store going away within seconds (defaults: 10 s / 500 ms / 3 s).
FAST_SOURCE = {
    "ume_store_activity_timeout": "1500",
    "ume_store_check_interval": "250",
    "ume_registration_interval": "500",
}


class AckBatches(SourceEvents):
    """A source's events, and per stable sequence number which of the source's stability ACKs
    (its count when the event came) made it stable."""

    def __init__(self) -> None:
        super().__init__()
        self.src: Any = None
        self.batch_of: dict[int, int] = {}

    def __call__(self, code: int, info: Any) -> None:
        super().__call__(code, info)
        if code == ev.SRC_EVENT_UME_MESSAGE_STABLE_EX and self.src is not None:
            acks = self.src.gate.core.stats()["stability_acks"]
            self.batch_of.setdefault(info.sequence_number, acks)


def errors(events: SourceEvents) -> list[str]:
    return [i.text for i in events.of(ev.SRC_EVENT_UME_REGISTRATION_ERROR)]


# --- check 3: strong RegIDs refuse a second live source; weak ones (timeout 0) do not --------


async def test_check3_explicit_regid_held_by_live_source(topo: Topology) -> None:
    st = await topo.add_store(
        topics={
            "strong": {"source-activity-timeout": "1500", "source-check-interval": "250"},
            "weak": {"source-activity-timeout": "0"},
        }
    )
    first, second = SourceEvents(), SourceEvents()
    strong = source_attrs([st], **FAST_SOURCE)
    strong["ume_store"] = f"{st.spec}:4242"  # ip:port:RegID
    async with await Context.create() as ctx1, await Context.create() as ctx2:
        src1 = await ctx1.create_source("strong", attributes=strong, on_event=first)
        await asyncio.wait_for(src1.wait_registered(), WAIT)
        (succ,) = first.of(ev.SRC_EVENT_UME_REGISTRATION_SUCCESS_EX)
        assert succ.registration_id == 4242
        src2 = await ctx2.create_source("strong", attributes=strong, on_event=second)
        await until(lambda: errors(second), "the second source's registration error", timeout=WAIT)
        assert "RegID is in use by a different source" in errors(second)[0]
        assert not second.of(ev.SRC_EVENT_UME_REGISTRATION_SUCCESS_EX)
        # The first source stops; once its activity timeout passed, the Store lets the RegID go
        # and the second source's next registration attempt succeeds.
        await src1.close()
        await asyncio.wait_for(src2.wait_registered(), WAIT)
        (succ2,) = second.of(ev.SRC_EVENT_UME_REGISTRATION_SUCCESS_EX)
        assert succ2.registration_id == 4242
        await src2.close()

        # Activity timeout 0: weak RegIDs, both live sources are accepted.
        weak = dict(strong, ume_store=f"{st.spec}:5353")
        w1, w2 = SourceEvents(), SourceEvents()
        wsrc1 = await ctx1.create_source("weak", attributes=weak, on_event=w1)
        await asyncio.wait_for(wsrc1.wait_registered(), WAIT)
        wsrc2 = await ctx2.create_source("weak", attributes=weak, on_event=w2)
        await asyncio.wait_for(wsrc2.wait_registered(), WAIT)
        for got in (w1, w2):
            (s,) = got.of(ev.SRC_EVENT_UME_REGISTRATION_SUCCESS_EX)
            assert s.registration_id == 5353
            assert not errors(got)
        await wsrc1.close()
        await wsrc2.close()


# --- check 4: a topic no <topic> pattern matches ---------------------------------------------


async def test_check4_topic_matching_no_pattern_is_refused(topo: Topology) -> None:
    st = await topo.add_store()
    events = SourceEvents()
    async with await Context.create() as ctx:
        src = await ctx.create_source(
            "not.a.stored.topic", attributes=source_attrs([st]), on_event=events
        )
        await until(lambda: errors(events), "the registration error", timeout=WAIT)
        # UM's text for ENOPATTERN, naming the Store
        assert "Store has no matching pattern" in errors(events)[0]
        assert st.spec in errors(events)[0]
        assert not events.of(ev.SRC_EVENT_UME_REGISTRATION_SUCCESS_EX)
        assert src.gate.core.send_check() is not None
        await src.close()
    assert any("no <topic> pattern matches" in line for line in st.lines())


# --- check 5: ume_store_name resolves a Store's context-name; a duplicate name is warned ------


async def test_check5_store_name_resolves_and_duplicate_warns(topo: Topology) -> None:
    st = await topo.add_store(context_name="alpha")
    events = SourceEvents()
    async with await Context.create() as ctx:
        src = await ctx.create_source(
            TOPIC, attributes={"ume_store_name": "alpha"}, on_event=events
        )
        await asyncio.wait_for(src.wait_registered(), WAIT)
        (succ,) = events.of(ev.SRC_EVENT_UME_REGISTRATION_SUCCESS_EX)
        assert str(st.port) in succ.store  # the Store found by its name
        await send_all(src, [b"named %d" % i for i in range(3)])
        await until(lambda: events.stable() >= {0, 1, 2}, "0..2 stable", timeout=WAIT)
        await src.close()
    await topo.add_store(context_name="alpha")
    # UM warns in the log of the Store whose name another context advertises
    warning = re.compile(r"\[WARNING\].*another context advertises this context's name alpha")
    await until(
        lambda: any(warning.search(line) for line in st.lines()),
        "a Store's warning about the duplicate context-name",
        timeout=WAIT,
    )


# --- check 8: stability ACKs in batches of stability-ack-minimum-number ----------------------


async def test_check8_stability_acks_batched_and_trickle_acked_within_interval(
    topo: Topology,
) -> None:
    st = await topo.add_store(
        "memory",
        topics={
            TOPIC: {
                "stability-ack-minimum-number": "64",
                "stability-ack-interval": "200",
                "repository-size-threshold": "10000000",  # keep them all (memory: stable at once)
            }
        },
    )
    events = AckBatches()
    n = 256
    async with await Context.create() as ctx:
        src = await ctx.create_source(TOPIC, attributes=source_attrs([st]), on_event=events)
        events.src = src
        await asyncio.wait_for(src.wait_registered(), WAIT)
        # Sent at once: what leaves before the Store joined the source's session, the Store
        # gets from the source's retention (umcore.store.catchup).
        loop = asyncio.get_running_loop()
        started = loop.time()
        for i in range(n):  # paced so that the Store reads them a few at a time
            await src.send(b"burst %d" % i, flush=True)
            if i % 8 == 7:
                await asyncio.sleep(0.005)  # the burst's pace (a stimulus, not a wait)
        await until(lambda: events.stable() >= set(range(n)), "the burst stable", timeout=WAIT)
        took = loop.time() - started
        sizes: dict[int, int] = {}
        for ordinal in events.batch_of.values():
            sizes[ordinal] = sizes.get(ordinal, 0) + 1
        # An ACK waits for 64 pending fragments; a smaller one only when 200 ms passed since
        # the first of its batch was pending -- at most one per 200 ms of the burst.
        small = [s for s in sizes.values() if s < 64]
        assert len(small) <= 1 + int(took / 0.2), (took, sizes)
        assert sum(sizes.values()) == n

        # A trickle of one message a second: each is ACKed alone once the interval passed
        for k in range(3):
            sqn = n + k
            sent = loop.time()
            await src.send(b"trickle %d" % k, flush=True)
            await until(lambda s=sqn: s in events.stable(), f"trickle {sqn} stable", timeout=WAIT)
            latency = loop.time() - sent
            assert latency < 1.0, f"message {sqn} stable after {latency:.3f} s"  # before the next
            assert latency >= 0.1, f"message {sqn} ACKed at once ({latency:.3f} s): not batched"
            await asyncio.sleep(max(0.0, 1.0 - latency))  # the trickle's pace, not a sync
        await src.close()


# --- check 10: the Store's high ACK sequence number of a receiver that consumed 0..N ----------


async def test_check10_store_high_ack_is_last_consumed(topo: Topology) -> None:
    st = await topo.add_store(metrics=True)
    events = SourceEvents()
    got = Received()
    last = 29
    async with await Context.create() as sctx, await Context.create() as rctx:
        src = await sctx.create_source(TOPIC, attributes=source_attrs([st]), on_event=events)
        await asyncio.wait_for(src.wait_registered(), WAIT)
        rcv = await rctx.create_receiver(TOPIC, got)
        await until(
            lambda: got.of(ev.MSG_UME_REGISTRATION_COMPLETE_EX), "receiver registered", timeout=WAIT
        )
        (rsucc,) = got.of(ev.MSG_UME_REGISTRATION_SUCCESS_EX)
        await send_all(src, [b"%d" % i for i in range(last + 1)])
        await until(lambda: got.sqns() == list(range(last + 1)), "0..N consumed", timeout=WAIT)
        assert st.proc is not None
        labels = {
            ("rcv_regid", str(rsucc.rcv_registration_id)),
            ("src_regid", str(rsucc.src_registration_id)),
        }
        high: list[float] = []
        async with asyncio.timeout(WAIT):  # the consumption ACKs are batched: poll the Store
            while high != [last]:
                samples = await scrape(st.proc)
                high = [
                    v
                    for (name, lab), v in samples.items()
                    if name == "pyum_ump_receiver_high_ack_sqn" and labels <= lab
                ]
                if high != [last]:
                    await asyncio.sleep(0.1)
        await rcv.close()
        await src.close()


# --- check 14: a memory Store restarted has no state ------------------------------------------


async def test_check14_memory_store_restart_forgets(topo: Topology) -> None:
    st = await topo.add_store("memory", topics={TOPIC: {"repository-size-threshold": "1000000"}})
    events = SourceEvents()
    async with await Context.create() as sctx:
        src = await sctx.create_source(
            TOPIC, attributes=source_attrs([st], ume_session_id="0x14", **FAST_SOURCE),
            on_event=events,
        )  # fmt: skip
        await asyncio.wait_for(src.wait_registered(), WAIT)
        await send_all(src, [b"before %d" % i for i in range(10)])
        await until(lambda: events.stable() >= set(range(10)), "0..9 stable", timeout=WAIT)
        assert st.proc is not None
        assert await st.proc.stop(signal.SIGINT) == 0
        st.proc = None
        await st.start()
        await until(
            lambda: len(events.of(ev.SRC_EVENT_UME_REGISTRATION_SUCCESS_EX)) >= 2,
            "re-registration after the Store restarted",
            timeout=WAIT,
        )
        again = events.of(ev.SRC_EVENT_UME_REGISTRATION_SUCCESS_EX)[-1]
        assert not again.flags & ev.REG_FLAG_OLD  # registered as new: no state survived
        await until(lambda: src.gate.core.send_check() is None, "sending again", timeout=WAIT)
        await send_all(src, [b"after %d" % i for i in range(10, 15)])
        await until(lambda: events.stable() >= set(range(15)), "10..14 stable", timeout=WAIT)

        got = Received()
        async with await Context.create() as rctx:
            rcv = await rctx.create_receiver(TOPIC, got)
            await until(
                lambda: got.of(ev.MSG_UME_REGISTRATION_COMPLETE_EX), "registered", timeout=WAIT
            )
            await until(lambda: len(got.data()) >= 5, "what the Store holds", timeout=WAIT)
            assert got.sqns()[:5] == list(range(10, 15))  # nothing from before the restart
            (rsucc,) = got.of(ev.MSG_UME_REGISTRATION_SUCCESS_EX)
            assert rsucc.sequence_number == 10
            await src.send(b"live", flush=True)
            await until(lambda: got.sqns()[-1:] == [15], "live 15", timeout=WAIT)
            assert got.sqns() == list(range(10, 16))
            await rcv.close()
        await src.close()


def lost(got: Received) -> set[int]:
    """The sequence numbers a receiver was told are lost for good."""
    out: set[int] = set()
    for x in got.msgs:
        if x.type in (m.MSG_UNRECOVERABLE_LOSS, m.MSG_UNRECOVERABLE_LOSS_BURST):
            out.update(range(x.sequence_number, x.sequence_number + max(1, x.count)))
    return out


def sample(samples: dict[tuple[str, frozenset[tuple[str, str]]], float], name: str) -> float:
    """The one sample ``name`` (a Store's own figure: one Store per daemon here)."""
    (value,) = [v for (n, _labels), v in samples.items() if n == name]
    return value


# --- check 17: a retry goes to another Store --------------------------------------------------


async def test_check17_retry_at_another_store_delivers(topo: Topology) -> None:
    keep = {TOPIC: {"repository-size-threshold": "1000000"}}
    a = await topo.add_store("memory", topics=keep, control=True, metrics=True)
    stores = [
        a,
        await topo.add_store("memory", topics=keep),
        await topo.add_store("memory", topics=keep),
    ]
    events = SourceEvents()
    n = 20
    async with await Context.create() as sctx:
        # The source retains what it sent, stable or not: a message is stable (and released)
        # once two of the three Stores hold it (quorum), and a Store that joined the source's
        # transport after the first messages went out catches up from the source's retention
        # (umcore.store.catchup); without it that Store would never hold them.
        attrs = source_attrs(stores, retransmit_retention_size_threshold="1000000")
        src = await sctx.create_source(TOPIC, attributes=attrs, on_event=events)
        await asyncio.wait_for(src.wait_registered(), WAIT)
        await send_all(src, [b"m%d" % i for i in range(n)])

        def held_by_all() -> bool:
            acked = events.of(
                ev.SRC_EVENT_UME_MESSAGE_STABLE_EX, lambda i: i.flags & ev.STABLE_FLAG_STORE
            )
            return all(
                {i.sequence_number for i in acked if i.store_index == k} >= set(range(n))
                for k in range(3)
            )

        def missing() -> str:  # what each Store has not acknowledged (shown on a timeout)
            acked = events.of(
                ev.SRC_EVENT_UME_MESSAGE_STABLE_EX, lambda i: i.flags & ev.STABLE_FLAG_STORE
            )
            return "not acknowledged, per Store: " + repr(
                [
                    sorted(set(range(n)) - {i.sequence_number for i in acked if i.store_index == k})
                    for k in range(3)
                ]
            )

        await until(held_by_all, "every Store holding 0..N-1", timeout=WAIT, detail=missing)
        (a_reg,) = events.of(ev.SRC_EVENT_UME_REGISTRATION_SUCCESS_EX, lambda i: i.store_index == 0)
        # Store A will never retransmit any of them (daemon control's mark, until it restarts)
        for sqn in range(n):
            answer = await control_request(
                sctx, a, f"mark 127.0.0.1 {a.port} {a_reg.registration_id} {sqn}"
            )
            assert answer.endswith("- OK"), answer

        got = Received()
        async with await Context.create() as rctx:
            rcv = await rctx.create_receiver(
                TOPIC, got, attributes={"retransmit_request_interval": "200"}
            )
            await until(lambda: len(got.data()) >= n, "0..N-1 recovered", timeout=WAIT)
            assert got.sqns() == list(range(n))
            assert all(x.flags & m.MSG_FLAG_RETRANSMIT for x in got.data())
            assert not lost(got)
            await rcv.close()
        await src.close()
    assert a.proc is not None
    samples = await scrape(a.proc)
    # Store A was asked (round robin over the three) and retransmitted none (all marked): B and
    # C answered the retries.
    assert sample(samples, "pyum_ump_store_ume_retx_req_rcv_total") > 0
    assert sample(samples, "pyum_umestored_rx_marked_total") > 0
    assert sample(samples, "pyum_umestored_retransmissions_total") == 0


# --- check 18: retransmission-request-forwarding with a wrapped memory repository -------------


@pytest.mark.parametrize("forwarding", [1, 0])
async def test_check18_forwarding_of_wrapped_out_messages(topo: Topology, forwarding: int) -> None:
    # repository-size-threshold 1024 (the default): a memory repository keeps ~1 KiB of the newest
    st = await topo.add_store(
        "memory", topics={TOPIC: {"retransmission-request-forwarding": str(forwarding)}}
    )
    events = SourceEvents()
    rattrs = {
        "ume_session_id": "0x18",
        "retransmit_request_interval": "200",
        "retransmit_request_message_timeout": "1000",  # then unrecoverable loss
        "retransmit_request_outstanding_maximum": "200",  # the whole range at once
    }
    n = 100
    async with await Context.create() as sctx:
        src = await sctx.create_source(
            TOPIC,
            # the source retains every message, stable or not: it can answer what the Store lost
            attributes=source_attrs([st], retransmit_retention_size_threshold="10000000"),
            on_event=events,
        )
        await asyncio.wait_for(src.wait_registered(), WAIT)
        first = Received()
        async with await Context.create() as rctx:
            rcv = await rctx.create_receiver(TOPIC, first, attributes=rattrs)
            await until(
                lambda: first.of(ev.MSG_UME_REGISTRATION_COMPLETE_EX), "registered", timeout=WAIT
            )
            await send_all(src, [b"%03d" % i + b"." * 60 for i in range(5)])
            await until(lambda: first.sqns() == list(range(5)), "0..4 consumed", timeout=WAIT)
            await rcv.close()  # ACKs 0..4
        await send_all(src, [b"%03d" % i + b"." * 60 for i in range(5, n)])
        await until(lambda: events.stable() >= set(range(n)), "all stable", timeout=WAIT)

        again = Received()
        async with await Context.create() as rctx:
            rcv = await rctx.create_receiver(TOPIC, again, attributes=rattrs)
            await until(
                lambda: set(again.sqns()) | lost(again) >= set(range(5, n)),
                "5..N-1 delivered or lost",
                timeout=WAIT,
            )
            (succ,) = again.of(ev.MSG_UME_REGISTRATION_SUCCESS_EX)
            assert succ.sequence_number == 5  # its ACK position survived in the Store
            assert all(x.flags & m.MSG_FLAG_RETRANSMIT for x in again.data())
            if forwarding:
                # the Store forwarded what it no longer holds; the source answered directly
                assert again.sqns() == list(range(5, n)) and not lost(again)
            else:
                gone = lost(again)
                assert gone and min(gone) == 5, sorted(gone)
                held = sorted(set(range(5, n)) - gone)
                assert again.sqns() == held and held[-1] == n - 1
            await rcv.close()
        await src.close()


# --- check 19: the Store's retransmission rate limit drops requests; recovery completes ------


async def test_check19_rate_limited_recovery_completes(topo: Topology) -> None:
    st = await topo.add_store(
        "memory",
        topics={TOPIC: {"repository-size-threshold": "100000000"}},
        store_options={"retransmission-request-processing-rate": "100"},
        metrics=True,
    )
    events = SourceEvents()
    # Scaled down from the check's 10,000 (100 s at 100 requests/s) to 600: the first second
    # services 100, queues 400 (4 x the rate) and drops the rest; re-requests fill the holes.
    n = 600
    async with await Context.create() as sctx:
        src = await sctx.create_source(TOPIC, attributes=source_attrs([st]), on_event=events)
        await asyncio.wait_for(src.wait_registered(), WAIT)
        await send_all(src, [b"r%d" % i for i in range(n)])
        await until(lambda: events.stable() >= set(range(n)), "all stable", timeout=WAIT)
        got = Received()
        async with await Context.create() as rctx:
            rcv = await rctx.create_receiver(
                TOPIC,
                got,
                attributes={
                    "retransmit_request_outstanding_maximum": "1000",
                    "retransmit_request_message_timeout": "30000",
                },
            )
            await until(lambda: len(got.data()) >= n, "recovery of 0..N-1", timeout=60.0)
            assert got.sqns() == list(range(n))
            assert not lost(got)
            await rcv.close()
        await src.close()
    assert st.proc is not None
    samples = await scrape(st.proc)
    assert sample(samples, "pyum_ump_store_ume_retx_req_drop_total") > 0
    assert sample(samples, "pyum_ump_store_ume_retx_req_serviced_total") >= n


# --- check 26: a source gone: its state deleted after the activity timeout, or kept ----------


async def test_check26_source_state_deleted_or_kept_by_lifetime(topo: Topology) -> None:
    timers = {
        "source-activity-timeout": "1500",
        "receiver-activity-timeout": "1500",
        "source-check-interval": "250",
    }
    st = await topo.add_store(
        topics={"gone": timers, "kept": {**timers, "source-state-lifetime": "600000"}}
    )
    sids = {"gone": "0x2601", "kept": "0x2602"}
    reg: dict[str, int] = {}
    async with await Context.create() as sctx, await Context.create() as rctx:
        for topic in ("gone", "kept"):
            events = SourceEvents()
            got = Received()
            src = await sctx.create_source(
                topic, attributes=source_attrs([st], ume_session_id=sids[topic]), on_event=events
            )
            await asyncio.wait_for(src.wait_registered(), WAIT)
            rcv = await rctx.create_receiver(topic, got)
            await until(
                lambda g=got: g.of(ev.MSG_UME_REGISTRATION_COMPLETE_EX), "receiver", timeout=WAIT
            )
            await send_all(src, [b"%d" % i for i in range(5)])
            await until(lambda e=events: e.stable() >= set(range(5)), "0..4 stable", timeout=WAIT)
            await until(lambda g=got: g.sqns() == list(range(5)), "0..4 consumed", timeout=WAIT)
            reg[topic] = events.of(ev.SRC_EVENT_UME_REGISTRATION_SUCCESS_EX)[0].registration_id
            await rcv.close()
            await src.close()  # a clean exit: no deregistration

    assert st.proc is not None
    g, k = reg["gone"], reg["kept"]
    await st.proc.wait_for_line(rf"source RegID {g} state for topic 'gone' deleted", WAIT)
    await st.proc.wait_for_line(rf"receiver RegID \d+ state of source RegID {g} topic 'gone'", WAIT)
    await st.proc.wait_for_line(r"""topic "gone" deleted""", WAIT)
    await st.proc.wait_for_line(rf"source RegID {k} topic 'kept' inactive", WAIT)
    assert not any(f"source RegID {k} state" in line for line in st.lines())

    async with await Context.create() as sctx, await Context.create() as rctx:
        for topic in ("gone", "kept"):
            events = SourceEvents()
            src = await sctx.create_source(
                topic, attributes=source_attrs([st], ume_session_id=sids[topic]), on_event=events
            )
            await asyncio.wait_for(src.wait_registered(), WAIT)
            (succ,) = events.of(ev.SRC_EVENT_UME_REGISTRATION_SUCCESS_EX)
            if topic == "gone":  # nothing left of it: a new registration
                assert not succ.flags & ev.REG_FLAG_OLD
                continue
            assert succ.flags & ev.REG_FLAG_OLD and succ.sequence_number == 4
            assert succ.registration_id == k
            got = Received()
            rcv = await rctx.create_receiver(topic, got)
            await until(lambda g=got: len(g.data()) >= 5, "0..4 recovered", timeout=WAIT)
            assert got.sqns() == list(range(5))
            assert all(x.flags & m.MSG_FLAG_RETRANSMIT for x in got.data())
            await rcv.close()
            await src.close()
