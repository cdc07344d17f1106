"""The SRS's tables: registered clients, the sources they advertise and the interest they hold.

Theory of operation
-------------------
A :class:`Client` is a registered context, identified across connections by its *session key*
``(session_id, client_addr, client_port)`` from the registration request; it owns its records
(sources, receiver topics, wildcard patterns, DRO and Store records) with an *active* flag each
(inactive: the client is disconnected and the record awaits its state lifetime).  While it is
connected, ``conn`` is its :class:`~umcore.srs.session.ClientSession`.

:class:`Registry` holds every client and the indexes the relay reads: sources by key (SIR =
source information record, keyed ``(otid, topic)``, OTID = originating transport id) and by
topic, the clients interested in each topic (RIR = receiver information record), the wildcard
patterns (WIR; regular expressions matched with ``re.search``) with their clients, the
flood-mode clients (they get every SIR) and the forward-interest clients (DROs: they get other
clients' interest).  It answers "who is interested in this topic" and keeps the indexes
consistent; it sends nothing.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass

from umcore.events import CoreEvent
from umcore.srs.common import MAX_EVENTS, Refused, SessionKey, SourceKey
from umcore.srs.session import ClientSession
from umcore.srs.stats import ClientErrorStats, ClientStats
from umcore.wire.srs_messages import (
    INTEREST_MODE_FILTER,
    BatchRecord,
    ContextNameInfo,
    DomainInfo,
    RegistrationRequest,
    RouteInfo,
)

__all__ = ["INTEREST_MODE_FORWARD", "Client", "EventLog", "Registry", "SRSEvent", "Source"]

# Interest-mode bit of a registration asking for other clients' interest (DROs).
INTEREST_MODE_FORWARD = 0x02


class Source:
    """One source in the global index: its SIR's bytes (relayed as they came; the decoded
    record is not kept, to save memory), owner and liveness."""

    __slots__ = ("active", "key", "owner", "raw")

    def __init__(self, key: SourceKey, raw: bytes, owner: Client) -> None:
        self.key = key
        self.raw = raw
        self.owner = owner
        self.active = True


class Client:
    """A registered context: its session key, connection (None while inactive) and state."""

    __slots__ = (
        "addr",
        "app_type",
        "client_id",
        "cname_query",
        "conn",
        "domain_id",
        "dr_records",
        "err",
        "forward_interest",
        "held_back",
        "host",
        "host_id",
        "inactive_since",
        "interest",
        "interest_ids",
        "interest_mode",
        "key",
        "lost_at",
        "names",
        "patterns",
        "port",
        "protocol_version",
        "routes",
        "session_id",
        "sources",
        "stats",
    )

    def __init__(self, req: RegistrationRequest, client_id: int, host: str = "") -> None:
        self.key: SessionKey = (req.session_id, req.client_addr, req.client_port)
        # The TCP peer's IP address (what the per-host quota counts by: a registration's
        # client_addr is whatever the client wrote); set again at each registration.
        self.host = host
        self.session_id = req.session_id
        self.addr = req.client_addr
        self.port = req.client_port
        self.host_id = req.host_id
        self.domain_id = req.local_domain_id
        self.client_id = client_id
        self.app_type = req.app_type
        self.protocol_version = req.protocol_version
        self.interest_mode = req.interest_mode
        self.forward_interest = bool(req.interest_mode & INTEREST_MODE_FORWARD)
        self.conn: ClientSession[Client] | None = None
        self.inactive_since: float | None = None
        self.lost_at: float | None = None  # time of the last disconnect (kept on reconnect)
        self.sources: dict[SourceKey, Source] = {}
        # topic/pattern -> active flag
        self.interest: dict[str, bool] = {}
        self.patterns: dict[str, bool] = {}
        # (topic or pattern, is pattern) -> the domain id and context instance of its last RIR
        # / WIR: what the SRS forwards again (a DRO's remote interest names another domain)
        self.interest_ids: dict[tuple[str, bool], tuple[int, bytes]] = {}
        self.routes: dict[bytes, tuple[RouteInfo, bool]] = {}  # raw RTIR -> (record, active)
        self.dr_records: dict[int, tuple[DomainInfo, bool]] = {}  # domain id -> (DIR, active)
        self.names: dict[str, tuple[ContextNameInfo, bool]] = {}  # name -> (CNIR, active)
        self.cname_query: set[str] = set()
        self.held_back = 0  # records a service left queued (credit / max-msg-count bound)
        self.stats = ClientStats()
        self.err = ClientErrorStats()

    def reregister(self, req: RegistrationRequest, client_id: int) -> None:
        """The same context registered again (a reconnect): what it may have changed."""
        self.client_id = client_id
        self.interest_mode = req.interest_mode
        self.forward_interest = bool(req.interest_mode & INTEREST_MODE_FORWARD)
        self.inactive_since = None
        self.app_type = req.app_type
        self.protocol_version = req.protocol_version

    @property
    def filter_mode(self) -> bool:
        return bool(self.interest_mode & INTEREST_MODE_FILTER)

    @property
    def streaming(self) -> bool:
        """Connected with the record stream open: records may be queued for it."""
        return self.conn is not None and self.conn.streaming

    # The connection's stream state, read by tests and the debug pages (empty when inactive).
    @property
    def queue(self) -> list[bytes]:
        return self.conn.queue if self.conn is not None else []

    @property
    def credit(self) -> int:
        """The stream's RSocket credit (UNBOUNDED_CREDIT: no limit; 0 while inactive)."""
        return self.conn.credit if self.conn is not None else 0

    @property
    def paused(self) -> bool:
        return self.conn is not None and self.conn.paused

    @property
    def stream_id(self) -> int:
        return self.conn.stream_id if self.conn is not None else 0

    def has_records(self) -> bool:
        return bool(
            self.sources
            or self.interest
            or self.patterns
            or self.routes
            or self.dr_records
            or self.names
        )

    def describe(self) -> str:
        text = f"client[{self.addr}:{self.port}] sessionID[0x{self.session_id:08x}]"
        return f"{text} from {self.host}" if self.host else text


