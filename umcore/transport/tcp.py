"""Sans-IO TCP transport: the source session, its receiver connections, and the receiver session.

Theory of operation
-------------------
UM's TCP transport (seed 003 6.1, notes 1.1) is plain TCP from each receiver to the source's
listening port; the byte stream is a sequence of LBMC messages, each framed by its own
``msglen`` (there is no other LBT-TCP header, notes wire 7).

**Source side.**  One :class:`TcpSourceSession` per transport session (one listening port);
its topics, batching, fragmentation and TSNIs are :class:`~umcore.transport.batching.BatchingSource`
(shared with LBT-RU and LBT-RM), summarised here.
Many topic sources share it; each gets a *topic index* (``tidx``, advertised in its TIR) and its
own topic sequence numbers.  :meth:`TcpSourceSession.send` frames a message as an LBMC data
message into the session's *implicit batch* and returns the bytes to write to every connected
receiver when the batch is due (seed 8.2): after the message the batch holds at least
``implicit_batching_minimum_length`` bytes (2048) or the caller asked to flush; the batch is sent
*before* adding a message that would push it past ``transport_tcp_datagram_max_size`` (65535);
and :meth:`handle_timer` sends it once its oldest message has waited
``implicit_batching_interval`` (200 ms).  A message bigger than the datagram max size minus the
header reservation is split by *UM fragmentation*: each fragment is its own LBMC data message
with its own sequence number and a FRAG header (first sqn, offset, total length).  An idle topic
gets a TSNI (topic sequence number information: the last sqn sent) every
``transport_topic_sequence_number_info_interval`` (5 s) until it has been idle for
``transport_topic_sequence_number_info_active_threshold`` (60 s).

Each accepted receiver connection is a :class:`SourceConnection`.  The receiver's first message
is an LBMC control message with a TCP-SID header carrying the session id it learned from the TIR
(the session-id confirmation, seed 6.1.1); a wrong id means stale topic resolution, and the source
drops the connection (:class:`~umcore.errors.TransportError`).  Data goes to a connection only
after the confirmation (or at once when ``transport_tcp_use_session_id`` is 0).

**The session's receiver connections** (:class:`SourceConnections`, ``session.peers``) are a
sans-IO core of their own (its own ``next_timer``/``handle_timer``), fed by the listener adapter:
``accept`` (a new connection), ``receive_data``, ``receive_paused``/``receive_resumed`` (the
connection's write buffer went above ``transport_session_maximum_buffer`` / drained below a
quarter of it), ``receive_lost``.  *Listener bounds:* a connection must confirm the session id
within :data:`SESSION_ID_TIMEOUT` (its first frame must be a TCP-SID message of at most
:data:`MAX_CONFIRMATION` bytes: anything else is garbage, closed at once); at most
:data:`MAX_UNCONFIRMED` connections wait for their confirmation, a new one beyond that evicts the
oldest.  Connections to close are taken with :meth:`SourceConnections.take_closing`; each
closure is counted in :class:`ListenerStats`.  *Pacing* (``transport_tcp_multiple_receiver_behavior``,
seed 003 6.1.1, notes transports 1.1): after every change the core recomputes which confirmed
connections the next chunk of the session's output is written to (:attr:`SourceConnections.targets`),
which lose it (:attr:`SourceConnections.lossy`) and whether the session is *blocked* (sends wait):

- ``normal`` (the default, receiver-paced): every confirmed connection gets every chunk; the
  session is blocked while any of them is above its buffer limit.  Any peer that confirms the
  session id can therefore pace the source, as in UM.
- ``source_paced``: never blocked; a connection above its limit loses the chunks written until
  it drained (whole chunks: whole LBMC frames), which its receiver reports as unrecoverable loss
  (a gap in the topic sequence numbers, or a TSNI beyond what it got).
- ``bounded_latency`` [inferred: the notes give only the name, "deprecated 6.9" and the buffer
  limit being per receiver for it]: paced by the fastest receiver -- blocked only while *every*
  confirmed connection is above its limit (then, as ``normal``, nothing is lost); otherwise the
  connections above their limit lose the chunks, as ``source_paced``.

``transport_tcp_multiple_receiver_send_order`` ``random`` shuffles :attr:`targets` before each
chunk (seeded generator: deterministic in tests); ``serial`` keeps the order of confirmation.

**Receiver side.**  One :class:`TcpReceiverSession` per connection to a source session.  It
produces the confirmation message, frames the stream, and hands each data message to the
:class:`DeliveryController` (DC) of its topic index; indexes nobody subscribed to are counted and
dropped (UM's ``lbm_msgs_no_topic_rcved``).  The DC reassembles fragments and delivers in
sequence order.  TCP itself cannot lose or reorder, so a gap (possible only through a DRO or a
misbehaving peer) cannot be repaired: the DC reports it at once as unrecoverable loss, one event
per missing sequence number or one burst event beyond ``delivery_control_maximum_burst_loss``
(1024); loss before the first delivered message is suppressed (leading loss, seed 6.12+).  A
TSNI whose sqn is beyond what was delivered reveals tail loss the same way.  What leading loss
hides -- the source sent up to a TSNI's sqn, or to the first delivered message's first sqn - 1,
before this session delivered anything -- is told to :attr:`DeliveryController.before_start`:
late join and persistence recover it (:meth:`umcore.features.recovery.TopicRecovery.on_tail`).
Bytes that are not valid LBMC raise :class:`~umcore.errors.TransportError`: that costs the peer
its connection.
"""

