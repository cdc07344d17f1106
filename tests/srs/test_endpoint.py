"""The SRS TCP endpoint (umcore.aio.srs) in-process: TCP back-pressure holds a client's records
in the core's record queue, and every record arrives once the client reads again."""

from __future__ import annotations

import asyncio

from tests.srs.harness import sir
from umcore.aio.srs import SRSServerEndpoint
from umcore.srs.server import SRSServer
from umcore.wire import srs as rs
from umcore.wire.srs_messages import (
    INTEREST_MODE_FLOOD,
    Batch,
    RegistrationRequest,
    StreamRequest,
)

WAIT = 20.0
SOURCES = 60_000  # ~6 MB of SIRs: more than loopback socket buffers absorb
PER_PAYLOAD = 2_000


def _hello(session: int, mode: int) -> bytes:
    return (
        rs.encode(rs.Setup(1000, 60000))
        + rs.encode(
            rs.RequestResponse(
                1, RegistrationRequest("127.0.0.1", session, session, interest_mode=mode)
            )
        )
        + rs.encode(rs.RequestStream(3, StreamRequest()))
    )


async def _until(pred, what: str) -> None:  # type: ignore[no-untyped-def]
    loop = asyncio.get_running_loop()
    deadline = loop.time() + WAIT
    while not pred():
        assert loop.time() < deadline, f"timed out waiting for {what}"
        await asyncio.sleep(0.01)


async def test_a_client_that_stops_reading_is_paused_not_dropped() -> None:
    core = SRSServer()
    endpoint = SRSServerEndpoint(core)
    host, port = await endpoint.start("127.0.0.1", 0)
    writers = []
    try:
        r_rcv, w_rcv = await asyncio.open_connection(host, port)
        writers.append(w_rcv)
        w_rcv.write(_hello(2, INTEREST_MODE_FLOOD))  # every SIR, and it reads nothing yet
        _r_src, w_src = await asyncio.open_connection(host, port)
        writers.append(w_src)
        w_src.write(_hello(1, INTEREST_MODE_FLOOD))
        await _until(lambda: len(core.connected_clients()) == 2, "both registered")
        for start in range(0, SOURCES, PER_PAYLOAD):
            batch = Batch([sir(f"t/{n}", n) for n in range(start, start + PER_PAYLOAD)])
            w_src.write(rs.encode(rs.Payload(3, batch)))
            await w_src.drain()
        rcv = next(c for c in core.connected_clients() if c.session_id == 2)
        await _until(lambda: core.source_count() == SOURCES, "all sources at the SRS")
        await _until(lambda: endpoint.writes_paused >= 1 and rcv.paused, "back-pressure")
        assert rcv.queue, "records wait in the core, not in the socket buffer"
        assert endpoint.slow_dropped == 0 and core.refused.queue_overflow == 0
        decoder = rs.SRSStreamDecoder()
        got = 0
        while got < SOURCES:
            data = await asyncio.wait_for(r_rcv.read(1 << 20), WAIT)
            assert data, "connection closed"
            for frame in decoder.feed(data):
                message = getattr(frame, "message", None)
                if isinstance(message, Batch):
                    got += len(message.records)
        assert got == SOURCES
        assert not rcv.queue and not rcv.paused
    finally:
        for w in writers:
            w.close()
        await endpoint.close()
