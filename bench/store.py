"""umestored ingest: stability-ACKed 64-byte messages/s against a minimal raw loop (issue 16).

What runs where (one 2-core machine, loopback only):

- **The store under test** is the real daemon, ``python -m daemons.umestored CONFIG.xml`` as a
  subprocess (a generated configuration in a temporary directory: one Store, topic patterns
  ``bench.mem.*`` -> memory repository and ``bench.disk.*`` -> disk repository, both sized to
  keep every message of the run; multicast topic resolution on loopback).
- **The feeding side** (this process, uvloop): a pyum engine with one
  :class:`~umcore.engine.raw.RawSource` per round on the TCP transport sending pre-encoded
  LBMC DATA frames (64-byte payloads, 76-byte frames, sequence numbers 0, 1, ...) a chunk at a
  time as one run (:meth:`~umcore.engine.raw.RawSource.send_run_nowait`: one join, the topic
  index rewritten column by column, one write -- as the raw loop's feeder joins and writes
  the same chunk; sending frame by frame cost this process more than the Store and made the
  store rounds measure the feeder), and the
  persistent source's control side played with :mod:`umcore.store.compose`: a
  ``SourceRegistration`` per round to the Store's port, the answers (``RegistrationResponse``,
  ``StabilityAck``) arriving on this process's own LBT-TCP listener (:class:`AckServer`; each
  registration names its own transport index, which the Store's ACKs echo).  Like a persistent
  source with ``ume_flight_size`` :data:`WINDOW` (UM's default is 1000; larger here so that the
  window, not the Store, is never the limit), the feeder keeps at most :data:`WINDOW` messages
  un-ACKed.  Ranged ACKs count first..last.
- **The baseline** (:func:`raw_loop`, a subprocess): a blocking loop that receives the same
  frames on a plain TCP socket, splits the stream into frames by their ``msglen``, appends
  each to a list (memory; disk too: the disk repository keeps a memory cache in front of its
  files) and -- disk -- writes each read's frames as the Store's disk format has them (a
  record per frame: header with the frame's sequence number, frame CRC, header CRC; an index
  block per write) with the Store's default durability (no fsync), and writes back one ACK
  per read (the number of messages received so far) over a second socket, nothing else: one
  frame at a time, precompiled structs.  Fed the same way (same frames, same window, same
  chunks), in the same run, rounds alternating their order.

Figures:

1. **Ingest** (:data:`ROUNDS` rounds of :data:`ROUND_SECONDS` each for store-memory,
   store-disk, raw-memory, raw-disk): messages/s from the first send to the ACK of the last
   message; the ratios store / raw (best against best, and the median of per-round ratios);
   CPU time per message of the store daemon and of the raw loop (``/proc/<pid>/stat``: user +
   system, the writer thread included), which other load on the machine distorts less than
   throughput.  Targets: >= 150,000 msgs/s and >= 0.70 of the raw loop, for each repository.
   Correctness (fails the run): every message sent is ACKed, nothing beyond the last one is,
   no stability NAK.
2. **Stability-ACK latency** at half the target rate (75,000 msgs/s: the issue's "half that
   rate" names the 150,000 target), or at half the median measured store rate when the Store
   was slower than the target on this machine, per repository: sends paced
   in bursts at most 1 ms apart for :data:`LATENCY_SECONDS`; a message's latency is from the
   flush of its burst to the arrival of the ACK covering it (the first :data:`LATENCY_WARMUP`
   seconds not counted).  Goal: p99 <= 2 ms.  The raw loop is paced at the same rate for
   reference: its p99 shows what the machine itself adds.  For information, the Store's
   latency at :data:`LOW_RATE` too.  Where it went: the daemon runs with its stage trace
   (:mod:`daemons.umestored.trace`); per phase, p50/p99 of each stage of a message's way
   (:func:`stage_breakdown`: to the Store's read, to the writer thread, the writer's start and
   write, the completion back on the loop, the ACK sent, the ACK here).
3. **Resident memory per 1,000,000 retained 64-byte messages** in a memory repository, measured
   on the repository directly (:func:`umcore.store.repository.make_repository`) in a fresh
   subprocess: ``VmRSS`` before and after appending 1,000,000 frames.  Goal: <= 250 MB.
4. **Restart time of a Store holding 1,000,000 messages on disk**: a disk repository filled
   directly (the repository + :class:`~umcore.aio.storeio.StoreIO`, the state file written as
   the core writes it), then the daemon started on it: process start to its "ready to accept
   registrations" line, against the same daemon starting on an empty Store (interpreter and
   imports); the source's re-registration must come back OLD with the last sequence number.
   Goal: <= 2 s.

Targets are printed as met / not met; only a lost or un-ACKed message (or a store that did not
restore) fails the run.

Profiling the Store: ``PYUM_BENCH_STORE_PROFILE=/tmp/store.prof python -m bench store`` runs
the ingest daemon under cProfile (the figures are then the profiler's, not the Store's); read
it with ``python -m pstats /tmp/store.prof``.
"""

from __future__ import annotations

import asyncio
import bisect
import contextlib
import json
import os
import re
import socket
import statistics
import struct
import sys
import tempfile
import time
import zlib
from array import array
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from umcore.store.repository import RepositoryConfig

ROOT = Path(__file__).resolve().parents[1]

PAYLOAD = 64
FRAME_LEN = 12 + PAYLOAD  # LBMC DATA header + payload
MAX_FRAMES = 600_000  # frames pre-encoded for an ingest round (4 s at 150k/s)
ROUNDS = 3
ROUND_SECONDS = 2.0
WINDOW = 8192  # messages un-ACKed at most (a persistent source's ume_flight_size)
CHUNK = 256  # frames sent per turn of the feeder before it lets the loop read ACKs
LATENCY_SECONDS = 2.5
LATENCY_WARMUP = 0.3  # first seconds of the paced phase not counted
# Information: the latency well below the Store's capacity (at half its measured rate the Store
# is already close to the CPU share it gets on a shared 2-core machine).
LOW_RATE = 5000.0
LOW_SECONDS = 2.0
MAX_BURST = 256  # a paced sender that fell behind catches up by at most this many frames
RETAINED = 1_000_000  # messages for the memory and restart figures
WAIT = 30.0  # bound on every wait for the daemon (a cold subprocess on a busy machine)
CHILD_TIMEOUT = 120.0  # bound on the memory and fill children (seconds of work each)
TARGET_RATE = 150_000
TARGET_RATIO = 0.70
GOAL_P99_MS = 2.0
GOAL_MB_PER_MILLION = 250.0
GOAL_RESTART_S = 2.0
CHECK_EVERY = 64  # every this many fast-parsed ACKs is checked against compose.decode
# Set to a file name: the ingest daemon runs under cProfile and writes its profile there.
PROFILE_ENV = "PYUM_BENCH_STORE_PROFILE"
DISK_LIMIT = 1 << 30  # repository-disk-file-size-limit of the bench's disk topic
MEM_LIMIT = 1 << 30  # repository-size-threshold / -limit: keep every message of the run

