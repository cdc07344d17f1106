"""The data path's batch input: DroCore.receive_frames, SeqWindow.check_run, queue runs.

The property: a read handed to ``receive_frames`` leaves the cores exactly as the same read
handed frame by frame to ``receive_frame`` (what the portal did before) -- the same portal
counters, the same duplicate-window verdicts, the same queues (frames, sequence numbers, bytes,
drops) -- whatever the read holds: runs, duplicates, reordering, other topic indices, control
frames, frames of other sizes, sources not known.
"""

from __future__ import annotations

import struct

from hypothesis import given, settings
from hypothesis import strategies as st

from tests.dro.kit import config, otid
from umcore.dro import DroCore, FrameRun, PortalQueue, SourceAdvert, SourceKey
from umcore.dro.seqwindow import SQN_MODULUS, SeqVerdict, SeqWindow

HEAD = struct.Struct("!BBHII")
TIDX = 2
SK = SourceKey(otid(9), "T")


def data_frame(sqn: int, payload: int, tidx: int = TIDX, next_header: int = 0) -> bytes:
    body = bytes([sqn & 0xFF]) * payload
    return HEAD.pack(0, next_header, 12 + payload, tidx, sqn & 0xFFFFFFFF) + body


def control_frame() -> bytes:
    return bytes([0x08, 0xFF, 0, 8]) + b"\x00" * 4  # CONTROL: no topic index, no sqn


def core_pair(limit: int, size: int, increment: int) -> list[DroCore]:
    extra = f'<max-queue>{limit}</max-queue><sqn-window size="{size}" increment="{increment}"/>'
    cores = []
    for _ in range(2):
        cfg = config(
            [("E1", 1, 1), ("E2", 2, 1), ("E3", 3, 1)],
            portal_extra={"E1": extra, "E2": extra, "E3": extra},
        )
        core = DroCore(cfg, 1)
        for i, p in enumerate(("E1", "E2", "E3")):
            core.receive_portal_up(p, 0.0, address=(f"10.0.0.{i + 1}", 14000))
        core.receive_tqr("E2", "T", 0.0)
        core.receive_tqr("E3", "T", 0.0)
        core.receive_source("E1", SourceAdvert(SK), 0.0)
        cores.append(core)
    return cores


def frame_by_frame(core: DroCore, frames: list[bytes], source: SourceKey) -> int:
    """What the portal did before the batch input: filter, then one receive_frame each."""
    queued = 0
    for f in frames:
        if len(f) < 12:
            continue
        ver_type, _nh, _len, tidx, sqn = HEAD.unpack_from(f)
        if ver_type != 0 or tidx != TIDX:
            continue
        queued += core.receive_frame("E1", source, sqn, f)
    return queued


def snapshot(core: DroCore) -> list[object]:
    out: list[object] = []
    for p in ("E1", "E2", "E3"):
        st = core.stats(p)
        out.append({name: getattr(st, name) for name in type(st).__slots__})
        q = core.queue(p)
        out.append(
            (
                len(q),
                q.bytes_enqueued,
                q.bytes_enqueued_max,
                q.dropped_would_block,
                q.dropped_bytes,
                q.enqueued,
            )
        )
    return out


def drain(core: DroCore, portal: str, n: int) -> list[tuple[bytes, str, int, bytes]]:
    return [(f.otid, f.topic, f.sqn, bytes(f.data)) for f in core.take_frames(portal, n)]


# One read: pieces, each a run of frames or an odd frame.
piece = st.one_of(
    st.tuples(  # a run: first sqn offset from the running sqn, count, payload bytes
        st.just("run"), st.integers(-40, 40), st.integers(1, 70), st.sampled_from([0, 4, 52])
    ),
    st.tuples(st.just("other-topic"), st.integers(-5, 5), st.integers(1, 9), st.just(4)),
    st.tuples(st.just("control"), st.just(0), st.just(1), st.just(0)),
    st.tuples(st.just("fragment"), st.integers(-3, 3), st.integers(1, 9), st.just(20)),
    st.tuples(st.just("short"), st.just(0), st.just(1), st.just(0)),
)


