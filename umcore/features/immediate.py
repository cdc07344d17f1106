"""Immediate messaging: UIM over TCP to a context's request port, MIM over LBT-RM multicast.

Theory of operation
-------------------
**UIM** (unicast immediate message, seed 10.7).  Every context listens on its *request port*
(``request_tcp_port_low..high``, 14391-14395).  A UIM is an LBMC data message written on a TCP
connection *from the sender to the destination's request port*; replies never come back on that
socket (the replier opens its own connection to the address it was given: REQUEST.ipaddr/port,
LJI_REQ.req_ip/port, UME_RXREQ.rx_ip/port).  The request port therefore carries every kind of
context-to-context traffic; :func:`classify` sorts what arrives:

================  ===========================================================================
kind              LBMC
================  ===========================================================================
``UIM``           DATA (+ TOPICNAME when the UIM has a topic) + STREAM
``REQUEST``       the same plus a REQUEST header (where responses go, request index)
``RESPONSE``      DATA + APPHDR (ignore bit, code :data:`RESPONSE_APPHDR_CODE`, data = request
                  index) + STREAM — *our* marking: tshark 4.0.17 has no response header and how
                  real UM marks responses is not observable here [inferred, wire-lbmc 4.1]
``RETRANS``       RETRANS (0xA) data + OTID (which transport it is from) + TOPICNAME: late join
                  and OTR retransmissions
``LJI_REQ``       CONTROL + LJI_REQ
``LJ_INFO``       CONTROL + UME_LJ_INFO
``RXREQ``         CONTROL + UME_RXREQ (one or more)
================  ===========================================================================

The STREAM header carries the sender's context instance (8 random bytes), a stream id per
destination connection and a per-stream sqn, as UM's UIM streams do (wire-lbmc 10).

:class:`UimConnections` is the sans-IO table of *outgoing* connections: created on the first
send to a destination (the message is held until the connection is up), reused while used, and
closed after ``response_tcp_deletion_timeout`` idle (seed 10.7.5).  A connection opened because
a request arrived is *held* by the request's response object and its idle timer starts only once
every holder released it (seed L4971, trap 4).  Queued bytes per connection are bounded by
``response_session_maximum_buffer``; a send over it raises :class:`~umcore.errors.WouldBlock`.

**MIM** (multicast immediate message, seed 10.8) travels in LBT-RM DATA datagrams to the MIM
group (``mim_outgoing_address``:``mim_outgoing_destination_port``, 224.10.10.21:14401) with the
topic in a TOPICNAME header.  :class:`MimSender` is the temporary transport session (new session
id after ``mim_src_deletion_timeout`` idle); :class:`MimReceiver` orders datagrams per session
and reports gaps to the context (no EOS, no WAKEUP).  Limitation: MIM here has no NAK-based
repair (the LBT-RM recovery engine is part A's); a gap is reported as unrecoverable loss at once.
"""

from __future__ import annotations

import struct
from collections import deque
from typing import Any

from umcore.errors import LocalProtocolError, WouldBlock
from umcore.wire import lbmc, lbtrm

__all__ = [
    "KIND_LJI_REQ",
    "KIND_LJ_INFO",
    "KIND_REQUEST",
    "KIND_RESPONSE",
    "KIND_RETRANS",
    "KIND_RXREQ",
    "KIND_UIM",
    "MAX_MIM_SESSIONS",
    "MAX_OUT_CONNECTIONS",
    "RESPONSE_APPHDR_CODE",
    "MimReceiver",
    "MimSender",
    "UimConnections",
    "classify",
    "decode_topic",
    "encode_response",
    "encode_uim",
    "parse_destination",
]

KIND_UIM = "uim"
KIND_REQUEST = "request"
KIND_RESPONSE = "response"
KIND_RETRANS = "retrans"
KIND_LJI_REQ = "lji_req"
KIND_LJ_INFO = "lj_info"
KIND_RXREQ = "rxreq"
KIND_OTHER = "other"

# APPHDR code marking a response (ours: see the module docstring).  The ignore bit is set so a
# peer that does not know it may skip the header.
RESPONSE_APPHDR_CODE = 0x7F01
_U32 = struct.Struct("!I")
# Outgoing UIM connections one context keeps at once; a send to one more destination fails
# (each is a socket; UM has no documented cap, ours keeps a runaway sender bounded).
MAX_OUT_CONNECTIONS = 1024
# MIM transport sessions a receiving context tracks at once (each costs a small record).
MAX_MIM_SESSIONS = 4096


