"""Proxy election algorithm 2 (quorum), re-election, restored sources (umcore.store.proxy).

Unit tests drive :class:`ProxyElection` with a fake clock (``now`` is ours); the property test
runs three Stores against a simulated network (PSERs and proxy SRIs delivered after random
latencies, random election waits, proxies opening after a random delay) and checks that
exactly one proxy survives, also after the Store running it dies.
"""

from __future__ import annotations

import heapq
import random
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from tests.store.corekit import STORE_ADDR, Rig, Source, instance, make_rig, topic_config
from umcore.aio.storeio import load_store
from umcore.store import compose
from umcore.store.core import StoreCore
from umcore.store.events import ProxySourceCreated
from umcore.store.proxy import (
    PARTICIPATION_WAITS,
    WAIT_HIGH,
    ProxyElection,
    ProxyNote,
    ProxyStart,
    ProxyState,
    ProxyStop,
    SourceIdent,
    decode_pser,
    encode_pser,
    silence_bound,
    token_of,
)
from umcore.store.repository import RepositoryConfig
from umcore.wire import lbmc

ADDRS = [("127.0.0.1", 15001), ("127.0.0.1", 15002), ("127.0.0.1", 15003)]
REGS = [101, 202, 303]  # each Store gave the source its own RegID
IDENT = SourceIdent(("10.0.0.1", 14391), 1, 0, b"SRCCTX01")
SRI = compose.Sri(
    version=3,
    low_sqn=0,
    high_sqn=9,
    stores=tuple(
        compose.SriStore(a, i, r) for i, (a, r) in enumerate(zip(ADDRS, REGS, strict=True))
    ),
    topic_idx=7,
)
INTERVAL = 2.0


def election(
    i: int, *, quorum: bool = True, fraction: float | None = 1.0, seed: int = 1
) -> ProxyElection:
    rng = random.Random(seed)
    return ProxyElection(
        enabled=True, store_index=i, address=ADDRS[i], rng=rng,
        uniform=None if fraction is None else (lambda lo, hi: fraction),
        quorum_required=quorum, ctxinst=b"STORE%03d" % i,
    )  # fmt: skip


def tracking(i: int, **kw: Any) -> ProxyElection:
    e = election(i, **kw)
    e.registered(REGS[i], "t", True, 0.0, IDENT)
    e.receive_sri(REGS[i], SRI)
    return e


def pser_from(i: int, ident: SourceIdent = IDENT) -> lbmc.LBMCMessage:
    return lbmc.decode(encode_pser(ident, ADDRS[i], b"STORE%03d" % i))


def starts(e: ProxyElection) -> list[ProxyStart]:
    return [a for a in e.take_actions() if isinstance(a, ProxyStart)]


# --- algorithm 2 ------------------------------------------------------------------------------


def test_pser_round_trip_names_source_and_store() -> None:
    got = decode_pser(pser_from(1))
    assert got == (IDENT, ADDRS[1])
    assert decode_pser(lbmc.decode(SRI.encode())) is None


def test_quorum_met_wait_start_sends_psers_then_proxy_created() -> None:
    a = tracking(0)
    a.inactive(REGS[0], INTERVAL, 10.0)
    sent = a.take_sends()
    assert sorted(dest for dest, _ in sent) == ADDRS[1:]  # every other Store the SRI names
    assert decode_pser(lbmc.decode(sent[0][1])) == (IDENT, ADDRS[0])
    assert a.receive_pser(pser_from(1), 10.3)
    assert a.participants(REGS[0], 11.0) == (2, 2)
    a.handle_timer(12.0)  # wait = 1.0 x interval
    (start,) = starts(a)
    assert start.reg_id == REGS[0] and a.state(REGS[0]) is ProxyState.RUNNING


def test_quorum_not_met_no_proxy_note_and_retry_until_a_participant_comes() -> None:
    a = tracking(0)
    a.inactive(REGS[0], INTERVAL, 10.0)
    a.take_sends()
    a.handle_timer(12.0)
    acts = a.take_actions()
    assert not [x for x in acts if isinstance(x, ProxyStart)]
    (note,) = [x for x in acts if isinstance(x, ProxyNote)]
    assert "1 of 3 Stores take part, 2 needed" in note.text
    assert a.state(REGS[0]) is ProxyState.WAITING and a.no_quorum == 1
    assert len(a.take_sends()) == 2  # the next wait asks again
    a.handle_timer(14.0)
    assert a.take_actions() == []  # the same count is noted once
    a.receive_pser(pser_from(2), 14.5)  # a Store came back
    a.handle_timer(16.0)
    assert len(starts(a)) == 1


