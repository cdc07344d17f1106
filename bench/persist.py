"""Persisted messages/s and stability latency, end to end, against NATS JetStream (issue 17).

What runs where (one 2-core machine, loopback only):

- **pyum**: the real Store daemon (``python -m daemons.umestored``, a subprocess started as
  :mod:`bench.store` starts it: temporary cache/state directories, ephemeral ports; topics
  ``bench.disk.*`` go to a DISK repository).  In this process (uvloop) one pyum context holds,
  per phase, a persistent source (``ume_store`` = that Store, ``ume_flight_size`` 1000, Block
  behaviour, ``ume_message_stability_notification`` 1, ``implicit_batching_minimum_length``
  :data:`BATCH`, ``--batch``) on a new topic and a persistent
  receiver of that topic (registered with the Store through the source's SRI; consumption ACKs
  batched as UM's defaults have it).  A message counts as *persisted* when the source's
  ``SRC_EVENT_UME_MESSAGE_STABLE_EX`` with the STABLE flag names its sequence number.
- **Baseline, NATS JetStream**: Debian's ``nats-server`` (``-js -sd TMP``, ephemeral port) as a
  subprocess, driven from this process by ``nats-py`` (``publish_async`` with
  ``publish_async_max_pending`` 1000: at most 1,000 publishes un-ACKed, as the flight size
  above) into a stream with FILE storage; a message is persisted when its PubAck arrives.  A
  push consumer of the phase's subject in this process plays the receiver (``AckPolicy.ALL``,
  the last message ACKed every 100 ms: the analogue of pyum's batched consumption ACKs).  Only
  in the ``bench`` extra (``pip install 'pyum[bench]'`` / ``apt-get install nats-server``): the
  row is skipped, saying why, when either is missing.
- **The floor, raw** (:class:`RawSide`): the same messages as UM's TCP layout has them (76-byte
  LBMC DATA frames), paced alike with the same flight size, from a raw sender in this process
  to :func:`bench.store.raw_loop` (a blocking loop in a subprocess: each read's frames written
  to disk in the Store's disk format, no fsync, one ACK per read) and to a raw receiver
  connection in this process; no pyum machinery.  Its p99 is what this machine's loopback
  TCP, page-cache writes and scheduling cost by themselves: on the shared, loaded 2-core host
  it is itself ~3-4 ms at 50,000 msgs/s (median 3.9 ms of 5 runs; p50 0.3-0.5 ms), and its
  open loop (150,000-500,000 msgs/s) shows the machine is not what bounds pyum's open loop
  (``--no-raw`` skips it).

Phases, for each system, interleaved (the order alternates per rate): 64-byte payloads at the
offered rates :data:`RATES` msgs/s (the sender wakes every 1 ms (:data:`TICK`), sends
what is due, the last message of each burst flushed, and goes on without sleeping while it is
a tick or more behind) and open loop (as fast as the flight size lets), :data:`PHASE_SECONDS` each.

Figures per phase: persisted msgs/s (messages persisted / time from the first send to the last
persistence ACK), persistence latency p50/p99 (a message's send call to its STABLE event /
PubAck; the first :data:`WARMUP` seconds not counted), messages the receiver got, CPU time per
message of this process and of the server process (``/proc``; less distorted by other load on
the machine than throughput), for pyum the stability ACK messages the source got per second and
messages per ACK (how much the Store coalesces: a disk repository's messages become stable per
completed write, and with UM's ``stability-ack-minimum-number`` 1 each such range is one ranged
ACK), and the ratio pyum / JetStream.  Goals (issue 17): >= 100,000
persisted msgs/s, >= 10x JetStream-from-Python, p99 <= 2 ms at 50,000 msgs/s; printed as met /
not met.  A message sent but never persisted, or persisted twice, fails the run (after every
figure is printed).

The pyum row is skipped, saying what is missing, when the persistent source API
(:mod:`umcore.persist.source`, :mod:`umcore.engine.persist`) is not importable.

Run alone: ``python -m bench.persist [--seconds S] [--rates 10000,50000,open] [--batch BYTES]
[--no-jetstream] [--no-pyum] [--no-raw]``; ``python -m bench persist`` runs it with the defaults.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import functools
import importlib.metadata
import shutil
import struct
import sys
import tempfile
import time
from array import array
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bench.store import BenchFailure, Proc, cpu_seconds, free_udp_port, pct, resolver_lines

PAYLOAD = bytes(64)
FLIGHT = 1000  # ume_flight_size; JetStream's publish_async_max_pending
# The pyum source's implicit_batching_minimum_length (UM's default 2048): a TCP write once the
# batch holds this many bytes (or at a flush: the last message of each paced burst / open-loop
# chunk).  UM's throughput tuning raises it; 8192 holds a 100k msgs/s burst (50 messages of 76
# bytes on the wire) in one write to each of the Store and the receiver instead of two (nats-py
# coalesces its pending publishes into one write the same way).  --batch 2048: UM's default.
BATCH = 8192
RATES: tuple[int | None, ...] = (10_000, 50_000, 100_000, None)  # msgs/s offered; None = open
PHASE_SECONDS = 2.5
WARMUP = 0.3  # first seconds of a phase left out of the latency figures
# The paced sender wakes this often.  uvloop (libuv) keeps timers in whole milliseconds: a
# shorter sleep is a 0 ms timer, due at once, so a 0.5 ms tick made the pacer spin (measured
# ~100,000 wake-ups/s, ~0.6 of a core, on a machine whose 2 cores also run the Store), where an
# application pacing its sends sleeps; 1 ms is the shortest sleep the loop really does.
TICK = 0.001
MAX_BURST = 256  # a paced sender that fell behind catches up by at most this many per turn
OPEN_CHUNK = 64  # open loop: messages per turn (the last one flushed)
OPEN_CAP = 1_500_000  # open loop: messages a phase may send at most (arrays sized for it)
DRAIN = 15.0  # bound on the wait for the last persistence ACKs / deliveries of a phase
WAIT = 30.0  # bound on every start-up wait (servers, registration)
JS_ACK_INTERVAL = 0.1  # the JetStream consumer ACKs (AckPolicy.ALL) this often
TOPIC_PREFIX = "bench.disk.persist"  # bench.store's Store sends bench.disk.* to disk
JS_STREAM = "BENCHPERSIST"
JS_SUBJECTS = "bench.js.>"
# The raw row's frames (bench.store's layout: LBMC DATA header, then the payload) and the raw
# writer's hello (mode D = disk, the port of this side's ACK listener) and ACKs (counts).
FRAME_LEN = 12 + len(PAYLOAD)
_RAW_HEAD = struct.Struct("!BBHII")
_RAW_MODE = struct.Struct("!cxH")
_COUNT = struct.Struct("!Q")
GOAL_RATE = 100_000
GOAL_RATIO = 10.0
GOAL_P99_MS = 2.0
GOAL_P99_AT = 50_000


# ==============================================================================================
# Counting
# ==============================================================================================


class Tally:
    """One phase's messages: send and persistence-ACK times by index (the sequence number for
    pyum, the publish order for JetStream), deliveries to the receiver."""

    def __init__(self, n: int) -> None:
        self.n = n
        self.sent_at = array("d", bytes(8 * n))
        self.acked_at = array("d", bytes(8 * n))  # 0.0 = not (yet) persisted
        self.acked = 0
        self.duplicates = 0
        self.beyond = 0  # ACKs for an index never sent (or outside the phase)
        self.errors = 0  # JetStream: a publish answered with an error
        self.last_ack = 0.0
        self.received = 0  # data messages the receiver got
        #: What drain() waits for (acked and received); unreachable until it is called, so
        #: the per-message callbacks wake it only once there is something to see.
        self.want = n + 1
        self.progress = asyncio.Event()

    def ack(self, i: int, now: float) -> None:
        if not 0 <= i < self.n or self.sent_at[i] == 0.0:
            self.beyond += 1
            return
        if self.acked_at[i] != 0.0:
            self.duplicates += 1
            return
        self.acked_at[i] = now
        self.acked += 1
        self.last_ack = now
        if self.acked >= self.want:
            self.progress.set()

    async def drain(self, sent: int) -> None:
        """Wait (bounded) until ``sent`` messages were persisted and received."""
        self.want = sent
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(DRAIN):
                while self.acked < sent or self.received < sent:
                    self.progress.clear()
                    await self.progress.wait()

    def latencies(self, sent: int, start: float) -> list[float]:
        cut = start + WARMUP
        s, a = self.sent_at, self.acked_at
        return [a[i] - s[i] for i in range(sent) if a[i] != 0.0 and s[i] >= cut]


@dataclass
class PhaseResult:
    system: str
    rate: int | None
    sent: int
    persisted: int
    per_s: float  # persisted msgs/s
    offered: float  # msgs/s actually sent
    p50_ms: float
    p99_ms: float
    received: int
    own_us: float  # this process's CPU per persisted message
    server_us: float  # the server process's CPU per persisted message
    problem: str | None  # a correctness failure, else None
    acks: int | None = None  # persistence ACK messages the source got (pyum), None: not counted


# ==============================================================================================
# The two systems behind one interface
# ==============================================================================================


class Side:
    """A system under test: ``open(n)`` makes a new source/receiver pair (new topic) for a
    phase of at most ``n`` messages and returns its :class:`Tally`; ``send(i, j)`` sends
    messages i..j-1 (stamping ``sent_at``; the last one flushed); ``close_phase()`` tears the
    pair down; ``stop()`` the whole system."""

    name: str
    server_pid: int
    tally: Tally

    async def open(self, n: int) -> Tally:
        raise NotImplementedError

    async def send(self, i: int, j: int) -> None:
        raise NotImplementedError

    async def close_phase(self) -> None:
        raise NotImplementedError

    async def stop(self) -> None:
        raise NotImplementedError

    def acks(self) -> int | None:
        """Persistence ACK messages the phase's source received so far; None: not counted."""
        return None


