"""What the SRS server's parts share: its settings, its bounds, the counters of what the bounds
refused, and its connection events.

Theory of operation
-------------------
The SRS core (:mod:`umcore.srs.server`) is a composition of cohesive parts: the per-connection
sessions (:mod:`umcore.srs.session`), the tables of clients, sources and interest
(:mod:`umcore.srs.registry`), the relay deciding who gets which record
(:mod:`umcore.srs.relay`) and the state lifetimes (:mod:`umcore.srs.lifetimes`).  They all read
one :class:`ServerConfig` and count refusals in one :class:`Refused` (connection events go to
one bounded :class:`~umcore.srs.registry.EventLog`, beside the clients they name); these live
here so that no part imports the composition.
Every limit is a named constant below, with the reason for its value.
"""

from __future__ import annotations

from dataclasses import dataclass

from umcore.events import CoreEvent

__all__ = [
    "DEFAULT_MAX_LIFETIME",
    "FRAME_TIMEOUT",
    "MAX_BUFFERED_BYTES",
    "MAX_CLIENTS",
    "MAX_CONNECTIONS",
    "MAX_EVENTS",
    "MAX_INTEREST_PER_CLIENT",
    "MAX_NAMES_PER_CLIENT",
    "MAX_PATTERNS_PER_CLIENT",
    "MAX_QUEUED_RECORDS_PER_CLIENT",
    "MAX_REFUSAL_ENTRIES",
    "MAX_ROUTES_PER_CLIENT",
    "MAX_SILENCE",
    "MAX_SOURCES",
    "MAX_SOURCES_PER_CLIENT",
    "MAX_SOURCES_PER_HOST",
    "PROTOCOL_VERSION",
    "REGISTRATION_TIMEOUT",
    "SWEEP_INTERVAL",
    "UNBOUNDED_CREDIT",
    "Refusal",
    "RefusalTally",
    "Refused",
    "ServerConfig",
    "SessionKey",
    "SourceKey",
]

PROTOCOL_VERSION = 3  # UM 6.14+: DRO and Store records (DIR, RTIR, CNIR, ...)

# -- bounds -------------------------------------------------------------------------------------
# Open TCP connections (registered or not).  Each costs a socket and a receive buffer of at most
# one frame; 10,000 is far above a TRD's context count (UM suggests 2-3 SRSes for a TRD).
MAX_CONNECTIONS = 10_000
# Registered clients, connected or inactive (awaiting their state lifetimes).  When full, the
# oldest inactive client is expired early to admit a new one; only a table full of *connected*
# clients refuses a registration.
MAX_CLIENTS = 10_000
# Sources in the whole SRS: each costs ~1 KB (record + encoded bytes + index entries); one
# million is ~1 GB, the most one Python process should hold.
MAX_SOURCES = 1_000_000
# Sources per client (one context) and per host (the TCP peer's IP address, whatever the
# registration claims; a host may run many contexts, and inactive contexts awaiting their state
# lifetime count too).  Sized so that a few clients cannot fill the table: a host holds at most
# a fifth of MAX_SOURCES, so it takes five hosts (ten contexts at their quota) to fill it, while
# 100,000 sources is a very large context (a feed handler with one source per instrument).  When
# a quota or the table is full, the longest-inactive client (of that host, or of any host) is
# expired early to make room; only sources of connected clients refuse a new one.
MAX_SOURCES_PER_CLIENT = 100_000
MAX_SOURCES_PER_HOST = 200_000
# Receiver topics and wildcard patterns per client.  Patterns are matched against every new
# topic, so their number bounds the CPU a client can make each SIR cost.
MAX_INTEREST_PER_CLIENT = 200_000
MAX_PATTERNS_PER_CLIENT = 1_000
# DRO routes and Store names per client (a DRO has a handful of portals, a Store one name).
MAX_ROUTES_PER_CLIENT = 256
MAX_NAMES_PER_CLIENT = 64
# Connection events waiting for take_events(); the daemon drains them after every input, so a
# backlog only builds when nobody drains (tests, embedding).
MAX_EVENTS = 10_000
# Time between liveness sweeps of the connections (seconds): max-lifetime checks need no finer
# granularity.
SWEEP_INTERVAL = 1.0
# Max lifetime assumed for a connection before its SETUP says otherwise (seconds).
DEFAULT_MAX_LIFETIME = 60.0
# The longest silence allowed, whatever the client's SETUP asks (its max lifetime is a u32 of
# ms: 49 days).  UM clients were seen asking 90 s (keepalive 30 s), pyum's ask 20 s; 120 s
# keeps both and bounds how long a silent peer holds a connection slot.
MAX_SILENCE = 120.0
# Seconds a connection may stay unregistered: a client sends SETUP and its registration
# request as soon as it connects (one round trip), so 10 s only ends idle or stuck peers.
REGISTRATION_TIMEOUT = 10.0
# Bytes held for incomplete frames, all connections together.  One connection holds at most one
# frame (umcore.wire.srs.MAX_FRAME_SIZE, 1 MiB), and MAX_CONNECTIONS of them could hold 10 GB;
# clients send frames of a few KiB that complete within a read or two, so 64 MiB is room for
# thousands of legitimate partial frames at once.  Past it, the connection whose incomplete frame
# is the oldest is closed (an attacker's half-written frames are older than a client's).
MAX_BUFFERED_BYTES = 64 << 20
# Seconds a frame may take from its first byte to its last: a few KiB (1 MiB at most) take
# milliseconds on any network that carries topic resolution; 10 s ends a trickle that the
# silence check alone (any byte resets it) never would.
FRAME_TIMEOUT = 10.0
# Distinct (kind, client) refusals tallied between two take_refusals() calls; the daemon takes
# them after every input, so this is a safety net, not a working limit.
MAX_REFUSAL_ENTRIES = 1024
# Records queued for one client.  A flood client's stream opening queues every source
# (MAX_SOURCES) at once, plus routes, interest and ends; a queue slot is a reference (8 bytes:
# the records' bytes are shared), so the bound costs at most ~16 MB per client.  A client whose
# queue passes it is not reading: its connection is dropped and it re-synchronises later.
MAX_QUEUED_RECORDS_PER_CLIENT = 2 * MAX_SOURCES
# RSocket request_n: 2^31-1 is "unbounded" (and the largest value the 31-bit field carries).
UNBOUNDED_CREDIT = 0x7FFFFFFF

