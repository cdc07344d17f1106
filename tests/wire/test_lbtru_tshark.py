"""LBT-RU against tshark 4.0.17: what we encode decodes cleanly with the values we meant."""

from __future__ import annotations

import random
import struct

import pytest

from tests.oracle import Decoded, Tshark
from tests.wire import helpers
from tests.wire.helpers import lbmc_data, lbmr_tir
from umcore.wire import lbtru
from umcore.wire.lbtru import (
    LBTRUAck,
    LBTRUConnectionRequest,
    LBTRUData,
    LBTRUNak,
    LBTRUNcf,
    LBTRUReset,
    LBTRUSessionMessage,
)
from umcore.wire.pcap import udp_frame

pytestmark = pytest.mark.tshark

SRC = ("10.0.0.5", 14380)  # default lbtru.source_port_low
RCV = ("10.0.0.9", 14360)  # default lbtru.receiver_port_low
SID = 0xBEEF
NAK_WARN = ["lbtru.analysis.nak"]  # every NAK is a Warn (Sequence) by design
TO_RECEIVER = (LBTRUData, LBTRUSessionMessage, LBTRUNcf, LBTRUReset)


def tir_lbtru(topic: str, idx: int) -> bytes:
    """An LBMR TIR for our LBT-RU source with session id (wire note 3.3/3.4, built by hand)."""
    transport = bytes([10, 0, 0, 5]) + struct.pack("!IH", SID, SRC[1])
    return lbmr_tir(topic, idx, 0x01, transport)


def frame(record: lbtru.LBTRURecord) -> bytes:
    src, dst = (SRC, RCV) if isinstance(record, TO_RECEIVER) else (RCV, SRC)
    return udp_frame(src[0], src[1], dst[0], dst[1], lbtru.encode(record))


def expected_fields(record: lbtru.LBTRURecord) -> dict[str, object]:
    out: dict[str, object] = {}
    first = lbtru.OPT_SID if record.session_id is not None else 0
    if not first and record.client_id is not None:
        first = lbtru.OPT_CID
    out["lbtru.hdr.next_hdr"] = first
    out["lbtru.opt_sid.session_id"] = [] if record.session_id is None else [record.session_id]
    out["lbtru.opt_cid.client_id"] = [] if record.client_id is None else [record.client_id]
    if isinstance(record, LBTRUData):
        out |= {
            "lbtru.hdr.type": 0,
            "lbtru.hdr.flags": record.flags,
            "lbtru.data.sqn": record.sqn,
            "lbtru.data.trail": record.trail_sqn,
        }
    elif isinstance(record, LBTRUSessionMessage):
        out |= {
            "lbtru.hdr.type": 2,
            "lbtru.hdr.flags": record.flags,
            "lbtru.sm.sqn": record.sm_sqn,
            "lbtru.sm.lead": record.lead_sqn,
            "lbtru.sm.trail": record.trail_sqn,
        }
    elif isinstance(record, LBTRUNak):
        out |= {
            "lbtru.hdr.type": 3,
            "lbtru.nak.num": len(record.sqns),
            "lbtru.nak.list.nak": list(record.sqns),
        }
    elif isinstance(record, LBTRUNcf):
        out |= {
            "lbtru.hdr.type": 4,
            "lbtru.ncf.trail": record.trail_sqn,
            "lbtru.ncf.num": len(record.sqns),
            "lbtru.ncf.reason": record.reason,
            "lbtru.ncf.list.ncf": list(record.sqns),
        }
    elif isinstance(record, LBTRUAck):
        out |= {"lbtru.hdr.type": 5, "lbtru.ack.sqn": record.ack_sqn}
    elif isinstance(record, LBTRUConnectionRequest):
        out |= {"lbtru.hdr.type": 6, "lbtru.hdr.request": record.request}
    else:
        out |= {"lbtru.hdr.type": 7, "lbtru.hdr.reason": record.reason}
    return out


def check_fields(decoded: Decoded, frame_no: int, record: lbtru.LBTRURecord) -> None:
    helpers.check_fields(decoded, frame_no, "lbtru", expected_fields(record))


def test_session_decodes_with_topic_correlation(tshark: Tshark) -> None:
    records: list[lbtru.LBTRURecord] = [
        LBTRUConnectionRequest(session_id=SID, client_id=0x11),
        LBTRUSessionMessage(5, 99, 90, flags=lbtru.FLAG_SYN, session_id=SID),
        LBTRUData(100, 90, lbmc_data(3, 0, b"hello"), session_id=SID),
        LBTRUAck(100, session_id=SID),
        LBTRUNak([98, 99], session_id=SID),
        LBTRUNcf(90, [98], lbtru.NCF_REASON_RX_DELAY, session_id=SID),
        LBTRUData(99, 90, lbmc_data(3, 1, b"again"), flags=lbtru.FLAG_RX, session_id=SID),
        LBTRUSessionMessage(6, 100, 90, session_id=SID),
        LBTRUReset(),
    ]
    frames = [udp_frame(SRC[0], 12965, "224.9.10.11", 12965, tir_lbtru("QUOTES", 3))]
    frames += [frame(r) for r in records]
    hot = lbtru.encode_data(101, 90, lbmc_data(3, 2, b"hot"), session_id=SID)
    frames.append(udp_frame(SRC[0], SRC[1], RCV[0], RCV[1], hot))
    decoded = tshark.decode(frames)
    decoded.assert_clean(allow_warn=NAK_WARN)
    for i, rec in enumerate(records, start=1):
        check_fields(decoded, i, rec)
    # The SID option equals the TIR's session id and the TIR came from the source's IP, so
    # tshark shows the topic on the data (wire note section 2).
    for i in (3, 7, 10):
        assert decoded.values("lbmc.topic", i) == ["QUOTES"], i
    assert decoded.value("lbtru.hdr.flags.rx", 7) == "1"
    assert decoded.value("lbtru.hdr.flags.syn", 2) == "1"
    assert decoded.values("lbmc.sqn", 10) == ["2"]


def test_random_records_match_tshark(tshark: Tshark) -> None:
    rng = random.Random(77)

    def ids() -> dict[str, int | None]:
        return {
            "session_id": rng.choice([None, rng.getrandbits(32)]),
            "client_id": rng.choice([None, rng.getrandbits(32)]),
        }

    def u32() -> int:
        return rng.getrandbits(32)

    records: list[lbtru.LBTRURecord] = []
    for i in range(70):
        kind = i % 7
        if kind == 0:
            body = lbmc_data(u32(), u32(), rng.randbytes(rng.randrange(16)))
            records.append(LBTRUData(u32(), u32(), body, flags=rng.choice([0, 0x4000]), **ids()))
        elif kind == 1:
            records.append(
                LBTRUSessionMessage(u32(), u32(), u32(), flags=rng.choice([0, 0x8000]), **ids())
            )
        elif kind == 2:
            records.append(LBTRUNak([u32() for _ in range(rng.randrange(1, 20))], **ids()))
        elif kind == 3:
            sqns = [u32() for _ in range(rng.randrange(0, 20))]
            records.append(LBTRUNcf(u32(), sqns, rng.randrange(4), **ids()))
        elif kind == 4:
            records.append(LBTRUAck(u32(), **ids()))
        elif kind == 5:
            records.append(LBTRUConnectionRequest(0, **ids()))
        else:
            records.append(LBTRUReset(0))
    decoded = tshark.decode([frame(r) for r in records])
    decoded.assert_clean(allow_warn=NAK_WARN)
    for i, rec in enumerate(records):
        check_fields(decoded, i, rec)
