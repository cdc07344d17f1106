"""BatchingSource's batch timer and kept-open runs (batching module docstring, "Batch start" and
"Batch timer"): the batching deadline only moves earlier, a stale one moves on to the current
batch's, each batch goes out one interval after its oldest message, and the bytes stay those of
one-by-one framing whatever the batch boundaries.
"""

from __future__ import annotations

import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from umcore.transport.lbtrm import LbtrmSource
from umcore.transport.tcp import TcpSourceSession
from umcore.wire import lbmc


def _expected(msgs: list[tuple[int, int, bytes]]) -> bytes:
    return b"".join(lbmc.encode_data(tidx, sqn, p) for tidx, sqn, p in msgs)


def test_batch_start_does_not_move_the_timer_later() -> None:
    core = TcpSourceSession(7, batching_minimum_length=150, batching_interval=0.2)
    t = core.add_topic("t")
    assert core.send(t, b"a" * 40, 1.0) is None  # batch 1 starts: due 1.2
    assert core.timer_dirty and core.next_timer() == pytest.approx(1.2)
    core.timer_dirty = False
    assert core.send(t, b"b" * 40, 1.01) is None
    assert core.send(t, b"c" * 40, 1.02) is not None  # 156 bytes >= 100: handed on
    assert core._run_n == ~40  # the run is kept open, empty, for the next batch
    assert core.send(t, b"d" * 40, 1.05) is None  # batch 2 starts: due 1.25, timer stays
    assert not core.timer_dirty
    assert core.next_timer() == pytest.approx(1.2)
    assert core.handle_timer(1.2) is None  # stale: nothing due yet
    assert core.next_timer() == pytest.approx(1.25)  # batch 2's own deadline
    assert core.handle_timer(1.2499) is None
    out = core.handle_timer(1.25)
    assert out == lbmc.encode_data(t, 3, b"d" * 40)
    assert core.next_timer() == pytest.approx(6.0)  # only the TSNI check is left
    assert core.handle_timer(6.0) is None or core.next_timer() is not None


def test_stale_deadline_with_empty_batch_is_dropped() -> None:
    core = TcpSourceSession(7, batching_minimum_length=150, batching_interval=0.2)
    t = core.add_topic("t")
    core.send(t, b"a" * 40, 1.0)
    assert core.flush() is not None
    assert core.next_timer() == pytest.approx(1.2)  # left from the flushed batch
    assert core.handle_timer(1.2) is None
    assert core.next_timer() == pytest.approx(6.0)  # the TSNI check only
    # a batch started after the deadline left arms a new one (dirty: it is earlier)
    core.timer_dirty = False
    core.send(t, b"b" * 40, 2.0)
    assert core.timer_dirty and core.next_timer() == pytest.approx(2.2)


def test_earlier_deadline_moves_the_timer() -> None:
    """A batch due before the pending deadline (a shorter interval) re-arms the timer."""
    core = TcpSourceSession(7, batching_minimum_length=150, batching_interval=0.2)
    t = core.add_topic("t")
    core.send(t, b"a" * 40, 1.0)
    core.flush()
    core.batching_interval = 0.05
    core.timer_dirty = False
    core.send(t, b"b" * 40, 1.01)
    assert core.timer_dirty and core.next_timer() == pytest.approx(1.06)


def test_kept_run_and_other_paths_share_sequence_numbers() -> None:
    """The run kept open across a hand-on: a single message, a fragmented one, another
    length and another topic all take the right sequence numbers."""
    core = TcpSourceSession(7, datagram_max_size=300, batching_minimum_length=150)
    a, b = core.add_topic("a"), core.add_topic("b")
    out = [core.send(a, b"x" * 40, 0.0) for _ in range(3)]  # handed on at the third
    assert out[2] is not None and core._run_n == ~40
    assert core.next_sequence_number(a) == 3
    out.append(core.send_one(a, b"one", 0.1))  # batch empty: framed alone, sqn 3
    assert core.next_sequence_number(a) == 4
    big = bytes(range(256)) * 2  # fragmented (max payload 236)
    out.append(core.send(a, big, 0.2, flush=True))
    assert core.next_sequence_number(a) == 7
    out.append(core.send(a, b"y" * 40, 0.3))  # the run's length again: settles, new run
    out.append(core.send(b, b"z" * 40, 0.3))  # another topic
    out.append(core.send(a, b"w" * 7, 0.3))  # another length
    out.append(core.flush())
    stream = b"".join(o for o in out if o)
    msgs = list(lbmc.iter_messages(stream))
    assert [(m.tidx, m.sqn) for m in msgs] == [
        (a, 0), (a, 1), (a, 2), (a, 3), (a, 4), (a, 5), (a, 6), (a, 7), (b, 0), (a, 8)
    ]  # fmt: skip
    assert core.stats.messages_sent == 8  # a fragmented message counts once


