"""The interest table of one portal: which topics and patterns receivers on its side want.

Theory of operation
-------------------
Routing through a DRO is interest based (notes A4).  Each portal keeps two kinds of entry:

* **local** interest, from receivers in the portal's own TRD: learned from their topic queries
  (TQRs), wildcard queries (PCRE or REGEX patterns) and the answers to the portal's use queries
  (or, where the TRD uses the SRS, from what the SRS reports).  Each entry follows the state
  machine :data:`LOCAL_TRANSITIONS`: ACTIVE while refreshed; once ``periodic-interval``
  (300000 ms) passes without a refresh it goes QUERYING and asks for a use query; the query's
  ``timeout`` (3000 ms) starts when the query is actually sent (rate limits may delay it); after
  ``max`` (5) unanswered queries the entry is GONE.  Any TQR or use-query response for it brings
  it back to ACTIVE (autonomous TQRs refresh interest and suppress use queries).
* **remote** interest, from other DROs' interest messages (TNWG interest records, each tagged
  with the domain id of the receivers behind it) heard in the portal's TRD, or from a peer
  portal.  A remote entry lives until a record with the CANCEL flag, or until ``timeout``
  (300000 ms) passes without a refresh; the check runs every ``check-interval`` (90000 ms) and
  removes at most ``max-topics`` / ``max-patterns`` (100) entries per check, as UM's
  ``<remote-topic>``/``<remote-pattern>`` say.

* **held** interest, from a TRD resolved by the SRS: the SRS tells a DRO which topics and
  patterns its receivers want (receiver info / receiver delete records), so such interest is
  present until the SRS withdraws it and neither ages nor needs use queries
  (:meth:`PortalInterest.hold`).  A key is wanted locally while it is local or held.
  Another DRO's interest crossing such a TRD is **held remote** interest
  (:meth:`PortalInterest.hold_remote`): the SRS relays that DRO's remote-interest records with
  the domain id of the receivers behind it, and the entry keeps that domain (not the TRD's) and
  lives until the SRS ends it.  A pair is wanted while it is remote or held remote.

The table reports what changed as :class:`InterestChange` values (key, origin domain, added or
removed): the core only needs the set of (key, domain) pairs per portal, not why each is there.
Use queries waiting for the rate limiter sit in a bounded queue per class; a query that does
not fit counts as sent and unanswered (``queries_refused``).  Time is a parameter in seconds.
"""

from __future__ import annotations

import heapq
from collections import deque
from dataclasses import dataclass
from enum import Enum

from umcore.config.dro import RemotePattern, RemoteTopic, UseQuery

__all__ = [
    "LOCAL_TRANSITIONS",
    "MAX_INTEREST_ENTRIES",
    "MAX_PENDING_QUERIES",
    "PATTERN_PCRE",
    "PATTERN_REGEX",
    "TOPIC",
    "InterestChange",
    "InterestEvent",
    "InterestKey",
    "LocalState",
    "PortalInterest",
]

# Pattern types, as in TNWG interest records and wildcard TQRs (0 = a plain topic).
TOPIC = 0
PATTERN_PCRE = 1
PATTERN_REGEX = 2

# Entries per portal and kind (local / remote).  A TRD can send TQRs for any number of topics;
# this bounds the memory a flood of random topics can take.  The seed speaks of deployments with
# "more than a million" topics, so the bound is well above that; what it refuses is counted.
MAX_INTEREST_ENTRIES = 4_000_000
# Use queries waiting for the rate limiter, per portal and class: at the default 500 objects/s
# this is over two minutes of queries, well under the 300 s periodic interval that produces them.
MAX_PENDING_QUERIES = 65536


@dataclass(frozen=True, slots=True, order=True)
class InterestKey:
    """A topic (``pattern_type`` 0) or a pattern (1 PCRE, 2 REGEX)."""

    symbol: str
    pattern_type: int = TOPIC

    @property
    def is_pattern(self) -> bool:
        return self.pattern_type != TOPIC


@dataclass(frozen=True, slots=True)
class InterestChange:
    """``key`` wanted by receivers in domain ``domain`` behind ``portal`` (added) or no more."""

    portal: str
    key: InterestKey
    domain: int
    added: bool


class LocalState(Enum):
    ACTIVE = "active"
    QUERYING = "querying"
    GONE = "gone"


class InterestEvent(Enum):
    REFRESH = "refresh"  # a TQR, wildcard TQR or use-query response
    PERIOD_ELAPSED = "period-elapsed"  # periodic-interval without a refresh
    QUERY_UNANSWERED = "query-unanswered"  # a use query timed out, fewer than max so far
    LAST_QUERY_UNANSWERED = "last-query-unanswered"  # the max-th use query timed out


