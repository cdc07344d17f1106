"""LBT-RU codec: exact bytes from the layout tables, round trips, hot path, fuzz."""

from __future__ import annotations

import random
import struct

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.wire.helpers import fuzz_decoders
from umcore.errors import LocalProtocolError
from umcore.wire import lbtru
from umcore.wire.lbtru import (
    LBTRUAck,
    LBTRUConnectionRequest,
    LBTRUData,
    LBTRUError,
    LBTRUNak,
    LBTRUNcf,
    LBTRUReset,
    LBTRUSessionMessage,
)

SID = 0xBEEF
LBMC = struct.pack("!BBHII", 0x00, 0x00, 17, 3, 0) + b"hello"


def hdr(ptype: int, next_hdr: int = 0, word: int = 0) -> bytes:
    return struct.pack("!BBH", ptype, next_hdr, word)  # ver_type, next_hdr, flags_or_res


def opt(next_hdr: int, value: int, flags: int = 0) -> bytes:
    return struct.pack("!BBHI", next_hdr, 8, flags, value)  # SID / CID option, hdr_len 8


CASES = [
    ("data", LBTRUData(100, 90, LBMC), hdr(0) + struct.pack("!II", 100, 90) + LBMC),
    (
        "data-sid-rx",
        LBTRUData(100, 90, LBMC, flags=lbtru.FLAG_RX, session_id=SID),
        hdr(0, 1, 0x4000) + struct.pack("!II", 100, 90) + opt(0, SID) + LBMC,
    ),
    (
        "data-sid-cid",
        LBTRUData(1, 0, b"", session_id=SID, client_id=7),
        hdr(0, 1) + struct.pack("!II", 1, 0) + opt(2, SID) + opt(0, 7),
    ),
    (
        "sm-syn",
        LBTRUSessionMessage(5, 99, 90, flags=lbtru.FLAG_SYN, session_id=SID),
        hdr(2, 1, 0x8000) + struct.pack("!III", 5, 99, 90) + opt(0, SID),
    ),
    (
        "nak",
        LBTRUNak([98, 99], session_id=SID),
        hdr(3, 1) + struct.pack("!HHII", 2, 0, 98, 99) + opt(0, SID),
    ),
    (
        "ncf",
        LBTRUNcf(90, [98], lbtru.NCF_REASON_RX_DELAY, session_id=SID),
        hdr(4, 1) + struct.pack("!IHBBI", 90, 1, 0, 0x20, 98) + opt(0, SID),
    ),
    (
        "ack-cid",
        LBTRUAck(100, client_id=3),
        hdr(5, 2) + struct.pack("!I", 100) + opt(0, 3),
    ),
    (
        "creq",
        LBTRUConnectionRequest(session_id=SID),
        hdr(6, 1) + opt(0, SID),
    ),
    (
        "creq-sid-cid",
        LBTRUConnectionRequest(0, session_id=SID, client_id=0x01020304),
        hdr(6, 1) + opt(2, SID) + opt(0, 0x01020304),
    ),
    ("rst", LBTRUReset(), hdr(7)),
    ("rst-reason", LBTRUReset(3), hdr(7, 0, 3)),
]

# Verified hex of wire-lbmr-transports-srs.md section 9 (decoded by tshark 4.0.17).
VERIFIED = [
    (
        LBTRUData(100, 90, LBMC, session_id=SID),
        "00010000 00000064 0000005a 000800000000beef" + LBMC.hex(),
    ),
    (
        LBTRUSessionMessage(5, 99, 90, flags=0x8000, session_id=SID),
        "02018000 00000005 00000063 0000005a 000800000000beef",
    ),
    (LBTRUConnectionRequest(session_id=SID), "06010000 000800000000beef"),
    (LBTRUAck(100, session_id=SID), "05010000 00000064 000800000000beef"),
    (LBTRUNak([98, 99], session_id=SID), "03010000 00020000 00000062 00000063 000800000000beef"),
    (
        LBTRUNcf(90, [98], 2, session_id=SID),
        "04010000 0000005a 0001 00 20 00000062 000800000000beef",
    ),
    (LBTRUReset(), "07000000"),
]


@pytest.mark.parametrize(("name", "record", "wire"), CASES, ids=[c[0] for c in CASES])
def test_exact_bytes_both_ways(name: str, record: lbtru.LBTRURecord, wire: bytes) -> None:
    assert lbtru.encode(record) == wire
    assert lbtru.decode(wire) == record


@pytest.mark.parametrize(("record", "hexstr"), VERIFIED)
def test_verified_examples(record: lbtru.LBTRURecord, hexstr: str) -> None:
    wire = bytes.fromhex(hexstr.replace(" ", ""))
    assert lbtru.encode(record) == wire
    assert lbtru.decode(wire) == record


def test_decoder_accepts_cid_before_sid_and_ignorable_unknown_options() -> None:
    wire = (
        hdr(5, 2)
        + struct.pack("!I", 9)
        + opt(0x7F, 4)  # CID, next = unknown option 0x7f
        + struct.pack("!BBH", 1, 6, lbtru.OPT_FLAG_IGNORE)  # unknown, ignorable, next = SID
        + b"zz"
        + opt(0, SID)
    )
    assert lbtru.decode(wire) == LBTRUAck(9, session_id=SID, client_id=4)


