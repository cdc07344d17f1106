"""Late join, OTR, request/response, UIM, MIM and message properties through real contexts on
loopback (TCP transport, multicast topic resolution on a test group, ephemeral ports)."""

from __future__ import annotations

import asyncio
from collections.abc import Callable

import pytest

from tests.integration.helpers import load_configuration, until
from umcore.api import Context, Message
from umcore.api import message as m
from umcore.config.attributes import Configuration
from umcore.features.properties import PROP_BYTE, PROP_FLOAT, PROP_SHORT, MessageProperties
from umcore.wire import lbmc


@pytest.fixture
def config(unused_udp_port_factory: Callable[[], int], reset_configuration: None) -> Configuration:
    return load_configuration(
        f"""
        context resolver_multicast_interface 127.0.0.1
        context resolver_multicast_address 224.9.10.98
        context resolver_multicast_port {unused_udp_port_factory()}
        context transport_tcp_port_low 0
        context transport_tcp_port_high 0
        context request_tcp_port_low 0
        context request_tcp_port_high 0
        context request_tcp_interface 127.0.0.1
        context mim_address 224.10.10.99
        context mim_destination_port {unused_udp_port_factory()}
        source transport_tcp_interface 127.0.0.1
        source late_join 1
        source retransmit_retention_size_threshold 50000000
        """
    )


async def test_late_join_then_live_no_gap_no_duplicate(config: Configuration) -> None:
    async with await Context.create() as sctx, await Context.create() as rctx:
        src = await sctx.create_source("lj.topic")
        for i in range(300):
            await src.send(i.to_bytes(4, "big"), flush=(i % 50 == 49))
        src.flush()
        got: list[Message] = []
        rcv = await rctx.create_receiver(
            "lj.topic", lambda msg: got.append(msg) if msg.type == m.MSG_DATA else None
        )
        await until(lambda: src.receivers > 0, "receiver connected")
        for i in range(300, 400):
            await src.send(i.to_bytes(4, "big"), flush=True)
        await until(lambda: len(got) >= 400, f"400 messages, got {len(got)}")
        sqns = [msg.sequence_number for msg in got]
        assert sqns == list(range(400))
        assert [int.from_bytes(msg.data, "big") for msg in got] == list(range(400))
        rx = [msg.sequence_number for msg in got if msg.flags & m.MSG_FLAG_RETRANSMIT]
        assert rx and rx == list(range(len(rx)))  # the retained ones, then live ones
        assert all(not msg.flags for msg in got[len(rx) :])
        await rcv.close()
        await src.close()


async def test_otr_fills_gap_the_transport_gave_up_on(config: Configuration) -> None:
    cfg = config
    cfg.config_text(
        "receiver use_otr 1\nreceiver otr_request_initial_delay 50\n"
        "receiver otr_request_minimum_interval 50\nreceiver use_late_join 0\n",
        "test-otr",
    )
    async with await Context.create() as sctx, await Context.create() as rctx:
        src = await sctx.create_source("otr.topic")
        got: list[Message] = []
        rcv = await rctx.create_receiver("otr.topic", got.append)
        await until(lambda: src.receivers > 0, "receiver connected")
        # Inject a gap in the sans-IO layer: the source skips sqn 5 on the wire (as if the
        # transport had lost it for good); it is still in the retention buffer.
        now = asyncio.get_running_loop().time
        for i in range(10):
            if i == 5:
                src.ext.retention.add(5, b"five", now())
                continue
            if i == 6:  # sent with its own sqn: the topic's sequence numbers skip 5
                frame = lbmc.encode_data(src.tidx, 6, b"m6")
                src.session.write(src.core.send_framed(src.tidx, frame, 6, now(), flush=True))
                src.ext.retention.add(6, b"m6", now())  # retained as a send would (no jump)
                continue
            await src.send(f"m{i}".encode(), flush=True)
        data = [x for x in got if x.type == m.MSG_DATA]
        await until(lambda: len([x for x in got if x.type == m.MSG_DATA]) >= 10, "10 data")
        data = [x for x in got if x.type == m.MSG_DATA]
        assert [x.sequence_number for x in data] == list(range(10))
        assert data[5].data == b"five" and data[5].flags & m.MSG_FLAG_OTR
        assert not any(x.type == m.MSG_UNRECOVERABLE_LOSS for x in got)
        await rcv.close()
        await src.close()


