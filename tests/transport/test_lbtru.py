"""Sans-IO LBT-RU: connection handshake, keepalives, NAK recovery, RST, loss, explicit time."""

from __future__ import annotations

import random
import struct

import pytest

from tests.transport.lbtsim import Net, connect_ru
from umcore.transport.delivery import LOSS
from umcore.transport.lbtru import LbtruReceiver, LbtruSource, RuReceiverConfig, RuSourceConfig
from umcore.wire import lbtru as w

SID = 0x5EED0001


def payload(i: int, size: int = 64) -> bytes:
    return struct.pack("!I", i) + bytes(size - 4)


def make(n_rcv: int = 1, src_kw: dict | None = None, **rcv_kw: object):  # type: ignore[no-untyped-def]
    src = LbtruSource(SID, RuSourceConfig(**(src_kw or {})), None, 0.0)
    rcvs = [
        LbtruReceiver(SID, RuReceiverConfig(**rcv_kw), 0.0, random.Random(i)) for i in range(n_rcv)
    ]
    return src, rcvs


def kind_of(data: bytes) -> int:
    return data[0] & 0x0F


def test_connect_request_gets_syn_and_acks_follow() -> None:
    src, (rcv,) = make(1)
    rcv.connect(0.0)
    (creq,) = rcv.outbox
    rec = w.decode(creq)
    assert isinstance(rec, w.LBTRUConnectionRequest)
    assert rec.session_id == SID and rec.client_id == rcv.client_id
    rcv.outbox.clear()
    src.receive_datagram(creq, ("10.0.0.2", 14360), 0.01)
    assert list(src.clients) == [("10.0.0.2", 14360)]
    ((syn, _addr),) = src.outbox
    sm = w.decode(syn)
    assert isinstance(sm, w.LBTRUSessionMessage) and sm.syn and sm.client_id == rcv.client_id
    rcv.receive_datagram(syn, 0.02)
    assert rcv.connected and rcv.active
    # ACKs every 500 ms while connected (the keepalive).
    acks = []
    t = 0.02
    while t < 2.0:
        nt = rcv.next_timer()
        assert nt is not None
        t = nt
        rcv.handle_timer(t)
        acks += [round(t, 2) for d in rcv.outbox if kind_of(d) == w.TYPE_ACK]
        rcv.outbox.clear()
    assert acks[:3] == [0.52, 1.02, 1.52]


def test_connect_requests_repeat_then_give_up() -> None:
    _src, (rcv,) = make(1, maximum_connect_attempts=5, connect_interval=0.1)
    ended = []
    rcv.on_end = lambda: ended.append(True)
    rcv.connect(0.0)
    t = 0.0
    while not ended:
        t = rcv.next_timer()  # type: ignore[assignment]
        rcv.handle_timer(t)
    assert sum(1 for d in rcv.outbox if kind_of(d) == w.TYPE_CREQ) == 5
    assert t == pytest.approx(0.5)


@pytest.mark.parametrize("loss", [0.0, 0.05])
def test_complete_and_in_order(loss: float) -> None:
    src, rcvs = make(2)
    rng = random.Random(11)
    net = Net(src, rcvs, drop=lambda d, b, t: rng.random() < loss, seed=5)
    tidx = src.add_topic("t")
    sinks = net.subscribe(tidx)
    connect_ru(net)
    net.step_until(0.5)
    assert len(src.clients) == 2
    n = 20_000

    def sends() -> list:  # type: ignore[type-arg]
        out = []
        for k in range(0, n, 50):

            def act(now: float, k: int = k) -> None:
                for i in range(k, k + 50):
                    src.send(tidx, payload(i), now)

            out.append((0.5 + k / 20_000, act))
        return out

    net.step_until(5.0, sends())
    net.step_until(8.0)
    for s in sinks:
        assert [sqn for sqn, _, _ in s.data] == list(range(n))
        assert s.loss == []
    if loss:
        assert src.lstats.rxs_sent > 0 and all(r.stats.naks_sent > 0 for r in rcvs)


def test_client_activity_timeout_drops_a_silent_receiver() -> None:
    src, rcvs = make(1, src_kw={"client_activity_timeout": 10.0})
    net = Net(src, rcvs)
    connect_ru(net)
    assert len(src.clients) == 1
    events = []
    # The receiver dies at t=1: nothing more goes up.
    net.drop = lambda d, b, t: d == "up" and t > 1.0
    while net.now < 12.0:
        net.step_until(net.now + 0.5)
        events += src.events
    assert src.clients == {}
    last_ack = 1.0
    assert net.now - last_ack >= 10.0


def test_unknown_client_gets_rst_and_reconnects() -> None:
    src, (rcv,) = make(1)
    ack = w.encode(w.LBTRUAck(5, session_id=SID, client_id=7))
    src.receive_datagram(ack, ("10.0.0.9", 14361), 0.0)
    ((rst, addr),) = src.outbox
    assert rst == b"\x07\x00\x00\x00" and addr == ("10.0.0.9", 14361)
    rcv.connect(0.0)
    rcv.outbox.clear()
    rcv.receive_datagram(rst, 0.1)
    assert rcv.resets == 1 and [kind_of(d) for d in rcv.outbox] == [w.TYPE_CREQ]


def test_stale_session_id_data_is_dropped() -> None:
    _src, (rcv,) = make(1)
    rcv.receive_datagram(w.encode_data(0, 0, b"", SID + 1), 0.0)
    assert rcv.stats.dgrams_dropped_sid == 1 and not rcv.active


def test_immediate_nak_and_unrecoverable_after_generation_interval() -> None:
    """RU NAKs at once (initial back-off 0); with NAKs blocked the DC reports the loss."""
    src, rcvs = make(1)
    net = Net(src, rcvs, max_latency=0.0)
    tidx = src.add_topic("t")
    (sink,) = net.subscribe(tidx)
    connect_ru(net)
    first_nak = []

    def drop(direction: str, data: bytes, now: float) -> bool:
        if direction == "up" and kind_of(data) == w.TYPE_NAK:
            first_nak.append(now)
            return True
        return kind_of(data) == w.TYPE_DATA and int.from_bytes(data[4:8], "big") == 2

    net.drop = drop

    def send_all(now: float) -> None:
        for i in range(5):
            src.send(tidx, payload(i), now, flush=True)

    net.step_until(1.0, [(0.5, send_all)])
    assert first_nak and first_nak[0] == pytest.approx(0.5)  # at once
    assert [s for s, _, _ in sink.data] == [0, 1]
    net.step_until(11.0, [(10.8, lambda now: src.send(tidx, payload(5), now, flush=True))])
    assert [(k, s) for k, s, _, _ in sink.loss] == [(LOSS, 2)]
    assert [s for s, _, _ in sink.data] == [0, 1, 3, 4, 5]
    assert rcvs[0].stats.unrecovered_tmo == 1
