"""The DRO peer link: one TCP connection between two DROs' peer portals, sans-IO (rank 2).

Theory of operation
-------------------
A peer portal joins two DROs directly (notes A3): one side connects (``<initiator>``), the
other listens (``<acceptor>``), and everything between them -- route information, interest,
source advertisements and forwarded data -- travels over that one connection.  UM documents
what the link does but not its bytes, so the protocol here is **pyum's own** [inferred]
(:mod:`umcore.dro.inferred` lists every choice); it claims no interoperability with
Informatica's DRO.  It is made of LBMC messages back to back, the framing of LBT-TCP, so
``tshark -d tcp.port==N,lbttcp`` decodes a plain link with the DRO headers Wireshark knows.

One :class:`PeerLink` serves a portal for its whole life; each connection is a session of it:

* ``receive_connected(now)`` -- a connection (and its TLS/LZ4, which the adapter runs below
  this core) is up: both sides send their *hello* at once (protocol version, node id, name);
  state HANDSHAKE.  The other's hello makes the link UP (:class:`LinkUp`); a version we do not
  speak, our own node id, or anything but a hello first refuses the link (:class:`LinkDown`,
  cause REFUSED or PROTOCOL) and no hello within :data:`PEER_HANDSHAKE_TIMEOUT` times out.
* ``receive_data(bytes, now)`` -- decoded in place; bad framing costs the connection (LinkDown
  PROTOCOL, the adapter closes it and reconnects with back-off); unknown CONTROL messages are
  counted and skipped (a newer peer may send more).
* keepalive (``<gateway-keepalive>``): a TNWG_KA query every ``interval`` (with ``idle="yes"``
  only when nothing was heard in the last interval), answered at once; the answer's round trip
  feeds the RTT statistics.  Nothing heard for ``timeout`` -> LinkDown TIMEOUT.  ``interval`` 0
  turns both off.
* sending: ``send_data`` (forwarded frames: source, originating sqn, bytes; ``send_run`` a
  queue run of them at once, no call per frame), ``send_interest``,
  ``send_source``/``send_source_gone``, ``send_route_info`` (the :class:`DroCore`'s
  :class:`RouteInfo`).  Control messages go out at once and flush pending data first
  (notes A3); data is batched when the portal has ``<batching>``: a batch closes when it reaches
  ``min-length``, when its first message has waited ``batch-interval``, before it would pass
  ``max-datagram``, and -- with ``smart-batch`` or without ``<batching>`` -- whenever the
  adapter takes bytes (nothing more is waiting then).  Bytes not yet taken are bounded by
  ``max-queue`` (plus the one open batch): a frame beyond it is dropped and counted
  (``dropped_would_block``); a frame while the link is not UP is dropped and counted
  (``dropped_not_operational``).  The adapter stops taking bytes while its socket is
  flow-controlled, so that bound is what protects the daemon from a stalled peer; control
  messages are never dropped but more than :data:`MAX_CONTROL_BACKLOG` unsent costs the link.
* receiving: frames come out of ``take_frames()`` as ``(SourceKey, sqn, payload)`` tuples, in
  order (TCP does not reorder); everything else out of ``take_events()``.

Data frames name their source by a per-connection topic index: the first frame of a source
sends a binding (OTID + TOPICNAME + TOPIC_IDX) and every frame is then a bare 12-byte-header
LBMC data message, so a 64-byte message costs 76 bytes on the link.

Time is a parameter (seconds, any monotonic origin); ``next_timer()``/``handle_timer(now)``
drive the keepalive, the handshake timeout and the batch interval.

With ``<udp>`` (:mod:`umcore.dro.peerudp`) the data frames take a UDP data link instead (LBT-RU
both ways; the TCP connection then carries control only): the hello is followed by a UDP port
offer each way, ``send_data`` hands frames to the UDP link, ``receive_datagram`` and
``take_datagrams`` are its input and output, its frames come out of ``take_frames`` too,
``writable`` waits until it is up (and not held back by ``<peer-rate-limit>``), and its failure
ends the session (LinkDown UDP): both links go, and the next connection restores both.  The two
links do not keep each other's order, so a UDP frame of a source whose advertisement (TCP) has
not arrived yet waits for it (bounded by :data:`MAX_UDP_WAITING_BYTES`, the oldest dropped and
counted in ``udp_frames_dropped_unadvertised``) instead of reaching the core as unknown.

Immediate messages (issues 19/20): ``send_immediate`` carries a UIM, request or response, or a
MIM, that the daemon's UIM/MIM forwarders route over this link (a CONTROL message on the TCP
link, with or without ``<udp>``, the immediate message its payload); the other side's
``take_events`` hands it out as :class:`ImmediateReceived`.  It is dropped (the caller counts
it), never queued past ``max-queue`` and never costs the link.

Proxy receivers need no message of their own on a peer link: interest records tell the other
DRO what to receive, and its source advertisements and frames are the answer.
"""

from __future__ import annotations

import struct
import sys
from array import array
from dataclasses import dataclass
from enum import Enum

from umcore.config.dro import Peer
from umcore.dro.events import SourceKey
from umcore.dro.inferred import (
    PEER_HANDSHAKE_TIMEOUT,
    PEER_PROTOCOL_VERSION,
    SUPPORTED_PEER_VERSIONS,
    Adjacency,
    RouteInfo,
)
from umcore.dro.interest import InterestKey
from umcore.dro.peerudp import PeerUdp
from umcore.dro.persist import PersistIdentity, strip_topic_idx
from umcore.errors import LocalProtocolError
from umcore.events import CoreEvent
from umcore.transport.ratelimit import RateLimiter
from umcore.wire import lbmc

__all__ = [
    "MAX_CONTROL_BACKLOG",
    "MAX_LINK_SOURCES",
    "ControlReceived",
    "DownCause",
    "ImmediateReceived",
    "ImmediateSend",
    "InterestReceived",
    "LinkDown",
    "LinkState",
    "LinkStats",
    "LinkUp",
    "PeerLink",
    "RecoveryReceived",
    "RouteInfoReceived",
    "SourceGoneReceived",
    "SourceReceived",
]

# Sources bound to topic indices on one connection, each way.  Above DroCore's MAX_SOURCES
# (1,000,000), so a link fed by the core never reaches it; a peer binding more is refused.
MAX_LINK_SOURCES = 1 << 20
# Bytes of UDP frames waiting for their source's advertisement on TCP (module peerudp): the
# advertisement is sent first, so the wait is one TCP-vs-UDP delivery skew; a peer sending
# frames of sources it never advertises fills this and its oldest frames are dropped (counted).
MAX_UDP_WAITING_BYTES = 4 << 20
# Unsent control bytes a link may hold (a peer that stops reading while we keep routing):
# past this the link is declared lost instead of growing without bound.
MAX_CONTROL_BACKLOG = 16 << 20
# Outstanding keepalive queries remembered for their round trip (one per interval is sent;
# older ones are answered late or never).
MAX_OUTSTANDING_KA = 8
# The largest payload of one data message (LBMC's u16 msglen less the 12-byte data header).
MAX_FRAME_PAYLOAD = lbmc.MAX_LBMC_MESSAGE - 12
# The topic index of an EOS advertisement for a source that had no data binding.
UNBOUND = 0xFFFFFFFF
# An OTID is 32 opaque bytes (the TIR's OTID option, LBMC's OTID header).
OTID_SIZE = 32
# DOMAIN header flags marking a control message whose payload is an immediate message the DRO
# forwards over the link (daemons.tnwgd.uim / .mim) [inferred, umcore.dro.inferred]
IMMEDIATE_UIM = 0x0001  # a UIM, a request or a response (routed by DESTINATION / request index)
IMMEDIATE_MIM = 0x0002  # a multicast immediate message (routed by interest)

