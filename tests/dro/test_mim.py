"""MIMs through DRO cores (umcore.dro.mim) on the fake network of :mod:`tests.dro.kit`.

A MIM published in one TRD is offered to every DRO endpoint there; each core's verdict
(:meth:`DroCore.receive_mim`) sends a copy into the egress portals' TRDs (or over a peer link),
where the other DROs' endpoints hear it -- the forwarding DRO's own portal does not (the adapter
drops its own echo).  :func:`flood` follows the copies and returns the TRDs reached, so a
duplicate path or a loop shows up as a TRD reached twice (or the flood not ending).
"""

from __future__ import annotations

from tests.dro.kit import Net, config, otid
from umcore.dro import MimSendResult, SourceKey

TOPIC = "mim.topic"
SIZE = 7
# A loop of copies would never end: the flood stops here and the test fails.
MAX_COPIES = 100


def flood(net: Net, domain: int, topic: str | None, *, request: bool = False) -> list[int]:
    """TRDs a MIM from ``domain`` reaches through the DROs (in order, with repeats)."""
    reached: list[int] = []
    # (TRD or peer portal the copy is heard in, origin, hops, the (dro, portal) that sent it)
    todo: list[tuple[list[tuple[str, str]], int | None, int, tuple[str, str] | None]] = [
        (net.trd(domain).endpoints, None, 0, None)
    ]
    copies = 0
    while todo:
        hearers, origin, hops, sender = todo.pop(0)
        for dro, portal in hearers:
            if (dro, portal) == sender or dro not in net.cores:
                continue  # the adapter drops its own echo
            route = net.cores[dro].receive_mim(
                portal, topic, SIZE, request=request, origin_domain=origin, hops_taken=hops
            )
            for egress in route.egress:
                copies += 1
                assert copies <= MAX_COPIES, f"MIM loops: {reached}"
                net.cores[dro].receive_mim_sent(egress, topic, SIZE, MimSendResult.SENT, request)
                if (dro, egress) in net.peer_links:
                    other = net.peer_links[(dro, egress)]
                    todo.append(([other], route.origin_domain, route.hops_taken, None))
                    continue
                dom = net.portal_trd[(dro, egress)]
                reached.append(dom)
                todo.append(
                    (net.trd(dom).endpoints, route.origin_domain, route.hops_taken, (dro, egress))
                )
    return reached


def interest(net: Net, seconds: float = 8.0) -> None:
    net.query()
    net.run(seconds)


def one_dro_three_trds() -> Net:
    net = Net()
    net.add("G", config([("E1", 1, 1), ("E2", 2, 1), ("E3", 3, 1)], name="G"), 1)
    for n, p in enumerate(("E1", "E2", "E3"), start=1):
        net.up("G", p, n)
    return net


def test_mim_goes_where_interest_is_and_nowhere_else() -> None:
    net = one_dro_three_trds()
    net.receiver(2, TOPIC)
    interest(net, 1.0)
    core = net.cores["G"]
    assert flood(net, 1, TOPIC) == [2]  # TRD2 has a receiver, TRD3 none
    assert flood(net, 1, "nobody.wants.this") == []
    e1, e2, e3 = (core.mim_stats(p).topic for p in ("E1", "E2", "E3"))
    assert (e1.rcvd, e1.bytes_rcvd, e1.dropped_no_interest, e1.bytes_dropped_no_interest) == (
        2, 2 * SIZE, 1, SIZE,
    )  # fmt: skip
    assert (e2.forwarded, e2.bytes_forwarded, e2.sent, e2.bytes_sent) == (1, SIZE, 1, SIZE)
    assert (e3.forwarded, e3.sent) == (0, 0)
    assert core.mim_stats("E1").topicless.rcvd == 0
    # a MIM from TRD2 with no receiver in TRD1 or TRD3 goes nowhere
    assert flood(net, 2, TOPIC) == []
    assert core.mim_stats("E2").topic.dropped_no_interest == 1


def test_wildcard_interest_and_requests() -> None:
    net = one_dro_three_trds()
    net.wildcard(3, r"^mim\.")
    interest(net, 1.0)
    assert flood(net, 1, TOPIC, request=True) == [3]
    assert flood(net, 1, "other.topic") == []
    core = net.cores["G"]
    assert (core.mim_stats("E1").topic.req_rcvd, core.mim_stats("E3").topic.req_sent) == (1, 1)


def test_topicless_mim_reaches_every_trd_once() -> None:
    net = one_dro_three_trds()
    assert sorted(flood(net, 1, None)) == [2, 3]
    core = net.cores["G"]
    assert core.mim_stats("E1").topicless.rcvd == 1
    assert core.mim_stats("E2").topicless.forwarded == core.mim_stats("E3").topicless.sent == 1
    assert core.mim_stats("E1").topic.rcvd == 0


