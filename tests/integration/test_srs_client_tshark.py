"""tshark decodes a real Context <-> SRS session: the bytes are recorded by a TCP relay between
two Contexts and the SRS daemon, then framed with :mod:`umcore.wire.pcap` and decoded with
``-d tcp.port==N,lbmsrs``."""

from __future__ import annotations

import asyncio
import contextlib
import functools
import signal
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.integration.daemon_proc import DaemonProcess, wait_for
from tests.integration.helpers import load_configuration
from tests.integration.test_srs import srs_xml
from tests.integration.test_srs_client import BASE, Inbox, closing, send_until
from tests.oracle import Tshark
from umcore.api import Context
from umcore.config.attributes import Configuration
from umcore.wire.pcap import TcpFlow

pytestmark = pytest.mark.slow

WAIT = 15.0


class Relay:
    """A TCP relay to ``target`` recording every chunk of every connection, in order."""

    def __init__(self, target: tuple[str, int]) -> None:
        self.target = target
        # (connection index, from_client, bytes), in arrival order
        self.chunks: list[tuple[int, bool, bytes]] = []
        self.peers: list[tuple[str, int]] = []
        self.server: asyncio.Server | None = None
        self._tasks: set[asyncio.Task[None]] = set()

    async def start(self) -> tuple[str, int]:
        self.server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        host, port = self.server.sockets[0].getsockname()[:2]
        return str(host), int(port)

    async def _serve(self, r: asyncio.StreamReader, w: asyncio.StreamWriter) -> None:
        index = len(self.peers)
        peer = w.get_extra_info("peername")
        self.peers.append((str(peer[0]), int(peer[1])))
        ur, uw = await asyncio.open_connection(*self.target)

        async def pipe(
            src: asyncio.StreamReader, dst: asyncio.StreamWriter, from_client: bool
        ) -> None:
            with contextlib.suppress(ConnectionError):
                while data := await src.read(65536):
                    self.chunks.append((index, from_client, data))
                    dst.write(data)
                    await dst.drain()
            dst.close()

        tasks = [
            asyncio.create_task(pipe(r, uw, True)),
            asyncio.create_task(pipe(ur, w, False)),
        ]
        for t in tasks:
            self._tasks.add(t)
            t.add_done_callback(self._tasks.discard)
        await asyncio.gather(*tasks, return_exceptions=True)

    async def close(self) -> None:
        if self.server is not None:
            self.server.close()
        for t in list(self._tasks):
            t.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)

    def frames(self, server: tuple[str, int]) -> list[bytes]:
        flows = [TcpFlow(peer, server) for peer in self.peers]
        return [flows[i].segment(fc, data) for i, fc, data in self.chunks]


@pytest.fixture
def reset_config(reset_configuration: None) -> Callable[[str], Configuration]:
    """``reset_config(text)`` loads this process's configuration (reset after the test)."""
    return functools.partial(load_configuration, source="tshark-test")


@pytest.mark.tshark
async def test_context_srs_session_decodes_clean(
    tmp_path: Path, tshark: Tshark, reset_config: Callable[[str], None]
) -> None:
    srs = await DaemonProcess.start(
        "srs", str(srs_xml(tmp_path, extra="<source-leave-backoff>100</source-leave-backoff>"))
    )
    relay = Relay(srs.address)
    try:
        host, port = await relay.start()
        reset_config(
            BASE
            + f"context resolver_service {host}:{port}\n"
            + "context resolver_disable_udp_topic_resolution 1\n"
        )
        a = await Context.create()
        b = await Context.create()
        async with closing(a, b):
            src = await a.create_source("tshark.topic", attributes={"late_join": "1"})
            inbox, wild = Inbox(), Inbox()
            await b.create_receiver("tshark.topic", inbox)
            await b.create_wildcard_receiver("^tshark\\.", wild)
            await send_until(src, inbox, b"x", "B to receive")
            await src.close()  # SDR, then the SRS's SER to B after the back-off
            await wait_for(
                lambda: b.srs is not None and b.srs.withdrawn_events == 1,
                WAIT,
                what="the SER",
                proc=srs,
            )
            source_string = src.source_string
    finally:
        await relay.close()
        assert await srs.stop(signal.SIGINT) == 0
    frames = relay.frames(srs.address)
    decoded = tshark.decode(frames, decode_as=[f"tcp.port=={srs.address[1]},lbmsrs"])
    decoded.assert_clean()
    for i in range(len(frames)):
        assert "lbmsrs" in decoded.protocols(i), (i, decoded.protocols(i))
    assert len(decoded.values("lbmsrs.registration_response.client_id")) == 2
    topics = [t.rstrip("\x00") for t in decoded.values("lbmsrs.sir.topic")]
    # A's SIR, the SRS's copy to B, then the SER to B
    assert topics.count("tshark.topic") >= 3, topics
    assert "-1" in decoded.values("lbmsrs.sir.cost")
    assert source_string in [s.rstrip("\x00") for s in decoded.values("lbmsrs.sir.source")]
    assert [t.rstrip("\x00") for t in decoded.values("lbmsrs.rir.topic")] == ["tshark.topic"]
    assert [p.rstrip("\x00") for p in decoded.values("lbmsrs.wir.pattern")] == ["^tshark\\."]
    assert [t.rstrip("\x00") for t in decoded.values("lbmsrs.sdr.topic")] == ["tshark.topic"]
