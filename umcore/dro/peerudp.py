"""The UDP data link of a DRO peer portal (``<udp>``): LBT-RU both ways, sans-IO (rank 2).

Theory of operation
-------------------
With ``<udp>`` under a ``<peer>`` (notes A3, "UDP peer link"), the portal's TCP connection
carries only the DROs' control traffic (hello, keepalive, route information, interest, source
advertisements) and the data frames travel over UDP "using the same reliable-unicast protocol
as LBT-RU".  One :class:`PeerUdp` is one connection's UDP session pair:

* an :class:`~umcore.transport.lbtru.LbtruSource` (our session id, chosen per connection) whose
  one client is the other DRO's receiver: DATA datagrams, session messages, NCFs and
  retransmissions, under the portal's own ``<peer-rate-limit>``;
* an :class:`~umcore.transport.lbtru.LbtruReceiver` of the other DRO's session (its id learned
  in the handshake): connection requests, ACKs, NAKs.

Both share the one UDP socket the adapter binds to ``<udp><port>``; a datagram is the source's
(CREQ, ACK, NAK) or the receiver's (DATA, SM, NCF, RST) by its LBT-RU type.  The session ids
keep a new connection's sessions apart from datagrams of an old one still in flight.

Handshake (:mod:`umcore.dro.peer` sends it over TCP): the initiator sends its UDP port and
session id, the acceptor records them (and the initiator's IP as seen on TCP, which is the
adapter's business) and answers with its own; each side then calls :meth:`PeerUdp.start` with
the other's session id and its receiver connects (CREQ every ``<connect attempt-interval>``, at
most ``max-attempts``).  The link is :attr:`~PeerUdp.up` once our receiver is connected *and*
our source has the other DRO's receiver as its client: from then on every DATA datagram we
send has a sequence number the other side starts at or after, so nothing sent is missed.

Data: :meth:`send_data` frames exactly as the TCP link does (:mod:`umcore.dro.peer`): a source
is bound to a topic index by an LBMC control message (OTID + TOPICNAME + TOPIC_IDX) in the same
stream, then each frame is a bare 12-byte-header LBMC data message.  Frames gather in one open
datagram that closes before it would pass :data:`UDP_DATAGRAM_MAX` and whenever the adapter
takes output (:meth:`take_datagrams`).  The receiver hands each accepted datagram's frames to
a reorder buffer keyed by the LBT-RU sequence number: frames come out in the order they were
sent; a datagram LBT-RU gives up on (``unrecovered_txw``/``unrecovered_tmo``) is skipped and
counted in :attr:`PeerUdp.datagrams_unrecovered` (the frames' originating sequence numbers then
show the gap to the receivers downstream, as a lossy TRD would).

Failure: the receiver ending (no answer to ``max-attempts`` connection requests, or nothing
from the other DRO for ``<session-message activity-timeout>``) or the source losing its client
(the other receiver silent as long) is :attr:`PeerUdp.failure`; the peer link then drops both
links and the initiator reconnects them (notes: "if either fails the DRO disconnects and
reconnects both").

``<udp>`` children map to LBT-RU options (notes A3): ``transmission-window`` ->
``transport_lbtru_transmission_window_size/limit``; ``peer-rate-limit`` -> the data and
retransmit rate limits and rate interval (a limiter per peer portal); ``nak-handling`` -> the
receiver's NAK back-offs, suppress and generation intervals, ``send_naks``, and the source's
``ignore_interval`` (100 ms here, not LBT-RU's 500); ``session-message`` -> the source's SM
minimum/maximum intervals, the receiver's activity timeout and the source's client activity
timeout; ``connect`` -> ``transport_lbtru_connect_interval`` / ``maximum_connect_attempts``.
The ACK interval is LBT-RU's default (``transport_lbtru_acknowledgement_interval``).
``receive-buffer``/``send-buffer`` are the adapter's socket buffers; ``multiple-receive-max-
datagrams`` (recvmmsg) and ``coalesce-threshold`` (sendmsg) have no asyncio equivalent and only
parse.  Time is a parameter; ``next_timer()``/``handle_timer(now)`` drive both sessions.
"""

from __future__ import annotations

import random
import struct
from collections.abc import Callable
from dataclasses import dataclass