class PyumSide(Side):
    """umestored (disk repository) + a pyum persistent source and receiver."""

    name = "pyum"

    def __init__(self, resolver: str, batch: int = BATCH) -> None:
        self.resolver = resolver
        self.batch = batch
        self.tmp = tempfile.TemporaryDirectory(prefix="pyum-bench-persist-")
        self.store: Proc | None = None
        self.address = ("", 0)
        self.ctx: Any = None
        self.src: Any = None
        self.rcv: Any = None
        self.phases = 0

    async def start(self) -> None:
        from bench.store import start_store
        from umcore.api import Context

        self.store, self.address, _ = await start_store(Path(self.tmp.name), self.resolver)
        self.server_pid = self.store.proc.pid
        self.ctx = await Context.create()

    async def open(self, n: int) -> Tally:
        from umcore.engine.message import MSG_DATA
        from umcore.persist import events as ev

        self.phases += 1
        topic = f"{TOPIC_PREFIX}.{self.phases}"
        tally = self.tally = Tally(n)
        registered = asyncio.Event()
        clock = time.perf_counter
        stable_code, stable_flag = ev.SRC_EVENT_UME_MESSAGE_STABLE_EX, ev.STABLE_FLAG_STABLE
        ack = tally.ack

        def on_event(code: int, info: Any) -> None:
            if code == stable_code and info.flags & stable_flag:
                ack(info.sequence_number, clock())

        rcv_complete = ev.MSG_UME_REGISTRATION_COMPLETE_EX

        def on_message(msg: Any) -> None:
            t = msg.type
            if t == MSG_DATA:
                tally.received += 1
                if tally.received >= tally.want:
                    tally.progress.set()
            elif t == rcv_complete:
                registered.set()

        self.src = await self.ctx.create_source(
            topic,
            attributes={
                "ume_store": f"{self.address[0]}:{self.address[1]}",
                "ume_flight_size": str(FLIGHT),
                "ume_flight_size_behavior": "Block",
                "ume_message_stability_notification": "1",
                "implicit_batching_minimum_length": str(self.batch),
            },
            on_event=on_event,
        )
        if not self.src.persistent:
            raise BenchFailure("pyum: a source with ume_store is not persistent")
        self.rcv = await self.ctx.create_receiver(topic, on_message)
        try:
            await self.src.wait_registered(WAIT)
            async with asyncio.timeout(WAIT):
                await registered.wait()
        except TimeoutError:
            what = "source" if registered.is_set() else "receiver"
            raise BenchFailure(f"pyum: the {what} did not register within {WAIT:g} s") from None
        return tally

    async def send(self, i: int, j: int) -> None:
        from umcore.errors import WouldBlock

        src = self.src
        send_nowait = src.send_nowait
        sent_at = self.tally.sent_at
        clock = time.perf_counter
        last = j - 1
        for k in range(i, j):
            sent_at[k] = clock()
            try:
                send_nowait(PAYLOAD, k == last)
            except WouldBlock:  # flight size full: send what batching holds, wait for room
                src.flush()
                async with asyncio.timeout(WAIT):
                    await src.send(PAYLOAD, k == last)

    def acks(self) -> int | None:
        gate = getattr(self.src, "gate", None)  # the persistent source's persistence glue
        if gate is None:
            return None
        st = gate.core.stats()
        return int(st["stability_acks"] + st["stability_naks"])

    async def close_phase(self) -> None:
        if self.rcv is not None:
            await self.rcv.close()
            self.rcv = None
        if self.src is not None:
            await self.src.close()
            self.src = None

    async def stop(self) -> None:
        try:
            await self.close_phase()
            if self.ctx is not None:
                await self.ctx.close()
        finally:
            if self.store is not None:
                await self.store.stop()
            self.tmp.cleanup()


