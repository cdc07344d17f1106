"""Sans-IO context name resolution: UM's "Store (context) name resolution" (seed 003 8.1.7).

Theory of operation
-------------------
A Store configured with a ``context-name`` makes its name known on the topic resolution (TR)
channel; a source configured with ``ume_store_name NAME`` finds the Store's
``DomainID:IP:port`` by asking for the name.  :class:`ContextNames` is the table one context
keeps for that; the context's :class:`~umcore.resolver.core.TopicResolver` owns it, feeds it
the context-info records it hears and sends the records it produces (each one LBMR extended
datagram, type 0x03 "context info", :class:`~umcore.wire.lbmr_ext.ContextInfo`):

- **own names** (:meth:`ContextNames.advertise`): name -> (domain, ip, port).  An
  advertisement (flags IP | INSTANCE | NAME) goes out at once, and again immediately whenever
  a query for that name is heard.  The ip/port are the named service's (a Store's listener),
  not the context's request port.
- **queries** (:meth:`ContextNames.query`, reference counted): the first query (flags QUERY |
  INSTANCE | NAME) at once, the next after ``resolver_context_name_query_minimum_interval``
  (100 ms), the interval doubling up to ``..._maximum_interval`` (1000 ms), for
  ``resolver_context_name_query_duration`` (0 = until resolved): 0, 0.1, 0.3, 0.7, 1.5, 2.5,
  3.5 ... s (a :class:`~umcore.resolver.schedule.PhaseSchedule` with no sustaining phase).
  Either interval 0 disables the queries (the name can still resolve from an unsolicited
  advertisement).  Each query is a small machine (:class:`QueryState`, one transition table
  :data:`QUERY_TRANSITIONS`): QUERYING -> RESOLVED on an advertisement, -> GAVE_UP when the
  duration ran out, RESOLVED -> QUERYING when the name expired.
- **resolved cache**: every advertisement heard (answers to other contexts' queries and
  Stores' start-up advertisements too, so a later query may resolve at once), bounded by
  :data:`MAX_NAMES`.  An entry not heard of for ``resolver_context_name_activity_timeout``
  (0 = never) expires; a name still wanted is queried again (the Store answers, so a live
  Store costs one query and one answer per timeout).  Names learned from an SRS
  (:meth:`ContextNames.receive_srs_info`) do not expire: the SRS ends them with a CNER.

Events (:meth:`ContextNames.take_events`; only for names this context wants, except
:class:`OwnNameElsewhere`): :class:`NameResolved`, :class:`NameChanged` (a resolved name's
address changed: UM logs it as information; the newest advertisement wins),
:class:`DuplicateName` (a second context instance advertises a wanted name: UM's warning; a
restarted Store is a new instance too and is reported once), :class:`NameExpired`,
:class:`NameQueryGaveUp`, and :class:`OwnNameElsewhere` (another context advertises one of our
own names: the advertiser's warning).  Duplicates are reported once per (name, instance).

A context hears its own multicast datagrams: records carrying our own context instance are
ignored.  The context-info record has no domain field: names learned over UDP TR get domain 0
(UM's domain ids come from DROs, which this client does not implement); over the SRS the CNIR's
domain id is kept.  Garbage never raises out of the receive methods: a record that cannot be a
name query or advertisement is counted and dropped.
"""

from __future__ import annotations

import enum
import re
from dataclasses import dataclass

from umcore.config.options import OptionReader
from umcore.errors import LocalProtocolError, UMError
from umcore.events import CoreEvent
from umcore.resolver.schedule import PhaseSchedule, PhaseTimings
from umcore.wire.lbmr_base import ip_bytes
from umcore.wire.lbmr_ext import (
    CTXINFO_FLAG_INSTANCE,
    CTXINFO_FLAG_IP,
    CTXINFO_FLAG_PROXY,
    CTXINFO_FLAG_QUERY,
    CTXINFO_FLAG_TNWG_RCV,
    CTXINFO_FLAG_TNWG_SRC,
    ContextInfo,
)

__all__ = [
    "MAX_NAMES",
    "MAX_NAME_LEN",
    "QUERY_TRANSITIONS",
    "ContextName",
    "ContextNames",
    "DuplicateName",
    "NameChanged",
    "NameEvent",
    "NameExpired",
    "NameQueryGaveUp",
    "NameResolved",
    "NameRow",
    "NameStats",
    "NameTimings",
    "OwnNameElsewhere",
    "QueryInput",
    "QueryState",
    "check_name",
]