def test_store_without_state_does_not_take_part() -> None:
    a = tracking(0)
    c = election(2)  # names in the SRI but holds no state of the source
    c.inactive(REGS[2], INTERVAL, 10.0)  # unknown RegID: nothing happens
    assert c.take_sends() == [] and c.next_timer() is None
    assert c.receive_pser(pser_from(0), 10.0)
    assert c.psers_unmatched == 1 and c.state(REGS[2]) is None
    a.inactive(REGS[0], INTERVAL, 10.0)
    a.handle_timer(12.0)
    assert starts(a) == []  # only itself: 1 of 3


def test_pser_of_another_source_or_own_echo_not_counted() -> None:
    a = tracking(0)
    other = SourceIdent(("10.0.0.1", 14391), 1, 5)
    a.receive_pser(pser_from(1, other), 1.0)
    a.receive_pser(pser_from(0), 1.0)  # its own address
    assert a.psers_unmatched == 2
    a.inactive(REGS[0], INTERVAL, 1.0)
    assert a.participants(REGS[0], 1.0) == (1, 2)


def test_stale_participation_expires() -> None:
    a = tracking(0)
    a.receive_pser(pser_from(1), 0.0)
    a.inactive(REGS[0], INTERVAL, 0.0)
    ttl = PARTICIPATION_WAITS * WAIT_HIGH * INTERVAL
    assert a.participants(REGS[0], ttl)[0] == 2
    assert a.participants(REGS[0], ttl + 0.01)[0] == 1


def test_reregistration_clears_participants_and_algorithm_1_sends_none() -> None:
    a = tracking(0)
    a.receive_pser(pser_from(1), 0.0)
    a.registered(REGS[0], "t", True, 0.5, IDENT)
    a.inactive(REGS[0], INTERVAL, 1.0)
    assert a.participants(REGS[0], 1.0)[0] == 1
    one = tracking(0, quorum=False)
    one.inactive(REGS[0], INTERVAL, 0.0)
    assert one.take_sends() == []
    one.handle_timer(2.0)
    assert len(starts(one)) == 1  # algorithm 1: no quorum needed


# --- re-election ------------------------------------------------------------------------------


def test_follower_reelects_when_followed_proxy_goes_silent() -> None:
    b = tracking(1)
    b.inactive(REGS[1], INTERVAL, 10.0)
    b.take_sends()
    b.peer_proxy("t", 99, ADDRS[0], 10.5, SRI)  # Store 0 runs the proxy
    assert b.state(REGS[1]) is ProxyState.FOLLOWING
    assert [type(x) for x in b.take_actions()] == [ProxyNote]  # "following it"
    bound = silence_bound(INTERVAL)
    assert bound == 2 * 0.5 * INTERVAL + 0.5 * INTERVAL
    for k in range(1, 5):  # announcements every half interval
        b.peer_proxy("t", 99, ADDRS[0], 10.5 + k, SRI)
        b.handle_timer(10.5 + k)
    assert b.take_actions() == []
    last = 14.5
    b.handle_timer(last + bound - 0.01)
    assert b.state(REGS[1]) is ProxyState.FOLLOWING
    b.receive_pser(pser_from(0), last)  # the dead Store's participation must not count
    b.handle_timer(last + bound)
    (note,) = b.take_actions()
    assert isinstance(note, ProxyNote) and "electing again" in note.text
    assert b.state(REGS[1]) is ProxyState.WAITING and b.reelections == 1
    assert sorted(d for d, _ in b.take_sends()) == [ADDRS[0], ADDRS[2]]
    assert b.participants(REGS[1], last + bound)[0] == 1
    b.receive_pser(pser_from(2), last + bound + 0.2)  # the third Store re-elects too
    b.handle_timer(last + bound + INTERVAL)
    assert len(starts(b)) == 1


def test_inactive_while_a_peer_proxy_runs_follows_at_once() -> None:
    c = tracking(2)
    c.peer_proxy("t", 7, ADDRS[0], 5.0, SRI)  # seen before this Store's own timeout
    assert c.state(REGS[2]) is ProxyState.IDLE
    c.inactive(REGS[2], INTERVAL, 5.5)
    assert c.state(REGS[2]) is ProxyState.FOLLOWING and c.take_sends() == []