class JetStreamSide(Side):
    """nats-server -js (file storage) + nats-py: publish_async, a push consumer."""

    name = "JetStream"

    def __init__(self, server: str) -> None:
        self.server = server
        self.tmp = tempfile.TemporaryDirectory(prefix="pyum-bench-nats-")
        self.proc: Proc | None = None
        self.nc: Any = None
        self.js: Any = None
        self.sub: Any = None
        self.acker: asyncio.Task[None] | None = None
        self.subject = ""
        self.phases = 0

    async def start(self) -> None:
        import nats
        from nats.js.api import StorageType

        self.proc = await Proc.start(
            self.server, "-js", "-sd", self.tmp.name, "-a", "127.0.0.1", "-p", "-1"
        )
        self.server_pid = self.proc.proc.pid
        _, m = await self.proc.wait_line(r"Listening for client connections on ([\d.]+:\d+)")
        self.nc = await nats.connect(f"nats://{m.group(1)}", connect_timeout=WAIT)
        self.js = self.nc.jetstream(publish_async_max_pending=FLIGHT)
        await self.js.add_stream(name=JS_STREAM, subjects=[JS_SUBJECTS], storage=StorageType.FILE)

    async def open(self, n: int) -> Tally:
        from nats.js.api import AckPolicy, ConsumerConfig, DeliverPolicy

        self.phases += 1
        self.subject = f"bench.js.{self.phases}"
        tally = self.tally = Tally(n)
        latest: list[Any] = [None, None]  # last message received, last one ACKed

        async def on_msg(msg: Any) -> None:
            tally.received += 1
            latest[0] = msg
            if tally.received >= tally.want:
                tally.progress.set()

        async def acker() -> None:  # AckPolicy.ALL: ACKing the latest ACKs all before it
            while True:
                await asyncio.sleep(JS_ACK_INTERVAL)
                msg = latest[0]
                if msg is not None and msg is not latest[1]:
                    latest[1] = msg
                    await msg.ack()

        self.sub = await self.js.subscribe(
            self.subject,
            cb=on_msg,
            manual_ack=True,
            config=ConsumerConfig(
                ack_policy=AckPolicy.ALL,
                deliver_policy=DeliverPolicy.NEW,
                max_ack_pending=-1,
            ),
        )
        self.acker = asyncio.create_task(acker())
        return tally

    async def send(self, i: int, j: int) -> None:
        publish = self.js.publish_async
        subject = self.subject
        sent_at = self.tally.sent_at
        clock = time.perf_counter
        done = self._done
        partial = functools.partial
        for k in range(i, j):
            sent_at[k] = clock()
            fut = await publish(subject, PAYLOAD)
            fut.add_done_callback(partial(done, k))

    def _done(self, k: int, fut: asyncio.Future[Any]) -> None:
        if fut.cancelled() or fut.exception() is not None:
            self.tally.errors += 1
            return
        self.tally.ack(k, time.perf_counter())

    async def close_phase(self) -> None:
        if self.acker is not None:
            self.acker.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self.acker
            self.acker = None
        if self.sub is not None:
            with contextlib.suppress(Exception):
                await self.sub.unsubscribe()
            self.sub = None

    async def stop(self) -> None:
        try:
            await self.close_phase()
            if self.nc is not None:
                with contextlib.suppress(Exception):
                    await self.nc.close()
        finally:
            if self.proc is not None:
                await self.proc.stop()
            self.tmp.cleanup()


