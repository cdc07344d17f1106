"""lbmmon packet framing and statistics messages: exact bytes, round trips, bounded fuzz."""

from __future__ import annotations

import random
import struct

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from umcore.errors import LocalProtocolError
from umcore.monitor import framing
from umcore.monitor.attributes import MonAttributes, decode_stats, encode_stats
from umcore.monitor.framing import (
    MODULE_ID_PB,
    AttrType,
    LBMMonError,
    PacketType,
    decode_packet,
    encode_packet,
    make_module_id,
    module_format,
)
from umcore.monitor.pb import srs_mon_pb2, ums_mon_pb2

SRS_PAYLOAD = bytes.fromhex("1a040a021004")  # SRSMonMsg{stats{srs{active_clients_count: 4}}}

# (packet type, attribute entries, data) <-> packet bytes, written out by hand from B3.
TABLE = [
    (
        PacketType.SRS,
        [],
        SRS_PAYLOAD,
        "1b33041b 000a 0000 0006 0000 1a040a021004",
    ),
    (
        PacketType.CONTEXT,
        [(AttrType.FORMAT_MODULEID, b"\x02\x01")],
        b"",
        "1b33041b 0003 000a 0000 0000" + " 0001 000a 0003 0002 0201",
    ),
    (
        PacketType.GATEWAY,
        [(AttrType.APPSOURCEID, b"dro1"), (AttrType.SENDER_IPV4, bytes([10, 0, 0, 1]))],
        b"\x0a\x00",
        "1b33041b 0007 0014 0002 0000"
        + " 0002 0014 0002 0004 64726f31 0000 0004 0a000001"
        + " 0a00",
    ),
    (
        0x1234,  # an unknown packet type still frames
        [(0x9999, b"")],
        b"x",
        "1b33041b 1234 0008 0001 0000 0001 0008 9999 0000 78",
    ),
]


@pytest.mark.parametrize(("ptype", "attrs", "data", "hexbytes"), TABLE)
def test_exact_bytes_both_ways(
    ptype: int, attrs: list[tuple[int, bytes]], data: bytes, hexbytes: str
) -> None:
    wire = bytes.fromhex(hexbytes.replace(" ", ""))
    assert encode_packet(ptype, data, attrs) == wire
    pkt = decode_packet(wire)
    assert pkt.packet_type == ptype
    assert [(int(t), v) for t, v in pkt.attributes] == [(int(t), v) for t, v in attrs]
    assert bytes(pkt.data) == data


def test_known_packet_type_decodes_to_the_enum() -> None:
    pkt = decode_packet(encode_packet(10, b""))
    assert pkt.packet_type is PacketType.SRS
    assert decode_packet(encode_packet(77, b"")).packet_type == 77


def _good() -> bytes:
    return encode_packet(PacketType.CONTEXT, b"abc", [(AttrType.FORMAT_MODULEID, b"\x02\x01")])


def _set(buf: bytes, offset: int, fmt: str, value: int) -> bytes:
    out = bytearray(buf)
    struct.pack_into(fmt, out, offset, value)
    return bytes(out)


BAD = [
    ("empty", b""),
    ("short header", bytes.fromhex("1b33041b0003")),
    ("bad signature", _set(_good(), 0, "!I", 0x1B33041C)),
    ("data longer than announced", _good() + b"!"),
    ("data shorter than announced", _good()[:-1]),
    ("attr block length disagrees", _set(_good(), 14, "!H", 12)),
    ("attr entry count too high", _set(_good(), 12, "!H", 2)),
    ("attr entry overruns block", _set(_good(), 18, "!H", 3)),
    ("too many entries", _set(_good(), 12, "!H", framing.MAX_ATTR_ENTRIES + 1)),
    (
        "block shorter than its header",
        bytes.fromhex("1b33041b 0003 0002 0000 0000 0001".replace(" ", "")),
    ),
    (
        "bytes left after the entries",
        bytes.fromhex("1b33041b 0003 0006 0000 0000 0000 0006 ffff".replace(" ", "")),
    ),
]


@pytest.mark.parametrize(("why", "wire"), BAD, ids=[b[0] for b in BAD])
def test_malformed_packets_raise_the_codec_error(why: str, wire: bytes) -> None:
    with pytest.raises(LBMMonError) as info:
        decode_packet(wire)
    assert info.value.record in ("HDR", "ATTR")


def test_encoder_refuses_what_the_u16_fields_cannot_say() -> None:
    with pytest.raises(LocalProtocolError):
        encode_packet(PacketType.UMESTORE, bytes(framing.MAX_FIELD_LENGTH + 1))
    with pytest.raises(LocalProtocolError):
        encode_packet(PacketType.UMESTORE, b"", [(1, bytes(framing.MAX_FIELD_LENGTH))])
    with pytest.raises(LocalProtocolError):
        encode_packet(0x10000, b"")
    with pytest.raises(LocalProtocolError):
        encode_packet(0, b"", [(0, b"")] * (framing.MAX_ATTR_ENTRIES + 1))
    # The largest payload that fits does frame.
    assert len(encode_packet(0, bytes(framing.MAX_FIELD_LENGTH))) == 12 + 0xFFFF


def test_module_ids() -> None:
    assert MODULE_ID_PB == 0x0201
    assert make_module_id(1, 3) == 0x0103
    assert module_format(0x0201) == 2
    assert module_format(0x0A07) == 10


entries = st.lists(st.tuples(st.integers(0, 0xFFFF), st.binary(max_size=40)), max_size=8)