_HEAD = struct.Struct("!BBHII")
_U32 = struct.Struct("!I")
_U32LE = struct.Struct("<I")
_II = struct.Struct("!II")
_Q = struct.Struct("!Q")
_MODE = struct.Struct("!cxH")  # raw loop: mode (M/D), ACK port

STORE_XML = """<?xml version="1.0"?>
<ume-store version="1.3">
  <daemon>
    <log type="console"/>
    <lbm-config>{tmp}/store.cfg</lbm-config>
  </daemon>
  <stores>
    <store name="bench" interface="127.0.0.1" port="0">
      <ume-attributes>
        <option type="store" name="disk-cache-directory" value="{tmp}/cache"/>
        <option type="store" name="disk-state-directory" value="{tmp}/state"/>
      </ume-attributes>
      <topics>
        <topic pattern="bench\\.disk\\..*" type="PCRE">
          <ume-attributes>
            <option type="store" name="repository-type" value="disk"/>
            <option type="store" name="repository-size-threshold" value="{mem}"/>
            <option type="store" name="repository-size-limit" value="{mem}"/>
            <option type="store" name="repository-disk-file-size-limit" value="{disk}"/>
          </ume-attributes>
        </topic>
        <topic pattern="bench\\.mem\\..*" type="PCRE">
          <ume-attributes>
            <option type="store" name="repository-type" value="memory"/>
            <option type="store" name="repository-size-threshold" value="{mem}"/>
            <option type="store" name="repository-size-limit" value="{mem}"/>
          </ume-attributes>
        </topic>
      </topics>
    </store>
  </stores>
</ume-store>
"""


def frame(sqn: int, payload: bytes = bytes(PAYLOAD)) -> bytes:
    """One pre-encoded LBMC DATA frame (no extra headers), topic index 0 (the raw source
    rewrites it to its own)."""
    return _HEAD.pack(0, 0, FRAME_LEN, 0, sqn) + payload


def resolver_lines(port: int) -> str:
    return (
        "context resolver_multicast_interface 127.0.0.1\n"
        "context resolver_multicast_address 224.9.10.116\n"
        f"context resolver_multicast_port {port}\n"
        "context transport_tcp_port_low 0\ncontext transport_tcp_port_high 0\n"
        "context request_tcp_port_low 0\ncontext request_tcp_port_high 0\n"
        "context request_tcp_interface 127.0.0.1\n"
        "source transport_tcp_interface 127.0.0.1\n"
    )


