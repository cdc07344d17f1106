"""Sans-IO LBT-RU transport: the source session with its clients, and the receiver session.

Theory of operation
-------------------
LBT-RU (seed 003 L1861-1877, notes 1.2) is reliable unicast over UDP.  The source listens on one
UDP port (from ``transport_lbtru_port_low..high``, announced in its TIR with its session id).  A
receiver binds its own port and sends connection requests (CREQ) every
``transport_lbtru_connect_interval`` (100 ms), at most ``maximum_connect_attempts`` (600) times,
until the source answers with a session message carrying the SYN flag; that SM's lead sequence
number tells the receiver where its stream starts.  From then on the source sends every DATA
datagram to each connected *client* (one copy each, the same bytes) and session messages while
idle; the receiver ACKs every ``acknowledgement_interval`` (500 ms; the ACK is the keepalive),
NAKs gaps, and treats NCFs as LBT-RM does.  The source forgets a client that was silent for
``client_activity_timeout`` (10 s), answers a NAK or ACK from a client it does not know with RST
(the receiver then connects again), and retransmits to the NAKing client only.

Options on the wire: the source puts the SID option (its session id, when
``transport_lbtru_use_session_id`` is 1) on everything it sends except RST (tshark misplaces RST
options, wire note trap 9), and the client's CID option on what goes to one client (SM, NCF,
retransmission); a receiver puts SID (the id from the TIR) and its random client id CID on
CREQ, ACK and NAK.  A receiver drops DATA whose SID is not the one it resolved (stale topic
resolution: UM then lets the session time out rather than disconnect).  A CREQ with the wrong
SID is ignored by the source.

The shared machinery (window, rate limits, SM back-off, NAK policy; gap tracking, NAK timers,
delivery controllers) is :mod:`umcore.transport.lbt`.
"""

from __future__ import annotations

import random
import struct

from umcore.config.options import OptionReader
from umcore.transport.lbt import (
    Datagram,
    LbtReceiver,
    LbtSource,
    ReceiverConfig,
    SourceConfig,
)
from umcore.transport.ratelimit import RateLimiter
from umcore.wire import lbtru as w

# The receiver's hot path: a DATA datagram whose only option is the SID option (what a source
# sends by default), in one unpack (type, first option, flags, sqn, trail sqn; the option's
# next header, length, flags, session id).
_DATA_SID = struct.Struct("!BBHIIBBHI")
_DATA_SID_SIZE = _DATA_SID.size  # 20
_OPT_SID_LEN = 8  # the SID option's hdr_len (its 4-byte head + the u32)
# The source's DATA header around its sequence numbers: type, first option, flags; SID option.
_DATA_PRE = struct.Struct("!BBH")
_OPT_SID = struct.Struct("!BBHI")

__all__ = [
    "LbtruReceiver",
    "LbtruSource",
    "ReceiverConfig",
    "RuReceiverConfig",
    "RuSourceConfig",
    "SourceConfig",
    "source_string",
]

_HDR_SID = 12 + 8  # DATA header + SID option


def source_string(ip: str, port: int, session_id: int | None) -> str:
    """UM's name for the session: ``LBT-RU:ip:port[:sid]``."""
    return f"LBT-RU:{ip}:{port}" + (f":{session_id:08x}" if session_id else "")


class RuSourceConfig(SourceConfig):
    """LBT-RU source options beyond the shared ones."""

    __slots__ = ("client_activity_timeout", "use_session_id")

    def __init__(
        self, *, client_activity_timeout: float = 10.0, use_session_id: bool = True, **kw: object
    ) -> None:
        super().__init__(**kw)  # type: ignore[arg-type]
        self.client_activity_timeout = client_activity_timeout
        self.use_session_id = use_session_id

    @classmethod
    def from_options(cls, source: OptionReader, context: OptionReader) -> RuSourceConfig:
        """An LBT-RU source's settings from its options and its context's."""
        return cls(
            client_activity_timeout=source.seconds("transport_lbtru_client_activity_timeout"),
            use_session_id=bool(source.get("transport_lbtru_use_session_id")),
            **cls.option_values("lbtru", source, context),
        )


class RuReceiverConfig(ReceiverConfig):
    """LBT-RU receiver options beyond the shared ones."""

    __slots__ = ("acknowledgement_interval", "connect_interval", "maximum_connect_attempts")

    def __init__(
        self,
        *,
        connect_interval: float = 0.1,
        maximum_connect_attempts: int = 600,
        acknowledgement_interval: float = 0.5,
        **kw: object,
    ) -> None:
        kw.setdefault("nak_initial_backoff_interval", 0.0)  # RU NAKs at once by default
        super().__init__(**kw)  # type: ignore[arg-type]
        self.connect_interval = connect_interval
        self.maximum_connect_attempts = maximum_connect_attempts
        self.acknowledgement_interval = acknowledgement_interval

    @classmethod
    def from_options(cls, receiver: OptionReader, context: OptionReader) -> RuReceiverConfig:
        """An LBT-RU receiver's settings from the first receiver's options and the context's."""
        p = "transport_lbtru_"
        return cls(
            connect_interval=receiver.seconds(p + "connect_interval"),
            maximum_connect_attempts=int(receiver.get(p + "maximum_connect_attempts")),
            acknowledgement_interval=receiver.seconds(p + "acknowledgement_interval"),
            **cls.option_values("lbtru", receiver, context),
        )


