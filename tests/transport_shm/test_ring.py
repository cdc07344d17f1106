"""The sans-IO shared-memory ring (umcore.transport.shmring) on a bytearray: property tests of
wrap-around and of a full ring under each pacing, the zero-copy reserve/commit/cancel, and the
header checks that keep a reader from trusting a segment that is not ours."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from umcore.errors import UMError
from umcore.transport import shmring
from umcore.transport.shmring import RingReader, RingWriter, SegmentError

DATA = 512
MAX_RECORD = 120


def make(receiver_paced: bool, data: int = DATA, receivers: int = 4) -> memoryview:
    size = shmring.header_size_for(receivers) + data
    buf = memoryview(bytearray(size))
    shmring.init_header(
        buf,
        kind=shmring.KIND_IPC,
        data_size=data,
        session_id=0x1234,
        xport_id=20001,
        pid=1,
        max_receivers=receivers,
        max_record=MAX_RECORD,
        receiver_paced=receiver_paced,
        doorbell=b"\0bell",
        now_ns=0,
    )
    return buf


def payload(i: int, n: int) -> bytes:
    return bytes((i + k) & 0xFF for k in range(n))


def read_all(r: RingReader) -> tuple[list[bytes], int]:
    """Every committed record (copied, checked whole), and the bytes reported lost."""
    out: list[bytes] = []
    lost = 0
    while True:
        off, n = r.next_record()
        if off == -1:
            return out, lost
        if off == -2:
            lost += n
            continue
        data = bytes(r.buf[off : off + n])
        if not r.still_valid():
            continue
        out.append(data)
        r.consume(n)
        r.publish()


ops = st.lists(
    st.one_of(
        st.tuples(st.just("w"), st.integers(0, MAX_RECORD)),
        st.tuples(st.just("r"), st.integers(1, 8)),
    ),
    max_size=200,
)


@settings(max_examples=150, deadline=None)
@given(ops)
def test_source_paced_in_order_loss_only_when_lapped(steps: list[tuple[str, int]]) -> None:
    buf = make(receiver_paced=False)
    w = RingWriter(buf)
    r = RingReader(buf)
    r.attach(2, b"\0r", 0)
    written: list[bytes] = []
    got: list[bytes] = []
    lost_total = 0
    for i, (op, arg) in enumerate(steps):
        if op == "w":
            p = payload(i, arg)
            assert w.write(p)  # source-paced: never refused
            written.append(p)
        else:
            for _ in range(arg):
                off, n = r.next_record()
                if off == -1:
                    break
                if off == -2:
                    lost_total += n
                    continue
                data = bytes(buf[off : off + n])
                assert r.still_valid()  # single-threaded: nothing overwrites during a copy
                got.append(data)
                r.consume(n)
    rest, lost = read_all(r)
    got += rest
    lost_total += lost
    # In order, each whole: what was read is a subsequence of what was written...
    it = iter(written)
    assert all(any(g == x for x in it) for g in got)
    # ...the newest record always survives, and anything missing was reported as loss.
    if written:
        assert got and got[-1] == written[-1]
    if len(got) < len(written):
        assert lost_total > 0
    else:
        assert got == written and lost_total == 0


@settings(max_examples=150, deadline=None)
@given(ops)
def test_receiver_paced_never_loses_and_refuses_when_full(steps: list[tuple[str, int]]) -> None:
    buf = make(receiver_paced=True)
    w = RingWriter(buf)
    r = RingReader(buf)
    r.attach(2, b"\0r", 0)
    accepted: list[bytes] = []
    got: list[bytes] = []
    for i, (op, arg) in enumerate(steps):
        if op == "w":
            p = payload(i, arg)
            unread = w.head - r.pos
            if w.write(p):
                accepted.append(p)
            else:
                # Refused only when it really does not fit beside what the reader has not read.
                assert unread + shmring.record_size(arg) > DATA - shmring.record_size(MAX_RECORD)
                assert not w.has_room(arg)
        else:
            for _ in range(arg):
                off, n = r.next_record()
                assert off != -2
                if off == -1:
                    break
                got.append(bytes(buf[off : off + n]))
                r.consume(n)
                r.publish()
    rest, lost = read_all(r)
    assert lost == 0
    assert got + rest == accepted


def test_wrap_around_pads_the_lap_and_keeps_records_whole() -> None:
    buf = make(receiver_paced=True)
    w = RingWriter(buf)
    r = RingReader(buf)
    r.attach(2, b"\0r", 0)
    sent = []
    for i in range(100):  # 100 x 104-byte records through a 512-byte ring: many laps
        p = payload(i, 96 + i % 7)
        assert w.write(p)
        sent.append(p)
        got, lost = read_all(r)
        assert (got, lost) == ([p], 0)
    assert r.pos > 10 * DATA


def test_no_receiver_receiver_paced_overwrites() -> None:
    """Receiver pacing with nobody attached cannot block (UM: there is nobody to wait for)."""
    buf = make(receiver_paced=True)
    w = RingWriter(buf)
    for i in range(50):
        assert w.write(payload(i, 100))


def test_dead_receiver_slot_freed_unblocks_the_writer() -> None:
    buf = make(receiver_paced=True)
    w = RingWriter(buf)
    r = RingReader(buf)
    r.attach(2, b"\0r", 0)
    n = 0
    while w.write(payload(n, 100)):
        n += 1
    assert 0 < n < 10
    w.free_slot(r.slot_index)  # the adapter found the receiver's pid gone
    assert w.write(payload(n, 100))


def test_reserve_commit_cancel() -> None:
    buf = make(receiver_paced=True)
    w = RingWriter(buf)
    r = RingReader(buf)
    r.attach(2, b"\0r", 0)
    off = w.reserve(5)
    assert off is not None
    buf[off : off + 5] = b"hello"
    assert r.next_record() == (-1, 0)  # reserved, not committed: invisible
    w.commit()
    assert read_all(r) == ([b"hello"], 0)
    off = w.reserve(3)
    assert off is not None
    buf[off : off + 3] = b"bye"
    w.cancel()
    w.commit()
    assert read_all(r) == ([], 0)
    off = w.reserve(2)
    assert off is not None
    buf[off : off + 2] = b"ok"
    w.commit()
    assert read_all(r) == ([b"ok"], 0)


def test_record_too_large_is_refused() -> None:
    w = RingWriter(make(receiver_paced=False))
    with pytest.raises(UMError, match="exceeds"):
        w.write(bytes(MAX_RECORD + 1))


def test_pending_flag_gives_the_doorbell_once() -> None:
    buf = make(receiver_paced=False)
    w = RingWriter(buf)
    r = RingReader(buf)
    r.attach(2, b"\0reader-bell", 0)
    w.write(b"x")
    assert w.take_wakeups() == []  # not waiting
    assert not w.sleeping
    r.prepare_sleep()
    assert w.sleeping
    w.write(b"y")
    assert w.take_wakeups() == [b"\0reader-bell"]
    assert not w.sleeping
    assert w.take_wakeups() == []


def test_no_scan_while_nobody_sleeps_and_a_cancelled_sleep_rings_at_most_once() -> None:
    buf = make(receiver_paced=False)
    w = RingWriter(buf)
    a, b = RingReader(buf), RingReader(buf)
    a.attach(2, b"\0a", 0)
    b.attach(3, b"\0b", 0)
    a.set_pending(True)  # a pending flag without the header word: the writer does not scan
    w.write(b"x")
    assert w.take_wakeups() == []
    a.cancel_sleep()
    b.prepare_sleep()
    assert b.has_data()  # committed before b looked: b does not sleep
    b.cancel_sleep()
    w.write(b"y")
    assert w.take_wakeups() == []  # the word was set, nobody is pending: cleared by the scan
    assert not w.sleeping


def _reader_going_to_sleep(r: RingReader, log: dict[str, bool]) -> Iterator[None]:
    """A receiver that read everything and goes to sleep, one shared-memory access a step."""
    r.set_pending(True)
    yield
    r.announce_sleep()
    yield
    if r.has_data():
        r.cancel_sleep()
        log["slept"] = False
    else:
        log["slept"] = True


def _writer_commit(w: RingWriter, data: bytes, rung: list[bytes]) -> Iterator[None]:
    """A source's commit and take_wakeups, one shared-memory access a step."""
    w.write(data)
    yield
    if not w.sleeping:
        return
    yield
    w.clear_sleeping()
    yield
    rung.extend(w.take_pending())