def free_udp_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def cpu_seconds(pid: int) -> float:
    """User + system CPU time of process ``pid`` (all its threads; Linux /proc), or NaN."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return float("nan")
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def vm_rss_kb() -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    return -1


def pct(samples: list[float], q: float) -> float:
    s = sorted(samples)
    return s[min(len(s) - 1, int(q * len(s)))] if s else float("nan")


class BenchFailure(AssertionError):
    """A correctness failure: a message not ACKed, ACKed twice over, NAKed; a Store that
    did not restore."""


# ==============================================================================================
# The baseline
# ==============================================================================================


def raw_loop(directory: str) -> None:
    """The baseline: per connection, receive, split the stream into frames by their msglen and
    append each to a list (the store keeps them in memory, a disk repository too, as its cache
    in front of the files); disk: also write each read's frames to a segment file as the
    Store's disk format has them (:mod:`umcore.store.diskformat`: a record per frame -- a
    36-byte header with the sequence number from the frame's header, the frame's CRC and the
    header's CRC -- and an index file of one block per write: its header with a CRC, an entry
    per record), with the Store's default durability (the OS accepted the writes; no fsync);
    ACK each read with the number of messages received so far over a second socket; nothing
    else.  A plain loop, one frame at a time, with precompiled structs."""
    from umcore.store import diskformat as fmt

    rec_head = struct.Struct("<IIIHHIdI").pack  # fmt.RECORD_HEADER without its CRC
    u32 = _U32LE.pack
    entry = fmt.INDEX_ENTRY.pack
    block_head = struct.Struct("<III").pack
    sqn_of = _U32.unpack_from
    crc32 = zlib.crc32
    magic, flags, block_magic = fmt.REC_MAGIC, fmt.REC_PAYLOAD_CRC, fmt.BLOCK_MAGIC
    reg_id, overhead, entry_len = 1, fmt.RECORD_HEADER_LEN, fmt.INDEX_ENTRY_LEN
    srv = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    srv.bind(("127.0.0.1", 0))
    srv.listen(4)
    print(f"listening on 127.0.0.1:{srv.getsockname()[1]}", flush=True)
    buf = bytearray(1 << 20)
    view = memoryview(buf)
    rounds = 0
    while True:
        conn, _ = srv.accept()
        head = b""
        while len(head) < _MODE.size:
            head += conn.recv(_MODE.size - len(head))
        mode, ack_port = _MODE.unpack(head)
        ack = socket.create_connection(("127.0.0.1", ack_port))
        ack.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        rounds += 1
        disk = mode == b"D"
        path = os.path.join(directory, f"raw-{rounds}")
        fd = os.open(path + ".seg", os.O_WRONLY | os.O_CREAT, 0o600)
        ifd = os.open(path + ".idx", os.O_WRONLY | os.O_CREAT, 0o600)
        seg_off = fmt.FILE_HEADER_LEN  # the files open with their headers, as the Store's do
        if disk:
            os.write(fd, fmt.encode_file_header(fmt.SEG_MAGIC, 0, reg_id, 1, time.time()))
            os.write(ifd, fmt.encode_file_header(fmt.IDX_MAGIC, 0, reg_id, 1, time.time()))
        kept: list[bytes] = []
        keep, write = kept.append, os.write
        recv, send, pack = conn.recv_into, ack.sendall, _Q.pack
        pending = b""
        count = 0
        while n := recv(buf):
            data = pending + view[:n] if pending else bytes(view[:n])
            pos, end = 0, len(data)
            if disk:
                arrival = time.time()
                records = bytearray()
                index = bytearray()
                while end - pos >= 4:
                    size = data[pos + 2] << 8 | data[pos + 3]
                    if end - pos < size:
                        break
                    frame = data[pos : pos + size]
                    keep(frame)
                    sqn = sqn_of(data, pos + 8)[0]
                    rh = rec_head(magic, reg_id, sqn, flags, 0, size, arrival, crc32(frame))
                    records += rh
                    records += u32(crc32(rh))
                    records += frame
                    index += entry(sqn, size + overhead, arrival, reg_id, 0)
                    pos += size
                    count += 1
                if records:
                    bh = block_head(block_magic, len(index) // entry_len, seg_off)
                    write(fd, records)
                    write(ifd, bh + u32(crc32(index, crc32(bh))) + index)
                    seg_off += len(records)
            else:
                while end - pos >= 4:
                    size = data[pos + 2] << 8 | data[pos + 3]
                    if end - pos < size:
                        break
                    keep(data[pos : pos + size])
                    pos += size
                    count += 1
            pending = data[pos:]
            send(pack(count))
        os.close(fd)
        os.close(ifd)
        kept.clear()
        ack.close()
        conn.close()


# ==============================================================================================
# The ACK side: an LBT-TCP listener (the persistent source's request port)
# ==============================================================================================


def fast_ack(f: bytes) -> tuple[int, int, bool] | None:
    """``(first, last, nak)`` of a stability ACK laid out as compose encodes it (UME_ACK type
    1, optional UME_RANGED_ACK, UME_STOREID), else None (then compose.decode is asked)."""
    if len(f) < 28 or f[0] != 0x08 or f[1] != 0x14 or f[5] != 20 or f[7] != 1:
        return None
    first = last = _U32.unpack_from(f, 20)[0]
    pos, nh, store = 24, f[4], False
    n = len(f)
    while nh != 0xFF:
        if pos + 2 > n:
            return None
        nxt, hl = f[pos], f[pos + 1]
        if nh == 0x18 and hl == 12 and pos + 12 <= n:
            first, last = _II.unpack_from(f, pos + 4)
        elif nh == 0x17 and hl == 4 and pos + 4 <= n:
            store = True
        else:
            return None
        pos += hl
        nh = nxt
    if pos != n or not store:
        return None
    return first, last, bool(f[6] & 0x04)


class Tally:
    """ACKed sequence numbers of one source: a bitmap of the messages sent, ACK times."""

    def __init__(self, n: int, *, timed: bool = False) -> None:
        self.bitmap = bytearray(n)
        self.acked = 0  # distinct sqns ACKed
        self.duplicates = 0
        self.beyond = 0  # ACKs naming a sqn never sent
        self.naks = 0
        self.last_ack = 0.0
        self.sent_at = array("d", bytes(8 * n)) if timed else None
        self.acked_at = array("d", bytes(8 * n)) if timed else None
        self.latency: list[float] = []
        self.progress = asyncio.Event()

    def ack(self, first: int, last: int, nak: bool, now: float) -> None:
        if nak:
            self.naks += 1
            return
        n = len(self.bitmap)
        if last < first or last >= n:
            self.beyond += 1
            last = min(last, n - 1)
            if last < first:
                return
        span = last - first + 1
        new = self.bitmap.count(0, first, last + 1)
        self.duplicates += span - new
        if new:
            self.bitmap[first : last + 1] = b"\x01" * span
            self.acked += new
            self.last_ack = now
            sent_at = self.sent_at
            if sent_at is not None:
                self.latency.extend(now - sent_at[s] for s in range(first, last + 1))
                assert self.acked_at is not None
                self.acked_at[first : last + 1] = array("d", (now,)) * span
            self.progress.set()

    def check(self, sent: int, what: str) -> None:
        missing = sent - self.bitmap.count(1, 0, sent)
        if missing or self.naks or self.beyond or self.bitmap.count(1, sent):
            raise BenchFailure(
                f"{what}: {sent:,} sent, {missing:,} never ACKed, {self.naks} NAKs, "
                f"{self.beyond} ACKs beyond the last message sent"
            )


class AckPort(asyncio.Protocol):
    """One accepted UIM connection from the Store; frames go to :class:`AckServer`."""

    def __init__(self, server: AckServer) -> None:
        from umcore.wire.lbttcp import LBTTCPDecoder

        self.server = server
        self.decoder = LBTTCPDecoder()

    def data_received(self, data: bytes) -> None:
        now = time.perf_counter()
        on = self.server.on_frame
        for f in self.decoder.feed_frames(data):
            on(f, now)


class AckServer:
    """This process's request port: stability ACKs parsed on a fast path (checked against
    :func:`umcore.store.compose.decode` every :data:`CHECK_EVERY`), anything else decoded by
    compose.  (:class:`umcore.aio.request_port.RequestPort` decodes every header of every UIM
    into objects, about 8 us per ACK here: at one ACK per message it would cap this process
    below the target rate and measure itself instead of the Store.)"""

    def __init__(self) -> None:
        # By the transport index each registration names (a stability ACK echoes it): one
        # per source of the run, so a late ACK can never be counted for another source.
        self.tallies: dict[int, Tally] = {}
        self.other: list[object] = []  # other compositions (registration responses ...)
        self.got_other = asyncio.Event()
        self.fast = 0
        self.strays = 0  # stability ACKs for no current source (counted, not failures)
        self.error: str | None = None  # a fast parse compose disagreed with (fails the run)
        self.server: asyncio.Server | None = None
        self.port = 0

    async def start(self) -> None:
        loop = asyncio.get_running_loop()
        self.server = await loop.create_server(lambda: AckPort(self), "127.0.0.1", 0)
        self.port = self.server.sockets[0].getsockname()[1]

    def on_frame(self, f: bytes, now: float) -> None:
        from umcore.store import compose
        from umcore.wire import lbmc

        got = fast_ack(f)
        if got is not None:
            self.fast += 1
            tix = _U32.unpack_from(f, 8)[0]
            if self.fast % CHECK_EVERY == 0:
                comp = compose.decode(lbmc.decode(f))
                if not (
                    isinstance(comp, compose.StabilityAck)
                    and (comp.first, comp.last, comp.nak, comp.transport_idx) == (*got, tix)
                ):
                    self.error = f"fast ACK parse {got} of {f.hex()} disagrees with {comp}"
                    return
        else:
            comp = compose.decode(lbmc.decode(f))
            if not isinstance(comp, compose.StabilityAck):
                self.other.append(comp)
                self.got_other.set()
                return
            got, tix = (comp.first, comp.last, comp.nak), comp.transport_idx
        tally = self.tallies.get(tix)
        if tally is None:
            self.strays += 1
            return
        tally.ack(*got, now)

    async def wait_other(self, pred: Callable[[object], bool], what: str) -> object:
        """The first non-ACK composition matching ``pred`` (waited for, bounded)."""
        try:
            async with asyncio.timeout(WAIT):
                while True:
                    for c in self.other:
                        if pred(c):
                            self.other.remove(c)
                            return c
                    self.got_other.clear()
                    await self.got_other.wait()
        except TimeoutError:
            raise BenchFailure(f"no {what} within {WAIT:g} s") from None

    def close(self) -> None:
        if self.server is not None:
            self.server.close()


# ==============================================================================================
# Processes
# ==============================================================================================


class Proc:
    """A subprocess whose output lines are collected; waits are bounded."""

    def __init__(self, proc: asyncio.subprocess.Process, started: float) -> None:
        self.proc = proc
        self.started = started
        self.lines: list[tuple[float, str]] = []
        self.changed = asyncio.Event()
        self.reader = asyncio.create_task(self._read())

    @classmethod
    async def start(cls, *argv: str, env: dict[str, str] | None = None) -> Proc:
        started = time.perf_counter()
        proc = await asyncio.create_subprocess_exec(
            *argv,
            cwd=ROOT,
            env=dict(os.environ, PYTHONUNBUFFERED="1", **(env or {})),
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.STDOUT,
        )
        return cls(proc, started)

    async def _read(self) -> None:
        assert self.proc.stdout is not None
        while line := await self.proc.stdout.readline():
            self.lines.append((time.perf_counter(), line.decode(errors="replace").rstrip()))
            self.changed.set()
        self.changed.set()

    async def wait_line(self, pattern: str) -> tuple[float, re.Match[str]]:
        rx = re.compile(pattern)
        seen = 0
        try:
            async with asyncio.timeout(WAIT):
                while True:
                    for at, text in self.lines[seen:]:
                        m = rx.search(text)
                        if m:
                            return at, m
                    seen = len(self.lines)
                    if self.proc.returncode is not None or self.reader.done():
                        raise BenchFailure(f"exited waiting for {pattern!r}: {self.tail()}")
                    self.changed.clear()
                    await self.changed.wait()
        except TimeoutError:
            raise BenchFailure(f"timed out waiting for {pattern!r}: {self.tail()}") from None

    def tail(self) -> str:
        return "\n".join(t for _, t in self.lines[-15:])

    def cpu(self) -> float:
        return cpu_seconds(self.proc.pid)

    async def stop(self) -> None:
        if self.proc.returncode is None:
            self.proc.terminate()
            try:
                await asyncio.wait_for(self.proc.wait(), 15)
            except TimeoutError:
                self.proc.kill()
                await self.proc.wait()
        with contextlib.suppress(Exception):
            await asyncio.wait_for(self.reader, 5)


def store_dirs(tmp: Path) -> Path:
    """A Store's configuration and its two (existing, empty) directories under ``tmp``."""
    for d in ("cache", "state"):
        (tmp / d).mkdir(exist_ok=True)
    cfg = tmp / "store.xml"
    cfg.write_text(STORE_XML.format(tmp=tmp, mem=MEM_LIMIT, disk=DISK_LIMIT))
    return cfg


