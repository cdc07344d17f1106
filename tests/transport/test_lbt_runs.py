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
from collections.abc import Iterable

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.transport.lbtsim import Net
from tests.transport.test_lbtrm import sends_for
from umcore.transport.delivery import LbtDeliveryController, PackedRun
from umcore.transport.lbt import run_length
from umcore.transport.lbtrm import LbtrmReceiver, LbtrmSource

SID = 0x5EED0001
_HEAD = struct.Struct("!BBHII")


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

        def many(recs: Iterable[tuple[int, bytes]], count: int) -> None:
            got = [("data", s, bytes(p)) for s, p in recs]
            assert len(got) == count  # the count handed with the records is theirs
            events.extend(got)

        dc.deliver_many = many
    return dc, events


def _state(dc: LbtDeliveryController) -> tuple[object, ...]:
    held = dict(dc.order_map)
    for first, run in dc._runs.items():
        recs = run.records() if isinstance(run, PackedRun) else run
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
        elif mode == "packed":
            # On the wire, behind a message of another topic half the time (pos > 0).
            lead = _wire(7, first, b"zz") if first % 2 else b""
            buf = lead + b"".join(_wire(1, sqn, p) for sqn, p in recs)
            dc.on_packed(first, buf, len(lead), 16, k, now)
        else:
            dc.on_run(first, recs, now)
    return events, _state(dc)


def _wire(tidx: int, sqn: int, payload: bytes) -> bytes:
    return _HEAD.pack(0, 0, 12 + len(payload), tidx, sqn) + payload


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
    for mode in ("many", "each", "packed"):
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
        sqn = bytes(data[8:12])  # the source may hand on a bytearray
        if int.from_bytes(sqn, "big") % 7 == 3 and sqn not in seen:
            seen.add(sqn)
            return True
        return False

    net = Net(src, [rcv], drop=drop, fifo=True)
    tidx = src.add_topic("t")
    (sink,) = net.subscribe(tidx)
    runs_seen: list[int] = []

    def many(records: Iterable[tuple[int, bytes]], count: int) -> None:
        n = 0
        for sqn, p in records:
            sink.deliver(sqn, p)
            n += 1
        assert n == count
        runs_seen.append(count)

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
    for mode in ("many", "each", "packed"):
        events, state = _feed(feed, ordered, mode)
        assert events == ref_events, mode
        assert state == ref_state, mode


# --------------------------------------------------------------------- run_length (the transport)
def _stream(items: list[tuple[int, int, bytes]]) -> bytes:
    return b"".join(_wire(tidx, sqn, p) for tidx, sqn, p in items)


@pytest.mark.parametrize("first", [0, 1000, 0x12345678, 0xFFFFFF00])
def test_run_length_takes_a_whole_run(first: int) -> None:
    buf = _stream([(3, first + i, bytes([i]) * 8) for i in range(40)])
    k = run_length(buf, 0, len(buf), 20)
    # A run stops where the low byte of the sequence number wraps; the next one starts there.
    assert k == min(40, 256 - (first & 0xFF))
    if k < 40:
        assert run_length(buf, 20 * k, len(buf), 20) == 40 - k


def test_run_length_stops_at_a_change_of_topic_length_or_type() -> None:
    base = [(3, 100 + i, b"abcd") for i in range(10)]
    for change in (
        (4, 110, b"abcd"),  # another topic
        (3, 110, b"abcdef"),  # another length
    ):
        buf = _stream([*base, change, (3, 111, b"abcd")])
        assert run_length(buf, 0, len(buf), 16) == 10
    # A chained header (byte 1) or another type (byte 0) ends the run too.
    for offset, value in ((0, 0x01), (1, 0x05)):
        raw = bytearray(_stream([*base, (3, 110, b"abcd")]))
        raw[16 * 5 + offset] = value
        assert run_length(bytes(raw), 0, len(raw), 16) == 5


@pytest.mark.parametrize(
    "sqns",
    [
        [0, 1, 2, 3, 5, 6, 7, 8, 9],  # a hole
        [0, 1, 2, 3, 3, 4, 5, 6, 7],  # a repeat
        [0, 1, 3, 2, 4, 5, 6, 7, 8],  # reordered
    ],
)
def test_run_length_refuses_sequence_numbers_that_do_not_count_up(sqns: list[int]) -> None:
    buf = _stream([(3, 0x500 + s, b"abcd") for s in sqns])
    k = run_length(buf, 0, len(buf), 16)
    assert k == -len(sqns)  # the caller takes them one by one (the DC sorts them out)


