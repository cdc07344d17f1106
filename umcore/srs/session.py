"""One SRS client connection as a state machine, its bounded record queue, and the service of
all queues.

Theory of operation
-------------------
A :class:`ClientSession` is one TCP connection to the SRS (the adapter names it by its integer
``conn_id``).  Its life is the :class:`SessionState` machine, moved by :class:`SessionInput`
along the one table :data:`SESSION_TRANSITIONS`::

    OPEN --SETUP--> SET_UP --REGISTER--> REGISTERED --OPEN_STREAM--> STREAMING <--> PAUSED
      \\_____________REGISTER____________/                             (PAUSE / RESUME)

and CLOSE from any live state to CLOSED.  RSocket's SETUP comes first, once; the registration
request (a REQUEST_RESPONSE) once; the stream request (REQUEST_STREAM) that opens the stream the
SRS pushes record batches on, once, after it; records are accepted once registered.  A peer's
frame the table does not allow raises :class:`~umcore.errors.RemoteProtocolError` (the
connection is closed); an adapter's report it does not allow raises
:class:`~umcore.errors.LocalProtocolError`.  PAUSED is TCP back-pressure (the transport's write
buffer is full): records stay in the session's queue instead of the socket buffer.

The session also holds the stream's RSocket credit (request_n, :data:`UNBOUNDED_CREDIT` meaning
no limit) and its record queue: references to encoded records, shared between sessions.
:meth:`ClientSession.take_frames` cuts the queue into PAYLOAD (Next) frames of at most
``batch-frame-max-record-count`` records and ``batch-frame-max-datagram-size`` bytes within the
credit and a per-service budget (``request-stream-max-msg-count``).

:class:`QueueService` is the ``<clientactor>`` of UM's SRS (see :mod:`umcore.srs.server`): the
bytes waiting per connection, the connections to close, and the service of every session's
queue at ``record-queue-service-interval`` (full frames leave at the end of the input that
filled them).  A queue past ``max_queued_records`` costs its client the connection.
"""

from __future__ import annotations

import enum
import struct
from typing import Any, Generic, Protocol, TypeVar

from umcore.errors import LocalProtocolError, RemoteProtocolError
from umcore.srs.common import DEFAULT_MAX_LIFETIME, UNBOUNDED_CREDIT, Refused, ServerConfig
from umcore.wire.srs import FLAG_COMPLETE, FLAG_NEXT, SRSStreamDecoder


class Owner(Protocol):
    """The registered client a session serves (:class:`umcore.srs.registry.Client`): what the
    queue service counts on it."""

    held_back: int


OwnerT = TypeVar("OwnerT", bound=Owner)


__all__ = [
    "REMOTE_SESSION_INPUTS",
    "SESSION_TRANSITIONS",
    "ClientSession",
    "QueueService",
    "SessionInput",
    "SessionState",
    "payload_frame",
]

_HEAD = struct.Struct("!IH")
_PAYLOAD_NEXT = (0x0A << 10) | FLAG_NEXT
_PAYLOAD_COMPLETE_NEXT = (0x0A << 10) | FLAG_NEXT | FLAG_COMPLETE


class SessionState(enum.Enum):
    """Where one client connection is in the SRS protocol."""

    OPEN = "open"  # TCP connected, nothing received yet
    SET_UP = "set up"  # RSocket SETUP received
    REGISTERED = "registered"  # registration answered; the record stream is not open yet
    STREAMING = "streaming"  # the record stream is open
    PAUSED = "paused"  # streaming, but the transport's write buffer is full
    CLOSED = "closed"  # dropped: the session is forgotten


class SessionInput(enum.Enum):
    """What moves a session: the client's frames and the adapter's reports."""

    SETUP = "SETUP"  # peer: RSocket SETUP
    REGISTER = "registration request"  # peer: REQUEST_RESPONSE carrying the registration
    OPEN_STREAM = "stream request"  # peer: REQUEST_STREAM opening the record stream
    RECORDS = "records"  # peer: a batch of records
    PAUSE = "pause writing"  # adapter: write buffer above its high-water mark
    RESUME = "resume writing"  # adapter: write buffer drained
    CLOSE = "close"  # lost, refused, timed out or replaced


