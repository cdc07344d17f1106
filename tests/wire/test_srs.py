"""SRS over RSocket: exact bytes from the layout tables, round trips, fuzz, stream decoder."""

from __future__ import annotations

import random
import struct

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.wire.helpers import fuzz_decoders, mutate
from umcore.errors import LocalProtocolError
from umcore.wire import srs
from umcore.wire.srs import (
    Cancel,
    Error,
    Keepalive,
    OtherFrame,
    Payload,
    RequestFnf,
    RequestN,
    RequestResponse,
    RequestStream,
    Setup,
    SRSStreamDecoder,
)
from umcore.wire.srs_messages import (
    SER_COST,
    Batch,
    ContextNameEnd,
    ContextNameInfo,
    ContextNameQuery,
    DomainInfo,
    ReceiverDelete,
    ReceiverEnd,
    ReceiverInfo,
    RegistrationRequest,
    RegistrationResponse,
    RouteEnd,
    RouteInfo,
    SourceDelete,
    SourceInfo,
    SourceLeave,
    SRSError,
    StreamRequest,
    WildcardReceiverDelete,
    WildcardReceiverEnd,
    WildcardReceiverInfo,
    decode_message,
    encode_message,
)

OTID = bytes(range(32))
CTX = bytes(range(1, 9))
CTX2 = bytes(range(11, 19))


def s8(text: str) -> bytes:
    """u8 length (counting the NUL we append) + UTF-8 bytes + NUL (srs_messages docstring)."""
    raw = text.encode() + b"\0"
    return bytes([len(raw)]) + raw


def tail(ctx: bytes, ctype: int, version: int, vflags: int) -> bytes:
    return ctx + struct.pack("!BII", ctype, version, vflags)


def frame(stream: int, ftype: int, flags: int, body: bytes) -> bytes:
    """u24 length, u32 stream id, u16 type<<10|flags (wire note 8.1), then the body."""
    inner = struct.pack("!IH", stream, (ftype << 10) | flags) + body
    return len(inner).to_bytes(3, "big") + inner


# (record, its bytes) for every message and batch record type (wire note 8.2/8.3 and, for ids
# 13-18, the structs in Wireshark master's packet-lbmsrs.c).
MESSAGE_CASES = [
    (
        RegistrationRequest(
            "10.0.0.9",
            40000,
            0x1234,
            app_type=2,
            host_id=0x0A000009,
            protocol_version=1,
            interest_mode=3,
            local_domain_id=5,
        ),
        struct.pack("!HB4sHIIBBI", 1, 2, bytes([10, 0, 0, 9]), 40000, 0x1234, 0x0A000009, 1, 3, 5),
    ),
    (
        RegistrationResponse(0x0102030405060708, local_domain_id=7, protocol_version=3),
        struct.pack("!HQIB", 2, 0x0102030405060708, 7, 3),
    ),
    (StreamRequest(), struct.pack("!HB", 3, 0)),
    (
        Batch(
            [
                SourceInfo(
                    OTID,
                    "ORDERS.NYSE",
                    "TCP:10.0.0.5:14371:11223344",
                    host_id=0x0A000005,
                    topic_idx=7,
                    functionality_flags=1,
                    request_ip="10.0.0.5",
                    request_port=14391,
                    domain_id=5,
                    encryption=1,
                    compression=2,
                    ulb_src_id=3,
                    ulb_queue_id=4,
                    ulb_reg_id=0x1122334455667788,
                    context_instance=CTX,
                    context_type=1,
                    version=0x00060F00,
                    version_flags=1,
                    ttl=1,
                    cost=-1,
                )
            ]
        ),
        struct.pack("!H", 4)
        + OTID
        + s8("ORDERS.NYSE")
        + s8("TCP:10.0.0.5:14371:11223344")
        + struct.pack(
            "!III4sHIBBIIQ",
            0x0A000005,
            7,
            1,
            bytes([10, 0, 0, 5]),
            14391,
            5,
            1,
            2,
            3,
            4,
            0x1122334455667788,
        )
        + tail(CTX, 1, 0x00060F00, 1)
        + struct.pack("!Hi", 1, -1),
    ),
    (Batch([SourceDelete(OTID, "T")]), struct.pack("!H", 5) + OTID + s8("T")),
]
for _cls, _id in ((ReceiverInfo, 6), (ReceiverDelete, 7), (ReceiverEnd, 8)):
    MESSAGE_CASES.append(
        (
            Batch(
                [
                    _cls(
                        "top.ic",
                        domain_id=9,
                        context_instance=CTX,
                        context_type=2,
                        version=5,
                        version_flags=6,
                    )
                ]
            ),
            struct.pack("!H", _id)
            + s8("top.ic")
            + struct.pack("!I", 9)
            + tail(CTX, 2, 5, 6)
            + bytes(4),
        )
    )
