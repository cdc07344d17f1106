"""Hostile peers against a TCP source (issue 22, items 1 and 2), replayed on loopback.

- Three peers that confirm the session id and never read: under ``source_paced`` the source
  never blocks, a legitimate receiver gets everything, and a stuck peer that starts reading
  again finds a valid stream with the dropped data reported as unrecoverable loss; under
  ``normal`` (UM's default) they pace the source, which goes on once they leave.
- 300 garbage and 300 idle connections: all closed within the listener's bound
  (:data:`~umcore.transport.tcp.SESSION_ID_TIMEOUT`) and counted, while a legitimate receiver
  keeps receiving.

Every loop is bounded in count and every wait in time; ``asyncio.sleep(0)`` only yields.
"""

from __future__ import annotations

import asyncio
import logging
import random
import socket
from collections.abc import Iterator

import pytest

from umcore.aio.tcp import SourceListener
from umcore.api import Context, Message, Source
from umcore.api import message as m
from umcore.config.attributes import Configuration, reset_global_configuration
from umcore.errors import WouldBlock
from umcore.transport.tcp import (
    SESSION_ID_TIMEOUT,
    DeliveryController,
    SourceConnection,
    TcpReceiverSession,
    encode_tcp_sid,
)
from umcore.wire.lbmr import TCPInfo

pytestmark = pytest.mark.slow

TOPIC = "hostile.tcp"
WAIT = 10.0  # bound on each wait for an event (connections, deliveries, wake-ups)
# A legitimate receiver must have everything sent this long after the send finished.
LEGIT_BOUND = 10.0
# The flood's connections must all be closed this long after the last one was opened: the
# listener's bound plus slack for a loaded 2-core machine.
CLOSE_BOUND = SESSION_ID_TIMEOUT + 5.0
PAYLOAD = bytes(1000)
BULK = 30_000  # 30 MB, the measurement
YIELD_EVERY = 32  # messages between yields to the loop (the receivers run on it too)


def _configure(port: int, pacing: str) -> Configuration:
    cfg = Configuration()
    cfg.config_text(
        f"""
        context resolver_multicast_interface 127.0.0.1
        context resolver_multicast_address 224.9.10.95
        context resolver_multicast_port {port}
        context transport_tcp_port_low 0
        context transport_tcp_port_high 0
        source transport_tcp_interface 127.0.0.1
        source transport_tcp_listen_backlog 1024
        source transport_session_maximum_buffer 1048576
        source transport_tcp_multiple_receiver_behavior {pacing}
        """,
        "hostile",
    )
    reset_global_configuration(cfg)
    return cfg


@pytest.fixture
def fresh_config() -> Iterator[None]:
    yield
    reset_global_configuration(None)


class Legit:
    """A pyum receiver's view: data messages counted, loss counted, markers awaited."""

    def __init__(self) -> None:
        self.count = 0
        self.loss = 0
        self.markers: dict[bytes, asyncio.Event] = {}

    def marker(self, name: bytes) -> asyncio.Event:
        return self.markers.setdefault(name, asyncio.Event())

    def on_message(self, msg: Message) -> None:
        if msg.type == m.MSG_DATA:
            self.count += 1
            data = bytes(msg.data)
            if data in self.markers:
                self.markers[data].set()
        elif msg.type in (m.MSG_UNRECOVERABLE_LOSS, m.MSG_UNRECOVERABLE_LOSS_BURST):
            self.loss += 1


class Connects:
    """CONNECT / WAKEUP source events, awaited."""

    def __init__(self) -> None:
        self.count = 0
        self.changed = asyncio.Event()
        self.wakeup = asyncio.Event()

    def on_event(self, code: int, info: object) -> None:
        if code == m.SRC_EVENT_CONNECT:
            self.count += 1
            self.changed.set()
        elif code == m.SRC_EVENT_WAKEUP:
            self.wakeup.set()

    async def reach(self, n: int) -> None:
        async with asyncio.timeout(WAIT):
            while self.count < n:
                self.changed.clear()
                await self.changed.wait()


def _listener(src: Source) -> SourceListener:
    writer = src.session.writer
    assert isinstance(writer, SourceListener)
    return writer


