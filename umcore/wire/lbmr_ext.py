"""LBMR bodies other than TQR/TIR: topic management (type 4), queue resolution (type 6) and the
extended messages (type 7).

Theory of operation
-------------------
Layouts are in shared/spec/wire-lbmr-transports-srs.md 3.8-3.10 (and dro-monitoring-config.md
A5 for the DRO records).  Each record class here has ``encode()`` returning its wire bytes and a
module-level ``decode_*`` function that reads it back, refusing (``LBMRError``) anything that
does not re-encode to the same bytes except the fields marked [I] below, which the dissector does
not interpret: those are computed when encoding and not checked when decoding.

Extended messages (type 7) share the first two bytes of the datagram (``ver_type``, ``ext_type``)
with the LBMR header; the ext record classes encode from byte 2 on, and their ``ext_type`` class
attribute selects byte 1.  Offsets quoted in comments are from the start of the datagram, as in
the spec.

Flag bits that only announce an optional part (PSER options 0x8000, CONTEXT_INFO name 0x0001,
queue management queue name 0x40, the QIR options bit) are derived from whether that part is
present: constructors set or clear them, so a record always equals its decoded encoding.

[I] fields (computed on encode, not checked on decode): the topic-management block ``len``
(we write the block length including its 4-byte head), the TNWG header ``len`` (the whole
message from byte 0), the TNWG interest block ``len`` (block including its 4-byte head), the
remote-domain-route ``length`` (16 + 4 x domains), the remote-context-info header ``len``
(whole message from byte 0) and the PSER option-header ``type`` (0).
"""

# __slots__ are in constructor order on purpose: Record derives repr and equality from them.
# ruff: noqa: RUF023

from __future__ import annotations

import struct
from typing import Any, ClassVar

from umcore.errors import LocalProtocolError
from umcore.wire.lbmr_base import (
    MAX_NAME_LEN,
    MAX_TOPIC_LEN,
    U16,
    U32,
    LBMRError,
    Record,
    fixed_bytes,
    ip_bytes,
    ip_str,
    name_bytes,
    need,
    read_cstring,
    trailing_name,
)
from umcore.wire.lbmr_options import (
    decode_rctx_options,
    decode_tnwg_options,
    decode_topic_options,
    encode_rctx_options,
    encode_tnwg_options,
    encode_topic_options,
)

__all__ = [
    "PSER",
    "QIR",
    "QQR",
    "TMR",
    "ContextInfo",
    "PSERCtxInstOption",
    "QIRGroup",
    "QIRQueue",
    "QMgmtInstance",
    "RCtxInfoRecord",
    "RemoteContextInfo",
    "RemoteDomainRoute",
    "TNWGContextInfo",
    "TNWGInterest",
    "TNWGInterestRecord",
    "TNWGTopicResRequest",
    "TopicManagement",
    "TopicResRequest",
    "UMQQueueMgmt",
    "UnknownExt",
    "UnknownPSEROption",
    "UnknownTNWG",
]

# --- type 4: topic management (3.8) --------------------------------------------------------------

TMR_LEAVE_TOPIC = 0
TMR_TOPIC_USE = 1
TMR_FLAG_RESPONSE = 0x80  # Topic Use: set = response, clear = query
TMR_FLAG_WILDCARD_PCRE = 0x40
TMR_FLAG_WILDCARD_REGEX = 0x20

_TMB_HEAD = struct.Struct(">HH")  # len [I], number of TMRs
_TMR_HEAD = struct.Struct(">HBB")  # len (whole TMR incl. NUL), type, flags


class TMR(Record):
    """Topic management record: leave-topic or topic-use (query/response) for a topic or a
    pattern (``flags`` TMR_FLAG_WILDCARD_*)."""

    __slots__ = ("topic", "tmr_type", "flags")

    def __init__(self, topic: str, tmr_type: int = TMR_TOPIC_USE, flags: int = 0) -> None:
        self.topic = topic
        self.tmr_type = tmr_type
        self.flags = flags

    def encode(self) -> bytes:
        raw = name_bytes(self.topic, MAX_TOPIC_LEN, "TMR topic")
        return _TMR_HEAD.pack(4 + len(raw) + 1, self.tmr_type, self.flags) + raw + b"\0"


class TopicManagement(Record):
    """The Topic Management Block of an LBMR type-4 datagram: a list of TMRs."""

    __slots__ = ("tmrs",)

    def __init__(self, tmrs: tuple[TMR, ...] | list[TMR] = ()) -> None:
        self.tmrs = tuple(tmrs)

    def encode(self) -> bytes:
        if len(self.tmrs) > 0xFFFF:
            raise LocalProtocolError("more than 65535 TMRs")
        body = b"".join(tmr.encode() for tmr in self.tmrs)
        if 4 + len(body) > 0xFFFF:
            raise LocalProtocolError("topic management block longer than 65535 bytes")
        return _TMB_HEAD.pack(4 + len(body), len(self.tmrs)) + body


