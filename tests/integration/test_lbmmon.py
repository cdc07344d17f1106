"""lbmmon as a subprocess: it prints the statistics a monitored context publishes and framed
daemon statistics (SRS, Store, DRO) sent on the topic; lbmrd's ``/metrics`` passes promtool."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import re
import sys
import urllib.request
from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path

import pytest

from tests.conftest import promtool_check
from tests.integration.daemon_proc import ROOT, DaemonProcess
from umcore.api import Context
from umcore.config.attributes import Configuration, reset_global_configuration
from umcore.monitor.attributes import MonAttributes, encode_stats
from umcore.monitor.framing import PacketType
from umcore.monitor.pb import dro_mon_pb2, srs_mon_pb2, ump_mon_pb2

pytestmark = pytest.mark.slow

WAIT = 30.0  # a cold interpreter start plus topic resolution on a shared 2-core machine


@pytest.fixture
def mon_cfg(unused_udp_port: int, tmp_path: Path) -> Iterator[Path]:
    """Multicast TR on loopback on a free port, as a flat file for ``lbmmon -c`` and loaded as
    this process's configuration."""
    path = tmp_path / "mon.cfg"
    path.write_text(
        "context resolver_multicast_interface 127.0.0.1\n"
        "context resolver_multicast_address 224.9.10.95\n"
        f"context resolver_multicast_port {unused_udp_port}\n"
        "context transport_tcp_port_low 0\n"
        "context transport_tcp_port_high 0\n"
        "source transport_tcp_interface 127.0.0.1\n"
    )
    cfg = Configuration()
    cfg.config_file(path)
    reset_global_configuration(cfg)
    yield path
    reset_global_configuration(None)


class Lbmmon:
    """``python -m umcore.tools.lbmmon ...`` with stdout and stderr collected."""

    def __init__(self, proc: asyncio.subprocess.Process) -> None:
        self.proc = proc
        self.stderr: list[str] = []
        self.stderr_changed = asyncio.Event()
        self._err = asyncio.create_task(self._read_stderr())
        self._out = asyncio.create_task(self._read_stdout())
        self.stdout = b""

    @classmethod
    async def start(cls, *args: str) -> Lbmmon:
        env = dict(os.environ, PYTHONUNBUFFERED="1")
        env.pop("LBM_DEFAULT_CONFIG_FILE", None)
        proc = await asyncio.create_subprocess_exec(
            sys.executable,
            "-m",
            "umcore.tools.lbmmon",
            *args,
            cwd=ROOT,
            env=env,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
        )
        return cls(proc)

    async def _read_stderr(self) -> None:
        assert self.proc.stderr is not None
        while line := await self.proc.stderr.readline():
            self.stderr.append(line.decode(errors="replace").rstrip("\n"))
            self.stderr_changed.set()
        self.stderr_changed.set()

    async def _read_stdout(self) -> None:
        assert self.proc.stdout is not None
        self.stdout = await self.proc.stdout.read()

    async def wait_stderr(self, pattern: str) -> None:
        rx = re.compile(pattern)

        async def scan() -> None:
            while not any(rx.search(line) for line in self.stderr):
                if self.proc.returncode is not None:
                    raise AssertionError(f"lbmmon exited: {self.stderr}")
                self.stderr_changed.clear()
                await self.stderr_changed.wait()

        await asyncio.wait_for(scan(), WAIT)

    async def finish(self) -> tuple[int, str]:
        """Wait (bounded) for lbmmon to exit by itself; its status and stdout."""
        rc = await asyncio.wait_for(self.proc.wait(), WAIT)
        await asyncio.wait_for(asyncio.gather(self._err, self._out), WAIT)
        return rc, self.stdout.decode()

    async def kill(self) -> None:
        if self.proc.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                self.proc.kill()
            await self.proc.wait()
        for t in (self._err, self._out):
            t.cancel()
            with contextlib.suppress(BaseException):
                await t


@contextlib.asynccontextmanager
async def lbmmon(*args: str) -> AsyncIterator[Lbmmon]:
    proc = await Lbmmon.start(*args)
    try:
        await proc.wait_stderr(r"lbmmon: receiving statistics on")
        yield proc
    finally:
        await proc.kill()


async def wait_until(cond: Callable[[], bool], what: str) -> None:
    async def poll() -> None:
        while not cond():
            await asyncio.sleep(0.02)

    try:
        await asyncio.wait_for(poll(), WAIT)
    except TimeoutError:
        raise AssertionError(f"timed out waiting for {what}") from None


def records(text: str) -> list[list[str]]:
    """lbmmon's text output split into records (each starts after a blank line)."""
    out: list[list[str]] = []
    for block in text.split("\n\n"):
        lines = [line for line in block.split("\n") if line]
        if lines:
            out.append(lines)
    return out