class _RawAcks(asyncio.Protocol):
    """The raw writer's ACKs: 8-byte counts of the messages it has written so far."""

    def __init__(self, side: RawSide) -> None:
        self.side = side
        self.pending = b""

    def data_received(self, data: bytes) -> None:
        buf = self.pending + data if self.pending else data
        whole = len(buf) - len(buf) % 8
        if whole:
            self.side.acked_to(_COUNT.unpack_from(buf, whole - 8)[0])
        self.pending = buf[whole:]


class _RawReceiver(asyncio.Protocol):
    """The raw row's receiver: counts whole frames."""

    def __init__(self, side: RawSide) -> None:
        self.side = side
        self.bytes = 0

    def data_received(self, data: bytes) -> None:
        self.bytes += len(data)
        tally = self.side.tally
        tally.received = self.bytes // FRAME_LEN
        if tally.received >= tally.want:
            tally.progress.set()


class RawSide(Side):
    """The floor: the same 64-byte messages as UM's TCP layout has them (76-byte LBMC DATA
    frames) from a raw sender in this process, paced alike, to :func:`bench.store.raw_loop` (a
    blocking loop in a subprocess that writes each read's frames to disk in the Store's disk
    format, no fsync, and ACKs each read with the count written so far) and to a receiver
    connection in this process; flight size :data:`FLIGHT` as the pyum source's.  No pyum
    machinery (sessions, registration, ACK encoding, writer thread): its p99 is what this
    machine's loopback TCP, disk writes and scheduling add by themselves."""

    name = "raw"

    def __init__(self) -> None:
        self.tmp = tempfile.TemporaryDirectory(prefix="pyum-bench-raw-")
        self.proc: Proc | None = None
        self.address = ("", 0)
        self.ack_server: asyncio.Server | None = None
        self.rcv_server: asyncio.Server | None = None
        self.to_writer: asyncio.Transport | None = None
        self.to_receiver: asyncio.Transport | None = None
        self.total = 0  # messages the writer ACKed (a count: they are ACKed in order)
        self.room = asyncio.Event()

    async def start(self) -> None:
        self.proc = await Proc.start(
            sys.executable, "-c", f"from bench.store import raw_loop; raw_loop({self.tmp.name!r})"
        )
        self.server_pid = self.proc.proc.pid
        _, m = await self.proc.wait_line(r"listening on ([\d.]+):(\d+)")
        self.address = (m.group(1), int(m.group(2)))

    def acked_to(self, count: int) -> None:
        now = time.perf_counter()
        ack = self.tally.ack
        for k in range(self.total, count):
            ack(k, now)
        if count > self.total:
            self.total = count
            self.room.set()

    async def open(self, n: int) -> Tally:
        loop = asyncio.get_running_loop()
        self.tally = Tally(n)
        self.total = 0
        self.ack_server = await loop.create_server(lambda: _RawAcks(self), "127.0.0.1", 0)
        self.rcv_server = await loop.create_server(lambda: _RawReceiver(self), "127.0.0.1", 0)
        ack_port = self.ack_server.sockets[0].getsockname()[1]
        rcv_port = self.rcv_server.sockets[0].getsockname()[1]
        self.to_writer, _ = await loop.create_connection(asyncio.Protocol, *self.address)
        self.to_writer.write(_RAW_MODE.pack(b"D", ack_port))
        self.to_receiver, _ = await loop.create_connection(asyncio.Protocol, "127.0.0.1", rcv_port)
        return self.tally

    async def send(self, i: int, j: int) -> None:
        assert self.to_writer is not None and self.to_receiver is not None
        sent_at = self.tally.sent_at
        clock = time.perf_counter
        pack = _RAW_HEAD.pack
        k = i
        while k < j:
            stop = min(j, self.total + FLIGHT)
            if stop <= k:  # flight size full: wait for an ACK
                self.room.clear()
                async with asyncio.timeout(WAIT):
                    await self.room.wait()
                continue
            frames = []
            for m in range(k, stop):
                sent_at[m] = clock()
                frames.append(pack(0, 0, FRAME_LEN, 0, m))
                frames.append(PAYLOAD)
            data = b"".join(frames)
            self.to_writer.write(data)
            self.to_receiver.write(data)
            k = stop

    async def close_phase(self) -> None:
        for tr in (self.to_writer, self.to_receiver):
            if tr is not None:
                tr.close()
        for srv in (self.ack_server, self.rcv_server):
            if srv is not None:
                srv.close()
        self.to_writer = self.to_receiver = None
        self.ack_server = self.rcv_server = None

    async def stop(self) -> None:
        try:
            await self.close_phase()
        finally:
            if self.proc is not None:
                await self.proc.stop()
            self.tmp.cleanup()


