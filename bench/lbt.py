"""LBT-RM and LBT-RU throughput vs a raw UDP socket pair, with and without injected loss; latency.

Layout, the same for every run: one process, one uvloop loop, the sending loop and the receiving
side on it, 64-byte messages over loopback, implicit batching (a datagram once the batch holds
2048 bytes: 27 messages).  Both senders run the same application loop, literally one function
(:func:`_chunk`: each payload packs its counter, ``await send(payload)``, a yield to the loop
every :data:`YIELD_EVERY` messages so the receiver drains its socket), and both receivers the
same per-message callback (unpack the counter, check the order, count), pyum's also looking at
the message type as every UM receiver callback must; the latency runs use their own loop and
callback (pacing, delivery times), so the throughput runs carry none of it.

**Paired chunks.**  The raw pair and the pyum pair are set up side by side and send chunks of
:data:`CHUNK` messages in turn (raw then pyum, pyum then raw in the next pair, and so on);
each pair's ratio compares two chunks a fraction of a second apart, and the figure is the
**median** of :data:`PAIRS` pairs' ratios, after :data:`WARM_PAIRS` not counted.  The 2-core
machine is shared and its speed drifts by 2x within seconds: in the earlier version of this
bench (rounds of 1,000,000 messages, raw then pyum), each round's LBT-RM lossless run against
the raw run just before it gave ratios from 0.58 to 1.41 in two benches on 2026-11-26, while a
pair's ratio here stays within a few hundredths of its neighbours' except when the speed
changes inside the pair.  For information, best pyum chunk / best raw chunk is printed too.
The lossy figures come from streams whose loss is switched on and off (below).

- **raw baseline**: the least a datagram messaging library does per message: ``send`` frames the
  message with the same 12-byte LBMC data header into a batch and returns an already completed
  future (awaited, as pyum's is); at 2048 bytes the batch gets a 20-byte transport header with a
  datagram sequence number and is ``sendto``'d.  The receiving ``DatagramProtocol`` checks the
  datagram sequence number, length-frames each message and hands it to the callback as
  ``bytes``.  The same datagrams as LBT-RM's, minus everything reliable.
- **pyum**: two contexts (multicast topic resolution on loopback), ``source transport lbtrm`` /
  ``lbtru`` with the data rate limit raised to 1 Gbit/s (UM's 10 Mbit/s default would measure
  the limiter), one :class:`~umcore.api.Message` per message in ``on_message``; a second figure
  with the opt-in batched delivery ``on_messages`` (lists of messages).
- **loss**: one continuous stream per transport and configuration, the throughput runs' sender
  loop (plus a clock read at each yield, for the phases) and callback, in which 1 % of the
  receiver's datagrams are dropped (``pyum_fault_drop_receive``, a pyum-only setting;
  retransmissions are dropped too) in every other phase: after
  :data:`WARM_S` of warm-up, :data:`PHASES` phases (:data:`INFO_PHASES` in the information
  stream) of :data:`PHASE_S` each, lossless first and last.  Each phase is measured in its
  steady state, from :data:`SETTLE_S` after its switch to the next: the messages *sent* per
  second, every one of which must be delivered by the end.
  Sender and receiver share the loop (the sender yields every :data:`YIELD_EVERY` messages and
  the receiver drains its socket then), so in a steady state the send rate is what the whole
  pipeline sustains -- NAKs, retransmissions, buffering behind gaps, in-order delivery of the
  repaired messages -- and equals the delivery rate on average (the messages delivered per
  second in the same windows are printed too; they jump when a stall ends).  Without the settle
  time the phases' edges would bias both: a lossy phase defers the delivery of the messages
  behind its last gaps (LBT-RM's NAK back-off is 25-75 ms) to the next phase, which makes its
  send rate look better and its delivery rate worse than they are.  Each lossy phase is
  compared with the mean of the lossless phases on either side of it (a second apart: the
  machine's drift, which made per-run lossy / lossless ratios range from 0.48 to 1.48 in one
  bench of the earlier version, cancels), and the figure is the **median** of those ratios.
  This is sustained throughput under loss: no end-of-run tail of waiting for the last repair,
  which made 15-25 % of a short run in the earlier version.  At the end the sender stops and
  every message must arrive, in order, with no loss event; the time from the last send to the
  last delivery is printed.  Two streams per transport, differing only in ``ignore_interval``:

  - **target, UM's advice**: ``ignore_interval`` :data:`RECOMMENDED_IGNORE_MS` ms, half
    the receivers' ``nak_backoff_interval`` (200 ms).  UM's knowledge base, "Configuring
    UDP-Based Transports", section "Ignore Interval" (UltraMessaging/um_kb,
    kb/configuring-udp-based-transports.md): "To avoid unnecessary repair delay and NCFs, you
    should set your transport_lbtrm_ignore_interval (source) (RU) to 1/2 your NAK Backoff
    Interval ... you should set your ignore interval to 100.  Note that it does not default to
    100; you need to set it."  A lost retransmission then costs one repeat NAK (100-300 ms).
  - **information, UM's defaults** (``ignore_interval`` 500 ms): when a *retransmission* is
    lost, the receiver's repeat NAK (100-300 ms later) falls inside the source's ignore
    interval, is answered by an NCF, and the receiver waits ``nak_suppress_interval`` (1 s)
    before NAKing again: a ~1.2 s stall -- the case the advice above is about.  While it lasts
    the receiver buffers and the sender goes on.  A stall is longer than a phase, so no phase
    is in a steady state and no ratio is printed: this stream shows that every message still
    arrives, and how many NCFs it took.

  Both streams size the two buffers a user with a lossy network sizes (documented UM options;
  the lossless rows keep UM's defaults, which they never reach):
  ``delivery_control_maximum_total_map_entries`` (context, default 200,000 messages per order
  map) is :data:`MAP_ENTRIES`, and ``transport_*_transmission_window_size`` (source, default
  24 MB) is :data:`WINDOW_BYTES`, 2 s of the stream.  At ~700k msgs/s a ~1.2 s NCF stall
  buffers ~840k messages, and the 24 MB window holds only ~0.45 s of this stream: with the
  defaults, a lost retransmission overflows the order map (its oldest gap declared lost) or
  slides out of the window (``unrecovered_txw``), i.e. real loss -- UM's behaviour (seen while
  preparing this bench: a default-buffer run of 1,000,000 messages got 2 NCFs, gave up 2
  datagrams as ``unrecovered_txw`` and its DC then waited out its 10 s loss timer), but not a
  stream in which "no message is lost" can be checked.  um_kb's window formula, rate x size x
  (initial back-off + 3 x NAK back-off), gives ~35 MB at this rate for the target row.
- **latency**: :data:`LAT_RATE` messages/s offered for :data:`LAT_SECONDS`, each message
  carrying its *intended* send time; p50/p99/max of (delivery time - intended time), lossless
  and with 1 % loss (LBT-RM NAKs after its 25-75 ms initial back-off, LBT-RU at once), UM's
  defaults throughout: in a run where a retransmission is lost, the ~1.2 s NCF stall above holds
  back everything behind it, and p50 and p99 reach hundreds of milliseconds (an NCF count above
  0 on the line says so).

Prints msgs/s, the ratios pyum / raw (target >= 0.70), lossy / lossless (target >= 0.80, judged
on the ``ignore_interval`` :data:`RECOMMENDED_IGNORE_MS` ms row) and the latency percentiles.
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
import statistics
import struct
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

# Lossless rows: raw and pyum chunks of CHUNK messages in turn (~0.15 s each at these rates:
# long enough that a chunk's last datagram weighs 0.03 %, short enough that the machine's speed
# rarely changes between the two chunks of a pair), PAIRS pairs counted after WARM_PAIRS (the
# first sends of each side; 16 pairs from the start showed no trend after the first).
CHUNK = 100_000
PAIRS = 8
WARM_PAIRS = 1
SIZE = 64
BATCH = 2048
YIELD_EVERY = 64
TIMEOUT_S = 30.0
LOSS = 0.01
LAT_RATE = 20_000.0
LAT_SECONDS = 2.0
# The target lossy row: the source's ignore interval at half the receivers' NAK back-off
# (200 ms), the relation UM recommends (um_kb) and its own default (500 ms) violates.
RECOMMENDED_IGNORE_MS = 100
# Lossy rows: one stream per transport and configuration, PHASES phases of PHASE_S seconds
# after WARM_S of warm-up, without and with LOSS in turn (lossless first and last, so every
# lossy phase has a lossless one on each side).
PHASE_S = 1.0
PHASES = 13
# The information stream (UM's defaults) only shows that every message arrives: fewer phases.
INFO_PHASES = 5
WARM_S = 0.5
# Each phase is measured from SETTLE_S after its switch: by then the repairs of the previous
# phase's last losses have come (LBT-RM's NAK back-off is 25-75 ms, a lost retransmission's
# repeat NAK 100-300 ms with the target row's ignore interval) and delivered the messages they
# held, and a lossy phase's buffering behind its gaps has reached its steady level.
SETTLE_S = 0.3
# Lossy streams' buffers (see the docstring): a transmission window of 2 s at 1M msgs/s (64 B
# payload + 12 B LBMC header per message, rounded up to 80 B) and an order map as large, so no
# repair -- not even one behind UM's default ~1.2 s NCF stall -- is late for lack of either.
WINDOW_BYTES = 2_000_000 * 80
MAP_ENTRIES = 2_000_000

_HDR = struct.Struct("!BBHII")  # LBMC data header: ver/type, next, msglen, tidx, sqn
_T = struct.Struct("!Qd")  # payload head: counter, intended send time
# LBT-RM DATA header: ver/type, next header, NAK port, session id, sqn, trail sqn, flags... (20 B)
_THDR = struct.Struct("!BBHIIIxxxx")


def _free_port() -> int:
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    s.bind(("127.0.0.1", 0))
    port = int(s.getsockname()[1])
    s.close()
    return port


# ------------------------------------------------------------------------------ raw baseline
class _RawSender:
    """The baseline's sending side: what a datagram library does at the least per message."""

    def __init__(self, transport: asyncio.DatagramTransport, done: asyncio.Future[None]) -> None:
        self.transport = transport
        self.done = done  # completed: ``await send(...)`` costs what awaiting pyum's does
        self.parts: list[bytes] = [b""]  # parts[0]: the transport header, filled at send time
        self.length = 0
        self.tsqn = 0
        self.msqn = 0

    def send(self, payload: bytes) -> asyncio.Future[None]:
        parts = self.parts
        n = len(payload)
        parts.append(_HDR.pack(0, 0, 12 + n, 0, self.msqn) + payload)
        self.msqn += 1
        self.length += 12 + n
        if self.length >= BATCH:
            self.flush()
        return self.done

    def flush(self) -> None:
        parts = self.parts
        if len(parts) > 1:
            parts[0] = _THDR.pack(0, 0, 0, 0, self.tsqn, 0)
            self.tsqn += 1
            self.transport.sendto(b"".join(parts))
            del parts[1:]
            self.length = 0