for _cls, _id in (
    (WildcardReceiverInfo, 9),
    (WildcardReceiverDelete, 10),
    (WildcardReceiverEnd, 11),
):
    MESSAGE_CASES.append(
        (
            Batch([_cls("^ORD.*", domain_id=1, context_instance=CTX, version=2)]),
            struct.pack("!H", _id)
            + s8("^ORD.*")
            + struct.pack("!I", 1)
            + tail(CTX, 0, 2, 0)
            + bytes(4),
        )
    )
MESSAGE_CASES.append(
    (
        Batch(
            [
                SourceLeave(
                    OTID,
                    "T",
                    "LBTRU:10.0.0.5:14380:0000beef",
                    context_instance=CTX,
                    context_type=0,
                    version=3,
                    version_flags=4,
                )
            ]
        ),
        struct.pack("!H", 12)
        + OTID
        + s8("T")
        + s8("LBTRU:10.0.0.5:14380:0000beef")
        + tail(CTX, 0, 3, 4)
        + bytes(4),
    )
)
for _cls, _id in ((RouteInfo, 13), (RouteEnd, 14)):
    MESSAGE_CASES.append(
        (
            Batch(
                [
                    _cls(
                        [1, 2, 0xFFFFFFFF],
                        "10.1.2.3",
                        7000,
                        route_index=4,
                        context_instance=CTX,
                        context_type=1,
                        version=5,
                        version_flags=6,
                    )
                ]
            ),
            struct.pack("!HHIII", _id, 3, 1, 2, 0xFFFFFFFF)
            + bytes([10, 1, 2, 3])
            + struct.pack("!H", 7000)
            + tail(CTX, 1, 5, 6)
            + struct.pack("!HH", 4, 0),
        )
    )
MESSAGE_CASES += [
    (
        Batch([DomainInfo(42, context_instance=CTX, context_type=1, version=5, version_flags=6)]),
        struct.pack("!HI", 15, 42) + tail(CTX, 1, 5, 6) + bytes(4),
    ),
    (
        Batch([ContextNameQuery("store-a", domain_id=3, context_instance=CTX, version=1)]),
        struct.pack("!H", 16)
        + s8("store-a")
        + struct.pack("!I", 3)
        + tail(CTX, 0, 1, 0)
        + bytes(4),
    ),
]
for _cls, _id in ((ContextNameInfo, 17), (ContextNameEnd, 18)):
    MESSAGE_CASES.append(
        (
            Batch(
                [
                    _cls(
                        "store-a",
                        "10.0.0.7",
                        14567,
                        domain_id=3,
                        origin_context_instance=CTX2,
                        context_instance=CTX,
                        context_type=2,
                        version=8,
                        version_flags=9,
                    )
                ]
            ),
            struct.pack("!H", _id)
            + s8("store-a")
            + struct.pack("!I4sH", 3, bytes([10, 0, 0, 7]), 14567)
            + CTX2
            + tail(CTX, 2, 8, 9)
            + bytes(4),
        )
    )
MESSAGE_CASES.append(
    (
        Batch([ReceiverInfo("a"), DomainInfo(1), SourceDelete(OTID, "b")]),
        struct.pack("!H", 6)
        + s8("a")
        + bytes(4 + 8 + 1 + 12)
        + struct.pack("!HI", 15, 1)
        + bytes(8)
        + bytes([1])
        + bytes(12)
        + struct.pack("!H", 5)
        + OTID
        + s8("b"),
    )
)