@settings(max_examples=200, deadline=None)
@given(st.integers(0, 0xFFFF), entries, st.binary(max_size=600))
def test_round_trip(ptype: int, attrs: list[tuple[int, bytes]], data: bytes) -> None:
    wire = encode_packet(ptype, data, attrs)
    assert wire[:4] == b"\x1b\x33\x04\x1b"
    _, _, block_len, data_len, filler = framing.HEADER.unpack_from(wire)
    assert block_len + data_len == len(wire) - 12 and filler == 0
    pkt = decode_packet(wire)
    assert pkt.packet_type == ptype
    assert list(pkt.attributes) == attrs
    assert bytes(pkt.data) == data


# -- attributes and whole statistics messages ----------------------------------------------------


def _attrs() -> MonAttributes:
    return MonAttributes(
        sender_ipv4="10.29.4.101",
        timestamp=1693260077,
        application_id="srs1",
        object_id=0x1E1D950,
        process_id=3753,
        context_instance=bytes.fromhex("50b2e6602af36a93"),
        domain_id=7,
        source_flag=1,
    )


def test_attributes_through_the_block_and_the_protobuf() -> None:
    a = _attrs()
    assert MonAttributes.from_entries(a.to_entries()) == a
    back = MonAttributes.from_pb(a.to_pb(), source_flag=1)
    assert back == a


def test_attribute_widths_we_accept() -> None:
    a = MonAttributes.from_entries(
        [
            (AttrType.TIMESTAMP, (1234).to_bytes(4, "big")),
            (AttrType.PROCESSID, (99).to_bytes(4, "big")),
            (AttrType.APPSOURCEID, b"app\0\0"),
        ]
    )
    assert (a.timestamp, a.process_id, a.application_id) == (1234, 99, "app")
    for bad in [
        (AttrType.SENDER_IPV4, b"\x01\x02\x03"),
        (AttrType.TIMESTAMP, b"\x00\x00\x00"),
        (AttrType.CTXINST, b"\x00" * 7),
        (AttrType.APPSOURCEID, b"\xff\xfe"),
    ]:
        with pytest.raises(LBMMonError):
            MonAttributes.from_entries([bad])


def test_srs_stats_message_end_to_end() -> None:
    msg = srs_mon_pb2.SRSMonMsg()
    msg.stats.srs.active_clients_count = 4
    wire = encode_stats(PacketType.SRS, msg, _attrs())
    # Acceptance check 19: signature, big-endian type, and lengths summing to the message.
    assert wire[:4] == bytes.fromhex("1b33041b")
    ptype, block_len, data_len = struct.unpack_from("!HHH", wire, 4)
    assert ptype == 10 and block_len + data_len == len(wire) - 12
    got = decode_stats(wire)
    assert got.packet_type is PacketType.SRS
    assert isinstance(got.message, srs_mon_pb2.SRSMonMsg)
    assert got.message.stats.srs.active_clients_count == 4
    assert got.message.attributes.application_id == "srs1"
    assert got.attributes == _attrs()
    # The payload alone parses with the protobuf class, as UM's own deserialiser does it.
    assert srs_mon_pb2.SRSMonMsg.FromString(got.data) == got.message


def test_context_stats_message() -> None:
    msg = ums_mon_pb2.UMSMonMsg()
    msg.stats.context.tr_dgrams_sent = 12
    got = decode_stats(encode_stats(PacketType.CONTEXT, msg, _attrs()))
    assert isinstance(got.message, ums_mon_pb2.UMSMonMsg)
    assert got.message.stats.context.tr_dgrams_sent == 12


def test_csv_payload_is_handed_back_raw() -> None:
    attrs = _attrs()
    attrs.module_id = make_module_id(framing.FORMAT_CSV, 1)
    wire = encode_packet(PacketType.CONTEXT, b"1,2,3\n", attrs.to_entries())
    got = decode_stats(wire)
    assert got.message is None and got.data == b"1,2,3\n"


def test_unparseable_protobuf_payload() -> None:
    wire = encode_packet(PacketType.SRS, b"\x1a\xff\xff", _attrs().to_entries())
    with pytest.raises(LBMMonError) as info:
        decode_stats(wire)
    assert info.value.record == "SRSMonMsg"


def test_fuzz_only_the_codec_error_escapes() -> None:
    """Random bytes and mutations of valid packets: decode or LBMMonError, nothing else."""
    rng = random.Random(7)
    msg = srs_mon_pb2.SRSMonMsg()
    msg.stats.um_client.um_client_info.ip = "10.0.0.1"
    msg.stats.um_client.client_sir_received_count = 3
    seeds = [
        encode_stats(PacketType.SRS, msg, _attrs()),
        encode_stats(PacketType.CONTEXT, ums_mon_pb2.UMSMonMsg(), _attrs()),
        _good(),
    ]
    decoded = failed = 0
    for i in range(3000):
        if i % 3 == 0:
            buf = bytes(rng.getrandbits(8) for _ in range(rng.randrange(0, 80)))
            if i % 2:
                buf = b"\x1b\x33\x04\x1b" + buf
        else:
            buf = bytearray(rng.choice(seeds))
            for _ in range(rng.randrange(1, 4)):
                op = rng.randrange(3)
                if op == 0 and buf:
                    buf[rng.randrange(len(buf))] = rng.getrandbits(8)
                elif op == 1 and buf:
                    del buf[rng.randrange(len(buf)) :]
                else:
                    buf += bytes(rng.getrandbits(8) for _ in range(rng.randrange(1, 8)))
            buf = bytes(buf)
        try:
            decode_stats(buf)
            decoded += 1
        except LBMMonError:
            failed += 1
    assert decoded > 0 and failed > 0  # both paths were exercised