def test_mim_ignores_acls() -> None:
    """UM's DRO does not filter MIMs by ACL (notes A7, A8): an outbound reject-all on E2 stops
    a source of the topic, not a MIM."""
    reject = (
        "<acl><outbound><ace match='reject'><pcre-pattern>.*</pcre-pattern></ace></outbound></acl>"
    )
    net = Net()
    net.add("G", config([("E1", 1, 1), ("E2", 2, 1)], name="G", portal_extra={"E2": reject}), 1)
    net.up("G", "E1", 1)
    net.up("G", "E2", 2)
    got = net.receiver(2, TOPIC)
    net.source(1, SourceKey(otid(1), TOPIC))
    interest(net, 1.0)
    assert flood(net, 1, TOPIC) == [2]
    net.publish(1, SourceKey(otid(1), TOPIC), 1, b"x")
    net.run(0.2)
    assert got == []  # the source's data was refused by the ACL, the MIM was not


def transit() -> Net:
    """TRD1 - A - TRD2 - B - TRD3, endpoints only."""
    net = Net()
    net.add("A", config([("A1", 1, 1), ("A2", 2, 1)], name="A"), 1)
    net.add("B", config([("B2", 2, 1), ("B3", 3, 1)], name="B"), 2)
    for dro, portal, n in (("A", "A1", 1), ("A", "A2", 2), ("B", "B2", 3), ("B", "B3", 4)):
        net.up(dro, portal, n)
    return net


def test_mim_crosses_two_dros_by_interest() -> None:
    net = transit()
    net.receiver(3, TOPIC)
    interest(net)
    # A forwards into TRD2 (B's interest for domain 3 is heard there), B on into TRD3
    assert flood(net, 1, TOPIC) == [2, 3]
    b2 = net.cores["B"].mim_stats("B2").topic
    assert b2.rcvd == 1  # heard A's copy in TRD2 (origin 1, one hop)
    assert net.cores["B"].mim_stats("B3").topic.forwarded == 1
    # back from TRD3: nobody in TRD1 or TRD2 wants it
    assert flood(net, 3, TOPIC) == []
    # interest in TRD1 as well: TRD3's MIM crosses both the other way
    net.receiver(1, TOPIC)
    interest(net, 2.0)
    assert flood(net, 3, TOPIC) == [2, 1]


def test_hop_limit_stops_a_mim() -> None:
    net = Net()
    one = '<route-info max-hop-count="1"/>'
    net.add("A", config([("A1", 1, 1), ("A2", 2, 1)], name="A"), 1)
    net.add("B", config([("B2", 2, 1), ("B3", 3, 1)], name="B", daemon_extra=one), 2)
    for dro, portal, n in (("A", "A1", 1), ("A", "A2", 2), ("B", "B2", 3), ("B", "B3", 4)):
        net.up(dro, portal, n)
    net.receiver(3, TOPIC)
    interest(net)
    assert flood(net, 1, TOPIC) == [2]  # B would be the second DRO crossed
    assert net.cores["B"].mim_stats("B2").topic.dropped_hop_limit == 1


def test_ring_of_trds_no_duplicates_no_loop() -> None:
    """G1(TRD1, TRD2), G2(TRD2, TRD3), G3(TRD3, TRD1): a loop of TRDs.  A MIM with interest
    everywhere reaches each other TRD once; a topicless one too."""
    net = Net()
    for n, (a, b) in enumerate(((1, 2), (2, 3), (3, 1)), start=1):
        g = f"G{n}"
        net.add(g, config([(f"{g}a", a, 1), (f"{g}b", b, 1)], name=g), n)
        net.up(g, f"{g}a", 2 * n)
        net.up(g, f"{g}b", 2 * n + 1)
    for dom in (1, 2, 3):
        net.receiver(dom, TOPIC)
    interest(net, 12.0)
    assert sorted(flood(net, 1, TOPIC)) == [2, 3]
    assert sorted(flood(net, 2, None)) == [1, 3]


def test_peer_link_carries_a_mim() -> None:
    """TRD1 - G1 = peer link = G2 - TRD2: the core routes the MIM over the peer portals."""
    net = Net()
    net.add("G1", config([("E1", 1, 1)], [("P1", 1, "initiator")], name="G1"), 1)
    net.add("G2", config([("E2", 2, 1)], [("P2", 1, "acceptor")], name="G2"), 2)
    net.link(("G1", "P1"), ("G2", "P2"))
    for dro, portal, n in (("G1", "E1", 1), ("G1", "P1", 2), ("G2", "P2", 3), ("G2", "E2", 4)):
        net.up(dro, portal, n)
    net.receiver(2, TOPIC)
    interest(net)
    assert flood(net, 1, TOPIC) == [2]
    assert net.cores["G1"].mim_stats("P1").topic.forwarded == 1
    assert net.cores["G2"].mim_stats("P2").topic.rcvd == 1
    assert flood(net, 1, "unwanted") == []


def test_a_down_portal_gets_nothing() -> None:
    net = one_dro_three_trds()
    net.receiver(2, TOPIC)
    net.receiver(3, TOPIC)
    interest(net, 1.0)
    net.down("G", "E3")
    assert flood(net, 1, TOPIC) == [2]
    assert flood(net, 1, None) == [2]