def _topic_bytes(topic: str) -> bytes:
    raw = topic.encode() + b"\0"
    if len(raw) > 251:
        raise LocalProtocolError(f"topic name too long for a TOPICNAME header: {topic[:40]!r}...")
    return raw


def decode_topic(raw: bytes) -> str:
    """A TOPICNAME's bytes as text (one trailing NUL stripped, undecodable bytes replaced)."""
    if raw.endswith(b"\0"):
        raw = raw[:-1]
    return raw.decode("utf-8", "replace")


def encode_uim(
    payload: bytes,
    *,
    topic: str | None,
    ctxinst: bytes,
    stream_id: int,
    sqn: int,
    request: tuple[int, str, int] | None = None,
    extra: list[lbmc.Header] | None = None,
) -> bytes:
    """One UIM (``request``: (request index, requester ip, requester port) makes it a request)."""
    headers: list[lbmc.Header] = []
    if topic is not None:
        headers.append(lbmc.TopicName(_topic_bytes(topic)))
    headers.append(lbmc.Stream(0, stream_id, sqn, ctxinst))
    if request is not None:
        qidx, ip, port = request
        headers.append(lbmc.Request(0, 0, qidx, port, 0, lbmc.ip4_from_str(ip)))
    if extra:
        headers.extend(extra)
    return lbmc.encode(lbmc.LBMCMessage(lbmc.MSG_DATA, 0, sqn, headers, payload))


def encode_response(
    qidx: int, payload: bytes, *, ctxinst: bytes, stream_id: int, sqn: int,
    extra: list[lbmc.Header] | None = None,
) -> bytes:  # fmt: skip
    """One response to request ``qidx`` (see the module docstring for the marking)."""
    headers: list[lbmc.Header] = [
        lbmc.AppHeader(RESPONSE_APPHDR_CODE, _U32.pack(qidx & 0xFFFFFFFF), True),
        lbmc.Stream(0, stream_id, sqn, ctxinst),
    ]
    if extra:
        headers.extend(extra)
    return lbmc.encode(lbmc.LBMCMessage(lbmc.MSG_DATA, 0, sqn, headers, payload))


def classify(msg: lbmc.LBMCMessage) -> str:
    """Which kind of request-port traffic ``msg`` is (``KIND_*``)."""
    t = msg.msg_type
    if t == lbmc.MSG_CONTROL:
        for h in msg.headers:
            k = type(h)
            if k is lbmc.LjiReq:
                return KIND_LJI_REQ
            if k is lbmc.UmeLjInfo:
                return KIND_LJ_INFO
            if k is lbmc.UmeRxReq:
                return KIND_RXREQ
        return KIND_OTHER
    if t == lbmc.MSG_RETRANS:
        return KIND_RETRANS
    if t != lbmc.MSG_DATA:
        return KIND_OTHER
    for h in msg.headers:
        k = type(h)
        if k is lbmc.Request:
            return KIND_REQUEST
        if isinstance(h, lbmc.AppHeader) and h.code == RESPONSE_APPHDR_CODE and len(h.data) >= 4:
            return KIND_RESPONSE
    return KIND_UIM


def response_index(msg: lbmc.LBMCMessage) -> int:
    """The request index a RESPONSE message answers."""
    hdr = msg.find(lbmc.AppHeader)
    assert hdr is not None
    value: int = _U32.unpack_from(hdr.data)[0]
    return value


def parse_destination(dest: str) -> tuple[str, int]:
    """``"TCP:ip:port"`` (or ``"TCP:domain:ip:port"``, the domain ignored: no DRO yet) ->
    (ip, port).  Raises ValueError otherwise."""
    parts = dest.split(":")
    if parts[0].upper() != "TCP" or len(parts) not in (3, 4):
        raise ValueError(f"not a UIM destination (TCP:ip:port): {dest!r}")
    ip, port = parts[-2], int(parts[-1])
    lbmc.ip4_from_str(ip)
    if not 0 < port < 65536:
        raise ValueError(f"bad port in {dest!r}")
    return ip, port


# ------------------------------------------------------------------ outgoing connections
Address = tuple[str, int]


class _Out:
    __slots__ = (
        "connected", "connecting", "deadline", "holds", "queue", "queued", "sqn", "stream_id",
    )  # fmt: skip

    def __init__(self, stream_id: int) -> None:
        self.connected = False
        self.connecting = False
        self.queue: deque[bytes] = deque()
        self.queued = 0
        self.holds = 0
        self.deadline: float | None = None
        self.stream_id = stream_id
        self.sqn = 0