class _Client:
    __slots__ = ("cid", "last_seen")

    def __init__(self, cid: int | None, now: float) -> None:
        self.cid = cid
        self.last_seen = now


class LbtruSource(LbtSource):
    """The source end of one LBT-RU session (see the module docstring).

    :attr:`ready` datagrams go to every address in :attr:`clients`; :attr:`outbox` entries name
    their client's address (None: every client)."""

    # Slots as BatchingSource's (see there).
    __slots__ = (
        "_client_check",
        "clients",
        "events",
        "header_size",
        "ru_config",
        "use_session_id",
    )

    def __init__(
        self,
        session_id: int,
        config: RuSourceConfig | None = None,
        limiter: RateLimiter | None = None,
        now: float = 0.0,
    ) -> None:
        cfg = config or RuSourceConfig()
        self.use_session_id = cfg.use_session_id
        self.header_size = _HDR_SID if cfg.use_session_id else 12
        super().__init__(session_id, cfg, limiter, now)
        # DATA header (w.encode_data's bytes): type/version, first option (SID or none), flags 0
        # | sqn, trail | the SID option (next header 0, length 8, flags 0, session id).
        if cfg.use_session_id:
            pre = _DATA_PRE.pack(w.TYPE_DATA, w.OPT_SID, 0)
            post = _OPT_SID.pack(0, _OPT_SID_LEN, 0, session_id)
        else:
            pre, post = _DATA_PRE.pack(w.TYPE_DATA, 0, 0), b""
        self.set_data_header(pre, post)
        self.ru_config = cfg
        #: Connected receivers: (ip, port) -> client state.
        self.clients: dict[object, _Client] = {}
        self._client_check: float | None = None
        #: Connect/disconnect events for the adapter: ("connect"|"disconnect", addr).
        self.events: list[tuple[str, object]] = []

    MONITOR_FIELDS = (
        "msgs_sent",
        "bytes_sent",
        "nak_pckts_rcved",
        "naks_rcved",
        "naks_ignored",
        "naks_shed",
        "naks_rx_delay_ignored",
        "rxs_sent",
        "rx_bytes_sent",
    )

    def monitor_fields(self) -> dict[str, int]:
        out = super().monitor_fields()
        out["num_clients"] = len(self.clients)
        return out

    @property
    def _sid(self) -> int | None:
        return self.session_id if self.use_session_id else None

    def _rx_datagram(self, original: Datagram, trail: int) -> bytes:
        sqn = int.from_bytes(original[4:8], "big")
        return w.encode_data(sqn, trail, original[self.header_size :], self._sid, w.FLAG_RX)

    def _sm_to(self, addr: object, client: _Client, flags: int = 0) -> None:
        sm = w.LBTRUSessionMessage(
            self.sm_sqn,
            self.lead_sqn,
            self.trail_sqn,
            flags=flags,
            session_id=self._sid,
            client_id=client.cid,
        )
        self.outbox.append((w.encode(sm), addr))

    def _session_message(self, lead: int, trail: int) -> None:
        for addr, client in self.clients.items():
            self._sm_to(addr, client)

    def _ncf(self, sqns: list[int], reason: int, addr: object) -> None:
        client = self.clients.get(addr)
        ncf = w.LBTRUNcf(
            self.trail_sqn,
            sqns,
            reason,
            session_id=self._sid,
            client_id=None if client is None else client.cid,
        )
        self.outbox.append((w.encode(ncf), addr))

    def receive_datagram(self, data: bytes | memoryview, addr: object, now: float) -> None:
        """A datagram from a receiver.  Raises LBTRUError on garbage."""
        self.now = now
        rec = w.decode(data)
        if self.use_session_id and rec.session_id is not None and rec.session_id != self.session_id:
            return  # stale topic resolution: ignore, the receiver times out and re-resolves
        client = self.clients.get(addr)
        if isinstance(rec, w.LBTRUConnectionRequest):
            if client is None:
                client = self.clients[addr] = _Client(rec.client_id, now)
                self.events.append(("connect", addr))
                if self._client_check is None:
                    self._client_check = now + self.ru_config.client_activity_timeout
                    self.timer_dirty = True
            client.cid = rec.client_id
            client.last_seen = now
            self._sm_to(addr, client, w.FLAG_SYN)
            return
        if isinstance(rec, (w.LBTRUAck, w.LBTRUNak)):
            if client is None:
                self.outbox.append((w.encode(w.LBTRUReset()), addr))
                return
            client.last_seen = now
            if isinstance(rec, w.LBTRUNak):
                self.handle_nak(rec.sqns, addr, now)
        # DATA/SM/NCF/RST are source-to-receiver types: a confused peer; ignore.

    def next_timer(self) -> float | None:
        t = super().next_timer()
        c = self._client_check
        if c is not None and (t is None or c < t):
            t = c
        return t

    def on_timer(self, now: float) -> None:
        c = self._client_check
        if c is None or now < c:
            return
        timeout = self.ru_config.client_activity_timeout
        for addr, client in list(self.clients.items()):
            if now - client.last_seen >= timeout:
                del self.clients[addr]
                self.events.append(("disconnect", addr))
        if self.clients:
            oldest = min(cl.last_seen for cl in self.clients.values())
            self._client_check = oldest + timeout
        else:
            self._client_check = None

    def _retransmit(self, dgram: bytes, addr: object) -> None:
        self.outbox.append((dgram, addr))


