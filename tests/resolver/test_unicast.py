"""lbmrd selection: activity timeout, rotation among active lbmrds, keepalive bookkeeping."""

from __future__ import annotations

import itertools
import random

import pytest

from umcore.resolver.unicast import UnicastDaemons

A = ("127.0.0.1", 15380)
B = ("127.0.0.1", 15381)


def test_single_daemon_inactive_after_silence_and_back() -> None:
    u = UnicastDaemons([A], 0.0, rng=random.Random(1))
    u.advance(0.9)
    assert u.active == [True]
    u.advance(1.2)
    assert u.active == [False]
    u.heard_from(0, 1.3)
    assert u.active == [True]
    assert u.destination() == A


def test_rotation_among_active_daemons() -> None:
    u = UnicastDaemons([A, B], 0.0, rng=random.Random(2))
    seen = []
    now = 0.0
    while now < 3.0:
        u.heard_from(0, now)
        u.heard_from(1, now)
        u.advance(now)
        seen.append(u.destination())
        now += 0.01
    assert set(seen) == {A, B}
    # the change interval is 100-300 ms: no switch happens more often than every 100 ms
    switches = [i for i in range(1, len(seen)) if seen[i] != seen[i - 1]]
    gaps = [b - a for a, b in itertools.pairwise(switches)]
    assert min(gaps) >= 10 - 1  # in 10 ms steps
    assert max(gaps) <= 30 + 1


def test_dead_daemon_is_skipped() -> None:
    u = UnicastDaemons([A, B], 0.0, rng=random.Random(3))
    now = 0.0
    while now < 3.0:
        u.heard_from(1, now)  # only B answers
        u.advance(now)
        if now > 1.3:
            assert u.destination() == B, now
        now += 0.01
    assert u.active == [False, True]


def test_keepalives_due_once_per_interval() -> None:
    u = UnicastDaemons([A, B], 0.0, rng=random.Random(4))
    assert u.keepalives_due(0.0) == [0, 1]
    assert u.keepalives_due(0.3) == []
    u.sent_to(0, 0.4)  # TR traffic to A suppresses A's keepalive
    assert u.keepalives_due(0.6) == [1]
    assert u.keepalives_due(0.9) == [0]
    assert u.next_timer(keepalives=True) <= 1.1 + 1e-9


def test_empty_list_rejected() -> None:
    with pytest.raises(ValueError):
        UnicastDaemons([], 0.0)
