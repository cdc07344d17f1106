"""Per-topic schedules of UDP topic resolution: initial, sustaining and quiescent phases.

Theory of operation
-------------------
UM's UDP topic resolution repeats itself because UDP is unreliable.  Each topic a context
*sources* runs an advertising schedule (TIRs, Topic Information Records) and each topic it
*receives* runs a querying schedule (TQRs, Topic Query Records).  Both schedules have the same
three phases (seed 003 chapter 7, our notes seed-transports-tr.md 2.4):

- **initial**: the first record goes out at once; the next after ``min_initial_interval``, then the
  interval doubles up to ``max_initial_interval`` and stays there until ``initial_duration`` has
  passed since the start.  Advertisements with the defaults go out at 0, 10, 30, 70, 150, 310, 630,
  1130 ms then every 500 ms up to 4630 ms; queries at 0, 20, 60, 140, 300 ms then every 200 ms.
- **sustaining**: one record every ``sustain_interval`` for ``sustain_duration``.
- **quiescent**: nothing unsolicited.  A source still answers queries (that is the resolver's job,
  not the schedule's); a query for the topic restarts a full *sustaining* phase
  (:meth:`PhaseSchedule.restart_sustaining`).

Zero values follow the options: ``max_initial_interval == 0`` skips the initial phase,
``initial_duration == 0`` makes the initial phase last forever, ``sustain_interval == 0`` skips
the sustaining phase and ``sustain_duration == 0`` makes it last forever.

This module is sans-IO: times are float seconds handed in by the caller; :attr:`next_due` is the
next time the schedule wants to send (``None`` once quiescent).
"""

from __future__ import annotations

from umcore.config.options import OptionReader

__all__ = [
    "INITIAL",
    "QUIESCENT",
    "SUSTAINING",
    "PhaseSchedule",
    "PhaseTimings",
    "advertisement_timings",
    "query_timings",
]

INITIAL = "initial"
SUSTAINING = "sustaining"
QUIESCENT = "quiescent"


class PhaseTimings:
    """The five numbers of one schedule, in seconds (UM's options are in ms, durations in s)."""

    __slots__ = (
        "initial_duration",
        "max_initial_interval",
        "min_initial_interval",
        "sustain_duration",
        "sustain_interval",
    )

    def __init__(
        self,
        min_initial_interval: float,
        max_initial_interval: float,
        initial_duration: float,
        sustain_interval: float,
        sustain_duration: float,
    ) -> None:
        self.min_initial_interval = min_initial_interval
        self.max_initial_interval = max_initial_interval
        self.initial_duration = initial_duration
        self.sustain_interval = sustain_interval
        self.sustain_duration = sustain_duration

    @classmethod
    def from_options(
        cls,
        min_initial_ms: float,
        max_initial_ms: float,
        initial_duration_ms: float,
        sustain_interval_ms: float,
        sustain_duration_s: float,
    ) -> PhaseTimings:
        """From the option values in UM's units: intervals and the initial duration in ms, the
        sustaining duration in seconds."""
        return cls(
            min_initial_ms / 1000,
            max_initial_ms / 1000,
            initial_duration_ms / 1000,
            sustain_interval_ms / 1000,
            sustain_duration_s,
        )


def advertisement_timings(
    min_initial_ms: float = 10,
    max_initial_ms: float = 500,
    initial_duration_ms: float = 5000,
    sustain_interval_ms: float = 1000,
    sustain_duration_s: float = 60,
) -> PhaseTimings:
    """Source (TIR) timings; defaults are the ``resolver_advertisement_*`` option defaults."""
    return PhaseTimings.from_options(
        min_initial_ms, max_initial_ms, initial_duration_ms, sustain_interval_ms, sustain_duration_s
    )


def query_timings(
    min_initial_ms: float = 20,
    max_initial_ms: float = 200,
    initial_duration_ms: float = 5000,
    sustain_interval_ms: float = 1000,
    sustain_duration_s: float = 60,
) -> PhaseTimings:
    """Receiver (TQR) timings; defaults are the ``resolver_query_*`` option defaults."""
    return PhaseTimings.from_options(
        min_initial_ms, max_initial_ms, initial_duration_ms, sustain_interval_ms, sustain_duration_s
    )


