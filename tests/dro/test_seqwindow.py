"""The duplicate window: new, duplicate, reordered, too old, advancing, wrapping at 2**32."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from umcore.dro.seqwindow import SQN_MODULUS, SeqVerdict, SeqWindow
from umcore.errors import ConfigError

NEW, DUP, OLD = SeqVerdict.NEW, SeqVerdict.DUPLICATE, SeqVerdict.TOO_OLD


def test_new_then_duplicate() -> None:
    w = SeqWindow(64, 16)
    assert [w.check(s) for s in (10, 11, 12)] == [NEW, NEW, NEW]
    assert w.check(11) is DUP
    assert w.check(12) is DUP
    assert w.check(13) is NEW


def test_reordered_frames_are_accepted_once() -> None:
    w = SeqWindow(64, 16)
    order = [100, 103, 101, 105, 102, 104, 99]
    assert [w.check(s) for s in order] == [NEW] * 7
    assert [w.check(s) for s in order] == [DUP] * 7


def test_window_advances_by_increment_and_forgets_the_oldest() -> None:
    w = SeqWindow(64, 16)
    w.check(0)  # window [-48, 16)
    assert w.check(15) is NEW
    assert w.check(16) is NEW  # moves up one increment: [-32, 32)
    assert w.base == (-32) % SQN_MODULUS
    assert w.check(-33 % SQN_MODULUS) is OLD
    assert w.check(-32 % SQN_MODULUS) is NEW
    assert w.check(0) is DUP  # still inside
    # far ahead: the window moves up by the fewest increments that hold 200: 11 x 16 -> [144, 208)
    assert w.check(200) is NEW
    assert w.base == 144
    assert w.check(144) is NEW
    assert w.check(143) is OLD


def test_wraps_at_2_to_the_32() -> None:
    w = SeqWindow(64, 16)
    top = SQN_MODULUS - 3
    seq = [top, top + 1, top + 2, 0, 1, 2]
    assert [w.check(s % SQN_MODULUS) for s in seq] == [NEW] * 6
    assert w.check(SQN_MODULUS - 2) is DUP  # before the wrap, still in the window
    assert w.check(1) is DUP
    for s in range(3, 200):
        assert w.check(s) is NEW
    assert w.check(SQN_MODULUS - 2) is OLD  # left behind, and not mistaken for new


def test_jump_beyond_whole_window_clears_it() -> None:
    w = SeqWindow(64, 16)
    for s in range(10):
        w.check(s)
    assert w.check(10_000) is NEW
    assert w.check(10_000 - 40) is NEW  # cleared slots, not stale duplicates


@pytest.mark.parametrize(("size", "increment"), [(60, 8), (64, 12), (64, 64), (64, 24), (0, 8)])
def test_bad_window_configurations_are_refused(size: int, increment: int) -> None:
    with pytest.raises(ConfigError):
        SeqWindow(size, increment)


@settings(max_examples=200, deadline=None)
@given(
    start=st.integers(0, SQN_MODULUS - 1),
    perm=st.permutations(list(range(48))),
    dups=st.lists(st.integers(0, 47), max_size=20),
)
def test_any_reordering_within_the_window_forwards_each_frame_once(
    start: int, perm: list[int], dups: list[int]
) -> None:
    w = SeqWindow(64, 16)
    w.check(start)
    forwarded = []
    for off in perm + dups:
        s = (start + 1 + off) % SQN_MODULUS
        if w.check(s) is NEW:
            forwarded.append(off)
    assert sorted(forwarded) == list(range(48))