@pytest.mark.parametrize(
    ("message", "wire"),
    MESSAGE_CASES,
    ids=[
        type(m).__name__
        if not isinstance(m, Batch)
        else type(m.records[0]).__name__ + str(len(m.records))
        for m, _ in MESSAGE_CASES
    ],
)
def test_message_exact_bytes_both_ways(message: srs.SRSMessage, wire: bytes) -> None:
    assert encode_message(message) == wire
    assert decode_message(wire) == message


def test_every_batch_record_type_has_an_exact_bytes_case() -> None:
    covered = {type(r) for m, _ in MESSAGE_CASES if isinstance(m, Batch) for r in m.records}
    from umcore.wire.srs_messages import BATCH_RECORD_TYPES

    assert covered == set(BATCH_RECORD_TYPES.values())


def test_ser_is_sir_with_cost_minus_one() -> None:
    sir = SourceInfo(OTID, "T", "S")
    assert not sir.is_end
    ser = SourceInfo(OTID, "T", "S", cost=SER_COST)
    assert ser.is_end
    assert encode_message(Batch([ser]))[-4:] == b"\xff\xff\xff\xff"


# Verified hex of wire-lbmr-transports-srs.md section 9 (decoded by tshark 4.0.17).
VERIFIED_FRAMES = [
    (Setup(30000, 90000), "000014 00000000 0400 0001 0000 00007530 00015f90 00 00"),
    (
        RequestResponse(
            1,
            RegistrationRequest(
                "10.0.0.9",
                40000,
                0x1234,
                host_id=0x0A000009,
                protocol_version=1,
                interest_mode=1,
                local_domain_id=5,
            ),
        ),
        "00001d 00000001 1000 0001 00 0a000009 9c40 00001234 0a000009 01 01 00000005",
    ),
    (
        Payload(
            1,
            RegistrationResponse(0x0102030405060708, local_domain_id=5, protocol_version=1),
            complete=True,
        ),
        "000015 00000001 2860 0002 0102030405060708 00000005 01",
    ),
    (RequestStream(3, StreamRequest()), "00000d 00000003 1800 7fffffff 0003 00"),
]

FRAME_CASES = [
    (
        Setup(
            5000,
            60000,
            major=1,
            minor=2,
            metadata_mime="a/b",
            data_mime="c",
            resume_token=b"tok",
            lease=True,
            metadata=b"md",
            data=b"dd",
        ),
        frame(
            0,
            1,
            0x100 | 0x80 | 0x40,
            struct.pack("!HHIIH", 1, 2, 5000, 60000, 3)
            + b"tok"
            + b"\x03a/b"
            + b"\x01c"
            + b"\x00\x00\x02md"
            + b"dd",
        ),
    ),
    (Keepalive(True, 5), frame(0, 3, 0x80, struct.pack("!Q", 5))),
    (Keepalive(False, 2**40, b"x"), frame(0, 3, 0, struct.pack("!Q", 2**40) + b"x")),
    (
        RequestFnf(5, Batch([DomainInfo(1)]), metadata=b"m"),
        frame(5, 5, 0x100, b"\x00\x00\x01m" + encode_message(Batch([DomainInfo(1)]))),
    ),
    (RequestStream(7, None, 10), frame(7, 6, 0, struct.pack("!I", 10))),
    (RequestN(3, 99), frame(3, 8, 0, struct.pack("!I", 99))),
    (Cancel(3), frame(3, 9, 0, b"")),
    (Payload(3, None, complete=True, next=False), frame(3, 10, 0x40, b"")),
    (
        Payload(3, Batch([ReceiverInfo("x")])),
        frame(3, 10, 0x20, encode_message(Batch([ReceiverInfo("x")]))),
    ),
    (
        Error(0, srs.ERROR_CONNECTION_CLOSE, "bye"),
        frame(0, 11, 0, struct.pack("!I", 0x102) + b"bye"),
    ),
    (OtherFrame(srs.METADATA_PUSH, 0, 0x100, b"meta"), frame(0, 12, 0x100, b"meta")),
    (
        OtherFrame(srs.REQUEST_CHANNEL, 9, 0, b"\x00\x00\x00\x01"),
        frame(9, 7, 0, b"\x00\x00\x00\x01"),
    ),
]