def decode_topic_management(data: bytes, pos: int, end: int) -> TopicManagement:
    need(pos, 4, end, "TMB")
    _len, count = _TMB_HEAD.unpack_from(data, pos)
    pos += 4
    tmrs = []
    for _ in range(count):
        need(pos, 4, end, "TMR")
        tmr_len, tmr_type, flags = _TMR_HEAD.unpack_from(data, pos)
        rec_end = pos + tmr_len
        if tmr_len < 5 or rec_end > end:
            raise LBMRError(f"bad TMR len {tmr_len}", record="TMR", offset=pos)
        topic, after = read_cstring(data, pos + 4, rec_end, MAX_TOPIC_LEN, "TMR")
        if after != rec_end:
            raise LBMRError("TMR len does not end at the topic's NUL", record="TMR", offset=pos)
        tmrs.append(TMR(topic, tmr_type, flags))
        pos = rec_end
    if pos != end:
        raise LBMRError("bytes after the topic management block", record="TMB", offset=pos)
    return TopicManagement(tmrs)


# --- type 6: queue resolution (3.9) --------------------------------------------------------------

_QIR_FIXED = struct.Struct(
    ">IIIHH"
)  # queue_id, queue_ver, queue_prev_ver, opts|grp_blks, queue_blks
_QIR_GRP = struct.Struct(">HH")
_QIR_QUEUE = struct.Struct(">4sHHHH")  # ip, port, idx, grp_idx, reserved
QIR_OPTIONS_FLAG = 0x8000
QIR_MAX_GROUP_BLOCKS = 0x7FFF  # the group count shares its u16 with the options bit


class QQR(Record):
    """Queue query record (UMQ): a queue name."""

    __slots__ = ("queue",)

    def __init__(self, queue: str) -> None:
        self.queue = queue

    def encode(self) -> bytes:
        return name_bytes(self.queue, MAX_NAME_LEN, "QQR queue") + b"\0"


class QIRGroup(Record):
    """A QIR group block."""

    __slots__ = ("grp_idx", "grp_sz")

    def __init__(self, grp_idx: int, grp_sz: int) -> None:
        self.grp_idx = grp_idx
        self.grp_sz = grp_sz


class QIRQueue(Record):
    """A QIR queue block: one queue instance's address, index and group index."""

    __slots__ = ("ip", "port", "idx", "grp_idx")

    def __init__(self, ip: str, port: int, idx: int, grp_idx: int) -> None:
        self.ip = ip
        self.port = port
        self.idx = idx
        self.grp_idx = grp_idx


class QIR(Record):
    """Queue information record (UMQ): queue and topic, versions, optional topic options,
    group blocks and queue blocks."""

    __slots__ = (
        "queue",
        "topic",
        "queue_id",
        "queue_ver",
        "queue_prev_ver",
        "groups",
        "queues",
        "options",
    )

    def __init__(
        self,
        queue: str,
        topic: str,
        queue_id: int,
        queue_ver: int = 0,
        queue_prev_ver: int = 0,
        groups: tuple[QIRGroup, ...] | list[QIRGroup] = (),
        queues: tuple[QIRQueue, ...] | list[QIRQueue] = (),
        options: tuple[Any, ...] | list[Any] = (),
    ) -> None:
        self.queue = queue
        self.topic = topic
        self.queue_id = queue_id
        self.queue_ver = queue_ver
        self.queue_prev_ver = queue_prev_ver
        self.groups = tuple(groups)
        self.queues = tuple(queues)
        self.options = tuple(options)

    def encode(self) -> bytes:
        if len(self.groups) > QIR_MAX_GROUP_BLOCKS or len(self.queues) > 0xFFFF:
            raise LocalProtocolError("too many QIR group or queue blocks")
        word = len(self.groups) | (QIR_OPTIONS_FLAG if self.options else 0)
        parts = [
            name_bytes(self.queue, MAX_NAME_LEN, "QIR queue") + b"\0",
            name_bytes(self.topic, MAX_TOPIC_LEN, "QIR topic") + b"\0",
            _QIR_FIXED.pack(
                self.queue_id, self.queue_ver, self.queue_prev_ver, word, len(self.queues)
            ),
        ]
        if self.options:
            parts.append(encode_topic_options(self.options))
        parts.extend(_QIR_GRP.pack(g.grp_idx, g.grp_sz) for g in self.groups)
        parts.extend(
            _QIR_QUEUE.pack(ip_bytes(q.ip), q.port, q.idx, q.grp_idx, 0) for q in self.queues
        )
        return b"".join(parts)


def decode_qqr(data: bytes, pos: int, end: int) -> tuple[QQR, int]:
    queue, pos = read_cstring(data, pos, end, MAX_NAME_LEN, "QQR")
    return QQR(queue), pos


def decode_qir(data: bytes, pos: int, end: int) -> tuple[QIR, int]:
    queue, pos = read_cstring(data, pos, end, MAX_NAME_LEN, "QIR")
    topic, pos = read_cstring(data, pos, end, MAX_TOPIC_LEN, "QIR")
    need(pos, _QIR_FIXED.size, end, "QIR")
    queue_id, ver, prev, word, nqueues = _QIR_FIXED.unpack_from(data, pos)
    pos += _QIR_FIXED.size
    options: tuple[Any, ...] = ()
    if word & QIR_OPTIONS_FLAG:
        options, pos = decode_topic_options(data, pos, end, "QIR")
    ngroups = word & QIR_MAX_GROUP_BLOCKS
    need(pos, 4 * ngroups + 12 * nqueues, end, "QIR")
    groups = []
    for _ in range(ngroups):
        groups.append(QIRGroup(*_QIR_GRP.unpack_from(data, pos)))
        pos += 4
    queues = []
    for _ in range(nqueues):
        ip, port, idx, grp_idx, _res = _QIR_QUEUE.unpack_from(data, pos)
        queues.append(QIRQueue(ip_str(ip), port, idx, grp_idx))
        pos += 12
    return QIR(queue, topic, queue_id, ver, prev, groups, queues, options), pos