def _schedules(counts: list[int]) -> Iterator[list[int]]:
    """Every interleaving of actors making ``counts[i]`` steps each (upper bounds: an actor
    that finishes early is skipped)."""
    if not any(counts):
        yield []
        return
    for i, c in enumerate(counts):
        if c:
            counts[i] -= 1
            for rest in _schedules(counts):
                yield [i, *rest]
            counts[i] += 1


@pytest.mark.parametrize("readers", [1, 2])
def test_no_lost_wakeup_in_any_interleaving(readers: int) -> None:
    """The sleep/wake-up protocol (shmring, "Signalling") under every interleaving of its
    shared-memory accesses (sequential consistency; the adapters' barriers give that on
    x86-64): a receiver that goes to sleep after the source committed is either woken, or it
    saw the commit and stayed awake."""
    checked = 0
    for schedule in _schedules([3] * readers + [4]):
        buf = make(receiver_paced=False)
        w = RingWriter(buf)
        rs = [RingReader(buf) for _ in range(readers)]
        for k, r in enumerate(rs):
            r.attach(10 + k, f"\0r{k}".encode(), 0)
        w.write(b"old")
        for r in rs:
            assert read_all(r) == ([b"old"], 0)
        logs: list[dict[str, bool]] = [{} for _ in rs]
        rung: list[bytes] = []
        actors = [_reader_going_to_sleep(r, lg) for r, lg in zip(rs, logs, strict=True)]
        actors.append(_writer_commit(w, b"new", rung))
        done = [False] * len(actors)
        for i in schedule:
            if not done[i]:
                done[i] = next(actors[i], True) is True
        for a, d in zip(actors, done, strict=True):
            if not d:
                for _ in a:
                    pass
        for k, (r, lg) in enumerate(zip(rs, logs, strict=True)):
            assert "slept" in lg
            if lg["slept"]:
                assert f"\0r{k}".encode() in rung, (schedule, k)
            else:
                assert r.has_data()
        checked += 1
    assert checked == (35 if readers == 1 else 4200)