@pytest.mark.parametrize(("frm", "hexstr"), VERIFIED_FRAMES)
def test_verified_frames(frm: srs.Frame, hexstr: str) -> None:
    wire = bytes.fromhex(hexstr.replace(" ", ""))
    assert srs.encode(frm) == wire
    assert srs.decode(wire) == frm


@pytest.mark.parametrize(
    ("frm", "wire"), FRAME_CASES, ids=[type(f).__name__ for f, _ in FRAME_CASES]
)
def test_frame_exact_bytes_both_ways(frm: srs.Frame, wire: bytes) -> None:
    assert srs.encode(frm) == wire
    assert srs.decode(wire) == frm


@pytest.mark.parametrize(
    ("wire", "why"),
    [
        (b"\x00\x00", "short prefix"),
        (b"\x00\x00\x05" + bytes(5), "short frame"),
        (b"\x00\x00\x07" + bytes(6), "length mismatch"),
        ((srs.MAX_FRAME_SIZE + 1).to_bytes(3, "big"), "too big"),
        (frame(1, 1, 0, bytes(14)), "setup on stream 1"),
        (frame(0, 10, 0x20, b""), "payload on stream 0"),
        (frame(0, 1, 0, bytes(11)), "short setup"),
        (frame(0, 1, 0, bytes(12) + b"\x05ab"), "short mime"),
        (frame(0, 1, 0x80, bytes(12) + b"\x00\x09"), "short token"),
        (frame(0, 1, 0, bytes(12) + b"\x01\xff\x00"), "non-ascii mime"),
        (frame(0, 3, 0, bytes(7)), "short keepalive"),
        (frame(1, 4, 0x100, b"\x00\x00\x09ab"), "short metadata"),
        (frame(1, 4, 0x100, b"\x00\x00"), "short metadata length"),
        (frame(1, 4, 0x80, encode_message(StreamRequest())), "fragment"),
        (frame(1, 6, 0, b"\x00\x00"), "short request_n"),
        (frame(1, 8, 0, b"\x00\x00\x00\x01\x00"), "request_n body"),
        (frame(1, 9, 0, b"x"), "cancel body"),
        (frame(1, 11, 0, b"\x00\x00"), "short error"),
        (frame(1, 11, 0, b"\x00\x00\x00\x01\xff"), "error text"),
        (frame(1, 0x10, 0, b""), "unknown type"),
        (frame(1, 10, 0x20, b"\x00"), "message id"),
        (frame(1, 10, 0x20, b"\x00\x63"), "unknown message id"),
        (frame(1, 10, 0x20, struct.pack("!HB", 3, 0) + b"x"), "stream request length"),
        (frame(1, 10, 0x20, struct.pack("!H", 1) + bytes(20)), "registration length"),
        (frame(1, 10, 0x20, struct.pack("!H", 6) + s8("t")), "truncated record"),
        (frame(1, 10, 0x20, struct.pack("!H", 6) + b"\x05ab"), "truncated string"),
        (frame(1, 10, 0x20, struct.pack("!H", 6) + b"\x03\xff\xfe\x00" + bytes(25)), "utf-8"),
        (frame(1, 10, 0x20, struct.pack("!H", 6) + b"\x03a\x00b" + bytes(25)), "nul inside"),
        (frame(1, 10, 0x20, encode_message(Batch([DomainInfo(1)])) + b"\x00"), "trailing byte"),
        (
            frame(1, 10, 0x20, encode_message(Batch([DomainInfo(1)])) + struct.pack("!H", 2)),
            "session id in batch",
        ),
        (frame(1, 10, 0x20, struct.pack("!HH", 13, 5) + bytes(8)), "truncated domains"),
        (frame(1, 10, 0x20, struct.pack("!H", 13) + b"\x00"), "truncated domain count"),
    ],
)
def test_decode_rejects(wire: bytes, why: str) -> None:
    with pytest.raises(SRSError) as info:
        srs.decode(wire)
    assert info.value.offset is None or 0 <= info.value.offset <= len(wire)


