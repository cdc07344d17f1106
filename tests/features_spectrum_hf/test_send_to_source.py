"""Sending to sources (seed 003 10.15): a UIM addressed "SOURCE:" + a source string reaches the
publishing context: its receiver of the UIM's topic, or its immediate-message callbacks."""

from __future__ import annotations

import pytest

from tests.api.conftest import wait_for
from umcore.api import Context, Message
from umcore.api import message as m
from umcore.errors import UMError


async def test_uim_to_source_string(opts: None) -> None:
    topicless: list[Message] = []
    on_topic: list[Message] = []
    data: list[Message] = []
    async with await Context.create(opts) as pub, await Context.create(opts) as sub:
        pub.immediate_message_callback = topicless.append
        replies = await pub.create_receiver("refresh.requests", on_topic.append)
        src = await pub.create_source("prices")
        await sub.create_receiver("prices", data.append)
        await wait_for(lambda: src.receivers == 1)
        await src.send(b"tick", flush=True)
        await wait_for(lambda: any(x.type == m.MSG_DATA for x in data))
        msg = next(x for x in data if x.type == m.MSG_DATA)
        assert msg.source == src.source_string
        sub.send_uim("SOURCE:" + msg.source, b"refresh please")  # topicless
        sub.send_uim("source:" + msg.source + "[0]", b"on topic", topic="refresh.requests")
        await wait_for(lambda: len(topicless) == 1 and len(on_topic) == 1)
        assert topicless[0].data == b"refresh please"
        assert (
            topicless[0].flags & m.MSG_FLAG_TOPICLESS and topicless[0].flags & m.MSG_FLAG_IMMEDIATE
        )
        assert on_topic[0].data == b"on topic" and on_topic[0].topic == "refresh.requests"
        with pytest.raises(UMError, match="unknown source"):
            sub.send_uim("SOURCE:TCP:10.9.9.9:1:00000001", b"nobody")
        await replies.close()


async def test_uim_to_source_seen_by_a_wildcard_receiver(opts: None) -> None:
    topicless: list[Message] = []
    data: list[Message] = []
    async with await Context.create(opts) as pub, await Context.create(opts) as sub:
        pub.immediate_message_callback = topicless.append
        src = await pub.create_source("wc.prices")
        w = await sub.create_wildcard_receiver(r"^wc\.", data.append)
        await wait_for(lambda: src.receivers == 1)
        await src.send(b"tick", flush=True)
        await wait_for(lambda: any(x.type == m.MSG_DATA for x in data))
        sub.send_uim("SOURCE:" + data[-1].source, b"hello source")
        await wait_for(lambda: len(topicless) == 1)
        assert topicless[0].data == b"hello source"
        await w.close()
        await src.close()
        with pytest.raises(UMError, match="unknown source"):  # forgotten with its fan-out
            sub.send_uim("SOURCE:" + data[-1].source, b"gone")
