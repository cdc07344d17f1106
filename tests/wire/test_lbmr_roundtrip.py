"""LBMR round trips with hypothesis: ``decode(encode(p)) == p`` and ``encode(decode(b)) == b``
for generated records of every class.  The strategies are reused by the fuzz and tshark tests."""

from __future__ import annotations

from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from umcore.wire import lbmr
from umcore.wire.lbmr import LBMRPacket, decode, encode

u8 = st.integers(0, 0xFF)
u16 = st.integers(0, 0xFFFF)
u32 = st.integers(0, 0xFFFFFFFF)
u64 = st.integers(0, 2**64 - 1)
i32 = st.integers(-(2**31), 2**31 - 1)
ips = st.tuples(u8, u8, u8, u8).map(lambda t: ".".join(map(str, t)))
ctx8 = st.binary(min_size=8, max_size=8)


def names(max_bytes: int, min_size: int = 0) -> st.SearchStrategy[str]:
    chars = st.characters(blacklist_categories=("Cs",), blacklist_characters="\x00")
    return st.text(chars, min_size=min_size, max_size=max_bytes).filter(
        lambda s: len(s.encode()) <= max_bytes
    )


topics = names(lbmr.MAX_TOPIC_LEN)
short_names = names(40)

transport_infos = st.one_of(
    st.builds(lbmr.TCPInfo, ips, u16, st.none() | u32),
    st.builds(lbmr.LBTRUInfo, ips, u16, st.none() | u32),
    st.builds(lbmr.LBTRMInfo, ips, ips, u32, u16, u16),
    st.builds(lbmr.LBTIPCInfo, u32, u32, u16),
    st.builds(lbmr.LBTSMXInfo, u32, u32, u16),
    st.builds(lbmr.LBTRDMAInfo, ips, u32, u16),
    st.builds(
        lbmr.UnknownTransportInfo,
        st.integers(0, 0x7F).filter(lambda t: t not in (0x00, 0x01, 0x04, 0x10, 0x20, 0x40)),
        st.binary(max_size=40),
    ),
)


def unknown_opt(cls: Any, known: set[int]) -> st.SearchStrategy[Any]:
    return st.builds(cls, u8.filter(lambda t: t not in known), st.binary(min_size=2, max_size=30))


topic_options = st.one_of(
    st.builds(lbmr.UMEOption, u16, u16, ips, ips, u32, u32, u32, u32, flags=u16),
    st.builds(lbmr.UMEStoreOption, u8, u16, u16, ips, u32, flags=u8),
    st.builds(lbmr.UMEStoreGroupOption, u8, u16, flags=u8),
    st.builds(lbmr.LateJoinOption, u16, ips, u32, u32, u32, flags=u16),
    st.builds(lbmr.UMQRcrIdxOption, u32, flags=u16),
    st.builds(lbmr.UMQQInfoOption, short_names, flags=u16),
    st.builds(lbmr.CostOption, u8, i32, flags=u8),
    st.builds(lbmr.OTIDOption, st.binary(min_size=32, max_size=32), flags=u16),
    st.builds(lbmr.CtxInstOption, ctx8, flags=u8),
    st.builds(lbmr.CtxInstStoreOption, u8, ctx8, flags=u8),
    st.builds(lbmr.UMQULBOption, u32, u64, u32, ips, u16, flags=u16),
    st.builds(lbmr.CtxInstQueueOption, u8, ctx8, flags=u8),
    st.builds(lbmr.DomainIdOption, u32, flags=u16),
    st.builds(lbmr.ExFuncOption, u16, ips, u32, flags=u16),
    unknown_opt(lbmr.UnknownTopicOption, set(range(0x0F))),
)

packet_options = st.one_of(
    st.builds(lbmr.SrcIdOption, ctx8, flags=u16),
    st.builds(lbmr.SrcTypeOption, u8, flags=u8),
    st.builds(lbmr.VersionOption, u32, flags=u16),
    st.builds(lbmr.LocalDomainOption, u32, flags=u16),
    unknown_opt(lbmr.UnknownPacketOption, set(range(0x80, 0x85))),
)

tnwg_options = st.one_of(
    st.builds(lbmr.TNWGCtxInstOption, ctx8, flags=u16),
    st.builds(lbmr.TNWGAddressOption, u16, ips, flags=u16),
    st.builds(lbmr.TNWGDomainOption, u32, flags=u16),
    st.builds(lbmr.TNWGNameOption, short_names, flags=u16),
    unknown_opt(lbmr.UnknownTNWGOption, {0, 1, 2, 3}),
)

rctx_options = st.one_of(
    st.builds(lbmr.RCtxAddressOption, u32, ips, u16, flags=u16),
    st.builds(lbmr.RCtxInstanceOption, ctx8, flags=u16),
    st.builds(lbmr.RCtxODomainOption, u32, flags=u16),
    st.builds(lbmr.RCtxNameOption, short_names, flags=u16),
    unknown_opt(lbmr.UnknownRCtxOption, {1, 2, 3, 4}),
)

tqrs = st.builds(lbmr.TQR, topics)
wildcard_tqrs = st.builds(lbmr.WildcardTQR, u8, names(lbmr.MAX_NAME_LEN))
tirs = st.builds(
    lbmr.TIR, topics, u32, transport_infos, st.lists(topic_options, max_size=4), ttl=u16
)

qirs = st.builds(
    lbmr.QIR,
    short_names,
    short_names,
    u32,
    u32,
    u32,
    st.lists(st.builds(lbmr.QIRGroup, u16, u16), max_size=3),
    st.lists(st.builds(lbmr.QIRQueue, ips, u16, u16, u16), max_size=3),
    st.lists(topic_options, max_size=2),
)

