"""Each topology of the notes' table (A6) on the fake network of :mod:`tests.dro.kit`.

Every test publishes numbered frames from a source in one TRD and checks what each receiver got:
every frame exactly once, in order, with the originating sequence numbers -- so a parallel path
that also forwarded, or a loop, shows up as a duplicate -- and, where the notes say which path
carries the data, that the other path carried none.
"""

from __future__ import annotations

from tests.dro.kit import Net, config, otid
from umcore.dro import DeleteProxySource, FinalAdvertisement, SourceKey

SK = SourceKey(otid(1), "AAA")


def burst(net: Net, domain: int, first: int, n: int, key: SourceKey = SK) -> list[int]:
    for sqn in range(first, first + n):
        net.publish(domain, key, sqn, b"m%d" % sqn)
    net.run(0.2)
    return list(range(first, first + n))


def sqns(got: list[tuple[int, bytes]]) -> list[int]:
    return [s for s, _ in got]


def forwarded(net: Net, dro: str, portal: str) -> int:
    return net.cores[dro].queue(portal).enqueued


def test_direct_link() -> None:
    net = Net()
    net.add("G1", config([("E1", 1, 1), ("E2", 2, 1)], name="G1"), 1)
    net.up("G1", "E1", 1)
    net.up("G1", "E2", 2)
    got = net.receiver(2, "AAA")
    net.source(1, SK)
    net.query()
    net.run(1.0)
    sent = burst(net, 1, 1, 20)
    assert sqns(got) == sent
    assert got[3] == (4, b"m4")


def test_single_link_via_peer() -> None:
    net = Net()
    net.add("G1", config([("E1", 1, 1)], [("P1", 1, "initiator")], name="G1"), 1)
    net.add("G2", config([("E2", 2, 1)], [("P2", 1, "acceptor")], name="G2"), 2)
    net.link(("G1", "P1"), ("G2", "P2"))
    for dro, portal, n in (("G1", "E1", 1), ("G1", "P1", 2), ("G2", "P2", 3), ("G2", "E2", 4)):
        net.up(dro, portal, n)
    got = net.receiver(2, "AAA")
    net.source(1, SK)
    net.query()
    net.run(7.0)  # each DRO hears the other's route information, then waits the 5 s backoff
    sent = burst(net, 1, 1, 10)
    assert sqns(got) == sent
    # from TRD1 to G2: G1's endpoint, then the link (both peer portals); two DROs
    assert net.cores["G2"].router.cost_to(1) == (3, 2)
    assert net.trds[2].proxy_sources[("G2", "E2", SK)] == (4, 2, 1)  # all four portals


def transit(*, route_over_trd: bool, b_daemon: str = "") -> Net:
    net = Net()
    net.route_over_trd = route_over_trd
    net.add("A", config([("A1", 1, 1), ("A2", 2, 1)], name="A"), 1)
    net.add("B", config([("B2", 2, 1), ("B3", 3, 1)], name="B", daemon_extra=b_daemon), 2)
    for dro, portal, n in (("A", "A1", 1), ("A", "A2", 2), ("B", "B2", 3), ("B", "B3", 4)):
        net.up(dro, portal, n)
    return net


def test_transit_trd_with_documented_records_only() -> None:
    """TRD1-A-TRD2-B-TRD3 with endpoint portals only: interest crosses TRD2 as TNWG interest
    records, the map from remote domain routes (no route information at all)."""
    net = transit(route_over_trd=False)
    got = net.receiver(3, "AAA")
    net.source(1, SK)
    net.query()
    net.run(8.0)
    assert net.cores["A"].router.domains() == [1, 2, 3]
    sent = burst(net, 1, 1, 10)
    assert sqns(got) == sent
    # B asked A through TRD2 (an interest record for domain 3), not with a TQR of its own
    assert any(k.symbol == "AAA" and d == 3 for k, d in net.cores["B"].advertised_interest("B2"))
    assert net.cores["B"].proxy_sources()  # B's proxy source in TRD3
    [(_, _, sk)] = net.trds[3].proxy_sources
    assert net.trds[3].proxy_sources[("B", "B3", sk)] == (4, 2, 1)  # cost, hops, origin domain


