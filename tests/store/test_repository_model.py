"""Random operation sequences against a repository, checked against what was appended.

Theory of operation
-------------------
Hypothesis draws a repository configuration and a list of operations: appends around the next
sequence number (so gaps, duplicates and old ones happen), running some or all queued I/O jobs
in order, making writes fail and succeed again, moving the clock, RPP consumption, reads.  After
every step the invariants that never depend on timing are checked; at the end the disk is
healed, every job run and the timers fired until nothing moves, and the repository must hold
exactly what it says, byte for byte, on disk as well as in memory.
"""

from __future__ import annotations

import itertools
from collections import deque

from hypothesis import given, settings
from hypothesis import strategies as st

from tests.store.fakedisk import FakeDisk
from umcore.store import diskformat as fmt
from umcore.store.io import IoJob
from umcore.store.repository import (
    NO_SQN,
    PENDING,
    RETRY_DELAY,
    Append,
    Repository,
    RepositoryConfig,
    make_repository,
    serial_lt,
)
from umcore.wire import lbmc

REG = 5
_RUNS = itertools.count()


def frame(sqn: int) -> bytes:
    return lbmc.encode_data(1, sqn, bytes([sqn & 0xFF]) * (1 + sqn % 97))


def fixed_frame(sqn: int) -> bytes:
    """A frame of one length whatever the sqn (a source's read of equal-sized messages)."""
    return lbmc.encode_data(1, sqn, bytes([sqn & 0xFF]) * 40)


ops = st.lists(
    st.one_of(
        st.tuples(st.just("append"), st.integers(-3, 3), st.integers(1, 20)),
        st.tuples(st.just("append_run"), st.integers(-3, 3), st.integers(1, 40)),
        st.tuples(st.just("append_block"), st.integers(-3, 3), st.integers(1, 40)),
        st.tuples(st.just("run"), st.integers(0, 5)),
        st.tuples(st.just("fail"), st.booleans()),
        st.tuples(st.just("tick"), st.floats(0, 3)),
        st.tuples(st.just("release"), st.integers(0, 50)),
        st.tuples(st.just("get"), st.integers(0, 60)),
        st.tuples(st.just("lost"), st.integers(1, 3)),
    ),
    max_size=60,
)
configs = st.builds(
    RepositoryConfig,
    kind=st.sampled_from(["memory", "disk", "reduced-fd"]),
    size_threshold=st.sampled_from([1, 500, 10**9]),
    size_limit=st.sampled_from([3000, 10**9]),
    age_threshold=st.sampled_from([0.0, 2.0]),
    disk_file_size_limit=st.sampled_from([196992, 10**9]),
    async_buffer_length=st.sampled_from([65664, 1 << 20]),
    preallocate=st.booleans(),
    write_delay=st.sampled_from([0.0, 1.0]),
    rpp=st.booleans(),
    ack_on_reception=st.booleans(),
)
starts = st.sampled_from([0, 1000, 0xFFFFFFF0])


def append_run(
    repo: Repository, first: int, frames: list[bytes], now: float, *, block: bool = False
) -> list[Append]:
    """The Store core's way with one read's consecutive frames: Repository.append_run (with
    ``block``, frames of one length: Repository.append_block on their concatenation) while it
    takes them, Repository.append for the first it does not; each frame's outcome."""
    out: list[Append] = []
    joined = memoryview(b"".join(frames))
    size = len(frames[0]) if frames else 0
    while len(out) < len(frames):
        i = len(out)
        if block:
            k = repo.append_block((first + i) & 0xFFFFFFFF, frames[i:], joined[i * size :], now)
        else:
            k = repo.append_run((first + i) & 0xFFFFFFFF, frames[i:], now)
        if k:
            out += [Append.STORED] * k
        else:
            out.append(repo.append((first + i) & 0xFFFFFFFF, frames[i], now))
    return out


