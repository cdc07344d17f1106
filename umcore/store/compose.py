"""The store protocol's messages: which LBMC headers make each one, encode and decode, one table.

Theory of operation
-------------------
Every persistence control message is an LBMC CONTROL message (a RETRANS data message for a
retransmission) whose chain holds one *key* header saying what the message is (UME_PREG,
UME_ACK, ...) and *companion* headers carrying the rest (TOPICNAME, UME_STOREID, ...).  Each
message kind is a frozen slotted dataclass here, a *composition*, with ``encode() -> bytes``;
:func:`decode` turns a decoded :class:`~umcore.wire.lbmc.LBMCMessage` back into one, driven by
:data:`TABLE` (key header -> the rows that may own it -> composition class).  The store core and
the persistent sources and receivers (issue 17) both speak through this module, so each side's
idea of a message is the other's.

The table (wire-lbmc-ump.md section 9; which companions ride with which key is **[inferred]**
wherever a row says so: the dissector shows every header's fields, never which ones real UM
puts together, trap 33 of persistence-store.md)::

    composition            type     key header (selector)            required    optional companions
    SourceRegistration     CONTROL  UME_PREG (S=1, D=0)              TOPICNAME   CTXINST, UME_STOREID,
                                                                                 UME_CAPABILITY, UME_CLIENT_LIFETIME,
                                                                                 UME_SID, UME_PROXY_SRC, EXTOPT CFGOPT
    ReceiverRegistration   CONTROL  UME_PREG (S=0, D=0)              -           TOPICNAME, CTXINST, UME_STOREID,
                                                                                 UME_CAPABILITY, UME_CLIENT_LIFETIME,
                                                                                 UME_SID, EXTOPT CFGOPT (rpp mode)
    Deregistration         CONTROL  UME_PREG (D=1)                   -           UME_SID, UME_STOREID
    RegistrationResponse   CONTROL  UME_PREG_RESP                    -           UME_STOREID, UME_CTXINSTS, UME_SID
    StabilityAck           CONTROL  UME_ACK (type 1 STABLE)          UME_STOREID UME_RANGED_ACK
    ConsumptionAck         CONTROL  UME_ACK (type 0 CDELV)           -           -
    Keepalive              CONTROL  UME_KEEPALIVE                    -           UME_STOREID
    ReceiverKeepalive      CONTROL  UME_RCV_KEEPALIVE                -           -
    RetransmissionRequest  CONTROL  UME_RXREQ (1..32 of them)        -           -
    SriRequest             CONTROL  SRI_REQ                          -           -
    Sri                    CONTROL  SRI                              UME_STORE_INFO_EXT (1..25)
                                                                                 UME_STORE_GROUP (0..5), UME_STORE_DOMAIN,
                                                                                 TOPIC_IDX
    Retransmission         RETRANS  OTID                             TOPICNAME   (the stored frame's own chain)

Inferred choices, each said once:

* a source registration carries its topic in TOPICNAME (needed for pattern matching and
  ETOPICNAME), its context instance in CTXINST, its store index in UME_STOREID, its client
  activity timeout / state lifetime in UME_CLIENT_LIFETIME (milliseconds; 0 = the Store's),
  its Session ID in UME_SID and its proxy request in UME_PROXY_SRC (E flag);
* RPP repository overrides travel as EXTOPT CFGOPT entries of scope 1 (source) named after the
  source options (``ume_repository_size_threshold``, ``ume_repository_size_limit``,
  ``ume_repository_disk_file_size_limit``, ``ume_write_delay``, ``ume_flight_size_bytes``,
  ``ume_repository_ack_on_reception``), values in decimal (wire-lbmc-ump.md section 8);
* a receiver's RPP mode: PREG W flag for modes 1 and 2; mode 2 (non-blocking) adds a CFGOPT
  entry of scope 2 (receiver) ``ume_receiver_paced_persistence`` = ``2`` (the dissector shows no
  bit for it);
* the stability NAK is a stability ACK with UME_ACK flag bit 0x04 (:data:`ACK_FLAG_NAK`): the
  docs describe "an ACK with a NAK flag", the dissector names no such bit, 0x04 is unused;
* a batched stability ACK is UME_ACK (seqnum = first) + UME_RANGED_ACK (first..last) +
  UME_STOREID, the golden vector's combination (section 11 of wire-lbmc-ump.md);
* a stability ACK's ``id_2`` is the source's topic index and ``rcv_reg_id`` 0; a consumption
  ACK's ``id_2`` is the source RegID (the addressee is the Store);
* a store keepalive names the store with UME_STOREID; ``reg_id`` is the kept-alive client's;
* a registration response to a receiver echoes the source's Session ID in UME_SID (the
  ``SRC_SID`` flag of the receiver's Registration Success);
* an SRI names its topic by a TOPIC_IDX header after the Store headers when the source knows
  its topic index (:attr:`Sri.topic_idx`): the SRI header names no topic and one transport
  session may carry many topics;
* a retransmission is the stored frame with type RETRANS and OTID + TOPICNAME spliced in front
  of its own chain, so the receiver maps it to the source exactly as it maps a source's late-join
  retransmission (:mod:`umcore.features.latejoin`): :func:`splice_retransmission` does it with
  one precomputed prefix per source and no re-encode of the frame.

:func:`decode` picks the first header of the chain that is a key of the table; a message with
none is not a store message (None).  A required companion missing, a key header's value out of
range, or a malformed companion raises :class:`StoreProtocolError` (a
:class:`~umcore.errors.RemoteProtocolError`): the peer's bad bytes cost it the message.
"""

from __future__ import annotations

import struct
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import ClassVar, Protocol

from umcore.errors import LocalProtocolError, RemoteProtocolError
from umcore.wire import lbmc
from umcore.wire.lbmc_props import CfgOpt, decode_cfgopts, encode_cfgopts, extopt_headers
from umcore.wire.lbmc_props import reassemble_extopts as _reassemble

__all__ = [
    "ACK_FLAG_NAK",
    "CFGOPT_SCOPE_RECEIVER",
    "CFGOPT_SCOPE_SOURCE",
    "ERROR_TEXTS",
    "MAX_GROUPS",
    "MAX_RXREQ_PER_MESSAGE",
    "MAX_STORES",
    "NO_SQN",
    "RPP_OPTIONS",
    "TABLE",
    "Composition",
    "ConsumptionAck",
    "Deregistration",
    "Keepalive",
    "ReceiverKeepalive",
    "ReceiverRegistration",
    "RegistrationResponse",
    "Retransmission",
    "RetransmissionRequest",
    "Row",
    "RxReq",
    "SourceRegistration",
    "Sri",
    "SriGroup",
    "SriRequest",
    "SriStore",
    "StabilityAck",
    "StoreProtocolError",
    "decode",
    "encode_stability",
    "parse_stability",
    "retransmission_prefix",
    "rxreq_messages",
    "splice_retransmission",
]

