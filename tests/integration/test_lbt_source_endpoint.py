"""The LBT source adapter (umcore.aio.lbt.LbtSourceEndpoint) on loopback sockets: its one-sendto
write path and the general path (fan-out, fault injection, connect/disconnect), and the source
timer that must not fire before its deadline as far as the core is concerned."""

from __future__ import annotations

import asyncio
import socket
import struct
from collections.abc import AsyncIterator, Iterator

import pytest

from umcore.aio.lbt import LbtContext, LbtSourceEndpoint, SourceTimer, bind_in_range
from umcore.transport.lbt import SourceConfig
from umcore.transport.lbtrm import LbtrmSource
from umcore.transport.lbtru import LbtruSource, RuSourceConfig
from umcore.transport.ratelimit import RateLimiter
from umcore.wire import lbtrm as wrm
from umcore.wire import lbtru as wru

SID = 0x0BADCAFE
WAIT = 5.0


def payload(i: int) -> bytes:
    return struct.pack("!I", i) + bytes(60)


@pytest.fixture
def peers() -> Iterator[list[socket.socket]]:
    """Two plain UDP sockets on loopback standing in for receivers."""
    socks = []
    for _ in range(2):
        s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        s.bind(("127.0.0.1", 0))
        s.setblocking(False)
        socks.append(s)
    yield socks
    for s in socks:
        s.close()


async def recv_all(sock: socket.socket, count: int) -> list[bytes]:
    """``count`` datagrams from ``sock`` (bounded wait)."""
    loop = asyncio.get_running_loop()
    out = []
    async with asyncio.timeout(WAIT):
        while len(out) < count:
            out.append(await loop.sock_recv(sock, 65536))
    return out


def drained(sock: socket.socket) -> list[bytes]:
    """Whatever is queued on ``sock`` now."""
    out = []
    while True:
        try:
            out.append(sock.recv(65536))
        except BlockingIOError:
            return out


async def settle() -> None:
    """Let loopback deliveries land (they are done inside ``sendto``; one loop turn suffices)."""
    await asyncio.sleep(0)


def lbt_context(drop_send: float = 0.0) -> LbtContext:
    loop = asyncio.get_running_loop()
    now = loop.time()
    return LbtContext(
        loop,
        RateLimiter(0, 0, 0.1, now),
        RateLimiter(0, 0, 0.01, now),
        drop_send=drop_send,
        seed=1,
    )


@pytest.fixture
async def rm_endpoint(peers: list[socket.socket]) -> AsyncIterator[LbtSourceEndpoint]:
    """An LBT-RM source endpoint whose "group" is the first peer's unicast address."""
    lctx = lbt_context()
    loop = lctx.loop
    ep = await bind_in_range("127.0.0.1", 0, 0, None, rcvbuf=None, sndbuf=None)
    core = LbtrmSource(SID, ep.local_address[1], SourceConfig(), None, loop.time())
    endpoint = LbtSourceEndpoint(lctx, core, ep)
    endpoint.group = peers[0].getsockname()
    endpoint.timer = SourceTimer(loop, endpoint.on_timer)
    yield endpoint
    await endpoint.close()


async def test_rm_data_goes_out_one_sendto_per_datagram(
    rm_endpoint: LbtSourceEndpoint, peers: list[socket.socket]
) -> None:
    core = rm_endpoint.core
    tidx = core.add_topic("t")
    rm_endpoint.write()  # the first write takes the general path and learns the destination
    assert rm_endpoint._dest == peers[0].getsockname()
    sent_before = rm_endpoint.endpoint.datagrams_sent
    for i in range(5):
        core.send(tidx, payload(i), rm_endpoint.lctx.loop.time(), flush=True)
        rm_endpoint.write()
    got = await recv_all(peers[0], 5)
    assert [wrm.decode(d).sqn for d in got] == [0, 1, 2, 3, 4]  # type: ignore[union-attr]
    assert rm_endpoint.endpoint.datagrams_sent == sent_before + 5
    assert rm_endpoint.endpoint.bytes_sent >= sum(len(d) for d in got)
    assert not core.ready


async def test_rm_outbox_goes_with_the_data(
    rm_endpoint: LbtSourceEndpoint, peers: list[socket.socket]
) -> None:
    """A retransmission queued with new data: both leave (the general path)."""
    core = rm_endpoint.core
    tidx = core.add_topic("t")
    now = rm_endpoint.lctx.loop.time()
    core.send(tidx, payload(0), now, flush=True)
    rm_endpoint.write()
    await recv_all(peers[0], 1)
    core.handle_nak([0], ("127.0.0.1", 1), now)  # a retransmission on the outbox
    core.send(tidx, payload(1), now, flush=True)
    rm_endpoint.write()
    got = [wrm.decode(d) for d in await recv_all(peers[0], 2)]
    assert sorted((r.sqn, r.retransmission) for r in got) == [(0, True), (1, False)]  # type: ignore[union-attr]


