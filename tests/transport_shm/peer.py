"""The source process of the LBT-IPC / LBT-SMX process tests (``python -m tests.transport_shm.peer``).

It resolves topics over multicast on loopback (group and port from the command line, as the
test's receiver), waits until a receiver attached (bounded), then sends ``--count`` messages
(``--count 0``: until killed), each 32 bytes: its index as 8 big-endian bytes, four times (a
receiver can tell a torn message).  ``--zero-copy`` sends LBT-SMX messages with the buffer
calls (acquire, fill, complete).  Prints ``ready <segment>`` when it has a receiver and
``done`` after closing its source cleanly.
"""

from __future__ import annotations

import argparse
import asyncio
import sys

from umcore.api import Context
from umcore.config.attributes import Configuration, reset_global_configuration
from umcore.engine import shm
from umcore.errors import WouldBlock

WAIT_RECEIVER_S = 20.0


def configure(group: str, port: int, transport: str, extra: str = "") -> None:
    cfg = Configuration()
    cfg.config_text(
        f"""
        context resolver_multicast_interface 127.0.0.1
        context resolver_multicast_address {group}
        context resolver_multicast_port {port}
        context transport_tcp_port_low 0
        context transport_tcp_port_high 0
        source transport_tcp_interface 127.0.0.1
        source transport {transport}
        {extra}
        """,
        "test",
    )
    reset_global_configuration(cfg)


def message(i: int) -> bytes:
    return i.to_bytes(8, "big") * 4


async def run(args: argparse.Namespace) -> int:
    configure(args.group, args.port, args.transport, args.extra)
    async with await Context.create() as ctx:
        src = await ctx.create_source(args.topic)
        loop = asyncio.get_running_loop()
        deadline = loop.time() + WAIT_RECEIVER_S
        while src.receivers < 1:
            if loop.time() > deadline:
                print("no receiver", flush=True)
                return 1
            await asyncio.sleep(0.01)
        print(f"ready {src.source_string}", flush=True)
        i = 0
        bufs = shm.smx_buffers(src) if args.zero_copy else None
        while args.count == 0 or i < args.count:
            if bufs is not None:
                try:
                    view = bufs.acquire(32)
                except WouldBlock:
                    bufs.complete()
                    await bufs.wait_for_room()
                    continue
                view[:] = message(i)
                view.release()
                if i % 16 == 15:
                    bufs.complete()  # a batch of 16 (SMX's "intelligent batching")
            else:
                await src.send(message(i))
            i += 1
            if args.count == 0 and i % 256 == 0:
                await asyncio.sleep(0.001)  # until killed: a steady stream, not a flood
        if bufs is not None:
            bufs.complete()
        src.flush()
        await src.close()
    print("done", flush=True)
    return 0


def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--group", default="224.9.10.97")
    p.add_argument("--port", type=int, required=True)
    p.add_argument("--transport", default="lbtipc")
    p.add_argument("--topic", default="shm-test")
    p.add_argument("--count", type=int, default=1000)
    p.add_argument("--zero-copy", action="store_true")
    p.add_argument("--extra", default="", help="more configuration lines (\\n separated)")
    args = p.parse_args()
    args.extra = args.extra.replace("\\n", "\n")
    return asyncio.run(run(args))


if __name__ == "__main__":
    sys.exit(main())
