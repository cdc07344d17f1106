"""StoreIO and load_store on real files: write, restart, repair, refuse, disk full.

Theory of operation
-------------------
Each test makes a cache and a state directory under ``tmp_path``, drives a repository through a
real :class:`umcore.aio.storeio.StoreIO` (its writer thread), then reads the directories back with
:func:`umcore.aio.storeio.load_store`.  Damage is made with ordinary file writes between the two.
Disk-full is made with an injected :class:`FileOps` whose ``pwrite`` raises ENOSPC while a flag
is set (dependency injection, no patching).
"""

from __future__ import annotations

import asyncio
import errno
import os
import tempfile
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from umcore.aio.storeio import FileOps, LoadedStore, StoreIO, load_store
from umcore.errors import ConfigError
from umcore.store import diskformat as fmt
from umcore.store.io import IoDone, IoJob, IoKind
from umcore.store.repository import PENDING, Repository, RepositoryConfig, make_repository
from umcore.store.state import ReceiverState, SourceState, encode_state
from umcore.wire import lbmc

REG = 77


def frame(sqn: int) -> bytes:
    return lbmc.encode_data(3, sqn, bytes([sqn & 0xFF]) * (16 + sqn % 50))


class Harness:
    """One repository fed through a real StoreIO."""

    def __init__(self, root: Path, config: RepositoryConfig, ops: FileOps | None = None) -> None:
        self.cache = root / "cache"
        self.state = root / "state"
        self.cache.mkdir(exist_ok=True)
        self.state.mkdir(exist_ok=True)
        self.config = config
        self.loop = asyncio.get_running_loop()
        self.repo: Repository = make_repository(REG, config, str(self.cache), self.loop.time())
        self.io = StoreIO(self.loop, self.on_done, ops=ops)
        self.reads: list[tuple[int, bytes | None]] = []
        self.changed = asyncio.Event()

    def on_done(self, done: IoDone) -> None:
        if done.job.owner == REG:
            self.repo.io_done(done, self.loop.time())
            self.reads.extend(self.repo.take_read_results())
            self.io.submit(self.repo.take_io())
        self.changed.set()

    async def write_state(self, kind: str) -> None:
        state = SourceState(REG, topic="t", repository_type=kind, receivers=[ReceiverState(5)])
        path = str(self.state / f"{REG}-state")
        self.io.submit([IoJob(IoKind.STATE_WRITE, path, data=encode_state(state))])
        await self.io.drain()

    async def append(self, sqns: range) -> None:
        for s in sqns:
            self.repo.append(s, frame(s), self.loop.time())
        self.io.submit(self.repo.take_io())
        await self.io.drain()

    def load(self) -> LoadedStore:
        return load_store(str(self.cache), str(self.state), lambda topic: self.config)


def seg_files(cache: Path) -> list[Path]:
    return sorted(cache.glob("*.seg"))


@pytest.mark.parametrize("kind", ["disk", "reduced-fd"])
async def test_write_restart_read_back(tmp_path: Path, kind: str) -> None:
    h = Harness(tmp_path, RepositoryConfig(kind=kind, size_threshold=1))
    await h.write_state(kind)
    await h.append(range(0, 500))
    assert h.repo.stable_sqn == 499
    await h.io.close()
    loaded = h.load()
    assert loaded.repairs == [] and loaded.messages == 500
    ((state, repo),) = loaded.sources
    assert state.reg_id == REG and state.receivers == [ReceiverState(5)]
    assert (repo.trail_sqn, repo.lead_sqn, repo.stable_sqn) == (0, 499, 499)
    # read back through a new writer thread
    h2 = Harness(tmp_path, h.config)
    h2.repo = repo
    for s in (0, 250, 499):
        assert repo.get(s) is PENDING
    h2.io.submit(repo.take_io())
    await h2.io.drain()
    assert sorted(h2.reads) == [(s, frame(s)) for s in (0, 250, 499)]
    # and it goes on where it stopped
    await h2.append(range(500, 510))
    assert repo.stable_sqn == 509
    await h2.io.close()
    files = [(p.name, p.read_bytes()) for p in seg_files(h.cache)]
    assert [r.sqn for r in fmt.iter_repository(files, REG)] == list(range(510))


async def test_missing_directories_are_refused(tmp_path: Path) -> None:
    (tmp_path / "state").mkdir()
    with pytest.raises(ConfigError, match=r"disk-cache-directory.*does not exist"):
        load_store(str(tmp_path / "cache"), str(tmp_path / "state"), lambda t: None)
    (tmp_path / "cache").mkdir()
    with pytest.raises(ConfigError, match="disk-state-directory"):
        load_store(str(tmp_path / "cache"), str(tmp_path / "nope"), lambda t: None)
    assert not (tmp_path / "nope").exists()  # never created


