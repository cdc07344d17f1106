"""LBMR exact-bytes table: every record type, both ways.

The expected bytes are built here by hand with ``struct.pack`` from the layout tables of
shared/spec/wire-lbmr-transports-srs.md section 3 (offsets quoted beside each case), or copied
from the tshark-verified hex of section 9 — never from the encoder.
"""

from __future__ import annotations

import struct
from typing import Any

import pytest

from umcore.errors import LocalProtocolError
from umcore.wire import lbmr
from umcore.wire.lbmr import (
    PSER,
    QIR,
    QQR,
    TIR,
    TMR,
    TQR,
    ContextInfo,
    CostOption,
    CtxInstOption,
    CtxInstQueueOption,
    CtxInstStoreOption,
    DomainIdOption,
    ExFuncOption,
    LateJoinOption,
    LBMRError,
    LBMRPacket,
    LBTIPCInfo,
    LBTRDMAInfo,
    LBTRMInfo,
    LBTRUInfo,
    LBTSMXInfo,
    LocalDomainOption,
    OTIDOption,
    PSERCtxInstOption,
    QIRGroup,
    QIRQueue,
    QMgmtInstance,
    RCtxAddressOption,
    RCtxInfoRecord,
    RCtxInstanceOption,
    RCtxNameOption,
    RCtxODomainOption,
    RemoteContextInfo,
    RemoteDomainRoute,
    SrcIdOption,
    SrcTypeOption,
    TCPInfo,
    TNWGAddressOption,
    TNWGContextInfo,
    TNWGCtxInstOption,
    TNWGDomainOption,
    TNWGInterest,
    TNWGInterestRecord,
    TNWGNameOption,
    TNWGTopicResRequest,
    TopicManagement,
    TopicResRequest,
    UMEOption,
    UMEStoreGroupOption,
    UMEStoreOption,
    UMQQInfoOption,
    UMQQueueMgmt,
    UMQRcrIdxOption,
    UMQULBOption,
    UnknownExt,
    UnknownPacketOption,
    UnknownPSEROption,
    UnknownRCtxOption,
    UnknownTNWG,
    UnknownTNWGOption,
    UnknownTopicOption,
    UnknownTransportInfo,
    VersionOption,
    WildcardTQR,
    decode,
    encode,
)

CTX = bytes(range(1, 9))
CTX2 = bytes(range(0xA1, 0xA9))
OTID = bytes(range(32))
CFGSIG = bytes(range(0x40, 0x54))


def hdr(ptype: int, tqrs: int = 0, tirs: int = 0, ver: int = 0, opts: bool = False) -> bytes:
    # 3.1: u8 ver<<4 | 0x08 (options) | type, u8 tqrs, u16 tirs
    return struct.pack(">BBH", ver << 4 | (0x08 if opts else 0) | ptype, tqrs, tirs)


def ip(addr: str) -> bytes:
    return bytes(int(x) for x in addr.split("."))


def cstr(s: str) -> bytes:
    return s.encode() + b"\0"


def tir_bytes(
    topic: str, transport: int, block: bytes, idx: int, topts: bytes = b"", ttl: int = 0
) -> bytes:
    # 3.3: topic NUL, u8 transport (0x80 = options), u8 tlen, u16 ttl, u32 idx, options, block
    flag = 0x80 if topts else 0
    head = struct.pack(">BBHI", transport | flag, len(block), ttl, idx)
    if topts:
        topts = struct.pack(">BBH", 0, 4, 4 + len(topts)) + topts  # 3.5: length option first
    return cstr(topic) + head + topts + block


def one_tir(
    block: bytes, transport: int, info: Any, topts: bytes = b"", options: tuple[Any, ...] = ()
) -> tuple[LBMRPacket, bytes]:
    return (
        LBMRPacket(0, tirs=[TIR("T.1", 9, info, options)]),
        hdr(0, 0, 1) + tir_bytes("T.1", transport, block, 9, topts),
    )


def topt(opt: Any, raw: bytes) -> tuple[LBMRPacket, bytes]:
    block = ip("10.1.2.3") + struct.pack(">H", 14371)
    return one_tir(block, 0x00, TCPInfo("10.1.2.3", 14371), raw, (opt,))


def trailer(*opts: bytes) -> bytes:
    # 3.6: options, then the length record LAST, total_len counting all options and itself
    body = b"".join(opts)
    return body + struct.pack(">BBH", 0x80, 4, 4 + len(body))


def ext(ext_type: int, rest: bytes, ver: int = 0, opts: bool = False) -> bytes:
    return bytes(((ver << 4) | (0x08 if opts else 0) | 7, ext_type)) + rest


