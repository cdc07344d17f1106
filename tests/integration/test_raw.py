"""The engine's raw receiver and raw source over real sockets (TCP, LBT-RU, LBT-RM on loopback).

A raw receiver is handed every LBMC frame of its topic's sources as it arrives, with the
session's identity; a raw source sends pre-framed messages keeping their sequence numbers, and
an ordinary receiver gets them with those numbers.
"""

from __future__ import annotations

import asyncio
import random
import struct

import pytest

from tests.integration.helpers import free_udp_port, lbt_lines, load_configuration, until
from umcore.api import Context, Message
from umcore.api import message as m
from umcore.engine.raw import RawSession
from umcore.features.properties import MessageProperties, encode_extras
from umcore.wire import lbmc

pytestmark = pytest.mark.usefixtures("reset_configuration")

N = 3000
_HEAD = struct.Struct("!BBHII")  # LBMC data header: ver/type, next header, msglen, tidx, sqn
_SEQ = struct.Struct("!I")


def _configure(transport: str) -> None:
    if transport == "tcp":
        load_configuration(
            f"""
            context resolver_multicast_interface 127.0.0.1
            context resolver_multicast_address 224.9.10.96
            context resolver_multicast_port {free_udp_port()}
            context transport_tcp_port_low 0
            context transport_tcp_port_high 0
            context request_tcp_port_low 0
            context request_tcp_port_high 0
            context request_tcp_interface 127.0.0.1
            source transport_tcp_interface 127.0.0.1
            """
        )
    else:
        group = f"224.10.{random.randrange(20, 250)}.{random.randrange(1, 250)}"
        load_configuration(lbt_lines(transport, resolver_group="224.9.10.96", data_group=group))


def _data(frame: bytes) -> tuple[int, int, bytes] | None:
    """(tidx, sqn, payload) of a plain data frame, None for anything else."""
    ver_type, nxt, msglen, tidx, sqn = _HEAD.unpack_from(frame)
    if ver_type != 0 or nxt != 0:
        return None
    assert msglen == len(frame)
    return tidx, sqn, frame[_HEAD.size :]


@pytest.mark.parametrize("transport", ["tcp", "lbtru", "lbtrm"])
async def test_raw_receiver_sees_every_frame_in_order(transport: str) -> None:
    _configure(transport)
    frames: list[tuple[RawSession, bytes]] = []
    sessions: list[tuple[RawSession, bool]] = []
    async with await Context.create() as a, await Context.create() as b:
        raw = b.open_raw_receiver(
            "raw.topic",
            lambda s, f: frames.append((s, f)),
            on_session=lambda s, active: sessions.append((s, active)),
        )
        src = await a.create_source("raw.topic")
        # Probe until the raw receiver has joined (its first frame), then the measured stream.
        probe = 0
        async with asyncio.timeout(10):
            while not frames:
                await src.send(b"probe", flush=True)
                probe += 1
                await asyncio.sleep(0.02)
        for i in range(N):
            await src.send(_SEQ.pack(i) + bytes(20), flush=i % 97 == 0)
        src.flush()

        def seen() -> int:
            return sum(
                1 for _s, f in frames if (d := _data(f)) is not None and d[2][:5] != b"probe"
            )

        await until(lambda: seen() >= N, "every frame")
        data = [d for _s, f in frames if (d := _data(f)) is not None]
        # Every data frame of the session, in arrival order: consecutive sequence numbers from
        # the first one the receiver saw, probes then the stream.
        sqns = [sqn for _t, sqn, _p in data]
        assert sqns == list(range(sqns[0], sqns[0] + len(sqns)))
        payloads = [p for _t, _sqn, p in data if p != b"probe"]
        assert [_SEQ.unpack_from(p)[0] for p in payloads] == list(range(N))
        assert all(t == src.tidx for t, _sqn, _p in data)
        ident = frames[0][0]
        assert {s for s, _f in frames} == {ident}
        assert ident.source_string == src.source_string
        assert ident.topic_index == src.tidx
        assert ident.transport == {"tcp": "TCP", "lbtru": "LBT-RU", "lbtrm": "LBTRM"}[transport]
        assert ident.session_id == src.core.session_id
        assert sessions[:1] == [(ident, True)]
        assert raw.frames == len(frames) and raw.callback_errors == 0
        b.close_raw_receiver(raw)
        await src.close()


async def test_raw_receiver_and_receiver_share_a_session() -> None:
    _configure("tcp")
    frames: list[bytes] = []
    got: list[Message] = []
    async with await Context.create() as a, await Context.create() as b:
        raw = b.open_raw_receiver("shared.topic", lambda _s, f: frames.append(f))
        rcv = await b.create_receiver("shared.topic", got.append)
        src = await a.create_source("shared.topic")
        await until(lambda: src.receivers >= 1, "joined")
        assert len(b.joined) == 1  # one connection for both
        for i in range(500):
            await src.send(_SEQ.pack(i), flush=i == 499)
        await until(lambda: sum(1 for x in got if x.type == m.MSG_DATA) == 500, "delivered")
        await until(lambda: sum(1 for f in frames if _data(f) is not None) == 500, "frames")
        data = [x for x in got if x.type == m.MSG_DATA]
        assert [_SEQ.unpack(x.data)[0] for x in data] == list(range(500))
        assert [d[2] for f in frames if (d := _data(f)) is not None] == [x.data for x in data]
        b.close_raw_receiver(raw)
        # The ordinary receiver keeps the session.
        await src.send(b"after", flush=True)
        await until(lambda: got[-1].data == b"after", "still delivered")
        await rcv.close()
        await src.close()


@pytest.mark.parametrize("transport", ["tcp", "lbtru"])
async def test_raw_source_frames_keep_their_sequence_numbers(transport: str) -> None:
    _configure(transport)
    got: list[Message] = []
    async with await Context.create() as a, await Context.create() as b:
        rcv = await b.create_receiver("fwd.topic", got.append)
        raw = await a.open_raw_source("fwd.topic")
        first = 70_000
        # TCP: the receiver's connection; LBT-RU: its connect handshake (both after the TIR).
        await until(lambda: raw.source.receivers >= 1, "receiver connected")
        extra, tail = encode_extras(MessageProperties({"hop": 1}))
        frames = []
        for i in range(200):
            sqn = first + i
            if i == 100:  # a frame with properties, as a DRO would forward it
                frames.append(
                    lbmc.encode(lbmc.LBMCMessage(lbmc.MSG_DATA, 9, sqn, extra, b"props" + tail))
                )
            else:  # a foreign topic index: the raw source writes its own
                frames.append(lbmc.encode_data(123, sqn, _SEQ.pack(i)))
        for i, f in enumerate(frames):
            await raw.send(f, flush=i % 50 == 49)
        await until(lambda: sum(1 for x in got if x.type == m.MSG_DATA) == 200, "all 200")
        data = [x for x in got if x.type == m.MSG_DATA]
        assert [x.sequence_number for x in data] == list(range(first, first + 200))
        assert data[100].properties is not None and data[100].properties["hop"] == 1
        assert data[100].data == b"props"
        assert [_SEQ.unpack(x.data)[0] for i, x in enumerate(data) if i != 100] == [
            i for i in range(200) if i != 100
        ]
        assert raw.source.next_sequence_number() == first + 200  # TSNIs report the last one
        assert not any(x.type == m.MSG_UNRECOVERABLE_LOSS for x in got)
        await rcv.close()
        await raw.close()