Address = tuple[str, int]

# "No sequence number yet" (a fresh source's lead, a receiver that has ACKed nothing).
NO_SQN = 0xFFFFFFFF
# Undocumented UME_ACK flag bit used for the stability NAK [inferred; see the module docstring].
ACK_FLAG_NAK = 0x04
# EXTOPT CFGOPT scopes (wire-lbmc-ump.md section 8).
CFGOPT_SCOPE_SOURCE = 1
CFGOPT_SCOPE_RECEIVER = 2
# The EXTOPT option id our registrations use for their CFGOPT block (any id: one option).
_CFGOPT_ID = 1
# LBM_MAX_UME_STORES / LBM_MAX_UME_GROUPS (lbm.h): a source names at most 25 Stores in 5 groups.
MAX_STORES = 25
MAX_GROUPS = 5
# UME_RXREQ headers per CONTROL message (28 bytes each: 32 keep a request under 1 KB; the same
# limit as umcore.features.latejoin's).
MAX_RXREQ_PER_MESSAGE = 32
# Session IDs are 64-bit, non-zero when set, at most 0xFFFFFFFFFFFFFFFE (0 = none).
_MAX_SESSION_ID = 0xFFFFFFFFFFFFFFFE
_U32 = 0xFFFFFFFF
# A ranged ACK may cover at most half the sequence space (serial-number arithmetic).
_MAX_RANGE = 0x7FFFFFFF

# The source options an RPP source may override, and the Store topic option bounding each
# (persistence-store.md 1.10).  ``ume_repository_ack_on_reception`` is bounded by the
# permission ``repository-allow-ack-on-reception`` (0/1).
RPP_OPTIONS: dict[str, str] = {
    "ume_repository_size_threshold": "repository-size-threshold",
    "ume_repository_size_limit": "repository-size-limit",
    "ume_repository_disk_file_size_limit": "repository-disk-file-size-limit",
    "ume_write_delay": "repository-disk-write-delay",
    "ume_flight_size_bytes": "source-flight-size-bytes-maximum",
    "ume_repository_ack_on_reception": "repository-allow-ack-on-reception",
}
_RCV_RPP_OPTION = "ume_receiver_paced_persistence"

# UM's texts for the PREG_RESP error codes (the dissector's value strings).
ERROR_TEXTS: dict[int, str] = {
    lbmc.PREG_RESP_ENOPATTERN: "Store has no matching pattern",
    lbmc.PREG_RESP_ESRCREGID: "Source RegID not found",
    lbmc.PREG_RESP_EREGID: "RegID is in use by a receiver",
    lbmc.PREG_RESP_ETOPICNAME: "Topic name does not match previous registration",
    lbmc.PREG_RESP_EACTIVE: "RegID is in use by a different source",
    lbmc.PREG_RESP_ECONFIG: "Source and store configuration values are incompatible",
}


# Stability ACKs, precompiled: CONTROL header, UME_ACK (20), [UME_RANGED_ACK (12),] UME_STOREID.
_ACK1 = struct.Struct("!BBHBBBBIIIIBBH")
_ACKR = struct.Struct("!BBHBBBBIIIIBBHIIBBH")


class StoreProtocolError(RemoteProtocolError):
    """A peer's store message lacks a required header or carries a value out of range."""


def _bad(message: str, record: str) -> StoreProtocolError:
    return StoreProtocolError(message, record=record)


def _control(headers: list[lbmc.Header]) -> bytes:
    return lbmc.encode(lbmc.LBMCMessage(lbmc.MSG_CONTROL, headers=headers))


def _ip(addr: str) -> int:
    try:
        return lbmc.ip4_from_str(addr)
    except ValueError:
        raise LocalProtocolError(f"not an IPv4 address: {addr!r}") from None


def _topic_bytes(topic: str) -> bytes:
    data = topic.encode() + b"\0"
    if not 2 <= len(data) <= lbmc.MAX_HEADER_LEN - 4:
        raise LocalProtocolError(f"topic name must be 1..250 bytes: {topic!r}")
    return data


def _topic_text(hdr: lbmc.TopicName, record: str) -> str:
    raw = hdr.topic[:-1] if hdr.topic.endswith(b"\0") else hdr.topic
    try:
        text = raw.decode()
    except UnicodeDecodeError:
        raise _bad("topic name is not UTF-8", record) from None
    if not text or "\0" in text:
        raise _bad("empty or NUL-bearing topic name", record)
    return text


def _session(hdr: lbmc.UmeSid | None, record: str) -> int:
    if hdr is None:
        return 0
    if hdr.sid > _MAX_SESSION_ID:
        raise _bad(f"Session ID {hdr.sid:#x} out of range", record)
    return hdr.sid


def _check_session(sid: int) -> None:
    if not 0 <= sid <= _MAX_SESSION_ID:
        raise LocalProtocolError(f"Session ID out of range: {sid:#x}")


def _cfgopts(msg: lbmc.LBMCMessage, record: str) -> list[CfgOpt]:
    try:
        blocks = _reassemble(msg.headers)
        out: list[CfgOpt] = []
        for _id, subtype, data in blocks:
            if subtype == lbmc.EXTOPT_CFGOPT:
                out.extend(decode_cfgopts(data))
        return out
    except RemoteProtocolError as exc:
        raise _bad(f"bad EXTOPT CFGOPT: {exc.message}", record) from None


def _uint(text: str, name: str, record: str) -> int:
    if not text.isdigit() or len(text) > 20:
        raise _bad(f"{name}={text!r} is not a non-negative integer", record)
    return int(text)


def _lifetime(hdr: lbmc.UmeClientLifetime | None) -> tuple[int, int]:
    return (0, 0) if hdr is None else (hdr.activity_tmo, hdr.lifetime)


# ============================================================================================
# Compositions
# ============================================================================================


class Composition(Protocol):
    """What every composition offers."""

    def encode(self) -> bytes: ...


