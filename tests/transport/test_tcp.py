"""The sans-IO TCP transport: batching, fragmentation, TSNI, session-id check, delivery."""

from __future__ import annotations

import contextlib
import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from umcore.errors import TransportError
from umcore.transport.tcp import (
    LOSS,
    LOSS_BURST,
    DeliveryController,
    TcpReceiverSession,
    TcpSourceSession,
    encode_tcp_sid,
)
from umcore.wire import lbmc

SID = 0x1234ABCD


class Sink:
    def __init__(self) -> None:
        self.data: list[tuple[int, bytes]] = []
        self.loss: list[tuple[str, int, int]] = []

    def deliver(self, sqn: int, payload: bytes | memoryview) -> None:
        self.data.append((sqn, bytes(payload)))

    def lose(self, kind: str, sqn: int, count: int) -> None:
        self.loss.append((kind, sqn, count))


def pair(tidx: int = 0, **kw: object) -> tuple[TcpReceiverSession, Sink]:
    rcv = TcpReceiverSession(SID)
    sink = Sink()
    rcv.subscribe(DeliveryController(tidx, "t", sink.deliver, sink.lose, **kw))  # type: ignore[arg-type]
    return rcv, sink


def test_batching_minimum_length_and_flush() -> None:
    src = TcpSourceSession(SID, batching_minimum_length=2000)
    t = src.add_topic("t")
    assert src.send(t, b"a" * 1900, 0.0) is None
    out = src.send(t, b"b" * 1900, 0.001)
    assert out is not None and len(out) == 2 * (12 + 1900)  # one ~3800-byte write
    assert [m.sqn for m in lbmc.iter_messages(out)] == [0, 1]
    assert src.send(t, b"x" * 100, 0.002) is None
    # The first batch's deadline (0.2) is still pending: the timer is not moved later for the
    # new batch; at 0.2 it finds nothing due and moves on to this batch's own deadline.
    assert src.next_timer() == pytest.approx(0.2)
    assert src.handle_timer(0.1) is None
    assert src.handle_timer(0.2) is None
    assert src.next_timer() == pytest.approx(0.202)
    out = src.handle_timer(0.202)
    assert out is not None and len(out) == 112
    assert src.send(t, b"y", 0.3, flush=True) is not None  # LBM_MSG_FLUSH: at once


def test_batch_never_exceeds_datagram_max() -> None:
    src = TcpSourceSession(SID, datagram_max_size=1000, batching_minimum_length=10_000)
    t = src.add_topic("t")
    outs = [src.send(t, bytes(100), 0.0) for _ in range(30)]
    chunks = [o for o in outs if o]
    assert chunks and all(len(c) <= 1000 for c in chunks)
    assert sum(len(c) for c in chunks) + len(src.flush() or b"") == 30 * 112


def test_fragmentation_and_reassembly() -> None:
    src = TcpSourceSession(SID, datagram_max_size=1000)
    t = src.add_topic("t")
    payload = random.Random(1).randbytes(20_000)
    out = src.send(t, payload, 0.0, flush=True)
    assert out is not None
    msgs = list(lbmc.iter_messages(out))
    frags = [m.find(lbmc.Frag) for m in msgs]
    assert len(msgs) > 20 and all(f is not None and f.first_sqn == 0 for f in frags)
    assert [m.sqn for m in msgs] == list(range(len(msgs)))
    rcv, sink = pair()
    for i in range(0, len(out), 777):  # arbitrary TCP segmentation
        rcv.receive_data(out[i : i + 777])
    assert sink.data == [(len(msgs) - 1, payload)]  # sqn of the last fragment
    assert src.send(t, b"next", 0.0, flush=True) is not None


@settings(max_examples=100, deadline=None)
@given(
    sizes=st.lists(st.integers(0, 3000), min_size=1, max_size=40),
    cuts=st.lists(st.integers(1, 5000), min_size=1, max_size=20),
)
def test_stream_roundtrip_any_segmentation(sizes: list[int], cuts: list[int]) -> None:
    src = TcpSourceSession(SID, datagram_max_size=1500, batching_minimum_length=700)
    t = src.add_topic("t")
    stream = bytearray()
    sent = []
    for i, n in enumerate(sizes):
        data = bytes([i % 256]) * n
        sent.append(data)
        stream += src.send(t, data, 0.0) or b""
    stream += src.flush() or b""
    rcv, sink = pair()
    pos = i = 0
    while pos < len(stream):
        c = cuts[i % len(cuts)]
        rcv.receive_data(bytes(stream[pos : pos + c]))
        pos += c
        i += 1
    assert [d for _, d in sink.data] == sent
    assert sink.loss == []