_DATA_HDR = struct.Struct("!BBHII")  # ver/type 0 (data), next_hdr 0, msglen, tidx, sqn
_pack_data = _DATA_HDR.pack
_unpack_data = _DATA_HDR.unpack_from
_DATA_HDR_LEN = _DATA_HDR.size
# Complete data messages after the one being read from which receive_data looks for a run of
# one source (``_run_length``); fewer are read one by one (the latency case).
_RUN_MIN = 4
# Frames from which send_run builds a batch's messages with one join (below: one by one, the
# cheaper for a few; measured crossover between 16 and 64).
_JOIN_MIN = 32
_U32_CODE = "I" if array("I").itemsize == 4 else "L"  # an array typecode of 4 bytes
_SWAP = sys.byteorder == "little"
_BASE = struct.Struct("!BBH")

KA_QUERY = 0x4000  # TNWG_KA flags (wire-lbmc-ump.md section 7)
KA_RESPONSE = 0x2000
AD_EOS = 0x40  # ADVERTISEMENT flags
AD_CHANGE = 0x10
# ADVERTISEMENT ad_flags: the source offers late join (wire-lbmc-ump.md 7: LJ); its late-join
# and OTR requests cross this link (umcore.dro.recovery) [inferred]
AD_FLAG_LJ = 0x80000000
# ... and it is persistent (UME): the header's transport and topic index and a
# TOPIC_SOURCE_EXFUNC header (request address) carry its persistent identity
# (umcore.dro.persist) [inferred]
AD_FLAG_UME = 0x40000000
EXFUNC_UME = 2  # TOPIC_SOURCE_EXFUNC functionality flag
INTEREST_CANCEL = 0x4000  # TOPIC_INTEREST flags
INTEREST_REFRESH = 0x2000
PATTERN_CANCEL = 0x40  # PATTERN_INTEREST flags (one byte)
PATTERN_REFRESH = 0x20
CAP3_PCRE = 0x80000000  # TNWG_CAPABILITIES capabilities3
CAP3_REGEX = 0x40000000
_VERSION_MASK = 0x7FFF  # TNWG_CAPABILITIES flags bits 0-14
_U32 = 0xFFFFFFFF


class ImmediateSend(Enum):
    """How :meth:`PeerLink.send_immediate` went."""

    SENT = "sent"
    NOT_OPERATIONAL = "not_operational"  # the link is not UP
    WOULD_BLOCK = "would_block"  # max-queue bytes already wait for the socket
    TOO_LONG = "too_long"  # the message does not fit in one LBMC message with its wrapper


class LinkState(Enum):
    DOWN = "down"  # no connection
    HANDSHAKE = "handshake"  # connected, waiting for the other side's hello
    UP = "up"


_UP = LinkState.UP  # the data path's state test, without the class attribute lookup


class LinkEvent(Enum):
    CONNECT = "connect"
    HELLO = "hello"
    LOSE = "lose"


LINK_TRANSITIONS: dict[tuple[LinkState, LinkEvent], LinkState] = {
    (LinkState.DOWN, LinkEvent.CONNECT): LinkState.HANDSHAKE,
    (LinkState.HANDSHAKE, LinkEvent.HELLO): LinkState.UP,
    (LinkState.HANDSHAKE, LinkEvent.LOSE): LinkState.DOWN,
    (LinkState.UP, LinkEvent.LOSE): LinkState.DOWN,
    (LinkState.DOWN, LinkEvent.LOSE): LinkState.DOWN,
}


class DownCause(Enum):
    CLOSED = "closed"  # the connection ended (the adapter said so)
    TIMEOUT = "timeout"  # no hello in time, or nothing heard within the keepalive timeout
    PROTOCOL = "protocol"  # bytes that are not this protocol
    REFUSED = "refused"  # a hello we cannot accept (version, our own node id)
    BACKLOG = "backlog"  # the peer stopped reading our control messages
    UDP = "udp"  # the UDP data link failed or never came up (both links are dropped)


@dataclass(frozen=True, slots=True)
class LinkUp(CoreEvent):
    """The other DRO's hello arrived: the link carries traffic from now on."""

    node_id: int
    name: str
    version: int


@dataclass(frozen=True, slots=True)
class LinkDown(CoreEvent):
    """The session ended (the adapter closes the connection and reconnects with back-off)."""

    cause: DownCause
    reason: str


@dataclass(frozen=True, slots=True)
class InterestReceived(CoreEvent):
    """The other DRO's interest record: receivers in ``domain`` want ``key``."""

    key: InterestKey
    domain: int
    cancel: bool
    refresh: bool


@dataclass(frozen=True, slots=True)
class SourceReceived(CoreEvent):
    """The other DRO advertises a source (its proxy source on this link); ``change``: a new
    cost for one it advertised before."""

    source: SourceKey
    cost: int
    hop_count: int
    origin_domain: int
    change: bool
    persist: PersistIdentity | None = None
    late_join: bool = False  # it offers late join (umcore.dro.recovery)


@dataclass(frozen=True, slots=True)
class SourceGoneReceived(CoreEvent):
    source: SourceKey


@dataclass(frozen=True, slots=True)
class ControlReceived(CoreEvent):
    """A control frame (an SRI, without TOPIC_IDX) of a source the other DRO forwards."""

    source: SourceKey
    frame: bytes


@dataclass(frozen=True, slots=True)
class RecoveryReceived(CoreEvent):
    """A late-join/OTR message of a source (a request or an answer, one LBMC message) from the
    other DRO (:mod:`umcore.dro.recovery`)."""

    source: SourceKey
    message: bytes


@dataclass(frozen=True, slots=True)
class ImmediateReceived(CoreEvent):
    """An immediate message the other DRO forwards (:meth:`PeerLink.send_immediate`): a UIM,
    request or response (``multicast`` False) or a MIM (True), one decoded LBMC message."""

    multicast: bool
    message: lbmc.LBMCMessage


@dataclass(frozen=True, slots=True)
class RouteInfoReceived(CoreEvent):
    info: RouteInfo


@dataclass(slots=True)
class LinkStats:
    """Counters of one peer portal (cumulative over its connections), named after
    ``DROMonMsg.Stats.Portal.Peer.Send/Receive``; RTTs in microseconds; ``last_ka_time`` is
    the ``now`` of the last answered keepalive.  Frames count as sent when their batch closes
    (frames of a batch open when the link goes down count as dropped, not operational);
    ``data_bytes_enqueued`` is the closed batches' bytes not yet taken by the adapter."""

    data_bytes_enqueued_limit: int = 0
    batch_bytes_max: int = 0
    batch_bytes_min: int = 0
    batch_bytes_total: int = 0
    batch_msgs_max: int = 0
    batch_msgs_min: int = 0
    batch_msgs_total: int = 0
    batches: int = 0
    bytes_rcvd: int = 0
    bytes_sent: int = 0
    cntl_msgs_unhandled: int = 0
    connects: int = 0
    data_bytes_enqueued: int = 0
    data_bytes_enqueued_max: int = 0
    data_fragment_bytes_dropped_not_operational: int = 0
    data_fragment_bytes_dropped_would_block: int = 0
    data_fragment_bytes_sent: int = 0
    data_fragments_dropped_not_operational: int = 0
    data_fragments_dropped_would_block: int = 0
    data_fragments_sent: int = 0
    data_msg_bytes_rcvd: int = 0
    data_msgs_rcvd: int = 0
    data_msgs_rcvd_unknown_source: int = 0
    gateway_cntl_msg_bytes_rcvd: int = 0
    gateway_cntl_msg_bytes_sent: int = 0
    gateway_cntl_msgs_dropped_not_operational: int = 0
    gateway_cntl_msgs_rcvd: int = 0
    gateway_cntl_msgs_sent: int = 0
    losses: int = 0
    rtt_max: int = 0
    rtt_min: int = 0
    rtt_samples: int = 0
    rtt_total: int = 0
    last_ka_time: float | None = None

    @property
    def rtt_mean(self) -> int:
        return self.rtt_total // self.rtt_samples if self.rtt_samples else 0

    @property
    def batch_msgs_mean(self) -> int:
        return self.batch_msgs_total // self.batches if self.batches else 0

    @property
    def batch_bytes_mean(self) -> int:
        return self.batch_bytes_total // self.batches if self.batches else 0


