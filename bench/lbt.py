"""LBT-RM and LBT-RU throughput vs a raw UDP socket pair, with and without injected loss; latency.

Layout, the same for every run: one process, one uvloop loop, the sending loop and the receiving
side on it, :data:`N` messages of 64 bytes over loopback, implicit batching (a datagram once the
batch holds 2048 bytes).  The sender yields to the loop every :data:`YIELD_EVERY` messages (so
the receiver drains its socket; both sides alike).  Rounds alternate and each figure is the best
of :data:`ROUNDS` (the 2-core machine is shared: only ratios mean anything).

- **raw baseline**: the least a datagram messaging library does per message: the sender frames
  each message with the same 12-byte LBMC data header into a batch, prefixes the batch with a
  20-byte transport header and ``sendto``\\s it at 2048 bytes; the receiving
  ``DatagramProtocol`` walks the messages of each datagram and hands each to a callback as
  ``bytes``.  The same datagrams as LBT-RM's, minus everything reliable.
- **pyum**: two contexts (multicast topic resolution on loopback), ``source transport lbtrm`` /
  ``lbtru`` with the data rate limit raised to 1 Gbit/s (UM's 10 Mbit/s default would measure
  the limiter), ``await src.send(payload)`` per message, one
  :class:`~umcore.api.Message` per message in ``on_message``.  Then again with 1 % of the
  receiver's datagrams dropped (``pyum_fault_drop_receive``, a pyum-only setting): NAKs and
  retransmissions must repair everything (checked: every message, in order, no loss event).
- **latency**: :data:`LAT_RATE` messages/s offered for :data:`LAT_SECONDS`, each message
  carrying its *intended* send time; p50/p99 of (delivery time - intended time), lossless and
  with 1 % loss.  Implicit batching holds a message until the batch reaches 2048 bytes (or
  200 ms pass), which is most of the figure at this rate.

Prints msgs/s, the ratios to the raw baseline (target >= 0.70), the lossy/lossless ratios
(target >= 0.80) and the latency percentiles.
"""

from __future__ import annotations

import asyncio
import socket
import struct
import time
from typing import Any

N = 200_000
SIZE = 64
BATCH = 2048
YIELD_EVERY = 64
ROUNDS = 2
TIMEOUT_S = 30.0
LOSS = 0.01
LAT_RATE = 20_000.0
LAT_SECONDS = 2.0

_HDR = struct.Struct("!BBHII")  # LBMC data header: ver/type, next, msglen, tidx, sqn
_T = struct.Struct("!Qd")  # payload head: counter, intended send time


def _free_port() -> int:
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    s.bind(("127.0.0.1", 0))
    port = int(s.getsockname()[1])
    s.close()
    return port


# ------------------------------------------------------------------------------ raw baseline
class _RawReceiver(asyncio.DatagramProtocol):
    def __init__(self, on_msg: Any) -> None:
        self.on_msg = on_msg

    def datagram_received(self, data: bytes, addr: Any) -> None:
        pos = 20
        end = len(data)
        on_msg = self.on_msg
        while pos + 12 <= end:
            msglen = data[pos + 2] << 8 | data[pos + 3]
            on_msg(data[pos + 12 : pos + msglen])
            pos += msglen


async def _raw(n: int) -> float:
    loop = asyncio.get_running_loop()
    done = asyncio.Event()
    count = 0

    def on_msg(payload: bytes) -> None:
        nonlocal count
        count += 1
        if count == n:
            done.set()

    rsock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    rsock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 8 * 1024 * 1024)
    rsock.bind(("127.0.0.1", 0))
    rtr, _ = await loop.create_datagram_endpoint(lambda: _RawReceiver(on_msg), sock=rsock)
    str_, _ = await loop.create_datagram_endpoint(
        asyncio.DatagramProtocol, remote_addr=rsock.getsockname()
    )
    head = bytes(20)
    pack = _HDR.pack
    payload = bytes(SIZE)
    start = time.perf_counter()
    parts: list[bytes] = []
    length = 0
    sqn = 0
    async with asyncio.timeout(TIMEOUT_S):
        for i in range(n):
            parts.append(pack(0, 0, 12 + SIZE, 0, sqn))
            parts.append(payload)
            sqn += 1
            length += 12 + SIZE
            if length >= BATCH:
                str_.sendto(head + b"".join(parts))
                parts.clear()
                length = 0
            if i % YIELD_EVERY == YIELD_EVERY - 1:
                await asyncio.sleep(0)
        if parts:
            str_.sendto(head + b"".join(parts))
        await done.wait()
    elapsed = time.perf_counter() - start
    str_.close()
    rtr.close()
    return n / elapsed


# ------------------------------------------------------------------------------ pyum
def _configure(transport: str) -> None:
    from umcore.config.attributes import Configuration, reset_global_configuration

    group = "224.10.88.8"
    text = f"""
        context resolver_multicast_interface 127.0.0.1
        context resolver_multicast_address 224.9.10.95
        context resolver_multicast_port {_free_port()}
        context request_tcp_bind_request_port 0
        context transport_lbtru_port_low 0
        context transport_lbtru_port_high 0
        context transport_lbtrm_source_port_low 0
        context transport_lbtrm_source_port_high 0
        context transport_lbtrm_multicast_address_low {group}
        context transport_lbtrm_multicast_address_high {group}
        context transport_{transport}_data_rate_limit 1000000000
        context transport_{transport}_retransmit_rate_limit 100000000
        source transport {transport}
        source transport_lbtrm_destination_port {_free_port()}
        source transport_lbtru_interface 127.0.0.1
        receiver transport_lbtru_port_low 0
        receiver transport_lbtru_port_high 0
        receiver transport_lbtru_interface 127.0.0.1
        """
    cfg = Configuration()
    cfg.config_text(text, "bench")
    reset_global_configuration(cfg)


