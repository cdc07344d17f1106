"""DRO peer link throughput: 64-byte messages over a peer link vs the same bytes over raw TCP.

Layout: one process, one loop (uvloop when installed), two peer portals on loopback (an acceptor
and an initiator, :class:`umcore.aio.dropeer.PeerPortalLink` over :class:`umcore.dro.peer.PeerLink`),
the initiator sending :data:`N` forwarded frames of 64 bytes as fast as the link takes them
(``send_data``, waiting while ``max-queue`` is full), the acceptor counting frames in order.  The
link is measured plain, with LZ4, with TLS (TLS 1.2, UM's default DHE-RSA-AES256-GCM-SHA384, an
RSA 2048 certificate made for the run) and with both, a call per frame (``send_data``,
``take_frames``), and plain as the daemon's peer portal drives it ("runs": ``send_run`` of a
queue run of 256 frames, ``take_frame_runs``).  The baseline is a raw asyncio TCP stream
carrying the same bytes the plain link carries (one 76-byte LBMC data message per frame, written
in the same 256-message blocks), twice: "raw" writes bytes built beforehand and only counts them
(the I/O ceiling), "framed" packs each message's header as it sends, slices each payload out as it
reads and checks the order as the link's reader does (the least per-message Python work any
framing costs; the fair "direct").  Payloads are market-data-like quotes (fields repeat,
digits change), which is what LZ4 is for.  Rounds alternate the modes and each keeps its best
of :data:`ROUNDS` (the machine is shared: only ratios measured in the same run mean anything).

Prints msgs/s and MB/s (payload) of each, each mode's ratio to raw TCP (the issue's goal for
plain: 0.70 of direct or better) and LZ4's compression ratio.  A run that loses or reorders a
message fails (the bench raises).
"""

from __future__ import annotations

import asyncio
import random
import struct
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

N = 200_000
SIZE = 64
ROUNDS = 2
BLOCK = 256  # messages per write of the raw baseline (the sender flushes the link as often)
DISTINCT = 1024
TIMEOUT_S = 60.0
# "runs": the plain link as the daemon's peer portal drives it, a queue run of BLOCK frames per
# ``send_run`` and the reader taking ``take_frame_runs`` (the other modes: a call per frame)
MODES = ("plain", "runs", "lz4", "tls", "lz4+tls")

SYMBOLS = [b"EUR/USD", b"USD/JPY", b"GBP/USD", b"IBM", b"MSFT", b"AAPL", b"ORCL", b"INTC"]


def quote(i: int) -> bytes:
    rnd = random.Random(i)
    out = b"%s|b=%d.%05d|a=%d.%05d|s=%d|q=%d|" % (
        rnd.choice(SYMBOLS), rnd.randint(1, 300), rnd.randrange(100000), rnd.randint(1, 300),
        rnd.randrange(100000), rnd.randrange(1, 50) * 100, i,
    )  # fmt: skip
    return (out * 2)[:SIZE]


PAYLOADS = [quote(i) for i in range(DISTINCT)]


