"""The source's retention buffer: what late join and OTR are served from.

Theory of operation
-------------------
A source with ``late_join`` 1 keeps the messages it sent in a *retention buffer* (seed 003 10.2;
not the transport's retransmission window).  The buffer grows as messages are sent.  After each
addition the oldest messages are discarded while *both* conditions hold:

- **size**: the buffer's accounted size exceeds ``retransmit_retention_size_threshold`` (bytes;
  0 = the condition always holds), and
- **age**: the oldest message is at least ``retransmit_retention_age_threshold`` old (seconds;
  0 = always holds),

but the newest message is never discarded that way, which is why the defaults (both 0) retain
exactly one message (the seed's "1 message retained max" NOTICE).  Independently,
``retransmit_retention_size_limit`` (bytes) is a hard cap: the oldest messages go whatever their
age while the size exceeds it.  Ages are also checked on :meth:`RetentionBuffer.expire` (the
adapter calls it from its timer via :meth:`next_timer`), so an idle source still ages messages
out once the size condition holds.

Each message is accounted as its payload length plus :data:`PER_MESSAGE_OVERHEAD` ("bytes which
include a small overhead per message", seed L4485; UM's real figure is not published — ours is
the size of our per-entry record, an [inferred] stand-in).

Entries are keyed by topic sequence number; a UM-fragmented message occupies one entry per
fragment (each with its own sqn), so any sqn can be served on its own.  An entry keeps what the
retransmission needs: the payload and the extra LBMC headers the original carried (FRAG,
APPHDR_CHAIN...).

**Persistent sources** (``hold_unreleased``): a message a persistent source sent stays until
its Stores made it stable (seed 002, "source retention"): the thresholds discard only what
:meth:`RetentionBuffer.release_through` released; the hard size limit still applies (UM's
"forced reclaim", counted in ``stats.forced``), so memory stays bounded.
"""

from __future__ import annotations

from collections import deque
from itertools import islice, repeat, starmap
from operator import itemgetter
from typing import Any

__all__ = ["PER_MESSAGE_OVERHEAD", "RetentionBuffer", "RetentionStats"]

# Accounted bytes per retained message on top of its payload (an inferred stand-in for UM's
# unpublished control-structure overhead; roughly what one entry costs us in CPython).
PER_MESSAGE_OVERHEAD = 64

_payload_of = itemgetter(2)  # an entry's payload
# Runs an iterator to its end, keeping nothing (a deque of length 0 takes it C-level).
_drain = deque[object](maxlen=0).extend


class RetentionStats:
    __slots__ = ("added", "discarded_age_size", "discarded_limit", "forced")

    def __init__(self) -> None:
        self.added = 0
        self.forced = 0  # unreleased messages (persistent source) pushed out by the limit
        self.discarded_age_size = 0  # both thresholds passed
        self.discarded_limit = 0  # pushed out by the hard size limit


