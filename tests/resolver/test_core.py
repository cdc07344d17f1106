"""TopicResolver in memory: contexts on a simulated multicast bus or behind a simulated lbmrd,
with explicit time and deterministic loss."""

from __future__ import annotations

import random

import pytest

from umcore.resolver.core import ResolverConfig, SourceInfo, TopicResolver
from umcore.wire import lbmr

LBMRD = ("127.0.0.1", 15380)
GROUP = ("224.9.10.11", 12965)


class Net:
    """Delivers what resolvers send: multicast to every member, unicast via a relay that
    forwards TIR/TQR datagrams to every client and answers keepalives (like lbmrd)."""

    def __init__(self, loss: float = 0.0, seed: int = 0, lbmrd_alive: bool = True) -> None:
        self.members: dict[tuple[str, int], TopicResolver] = {}
        self.rng = random.Random(seed)
        self.loss = loss
        self.lbmrd_alive = lbmrd_alive
        self.clients: set[tuple[str, int]] = set()
        self.found: dict[tuple[str, int], list[SourceInfo]] = {}
        self.sent: list[tuple[float, tuple[str, int], bytes, tuple[str, int]]] = []

    def add(self, addr: tuple[str, int], r: TopicResolver) -> None:
        self.members[addr] = r
        self.found[addr] = []

    def lost(self) -> bool:
        return self.rng.random() < self.loss

    def step(self, now: float) -> None:
        for addr, r in list(self.members.items()):
            r.handle_timer(now)
            self.pump(addr, now)

    def pump(self, addr: tuple[str, int], now: float) -> None:
        queue = [(addr, d, dest) for d, dest in self.members[addr].take_datagrams()]
        while queue:
            src, data, dest = queue.pop(0)
            self.sent.append((now, src, data, dest))
            if self.lost():
                continue
            if dest == GROUP:
                targets = [(a, src) for a in self.members]
            elif dest == LBMRD:
                if not self.lbmrd_alive:
                    continue
                self.clients.add(src)
                if data[:4] in (lbmr.RCV_ALIVE, lbmr.SRC_ALIVE):
                    targets = [(src, LBMRD)]
                    data = lbmr.RESOLVER_KEEPALIVE
                else:
                    targets = [(c, LBMRD) for c in self.clients]
            else:
                continue
            for target, origin in targets:
                r = self.members[target]
                self.found[target] += r.receive_datagram(data, origin, now)
                queue += [(target, d, dst) for d, dst in r.take_datagrams()]

    def run(self, start: float, end: float, step: float = 0.005) -> None:
        now = start
        while now <= end:
            self.step(now)
            now += step


def tcp(port: int) -> lbmr.TCPInfo:
    return lbmr.TCPInfo("127.0.0.1", port, 0xABCD0000 + port)


@pytest.mark.parametrize("unicast", [False, True])
def test_receiver_after_source_finds_it(unicast: bool) -> None:
    daemons = [LBMRD] if unicast else []
    net = Net()
    a = TopicResolver(ResolverConfig(unicast_daemons=daemons), 0.0, rng=random.Random(1))
    b = TopicResolver(ResolverConfig(unicast_daemons=daemons), 0.0, rng=random.Random(2))
    net.add(("127.0.0.1", 14402), a)
    net.add(("127.0.0.1", 14403), b)
    a.add_source("topic.x", 7, tcp(14371), 0.0)
    net.run(0.0, 20.0)  # the source is in its sustaining phase by now
    found = b.add_receiver("topic.x", 20.0)
    net.run(20.0, 20.5)
    got = found + net.found[("127.0.0.1", 14403)]
    assert got, "receiver never learned the source"
    info = got[0]
    assert (info.topic, info.index, info.port, info.session_id) == (
        "topic.x",
        7,
        14371,
        0xABCD0000 + 14371,
    )
    # the query got an immediate TIR: receiver's TQR at t=20.0 answered at once
    assert any(
        t == pytest.approx(20.0) and lbmr.decode(d).tirs
        for t, s, d, _ in net.sent
        if s == ("127.0.0.1", 14402)
    )


def test_receiver_cache_serves_new_receiver_without_traffic() -> None:
    net = Net()
    a = TopicResolver(ResolverConfig(), 0.0)
    b = TopicResolver(ResolverConfig(), 0.0)
    net.add(("127.0.0.1", 1), a)
    net.add(("127.0.0.1", 2), b)
    b.add_receiver("other", 0.0)
    a.add_source("t", 0, tcp(14371), 0.0)
    net.run(0.0, 1.0)
    assert [i.topic for i in b.cached_sources("t")] == ["t"]  # cached though not subscribed
    assert [i.port for i in b.add_receiver("t", 1.0)] == [14371]


def test_resolution_survives_heavy_loss() -> None:
    net = Net(loss=0.6, seed=5)
    a = TopicResolver(ResolverConfig(), 0.0)
    b = TopicResolver(ResolverConfig(), 0.0)
    net.add(("127.0.0.1", 1), a)
    net.add(("127.0.0.1", 2), b)
    a.add_source("t", 0, tcp(14371), 0.0)
    b.add_receiver("t", 0.0)
    net.run(0.0, 6.0)
    assert net.found[("127.0.0.1", 2)], "60% loss defeated 5 s of initial-phase resolution"


