"""Topic resolution at scale: time for a receiver context to resolve and join 10,000 topics.

Multicast topic resolution on loopback (a test-only group and a free port), UM's default
resolver timings.  Context A creates :data:`TOPICS` sources (10 TCP transport sessions, round
robin: ``transport_tcp_maximum_ports``); then context B creates a receiver for each topic and we
time until every topic has its delivery controller on a joined session (the TIR was received and
the session joined).  Printed: the time to create the sources, the time to resolve and join all
topics, and the resolver counters of both contexts.  For scale, the same run times the LBMR
codec alone encoding and decoding as many TIRs (40 per datagram): the join time is dominated by
UM's query timings (initial TQR interval 20 ms doubling towards 200 ms), not by the codec.
"""

from __future__ import annotations

import asyncio
import socket
import time

TOPICS = 10_000
TIMEOUT_S = 50.0


async def _run() -> tuple[float, float, dict[str, object]]:
    from umcore.api import Context
    from umcore.config.attributes import Configuration, reset_global_configuration

    probe = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    probe.bind(("127.0.0.1", 0))
    port = probe.getsockname()[1]
    probe.close()
    cfg = Configuration()
    cfg.config_text(
        "context resolver_multicast_interface 127.0.0.1\n"
        "context resolver_multicast_address 224.9.10.95\n"
        f"context resolver_multicast_port {port}\n"
        "context transport_tcp_port_low 0\ncontext transport_tcp_port_high 0\n"
        "source transport_tcp_interface 127.0.0.1\n",
        "bench",
    )
    reset_global_configuration(cfg)
    topics = [f"bench.resolution.{i:05d}" for i in range(TOPICS)]
    try:
        async with await Context.create() as a, await Context.create() as b:
            t0 = time.perf_counter()
            for t in topics:
                await a.create_source(t)
            t_sources = time.perf_counter() - t0
            t0 = time.perf_counter()
            for t in topics:
                await b.create_receiver(t)
            async with asyncio.timeout(TIMEOUT_S):
                while sum(len(js.fanouts) for js in b.joined.values()) < TOPICS:
                    await asyncio.sleep(0.005)
            t_join = time.perf_counter() - t0
            stats = {"source side": a.resolver_stats, "receiver side": b.resolver_stats}
            for rs in list(b.receivers.values()):
                for r in list(rs):
                    await r.close()
            for s in list(a.sources):
                await s.close()
    finally:
        reset_global_configuration(None)
    return t_sources, t_join, stats


def _codec_baseline() -> float:
    """Encode and decode TOPICS TIRs with the LBMR codec, as many per datagram as fit."""
    from umcore.wire import lbmr

    t0 = time.perf_counter()
    tirs = [
        lbmr.TIR(f"bench.resolution.{i:05d}", i, lbmr.TCPInfo("127.0.0.1", 14371, 1))
        for i in range(TOPICS)
    ]
    per = 40  # TIRs per datagram, about what fits the default 8192-byte resolver datagram
    for k in range(0, TOPICS, per):
        lbmr.decode(lbmr.encode(lbmr.LBMRPacket(lbmr.LBMR_TYPE_NORMAL, tirs=tirs[k : k + per])))
    return time.perf_counter() - t0


def main() -> None:
    try:
        import uvloop

        runner = uvloop.run
    except ImportError:  # pragma: no cover
        runner = asyncio.run
    t_sources, t_join, stats = runner(_run())
    print(f"{TOPICS} sources created (their TIRs sent) in {t_sources:.2f} s")
    print(f"{TOPICS} receivers resolved and joined in {t_join:.2f} s (multicast TR, loopback)")
    for side, st in stats.items():
        fields = getattr(st, "__slots__", None) or vars(st)
        text = ", ".join(f"{k}={getattr(st, k)}" for k in fields if not k.startswith("_"))
        print(f"  resolver {side}: {text}")
    try:
        base = _codec_baseline()
    except Exception as exc:  # the baseline is informative only
        print(f"(codec baseline unavailable: {exc})")
        return
    print(f"(LBMR codec alone: {TOPICS} TIRs encoded and decoded in {base:.3f} s)")


if __name__ == "__main__":
    main()
