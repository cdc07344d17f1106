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

__all__ = [
    "DEFAULT_MAX_LIFETIME",
    "MAX_CLIENTS",
    "MAX_CONNECTIONS",
    "MAX_EVENTS",
    "MAX_INTEREST_PER_CLIENT",
    "MAX_NAMES_PER_CLIENT",
    "MAX_PATTERNS_PER_CLIENT",
    "MAX_QUEUED_RECORDS_PER_CLIENT",
    "MAX_ROUTES_PER_CLIENT",
    "MAX_SOURCES",
    "MAX_SOURCES_PER_CLIENT",
    "PROTOCOL_VERSION",
    "SWEEP_INTERVAL",
    "UNBOUNDED_CREDIT",
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
# Sources in the whole SRS and per client: each costs ~1 KB (record + encoded bytes + index
# entries); one million is ~1 GB, the most one Python process should hold.
MAX_SOURCES = 1_000_000
MAX_SOURCES_PER_CLIENT = 200_000
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
    """The ``<srs>`` settings the core uses (seconds for lifetimes, ms for the back-off and the
    record queue service interval).  ``record_queue_service_interval_ms`` 0 (not allowed in the
    configuration file, whose range is 1..1000) services the queues at the next timer call."""

    __slots__ = (
        "batch_frame_max_datagram_size",
        "batch_frame_max_record_count",
        "context_name_state_lifetime",
        "interest_state_lifetime",
        "local_domain_id",
        "max_clients",
        "max_connections",
        "max_queued_records",
        "max_sources",
        "record_queue_service_interval_ms",
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


class Refused:
    """What the bounds refused, and connections dropped for bad input (cumulative)."""

    __slots__ = (
        "clients",
        "clients_evicted",
        "connections",
        "connections_malformed",
        "connections_timed_out",
        "events",
        "interest",
        "names",
        "patterns",
        "queue_overflow",
        "records_held_back",
        "routes",
        "sources",
    )

    def __init__(self) -> None:
        self.clients = 0  # registrations refused: table full of connected clients
        self.clients_evicted = 0  # inactive clients expired early to admit a new one
        self.connections = 0  # connections refused: MAX_CONNECTIONS
        self.connections_malformed = 0  # closed for undecodable or out-of-order input
        self.connections_timed_out = 0  # closed: silent beyond the SETUP max lifetime
        self.events = 0  # connection events dropped: nobody drained them
        self.interest = 0  # RIRs refused: MAX_INTEREST_PER_CLIENT
        self.names = 0  # CNIR/CNQR refused: MAX_NAMES_PER_CLIENT
        self.patterns = 0  # WIRs refused: MAX_PATTERNS_PER_CLIENT
        self.queue_overflow = 0  # connections dropped: record queue past max_queued_records
        # records a queue service left queued: stream credit / request-stream-max-msg-count
        self.records_held_back = 0
        self.routes = 0  # DIR/RTIR refused: MAX_ROUTES_PER_CLIENT
        self.sources = 0  # SIRs refused: MAX_SOURCES or MAX_SOURCES_PER_CLIENT

    def as_dict(self) -> dict[str, int]:
        return {name: getattr(self, name) for name in self.__slots__}
