"""The DRO's topic-resolution traffic limiter: bits per second and objects per second.

Theory of operation
-------------------
Each endpoint portal paces five classes of topic resolution message it originates (topic use
queries, pattern use queries, remote topic interest, remote pattern interest, domain routes),
each with its own ``<rate-limit bps=.. objects-per-second=..>`` (notes A4, A10: defaults 500000
bps / 500 objects for use queries, 500000 / 0 for interest, 0 / 50 for domain routes; 0 turns
that limit off).  :class:`TrafficLimiter` holds two continuously refilled buckets, one of bytes
and one of objects ("objects" are the records of a message: one TMR, one interest record, one
domain route), each holding at most one second's worth.  :meth:`TrafficLimiter.try_take` spends
or refuses; :meth:`TrafficLimiter.ready_at` says when a refused message would fit, so the core
can arm its timer.  Time is a parameter (seconds); nothing here reads a clock.
"""

from __future__ import annotations

__all__ = ["BURST_SECONDS", "TrafficLimiter"]

# A bucket holds one second of its rate: the notes give the limits per second and say nothing
# of bursts, so a quiet second may be followed by one second's worth at once, never more.
BURST_SECONDS = 1.0


class TrafficLimiter:
    """Bits-per-second and objects-per-second limits of one class of TR message (0 = none)."""

    __slots__ = ("bps", "byte_tokens", "last", "object_tokens", "ops", "refused")

    def __init__(self, bps: int, objects_per_second: int, now: float = 0.0) -> None:
        if bps < 0 or objects_per_second < 0:
            raise ValueError("rate limits are 0 (off) or positive")
        self.bps = bps
        self.ops = objects_per_second
        self.byte_tokens = bps / 8 * BURST_SECONDS
        self.object_tokens = float(objects_per_second) * BURST_SECONDS
        self.last = now
        #: Messages refused because a budget was spent (they waited, they were not lost).
        self.refused = 0

    def _refill(self, now: float) -> None:
        elapsed = now - self.last
        if elapsed <= 0:
            return
        self.last = now
        if self.bps:
            cap = self.bps / 8 * BURST_SECONDS
            self.byte_tokens = min(cap, self.byte_tokens + elapsed * self.bps / 8)
        if self.ops:
            cap = self.ops * BURST_SECONDS
            self.object_tokens = min(cap, self.object_tokens + elapsed * self.ops)

    def try_take(self, now: float, nbytes: int, objects: int = 1) -> bool:
        """Spend ``nbytes`` and ``objects`` if both budgets allow; else count a refusal.

        A message larger than a whole bucket is let through once the bucket is full (it could
        never fit otherwise), leaving the bucket in debt."""
        self._refill(now)
        byte_ok = not self.bps or self.byte_tokens >= min(nbytes, self.bps / 8 * BURST_SECONDS)
        obj_ok = not self.ops or self.object_tokens >= min(objects, self.ops * BURST_SECONDS)
        if not (byte_ok and obj_ok):
            self.refused += 1
            return False
        if self.bps:
            self.byte_tokens -= nbytes
        if self.ops:
            self.object_tokens -= objects
        return True

    def ready_at(self, now: float, nbytes: int, objects: int = 1) -> float:
        """The earliest time :meth:`try_take` would accept this message (``now`` if it would)."""
        self._refill(now)
        wait = 0.0
        if self.bps:
            need = min(nbytes, self.bps / 8 * BURST_SECONDS) - self.byte_tokens
            if need > 0:
                wait = max(wait, need * 8 / self.bps)
        if self.ops:
            need = min(objects, self.ops * BURST_SECONDS) - self.object_tokens
            if need > 0:
                wait = max(wait, need / self.ops)
        return now + wait