# ==============================================================================================
# A phase
# ==============================================================================================


async def phase(side: Side, rate: int | None, seconds: float) -> PhaseResult:
    """Send at ``rate`` msgs/s (None: open loop) for ``seconds``, wait for the persistence
    ACKs and deliveries, measure."""
    n = OPEN_CAP if rate is None else int(rate * seconds) + MAX_BURST
    tally = await side.open(n)
    clock = time.perf_counter
    send = side.send
    sent = 0
    cpu0, own0 = cpu_seconds(side.server_pid), time.process_time()
    start = clock()
    problem: str | None = None  # a correctness failure, else None
    try:
        if rate is None:
            while sent < n and clock() - start < seconds:
                stop = min(sent + OPEN_CHUNK, n)
                await send(sent, stop)
                sent = stop
                await asyncio.sleep(0)
        else:
            while sent < n:
                now = clock()
                if now - start >= seconds:
                    break
                due = min(int((now - start) * rate), sent + MAX_BURST, n)
                if due > sent:
                    await send(sent, due)
                    sent = due
                # Late by a tick's worth or more (the burst took long, the process was
                # preempted): go on at once, as a timer-driven publisher catching up; else sleep.
                late = (clock() - start) * rate - sent >= rate * TICK
                await asyncio.sleep(0 if late else TICK)
    except TimeoutError:
        problem = f"a send blocked for {WAIT:g} s ({tally.acked:,} of {sent:,} persisted)"
    offered = sent / (clock() - start)
    await tally.drain(sent)
    server = cpu_seconds(side.server_pid) - cpu0
    own = time.process_time() - own0
    acks = side.acks()
    await side.close_phase()
    persisted = tally.acked
    if problem is None and (persisted != sent or tally.duplicates or tally.beyond or tally.errors):
        problem = (
            f"{sent:,} sent, {sent - persisted:,} never persisted, {tally.duplicates} persisted "
            f"twice, {tally.beyond} ACKs for messages never sent, {tally.errors} publish errors"
        )
    lat = tally.latencies(sent, start)
    per = max(persisted, 1)
    return PhaseResult(
        system=side.name,
        rate=rate,
        sent=sent,
        persisted=persisted,
        per_s=persisted / (tally.last_ack - start) if persisted else 0.0,
        offered=offered,
        p50_ms=pct(lat, 0.5) * 1e3,
        p99_ms=pct(lat, 0.99) * 1e3,
        received=tally.received,
        own_us=own / per * 1e6,
        server_us=server / per * 1e6,
        problem=problem,
        acks=acks,
    )


