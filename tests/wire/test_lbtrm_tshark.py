"""LBT-RM against tshark 4.0.17: what we encode decodes cleanly with the values we meant."""

from __future__ import annotations

import random
import struct

import pytest

from tests.oracle import Decoded, Tshark
from tests.wire import helpers
from tests.wire.helpers import lbmc_data, lbmr_tir, num
from umcore.wire import lbtrm
from umcore.wire.lbtrm import LBTRMData, LBTRMNak, LBTRMNcf, LBTRMOption, LBTRMSessionMessage
from umcore.wire.pcap import udp_frame

pytestmark = pytest.mark.tshark

SRC = "10.0.0.5"  # the source host
RCV = "10.0.0.9"  # a receiver host
GROUP = "224.10.10.10"  # default lbtrm.mc_address_low
DPORT = 14400  # default lbtrm.dport_low
NAK_PORT = 14390  # default lbtrm.sport_low: the source's unicast port
SID = 0x0A0B0C0D
NAK_WARN = ["lbtrm.analysis.nak"]  # every NAK is a Warn (Sequence) by design


def tir_lbtrm(topic: str, idx: int) -> bytes:
    """An LBMR TIR advertising our LBT-RM transport (wire note 3.3/3.4, built by hand)."""
    transport = bytes([10, 0, 0, 5, 224, 10, 10, 10]) + struct.pack("!IHH", SID, DPORT, NAK_PORT)
    return lbmr_tir(topic, idx, 0x10, transport)


def src_frame(record: lbtrm.LBTRMRecord, dport: int = DPORT) -> bytes:
    return udp_frame(SRC, 30000, GROUP, dport, lbtrm.encode(record))


def nak_frame(record: lbtrm.LBTRMRecord, dport: int = NAK_PORT) -> bytes:
    return udp_frame(RCV, 30001, SRC, dport, lbtrm.encode(record))


def expected_fields(record: lbtrm.LBTRMRecord) -> dict[str, object]:
    """tshark field name -> the value we encoded (lists for repeated fields)."""
    out: dict[str, object] = {
        "lbtrm.hdr.ucast_port": record.ucast_port,
        "lbtrm.hdr.session_id": record.session_id,
        "lbtrm.hdr.next_hdr": record.options[0].kind if record.options else 0,
    }
    if isinstance(record, LBTRMData):
        out |= {
            "lbtrm.hdr.type": 0,
            "lbtrm.data.sqn": record.sqn,
            "lbtrm.data.trail_sqn": record.trail_sqn,
            "lbtrm.data.flags_fec_type": record.flags_fec_type,
            "lbtrm.data.flags_tgsz": record.flags_tgsz,
            "lbtrm.data.fec_symbol": record.fec_symbol,
        }
    elif isinstance(record, LBTRMSessionMessage):
        out |= {
            "lbtrm.hdr.type": 2,
            "lbtrm.sm.sm_sqn": record.sm_sqn,
            "lbtrm.sm.lead_sqn": record.lead_sqn,
            "lbtrm.sm.trail_sqn": record.trail_sqn,
            "lbtrm.sm.flags_fec_type": record.flags_fec_type,
            "lbtrm.sm.flags_tgsz": record.flags_tgsz,
        }
    elif isinstance(record, LBTRMNak):
        out |= {
            "lbtrm.hdr.type": 3,
            "lbtrm.nak.num_naks": len(record.sqns),
            "lbtrm.nak.format": record.format,
            "lbtrm.nak.list.nak": list(record.sqns),
        }
    else:
        out |= {
            "lbtrm.hdr.type": 4,
            "lbtrm.ncf.trail_sqn": record.trail_sqn,
            "lbtrm.ncf.num_ncfs": len(record.sqns),
            "lbtrm.ncf.reason": record.reason,
            "lbtrm.ncf.format": record.format,
            "lbtrm.ncf.list.ncf": list(record.sqns),
        }
    return out


def check_fields(decoded: Decoded, frame: int, record: lbtrm.LBTRMRecord) -> None:
    helpers.check_fields(decoded, frame, "lbtrm", expected_fields(record))


