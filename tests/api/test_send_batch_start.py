"""Source._send_slow's inline batch start and hand-on (batching module docstring, "Batch start"):
the next batch of the run starts with a list append when nothing else is due, keeps one
deadline per batch and does not re-arm the session's timer; a write that blocks closes the run.

A capturing writer stands in for the receiver connection: the test sees every write and can
make one block the session, and the clock is the test's (``Source._time``).
"""

from __future__ import annotations

import asyncio
import random
from typing import Any

import pytest

from tests.api.conftest import WAIT
from umcore.api import Context, Source
from umcore.wire import lbmc


class _Writer:
    """A receiver connection's transport: keeps what is written; ``block`` pauses the session
    on the next write (as a transport above its high-water mark does)."""

    def __init__(self, listener: Any) -> None:
        self.listener = listener
        self.chunks: list[bytes] = []
        self.block = False

    def write(self, data: bytes) -> None:
        self.chunks.append(bytes(data))
        if self.block:
            self.block = False
            self.listener._pause(self)


def _attach(src: Source) -> tuple[_Writer, list[float]]:
    w = _Writer(src._listener)
    src._listener._writers.append(w)
    clock = [100.0]
    src._time = lambda: clock[0]  # type: ignore[method-assign]
    return w, clock


def _data(chunks: list[bytes]) -> list[lbmc.LBMCMessage]:
    msgs = lbmc.iter_messages(b"".join(chunks))
    return [m for m in msgs if m.msg_type == lbmc.MSG_DATA]


P = bytes(64)  # 76 bytes framed: the 27th message brings a batch to 2052 >= 2048


async def test_batch_start_inline_keeps_timer_and_deadline(
    opts: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    async with await Context.create(opts) as ctx:
        src = await ctx.create_source("start")
        w, clock = _attach(src)
        core = src._core
        for _ in range(27):  # batch 1: started on the general path (arms timer and TSNI)
            await src.send(P)
        assert len(w.chunks) == 1 and core.batch_len == 0
        first = src._session.timer.deadline
        assert first == pytest.approx(100.2) and core.next_timer() == first
        assert core._tsni_check is not None
        calls: list[object] = []
        monkeypatch.setattr(core, "send", lambda *a: calls.append(a))  # the general path
        for b in range(1, 6):
            clock[0] = 100.0 + 0.01 * b
            await src.send(P)  # batch b+1 starts inline
            assert core._batch_due == pytest.approx(clock[0] + 0.2)  # one deadline per batch
            assert core._run_time == clock[0]
            assert src._session.timer.deadline == first  # not re-armed: first comes earlier
            assert not core.timer_dirty
            for _ in range(26):
                await src.send(P)  # the 27th hands on inline
            assert len(w.chunks) == b + 1 and core.batch_len == 0
        assert calls == []
        msgs = _data(w.chunks)
        assert [m.sqn for m in msgs] == list(range(6 * 27))
        assert core.stats.messages_sent == 6 * 27 and core.stats.datagrams_sent == 6
        # the stale deadline fires: nothing due, the timer moves to the open batch's deadline
        await src.send(P)
        due = core._batch_due
        assert core.handle_timer(first) is None
        assert core.next_timer() == pytest.approx(due)
        await src.close()


async def test_batch_start_goes_general_when_something_is_due(opts: None) -> None:
    """No batching deadline pending, or no TSNI check armed: the general path starts the
    batch and the session's timer is re-armed."""
    async with await Context.create(opts) as ctx:
        src = await ctx.create_source("due")
        w, clock = _attach(src)
        core = src._core
        for _ in range(27):
            await src.send(P)
        assert core.batch_len == 0 and core._run_n == ~64
        core._batch_timer = None  # as after a fired timer found no batch
        clock[0] = 101.0
        await src.send(P)
        assert core._batch_timer == pytest.approx(101.2)
        assert src._session.timer.deadline == pytest.approx(101.2)
        for _ in range(26):
            await src.send(P)
        assert core.batch_len == 0
        core._tsni_check = None  # as after every topic went idle
        clock[0] = 102.0
        await src.send(P)
        assert core._tsni_check == pytest.approx(102.0 + core.tsni_interval)
        assert [m.sqn for m in _data([*w.chunks, core.flush() or b""])] == list(range(55))
        await src.close()


async def test_inline_hand_on_that_blocks_closes_the_run(opts: None) -> None:
    async with await Context.create(opts) as ctx:
        src = await ctx.create_source("block")
        w, _clock = _attach(src)
        core = src._core
        listener = src._listener
        for _ in range(26):
            await src.send(P)
        w.block = True
        await src.send(P)  # the inline hand-on's write blocks the session
        assert listener._paused and core._run is None
        pending = src.send(P)
        assert not (isinstance(pending, asyncio.Future) and pending.done())
        listener._resumed(w)
        async with asyncio.timeout(WAIT):
            await pending
        src.flush()
        assert [m.sqn for m in _data(w.chunks)] == list(range(28))
        await src.close()


async def test_inline_paths_interleave_with_flush_and_send_nowait(opts: None) -> None:
    """Inline batch starts and hand-ons mixed with flushes, single messages, another topic,
    other lengths and timers: every message in order with its topic's sequence numbers, and a
    held batch always has a deadline no later than one interval after its oldest message."""
    one_session = {"transport_tcp_maximum_ports": "1"}
    async with await Context.create(one_session) as ctx:
        src = await ctx.create_source("mix")
        other = await ctx.create_source("mix.other")
        assert other._core is src._core
        w, clock = _attach(src)
        other._time = src._time  # type: ignore[method-assign]
        core = src._core
        rng = random.Random(7)
        sent: dict[str, list[bytes]] = {"mix": [], "mix.other": []}
        oldest: float | None = None
        for i in range(4000):
            clock[0] += rng.choice((0.0, 0.0, 0.0, 0.0005, 0.07))
            deadline = core.next_timer()
            if deadline is not None and deadline <= clock[0]:
                out = core.handle_timer(deadline)
                if out:
                    src._listener.write(out)
            if not core.batch_len:
                oldest = None
            else:
                assert oldest is not None
                deadline = core.next_timer()
                assert deadline is not None and deadline <= oldest + 0.2 + 1e-9
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
                await other.send(data)
            else:
                await src.send(data)
            sent[s.topic].append(data)
            if core.batch_len and (oldest is None or core.stats.datagrams_sent != before):
                oldest = clock[0]
        src.flush()
        msgs = _data(w.chunks)
        for s in (src, other):
            mine = [m for m in msgs if m.tidx == s.tidx]
            assert [m.payload for m in mine] == sent[s.topic]
            assert [m.sqn for m in mine] == list(range(len(sent[s.topic])))
        assert core.stats.messages_sent == len(msgs)
        await other.close()
        await src.close()