from __future__ import annotations

import enum
import random
import struct
from collections.abc import Callable, Iterable
from typing import Any

from umcore.config.options import OptionReader
from umcore.errors import TransportError
from umcore.transport.batching import (  # re-exported: TCP's source side lives there
    HEADER_RESERVATION,
    MAX_LBMC_MESSAGE,
    MAX_SINGLES,
    MAX_TSNI_RECORDS,
    BatchingSource,
    SourceStats,
)
from umcore.transport.runs import RUN_MIN as _RUN_MIN
from umcore.transport.runs import run_records, uniform_prefix
from umcore.wire import lbmc

__all__ = [
    "HEADER_RESERVATION",
    "LOSS",
    "LOSS_BURST",
    "MAX_CONFIRMATION",
    "MAX_LBMC_MESSAGE",
    "MAX_TSNI_RECORDS",
    "MAX_UNCONFIRMED",
    "SESSION_ID_TIMEOUT",
    "DeliveryController",
    "ListenerStats",
    "Pacing",
    "SourceConnection",
    "SourceConnections",
    "SourceStats",
    "TcpReceiverSession",
    "TcpSourceSession",
    "encode_tcp_sid",
]

# LBMC data message header: ver/type, next header, msglen, tidx, sqn.
_DATA_HEADER = 12
# Receive buffer bound: one incomplete LBMC message can never exceed MAX_LBMC_MESSAGE bytes, so a
# peer that makes us hold more than this is sending garbage.
MAX_PENDING = 2 * MAX_LBMC_MESSAGE
# Partially reassembled fragmented messages per DC: TCP delivers in order, so one is in progress
# at a time; a larger count means a broken peer.
MAX_REASSEMBLY_BYTES = 64 * 1024 * 1024

# A receiver writes its session-id confirmation as soon as it is connected (seed 003 6.1.1), so
# a connection still silent after this many seconds is no UM receiver (or one we cannot serve
# anyway): it is closed and counted.  Five seconds covers a loaded host and a few WAN round
# trips; TLS connections are bounded before this by their handshake timeout (umcore.aio.tls).
SESSION_ID_TIMEOUT = 5.0
# Connections accepted and still waiting for their confirmation, at most.  A new connection
# beyond this evicts the oldest waiting one (counted), so a flood of idle connections cannot hold
# file descriptors and memory; a genuine receiver confirms within one round trip, so it is
# evicted only by a flood of more than this many connections per round trip.
MAX_UNCONFIRMED = 512
# A confirmation is one CONTROL message with one TCP-SID header (12 bytes); a first frame
# claiming more than this is garbage, closed at once rather than waited for.
MAX_CONFIRMATION = 256

_DATA_HEAD = struct.Struct("!BBHII")

_TIDX_SQN = struct.Struct("!II")
# An LBMC data message's header as three words (ver/type, next header and msglen make the
# first: it equals msglen exactly for a plain data message), topic index, sqn.
_WORDS_FROM = struct.Struct("!III").unpack_from
# Deliveries the one-message case counts in a DC's small int before folding them into the
# counters they stand for: CPython caches the ints -5..256, so counting up to this allocates
# nothing.
MAX_FUSED = 256
_TIDX_SQN_FROM = _TIDX_SQN.unpack_from


LOSS = "unrecoverable_loss"
LOSS_BURST = "unrecoverable_loss_burst"


# ---------------------------------------------------------------------- LBMC helpers
def encode_tcp_sid(session_id: int) -> bytes:
    """The receiver's session-id confirmation: a CONTROL message with one TCP-SID header."""
    return lbmc.encode(lbmc.LBMCMessage(lbmc.MSG_CONTROL, headers=[lbmc.TcpSid(sid=session_id)]))


def _decode(msg: bytes) -> lbmc.LBMCMessage:
    try:
        return lbmc.decode(msg)
    except lbmc.LBMCError as exc:
        raise TransportError(f"bad LBMC message from peer: {exc}") from exc


