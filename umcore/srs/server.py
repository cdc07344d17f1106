"""The Stateful Resolver Service as a sans-IO core.

Theory of operation
-------------------
Each UM context (a *client*) opens one TCP connection to the SRS and speaks RSocket on it
(:mod:`umcore.wire.srs`): SETUP, a registration request (REQUEST_RESPONSE, answered with the
registration response carrying the client id), a stream request (REQUEST_STREAM) that opens the
stream the SRS pushes record batches on, then batches of records both ways.  The core knows
connections only by an integer ``conn_id`` the adapter chooses:

- inputs: :meth:`SRSServer.receive_connected`, :meth:`~SRSServer.receive_data`,
  :meth:`~SRSServer.receive_disconnected`, :meth:`~SRSServer.receive_writing_paused`,
  :meth:`~SRSServer.handle_timer`, all with ``now`` (float seconds, monotonic);
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
TCP back-pressure (:meth:`SRSServer.receive_writing_paused`, from the adapter's
``pause_writing``/``resume_writing``) holds a client's queue in the core rather than in the
socket buffer; a queue that passes ``max_queued_records`` (the client reads nothing) costs the
client its connection (``Refused.queue_overflow``), and it re-synchronises after reconnecting.

The parts.  :class:`SRSServer` is a thin composition; each job is one class:

- :class:`~umcore.srs.session.ClientSession`: one connection's protocol state machine
  (:class:`~umcore.srs.session.SessionState`, one transition table) and its bounded record
  queue; :class:`~umcore.srs.session.QueueService` the bytes for the adapter and the service
  of every queue;
- :class:`~umcore.srs.registry.Registry`: the clients, sources, interest and wildcard tables;
- :class:`~umcore.srs.relay.Relay`: what each record means and who gets what;
- :class:`~umcore.srs.lifetimes.Lifetimes`: the SER back-off and the state-lifetime expiries;
- :mod:`umcore.srs.common`: the settings, the bounds, :class:`Refused` and the events.
"""

from __future__ import annotations

from umcore.errors import RemoteProtocolError
from umcore.srs.common import (
    MAX_BUFFERED_BYTES,
    MAX_CLIENTS,
    MAX_CONNECTIONS,
    MAX_EVENTS,
    MAX_INTEREST_PER_CLIENT,
    MAX_PATTERNS_PER_CLIENT,
    MAX_QUEUED_RECORDS_PER_CLIENT,
    MAX_SOURCES,
    MAX_SOURCES_PER_CLIENT,
    MAX_SOURCES_PER_HOST,
    PROTOCOL_VERSION,
    SWEEP_INTERVAL,
    UNBOUNDED_CREDIT,
    Refusal,
    RefusalTally,
    Refused,
    ServerConfig,
)
from umcore.srs.lifetimes import Expiry, Lifetimes
from umcore.srs.registry import Client, EventLog, Registry, SRSEvent
from umcore.srs.relay import (
    REFUSED_INTEREST,
    REFUSED_NAMES,
    REFUSED_PATTERNS,
    REFUSED_ROUTES,
    REFUSED_SOURCE_CLIENT,
    REFUSED_SOURCE_HOST,
    REFUSED_SOURCE_TABLE,
    Relay,
)
from umcore.srs.session import ClientSession, QueueService
from umcore.srs.stats import SRSErrorStats, SRSStats
from umcore.wire.srs import (
    ERROR_CONNECTION_ERROR,
    ERROR_REJECTED_SETUP,
    MAX_STREAM_ID,
    Error,
    Keepalive,
    Payload,
    RequestFnf,
    RequestN,
    RequestResponse,
    RequestStream,
    Setup,
    encode,
)
from umcore.wire.srs_messages import (
    APP_TYPE_APPLICATION,
    Batch,
    RegistrationRequest,
    RegistrationResponse,
    StreamRequest,
)

