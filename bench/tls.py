"""Encrypted and compressed TCP: pyum's TCP transport with TLS, with LZ4, with both, vs plain.

Layout: one process, one uvloop loop, two contexts (multicast topic resolution on loopback), a
source and a receiver on the TCP transport with implicit batching (its defaults), the sender
doing ``await src.send(payload)`` per message, the receiver counting messages in its
``on_message`` callback.  The same run is made four ways -- plain, ``use_tls 1`` (TLS 1.2, UM's
default suite DHE-RSA-AES256-GCM-SHA384, RSA 2048 certificate made for the run),
``compression lz4``, both -- with 64-byte and 1,000-byte messages.  The payloads are
market-data-like quotes (text fields that repeat, digits that change), which is what LZ4 is
for; rounds alternate the modes and each keeps its best of :data:`ROUNDS` (the 2-core machine is
shared: only the ratios to plain TCP measured in the same run mean anything).

Prints msgs/s and MB/s of each, each mode's ratio to plain TCP (goal with TLS: >= 0.5 at 1,000
bytes) and the compression ratio LZ4 achieved on the data connection (bytes the TCP session
wrote / bytes after LZ4 framing, from the context's counters).  Every message is counted by the
receiver: a run that loses one fails (the bench raises).
"""

from __future__ import annotations

import asyncio
import functools
import random
import socket
import tempfile
import time
from pathlib import Path

MODES = ("plain", "tls", "lz4", "tls+lz4")
SIZES = {64: 100_000, 1000: 30_000}  # message size -> messages per run (each run ~0.2-1 s)
ROUNDS = 2
# Distinct payloads cycled through (a block of LZ4 must not find whole messages repeated).
DISTINCT = 2048
TIMEOUT_S = 60.0


SYMBOLS = [b"EUR/USD", b"USD/JPY", b"GBP/USD", b"AUD/USD", b"USD/CHF", b"USD/CAD", b"EUR/GBP",
           b"EUR/JPY", b"NZD/USD", b"EUR/CHF", b"IBM", b"MSFT", b"AAPL", b"ORCL", b"INTC"]  # fmt: skip


def quote(i: int, size: int) -> bytes:
    """A market-data-like message of exactly ``size`` bytes: quote records of several symbols
    (field names and symbols repeat; prices, sizes and sequence numbers vary; fixed seed)."""
    rnd = random.Random(i)
    out = bytearray()
    while len(out) < size:
        sym = rnd.choice(SYMBOLS)
        out += b"sym=%s|bid=%d.%05d|ask=%d.%05d|bsz=%d|asz=%d|venue=%s|seq=%d|\n" % (
            sym, rnd.randint(1, 300), rnd.randrange(100000), rnd.randint(1, 300),
            rnd.randrange(100000), rnd.randrange(1, 50) * 100000, rnd.randrange(1, 50) * 100000,
            rnd.choice((b"EBS", b"RTRS", b"NYSE", b"ARCA")), i * 1000 + len(out),
        )  # fmt: skip
    return bytes(out[:size])


@functools.cache
def _payloads(size: int) -> list[bytes]:
    return [quote(i, size) for i in range(DISTINCT)]


async def _run(mode: str, size: int, n: int, certs: dict[str, str]) -> tuple[float, float]:
    """msgs/s of one run, and its compression ratio (0 without LZ4)."""
    from umcore.api import Context
    from umcore.api import message as m
    from umcore.config.attributes import Configuration, reset_global_configuration

    probe = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    probe.bind(("127.0.0.1", 0))
    port = probe.getsockname()[1]
    probe.close()
    cfg = Configuration()
    cfg.config_text(
        "context resolver_multicast_interface 127.0.0.1\n"
        "context resolver_multicast_address 224.9.23.95\n"
        f"context resolver_multicast_port {port}\n"
        "context transport_tcp_port_low 0\ncontext transport_tcp_port_high 0\n"
        "context request_tcp_port_low 0\ncontext request_tcp_port_high 0\n"
        "source transport_tcp_interface 127.0.0.1\n",
        "bench",
    )
    reset_global_configuration(cfg)
    opts: dict[str, str] = {}
    if "tls" in mode:
        opts.update(certs)
    if "lz4" in mode:
        opts["compression"] = "lz4"
    done = asyncio.Event()
    count = 0

    def on_msg(msg: m.Message) -> None:
        nonlocal count
        if msg.type == m.MSG_DATA:
            count += 1
            if count == n:
                done.set()

    payloads = _payloads(size)
    try:
        async with await Context.create(opts) as a, await Context.create(opts) as b:
            await b.create_receiver("bench.tls", on_msg)
            src = await a.create_source("bench.tls")
            async with asyncio.timeout(10):
                while src.receivers < 1:
                    await asyncio.sleep(0.01)
            send = src.send
            start = time.perf_counter()
            for i in range(n):
                await send(payloads[i % DISTINCT])
            src.flush()
            async with asyncio.timeout(TIMEOUT_S):
                await done.wait()
            elapsed = time.perf_counter() - start
            sec = a.security
            ratio = sec.bytes_uncompressed / sec.bytes_compressed if sec.bytes_compressed else 0.0
            await src.close()
    finally:
        reset_global_configuration(None)
    if count != n:
        raise AssertionError(f"{mode} {size} B: {count} of {n} messages received")
    return n / elapsed, ratio


async def _all(certs: dict[str, str]) -> dict[tuple[str, int], tuple[float, float]]:
    best: dict[tuple[str, int], tuple[float, float]] = {}
    for _ in range(ROUNDS):
        for size, n in SIZES.items():
            for mode in MODES:
                rate, ratio = await _run(mode, size, n, certs)
                old = best.get((mode, size), (0.0, 0.0))
                best[(mode, size)] = (max(old[0], rate), ratio or old[1])
    return best


def main() -> None:
    from umcore.tools.certs import make_certificates

    try:
        import uvloop

        runner = uvloop.run
    except ImportError:  # pragma: no cover
        runner = asyncio.run
    with tempfile.TemporaryDirectory(prefix="pyum-bench-tls-") as tmp:
        certs = make_certificates(Path(tmp), "bench").options()
        best = runner(_all(certs))
    for size in SIZES:
        plain = best[("plain", size)][0]
        for mode in MODES:
            rate, ratio = best[(mode, size)]
            extra = f", LZ4 ratio {ratio:.1f}:1" if ratio else ""
            print(
                f"TCP {mode:8} {size:5}-byte quotes: {rate:10,.0f} msgs/s "
                f"{rate * size / 1e6:7.1f} MB/s  ratio to plain {rate / plain:.2f}{extra}"
            )
    tls_1000 = best[("tls", 1000)][0] / best[("plain", 1000)][0]
    print(f"TLS / plain at 1000 bytes: {tls_1000:.2f} (goal >= 0.5)")


if __name__ == "__main__":
    main()