# --- type 7: extended messages (3.10) -----------------------------------------------------------

EXT_PSER = 0x01
EXT_UMQ_QMGMT = 0x02
EXT_CONTEXT_INFO = 0x03
EXT_TOPIC_RES_REQUEST = 0x04
EXT_TNWG = 0x05
EXT_REMOTE_DOMAIN_ROUTE = 0x06
EXT_REMOTE_CONTEXT_INFO = 0x07


class ExtRecord(Record):
    """Base of the extended-message records; ``encode()`` gives the bytes from offset 2."""

    __slots__ = ()
    ext_type: ClassVar[int]

    def encode(self) -> bytes:
        raise NotImplementedError


# 0x01 UME proxy source election

PSER_DEP_ELECTION = 0
PSER_DEP_REELECTION = 1
PSER_FLAG_OPTIONS = 0x8000
PSER_OPT_SRC_CTXINST = 0
PSER_OPT_STORE_CTXINST = 1
_PSER_FIXED = struct.Struct(">HHH4s4sIIHH")  # from offset 2; 26 bytes
_PSER_HEAD_SIZE = 28  # bytes 0..27 of the datagram
_PSER_OPT_HEAD = struct.Struct(">HH")  # type [I] (0), optlen (incl. this head)
_PSER_OPT = struct.Struct(">BB8s")  # len (10), type, ctxinst  -- note: len BEFORE type


class PSERCtxInstOption(Record):
    """PSER option: a source (PSER_OPT_SRC_CTXINST) or store (PSER_OPT_STORE_CTXINST) ctxinst."""

    __slots__ = ("opt_type", "ctxinst")

    def __init__(self, opt_type: int, ctxinst: bytes) -> None:
        self.opt_type = opt_type
        self.ctxinst = ctxinst

    def encode(self) -> bytes:
        if self.opt_type not in (PSER_OPT_SRC_CTXINST, PSER_OPT_STORE_CTXINST):
            raise LocalProtocolError("PSERCtxInstOption.opt_type must be 0 or 1")
        return _PSER_OPT.pack(10, self.opt_type, fixed_bytes(self.ctxinst, 8, "PSER ctxinst"))


class UnknownPSEROption(Record):
    """A PSER option of another type: ``u8 len, u8 type, raw``."""

    __slots__ = ("opt_type", "raw")

    def __init__(self, opt_type: int, raw: bytes) -> None:
        self.opt_type = opt_type
        self.raw = raw

    def encode(self) -> bytes:
        if self.opt_type in (PSER_OPT_SRC_CTXINST, PSER_OPT_STORE_CTXINST):
            raise LocalProtocolError("use PSERCtxInstOption for PSER option types 0 and 1")
        if len(self.raw) > 253:
            raise LocalProtocolError("UnknownPSEROption.raw longer than 253 bytes")
        return struct.pack(">BB", 2 + len(self.raw), self.opt_type) + bytes(self.raw)


class PSER(ExtRecord):
    """UME proxy source election record (ext 0x01), sent by stores."""

    __slots__ = (
        "dep_type",
        "source_ip",
        "store_ip",
        "transport_idx",
        "topic_idx",
        "source_port",
        "store_port",
        "topic",
        "options",
        "flags",
    )
    ext_type = EXT_PSER

    def __init__(
        self,
        dep_type: int,
        source_ip: str,
        store_ip: str,
        transport_idx: int,
        topic_idx: int,
        source_port: int,
        store_port: int,
        topic: str,
        options: tuple[Any, ...] | list[Any] = (),
        flags: int = 0,
    ) -> None:
        self.dep_type = dep_type
        self.source_ip = source_ip
        self.store_ip = store_ip
        self.transport_idx = transport_idx
        self.topic_idx = topic_idx
        self.source_port = source_port
        self.store_port = store_port
        self.topic = topic
        self.options = tuple(options)
        self.flags = (flags | PSER_FLAG_OPTIONS) if self.options else (flags & ~PSER_FLAG_OPTIONS)

    def encode(self) -> bytes:
        raw = name_bytes(self.topic, MAX_TOPIC_LEN, "PSER topic") + b"\0"
        head = _PSER_FIXED.pack(
            self.dep_type,
            _PSER_HEAD_SIZE + len(raw),
            self.flags,
            ip_bytes(self.source_ip),
            ip_bytes(self.store_ip),
            self.transport_idx,
            self.topic_idx,
            self.source_port,
            self.store_port,
        )
        if not self.options:
            return head + raw
        opts = b"".join(opt.encode() for opt in self.options)
        return head + raw + _PSER_OPT_HEAD.pack(0, 4 + len(opts)) + opts


