"""Hostile replays against the shared daemon runtime (issue 22, items 6-8), daemons as
subprocesses on loopback.

- Hostile XML (an external entity, billion laughs, an external DTD) given to lbmrd, the SRS,
  umestored and the MCS: each exits 1 with one line naming the file, the line and
  ``<!DOCTYPE>``, nothing else on either stream.
- SIGHUP after the log's directory was removed: lbmrd, the SRS and umestored keep their old
  log, say so in one line on stderr, and still answer ``/metrics``.
- ``--metrics`` HTTP: 2,000 requests with an oversized header cost no traceback and a bounded
  log (one line per kind per period); 300 connections holding an incomplete header are all
  closed within :data:`~umcore.daemon.web.REQUEST_HEAD_TIMEOUT` (plus slack for a busy
  machine), while ``/metrics`` keeps being served.

Every wait is for an event, bounded in time; every loop bounded in count.
"""

from __future__ import annotations

import asyncio
import os
import re
import shutil
import signal
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from umcore.config import xmlfile
from umcore.daemon.web import CLIENT_ERROR_LOG_BURST, CLIENT_ERROR_LOG_PERIOD, REQUEST_HEAD_TIMEOUT

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[2]
WAIT = 30.0  # a cold interpreter with lxml and aiohttp on a busy 2-core machine
METRICS_LINE = re.compile(r"metrics on http://([\d.]+):(\d+)/metrics")
# How many daemon processes start at once (2 cores shared with other sessions).
PARALLEL = 3

ENTITY_XML = (
    '<?xml version="1.0"?>\n<!DOCTYPE r [\n<!ENTITY x SYSTEM "file:///etc/passwd">\n]>\n'
    "<r>&x;</r>\n",
    3,
    xmlfile.REFUSE_ENTITY,
)
LAUGHS_XML = (
    '<?xml version="1.0"?>\n<!DOCTYPE r [\n <!ENTITY l0 "lollollollol">\n'
    + "".join(f' <!ENTITY l{i} "{f"&l{i - 1};" * 10}">\n' for i in range(1, 10))
    + "]>\n<r>&l9;</r>\n",
    3,
    xmlfile.REFUSE_ENTITY,
)
EXTERNAL_DTD_XML = (
    '<?xml version="1.0"?>\n\n<!DOCTYPE r SYSTEM "http://127.0.0.1:9/x.dtd">\n<r/>\n',
    3,
    xmlfile.REFUSE_EXTERNAL_DTD,
)
DAEMONS = {"lbmrd": "lbmrd", "srs": "SRS", "umestored": "umestored", "mcs": "MCS"}


def _env() -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": str(ROOT), "PYTHONUNBUFFERED": "1"}


async def _run(args: list[str], limit: asyncio.Semaphore) -> tuple[int, str, str]:
    async with limit:
        proc = await asyncio.create_subprocess_exec(
            sys.executable, *args, cwd=ROOT, env=_env(),
            stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
        )  # fmt: skip
        try:
            async with asyncio.timeout(WAIT):
                out, err = await proc.communicate()
        finally:
            if proc.returncode is None:
                proc.kill()
                await proc.wait()
        assert proc.returncode is not None
        return proc.returncode, out.decode(errors="replace"), err.decode(errors="replace")


async def test_hostile_xml_is_one_line_and_exit_1_for_every_daemon(tmp_path: Path) -> None:
    cases = []
    for i, (text, line, message) in enumerate((ENTITY_XML, LAUGHS_XML, EXTERNAL_DTD_XML)):
        path = tmp_path / f"hostile{i}.xml"
        path.write_text(text)
        for module, prog in DAEMONS.items():
            cases.append((module, prog, path, f"{prog}: {path}:{line}: <!DOCTYPE>: {message}\n"))
    limit = asyncio.Semaphore(PARALLEL)
    results = await asyncio.gather(
        *(_run(["-m", f"daemons.{module}", str(path)], limit) for module, _, path, _ in cases)
    )
    for (module, _, path, expected), (code, out, err) in zip(cases, results, strict=True):
        assert (code, out, err) == (1, "", expected), (module, path)


