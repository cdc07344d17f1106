"""Spectrum (seed 003 10.16): channels within a topic, per-channel callbacks, the unsubscribed
channel behaviours, order across channels."""

from __future__ import annotations

import pytest

from tests.api.conftest import wait_for
from umcore.api import Context, Message
from umcore.api import message as m
from umcore.errors import ConfigError, UMError
from umcore.features.spectrum import ROUTE_DISCARD, ROUTE_RECEIVER, ChannelMap


def test_channel_map_routing_rules() -> None:
    def cb(msg: object) -> None:
        return None

    cm = ChannelMap()
    assert cm.route(5) is ROUTE_RECEIVER and cm.route(None) is ROUTE_RECEIVER  # nothing subscribed
    cm.subscribe(1, cb)
    cm.subscribe(2, None)
    assert cm.route(1) is cb and cm.route(2) is ROUTE_RECEIVER
    assert cm.route(3) is ROUTE_RECEIVER  # unrecognized_channel_behavior deliver
    strict = ChannelMap("discard", "discard")
    strict.subscribe(1, cb)
    assert strict.route(3) is ROUTE_DISCARD and strict.route(None) is ROUTE_DISCARD
    assert strict.unsubscribe(1) and not strict.unsubscribe(1)
    with pytest.raises(ConfigError):
        cm.subscribe(1 << 32, None)
    with pytest.raises(ConfigError):
        ChannelMap("drop", "deliver")


async def test_channels_filtered_and_in_order_across_channels(opts: None) -> None:
    main: list[Message] = []
    ch1: list[Message] = []
    ch2: list[Message] = []
    order: list[int] = []

    def on1(msg: Message) -> None:
        ch1.append(msg)
        order.append(int.from_bytes(msg.data, "big"))

    def on2(msg: Message) -> None:
        ch2.append(msg)
        order.append(int.from_bytes(msg.data, "big"))

    def on_main(msg: Message) -> None:
        main.append(msg)
        if msg.type == m.MSG_DATA:
            order.append(int.from_bytes(msg.data, "big"))

    async with await Context.create(opts) as a, await Context.create(opts) as b:
        rcv = await b.create_receiver("spectrum.t", on_main)
        rcv.subscribe_channel(1, on1)
        rcv.subscribe_channel(2, on2)
        rcv.subscribe_channel(7)  # no callback: the receiver's own
        assert rcv.channels == (1, 2, 7)
        src = await a.create_source("spectrum.t")
        chans = {n: src.channel(n) for n in (1, 2, 3, 7)}
        await wait_for(lambda: src.receivers == 1)
        plan = [1, 2, 1, 3, 7, 2, 0, 1]  # 0 = no channel
        for i in range(400):
            c = plan[i % len(plan)]
            data = i.to_bytes(4, "big")
            if c == 0:
                await src.send(data)
            else:
                await chans[c].send(data)
        src.flush()
        await wait_for(lambda: len(order) == 400)
        assert order == list(range(400))  # one topic stream: order holds across channels
        assert {x.channel_info for x in ch1} == {1} and len(ch1) == 150
        assert {x.channel_info for x in ch2} == {2} and len(ch2) == 100
        data_main = [x for x in main if x.type == m.MSG_DATA]
        # channel 7 (no callback), 3 (unrecognized: delivered) and no channel (null: delivered)
        assert sorted({x.channel_info for x in data_main}, key=str) == sorted({7, 3, None}, key=str)
        assert len(data_main) == 150
        # events go to the receiver's callback only
        assert main[0].type == m.MSG_BOS and all(x.type == m.MSG_DATA for x in ch1 + ch2)
        # unsubscribing: channel 1 becomes unrecognized (delivered to the main callback)
        rcv.unsubscribe_channel(1)
        with pytest.raises(UMError):
            rcv.unsubscribe_channel(1)
        await chans[1].send(b"late", flush=True)
        await wait_for(lambda: main[-1].data == b"late")
        assert main[-1].channel_info == 1 and len(ch1) == 150
        await src.close()
        await wait_for(lambda: main[-1].type == m.MSG_EOS)
        assert all(x.type == m.MSG_DATA for x in ch2)


async def test_discard_behaviours_and_plain_receiver(opts: None) -> None:
    strict: list[Message] = []
    plain: list[Message] = []
    attrs = {"null_channel_behavior": "discard", "unrecognized_channel_behavior": "discard"}
    async with await Context.create(opts) as a, await Context.create(opts) as b:
        r1 = await b.create_receiver("spectrum.d", strict.append, attributes=attrs)
        r1.subscribe_channel(5)
        await b.create_receiver("spectrum.d", plain.append)  # no subscriptions: everything
        src = await a.create_source("spectrum.d")
        await wait_for(lambda: src.receivers == 1)
        await src.send(b"none")
        await src.channel(6).send(b"six")
        await src.channel(5).send(b"five", flush=True)
        await wait_for(lambda: sum(x.type == m.MSG_DATA for x in plain) == 3)
        await wait_for(lambda: any(x.data == b"five" for x in strict))
        assert [x.data for x in strict if x.type == m.MSG_DATA] == [b"five"]
        assert r1.channel_discarded == 2
        assert [(x.data, x.channel_info) for x in plain if x.type == m.MSG_DATA] == [
            (b"none", None), (b"six", 6), (b"five", 5),
        ]  # fmt: skip


async def test_channel_receiver_without_callback_queues(opts: None) -> None:
    side: list[Message] = []
    async with await Context.create(opts) as a, await Context.create(opts) as b:
        rcv = await b.create_receiver("spectrum.q")  # async iterator
        rcv.subscribe_channel(9, side.append)
        src = await a.create_source("spectrum.q")
        await wait_for(lambda: src.receivers == 1)
        await src.channel(9).send(b"nine")
        await src.channel(8).send(b"eight", flush=True)
        got = [await rcv.get(), await rcv.get()]
        assert [x.type for x in got] == [m.MSG_BOS, m.MSG_DATA] and got[1].data == b"eight"
        await wait_for(lambda: len(side) == 1)
        assert side[0].data == b"nine"