#: The session machine: (state, input) -> next state.  Anything else is refused by _transition.
SESSION_TRANSITIONS: dict[tuple[SessionState, SessionInput], SessionState] = {
    (SessionState.OPEN, SessionInput.SETUP): SessionState.SET_UP,
    (SessionState.OPEN, SessionInput.REGISTER): SessionState.REGISTERED,  # SETUP is optional
    (SessionState.SET_UP, SessionInput.REGISTER): SessionState.REGISTERED,
    (SessionState.REGISTERED, SessionInput.RECORDS): SessionState.REGISTERED,
    (SessionState.REGISTERED, SessionInput.OPEN_STREAM): SessionState.STREAMING,
    (SessionState.STREAMING, SessionInput.RECORDS): SessionState.STREAMING,
    (SessionState.STREAMING, SessionInput.PAUSE): SessionState.PAUSED,
    (SessionState.STREAMING, SessionInput.RESUME): SessionState.STREAMING,
    (SessionState.PAUSED, SessionInput.RECORDS): SessionState.PAUSED,
    (SessionState.PAUSED, SessionInput.PAUSE): SessionState.PAUSED,
    (SessionState.PAUSED, SessionInput.RESUME): SessionState.STREAMING,
    (SessionState.OPEN, SessionInput.CLOSE): SessionState.CLOSED,
    (SessionState.SET_UP, SessionInput.CLOSE): SessionState.CLOSED,
    (SessionState.REGISTERED, SessionInput.CLOSE): SessionState.CLOSED,
    (SessionState.STREAMING, SessionInput.CLOSE): SessionState.CLOSED,
    (SessionState.PAUSED, SessionInput.CLOSE): SessionState.CLOSED,
}
#: Inputs that come from the client: refusing one is the peer's fault (RemoteProtocolError).
REMOTE_SESSION_INPUTS = frozenset(
    {SessionInput.SETUP, SessionInput.REGISTER, SessionInput.OPEN_STREAM, SessionInput.RECORDS}
)
#: States with an open record stream.
_STREAM_OPEN = frozenset({SessionState.STREAMING, SessionState.PAUSED})


def payload_frame(stream_id: int, body: bytes, complete: bool = False) -> bytes:
    """One RSocket PAYLOAD (Next) frame, with its 3-byte length."""
    size = _HEAD.size + len(body)
    flags = _PAYLOAD_COMPLETE_NEXT if complete else _PAYLOAD_NEXT
    return size.to_bytes(3, "big") + _HEAD.pack(stream_id, flags) + body


