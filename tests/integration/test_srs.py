"""The SRS daemon as a subprocess, with contexts played by the client core over real TCP."""

from __future__ import annotations

import asyncio
import signal
import struct
from pathlib import Path

import pytest

from tests.integration.daemon_proc import DaemonProcess, wait_for
from umcore.aio.srs import SRSClientConnector
from umcore.monitor.attributes import decode_stats
from umcore.srs.client import SourceWithdrawn, SRSClient
from umcore.wire.srs_messages import SourceInfo

WAIT = 10.0


def srs_xml(
    tmp: Path, name: str = "srs.xml", *, port: int = 0, extra: str = "", mon: str = ""
) -> Path:
    path = tmp / name
    path.write_text(
        f"""<?xml version="1.0" encoding="UTF-8" ?>
<um-srs version="1.0">
  <daemon><pid-file>{tmp / (name + ".pid")}</pid-file></daemon>
  <srs>
    <interface>127.0.0.1</interface>
    <port>{port}</port>
    {extra}
  </srs>
  {mon}
</um-srs>
""",
        encoding="utf-8",
    )
    return path


def sir(topic: str, n: int) -> SourceInfo:
    return SourceInfo(n.to_bytes(4, "big") + bytes(28), topic, f"TCP:127.0.0.1:{14000 + n}:{n:08x}")


class Ctx:
    """A context's SRS side: client core + asyncio connector, with every event kept."""

    def __init__(self, servers: list[tuple[str, int]], session_id: int, **kw: float) -> None:
        kw.setdefault("reconnect_min", 0.05)
        kw.setdefault("reconnect_max", 0.3)
        kw.setdefault("keepalive_interval", 0.5)
        kw.setdefault("max_lifetime", 3.0)
        self.core = SRSClient(
            servers,
            client_addr="127.0.0.1",
            client_port=20000 + session_id,
            session_id=session_id,
            **kw,  # type: ignore[arg-type]
        )
        self.events: list[object] = []
        self.conn = SRSClientConnector(self.core, on_events=self.events.extend)

    def start(self) -> Ctx:
        self.conn.start()
        return self

    def do(self, fn, *args) -> None:  # type: ignore[no-untyped-def]
        fn(*args)
        self.conn.flush()

    def topics(self) -> set[str]:
        return {r.topic for r in self.core.resolved()}

    def withdrawn(self) -> list[str]:
        return [e.record.topic for e in self.events if isinstance(e, SourceWithdrawn)]


async def start_srs(tmp: Path, name: str = "srs.xml", **kw: object) -> DaemonProcess:
    return await DaemonProcess.start("srs", str(srs_xml(tmp, name, **kw)))  # type: ignore[arg-type]


async def test_receiver_started_after_source_resolves_it(tmp_path: Path) -> None:
    srs = await start_srs(tmp_path)
    a = b = None
    try:
        a = Ctx([srs.address], 1).start()
        a.do(a.core.send_source, sir("late.topic", 1))
        await wait_for(lambda: a.core.registered_slots(), WAIT, what="A registered", proc=srs)
        await asyncio.sleep(0)  # A's SIR is written in the same flush as its state
        b = Ctx([srs.address], 2).start()
        b.do(b.core.send_receiver, "late.topic")
        await wait_for(lambda: "late.topic" in b.topics(), WAIT, what="B resolves", proc=srs)
        assert a.topics() == set()  # nobody else advertises
    finally:
        for c in (a, b):
            if c is not None:
                await c.conn.close()
        assert await srs.stop(signal.SIGINT) == 0


async def test_stopped_source_is_withdrawn_after_the_lifetimes(tmp_path: Path) -> None:
    extra = "<source-state-lifetime>1</source-state-lifetime><source-leave-backoff>100</source-leave-backoff>"
    srs = await start_srs(tmp_path, extra=extra)
    a = Ctx([srs.address], 1).start()
    b = Ctx([srs.address], 2).start()
    try:
        b.do(b.core.send_receiver, "T")
        a.do(a.core.send_source, sir("T", 1))
        await wait_for(lambda: "T" in b.topics(), WAIT, what="B resolves", proc=srs)
        await a.conn.close()  # the source's context dies: no SDR
        await wait_for(lambda: b.withdrawn() == ["T"], WAIT, what="SER after lifetime", proc=srs)
        await srs.wait_for_line("TCP Disconnect received for client", WAIT)
    finally:
        await b.conn.close()
        await a.conn.close()
        assert await srs.stop(signal.SIGINT) == 0