CASES: list[tuple[str, LBMRPacket, bytes]] = [
    # --- TQRs ---------------------------------------------------------------------------------
    (
        "tqr (section 9 hex)",
        LBMRPacket(0, tqrs=[TQR("ORDERS.NYSE")]),
        bytes.fromhex("00 01 00 00 4f 52 44 45 52 53 2e 4e 59 53 45 00"),
    ),
    ("two tqrs", LBMRPacket(0, tqrs=[TQR("a"), TQR("bc")]), hdr(0, 2) + b"a\0bc\0"),
    (
        "wildcard tqr (section 9 hex)",
        LBMRPacket(1, tqrs=[WildcardTQR(1, "^ORD.*")]),
        bytes.fromhex("01 01 00 00 01 5e 4f 52 44 2e 2a 00"),
    ),
    (
        "wildcard tqr regex + tir",
        LBMRPacket(1, tqrs=[WildcardTQR(2, "x")], tirs=[TIR("x", 1, LBTIPCInfo(1, 2, 3))]),
        hdr(1, 1, 1) + b"\x02x\0" + tir_bytes("x", 0x40, struct.pack(">IIH", 1, 2, 3), 1),
    ),
    # --- TIRs per transport (3.4) -----------------------------------------------------------
    (
        "tir tcp with sid (section 9 hex)",
        LBMRPacket(0, tirs=[TIR("ORDERS.NYSE", 7, TCPInfo("10.0.0.5", 14371, 0x11223344))]),
        bytes.fromhex(
            "00 00 00 01 4f 52 44 45 52 53 2e 4e 59 53 45 00 00 0a 00 00 00 00 00 07"
            " 0a 00 00 05 11 22 33 44 38 23"
        ),
    ),
    (
        "tir tcp no sid",
        LBMRPacket(0, tirs=[TIR("t", 0xFFFFFFFF, TCPInfo("192.168.1.2", 65535), ttl=300)]),
        hdr(0, 0, 1) + tir_bytes("t", 0, ip("192.168.1.2") + b"\xff\xff", 0xFFFFFFFF, ttl=300),
    ),
    (
        "tir lbt-ru with sid (section 9 hex)",
        LBMRPacket(0, tirs=[TIR("QUOTES", 3, LBTRUInfo("10.0.0.5", 14380, 0xBEEF))]),
        bytes.fromhex(
            "00 00 00 01 51 55 4f 54 45 53 00 01 0a 00 00 00 00 00 03 0a 00 00 05 00 00 be ef 38 2c"
        ),
    ),
    (
        "tir lbt-ru no sid",
        LBMRPacket(0, tirs=[TIR("q", 4, LBTRUInfo("1.2.3.4", 14381))]),
        hdr(0, 0, 1) + tir_bytes("q", 1, ip("1.2.3.4") + struct.pack(">H", 14381), 4),
    ),
    (
        "tir lbt-rm (section 9 hex)",
        LBMRPacket(
            0,
            tirs=[
                TIR("TRADES", 9, LBTRMInfo("10.0.0.5", "224.10.10.10", 0x0A0B0C0D, 14400, 14390))
            ],
        ),
        bytes.fromhex(
            "00 00 00 01 54 52 41 44 45 53 00 10 10 00 00 00 00 00 09"
            " 0a 00 00 05 e0 0a 0a 0a 0a 0b 0c 0d 38 40 38 36"
        ),
    ),
    (
        "tir lbt-ipc",
        LBMRPacket(0, tirs=[TIR("i", 2, LBTIPCInfo(0xC0A80001, 0xDEADBEEF, 20001))]),
        hdr(0, 0, 1) + tir_bytes("i", 0x40, struct.pack(">IIH", 0xC0A80001, 0xDEADBEEF, 20001), 2),
    ),
    (
        "tir lbt-smx",
        LBMRPacket(0, tirs=[TIR("s", 2, LBTSMXInfo(7, 8, 30001))]),
        hdr(0, 0, 1) + tir_bytes("s", 0x04, struct.pack(">IIH", 7, 8, 30001), 2),
    ),
    (
        "tir lbt-rdma",
        LBMRPacket(0, tirs=[TIR("r", 2, LBTRDMAInfo("10.9.8.7", 0x1234, 5000))]),
        hdr(0, 0, 1) + tir_bytes("r", 0x20, ip("10.9.8.7") + struct.pack(">IH", 0x1234, 5000), 2),
    ),
    (
        "tir tcp6 kept raw",
        LBMRPacket(0, tirs=[TIR("6", 1, UnknownTransportInfo(0x02, bytes(range(18))))]),
        hdr(0, 0, 1) + tir_bytes("6", 0x02, bytes(range(18)), 1),
    ),
    (
        "tir unknown transport, empty block",
        LBMRPacket(0, tirs=[TIR("u", 1, UnknownTransportInfo(0x7F, b""))]),
        hdr(0, 0, 1) + tir_bytes("u", 0x7F, b"", 1),
    ),
    (
        "tqr + three tirs",
        LBMRPacket(
            0,
            tqrs=[TQR("q")],
            tirs=[
                TIR("a", 1, TCPInfo("1.1.1.1", 1, 2)),
                TIR("b", 2, LBTRUInfo("2.2.2.2", 3)),
                TIR("c", 3, LBTRMInfo("3.3.3.3", "239.1.1.1", 4, 5, 6)),
            ],
        ),
        hdr(0, 1, 3)
        + b"q\0"
        + tir_bytes("a", 0, ip("1.1.1.1") + struct.pack(">IH", 2, 1), 1)
        + tir_bytes("b", 1, ip("2.2.2.2") + struct.pack(">H", 3), 2)
        + tir_bytes("c", 0x10, ip("3.3.3.3") + ip("239.1.1.1") + struct.pack(">IHH", 4, 5, 6), 3),
    ),
    # --- TIR topic options (3.5), offsets after type,len ----------------------------------------
    (
        "topt ume",
        *topt(
            UMEOption(1, 2, "1.2.3.4", "5.6.7.8", 9, 10, 11, 12, flags=0x6800),
            struct.pack(">BBHHH", 1, 32, 0x6800, 1, 2)
            + ip("1.2.3.4")
            + ip("5.6.7.8")
            + struct.pack(">IIII", 9, 10, 11, 12),
        ),
    ),
    (
        "topt ume store",
        *topt(
            UMEStoreOption(3, 14567, 2, "10.0.0.9", 77, flags=0x80),
            struct.pack(">BBBBHH", 2, 16, 0x80, 3, 14567, 2)
            + ip("10.0.0.9")
            + struct.pack(">I", 77),
        ),
    ),
    (
        "topt ume store group",
        *topt(UMEStoreGroupOption(1, 3), struct.pack(">BBBBHH", 3, 8, 0, 1, 3, 0)),
    ),
    (
        "topt late join",
        *topt(
            LateJoinOption(14391, "10.0.0.5", 6, 1000, 10, flags=0x4000),
            struct.pack(">BBHHH", 4, 24, 0x4000, 14391, 0)
            + ip("10.0.0.5")
            + struct.pack(">III", 6, 1000, 10),
        ),
    ),
    ("topt umq rcr idx", *topt(UMQRcrIdxOption(0xABCDEF), struct.pack(">BBHI", 5, 8, 0, 0xABCDEF))),
    (
        "topt umq qinfo",
        *topt(UMQQInfoOption("QUEUE1", 0x4000), struct.pack(">BBH", 6, 11, 0x4000) + b"QUEUE1\0"),
    ),
    ("topt cost", *topt(CostOption(3, -1, 0x80), struct.pack(">BBBBi", 7, 8, 0x80, 3, -1))),
    ("topt otid", *topt(OTIDOption(OTID), struct.pack(">BBH", 8, 36, 0) + OTID)),
    ("topt ctxinst", *topt(CtxInstOption(CTX), struct.pack(">BBBB", 9, 12, 0, 0) + CTX)),
    (
        "topt ctxinsts",
        *topt(CtxInstStoreOption(2, CTX2), struct.pack(">BBBB", 10, 12, 0, 2) + CTX2),
    ),
    (
        "topt ulb",
        *topt(
            UMQULBOption(1, 2**63 + 5, 3, "4.5.6.7", 8),
            struct.pack(">BBHIQI", 11, 28, 0, 1, 2**63 + 5, 3)
            + ip("4.5.6.7")
            + struct.pack(">HH", 8, 0),
        ),
    ),
    ("topt ctxinstq", *topt(CtxInstQueueOption(4, CTX), struct.pack(">BBBB", 12, 12, 0, 4) + CTX)),
    (
        "topt domain id",
        *topt(DomainIdOption(0x01020304), struct.pack(">BBHI", 13, 8, 0, 0x01020304)),
    ),
    (
        "topt exfunc",
        *topt(
            ExFuncOption(14371, "10.0.0.5", 0xF, 0x8000),
            struct.pack(">BBHHH", 14, 16, 0x8000, 14371, 0)
            + ip("10.0.0.5")
            + struct.pack(">I", 0xF),
        ),
    ),
    (
        "topt unknown kept raw",
        *topt(UnknownTopicOption(0x33, b"\x80\x00xyz"), b"\x33\x07\x80\x00xyz"),
    ),
    (
        "tir with options (section 9 hex, trailer included)",
        LBMRPacket(
            0,
            tirs=[
                TIR(
                    "ORDERS.NYSE",
                    7,
                    TCPInfo("10.0.0.5", 14371, 0x11223344),
                    [CtxInstOption(CTX), DomainIdOption(5), ExFuncOption(14371, "10.0.0.5", 1)],
                )
            ],
            options=[
                SrcIdOption(CTX),
                SrcTypeOption(0),
                VersionOption(0x00060F00, 1),
                LocalDomainOption(5),
            ],
        ),
        bytes.fromhex(
            "08 00 00 01 4f 52 44 45 52 53 2e 4e 59 53 45 00 80 0a 00 00 00 00 00 07 00 04 00 28"
            " 09 0c 00 00 01 02 03 04 05 06 07 08 0d 08 00 00 00 00 00 05"
            " 0e 10 00 00 38 23 00 00 0a 00 00 05 00 00 00 01 0a 00 00 05 11 22 33 44 38 23"
            " 81 0c 00 00 01 02 03 04 05 06 07 08 82 04 00 00 83 08 00 01 00 06 0f 00"
            " 84 08 00 00 00 00 00 05 80 04 00 24"
        ),
    ),
    # --- packet options (3.6) and keepalives (3.7) ---------------------------------------------
    ("resolver keepalive", LBMRPacket(0), b"\x00\x00\x00\x00"),
    ("receiver alive", LBMRPacket(2), b"\x02\x00\x00\x00"),
    ("source alive", LBMRPacket(3), b"\x03\x00\x00\x00"),
    (
        "source alive with trailer",
        LBMRPacket(3, options=[SrcIdOption(CTX, 0x8000), SrcTypeOption(2, 0x80)]),
        hdr(3, opts=True)
        + trailer(struct.pack(">BBH", 0x81, 12, 0x8000) + CTX, bytes((0x82, 4, 0x80, 2))),
    ),
    (
        "unknown packet option kept raw",
        LBMRPacket(2, options=[UnknownPacketOption(0x90, b"\x00\x00ab")]),
        hdr(2, opts=True) + trailer(b"\x90\x06\x00\x00ab"),
    ),
    (
        "tqr with version and local domain",
        LBMRPacket(
            0, tqrs=[TQR("z")], options=[VersionOption(0xFFFFFFFF, 3), LocalDomainOption(9)]
        ),
        hdr(0, 1, opts=True)
        + b"z\0"
        + trailer(
            struct.pack(">BBHI", 0x83, 8, 3, 0xFFFFFFFF), struct.pack(">BBHI", 0x84, 8, 0, 9)
        ),
    ),
    # --- topic management (3.8) ----------------------------------------------------------------
    (
        "topic management",
        LBMRPacket(4, body=TopicManagement([TMR("ORD", 1, 0x80), TMR("^X.*", 0, 0x40)])),
        hdr(4)
        + struct.pack(">HH", 4 + 8 + 9, 2)
        + struct.pack(">HBB", 8, 1, 0x80)
        + b"ORD\0"
        + struct.pack(">HBB", 9, 0, 0x40)
        + b"^X.*\0",
    ),
    (
        "topic management empty",
        LBMRPacket(4, body=TopicManagement()),
        hdr(4) + struct.pack(">HH", 4, 0),
    ),
    # --- queue resolution (3.9) ----------------------------------------------------------------
    (
        "qqr + qir",
        LBMRPacket(
            6,
            tqrs=[QQR("Q1")],
            tirs=[
                QIR(
                    "Q1",
                    "T1",
                    10,
                    2,
                    1,
                    groups=[QIRGroup(0, 2)],
                    queues=[QIRQueue("10.0.0.1", 15000, 0, 0), QIRQueue("10.0.0.2", 15001, 1, 0)],
                    options=[DomainIdOption(3)],
                )
            ],
        ),
        hdr(6, 1, 1)
        + b"Q1\0Q1\0T1\0"
        + struct.pack(">IIIHH", 10, 2, 1, 0x8001, 2)
        + struct.pack(">BBH", 0, 4, 12)
        + struct.pack(">BBHI", 13, 8, 0, 3)
        + struct.pack(">HH", 0, 2)
        + ip("10.0.0.1")
        + struct.pack(">HHHH", 15000, 0, 0, 0)
        + ip("10.0.0.2")
        + struct.pack(">HHHH", 15001, 1, 0, 0),
    ),
    # --- extended messages (3.10); offsets from the datagram start ----------------------------
    (
        "pser with two options",
        LBMRPacket(
            7,
            body=PSER(
                1,
                "10.0.0.5",
                "10.0.0.9",
                4,
                7,
                14371,
                14567,
                "ORD",
                [PSERCtxInstOption(0, CTX), PSERCtxInstOption(1, CTX2)],
            ),
        ),
        ext(1, struct.pack(">HHH", 1, 28 + 4, 0x8000))
        + ip("10.0.0.5")
        + ip("10.0.0.9")
        + struct.pack(">IIHH", 4, 7, 14371, 14567)
        + b"ORD\0"
        + struct.pack(">HH", 0, 24)
        + bytes((10, 0))
        + CTX
        + bytes((10, 1))
        + CTX2,
    ),
    (
        "pser no options, unknown pser option",
        LBMRPacket(
            7,
            body=PSER(
                0,
                "1.1.1.1",
                "2.2.2.2",
                1,
                2,
                3,
                4,
                "t",
                [UnknownPSEROption(9, b"ab")],
                flags=0x0001,
            ),
        ),
        ext(1, struct.pack(">HHH", 0, 30, 0x8001))
        + ip("1.1.1.1")
        + ip("2.2.2.2")
        + struct.pack(">IIHH", 1, 2, 3, 4)
        + b"t\0"
        + struct.pack(">HH", 0, 8)
        + b"\x04\x09ab",
    ),
    (
        "qmgmt election vote (44-byte header)",
        LBMRPacket(
            7,
            body=UMQQueueMgmt(
                6, CFGSIG, 5, 6, "10.0.0.7", 15000, 1, 2, dep16=9, highest_rcr_tsp=100, age=7
            ),
        ),
        ext(
            2,
            struct.pack(">BB", 0, 6)
            + CFGSIG
            + struct.pack(">II", 5, 6)
            + ip("10.0.0.7")
            + struct.pack(">HHHH", 15000, 1, 2, 9),
        )
        + struct.pack(">II", 100, 7),
    ),
    (
        "qmgmt instance list with queue name",
        LBMRPacket(
            7,
            body=UMQQueueMgmt(
                1,
                CFGSIG,
                5,
                6,
                "10.0.0.7",
                15000,
                1,
                2,
                flags=0x20,
                highest_rcr_tsp=3,
                instances=[
                    QMgmtInstance("10.0.0.8", 15001, 0, 0, 0x8000),
                    QMgmtInstance("10.0.0.9", 15002, 1, 0),
                ],
                queue="QQ",
            ),
        ),
        ext(
            2,
            struct.pack(">BB", 0x60, 1)
            + CFGSIG
            + struct.pack(">II", 5, 6)
            + ip("10.0.0.7")
            + struct.pack(">HHHH", 15000, 1, 2, 2),
        )
        + struct.pack(">I", 3)
        + ip("10.0.0.8")
        + struct.pack(">HHHH", 15001, 0, 0, 0x8000)
        + ip("10.0.0.9")
        + struct.pack(">HHHH", 15002, 1, 0, 0)
        + b"QQ\0",
    ),
    (
        "qmgmt election call",
        LBMRPacket(7, body=UMQQueueMgmt(5, CFGSIG, 1, 2, "1.2.3.4", 5, 6, 7, queue_new_ver=8)),
        ext(
            2,
            struct.pack(">BB", 0, 5)
            + CFGSIG
            + struct.pack(">II", 1, 2)
            + ip("1.2.3.4")
            + struct.pack(">HHHH", 5, 6, 7, 0),
        )
        + struct.pack(">I", 8),
    ),
    (
        "qmgmt join reject code",
        LBMRPacket(7, body=UMQQueueMgmt(3, CFGSIG, 1, 2, "1.2.3.4", 5, 6, 7, dep16=0x0102)),
        ext(
            2,
            struct.pack(">BB", 0, 3)
            + CFGSIG
            + struct.pack(">II", 1, 2)
            + ip("1.2.3.4")
            + struct.pack(">HHHH", 5, 6, 7, 0x0102),
        ),
    ),
    (
        "qmgmt queue resume operation",
        LBMRPacket(7, body=UMQQueueMgmt(8, CFGSIG, 1, 2, "1.2.3.4", 5, 6, 7, highest_rcr_tsp=99)),
        ext(
            2,
            struct.pack(">BB", 0, 8)
            + CFGSIG
            + struct.pack(">II", 1, 2)
            + ip("1.2.3.4")
            + struct.pack(">HHHH", 5, 6, 7, 0),
        )
        + struct.pack(">I", 99),
    ),
    (
        "context info with name (section 9 hex)",
        LBMRPacket(7, body=ContextInfo(0xE000, 14371, "10.0.0.5", CTX, "myctx")),
        bytes.fromhex(
            "07 03 1a 00 e0 01 38 23 0a 00 00 05 01 02 03 04 05 06 07 08 6d 79 63 74 78 00"
        ),
    ),
    (
        "context info without name, hop count",
        LBMRPacket(7, body=ContextInfo(0x1800, 1, "0.0.0.0", CTX2, hop_count=3)),
        ext(3, struct.pack(">BBHH", 20, 3, 0x1800, 1) + ip("0.0.0.0") + CTX2),
    ),
    (
        "topic res request (section 9 hex)",
        LBMRPacket(7, body=TopicResRequest(0x07)),
        bytes.fromhex("07 04 00 07"),
    ),
    (
        "tnwg interest (section 9 hex)",
        LBMRPacket(
            7,
            version=1,
            body=TNWGInterest(
                [
                    TNWGInterestRecord("ORDERS.NYSE", 0x20, 0, 5),
                    TNWGInterestRecord("^ORD.*", 0x80, 1, 5),
                ]
            ),
        ),
        bytes.fromhex("17 05 00 2f 00 00 00 00 00 27 00 02 00 14 20 00 00 00 00 05")
        + b"ORDERS.NYSE\0"
        + bytes.fromhex("00 0f 80 01 00 00 00 05")
        + b"^ORD.*\0",
    ),
    (
        "tnwg ctxinfo, two options",
        LBMRPacket(
            7,
            version=1,
            body=TNWGContextInfo(
                2, 0xC0000000, 7, [TNWGCtxInstOption(CTX), TNWGAddressOption(14371, "10.0.0.5")]
            ),
        ),
        ext(5, struct.pack(">HHH", 8 + 12 + 24, 1, 0), ver=1)
        + struct.pack(">HBBII", 36, 2, 0, 0xC0000000, 7)
        + struct.pack(">BBH", 0, 12, 0)
        + CTX
        + struct.pack(">BBHHH", 1, 12, 0, 14371, 0)
        + ip("10.0.0.5"),
    ),
    (
        "tnwg ctxinfo, domain + name + unknown options",
        LBMRPacket(
            7,
            version=1,
            body=TNWGContextInfo(
                0,
                0x10000000,
                0,
                [
                    TNWGDomainOption(4, 0x8000),
                    TNWGNameOption("dro1"),
                    UnknownTNWGOption(9, b"\x00\x00"),
                ],
            ),
        ),
        ext(5, struct.pack(">HHH", 8 + 12 + 8 + 9 + 4, 1, 0), ver=1)
        + struct.pack(">HBBII", 12 + 21, 0, 0, 0x10000000, 0)
        + struct.pack(">BBHI", 2, 8, 0x8000, 4)
        + struct.pack(">BBH", 3, 9, 0)
        + b"dro1\0"
        + b"\x09\x04\x00\x00",
    ),
    (
        "tnwg topic res request",
        LBMRPacket(7, version=1, body=TNWGTopicResRequest([TNWGDomainOption(6)])),
        ext(5, struct.pack(">HHH", 8 + 2 + 8, 2, 0), ver=1)
        + struct.pack(">H", 10)
        + struct.pack(">BBHI", 2, 8, 0, 6),
    ),
    (
        "tnwg unknown type",
        LBMRPacket(7, version=1, body=UnknownTNWG(9, b"xyz")),
        ext(5, struct.pack(">HHH", 11, 9, 0), ver=1) + b"xyz",
    ),
    (
        "remote domain route (section 9 hex)",
        LBMRPacket(7, version=1, body=RemoteDomainRoute("10.0.0.50", 14500, [5, 6, 7])),
        bytes.fromhex(
            "17 06 00 03 0a 00 00 32 38 a4 00 00 00 00 00 1c 00 00 00 05 00 00 00 06 00 00 00 07"
        ),
    ),
    (
        "remote context info",
        LBMRPacket(
            7,
            version=1,
            body=RemoteContextInfo(
                [
                    RCtxInfoRecord(
                        [
                            RCtxAddressOption(5, "10.0.0.9", 14567),
                            RCtxInstanceOption(CTX),
                            RCtxODomainOption(6),
                            RCtxNameOption("store1"),
                        ]
                    ),
                    RCtxInfoRecord([UnknownRCtxOption(0x20, b"\x00\x00q")], flags=0x8000),
                ]
            ),
        ),
        ext(7, struct.pack(">HHH", 8 + 4 + 16 + 12 + 8 + 11 + 4 + 5, 2, 0), ver=1)
        + struct.pack(">HH", 4 + 16 + 12 + 8 + 11, 0)
        + struct.pack(">BBHI", 1, 16, 0, 5)
        + ip("10.0.0.9")
        + struct.pack(">HH", 14567, 0)
        + struct.pack(">BBH", 2, 12, 0)
        + CTX
        + struct.pack(">BBHI", 3, 8, 0, 6)
        + struct.pack(">BBH", 4, 11, 0)
        + b"store1\0"
        + struct.pack(">HH", 9, 0x8000)
        + b"\x20\x05\x00\x00q",
    ),
    (
        "unknown ext type kept raw",
        LBMRPacket(7, body=UnknownExt(0x09, b"\x00\x01\x02")),
        ext(9, b"\x00\x01\x02"),
    ),
    (
        "ext with packet options",
        LBMRPacket(7, version=1, body=TopicResRequest(0x40), options=[SrcTypeOption(1)]),
        ext(4, struct.pack(">H", 0x40), ver=1, opts=True) + trailer(bytes((0x82, 4, 0, 1))),
    ),
]


