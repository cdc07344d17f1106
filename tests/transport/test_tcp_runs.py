"""The receiver's one-pass parsing of runs of plain data messages (TcpReceiverSession._run).

A run (same msglen, same topic index, consecutive sequence numbers) is parsed in C and handed to
the DC's ``deliver_many``; everything else takes the message-by-message path.  The property
checked here: whatever the stream (gaps, reordering, mixed lengths and topics, TSNIs, unknown
topic indexes, sequence number wrap), feeding it in one piece gives exactly the deliveries and
loss events that feeding it byte by byte gives (no run can form then), with and without
``deliver_many``.
"""

from __future__ import annotations

from collections.abc import Iterable

from hypothesis import given, settings
from hypothesis import strategies as st

from umcore.transport.tcp import DeliveryController, TcpReceiverSession
from umcore.wire import lbmc

SID = 7


def _stream(items: list[tuple[int, int, int]]) -> bytes:
    out = []
    for kind, tidx, sqn in items:
        if kind == 3:
            tsni = lbmc.Tsni(records=((tidx, sqn),))
            out.append(lbmc.encode(lbmc.LBMCMessage(lbmc.MSG_CONTROL, headers=[tsni])))
        else:
            payload = bytes([sqn & 0xFF]) * (8 if kind == 0 else 8 + kind)
            out.append(lbmc.encode_data(tidx, sqn, payload))
    return b"".join(out)


def _run(stream: bytes, pieces: int, many: bool) -> tuple[list[object], TcpReceiverSession]:
    events: list[object] = []
    rcv = TcpReceiverSession(SID)
    for tidx in (0, 1):  # tidx 2 has no DC: counted as no-topic
        dc = DeliveryController(
            tidx,
            f"t{tidx}",
            lambda sqn, p, t=tidx: events.append(("data", t, sqn, bytes(p))),
            lambda kind, sqn, n, t=tidx: events.append((kind, t, sqn, n)),
            max_burst_loss=16,
        )
        if many:

            def many(recs: Iterable[tuple[int, bytes]], count: int, t: int = tidx) -> None:
                got = [("data", t, sqn, p) for sqn, p in recs]
                assert len(got) == count  # the count handed with the records is theirs
                events.extend(got)

            dc.deliver_many = many
        rcv.subscribe(dc)
    if pieces == 1:
        rcv.receive_data(stream)
    else:
        for i in range(len(stream)):
            rcv.receive_data(stream[i : i + 1])
    return events, rcv


def _items(draw_runs: list[tuple[int, int, int, int]], start: int) -> list[tuple[int, int, int]]:
    """Runs of (kind, tidx, count, jump): count messages, then jump the next topic sqn."""
    sqn = {0: start, 1: start, 2: start}
    items = []
    for kind, tidx, count, jump in draw_runs:
        for _ in range(count):
            items.append((kind, tidx, sqn[tidx] & 0xFFFFFFFF))
            if kind != 3:
                sqn[tidx] += 1
        sqn[tidx] += jump
    return items


runs = st.lists(
    st.tuples(
        st.sampled_from([0, 0, 0, 1, 3]),
        st.sampled_from([0, 0, 1, 2]),
        st.integers(1, 40),
        st.sampled_from([0, 0, 0, 1, 3, -2, 40]),
    ),
    min_size=1,
    max_size=12,
)


@settings(max_examples=150, deadline=None)
@given(runs, st.sampled_from([0, 1000, 0xFFFFFFF0]))
def test_one_piece_equals_byte_by_byte(
    draw_runs: list[tuple[int, int, int, int]], start: int
) -> None:
    stream = _stream(_items(draw_runs, start))
    slow, slow_rcv = _run(stream, len(stream), many=False)
    for many in (False, True):
        fast, fast_rcv = _run(stream, 1, many=many)
        assert fast == slow
        assert fast_rcv.stats.messages_no_topic == slow_rcv.stats.messages_no_topic
        assert fast_rcv.stats.messages_received == slow_rcv.stats.messages_received
        assert [d.delivered for d in fast_rcv.dcs.values()] == [
            d.delivered for d in slow_rcv.dcs.values()
        ]


def test_a_long_run_goes_through_deliver_many_in_one_call() -> None:
    calls: list[int] = []
    rcv = TcpReceiverSession(SID)
    dc = DeliveryController(0, "t", lambda s, p: calls.append(1), lambda *a: None)

    def many(recs: Iterable[tuple[int, bytes]], count: int) -> None:
        assert len(list(recs)) == count
        calls.append(count)

    dc.deliver_many = many
    rcv.subscribe(dc)
    rcv.receive_data(b"".join(lbmc.encode_data(0, s, b"x" * 64) for s in range(1000)))
    # the first message starts the DC one by one; the other 999 are one run
    assert calls == [1, 999]
    assert dc.expected == 1000 and dc.delivered == 1000


def test_a_run_stops_where_the_topic_index_changes() -> None:
    # tidx 1 continues tidx 0's sequence numbers: only the topic index tells the runs apart
    items = [(0, 0, s) for s in range(10)] + [(0, 1, s) for s in range(10, 20)]
    stream = _stream(items)
    fast, _ = _run(stream, 1, many=True)
    slow, _ = _run(stream, len(stream), many=False)
    assert fast == slow
    assert [e[1] for e in fast if e[0] == "data"] == [0] * 10 + [1] * 10
