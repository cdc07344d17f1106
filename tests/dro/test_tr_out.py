"""The topic resolution a DRO endpoint originates: initial requests, TNWG interest records,
use queries, remote domain routes -- their pacing, their content, and tshark's reading of them;
and what it takes in through ``receive_lbmr``."""

from __future__ import annotations

from tests.dro.kit import config
from tests.oracle import Tshark
from umcore.dro import DroCore, InterestKey, LocalState
from umcore.dro.core import INITIAL_REQUEST_FLAGS
from umcore.wire import lbmr
from umcore.wire.pcap import udp_frame

Packets = list[tuple[float, str, lbmr.LBMRPacket]]


def direct() -> DroCore:
    core = DroCore(config([("E1", 1, 1), ("E2", 2, 1)]), 5)
    core.receive_portal_up("E1", 0.0, address=("10.0.0.1", 14001))
    core.receive_portal_up("E2", 0.0, address=("10.0.0.2", 14002))
    return core


def run(core: DroCore, start: float, until: float, step: float = 0.01) -> Packets:
    out: Packets = []
    now = start
    while now < until - 1e-9:
        now = round(now + step, 6)
        nxt = core.next_timer()
        if nxt is not None and nxt <= now:
            core.handle_timer(now)
        for portal, pkt in core.take_lbmr():
            assert lbmr.decode(lbmr.encode(pkt)) == pkt  # encodable, and nothing lost
            out.append((now, portal, pkt))
    return out


def of(out: Packets, cls: type, portal: str | None = None) -> Packets:
    return [x for x in out if isinstance(x[2].body, cls) and (portal is None or x[1] == portal)]


def test_initial_requests_ten_seconds_once_a_second() -> None:
    core = direct()
    out = run(core, 0.0, 15.0)
    reqs = of(out, lbmr.TopicResRequest, "E1")
    assert [round(t) for t, _, _ in reqs] == list(range(10))
    assert all(p.body.flags == INITIAL_REQUEST_FLAGS for _, _, p in reqs)
    assert len(of(out, lbmr.TopicResRequest, "E2")) == 10


def test_interest_records_new_at_min_interval_refresh_at_max_cancel_when_gone() -> None:
    core = direct()
    run(core, 0.0, 0.5)
    core.receive_tqr("E2", "AAA", 0.5)
    out = run(core, 0.5, 0.7)
    core.receive_tqr("E2", "BBB", 0.7)  # within min-interval (1000 ms) of the last send
    core.receive_wildcard_tqr("E2", "^CC", lbmr.PATTERN_PCRE, 0.7)
    out += run(core, 0.7, 62.0)
    recs = [
        (round(t, 2), r.symbol, r.flags, r.domain_id)
        for t, _, p in of(out, lbmr.TNWGInterest, "E1")
        for r in p.body.records
    ]
    assert recs[0] == (0.51, "AAA", 0, 2)
    assert (0.71, "^CC", lbmr.TNWG_INTEREST_FLAG_PATTERN, 2) in recs  # pattern class: first
    assert (1.51, "BBB", 0, 2) in recs  # topic class waits for its min-interval
    refresh = [r for r in recs if r[2] & lbmr.TNWG_INTEREST_FLAG_REFRESH]
    assert {r[1] for r in refresh} == {"AAA", "BBB", "^CC"}
    assert min(r[0] for r in refresh if r[1] != "^CC") >= 60.0  # max-interval 60 s
    assert not of(out, lbmr.TNWGInterest, "E2")  # nothing from E1's side to advertise
    # the receivers go (no answers to use queries): the records are withdrawn with CANCEL
    out = run(core, 62.0, 320.0, step=0.05)
    cancels = [
        r.symbol
        for _, _, p in of(out, lbmr.TNWGInterest, "E1")
        for r in p.body.records
        if r.flags & lbmr.TNWG_INTEREST_FLAG_CANCEL
    ]
    assert sorted(cancels) == ["AAA", "BBB", "^CC"]
    assert core.advertised_interest("E1") == []


def test_use_queries_and_their_answers() -> None:
    core = direct()
    core.receive_tqr("E2", "AAA", 0.0)
    core.receive_wildcard_tqr("E2", "^B", lbmr.PATTERN_PCRE, 0.0)
    out = run(core, 0.0, 300.5, step=0.1)
    tmrs = [t for _, p, pkt in of(out, lbmr.TopicManagement, "E2") for t in pkt.body.tmrs]
    assert {(t.topic, t.flags) for t in tmrs} == {
        ("AAA", 0),
        ("^B", lbmr.TMR_FLAG_WILDCARD_PCRE),
    }
    answer = lbmr.LBMRPacket(
        4,
        body=lbmr.TopicManagement([lbmr.TMR("AAA", lbmr.TMR_TOPIC_USE, lbmr.TMR_FLAG_RESPONSE)]),
    )
    core.receive_lbmr("E2", lbmr.decode(lbmr.encode(answer)), 300.6)
    assert core.local_interest_state("E2", InterestKey("AAA")) is LocalState.ACTIVE
    assert core.local_interest_state("E2", InterestKey("^B", 1)) is LocalState.QUERYING