# UM's context names: at most 128 characters of [A-Za-z0-9_-] (lbm.h; Store option
# context-name).  The wire could carry 234 bytes; we advertise and query only valid names.
MAX_NAME_LEN = 128
_NAME = re.compile(r"[A-Za-z0-9_-]{1,128}")
# Names kept in the resolved cache: every advertisement on the TR channel is cached, so a busy
# channel must not grow it without bound; names this context wants are always kept.
MAX_NAMES = 10_000
# Own names one context advertises (a Store process runs a handful of Stores).
MAX_OWN_NAMES = 1_000
# Context instances remembered per name to report each duplicate once; the oldest is
# forgotten beyond this (it may then be reported again).
MAX_INSTANCES_PER_NAME = 16
# Events waiting for take_events(): the owner drains after every call; counted beyond.
MAX_EVENTS = 10_000
# Records waiting for take_records(): likewise.
MAX_RECORDS = 10_000
# A record from a DRO portal about itself, not a name advertisement or query.
_NOT_A_NAME = CTXINFO_FLAG_TNWG_SRC | CTXINFO_FLAG_TNWG_RCV | CTXINFO_FLAG_PROXY
_NO_INSTANCE = bytes(8)


def check_name(name: str) -> str:
    """``name`` if it is a valid context name, else :class:`~umcore.errors.UMError`."""
    if not isinstance(name, str) or _NAME.fullmatch(name) is None:
        raise UMError(
            f"context name {name!r}: 1..{MAX_NAME_LEN} characters of A-Z, a-z, 0-9, '_', '-'"
        )
    return name


@dataclass(frozen=True, slots=True)
class ContextName:
    """A named context's address: ``DomainID:IP:port`` (and the instance that advertised it;
    all zero when unknown)."""

    name: str
    domain_id: int
    ip: str
    port: int
    instance: bytes = _NO_INSTANCE

    @property
    def address(self) -> tuple[int, str, int]:
        return (self.domain_id, self.ip, self.port)

    def __str__(self) -> str:
        return f"{self.name}={self.domain_id}:{self.ip}:{self.port}"


class NameTimings:
    """The context-name options, in seconds."""

    __slots__ = ("activity_timeout", "query")

    def __init__(
        self,
        min_interval: float = 0.1,
        max_interval: float = 1.0,
        duration: float = 0.0,
        activity_timeout: float = 60.0,
    ) -> None:
        #: Query schedule: an initial phase only (duration 0 = forever), never sustaining.
        self.query = PhaseTimings(min_interval, max_interval, duration, 0, 0)
        self.activity_timeout = activity_timeout

    @classmethod
    def from_options(cls, o: OptionReader) -> NameTimings:
        """From a context's ``resolver_context_name_*`` options."""
        return cls(
            o.seconds("resolver_context_name_query_minimum_interval"),
            o.seconds("resolver_context_name_query_maximum_interval"),
            o.seconds("resolver_context_name_query_duration"),
            o.seconds("resolver_context_name_activity_timeout"),
        )


# ------------------------------------------------------------------------------ events
@dataclass(frozen=True, slots=True)
class NameEvent(CoreEvent):
    """Base of the context-name events."""


@dataclass(frozen=True, slots=True)
class NameResolved(NameEvent):
    """A wanted name resolved (first time, or again after it expired)."""

    entry: ContextName


@dataclass(frozen=True, slots=True)
class NameChanged(NameEvent):
    """A resolved name's address changed (UM: an informational log message)."""

    old: ContextName
    new: ContextName


@dataclass(frozen=True, slots=True)
class DuplicateName(NameEvent):
    """Another context instance advertises a wanted name (UM: a warning)."""

    current: ContextName
    other: ContextName


@dataclass(frozen=True, slots=True)
class NameExpired(NameEvent):
    """A wanted name became unresolved (``reason``); it is being queried again."""

    entry: ContextName
    reason: str


@dataclass(frozen=True, slots=True)
class NameQueryGaveUp(NameEvent):
    """``resolver_context_name_query_duration`` ran out before the name resolved."""

    name: str