def test_run_length_refuses_a_low_byte_wrap_without_a_carry() -> None:
    """Sequence numbers ...FE, ...FF, ...00 with the same high bytes: not consecutive."""
    buf = _stream([(3, 0x7700 | (0xFE + i) & 0xFF, b"abcd") for i in range(10)])
    assert run_length(buf, 0, len(buf), 16) == -10


def test_packed_runs_through_a_receiver_core_deliver_in_order_under_gaps() -> None:
    """The receiver core with runs packed on the wire: one datagram lost and repaired later,
    one duplicated: every message once, in order, the held datagram kept packed meanwhile."""
    src = LbtrmSource(SID, 14390, None, None, 0.0)
    rcv = LbtrmReceiver(SID, 14390, None, 0.0, random.Random(1))
    tidx = src.add_topic("t")
    src.next_sqn = 5
    got: list[int] = []
    dc = rcv.new_dc(tidx, "t", lambda sqn, p: got.append(sqn), lambda *a: None)
    rcv.subscribe(dc)
    dgrams: list[bytes] = []
    for i in range(400):
        src.send(tidx, struct.pack("!I", i) * 4, 0.0)
        dgrams.extend(src.ready)
        src.ready.clear()
    src.flush()
    dgrams.extend(src.ready)
    assert len(dgrams) >= 4
    rcv.receive_datagram(dgrams[0], 0.0)
    rcv.receive_datagram(dgrams[2], 0.01)  # dgrams[1] missing: [2] is held, packed
    held = list(dc._runs.values())
    assert len(held) == 1 and isinstance(held[0], PackedRun)
    rcv.receive_datagram(dgrams[2], 0.02)  # a duplicate datagram
    rcv.receive_datagram(dgrams[1], 0.03)  # the repair
    for d in dgrams[3:]:
        rcv.receive_datagram(d, 0.04)
    assert got == list(range(400)) and dc._runs == {} and dc.missing == {}
    assert rcv.stats.duplicate_data == 1


def test_held_packed_run_drains_as_its_unpacking_iterator() -> None:
    """A run held behind a gap reaches ``deliver_many`` as the unpacking iterator over its
    bytes (as in-sequence runs do: no list of tuples built), with its own count, in order."""
    calls: list[tuple[str, list[tuple[int, bytes]], int]] = []
    dc = LbtDeliveryController(1, "t", lambda sqn, p: None, lambda kind, sqn, n: None)

    def many(recs: Iterable[tuple[int, bytes]], count: int) -> None:
        calls.append((type(recs).__name__, [(s, bytes(p)) for s, p in recs], count))

    dc.deliver_many = many

    def packed(first: int, k: int, now: float) -> None:
        buf = _stream([(1, first + i, bytes([i]) * 4) for i in range(k)])
        dc.on_packed(first, buf, 0, 16, k, now)

    dc.on_message(0, b"\0" * 4, None, 0.0)  # started (the transport hands runs on after)
    packed(1, 2, 0.0)  # in sequence
    packed(5, 4, 0.1)  # 3 and 4 missing: held as a PackedRun
    packed(9, 2, 0.2)  # held too
    assert [c[2] for c in calls] == [2] and dc._run_msgs == 6
    packed(3, 2, 0.3)  # the repair: delivered, then both held runs drain
    assert [c[2] for c in calls] == [2, 2, 4, 2]
    assert all(kind != "list" for kind, _, _ in calls[2:])
    assert [s for _, recs, _ in calls for s, _ in recs] == list(range(1, 11))
    assert calls[2][1][1] == (6, bytes([1]) * 4) and dc.delivered == 11


def test_packed_runs_behind_a_gap_count_against_the_map_limit() -> None:
    events: list[object] = []
    dc = LbtDeliveryController(
        1,
        "t",
        lambda sqn, p: events.append(sqn),
        lambda kind, sqn, n: events.append((kind, sqn, n)),
        max_map_entries=20,
    )

    def packed(first: int, k: int, now: float) -> None:
        buf = _stream([(1, first + i, b"abcd") for i in range(k)])
        dc.on_packed(first, buf, 0, 16, k, now)

    packed(0, 10, 0.0)
    packed(11, 10, 0.1)  # 10 missing: 10 held
    packed(21, 10, 0.2)  # 20 held: at the limit, still waiting
    assert events == list(range(10)) and dc._run_msgs == 20
    packed(31, 10, 0.3)  # 30 held: 10 declared lost, the held runs delivered
    assert events == [*range(10), ("unrecoverable_loss", 10, 1), *range(11, 41)]
    assert dc._run_msgs == 0 and dc.map_limit_lost == 1 and dc.missing == {}
    packed(10, 1, 0.4)  # the repair, too late: behind the delivery point
    assert dc.duplicates == 1 and len(events) == 41