async def raw_tcp(framed: bool) -> float:
    """msgs/s of the same bytes over a plain asyncio stream.  ``framed`` False: the bytes are
    built beforehand and the reader only counts them (the I/O ceiling); True: the sender packs
    each message's 12-byte header and payload as it goes, the reader walks every message and
    slices its payload out (the least per-message Python any framing costs)."""
    hdr = struct.Struct("!BBHII")
    msg_len = hdr.size + SIZE
    total = N * msg_len
    done = asyncio.Event()
    got = 0
    count = 0
    disorder = 0

    async def reader(r: asyncio.StreamReader, w: asyncio.StreamWriter) -> None:
        nonlocal got, count, disorder
        tail = b""
        unpack = hdr.unpack_from
        while got < total:
            data = await r.read(1 << 16)
            if not data:
                break
            got += len(data)
            if framed:
                src = tail + data if tail else data
                view = memoryview(src)
                pos, end = 0, len(src)
                payloads = []
                while end - pos >= 12:
                    _, _, length, _, sqn = unpack(src, pos)
                    if end - pos < length:
                        break
                    payloads.append((sqn, view[pos + 12 : pos + length]))
                    pos += length
                for sqn, _ in payloads:  # the consumer's order check, as the link's does
                    disorder += sqn != count
                    count = sqn + 1
                tail = src[pos:]
        done.set()
        w.close()

    server = await asyncio.start_server(reader, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    _, w = await asyncio.open_connection("127.0.0.1", port)
    pack = hdr.pack
    blocks = []
    if not framed:
        for first in range(0, N, BLOCK):
            blocks.append(
                b"".join(
                    pack(0, 0, msg_len, 0, i) + PAYLOADS[i % DISTINCT]
                    for i in range(first, min(N, first + BLOCK))
                )
            )
    start = time.perf_counter()
    if framed:
        block = bytearray()
        for i in range(N):
            block += pack(0, 0, msg_len, 0, i)
            block += PAYLOADS[i % DISTINCT]
            if i % BLOCK == BLOCK - 1:
                w.write(bytes(block))
                block = bytearray()
                await w.drain()
        w.write(bytes(block))
    else:
        for chunk in blocks:
            w.write(chunk)
            await w.drain()
    async with asyncio.timeout(TIMEOUT_S):
        await done.wait()
    elapsed = time.perf_counter() - start
    w.close()
    server.close()
    await server.wait_closed()
    if got != total or (framed and (count != N or disorder)):
        raise AssertionError(f"raw TCP: {got} of {total} bytes, {count} messages")
    return N / elapsed


def _xml(role: str, port: int, mode: str, certs: tuple[str, str]) -> str:
    sec = "<compression>LZ4</compression>" if "lz4" in mode else ""
    if "tls" in mode:
        sec += (
            f"<tls><certificate>{certs[0]}</certificate><certificate-key>{certs[1]}"
            f"</certificate-key><trusted-certificates>{certs[0]}</trusted-certificates></tls>"
        )
    end = (
        f"<initiator><address>127.0.0.1</address><port>{port}</port></initiator>"
        if role == "initiator"
        else "<acceptor><listen-port>0</listen-port></acceptor>"
    )
    return (
        '<tnw-gateway version="1.0"><daemon><name>bench</name></daemon><portals><peer>'
        f"<name>P</name><single-tcp><interface>127.0.0.1</interface>{sec}{end}</single-tcp>"
        "</peer></portals></tnw-gateway>"
    )


async def peer_link(mode: str, certs: tuple[str, str]) -> tuple[float, float]:
    """msgs/s over a peer link in ``mode``, and LZ4's ratio (0 without LZ4)."""
    from umcore.aio.dropeer import PeerPortalLink
    from umcore.config.dro import Peer, load_text
    from umcore.dro import SourceKey
    from umcore.dro.peer import PeerLink

    def portal(role: str, port: int = 0) -> Peer:
        p = load_text(_xml(role, port, mode, certs), "<bench>").portal("P")
        assert isinstance(p, Peer)
        return p

    runs = mode == "runs"
    received = 0
    disorder = 0
    done = asyncio.Event()
    up = asyncio.Event()

    acc_cfg = portal("acceptor")
    acc = PeerLink(acc_cfg, 1, "a")

    def on_acc() -> None:
        nonlocal received, disorder
        acc.take_events()
        if runs:  # frames carry no number here: each checked against the payload expected
            for _k, frames in acc.take_frame_runs():
                for f in frames:
                    disorder += f != PAYLOADS[received % DISTINCT]
                    received += 1
        else:
            for _k, sqn, _d in acc.take_frames():
                disorder += sqn != received
                received = sqn + 1
        if received >= N:
            done.set()

    a = PeerPortalLink(acc_cfg, acc, on_activity=on_acc)
    await a.start()
    ini_cfg = portal("initiator", a.port)
    ini = PeerLink(ini_cfg, 2, "b")

    def on_ini() -> None:
        ini.take_events()
        if ini.up:
            up.set()

    b = PeerPortalLink(ini_cfg, ini, on_activity=on_ini)
    await b.start()
    try:
        async with asyncio.timeout(TIMEOUT_S):
            await up.wait()
        key = SourceKey(bytes(range(32)), "bench.topic")
        loop = asyncio.get_running_loop()
        send = ini.send_data
        # a run's frames back to back in one buffer, as the core's queue holds them
        blocks = [b"".join(PAYLOADS[b : b + BLOCK]) for b in range(0, DISTINCT, BLOCK)]
        start = time.perf_counter()
        now = loop.time()  # one clock reading per turn of the loop, as a runtime would
        first = 0
        while runs and first < N:
            block = memoryview(blocks[first % DISTINCT // BLOCK])
            want = min(BLOCK, N - first)
            at = 0
            while at < want:
                if not ini.writable:
                    b.flush()
                    if not await b.wait_writable():
                        raise AssertionError(f"{mode}: link went down")
                    now = loop.time()
                at += ini.send_run(key, first + at, block[at * SIZE :], SIZE, want - at, now)
            first += want
            b.flush()
            await asyncio.sleep(0)  # a yield: let the loop write and read
            now = loop.time()
        for i in range(N if not runs else 0):
            if not ini.writable:
                b.flush()
                if not await b.wait_writable():
                    raise AssertionError(f"{mode}: link went down")
                now = loop.time()
            send(key, i, PAYLOADS[i % DISTINCT], now)
            if i % BLOCK == BLOCK - 1:
                b.flush()
                await asyncio.sleep(0)  # a yield: let the loop write and read
                now = loop.time()
        b.flush()
        async with asyncio.timeout(TIMEOUT_S):
            await done.wait()
        elapsed = time.perf_counter() - start
        sec = b.security
        ratio = sec.bytes_uncompressed / sec.bytes_compressed if sec.bytes_compressed else 0.0
    finally:
        await b.close()
        await a.close()
    if received != N or disorder:
        raise AssertionError(f"{mode}: {received} of {N} frames, {disorder} out of order")
    return N / elapsed, ratio


async def _all(certs: tuple[str, str]) -> dict[str, tuple[float, float]]:
    best: dict[str, tuple[float, float]] = {}
    for _ in range(ROUNDS):
        for name, framed in (("raw TCP", False), ("framed", True)):
            rate = await raw_tcp(framed)
            best[name] = (max(best.get(name, (0.0, 0.0))[0], rate), 0.0)
        for mode in MODES:
            rate, ratio = await peer_link(mode, certs)
            old = best.get(mode, (0.0, 0.0))
            best[mode] = (max(old[0], rate), ratio or old[1])
    return best


def main() -> None:
    import logging

    from umcore.tools.certs import make_certificates

    logging.getLogger("umcore.aio.dropeer").setLevel(logging.WARNING)
    runner: Callable[..., Any]
    try:
        import uvloop

        runner = uvloop.run
    except ImportError:  # pragma: no cover - uvloop is a dependency
        runner = asyncio.run
    with tempfile.TemporaryDirectory(prefix="pyum-bench-dropeer-") as tmp:
        files = make_certificates(Path(tmp), "bench-dro")
        best = runner(_all((str(files.certificate), str(files.key))))
    raw, framed = best["raw TCP"][0], best["framed"][0]
    print(f"   {N:,} messages of {SIZE} bytes, best of {ROUNDS} rounds")
    for mode, (rate, ratio) in best.items():
        mb = rate * SIZE / 1e6
        extra = f"  LZ4 ratio {ratio:.2f}" if ratio else ""
        print(
            f"   {mode:<8} {rate:>11,.0f} msgs/s {mb:6.1f} MB/s  {rate / raw:5.2f} of raw TCP"
            f"  {rate / framed:5.2f} of framed TCP{extra}"
        )
    print(
        f"   goal: plain >= 0.70 of direct -> {best['plain'][0] / framed:.2f} of framed TCP "
        f"(raw TCP moves pre-built bytes: {best['plain'][0] / raw:.2f})"
    )


if __name__ == "__main__":
    main()
