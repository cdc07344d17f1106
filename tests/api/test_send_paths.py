"""Source.send's fast case (a message joining the open run, ``TopicSender.send``), its general
path (``EngineSource.send_slow``) and send_nowait's single-message path, end to end.

The paths are mixed on one source and the receiver checks order, payloads and topic sequence
numbers; back-pressure is checked with a receiver that stops reading.
"""

from __future__ import annotations

import asyncio

from tests.api.conftest import WAIT, wait_for
from umcore.api import Context, Message
from umcore.api import message as m
from umcore.errors import WouldBlock


async def test_fast_single_and_batched_sends_interleave(opts: None) -> None:
    got: list[Message] = []
    one_session = {"transport_tcp_maximum_ports": "1"}
    async with await Context.create(one_session) as a, await Context.create(opts) as b:
        rcv = await b.create_receiver("mix", got.append)
        src = await a.create_source("mix")
        other = await a.create_source("mix.other")  # same session: runs of two topics
        assert other.core is src.core
        await wait_for(lambda: src.receivers == 1)
        sent: list[bytes] = []
        for i in range(3000):
            data = i.to_bytes(4, "big") * (1 + i % 3 // 2)  # lengths 4, 4, 8: runs end
            if i % 97 == 0:
                src.send_nowait(data, flush=True)  # single-message path (often mid-batch)
            elif i % 89 == 0:
                await src.send(memoryview(bytearray(data)))  # not bytes: framed at once
            elif i % 83 == 0:
                await other.send(b"other")  # another topic's run in the same batch
            elif i % 500 == 0:
                await asyncio.sleep(0)  # let the batch timer or the receiver run
                src.send_nowait(data)
            else:
                await src.send(data)
            if i % 83 != 0 or i % 97 == 0 or i % 89 == 0:
                sent.append(data)
        src.flush()
        other.flush()
        await wait_for(lambda: sum(x.type == m.MSG_DATA for x in got) == len(sent))
        data_msgs = [x for x in got if x.type == m.MSG_DATA]
        assert [x.data for x in data_msgs] == sent
        assert [x.sequence_number for x in data_msgs] == list(range(len(sent)))
        assert src.core.stats.messages_sent == len(sent) + sum(
            1 for i in range(3000) if i % 83 == 0 and i % 97 and i % 89
        )
        await rcv.close()
        await other.close()
        await src.close()


async def test_single_message_path_arms_tsni(opts: None) -> None:
    """A source that only ever sends single messages still gets its TSNI check armed."""
    async with await Context.create(opts) as a, await Context.create(opts) as b:
        rcv = await b.create_receiver("tsni", lambda msg: None)
        src = await a.create_source("tsni")
        await wait_for(lambda: src.receivers == 1)
        before = a.loop.time()
        src.send_nowait(b"hello", flush=True)
        after = a.loop.time()
        core = src.core
        deadline = core.next_timer()  # no batch held: the TSNI check is all there is
        assert deadline is not None
        assert before + core.tsni_interval <= deadline <= after + core.tsni_interval
        assert src.session.timer.deadline == deadline
        await rcv.close()
        await src.close()


async def test_fast_path_stops_while_blocked(opts: None) -> None:
    """A receiver that stops reading blocks the source: ``send`` then returns a pending
    awaitable (no message joins the batch while blocked), ``send_nowait`` raises WouldBlock
    (single-message path included); everything sent arrives in order once it reads again."""
    got: list[Message] = []
    async with await Context.create(opts) as a, await Context.create(opts) as b:
        rcv = await b.create_receiver("bp", got.append)
        src = await a.create_source("bp", attributes={"transport_session_maximum_buffer": "65536"})
        await wait_for(lambda: src.receivers == 1)
        for js in b.joined.values():
            assert js.conn is not None
            js.conn.pause_reading()
        sent = 0
        pending = None
        async with asyncio.timeout(WAIT):
            while pending is None:
                aw = src.send(sent.to_bytes(4, "big") * 16)
                if isinstance(aw, asyncio.Future) and aw.done():
                    sent += 1
                    await aw
                    continue
                pending = aw  # blocked: this message is sent once the session drains
                sent += 1
                await asyncio.sleep(0)
        assert src.writer.paused
        # No message joins the batch while blocked (the blocking write closed the run): one
        # more of the same length waits too, and the batch does not grow.
        held = src.core.batch_len
        also_pending = src.send(sent.to_bytes(4, "big") * 16)
        sent += 1
        assert not (isinstance(also_pending, asyncio.Future) and also_pending.done())
        assert src.core.batch_len == held
        try:
            src.send_nowait(b"refused", flush=True)
            raise AssertionError("send_nowait did not raise WouldBlock")
        except WouldBlock:
            pass
        for js in b.joined.values():
            assert js.conn is not None
            js.conn.resume_reading()
        async with asyncio.timeout(WAIT):
            await pending
            await also_pending
        src.flush()
        await wait_for(lambda: sum(x.type == m.MSG_DATA for x in got) == sent)
        data_msgs = [x for x in got if x.type == m.MSG_DATA]
        assert [int.from_bytes(x.data[:4], "big") for x in data_msgs] == list(range(sent))
        assert [x.sequence_number for x in data_msgs] == list(range(sent))
        await rcv.close()
        await src.close()