# Floating point slack when comparing a deadline with "now" (times are sums of intervals).
_EPSILON = 1e-9


class PhaseSchedule:
    """One topic's schedule.  Call :meth:`fire` when ``now >= next_due``; it advances."""

    __slots__ = ("_interval", "_phase_end", "next_due", "phase", "sent", "timings")

    def __init__(self, timings: PhaseTimings, now: float, *, send_first: bool = True) -> None:
        self.timings = timings
        self.sent = 0
        self._interval = timings.min_initial_interval
        if timings.max_initial_interval > 0 and timings.min_initial_interval > 0:
            self.phase = INITIAL
            self._phase_end = now + timings.initial_duration if timings.initial_duration else None
            self.next_due: float | None = now if send_first else now + self._interval
        else:
            self._enter_sustaining(now, now)

    def _enter_sustaining(self, start: float, last_send: float) -> None:
        t = self.timings
        if t.sustain_interval > 0:
            self.phase = SUSTAINING
            self._phase_end = start + t.sustain_duration if t.sustain_duration else None
            self.next_due = last_send + t.sustain_interval
            if self._phase_end is not None and self.next_due > self._phase_end + _EPSILON:
                self._enter_quiescent()
        else:
            self._enter_quiescent()

    def _enter_quiescent(self) -> None:
        self.phase = QUIESCENT
        self._phase_end = None
        self.next_due = None

    def due(self, now: float) -> bool:
        return self.next_due is not None and now + _EPSILON >= self.next_due

    def fire(self, now: float) -> None:
        """Record that the scheduled record was sent (at its due time) and compute the next."""
        due = self.next_due
        if due is None:
            return
        self.sent += 1
        # Advance from the nominal due time, not from ``now``, so a late timer keeps the cadence.
        t = self.timings
        if self.phase == INITIAL:
            if self.sent > 1:
                self._interval = min(self._interval * 2, t.max_initial_interval)
            nxt = due + self._interval
            end = self._phase_end
            if end is not None and nxt >= end - _EPSILON:
                self._enter_sustaining(end, due)
            else:
                self.next_due = nxt
        else:  # SUSTAINING
            nxt = due + t.sustain_interval
            end = self._phase_end
            if end is not None and nxt > end + _EPSILON:
                self._enter_quiescent()
            else:
                self.next_due = nxt
        # A very late caller must not get a burst of catch-up sends.
        if self.next_due is not None and self.next_due < now - _EPSILON:
            self.next_due = now

    def restart_sustaining(self, now: float) -> None:
        """A query arrived: a full sustaining phase starts now (no effect during the initial one).

        Decision: during the initial phase the immediate answer is sent by the resolver and the
        schedule is left alone (the seed's "recomputed as if it fell on the nearest interval"
        changes at most one interval).
        """
        if self.phase != INITIAL:
            self._enter_sustaining(now, now)

    def stop(self) -> None:
        """Go quiescent now (a receiver reached its source threshold)."""
        self._enter_quiescent()


def advertisement_timings_from(o: OptionReader) -> PhaseTimings:
    """A source's TIR timings from its ``resolver_advertisement_*`` options."""
    return advertisement_timings(
        o.get("resolver_advertisement_minimum_initial_interval"),
        o.get("resolver_advertisement_maximum_initial_interval"),
        o.get("resolver_advertisement_minimum_initial_duration"),
        o.get("resolver_advertisement_sustain_interval"),
        o.get("resolver_advertisement_minimum_sustain_duration"),
    )


def query_timings_from(o: OptionReader) -> PhaseTimings:
    """A receiver's TQR timings from its ``resolver_query_*`` options."""
    return query_timings(
        o.get("resolver_query_minimum_initial_interval"),
        o.get("resolver_query_maximum_initial_interval"),
        o.get("resolver_query_minimum_initial_duration"),
        o.get("resolver_query_sustain_interval"),
        o.get("resolver_query_minimum_sustain_duration"),
    )