@dataclass(frozen=True, slots=True)
class SourceRegistration:
    """A source's registration request (PREG S=1): ``reg_id`` 0 asks the Store to assign one;
    ``reply_to`` is the source's request port (where answers go); ``activity_timeout_ms`` /
    ``state_lifetime_ms`` 0 = the Store's values; ``rpp_options`` the RPP overrides (names of
    :data:`RPP_OPTIONS`), sorted by name."""

    topic: str
    transport_idx: int
    topic_idx: int
    reply_to: Address
    reg_id: int = 0
    marker: int = 0
    store_index: int = 0
    session_id: int = 0
    ctxinst: bytes = bytes(8)
    capabilities: int = lbmc.CAP_QC | lbmc.CAP_CLIENT_LIFETIME
    activity_timeout_ms: int = 0
    state_lifetime_ms: int = 0
    proxy: bool = False
    rpp: bool = False
    rpp_options: tuple[tuple[str, int], ...] = ()
    forward_acks: bool = True

    RECORD: ClassVar[str] = "source registration"

    def encode(self) -> bytes:
        _check_session(self.session_id)
        flags = (lbmc.PREG_FLAG_W if self.rpp else 0) | (
            0 if self.forward_acks else lbmc.PREG_FLAG_F
        )
        ip, port = self.reply_to
        headers: list[lbmc.Header] = [
            lbmc.UmePreg(
                flags, True, self.marker, self.reg_id, self.transport_idx, self.topic_idx,
                0, port, 0, _ip(ip),
            ),
            lbmc.TopicName(_topic_bytes(self.topic)),
            lbmc.CtxInst(0, self.ctxinst),
            lbmc.UmeStoreId(self.store_index),
            lbmc.UmeCapability(self.capabilities),
            lbmc.UmeClientLifetime(0, self.activity_timeout_ms, self.state_lifetime_ms, 0),
        ]  # fmt: skip
        if self.session_id:
            headers.append(lbmc.UmeSid(0, self.session_id))
        if self.proxy:
            headers.append(lbmc.UmeProxySrc(lbmc.PROXY_SRC_ENABLE))
        if self.rpp_options:
            for name, _value in self.rpp_options:
                if name not in RPP_OPTIONS:
                    raise LocalProtocolError(f"not an RPP source option: {name!r}")
            data = encode_cfgopts(
                CfgOpt(CFGOPT_SCOPE_SOURCE, n, str(v)) for n, v in self.rpp_options
            )
            headers.extend(extopt_headers(data, opt_id=_CFGOPT_ID))
        return _control(headers)

    @classmethod
    def from_message(cls, msg: lbmc.LBMCMessage, key: lbmc.Header) -> SourceRegistration:
        assert isinstance(key, lbmc.UmePreg)
        rec = cls.RECORD
        topic = msg.find(lbmc.TopicName)
        if topic is None:
            raise _bad("no TOPICNAME header", rec)
        options: dict[str, int] = {}
        for opt in _cfgopts(msg, rec):
            if opt.scope == CFGOPT_SCOPE_SOURCE and opt.name in RPP_OPTIONS:
                options[opt.name] = _uint(opt.value, opt.name, rec)
            # other options are not ours to judge (forward compatibility): skipped
        ctx = msg.find(lbmc.CtxInst)
        sid = msg.find(lbmc.UmeStoreId)
        cap = msg.find(lbmc.UmeCapability)
        proxy = msg.find(lbmc.UmeProxySrc)
        activity, lifetime = _lifetime(msg.find(lbmc.UmeClientLifetime))
        return cls(
            topic=_topic_text(topic, rec),
            transport_idx=key.transport_idx,
            topic_idx=key.topic_idx,
            reply_to=(lbmc.ip4_to_str(key.resp_ip), key.resp_port),
            reg_id=key.reg_id,
            marker=key.marker,
            store_index=0 if sid is None else sid.store_id,
            session_id=_session(msg.find(lbmc.UmeSid), rec),
            ctxinst=bytes(8) if ctx is None else bytes(ctx.ctxinst),
            capabilities=0 if cap is None else cap.flags,
            activity_timeout_ms=activity,
            state_lifetime_ms=lifetime,
            proxy=proxy is not None and bool(proxy.flags & lbmc.PROXY_SRC_ENABLE),
            rpp=bool(key.flags & lbmc.PREG_FLAG_W),
            rpp_options=tuple(sorted(options.items())),
            forward_acks=not key.flags & lbmc.PREG_FLAG_F,
        )


@dataclass(frozen=True, slots=True)
class ReceiverRegistration:
    """A receiver's registration request (PREG S=0) with one source's Store: ``src_reg_id`` is
    the source's RegID at that Store (from the SRI); ``rpp_mode`` 0 SPP, 1 RPP blocking, 2 RPP
    non-blocking; ``topic`` "" = not sent."""

    src_reg_id: int
    transport_idx: int
    topic_idx: int
    reply_to: Address
    reg_id: int = 0
    marker: int = 0
    store_index: int = 0
    topic: str = ""
    session_id: int = 0
    ctxinst: bytes = bytes(8)
    capabilities: int = lbmc.CAP_QC | lbmc.CAP_CLIENT_LIFETIME
    activity_timeout_ms: int = 0
    state_lifetime_ms: int = 0
    rpp_mode: int = 0

    RECORD: ClassVar[str] = "receiver registration"

    def encode(self) -> bytes:
        _check_session(self.session_id)
        if self.rpp_mode not in (0, 1, 2):
            raise LocalProtocolError(f"receiver RPP mode must be 0, 1 or 2: {self.rpp_mode}")
        ip, port = self.reply_to
        headers: list[lbmc.Header] = [
            lbmc.UmePreg(
                lbmc.PREG_FLAG_W if self.rpp_mode else 0, False, self.marker, self.reg_id,
                self.transport_idx, self.topic_idx, self.src_reg_id, port, 0, _ip(ip),
            ),
        ]  # fmt: skip
        if self.topic:
            headers.append(lbmc.TopicName(_topic_bytes(self.topic)))
        headers += [
            lbmc.CtxInst(0, self.ctxinst),
            lbmc.UmeStoreId(self.store_index),
            lbmc.UmeCapability(self.capabilities),
            lbmc.UmeClientLifetime(0, self.activity_timeout_ms, self.state_lifetime_ms, 0),
        ]
        if self.session_id:
            headers.append(lbmc.UmeSid(0, self.session_id))
        if self.rpp_mode == 2:
            data = encode_cfgopts([CfgOpt(CFGOPT_SCOPE_RECEIVER, _RCV_RPP_OPTION, "2")])
            headers.extend(extopt_headers(data, opt_id=_CFGOPT_ID))
        return _control(headers)

    @classmethod
    def from_message(cls, msg: lbmc.LBMCMessage, key: lbmc.Header) -> ReceiverRegistration:
        assert isinstance(key, lbmc.UmePreg)
        rec = cls.RECORD
        mode = 1 if key.flags & lbmc.PREG_FLAG_W else 0
        for opt in _cfgopts(msg, rec):
            if opt.scope != CFGOPT_SCOPE_RECEIVER or opt.name != _RCV_RPP_OPTION:
                continue  # not ours to judge (forward compatibility)
            value = _uint(opt.value, opt.name, rec)
            if value not in (1, 2) or not mode:
                raise _bad(f"{_RCV_RPP_OPTION}={value} with W={mode}", rec)
            mode = value
        topic = msg.find(lbmc.TopicName)
        ctx = msg.find(lbmc.CtxInst)
        sid = msg.find(lbmc.UmeStoreId)
        cap = msg.find(lbmc.UmeCapability)
        activity, lifetime = _lifetime(msg.find(lbmc.UmeClientLifetime))
        return cls(
            src_reg_id=key.src_reg_id,
            transport_idx=key.transport_idx,
            topic_idx=key.topic_idx,
            reply_to=(lbmc.ip4_to_str(key.resp_ip), key.resp_port),
            reg_id=key.reg_id,
            marker=key.marker,
            store_index=0 if sid is None else sid.store_id,
            topic="" if topic is None else _topic_text(topic, rec),
            session_id=_session(msg.find(lbmc.UmeSid), rec),
            ctxinst=bytes(8) if ctx is None else bytes(ctx.ctxinst),
            capabilities=0 if cap is None else cap.flags,
            activity_timeout_ms=activity,
            state_lifetime_ms=lifetime,
            rpp_mode=mode,
        )