def test_tsni_on_idle_topic_and_threshold() -> None:
    src = TcpSourceSession(SID, tsni_interval=5.0, tsni_active_threshold=12.0)
    t = src.add_topic("t")
    src.send(t, b"x", 0.0, flush=True)
    src.send(t, b"y", 0.0, flush=True)
    sent = []
    now = 0.0
    while now < 30:
        d = src.next_timer()
        if d is None:
            break
        now = d
        out = src.handle_timer(now)
        if out:
            sent.append(
                (now, [h.records for m in lbmc.iter_messages(out) for h in m.find_all(lbmc.Tsni)])
            )
    assert [round(t_, 3) for t_, _ in sent] == [5.0, 10.0]
    assert sent[0][1] == [((0, 1),)]


def test_tsni_reveals_tail_loss() -> None:
    rcv, sink = pair()
    src = TcpSourceSession(SID)
    t = src.add_topic("t")
    first = src.send(t, b"a", 0.0, flush=True)
    src.send(t, b"lost", 0.0, flush=True)  # never reaches the receiver
    assert first is not None
    rcv.receive_data(first)
    tsni = src.handle_timer(5.0)
    assert tsni is not None
    rcv.receive_data(tsni)
    assert sink.loss == [(LOSS, 1, 1)]


def test_gaps_loss_burst_and_leading_loss() -> None:
    dc_sink = Sink()
    dc = DeliveryController(0, "t", dc_sink.deliver, dc_sink.lose, max_burst_loss=5)
    dc.on_data(100, b"first")  # joining mid-stream: no leading loss reported
    dc.on_data(103, b"x")
    dc.on_data(102, b"dup")  # old: dropped
    dc.on_data(200, b"y")
    assert dc_sink.loss == [(LOSS, 101, 1), (LOSS, 102, 1), (LOSS_BURST, 104, 96)]
    assert [s for s, _ in dc_sink.data] == [100, 103, 200]


def test_sequence_wraps() -> None:
    sink = Sink()
    dc = DeliveryController(0, "t", sink.deliver, sink.lose)
    for sqn in (0xFFFFFFFE, 0xFFFFFFFF, 0, 1):
        dc.on_data(sqn, b"")
    assert sink.loss == [] and len(sink.data) == 4


def test_session_id_confirmation() -> None:
    src = TcpSourceSession(SID)
    conn = src.connection()
    assert not conn.confirmed
    hello = TcpReceiverSession(SID).connect_message()
    assert hello == encode_tcp_sid(SID)
    assert hello is not None and hello[:4] == bytes.fromhex("086b000c")
    assert conn.receive_data(hello[:5]) is False
    assert conn.receive_data(hello[5:]) is True and conn.confirmed
    stale = src.connection()
    with pytest.raises(TransportError):
        stale.receive_data(encode_tcp_sid(SID + 1))


def test_garbage_costs_the_connection() -> None:
    rcv, _ = pair()
    with pytest.raises(TransportError):
        rcv.receive_data(b"\x00\x00\x00\x02garbage")
    rcv2, _ = pair()
    with pytest.raises(TransportError):
        rcv2.receive_data(b"\x0f\x00\x00\x10" + bytes(12))  # unknown LBMC type
    conn = TcpSourceSession(SID).connection()
    with pytest.raises(TransportError):
        conn.receive_data(b"\x08\x6b\x00\x02")


@settings(max_examples=200, deadline=None)
@given(st.binary(max_size=300))
def test_random_bytes_raise_only_transport_error(data: bytes) -> None:
    rcv, _ = pair()
    with contextlib.suppress(TransportError):
        rcv.receive_data(data)


def test_unsubscribed_topic_counted() -> None:
    src = TcpSourceSession(SID)
    a, b = src.add_topic("a"), src.add_topic("b")
    rcv, sink = pair(tidx=a)
    rcv.receive_data(src.send(b, b"not mine", 0.0, flush=True) or b"")
    rcv.receive_data(src.send(a, b"mine", 0.0, flush=True) or b"")
    assert sink.data == [(0, b"mine")]
    assert rcv.stats.messages_no_topic == 1
