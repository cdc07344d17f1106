"""The lbmrd relay core, deterministic: explicit ``now``, no sockets."""

from __future__ import annotations

import ipaddress
import itertools
import struct

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.daemon import lbmr_samples as S
from umcore.lbmrd.core import (
    RESOLVER_KEEPALIVE_INTERVAL,
    LbmrdRelay,
    NatRule,
    NatTable,
)
from umcore.wire import lbmr

X = ("10.0.0.1", 14402)
Y = ("10.0.0.2", 14402)
Z = ("10.0.0.3", 14403)


def relay(**kw: object) -> LbmrdRelay:
    return LbmrdRelay(now=0.0, ttl=kw.pop("ttl", 60.0), activity=kw.pop("activity", 60.0), **kw)  # type: ignore[arg-type]


def register(r: LbmrdRelay, *addrs: tuple[str, int], now: float = 0.0) -> None:
    for a in addrs:
        assert r.receive_datagram(S.KEEPALIVE_SOURCE, a, now) == [(S.KEEPALIVE_RESOLVER, a)]


def test_client_keepalive_registers_and_is_answered_never_forwarded() -> None:
    r = relay()
    register(r, X)
    out = r.receive_datagram(S.KEEPALIVE_RECEIVER, Y, 0.1)
    assert out == [(S.KEEPALIVE_RESOLVER, Y)]  # only the sender hears back
    assert r.clients() == {X: 0.0, Y: 0.1}
    assert r.counters.client_keepalives == 2
    assert r.counters.forwarded == 0


def test_tir_forwarded_byte_identical_to_every_other_client() -> None:
    r = relay()
    register(r, X, Y, Z)
    tir = S.tir_tcp("ORDERS.NYSE", "10.0.0.1", 14371)
    out = r.receive_datagram(tir, X, 1.0)
    assert sorted(addr for _, addr in out) == sorted([Y, Z])
    assert all(bytes(p) == tir for p, _ in out)
    assert r.counters.forwarded == 1
    assert r.counters.datagrams_out == 3 + 2  # three keepalive replies, two copies
    assert r.counters.bytes_out == 3 * 4 + 2 * len(tir)


def test_forwarding_is_zero_copy_when_nothing_is_rewritten() -> None:
    r = relay()
    register(r, X, Y)
    buf = memoryview(bytearray(S.tqr("T")))
    ((payload, _),) = r.receive_datagram(buf, X, 1.0)
    assert payload is buf


def test_tir_from_unknown_sender_registers_it() -> None:
    r = relay()
    register(r, X)
    out = r.receive_datagram(S.tqr("T"), Y, 2.0)
    assert out == [(S.tqr("T"), X)]
    assert set(r.clients()) == {X, Y}


@pytest.mark.parametrize(
    "data",
    [
        b"",
        b"\x00",
        b"\x00\x00\x00",  # shorter than the header
        b"\x20\x00\x00\x00",  # version 2
        b"\xf0\x01\x00\x00",  # version 15
        b"\x05\x00\x00\x00",  # undefined type 5
        b"GET / HTTP/1.1\r\n\r\n",  # version 4 ('G' = 0x47)
        b"\x02\x01\x00\x00",  # receiver-alive carrying a TQR count: not a keepalive
    ],
)
def test_non_lbmr_and_malformed_are_dropped_counted_not_registered(data: bytes) -> None:
    r = relay()
    register(r, X)
    assert r.receive_datagram(data, Y, 1.0) == []
    assert r.counters.malformed == 1
    assert r.counters.dropped == 1
    assert Y not in r.clients()


def test_resolver_keepalive_from_a_peer_refreshes_but_is_neither_forwarded_nor_answered() -> None:
    r = relay()
    register(r, X)
    assert r.receive_datagram(S.KEEPALIVE_RESOLVER, Y, 1.0) == []
    assert Y in r.clients()


def test_dead_client_expiry_by_ttl_on_the_activity_period() -> None:
    r = relay(ttl=2.0, activity=0.5)
    register(r, X, Y)
    r.receive_datagram(S.KEEPALIVE_SOURCE, Y, 1.9)  # Y stays alive
    assert r.next_timer() <= 0.5
    # Sweeps at 0.5, 1.0, 1.5, 2.0: X last heard at 0 is not yet older than ttl=2.
    t = 0.0
    while t < 2.0:
        t = r.next_timer()
        r.handle_timer(t)
    assert set(r.clients()) == {X, Y}
    while t < 2.5:
        t = r.next_timer()
        r.handle_timer(t)
    assert set(r.clients()) == {Y}
    assert r.counters.clients_expired == 1
    # X no longer receives forwarded traffic; Y's own TIR goes nowhere.
    assert r.receive_datagram(S.tqr("T"), Y, 2.6) == []