async def test_two_srs_one_killed_resolution_keeps_working(tmp_path: Path) -> None:
    one = await start_srs(tmp_path, "one.xml")
    two = await start_srs(tmp_path, "two.xml")
    servers = [one.address, two.address]
    ctxs = [Ctx(servers, i).start() for i in (1, 2, 3)]
    a, b, c = ctxs
    try:
        a.do(a.core.send_source, sir("T", 1))
        b.do(b.core.send_receiver, "T")
        await wait_for(
            lambda: len(b.core.registered_slots()) == 2 and "T" in b.topics(),
            WAIT,
            what="B resolves via both",
        )
        await one.kill()  # SIGKILL: no goodbye
        a.do(a.core.send_source, sir("U", 2))
        c.do(c.core.send_receiver, "U")
        await wait_for(
            lambda: "U" in c.topics(), WAIT, what="C resolves via the survivor", proc=two
        )
        assert b.withdrawn() == []
        assert "T" in b.topics()
    finally:
        for x in ctxs:
            await x.conn.close()
        await one.kill()
        assert await two.stop(signal.SIGINT) == 0


async def test_srs_restart_clients_recover_unaided(tmp_path: Path) -> None:
    first = await start_srs(tmp_path)
    port = first.address[1]
    a = Ctx([first.address], 1).start()
    b = Ctx([first.address], 2, resync_grace=30.0).start()
    srs: DaemonProcess | None = None
    try:
        for i in range(50):
            a.core.send_source(sir(f"T{i}", i))
            b.core.send_receiver(f"T{i}")
        a.conn.flush()
        b.conn.flush()
        await wait_for(lambda: len(b.topics()) == 50, WAIT, what="50 resolved", proc=first)
        assert await first.stop(signal.SIGINT) == 0
        await wait_for(lambda: not b.core.registered_slots(), WAIT, what="B notices")
        srs = await start_srs(tmp_path, "again.xml", port=port)
        await wait_for(
            lambda: a.core.registered_slots() and b.core.registered_slots(),
            WAIT,
            what="both re-register",
            proc=srs,
        )
        # new state after the restart, nobody restarted: a new source and a new receiver
        a.do(a.core.send_source, sir("NEW", 99))
        b.do(b.core.send_receiver, "NEW")
        await wait_for(lambda: "NEW" in b.topics(), WAIT, what="B resolves NEW", proc=srs)
        assert b.withdrawn() == []
        assert len(b.topics()) == 51
    finally:
        await a.conn.close()
        await b.conn.close()
        await first.kill()
        if srs is not None:
            assert await srs.stop(signal.SIGINT) == 0


async def test_sigint_exits_zero_and_pid_file_appears(tmp_path: Path) -> None:
    srs = await start_srs(tmp_path)
    pid_file = tmp_path / "srs.xml.pid"
    await wait_for(pid_file.exists, WAIT, what="pid file", proc=srs)
    assert int(pid_file.read_text().strip()) == srs.proc.pid
    assert await srs.stop(signal.SIGINT) == 0
    assert not pid_file.exists()
    # the listener is closed
    with pytest.raises(OSError):
        _r, w = await asyncio.open_connection(*srs.address)
        w.close()


async def test_statistics_published_in_pb_carry_the_srs_values(tmp_path: Path) -> None:
    mon = """<daemon-monitor topic="/29west/statistics">
    <publishing-interval><default>300</default></publishing-interval>
    <publish-connection-events allow="true"/>
    <monitor-format>pb</monitor-format></daemon-monitor>"""
    out = tmp_path / "stats.bin"
    path = srs_xml(tmp_path, mon=mon, extra="<application-id>srs-test</application-id>")
    srs = await DaemonProcess.start("srs", "--monitor-file", str(out), str(path))
    a = Ctx([srs.address], 7).start()
    try:
        a.do(a.core.send_source, sir("T", 1))

        def stats() -> list[object]:
            data = out.read_bytes() if out.exists() else b""
            msgs, pos = [], 0
            while pos + 4 <= len(data):
                (n,) = struct.unpack_from("!I", data, pos)
                if pos + 4 + n > len(data):
                    break
                msgs.append(decode_stats(data[pos + 4 : pos + 4 + n]))
                pos += 4 + n
            return msgs

        def srs_stats_with_client() -> object:
            for m in stats():
                pb = m.message  # type: ignore[attr-defined]
                if (
                    pb.HasField("stats")
                    and pb.stats.HasField("srs")
                    and (
                        pb.stats.srs.active_clients_count == 1
                        and pb.stats.srs.clients_active_sir_count == 1
                    )
                ):
                    return m
            return None

        found = await wait_for(srs_stats_with_client, WAIT, what="SRS_STATS", proc=srs)
        assert found.packet_type == 10  # type: ignore[attr-defined]
        assert found.attributes.application_id == "srs-test"  # type: ignore[attr-defined]
        kinds = set()
        for m in stats():
            pb = m.message  # type: ignore[attr-defined]
            if pb.HasField("stats") and pb.stats.HasField("um_client"):
                assert pb.stats.um_client.um_client_info.session_id == "0x00000007"
                assert pb.stats.um_client.client_sir_received_count == 1
            if pb.HasField("events") and pb.events.HasField("um_client_connect"):
                kinds.add("connect-event")
        assert "connect-event" in kinds
        assert any(m.message.HasField("configs") for m in stats())  # type: ignore[attr-defined]
    finally:
        await a.conn.close()
        assert await srs.stop(signal.SIGINT) == 0