async def start_store(
    tmp: Path, resolver: str, *, profile: str | None = None, trace: str | None = None
) -> tuple[Proc, tuple[str, int], float]:
    """The daemon on ``tmp``'s configuration: (process, Store address, seconds to ready);
    ``profile``: run it under cProfile, writing that file; ``trace``: it writes its stage
    trace (:mod:`daemons.umestored.trace`) to that file when it stops."""
    from daemons.umestored.trace import TRACE_ENV

    (tmp / "store.cfg").write_text(resolver)
    prof = ("-m", "cProfile", "-o", profile) if profile else ()
    proc = await Proc.start(
        sys.executable,
        *prof,
        "-m",
        "daemons.umestored",
        str(store_dirs(tmp)),
        env={TRACE_ENV: trace} if trace else None,
    )
    _, m = await proc.wait_line(r"listening on (\d+\.\d+\.\d+\.\d+):(\d+)")
    at, _ = await proc.wait_line(r"ready to accept registrations")
    return proc, (m.group(1), int(m.group(2))), at - proc.started


# ==============================================================================================
# Feeding
# ==============================================================================================


class StoreFeed:
    """The feeding side for the Store: a pyum engine with raw sources, the registration
    connection to the Store, the ACK listener."""

    def __init__(self, store: tuple[str, int], acks: AckServer) -> None:
        self.store = store
        self.acks = acks
        self.engine: object = None
        self.writer: asyncio.StreamWriter | None = None
        self.topics = 0

    async def start(self) -> None:
        from umcore.engine import Engine

        engine = Engine()
        await engine.start()
        self.engine = engine
        _, self.writer = await asyncio.open_connection(*self.store)

    async def target(self, kind: str, n: int, *, timed: bool = False) -> StoreTarget:
        """A new raw source on topic ``bench.<kind>.<i>``, registered with the Store and
        joined by it, its ACKs counted by a new :class:`Tally`."""
        from umcore.engine import Engine, RawSource
        from umcore.store import compose

        engine = self.engine
        assert isinstance(engine, Engine) and self.writer is not None
        self.topics += 1
        topic = f"bench.{kind}.{self.topics}"
        raw: RawSource = await engine.open_raw_source(topic)
        tidx, tix = raw.source.tidx, self.topics
        tally = self.acks.tallies[tix] = Tally(n, timed=timed)
        reg = compose.SourceRegistration(
            topic, tix, tidx, ("127.0.0.1", self.acks.port), ctxinst=os.urandom(8)
        )
        self.writer.write(reg.encode())
        resp = await self.acks.wait_other(
            lambda c: isinstance(c, compose.RegistrationResponse) and c.transport_idx == tix,
            f"registration response for {topic}",
        )
        assert isinstance(resp, compose.RegistrationResponse)
        if resp.error is not None:
            raise BenchFailure(f"registration of {topic} refused: {resp.error_text}")
        try:
            async with asyncio.timeout(WAIT):
                while raw.source.receivers < 1:
                    await asyncio.sleep(0.01)
        except TimeoutError:
            await raw.close()
            raise BenchFailure(f"the Store did not join {topic} within {WAIT:g} s") from None
        label = "memory" if kind == "mem" else "disk"
        target = StoreTarget(self, raw, tix, tally, f"store ({label} repository)")
        target.reg_id = resp.reg_id
        return target

    async def close(self) -> None:
        from umcore.engine import Engine

        if self.writer is not None:
            self.writer.close()
        if isinstance(self.engine, Engine):
            await self.engine.close()


class Target:
    """Where an ingest round's frames go: ``send(frames, i, j)`` sends frames i..j-1 (the last
    one flushed); ``tally`` counts the ACKs; ``close`` checks and tears down."""

    tally: Tally
    what: str

    async def send(self, frames: list[bytes], i: int, j: int) -> None:
        raise NotImplementedError

    def check(self, sent: int) -> None:
        """Raise :class:`BenchFailure` unless exactly messages 0..sent-1 were ACKed."""
        self.tally.check(sent, self.what)

    async def teardown(self) -> None:
        raise NotImplementedError

    async def close(self, sent: int) -> None:
        """Wait (bounded) for every ACK, check them, tear down."""
        try:
            try:
                async with asyncio.timeout(WAIT):
                    while self.tally.acked < sent:
                        self.tally.progress.clear()
                        await self.tally.progress.wait()
            except TimeoutError:
                pass
            self.check(sent)
        finally:
            await self.teardown()

    async def stalled(self, sent: int) -> BenchFailure:
        """No ACK arrived for WAIT seconds while sending: tear down, the failure to raise."""
        await self.teardown()
        return BenchFailure(
            f"{self.what}: no stability ACK for {WAIT:g} s with {sent - self.tally.acked:,} "
            f"messages un-ACKed ({self.tally.acked:,} of {sent:,} ACKed)"
        )