# The one transition table of a local interest entry.
LOCAL_TRANSITIONS: dict[tuple[LocalState, InterestEvent], LocalState] = {
    (LocalState.ACTIVE, InterestEvent.REFRESH): LocalState.ACTIVE,
    (LocalState.ACTIVE, InterestEvent.PERIOD_ELAPSED): LocalState.QUERYING,
    (LocalState.QUERYING, InterestEvent.REFRESH): LocalState.ACTIVE,
    (LocalState.QUERYING, InterestEvent.QUERY_UNANSWERED): LocalState.QUERYING,
    (LocalState.QUERYING, InterestEvent.LAST_QUERY_UNANSWERED): LocalState.GONE,
}


class _Local:
    __slots__ = ("due", "state", "unanswered")

    def __init__(self, due: float) -> None:
        self.state = LocalState.ACTIVE
        self.due = due  # when the next timer event of this entry is due (inf: waiting to send)
        self.unanswered = 0

    def step(self, event: InterestEvent) -> LocalState:
        self.state = LOCAL_TRANSITIONS[(self.state, event)]
        return self.state


_INF = float("inf")


class PortalInterest:
    """Local and remote interest of one portal; see the module docstring."""

    def __init__(
        self,
        portal: str,
        domain_id: int | None,
        *,
        topic_use_query: UseQuery,
        pattern_use_query: UseQuery,
        remote_topic: RemoteTopic,
        remote_pattern: RemotePattern,
        now: float = 0.0,
    ) -> None:
        self.portal = portal
        self.domain_id = domain_id  # None for a peer portal (no local interest there)
        self.use_query = {False: topic_use_query, True: pattern_use_query}
        self.remote_cfg = {
            False: (remote_topic.check_interval, remote_topic.max_topics, remote_topic.timeout),
            True: (
                remote_pattern.check_interval,
                remote_pattern.max_patterns,
                remote_pattern.timeout,
            ),
        }
        self.local: dict[InterestKey, _Local] = {}
        self.held: dict[InterestKey, int] = {}  # SRS-reported receivers per key
        self.remote: dict[tuple[InterestKey, int], float] = {}  # -> last refresh
        self.held_remote: dict[tuple[InterestKey, int], int] = {}  # SRS-relayed, per holder
        self._heap: list[tuple[float, int, InterestKey]] = []
        self._seq = 0
        self.next_check = {
            False: now + remote_topic.check_interval / 1000,
            True: now + remote_pattern.check_interval / 1000,
        }
        #: Use queries to send, per class (False = topics, True = patterns).
        self.pending: dict[bool, deque[InterestKey]] = {False: deque(), True: deque()}
        self.queries_refused = 0
        self.entries_refused = 0
        self.use_queries_sent = 0

    # --- inputs ----------------------------------------------------------------------------

    def refresh_local(self, key: InterestKey, now: float) -> list[InterestChange]:
        """A TQR, wildcard TQR or use-query response for ``key`` from this portal's TRD."""
        if self.domain_id is None:
            return []
        period = self.use_query[key.is_pattern].periodic_interval / 1000
        entry = self.local.get(key)
        if entry is None:
            if len(self.local) >= MAX_INTEREST_ENTRIES:
                self.entries_refused += 1
                return []
            self.local[key] = entry = _Local(now + period)
            self._push(entry.due, key)
            if key in self.held:
                return []
            return [InterestChange(self.portal, key, self.domain_id, True)]
        entry.step(InterestEvent.REFRESH)
        entry.unanswered = 0
        entry.due = now + period
        self._push(entry.due, key)
        return []

    def hold(self, key: InterestKey, present: bool) -> list[InterestChange]:
        """The SRS reports a receiver for ``key`` in this TRD (``present``) or its deletion."""
        if self.domain_id is None:
            return []
        count = self.held.get(key, 0)
        if present:
            if count == 0 and len(self.held) >= MAX_INTEREST_ENTRIES:
                self.entries_refused += 1
                return []
            self.held[key] = count + 1
            if count or key in self.local:
                return []
            return [InterestChange(self.portal, key, self.domain_id, True)]
        if count == 0:
            return []
        if count > 1:
            self.held[key] = count - 1
            return []
        del self.held[key]
        if key in self.local:
            return []
        return [InterestChange(self.portal, key, self.domain_id, False)]

    def refresh_remote(
        self, key: InterestKey, domain: int, now: float, *, cancel: bool = False
    ) -> list[InterestChange]:
        """An interest record (another DRO's, or from a peer) for ``key`` on behalf of the
        receivers in ``domain``; ``cancel`` withdraws it."""
        rk = (key, domain)
        if cancel:
            if self.remote.pop(rk, None) is None or rk in self.held_remote:
                return []
            return [InterestChange(self.portal, key, domain, False)]
        if rk in self.remote:
            self.remote[rk] = now
            return []
        if len(self.remote) >= MAX_INTEREST_ENTRIES:
            self.entries_refused += 1
            return []
        self.remote[rk] = now
        if rk in self.held_remote:
            return []
        return [InterestChange(self.portal, key, domain, True)]

    def hold_remote(self, key: InterestKey, domain: int, present: bool) -> list[InterestChange]:
        """The SRS relays another DRO's remote-interest record for ``key`` on behalf of the
        receivers in ``domain`` (``present``), or its end: held until ended, no ageing."""
        rk = (key, domain)
        count = self.held_remote.get(rk, 0)
        if present:
            if count == 0 and len(self.held_remote) >= MAX_INTEREST_ENTRIES:
                self.entries_refused += 1
                return []
            self.held_remote[rk] = count + 1
            if count or rk in self.remote:
                return []
            return [InterestChange(self.portal, key, domain, True)]
        if count == 0:
            return []
        if count > 1:
            self.held_remote[rk] = count - 1
            return []
        del self.held_remote[rk]
        if rk in self.remote:
            return []
        return [InterestChange(self.portal, key, domain, False)]

    def query_sent(self, key: InterestKey, now: float) -> None:
        """The core sent the use query for ``key``: its timeout starts now."""
        entry = self.local.get(key)
        if entry is not None and entry.state is LocalState.QUERYING:
            entry.due = now + self.use_query[key.is_pattern].timeout / 1000
            self._push(entry.due, key)
            self.use_queries_sent += 1

    def clear(self) -> list[InterestChange]:
        """The portal went down: every entry is gone."""
        mine = set(self.local) | set(self.held)
        out = [InterestChange(self.portal, k, self.domain_id or 0, False) for k in sorted(mine)]
        theirs = set(self.remote) | set(self.held_remote)
        out += [InterestChange(self.portal, k, d, False) for (k, d) in sorted(theirs)]
        self.local.clear()
        self.held.clear()
        self.remote.clear()
        self.held_remote.clear()
        self._heap.clear()
        for q in self.pending.values():
            q.clear()
        return out

    # --- views ------------------------------------------------------------------------------

    def pairs(self) -> set[tuple[InterestKey, int]]:
        """Every (key, domain) wanted behind this portal."""
        out = set(self.remote) | set(self.held_remote)
        if self.domain_id is not None:
            out.update((k, self.domain_id) for k in self.local)
            out.update((k, self.domain_id) for k in self.held)
        return out

    def local_state(self, key: InterestKey) -> LocalState | None:
        entry = self.local.get(key)
        return None if entry is None else entry.state

    # --- time -------------------------------------------------------------------------------

    def _push(self, due: float, key: InterestKey) -> None:
        if due < _INF:
            self._seq += 1
            heapq.heappush(self._heap, (due, self._seq, key))

    def next_timer(self) -> float | None:
        while self._heap:
            due, _, key = self._heap[0]
            entry = self.local.get(key)
            if entry is not None and entry.due == due:
                break
            heapq.heappop(self._heap)
        times = [self.next_check[False], self.next_check[True]]
        if self._heap:
            times.append(self._heap[0][0])
        return min(times)

    def handle_timer(self, now: float) -> list[InterestChange]:
        out: list[InterestChange] = []
        while self._heap and self._heap[0][0] <= now:
            due, _, key = heapq.heappop(self._heap)
            entry = self.local.get(key)
            if entry is None or entry.due != due:
                continue
            self._local_timeout(key, entry, now, out)
        for is_pattern in (False, True):
            if now >= self.next_check[is_pattern]:
                check, max_per_check, timeout = self.remote_cfg[is_pattern]
                self.next_check[is_pattern] = now + check / 1000
                self._age_remote(is_pattern, now - timeout / 1000, max_per_check, out)
        return out

    def _local_timeout(
        self, key: InterestKey, entry: _Local, now: float, out: list[InterestChange]
    ) -> None:
        cfg = self.use_query[key.is_pattern]
        if entry.state is LocalState.ACTIVE:
            entry.step(InterestEvent.PERIOD_ELAPSED)
        else:
            entry.unanswered += 1
            last = entry.unanswered >= cfg.max
            event = InterestEvent.LAST_QUERY_UNANSWERED if last else InterestEvent.QUERY_UNANSWERED
            if entry.step(event) is LocalState.GONE:
                del self.local[key]
                assert self.domain_id is not None
                if key not in self.held:
                    out.append(InterestChange(self.portal, key, self.domain_id, False))
                return
        pending = self.pending[key.is_pattern]
        if len(pending) >= MAX_PENDING_QUERIES:
            # could not even queue the query: it counts as sent and unanswered
            self.queries_refused += 1
            entry.due = now + cfg.timeout / 1000
            self._push(entry.due, key)
            return
        pending.append(key)
        entry.due = _INF  # the timeout starts when the query is sent (query_sent)

    def _age_remote(
        self, is_pattern: bool, stale_before: float, limit: int, out: list[InterestChange]
    ) -> None:
        removed = 0
        for rk, refreshed in list(self.remote.items()):
            if removed >= limit:
                break
            if rk[0].is_pattern == is_pattern and refreshed < stale_before:
                del self.remote[rk]
                if rk not in self.held_remote:
                    out.append(InterestChange(self.portal, rk[0], rk[1], False))
                removed += 1
