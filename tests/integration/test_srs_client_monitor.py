"""SRS statistics and control requests end to end: the SRS daemon publishes pb statistics over UM
from its ``<lbm-attributes>`` monitoring context (multicast TR on loopback); real Contexts
connected to the SRS are counted in them; a Context receiver and ``lbmmon`` read them; control
requests are UIM requests to the monitoring context's request port."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import re
import signal
import sys
from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.integration.daemon_proc import ROOT, DaemonProcess, wait_for
from tests.integration.test_srs_client import BASE, closing
from umcore.api import Context, Message
from umcore.api import message as m
from umcore.config.attributes import Configuration, reset_global_configuration
from umcore.monitor.attributes import StatsMessage, decode_stats

pytestmark = pytest.mark.slow

WAIT = 20.0
TOPIC = "/29west/statistics"
CONTROL = re.compile(r"control requests on (TCP:[\d.]+:\d+)")


def mcast_lines(port: int) -> str:
    return (
        "context resolver_multicast_interface 127.0.0.1\n"
        "context resolver_multicast_address 224.9.10.93\n"
        f"context resolver_multicast_port {port}\n"
    )


def srs_monitor_xml(tmp: Path, mcast_port: int, *, default_ms: int) -> Path:
    """An SRS publishing pb statistics every ``default_ms`` (0: only at start and on request),
    control requests allowed, its monitoring context on multicast TR and loopback."""
    lines = (BASE + mcast_lines(mcast_port)).strip().splitlines()
    options = "".join(
        f'<option scope="{scope}" name="{name}" value="{value}"/>'
        for scope, name, value in (line.split() for line in lines)
    )
    path = tmp / "srs-mon.xml"
    path.write_text(
        f"""<?xml version="1.0" encoding="UTF-8" ?>
<um-srs version="1.0">
  <daemon><pid-file>{tmp / "srs-mon.pid"}</pid-file></daemon>
  <srs>
    <interface>127.0.0.1</interface>
    <port>0</port>
    <application-id>srs-e2e</application-id>
  </srs>
  <daemon-monitor topic="{TOPIC}">
    <lbm-attributes>{options}</lbm-attributes>
    <publishing-interval><default>{default_ms}</default></publishing-interval>
    <remote-snapshot-request allow="true"/>
    <remote-config-changes-request allow="true"/>
    <monitor-format>pb</monitor-format>
  </daemon-monitor>
</um-srs>
""",
        encoding="utf-8",
    )
    return path


@pytest.fixture
def mcast_port(unused_udp_port: int) -> Iterator[int]:
    """This process's contexts: resolver_service set per test, multicast TR on loopback."""
    yield unused_udp_port
    reset_global_configuration(None)


def load_config(srs: tuple[str, int], mport: int) -> None:
    cfg = Configuration()
    cfg.config_text(
        BASE + mcast_lines(mport) + f"context resolver_service {srs[0]}:{srs[1]}\n", "mon-test"
    )
    reset_global_configuration(cfg)


class Stats:
    """Statistics messages received by a real Context receiver on the statistics topic."""

    def __init__(self) -> None:
        self.messages: list[StatsMessage] = []
        self.bad = 0

    def __call__(self, msg: Message) -> None:
        if msg.type != m.MSG_DATA:
            return
        try:
            self.messages.append(decode_stats(msg.data))
        except Exception:
            self.bad += 1

    def srs_stats(self) -> list[Any]:
        return [
            s.message.stats.srs
            for s in self.messages
            if s.message is not None
            and s.message.HasField("stats")
            and s.message.stats.HasField("srs")
        ]

    def clients(self) -> list[Any]:
        return [
            s.message.stats.um_client
            for s in self.messages
            if s.message is not None
            and s.message.HasField("stats")
            and s.message.stats.HasField("um_client")
        ]


async def until(pred: Callable[[], object], what: str, proc: DaemonProcess) -> Any:
    return await wait_for(pred, WAIT, what=what, proc=proc)


async def test_srs_statistics_count_the_connected_contexts(tmp_path: Path, mcast_port: int) -> None:
    srs = await DaemonProcess.start(
        "srs", str(srs_monitor_xml(tmp_path, mcast_port, default_ms=300))
    )
    try:
        load_config(srs.address, mcast_port)
        # mon: on the SRS and on the monitoring TRD (multicast); x, y: SRS only.
        mon = await Context.create()
        x = await Context.create({"resolver_disable_udp_topic_resolution": "1"})
        y = await Context.create({"resolver_disable_udp_topic_resolution": "1"})
        async with closing(mon, x, y):
            stats = Stats()
            await mon.create_receiver(TOPIC, stats)
            await x.create_source("counted.a")
            await y.create_source("counted.b")
            await y.create_source("counted.c")

            def three_clients_three_sirs() -> Any:
                return [
                    s
                    for s in stats.srs_stats()
                    if s.active_clients_count == 3 and s.clients_active_sir_count == 3
                ]

            found = await until(three_clients_three_sirs, "SRS_STATS with 3 clients", srs)
            assert found[-1].clients_connects_count >= 3
            sessions = {f"0x{c.srs.core.session_id:08x}" for c in (mon, x, y)}  # type: ignore[union-attr]
            await until(
                lambda: sessions <= {c.um_client_info.session_id for c in stats.clients()},
                "UM_CLIENT_STATS of every context",
                srs,
            )
            y_sid = f"0x{y.srs.core.session_id:08x}"  # type: ignore[union-attr]
            y_stats = [c for c in stats.clients() if c.um_client_info.session_id == y_sid]
            assert y_stats[-1].client_sir_received_count == 2
            assert stats.bad == 0
            heads = {s.packet_type for s in stats.messages}
            assert heads == {10}  # SRS
            assert all(s.attributes.application_id == "srs-e2e" for s in stats.messages)
            # Live values: y leaves, the count follows.
            for s in list(y.sources):
                await s.close()
            await y.close()
            n = len(stats.srs_stats())
            await until(
                lambda: any(s.active_clients_count == 2 for s in stats.srs_stats()[n:]),
                "SRS_STATS with 2 clients",
                srs,
            )
    finally:
        assert await srs.stop(signal.SIGINT) == 0


