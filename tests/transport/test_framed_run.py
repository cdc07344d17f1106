"""BatchingSource.send_framed_run (a DRO's proxy source sending a queue's run): exactly what
send_framed does frame by frame -- the same bytes handed on at the same points (TCP: joined in
one write), the same datagrams (LBT-RM), counters, next sequence number and batching deadline.
"""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from umcore.transport.batching import BatchingSource
from umcore.transport.lbtrm import LbtrmSource
from umcore.transport.tcp import TcpSourceSession
from umcore.wire import lbmc


def _run(first: int, k: int, payload: int, tidx: int = 3) -> bytes:
    return b"".join(
        lbmc.encode_data(tidx, (first + i) & 0xFFFFFFFF, bytes([i & 0xFF]) * payload)
        for i in range(k)
    )


def _state(core: BatchingSource, tidx: int) -> tuple[object, ...]:
    st = core.stats
    t = core.topics[tidx]
    assert t is not None
    return (
        b"".join(bytes(p) for p in core.parts),
        core.batch_len,
        t.sqn,
        t.last_data,
        st.messages_sent,
        st.datagrams_sent,
        st.bytes_sent,
        core.next_timer(),
    )


def _pair(kind: str, minimum: int, max_size: int) -> tuple[BatchingSource, BatchingSource]:
    def one() -> BatchingSource:
        if kind == "tcp":
            return TcpSourceSession(7, batching_minimum_length=minimum, datagram_max_size=max_size)
        return LbtrmSource(9, 14400, now=0.0)

    return one(), one()


@settings(max_examples=120, deadline=None)
@given(
    kind=st.sampled_from(["tcp", "lbtrm"]),
    minimum=st.sampled_from([1, 100, 2048, 5000]),
    max_size=st.sampled_from([300, 2048, 65535]),
    reads=st.lists(
        st.tuples(
            st.integers(1, 300),  # frames in the run
            st.sampled_from([0, 1, 64, 200]),  # payload bytes
            st.booleans(),  # flush after it
            st.sampled_from([0.0, 0.05, 0.5]),  # time step before it
            st.integers(0, 3),  # plain sends before it (an open run to settle)
        ),
        min_size=1,
        max_size=6,
    ),
    start=st.sampled_from([0, 250, 0xFFFFFFF0]),
)
def test_a_run_is_frame_by_frame(
    kind: str,
    minimum: int,
    max_size: int,
    reads: list[tuple[int, int, bool, float, int]],
    start: int,
) -> None:
    a, b = _pair(kind, minimum, max_size)
    ta, tb = a.add_topic("t"), b.add_topic("t")
    pa, pb = a.add_topic("p"), b.add_topic("p")
    now = 0.0
    sqn = start
    for k, payload, flush, step, plain in reads:
        now += step
        for _ in range(plain):  # another topic's messages: the run must settle them first
            assert a.send(pa, b"x" * 10, now) == b.send(pb, b"x" * 10, now)
        size = 12 + payload
        if size > a.max_size:
            with pytest.raises(ValueError):
                a.send_framed_run(ta, _run(sqn, k, payload), size, k, sqn + k - 1, now)
            continue
        frames = _run(sqn, k, payload)
        data = bytearray(frames)
        out_a = a.send_framed_run(ta, data, size, k, (sqn + k - 1) & 0xFFFFFFFF, now, flush)
        data[:] = bytes(len(data))  # the caller may reuse its buffer at once
        outs = []
        for i in range(k):
            frame = frames[i * size : (i + 1) * size]
            o = b.send_framed(tb, frame, (sqn + i) & 0xFFFFFFFF, now, flush and i == k - 1)
            if o is not None:
                outs.append(o)
        out_b = b"".join(outs) if outs else None
        assert out_a == out_b
        assert _state(a, ta) == _state(b, tb)
        if kind == "lbtrm":
            assert [bytes(d) for d in a.ready] == [bytes(d) for d in b.ready]  # type: ignore[attr-defined]
        sqn = (sqn + k) & 0xFFFFFFFF
    assert a.flush() == b.flush()
    assert a.handle_timer(now + 10) == b.handle_timer(now + 10)


def test_a_run_joins_its_batches_in_one_write() -> None:
    core = TcpSourceSession(7, batching_minimum_length=2048)
    t = core.add_topic("t")
    data = _run(100, 100, 64, tidx=t)
    out = core.send_framed_run(t, data, 76, 100, 199, 1.0, flush=True)
    assert out == data  # 4 batches of 27 frames (2052 bytes) and the rest, one bytes object
    assert core.stats.datagrams_sent == 4 and core.stats.messages_sent == 100
    assert core.next_sequence_number(t) == 200
    assert core.flush() is None


def test_bad_runs_are_refused() -> None:
    core = TcpSourceSession(7, datagram_max_size=1000)
    t = core.add_topic("t")
    with pytest.raises(ValueError):
        core.send_framed_run(t, bytes(2000), 1001, 1, 0, 0.0)  # longer than the session's max
    with pytest.raises(ValueError):
        core.send_framed_run(t, bytes(100), 76, 2, 0, 0.0)  # not two frames of 76 bytes
    gone = core.add_topic("gone")
    core.remove_topic(gone)
    with pytest.raises(KeyError):
        core.send_framed_run(gone, bytes(76), 76, 1, 0, 0.0)