class TcpSourceSession(BatchingSource):
    """The sans-IO source end of one TCP transport session (see the module docstring)."""

    # Slots as BatchingSource's (see there); ``peers``: the receiver connections' core.
    __slots__ = (
        "peers",
        "session_id",
        "use_session_id",
    )

    def __init__(
        self,
        session_id: int,
        *,
        datagram_max_size: int = 65535,
        batching_minimum_length: int = 2048,
        batching_interval: float = 0.2,
        tsni_interval: float = 5.0,
        tsni_active_threshold: float = 60.0,
        use_session_id: bool = True,
        pacing: Pacing | str = "normal",
        random_order: bool = False,
        rng: random.Random | None = None,
    ) -> None:
        if not 0 < session_id <= 0xFFFFFFFF:
            raise ValueError("a TCP session id is a non-zero 32-bit number")
        super().__init__(
            datagram_max_size=datagram_max_size,
            batching_minimum_length=batching_minimum_length,
            batching_interval=batching_interval,
            tsni_interval=tsni_interval,
            tsni_active_threshold=tsni_active_threshold,
        )
        self.session_id = session_id
        self.use_session_id = use_session_id
        self.peers = SourceConnections(self, Pacing(pacing), random_order=random_order, rng=rng)

    @classmethod
    def from_options(
        cls, session_id: int, source: OptionReader, context: OptionReader
    ) -> TcpSourceSession:
        """A session from its first source's options and its context's (the registry's
        defaults and units)."""
        return cls(
            session_id,
            datagram_max_size=int(context.get("transport_tcp_datagram_max_size")),
            batching_minimum_length=int(source.get("implicit_batching_minimum_length")),
            batching_interval=source.seconds("implicit_batching_interval"),
            tsni_interval=source.seconds("transport_topic_sequence_number_info_interval"),
            tsni_active_threshold=source.seconds(
                "transport_topic_sequence_number_info_active_threshold"
            ),
            use_session_id=bool(source.get("transport_tcp_use_session_id")),
            pacing=str(source.get("transport_tcp_multiple_receiver_behavior")),
            random_order=source.get("transport_tcp_multiple_receiver_send_order") == "random",
        )

    def connection(self) -> SourceConnection:
        """A connection outside :attr:`peers` (its session-id check only)."""
        return SourceConnection(self)

    def send_one(self, tidx: int, payload: bytes | memoryview, now: float) -> bytes | None:
        """:meth:`BatchingSource.send_one` for TCP: a message on its own is its own write
        (no batch list, no join)."""
        t = self.topics[tidx]
        n = len(payload)
        if self.batch_len or t is None or n > self.max_payload:
            return self.send_general(tidx, payload, now, True)
        sqn = t.sqn
        # The next sqn, wrapping at 2**32 without an & (one int object less); the first test
        # compares two one-digit ints (CPython's fast path).
        t.sqn = sqn + 1 if sqn < 0x3FFFFFFF or sqn != 0xFFFFFFFF else 0
        t.last_data = now
        if self._tsni_check is None and self.tsni_interval > 0:
            self._tsni_check = now + self.tsni_interval
            self.timer_dirty = True
        out = _DATA_HEAD.pack(0, 0, _DATA_HEADER + n, tidx, sqn) + payload
        st = self.stats  # SourceStats.count_single inline: one message, one datagram
        k = st.singles
        if k < MAX_SINGLES and n == st.single_n:
            st.singles = k + 1
        else:
            st.restart_singles(n)
        return out


class SourceConnection:
    """A receiver's connection to a source session: checks the session-id confirmation; its
    pacing state is :class:`SourceConnections`'."""

    __slots__ = (
        "_pending",
        "closed",
        "confirmed",
        "deadline",
        "dropped_bytes",
        "dropped_chunks",
        "handle",
        "lossy",
        "paused",
        "refusal",
        "session",
        "stale",
    )

    def __init__(self, session: TcpSourceSession, handle: Any = None) -> None:
        self.session = session
        self.confirmed = not session.use_session_id
        self._pending = bytearray()
        #: The adapter's object for this connection (its transport): what :attr:`targets
        #: <SourceConnections.targets>` lists.
        self.handle = handle
        #: When the confirmation must have come (``now`` base), or None.
        self.deadline: float | None = None
        #: Its write buffer is above the session's limit (told by the adapter).
        self.paused = False
        #: It loses the chunks written now (source_paced / bounded_latency).
        self.lossy = False
        #: Chunks (whole LBMC frames) and bytes not written to it because it was lossy.
        self.dropped_chunks = 0
        self.dropped_bytes = 0
        #: Refused for a stale session id (else, when refused, for garbage).
        self.stale = False
        #: Why the source closed it: "timeout", "evicted", "garbage", "stale"; "" if it did not.
        self.refusal = ""
        self.closed = False

    def receive_data(self, data: bytes | memoryview) -> bool:
        """Bytes from the receiver.  Returns True when the connection just got confirmed.

        Raises :class:`TransportError` for a stale session id or bytes that are not LBMC; before
        the confirmation, for a first message that is not one (or claims more than
        :data:`MAX_CONFIRMATION` bytes).
        """
        if self.closed:
            return False
        pending = self._pending
        pending += data
        if not self.confirmed:
            n = len(pending)
            if n > MAX_CONFIRMATION or (
                n >= 4 and (pending[2] << 8 | pending[3]) > MAX_CONFIRMATION
            ):
                raise TransportError("no session-id confirmation in the receiver's first bytes")
        elif len(pending) > MAX_PENDING:
            raise TransportError("receiver sent more than an LBMC message without framing")
        just = False
        try:
            frames, end = lbmc.split_frames(self._pending)
        except lbmc.LBMCError as exc:
            raise TransportError(str(exc)) from None
        del self._pending[:end]
        for msg in frames:
            hdr = _decode(msg).find(lbmc.TcpSid)
            if hdr is None:
                if not self.confirmed:
                    raise TransportError("the receiver's first message is not a session-id one")
                continue  # other control traffic from receivers is not used by TCP sources
            sid = hdr.sid
            if self.session.use_session_id and sid != self.session.session_id:
                self.stale = True
                raise TransportError(
                    f"stale session id {sid:08x} (this session is {self.session.session_id:08x})"
                )
            if not self.confirmed:
                self.confirmed = just = True
        return just


