"""Exact-bytes tests for every LBMC header and message type, both ways.

Each case is a header record and the bytes that must follow its next_hdr/hdr_len pair, written
by hand from the layout tables of wire-lbmc-ump.md (sections 5-8).  The golden vectors at the end
are the tshark-verified hex strings of section 11.
"""

from __future__ import annotations

import pytest

from umcore.errors import LocalProtocolError
from umcore.wire import lbmc
from umcore.wire.lbmc import (
    ACK_FLAG_E,
    BATCH_START,
    CAP_CLIENT_LIFETIME,
    CAP_QC,
    CTXINFO_ADDR,
    CTXINFO_CTXINST,
    CTXINFO_NAME,
    EXTOPT_MSGSEL,
    KA_FLAG_R,
    MSG_CONTROL,
    MSG_DATA,
    MSG_EOT,
    MSG_PRORX,
    MSG_RETRANS,
    PREG_FLAG_W,
    PREG_RESP_O,
    PREG_RESP_W,
    PROXY_SRC_ENABLE,
    RXREQ_FLAG_T,
    SRI_ACKTOSRC,
    SRI_INITIAL_SQN_KNOWN,
    Advertisement,
    ApphdrChain,
    ApphdrElement,
    AppHeader,
    AuthChallenge,
    AuthChallengeResponse,
    AuthRequest,
    AuthResult,
    Batch,
    CtxInfo,
    CtxInst,
    CtxInstD,
    CtxInstR,
    CtxInstS,
    Destination,
    Domain,
    ExtOpt,
    Frag,
    GatewayName,
    Header,
    Hmac,
    LBMCError,
    LBMCMessage,
    LjiReq,
    ODomain,
    Otid,
    PatIdx,
    PatternInterest,
    PatternMdInterest,
    RawHeader,
    Request,
    RouteInfo,
    RouteInfoNeighbor,
    SrcIdx,
    Sri,
    SriReq,
    SsfCreq,
    SsfInit,
    Stream,
    TcpSid,
    TnwgCapabilities,
    TnwgKa,
    TopicIdx,
    TopicInterest,
    TopicMdInterest,
    TopicName,
    TopicSource,
    TopicSourceExfunc,
    Tsni,
    UmeAck,
    UmeAckId,
    UmeCapability,
    UmeClientLifetime,
    UmeKeepalive,
    UmeLjInfo,
    UmePreg,
    UmePregResp,
    UmeProxySrc,
    UmePser,
    UmePsrcElectionToken,
    UmeRangedAck,
    UmeRcvKeepalive,
    UmeRxReq,
    UmeSid,
    UmeStoreDomain,
    UmeStoreGroup,
    UmeStoreId,
    UmeStoreInfo,
    UmeStoreInfoExt,
    UmeStoreName,
)

C8 = bytes(range(1, 9))  # 01..08, a context instance
C8_HEX = "0102030405060708"


def h(text: str) -> bytes:
    return bytes.fromhex(text.replace(" ", "").replace("|", ""))