@settings(max_examples=150, deadline=None)
@given(
    reads=st.lists(st.lists(piece, min_size=1, max_size=6), min_size=1, max_size=8),
    start=st.sampled_from([0, 200, SQN_MODULUS - 30]),
    limit=st.sampled_from([10**9, 3000, 700]),
    window=st.sampled_from([(16384, 2048), (64, 16), (16, 8)]),
    takes=st.lists(st.integers(0, 50), min_size=8, max_size=8),
    unknown=st.booleans(),
)
def test_a_read_at_once_is_the_read_frame_by_frame(
    reads: list[list[tuple[str, int, int, int]]],
    start: int,
    limit: int,
    window: tuple[int, int],
    takes: list[int],
    unknown: bool,
) -> None:
    batch, single = core_pair(limit, *window)
    source = SourceKey(otid(7), "T") if unknown else SK
    sqn = start
    for r, read in enumerate(reads):
        frames: list[bytes] = []
        for kind, offset, count, payload in read:
            first = (sqn + offset) % SQN_MODULUS
            if kind == "run":
                frames += [data_frame(first + i, payload) for i in range(count)]
                sqn = (first + count) % SQN_MODULUS
            elif kind == "other-topic":
                frames += [data_frame(first + i, payload, tidx=TIDX + 1) for i in range(count)]
            elif kind == "fragment":  # data frames with a chained header: still frames
                frames += [data_frame(first + i, payload, next_header=3) for i in range(count)]
            elif kind == "control":
                frames.append(control_frame())
            else:
                frames.append(b"\x00\x00\x00\x04")  # a 4-byte frame: no data header
        got = batch.receive_frames("E1", source, TIDX, frames)
        want = frame_by_frame(single, frames, source)
        assert got == want
        assert snapshot(batch) == snapshot(single)
        n = takes[r % len(takes)]
        for p in ("E2", "E3"):  # some drained between reads: partial runs stay queued
            assert drain(batch, p, n) == drain(single, p, n)
    for p in ("E1", "E2", "E3"):
        assert drain(batch, p, 0) == drain(single, p, 0)
    assert snapshot(batch) == snapshot(single)


def test_a_read_of_runs_is_queued_as_runs_keeping_sequence_numbers() -> None:
    core, _ = core_pair(10**9, 16384, 2048)
    frames = [data_frame(s, 64) for s in range(250, 270)]  # across a carry (255 -> 256)
    frames.insert(10, data_frame(300, 20))  # another size: a run of its own
    assert core.receive_frames("E1", SK, TIDX, frames[:10] + frames[11:]) == 20
    assert core.receive_frames("E1", SK, TIDX, [frames[10]]) == 1
    q = core.queue("E2")
    runs: list[FrameRun] = list(q.runs)
    assert [(r.sqn, r.count, r.size) for r in runs] == [(250, 20, 76), (300, 1, 32)]
    assert bytes(runs[0].data) == b"".join(frames[:10] + frames[11:])
    # the duplicates of a read after it are dropped and counted, the new ones go on
    again = [data_frame(s, 64) for s in range(265, 275)]
    assert core.receive_frames("E1", SK, TIDX, again) == 5
    assert core.stats("E1").dropped_dup == 5
    assert [f.sqn for f in core.take_frames("E3")] == [*range(250, 270), 300, *range(270, 275)]


def test_a_run_that_does_not_fit_queues_its_prefix_and_counts_the_rest() -> None:
    q = PortalQueue(1000)
    assert q.offer_run(otid(1), "T", 10, bytes(76 * 20), 76, 20) == 13  # 13 x 76 = 988
    assert (q.dropped_would_block, q.dropped_bytes, len(q), q.bytes_enqueued) == (7, 532, 13, 988)
    assert q.offer_run(otid(1), "T", 30, bytes(12), 12, 1) == 1  # a small one still fits
    assert q.offer_run(otid(1), "T", 31, bytes(76 * 3), 76, 3) == 0
    run = q.peek_run()
    assert run is not None and (run.sqn, run.count) == (10, 13)
    q.consume(5)  # the adapter sent 5 of them
    assert (run.sqn, run.count, len(run.data), len(q), q.bytes_enqueued) == (15, 8, 608, 9, 620)
    assert q.pop().sqn == 15
    assert [f.sqn for f in q.take()] == [*range(16, 23), 30]
    assert q.bytes_enqueued == 0 and len(q) == 0 and q.peek() is None


@settings(max_examples=200, deadline=None)
@given(
    window=st.sampled_from([(16, 8), (64, 16), (128, 64), (256, 32)]),
    ops=st.lists(
        st.tuples(st.integers(-300, 300), st.sampled_from([1, 2, 7, 20, 64, 128, 300])),
        min_size=1,
        max_size=30,
    ),
    start=st.sampled_from([0, 1000, SQN_MODULUS - 50]),
)
def test_check_run_is_check_one_by_one(
    window: tuple[int, int], ops: list[tuple[int, int]], start: int
) -> None:
    """check_run says True exactly when every number is NEW, and leaves the window as the
    checks one by one do; False records nothing (the caller then checks one by one)."""
    a, b = SeqWindow(*window), SeqWindow(*window)
    cur = start
    for offset, count in ops:
        first = (cur + offset) % SQN_MODULUS
        before = (bytes(a.bits), a.base, a.head, a.started)
        if a.check_run(first, count):
            verdicts = [b.check((first + i) % SQN_MODULUS) for i in range(count)]
            assert verdicts == [SeqVerdict.NEW] * count
        else:
            assert (bytes(a.bits), a.base, a.head, a.started) == before
            va = [a.check((first + i) % SQN_MODULUS) for i in range(count)]
            vb = [b.check((first + i) % SQN_MODULUS) for i in range(count)]
            assert va == vb
            assert va != [SeqVerdict.NEW] * count  # False only when one is not new
        assert (bytes(a.bits), a.base, a.head, a.started) == (
            bytes(b.bits),
            b.base,
            b.head,
            b.started,
        )
        cur = (first + count) % SQN_MODULUS
