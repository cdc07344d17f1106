"""TRD1 - DRO1 ~UDP peer~ DRO2 - TRD2 with both DROs as ``tnwgd`` processes (``<udp>``).

The peer portals have a UDP data link: the TCP connection carries the DROs' control traffic and
the data frames go over LBT-RU.  DRO1 (the sending side) drops every 3rd DATA datagram's first
transmission (``PYUM_PEER_UDP_DROP_EVERY``, fault injection in the adapter: there is no netem),
so DRO2's receiver NAKs and DRO1 retransmits: every message still arrives in order with no loss
at the receiver, the UDP figures (Prometheus, built by the same function as ``DROMonMsg``) show
the datagrams, NAKs and retransmissions, and the TCP link's data counters stay 0.

Acceptance check 13's fault: DRO2 stopped (SIGSTOP) for longer than the UDP link's
``activity-timeout`` (2.5 s) but shorter than the TCP keepalive timeout (5 s): DRO1 drops both
links for the UDP silence, and after SIGCONT both come back by themselves and data flows again.
The last test runs both DROs in this process to read ``DROMonMsg`` and the web monitor's page.
"""

from __future__ import annotations

import asyncio
import os
import re
import signal
import socket
import struct
import time
import urllib.request
from pathlib import Path

from daemons.tnwgd.app import DroRuntime
from daemons.tnwgd.monitor import DROMonMsg, stats_pb
from daemons.tnwgd.webmon import DroWebMonitor
from tests.dro_peer.kit import (
    BURST_TIMERS,
    LINK_UP,
    LOST,
    Arrivals,
    PeerSpec,
    count_lines,
    free_tcp_port,
    peer_dro_xml,
    start_dro,
    ticker,
)
from tests.dro_proc.kit import Recorder, Trd
from tests.integration.daemon_proc import DaemonProcess
from tests.integration.helpers import until
from umcore.aio.dropeer import DROP_ENV
from umcore.api import Context
from umcore.config import dro as dro_config

TOPIC = "peer.udp"
COUNT = 10_000
DROP_EVERY = 3
_SEQ = struct.Struct("!I")
UDP_BOUND = re.compile(r"peer portal \[PEER\]: UDP data link on port (\d+)")
UDP_UP = re.compile(r"peer portal \[PEER\]: UDP data link up with")


def free_udp_port() -> int:
    """A UDP port free now on 127.0.0.1 (the DRO binds it moments later)."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def udp(port: int) -> str:
    return f'<udp><port>{port}</port><nak-handling backoff-interval="50"/></udp>'


def _get(url: str) -> str:
    with urllib.request.urlopen(url, timeout=10) as r:
        return str(r.read().decode())


async def peer_metrics(dro: DaemonProcess) -> dict[str, float]:
    """The DRO's metrics of portal PEER: name (without ``_total``) -> value."""
    assert dro.metrics is not None
    host, port = dro.metrics
    text = await asyncio.to_thread(_get, f"http://{host}:{port}/metrics")
    out = {}
    for line in text.splitlines():
        m = re.match(r'(\w+?)(?:_total)?\{portal="PEER"\} (\S+)$', line)
        if m:
            out[m.group(1)] = float(m.group(2))
    return out