@settings(max_examples=150, deadline=None)
@given(configs, starts, ops)
def test_random_operations_keep_the_repository_consistent(
    config: RepositoryConfig, start: int, steps: list[tuple[object, ...]]
) -> None:
    disk = FakeDisk()
    now = 0.0
    cache = f"/model-{next(_RUNS)}"  # a directory of its own (reduced-fd logs are per directory)
    repo = make_repository(REG, config, cache, now)
    queue: deque[IoJob] = deque()
    appended: dict[int, bytes] = {}
    nxt = start
    last_stable: int | None = None
    reported_through: int | None = None
    reads: dict[int, bytes | None] = {}
    released: int | None = None

    def pump(limit: int | None) -> None:
        queue.extend(repo.take_io())
        n = 0
        while queue and (limit is None or n < limit):
            for done in disk.run([queue.popleft()]):
                repo.io_done(done, now)
            queue.extend(repo.take_io())
            n += 1

    def check() -> None:
        nonlocal last_stable, reported_through
        got = repo.take_newly_stable()
        if got is not None:
            first, last = got
            if reported_through is not None:
                assert serial_lt(reported_through, first)
            reported_through = last
        s = repo.stable_sqn
        if last_stable is not None:
            assert s is not None and not serial_lt(s, last_stable)
        last_stable = s
        assert repo.mem_bytes >= 0 and repo.frames_held >= 0
        durable = config.kind != "memory" and not (config.rpp and config.ack_on_reception)
        if durable and s is not None and repo.trail_sqn != NO_SQN:
            # nothing unwritten is stable: every held sqn up to the stable point is on disk
            sc = repo.sync_complete_sqn
            # (0xFFFFFFFF is both a sequence number and UM's "none": equal is fine)
            assert sc == s or (sc != NO_SQN and not serial_lt(sc, s))
            files = [(p, bytes(b)) for p, b in disk.files.items()]
            on_disk = {r.sqn: r.frame for r in fmt.iter_repository(files, REG, True)}
            q = repo.trail_sqn
            while not serial_lt(s, q):
                if q in appended and (released is None or serial_lt(released, q)):
                    assert on_disk.get(q) == appended[q], (q, s)
                q = (q + 1) & 0xFFFFFFFF
        for sqn, data in repo.take_read_results():
            reads[sqn] = data
            if data is not None:
                assert data == appended[sqn]

    for step in steps:
        kind = step[0]
        if kind == "append":
            delta, count = int(step[1]), int(step[2])  # type: ignore[call-overload]
            for _ in range(count):
                sqn = (nxt + delta) & 0xFFFFFFFF
                got = repo.append(sqn, frame(sqn), now)
                if got is Append.STORED:
                    assert sqn not in appended or appended[sqn] == frame(sqn)
                    appended[sqn] = frame(sqn)
                if delta >= 0:
                    nxt = (sqn + 1) & 0xFFFFFFFF
                delta = 0
        elif kind in ("append_run", "append_block"):  # one read's frames, as the core does
            delta, count = int(step[1]), int(step[2])  # type: ignore[call-overload]
            first = (nxt + delta) & 0xFFFFFFFF
            sqns = [(first + k) & 0xFFFFFFFF for k in range(count)]
            block = kind == "append_block"
            make = fixed_frame if block else frame  # (a block's frames are of one length)
            frames = [make(q) for q in sqns]
            for sqn, f, got in zip(
                sqns, frames, append_run(repo, first, frames, now, block=block), strict=True
            ):
                if got is Append.STORED:
                    assert sqn not in appended or appended[sqn] == f
                    appended[sqn] = f
            if delta >= 0:
                nxt = (sqns[-1] + 1) & 0xFFFFFFFF
        elif kind == "run":
            pump(int(step[1]) or None)  # type: ignore[call-overload]
        elif kind == "fail":
            if step[1]:
                disk.fail.update(p for p in disk.files if p.endswith(".seg"))
            else:
                disk.fail.clear()
        elif kind == "tick":
            now += float(step[1])  # type: ignore[arg-type]
            repo.handle_timer(now)
        elif kind == "release" and config.rpp:
            lead = repo.lead_sqn
            if lead != NO_SQN:
                released = (lead - int(step[1])) & 0xFFFFFFFF  # type: ignore[call-overload]
                repo.release_through(released, now)
        elif kind == "get":
            sqn = (start + int(step[1])) & 0xFFFFFFFF  # type: ignore[call-overload]
            got_frame = repo.get(sqn)
            if isinstance(got_frame, bytes):
                assert got_frame == appended[sqn]
        elif kind == "lost":
            lead = repo.lead_sqn
            if lead != NO_SQN:
                repo.declare_lost((lead + 1) & 0xFFFFFFFF, (lead + int(step[1])) & 0xFFFFFFFF, now)  # type: ignore[call-overload]
        check()

    # heal and settle
    disk.fail.clear()
    for _ in range(50):
        now += max(RETRY_DELAY, config.write_delay, config.age_threshold) + 0.01
        repo.handle_timer(now)
        pump(None)
        check()
        if not queue and not repo.full and repo.next_timer() is None:
            break
    assert not repo.full
    contig = repo.contig_sqn
    if contig != NO_SQN and repo.lead_sqn != NO_SQN:
        assert (
            repo.stable_sqn == contig
            or (config.rpp and config.kind != "memory" and repo.room_bytes == 0)
            or repo.trail_sqn == NO_SQN
        )
    trail, lead = repo.trail_sqn, repo.lead_sqn
    if trail == NO_SQN or config.kind == "memory":
        held_range: list[int] = []
    else:
        held_range = [(trail + k) & 0xFFFFFFFF for k in range(((lead - trail) & 0xFFFFFFFF) + 1)]
    # every held message reads back as appended
    for sqn in held_range:
        got_frame = repo.get(sqn)
        if got_frame is PENDING:
            pump(None)
            results = dict(repo.take_read_results())
            got_frame = results.get(sqn)
        if sqn in appended and got_frame is not None:
            assert got_frame == appended[sqn]
    # the files hold whole, valid records of appended frames, in sequence order
    if config.kind in ("disk", "reduced-fd"):
        files = [(p, bytes(b)) for p, b in disk.files.items()]
        recs = [r for r in fmt.iter_repository(files, REG, True) if r.sqn in appended]
        for r in recs:
            assert r.frame == appended[r.sqn]
        sqns = [r.sqn for r in recs]
        for a, b in itertools.pairwise(sqns):
            assert serial_lt(a, b)
        if config.kind == "disk":
            assert repo.disk_bytes == sum(len(b) for b in disk.files.values())
        if repo.stable_sqn is not None and not config.rpp and trail != NO_SQN:
            # SPP: everything from the trail to the stable point is on disk
            on_disk = set(sqns)
            s = trail
            while s in appended and not serial_lt(repo.stable_sqn, s):
                assert s in on_disk, (s, trail, repo.stable_sqn)
                s = (s + 1) & 0xFFFFFFFF


