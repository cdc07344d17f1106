"""Context names (Store name resolution) in the sans-IO resolver, with a fake clock.

Queries on UM's schedule (0, 0.1, 0.3, 0.7, 1.5, 2.5 ... s) until resolved or the query
duration; answers only for own names; the events (resolved, changed, duplicate, own name
elsewhere, expired, gave up); garbage never raises; and the SRS client's CNIR/CNQR through an
in-memory SRS.
"""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.srs.harness import Net
from umcore.errors import UMError
from umcore.resolver.core import ResolverConfig, TopicResolver
from umcore.resolver.names import (
    MAX_NAMES,
    ContextName,
    ContextNames,
    DuplicateName,
    NameChanged,
    NameExpired,
    NameQueryGaveUp,
    NameResolved,
    NameTimings,
    OwnNameElsewhere,
    QueryState,
)
from umcore.srs.client import ContextNameAnswered, SRSClient
from umcore.srs.server import ServerConfig, SRSServer
from umcore.wire import lbmr
from umcore.wire.lbmr_ext import (
    CTXINFO_FLAG_INSTANCE,
    CTXINFO_FLAG_IP,
    CTXINFO_FLAG_NAME,
    CTXINFO_FLAG_QUERY,
    CTXINFO_FLAG_TNWG_SRC,
    ContextInfo,
)

A, B, C = b"A" * 8, b"B" * 8, b"C" * 8  # context instances
PEER = ("10.0.0.9", 12965)


def resolver(instance: bytes = A, **timings: float) -> TopicResolver:
    return TopicResolver(
        ResolverConfig(context_names=NameTimings(**timings)), 0.0, instance=instance
    )


def records(r: TopicResolver) -> list[ContextInfo]:
    """The context-info records ``r`` sent since the last call (each one whole datagram)."""
    out = []
    for data, _addr in r.take_datagrams():
        packet = lbmr.decode(data)
        assert packet.type == lbmr.LBMR_TYPE_EXT and type(packet.body) is ContextInfo
        out.append(packet.body)
    return out


def run(r: TopicResolver, until: float) -> list[tuple[float, ContextInfo]]:
    """Fire ``r``'s timers up to ``until``; the records sent, with their times."""
    sent = []
    while True:
        t = r.next_timer()
        if t is None or t > until + 1e-9:
            return sent
        r.handle_timer(t)
        sent.extend((round(t, 6), rec) for rec in records(r))


def advert(name: str, ip: str, port: int, instance: bytes) -> bytes:
    body = ContextInfo(CTXINFO_FLAG_IP | CTXINFO_FLAG_INSTANCE, port, ip, instance, name)
    return lbmr.encode(lbmr.LBMRPacket(lbmr.LBMR_TYPE_EXT, body=body))


def query(name: str, instance: bytes = C) -> bytes:
    body = ContextInfo(CTXINFO_FLAG_QUERY | CTXINFO_FLAG_INSTANCE, 0, "0.0.0.0", instance, name)
    return lbmr.encode(lbmr.LBMRPacket(lbmr.LBMR_TYPE_EXT, body=body))


# ------------------------------------------------------------------------------- schedule
def test_queries_follow_um_s_schedule_until_resolved() -> None:
    r = resolver()
    assert r.query_context_name("store1", 0.0) is None
    first = records(r)  # the first query goes out at once
    assert [(q.name, q.flags) for q in first] == [
        ("store1", CTXINFO_FLAG_QUERY | CTXINFO_FLAG_INSTANCE | CTXINFO_FLAG_NAME)
    ]
    assert first[0].instance == A
    sent = run(r, 5.0)
    assert [t for t, _ in sent] == [0.1, 0.3, 0.7, 1.5, 2.5, 3.5, 4.5]
    assert {rec.name for _, rec in sent} == {"store1"}
    r.receive_datagram(advert("store1", "10.0.0.5", 14567, B), PEER, 5.2)
    assert r.take_name_events() == [NameResolved(ContextName("store1", 0, "10.0.0.5", 14567, B))]
    assert r.names.query_state("store1") is QueryState.RESOLVED
    assert run(r, 30.0) == []  # resolved: no more queries (and nothing expires before 65.2)


def test_query_duration_stops_the_queries_and_a_later_advert_still_resolves() -> None:
    r = resolver(duration=1.5)
    r.query_context_name("s", 0.0)
    assert len(records(r)) == 1
    sent = run(r, 10.0)
    assert [t for t, _ in sent] == [0.1, 0.3, 0.7]  # 1.5 is the end of the duration
    assert r.take_name_events() == [NameQueryGaveUp("s")]
    assert r.names.query_state("s") is QueryState.GAVE_UP
    assert r.next_timer() is None
    r.receive_datagram(advert("s", "10.0.0.5", 1, B), PEER, 20.0)
    assert [type(e) for e in r.take_name_events()] == [NameResolved]


