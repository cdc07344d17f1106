"""The Stateful Resolver Service as a sans-IO core.

Theory of operation
-------------------
Each UM context (a *client*) opens one TCP connection to the SRS and speaks RSocket on it
(:mod:`umcore.wire.srs`): SETUP, a registration request (REQUEST_RESPONSE, answered with the
registration response carrying the client id), a stream request (REQUEST_STREAM) that opens the
stream the SRS pushes record batches on, then batches of records both ways.  The core knows
connections only by an integer ``conn_id`` the adapter chooses:

- inputs: :meth:`SRSServer.connection_made`, :meth:`~SRSServer.data_received`,
  :meth:`~SRSServer.connection_lost`, :meth:`~SRSServer.handle_timer`, all with ``now``
  (float seconds, monotonic);
- outputs: :meth:`~SRSServer.take_writes` (bytes per connection),
  :meth:`~SRSServer.take_closes` (connections to close) and :meth:`~SRSServer.take_events`
  (connection events for logging and CONNECTION_EVENTS); :meth:`~SRSServer.next_timer` is the
  next deadline.

State (seed-srs-lbmrd.md 1.6).  A registered client is identified across connections by its
*session key* ``(session_id, client_addr, client_port)`` from the registration request: the
same context reconnecting presents the same key and resumes its state; a restarted application
is a new context.  Each client owns:

- sources (SIR = source information record) keyed ``(otid, topic)`` (OTID = originating
  transport id), stored once in a global index with their encoded bytes, relayed unchanged;
- receiver interest (RIR: one per topic) and wildcard interest (WIR: one per pattern, a regular
  expression matched with ``re.search``);
- DRO records (DIR domain info, RTIR route info) and Store records (CNIR context name info),
  the protocol-v3 records carried for later issues.

Relay.  A new SIR goes to every *other* streaming client interested in its topic (an RIR for it,
or a WIR pattern matching it) and to every flood-mode client; a new RIR/WIR is answered with the
matching known SIRs.  Forward-interest clients (interest modes 2/3, DROs) also receive other
clients' RIR/WIR and RER/WER.  DIR and RTIR go to every client, CNIR to the clients that asked
with a CNQR for that name.

Deletion.  An SDR (source delete) removes the source at once and, after
``source-leave-backoff``, sends a SER (the SIR with cost -1) to the clients interested then; a
SIR for the same source inside the back-off cancels the SER (damping flapping).  The SRS never
relays SDRs.

Disconnects and lifetimes (1.6.3).  When a connection is lost without deletes, the client's
records become *inactive*, not deleted: sources for ``source-state-lifetime`` seconds, interest
for ``interest-state-lifetime``, DIR/RTIR for ``route-state-lifetime``, CNIR for
``context-name-state-lifetime`` (0 = never).  Re-sending a record after reconnecting (same
session key) re-activates it and no SER is sent.  On expiry the records are deleted and the
ends are announced (SER after the back-off, RER/WER, RTER) and counted as expired.

Bounds.  Every table has a named maximum and a counter of what it refused
(:class:`Refused`); a peer's bytes that do not decode, or frames out of order, cost that
connection (closed, counted in ``connections_malformed`` and the client's
``client_invalid_srs_message_received_count``), never the core.  A connection silent for longer
than the SETUP's max lifetime is closed.

Per-client record queue (seed-srs-lbmrd.md 1.6.4, ``<clientactor>``).  Records destined to a
client are appended to its queue (references to the records' bytes, which are shared: a SIR
relayed to a thousand clients is one ``bytes`` object) and leave in PAYLOAD (Next) frames on its
stream, each of at most ``batch-frame-max-record-count`` records and
``batch-frame-max-datagram-size`` bytes (the 3-byte RSocket length included; a single bigger
record travels alone).  The queues are *serviced* every ``record-queue-service-interval`` ms:
the first record queued into an idle core arms one service deadline ``now + interval`` (exposed
by :meth:`SRSServer.next_timer`), and at that deadline every client's queued records are sent.
A lone record therefore waits at most one interval (10 ms by default), as in UM.  A frame that
is already full (batch-frame-max-record-count records) does not wait for the service: it leaves
at the end of the input call that filled it (pyum: a burst costs no added latency, and the
frames are those the service would have built).  The depth of
a queue is ``record_queue_depth`` in UM_CLIENT_STATS (pb ``UMClient`` field 25, JSON
``record.queue.depth``, Prometheus ``pyum_srs_client_record_queue_depth``), computed when read.

Stream credit (``request-stream-max-msg-count``; our reading, [I]).  The client opens the
SRS-to-client record stream with REQUEST_STREAM(request_n) and may grant more with REQUEST_N
frames; RSocket forbids the responder to send more PAYLOADs than the credit granted, 2^31-1
meaning unbounded (what UM clients send).  UM's SRS is a Java rsocket/Reactor service, where a
responder's stream is pulled from its source in bounded demands (``limitRate``-style);
``request-stream-max-msg-count`` is read as that demand: one service of a client's queue sends at
most ``min(request-stream-max-msg-count, credit)`` PAYLOAD frames (RSocket messages) and leaves
the rest queued for the next service.  With the defaults (1000 frames of 50 records every 10 ms)
this never slows a healthy client; it stops one client's re-synchronisation from monopolising
a service.  What a service left queued because of the credit or that bound is counted in
``Client.held_back`` and ``Refused.records_held_back`` (records, each time they are held).
TCP back-pressure (:meth:`SRSServer.set_writing_paused`, from the adapter's
``pause_writing``/``resume_writing``) holds a client's queue in the core rather than in the
socket buffer; a queue that passes ``max_queued_records`` (the client reads nothing) costs the
client its connection (``Refused.queue_overflow``), and it re-synchronises after reconnecting.
"""

from __future__ import annotations

import heapq
import re
import struct
import sys
from collections.abc import Iterable

