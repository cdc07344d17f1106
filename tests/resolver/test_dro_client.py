"""A context's topic resolution facing a DRO, in memory with explicit time: use queries and
topic resolution requests answered (rate-limited by the options), the domain id and domain
routes learned from a DRO portal's datagrams, final advertisements ending a source, proxy
sources recognised; tshark reads the answers we send."""

from __future__ import annotations

import pytest

from tests.oracle import Tshark
from umcore.engine.options import Options
from umcore.resolver.core import ResolverConfig, TopicResolver
from umcore.resolver.dro import (
    FINAL_COST,
    ROUTE_LIFETIME,
    DomainTable,
    TrLimiter,
)
from umcore.wire import lbmr
from umcore.wire.pcap import udp_frame

PORTAL = ("10.0.0.9", 12965)
GROUP = ("224.9.10.11", 12965)
DRO_OPTS = (lbmr.SrcTypeOption(lbmr.SRC_TYPE_TNWGD), lbmr.LocalDomainOption(7))


def dgram(packet: lbmr.LBMRPacket) -> bytes:
    return lbmr.encode(packet)


def use_query(*tmrs: lbmr.TMR) -> bytes:
    return dgram(lbmr.LBMRPacket(lbmr.LBMR_TYPE_TOPIC_MGMT, body=lbmr.TopicManagement(tmrs)))


def answers(r: TopicResolver) -> list[lbmr.TMR]:
    out: list[lbmr.TMR] = []
    for data, dest in r.take_datagrams():
        assert dest == GROUP
        p = lbmr.decode(data)
        if p.type == lbmr.LBMR_TYPE_TOPIC_MGMT:
            out.extend(p.body.tmrs)
    return out


def resolver(**kw: object) -> TopicResolver:
    return TopicResolver(ResolverConfig(**kw), 0.0)  # type: ignore[arg-type]


def test_use_query_answered_only_for_own_receivers() -> None:
    r = resolver()
    r.add_receiver("A", 0.0)
    r.add_wildcard_receiver("^B.*", 0.0)
    r.take_datagrams()
    q = use_query(
        lbmr.TMR("A"),
        lbmr.TMR("C"),  # nobody here wants C
        lbmr.TMR("^B.*", flags=lbmr.TMR_FLAG_WILDCARD_PCRE),
        lbmr.TMR("^Z.*", flags=lbmr.TMR_FLAG_WILDCARD_PCRE),
        lbmr.TMR("A", flags=lbmr.TMR_FLAG_RESPONSE),  # another context's answer: not a query
    )
    r.receive_datagram(q, PORTAL, 1.0)
    got = answers(r)
    assert {(t.topic, t.flags, t.tmr_type) for t in got} == {
        ("A", lbmr.TMR_FLAG_RESPONSE, lbmr.TMR_TOPIC_USE),
        ("^B.*", lbmr.TMR_FLAG_RESPONSE | lbmr.TMR_FLAG_WILDCARD_PCRE, lbmr.TMR_TOPIC_USE),
    }
    assert r.stats.use_queries_received == 4
    r.remove_receiver("A")
    r.receive_datagram(use_query(lbmr.TMR("A")), PORTAL, 2.0)
    assert answers(r) == []


def test_a_dro_portal_context_does_not_answer() -> None:
    r = resolver()
    r.answer_use_queries = False  # a DRO portal's own context: its proxy receivers
    r.add_receiver("A", 0.0)
    r.take_datagrams()
    r.receive_datagram(use_query(lbmr.TMR("A")), PORTAL, 1.0)
    req = lbmr.TopicResRequest(lbmr.TRREQ_QUERY | lbmr.TRREQ_WILDCARD_QUERY)
    r.receive_datagram(dgram(lbmr.LBMRPacket(lbmr.LBMR_TYPE_EXT, body=req)), PORTAL, 1.0)
    assert answers(r) == []


