"""Batch start and hand-on through the public send paths (batching module docstring, "Batch
start" and "Batch timer").

A run of one topic and length goes on across batches: the batch a message brings to the
minimum length is handed on and the next message of the run starts the next batch.  What must
hold whichever path does that work (:meth:`TopicSender.send`'s fast case or the core's
general rules behind :meth:`EngineSource.send_slow`): the session's timer is armed once per
interval, not per batch; each batch goes out one interval after its oldest message; a hand-on
whose write blocks the session closes the run, so the fast case stops until it drains; and
flushes, single messages, another topic and other lengths keep every message in order with
its topic's sequence numbers.

The sources run on the harness (:mod:`tests.api.harness`): a real session core and session,
the test's clock and a capturing writer that can block the session.
"""

from __future__ import annotations

import asyncio
import random

import pytest

from tests.api.conftest import WAIT
from tests.api.harness import data_messages, make_sources
from umcore.api import message as m
from umcore.errors import WouldBlock
from umcore.wire import lbmc

P = bytes(64)  # 76 bytes framed: the 27th message brings a batch to 2052 >= 2048
PER_BATCH = 27
INTERVAL = 0.2  # implicit_batching_interval's default
TSNI_INTERVAL = 5.0  # transport_topic_sequence_number_info_interval's default


def _done(aw: object) -> bool:
    return isinstance(aw, asyncio.Future) and aw.done()


async def test_batch_start_keeps_one_timer_and_one_deadline_per_batch() -> None:
    h = await make_sources("start")
    (src,) = h.sources
    core, loop, w = h.core, h.loop, h.writer
    for _ in range(PER_BATCH):  # batch 1: arms the batch deadline (and the TSNI check)
        assert _done(src.send(P))
    assert len(w.chunks) == 1 and core.batch_len == 0
    first = h.deadline
    assert first == pytest.approx(100.0 + INTERVAL) and core.next_timer() == first
    assert loop.armed == 1
    for b in range(1, 6):  # batches 2-6 start while batch 1's deadline is pending
        loop.now = 100.0 + 0.01 * b
        assert _done(src.send(P))  # the batch's first message
        assert core.batch_len == 12 + len(P)
        assert h.deadline == first and not core.timer_dirty  # not re-armed: first is earlier
        for _ in range(PER_BATCH - 1):
            assert _done(src.send(P))  # the last one hands the batch on
        assert len(w.chunks) == b + 1 and core.batch_len == 0
    assert loop.armed == 1  # one timer for six batches
    msgs = data_messages(w.chunks)
    assert [x.sqn for x in msgs] == list(range(6 * PER_BATCH))
    assert core.stats.messages_sent == 6 * PER_BATCH and core.stats.datagrams_sent == 6
    # Batch 7: its oldest message at 100.06, more join it later.
    for t in (100.06, 100.1, 100.15):
        loop.now = t
        src.send(P)
    # The stale deadline (batch 1's) runs: nothing is due, the timer moves to batch 7's.
    loop.advance(first)
    assert len(w.chunks) == 6 and core.batch_len == 3 * (12 + len(P))
    assert h.deadline == pytest.approx(100.06 + INTERVAL) == core.next_timer()
    loop.advance(100.06 + INTERVAL - 0.001)
    assert len(w.chunks) == 6  # not before one interval after its oldest message
    loop.advance(100.06 + INTERVAL)
    assert len(w.chunks) == 7 and core.batch_len == 0
    assert [x.sqn for x in data_messages(w.chunks[6:])] == [162, 163, 164]
    assert loop.fired == 2 and loop.armed == 3
    # What is left to wait for is the TSNI check, armed by the first message at 100.0.
    assert h.deadline == pytest.approx(100.0 + TSNI_INTERVAL)
    await src.close()


async def test_batch_start_after_idle_arms_the_timer_and_the_tsni_check() -> None:
    """A batch started when no batching deadline is pending (the last one ran) arms one; one
    started when no TSNI check is armed (every topic went idle) arms that."""
    h = await make_sources("due")
    (src,) = h.sources
    core, loop, w = h.core, h.loop, h.writer
    for _ in range(PER_BATCH):
        src.send(P)
    assert len(w.chunks) == 1
    loop.advance(101.0)  # the batch deadline runs with nothing batched: none pending after
    assert h.deadline == pytest.approx(100.0 + TSNI_INTERVAL)
    src.send(P)  # batch 2 starts at 101.0
    assert h.deadline == pytest.approx(101.0 + INTERVAL) == core.next_timer()
    for _ in range(PER_BATCH - 1):
        src.send(P)
    assert len(w.chunks) == 2 and core.batch_len == 0
    # Idle past transport_topic_sequence_number_info_active_threshold (60 s): TSNIs every
    # interval until then, then no TSNI check at all.
    loop.advance(200.0)
    assert h.deadline is None and core.next_timer() is None
    tsnis = [t for x in lbmc.iter_messages(b"".join(w.chunks[2:])) for t in x.find_all(lbmc.Tsni)]
    assert len(tsnis) >= 10 and core.stats.tsnis_sent == len(tsnis)
    assert {r for t in tsnis for r in t.records} == {(src.tidx, 2 * PER_BATCH - 1)}
    src.send(P)  # batch 3 starts at 200.0: both deadlines armed again
    assert h.deadline == pytest.approx(200.0 + INTERVAL)
    loop.advance(200.0 + INTERVAL)
    assert h.deadline == pytest.approx(200.0 + TSNI_INTERVAL)
    assert [x.sqn for x in data_messages(w.chunks)] == list(range(2 * PER_BATCH + 1))
    await src.close()


