"""asyncio adapter for a context's request port (UIM port) and its outgoing UIM connections.

Theory of operation
-------------------
:class:`RequestPort` listens on a port of ``request_tcp_port_low..high`` (14391-14395; or
``request_tcp_port``) and reads every accepted connection as an LBT-TCP-framed stream of LBMC
messages (:class:`~umcore.wire.lbttcp.LBTTCPDecoder`).  Each decoded message goes to
``on_message(msg, peer_ip)``; a peer that sends garbage loses its connection, nothing else.
With an ``on_frame(frame, peer_ip)`` fast path, each whole frame is offered to it first,
undecoded (in arrival order with the others): True means it took the frame, which is then not
decoded (the engine's persistence takes a Store's stability ACKs so); False, decode and
``on_message`` as without it.

Outgoing traffic (UIMs, requests, responses, late-join and OTR requests and replies) goes through
:meth:`RequestPort.send` to a destination ``(ip, port)``.  The sans-IO
:class:`~umcore.features.immediate.UimConnections` decides when to connect, holds messages until
the connection is up and says when an idle connection is due for deletion
(``response_tcp_deletion_timeout``); this adapter owns the sockets and one
:class:`~umcore.aio.timer.CoreTimer`.  A connection whose socket still has unsent bytes at its
deletion time is kept and its timer restarted (seed L4975).  A failed connect drops what was held
for it (UIMs are not reliable, seed 10.7.3) and counts it.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import socket
from collections.abc import Callable
from typing import cast

from umcore.aio.tcp import listen_in_range
from umcore.aio.timer import CoreTimer
from umcore.aio.tls import Security
from umcore.errors import RemoteProtocolError, UMError
from umcore.features.immediate import UimConnections
from umcore.wire import lbmc
from umcore.wire.lbttcp import LBTTCPDecoder

__all__ = ["CONNECT_TIMEOUT_S", "OnFrame", "RequestPort"]

log = logging.getLogger("umcore.aio.request_port")

# Bound on one outgoing UIM connect attempt.
CONNECT_TIMEOUT_S = 5.0
# Accepted connections at once on one request port (each costs a socket and a decoder).
MAX_INCOMING = 1024

Address = tuple[str, int]
OnMessage = Callable[[lbmc.LBMCMessage, str], None]
OnFrame = Callable[[bytes, str], bool]


class _Incoming(asyncio.Protocol):
    def __init__(self, port: RequestPort) -> None:
        self.port = port
        self.decoder = LBTTCPDecoder()
        self.transport: asyncio.Transport | None = None
        self.peer_ip = "?"

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = cast(asyncio.Transport, transport)
        if len(self.port._incoming) >= MAX_INCOMING:
            self.port.refused_connections += 1
            self.transport.abort()
            return
        peer = transport.get_extra_info("peername")
        self.peer_ip = peer[0] if peer else "?"
        self.port._incoming.add(self)

    def data_received(self, data: bytes) -> None:
        port = self.port
        fast = port.on_frame
        try:
            if fast is None:
                msgs = self.decoder.feed(data)
            else:
                frames = self.decoder.feed_frames(data)
        except lbmc.LBMCError as exc:
            self._bad(exc)
            return
        if fast is not None:
            self._frames(fast, frames)
            return
        for m in msgs:
            try:
                port.on_message(m, self.peer_ip)
            except RemoteProtocolError as exc:
                # the handler refused what the peer sent: it costs the peer this connection
                self._bad(exc)
                return
            except Exception:
                port.handler_errors += 1
                log.exception("request port: handling a message from %s failed", self.peer_ip)

    def _frames(self, fast: OnFrame, frames: list[bytes]) -> None:
        """Frame by frame, in order: offered to the fast path, else decoded and given to
        ``on_message``.  A bad frame, or a handler refusing what the peer sent, costs the
        connection (what came before it in the read was handled)."""
        peer = self.peer_ip
        on_message = self.port.on_message
        decode = lbmc.decode
        for frame in frames:
            try:
                if not fast(frame, peer):
                    on_message(decode(frame), peer)
            except RemoteProtocolError as exc:  # LBMCError among them
                self._bad(exc)
                return
            except Exception:
                self.port.handler_errors += 1
                log.exception("request port: handling a message from %s failed", peer)

    def _bad(self, exc: RemoteProtocolError) -> None:
        self.port.bad_connections += 1
        log.info("request port: dropping %s: %s", self.peer_ip, exc)
        if self.transport is not None:
            self.transport.abort()

    def connection_lost(self, exc: Exception | None) -> None:
        self.port._incoming.discard(self)


class _Outgoing(asyncio.Protocol):
    def __init__(self, port: RequestPort, dest: Address) -> None:
        self.port = port
        self.dest = dest
        self.transport: asyncio.Transport | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = cast(asyncio.Transport, transport)

    def data_received(self, data: bytes) -> None:
        pass  # nothing comes back on an outgoing UIM connection

    def connection_lost(self, exc: Exception | None) -> None:
        self.port._out_lost(self)


class RequestPort:
    """The request port of one context (see the module docstring)."""

    def __init__(
        self,
        on_message: OnMessage,
        *,
        ctxinst: bytes,
        on_frame: OnFrame | None = None,
        deletion_timeout: float = 20.0,
        max_buffer: int = 65536,
        nodelay: bool = False,
        response_interface: str | None = None,
        security: Security | None = None,
    ) -> None:
        self._loop = asyncio.get_running_loop()
        #: The context's TLS/LZ4 (:mod:`umcore.aio.tls`), on accepted and outgoing connections.
        self.security = security or Security()
        self.on_message = on_message
        #: The fast path offered each whole frame before it is decoded (module docstring).
        self.on_frame = on_frame
        self.table = UimConnections(deletion_timeout, max_buffer, ctxinst=ctxinst)
        self.nodelay = nodelay
        self.response_interface = response_interface
        self.server: asyncio.Server | None = None
        self.port = 0
        self._incoming: set[_Incoming] = set()
        self._out: dict[Address, _Outgoing] = {}
        self._connecting: set[asyncio.Task[None]] = set()
        self._timer = CoreTimer(self._loop, self._on_timer)
        self.refused_connections = 0
        self.bad_connections = 0
        self.handler_errors = 0
        self.connect_failures = 0
        self.bytes_lost = 0
        self.closed = False

    async def start(self, host: str, low: int, high: int, backlog: int = 5) -> int:
        self.server, self.port = await listen_in_range(
            self.security.server_factory(lambda: _Incoming(self)), host, low, high, backlog=backlog
        )
        return self.port

    # ---------------------------------------------------------------- outgoing
    def next_stream(self, dest: Address) -> tuple[int, int]:
        return self.table.next_stream(dest)

    def send(self, dest: Address, data: bytes) -> None:
        """Write ``data`` to ``dest``'s request port (connecting first if needed).

        Raises :class:`~umcore.errors.WouldBlock` when the held data would exceed the limit."""
        if self.closed:
            raise UMError("request port is closed")
        now = self._loop.time()
        connect, out = self.table.send(dest, data, now)
        if out:
            conn = self._out.get(dest)
            if conn is not None and conn.transport is not None:
                conn.transport.write(out)
        elif connect:
            self._connect(dest)
        self._timer.arm(self.table.next_timer())

    def hold(self, dest: Address) -> None:
        """Open (if needed) and keep the connection to ``dest`` for a response object."""
        if self.table.hold(dest, self._loop.time()):
            self._connect(dest)
        self._timer.arm(self.table.next_timer())

    def release(self, dest: Address) -> None:
        self.table.release(dest, self._loop.time())
        self._timer.arm(self.table.next_timer())

    def _connect(self, dest: Address) -> None:
        proto = _Outgoing(self, dest)
        self._out[dest] = proto
        task = self._loop.create_task(self._do_connect(proto))
        self._connecting.add(task)
        task.add_done_callback(self._connecting.discard)

    async def _do_connect(self, proto: _Outgoing) -> None:
        dest = proto.dest
        local = (self.response_interface, 0) if self.response_interface else None
        try:
            await self.security.connect(
                lambda: proto, dest[0], dest[1], timeout=CONNECT_TIMEOUT_S, local_addr=local
            )
        except (TimeoutError, OSError) as exc:
            self.connect_failures += 1
            log.info("UIM connect to %s:%d failed: %s", dest[0], dest[1], exc)
            if self._out.get(dest) is proto:
                del self._out[dest]
            self.bytes_lost += self.table.closed(dest)
            return
        tr = proto.transport
        assert tr is not None
        sock = tr.get_extra_info("socket")
        if sock is not None and self.nodelay:
            with contextlib.suppress(OSError):
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        held = self.table.connected(dest, self._loop.time())
        if held:
            tr.write(held)

    def _out_lost(self, proto: _Outgoing) -> None:
        if self._out.get(proto.dest) is proto:
            del self._out[proto.dest]
            self.bytes_lost += self.table.closed(proto.dest)

    def _on_timer(self) -> None:
        now = self._loop.time()
        for dest in self.table.handle_timer(now):
            conn = self._out.get(dest)
            tr = conn.transport if conn is not None else None
            if tr is not None and tr.get_write_buffer_size() > 0:
                self.table.touch(dest, now)  # still draining: not idle yet
                continue
            if conn is not None:
                del self._out[dest]
                if tr is not None:
                    tr.close()
            self.table.closed(dest)
        self._timer.arm(self.table.next_timer())

    @property
    def outgoing(self) -> int:
        """Outgoing UIM connections open (or opening)."""
        return len(self._out)

    # ---------------------------------------------------------------- lifetime
    async def close(self) -> None:
        if self.closed:
            return
        self.closed = True
        self._timer.cancel()
        for t in list(self._connecting):
            t.cancel()
        for t in list(self._connecting):
            with contextlib.suppress(BaseException):
                await t
        for conn in list(self._out.values()):
            if conn.transport is not None:
                conn.transport.close()  # graceful: what is queued is still written
        self._out.clear()
        for inc in list(self._incoming):
            if inc.transport is not None:
                inc.transport.abort()
        if self.server is not None:
            self.server.close()
            with contextlib.suppress(Exception):
                await asyncio.wait_for(self.server.wait_closed(), 1.0)
