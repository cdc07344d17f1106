"""Sockets for multicast topic resolution, and the interface address a context advertises.

Theory of operation
-------------------
Multicast TR sends to and listens on one group and port (224.9.10.11:12965 by default).  Several
contexts on one host share the port, so the socket sets SO_REUSEADDR (and SO_REUSEPORT where it
exists) and binds the *group* address, which on Linux keeps datagrams of other groups on the same
port out (the IP_MULTICAST_ALL trap of notes 2.11/Traps).  IP_MULTICAST_IF picks the interface
(tests use 127.0.0.1; loopback multicast works with IP_MULTICAST_LOOP on), IP_MULTICAST_TTL is
``resolver_multicast_ttl``.  The socket is then handed to
:class:`~umcore.aio.udp.DatagramEndpoint`, which drains it.

:func:`route_address` answers "which of my addresses would reach X": a TIR must carry a concrete
IP (receivers connect to it, and tshark binds transport and topic by it), never 0.0.0.0.
"""

from __future__ import annotations

import contextlib
import socket
import struct

__all__ = ["open_group_socket", "open_multicast_socket", "route_address", "set_multicast_sender"]


def open_group_socket(
    group: str, port: int, interface: str, rcvbuf: int | None = None
) -> socket.socket:
    """A non-blocking UDP socket bound to ``group:port`` and joined to ``group`` on ``interface``.

    Address reuse is on, so several sockets of this host (several contexts) receive the group."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM, socket.IPPROTO_UDP)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        if hasattr(socket, "SO_REUSEPORT"):
            with contextlib.suppress(OSError):
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
        if rcvbuf:
            with contextlib.suppress(OSError):
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, rcvbuf)
        try:
            sock.bind((group, port))
        except OSError:
            sock.bind(("0.0.0.0", port))
        mreq = socket.inet_aton(group) + socket.inet_aton(interface)
        sock.setsockopt(socket.IPPROTO_IP, socket.IP_ADD_MEMBERSHIP, mreq)
        sock.setblocking(False)
        return sock
    except BaseException:
        sock.close()
        raise


def set_multicast_sender(sock: socket.socket, interface: str, ttl: int) -> None:
    """Send multicast from ``sock`` on ``interface`` with loop on (same-host receivers)."""
    sock.setsockopt(socket.IPPROTO_IP, socket.IP_MULTICAST_IF, socket.inet_aton(interface))
    sock.setsockopt(socket.IPPROTO_IP, socket.IP_MULTICAST_TTL, struct.pack("b", ttl))
    sock.setsockopt(socket.IPPROTO_IP, socket.IP_MULTICAST_LOOP, 1)


def open_multicast_socket(
    group: str, port: int, interface: str, *, ttl: int = 16, rcvbuf: int | None = None
) -> socket.socket:
    """A non-blocking UDP socket joined to ``group`` on ``interface``, sending there too."""
    sock = open_group_socket(group, port, interface, rcvbuf)
    try:
        set_multicast_sender(sock, interface, ttl)
    except BaseException:
        sock.close()
        raise
    return sock


def route_address(dest: str, port: int = 9) -> str:
    """The local IPv4 address the kernel would use to reach ``dest`` (no packet is sent)."""
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    try:
        s.connect((dest, port))
        addr: str = s.getsockname()[0]
        return addr
    except OSError:
        return "127.0.0.1"
    finally:
        s.close()


class MulticastSender:
    """A non-blocking UDP socket bound to ``interface`` that multicasts out of it, looping its
    own datagrams back to this host (MIM: other contexts here may listen)."""

    __slots__ = ("_sock", "dropped")

    def __init__(self, interface: str) -> None:
        s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM, socket.IPPROTO_UDP)
        s.setblocking(False)
        s.setsockopt(socket.IPPROTO_IP, socket.IP_MULTICAST_IF, socket.inet_aton(interface))
        s.setsockopt(socket.IPPROTO_IP, socket.IP_MULTICAST_LOOP, 1)
        s.bind((interface, 0))
        self._sock = s
        #: Datagrams the kernel refused because the send buffer was full (never retried).
        self.dropped = 0

    def send(self, data: bytes, dest: tuple[str, int]) -> None:
        try:
            self._sock.sendto(data, dest)
        except BlockingIOError:
            self.dropped += 1

    def close(self) -> None:
        self._sock.close()
