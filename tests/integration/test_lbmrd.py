"""lbmrd as a subprocess on loopback: relay, keepalives, expiry, NAT, signals, pid file, logs,
metrics and a flood of random datagrams (acceptance checks 22-27 of seed-srs-lbmrd.md)."""

from __future__ import annotations

import asyncio
import contextlib
import os
import random
import re
import signal
import urllib.request
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from tests.daemon import lbmr_samples as S
from tests.integration.daemon_proc import DaemonProcess, UdpClient, wait_for
from tests.oracle import Tshark
from umcore.wire import lbmr
from umcore.wire.pcap import udp_frame

pytestmark = pytest.mark.slow


@contextlib.asynccontextmanager
async def lbmrd(*args: str, logfile: Path | None = None) -> AsyncIterator[DaemonProcess]:
    proc = await DaemonProcess.start("lbmrd", "-i", "127.0.0.1", "-p", "0", *args, logfile=logfile)
    try:
        yield proc
    finally:
        await proc.kill()


@contextlib.contextmanager
def clients(n: int, hosts: list[str] | None = None) -> AsyncIterator[list[UdpClient]]:  # type: ignore[misc]
    made = [UdpClient(hosts[i] if hosts else "127.0.0.1") for i in range(n)]
    try:
        yield made
    finally:
        for c in made:
            c.close()


async def register(daemon: DaemonProcess, *cs: UdpClient) -> None:
    """Each client sends Source Alive and gets the resolver keepalive back from the listen
    address (acceptance check 23)."""
    for c in cs:
        c.send(S.KEEPALIVE_SOURCE, daemon.address)
        data, addr = await c.recv()
        assert (data, addr) == (S.KEEPALIVE_RESOLVER, daemon.address)


def scrape(daemon: DaemonProcess) -> dict[str, float]:
    assert daemon.metrics is not None
    host, port = daemon.metrics
    with urllib.request.urlopen(f"http://{host}:{port}/metrics", timeout=5) as resp:
        text = resp.read().decode()
    out = {}
    for line in text.splitlines():
        if line and not line.startswith("#"):
            name, value = line.rsplit(" ", 1)
            out[name] = float(value)
    return out


async def test_relay_among_three_clients() -> None:
    async with lbmrd() as daemon:
        with clients(3) as (x, y, z):
            await register(daemon, x, y, z)
            tir = S.tir_tcp("ORDERS.NYSE", "127.0.0.1", 14371, session_id=0x11223344)
            x.send(tir, daemon.address)
            for c in (y, z):  # byte-identical copies from the listen socket
                assert await c.recv_skipping_keepalives() == (tir, daemon.address)
            # Not to the sender, and keepalives and non-LBMR datagrams are not forwarded: what X
            # receives next is Y's query, and what Y receives next is X's query.
            y.send(S.KEEPALIVE_RECEIVER, daemon.address)
            assert await y.recv() == (S.KEEPALIVE_RESOLVER, daemon.address)
            x.send(b"this is not topic resolution", daemon.address)
            y.send(S.tqr("FROM.Y"), daemon.address)
            assert await x.recv_skipping_keepalives() == (S.tqr("FROM.Y"), daemon.address)
            x.send(S.tqr("FROM.X"), daemon.address)
            assert await y.recv_skipping_keepalives() == (S.tqr("FROM.X"), daemon.address)
        assert await daemon.stop() == 0


async def test_idle_clients_get_resolver_keepalives_at_least_every_second() -> None:
    async with lbmrd() as daemon:
        with clients(1) as (x,):
            await register(daemon, x)
            loop = asyncio.get_running_loop()
            last = loop.time()
            for _ in range(3):
                data, addr = await x.recv(timeout=2.0)
                now = loop.time()
                assert (data, addr) == (S.KEEPALIVE_RESOLVER, daemon.address)
                assert now - last < 1.0
                last = now


async def test_dead_client_expiry() -> None:
    async with lbmrd("-t", "1", "-a", "200") as daemon:
        with clients(3) as (x, silent, z):
            await register(daemon, x, silent, z)

            async def keep_alive() -> None:
                while True:
                    for c in (x, z):
                        c.send(S.KEEPALIVE_SOURCE, daemon.address)
                    await asyncio.sleep(0.2)

            pinger = asyncio.create_task(keep_alive())
            try:
                await daemon.wait_for_line(r"removed 1 client\(s\)", timeout=5.0)
                silent.pending()  # forget the keepalives it got while alive
                x.send(S.tqr("AFTER"), daemon.address)
                # Z (registered after the silent client, so served after it) hears the query:
                # by then a copy to the silent client would already be queued.
                assert await z.recv_skipping_keepalives() == (S.tqr("AFTER"), daemon.address)
                assert silent.pending() == []
            finally:
                pinger.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await pinger