def test_resolver_keepalives_to_clients_we_have_not_sent_to() -> None:
    r = relay()
    register(r, X, Y)  # both got a reply at t=0
    out = r.handle_timer(RESOLVER_KEEPALIVE_INTERVAL / 2)
    assert out == []  # too soon
    # X sends a TIR at 0.3: Y gets a copy (counts as "sent to Y"), X gets nothing.
    r.receive_datagram(S.tqr("T"), X, 0.3)
    t = 0.0
    sent: list[tuple[float, tuple[str, int]]] = []
    while t < 1.0:
        t = r.next_timer()
        sent += [(t, a) for p, a in r.handle_timer(t) if p == S.KEEPALIVE_RESOLVER]
    first_x = min(ts for ts, a in sent if a == X)
    first_y = min(ts for ts, a in sent if a == Y)
    assert 0.5 <= first_x < 0.65  # 500 ms after the reply at 0
    assert 0.8 <= first_y < 0.95  # 500 ms after the copy at 0.3
    # Never more than ~600 ms of silence toward any client (clients give up after 1000 ms).
    for addr, other_sends in ((X, [0.0]), (Y, [0.0, 0.3])):
        times = other_sends + [ts for ts, a in sent if a == addr]
        assert max(b - a for a, b in itertools.pairwise(times)) < 0.65


def test_client_table_is_bounded() -> None:
    r = relay(max_clients=2)
    register(r, X, Y)
    assert r.receive_datagram(S.KEEPALIVE_SOURCE, Z, 0.0) == []
    assert r.receive_datagram(S.tqr("T"), Z, 0.0) == []
    assert r.counters.clients_refused == 2
    assert r.counters.dropped == 2
    assert set(r.clients()) == {X, Y}


def test_next_timer_is_the_sweep_when_there_are_no_clients() -> None:
    r = relay(activity=5.0)
    assert r.next_timer() == 5.0
    assert r.handle_timer(5.0) == []
    assert r.next_timer() == 10.0


# -- NAT: the seed's worked example (003 L3037-3087) ---------------------------------------------

NYC_APP = ("10.1.1.50", 14402)  # the application on the lbmrd host
NYC_OTHER = ("10.1.2.7", 14402)
NJC_APP = ("192.168.1.20", 14402)
NJC_OTHER = ("192.168.1.21", 14403)


def seed_nat() -> NatTable:
    return NatTable(
        [
            ("Net-NYC", [ipaddress.IPv4Network("10.1.0.0/16")]),
            ("Net-NJC", [ipaddress.IPv4Network("192.168.1.0/24")]),
        ],
        [("Net-NYC", "Net-NJC", [NatRule("10.1.1.50", None, "192.168.1.1", None)])],
    )


def tcp_addr_of(datagram: bytes, topic: str, session_id: bool) -> tuple[str, int]:
    """ip:port of the only TIR, read at the offsets the layout gives."""
    start = 4 + len(topic) + 1 + 8
    ip = str(ipaddress.IPv4Address(datagram[start : start + 4]))
    port_at = start + (8 if session_id else 4)
    return ip, struct.unpack_from("!H", datagram, port_at)[0]


@pytest.mark.parametrize("session_id", [None, 0x11223344])
def test_nat_rewrites_per_recipient_domain(session_id: int | None) -> None:
    r = relay(nat=seed_nat())
    register(r, NYC_APP, NYC_OTHER, NJC_APP, NJC_OTHER)
    tir = S.tir_tcp("ORDERS", "10.1.1.50", 12001, session_id=session_id)
    out = dict((a, bytes(p)) for p, a in r.receive_datagram(tir, NYC_APP, 1.0))
    assert out[NYC_OTHER] == tir  # local clients: unchanged
    for njc in (NJC_APP, NJC_OTHER):
        assert tcp_addr_of(out[njc], "ORDERS", session_id is not None) == ("192.168.1.1", 12001)
        assert len(out[njc]) == len(tir)
    assert out[NJC_APP] is out[NJC_OTHER]  # one copy per destination domain
    # The codec agrees (it is the client library's view of the copy).
    info = lbmr.decode(out[NJC_APP]).tirs[0].transport_info
    assert (info.ip, info.port, info.session_id) == ("192.168.1.1", 12001, session_id)
    assert r.counters.nat_rewrites == 2


def test_nat_leaves_traffic_from_the_other_domain_and_other_hosts_alone() -> None:
    r = relay(nat=seed_nat())
    register(r, NYC_APP, NYC_OTHER, NJC_APP)
    from_njc = S.tir_tcp("Q", "192.168.1.20", 12100)
    assert all(bytes(p) == from_njc for p, _ in r.receive_datagram(from_njc, NJC_APP, 1.0))
    other_host = S.tir_tcp("Q", "10.1.2.7", 12001)  # not 10.1.1.50: no rule matches
    assert all(bytes(p) == other_host for p, _ in r.receive_datagram(other_host, NYC_OTHER, 1.0))
    assert r.counters.nat_rewrites == 0


