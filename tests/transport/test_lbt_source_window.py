"""LBT source per-datagram work (LbtSource._emit): the transmission window by size and by limit,
the rate limiter's inlined common case against TokenBucket.take, and the statistics."""

from __future__ import annotations

import struct

from hypothesis import given, settings
from hypothesis import strategies as st

from umcore.transport.lbt import DATAGRAM_OVERHEAD, MAX_HELD_DATAGRAMS, SourceConfig
from umcore.transport.lbtrm import LbtrmSource
from umcore.transport.lbtru import LbtruSource, RuSourceConfig
from umcore.transport.ratelimit import RateLimiter, TokenBucket
from umcore.wire import lbtrm as w

SID = 0x0BADCAFE
PORT = 14390


def payload(i: int, size: int) -> bytes:
    return struct.pack("!I", i) + bytes(size - 4)


def window_sqns(src: LbtrmSource) -> list[int]:
    return [int.from_bytes(d[8:12], "big") for d in src._window]


def test_window_by_size_keeps_the_newest_that_fit() -> None:
    src = LbtrmSource(SID, PORT, SourceConfig(transmission_window_size=5000), None, 0.0)
    tidx = src.add_topic("t")
    sizes = []
    for i in range(20):
        src.send(tidx, payload(i, 1000), 0.0, flush=True)
        sizes.append(len(src.ready[-1]))
    # Every datagram is 1000 + 12 (LBMC) + 20 (LBT-RM) bytes: four fit in 5000, five do not.
    assert set(sizes) == {1032}
    assert window_sqns(src) == [16, 17, 18, 19]
    assert src.trail_sqn == 16 and src._window_bytes == 4 * 1032
    fields = src.monitor_fields()
    assert fields["txw_msgs"] == 4 and fields["txw_bytes"] == 4 * 1032


def test_window_limit_counts_the_overhead() -> None:
    # 4 x 1032 = 4128 fits the size; with 28 bytes each of UDP/IP overhead 4 x 1060 = 4240 does
    # not fit a 4200 limit, so the limit keeps three.
    cfg = SourceConfig(transmission_window_size=1 << 20, transmission_window_limit=4200)
    src = LbtrmSource(SID, PORT, cfg, None, 0.0)
    tidx = src.add_topic("t")
    for i in range(10):
        src.send(tidx, payload(i, 1000), 0.0, flush=True)
    assert window_sqns(src) == [7, 8, 9]
    assert src._window_bytes + DATAGRAM_OVERHEAD * len(src._window) <= 4200


def test_window_keeps_one_oversized_datagram_and_serves_it() -> None:
    src = LbtrmSource(SID, PORT, SourceConfig(transmission_window_size=100), None, 0.0)
    tidx = src.add_topic("t")
    for i in range(3):
        src.send(tidx, payload(i, 500), 0.0, flush=True)
    assert window_sqns(src) == [2]
    src.outbox.clear()
    src.handle_nak([1, 2], None, 0.1)
    out = [w.decode(d) for d, _ in src.outbox]
    assert [r.sqn for r in out if isinstance(r, w.LBTRMData)] == [2]
    assert [r.sqns for r in out if isinstance(r, w.LBTRMNcf)] == [(1,)]


def test_statistics_count_every_data_datagram_once() -> None:
    src = LbtruSource(SID, RuSourceConfig(), None, 0.0)
    tidx = src.add_topic("t")
    total = 0
    for i in range(7):
        src.send(tidx, payload(i, 300), 0.0, flush=True)
        total += len(src.ready[-1])
    src.emit_lbmc(b"")  # nothing: no datagram
    fields = src.monitor_fields()
    assert fields["msgs_sent"] == src.stats.datagrams_sent == src.lstats.msgs_sent == 7
    assert fields["bytes_sent"] == src.stats.bytes_sent == total


def test_refused_beyond_the_held_bound_are_counted() -> None:
    limiter = RateLimiter(8 * 50, 8 * 50, 1.0)  # 50 bytes per second: the first crosses it
    src = LbtrmSource(SID, PORT, SourceConfig(batching_minimum_length=1), limiter, 0.0)
    tidx = src.add_topic("t")
    for i in range(MAX_HELD_DATAGRAMS + 10):
        src.send(tidx, payload(i, 64), 0.0)
    assert len(src.ready) == 1 and src.blocked
    assert src.lstats.datagrams_held == MAX_HELD_DATAGRAMS
    assert src.lstats.datagrams_refused == 9


# One step of a sending session: (payload size, time advance in ms).
_steps = st.lists(
    st.tuples(st.integers(min_value=4, max_value=3000), st.integers(min_value=0, max_value=15)),
    min_size=1,
    max_size=120,
)


@settings(max_examples=150, deadline=None)
@given(
    steps=_steps,
    bits=st.sampled_from([0, 8 * 100_000, 8 * 1_000_000, 8 * 10_000_000]),
    interval_ms=st.sampled_from([1, 10, 100]),
)
def test_inlined_bucket_spends_as_token_bucket_take(
    steps: list[tuple[int, int]], bits: int, interval_ms: int
) -> None:
    """_emit's inline spend of the data bucket gives the same decisions and the same bucket
    state as TokenBucket.take on a twin bucket fed the same datagrams at the same times."""
    interval = interval_ms / 1000
    limiter = RateLimiter(bits, 0, interval, 0.0)
    twin = TokenBucket(bits, interval, 0.0)
    src = LbtrmSource(SID, PORT, SourceConfig(batching_minimum_length=1), limiter, 0.0)
    tidx = src.add_topic("t")
    now = 0.0
    for i, (size, advance) in enumerate(steps):
        now += advance / 1000
        if src.blocked:
            src.handle_timer(now)  # refill: held datagrams are released (they spend tokens)
            src.ready.clear()
            if src.blocked:
                continue  # the API does not send while blocked
            # the twin spends for the released ones the same way (_release uses take)
            twin.tokens, twin.overdraft, twin.next_refill = (
                limiter.data.tokens,
                limiter.data.overdraft,
                limiter.data.next_refill,
            )
            twin.refused = limiter.data.refused
        src.send(tidx, payload(i, size), now)
        (dgram_len,) = [len(d) for d in src.ready] or [len(src._held[-1])]
        src.ready.clear()
        passed = twin.take(dgram_len, now)
        assert passed == (not src.blocked)
        b = limiter.data
        assert (b.tokens, b.overdraft, b.next_refill, b.refused) == (
            twin.tokens,
            twin.overdraft,
            twin.next_refill,
            twin.refused,
        )