# ==============================================================================================
# Reporting
# ==============================================================================================


def rate_label(rate: int | None) -> str:
    return "open loop" if rate is None else f"{rate:,}/s"


def row(r: PhaseResult) -> str:
    acks = ""
    if r.acks and r.per_s:  # the Store's stability ACK messages: how much it coalesces
        acks = f"  ACKs {r.acks * r.per_s / max(r.persisted, 1):,.0f}/s "
        acks += f"({r.persisted / r.acks:,.1f} msgs each)"
    return (
        f"   {r.system:<9} {rate_label(r.rate):>10}: {r.per_s:>9,.0f} persisted/s "
        f"(offered {r.offered:,.0f}/s)  latency p50 {r.p50_ms:.3f} ms  p99 {r.p99_ms:.3f} ms  "
        f"received {r.received:,}/{r.sent:,}  CPU/msg: this process {r.own_us:.1f} us, "
        f"server {r.server_us:.1f} us{acks}"
    )


def verdict(ok: bool) -> str:
    return "met" if ok else "NOT met"


def summary(results: list[PhaseResult], rates: Sequence[int | None]) -> list[str]:
    by = {(r.system, r.rate): r for r in results}
    out = []
    for rate in rates:
        p, j = by.get(("pyum", rate)), by.get(("JetStream", rate))
        if p is None or j is None or not j.per_s:
            continue
        out.append(
            f"   ratio pyum/JetStream at {rate_label(rate)}: persisted/s {p.per_s / j.per_s:.2f}x"
            f"; p99 latency JetStream/pyum {j.p99_ms / p.p99_ms:.2f}x; CPU per message in "
            f"this process JetStream/pyum {j.own_us / p.own_us:.2f}x"
        )
    pyum = [r for r in results if r.system == "pyum"]
    if pyum:
        best = max(pyum, key=lambda r: r.per_s)
        out.append(
            f"   goal >= {GOAL_RATE:,} persisted msgs/s: best {best.per_s:,.0f} "
            f"({rate_label(best.rate)}): {verdict(best.per_s >= GOAL_RATE)}"
        )
        at = by.get(("pyum", GOAL_P99_AT))
        if at is not None:
            floor = by.get(("raw", GOAL_P99_AT))
            out.append(
                f"   goal p99 <= {GOAL_P99_MS:g} ms at {GOAL_P99_AT:,} msgs/s: {at.p99_ms:.3f} ms: "
                f"{verdict(at.p99_ms <= GOAL_P99_MS)}"
                + (
                    f" (the raw floor on this machine, same run: p99 {floor.p99_ms:.3f} ms)"
                    if floor is not None
                    else ""
                )
            )
        js = [r for r in results if r.system == "JetStream"]
        if js:
            jbest = max(js, key=lambda r: r.per_s)
            ratio = best.per_s / jbest.per_s if jbest.per_s else float("inf")
            out.append(
                f"   goal >= {GOAL_RATIO:g}x JetStream-from-Python (best against best): "
                f"{ratio:.2f}x: {verdict(ratio >= GOAL_RATIO)}"
            )
    return out


