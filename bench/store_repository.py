"""Store repository benchmark (the repository alone, no daemon; bench/store.py runs the daemon): appends with ACKs, memory per retained message, restart time.

Measures, in one run (issue 16's goals in brackets):

* a memory repository taking 1,000,000 frames of 64-byte payloads in order, asking for newly
  stable ranges after every append (what the store core does before ACKing) [>= 150,000/s];
  its resident memory per retained message, from tracemalloc and from the process RSS
  [<= 250 MB per 1,000,000 messages];
* a disk repository fed the same way through a real :class:`StoreIO` writer thread into a
  temporary directory, counting only messages whose write completed [>= 150,000/s];
* restart: :func:`load_store` of that directory once it holds 1,000,000 messages [<= 2 s];
* baselines in the same run: a dict of ``bytes`` per message (the obvious Python store), and the
  same frames written with plain ``os.write`` in 1 MB batches (the disk floor).

Machines are noisy: the ratios against the baselines are the figures to compare across runs.
"""

from __future__ import annotations

import asyncio
import os
import shutil
import tempfile
import time
import tracemalloc

from umcore.aio.storeio import StoreIO, load_store
from umcore.store.io import IoDone
from umcore.store.repository import Append, RepositoryConfig, make_repository
from umcore.wire import lbmc

N = 1_000_000
PAYLOAD = bytes(range(64))
GOAL_RATE = 150_000
# Messages a source keeps un-ACKed (a large ume_flight_size; UM's default is 1000): without it the
# repository's memory cache would fill with unwritten messages and drop at its size limit.
FLIGHT = 100_000
GOAL_MB_PER_M = 250
GOAL_RESTART_S = 2.0


def _frames() -> list[bytes]:
    return [lbmc.encode_data(1, i, PAYLOAD) for i in range(1000)]


def _rss() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


TRACED = 200_000  # tracemalloc slows appends ~10x: bytes per message from this many


def memory_repository(frames: list[bytes]) -> tuple[float, float, float]:
    """(appends/s, traced bytes per message, RSS bytes per message).  RSS first, in a process
    that has not held a repository yet (freed memory is not given back to the OS)."""
    cfg = RepositoryConfig(kind="memory", size_threshold=1 << 40, size_limit=1 << 40)
    base = _rss()
    repo = make_repository(1, cfg, "/nonexistent", 0.0)
    start = time.perf_counter()
    for i in range(N):
        repo.append(i, frames[i % 1000], 0.0)
        repo.take_newly_stable()
    rate = N / (time.perf_counter() - start)
    rss = _rss() - base
    assert repo.frames_held == N
    del repo
    tracemalloc.start()
    repo = make_repository(1, cfg, "/nonexistent", 0.0)
    for i in range(TRACED):
        repo.append(i, frames[i % 1000], 0.0)
    traced = tracemalloc.get_traced_memory()[0]
    tracemalloc.stop()
    return rate, traced / TRACED, rss / N


def dict_baseline(frames: list[bytes]) -> tuple[float, float]:
    start = time.perf_counter()
    held: dict[int, bytes] = {}
    for i in range(N):
        held[i] = memoryview(frames[i % 1000]).tobytes()  # a received frame: its own object
    rate = N / (time.perf_counter() - start)
    del held
    tracemalloc.start()
    kept = {i: memoryview(frames[i % 1000]).tobytes() for i in range(TRACED)}
    traced = tracemalloc.get_traced_memory()[0]
    tracemalloc.stop()
    assert len(kept) == TRACED
    return rate, traced / TRACED


async def disk_repository(frames: list[bytes], cache: str) -> float:
    loop = asyncio.get_running_loop()
    cfg = RepositoryConfig(kind="disk", size_threshold=1 << 20, disk_file_size_limit=1 << 40)
    repo = make_repository(1, cfg, cache, loop.time())
    stable = [-1]
    moved = asyncio.Event()

    def on_done(done: IoDone) -> None:
        repo.io_done(done, loop.time())
        got = repo.take_newly_stable()
        if got is not None:
            stable[0] = got[1]
            moved.set()
        io.submit(repo.take_io())

    io = StoreIO(loop, on_done)
    start = time.perf_counter()
    for i in range(N):
        while i - stable[0] > FLIGHT:  # the source's flight size: it waits for ACKs
            moved.clear()
            await moved.wait()
        if repo.append(i, frames[i % 1000], loop.time()) is not Append.STORED:
            raise AssertionError(f"message {i} refused: {repo.stats()}")
        got = repo.take_newly_stable()
        if got is not None:
            stable[0] = got[1]
        if i % 256 == 255:  # a datagram's worth of input, then the loop turns
            io.submit(repo.take_io())
            await asyncio.sleep(0)
    io.submit(repo.take_io())
    while stable[0] != N - 1:
        moved.clear()
        await moved.wait()
    rate = N / (time.perf_counter() - start)
    await io.close()
    return rate


def write_baseline(frames: list[bytes], path: str) -> float:
    start = time.perf_counter()
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    buf = bytearray()
    for i in range(N):
        buf += frames[i % 1000]
        if len(buf) >= 1 << 20:
            os.write(fd, buf)
            buf = bytearray()
    os.write(fd, buf)
    os.close(fd)
    return N / (time.perf_counter() - start)


def main() -> None:
    frames = _frames()
    rate, traced, rss = memory_repository(frames)
    base_rate, base_bytes = dict_baseline(frames)
    print(f"   memory repository: {rate:,.0f} appends/s with stability checks (goal {GOAL_RATE:,})")
    print(f"   baseline dict of bytes: {base_rate:,.0f}/s, ratio {rate / base_rate:.2f}")
    print(
        f"   memory per retained 64-byte message: {traced:.0f} B traced, {rss:.0f} B RSS = "
        f"{rss * N / 1e6:.0f} MB per 1,000,000 (goal <= {GOAL_MB_PER_M}); "
        f"dict of bytes {base_bytes:.0f} B"
    )
    root = tempfile.mkdtemp(prefix="pyum-bench-store-")
    try:
        cache, state = os.path.join(root, "cache"), os.path.join(root, "state")
        os.mkdir(cache)
        os.mkdir(state)
        disk_rate = asyncio.run(disk_repository(frames, cache))
        raw = write_baseline(frames, os.path.join(root, "raw"))
        print(
            f"   disk repository: {disk_rate:,.0f} messages/s stable (written) "
            f"(goal {GOAL_RATE:,}); plain os.write {raw:,.0f}/s, ratio {disk_rate / raw:.3f}"
        )
        from umcore.store.state import SourceState, encode_state

        with open(os.path.join(state, "1-state"), "wb") as f:
            f.write(encode_state(SourceState(1, topic="t", repository_type="disk")))
        cfg = RepositoryConfig(kind="disk")
        start = time.perf_counter()
        loaded = load_store(cache, state, lambda topic: cfg)
        took = time.perf_counter() - start
        repo = loaded.sources[0][1]
        assert repo.lead_sqn == N - 1 and loaded.messages == N, loaded.repairs
        print(f"   restart of {N:,} messages on disk: {took:.2f} s (goal <= {GOAL_RESTART_S})")
    finally:
        shutil.rmtree(root, ignore_errors=True)
