"""Sans-IO LBT-RM transport: the source session and the receiver session (reliable multicast).

Theory of operation
-------------------
An LBT-RM transport session (seed 003 L1879-1929, notes 1.3) is a multicast group and
destination port inside one context, plus the source's *unicast NAK port* (from
``transport_lbtrm_source_port_low..high``) that every datagram header carries as ``ucast_port``
and the TIR advertises.  The source multicasts DATA (batches of LBMC messages), session
messages (SM) while idle, retransmissions and NCFs, all to the group; receivers unicast NAKs to
the NAK port.  Everything that is not LBT-RM specific -- window, rate limits, SM back-off, NAK
policy; gap tracking, NAK timers, delivery controllers -- is :mod:`umcore.transport.lbt`.

:class:`LbtrmSource` output: :attr:`~LbtSource.ready` and :attr:`~LbtSource.outbox` datagrams
all go to the group (the addresses are ignored: a retransmission to the group also repairs the
receivers that kept quiet thanks to NAK back-off).  :meth:`LbtrmSource.receive_datagram` takes
what arrives on the NAK port.

:class:`LbtrmReceiver` is one joined session, keyed (source IP, NAK port, session id); the
adapter demultiplexes the group socket to it.  Its :attr:`~LbtReceiver.outbox` holds NAKs for
(source IP, NAK port).  Datagrams with another session id are dropped (stale resolution).

Random NAK back-off uses ``random.Random`` (not a secret: it only spreads receivers in time).
"""

from __future__ import annotations

import random
import struct

from umcore.transport.lbt import (
    Datagram,
    LbtReceiver,
    LbtSource,
    ReceiverConfig,
    SourceConfig,
)
from umcore.transport.ratelimit import RateLimiter
from umcore.wire import lbtrm as w

__all__ = ["LbtrmReceiver", "LbtrmSource", "ReceiverConfig", "SourceConfig", "source_string"]

_RX_FLAGS = w.DATA_FLAG_RX
# The receiver's hot path: a version 0 DATA header without option headers, in one unpack (type,
# next header, NAK port, session id, sqn, trail sqn, flags/FEC type, TGS, symbol).
_DATA_PREFIX = struct.Struct("!BBHIIIBBH")
_DATA_PREFIX_SIZE = _DATA_PREFIX.size  # 20
# The source's DATA header before its sequence numbers (type, next header, NAK port, session id).
_DATA_PRE = struct.Struct("!BBHI")


def source_string(src_ip: str, nak_port: int, session_id: int, group: str, dport: int) -> str:
    """UM's name for the session: ``LBTRM:srcip:nakport:sid:group:dport``."""
    return f"LBTRM:{src_ip}:{nak_port}:{session_id:08x}:{group}:{dport}"


class LbtrmSource(LbtSource):
    """The source end of one LBT-RM session (see the module docstring)."""

    # Slots as BatchingSource's (see there).
    __slots__ = ("_ucast_port",)

    header_size = w.HEADER_SIZE + 12  # 20: common header + DATA header, no options

    def __init__(
        self,
        session_id: int,
        ucast_port: int,
        config: SourceConfig | None = None,
        limiter: RateLimiter | None = None,
        now: float = 0.0,
    ) -> None:
        super().__init__(session_id, config or SourceConfig(), limiter, now)
        self.ucast_port = ucast_port

    @property
    def ucast_port(self) -> int:
        """The NAK port (the adapter sets it once its socket is bound); setting it sets the
        DATA header's constant parts: type/version, next header 0, NAK port, session id |
        sqn, trail | flags, TGS and FEC symbol 0 (w.encode_data's bytes)."""
        return self._ucast_port

    @ucast_port.setter
    def ucast_port(self, port: int) -> None:
        if not 0 <= port <= 0xFFFF:
            raise ValueError("a NAK port is a 16-bit number")
        self._ucast_port = port
        self.set_data_header(_DATA_PRE.pack(w.TYPE_DATA, 0, port, self.session_id), bytes(4))

    def _rx_datagram(self, original: Datagram, trail: int) -> bytes:
        # Same sequence number and payload; the current trail; the RX flag.
        sqn = int.from_bytes(original[8:12], "big")
        return w.encode_data(
            self.session_id, self.ucast_port, sqn, trail, original[self.header_size :], _RX_FLAGS
        )

    def _session_message(self, lead: int, trail: int) -> None:
        sm = w.LBTRMSessionMessage(self.session_id, self.ucast_port, self.sm_sqn, lead, trail)
        self.outbox.append((w.encode(sm), None))

    def _ncf(self, sqns: list[int], reason: int, addr: object) -> None:
        ncf = w.LBTRMNcf(self.session_id, self.ucast_port, self.trail_sqn, sqns, reason)
        self.outbox.append((w.encode(ncf), None))

    def receive_datagram(self, data: bytes | memoryview, addr: object, now: float) -> None:
        """A datagram on the NAK port; anything but a NAK for this session is dropped."""
        self.now = now
        rec = w.decode(data)  # LBTRMError on garbage: the adapter counts and drops it
        if not isinstance(rec, w.LBTRMNak) or rec.session_id != self.session_id:
            return
        self.handle_nak(rec.sqns, addr, now)


class LbtrmReceiver(LbtReceiver):
    """The receiver end of one LBT-RM session (see the module docstring)."""

    MONITOR_FIELDS = (*LbtReceiver.MONITOR_FIELDS, "out_of_order")

    def __init__(
        self,
        session_id: int,
        ucast_port: int,
        config: ReceiverConfig | None = None,
        now: float = 0.0,
        rng: random.Random | None = None,
    ) -> None:
        super().__init__(config or ReceiverConfig(), now, rng)
        self.session_id = session_id
        self.ucast_port = ucast_port

    def receive_datagram(self, data: bytes | memoryview, now: float) -> None:
        """A datagram from the group for this session.  Raises LBTRMError on garbage."""
        if len(data) >= _DATA_PREFIX_SIZE and data[0] == w.TYPE_DATA and data[1] == 0:
            _t, _n, port, sid, sqn, trail, flags, _g, _s = _DATA_PREFIX.unpack_from(data)
            if sid != self.session_id or port != self.ucast_port:
                self.stats.dgrams_dropped_sid += 1
                return
            self.receive_data(sqn, trail, flags & _RX_FLAGS != 0, data, _DATA_PREFIX_SIZE, now)
            return
        ptype, port, sid, sqn, trail, flags, payload = w.decode_header(data)
        if sid != self.session_id or port != self.ucast_port:
            self.stats.dgrams_dropped_sid += 1
            return
        if ptype == w.TYPE_DATA:
            self.receive_data(
                sqn, trail, bool(flags & _RX_FLAGS), data, len(data) - len(payload), now
            )
            return
        rec = w.decode(data)
        if isinstance(rec, w.LBTRMSessionMessage):
            self.receive_sm(rec.lead_sqn, rec.trail_sqn, now)
        elif isinstance(rec, w.LBTRMNcf):
            self._ncf(rec.reason, rec.trail_sqn, rec.sqns, now)
        else:
            self.stats.dgrams_dropped_type += 1  # a NAK from another receiver: not ours

    def _send_nak(self, sqns: list[int]) -> None:
        self.outbox.append(w.encode(w.LBTRMNak(self.session_id, self.ucast_port, sqns)))
