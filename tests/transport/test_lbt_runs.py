"""Runs of plain data messages through the LBT delivery controller and receiver cores.

The LBT receiver hands a datagram's run of same-length, same-topic, consecutive plain data
messages to its DC in one piece (``LbtDeliveryController.on_run``): delivered at once when in
sequence, kept whole in the order map behind a gap, taken whole when a retransmission fills a
gap.  The property checked: whatever the arrival pattern (gaps, duplicates, overlaps,
retransmissions, loss timers expiring, bursts, ordered or arrival mode), feeding the runs gives
exactly the deliveries, loss events and DC state that feeding the same messages one by one
gives, with and without ``deliver_many``.
"""

from __future__ import annotations

import random
import struct

from hypothesis import given, settings
from hypothesis import strategies as st

from tests.transport.lbtsim import Net
from tests.transport.test_lbtrm import sends_for
from umcore.transport.delivery import LbtDeliveryController
from umcore.transport.lbtrm import LbtrmReceiver, LbtrmSource

SID = 0x5EED0001


def _dc(ordered: bool, many: bool) -> tuple[LbtDeliveryController, list[object]]:
    events: list[object] = []
    dc = LbtDeliveryController(
        1,
        "t",
        lambda sqn, p: events.append(("data", sqn, bytes(p))),
        lambda kind, sqn, n: events.append((kind, sqn, n)),
        max_burst_loss=24,
        loss_timeout=1.0,
        ordered=ordered,
    )
    if many:
        dc.deliver_many = lambda recs: events.extend(("data", s, bytes(p)) for s, p in recs)
    return dc, events


def _state(dc: LbtDeliveryController) -> tuple[object, ...]:
    held = dict(dc.order_map)
    for first, recs in dc._runs.items():
        assert recs[0][0] == first
        for s, p in recs:
            held[s] = (p, None)
    return (dc.expected, dc.high, dict(dc.missing), held, dc.delivered, dc.unrecoverable)


def _feed(
    datagrams: list[tuple[int, int, float]], ordered: bool, mode: str
) -> tuple[list[object], tuple[object, ...]]:
    dc, events = _dc(ordered, mode == "many")
    for first, k, now in datagrams:
        recs = [((first + i) & 0xFFFFFFFF, bytes([(first + i) & 0xFF]) * 4) for i in range(k)]
        if mode == "single" or not dc.started or first + k > 0xFFFFFFFF:
            for s, p in recs:
                dc.on_message(s, p, None, now)
        else:
            dc.on_run(first, recs, now)
    return events, _state(dc)


# A datagram: (offset from the stream start, message count, time step).
datagrams = st.lists(
    st.tuples(st.integers(0, 120), st.integers(1, 12), st.sampled_from([0.0, 0.0, 0.3, 1.5])),
    min_size=1,
    max_size=25,
)


@settings(max_examples=200, deadline=None)
@given(
    datagrams,
    st.booleans(),
    st.sampled_from([0, 1000, 0xFFFFFFFF - 60]),
    st.booleans(),
)
def test_runs_equal_messages_one_by_one(
    dgrams: list[tuple[int, int, float]], ordered: bool, base: int, in_order_first: bool
) -> None:
    now = 0.0
    feed: list[tuple[int, int, float]] = []
    if in_order_first:
        feed.append((base, 3, now))
    for off, k, step in dgrams:
        now += step
        feed.append(((base + off) & 0xFFFFFFFF, k, now))
    ref_events, ref_state = _feed(feed, ordered, "single")
    for mode in ("many", "each"):
        events, state = _feed(feed, ordered, mode)
        assert events == ref_events, mode
        assert state == ref_state, mode


def test_run_behind_a_gap_waits_whole_then_drains_with_the_repair() -> None:
    dc, events = _dc(True, True)
    dc.on_run(0, [(i, b"x") for i in range(4)], 0.0)
    dc.on_run(8, [(i, b"y") for i in range(8, 12)], 0.1)  # 4..7 missing: kept as one unit
    assert len(events) == 4 and list(dc._runs) == [8] and dc._run_msgs == 4
    assert sorted(dc.missing) == [4, 5, 6, 7]
    dc.on_run(4, [(i, b"r") for i in range(4, 8)], 0.2)  # the retransmission
    assert [e[1] for e in events] == list(range(12))  # type: ignore[index]
    assert dc._runs == {} and dc._run_msgs == 0 and dc.missing == {}
    assert dc.expected == dc.high == 12


def test_lossy_rm_cores_deliver_everything_through_runs() -> None:
    """Through the cores: 64-byte messages batched 27 to a datagram, every 7th DATA datagram
    lost once (its retransmission gets through): complete, in order, mostly as runs
    (``deliver_many``)."""
    src = LbtrmSource(SID, 14390, None, None, 0.0)
    rcv = LbtrmReceiver(SID, 14390, None, 0.0, random.Random(3))
    seen: set[bytes] = set()

    def drop(direction: str, data: bytes, now: float) -> bool:
        if direction != "down" or data[0] & 0x0F != 0 or data[16] & 0x20:  # RX: keep
            return False
        sqn = data[8:12]
        if int.from_bytes(sqn, "big") % 7 == 3 and sqn not in seen:
            seen.add(sqn)
            return True
        return False

    net = Net(src, [rcv], drop=drop, fifo=True)
    tidx = src.add_topic("t")
    (sink,) = net.subscribe(tidx)
    runs_seen: list[int] = []

    def many(records: list[tuple[int, bytes]]) -> None:
        runs_seen.append(len(records))
        for sqn, p in records:
            sink.deliver(sqn, p)

    rcv.dcs[tidx].deliver_many = many
    n = 6000
    net.step_until(0.5)  # SMs: the receiver learns where the stream starts
    net.step_until(3.0, sends_for(src, tidx, n, 0.5, 20_000.0, per=200))
    net.step_until(5.0)
    assert [struct.unpack_from("!I", p)[0] for _, p, _ in sink.data] == list(range(n))
    assert sink.loss == []
    assert rcv.stats.naks_sent > 0 and src.lstats.rxs_sent > 0
    assert sum(runs_seen) >= n * 0.9 and max(runs_seen) >= 20


@settings(max_examples=200, deadline=None)
@given(
    st.lists(
        st.tuples(st.integers(0, 15), st.sampled_from([0.0, 0.0, 0.0, 0.4, 1.5])),
        min_size=1,
        max_size=30,
    ),
    st.booleans(),
)
def test_datagram_partition_in_any_order(order: list[tuple[int, float]], ordered: bool) -> None:
    """The real shape: the stream cut into 6-message datagrams that arrive in any order, some
    twice (retransmissions), some never (loss timers expire)."""
    now = 0.0
    feed = [(0, 6, now)]
    for j, step in order:
        now += step
        feed.append((6 * j, 6, now))
    ref_events, ref_state = _feed(feed, ordered, "single")
    for mode in ("many", "each"):
        events, state = _feed(feed, ordered, mode)
        assert events == ref_events, mode
        assert state == ref_state, mode