async def test_torn_tail_is_repaired_and_reported(tmp_path: Path) -> None:
    h = Harness(tmp_path, RepositoryConfig(kind="disk", size_threshold=1))
    await h.write_state("disk")
    await h.append(range(100))
    await h.io.close()
    seg = seg_files(h.cache)[0]
    whole = seg.stat().st_size
    with seg.open("ab") as f:  # half a record more, as a write cut by a crash leaves it
        f.write(fmt.encode_record(REG, 100, frame(100), 0.0)[:30])
    loaded = h.load()
    assert any("30 bytes lost" in line for line in loaded.repairs), loaded.repairs
    assert loaded.bytes_truncated == 30 and seg.stat().st_size == whole
    ((_, repo),) = loaded.sources
    assert repo.lead_sqn == 99 and repo.stable_sqn == 99
    assert h.load().repairs == []  # repaired for good


async def test_records_beyond_the_index_are_recovered(tmp_path: Path) -> None:
    h = Harness(tmp_path, RepositoryConfig(kind="disk", size_threshold=1))
    await h.write_state("disk")
    await h.append(range(50))
    await h.io.close()
    idx = sorted(h.cache.glob("*.idx"))[0]
    os.truncate(idx, fmt.FILE_HEADER_LEN + 10)  # the index lost its blocks; the data is whole
    loaded = h.load()
    ((_, repo),) = loaded.sources
    assert repo.lead_sqn == 49 and loaded.messages == 50
    again = h.load()
    assert again.repairs == [] and again.messages == 50


async def test_corrupt_middle_record_is_skipped_and_counted(tmp_path: Path) -> None:
    cfg = RepositoryConfig(kind="disk", size_threshold=1, verify_checksums=True)
    h = Harness(tmp_path, cfg)
    await h.write_state("disk")
    await h.append(range(20))
    await h.io.close()
    seg = seg_files(h.cache)[0]
    data = bytearray(seg.read_bytes())
    files = [(seg.name, bytes(data))]
    off = next(r.offset for r in fmt.iter_repository(files) if r.sqn == 7)
    data[off + fmt.RECORD_HEADER_LEN + 3] ^= 0xFF  # a frame byte of sqn 7
    seg.write_bytes(bytes(data))
    loaded = h.load()
    assert loaded.corrupt_records == 1
    assert any("sqn 7" in line and "corrupt" in line for line in loaded.repairs)
    ((_, repo),) = loaded.sources
    assert repo.get(7) is None  # never served
    assert repo.get(8) is PENDING and repo.lead_sqn == 19
    # without verification at start-up the bad frame is caught when read
    h2 = Harness(tmp_path, RepositoryConfig(kind="disk", size_threshold=1))
    ((_, plain),) = h2.load().sources
    h2.repo = plain
    assert plain.get(7) is PENDING
    h2.io.submit(plain.take_io())
    await h2.io.drain()
    assert h2.reads == [(7, None)] and plain.read_errors == 1
    await h2.io.close()


async def test_damaged_state_file_is_reported(tmp_path: Path) -> None:
    h = Harness(tmp_path, RepositoryConfig(kind="memory"))
    await h.write_state("memory")
    await h.io.close()
    path = h.state / f"{REG}-state"
    raw = bytearray(path.read_bytes())
    raw[-2] ^= 1
    path.write_bytes(bytes(raw))
    (h.state / "9-state.tmp").write_bytes(b"half")
    loaded = h.load()
    assert loaded.sources == [] and loaded.bad_state_files == 1
    assert any("bad body CRC" in line for line in loaded.repairs)
    assert not (h.state / "9-state.tmp").exists()


class Failing:
    """pwrite that fails with ENOSPC while ``full`` is set."""

    def __init__(self) -> None:
        self.full = False
        self.failures = 0

    def pwrite(self, fd: int, data: bytes, offset: int) -> int:
        if self.full:
            self.failures += 1
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        return os.pwrite(fd, data, offset)


async def test_disk_full_stops_stability_until_a_retry_succeeds(tmp_path: Path) -> None:
    failing = Failing()
    h = Harness(
        tmp_path, RepositoryConfig(kind="disk", size_threshold=1), FileOps(pwrite=failing.pwrite)
    )
    await h.write_state("disk")
    await h.append(range(10))
    assert h.repo.stable_sqn == 9
    failing.full = True
    await h.append(range(10, 20))
    repo = h.repo
    assert repo.full and repo.write_errors >= 1 and repo.stable_sqn == 9
    assert "No space left" in repo.last_error and h.io.errors >= 1
    # the retry timer fires while the disk is still full: still nothing new is stable
    deadline = repo.next_timer()
    assert deadline is not None
    repo.handle_timer(deadline)
    h.io.submit(repo.take_io())
    await h.io.drain()
    assert repo.full and repo.stable_sqn == 9 and failing.failures >= 2
    failing.full = False
    deadline = repo.next_timer()
    assert deadline is not None
    repo.handle_timer(deadline)
    h.io.submit(repo.take_io())
    await h.io.drain()
    assert not repo.full and repo.stable_sqn == 19
    await h.io.close()
    files = [(p.name, p.read_bytes()) for p in seg_files(h.cache)]
    assert [r.sqn for r in fmt.iter_repository(files, REG)] == list(range(20))