@pytest.mark.parametrize(
    "thing",
    [
        RequestResponse(0, StreamRequest()),
        RequestResponse(1 << 31, StreamRequest()),
        Keepalive(True, 1 << 64),
        Setup(-1, 0),
        Setup(1, 1, metadata_mime="é"),
        Setup(1, 1, data_mime="x" * 256),
        Payload(1, Batch([])),
        Payload(1, Batch([ReceiverInfo("a\0b")])),
        Payload(1, Batch([ReceiverInfo("x" * 255)])),
        Payload(1, Batch([SourceInfo(b"short", "t", "s")])),
        Payload(1, Batch([SourceInfo(OTID, "t", "s", request_ip="10.0.0")])),
        Payload(1, Batch([SourceInfo(OTID, "t", "s", request_ip="10.0.0.256")])),
        Payload(1, Batch([SourceInfo(OTID, "t", "s", cost=1 << 31)])),
        Payload(1, Batch([RouteInfo([1 << 32], "1.2.3.4", 1)])),
        Payload(1, RegistrationRequest("1.2.3.4", 70000, 1)),
        Payload(1, Batch([RegistrationRequest("1.2.3.4", 1, 1)])),  # type: ignore[list-item]
        Payload(1, "not a message"),  # type: ignore[arg-type]
        OtherFrame(srs.PAYLOAD, 1, 0, b""),
        OtherFrame(srs.EXT, 1, 0x400, b""),
        Payload(1, None, metadata=bytes(srs.MAX_FRAME_SIZE)),
        "not a frame",
    ],
)
def test_encode_refuses(thing: object) -> None:
    with pytest.raises(LocalProtocolError):
        srs.encode(thing)  # type: ignore[arg-type]


def test_strings_drop_one_trailing_nul_and_accept_none() -> None:
    # A peer that does not count a NUL in the length still decodes (our NUL choice is [I]).
    wire = struct.pack("!H", 6) + b"\x02ab" + bytes(4 + 8 + 1 + 12)
    assert decode_message(wire) == Batch([ReceiverInfo("ab")])


def test_repr_eq_hash() -> None:
    a, b = ReceiverInfo("t"), ReceiverEnd("t")
    assert a != b and a == ReceiverInfo("t") and hash(a) == hash(ReceiverInfo("t"))
    assert "topic='t'" in repr(a) and "context_instance=" in repr(a)
    assert ReceiverInfo("t") != ReceiverInfo("t", domain_id=1)  # fields of the base count
    assert Batch([a]) == Batch((a,)) and Batch([a]) != Batch([b]) and "Batch([" in repr(Batch([a]))
    assert Payload(1, None) != Cancel(1) and repr(Cancel(1)) == "Cancel(stream_id=1)"


def test_batch_frames_respect_the_size_limit() -> None:
    records = [ReceiverInfo(f"topic-{i:04d}") for i in range(300)]
    frames = srs.encode_batch_frames(3, records, max_frame_bytes=1000)
    assert len(frames) > 1 and all(len(f) <= 1000 for f in frames)
    decoder = SRSStreamDecoder()
    got = [r for f in decoder.feed(b"".join(frames)) for r in f.message.records]  # type: ignore[union-attr]
    assert got == records
    big = SourceInfo(OTID, "t" * 200, "s" * 200)
    assert len(srs.encode_batch_frames(3, [big], max_frame_bytes=100)) == 1
    with pytest.raises(LocalProtocolError):
        srs.encode_batch_frames(0, records)


# --------------------------------------------------------------------------------------------
# Round trips

u8 = st.integers(0, 0xFF)
u16 = st.integers(0, 0xFFFF)
u32 = st.integers(0, 0xFFFFFFFF)
u64 = st.integers(0, 2**64 - 1)
i32 = st.integers(-(2**31), 2**31 - 1)
text = st.text(st.characters(blacklist_characters="\0", blacklist_categories=("Cs",)), max_size=40)
ip = st.tuples(u8, u8, u8, u8).map(lambda t: ".".join(map(str, t)))
ctx = st.binary(min_size=8, max_size=8)
otid = st.binary(min_size=32, max_size=32)
common = {"context_instance": ctx, "context_type": u8, "version": u32, "version_flags": u32}