class StoreTarget(Target):
    """A raw source registered with the Store (see :meth:`StoreFeed.target`)."""

    def __init__(self, feed: StoreFeed, raw: object, tix: int, tally: Tally, what: str) -> None:
        from umcore.engine import RawSource

        assert isinstance(raw, RawSource)
        self.feed = feed
        self.raw = raw
        self.tix = tix
        self.tidx = raw.source.tidx  # the topic index its frames carry
        self.reg_id = 0  # the Store's RegID for it
        self.tally = tally
        self.what = what

    async def send(self, frames: list[bytes], i: int, j: int) -> None:
        """Frames i..j-1 as one run (:meth:`RawSource.send_run_nowait`: the topic index
        rewritten column by column, one write), as the raw loop's feeder writes one join:
        the feeding costs the same on both sides, so the figures compare the receivers."""
        from umcore.errors import WouldBlock

        raw = self.raw
        data = memoryview(b"".join(frames[i:j]))
        count, done = j - i, 0
        while done < count:
            with contextlib.suppress(WouldBlock):
                done += raw.send_run_nowait(
                    data[done * FRAME_LEN :], FRAME_LEN, count - done, flush=True
                )
            if done < count:
                async with asyncio.timeout(WAIT):
                    await raw.source.wait_writable()
        if count == 1:
            # send_run_nowait's flush covers runs of two or more: a single frame would wait in
            # the source's implicit batch (implicit_batching_minimum_length, 2048 bytes: 27
            # frames, 5.4 ms at 5,000 msgs/s) for the next run, measured as the Store's latency
            raw.flush()

    def check(self, sent: int) -> None:
        super().check(sent)
        if self.feed.acks.error is not None:
            raise BenchFailure(self.feed.acks.error)

    async def teardown(self) -> None:
        self.feed.acks.tallies.pop(self.tix, None)
        await self.raw.close()


class RawAcks(asyncio.Protocol):
    """The raw loop's ACKs: 8-byte counts of messages received so far."""

    def __init__(self, tally: Tally) -> None:
        self.tally = tally
        self.pending = b""
        self.total = 0

    def data_received(self, data: bytes) -> None:
        buf = self.pending + data if self.pending else data
        whole = len(buf) - len(buf) % 8
        if whole:
            got = self.total = _Q.unpack_from(buf, whole - 8)[0]
            t = self.tally
            if got > t.acked:
                t.ack(t.acked, got - 1, False, time.perf_counter())
        self.pending = buf[whole:]


class RawTarget(Target):
    """A connection to the raw loop (and its ACK connection back)."""

    def __init__(self, n: int, mode: bytes, *, timed: bool = False) -> None:
        self.tally = Tally(n, timed=timed)
        self.mode = mode
        self.what = f"raw loop ({'memory' if mode == b'M' else 'disk'})"
        self.acks = RawAcks(self.tally)
        self.server: asyncio.Server | None = None
        self.transport: asyncio.Transport | None = None

    async def open(self, address: tuple[str, int]) -> RawTarget:
        loop = asyncio.get_running_loop()
        self.server = await loop.create_server(lambda: self.acks, "127.0.0.1", 0)
        ack_port = self.server.sockets[0].getsockname()[1]
        self.transport, _ = await loop.create_connection(asyncio.Protocol, *address)
        self.transport.write(_MODE.pack(self.mode, ack_port))
        return self

    async def send(self, frames: list[bytes], i: int, j: int) -> None:
        assert self.transport is not None
        self.transport.write(b"".join(frames[i:j]))

    def check(self, sent: int) -> None:
        super().check(sent)
        if self.acks.total != sent:
            raise BenchFailure(f"{self.what} ACKed {self.acks.total} messages of {sent}")

    async def teardown(self) -> None:
        if self.transport is not None:
            self.transport.close()
        if self.server is not None:
            self.server.close()


async def windowed(target: Target, frames: list[bytes], seconds: float) -> tuple[int, float]:
    """Send frames for ``seconds`` with at most WINDOW un-ACKed, CHUNK at a time; wait for
    and check the ACKs: (messages, msgs/s from the first send to the last ACK)."""
    tally = target.tally
    sent = 0
    limit = len(frames)
    start = time.perf_counter()
    end = start + seconds
    try:
        while sent < limit and time.perf_counter() < end:
            room = WINDOW - (sent - tally.acked)
            if room <= 0:
                tally.progress.clear()
                async with asyncio.timeout(WAIT):
                    await tally.progress.wait()
                continue
            stop = min(sent + min(room, CHUNK), limit)
            await target.send(frames, sent, stop)
            sent = stop
            await asyncio.sleep(0)
    except TimeoutError:
        raise await target.stalled(sent) from None
    await target.close(sent)
    return sent, sent / (tally.last_ack - start)


async def paced(
    target: Target, frames: list[bytes], rate: float, seconds: float
) -> tuple[float, float, float, int]:
    """Send ``rate`` frames/s in bursts (1 ms apart at most, each flushed) for ``seconds``;
    a message's latency is from its burst's flush to the arrival of the ACK covering it.
    (p50 ms, p99 ms, rate offered, messages counted after the warm-up)."""
    tally = target.tally
    sent_at = tally.sent_at
    assert sent_at is not None
    n = len(sent_at)
    sent = 0
    clock = time.perf_counter
    start = clock()
    try:
        while sent < n:
            now = clock()
            if now - start >= seconds:
                break
            due = min(int((now - start) * rate), sent + MAX_BURST, n)
            if due > sent:
                await target.send(frames, sent, due)
                t = clock()
                for i in range(sent, due):
                    sent_at[i] = t
                sent = due
            await asyncio.sleep(0.0005)
    except TimeoutError:  # a send blocked for WAIT seconds
        raise await target.stalled(sent) from None
    offered = sent / (clock() - start)
    await target.close(sent)
    skip = int(rate * LATENCY_WARMUP)  # ACKs arrive in sequence order: the first ones
    lat = tally.latency[skip:] if len(tally.latency) > skip else tally.latency
    return pct(lat, 0.5) * 1e3, pct(lat, 0.99) * 1e3, offered, len(lat)