class ClientSession(Generic[OwnerT]):
    """One client connection: protocol state, stream credit and the bounded record queue."""

    __slots__ = (
        "buffered",
        "client",
        "conn_id",
        "credit",
        "decoder",
        "last_rx",
        "max_lifetime",
        "opened",
        "partial_since",
        "peer",
        "queue",
        "state",
        "stream_id",
        "window_epoch",
        "window_frames",
    )

    def __init__(self, conn_id: int, peer: tuple[str, int], now: float) -> None:
        self.conn_id = conn_id
        self.peer = peer
        self.decoder = SRSStreamDecoder()
        self.state = SessionState.OPEN
        self.client: OwnerT | None = None  # set by the registration
        self.last_rx = now
        self.opened = now  # when the connection was accepted (registration timeout)
        self.buffered = 0  # bytes of an incomplete frame, as last counted by the server
        self.partial_since = now  # when the incomplete frame (if buffered) began
        self.max_lifetime = DEFAULT_MAX_LIFETIME
        self.stream_id = 0  # the stream the SRS pushes batches on; 0 = not open yet
        self.credit = 0  # PAYLOADs the client lets us send; UNBOUNDED_CREDIT = no limit
        self.queue: list[bytes] = []  # records waiting for the next service
        self.window_epoch = -1  # the service window window_frames counts in
        self.window_frames = 0  # frames sent in that window (request-stream-max-msg-count)

    def _transition(self, what: SessionInput) -> SessionState:
        """Move along :data:`SESSION_TRANSITIONS`; an input the table does not allow in this
        state is the client's fault (:class:`RemoteProtocolError`) or the adapter's
        (:class:`LocalProtocolError`)."""
        nxt = SESSION_TRANSITIONS.get((self.state, what))
        if nxt is None:
            message = f"{what.value} while {self.state.value}"
            if what in REMOTE_SESSION_INPUTS:
                raise RemoteProtocolError(message, record="SRS session")
            raise LocalProtocolError(f"connection {self.conn_id}: {message}")
        self.state = nxt
        return nxt

    @property
    def streaming(self) -> bool:
        """The record stream is open (paused or not)."""
        return self.state in _STREAM_OPEN

    @property
    def paused(self) -> bool:
        return self.state is SessionState.PAUSED

    def receive_setup(self, max_lifetime_ms: int, cap: float | None = None) -> None:
        """SETUP: the client's max lifetime, at most ``cap`` seconds (None: as asked)."""
        self._transition(SessionInput.SETUP)
        if max_lifetime_ms > 0:
            self.max_lifetime = max_lifetime_ms / 1000.0
        if cap is not None and self.max_lifetime > cap:
            self.max_lifetime = cap

    def receive_registration(self) -> None:
        """A registration request (the server then sets ``client``)."""
        self._transition(SessionInput.REGISTER)

    def receive_stream_request(self, stream_id: int, request_n: int) -> None:
        self._transition(SessionInput.OPEN_STREAM)
        self.stream_id = stream_id
        self.credit = min(request_n, UNBOUNDED_CREDIT)

    def receive_records(self) -> None:
        self._transition(SessionInput.RECORDS)

    def receive_request_n(self, request_n: int) -> bool:
        """More credit; True when records the credit held back may go now."""
        if self.credit < UNBOUNDED_CREDIT:
            self.credit = min(UNBOUNDED_CREDIT, self.credit + request_n)
            return bool(self.queue)
        return False

    def receive_writing_paused(self, paused: bool) -> None:
        self._transition(SessionInput.PAUSE if paused else SessionInput.RESUME)

    def close(self) -> None:
        self._transition(SessionInput.CLOSE)
        self.queue = []
        self.credit = 0

    def take_frames(self, budget: int, config: ServerConfig, *, full_only: bool) -> bytes:
        """Cut the queue into PAYLOAD frames of at most ``batch-frame-max-record-count``
        records and ``batch-frame-max-datagram-size`` bytes, at most ``budget`` frames and
        within the credit; ``full_only`` keeps a last, partial frame queued.  What is cut is
        removed from the queue and returned as bytes (b"" for nothing)."""
        queue = self.queue
        n = len(queue)
        credit = self.credit
        if credit < UNBOUNDED_CREDIT and credit < budget:
            budget = credit
        if budget <= 0 or not n:
            return b""
        max_records = config.batch_frame_max_record_count
        max_bytes = config.batch_frame_max_datagram_size - 3 - _HEAD.size
        sid = self.stream_id
        frames: list[bytes] = []
        start = size = i = 0
        while i < n:
            raw = queue[i]
            if i > start and (i - start >= max_records or size + len(raw) > max_bytes):
                frames.append(payload_frame(sid, b"".join(queue[start:i])))
                start, size = i, 0
                if len(frames) >= budget:
                    break
            size += len(raw)
            i += 1
        else:
            if not full_only or n - start >= max_records:
                frames.append(payload_frame(sid, b"".join(queue[start:])))
                start = n
        if frames:
            self.window_frames += len(frames)
            if credit < UNBOUNDED_CREDIT:
                self.credit = credit - len(frames)
        if start:
            self.queue = queue[start:]
        return b"".join(frames)


