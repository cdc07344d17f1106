"""Phase schedules: the send times of the notes' defaults, zero-value rules, query restarts."""

from __future__ import annotations

import itertools

import pytest

from umcore.resolver.schedule import (
    INITIAL,
    QUIESCENT,
    SUSTAINING,
    PhaseSchedule,
    PhaseTimings,
    advertisement_timings,
    query_timings,
)


def run(sched: PhaseSchedule, until: float) -> list[float]:
    """Fire the schedule at each due time up to ``until``; returns the send times."""
    times = []
    while sched.next_due is not None and sched.next_due <= until:
        now = sched.next_due
        times.append(round(now, 6))
        sched.fire(now)
    return times


def test_default_advertisement_times() -> None:
    sched = PhaseSchedule(advertisement_timings(), 100.0)
    times = [round(t - 100.0, 3) for t in run(sched, 100.0 + 70)]
    initial = [0, 0.01, 0.03, 0.07, 0.15, 0.31, 0.63, 1.13]
    initial += [1.13 + 0.5 * k for k in range(1, 8)]  # 1.63 .. 4.63
    assert times[:15] == pytest.approx(initial)
    sustaining = times[15:]
    assert sustaining[0] == pytest.approx(5.63)
    assert all(b - a == pytest.approx(1.0) for a, b in itertools.pairwise(sustaining))
    assert len(sustaining) == 60  # 1 per second for 60 s
    assert sched.phase == QUIESCENT and sched.next_due is None


def test_default_query_times() -> None:
    sched = PhaseSchedule(query_timings(), 0.0)
    times = run(sched, 5.0)
    assert times[:5] == pytest.approx([0, 0.02, 0.06, 0.14, 0.30])
    assert times[5:] == pytest.approx([0.3 + 0.2 * k for k in range(1, 24)])  # .. 4.9
    assert sched.phase == SUSTAINING


def test_query_restarts_sustaining_only_after_initial() -> None:
    sched = PhaseSchedule(advertisement_timings(), 0.0)
    sched.restart_sustaining(0.5)
    assert sched.phase == INITIAL
    run(sched, 100.0)
    assert sched.phase == QUIESCENT
    sched.restart_sustaining(200.0)
    assert sched.phase == SUSTAINING and sched.next_due == pytest.approx(201.0)
    assert len(run(sched, 400.0)) == 60


def test_zero_values() -> None:
    no_initial = PhaseSchedule(PhaseTimings(0.01, 0, 5, 1, 60), 0.0)
    assert no_initial.phase == SUSTAINING
    nothing = PhaseSchedule(PhaseTimings(0.01, 0, 5, 0, 60), 0.0)
    assert nothing.phase == QUIESCENT and nothing.next_due is None
    forever = PhaseSchedule(PhaseTimings(0.01, 0.5, 0, 1, 60), 0.0)
    run(forever, 1000.0)
    assert forever.phase == INITIAL and forever.next_due is not None


def test_late_timer_does_not_burst() -> None:
    sched = PhaseSchedule(advertisement_timings(), 0.0)
    sched.fire(0.0)
    sched.fire(3.0)  # timer ran very late
    assert sched.next_due is not None and sched.next_due >= 3.0