class _RawReceiver(asyncio.DatagramProtocol):
    """The baseline's receiving side: transport header (in-order check), then each message
    length-framed and handed to the callback as ``bytes``."""

    def __init__(self, on_msg: Any) -> None:
        self.on_msg = on_msg
        self.expected = 0
        self.out_of_order = 0

    def datagram_received(self, data: bytes, addr: Any) -> None:
        if _THDR.unpack_from(data)[4] != self.expected:
            self.out_of_order += 1
        self.expected += 1
        pos = 20
        end = len(data)
        on_msg = self.on_msg
        while pos + 12 <= end:
            msglen = data[pos + 2] << 8 | data[pos + 3]
            on_msg(data[pos + 12 : pos + msglen])
            pos += msglen


class _Side:
    """One side of a paired lossless measurement: its send and flush, and the receiving
    application's state (messages counted and out of order, the end of the current chunk)."""

    __slots__ = ("bad", "count", "done", "flush", "send", "sent", "target")

    # Set by the set-up once its sender exists (its receiver's callback needs the side first).
    send: Callable[[bytes], Awaitable[None]]
    flush: Callable[[], None]

    def __init__(self) -> None:
        self.sent = 0
        self.count = 0
        self.bad = 0
        self.target = 0
        self.done = asyncio.Event()


