"""The disk format and the state files: round trips, the reader, and garbage never raising
anything but StoreFormatError."""

from __future__ import annotations

import contextlib

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from umcore.store import diskformat as fmt
from umcore.store.state import (
    NO_SQN,
    ReceiverState,
    SourceState,
    decode_state,
    encode_state,
    parse_state_name,
    state_name,
)

u32 = st.integers(0, 0xFFFFFFFF)
times = st.floats(0, 2e9, allow_nan=False)


@given(u32, u32, st.binary(max_size=300), times)
def test_record_round_trip(reg_id: int, sqn: int, frame: bytes, arrival: float) -> None:
    rec = fmt.encode_record(reg_id, sqn, frame, arrival)
    assert len(rec) == fmt.RECORD_HEADER_LEN + len(frame)
    got = fmt.check_record(rec, 0, True)
    assert got == (reg_id, sqn, fmt.REC_PAYLOAD_CRC, len(frame), arrival)
    assert rec[fmt.RECORD_HEADER_LEN :] == frame


@given(u32, u32, st.integers(1, 300), st.binary(max_size=40), times, st.integers(1, 40))
def test_record_run_is_the_records_one_at_a_time(
    reg_id: int, first: int, size: int, seed: bytes, arrival: float, count: int
) -> None:
    """encode_record_run builds column by column what append_record and INDEX_ENTRY give one
    frame at a time, byte for byte (sqns wrapping after 0xFFFFFFFF included)."""
    frames = [(seed + bytes([k & 0xFF]) * size)[:size] for k in range(count)]
    records, entries = fmt.encode_record_run(reg_id, first, frames, arrival)
    want, want_entries = bytearray(), bytearray()
    for k, f in enumerate(frames):
        sqn = (first + k) & 0xFFFFFFFF
        n = fmt.append_record(want, reg_id, sqn, f, arrival)
        want_entries += fmt.INDEX_ENTRY.pack(sqn, n, arrival, reg_id, 0)
    assert records == bytes(want)
    assert entries == bytes(want_entries)
    assert fmt.sqn_column(0xFFFFFFFF, 2) == bytes.fromhex("ffffffff00000000")


@given(st.binary(min_size=1, max_size=100), st.integers(0, 200), st.integers(0, 255))
def test_any_damage_to_a_record_is_detected(frame: bytes, pos: int, flip: int) -> None:
    rec = bytearray(fmt.encode_record(3, 9, frame, 1.5))
    pos %= len(rec)
    rec[pos] ^= flip or 1
    with pytest.raises(fmt.StoreFormatError):
        got = fmt.check_record(rec, 0, True)
        # a flip in the header's unused bytes would still fail its CRC; none passes
        raise AssertionError(f"damage at {pos} not seen: {got}")


@given(st.lists(st.tuples(u32, st.binary(max_size=50), times), max_size=30))
def test_index_round_trip_and_find(records: list[tuple[int, bytes, float]]) -> None:
    entries = bytearray()
    seg = bytearray(fmt.encode_file_header(fmt.SEG_MAGIC, 0, 5, 1, 0.0))
    for sqn, frame, arrival in records:
        n = fmt.append_record(seg, 5, sqn, frame, arrival)
        entries += fmt.INDEX_ENTRY.pack(sqn, n, arrival, 5, 0)
    idx = fmt.encode_file_header(fmt.IDX_MAGIC, 0, 5, 1, 0.0)
    if records:
        idx += fmt.encode_index_block(fmt.FILE_HEADER_LEN, entries)
    parsed = fmt.parse_index(idx)
    assert parsed.problem is None and parsed.valid_end == len(idx)
    assert list(parsed.sqns) == [r[0] for r in records]
    assert parsed.data_end == len(seg)
    for k, (sqn, _, arrival) in enumerate(records):
        off = parsed.offsets[k]
        assert fmt.check_record(seg, off, True)[1] == sqn
        assert parsed.arrivals[k] == arrival
    for reg in (None, 5):
        got = [r.frame for r in fmt.iter_repository([("5-cache-00000001.seg", bytes(seg))], reg)]
        assert got == [r[1] for r in records]


def test_find_record_by_binary_search() -> None:
    seg = bytearray(fmt.encode_file_header(fmt.SEG_MAGIC, 0, 5, 1, 0.0))
    entries = bytearray()
    sqns = [0xFFFFFFFE, 0xFFFFFFFF, 0, 1, 5, 6]  # across the wrap, with a gap
    for sqn in sqns:
        n = fmt.append_record(seg, 5, sqn, b"f%d" % sqn, 0.0)
        entries += fmt.INDEX_ENTRY.pack(sqn, n, 0.0, 5, 0)
    idx = fmt.encode_file_header(fmt.IDX_MAGIC, 0, 5, 1, 0.0) + fmt.encode_index_block(
        fmt.FILE_HEADER_LEN, entries
    )
    parsed = fmt.parse_index(idx)
    for k, sqn in enumerate(sqns):
        assert fmt.find_record(parsed, sqn) == k
        off = parsed.offsets[k]
        assert seg[off + fmt.RECORD_HEADER_LEN : off + parsed.lengths[k]] == b"f%d" % sqn
    assert fmt.find_record(parsed, 3) is None
    assert fmt.find_record(parsed, 5, reg_id=5) == 4


def test_torn_index_block_ends_the_index() -> None:
    entries = fmt.INDEX_ENTRY.pack(1, 40, 0.0, 5, 0)
    idx = fmt.encode_file_header(fmt.IDX_MAGIC, 0, 5, 1, 0.0)
    good = idx + fmt.encode_index_block(fmt.FILE_HEADER_LEN, entries)
    torn = good + fmt.encode_index_block(fmt.FILE_HEADER_LEN + 40, entries)[:-3]
    parsed = fmt.parse_index(torn)
    assert list(parsed.sqns) == [1] and parsed.valid_end == len(good)
    assert parsed.problem is not None