def test_lbt_run_with_transport_header_across_sequence_boundaries() -> None:
    """A batch that is one run is framed straight into the DATA datagram (header prefix):
    its LBMC bytes are one-by-one framing across the 256 and 2**32 boundaries."""
    for start in (0, 250, 0xFFF0, 0xFFFFFFF0):
        src = LbtrmSource(9, 14400, now=0.0)
        t = src.add_topic("t")
        src.topics[t].sqn = start  # type: ignore[union-attr]
        for i in range(60):
            src.send(t, bytes([i]) * 64, 0.0)
        src.flush()
        assert all(d[:1] == bytes(src.ready[0][:1]) for d in src.ready)
        lbmc_bytes = b"".join(d[src.header_size :] for d in src.ready)
        want = [(t, (start + i) & 0xFFFFFFFF, bytes([i]) * 64) for i in range(60)]
        assert lbmc_bytes == _expected(want)
        assert [int.from_bytes(d[8:12], "big") for d in src.ready] == list(range(len(src.ready)))


@settings(max_examples=120, deadline=None)
@given(seed=st.integers(0, 2**32 - 1), lbt=st.booleans())
def test_random_sends_keep_one_by_one_bytes_and_deadlines(seed: int, lbt: bool) -> None:
    """Random sends (two topics, a few lengths, flushes, single messages, fragments, timers):
    every message arrives whole, in send order, with its topic's next sequence numbers, and
    while a batch is held the timer is due no later than one interval after its oldest message
    (the timer that hands it on fires exactly then)."""
    rng = random.Random(seed)
    core: TcpSourceSession | LbtrmSource
    if lbt:
        core = LbtrmSource(9, 14400, now=0.0)
        core.batching_minimum_length = 300
        big = 9000
    else:
        core = TcpSourceSession(7, datagram_max_size=600, batching_minimum_length=300)
        big = 700
    topics = [core.add_topic("a"), core.add_topic("b")]
    sqn = dict.fromkeys(topics, 0)
    sent: list[tuple[int, int, bytes]] = []
    chunks: list[bytes] = []
    now = 0.0
    oldest: float | None = None  # time of the oldest message still batched

    def took(out: bytes | None) -> None:
        nonlocal oldest
        if isinstance(core, LbtrmSource):
            chunks.extend(d[core.header_size :] for d in core.ready)
            core.ready.clear()
        elif out:
            chunks.append(out)
        if not core.batch_len:
            oldest = None

    for _ in range(150):
        now += rng.choice((0.0, 0.001, 0.05, 0.15))
        while (deadline := core.next_timer()) is not None and deadline <= now:
            took(core.handle_timer(deadline))
        if core.batch_len:
            assert oldest is not None
            deadline = core.next_timer()
            assert deadline is not None and deadline <= oldest + 0.2 + 1e-9
        op = rng.random()
        tidx = rng.choice(topics)
        if op < 0.75:
            n = rng.choice((10, 10, 10, 40, big))
            payload = bytes([sqn[tidx] & 0xFF]) * n
            before = core.stats.datagrams_sent
            took(core.send(tidx, payload, now, rng.random() < 0.05))
            # a hand-on takes the whole batch: what is left came with this message
            if core.batch_len and (oldest is None or core.stats.datagrams_sent != before):
                oldest = now
        elif op < 0.85:
            payload = b"one" + bytes([sqn[tidx] & 0xFF])
            took(core.send_one(tidx, payload, now))
            assert not core.batch_len
        else:
            took(core.flush())
            continue
        sent.append((tidx, sqn[tidx], payload))
        sqn[tidx] += max(1, -(-len(payload) // core.max_payload))
        for t in topics:
            assert core.next_sequence_number(t) == sqn[t]
    took(core.flush())
    got: list[tuple[int, int, bytes]] = []
    pending: dict[int, bytearray] = {}
    for m in lbmc.iter_messages(b"".join(chunks)):
        if m.msg_type != lbmc.MSG_DATA:
            continue
        frag = m.find(lbmc.Frag)
        if frag is None:
            got.append((m.tidx, m.sqn, m.payload))
            continue
        buf = pending.setdefault(frag.first_sqn, bytearray())
        buf += m.payload
        if len(buf) == frag.total_len:
            got.append((m.tidx, frag.first_sqn, bytes(pending.pop(frag.first_sqn))))
    assert got == sent
    assert not pending