def test_tr_request_makes_receivers_answer_and_sources_advertise() -> None:
    r = resolver()
    r.add_receiver("A", 0.0)
    r.add_receiver("B", 0.0)
    r.add_wildcard_receiver("^W", 0.0)
    r.add_source("S", 1, lbmr.TCPInfo("10.0.0.1", 14371, 5), 0.0)
    # run every schedule far into its quiescent phase
    t = 0.0
    while (nxt := r.next_timer()) is not None and nxt < 400:
        t = nxt
        r.handle_timer(t)
    r.take_datagrams()
    now = 500.0
    assert r.next_timer() is None or r.next_timer() > now  # quiet
    req = dgram(
        lbmr.LBMRPacket(
            lbmr.LBMR_TYPE_EXT,
            body=lbmr.TopicResRequest(
                lbmr.TRREQ_QUERY | lbmr.TRREQ_WILDCARD_QUERY | lbmr.TRREQ_ADVERTISEMENT
            ),
            options=DRO_OPTS,
        )
    )
    r.receive_datagram(req, PORTAL, now)
    got = {(t.topic, t.flags) for t in answers(r)}
    assert got == {
        ("A", lbmr.TMR_FLAG_RESPONSE),
        ("B", lbmr.TMR_FLAG_RESPONSE),
        ("^W", lbmr.TMR_FLAG_RESPONSE | lbmr.TMR_FLAG_WILDCARD_PCRE),
    }
    assert r.stats.tr_requests_received == 1
    # ADVERTISEMENT: the source's sustaining phase restarted, its TIR is due at once
    nxt = r.next_timer()
    assert nxt is not None and nxt <= now + 1.0
    r.handle_timer(nxt)
    tirs = [tir for d, _ in r.take_datagrams() for tir in lbmr.decode(d).tirs]
    assert [t.topic for t in tirs] == ["S"]
    # CONTEXT_ADVERTISEMENT: the context's names (a Store's) go out again at once
    r.advertise_context_name("store1", "10.0.0.1", 14567, now)
    r.take_datagrams()
    ctx_req = lbmr.TopicResRequest(lbmr.TRREQ_CONTEXT_ADVERTISEMENT)
    r.receive_datagram(dgram(lbmr.LBMRPacket(lbmr.LBMR_TYPE_EXT, body=ctx_req)), PORTAL, now + 1)
    names = [lbmr.decode(d).body for d, _ in r.take_datagrams()]
    assert [(n.name, n.port) for n in names] == [("store1", 14567)]
    # a request with only GW_REMOTE_INTEREST (for DROs) makes nobody answer
    r.receive_datagram(
        dgram(
            lbmr.LBMRPacket(
                lbmr.LBMR_TYPE_EXT, body=lbmr.TopicResRequest(lbmr.TRREQ_GW_REMOTE_INTEREST)
            )
        ),
        PORTAL,
        now + 2,
    )
    assert answers(r) == []


def test_answers_are_rate_limited_by_the_options() -> None:
    o = Options(
        "context",
        {"resolver_sustain_queries_per_second": "2", "resolver_sustain_query_bps": "0"},
    )
    cfg = ResolverConfig.from_options(o)
    assert cfg.topic_answer_limits == (0, 2)
    assert cfg.pattern_answer_limits == (1000000, 0)  # registry defaults
    r = TopicResolver(cfg, 0.0)
    topics = [f"T{i}" for i in range(6)]
    for t in topics:
        r.add_receiver(t, 0.0)
    r.take_datagrams()
    now = 100.0
    r.receive_datagram(use_query(*(lbmr.TMR(t) for t in topics)), PORTAL, now)
    sent = [t.topic for t in answers(r)]
    assert sent == ["T0", "T1"]  # a one-second bucket of 2
    # the same queries again are not queued twice
    r.receive_datagram(use_query(*(lbmr.TMR(t) for t in topics)), PORTAL, now)
    assert answers(r) == []
    nxt = r.use_answers.next_timer()
    assert nxt is not None and now < nxt <= now + 0.5 + 1e-9
    assert r.next_timer() is not None and r.next_timer() <= nxt  # type: ignore[operator]
    while len(sent) < 6:
        nxt = r.use_answers.next_timer()
        assert nxt is not None
        r.handle_timer(nxt)
        sent += [t.topic for t in answers(r)]
    assert sent == topics
    assert r.use_answers.answered == 6


def test_limiter_unlimited_and_ready_at() -> None:
    lim = TrLimiter(0, 0, 0.0)
    assert all(lim.try_take(0.0, 1000) for _ in range(1000))
    lim = TrLimiter(800, 0, 0.0)  # 100 bytes per second
    assert lim.try_take(0.0, 60)
    assert not lim.try_take(0.0, 60)
    assert lim.ready_at(60) == pytest.approx(0.2)
    assert lim.try_take(0.2, 60)


