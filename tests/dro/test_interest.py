"""Interest ageing: use queries for local interest, the remote-interest check, rate limits."""

from __future__ import annotations

from tests.dro.kit import config
from umcore.config.dro import RemotePattern, RemoteTopic, UseQuery
from umcore.dro import (
    CreateProxySource,
    DroCore,
    InterestKey,
    LocalState,
    SourceAdvert,
    SourceKey,
)
from umcore.dro.interest import MAX_PENDING_QUERIES, PortalInterest
from umcore.dro.ratelimit import TrafficLimiter
from umcore.wire import lbmr


def table(**kw: object) -> PortalInterest:
    args: dict[str, object] = {
        "topic_use_query": UseQuery(),
        "pattern_use_query": UseQuery(),
        "remote_topic": RemoteTopic(),
        "remote_pattern": RemotePattern(),
    }
    args.update(kw)
    return PortalInterest("E1", 1, **args)  # type: ignore[arg-type]


def run(t: PortalInterest, until: float, sent: list[tuple[float, InterestKey]]) -> list[object]:
    """Advance the table's timers to ``until``, 'sending' every queued use query at once."""
    changes: list[object] = []
    while True:
        nxt = t.next_timer()
        if nxt is None or nxt > until:
            return changes
        changes += t.handle_timer(nxt)
        for q in t.pending.values():
            while q:
                key = q.popleft()
                sent.append((nxt, key))
                t.query_sent(key, nxt)


def test_local_interest_ages_out_after_max_unanswered_use_queries() -> None:
    t = table()
    key = InterestKey("AAA")
    [added] = t.refresh_local(key, 0.0)
    assert added.added and added.domain == 1
    sent: list[tuple[float, InterestKey]] = []
    assert run(t, 299.9, sent) == [] and sent == []  # periodic-interval 300 s: quiet
    assert t.local_state(key) is LocalState.ACTIVE
    run(t, 300.0, sent)
    assert sent == [(300.0, key)] and t.local_state(key) is LocalState.QUERYING
    changes = run(t, 311.99, sent)
    assert [s for s, _ in sent] == [300.0, 303.0, 306.0, 309.0]  # 3 s timeout each
    assert changes == []
    changes = run(t, 315.0, sent)
    assert [s for s, _ in sent] == [300.0, 303.0, 306.0, 309.0, 312.0]  # max = 5 queries
    [gone] = changes  # type: ignore[misc]
    assert not gone.added and gone.key == key  # type: ignore[attr-defined]
    assert t.local_state(key) is None and (key, 1) not in t.pairs()


def test_an_answer_or_a_tqr_keeps_the_interest() -> None:
    t = table()
    key = InterestKey("^A.*", 1)
    t.refresh_local(key, 0.0)
    sent: list[tuple[float, InterestKey]] = []
    run(t, 304.0, sent)
    assert len(sent) == 2
    assert t.refresh_local(key, 304.5) == []  # use query response: back to ACTIVE
    assert t.local_state(key) is LocalState.ACTIVE
    assert run(t, 604.4, sent) == [] and len(sent) == 2
    # autonomous TQRs suppress use queries altogether
    for s in range(605, 2000, 100):
        t.refresh_local(key, float(s))
        run(t, float(s), sent)
    assert len(sent) == 2


def test_remote_interest_ages_by_check_interval_max_per_check_and_cancel() -> None:
    t = table(remote_topic=RemoteTopic(check_interval=90000, max_topics=2, timeout=300000))
    keys = [InterestKey(f"T{i}") for i in range(5)]
    for k in keys:
        assert t.refresh_remote(k, 7, 0.0)[0].added
    assert t.refresh_remote(keys[0], 7, 100.0) == []  # refreshed
    assert t.refresh_remote(keys[4], 8, 0.0)[0].domain == 8  # another domain: another pair
    [cancel] = t.refresh_remote(keys[3], 7, 1.0, cancel=True)
    assert not cancel.added and t.refresh_remote(keys[3], 7, 1.0, cancel=True) == []
    removed: list[object] = []
    for check in (90.0, 180.0, 270.0):
        removed += t.handle_timer(check)
    assert removed == []  # nothing older than 300 s yet
    # stale at 360 (not refreshed since 60): T1, T2, T4/7, T4/8; T0 (refreshed at 100) is not
    first = t.handle_timer(360.0)
    assert len(first) == 2  # at most max-topics per check
    assert (keys[0], 7) in t.pairs()
    second = t.handle_timer(450.0)  # now T0 is stale too: three candidates, two go
    assert len(second) == 2
    third = t.handle_timer(540.0)
    assert len(third) == 1 and t.pairs() == set()