class RetentionBuffer:
    """Retained messages of one topic source, oldest first (see the module docstring).

    Sequence numbers are expected to be added in increasing (wrapping 32-bit) order; the
    buffer keeps them as an unwrapped run, so lookups are O(1).
    """

    __slots__ = (
        "_entries",
        "_first",
        "_held",
        "age_threshold",
        "floor",
        "hold",
        "size",
        "size_limit",
        "size_threshold",
        "stats",
    )

    def __init__(
        self,
        size_threshold: int = 0,
        size_limit: int = 25165824,
        age_threshold: float = 0.0,
        *,
        hold_unreleased: bool = False,
    ) -> None:
        if size_threshold < 0 or size_limit < 0 or age_threshold < 0:
            raise ValueError("retention thresholds and limit must be >= 0")
        self.size_threshold = size_threshold
        self.size_limit = size_limit
        self.age_threshold = age_threshold
        # (sqn, time added, payload, headers); sqns consecutive from _first.
        self._entries: deque[tuple[int, float, bytes, tuple[Any, ...]]] = deque()
        self._first = 0
        self.size = 0
        self.stats = RetentionStats()
        #: Persistent source: thresholds discard only sqns before :attr:`floor` (None: nothing
        #: released yet).
        self.hold = hold_unreleased
        self.floor: int | None = None
        # The last trim stopped at an oldest entry a persistent source has not released: only
        # the hard limit or a release can discard anything until that entry goes, so an add
        # within the limit skips the trim (the data path's per-message cost).
        self._held = False

    def __len__(self) -> int:
        return len(self._entries)

    @property
    def defaults_retain_one(self) -> bool:
        """True when the settings retain just the newest message (UM logs a NOTICE then)."""
        return self.size_threshold == 0 and self.age_threshold == 0

    def add(self, sqn: int, payload: bytes, now: float, headers: tuple[Any, ...] = ()) -> None:
        """Retain the message just sent as ``sqn`` (with the extra ``headers`` it carried)."""
        entries = self._entries
        if entries and sqn != (entries[-1][0] + 1) & 0xFFFFFFFF:
            # A jump (a source never skips, but be safe): restart the run.
            entries.clear()
            self.size = 0
            self._held = False
        if not entries:
            self._first = sqn
        entries.append((sqn, now, payload, headers))
        size = self.size = self.size + len(payload) + PER_MESSAGE_OVERHEAD
        self.stats.added += 1
        if not self._held or size > self.size_limit:
            self._trim(now)

    def _trim(self, now: float) -> None:
        entries = self._entries
        st = self.stats
        hold = self.hold
        # How many of the oldest entries are released (a persistent source's: those before
        # the floor, counted once instead of asked per entry); all of them otherwise.
        rel = len(entries)
        if hold:
            floor = self.floor
            rel = 0 if floor is None else (floor - self._first) & 0xFFFFFFFF
            if rel >= 0x80000000:
                rel = 0
        size, limit = self.size, self.size_limit
        threshold, age = self.size_threshold, self.age_threshold
        n = len(entries)
        dropped = 0
        if hold and rel > 0 and not threshold and not age and size <= limit and n > 1:
            # A persistent source's release with the default thresholds (0: both conditions
            # hold for every released entry, the limit is not exceeded): the loop below would
            # drop the k oldest; done here C-level (sizes summed, k poplefts), same outcome.
            k = min(rel, n - 1)
            if now >= entries[k - 1][1]:  # (ages: monotonic time, oldest first)
                size -= sum(map(len, map(_payload_of, islice(entries, k))))
                size -= k * PER_MESSAGE_OVERHEAD
                _drain(starmap(entries.popleft, repeat((), k)))
                st.discarded_age_size += k
                n -= k
                rel -= k
                dropped = k
        while n > 1:
            oldest = entries[0]
            if size > limit:
                st.discarded_limit += 1
                if rel <= 0:
                    st.forced += 1
            elif size > threshold and rel > 0 and now - oldest[1] >= age:
                st.discarded_age_size += 1
            else:
                break
            entries.popleft()
            size -= len(oldest[2]) + PER_MESSAGE_OVERHEAD
            n -= 1
            rel -= 1
            dropped += 1
        self.size = size
        if dropped:
            self._first = (self._first + dropped) & 0xFFFFFFFF
        # stopped at an unreleased oldest entry: only a release or the limit moves it (add)
        self._held = hold and n > 1 and rel <= 0

    def release_through(self, sqn: int, now: float) -> None:
        """Persistent source: messages up to ``sqn`` are stable; the thresholds may discard
        them now."""
        nxt = (sqn + 1) & 0xFFFFFFFF
        floor = self.floor
        if floor is None or 0 < ((nxt - floor) & 0xFFFFFFFF) < 0x80000000:
            self.floor = nxt
        self._trim(now)

    def expire(self, now: float) -> None:
        """Apply the age condition again (nothing was added since)."""
        self._trim(now)

    def next_timer(self) -> float | None:
        """When the oldest entry next becomes discardable by age, if the size condition holds."""
        if len(self._entries) > 1 and self.age_threshold > 0 and self.size > self.size_threshold:
            return self._entries[0][1] + self.age_threshold
        return None

    def range(self) -> tuple[int, int] | None:
        """(low, high) sequence numbers held, or None when empty."""
        if not self._entries:
            return None
        return self._first, self._entries[-1][0]

    def get(self, sqn: int) -> tuple[bytes, tuple[Any, ...]] | None:
        """(payload, headers) of ``sqn`` if retained."""
        k = (sqn - self._first) & 0xFFFFFFFF
        if k >= len(self._entries):
            return None
        _, _, payload, headers = self._entries[k]
        return payload, headers

    def __contains__(self, sqn: int) -> bool:
        return ((sqn - self._first) & 0xFFFFFFFF) < len(self._entries)