__all__ = [
    "MALFORMED",
    "MAX_BUFFERED_BYTES",
    "MAX_CLIENTS",
    "MAX_CONNECTIONS",
    "MAX_EVENTS",
    "MAX_INTEREST_PER_CLIENT",
    "MAX_PATTERNS_PER_CLIENT",
    "MAX_QUEUED_RECORDS_PER_CLIENT",
    "MAX_SOURCES",
    "MAX_SOURCES_PER_CLIENT",
    "MAX_SOURCES_PER_HOST",
    "PROTOCOL_VERSION",
    "REFUSED_BUFFER",
    "REFUSED_CLIENT",
    "REFUSED_CONNECTION",
    "REFUSED_INTEREST",
    "REFUSED_NAMES",
    "REFUSED_PATTERNS",
    "REFUSED_ROUTES",
    "REFUSED_SOURCE_CLIENT",
    "REFUSED_SOURCE_HOST",
    "REFUSED_SOURCE_TABLE",
    "TIMED_OUT_FRAME",
    "TIMED_OUT_REGISTRATION",
    "UNBOUNDED_CREDIT",
    "Client",
    "Refusal",
    "Refused",
    "SRSEvent",
    "SRSServer",
    "ServerConfig",
]

# Longest text of an ERROR frame we send a misbehaving client (the rest of the reason is in
# our log): keeps the frame small whatever the exception's message.
MAX_ERROR_TEXT = 200
# RSocket error code sent before closing a connection for bad input (our choice, [I]).
ERROR_CODE_BAD_INPUT = ERROR_CONNECTION_ERROR

# Kinds of refusal of the connection level (take_refusals; the relay's REFUSED_* are the
# records').  A client refused at the connection level is told with an RSocket ERROR frame
# (REJECTED_SETUP for a full table, CONNECTION_ERROR otherwise) before the close.
REFUSED_CONNECTION = "connection table full"
REFUSED_CLIENT = "client table full"
REFUSED_BUFFER = "buffered bytes bound"
TIMED_OUT_FRAME = "frame timeout"
TIMED_OUT_REGISTRATION = "registration timeout"
MALFORMED = "malformed input"