def _info(src: Source) -> tuple[str, int, int]:
    """The TIR's address, port and session id."""
    info = src.transport_info
    assert isinstance(info, TCPInfo) and info.session_id is not None
    return info.ip, info.port, info.session_id


async def _setup(a: Context, b: Context, legit: Legit, ev: Connects) -> Source:
    await b.create_receiver(TOPIC, legit.on_message)
    src = await a.create_source(TOPIC, on_event=ev.on_event)
    await ev.reach(1)
    return src


async def _stuck_peer(src: Source) -> socket.socket:
    """A peer that confirms the session id and then never reads (a tiny receive window)."""
    ip, port, sid = _info(src)
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    s.setblocking(False)
    loop = asyncio.get_running_loop()
    async with asyncio.timeout(WAIT):
        await loop.sock_connect(s, (ip, port))
        await loop.sock_sendall(s, encode_tcp_sid(sid))
    return s


def _connection_of(src: Source, s: socket.socket) -> SourceConnection:
    """The source's connection core for the peer socket ``s``."""
    want = s.getsockname()
    for c in _listener(src).peers.connections():
        if c.handle is not None and c.handle.get_extra_info("peername") == want:
            conn: SourceConnection = c
            return conn
    raise AssertionError("the peer's connection is not confirmed")


async def _send_bulk(src: Source, n: int) -> bool:
    """Send ``n`` messages without blocking; True if the source refused one (WouldBlock)."""
    for i in range(n):
        try:
            src.send_nowait(PAYLOAD)
        except WouldBlock:
            return True
        if i % YIELD_EVERY == YIELD_EVERY - 1:
            await asyncio.sleep(0)  # a yield: the receivers run on this loop
    return False


async def test_source_paced_peers_that_never_read_cannot_hold_the_source(
    unused_udp_port: int, fresh_config: None
) -> None:
    _configure(unused_udp_port, "source_paced")
    legit, ev = Legit(), Connects()
    async with await Context.create() as a, await Context.create() as b:
        src = await _setup(a, b, legit, ev)
        stuck = [await _stuck_peer(src) for _ in range(3)]
        try:
            await ev.reach(4)
            listener = _listener(src)
            blocked = await _send_bulk(src, BULK)
            assert not blocked and a.send_would_block == 0  # the source never waited
            src.send_nowait(b"end", flush=True)
            async with asyncio.timeout(LEGIT_BOUND):
                await legit.marker(b"end").wait()
            assert legit.count == BULK + 1 and legit.loss == 0
            stats = listener.peers.stats
            assert stats.lossy_episodes >= 3 and stats.dropped_chunks > 0
            # One stuck peer reads again: whole frames were dropped, so its stream is valid
            # LBMC and the gap is UM's unrecoverable loss; data flows to it again.
            await _drain_and_check(src, stuck[0])
        finally:
            for s in stuck:
                s.close()


async def _drain_and_check(src: Source, s: socket.socket) -> None:
    conn = _connection_of(src, s)
    assert conn.lossy and conn.dropped_chunks > 0
    loop = asyncio.get_running_loop()
    rcv = TcpReceiverSession(_info(src)[2])
    data: list[bytes] = []
    loss: list[tuple[str, int, int]] = []
    rcv.subscribe(
        DeliveryController(
            src.tidx,
            TOPIC,
            lambda sqn, p: data.append(bytes(p)),
            lambda kind, sqn, n: loss.append((kind, sqn, n)),
        )
    )
    tail_sent = False
    async with asyncio.timeout(WAIT * 2):
        for _ in range(100_000):  # reads; far more than 35 MB needs
            if not tail_sent and not conn.lossy:
                src.send_nowait(b"tail", flush=True)
                tail_sent = True
            chunk = await loop.sock_recv(s, 1 << 16)
            assert chunk, "the source closed a peer that only read slowly"
            rcv.receive_data(chunk)  # TransportError here would be a corrupted stream
            if data and data[-1] == b"tail":
                break
        else:
            raise AssertionError("the tail never came")
    assert loss, "dropped data must show as unrecoverable loss"
    assert len(data) < BULK + 2