def test_use_queries_wait_for_the_rate_limit() -> None:
    cfg = config(
        [("E1", 1, 1), ("E2", 2, 1)],
        portal_extra={
            "E1": (
                '<topic-resolution><topic-use-query timeout="3000" max="5" '
                'periodic-interval="10000"><rate-limit bps="0" objects-per-second="10"/>'
                "</topic-use-query></topic-resolution>"
            )
        },
    )
    core = DroCore(cfg, 1)
    core.receive_portal_up("E1", 0.0, address=("10.0.0.1", 1))
    core.receive_portal_up("E2", 0.0, address=("10.0.0.2", 1))
    for i in range(30):
        core.receive_tqr("E1", f"T{i}", 0.0)
    sent: list[tuple[float, int]] = []
    now = 0.0
    while now < 12.5:
        now = round(now + 0.05, 6)
        nxt = core.next_timer()
        if nxt is not None and nxt <= now:
            core.handle_timer(now)
        for portal, pkt in core.take_lbmr():
            if portal == "E1" and isinstance(pkt.body, lbmr.TopicManagement):
                lbmr.decode(lbmr.encode(pkt))  # what is built encodes and decodes
                sent += [(now, 1) for t in pkt.body.tmrs if not t.flags & lbmr.TMR_FLAG_RESPONSE]
    # due at 10 s: 10 at once (one second's burst), then 10 per second
    at = [t for t, _ in sent]
    assert len([t for t in at if t <= 10.0]) == 10
    assert len(at) == 30 and at[-1] >= 11.9
    assert core.local_interest_state("E1", InterestKey("T29")) is LocalState.QUERYING


def test_limiter_bytes_and_objects() -> None:
    lim = TrafficLimiter(8000, 0, 0.0)  # 1000 bytes a second
    assert lim.try_take(0.0, 600) and not lim.try_take(0.0, 600)
    assert lim.refused == 1
    assert lim.ready_at(0.0, 600) == 0.2
    assert lim.try_take(0.2, 600)
    huge = TrafficLimiter(8000, 2, 0.0)
    assert huge.try_take(0.0, 5000)  # bigger than the bucket: goes when the bucket is full
    assert not huge.try_take(0.5, 10)


def test_pending_use_queries_are_bounded() -> None:
    assert MAX_PENDING_QUERIES >= 1000


def test_srs_reported_interest_holds_until_withdrawn() -> None:
    core = DroCore(config([("E1", 1, 1), ("E2", 2, 1)]), 1)
    core.receive_portal_up("E1", 0.0, address=("10.0.0.1", 1))
    core.receive_portal_up("E2", 0.0, address=("10.0.0.2", 1))
    key = InterestKey("AAA")
    core.receive_srs_interest("E2", key, 0.0)  # two receivers of AAA in TRD2, via the SRS
    core.receive_srs_interest("E2", key, 0.0)
    core.receive_tqr("E2", "AAA", 0.0)  # and UDP TR too: still one interest
    assert core.proxy_receivers() == {("E1", key)}
    now = 0.0
    while (nxt := core.next_timer()) is not None and nxt < 1000.0:
        now = max(now, nxt)
        core.handle_timer(now)
    # the TQR-learned entry aged out long ago; the SRS's receivers keep the proxy
    assert core.local_interest_state("E2", key) is None
    assert core.proxy_receivers() == {("E1", key)}
    core.receive_srs_interest("E2", key, now, present=False)
    assert core.proxy_receivers() == {("E1", key)}  # one receiver left
    core.receive_srs_interest("E2", key, now, present=False)
    assert core.proxy_receivers() == set()
    core.receive_srs_interest("E2", key, now, present=False)  # a stray delete: nothing
    assert core.proxy_receivers() == set()


