"""The delivery controller's order map limit (``delivery_control_maximum_total_map_entries``).

UM's Configuration Guide: when a DC's order map holds more than the limit, unrecoverable loss is
signaled for the oldest gaps and the older data is delivered until the map is below the limit;
the option is context scoped but every DC's map is sized independently; 0 = unbounded.  Before
this, a full map refused the messages that had already arrived and the stream stalled until the
10 s loss timer.  All in memory, explicit ``now``.
"""

from __future__ import annotations

import random
import struct

from tests.transport.lbtsim import Net, Sink
from umcore.transport.delivery import LOSS, LbtDeliveryController
from umcore.transport.lbt import ReceiverConfig, SourceConfig
from umcore.transport.lbtrm import LbtrmReceiver, LbtrmSource
from umcore.wire import lbtrm as w

LIMIT = 100
P = b"x"


def _dc(limit: int = LIMIT, *, ordered: bool = True) -> tuple[LbtDeliveryController, Sink]:
    sink = Sink()
    dc = LbtDeliveryController(0, "t", sink.deliver, sink.lose, ordered=ordered,
                               max_map_entries=limit)  # fmt: skip
    return dc, sink


def _feed(dc: LbtDeliveryController, sink: Sink, sqns: range | list[int], now: float) -> None:
    sink.now = now
    for s in sqns:
        dc.on_message(s, P, None, now)


def test_overflow_declares_the_oldest_gap_lost_at_once_and_delivery_continues() -> None:
    dc, sink = _dc()
    _feed(dc, sink, range(10), 0.0)
    # sqn 10 is missing; exactly LIMIT messages behind it: held, nothing reported yet.
    _feed(dc, sink, range(11, 11 + LIMIT), 0.5)
    assert len(dc.order_map) == LIMIT and sink.loss == [] and len(sink.data) == 10
    # One more: the map exceeds the limit, the gap is declared lost now (not at t=10.5).
    _feed(dc, sink, [11 + LIMIT], 0.6)
    assert sink.loss == [(LOSS, 10, 1, 0.6)]
    assert dc.order_map == {} and dc.missing == {}
    assert (dc.map_limit_hits, dc.map_limit_lost, dc.unrecoverable) == (1, 1, 1)
    # Later messages are delivered at once, in order; the late repair is a duplicate.
    _feed(dc, sink, range(12 + LIMIT, 20 + LIMIT), 0.7)
    _feed(dc, sink, [10], 1.2)
    expect = [s for s in range(20 + LIMIT) if s != 10]
    assert [s for s, _, _ in sink.data] == expect
    assert dc.delivered == len(expect) and dc.duplicates == 1
    assert max(t for _, _, t in sink.data) <= 0.7  # no message waited for the loss timer


def test_oldest_gaps_first_until_below_the_limit() -> None:
    dc, sink = _dc()
    _feed(dc, sink, [0], 0.0)
    # Gaps at 1-2 and at 40; then messages up to the one that overflows the map.
    held = [s for s in range(3, 3 + LIMIT + 2) if s != 40]
    _feed(dc, sink, held[:LIMIT], 0.1)
    assert sink.loss == []
    _feed(dc, sink, held[LIMIT:], 0.2)  # LIMIT + 1 held
    # Declaring 1 and 2 delivered 3..39 (37) and left 64 held, below the limit: 40 stays open.
    assert [(k, s) for k, s, _, _ in sink.loss] == [(LOSS, 1), (LOSS, 2)]
    assert 40 in dc.missing and len(dc.order_map) == LIMIT + 1 - 37
    assert dc.map_limit_lost == 2 and dc.map_limit_hits == 1
    _feed(dc, sink, [40], 0.3)  # the repair of the younger gap still completes the stream
    assert [s for s, _, _ in sink.data] == [0, *range(3, 3 + LIMIT + 2)]
    assert dc.order_map == {} and len(sink.loss) == 2


def test_runs_behind_a_gap_count_against_the_limit() -> None:
    dc, sink = _dc()
    dc.on_run(0, [(s, P) for s in range(10)], 0.0)
    for first in range(11, 11 + LIMIT, 10):  # ten runs of ten: exactly LIMIT held
        dc.on_run(first, [(s, P) for s in range(first, first + 10)], 0.1)
    assert sink.loss == [] and dc._run_msgs == LIMIT
    sink.now = 0.2
    dc.on_run(11 + LIMIT, [(s, P) for s in range(11 + LIMIT, 21 + LIMIT)], 0.2)
    assert sink.loss == [(LOSS, 10, 1, 0.2)] and dc._run_msgs == 0
    assert [s for s, _, _ in sink.data] == [s for s in range(21 + LIMIT) if s != 10]