def decode_pser(data: bytes, end: int) -> PSER:
    need(2, _PSER_FIXED.size, end, "PSER")
    dep, length, flags, sip, tip, tidx, topic_idx, sport, tport = _PSER_FIXED.unpack_from(data, 2)
    if length < _PSER_HEAD_SIZE + 1 or length > end:
        raise LBMRError(f"bad PSER len {length}", record="PSER", offset=4)
    topic, after = read_cstring(data, _PSER_HEAD_SIZE, length, MAX_TOPIC_LEN, "PSER")
    if after != length:
        raise LBMRError("PSER len does not end at the topic's NUL", record="PSER", offset=4)
    pos = length
    options: list[Any] = []
    if flags & PSER_FLAG_OPTIONS:
        need(pos, 4, end, "PSER options")
        _type, optlen = _PSER_OPT_HEAD.unpack_from(data, pos)
        opt_end = pos + optlen
        if optlen < 4 or opt_end > end:
            raise LBMRError(f"bad PSER optlen {optlen}", record="PSER options", offset=pos)
        pos += 4
        while pos < opt_end:
            need(pos, 2, opt_end, "PSER option")
            olen, otype = data[pos], data[pos + 1]
            if otype in (PSER_OPT_SRC_CTXINST, PSER_OPT_STORE_CTXINST):
                if olen != 10 or pos + 10 > opt_end:
                    raise LBMRError("bad PSER ctxinst option", record="PSER option", offset=pos)
                options.append(PSERCtxInstOption(otype, data[pos + 2 : pos + 10]))
            else:
                if olen < 2 or pos + olen > opt_end:
                    raise LBMRError(f"bad PSER option len {olen}", record="PSER option", offset=pos)
                options.append(UnknownPSEROption(otype, data[pos + 2 : pos + olen]))
            pos += olen
    if pos != end:
        raise LBMRError("bytes after the PSER record", record="PSER", offset=pos)
    return PSER(dep, ip_str(sip), ip_str(tip), tidx, topic_idx, sport, tport, topic, options, flags)


# 0x02 UMQ queue management

QMGMT_FLAG_IGNORE = 0x80
QMGMT_FLAG_QUEUE_NAME = 0x40  # the queue name follows, to the end of the body
QMGMT_FLAG_IL_NEW_LIST = 0x20
QMGMT_FLAG_IL_KEEPALIVE = 0x10
QMGMT_IL = 1  # instance list
QMGMT_JR = 2  # join request
QMGMT_JREJ = 3  # join reject
QMGMT_IKA = 4  # instance keepalive
QMGMT_EC = 5  # election call
QMGMT_EV = 6  # election vote
QMGMT_CNIL = 7  # confirm new instance list
QMGMT_QRO = 8  # queue resume operation
_QMGMT_HEAD = struct.Struct(">BB20sII4sHHHH")  # from offset 2; 42 bytes
_QMGMT_INST = struct.Struct(">4sHHHH")
QMGMT_INST_FLAG_MASTER = 0x8000
QMGMT_INST_FLAG_QUEUE_ELECTION_MASTER = 0x4000
QMGMT_INST_FLAG_POST_ELECTION_MASTER = 0x2000


class QMgmtInstance(Record):
    """One queue instance in an Instance List."""

    __slots__ = ("ip", "port", "inst_idx", "grp_idx", "flags")

    def __init__(self, ip: str, port: int, inst_idx: int, grp_idx: int, flags: int = 0) -> None:
        self.ip = ip
        self.port = port
        self.inst_idx = inst_idx
        self.grp_idx = grp_idx
        self.flags = flags


