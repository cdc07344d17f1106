"""asyncio adapters for the SRS cores: the TCP server and the client connection manager.

Theory of operation
-------------------
Both are thin: an :class:`asyncio.Protocol` per TCP connection feeds bytes to the sans-IO core
(:mod:`umcore.srs.server` / :mod:`umcore.srs.client`) with ``loop.time()`` as ``now``; after
every input the adapter *flushes* the core: writes its output bytes, closes what it asks to
close, hands its events to a callback, and re-arms the core's single :class:`CoreTimer`.

:class:`SRSServerEndpoint` listens on one address; connection ids are small integers it hands
out.  TCP back-pressure goes to the core: when a transport's write buffer passes its high-water
mark (``pause_writing``) the core keeps that client's records in its own bounded record queue
until ``resume_writing`` (:meth:`SRSServer.receive_writing_paused`).  What still reaches a paused
transport (keepalive answers) is bounded too: a connection whose write buffer passes
``max_write_buffer`` is aborted and counted (``slow_dropped``) — its state becomes inactive like
any disconnect.  What the core's bounds refused (:meth:`SRSServer.take_refusals`) goes to the
``on_refusals`` callback after every input (the daemon logs it, rate-limited).

:class:`SRSClientConnector` opens the connections the client core asks for
(``take_connects``), each bounded by ``connect_timeout``; a failed or timed-out connect is
reported to the core, which schedules the reconnect with its back-off.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import socket
from collections.abc import Callable
from typing import cast

from umcore.aio.timer import CoreTimer
from umcore.srs.client import Event as ClientEvent
from umcore.srs.client import SRSClient
from umcore.srs.server import Refusal, SRSEvent, SRSServer

__all__ = ["SRSClientConnector", "SRSServerEndpoint"]

log = logging.getLogger("umcore.aio.srs")

# A client that stops reading: the SRS holds at most this much unsent data for it before
# dropping the connection (~400,000 SIRs: a full re-sync of a very large TRD still fits).
MAX_WRITE_BUFFER = 64 << 20
# Listen backlog: contexts reconnect all at once after an SRS restart.
LISTEN_BACKLOG = 1024


def _nodelay(transport: asyncio.BaseTransport) -> None:
    sock = transport.get_extra_info("socket")
    if sock is not None:
        with contextlib.suppress(OSError):
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)


class SRSServerEndpoint:
    """The SRS's TCP listener around an :class:`SRSServer` core."""

    def __init__(
        self,
        core: SRSServer,
        *,
        on_events: Callable[[list[SRSEvent]], None] | None = None,
        max_write_buffer: int = MAX_WRITE_BUFFER,
        on_refusals: Callable[[list[Refusal]], None] | None = None,
    ) -> None:
        self.core = core
        self.on_events = on_events
        self.on_refusals = on_refusals
        self.max_write_buffer = max_write_buffer
        self.server: asyncio.Server | None = None
        self.address: tuple[str, int] | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._timer: CoreTimer | None = None
        self._transports: dict[int, asyncio.Transport] = {}
        self._next_id = 1
        #: Connections aborted because their write buffer passed max_write_buffer.
        self.slow_dropped = 0
        #: Times a connection's write buffer reached its high-water mark (TCP back-pressure).
        self.writes_paused = 0
        #: Bytes received / sent on all connections.
        self.bytes_in = 0
        self.bytes_out = 0

    async def start(self, host: str, port: int) -> tuple[str, int]:
        loop = asyncio.get_running_loop()
        self._loop = loop
        self._timer = CoreTimer(loop, self._on_timer)
        self.server = await loop.create_server(
            lambda: _ServerProtocol(self), host, port, backlog=LISTEN_BACKLOG, reuse_address=True
        )
        sock = self.server.sockets[0].getsockname()
        self.address = (str(sock[0]), int(sock[1]))
        self._flush()
        return self.address

    async def close(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
        if self.server is not None:
            self.server.close()
        for transport in list(self._transports.values()):
            transport.abort()
        if self.server is not None:
            with contextlib.suppress(Exception):
                await asyncio.wait_for(self.server.wait_closed(), 2.0)

    def now(self) -> float:
        assert self._loop is not None
        return self._loop.time()

    def _on_timer(self) -> None:
        self.core.handle_timer(self.now())
        self._flush()

    def _flush(self) -> None:
        core = self.core
        for cid, data in core.take_writes():
            transport = self._transports.get(cid)
            if transport is None or transport.is_closing():
                continue
            transport.write(data)
            self.bytes_out += len(data)
            if transport.get_write_buffer_size() > self.max_write_buffer:
                self.slow_dropped += 1
                log.warning("connection %d does not read: dropped (write buffer full)", cid)
                transport.abort()
        for cid in core.take_closes():
            transport = self._transports.get(cid)
            if transport is not None:
                transport.close()
        if self.on_events is not None:
            events = core.take_events()
            if events:
                self.on_events(events)
        refusals = core.take_refusals()
        if refusals and self.on_refusals is not None:
            self.on_refusals(refusals)
        if self._timer is not None:
            self._timer.arm(core.next_timer())

    # -- called by the protocols
    def _made(self, proto: _ServerProtocol, transport: asyncio.Transport) -> None:
        cid = self._next_id
        self._next_id += 1
        proto.conn_id = cid
        self._transports[cid] = transport
        _nodelay(transport)
        peer = transport.get_extra_info("peername") or ("?", 0)
        self.core.receive_connected(cid, (str(peer[0]), int(peer[1])), self.now())
        self._flush()

    def _data(self, proto: _ServerProtocol, data: bytes) -> None:
        self.bytes_in += len(data)
        self.core.receive_data(proto.conn_id, data, self.now())
        self._flush()

    def _lost(self, proto: _ServerProtocol) -> None:
        if self._transports.pop(proto.conn_id, None) is not None:
            self.core.receive_disconnected(proto.conn_id, self.now())
            self._flush()

    def _writing(self, proto: _ServerProtocol, paused: bool) -> None:
        if proto.conn_id in self._transports:
            if paused:
                self.writes_paused += 1
            self.core.receive_writing_paused(proto.conn_id, paused, self.now())
            self._flush()


class _ServerProtocol(asyncio.Protocol):
    __slots__ = ("conn_id", "endpoint")

    def __init__(self, endpoint: SRSServerEndpoint) -> None:
        self.endpoint = endpoint
        self.conn_id = 0

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # uvloop's transports do not subclass asyncio.Transport: cast, do not check
        self.endpoint._made(self, cast(asyncio.Transport, transport))

    def data_received(self, data: bytes) -> None:
        self.endpoint._data(self, data)

    def connection_lost(self, exc: Exception | None) -> None:
        self.endpoint._lost(self)

    def pause_writing(self) -> None:
        self.endpoint._writing(self, True)

    def resume_writing(self) -> None:
        self.endpoint._writing(self, False)


class SRSClientConnector:
    """A context's connections to its SRS instances, around an :class:`SRSClient` core."""

    def __init__(
        self,
        core: SRSClient,
        *,
        on_events: Callable[[list[ClientEvent]], None] | None = None,
        connect_timeout: float = 2.0,
    ) -> None:
        self.core = core
        self.on_events = on_events
        self.connect_timeout = connect_timeout
        self._loop: asyncio.AbstractEventLoop | None = None
        self._timer: CoreTimer | None = None
        self._transports: dict[int, asyncio.Transport] = {}
        self._tasks: set[asyncio.Task[None]] = set()
        self._closed = False
        #: Set whenever the core produced events (for waiters).
        self.changed = asyncio.Event()

    def start(self) -> None:
        self._loop = asyncio.get_running_loop()
        self._timer = CoreTimer(self._loop, self._on_timer)
        self._flush()

    async def close(self) -> None:
        self._closed = True
        if self._timer is not None:
            self._timer.cancel()
        for task in list(self._tasks):
            task.cancel()
        for transport in list(self._transports.values()):
            transport.abort()
        self._transports.clear()
        if self._tasks:
            await asyncio.gather(*self._tasks, return_exceptions=True)

    def now(self) -> float:
        assert self._loop is not None
        return self._loop.time()

    def flush(self) -> None:
        """Write what the core has to send (call after add_source / add_receiver ...)."""
        self._flush()

    def _on_timer(self) -> None:
        self.core.handle_timer(self.now())
        self._flush()

    def _flush(self) -> None:
        if self._closed:
            return
        core = self.core
        for index, addr in core.take_connects():
            task = asyncio.ensure_future(self._connect(index, addr))
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)
        for index, data in core.take_writes():
            transport = self._transports.get(index)
            if transport is not None and not transport.is_closing():
                transport.write(data)
        for index in core.take_closes():
            transport = self._transports.pop(index, None)
            if transport is not None:
                transport.abort()
        events = core.take_events()
        if events:
            self.changed.set()
            if self.on_events is not None:
                self.on_events(events)
        if self._timer is not None:
            self._timer.arm(core.next_timer())

    async def _connect(self, index: int, addr: tuple[str, int]) -> None:
        loop = asyncio.get_running_loop()
        try:
            await asyncio.wait_for(
                loop.create_connection(lambda: _ClientProtocol(self, index), addr[0], addr[1]),
                self.connect_timeout,
            )
        except (OSError, TimeoutError) as exc:
            # A timeout that fires just after the connection was made: the core was told it
            # connected, and the transport's end reports the loss (never both).
            if not self._closed and index not in self._transports:
                self.core.receive_connect_failed(index, self.now(), f"connect to {addr}: {exc}")
                self._flush()

    # -- called by the protocols
    def _made(self, index: int, transport: asyncio.Transport) -> None:
        if self._closed:
            transport.abort()
            return
        _nodelay(transport)
        self._transports[index] = transport
        self.core.receive_connected(index, self.now())
        self._flush()

    def _data(self, index: int, transport: asyncio.Transport, data: bytes) -> None:
        if self._transports.get(index) is transport:
            self.core.receive_data(index, data, self.now())
            self._flush()

    def _lost(self, index: int, transport: asyncio.Transport) -> None:
        if self._transports.get(index) is transport:
            del self._transports[index]
            if not self._closed:
                self.core.receive_disconnected(index, self.now())
                self._flush()


class _ClientProtocol(asyncio.Protocol):
    __slots__ = ("connector", "index", "transport")

    def __init__(self, connector: SRSClientConnector, index: int) -> None:
        self.connector = connector
        self.index = index
        self.transport: asyncio.Transport | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = cast(asyncio.Transport, transport)
        self.connector._made(self.index, self.transport)

    def data_received(self, data: bytes) -> None:
        assert self.transport is not None
        self.connector._data(self.index, self.transport, data)

    def connection_lost(self, exc: Exception | None) -> None:
        if self.transport is not None:
            self.connector._lost(self.index, self.transport)