from umcore.srs.stats import ClientErrorStats, ClientStats, SRSErrorStats, SRSStats
from umcore.wire.srs import (
    FLAG_COMPLETE,
    FLAG_NEXT,
    MAX_STREAM_ID,
    Error,
    Keepalive,
    Payload,
    RequestFnf,
    RequestN,
    RequestResponse,
    RequestStream,
    Setup,
    SRSStreamDecoder,
    encode,
)
from umcore.wire.srs_messages import (
    APP_TYPE_APPLICATION,
    INTEREST_MODE_FILTER,
    SER_COST,
    Batch,
    BatchRecord,
    ContextNameEnd,
    ContextNameInfo,
    ContextNameQuery,
    DomainInfo,
    ReceiverDelete,
    ReceiverEnd,
    ReceiverInfo,
    RegistrationRequest,
    RegistrationResponse,
    RouteEnd,
    RouteInfo,
    SourceDelete,
    SourceInfo,
    SourceLeave,
    SRSError,
    StreamRequest,
    WildcardReceiverDelete,
    WildcardReceiverEnd,
    WildcardReceiverInfo,
)

__all__ = [
    "MAX_CLIENTS",
    "MAX_CONNECTIONS",
    "MAX_EVENTS",
    "MAX_INTEREST_PER_CLIENT",
    "MAX_PATTERNS_PER_CLIENT",
    "MAX_QUEUED_RECORDS_PER_CLIENT",
    "MAX_SOURCES",
    "MAX_SOURCES_PER_CLIENT",
    "PROTOCOL_VERSION",
    "UNBOUNDED_CREDIT",
    "Client",
    "Refused",
    "SRSEvent",
    "SRSServer",
    "ServerConfig",
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

_HEAD = struct.Struct("!IH")
_PAYLOAD_NEXT = (0x0A << 10) | FLAG_NEXT
_PAYLOAD_COMPLETE_NEXT = (0x0A << 10) | FLAG_NEXT | FLAG_COMPLETE

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


class SRSEvent:
    """A connection event: ``kind`` is ``UM_CLIENT_CONNECT``, ``UM_CLIENT_DISCONNECT``, or the
    short name of a record received (``SIR``, ``SDR``, ``SLR``, ``RIR``, ``RDR``, ``WIR``,
    ``WDR``, ``RTIR``, ``CNIR``, ``CNQR``); ``client`` is the client concerned; ``record`` the
    record for record events; ``detail`` a free text for the log (reason of a disconnect)."""

    __slots__ = ("client", "detail", "kind", "now", "record")

    def __init__(
        self,
        kind: str,
        client: Client,
        now: float,
        record: BatchRecord | None = None,
        detail: str = "",
    ) -> None:
        self.kind = kind
        self.client = client
        self.now = now
        self.record = record
        self.detail = detail

    def __repr__(self) -> str:
        return f"SRSEvent({self.kind}, {self.client.describe()}, {self.detail!r})"


class _Source:
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
        "credit",
        "domain_id",
        "dr_records",
        "err",
        "forward_interest",
        "held_back",
        "host_id",
        "inactive_since",
        "interest",
        "interest_mode",
        "key",
        "lost_at",
        "names",
        "patterns",
        "paused",
        "port",
        "protocol_version",
        "queue",
        "routes",
        "session_id",
        "sources",
        "stats",
        "stream_id",
        "window_epoch",
        "window_frames",
    )

    def __init__(self, req: RegistrationRequest, client_id: int) -> None:
        self.key: SessionKey = (req.session_id, req.client_addr, req.client_port)
        self.session_id = req.session_id
        self.addr = req.client_addr
        self.port = req.client_port
        self.host_id = req.host_id
        self.app_type = req.app_type
        self.protocol_version = req.protocol_version
        self.interest_mode = req.interest_mode
        self.forward_interest = bool(req.interest_mode & 0x02)
        self.domain_id = req.local_domain_id
        self.client_id = client_id
        self.conn: _Connection | None = None
        self.stream_id = 0  # the stream the SRS pushes batches on; 0 = not open yet
        self.inactive_since: float | None = None
        self.lost_at: float | None = None  # time of the last disconnect (kept on reconnect)
        # key -> active flag for sources; topic/pattern -> active flag for interest
        self.sources: dict[SourceKey, _Source] = {}
        self.interest: dict[str, bool] = {}
        self.patterns: dict[str, bool] = {}
        self.routes: dict[bytes, tuple[RouteInfo, bool]] = {}  # raw RTIR -> (record, active)
        self.dr_records: dict[int, tuple[DomainInfo, bool]] = {}  # domain id -> (DIR, active)
        self.names: dict[str, tuple[ContextNameInfo, bool]] = {}  # name -> (CNIR, active)
        self.cname_query: set[str] = set()
        self.queue: list[bytes] = []  # records waiting for the next service (see module doc)
        self.credit = 0  # PAYLOADs the client lets us send; UNBOUNDED_CREDIT = no limit
        self.held_back = 0  # records a service left queued (credit / max-msg-count bound)
        self.paused = False  # the transport's write buffer is full (TCP back-pressure)
        self.window_epoch = -1  # the service window window_frames counts in
        self.window_frames = 0  # frames sent in that window (request-stream-max-msg-count)
        self.stats = ClientStats()
        self.err = ClientErrorStats()

    @property
    def filter_mode(self) -> bool:
        return bool(self.interest_mode & INTEREST_MODE_FILTER)

    @property
    def streaming(self) -> bool:
        return self.conn is not None and self.stream_id != 0

    def describe(self) -> str:
        return f"client[{self.addr}:{self.port}] sessionID[0x{self.session_id:08x}]"


class _Connection:
    __slots__ = ("client", "conn_id", "decoder", "last_rx", "max_lifetime", "peer", "setup")

    def __init__(self, conn_id: int, peer: tuple[str, int], now: float) -> None:
        self.conn_id = conn_id
        self.peer = peer
        self.decoder = SRSStreamDecoder()
        self.setup = False
        self.client: Client | None = None
        self.last_rx = now
        self.max_lifetime = DEFAULT_MAX_LIFETIME


class _Violation(Exception):
    """A frame out of the session's order: the connection is closed."""


