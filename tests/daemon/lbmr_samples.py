"""LBMR datagrams built byte by byte from the layouts tshark verified (spec/wire-lbmr-transports-
srs.md 3.1-3.4 and 9), so the lbmrd tests do not depend on the codec they exercise."""

from __future__ import annotations

import ipaddress
import struct

KEEPALIVE_RESOLVER = b"\x00\x00\x00\x00"  # type 0, 0 TQRs, 0 TIRs: "Unicast Resolver Keepalive"
KEEPALIVE_RECEIVER = b"\x02\x00\x00\x00"  # type 2: "Receiver Alive"
KEEPALIVE_SOURCE = b"\x03\x00\x00\x00"  # type 3: "Source Alive"

TCP = 0x00
LBTRU = 0x01


def _ip(addr: str) -> bytes:
    return ipaddress.IPv4Address(addr).packed


def tir_body(
    topic: str, transport: int, ip: str, port: int, *, session_id: int | None = None, idx: int = 7
) -> bytes:
    """One TIR for a TCP or LBT-RU source: name, transport byte, tlen, ttl 0, topic index, then
    ip, [session id], port."""
    info = _ip(ip) + (b"" if session_id is None else struct.pack("!I", session_id))
    info += struct.pack("!H", port)
    return topic.encode() + b"\0" + struct.pack("!BBHI", transport, len(info), 0, idx) + info


def lbmr(tirs: list[bytes], tqrs: list[str] = ()) -> bytes:  # type: ignore[assignment]
    """A type 0 datagram: TQRs first, then TIRs."""
    body = b"".join(t.encode() + b"\0" for t in tqrs) + b"".join(tirs)
    return struct.pack("!BBH", 0x00, len(tqrs), len(tirs)) + body


def tir_tcp(topic: str, ip: str, port: int, *, session_id: int | None = None) -> bytes:
    return lbmr([tir_body(topic, TCP, ip, port, session_id=session_id)])


def tqr(topic: str) -> bytes:
    return lbmr([], [topic])


def lbtrm_tir(topic: str, src_ip: str) -> bytes:
    """A TIR for an LBT-RM source (multicast: nothing NAT can rewrite)."""
    info = _ip(src_ip) + _ip("224.10.10.10") + struct.pack("!IHH", 0x0A0B0C0D, 14400, 14390)
    return lbmr([topic.encode() + b"\0" + struct.pack("!BBHI", 0x10, 16, 0, 9) + info])