def test_source_return_stops_running_and_following() -> None:
    a, b = tracking(0, quorum=False), tracking(1, quorum=False)
    a.inactive(REGS[0], INTERVAL, 0.0)
    a.handle_timer(2.0)
    starts(a)
    b.inactive(REGS[1], INTERVAL, 0.0)
    b.peer_proxy("t", 1, ADDRS[0], 1.0, SRI)
    a.registered(REGS[0], "t", True, 3.0, IDENT)
    b.registered(REGS[1], "t", True, 3.0, IDENT)
    assert [type(x) for x in a.take_actions()] == [ProxyStop]
    assert a.state(REGS[0]) is b.state(REGS[1]) is ProxyState.IDLE
    assert b.next_timer() is None


# --- three Stores on a simulated network (property) ------------------------------------------


@dataclass(order=True)
class _Ev:
    at: float
    seq: int
    kind: str = field(compare=False)
    store: int = field(compare=False)
    data: Any = field(compare=False, default=None)


class Net:
    """Three Stores' elections; deliveries and opens after random delays."""

    def __init__(self, seed: int, quorum: bool) -> None:
        self.rnd = random.Random(seed)
        self.stores = [
            tracking(i, quorum=quorum, fraction=None, seed=seed * 10 + i) for i in range(3)
        ]
        self.alive = [True, True, True]
        self.q: list[_Ev] = []
        self.seq = 0
        self.now = 0.0
        self.open: dict[int, int] = {}  # store -> proxy topic index, while its proxy is open
        for i in range(3):  # activity timeouts seen within one source-check-interval
            self.at(self.rnd.uniform(0.0, 0.25), "inactive", i)

    def at(self, when: float, kind: str, store: int, data: Any = None) -> None:
        self.seq += 1
        heapq.heappush(self.q, _Ev(when, self.seq, kind, store, data))

    def latency(self) -> float:
        return self.rnd.uniform(0.001, 0.08)

    def outputs(self, i: int) -> None:
        e = self.stores[i]
        for act in e.take_actions():
            if isinstance(act, ProxyStart):
                self.at(self.now + self.rnd.uniform(0.01, 0.4), "opened", i)
            elif isinstance(act, ProxyStop):
                self.open.pop(i, None)
        for _reg, data in e.take_sris():
            for j in range(3):
                if j != i:
                    self.at(self.now + self.latency(), "sri", j, (i, data))
        for dest, data in e.take_sends():
            self.at(self.now + self.latency(), "pser", ADDRS.index(dest), data)

    def run(self, until: float) -> None:
        while True:
            timers = [
                (t, i) for i, e in enumerate(self.stores)
                if self.alive[i] and (t := e.next_timer()) is not None
            ]  # fmt: skip
            nxt = min(timers, default=None)
            if self.q and (nxt is None or self.q[0].at <= nxt[0]):
                ev = heapq.heappop(self.q)
                if ev.at > until:
                    heapq.heappush(self.q, ev)
                    break
                self.now = max(self.now, ev.at)
                self.deliver(ev)
                if self.alive[ev.store]:
                    self.outputs(ev.store)
            elif nxt is not None and nxt[0] <= until:
                self.now = max(self.now, nxt[0])
                self.stores[nxt[1]].handle_timer(self.now)
                self.outputs(nxt[1])
            else:
                break
        self.now = until

    def deliver(self, ev: _Ev) -> None:
        i = ev.store
        if not self.alive[i]:
            return
        e = self.stores[i]
        if ev.kind == "inactive":
            e.inactive(REGS[i], INTERVAL, self.now)
        elif ev.kind == "opened":
            if e.state(REGS[i]) is ProxyState.RUNNING:
                self.open[i] = 40 + i
                e.started(REGS[i], 1, 40 + i, self.now)
        elif ev.kind == "sri":
            sender, data = ev.data
            msg = lbmc.decode(data)
            token = token_of(msg)
            assert token is not None
            sri = compose.decode(msg)
            assert isinstance(sri, compose.Sri)
            e.peer_proxy("t", token, ADDRS[sender], self.now, sri)
        elif ev.kind == "pser":
            e.receive_pser(lbmc.decode(ev.data), self.now)

    def running(self) -> list[int]:
        return [i for i, e in enumerate(self.stores) if self.alive[i] and e.running()]

    def kill(self, i: int) -> None:
        self.alive[i] = False
        self.open.pop(i, None)


