"""Late join (seed 10.2): the source serving it, the wire messages, the receiver's options.

Theory of operation
-------------------
**Advertising.**  A source with ``late_join`` 1 adds two TIR topic options: LATE_JOIN (0x04:
its request port, ip, transport index and the retained sqn range) and EXFUNC (0x0E, flag
``EXFUNC_LATE_JOIN``).  :func:`tir_options` builds them.

**Exchange** (all over UIM connections, wire-lbmc 9 rows 15-17)::

    receiver                                   source request port
      LJI_REQ(request_idx, transport_idx, topic_idx, req_ip:req_port, rx max, outstanding max)
                                      ---->
      <---- UME_LJ_INFO(low, high, qidx = request_idx)        to req_ip:req_port
      UME_RXREQ(request_idx, transport_idx, id_2 = topic_idx, seqnum, rx_ip:rx_port)  (many)
                                      ---->
      <---- RETRANS data (tidx = topic_idx, sqn) + OTID + TOPICNAME (+ the original's extras)

The receiver repeats the LJI request every ``late_join_info_request_interval`` (1 s) up to
``late_join_info_request_maximum`` (60) times until an LJ_INFO arrives; then it requests the range
oldest first, at most ``retransmit_request_outstanding_maximum`` (10) at a time, re-requesting every
``retransmit_request_interval`` (500 ms) and giving a message up after
``retransmit_request_message_timeout`` (10 s).  ``retransmit_request_maximum`` (0 = all) limits
how far back from the newest message it asks.  That state machine is
:class:`umcore.features.recovery.TopicRecovery`.

**The OTID** (originating transport id, 32 opaque bytes) on each retransmission tells the
receiver which transport session the (tidx, sqn) belong to, since retransmissions arrive on an
unrelated connection.  Ours is ``b"PYUM"``, a version byte, a transport-type byte, the source
context's request port (u16), its IP (4 bytes), the transport index (u32) and zeros [inferred:
real UM's OTID layout is not public].

:class:`LateJoinService` is the source side: the retention buffers of a context's sources, keyed
by (transport index, topic index), answering LJI_REQ and UME_RXREQ messages (also used by OTR).
"""

from __future__ import annotations

import struct
from collections.abc import Callable
from typing import Any

from umcore.config.options import OptionReader
from umcore.features.retention import RetentionBuffer
from umcore.wire import lbmc, lbmr_options

__all__ = [
    "MAX_RXREQ_PER_MESSAGE",
    "LateJoinConfig",
    "LateJoinService",
    "encode_lj_info",
    "encode_lji_req",
    "encode_rxreqs",
    "make_otid",
    "parse_otid",
    "tir_options",
]

# UME_RXREQ headers per CONTROL message (28 bytes each: 32 keep a request under 1 KB).
MAX_RXREQ_PER_MESSAGE = 32
_OTID = struct.Struct("!4sBBH4sI")
_OTID_MAGIC = b"PYUM"
OTID_TRANSPORT_TCP = 0

Address = tuple[str, int]


def make_otid(ip: str, port: int, transport_idx: int, transport_type: int = 0) -> bytes:
    head = _OTID.pack(
        _OTID_MAGIC, 1, transport_type, port, bytes.fromhex(f"{lbmc.ip4_from_str(ip):08x}"),
        transport_idx,
    )  # fmt: skip
    return head + bytes(32 - len(head))


def parse_otid(otid: bytes) -> tuple[str, int, int] | None:
    """(source request ip, port, transport index) of one of our OTIDs, else None."""
    if len(otid) < _OTID.size:
        return None
    magic, _ver, _ttype, port, ip, tidx = _OTID.unpack_from(otid)
    if magic != _OTID_MAGIC:
        return None
    return lbmc.ip4_to_str(int.from_bytes(ip, "big")), port, tidx


def tir_options(
    request_ip: str, request_port: int, transport_idx: int, retained: tuple[int, int] | None
) -> tuple[Any, ...]:
    """The TIR topic options of a late-join source."""
    low, high = retained if retained is not None else (0, 0)
    return (
        lbmr_options.LateJoinOption(request_port, request_ip, transport_idx, high, low),
        lbmr_options.ExFuncOption(request_port, request_ip, lbmr_options.EXFUNC_LATE_JOIN),
    )


def encode_lji_req(
    request_idx: int,
    transport_idx: int,
    topic_idx: int,
    reply_to: Address,
    *,
    rx_req_max: int = 0,
    rx_req_outstanding_max: int = 10,
) -> bytes:
    hdr = lbmc.LjiReq(
        lbmc.LJI_REQ_M | lbmc.LJI_REQ_O, request_idx, transport_idx, topic_idx,
        lbmc.ip4_from_str(reply_to[0]), reply_to[1], 0, 0, rx_req_max, rx_req_outstanding_max,
    )  # fmt: skip
    return lbmc.encode(lbmc.LBMCMessage(lbmc.MSG_CONTROL, headers=[hdr]))


def encode_lj_info(low: int, high: int, qidx: int) -> bytes:
    hdr = lbmc.UmeLjInfo(0, low & 0xFFFFFFFF, high & 0xFFFFFFFF, qidx)
    return lbmc.encode(lbmc.LBMCMessage(lbmc.MSG_CONTROL, headers=[hdr]))


