"""BatchingSource's open runs and single-message path: the bytes are those of one-by-one framing.

Every test compares what the source writes with the LBMC codec's encoding of each message
(``lbmc.encode_data``) or decodes it back, so a wrong sequence-number column, a message out of
order or a lost run fails them.
"""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from umcore.transport.batching import MAX_SINGLES
from umcore.transport.lbt import LbtSource
from umcore.transport.tcp import TcpSourceSession
from umcore.wire import lbmc


def _expected(msgs: list[tuple[int, int, bytes]]) -> bytes:
    return b"".join(lbmc.encode_data(tidx, sqn, p) for tidx, sqn, p in msgs)


@settings(max_examples=150, deadline=None)
@given(
    start=st.one_of(
        st.integers(0, 0xFFFFFFFF),
        st.integers(0, 0x300),
        st.integers(0xFFFFFE00, 0xFFFFFFFF),
        st.integers(0, 0xFF).map(lambda x: 0xFF00 + x),
        st.integers(0, 0xFF).map(lambda x: 0xFFFF00 + x),
    ),
    k=st.integers(1, 700),
    size=st.sampled_from([0, 1, 7, 64]),
)
def test_run_bytes_are_one_by_one_framing(start: int, k: int, size: int) -> None:
    """Runs of any length from any first sequence number (256 and 2**32 boundaries included)."""
    core = TcpSourceSession(7, batching_minimum_length=60000)
    tidx = core.add_topic("t")
    core.topics[tidx].sqn = start  # type: ignore[union-attr]
    out = []
    for i in range(k):
        o = core.send(tidx, (i & 0xFF).to_bytes(1, "big") * size, 0.0)
        if o is not None:
            out.append(o)
    assert core.next_sequence_number(tidx) == (start + k) & 0xFFFFFFFF
    o = core.flush()
    assert o is not None
    out.append(o)
    want = [
        (tidx, (start + i) & 0xFFFFFFFF, (i & 0xFF).to_bytes(1, "big") * size) for i in range(k)
    ]
    assert b"".join(out) == _expected(want)
    assert core.stats.messages_sent == k
    assert core.next_sequence_number(tidx) == (start + k) & 0xFFFFFFFF


def test_runs_across_topics_lengths_and_buffer_types() -> None:
    """Topic and length changes end a run; a mutable buffer is framed (copied) at once."""
    core = TcpSourceSession(7, batching_minimum_length=60000)
    a, b = core.add_topic("a"), core.add_topic("b")
    buf = bytearray(b"mutable!")
    plan: list[tuple[int, bytes | bytearray | memoryview]] = [
        (a, b"1111"), (a, b"2222"), (a, b"333"), (b, b"4444"), (b, b"5555"), (a, b"6666"),
        (a, buf), (a, b"7777"), (a, memoryview(b"88")), (a, b"99"), (a, b"99"),
    ]  # fmt: skip
    for tidx, payload in plan:
        assert core.send(tidx, payload, 1.0) is None
    buf[:] = b"CHANGED!"  # after send returned: must not show in the batch
    out = core.flush()
    sqn = {a: 0, b: 0}
    want = []
    for tidx, payload in plan:
        want.append((tidx, sqn[tidx], bytes(payload) if payload is not buf else b"mutable!"))
        sqn[tidx] += 1
    assert out == _expected(want)
    assert core.stats.messages_sent == len(plan)


def test_run_hand_on_at_minimum_length_and_overflow() -> None:
    """The batching rules are unchanged: hand-on at the minimum length, overflow before."""
    core = TcpSourceSession(7, batching_minimum_length=200, datagram_max_size=300)
    t = core.add_topic("t")
    outs = [core.send(t, bytes([i]) * 40, 0.0) for i in range(10)]  # 52 bytes framed each
    # 4 messages = 208 >= 200: every 4th send hands the batch on
    assert [o is not None for o in outs] == [False, False, False, True] * 2 + [False, False]
    got = lbmc.decode_all(b"".join(o for o in outs if o is not None) + (core.flush() or b""))
    assert [(m.sqn, m.payload) for m in got] == [(i, bytes([i]) * 40) for i in range(10)]
    big = TcpSourceSession(7, batching_minimum_length=10000, datagram_max_size=300)
    t = big.add_topic("t")
    outs = [big.send(t, bytes([i]) * 100, 0.0) for i in range(5)]  # 112 each: 2 fit in 300
    assert [o is not None for o in outs] == [False, False, True, False, True]
    assert all(len(o) <= 300 for o in outs if o is not None)


