"""Context, Source and Receiver on loopback: multicast topic resolution (no daemon), TCP data."""

from __future__ import annotations

import asyncio

import pytest

from tests.api.conftest import WAIT, wait_for
from umcore.api import Context, Message
from umcore.api import message as m
from umcore.errors import UMError, WouldBlock


async def test_publish_subscribe_in_order(opts: None) -> None:
    got: list[Message] = []
    async with await Context.create(opts) as a, await Context.create(opts) as b:
        rcv = await b.create_receiver("greetings", got.append)
        src = await a.create_source("greetings")
        await wait_for(lambda: src.receivers == 1)
        for i in range(1000):
            await src.send(i.to_bytes(4, "big"))
        src.flush()
        await wait_for(lambda: sum(x.type == m.MSG_DATA for x in got) == 1000)
        data = [x for x in got if x.type == m.MSG_DATA]
        assert [int.from_bytes(x.data, "big") for x in data] == list(range(1000))
        assert [x.sequence_number for x in data] == list(range(1000))
        assert got[0].type == m.MSG_BOS and got[0].source == src.source_string
        await rcv.close()


async def test_eos_when_source_closes_and_bos_for_late_receiver(opts: None) -> None:
    first: list[Message] = []
    late: list[Message] = []
    async with await Context.create(opts) as a, await Context.create(opts) as b:
        await b.create_receiver("t", first.append)
        src = await a.create_source("t")
        await wait_for(lambda: src.receivers == 1)
        await src.send(b"x", flush=True)
        await wait_for(lambda: any(x.type == m.MSG_DATA for x in first))
        # a second receiver of the same topic in the joined context: BOS at once
        await b.create_receiver("t", late.append)
        assert [x.type for x in late] == [m.MSG_BOS]
        await src.close()
        await wait_for(lambda: first[-1].type == m.MSG_EOS and late[-1].type == m.MSG_EOS)


async def test_async_iterator_and_fragmented_message(opts: None) -> None:
    big = bytes(range(256)) * 1000  # 256,000 bytes: UM fragments it
    async with await Context.create(opts) as a, await Context.create(opts) as b:
        rcv = await b.create_receiver("big")
        src = await a.create_source("big")
        await wait_for(lambda: src.receivers == 1)
        await src.send(big, flush=True)
        async with asyncio.timeout(WAIT):
            msgs = []
            async for msg in rcv:
                msgs.append(msg)
                if msg.type == m.MSG_DATA:
                    break
        assert [x.type for x in msgs] == [m.MSG_BOS, m.MSG_DATA]
        assert msgs[-1].data == big
        assert msgs[-1].sequence_number == 3  # 4 fragments of < 64 KB; sqn of the last


async def test_same_context_source_and_receiver(opts: None) -> None:
    got: list[Message] = []
    async with await Context.create(opts) as a:
        src = await a.create_source("self")
        await a.create_receiver("self", got.append)
        await wait_for(lambda: src.receivers == 1)
        await src.send(b"me", flush=True)
        await wait_for(lambda: any(x.data == b"me" for x in got))


async def test_nonblocking_send_would_block_then_wakeup(opts: None) -> None:
    events: list[int] = []
    async with await Context.create(opts) as a, await Context.create(opts) as b:
        rcv = await b.create_receiver("slow")  # no callback: a bounded queue
        src = await a.create_source(
            "slow",
            attributes={"transport_session_maximum_buffer": "65536"},
            on_event=lambda code, info: events.append(code),
        )
        await wait_for(lambda: src.receivers == 1)
        # stop reading on the receiver side so the source's buffers fill
        for js in b.joined.values():
            assert js.conn is not None
            js.conn.pause_reading()
        blocked = False
        async with asyncio.timeout(WAIT):
            while not blocked:
                try:
                    src.send_nowait(bytes(1000), flush=True)
                except WouldBlock:
                    blocked = True
                await asyncio.sleep(0)
        for js in b.joined.values():
            assert js.conn is not None
            js.conn.resume_reading()
        await wait_for(lambda: m.SRC_EVENT_WAKEUP in events)
        assert events[0] == m.SRC_EVENT_CONNECT
        await rcv.close()


async def test_context_close_refuses_with_live_objects(opts: None) -> None:
    ctx = await Context.create(opts)
    src = await ctx.create_source("t")
    with pytest.raises(UMError):
        await ctx.close()
    await src.close()
    await ctx.close()


async def test_garbage_from_a_receiver_costs_only_its_connection(opts: None) -> None:
    got: list[Message] = []
    async with await Context.create(opts) as a, await Context.create(opts) as b:
        src = await a.create_source("t")
        port = src.transport_info.port
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        writer.write(b"\x00\x00\x00\x01 this is not LBMC")
        async with asyncio.timeout(WAIT):
            assert await reader.read() == b""  # the source dropped it
        writer.close()
        await b.create_receiver("t", got.append)
        await wait_for(lambda: src.receivers == 1)
        await src.send(b"still fine", flush=True)
        await wait_for(lambda: any(x.data == b"still fine" for x in got))


async def test_wildcard_receiver_finds_matching_topics(opts: None) -> None:
    got: list[Message] = []
    async with await Context.create() as a, await Context.create() as b:
        early = await a.create_source("prices.eur")  # exists before the wildcard receiver
        w = await b.create_wildcard_receiver(r"^prices\.", got.append)
        late = await a.create_source("prices.usd")
        other = await a.create_source("news.today")
        await wait_for(lambda: early.receivers == 1 and late.receivers == 1)
        for s in (early, late, other):
            await s.send(s.topic.encode(), flush=True)
        await wait_for(lambda: sum(x.type == m.MSG_DATA for x in got) == 2)
        data = sorted((x.topic, x.data) for x in got if x.type == m.MSG_DATA)
        assert data == [("prices.eur", b"prices.eur"), ("prices.usd", b"prices.usd")]
        assert other.receivers in (0, 1)  # shares a session only if the pool put it there
        assert {x.topic for x in got if x.type == m.MSG_BOS} == {"prices.eur", "prices.usd"}
        await w.close()


async def test_bad_wildcard_pattern_is_a_config_error(opts: None) -> None:
    from umcore.errors import ConfigError

    async with await Context.create() as a:
        with pytest.raises(ConfigError):
            await a.create_wildcard_receiver("(unclosed")


async def test_ordered_delivery_0_delivers_fragments_one_by_one(opts: None) -> None:
    big = bytes(range(256)) * 1000  # 256,000 bytes: 4 UM fragments
    got: list[Message] = []
    async with await Context.create(opts) as a, await Context.create(opts) as b:
        await b.create_receiver("frags", got.append, attributes={"ordered_delivery": "0"})
        src = await a.create_source("frags")
        await wait_for(lambda: src.receivers == 1)
        await src.send(big, flush=True)
        await wait_for(lambda: sum(x.type == m.MSG_DATA for x in got) == 4)
        data = [x for x in got if x.type == m.MSG_DATA]
        assert [x.sequence_number for x in data] == [0, 1, 2, 3]
        infos = [x.fragment_info for x in data]
        assert all(i is not None and i[0] == 0 and i[2] == len(big) for i in infos)
        assert b"".join(x.data for x in sorted(data, key=lambda x: x.fragment_info[1])) == big
        await src.send(b"small", flush=True)
        await wait_for(lambda: got[-1].data == b"small")
        assert got[-1].fragment_info is None