# (header, body after next_hdr/hdr_len as hex, carried in a data message?)
CASES: list[tuple[Header, str, bool]] = [
    (Frag(first_sqn=10, offset=0, total_len=5), "0000 0000000a 00000000 00000005", True),
    (Batch(BATCH_START), "0002", True),
    (Request(0, 0, 7, 14392, 0, 0x0A000002), "00 00 00000007 3838 0000 0a000002", True),
    (TopicName(b"req.topic\0"), "0000 7265712e746f70696300", True),
    (AppHeader(0x1234, b"\x01\x02\x03"), "1234 010203", True),
    (ApphdrChain((ApphdrElement(5, h("01020304")),)), "00 05 ff 08 0000 01020304", True),
    (Otid(0, bytes(range(32))), "0000" + bytes(range(32)).hex(), True),
    (CtxInstD(0, C8), "0000" + C8_HEX, True),
    (CtxInstR(0, C8), "0000" + C8_HEX, True),
    (SrcIdx(0, 0x0102030405060708), "0000 0102030405060708", True),
    (
        SsfInit(0x40, 0, 5, 9, 14400, 0, 0x0A000001),
        "40 00 00000005 00000009 3840 0000 0a000001",
        False,
    ),
    (SsfCreq(0, 1, 5, 6, 9), "00 01 00000005 00000006 00000009", False),
    (
        UmePreg(PREG_FLAG_W, True, 2, 0x11, 5, 1, 0x22, 14391, 0, 0x0A000001),
        "10 82 00000011 00000005 00000001 00000022 3837 0000 0a000001",
        False,
    ),
    (
        UmePregResp(PREG_RESP_O | PREG_RESP_W, False, 1, 0x12345678, 5, 1, 3, 9),
        "42 01 12345678 00000005 00000001 00000003 00000009",
        False,
    ),
    (
        UmeAck(ACK_FLAG_E, 0, 5, 0x12345678, 0xABCD, 42),
        "08 00 00000005 12345678 0000abcd 0000002a",
        False,
    ),
    (
        UmeRxReq(RXREQ_FLAG_T, 3, 3, 5, 7, 17, 14392, 0, 0x0A000002),
        "40 03 00000003 00000005 00000007 00000011 3838 0000 0a000002",
        False,
    ),
    (UmeKeepalive(KA_FLAG_R, 2, 5, 1, 0x12345678), "40 02 00000005 00000001 12345678", False),
    (UmeStoreId(0x1234), "1234", False),
    (UmeStoreId(5, ignore=True), "8005", False),
    (UmeRangedAck(0, 40, 49), "0000 00000028 00000031", False),
    (UmeAckId(0, 99), "0000 00000063", False),
    (UmeCapability(CAP_QC | CAP_CLIENT_LIFETIME), "6000", False),
    (UmeProxySrc(PROXY_SRC_ENABLE), "4000", False),
    (UmeStoreGroup(0, 2, 3, 0), "00 02 0003 0000", False),
    (
        UmeStoreInfo(0, 1, 14567, 2, 0x0A000003, 0x12345678),
        "00 01 38e7 0002 0a000003 12345678",
        False,
    ),
    (UmeLjInfo(0, 0, 41, 4), "0000 00000000 00000029 00000004", False),
    (Tsni(((1, 41), (2, 7))), "0002 00000001 00000029 00000002 00000007", False),
    (TopicInterest(0x4000, 7), "4000 00000007", False),
    (PatternInterest(0x40, 1, 7, -2), "40 01 00000007 fffffffffffffffe", False),
    (
        Advertisement(0x08, 2, 0xC0000000, 10, 5, 6, 1, 9, 3, 12, b"\x11" * 8),
        "08 02 c0000000 0000000a 00000005 00000006 00000001 00000009 00000003"
        " 000000000000000c 1111111111111111",
        False,
    ),
    (CtxInstS(0, C8), "0000" + C8_HEX, False),
    (UmeStoreName(b"store-a\0"), "0000 73746f72652d6100", False),
    (
        CtxInfo(
            CTXINFO_ADDR | CTXINFO_CTXINST | CTXINFO_NAME,
            0,
            1,
            14391,
            0x0A000001,
            5,
            b"\x21" * 8,
            b"ctx\0",
        ),
        "3800 00 01 3837 0a000001 00000005 2121212121212121 63747800",
        False,
    ),
    (
        UmePser(0x6000, 0x0A000001, 0x0A000003, 5, 1, 14391, 14567, b"\x01" * 8, b"\x02" * 8),
        "6000 0a000001 0a000003 00000005 00000001 3837 38e7 0101010101010101 0202020202020202",
        False,
    ),
    (CtxInst(0, C8), "0000" + C8_HEX, False),
    (Domain(0x4000, 9), "4000 00000009", False),
    (
        TnwgCapabilities(1, 0x80000000, 0, 0x40000000, 0),
        "0001 80000000 00000000 40000000 00000000",
        False,
    ),
    (PatIdx(0, 0x1122334455667788), "0000 1122334455667788", False),
    (UmeClientLifetime(0, 3000, 60000, 5), "0000 00000bb8 0000ea60 00000005", False),
    (UmeSid(0, 0x0102030405060708), "0000 0102030405060708", False),
    (ODomain(0, 11), "0000 0000000b", False),
    (Stream(0, 2, 1, C8), "0000 00000002 00000001" + C8_HEX, True),
    (TopicMdInterest(0x2000, (1, 2, 3)), "2000 0003 0000 00000001 00000002 00000003", False),
    (PatternMdInterest(0x20, 2, 5, (4,)), "20 02 0001 0000 0000000000000005 00000004", False),
    (
        LjiReq(7, 4, 5, 1, 0x0A000002, 14392, 0, 0, 100, 10),
        "0007 00000004 00000005 00000001 0a000002 3838 0000 00000000 00000064 0000000a",
        False,
    ),
    (
        TnwgKa(0x4000, 3, 1700000000, 5),
        "4000 00000003 000000006553f100 00000005 00000000" + "00" * 40,
        False,
    ),
    (
        UmeRcvKeepalive(0, 0xABCD, 0x1122334455667788, C8),
        "0000 0000abcd 1122334455667788" + C8_HEX,
        False,
    ),
    (SriReq(0, 5, 1), "0000 00000005 00000001", False),
    (UmeStoreDomain(0, 1), "0000 00000001", False),
    (Sri(SRI_ACKTOSRC | SRI_INITIAL_SQN_KNOWN, 1, 0, 41), "0003 00000001 00000000 00000029", False),
    (
        RouteInfo(0, 0x0601, 0xDEADBEEF, 0x0102030405060708, 4, 1, 2, 8),
        "0000 00000601 deadbeef 0102030405060708 00000004 0001 0002 08 00 0000",
        False,
    ),
    (
        RouteInfoNeighbor(0, 0x0A0B0C0D0E0F1011, 5, 6),
        "0000 0a0b0c0d0e0f1011 00000005 00000006",
        False,
    ),
    (GatewayName(b"dro1\0"), "0000 64726f3100", False),
    (AuthRequest(b"alice"), "00 01 05 616c696365", False),
    (
        AuthChallenge(b"\x01\x02", b"\x03", b"\x04\x05\x06", b"\x07"),
        "00 02 02 01 03 01 0102 03 040506 07",
        False,
    ),
    (AuthChallengeResponse(b"\xaa\xbb", b"\xcc"), "00 03 02 01 aabb cc", False),
    (AuthResult(1), "00 04 01", False),
    (Hmac(0, 0, bytes(range(20))), "00 00" + bytes(range(20)).hex(), False),
    (
        Destination(0, 7, 0x0A000002, 14392, 1, 3, 0x0A000001, 14391, 0),
        "0000 00000007 0a000002 3838 0001 00000003 0a000001 3837 0000",
        True,
    ),
    (TopicIdx(0, 7), "0000 00000007", False),
    (TopicSource(0x4000, 0), "4000 00000000", False),
    (TopicSourceExfunc(0, 0x0A000001, 14371, 0, 3), "0000 0a000001 3823 0000 00000003", False),
    (
        UmeStoreInfoExt(0, 0, 14567, 0, 0x0A000003, 0x12345678, 0, 1),
        "00 00 38e7 0000 0a000003 12345678 00000000 00000001",
        False,
    ),
    (UmePsrcElectionToken(0, 2, 0xDEADBEEF), "00 02 deadbeef", False),
    (TcpSid(0, 0xDEADBEEF), "0000 deadbeef", False),
    (ExtOpt(0, 1, EXTOPT_MSGSEL, 0, b"a = 1\0"), "00 01 0101 0000 61203d203100", False),
    (RawHeader(0x30, h("0011 2233")), "0011 2233", False),  # UMQ_REG kept raw
]