class Registry:
    """Every client, and the source and interest indexes; see the module docstring."""

    __slots__ = (
        "by_topic",
        "clients",
        "dir_domain",
        "flood",
        "forward",
        "host_sources",
        "inactive_epoch",
        "interest",
        "patterns",
        "sources",
    )

    def __init__(self) -> None:
        self.clients: dict[SessionKey, Client] = {}
        self.sources: dict[SourceKey, Source] = {}
        self.by_topic: dict[str, dict[SourceKey, Source]] = {}
        self.interest: dict[str, set[Client]] = {}  # topic -> clients with an RIR
        self.patterns: dict[str, tuple[re.Pattern[str], set[Client]]] = {}
        self.flood: set[Client] = set()
        self.forward: set[Client] = set()  # forward-interest clients (DROs)
        self.dir_domain: int | None = None  # the DIR domain id of the TRD's DROs
        self.host_sources: dict[str, int] = {}  # host (peer IP) -> sources of its clients
        self.inactive_epoch = 0  # counts clients going inactive (unset_modes)

    # -- clients

    def set_modes(self, client: Client) -> None:
        """Index a (re)registered client by its interest mode."""
        if client.filter_mode:
            self.flood.discard(client)
        else:
            self.flood.add(client)
        if client.forward_interest:
            self.forward.add(client)
        else:
            self.forward.discard(client)

    def unset_modes(self, client: Client) -> None:
        """The client lost its connection (it becomes inactive)."""
        self.inactive_epoch += 1
        self.flood.discard(client)
        self.forward.discard(client)

    def move_host(self, client: Client, host: str) -> None:
        """A client registered again from another address: its sources count for ``host``."""
        if client.host == host:
            return
        n = len(client.sources)
        if n:
            self._count_host(client.host, -n)
            self._count_host(host, n)
        client.host = host

    def _count_host(self, host: str, delta: int) -> None:
        n = self.host_sources.get(host, 0) + delta
        if n > 0:
            self.host_sources[host] = n
        else:
            self.host_sources.pop(host, None)

    def oldest_inactive(self, host: str | None = None) -> Client | None:
        """The client inactive the longest (of ``host`` when given); None if none is."""
        oldest: Client | None = None
        for c in self.clients.values():
            if (
                c.conn is None
                and (host is None or c.host == host)
                and c.inactive_since is not None
                and (oldest is None or c.inactive_since < (oldest.inactive_since or 0.0))
            ):
                oldest = c
        return oldest

    # -- sources

    def add_source(self, src: Source) -> None:
        key = src.key
        self.sources[key] = src
        self.by_topic.setdefault(key[1], {})[key] = src
        src.owner.sources[key] = src
        host = src.owner.host
        self.host_sources[host] = self.host_sources.get(host, 0) + 1

    def remove_source(self, src: Source) -> None:
        key = src.key
        if self.sources.pop(key, None) is not None:
            self._count_host(src.owner.host, -1)
        src.owner.sources.pop(key, None)
        by_topic = self.by_topic.get(key[1])
        if by_topic is not None:
            by_topic.pop(key, None)
            if not by_topic:
                del self.by_topic[key[1]]

    # -- interest

    def add_interest(self, client: Client, topic: str) -> None:
        self.interest.setdefault(topic, set()).add(client)

    def drop_interest(self, client: Client, topic: str) -> None:
        members = self.interest.get(topic)
        if members is not None:
            members.discard(client)
            if not members:
                del self.interest[topic]

    def add_pattern(self, client: Client, pattern: str) -> re.Pattern[str] | None:
        """Index ``client``'s pattern; None when it does not compile."""
        entry = self.patterns.get(pattern)
        if entry is None:
            try:
                entry = (re.compile(pattern), set())
            except (re.error, RecursionError, OverflowError):
                return None
            self.patterns[pattern] = entry
        entry[1].add(client)
        return entry[0]

    def drop_pattern(self, client: Client, pattern: str) -> None:
        entry = self.patterns.get(pattern)
        if entry is not None:
            entry[1].discard(client)
            if not entry[1]:
                del self.patterns[pattern]

    def recipients(self, topic: str, origin: Client | None) -> Iterable[Client]:
        """The clients that get ``topic``'s SIRs: an RIR for it, a matching WIR, flood mode."""
        seen: set[Client] = set(self.interest.get(topic, ()))
        for regex, members in self.patterns.values():
            if members and regex.search(topic) is not None:
                seen.update(members)
        seen.update(self.flood)
        if origin is not None:
            seen.discard(origin)
        return seen

    # -- queries

    def topic_table(self, limit: int) -> tuple[list[tuple[str, int, int]], int]:
        names = self.by_topic.keys() | self.interest.keys()
        rows = []
        for topic in sorted(names)[: max(0, limit)]:
            rows.append(
                (topic, len(self.by_topic.get(topic, ())), len(self.interest.get(topic, ())))
            )
        return rows, len(names)