class LbtruReceiver(LbtReceiver):
    """The receiver end of one LBT-RU session (see the module docstring).

    :attr:`outbox` datagrams all go to the source's (ip, port)."""

    MONITOR_FIELDS = (*LbtReceiver.MONITOR_FIELDS, "dgrams_dropped_sid")

    def __init__(
        self,
        session_id: int | None,
        config: RuReceiverConfig | None = None,
        now: float = 0.0,
        rng: random.Random | None = None,
    ) -> None:
        cfg = config or RuReceiverConfig()
        super().__init__(cfg, now, rng)
        self.ru_config = cfg
        self.session_id = session_id
        self.client_id = self.rng.randrange(1, 0x1_0000_0000)
        self.connected = False
        self.connect_attempts = 0
        self._connect_due: float | None = now
        self._ack_due: float | None = None
        self.resets = 0

    def connect(self, now: float) -> None:
        """Start (or restart) connecting: a CREQ now, then every connect interval."""
        self.connected = False
        self.connect_attempts = 0
        self._connect_due = now
        self.handle_timer(now)

    def receive_datagram(self, data: bytes | memoryview, now: float) -> None:
        """A datagram from the source.  Raises LBTRUError on garbage."""
        if len(data) >= _DATA_SID_SIZE and data[0] == w.TYPE_DATA and data[1] == w.OPT_SID:
            _t, _o, flags, sqn, trail, nxt, hlen, _f, sid = _DATA_SID.unpack_from(data)
            if nxt == 0 and hlen == _OPT_SID_LEN:
                if self.session_id is not None and sid != self.session_id:
                    self.stats.dgrams_dropped_sid += 1
                    return
                if not self.connected:
                    self._connected(now)
                self.receive_data(sqn, trail, flags & w.FLAG_RX != 0, data, _DATA_SID_SIZE, now)
                return
        ptype, flags, sqn, trail, sid, payload = w.decode_header(data)
        if ptype == w.TYPE_DATA:
            if self.session_id is not None and sid != self.session_id:
                self.stats.dgrams_dropped_sid += 1
                return
            if not self.connected:
                self._connected(now)
            rx = bool(flags & w.FLAG_RX)
            self.receive_data(sqn, trail, rx, data, len(data) - len(payload), now)
            return
        rec = w.decode(data)
        if (
            self.session_id is not None
            and rec.session_id is not None
            and rec.session_id != self.session_id
        ):
            self.stats.dgrams_dropped_sid += 1
            return
        if isinstance(rec, w.LBTRUSessionMessage):
            if not self.connected:
                self._connected(now)
            self.receive_sm(rec.lead_sqn, rec.trail_sqn, now)
        elif isinstance(rec, w.LBTRUNcf):
            self._ncf(rec.reason, rec.trail_sqn, rec.sqns, now)
        elif isinstance(rec, w.LBTRUReset):
            self.resets += 1
            self.connect(now)
        else:
            self.stats.dgrams_dropped_type += 1

    def _connected(self, now: float) -> None:
        self.connected = True
        self._connect_due = None
        self._ack_due = now + self.ru_config.acknowledgement_interval
        self.timer_dirty = True

    def _send_nak(self, sqns: list[int]) -> None:
        nak = w.LBTRUNak(sqns, session_id=self.session_id, client_id=self.client_id)
        self.outbox.append(w.encode(nak))

    def next_timer(self) -> float | None:
        t = super().next_timer()
        for other in (self._connect_due, self._ack_due):
            if other is not None and (t is None or other < t):
                t = other
        return t

    def on_timer(self, now: float) -> None:
        cfg = self.ru_config
        due = self._connect_due
        if due is not None and now >= due:
            if self.connect_attempts >= cfg.maximum_connect_attempts:
                self.end()
                return
            self.connect_attempts += 1
            creq = w.LBTRUConnectionRequest(session_id=self.session_id, client_id=self.client_id)
            self.outbox.append(w.encode(creq))
            self._connect_due = now + cfg.connect_interval
        due = self._ack_due
        if due is not None and now >= due and self.connected:
            ack = w.LBTRUAck(
                (self.expected - 1) & 0xFFFFFFFF,
                session_id=self.session_id,
                client_id=self.client_id,
            )
            self.outbox.append(w.encode(ack))
            self._ack_due = now + cfg.acknowledgement_interval
