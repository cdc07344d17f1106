"""Sans-IO LBT-RM: in-memory source/receiver pairs with explicit time, loss and reordering."""

from __future__ import annotations

import random
import struct

import pytest

from tests.transport.lbtsim import Net
from umcore.transport.delivery import LOSS, LOSS_BURST
from umcore.transport.lbt import ReceiverConfig, SourceConfig
from umcore.transport.lbtrm import LbtrmReceiver, LbtrmSource
from umcore.transport.ratelimit import RateLimiter
from umcore.wire import lbtrm as w

SID = 0x0BADCAFE
PORT = 14390


def payload(i: int, size: int = 64) -> bytes:
    return struct.pack("!I", i) + bytes(size - 4)


def make(n_rcv: int = 1, *, src_cfg: SourceConfig | None = None, limiter=None, **rcv_kw):  # type: ignore[no-untyped-def]
    src = LbtrmSource(SID, PORT, src_cfg or SourceConfig(), limiter, 0.0)
    rcvs = [
        LbtrmReceiver(SID, PORT, ReceiverConfig(**rcv_kw), 0.0, random.Random(i))
        for i in range(n_rcv)
    ]
    return src, rcvs


def sends_for(src: LbtrmSource, tidx: int, n: int, start: float, rate: float, per: int = 50):  # type: ignore[no-untyped-def]
    actions = []
    for k in range(0, n, per):

        def act(now: float, k: int = k) -> None:
            for i in range(k, min(k + per, n)):
                src.send(tidx, payload(i), now)

        actions.append((start + k / rate, act))
    return actions


def kind_of(data: bytes) -> int:
    return data[0] & 0x0F


@pytest.mark.parametrize("loss", [0.0, 0.05])
def test_complete_and_in_order(loss: float) -> None:
    src, rcvs = make(2)
    rng = random.Random(7)
    net = Net(src, rcvs, drop=lambda d, b, t: rng.random() < loss, seed=3)
    tidx = src.add_topic("t")
    sinks = net.subscribe(tidx)
    net.step_until(0.5)  # SMs: the receivers learn where the stream starts
    n = 20_000
    net.step_until(5.0, sends_for(src, tidx, n, 0.5, 20_000.0))
    net.step_until(8.0)
    for s in sinks:
        assert [sqn for sqn, _, _ in s.data] == list(range(n))
        assert [struct.unpack_from("!I", p)[0] for _, p, _ in s.data] == list(range(n))
        assert s.loss == []
    for r in rcvs:
        assert r.stats.unrecovered_tmo == 0 and r.stats.unrecovered_txw == 0
        if loss:
            assert r.stats.naks_sent > 0
    if loss:
        assert src.lstats.rxs_sent > 0 and net.dropped > 0


def test_first_datagram_lost_is_recovered() -> None:
    """The DC of a topic starts tentatively while an older datagram is missing."""
    src, rcvs = make(1)
    dropped = []

    def drop(direction: str, data: bytes, now: float) -> bool:
        if direction == "down" and kind_of(data) == w.TYPE_DATA and not dropped:
            dropped.append(data)
            return True
        return False

    net = Net(src, rcvs, drop=drop)
    tidx = src.add_topic("t")
    (sink,) = net.subscribe(tidx)
    net.step_until(0.3)
    net.step_until(2.0, sends_for(src, tidx, 200, 0.3, 1000.0, per=40))
    assert dropped
    assert [s for s, _, _ in sink.data] == list(range(200))


def test_nak_suppression_ignore_interval_and_one_ncf() -> None:
    src, _ = make(0)
    tidx = src.add_topic("t")
    for i in range(3):
        src.send(tidx, payload(i), 0.0, flush=True)
    src.ready.clear()
    src.handle_nak([1], ("r1", 1), 0.01)
    assert [kind_of(d) for d, _ in src.outbox] == [w.TYPE_DATA]
    rx = w.decode(src.outbox[0][0])
    assert isinstance(rx, w.LBTRMData) and rx.retransmission and rx.sqn == 1
    src.outbox.clear()
    # Within the ignore interval: the first rejected NAK gets an NCF "ignored", later ones nothing.
    src.handle_nak([1], ("r2", 1), 0.1)
    src.handle_nak([1], ("r3", 1), 0.2)
    ncfs = [w.decode(d) for d, _ in src.outbox]
    assert len(ncfs) == 1 and isinstance(ncfs[0], w.LBTRMNcf)
    assert ncfs[0].reason == w.NCF_REASON_IGNORED and ncfs[0].sqns == (1,)
    src.outbox.clear()
    src.handle_nak([1], ("r2", 1), 0.6)  # past the interval: retransmitted again
    assert [w.decode(d).retransmission for d, _ in src.outbox] == [True]  # type: ignore[union-attr]
    assert src.lstats.naks_ignored == 2