def test_each_dc_of_a_context_has_its_own_map() -> None:
    """Context scope, but sized per DC: two DCs each holding most of the limit both wait."""
    rcv = LbtrmReceiver(1, 14390, ReceiverConfig(max_map_entries=LIMIT), 0.0)
    sinks = [Sink(), Sink()]
    dcs = [rcv.new_dc(i, f"t{i}", s.deliver, s.lose) for i, s in enumerate(sinks)]
    assert [dc.max_map_entries for dc in dcs] == [LIMIT, LIMIT]
    for dc, sink in zip(dcs, sinks, strict=True):
        _feed(dc, sink, [0], 0.0)
        _feed(dc, sink, range(2, 2 + LIMIT), 0.1)  # LIMIT held each: 2 x LIMIT in the context
    assert [s.loss for s in sinks] == [[], []]
    _feed(dcs[0], sinks[0], [2 + LIMIT], 0.2)  # only the first one overflows
    assert sinks[0].loss == [(LOSS, 1, 1, 0.2)] and sinks[1].loss == []
    assert len(dcs[1].order_map) == LIMIT
    _feed(dcs[1], sinks[1], [1], 0.3)
    assert [s for s, _, _ in sinks[1].data] == list(range(2 + LIMIT))


def test_zero_is_unbounded() -> None:
    dc, sink = _dc(0)
    _feed(dc, sink, [0], 0.0)
    _feed(dc, sink, range(2, 1000), 0.1)
    assert sink.loss == [] and len(dc.order_map) == 998 and dc.map_limit_hits == 0
    _feed(dc, sink, [1], 0.2)
    assert [s for s, _, _ in sink.data] == list(range(1000))


def test_tentative_start_overflowing_the_map_starts_delivery() -> None:
    dc, sink = _dc()
    sink.now = 0.1
    for s in range(50, 51 + LIMIT):  # still tentative: an older datagram is being recovered
        dc.on_message(s, P, None, 0.1, tentative=True)
    assert dc.started and not dc.tentative and sink.loss == []
    assert [s for s, _, _ in sink.data] == list(range(50, 51 + LIMIT))
    dc.confirm(0.2)  # the transport's confirmation later is harmless
    _feed(dc, sink, [51 + LIMIT], 0.3)
    assert sink.data[-1][0] == 51 + LIMIT and len(sink.data) == LIMIT + 2


# --------------------------------------------------------------------- end to end (lbtsim)
def _payload(i: int) -> bytes:
    return struct.pack("!I", i) + bytes(28)


def test_repair_stall_drains_promptly_instead_of_waiting_for_the_loss_timer() -> None:
    """A datagram whose repair is held up for 1.2 s while the stream goes on: the map fills and
    the loss is reported then (not 10 s later); every other message arrives in order."""
    limit = 500
    src = LbtrmSource(7, 14390, SourceConfig(), None, 0.0)
    rcv = LbtrmReceiver(7, 14390, ReceiverConfig(max_map_entries=limit), 0.0, random.Random(1))
    victim = _payload(1000)
    stall_end = 2.0
    lost_at: list[float] = []

    def drop(direction: str, data: bytes, now: float) -> bool:
        kind = data[0] & 0x0F
        if direction == "down" and kind == w.TYPE_DATA and victim in data and now < stall_end:
            lost_at.append(now)
            return True
        return False

    net = Net(src, [rcv], drop=drop, seed=2, fifo=True)
    tidx = src.add_topic("t")
    (sink,) = net.subscribe(tidx)
    net.step_until(0.3)
    n, rate, per = 4000, 2000.0, 20
    sends = []
    for k in range(0, n, per):

        def act(now: float, k: int = k) -> None:
            for i in range(k, k + per):
                src.send(tidx, _payload(i), now, flush=True)

        sends.append((0.3 + k / rate, act))
    net.step_until(4.0, sends)
    assert lost_at and len(lost_at) > 1  # the original and at least one retransmission
    (dc,) = rcv.dcs.values()
    assert dc.map_limit_hits >= 1 and dc.map_limit_lost == len(sink.loss) > 0
    assert all(k == LOSS for k, _, _, _ in sink.loss)
    lost = {s for _, s, _, _ in sink.loss}
    assert 1000 in lost
    # The loss was declared once the map overflowed: ~limit / rate after the gap, not 10 s.
    assert max(t for *_, t in sink.loss) < lost_at[0] + limit / rate + 0.5
    got = [s for s, _, _ in sink.data]
    assert got == [s for s in range(n) if s not in lost]
    assert [struct.unpack_from("!I", p)[0] for _, p, _ in sink.data] == got
    # Nothing waited: each message delivered within 0.5 s of being sent.
    assert all(t - (0.3 + (s // per) * per / rate) < 0.5 for s, _, t in sink.data)