def test_domain_id_only_from_a_dro_by_default() -> None:
    r = resolver()
    keepalive = lbmr.LBMRPacket(lbmr.LBMR_TYPE_NORMAL, options=(lbmr.LocalDomainOption(3),))
    r.receive_datagram(dgram(keepalive), ("10.0.0.5", 12965), 1.0)
    assert r.domains.domain_id is None  # an application's word is not enough (timeout 0)
    route = lbmr.LBMRPacket(
        lbmr.LBMR_TYPE_EXT, body=lbmr.RemoteDomainRoute("10.0.0.9", 14391, [2, 3]),
        options=DRO_OPTS,
    )  # fmt: skip
    r.receive_datagram(dgram(route), PORTAL, 2.0)
    assert r.domains.domain_id == 7
    assert r.domains.learned_from == "dro"
    routes = r.domains.live_routes(2.0)
    assert sorted(routes) == [2, 3]
    assert (routes[3].ip, routes[3].port) == ("10.0.0.9", 14391)
    # nothing is propagated at timeout 0: our datagrams carry no packet options
    r.add_receiver("X", 2.0)
    r.handle_timer(2.0)
    assert all(not (d[0] & lbmr.HDR_OPTS_FLAG) for d, _ in r.take_datagrams())
    # routes age out unless repeated
    assert r.domains.route(3, 2.0 + ROUTE_LIFETIME - 0.1) is not None
    assert r.domains.route(3, 2.0 + ROUTE_LIFETIME) is None


def test_domain_id_propagation() -> None:
    # N > 0: learned from a context that heard a DRO, and passed on while fresh
    a = resolver(domain_id_propagation_timeout=5)
    a.receive_datagram(
        dgram(lbmr.LBMRPacket(lbmr.LBMR_TYPE_NORMAL, options=DRO_OPTS)), PORTAL, 10.0
    )
    assert a.domains.domain_id == 7
    a.add_receiver("X", 10.0)
    a.handle_timer(10.0)
    sent = a.take_datagrams()
    assert sent
    b = resolver(domain_id_propagation_timeout=5)
    for data, _ in sent:
        p = lbmr.decode(data)
        assert p.options == (lbmr.LocalDomainOption(7),)
        assert [q.topic for q in p.tqrs] == ["X"]
        b.receive_datagram(data, ("10.0.0.5", 12965), 10.5)
    assert b.domains.domain_id == 7 and b.domains.learned_from == "peer"
    assert b.domains.propagate(10.5) is None  # b never heard a DRO itself
    assert a.domains.propagate(15.0) == 7
    assert a.domains.propagate(15.1) is None  # its DRO is 5.1 s old
    # -1 (legacy): from anyone, passed on always
    c = DomainTable(-1)
    assert c.receive_packet((lbmr.LocalDomainOption(4),), 0.0)
    assert c.propagate(1e6) == 4


def test_srs_routes_hold_until_their_end() -> None:
    t = DomainTable()
    assert t.receive_dro_domain(1, 0.0)
    t.receive_route("10.0.0.9", 14391, [1, 2], 0.0, lifetime=False)
    assert sorted(t.live_routes(1e6)) == [2]  # our own domain is no route
    t.receive_route("10.0.0.8", 14391, [2], 5.0)  # an LBMR record elsewhere does not replace it
    assert t.route(2, 6.0) is not None and t.route(2, 6.0).ip == "10.0.0.9"  # type: ignore[union-attr]
    t.end_route("10.0.0.9", 14391, [2])
    assert t.route(2, 7.0) is None


def tir(topic: str, options: tuple[object, ...] = ()) -> lbmr.TIR:
    return lbmr.TIR(topic, 3, lbmr.TCPInfo("10.0.0.9", 14371, 0x55), options)