async def test_nat_rewrites_a_tir_for_the_other_domain(tmp_path: Path, tshark: Tshark) -> None:
    # The seed's example moved onto loopback: NYC = 127.0.1.0/24, NJC = 127.0.2/24.
    config = tmp_path / "nat.xml"
    config.write_text(
        """<?xml version="1.0" encoding="UTF-8" ?>
<lbmrd version="1.0">
  <domains>
    <domain name="Net-NYC"><network>127.0.1.0/24</network></domain>
    <domain name="Net-NJC"><network>127.0.2/24</network></domain>
  </domains>
  <transformations>
    <transform source="Net-NYC" destination="Net-NJC">
      <rule><match address="127.0.1.50" port="*"/><replace address="127.0.2.1" port="*"/></rule>
    </transform>
  </transformations>
</lbmrd>
"""
    )
    async with lbmrd(str(config)) as daemon:
        with clients(3, ["127.0.1.50", "127.0.1.7", "127.0.2.20"]) as (app, nyc, njc):
            await register(daemon, app, nyc, njc)
            tir = S.tir_tcp("ORDERS", "127.0.1.50", 12001, session_id=0x11223344)
            app.send(tir, daemon.address)
            assert await nyc.recv_skipping_keepalives() == (tir, daemon.address)
            rewritten, sender = await njc.recv_skipping_keepalives()
            assert sender == daemon.address
    info = lbmr.decode(rewritten).tirs[0].transport_info
    assert (info.ip, info.port, info.session_id) == ("127.0.2.1", 12001, 0x11223344)
    frames = [
        udp_frame(daemon.address[0], daemon.address[1], "127.0.2.20", 14402, rewritten),
        udp_frame(daemon.address[0], daemon.address[1], "127.0.1.7", 14402, tir),
    ]
    decoded = tshark.decode(frames, decode_as=[f"udp.port=={daemon.address[1]},lbmr"])
    decoded.assert_clean()
    assert decoded.value("lbmr.tir.tcp.ip", 0) == "127.0.2.1"
    assert decoded.value("lbmr.tir.tcp.port", 0) == "12001"
    assert decoded.value("lbmr.tir.tcp.ip", 1) == "127.0.1.50"


async def test_random_datagrams_leave_it_running_and_counted() -> None:
    total = 100_000
    barrier_every = 100  # a keepalive round trip after every 100: no kernel queue overflow
    rng = random.Random(20240501)
    async with lbmrd("--metrics", "127.0.0.1:0") as daemon:
        with clients(1) as (x,):
            await register(daemon, x)
            barriers = 0
            for i in range(total):
                x.send(rng.randbytes(rng.randrange(0, 200)), daemon.address)
                if i % barrier_every == barrier_every - 1:
                    x.send(S.KEEPALIVE_SOURCE, daemon.address)
                    barriers += 1
                    while (await x.recv())[0] != S.KEEPALIVE_RESOLVER:
                        pass  # a random datagram with an LBMR header is forwarded to no one
            expected = total + barriers + 1  # + the registration

            def counted() -> dict[str, float] | None:
                m = scrape(daemon)
                return m if m["lbmrd_datagrams_received_total"] >= expected else None

            metrics = await wait_for(counted, 10.0, what="all datagrams counted", proc=daemon)
            assert isinstance(metrics, dict)
            assert metrics["lbmrd_datagrams_received_total"] == expected
            assert metrics["lbmrd_client_keepalives_received_total"] >= barriers + 1
            malformed = metrics["lbmrd_datagrams_malformed_total"]
            assert 0.5 * total < malformed < total
            # Every datagram was malformed, forwarded, a client keepalive or a resolver keepalive.
            accounted = (
                malformed
                + metrics["lbmrd_datagrams_forwarded_total"]
                + metrics["lbmrd_client_keepalives_received_total"]
            )
            assert expected - 100 < accounted <= expected
            assert metrics["lbmrd_clients_active"] == 1
            await register(daemon, x)  # still answering
            assert daemon.proc.returncode is None
            assert daemon.find(re.compile("dropped a datagram .* not valid topic resolution"))
            warnings = [line for line in daemon.all_lines() if "dropped a datagram" in line]
            assert len(warnings) < 100  # rate-limited


async def test_sigterm_exits_0_and_pid_file_is_written_then_removed(tmp_path: Path) -> None:
    pid_file = tmp_path / "lbmrd.pid"
    async with lbmrd("--pid-file", str(pid_file)) as daemon:
        assert int(pid_file.read_text()) == daemon.proc.pid
        assert await daemon.stop(signal.SIGTERM) == 0
    assert not pid_file.exists()
    assert daemon.find(re.compile("SIGTERM: stopping"))


async def test_sigint_stops_gracefully() -> None:
    async with lbmrd() as daemon:
        assert await daemon.stop(signal.SIGINT) == 0


async def test_sighup_reopens_the_log_file(tmp_path: Path) -> None:
    log = tmp_path / "lbmrd.log"
    async with lbmrd("-L", str(log), logfile=log) as daemon:
        rotated = tmp_path / "lbmrd.log.1"
        os.rename(log, rotated)  # what logrotate does, before it sends SIGHUP
        daemon.proc.send_signal(signal.SIGHUP)
        await wait_for(log.exists, 10.0, what="the log file re-created", proc=daemon)
        with clients(1) as (x,):
            await register(daemon, x)
            await wait_for(
                lambda: "new client" in log.read_text(), 10.0, what="a line in the new file"
            )
        assert "listening on" in rotated.read_text()
        assert await daemon.stop() == 0
    assert "stopped:" in log.read_text()


async def test_interface_by_cidr_is_logged() -> None:
    daemon = await DaemonProcess.start("lbmrd", "-i", "127.0.0.0/8", "-p", "0")
    try:
        assert daemon.address[0] == "127.0.0.1"
        assert daemon.find(re.compile(r"Using interface \[127\.0\.0\.1\]"))
    finally:
        await daemon.kill()