def test_zero_intervals_disable_the_queries() -> None:
    for timings in ({"min_interval": 0.0}, {"max_interval": 0.0}):
        r = resolver(**timings)
        r.query_context_name("s", 0.0)
        assert records(r) == [] and run(r, 10.0) == []
        r.receive_datagram(advert("s", "10.0.0.5", 1, B), PEER, 11.0)  # unsolicited: resolves
        assert [type(e) for e in r.take_name_events()] == [NameResolved]


def test_a_name_heard_before_it_is_wanted_resolves_at_once() -> None:
    r = resolver()
    r.receive_datagram(advert("s", "10.0.0.5", 7, B), PEER, 1.0)  # a Store's start-up advert
    assert r.take_name_events() == []  # nobody asked
    assert r.query_context_name("s", 2.0) == ContextName("s", 0, "10.0.0.5", 7, B)
    assert records(r) == [] and run(r, 10.0) == []


def test_queries_are_reference_counted() -> None:
    r = resolver()
    r.query_context_name("s", 0.0)
    r.query_context_name("s", 0.0)
    assert len(records(r)) == 1  # one schedule per name
    r.cancel_context_name("s")
    assert [t for t, _ in run(r, 0.35)] == [0.1, 0.3]
    r.cancel_context_name("s")
    assert run(r, 10.0) == [] and r.names.wanted() == []


# ------------------------------------------------------------------------------- answers
def test_only_own_names_are_answered_with_the_advertised_address() -> None:
    r = resolver(instance=B)
    r.advertise_context_name("store1", "10.1.2.3", 14567, 0.0)
    (startup,) = records(r)  # advertised at start-up
    assert (startup.name, startup.ip, startup.port, startup.instance) == (
        "store1", "10.1.2.3", 14567, B,
    )  # fmt: skip
    assert startup.flags == CTXINFO_FLAG_IP | CTXINFO_FLAG_INSTANCE | CTXINFO_FLAG_NAME
    r.receive_datagram(query("someone-else"), PEER, 1.0)
    assert records(r) == []
    r.receive_datagram(query("store1"), PEER, 2.0)
    assert records(r) == [startup]
    assert r.names.stats.queries_received == 2
    assert r.withdraw_context_name("store1") and not r.withdraw_context_name("store1")
    r.receive_datagram(query("store1"), PEER, 3.0)
    assert records(r) == []


def test_a_context_ignores_its_own_echoes() -> None:
    r = resolver(instance=B)
    r.advertise_context_name("store1", "10.1.2.3", 14567, 0.0)
    r.query_context_name("store1", 0.0)
    for data, _ in r.take_datagrams():  # multicast loops our own datagrams back
        r.receive_datagram(data, PEER, 0.0)
    assert r.take_name_events() == []
    assert r.names.stats.records_ignored == 2


def test_two_resolvers_find_each_other() -> None:
    store, source = resolver(instance=B), resolver(instance=A)
    source.query_context_name("store1", 0.0)
    source.take_datagrams()  # before the Store starts: unanswered
    store.advertise_context_name("store1", "127.0.0.1", 14567, 0.5)
    store.take_datagrams()  # the start-up advertisement is lost
    q = run_one_query(source, 0.7)  # the query at 0.7 reaches the Store...
    store.receive_datagram(lbmr.encode(lbmr.LBMRPacket(lbmr.LBMR_TYPE_EXT, body=q)), PEER, 0.7)
    for data, _ in store.take_datagrams():  # ... whose answer reaches the source
        source.receive_datagram(data, PEER, 0.7)
    (ev,) = source.take_name_events()
    assert ev == NameResolved(ContextName("store1", 0, "127.0.0.1", 14567, B))


def run_one_query(r: TopicResolver, at: float) -> ContextInfo:
    sent = run(r, at)
    assert sent and sent[-1][0] == at
    return sent[-1][1]


# ------------------------------------------------------------------------------- events
def test_duplicates_and_changes() -> None:
    r = resolver()
    r.query_context_name("s", 0.0)
    a1 = ContextName("s", 0, "10.0.0.1", 100, B)
    r.receive_datagram(advert("s", "10.0.0.1", 100, B), PEER, 1.0)
    assert r.take_name_events() == [NameResolved(a1)]
    # the same Store moves: information
    a2 = ContextName("s", 0, "10.0.0.1", 200, B)
    r.receive_datagram(advert("s", "10.0.0.1", 200, B), PEER, 2.0)
    assert r.take_name_events() == [NameChanged(a1, a2)]
    r.receive_datagram(advert("s", "10.0.0.1", 200, B), PEER, 3.0)
    assert r.take_name_events() == []  # heard again: nothing new
    # another Store with the same name: a duplicate (once per instance), and the newest wins
    c = ContextName("s", 0, "10.0.0.2", 300, C)
    r.receive_datagram(advert("s", "10.0.0.2", 300, C), PEER, 4.0)
    assert r.take_name_events() == [DuplicateName(a2, c), NameChanged(a2, c)]
    r.receive_datagram(advert("s", "10.0.0.1", 200, B), PEER, 5.0)
    assert r.take_name_events() == [NameChanged(c, a2)]  # B is known: no second warning
    assert r.names.resolved("s") == a2