@pytest.mark.parametrize(("name", "packet", "wire"), CASES, ids=[c[0] for c in CASES])
def test_encode_gives_the_bytes(name: str, packet: LBMRPacket, wire: bytes) -> None:
    assert encode(packet) == wire


@pytest.mark.parametrize(("name", "packet", "wire"), CASES, ids=[c[0] for c in CASES])
def test_decode_gives_the_record(name: str, packet: LBMRPacket, wire: bytes) -> None:
    assert decode(wire) == packet
    assert decode(memoryview(bytearray(wire))) == packet


def test_every_record_class_appears_in_the_table() -> None:
    seen: set[str] = set()

    def walk(obj: Any) -> None:
        seen.add(type(obj).__name__)
        if isinstance(obj, (tuple, list)):
            for item in obj:
                walk(item)
        elif isinstance(obj, lbmr.Record):
            for value in obj._values():
                walk(value)

    for _, packet, _ in CASES:
        walk(packet)
    record_classes = {
        name
        for name in lbmr.__all__
        if isinstance(getattr(lbmr, name), type)
        and issubclass(getattr(lbmr, name), lbmr.Record)
        and name != "LBMRError"
    }
    assert record_classes - seen == set()


MALFORMED = [
    ("short header", b"\x00\x00\x00"),
    ("type 5", b"\x05\x00\x00\x00"),
    ("tqr without nul", hdr(0, 1) + b"abc"),
    ("tqr count larger than body", hdr(0, 2) + b"a\0"),
    ("trailing byte", hdr(0, 1) + b"a\0\0"),
    ("keepalive with body", b"\x00\x00\x00\x00\x00"),
    ("rcv alive with counts", hdr(2, 1)),
    ("topic too long", hdr(0, 1) + b"x" * 247 + b"\0"),
    ("tcp tlen 8", hdr(0, 0, 1) + b"t\0" + struct.pack(">BBHI", 0, 8, 0, 1) + bytes(8)),
    ("lbt-rm tlen 10", hdr(0, 0, 1) + b"t\0" + struct.pack(">BBHI", 0x10, 10, 0, 1) + bytes(10)),
    ("truncated transport", hdr(0, 0, 1) + b"t\0" + struct.pack(">BBHI", 0, 10, 0, 1) + bytes(9)),
    ("truncated tir head", hdr(0, 0, 1) + b"t\0" + bytes(7)),
    (
        "options not led by length",
        hdr(0, 0, 1)
        + b"t\0"
        + struct.pack(">BBHI", 0x80, 6, 0, 1)
        + struct.pack(">BBHI", 13, 8, 0, 1)
        + bytes(6),
    ),
    (
        "zero-length topic option",
        hdr(0, 0, 1)
        + b"t\0"
        + struct.pack(">BBHI", 0x80, 6, 0, 1)
        + struct.pack(">BBH", 0, 4, 8)
        + b"\x0d\x00\x00\x00"
        + bytes(6),
    ),
    (
        "known option with wrong len",
        hdr(0, 0, 1)
        + b"t\0"
        + struct.pack(">BBHI", 0x80, 6, 0, 1)
        + struct.pack(">BBH", 0, 4, 10)
        + b"\x0d\x06\x00\x00\x00\x00"
        + bytes(6),
    ),
    (
        "options block overruns",
        hdr(0, 0, 1)
        + b"t\0"
        + struct.pack(">BBHI", 0x80, 6, 0, 1)
        + struct.pack(">BBH", 0, 4, 200)
        + bytes(6),
    ),
    ("opts bit without trailer", hdr(2, opts=True) + b"\x82\x04\x00\x00"),
    ("trailer total too big", hdr(2, opts=True) + b"\x80\x04\x00\x09"),
    ("packet option overruns", hdr(2, opts=True) + b"\x81\x0c\x00\x00" + b"\x80\x04\x00\x08"),
    ("ctxinfo len mismatch", ext(3, struct.pack(">BBHH", 21, 0, 0, 0) + bytes(12))),
    ("tmr len too short", hdr(4) + struct.pack(">HH", 8, 1) + struct.pack(">HBB", 4, 1, 0)),
    (
        "remote domain route count mismatch",
        ext(6, struct.pack(">H4sHHI", 2, bytes(4), 0, 0, 20) + bytes(4)),
    ),
    ("pser len past end", ext(1, struct.pack(">HHH", 0, 200, 0) + bytes(22) + b"t\0")),
    ("topic res request too long", ext(4, b"\x00\x01\x00")),
    (
        "tnwg ctxinfo len mismatch",
        ext(5, struct.pack(">HHH", 20, 1, 0) + struct.pack(">HBBII", 13, 0, 0, 0, 0)),
    ),
]


