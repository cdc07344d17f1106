"""Receiver cores hand a raw receiver's sink every LBMC frame, whole, in arrival order (a
read's frames in one call).

TCP: however the byte stream is cut into reads, the sink gets each frame once, whole, data and
control alike, and the DCs still deliver what they would without a sink.
"""

from __future__ import annotations

import random

import pytest

from umcore.engine.raw import RawReceiver, RawSession
from umcore.errors import LocalProtocolError, TransportError
from umcore.resolver.core import SourceInfo
from umcore.transport.tcp import DeliveryController, TcpReceiverSession
from umcore.wire import lbmc, lbmr


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
    core.frame_sink = got.extend
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
    core.frame_sink = lambda fs: None
    with pytest.raises(TransportError):
        core.receive_data(b"\x00\x00\x00\x02")  # msglen 2: no frame is that short


def test_raw_receiver_batches_a_read_or_calls_per_frame() -> None:
    info = SourceInfo("t", 3, lbmr.TCPInfo("10.0.0.1", 14371, 1))
    batches: list[tuple[RawSession, list[bytes]]] = []
    each: list[bytes] = []
    batch = RawReceiver("t", None, None, on_frames=lambda s, fs: batches.append((s, fs)))
    single = RawReceiver("t", lambda s, f: each.append(f), None)
    frames = [b"one", b"two", b"three"]
    batch.sink_for(info, "TCP:10.0.0.1:14371:1")(frames)
    single.sink_for(info, "TCP:10.0.0.1:14371:1")(frames)
    assert [fs for _s, fs in batches] == [frames] and batches[0][0].topic_index == 3
    assert each == frames
    assert batch.frames == single.frames == 3
    with pytest.raises(LocalProtocolError):
        RawReceiver("t", None, None)
    with pytest.raises(LocalProtocolError):
        RawReceiver("t", lambda s, f: None, None, on_frames=lambda s, fs: None)