def test_an_advertiser_warns_of_its_name_elsewhere_once() -> None:
    r = resolver(instance=B)
    mine = r.advertise_context_name("store1", "10.1.2.3", 14567, 0.0)
    r.take_datagrams()
    for t in (1.0, 2.0):
        r.receive_datagram(advert("store1", "10.9.9.9", 1, C), PEER, t)
    assert r.take_name_events() == [
        OwnNameElsewhere(mine, ContextName("store1", 0, "10.9.9.9", 1, C))
    ]


def test_names_expire_after_the_activity_timeout_and_are_queried_again() -> None:
    r = resolver(activity_timeout=60.0)
    r.query_context_name("s", 0.0)
    records(r)
    r.receive_datagram(advert("s", "10.0.0.1", 100, B), PEER, 1.0)
    entry = r.names.resolved("s")
    assert entry is not None and r.take_name_events() == [NameResolved(entry)]
    r.receive_datagram(advert("s", "10.0.0.1", 100, B), PEER, 30.0)  # heard again: refreshed
    assert r.next_timer() == pytest.approx(90.0)
    sent = run(r, 90.1)
    assert [t for t, _ in sent] == [90.0, 90.1]  # expired at 90: queries from the start again
    assert r.take_name_events() == [NameExpired(entry, "no advertisement for 60 s")]
    assert r.names.resolved("s") is None
    r.receive_datagram(advert("s", "10.0.0.1", 100, B), PEER, 91.0)
    assert r.take_name_events() == [NameResolved(entry)]


def test_activity_timeout_zero_keeps_names_forever() -> None:
    r = resolver(activity_timeout=0.0)
    r.query_context_name("s", 0.0)
    r.receive_datagram(advert("s", "10.0.0.1", 100, B), PEER, 1.0)
    r.take_datagrams()
    assert r.next_timer() is None
    r.handle_timer(1e6)
    assert r.names.resolved("s") is not None


def test_the_cache_is_bounded_but_wanted_names_are_always_kept() -> None:
    names = ContextNames(NameTimings(activity_timeout=0.0), instance=A)
    for i in range(MAX_NAMES):
        names.receive_record(advert_record(f"n{i}", B), 0.0)
    names.receive_record(advert_record("one-more", B), 0.0)
    assert names.stats.names_refused == 1 and names.resolved("one-more") is None
    names.query("wanted", 0.0)
    names.receive_record(advert_record("wanted", B), 0.0)
    assert [type(e) for e in names.take_events()] == [NameResolved]


def advert_record(name: str, instance: bytes) -> ContextInfo:
    return ContextInfo(CTXINFO_FLAG_IP | CTXINFO_FLAG_INSTANCE, 1, "10.0.0.1", instance, name)


def test_dro_portal_records_and_adverts_without_an_address_are_not_names() -> None:
    names = ContextNames(instance=A)
    names.query("s", 0.0)
    names.receive_record(ContextInfo(CTXINFO_FLAG_IP | CTXINFO_FLAG_TNWG_SRC, 1, "1.2.3.4"), 0.0)
    names.receive_record(ContextInfo(CTXINFO_FLAG_INSTANCE, 1, "1.2.3.4", B, "s"), 0.0)
    names.receive_record(ContextInfo(CTXINFO_FLAG_IP, 1, "1.2.3.4", B), 0.0)  # no name
    assert names.take_events() == [] and names.stats.records_ignored == 3


@pytest.mark.parametrize("bad", ["", "a" * 129, "has space", "dot.ted", "nul\0"])
def test_invalid_names_are_refused(bad: str) -> None:
    r = resolver()
    with pytest.raises(UMError):
        r.advertise_context_name(bad, "10.0.0.1", 1, 0.0)
    with pytest.raises(UMError):
        r.query_context_name(bad, 0.0)


@pytest.mark.parametrize(("ip", "port"), [("10.0.0", 1), ("10.0.0.1", 0), ("x", 70000)])
def test_invalid_addresses_are_refused(ip: str, port: int) -> None:
    with pytest.raises(UMError):
        resolver().advertise_context_name("s", ip, port, 0.0)


# ------------------------------------------------------------------------------- garbage
@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=64))
def test_garbage_never_raises(tail: bytes) -> None:
    r = resolver()
    r.advertise_context_name("s", "10.0.0.1", 1, 0.0)
    r.query_context_name("t", 0.0)
    for data in (b"\x07\x03" + tail, tail):
        r.receive_datagram(data, PEER, 1.0)
    r.take_datagrams()
    r.take_name_events()


