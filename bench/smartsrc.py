"""Smart source send path vs a source's own sends of the same fixed-size messages.

Layout: one process, one loop, multicast topic resolution on loopback, TCP, a receiver in a
second context counting :data:`N` messages of :data:`SIZE` bytes.  Senders:

- **flushed send** (the baseline): ``src.send_nowait(payload, True)`` per message, a ``bytes``
  payload built per message (``bytes(buf)``, what an application filling a buffer does
  without smart sources): every message written on its own, as a smart source's are;
- **smart source**: ``ss.buffer(i)`` filled in place, ``ss.send(i)``: no payload object, the
  header written into the slot;
- **batched send** for reference: ``await src.send(payload)`` with implicit batching (UM's
  smart sources do not batch: a different trade of latency for throughput).

Rounds alternate, best of :data:`ROUNDS`; msgs/s and ratios to the baseline.  ~10 s.
"""

from __future__ import annotations

import asyncio
import time

from bench.hf import _configure

N = 50_000
SIZE = 64
ROUNDS = 3
TIMEOUT_S = 30.0


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

    buf = bytearray(SIZE)
    async with await Context.create() as a, await Context.create() as b:
        await b.create_receiver(topic, on_msg)
        attrs = {"smart_src_max_message_length": str(SIZE)}
        ss = await a.create_smart_source(topic, attributes=attrs) if kind == "smart" else None
        src = ss.source if ss is not None else await a.create_source(topic)
        async with asyncio.timeout(10):
            while src.receivers < 1:
                await asyncio.sleep(0.01)
        start = time.perf_counter()
        if ss is not None:
            slot = ss.buffer(0)
            for i in range(N):
                slot[0:4] = i.to_bytes(4, "big")
                ss.send(0)
                if i & 0xFF == 0:
                    await asyncio.sleep(0)
        elif kind == "flushed":
            for i in range(N):
                buf[0:4] = i.to_bytes(4, "big")
                src.send_nowait(bytes(buf), True)
                if i & 0xFF == 0:
                    await asyncio.sleep(0)
        else:
            for i in range(N):
                buf[0:4] = i.to_bytes(4, "big")
                await src.send(bytes(buf))
            src.flush()
        async with asyncio.timeout(TIMEOUT_S):
            await done.wait()
        elapsed = time.perf_counter() - start
        await src.close()
    return N / elapsed


def main() -> None:
    try:
        import uvloop

        runner = uvloop.run
    except ImportError:  # pragma: no cover
        runner = asyncio.run
    _configure()
    best = {"flushed": 0.0, "smart": 0.0, "batched": 0.0}

    async def run_all() -> None:
        for r in range(ROUNDS):
            for kind in best:
                best[kind] = max(best[kind], await _round(kind, f"bench.ss.{kind}.{r}"))

    runner(run_all())
    base = best["flushed"]
    print(f"   flushed send of bytes:  {base:10,.0f} msgs/s (baseline)")
    print(
        f"   smart source:           {best['smart']:10,.0f} msgs/s  ratio {best['smart'] / base:.2f}"
    )
    print(
        f"   batched send (ref.):    {best['batched']:10,.0f} msgs/s  ratio {best['batched'] / base:.2f}"
    )


if __name__ == "__main__":
    main()
