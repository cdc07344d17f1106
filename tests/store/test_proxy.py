"""ProxyElection (umcore.store.proxy): election waits, stand-down, SRI served; `now` is ours."""

from __future__ import annotations

import random
from pathlib import Path

from tests.store.corekit import STORE_ADDR, Rig, Source, make_rig, topic_config
from umcore.engine.raw import RawSession
from umcore.store import compose
from umcore.store.events import DeletionReason, ProxySourceCreated, ProxySourceDeleted
from umcore.store.proxy import (
    ProxyElection,
    ProxyNote,
    ProxyStart,
    ProxyState,
    ProxyStop,
    silence_bound,
    token_of,
)
from umcore.wire import lbmc, lbmr_options

SRI = compose.Sri(
    version=3,
    low_sqn=0,
    high_sqn=9,
    stores=(
        compose.SriStore(("127.0.0.1", 15001), 0, 101),
        compose.SriStore(("127.0.0.1", 15002), 1, 202),
    ),
    topic_idx=7,
)


def election(
    addr: int = 15001, fraction: float = 1.0, enabled: bool = True, seed: int = 1
) -> ProxyElection:
    return ProxyElection(
        enabled=enabled,
        quorum_required=False,
        store_index=addr - 15001,
        address=("127.0.0.1", addr),
        rng=random.Random(seed),
        uniform=lambda lo, hi: fraction,
    )


def inactive_source(e: ProxyElection, now: float = 0.0) -> None:
    e.registered(101, "t", True, now)
    e.receive_sri(101, SRI)
    e.inactive(101, 2.0, now)


def test_wait_is_the_drawn_fraction_of_the_interval_then_start() -> None:
    e = election(fraction=0.75)
    inactive_source(e, now=10.0)
    assert e.state(101) is ProxyState.WAITING
    assert e.next_timer() == 11.5
    e.handle_timer(11.4)
    assert e.take_actions() == []
    e.handle_timer(11.5)
    actions = e.take_actions()
    assert len(actions) == 1 and isinstance(actions[0], ProxyStart)
    assert (actions[0].reg_id, actions[0].topic) == (101, "t")
    assert e.state(101) is ProxyState.RUNNING and e.next_timer() is None


def test_default_draw_stays_within_half_and_one_and_a_half_intervals() -> None:
    for seed in range(50):
        e = ProxyElection(
            enabled=True, quorum_required=False, store_index=0, address=("127.0.0.1", 1),
            rng=random.Random(seed),
        )  # fmt: skip
        inactive_source(e)
        due = e.next_timer()
        assert due is not None and 1.0 <= due <= 3.0


def test_not_enabled_or_not_wanted_or_no_sri_never_elects() -> None:
    off = election(enabled=False)
    inactive_source(off)
    assert off.next_timer() is None and off.state(101) is None
    e = election()
    e.registered(5, "u", False, 0.0)
    e.receive_sri(5, SRI)
    e.inactive(5, 2.0, 0.0)
    assert e.state(5) is None
    e.registered(6, "v", True, 0.0)
    e.inactive(6, 2.0, 0.0)  # never heard an SRI: nothing to serve
    assert e.state(6) is ProxyState.IDLE and e.next_timer() is None


def test_reregistration_cancels_wait_and_deletes_running_proxy() -> None:
    e = election()
    inactive_source(e)
    e.registered(101, "t", True, 1.0)
    assert e.state(101) is ProxyState.IDLE and e.take_actions() == []
    e.inactive(101, 2.0, 2.0)
    e.handle_timer(10.0)
    assert isinstance(e.take_actions()[0], ProxyStart)
    e.registered(101, "t", True, 11.0)
    assert e.take_actions() == [ProxyStop(101, "t", DeletionReason.PROXY_SRC_REREGISTERED)]
    assert e.running() == []


def test_state_deleted_stops_proxy_with_lifetime_reason() -> None:
    e = election()
    inactive_source(e)
    e.handle_timer(5.0)
    e.take_actions()
    e.deleted(101, 6.0)
    assert e.take_actions() == [
        ProxyStop(101, "t", DeletionReason.PROXY_SRC_STATE_LIFETIME_EXPIRED)
    ]
    assert e.state(101) is None


