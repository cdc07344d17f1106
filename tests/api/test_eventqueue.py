"""EventQueue: callbacks through a queue serviced by dispatch(), bounds, monitor, deletion order."""

from __future__ import annotations

import asyncio

import pytest

from tests.api.conftest import WAIT, wait_for
from umcore.api import Context, EventQueue, Message
from umcore.api import eventqueue as eq
from umcore.api import message as m
from umcore.errors import UMError


async def test_receiver_callbacks_run_only_from_dispatch(opts: None) -> None:
    got: list[Message] = []
    evq = EventQueue()
    async with await Context.create() as a, await Context.create() as b:
        rcv = await b.create_receiver("q", got.append, event_queue=evq)
        src = await a.create_source("q")
        await wait_for(lambda: src.receivers == 1)
        for i in range(100):
            await src.send(i.to_bytes(2, "big"))
        src.flush()
        await wait_for(lambda: evq.size() >= 101)  # BOS + 100 messages queued
        assert got == []  # nothing ran on the receive path
        assert await evq.dispatch(eq.POLL) == 1  # POLL: exactly one
        assert [x.type for x in got] == [m.MSG_BOS]
        task = asyncio.create_task(evq.dispatch(eq.BLOCK))
        await wait_for(lambda: len(got) == 101)
        evq.unblock()
        async with asyncio.timeout(WAIT):
            assert await task == 100
        data = [int.from_bytes(x.data, "big") for x in got if x.type == m.MSG_DATA]
        assert data == list(range(100))
        assert evq.stats.dispatched == 101 and evq.stats.enqueued == 101
        await rcv.close()
    evq.close()


async def test_bounded_queue_paces_the_source_and_loses_nothing(opts: None) -> None:
    count = 0

    def on_msg(msg: Message) -> None:
        nonlocal count
        count += msg.type == m.MSG_DATA

    evq = EventQueue(limit=500)
    n = 20_000
    async with await Context.create() as a, await Context.create() as b:
        rcv = await b.create_receiver("paced", on_msg, event_queue=evq)
        src = await a.create_source("paced")
        await wait_for(lambda: src.receivers == 1)
        for _i in range(n):
            await src.send(bytes(100))
        src.flush()
        # nobody dispatches yet: the queue stops its sessions instead of growing without bound
        await wait_for(lambda: evq.stats.pauses >= 1)
        await asyncio.sleep(0.2)  # (not synchronisation: gives the bound a chance to break)
        assert evq.size() < evq.hard_limit
        assert evq.stats.refused == 0
        task = asyncio.create_task(evq.dispatch(eq.BLOCK))
        await wait_for(lambda: count == n)
        evq.unblock()
        await task
        await rcv.close()
    evq.close()


def test_hard_limit_refuses_and_counts() -> None:
    evq = EventQueue(limit=2)
    owner = object()
    results = [evq.enqueue(owner, print, i, eq.KIND_SOURCE_EVENT, False) for i in range(10)]
    evq.hard_limit = 8  # (4 x 2 + one read's worth by default: too many for a unit test)
    results += [evq.enqueue(owner, print, i, eq.KIND_SOURCE_EVENT, False) for i in range(10)]
    assert results == [True] * 10 + [False] * 10
    assert evq.stats.refused == 10 and evq.size() == 10
    assert evq.hard_limit < eq.HARD_LIMIT_FACTOR * 2 + eq.READ_OVERSHOOT


async def test_monitor_size_warning_and_enqueue_notification() -> None:
    calls: list[tuple[int, int, int]] = []
    evq = EventQueue(
        {"queue_size_warning": "3", "queue_enqueue_notification": "1"},
        monitor=lambda *a: calls.append(a),
    )
    owner = object()
    for i in range(5):
        evq.enqueue(owner, lambda _x: None, i, eq.KIND_MESSAGE, False)
    assert calls == [(eq.ENQUEUE_NOTIFICATION, 1, 0)] * 5
    calls.clear()
    assert await evq.dispatch(eq.POLL) == 1
    assert calls == [(eq.SIZE_WARNING, 5, 0)]  # 5 queued when the event was dequeued
    calls.clear()
    while evq.size():
        await evq.dispatch(eq.POLL)
    # sizes 4 then 3: only 4 is over the threshold
    assert calls == [(eq.SIZE_WARNING, 4, 0)]


