"""Crash consistency of the disk repository: SIGKILL at 200 random points, nothing ACKed lost.

Theory of operation
-------------------
One cache and state directory for the whole test.  Each round forks a child from this
(pre-imported) process; the child reopens the store with :func:`load_store` (so a kill can also
land in a start-up repair), goes on appending after the lead it found, writing through a real
:class:`StoreIO`, and reports every newly stable sequence number (= its write completed: what the
store would ACK) through a pipe.  The parent kills it with SIGKILL once it has seen a random
number of ACKs (sometimes none: the kill then lands anywhere from start-up on), reads the ACKs
that made it into the pipe, and reopens the store itself: the reopen must succeed with no manual
repair, and every sequence number ever ACKed must be held, byte-identical (checked with the
format's own reader, independently of the repository).  Frames are a function of their sequence
number, so a message re-sent after a kill is the same bytes.

The seed is printed (``-s`` shows it; a failure message repeats it); set ``PYUM_CRASH_SEED`` to
replay a run.  Each run draws a new seed, so every CI run adds its kill points to the last ones';
``PYUM_CRASH_ROUNDS`` sets the number of kills for a longer soak (default 200; CI's time budget).
"""

from __future__ import annotations

import asyncio
import hashlib
import os
import random
import select
import signal
import struct
import time
from pathlib import Path

from umcore.aio.storeio import StoreIO, load_store
from umcore.store import diskformat as fmt
from umcore.store.io import IoDone, IoJob, IoKind
from umcore.store.repository import Repository, RepositoryConfig, make_repository
from umcore.store.state import SourceState, encode_state
from umcore.wire import lbmc

ROUNDS = int(os.environ.get("PYUM_CRASH_ROUNDS", "200"))
ROUNDS_PER_STORE = 100  # kills one store directory goes through before a fresh one
REG = 9
MAX_PER_ROUND = 120  # messages a child appends at most, so the files stay small
MAX_ACKS_BEFORE_KILL = 25
# A round whose child is not killed within this many seconds is a failure, not a hang.
ROUND_TIMEOUT = 20.0
JITTER = 0.003  # seconds: at most this much more before the kill
CONFIG = RepositoryConfig(
    kind="disk",
    size_threshold=4096,
    disk_file_size_limit=1 << 40,  # no wrap here: every ACKed message must stay
    async_buffer_length=65664,
)
_ACK = struct.Struct("!I")


def frame(sqn: int) -> bytes:
    size = 8 + (sqn * 37) % 400
    return lbmc.encode_data(1, sqn, bytes((sqn + k) & 0xFF for k in range(size)))


async def _child_main(cache: str, state: str, wfd: int, seed: int) -> None:
    rng = random.Random(seed)
    loop = asyncio.get_running_loop()
    loaded = load_store(cache, state, lambda topic: CONFIG)
    repo: Repository
    io: StoreIO
    if loaded.sources:
        repo = loaded.sources[0][1]
    else:
        repo = make_repository(REG, CONFIG, cache, loop.time())

    def on_done(done: IoDone) -> None:
        if done.job.owner != REG:
            return
        repo.io_done(done, loop.time())
        got = repo.take_newly_stable()
        if got is not None:
            os.write(wfd, _ACK.pack(got[1]))  # ACK: its write completed
        io.submit(repo.take_io())

    io = StoreIO(loop, on_done)
    if not loaded.sources:
        data = encode_state(SourceState(REG, topic="t", repository_type="disk"))
        io.submit([IoJob(IoKind.STATE_WRITE, os.path.join(state, f"{REG}-state"), data=data)])
        await io.drain()
    lead = repo.lead_sqn
    nxt = 0 if lead == 0xFFFFFFFF else lead + 1
    end = nxt + rng.randint(1, MAX_PER_ROUND)
    while nxt < end:
        for _ in range(rng.randint(1, 8)):
            if nxt < end:
                repo.append(nxt, frame(nxt), loop.time())
                nxt += 1
        got = repo.take_newly_stable()  # as a core does after every input
        if got is not None:
            os.write(wfd, _ACK.pack(got[1]))
        io.submit(repo.take_io())
        if rng.random() < 0.5:
            await io.drain()  # small writes and many ACKs, or batches: both kinds of rounds
        else:
            await asyncio.sleep(0)
    await io.drain()
    os.write(wfd, b"DONE")
    await asyncio.Event().wait()  # until killed


def _child(cache: str, state: str, wfd: int, seed: int) -> None:
    try:
        asyncio.run(_child_main(cache, state, wfd, seed))
    finally:
        os._exit(0)


