"""Kernel receive timestamps for LBT-RM (``SO_TIMESTAMPNS``): UM's ``hr_timestamp`` in software.

Theory of operation
-------------------
UM fills ``lbm_msg_t.hr_timestamp`` (seconds, nanoseconds) with the *NIC hardware* receive time
of LBT-RM datagrams when ``transport_lbtrm_receiver_timestamp`` is 1 and the NIC can (Solarflare
with Onload; seed 003 10.6).  We have no such NICs; what Linux offers every socket is the
kernel's software receive timestamp, ``SO_TIMESTAMPNS``: the time the datagram reached the
socket layer, handed back as an ``SCM_TIMESTAMPNS`` control message by ``recvmsg``.

:class:`TimestampedEndpoint` is the LBT-RM group socket's reader when the option is on: the
same shape as :class:`~umcore.aio.udp.DatagramEndpoint` as far as the LBT adapters use it
(``set_handler``, ``sendto``, ``close``, ``sock``, counters), reading with ``recvmsg`` in a
bounded drain loop (``loop.add_reader`` on every event loop: uvloop's datagram transport does
not hand control messages over).  Before each datagram's handler runs it stores the timestamp
in the context's :class:`RxStamp`; messages delivered during that call (the delivery is
synchronous) read it into ``msg.hr_timestamp``, and it is set back to (0, 0) after, so
messages delivered later (out of a retransmission's order map by a timer) or by other
transports carry (0, 0), as UM's carry no timestamp for recovered data.

Where ``SO_TIMESTAMPNS`` is missing (not Linux) :func:`enable_timestamps` returns False and the
plain endpoint is used: ``hr_timestamp`` stays (0, 0), UM's "none".
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import logging
import socket
import struct
import sys
from collections.abc import Callable

__all__ = ["AVAILABLE", "NO_STAMP", "RxStamp", "TimestampedEndpoint", "enable_timestamps"]

log = logging.getLogger("umcore.aio.rxstamp")

NO_STAMP = (0, 0)
# The drain loop's bound per readiness callback (as umcore.aio.udp's Python path).
MAX_DATAGRAMS_PER_WAKEUP = 256
# The largest IPv4 UDP payload: no datagram is truncated.
MAX_UDP_PAYLOAD = 65507
# struct timespec: two native longs (seconds, nanoseconds).
_TIMESPEC = struct.Struct("@ll")
# Python's socket module names SO_TIMESTAMPNS only from 3.14 on; Linux's value is 35
# (SO_TIMESTAMPNS_OLD of asm-generic/socket.h, x86, arm, arm64, riscv; the 64-bit-time variant
# SO_TIMESTAMPNS_NEW is 64 and returns the same two longs on 64-bit hosts).
_SO_TIMESTAMPNS = getattr(
    socket, "SO_TIMESTAMPNS", 35 if sys.platform.startswith("linux") else None
)
_SCM_TIMESTAMPNS = getattr(socket, "SCM_TIMESTAMPNS", _SO_TIMESTAMPNS)
_ANC_SIZE = socket.CMSG_SPACE(_TIMESPEC.size) if hasattr(socket, "CMSG_SPACE") else 0
#: True where this platform has SO_TIMESTAMPNS (Linux).
AVAILABLE = _SO_TIMESTAMPNS is not None and _ANC_SIZE > 0

Address = tuple[str, int]
OnDatagram = Callable[[bytes, Address], object]


class RxStamp:
    """The receive time of the datagram being handled, (0, 0) outside a handler."""

    __slots__ = ("value",)

    def __init__(self) -> None:
        self.value: tuple[int, int] = NO_STAMP


def enable_timestamps(sock: socket.socket) -> bool:
    """Ask the kernel for ``SO_TIMESTAMPNS`` on ``sock``; False where it is not available."""
    if _SO_TIMESTAMPNS is None or not AVAILABLE:
        return False
    try:
        sock.setsockopt(socket.SOL_SOCKET, _SO_TIMESTAMPNS, 1)
    except OSError as exc:
        log.info("SO_TIMESTAMPNS refused (%s): hr_timestamp stays 0", exc)
        return False
    return True


class TimestampedEndpoint:
    """A bound non-blocking UDP socket read with ``recvmsg`` (module docstring)."""

    def __init__(
        self,
        loop: asyncio.AbstractEventLoop,
        sock: socket.socket,
        on_datagram: OnDatagram,
        stamp: RxStamp,
    ) -> None:
        self._loop = loop
        self.sock = sock
        self._on_datagram = on_datagram
        self._stamp = stamp
        self._closed = False
        self._reading = False
        host, port = sock.getsockname()[:2]
        self.local_address: Address = (str(host), int(port))
        self.datagrams_received = 0
        self.bytes_received = 0
        self.datagrams_sent = 0
        self.bytes_sent = 0
        self.send_dropped = 0
        self.send_errors = 0
        self.receive_errors = 0
        self.callback_errors = 0
        #: Datagrams that came without a timestamp (should stay 0 on Linux).
        self.unstamped = 0
        self.resume_reading()

    def set_handler(self, on_datagram: OnDatagram) -> None:
        self._on_datagram = on_datagram

    @property
    def closed(self) -> bool:
        return self._closed

    def sendto(self, data: bytes | bytearray | memoryview, addr: Address) -> bool:
        """Send without blocking; False when dropped (counted as DatagramEndpoint does)."""
        try:
            sent = self.sock.sendto(data, addr)
        except (BlockingIOError, InterruptedError):
            self.send_dropped += 1
            return False
        except OSError:
            self.send_errors += 1
            return False
        self.datagrams_sent += 1
        self.bytes_sent += sent
        return True

    def pause_reading(self) -> None:
        if self._reading and not self._closed:
            self._reading = False
            with contextlib.suppress(Exception):
                self._loop.remove_reader(self.sock.fileno())

    def resume_reading(self) -> None:
        if not self._reading and not self._closed:
            self._reading = True
            self._loop.add_reader(self.sock.fileno(), self._on_readable)

    def close(self) -> None:
        if self._closed:
            return
        self.pause_reading()
        self._closed = True
        self.sock.close()

    def _on_readable(self) -> None:
        recvmsg = self.sock.recvmsg
        stamp = self._stamp
        for _ in range(MAX_DATAGRAMS_PER_WAKEUP):
            try:
                data, ancdata, _flags, addr = recvmsg(MAX_UDP_PAYLOAD, _ANC_SIZE)
            except (BlockingIOError, InterruptedError):
                return
            except OSError as exc:
                self.receive_errors += 1
                if exc.errno in (errno.ECONNREFUSED, errno.EHOSTUNREACH, errno.ENETUNREACH):
                    continue
                log.warning("receive on %s:%d failed: %s", *self.local_address, exc)
                return
            self.datagrams_received += 1
            self.bytes_received += len(data)
            value = NO_STAMP
            for level, kind, cdata in ancdata:
                if level == socket.SOL_SOCKET and kind == _SCM_TIMESTAMPNS:
                    value = _TIMESPEC.unpack_from(cdata)
            if value is NO_STAMP:
                self.unstamped += 1
            stamp.value = value
            try:
                self._on_datagram(data, addr)
            except Exception:
                self.callback_errors += 1
                log.exception("datagram handler failed, datagram from %s:%d", *addr[:2])
            finally:
                stamp.value = NO_STAMP
            if self._closed or not self._reading:
                return
