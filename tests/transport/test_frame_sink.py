"""Receiver cores hand a raw receiver's sink every LBMC frame, whole, in arrival order.

TCP: however the byte stream is cut into reads, the sink gets each frame once, whole, data and
control alike, and the DCs still deliver what they would without a sink.
"""

from __future__ import annotations

import random

import pytest

from umcore.errors import TransportError
from umcore.transport.tcp import DeliveryController, TcpReceiverSession
from umcore.wire import lbmc


def _stream() -> list[bytes]:
    frames = [lbmc.encode_data(3, sqn, bytes([sqn % 251]) * (sqn % 40)) for sqn in range(300)]
    frames.insert(
        150, lbmc.encode(lbmc.LBMCMessage(lbmc.MSG_CONTROL, 0, 0, [lbmc.Tsni(((3, 149),))], b""))
    )
    frames.insert(10, lbmc.encode_data(9, 0, b"another topic"))
    return frames


@pytest.mark.parametrize("seed", range(5))
def test_tcp_sink_gets_whole_frames_in_order_however_the_stream_is_cut(seed: int) -> None:
    frames = _stream()
    stream = b"".join(frames)
    rng = random.Random(seed)
    core = TcpReceiverSession(None)
    got: list[bytes] = []
    core.frame_sink = got.append
    delivered: list[tuple[int, bytes]] = []
    dc = DeliveryController(
        3, "t", lambda sqn, p: delivered.append((sqn, bytes(p))), lambda *a: None
    )
    core.subscribe(dc)
    pos = 0
    while pos < len(stream):
        step = rng.choice([1, 3, 12, 100, 2000])
        core.receive_data(stream[pos : pos + step])
        pos += step
    assert got == frames
    assert delivered == [(sqn, bytes([sqn % 251]) * (sqn % 40)) for sqn in range(300)]
    assert core.stats.bytes_received == len(stream)


def test_tcp_sink_garbage_is_a_transport_error() -> None:
    core = TcpReceiverSession(None)
    core.frame_sink = lambda f: None
    with pytest.raises(TransportError):
        core.receive_data(b"\x00\x00\x00\x02")  # msglen 2: no frame is that short