from umcore.config.dro import Udp
from umcore.config.options import lookup
from umcore.dro.events import SourceKey
from umcore.errors import LocalProtocolError, RemoteProtocolError
from umcore.transport.lbtru import LbtruReceiver, LbtruSource, RuReceiverConfig, RuSourceConfig
from umcore.transport.ratelimit import RateLimiter
from umcore.wire import lbmc
from umcore.wire import lbtru as w

__all__ = [
    "MAX_REORDER_BYTES",
    "UDP_DATAGRAM_MAX",
    "PeerUdp",
    "UdpFailure",
]

# UM hard-codes the UDP peer link's datagram size "above 65,000 bytes" and has no setting for
# it (notes A3): ours, LBT-RU header included, fits one IPv4 UDP datagram (65,507).
UDP_DATAGRAM_MAX = 65_000
# Bytes of frames held behind a gap the receiver is still recovering.  At the default
# peer-rate-limit (10 Mbit/s) a gap held for the whole 10 s generation interval is 12.5 MB;
# past this bound the oldest gap is given up on (counted) rather than growing without limit.
MAX_REORDER_BYTES = 64 << 20
# Sources bound to topic indices on one UDP session, each way (as the TCP link's bound).
MAX_UDP_SOURCES = 1 << 20
# The one client of our source: the other DRO's receiver (the adapter knows its address).
PEER = "peer"
# An OTID is 32 opaque bytes (as on the TCP link).
OTID_SIZE = 32

_M = 0xFFFFFFFF
_HALF = 0x80000000
_DATA_HDR = struct.Struct("!BBHII")  # ver/type 0 (data), next_hdr 0, msglen, tidx, sqn
_DATA_HDR_LEN = _DATA_HDR.size
_pack_data = _DATA_HDR.pack
_unpack_data = _DATA_HDR.unpack_from
# LBT-RU types the other DRO's source sends (to our receiver); the rest go to our source.
_TO_RECEIVER = frozenset({w.TYPE_DATA, w.TYPE_SM, w.TYPE_NCF, w.TYPE_RST})
_TO_SOURCE = frozenset({w.TYPE_NAK, w.TYPE_ACK, w.TYPE_CREQ})
# The largest data message (LBMC's u16 msglen); what one datagram holds is less still.
_MAX_DATA_MSG = min(lbmc.MAX_LBMC_MESSAGE, UDP_DATAGRAM_MAX - 20 - 8)
_ACK_INTERVAL_MS = int(lookup("receiver", "transport_lbtru_acknowledgement_interval").default)


@dataclass(frozen=True, slots=True)
class UdpFailure:
    """Why the UDP link failed (the peer link drops both links with this reason)."""

    reason: str


def source_config(udp: Udp) -> RuSourceConfig:
    """The LBT-RU source settings of a ``<udp>`` (module docstring)."""
    sm, nak, txw = udp.session_message, udp.nak_handling, udp.transmission_window
    return RuSourceConfig(
        client_activity_timeout=sm.activity_timeout / 1000,
        use_session_id=True,
        datagram_max_size=UDP_DATAGRAM_MAX,
        sm_minimum_interval=sm.min_interval / 1000,
        sm_maximum_interval=sm.max_interval / 1000,
        ignore_interval=nak.ignore_interval / 1000,
        transmission_window_size=txw.size,
        transmission_window_limit=txw.limit,
    )


def receiver_config(udp: Udp) -> RuReceiverConfig:
    """The LBT-RU receiver settings of a ``<udp>`` (module docstring)."""
    sm, nak, conn = udp.session_message, udp.nak_handling, udp.connect
    return RuReceiverConfig(
        connect_interval=conn.attempt_interval / 1000,
        maximum_connect_attempts=conn.max_attempts,
        acknowledgement_interval=_ACK_INTERVAL_MS / 1000,
        activity_timeout=sm.activity_timeout / 1000,
        nak_initial_backoff_interval=nak.initial_backoff_interval / 1000,
        nak_backoff_interval=nak.backoff_interval / 1000,
        nak_generation_interval=nak.generation_interval / 1000,
        nak_suppress_interval=nak.suppress_interval / 1000,
        send_naks=nak.send_naks == "yes",
    )


