"""The fast helpers lbmrd uses: peek_header, is_client_keepalive, tir_address_slots."""

from __future__ import annotations

import struct

import pytest

from umcore.wire import lbmr
from umcore.wire.lbmr import (
    TIR,
    TQR,
    CtxInstOption,
    DomainIdOption,
    ExFuncOption,
    LBMRError,
    LBMRPacket,
    LBTIPCInfo,
    LBTRDMAInfo,
    LBTRMInfo,
    LBTRUInfo,
    LBTSMXInfo,
    SrcIdOption,
    TCPInfo,
    UMEOption,
    UnknownTopicOption,
    UnknownTransportInfo,
    VersionOption,
    WildcardTQR,
    encode,
)

CTX = bytes(range(8))


def test_peek_header() -> None:
    assert lbmr.peek_header(b"\x00\x03\x01\x02rest") == (0, 0, False, 3, 0x0102)
    assert lbmr.peek_header(b"\x1f\x05\x00\x2f") == (1, 7, True, 5, 0x2F)
    assert lbmr.peek_header(memoryview(b"\x02\x00\x00\x00")) == (0, 2, False, 0, 0)
    with pytest.raises(LBMRError):
        lbmr.peek_header(b"\x00\x00\x00")


def test_is_client_keepalive() -> None:
    assert lbmr.is_client_keepalive(lbmr.RCV_ALIVE)
    assert lbmr.is_client_keepalive(lbmr.SRC_ALIVE)
    assert lbmr.is_client_keepalive(encode(LBMRPacket(3, options=[SrcIdOption(CTX)])))
    assert lbmr.is_client_keepalive(bytearray(b"\x12\x00\x00\x00"))  # version is not checked
    assert not lbmr.is_client_keepalive(lbmr.RESOLVER_KEEPALIVE)
    assert not lbmr.is_client_keepalive(b"\x02\x01\x00\x00")
    assert not lbmr.is_client_keepalive(b"\x03\x00\x00\x01")
    assert not lbmr.is_client_keepalive(b"\x07\x00\x00\x00")
    assert not lbmr.is_client_keepalive(b"\x02\x00\x00")


def test_canned_keepalives_are_what_the_encoder_makes() -> None:
    assert encode(LBMRPacket(0)) == lbmr.RESOLVER_KEEPALIVE
    assert encode(LBMRPacket(2)) == lbmr.RCV_ALIVE
    assert encode(LBMRPacket(3)) == lbmr.SRC_ALIVE


MIXED_TIRS = [
    TIR(
        "tcp.sid",
        1,
        TCPInfo("10.0.0.1", 14371, 0x11223344),
        [CtxInstOption(CTX), DomainIdOption(7)],
    ),
    TIR("rm", 2, LBTRMInfo("10.0.0.2", "224.10.10.10", 5, 14400, 14390), [DomainIdOption(7)]),
    TIR("ru.nosid", 3, LBTRUInfo("10.0.0.3", 14380)),
    TIR("ipc", 4, LBTIPCInfo(1, 2, 3)),
    TIR(
        "tcp.nosid.opts",
        5,
        TCPInfo("10.0.0.4", 14372),
        [UMEOption(1, 2, "10.0.0.4", "10.0.0.4", 3, 4, 5, 6), ExFuncOption(14372, "10.0.0.4", 3)],
    ),
    TIR("smx", 6, LBTSMXInfo(1, 2, 3)),
    TIR("rdma", 7, LBTRDMAInfo("10.0.0.5", 1, 2)),
    TIR("unknown", 8, UnknownTransportInfo(0x02, bytes(range(1, 19)))),
    TIR(
        "ru.sid",
        9,
        LBTRUInfo("10.0.0.6", 14381, 0xBEEF),
        [UnknownTopicOption(0x40, b"\x00\x00\x00\x00\x00")],
    ),
]


@pytest.mark.parametrize("with_trailer", [False, True])
@pytest.mark.parametrize("ptype", [0, 1])
def test_tir_address_slots_point_at_the_addresses(ptype: int, with_trailer: bool) -> None:
    tqrs = [TQR("a.b"), TQR("")] if ptype == 0 else [WildcardTQR(1, "^a.*"), WildcardTQR(2, "")]
    options = [SrcIdOption(CTX), VersionOption(1)] if with_trailer else []
    wire = encode(LBMRPacket(ptype, tqrs=tqrs, tirs=MIXED_TIRS, options=options))
    slots = lbmr.tir_address_slots(wire)
    expected = [
        (0x00, "10.0.0.1", 14371),
        (0x01, "10.0.0.3", 14380),
        (0x00, "10.0.0.4", 14372),
        (0x01, "10.0.0.6", 14381),
    ]
    assert [s[0] for s in slots] == [e[0] for e in expected]
    for (_, ip_off, port_off), (_, ip, port) in zip(slots, expected, strict=True):
        assert wire[ip_off : ip_off + 4] == bytes(int(x) for x in ip.split("."))
        assert struct.unpack_from(">H", wire, port_off)[0] == port

    # NAT the way lbmrd does: patch a copy, and decoding shows the new addresses only
    patched = bytearray(wire)
    for n, (_, ip_off, port_off) in enumerate(slots):
        patched[ip_off : ip_off + 4] = bytes((192, 168, 9, n))
        struct.pack_into(">H", patched, port_off, 40000 + n)
    decoded = lbmr.decode(bytes(patched))
    natted = [t.transport_info for t in decoded.tirs if isinstance(t.transport_info, TCPInfo)]
    assert [(i.ip, i.port) for i in natted] == [(f"192.168.9.{n}", 40000 + n) for n in range(4)]
    assert [t.topic for t in decoded.tirs] == [t.topic for t in MIXED_TIRS]
    assert decoded.tirs[1] == MIXED_TIRS[1]


def test_tir_address_slots_other_types_have_none() -> None:
    assert lbmr.tir_address_slots(lbmr.RCV_ALIVE) == []
    assert lbmr.tir_address_slots(b"\x07\x04\x00\x07") == []
    assert lbmr.tir_address_slots(lbmr.RESOLVER_KEEPALIVE) == []


@pytest.mark.parametrize("cut", [5, 12, 20, 30, 41, -3, -1])
def test_tir_address_slots_refuses_truncated(cut: int) -> None:
    wire = encode(LBMRPacket(0, tirs=MIXED_TIRS[:3]))
    with pytest.raises(LBMRError):
        lbmr.tir_address_slots(wire[:cut])


def test_tir_address_slots_refuses_bad_tlen_and_bad_options() -> None:
    bad_tlen = b"\x00\x00\x00\x01t\0" + struct.pack(">BBHI", 0x01, 8, 0, 1) + bytes(8)
    with pytest.raises(LBMRError):
        lbmr.tir_address_slots(bad_tlen)
    bad_opts = (
        b"\x00\x00\x00\x01t\0"
        + struct.pack(">BBHI", 0x80, 6, 0, 1)
        + b"\x0d\x08\x00\x08"
        + bytes(10)
    )
    with pytest.raises(LBMRError):
        lbmr.tir_address_slots(bad_opts)
    with pytest.raises(LBMRError):
        lbmr.tir_address_slots(b"\x08\x00\x00\x00")  # options bit, no trailer