class QueueService:
    """Bytes and closes waiting for the adapter, and the service of the record queues."""

    __slots__ = (
        "_dirty",
        "_epoch",
        "_fresh",
        "_interval",
        "_overflow",
        "closes",
        "config",
        "refused",
        "service_at",
        "writes",
    )

    def __init__(self, config: ServerConfig, refused: Refused) -> None:
        self.config = config
        self.refused = refused
        self.writes: dict[int, list[bytes]] = {}
        self.closes: list[int] = []
        self._dirty: set[ClientSession[Any]] = set()  # sessions with queued records
        self._overflow: set[ClientSession[Any]] = set()  # queues past max_queued_records
        self.service_at: float | None = None  # the next service of the record queues
        self._fresh = False  # records were queued since the service was last armed
        self._epoch = 0  # services so far: numbers the request-stream-max-msg-count windows
        self._interval = config.record_queue_service_interval_ms / 1000.0

    # -- bytes to the adapter

    def send(self, conn_id: int, data: bytes) -> None:
        chunks = self.writes.get(conn_id)
        if chunks is None:
            self.writes[conn_id] = [data]
        else:
            chunks.append(data)

    def close(self, conn_id: int) -> None:
        self.closes.append(conn_id)

    def take_writes(self) -> list[tuple[int, bytes]]:
        writes = self.writes
        if not writes:
            return []
        self.writes = {}
        return [
            (cid, chunks[0] if len(chunks) == 1 else b"".join(chunks))
            for cid, chunks in writes.items()
        ]

    def take_closes(self) -> list[int]:
        closes, self.closes = self.closes, []
        return closes

    # -- the record queues

    def queue(self, session: ClientSession[Any], raw: bytes) -> None:
        """Queue one record for a session (the caller checked that its stream is open)."""
        queue = session.queue
        if len(queue) >= self.config.max_queued_records:
            self._overflow.add(session)  # dropped by take_overflowed: we may be iterating
            return
        queue.append(raw)
        self._dirty.add(session)
        self._fresh = True

    def forget(self, session: ClientSession[Any]) -> None:
        self._dirty.discard(session)
        self._overflow.discard(session)

    def arm(self, due: float, now: float) -> None:
        """Service the queues no later than ``due``."""
        if self.service_at is None or due < self.service_at:
            self.service_at = max(due, now)

    def take_overflowed(self) -> list[ClientSession[Any]]:
        """Sessions whose queue passed ``max_queued_records`` since the last call."""
        if not self._overflow:
            return []
        out = list(self._overflow)
        self._overflow.clear()
        return out

    def after_input(self, now: float) -> None:
        """End of every input: send the *full* frames of the queues that grew (a partial
        frame waits for the service, at most one interval); arm the service for the rest."""
        if self._fresh:
            self._fresh = False
            full = self.config.batch_frame_max_record_count
            for session in self._dirty:
                if len(session.queue) >= full and not session.paused:
                    self._drain(session, full_only=True)
            if self.service_at is None:
                self.service_at = now + self._interval

    def service(self, now: float) -> None:
        """The service of every session's queue (see :mod:`umcore.srs.server`)."""
        self.service_at = None
        again = False  # a session was cut short by max-msg-count: service it next interval
        waiting: set[ClientSession[Any]] = set()
        for session in self._dirty:
            if not session.streaming or not session.queue:
                session.queue = []
                continue
            if session.paused:
                waiting.add(session)  # resume re-arms
                continue
            left = self._drain(session, full_only=False)
            if left:
                if session.client is not None:
                    session.client.held_back += left
                self.refused.records_held_back += left
                waiting.add(session)
                if session.credit > 0:
                    again = True  # only the per-service bound stopped it (REQUEST_N re-arms)
        self._dirty = waiting
        self._epoch += 1  # a new request-stream-max-msg-count window
        if again:
            self.arm(now + self._interval, now)

    def _drain(self, session: ClientSession[Any], *, full_only: bool) -> int:
        """Send what this service window allows of a session's queue; returns the number of
        records left queued."""
        if not session.streaming or not session.queue:
            return len(session.queue)
        if session.window_epoch != self._epoch:
            session.window_epoch = self._epoch
            session.window_frames = 0
        budget = self.config.request_stream_max_msg_count - session.window_frames
        data = session.take_frames(budget, self.config, full_only=full_only)
        if data:
            self.send(session.conn_id, data)
        return len(session.queue)
