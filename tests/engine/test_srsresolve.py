"""The SIR <-> source info conversions of TCP-based topic resolution (umcore.api.srsresolve)."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from umcore.config.values import ResolverEntry
from umcore.engine.srsresolve import (
    info_from_sir,
    parse_source_string,
    sir_from_source,
    source_string,
    srs_servers,
)
from umcore.features.latejoin import parse_otid
from umcore.resolver.core import SourceInfo
from umcore.wire import lbmr, lbmr_options
from umcore.wire import srs_messages as srsm

ips = st.tuples(*[st.integers(0, 255)] * 4).map(lambda t: ".".join(map(str, t)))
ports = st.integers(1, 0xFFFF)
sids = st.integers(0, 0xFFFFFFFF)
transports = st.one_of(
    st.builds(lbmr.TCPInfo, ips, ports, st.none() | sids),
    st.builds(lbmr.LBTRUInfo, ips, ports, st.none() | sids.filter(bool)),
    st.builds(lbmr.LBTRMInfo, ips, ips, sids, ports, ports),
)


def _same(a: object, b: object) -> bool:
    return type(a) is type(b) and a.encode() == b.encode()  # type: ignore[attr-defined]


@settings(max_examples=200)
@given(transports)
def test_source_string_round_trips(transport: lbmr.TCPInfo | lbmr.LBTRMInfo) -> None:
    text = source_string(transport)
    assert _same(parse_source_string(text), transport), text


def test_source_strings_as_um_writes_them() -> None:
    assert source_string(lbmr.TCPInfo("10.0.0.5", 14371, 0x11223344)) == (
        "TCP:10.0.0.5:14371:11223344"
    )
    rm = parse_source_string("LBTRM:10.29.3.88:14390:6a5e0c9b:239.101.3.10:14400")
    assert isinstance(rm, lbmr.LBTRMInfo)
    assert (rm.src_ip, rm.sport, rm.session_id, rm.mc_group, rm.dport) == (
        "10.29.3.88", 14390, 0x6A5E0C9B, "239.101.3.10", 14400,
    )  # fmt: skip


@settings(max_examples=200)
@given(st.text(max_size=60))
def test_garbage_source_strings_are_refused_not_raised(text: str) -> None:
    out = parse_source_string(text)
    assert out is None or source_string(out).split(":")[0] == text.split(":")[0]


def test_bad_source_strings() -> None:
    for text in (
        "", "TCP", "TCP:1.2.3.4", "TCP:1.2.3.4:0:1", "TCP:1.2.3.4:70000", "TCP:1.2.3:14371",
        "TCP:1.2.3.4:14371:zz", "TCP:1.2.3.4:14371:1ffffffff", "LBT-IPC:1:2:3", "LBTRM:1.2.3.4:1:1",
        "LBTRM:1.2.3.4:1:1:239.1.1.300:5", "TCP:01.2.3.4:14371",
    ):  # fmt: skip
        assert parse_source_string(text) is None, text


def test_plain_source_sir_round_trip() -> None:
    tcp = lbmr.TCPInfo("127.0.0.1", 40000, 0xABCDEF01)
    sir = sir_from_source("t", 7, tcp, (), request=("127.0.0.1", 14391), context_instance=b"c" * 8)
    assert (sir.topic, sir.topic_idx, sir.source, sir.functionality_flags) == (
        "t", 7, "TCP:127.0.0.1:40000:abcdef01", 0,
    )  # fmt: skip
    assert (sir.request_ip, sir.request_port) == ("127.0.0.1", 14391)
    info = info_from_sir(sir)
    assert info is not None
    assert info.key == SourceInfo("t", 7, tcp).key and info.index == 7
    # the request port, as a TIR's EXFUNC names it (where "SOURCE:" UIMs go), no flags
    assert info.options == (lbmr_options.ExFuncOption(14391, "127.0.0.1", 0),)
    # two sessions of one context get different OTIDs (the SRS keys sources by OTID + topic)
    other = sir_from_source("t", 7, lbmr.TCPInfo("127.0.0.1", 40001, 0xABCDEF01), (),
                            request=None, context_instance=b"c" * 8)  # fmt: skip
    assert other.otid != sir.otid and len(sir.otid) == srsm.OTID_SIZE


def test_late_join_source_sir_carries_what_the_receiver_needs() -> None:
    tcp = lbmr.TCPInfo("10.1.1.1", 40000, 5)
    opts = (
        lbmr_options.LateJoinOption(14392, "10.1.1.1", 3, 0, 0),
        lbmr_options.ExFuncOption(14392, "10.1.1.1", lbmr_options.EXFUNC_LATE_JOIN),
    )
    sir = sir_from_source("lj", 2, tcp, opts, request=None, context_instance=bytes(8))
    assert sir.functionality_flags & lbmr_options.EXFUNC_LATE_JOIN
    assert (sir.request_ip, sir.request_port) == ("10.1.1.1", 14392)
    assert parse_otid(sir.otid) == ("10.1.1.1", 14392, 3)
    batch = srsm.decode_message(srsm.Batch([sir]).encode())  # as the receiver gets it
    assert isinstance(batch, srsm.Batch)
    received = batch.records[0]
    assert isinstance(received, srsm.SourceInfo)
    info = info_from_sir(received)
    assert info is not None
    lj = [o for o in info.options if type(o) is lbmr_options.LateJoinOption]
    assert len(lj) == 1
    assert (lj[0].src_ip_addr, lj[0].src_tcp_port, lj[0].transport_idx) == ("10.1.1.1", 14392, 3)


def test_unjoinable_sir() -> None:
    sir = srsm.SourceInfo(bytes(32), "ipc", "LBT-IPC:1:2:3")
    assert info_from_sir(sir) is None


def test_srs_servers() -> None:
    entries = [ResolverEntry("10.0.0.1", 12000), ResolverEntry("0.0.0.0", 0)]
    assert srs_servers(entries) == [("10.0.0.1", 12000)]
    assert srs_servers(None) == []
    assert len(srs_servers([ResolverEntry("h", n) for n in range(1, 9)])) == 5