SourceKey = tuple[bytes, str]  # (otid, topic)
SessionKey = tuple[int, str, int]  # (session_id, client_addr, client_port)


class ServerConfig:
    """The ``<srs>`` settings the core uses (seconds for lifetimes and the pyum timeouts, ms for
    the back-off and the record queue service interval), and the bounds of ``<pyum-limits>``.  ``record_queue_service_interval_ms`` 0 (not allowed in the
    configuration file, whose range is 1..1000) services the queues at the next timer call."""

    __slots__ = (
        "batch_frame_max_datagram_size",
        "batch_frame_max_record_count",
        "context_name_state_lifetime",
        "frame_timeout",
        "interest_state_lifetime",
        "local_domain_id",
        "max_buffered_bytes",
        "max_clients",
        "max_connections",
        "max_queued_records",
        "max_silence",
        "max_sources",
        "max_sources_per_client",
        "max_sources_per_host",
        "record_queue_service_interval_ms",
        "registration_timeout",
        "request_stream_max_msg_count",
        "route_state_lifetime",
        "source_leave_backoff_ms",
        "source_state_lifetime",
    )

    def __init__(
        self,
        *,
        source_state_lifetime: float = 86400,
        interest_state_lifetime: float = 86400,
        route_state_lifetime: float = 30,
        context_name_state_lifetime: float = 86400,
        source_leave_backoff_ms: int = 500,
        batch_frame_max_record_count: int = 50,
        batch_frame_max_datagram_size: int = 8192,
        record_queue_service_interval_ms: int = 10,
        request_stream_max_msg_count: int = 1000,
        local_domain_id: int = 0,
        max_clients: int = MAX_CLIENTS,
        max_connections: int = MAX_CONNECTIONS,
        max_sources: int = MAX_SOURCES,
        max_queued_records: int = MAX_QUEUED_RECORDS_PER_CLIENT,
        max_sources_per_client: int = MAX_SOURCES_PER_CLIENT,
        max_sources_per_host: int = MAX_SOURCES_PER_HOST,
        max_buffered_bytes: int = MAX_BUFFERED_BYTES,
        frame_timeout: float = FRAME_TIMEOUT,
        registration_timeout: float = REGISTRATION_TIMEOUT,
        max_silence: float = MAX_SILENCE,
    ) -> None:
        self.source_state_lifetime = source_state_lifetime
        self.interest_state_lifetime = interest_state_lifetime
        self.route_state_lifetime = route_state_lifetime
        self.context_name_state_lifetime = context_name_state_lifetime
        self.source_leave_backoff_ms = source_leave_backoff_ms
        self.batch_frame_max_record_count = batch_frame_max_record_count
        self.batch_frame_max_datagram_size = batch_frame_max_datagram_size
        self.record_queue_service_interval_ms = max(0, record_queue_service_interval_ms)
        self.request_stream_max_msg_count = max(1, request_stream_max_msg_count)
        self.local_domain_id = local_domain_id
        self.max_clients = max_clients
        self.max_connections = max_connections
        self.max_sources = max_sources
        self.max_queued_records = max_queued_records
        self.max_sources_per_client = max_sources_per_client
        self.max_sources_per_host = max_sources_per_host
        self.max_buffered_bytes = max_buffered_bytes
        self.frame_timeout = frame_timeout
        self.registration_timeout = registration_timeout
        self.max_silence = max_silence


