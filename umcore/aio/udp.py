"""A UDP socket drained in a loop into one reused buffer.

Theory of operation
-------------------
asyncio's stdlib datagram transport performs exactly one ``recvfrom`` per readiness callback and
allocates a fresh 256 KiB buffer for each; under load the kernel queue outgrows it and datagrams
are lost (measured in shared/spec/peers-and-style.md B.3: 35 % delivered at 100k datagrams/s).
UM's UDP paths (topic resolution, lbmrd, LBT-RM, LBT-RU) cannot afford that, so
:class:`DatagramEndpoint` registers the socket with ``loop.add_reader`` and, on each readiness
callback, calls non-blocking ``recvfrom_into`` in a loop into ONE preallocated buffer until the
socket is empty or :data:`MAX_DATAGRAMS_PER_WAKEUP` datagrams were read (so one busy socket cannot
starve the loop's other callbacks and timers).

Each datagram is handed to ``on_datagram(data, addr)`` as a ``memoryview`` over that buffer: it is
valid **only during the call** (the next datagram overwrites it).  A consumer that must keep the
bytes copies them (``bytes(data)``); a relay that sends immediately (lbmrd) needs no copy.

Sends are non-blocking ``sendto`` on the same socket.  A full send buffer (EAGAIN) never blocks
and is never queued: the datagram is dropped and counted in :attr:`send_dropped`; UDP's users
(topic resolution repeats itself, LBT-RM/RU recover losses) are built for that.

The client library's resolver sockets and every daemon's UDP socket use this class; keep its API.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import logging
import socket
from collections.abc import Callable, Iterable

__all__ = ["MAX_DATAGRAMS_PER_WAKEUP", "MAX_UDP_PAYLOAD", "DatagramEndpoint", "OnDatagram"]

log = logging.getLogger("umcore.aio.udp")

# Bound on datagrams read per readiness callback: large enough to amortise the callback's cost
# (B.3's drain loop reached ~100k datagrams/s), small enough that a flooded socket yields to the
# loop's timers (keepalives, expiry) every few hundred microseconds.
MAX_DATAGRAMS_PER_WAKEUP = 256

# The largest payload an IPv4 UDP datagram can carry (65535 - 20 IP - 8 UDP); the one receive
# buffer is this big so no datagram is ever truncated.
MAX_UDP_PAYLOAD = 65507

Address = tuple[str, int]
OnDatagram = Callable[[memoryview, Address], object]

# Errors a UDP recvfrom can report that concern one earlier datagram (an ICMP error queued on the
# socket), not the socket itself: count them and keep draining.
_TRANSIENT_RECV_ERRORS = frozenset(
    {errno.ECONNREFUSED, errno.ECONNRESET, errno.EHOSTUNREACH, errno.ENETUNREACH, errno.EMSGSIZE}
)


class DatagramEndpoint:
    """A bound UDP socket, drained into one buffer; see the module docstring.

    Create with ``await DatagramEndpoint.bind(host, port, on_datagram)``.
    """

    __slots__ = (
        "_buffer",
        "_closed",
        "_loop",
        "_on_datagram",
        "_sock",
        "_view",
        "bytes_received",
        "bytes_sent",
        "callback_errors",
        "datagrams_received",
        "datagrams_sent",
        "local_address",
        "receive_errors",
        "send_dropped",
        "send_errors",
    )

    def __init__(
        self, loop: asyncio.AbstractEventLoop, sock: socket.socket, on_datagram: OnDatagram
    ) -> None:
        self._loop = loop
        self._sock = sock
        self._on_datagram = on_datagram
        self._buffer = bytearray(MAX_UDP_PAYLOAD)
        self._view = memoryview(self._buffer)
        self._closed = False
        host, port = sock.getsockname()[:2]
        #: The (host, port) the socket is bound to; port is the real one when 0 was asked for.
        self.local_address: Address = (str(host), int(port))
        self.datagrams_received = 0
        self.bytes_received = 0
        self.datagrams_sent = 0
        self.bytes_sent = 0
        #: Sends refused because the socket's send buffer was full (EAGAIN); never retried.
        self.send_dropped = 0
        #: Sends the kernel refused for another reason (no route, message too long, ...).
        self.send_errors = 0
        #: recvfrom errors (ICMP errors reported on the socket, or worse).
        self.receive_errors = 0
        #: Exceptions raised by ``on_datagram`` (logged; the endpoint keeps draining).
        self.callback_errors = 0
        loop.add_reader(sock.fileno(), self._on_readable)

    @classmethod
    async def bind(
        cls,
        host: str,
        port: int,
        on_datagram: OnDatagram,
        *,
        rcvbuf: int | None = None,
        sndbuf: int | None = None,
        reuse_address: bool = False,
    ) -> DatagramEndpoint:
        """Bind a UDP/IPv4 socket on ``host:port`` (port 0 = ephemeral) and start draining it.

        ``rcvbuf``/``sndbuf`` set SO_RCVBUF/SO_SNDBUF (the kernel may grant less, capped by
        net.core.rmem_max/wmem_max; read the granted sizes with :meth:`socket_buffers`)."""
        loop = asyncio.get_running_loop()
        infos = await loop.getaddrinfo(
            host, port, family=socket.AF_INET, type=socket.SOCK_DGRAM, flags=socket.AI_PASSIVE
        )
        if not infos:  # pragma: no cover - getaddrinfo raises rather than returning nothing
            raise OSError(f"cannot resolve {host!r}")
        sockaddr = infos[0][4]
        sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        try:
            sock.setblocking(False)
            if reuse_address:
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            if rcvbuf is not None:
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, rcvbuf)
            if sndbuf is not None:
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, sndbuf)
            sock.bind(sockaddr)
            return cls(loop, sock, on_datagram)
        except BaseException:
            sock.close()
            raise

    def socket_buffers(self) -> tuple[int, int]:
        """The (SO_RCVBUF, SO_SNDBUF) sizes the kernel granted (Linux reports double the
        requested size: it counts its bookkeeping)."""
        return (
            self._sock.getsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF),
            self._sock.getsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF),
        )

    @property
    def closed(self) -> bool:
        return self._closed

    def sendto(self, data: bytes | bytearray | memoryview, addr: Address) -> bool:
        """Send one datagram without blocking.  Returns False when it was dropped (full send
        buffer, counted in :attr:`send_dropped`; other kernel refusals in :attr:`send_errors`)."""
        try:
            sent = self._sock.sendto(data, addr)
        except (BlockingIOError, InterruptedError):
            self.send_dropped += 1
            return False
        except OSError as exc:
            if self._closed:
                return False
            self.send_errors += 1
            log.debug("sendto %s:%d failed: %s", addr[0], addr[1], exc)
            return False
        self.datagrams_sent += 1
        self.bytes_sent += sent
        return True

    def send_batch(self, items: Iterable[tuple[bytes | bytearray | memoryview, Address]]) -> int:
        """Send each ``(data, addr)`` like :meth:`sendto`, with less overhead per datagram (one
        method call for a relay's whole fan-out).  Returns how many were sent."""
        send = self._sock.sendto
        sent = 0
        nbytes = 0
        for data, addr in items:
            try:
                nbytes += send(data, addr)
            except (BlockingIOError, InterruptedError):
                self.send_dropped += 1
                continue
            except OSError as exc:
                if self._closed:
                    break
                self.send_errors += 1
                log.debug("sendto %s:%d failed: %s", addr[0], addr[1], exc)
                continue
            sent += 1
        self.datagrams_sent += sent
        self.bytes_sent += nbytes
        return sent

    def _on_readable(self) -> None:
        recv = self._sock.recvfrom_into
        buf = self._buffer
        view = self._view
        on_datagram = self._on_datagram
        for _ in range(MAX_DATAGRAMS_PER_WAKEUP):
            try:
                size, addr = recv(buf)
            except (BlockingIOError, InterruptedError):
                return
            except OSError as exc:
                self.receive_errors += 1
                if exc.errno in _TRANSIENT_RECV_ERRORS:
                    continue
                log.warning("receive on %s:%d failed: %s", *self.local_address, exc)
                return
            self.datagrams_received += 1
            self.bytes_received += size
            try:
                on_datagram(view[:size], addr)
            except Exception:
                self.callback_errors += 1
                n = self.callback_errors
                if n & (n - 1) == 0:  # log the 1st, 2nd, 4th, 8th... failure: bounded output
                    log.exception(
                        "datagram handler failed (%d so far), datagram from %s:%d", n, *addr[:2]
                    )
            if self._closed:
                return

    def close(self) -> None:
        """Stop reading and close the socket.  Idempotent."""
        if self._closed:
            return
        self._closed = True
        with contextlib.suppress(Exception):
            self._loop.remove_reader(self._sock.fileno())
        self._sock.close()