@dataclass(frozen=True, slots=True)
class Deregistration:
    """A source's (``source``) or receiver's deregistration (PREG D=1)."""

    source: bool
    reg_id: int
    transport_idx: int
    topic_idx: int
    reply_to: Address
    src_reg_id: int = 0
    marker: int = 0
    store_index: int = 0
    session_id: int = 0

    RECORD: ClassVar[str] = "deregistration"

    def encode(self) -> bytes:
        _check_session(self.session_id)
        ip, port = self.reply_to
        headers: list[lbmc.Header] = [
            lbmc.UmePreg(
                lbmc.PREG_FLAG_D, self.source, self.marker, self.reg_id, self.transport_idx,
                self.topic_idx, self.src_reg_id, port, 0, _ip(ip),
            ),
            lbmc.UmeStoreId(self.store_index),
        ]  # fmt: skip
        if self.session_id:
            headers.append(lbmc.UmeSid(0, self.session_id))
        return _control(headers)

    @classmethod
    def from_message(cls, msg: lbmc.LBMCMessage, key: lbmc.Header) -> Deregistration:
        assert isinstance(key, lbmc.UmePreg)
        sid = msg.find(lbmc.UmeStoreId)
        return cls(
            source=key.source,
            reg_id=key.reg_id,
            transport_idx=key.transport_idx,
            topic_idx=key.topic_idx,
            reply_to=(lbmc.ip4_to_str(key.resp_ip), key.resp_port),
            src_reg_id=key.src_reg_id,
            marker=key.marker,
            store_index=0 if sid is None else sid.store_id,
            session_id=_session(msg.find(lbmc.UmeSid), cls.RECORD),
        )


@dataclass(frozen=True, slots=True)
class RegistrationResponse:
    """The Store's answer to a registration or deregistration (PREG_RESP).

    Success (``error`` None): ``old`` (O: state existed), ``no_acks`` (N: no cache / no ACKs),
    ``rpp`` (W: RPP granted), ``deregistered`` (D).  A source's ``low_seqnum``/``high_seqnum``
    are the oldest and newest sequence numbers the Store holds (``high`` 0xFFFFFFFF: none); a
    receiver's ``low_seqnum`` is where its recovery starts.  Error: ``error`` is the code
    (``lbmc.PREG_RESP_E*``), :attr:`error_text` UM's text for it.  ``session_id`` to a receiver
    is its source's Session ID (0: none)."""

    source: bool
    reg_id: int
    transport_idx: int
    topic_idx: int
    low_seqnum: int = 0
    high_seqnum: int = NO_SQN
    marker: int = 0
    store_index: int = 0
    old: bool = False
    no_acks: bool = False
    rpp: bool = False
    deregistered: bool = False
    error: int | None = None
    ctxinst: bytes | None = None
    session_id: int = 0

    RECORD: ClassVar[str] = "registration response"

    @property
    def error_text(self) -> str | None:
        if self.error is None:
            return None
        return ERROR_TEXTS.get(self.error, f"error code {self.error}")

    def code(self) -> int:
        if self.error is not None:
            if self.error not in ERROR_TEXTS:
                raise LocalProtocolError(f"unknown PREG_RESP error code {self.error}")
            return lbmc.PREG_RESP_E | self.error | (lbmc.PREG_RESP_O if self.old else 0)
        return (
            (lbmc.PREG_RESP_O if self.old else 0)
            | (lbmc.PREG_RESP_N if self.no_acks else 0)
            | (lbmc.PREG_RESP_W if self.rpp else 0)
            | (lbmc.PREG_RESP_D if self.deregistered else 0)
        )

    def encode(self) -> bytes:
        _check_session(self.session_id)
        headers: list[lbmc.Header] = [
            lbmc.UmePregResp(
                self.code(), self.source, self.marker, self.reg_id, self.transport_idx,
                self.topic_idx, self.low_seqnum, self.high_seqnum,
            ),
            lbmc.UmeStoreId(self.store_index),
        ]  # fmt: skip
        if self.ctxinst is not None:
            headers.append(lbmc.CtxInstS(0, self.ctxinst))
        if self.session_id:
            headers.append(lbmc.UmeSid(0, self.session_id))
        return _control(headers)

    @classmethod
    def from_message(cls, msg: lbmc.LBMCMessage, key: lbmc.Header) -> RegistrationResponse:
        assert isinstance(key, lbmc.UmePregResp)
        rec = cls.RECORD
        code = key.code
        error = key.error
        if error is not None and error not in ERROR_TEXTS:
            raise _bad(f"unknown error code {error}", rec)
        sid = msg.find(lbmc.UmeStoreId)
        ctx = msg.find(lbmc.CtxInstS)
        success = error is None
        return cls(
            source=key.source,
            reg_id=key.reg_id,
            transport_idx=key.transport_idx,
            topic_idx=key.topic_idx,
            low_seqnum=key.low_seqnum,
            high_seqnum=key.high_seqnum,
            marker=key.marker,
            store_index=0 if sid is None else sid.store_id,
            old=bool(code & lbmc.PREG_RESP_O),
            no_acks=success and bool(code & lbmc.PREG_RESP_N),
            rpp=success and bool(code & lbmc.PREG_RESP_W),
            deregistered=success and bool(code & lbmc.PREG_RESP_D),
            error=error,
            ctxinst=None if ctx is None else bytes(ctx.ctxinst),
            session_id=_session(msg.find(lbmc.UmeSid), rec),
        )


