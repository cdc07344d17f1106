"""Sans-IO LBT-IPC and LBT-SMX session cores: what goes into a ring record and comes out of one.

Theory of operation
-------------------
The ring itself is :mod:`umcore.transport.shmring`; this module is the LBMC side.

- **LBT-IPC source** (:class:`IpcSource`): the batching source every transport shares
  (:class:`~umcore.transport.batching.BatchingSource`: topics, implicit batching, UM
  fragmentation, TSNIs).  Each unit it hands on -- one or more whole LBMC messages -- is one ring
  record (seed 6.4: "sources can send individual messages or a batch of messages, each of which
  possesses an IPC header").  The receiving side is TCP's receiver core
  (:class:`~umcore.transport.tcp.TcpReceiverSession`, fed one record at a time): the same LBMC
  framing, delivery controllers, reassembly, and loss from sequence-number gaps -- which on
  LBT-IPC happen only when a source-paced writer overwrote records a receiver had not read
  (seed 6.4.4: "the loss is absolute").
- **LBT-SMX source** (:class:`SmxSource`): no implicit batching (every send is flushed, seed
  6.5.3), no UM fragmentation (a message longer than ``transport_lbtsmx_datagram_max_size``
  less :data:`SMX_HEADER` bytes is refused), no message properties, application headers or
  requests (seed 6.5.6): a record is exactly one LBMC data message.  Its zero-copy send
  (:meth:`SmxSource.take_sequence_number` with :func:`pack_data_header`) lets the adapter build
  the message in place in the ring.
- **LBT-SMX receiver** (:class:`SmxReceiverSession`): reads the one LBMC message of a record and
  hands its payload to the topic's delivery controller as a ``memoryview`` into the segment (no
  copy), valid during the delivery only; anything else in a record (TSNIs) goes through the
  LBMC codec.
"""

from __future__ import annotations

import struct
from collections.abc import Callable

from umcore.errors import TransportError, UMError
from umcore.transport.batching import BatchingSource
from umcore.transport.tcp import DeliveryController, ReceiverStats
from umcore.wire import lbmc

__all__ = [
    "LBMC_DATA_HEADER",
    "SMX_HEADER",
    "IpcSource",
    "SmxReceiverSession",
    "SmxSource",
    "pack_data_header",
]

#: The LBMC data message header (ver/type, next header, msglen, tidx, sqn) every record starts
#: with.
LBMC_DATA_HEADER = 12
#: UM's LBT-SMX header reservation: a message may be ``transport_lbtsmx_datagram_max_size``
#: less this (seed 6.5.2: "minus 16 bytes for headers").
SMX_HEADER = 16
_DATA = struct.Struct("!BBHII")
_unpack_data = _DATA.unpack_from


def pack_data_header(buf: memoryview, off: int, n: int, tidx: int, sqn: int) -> None:
    """Write the LBMC data header of an ``n``-byte plain message at ``buf[off:]``."""
    _DATA.pack_into(buf, off, 0, 0, LBMC_DATA_HEADER + n, tidx, sqn)


class IpcSource(BatchingSource):
    """An LBT-IPC session's source core (module docstring); :attr:`clients` is set by the
    adapter (receivers attached) for monitoring."""

    def __init__(self, session_id: int, **kwargs: int | float) -> None:
        super().__init__(**kwargs)  # type: ignore[arg-type]
        self.session_id = session_id
        self.clients = 0

    def monitor_fields(self) -> dict[str, int]:
        """ums_mon.proto's LBTIPC / LBTSMX source fields."""
        st = self.stats
        return {
            "msgs_sent": int(st.datagrams_sent),
            "bytes_sent": int(st.bytes_sent),
            "num_clients": self.clients,
        }