async def _chunk(side: _Side, n: int) -> float:
    """Send ``n`` messages on ``side`` and wait for the last one's delivery: msgs/s.  The same
    loop for raw and pyum, line for line (only ``send`` differs)."""
    send = side.send
    pad = bytes(SIZE - _T.size)
    pack = _T.pack
    first = side.sent
    side.target = first + n
    side.done.clear()
    start = time.perf_counter()
    async with asyncio.timeout(TIMEOUT_S):
        for i in range(first, first + n):
            await send(pack(i, 0.0) + pad)
            if i % YIELD_EVERY == YIELD_EVERY - 1:
                await asyncio.sleep(0)
        side.flush()
        await side.done.wait()
    side.sent = first + n
    return n / (time.perf_counter() - start)


@contextlib.asynccontextmanager
async def _raw_side() -> AsyncIterator[_Side]:
    """The raw baseline's socket pair, ready for :func:`_chunk`."""
    loop = asyncio.get_running_loop()
    side = _Side()
    unpack = _T.unpack_from

    def on_msg(payload: bytes) -> None:  # the same application work as pyum's on_msg
        i, _intended = unpack(payload)
        n = side.count
        if i != n:
            side.bad += 1
        n += 1
        side.count = n
        if n == side.target:
            side.done.set()

    rsock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    rsock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 8 * 1024 * 1024)
    rsock.bind(("127.0.0.1", 0))
    rtr, rproto = await loop.create_datagram_endpoint(lambda: _RawReceiver(on_msg), sock=rsock)
    str_, _ = await loop.create_datagram_endpoint(
        asyncio.DatagramProtocol, remote_addr=rsock.getsockname()
    )
    fut: asyncio.Future[None] = loop.create_future()
    fut.set_result(None)
    sender = _RawSender(str_, fut)
    side.send = sender.send
    side.flush = sender.flush
    try:
        yield side
    finally:
        str_.close()
        rtr.close()
    if side.bad or rproto.out_of_order:
        raise AssertionError(
            f"raw baseline: {side.bad} messages, {rproto.out_of_order} datagrams out of order"
        )