def wrap(hdr: Header, body: bytes, data: bool, payload: bytes = b"") -> bytes:
    """The whole message, laid out by hand: LBMC header, the one chained header, payload."""
    hlen = 2 + len(body)
    if data:
        msglen = 12 + hlen + len(payload)
        head = bytes([0x00, hdr.type_id()]) + msglen.to_bytes(2, "big") + h("00000007 00000003")
        return head + bytes([0x00, hlen]) + body + payload
    msglen = 4 + hlen
    return bytes([0x08, hdr.type_id()]) + msglen.to_bytes(2, "big") + bytes([0xFF, hlen]) + body


def message_for(hdr: Header, data: bool, payload: bytes = b"") -> LBMCMessage:
    if data:
        return LBMCMessage(MSG_DATA, 7, 3, [hdr], payload)
    return LBMCMessage(MSG_CONTROL, headers=[hdr])


@pytest.mark.parametrize(
    ("hdr", "body_hex", "data"),
    CASES,
    ids=lambda v: type(v).__name__ if isinstance(v, Header) else "",
)
def test_header_exact_bytes(hdr: Header, body_hex: str, data: bool) -> None:
    payload = b"hello" if data else b""
    wire = wrap(hdr, h(body_hex), data, payload)
    assert lbmc.encode(message_for(hdr, data, payload)) == wire
    assert lbmc.decode(wire) == message_for(hdr, data, payload)


