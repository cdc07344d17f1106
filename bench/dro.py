"""Messages through a DRO (tnwgd) against the same messages sent directly (issue 19).

What runs where (one 2-core machine, loopback only): the DRO is the real daemon
(``python -m daemons.tnwgd FILE``, a subprocess on uvloop) joining two topic resolution domains,
TRD1 and TRD2, each with its own multicast topic resolution group and port.  This process (uvloop)
holds three contexts: A in TRD1 with the sources, B1 in TRD1 (the *direct* receivers: they join
the sources themselves) and B2 in TRD2 (the *routed* receivers: they can only reach the sources
through the DRO's proxy sources).  Everything but the path is the same: the same source context,
the same receiving process, TCP on every hop, 64-byte payloads.

- **Throughput**: :data:`COUNT` messages as fast as the source may send them (the last of each
  :data:`CHUNK` flushed); the figure is messages / (first send .. last delivery).  Direct and
  routed rounds alternate, :data:`ROUNDS` each (the machine's speed drifts; the best round of
  each counts).  Goal: routed >= 0.70 of direct.  The DRO has no end-to-end flow control, so its
  portal queue is large here (``max-queue`` 256 MB): a drop would show in the counts printed.
- **Added latency**: one driver offers :data:`RATE` messages/s to each path, interleaved (a
  direct message, then a routed one, every :data:`TICK_S`), each carrying its *intended* send
  time (or the actual one, if a sleep ended early); the receivers record arrival - that time.  Printed: p50/p99 of each and the p99
  added by one DRO traversal (routed p99 - direct p99).  Goal: <= 1 ms.

The DRO's forwarded and dropped counts are read from its ``--metrics`` endpoint at the end.

Run alone: ``python -m bench.dro``; ``python -m bench dro`` runs it with the others.  With
``PYUM_BENCH_DRO_PROFILE=FILE`` the DRO runs under cProfile and writes its profile to FILE.
"""

from __future__ import annotations

import asyncio
import os
import random
import re
import socket
import struct
import sys
import tempfile
import time
import urllib.request
from pathlib import Path
from typing import Any
from xml.sax.saxutils import quoteattr

from bench._tnwgd import Tnwgd

COUNT = 50_000
CHUNK = 64
ROUNDS = 3
RATE = 2_000  # msgs/s offered to each path in the latency phase
TICK_S = 0.001
LATENCY_S = 3.0
WARMUP_S = 0.3
SIZE = 64
WAIT = 30.0  # bound on every wait (start-up, resolution, delivery)
GOAL_RATIO = 0.70
GOAL_ADDED_P99_MS = 1.0
ROOT = Path(__file__).resolve().parents[1]
_STAMP = struct.Struct("!Q")


def _free_udp_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _free_tcp_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _trd() -> dict[str, str]:
    group = f"224.12.{random.randrange(1, 250)}.{random.randrange(1, 250)}"
    return {
        "resolver_multicast_interface": "127.0.0.1",
        "resolver_multicast_address": group,
        "resolver_multicast_port": str(_free_udp_port()),
        "transport_tcp_port_low": "0",
        "transport_tcp_port_high": "0",
        "request_tcp_port_low": "0",
        "request_tcp_port_high": "0",
        "request_tcp_interface": "127.0.0.1",
    }


_SOURCE = {"transport": "tcp", "transport_tcp_interface": "127.0.0.1"}


def _xml(trd1: dict[str, str], trd2: dict[str, str]) -> str:
    def opts(scope: str, d: dict[str, str]) -> str:
        return "".join(
            f"<option scope={quoteattr(scope)} name={quoteattr(k)} value={quoteattr(v)}/>"
            for k, v in d.items()
        )

    portals = "".join(
        f"<endpoint><name>{n}</name><domain-id>{i}</domain-id><max-queue>{256 << 20}</max-queue>"
        f"<lbm-attributes>{opts('context', t)}{opts('source', _SOURCE)}</lbm-attributes>"
        "</endpoint>"
        for i, (n, t) in enumerate((("TRD1", trd1), ("TRD2", trd2)), 1)
    )
    return (
        '<tnw-gateway version="1.0"><daemon><name>benchdro</name></daemon>'
        f"<portals>{portals}</portals></tnw-gateway>"
    )


