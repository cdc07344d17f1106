"""Proxy receiver and proxy source life cycles, driven by interest, sources and time."""

from __future__ import annotations

from tests.dro.kit import config, otid
from umcore.dro import (
    CreateProxyReceiver,
    CreateProxySource,
    DeleteProxyReceiver,
    DeleteProxySource,
    DroCore,
    FinalAdvertisement,
    InterestKey,
    PortalCommand,
    SourceAdvert,
    SourceKey,
    SourceState,
)
from umcore.dro.proxy import SOURCE_TRANSITIONS, ProxySource, SourceEvent

SK = SourceKey(otid(5), "AAA")


def direct(**extra: str) -> DroCore:
    core = DroCore(config([("E1", 1, 1), ("E2", 2, 3)], portal_extra=extra), 77)
    core.receive_portal_up("E1", 0.0, address=("10.0.0.1", 1))
    core.receive_portal_up("E2", 0.0, address=("10.0.0.2", 1))
    return core


def advance(core: DroCore, until: float) -> list[tuple[float, PortalCommand]]:
    out: list[tuple[float, PortalCommand]] = []
    while True:
        nxt = core.next_timer()
        if nxt is None or nxt > until:
            return out
        core.handle_timer(nxt)
        out += [(round(nxt, 6), c) for c in core.take_commands()]
        core.take_lbmr()


def test_interest_creates_and_ageing_deletes_both_proxies() -> None:
    core = direct()
    core.receive_tqr("E2", "AAA", 0.0)
    assert core.take_commands() == [CreateProxyReceiver("E1", InterestKey("AAA"))]
    core.receive_source("E1", SourceAdvert(SK), 0.1)
    # cost = E1's 1 + E2's 3, one hop, from domain 1
    assert core.take_commands() == [CreateProxySource("E2", SK, 4, 1, 1)]
    assert core.proxy_sources() == {("E2", SK): SourceState.ACTIVE}
    # nobody answers the use queries: gone after 300 s + 5 x 3 s
    cmds = advance(core, 400.0)
    assert [type(c) for _, c in cmds] == [
        DeleteProxyReceiver,
        FinalAdvertisement,
        FinalAdvertisement,
        FinalAdvertisement,
        DeleteProxySource,
    ]
    t_gone = cmds[0][0]
    assert t_gone == 315.0
    assert [t for t, _ in cmds[1:]] == [316.0, 316.1, 316.2, 316.2]  # 1000 ms deletion delay
    assert [c.remaining for _, c in cmds[1:4]] == [2, 1, 0]  # type: ignore[attr-defined]
    assert core.proxy_receivers() == set() and core.proxy_sources() == {}


def test_source_back_within_the_deletion_delay_keeps_its_proxy() -> None:
    core = direct()
    core.receive_tqr("E2", "AAA", 0.0)
    core.receive_source("E1", SourceAdvert(SK), 0.0)
    core.take_commands()
    core.receive_source_gone("E1", SK, 1.0)
    assert core.proxy_sources() == {("E2", SK): SourceState.DELETE_PENDING}
    assert not core.receive_frame("E1", SK, 1, b"x")  # gone: frames are unknown
    core.receive_source("E1", SourceAdvert(SK), 1.5)
    assert core.take_commands() == []
    assert advance(core, 10.0) == []
    assert core.proxy_sources() == {("E2", SK): SourceState.ACTIVE}
    assert core.receive_frame("E1", SK, 2, b"x")


def test_eos_then_deletion_delay_then_final_advertisements() -> None:
    core = direct(E2="<source-deletion-delay>250</source-deletion-delay>")
    core.receive_tqr("E2", "AAA", 0.0)
    core.receive_source("E1", SourceAdvert(SK), 0.0)
    core.take_commands()
    core.receive_source_gone("E1", SK, 2.0)
    cmds = advance(core, 5.0)
    assert cmds == [
        (2.25, FinalAdvertisement("E2", SK, 2)),
        (2.35, FinalAdvertisement("E2", SK, 1)),
        (2.45, FinalAdvertisement("E2", SK, 0)),
        (2.45, DeleteProxySource("E2", SK)),
    ]


def test_source_back_during_the_final_burst_gets_a_new_proxy_after_it() -> None:
    core = direct()
    core.receive_tqr("E2", "AAA", 0.0)
    core.receive_source("E1", SourceAdvert(SK), 0.0)
    core.take_commands()
    core.receive_source_gone("E1", SK, 1.0)
    cmds = advance(core, 2.05)
    assert [type(c) for _, c in cmds] == [FinalAdvertisement]
    core.receive_source("E1", SourceAdvert(SK), 2.06)
    cmds = advance(core, 3.0)
    assert [type(c) for _, c in cmds] == [
        FinalAdvertisement,
        FinalAdvertisement,
        DeleteProxySource,
        CreateProxySource,
    ]
    assert core.proxy_sources() == {("E2", SK): SourceState.ACTIVE}


def test_portal_down_forgets_its_proxies_without_commands() -> None:
    core = direct()
    core.receive_tqr("E2", "AAA", 0.0)
    core.receive_source("E1", SourceAdvert(SK), 0.0)
    core.take_commands()
    core.receive_portal_down("E2", 1.0)
    # E2's interest went with it: E1's proxy receiver is no longer wanted
    assert core.take_commands() == [DeleteProxyReceiver("E1", InterestKey("AAA"))]
    assert core.proxy_sources() == {} and core.proxy_receivers() == set()
    assert advance(core, 10.0) == []


def test_own_proxy_sources_are_not_taken_back_in() -> None:
    core = DroCore(config([("E1", 1, 1), ("E2", 2, 1), ("E3", 3, 1)]), 1)
    for i, p in enumerate(("E1", "E2", "E3")):
        core.receive_portal_up(p, 0.0, address=(f"10.0.0.{i}", 1))
    core.receive_tqr("E2", "AAA", 0.0)
    core.receive_tqr("E3", "AAA", 0.0)
    core.receive_source("E1", SourceAdvert(SK), 0.0)
    core.take_commands()
    # E2's proxy receiver resolves our own proxy source in TRD2
    core.receive_source("E2", SourceAdvert(SK, cost=2, hop_count=1, origin_domain=1), 0.1)
    assert core.stats("E2").own_sources_ignored == 1
    assert core.take_commands() == []


def test_the_transition_table_is_the_only_way() -> None:
    ps = ProxySource("E", SK, 1, 1, 1, 1.0)
    assert ps.gone(0.0) == []  # nothing to delete
    assert (SourceState.ABSENT, SourceEvent.GONE) not in SOURCE_TRANSITIONS
    assert SOURCE_TRANSITIONS[(SourceState.DELETE_PENDING, SourceEvent.SEEN)] is (
        SourceState.ACTIVE
    )
