"""SRS: 10,000 sources through one SRS to 10 receiving client cores over loopback TCP.

Figures (issue 7 goals in brackets):

1. **fan-out**: receivers already interested in every topic, one context advertises 10,000
   sources; time until all 10 receivers resolved all 10,000 topics [<= 2 s];
2. **late join**: 10 new receivers register interest in the 10,000 existing topics; time until
   all resolved them (the SRS answers each RIR from its state);
3. **memory**: the SRS process's resident set before and after holding 10,000 topics with 20
   clients' interest (/proc VmRSS of the subprocess) [<= 50 MB per 10,000 topics];
4. **re-sync**: a receiver's connection is cut; time until it reconnected, re-sent its 10,000
   RIRs and received the 10,000 SIRs again [<= 1 s].

Baseline, same run: the same fan-out between the same sans-IO cores in memory (no sockets, no
second process), i.e. the protocol work alone; the ratio shows what TCP, the event loop and the
process boundary add.  Everything is bounded (~60 s at worst).
"""

from __future__ import annotations

import asyncio
import os
import re
import sys
import tempfile
import time
from pathlib import Path

from umcore.aio.srs import SRSClientConnector
from umcore.srs.client import SRSClient
from umcore.srs.server import SRSServer
from umcore.wire.srs_messages import SourceInfo

TOPICS = 10_000
RECEIVERS = 10
GOAL_FANOUT_S = 2.0
GOAL_MEMORY_MB = 50.0
GOAL_RESYNC_S = 1.0
STEP_TIMEOUT_S = 20.0  # bound on every wait
ROOT = Path(__file__).resolve().parents[1]


def _sources() -> list[SourceInfo]:
    return [
        SourceInfo(
            n.to_bytes(4, "big") + bytes(28),
            f"bench/topic/{n:05d}",
            f"TCP:127.0.0.1:14001:{n:08x}",
            request_ip="127.0.0.1",
            request_port=14001,
        )
        for n in range(TOPICS)
    ]


def _rss_kb(pid: int) -> int:
    text = Path(f"/proc/{pid}/status").read_text()
    m = re.search(r"VmRSS:\s+(\d+) kB", text)
    return int(m.group(1)) if m else 0


def baseline_in_memory(sources: list[SourceInfo]) -> float:
    """The fan-out between the same cores, bytes handed over in memory."""
    from tests.srs.harness import Net

    net = Net()
    net.add_server(("127.0.0.1", 1), SRSServer())
    src = net.add_client(SRSClient([("127.0.0.1", 1)], session_id=1))
    rcvs = [
        net.add_client(SRSClient([("127.0.0.1", 1)], session_id=2 + i)) for i in range(RECEIVERS)
    ]
    for r in rcvs:
        for s in sources:
            net.clients[r].send_receiver(s.topic)
    net.pump()
    start = time.perf_counter()
    for s in sources:
        net.clients[src].send_source(s)
    net.pump()
    elapsed = time.perf_counter() - start
    assert all(net.clients[r].resolved_count == TOPICS for r in rcvs)
    return elapsed


async def _wait(pred, what: str) -> float:  # type: ignore[no-untyped-def]
    loop = asyncio.get_running_loop()
    start = loop.time()
    while not pred():
        if loop.time() - start > STEP_TIMEOUT_S:
            raise TimeoutError(f"bench/srs: timed out waiting for {what}")
        await asyncio.sleep(0.002)
    return loop.time() - start