# ==============================================================================================
# Set-up
# ==============================================================================================


def jetstream_available() -> tuple[str | None, str]:
    """(nats-server path or None, a line saying what is used or why the row is skipped)."""
    server = shutil.which("nats-server")
    try:
        version = importlib.metadata.version("nats-py")
        import nats  # noqa: F401
    except Exception:  # importlib.metadata.PackageNotFoundError, ImportError
        version = None
    if server is None or version is None:
        missing = []
        if server is None:
            missing.append("nats-server not found (apt-get install nats-server)")
        if version is None:
            missing.append("nats-py not installed (pip install 'pyum[bench]')")
        return None, "   JetStream row skipped: " + "; ".join(missing)
    return (
        server,
        f"   baseline: NATS JetStream, {server} (file storage) driven by nats-py {version}",
    )


def nats_server_version(server: str) -> str:
    import subprocess

    try:
        out = subprocess.run(
            [server, "--version"], capture_output=True, text=True, timeout=10, check=False
        )
    except (OSError, subprocess.TimeoutExpired):
        return "?"
    return (out.stdout or out.stderr).strip() or "?"


def parse_args(argv: Sequence[str]) -> argparse.Namespace:
    p = argparse.ArgumentParser(
        prog="python -m bench.persist", description=__doc__.split("\n", 1)[0]
    )
    p.add_argument(
        "--seconds",
        type=float,
        default=PHASE_SECONDS,
        help=f"seconds each rate is offered (default {PHASE_SECONDS:g})",
    )
    p.add_argument(
        "--rates",
        type=parse_rates,
        default=RATES,
        help="comma-separated offered rates in msgs/s, 'open' for open loop "
        "(default 10000,50000,100000,open)",
    )
    p.add_argument(
        "--batch",
        type=int,
        default=BATCH,
        help=f"pyum's implicit_batching_minimum_length in bytes (default {BATCH}; UM's 2048)",
    )
    p.add_argument("--no-jetstream", action="store_true", help="skip the JetStream baseline")
    p.add_argument("--no-pyum", action="store_true", help="skip pyum (JetStream only)")
    p.add_argument(
        "--no-raw", action="store_true", help="skip the raw sender -> raw disk writer floor row"
    )
    args = p.parse_args(list(argv))
    if not 0.5 <= args.seconds <= 60:
        p.error(f"--seconds {args.seconds:g}: allowed 0.5 to 60")
    if not 1 <= args.batch <= 65536:
        p.error(f"--batch {args.batch}: allowed 1 to 65536 bytes")
    return args


