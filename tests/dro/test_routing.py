"""The topology map on its own: costs, hop counts, ties, timeouts, damping; and TIR reading."""

from __future__ import annotations

from umcore.config.dro import RouteInfo as RouteInfoConfig
from umcore.config.dro import RouteRecalculation
from umcore.dro import (
    Adjacency,
    RecalcDone,
    RecalcHeldUp,
    RouteInfo,
    Router,
    SourceTransport,
    advert_from_tir,
    domain_node,
    dro_node,
)
from umcore.wire import lbmr


def router(node: int = 1, **kw: int) -> Router:
    r = Router(node, f"G{node}", RouteInfoConfig(**kw), RouteRecalculation(), 0.0)
    r.take_events()
    return r


def info(node: int, version: int, *links: tuple[tuple[int, int], int], hops: int = 0) -> RouteInfo:
    return RouteInfo(node, f"G{node}", version, hops, tuple(Adjacency(n, c) for n, c in links))


def settle(r: Router, start: float, end: float, *heard: RouteInfo) -> None:
    """Advance the clock, hearing ``heard`` again every propagation interval (1 s)."""
    t = start
    while t < end:
        t = round(t + 0.25, 6)
        if t == int(t):
            for i in heard:
                r.receive_route_info(i, t)
        r.handle_timer(t)


def test_shortest_path_costs_hops_and_designated_forwarders() -> None:
    r = router(1)
    r.set_portal("E1", Adjacency(domain_node(1), 1), 0.0)
    r.set_portal("P", Adjacency(dro_node(2), 2), 0.0)
    assert r.domains() == [1]  # our own link: at once
    g2 = info(2, 1, (dro_node(1), 3), (domain_node(2), 4))
    r.receive_route_info(g2, 0.0)
    assert r.domains() == [1]  # others' news wait for the backoff
    settle(r, 0.0, 5.5, g2)
    assert r.domains() == [1, 2]
    assert r.cost_to(2) == (2 + 3 + 4, 2)  # our peer portal, theirs, their endpoint
    assert r.toward(2) == "P" and r.toward(1) == "E1"
    assert r.forwards(2, "P", "E1") and not r.forwards(2, "E1", "P")
    assert r.on_path(1, 2, "E1") is True and r.on_path(9, 2, "E1") is None
    assert r.served_domains("E1") == [2]


def test_a_silent_dro_times_out_and_a_one_sided_link_does_not_count() -> None:
    r = router(1)
    r.set_portal("E1", Adjacency(domain_node(1), 1), 0.0)
    r.set_portal("P", Adjacency(dro_node(2), 1), 0.0)
    lonely = info(2, 1, (domain_node(2), 1))  # G2 does not list us
    settle(r, 0.0, 6.5, lonely)  # first heard at 1 s, recalculated at 6 s
    assert r.domains() == [1, 2] and r.toward(2) is None  # known, but not through us
    both = info(2, 2, (dro_node(1), 1), (domain_node(2), 1))
    settle(r, 6.5, 12.5, both)
    assert r.toward(2) == "P"
    # G2 falls silent: gone after route-info timeout (4 s) + check + backoff (5 s)
    settle(r, 12.5, 22.5)
    assert r.domains() == [1]


def test_max_hop_count_discards_route_information() -> None:
    r = router(1, max_hop_count=2)
    assert not r.receive_route_info(info(5, 1, (domain_node(5), 1), hops=3), 0.0)
    assert r.routes_discarded == 1
    assert r.receive_route_info(info(5, 1, (domain_node(5), 1), hops=2), 0.0)
    assert not r.receive_route_info(info(1, 1, hops=0), 0.0)  # our own, come round


def test_churn_holds_the_recalculation_and_warns() -> None:
    r = router(1)
    r.set_portal("E1", Adjacency(domain_node(1), 1), 0.0)
    r.take_events()
    t = 0.0
    for v in range(1, 13):  # a new topology every second, for 12 s
        t = float(v)
        r.receive_route_info(info(2, v, (domain_node(2), v)), t)
        r.handle_timer(t)
    events = r.take_events()
    assert not any(isinstance(e, RecalcDone) for e in events)
    held = [e for e in events if isinstance(e, RecalcHeldUp)]
    assert len(held) == 1 and held[0].waiting >= 10.0  # warning-interval 10 s
    settle(r, t, t + 5.5, info(2, 12, (domain_node(2), 12)))
    assert [e for e in r.take_events() if isinstance(e, RecalcDone)]
    assert r.domains() == [1, 2]


def test_advert_from_a_tir() -> None:
    otid = bytes(range(32))
    tir = lbmr.TIR(
        "ORD",
        7,
        lbmr.LBTRMInfo("10.0.0.5", "239.1.2.3", 99, 14400, 14390),
        [lbmr.OTIDOption(otid), lbmr.CostOption(2, 9), lbmr.DomainIdOption(4)],
    )
    ad = advert_from_tir(lbmr.decode(lbmr.encode(lbmr.LBMRPacket(0, tirs=[tir]))).tirs[0])
    assert (ad.source.otid, ad.source.topic) == (otid, "ORD")
    assert (ad.cost, ad.hop_count, ad.origin_domain) == (9, 2, 4)
    assert ad.transport == SourceTransport(
        "lbtrm",
        source_ip="10.0.0.5",
        multicast_group="239.1.2.3",
        udp_source_port=14390,
        udp_destination_port=14400,
    )
    plain = lbmr.TIR("X", 1, lbmr.TCPInfo("10.0.0.6", 14371, 5))
    local = advert_from_tir(plain, otid=b"\1" * 32)
    assert (local.cost, local.hop_count, local.origin_domain) == (0, 0, None)
    assert local.transport == SourceTransport("tcp", source_ip="10.0.0.6", tcp_source_port=14371)
