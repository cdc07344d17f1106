"""A UDP socket drained in a loop: in C by uvloop's datagram transport, else in Python.

Theory of operation
-------------------
asyncio's stdlib datagram transport performs exactly one ``recvfrom`` per readiness callback and
allocates a fresh 256 KiB buffer for each; under load the kernel queue outgrows it and datagrams
are lost (measured in shared/spec/peers-and-style.md B.3: 35 % delivered at 100k datagrams/s).
UM's UDP paths (topic resolution, lbmrd, LBT-RM, LBT-RU) cannot afford that, so
:class:`DatagramEndpoint` drains the socket in a loop on each readiness callback, bounded per
wake-up (so one busy socket cannot starve the loop's other callbacks and timers).  Which loop
does the draining depends on the running event loop:

- **uvloop** (Linux, macOS: the daemons' and tools' loop): uvloop's own datagram transport,
  opened with ``loop.create_datagram_endpoint(sock=...)`` on a duplicate of the configured
  socket.  libuv reads up to :data:`UVLOOP_DATAGRAMS_PER_WAKEUP` datagrams per wake-up in C
  (its final would-block read costs a syscall, not a Python exception) and builds the sender
  address in C: per datagram, the Python side is one ``datagram_received`` call.  The
  transport owns (and closes) the duplicate; the endpoint keeps the original for sends, socket
  options and ``getsockname``.  The transport starts reading one or two loop iterations after
  the endpoint is made (``bind`` waits for it; datagrams meanwhile wait in the kernel).
- **any other loop** (asyncio's selector loop, Windows): ``loop.add_reader`` and non-blocking
  ``recvfrom_into`` in a loop into ONE preallocated buffer until the socket is empty or
  :data:`MAX_DATAGRAMS_PER_WAKEUP` datagrams were read.

Each datagram is handed to ``on_datagram(data, addr)``: on uvloop ``data`` is ``bytes`` (the
transport's own, never reused); on the Python path a ``memoryview`` over the one buffer, valid
**only during the call** (the next datagram overwrites it).  A consumer that must keep the bytes
copies them with ``bytes(data)``, which costs nothing when ``data`` already is ``bytes``; a relay
that sends immediately (lbmrd) needs no copy.

**Pause.**  :meth:`DatagramEndpoint.pause_reading` stops reading (the kernel queue then fills
and drops; UDP's users recover), :meth:`~DatagramEndpoint.resume_reading` starts again.  The
Python path removes/adds its reader.  uvloop's UDP transport has no ``pause_reading``: pausing
closes the transport (its duplicate socket; the endpoint's socket stays bound, so datagrams
keep queueing in the kernel) and resuming opens a new one on a fresh duplicate.

Sends are non-blocking ``sendto`` on the endpoint's socket on either loop.  A full send buffer
(EAGAIN) never blocks and is never queued: the datagram is dropped and counted in
:attr:`send_dropped`; UDP's users (topic resolution repeats itself, LBT-RM/RU recover losses)
are built for that.  Errors the kernel reports on receive (ICMP errors queued on the socket)
are counted in :attr:`receive_errors` on both paths (uvloop hands them to ``error_received``).

The client library's resolver sockets and every daemon's UDP socket use this class; keep its API.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import logging
import socket
from collections.abc import Callable, Iterable

_UvLoop: type[asyncio.AbstractEventLoop] | None
try:  # uvloop is a dependency except on Windows
    from uvloop import Loop as _UvLoop
except ImportError:  # pragma: no cover - Windows
    _UvLoop = None

__all__ = [
    "MAX_DATAGRAMS_PER_WAKEUP",
    "MAX_UDP_PAYLOAD",
    "UVLOOP_DATAGRAMS_PER_WAKEUP",
    "DatagramEndpoint",
    "OnDatagram",
]

log = logging.getLogger("umcore.aio.udp")

# Bound on datagrams the Python drain loop reads per readiness callback: large enough to amortise
# the callback's cost (B.3's drain loop reached ~100k datagrams/s), small enough that a flooded
# socket yields to the loop's timers (keepalives, expiry) every few hundred microseconds.
MAX_DATAGRAMS_PER_WAKEUP = 256

# libuv's own bound on the datagrams uv__udp_recvmsg reads per wake-up (a constant in libuv's
# src/unix/udp.c, not configurable): the uvloop path's batch.  Stated here for the tests.
UVLOOP_DATAGRAMS_PER_WAKEUP = 32

# The largest payload an IPv4 UDP datagram can carry (65535 - 20 IP - 8 UDP); the one receive
# buffer is this big so no datagram is ever truncated.  (libuv's receive buffer is 64 KiB,
# uvloop's 256 KiB: no truncation there either.)
MAX_UDP_PAYLOAD = 65507

Address = tuple[str, int]
#: ``data`` is ``bytes`` on uvloop, a ``memoryview`` valid during the call otherwise.
OnDatagram = Callable[[bytes | memoryview, Address], object]

# Errors a UDP recvfrom can report that concern one earlier datagram (an ICMP error queued on the
# socket), not the socket itself: count them and keep draining.
_TRANSIENT_RECV_ERRORS = frozenset(
    {errno.ECONNREFUSED, errno.ECONNRESET, errno.EHOSTUNREACH, errno.ENETUNREACH, errno.EMSGSIZE}
)


class DatagramEndpoint(asyncio.DatagramProtocol):
    """A bound UDP socket, drained in a loop; see the module docstring.

    Create with ``await DatagramEndpoint.bind(host, port, on_datagram)``, or wrap a configured
    non-blocking socket with ``DatagramEndpoint(loop, sock, on_datagram)`` (reading starts
    within a loop iteration or two).  On uvloop it is the transport's protocol: the
    ``asyncio.DatagramProtocol`` methods below are called by the transport, not by users.
    """

    __slots__ = (
        "_buffer",
        "_closed",
        "_loop",
        "_on_datagram",
        "_opening",
        "_paused",
        "_transport",
        "_uv",
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
        "sock",
    )

    def __init__(
        self, loop: asyncio.AbstractEventLoop, sock: socket.socket, on_datagram: OnDatagram
    ) -> None:
        self._loop = loop
        #: The bound, non-blocking socket (public: a caller sets its socket options, and an
        #: adapter sending on a hot path keeps ``sock.sendto``).
        self.sock = sock
        self._on_datagram = on_datagram
        self._closed = False
        self._paused = False
        #: uvloop: the transport reading the socket (None while paused, closed or opening).
        self._transport: asyncio.DatagramTransport | None = None
        #: uvloop: the task opening a transport (None when none is being opened).
        self._opening: asyncio.Task[None] | None = None
        self._uv = _UvLoop is not None and isinstance(loop, _UvLoop)
        # The Python path's one buffer (a few bytes on uvloop, where it is never used).
        self._buffer = bytearray(1 if self._uv else MAX_UDP_PAYLOAD)
        self._view = memoryview(self._buffer)
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
        #: Receive errors (ICMP errors reported on the socket, or worse).
        self.receive_errors = 0
        #: Exceptions raised by ``on_datagram`` (logged; the endpoint keeps draining).
        self.callback_errors = 0
        self._start()

    def set_handler(self, on_datagram: Callable[[bytes | memoryview, Address], object]) -> None:
        """Hand later datagrams to ``on_datagram`` (an adapter taking over an endpoint that was
        bound before it existed)."""
        self._on_datagram = on_datagram

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
        """Bind a UDP/IPv4 socket on ``host:port`` (port 0 = ephemeral) and start draining it
        (reading has started when this returns).

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
            ep = cls(loop, sock, on_datagram)
        except BaseException:
            sock.close()
            raise
        try:
            await ep.reading()
        except BaseException:
            ep.close()
            raise
        return ep

    async def reading(self) -> None:
        """Wait until the endpoint reads its socket (at once on the Python path; on uvloop
        once the transport being opened is up).  Returns at once when paused or closed."""
        while (opening := self._opening) is not None:
            await asyncio.shield(opening)

    def socket_buffers(self) -> tuple[int, int]:
        """The (SO_RCVBUF, SO_SNDBUF) sizes the kernel granted (Linux reports double the
        requested size: it counts its bookkeeping)."""
        return (
            self.sock.getsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF),
            self.sock.getsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF),
        )

    @property
    def closed(self) -> bool:
        return self._closed

    @property
    def paused(self) -> bool:
        """True between :meth:`pause_reading` and :meth:`resume_reading`."""
        return self._paused

    # -- sending (the endpoint's own socket, on either loop)
    def sendto(self, data: bytes | bytearray | memoryview, addr: Address) -> bool:
        """Send one datagram without blocking.  Returns False when it was dropped (full send
        buffer, counted in :attr:`send_dropped`; other kernel refusals in :attr:`send_errors`)."""
        try:
            sent = self.sock.sendto(data, addr)
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
        send = self.sock.sendto
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

    # -- reading: start/stop
    def _start(self) -> None:
        if not self._uv:
            self._loop.add_reader(self.sock.fileno(), self._on_readable)
        elif self._opening is None and self._transport is None:
            self._opening = self._loop.create_task(self._open_transport())

    def _stop(self) -> None:
        if not self._uv:
            with contextlib.suppress(Exception):
                self._loop.remove_reader(self.sock.fileno())
            return
        transport, self._transport = self._transport, None
        if transport is not None:
            transport.close()  # stops reading now; closes its duplicate on the next iteration

    async def _open_transport(self) -> None:
        """uvloop: open a datagram transport on a duplicate of the socket, this endpoint as its
        protocol (:meth:`connection_made` keeps it, or closes it if no longer wanted)."""
        try:
            dup = self.sock.dup()
            try:
                await self._loop.create_datagram_endpoint(lambda: self, sock=dup)
            except OSError:
                # uvloop refused the socket before taking it (it is ours to close); once it
                # has taken it, only cancellation can end the wait, and the transport then
                # reaches connection_made, which closes it.
                dup.close()
                raise
        except OSError as exc:
            self.receive_errors += 1
            log.warning("cannot read %s:%d: %s", *self.local_address, exc)
        finally:
            self._opening = None
        if not (self._closed or self._paused) and self._transport is None:
            # Paused and resumed while opening: the transport opened was closed; open another.
            self._start()

    def pause_reading(self) -> None:
        """Stop reading the socket until :meth:`resume_reading` (datagrams queue in the kernel,
        which drops what its receive buffer cannot hold)."""
        if self._paused or self._closed:
            return
        self._paused = True
        self._stop()

    def resume_reading(self) -> None:
        """Start reading again after :meth:`pause_reading`."""
        if not self._paused or self._closed:
            return
        self._paused = False
        self._start()

    def close(self) -> None:
        """Stop reading and close the socket.  Idempotent."""
        if self._closed:
            return
        self._closed = True
        self._stop()
        self.sock.close()

    # -- the Python path
    def _on_readable(self) -> None:
        recv = self.sock.recvfrom_into
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
                self._callback_failed(addr)
            if self._closed or self._paused:
                return

    def _callback_failed(self, addr: Address) -> None:
        self.callback_errors += 1
        n = self.callback_errors
        if n & (n - 1) == 0:  # log the 1st, 2nd, 4th, 8th... failure: bounded output
            log.exception("datagram handler failed (%d so far), datagram from %s:%d", n, *addr[:2])

    # -- the uvloop path: asyncio.DatagramProtocol, called by uvloop's transport
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        if self._closed or self._paused or self._transport is not None:
            transport.close()  # no longer wanted (closed, paused or reopened meanwhile)
            return
        self._transport = transport  # type: ignore[assignment]

    def datagram_received(self, data: bytes, addr: Address) -> None:
        self.datagrams_received += 1
        self.bytes_received += len(data)
        # The handler (a slot) from a local: called as self._on_datagram(...) it would take
        # CPython 3.11's generic attribute lookup, once per datagram.
        on_datagram = self._on_datagram
        try:
            on_datagram(data, addr)
        except Exception:
            self._callback_failed(addr)

    def error_received(self, exc: Exception) -> None:
        self.receive_errors += 1
        if getattr(exc, "errno", None) not in _TRANSIENT_RECV_ERRORS:
            log.warning("receive on %s:%d failed: %s", *self.local_address, exc)

    def connection_lost(self, exc: Exception | None) -> None:
        # Transports this endpoint closed itself are no longer self._transport; the current
        # one lost (a fatal error in uvloop) is closing: forget it, reading has stopped.
        transport = self._transport
        if transport is not None and transport.is_closing():
            self._transport = None
            self.receive_errors += 1
            log.warning("reading %s:%d stopped: %s", *self.local_address, exc)
