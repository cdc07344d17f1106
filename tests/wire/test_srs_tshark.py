"""SRS over RSocket against tshark 4.0.17 (``-d tcp.port==N,lbmsrs``, trap 15).

tshark 4.0.17 knows message ids 1-12; the protocol-v3 records (ids 13-18: RTIR, RTER, DIR,
CNQR, CNIR, CNER) are covered by exact bytes and round trips in test_srs.py only.  The
registration response uses local domain id 0 because 4.0.17 displays that message with swapped
field sizes (seed-srs-lbmrd.md trap 12)."""

from __future__ import annotations

import random
import string

import pytest

from tests.oracle import Decoded, Tshark
from tests.wire.helpers import num
from umcore.wire import srs
from umcore.wire.pcap import TcpFlow
from umcore.wire.srs import (
    Cancel,
    Error,
    Keepalive,
    Payload,
    RequestFnf,
    RequestN,
    RequestResponse,
    RequestStream,
    Setup,
)
from umcore.wire.srs_messages import (
    Batch,
    BatchRecord,
    ReceiverDelete,
    ReceiverEnd,
    ReceiverInfo,
    RegistrationRequest,
    RegistrationResponse,
    SourceDelete,
    SourceInfo,
    SourceLeave,
    StreamRequest,
    WildcardReceiverDelete,
    WildcardReceiverEnd,
    WildcardReceiverInfo,
)

pytestmark = pytest.mark.tshark

CLIENT = ("10.0.0.9", 40000)
SERVER = ("10.0.0.20", 12601)
DECODE_AS = [f"tcp.port=={SERVER[1]},lbmsrs"]

PREFIX = {
    SourceInfo: "sir",
    SourceDelete: "sdr",
    ReceiverInfo: "rir",
    ReceiverDelete: "rdr",
    ReceiverEnd: "rer",
    WildcardReceiverInfo: "wir",
    WildcardReceiverDelete: "wdr",
    WildcardReceiverEnd: "wer",
    SourceLeave: "sli",
}


INTEREST = (
    ReceiverInfo,
    ReceiverDelete,
    ReceiverEnd,
    WildcardReceiverInfo,
    WildcardReceiverDelete,
    WildcardReceiverEnd,
)


def colon_hex(raw: bytes) -> str:
    return ":".join(f"{b:02x}" for b in raw)


def record_fields(rec: BatchRecord) -> dict[str, object]:
    """tshark field -> the value we encoded, for one batch record (strings as shown by tshark,
    i.e. without our terminating NUL; lengths count it)."""
    p = "lbmsrs." + PREFIX[type(rec)]
    out: dict[str, object] = {}
    if isinstance(rec, (SourceInfo, SourceDelete, SourceLeave)):
        out[f"{p}.otid"] = colon_hex(rec.otid)
        out[f"{p}.topic"] = rec.topic
        out[f"{p}.topic_len"] = len(rec.topic.encode()) + 1
    if isinstance(rec, (SourceInfo, SourceLeave)):
        out[f"{p}.source"] = rec.source
        out[f"{p}.source_len"] = len(rec.source.encode()) + 1
    if isinstance(rec, (ReceiverInfo, ReceiverDelete, ReceiverEnd)):
        out[f"{p}.topic"] = rec.topic
        out[f"{p}.topic_len"] = len(rec.topic.encode()) + 1
    if isinstance(rec, (WildcardReceiverInfo, WildcardReceiverDelete, WildcardReceiverEnd)):
        out[f"{p}.pattern"] = rec.pattern
        out[f"{p}.pattern_len"] = len(rec.pattern.encode()) + 1
    if isinstance(rec, SourceInfo):
        for name in (
            "host_id",
            "topic_idx",
            "functionality_flags",
            "request_port",
            "domain_id",
            "encryption",
            "compression",
            "ulb_src_id",
            "ulb_queue_id",
            "ulb_reg_id",
            "ttl",
            "cost",
        ):
            out[f"{p}.{name}"] = getattr(rec, name)
        out[f"{p}.request_ip"] = rec.request_ip
    if not isinstance(rec, SourceDelete):
        out[f"{p}.context_instance"] = colon_hex(rec.context_instance)
        out[f"{p}.context_type"] = rec.context_type
        out[f"{p}.version"] = rec.version
        out[f"{p}.version_flags"] = rec.version_flags
    if isinstance(rec, INTEREST):
        out[f"{p}.domain_id"] = rec.domain_id
    return out