@settings(max_examples=60, deadline=None, derandomize=True)
@given(seed=st.integers(0, 2**32 - 1), quorum=st.booleans())
def test_three_stores_exactly_one_proxy_survives_also_after_its_store_dies(
    seed: int, quorum: bool
) -> None:
    net = Net(seed, quorum)
    net.run(10 * INTERVAL)
    (owner,) = net.running()
    net.kill(owner)
    net.run(net.now + 12 * INTERVAL)
    (second,) = net.running()  # two of three remain: a quorum for algorithm 2 too
    assert second != owner
    net.kill(second)
    net.run(net.now + 12 * INTERVAL)
    if quorum:
        assert net.running() == []  # one of three: no quorum
    else:
        assert len(net.running()) == 1


# --- through StoreCore ------------------------------------------------------------------------


PEER = ("10.0.0.102", 14567)


def quorum_rig(tmp: Path, kind: str = "memory") -> tuple[Rig, Source, list[Any]]:
    topics = [
        topic_config(
            "t", repository_type=kind, source_activity_timeout=2000, source_state_lifetime=600000,
            proxy_election_interval=1000, source_check_interval=100,
        )
    ]  # fmt: skip
    rig = make_rig(tmp, topics, allow_proxy_source=1, proxy_source_repo_quorum_required=1)
    src = Source(rig, "t", session_id=0x5E55, proxy=True, activity_timeout_ms=2000)
    assert src.register() is not None
    sri = compose.Sri(
        1, 0, 9,
        (compose.SriStore(STORE_ADDR, 0, src.reg_id), compose.SriStore(PEER, 1, 77),
         compose.SriStore(("10.0.0.103", 14567), 2, 88)),
        topic_idx=0,
    )  # fmt: skip
    rig.core.receive_frame(src.session, sri.encode(), rig.now)
    rig.pump()
    return rig, src, topics


def core_ident(src: Source) -> SourceIdent:
    return SourceIdent(src.reply_to, src.transport_idx, src.topic_idx, src.ctxinst)


def test_core_quorum_psers_over_the_request_port(tmp_path: Path) -> None:
    rig, src, _ = quorum_rig(tmp_path)
    rig.advance(2.2)  # inactive: the wait starts, PSERs go to the two other Stores
    for peer in (PEER, ("10.0.0.103", 14567)):
        (msg,) = rig.take(peer)
        assert decode_pser(msg) == (core_ident(src), STORE_ADDR)
    rig.advance(1.6)
    assert not rig.events_of(ProxySourceCreated)
    assert any("no quorum" in e.text for e in rig.events)
    rig.control(encode_pser(core_ident(src), PEER, bytes(8)), PEER[0])
    assert rig.core.counters.unexpected_control == 0
    rig.advance(1.6)
    (created,) = rig.events_of(ProxySourceCreated)
    assert created.reg_id == src.reg_id


def restart(tmp: Path, rig: Rig, topics: list[Any], now: float) -> Rig:
    rig.core.shutdown(rig.now)
    rig.pump()
    inst = instance(tmp, topics, allow_proxy_source=1, proxy_source_repo_quorum_required=1)

    def configs(topic: str) -> RepositoryConfig | None:
        cfg = inst.match(topic)
        return None if cfg is None else RepositoryConfig.from_topic(cfg)

    loaded = load_store(str(tmp / "cache"), str(tmp / "state"), configs, now=now, wall_offset=0.0)
    core = StoreCore(
        inst, store_index=0, address=rig.core.address, now=now, restored=loaded.sources, seed=3
    )
    second = Rig(core, now=now)
    second.pump()
    return second