def test_waiting_store_stands_down_when_peer_proxy_seen() -> None:
    e = election()
    inactive_source(e)
    e.peer_proxy("t", 5, ("127.0.0.1", 15002), 1.0)
    assert e.state(101) is ProxyState.FOLLOWING and e.elections_lost == 1
    (note,) = e.take_actions()
    assert isinstance(note, ProxyNote) and "runs at Store 127.0.0.1:15002: following" in note.text
    e.peer_proxy("t", 5, ("127.0.0.1", 15002), 2.0)  # its announcements keep coming
    e.handle_timer(2.0 + silence_bound(2.0) - 0.01)
    assert e.take_actions() == [] and e.state(101) is ProxyState.FOLLOWING
    e.peer_proxy("other-topic", 5, ("127.0.0.1", 15002), 2.5)  # no effect elsewhere
    assert e.next_timer() == 2.0 + silence_bound(2.0)


def test_collision_lower_token_withdraws_exactly_one_survives() -> None:
    a, b = election(15001, seed=1), election(15002, seed=2)
    for s in (a, b):
        inactive_source(s)
        s.handle_timer(5.0)
    ta = a.take_actions()[0]
    tb = b.take_actions()[0]
    assert isinstance(ta, ProxyStart) and isinstance(tb, ProxyStart)
    assert ta.token != tb.token
    a.peer_proxy("t", tb.token, b.address, 6.0)
    b.peer_proxy("t", ta.token, a.address, 6.0)
    assert sorted([len(a.running()), len(b.running())]) == [0, 1]
    loser = a if ta.token < tb.token else b
    stop, note = loser.take_actions()
    assert stop == ProxyStop(101, "t", DeletionReason.DELETED) and isinstance(note, ProxyNote)
    assert loser.state(101) is ProxyState.FOLLOWING  # it watches the winner's announcements
    # its own SRI echoed back is ignored
    winner = b if loser is a else a
    winner.peer_proxy("t", 0, winner.address, 7.0)
    assert winner.running() == [101]


def test_sri_served_under_proxy_topic_index_with_token() -> None:
    e = election()
    inactive_source(e)
    e.handle_timer(5.0)
    (start,) = e.take_actions()
    assert isinstance(start, ProxyStart)
    assert e.sri_request(compose.SriRequest(0, 3)) == []  # proxy not started yet
    e.started(101, 0, 3, 5.0)
    ((reg_id, data),) = e.sri_request(compose.SriRequest(0, 3))
    assert reg_id == 101
    assert e.sri_request(compose.SriRequest(0, 4)) == []
    msg = lbmc.decode(data)
    assert token_of(msg) == start.token
    sri = compose.decode(msg)
    assert isinstance(sri, compose.Sri)
    assert sri.topic_idx == 3
    assert [(s.address, s.src_reg_id) for s in sri.stores] == [
        (("127.0.0.1", 15001), 101),
        (("127.0.0.1", 15002), 202),
    ]
    assert (sri.version, sri.high_sqn) == (3, 9)
    assert token_of(lbmc.decode(SRI.encode())) is None


# --- through StoreCore ------------------------------------------------------------------------


def proxied_rig(tmp: Path, *, allow: bool = True) -> tuple[Rig, Source]:
    topic = topic_config(
        "t", source_activity_timeout=2000, source_state_lifetime=600000,
        proxy_election_interval=1000, source_check_interval=100,
    )  # fmt: skip
    rig = make_rig(tmp, [topic], allow_proxy_source=int(allow))
    src = Source(rig, "t", session_id=0x5E55, proxy=True, activity_timeout_ms=2000)
    assert src.register() is not None
    sri = compose.Sri(1, 0, 9, (compose.SriStore(STORE_ADDR, 0, src.reg_id),), topic_idx=0)
    rig.core.receive_frame(src.session, sri.encode(), rig.now)
    rig.pump()
    return rig, src


def test_core_elects_after_activity_timeout_and_serves_sri(tmp_path: Path) -> None:
    rig, src = proxied_rig(tmp_path)
    rig.advance(2.2)  # inactive; the election wait is 0.5..1.5 s
    assert not rig.events_of(ProxySourceCreated)
    rig.advance(1.6)
    (created,) = rig.events_of(ProxySourceCreated)
    assert (created.reg_id, created.topic) == (src.reg_id, "t")
    rig.core.proxy.started(src.reg_id, 4, 2, rig.now)
    rig.control(compose.SriRequest(4, 2).encode(), "10.0.0.9")
    ((reg_id, data),) = rig.core.take_proxy_sris()
    sri = compose.decode(lbmc.decode(data))
    assert reg_id == src.reg_id and isinstance(sri, compose.Sri)
    assert sri.topic_idx == 2 and sri.stores[0].src_reg_id == src.reg_id
    # the real source returns with its Session ID: the proxy goes
    assert src.register() is not None
    (gone,) = rig.events_of(ProxySourceDeleted)
    assert gone.reason is DeletionReason.PROXY_SRC_REREGISTERED
    assert rig.core.proxy.running() == []