# ------------------------------------------------------------------ running daemons
class Daemon:
    """One daemon as a subprocess logging to ``<tmp>/logs/<name>.log``, with ``--metrics``."""

    def __init__(self, tmp: Path, module: str) -> None:
        self.module = module
        self.logs = tmp / "logs"
        self.logs.mkdir(exist_ok=True)
        self.log_path = self.logs / f"{module}.log"
        self.stderr_path = tmp / f"{module}.stderr"
        self.args = self._args(tmp)
        self.proc: asyncio.subprocess.Process | None = None
        self.metrics: tuple[str, int] | None = None

    def _args(self, tmp: Path) -> list[str]:
        metrics = ["--metrics", "127.0.0.1:0"]
        if self.module == "lbmrd":
            return ["-i", "127.0.0.1", "-p", "0", "-L", str(self.log_path), *metrics]
        if self.module == "srs":
            cfg = tmp / "srs.xml"
            cfg.write_text(
                '<?xml version="1.0"?>\n<um-srs version="1.0">'
                f'<daemon><log type="file">{self.log_path}</log></daemon>'
                "<srs><interface>127.0.0.1</interface><port>0</port></srs></um-srs>\n"
            )
            return [*metrics, str(cfg)]
        assert self.module == "umestored"
        for d in ("cache", "state"):
            (tmp / d).mkdir(exist_ok=True)
        cfg = tmp / "store.xml"
        cfg.write_text(
            '<?xml version="1.0"?>\n<ume-store version="1.3">\n'
            f'<daemon><log type="file">{self.log_path}</log></daemon>\n<stores>\n'
            '<store name="s1" interface="127.0.0.1" port="0"><ume-attributes>'
            f'<option type="store" name="disk-cache-directory" value="{tmp / "cache"}"/>'
            f'<option type="store" name="disk-state-directory" value="{tmp / "state"}"/>'
            '</ume-attributes><topics><topic pattern="t.*" type="PCRE"><ume-attributes>'
            '<option type="store" name="repository-type" value="memory"/>'
            "</ume-attributes></topic></topics></store>\n</stores>\n</ume-store>\n"
        )
        return [*metrics, str(cfg)]

    async def start(self) -> None:
        with self.stderr_path.open("wb") as err:
            self.proc = await asyncio.create_subprocess_exec(
                sys.executable, "-m", f"daemons.{self.module}", *self.args, cwd=ROOT,
                env=_env(), stdout=asyncio.subprocess.DEVNULL, stderr=err,
            )  # fmt: skip
        await until(lambda: METRICS_LINE.search(self.log()) is not None, f"{self.module} up")
        m = METRICS_LINE.search(self.log())
        assert m is not None
        self.metrics = (m.group(1), int(m.group(2)))

    def log(self) -> str:
        try:
            return self.log_path.read_text(errors="replace")
        except FileNotFoundError:
            return ""

    def stderr(self) -> str:
        return self.stderr_path.read_text(errors="replace")

    def alive(self) -> bool:
        return self.proc is not None and self.proc.returncode is None

    async def stop(self) -> int:
        assert self.proc is not None
        if self.proc.returncode is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                async with asyncio.timeout(WAIT):
                    await self.proc.wait()
            except TimeoutError:
                self.proc.kill()
                await self.proc.wait()
        assert self.proc.returncode is not None
        return self.proc.returncode


async def until(cond: Callable[[], bool], what: str) -> None:
    """Wait for ``cond`` (polled; the daemons are other processes), at most WAIT seconds."""
    async with asyncio.timeout(WAIT):
        while not cond():
            await asyncio.sleep(0.05)  # polling interval, not synchronisation
    assert cond(), what


async def get_metrics(address: tuple[str, int]) -> bytes:
    reader, writer = await asyncio.open_connection(*address)
    try:
        writer.write(b"GET /metrics HTTP/1.1\r\nHost: h\r\nConnection: close\r\n\r\n")
        async with asyncio.timeout(WAIT):
            return await reader.read()
    finally:
        writer.close()


