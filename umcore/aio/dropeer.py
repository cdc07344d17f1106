"""The asyncio adapter of a DRO peer portal: a :class:`~umcore.dro.peer.PeerLink` over TCP.

Theory of operation
-------------------
A ``<peer>`` portal's ``<single-tcp>`` is either an ``<initiator>`` (connects to the other DRO's
``address``:``port`` and reconnects) or an ``<acceptor>`` (listens on ``listen-port`` and takes
one connection at a time: a portal has one companion).  :class:`PeerPortalLink` owns the socket
side; the protocol is the sans-IO :class:`PeerLink` it is given, and everything above (the
:class:`~umcore.dro.DroCore`) is the daemon's runtime, which it calls back (``on_activity``)
after every input so the runtime can hand the link's events and frames to the core
(:func:`umcore.dro.peerglue.deliver`) and send more.  One re-armed timer drives the link's
``next_timer`` (keepalive, handshake timeout, batch interval); ``loop.time()`` is its clock.

Below the link, optionally: LZ4 compression (``<compression>LZ4</compression>``) and TLS
(``<tls>``: certificate, key, password, trusted certificates, cipher suites), both ending at
this portal, through :class:`umcore.aio.tls.Security` (compression first, then TLS; the
handshake and compression hello within the 5 s UM hard-codes for peer links).  A failed TLS
handshake is logged there with its reason and here with the retry.

Socket options: ``<keepalive/>`` sets SO_KEEPALIVE, ``<nodelay/>`` sets TCP_NODELAY (cleared
otherwise: asyncio sets it by default), ``<receive-buffer>``/``<send-buffer>`` (0 = the OS
decides), ``<interface>`` the local address (initiator: the source address of its connection;
acceptor: the address it listens on; absent: every interface for the acceptor).

Faults: when the link ends a session (garbage, a refused hello, the keepalive timeout, the peer
closing), the connection is closed and logged ("lost connection ..." with the reason); the
initiator reconnects after ``reconnect-interval``, doubled for each consecutive attempt that
did not bring the link up, up to :data:`MAX_BACKOFF_FACTOR` times; a link that came up resets
the back-off.  Writes stop while the socket is flow-controlled (``pause_writing``), so a stalled
peer fills the link's ``max-queue`` (which drops and counts) and never blocks the daemon.

UDP data link (``<udp>``, :mod:`umcore.dro.peerudp`): the portal binds one UDP socket to
``<udp><port>`` (on ``<interface>`` if set) for its whole life, with ``<receive-buffer>`` and
``<send-buffer>`` as SO_RCVBUF/SO_SNDBUF.  The link learns the other DRO's UDP port over TCP;
datagrams go to that port at the IP the TCP connection is connected to (the initiator: the
configured acceptor address; the acceptor: the initiator's address as seen on TCP, which may be
a NAT's), and only datagrams from that IP are taken (from any port: the session ids in every
LBT-RU datagram keep another session's datagrams out).  LZ4 and TLS stay on the TCP link: the UDP
link is neither compressed nor encrypted (UM has them on UDP from 6.17 only; pyum follows the
earlier behaviour and logs it at start when both are configured).

Fault injection for tests (no netem on the test machines): the environment variable
:data:`DROP_ENV` = N drops every N-th DATA datagram's first transmission before it is sent
(retransmissions are never dropped), logged at start with a warning; the loss is then
repaired by LBT-RU's NAKs like any other.

Log lines follow UM's where the notes give them: ``Initiator: peer portal [P] connected to
[ip:port]``, ``Acceptor: peer portal [P] received connection from [ip:port]``.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import socket
from collections.abc import Callable
from typing import cast

from umcore.aio.interfaces import resolve
from umcore.aio.timer import CoreTimer
from umcore.aio.tls import Security
from umcore.config.dro import Peer
from umcore.config.options import lookup
from umcore.dro.peer import LinkState, PeerLink
from umcore.errors import ConfigError
from umcore.wire import lbtru as ru

__all__ = [
    "CONNECT_TIMEOUT",
    "DROP_ENV",
    "MAX_BACKOFF_FACTOR",
    "PeerPortalLink",
    "peer_security",
]

log = logging.getLogger("umcore.aio.dropeer")

# Seconds for the TCP connect itself (the TLS handshake and LZ4 hello have their own bound).
CONNECT_TIMEOUT = 5.0
# UM's peer-link TLS negotiation timeout, hard-coded (notes A3).
PEER_TLS_TIMEOUT = 5.0
# Consecutive failed attempts multiply reconnect-interval up to this factor (5 s -> 40 s at
# UM's default): a peer that keeps refusing is retried, but not hammered.
MAX_BACKOFF_FACTOR = 8
# The socket's write buffer above which we stop handing it bytes (the link's max-queue holds
# the rest): large enough for a burst of full batches, small next to max-queue's 1 MB default.
WRITE_HIGH_WATER = 256 * 1024
# Test-only fault injection on the UDP data link (module docstring).
DROP_ENV = "PYUM_PEER_UDP_DROP_EVERY"


def _drop_every(source: str) -> int:
    text = os.environ.get(DROP_ENV, "").strip()
    if not text:
        return 0
    if not text.isdigit() or int(text) < 2:
        raise ConfigError(
            f"{DROP_ENV}={text!r}",
            source=f"environment variable {DROP_ENV}",
            allowed="an integer >= 2 (drop every N-th UDP DATA datagram)",
        )
    return int(text)


def peer_security(portal: Peer, source: str = "<DRO XML>") -> Security:
    """The portal's compression and TLS, or a ConfigError naming the file, the line and the
    element (a missing certificate file, a bad key, an unknown suite, a compression other than
    LZ4)."""
    st = portal.single_tcp
    compression = False
    if st.compression is not None:
        if st.compression.strip().upper() != "LZ4":
            raise ConfigError(
                f"peer portal {portal.name!r}: compression {st.compression!r}",
                source=source,
                line=portal.line,
                what="<compression>",
                allowed="LZ4",
            )
        compression = True
    tls = st.tls
    if tls is None:
        return Security(compression=compression, timeout=PEER_TLS_TIMEOUT)
    try:
        return Security.from_files(
            certificate=tls.certificate,
            certificate_key=tls.certificate_key,
            password=tls.certificate_key_password,
            trusted=tls.trusted_certificates,
            cipher_suites=tls.cipher_suites or lookup("context", "tls_cipher_suites").default,
            compression=compression,
            timeout=PEER_TLS_TIMEOUT,
        )
    except ConfigError as exc:
        raise ConfigError(
            f"peer portal {portal.name!r} <tls>: {exc.message}",
            source=source,
            line=portal.line,
            what="<tls>",
        ) from None


class _Conn(asyncio.Protocol):
    """One connection's protocol: everything goes to the owning :class:`PeerPortalLink`."""

    def __init__(self, owner: PeerPortalLink) -> None:
        self.owner = owner
        self.transport: asyncio.Transport | None = None
        self.peer = "?"

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # uvloop's transports are not asyncio.Transport subclasses, only alike
        self.transport = cast(asyncio.Transport, transport)
        addr = self.transport.get_extra_info("peername")
        self.peer = f"{addr[0]}:{addr[1]}" if addr else "?"
        self.owner._connected(self)

    def data_received(self, data: bytes) -> None:
        self.owner._data(self, data)

    def eof_received(self) -> bool:
        return False  # close: the peer ended its side

    def connection_lost(self, exc: Exception | None) -> None:
        self.owner._lost(self, exc)

    def pause_writing(self) -> None:
        self.owner._pause(self, True)

    def resume_writing(self) -> None:
        self.owner._pause(self, False)


