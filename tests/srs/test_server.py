"""SRS core (umcore.srs.server) with client cores (umcore.srs.client), in memory, explicit time."""

from __future__ import annotations

import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.srs.harness import Net, sir
from umcore.srs.client import SourceResolved, SourceWithdrawn, SRSClient
from umcore.srs.server import ServerConfig, SRSServer
from umcore.wire import srs as rs
from umcore.wire.srs_messages import (
    INTEREST_MODE_FLOOD,
    INTEREST_MODE_FLOOD_FORWARD_INTEREST,
    Batch,
    ContextNameInfo,
    ContextNameQuery,
    DomainInfo,
    ReceiverInfo,
    RegistrationRequest,
    RegistrationResponse,
    RouteInfo,
    SourceInfo,
    StreamRequest,
)

SRS_A = ("127.0.0.1", 27000)
SRS_B = ("127.0.0.1", 27001)


def make_net(*, servers=(SRS_A,), **cfg) -> Net:
    net = Net()
    for addr in servers:
        net.add_server(addr, SRSServer(ServerConfig(**cfg), now=0.0))
    return net


def client(net: Net, servers=(SRS_A,), **kw) -> int:
    kw.setdefault("session_id", len(net.clients) + 100)
    kw.setdefault("client_port", 14000 + len(net.clients))
    kw.setdefault("client_addr", "10.0.0.1")
    return net.add_client(SRSClient(list(servers), now=net.now, **kw))


def withdrawn(net: Net, ci: int) -> list[str]:
    return [e.record.topic for e in net.events[ci] if isinstance(e, SourceWithdrawn)]


def resolved_events(net: Net, ci: int) -> list[str]:
    return [e.record.topic for e in net.events[ci] if isinstance(e, SourceResolved)]


def test_registration_counts_and_client_id() -> None:
    net = make_net()
    server = net.servers[SRS_A]
    assert server is not None
    before = server.stats.clients_next_client_id
    a = client(net)
    net.pump()
    assert net.clients[a].registered_slots() == [0]
    s = server.snapshot_stats()
    assert s.active_clients_count == 1
    assert s.clients_connects_count == 1
    assert s.clients_next_client_id == before + 1
    assert server.connected_clients()[0].client_id == before


def test_receiver_created_later_gets_the_sir_from_the_srs() -> None:
    net = make_net()
    server = net.servers[SRS_A]
    a, b = client(net), client(net)
    net.pump()
    net.clients[a].send_source(sir("T1", 1))
    net.pump()
    assert net.resolved_topics(b) == set()  # filter mode: no interest yet
    net.clients[b].send_receiver("T1")
    net.pump()
    assert net.resolved_topics(b) == {"T1"}
    owner = next(c for c in server.clients() if c.session_id == net.clients[a].session_id)
    assert owner.stats.client_sir_received_count == 1
    # the source's own context is never sent its own SIR
    assert net.resolved_topics(a) == set()


def test_filter_flood_and_wildcard() -> None:
    net = make_net()
    src, filt, flood, wild = client(net), client(net), client(net), client(net)
    net.clients[flood].interest_mode = INTEREST_MODE_FLOOD
    net.clients[wild].send_wildcard("^T.*")
    net.pump()
    for i, topic in enumerate(("T1", "T2", "X1"), 1):
        net.clients[src].send_source(sir(topic, i))
    net.pump()
    assert net.resolved_topics(filt) == set()
    assert net.resolved_topics(flood) == {"T1", "T2", "X1"}
    assert net.resolved_topics(wild) == {"T1", "T2"}
    # a flood client that connects later gets every existing source at stream open
    late = client(net, interest_mode=INTEREST_MODE_FLOOD)
    net.pump()
    assert net.resolved_topics(late) == {"T1", "T2", "X1"}


def test_sdr_gives_ser_after_the_backoff() -> None:
    net = make_net(source_leave_backoff_ms=500)
    server = net.servers[SRS_A]
    a, b, c = client(net), client(net), client(net)
    net.clients[b].send_receiver("T")
    net.clients[c].send_receiver("T")
    net.pump()
    rec = sir("T", 7)
    net.clients[a].send_source(rec)
    net.pump()
    assert net.resolved_topics(b) == {"T"}
    net.now = 10.0
    net.clients[a].send_source_delete(rec.otid, rec.topic)
    net.advance(10.45)
    assert withdrawn(net, b) == []
    net.advance(10.55)
    assert withdrawn(net, b) == ["T"]
    assert withdrawn(net, c) == ["T"]
    sent = [cl.stats.client_ser_sent_count for cl in server.clients()]
    assert sorted(sent) == [0, 1, 1]