def test_transit_wildcard_receiver() -> None:
    net = transit(route_over_trd=True)
    got = net.wildcard(3, "^AA")
    keys = [SourceKey(otid(1), "AAA"), SourceKey(otid(2), "AAB"), SourceKey(otid(3), "BBB")]
    for k in keys:
        net.source(1, k)
    net.query()
    net.run(3.0)
    for k in keys:
        burst(net, 1, 1, 3, k)
    assert sorted(got) == [("AAA", 1), ("AAA", 2), ("AAA", 3), ("AAB", 1), ("AAB", 2), ("AAB", 3)]
    assert all(k.topic != "BBB" for (_, _, k) in net.trds[3].proxy_sources)


def test_max_hop_count_stops_a_source() -> None:
    net = transit(route_over_trd=True, b_daemon='<route-info max-hop-count="1"/>')
    got = net.receiver(3, "AAA")
    net.source(1, SK)
    net.query()
    net.run(3.0)
    burst(net, 1, 1, 5)
    assert got == []
    assert net.cores["B"].stats("B2").hop_limit_dropped >= 1


def parallel() -> Net:
    """TRD1 and TRD2 joined by G1~G2 (every portal cost 2) and G3~G4 (cost 5)."""
    net = Net()
    for a, b, cost, ida in (("G1", "G2", 2, 1), ("G3", "G4", 5, 3)):
        net.add(a, config([(f"{a}E", 1, cost)], [(f"{a}P", cost, "initiator")], name=a), ida)
        net.add(b, config([(f"{b}E", 2, cost)], [(f"{b}P", cost, "acceptor")], name=b), ida + 1)
        net.link((a, f"{a}P"), (b, f"{b}P"))
    for i, (dro, portal) in enumerate(
        (d, f"{d}{s}") for d in ("G1", "G2", "G3", "G4") for s in ("E", "P")
    ):
        net.up(dro, portal, i + 1)
    return net


def test_parallel_paths_use_the_cheaper_and_fail_over() -> None:
    net = parallel()
    got = net.receiver(2, "AAA")
    net.source(1, SK)
    net.query()
    net.run(12.0)  # route information heard, backoff passed
    assert net.cores["G2"].router.cost_to(1) == (6, 2)  # G1E 2 + link 2+2
    sent = burst(net, 1, 1, 10)
    assert sqns(got) == sent
    assert forwarded(net, "G2", "G2E") == 10 and forwarded(net, "G4", "G4E") == 0
    assert not net.cores["G3"].proxy_receivers() and not net.cores["G4"].proxy_sources()

    # G1 dies: G2's peer link drops; the others stop hearing G1 after route-info timeout,
    # recalculate after the backoff, and the G3~G4 path takes over
    net.kill("G1")
    net.down("G2", "G2P")
    net.run(15.0)
    assert net.cores["G4"].router.cost_to(1) == (15, 2)  # G3E 5 + link 5+5
    sent += burst(net, 1, 11, 10)
    assert sqns(got) == sent
    assert forwarded(net, "G4", "G4E") == 10

    # G1 comes back: traffic returns to the cheaper path, G4's proxy source says goodbye
    net.add("G1", config([("G1E", 1, 2)], [("G1P", 2, "initiator")], name="G1"), 1)
    net.up("G1", "G1E", 1)
    net.up("G1", "G1P", 2)
    net.up("G2", "G2P", 4)
    net.commands.clear()
    net.run(15.0)
    sent += burst(net, 1, 21, 10)
    assert sqns(got) == sent
    assert forwarded(net, "G4", "G4E") == 10  # nothing more on the standby path
    gone = [c for c in net.commands if isinstance(c, (FinalAdvertisement, DeleteProxySource))]
    assert any(c.portal == "G4E" for c in gone)


def test_equal_cost_ties_fall_the_same_way_everywhere() -> None:
    net = Net()
    for a, b, ida in (("G1", "G2", 1), ("G3", "G4", 3)):
        net.add(a, config([(f"{a}E", 1, 1)], [(f"{a}P", 1, "initiator")], name=a), ida)
        net.add(b, config([(f"{b}E", 2, 1)], [(f"{b}P", 1, "acceptor")], name=b), ida + 1)
        net.link((a, f"{a}P"), (b, f"{b}P"))
    for i, (dro, portal) in enumerate(
        (d, f"{d}{s}") for d in ("G1", "G2", "G3", "G4") for s in ("E", "P")
    ):
        net.up(dro, portal, i + 1)
    got = net.receiver(2, "AAA")
    net.source(1, SK)
    net.query()
    net.run(12.0)
    sent = burst(net, 1, 1, 10)
    assert sqns(got) == sent  # one path only, no duplicates
    carried = [forwarded(net, d, f"{d}E") for d in ("G2", "G4")]
    assert sorted(carried) == [0, 10]
    assert carried == [10, 0]  # the path of the smaller node ids (1, 2)