class _Udp(asyncio.DatagramProtocol):
    """The portal's UDP socket: datagrams go to the owning :class:`PeerPortalLink`."""

    def __init__(self, owner: PeerPortalLink) -> None:
        self.owner = owner

    def datagram_received(self, data: bytes, addr: tuple[str | object, ...]) -> None:
        self.owner._datagram(data, addr)

    def error_received(self, exc: Exception) -> None:
        # ICMP port unreachable while the other DRO is not bound yet: LBT-RU retries
        self.owner.udp_errors += 1


class PeerPortalLink:
    """One peer portal's TCP side; see the module docstring."""

    def __init__(
        self,
        portal: Peer,
        link: PeerLink,
        *,
        source: str = "<DRO XML>",
        on_activity: Callable[[], object] | None = None,
        security: Security | None = None,
    ) -> None:
        """``link``: the portal's :class:`PeerLink` (its node id and name are the DRO's);
        ``on_activity``: called after every input (bytes, timer, connection change) with the
        link's events and frames waiting; ``security``: defaults to :func:`peer_security`."""
        st = portal.single_tcp
        self.portal = portal
        self.name = portal.name
        self.link = link
        self.source = source
        self.role = st.role
        self.security = security if security is not None else peer_security(portal, source)
        self.on_activity = on_activity
        self.local_address: str | None = None
        if st.interface:
            self.local_address = resolve(
                st.interface, source=source, line=portal.line, what="<interface>"
            ).address
        if self.role == "initiator" and (not st.address or st.port is None):
            raise ConfigError(
                f"peer portal {portal.name!r}: an initiator needs <address> and <port>",
                source=source,
                line=portal.line,
                what="<initiator>",
            )
        self.reconnect_interval = st.reconnect_interval / 1000
        self.port = st.port or 0  # the acceptor's listen port once bound (0: ephemeral)
        self._conn: _Conn | None = None
        self._paused = False
        self._closed = False
        self._server: asyncio.Server | None = None
        self._task: asyncio.Task[None] | None = None
        self._gone = asyncio.Event()  # the current connection ended
        self._writable = asyncio.Event()
        self._timer: CoreTimer | None = None
        self._was_up = False
        self._was_up_last = False  # the last connection brought the link up
        #: Consecutive attempts (connects or sessions) that did not bring the link up.
        self.failures = 0
        #: Connection attempts made (initiator), connections taken and refused (acceptor).
        self.attempts = 0
        self.accepted = 0
        self.refused = 0
        #: The delay before the initiator's next attempt (seconds), for logs and tests.
        self.next_delay = 0.0
        #: ``<udp>``: the UDP socket, the current connection's peer IP (datagrams go to it and
        #: come only from it), datagrams from elsewhere, socket errors, injected drops.
        self._udp: asyncio.DatagramTransport | None = None
        self._peer_ip: str | None = None
        self.udp_port = portal.udp.port if portal.udp is not None else 0
        self.udp_foreign = 0
        self.udp_errors = 0
        self.udp_injected_drops = 0
        self._drop_every = _drop_every(source) if portal.udp is not None else 0
        self._udp_was_up = False  # the current connection's UDP data link came up (logged)
        self._data_count = 0

    # --- life cycle ---------------------------------------------------------------------------

    async def start(self) -> None:
        """Listen (acceptor) or start connecting (initiator)."""
        loop = asyncio.get_running_loop()
        self._timer = CoreTimer(loop, self._on_timer)
        if self.portal.udp is not None:
            await self._bind_udp(loop)
        if self.role == "acceptor":
            self._server = await loop.create_server(
                self.security.server_factory(lambda: _Conn(self)),
                self.local_address,
                self.port,
                reuse_address=True,
            )
            self.port = self._server.sockets[0].getsockname()[1]
            log.info("Acceptor: peer portal [%s] listening on port %d", self.name, self.port)
        else:
            self._task = loop.create_task(self._connector(), name=f"peer-{self.name}")

    async def _bind_udp(self, loop: asyncio.AbstractEventLoop) -> None:
        udp = self.portal.udp
        assert udp is not None
        sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        try:
            with contextlib.suppress(OSError):
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, udp.receive_buffer)
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, udp.send_buffer)
            sock.bind((self.local_address or "0.0.0.0", udp.port))
        except OSError as exc:
            sock.close()
            raise ConfigError(
                f"peer portal {self.name!r}: cannot bind UDP port {udp.port}: {_reason(exc)}",
                source=self.source,
                line=self.portal.line,
                what="<udp><port>",
            ) from None
        self._udp, _ = await loop.create_datagram_endpoint(lambda: _Udp(self), sock=sock)
        log.info("peer portal [%s]: UDP data link on port %d", self.name, udp.port)
        if self.portal.single_tcp.compression or self.portal.single_tcp.tls:
            log.info(
                "peer portal [%s]: LZ4/TLS apply to the TCP control link only; the UDP data "
                "link is neither compressed nor encrypted",
                self.name,
            )
        if self._drop_every:
            log.warning(
                "peer portal [%s]: %s=%d: dropping every %d-th UDP DATA datagram (testing)",
                self.name, DROP_ENV, self._drop_every, self._drop_every,
            )  # fmt: skip

    async def close(self) -> None:
        self._closed = True
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
        if self._server is not None:
            self._server.close()
            await self._server.wait_closed()
        self._drop_connection("portal closing")
        if self._udp is not None:
            self._udp.close()
            self._udp = None
        if self._timer is not None:
            self._timer.cancel()
        self.security.close()

    def _delay(self) -> float:
        factor: int = min(2**self.failures, MAX_BACKOFF_FACTOR)
        return self.reconnect_interval * factor

    async def _connector(self) -> None:
        st = self.portal.single_tcp
        host, port = str(st.address), int(st.port or 0)
        local = (self.local_address, 0) if self.local_address else None
        while not self._closed:
            self.attempts += 1
            self._gone.clear()
            try:
                await self.security.connect(
                    lambda: _Conn(self), host, port, timeout=CONNECT_TIMEOUT, local_addr=local
                )
            except (OSError, TimeoutError) as exc:
                self.failures += 1
                self.next_delay = self._delay()
                log.warning(
                    "Initiator: peer portal [%s] cannot connect to [%s:%d]: %s; retrying in %d ms",
                    self.name, host, port, _reason(exc), round(self.next_delay * 1000),
                )  # fmt: skip
                await asyncio.sleep(self.next_delay)
                continue
            await self._gone.wait()
            if not self._was_up_last:
                self.failures += 1
            self.next_delay = self._delay()
            log.info(
                "Initiator: peer portal [%s] reconnecting to [%s:%d] in %d ms",
                self.name, host, port, round(self.next_delay * 1000),
            )  # fmt: skip
            await asyncio.sleep(self.next_delay)

    # --- connection events ----------------------------------------------------------------------

    def _connected(self, conn: _Conn) -> None:
        tr = conn.transport
        assert tr is not None
        if self._closed or self._conn is not None or self.link.connected:
            self.refused += 1
            if self.role == "initiator":
                self._gone.set()  # the connector must not wait for a connection it refused
            log.warning(
                "Acceptor: peer portal [%s] refused a second connection from [%s] "
                "(one companion per peer portal)",
                self.name, conn.peer,
            )  # fmt: skip
            tr.close()
            return
        self._conn = conn
        self._paused = False
        self._was_up = False
        self._was_up_last = False
        sock = tr.get_extra_info("socket")
        if sock is not None:
            self._socket_options(sock)
        tr.set_write_buffer_limits(high=WRITE_HIGH_WATER)
        addr = tr.get_extra_info("peername")
        self._peer_ip = str(addr[0]) if addr else None
        if self.role == "acceptor":
            self.accepted += 1
            log.info(
                "Acceptor: peer portal [%s] received connection from [%s]", self.name, conn.peer
            )
        else:
            log.info("Initiator: peer portal [%s] connected to [%s]", self.name, conn.peer)
        self.link.receive_connected(self._now())
        self._after()

    def _socket_options(self, sock: socket.socket) -> None:
        st = self.portal.single_tcp
        with contextlib.suppress(OSError):
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_KEEPALIVE, 1 if st.keepalive else 0)
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1 if st.nodelay else 0)
            if st.receive_buffer:
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, st.receive_buffer)
            if st.send_buffer:
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, st.send_buffer)

    def _data(self, conn: _Conn, data: bytes) -> None:
        if conn is not self._conn:
            return
        self.link.receive_data(data, self._now())
        self._after()

    def _datagram(self, data: bytes, addr: tuple[str | object, ...]) -> None:
        # from the other DRO's IP only (any source port: a NAT may rewrite it; the LBT-RU
        # session ids keep other sessions out), once its port offer has arrived
        if self.link.udp_peer_port is None or addr[0] != self._peer_ip or self._conn is None:
            self.udp_foreign += 1  # not (yet) the other DRO: LBT-RU retries
            return
        self.link.receive_datagram(data, self._now())
        self._after()

    def _lost(self, conn: _Conn, exc: Exception | None) -> None:
        if conn is not self._conn:
            return
        self._conn = None
        reason = _reason(exc) if exc is not None else "closed by the peer"
        if self.link.connected:
            self.link.receive_connection_lost(self._now(), reason)
            log.warning(
                "peer portal [%s]: lost connection to [%s]: %s", self.name, conn.peer, reason
            )
        self._ended()

    def _pause(self, conn: _Conn, paused: bool) -> None:
        if conn is not self._conn:
            return
        self._paused = paused
        if not paused:
            self.flush()

    def _now(self) -> float:
        return asyncio.get_running_loop().time()

    def _on_timer(self) -> None:
        self.link.handle_timer(self._now())
        self._after()

    def _after(self) -> None:
        """After every input: react to the link's state, let the runtime act, write, re-arm."""
        link = self.link
        if link.up and not self._was_up:
            self._was_up = self._was_up_last = True
            self.failures = 0
            log.info(
                "peer portal [%s]: link up with DRO [%s] (node id %#x)",
                self.name, link.peer_name, link.peer_node_id or 0,
            )  # fmt: skip
        if link.udp_up and not self._udp_was_up:
            self._udp_was_up = True
            log.info(
                "peer portal [%s]: UDP data link up with [%s:%d]",
                self.name, self._peer_ip, link.udp_peer_port or 0,
            )  # fmt: skip
        if link.state is LinkState.DOWN and self._conn is not None:
            down = link.last_down
            conn = self._conn
            log.warning(
                "peer portal [%s]: lost connection to [%s]: %s",
                self.name, conn.peer, down.reason if down else "link down",
            )  # fmt: skip
            self._drop_connection(None)
            return
        if self.on_activity is not None:
            self.on_activity()
        self.flush()

    def _drop_connection(self, reason: str | None) -> None:
        conn, self._conn = self._conn, None
        if conn is not None and conn.transport is not None:
            conn.transport.close()
        if reason is not None and self.link.connected:
            self.link.receive_connection_lost(self._now(), reason)
        if conn is not None or reason is None:
            self._ended()

    def _ended(self) -> None:
        self._was_up = False
        self._udp_was_up = False
        self._gone.set()
        self._writable.set()  # wake senders: they find the link down
        if self.on_activity is not None:
            self.on_activity()
        if self._timer is not None:
            self._timer.arm(self.link.next_timer())

    # --- output -------------------------------------------------------------------------------

    def flush(self) -> None:
        """Write what the link has for the socket (the runtime calls this after sending on
        the link outside ``on_activity``), and re-arm the timer."""
        conn = self._conn
        if conn is not None and conn.transport is not None and not self._paused:
            chunks = self.link.take_bytes()
            if chunks:
                conn.transport.writelines(chunks)
        if self._udp is not None:
            self._send_datagrams()
        if self.link.writable:
            self._writable.set()
        else:
            self._writable.clear()
        if self._timer is not None:
            self._timer.arm(self.link.next_timer())

    def _send_datagrams(self) -> None:
        datagrams = self.link.take_datagrams(self._now())
        if not datagrams:
            return
        port = self.link.udp_peer_port
        udp = self._udp
        if port is None or self._peer_ip is None or udp is None or udp.is_closing():
            return
        addr = (self._peer_ip, port)
        every = self._drop_every
        for d in datagrams:
            if every and d[0] & 0x0F == ru.TYPE_DATA and not (d[2] << 8 | d[3]) & ru.FLAG_RX:
                self._data_count += 1
                if self._data_count % every == 0:
                    self.udp_injected_drops += 1
                    continue
            udp.sendto(d, addr)

    async def wait_writable(self) -> bool:
        """Wait until the link takes data (True) or is down (False)."""
        while True:
            if self.link.writable:
                return True
            if not self.link.up:
                return False
            self._writable.clear()
            await self._writable.wait()

    # --- testing and operations -----------------------------------------------------------------

    def pause_reading(self) -> None:
        """Stop reading the current connection (as a stopped process would)."""
        if self._conn is not None and self._conn.transport is not None:
            self._conn.transport.pause_reading()

    def resume_reading(self) -> None:
        if self._conn is not None and self._conn.transport is not None:
            self._conn.transport.resume_reading()

    @property
    def connected(self) -> bool:
        return self._conn is not None

    def socket_options(self) -> dict[str, int]:
        """The current connection's SO_KEEPALIVE, TCP_NODELAY, SO_RCVBUF and SO_SNDBUF (empty
        without a connection): what ``<keepalive/>``, ``<nodelay/>`` and the buffers made."""
        conn = self._conn
        sock = conn.transport.get_extra_info("socket") if conn and conn.transport else None
        if sock is None:
            return {}
        return {
            "SO_KEEPALIVE": sock.getsockopt(socket.SOL_SOCKET, socket.SO_KEEPALIVE),
            "TCP_NODELAY": sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY),
            "SO_RCVBUF": sock.getsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF),
            "SO_SNDBUF": sock.getsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF),
        }


def _reason(exc: BaseException) -> str:
    if isinstance(exc, TimeoutError):
        return "timed out"
    if isinstance(exc, OSError) and exc.strerror:
        return exc.strerror
    return str(exc) or type(exc).__name__