async def test_udp_peer_link_recovers_injected_loss_in_order(tmp_path: Path) -> None:
    trd1, trd2 = Trd(), Trd()
    port = free_tcp_port()
    acc = PeerSpec("PEER", "acceptor", port, udp=udp(free_udp_port()))
    ini = PeerSpec("PEER", "initiator", port, udp=udp(free_udp_port()))
    xml1 = peer_dro_xml("dro1", [("TRD1", 1, trd1)], [acc], timers=BURST_TIMERS)
    xml2 = peer_dro_xml("dro2", [("TRD2", 2, trd2)], [ini], timers=BURST_TIMERS)
    env = {DROP_ENV: str(DROP_EVERY)}
    # both start at once (each is a cold interpreter: seconds on a loaded machine)
    dro1, dro2 = await asyncio.gather(
        start_dro(tmp_path, "dro1", xml1, metrics=True, env=env),
        start_dro(tmp_path, "dro2", xml2, metrics=True),
    )
    rec = Recorder()
    rec.keep_payloads = True
    try:
        await dro1.wait_for_line(LINK_UP, 20)
        await dro2.wait_for_line(LINK_UP, 20)
        assert dro1.find(UDP_BOUND) and dro2.find(UDP_BOUND)
        assert any(DROP_ENV in line for line in dro1.all_lines())
        async with (
            await Context.create(trd1.context()) as a,
            await Context.create(trd2.context()) as b,
        ):
            rcv = await b.create_receiver(TOPIC, rec, attributes=trd2.receiver())
            src = await a.create_source(TOPIC, attributes=trd1.source("tcp"))
            async with asyncio.timeout(30):
                while not rec.sqns:
                    await src.send(b"probe", flush=True)
                    await asyncio.sleep(0.05)  # the probing rate, not a synchronisation
            await asyncio.sleep(0)
            before = len(rec.sqns)
            t0 = time.perf_counter()
            for i in range(COUNT):
                await src.send(_SEQ.pack(i) + bytes(12), flush=i % 500 == 499)
            src.flush()
            try:
                await until(
                    lambda: len(rec.sqns) >= before + COUNT, f"{COUNT} messages", timeout=30
                )
            except AssertionError:
                print(f"got {len(rec.sqns) - before}, losses {rec.losses}")
                print("\n".join(dro1.all_lines()[-15:] + dro2.all_lines()[-15:]))
                raise
            elapsed = time.perf_counter() - t0
            got = rec.payloads[before:]
            assert [_SEQ.unpack_from(p)[0] for p in got] == list(range(COUNT))
            sqns = rec.sqns[before:]
            assert sqns == list(range(sqns[0], sqns[0] + COUNT))
            assert rec.losses == 0
            m1, m2 = await peer_metrics(dro1), await peer_metrics(dro2)
            print(
                f"{COUNT} messages over the UDP peer link in {elapsed:.2f} s; DRO1 sent "
                f"{m1['pyum_dro_peer_udp_send_msgs_sent']:.0f} datagrams, "
                f"{m1['pyum_dro_peer_udp_send_rxs_sent']:.0f} retransmitted; DRO2 sent "
                f"{m2['pyum_dro_peer_udp_receive_naks_sent']:.0f} NAKs"
            )
            # the data went over UDP, with loss that NAKs repaired ...
            assert m1["pyum_dro_peer_udp_send_msgs_sent"] >= DROP_EVERY
            assert m1["pyum_dro_peer_udp_send_rxs_sent"] >= 1
            assert m1["pyum_dro_peer_udp_send_naks_rcved"] >= 1
            assert m2["pyum_dro_peer_udp_receive_msgs_rcved"] >= 1
            assert m2["pyum_dro_peer_udp_receive_naks_sent"] >= 1
            assert m2["pyum_dro_peer_udp_receive_unrecovered_txw"] == 0
            assert m2["pyum_dro_peer_udp_receive_unrecovered_tmo"] == 0
            # ... and the TCP link carried control only
            assert m1["pyum_dro_peer_send_data_fragments_sent"] == 0
            assert m2["pyum_dro_peer_receive_data_msgs_rcvd"] == 0
            assert m1["pyum_dro_peer_send_gateway_cntl_msgs_sent"] > 0
            await rcv.close()
            await src.close()
    finally:
        await dro2.stop()
        await dro1.stop()


