"""The request port's fast path (``on_frame``): each whole frame is offered to it undecoded, in
order with the decoded messages of the same read; what it takes is not decoded; a bad frame or a
refusal costs the peer its connection, after what came before it was handled."""

from __future__ import annotations

import asyncio
import os

from tests.api.conftest import WAIT
from umcore.aio.request_port import RequestPort
from umcore.errors import RemoteProtocolError
from umcore.store import compose
from umcore.wire import lbmc


class Port:
    def __init__(self) -> None:
        self.got: list[tuple[str, object]] = []
        self.changed = asyncio.Event()
        self.port = RequestPort(self._on_message, ctxinst=os.urandom(8), on_frame=self._on_frame)

    def _on_frame(self, frame: bytes, peer_ip: str) -> bool:
        if frame == REFUSED:
            raise RemoteProtocolError("refused by the fast path")
        fields = compose.parse_stability(frame)
        if fields is None:
            return False
        self.got.append(("fast", fields))
        self.changed.set()
        return True

    def _on_message(self, msg: lbmc.LBMCMessage, peer_ip: str) -> None:
        self.got.append(("msg", compose.decode(msg)))
        self.changed.set()

    async def wait_for(self, n: int) -> None:
        async with asyncio.timeout(WAIT):
            while len(self.got) < n:
                self.changed.clear()
                await self.changed.wait()


ACK1 = compose.StabilityAck(1, 2, 5, 5, store_index=0)
ACKR = compose.StabilityAck(1, 2, 6, 9, store_index=1, nak=True)
KA = compose.Keepalive(lbmc.KA_TYPE_STORE, 1, 2, 77, store_index=0)
CACK = compose.ConsumptionAck(1, 2, 3, 4)
REFUSED = compose.StabilityAck(9, 9, 9, 9).encode()
BAD = b"\x08\x14\x00\x08\xff\x00\x00\x00"  # framed, but its UME_ACK header's length is 0


def fields(ack: compose.StabilityAck) -> tuple[int, int, int, int, int, bool]:
    return (ack.transport_idx, ack.topic_idx, ack.first, ack.last, ack.store_index, ack.nak)


async def test_frames_in_order_fast_ones_not_decoded() -> None:
    p = Port()
    await p.port.start("127.0.0.1", 0, 0)
    try:
        _, w = await asyncio.open_connection("127.0.0.1", p.port.port)
        # one write: one read (or a few) holding five frames, the last one split
        data = b"".join(x.encode() for x in (KA, ACK1, CACK, ACKR, ACK1))
        w.write(data[:-7])
        await w.drain()
        await p.wait_for(4)
        w.write(data[-7:])
        await p.wait_for(5)
        assert p.got == [
            ("msg", KA), ("fast", fields(ACK1)), ("msg", CACK), ("fast", fields(ACKR)),
            ("fast", fields(ACK1)),
        ]  # fmt: skip
        assert p.port.bad_connections == 0
        w.close()
    finally:
        await p.port.close()


async def test_a_bad_frame_or_a_refusal_costs_the_connection_after_what_came_before() -> None:
    p = Port()
    await p.port.start("127.0.0.1", 0, 0)
    try:
        for n, tail in enumerate((BAD, REFUSED), start=1):
            r, w = await asyncio.open_connection("127.0.0.1", p.port.port)
            w.write(ACK1.encode() + KA.encode() + tail + ACKR.encode())
            async with asyncio.timeout(WAIT):
                assert await r.read() == b""  # the port closed the connection
            assert p.got[-2:] == [("fast", fields(ACK1)), ("msg", KA)]
            assert len(p.got) == 2 * n  # nothing after the bad frame
            assert p.port.bad_connections == n
            w.close()
    finally:
        await p.port.close()
