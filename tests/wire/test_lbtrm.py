"""LBT-RM codec: exact bytes from the layout tables, round trips, hot path, fuzz."""

from __future__ import annotations

import random
import struct

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.wire.helpers import fuzz_decoders
from umcore.errors import LocalProtocolError
from umcore.wire import lbtrm
from umcore.wire.lbtrm import (
    LBTRMData,
    LBTRMError,
    LBTRMNak,
    LBTRMNcf,
    LBTRMOption,
    LBTRMSessionMessage,
)

SID = 0x0A0B0C0D
PORT = 14390
# One LBMC data message "hello" (tidx 3, sqn 0): opaque to LBT-RM.
LBMC = struct.pack("!BBHII", 0x00, 0x00, 17, 3, 0) + b"hello"


def hdr(ptype: int, next_hdr: int = 0) -> bytes:
    # ver_type, next_hdr, ucast_port, session_id (wire note section 5)
    return struct.pack("!BBHI", ptype, next_hdr, PORT, SID)


CASES = [
    (
        "data",
        LBTRMData(SID, PORT, 10, 5, LBMC),
        hdr(0) + struct.pack("!IIBBH", 10, 5, 0, 0, 0) + LBMC,
    ),
    (
        "data-rx-fec",
        LBTRMData(SID, PORT, 7, 1, b"", flags_fec_type=0xA3, flags_tgsz=4, fec_symbol=0x1234),
        hdr(0) + struct.pack("!IIBBH", 7, 1, 0xA3, 4, 0x1234),
    ),
    (
        "data-options",
        LBTRMData(SID, PORT, 1, 0, b"xy", options=[LBTRMOption(5, b"abcd"), LBTRMOption(9)]),
        hdr(0, 5)
        + struct.pack("!IIBBH", 1, 0, 0, 0, 0)
        + struct.pack("!BBH", 9, 8, 0)
        + b"abcd"
        + struct.pack("!BBH", 0, 4, 0)
        + b"xy",
    ),
    (
        "sm",
        LBTRMSessionMessage(SID, PORT, 1, 10, 5, flags_fec_type=0x80, flags_tgsz=2),
        hdr(2) + struct.pack("!IIIBBH", 1, 10, 5, 0x80, 2, 0),
    ),
    (
        "nak",
        LBTRMNak(SID, PORT, [8, 9]),
        hdr(3) + struct.pack("!HH", 2, 0) + struct.pack("!II", 8, 9),
    ),
    (
        "nak-parity-option",
        LBTRMNak(SID, PORT, [0xFFFFFFFF], format=1, options=[LBTRMOption(3, b"\x01")]),
        hdr(3, 3) + struct.pack("!HHI", 1, 1, 0xFFFFFFFF) + struct.pack("!BBH", 0, 5, 0) + b"\x01",
    ),
    (
        "ncf",
        LBTRMNcf(SID, PORT, 5, [8, 9], lbtrm.NCF_REASON_RX_DELAY),
        hdr(4) + struct.pack("!IHBB", 5, 2, 0, 0x20) + struct.pack("!II", 8, 9),
    ),
    (
        "ncf-empty-shed",
        LBTRMNcf(SID, PORT, 0, [], lbtrm.NCF_REASON_SHED, format=1),
        hdr(4) + struct.pack("!IHBB", 0, 0, 0, 0x31),
    ),
]

# The verified hex of wire-lbmr-transports-srs.md section 9 (tshark 4.0.17 decoded these).
VERIFIED = [
    (
        LBTRMData(SID, PORT, 10, 5, LBMC),
        "0000 3836 0a0b0c0d 0000000a 00000005 00000000" + LBMC.hex(),
    ),
    (
        LBTRMSessionMessage(SID, PORT, 1, 10, 5),
        "0200 3836 0a0b0c0d 00000001 0000000a 00000005 00000000",
    ),
    (LBTRMNak(SID, PORT, [8, 9]), "0300 3836 0a0b0c0d 0002 0000 00000008 00000009"),
    (LBTRMNcf(SID, PORT, 5, [8, 9], 2), "0400 3836 0a0b0c0d 00000005 0002 00 20 00000008 00000009"),
]


@pytest.mark.parametrize(("name", "record", "wire"), CASES, ids=[c[0] for c in CASES])
def test_exact_bytes_both_ways(name: str, record: lbtrm.LBTRMRecord, wire: bytes) -> None:
    assert lbtrm.encode(record) == wire
    assert lbtrm.decode(wire) == record


@pytest.mark.parametrize(("record", "hexstr"), VERIFIED)
def test_verified_examples(record: lbtrm.LBTRMRecord, hexstr: str) -> None:
    wire = bytes.fromhex(hexstr.replace(" ", ""))
    assert lbtrm.encode(record) == wire
    assert lbtrm.decode(wire) == record


def test_hot_path_matches_records() -> None:
    wire = lbtrm.encode_data(SID, PORT, 10, 5, LBMC, lbtrm.DATA_FLAG_RX)
    assert wire == lbtrm.encode(LBTRMData(SID, PORT, 10, 5, LBMC, flags_fec_type=0x20))
    ptype, port, sid, sqn, trail, flags, payload = lbtrm.decode_header(wire)
    assert (ptype, port, sid, sqn, trail, flags) == (lbtrm.TYPE_DATA, PORT, SID, 10, 5, 0x20)
    assert isinstance(payload, memoryview)
    assert bytes(payload) == LBMC