async def test_fault_injection_sees_every_datagram(peers: list[socket.socket]) -> None:
    lctx = lbt_context(drop_send=1.0)
    ep = await bind_in_range("127.0.0.1", 0, 0, None, rcvbuf=None, sndbuf=None)
    core = LbtrmSource(SID, ep.local_address[1], SourceConfig(), None, lctx.loop.time())
    endpoint = LbtSourceEndpoint(lctx, core, ep)
    endpoint.group = peers[0].getsockname()
    try:
        tidx = core.add_topic("t")
        for i in range(4):
            core.send(tidx, payload(i), lctx.loop.time(), flush=True)
            endpoint.write()
        await settle()
        assert endpoint._dest is None
        assert lctx.fault_dropped == 4 and drained(peers[0]) == []
    finally:
        await endpoint.close()


async def connect(sock: socket.socket, port: int) -> None:
    sock.sendto(wru.encode(wru.LBTRUConnectionRequest(session_id=SID)), ("127.0.0.1", port))
    (syn,) = await recv_all(sock, 1)
    sm = wru.decode(syn)
    assert isinstance(sm, wru.LBTRUSessionMessage) and sm.flags & wru.FLAG_SYN


async def test_ru_one_client_then_two_then_one(peers: list[socket.socket]) -> None:
    lctx = lbt_context()
    loop = lctx.loop
    ep = await bind_in_range("127.0.0.1", 0, 0, None, rcvbuf=None, sndbuf=None)
    core = LbtruSource(SID, RuSourceConfig(client_activity_timeout=0.2), None, loop.time())
    endpoint = LbtSourceEndpoint(lctx, core, ep)
    endpoint.timer = SourceTimer(loop, endpoint.on_timer)
    connected: list[str] = []
    gone: list[str] = []
    endpoint.on_connect = connected.append
    endpoint.on_disconnect = gone.append
    a, b = peers
    port = endpoint.port
    try:
        tidx = core.add_topic("t")

        def data(i: int) -> None:
            core.send(tidx, payload(i), loop.time(), flush=True)
            endpoint.write()

        await connect(a, port)
        assert endpoint._dest == a.getsockname() and len(connected) == 1
        data(0)
        assert [wru.decode(d).sqn for d in await recv_all(a, 1)] == [0]  # type: ignore[union-attr]

        await connect(b, port)
        assert endpoint._dest is None and len(connected) == 2  # two clients: fan-out
        data(1)
        for s in (a, b):
            assert [wru.decode(d).sqn for d in await recv_all(s, 1)] == [1]  # type: ignore[union-attr]

        # b stays silent, a keeps acknowledging: b times out and is reported gone.
        async with asyncio.timeout(WAIT):
            while not gone:
                a.sendto(wru.encode(wru.LBTRUAck(0, session_id=SID)), ("127.0.0.1", port))
                await asyncio.sleep(0.05)
        host, bport = b.getsockname()
        assert gone == [f"{host}:{bport}"]
        assert endpoint._dest == a.getsockname()
        drained(a)
        drained(b)
        data(2)
        assert [wru.decode(d).sqn for d in await recv_all(a, 1) if d[0] & 0x0F == 0] == [2]  # type: ignore[union-attr]
        await settle()
        assert [d for d in drained(b) if d[0] & 0x0F == wru.TYPE_DATA] == []
    finally:
        await endpoint.close()


async def test_early_timer_callback_sees_its_deadline(
    rm_endpoint: LbtSourceEndpoint, peers: list[socket.socket]
) -> None:
    """uvloop may run a timer up to half a millisecond before loop.time() reaches it: the core
    must be told the deadline, or it finds nothing due and the loop spins."""
    core = rm_endpoint.core
    timer = rm_endpoint.timer
    assert isinstance(timer, SourceTimer)
    due = core._sm_due
    assert due is not None
    now = rm_endpoint.lctx.loop.time()
    assert now < due  # the session message is not due yet by the loop's clock
    timer.arm(due)
    timer._fire()  # the loop runs the callback early
    assert core.lstats.sms_sent == 1 and timer.fired is None
    (sm,) = await recv_all(peers[0], 1)
    assert isinstance(wrm.decode(sm), wrm.LBTRMSessionMessage)
    assert timer.deadline is not None and timer.deadline > due  # re-armed past it