# ------------------------------------------------------------------------------ pyum
def _configure(transport: str, extra: str = "") -> None:
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
        {extra}
        """
    cfg = Configuration()
    cfg.config_text(text, "bench")
    reset_global_configuration(cfg)


class _Run:
    """What one latency run measured."""

    __slots__ = ("lat", "naks", "ncfs", "rxs")

    def __init__(self, lat: list[float], naks: int, ncfs: int, rxs: int) -> None:
        self.lat = lat
        self.naks = naks
        self.ncfs = ncfs
        self.rxs = rxs

    def counts(self) -> str:
        return f"{self.naks} NAK, {self.rxs} RX, {self.ncfs} NCF"


@contextlib.asynccontextmanager
async def _pyum_side(transport: str, batched: bool) -> AsyncIterator[_Side]:
    """Two contexts, a source and a receiver of ``transport`` (UM's defaults but the data rate
    limit), ready for :func:`_chunk`; with ``batched`` the receiver takes ``on_messages``."""
    from umcore.api import Context
    from umcore.api import message as m
    from umcore.config.attributes import reset_global_configuration

    _configure(transport)
    side = _Side()
    bos = asyncio.Event()
    events: list[str] = []
    unpack = _T.unpack_from
    MSG_DATA = m.MSG_DATA  # as an application imports it: one load per message

    # Raw's on_msg's work (unpack the counter, check the order, count) plus what UM's API asks
    # of every receiver callback: look at the message type.
    def on_msg(msg: m.Message) -> None:
        if msg.type == MSG_DATA:
            i, _intended = unpack(msg.data)
            n = side.count
            if i != n:
                side.bad += 1
            n += 1
            side.count = n
            if n == side.target:
                side.done.set()
        elif msg.type == m.MSG_BOS:
            bos.set()
        else:
            events.append(f"event {msg.type}")

    def on_msgs(msgs: list[m.Message]) -> None:
        for msg in msgs:
            on_msg(msg)

    try:
        async with await Context.create() as a, await Context.create() as b:
            if batched:
                rcv = await b.create_receiver("bench.lbt", on_msg, on_messages=on_msgs)
            else:
                rcv = await b.create_receiver("bench.lbt", on_msg)
            src = await a.create_source("bench.lbt")
            await asyncio.wait_for(bos.wait(), 10)
            side.send = src.send
            side.flush = src.flush
            yield side
            await src.close()
            await rcv.close()
    finally:
        reset_global_configuration(None)
    if side.bad or events:
        raise AssertionError(f"{transport}: {side.bad} out of order, {events[:3]}")


async def _paired(transport: str, batched: bool) -> list[tuple[float, float]]:
    """(raw, pyum) msgs/s of each counted pair of chunks; the order alternates per pair."""
    out = []
    async with _raw_side() as raw, _pyum_side(transport, batched) as ours:
        for k in range(WARM_PAIRS + PAIRS):
            if k % 2:
                q = await _chunk(ours, CHUNK)
                r = await _chunk(raw, CHUNK)
            else:
                r = await _chunk(raw, CHUNK)
                q = await _chunk(ours, CHUNK)
            if k >= WARM_PAIRS:
                out.append((r, q))
    return out


async def _latency(transport: str, n: int, loss: float) -> _Run:
    """One latency run: ``n`` messages offered at :data:`LAT_RATE`, each carrying its intended
    send time; delivery latencies in seconds, the receiver's NAK counters."""
    from umcore.api import Context
    from umcore.api import message as m
    from umcore.config.attributes import ContextAttributes, reset_global_configuration

    _configure(transport)
    loop = asyncio.get_running_loop()
    done = asyncio.Event()
    bos = asyncio.Event()
    count = 0
    wrong = 0  # messages out of order
    bad: list[str] = []
    lat: list[float] = []
    unpack = _T.unpack_from
    MSG_DATA = m.MSG_DATA

    def on_msg(msg: m.Message) -> None:
        nonlocal count, wrong
        if msg.type == MSG_DATA:
            i, intended = unpack(msg.data)
            if i != count:
                wrong += 1
            count += 1
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
            t0 = loop.time() + 0.01
            try:
                async with asyncio.timeout(TIMEOUT_S):
                    for i in range(n):
                        intended = t0 + i / LAT_RATE
                        if i % 16 == 0 and intended > loop.time():
                            await asyncio.sleep(intended - loop.time())
                        await send(pack(i, intended) + pad)
                    src.flush()
                    await done.wait()
            except TimeoutError:
                (js,) = b.joined.values()
                st = js.core.stats
                raise AssertionError(
                    f"{transport} loss={loss}: {count:,} of {n:,} messages in {TIMEOUT_S} s "
                    f"(unrecovered_txw {st.unrecovered_txw}, unrecovered_tmo "
                    f"{st.unrecovered_tmo}; {bad[:3]})"
                ) from None
            run = _Run(lat, *_nak_counts(b))
            await src.close()
            await rcv.close()
    finally:
        reset_global_configuration(None)
    _check(f"{transport} loss={loss}", wrong, bad)
    return run