@dataclass(frozen=True, slots=True)
class StabilityAck:
    """Store -> source: ``first..last`` (serial order) are stable at Store ``store_index``
    (``nak``: the Store declared them lost, the stability NAK).  One sequence number is a plain
    UME_ACK; more add UME_RANGED_ACK."""

    transport_idx: int
    topic_idx: int
    first: int
    last: int
    store_index: int = 0
    nak: bool = False

    RECORD: ClassVar[str] = "stability ACK"

    def encode(self) -> bytes:
        return encode_stability(
            self.transport_idx, self.topic_idx, self.first, self.last, self.store_index, self.nak
        )

    @classmethod
    def from_message(cls, msg: lbmc.LBMCMessage, key: lbmc.Header) -> StabilityAck:
        assert isinstance(key, lbmc.UmeAck)
        rec = cls.RECORD
        sid = msg.find(lbmc.UmeStoreId)
        if sid is None:
            raise _bad("no UME_STOREID header", rec)
        first = last = key.seqnum
        ranged = msg.find(lbmc.UmeRangedAck)
        if ranged is not None:
            first, last = ranged.first_seqnum, ranged.last_seqnum
            if (last - first) & _U32 > _MAX_RANGE:
                raise _bad(f"ranged ACK {first}..{last} out of order", rec)
        return cls(
            transport_idx=key.transport_idx,
            topic_idx=key.id_2,
            first=first,
            last=last,
            store_index=sid.store_id,
            nak=bool(key.flags & ACK_FLAG_NAK),
        )


def encode_stability(
    transport_idx: int, topic_idx: int, first: int, last: int, store_index: int, nak: bool
) -> bytes:
    """A :class:`StabilityAck`'s bytes without building one (the Store's per-batch path): one
    precompiled struct per shape."""
    if (last - first) & _U32 > _MAX_RANGE:
        raise LocalProtocolError(f"ranged ACK {first}..{last} out of order")
    if not 0 <= store_index <= 0x7FFF:
        raise LocalProtocolError(f"store_id out of range: {store_index}")
    flags = ACK_FLAG_NAK if nak else 0
    try:
        if last == first:
            return _ACK1.pack(
                lbmc.MSG_CONTROL, lbmc.UmeAck.ID, _ACK1.size,
                lbmc.UmeStoreId.ID, 20, flags, lbmc.ACK_TYPE_STABLE, transport_idx, topic_idx,
                0, first,
                lbmc.HDR_NONE, 4, store_index,
            )  # fmt: skip
        return _ACKR.pack(
            lbmc.MSG_CONTROL, lbmc.UmeAck.ID, _ACKR.size,
            lbmc.UmeRangedAck.ID, 20, flags, lbmc.ACK_TYPE_STABLE, transport_idx, topic_idx,
            0, first,
            lbmc.UmeStoreId.ID, 12, 0, first, last,
            lbmc.HDR_NONE, 4, store_index,
        )  # fmt: skip
    except struct.error as exc:
        raise LocalProtocolError(f"cannot encode a stability ACK: {exc}") from None


# What parse_stability compares of each shape: every field but flags, indexes, sequence numbers
# and the STOREID word (message type, header ids and lengths, ACK type), as encode_stability
# writes them.
_ACK1_SHAPE = (lbmc.MSG_CONTROL, lbmc.UmeAck.ID, _ACK1.size, lbmc.UmeStoreId.ID, 20)
_ACK1_TAIL = (lbmc.HDR_NONE, 4)
_ACKR_SHAPE = (lbmc.MSG_CONTROL, lbmc.UmeAck.ID, _ACKR.size, lbmc.UmeRangedAck.ID, 20)
_ACKR_TAIL = (lbmc.UmeStoreId.ID, 12)

StabilityFields = tuple[int, int, int, int, int, bool]


def parse_stability(frame: bytes) -> StabilityFields | None:
    """The fields of a stability ACK ``frame`` in exactly the shape :func:`encode_stability`
    writes (a Store's per-batch ACK, one LBMC message), without decoding the general message:
    ``(transport_idx, topic_idx, first, last, store_index, nak)`` -- what
    :meth:`StabilityAck.from_message` gives for the same bytes.  None for anything else (other
    header orders or lengths, another message, a range out of order): decode that with
    :func:`umcore.wire.lbmc.decode` and :func:`decode`, which also say what is wrong."""
    n = len(frame)
    if n == _ACK1.size:
        (vt, nh, msglen, nxt, hlen, flags, ack_type, tix, tidx, _rcv, sqn, end, slen,
         sid) = _ACK1.unpack(frame)  # fmt: skip
        if (
            (vt, nh, msglen, nxt, hlen) != _ACK1_SHAPE
            or ack_type != lbmc.ACK_TYPE_STABLE
            or (end, slen) != _ACK1_TAIL
        ):
            return None
        return tix, tidx, sqn, sqn, sid & 0x7FFF, bool(flags & ACK_FLAG_NAK)
    if n == _ACKR.size:
        (vt, nh, msglen, nxt, hlen, flags, ack_type, tix, tidx, _rcv, _sqn, rnxt, rlen, _rflags,
         first, last, end, slen, sid) = _ACKR.unpack(frame)  # fmt: skip
        if (
            (vt, nh, msglen, nxt, hlen) != _ACKR_SHAPE
            or ack_type != lbmc.ACK_TYPE_STABLE
            or (rnxt, rlen) != _ACKR_TAIL
            or (end, slen) != _ACK1_TAIL
            or (last - first) & _U32 > _MAX_RANGE
        ):
            return None
        return tix, tidx, first, last, sid & 0x7FFF, bool(flags & ACK_FLAG_NAK)
    return None


@dataclass(frozen=True, slots=True)
class ConsumptionAck:
    """Receiver -> Store: every sequence number up to ``seqnum`` is consumed (cumulative)."""

    transport_idx: int
    src_reg_id: int
    rcv_reg_id: int
    seqnum: int
    flags: int = 0

    RECORD: ClassVar[str] = "consumption ACK"

    def encode(self) -> bytes:
        hdr = lbmc.UmeAck(
            self.flags & ~ACK_FLAG_NAK & 0xFF, lbmc.ACK_TYPE_CDELV, self.transport_idx,
            self.src_reg_id, self.rcv_reg_id, self.seqnum,
        )  # fmt: skip
        return _control([hdr])

    @classmethod
    def from_message(cls, msg: lbmc.LBMCMessage, key: lbmc.Header) -> ConsumptionAck:
        assert isinstance(key, lbmc.UmeAck)
        return cls(key.transport_idx, key.id_2, key.rcv_reg_id, key.seqnum, key.flags)