def parse_rates(text: str) -> tuple[int | None, ...]:
    rates: list[int | None] = []
    for part in text.split(","):
        part = part.strip()
        if part == "open":
            rates.append(None)
            continue
        try:
            rate = int(part)
        except ValueError:
            raise argparse.ArgumentTypeError(
                f"rate {part!r}: a whole number of msgs/s or 'open'"
            ) from None
        if not 1 <= rate <= 1_000_000:
            raise argparse.ArgumentTypeError(f"rate {rate}: allowed 1 to 1,000,000 msgs/s")
        rates.append(rate)
    return tuple(rates)


def pyum_missing() -> str | None:
    """Why the pyum row cannot run (the persistent source API is absent), or None."""
    try:
        from umcore.api import Source

        importlib.import_module("umcore.persist.source")
        importlib.import_module("umcore.persist.receiver")
        importlib.import_module("umcore.engine.persist")
    except ImportError as exc:
        return f"{exc}"
    if not hasattr(Source, "wait_registered"):
        return "umcore.api.Source has no wait_registered"
    return None


async def _main(args: argparse.Namespace) -> None:
    from umcore.config.attributes import Configuration, reset_global_configuration

    resolver = resolver_lines(free_udp_port())
    cfg = Configuration()
    cfg.config_text(resolver, "bench")
    reset_global_configuration(cfg)
    sides: list[Side] = []
    results: list[PhaseResult] = []
    server, line = (None, "   JetStream row skipped: --no-jetstream")
    if not args.no_jetstream:
        server, line = jetstream_available()
        if server is not None:
            line += f" ({nats_server_version(server)})"
    print(
        f"   64-byte payloads, flight size {FLIGHT:,} (JetStream: {FLIGHT:,} publishes "
        f"outstanding), {args.seconds:g} s per rate, rates: "
        + ", ".join(rate_label(r) for r in args.rates)
    )
    if not args.no_pyum and (why := pyum_missing()) is not None:
        print(f"   pyum row skipped: the persistent source API is not there ({why})")
        args.no_pyum = True
    elif not args.no_pyum:
        print(
            "   pyum: umestored subprocess, disk repository; persistent source + receiver; "
            f"implicit_batching_minimum_length {args.batch}"
        )
    print(line)
    if not args.no_raw:
        print(
            "   floor: raw sender (this process) -> bench.store's raw disk writer (blocking "
            "loop, subprocess) + a raw receiver; same frames, pacing and flight size"
        )
    try:
        if not args.no_pyum:
            pyum = PyumSide(resolver, args.batch)
            sides.append(pyum)
            await pyum.start()
        if server is not None:
            js = JetStreamSide(server)
            sides.append(js)
            await js.start()
        if not args.no_raw:
            raw = RawSide()
            sides.append(raw)
            await raw.start()
        for n, rate in enumerate(args.rates):
            for side in sides if n % 2 == 0 else sides[::-1]:
                r = await phase(side, rate, args.seconds)
                results.append(r)
                print(row(r), flush=True)
                if r.problem:
                    print(f"   FAILED {r.system} at {rate_label(rate)}: {r.problem}")
    finally:
        for side in sides:
            await side.stop()
        reset_global_configuration(None)
    for text in summary(results, args.rates):
        print(text)
    bad = [r for r in results if r.problem]
    if bad:
        raise BenchFailure(
            "; ".join(f"{r.system} at {rate_label(r.rate)}: {r.problem}" for r in bad)
        )


def main(argv: Sequence[str] | None = None) -> None:
    """``python -m bench persist`` calls this without arguments (the defaults)."""
    args = parse_args(argv or [])
    runner: Callable[..., object]
    try:
        import uvloop

        runner = uvloop.run
    except ImportError:  # pragma: no cover
        runner = asyncio.run
    runner(_main(args))


if __name__ == "__main__":
    main(sys.argv[1:])