@dataclass(frozen=True, slots=True)
class OwnNameElsewhere(NameEvent):
    """Another context advertises one of this context's own names (UM: a warning)."""

    mine: ContextName
    other: ContextName


# ------------------------------------------------------------------------------ queries
class QueryState(enum.Enum):
    """Where one wanted name is."""

    QUERYING = "querying"  # schedule running (or disabled by interval 0), not resolved
    RESOLVED = "resolved"  # an advertisement answered; no more queries
    GAVE_UP = "gave up"  # the query duration ran out unresolved


class QueryInput(enum.Enum):
    """What moves a query (:data:`QUERY_TRANSITIONS`)."""

    ADVERTISED = "advertised"
    EXPIRED = "expired"
    DURATION_OVER = "duration over"


#: (state, input) -> next state; an input not listed leaves the state as it is.
QUERY_TRANSITIONS: dict[tuple[QueryState, QueryInput], QueryState] = {
    (QueryState.QUERYING, QueryInput.ADVERTISED): QueryState.RESOLVED,
    (QueryState.QUERYING, QueryInput.DURATION_OVER): QueryState.GAVE_UP,
    (QueryState.GAVE_UP, QueryInput.ADVERTISED): QueryState.RESOLVED,
    (QueryState.RESOLVED, QueryInput.EXPIRED): QueryState.QUERYING,
}


class _Query:
    __slots__ = ("count", "give_up_at", "schedule", "sent", "state")

    def __init__(self, timings: PhaseTimings, now: float) -> None:
        self.state = QueryState.QUERYING
        self.count = 1
        self.sent = 0
        self.schedule: PhaseSchedule
        self.give_up_at: float | None
        self.restart(timings, now)

    def restart(self, timings: PhaseTimings, now: float) -> None:
        """Query from ``now`` on: a fresh schedule, and its end when the duration is set and
        queries are enabled."""
        self.schedule = PhaseSchedule(timings, now)
        on = self.schedule.next_due is not None
        self.give_up_at = (
            now + timings.initial_duration if on and timings.initial_duration else None
        )

    def move(self, what: QueryInput) -> bool:
        nxt = QUERY_TRANSITIONS.get((self.state, what))
        if nxt is None:
            return False
        self.state = nxt
        return True


class _Known:
    __slots__ = ("entry", "heard", "instances", "srs")

    def __init__(self, entry: ContextName, heard: float, srs: bool) -> None:
        self.entry = entry
        self.heard = heard
        self.srs = srs
        self.instances: list[bytes] = [] if entry.instance == _NO_INSTANCE else [entry.instance]


@dataclass(frozen=True, slots=True)
class NameRow:
    """One line of :meth:`ContextNames.table` (monitoring): ``role`` is "advertised",
    "querying", "resolved", "gave up" or "cached"; ``entry`` the address when known."""

    name: str
    role: str
    entry: ContextName | None
    queries_sent: int


class NameStats:
    """Counters of the context-name table."""

    __slots__ = (
        "adverts_received",
        "adverts_sent",
        "events_refused",
        "names_refused",
        "queries_received",
        "queries_sent",
        "records_ignored",
        "records_refused",
    )

    def __init__(self) -> None:
        self.adverts_sent = 0
        self.queries_sent = 0
        self.adverts_received = 0
        self.queries_received = 0
        self.records_ignored = 0  # without a name, DRO portal records, adverts without IP
        self.names_refused = 0  # cache full (MAX_NAMES)
        self.events_refused = 0  # MAX_EVENTS
        self.records_refused = 0  # MAX_RECORDS