pser_options = st.one_of(
    st.builds(lbmr.PSERCtxInstOption, st.integers(0, 1), ctx8),
    st.builds(lbmr.UnknownPSEROption, st.integers(2, 255), st.binary(max_size=20)),
)

qmgmt = st.builds(
    lbmr.UMQQueueMgmt,
    st.integers(0, 10),
    st.binary(min_size=20, max_size=20),
    u32,
    u32,
    ips,
    u16,
    u16,
    u16,
    dep16=u16,
    flags=u8,
    highest_rcr_tsp=u32,
    instances=st.lists(st.builds(lbmr.QMgmtInstance, ips, u16, u16, u16, flags=u16), max_size=3),
    queue_new_ver=u32,
    age=u32,
    queue=st.none() | short_names,
)

ext_bodies = st.one_of(
    st.builds(
        lbmr.PSER,
        u16,
        ips,
        ips,
        u32,
        u32,
        u16,
        u16,
        topics,
        st.lists(pser_options, max_size=3),
        flags=u16,
    ),
    qmgmt,
    st.builds(lbmr.ContextInfo, u16, u16, ips, ctx8, st.none() | names(100), hop_count=u8),
    st.builds(lbmr.TopicResRequest, u16),
    st.builds(
        lbmr.TNWGInterest,
        st.lists(st.builds(lbmr.TNWGInterestRecord, short_names, u8, u8, u32), max_size=4),
    ),
    st.builds(lbmr.TNWGContextInfo, u8, u32, u32, st.lists(tnwg_options, max_size=4)),
    st.builds(lbmr.TNWGTopicResRequest, st.lists(tnwg_options, max_size=4)),
    st.builds(lbmr.UnknownTNWG, st.integers(3, 0xFFFF), st.binary(max_size=30)),
    st.builds(lbmr.RemoteDomainRoute, ips, u16, st.lists(u32, max_size=6)),
    st.builds(
        lbmr.RemoteContextInfo,
        st.lists(
            st.builds(lbmr.RCtxInfoRecord, st.lists(rctx_options, max_size=4), u16), max_size=3
        ),
    ),
    st.builds(lbmr.UnknownExt, st.integers(8, 255), st.binary(min_size=2, max_size=30)),
)

versions = st.integers(0, 15)
trailers = st.lists(packet_options, max_size=4)


@st.composite
def packets(draw: st.DrawFn) -> LBMRPacket:
    kind = draw(st.sampled_from([0, 1, 2, 3, 4, 6, 7]))
    opts = draw(trailers)
    ver = draw(versions)
    if kind == 0:
        return LBMRPacket(
            0, draw(st.lists(tqrs, max_size=4)), draw(st.lists(tirs, max_size=4)), opts, ver
        )
    if kind == 1:
        return LBMRPacket(
            1,
            draw(st.lists(wildcard_tqrs, max_size=3)),
            draw(st.lists(tirs, max_size=3)),
            opts,
            ver,
        )
    if kind in (2, 3):
        return LBMRPacket(kind, options=opts, version=ver)
    if kind == 4:
        tmrs = st.lists(st.builds(lbmr.TMR, topics, u8, u8), max_size=4)
        return LBMRPacket(4, options=opts, version=ver, body=lbmr.TopicManagement(draw(tmrs)))
    if kind == 6:
        qqrs = st.lists(st.builds(lbmr.QQR, short_names), max_size=3)
        return LBMRPacket(6, draw(qqrs), draw(st.lists(qirs, max_size=3)), opts, ver)
    return LBMRPacket(7, options=opts, version=ver, body=draw(ext_bodies))


def check(packet: LBMRPacket) -> None:
    wire = encode(packet)
    again = decode(wire)
    assert again == packet
    assert encode(again) == wire


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(packets())
def test_round_trip_any_packet(packet: LBMRPacket) -> None:
    check(packet)


@settings(max_examples=150, deadline=None)
@given(st.lists(tirs, min_size=1, max_size=6), trailers)
def test_round_trip_tirs(records: list[Any], opts: list[Any]) -> None:
    check(LBMRPacket(0, tirs=records, options=opts))


@settings(max_examples=100, deadline=None)
@given(st.lists(topic_options, min_size=1, max_size=10))
def test_round_trip_topic_options(options: list[Any]) -> None:
    check(LBMRPacket(0, tirs=[lbmr.TIR("t", 1, lbmr.TCPInfo("1.2.3.4", 5), options)]))


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(ext_bodies, versions, trailers)
def test_round_trip_ext(body: Any, ver: int, opts: list[Any]) -> None:
    check(LBMRPacket(7, options=opts, version=ver, body=body))


@settings(max_examples=100, deadline=None)
@given(st.lists(st.builds(lbmr.QQR, short_names), max_size=4), st.lists(qirs, max_size=3))
def test_round_trip_queue_resolution(qqr: list[Any], qir: list[Any]) -> None:
    check(LBMRPacket(6, qqr, qir))


@settings(max_examples=100, deadline=None)
@given(st.lists(tirs, min_size=1, max_size=5))
def test_tir_address_slots_match_decoded_addresses(records: list[Any]) -> None:
    wire = encode(LBMRPacket(0, tirs=records))
    slots = lbmr.tir_address_slots(wire)
    natable = [t.transport_info for t in records if isinstance(t.transport_info, lbmr.TCPInfo)]
    assert len(slots) == len(natable)
    for (ttype, ip_off, port_off), info in zip(slots, natable, strict=True):
        assert ttype == info.transport_type
        assert ".".join(str(b) for b in wire[ip_off : ip_off + 4]) == info.ip
        assert int.from_bytes(wire[port_off : port_off + 2], "big") == info.port