def test_srs_relayed_remote_interest_keeps_its_domain() -> None:
    """Issue 19: DRO1 (E1 in TRD1, E2 in a transit TRD2 resolved by the SRS).  DRO2's
    remote-interest record relayed by the SRS names domain 3 (receivers in TRD3): DRO1 keeps it
    as interest of domain 3 -- not of TRD2 -- advertises it into TRD1 as domain 3, does not age
    it, and drops it when the SRS ends it."""
    core = DroCore(config([("E1", 1, 1), ("E2", 2, 1)]), 1)
    core.receive_portal_up("E1", 0.0, address=("10.0.0.1", 1))
    core.receive_portal_up("E2", 0.0, address=("10.0.0.2", 1))
    key = InterestKey("AAA")
    core.receive_srs_interest("E2", key, 0.0, domain=3)
    assert core.interest("E2") == {(key, 3)}
    assert core.advertised_interest("E1") == [(key, 3)]
    assert core.proxy_receivers() == {("E1", key)}
    # a TNWG interest record of the same pair (UDP as well) refreshes, then ages: still held
    core.receive_interest("E2", key, 3, 0.0)
    now = 0.0
    while (nxt := core.next_timer()) is not None and nxt < 1000.0:
        now = max(now, nxt)
        core.handle_timer(now)
    assert core.interest("E2") == {(key, 3)}
    core.receive_interest("E2", key, 3, now, cancel=True)  # the UDP entry's cancel: still held
    assert core.interest("E2") == {(key, 3)}
    # the record naming TRD2's own domain is a receiver of TRD2 (held local interest)
    core.receive_srs_interest("E2", key, now, domain=2)
    assert core.interest("E2") == {(key, 3), (key, 2)}
    core.receive_srs_interest("E2", key, now, present=False, domain=2)
    core.receive_srs_interest("E2", key, now, present=False, domain=3)
    assert core.interest("E2") == set()
    assert core.proxy_receivers() == set()
    assert core.advertised_interest("E1") == []
    core.receive_srs_interest("E2", key, now, present=False, domain=3)  # stray end: nothing
    assert core.interest("E2") == set()


def test_srs_relayed_remote_interest_domain_decides_the_forwarding() -> None:
    """Why the domain matters (issue 19): a ring TRD1 - G1 - TRD2 (SRS) - G2 - TRD3 - G3 -
    TRD1.  G1's TRD2 side holds G2's remote interest for TRD3's receivers; a source of TRD3
    reaches G1 through TRD1 (G3's proxy, origin domain 3).  G1 must not send it back into TRD2
    toward TRD3 -- it would, were the interest taken for TRD2's own -- but does for a
    receiver in TRD2, and does for a source of TRD1."""
    core = DroCore(config([("E1", 1, 1), ("E2", 2, 1)]), 1)
    core.receive_portal_up("E1", 0.0, address=("10.0.0.1", 1))
    core.receive_portal_up("E2", 0.0, address=("10.0.0.2", 1))
    key = InterestKey("AAA")
    core.receive_srs_interest("E2", key, 0.0, domain=3)
    assert core.proxy_receivers() == {("E1", key)}
    from_trd3 = SourceKey(b"\x03" * 32, "AAA")
    core.receive_source("E1", SourceAdvert(from_trd3, cost=1, hop_count=1, origin_domain=3), 0.0)
    assert ("E2", from_trd3) not in core.proxy_sources()  # back toward its own domain: no
    from_trd1 = SourceKey(b"\x01" * 32, "AAA")
    core.receive_source("E1", SourceAdvert(from_trd1), 0.0)
    assert ("E2", from_trd1) in core.proxy_sources()
    core.take_commands()
    # a receiver of TRD2 itself (its RIR names TRD2's domain) does want TRD3's source
    core.receive_srs_interest("E2", key, 0.0, domain=2)
    assert ("E2", from_trd3) in core.proxy_sources()
    made = [c for c in core.take_commands() if isinstance(c, CreateProxySource)]
    assert [(c.source, c.origin_domain) for c in made] == [(from_trd3, 3)]