class Checker:
    """What the segment files held at the last check: per file, the length of its whole
    records then and a digest of those bytes.  A repair may only cut a torn tail, so those bytes
    must still be there, unchanged; only what follows is parsed (with the format's checks) and
    compared with the expected frames.  Keeps each round's check proportional to its writes."""

    def __init__(self, cache: Path) -> None:
        self.cache = cache
        self.known: dict[str, tuple[int, bytes]] = {}
        self.held: set[int] = set()

    def check(self, where: str) -> None:
        for path in sorted(self.cache.glob("*.seg")):
            data = path.read_bytes()
            start = fmt.FILE_HEADER_LEN
            if path.name in self.known:
                length, digest = self.known[path.name]
                assert len(data) >= length, f"{where}: {path.name} lost checked bytes"
                assert hashlib.blake2b(data[:length]).digest() == digest, f"{where}: {path.name}"
                start = length
            records, end, _ = fmt.scan_records(data, start, True)
            for off, reg_id, sqn, _, size, _ in records:
                got = data[off + fmt.RECORD_HEADER_LEN : off + size]
                assert reg_id == REG and got == frame(sqn), f"{where}: sqn {sqn} differs"
                self.held.add(sqn)
            self.known[path.name] = (end, hashlib.blake2b(data[:end]).digest())


def test_sigkill_at_random_points_loses_nothing_acked(tmp_path: Path) -> None:
    seed = int(os.environ.get("PYUM_CRASH_SEED", random.SystemRandom().randrange(2**32)))
    print(f"crash test seed {seed} (PYUM_CRASH_SEED={seed} replays it)")
    rng = random.Random(seed)
    kills_mid_write = 0
    total_acked = 0
    acked = -1
    for round_no in range(ROUNDS):
        if round_no % ROUNDS_PER_STORE == 0:  # a fresh store: each round's cost stays flat
            total_acked += acked + 1
            cache = tmp_path / f"cache{round_no}"
            state = tmp_path / f"state{round_no}"
            cache.mkdir()
            state.mkdir()
            acked = -1  # every sqn <= acked was ACKed at some point
            checker = Checker(cache)
            checked = -1  # every sqn <= checked is held byte-identical (checker keeps it so)
        child_seed = rng.randrange(2**32)
        want = rng.randint(0, MAX_ACKS_BEFORE_KILL)
        where = f"seed {seed} round {round_no} (child seed {child_seed}, kill after {want} ACKs)"
        rfd, wfd = os.pipe()
        pid = os.fork()
        if pid == 0:  # pragma: no cover - the child
            os.close(rfd)
            _child(str(cache), str(state), wfd, child_seed)
        os.close(wfd)
        got = 0
        buf = b""
        done = False
        deadline = time.monotonic() + ROUND_TIMEOUT
        while got < want and not done:
            ready, _, _ = select.select([rfd], [], [], max(0.0, deadline - time.monotonic()))
            assert ready, f"{where}: child silent for {ROUND_TIMEOUT} s"
            chunk = os.read(rfd, 4096)
            buf += chunk
            done = not chunk or buf.endswith(b"DONE")
            got = len(buf) // 4
        # a random extra moment, so the kill lands inside writes as well as between them
        # (jitter, not synchronisation: the ACK count above is the synchronisation)
        time.sleep(rng.random() * JITTER)
        os.kill(pid, signal.SIGKILL)
        os.waitpid(pid, 0)
        while chunk := os.read(rfd, 4096):  # ACKs written before the kill
            buf += chunk
        os.close(rfd)
        if buf.endswith(b"DONE"):
            buf = buf[:-4]
        else:
            kills_mid_write += 1
        for (sqn,) in _ACK.iter_unpack(buf[: len(buf) // 4 * 4]):
            acked = max(acked, sqn)
        loaded = load_store(str(cache), str(state), lambda topic: CONFIG)
        assert len(loaded.sources) == (1 if (state / f"{REG}-state").exists() else 0), where
        assert loaded.corrupt_records == 0, f"{where}: {loaded.repairs}"
        if acked >= 0:
            ((_, repo),) = loaded.sources
            assert repo.lead_sqn >= acked and repo.stable_sqn == repo.lead_sqn, where
            checker.check(where)
            while checked + 1 <= acked:
                assert checked + 1 in checker.held, f"{where}: ACKed {checked + 1} lost"
                checked += 1
    total_acked += acked + 1
    print(f"{ROUNDS} kills, {kills_mid_write} before the child finished, {total_acked} ACKed")
    assert total_acked > 0 and kills_mid_write >= ROUNDS // 3, (seed, total_acked, kills_mid_write)
