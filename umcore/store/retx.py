"""The Store instance's retransmission-request queue and its rate limit.

Theory of operation
-------------------
``retransmission-request-processing-rate`` (requests per second, default 262144) bounds how
many UME_RXREQs one Store instance services, across all its topics (persistence-store.md 1.7,
trap 16).  Requests wait in one FIFO queue of four times the rate (UM: "the retransmission queue
is set at 4 times the size of retransmission-request-processing-rate"); a request arriving at a
full queue is dropped and counted, which is normal under load: the receiver asks again after
``retransmit_request_interval``.  Servicing takes tokens from a bucket refilled at the rate and
holding at most one second's worth, so a burst after a quiet second is serviced at once and a
sustained load at the rate.  Rate 0 services nothing (every request is dropped and counted).

A request equal (by ``key``) to one still queued is not queued twice: a receiver re-requests
what it has not received every ``retransmit_request_interval``, and under load its repeats
would otherwise fill the queue with copies and starve the rest (counted in ``duplicates``,
and in ``received``).

Counters, as the web monitor names them: ``received``, ``serviced``, ``dropped``.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Hashable
from typing import Generic, TypeVar

__all__ = ["QUEUE_FACTOR", "RetxQueue"]

# UM's queue size: four times the processing rate.
QUEUE_FACTOR = 4

_T = TypeVar("_T")
# Float slack when the refill lands exactly on a whole token (next_time() promised one).
_EPSILON = 1e-9


class RetxQueue(Generic[_T]):
    """A bounded FIFO of requests drained by a token bucket (see the module docstring)."""

    __slots__ = (
        "_key",
        "_keys",
        "_queue",
        "capacity",
        "dropped",
        "duplicates",
        "rate",
        "received",
        "serviced",
        "tokens",
        "updated",
    )

    def __init__(self, rate: int, now: float, key: Callable[[_T], Hashable] | None = None) -> None:
        self.rate = max(0, rate)
        self.capacity = QUEUE_FACTOR * self.rate
        self.tokens = float(self.rate)
        self.updated = now
        self._queue: deque[_T] = deque()
        self._key = key
        self._keys: set[Hashable] = set()
        self.duplicates = 0
        self.received = 0
        self.serviced = 0
        self.dropped = 0

    def __len__(self) -> int:
        return len(self._queue)

    def offer(self, item: _T) -> bool:
        """Queue ``item``; False (counted as dropped) when the queue is full."""
        self.received += 1
        if self._key is not None:
            k = self._key(item)
            if k in self._keys:
                self.duplicates += 1
                return True
        if len(self._queue) >= self.capacity:
            self.dropped += 1
            return False
        self._queue.append(item)
        if self._key is not None:
            self._keys.add(k)
        return True

    def _refill(self, now: float) -> None:
        if now > self.updated:
            self.tokens = min(float(self.rate), self.tokens + (now - self.updated) * self.rate)
            self.updated = now

    def take(self, now: float) -> list[_T]:
        """The requests the bucket lets through at ``now``, oldest first."""
        self._refill(now)
        n = min(int(self.tokens + _EPSILON), len(self._queue))
        if n <= 0:
            return []
        self.tokens -= n
        self.serviced += n
        q = self._queue
        out = [q.popleft() for _ in range(n)]
        if self._key is not None:
            self._keys.difference_update(map(self._key, out))
        return out

    def next_time(self) -> float | None:
        """When the next queued request may be serviced (None: nothing queued)."""
        if not self._queue or not self.rate:
            return None
        if self.tokens >= 1.0:
            return self.updated
        return self.updated + (1.0 - self.tokens) / self.rate