def test_hot_path_skips_options_and_defers_control() -> None:
    wire = lbtrm.encode(LBTRMData(SID, PORT, 3, 2, b"pay", options=[LBTRMOption(1, b"zz")]))
    assert bytes(lbtrm.decode_header(wire)[6]) == b"pay"
    nak = lbtrm.encode(LBTRMNak(SID, PORT, [4]))
    ptype, port, sid, sqn, _trail, _flags, payload = lbtrm.decode_header(nak)
    assert (ptype, port, sid, sqn, len(payload)) == (lbtrm.TYPE_NAK, PORT, SID, 0, 0)


def test_record_helpers() -> None:
    assert LBTRMData(SID, PORT, 1, 0, flags_fec_type=lbtrm.DATA_FLAG_RX).retransmission
    assert not LBTRMData(SID, PORT, 1, 0).retransmission
    r = LBTRMNak(SID, PORT, [1, 2])
    assert "LBTRMNak(" in repr(r) and "sqns=(1, 2)" in repr(r)
    assert r != LBTRMNak(SID, PORT, [1, 3])
    assert r != "not a record"
    assert hash(r) == hash(LBTRMNak(SID, PORT, (1, 2)))


@pytest.mark.parametrize(
    "record",
    [
        LBTRMData(SID, 70000, 1, 0),
        LBTRMData(-1, PORT, 1, 0),
        LBTRMData(SID, PORT, 1 << 32, 0),
        LBTRMNak(SID, PORT, [1 << 32]),
        LBTRMNak(SID, PORT, [1], format=16),
        LBTRMNcf(SID, PORT, 0, [1], 16),
        LBTRMNak(SID, PORT, range(0x10000)),
        LBTRMData(SID, PORT, 1, 0, options=[LBTRMOption(0)]),
        LBTRMData(SID, PORT, 1, 0, options=[LBTRMOption(1, bytes(252))]),
    ],
)
def test_encode_refuses_what_the_wire_cannot_carry(record: lbtrm.LBTRMRecord) -> None:
    with pytest.raises(LocalProtocolError):
        lbtrm.encode(record)


@pytest.mark.parametrize(
    ("wire", "why"),
    [
        (b"", "short"),
        (hdr(0)[:7], "short"),
        (bytes([0x10]) + hdr(0)[1:] + bytes(12), "version"),
        (hdr(1) + bytes(12), "type"),
        (hdr(0) + bytes(11), "truncated data"),
        (hdr(2) + bytes(15), "truncated sm"),
        (hdr(3) + struct.pack("!HH", 3, 0) + bytes(8), "nak list"),
        (hdr(4) + struct.pack("!IHBB", 0, 1, 0, 0), "ncf list"),
        (hdr(3) + struct.pack("!HH", 0, 0) + b"x", "trailing"),
        (hdr(0, 1) + bytes(12) + struct.pack("!BBH", 0, 3, 0), "option length"),
        (hdr(0, 1) + bytes(12) + struct.pack("!BBH", 0, 9, 0), "option overrun"),
        (hdr(2, 1) + bytes(16) + b"\x00", "truncated option"),
    ],
)
def test_decode_rejects(wire: bytes, why: str) -> None:
    with pytest.raises(LBTRMError):
        lbtrm.decode(wire)
    if why not in ("trailing", "truncated sm", "nak list", "ncf list", "truncated option"):
        with pytest.raises(LBTRMError):
            lbtrm.decode_header(wire)


# --------------------------------------------------------------------------------------------
# Round trips

u16 = st.integers(0, 0xFFFF)
u32 = st.integers(0, 0xFFFFFFFF)
u8 = st.integers(0, 0xFF)
nibble = st.integers(0, 15)
options = st.lists(st.builds(LBTRMOption, st.integers(1, 255), st.binary(max_size=20)), max_size=3)
records = st.one_of(
    st.builds(
        LBTRMData,
        u32,
        u16,
        u32,
        u32,
        st.binary(max_size=64),
        flags_fec_type=u8,
        flags_tgsz=u8,
        fec_symbol=u16,
        options=options,
    ),
    st.builds(
        LBTRMSessionMessage,
        u32,
        u16,
        u32,
        u32,
        u32,
        flags_fec_type=u8,
        flags_tgsz=u8,
        options=options,
    ),
    st.builds(LBTRMNak, u32, u16, st.lists(u32, max_size=20), format=nibble, options=options),
    st.builds(
        LBTRMNcf, u32, u16, u32, st.lists(u32, max_size=20), nibble, format=nibble, options=options
    ),
)


@settings(max_examples=200, deadline=None)
@given(records)
def test_round_trip(record: lbtrm.LBTRMRecord) -> None:
    wire = lbtrm.encode(record)
    assert lbtrm.decode(wire) == record
    assert lbtrm.decode(bytearray(wire)) == record
    ptype, port, sid, *_rest, payload = lbtrm.decode_header(memoryview(wire))
    assert (port, sid) == (record.ucast_port, record.session_id)
    if isinstance(record, LBTRMData):
        assert ptype == lbtrm.TYPE_DATA
        assert bytes(payload) == record.payload


# --------------------------------------------------------------------------------------------
# Fuzz: only LBTRMError escapes, whatever the bytes

SEEDS = [wire for _name, _rec, wire in CASES]


def test_fuzz_only_codec_error_escapes() -> None:
    rng = random.Random(1234)
    decoders = (lbtrm.decode, lbtrm.decode_header)
    decoded = fuzz_decoders(
        rng, SEEDS, decoders, LBTRMError, rounds=6000, random_every=3, random_max=48
    )
    assert decoded > 500  # the mutations must exercise the success paths too