async def test_request_response_round_trip(config: Configuration) -> None:
    async with await Context.create() as rctx, await Context.create() as qctx:
        answered: list[int] = []

        def on_request(msg: Message) -> None:
            if msg.type == m.MSG_REQUEST:
                for k in range(3):
                    msg.respond(msg.data + f"/r{k}".encode())
                answered.append(1)

        rcv = await rctx.create_receiver("req.topic", on_request)
        src = await qctx.create_source("req.topic")
        await until(lambda: src.receivers > 0, "responder connected")
        responses: list[Message] = []
        req = await src.send_request(b"q1", responses.append)
        await until(lambda: len(responses) == 3, "three responses")
        assert sorted(r.data for r in responses) == [b"q1/r0", b"q1/r1", b"q1/r2"]
        assert all(r.type == m.MSG_RESPONSE for r in responses)
        req.close()
        # After deletion, responses are dropped.
        req2 = await src.send_request(b"q2", responses.append)
        req2.close()
        await until(lambda: len(answered) == 2, "second request answered")
        await until(lambda: qctx.features.requests.stats.responses_dropped == 3, "dropped")
        assert len(responses) == 3
        await rcv.close()
        await src.close()


async def test_uim_and_mim_reach_topic_and_callbacks(config: Configuration) -> None:
    async with await Context.create() as a, await Context.create() as b:
        got: list[Message] = []
        topicless: list[Message] = []
        rcv = await b.create_receiver("uim.topic", got.append)
        b.immediate_message_callback = topicless.append
        assert b.request_address is not None
        a.send_uim(b.request_address, b"hello", topic="uim.topic")
        a.send_uim(b.request_address, b"bare")
        await until(lambda: got and topicless, "UIMs")
        assert got[0].data == b"hello" and got[0].topic == "uim.topic"
        assert got[0].flags & m.MSG_FLAG_IMMEDIATE
        assert topicless[0].data == b"bare" and topicless[0].flags & m.MSG_FLAG_TOPICLESS
        a.send_mim("uim.topic", b"multi")
        await until(lambda: any(x.data == b"multi" for x in got), "MIM")
        mim = next(x for x in got if x.data == b"multi")
        assert mim.source.startswith("LBTRM:") and mim.topic == "uim.topic"
        # a UIM request answered by the immediate-message callback
        b.immediate_message_callback = lambda msg: msg.respond(b"pong")
        answers: list[Message] = []
        req = a.send_uim_request(b.request_address, b"ping", answers.append)
        await until(lambda: bool(answers), "UIM response")
        assert answers[0].data == b"pong"
        req.close()
        await rcv.close()


async def test_properties_every_type_through_the_wire(config: Configuration) -> None:
    async with await Context.create() as sctx, await Context.create() as rctx:
        got: list[Message] = []
        rcv = await rctx.create_receiver("props.topic", got.append)
        src = await sctx.create_source("props.topic")
        await until(lambda: src.receivers > 0, "connected")
        props = MessageProperties({"bool": True, "int": 7, "long": 1 << 40, "double": 0.5,
                                   "str": "text"})  # fmt: skip
        props.set("byte", -3, PROP_BYTE)
        props.set("short", 1234, PROP_SHORT)
        props.set("float", 2.5, PROP_FLOAT)
        await src.send(b"payload", properties=props, app_headers=[(9, b"hdr")], flush=True)
        await src.send(b"plain", flush=True)
        await until(lambda: len([x for x in got if x.type == m.MSG_DATA]) == 2, "two")
        first, second = [x for x in got if x.type == m.MSG_DATA]
        assert first.data == b"payload" and first.properties == props
        assert first.app_headers == [(9, b"hdr")]
        assert second.properties is None and second.data == b"plain"
        await rcv.close()
        await src.close()