def test_every_modelled_header_type_has_a_case() -> None:
    covered = {hdr.type_id() for hdr, _, _ in CASES}
    missing = sorted(set(lbmc.HEADER_TYPES) - covered)
    assert not missing, [hex(m) for m in missing]


def test_message_types_exact_bytes() -> None:
    sid = TcpSid(0, 0x11223344)
    for mtype in (MSG_DATA, MSG_PRORX, MSG_RETRANS):
        wire = bytes([mtype, 0x00, 0x00, 0x11]) + h("00000007 00000009") + b"hello"
        msg = LBMCMessage(mtype, 7, 9, [], b"hello")
        assert lbmc.encode(msg) == wire
        assert lbmc.decode(wire) == msg
    for mtype in (MSG_CONTROL, MSG_EOT):
        wire = bytes([mtype, 0x6B, 0x00, 0x0C]) + h("ff08 0000 11223344")
        msg = LBMCMessage(mtype, headers=[sid])
        assert lbmc.encode(msg) == wire
        assert lbmc.decode(wire) == msg
    # A control message with a payload ends its chain with 0x00 (tshark then calls it data).
    wire = h("086b000f 0008 0000 11223344 616263")
    assert lbmc.decode(wire) == LBMCMessage(MSG_CONTROL, headers=[sid], payload=b"abc")
    assert lbmc.encode(LBMCMessage(MSG_CONTROL, headers=[sid], payload=b"abc")) == wire


def test_data_fast_path_exact_bytes() -> None:
    wire = h("00000011 00000007 00000003 68656c6c6f")
    assert lbmc.encode_data(7, 3, b"hello") == wire
    tidx, sqn, flags, payload, end = lbmc.decode_data(wire)
    assert (tidx, sqn, flags, bytes(payload), end) == (7, 3, MSG_DATA, b"hello", len(wire))
    topic = h("0005001f 00000007 00000003 000e 0000 6d696d2e746f70696300 68656c6c6f")
    assert lbmc.encode_data(7, 3, b"hello", topic=b"mim.topic\0") == topic
    tidx, sqn, flags, payload, end = lbmc.decode_data(topic)
    assert (tidx, sqn, flags, bytes(payload), end) == (7, 3, lbmc.DATA_TOPIC, b"hello", len(topic))
    buf = bytearray()
    off = lbmc.encode_data_into(buf, 0, 7, 3, b"hello")
    off = lbmc.encode_data_into(buf, off, 8, 4, memoryview(b"bye"))
    assert bytes(buf) == wire + h("0000000f 00000008 00000004 627965")
    assert off == len(buf)
    # Overwriting inside an existing buffer.
    lbmc.encode_data_into(buf, 0, 9, 5, b"HELLO")
    assert bytes(buf[:17]) == h("00000011 00000009 00000005 48454c4c4f")
    assert [(m.tidx, m.sqn, m.payload) for m in lbmc.decode_all(buf)] == [
        (9, 5, b"HELLO"),
        (8, 4, b"bye"),
    ]


def test_decode_data_flags_for_other_messages() -> None:
    frag = lbmc.encode(LBMCMessage(MSG_RETRANS, 1, 2, [Frag(2, 0, 3)], b"abc"))
    tidx, sqn, flags, payload, _ = lbmc.decode_data(frag)
    assert (tidx, sqn, flags, bytes(payload)) == (1, 2, MSG_RETRANS | lbmc.DATA_FRAG, b"abc")
    ctl = lbmc.encode(LBMCMessage(MSG_CONTROL, headers=[TcpSid(0, 1)]))
    assert lbmc.decode_data(ctl)[2] == MSG_CONTROL | lbmc.DATA_OTHER


