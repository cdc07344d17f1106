"""Client throughput: a pyum source -> receiver over the TCP transport vs a raw uvloop socket.

Both sides run in one process on one uvloop loop (2-core machine shared with others: only the
ratio means anything).  pyum: two contexts, multicast topic resolution on loopback, 64-byte
messages, implicit batching with its defaults (flush at 2048 bytes), delivery to a receiver
callback as :class:`~umcore.api.Message` objects.  Baseline: an asyncio Protocol pair carrying
the same 64-byte messages, each framed by a 2-byte length, batched into 2048-byte writes, parsed
one by one on the receiving side into a bytes object handed to a callback.  Prints msgs/s of
each (best of three alternating rounds) and the ratio (target >= 70 %).
"""

from __future__ import annotations

import asyncio
import socket
import struct
import time
from collections.abc import Callable

N = 500_000
SIZE = 64
BATCH = 2048
TIMEOUT_S = 50.0


async def _pyum(n: int) -> float:
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
        "context resolver_multicast_address 224.9.10.98\n"
        f"context resolver_multicast_port {port}\n"
        "context transport_tcp_port_low 0\ncontext transport_tcp_port_high 0\n"
        "source transport_tcp_interface 127.0.0.1\n",
        "bench",
    )
    reset_global_configuration(cfg)
    done = asyncio.Event()
    count = 0

    def on_msg(msg: m.Message) -> None:
        nonlocal count
        if msg.type == m.MSG_DATA:
            count += 1
            if count == n:
                done.set()

    try:
        async with await Context.create() as a, await Context.create() as b:
            await b.create_receiver("bench", on_msg)
            src = await a.create_source("bench")
            async with asyncio.timeout(10):
                while src.receivers < 1:
                    await asyncio.sleep(0.01)
            payload = bytes(SIZE)
            send = src.send
            start = time.perf_counter()
            for _ in range(n):
                await send(payload)
            src.flush()
            async with asyncio.timeout(TIMEOUT_S):
                await done.wait()
            elapsed = time.perf_counter() - start
            await src.close()
    finally:
        reset_global_configuration(None)
    return n / elapsed


class _RawReceiver(asyncio.Protocol):
    def __init__(self, on_message: Callable[[bytes], None]) -> None:
        self.pending = b""
        self.on_message = on_message

    def data_received(self, data: bytes) -> None:
        buf = self.pending + data if self.pending else data
        pos, end = 0, len(buf)
        unpack = struct.Struct("!H").unpack_from
        cb = self.on_message
        while end - pos >= 2:
            (length,) = unpack(buf, pos)
            if end - pos - 2 < length:
                break
            cb(buf[pos + 2 : pos + 2 + length])
            pos += 2 + length
        self.pending = buf[pos:]


class _RawSender(asyncio.Protocol):
    def __init__(self) -> None:
        self.paused: asyncio.Future[None] | None = None

    def pause_writing(self) -> None:
        self.paused = asyncio.get_running_loop().create_future()

    def resume_writing(self) -> None:
        if self.paused is not None and not self.paused.done():
            self.paused.set_result(None)
        self.paused = None


async def _raw(n: int) -> float:
    loop = asyncio.get_running_loop()
    done = asyncio.Event()
    count = 0

    def on_message(data: bytes) -> None:
        nonlocal count
        count += 1
        if count == n:
            done.set()

    server = await loop.create_server(lambda: _RawReceiver(on_message), "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    transport, proto = await loop.create_connection(_RawSender, "127.0.0.1", port)
    transport.set_write_buffer_limits(high=65536)
    frame = struct.pack("!H", SIZE) + bytes(SIZE)
    buf = bytearray()
    start = time.perf_counter()
    for _ in range(n):
        if proto.paused is not None:
            await proto.paused
        buf += frame
        if len(buf) >= BATCH:
            transport.write(bytes(buf))
            buf.clear()
    if buf:
        transport.write(bytes(buf))
    async with asyncio.timeout(TIMEOUT_S):
        await done.wait()
    elapsed = time.perf_counter() - start
    transport.close()
    server.close()
    return n / elapsed


ROUNDS = 3  # alternate raw/pyum rounds and keep each side's best: the machine is shared


async def _both() -> tuple[float, float]:
    raw = ours = 0.0
    for _ in range(ROUNDS):
        raw = max(raw, await _raw(N))
        ours = max(ours, await _pyum(N))
    return raw, ours


def main() -> None:
    try:
        import uvloop

        runner = uvloop.run
    except ImportError:  # pragma: no cover
        runner = asyncio.run
    raw, ours = runner(_both())
    print(f"raw uvloop socket, {SIZE}-byte length-framed messages: {raw:,.0f} msgs/s")
    print(f"pyum TCP transport, {SIZE}-byte messages, implicit batching: {ours:,.0f} msgs/s")
    print(f"ratio pyum/raw: {ours / raw:.2f} (target >= 0.70; goal 300,000 msgs/s)")


if __name__ == "__main__":
    main()