class UimStats:
    __slots__ = ("connections_closed", "connections_opened", "messages_sent", "refused")

    def __init__(self) -> None:
        self.connections_opened = 0
        self.connections_closed = 0
        self.messages_sent = 0
        self.refused = 0  # sends refused: queue full or too many connections


class UimConnections:
    """Outgoing UIM connections of one context (see the module docstring).

    The adapter calls :meth:`send`; a result of ``(True, b"")`` means "open a connection to
    dest" (the bytes are queued here until :meth:`connected`), ``(False, data)`` means "write
    data now".  :meth:`handle_timer` returns the destinations idle past the deletion timeout;
    the adapter closes them (or calls :meth:`touch` when its socket still has data queued)."""

    def __init__(
        self, deletion_timeout: float = 20.0, max_buffer: int = 65536, *, ctxinst: bytes
    ) -> None:
        self.deletion_timeout = deletion_timeout
        self.max_buffer = max_buffer
        self.ctxinst = ctxinst
        self._out: dict[Address, _Out] = {}
        self._next_stream = 1
        self.stats = UimStats()

    def __contains__(self, dest: object) -> bool:
        return dest in self._out

    def __len__(self) -> int:
        return len(self._out)

    def _get(self, dest: Address) -> tuple[_Out, bool]:
        o = self._out.get(dest)
        if o is not None:
            return o, False
        if len(self._out) >= MAX_OUT_CONNECTIONS:
            self.stats.refused += 1
            raise WouldBlock(f"{MAX_OUT_CONNECTIONS} outgoing UIM connections already open")
        o = self._out[dest] = _Out(self._next_stream)
        self._next_stream = (self._next_stream + 1) & 0xFFFFFFFF or 1
        self.stats.connections_opened += 1
        return o, True

    def next_stream(self, dest: Address) -> tuple[int, int]:
        """(stream id, sqn) for the next message to ``dest`` (opens the table entry)."""
        o, _ = self._get(dest)
        sqn = o.sqn
        o.sqn = (sqn + 1) & 0xFFFFFFFF
        return o.stream_id, sqn

    def send(self, dest: Address, data: bytes, now: float) -> tuple[bool, bytes]:
        o, _ = self._get(dest)
        if o.holds == 0:
            o.deadline = now + self.deletion_timeout
        self.stats.messages_sent += 1
        if o.connected:
            return False, data
        if o.queued + len(data) > self.max_buffer and o.queue:
            self.stats.refused += 1
            raise WouldBlock(
                f"UIM connection to {dest[0]}:{dest[1]} is not up and its queue is full"
            )
        o.queue.append(data)
        o.queued += len(data)
        return self._start_connect(o), b""

    @staticmethod
    def _start_connect(o: _Out) -> bool:
        if o.connected or o.connecting:
            return False
        o.connecting = True
        return True

    def connected(self, dest: Address, now: float) -> bytes:
        """The connection is up: what was held for it, to write now."""
        o = self._out.get(dest)
        if o is None:
            return b""
        o.connected = True
        o.connecting = False
        out = b"".join(o.queue)
        o.queue.clear()
        o.queued = 0
        return out

    def closed(self, dest: Address) -> int:
        """The connection failed or closed; returns how many held bytes were lost."""
        o = self._out.pop(dest, None)
        if o is None:
            return 0
        self.stats.connections_closed += 1
        return o.queued

    def hold(self, dest: Address, now: float) -> bool:
        """A response object now depends on the connection to ``dest`` (opened on request).
        Returns True when the adapter must open the connection now."""
        o, _ = self._get(dest)
        o.holds += 1
        o.deadline = None
        return self._start_connect(o)

    def release(self, dest: Address, now: float) -> None:
        o = self._out.get(dest)
        if o is None or o.holds == 0:
            return
        o.holds -= 1
        if o.holds == 0:
            o.deadline = now + self.deletion_timeout

    def touch(self, dest: Address, now: float) -> None:
        o = self._out.get(dest)
        if o is not None and o.holds == 0:
            o.deadline = now + self.deletion_timeout

    def next_timer(self) -> float | None:
        best: float | None = None
        for o in self._out.values():
            d = o.deadline
            if d is not None and (best is None or d < best):
                best = d
        return best

    def handle_timer(self, now: float) -> list[Address]:
        """Destinations whose connection has been idle for the deletion timeout (removed from
        the table unless the adapter :meth:`touch`es them back)."""
        due = [k for k, o in self._out.items() if o.deadline is not None and o.deadline <= now]
        for k in due:
            self._out[k].deadline = None
        return due


