"""Write packets to classic pcap files, wrapped in Ethernet, IPv4 and UDP or TCP headers.

Theory of operation
-------------------
tshark is pyum's independent wire oracle: what we encode must decode there, with the field values
we meant.  The codecs produce UM payloads only; this module wraps them in the link, network and
transport headers a capture file needs, so a test (or an operator) can write them to a file and
open it with tshark or Wireshark.  It is plain byte assembly, no I/O beyond :func:`write_pcap`.

TCP segments carry running sequence numbers per direction (a :class:`TcpFlow` keeps them) so that
tshark's stream reassembly sees a gap-free stream; no handshake is written, which tshark accepts.
"""

from __future__ import annotations

import ipaddress
import struct
from collections.abc import Iterable
from pathlib import Path

__all__ = ["TcpFlow", "tcp_frame", "udp_frame", "write_pcap"]

_PCAP_HEADER = struct.Struct("<IHHiIII")
_PCAP_RECORD = struct.Struct("<IIII")
_ETH = struct.Struct("!6s6sH")
_IPV4 = struct.Struct("!BBHHHBBH4s4s")
_UDP = struct.Struct("!HHHH")
_TCP = struct.Struct("!HHIIBBHHH")

_LINKTYPE_ETHERNET = 1
_ETHERTYPE_IPV4 = 0x0800
_MAX_SNAPLEN = 262144
# Locally administered MAC addresses: these frames never existed on a real link.
_MAC_A = bytes.fromhex("020000000001")
_MAC_B = bytes.fromhex("020000000002")


def _ip(addr: str) -> bytes:
    return ipaddress.IPv4Address(addr).packed


def _checksum(data: bytes) -> int:
    if len(data) % 2:
        data += b"\0"
    total: int = sum(struct.unpack(f"!{len(data) // 2}H", data))
    while total >> 16:
        total = (total & 0xFFFF) + (total >> 16)
    return ~total & 0xFFFF


def _ipv4(src: str, dst: str, proto: int, payload: bytes, ident: int = 0) -> bytes:
    total = 20 + len(payload)
    if total > 0xFFFF:
        raise ValueError(f"IPv4 packet too long: {total} bytes")
    header = _IPV4.pack(0x45, 0, total, ident & 0xFFFF, 0x4000, 64, proto, 0, _ip(src), _ip(dst))
    header = header[:10] + struct.pack("!H", _checksum(header)) + header[12:]
    return _ETH.pack(_MAC_B, _MAC_A, _ETHERTYPE_IPV4) + header + payload


def udp_frame(src: str, sport: int, dst: str, dport: int, payload: bytes) -> bytes:
    """An Ethernet frame holding one UDP datagram (UDP checksum 0: "not computed", legal in IPv4)."""
    return _ipv4(src, dst, 17, _UDP.pack(sport, dport, 8 + len(payload), 0) + bytes(payload))


def tcp_frame(
    src: str, sport: int, dst: str, dport: int, payload: bytes, seq: int, ack: int = 1
) -> bytes:
    """An Ethernet frame holding one TCP segment with PSH|ACK set and the given sequence numbers."""
    header = _TCP.pack(sport, dport, seq & 0xFFFFFFFF, ack & 0xFFFFFFFF, 5 << 4, 0x18, 65535, 0, 0)
    pseudo = _ip(src) + _ip(dst) + struct.pack("!BBH", 0, 6, len(header) + len(payload))
    csum = _checksum(pseudo + header + bytes(payload))
    header = header[:16] + struct.pack("!H", csum) + header[18:]
    return _ipv4(src, dst, 6, header + bytes(payload))


class TcpFlow:
    """One TCP connection's two directions, keeping sequence numbers so segments reassemble."""

    def __init__(self, client: tuple[str, int], server: tuple[str, int]) -> None:
        self.client = client
        self.server = server
        self._seq = {client: 1, server: 1}

    def segment(self, from_client: bool, payload: bytes) -> bytes:
        """A frame carrying ``payload`` from the client (``True``) or from the server."""
        src, dst = (self.client, self.server) if from_client else (self.server, self.client)
        seq = self._seq[src]
        self._seq[src] = seq + len(payload)
        return tcp_frame(src[0], src[1], dst[0], dst[1], payload, seq, self._seq[dst])


def write_pcap(path: str | Path, frames: Iterable[bytes], start: float = 1_700_000_000.0) -> None:
    """Write Ethernet frames to a classic pcap file, one millisecond apart from ``start``."""
    out = [_PCAP_HEADER.pack(0xA1B2C3D4, 2, 4, 0, 0, _MAX_SNAPLEN, _LINKTYPE_ETHERNET)]
    for i, frame in enumerate(frames):
        t = start + i / 1000.0
        sec = int(t)
        usec = round((t - sec) * 1_000_000)
        out.append(_PCAP_RECORD.pack(sec, usec, len(frame), len(frame)))
        out.append(bytes(frame))
    Path(path).write_bytes(b"".join(out))
