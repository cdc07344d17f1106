"""The data path's shortcuts decide exactly as the general rules they skip (differential tests).

- :meth:`TopicRecovery.pass_live` (the engine calls it before :meth:`TopicRecovery.on_live`)
  against :meth:`on_live` alone, over random live / loss / retransmission / late-join inputs.
- :class:`RetentionBuffer` of a persistent source (``hold_unreleased``), whose ``add`` skips the
  trim while an unreleased message is the oldest, against the rules applied after every step.
"""

from __future__ import annotations

from collections import deque

from hypothesis import given, settings
from hypothesis import strategies as st

from umcore.features.latejoin import LateJoinConfig
from umcore.features.otr import OtrConfig
from umcore.features.recovery import DELIVER_DATA, TopicRecovery
from umcore.features.retention import PER_MESSAGE_OVERHEAD, RetentionBuffer

_M = 0xFFFFFFFF


def _recovery(late_join: bool) -> TopicRecovery:
    return TopicRecovery(
        transport_idx=3,
        topic_idx=7,
        request_idx=42,
        reply_to=("10.0.0.2", 14392),
        late_join=LateJoinConfig() if late_join else None,
        otr=OtrConfig(initial_delay=0.0),
    )


def _state(rec: TopicRecovery) -> tuple[object, ...]:
    return (rec.next, sorted(rec.holes), dict(rec.cache), rec.recovering, rec.stats.duplicates)


_op = st.tuples(st.sampled_from(["live", "live", "live", "loss", "rx", "info"]),
                st.integers(0, 24), st.integers(1, 3))  # fmt: skip


@settings(max_examples=300, deadline=None)
@given(
    start=st.sampled_from([0, 100, _M - 5]),
    late_join=st.booleans(),
    ops=st.lists(_op, max_size=40),
)
def test_pass_live_agrees_with_on_live(
    start: int, late_join: bool, ops: list[tuple[str, int, int]]
) -> None:
    fast, slow = _recovery(late_join), _recovery(late_join)
    if late_join:  # a persistent receiver's: the range comes later ("info")
        fast.await_range()
        slow.await_range()
    passed = 0
    for now, (kind, k, n) in enumerate(ops):
        sqn = (start + k) & _M
        payload = sqn.to_bytes(4, "big")
        if kind == "live":
            if fast.pass_live(sqn):
                passed += 1
                got = [(DELIVER_DATA, sqn, payload, 0, None, 0)]
            else:
                got = fast.on_live(sqn, payload, None, float(now))
            assert got == slow.on_live(sqn, payload, None, float(now))
        elif kind == "loss":
            got = fast.on_transport_loss(sqn, n, float(now))
            assert got == slow.on_transport_loss(sqn, n, float(now))
        elif kind == "rx":
            got = fast.on_retransmission(sqn, payload, None, float(now))
            assert got == slow.on_retransmission(sqn, payload, None, float(now))
        else:
            low = (sqn - n) & _M
            assert fast.on_lj_info(low, sqn, float(now)) == slow.on_lj_info(low, sqn, float(now))
        assert _state(fast) == _state(slow)
        fast.take_requests()
        slow.take_requests()
    assert passed <= sum(1 for kind, _k, _n in ops if kind == "live")


def test_pass_live_takes_the_common_case_only() -> None:
    rec = _recovery(late_join=False)
    assert not rec.pass_live(_M)  # the first message: on_live's
    assert rec.on_live(_M, b"a", None, 0.0) == [(DELIVER_DATA, _M, b"a", 0, None, 0)]
    assert rec.pass_live(0) and rec.pass_live(1) and rec.next == 0x1_0000_0002  # wrapped
    assert not rec.pass_live(1)  # a duplicate: on_live counts it
    assert rec.pass_live(5)  # a gap nobody reported: delivered as on_live would
    rec.on_transport_loss(6, 1, 0.0)  # an OTR hole
    assert not rec.pass_live(7) and rec.next == 0x1_0000_0006
    waiting = _recovery(late_join=True)
    waiting.await_range()
    assert not waiting.pass_live(0)


# ------------------------------------------------------------------------- retention hold


def _reference(
    entries: deque[tuple[int, float, int]],
    size: int,
    floor: int | None,
    now: float,
    threshold: int,
    limit: int,
    age: float,
    counts: dict[str, int],
) -> int:
    """The trim rules applied in full (module docstring of umcore.features.retention)."""

    def released(sqn: int) -> bool:
        return floor is not None and 0 < ((floor - sqn) & _M) < 0x80000000

    while len(entries) > 1:
        sqn, t, n = entries[0]
        if size > limit:
            counts["discarded_limit"] += 1
            counts["forced"] += not released(sqn)
        elif size > threshold and now - t >= age and released(sqn):
            counts["discarded_age_size"] += 1
        else:
            break
        entries.popleft()
        size -= n + PER_MESSAGE_OVERHEAD
    return size


_rop = st.tuples(st.sampled_from(["add", "add", "add", "release", "expire"]),
                 st.integers(0, 200), st.integers(0, 3))  # fmt: skip


@settings(max_examples=300, deadline=None)
@given(
    threshold=st.sampled_from([0, 200, 1000]),
    limit=st.sampled_from([400, 2000, 1_000_000]),
    age=st.sampled_from([0.0, 2.0]),
    start=st.sampled_from([0, _M - 3]),
    ops=st.lists(_rop, max_size=60),
)
def test_held_retention_trims_as_the_rules_say(
    threshold: int, limit: int, age: float, start: int, ops: list[tuple[str, int, int]]
) -> None:
    rb = RetentionBuffer(threshold, limit, age, hold_unreleased=True)
    ref: deque[tuple[int, float, int]] = deque()
    size = 0
    floor: int | None = None
    counts = {"discarded_limit": 0, "forced": 0, "discarded_age_size": 0}
    sqn = start
    now = 0.0
    for kind, n, dt in ops:
        now += dt
        if kind == "add":
            rb.add(sqn, bytes(n), now)
            ref.append((sqn, now, n))
            size += n + PER_MESSAGE_OVERHEAD
            sqn = (sqn + 1) & _M
        elif kind == "release" and ref:
            through = (ref[0][0] + n) & _M
            if 0 < ((sqn - through) & _M) < 0x80000000:  # only what was sent
                rb.release_through(through, now)
                floor = (through + 1) & _M
        else:
            rb.expire(now)
        size = _reference(ref, size, floor, now, threshold, limit, age, counts)
        held = rb.range()
        assert held == ((ref[0][0], ref[-1][0]) if ref else None)
        assert rb.size == size
        assert {k: getattr(rb.stats, k) for k in counts} == counts