@dataclass(frozen=True, slots=True)
class Keepalive:
    """UME_KEEPALIVE: ``role`` of the sender (``lbmc.KA_TYPE_STORE/RECEIVER/SOURCE``);
    ``response_requested`` (R), ``no_tir`` (T: the Store has seen no TIR/transport for the
    topic); ``reg_id`` of the registration kept alive; ``store_index`` None = no UME_STOREID."""

    role: int
    transport_idx: int
    topic_idx: int
    reg_id: int
    response_requested: bool = False
    no_tir: bool = False
    store_index: int | None = None

    RECORD: ClassVar[str] = "keepalive"

    def encode(self) -> bytes:
        if self.role not in (lbmc.KA_TYPE_STORE, lbmc.KA_TYPE_RECEIVER, lbmc.KA_TYPE_SOURCE):
            raise LocalProtocolError(f"keepalive role must be 0, 1 or 2: {self.role}")
        flags = (lbmc.KA_FLAG_R if self.response_requested else 0) | (
            lbmc.KA_FLAG_T if self.no_tir else 0
        )
        headers: list[lbmc.Header] = [
            lbmc.UmeKeepalive(flags, self.role, self.transport_idx, self.topic_idx, self.reg_id)
        ]
        if self.store_index is not None:
            headers.append(lbmc.UmeStoreId(self.store_index))
        return _control(headers)

    @classmethod
    def from_message(cls, msg: lbmc.LBMCMessage, key: lbmc.Header) -> Keepalive:
        assert isinstance(key, lbmc.UmeKeepalive)
        if key.ka_type > lbmc.KA_TYPE_SOURCE:
            raise _bad(f"keepalive type {key.ka_type} out of range", cls.RECORD)
        sid = msg.find(lbmc.UmeStoreId)
        return cls(
            role=key.ka_type,
            transport_idx=key.transport_idx,
            topic_idx=key.topic_idx,
            reg_id=key.reg_id,
            response_requested=bool(key.flags & lbmc.KA_FLAG_R),
            no_tir=bool(key.flags & lbmc.KA_FLAG_T),
            store_index=None if sid is None else sid.store_id,
        )


@dataclass(frozen=True, slots=True)
class ReceiverKeepalive:
    """UME_RCV_KEEPALIVE: a receiver (``rcv_reg_id``) shows it is alive."""

    rcv_reg_id: int
    session_id: int = 0
    ctxinst: bytes = bytes(8)

    RECORD: ClassVar[str] = "receiver keepalive"

    def encode(self) -> bytes:
        _check_session(self.session_id)
        return _control([lbmc.UmeRcvKeepalive(0, self.rcv_reg_id, self.session_id, self.ctxinst)])

    @classmethod
    def from_message(cls, msg: lbmc.LBMCMessage, key: lbmc.Header) -> ReceiverKeepalive:
        assert isinstance(key, lbmc.UmeRcvKeepalive)
        if key.session_id > _MAX_SESSION_ID:
            raise _bad(f"Session ID {key.session_id:#x} out of range", cls.RECORD)
        return cls(key.rcv_regid, key.session_id, bytes(key.ctxinst))


@dataclass(frozen=True, slots=True)
class RxReq:
    """One UME_RXREQ: ``id_2`` is the source RegID (to a Store) or topic index (to a source);
    the retransmission goes to ``reply_to``."""

    transport_idx: int
    id_2: int
    seqnum: int
    reply_to: Address
    request_idx: int = 0
    tsni: bool = False
    marker: int = 0

    def header(self) -> lbmc.UmeRxReq:
        ip, port = self.reply_to
        return lbmc.UmeRxReq(
            lbmc.RXREQ_FLAG_T if self.tsni else 0, self.marker, self.request_idx,
            self.transport_idx, self.id_2, self.seqnum, port, 0, _ip(ip),
        )  # fmt: skip


@dataclass(frozen=True, slots=True)
class RetransmissionRequest:
    """1..:data:`MAX_RXREQ_PER_MESSAGE` UME_RXREQ headers in one CONTROL message."""

    requests: tuple[RxReq, ...]

    RECORD: ClassVar[str] = "retransmission request"

    def encode(self) -> bytes:
        if not 1 <= len(self.requests) <= MAX_RXREQ_PER_MESSAGE:
            raise LocalProtocolError(
                f"{len(self.requests)} RXREQs in one message (1..{MAX_RXREQ_PER_MESSAGE})"
            )
        return _control([r.header() for r in self.requests])

    @classmethod
    def from_message(cls, msg: lbmc.LBMCMessage, key: lbmc.Header) -> RetransmissionRequest:
        reqs = tuple(
            RxReq(
                h.transport_idx, h.id_2, h.seqnum, (lbmc.ip4_to_str(h.rx_ip), h.rx_port),
                h.request_idx, bool(h.flags & lbmc.RXREQ_FLAG_T), h.marker,
            )
            for h in msg.find_all(lbmc.UmeRxReq)
        )  # fmt: skip
        if len(reqs) > MAX_RXREQ_PER_MESSAGE:
            raise _bad(f"{len(reqs)} RXREQs in one message", cls.RECORD)
        return cls(reqs)


def rxreq_messages(requests: Iterable[RxReq]) -> list[RetransmissionRequest]:
    """``requests`` in messages of at most :data:`MAX_RXREQ_PER_MESSAGE`."""
    reqs = list(requests)
    step = MAX_RXREQ_PER_MESSAGE
    return [RetransmissionRequest(tuple(reqs[i : i + step])) for i in range(0, len(reqs), step)]


@dataclass(frozen=True, slots=True)
class SriRequest:
    """SRI_REQ: a receiver asks the source (at its request port) for an SRI."""

    transport_idx: int
    topic_idx: int

    RECORD: ClassVar[str] = "SRI request"

    def encode(self) -> bytes:
        return _control([lbmc.SriReq(0, self.transport_idx, self.topic_idx)])

    @classmethod
    def from_message(cls, msg: lbmc.LBMCMessage, key: lbmc.Header) -> SriRequest:
        assert isinstance(key, lbmc.SriReq)
        return cls(key.transport_idx, key.topic_idx)


@dataclass(frozen=True, slots=True)
class SriStore:
    """One Store of an SRI: its request address, index, group, the source's RegID there,
    Domain ID and per-Store registration version."""

    address: Address
    store_idx: int
    src_reg_id: int
    grp_idx: int = 0
    domain_id: int = 0
    version: int = 1

    def header(self) -> lbmc.UmeStoreInfoExt:
        ip, port = self.address
        return lbmc.UmeStoreInfoExt(
            0, self.grp_idx, port, self.store_idx, _ip(ip), self.src_reg_id, self.domain_id,
            self.version,
        )  # fmt: skip


@dataclass(frozen=True, slots=True)
class SriGroup:
    grp_idx: int
    grp_sz: int