# Section 11 of wire-lbmc-ump.md: tshark-verified messages (hex as printed there).
GOLDEN = [
    "08120046 051c 00 81 00000000 00000005 00000001 00000000 3837 0000 0a000001 | 4212 0000 70657273697374 2e746f70696300 | 170c 0000 0102030405060708 | 1a04 0000 | ff04 4000",
    "0813002c 1718 00 81 12345678 00000005 00000001 00000000 00000000 | 3c04 0000 | ff0c 0000 2122232425262728",
    "0813001c ff18 25 81 12345678 00000005 00000001 00000000 00000000",
    "0814001c 1714 00 01 00000005 00000001 00000000 0000002a | ff04 0000",
    "08140018 ff14 08 00 00000005 12345678 0000abcd 0000002a",
    "08140030 1814 00 01 00000005 00000001 00000000 00000028 | 190c 0000 00000028 00000031 | 1708 0000 00000063 | ff04 0000",
    "08150020 ff1c 0000 00000003 00000005 12345678 00000011 3838 0000 0a000002",
    "0a050023 00000001 00000011 | 0012 0000 706572736973742e746f70696300 | 6d73673137",
    "08200018 ff14 0002 00000001 00000029 00000002 00000007",
    "08160018 1710 40 02 00000005 00000001 12345678 | ff04 0000",
    "0850001c ff18 0000 0000abcd 1122334455667788 1112131415161718",
    "08530010 ff0c 0000 00000005 00000001",
    "084e0028 ff24 0007 00000004 00000005 00000001 0a000002 3838 0000 00000000 00000064 0000000a",
    "081e0014 ff10 0000 00000000 00000029 00000004",
    "08120040 461c 00 01 00000000 00000005 00000001 12345678 3838 0000 0a000002 | 4710 0000 00000bb8 0000ea60 00000000 | 1a0c 0000 0102030405060708 | ff04 6000",
    "004b0051 00000000 00000000 | 6414 0000 00000002 00000001 0102030405060708 | 051c 0000 00000007 0a000002 3838 0001 00000003 0a000001 3837 0000 | 000e 0000 64726f2e746f70696300 | 7669612d64726f",
    "086b000c ff08 0000 deadbeef",
    "0167000c ff08 4000 00000000",
    "0855003c 6910 0002 00000001 00000000 00000029 | 1c18 00 00 38e7 0000 0a000003 12345678 00000000 00000001 | 5408 00 00 0001 0000 | ff08 0000 00000000",
    "0812004c fe1c 10 81 00000000 00000005 00000001 00000000 3837 0000 0a000001 | ff2c 00 00 0100 0000 01 00 7265706f7369746f72792d73697a652d7468726573686f6c6400 3130303030303000",
    "0007005b 00000001 0000002c | 000c 00 06 | ff08 0000 0000003c | 7061796c6f6164 | badaacab 0200 00 00 | 28000000 2e000000 00000000 04000000 | 32000000 38000000 00000000 08000000 | 6b5f696e7400 d2040000 6b5f73747200 61626300",
]


@pytest.mark.parametrize("text", GOLDEN)
def test_golden_vectors_round_trip(text: str) -> None:
    wire = h(text)
    assert lbmc.encode(lbmc.decode(wire)) == wire


def test_golden_source_preg_built_from_values() -> None:
    msg = LBMCMessage(
        MSG_CONTROL,
        headers=[
            UmePreg(0, True, 1, 0, 5, 1, 0, 14391, 0, 0x0A000001),
            TopicName(b"persist.topic\0"),
            CtxInst(0, C8),
            UmeStoreId(0),
            UmeCapability(CAP_QC),
        ],
    )
    assert lbmc.encode(msg) == h(GOLDEN[0])
    assert len(h(GOLDEN[0])) == 70


def test_golden_error_preg_resp_fields() -> None:
    resp = lbmc.decode(h(GOLDEN[2])).headers[0]
    assert isinstance(resp, UmePregResp)
    assert resp.error == lbmc.PREG_RESP_EACTIVE
    assert (resp.source, resp.marker, resp.reg_id) == (True, 1, 0x12345678)


# -- chain robustness (acceptance check 3) ----------------------------------------------------


def test_longer_hdr_len_is_skipped() -> None:
    wire = h("08530012 ff0e 0000 00000005 00000001 abcd")  # SRI_REQ with 2 extra bytes
    assert lbmc.decode(wire).headers == [SriReq(0, 5, 1)]