class SmxSource(IpcSource):
    """An LBT-SMX session's source core (module docstring)."""

    def __init__(self, session_id: int, *, datagram_max_size: int, **kwargs: int | float) -> None:
        kwargs.pop("batching_minimum_length", None)
        super().__init__(
            session_id,
            datagram_max_size=datagram_max_size,
            batching_minimum_length=1,  # every send is flushed: no implicit batching
            **kwargs,
        )
        #: Largest message (seed 6.5.2): the datagram max size less UM's 16 header bytes.
        self.max_message = datagram_max_size - SMX_HEADER
        self.max_payload = self.max_message  # never fragment: longer messages are refused

    def check_length(self, n: int) -> None:
        if n > self.max_message:
            raise UMError(
                f"LBT-SMX message of {n} bytes exceeds transport_lbtsmx_datagram_max_size "
                f"less {SMX_HEADER} ({self.max_message}); LBT-SMX does not fragment"
            )

    def send_general(
        self, tidx: int, payload: bytes | memoryview, now: float, flush: bool
    ) -> bytes | None:
        self.check_length(len(payload))
        return super().send_general(tidx, payload, now, True)

    def send_with_headers(
        self, tidx: int, headers: list[lbmc.Header], payload: bytes, now: float, flush: bool
    ) -> tuple[int, bytes]:
        raise UMError(
            "LBT-SMX does not support message properties, application headers or requests "
            "(seed 003 6.5.6)"
        )

    def send_framed(
        self, tidx: int, frame: bytes, sqn: int, now: float, flush: bool = False
    ) -> bytes | None:
        raise UMError("LBT-SMX cannot carry pre-framed messages (daemons cannot send on SMX)")

    def send_framed_run(
        self,
        tidx: int,
        data: bytes | bytearray | memoryview,
        size: int,
        count: int,
        last_sqn: int,
        now: float,
        flush: bool = False,
    ) -> bytes | None:
        raise UMError("LBT-SMX cannot carry pre-framed messages (daemons cannot send on SMX)")

    def take_sequence_number(self, tidx: int, n: int, now: float) -> int:
        """The zero-copy send's sequence number for an ``n``-byte message of topic ``tidx``
        (counted as sent); nothing may be batched (every SMX send is flushed)."""
        if n > self.max_message:
            self.check_length(n)
        t = self.topics[tidx]
        if t is None:
            raise KeyError(f"topic index {tidx} is not a source on this session")
        self.end_run()
        sqn = t.sqn
        t.sqn = (sqn + 1) & 0xFFFFFFFF
        t.last_data = now
        self.now = now
        st = self.stats
        st.messages_base += 1
        st.datagrams_base += 1
        st.bytes_base += LBMC_DATA_HEADER + n
        return sqn

    def give_back(self, tidx: int, count: int) -> None:
        """Cancelled zero-copy sends: their sequence numbers are reused (nothing was
        published)."""
        t = self.topics[tidx]
        if t is not None and count:
            t.sqn = (t.sqn - count) & 0xFFFFFFFF
            self.stats.messages_base -= count


class SmxReceiverSession:
    """The receiver core of one joined LBT-SMX session: one LBMC message per record."""

    def __init__(self) -> None:
        self.dcs: dict[int, DeliveryController] = {}
        self._stats = ReceiverStats()
        self.active = False
        #: A raw receiver's sink (the engine's raw receivers): each record's frame as bytes.
        self.frame_sink: Callable[[list[bytes]], None] | None = None
        self.control_sink: Callable[[lbmc.LBMCMessage], None] | None = None

    def subscribe(self, dc: DeliveryController) -> None:
        self.dcs[dc.tidx] = dc

    def unsubscribe(self, tidx: int) -> None:
        self.dcs.pop(tidx, None)

    @property
    def stats(self) -> ReceiverStats:
        return self._stats

    def receive_record(self, rec: memoryview) -> None:
        """One record (a view into the segment, valid during this call only)."""
        st = self._stats
        n = len(rec)
        st.bytes_received += n
        if n < LBMC_DATA_HEADER:
            raise TransportError(f"LBT-SMX record of {n} bytes: shorter than an LBMC header")
        if self.frame_sink is not None:
            self.frame_sink([bytes(rec)])
        vt, nh, msglen, tidx, sqn = _unpack_data(rec, 0)
        if vt == 0 and nh == 0 and msglen == n:
            st.messages_received += 1
            dc = self.dcs.get(tidx)
            if dc is None:
                st.messages_no_topic += 1
                return
            payload = rec[LBMC_DATA_HEADER:]
            try:
                if sqn == dc.expected or not dc.started:  # in order, or the first one
                    if not dc.started and dc.before_start is not None:
                        dc.before_start((sqn - 1) & 0xFFFFFFFF)  # sent before this session joined
                    dc.started = True
                    dc.expected = (sqn + 1) & 0xFFFFFFFF
                    dc.fused += 1  # folded by the owner's statistics read (see stats_for)
                    dc.deliver_plain(sqn, payload)  # type: ignore[arg-type]
                else:
                    dc.on_data(sqn, payload)
            finally:
                payload.release()
            return
        try:
            m = lbmc.decode(bytes(rec))
        except lbmc.LBMCError as exc:
            raise TransportError(f"LBT-SMX record is not LBMC: {exc}") from None
        if m.msg_type in (lbmc.MSG_DATA, lbmc.MSG_RETRANS):
            # Data with extra LBMC headers (UM's SMX sources send none; a pyum source's
            # persistence headers, say): delivered as TCP delivers them.
            st.messages_received += 1
            dc = self.dcs.get(m.tidx)
            if dc is None:
                st.messages_no_topic += 1
                return
            dc.headers = tuple(h for h in m.headers if type(h) is not lbmc.Frag)
            try:
                dc.on_data(m.sqn, m.payload)
            finally:
                dc.headers = ()
        elif m.msg_type == lbmc.MSG_CONTROL:
            for tsni in m.find_all(lbmc.Tsni):
                st.tsnis_received += 1
                for t, s in tsni.records:
                    d = self.dcs.get(t)
                    if d is not None:
                        d.on_tsni(s)
            sink = self.control_sink
            if sink is not None and any(type(h) is not lbmc.Tsni for h in m.headers):
                sink(m)

    def monitor_fields(self) -> dict[str, int]:
        """ums_mon.proto's LBTSMX receiver fields."""
        st = self._stats
        return {
            "msgs_rcved": st.messages_received,
            "bytes_rcved": st.bytes_received,
            "lbm_msgs_rcved": st.messages_received,
            "lbm_msgs_no_topic_rcved": st.messages_no_topic,
        }