# Where a stability ACK's latency went, per message, from the Store's stage trace
# (daemons.umestored.trace) and this process's send and ACK times (one clock: perf_counter).
DISK_STAGES = (
    "to the Store",  # the burst's flush here -> the Store's read
    "to the writer",  # read -> the write job holding it handed to the writer thread
    "writer start",  # -> the writer thread performs the batch holding it (GIL, scheduling)
    "write",  # the batch's writes
    "back to loop",  # -> its completion delivered to the core on the loop
    "ACK sent",  # -> the stability ACK covering it sent
    "ACK here",  # -> its arrival here
)
MEMORY_STAGES = ("to the Store", "read to ACK sent", "ACK here")
# A phase's trace records: from EARLY_READ s before its first send time (taken after the send
# call returned: the Store may have read it already; a new source's registration and join take
# longer than that, so the previous phase's reads are left out) to PHASE_MARGIN s after its
# last ACK.
EARLY_READ = 0.002
PHASE_MARGIN = 0.05


def stage_breakdown(
    records: list[list[Any]], target: StoreTarget, disk: bool, skip: int
) -> list[tuple[str, float, float]]:
    """``(stage, p50 ms, p99 ms)`` of ``target``'s timed messages after the first ``skip``,
    from the Store's trace ``records``: :data:`DISK_STAGES` or :data:`MEMORY_STAGES`.  A
    message's write job is the first of its RegID handed to the writer at or after its read
    (the last one handed then: the cut holding the read)."""
    tally = target.tally
    sent_at, acked_at = tally.sent_at, tally.acked_at
    assert sent_at is not None and acked_at is not None
    n = len(sent_at)
    read: dict[int, float] = {}
    acks: dict[int, float] = {}
    job_t: list[float] = []
    job_tag: list[int] = []
    batch: dict[int, tuple[float, float]] = {}  # tag -> writer batch (start, end)
    done: dict[int, float] = {}  # tag -> completion on the loop
    reg = target.reg_id
    # this target's phase only (the phases run one after the other; the topic index and the
    # sequence numbers of an earlier source's reads can be the same)
    begin = min((t for t in sent_at if t), default=0.0) - EARLY_READ
    end = max(acked_at, default=0.0) + PHASE_MARGIN
    for rec in records:
        if not begin <= rec[1] <= end:
            continue
        kind = rec[0]
        if kind == "R" and rec[2] == target.tidx:
            for q in range(rec[3], min(rec[4], n - 1) + 1):
                read.setdefault(q, rec[1])
        elif kind == "S":
            uim = bytes.fromhex(rec[2])
            got = fast_ack(uim)
            if got is not None and not got[2] and _U32.unpack_from(uim, 8)[0] == target.tix:
                for q in range(got[0], min(got[1], n - 1) + 1):
                    acks.setdefault(q, rec[1])
        elif not disk:
            continue
        elif kind == "J":
            tags = [tag for owner, tag in rec[2] if owner == reg]
            if tags:
                job_t.append(rec[1])
                job_tag.append(tags[-1])
        elif kind == "W":
            for owner, tag in rec[3]:
                if owner == reg:
                    batch.setdefault(tag, (rec[1], rec[2]))
        elif kind == "D" and rec[2] == reg:
            done.setdefault(rec[3], rec[1])
    names = DISK_STAGES if disk else MEMORY_STAGES
    cols: list[list[float]] = [[] for _ in names]
    for q in range(skip, n):
        f, a, r, ack = sent_at[q], acked_at[q], read.get(q), acks.get(q)
        if not f or not a or r is None or ack is None:
            continue
        if disk:
            k = bisect.bisect_left(job_t, r)
            if k == len(job_t):
                continue
            tag = job_tag[k]
            w, d = batch.get(tag), done.get(tag)
            if w is None or d is None:
                continue
            vals: tuple[float, ...] = (r - f, job_t[k] - r, w[0] - job_t[k], w[1] - w[0])
            vals += (d - w[1], ack - d, a - ack)
        else:
            vals = (r - f, ack - r, a - ack)
        for col, v in zip(cols, vals, strict=True):
            col.append(v)
    return [
        (name, pct(c, 0.5) * 1e3, pct(c, 0.99) * 1e3) for name, c in zip(names, cols, strict=True)
    ]


# ==============================================================================================
# Phases
# ==============================================================================================


async def ingest_round(
    feed: StoreFeed, kind: str, frames: list[bytes], store: Proc
) -> tuple[float, float, float]:
    """One store round: (msgs/s, store CPU seconds per message, share of the round this
    process (the feeder and the ACK side) was on a CPU)."""
    target = await feed.target(kind, len(frames))
    cpu0, own0 = store.cpu(), time.process_time()
    start = time.perf_counter()
    sent, rate = await windowed(target, frames, ROUND_SECONDS)
    cpu, own = (store.cpu() - cpu0) / sent, time.process_time() - own0
    return rate, cpu, own / (time.perf_counter() - start)


async def raw_round(
    address: tuple[str, int], mode: bytes, frames: list[bytes], rawp: Proc
) -> tuple[float, float, float]:
    """One raw-loop round, as :func:`ingest_round`."""
    target = await RawTarget(len(frames), mode).open(address)
    cpu0, own0 = rawp.cpu(), time.process_time()
    start = time.perf_counter()
    sent, rate = await windowed(target, frames, ROUND_SECONDS)
    cpu, own = (rawp.cpu() - cpu0) / sent, time.process_time() - own0
    return rate, cpu, own / (time.perf_counter() - start)


def topic_config(topic: str) -> RepositoryConfig:
    """``topic``'s repository settings in the bench's Store configuration, as the daemon
    builds them (defaults from the option registry)."""
    from umcore.config import store as store_config
    from umcore.store.repository import RepositoryConfig

    xml = STORE_XML.format(tmp=tempfile.gettempdir(), mem=MEM_LIMIT, disk=DISK_LIMIT)
    matched = store_config.load_text(xml, "bench/store.py").stores[0].match(topic)
    assert matched is not None, topic
    return RepositoryConfig.from_topic(matched)


def rss_child() -> None:
    """Subprocess: VmRSS before/after appending RETAINED frames to a memory repository."""
    from umcore.store.repository import Append, make_repository

    cfg = topic_config("bench.mem.rss")
    now = time.monotonic()
    repo = make_repository(1, cfg, tempfile.gettempdir(), now)
    payload = bytes(PAYLOAD)
    pack = _HEAD.pack
    repo.append(0, pack(0, 0, FRAME_LEN, 0, 0) + payload, now)
    before = vm_rss_kb()
    append = repo.append
    t0 = time.perf_counter()
    for sqn in range(1, RETAINED + 1):
        if append(sqn, pack(0, 0, FRAME_LEN, 0, sqn) + payload, now) is not Append.STORED:
            print(f"FAILED: sqn {sqn} not stored", flush=True)
            return
    took = time.perf_counter() - t0
    after = vm_rss_kb()
    held = repo.stats().get("frames_held", RETAINED)
    print(f"rss {before} {after} {held} {took:.3f}", flush=True)