class _Receiver(LbtruReceiver):
    """An LBT-RU receiver that hands each DATA datagram it accepts (the first copy; not a
    duplicate, not a retransmission before the stream started) to ``accept`` with its
    transport sequence number, the datagram and the offset of its LBMC messages."""

    def __init__(
        self,
        session_id: int,
        config: RuReceiverConfig,
        now: float,
        rng: random.Random,
        accept: Callable[[int, bytes, int], None],
    ) -> None:
        super().__init__(session_id, config, now, rng)
        self.accept = accept

    def receive_data(
        self, sqn: int, trail: int, rx: bool, data: bytes | memoryview, off: int, now: float
    ) -> None:
        dups = self.stats.duplicate_data
        super().receive_data(sqn, trail, rx, data, off, now)
        if self.started and self.stats.duplicate_data == dups:
            self.accept(sqn, data if type(data) is bytes else bytes(data), off)


class PeerUdp:
    """One connection's UDP data link (see the module docstring)."""

    def __init__(
        self,
        udp: Udp,
        now: float,
        *,
        rng: random.Random | None = None,
        limiter: RateLimiter | None = None,
    ) -> None:
        """``limiter``: the portal's ``<peer-rate-limit>`` buckets (one per portal, kept across
        connections); a new one when None."""
        self.config = udp
        self.rng = rng or random.Random()
        rl = udp.peer_rate_limit
        self.limiter = limiter or RateLimiter(rl.data, rl.retransmit, rl.interval / 1000, now)
        #: Our source's LBT-RU session id (sent to the other DRO in the handshake).
        self.session_id = self.rng.randrange(1, _M + 1)
        self.source = LbtruSource(self.session_id, source_config(udp), self.limiter, now)
        self.receiver: _Receiver | None = None
        self.failure: UdpFailure | None = None
        self.connected_at: float | None = None
        #: Both sessions connected and no failure: data may flow.
        self.up = False
        #: Up and not held back by the rate limiter (the portal keeps data in its queue).
        self.writable = False
        self._rcfg = receiver_config(udp)
        self._open = bytearray()
        self._room = self.source.max_size  # the LBMC bytes one DATA datagram holds
        self._bind_out: dict[SourceKey, int] = {}
        self._bind_in: dict[int, SourceKey] = {}
        self._next_tidx = 0
        self._held: dict[int, tuple[bytes, int]] = {}  # transport sqn -> (datagram, offset)
        self._held_bytes = 0
        self._next: int | None = None
        self._frames: list[tuple[SourceKey, int, memoryview]] = []
        #: Datagrams LBT-RU gave up on (their frames never came out), reorder-buffer overflows.
        self.datagrams_unrecovered = 0
        self.reorder_overflows = 0
        #: Datagrams dropped before the receiver existed, garbage, or after a failure.
        self.dgrams_dropped_early = 0
        self.dgrams_dropped_garbage = 0
        #: Frames of a topic index nothing bound (a confused or newer peer).
        self.frames_unknown_source = 0
        #: Frames and their payload bytes sent / handed up.
        self.frames_sent = 0
        self.frame_bytes_sent = 0
        self.frames_rcvd = 0
        self.frame_bytes_rcvd = 0

    # --- session --------------------------------------------------------------------------

    def start(self, peer_session_id: int, now: float) -> None:
        """The other DRO's UDP port is known (the adapter sends there): connect our receiver
        to its session ``peer_session_id``."""
        if self.receiver is not None:
            raise LocalProtocolError("the UDP peer link is already started")
        if not 0 < peer_session_id <= _M:
            raise RemoteProtocolError(f"UDP session id {peer_session_id} is not 1..2**32-1")
        rcv = _Receiver(peer_session_id, self._rcfg, now, self.rng, self._accept)
        self.receiver = rcv
        rcv.connect(now)
        self._check(now)

    @property
    def started(self) -> bool:
        return self.receiver is not None

    def _check(self, now: float) -> None:
        """After every input: failures, then :attr:`up` and :attr:`writable`."""
        if self.failure is None:
            self._check_failure()
        r = self.receiver
        self.up = (
            self.failure is None and r is not None and r.connected and bool(self.source.clients)
        )
        self.writable = self.up and not self.source.blocked
        if self.connected_at is None and self.up:
            self.connected_at = now

    def _check_failure(self) -> None:
        for kind, _addr in self.source.events:
            if kind == "disconnect":
                self._fail(
                    "the other DRO's UDP receiver was silent for "
                    f"{self.config.session_message.activity_timeout} ms"
                )
        self.source.events.clear()
        r = self.receiver
        if r is not None and r.ended:
            if r.connected:
                self._fail(
                    "nothing received on the UDP link for "
                    f"{self.config.session_message.activity_timeout} ms (activity-timeout)"
                )
            else:
                c = self.config.connect
                self._fail(
                    f"no answer to {c.max_attempts} UDP connection requests "
                    f"({c.attempt_interval} ms apart)"
                )

    def _fail(self, reason: str) -> None:
        if self.failure is None:
            self.failure = UdpFailure(reason)

    # --- sending --------------------------------------------------------------------------

    def send_data(self, source: SourceKey, sqn: int, data: bytes | memoryview, now: float) -> bool:
        """One frame of ``source`` (``sqn``: its originating sequence number) into the open
        datagram; False (nothing sent) when the link is not up."""
        if not self.up:
            return False
        n = len(data)
        size = _DATA_HDR_LEN + n
        tidx = self._bind_out.get(source)
        if tidx is None or size > _MAX_DATA_MSG:
            tidx = self._bind(source, n, now)
            if tidx is None:
                return False
        # the data path: the frame into the open datagram, no copy of it on the way
        buf = self._open
        if len(buf) + size > self._room:
            self._close(now)
            buf = self._open
        buf += _pack_data(0, 0, size, tidx, sqn & _M)
        buf += data
        self.frames_sent += 1
        self.frame_bytes_sent += n
        return True

    def _bind(self, source: SourceKey, n: int, now: float) -> int | None:
        """send_data's slow path: a frame too large (error), or ``source`` without a topic
        index yet (bind one: a control message in the same stream); None: not sent."""
        if _DATA_HDR_LEN + n > _MAX_DATA_MSG:
            raise LocalProtocolError(f"frame of {n} bytes: at most {_MAX_DATA_MSG - 12}")
        tidx = self._bind_out.get(source)
        if tidx is not None:
            return tidx
        if len(self._bind_out) >= MAX_UDP_SOURCES:
            return None
        if len(source.otid) != OTID_SIZE:
            raise LocalProtocolError(
                f"OTID of {source.topic!r} is {len(source.otid)} bytes, not {OTID_SIZE}"
            )
        tidx = self._next_tidx
        self._next_tidx = (tidx + 1) & _M
        self._bind_out[source] = tidx
        bind = lbmc.encode(
            lbmc.LBMCMessage(
                lbmc.MSG_CONTROL,
                headers=[
                    lbmc.Otid(0, source.otid),
                    lbmc.TopicName(source.topic.encode() + b"\0"),
                    lbmc.TopicIdx(0, tidx),
                ],
            )
        )
        if len(self._open) + len(bind) > self._room:
            self._close(now)
        self._open += bind
        return tidx

    def _close(self, now: float) -> None:
        if self._open:
            src = self.source
            src.now = now
            src.emit_lbmc(bytes(self._open))
            self._open = bytearray()
            if src.blocked:
                self.writable = False

    def forget_source(self, source: SourceKey) -> None:
        """``source`` was withdrawn: its next frames (if it comes back) bind again."""
        self._bind_out.pop(source, None)

    def take_datagrams(self, now: float) -> list[bytes | bytearray]:
        """Datagrams for the other DRO's UDP port, in order (the open datagram closes)."""
        self._close(now)
        src = self.source
        out: list[bytes | bytearray] = [d for d, _addr in src.outbox]
        out += src.ready
        src.outbox.clear()
        src.ready.clear()
        r = self.receiver
        if r is not None and r.outbox:
            out += r.outbox
            r.outbox.clear()
        return out

    # --- receiving ------------------------------------------------------------------------

    def receive_datagram(self, data: bytes, now: float) -> None:
        """A datagram from the other DRO's UDP port.  Garbage is counted and dropped."""
        if self.failure is not None:
            return  # the link is being dropped: nothing more is read
        if len(data) < w.HEADER_SIZE:
            self.dgrams_dropped_garbage += 1
            return
        ptype = data[0] & 0x0F
        try:
            if ptype in _TO_SOURCE:
                self.source.receive_datagram(data, PEER, now)
            elif ptype in _TO_RECEIVER:
                if self.receiver is None:
                    self.dgrams_dropped_early += 1
                    return
                r = self.receiver
                r.receive_datagram(data, now)
                if self._next is None and r.started:
                    self._next = r.expected  # a session message told where the stream starts
                self._release()
            else:
                self.dgrams_dropped_garbage += 1
        except RemoteProtocolError:
            self.dgrams_dropped_garbage += 1
        self._check(now)

    def _accept(self, sqn: int, data: bytes, off: int) -> None:
        if self._next is None:
            self._next = sqn  # the stream starts with this datagram
        if (sqn - self._next) & _M >= _HALF:
            return  # behind what was given up on already: too late
        self._held[sqn] = (data, off)
        self._held_bytes += len(data)

    def _release(self) -> None:
        r = self.receiver
        nxt = self._next
        if r is None or nxt is None:
            return
        held = self._held
        missing = r.missing
        while True:
            dgram = held.pop(nxt, None)
            if dgram is not None:
                self._held_bytes -= len(dgram[0])
                self._messages(*dgram)
                nxt = (nxt + 1) & _M
                continue
            if not held or nxt in missing or nxt == r.expected:
                if held and self._held_bytes > MAX_REORDER_BYTES:
                    # give up on the gap: jump to the oldest datagram held
                    self.reorder_overflows += 1
                    at = nxt
                    oldest = min(held, key=lambda s: (s - at) & _M)
                    self.datagrams_unrecovered += (oldest - at) & _M
                    nxt = oldest
                    continue
                break
            # nxt is behind the receiver's expected, not held and not missing: LBT-RU gave up
            self.datagrams_unrecovered += 1
            nxt = (nxt + 1) & _M
        self._next = nxt

    def _messages(self, buf: bytes, pos: int) -> None:
        """The LBMC messages of one DATA datagram (``buf[pos:]``), in order: data messages
        become frames (views of the datagram), bindings update the topic index table."""
        end = len(buf)
        view = memoryview(buf)
        append = self._frames.append
        bind = self._bind_in
        unpack = _unpack_data
        frames = nbytes = unknown = 0
        while end - pos >= 4:
            msglen = buf[pos + 2] << 8 | buf[pos + 3]
            if msglen < 4 or pos + msglen > end:
                self.dgrams_dropped_garbage += 1
                break
            if msglen >= _DATA_HDR_LEN and buf[pos] == 0 and buf[pos + 1] == 0:
                _vt, _nh, _len, tidx, sqn = unpack(buf, pos)
                key = bind.get(tidx)
                if key is None:
                    unknown += 1
                else:
                    append((key, sqn, view[pos + _DATA_HDR_LEN : pos + msglen]))
                    frames += 1
                    nbytes += msglen - _DATA_HDR_LEN
            else:
                self._control(buf[pos : pos + msglen])
            pos += msglen
        self.frames_rcvd += frames
        self.frame_bytes_rcvd += nbytes
        self.frames_unknown_source += unknown

    def _control(self, msg_bytes: bytes) -> None:
        """A control message in the data stream: a binding (OTID + TOPICNAME + TOPIC_IDX);
        anything else (a newer peer's) is skipped."""
        try:
            msg = lbmc.decode(msg_bytes)
        except lbmc.LBMCError:
            self.dgrams_dropped_garbage += 1
            return
        otid = msg.find(lbmc.Otid)
        topic = msg.find(lbmc.TopicName)
        idx = msg.find(lbmc.TopicIdx)
        if otid is None or topic is None or idx is None:
            return
        bind = self._bind_in
        if idx.tidx not in bind and len(bind) >= MAX_UDP_SOURCES:
            return
        name = bytes(topic.topic)
        name = name[:-1] if name.endswith(b"\0") else name
        bind[idx.tidx] = SourceKey(bytes(otid.otid), name.decode(errors="replace"))

    def take_frames(self) -> list[tuple[SourceKey, int, memoryview]]:
        """Frames received, in the order sent: (source, originating sqn, payload)."""
        out, self._frames = self._frames, []
        return out

    # --- time -----------------------------------------------------------------------------

    def next_timer(self) -> float | None:
        if self.failure is not None:
            return None
        t = self.source.next_timer()
        r = self.receiver
        if r is not None:
            rt = r.next_timer()
            if rt is not None and (t is None or rt < t):
                t = rt
        return t

    def handle_timer(self, now: float) -> None:
        if self.failure is not None:
            return
        self.source.handle_timer(now)
        r = self.receiver
        if r is not None:
            r.handle_timer(now)
            self._release()
        self._check(now)

    # --- statistics -----------------------------------------------------------------------

    def send_stats(self) -> dict[str, int]:
        """``DROMonMsg.Stats.Portal.Peer.UDPSend`` figures of this session."""
        return self.source.monitor_fields()

    def receive_stats(self) -> dict[str, int]:
        """``DROMonMsg.Stats.Portal.Peer.UDPReceive`` figures of this session."""
        if self.receiver is None:
            return {}
        return self.receiver.monitor_fields()