batch_records = st.one_of(
    st.builds(
        SourceInfo,
        otid,
        text,
        text,
        host_id=u32,
        topic_idx=u32,
        functionality_flags=u32,
        request_ip=ip,
        request_port=u16,
        domain_id=u32,
        encryption=u8,
        compression=u8,
        ulb_src_id=u32,
        ulb_queue_id=u32,
        ulb_reg_id=u64,
        ttl=u16,
        cost=i32,
        **common,
    ),
    st.builds(SourceDelete, otid, text),
    *(
        st.builds(cls, text, domain_id=u32, **common)
        for cls in (
            ReceiverInfo,
            ReceiverDelete,
            ReceiverEnd,
            WildcardReceiverInfo,
            WildcardReceiverDelete,
            WildcardReceiverEnd,
            ContextNameQuery,
        )
    ),
    st.builds(SourceLeave, otid, text, text, **common),
    *(
        st.builds(cls, st.lists(u32, max_size=8), ip, u16, route_index=u16, **common)
        for cls in (RouteInfo, RouteEnd)
    ),
    st.builds(DomainInfo, u32, **common),
    *(
        st.builds(cls, text, ip, u16, domain_id=u32, origin_context_instance=ctx, **common)
        for cls in (ContextNameInfo, ContextNameEnd)
    ),
)
messages = st.one_of(
    st.builds(
        RegistrationRequest,
        ip,
        u16,
        u32,
        app_type=u8,
        host_id=u32,
        protocol_version=u8,
        interest_mode=u8,
        local_domain_id=u32,
    ),
    st.builds(RegistrationResponse, u64, local_domain_id=u32, protocol_version=u8),
    st.just(StreamRequest()),
    st.builds(Batch, st.lists(batch_records, min_size=1, max_size=6)),
)
stream_ids = st.integers(1, srs.MAX_STREAM_ID)
metadata = st.none() | st.binary(max_size=16)
frames = st.one_of(
    st.builds(
        Setup,
        u32,
        u32,
        major=u16,
        minor=u16,
        metadata_mime=st.text(st.characters(max_codepoint=127), max_size=20),
        data_mime=st.text(st.characters(max_codepoint=127), max_size=20),
        resume_token=st.none() | st.binary(max_size=16),
        lease=st.booleans(),
        metadata=metadata,
        data=st.binary(max_size=16),
    ),
    st.builds(Keepalive, st.booleans(), u64, st.binary(max_size=16)),
    st.builds(RequestResponse, stream_ids, st.none() | messages, metadata),
    st.builds(RequestFnf, stream_ids, st.none() | messages, metadata),
    st.builds(RequestStream, stream_ids, st.none() | messages, u32, metadata),
    st.builds(RequestN, stream_ids, u32),
    st.builds(Cancel, stream_ids),
    st.builds(
        Payload,
        stream_ids,
        st.none() | messages,
        complete=st.booleans(),
        next=st.booleans(),
        metadata=metadata,
    ),
    st.builds(Error, st.integers(0, srs.MAX_STREAM_ID), u32, text),
    st.builds(
        OtherFrame, st.just(srs.EXT), stream_ids, st.integers(0, 0x3FF), st.binary(max_size=16)
    ),
)


@settings(max_examples=200, deadline=None)
@given(messages)
def test_message_round_trip(message: srs.SRSMessage) -> None:
    assert decode_message(encode_message(message)) == message


@settings(max_examples=200, deadline=None)
@given(frames)
def test_frame_round_trip(frm: srs.Frame) -> None:
    wire = srs.encode(frm)
    assert srs.decode(wire) == frm
    assert SRSStreamDecoder().feed(wire) == [frm]


@settings(max_examples=50, deadline=None)
@given(st.lists(frames, min_size=1, max_size=8), st.randoms(use_true_random=False))
def test_stream_decoder_any_split_equals_all_at_once(
    frame_list: list[srs.Frame], rnd: random.Random
) -> None:
    wire = b"".join(srs.encode(f) for f in frame_list)
    assert SRSStreamDecoder().feed(wire) == frame_list
    decoder = SRSStreamDecoder()
    got: list[srs.Frame] = []
    pos = 0
    while pos < len(wire):
        step = rnd.randint(1, 9)
        got += decoder.feed(memoryview(wire)[pos : pos + step])
        pos += step
    assert got == frame_list and decoder.buffered == 0


