"""lbmrd's client-table bound end to end in-process (issue 22 item 5): ``--max-clients`` reaches
the relay, a refused client gets no keepalive, and refusals have their own log line (the first at
once, naming the client and the bound; not mixed with the malformed-datagram warnings)."""

from __future__ import annotations

import asyncio
import logging
import re
import socket

import pytest

from daemons.lbmrd.__main__ import build_parser
from daemons.lbmrd.app import REFUSED_TABLE_FULL, serve
from tests.daemon.lbmr_samples import KEEPALIVE_RECEIVER
from umcore.config.lbmrd import LbmrdConfig
from umcore.lbmrd.core import MAX_CLIENTS

WAIT = 10.0


class _Lines(logging.Handler):
    def __init__(self) -> None:
        super().__init__()
        self.lines: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append(record.getMessage())


def test_max_clients_option() -> None:
    assert build_parser().parse_args([]).max_clients == MAX_CLIENTS
    assert build_parser().parse_args(["--max-clients", "7"]).max_clients == 7
    with pytest.raises(SystemExit):
        build_parser().parse_args(["--max-clients", "0"])


async def _until(pred, what: str) -> None:  # type: ignore[no-untyped-def]
    async with asyncio.timeout(WAIT):
        while not pred():
            await asyncio.sleep(0.01)


async def test_refused_clients_get_their_own_line_and_no_keepalive() -> None:
    lines = _Lines()
    logger = logging.getLogger("lbmrd")
    logger.addHandler(lines)
    logger.setLevel(logging.INFO)
    stopping = asyncio.Event()
    task = asyncio.create_task(
        serve(LbmrdConfig(port=0), "127.0.0.1", stopping=stopping, max_clients=2)
    )
    socks = [socket.socket(socket.AF_INET, socket.SOCK_DGRAM) for _ in range(4)]
    try:
        await _until(lambda: any("listening on" in ln for ln in lines.lines), "listening")
        listening = next(ln for ln in lines.lines if "listening on" in ln)
        assert "at most 2 clients" in listening
        port = int(re.search(r"listening on [\d.]+:(\d+)", listening).group(1))  # type: ignore[union-attr]
        for s in socks:
            s.bind(("127.0.0.1", 0))
            s.setblocking(False)
        loop = asyncio.get_running_loop()
        for s in socks[:2]:
            s.sendto(KEEPALIVE_RECEIVER, ("127.0.0.1", port))
            async with asyncio.timeout(WAIT):
                assert await loop.sock_recv(s, 64) == b"\x00\x00\x00\x00"  # answered
        for s in socks[2:]:
            for _ in range(3):
                s.sendto(KEEPALIVE_RECEIVER, ("127.0.0.1", port))
        await _until(
            lambda: any(ln.startswith(f"refused {REFUSED_TABLE_FULL}") for ln in lines.lines),
            "the refusal line",
        )
        refused = [ln for ln in lines.lines if ln.startswith(f"refused {REFUSED_TABLE_FULL}")]
        first = socks[2].getsockname()
        assert refused == [
            f"refused {REFUSED_TABLE_FULL}: {first[0]}:{first[1]}: the table holds 2 clients "
            "(--max-clients); its datagrams are dropped and it gets no keepalives; 1 since start"
        ]
        # the refused clients got nothing back (the admitted ones' periodic keepalives do come)
        for s in socks[2:]:
            with pytest.raises(BlockingIOError):
                s.recv(64)
    finally:
        stopping.set()
        await asyncio.wait_for(task, WAIT)
        logger.removeHandler(lines)
        for s in socks:
            s.close()
    assert any("clients_refused 6" in ln for ln in lines.lines if ln.startswith("stopped"))