def fields(record: list[str]) -> dict[str, str]:
    return {
        line.split(":")[0].strip(): line.rsplit(": ", 1)[1]
        for line in record
        if line.startswith("\t")
    }


async def test_lbmmon_prints_application_statistics(mon_cfg: Path) -> None:
    app = await Context.create(
        {"monitor_interval": "1", "monitor_format": "pb", "monitor_appid": "app-under-test"}
    )
    got: list[bytes] = []
    src = await app.create_source("lbmmon/data")
    rcv = await app.create_receiver("lbmmon/data", lambda msg: got.append(msg.data))
    try:
        await wait_until(lambda: src.receivers == 1, "the receiver to join")
        n = 25
        for i in range(n):
            await src.send(b"%d" % i)
        src.flush()
        await wait_until(lambda: len([d for d in got if d]) == n, f"{n} deliveries")
        # lbmmon starts after the deliveries, so every sample it sees carries n; it exits
        # after 6 records (two full samples).
        async with lbmmon("-c", str(mon_cfg), "-r", "6") as mon:
            rc, out = await mon.finish()
    finally:
        await rcv.close()
        await src.close()
        await app.close()
    assert rc == 0, mon.stderr
    assert "lbmmon: messages=6 errors=0" in mon.stderr
    recs = records(out)
    assert len(recs) == 6
    heads = [r[0] for r in recs]
    for h in heads:
        assert " from app-under-test at 127.0.0.1" in h
        assert f", process ID={os.getpid():x}" in h
        assert f", object ID={id(app):x}" in h
    titles = [h.split(" from ")[0] for h in heads]
    assert titles.count("Context statistics received") == 2
    assert titles.count("Source statistics received") == 2
    assert titles.count("Receiver statistics received") == 2
    ctx = fields(recs[titles.index("Context statistics received")])
    assert ctx["Topics in source topic map"] == "1"
    assert ctx["Topics in receiver topic map"] == "1"
    assert ctx["Unresolved topics in receiver topic map"] == "0"
    assert int(ctx["Topic resolution datagrams sent"]) > 0
    src_rec = recs[titles.index("Source statistics received")]
    assert f"Source: {src.source_string}" in src_rec
    assert "Transport: TCP" in src_rec
    assert fields(src_rec)["Clients"] == "1"
    rcv_recs = [r for r, t in zip(recs, titles, strict=True) if t.startswith("Receiver")]
    assert all(fields(r)["LBM messages received"] == str(n) for r in rcv_recs), rcv_recs


async def test_lbmmon_prints_daemon_statistics_and_survives_garbage(mon_cfg: Path) -> None:
    ctx = await Context.create()
    src = await ctx.create_source("/29west/statistics")
    try:
        async with lbmmon("-c", str(mon_cfg), "-r", "4") as mon:
            await wait_until(lambda: src.receivers == 1, "lbmmon to join the statistics source")
            srs = srs_mon_pb2.SRSMonMsg()
            srs.stats.srs.active_clients_count = 3
            srs.stats.srs.clients_connects_count = 41
            store = ump_mon_pb2.UMPMonMsg()
            store.stats.store_idx = 2
            store.stats.src_count = 17
            dro = dro_mon_pb2.DROMonMsg()
            dro.stats.local.gateway_name = "dro-7"
            dro.stats.local.gateway_id = 99
            attrs = MonAttributes(application_id="daemon-x", sender_ipv4="127.0.0.1", timestamp=1)
            await src.send(b"\x00not an lbmmon packet")
            await src.send(encode_stats(PacketType.SRS, srs, attrs))
            await src.send(encode_stats(PacketType.UMESTORE, store, attrs))
            await src.send(encode_stats(PacketType.GATEWAY, dro, attrs))
            await src.send(
                b'{"monitorInfoCategory":"SRS_STATS",'
                b'"stats":[{"name":"active.clients.count","value":5}]}',
                flush=True,
            )
            rc, out = await mon.finish()
    finally:
        await src.close()
        await ctx.close()
    assert rc == 0
    assert "lbmmon: messages=4 errors=1" in mon.stderr
    assert any("bad statistics message" in line for line in mon.stderr)
    recs = records(out)
    assert [r[0].split(" from ")[0] for r in recs] == [
        "SRS statistics received",
        "Store statistics received",
        "Gateway statistics received",
        "JSON statistics received",
    ]
    # Nesting by TABs: a message's fields one TAB deeper than its "--- name ---" line.
    assert recs[0][1:] == [
        "\t--- stats ---",
        "\t\t--- srs ---",
        "\t\t\tactive_clients_count = 3",
        "\t\t\tclients_connects_count = 41",
    ]
    assert recs[1][1:] == ["\t--- stats ---", "\t\tstore_idx = 2", "\t\tsrc_count = 17"]
    assert "\t\t\tgateway_name = dro-7" in recs[2] and "\t\t\tgateway_id = 99" in recs[2]
    assert recs[3][1:] == [
        "\tmonitorInfoCategory = SRS_STATS",
        "\t--- stats ---",
        "\t\tactive.clients.count = 5",
    ]