class Pacing(enum.Enum):
    """``transport_tcp_multiple_receiver_behavior`` (module docstring)."""

    NORMAL = "normal"
    SOURCE_PACED = "source_paced"
    BOUNDED_LATENCY = "bounded_latency"


class ListenerStats:
    """A TCP source session's connection counters."""

    __slots__ = (
        "accepted",
        "confirmed",
        "dropped_bytes",
        "dropped_chunks",
        "evicted",
        "garbage",
        "lossy_episodes",
        "stale",
        "timed_out",
    )

    def __init__(self) -> None:
        self.accepted = 0
        self.confirmed = 0
        #: Closed without confirming in time (:data:`SESSION_ID_TIMEOUT`).
        self.timed_out = 0
        #: Closed unconfirmed to make room (:data:`MAX_UNCONFIRMED`).
        self.evicted = 0
        #: Closed for bytes that are not (or not yet) a receiver's (bad LBMC, no confirmation).
        self.garbage = 0
        #: Closed for a stale session id.
        self.stale = 0
        #: Times a confirmed connection started losing data (source_paced, bounded_latency).
        self.lossy_episodes = 0
        #: Chunks and bytes not written to lossy connections (one per connection it missed).
        self.dropped_chunks = 0
        self.dropped_bytes = 0

    @property
    def refused(self) -> int:
        """Connections closed by the source before or at their confirmation."""
        return self.timed_out + self.evicted + self.garbage + self.stale


class SourceConnections:
    """The receiver connections of one TCP source session: session-id deadlines and pacing
    (module docstring).  Its own sans-IO core: ``next_timer``/``handle_timer``."""

    __slots__ = (
        "_closing",
        "_confirmed",
        "_rng",
        "_unconfirmed",
        "blocked",
        "lossy",
        "pacing",
        "random_order",
        "session",
        "single",
        "stats",
        "targets",
    )

    def __init__(
        self,
        session: TcpSourceSession,
        pacing: Pacing = Pacing.NORMAL,
        *,
        random_order: bool = False,
        rng: random.Random | None = None,
    ) -> None:
        self.session = session
        self.pacing = pacing
        self.random_order = random_order
        self._rng = rng if rng is not None else random.Random()
        self.stats = ListenerStats()
        #: Waiting for their confirmation, oldest first (a dict as an ordered set).
        self._unconfirmed: dict[SourceConnection, None] = {}
        #: Confirmed, in order of confirmation.
        self._confirmed: list[SourceConnection] = []
        self._closing: list[SourceConnection] = []
        #: The handles to write the next chunk to (a new list after each change: a caller may
        #: iterate an old one while a write changes the state).
        self.targets: list[Any] = []
        #: The confirmed connections that lose the next chunk.
        self.lossy: list[SourceConnection] = []
        #: Sends must wait (receiver-paced): see the module docstring.
        self.blocked = False
        #: The one target when there is exactly one and nobody loses data, else None.
        self.single: Any = None

    @property
    def receivers(self) -> int:
        return len(self._confirmed)

    def connections(self) -> list[SourceConnection]:
        """The confirmed connections, in order of confirmation."""
        return list(self._confirmed)

    @property
    def waiting(self) -> int:
        """Connections waiting for their confirmation."""
        return len(self._unconfirmed)

    # -- inputs
    def accept(self, now: float, handle: Any = None) -> SourceConnection:
        """A new connection (``handle``: the adapter's object for it)."""
        c = SourceConnection(self.session, handle)
        self.stats.accepted += 1
        if c.confirmed:  # transport_tcp_use_session_id 0: no confirmation to wait for
            self._confirm(c)
            return c
        c.deadline = now + SESSION_ID_TIMEOUT
        waiting = self._unconfirmed
        waiting[c] = None
        if len(waiting) > MAX_UNCONFIRMED:
            old = next(iter(waiting))
            self.stats.evicted += 1
            old.refusal = "evicted"
            self._close(old)
        return c

    def receive_data(self, c: SourceConnection, data: bytes | memoryview) -> bool:
        """Bytes from connection ``c``: True when it just got confirmed.  Raises
        :class:`TransportError` (counted; the adapter closes it) as
        :meth:`SourceConnection.receive_data` does."""
        try:
            just = c.receive_data(data)
        except TransportError:
            if c.stale:
                self.stats.stale += 1
            else:
                self.stats.garbage += 1
            c.refusal = "stale" if c.stale else "garbage"
            self._forget(c)
            raise
        if just:
            self._unconfirmed.pop(c, None)
            c.deadline = None
            self._confirm(c)
        return just

    def receive_paused(self, c: SourceConnection) -> None:
        """``c``'s write buffer went above the session's limit."""
        c.paused = True
        if c.confirmed and not c.closed:
            self._update()

    def receive_resumed(self, c: SourceConnection) -> None:
        """``c``'s write buffer drained (below a quarter of the limit)."""
        c.paused = False
        if c.confirmed and not c.closed:
            self._update()

    def receive_lost(self, c: SourceConnection) -> None:
        """``c`` is gone (closed by either side)."""
        self._forget(c)

    def count_dropped(self, n: int) -> None:
        """A chunk of ``n`` bytes was written to :attr:`targets`: :attr:`lossy` missed it."""
        st = self.stats
        for c in self.lossy:
            c.dropped_chunks += 1
            c.dropped_bytes += n
            st.dropped_chunks += 1
            st.dropped_bytes += n

    def shuffle(self) -> None:
        """``random`` send order: a new order of :attr:`targets` for the next chunk."""
        if len(self.targets) > 1:
            targets = list(self.targets)
            self._rng.shuffle(targets)
            self.targets = targets

    # -- timers and outputs
    def next_timer(self) -> float | None:
        for c in self._unconfirmed:
            return c.deadline
        return None

    def handle_timer(self, now: float) -> None:
        """Close the connections whose confirmation is overdue (:meth:`take_closing`)."""
        waiting = self._unconfirmed
        while waiting:
            c = next(iter(waiting))
            if c.deadline is not None and c.deadline > now:
                break
            self.stats.timed_out += 1
            c.refusal = "timeout"
            self._close(c)

    def take_closing(self) -> list[SourceConnection]:
        """The connections the adapter must close now (timed out, evicted)."""
        out = self._closing
        if out:
            self._closing = []
        return out

    # -- state
    def _confirm(self, c: SourceConnection) -> None:
        self.stats.confirmed += 1
        self._confirmed.append(c)
        self._update()

    def _close(self, c: SourceConnection) -> None:
        self._forget(c)
        self._closing.append(c)

    def _forget(self, c: SourceConnection) -> None:
        if c.closed:
            return
        c.closed = True
        self._unconfirmed.pop(c, None)
        if c.confirmed and c in self._confirmed:
            self._confirmed.remove(c)
            self._update()

    def _update(self) -> None:
        """Recompute :attr:`targets`, :attr:`lossy`, :attr:`blocked` (module docstring)."""
        conf = self._confirmed
        paused = [c for c in conf if c.paused]
        p = self.pacing
        lossy: list[SourceConnection] = []
        if not paused:
            targets = [c.handle for c in conf]
            blocked = False
        elif p is Pacing.NORMAL or (p is Pacing.BOUNDED_LATENCY and len(paused) == len(conf)):
            # Receiver-paced: everyone gets everything, sends wait.
            targets = [c.handle for c in conf]
            blocked = True
        else:  # source_paced, or bounded_latency with a receiver able to take more
            targets = [c.handle for c in conf if not c.paused]
            lossy = paused
            blocked = False
        for c in conf:
            if c.lossy != (c in lossy):
                c.lossy = not c.lossy
                if c.lossy:
                    self.stats.lossy_episodes += 1
        self.targets = targets
        self.lossy = lossy
        self.blocked = blocked
        self.single = targets[0] if len(targets) == 1 and not lossy else None