async def test_hand_on_that_blocks_closes_the_run() -> None:
    h = await make_sources("block")
    (src,) = h.sources
    core, w = h.core, h.writer
    for _ in range(PER_BATCH - 1):
        src.send(P)
    w.block_next = True
    assert _done(src.send(P))  # the hand-on's write blocks the session
    assert w.paused and core.batch_len == 0
    pending = src.send(P)  # a message of the run: the fast case must not take it
    assert not _done(pending) and core.batch_len == 0
    with pytest.raises(WouldBlock):
        src.send_nowait(P)
    assert len(w.chunks) == 1
    w.unblock()
    assert [code for _t, code, _i in h.events] == [m.SRC_EVENT_WAKEUP]
    async with asyncio.timeout(WAIT):
        await pending
    src.flush()
    assert [x.sqn for x in data_messages(w.chunks)] == list(range(PER_BATCH + 1))
    assert h.engine.send_would_block == 1
    await src.close()


async def test_overflow_hand_on_that_blocks_stops_the_fast_case() -> None:
    """A batch handed on because the next message would overflow it (a minimum length above
    the datagram size) leaves that message as the open run of a new batch: when the write
    blocks, the run must close all the same, or the next message would join it."""
    h = await make_sources("overflow", datagram_max_size=4000, batching_minimum_length=8000)
    (src,) = h.sources
    core, w = h.core, h.writer
    w.block_next = True
    sent = 0
    while not w.chunks:
        assert _done(src.send(P))
        sent += 1
    assert w.paused and sent == 4000 // (12 + len(P)) + 1
    held = core.batch_len
    assert held == 12 + len(P)  # the message that overflowed starts the next batch
    pending = src.send(P)
    assert not _done(pending) and core.batch_len == held
    w.unblock()
    async with asyncio.timeout(WAIT):
        await pending
    src.flush()
    assert [x.sqn for x in data_messages(w.chunks)] == list(range(sent + 1))
    await src.close()


async def test_timer_hand_on_that_blocks_stops_the_fast_case() -> None:
    """The batch deadline's hand-on closes the run too: a write there may block."""
    h = await make_sources("timer")
    (src,) = h.sources
    core, loop, w = h.core, h.loop, h.writer
    for _ in range(10):
        src.send(P)
    w.block_next = True
    loop.advance(100.0 + INTERVAL)
    assert len(w.chunks) == 1 and w.paused
    pending = src.send(P)
    assert not _done(pending) and core.batch_len == 0
    w.unblock()
    async with asyncio.timeout(WAIT):
        await pending
    src.flush()
    assert [x.sqn for x in data_messages(w.chunks)] == list(range(11))
    await src.close()


async def test_send_paths_interleave_with_flush_and_send_nowait() -> None:
    """Batch starts and hand-ons mixed with flushes, single messages, another topic, other
    lengths and timers: every message in order with its topic's sequence numbers, and a held
    batch always has the session's timer armed no later than one interval after its oldest
    message."""
    h = await make_sources("mix", "mix.other")
    src, other = h.sources
    core, loop, w = h.core, h.loop, h.writer
    rng = random.Random(7)
    sent: dict[str, list[bytes]] = {"mix": [], "mix.other": []}
    oldest: float | None = None
    for i in range(4000):
        loop.advance(loop.now + rng.choice((0.0, 0.0, 0.0, 0.0005, 0.07)))
        if not core.batch_len:
            oldest = None
        else:
            assert oldest is not None
            assert h.deadline is not None and h.deadline <= oldest + INTERVAL + 1e-9
        data = i.to_bytes(4, "big") * (16 if rng.random() < 0.9 else 2)
        before = core.stats.datagrams_sent
        op = rng.random()
        s = src
        if op < 0.02:
            src.flush()
            continue
        if op < 0.04:
            src.send_nowait(data, flush=True)
        elif op < 0.06:
            src.send_nowait(data)
        elif op < 0.08:
            s = other
            assert _done(other.send(data))
        else:
            assert _done(src.send(data))
        sent[s.topic].append(data)
        if core.batch_len and (oldest is None or core.stats.datagrams_sent != before):
            oldest = loop.now
    src.flush()
    msgs = data_messages(w.chunks)
    for s in (src, other):
        mine = [x for x in msgs if x.tidx == s.tidx]
        assert [x.payload for x in mine] == sent[s.topic]
        assert [x.sqn for x in mine] == list(range(len(sent[s.topic])))
    assert core.stats.messages_sent == len(msgs)
    await other.close()
    await src.close()