def _cstr(text: str) -> bytes:
    """A name as UM writes it: UTF-8 and a NUL (wire-lbmc-ump.md section 2)."""
    return text.encode() + b"\0"


def _uncstr(raw: bytes) -> str:
    return (raw[:-1] if raw.endswith(b"\0") else raw).decode(errors="replace")


class _Protocol(Exception):
    """Raised inside receive_data: the bytes cost the connection (cause, reason)."""

    def __init__(self, cause: DownCause, reason: str) -> None:
        super().__init__(reason)
        self.cause = cause
        self.reason = reason


class PeerLink:
    """One peer portal's link protocol; see the module docstring for the API."""

    __slots__ = (
        "_advertised",
        "_batch",
        "_batch_msgs",
        "_batch_started",
        "_bind_in",
        "_bind_out",
        "_ctl_bytes",
        "_events",
        "_frames",
        "_ka_index",
        "_ka_next",
        "_ka_sent",
        "_next_tidx",
        "_out",
        "_out_bytes",
        "_queue_limit",
        "_rx_runs",
        "_rx_tail",
        "_udp",
        "_udp_deadline",
        "_udp_known",
        "_udp_waiting",
        "_udp_waiting_bytes",
        "batch_interval",
        "batching",
        "handshake_deadline",
        "initiator",
        "ka_idle",
        "ka_interval",
        "ka_timeout",
        "last_down",
        "last_rx",
        "max_datagram",
        "max_queue",
        "min_length",
        "name",
        "node_id",
        "peer_name",
        "peer_node_id",
        "peer_version",
        "portal",
        "smart_batch",
        "state",
        "stats",
        "udp_config",
        "udp_frames_dropped_unadvertised",
        "udp_limiter",
        "udp_peer_port",
        "udp_receive_totals",
        "udp_send_totals",
    )

    def __init__(self, portal: Peer, node_id: int, name: str) -> None:
        """``portal``: the ``<peer>`` from :func:`umcore.config.dro.load`; ``node_id``/``name``:
        this DRO's (the same the :class:`DroCore` uses)."""
        if not 0 <= node_id < 1 << 64:
            raise ValueError(f"node id {node_id} is not a 64-bit unsigned integer")
        self.portal = portal.name
        self.node_id = node_id
        self.name = name
        ka = portal.gateway_keepalive
        self.ka_interval = ka.interval / 1000
        self.ka_timeout = ka.timeout / 1000
        self.ka_idle = ka.idle == "yes"
        self.batching = portal.batching_configured
        self.min_length = portal.batching.min_length
        self.batch_interval = portal.batching.batch_interval / 1000
        self.smart_batch = bool(portal.smart_batch)
        self.max_datagram = portal.max_datagram
        self.max_queue = portal.max_queue
        # the data a link may hold unsent: max-queue of closed batches and one open batch
        self._queue_limit = portal.max_queue + portal.max_datagram
        self.stats = LinkStats(portal.max_queue)
        self.state = LinkState.DOWN
        self.peer_node_id: int | None = None
        self.peer_name = ""
        self.peer_version = 0
        self.handshake_deadline = 0.0
        self.last_rx = 0.0
        #: The last session's end (also handed out as an event): what an adapter logs.
        self.last_down: LinkDown | None = None
        self._events: list[CoreEvent] = []
        self._frames: list[tuple[SourceKey, int, memoryview]] = []
        self._out: list[bytes] = []
        self._out_bytes = 0
        self._ctl_bytes = 0
        self._batch = bytearray()
        self._batch_msgs = 0
        self._batch_started = 0.0
        self._rx_tail = b""
        #: Data received on TCP, in order: (source, read buffer, offset, msglen, count) --
        #: ``count`` link messages of ``msglen`` bytes back to back, one source (``_RUN``).
        self._rx_runs: list[tuple[SourceKey, memoryview, int, int, int]] = []
        self._bind_out: dict[SourceKey, int] = {}
        self._bind_in: dict[int, SourceKey] = {}
        self._next_tidx = 0
        # sources advertised on this connection -> their origin domain (an update repeats it)
        self._advertised: dict[SourceKey, int] = {}
        self._ka_sent: dict[int, float] = {}
        self._ka_index = 0
        self._ka_next = 0.0
        #: ``<udp>``: data over an LBT-RU pair (umcore.dro.peerudp), one per connection.
        self.initiator = portal.single_tcp.role == "initiator"
        self.udp_config = portal.udp
        self.udp_limiter: RateLimiter | None = None  # <peer-rate-limit>: one per portal
        self._udp: PeerUdp | None = None
        self._udp_deadline = 0.0
        #: The other DRO's UDP port from the handshake (None until then).
        self.udp_peer_port: int | None = None
        #: Sources the other DRO advertised on this connection (their UDP frames may go to the
        #: core); frames of others wait (bounded) for their advertisement (module peerudp).
        self._udp_known: set[SourceKey] = set()
        self._udp_waiting: list[tuple[SourceKey, int, memoryview]] = []
        self._udp_waiting_bytes = 0
        self.udp_frames_dropped_unadvertised = 0
        #: UDPSend / UDPReceive figures of the connections that ended.
        self.udp_send_totals: dict[str, int] = {}
        self.udp_receive_totals: dict[str, int] = {}

    # --- session ------------------------------------------------------------------------------

    def _to(self, event: LinkEvent) -> None:
        self.state = LINK_TRANSITIONS[(self.state, event)]

    def receive_connected(self, now: float) -> None:
        """A connection is up (after TLS/LZ4 if any): send our hello, wait for theirs."""
        if self.state is not LinkState.DOWN:
            raise LocalProtocolError(f"peer link {self.portal!r} is already connected")
        self._to(LinkEvent.CONNECT)
        self.stats.connects += 1
        self._out.clear()
        self._out_bytes = self._ctl_bytes = 0
        self._batch = bytearray()
        self._batch_msgs = 0
        self._rx_tail = b""
        self._bind_out.clear()
        self._bind_in.clear()
        self._next_tidx = 0
        self._advertised.clear()
        self._ka_sent.clear()
        self.peer_node_id = None
        self.handshake_deadline = now + PEER_HANDSHAKE_TIMEOUT
        self.last_rx = now
        self._ka_next = now + self.ka_interval
        hello = lbmc.LBMCMessage(
            lbmc.MSG_CONTROL,
            headers=[
                lbmc.TnwgCapabilities(
                    PEER_PROTOCOL_VERSION & _VERSION_MASK, 0, 0, CAP3_PCRE | CAP3_REGEX, 0
                ),
                lbmc.RouteInfo(node_id=self.node_id, vers=PEER_PROTOCOL_VERSION),
                lbmc.GatewayName(_cstr(self.name)[:250]),
            ],
        )
        self._control(lbmc.encode(hello))
        if self.udp_config is not None:
            self._udp_connect(now)

    def receive_connection_lost(self, now: float, reason: str = "connection closed") -> None:
        """The connection ended (peer closed, socket error, or the adapter closed it)."""
        if self.state is not LinkState.DOWN:
            self._lose(DownCause.CLOSED, reason)

    def _lose(self, cause: DownCause, reason: str) -> None:
        self._to(LinkEvent.LOSE)
        st = self.stats
        st.losses += 1
        # frames still in the open batch never reach the wire: dropped, link not operational
        st.data_fragments_dropped_not_operational += self._batch_msgs
        st.data_fragment_bytes_dropped_not_operational += len(self._batch) - (
            _DATA_HDR_LEN * self._batch_msgs
        )
        self.last_down = LinkDown(cause, reason)
        self._events.append(self.last_down)
        self._out.clear()
        self._out_bytes = self._ctl_bytes = 0
        self._batch = bytearray()
        self._batch_msgs = 0
        self.stats.data_bytes_enqueued = 0
        self._udp_end()

    @property
    def up(self) -> bool:
        return self.state is LinkState.UP

    @property
    def connected(self) -> bool:
        """A session is running (HANDSHAKE or UP)."""
        return self.state is not LinkState.DOWN

    # --- output -------------------------------------------------------------------------------

    def _close_batch(self) -> None:
        batch = self._batch
        if not batch:
            return
        st = self.stats
        n, msgs = len(batch), self._batch_msgs
        # the data path counts per batch, not per frame: sent when its batch closes
        st.data_fragments_sent += msgs
        st.data_fragment_bytes_sent += n - _DATA_HDR_LEN * msgs
        st.batches += 1
        st.batch_msgs_total += msgs
        st.batch_bytes_total += n
        if st.batches == 1 or msgs < st.batch_msgs_min:
            st.batch_msgs_min = msgs
        if st.batches == 1 or n < st.batch_bytes_min:
            st.batch_bytes_min = n
        st.batch_msgs_max = max(st.batch_msgs_max, msgs)
        st.batch_bytes_max = max(st.batch_bytes_max, n)
        self._out.append(bytes(batch))
        self._out_bytes += n
        self._batch = bytearray()
        self._batch_msgs = 0
        st.data_bytes_enqueued = self._out_bytes
        if self._out_bytes > st.data_bytes_enqueued_max:
            st.data_bytes_enqueued_max = self._out_bytes

    def _control(self, data: bytes) -> None:
        self._close_batch()  # control messages flush pending data, in order (notes A3)
        self._out.append(data)
        self._out_bytes += len(data)
        self._ctl_bytes += len(data)
        self.stats.gateway_cntl_msgs_sent += 1
        self.stats.gateway_cntl_msg_bytes_sent += len(data)
        if self._ctl_bytes > MAX_CONTROL_BACKLOG:
            self._lose(
                DownCause.BACKLOG,
                f"{self._ctl_bytes} bytes of control messages unsent: the peer is not reading",
            )

    def take_bytes(self) -> list[bytes]:
        """Bytes to write, in order (call while the socket accepts writes)."""
        if self._batch and (not self.batching or self.smart_batch):
            self._close_batch()
        out = self._out
        if not out:
            return out
        self._out = []
        self._out_bytes = self._ctl_bytes = 0
        self.stats.data_bytes_enqueued = 0
        self.stats.bytes_sent += sum(len(b) for b in out)
        return out

    @property
    def pending(self) -> int:
        """Bytes waiting for ``take_bytes`` (closed batches, control messages, the open batch)."""
        return self._out_bytes + len(self._batch)

    @property
    def writable(self) -> bool:
        """UP and below ``max-queue``: an adapter feeding from the DroCore's queue may send."""
        return (
            self._out_bytes < self.max_queue
            and self.state is _UP
            and (self._udp is None or self._udp.writable)
        )

    def take_events(self) -> list[CoreEvent]:
        out, self._events = self._events, []
        if self._udp_waiting or self._udp is not None:
            self._udp_sources(out)
        return out

    def take_frames(self) -> list[tuple[SourceKey, int, memoryview]]:
        """Frames received, in order: (source, originating sqn, payload)."""
        if self._udp_waiting:
            self._udp_sources(self._events)  # a source advertised in this very input
        out, self._frames = self._frames, []
        if self._rx_runs:
            flat: list[tuple[SourceKey, int, memoryview]] = []
            for key, view, pos, msglen, count in self._rx_runs:
                for at in range(pos, pos + count * msglen, msglen):
                    sqn = _unpack_data(view, at)[4]
                    flat.append((key, sqn, view[at + _DATA_HDR_LEN : at + msglen]))
            self._rx_runs = []
            out = flat + out
        return out

    def take_frame_runs(self) -> list[tuple[SourceKey, list[memoryview]]]:
        """Frames received, in order, as runs: (source, payloads) -- consecutive frames of one
        source (what ``take_frames`` hands out one by one, without a tuple per frame)."""
        runs: list[tuple[SourceKey, list[memoryview]]] = []
        for key, view, pos, msglen, count in self._rx_runs:
            frames = [
                view[at : at + msglen - _DATA_HDR_LEN]
                for at in range(pos + _DATA_HDR_LEN, pos + count * msglen, msglen)
            ]
            if runs and runs[-1][0] is key:
                runs[-1][1].extend(frames)
            else:
                runs.append((key, frames))
        self._rx_runs = []
        if self._frames or self._udp_waiting:
            for key, _sqn, data in self.take_frames():
                if runs and runs[-1][0] is key:
                    runs[-1][1].append(data)
                else:
                    runs.append((key, [data]))
        return runs

    # --- sending ------------------------------------------------------------------------------

    def _otid(self, source: SourceKey) -> lbmc.Otid:
        if len(source.otid) != OTID_SIZE:
            raise LocalProtocolError(
                f"OTID of {source.topic!r} is {len(source.otid)} bytes, not {OTID_SIZE}"
            )
        return lbmc.Otid(0, source.otid)

    def send_data(self, source: SourceKey, sqn: int, data: bytes | memoryview, now: float) -> bool:
        """Forward one frame of ``source`` (``sqn``: its originating sequence number).  False if
        dropped (link not UP, or ``max-queue`` full), counted either way.  With ``<udp>`` the
        frame goes to the UDP data link."""
        udp = self._udp
        if udp is not None:
            if self.state is _UP and udp.send_data(source, sqn, data, now):
                return True
            return self._udp_dropped(len(data))
        n = len(data)
        tidx = self._bind_out.get(source)
        if tidx is None or self.state is not _UP:
            tidx = self._bind(source, n)
            if tidx is None:
                return False
        size = _DATA_HDR_LEN + n
        batch = self._batch
        blen = len(batch)
        out_bytes = self._out_bytes
        if out_bytes + blen + size > self._queue_limit:
            st = self.stats
            st.data_fragments_dropped_would_block += 1
            st.data_fragment_bytes_dropped_would_block += n
            return False
        if blen + size > self.max_datagram:
            if n > MAX_FRAME_PAYLOAD:
                raise LocalProtocolError(f"frame of {n} bytes: at most {MAX_FRAME_PAYLOAD}")
            if blen:
                self._close_batch()
                out_bytes = self._out_bytes
                batch = self._batch
                blen = 0
        if not blen:
            self._batch_started = now
        batch += _pack_data(0, 0, size, tidx, sqn & _U32)
        batch += data
        self._batch_msgs += 1
        if self.batching and blen + size >= self.min_length:
            self._close_batch()
        return True

    def send_run(
        self,
        source: SourceKey,
        sqn: int,
        data: bytes | memoryview,
        size: int,
        count: int,
        now: float,
    ) -> int:
        """Forward up to ``count`` frames of ``source``, ``size`` bytes each, back to back in
        ``data``, with sequence numbers from ``sqn`` (a :class:`~umcore.dro.queue.FrameRun`), as
        :meth:`send_data` called for each while :attr:`writable` would: the same bytes, batches
        and counters, without a call per frame.  Returns how many frames were taken (sent, or
        dropped and counted); the rest are left to the caller because the link stopped being
        writable (``max-queue`` bytes wait for the socket)."""
        if count <= 0:
            return 0
        n = size
        m = _DATA_HDR_LEN + n
        if self._udp is not None or m > self.max_datagram or len(data) < n * count:
            return self._send_each(source, sqn, data, size, count, now)
        if not self.writable:
            return 0
        tidx = self._bind_out.get(source)
        if tidx is None:
            tidx = self._bind(source, n)
            if tidx is None:  # as send_data: this frame dropped (counted if too many sources)
                return 1
        view = memoryview(data)
        pack = _pack_data
        max_dg = self.max_datagram
        batching = self.batching
        min_length = self.min_length
        taken = 0
        at = 0
        last = False  # max-queue reached by a batch closed for this frame: it is the last
        while taken < count:
            batch = self._batch
            blen = len(batch)
            room = (max_dg - blen) // m
            if room <= 0:  # the next frame would pass max-datagram: the batch closes first
                self._close_batch()
                if self._out_bytes >= self.max_queue:
                    # send_data would still take this frame (writable was true before it) or,
                    # past max-queue plus one batch, drop it: it stays with the caller instead
                    if self._out_bytes + m > self._queue_limit:
                        break
                    last = True
                continue
            t = 1 if last else min(room, count - taken)
            if batching:  # the batch closes at the frame that reaches min-length
                t = min(t, max(1, -((blen - min_length) // m)))
            if not blen:
                self._batch_started = now
            s = (sqn + taken) & _U32
            end = at + t * n
            if t >= _JOIN_MIN:
                # every header as the separator of one join (sequence number 0), then the
                # sequence numbers written into their byte columns: no Python step per frame
                # but one slice
                hdr = pack(0, 0, m, tidx, 0)
                batch += hdr
                batch += hdr.join([view[i : i + n] for i in range(at, end, n)])
                seq = range(s, s + t) if s + t <= _U32 + 1 else [(s + i) & _U32 for i in range(t)]
                raw = _sqn_bytes(seq)
                for c in range(4):
                    batch[blen + 8 + c :: m] = raw[c::4]
                at = end
            while at < end:
                batch += pack(0, 0, m, tidx, s)
                batch += view[at : at + n]
                at += n
                s = (s + 1) & _U32
            self._batch_msgs += t
            taken += t
            if batching and blen + t * m >= min_length:
                self._close_batch()
                if self._out_bytes >= self.max_queue:
                    break
            if last:
                break
        return taken

    def _send_each(
        self,
        source: SourceKey,
        sqn: int,
        data: bytes | memoryview,
        size: int,
        count: int,
        now: float,
    ) -> int:
        """send_run's general path: :meth:`send_data` per frame while writable."""
        if count == 1:
            if not self.writable:
                return 0
            self.send_data(source, sqn, data, now)
            return 1
        view = memoryview(data)
        taken = 0
        while taken < count and self.writable:
            at = taken * size
            self.send_data(source, (sqn + taken) & _U32, view[at : at + size], now)
            taken += 1
        return taken

    def _bind(self, source: SourceKey, n: int) -> int | None:
        """send_data's slow path: the link is not UP (drop), or ``source`` has no topic index
        on this connection yet (bind one); None: dropped."""
        st = self.stats
        if self.state is not _UP:
            st.data_fragments_dropped_not_operational += 1
            st.data_fragment_bytes_dropped_not_operational += n
            return None
        tidx = self._bind_out.get(source)
        if tidx is not None:
            return tidx
        if len(self._bind_out) >= MAX_LINK_SOURCES:
            st.data_fragments_dropped_would_block += 1
            st.data_fragment_bytes_dropped_would_block += n
            return None
        tidx = self._next_tidx
        self._next_tidx = (tidx + 1) & _U32
        self._bind_out[source] = tidx
        bind = lbmc.LBMCMessage(
            lbmc.MSG_CONTROL,
            headers=[
                self._otid(source),
                lbmc.TopicName(_cstr(source.topic)),
                lbmc.TopicIdx(0, tidx),
            ],
        )
        self._control(lbmc.encode(bind))
        if not self.up:  # the control backlog cost the link
            return None
        return tidx

    def _send_control(self, headers: list[lbmc.Header]) -> bool:
        if self.state is not LinkState.UP:
            self.stats.gateway_cntl_msgs_dropped_not_operational += 1
            return False
        self._control(lbmc.encode(lbmc.LBMCMessage(lbmc.MSG_CONTROL, headers=headers)))
        return True

    def send_interest(
        self,
        key: InterestKey,
        domain: int,
        now: float,
        *,
        cancel: bool = False,
        refresh: bool = False,
    ) -> bool:
        """One interest record (the DroCore's TNWG interest for this portal)."""
        name = lbmc.TopicName(_cstr(key.symbol))
        if key.is_pattern:
            flags = (PATTERN_CANCEL if cancel else 0) | (PATTERN_REFRESH if refresh else 0)
            hdr: lbmc.Header = lbmc.PatternInterest(flags, key.pattern_type, domain, 0)
        else:
            flags = (INTEREST_CANCEL if cancel else 0) | (INTEREST_REFRESH if refresh else 0)
            hdr = lbmc.TopicInterest(flags, domain)
        return self._send_control([name, hdr])

    def send_source(
        self,
        source: SourceKey,
        cost: int,
        hop_count: int,
        origin_domain: int | None,
        now: float,
        *,
        change: bool = False,
        late_join: bool = False,
        persist: PersistIdentity | None = None,
    ) -> bool:
        """Advertise ``source`` to the other DRO (the DroCore's Create/UpdateProxySource;
        ``origin_domain`` None: the one it was advertised with; ``persist``: its persistent
        identity, :mod:`umcore.dro.persist`).  False if not sent."""
        if origin_domain is None:
            origin_domain = self._advertised.get(source)
            if origin_domain is None:
                return False  # an update of a source this connection never advertised
        elif source not in self._advertised and len(self._advertised) >= MAX_LINK_SOURCES:
            self.stats.gateway_cntl_msgs_dropped_not_operational += 1
            return False
        if not self.up:
            self.stats.gateway_cntl_msgs_dropped_not_operational += 1
            return False
        self._advertised[source] = origin_domain
        if persist is None:
            ad = lbmc.Advertisement(
                AD_CHANGE if change else 0, min(hop_count, 255), AD_FLAG_LJ if late_join else 0,
                cost=cost & _U32, domain_id=origin_domain & _U32,
            )  # fmt: skip
            return self._send_control([self._otid(source), lbmc.TopicName(_cstr(source.topic)), ad])
        ad = lbmc.Advertisement(
            AD_CHANGE if change else 0, min(hop_count, 255),
            (AD_FLAG_LJ if late_join else 0) | AD_FLAG_UME,
            cost & _U32, persist.transport_idx & _U32, persist.topic_idx & _U32,
            domain_id=origin_domain & _U32,
        )  # fmt: skip
        ex = lbmc.TopicSourceExfunc(
            persist.flags & 0xFFFF, lbmc.ip4_from_str(persist.request_ip),
            persist.request_port, 0, EXFUNC_UME,
        )  # fmt: skip
        return self._send_control([self._otid(source), lbmc.TopicName(_cstr(source.topic)), ad, ex])

    def send_sri(self, source: SourceKey, frame: bytes, now: float) -> bool:
        """An SRI of ``source`` (the DroCore's ``take_controls``), without its TOPIC_IDX."""
        return self._send_control(
            [self._otid(source), lbmc.TopicName(_cstr(source.topic)), *strip_topic_idx(frame)]
        )

    def send_source_gone(self, source: SourceKey, now: float) -> bool:
        """``source`` is no longer advertised here (final advertisement, DeleteProxySource):
        sent once per advertisement (False if it was not advertised); its data binding ends."""
        if self._advertised.pop(source, None) is None:
            return False
        tidx = self._bind_out.pop(source, UNBOUND)
        if self._udp is not None:
            self._udp.forget_source(source)
        ad = lbmc.Advertisement(AD_EOS, 0, topic_idx=tidx)
        return self._send_control([self._otid(source), lbmc.TopicName(_cstr(source.topic)), ad])

    def send_recovery(self, source: SourceKey, message: bytes, now: float) -> bool:
        """A late-join/OTR message of ``source`` (``take_peer_sends`` of the core's recovery
        forwarder): a control message with only OTID and TOPICNAME, ``message`` its payload
        [inferred].  False if not sent (link down; too long for one LBMC message)."""
        if not self.up:
            self.stats.gateway_cntl_msgs_dropped_not_operational += 1
            return False
        headers: list[lbmc.Header] = [self._otid(source), lbmc.TopicName(_cstr(source.topic))]
        try:
            data = lbmc.encode(lbmc.LBMCMessage(lbmc.MSG_CONTROL, headers=headers, payload=message))
        except (LocalProtocolError, lbmc.LBMCError, ValueError, struct.error):
            return False  # the caller counts it (a retransmission above LBMC's 64 KB)
        self._control(data)
        return True

    def send_immediate(
        self, message: lbmc.LBMCMessage, now: float, *, multicast: bool = False
    ) -> ImmediateSend:
        """Forward an immediate message to the other DRO: a UIM, request or response
        (``multicast`` False; its DESTINATION and REQUEST as the caller rewrote them) or a MIM
        (True).  It travels on the TCP link, with or without ``<udp>``, as a CONTROL message
        with one DOMAIN header (flags :data:`IMMEDIATE_UIM` / :data:`IMMEDIATE_MIM`, domain 0)
        whose payload is ``message`` itself [inferred].  Unlike the other control messages it
        may be dropped (UM: immediate messages may be dropped by an overloaded DRO): not UP,
        ``max-queue`` bytes already waiting for the socket (the bound data has), or too long;
        the caller counts."""
        if self.state is not _UP:
            return ImmediateSend.NOT_OPERATIONAL
        try:
            inner = lbmc.encode(message)
            data = lbmc.encode(
                lbmc.LBMCMessage(
                    lbmc.MSG_CONTROL,
                    headers=[lbmc.Domain(IMMEDIATE_MIM if multicast else IMMEDIATE_UIM, 0)],
                    payload=inner,
                )
            )
        except (LocalProtocolError, lbmc.LBMCError, ValueError, struct.error):
            return ImmediateSend.TOO_LONG
        if self._out_bytes + len(self._batch) >= self.max_queue:  # as ``writable`` says
            return ImmediateSend.WOULD_BLOCK
        self._control(data)
        return ImmediateSend.SENT if self.up else ImmediateSend.NOT_OPERATIONAL

    def send_route_info(self, info: RouteInfo, now: float) -> bool:
        """The DroCore's route information for this portal (``take_route_info``)."""
        headers: list[lbmc.Header] = [
            lbmc.RouteInfo(
                node_id=info.node_id,
                gateway_version=info.version & _U32,
                topology=info.hop_count & _U32,
                vers=PEER_PROTOCOL_VERSION,
            ),
            lbmc.GatewayName(_cstr(info.name)[:250]),
        ]
        for adj in info.adjacencies:
            kind, ident = adj.node
            headers.append(lbmc.RouteInfoNeighbor(kind, ident, adj.cost & _U32, adj.cost & _U32))
        return self._send_control(headers)

    # --- receiving ----------------------------------------------------------------------------

    def receive_data(self, data: bytes | bytearray | memoryview, now: float) -> None:
        """Bytes from the connection (any split).  Bad bytes end the session (LinkDown)."""
        if self.state is LinkState.DOWN or not data:
            return
        self.last_rx = now
        st = self.stats
        st.bytes_rcvd += len(data)
        tail = self._rx_tail
        src = tail + bytes(data) if tail else bytes(data)
        view = memoryview(src)
        pos = 0
        end = len(src)
        append = self._rx_runs.append
        bind = self._bind_in
        msgs = nbytes = unknown = 0
        up = self.state is _UP
        try:
            while end - pos >= 4:
                if end - pos >= _DATA_HDR_LEN:
                    vt, nh, msglen, tidx, _sqn = _unpack_data(src, pos)
                    if vt == 0 and nh == 0 and msglen >= _DATA_HDR_LEN:
                        if end - pos < msglen:
                            break
                        if not up:
                            raise _Protocol(DownCause.PROTOCOL, "data before the hello")
                        key = bind.get(tidx)
                        k = 1
                        avail = (end - pos) // msglen
                        if avail >= _RUN_MIN:
                            k = _run_length(src, pos, msglen, avail)
                        if key is None:
                            unknown += k
                        else:
                            append((key, view, pos, msglen, k))
                        msgs += k
                        nbytes += k * (msglen - _DATA_HDR_LEN)
                        pos += k * msglen
                        continue
                else:
                    vt, nh, msglen = _BASE.unpack_from(src, pos)
                    if vt == 0 and nh == 0 and msglen >= _DATA_HDR_LEN:
                        break  # the rest of a data header is still to come
                nxt = self._control_at(src, pos, end, vt, msglen, now)
                if nxt < 0:
                    break  # the rest of the control message is still to come
                pos = nxt
                if not self.connected:  # the control backlog cost the link
                    return
                up = self.state is _UP
        except _Protocol as exc:
            self._rx_tail = b""
            self._lose(exc.cause, exc.reason)
            return
        finally:
            st.data_msgs_rcvd += msgs
            st.data_msg_bytes_rcvd += nbytes
            st.data_msgs_rcvd_unknown_source += unknown
        self._rx_tail = src[pos:] if pos < end else b""

    def _control_at(self, src: bytes, pos: int, end: int, vt: int, msglen: int, now: float) -> int:
        """Handle the control message at ``pos``: the offset after it, or -1 when it is not
        complete yet.  Raises _Protocol for bytes that are not this protocol."""
        if vt != lbmc.MSG_CONTROL or msglen < 4:
            raise _Protocol(
                DownCause.PROTOCOL, f"not a peer-link message (byte0 {vt:#04x}, msglen {msglen})"
            )
        if end - pos < msglen:
            return -1
        try:
            msg, nxt = lbmc.decode_at(src, pos)
        except lbmc.LBMCError as exc:
            raise _Protocol(DownCause.PROTOCOL, f"bad control message: {exc}") from None
        st = self.stats
        st.gateway_cntl_msgs_rcvd += 1
        st.gateway_cntl_msg_bytes_rcvd += msglen
        self._control_received(msg, now)
        return int(nxt)

    def _control_received(self, msg: lbmc.LBMCMessage, now: float) -> None:
        headers = msg.headers
        first = headers[0] if headers else None
        if self.state is LinkState.HANDSHAKE:
            if not isinstance(first, lbmc.TnwgCapabilities):
                raise _Protocol(
                    DownCause.PROTOCOL,
                    "the peer did not start with the peer-link hello (not a pyum DRO peer?)",
                )
            self._hello(msg, first)
            return
        if isinstance(first, lbmc.TcpSid):
            self._udp_offer(msg, first, now)
            return
        if isinstance(first, lbmc.TnwgKa):
            if first.flags & KA_QUERY:
                ka = lbmc.TnwgKa(KA_RESPONSE, first.index, first.ts_seconds, first.ts_microseconds)
                self._control(lbmc.encode(lbmc.LBMCMessage(lbmc.MSG_CONTROL, headers=[ka])))
            elif first.flags & KA_RESPONSE:
                sent = self._ka_sent.pop(first.index, None)
                if sent is not None:
                    self._rtt(now - sent, now)
            return
        if isinstance(first, lbmc.TnwgCapabilities):
            raise _Protocol(DownCause.PROTOCOL, "a second hello on the same connection")
        if isinstance(first, lbmc.RouteInfo):
            self._route_info(msg, first)
            return
        if isinstance(first, lbmc.Domain) and first.flags in (IMMEDIATE_UIM, IMMEDIATE_MIM):
            self._immediate(msg, first.flags == IMMEDIATE_MIM)
            return
        otid = msg.find(lbmc.Otid)
        topic = msg.find(lbmc.TopicName)
        if topic is not None and otid is not None:
            source = SourceKey(bytes(otid.otid), _uncstr(topic.topic))
            if msg.find(lbmc.Sri) is not None:
                rest = [h for h in msg.headers if not isinstance(h, (lbmc.Otid, lbmc.TopicName))]
                frame = lbmc.encode(lbmc.LBMCMessage(lbmc.MSG_CONTROL, headers=rest))
                self._events.append(ControlReceived(source, frame))
                return
            if msg.payload and len(msg.headers) == 2:  # umcore.dro.recovery's (send_recovery)
                self._events.append(RecoveryReceived(source, bytes(msg.payload)))
                return
            idx = msg.find(lbmc.TopicIdx)
            ad = msg.find(lbmc.Advertisement)
            if idx is not None:
                if idx.tidx not in self._bind_in and len(self._bind_in) >= MAX_LINK_SOURCES:
                    raise _Protocol(
                        DownCause.PROTOCOL, f"more than {MAX_LINK_SOURCES} sources bound"
                    )
                self._bind_in[idx.tidx] = source
                return
            if ad is not None:
                if ad.flags & AD_EOS:
                    if self._bind_in.get(ad.topic_idx) == source:
                        del self._bind_in[ad.topic_idx]
                    self._events.append(SourceGoneReceived(source))
                else:
                    persist = None
                    ex = msg.find(lbmc.TopicSourceExfunc)
                    if ad.ad_flags & AD_FLAG_UME and ex is not None and ex.src_port:
                        persist = PersistIdentity(
                            lbmc.ip4_to_str(ex.src_ip), ex.src_port, ad.transport_idx,
                            ad.topic_idx, ex.flags,
                        )  # fmt: skip
                    self._events.append(
                        SourceReceived(
                            source,
                            ad.cost,
                            ad.hop_count,
                            ad.domain_id,
                            bool(ad.flags & AD_CHANGE),
                            persist,
                            late_join=bool(ad.ad_flags & AD_FLAG_LJ),
                        )
                    )
                return
        if topic is not None:
            ti = msg.find(lbmc.TopicInterest)
            if ti is not None:
                self._events.append(
                    InterestReceived(
                        InterestKey(_uncstr(topic.topic)),
                        ti.domain_id,
                        bool(ti.flags & INTEREST_CANCEL),
                        bool(ti.flags & INTEREST_REFRESH),
                    )
                )
                return
            pi = msg.find(lbmc.PatternInterest)
            if pi is not None and pi.pattern_type in (1, 2):
                self._events.append(
                    InterestReceived(
                        InterestKey(_uncstr(topic.topic), pi.pattern_type),
                        pi.domain_id,
                        bool(pi.flags & PATTERN_CANCEL),
                        bool(pi.flags & PATTERN_REFRESH),
                    )
                )
                return
        self.stats.cntl_msgs_unhandled += 1

    def _immediate(self, msg: lbmc.LBMCMessage, multicast: bool) -> None:
        """An immediate message from the other DRO (send_immediate); one that is not exactly one
        LBMC message is counted (``cntl_msgs_unhandled``) and skipped: the link stays."""
        try:
            inner = lbmc.decode(msg.payload)
        except lbmc.LBMCError:
            self.stats.cntl_msgs_unhandled += 1
            return
        self._events.append(ImmediateReceived(multicast, inner))

    def _hello(self, msg: lbmc.LBMCMessage, caps: lbmc.TnwgCapabilities) -> None:
        version = caps.flags & _VERSION_MASK
        ri = msg.find(lbmc.RouteInfo)
        gn = msg.find(lbmc.GatewayName)
        if version not in SUPPORTED_PEER_VERSIONS:
            raise _Protocol(
                DownCause.REFUSED,
                f"the peer speaks peer-link protocol version {version}; this DRO speaks "
                f"{', '.join(map(str, sorted(SUPPORTED_PEER_VERSIONS)))}",
            )
        if ri is None:
            raise _Protocol(DownCause.PROTOCOL, "the peer's hello names no node id")
        if ri.node_id == self.node_id:
            raise _Protocol(
                DownCause.REFUSED, f"the peer has this DRO's own node id {ri.node_id:#x}"
            )
        self._to(LinkEvent.HELLO)
        self.peer_node_id = ri.node_id
        self.peer_name = _uncstr(gn.gateway_name) if gn is not None else ""
        self.peer_version = version
        self._events.append(LinkUp(ri.node_id, self.peer_name, version))

    def _route_info(self, msg: lbmc.LBMCMessage, ri: lbmc.RouteInfo) -> None:
        gn = msg.find(lbmc.GatewayName)
        adj = tuple(
            Adjacency((n.flags, n.node_id), n.ingress_cost)
            for n in msg.find_all(lbmc.RouteInfoNeighbor)
        )
        info = RouteInfo(
            ri.node_id,
            _uncstr(gn.gateway_name) if gn is not None else "",
            ri.gateway_version,
            ri.topology,
            adj,
        )
        self._events.append(RouteInfoReceived(info))

    def _rtt(self, seconds: float, now: float) -> None:
        us = max(0, round(seconds * 1e6))
        st = self.stats
        st.rtt_samples += 1
        st.rtt_total += us
        st.rtt_min = us if st.rtt_samples == 1 else min(st.rtt_min, us)
        st.rtt_max = max(st.rtt_max, us)
        st.last_ka_time = now

    # --- time ---------------------------------------------------------------------------------

    def next_timer(self) -> float | None:
        """When ``handle_timer`` must run next (None: nothing pending)."""
        if self.state is LinkState.DOWN:
            return None
        if self.state is LinkState.HANDSHAKE:
            return self.handshake_deadline
        times: list[float] = []
        if self.ka_interval > 0:
            times.append(self.last_rx + self.ka_timeout)
            times.append(self._ka_due())
        if self._batch and self.batching:
            times.append(self._batch_started + self.batch_interval)
        udp = self._udp
        if udp is not None:
            if udp.connected_at is None:
                times.append(self._udp_deadline)
            t = udp.next_timer()
            if t is not None:
                times.append(t)
        return min(times) if times else None

    def _ka_due(self) -> float:
        if self.ka_idle:
            return max(self._ka_next, self.last_rx + self.ka_interval)
        return self._ka_next

    def handle_timer(self, now: float) -> None:
        if self.state is LinkState.HANDSHAKE:
            if now >= self.handshake_deadline:
                self._lose(
                    DownCause.TIMEOUT,
                    f"no peer-link hello within {PEER_HANDSHAKE_TIMEOUT:g} s of connecting",
                )
            return
        if self.state is not LinkState.UP:
            return
        if self._udp is not None:
            self._udp.handle_timer(now)
            self._udp_after(now)
            if not self.up:
                return
        if self.ka_interval > 0:
            if now >= self.last_rx + self.ka_timeout:
                self._lose(
                    DownCause.TIMEOUT,
                    f"nothing from the peer for {self.ka_timeout * 1000:.0f} ms "
                    "(gateway-keepalive timeout)",
                )
                return
            if now >= self._ka_due():
                self._ka_index = (self._ka_index + 1) & _U32
                self._ka_sent[self._ka_index] = now
                if len(self._ka_sent) > MAX_OUTSTANDING_KA:
                    del self._ka_sent[next(iter(self._ka_sent))]
                secs = int(now)
                ka = lbmc.TnwgKa(
                    KA_QUERY, self._ka_index, secs & (1 << 64) - 1, int((now - secs) * 1e6)
                )
                self._ka_next = now + self.ka_interval
                self._control(lbmc.encode(lbmc.LBMCMessage(lbmc.MSG_CONTROL, headers=[ka])))
                if not self.up:  # the control backlog cost the link
                    return
        if self._batch and self.batching and now >= self._batch_started + self.batch_interval:
            self._close_batch()

    # --- the UDP data link (<udp>) --------------------------------------------------------------

    def _udp_connect(self, now: float) -> None:
        """A connection started: a new UDP session pair; the initiator offers its UDP port."""
        cfg = self.udp_config
        assert cfg is not None
        if self.udp_limiter is None:
            rl = cfg.peer_rate_limit
            self.udp_limiter = RateLimiter(rl.data, rl.retransmit, rl.interval / 1000, now)
        self._udp = PeerUdp(cfg, now, limiter=self.udp_limiter)
        self.udp_peer_port = None
        self._udp_known.clear()
        self._udp_waiting.clear()
        self._udp_waiting_bytes = 0
        # the port exchange, then the LBT-RU connection requests (notes: after max-attempts
        # the portal re-initializes and the initiator restarts both links)
        self._udp_deadline = now + self._udp_budget()
        if self.initiator:
            self._udp_send_offer()

    def _udp_send_offer(self) -> None:
        """Our UDP port and LBT-RU session id [inferred]: TCP_SID + TOPIC_SOURCE_EXFUNC."""
        assert self._udp is not None and self.udp_config is not None
        offer = [
            lbmc.TcpSid(0, self._udp.session_id),
            lbmc.TopicSourceExfunc(0, 0, self.udp_config.port, 0, 0),
        ]
        self._control(lbmc.encode(lbmc.LBMCMessage(lbmc.MSG_CONTROL, headers=offer)))

    def _udp_offer(self, msg: lbmc.LBMCMessage, sid: lbmc.TcpSid, now: float) -> None:
        """The other DRO's UDP port and session id (module umcore.dro.inferred)."""
        udp = self._udp
        if udp is None:
            raise _Protocol(
                DownCause.REFUSED,
                "the peer portal has a UDP data link (<udp>) and this one has none: "
                "configure <udp> on both portals or on neither",
            )
        if udp.started:
            raise _Protocol(DownCause.PROTOCOL, "a second UDP port offer on the same connection")
        ex = msg.find(lbmc.TopicSourceExfunc)
        if ex is None or not 0 < ex.src_port <= 0xFFFF or not sid.sid:
            raise _Protocol(DownCause.PROTOCOL, "a UDP port offer without a port or session id")
        self.udp_peer_port = ex.src_port
        if not self.initiator:
            self._udp_send_offer()
        udp.start(sid.sid, now)

    def _udp_dropped(self, n: int) -> bool:
        """A frame the UDP data link did not take (not up): counted, False."""
        st = self.stats
        st.data_fragments_dropped_not_operational += 1
        st.data_fragment_bytes_dropped_not_operational += n
        return False

    def receive_datagram(self, data: bytes, now: float) -> None:
        """A datagram from the other DRO's UDP port (the adapter checks the address)."""
        udp = self._udp
        if udp is None or self.state is not _UP:
            return
        udp.receive_datagram(data, now)
        self._udp_after(now)

    def _udp_after(self, now: float) -> None:
        udp = self._udp
        assert udp is not None
        frames = udp.take_frames()
        if frames:
            known = self._udp_known
            if not self._udp_waiting and all(f[0] in known for f in frames):
                self._frames.extend(frames)
            else:
                self._udp_wait(frames)
        if udp.failure is not None:
            self._lose(DownCause.UDP, f"UDP data link: {udp.failure.reason}")
        elif udp.connected_at is None and now >= self._udp_deadline:
            what = "no UDP port from the peer" if not udp.started else "UDP data link not up"
            self._lose(
                DownCause.UDP,
                f"{what} within {self._udp_budget():g} s of connecting "
                "(<udp> on both portals? UDP port reachable?)",
            )

    def _udp_budget(self) -> float:
        """Seconds from the connection to a working UDP link: the hello and port exchange, then
        ``<connect>`` max-attempts connection requests attempt-interval apart."""
        assert self.udp_config is not None
        c = self.udp_config.connect
        return PEER_HANDSHAKE_TIMEOUT + c.attempt_interval * (c.max_attempts + 1) / 1000

    def _udp_wait(self, frames: list[tuple[SourceKey, int, memoryview]]) -> None:
        """Frames whose source's advertisement (TCP) has not arrived yet: the two links do not
        keep each other's order, and the core drops a frame of a source it does not know."""
        self._udp_sources(self._events)
        known = self._udp_known
        waiting = self._udp_waiting
        for f in frames:
            if f[0] in known and not waiting:
                self._frames.append(f)
                continue
            waiting.append(f)
            self._udp_waiting_bytes += len(f[2])
        while self._udp_waiting_bytes > MAX_UDP_WAITING_BYTES:
            gone = waiting.pop(0)
            self._udp_waiting_bytes -= len(gone[2])
            self.udp_frames_dropped_unadvertised += 1
        self._udp_release()

    def _udp_sources(self, events: list[CoreEvent]) -> None:
        """Sources advertised (or withdrawn) in ``events``; frames waiting for them go on."""
        known = self._udp_known
        for ev in events:
            if isinstance(ev, SourceReceived):
                if len(known) < MAX_LINK_SOURCES:
                    known.add(ev.source)
            elif isinstance(ev, SourceGoneReceived):
                known.discard(ev.source)
        if self._udp_waiting:
            self._udp_release()

    def _udp_release(self) -> None:
        """Waiting frames of known sources, in order, to the frames handed out."""
        known = self._udp_known
        keep: list[tuple[SourceKey, int, memoryview]] = []
        held: set[SourceKey] = set()  # a source with an earlier frame still waiting
        for f in self._udp_waiting:
            if f[0] in known and f[0] not in held:
                self._frames.append(f)
                self._udp_waiting_bytes -= len(f[2])
            else:
                keep.append(f)
                held.add(f[0])
        self._udp_waiting = keep

    def take_datagrams(self, now: float) -> list[bytes | bytearray]:
        """Datagrams for the other DRO's UDP port (``udp_peer_port``), in order."""
        udp = self._udp
        if udp is None or self.udp_peer_port is None:
            return []
        return udp.take_datagrams(now)

    @property
    def udp_up(self) -> bool:
        """The UDP data link carries data (always False without ``<udp>``)."""
        return self._udp is not None and self._udp.up

    def _udp_end(self) -> None:
        udp, self._udp = self._udp, None
        if udp is not None:
            _add(self.udp_send_totals, udp.send_stats())
            _add(self.udp_receive_totals, udp.receive_stats())

    def udp_stats(self) -> tuple[dict[str, int], dict[str, int]]:
        """(UDPSend, UDPReceive) figures over every connection (ums_mon names)."""
        send, receive = dict(self.udp_send_totals), dict(self.udp_receive_totals)
        if self._udp is not None:
            _add(send, self._udp.send_stats())
            _add(receive, self._udp.receive_stats())
        return send, receive


def _sqn_bytes(seq: range | list[int]) -> bytes:
    """Sequence numbers as consecutive u32s in network order (send_run's header columns)."""
    a = array(_U32_CODE, seq)
    if _SWAP:
        a.byteswap()
    return a.tobytes()


def _run_length(src: bytes, pos: int, msglen: int, avail: int) -> int:
    """How many of the ``avail`` messages of ``msglen`` bytes from ``pos`` are data messages of
    the first one's length and topic index (its first 8 header bytes): byte columns compared
    at once instead of a header parsed per message."""
    k = avail
    stop = pos + avail * msglen
    for c in range(pos, pos + 8):
        col = src[c:stop:msglen]
        same = k - len(col[:k].lstrip(col[:1]))
        if same < k:
            k = same
    return k


def _add(total: dict[str, int], more: dict[str, int]) -> None:
    for k, v in more.items():
        if k.endswith("_min"):  # "no sample" minimums stay the smallest
            total[k] = min(total.get(k, v), v)
        else:
            total[k] = total.get(k, 0) + v
