"""Client throughput: a pyum source -> receiver over the TCP transport vs a raw uvloop socket.

Layout, the same for both: one process, one uvloop loop, the sending loop and the receiving
protocol on it, 500,000 messages of 64 bytes over a loopback TCP connection (the 2-core machine
is shared with others: only the ratio means anything).  Rounds alternate raw / pyum and each
side keeps its best of :data:`ROUNDS`.

- **pyum**: two contexts, multicast topic resolution on loopback, implicit batching with its
  defaults (a write once the batch holds 2048 bytes); the sender does ``await src.send(payload)``
  per message; the receiver gets one :class:`~umcore.api.Message` per message in its
  ``on_message`` callback (the default API).  A second pyum figure uses the opt-in batched
  delivery (``on_messages``: lists of messages) with the same sender.
- **raw baseline**: the least a messaging library has to do per message on a uvloop Protocol:
  ``await sender.send(payload)`` frames the message with a 2-byte length into a batch buffer
  (written once it holds 2048 bytes; it awaits only while the transport is paused), and the
  receiving Protocol parses each frame into a ``bytes`` handed to a callback.

Prints msgs/s of each and the ratios (target >= 0.70; goal >= 300,000 msgs/s).
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


async def _pyum(n: int, batched: bool = False) -> float:
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

    def on_msgs(msgs: list[m.Message]) -> None:
        nonlocal count
        for msg in msgs:
            if msg.type == m.MSG_DATA:
                count += 1
        if count == n:
            done.set()

    try:
        async with await Context.create() as a, await Context.create() as b:
            if batched:
                await b.create_receiver("bench", on_messages=on_msgs)
            else:
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
    """The baseline's sending side: length framing into a 2048-byte batch, back-pressure."""

    def __init__(self) -> None:
        self.paused: asyncio.Future[None] | None = None
        self.transport: asyncio.Transport | None = None
        self.buf = bytearray()
        self.done: asyncio.Future[None] | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]
        self.done = asyncio.get_running_loop().create_future()
        self.done.set_result(None)

    def send(self, payload: bytes) -> asyncio.Future[None]:
        if self.paused is not None:
            return self.paused  # the caller awaits the drain, as pyum's blocking send does
        buf = self.buf
        buf += _LEN(len(payload))
        buf += payload
        if len(buf) >= BATCH:
            assert self.transport is not None
            self.transport.write(bytes(buf))
            buf.clear()
        assert self.done is not None
        return self.done

    def flush(self) -> None:
        if self.buf and self.transport is not None:
            self.transport.write(bytes(self.buf))
            self.buf.clear()

    def pause_writing(self) -> None:
        self.paused = asyncio.get_running_loop().create_future()

    def resume_writing(self) -> None:
        if self.paused is not None and not self.paused.done():
            self.paused.set_result(None)
        self.paused = None


_LEN = struct.Struct("!H").pack


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
    payload = bytes(SIZE)
    send = proto.send
    start = time.perf_counter()
    i = 0
    while i < n:
        fut = send(payload)
        if fut is not proto.done:
            await fut  # paused: wait, then send this message again
            continue
        await fut
        i += 1
    proto.flush()
    async with asyncio.timeout(TIMEOUT_S):
        await done.wait()
    elapsed = time.perf_counter() - start
    transport.close()
    server.close()
    return n / elapsed


ROUNDS = 3  # alternate raw/pyum rounds and keep each side's best: the machine is shared


async def _all() -> tuple[float, float, float]:
    raw = ours = batched = 0.0
    for _ in range(ROUNDS):
        raw = max(raw, await _raw(N))
        ours = max(ours, await _pyum(N))
        batched = max(batched, await _pyum(N, batched=True))
    return raw, ours, batched


def main() -> None:
    try:
        import uvloop

        runner = uvloop.run
    except ImportError:  # pragma: no cover
        runner = asyncio.run
    raw, ours, batched = runner(_all())
    print(f"raw uvloop socket, {SIZE}-byte length-framed messages: {raw:,.0f} msgs/s")
    print(f"pyum TCP, {SIZE}-byte messages, on_message per message: {ours:,.0f} msgs/s")
    print(f"pyum TCP, {SIZE}-byte messages, on_messages (batched): {batched:,.0f} msgs/s")
    print(f"ratio pyum/raw: {ours / raw:.2f} per message, {batched / raw:.2f} batched delivery")
    print("(target >= 0.70; goal 300,000 msgs/s)")


if __name__ == "__main__":
    main()
