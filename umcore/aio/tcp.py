"""asyncio adapters for the TCP transport: the source's listener and the receiver's connection.

Theory of operation
-------------------
Both sides are plain :class:`asyncio.Protocol` objects (fast on uvloop, no stream wrappers on the
data path) around the sans-IO cores of :mod:`umcore.transport.tcp`.

:class:`SourceListener` owns one listening socket, bound to a port of the context's
``transport_tcp_port_low..high`` pool (:func:`listen_in_range`), and the
:class:`~umcore.transport.tcp.TcpSourceSession` behind it.  Every accepted connection gets a
:class:`_SourceConnectionProtocol` that feeds the receiver's bytes to its
:class:`~umcore.transport.tcp.SourceConnection` (the session-id check) and, once confirmed, is
written every batch the session produces.  Back-pressure: each connection's write buffer has
``transport_session_maximum_buffer`` as high-water mark; while any confirmed connection is above
it the listener is *blocked* (UM's receiver-paced "normal" mode), :meth:`SourceListener.writable`
waits for it to clear, and ``on_unblock`` tells the API layer to deliver WAKEUP events.  A
receiver that sends garbage or a stale session id is aborted; the listener and the other
receivers go on.

:class:`ReceiverConnection` is the receiver's connection to one source session: it sends the
session-id confirmation on connect, feeds bytes to a
:class:`~umcore.transport.tcp.TcpReceiverSession`, and reports ``on_active`` (first bytes: BOS
time) and ``on_closed`` (EOS time).  Garbage from the source raises
:class:`~umcore.errors.TransportError` in the core, which aborts this connection only.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import socket
from collections.abc import Callable
from typing import Any, cast

from umcore.aio.ports import first_free
from umcore.errors import TransportError
from umcore.transport.tcp import SourceConnection, TcpReceiverSession, TcpSourceSession

__all__ = ["ReceiverConnection", "SourceListener", "listen_in_range"]

log = logging.getLogger("umcore.aio.tcp")


async def listen_in_range(
    factory: Callable[[], asyncio.Protocol],
    host: str,
    low: int,
    high: int,
    *,
    backlog: int = 5,
    nodelay: bool = True,
) -> tuple[asyncio.Server, int]:
    """Listen on the first free port of ``low..high`` (``low == 0``: an ephemeral port)."""
    loop = asyncio.get_running_loop()

    async def bind(port: int) -> tuple[asyncio.Server, int]:
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        if os.name != "nt":
            # A daemon restarted on its fixed port must not wait out the TIME_WAIT of its old
            # connections; on POSIX this never lets two listeners share a port (on Windows
            # SO_REUSEADDR would, so it stays off there).
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((host, port))
        except OSError:
            sock.close()
            raise
        sock.listen(backlog)
        sock.setblocking(False)
        server = await loop.create_server(factory, sock=sock)
        return server, sock.getsockname()[1]

    return await first_free(
        [0] if low == 0 else range(low, high + 1), bind, f"TCP port {low}-{high} on {host}"
    )


class SourceListener:
    """One TCP transport session's listening socket and its receiver connections."""

    def __init__(
        self,
        session: TcpSourceSession,
        *,
        max_buffer: int = 65536,
        nodelay: bool = True,
        on_connect: Callable[[str], None] | None = None,
        on_disconnect: Callable[[str], None] | None = None,
        on_unblock: Callable[[], None] | None = None,
    ) -> None:
        self.session = session
        self.max_buffer = max_buffer
        self.nodelay = nodelay
        self.on_connect = on_connect
        self.on_disconnect = on_disconnect
        self.on_unblock = on_unblock
        self.server: asyncio.Server | None = None
        self.port = 0
        self._writers: list[asyncio.Transport] = []
        #: The one confirmed receiver connection while there is exactly one, else None: the
        #: engine's one-message send writes to it directly (one Python call less per hop).
        self.single: asyncio.Transport | None = None
        self._protocols: set[_SourceConnectionProtocol] = set()
        #: The connections above their buffer limit; :attr:`paused` says whether there is
        #: one (a plain bool: the engine's send paths read it on every send).
        self._blocking: set[Any] = set()
        self.paused = False
        self._unblocked: asyncio.Event | None = None
        #: Connections aborted because the receiver sent garbage or a stale session id.
        self.connections_refused = 0

    async def start(
        self,
        host: str,
        low: int,
        high: int,
        backlog: int = 5,
        *,
        wrap: Callable[[Callable[[], asyncio.Protocol]], Callable[[], asyncio.Protocol]]
        | None = None,
    ) -> int:
        """Listen; ``wrap`` wraps the connections' protocol factory (the context's TLS/LZ4:
        :meth:`umcore.aio.tls.Security.server_factory`)."""
        factory: Callable[[], asyncio.Protocol] = lambda: _SourceConnectionProtocol(self)  # noqa: E731
        if wrap is not None:
            factory = wrap(factory)
        self.server, self.port = await listen_in_range(factory, host, low, high, backlog=backlog)
        return self.port

    @property
    def receivers(self) -> int:
        return len(self._writers)

    @property
    def blocked(self) -> bool:
        return self.paused

    @property
    def buffered_bytes(self) -> int:
        """Bytes written but not yet sent, over every receiver connection."""
        return sum(w.get_write_buffer_size() for w in self._writers)

    async def writable(self) -> None:
        """Wait until no receiver connection is above its buffer limit."""
        while self.paused:
            if self._unblocked is None:
                self._unblocked = asyncio.Event()
            await self._unblocked.wait()

    def write(self, data: bytes) -> None:
        """Write one chunk of the session's output to every confirmed receiver."""
        ws = self._writers
        if len(ws) == 1:  # one receiver: no list iterator (an allocation) for the loop
            ws[0].write(data)
            return
        for w in ws:
            w.write(data)

    async def close(self) -> None:
        if self.server is not None:
            self.server.close()
        for p in list(self._protocols):
            # Graceful: what is buffered for a receiver is still written, then FIN (its EOS).
            if p.transport is not None:
                p.transport.close()
        if self.server is not None:
            with contextlib.suppress(Exception):
                await asyncio.wait_for(self.server.wait_closed(), 1.0)

    # -- called by the protocols
    def _confirmed(self, proto: _SourceConnectionProtocol) -> None:
        assert proto.transport is not None
        self._writers.append(proto.transport)
        self.single = self._writers[0] if len(self._writers) == 1 else None
        if self.on_connect is not None:
            self.on_connect(proto.peer)

    def _lost(self, proto: _SourceConnectionProtocol) -> None:
        self._protocols.discard(proto)
        if proto.transport in self._writers:
            self._writers.remove(proto.transport)
            self.single = self._writers[0] if len(self._writers) == 1 else None
            if self.on_disconnect is not None:
                self.on_disconnect(proto.peer)
        self._resumed(proto)

    def _pause(self, proto: Any) -> None:
        self._blocking.add(proto)
        self.paused = True

    def _resumed(self, proto: Any) -> None:
        if proto in self._blocking:
            self._blocking.discard(proto)
            if not self._blocking:
                self.paused = False
                if self._unblocked is not None:
                    self._unblocked.set()
                    self._unblocked = None
                if self.on_unblock is not None:
                    self.on_unblock()