# What a run appends differently from single appends, by design: it cuts one write per run
# where appends cut one per message when few writes are in flight (and each write adds an
# index block header to the disk's bytes).
_JOB_SHAPE = {"writes", "writes_pending", "disk_bytes"}

reads = st.lists(
    st.tuples(st.integers(-2, 2), st.integers(1, 60), st.sampled_from([1, 20, 200, 1400])),
    min_size=1,
    max_size=25,
)


@settings(max_examples=120, deadline=None)
@given(configs, starts, reads, st.integers(0, 3))
def test_append_run_stores_what_appends_store(
    config: RepositoryConfig, start: int, batches: list[tuple[int, int, int]], pump_every: int
) -> None:
    """The same reads appended one message at a time, as runs and as blocks (each read's
    frames are of one length): the same outcomes, the same state, the same records on disk,
    byte for byte, and the same frames read back."""
    runs = next(_RUNS)
    sides = []
    for mode in ("single", "run", "block"):
        disk = FakeDisk()
        repo = make_repository(REG, config, f"/equiv-{runs}-{mode}", 0.0)
        outcomes: list[Append] = []
        nxt = start
        now = 0.0
        for b, (delta, count, size) in enumerate(batches):
            first = (nxt + delta) & 0xFFFFFFFF
            sqns = [(first + k) & 0xFFFFFFFF for k in range(count)]
            frames = [lbmc.encode_data(1, q, bytes([q & 0xFF]) * size) for q in sqns]
            if mode == "single":
                outcomes += [repo.append(q, f, now) for q, f in zip(sqns, frames, strict=True)]
            else:
                outcomes += append_run(repo, first, frames, now, block=mode == "block")
            nxt = (sqns[-1] + 1) & 0xFFFFFFFF
            now += 0.001
            if pump_every and b % pump_every == 0:
                for _ in range(100):
                    jobs = repo.take_io()
                    if not jobs:
                        break
                    for done in disk.run(jobs):
                        repo.io_done(done, now)
        for _ in range(100):
            jobs = repo.take_io()
            if not jobs:
                break
            for done in disk.run(jobs):
                repo.io_done(done, now)
        stats = {k: v for k, v in repo.stats().items() if k not in _JOB_SHAPE}
        if config.kind == "disk":
            assert repo.disk_bytes == sum(len(d) for d in disk.files.values())
        files = [(p.rsplit("/", 1)[1], bytes(d)) for p, d in sorted(disk.files.items())]
        records = [(r.sqn, r.frame) for r in fmt.iter_repository(files, REG, True)]
        held = {}
        if repo.lead_sqn != NO_SQN and repo.trail_sqn != NO_SQN:
            q = repo.trail_sqn
            for _ in range(((repo.lead_sqn - q) & 0xFFFFFFFF) + 1):
                got = repo.get(q)
                held[q] = got if isinstance(got, bytes) else None
                q = (q + 1) & 0xFFFFFFFF
        sides.append((outcomes, stats, records, held, repo.stable_sqn))
    single = sides[0]
    for run in sides[1:]:
        assert run[0] == single[0]  # each frame's outcome
        assert run[1] == single[1]  # the repository's figures
        assert run[2] == single[2]  # the records on disk
        assert run[3] == single[3]  # what reads back
        assert run[4] == single[4]  # the stable point