def test_nak_outside_window_gets_do_not_retry() -> None:
    cfg = SourceConfig(transmission_window_size=65536, batching_minimum_length=1)
    src, _ = make(0, src_cfg=cfg)
    tidx = src.add_topic("t")
    for i in range(200):
        src.send(tidx, payload(i, 1000), 0.0)
    assert src.trail_sqn > 0
    src.handle_nak([0], None, 0.1)
    (ncf,) = [w.decode(d) for d, _ in src.outbox]
    assert isinstance(ncf, w.LBTRMNcf) and ncf.reason == w.NCF_REASON_NO_RETRY


def test_retransmit_rate_limit_sheds_oldest_first() -> None:
    limiter = RateLimiter(100_000_000, 8 * 2500, 1.0)  # 2500 bytes of retransmission per second
    src, _ = make(0, limiter=limiter)
    tidx = src.add_topic("t")
    for i in range(10):
        src.send(tidx, payload(i, 1000), 0.0, flush=True)
    src.handle_nak([5, 2, 3, 4], None, 0.1)
    out = [w.decode(d) for d, _ in src.outbox]
    rxs = [r.sqn for r in out if isinstance(r, w.LBTRMData)]
    ncfs = [r for r in out if isinstance(r, w.LBTRMNcf)]
    assert rxs == [2, 3, 4]  # oldest first; the third crosses the budget and still goes
    assert len(ncfs) == 1 and ncfs[0].reason == w.NCF_REASON_SHED and ncfs[0].sqns == (5,)
    assert src.lstats.naks_shed == 1


def test_data_rate_limit_blocks_then_releases() -> None:
    limiter = RateLimiter(8 * 5000, 8 * 5000, 0.01)  # 50 bytes per 10 ms interval
    src, _ = make(0, limiter=limiter, src_cfg=SourceConfig(batching_minimum_length=1))
    tidx = src.add_topic("t")
    src.send(tidx, payload(0, 100), 0.0)
    assert len(src.ready) == 1 and not src.blocked  # crossing the budget still sends
    src.send(tidx, payload(1, 100), 0.001)
    assert len(src.ready) == 1 and src.blocked
    t = src.next_timer()
    assert t is not None and t == pytest.approx(0.01)
    src.handle_timer(0.01)  # the first datagram overdrew 70 bytes: this interval pays for it
    assert len(src.ready) == 1 and src.blocked
    assert src.next_timer() == pytest.approx(0.02)
    src.handle_timer(0.02)
    assert len(src.ready) == 2 and not src.blocked and src.unblocked


def test_session_messages_back_off_and_data_resets_them() -> None:
    src, _ = make(0)
    times = []
    t = 0.0
    while t < 30:
        nt = src.next_timer()
        assert nt is not None
        t = nt
        src.handle_timer(t)
        if src.outbox:
            times.append(round(t, 3))
            src.outbox.clear()
    assert times[:7] == [0.2, 0.6, 1.4, 3.0, 6.2, 12.6, 22.6]
    tidx = src.add_topic("t")
    src.send(tidx, b"x", 30.0, flush=True)
    assert src.next_timer() == pytest.approx(30.2)


def test_worked_loss_example() -> None:
    """Seed 003 L3710-3736: topic A sqn 4 in the last datagram lost at T=0, NAKs blocked."""
    src, rcvs = make(1)
    (rcv,) = rcvs
    lost_dgram = []

    def drop(direction: str, data: bytes, now: float) -> bool:
        if direction == "up":
            return True  # a switch blocks every NAK
        if kind_of(data) == w.TYPE_DATA and now < 0.1 and data[8:12] == (5).to_bytes(4, "big"):
            lost_dgram.append(now)
            return True
        return False

    net = Net(src, rcvs, drop=drop, max_latency=0.0)
    a, b, _c = (src.add_topic(t) for t in "ABC")
    sa = net.subscribe(a, "A")[0]
    sb = net.subscribe(b, "B")[0]

    def burst(now: float) -> None:
        # One message per datagram: #0 A0, #1 B0, #2 A1, #3 A2, #4 A3, #5 A4 (lost), #6 C0.
        for tidx in (a, b, a, a, a, a):
            src.send(tidx, b"m", now, flush=True)

    net.step_until(0.1, [(0.0, burst)])
    assert lost_dgram
    # What the DC of A saw: sqns 0..3 delivered, sqn 4 missing (it was in datagram 5).
    assert [s for s, _, _ in sa.data] == [0, 1, 2, 3]
    # B keeps flowing the whole time.
    bsends = [(t, lambda now: src.send(b, b"b", now, flush=True)) for t in (1.0, 7.0, 12.0)]
    net.step_until(10.19, bsends[:2])
    assert rcv.stats.unrecovered_tmo == 0
    net.step_until(10.25)
    assert rcv.stats.unrecovered_tmo == 1  # ~T_sm(0.2) + 10 s: the transport gives up...
    assert sa.loss == []  # ...with no application event
    net.step_until(14.9, bsends[2:])
    assert sa.loss == []
    net.step_until(15.05)
    assert [(k, s, n) for k, s, n, _ in sa.loss] == [(LOSS, 4, 1)]
    assert sa.loss[0][3] == pytest.approx(15.0, abs=0.01)  # T_tsni(5) + 10 s
    assert [s for s, _, _ in sb.data] == [0, 1, 2, 3]


