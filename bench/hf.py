"""Hot Failover receive cost: an HF receiver against a plain receiver of the same HF stream.

Layout: one process, one loop, multicast topic resolution on loopback, an HF source (TCP)
sending :data:`N` messages of 64 bytes with 32-bit HF sequence numbers (each message carries
the APPHDR_CHAIN's HF element, so it takes the header-carrying send and receive paths).  Each
round creates a fresh receiving context with either

- a **plain receiver** (``create_receiver``): the messages are decoded with their HF fields and
  delivered, no filter -- the baseline; or
- an **HF receiver** (``create_hf_receiver``): the same, plus the HF filter and the copy of each
  message it delivers (``sequence_number`` rewritten);
- an **HF receiver fed by two HF sources** sending the same numbers (each message arrives
  twice; the second copy is dropped by the filter): the failover case.

Rounds alternate, each kind keeps its best of :data:`ROUNDS`; figures are messages (copies,
with two sources) sent and received per second, and the ratios HF / plain (1.0 = HF costs
nothing; only the ratios mean anything here).
Also prints the filter core alone (``HfFilter.receive`` per message).  ~10-15 s.
"""

from __future__ import annotations

import asyncio
import socket
import time

N = 30_000
SIZE = 64
ROUNDS = 3
TIMEOUT_S = 30.0


def _configure() -> None:
    from umcore.config.attributes import Configuration, reset_global_configuration

    probe = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    probe.bind(("127.0.0.1", 0))
    port = probe.getsockname()[1]
    probe.close()
    cfg = Configuration()
    cfg.config_text(
        "context resolver_multicast_interface 127.0.0.1\n"
        "context resolver_multicast_address 224.9.10.97\n"
        f"context resolver_multicast_port {port}\n"
        "context transport_tcp_port_low 0\ncontext transport_tcp_port_high 0\n"
        "source transport_tcp_interface 127.0.0.1\n",
        "bench",
    )
    reset_global_configuration(cfg)


async def _round(kind: str, topic: str) -> float:
    from umcore.api import Context
    from umcore.api import message as m

    done = asyncio.Event()
    count = 0

    def on_msg(msg: m.Message) -> None:
        nonlocal count
        if msg.type == m.MSG_DATA:
            count += 1
            if count == N:
                done.set()

    payload = bytes(SIZE)
    sources = 2 if kind == "hf2" else 1
    async with await Context.create() as b:
        ctxs = [await Context.create() for _ in range(sources)]
        try:
            if kind == "plain":
                await b.create_receiver(topic, on_msg)
            else:
                await b.create_hf_receiver(topic, on_msg)
            srcs = [await c.create_hf_source(topic) for c in ctxs]
            async with asyncio.timeout(10):
                while any(s.receivers < 1 for s in srcs):
                    await asyncio.sleep(0.01)
            start = time.perf_counter()
            for i in range(N):
                for s in srcs:
                    await s.send_hf(payload, i)
            for s in srcs:
                s.flush()
            async with asyncio.timeout(TIMEOUT_S):
                await done.wait()
            elapsed = time.perf_counter() - start
            for s in srcs:
                await s.close()
        finally:
            for c in ctxs:
                await c.__aexit__(None, None, None)
    return N * sources / elapsed  # copies sent and received per second


def _filter_core() -> tuple[float, float]:
    from umcore.features.hotfailover import HfFilter, HfInfo

    infos = [HfInfo(i, 32, False, False) for i in range(200_000)]
    f = HfFilter()
    start = time.perf_counter()
    for info in infos:
        f.receive(info)
    first = time.perf_counter() - start
    start = time.perf_counter()
    for info in infos:  # all duplicates now
        f.receive(info)
    dup = time.perf_counter() - start
    return first / len(infos) * 1e9, dup / len(infos) * 1e9


def main() -> None:
    try:
        import uvloop

        runner = uvloop.run
    except ImportError:  # pragma: no cover
        runner = asyncio.run
    _configure()
    best = {"plain": 0.0, "hf": 0.0, "hf2": 0.0}

    async def run_all() -> None:
        for r in range(ROUNDS):
            for kind in best:
                rate = await _round(kind, f"bench.hf.{kind}.{r}")
                best[kind] = max(best[kind], rate)

    runner(run_all())
    plain, hf, hf2 = best["plain"], best["hf"], best["hf2"]
    print(f"   HF stream, plain receiver:        {plain:10,.0f} msgs/s (baseline)")
    print(f"   HF receiver, one source:          {hf:10,.0f} msgs/s  ratio {hf / plain:.2f}")
    print(f"   HF receiver, two sources (dups):  {hf2:10,.0f} copies/s ratio {hf2 / plain:.2f}"
          "  (each message sent and received twice, the second copy dropped)")  # fmt: skip
    first, dup = _filter_core()
    print(f"   HfFilter.receive: {first:.0f} ns per first copy, {dup:.0f} ns per duplicate")


if __name__ == "__main__":
    main()