def test_final_advertisement_ends_the_source() -> None:
    r = resolver()
    r.add_receiver("A", 0.0)
    proxy_opts = (lbmr.OTIDOption(bytes(32)), lbmr.CostOption(1, 2), lbmr.DomainIdOption(1))
    found = r.receive_datagram(
        dgram(lbmr.LBMRPacket(lbmr.LBMR_TYPE_NORMAL, tirs=[tir("A", proxy_opts)])), PORTAL, 1.0
    )
    assert len(found) == 1 and found[0].proxy
    assert r.cached_sources("A")
    assert r.take_ended() == []
    final = (lbmr.OTIDOption(bytes(32)), lbmr.CostOption(1, FINAL_COST), lbmr.DomainIdOption(1))
    found = r.receive_datagram(
        dgram(lbmr.LBMRPacket(lbmr.LBMR_TYPE_NORMAL, tirs=[tir("A", final)])), PORTAL, 2.0
    )
    assert found == []
    ended = r.take_ended()
    assert [(e.topic, e.index, e.key) for e in ended] == [
        ("A", 3, ("TCP", "10.0.0.9", 14371, 0x55))
    ]
    assert r.cached_sources("A") == []
    assert r.stats.final_advertisements == 1
    # a new advertisement afterwards is a new source again
    found = r.receive_datagram(
        dgram(lbmr.LBMRPacket(lbmr.LBMR_TYPE_NORMAL, tirs=[tir("A", proxy_opts)])), PORTAL, 3.0
    )
    assert len(found) == 1


def test_proxy_source_recognised() -> None:
    r = resolver()
    r.add_receiver("A", 0.0)
    plain = r.receive_datagram(
        dgram(lbmr.LBMRPacket(lbmr.LBMR_TYPE_NORMAL, tirs=[tir("A")])), PORTAL, 1.0
    )
    assert [f.proxy for f in plain] == [False]
    local = (lbmr.CostOption(0, 0),)  # a cost with no DRO crossed
    got = r.receive_datagram(
        dgram(lbmr.LBMRPacket(lbmr.LBMR_TYPE_NORMAL, tirs=[tir("A", local)])), PORTAL, 1.0
    )
    assert [f.proxy for f in got] == [False]
    from_dro = r.receive_datagram(
        dgram(lbmr.LBMRPacket(lbmr.LBMR_TYPE_NORMAL, tirs=[tir("A")], options=DRO_OPTS)),
        PORTAL,
        1.0,
    )
    assert [f.proxy for f in from_dro] == [True]


@pytest.mark.tshark
def test_answers_decode_in_tshark(tshark: Tshark) -> None:
    r = resolver(domain_id_propagation_timeout=-1)
    r.add_receiver("ORDERS.NYSE", 0.0)
    r.add_wildcard_receiver("^ORD.*", 0.0)
    r.take_datagrams()
    frames = []
    q = use_query(lbmr.TMR("ORDERS.NYSE"), lbmr.TMR("^ORD.*", flags=lbmr.TMR_FLAG_WILDCARD_PCRE))
    frames.append(udp_frame(PORTAL[0], PORTAL[1], GROUP[0], GROUP[1], q))
    r.receive_datagram(q, PORTAL, 1.0)
    sent = r.take_datagrams()
    assert len(sent) == 1
    frames += [udp_frame("10.0.0.5", 12965, a[0], a[1], d) for d, a in sent]
    # and once the domain id is known (propagated at -1), with the LOCAL_DOMAIN option
    r.receive_datagram(dgram(lbmr.LBMRPacket(lbmr.LBMR_TYPE_NORMAL, options=DRO_OPTS)), PORTAL, 2.0)
    r.receive_datagram(q, PORTAL, 3.0)
    sent2 = r.take_datagrams()
    assert len(sent2) == 1
    frames += [udp_frame("10.0.0.5", 12965, a[0], a[1], d) for d, a in sent2]
    # type 4 starts like a WireGuard datagram (first byte 4): name the protocol for the port
    dec = tshark.decode(frames, decode_as=["udp.port==12965,lbmr"])
    dec.assert_clean()
    for frame in (1, 2):
        assert dec.value("lbmr.hdr.type", frame) == "0x04"
        assert dec.values("lbmr.tmb.tmr.name", frame) == ["ORDERS.NYSE", "^ORD.*"]
        assert dec.values("lbmr.tmb.tmr.flags.response", frame) == ["1", "1"]
        assert dec.values("lbmr.tmb.tmr.flags.wildcard_pcre", frame) == ["0", "1"]
    assert dec.value("lbmr.opt.local_domain.local_domain_id", 2) == "7"
