"""Regression: per-message flush at the data rate limit with 5 % loss each way (LBT-RU, LBT-RM).

Every message is its own datagram and the application offers more than the context's data rate
limit (10 Mbit/s, UM's default), so the source is blocked at every rate interval, as
``umcore.tools.topology --rate 5000`` with ``pyum_fault_drop_*`` 0.05 makes it.  Before the fix
new data spent each interval's budget before the NAKs came in, every NAK was shed with an NCF,
receivers waited their suppress interval and the receiver fell ever further behind.  Now only
the retransmit limit can refuse a retransmission (:mod:`umcore.transport.ratelimit`): the run
completes in order, with no loss event and no NAK shed.
"""

from __future__ import annotations

import random
import struct

import pytest

from tests.transport.lbtsim import Net, connect_ru
from umcore.transport.lbt import LbtReceiver, LbtSource, ReceiverConfig, SourceConfig
from umcore.transport.lbtrm import LbtrmReceiver, LbtrmSource
from umcore.transport.lbtru import LbtruReceiver, LbtruSource, RuReceiverConfig, RuSourceConfig
from umcore.transport.ratelimit import RateLimiter

SID = 0x0F1A5401
N = 20_000
OFFERED = 15_000.0  # messages/s: ~11.5 Mbit/s of 96-byte datagrams, above the 10 Mbit/s limit
LOSS = 0.05
# Simulated seconds allowed after the last send for the last repair (UM's defaults make a lost
# retransmission cost ~1.2 s: ignore interval 500 ms, then NCF + 1 s suppress).
RECOVERY_S = 6.0


def _make(kind: str) -> tuple[LbtSource, LbtReceiver, RateLimiter]:
    if kind == "lbtru":
        lim = RateLimiter(10_000_000, 5_000_000, 0.1)
        src: LbtSource = LbtruSource(SID, RuSourceConfig(), lim, 0.0)
        rcv: LbtReceiver = LbtruReceiver(SID, RuReceiverConfig(), 0.0, random.Random(1))
    else:
        lim = RateLimiter(10_000_000, 5_000_000, 0.01)
        src = LbtrmSource(SID, 14390, SourceConfig(), lim, 0.0)
        rcv = LbtrmReceiver(SID, 14390, ReceiverConfig(), 0.0, random.Random(1))
    return src, rcv, lim


@pytest.mark.parametrize("kind", ["lbtru", "lbtrm"])
def test_unbatched_at_the_rate_limit_with_loss_completes(kind: str) -> None:
    src, rcv, lim = _make(kind)
    rng = random.Random(3)
    net = Net(src, [rcv], drop=lambda d, b, t: rng.random() < LOSS, seed=5,
              max_latency=0.0005, fifo=True)  # fmt: skip
    if kind == "lbtru":
        connect_ru(net)
    tidx = src.add_topic("t")
    (sink,) = net.subscribe(tidx)
    t0 = net.now + 0.01
    blocked = 0
    for i in range(N):
        net.step_until(max(t0 + i / OFFERED, net.now))
        while src.blocked:  # the API's blocking send: wait for the next refill
            blocked += 1
            net.step_until(max(net.now, lim.next_refill()) + 1e-6)
        src.send(tidx, struct.pack("!I", i) + bytes(60), net.now, True)
        net.pump()
    assert blocked > 0, "the offered rate must exceed the data rate limit"
    end = net.now
    while len(sink.data) < N and net.now < end + RECOVERY_S:
        net.step_until(net.now + 0.1)
    got = [struct.unpack_from("!I", p)[0] for _s, p, _t in sink.data]
    assert got == list(range(N))
    assert sink.loss == []
    assert net.dropped > 0
    assert src.lstats.naks_shed == 0 and rcv.stats.ncfs_shed == 0
    assert src.lstats.rxs_sent >= rcv.stats.rxs_rcved > 0
    assert rcv.stats.unrecovered_tmo == rcv.stats.unrecovered_txw == 0


def test_retransmission_goes_when_new_data_spent_the_budget() -> None:
    lim = RateLimiter(8 * 1000, 8 * 500, 1.0)  # 1000 data bytes, 500 retransmit bytes a second
    assert lim.take_data(1000, 0.0)  # new data spent the interval's data budget
    assert not lim.data.available(0.1)
    assert lim.take_retransmit(300, 0.2)  # the repair still goes: only its own budget counts
    assert lim.take_retransmit(300, 0.3)  # crosses the retransmit budget: still goes
    assert not lim.take_retransmit(10, 0.4)  # the retransmit budget refuses
    assert lim.data.overdraft == 600
    lim.data.refill(1.0)  # the next interval pays the debt first
    assert lim.data.tokens == 400 and lim.data.overdraft == 0
    lim.data.charge(900, 1.5)
    lim.data.refill(2.0)
    assert lim.data.tokens == 500
    lim.data.charge(2500, 2.5)  # a debt above one budget carries on
    lim.data.refill(3.0)
    assert lim.data.tokens == 0 and lim.data.overdraft == 1000
    lim.data.refill(5.0)  # idle intervals pay it off
    assert lim.data.tokens == 1000 and lim.data.overdraft == 0