class Refused:
    """What the bounds refused, and connections dropped for bad input (cumulative)."""

    __slots__ = (
        "buffer_evicted",
        "clients",
        "clients_evicted",
        "connections",
        "connections_malformed",
        "connections_timed_out",
        "events",
        "frames_timed_out",
        "interest",
        "names",
        "patterns",
        "queue_overflow",
        "records_held_back",
        "refusals_untallied",
        "registrations_timed_out",
        "routes",
        "sources",
        "sources_client_quota",
        "sources_host_quota",
    )

    def __init__(self) -> None:
        self.clients = 0  # registrations refused: table full of connected clients
        self.clients_evicted = 0  # inactive clients expired early to admit a client or sources
        self.connections = 0  # connections refused: max_connections
        self.connections_malformed = 0  # closed for undecodable or out-of-order input
        self.connections_timed_out = 0  # closed: silent beyond the max lifetime (capped)
        self.events = 0  # connection events dropped: nobody drained them
        self.interest = 0  # RIRs refused: MAX_INTEREST_PER_CLIENT
        self.names = 0  # CNIR/CNQR refused: MAX_NAMES_PER_CLIENT
        self.patterns = 0  # WIRs refused: MAX_PATTERNS_PER_CLIENT
        self.queue_overflow = 0  # connections dropped: record queue past max_queued_records
        # records a queue service left queued: stream credit / request-stream-max-msg-count
        self.records_held_back = 0
        self.routes = 0  # DIR/RTIR refused: MAX_ROUTES_PER_CLIENT
        self.sources = 0  # SIRs refused, all reasons (table full and the two quotas)
        self.sources_client_quota = 0  # of which: max_sources_per_client
        self.sources_host_quota = 0  # of which: max_sources_per_host
        self.buffer_evicted = 0  # connections closed: all buffers together past the bound
        self.frames_timed_out = 0  # connections closed: a frame incomplete past frame_timeout
        self.registrations_timed_out = 0  # connections closed: not registered in time
        self.refusals_untallied = 0  # refusals not itemised for the log: tally full

    def as_dict(self) -> dict[str, int]:
        return {name: getattr(self, name) for name in self.__slots__}


@dataclass(frozen=True, slots=True)
class Refusal(CoreEvent):
    """Refusals of one kind for one peer since the last :meth:`SRSServer.take_refusals`:
    ``kind`` (one of the ``REFUSED_*`` names of :mod:`umcore.srs.server`), ``who`` (the client
    or the peer address), ``count`` and ``detail`` (the last one's reason, naming the bound)."""

    kind: str
    who: str
    count: int
    detail: str


class _Tallied:
    __slots__ = ("count", "detail")

    def __init__(self, detail: str) -> None:
        self.count = 1
        self.detail = detail


class RefusalTally:
    """Refusals between two takes, one entry per (kind, who): a flood of refused records from one
    client is one entry with a count, so the daemon logs it in one line (rate-limited there)."""

    __slots__ = ("entries", "refused")

    def __init__(self, refused: Refused) -> None:
        self.entries: dict[tuple[str, str], _Tallied] = {}
        self.refused = refused

    def add(self, kind: str, who: str, detail: str) -> None:
        entry = self.entries.get((kind, who))
        if entry is not None:
            entry.count += 1
            entry.detail = detail
        elif len(self.entries) >= MAX_REFUSAL_ENTRIES:
            self.refused.refusals_untallied += 1
        else:
            self.entries[(kind, who)] = _Tallied(detail)

    def take(self) -> list[Refusal]:
        if not self.entries:
            return []
        entries, self.entries = self.entries, {}
        return [Refusal(k, w, e.count, e.detail) for (k, w), e in entries.items()]