async def test_delay_warning_and_service_statistics() -> None:
    calls: list[tuple[int, int, int]] = []
    evq = EventQueue(
        {"queue_delay_warning": "1", "queue_age_enabled": "1", "queue_count_enabled": "1"},
        monitor=lambda *a: calls.append(a),
    )
    evq.enqueue(object(), lambda _x: None, 0, eq.KIND_MESSAGE, False)
    await asyncio.sleep(0.01)
    assert await evq.dispatch(eq.POLL) == 1
    assert calls and calls[0][0] == eq.DELAY_WARNING and calls[0][2] >= 1000
    assert evq.stats.age_max_us >= 1000
    assert evq.stats.by_kind == {eq.KIND_MESSAGE: 1}


async def test_timed_dispatch_is_a_minimum_checked_after_each_event() -> None:
    import time

    evq = EventQueue()
    seen: list[int] = []
    owner = object()

    def busy(i: int) -> None:  # 2 ms of work (a CPU-bound callback, not a wait)
        seen.append(i)
        end = time.monotonic() + 0.002
        while time.monotonic() < end:
            pass

    for i in range(3):
        evq.enqueue(owner, busy, i, eq.KIND_MESSAGE, False)
    assert await evq.dispatch(1) == 1  # past 1 ms after the first event: returns
    assert seen == [0]
    # with nothing queued a timed dispatch waits without bound (seed 3.5.3) until unblocked
    while evq.size():
        await evq.dispatch(eq.POLL)
    asyncio.get_running_loop().call_later(0.05, evq.unblock)
    async with asyncio.timeout(WAIT):
        assert await evq.dispatch(1) == 0


async def test_closed_receiver_events_are_purged_and_close_order(opts: None) -> None:
    got: list[Message] = []
    src_events: list[int] = []
    evq = EventQueue()
    async with await Context.create() as a, await Context.create() as b:
        rcv = await b.create_receiver("gone", got.append, event_queue=evq)
        src = await a.create_source(
            "gone", on_event=lambda code, info: src_events.append(code), event_queue=evq
        )
        await wait_for(lambda: src.receivers == 1)
        await src.send(b"x", flush=True)
        await wait_for(lambda: evq.size() >= 3)  # CONNECT, BOS, data
        assert src_events == [] and got == []
        with pytest.raises(UMError):
            evq.close()  # its receiver and source are alive
        await rcv.close()
        await evq.dispatch(eq.POLL)
        while evq.size():
            await evq.dispatch(eq.POLL)
        assert got == []  # closed before dispatch: no callback after close
        assert src_events == [m.SRC_EVENT_CONNECT]
        assert evq.stats.purged >= 2
        await src.close()
    evq.close()
    with pytest.raises(UMError):
        await evq.dispatch(eq.POLL)


async def test_callback_may_await_a_send(opts: None) -> None:
    """Callbacks run from dispatch, off the receive path: they may return an awaitable."""
    echoed: list[bytes] = []
    evq = EventQueue()
    async with await Context.create() as a, await Context.create() as b:
        await a.create_receiver(
            "pong", lambda msg: echoed.append(msg.data) if msg.type == m.MSG_DATA else None
        )
        back = await b.create_source("pong")

        def on_ping(msg: Message) -> object:
            if msg.type == m.MSG_DATA:
                return back.send(msg.data, flush=True)
            return None

        await b.create_receiver("ping", on_ping, event_queue=evq)
        src = await a.create_source("ping")
        await wait_for(lambda: src.receivers == 1)
        await wait_for(lambda: back.receivers == 1)
        task = asyncio.create_task(evq.dispatch(eq.BLOCK))
        await src.send(b"hello", flush=True)
        await wait_for(lambda: echoed == [b"hello"])
        evq.unblock()
        await task


async def test_a_receiver_joining_an_active_session_gets_bos_through_its_queue(opts: None) -> None:
    first: list[Message] = []
    got: list[Message] = []
    evq = EventQueue()
    async with await Context.create() as a, await Context.create() as b:
        src = await a.create_source("late")
        r1 = await b.create_receiver("late", first.append)
        await wait_for(lambda: src.receivers == 1)
        await src.send(b"x", flush=True)
        await wait_for(lambda: any(x.type == m.MSG_BOS for x in first))  # the session is active
        # A second receiver of the topic joins the active session: BOS at once, in create.
        r2 = await b.create_receiver("late", got.append, event_queue=evq)
        assert got == [] and evq.size() == 1  # queued, not called on the receive path
        assert await evq.dispatch(eq.POLL) == 1
        assert [x.type for x in got] == [m.MSG_BOS]
        await r1.close()
        await r2.close()
        await src.close()
    evq.close()