class UMQQueueMgmt(ExtRecord):
    """UMQ queue management (ext 0x02).  ``dep16`` is the packet-type-dependent u16 (join reject
    code, election vote bias; for an Instance List it is the instance count, derived).  Fields a
    packet type does not carry are forced to 0 / empty: ``highest_rcr_tsp`` (IL, EV, QRO),
    ``instances`` (IL), ``queue_new_ver`` (EC), ``age`` (EV)."""

    __slots__ = (
        "pckt_type",
        "cfgsig",
        "queue_id",
        "queue_ver",
        "ip",
        "port",
        "inst_idx",
        "grp_idx",
        "dep16",
        "flags",
        "highest_rcr_tsp",
        "instances",
        "queue_new_ver",
        "age",
        "queue",
    )
    ext_type = EXT_UMQ_QMGMT

    def __init__(
        self,
        pckt_type: int,
        cfgsig: bytes,
        queue_id: int,
        queue_ver: int,
        ip: str,
        port: int,
        inst_idx: int,
        grp_idx: int,
        dep16: int = 0,
        flags: int = 0,
        highest_rcr_tsp: int = 0,
        instances: tuple[QMgmtInstance, ...] | list[QMgmtInstance] = (),
        queue_new_ver: int = 0,
        age: int = 0,
        queue: str | None = None,
    ) -> None:
        self.pckt_type = pckt_type
        self.cfgsig = cfgsig
        self.queue_id = queue_id
        self.queue_ver = queue_ver
        self.ip = ip
        self.port = port
        self.inst_idx = inst_idx
        self.grp_idx = grp_idx
        self.instances = tuple(instances) if pckt_type == QMGMT_IL else ()
        self.dep16 = len(self.instances) if pckt_type == QMGMT_IL else dep16
        self.highest_rcr_tsp = (
            highest_rcr_tsp if pckt_type in (QMGMT_IL, QMGMT_EV, QMGMT_QRO) else 0
        )
        self.queue_new_ver = queue_new_ver if pckt_type == QMGMT_EC else 0
        self.age = age if pckt_type == QMGMT_EV else 0
        self.queue = queue
        self.flags = (
            (flags | QMGMT_FLAG_QUEUE_NAME)
            if queue is not None
            else (flags & ~QMGMT_FLAG_QUEUE_NAME)
        )

    def encode(self) -> bytes:
        parts = [
            _QMGMT_HEAD.pack(
                self.flags,
                self.pckt_type,
                fixed_bytes(self.cfgsig, 20, "UMQQueueMgmt.cfgsig"),
                self.queue_id,
                self.queue_ver,
                ip_bytes(self.ip),
                self.port,
                self.inst_idx,
                self.grp_idx,
                self.dep16,
            )
        ]
        if self.pckt_type == QMGMT_IL:
            if len(self.instances) > 0xFFFF:
                raise LocalProtocolError("more than 65535 queue instances")
            parts.append(U32.pack(self.highest_rcr_tsp))
            parts.extend(
                _QMGMT_INST.pack(ip_bytes(i.ip), i.port, i.inst_idx, i.grp_idx, i.flags)
                for i in self.instances
            )
        elif self.pckt_type == QMGMT_EC:
            parts.append(U32.pack(self.queue_new_ver))
        elif self.pckt_type == QMGMT_EV:
            parts.append(struct.pack(">II", self.highest_rcr_tsp, self.age))
        elif self.pckt_type == QMGMT_QRO:
            parts.append(U32.pack(self.highest_rcr_tsp))
        if self.queue is not None:
            parts.append(name_bytes(self.queue, MAX_NAME_LEN, "UMQQueueMgmt.queue") + b"\0")
        return b"".join(parts)


def decode_qmgmt(data: bytes, end: int) -> UMQQueueMgmt:
    need(2, _QMGMT_HEAD.size, end, "QMGMT")
    flags, ptype, cfgsig, qid, qver, ip, port, inst_idx, grp_idx, dep16 = _QMGMT_HEAD.unpack_from(
        data, 2
    )
    pos = 2 + _QMGMT_HEAD.size
    tsp = new_ver = age = 0
    instances = []
    if ptype == QMGMT_IL:
        need(pos, 4 + 12 * dep16, end, "QMGMT IL")
        (tsp,) = U32.unpack_from(data, pos)
        pos += 4
        for _ in range(dep16):
            iip, iport, iidx, igrp, iflags = _QMGMT_INST.unpack_from(data, pos)
            instances.append(QMgmtInstance(ip_str(iip), iport, iidx, igrp, iflags))
            pos += 12
    elif ptype == QMGMT_EC:
        need(pos, 4, end, "QMGMT EC")
        (new_ver,) = U32.unpack_from(data, pos)
        pos += 4
    elif ptype == QMGMT_EV:
        need(pos, 8, end, "QMGMT EV")
        tsp, age = struct.unpack_from(">II", data, pos)
        pos += 8
    elif ptype == QMGMT_QRO:
        need(pos, 4, end, "QMGMT QRO")
        (tsp,) = U32.unpack_from(data, pos)
        pos += 4
    queue = None
    if flags & QMGMT_FLAG_QUEUE_NAME:
        queue = trailing_name(data[pos:end], MAX_NAME_LEN, "QMGMT", pos)
    elif pos != end:
        raise LBMRError("bytes after the queue management record", record="QMGMT", offset=pos)
    return UMQQueueMgmt(
        ptype,
        cfgsig,
        qid,
        qver,
        ip_str(ip),
        port,
        inst_idx,
        grp_idx,
        dep16,
        flags,
        tsp,
        instances,
        new_ver,
        age,
        queue,
    )


# 0x03 context information

CTXINFO_FLAG_QUERY = 0x8000  # clear = response
CTXINFO_FLAG_IP = 0x4000
CTXINFO_FLAG_INSTANCE = 0x2000
CTXINFO_FLAG_TNWG_SRC = 0x1000
CTXINFO_FLAG_TNWG_RCV = 0x0800
CTXINFO_FLAG_PROXY = 0x0400
CTXINFO_FLAG_NAME = 0x0001  # the name follows the 20-byte fixed part
_CTXINFO = struct.Struct(">BBHH4s8s")  # from offset 2: len, hop_count, flags, port, ip, instance
_CTXINFO_SIZE = 20
# len is a u8 counting the whole message from byte 0: the name (with NUL) gets 255 - 20 bytes.
CTXINFO_MAX_NAME_LEN = 255 - _CTXINFO_SIZE - 1