def test_unknown_mid_chain_header_is_kept_raw_and_skipped() -> None:
    wire = h("08530016 700c 0000 00000005 00000001 | ff06 0000 abcd")
    msg = lbmc.decode(wire)
    assert msg.headers == [SriReq(0, 5, 1), RawHeader(0x70, h("0000abcd"))]
    assert lbmc.encode(msg) == wire


@pytest.mark.parametrize(
    "text",
    [
        "08530010 ff00 0000 00000005 00000001",  # hdr_len 0
        "0853000e ff0a 0000 00000005 0000",  # hdr_len below SRI_REQ's 12
        "08530010 ff10 0000 00000005 00000001",  # hdr_len past msglen
        "18530010 ff0c 0000 00000005 00000001",  # version 1
        "03530010 ff0c 0000 00000005 00000001",  # type 3
        "08530003",  # msglen below the header
        "08530011 ff0c 0000 00000005 00000001",  # msglen past the buffer
        "0000000b 00000000 000000",  # data msglen below 12
        "0820000c ff08 0002 00000001",  # TSNI num_recs 2, one record
        "0805000a ff04 0000 0000",  # empty topic name (and trailing)
        "0860000a ff06 0001 09 61",  # AUTH request user_len past hdr_len
    ],
)
def test_malformed_messages_raise_lbmc_error(text: str) -> None:
    with pytest.raises(LBMCError):
        lbmc.decode(h(text))


def test_decoder_never_reads_past_msglen() -> None:
    one = h("08530010 ff0c 0000 00000005 00000001")
    # the chain says "TCP_SID follows" but msglen ends the message: refuse, do not read on
    bad = bytearray(one)
    bad[4] = 0x6B
    with pytest.raises(LBMCError):
        lbmc.decode_at(bytes(bad) + h("ff08 0000 11223344"), 0)


def test_trailing_bytes_after_none_are_ignored() -> None:
    msg = lbmc.decode(h("08530012 ff0c 0000 00000005 00000001 abcd"))
    assert msg.headers == [SriReq(0, 5, 1)] and msg.payload == b""


def test_decode_rejects_trailing_message() -> None:
    one = lbmc.encode_data(1, 2, b"x")
    with pytest.raises(LBMCError):
        lbmc.decode(one + one)
    assert len(lbmc.decode_all(one + one)) == 2


@pytest.mark.parametrize(
    "msg",
    [
        LBMCMessage(MSG_CONTROL),  # control with nothing in it
        LBMCMessage(5, headers=[TcpSid()]),  # unknown type
        LBMCMessage(MSG_CONTROL, headers=[TopicName(b"x" * 252)]),  # header > 255
        LBMCMessage(MSG_CONTROL, headers=[UmeStoreId(0x8000)]),  # 15-bit field
        LBMCMessage(MSG_CONTROL, headers=[UmePreg(marker=128)]),
        LBMCMessage(MSG_CONTROL, headers=[SriReq(0, -1, 0)]),  # struct range
        LBMCMessage(MSG_CONTROL, headers=[RawHeader(0xFF, b"")]),  # terminator as a type
        LBMCMessage(MSG_DATA, payload=b"x" * 65524),  # msglen > 65535
        LBMCMessage(MSG_CONTROL, headers=[Tsni(tuple((i, i) for i in range(32)))]),
    ],
)
def test_unencodable_messages_raise_local_protocol_error(msg: LBMCMessage) -> None:
    with pytest.raises(LocalProtocolError):
        lbmc.encode(msg)


def test_fast_path_limits() -> None:
    with pytest.raises(LocalProtocolError):
        lbmc.encode_data(1, 2, bytes(65524))
    with pytest.raises(LocalProtocolError):
        lbmc.encode_data(1, 2, b"", topic=b"")
    with pytest.raises(LocalProtocolError):
        lbmc.encode_data(-1, 2, b"")
    assert len(lbmc.encode_data(1, 2, bytes(65523))) == 65535


def test_ip_helpers() -> None:
    assert lbmc.ip4_to_str(0x0A000102) == "10.0.1.2"
    assert lbmc.ip4_from_str("10.0.1.2") == 0x0A000102
    for bad in ("10.0.0", "10.0.0.256", "a.b.c.d"):
        with pytest.raises(ValueError):
            lbmc.ip4_from_str(bad)
