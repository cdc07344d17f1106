"""The publishing scheduler, driven with explicit times."""

from __future__ import annotations

import pytest

from umcore.errors import ConfigError
from umcore.monitor.categories import Category
from umcore.monitor.scheduler import Publish, PublishingScheduler

C = Category


def cats(items: list[Publish]) -> list[str]:
    return [p.category for p in items]


def test_default_zero_means_nothing_is_published() -> None:
    s = PublishingScheduler()
    s.start(100.0)
    assert not s.enabled()
    assert s.next_timer() is None
    assert s.poll(1e9) == []


def test_mcs_demo_cadence() -> None:
    s = PublishingScheduler(default_ms=5000)
    s.start(100.0)
    assert s.next_timer() == 100.0  # the configuration categories go out at start
    assert cats(s.poll(100.0)) == [C.CONFIG_OPTS, C.INTERNAL_CONFIG_OPTS]
    assert s.next_timer() == 105.0
    assert s.poll(104.999) == []
    first = s.poll(105.0)
    assert cats(first) == list(Category)  # every category, in order, one interval after start
    assert s.next_timer() == 110.0


def test_explicit_intervals_override_default_and_zero_disables() -> None:
    s = PublishingScheduler({C.SRS_STATS: 1000, C.UM_CLIENT_STATS: 0}, default_ms=3000)
    assert s.interval(C.SRS_STATS) == 1000
    assert s.interval(C.UM_CLIENT_STATS) == 0
    assert s.interval(C.CONNECTION_EVENTS) == 3000
    s.start(0.0)
    s.poll(0.0)
    published: list[tuple[float, str]] = []
    t = 0.0
    while True:
        nxt = s.next_timer()
        assert nxt is not None
        if nxt > 6.0:
            break
        t = nxt
        published += [(t, p.category) for p in s.poll(t)]
    srs = [when for when, c in published if c == C.SRS_STATS]
    assert srs == [1.0, 2.0, 3.0, 4.0, 5.0, 6.0]
    assert [when for when, c in published if c == C.CONNECTION_EVENTS] == [3.0, 6.0]
    assert not any(c == C.UM_CLIENT_STATS for _, c in published)


def test_set_interval_at_run_time() -> None:
    s = PublishingScheduler(default_ms=5000, publish_at_start=())
    s.start(0.0)
    s.set_interval(C.SRS_STATS, 1000, now=2.5)
    assert s.next_timer() == 3.5
    assert cats(s.poll(3.5)) == [C.SRS_STATS]
    s.set_interval(C.SRS_STATS, 0, now=4.0)
    assert cats(s.poll(5.0)) == [c for c in Category if c != C.SRS_STATS]
    s.set_interval(None, 200, now=5.0)
    assert s.next_timer() == pytest.approx(5.2)
    assert cats(s.poll(5.2)) == list(Category)
    with pytest.raises(ValueError):
        s.set_interval("NOPE", 1000, now=6.0)


def test_snapshot_publishes_now_even_when_off_and_keeps_the_schedule() -> None:
    s = PublishingScheduler({C.SRS_STATS: 10000}, publish_at_start=())
    s.start(0.0)
    s.request_snapshot([C.SRS_ERROR_STATS, C.SRS_STATS])
    assert s.next_timer() == float("-inf")
    assert s.poll(1.0) == [Publish(C.SRS_ERROR_STATS, True), Publish(C.SRS_STATS, True)]
    assert s.next_timer() == 10.0
    s.request_snapshot([C.SRS_STATS])
    assert s.poll(10.0) == [Publish(C.SRS_STATS, True)]  # due and snapshotted: published once
    assert s.next_timer() == 20.0


def test_late_poll_publishes_once_and_restarts_the_schedule() -> None:
    s = PublishingScheduler({C.SRS_STATS: 1000}, publish_at_start=())
    s.start(0.0)
    assert cats(s.poll(10.25)) == [C.SRS_STATS]  # not ten times
    assert s.next_timer() == pytest.approx(11.25)


def test_configuration_errors() -> None:
    with pytest.raises(ConfigError):
        PublishingScheduler({"bogus": 1000})
    with pytest.raises(ConfigError):
        PublishingScheduler(default_ms=-1)


def test_other_daemons_groups() -> None:
    s = PublishingScheduler(
        {"store": 5000},
        default_ms=0,
        categories=("store", "source", "config"),
        publish_at_start=("config",),
    )
    s.start(0.0)
    assert s.next_timer() == 5.0
    assert cats(s.poll(5.0)) == ["store"]