def test_unicast_sends_nothing_before_first_object_and_keepalives_after() -> None:
    net = Net()
    a = TopicResolver(ResolverConfig(unicast_daemons=[LBMRD]), 0.0)
    net.add(("127.0.0.1", 1), a)
    net.run(0.0, 2.0)
    assert net.sent == []
    a.add_receiver("t", 2.0)
    net.run(2.0, 70.0, step=0.05)
    kinds = [(t, d[:4]) for t, _, d, _ in net.sent]
    assert any(d == lbmr.RCV_ALIVE for _, d in kinds)
    # keepalives only when no TQR went out within the keepalive interval
    tqr_times = [t for t, d in kinds if d[0] == 0]
    ka_times = [t for t, d in kinds if d == lbmr.RCV_ALIVE]
    for k in ka_times:
        assert not any(0 < k - q < 0.5 - 1e-6 for q in tqr_times), k
    assert min(ka_times) > 2.0 + 5.0  # TQRs every <=200 ms in the initial phase: no keepalive


def test_force_alive_registers_at_once_and_source_alive_type() -> None:
    net = Net()
    a = TopicResolver(ResolverConfig(unicast_daemons=[LBMRD], force_alive=True), 0.0)
    net.add(("127.0.0.1", 1), a)
    net.run(0.0, 0.1)
    assert [d for _, _, d, _ in net.sent][:1] == [lbmr.RCV_ALIVE]
    a.add_source("t", 0, tcp(1), 0.2)
    net.run(0.2, 80.0, step=0.05)
    assert net.sent[-1][2] == lbmr.SRC_ALIVE


def test_dead_lbmrd_is_rotated_away() -> None:
    second = ("127.0.0.1", 15381)
    net = Net()
    cfg = ResolverConfig(unicast_daemons=[LBMRD, second])
    a = TopicResolver(cfg, 0.0, rng=random.Random(3))
    net.add(("127.0.0.1", 1), a)
    a.add_receiver("t", 0.0)
    # only the first lbmrd answers (Net relays just LBMRD); the second stays silent
    net.run(0.0, 5.0, step=0.01)
    late = [dest for t, _, d, dest in net.sent if t > 2.0 and d[0] == 0 and d[1] > 0]
    assert late and all(dest == LBMRD for dest in late)


def test_garbage_and_unknown_sources_are_counted() -> None:
    a = TopicResolver(ResolverConfig(unicast_daemons=[LBMRD]), 0.0)
    assert a.receive_datagram(b"\x00\x05\x00", LBMRD, 0.0) == []
    assert a.stats.datagrams_dropped_malformed == 1
    assert a.receive_datagram(lbmr.RESOLVER_KEEPALIVE, ("10.0.0.1", 9), 0.0) == []
    assert a.stats.datagrams_dropped_unknown_source == 1


def test_many_topics_pack_into_bounded_datagrams() -> None:
    a = TopicResolver(ResolverConfig(datagram_max_size=1000), 0.0)
    for i in range(300):
        a.add_receiver(f"topic.{i:04d}", 0.0)
    a.handle_timer(0.0)
    out = a.take_datagrams()
    assert all(len(d) <= 1000 for d, _ in out)
    topics = [q.topic for d, _ in out for q in lbmr.decode(d).tqrs]
    assert sorted(topics) == sorted(f"topic.{i:04d}" for i in range(300))


def test_wildcard_query_answered_by_matching_sources_only() -> None:
    net = Net()
    a = TopicResolver(ResolverConfig(), 0.0)
    b = TopicResolver(ResolverConfig(), 0.0)
    net.add(("127.0.0.1", 1), a)
    net.add(("127.0.0.1", 2), b)
    a.add_source("prices.eur", 0, tcp(14371), 0.0)
    a.add_source("news.today", 1, tcp(14371), 0.0)
    net.run(0.0, 70.0, step=0.05)  # both sources quiescent now
    sent_before = len(net.sent)
    found = b.add_wildcard_receiver(r"^prices\.", 70.0)
    assert [i.topic for i in found] == ["prices.eur"]  # from the receiver-side cache
    net.run(70.0, 71.0)
    wc = [d for _, s, d, _ in net.sent[sent_before:] if s == ("127.0.0.1", 2)]
    assert wc and all(lbmr.decode(d).type == lbmr.LBMR_TYPE_WC_TQRS for d in wc)
    answers = [lbmr.decode(d) for _, s, d, _ in net.sent[sent_before:] if s == ("127.0.0.1", 1)]
    assert {t.topic for p in answers for t in p.tirs} == {"prices.eur"}
    assert {i.topic for i in net.found[("127.0.0.1", 2)]} == {"prices.eur"}


def test_wildcard_queries_have_no_sustaining_phase() -> None:
    a = TopicResolver(ResolverConfig(), 0.0)
    a.add_wildcard_receiver("x", 0.0)
    times = []
    now = 0.0
    while (d := a.next_timer()) is not None and d < 200:
        now = d
        a.handle_timer(now)
        if a.take_datagrams():
            times.append(now)
    assert times[:5] == pytest.approx([0, 0.05, 0.15, 0.35, 0.75])
    assert times[-1] < 60 and a.next_timer() is None