def test_nat_port_rules_and_lbtru() -> None:
    nat = NatTable(
        [
            ("A", [ipaddress.IPv4Network("10.0.0.0/8")]),
            ("B", [ipaddress.IPv4Network("20.0.0.0/8")]),
        ],
        [
            (
                "A",
                "B",
                [
                    NatRule("10.0.0.5", 14371, "20.0.0.1", 24371),  # exact port -> new port
                    NatRule("10.0.0.5", None, "20.0.0.2", None),  # any other port: keep it
                ],
            )
        ],
    )
    r = relay(nat=nat)
    a, b = ("10.0.0.5", 1), ("20.0.0.9", 1)
    register(r, a, b)
    two = S.lbmr(
        [
            S.tir_body("T1", S.TCP, "10.0.0.5", 14371),
            S.tir_body("T2", S.LBTRU, "10.0.0.5", 14380, session_id=0xBEEF),
        ]
    )
    ((out, _),) = r.receive_datagram(two, a, 1.0)
    out = bytes(out)
    first = 4 + 3 + 8
    assert out[first : first + 4] == ipaddress.IPv4Address("20.0.0.1").packed
    assert struct.unpack_from("!H", out, first + 4)[0] == 24371
    second = first + 6 + 3 + 8
    assert out[second : second + 4] == ipaddress.IPv4Address("20.0.0.2").packed
    assert struct.unpack_from("!H", out, second + 8)[0] == 14380


def test_nat_never_rewrites_lbtrm() -> None:
    nat = NatTable(
        [
            ("A", [ipaddress.IPv4Network("10.0.0.0/8")]),
            ("B", [ipaddress.IPv4Network("20.0.0.0/8")]),
        ],
        [("A", "B", [NatRule("10.0.0.5", None, "20.0.0.1", None)])],
    )
    r = relay(nat=nat)
    register(r, ("10.0.0.5", 1), ("20.0.0.9", 1))
    tir = S.lbtrm_tir("T", "10.0.0.5")
    ((out, _),) = r.receive_datagram(tir, ("10.0.0.5", 1), 1.0)
    assert bytes(out) == tir


def test_nat_drops_a_tir_it_must_rewrite_but_cannot_parse() -> None:
    r = relay(nat=seed_nat())
    register(r, NYC_APP, NJC_APP)
    broken = S.tir_tcp("ORDERS", "10.1.1.50", 12001)[:-3]  # transport info cut short
    assert r.receive_datagram(broken, NYC_APP, 1.0) == []
    assert r.counters.malformed == 1


def test_dummy_configuration_forwards_exactly_as_without_one() -> None:
    dummy = NatTable(
        [("dummy", [ipaddress.IPv4Network("0.0.0.0/32")])],
        [("dummy", "dummy", [NatRule("0.0.0.0", 0, "0.0.0.0", 0)])],
    )
    plain, with_dummy = relay(), relay(nat=dummy)
    tir = S.tir_tcp("ORDERS", "10.0.0.1", 14371)
    for r in (plain, with_dummy):
        register(r, X, Y, Z)
    a = [(bytes(p), addr) for p, addr in plain.receive_datagram(tir, X, 1.0)]
    b = [(bytes(p), addr) for p, addr in with_dummy.receive_datagram(tir, X, 1.0)]
    assert a == b


def test_domain_is_the_most_specific_network() -> None:
    nat = NatTable(
        [
            ("wide", [ipaddress.IPv4Network("10.0.0.0/8")]),
            ("narrow", [ipaddress.IPv4Network("10.1.0.0/16")]),
        ]
    )
    assert nat.domain_of("10.1.2.3") == "narrow"
    assert nat.domain_of("10.2.2.3") == "wide"
    assert nat.domain_of("11.0.0.1") is None


@settings(max_examples=200, deadline=None)
@given(st.binary(max_size=64))
def test_any_bytes_never_raise_and_are_accounted(data: bytes) -> None:
    r = relay(nat=seed_nat())
    register(r, NYC_APP, NJC_APP)
    before = r.counters.as_dict()
    out = r.receive_datagram(data, NYC_APP, 1.0)
    after = r.counters.as_dict()
    acted = sum(after[k] - before[k] for k in ("forwarded", "dropped", "client_keepalives"))
    # Every datagram is forwarded, dropped, a client keepalive, or a peer resolver keepalive.
    assert acted == 1 or (acted == 0 and out == [] and data[:4] == S.KEEPALIVE_RESOLVER)
    assert all(addr in (NYC_APP, NJC_APP) for _, addr in out)