def test_tsni_and_timer_settle_the_run() -> None:
    core = TcpSourceSession(7, batching_interval=0.2, tsni_interval=5.0)
    t = core.add_topic("t")
    for _ in range(5):
        core.send(t, b"x" * 10, 1.0)
    assert core.next_timer() == 1.2
    out = core.handle_timer(1.2)
    assert out is not None
    assert [m.sqn for m in lbmc.decode_all(out)] == [0, 1, 2, 3, 4]
    # idle: the TSNI carries the run's last sequence number
    tsni = core.handle_timer(1.0 + 5.0 + 0.01)
    assert tsni is not None
    hdr = lbmc.decode(tsni).find(lbmc.Tsni)
    assert hdr is not None and hdr.records == ((t, 4),)
    # an open run is settled before a TSNI: its data goes first, the TSNI counts it (and the
    # run's time: the topic was active at 20.0, so its TSNI is due at 25.0, not before)
    core.batching_interval = 100.0
    for _ in range(3):
        core.send(t, b"y" * 10, 20.0)
    assert core.handle_timer(24.9) is None
    out = core.handle_timer(25.01)  # TSNI due, the batch not yet
    assert out is not None
    msgs = lbmc.decode_all(out)
    assert [m.sqn for m in msgs[:3]] == [5, 6, 7]
    last = msgs[3].find(lbmc.Tsni)
    assert last is not None and last.records == ((t, 7),)


def test_send_one_between_batched_sends() -> None:
    """The single-message path: a message on its own, framed at once, sequence numbers shared
    with batched sends; with a non-empty batch it is the general flush (batch first)."""
    core = TcpSourceSession(7, tsni_interval=5.0)
    t = core.add_topic("t")
    first = core.send_one(t, b"one", 1.0)
    assert first == lbmc.encode_data(t, 0, b"one")
    assert core.timer_dirty and core.next_timer() == 6.0  # TSNI check armed
    assert core.stats.messages_sent == 1 and core.stats.datagrams_sent == 1
    core.send(t, b"ab", 2.0)
    core.send(t, b"cd", 2.0)
    out = core.send_one(t, b"two", 2.5)
    assert out == _expected([(t, 1, b"ab"), (t, 2, b"cd"), (t, 3, b"two")])
    assert core.send_one(t, b"three", 3.0) == lbmc.encode_data(t, 4, b"three")
    big = bytes(core.max_payload + 1)  # fragmented: the general path
    out = core.send_one(t, big, 3.0)
    assert out is not None
    frags = lbmc.decode_all(out)
    assert [m.sqn for m in frags] == [5, 6]
    assert core.stats.messages_sent == 6


def test_lbt_source_datagrams_from_runs() -> None:
    """LBT-RU/RM sources inherit the runs: their datagrams carry the same LBMC bytes."""
    from umcore.transport.lbtrm import LbtrmSource

    src = LbtrmSource(9, 14400, now=0.0)
    t = src.add_topic("t")
    for i in range(40):
        src.send(t, bytes([i]) * 64, 0.0)
    src.flush()
    lbmc_bytes = b"".join(d[src.header_size :] for d in src.ready)
    assert isinstance(src, LbtSource)
    assert lbmc_bytes == _expected([(t, i, bytes([i]) * 64) for i in range(40)])


def test_single_sends_count_as_messages_and_datagrams() -> None:
    """A message sent on its own (send_one) counts once, in the small ``singles`` (with its
    length in ``single_n``), folded into the large counters when the length changes or
    MAX_SINGLES is reached; messages_sent, datagrams_sent and bytes_sent include what is not
    folded, batched sends count as before, and assigning a counter keeps the singles."""
    core = TcpSourceSession(7, batching_minimum_length=60000)
    tidx = core.add_topic("t")
    assert core.send_one(tidx, b"a", 0.0) is not None
    assert core.send_one(tidx, memoryview(b"bc"), 0.0) is not None  # another length: a fold
    assert core.send_one(tidx, b"de", 0.0) is not None
    for _ in range(5):
        assert core.send(tidx, b"xyz", 0.0) is None  # batched
    assert core.flush() is not None
    st = core.stats
    assert (st.singles, st.single_n, st.messages_base, st.datagrams_base) == (2, 2, 6, 2)
    assert (st.messages_sent, st.datagrams_sent) == (8, 4)
    assert st.bytes_sent == 13 + 14 + 14 + 5 * 15
    st.messages_sent = 100
    st.datagrams_sent += 1
    st.bytes_sent += 10
    assert (st.singles, st.messages_sent, st.datagrams_sent) == (2, 100, 5)
    assert st.bytes_sent == 13 + 14 + 14 + 5 * 15 + 10
    assert core.send_one(tidx, b"f", 0.0) is not None  # a fold: nothing lost
    assert (st.singles, st.messages_sent, st.datagrams_sent) == (1, 101, 6)
    assert st.bytes_sent == 13 + 14 + 14 + 5 * 15 + 10 + 13


def test_singles_fold_every_max_singles_messages() -> None:
    core = TcpSourceSession(7)
    tidx = core.add_topic("t")
    st = core.stats
    n = MAX_SINGLES * 3 + 5
    for _ in range(n):
        core.send_one(tidx, b"pq", 0.0)
        assert 1 <= st.singles <= MAX_SINGLES  # a cached small int, always
    assert (st.messages_sent, st.datagrams_sent, st.bytes_sent) == (n, n, n * 14)
    assert st.messages_base == n - st.singles
