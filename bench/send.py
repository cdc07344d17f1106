"""The send loop alone: ns per 64-byte message of ``Source.send`` against bench/lbt's raw sender.

Both sides write to a dummy (LBT-RM/LBT-RU: the source socket's ``sendto`` replaced by one that
returns at once; TCP: a writer that keeps nothing), so the figures are the Python cost of
framing, implicit batching (one 2 KB batch per 27 messages) and handing batches on -- no
receiver, no kernel.  The loop calls ``send`` without awaiting (its result is a completed
future) and the event loop does not run, so no timer fires; the LBT data rate limit is off.
Best of :data:`REPEAT` passes of :data:`N` messages per transport.
"""

from __future__ import annotations

import asyncio
import struct
import time
from typing import Any

from bench.lbt import _configure, _RawSender

N = 27 * 4000
REPEAT = 9
SIZE = 64
_T = struct.Struct("!Qd")


class _DummySock:
    def sendto(self, data: bytes, addr: object) -> int:
        return len(data)


class _DummyWriter:
    def write(self, data: bytes) -> None:
        pass


class _DummyTransport:
    def sendto(self, data: bytes, addr: object = None) -> None:
        pass


def _best(send: Any, payloads: list[bytes], after: Any) -> float:
    best = float("inf")
    for _ in range(REPEAT):
        start = time.perf_counter()
        for p in payloads:
            send(p)
        best = min(best, (time.perf_counter() - start) / len(payloads))
        after()
    return best * 1e9


async def _pyum(transport: str, payloads: list[bytes]) -> float:
    from umcore.api import Context

    _configure(
        "lbtrm" if transport == "tcp" else transport,
        "source transport tcp" if transport == "tcp" else "",
    )
    async with await Context.create() as ctx:
        src = await ctx.create_source("bench.send")
        lst: Any = src.writer
        if transport == "tcp":
            lst._writers.append(_DummyWriter())
        else:
            ep = lst.endpoint
            sock = ep.sock
            ep.sock = _DummySock()
            if lst.core.limiter is not None:
                lst.core.limiter.data.budget = 0  # unlimited: the loop's clock does not move
            lst._dest = ("127.0.0.1", 9)
        try:
            return _best(src.send, payloads, src.flush)
        finally:
            if transport == "tcp":
                lst._writers.clear()
            else:
                ep.sock = sock
                lst._dest = None
            await src.close()


async def _all() -> None:
    pad = bytes(SIZE - _T.size)
    payloads = [_T.pack(i, 0.0) + pad for i in range(N)]
    done: asyncio.Future[None] = asyncio.get_running_loop().create_future()
    done.set_result(None)
    raw = _RawSender(_DummyTransport(), done)  # type: ignore[arg-type]
    base = _best(raw.send, payloads, raw.flush)
    print(f"   raw sender (bench/lbt's): {base:6.1f} ns/msg")
    for transport in ("lbtrm", "lbtru", "tcp"):
        ns = await _pyum(transport, payloads)
        print(f"   pyum {transport:5} Source.send: {ns:6.1f} ns/msg  (raw/pyum {base / ns:.2f})")


def main() -> None:
    try:
        import uvloop

        runner: Any = uvloop.run
    except ImportError:  # pragma: no cover - uvloop is a dependency
        runner = asyncio.run
    runner(_all())


if __name__ == "__main__":
    main()
