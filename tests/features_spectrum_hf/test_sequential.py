"""Sequential mode: a synchronous application drives the context with process_events; unblock
ends a call early (from another thread)."""

from __future__ import annotations

import asyncio
import threading

import pytest

from umcore.api import Message
from umcore.api import message as m
from umcore.api.sequential import SequentialContext
from umcore.errors import UMError

ROUNDS = 400  # process_events rounds of 25 ms: a 10 s bound on every wait below


def test_sequential_context_round_trip_and_unblock(mcast_config: object) -> None:
    got: list[Message] = []
    with SequentialContext() as sc:
        ctx = sc.context
        assert ctx.options.get("operational_mode") == "sequential"
        rcv = sc.call(ctx.create_receiver("seq.t", got.append))
        src = sc.call(ctx.create_source("seq.t"))
        for _ in range(ROUNDS):
            if src.receivers == 1:
                break
            sc.process_events(0.025)
        assert src.receivers == 1
        for i in range(50):
            src.send_nowait(i.to_bytes(2, "big"))
        src.flush()
        assert not [x for x in got if x.type == m.MSG_DATA]  # nothing runs between calls
        for _ in range(ROUNDS):
            if sum(x.type == m.MSG_DATA for x in got) == 50:
                break
            sc.process_events(0.025)
        data = [int.from_bytes(x.data, "big") for x in got if x.type == m.MSG_DATA]
        assert data == list(range(50))
        # unblock from another thread ends a long call early
        t = threading.Timer(0.05, sc.unblock)
        t.start()
        assert sc.process_events(60.0) is True
        t.join()
        assert sc.process_events(0.0) is False  # the time ran out
        sc.unblock()  # before the call: the next one returns at once
        assert sc.process_events(60.0) is True
        with pytest.raises(UMError):
            sc.process_events(-1)
        sc.call(rcv.close())
    assert sc.loop.is_closed()


async def test_sequential_context_refused_inside_a_running_loop(mcast_config: object) -> None:
    assert asyncio.get_running_loop()
    with pytest.raises(UMError, match="event loop runs"):
        SequentialContext()
