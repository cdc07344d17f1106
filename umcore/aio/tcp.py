"""asyncio adapters for the TCP transport: the source's listener and the receiver's connection.

Theory of operation
-------------------
Both sides are plain :class:`asyncio.Protocol` objects (fast on uvloop, no stream wrappers on the
data path) around the sans-IO cores of :mod:`umcore.transport.tcp`.

:class:`SourceListener` owns one listening socket, bound to a port of the context's
``transport_tcp_port_low..high`` pool (:func:`listen_in_range`), and the
:class:`~umcore.transport.tcp.TcpSourceSession` behind it.  Every accepted connection gets a
:class:`_SourceConnectionProtocol` that feeds the session's connection core
(:class:`~umcore.transport.tcp.SourceConnections`, one re-armed timer here): the receiver's bytes
(the session-id check), its write buffer crossing ``transport_session_maximum_buffer`` (the
connection's high-water mark; asyncio resumes at a quarter of it), its loss.  The core says which
connections the next chunk of the session's output is written to, which lose it, and whether
the listener is *blocked*; :meth:`SourceListener.writable` waits for that to clear and
``on_unblock`` tells the API layer to deliver WAKEUP events.  A connection that sends garbage or
a stale session id is aborted at once, one that has not confirmed the session id within
:data:`~umcore.transport.tcp.SESSION_ID_TIMEOUT` when the timer fires; the listener and the
other receivers go on.

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
from typing import cast

from umcore.aio.ports import first_free
from umcore.aio.timer import CoreTimer
from umcore.errors import TransportError
from umcore.transport.tcp import (
    MAX_UNCONFIRMED,
    SESSION_ID_TIMEOUT,
    Pacing,
    SourceConnection,
    SourceConnections,
    TcpReceiverSession,
    TcpSourceSession,
)

__all__ = ["ReceiverConnection", "SourceListener", "listen_in_range"]

log = logging.getLogger("umcore.aio.tcp")

# What a peer can make the listener refuse at will (garbage, a confirmation never sent...) is
# logged at most once per this many seconds per kind, naming the peer and counting the lines
# held back since: a flood of connections cannot fill the log.
REFUSAL_LOG_PERIOD = 10.0


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
        self.peers: SourceConnections = session.peers
        self.max_buffer = max_buffer
        self.nodelay = nodelay
        self.on_connect = on_connect
        self.on_disconnect = on_disconnect
        self.on_unblock = on_unblock
        self.server: asyncio.Server | None = None
        self.port = 0
        #: The transports the next chunk is written to (the core's :attr:`targets`).
        self._writers: list[asyncio.Transport] = []
        #: The one confirmed receiver connection while there is exactly one (and it is not
        #: losing data), else None: the engine's one-message send writes to it directly.
        self.single: asyncio.Transport | None = None
        #: Nothing but plain writes to do: no lossy connection, serial order.
        self._plain = True
        self._protocols: set[_SourceConnectionProtocol] = set()
        #: Sends must wait (a plain bool: the engine's send paths read it on every send).
        self.paused = False
        self._unblocked: asyncio.Event | None = None
        self._timer: CoreTimer | None = None
        #: Per kind of refusal: [time of its last log line, lines held back since].
        self._log_windows: dict[str, list[float]] = {}

    @property
    def connections_refused(self) -> int:
        """Connections closed for garbage, a stale session id, no confirmation in time."""
        return self.peers.stats.refused

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
        self._timer = CoreTimer(asyncio.get_running_loop(), self._on_timer)
        factory: Callable[[], asyncio.Protocol] = lambda: _SourceConnectionProtocol(self)  # noqa: E731
        if wrap is not None:
            factory = wrap(factory)
        self.server, self.port = await listen_in_range(factory, host, low, high, backlog=backlog)
        return self.port

    @property
    def receivers(self) -> int:
        return self.peers.receivers

    @property
    def blocked(self) -> bool:
        return self.paused

    @property
    def buffered_bytes(self) -> int:
        """Bytes written but not yet sent, over every receiver connection."""
        return sum(
            p.transport.get_write_buffer_size()
            for p in self._protocols
            if p.transport is not None and p.connected
        )

    async def writable(self) -> None:
        """Wait until the session is no longer blocked by its receivers."""
        while self.paused:
            if self._unblocked is None:
                self._unblocked = asyncio.Event()
            await self._unblocked.wait()

    def write(self, data: bytes) -> None:
        """Write one chunk of the session's output (whole LBMC frames) to the receivers the
        core names; the lossy ones are counted as having missed it."""
        ws = self._writers
        if self._plain:
            if len(ws) == 1:  # one receiver: no list iterator (an allocation) for the loop
                ws[0].write(data)
                return
            for w in ws:
                w.write(data)
            return
        peers = self.peers
        if peers.random_order:
            peers.shuffle()
            ws = peers.targets
        if peers.lossy:
            peers.count_dropped(len(data))
        for w in ws:  # a write may change the core's state: ws stays this chunk's list
            w.write(data)

    async def close(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
        if self.server is not None:
            self.server.close()
        for p in list(self._protocols):
            # Graceful: what is buffered for a receiver is still written, then FIN (its EOS).
            if p.transport is not None:
                p.transport.close()
        if self.server is not None:
            with contextlib.suppress(Exception):
                await asyncio.wait_for(self.server.wait_closed(), 1.0)

    # -- the core's outputs
    def _sync(self) -> None:
        """Take the core's state after an input: targets, blocked, connections to close."""
        peers = self.peers
        was = self.paused
        self._writers = peers.targets
        self.single = peers.single
        self._plain = not peers.lossy and not peers.random_order
        self.paused = peers.blocked
        for c in peers.take_closing():
            tr = c.handle
            if tr is not None:
                if c.refusal == "timeout":
                    why = f"no session-id confirmation within {SESSION_ID_TIMEOUT:g} s"
                else:
                    why = f"more than {MAX_UNCONFIRMED} connections waiting to confirm: the oldest"
                self._refused(c.refusal, _peer_of(tr), why)
                with contextlib.suppress(Exception):
                    tr.abort()
        if self._timer is not None:
            self._timer.arm(peers.next_timer())
        if was and not self.paused:
            if self._unblocked is not None:
                self._unblocked.set()
                self._unblocked = None
            if self.on_unblock is not None:
                self.on_unblock()

    def _refused(self, kind: str, peer: str, why: str) -> None:
        """One log line per kind of refusal per :data:`REFUSAL_LOG_PERIOD` (counted always, in
        the core's statistics)."""
        now = asyncio.get_running_loop().time()
        window = self._log_windows.get(kind)
        if window is not None and now - window[0] < REFUSAL_LOG_PERIOD:
            window[1] += 1
            return
        held = int(window[1]) if window is not None else 0
        self._log_windows[kind] = [now, 0]
        level = logging.INFO if kind in ("stale", "lossy") else logging.WARNING
        more = f" ({held} more of this kind since the last line)" if held else ""
        log.log(level, "TCP source port %d: receiver %s: %s%s", self.port, peer, why, more)

    def _on_timer(self) -> None:
        self.peers.handle_timer(asyncio.get_running_loop().time())
        self._sync()

    # -- called by the protocols
    def _accepted(self, proto: _SourceConnectionProtocol, transport: asyncio.Transport) -> None:
        self._protocols.add(proto)
        proto.core = self.peers.accept(asyncio.get_running_loop().time(), transport)
        if proto.core.confirmed:
            self._confirmed(proto)
        else:
            self._sync()

    def _data(self, proto: _SourceConnectionProtocol, data: bytes) -> None:
        core = proto.core
        if core is None:
            return
        try:
            just = self.peers.receive_data(core, data)
        except TransportError as exc:
            self._refused("stale" if core.stale else "garbage", proto.peer, str(exc))
            proto.close()
            self._sync()
            return
        if just:
            self._confirmed(proto)

    def _confirmed(self, proto: _SourceConnectionProtocol) -> None:
        proto.connected = True
        self._sync()
        if self.on_connect is not None:
            self.on_connect(proto.peer)

    def _paused(self, proto: _SourceConnectionProtocol) -> None:
        core = proto.core
        if core is not None:
            self.peers.receive_paused(core)
            if core.lossy and self.peers.pacing is not Pacing.NORMAL:
                why = "cannot keep up: it loses data until its buffer drains"
                self._refused("lossy", proto.peer, why)
            self._sync()

    def _resumed(self, proto: _SourceConnectionProtocol) -> None:
        core = proto.core
        if core is not None:
            self.peers.receive_resumed(core)
            self._sync()

    def _lost(self, proto: _SourceConnectionProtocol) -> None:
        self._protocols.discard(proto)
        core = proto.core
        if core is None:
            return
        self.peers.receive_lost(core)
        self._sync()
        if proto.connected and self.on_disconnect is not None:
            self.on_disconnect(proto.peer)


def _peer_of(transport: asyncio.Transport) -> str:
    peer = transport.get_extra_info("peername")
    return f"{peer[0]}:{peer[1]}" if peer else "?"


class _SourceConnectionProtocol(asyncio.Protocol):
    def __init__(self, listener: SourceListener) -> None:
        self.listener = listener
        self.core: SourceConnection | None = None
        self.transport: asyncio.Transport | None = None
        self.peer = "?"
        #: Confirmed (CONNECT reported): its loss is a DISCONNECT.
        self.connected = False

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
        self.listener._accepted(self, transport)

    def data_received(self, data: bytes) -> None:
        self.listener._data(self, data)

    def pause_writing(self) -> None:
        self.listener._paused(self)

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