async def over_tcp(sources: list[SourceInfo]) -> dict[str, float]:
    with tempfile.TemporaryDirectory(prefix="pyum-bench-srs-") as tmp:
        cfg = Path(tmp) / "srs.xml"
        cfg.write_text(
            '<?xml version="1.0" encoding="UTF-8" ?><um-srs><srs>'
            "<interface>127.0.0.1</interface><port>0</port></srs></um-srs>\n"
        )
        proc = await asyncio.create_subprocess_exec(
            sys.executable,
            "-m",
            "daemons.srs",
            str(cfg),
            cwd=ROOT,
            env=dict(os.environ, PYTHONUNBUFFERED="1"),
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.STDOUT,
        )
        conns: list[SRSClientConnector] = []
        try:
            assert proc.stdout is not None
            port = 0
            deadline = time.monotonic() + STEP_TIMEOUT_S
            while not port:
                line = await asyncio.wait_for(proc.stdout.readline(), STEP_TIMEOUT_S)
                m = re.search(rb"listening on [\d.]+:(\d+)", line)
                if m:
                    port = int(m.group(1))
                if not line or time.monotonic() > deadline:
                    raise RuntimeError("the SRS did not start")
            drain = asyncio.ensure_future(_drain(proc))
            addr = [("127.0.0.1", port)]
            await asyncio.sleep(0.2)
            rss0 = _rss_kb(proc.pid)

            def connect(session: int) -> SRSClient:
                core = SRSClient(addr, session_id=session, client_port=session)
                conn = SRSClientConnector(core)
                conn.start()
                conns.append(conn)
                return core

            src = connect(1)
            rcvs = [connect(2 + i) for i in range(RECEIVERS)]
            for core in rcvs:
                for s in sources:
                    core.send_receiver(s.topic)
            for conn in conns:
                conn.flush()
            await _wait(lambda: all(c.registered_slots() for c in [src, *rcvs]), "registration")
            await asyncio.sleep(0.3)  # the SRS has taken in 100,000 RIRs
            start = time.perf_counter()
            for s in sources:
                src.send_source(s)
            conns[0].flush()
            await _wait(lambda: all(c.resolved_count == TOPICS for c in rcvs), "fan-out")
            fanout = time.perf_counter() - start

            start = time.perf_counter()
            late = [connect(100 + i) for i in range(RECEIVERS)]
            for core in late:
                for s in sources:
                    core.send_receiver(s.topic)
            for conn in conns[-RECEIVERS:]:
                conn.flush()
            await _wait(lambda: all(c.resolved_count == TOPICS for c in late), "late join")
            late_join = time.perf_counter() - start
            await asyncio.sleep(0.3)
            rss1 = _rss_kb(proc.pid)

            victim, vconn = rcvs[0], conns[1]
            before = victim.sirs_received
            start = time.perf_counter()
            for t in list(vconn._transports.values()):
                t.abort()  # the connection breaks under the client
            await _wait(lambda: victim.sirs_received >= before + TOPICS, "re-sync")
            resync = time.perf_counter() - start
            drain.cancel()
            return {
                "fanout": fanout,
                "late_join": late_join,
                "rss_delta_mb": (rss1 - rss0) / 1024.0,
                "rss0_mb": rss0 / 1024.0,
                "resync": resync,
            }
        finally:
            for conn in conns:
                await conn.close()
            if proc.returncode is None:
                proc.send_signal(2)
                try:
                    await asyncio.wait_for(proc.wait(), 10)
                except TimeoutError:
                    proc.kill()
                    await proc.wait()


async def _drain(proc: asyncio.subprocess.Process) -> None:
    assert proc.stdout is not None
    while await proc.stdout.readline():
        pass


def main() -> None:
    sys.path.insert(0, str(ROOT))
    sources = _sources()
    base = baseline_in_memory(sources)
    try:
        import uvloop

        runner = asyncio.Runner(loop_factory=uvloop.new_event_loop)
    except ImportError:
        runner = asyncio.Runner()
    with runner:
        r = runner.run(over_tcp(sources))
    print(f"   {TOPICS} sources, {RECEIVERS} receivers, one SRS subprocess, loopback TCP")
    print(
        f"   fan-out: {r['fanout']:.3f} s  (goal {GOAL_FANOUT_S} s: {r['fanout'] / GOAL_FANOUT_S:.2f}x"
        f" of goal; in-memory cores baseline {base:.3f} s, ratio {r['fanout'] / base:.2f})"
    )
    print(f"   late join of {RECEIVERS} receivers: {r['late_join']:.3f} s")
    print(
        f"   SRS RSS: {r['rss0_mb']:.1f} MB idle, +{r['rss_delta_mb']:.1f} MB with {TOPICS} topics"
        f" and {2 * RECEIVERS} receivers' interest (goal {GOAL_MEMORY_MB} MB:"
        f" {r['rss_delta_mb'] / GOAL_MEMORY_MB:.2f}x of goal)"
    )
    print(
        f"   re-sync of a client with {TOPICS} topics: {r['resync']:.3f} s"
        f" (goal {GOAL_RESYNC_S} s: {r['resync'] / GOAL_RESYNC_S:.2f}x of goal)"
    )


if __name__ == "__main__":
    main()
