"""lbmrd and the SRS with their web pages, in this process, for the page and browser tests."""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import re
import socket
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

from daemons.lbmrd.app import serve as lbmrd_serve
from daemons.srs.debugmon import debug_pages
from tests.daemon.lbmr_samples import KEEPALIVE_RECEIVER
from tests.srs.harness import Net, sir
from umcore.config import lbmrd as lbmrd_config
from umcore.config.srs import SRSConfig
from umcore.srs.client import SRSClient
from umcore.srs.server import SRSServer

LBMRD_XML = """<?xml version="1.0" encoding="UTF-8" ?>
<lbmrd version="1.0">
<domains>
<domain name="loopback"><network>127.0.0.0/8</network></domain>
<domain name="far-away"><network>10.99.0.0/16</network></domain>
</domains>
<transformations>
<transform source="loopback" destination="far-away"><rule>
<match address="127.0.0.1" port="0"/><replace address="10.99.0.1" port="0"/>
</rule></transform>
</transformations>
</lbmrd>
"""
WEB_LINE = re.compile(r"(?:lbmrd web pages|debug monitor) on (http://[\d.]+:\d+)/")


class _Lines(logging.Handler):
    def __init__(self) -> None:
        super().__init__()
        self.lines: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append(record.getMessage())


@asynccontextmanager
async def lbmrd_with_pages(tmp: Path) -> AsyncIterator[tuple[str, socket.socket]]:
    """lbmrd on loopback with its web pages; yields their base URL and a UDP client socket
    that has registered itself (one keepalive) with lbmrd."""
    cfg_path = tmp / "lbmrd.xml"
    cfg_path.write_text(LBMRD_XML)
    config = dataclasses.replace(lbmrd_config.load(cfg_path), port=0)  # -p 0: a free port
    stopping = asyncio.Event()
    lines = _Lines()
    logging.getLogger("lbmrd").addHandler(lines)
    logging.getLogger("lbmrd").setLevel(logging.INFO)
    task = asyncio.create_task(
        lbmrd_serve(config, "127.0.0.1", stopping=stopping, web=("127.0.0.1", 0))
    )
    client = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    try:
        async with asyncio.timeout(10):
            while not any("listening on" in ln for ln in lines.lines):
                await asyncio.sleep(0.01)
        web = next(m.group(1) for ln in lines.lines if (m := WEB_LINE.search(ln)))
        port = int(next(re.search(r"listening on [\d.]+:(\d+)", ln).group(1)  # type: ignore[union-attr]
                        for ln in lines.lines if "listening on" in ln))  # fmt: skip
        client.bind(("127.0.0.1", 0))
        client.sendto(KEEPALIVE_RECEIVER, ("127.0.0.1", port))
        async with asyncio.timeout(10):
            while not any("new client" in ln for ln in lines.lines):
                await asyncio.sleep(0.01)
        yield web, client
    finally:
        client.close()
        stopping.set()
        await asyncio.wait_for(task, 10)
        logging.getLogger("lbmrd").removeHandler(lines)


@asynccontextmanager
async def srs_with_pages() -> AsyncIterator[str]:
    """An SRS core with a source client and a receiver client, its debug monitor on loopback."""
    addr = ("127.0.0.1", 27000)
    net = Net()
    server = net.add_server(addr, SRSServer())
    src = net.add_client(SRSClient([addr], session_id=0xA1, client_port=1))
    rcv = net.add_client(SRSClient([addr], session_id=0xB2, client_port=2))
    net.pump()
    net.clients[src].send_source(sir("orders", 1))
    net.clients[rcv].send_receiver("orders")
    net.pump()
    loop = asyncio.get_running_loop()
    pages = debug_pages(server, SRSConfig(), listening=addr, monotonic=loop.time)
    host, port = await pages.start("127.0.0.1", 0)
    try:
        yield f"http://{host}:{port}"
    finally:
        await pages.close()