def _no_recovery(drop_sqns: set[int], n: int, **kw: object):  # type: ignore[no-untyped-def]
    src, rcvs = make(1, send_naks=False, **kw)

    def drop(direction: str, data: bytes, now: float) -> bool:
        return kind_of(data) == w.TYPE_DATA and int.from_bytes(data[8:12], "big") in drop_sqns

    net = Net(src, rcvs, drop=drop, max_latency=0.0)
    tidx = src.add_topic("t")
    (sink,) = net.subscribe(tidx)
    net.step_until(0.3)

    def send_all(now: float) -> None:
        for i in range(n):
            src.send(tidx, payload(i), now, flush=True)

    net.step_until(0.5, [(0.3, send_all)])
    return src, rcvs[0], net, tidx, sink


def test_recovery_disabled_one_loss_event_per_sqn_after_the_dc_timer() -> None:
    src, rcv, net, tidx, sink = _no_recovery({3, 4, 7}, 10)
    assert rcv.stats.naks_sent == 0
    assert [s for s, _, _ in sink.data] == [0, 1, 2]  # 5, 6, 8, 9 wait in the order map
    net.step_until(10.29)
    assert sink.loss == []
    # The DC timer (10 s from 0.3) has expired, but loss is declared on a receive event.
    net.step_until(10.5, [(10.4, lambda now: src.send(tidx, payload(10), now, flush=True))])
    assert [(k, s, n) for k, s, n, _ in sink.loss] == [(LOSS, 3, 1), (LOSS, 4, 1), (LOSS, 7, 1)]
    assert [s for s, _, _ in sink.data] == [0, 1, 2, 5, 6, 8, 9, 10]
    assert rcv.stats.unrecovered_tmo == 3


def test_recovery_disabled_burst_beyond_the_limit() -> None:
    _src, _rcv, _net, _tidx, sink = _no_recovery(set(range(20, 28)), 40, max_burst_loss=5)
    # The 8-message gap beyond the burst limit is one burst event at once.
    assert [(k, s, n) for k, s, n, _ in sink.loss] == [(LOSS_BURST, 20, 8)]
    assert [s for s, _, _ in sink.data] == [*range(20), *range(28, 40)]


def test_leading_loss_is_not_reported() -> None:
    _src, _rcv, net, _tidx, sink = _no_recovery({0, 1}, 5)
    net.step_until(12.0)
    assert sink.loss == [] and [s for s, _, _ in sink.data] == [2, 3, 4]


def test_tail_loss_detected_by_session_message() -> None:
    src, rcvs = make(1)
    dropped = []

    def drop(direction: str, data: bytes, now: float) -> bool:
        if kind_of(data) == w.TYPE_DATA and not dropped and int.from_bytes(data[8:12], "big") == 9:
            dropped.append(now)
            return True
        return False

    net = Net(src, rcvs, drop=drop)
    tidx = src.add_topic("t")
    (sink,) = net.subscribe(tidx)
    net.step_until(0.3)
    net.step_until(
        0.31, [(0.3, lambda now: [src.send(tidx, payload(i), now, flush=True) for i in range(10)])]
    )
    assert [s for s, _, _ in sink.data] == list(range(9))
    net.step_until(0.6)  # SM at 0.5, NAK after 25-75 ms, retransmission
    assert [s for s, _, _ in sink.data] == list(range(10))
    assert rcvs[0].stats.naks_sent == 1


def test_activity_timeout_ends_session() -> None:
    rcv = LbtrmReceiver(SID, PORT, ReceiverConfig(activity_timeout=60.0), 0.0)
    ended = []
    rcv.on_end = lambda: ended.append(True)
    src = LbtrmSource(SID, PORT)
    src.handle_timer(0.2)
    ((sm, _),) = src.outbox
    rcv.receive_datagram(sm, 0.2)
    assert rcv.active
    t = rcv.next_timer()
    while t is not None and not ended:
        rcv.handle_timer(t)
        t = rcv.next_timer()
    assert ended and rcv.ended


def test_foreign_session_is_dropped() -> None:
    rcv = LbtrmReceiver(SID, PORT)
    rcv.receive_datagram(w.encode_data(SID + 1, PORT, 0, 0, b""), 0.0)
    assert rcv.stats.dgrams_dropped_sid == 1 and not rcv.active