def _metric(text: str, name: str) -> float:
    m = re.search(rf"^{re.escape(name)} ([0-9.e+]+)$", text, re.M)
    return float(m.group(1)) if m else float("nan")


def _pct(values: list[float], q: float) -> float:
    s = sorted(values)
    return s[min(len(s) - 1, int(q * len(s)))] if s else float("nan")


async def _wait(pred: Any, what: str) -> None:
    async with asyncio.timeout(WAIT):
        while not pred():
            await asyncio.sleep(0.005)  # polling a condition, bounded


async def _path(src: Any, got: list[int]) -> None:
    """Probe until the receiver gets a message (the path is built), then forget the probes."""
    async with asyncio.timeout(WAIT):
        while not got:
            await src.send(bytes(SIZE), flush=True)
            await asyncio.sleep(0.02)
    await asyncio.sleep(0.2)
    got.clear()


async def _throughput(a: Any, b: Any, topic: str) -> float:
    got: list[int] = []
    last = [0.0]

    def on_messages(msgs: list[Any]) -> None:
        n = sum(1 for m in msgs if m.type == 0)
        if n:
            got.append(n)
            last[0] = time.perf_counter()

    rcv = await b.create_receiver(topic, on_messages=on_messages)
    src = await a.create_source(topic, attributes=_SOURCE)
    await _path(src, got)
    payload = bytes(SIZE)
    t0 = time.perf_counter()
    for i in range(COUNT):
        await src.send(payload, flush=i % CHUNK == CHUNK - 1)
    src.flush()
    await _wait(lambda: sum(got) >= COUNT, f"{COUNT} messages on {topic}")
    rate = COUNT / (last[0] - t0)
    await rcv.close()
    await src.close()
    return rate


async def _latency(a: Any, b1: Any, b2: Any) -> tuple[list[float], list[float]]:
    lat: dict[str, list[float]] = {"direct": [], "routed": []}
    clock = time.perf_counter_ns

    def recorder(into: list[float]) -> Any:
        def on_message(m: Any) -> None:
            if m.type == 0 and len(m.data) == SIZE:
                (sent,) = _STAMP.unpack_from(m.data)
                if sent:
                    into.append((clock() - sent) / 1e6)

        return on_message

    srcs = []
    rcvs = []
    for name, b in (("direct", b1), ("routed", b2)):
        rcvs.append(await b.create_receiver(f"bench.dro.lat.{name}", recorder(lat[name])))
        src = await a.create_source(f"bench.dro.lat.{name}", attributes=_SOURCE)
        probes: list[int] = []
        probe_rcv = await b.create_receiver(
            f"bench.dro.lat.{name}", lambda m, p=probes: p.append(1) if m.type == 0 else None
        )
        await _path(src, probes)
        await probe_rcv.close()
        srcs.append(src)
    start_ns = clock()
    tick_ns = int(TICK_S * 1e9)
    n = int(LATENCY_S / TICK_S)
    per_tick = max(1, round(RATE * TICK_S))
    pad = bytes(SIZE - _STAMP.size)
    for k in range(n):
        intended = start_ns + k * tick_ns
        delay = (intended - clock()) / 1e9
        if delay > 0:
            await asyncio.sleep(delay)
        # a sleep may end early (the loop's clock is coarse): never stamp a time not yet come
        stamp = _STAMP.pack(max(intended, clock())) + pad
        for _ in range(per_tick):
            for src in srcs:
                src.send_nowait(stamp, flush=True)
    await _wait(lambda: min(len(v) for v in lat.values()) >= n * per_tick * 0.99, "latency samples")
    for r in rcvs:
        await r.close()
    for s in srcs:
        await s.close()
    skip = int(WARMUP_S / TICK_S) * per_tick
    return lat["direct"][skip:], lat["routed"][skip:]