async def _pyum(
    transport: str, n: int, loss: float, rate: float = 0.0
) -> tuple[float, list[float], int]:
    """(msgs/s, latencies in seconds when ``rate`` > 0, NAKs sent)."""
    from umcore.api import Context
    from umcore.api import message as m
    from umcore.config.attributes import ContextAttributes, reset_global_configuration

    _configure(transport)
    loop = asyncio.get_running_loop()
    done = asyncio.Event()
    bos = asyncio.Event()
    count = 0
    bad: list[str] = []
    lat: list[float] = []
    unpack = _T.unpack_from

    def on_msg(msg: m.Message) -> None:
        nonlocal count
        if msg.type == m.MSG_DATA:
            i, intended = unpack(msg.data)
            if i != count:
                bad.append(f"message {i} where {count} was expected")
            count += 1
            if rate:
                lat.append(loop.time() - intended)
            if count == n:
                done.set()
        elif msg.type == m.MSG_BOS:
            bos.set()
        else:
            bad.append(f"event {msg.type}")

    rattr = ContextAttributes.create()
    rattr.set("pyum_fault_drop_receive", str(loss))
    try:
        async with await Context.create() as a, await Context.create(rattr) as b:
            rcv = await b.create_receiver("bench.lbt", on_msg)
            src = await a.create_source("bench.lbt")
            await asyncio.wait_for(bos.wait(), 10)
            pad = bytes(SIZE - _T.size)
            pack = _T.pack
            send = src.send
            start = time.perf_counter()
            t0 = loop.time() + 0.01
            async with asyncio.timeout(TIMEOUT_S):
                for i in range(n):
                    if rate:
                        intended = t0 + i / rate
                        if i % 16 == 0 and intended > loop.time():
                            await asyncio.sleep(intended - loop.time())
                    else:
                        intended = 0.0
                    await send(pack(i, intended) + pad)
                    if not rate and i % YIELD_EVERY == YIELD_EVERY - 1:
                        await asyncio.sleep(0)
                src.flush()
                await done.wait()
            elapsed = time.perf_counter() - start
            (js,) = b._joined.values()
            naks = int(js.core.stats.naks_sent)
            await src.close()
            await rcv.close()
    finally:
        reset_global_configuration(None)
    if bad:
        raise AssertionError(f"{transport} loss={loss}: {bad[:3]} ({len(bad)} problems)")
    return n / elapsed, lat, naks


def _pct(values: list[float], p: float) -> float:
    s = sorted(values)
    return s[min(len(s) - 1, int(p / 100 * len(s)))] * 1e3


async def _all() -> None:
    raw = 0.0
    best: dict[tuple[str, float], float] = {}
    naks: dict[tuple[str, float], int] = {}
    for _ in range(ROUNDS):
        raw = max(raw, await _raw(N))
        for transport in ("lbtrm", "lbtru"):
            for loss in (0.0, LOSS):
                rate, _lat, k = await _pyum(transport, N, loss)
                key = (transport, loss)
                best[key] = max(best.get(key, 0.0), rate)
                naks[key] = naks.get(key, 0) + k
    print(f"   raw UDP batched datagrams: {raw:10,.0f} msgs/s ({N:,} x {SIZE} B, best of {ROUNDS})")
    for transport, name in (("lbtrm", "LBT-RM"), ("lbtru", "LBT-RU")):
        clean, lossy = best[(transport, 0.0)], best[(transport, LOSS)]
        print(
            f"   {name} lossless:          {clean:10,.0f} msgs/s  ratio to raw {clean / raw:.2f}"
            "  (target >= 0.70)"
        )
        print(
            f"   {name} {LOSS:.0%} loss:           {lossy:10,.0f} msgs/s  ratio to lossless "
            f"{lossy / clean:.2f}  (target >= 0.80; NAKs sent {naks[(transport, LOSS)]:,}, "
            "no message lost)"
        )
    n = int(LAT_RATE * LAT_SECONDS)
    for transport, name in (("lbtrm", "LBT-RM"), ("lbtru", "LBT-RU")):
        for loss in (0.0, LOSS):
            _r, lat, _k = await _pyum(transport, n, loss, LAT_RATE)
            print(
                f"   {name} latency at {LAT_RATE:,.0f} msgs/s, {loss:.0%} loss: "
                f"p50 {_pct(lat, 50):.2f} ms  p99 {_pct(lat, 99):.2f} ms  (from intended send "
                "time, implicit batching 2048 B)"
            )


def main() -> None:
    try:
        import uvloop

        runner: Any = uvloop.run
    except ImportError:  # pragma: no cover - uvloop is a dependency
        runner = asyncio.run
    runner(_all())


if __name__ == "__main__":
    main()