def fill_child(cache_dir: str, state_dir: str, topic: str, reply_port: int) -> None:
    """Subprocess: a disk repository of RETAINED frames through the repository + StoreIO, and
    the state file the core would write for it; then the time load_store takes to read it
    back (the restore step of the daemon's start, on its own)."""
    asyncio.run(_fill(cache_dir, state_dir, topic, reply_port))
    from umcore.aio.storeio import load_store

    def configs(name: str) -> RepositoryConfig | None:
        return topic_config(name) if name.startswith("bench.") else None

    t0 = time.perf_counter()
    loaded = load_store(cache_dir, state_dir, configs)
    took = time.perf_counter() - t0
    if loaded.messages != RETAINED or loaded.repairs:
        print(f"FAILED: load_store found {loaded.messages} messages, {loaded.repairs[:3]}")
    print(f"loaded {loaded.messages} {took:.3f}", flush=True)


async def _fill(cache_dir: str, state_dir: str, topic: str, reply_port: int) -> None:
    from umcore.aio.storeio import StoreIO
    from umcore.features.latejoin import make_otid
    from umcore.store.repository import Append, make_repository
    from umcore.store.state import SourceState, encode_state, state_name

    loop = asyncio.get_running_loop()
    reg_id = 4242
    cfg = topic_config(topic)
    now = loop.time()
    repo = make_repository(reg_id, cfg, cache_dir, now, wall_offset=time.time() - now)
    done = asyncio.Event()

    def on_done(d: object) -> None:
        from umcore.store.io import IoDone

        assert isinstance(d, IoDone)
        repo.io_done(d, loop.time())
        io.submit(repo.take_io())
        repo.take_newly_stable()
        if repo.stable_sqn == RETAINED - 1:
            done.set()

    io = StoreIO(loop, on_done)
    payload = bytes(PAYLOAD)
    pack = _HEAD.pack
    t0 = time.perf_counter()
    for sqn in range(RETAINED):
        if repo.append(sqn, pack(0, 0, FRAME_LEN, 0, sqn) + payload, now) is not Append.STORED:
            print(f"FAILED: sqn {sqn} not stored", flush=True)
            return
        if sqn & 4095 == 4095:
            io.submit(repo.take_io())
            await asyncio.sleep(0)
            now = loop.time()
    io.submit(repo.take_io())
    async with asyncio.timeout(60):
        await done.wait()
    state = SourceState(
        reg_id=reg_id,
        topic=topic,
        ip="127.0.0.1",
        port=reply_port,
        repository_type="disk",
        created=time.time(),
        otid=make_otid("127.0.0.1", reply_port, 0),
        context_instance=os.urandom(8),
        lead_sqn=RETAINED - 1,
    )
    with open(os.path.join(state_dir, state_name(reg_id)), "wb") as f:
        f.write(encode_state(state))
    await io.close()
    print(f"filled {RETAINED} {time.perf_counter() - t0:.3f} {repo.disk_bytes}", flush=True)


async def run_child(*code: str) -> list[str]:
    """Run ``python -c CODE`` here (bounded); its output lines; BenchFailure when it fails."""
    proc = await Proc.start(sys.executable, "-c", "; ".join(code))
    try:
        async with asyncio.timeout(CHILD_TIMEOUT):
            await proc.proc.wait()
            await proc.reader
    except TimeoutError:
        await proc.stop()
        raise BenchFailure(f"{code[0]}: still running after {CHILD_TIMEOUT:g} s") from None
    out = [t for _, t in proc.lines]
    if proc.proc.returncode != 0 or any(t.startswith("FAILED") for t in out):
        raise BenchFailure("\n".join(out[-15:]))
    return out


async def restart_phase(
    resolver: str, acks: AckServer, meanwhile: asyncio.Task[list[str]]
) -> tuple[float, float, float, float]:
    """(seconds to ready holding RETAINED messages, seconds to ready empty, fill seconds,
    load_store seconds).  ``meanwhile`` (the memory figure's child) runs during the fill and
    is awaited before the daemons are timed."""
    from umcore.store import compose

    topic = "bench.disk.restart"
    with tempfile.TemporaryDirectory(prefix="pyum-bench-store-") as t_full, \
            tempfile.TemporaryDirectory(prefix="pyum-bench-store-") as t_empty:  # fmt: skip
        full, empty = Path(t_full), Path(t_empty)
        store_dirs(full)
        store_dirs(empty)
        out = await run_child(
            "from bench.store import fill_child",
            f"fill_child({str(full / 'cache')!r}, {str(full / 'state')!r}, {topic!r}, {acks.port})",
        )
        fill_s = float(out[-2].split()[2])
        load_s = float(out[-1].split()[2])
        await meanwhile
        times = {}
        for name, tmp in (("empty", empty), ("full", full)):
            proc, address, ready = await start_store(tmp, resolver)
            times[name] = ready
            try:
                if name == "full":
                    _, w = await asyncio.open_connection(*address)
                    w.write(
                        compose.SourceRegistration(
                            topic, 0, 0, ("127.0.0.1", acks.port), reg_id=4242
                        ).encode()
                    )
                    resp = await acks.wait_other(
                        lambda c: isinstance(c, compose.RegistrationResponse) and c.reg_id == 4242,
                        "re-registration response",
                    )
                    w.close()
                    assert isinstance(resp, compose.RegistrationResponse)
                    if (
                        resp.error is not None
                        or not resp.old
                        or resp.high_seqnum != RETAINED - 1
                        or resp.low_seqnum != 0
                    ):
                        raise BenchFailure(f"restarted Store answered {resp}")
            finally:
                await proc.stop()
    return times["full"], times["empty"], fill_s, load_s


def verdict(ok: bool) -> str:
    return "met" if ok else "NOT met"


