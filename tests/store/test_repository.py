"""Repository kinds, windows, retention and stability, with a fake clock and an in-memory disk.

Theory of operation
-------------------
:class:`Rig` owns one repository and a :class:`tests.store.fakedisk.FakeDisk`; ``rig.run()``
performs every queued IoJob and feeds the completions back, as StoreIO would, until nothing is
left.  Time is the rig's ``now``, moved by the tests.  Frames are real LBMC data messages.
"""

from __future__ import annotations

import errno

import pytest

from tests.store.fakedisk import FakeDisk
from umcore.config import store as store_config
from umcore.errors import ConfigError
from umcore.store import diskformat as fmt
from umcore.store.io import IoDone, IoJob, IoKind
from umcore.store.repository import (
    NO_SQN,
    OVERHEAD,
    PENDING,
    RETRY_DELAY,
    Append,
    Repository,
    RepositoryConfig,
    RestoredSegment,
    make_repository,
    restore_repository,
    serial_lt,
)
from umcore.wire import lbmc

PAYLOAD = bytes(range(64))


def frame(sqn: int, size: int = 64) -> bytes:
    return lbmc.encode_data(7, sqn, (PAYLOAD * (size // 64 + 1))[:size])


class Rig:
    def __init__(self, **cfg: object) -> None:
        self.disk = FakeDisk()
        self.now = 1000.0
        self.config = RepositoryConfig(**cfg)  # type: ignore[arg-type]
        self.repo: Repository = make_repository(42, self.config, "/cache", self.now)
        self.stable: list[tuple[int, int]] = []

    def append(self, sqn: int, size: int = 64, run: bool = True) -> Append:
        got = self.repo.append(sqn, frame(sqn, size), self.now)
        if run:
            self.run()
        return got

    def run(self) -> list[IoJob]:
        done_jobs: list[IoJob] = []
        while True:
            jobs = self.repo.take_io()
            if not jobs:
                break
            done_jobs.extend(jobs)
            for done in self.disk.run(jobs):
                self.repo.io_done(done, self.now)
        self.collect()
        return done_jobs

    def collect(self) -> None:
        while (got := self.repo.take_newly_stable()) is not None:  # as the Store core does
            self.stable.append(got)

    def tick(self, dt: float) -> None:
        self.now += dt
        self.repo.handle_timer(self.now)
        self.run()


# --- memory ---------------------------------------------------------------------------------


def test_memory_in_order_stable_on_reception() -> None:
    rig = Rig(kind="memory", size_threshold=10**9)
    for s in range(5):
        assert rig.append(s, run=False) is Append.STORED
    rig.run()
    assert rig.stable == [(0, 4)]
    r = rig.repo
    assert (r.trail_sqn, r.mem_trail_sqn, r.lead_sqn, r.contig_sqn) == (0, 0, 4, 4)
    assert r.get(3) == frame(3)
    assert r.get(9) is None
    assert rig.append(3) is Append.DUPLICATE
    assert r.duplicates == 1
    assert rig.disk.jobs == []  # memory: no I/O at all


def test_memory_gap_holds_stability_until_repaired() -> None:
    rig = Rig(kind="memory", size_threshold=10**9)
    for s in (10, 11, 13, 14):
        rig.append(s, run=False)
    rig.run()
    assert rig.stable == [(10, 11)]
    assert rig.repo.contig_sqn == 11 and rig.repo.lead_sqn == 14
    rig.append(12)
    assert rig.stable == [(10, 11), (12, 14)]
    assert rig.append(9) is Append.OLD  # before the trail


def test_memory_threshold_releases_oldest() -> None:
    per = len(frame(0)) + OVERHEAD
    rig = Rig(kind="memory", size_threshold=per * 10)
    for s in range(25):
        rig.append(s)
    r = rig.repo
    assert r.mem_bytes <= per * 10
    assert r.trail_sqn == 15 and r.lead_sqn == 24 and r.frames_held == 10
    assert r.threshold_releases == 15
    assert r.get(14) is None and r.get(15) == frame(15)
    assert rig.append(3) is Append.OLD


def test_memory_threshold_deleting_before_collection_still_reports_stable() -> None:
    # The Store appends a whole read of frames before it collects what became stable; frames
    # the threshold deleted in between were stable on reception and are still reported (they
    # were never ACKed: the source waited for them forever).
    per = len(frame(0)) + OVERHEAD
    rig = Rig(kind="memory", size_threshold=per * 10)
    for s in range(25):
        rig.append(s, run=False)
    rig.run()
    assert rig.stable == [(0, 14), (15, 24)]
    assert rig.repo.trail_sqn == 15
    for s in range(25, 40):
        rig.append(s, run=False)
    rig.run()
    assert rig.stable[2:] == [(25, 29), (30, 39)]


def test_memory_size_limit_drops_new_messages() -> None:
    per = len(frame(0)) + OVERHEAD
    rig = Rig(kind="memory", size_threshold=10**9, size_limit=per * 4)
    got = [rig.append(s) for s in range(6)]
    assert got == [Append.STORED] * 4 + [Append.DROPPED] * 2
    assert rig.repo.size_limit_drops == 2 and rig.repo.intentional_drops == 2
    assert rig.repo.lead_sqn == 3


def test_rpp_accounts_payload_only() -> None:
    rig = Rig(kind="memory", size_threshold=10**9, size_limit=64 * 4, rpp=True)
    got = [rig.append(s) for s in range(5)]
    assert got == [Append.STORED] * 4 + [Append.DROPPED]
    assert rig.repo.mem_bytes == 64 * 4
    spp = Rig(kind="memory", size_threshold=10**9, size_limit=64 * 4)
    spp.append(0)
    assert spp.repo.mem_bytes == len(frame(0)) + OVERHEAD  # SPP: payload + headers + overhead


def test_memory_age_threshold() -> None:
    rig = Rig(kind="memory", size_threshold=10**9, age_threshold=5.0)
    rig.append(0)
    rig.now += 2
    rig.append(1)
    assert rig.repo.next_timer() == 1005.0
    rig.tick(3.5)  # now 1005.5: sqn 0 is 5.5 s old, sqn 1 3.5 s
    assert rig.repo.trail_sqn == 1 and rig.repo.age_releases == 1
    assert rig.repo.next_timer() == 1007.0
    rig.tick(2)
    assert rig.repo.trail_sqn == NO_SQN and rig.repo.frames_held == 0


def test_memory_rpp_release_through() -> None:
    rig = Rig(kind="memory", size_threshold=1, rpp=True)
    for s in range(10):
        rig.append(s)
    assert rig.repo.frames_held == 10  # RPP: the threshold does not delete
    rig.repo.release_through(6, rig.now)
    assert rig.repo.trail_sqn == 7 and rig.repo.frames_held == 3
    assert rig.repo.mem_bytes == 3 * 64 and rig.repo.rpp_releases == 7


def test_serial_arithmetic_across_zero() -> None:
    assert serial_lt(0xFFFFFFFF, 0) and not serial_lt(0, 0xFFFFFFFF)
    assert serial_lt(0x80000000, 0xFFFFFFFF) and not serial_lt(0x7FFFFFFE, 0xFFFFFFFF)
    for kind in ("memory", "disk"):
        rig = Rig(kind=kind, size_threshold=10**9)
        sqns = [(0xFFFFFFF0 + k) & 0xFFFFFFFF for k in range(32)]
        for s in sqns:
            assert rig.append(s) is Append.STORED
        r = rig.repo
        assert (r.trail_sqn, r.lead_sqn, r.stable_sqn) == (0xFFFFFFF0, 0x0F, 0x0F)
        assert rig.stable[0][0] == 0xFFFFFFF0 and rig.stable[-1][1] == 0x0F
        assert r.get(0xFFFFFFFF) == frame(0xFFFFFFFF) and r.get(0) == frame(0)
        assert rig.append(0xFFFFFFEF) is Append.OLD


def test_too_far_ahead_is_refused() -> None:
    rig = Rig(kind="memory", size_threshold=10**9)
    rig.append(0)
    assert rig.append(1 << 21) is Append.DROPPED
    assert rig.repo.gap_drops == 1


def test_declare_lost_passes_gap() -> None:
    rig = Rig(kind="disk", size_threshold=10**9)
    rig.append(0)
    rig.append(3)
    assert rig.repo.stable_sqn == 0
    rig.repo.declare_lost(1, 2, rig.now)
    rig.run()
    assert rig.repo.stable_sqn == 3 and rig.repo.lost == 2
    assert rig.append(1) is Append.LOST


def test_no_cache_keeps_only_numbers() -> None:
    rig = Rig(kind="no-cache")
    assert rig.append(5, run=False) is Append.STORED
    assert rig.append(6, run=False) is Append.STORED
    assert rig.append(6) is Append.DUPLICATE
    assert rig.stable == [(5, 6)]
    assert rig.repo.get(5) is None and rig.repo.lead_sqn == 6
    assert rig.repo.frames_held == 0 and rig.disk.jobs == []


# --- disk -----------------------------------------------------------------------------------


def records_of(rig: Rig) -> list[int]:
    files = [(p, bytes(b)) for p, b in rig.disk.files.items()]
    return [r.sqn for r in fmt.iter_repository(files, 42)]


def test_disk_stable_only_after_write_completes() -> None:
    rig = Rig(kind="disk", size_threshold=10**9)
    rig.repo.append(0, frame(0), rig.now)
    rig.repo.append(1, frame(1), rig.now)
    assert rig.repo.stable_sqn is None and rig.repo.take_newly_stable() is None
    jobs = rig.repo.take_io()
    assert {j.kind for j in jobs} == {IoKind.WRITE}
    assert rig.repo.sync_sqn == 1 and rig.repo.sync_complete_sqn == NO_SQN
    for done in rig.disk.run(jobs):
        rig.repo.io_done(done, rig.now)
    assert rig.repo.take_newly_stable() == (0, 1)
    assert rig.repo.sync_complete_sqn == 1
    assert records_of(rig) == [0, 1]


@pytest.mark.parametrize("kind", ["memory", "disk"])
def test_append_block_takes_a_read_at_once(kind: str) -> None:
    """A read of equal-sized frames goes in as one block (the Store's hot path): all taken by
    one call, stable together after the one write, the same records as appends make."""
    rig = Rig(kind=kind, size_threshold=10**9)
    assert rig.append(0) is Append.STORED  # (a block continues a repository: not the first)
    frames = [frame(q) for q in range(1, 301)]
    assert rig.repo.append_block(1, frames, b"".join(frames), rig.now) == 300
    jobs = rig.run()
    assert rig.stable == [(0, 0), (1, 300)]
    assert [rig.repo.get(q) for q in (1, 150, 300)] == [frame(1), frame(150), frame(300)]
    if kind == "disk":
        assert len(jobs) == 1 and records_of(rig) == list(range(301))
    # not the next sqn, or frames of two lengths: nothing taken (append handles them)
    assert rig.repo.append_block(302, [frame(302)], frame(302), rig.now) == 0
    two = [frame(301), frame(302, 65)]
    assert rig.repo.append_block(301, two, b"".join(two), rig.now) == 0


def test_disk_writes_in_sequence_order_gap_holds_later() -> None:
    rig = Rig(kind="disk", size_threshold=10**9)
    rig.append(0)
    rig.append(2)
    rig.append(3)
    assert rig.repo.stable_sqn == 0 and records_of(rig) == [0]
    assert rig.repo.mem_trail_sqn == 0
    rig.append(1)
    assert rig.repo.stable_sqn == 3 and records_of(rig) == [0, 1, 2, 3]
    assert rig.stable == [(0, 0), (1, 3)]


def test_disk_threshold_releases_memory_and_reads_back() -> None:
    per = len(frame(0)) + OVERHEAD
    rig = Rig(kind="disk", size_threshold=per * 3)
    for s in range(10):
        rig.append(s)
    r = rig.repo
    assert r.trail_sqn == 0 and r.mem_trail_sqn == 7 and r.mem_bytes == per * 3
    assert r.get(8) == frame(8)
    assert r.get(2) is PENDING
    assert r.get(2) is PENDING  # one read in flight per sqn
    jobs = rig.run()
    assert [j.kind for j in jobs] == [IoKind.READ]
    assert r.take_read_results() == [(2, frame(2))]


def test_disk_read_of_corrupt_record_is_not_served() -> None:
    rig = Rig(kind="disk", size_threshold=1)
    for s in range(3):
        rig.append(s)
    seg = next(p for p in rig.disk.files if p.endswith(".seg"))
    rig.disk.files[seg][-5] ^= 0xFF  # inside the last frame
    assert rig.repo.get(2) is PENDING
    rig.run()
    assert rig.repo.take_read_results() == [(2, None)]
    assert rig.repo.read_errors == 1


def test_disk_wrap_deletes_oldest_segment() -> None:
    limit = 196992
    rig = Rig(kind="disk", size_threshold=1, disk_file_size_limit=limit)
    for s in range(4000):
        rig.append(s)
    r = rig.repo
    sizes = sum(len(b) for b in rig.disk.files.values())
    assert sizes == r.disk_bytes <= limit
    assert r.wrapped > 0 and r.trail_sqn > 0 and r.lead_sqn == 3999
    assert r.stable_sqn == 3999
    held = records_of(rig)
    assert held == list(range(r.trail_sqn, 4000))
    assert r.get(r.trail_sqn - 1) is None
    assert any(j.kind == IoKind.REPO_DELETE for j in rig.disk.jobs)


def test_disk_async_buffer_length_bounds_each_write() -> None:
    rig = Rig(kind="disk", size_threshold=10**9, async_buffer_length=65664)
    for s in range(3000):
        rig.repo.append(s, frame(s), rig.now)
    jobs = rig.run()
    writes = [j for j in jobs if j.kind == IoKind.WRITE]
    assert len(writes) > 3
    assert all(len(j.data) <= 65664 + fmt.FILE_HEADER_LEN for j in writes)
    assert rig.repo.stable_sqn == 2999


def test_disk_preallocate() -> None:
    rig = Rig(kind="disk", size_threshold=10**9, preallocate=True, disk_file_size_limit=8 << 20)
    rig.append(0)
    first = rig.disk.jobs[0]
    assert first.preallocate == (1 << 20) + fmt.FILE_HEADER_LEN
    seg = next(p for p in rig.disk.files if p.endswith(".seg"))
    assert len(rig.disk.files[seg]) == first.preallocate
    assert records_of(rig) == [0]


def test_disk_write_error_holds_stability_until_retry_succeeds() -> None:
    rig = Rig(kind="disk", size_threshold=10**9)
    rig.append(0)
    seg = next(p for p in rig.disk.files if p.endswith(".seg"))
    rig.disk.fail.add(seg)
    rig.append(1)
    rig.append(2)
    r = rig.repo
    assert r.full and r.write_errors >= 1 and r.stable_sqn == 0
    assert r.next_timer() is not None
    rig.tick(RETRY_DELAY)  # still failing
    assert r.full and r.stable_sqn == 0
    rig.disk.fail.clear()
    rig.tick(RETRY_DELAY)
    assert not r.full and r.stable_sqn == 2
    assert records_of(rig) == [0, 1, 2]


def test_disk_rpp_write_delay_and_release_before_write() -> None:
    rig = Rig(kind="disk", size_threshold=10**9, rpp=True, write_delay=1.0)
    for s in range(4):
        rig.append(s)
    assert rig.disk.jobs == [] and rig.repo.stable_sqn is None
    assert rig.repo.next_timer() == rig.now + 1.0
    rig.repo.release_through(1, rig.now)  # consumed before the delay: never written, stable
    rig.run()
    assert rig.repo.stable_sqn == 1 and rig.disk.jobs == []
    rig.tick(1.0)
    assert rig.repo.stable_sqn == 3 and records_of(rig) == [2, 3]


def test_disk_rpp_ack_on_reception() -> None:
    rig = Rig(kind="disk", size_threshold=10**9, rpp=True, ack_on_reception=True)
    rig.repo.append(0, frame(0), rig.now)
    assert rig.repo.stable_sqn == 0  # before any write completed
    rig.run()
    assert records_of(rig) == [0]
    spp = Rig(kind="disk", size_threshold=10**9, ack_on_reception=True)  # SPP: no effect
    spp.repo.append(0, frame(0), spp.now)
    assert spp.repo.stable_sqn is None


def test_disk_rpp_never_wraps_unconsumed() -> None:
    limit = 196992
    rig = Rig(kind="disk", size_threshold=1, rpp=True, disk_file_size_limit=limit)
    n = 0
    while rig.repo.room_bytes > 0 and n < 5000:
        rig.append(n)
        n += 1
    r = rig.repo
    assert r.wrapped == 0 and r.trail_sqn == 0
    assert r.stable_sqn is not None and r.stable_sqn < r.lead_sqn  # writing stopped
    before = r.stable_sqn
    r.release_through(before, rig.now)  # consumed: their segments go, writing resumes
    rig.run()
    assert r.stable_sqn > before and r.trail_sqn == before + 1
    r.release_through(r.lead_sqn, rig.now)
    rig.run()
    assert r.stable_sqn == r.lead_sqn and r.frames_held == 0
    assert any(j.kind == IoKind.REPO_DELETE for j in rig.disk.jobs)


def test_disk_age_threshold_releases_written_frames_from_memory() -> None:
    rig = Rig(kind="disk", size_threshold=10**9, age_threshold=2.0)
    rig.append(0)
    assert rig.repo.mem_trail_sqn == 0
    assert rig.repo.next_timer() == rig.now + 2.0
    rig.tick(2.0)
    assert rig.repo.mem_trail_sqn == NO_SQN and rig.repo.trail_sqn == 0
    assert rig.repo.get(0) is PENDING


def test_many_releases_compact_the_columns() -> None:
    per = len(frame(0)) + OVERHEAD
    rig = Rig(kind="memory", size_threshold=per * 5)
    for s in range(20000):
        rig.repo.append(s, frame(s), rig.now)
    assert rig.repo.get(19999) == frame(19999) and rig.repo.get(19995) == frame(19995)
    assert rig.repo.get(19994) is None and rig.repo.trail_sqn == 19995


def test_destroy_deletes_files() -> None:
    rig = Rig(kind="disk", size_threshold=10**9)
    for s in range(3):
        rig.append(s)
    for done in rig.disk.run(rig.repo.destroy()):
        rig.repo.io_done(done, rig.now)
    assert rig.disk.files == {}


def test_reduced_fd_repositories_share_one_file_set() -> None:
    disk = FakeDisk()
    cfg = RepositoryConfig(kind="reduced-fd", size_threshold=10**9)
    a = make_repository(1, cfg, "/shared-test", 0.0)
    b = make_repository(2, cfg, "/shared-test", 0.0)
    for s in range(5):
        a.append(s, frame(s), 0.0)
        b.append(100 + s, frame(100 + s), 0.0)
        for r in (a, b):
            for done in disk.run(r.take_io()):
                (a if done.job.owner == 1 else b).io_done(done, 0.0)
    assert a.stable_sqn == 4 and b.stable_sqn == 104
    assert sorted(disk.files) == [
        "/shared-test/reduced-fd-00000001.idx",
        "/shared-test/reduced-fd-00000001.seg",
    ]
    files = [(p, bytes(x)) for p, x in disk.files.items()]
    assert [r.sqn for r in fmt.iter_repository(files, 1)] == list(range(5))
    assert [r.sqn for r in fmt.iter_repository(files, 2)] == list(range(100, 105))


def test_restore_and_restore_last() -> None:
    sqns = list(range(100, 110))
    arrivals = [1000.0 + 600 * k for k in range(10)]  # every 10 minutes
    lengths = [len(frame(s)) + OVERHEAD for s in sqns]
    offsets = [fmt.FILE_HEADER_LEN + sum(lengths[:k]) for k in range(10)]
    from array import array

    seg = RestoredSegment(
        1,
        offsets[-1] + lengths[-1],
        200,
        array("I", sqns),
        array("I", offsets),
        array("I", lengths),
        array("d", arrivals),
    )
    full = restore_repository(9, RepositoryConfig(kind="disk"), "/c", [seg], 0.0)
    assert (full.trail_sqn, full.lead_sqn, full.stable_sqn) == (100, 109, 109)
    assert full.mem_trail_sqn == NO_SQN and full.take_newly_stable() is None
    last = restore_repository(
        9, RepositoryConfig(kind="disk", restore_last_hours=1), "/c", [seg], 0.0
    )
    # newest arrival 6400; an hour before it: 2800 -> the records from 2800 on (sqn 103..)
    assert last.trail_sqn == 103 and last.frames_held == 7
    got = last.append(110, frame(110), 0.0)
    assert got is Append.STORED and last.append(102, frame(102), 0.0) is Append.OLD


def test_failed_io_done_for_unknown_job_is_ignored() -> None:
    rig = Rig(kind="disk")
    rig.repo.io_done(IoDone(IoJob(IoKind.WRITE, "/x", tag=999), "boom", errno.EIO), rig.now)
    assert not rig.repo.full


# --- configuration --------------------------------------------------------------------------


def test_config_reads_every_option_from_the_topic() -> None:
    xml = """<?xml version="1.0"?>
<ume-store version="1.2"><daemon/><stores>
<store name="s" port="14567"><restore-last value="7"/><ume-attributes>
 <option type="store" name="disk-cache-directory" value="c"/></ume-attributes><topics>
<topic pattern="t"><ume-attributes>
 <option type="store" name="repository-type" value="disk"/>
 <option type="store" name="repository-size-threshold" value="5000000000"/>
 <option type="store" name="repository-size-limit" value="6000000000"/>
 <option type="store" name="repository-age-threshold" value="9"/>
 <option type="store" name="repository-disk-file-size-limit" value="8589934592"/>
 <option type="store" name="repository-disk-file-preallocate" value="1"/>
 <option type="store" name="repository-disk-async-buffer-length" value="70000"/>
 <option type="store" name="repository-disk-max-read-async-cbs" value="17"/>
 <option type="store" name="repository-disk-message-checksum" value="1"/>
 <option type="store" name="repository-disk-write-delay" value="1500"/>
 <option type="store" name="pyum-repository-disk-fdatasync" value="1"/>
</ume-attributes></topic></topics></store></stores></ume-store>"""
    sf = store_config.load_text(xml)
    store = sf.stores[0]
    topic = store.topics[0]
    cfg = RepositoryConfig.from_topic(topic, restore_last_hours=store.restore_last.value)
    assert cfg == RepositoryConfig(
        kind="disk",
        size_threshold=5000000000,
        size_limit=6000000000,
        age_threshold=9.0,
        disk_file_size_limit=8589934592,
        preallocate=True,
        async_buffer_length=70000,
        max_read_jobs=17,
        verify_checksums=True,
        write_delay=1.5,
        fdatasync=True,
        rpp=False,
        ack_on_reception=False,
        restore_last_hours=7,
    )
    rpp = RepositoryConfig.from_topic(
        topic,
        rpp=True,
        overrides={"ume_repository_size_limit": 1000, "repository-disk-write-delay": 0},
        ack_on_reception=True,
    )
    assert rpp.size_limit == 1000 and rpp.write_delay == 1.5 and rpp.rpp and rpp.ack_on_reception
    with pytest.raises(ConfigError, match="not an RPP override"):
        RepositoryConfig.from_topic(topic, overrides={"repository-type": 1})
    default = RepositoryConfig.from_topic(store_config.StoreTopic("x"))
    opts = store_config.TOPIC_OPTIONS
    assert default.size_limit == int(opts["repository-size-limit"][1])
    assert default.fdatasync is False and default.kind == "memory"
    assert RepositoryConfig() == default  # one set of defaults: the option table's


@pytest.mark.parametrize("kind", ["disk", "reduced-fd"])
def test_long_run_with_wrap_failures_and_compaction(kind: str) -> None:
    """Many messages through a small disk limit, with writes failing for a while and the
    columns compacted underneath buffered and failed writes: what is on disk is always exactly
    trail..lead, in order, and every frame read back is the one appended."""
    rig = Rig(kind=kind, size_threshold=2000, disk_file_size_limit=196992)
    r = rig.repo
    for s in range(20000):
        r.append(s, frame(s, 20 + s % 90), rig.now)
        if s % 97 == 0:
            rig.run()
        if s == 9000:
            rig.disk.fail.update(p for p in rig.disk.files if p.endswith(".seg"))
        if s == 9500:
            assert r.full and r.write_errors > 0
            rig.disk.fail.clear()
            rig.tick(RETRY_DELAY)
    rig.tick(RETRY_DELAY)
    assert not r.full and r.stable_sqn == 19999 and r.lead_sqn == 19999
    files = [(p, bytes(b)) for p, b in rig.disk.files.items()]
    held = [(x.sqn, x.frame) for x in fmt.iter_repository(files, 42)]
    assert r.trail_sqn > 15000 and r.wrapped > 0
    assert [s for s, _ in held] == list(range(r.trail_sqn, 20000))
    assert all(f == frame(s, 20 + s % 90) for s, f in held)
    for s in (r.trail_sqn, (r.trail_sqn + 19999) // 2, 19999):
        got = r.get(s)
        if got is PENDING:
            rig.run()
            got = r.take_read_results()[-1][1]
        assert got == frame(s, 20 + s % 90)


@pytest.mark.parametrize("kind", ["disk", "reduced-fd"])
def test_rpp_release_of_buffered_and_in_flight_writes(kind: str) -> None:
    """RPP: messages consumed while their write is buffered or in flight free their disk space
    like written ones (no segment kept alive by a count that never drops)."""
    limit = 196992
    rig = Rig(kind=kind, size_threshold=1, rpp=True, disk_file_size_limit=limit)
    r = rig.repo
    for rnd in range(12):
        first = rnd * 1000
        for s in range(first, first + 1000):
            r.append(s, frame(s), rig.now)  # writes are cut but not performed yet
        r.release_through(first + 999, rig.now)  # all consumed, written or not
        rig.run()
        assert r.stable_sqn == first + 999 and r.frames_held == 0
    assert r.wrapped == 0 and r.disk_bytes <= limit
    segs = [p for p in rig.disk.files if p.endswith(".seg")]
    assert len(segs) <= 2  # consumed segments were deleted