@pytest.mark.parametrize(("name", "wire"), MALFORMED, ids=[m[0] for m in MALFORMED])
def test_malformed_is_refused(name: str, wire: bytes) -> None:
    with pytest.raises(LBMRError):
        decode(wire)


def _tir(info: Any, topic: str = "t", options: tuple[Any, ...] = ()) -> LBMRPacket:
    return LBMRPacket(0, tirs=[TIR(topic, 1, info, options)])


UNENCODABLE: list[tuple[str, Any, dict[str, Any]]] = [
    ("256 tqrs", LBMRPacket(0, tqrs=[TQR("a")] * 256), {}),
    ("topic 247 bytes", LBMRPacket(0, tqrs=[TQR("x" * 247)]), {}),
    ("nul in topic", LBMRPacket(0, tqrs=[TQR("a\0b")]), {}),
    ("lone surrogate", LBMRPacket(0, tqrs=[TQR("\ud800")]), {}),
    ("bad ip", _tir(TCPInfo("10.0.0", 1)), {}),
    ("ip with leading zero", _tir(TCPInfo("10.0.0.01", 1)), {}),
    ("ip octet 256", _tir(TCPInfo("10.0.0.256", 1)), {}),
    ("port 65536", _tir(TCPInfo("10.0.0.1", 65536)), {}),
    ("negative index", LBMRPacket(0, tirs=[TIR("t", -1, TCPInfo("1.1.1.1", 1))]), {}),
    ("ctxinst 7 bytes", _tir(TCPInfo("1.1.1.1", 1), options=(CtxInstOption(b"1234567"),)), {}),
    (
        "unknown option with a known type",
        _tir(TCPInfo("1.1.1.1", 1), options=(UnknownTopicOption(0x0D, b"\0\0"),)),
        {},
    ),
    ("packet option in a tir", _tir(TCPInfo("1.1.1.1", 1), options=(SrcTypeOption(0),)), {}),
    ("unknown transport with a known type", _tir(UnknownTransportInfo(0x00, b"123456")), {}),
    ("wrong tqr class for type 1", LBMRPacket(1, tqrs=[TQR("a")]), {}),
    ("wildcard tqr in type 0", LBMRPacket(0, tqrs=[WildcardTQR(1, "a")]), {}),
    ("type 5", LBMRPacket(5), {}),
    ("version 16", LBMRPacket(0, version=16), {}),
    ("type 7 without body", LBMRPacket(7), {}),
    ("type 4 with tqrs", LBMRPacket(4, tqrs=[TQR("a")], body=TopicManagement()), {}),
    ("keepalive with body", LBMRPacket(2, body=TopicManagement()), {}),
    ("max_size", LBMRPacket(0, tqrs=[TQR("a" * 100)] * 10), {"max_size": 500}),
    ("unknown ext shorter than a header", LBMRPacket(7, body=UnknownExt(9, b"x")), {}),
    ("context name too long", LBMRPacket(7, body=ContextInfo(0, name="n" * 235)), {}),
]