async def _all() -> dict[str, Any]:
    from umcore.api import Context

    trd1, trd2 = _trd(), _trd()
    mport = _free_tcp_port()
    out: dict[str, Any] = {}
    with tempfile.TemporaryDirectory(prefix="pyum-bench-dro-") as tmp:
        cfg = Path(tmp) / "dro.xml"
        cfg.write_text(_xml(trd1, trd2))
        profile = os.environ.get("PYUM_BENCH_DRO_PROFILE")
        prof = ["-m", "cProfile", "-o", profile] if profile else []
        proc = await asyncio.create_subprocess_exec(
            sys.executable, *prof, "-m", "daemons.tnwgd", "--metrics", f"127.0.0.1:{mport}",
            str(cfg),
            cwd=ROOT, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT,
        )  # fmt: skip
        dro = Tnwgd(proc)
        try:
            await asyncio.wait_for(dro.started.wait(), WAIT)
            async with (
                await Context.create(trd1) as a,
                await Context.create(trd1) as b1,
                await Context.create(trd2) as b2,
            ):
                direct: list[float] = []
                routed: list[float] = []
                for r in range(ROUNDS):
                    direct.append(await _throughput(a, b1, f"bench.dro.tp.direct.{r}"))
                    routed.append(await _throughput(a, b2, f"bench.dro.tp.routed.{r}"))
                out["direct"], out["routed"] = direct, routed
                out["lat_direct"], out["lat_routed"] = await _latency(a, b1, b2)
            text = await asyncio.to_thread(
                lambda: (
                    urllib.request.urlopen(f"http://127.0.0.1:{mport}/metrics", timeout=10)
                    .read()
                    .decode()
                )
            )
            out["forwarded"] = _metric(text, "pyum_tnwgd_TRD2_frames_forwarded_total")
            out["dropped"] = _metric(text, "pyum_tnwgd_TRD2_dropped_would_block_total")
        finally:
            await dro.stop()
    return out


def main() -> None:
    runner: Any
    try:
        import uvloop

        runner = uvloop.run
    except ImportError:  # pragma: no cover
        runner = asyncio.run
    r = runner(_all())
    d, t = max(r["direct"]), max(r["routed"])
    print(f"{SIZE}-byte messages, TCP on every hop, {COUNT} per round, best of {ROUNDS}")
    print(f"direct  : {d:10,.0f} msgs/s   (rounds {', '.join(f'{x:,.0f}' for x in r['direct'])})")
    print(f"via DRO : {t:10,.0f} msgs/s   (rounds {', '.join(f'{x:,.0f}' for x in r['routed'])})")
    ratio = t / d
    met = "met" if ratio >= GOAL_RATIO else "NOT met"
    print(f"ratio via DRO / direct: {ratio:.2f} (goal >= {GOAL_RATIO}: {met})")
    ld, lr = r["lat_direct"], r["lat_routed"]
    d50, d99, r50, r99 = _pct(ld, 0.5), _pct(ld, 0.99), _pct(lr, 0.5), _pct(lr, 0.99)
    print(
        f"latency at {RATE} msgs/s per path, interleaved, {LATENCY_S:.0f} s "
        f"({len(ld)} / {len(lr)} samples)"
    )
    print(f"direct  : p50 {d50:7.3f} ms  p99 {d99:7.3f} ms")
    print(f"via DRO : p50 {r50:7.3f} ms  p99 {r99:7.3f} ms")
    added = r99 - d99
    met = "met" if added <= GOAL_ADDED_P99_MS else "NOT met"
    print(f"added by one DRO traversal: p99 {added:.3f} ms (goal <= {GOAL_ADDED_P99_MS}: {met})")
    print(f"DRO forwarded {r['forwarded']:,.0f} frames into TRD2, dropped {r['dropped']:,.0f}")


if __name__ == "__main__":
    main()