@pytest.mark.parametrize(
    ("wire", "why"),
    [
        (b"\x00\x00\x00", "short"),
        (bytes([0x10, 0, 0, 0]) + bytes(8), "version"),
        (hdr(1) + bytes(8), "type"),
        (hdr(8), "type"),
        (hdr(0) + bytes(7), "truncated data"),
        (hdr(0, 1) + bytes(8) + opt(0, 1)[:7], "truncated option"),
        (hdr(0, 1) + bytes(8) + struct.pack("!BBHI", 0, 0, 0, 1), "zero option length"),
        (hdr(0, 1) + bytes(8) + struct.pack("!BBHI", 0, 12, 0, 1), "option overrun"),
        (hdr(0, 1) + bytes(8) + struct.pack("!BBHII", 0, 12, 0, 1, 2), "SID length"),
        (hdr(0, 3) + bytes(8) + opt(0, 1), "unknown option"),
        (hdr(0, 1) + bytes(8) + opt(1, 1) + opt(0, 2), "duplicate SID"),
        (hdr(0, 2) + bytes(8) + opt(2, 1) + opt(0, 2), "duplicate CID"),
        (hdr(2) + bytes(11), "sm"),
        (hdr(3) + struct.pack("!HH", 2, 0) + bytes(4), "nak list"),
        (hdr(4) + bytes(7), "ncf"),
        (hdr(5) + bytes(3), "ack"),
        (hdr(6) + b"x", "trailing"),
        (hdr(7) + b"x", "trailing"),
    ],
)
def test_decode_rejects(wire: bytes, why: str) -> None:
    with pytest.raises(LBTRUError):
        lbtru.decode(wire)


def test_hot_path() -> None:
    wire = lbtru.encode_data(100, 90, LBMC, session_id=SID, flags=lbtru.FLAG_RX)
    assert wire == lbtru.encode(LBTRUData(100, 90, LBMC, flags=0x4000, session_id=SID))
    ptype, flags, sqn, trail, sid, payload = lbtru.decode_header(wire)
    assert (ptype, flags, sqn, trail, sid) == (lbtru.TYPE_DATA, 0x4000, 100, 90, SID)
    assert isinstance(payload, memoryview) and bytes(payload) == LBMC
    plain = lbtru.encode_data(1, 0, b"p")
    assert plain == lbtru.encode(LBTRUData(1, 0, b"p"))
    assert lbtru.decode_header(plain)[4] is None
    both = lbtru.encode(LBTRUData(1, 0, b"q", session_id=5, client_id=6))
    assert lbtru.decode_header(both)[4:5] == (5,) and bytes(lbtru.decode_header(both)[5]) == b"q"
    ptype, _flags, sqn, _trail, sid, payload = lbtru.decode_header(lbtru.encode(LBTRUReset()))
    assert (ptype, sqn, sid, len(payload)) == (lbtru.TYPE_RST, 0, None, 0)


def test_record_helpers() -> None:
    assert LBTRUData(1, 0, flags=lbtru.FLAG_RX).retransmission
    assert LBTRUSessionMessage(1, 2, 3, flags=lbtru.FLAG_SYN).syn
    assert not LBTRUSessionMessage(1, 2, 3).syn
    assert "LBTRUAck(" in repr(LBTRUAck(1))
    assert LBTRUAck(1) != LBTRUReset()
    assert hash(LBTRUAck(1, session_id=2)) == hash(LBTRUAck(1, session_id=2))


@pytest.mark.parametrize(
    "record",
    [
        LBTRUReset(session_id=1),
        LBTRUData(1 << 32, 0),
        LBTRUData(1, 0, flags=0x10000),
        LBTRUAck(1, session_id=1 << 32),
        LBTRUNak([1], format=16),
        LBTRUNcf(0, [1], 16),
        LBTRUNak(range(0x10000)),
        LBTRUConnectionRequest(-1),
    ],
)
def test_encode_refuses(record: lbtru.LBTRURecord) -> None:
    with pytest.raises(LocalProtocolError):
        lbtru.encode(record)


# --------------------------------------------------------------------------------------------
# Round trips

u16 = st.integers(0, 0xFFFF)
u32 = st.integers(0, 0xFFFFFFFF)
nibble = st.integers(0, 15)
opt_id = st.none() | u32
sqns = st.lists(u32, max_size=20)
records = st.one_of(
    st.builds(
        LBTRUData, u32, u32, st.binary(max_size=64), flags=u16, session_id=opt_id, client_id=opt_id
    ),
    st.builds(LBTRUSessionMessage, u32, u32, u32, flags=u16, session_id=opt_id, client_id=opt_id),
    st.builds(LBTRUNak, sqns, format=nibble, session_id=opt_id, client_id=opt_id),
    st.builds(LBTRUNcf, u32, sqns, nibble, format=nibble, session_id=opt_id, client_id=opt_id),
    st.builds(LBTRUAck, u32, session_id=opt_id, client_id=opt_id),
    st.builds(LBTRUConnectionRequest, u16, session_id=opt_id, client_id=opt_id),
    st.builds(LBTRUReset, u16),
)


@settings(max_examples=200, deadline=None)
@given(records)
def test_round_trip(record: lbtru.LBTRURecord) -> None:
    wire = lbtru.encode(record)
    assert lbtru.decode(wire) == record
    ptype, _flags, sqn, trail, sid, payload = lbtru.decode_header(memoryview(wire))
    if isinstance(record, LBTRUData):
        assert (ptype, sqn, trail, sid) == (0, record.sqn, record.trail_sqn, record.session_id)
        assert bytes(payload) == record.payload


# --------------------------------------------------------------------------------------------
# Fuzz

SEEDS = [wire for _name, _rec, wire in CASES]


def test_fuzz_only_codec_error_escapes() -> None:
    rng = random.Random(4321)
    decoders = (lbtru.decode, lbtru.decode_header)
    decoded = fuzz_decoders(
        rng, SEEDS, decoders, LBTRUError, rounds=6000, random_every=3, random_max=40
    )
    assert decoded > 500