@pytest.mark.parametrize(("name", "packet", "kwargs"), UNENCODABLE, ids=[u[0] for u in UNENCODABLE])
def test_unencodable_raises_local_protocol_error(
    name: str, packet: Any, kwargs: dict[str, Any]
) -> None:
    with pytest.raises(LocalProtocolError):
        encode(packet, **kwargs)


def test_limits_are_exact() -> None:
    # 246-byte topics and 255 TQRs are legal; one more is not (covered above).
    wire = encode(LBMRPacket(0, tqrs=[TQR("x" * 246)] * 255))
    assert wire[1] == 255 and len(wire) == 4 + 255 * 247
    assert decode(wire).tqrs[0].topic == "x" * 246
    assert len(encode(LBMRPacket(7, body=ContextInfo(0, name="n" * 234)))) == 255


def test_non_utf8_names_round_trip_byte_exact() -> None:
    wire = hdr(0, 1) + b"\xff\xfe\x80abc\0"
    assert encode(decode(wire)) == wire


def test_derived_flag_bits_follow_presence() -> None:
    assert ContextInfo(CTXINFO_ALL := 0xFFFF).flags == CTXINFO_ALL & ~0x0001
    assert ContextInfo(0, name="x").flags == 0x0001
    assert PSER(0, "1.1.1.1", "1.1.1.1", 0, 0, 0, 0, "t", flags=0x8000).flags == 0
    assert UMQQueueMgmt(6, CFGSIG, 0, 0, "1.1.1.1", 0, 0, 0, flags=0x40).flags == 0
    il = UMQQueueMgmt(
        1, CFGSIG, 0, 0, "1.1.1.1", 0, 0, 0, dep16=7, instances=[QMgmtInstance("1.1.1.1", 1, 0, 0)]
    )
    assert il.dep16 == 1


def test_records_compare_hash_and_repr() -> None:
    a = TIR("t", 1, TCPInfo("1.2.3.4", 5, 6), [DomainIdOption(3)])
    b = TIR("t", 1, TCPInfo("1.2.3.4", 5, 6), (DomainIdOption(3),))
    assert a == b and hash(a) == hash(b)
    assert a != TIR("t", 1, LBTRUInfo("1.2.3.4", 5, 6), [DomainIdOption(3)])
    assert TCPInfo("1.2.3.4", 5) != LBTRUInfo("1.2.3.4", 5)
    assert repr(TCPInfo("1.2.3.4", 5)) == "TCPInfo(ip='1.2.3.4', port=5, session_id=None)"
    assert not hasattr(a, "__dict__")