async def test_udp_silence_drops_both_links_and_both_come_back(tmp_path: Path) -> None:
    trd1, trd2 = Trd(), Trd()
    port = free_tcp_port()
    sm = '<session-message min-interval="50" max-interval="200" activity-timeout="2500"/>'
    acc = PeerSpec("PEER", "acceptor", port, udp=f"<udp><port>{free_udp_port()}</port>{sm}</udp>")
    ini = PeerSpec("PEER", "initiator", port, udp=f"<udp><port>{free_udp_port()}</port>{sm}</udp>")
    xml1 = peer_dro_xml("dro1", [("TRD1", 1, trd1)], [acc])
    xml2 = peer_dro_xml("dro2", [("TRD2", 2, trd2)], [ini])
    dro1, dro2 = await asyncio.gather(
        start_dro(tmp_path, "dro1", xml1), start_dro(tmp_path, "dro2", xml2)
    )
    rec = Arrivals()
    try:
        await dro1.wait_for_line(UDP_UP, 20)
        async with (
            await Context.create(trd1.context()) as a,
            await Context.create(trd2.context()) as b,
        ):
            rcv = await b.create_receiver("peer.udp.stop", rec, attributes=trd2.receiver())
            src = await a.create_source("peer.udp.stop", attributes=trd1.source("tcp"))
            task = asyncio.create_task(ticker(lambda d: src.send(d, flush=True), 0.01))
            try:
                await until(lambda: len(rec.got) >= 10, "messages through both DROs", timeout=20)
                os.kill(dro2.proc.pid, signal.SIGSTOP)
                try:
                    await until(lambda: count_lines(dro1, LOST) >= 1, "lost connection", timeout=10)
                    stopped_at = len(rec.got)
                finally:
                    os.kill(dro2.proc.pid, signal.SIGCONT)
                await until(
                    lambda: count_lines(dro1, UDP_UP) >= 2 and count_lines(dro2, UDP_UP) >= 2,
                    "both links up again on both sides",
                    timeout=20,
                )
                await until(lambda: len(rec.got) >= stopped_at + 20, "delivery resumed", timeout=20)
            finally:
                task.cancel()
            lost = next(x for x in dro1.all_lines() if LOST.search(x))
            assert "UDP data link" in lost, lost  # the UDP silence, not the TCP keepalive
            assert count_lines(dro1, LINK_UP) >= 2 and count_lines(dro2, LINK_UP) >= 2
            tail = [n for _, n, _ in rec.got[stopped_at:]]
            assert tail[-20:] == sorted(tail[-20:])
            await rcv.close()
            await src.close()
    finally:
        await dro2.stop()
        await dro1.stop()


async def test_udp_figures_in_dromonmsg_and_the_web_page() -> None:
    trd1, trd2 = Trd(), Trd()
    port = free_tcp_port()
    acc = PeerSpec("PEER", "acceptor", port, udp=udp(free_udp_port()))
    ini = PeerSpec("PEER", "initiator", port, udp=udp(free_udp_port()))
    r1 = DroRuntime(dro_config.load_text(peer_dro_xml("dro1", [("TRD1", 1, trd1)], [acc]), "1"))
    r2 = DroRuntime(dro_config.load_text(peer_dro_xml("dro2", [("TRD2", 2, trd2)], [ini]), "2"))
    await r1.start()
    await r2.start()
    rec = Recorder()
    try:
        async with (
            await Context.create(trd1.context()) as a,
            await Context.create(trd2.context()) as b,
        ):
            rcv = await b.create_receiver(TOPIC, rec, attributes=trd2.receiver())
            src = await a.create_source(TOPIC, attributes=trd1.source("tcp"))
            async with asyncio.timeout(30):
                while not rec.sqns:
                    await src.send(b"probe", flush=True)
                    await asyncio.sleep(0.05)  # the probing rate, not a synchronisation
            for i in range(300):
                await src.send(_SEQ.pack(i), flush=i % 50 == 49)
            src.flush()
            await until(lambda: len(rec.sqns) > 300, "300 messages")
            assert rec.losses == 0
            offset = time.time() - asyncio.get_running_loop().time()
            peers = []
            for rt in (r1, r2):
                msg = DROMonMsg()
                stats_pb(rt, msg.stats, wall_offset=offset, portals=[rt.portals["PEER"]])
                peers.append(msg.stats.portals[0].peer)
            p1, p2 = peers
            assert p1.udp_send.msgs_sent > 0 and p1.udp_send.bytes_sent > 300 * 4
            assert p2.udp_receive.msgs_rcved > 0 and p2.udp_receive.bytes_rcved > 300 * 4
            assert p2.udp_receive.unrecovered_txw == p2.udp_receive.unrecovered_tmo == 0
            # the TCP link carried control only
            assert p1.send.data_fragments_sent == 0 and p2.receive.data_msgs_rcvd == 0
            assert p1.send.gateway_cntl_msgs_sent > 0 and p2.receive.gateway_cntl_msgs_rcvd > 0
            page = DroWebMonitor(r2, monotonic=asyncio.get_running_loop().time).portal(
                {"portal": "PEER"}
            )
            assert page is not None
            rows = dict(page["link"])
            assert str(rows["UDP data link"]).startswith("up (port ")
            assert rows["UDP peer port"] == r1.portals["PEER"].config.udp.port  # type: ignore[attr-defined]
            await rcv.close()
            await src.close()
    finally:
        await r2.close()
        await r1.close()