# ---------------------------------------------------------------------- receiver side
class DeliveryController:
    """Ordered delivery and reassembly for one topic source (one tidx on one session)."""

    __slots__ = (
        "_delivered",
        "_frag_buf",
        "_frag_first",
        "_frag_got",
        "_frag_total",
        "before_start",
        "deliver",
        "deliver_many",
        "deliver_plain",
        "expected",
        "fragment",
        "fused",
        "fused_n",
        "headers",
        "loss",
        "max_burst_loss",
        "reassemble",
        "started",
        "tidx",
        "topic",
        "unrecoverable",
    )

    def __init__(
        self,
        tidx: int,
        topic: str,
        deliver: Callable[[int, bytes | memoryview], None],
        loss: Callable[[str, int, int], None],
        *,
        max_burst_loss: int = 1024,
    ) -> None:
        self.tidx = tidx
        self.topic = topic
        self.deliver = deliver  # (sqn, payload): payload valid during the call only
        #: ``deliver`` for a plain data message whose payload is ``bytes`` (no extra headers,
        #: not a fragment): the receiver core's in-sequence paths call this one, which the
        #: owner may point at a narrower function (one subscriber with a callback).
        self.deliver_plain: Callable[[int, bytes], None] = deliver
        #: Optional bulk form of ``deliver``: ``(records, count)``, ``count`` in-sequence
        #: ``(sqn, payload)`` pairs (payload bytes, records iterated once), for a run of plain
        #: data messages parsed in one pass (:meth:`TcpReceiverSession.receive_data`).
        self.deliver_many: Callable[[Iterable[tuple[int, bytes]], int], None] | None = None
        self.loss = loss  # (kind, first_sqn, count)
        #: Told the newest sqn the source sent before this DC's first delivery, since leading
        #: loss is not reported: a TSNI's before it, and the first delivered message's first
        #: sqn - 1 just before it.  The recovery layer (late join, persistence) decides
        #: whether to recover them (umcore.features.recovery.TopicRecovery.on_tail); None: no one.
        self.before_start: Callable[[int], None] | None = None
        self.max_burst_loss = max_burst_loss
        self.expected = 0
        self.started = False  # leading loss is suppressed until the first delivery
        self._delivered = 0
        #: Deliveries of :meth:`TcpReceiverSession.receive_data`'s one-message case not yet
        #: added to the counters they stand for (the DC's, the session's): a small int, so
        #: counting allocates nothing (CPython caches -5..256; a large counter's ``+= 1``
        #: allocates); ``fused_n`` is the length of each of those reads.  Folded by the
        #: session (at :data:`MAX_FUSED`, on another length, before statistics are read).
        self.fused = 0
        self.fused_n = 0
        self.unrecoverable = 0
        #: The extra LBMC headers (REQUEST, APPHDR_CHAIN...) of the message being delivered,
        #: valid during the ``deliver`` call only; () for plain data (the fast path).
        self.headers: tuple[lbmc.Header, ...] = ()
        #: False for ``ordered_delivery`` 0 (seed 8.8.3): each fragment is delivered on its
        #: own, with :attr:`fragment` = (first sqn, offset, total length) during the call.
        self.reassemble = True
        self.fragment: tuple[int, int, int] | None = None
        self._frag_buf: bytearray | None = None
        self._frag_first = 0
        self._frag_total = 0
        self._frag_got = 0

    @property
    def delivered(self) -> int:
        """Messages delivered (the one-message case's not yet folded included)."""
        return self._delivered + self.fused

    def _gap(self, sqn: int) -> bool:
        """Account for messages expected..sqn-1 missing; False if ``sqn`` is old (duplicate)."""
        if not self.started:
            self.expected = sqn
            return True
        diff = (sqn - self.expected) & 0xFFFFFFFF
        if diff == 0:
            return True
        if diff >= 0x80000000:
            return False  # behind us: a duplicate
        if diff > self.max_burst_loss:
            self.unrecoverable += 1
            self.loss(LOSS_BURST, self.expected, diff)
        else:
            self.unrecoverable += diff
            for k in range(diff):
                self.loss(LOSS, (self.expected + k) & 0xFFFFFFFF, 1)
        self._frag_buf = None
        self.expected = sqn
        return True

    def on_data(self, sqn: int, payload: bytes | memoryview) -> None:
        if sqn != self.expected and not self._gap(sqn):
            return
        if not self._delivered and self.before_start is not None:
            self.before_start((sqn - 1) & 0xFFFFFFFF)
        self.expected = (sqn + 1) & 0xFFFFFFFF
        self._frag_buf = None
        self.started = True
        self._delivered += 1
        deliver = self.deliver  # a slot holding a callback: calling self.deliver(...) directly
        deliver(sqn, payload)  # would take CPython 3.11's generic method lookup

    def on_fragment(
        self, sqn: int, first: int, offset: int, total: int, payload: bytes | memoryview
    ) -> None:
        if sqn != self.expected and not self._gap(sqn):
            return
        self.expected = (sqn + 1) & 0xFFFFFFFF
        if not self.reassemble:
            if not self._delivered and self.before_start is not None:
                self.before_start((sqn - 1) & 0xFFFFFFFF)
            self.started = True
            self._delivered += 1
            self.fragment = (first, offset, total)
            try:
                self.deliver(sqn, payload)
            finally:
                self.fragment = None
            return
        if offset == 0:
            if total > MAX_REASSEMBLY_BYTES:
                raise TransportError(f"fragmented message of {total} bytes exceeds our limit")
            self._frag_buf = bytearray(total)
            self._frag_first, self._frag_total, self._frag_got = first, total, 0
        buf = self._frag_buf
        if buf is None or first != self._frag_first:
            return  # joined mid-message: leading partial message, silently dropped
        end = offset + len(payload)
        if end > self._frag_total:
            raise TransportError("fragment beyond the message's total length")
        buf[offset:end] = payload
        self._frag_got += len(payload)
        if self._frag_got >= self._frag_total:
            self._frag_buf = None
            if not self._delivered and self.before_start is not None:
                self.before_start((self._frag_first - 1) & 0xFFFFFFFF)
            self.started = True
            self._delivered += 1
            # Seed 8.4: a reassembled message carries the sqn of its last fragment.
            self.deliver(sqn, bytes(buf))

    def on_tsni(self, sqn: int) -> None:
        """The source's last sent sqn is ``sqn``: anything up to it not seen is lost (before
        the first delivery: leading loss, told to :attr:`before_start`)."""
        if not self.started:
            if not self._delivered and self.before_start is not None:
                self.before_start(sqn)
            return
        nxt = (sqn + 1) & 0xFFFFFFFF
        diff = (nxt - self.expected) & 0xFFFFFFFF
        if diff and diff < 0x80000000:
            self._gap(nxt)