async def test_normal_peers_that_confirm_the_session_id_pace_the_source(
    unused_udp_port: int, fresh_config: None
) -> None:
    _configure(unused_udp_port, "normal")
    legit, ev = Legit(), Connects()
    async with await Context.create() as a, await Context.create() as b:
        src = await _setup(a, b, legit, ev)
        stuck = [await _stuck_peer(src) for _ in range(3)]
        try:
            await ev.reach(4)
            # As in UM: any peer that confirms the session id paces a receiver-paced source.
            assert await _send_bulk(src, BULK), "the stuck peers never paced the source"
            assert _listener(src).blocked and a.send_would_block == 1
        finally:
            for s in stuck:
                s.close()  # they leave: the source goes on
        async with asyncio.timeout(WAIT):
            await ev.wakeup.wait()
        assert not _listener(src).blocked and src.receivers == 1
        src.send_nowait(b"end", flush=True)
        async with asyncio.timeout(LEGIT_BOUND):
            await legit.marker(b"end").wait()
        assert legit.loss == 0


async def _flood_connection(
    host: str, port: int, payload: bytes | None, gate: asyncio.Semaphore
) -> socket.socket:
    loop = asyncio.get_running_loop()
    async with gate:
        s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        s.setblocking(False)
        async with asyncio.timeout(WAIT):
            await loop.sock_connect(s, (host, port))
            if payload:
                await loop.sock_sendall(s, payload)
    return s


async def _closed_by_peer(s: socket.socket) -> None:
    """Wait until the source closed ``s`` (FIN or RST); what it sends before is read."""
    loop = asyncio.get_running_loop()
    for _ in range(1000):
        try:
            if not await loop.sock_recv(s, 4096):
                return
        except ConnectionError:
            return
    raise AssertionError("the source kept writing to a flood connection")


def _garbage(rng: random.Random, i: int) -> bytes:
    kind = i % 3
    if kind == 0:  # random bytes
        return rng.randbytes(rng.randint(1, 300))
    if kind == 1:  # an LBMC-looking header claiming a long frame
        return bytes([0, 0, 0xFF, 0xFF]) + rng.randbytes(rng.randint(0, 40))
    return b"GET / HTTP/1.1\r\nHost: pyum\r\n\r\n"  # another protocol


async def test_garbage_and_idle_connections_are_closed_in_bounded_time_and_counted(
    unused_udp_port: int, fresh_config: None, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="umcore.aio.tcp")
    _configure(unused_udp_port, "normal")
    legit, ev = Legit(), Connects()
    rng = random.Random(22)
    async with await Context.create() as a, await Context.create() as b:
        src = await _setup(a, b, legit, ev)
        ip, port, _ = _info(src)
        peers = _listener(src).peers
        gate = asyncio.Semaphore(64)
        loop = asyncio.get_running_loop()
        flood = [_flood_connection(ip, port, _garbage(rng, i), gate) for i in range(300)]
        flood += [_flood_connection(ip, port, None, gate) for _ in range(300)]
        socks = await asyncio.gather(*flood)
        opened = loop.time()
        try:
            # The legitimate receiver keeps receiving during the flood.
            for i in range(100):
                src.send_nowait(b"during %d" % i)
            src.send_nowait(b"during", flush=True)
            async with asyncio.timeout(LEGIT_BOUND):
                await legit.marker(b"during").wait()
            async with asyncio.timeout(CLOSE_BOUND):
                await asyncio.gather(*(_closed_by_peer(s) for s in socks))
            assert loop.time() - opened <= CLOSE_BOUND
        finally:
            for s in socks:
                s.close()
        st = peers.stats
        assert st.garbage + st.timed_out + st.evicted == 600 and st.stale == 0
        assert st.timed_out >= 300  # every idle one (and garbage waiting for more bytes)
        assert peers.waiting == 0 and src.receivers == 1 and ev.count == 1
        src.send_nowait(b"after", flush=True)
        async with asyncio.timeout(LEGIT_BOUND):
            await legit.marker(b"after").wait()
        assert legit.count == 102 and legit.loss == 0
    # One log line per kind of refusal (garbage, timeout), naming a peer; the rest held back.
    lines = [r.getMessage() for r in caplog.records if r.name == "umcore.aio.tcp"]
    assert len(lines) == 2, lines
    assert all("receiver 127.0.0.1:" in line for line in lines)