async def _main() -> None:
    from umcore.config.attributes import Configuration, reset_global_configuration

    resolver = resolver_lines(free_udp_port())
    cfg = Configuration()
    cfg.config_text(resolver, "bench")
    reset_global_configuration(cfg)
    frames = [frame(i) for i in range(MAX_FRAMES)]
    acks = AckServer()
    await acks.start()
    tmp_ctx = tempfile.TemporaryDirectory(prefix="pyum-bench-store-")
    tmp = Path(tmp_ctx.name)
    (tmp / "raw").mkdir()
    store: Proc | None = None
    rawp: Proc | None = None
    feed: StoreFeed | None = None
    trace_file = tmp / "store-trace.json"
    traced: list[tuple[str, StoreTarget, bool, int]] = []  # (label, target, disk, skip)
    trace: list[list[Any]] = []
    try:
        store, address, _ready = await start_store(
            tmp, resolver, profile=os.environ.get(PROFILE_ENV), trace=str(trace_file)
        )
        rawp = await Proc.start(
            sys.executable,
            "-c",
            f"from bench.store import raw_loop; raw_loop({str(tmp / 'raw')!r})",
        )
        _, m = await rawp.wait_line(r"listening on ([\d.]+):(\d+)")
        raw_address = (m.group(1), int(m.group(2)))
        feed = StoreFeed(address, acks)
        await feed.start()
        print(
            f"   {PAYLOAD}-byte payloads ({FRAME_LEN}-byte LBMC frames), window {WINDOW:,} "
            f"un-ACKed, {ROUNDS} rounds x {ROUND_SECONDS:.1f} s each of store-memory, "
            f"store-disk, raw-memory, raw-disk (umestored daemon as a subprocess)"
        )
        names = ("store-mem", "store-disk", "raw-mem", "raw-disk")
        rates: dict[str, list[float]] = {n: [] for n in names}
        cpus: dict[str, list[float]] = {n: [] for n in names}
        busy: dict[str, list[float]] = {n: [] for n in names}
        for rnd in range(ROUNDS):
            order = names if rnd % 2 == 0 else names[::-1]
            for name in order:
                if name.startswith("store"):
                    kind = "mem" if name == "store-mem" else "disk"
                    rate, cpu, own = await ingest_round(feed, kind, frames, store)
                else:
                    mode = b"M" if name == "raw-mem" else b"D"
                    rate, cpu, own = await raw_round(raw_address, mode, frames, rawp)
                rates[name].append(rate)
                cpus[name].append(cpu)
                busy[name].append(own)
            print(
                f"   round {rnd + 1}: "
                + "  ".join(
                    f"{n} {rates[n][-1]:,.0f}/s ({cpus[n][-1] * 1e6:.2f} us)" for n in names
                )
            )
        print("   (msgs/s ACKed; in brackets the receiving process's CPU time per message)")
        for kind in ("mem", "disk"):
            s, r = f"store-{kind}", f"raw-{kind}"
            best = max(rates[s])
            ratio = best / max(rates[r])
            med = statistics.median(a / b for a, b in zip(rates[s], rates[r], strict=True))
            cpu_s = statistics.median(cpus[s]) * 1e6
            cpu_r = statistics.median(cpus[r]) * 1e6
            label = "memory" if kind == "mem" else "disk  "
            print(
                f"   {label} repository: best {best:,.0f} msgs/s ({verdict(best >= TARGET_RATE)}: "
                f">= {TARGET_RATE:,}); raw loop {max(rates[r]):,.0f}; ratio best/best {ratio:.3f}, "
                f"median of rounds {med:.3f} ({verdict(max(ratio, med) >= TARGET_RATIO)}: "
                f">= {TARGET_RATIO:.2f})"
            )
            print(
                f"          CPU per message (median): store {cpu_s:.2f} us, raw loop {cpu_r:.2f} "
                f"us (ratio {cpu_r / cpu_s:.3f}); feeder busy {max(busy[s]):.0%} of the store "
                f"rounds, {max(busy[r]):.0%} of the raw ones"
            )
        for kind in ("mem", "disk"):
            median = statistics.median(rates[f"store-{kind}"])
            half = min(TARGET_RATE, median) / 2
            basis = "half the target rate" if median >= TARGET_RATE else "half the median rate"
            n = min(len(frames), int(half * LATENCY_SECONDS) + MAX_BURST)
            store_t = await feed.target(kind, n, timed=True)
            p50, p99, offered, count = await paced(store_t, frames, half, LATENCY_SECONDS)
            label = "memory" if kind == "mem" else "disk  "
            traced.append(
                (
                    f"{label} repository at {offered:,.0f} msgs/s",
                    store_t,
                    kind == "disk",
                    int(half * LATENCY_WARMUP),
                )
            )
            mode = b"M" if kind == "mem" else b"D"
            raw_t = await RawTarget(n, mode, timed=True).open(raw_address)
            r50, r99, _, _ = await paced(raw_t, frames, half, LATENCY_SECONDS)
            print(
                f"   stability-ACK latency, {label} repository at {offered:,.0f} msgs/s ({basis}"
                f"): p50 {p50:.3f} ms  p99 {p99:.3f} ms over {count:,} messages "
                f"({verdict(p99 <= GOAL_P99_MS)}: p99 <= {GOAL_P99_MS:g} ms); raw loop at the "
                f"same rate: p50 {r50:.3f} ms  p99 {r99:.3f} ms"
            )
        for kind in ("mem", "disk"):
            n = int(LOW_RATE * LOW_SECONDS) + MAX_BURST
            store_t = await feed.target(kind, n, timed=True)
            p50, p99, offered, count = await paced(store_t, frames, LOW_RATE, LOW_SECONDS)
            label = "memory" if kind == "mem" else "disk  "
            traced.append(
                (
                    f"{label} repository at {offered:,.0f} msgs/s",
                    store_t,
                    kind == "disk",
                    int(LOW_RATE * LATENCY_WARMUP),
                )
            )
            print(
                f"   information: stability-ACK latency, {label} repository at {offered:,.0f} "
                f"msgs/s: p50 {p50:.3f} ms  p99 {p99:.3f} ms over {count:,} messages"
            )
    finally:
        if feed is not None:
            await feed.close()
        if store is not None:
            await store.stop()
            with contextlib.suppress(OSError, ValueError):
                trace = json.loads(trace_file.read_text())["records"]
        if rawp is not None:
            await rawp.stop()
        tmp_ctx.cleanup()
    if trace:
        print("   where the stability-ACK latency went (p50/p99 ms per stage; the Store's trace):")
        for label, target, disk, skip in traced:
            stages = stage_breakdown(trace, target, disk, skip)
            print(f"     {label}: " + ", ".join(f"{a} {b:.3f}/{c:.3f}" for a, b, c in stages))
    rss = asyncio.create_task(run_child("from bench.store import rss_child", "rss_child()"))
    full, empty, fill_s, load_s = await restart_phase(resolver, acks, rss)
    before, after, held, took = (await rss)[-1].split()[1:]
    mb = (int(after) - int(before)) / 1024 * 1_000_000 / RETAINED
    print(
        f"   memory repository holding {int(held):,} 64-byte messages: VmRSS +{mb:.1f} MB per "
        f"1,000,000 ({verdict(mb <= GOAL_MB_PER_MILLION)}: <= {GOAL_MB_PER_MILLION:g} MB); "
        f"appended in {float(took):.2f} s"
    )
    print(
        f"   restart of a Store holding {RETAINED:,} messages on disk: {full:.2f} s to ready "
        f"({verdict(full <= GOAL_RESTART_S)}: <= {GOAL_RESTART_S:g} s); empty Store "
        f"{empty:.2f} s (interpreter and imports); load_store alone {load_s:.2f} s (filled "
        f"through the repository and StoreIO in {fill_s:.1f} s)"
    )
    if acks.strays:
        print(f"   ({acks.strays} stability ACKs arrived for sources no longer sending)")
    acks.close()
    reset_global_configuration(None)


def main() -> None:
    try:
        import uvloop

        runner: Callable[..., object] = uvloop.run
    except ImportError:  # pragma: no cover
        runner = asyncio.run
    runner(_main())


if __name__ == "__main__":
    main()