class ContextInfo(ExtRecord):
    """Context information (ext 0x03): context name queries/advertisements (store name
    resolution), DRO contexts marking themselves with CTXINFO_FLAG_TNWG_SRC/_RCV."""

    __slots__ = ("flags", "port", "ip", "instance", "name", "hop_count")
    ext_type = EXT_CONTEXT_INFO

    def __init__(
        self,
        flags: int,
        port: int = 0,
        ip: str = "0.0.0.0",
        instance: bytes = bytes(8),
        name: str | None = None,
        hop_count: int = 0,
    ) -> None:
        self.flags = (
            (flags | CTXINFO_FLAG_NAME) if name is not None else (flags & ~CTXINFO_FLAG_NAME)
        )
        self.port = port
        self.ip = ip
        self.instance = instance
        self.name = name
        self.hop_count = hop_count

    def encode(self) -> bytes:
        raw = b""
        if self.name is not None:
            raw = name_bytes(self.name, CTXINFO_MAX_NAME_LEN, "ContextInfo.name") + b"\0"
        return (
            _CTXINFO.pack(
                _CTXINFO_SIZE + len(raw),
                self.hop_count,
                self.flags,
                self.port,
                ip_bytes(self.ip),
                fixed_bytes(self.instance, 8, "ContextInfo.instance"),
            )
            + raw
        )


def decode_ctxinfo(data: bytes, end: int) -> ContextInfo:
    need(2, _CTXINFO.size, end, "CTXINFO")
    length, hops, flags, port, ip, inst = _CTXINFO.unpack_from(data, 2)
    if length != end:
        raise LBMRError(f"CTXINFO len {length} != message size {end}", record="CTXINFO", offset=2)
    name = None
    if flags & CTXINFO_FLAG_NAME:
        name = trailing_name(data[_CTXINFO_SIZE:end], MAX_NAME_LEN, "CTXINFO", _CTXINFO_SIZE)
    elif end != _CTXINFO_SIZE:
        raise LBMRError("bytes after CTXINFO without the name flag", record="CTXINFO", offset=20)
    return ContextInfo(flags, port, ip_str(ip), inst, name, hops)


# 0x04 topic resolution request

TRREQ_GW_REMOTE_INTEREST = 0x40
TRREQ_CONTEXT_QUERY = 0x20
TRREQ_CONTEXT_ADVERTISEMENT = 0x10
TRREQ_GATEWAY_META = 0x08  # reserved
TRREQ_ADVERTISEMENT = 0x04
TRREQ_QUERY = 0x02
TRREQ_WILDCARD_QUERY = 0x01


class TopicResRequest(ExtRecord):
    """Topic resolution request (ext 0x04): asks contexts to re-advertise / re-query (what
    ``lbm_context_topic_resolution_request()`` and DRO start-up send)."""

    __slots__ = ("flags",)
    ext_type = EXT_TOPIC_RES_REQUEST

    def __init__(self, flags: int) -> None:
        self.flags = flags

    def encode(self) -> bytes:
        return U16.pack(self.flags)


def decode_topic_res_request(data: bytes, end: int) -> TopicResRequest:
    if end != 4:
        raise LBMRError("TOPIC_RES_REQUEST must be 4 bytes", record="TOPIC_RES_REQUEST", offset=2)
    return TopicResRequest(U16.unpack_from(data, 2)[0])


# 0x05 gateway (TNWG / DRO) messages

TNWG_INTEREST = 0
TNWG_CTXINFO = 1
TNWG_TRREQ = 2
TNWG_INTEREST_FLAG_PATTERN = 0x80
TNWG_INTEREST_FLAG_CANCEL = 0x40
TNWG_INTEREST_FLAG_REFRESH = 0x20
TNWG_CTXINFO_FLAG_QUERY = 0x80000000
TNWG_CTXINFO_FLAG_TNWG_SRC = 0x40000000
TNWG_CTXINFO_FLAG_TNWG_RCV = 0x20000000
TNWG_CTXINFO_FLAG_PROXY = 0x10000000
_TNWG_HEAD = struct.Struct(">HHH")  # from offset 2: len [I], type, reserved
_TNWG_INTEREST_REC = struct.Struct(">HBBI")  # len, flags, pattern type, domain id
_TNWG_CTXINFO = struct.Struct(">HBBII")  # len, hop_count, reserved, flags1, flags2


class TNWGInterestRecord(Record):
    """One interest record: a topic (or pattern, TNWG_INTEREST_FLAG_PATTERN) and domain id."""

    __slots__ = ("symbol", "flags", "pattern_type", "domain_id")

    def __init__(
        self, symbol: str, flags: int = 0, pattern_type: int = 0, domain_id: int = 0
    ) -> None:
        self.symbol = symbol
        self.flags = flags
        self.pattern_type = pattern_type
        self.domain_id = domain_id


class TNWGInterest(ExtRecord):
    """DRO interest message (ext 0x05, TNWG type 0)."""

    __slots__ = ("records",)
    ext_type = EXT_TNWG
    tnwg_type = TNWG_INTEREST

    def __init__(
        self, records: tuple[TNWGInterestRecord, ...] | list[TNWGInterestRecord] = ()
    ) -> None:
        self.records = tuple(records)

    def encode(self) -> bytes:
        if len(self.records) > 0xFFFF:
            raise LocalProtocolError("more than 65535 TNWG interest records")
        recs = []
        for rec in self.records:
            raw = name_bytes(rec.symbol, MAX_NAME_LEN, "TNWG interest symbol") + b"\0"
            recs.append(
                _TNWG_INTEREST_REC.pack(8 + len(raw), rec.flags, rec.pattern_type, rec.domain_id)
                + raw
            )
        body = b"".join(recs)
        return _tnwg_wrap(
            TNWG_INTEREST, struct.pack(">HH", 4 + len(body), len(self.records)) + body
        )