@dataclass(frozen=True, slots=True, repr=False)
class SRSEvent(CoreEvent):
    """A connection event: ``kind`` is ``UM_CLIENT_CONNECT``, ``UM_CLIENT_DISCONNECT``, or the
    short name of a record received (``SIR``, ``SDR``, ``SLR``, ``RIR``, ``RDR``, ``WIR``,
    ``WDR``, ``RTIR``, ``CNIR``, ``CNQR``); ``client`` is the client concerned; ``record`` the
    record for record events; ``detail`` a free text for the log (reason of a disconnect)."""

    kind: str
    client: Client
    now: float
    record: BatchRecord | None = None
    detail: str = ""

    def __repr__(self) -> str:
        return f"SRSEvent({self.kind}, {self.client.describe()}, {self.detail!r})"


class EventLog:
    """The connection events waiting for ``take_events()``, at most :data:`MAX_EVENTS`.

    Events are kept only while ``keep`` is True (the daemon turns it on when it logs or
    publishes them); the parts test ``keep`` before building a record event."""

    __slots__ = ("events", "keep", "refused")

    def __init__(self, refused: Refused) -> None:
        self.keep = True
        self.events: list[SRSEvent] = []
        self.refused = refused

    def add(
        self,
        kind: str,
        client: Client,
        now: float,
        record: BatchRecord | None = None,
        detail: str = "",
    ) -> None:
        if not self.keep:
            return
        if len(self.events) >= MAX_EVENTS:
            self.refused.events += 1
            return
        self.events.append(SRSEvent(kind, client, now, record, detail))

    def take(self) -> list[SRSEvent]:
        events, self.events = self.events, []
        return events