@dataclass(frozen=True, slots=True)
class Sri:
    """SRI (source -> its transport): overall ``version``, the sequence range, one entry per
    Store the source registered with, its QC groups, the Store domain (None: not sent) and
    the source's topic index (None: no TOPIC_IDX header)."""

    version: int
    low_sqn: int
    high_sqn: int
    stores: tuple[SriStore, ...]
    groups: tuple[SriGroup, ...] = ()
    domain: int | None = 0
    ack_to_source: bool = False
    initial_sqn_known: bool = True
    topic_idx: int | None = None

    RECORD: ClassVar[str] = "SRI"

    def encode(self) -> bytes:
        if not 1 <= len(self.stores) <= MAX_STORES or len(self.groups) > MAX_GROUPS:
            raise LocalProtocolError(
                f"an SRI names 1..{MAX_STORES} Stores in at most {MAX_GROUPS} groups"
            )
        flags = (lbmc.SRI_ACKTOSRC if self.ack_to_source else 0) | (
            lbmc.SRI_INITIAL_SQN_KNOWN if self.initial_sqn_known else 0
        )
        headers: list[lbmc.Header] = [lbmc.Sri(flags, self.version, self.low_sqn, self.high_sqn)]
        headers += [s.header() for s in self.stores]
        headers += [lbmc.UmeStoreGroup(0, g.grp_idx, g.grp_sz) for g in self.groups]
        if self.domain is not None:
            headers.append(lbmc.UmeStoreDomain(0, self.domain))
        if self.topic_idx is not None:
            headers.append(lbmc.TopicIdx(0, self.topic_idx))
        return _control(headers)

    @classmethod
    def from_message(cls, msg: lbmc.LBMCMessage, key: lbmc.Header) -> Sri:
        assert isinstance(key, lbmc.Sri)
        rec = cls.RECORD
        stores = tuple(
            SriStore(
                (lbmc.ip4_to_str(h.store_ip_addr), h.store_tcp_port), h.store_idx, h.src_reg_id,
                h.grp_idx, h.domain_id, h.version,
            )
            for h in msg.find_all(lbmc.UmeStoreInfoExt)
        )  # fmt: skip
        if not 1 <= len(stores) <= MAX_STORES:
            raise _bad(f"{len(stores)} UME_STORE_INFO_EXT headers (1..{MAX_STORES})", rec)
        groups = tuple(SriGroup(h.grp_idx, h.grp_sz) for h in msg.find_all(lbmc.UmeStoreGroup))
        if len(groups) > MAX_GROUPS:
            raise _bad(f"{len(groups)} UME_STORE_GROUP headers (at most {MAX_GROUPS})", rec)
        dom = msg.find(lbmc.UmeStoreDomain)
        tidx = msg.find(lbmc.TopicIdx)
        return cls(
            version=key.version,
            low_sqn=key.low_sqn,
            high_sqn=key.high_sqn,
            stores=stores,
            groups=groups,
            domain=None if dom is None else dom.domain,
            ack_to_source=bool(key.flags & lbmc.SRI_ACKTOSRC),
            initial_sqn_known=bool(key.flags & lbmc.SRI_INITIAL_SQN_KNOWN),
            topic_idx=None if tidx is None else tidx.tidx,
        )


# --- retransmissions: splicing OTID + TOPICNAME into a stored frame ------------------------------

_DATA_HEAD = struct.Struct("!BBHII")
_OTID_HEAD = struct.Struct("!BBH32s")  # next_hdr, hdr_len, flags, otid
_TOPIC_HEAD = struct.Struct("!BH")  # hdr_len, flags (its next_hdr byte is written per frame)
_OTID_LEN = _OTID_HEAD.size
_DATA_TYPES = frozenset((lbmc.MSG_DATA, lbmc.MSG_PRORX, lbmc.MSG_RETRANS))


def retransmission_prefix(otid: bytes, topic: str) -> bytes:
    """The bytes spliced after a stored frame's 12-byte header: the OTID header (naming
    TOPICNAME next) and the TOPICNAME header *without* its next_hdr byte, which is the stored
    frame's own first next_hdr (see :func:`splice_retransmission`).  Build once per source."""
    if len(otid) != 32:
        raise LocalProtocolError(f"an OTID is 32 bytes, not {len(otid)}")
    name = _topic_bytes(topic)
    return (
        _OTID_HEAD.pack(lbmc.TopicName.ID, _OTID_LEN, 0, otid)
        + _TOPIC_HEAD.pack(4 + len(name), 0)
        + name
    )


def splice_retransmission(frame: bytes, prefix: bytes) -> bytes:
    """The RETRANS message for a stored data ``frame`` (DATA or PRORX): the same topic index,
    sequence number, chain and payload, with ``prefix`` (:func:`retransmission_prefix`) in
    front of the chain.  No decode or re-encode of the frame."""
    vt, nh, msglen, tidx, sqn = _DATA_HEAD.unpack_from(frame)
    if vt & 0x0F not in _DATA_TYPES or msglen != len(frame):
        raise LocalProtocolError(f"not one LBMC data frame (type {vt:#x}, msglen {msglen})")
    total = msglen + len(prefix) + 1
    if total > lbmc.MAX_LBMC_MESSAGE:
        raise LocalProtocolError(f"retransmission of {msglen} bytes would exceed 65535")
    return b"".join(
        (
            _DATA_HEAD.pack(lbmc.MSG_RETRANS, lbmc.Otid.ID, total, tidx, sqn),
            prefix[:_OTID_LEN],
            bytes((nh,)),
            prefix[_OTID_LEN:],
            frame[12:],
        )
    )


@dataclass(frozen=True, slots=True)
class Retransmission:
    """A stored data ``frame`` re-sent as RETRANS with ``otid`` + ``topic`` spliced in.
    Decoding gives back the frame as a DATA message (the stored type is not on the wire)."""

    frame: bytes
    otid: bytes
    topic: str

    RECORD: ClassVar[str] = "retransmission"

    def encode(self) -> bytes:
        return splice_retransmission(self.frame, retransmission_prefix(self.otid, self.topic))

    @property
    def sqn(self) -> int:
        return int.from_bytes(self.frame[8:12], "big")

    @classmethod
    def from_message(cls, msg: lbmc.LBMCMessage, key: lbmc.Header) -> Retransmission:
        assert isinstance(key, lbmc.Otid)
        rec = cls.RECORD
        headers = list(msg.headers)
        pos = next(i for i, h in enumerate(headers) if h is key)
        if pos + 1 >= len(headers) or type(headers[pos + 1]) is not lbmc.TopicName:
            raise _bad("OTID not followed by TOPICNAME", rec)
        topic = headers[pos + 1]
        assert isinstance(topic, lbmc.TopicName)
        rest = headers[:pos] + headers[pos + 2 :]
        frame = lbmc.encode(lbmc.LBMCMessage(lbmc.MSG_DATA, msg.tidx, msg.sqn, rest, msg.payload))
        return cls(frame, bytes(key.otid), _topic_text(topic, rec))