def encode_rxreqs(
    request_idx: int, transport_idx: int, topic_idx: int, sqns: list[int], reply_to: Address
) -> list[bytes]:
    """UME_RXREQ messages for ``sqns`` (several headers per message)."""
    ip = lbmc.ip4_from_str(reply_to[0])
    out = []
    for i in range(0, len(sqns), MAX_RXREQ_PER_MESSAGE):
        hdrs: list[lbmc.Header] = [
            lbmc.UmeRxReq(0, 0, request_idx, transport_idx, topic_idx, s & 0xFFFFFFFF,
                          reply_to[1], 0, ip)
            for s in sqns[i : i + MAX_RXREQ_PER_MESSAGE]
        ]  # fmt: skip
        out.append(lbmc.encode(lbmc.LBMCMessage(lbmc.MSG_CONTROL, headers=hdrs)))
    return out


class LateJoinConfig:
    """Receiver late-join options, times in seconds."""

    __slots__ = (
        "caching_proximity",
        "info_request_interval",
        "info_request_maximum",
        "request_interval",
        "request_maximum",
        "request_message_timeout",
        "request_outstanding_maximum",
    )

    def __init__(
        self,
        *,
        info_request_interval: float = 1.0,
        info_request_maximum: int = 60,
        request_interval: float = 0.5,
        request_maximum: int = 0,
        request_message_timeout: float = 10.0,
        request_outstanding_maximum: int = 10,
        caching_proximity: int = 2147483647,
    ) -> None:
        self.info_request_interval = info_request_interval
        self.info_request_maximum = info_request_maximum
        self.request_interval = request_interval
        self.request_maximum = request_maximum
        self.request_message_timeout = request_message_timeout
        self.request_outstanding_maximum = max(1, request_outstanding_maximum)
        self.caching_proximity = caching_proximity

    @classmethod
    def from_options(cls, o: OptionReader) -> LateJoinConfig:
        """From a receiver's options (the registry's defaults and units)."""
        return cls(
            info_request_interval=o.seconds("late_join_info_request_interval"),
            info_request_maximum=int(o.get("late_join_info_request_maximum")),
            request_interval=o.seconds("retransmit_request_interval"),
            request_maximum=int(o.get("retransmit_request_maximum")),
            request_message_timeout=o.seconds("retransmit_request_message_timeout"),
            request_outstanding_maximum=int(o.get("retransmit_request_outstanding_maximum")),
            caching_proximity=int(o.get("retransmit_message_caching_proximity")),
        )


class _Served:
    __slots__ = ("buffer", "next_sqn", "topic")

    def __init__(self, topic: str, buffer: RetentionBuffer, next_sqn: Callable[[], int]) -> None:
        self.topic = topic
        self.buffer = buffer
        self.next_sqn = next_sqn


class ServiceStats:
    __slots__ = ("lji_requests", "retransmissions", "rx_missing", "rx_requests", "unknown_topic")

    def __init__(self) -> None:
        self.lji_requests = 0
        self.rx_requests = 0
        self.retransmissions = 0
        self.rx_missing = 0  # requested sqns no longer (or not yet) retained
        self.unknown_topic = 0


class LateJoinService:
    """The source side of late join and OTR for one context (see the module docstring)."""

    def __init__(self, request_ip: str, request_port: int) -> None:
        self.request_ip = request_ip
        self.request_port = request_port
        self._served: dict[tuple[int, int], _Served] = {}
        self.stats = ServiceStats()

    def add(
        self,
        transport_idx: int,
        topic_idx: int,
        topic: str,
        buffer: RetentionBuffer,
        next_sqn: Callable[[], int],
    ) -> None:
        """Serve ``buffer`` for (transport_idx, topic_idx); ``next_sqn()`` is the source's next
        sequence number (what an empty buffer reports)."""
        self._served[(transport_idx, topic_idx)] = _Served(topic, buffer, next_sqn)

    def remove(self, transport_idx: int, topic_idx: int) -> None:
        self._served.pop((transport_idx, topic_idx), None)

    def otid(self, transport_idx: int) -> bytes:
        return make_otid(self.request_ip, self.request_port, transport_idx)

    def handle(self, msg: lbmc.LBMCMessage) -> list[tuple[Address, bytes]]:
        """An LJI_REQ or UME_RXREQ message: what to send where."""
        out: list[tuple[Address, bytes]] = []
        st = self.stats
        for h in msg.headers:
            if type(h) is lbmc.LjiReq:
                st.lji_requests += 1
                s = self._served.get((h.transport_idx, h.topic_idx))
                if s is None:
                    st.unknown_topic += 1
                    continue
                rng = s.buffer.range()
                if rng is None:
                    nxt = s.next_sqn()
                    rng = (nxt, (nxt - 1) & 0xFFFFFFFF)  # empty: low = high + 1
                dest = (lbmc.ip4_to_str(h.req_ip), h.req_port)
                out.append((dest, encode_lj_info(rng[0], rng[1], h.request_idx)))
            elif type(h) is lbmc.UmeRxReq:
                st.rx_requests += 1
                s = self._served.get((h.transport_idx, h.id_2))
                if s is None:
                    st.unknown_topic += 1
                    continue
                got = s.buffer.get(h.seqnum)
                if got is None:
                    st.rx_missing += 1
                    continue
                payload, extra = got
                headers: list[lbmc.Header] = [
                    lbmc.Otid(0, self.otid(h.transport_idx)),
                    lbmc.TopicName(s.topic.encode() + b"\0"),
                    *extra,
                ]
                body = lbmc.encode(
                    lbmc.LBMCMessage(lbmc.MSG_RETRANS, h.id_2, h.seqnum, headers, payload)
                )
                st.retransmissions += 1
                out.append(((lbmc.ip4_to_str(h.rx_ip), h.rx_port), body))
        return out