def _nak_counts(ctx: Any) -> tuple[int, int, int]:
    """The receiving context's one joined session's NAKs sent, NCFs and retransmissions."""
    (js,) = ctx.joined.values()
    st = js.core.stats
    return (
        int(st.naks_sent),
        int(st.ncfs_ignored + st.ncfs_shed + st.ncfs_rx_delay),
        int(st.rxs_rcved),
    )


def _check(what: str, wrong: int, bad: list[str]) -> None:
    """A run's end: no message out of order, no unexpected event."""
    if wrong:
        bad.append(f"{wrong} messages out of order")
    if bad:
        raise AssertionError(f"{what}: {bad[:3]} ({len(bad)} problems)")


class _Stream:
    """What one lossy stream measured: each phase's rates, the receiver's counters."""

    __slots__ = ("delivered", "drain", "naks", "ncfs", "rxs", "sent")

    def __init__(
        self,
        sent: list[float],
        delivered: list[float],
        drain: float,
        naks: int,
        ncfs: int,
        rxs: int,
    ) -> None:
        self.sent = sent  # msgs/s sent in each phase (all delivered in the end); odd: lossy
        self.delivered = delivered  # msgs/s delivered in each phase
        self.drain = drain  # seconds from the last send to the last delivery
        self.naks = naks
        self.ncfs = ncfs
        self.rxs = rxs

    @staticmethod
    def ratios(r: list[float]) -> list[float]:
        """Each lossy phase's rate over the mean of the lossless phases on either side."""
        return [r[k] / ((r[k - 1] + r[k + 1]) / 2) for k in range(1, len(r) - 1, 2)]

    def counts(self) -> str:
        return (
            f"{self.naks} NAK, {self.rxs} RX, {self.ncfs} NCF, last delivery "
            f"{self.drain * 1e3:.0f} ms after the last send"
        )