class ContextNames:
    """One context's context-name table (see the module docstring)."""

    def __init__(
        self, timings: NameTimings | None = None, *, instance: bytes = _NO_INSTANCE
    ) -> None:
        self.timings = timings or NameTimings()
        #: This context's instance (ctxinst): sent in every record, echoes of it ignored.
        self.instance = instance
        self.stats = NameStats()
        self._own: dict[str, ContextName] = {}
        self._queries: dict[str, _Query] = {}
        self._known: dict[str, _Known] = {}
        self._elsewhere: dict[str, list[bytes]] = {}  # own name -> other instances reported
        self._records: list[ContextInfo] = []
        self._events: list[NameEvent] = []

    # ----------------------------------------------------------------- own names
    def advertise(self, name: str, ip: str, port: int, *, domain_id: int = 0) -> ContextName:
        """Advertise ``name`` at ``domain_id:ip:port`` (replaces an earlier address of it);
        the advertisement goes out at once.  UMError for an invalid name or too many names."""
        check_name(name)
        if not 0 < port <= 0xFFFF or not 0 <= domain_id <= 0xFFFFFFFF:
            raise UMError(f"context name {name}: port {port} or domain id {domain_id} out of range")
        try:
            ip_bytes(ip)
        except LocalProtocolError as exc:
            raise UMError(f"context name {name}: {exc}") from None
        if name not in self._own and len(self._own) >= MAX_OWN_NAMES:
            raise UMError(f"a context advertises at most {MAX_OWN_NAMES} context names")
        entry = ContextName(name, domain_id, ip, port, self.instance)
        self._own[name] = entry
        self._advert(entry)
        return entry

    def withdraw(self, name: str) -> bool:
        """Stop advertising ``name`` (UDP TR has no withdrawal record: it expires at the
        others).  False if it was not advertised."""
        self._elsewhere.pop(name, None)
        return self._own.pop(name, None) is not None

    def own(self) -> list[ContextName]:
        return list(self._own.values())

    # ----------------------------------------------------------------- queries
    def query(self, name: str, now: float) -> ContextName | None:
        """Want ``name`` resolved (reference counted); returns its address if already known,
        else starts the query schedule.  UMError for an invalid name."""
        check_name(name)
        q = self._queries.get(name)
        known = self._known.get(name)
        if q is not None:
            q.count += 1
            return known.entry if known is not None else None
        q = self._queries[name] = _Query(self.timings.query, now)
        if known is not None:
            q.move(QueryInput.ADVERTISED)
            q.schedule.stop()
            return known.entry
        return None

    def cancel(self, name: str) -> None:
        """One fewer want of ``name``; its queries stop with the last."""
        q = self._queries.get(name)
        if q is None:
            return
        q.count -= 1
        if q.count <= 0:
            del self._queries[name]

    def wanted(self) -> list[str]:
        return list(self._queries)

    def resolved(self, name: str) -> ContextName | None:
        """The address ``name`` resolves to now, if known."""
        k = self._known.get(name)
        return None if k is None else k.entry

    def query_state(self, name: str) -> QueryState | None:
        q = self._queries.get(name)
        return None if q is None else q.state

    def table(self) -> list[NameRow]:
        """Every name this context advertises, queries or has cached."""
        rows = [NameRow(n, "advertised", e, 0) for n, e in self._own.items()]
        for n, q in self._queries.items():
            rows.append(NameRow(n, q.state.value, self.resolved(n), q.sent))
        for n, k in self._known.items():
            if n not in self._queries:
                rows.append(NameRow(n, "cached", k.entry, 0))
        return rows

    # ----------------------------------------------------------------- input
    def receive_record(self, rec: ContextInfo, now: float) -> None:
        """A context-info record heard on the TR channel (our own echoes included)."""
        name = rec.name
        own_echo = rec.instance == self.instance and self.instance != _NO_INSTANCE
        if name is None or rec.flags & _NOT_A_NAME or own_echo:
            self.stats.records_ignored += 1
            return
        if rec.flags & CTXINFO_FLAG_QUERY:
            self.stats.queries_received += 1
            mine = self._own.get(name)
            if mine is not None:
                self._advert(mine)
            return
        if not rec.flags & CTXINFO_FLAG_IP:
            self.stats.records_ignored += 1
            return
        self.stats.adverts_received += 1
        inst = rec.instance if rec.flags & CTXINFO_FLAG_INSTANCE else _NO_INSTANCE
        self._learn(ContextName(name, 0, rec.ip, rec.port, inst), now, srs=False)

    def receive_srs_info(self, entry: ContextName, now: float) -> None:
        """A CNIR from an SRS: ``entry`` advertised there."""
        if entry.instance != _NO_INSTANCE and entry.instance == self.instance:
            return
        self._learn(entry, now, srs=True)

    def receive_srs_end(self, entry: ContextName, now: float) -> None:
        """A CNER from an SRS: the named context went away."""
        k = self._known.get(entry.name)
        if k is None or not k.srs or k.entry.address != entry.address:
            return
        self._expire(entry.name, k, now, "its SRS record ended")

    def _learn(self, entry: ContextName, now: float, *, srs: bool) -> None:
        name = entry.name
        mine = self._own.get(name)
        if mine is not None:
            seen = self._elsewhere.setdefault(name, [])
            if entry.instance not in seen:
                _remember(seen, entry.instance)
                self._event(OwnNameElsewhere(mine, entry))
        q = self._queries.get(name)
        k = self._known.get(name)
        if k is None:
            if q is None and len(self._known) >= MAX_NAMES:
                self.stats.names_refused += 1
                return
            self._known[name] = _Known(entry, now, srs)
            if q is not None and q.move(QueryInput.ADVERTISED):
                q.schedule.stop()
                self._event(NameResolved(entry))
            return
        k.heard = now
        k.srs = srs
        old = k.entry
        inst = entry.instance
        if inst != _NO_INSTANCE and inst not in k.instances:
            if k.instances and q is not None:
                self._event(DuplicateName(old, entry))
            _remember(k.instances, inst)
        k.entry = entry
        if q is not None and q.move(QueryInput.ADVERTISED):
            q.schedule.stop()
            self._event(NameResolved(entry))
        elif old.address != entry.address and q is not None:
            self._event(NameChanged(old, entry))

    def _expire(self, name: str, k: _Known, now: float, reason: str) -> None:
        del self._known[name]
        q = self._queries.get(name)
        if q is not None and q.move(QueryInput.EXPIRED):
            q.restart(self.timings.query, now)
            self._event(NameExpired(k.entry, reason))

    # ----------------------------------------------------------------- timers and output
    def handle_timer(self, now: float) -> None:
        """Send the queries due; expire names not heard of for the activity timeout."""
        for name, q in self._queries.items():
            sched = q.schedule
            if sched.due(now):
                sched.fire(now)
                q.sent += 1
                self._query(name)
            end = q.give_up_at
            if end is not None and now + 1e-9 >= end and q.state is QueryState.QUERYING:
                q.move(QueryInput.DURATION_OVER)
                q.schedule.stop()
                self._event(NameQueryGaveUp(name))
        timeout = self.timings.activity_timeout
        if timeout > 0:
            for name, k in list(self._known.items()):
                if not k.srs and now - k.heard >= timeout - 1e-9:
                    self._expire(name, k, now, f"no advertisement for {timeout:g} s")

    def next_timer(self) -> float | None:
        deadline: float | None = None
        for q in self._queries.values():
            for d in (
                q.schedule.next_due,
                q.give_up_at if q.state is QueryState.QUERYING else None,
            ):
                if d is not None and (deadline is None or d < deadline):
                    deadline = d
        timeout = self.timings.activity_timeout
        if timeout > 0:
            for k in self._known.values():
                if not k.srs:
                    d = k.heard + timeout
                    if deadline is None or d < deadline:
                        deadline = d
        return deadline

    def take_records(self) -> list[ContextInfo]:
        """Context-info records to send now (each one LBMR datagram)."""
        out, self._records = self._records, []
        return out

    def take_events(self) -> list[NameEvent]:
        out, self._events = self._events, []
        return out

    def _advert(self, entry: ContextName) -> None:
        self.stats.adverts_sent += 1
        flags = CTXINFO_FLAG_IP | CTXINFO_FLAG_INSTANCE
        self._record(ContextInfo(flags, entry.port, entry.ip, self.instance, entry.name))

    def _query(self, name: str) -> None:
        self.stats.queries_sent += 1
        flags = CTXINFO_FLAG_QUERY | CTXINFO_FLAG_INSTANCE
        self._record(ContextInfo(flags, 0, "0.0.0.0", self.instance, name))

    def _record(self, rec: ContextInfo) -> None:
        if len(self._records) >= MAX_RECORDS:
            self.stats.records_refused += 1
            return
        self._records.append(rec)

    def _event(self, ev: NameEvent) -> None:
        if len(self._events) >= MAX_EVENTS:
            self.stats.events_refused += 1
            return
        self._events.append(ev)


def _remember(seen: list[bytes], instance: bytes) -> None:
    if len(seen) >= MAX_INSTANCES_PER_NAME:
        del seen[0]
    seen.append(instance)