def check_batch(decoded: Decoded, frame: int, records: list[BatchRecord]) -> None:
    # tshark's JSON (--no-duplicate-keys) groups same-named records, so the order across record
    # types is lost; within one type (one field list) it is kept.
    ids = sorted(num(v) for v in decoded.values("lbmsrs.message_id", frame))
    assert ids == sorted(r.MSG_ID for r in records), (frame, ids)
    expected: dict[str, list[object]] = {}
    for rec in records:
        for field, value in record_fields(rec).items():
            expected.setdefault(field, []).append(value)
    for field, want in expected.items():
        got = decoded.values(field, frame)
        if want and isinstance(want[0], int):
            assert [num(v) for v in got] == want, (frame, field, got, want)
        else:
            assert got == want, (frame, field, got, want)


def test_verified_conversation_and_every_record_type(tshark: Tshark) -> None:
    otid = bytes(range(32))
    ctx = bytes(range(1, 9))
    records: list[BatchRecord] = [
        SourceInfo(
            otid,
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
            ulb_reg_id=5,
            context_instance=ctx,
            context_type=1,
            version=0x00060F00,
            version_flags=1,
            ttl=60,
        ),
        SourceInfo(otid, "ORDERS.NYSE", "TCP:10.0.0.5:14371:11223344", cost=-1),  # SER
        SourceDelete(otid, "ORDERS.NYSE"),
        ReceiverInfo("QUOTES", domain_id=3, context_instance=ctx, version=2, version_flags=1),
        ReceiverDelete("QUOTES", domain_id=3),
        ReceiverEnd("QUOTES"),
        WildcardReceiverInfo("^ORD.*", context_type=2),
        WildcardReceiverDelete("^ORD.*"),
        WildcardReceiverEnd("^ORD.*"),
        SourceLeave(otid, "ORDERS.NYSE", "LBTRM:10.0.0.5:14390:0a0b0c0d:224.10.10.10:14400"),
    ]
    request = RegistrationRequest(
        "10.0.0.9", 40000, 0x7FB77CF8, host_id=0x0A000009, interest_mode=3, local_domain_id=0
    )
    response = RegistrationResponse(5, local_domain_id=0, protocol_version=3)
    flow = TcpFlow(CLIENT, SERVER)
    frames = [
        flow.segment(
            True, srs.encode(Setup(30000, 90000)) + srs.encode(RequestResponse(1, request))
        ),
        flow.segment(False, srs.encode(Payload(1, response, complete=True))),
        flow.segment(True, srs.encode(RequestStream(3, StreamRequest()))),
        flow.segment(False, srs.encode(Payload(3, Batch(records)))),
        flow.segment(True, srs.encode(Keepalive(True, 7))),
        # Only the first frame of a segment is sanity-checked (wire note 8.4): frames without an
        # SRS message ride behind one that has one.
        flow.segment(
            True,
            srs.encode(RequestFnf(5, Batch(records[3:4]), metadata=b"md"))
            + srs.encode(RequestN(3, 16))
            + srs.encode(Cancel(3))
            + srs.encode(Error(3, srs.ERROR_APPLICATION_ERROR)),
        ),
    ]
    decoded = tshark.decode(frames, decode_as=DECODE_AS)
    decoded.assert_clean()
    for i in range(len(frames)):
        assert "lbmsrs" in decoded.protocols(i), (i, decoded.protocols(i))

    # Frame 0: SETUP then the registration request.
    assert decoded.values("lbmsrs.rsocket.frame_type", 0) == ["1", "4"]
    assert decoded.values("lbmsrs.rsocket.stream_id", 0) == ["0", "1"]
    assert decoded.value("lbmsrs.rsocket.keepalive.interval", 0) == "30000"
    assert decoded.value("lbmsrs.rsocket.max_lifetime", 0) == "90000"
    assert decoded.value("lbmsrs.rsocket.version.major", 0) == "1"
    reg = "lbmsrs.registration_request."
    for name in ("app_type", "client_port", "session_id", "host_id", "protocol_version"):
        assert num(decoded.value(reg + name, 0)) == getattr(request, name), name
    assert num(decoded.value(reg + "interest_mode", 0)) == 3
    assert num(decoded.value(reg + "local_domain_id", 0)) == 0
    assert decoded.value(reg + "client_addr", 0) == "10.0.0.9"

    # Frame 1: registration response in a PAYLOAD Complete|Next.
    assert decoded.value("lbmsrs.rsocket.flags.complete", 1) == "1"
    assert decoded.value("lbmsrs.rsocket.flags.next", 1) == "1"
    assert num(decoded.value("lbmsrs.registration_response.client_id", 1)) == 5
    assert num(decoded.value("lbmsrs.registration_response.local_domain_id", 1)) == 0
    assert num(decoded.value("lbmsrs.registration_response.protocol_version", 1)) == 3

    # Frame 2: stream request.
    assert decoded.value("lbmsrs.rsocket.request_n", 2) == str(srs.DEFAULT_REQUEST_N)
    assert decoded.value("lbmsrs.stream_req.unused", 2) == "0"

    # Frame 3: one batch with every record type tshark 4.0.17 knows.
    check_batch(decoded, 3, records)
    assert decoded.values("lbmsrs.sir.cost", 3) == ["0", "-1"]

    # Frame 4: keepalive.
    assert decoded.value("lbmsrs.rsocket.flags.respond", 4) == "1"
    assert decoded.value("lbmsrs.rsocket.keepalive_last_received_position", 4) == "7"

    # Frame 5: FNF with metadata, REQUEST_N, CANCEL, ERROR.
    assert decoded.values("lbmsrs.rsocket.frame_type", 5) == ["5", "8", "9", "11"]
    assert decoded.value("lbmsrs.rsocket.metadata", 5) == "md"
    check_batch(decoded, 5, records[3:4])
    assert decoded.value("lbmsrs.rsocket.request_n", 5) == "16"
    assert num(decoded.value("lbmsrs.rsocket.error_code", 5)) == srs.ERROR_APPLICATION_ERROR