class TNWGContextInfo(ExtRecord):
    """DRO context info (ext 0x05, TNWG type 1): hop count, flags and TNWG options."""

    __slots__ = ("hop_count", "flags1", "flags2", "options")
    ext_type = EXT_TNWG
    tnwg_type = TNWG_CTXINFO

    def __init__(
        self,
        hop_count: int,
        flags1: int,
        flags2: int = 0,
        options: tuple[Any, ...] | list[Any] = (),
    ) -> None:
        self.hop_count = hop_count
        self.flags1 = flags1
        self.flags2 = flags2
        self.options = tuple(options)

    def encode(self) -> bytes:
        opts = encode_tnwg_options(self.options)
        head = _TNWG_CTXINFO.pack(
            _TNWG_CTXINFO.size + len(opts), self.hop_count, 0, self.flags1, self.flags2
        )
        return _tnwg_wrap(TNWG_CTXINFO, head + opts)


class TNWGTopicResRequest(ExtRecord):
    """DRO topic resolution request (ext 0x05, TNWG type 2): TNWG options."""

    __slots__ = ("options",)
    ext_type = EXT_TNWG
    tnwg_type = TNWG_TRREQ

    def __init__(self, options: tuple[Any, ...] | list[Any] = ()) -> None:
        self.options = tuple(options)

    def encode(self) -> bytes:
        opts = encode_tnwg_options(self.options)
        return _tnwg_wrap(TNWG_TRREQ, U16.pack(2 + len(opts)) + opts)


class UnknownTNWG(ExtRecord):
    """A TNWG message of another type: its body after the 8-byte TNWG header, kept raw."""

    __slots__ = ("tnwg_type", "raw")
    ext_type = EXT_TNWG

    def __init__(self, tnwg_type: int, raw: bytes) -> None:
        self.tnwg_type = tnwg_type
        self.raw = raw

    def encode(self) -> bytes:
        if self.tnwg_type in (TNWG_INTEREST, TNWG_CTXINFO, TNWG_TRREQ):
            raise LocalProtocolError("UnknownTNWG.tnwg_type is a known type; use its class")
        return _tnwg_wrap(self.tnwg_type, bytes(self.raw))


def _tnwg_wrap(tnwg_type: int, body: bytes) -> bytes:
    total = 8 + len(body)
    if total > 0xFFFF:
        raise LocalProtocolError("TNWG message longer than 65535 bytes")
    return _TNWG_HEAD.pack(total, tnwg_type, 0) + body


def decode_tnwg(data: bytes, end: int) -> ExtRecord:
    need(2, 6, end, "TNWG")
    _len, tnwg_type, _res = _TNWG_HEAD.unpack_from(data, 2)
    pos = 8
    if tnwg_type == TNWG_INTEREST:
        need(pos, 4, end, "TNWG interest")
        _blen, count = struct.unpack_from(">HH", data, pos)
        pos += 4
        records = []
        for _ in range(count):
            need(pos, 8, end, "TNWG interest record")
            rlen, flags, ptype, domain = _TNWG_INTEREST_REC.unpack_from(data, pos)
            rec_end = pos + rlen
            if rlen < 9 or rec_end > end:
                raise LBMRError(
                    f"bad interest record len {rlen}", record="TNWG interest", offset=pos
                )
            symbol, after = read_cstring(data, pos + 8, rec_end, MAX_NAME_LEN, "TNWG interest")
            if after != rec_end:
                raise LBMRError(
                    "interest record len does not end at the NUL",
                    record="TNWG interest",
                    offset=pos,
                )
            records.append(TNWGInterestRecord(symbol, flags, ptype, domain))
            pos = rec_end
        if pos != end:
            raise LBMRError(
                "bytes after the TNWG interest records", record="TNWG interest", offset=pos
            )
        return TNWGInterest(records)
    if tnwg_type == TNWG_CTXINFO:
        need(pos, _TNWG_CTXINFO.size, end, "TNWG ctxinfo")
        rlen, hops, _r, flags1, flags2 = _TNWG_CTXINFO.unpack_from(data, pos)
        if pos + rlen != end or rlen < _TNWG_CTXINFO.size:
            raise LBMRError(
                f"TNWG ctxinfo len {rlen} does not match", record="TNWG ctxinfo", offset=pos
            )
        options = decode_tnwg_options(data, pos + _TNWG_CTXINFO.size, end)
        return TNWGContextInfo(hops, flags1, flags2, options)
    if tnwg_type == TNWG_TRREQ:
        need(pos, 2, end, "TNWG trreq")
        (rlen,) = U16.unpack_from(data, pos)
        if pos + rlen != end or rlen < 2:
            raise LBMRError(
                f"TNWG trreq len {rlen} does not match", record="TNWG trreq", offset=pos
            )
        return TNWGTopicResRequest(decode_tnwg_options(data, pos + 2, end))
    return UnknownTNWG(tnwg_type, data[pos:end])


# 0x06 remote domain route

_RDR_HEAD = struct.Struct(">H4sHHI")  # from offset 2: num_domains, ip, port, reserved, length [I]