class _SourceConnectionProtocol(asyncio.Protocol):
    def __init__(self, listener: SourceListener) -> None:
        self.listener = listener
        self.core: SourceConnection = listener.session.connection()
        self.transport: asyncio.Transport | None = None
        self.peer = "?"

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # uvloop's transports implement asyncio.Transport without subclassing it.
        transport = cast(asyncio.Transport, transport)
        self.transport = transport
        peer = transport.get_extra_info("peername")
        self.peer = f"{peer[0]}:{peer[1]}" if peer else "?"
        sock = transport.get_extra_info("socket")
        if sock is not None and self.listener.nodelay:
            with contextlib.suppress(OSError):
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        transport.set_write_buffer_limits(high=self.listener.max_buffer)
        self.listener._protocols.add(self)
        if self.core.confirmed:
            self.listener._confirmed(self)

    def data_received(self, data: bytes) -> None:
        try:
            if self.core.receive_data(data):
                self.listener._confirmed(self)
        except TransportError as exc:
            self.listener.connections_refused += 1
            log.info("dropping receiver %s: %s", self.peer, exc)
            self.close()

    def pause_writing(self) -> None:
        self.listener._pause(self)

    def resume_writing(self) -> None:
        self.listener._resumed(self)

    def connection_lost(self, exc: Exception | None) -> None:
        self.listener._lost(self)

    def close(self) -> None:
        if self.transport is not None:
            self.transport.abort()


class ReceiverConnection(asyncio.Protocol):
    """A receiver's TCP connection to one source session (see the module docstring)."""

    def __init__(
        self,
        session: TcpReceiverSession,
        *,
        on_active: Callable[[], None],
        on_closed: Callable[[Exception | None], None],
    ) -> None:
        self.session = session
        session.on_active = on_active
        self.on_closed = on_closed
        self.transport: asyncio.Transport | None = None
        self.closed = False
        self.error: Exception | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # uvloop's transports implement asyncio.Transport without subclassing it.
        transport = cast(asyncio.Transport, transport)
        self.transport = transport
        hello = self.session.connect_message()
        if hello is not None:
            transport.write(hello)

    def data_received(self, data: bytes) -> None:
        try:
            self.session.receive_data(data)
        except TransportError as exc:
            self.error = exc
            log.info("dropping source connection: %s", exc)
            self.abort()

    def pause_reading(self) -> None:
        if self.transport is not None and not self.closed:
            with contextlib.suppress(Exception):
                self.transport.pause_reading()

    def resume_reading(self) -> None:
        if self.transport is not None and not self.closed:
            with contextlib.suppress(Exception):
                self.transport.resume_reading()

    def abort(self) -> None:
        if self.transport is not None:
            self.transport.abort()

    def connection_lost(self, exc: Exception | None) -> None:
        if not self.closed:
            self.closed = True
            self.on_closed(exc or self.error)