async def test_lbmmon_json_lines(mon_cfg: Path) -> None:
    ctx = await Context.create()
    src = await ctx.create_source("/custom/stats")
    try:
        async with lbmmon(
            "-c", str(mon_cfg), "--topic", "/custom/stats", "--json", "-r", "1"
        ) as mon:
            await wait_until(lambda: src.receivers == 1, "lbmmon to join")
            msg = srs_mon_pb2.SRSMonMsg()
            msg.stats.srs.active_clients_count = 8
            attrs = MonAttributes(application_id="srs9", sender_ipv4="127.0.0.1", timestamp=2)
            await src.send(encode_stats(PacketType.SRS, msg, attrs), flush=True)
            rc, out = await mon.finish()
    finally:
        await src.close()
        await ctx.close()
    assert rc == 0
    lines = out.strip().splitlines()
    assert len(lines) == 1
    obj = json.loads(lines[0])
    assert obj["packetType"] == "SRS"
    assert obj["attributes"]["applicationId"] == "srs9"
    assert obj["message"]["stats"]["srs"]["activeClientsCount"] == "8"


async def test_lbmmon_refuses_bad_options(mon_cfg: Path) -> None:
    for args in (["--transport", "udp"], ["--transport-opts", "colour=blue"]):
        proc = await Lbmmon.start("-c", str(mon_cfg), *args)
        try:
            rc, _ = await proc.finish()
        finally:
            await proc.kill()
        assert rc == 1
        assert any(line.startswith("lbmmon: ") for line in proc.stderr)


async def test_lbmrd_metrics_pass_promtool(promtool: str) -> None:
    daemon = await DaemonProcess.start(
        "lbmrd", "-i", "127.0.0.1", "-p", "0", "--metrics", "127.0.0.1:0"
    )
    try:
        assert daemon.metrics is not None, daemon.all_lines()
        host, port = daemon.metrics

        def scrape() -> bytes:
            with urllib.request.urlopen(f"http://{host}:{port}/metrics", timeout=5) as resp:
                body: bytes = resp.read()
                assert resp.headers["Content-Type"].startswith("text/plain")
                return body

        body = await asyncio.to_thread(scrape)
    finally:
        await daemon.kill()
    assert b"lbmrd_" in body
    result = promtool_check(promtool, body)
    assert result.returncode == 0, (result.stdout + result.stderr).decode()


async def test_lbmmon_shows_live_srs_statistics(mon_cfg: Path, tmp_path: Path) -> None:
    """The SRS daemon publishes pb statistics over UM (``<daemon-monitor>`` with
    ``<lbm-attributes>`` on our loopback TRD); lbmmon prints them."""
    options = "".join(
        f'<option scope="{line.split()[0]}" name="{line.split()[1]}" value="{line.split()[2]}"/>'
        for line in mon_cfg.read_text().splitlines()
        if line.strip()
    )
    xml = tmp_path / "srs.xml"
    xml.write_text(
        f"""<?xml version="1.0" encoding="UTF-8" ?>
<um-srs version="1.0">
  <daemon><pid-file>{tmp_path / "srs.pid"}</pid-file></daemon>
  <srs>
    <interface>127.0.0.1</interface>
    <port>0</port>
    <application-id>srs-live</application-id>
  </srs>
  <daemon-monitor topic="/29west/statistics">
    <lbm-attributes>{options}</lbm-attributes>
    <publishing-interval><default>300</default></publishing-interval>
    <monitor-format>pb</monitor-format>
  </daemon-monitor>
</um-srs>
""",
        encoding="utf-8",
    )
    srs = await DaemonProcess.start("srs", str(xml))
    try:
        async with lbmmon("-c", str(mon_cfg), "-r", "5") as mon:
            rc, out = await mon.finish()
    finally:
        await srs.kill()
    assert rc == 0, mon.stderr
    heads = [r[0] for r in records(out)]
    assert len(heads) == 5
    assert all(" from srs-live at 127.0.0.1" in h for h in heads), heads
    assert any(h.startswith("SRS statistics received") for h in heads), heads
    srs_stats = next(r for r in records(out) if r[0].startswith("SRS statistics received"))
    assert "\t--- stats ---" in srs_stats