class RemoteDomainRoute(ExtRecord):
    """Remote domain route (ext 0x06): the domains reachable through the DRO portal at ip:port."""

    __slots__ = ("ip", "port", "domains")
    ext_type = EXT_REMOTE_DOMAIN_ROUTE

    def __init__(self, ip: str, port: int, domains: tuple[int, ...] | list[int] = ()) -> None:
        self.ip = ip
        self.port = port
        self.domains = tuple(domains)

    def encode(self) -> bytes:
        n = len(self.domains)
        if n > 0xFFFF:
            raise LocalProtocolError("more than 65535 domains in a route")
        return _RDR_HEAD.pack(n, ip_bytes(self.ip), self.port, 0, 16 + 4 * n) + struct.pack(
            f">{n}I", *self.domains
        )


def decode_remote_domain_route(data: bytes, end: int) -> RemoteDomainRoute:
    need(2, _RDR_HEAD.size, end, "REMOTE_DOMAIN_ROUTE")
    n, ip, port, _res, _length = _RDR_HEAD.unpack_from(data, 2)
    if 16 + 4 * n != end:
        raise LBMRError(
            f"{n} domains do not fill the {end}-byte message",
            record="REMOTE_DOMAIN_ROUTE",
            offset=2,
        )
    return RemoteDomainRoute(ip_str(ip), port, struct.unpack_from(f">{n}I", data, 16))


# 0x07 remote context information

RCTXINFO_FLAG_QUERY = 0x8000
_RCTX_HEAD = struct.Struct(">HHH")  # from offset 2: len [I], num_recs, reserved
_RCTX_REC = struct.Struct(">HH")  # len (incl. this head), flags


class RCtxInfoRecord(Record):
    """One remote context information record: flags (RCTXINFO_FLAG_QUERY) and options."""

    __slots__ = ("options", "flags")

    def __init__(self, options: tuple[Any, ...] | list[Any] = (), flags: int = 0) -> None:
        self.options = tuple(options)
        self.flags = flags


class RemoteContextInfo(ExtRecord):
    """Remote context information (ext 0x07): cross-domain context name resolution via DROs."""

    __slots__ = ("records",)
    ext_type = EXT_REMOTE_CONTEXT_INFO

    def __init__(self, records: tuple[RCtxInfoRecord, ...] | list[RCtxInfoRecord] = ()) -> None:
        self.records = tuple(records)

    def encode(self) -> bytes:
        if len(self.records) > 0xFFFF:
            raise LocalProtocolError("more than 65535 remote context info records")
        recs = []
        for rec in self.records:
            opts = encode_rctx_options(rec.options)
            if 4 + len(opts) > 0xFFFF:
                raise LocalProtocolError("remote context info record longer than 65535 bytes")
            recs.append(_RCTX_REC.pack(4 + len(opts), rec.flags) + opts)
        body = b"".join(recs)
        total = 8 + len(body)
        if total > 0xFFFF:
            raise LocalProtocolError("remote context info message longer than 65535 bytes")
        return _RCTX_HEAD.pack(total, len(self.records), 0) + body


def decode_remote_context_info(data: bytes, end: int) -> RemoteContextInfo:
    need(2, _RCTX_HEAD.size, end, "RCTXINFO")
    _len, count, _res = _RCTX_HEAD.unpack_from(data, 2)
    pos = 8
    records = []
    for _ in range(count):
        need(pos, 4, end, "RCTXINFO record")
        rlen, flags = _RCTX_REC.unpack_from(data, pos)
        rec_end = pos + rlen
        if rlen < 4 or rec_end > end:
            raise LBMRError(f"bad record len {rlen}", record="RCTXINFO record", offset=pos)
        records.append(RCtxInfoRecord(decode_rctx_options(data, pos + 4, rec_end), flags))
        pos = rec_end
    if pos != end:
        raise LBMRError(
            "bytes after the remote context info records", record="RCTXINFO", offset=pos
        )
    return RemoteContextInfo(records)


class UnknownExt(ExtRecord):
    """An extended message of an unknown ext type: the bytes after ver_type and ext_type (at
    least 2, so that the datagram has the 4 bytes every LBMR datagram starts with)."""

    __slots__ = ("ext_code", "raw")

    def __init__(self, ext_code: int, raw: bytes) -> None:
        self.ext_code = ext_code
        self.raw = raw

    def encode(self) -> bytes:
        if self.ext_code in EXT_DECODERS:
            raise LocalProtocolError("UnknownExt.ext_code is a known ext type; use its class")
        if len(self.raw) < 2:
            # every LBMR datagram carries at least the 4-byte header
            raise LocalProtocolError("UnknownExt.raw must be at least 2 bytes")
        return bytes(self.raw)


EXT_DECODERS: dict[int, Any] = {
    EXT_PSER: decode_pser,
    EXT_UMQ_QMGMT: decode_qmgmt,
    EXT_CONTEXT_INFO: decode_ctxinfo,
    EXT_TOPIC_RES_REQUEST: decode_topic_res_request,
    EXT_TNWG: decode_tnwg,
    EXT_REMOTE_DOMAIN_ROUTE: decode_remote_domain_route,
    EXT_REMOTE_CONTEXT_INFO: decode_remote_context_info,
}

# The named constants (flag bits, type codes, limits) are part of the public API as well.
__all__ += sorted(name for name in dir() if name.isupper() and not name.startswith("_"))