async def _stream(transport: str, recommended: bool, phases: int) -> _Stream:
    """One lossy stream (see the docstring): the throughput runs' sender and callback, the
    receiver's fault injection switched between 0 and :data:`LOSS` every :data:`PHASE_S`;
    every message delivered, in order, with no loss event."""
    from umcore.api import Context
    from umcore.api import message as m
    from umcore.config.attributes import reset_global_configuration
    from umcore.engine.lbt import lbt_state

    _configure(transport, _lossy(transport, recommended))
    bos = asyncio.Event()
    count = 0
    wrong = 0
    bad: list[str] = []
    unpack = _T.unpack_from
    MSG_DATA = m.MSG_DATA

    def on_msg(msg: m.Message) -> None:  # the throughput runs' callback, without the end test
        nonlocal count, wrong
        if msg.type == MSG_DATA:
            i, _intended = unpack(msg.data)
            if i != count:
                wrong += 1
            count += 1
        elif msg.type == m.MSG_BOS:
            bos.set()
        else:
            bad.append(f"event {msg.type}")

    try:
        async with await Context.create() as a, await Context.create() as b:
            rcv = await b.create_receiver("bench.lbt", on_msg)
            src = await a.create_source("bench.lbt")
            await asyncio.wait_for(bos.wait(), 10)
            lctx = lbt_state(b)
            pad = bytes(SIZE - _T.size)
            pack = _T.pack
            send = src.send
            clock = time.perf_counter
            # The schedule: phase k's loss switched at start + k * PHASE_S, its measurement from
            # SETTLE_S later to the next switch.  marks: (time, messages sent, messages
            # delivered) at each point, in order (phase k's window: marks[2k+1] to marks[2k+2]).
            start = clock() + WARM_S
            points = [start + k * PHASE_S + d for k in range(phases) for d in (0.0, SETTLE_S)]
            points.append(start + phases * PHASE_S)
            marks: list[tuple[float, int, int]] = []
            i = 0
            async with asyncio.timeout(TIMEOUT_S):
                while len(marks) < len(points):
                    for _ in range(YIELD_EVERY):
                        await send(pack(i, 0.0) + pad)
                        i += 1
                    await asyncio.sleep(0)
                    now = clock()
                    while len(marks) < len(points) and now >= points[len(marks)]:
                        k, settled = divmod(len(marks), 2)
                        if not settled:  # phase k starts: odd phases lossy
                            lctx.drop_receive = LOSS if k % 2 and k < phases else 0.0
                        marks.append((now, i, count))
                src.flush()
                last_send = clock()
                while count < i and not bad:
                    await asyncio.sleep(0.002)  # the last repairs: seconds at most
                drain = clock() - last_send
            windows = [(marks[2 * k + 1], marks[2 * k + 2]) for k in range(phases)]
            out = _Stream(
                [(s1 - s0) / (t1 - t0) for (t0, s0, _), (t1, s1, _) in windows],
                [(c1 - c0) / (t1 - t0) for (t0, _, c0), (t1, _, c1) in windows],
                drain,
                *_nak_counts(b),
            )
            await src.close()
            await rcv.close()
    finally:
        reset_global_configuration(None)
    _check(f"{transport} lossy stream", wrong, bad)
    return out