# --------------------------------------------------------------------------------------------
# Stream decoder


def _conversation() -> bytes:
    return b"".join(
        srs.encode(f)
        for f in [
            Setup(30000, 90000),
            RequestResponse(1, RegistrationRequest("10.0.0.9", 40000, 1)),
            Payload(1, RegistrationResponse(1), complete=True),
            RequestStream(3, StreamRequest()),
            Payload(3, Batch([m.records[0] for m, _ in MESSAGE_CASES if isinstance(m, Batch)])),
            Keepalive(True, 0),
        ]
    )


def test_stream_byte_at_a_time_equals_all_at_once() -> None:
    wire = _conversation()
    whole = SRSStreamDecoder().feed(wire)
    assert len(whole) == 6
    decoder = SRSStreamDecoder()
    one_by_one = [f for i in range(len(wire)) for f in decoder.feed(wire[i : i + 1])]
    assert one_by_one == whole


def test_stream_keeps_trailing_bytes() -> None:
    wire = _conversation()
    decoder = SRSStreamDecoder()
    first = decoder.feed(wire + wire[:10])
    assert len(first) == 6 and decoder.buffered == 10
    assert decoder.feed(wire[10:]) == first and decoder.buffered == 0
    assert decoder.feed(b"") == []


def test_stream_refuses_oversized_frame_from_its_length_prefix() -> None:
    decoder = SRSStreamDecoder(max_frame_size=100)
    ok = srs.encode(RequestN(1, 1))
    assert decoder.feed(ok + b"\x00") == [RequestN(1, 1)]  # the bad frame is not yet visible
    with pytest.raises(SRSError):
        decoder.feed(b"\x00\x65")  # length 101 > 100: refused before any body arrives
    assert decoder.buffered < 3 + 100
    with pytest.raises(SRSError):  # the stream is desynchronised for good
        decoder.feed(ok)


def test_stream_default_bound_is_max_frame_size() -> None:
    decoder = SRSStreamDecoder()
    assert decoder.max_frame_size == srs.MAX_FRAME_SIZE
    big = Payload(1, None, metadata=bytes(srs.MAX_FRAME_SIZE - 6 - 3))
    wire = srs.encode(big)
    assert len(wire) == 3 + srs.MAX_FRAME_SIZE
    assert decoder.feed(wire) == [big]
    with pytest.raises(SRSError):
        SRSStreamDecoder().feed((srs.MAX_FRAME_SIZE + 1).to_bytes(3, "big"))


def test_stream_bad_frame_fails_the_stream() -> None:
    decoder = SRSStreamDecoder()
    with pytest.raises(SRSError):
        decoder.feed(frame(1, 10, 0x20, b"\x00\x63"))
    with pytest.raises(SRSError):
        decoder.feed(b"")


# --------------------------------------------------------------------------------------------
# Fuzz: only SRSError escapes

SEED_FRAMES = (
    [w for _f, w in FRAME_CASES]
    + [bytes.fromhex(h.replace(" ", "")) for _f, h in VERIFIED_FRAMES]
    + [frame(3, 10, 0x20, w) for _m, w in MESSAGE_CASES]
)


def test_fuzz_frames_and_messages() -> None:
    rng = random.Random(99)

    def message_after_frame_head(wire: bytes) -> object:
        return decode_message(wire[9:])

    decoders = (srs.decode, message_after_frame_head)
    ok = fuzz_decoders(
        rng, SEED_FRAMES, decoders, SRSError, rounds=4000, random_every=4, random_max=60
    )
    assert ok > 300


def test_fuzz_stream_decoder_no_hang_and_only_srs_error() -> None:
    rng = random.Random(7)
    for _ in range(300):
        wire = b"".join(mutate(rng, rng.choice(SEED_FRAMES)) for _ in range(rng.randint(1, 4)))
        decoder = SRSStreamDecoder(max_frame_size=4096)
        pos = 0
        try:
            while pos < len(wire):
                step = rng.randint(1, 64)
                decoder.feed(wire[pos : pos + step])
                pos += step
                assert decoder.buffered < 3 + 4096 + 64
        except SRSError:
            pass