# ============================================================================================
# The table
# ============================================================================================


@dataclass(frozen=True, slots=True)
class Row:
    """One composition: the LBMC message type and key header that announce it, the selector
    telling rows of one key apart, the companions it needs and may carry, and what of the
    combination is inferred."""

    cls: type
    msg_type: int
    key: type[lbmc.Header]
    select: Callable[[lbmc.Header], bool]
    required: tuple[type[lbmc.Header], ...]
    optional: tuple[type[lbmc.Header], ...]
    inferred: str
    build: Callable[[lbmc.LBMCMessage, lbmc.Header], Composition]


def _preg_dereg(h: lbmc.Header) -> bool:
    return isinstance(h, lbmc.UmePreg) and bool(h.flags & lbmc.PREG_FLAG_D)


def _preg_source(h: lbmc.Header) -> bool:
    return isinstance(h, lbmc.UmePreg) and h.source and not h.flags & lbmc.PREG_FLAG_D


def _preg_receiver(h: lbmc.Header) -> bool:
    return isinstance(h, lbmc.UmePreg) and not h.source and not h.flags & lbmc.PREG_FLAG_D


def _ack_stable(h: lbmc.Header) -> bool:
    return isinstance(h, lbmc.UmeAck) and h.ack_type == lbmc.ACK_TYPE_STABLE


def _ack_cdelv(h: lbmc.Header) -> bool:
    return isinstance(h, lbmc.UmeAck) and h.ack_type == lbmc.ACK_TYPE_CDELV


def _any(h: lbmc.Header) -> bool:
    return True


_REG_EXTRAS = (
    lbmc.CtxInst, lbmc.UmeStoreId, lbmc.UmeCapability, lbmc.UmeClientLifetime, lbmc.UmeSid,
    lbmc.ExtOpt,
)  # fmt: skip
_C = lbmc.MSG_CONTROL

TABLE: tuple[Row, ...] = (
    # PREG with D: deregistration of a source (S=1) or receiver; D selects before S.
    Row(Deregistration, _C, lbmc.UmePreg, _preg_dereg, (), (lbmc.UmeStoreId, lbmc.UmeSid),
        "STOREID and SID companions", Deregistration.from_message),
    # Source PREG: TOPICNAME required (pattern match, ETOPICNAME); all companions inferred.
    Row(SourceRegistration, _C, lbmc.UmePreg, _preg_source, (lbmc.TopicName,),
        (*_REG_EXTRAS, lbmc.UmeProxySrc),
        "every companion; RPP overrides as CFGOPT scope 1", SourceRegistration.from_message),
    # Receiver PREG: companions inferred; rpp mode 2 as CFGOPT scope 2.
    Row(ReceiverRegistration, _C, lbmc.UmePreg, _preg_receiver, (),
        (lbmc.TopicName, *_REG_EXTRAS),
        "every companion; non-blocking RPP as CFGOPT scope 2",
        ReceiverRegistration.from_message),
    # PREG_RESP: STOREID, store CTXINSTS (golden vector), SID to receivers inferred.
    Row(RegistrationResponse, _C, lbmc.UmePregResp, _any, (),
        (lbmc.UmeStoreId, lbmc.CtxInstS, lbmc.UmeSid), "STOREID, CTXINSTS and SID companions",
        RegistrationResponse.from_message),
    # Stability ACK: STOREID required; RANGED_ACK for batches; NAK bit 0x04 inferred.
    Row(StabilityAck, _C, lbmc.UmeAck, _ack_stable, (lbmc.UmeStoreId,), (lbmc.UmeRangedAck,),
        "STOREID/RANGED_ACK combination, NAK flag bit", StabilityAck.from_message),
    # Consumption ACK: a bare UME_ACK type 0, id_2 = source RegID (inferred from the name).
    Row(ConsumptionAck, _C, lbmc.UmeAck, _ack_cdelv, (), (), "id_2 = source RegID",
        ConsumptionAck.from_message),
    Row(Keepalive, _C, lbmc.UmeKeepalive, _any, (), (lbmc.UmeStoreId,),
        "STOREID on the Store's keepalives", Keepalive.from_message),
    Row(ReceiverKeepalive, _C, lbmc.UmeRcvKeepalive, _any, (), (), "",
        ReceiverKeepalive.from_message),
    Row(RetransmissionRequest, _C, lbmc.UmeRxReq, _any, (), (), "several RXREQs per message",
        RetransmissionRequest.from_message),
    Row(SriRequest, _C, lbmc.SriReq, _any, (), (), "", SriRequest.from_message),
    # SRI: the INFO_EXT/GROUP/DOMAIN set is inferred (strongly corroborated by the docs).
    Row(Sri, _C, lbmc.Sri, _any, (lbmc.UmeStoreInfoExt,),
        (lbmc.UmeStoreGroup, lbmc.UmeStoreDomain, lbmc.TopicIdx),
        "STORE_INFO_EXT/GROUP/DOMAIN set, TOPIC_IDX",
        Sri.from_message),
    # Retransmission: RETRANS data with OTID + TOPICNAME in front of the stored chain.
    Row(Retransmission, lbmc.MSG_RETRANS, lbmc.Otid, _any, (lbmc.TopicName,), (),
        "OTID + TOPICNAME spliced into the stored frame", Retransmission.from_message),
)  # fmt: skip

_BY_KEY: dict[tuple[int, type[lbmc.Header]], tuple[Row, ...]] = {}
for _row in TABLE:
    _k = (_row.msg_type, _row.key)
    _BY_KEY[_k] = (*_BY_KEY.get(_k, ()), _row)
del _row, _k


def decode(msg: lbmc.LBMCMessage) -> Composition | None:
    """The composition ``msg`` is, or None when it holds no key header of :data:`TABLE`.
    Raises :class:`StoreProtocolError` for a missing required companion or a value out of
    range (a peer's bad message)."""
    mtype = msg.msg_type
    for hdr in msg.headers:
        rows = _BY_KEY.get((mtype, type(hdr)))
        if rows is None:
            continue
        for row in rows:
            if not row.select(hdr):
                continue
            for need in row.required:
                if msg.find(need) is None:
                    raise _bad(f"no {need.NAME.upper()} header", row.cls.__name__)
            try:
                return row.build(msg, hdr)
            except StoreProtocolError:
                raise
            except (ValueError, LocalProtocolError, RemoteProtocolError) as exc:
                raise _bad(f"bad value: {exc}", row.cls.__name__) from None
        return None
    return None