def _payload_frame(stream_id: int, body: bytes, complete: bool = False) -> bytes:
    size = _HEAD.size + len(body)
    flags = _PAYLOAD_COMPLETE_NEXT if complete else _PAYLOAD_NEXT
    return size.to_bytes(3, "big") + _HEAD.pack(stream_id, flags) + body


_SER_TAIL = struct.pack("!i", SER_COST)


def _ser(raw: bytes) -> bytes:
    """The SER (source end record) for a source: its SIR with cost -1.  ``cost`` is the SIR's
    last field (an i32), so the SER is the SIR's bytes with their last four replaced."""
    return raw[:-4] + _SER_TAIL


class SRSServer:
    """The SRS service state machine; see the module docstring."""

    def __init__(self, config: ServerConfig | None = None, *, now: float = 0.0) -> None:
        self.config = config or ServerConfig()
        self.stats = SRSStats()
        self.stats.clients_next_client_id = 1
        self.errors = SRSErrorStats()
        self.refused = Refused()
        #: Connection events are kept only when True (the daemon turns it on when it logs or
        #: publishes them).
        self.keep_events = True
        self._conns: dict[int, _Connection] = {}
        self._clients: dict[SessionKey, Client] = {}
        self._sources: dict[SourceKey, _Source] = {}
        self._by_topic: dict[str, dict[SourceKey, _Source]] = {}
        self._interest: dict[str, set[Client]] = {}  # topic -> clients with an RIR
        self._patterns: dict[str, tuple[re.Pattern[str], set[Client]]] = {}
        self._flood: set[Client] = set()
        self._forward: set[Client] = set()  # forward-interest clients (DROs)
        self._dir_domain: int | None = None  # the DIR domain id of the TRD's DROs
        self._pending_ser: dict[SourceKey, tuple[float, _Source]] = {}
        self._heap: list[tuple[float, int, str, object]] = []
        self._seq = 0
        self._writes: dict[int, list[bytes]] = {}
        self._closes: list[int] = []
        self._events: list[SRSEvent] = []
        self._dirty: set[Client] = set()  # clients with queued records
        self._overflow: set[Client] = set()  # clients whose queue passed max_queued_records
        self._service_at: float | None = None  # the next service of the record queues
        self._fresh = False  # records were queued since the service was last armed
        self._epoch = 0  # services so far: numbers the request-stream-max-msg-count windows
        self._service_interval = self.config.record_queue_service_interval_ms / 1000.0
        self._next_sweep = now + SWEEP_INTERVAL

    # ------------------------------------------------------------------------------ inputs

    def connection_made(self, conn_id: int, peer: tuple[str, int], now: float) -> None:
        if len(self._conns) >= self.config.max_connections:
            self.refused.connections += 1
            self._closes.append(conn_id)
            return
        self._conns[conn_id] = _Connection(conn_id, peer, now)

    def data_received(self, conn_id: int, data: bytes | bytearray | memoryview, now: float) -> None:
        conn = self._conns.get(conn_id)
        if conn is None:
            return
        conn.last_rx = now
        try:
            frames = conn.decoder.feed(data)
            for frame in frames:
                self._frame(conn, frame, now)
        except (SRSError, _Violation) as exc:
            self.refused.connections_malformed += 1
            if conn.client is not None:
                conn.client.err.client_invalid_srs_message_received_count += 1
            self._send(conn.conn_id, encode(Error(0, 0x101, str(exc)[:200])))
            self._drop(conn, now, f"bad input: {exc}")
        self._after_input(now)

    def connection_lost(self, conn_id: int, now: float) -> None:
        conn = self._conns.get(conn_id)
        if conn is not None:
            self._drop(conn, now, "TCP disconnect", close=False)
        self._after_input(now)

    def set_writing_paused(self, conn_id: int, paused: bool, now: float) -> None:
        """TCP back-pressure from the adapter (``pause_writing`` / ``resume_writing``): while
        paused, the connection's records stay in its queue instead of the socket buffer."""
        conn = self._conns.get(conn_id)
        client = conn.client if conn is not None else None
        if client is None or client.conn is not conn:
            return
        client.paused = paused
        if not paused and client.queue:
            self._arm_service(now, now)  # what waited is due now
        self._after_input(now)

    def handle_timer(self, now: float) -> None:
        heap = self._heap
        while heap and heap[0][0] <= now:
            _due, _seq, kind, item = heapq.heappop(heap)
            if kind == "ser":
                assert isinstance(item, tuple)
                pending = self._pending_ser.get(item)
                if pending is not None and pending[0] <= now:
                    del self._pending_ser[item]
                    self._send_ser(pending[1])
            else:
                assert isinstance(item, tuple)
                self._expire(item[0], kind, item[1], now)
        if now >= self._next_sweep:
            self._next_sweep = now + SWEEP_INTERVAL
            for conn in list(self._conns.values()):
                if now - conn.last_rx > conn.max_lifetime:
                    self.refused.connections_timed_out += 1
                    self._drop(conn, now, "no keepalive within the max lifetime")
        if self._service_at is not None and now >= self._service_at:
            self._service(now)
        self._after_input(now)

    def next_timer(self) -> float | None:
        deadline = self._heap[0][0] if self._heap else None
        if self._conns and (deadline is None or self._next_sweep < deadline):
            deadline = self._next_sweep
        service = self._service_at
        if service is not None and (deadline is None or service < deadline):
            deadline = service
        return deadline

    @property
    def service_deadline(self) -> float | None:
        """When the record queues are serviced next (None: nothing queued)."""
        return self._service_at

    # ----------------------------------------------------------------------------- outputs

    def take_writes(self) -> list[tuple[int, bytes]]:
        """Bytes to write, per connection, in order; each connection appears at most once."""
        writes = self._writes
        if not writes:
            return []
        self._writes = {}
        return [
            (cid, chunks[0] if len(chunks) == 1 else b"".join(chunks))
            for cid, chunks in writes.items()
        ]

    def take_closes(self) -> list[int]:
        """Connections to close (after writing what take_writes returned for them)."""
        closes, self._closes = self._closes, []
        return closes

    def take_events(self) -> list[SRSEvent]:
        events, self._events = self._events, []
        return events

    # ----------------------------------------------------------------------------- queries

    @property
    def connections(self) -> int:
        return len(self._conns)

    def clients(self) -> list[Client]:
        """Every registered client, connected or inactive (``record_queue_depth`` refreshed)."""
        for c in self._clients.values():
            c.stats.record_queue_depth = len(c.queue)
        return list(self._clients.values())

    def connected_clients(self) -> list[Client]:
        """The clients with a connection (``record_queue_depth`` refreshed)."""
        out = [c for c in self._clients.values() if c.conn is not None]
        for c in out:
            c.stats.record_queue_depth = len(c.queue)
        return out

    def topic_table(self, limit: int) -> tuple[list[tuple[str, int, int]], int]:
        """Up to ``limit`` topics in name order as ``(topic, sources, interested clients)`` (RIR
        interest; wildcard interest is per pattern, not per topic), and the number of topics
        known in all.  Walks the tables: for support pages, not for the data path."""
        names = self._by_topic.keys() | self._interest.keys()
        rows = []
        for topic in sorted(names)[: max(0, limit)]:
            rows.append(
                (topic, len(self._by_topic.get(topic, ())), len(self._interest.get(topic, ())))
            )
        return rows, len(names)

    def source_count(self) -> int:
        return len(self._sources)

    def snapshot_stats(self) -> SRSStats:
        """SRS_STATS with the active/inactive counts recomputed from the tables."""
        s = self.stats
        counts = dict.fromkeys(
            ("sir", "rir", "wir", "cnir", "dir", "rtir", "isir", "irir", "iwir", "icnir", "idir", "irtir"), 0
        )  # fmt: skip
        for c in self._clients.values():
            for src in c.sources.values():
                counts["sir" if src.active else "isir"] += 1
            for flag in c.interest.values():
                counts["rir" if flag else "irir"] += 1
            for flag in c.patterns.values():
                counts["wir" if flag else "iwir"] += 1
            for _r, flag in c.names.values():
                counts["cnir" if flag else "icnir"] += 1
            for _d, flag in c.dr_records.values():
                counts["dir" if flag else "idir"] += 1
            for _t, flag in c.routes.values():
                counts["rtir" if flag else "irtir"] += 1
        s.clients_active_sir_count = counts["sir"]
        s.clients_inactive_sir_count = counts["isir"]
        s.clients_active_rir_count = counts["rir"]
        s.clients_inactive_rir_count = counts["irir"]
        s.clients_active_wir_count = counts["wir"]
        s.clients_inactive_wir_count = counts["iwir"]
        s.clients_active_cnir_count = counts["cnir"]
        s.clients_inactive_cnir_count = counts["icnir"]
        s.clients_active_dir_count = counts["dir"]
        s.clients_inactive_dir_count = counts["idir"]
        s.clients_active_rtir_count = counts["rtir"]
        s.clients_inactive_rtir_count = counts["irtir"]
        s.active_clients_count = sum(1 for c in self._clients.values() if c.conn is not None)
        return s

    # ------------------------------------------------------------------------ the session

    def _frame(self, conn: _Connection, frame: object, now: float) -> None:
        if isinstance(frame, Keepalive):
            if frame.respond:
                self._send(conn.conn_id, encode(Keepalive(False, 0)))
            return
        if isinstance(frame, Setup):
            if conn.setup:
                raise _Violation("second SETUP")
            conn.setup = True
            if frame.max_lifetime_ms > 0:
                conn.max_lifetime = frame.max_lifetime_ms / 1000.0
            return
        if isinstance(frame, Error):
            raise _Violation(f"peer sent ERROR 0x{frame.code:x}: {frame.text[:80]}")
        if isinstance(frame, RequestN):
            client = conn.client
            if client is not None and client.stream_id and frame.stream_id == client.stream_id:
                if frame.request_n <= 0:  # RSocket: request_n must be > 0
                    client.err.client_invalid_srs_message_received_count += 1
                elif client.credit < UNBOUNDED_CREDIT:
                    client.credit = min(UNBOUNDED_CREDIT, client.credit + frame.request_n)
                    if client.queue:
                        self._arm_service(now, now)  # what the credit held back is due now
            return
        message = getattr(frame, "message", None)
        if message is None:
            return  # CANCEL, empty payloads, frames we do not use
        if isinstance(message, RegistrationRequest):
            if not isinstance(frame, RequestResponse) or isinstance(frame, RequestFnf):
                raise _Violation("registration request outside a REQUEST_RESPONSE")
            if conn.client is not None:
                raise _Violation("second registration request")
            self._register(conn, frame.stream_id, message, now)
            return
        client = conn.client
        if client is None:
            raise _Violation(f"{type(message).__name__} before registration")
        if isinstance(message, StreamRequest):
            if not isinstance(frame, RequestStream) or client.stream_id:
                raise _Violation("unexpected stream request")
            client.stream_id = frame.stream_id
            client.credit = min(frame.request_n, UNBOUNDED_CREDIT)
            client.paused = False
            self._stream_opened(client)
            return
        if isinstance(message, RegistrationResponse):
            raise _Violation("registration response from a client")
        assert isinstance(message, Batch)
        for rec in message.records:
            self._record(client, rec, now)

    def _register(
        self, conn: _Connection, stream_id: int, req: RegistrationRequest, now: float
    ) -> None:
        key = (req.session_id, req.client_addr, req.client_port)
        client = self._clients.get(key)
        if client is None:
            if len(self._clients) >= self.config.max_clients and not self._evict_one(now):
                self.refused.clients += 1
                raise _Violation("client table full")
            client = Client(req, self.stats.clients_next_client_id)
            self._clients[key] = client
        else:
            if client.conn is not None:  # the same context on a new connection: drop the old
                old = client.conn
                self._drop(old, now, "replaced by a new connection of the same context")
            client.client_id = self.stats.clients_next_client_id
            client.interest_mode = req.interest_mode
            client.forward_interest = bool(req.interest_mode & 0x02)
            client.inactive_since = None
            client.app_type = req.app_type
            client.protocol_version = req.protocol_version
        self.stats.clients_next_client_id += 1
        client.conn = conn
        client.stream_id = 0
        conn.client = client
        s = self.stats
        s.clients_connects_count += 1
        connected = sum(1 for c in self._conns.values() if c.client is not None)
        s.clients_max_concurrent_connections_count = max(
            s.clients_max_concurrent_connections_count, connected
        )
        if client.filter_mode:
            self._flood.discard(client)
        else:
            self._flood.add(client)
        if client.forward_interest:
            self._forward.add(client)
        else:
            self._forward.discard(client)
        response = RegistrationResponse(
            client.client_id,
            local_domain_id=self.config.local_domain_id,
            protocol_version=PROTOCOL_VERSION,
        )
        self._send(conn.conn_id, encode(Payload(stream_id, response, complete=True)))
        self._event("UM_CLIENT_CONNECT", client, now)

    def _stream_opened(self, client: Client) -> None:
        """Initial exchange, SRS side: routes and domains of the TRD, every SIR in flood mode,
        and the matching SIRs of interest the client kept across a reconnect."""
        for other in self._clients.values():
            if other is client:
                continue
            for dr, _flag in other.dr_records.values():
                self._queue(client, dr.encode())
                client.stats.client_dir_sent_count += 1
            for rt, _flag in other.routes.values():
                self._queue(client, rt.encode())
                client.stats.client_rtir_sent_count += 1
        if not client.filter_mode:
            for src in self._sources.values():
                if src.owner is not client:
                    self._queue_sir(client, src)

    # ------------------------------------------------------------------------ the records

    def _record(self, client: Client, rec: BatchRecord, now: float) -> None:
        t = type(rec)
        if t is SourceInfo:
            assert isinstance(rec, SourceInfo)
            self._sir(client, rec, now)
        elif t is ReceiverInfo:
            assert isinstance(rec, ReceiverInfo)
            self._rir(client, rec, now)
        elif t is SourceDelete:
            assert isinstance(rec, SourceDelete)
            self._sdr(client, rec, now)
        elif t is ReceiverDelete:
            assert isinstance(rec, ReceiverDelete)
            self._rdr(client, rec, now)
        elif t is WildcardReceiverInfo:
            assert isinstance(rec, WildcardReceiverInfo)
            self._wir(client, rec, now)
        elif t is WildcardReceiverDelete:
            assert isinstance(rec, WildcardReceiverDelete)
            self._wdr(client, rec, now)
        elif t is SourceLeave:
            assert isinstance(rec, SourceLeave)
            self._slr(client, rec, now)
        elif t is DomainInfo:
            assert isinstance(rec, DomainInfo)
            self._dir(client, rec, now)
        elif t is RouteInfo:
            assert isinstance(rec, RouteInfo)
            self._rtir(client, rec, now)
        elif t is ContextNameInfo:
            assert isinstance(rec, ContextNameInfo)
            self._cnir(client, rec, now)
        elif t is ContextNameQuery:
            assert isinstance(rec, ContextNameQuery)
            self._cnqr(client, rec, now)
        elif t is ContextNameEnd:
            client.stats.client_unexpected_cner_received_count += 1
        else:  # RER, WER, RTER: the SRS's own records, never sent by a client
            client.err.client_invalid_srs_message_received_count += 1

    def _sir(self, client: Client, rec: SourceInfo, now: float) -> None:
        st = client.stats
        if rec.cost == SER_COST:  # a client may not end sources by SER; SDR is the way
            client.err.client_invalid_srs_message_received_count += 1
            return
        topic = rec.topic = sys.intern(rec.topic)  # one string per topic, however many refer
        key = (rec.otid, topic)
        src = self._sources.get(key)
        raw = rec.encode()
        if src is not None:
            if src.owner is not client:
                self.errors.clients_duplicate_sir_count += 1
                return
            pending = self._pending_ser.pop(key, None)
            changed = src.raw != raw
            if not src.active:  # re-confirmed after a reconnect
                src.active = True
            elif pending is None and not changed:
                self.errors.clients_duplicate_sir_count += 1
                return
            src.raw = raw
            if changed:
                self._relay_sir(src)
            return
        pending = self._pending_ser.get(key)
        if pending is not None and pending[1].owner is client:
            # Deleted and re-created inside the back-off: cancel the SER; receivers still
            # hold the source, so relay only if it changed.
            del self._pending_ser[key]
            changed = pending[1].raw != raw
        else:
            changed = True
        if len(self._sources) >= self.config.max_sources or (
            len(client.sources) >= MAX_SOURCES_PER_CLIENT
        ):
            self.refused.sources += 1
            return
        st.client_sir_received_count += 1
        src = _Source(key, raw, client)
        self._sources[key] = src
        self._by_topic.setdefault(rec.topic, {})[key] = src
        client.sources[key] = src
        st.client_active_sir_count = len(client.sources)
        if st.client_active_sir_count > st.client_max_concurrent_sir_count:
            st.client_max_concurrent_sir_count = st.client_active_sir_count
        if self.keep_events:
            self._event("SIR", client, now, rec)
        if changed:
            self._relay_sir(src)

    def _recipients(self, topic: str, origin: Client | None) -> Iterable[Client]:
        seen: set[Client] = set(self._interest.get(topic, ()))
        for regex, members in self._patterns.values():
            if members and regex.search(topic) is not None:
                seen.update(members)
        seen.update(self._flood)
        if origin is not None:
            seen.discard(origin)
        return seen

    def _relay_sir(self, src: _Source) -> None:
        for c in self._recipients(src.key[1], src.owner):
            if c.streaming:
                self._queue_sir(c, src)

    def _queue_sir(self, client: Client, src: _Source) -> None:
        self._queue(client, src.raw)
        client.stats.client_sir_sent_count += 1

    def _sdr(self, client: Client, rec: SourceDelete, now: float) -> None:
        client.stats.client_sdr_received_count += 1
        key = (rec.otid, rec.topic)
        src = client.sources.get(key)
        if src is None:
            if rec.topic not in self._by_topic:
                self.errors.clients_invalid_sdr_no_topic_match_count += 1
            else:
                self.errors.clients_invalid_sdr_no_otid_match_count += 1
            client.err.client_invalid_sdr_received_count += 1
            return
        self._remove_source(src)
        client.stats.client_active_sir_count = len(client.sources)
        if self.keep_events:
            self._event("SDR", client, now, rec)
        self._schedule_ser(src, now)

    def _remove_source(self, src: _Source) -> None:
        key = src.key
        self._sources.pop(key, None)
        src.owner.sources.pop(key, None)
        by_topic = self._by_topic.get(key[1])
        if by_topic is not None:
            by_topic.pop(key, None)
            if not by_topic:
                del self._by_topic[key[1]]

    def _schedule_ser(self, src: _Source, now: float) -> None:
        backoff = self.config.source_leave_backoff_ms / 1000.0
        if backoff <= 0:
            self._send_ser(src)
            return
        due = now + backoff
        self._pending_ser[src.key] = (due, src)
        self._push(due, "ser", src.key)

    def _send_ser(self, src: _Source) -> None:
        raw = _ser(src.raw)
        for c in self._recipients(src.key[1], src.owner):
            if c.streaming:
                self._queue(c, raw)
                c.stats.client_ser_sent_count += 1

    def _rir(self, client: Client, rec: ReceiverInfo, now: float) -> None:
        topic = rec.topic = sys.intern(rec.topic)
        state = client.interest.get(topic)
        if state is True:
            self.errors.clients_duplicate_rir_count += 1
            client.err.client_duplicate_rir_received_count += 1
            return
        if state is None:
            if len(client.interest) >= MAX_INTEREST_PER_CLIENT:
                self.refused.interest += 1
                return
            client.stats.client_rir_received_count += 1
            self._interest.setdefault(topic, set()).add(client)
            if self.keep_events:
                self._event("RIR", client, now, rec)
            self._forward_interest(client, rec, "rir")
        client.interest[topic] = True
        if client.streaming:
            for src in self._by_topic.get(topic, {}).values():
                if src.owner is not client:
                    self._queue_sir(client, src)

    def _rdr(self, client: Client, rec: ReceiverDelete, now: float) -> None:
        client.stats.client_rdr_received_count += 1
        if client.interest.pop(rec.topic, None) is None:
            return
        self._drop_interest(client, rec.topic)
        if self.keep_events:
            self._event("RDR", client, now, rec)
        self._forward_interest(client, ReceiverEnd(rec.topic, domain_id=rec.domain_id), "rer")

    def _drop_interest(self, client: Client, topic: str) -> None:
        members = self._interest.get(topic)
        if members is not None:
            members.discard(client)
            if not members:
                del self._interest[topic]

    def _wir(self, client: Client, rec: WildcardReceiverInfo, now: float) -> None:
        pattern = rec.pattern
        state = client.patterns.get(pattern)
        if state is True:
            self.errors.clients_duplicate_wir_count += 1
            client.err.client_duplicate_wir_received_count += 1
            return
        entry = self._patterns.get(pattern)
        if state is None:
            if len(client.patterns) >= MAX_PATTERNS_PER_CLIENT:
                self.refused.patterns += 1
                return
            if entry is None:
                try:
                    entry = (re.compile(pattern), set())
                except (re.error, RecursionError, OverflowError):
                    client.err.client_invalid_srs_message_received_count += 1
                    return
                self._patterns[pattern] = entry
            entry[1].add(client)
            client.stats.client_wir_received_count += 1
            if self.keep_events:
                self._event("WIR", client, now, rec)
            self._forward_interest(client, rec, "wir")
        client.patterns[pattern] = True
        if client.streaming and entry is not None:
            regex = entry[0]
            for topic, sources in self._by_topic.items():
                if regex.search(topic) is not None:
                    for src in sources.values():
                        if src.owner is not client:
                            self._queue_sir(client, src)

    def _wdr(self, client: Client, rec: WildcardReceiverDelete, now: float) -> None:
        client.stats.client_wdr_received_count += 1
        if client.patterns.pop(rec.pattern, None) is None:
            return
        self._drop_pattern(client, rec.pattern)
        if self.keep_events:
            self._event("WDR", client, now, rec)
        end = WildcardReceiverEnd(rec.pattern, domain_id=rec.domain_id)
        self._forward_interest(client, end, "wer")

    def _drop_pattern(self, client: Client, pattern: str) -> None:
        entry = self._patterns.get(pattern)
        if entry is not None:
            entry[1].discard(client)
            if not entry[1]:
                del self._patterns[pattern]

    def _forward_interest(self, origin: Client, rec: BatchRecord, kind: str) -> None:
        if not self._forward:
            return
        raw = rec.encode()
        for c in self._forward:
            if c is not origin and c.streaming:
                self._queue(c, raw)
                counter = f"client_{kind}_sent_count"
                setattr(c.stats, counter, getattr(c.stats, counter) + 1)

    def _slr(self, client: Client, rec: SourceLeave, now: float) -> None:
        client.stats.client_slr_received_count += 1
        if (rec.otid, rec.topic) in self._sources:
            pass
        elif rec.topic not in self._by_topic:
            self.errors.clients_invalid_slr_no_topic_match_count += 1
        else:
            self.stats.clients_slr_no_otid_match_count += 1
        if self.keep_events:
            self._event("SLR", client, now, rec)

    def _dir(self, client: Client, rec: DomainInfo, now: float) -> None:
        entry = client.dr_records.get(rec.domain_id)
        if entry is not None and entry[1]:
            self.errors.clients_duplicate_dir_count += 1
            return
        if self._dir_domain is not None and self._dir_domain != rec.domain_id:
            self.errors.clients_mismatched_dir_count += 1
        self._dir_domain = rec.domain_id
        if entry is None and len(client.dr_records) >= MAX_ROUTES_PER_CLIENT:
            self.refused.routes += 1
            return
        client.dr_records[rec.domain_id] = (rec, True)
        if entry is None:
            raw = rec.encode()
            for c in self._clients.values():
                if c is not client and c.streaming:
                    self._queue(c, raw)
                    c.stats.client_dir_sent_count += 1

    def _rtir(self, client: Client, rec: RouteInfo, now: float) -> None:
        client.stats.client_rtir_received_count += 1
        raw = rec.encode()
        entry = client.routes.get(raw)
        if entry is not None and entry[1]:
            self.errors.clients_duplicate_rtir_count += 1
            client.err.client_duplicate_rtir_received_count += 1
            return
        if entry is None and len(client.routes) >= MAX_ROUTES_PER_CLIENT:
            self.refused.routes += 1
            return
        client.routes[raw] = (rec, True)
        if self.keep_events:
            self._event("RTIR", client, now, rec)
        if entry is None:
            for c in self._clients.values():
                if c is not client and c.streaming:
                    self._queue(c, raw)
                    c.stats.client_rtir_sent_count += 1

    def _cnir(self, client: Client, rec: ContextNameInfo, now: float) -> None:
        client.stats.client_cnir_received_count += 1
        entry = client.names.get(rec.name)
        if entry is not None and entry[1]:
            if entry[0] == rec:
                self.stats.clients_duplicate_cnir_count += 1
                client.err.client_duplicate_cnir_received_count += 1
                return
            self.errors.clients_invalid_cnir_name_mismatch_count += 1
        elif client.names and rec.name not in client.names:
            self.errors.clients_invalid_cnir_name_mismatch_count += 1
        if entry is None and len(client.names) >= MAX_NAMES_PER_CLIENT:
            self.refused.names += 1
            return
        client.names[rec.name] = (rec, True)
        if self.keep_events:
            self._event("CNIR", client, now, rec)
        raw = rec.encode()
        for c in self._clients.values():
            if c is not client and rec.name in c.cname_query and c.streaming:
                self._queue(c, raw)
                c.stats.client_cnir_sent_count += 1

    def _cnqr(self, client: Client, rec: ContextNameQuery, now: float) -> None:
        client.stats.client_cnqr_received_count += 1
        if rec.name in client.cname_query:
            client.err.client_duplicate_cnqr_received_count += 1
        elif len(client.cname_query) >= MAX_NAMES_PER_CLIENT:
            self.refused.names += 1
            return
        client.cname_query.add(rec.name)
        if self.keep_events:
            self._event("CNQR", client, now, rec)
        if client.streaming:
            for other in self._clients.values():
                entry = other.names.get(rec.name)
                if entry is not None and other is not client:
                    self._queue(client, entry[0].encode())
                    client.stats.client_cnir_sent_count += 1

    # --------------------------------------------------------------- disconnect and expiry

    def _drop(self, conn: _Connection, now: float, reason: str, *, close: bool = True) -> None:
        """Forget a connection; its client's records become inactive."""
        if self._conns.pop(conn.conn_id, None) is None:
            return
        if close:
            self._closes.append(conn.conn_id)
        client = conn.client
        conn.client = None
        if client is None or client.conn is not conn:
            return
        client.conn = None
        client.stream_id = 0
        client.queue = []
        client.credit = 0
        client.paused = False
        self._dirty.discard(client)
        self._overflow.discard(client)
        client.inactive_since = now
        client.lost_at = now
        self.stats.clients_disconnects_count += 1
        self._flood.discard(client)
        self._forward.discard(client)
        had_inactive = False
        for src in client.sources.values():
            if not src.active:
                had_inactive = True
            src.active = False
        if had_inactive:
            self.stats.clients_dr_inactive_sir_count += 1
        for table in (client.interest, client.patterns):
            for k in table:
                table[k] = False
        for rk, (rt, _f) in list(client.routes.items()):
            client.routes[rk] = (rt, False)
        for dk, (dr, _f) in list(client.dr_records.items()):
            client.dr_records[dk] = (dr, False)
        for nk, (cn, _f) in list(client.names.items()):
            client.names[nk] = (cn, False)
        cfg = self.config
        for kind, lifetime in (
            ("sources", cfg.source_state_lifetime),
            ("interest", cfg.interest_state_lifetime),
            ("routes", cfg.route_state_lifetime),
            ("names", cfg.context_name_state_lifetime),
        ):
            if lifetime > 0:
                self._push(now + lifetime, kind, (client, now))
        self._event("UM_CLIENT_DISCONNECT", client, now, detail=reason)

    def _expire(self, client: Client, kind: str, lost_at: float, now: float) -> None:
        """A lifetime counted from the disconnect at ``lost_at`` ran out: delete the client's
        records of ``kind`` that were not re-confirmed since (re-sent after a reconnect)."""
        if client.lost_at != lost_at or self._clients.get(client.key) is not client:
            return  # stale: the client disconnected again later, or is gone
        self._expire_unconfirmed(client, kind, now)
        if client.conn is None and not (
            client.sources
            or client.interest
            or client.patterns
            or client.routes
            or client.dr_records
            or client.names
        ):
            self._clients.pop(client.key, None)

    def _expire_unconfirmed(self, client: Client, kind: str, now: float) -> None:
        s = self.stats
        if kind == "sources":
            for src in [x for x in client.sources.values() if not x.active]:
                self._remove_source(src)
                s.clients_expired_sir_count += 1
                self._schedule_ser(src, now)
            client.stats.client_active_sir_count = len(client.sources)
        elif kind == "interest":
            for topic in [t for t, a in client.interest.items() if not a]:
                del client.interest[topic]
                self._drop_interest(client, topic)
                s.clients_expired_rir_count += 1
                self._forward_interest(client, ReceiverEnd(topic), "rer")
            for pattern in [p for p, a in client.patterns.items() if not a]:
                del client.patterns[pattern]
                self._drop_pattern(client, pattern)
                s.clients_expired_wir_count += 1
                self._forward_interest(client, WildcardReceiverEnd(pattern), "wer")
        elif kind == "routes":
            for key, (rt, active) in list(client.routes.items()):
                if not active:
                    del client.routes[key]
                    s.clients_expired_rtir_count += 1
                    end = RouteEnd(
                        rt.domains,
                        rt.ip,
                        rt.port,
                        route_index=rt.route_index,
                        context_instance=rt.context_instance,
                        context_type=rt.context_type,
                    ).encode()
                    for c in self._clients.values():
                        if c is not client and c.streaming:
                            self._queue(c, end)
                            c.stats.client_rter_sent_count += 1
            for dom, (_d, active) in list(client.dr_records.items()):
                if not active:
                    del client.dr_records[dom]
                    s.clients_expired_dir_count += 1
        elif kind == "names":
            for name, (cn, active) in list(client.names.items()):
                if not active:
                    del client.names[name]
                    s.clients_expired_cnir_count += 1
                    end = ContextNameEnd(
                        cn.name,
                        cn.ip,
                        cn.port,
                        domain_id=cn.domain_id,
                        origin_context_instance=cn.origin_context_instance,
                        context_instance=cn.context_instance,
                        context_type=cn.context_type,
                    ).encode()
                    for c in self._clients.values():
                        if c is not client and name in c.cname_query and c.streaming:
                            self._queue(c, end)

    def _evict_one(self, now: float) -> bool:
        """Expire the longest-inactive client now, to make room; False if none is inactive."""
        oldest: Client | None = None
        for c in self._clients.values():
            if (
                c.conn is None
                and c.inactive_since is not None
                and (oldest is None or c.inactive_since < (oldest.inactive_since or 0.0))
            ):
                oldest = c
        if oldest is None:
            return False
        self.refused.clients_evicted += 1
        for kind in ("sources", "interest", "routes", "names"):
            self._expire_unconfirmed(oldest, kind, now)
        self._clients.pop(oldest.key, None)
        return True

    # -------------------------------------------------------------------------- plumbing

    def _push(self, due: float, kind: str, item: object) -> None:
        self._seq += 1
        heapq.heappush(self._heap, (due, self._seq, kind, item))

    def _event(
        self,
        kind: str,
        client: Client,
        now: float,
        record: BatchRecord | None = None,
        detail: str = "",
    ) -> None:
        if not self.keep_events:
            return
        if len(self._events) >= MAX_EVENTS:
            self.refused.events += 1
            return
        self._events.append(SRSEvent(kind, client, now, record, detail))

    def _send(self, conn_id: int, data: bytes) -> None:
        chunks = self._writes.get(conn_id)
        if chunks is None:
            self._writes[conn_id] = [data]
        else:
            chunks.append(data)

    def _queue(self, client: Client, raw: bytes) -> None:
        queue = client.queue
        if len(queue) >= self.config.max_queued_records:
            self._overflow.add(client)  # dropped by _after_input: we may be iterating clients
            return
        queue.append(raw)
        self._dirty.add(client)
        self._fresh = True

    def _arm_service(self, due: float, now: float) -> None:
        if self._service_at is None or due < self._service_at:
            self._service_at = max(due, now)

    def _after_input(self, now: float) -> None:
        """End of every input: drop overflowed clients; send the *full* frames of the queues
        that grew (a partial frame waits for the service, at most one interval); arm the
        service for what is left."""
        if self._overflow:
            for client in list(self._overflow):
                if client.conn is not None:
                    self.refused.queue_overflow += 1
                    self._drop(client.conn, now, "record queue full: the client does not read")
            self._overflow.clear()
        if self._fresh:
            self._fresh = False
            full = self.config.batch_frame_max_record_count
            for client in self._dirty:
                if len(client.queue) >= full and not client.paused:
                    self._drain(client, full_only=True)
            if self._service_at is None:
                self._service_at = now + self._service_interval

    def _service(self, now: float) -> None:
        """The service of every client's queue (see the module docstring)."""
        self._service_at = None
        again = False  # a client was cut short by max-msg-count: service it next interval
        waiting: set[Client] = set()
        for client in self._dirty:
            if client.conn is None or not client.stream_id or not client.queue:
                client.queue = []
                continue
            if client.paused:
                waiting.add(client)  # resume_writing re-arms
                continue
            left = self._drain(client, full_only=False)
            if left:
                client.held_back += left
                self.refused.records_held_back += left
                waiting.add(client)
                if client.credit > 0:
                    again = True  # only the per-service bound stopped it (REQUEST_N re-arms)
        self._dirty = waiting
        self._epoch += 1  # a new request-stream-max-msg-count window
        if again:
            self._arm_service(now + self._service_interval, now)

    def _drain(self, client: Client, *, full_only: bool) -> int:
        """Send ``client``'s queued records as PAYLOAD frames of at most
        ``batch-frame-max-record-count`` records and ``batch-frame-max-datagram-size`` bytes,
        within its credit and what is left of this service window's
        ``request-stream-max-msg-count``; ``full_only`` keeps a last, partial frame queued.
        Returns the number of records left queued."""
        conn = client.conn
        queue = client.queue
        n = len(queue)
        if conn is None or not client.stream_id or not n:
            return n
        cfg = self.config
        if client.window_epoch != self._epoch:
            client.window_epoch = self._epoch
            client.window_frames = 0
        budget = cfg.request_stream_max_msg_count - client.window_frames
        credit = client.credit
        if credit < UNBOUNDED_CREDIT and credit < budget:
            budget = credit
        if budget <= 0:
            return n
        max_records = cfg.batch_frame_max_record_count
        max_bytes = cfg.batch_frame_max_datagram_size - 3 - _HEAD.size
        sid = client.stream_id
        frames: list[bytes] = []
        start = size = i = 0
        while i < n:
            raw = queue[i]
            if i > start and (i - start >= max_records or size + len(raw) > max_bytes):
                frames.append(_payload_frame(sid, b"".join(queue[start:i])))
                start, size = i, 0
                if len(frames) >= budget:
                    break
            size += len(raw)
            i += 1
        else:
            if not full_only or n - start >= max_records:
                frames.append(_payload_frame(sid, b"".join(queue[start:])))
                start = n
        if frames:
            self._send(conn.conn_id, b"".join(frames))
            client.window_frames += len(frames)
            if credit < UNBOUNDED_CREDIT:
                client.credit = credit - len(frames)
        if start:
            client.queue = queue[start:]
        return n - start


assert MAX_STREAM_ID == 0x7FFFFFFF
assert APP_TYPE_APPLICATION == 0
