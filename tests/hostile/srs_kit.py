"""What the hostile SRS replays share: the SRS daemon as a subprocess (log to a file, never a
pipe that could fill and stall it), its resident memory (psutil), and a raw RSocket client that
can register from a chosen loopback address (127.0.0.0/8 is all loopback on Linux: distinct
addresses are distinct *hosts* to the SRS's per-host quota)."""

from __future__ import annotations

import asyncio
import os
import re
import socket
import sys
from collections.abc import Callable
from pathlib import Path

import psutil

from tests.srs.harness import sir
from umcore.wire import srs as rs
from umcore.wire.srs_messages import Batch, ReceiverInfo, RegistrationRequest, StreamRequest

ROOT = Path(__file__).resolve().parents[2]
WAIT = 10.0  # bound on every wait for an event
PORT_LINE = re.compile(r"SRS Server IP address: [\d.]+ port: (\d+)")


class SRSProcess:
    """``python -m daemons.srs cfg.xml`` with ``<pyum-limits>`` from ``limits``."""

    def __init__(self, tmp: Path, limits: dict[str, int]) -> None:
        self.log_path = tmp / "srs.log"
        body = "".join(f"<{k}>{v}</{k}>" for k, v in limits.items())
        cfg = tmp / "srs.xml"
        cfg.write_text(
            '<?xml version="1.0" encoding="UTF-8" ?>\n<um-srs version="1.0">'
            f'<daemon><log type="file">{self.log_path}</log></daemon>'
            f"<srs><interface>127.0.0.1</interface><port>0</port>"
            f"<pyum-limits>{body}</pyum-limits></srs></um-srs>\n"
        )
        self.cfg = cfg
        self.proc: asyncio.subprocess.Process | None = None
        self.port = 0

    async def start(self) -> None:
        self.proc = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "daemons.srs", str(self.cfg),
            cwd=ROOT, stdout=asyncio.subprocess.DEVNULL, stderr=asyncio.subprocess.DEVNULL,
            env={**os.environ, "PYTHONPATH": str(ROOT)},
        )  # fmt: skip
        await until(lambda: PORT_LINE.search(self.log()) is not None, "the SRS listening")
        m = PORT_LINE.search(self.log())
        assert m is not None
        self.port = int(m.group(1))

    def log(self) -> str:
        try:
            return self.log_path.read_text()
        except FileNotFoundError:
            return ""

    def lines(self, prefix: str) -> list[str]:
        """Log lines whose message starts with ``prefix`` (after 'SRS: ')."""
        return [ln for ln in self.log().splitlines() if f"SRS: {prefix}" in ln]

    def rss(self) -> int:
        assert self.proc is not None
        return int(psutil.Process(self.proc.pid).memory_info().rss)

    @property
    def alive(self) -> bool:
        return self.proc is not None and self.proc.returncode is None

    async def stop(self) -> int:
        assert self.proc is not None
        if self.proc.returncode is None:
            self.proc.terminate()
        return await asyncio.wait_for(self.proc.wait(), WAIT)


async def until(pred: Callable[[], bool], what: str, timeout: float = WAIT) -> float:
    """Wait (polling) for ``pred``; returns the seconds it took; fails after ``timeout``."""
    loop = asyncio.get_running_loop()
    start = loop.time()
    async with asyncio.timeout(timeout):
        while not pred():
            await asyncio.sleep(0.02)
    return loop.time() - start


class RawClient:
    """An SRS client speaking raw frames: registers, opens its stream, sends SIRs/RIRs, and
    records the topics of the SIRs the SRS sends it."""

    def __init__(self, srs: SRSProcess, host: str, session: int) -> None:
        self.srs = srs
        self.host = host
        self.session = session
        self.reader: asyncio.StreamReader | None = None
        self.writer: asyncio.StreamWriter | None = None
        self.topics: set[str] = set()
        self.closed = asyncio.Event()
        self.errors: list[int] = []
        self._task: asyncio.Task[None] | None = None

    async def connect(self, *, register: bool = True) -> RawClient:
        self.reader, self.writer = await asyncio.open_connection(
            "127.0.0.1", self.srs.port, local_addr=(self.host, 0)
        )
        self._task = asyncio.create_task(self._read())
        if register:
            req = RegistrationRequest(self.host, self.session & 0xFFFF, self.session)
            self.send(
                rs.encode(rs.Setup(1000, 60_000))
                + rs.encode(rs.RequestResponse(1, req))
                + rs.encode(rs.RequestStream(3, StreamRequest()))
            )
        return self

    def send(self, data: bytes) -> None:
        assert self.writer is not None
        if not self.writer.is_closing():
            self.writer.write(data)

    def send_sirs(self, topics: list[str], first_n: int) -> None:
        batch = Batch([sir(t, first_n + i) for i, t in enumerate(topics)])
        self.send(rs.encode(rs.Payload(3, batch)))

    def send_rir(self, topic: str) -> None:
        self.send(rs.encode(rs.Payload(3, Batch([ReceiverInfo(topic)]))))

    async def _read(self) -> None:
        assert self.reader is not None
        decoder = rs.SRSStreamDecoder()
        try:
            while data := await self.reader.read(65536):
                for frame in decoder.feed(data):
                    if isinstance(frame, rs.Error):
                        self.errors.append(frame.code)
                    message = getattr(frame, "message", None)
                    if isinstance(message, Batch):
                        for rec in message.records:
                            topic = getattr(rec, "topic", None)
                            if topic is not None:
                                self.topics.add(topic)
        except (OSError, rs.SRSError):
            pass
        finally:
            self.closed.set()

    async def close(self) -> None:
        if self.writer is not None:
            self.writer.close()
        if self._task is not None:
            await asyncio.wait_for(self._task, WAIT)


def loopback_hosts_work() -> bool:
    """127.0.0.2 etc. can be bound (Linux: the whole 127/8 is local)."""
    s = socket.socket()
    try:
        s.bind(("127.0.0.2", 0))
        return True
    except OSError:
        return False
    finally:
        s.close()