def test_session_decodes_with_topic_correlation(tshark: Tshark) -> None:
    records: list[lbtrm.LBTRMRecord] = [
        LBTRMData(SID, NAK_PORT, 10, 5, lbmc_data(9, 0, b"hello"), flags_fec_type=0x80),
        LBTRMSessionMessage(SID, NAK_PORT, 1, 10, 5, flags_fec_type=0x80, flags_tgsz=0),
        LBTRMNak(SID, NAK_PORT, [8, 9]),
        LBTRMNcf(SID, NAK_PORT, 5, [8], lbtrm.NCF_REASON_RX_DELAY),
        LBTRMData(
            SID, NAK_PORT, 9, 5, lbmc_data(9, 1, b"again"), flags_fec_type=lbtrm.DATA_FLAG_RX
        ),
    ]
    frames = [udp_frame(SRC, 12965, "224.9.10.11", 12965, tir_lbtrm("TRADES", 9))]
    for rec in records:
        frames.append(nak_frame(rec) if isinstance(rec, LBTRMNak) else src_frame(rec))
    # Hot-path encoder output must decode identically.
    frames.append(
        udp_frame(
            SRC, 30000, GROUP, DPORT, lbtrm.encode_data(SID, NAK_PORT, 11, 5, lbmc_data(9, 2, b"x"))
        )
    )
    decoded = tshark.decode(frames)
    decoded.assert_clean(allow_warn=NAK_WARN)
    for i, rec in enumerate(records, start=1):
        check_fields(decoded, i, rec)
    assert decoded.values("lbmc.topic", 1) == ["TRADES"]  # header ucast_port/sid tie to the TIR
    assert decoded.values("lbmc.topic", 5) == ["TRADES"]
    assert decoded.value("lbtrm.data.flags_fec_type.rx", 5) == "1"
    assert decoded.values("lbmc.topic", 6) == ["TRADES"]
    assert num(decoded.value("lbtrm.data.sqn", 6)) == 11
    assert decoded.values("lbmc.sqn", 6) == ["2"]


def test_option_headers_via_decode_as(tshark: Tshark) -> None:
    # The heuristic rejects next_hdr != 0 (trap 11), so decode by port.
    port = 20003
    opts = [LBTRMOption(5, b"abcd"), LBTRMOption(7)]
    records: list[lbtrm.LBTRMRecord] = [
        LBTRMData(SID, NAK_PORT, 1, 0, lbmc_data(3, 0, b"after-options"), options=opts),
        LBTRMSessionMessage(SID, NAK_PORT, 2, 1, 0, options=opts[:1]),
        LBTRMNcf(SID, NAK_PORT, 0, [1, 2, 3], lbtrm.NCF_REASON_SHED, options=opts[1:]),
    ]
    frames = [src_frame(rec, port) for rec in records]
    decoded = tshark.decode(frames, decode_as=[f"udp.port=={port},lbtrm"])
    decoded.assert_clean(allow_warn=NAK_WARN)
    for i, rec in enumerate(records):
        check_fields(decoded, i, rec)
    # The LBMC payload is found after the skipped option headers.
    assert decoded.values("lbmc.msglen", 0) == [str(12 + len(b"after-options"))]
    assert decoded.values("lbmc.tidx", 0) == ["3"]


def test_random_records_match_tshark(tshark: Tshark) -> None:
    rng = random.Random(2024)
    records: list[lbtrm.LBTRMRecord] = []
    for i in range(60):
        sid, port = rng.getrandbits(32), rng.randrange(1, 65536)
        kind = i % 4
        if kind == 0:
            body = lbmc_data(
                rng.getrandbits(32), rng.getrandbits(32), rng.randbytes(rng.randrange(20))
            )
            records.append(
                LBTRMData(
                    sid,
                    port,
                    rng.getrandbits(32),
                    rng.getrandbits(32),
                    body,
                    flags_fec_type=rng.choice([0, 0x80, 0x20, 0xA0]),
                    flags_tgsz=rng.getrandbits(8),
                    fec_symbol=rng.getrandbits(16),
                )
            )
        elif kind == 1:
            records.append(
                LBTRMSessionMessage(
                    sid,
                    port,
                    *(rng.getrandbits(32) for _ in range(3)),
                    flags_fec_type=rng.choice([0, 0x80]),
                    flags_tgsz=rng.getrandbits(8),
                )
            )
        elif kind == 2:
            naks = [rng.getrandbits(32) for _ in range(rng.randrange(1, 30))]
            records.append(LBTRMNak(sid, port, naks, format=rng.choice([0, 1])))
        else:
            ncfs = [rng.getrandbits(32) for _ in range(rng.randrange(0, 30))]
            records.append(
                LBTRMNcf(
                    sid,
                    port,
                    rng.getrandbits(32),
                    ncfs,
                    rng.randrange(4),
                    format=rng.choice([0, 1]),
                )
            )
    frames = [nak_frame(r) if isinstance(r, LBTRMNak) else src_frame(r) for r in records]
    decoded = tshark.decode(frames)
    decoded.assert_clean(allow_warn=NAK_WARN)
    for i, rec in enumerate(records):
        check_fields(decoded, i, rec)