def test_restored_source_takes_part_with_its_kept_sri(tmp_path: Path) -> None:
    rig, src, topics = quorum_rig(tmp_path, "disk")
    rig.advance(0.5)  # the state file (with the SRI) is written within STATE_FLUSH_S
    rig.advance(5.0)
    second = restart(tmp_path, rig, topics, rig.now + 1.0)
    assert second.core.proxy.state(src.reg_id) is ProxyState.IDLE
    second.advance(2.2)  # the restored source's activity timeout passes: the wait starts
    assert second.core.proxy.state(src.reg_id) is ProxyState.WAITING
    assert second.take(PEER)  # its PSER: the kept SRI names the other Stores
    second.control(encode_pser(core_ident(src), PEER, bytes(8)), PEER[0])
    second.advance(1.6)
    (created,) = second.events_of(ProxySourceCreated)
    assert created.reg_id == src.reg_id
    second.core.proxy.started(src.reg_id, 4, 2, second.now)
    sri = compose.decode(lbmc.decode(second.core.proxy.sri(src.reg_id)))
    assert isinstance(sri, compose.Sri) and [s.src_reg_id for s in sri.stores] == [
        src.reg_id,
        77,
        88,
    ]


def test_core_asks_a_proxied_source_for_its_sri_when_its_session_begins(tmp_path: Path) -> None:
    topics = [topic_config("t", source_activity_timeout=2000, source_state_lifetime=600000)]
    rig = make_rig(tmp_path, topics, allow_proxy_source=1)
    src = Source(rig, "t", session_id=0x5E56, proxy=True, activity_timeout_ms=2000)
    assert src.register() is not None
    rig.core.receive_session(src.session, True, rig.now)  # joined after its SRIs went out
    rig.pump()
    (req,) = rig.take(src.reply_to, compose.SriRequest)
    assert (req.transport_idx, req.topic_idx) == (src.transport_idx, src.topic_idx)
    sri = compose.Sri(1, 0, 9, (compose.SriStore(STORE_ADDR, 0, src.reg_id),), topic_idx=0)
    rig.core.receive_frame(src.session, sri.encode(), rig.now)
    rig.pump()
    assert any("SRI naming 1 Store(s) kept" in e.text for e in rig.events)
    rig.core.receive_session(src.session, True, rig.now)  # it has one now: no request
    rig.pump()
    assert rig.take(src.reply_to, compose.SriRequest) == []


def test_follower_follows_the_proxy_that_survives_collisions() -> None:
    c = tracking(2)
    c.inactive(REGS[2], INTERVAL, 0.0)
    c.take_sends()
    c.peer_proxy("t", 5, ADDRS[0], 0.5, SRI)  # a first proxy: followed
    c.peer_proxy("t", 9, ADDRS[1], 0.6, SRI)  # a second, higher token: it will survive
    c.peer_proxy("t", 5, ADDRS[0], 0.7, SRI)  # the first before it withdraws: no change
    notes = [a.text for a in c.take_actions() if isinstance(a, ProxyNote)]
    assert [n.split("runs at Store ")[1] for n in notes] == [
        "127.0.0.1:15001: following it",
        "127.0.0.1:15002: following it",
    ]
    c.peer_proxy("t", 9, ADDRS[1], 1.2, SRI)
    assert c.next_timer() == 1.2 + silence_bound(INTERVAL)


def test_proxy_start_claims_it_to_the_other_stores_and_a_waiting_one_stands_down() -> None:
    a, b = tracking(0, quorum=False), tracking(1, quorum=False)
    a.inactive(REGS[0], INTERVAL, 0.0)
    b.inactive(REGS[1], INTERVAL, 0.1)
    a.handle_timer(2.0)
    (start,) = starts(a)
    claims = a.take_sends()
    assert sorted(d for d, _ in claims) == ADDRS[1:] and a.claims_sent == 2
    msg = lbmc.decode(claims[0][1])
    assert decode_pser(msg) == (IDENT, ADDRS[0]) and token_of(msg) == start.token
    assert b.receive_pser(msg, 2.01)  # before b's own wait ends (2.1)
    assert b.state(REGS[1]) is ProxyState.FOLLOWING and b.claims_received == 1
    b.handle_timer(2.1)
    assert starts(b) == []
    assert b.participants(REGS[1], 2.1)[0] == 1  # a claim is no participation


def test_claim_seen_while_the_source_is_alive_here_is_followed_once_it_times_out() -> None:
    c = tracking(2)
    msg = lbmc.decode(encode_pser(IDENT, ADDRS[0], bytes(8), 77, 0))
    c.receive_pser(msg, 1.0)
    assert c.state(REGS[2]) is ProxyState.IDLE
    c.inactive(REGS[2], INTERVAL, 1.5)
    assert c.state(REGS[2]) is ProxyState.FOLLOWING and c.take_sends() == []