class ReceiverStats:
    __slots__ = ("bytes_received", "messages_no_topic", "messages_received", "tsnis_received")

    def __init__(self) -> None:
        self.bytes_received = 0
        self.messages_received = 0
        self.messages_no_topic = 0
        self.tsnis_received = 0


class TcpReceiverSession:
    """The sans-IO receiver end of one TCP connection to a source session."""

    def __init__(self, session_id: int | None) -> None:
        self.session_id = session_id
        self.dcs: dict[int, DeliveryController] = {}
        self._stats = ReceiverStats()
        self.active = False  # set by the first bytes from the source: BOS time
        #: Called once, on the first bytes from the source, before anything is delivered.
        self.on_active: Callable[[], None] | None = None
        #: A raw receiver's sink (umcore.engine.raw): called once per read with the read's
        #: whole LBMC frames (a list, never empty), data and control, in arrival order, before
        #: the DCs see them -- one call per read, so a store handles a read's frames in one go.
        self.frame_sink: Callable[[list[bytes]], None] | None = None
        #: Told every CONTROL message other than a plain TSNI (a persistent source's SRI, ...):
        #: the engine's persistence glue sets it; None = such messages are dropped.
        self.control_sink: Callable[[lbmc.LBMCMessage], None] | None = None
        self._pending = bytearray()

    def connect_message(self) -> bytes | None:
        """What to send right after connecting: the session-id confirmation (TCP-SID header)."""
        if self.session_id is None:
            return None
        return encode_tcp_sid(self.session_id)

    def subscribe(self, dc: DeliveryController) -> None:
        self.dcs[dc.tidx] = dc

    def unsubscribe(self, tidx: int) -> None:
        dc = self.dcs.pop(tidx, None)
        if dc is not None:
            self._fold(dc)

    @property
    def stats(self) -> ReceiverStats:
        """The session's counters, up to date (the DCs' one-message counts folded in)."""
        for dc in self.dcs.values():
            if dc.fused:
                self._fold(dc)
        return self._stats

    def _fold(self, dc: DeliveryController) -> None:
        """Add a DC's one-message count (:attr:`DeliveryController.fused`) to the counters it
        stands for."""
        k = dc.fused
        if k:
            dc.fused = 0
            dc._delivered += k
            st = self._stats
            st.messages_received += k
            st.bytes_received += k * dc.fused_n

    def _refold(self, dc: DeliveryController, n: int) -> None:
        """:meth:`_fold`, then count one one-message read of ``n`` bytes."""
        self._fold(dc)
        dc.fused = 1
        dc.fused_n = n

    def receive_data(self, data: bytes | memoryview) -> bool:
        """Bytes from the source; delivers through the DCs.  Returns True on the first bytes
        (the session became active: time for BOS).  Raises TransportError on garbage."""
        # Fast path (the latency case): the read is exactly one plain data message, nothing
        # pending, for a DC that expects it; counted in the DC's small ints (``fused``).
        # Guard clauses, each falling back right after its test: CPython 3.11 specialises a
        # comparison only when a short conditional jump follows it.
        n = len(data)
        if n < 12 or self.frame_sink is not None or self._pending or not self.active:
            return self._receive(data)  # (12: _DATA_HEADER, a literal here: no global load)
        if type(data) is not bytes:
            return self._receive(data)
        # The first word is version/type 0, next header 0 and msglen: equal to the read's
        # length exactly when the read is one plain data message.
        word, tidx, sqn = _WORDS_FROM(data)
        if word != n:
            return self._receive(data)
        dc = self.dcs.get(tidx)
        if dc is None:
            return self._receive(data)
        if sqn != dc.expected or not dc.started or dc._frag_buf is not None:
            return self._receive(data)
        # The next sqn, wrapping at 2**32 without an & (one int object less); the first test
        # compares two one-digit ints (CPython's fast path).
        dc.expected = sqn + 1 if sqn < 0x3FFFFFFF or sqn != 0xFFFFFFFF else 0
        k = dc.fused
        if k < MAX_FUSED and n == dc.fused_n:
            dc.fused = k + 1
        else:
            self._refold(dc, n)
        deliver = dc.deliver_plain  # a slot holding a callback: called from a local
        deliver(sqn, data[_DATA_HEADER:])
        return False

    def _receive(self, data: bytes | memoryview) -> bool:
        """:meth:`receive_data` for everything but its one-message case."""
        first = not self.active
        if first:
            self.active = True
            if self.on_active is not None:
                self.on_active()
        if self.frame_sink is not None:
            self._receive_frames(data)
        else:
            self._general(data)
        return first

    def _receive_frames(self, data: bytes | memoryview) -> None:
        """A raw receiver's path: the read's whole frames to :attr:`frame_sink`, then to the DCs."""
        pending = self._pending
        pending += data
        try:
            frames, pos = lbmc.split_frames(pending)
        except lbmc.LBMCError as exc:
            raise TransportError(str(exc)) from None
        tail = bytes(pending[pos:])
        pending.clear()
        if len(tail) > MAX_PENDING:
            raise TransportError("source sent more than an LBMC message without framing")
        sink = self.frame_sink
        assert sink is not None
        if frames:
            sink(frames)
        if self.dcs and frames:
            self._general(b"".join(frames))
        else:
            self._stats.bytes_received += pos
        pending += tail

    def _general(self, data: bytes | memoryview) -> None:
        """The general path: any bytes, any framing (module docstring)."""
        st = self._stats
        st.bytes_received += len(data)
        pending = self._pending
        # One immutable buffer per call, so payloads are plain ``bytes`` slices (one copy each,
        # which the receiver needs anyway: a delivered message outlives this call).
        if pending:
            pending += data
            buf = bytes(pending)
        else:
            buf = data if type(data) is bytes else bytes(data)
        end = len(buf)
        pos = 0
        dcs = self.dcs
        unpack = _DATA_HEAD.unpack_from
        received = 0
        norun = 0
        # This loop is the LBT-TCP stream framing (msglen-delimited LBMC messages) with a fast
        # path for plain data messages; every other message goes through the LBMC codec.
        while end - pos >= 4:
            msglen = buf[pos + 2] << 8 | buf[pos + 3]
            if msglen < 4:
                raise TransportError(f"LBMC msglen {msglen} at stream offset {pos}")
            nxt = pos + msglen
            if nxt > end:
                break
            if msglen >= _DATA_HEADER and buf[pos] == 0 and buf[pos + 1] == 0:
                if pos >= norun and end - nxt >= msglen * _RUN_MIN:
                    done = self._run(buf, pos, msglen, end)
                    if done > 0:
                        received += done
                        pos += done * msglen
                        continue
                    # Not a deliverable run: no new attempt inside it (bounds the work a peer
                    # that reorders or mixes lengths can cause to O(n log n) per read).
                    norun = pos - done * msglen
                _, _, _, tidx, sqn = unpack(buf, pos)
                received += 1
                dc = dcs.get(tidx)
                if dc is None:
                    st.messages_no_topic += 1
                elif sqn == dc.expected and dc.started and dc._frag_buf is None:
                    dc.expected = (sqn + 1) & 0xFFFFFFFF
                    dc._delivered += 1
                    deliver = dc.deliver_plain
                    deliver(sqn, buf[pos + _DATA_HEADER : nxt])
                else:
                    dc.on_data(sqn, buf[pos + _DATA_HEADER : nxt])
            else:
                self._slow(buf[pos:nxt])
            pos = nxt
        st.messages_received += received
        if pos == end:
            if pending:
                pending.clear()
        elif pending:
            del pending[:pos]
        else:
            pending += buf[pos:]
        if len(pending) > MAX_PENDING:
            raise TransportError("source sent more than an LBMC message without framing")

    def _run(self, buf: bytes, pos: int, msglen: int, end: int) -> int:
        """Deliver a run of plain data messages of one length, one topic index and consecutive
        sequence numbers starting at ``pos`` in one pass (C-level parsing); returns how many.
        When there is no such run of at least :data:`_RUN_MIN` or its DC is not in sequence it
        returns minus the number of messages the caller should take one by one (that path
        handles every case) before trying again."""
        k = (end - pos) // msglen
        stop = pos + k * msglen
        # Every message of the run has version/type 0, no chained header, this msglen and this
        # tidx: compare the bytes at each of those offsets (strided slices) with the first's.
        k = uniform_prefix(buf, pos, stop, msglen, k)
        if k < _RUN_MIN:
            return -k
        tidx, sqn = _TIDX_SQN.unpack_from(buf, pos + 4)
        dc = self.dcs.get(tidx)
        if dc is None:
            self._stats.messages_no_topic += k
            return k
        if not dc.started and dc._delivered:
            # Started once, not now: a DC that routes every message through on_data (DRO
            # reliable loss while it holds messages back, umcore.features.droloss): the whole
            # run one by one.  Not -1: each next message would scan the rest of the read again
            # (quadratic per read).  A DC that never delivered takes its first message alone.
            return -k
        if not (dc.started and dc.expected == sqn and dc._frag_buf is None):
            return -1  # the DC has a gap or a reassembly to handle first
        records = run_records(buf, pos, msglen, k, sqn)
        if records is None:
            return -k  # wrapping or not consecutive: message by message
        last = sqn + k
        dc.expected = last & 0xFFFFFFFF
        dc._delivered += k
        many = dc.deliver_many
        if many is not None:
            many(records, k)
        else:
            deliver = dc.deliver
            for sqn, payload in records:
                deliver(sqn, payload)
        return k

    def _slow(self, msg: bytes) -> None:
        """Any LBMC message other than plain data: fragments, TSNI, unknown control."""
        m = _decode(msg)
        st = self._stats
        if m.msg_type in (lbmc.MSG_DATA, lbmc.MSG_RETRANS):
            st.messages_received += 1
            dc = self.dcs.get(m.tidx)
            if dc is None:
                st.messages_no_topic += 1
                return
            frag = m.find(lbmc.Frag)
            dc.headers = tuple(h for h in m.headers if type(h) is not lbmc.Frag)
            try:
                if frag is None:
                    dc.on_data(m.sqn, m.payload)
                else:
                    dc.on_fragment(m.sqn, frag.first_sqn, frag.offset, frag.total_len, m.payload)
            finally:
                dc.headers = ()
        elif m.msg_type == lbmc.MSG_CONTROL:
            for tsni in m.find_all(lbmc.Tsni):
                st.tsnis_received += 1
                for tidx, sqn in tsni.records:
                    dc = self.dcs.get(tidx)
                    if dc is not None:
                        dc.on_tsni(sqn)
            sink = self.control_sink
            if sink is not None and any(type(h) is not lbmc.Tsni for h in m.headers):
                sink(m)