def test_slots_run_out() -> None:
    buf = make(receiver_paced=False, receivers=2)
    for pid in (2, 3):
        RingReader(buf).attach(pid, b"", 0)
    with pytest.raises(SegmentError, match="slots"):
        RingReader(buf).attach(4, b"", 0)


@pytest.mark.parametrize(
    ("mutate", "match"),
    [
        (lambda b: b.__setitem__(slice(0, 8), b"NOTOURS!"), "bad magic"),
        (lambda b: b.__setitem__(slice(8, 10), (99).to_bytes(2, "little")), "version 99"),
        (lambda b: b.__setitem__(slice(10, 12), (7).to_bytes(2, "little")), "kind 7"),
        (lambda b: b.__setitem__(slice(16, 24), (4096).to_bytes(8, "little")), "declares"),
        (lambda b: b.__setitem__(slice(44, 48), (10**6).to_bytes(4, "little")), "max record"),
        (lambda b: b.__setitem__(slice(40, 44), (0).to_bytes(4, "little")), "inconsistent"),
    ],
)
def test_bad_header_refused(mutate: object, match: str) -> None:
    buf = make(receiver_paced=False)
    mutate(buf)  # type: ignore[operator]
    with pytest.raises(SegmentError, match=match) as exc:
        RingReader(buf, "LBTIPC_1234_20001")
    assert "umcore.tools.ipcrm" in str(exc.value)  # what to run is in the message


def test_short_segment_refused() -> None:
    with pytest.raises(SegmentError, match="too short"):
        shmring.check_header(b"PYUMSHM\0", 8)