async def test_control_requests_over_uim(tmp_path: Path, mcast_port: int) -> None:
    # default 0: periodic publishing off, so every SRS_STATS seen here is the control's doing
    srs = await DaemonProcess.start("srs", str(srs_monitor_xml(tmp_path, mcast_port, default_ms=0)))
    try:
        load_config(srs.address, mcast_port)
        match = await srs.wait_for_line(CONTROL, WAIT)
        dest = match.group(1)
        mon = await Context.create()
        async with closing(mon):
            stats = Stats()
            await mon.create_receiver(TOPIC, stats)
            replies: list[bytes] = []

            async def ask(doc: bytes) -> str:
                n = len(replies)
                req = mon.send_uim_request(dest, doc, lambda msg: replies.append(msg.data))
                try:
                    await until(lambda: len(replies) > n, f"the reply to {doc!r}", srs)
                finally:
                    req.close()
                return replies[n].decode("ascii")

            version = await ask(b'{"commandMessageType":"REPORT_SRS_VERSION"}')
            assert version.startswith("SRS Version "), version
            bad = await ask(b"not json")
            assert bad.startswith("ERROR"), bad
            assert stats.srs_stats() == []
            snap = await ask(
                json.dumps(
                    {
                        "commandMessageType": "REPORT_MONITOR_INFO",
                        "monitorInfoCategory": "SRS_STATS",
                    }
                ).encode()
            )
            assert snap == "snap SRS_STATS - OK!"
            # the snapshot was published although periodic publishing is off
            await until(lambda: len(stats.srs_stats()) == 1, "the snapshot", srs)
            await until(lambda: stats.srs_stats()[0].active_clients_count == 1, "count", srs)
            interval = await ask(
                json.dumps(
                    {
                        "commandMessageType": "SET_PUBLISHING_INTERVAL",
                        "monitorInfoCategory": "SRS_STATS",
                        "publishingInterval": 200,
                    }
                ).encode()
            )
            assert interval == "SRS_STATS 200 - OK!"
            await until(lambda: len(stats.srs_stats()) >= 4, "SRS_STATS every 200 ms", srs)
            assert not stats.clients()  # only SRS_STATS changed interval
    finally:
        assert await srs.stop(signal.SIGINT) == 0


@contextlib.asynccontextmanager
async def lbmmon_stream(*args: str) -> AsyncIterator[tuple[asyncio.subprocess.Process, list[str]]]:
    env = dict(os.environ, PYTHONUNBUFFERED="1")
    env.pop("LBM_DEFAULT_CONFIG_FILE", None)
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "umcore.tools.lbmmon", *args, cwd=ROOT, env=env,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT,
    )  # fmt: skip
    lines: list[str] = []

    async def read() -> None:
        assert proc.stdout is not None
        while line := await proc.stdout.readline():
            lines.append(line.decode(errors="replace").rstrip("\n"))

    reader = asyncio.create_task(read())
    try:
        yield proc, lines
    finally:
        if proc.returncode is None:
            proc.kill()
        await asyncio.wait_for(proc.wait(), WAIT)
        await asyncio.wait_for(reader, WAIT)


async def test_lbmmon_shows_the_srs_client_count(tmp_path: Path, mcast_port: int) -> None:
    srs = await DaemonProcess.start(
        "srs", str(srs_monitor_xml(tmp_path, mcast_port, default_ms=300))
    )
    cfg = tmp_path / "mon.cfg"
    cfg.write_text(BASE + mcast_lines(mcast_port))
    try:
        load_config(srs.address, mcast_port)
        x = await Context.create({"resolver_disable_udp_topic_resolution": "1"})
        y = await Context.create({"resolver_disable_udp_topic_resolution": "1"})
        async with closing(x, y), lbmmon_stream("-c", str(cfg), "-r", "1000") as (proc, lines):
            await until(lambda: "\t\t\tactive_clients_count = 2" in lines, "lbmmon: 2", srs)
            heads = [h for h in lines if h.startswith("SRS statistics received")]
            assert heads and all(" from srs-e2e at 127.0.0.1" in h for h in heads), heads
            await y.close()
            n = len(lines)
            await until(lambda: "\t\t\tactive_clients_count = 1" in lines[n:], "lbmmon: 1", srs)
            assert proc.returncode is None
    finally:
        assert await srs.stop(signal.SIGINT) == 0