def test_loop_reroutes_around_a_broken_link() -> None:
    """G1(TRD1), G2(TRD2), G3(TRD3) in a ring of peer links."""
    net = Net()
    ring = {"G1": ("G1a", "G1b"), "G2": ("G2a", "G2b"), "G3": ("G3a", "G3b")}
    for n, (dro, (pa, pb)) in enumerate(ring.items(), start=1):
        net.add(
            dro,
            config([(f"{dro}E", n, 1)], [(pa, 1, "initiator"), (pb, 1, "acceptor")], name=dro),
            n,
        )
    net.link(("G1", "G1a"), ("G2", "G2b"))
    net.link(("G2", "G2a"), ("G3", "G3b"))
    net.link(("G3", "G3a"), ("G1", "G1b"))
    i = 0
    for dro, ports in ring.items():
        for p in (f"{dro}E", *ports):
            i += 1
            net.up(dro, p, i)
    got = net.receiver(3, "AAA")
    net.source(1, SK)
    net.query()
    net.run(12.0)
    sent = burst(net, 1, 1, 5)
    assert sqns(got) == sent
    assert forwarded(net, "G1", "G1b") == 5 and forwarded(net, "G2", "G2a") == 0  # direct
    net.down("G1", "G1b")
    net.down("G3", "G3a")
    net.run(15.0)
    sent += burst(net, 1, 6, 5)
    assert sqns(got) == sent
    assert forwarded(net, "G2", "G2a") == 5  # around the ring through G2


def test_star_with_centralized_dro_and_an_outbound_acl() -> None:
    acl = (
        '<acl><outbound><ace match="reject"><topic>AAA</topic></ace>'
        '<ace match="accept"><pcre-pattern>.*</pcre-pattern></ace></outbound></acl>'
    )
    net = Net()
    eps = [("E1", 1, 1), ("E2", 2, 1), ("E3", 3, 1), ("E4", 4, 1)]
    net.add("G1", config(eps, name="G1", portal_extra={"E4": acl}), 1)
    for n, (p, _, _) in enumerate(eps, start=1):
        net.up("G1", p, n)
    rcvs = {d: net.receiver(d, "AAA") for d in (2, 3, 4)}
    net.source(1, SK)
    net.query()
    net.run(1.0)
    sent = burst(net, 1, 1, 10)
    assert sqns(rcvs[2]) == sent and sqns(rcvs[3]) == sent
    assert rcvs[4] == []  # only that portal is blocked


def test_star_with_centralized_trd() -> None:
    """Three DROs on hub TRD 9, each to its own spoke TRD."""
    net = Net()
    for n in (1, 2, 3):
        net.add(f"G{n}", config([(f"H{n}", 9, 1), (f"S{n}", n, 1)], name=f"G{n}"), n)
        net.up(f"G{n}", f"H{n}", 10 + n)
        net.up(f"G{n}", f"S{n}", n)
    r2, r3 = net.receiver(2, "AAA"), net.receiver(3, "AAA")
    net.source(1, SK)
    net.query()
    net.run(8.0)
    sent = burst(net, 1, 1, 10)
    assert sqns(r2) == sent and sqns(r3) == sent
    # one proxy source in the hub for both spokes
    assert [k[:2] for k in net.trds[9].proxy_sources] == [("G1", "H1")]


def test_inbound_acl_forwards_abc_and_drops_def() -> None:
    acl = '<acl><inbound><ace match="accept"><topic>ABC</topic></ace></inbound></acl>'
    net = Net()
    net.add("G1", config([("E1", 1, 1), ("E2", 2, 1)], name="G1", portal_extra={"E1": acl}), 1)
    net.up("G1", "E1", 1)
    net.up("G1", "E2", 2)
    abc, dfe = SourceKey(otid(1), "ABC"), SourceKey(otid(2), "DEF")
    got_abc, got_def = net.receiver(2, "ABC"), net.receiver(2, "DEF")
    net.source(1, abc)
    net.source(1, dfe)
    net.query()
    net.run(1.0)
    burst(net, 1, 1, 3, abc)
    burst(net, 1, 1, 3, dfe)
    assert sqns(got_abc) == [1, 2, 3] and got_def == []
    # no proxy receiver for DEF at all: the ACL also saves topic resolution
    assert {k.symbol for _, k in net.cores["G1"].proxy_receivers()} == {"ABC"}