async def test_metrics_endpoint(tmp_path: Path) -> None:
    import shutil
    import subprocess

    srs = await DaemonProcess.start("srs", "--metrics", "127.0.0.1:0", str(srs_xml(tmp_path)))
    a = Ctx([srs.address], 1).start()
    try:
        await wait_for(lambda: a.core.registered_slots(), WAIT, what="registered", proc=srs)
        assert srs.metrics is not None
        r, w = await asyncio.open_connection(*srs.metrics)
        w.write(b"GET /metrics HTTP/1.0\r\nHost: x\r\n\r\n")
        body = (await asyncio.wait_for(r.read(), WAIT)).decode()
        w.close()
        assert "pyum_srs_active_clients 1.0" in body
        assert "pyum_srs_clients_connects_total 1.0" in body
        promtool = shutil.which("promtool")
        if promtool:
            text = body.split("\r\n\r\n", 1)[1]
            res = subprocess.run(
                [promtool, "check", "metrics"], input=text.encode(), capture_output=True, timeout=30
            )
            assert res.returncode == 0, res.stdout + res.stderr
    finally:
        await a.conn.close()
        assert await srs.stop(signal.SIGINT) == 0


async def _http_get(address: tuple[str, int], path: str) -> tuple[int, str, str]:
    """(status, content type, body) of a GET over plain HTTP/1.0."""
    r, w = await asyncio.open_connection(*address)
    try:
        w.write(f"GET {path} HTTP/1.0\r\nHost: x\r\n\r\n".encode())
        raw = (await asyncio.wait_for(r.read(), WAIT)).decode()
    finally:
        w.close()
    head, body = raw.split("\r\n\r\n", 1)
    status = int(head.split(" ", 2)[1])
    ctype = next(
        (
            ln.split(":", 1)[1].strip()
            for ln in head.split("\r\n")
            if ln.lower().startswith("content-type:")
        ),
        "",
    )
    return status, ctype, body


async def test_debug_monitor_pages_show_the_connected_client(tmp_path: Path) -> None:
    import json
    import re

    debug = """<debug-monitor><interface>127.0.0.1</interface><port>0</port>
    <ping-interval>5000</ping-interval><enabled>true</enabled></debug-monitor>"""
    srs = await start_srs(tmp_path, mon=debug)
    a = Ctx([srs.address], 0x5EED).start()
    b = Ctx([srs.address], 0x0B0B).start()
    try:
        m = await srs.wait_for_line(re.compile(r"debug monitor on http://([\d.]+):(\d+)/"), WAIT)
        address = (m.group(1), int(m.group(2)))
        assert address[1] != 0
        a.do(a.core.send_source, sir("debug<&>topic", 1))
        b.do(b.core.send_receiver, "debug<&>topic")
        await wait_for(lambda: "debug<&>topic" in b.topics(), WAIT, what="B resolves", proc=srs)
        status, ctype, page = await _http_get(address, "/")
        assert status == 200 and ctype.startswith("text/html")
        assert "0x00005eed" in page and "0x00000b0b" in page
        assert "debug&lt;&amp;&gt;topic" in page and "debug<&>topic" not in page  # escaped
        assert f"127.0.0.1:{srs.address[1]}" in page
        status, ctype, body = await _http_get(address, "/json")
        assert status == 200 and ctype.startswith("application/json")
        data = json.loads(body)
        sessions = {c["session_id"]: c for c in data["clients"]["shown"]}
        assert set(sessions) == {"0x00005eed", "0x00000b0b"}
        assert sessions["0x00005eed"]["sources"] == 1
        assert sessions["0x00000b0b"]["receiver_topics"] == 1
        assert sessions["0x00000b0b"]["sir_sent"] == 1
        assert data["srs_stats"]["active_clients_count"] == 2
        assert data["topics"] == {
            "total": 1,
            "shown": [{"topic": "debug<&>topic", "sources": 1, "interested": 1}],
            "more": 0,
        }
        assert data["listening"] == {"ip": "127.0.0.1", "port": srs.address[1]}
        assert data["ping_interval_ms"] == 5000
    finally:
        await a.conn.close()
        await b.conn.close()
        assert await srs.stop(signal.SIGINT) == 0


async def test_debug_monitor_is_off_by_default(tmp_path: Path) -> None:
    srs = await start_srs(tmp_path)
    try:
        assert not any("debug monitor" in line for line in srs.all_lines())
    finally:
        assert await srs.stop(signal.SIGINT) == 0