class SRSServer:
    """The SRS service: a thin composition of its parts; see the module docstring."""

    def __init__(self, config: ServerConfig | None = None, *, now: float = 0.0) -> None:
        self.config = config or ServerConfig()
        self.stats = SRSStats()
        self.stats.clients_next_client_id = 1
        self.errors = SRSErrorStats()
        self.refused = Refused()
        self.events = EventLog(self.refused)
        self.registry = Registry()
        self.queues = QueueService(self.config, self.refused)
        self.lifetimes = Lifetimes(self.config)
        self.tally = RefusalTally(self.refused)
        self.relay = Relay(
            self.config,
            self.registry,
            self.queues,
            self.lifetimes,
            self.events,
            self.stats,
            self.errors,
            self.refused,
            self.tally,
        )
        self.sessions: dict[int, ClientSession[Client]] = {}
        self._next_sweep = now + SWEEP_INTERVAL
        # Sessions holding an incomplete frame, oldest frame first (re-inserted when a new frame
        # begins), and the bytes they hold together (max_buffered_bytes bounds it).
        self._partial: dict[int, ClientSession[Client]] = {}
        #: Bytes held for incomplete frames, all connections together.
        self.buffered_bytes = 0
        #: The highest buffered_bytes since reset_buffered_peak() (the daemon returns freed
        #: memory to the system after a high peak).
        self.buffered_peak = 0

    @property
    def keep_events(self) -> bool:
        """Connection events are kept only when True (the daemon turns it on when it logs or
        publishes them)."""
        return self.events.keep

    @keep_events.setter
    def keep_events(self, value: bool) -> None:
        self.events.keep = value

    # ------------------------------------------------------------------------------ inputs

    def receive_connected(self, conn_id: int, peer: tuple[str, int], now: float) -> None:
        """The adapter accepted a connection and named it ``conn_id``."""
        cfg = self.config
        if len(self.sessions) >= cfg.max_connections:
            self.refused.connections += 1
            text = f"SRS connection table full ({cfg.max_connections} connections)"
            self.tally.add(REFUSED_CONNECTION, f"{peer[0]}:{peer[1]}", text)
            self.queues.send(conn_id, encode(Error(0, ERROR_REJECTED_SETUP, text)))
            self.queues.close(conn_id)
            return
        session: ClientSession[Client] = ClientSession(conn_id, peer, now)
        session.max_lifetime = min(session.max_lifetime, cfg.max_silence)
        self.sessions[conn_id] = session

    def receive_data(self, conn_id: int, data: bytes | bytearray | memoryview, now: float) -> None:
        """Bytes from connection ``conn_id``."""
        session = self.sessions.get(conn_id)
        if session is None:
            return
        session.last_rx = now
        sessions = self.sessions
        try:
            frames = session.decoder.feed(data)
            self._account(session, bool(frames), now)
            for frame in frames:
                if conn_id not in sessions:
                    break  # refused or shed by an earlier frame: the rest is moot
                self._frame(session, frame, now)
        except RemoteProtocolError as exc:  # SRSError and refused transitions
            self.refused.connections_malformed += 1
            if session.client is not None:
                session.client.err.client_invalid_srs_message_received_count += 1
            text = str(exc)[:MAX_ERROR_TEXT]
            self.tally.add(MALFORMED, self._who(session), f"not valid SRS protocol: {text}")
            self.queues.send(conn_id, encode(Error(0, ERROR_CODE_BAD_INPUT, text)))
            self._drop(session, now, f"bad input: {exc}")
        self._after_input(now)

    def _account(self, session: ClientSession[Client], completed: bool, now: float) -> None:
        """Count the bytes ``session``'s decoder holds for an incomplete frame, and keep the
        sessions holding one in the order their frames began; past ``max_buffered_bytes``,
        close the oldest (:meth:`_shed`)."""
        after = session.decoder.buffered
        before = session.buffered
        if after == before and not completed:
            return  # the same incomplete frame, no byte added (or nothing buffered)
        self.buffered_bytes += after - before
        session.buffered = after
        partial = self._partial
        cid = session.conn_id
        if not after:
            partial.pop(cid, None)
        elif completed or not before:  # a new frame began in this input
            partial.pop(cid, None)
            partial[cid] = session
            session.partial_since = now
        if self.buffered_bytes > self.buffered_peak:
            self.buffered_peak = self.buffered_bytes
        if self.buffered_bytes > self.config.max_buffered_bytes:
            self._shed(now)

    def _shed(self, now: float) -> None:
        """Close the connections whose incomplete frames are the oldest until the bytes held
        are within ``max_buffered_bytes`` again."""
        bound = self.config.max_buffered_bytes
        while self.buffered_bytes > bound and self._partial:
            victim = next(iter(self._partial.values()))
            age = now - victim.partial_since
            text = (
                f"closed: {self.buffered_bytes} bytes of incomplete frames held, over "
                f"<pyum-limits><max-buffered-bytes> {bound}; this connection's frame "
                f"({victim.buffered} bytes so far) was the oldest, begun {age:.1f} s ago"
            )
            self.refused.buffer_evicted += 1
            self.tally.add(REFUSED_BUFFER, self._who(victim), text)
            self.queues.send(victim.conn_id, encode(Error(0, ERROR_CONNECTION_ERROR, text)))
            self._drop(victim, now, "incomplete frame shed: buffered bytes bound")

    def reset_buffered_peak(self) -> None:
        """Start a new peak of buffered bytes from the current amount."""
        self.buffered_peak = self.buffered_bytes

    def _who(self, session: ClientSession[Client]) -> str:
        """A connection's identity for the log: its client when registered, else its peer."""
        if session.client is not None:
            return session.client.describe()
        return f"{session.peer[0]}:{session.peer[1]}"

    def receive_disconnected(self, conn_id: int, now: float) -> None:
        """Connection ``conn_id`` is gone."""
        session = self.sessions.get(conn_id)
        if session is not None:
            self._drop(session, now, "TCP disconnect", close=False)
        self._after_input(now)

    def receive_writing_paused(self, conn_id: int, paused: bool, now: float) -> None:
        """TCP back-pressure from the adapter (``pause_writing`` / ``resume_writing``): while
        paused, the connection's records stay in its queue instead of the socket buffer.
        Ignored before the record stream is open (nothing is queued then)."""
        session = self.sessions.get(conn_id)
        if session is None or not session.streaming:
            return
        session.receive_writing_paused(paused)
        if not paused and session.queue:
            self.queues.arm(now, now)  # what waited is due now
        self._after_input(now)

    def handle_timer(self, now: float) -> None:
        for due in self.lifetimes.take_due(now):
            if isinstance(due, Expiry):
                self._expire(due, now)
            else:
                self.relay.send_ser(due.source)
        if now >= self._next_sweep:
            self._next_sweep = now + SWEEP_INTERVAL
            self._sweep(now)
        service = self.queues.service_at
        if service is not None and now >= service:
            self.queues.service(now)
        self._after_input(now)

    def _sweep(self, now: float) -> None:
        """The liveness sweep: unregistered past ``registration_timeout``, silent past the max
        lifetime (the SETUP's, at most ``max_silence``), a frame begun ``frame_timeout`` ago."""
        cfg = self.config
        for session in list(self.sessions.values()):
            if session.client is None and now - session.opened > cfg.registration_timeout:
                self.refused.registrations_timed_out += 1
                self.tally.add(
                    TIMED_OUT_REGISTRATION,
                    self._who(session),
                    f"closed: not registered {now - session.opened:.1f} s after connecting "
                    f"(<pyum-limits><registration-timeout> {cfg.registration_timeout * 1000:.0f} ms)",
                )
                self._drop(session, now, "not registered in time")
            elif now - session.last_rx > session.max_lifetime:
                self.refused.connections_timed_out += 1
                self._drop(session, now, "no keepalive within the max lifetime")
        partial = self._partial
        while partial:
            session = next(iter(partial.values()))
            age = now - session.partial_since
            if age <= cfg.frame_timeout:
                break
            self.refused.frames_timed_out += 1
            text = (
                f"closed: a frame incomplete {age:.1f} s after its first byte ({session.buffered} "
                f"bytes so far; <pyum-limits><frame-timeout> {cfg.frame_timeout * 1000:.0f} ms)"
            )
            self.tally.add(TIMED_OUT_FRAME, self._who(session), text)
            self.queues.send(session.conn_id, encode(Error(0, ERROR_CONNECTION_ERROR, text)))
            self._drop(session, now, "frame incomplete in time")

    def next_timer(self) -> float | None:
        deadline = self.lifetimes.next_deadline()
        if self.sessions and (deadline is None or self._next_sweep < deadline):
            deadline = self._next_sweep
        service = self.queues.service_at
        if service is not None and (deadline is None or service < deadline):
            deadline = service
        return deadline

    @property
    def service_deadline(self) -> float | None:
        """When the record queues are serviced next (None: nothing queued)."""
        return self.queues.service_at

    # ----------------------------------------------------------------------------- outputs

    def take_writes(self) -> list[tuple[int, bytes]]:
        """Bytes to write, per connection, in order; each connection appears at most once."""
        return self.queues.take_writes()

    def take_closes(self) -> list[int]:
        """Connections to close (after writing what take_writes returned for them)."""
        return self.queues.take_closes()

    def take_events(self) -> list[SRSEvent]:
        return self.events.take()

    def take_refusals(self) -> list[Refusal]:
        """What the bounds refused since the last call, one :class:`Refusal` per kind and peer
        with a count (for the daemon's rate-limited log lines)."""
        return self.tally.take()

    # ----------------------------------------------------------------------------- queries

    @property
    def connections(self) -> int:
        return len(self.sessions)

    def clients(self) -> list[Client]:
        """Every registered client, connected or inactive (``record_queue_depth`` refreshed)."""
        out = list(self.registry.clients.values())
        for c in out:
            c.stats.record_queue_depth = len(c.queue)
        return out

    def connected_clients(self) -> list[Client]:
        """The clients with a connection (``record_queue_depth`` refreshed)."""
        out = [c for c in self.registry.clients.values() if c.conn is not None]
        for c in out:
            c.stats.record_queue_depth = len(c.queue)
        return out

    def topic_table(self, limit: int) -> tuple[list[tuple[str, int, int]], int]:
        """Up to ``limit`` topics in name order as ``(topic, sources, interested clients)`` (RIR
        interest; wildcard interest is per pattern, not per topic), and the number of topics
        known in all.  Walks the tables: for support pages, not for the data path."""
        return self.registry.topic_table(limit)

    def source_count(self) -> int:
        return len(self.registry.sources)

    def snapshot_stats(self) -> SRSStats:
        """SRS_STATS with the active/inactive counts recomputed from the tables."""
        s = self.stats
        counts = dict.fromkeys(
            ("sir", "rir", "wir", "cnir", "dir", "rtir", "isir", "irir", "iwir", "icnir", "idir", "irtir"), 0
        )  # fmt: skip
        clients = self.registry.clients.values()
        for c in clients:
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
        s.active_clients_count = sum(1 for c in clients if c.conn is not None)
        return s

    # ------------------------------------------------------------------------ the session

    def _frame(self, session: ClientSession[Client], frame: object, now: float) -> None:
        if isinstance(frame, Keepalive):
            if frame.respond:
                self.queues.send(session.conn_id, encode(Keepalive(False, 0)))
            return
        if isinstance(frame, Setup):
            session.receive_setup(frame.max_lifetime_ms, self.config.max_silence)
            return
        if isinstance(frame, Error):
            raise RemoteProtocolError(f"peer sent ERROR 0x{frame.code:x}: {frame.text[:80]}")
        if isinstance(frame, RequestN):
            client = session.client
            if session.streaming and frame.stream_id == session.stream_id:
                assert client is not None
                if frame.request_n <= 0:  # RSocket: request_n must be > 0
                    client.err.client_invalid_srs_message_received_count += 1
                elif session.receive_request_n(frame.request_n):
                    self.queues.arm(now, now)  # what the credit held back is due now
            return
        message = getattr(frame, "message", None)
        if message is None:
            return  # CANCEL, empty payloads, frames we do not use
        if isinstance(message, RegistrationRequest):
            if not isinstance(frame, RequestResponse) or isinstance(frame, RequestFnf):
                raise RemoteProtocolError("registration request outside a REQUEST_RESPONSE")
            self._register(session, frame.stream_id, message, now)
            return
        if isinstance(message, StreamRequest):
            if not isinstance(frame, RequestStream):
                raise RemoteProtocolError("stream request outside a REQUEST_STREAM")
            session.receive_stream_request(frame.stream_id, frame.request_n)
            assert session.client is not None
            self.relay.send_stream_opening(session.client)
            return
        if isinstance(message, RegistrationResponse):
            raise RemoteProtocolError("registration response from a client")
        assert isinstance(message, Batch)
        session.receive_records()
        client = session.client
        assert client is not None
        for rec in message.records:
            self.relay.receive_record(client, rec, now)

    def _register(
        self, session: ClientSession[Client], stream_id: int, req: RegistrationRequest, now: float
    ) -> None:
        session.receive_registration()  # refuses a second registration
        registry = self.registry
        key = (req.session_id, req.client_addr, req.client_port)
        client = registry.clients.get(key)
        host = session.peer[0]
        if client is None:
            if len(registry.clients) >= self.config.max_clients and not self._evict_one(now):
                self.refused.clients += 1
                text = (
                    f"SRS client table full ({self.config.max_clients} clients, all connected; "
                    f"<pyum-limits><max-clients>)"
                )
                who = f"client[{req.client_addr}:{req.client_port}] sessionID[0x{req.session_id:08x}] from {host}"
                self.tally.add(REFUSED_CLIENT, who, text)
                self.queues.send(session.conn_id, encode(Error(0, ERROR_REJECTED_SETUP, text)))
                self._drop(session, now, "client table full")
                return
            client = Client(req, self.stats.clients_next_client_id, host)
            registry.clients[key] = client
        else:
            if client.conn is not None:  # the same context on a new connection: drop the old
                self._drop(client.conn, now, "replaced by a new connection of the same context")
            client.reregister(req, self.stats.clients_next_client_id)
            registry.move_host(client, host)
        session.client = client
        self.stats.clients_next_client_id += 1
        client.conn = session
        s = self.stats
        s.clients_connects_count += 1
        connected = sum(1 for c in self.sessions.values() if c.client is not None)
        s.clients_max_concurrent_connections_count = max(
            s.clients_max_concurrent_connections_count, connected
        )
        registry.set_modes(client)
        response = RegistrationResponse(
            client.client_id,
            local_domain_id=self.config.local_domain_id,
            protocol_version=PROTOCOL_VERSION,
        )
        self.queues.send(session.conn_id, encode(Payload(stream_id, response, complete=True)))
        self.events.add("UM_CLIENT_CONNECT", client, now)

    # --------------------------------------------------------------- disconnect and expiry

    def _drop(
        self, session: ClientSession[Client], now: float, reason: str, *, close: bool = True
    ) -> None:
        """Forget a connection; its client's records become inactive."""
        if self.sessions.pop(session.conn_id, None) is None:
            return
        if session.buffered:
            self.buffered_bytes -= session.buffered
            session.buffered = 0
        self._partial.pop(session.conn_id, None)
        if close:
            self.queues.close(session.conn_id)
        session.close()
        self.queues.forget(session)
        client = session.client
        session.client = None
        if client is None or client.conn is not session:
            return
        client.conn = None
        self.stats.clients_disconnects_count += 1
        self.registry.unset_modes(client)
        if self.lifetimes.client_lost(client, now):
            self.stats.clients_dr_inactive_sir_count += 1
        self.events.add("UM_CLIENT_DISCONNECT", client, now, detail=reason)

    def _expire(self, due: Expiry, now: float) -> None:
        """A lifetime counted from the disconnect at ``due.lost_at`` ran out: delete the
        client's records of ``due.kind`` that were not re-confirmed since."""
        client = due.client
        if client.lost_at != due.lost_at or self.registry.clients.get(client.key) is not client:
            return  # stale: the client disconnected again later, or is gone
        self.relay.expire_unconfirmed(client, due.kind, now)
        if client.conn is None and not client.has_records():
            self.registry.clients.pop(client.key, None)

    def _evict_one(self, now: float) -> bool:
        """Expire the longest-inactive client now, to make room; False if none is inactive."""
        oldest = self.registry.oldest_inactive()
        if oldest is None:
            return False
        self.relay.evict(oldest, now)
        return True

    def _after_input(self, now: float) -> None:
        """End of every input: drop the clients whose queue overflowed, then send the full
        frames and arm the queue service (:meth:`QueueService.after_input`)."""
        for session in self.queues.take_overflowed():
            if session.conn_id in self.sessions:
                self.refused.queue_overflow += 1
                self._drop(session, now, "record queue full: the client does not read")
        self.queues.after_input(now)


assert MAX_STREAM_ID == UNBOUNDED_CREDIT  # RSocket's 31-bit fields
assert APP_TYPE_APPLICATION == 0