@pytest.mark.parametrize("module", ["lbmrd", "srs", "umestored"])
async def test_sighup_with_the_log_directory_removed_keeps_the_daemon(
    tmp_path: Path, module: str
) -> None:
    daemon = Daemon(tmp_path, module)
    await daemon.start()
    try:
        assert daemon.metrics is not None
        shutil.rmtree(daemon.logs)
        assert daemon.proc is not None
        daemon.proc.send_signal(signal.SIGHUP)
        await until(lambda: "cannot re-open the log file" in daemon.stderr(), "the failure line")
        reply = await get_metrics(daemon.metrics)
        assert reply.startswith(b"HTTP/1.1 200"), reply[:200]
        assert daemon.alive()
        # a second SIGHUP: the same, still alive
        daemon.proc.send_signal(signal.SIGHUP)
        await until(lambda: daemon.stderr().count("cannot re-open") == 2, "the second line")
        assert (await get_metrics(daemon.metrics)).startswith(b"HTTP/1.1 200")
    finally:
        code = await daemon.stop()
    err = daemon.stderr()
    expected = (
        f"umcore.daemon: cannot re-open the log file {daemon.log_path}: No such file or "
        "directory; still logging to the file already open"
    )
    lines = err.splitlines()
    assert len(lines) == 2 and all(line.endswith(expected) for line in lines), err
    assert "Traceback" not in err and "cannot listen" not in err
    assert code == 0


async def _oversized(address: tuple[str, int], count: int) -> int:
    """``count`` requests with a 16 KiB header, 20 connections at a time; the 400s seen."""
    refused = 0
    limit = asyncio.Semaphore(20)
    head = b"GET /metrics HTTP/1.1\r\nHost: h\r\nX-Big: " + b"a" * 16384 + b"\r\n\r\n"

    async def one() -> None:
        nonlocal refused
        async with limit:
            reader, writer = await asyncio.open_connection(*address)
            try:
                writer.write(head)
                async with asyncio.timeout(WAIT):
                    reply = await reader.read()
                if reply.split(b" ", 2)[1:2] == [b"400"]:
                    refused += 1
            finally:
                writer.close()

    await asyncio.gather(*(one() for _ in range(count)))
    return refused


async def test_metrics_http_under_oversized_and_slow_headers(tmp_path: Path) -> None:
    daemon = Daemon(tmp_path, "lbmrd")
    await daemon.start()
    assert daemon.metrics is not None
    try:
        log_before = len(daemon.log())
        started = time.monotonic()
        assert await _oversized(daemon.metrics, 2000) == 2000
        elapsed = time.monotonic() - started
        assert (await get_metrics(daemon.metrics)).startswith(b"HTTP/1.1 200")
        log = daemon.log()[log_before:]
        refusals = [line for line in log.splitlines() if "HTTP: refused a request" in line]
        # one kind (LineTooLong): at most a burst per period started
        periods = int(elapsed // CLIENT_ERROR_LOG_PERIOD) + 1
        assert 1 <= len(refusals) <= CLIENT_ERROR_LOG_BURST * periods, log
        assert "Traceback" not in log and "Traceback" not in daemon.stderr()
        assert len(log) < 2000 * periods, len(log)

        # 300 connections with an incomplete header: all closed by the daemon within the bound
        conns = []
        for _ in range(300):
            reader, writer = await asyncio.open_connection(*daemon.metrics)
            writer.write(b"GET /metrics HTTP/1.1\r\nHost: h\r\nX-Slow: ")
            conns.append((reader, writer))
        opened = time.monotonic()
        # /metrics keeps being served meanwhile
        assert (await get_metrics(daemon.metrics)).startswith(b"HTTP/1.1 200")

        async def closed(reader: asyncio.StreamReader) -> bytes:
            return await reader.read()

        try:
            async with asyncio.timeout(REQUEST_HEAD_TIMEOUT + 20):
                replies = await asyncio.gather(*(closed(r) for r, _ in conns))
        finally:
            for _, writer in conns:
                writer.close()
        waited = time.monotonic() - opened
        assert all(reply == b"" for reply in replies)  # closed, nothing answered
        assert waited >= REQUEST_HEAD_TIMEOUT - 1.0  # not before the bound: by the timer
        assert (await get_metrics(daemon.metrics)).startswith(b"HTTP/1.1 200")
        assert daemon.alive()
    finally:
        assert await daemon.stop() == 0
    assert "Traceback" not in daemon.log() + daemon.stderr()