def _pct(values: list[float], p: float) -> float:
    s = sorted(values)
    return s[min(len(s) - 1, int(p / 100 * len(s)))] * 1e3


_NAMES = (("lbtrm", "LBT-RM"), ("lbtru", "LBT-RU"))


def _lossy(transport: str, recommended: bool) -> str:
    """The lossy rows' options: buffers sized for the run; with ``recommended``, UM's
    recommended relation (ignore interval = half the NAK back-off) instead of its default."""
    text = (
        f"context delivery_control_maximum_total_map_entries {MAP_ENTRIES}\n"
        f"source transport_{transport}_transmission_window_size {WINDOW_BYTES}\n"
    )
    if recommended:
        text += f"source transport_{transport}_ignore_interval {RECOMMENDED_IGNORE_MS}\n"
    return text


async def _all() -> None:
    for transport, name in _NAMES:
        for batched, label, note in (
            (False, "on_message (per message):", "  (target >= 0.70)"),
            (True, "on_messages (batched):   ", ""),
        ):
            pairs = await _paired(transport, batched)
            ratios = [q / r for r, q in pairs]
            print(
                f"   {name} {label} {statistics.median(q for _, q in pairs):10,.0f} msgs/s, "
                f"raw {statistics.median(r for r, _ in pairs):10,.0f}: ratio to raw "
                f"{statistics.median(ratios):.2f}{note}"
            )
            best = max(q for _, q in pairs) / max(r for r, _ in pairs)
            print(
                f"       each pair of {CHUNK:,}-message chunks: "
                + " ".join(f"{q:.2f}" for q in ratios)
                + f" (median of {PAIRS}; information: best pyum / best raw {best:.2f})"
            )
        st = await _stream(transport, True, PHASES)
        ratios = st.ratios(st.sent)
        print(
            f"   {name} {LOSS:.0%} loss, ignore_interval {RECOMMENDED_IGNORE_MS} ms: ratio to "
            f"lossless {statistics.median(ratios):.2f} (median of {len(ratios)} lossy phases; "
            "target >= 0.80); no message lost"
        )
        print(
            "       each lossy phase: "
            + " ".join(f"{q:.2f}" for q in ratios)
            + "; counting deliveries instead: "
            + " ".join(f"{q:.2f}" for q in st.ratios(st.delivered))
        )
        print(
            "       msgs/s sent in each phase (lossy in brackets): "
            + " ".join(f"[{r:,.0f}]" if k % 2 else f"{r:,.0f}" for k, r in enumerate(st.sent))
            + f"; {st.counts()}"
        )
        st = await _stream(transport, False, INFO_PHASES)
        print(
            f"   {name} {LOSS:.0%} loss, UM defaults (500 ms): no message lost; {st.counts()} "
            "(information; an NCF is a ~1.2 s stall, longer than a phase: no ratio)"
        )
    n = int(LAT_RATE * LAT_SECONDS)
    for transport, name in _NAMES:
        for loss in (0.0, LOSS):
            r = await _latency(transport, n, loss)
            print(
                f"   {name} latency at {LAT_RATE:,.0f} msgs/s, {loss:.0%} loss: "
                f"p50 {_pct(r.lat, 50):.2f} ms  p99 {_pct(r.lat, 99):.2f} ms  max "
                f"{max(r.lat) * 1e3:.0f} ms  (NAKs {r.naks}, retransmissions {r.rxs}, NCFs "
                f"{r.ncfs})"
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