def test_domain_routes_name_the_domains_reachable_through_us() -> None:
    core = direct()
    out = run(core, 0.0, 3.05)
    routes = of(out, lbmr.RemoteDomainRoute)
    e1 = [(round(t, 2), p.body) for t, portal, p in routes if portal == "E1"]
    assert [t for t, _ in e1] == [0.01, 1.01, 2.01, 3.01]  # max-interval 1000 ms
    assert e1[0][1] == lbmr.RemoteDomainRoute("10.0.0.1", 14001, (2,))
    assert next(p.body.domains for _, portal, p in routes if portal == "E2") == (1,)


def test_receive_lbmr_dispatch_and_bad_input() -> None:
    core = direct()
    from_dro = lbmr.LBMRPacket(
        0, tqrs=[lbmr.TQR("X")], options=[lbmr.SrcTypeOption(lbmr.SRC_TYPE_TNWGD)]
    )
    core.receive_lbmr("E2", from_dro, 0.0)
    assert core.stats("E2").tqrs_from_dros_ignored == 1 and not core.proxy_receivers()
    core.receive_lbmr("E2", lbmr.LBMRPacket(1, tqrs=[lbmr.WildcardTQR(1, "(")]), 0.0)
    assert not core.proxy_receivers()  # a pattern Python cannot compile: dropped
    interest = lbmr.TNWGInterest([lbmr.TNWGInterestRecord("R", 0, 0, 9)])
    core.receive_lbmr("E2", lbmr.LBMRPacket(7, body=interest), 0.0)
    assert core.proxy_receivers() == {("E1", InterestKey("R"))}
    cancel = lbmr.TNWGInterest([lbmr.TNWGInterestRecord("R", lbmr.TNWG_INTEREST_FLAG_CANCEL, 0, 9)])
    core.receive_lbmr("E2", lbmr.LBMRPacket(7, body=cancel), 0.1)
    assert not core.proxy_receivers()
    own = lbmr.TNWGInterest([lbmr.TNWGInterestRecord("S", 0, 0, 2)])
    core.receive_lbmr("E2", lbmr.LBMRPacket(7, body=own), 0.2)  # E2's own domain: ignored
    assert not core.proxy_receivers()
    # GW_REMOTE_INTEREST makes the DRO resend its interest at once
    core.receive_tqr("E2", "AAA", 0.3)
    run(core, 0.3, 5.0)
    core.receive_lbmr(
        "E1", lbmr.LBMRPacket(7, body=lbmr.TopicResRequest(lbmr.TRREQ_GW_REMOTE_INTEREST)), 5.0
    )
    out = run(core, 5.0, 5.02)
    assert [r.symbol for _, _, p in of(out, lbmr.TNWGInterest, "E1") for r in p.body.records] == [
        "AAA"
    ]


def test_tshark_reads_what_a_dro_endpoint_sends(tshark: Tshark) -> None:
    core = direct()
    core.receive_tqr("E2", "AAA", 0.0)
    core.receive_wildcard_tqr("E2", "^AA.*", lbmr.PATTERN_PCRE, 0.0)
    out = run(core, 0.0, 301.0, step=0.5)
    kinds = (lbmr.TopicResRequest, lbmr.TNWGInterest, lbmr.RemoteDomainRoute, lbmr.TopicManagement)
    sample = [next(p for _, _, p in out if isinstance(p.body, k)) for k in kinds]
    frames = [udp_frame("10.0.0.1", 14402, "10.0.0.255", 15380, lbmr.encode(p)) for p in sample]
    decoded = tshark.decode(frames)
    decoded.assert_clean()
    assert [decoded.value("lbmr.hdr.ext_type", i) for i in range(3)] == ["0x04", "0x05", "0x06"]
    assert decoded.value("lbmr.topic_res_request.flags", 0) == "0x0043"  # GW_REMOTE|QUERY|WC
    assert decoded.values("lbmr.tnwg.interest_rec.symbol", 1) == ["AAA"]  # topics; patterns apart
    assert decoded.values("lbmr.tnwg.interest_rec.domain_id", 1) == ["2"]
    assert decoded.values("lbmr.remote_domain_route.domain", 2) == ["2"]
    assert decoded.values("lbmr.remote_domain_route.port", 2) == ["14001"]
    names = decoded.values("lbmr.tmb.tmr.name", 3)
    assert names and set(names) <= {"AAA", "^AA.*"}
    assert set(decoded.values("lbmr.tmb.tmr.flags", 3)) <= {"0x00", "0x40"}  # queries, no RESPONSE