async def test_refused_jobs_come_back_as_errors(tmp_path: Path) -> None:
    loop = asyncio.get_running_loop()
    got: list[IoDone] = []
    io = StoreIO(loop, got.append, max_pending=1)
    path = str(tmp_path / "f")
    io.submit([IoJob(IoKind.WRITE, path, 0, b"a" * 10, tag=i) for i in range(50)])
    await io.drain()
    refused = [d for d in got if d.errno == errno.EAGAIN]
    assert refused and io.refused == len(refused) and len(got) == 50
    await io.close()


async def test_state_write_is_atomic_and_replaces(tmp_path: Path) -> None:
    loop = asyncio.get_running_loop()
    got: list[IoDone] = []
    io = StoreIO(loop, got.append)
    path = str(tmp_path / "5-state")
    for k in range(3):
        io.submit([IoJob(IoKind.STATE_WRITE, path, data=b"v%d" % k)])
    io.submit([IoJob(IoKind.STATE_WRITE, str(tmp_path / "missing" / "x"), data=b"")])
    await io.drain()
    assert Path(path).read_bytes() == b"v2" and sorted(os.listdir(tmp_path)) == ["5-state"]
    assert got[-1].errno == errno.ENOENT and all(d.ok for d in got[:3])
    io.submit([IoJob(IoKind.STATE_DELETE, path)])
    await io.drain()
    assert not Path(path).exists()
    await io.close()


async def test_reduced_fd_wrap_persists_the_trail(tmp_path: Path) -> None:
    cfg = RepositoryConfig(kind="reduced-fd", size_threshold=1, disk_file_size_limit=196992)
    h = Harness(tmp_path, cfg)
    await h.write_state("reduced-fd")
    await h.append(range(3000))
    repo = h.repo
    assert repo.wrapped > 0 and repo.disk_bytes <= 196992 and repo.stable_sqn == 2999
    trail = repo.trail_sqn
    await h.io.close()
    assert [p.name for p in seg_files(h.cache)] == ["reduced-fd-00000001.seg"]
    ((_, back),) = h.load().sources
    assert (back.trail_sqn, back.lead_sqn) == (trail, 2999)
    files = [(p.name, p.read_bytes()) for p in seg_files(h.cache)]
    assert [r.sqn for r in fmt.iter_repository(files, REG)] == list(range(trail, 3000))


@pytest.mark.parametrize("kind", ["memory", "no-cache"])
async def test_memory_kinds_restart_empty_with_their_state(tmp_path: Path, kind: str) -> None:
    h = Harness(tmp_path, RepositoryConfig(kind=kind))
    await h.write_state(kind)
    await h.append(range(10))
    await h.io.close()
    assert list(h.cache.iterdir()) == []
    ((state, repo),) = h.load().sources
    assert state.repository_type == kind and repo.kind == kind and repo.lead_sqn == 0xFFFFFFFF


@settings(max_examples=60, deadline=None)
@given(
    st.sampled_from(["disk", "reduced-fd"]),
    st.sampled_from([196992, 10**9]),
    st.booleans(),
    st.lists(st.tuples(st.integers(1, 400), st.integers(0, 3)), min_size=1, max_size=8),
)
def test_restart_holds_what_was_written(
    kind: str, limit: int, verify: bool, bursts: list[tuple[int, int]]
) -> None:
    """Random bursts through an in-memory disk, the files put in a real directory, restart:
    the restored window is the written one and every message in it reads back as appended."""
    from tests.store.fakedisk import FakeDisk

    cfg = RepositoryConfig(
        kind=kind, size_threshold=1, disk_file_size_limit=limit, verify_checksums=verify
    )
    with tempfile.TemporaryDirectory() as root:
        cache, state = os.path.join(root, "cache"), os.path.join(root, "state")
        os.mkdir(cache)
        os.mkdir(state)
        disk = FakeDisk()
        repo = make_repository(REG, cfg, cache, 0.0)
        sqn = 0
        for count, gap in bursts:
            sqn += gap  # a gap the store never repairs: writing stops before it
            for _ in range(count):
                repo.append(sqn, frame(sqn), 0.0)
                sqn += 1
            for _ in range(10):
                for done in disk.run(repo.take_io()):
                    repo.io_done(done, 0.0)
        for path, data in disk.files.items():
            Path(path).write_bytes(bytes(data))
        Path(state, f"{REG}-state").write_bytes(
            encode_state(SourceState(REG, topic="t", repository_type=kind))
        )
        loaded = load_store(cache, state, lambda topic: cfg)
        assert loaded.repairs == [] and loaded.corrupt_records == 0
        ((_, back),) = loaded.sources
        assert back.lead_sqn == repo.sync_complete_sqn
        if repo.stable_sqn is not None:
            assert back.trail_sqn == repo.trail_sqn
        files = [(p.name, p.read_bytes()) for p in Path(cache).glob("*.seg")]
        held = {r.sqn: r.frame for r in fmt.iter_repository(files, REG)}
        assert all(held[s] == frame(s) for s in held)
        if back.trail_sqn != 0xFFFFFFFF:
            assert sorted(held) == list(range(back.trail_sqn, back.lead_sqn + 1))