def test_reader_skips_a_corrupt_record_in_the_middle() -> None:
    seg = bytearray(fmt.encode_file_header(fmt.SEG_MAGIC, 0, 5, 1, 0.0))
    offs = []
    for sqn in range(5):
        offs.append(len(seg))
        fmt.append_record(seg, 5, sqn, b"x" * 20, 0.0)
    seg[offs[2] + 10] ^= 0x55  # the header of sqn 2
    got = [r.sqn for r in fmt.iter_repository([("5-cache-00000001.seg", bytes(seg))])]
    assert got == [0, 1, 3, 4]


def test_reader_applies_reduced_fd_markers() -> None:
    seg = bytearray(fmt.encode_file_header(fmt.SEG_MAGIC, fmt.FILE_SHARED, 0, 1, 0.0))
    for sqn in range(4):
        fmt.append_record(seg, 1, sqn, b"a", 0.0)
        fmt.append_record(seg, 2, sqn, b"b", 0.0)
    fmt.append_record(seg, 1, 2, b"", 0.0, fmt.REC_TRAIL)
    fmt.append_record(seg, 2, 0, b"", 0.0, fmt.REC_DELETE)
    fmt.append_record(seg, 2, 7, b"c", 0.0)
    files = [("reduced-fd-00000001.seg", bytes(seg))]
    assert [(r.reg_id, r.sqn) for r in fmt.iter_repository(files)] == [(1, 2), (1, 3), (2, 7)]


def test_names() -> None:
    assert fmt.segment_name(17, 3) == "17-cache-00000003.seg"
    assert fmt.index_name(None, 3) == "reduced-fd-00000003.idx"
    assert fmt.parse_segment_name("17-cache-00000003.idx") == (17, 3, "idx")
    assert fmt.parse_segment_name("reduced-fd-00000003.seg") == (None, 3, "seg")
    assert fmt.parse_segment_name("17-state") is None
    assert state_name(17) == "17-state" and parse_state_name("17-state") == 17
    assert parse_state_name("x-state") is None


@settings(max_examples=300)
@given(st.binary(max_size=400), st.integers(0, 400))
def test_garbage_raises_only_our_error(data: bytes, offset: int) -> None:
    for call in (
        lambda: fmt.decode_record_header(data, offset),
        lambda: fmt.check_record(data, offset, True),
        lambda: fmt.decode_file_header(data, fmt.SEG_MAGIC),
        lambda: fmt.parse_index(data),
        lambda: fmt.parse_index(fmt.encode_file_header(fmt.IDX_MAGIC, 0, 1, 1, 0.0) + data),
        lambda: decode_state(data),
    ):
        with contextlib.suppress(fmt.StoreFormatError):
            call()
    fmt.scan_records(data, 0, True)
    list(fmt.iter_repository([("1-cache-00000001.seg", data)]))
    head = fmt.encode_file_header(fmt.SEG_MAGIC, 0, 1, 1, 0.0)
    list(fmt.iter_repository([("1-cache-00000001.seg", head + data)]))


# --- state files ----------------------------------------------------------------------------

text = st.text(max_size=20)
receivers = st.builds(
    ReceiverState,
    reg_id=u32,
    session_id=st.integers(0, 2**64 - 1),
    high_ack_sqn=u32,
    ip=text,
    port=st.integers(0, 65535),
    rpp_mode=st.integers(0, 2),
    context_instance=st.binary(max_size=8),
    created=times,
)
sources = st.builds(
    SourceState,
    reg_id=u32,
    topic=text,
    session_id=st.integers(0, 2**64 - 1),
    rpp=st.booleans(),
    rpp_overrides=st.dictionaries(text, st.integers(0, 2**63), max_size=4),
    ack_on_reception=st.booleans(),
    repository_type=st.sampled_from(["memory", "disk", "reduced-fd", "no-cache"]),
    created=times,
    otid=st.binary(max_size=32),
    lead_sqn=u32,
    receivers=st.lists(receivers, max_size=5),
)


@given(sources)
def test_state_round_trip(state: SourceState) -> None:
    assert decode_state(encode_state(state)) == state


@given(sources, st.data())
def test_damaged_state_is_refused(state: SourceState, data: st.DataObject) -> None:
    raw = bytearray(encode_state(state))
    pos = data.draw(st.integers(0, len(raw) - 1))
    raw[pos] ^= data.draw(st.integers(1, 255))
    with pytest.raises(fmt.StoreFormatError):
        decode_state(bytes(raw))
    with pytest.raises(fmt.StoreFormatError):
        decode_state(bytes(raw[: data.draw(st.integers(0, len(raw) - 1))]))


def test_state_defaults_and_bad_fields() -> None:
    s = SourceState(5)
    assert s.lead_sqn == NO_SQN and s.receivers == []
    good = encode_state(s)
    assert decode_state(good) == s
    import json
    import struct
    import zlib

    def wrap(body: bytes) -> bytes:
        head = struct.pack("<8sHHIII", b"PYUMSTA\x00", 1, 0, len(body), zlib.crc32(body), 0)
        return head[:20] + zlib.crc32(head[:20]).to_bytes(4, "little") + body

    assert decode_state(wrap(json.dumps({"reg_id": 3, "later_field": 1}).encode())).reg_id == 3
    for bad in ({"reg_id": "3"}, {}, {"reg_id": 1, "receivers": [{"port": 1}]}, [1]):
        with pytest.raises(fmt.StoreFormatError):
            decode_state(wrap(json.dumps(bad).encode()))