@settings(max_examples=300, deadline=None)
@given(
    flags=st.integers(0, 0xFFFF),
    port=st.integers(0, 0xFFFF),
    instance=st.binary(min_size=8, max_size=8),
    name=st.none() | st.text(st.characters(blacklist_characters="\0"), max_size=40),
)
def test_any_decodable_record_is_handled(
    flags: int, port: int, instance: bytes, name: str | None
) -> None:
    r = resolver()
    r.advertise_context_name("s", "10.0.0.1", 1, 0.0)
    r.query_context_name("t", 0.0)
    try:
        data = lbmr.encode(
            lbmr.LBMRPacket(
                lbmr.LBMR_TYPE_EXT, body=ContextInfo(flags, port, "10.0.0.2", instance, name)
            )
        )
    except Exception:
        return  # not encodable (a name too long in UTF-8): not a datagram anyone could send
    r.receive_datagram(data, PEER, 1.0)
    r.handle_timer(2.0)
    for data, _ in r.take_datagrams():
        lbmr.decode(data)  # what we answer is well formed


# ------------------------------------------------------------------------------- SRS path
def test_names_over_the_srs_query_before_and_after_the_advert() -> None:
    net = Net()
    net.add_server(("127.0.0.1", 1), SRSServer(ServerConfig(), now=0.0))
    store = net.add_client(SRSClient([("127.0.0.1", 1)], context_instance=B))
    early = net.add_client(SRSClient([("127.0.0.1", 1)], context_instance=A))
    net.pump()
    net.clients[early].send_context_name_query("store1")  # before the Store advertises
    net.pump()
    net.clients[store].send_context_name_info("store1", "127.0.0.1", 14567)
    net.pump()
    late = net.add_client(SRSClient([("127.0.0.1", 1)], context_instance=C))
    net.pump()
    net.clients[late].send_context_name_query("store1")  # after: the SRS answers from its table
    net.pump()
    for ci in (early, late):
        (ev,) = [e for e in net.events[ci] if isinstance(e, ContextNameAnswered)]
        rec = ev.record
        assert (rec.name, rec.ip, rec.port, rec.origin_context_instance) == (
            "store1", "127.0.0.1", 14567, B,
        )  # fmt: skip
    assert not [e for e in net.events[store] if isinstance(e, ContextNameAnswered)]


def test_srs_names_are_sent_again_after_a_reconnect() -> None:
    net = Net()
    net.add_server(("127.0.0.1", 1), SRSServer(ServerConfig(), now=0.0))
    store = net.add_client(SRSClient([("127.0.0.1", 1)], context_instance=B))
    net.pump()
    net.clients[store].send_context_name_info("store1", "127.0.0.1", 14567)
    net.pump()
    net.kill_server(("127.0.0.1", 1))  # the SRS restarts and forgets everything
    net.add_server(("127.0.0.1", 1), SRSServer(ServerConfig(), now=net.now))
    net.advance(net.now + 10.0)  # the client reconnects and re-sends its state
    source = net.add_client(SRSClient([("127.0.0.1", 1)], context_instance=A))
    net.pump()
    net.clients[source].send_context_name_query("store1")
    net.pump()
    assert [e for e in net.events[source] if isinstance(e, ContextNameAnswered)]


def test_srs_answers_feed_the_name_table_and_do_not_expire() -> None:
    names = ContextNames(NameTimings(activity_timeout=1.0), instance=A)
    names.query("store1", 0.0)
    entry = ContextName("store1", 3, "10.0.0.1", 14567, B)
    names.receive_srs_info(entry, 0.0)
    assert names.take_events() == [NameResolved(entry)]  # the CNIR's domain id is kept
    names.handle_timer(100.0)
    assert names.resolved("store1") == entry
    names.receive_srs_end(entry, 101.0)
    assert names.take_events() == [NameExpired(entry, "its SRS record ended")]


def test_with_lbmrds_names_go_to_the_daemon() -> None:
    r = TopicResolver(ResolverConfig(unicast_daemons=[("10.0.0.7", 15380)]), 0.0, instance=A)
    r.advertise_context_name("store1", "10.1.2.3", 14567, 0.0)  # no source or receiver needed
    r.query_context_name("other", 0.0)
    assert [addr for _data, addr in r.take_datagrams()] == [("10.0.0.7", 15380)] * 2
    r.receive_datagram(query("store1"), ("10.0.0.8", 15380), 1.0)  # not our lbmrd: dropped
    assert r.take_datagrams() == []
    r.receive_datagram(query("store1"), ("10.0.0.7", 15380), 1.0)
    assert len(records(r)) == 1