def test_sir_again_inside_the_backoff_cancels_the_ser() -> None:
    net = make_net(source_leave_backoff_ms=500)
    a, b = client(net), client(net)
    net.clients[b].send_receiver("T")
    net.pump()
    rec = sir("T", 7)
    net.clients[a].send_source(rec)
    net.pump()
    net.clients[a].send_source_delete(rec.otid, rec.topic)
    net.advance(0.2)
    net.clients[a].send_source(rec)
    net.advance(5.0)
    assert withdrawn(net, b) == []
    assert resolved_events(net, b) == ["T"]


def test_lifetime_expiry_after_disconnect_without_delete() -> None:
    net = make_net(source_state_lifetime=5, source_leave_backoff_ms=500)
    server = net.servers[SRS_A]
    a = client(net, reconnect_min=100, reconnect_max=100)  # stays away
    b = client(net)
    net.clients[b].send_receiver("T")
    net.pump()
    net.clients[a].send_source(sir("T", 1))
    net.pump()
    net.now = 1.0
    net.cut(a, 0)
    assert server.snapshot_stats().clients_inactive_sir_count == 1
    net.advance(5.9)
    assert withdrawn(net, b) == []
    assert server.stats.clients_expired_sir_count == 0
    net.advance(6.6)  # lifetime 5 s from the disconnect + 0.5 s back-off
    assert withdrawn(net, b) == ["T"]
    assert server.stats.clients_expired_sir_count == 1
    assert server.snapshot_stats().clients_inactive_sir_count == 0


def test_reconnect_within_the_lifetime_sends_no_ser() -> None:
    net = make_net(source_state_lifetime=5)
    server = net.servers[SRS_A]
    a = client(net, reconnect_min=2.0, reconnect_max=2.0)
    b = client(net)
    net.clients[b].send_receiver("T")
    net.pump()
    net.clients[a].send_source(sir("T", 1))
    net.pump()
    net.now = 1.0
    net.cut(a, 0)
    assert server.snapshot_stats().clients_inactive_sir_count == 1
    net.advance(3.5)  # reconnected at 3.0 and re-sent its SIR
    assert net.clients[a].registered_slots() == [0]
    assert server.snapshot_stats().clients_inactive_sir_count == 0
    net.advance(30.0)
    assert withdrawn(net, b) == []
    assert server.stats.clients_expired_sir_count == 0
    assert len(server.clients()) == 2  # resumed, not a new client


def test_interest_lifetime_and_rer_to_forward_interest_clients() -> None:
    net = make_net(interest_state_lifetime=3)
    server = net.servers[SRS_A]
    dro = client(net, interest_mode=INTEREST_MODE_FLOOD_FORWARD_INTEREST)
    rcv = client(net, reconnect_min=100, reconnect_max=100)
    net.pump()
    net.clients[rcv].send_receiver("T")
    net.pump()
    d = next(c for c in server.clients() if c.session_id == net.clients[dro].session_id)
    assert d.stats.client_rir_sent_count == 1
    net.cut(rcv, 0)
    assert server.snapshot_stats().clients_inactive_rir_count == 1
    net.advance(3.5)
    assert server.stats.clients_expired_rir_count == 1
    assert d.stats.client_rer_sent_count == 1
    assert server.snapshot_stats().clients_inactive_rir_count == 0


def test_two_srs_one_killed_resolution_keeps_working() -> None:
    net = make_net(servers=(SRS_A, SRS_B))
    a = client(net, servers=(SRS_A, SRS_B))
    b = client(net, servers=(SRS_A, SRS_B))
    net.pump()
    net.clients[a].send_source(sir("T", 1))
    net.clients[b].send_receiver("T")
    net.pump()
    assert net.resolved_topics(b) == {"T"}
    net.kill_server(SRS_A)
    net.advance(10.0)
    assert withdrawn(net, b) == []
    assert net.resolved_topics(b) == {"T"}
    # new state still flows through the surviving SRS
    net.clients[a].send_source(sir("U", 2))
    c = client(net, servers=(SRS_A, SRS_B))
    net.clients[c].send_receiver("U")
    net.clients[b].send_receiver("U")
    net.advance(11.0)
    assert net.resolved_topics(c) == {"U"}
    assert net.resolved_topics(b) == {"T", "U"}
    # and a delete still withdraws (one SRS left vouching)
    rec = sir("T", 1)
    net.clients[a].send_source_delete(rec.otid, rec.topic)
    net.advance(12.0)
    assert withdrawn(net, b) == ["T"]