# ------------------------------------------- the receiver core on bytes and on memoryview datagrams
_RM_DATA = struct.Struct("!BBHIIIBBH")  # LBT-RM DATA header: type, next, port, sid, sqn, trail..
_PORT = 14390


def _segment(tidx: int, first: int, k: int, size: int, plain: bool = True) -> bytes:
    """``k`` messages of topic ``tidx`` from sequence number ``first``, ``size`` payload bytes;
    ``plain`` False: the first one carries a non-zero next-header byte (not a run)."""
    out = []
    for i in range(k):
        sqn = (first + i) & 0xFFFFFFFF
        nxt = 0 if plain or i else 1
        out.append(_HEAD.pack(0, nxt, 12 + size, tidx, sqn) + bytes([sqn & 0xFF]) * size)
    return b"".join(out)


def _receiver(log: list[object]) -> LbtrmReceiver:
    rcv = LbtrmReceiver(SID, _PORT, None, 0.0, random.Random(1))
    for tidx in (1, 2):  # topic 3 has no DC (counted as no-topic)

        def deliver(sqn: int, p: bytes, tidx: int = tidx) -> None:
            log.append(("data", tidx, sqn, bytes(p)))

        def lose(kind: str, sqn: int, n: int, tidx: int = tidx) -> None:
            log.append((kind, tidx, sqn, n))

        def many(recs: Iterable[tuple[int, bytes]], count: int, tidx: int = tidx) -> None:
            got = [("data", tidx, s, bytes(p)) for s, p in recs]
            assert len(got) == count
            log.extend(got)

        dc = rcv.new_dc(tidx, f"t{tidx}", deliver, lose)
        dc.deliver_many = many
        rcv.subscribe(dc)
    return rcv


def _receiver_state(rcv: LbtrmReceiver) -> tuple[object, ...]:
    dcs = tuple(
        (t, dc.expected, dc.high, dict(dc.missing), dc.delivered, dc.started)
        for t, dc in sorted(rcv.dcs.items())
    )
    stats = {name: getattr(rcv.stats, name) for name in rcv.stats.__slots__}
    return (stats, rcv.expected, sorted(rcv.missing), rcv.trail, dcs)


# A datagram's messages: segments of (topic index, messages, payload size, sequence gap before
# it, plain); each topic counts its own sequence numbers from ``base``.
segments = st.lists(
    st.tuples(
        st.sampled_from([1, 1, 1, 2, 3]),
        st.integers(1, 40),
        st.sampled_from([4, 5, 64]),
        st.sampled_from([0, 0, 0, 1, 3]),
        st.sampled_from([True, True, True, True, False]),
    ),
    min_size=0,
    max_size=3,
)


@settings(max_examples=300, deadline=None)
@given(
    st.lists(st.tuples(segments, st.sampled_from([1, 1, 1, 1, 2, 0])), min_size=1, max_size=25),
    st.sampled_from([0, 200, 250, 0xFFFFFFFF - 30]),
)
def test_bytes_and_memoryview_datagrams_give_the_same_outcome(
    dgrams: list[tuple[list[tuple[int, int, int, int, bool]], int]], base: int
) -> None:
    """Whatever the datagrams hold (whole runs, runs whose low sequence byte wraps, several
    topics or lengths, a topic without DC, sequence gaps, non-plain messages, empty DATA
    datagrams) and however the transport sequence advances (in order, skipping one, repeating
    one), a receiver fed ``bytes`` (uvloop's datagrams, used in place) delivers, loses, counts
    and ends in the state of one fed the same datagrams as memoryviews (the plain asyncio
    loop's reused receive buffer, which ``_payload`` copies once)."""
    fast_log: list[object] = []
    slow_log: list[object] = []
    fast, slow = _receiver(fast_log), _receiver(slow_log)
    nxt = {1: base, 2: base, 3: base}
    tsqn = 7
    now = 0.0
    for segs, step in dgrams:
        body = b""
        for tidx, k, size, gap, plain in segs:
            nxt[tidx] = (nxt[tidx] + gap) & 0xFFFFFFFF
            body += _segment(tidx, nxt[tidx], k, size, plain)
            nxt[tidx] = (nxt[tidx] + k) & 0xFFFFFFFF
        data = _RM_DATA.pack(0, 0, _PORT, SID, tsqn, 0, 0, 0, 0) + body
        now += 0.01
        fast.receive_datagram(data, now)
        slow.receive_datagram(memoryview(data), now)
        tsqn = (tsqn + step) & 0xFFFFFFFF
    for t in (1.0, 5.0, 30.0):  # NAK and loss timers of the gaps
        fast.handle_timer(t)
        slow.handle_timer(t)
    assert fast_log == slow_log
    assert _receiver_state(fast) == _receiver_state(slow)
    assert fast.outbox == slow.outbox