def test_scan_gives_what_next_record_gives_across_pads() -> None:
    """LBT-SMX's batch read: every committed record in order, PADs skipped, nothing consumed
    until consume_to; refused on a source-paced ring (no tail checks)."""
    buf = make(receiver_paced=True)
    w = RingWriter(buf)
    r = RingReader(buf)
    r.attach(2, b"\0r", 0)
    sent: list[bytes] = []
    got: list[bytes] = []
    for i in range(40):  # many laps of a 512-byte ring: PADs at every lap's end
        data = payload(i, 1 + (i * 37) % MAX_RECORD)
        assert w.write(data)
        sent.append(data)
        if i % 3 == 2:
            recs = r.scan(2)
            assert len(recs) <= 2
            assert r.scan(100)[: len(recs)] == recs  # nothing consumed yet
            for off, n, end in r.scan(100):
                got.append(bytes(buf[off : off + n]))
                r.consume_to(end, n)
            r.publish()
    for off, n, end in r.scan(100):
        got.append(bytes(buf[off : off + n]))
        r.consume_to(end, n)
    assert got == sent
    assert r.records_read == 40
    assert r.scan(5) == []
    with pytest.raises(UMError, match="receiver-paced"):
        RingReader(make(receiver_paced=False)).scan(1)


def framed(i: int, n: int) -> bytes:
    """A record payload that says its own length (u16) and index (u16): joined ones split."""
    return n.to_bytes(2, "little") + (i & 0xFFFF).to_bytes(2, "little") + payload(i, n - 4)


def split(data: bytes) -> list[bytes]:
    out = []
    while data:
        n = int.from_bytes(data[:2], "little")
        out.append(data[:n])
        data = data[n:]
    return out


copy_ops = st.lists(
    st.one_of(
        st.tuples(st.just("w"), st.integers(4, MAX_RECORD)),
        st.tuples(st.just("r"), st.integers(1, 2 * DATA)),
    ),
    max_size=200,
)


@settings(max_examples=150, deadline=None)
@given(copy_ops, st.booleans())
def test_read_copy_whole_records_in_order(steps: list[tuple[str, int]], paced: bool) -> None:
    """LBT-IPC's batch read (read_copy, ``max_bytes`` drawn): whole records joined in order,
    at least one a call, else at most ``max_bytes``; source-paced: the newest survives and
    anything missing was reported lost; receiver-paced: nothing lost."""
    buf = make(receiver_paced=paced)
    w = RingWriter(buf)
    r = RingReader(buf)
    r.attach(2, b"\0r", 0)
    written: list[bytes] = []
    got: list[bytes] = []
    lost_total = 0

    def read(max_bytes: int) -> bool:
        nonlocal lost_total
        before = r.pos
        data, k, lost = r.read_copy(max_bytes)
        if data is None:
            lost_total += lost
            return lost > 0
        recs = split(data)
        assert len(recs) == k >= 1
        assert len(data) <= max_bytes or k == 1  # at least one record, else within the bound
        assert r.pos > before
        got.extend(recs)
        r.publish()
        return True

    for i, (op, arg) in enumerate(steps):
        if op == "w":
            p = framed(i, arg)
            if w.write(p):
                written.append(p)
            else:
                assert paced
        else:
            read(arg)
    while read(DATA):
        pass
    assert r.read_copy(DATA) == (None, 0, 0)
    if paced:
        assert got == written and lost_total == 0
        return
    it = iter(written)
    assert all(any(g == x for x in it) for g in got)
    if written:
        assert got and got[-1] == written[-1]
    if len(got) < len(written):
        assert lost_total > 0
    else:
        assert got == written and lost_total == 0


def test_read_copy_refuses_a_corrupt_record() -> None:
    buf = make(receiver_paced=True)
    w = RingWriter(buf)
    r = RingReader(buf)
    r.attach(2, b"\0r", 0)
    assert w.write(framed(0, 40)) and w.write(framed(1, 40))
    base = shmring.header_size_for(4)
    buf[base + 48 + 4] ^= 0xFF  # the second record's stamp
    data, k, lost = r.read_copy(DATA)  # the good record first
    assert (split(data or b""), k, lost) == ([framed(0, 40)], 1, 0)
    with pytest.raises(SegmentError, match="corrupt"):
        r.read_copy(DATA)