def test_server_restart_clients_resync_unaided() -> None:
    net = make_net()
    a, b = client(net, reconnect_max=1.0), client(net, reconnect_max=1.0)
    net.pump()
    for i in range(20):
        net.clients[a].send_source(sir(f"T{i}", i))
        net.clients[b].send_receiver(f"T{i}")
    net.pump()
    assert len(net.resolved_topics(b)) == 20
    net.kill_server(SRS_A)
    net.advance(3.0)  # reconnects fail while it is down
    net.add_server(SRS_A, SRSServer(ServerConfig(), now=net.now))
    net.advance(5.0)
    server = net.servers[SRS_A]
    assert server is not None
    assert server.source_count() == 20
    assert len(server.connected_clients()) == 2
    assert withdrawn(net, b) == []
    assert len(net.resolved_topics(b)) == 20
    net.clients[a].send_source(sir("NEW", 99))
    net.clients[b].send_receiver("NEW")
    net.pump()
    assert "NEW" in net.resolved_topics(b)


def test_source_gone_while_srs_was_away_is_withdrawn_after_resync() -> None:
    net = make_net()
    a = client(net, reconnect_max=1.0)
    b = client(net, reconnect_max=1.0, resync_grace=2.0)
    net.pump()
    net.clients[a].send_source(sir("T", 1))
    net.clients[b].send_receiver("T")
    net.pump()
    net.kill_server(SRS_A)
    rec = sir("T", 1)
    net.clients[a].send_source_delete(rec.otid, rec.topic)  # nobody hears the delete
    net.add_server(SRS_A, SRSServer(ServerConfig(), now=net.now))
    net.advance(1.0)
    assert withdrawn(net, b) == []
    net.advance(5.0)
    assert withdrawn(net, b) == ["T"]


def test_bounded_sources_and_clients() -> None:
    net = make_net(max_sources=5, max_clients=3)
    server = net.servers[SRS_A]
    assert server is not None
    a = client(net)
    net.pump()
    for i in range(8):
        net.clients[a].send_source(sir(f"T{i}", i))
    net.pump()
    assert server.source_count() == 5
    assert server.refused.sources == 3
    b, c = client(net, reconnect_min=100), client(net, reconnect_min=100)
    net.pump()
    net.cut(b, 0)  # b becomes inactive: evicted to admit d
    d = client(net)
    net.pump()
    assert server.refused.clients_evicted == 1
    e = client(net, reconnect_min=100, reconnect_max=100)  # table full of connected clients
    net.pump()
    assert server.refused.clients == 1
    assert net.clients[e].registered_slots() == []
    assert net.clients[d].registered_slots() == [0]
    del c


def _registered_raw(server: SRSServer, cid: int, now: float = 0.0) -> bytes:
    server.receive_connected(cid, ("127.0.0.1", 5000 + cid), now)
    server.receive_data(
        cid,
        rs.encode(rs.Setup(1000, 3000))
        + rs.encode(rs.RequestResponse(1, RegistrationRequest("10.0.0.9", 1, cid)))
        + rs.encode(rs.RequestStream(3, StreamRequest())),
        now,
    )
    return b"".join(d for c, d in server.take_writes() if c == cid)


def test_garbage_costs_only_that_connection() -> None:
    server = SRSServer()
    good = _registered_raw(server, 1)
    frames = rs.SRSStreamDecoder().feed(good)
    assert isinstance(frames[0].message, RegistrationResponse)  # type: ignore[union-attr]
    _registered_raw(server, 2)
    server.receive_data(2, b"\x00\x00\x08garbage!", 0.0)
    assert server.take_closes() == [2]
    assert server.refused.connections_malformed == 1
    # the good client still works
    server.receive_data(1, rs.encode(rs.Payload(3, Batch([ReceiverInfo("T")]))), 0.1)
    assert server.take_closes() == []
    assert server.connections == 1


def test_out_of_order_frames_close_the_connection() -> None:
    server = SRSServer()
    server.receive_connected(1, ("127.0.0.1", 1), 0.0)
    server.receive_data(1, rs.encode(rs.Payload(3, Batch([ReceiverInfo("T")]))), 0.0)
    assert server.take_closes() == [1]
    assert server.refused.connections_malformed == 1


@settings(max_examples=150, deadline=None)
@given(st.binary(max_size=300))
def test_fuzz_never_raises(data: bytes) -> None:
    server = SRSServer()
    _registered_raw(server, 1)
    server.take_writes()
    server.receive_data(1, data, 0.5)
    server.handle_timer(100.0)
    assert server.connections in (0, 1)


