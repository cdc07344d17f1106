"""umcore.daemon.refusals.RefusalLog with a fake clock and a fake scheduler: the first refusal of
a kind is logged at once with who and why, the rest of its window is one summary line with
counts and a sample of peers, kinds never share a line, quiet windows close."""

from __future__ import annotations

import logging
from collections.abc import Callable

import pytest

from umcore.daemon.refusals import MAX_PEERS_COUNTED, SAMPLE, RefusalLog

LOGGER = "test.refusals"


class Clock:
    def __init__(self) -> None:
        self.now = 0.0
        self.scheduled: list[tuple[float, Callable[[], None]]] = []

    def __call__(self) -> float:
        return self.now

    def call_at(self, when: float, callback: Callable[[], None]) -> None:
        self.scheduled.append((when, callback))

    def run_until(self, t: float) -> None:
        """Advance to ``t``, running what was scheduled by then (in order)."""
        while True:
            due = sorted((w, i) for i, (w, _) in enumerate(self.scheduled) if w <= t)
            if not due:
                break
            when, i = due[0]
            _, callback = self.scheduled.pop(i)
            self.now = when
            callback()
        self.now = t


def messages(caplog: pytest.LogCaptureFixture) -> list[str]:
    out = [r.getMessage() for r in caplog.records if r.name == LOGGER]
    caplog.clear()
    return out


@pytest.fixture
def setup(caplog: pytest.LogCaptureFixture) -> tuple[Clock, RefusalLog]:
    caplog.set_level(logging.WARNING, logger=LOGGER)
    clock = Clock()
    return clock, RefusalLog(logging.getLogger(LOGGER), clock, call_at=clock.call_at, period=10.0)


def test_first_refusal_at_once_then_one_summary_per_period(
    setup: tuple[Clock, RefusalLog], caplog: pytest.LogCaptureFixture
) -> None:
    clock, log = setup
    log.note("client table full", "10.0.0.1:1", "the table holds 4 clients")
    assert messages(caplog) == [
        "refused client table full: 10.0.0.1:1: the table holds 4 clients; 1 since start"
    ]
    for i in range(2, 12):
        clock.now = i * 0.5
        log.note("client table full", f"10.0.0.{i % 3}:1", "x")
    assert messages(caplog) == []  # counted, not logged
    clock.run_until(10.0)
    assert messages(caplog) == [
        "refused client table full: 10 more in the last 10 s from 3 peer(s) "
        "(10.0.0.2:1, 10.0.0.0:1, 10.0.0.1:1); 11 since start"
    ]
    # a steady flood: one summary per period, never a line per refusal
    for i in range(100):
        clock.run_until(10.0 + i * 0.2)
        log.note("client table full", "10.0.0.9:1", "x")
    clock.run_until(30.0)
    assert len(messages(caplog)) == 2
    # a quiet period closes the window: the next refusal is logged at once again
    clock.run_until(60.0)
    assert messages(caplog) == []
    log.note("client table full", "10.0.0.5:1", "back")
    assert messages(caplog) == ["refused client table full: 10.0.0.5:1: back; 112 since start"]


def test_kinds_have_their_own_lines(
    setup: tuple[Clock, RefusalLog], caplog: pytest.LogCaptureFixture
) -> None:
    clock, log = setup
    for _ in range(50):
        log.note("malformed input", "a:1", "bad")
    log.note("source quota per host", "legit:2", "quota", count=3)
    lines = messages(caplog)
    assert lines == [
        "refused malformed input: a:1: bad; 1 since start",
        "refused source quota per host: legit:2 (x3): quota; 3 since start",
    ]
    clock.run_until(10.0)
    assert messages(caplog) == [
        "refused malformed input: 49 more in the last 10 s from 1 peer(s) (a:1); 50 since start"
    ]
    assert log.totals == {"malformed input": 50, "source quota per host": 3}


def test_the_sample_and_the_peer_count_are_bounded(
    setup: tuple[Clock, RefusalLog], caplog: pytest.LogCaptureFixture
) -> None:
    clock, log = setup
    log.note("k", "first", "r")
    for i in range(MAX_PEERS_COUNTED + 50):
        log.note("k", f"p{i}", "r")
    clock.run_until(10.0)
    [line] = messages(caplog)[1:]
    sample = ", ".join(f"p{i}" for i in range(SAMPLE))
    assert line == (
        f"refused k: {MAX_PEERS_COUNTED + 50} more in the last 10 s from at least "
        f"{MAX_PEERS_COUNTED} peer(s) ({sample}, ...); {MAX_PEERS_COUNTED + 51} since start"
    )


def test_without_a_scheduler_flush_does_the_summaries(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.WARNING, logger=LOGGER)
    now = [0.0]
    log = RefusalLog(logging.getLogger(LOGGER), lambda: now[0], period=5.0)
    log.note("k", "a", "r")
    log.note("k", "b", "r")
    assert log.next_deadline() == 5.0
    now[0] = 4.0
    log.flush()
    assert len(messages(caplog)) == 1
    now[0] = 5.0
    log.flush()
    assert messages(caplog) == [
        "refused k: 1 more in the last 5 s from 1 peer(s) (b); 2 since start"
    ]
    now[0] = 10.0
    log.flush()
    assert log.next_deadline() is None