def test_random_batches_match_tshark(tshark: Tshark) -> None:
    rng = random.Random(5)
    alphabet = string.ascii_letters + string.digits + "._-*^$"

    def name() -> str:
        return "".join(rng.choice(alphabet) for _ in range(rng.randint(1, 60)))

    def u32() -> int:
        return rng.getrandbits(32)

    def tail() -> dict[str, object]:
        return {
            "context_instance": rng.randbytes(8),
            "context_type": rng.randrange(3),
            "version": u32(),
            "version_flags": u32(),
        }

    def record() -> BatchRecord:
        cls = rng.choice(list(PREFIX))
        if cls is SourceInfo:
            return SourceInfo(
                rng.randbytes(32),
                name(),
                name(),
                host_id=u32(),
                topic_idx=u32(),
                functionality_flags=u32(),
                request_ip=".".join(str(rng.randrange(256)) for _ in range(4)),
                request_port=rng.randrange(65536),
                domain_id=u32(),
                encryption=rng.randrange(256),
                compression=rng.randrange(256),
                ulb_src_id=u32(),
                ulb_queue_id=u32(),
                ulb_reg_id=rng.getrandbits(64),
                ttl=rng.randrange(65536),
                cost=rng.randrange(-(2**31), 2**31),
                **tail(),  # type: ignore[arg-type]
            )
        if cls is SourceDelete:
            return SourceDelete(rng.randbytes(32), name())
        if cls is SourceLeave:
            return SourceLeave(rng.randbytes(32), name(), name(), **tail())  # type: ignore[arg-type]
        return cls(name(), domain_id=u32(), **tail())  # type: ignore[call-arg, arg-type]

    flow = TcpFlow(CLIENT, SERVER)
    batches = [[record() for _ in range(rng.randint(1, 8))] for _ in range(20)]
    frames = [flow.segment(False, srs.encode(Payload(3, Batch(b)))) for b in batches]
    decoded = tshark.decode(frames, decode_as=DECODE_AS)
    decoded.assert_clean()
    for i, batch in enumerate(batches):
        check_batch(decoded, i, batch)