def test_keepalive_answered_and_silent_connection_closed() -> None:
    server = SRSServer()
    _registered_raw(server, 1)  # SETUP max lifetime 3 s
    server.receive_data(1, rs.encode(rs.Keepalive(True)), 1.0)
    out = rs.SRSStreamDecoder().feed(b"".join(d for _c, d in server.take_writes()))
    assert out == [rs.Keepalive(False, 0)]
    server.handle_timer(3.5)
    assert server.take_closes() == []
    server.handle_timer(4.5)
    assert server.take_closes() == [1]
    assert server.refused.connections_timed_out == 1


def serviced(server: SRSServer) -> dict[int, bytes]:
    """Run the record queue service the core armed; what it wrote, per connection."""
    due = server.service_deadline
    assert due is not None, "nothing queued"
    server.handle_timer(due)
    return dict(server.take_writes())


def test_dro_and_store_records_relayed() -> None:
    server = SRSServer(ServerConfig(route_state_lifetime=2))
    _registered_raw(server, 1)
    _registered_raw(server, 2)
    server.take_writes()
    route = RouteInfo([1, 2], "10.0.0.5", 4000, route_index=1)
    server.receive_data(1, rs.encode(rs.Payload(3, Batch([DomainInfo(7), route]))), 0.1)
    got = rs.SRSStreamDecoder().feed(serviced(server)[2])
    assert got[0].message.records == (DomainInfo(7), route)  # type: ignore[union-attr]
    store = ContextNameInfo("store1", "10.0.0.6", 5000)
    server.receive_data(2, rs.encode(rs.Payload(3, Batch([ContextNameQuery("store1")]))), 0.2)
    server.receive_data(1, rs.encode(rs.Payload(3, Batch([store]))), 0.3)
    got = rs.SRSStreamDecoder().feed(serviced(server)[2])
    assert got[0].message.records == (store,)  # type: ignore[union-attr]
    s = server.snapshot_stats()
    assert (s.clients_active_dir_count, s.clients_active_rtir_count) == (1, 1)
    assert s.clients_active_cnir_count == 1
    server.receive_disconnected(1, 1.0)
    server.handle_timer(2.9)
    assert server.take_writes() == []
    server.handle_timer(3.1)
    got = rs.SRSStreamDecoder().feed(serviced(server)[2])
    kinds = [type(r).__name__ for f in got for r in f.message.records]  # type: ignore[union-attr]
    assert kinds == ["RouteEnd"]
    assert server.stats.clients_expired_rtir_count == 1


def test_many_clients_random_interest_matches_a_model() -> None:
    """Random sources and interest across clients: every client resolves exactly the sources
    of other clients on topics it is interested in."""
    rng = random.Random(7)
    net = make_net()
    n = 6
    ids = [client(net) for _ in range(n)]
    net.pump()
    topics = [f"T{i}" for i in range(15)]
    interest: dict[int, set[str]] = {i: set() for i in ids}
    sources: dict[int, set[str]] = {i: set() for i in ids}
    for k in range(60):
        who = rng.choice(ids)
        topic = rng.choice(topics)
        if rng.random() < 0.5:
            net.clients[who].send_receiver(topic)
            interest[who].add(topic)
        else:
            net.clients[who].send_source(sir(topic, who * 1000 + k))
            sources[who].add(topic)
        net.pump()
    for i in ids:
        expected = {t for j in ids if j != i for t in sources[j]} & interest[i]
        assert net.resolved_topics(i) == expected


def test_ser_from_client_is_refused_and_counted() -> None:
    server = SRSServer()
    _registered_raw(server, 1)
    bad = sir("T", 1)
    bad.cost = -1
    server.receive_data(1, rs.encode(rs.Payload(3, Batch([bad]))), 0.1)
    assert server.source_count() == 0
    assert server.clients()[0].err.client_invalid_srs_message_received_count == 1


@pytest.mark.parametrize("pattern", ["(", "[z-a]"])
def test_bad_wildcard_pattern_is_counted_not_fatal(pattern: str) -> None:
    from umcore.wire.srs_messages import WildcardReceiverInfo

    server = SRSServer()
    _registered_raw(server, 1)
    server.receive_data(1, rs.encode(rs.Payload(3, Batch([WildcardReceiverInfo(pattern)]))), 0.1)
    assert server.take_closes() == []
    assert server.clients()[0].err.client_invalid_srs_message_received_count == 1


def test_sourceinfo_unchanged() -> None:
    # the relayed SIR is byte-identical to what the source's context sent
    net = make_net()
    a, b = client(net), client(net)
    net.clients[b].send_receiver("T")
    net.pump()
    rec = sir("T", 3)
    net.clients[a].send_source(rec)
    net.pump()
    got = net.clients[b].resolved("T")
    assert got == [rec] and isinstance(got[0], SourceInfo)