# ------------------------------------------------------------------ MIM
class MimSender:
    """The temporary LBT-RM transport session MIM is sent on (seed 10.8)."""

    def __init__(self, session_id: int, deletion_timeout: float = 30.0) -> None:
        self.session_id = session_id
        self.deletion_timeout = deletion_timeout
        self.sqn = 0
        self.last_send: float | None = None
        self.sessions_started = 1

    def datagram(
        self,
        topic: str | None,
        payload: bytes,
        now: float,
        *,
        new_session_id: int,
        request: tuple[int, str, int] | None = None,
        extra: list[lbmc.Header] | None = None,
    ) -> bytes:
        """One MIM datagram.  After ``deletion_timeout`` idle the old session is gone and a new
        one (``new_session_id``, sqn from 0) starts: receivers see a new transport session."""
        if self.last_send is not None and now - self.last_send >= self.deletion_timeout:
            self.session_id = new_session_id
            self.sqn = 0
            self.sessions_started += 1
        self.last_send = now
        sqn = self.sqn
        self.sqn = (sqn + 1) & 0xFFFFFFFF
        headers: list[lbmc.Header] = []
        if topic is not None:
            headers.append(lbmc.TopicName(_topic_bytes(topic)))
        if request is not None:
            qidx, ip, port = request
            headers.append(lbmc.Request(0, 0, qidx, port, 0, lbmc.ip4_from_str(ip)))
        if extra:
            headers.extend(extra)
        body = lbmc.encode(lbmc.LBMCMessage(lbmc.MSG_DATA, 0, sqn, headers, payload))
        # Trail = lead: no retransmission window behind a MIM session here.
        return lbtrm.encode_data(self.session_id, 0, sqn, sqn, body)


class _MimSession:
    __slots__ = ("expected", "last_seen")

    def __init__(self, expected: int, now: float) -> None:
        self.expected = expected
        self.last_seen = now


class MimReceiver:
    """Per-session ordering of received MIM datagrams.

    :meth:`receive` returns ``(messages, lost)``: the LBMC messages to deliver and the number
    of datagrams found missing (for the context's ``mim_unrecoverable_loss_function``).  A
    session idle for ``activity_timeout`` is forgotten without any event (MIM has no EOS)."""

    def __init__(self, activity_timeout: float = 60.0) -> None:
        self.activity_timeout = activity_timeout
        self._sessions: dict[tuple[Any, ...], _MimSession] = {}
        self.dropped_malformed = 0
        self.dropped_duplicate = 0
        self.refused_sessions = 0

    def receive(
        self, data: bytes | memoryview, addr: Address, now: float
    ) -> tuple[list[lbmc.LBMCMessage], int]:
        try:
            kind, _port, sid, sqn, _trail, _flags, payload = lbtrm.decode_header(data)
            if kind != lbtrm.TYPE_DATA:
                return [], 0
            msgs = lbmc.decode_all(payload)
        except (lbtrm.LBTRMError, lbmc.LBMCError):
            self.dropped_malformed += 1
            return [], 0
        key = (addr, sid)
        s = self._sessions.get(key)
        lost = 0
        if s is None:
            if len(self._sessions) >= MAX_MIM_SESSIONS:
                self._expire(now)
                if len(self._sessions) >= MAX_MIM_SESSIONS:
                    self.refused_sessions += 1
                    return [], 0
            s = self._sessions[key] = _MimSession(sqn, now)  # leading loss suppressed
        diff = (sqn - s.expected) & 0xFFFFFFFF
        if diff >= 0x80000000:
            self.dropped_duplicate += 1
            return [], 0
        lost = diff
        s.expected = (sqn + 1) & 0xFFFFFFFF
        s.last_seen = now
        return msgs, lost

    def _expire(self, now: float) -> None:
        dead = [k for k, s in self._sessions.items() if now - s.last_seen >= self.activity_timeout]
        for k in dead:
            del self._sessions[k]

    def next_timer(self) -> float | None:
        if not self._sessions:
            return None
        return min(s.last_seen for s in self._sessions.values()) + self.activity_timeout

    def handle_timer(self, now: float) -> None:
        self._expire(now)