def test_core_without_allow_proxy_source_never_elects(tmp_path: Path) -> None:
    rig, src = proxied_rig(tmp_path, allow=False)
    rig.advance(10.0)
    assert not rig.events_of(ProxySourceCreated)
    assert rig.core.proxy.state(src.reg_id) is None


def test_core_stands_down_on_a_peer_proxy_sri(tmp_path: Path) -> None:
    rig, src = proxied_rig(tmp_path)
    rig.advance(2.2)
    assert rig.core.proxy.state(src.reg_id) is ProxyState.WAITING
    peer = ("10.0.0.101", 14567)
    session = RawSession(
        "TCP", "TCP:10.0.0.101:14371:0", 0, 0, "t", peer[0],
        (lbmr_options.UMEOption(src_tcp_port=peer[1], src_tcp_addr=peer[0], transport_idx=0,
                                flags=0x2000),),
    )  # fmt: skip
    proxy_sri = lbmc.decode(
        compose.Sri(1, 0, 9, (compose.SriStore(STORE_ADDR, 0, src.reg_id),), topic_idx=0).encode()
    )
    proxy_sri.headers.append(lbmc.UmePsrcElectionToken(0, 1, 12345))
    rig.core.receive_frame(session, lbmc.encode(proxy_sri), rig.now)
    rig.advance(0.5)
    assert rig.core.proxy.state(src.reg_id) is ProxyState.FOLLOWING
    assert not rig.events_of(ProxySourceCreated)
    # the peer's proxy keeps announcing: nothing happens ...
    for _ in range(6):
        rig.core.receive_frame(session, lbmc.encode(proxy_sri), rig.now)
        rig.advance(0.5)
    assert not rig.events_of(ProxySourceCreated)
    # ... until it falls silent (its Store died): this Store elects itself (re-election)
    rig.advance(silence_bound(1.0) + 1.6)
    (created,) = rig.events_of(ProxySourceCreated)
    assert created.reg_id == src.reg_id
    assert any("silent" in e.text and "electing again" in e.text for e in rig.events)


def test_started_proxy_announces_at_once_then_every_half_interval() -> None:
    e = election()
    inactive_source(e)
    e.handle_timer(5.0)
    e.take_actions()
    assert e.next_timer() is None  # not open yet: nothing to announce on
    e.started(101, 0, 3, 6.0)
    assert e.next_timer() == 6.0
    e.handle_timer(6.0)
    assert [r for r, _ in e.take_sris()] == [101]
    e.handle_timer(6.9)
    assert e.take_sris() == []
    e.handle_timer(7.0)  # interval 2 s -> every 1 s
    assert len(e.take_sris()) == 1
    e.registered(101, "t", True, 7.5)
    e.take_actions()
    assert e.next_timer() is None


def test_proxy_events_become_ump_mon_events() -> None:
    from daemons.umestored.monitor import TopicIndex, event_pb
    from umcore.monitor.pb import ump_mon_pb2

    kinds = ump_mon_pb2.UMPMonMsg.Events
    made = kinds.Event()
    event_pb(ProxySourceCreated(20, "created", 101, "t", 7), 0, TopicIndex(), 1.5, made)
    assert made.event_type == kinds.PROXY_SOURCE_CREATED_EVENT
    assert (made.src_regid, made.topic_name) == (101, "t")
    gone = kinds.Event()
    deleted = ProxySourceDeleted(20, "deleted", 101, "t", DeletionReason.PROXY_SRC_REREGISTERED)
    event_pb(deleted, 0, TopicIndex(), 2.5, gone)
    assert gone.event_type == kinds.PROXY_SOURCE_DELETED_EVENT
    assert int(gone.deletion_reason_code) == int(DeletionReason.PROXY_SRC_REREGISTERED)
