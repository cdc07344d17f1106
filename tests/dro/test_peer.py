"""The peer link core (:mod:`umcore.dro.peer`) alone, with a fake clock and no sockets.

Two :class:`PeerLink` objects are joined by :func:`pump`, which carries each one's bytes to the
other (optionally cut into random pieces, or dropping one direction to play a stalled peer).
The last tests join two :class:`DroCore` objects through their links with
:mod:`umcore.dro.peerglue`, as the daemon's runtime will.
"""

from __future__ import annotations

import random

import pytest

from tests.dro.kit import otid
from umcore.config.dro import DROConfig, Peer, load_text
from umcore.dro import (
    Adjacency,
    CreateProxyReceiver,
    CreateProxySource,
    DroCore,
    InterestKey,
    RecalcDone,
    RouteInfo,
    SourceAdvert,
    SourceKey,
)
from umcore.dro.inferred import PEER_HANDSHAKE_TIMEOUT, PEER_PROTOCOL_VERSION
from umcore.dro.peer import (
    DownCause,
    InterestReceived,
    LinkDown,
    LinkState,
    LinkUp,
    PeerLink,
    RouteInfoReceived,
    SourceGoneReceived,
    SourceReceived,
)
from umcore.dro.peerglue import deliver, drain_queue, link_command, link_lbmr
from umcore.errors import LocalProtocolError
from umcore.wire import lbmc

KA = '<gateway-keepalive interval="1000" timeout="3000"/>'
S1 = SourceKey(otid(1), "AAA")
S2 = SourceKey(otid(2), "BBB")
S3 = SourceKey(otid(3), "CCC")


def peer_cfg(extra: str = "", *, tail: str = KA, name: str = "p") -> Peer:
    """A ``<peer>``: ``extra`` goes after single-tcp (max-queue .. batching), ``tail`` at the
    end (gateway-keepalive)."""
    xml = (
        f'<tnw-gateway version="1.0"><daemon><name>d</name></daemon><portals><peer>'
        f"<name>{name}</name><single-tcp><acceptor><listen-port>0</listen-port></acceptor>"
        f"</single-tcp>{extra}{tail}</peer></portals></tnw-gateway>"
    )
    portal = load_text(xml, "<test.xml>").portal(name)
    assert isinstance(portal, Peer)
    return portal


def pair(extra_a: str = "", extra_b: str = "", **kw: str) -> tuple[PeerLink, PeerLink]:
    return PeerLink(peer_cfg(extra_a, **kw), 1, "dro-a"), PeerLink(
        peer_cfg(extra_b, **kw), 2, "dro-b"
    )


def pump(
    a: PeerLink,
    b: PeerLink,
    now: float,
    *,
    cut: random.Random | None = None,
    a_to_b: bool = True,
    b_to_a: bool = True,
) -> None:
    """Carry bytes both ways until neither side has more (``cut``: in random pieces)."""
    while True:
        moved = False
        for src, dst, on in ((a, b, a_to_b), (b, a, b_to_a)):
            chunks = src.take_bytes()
            if not chunks:
                continue
            moved = True
            if not on:
                continue
            data = b"".join(chunks)
            if cut is None:
                dst.receive_data(data, now)
            else:
                pos = 0
                while pos < len(data):
                    n = cut.randint(1, 700)
                    dst.receive_data(data[pos : pos + n], now)
                    pos += n
        if not moved:
            return


def connect(a: PeerLink, b: PeerLink, now: float = 0.0) -> None:
    a.receive_connected(now)
    b.receive_connected(now)
    pump(a, b, now)
    assert a.up and b.up
    a.take_events()
    b.take_events()


def run_timers(links: list[PeerLink], until: float, **kw: object) -> float:
    """Advance the clock through every link's timers up to ``until``; returns the last time."""
    now = 0.0
    while True:
        due = [t for t in (link.next_timer() for link in links) if t is not None]
        if not due or min(due) > until:
            return now
        now = min(due)
        for link in links:
            t = link.next_timer()
            if t is not None and t <= now:
                link.handle_timer(now)
        if len(links) == 2:
            pump(links[0], links[1], now, **kw)  # type: ignore[arg-type]


# --- handshake ------------------------------------------------------------------------------------


def test_handshake_names_each_side() -> None:
    a, b = pair()
    a.receive_connected(0.0)
    b.receive_connected(0.0)
    assert a.state is LinkState.HANDSHAKE
    pump(a, b, 0.0)
    assert a.take_events() == [LinkUp(2, "dro-b", PEER_PROTOCOL_VERSION)]
    assert b.take_events() == [LinkUp(1, "dro-a", PEER_PROTOCOL_VERSION)]
    assert a.up and b.peer_node_id == 1
    assert a.stats.connects == 1


def hello(version: int, node_id: int) -> bytes:
    return lbmc.encode(
        lbmc.LBMCMessage(
            lbmc.MSG_CONTROL,
            headers=[
                lbmc.TnwgCapabilities(version, 0, 0, 0, 0),
                lbmc.RouteInfo(node_id=node_id),
                lbmc.GatewayName(b"x\0"),
            ],
        )
    )


def test_unknown_version_is_refused_with_a_clear_reason() -> None:
    _, b = pair()
    b.receive_connected(0.0)
    b.receive_data(hello(7, 99), 0.1)
    (ev,) = b.take_events()
    assert isinstance(ev, LinkDown) and ev.cause is DownCause.REFUSED
    assert "version 7" in ev.reason and f"speaks {PEER_PROTOCOL_VERSION}" in ev.reason
    assert b.state is LinkState.DOWN
    b.receive_data(b"more", 0.2)  # ignored once down
    assert b.take_events() == []


def test_own_node_id_is_refused() -> None:
    _, b = pair()
    b.receive_connected(0.0)
    b.receive_data(hello(PEER_PROTOCOL_VERSION, 2), 0.1)
    (ev,) = b.take_events()
    assert isinstance(ev, LinkDown) and ev.cause is DownCause.REFUSED and "own node id" in ev.reason


@pytest.mark.parametrize(
    "garbage",
    [
        b"GET / HTTP/1.1\r\nHost: x\r\n\r\n",
        b"\x00\x00\x00\x02",  # msglen below any message
        lbmc.encode(lbmc.LBMCMessage(lbmc.MSG_CONTROL, headers=[lbmc.TopicIdx(0, 1)])),
    ],
)
def test_garbage_or_no_hello_costs_the_link(garbage: bytes) -> None:
    _, b = pair()
    b.receive_connected(0.0)
    b.receive_data(garbage, 0.1)
    (ev,) = b.take_events()
    assert isinstance(ev, LinkDown) and ev.cause is DownCause.PROTOCOL
    # a new connection starts clean
    a2 = PeerLink(peer_cfg(), 3, "c")
    connect(a2, b, 1.0)
    assert b.peer_node_id == 3 and b.stats.connects == 2 and b.stats.losses == 1


def test_garbage_after_the_hello_costs_the_link() -> None:
    a, b = pair()
    connect(a, b)
    b.receive_data(b"\x7f" * 40, 0.5)
    (ev,) = b.take_events()
    assert isinstance(ev, LinkDown) and ev.cause is DownCause.PROTOCOL


def test_no_hello_times_out() -> None:
    _, b = pair()
    b.receive_connected(10.0)
    assert b.next_timer() == 10.0 + PEER_HANDSHAKE_TIMEOUT
    b.handle_timer(10.0 + PEER_HANDSHAKE_TIMEOUT - 0.01)
    assert b.take_events() == []
    b.handle_timer(10.0 + PEER_HANDSHAKE_TIMEOUT)
    (ev,) = b.take_events()
    assert isinstance(ev, LinkDown) and ev.cause is DownCause.TIMEOUT


def test_connection_lost_and_sending_while_down() -> None:
    a, b = pair()
    connect(a, b)
    a.receive_connection_lost(1.0, "reset by peer")
    assert a.take_events() == [LinkDown(DownCause.CLOSED, "reset by peer")]
    assert not a.send_data(S1, 1, b"x" * 10, 1.0)
    assert not a.send_interest(InterestKey("t"), 1, 1.0)
    assert a.stats.data_fragments_dropped_not_operational == 1
    assert a.stats.data_fragment_bytes_dropped_not_operational == 10
    assert a.stats.gateway_cntl_msgs_dropped_not_operational == 1
    assert a.take_bytes() == [] and a.next_timer() is None
    with pytest.raises(LocalProtocolError):
        b.receive_connected(1.0)  # still connected: the adapter must report the loss first


# --- keepalive ------------------------------------------------------------------------------------


def test_keepalive_round_trip_statistics() -> None:
    a, b = pair()
    connect(a, b)
    assert a.next_timer() == 1.0  # idle: one interval after the last thing heard
    a.handle_timer(1.0)
    b.handle_timer(1.0)
    pump(a, b, 1.0)  # the queries (b's answer to a's arrives at 1.0 too) ...
    assert a.stats.rtt_samples == 1 and a.stats.rtt_min == 0
    a.handle_timer(2.0)
    a_query = a.take_bytes()
    b.receive_data(b"".join(a_query), 2.0)
    a.receive_data(b"".join(b.take_bytes()), 2.025)  # ... then one 25 ms round trip
    st = a.stats
    assert (st.rtt_samples, st.rtt_min, st.rtt_max, st.rtt_mean) == (2, 0, 25000, 12500)
    assert st.last_ka_time == 2.025


def test_keepalive_loss_declares_the_link_lost() -> None:
    a, b = pair()
    connect(a, b)
    # b stalls: it reads nothing (and a hears nothing), as under SIGSTOP
    end = run_timers([a, b], 10.0, b_to_a=False, a_to_b=False)
    (ev,) = a.take_events()
    assert isinstance(ev, LinkDown) and ev.cause is DownCause.TIMEOUT and "3000 ms" in ev.reason
    assert a.state is LinkState.DOWN and end == 3.0
    assert a.stats.rtt_samples == 0


def test_one_way_traffic_keeps_both_sides_up() -> None:
    a, b = pair()
    connect(a, b)
    now = 0.0
    sqn = 0
    while now < 20.0:  # a sends data every 100 ms; b sends nothing but keepalive answers
        now = round(now + 0.1, 3)
        for link in (a, b):
            t = link.next_timer()
            if t is not None and t <= now:
                link.handle_timer(now)
        sqn += 1
        assert a.send_data(S1, sqn, b"tick", now)
        pump(a, b, now)
    assert a.up and b.up
    assert a.stats.rtt_samples >= 18  # a hears only answers: it asks every second
    assert b.stats.rtt_samples == 0  # b hears data all the time: idle keepalive never needed
    assert [s for _, s, _ in b.take_frames()] == list(range(1, sqn + 1))


def test_keepalive_not_idle_always_asks() -> None:
    a, b = pair(tail='<gateway-keepalive idle="no" interval="1000" timeout="3000"/>')
    connect(a, b)
    now = 0.0
    while now < 10.0:
        now = round(now + 0.1, 3)
        for link in (a, b):
            t = link.next_timer()
            if t is not None and t <= now:
                link.handle_timer(now)
        a.send_data(S1, 1, b"x", now)
        pump(a, b, now)
    assert b.stats.rtt_samples == 10  # idle="no": every interval, traffic or not


def test_keepalive_interval_zero_turns_it_off() -> None:
    a, b = pair(tail='<gateway-keepalive interval="0"/>')
    connect(a, b)
    assert a.next_timer() is None
    a.handle_timer(1000.0)
    assert a.up and a.take_bytes() == []


# --- data, batching, queue -------------------------------------------------------------------


def test_frames_arrive_in_order_whatever_the_split() -> None:
    a, b = pair()
    connect(a, b)
    rnd = random.Random(7)
    sent = []
    keys = [S1, S2, S3]
    for i in range(3000):
        key = keys[rnd.randrange(3)]
        data = bytes([i % 251]) * rnd.randint(0, 300)
        assert a.send_data(key, 1_000_000 + i, data, 0.1)
        sent.append((key, 1_000_000 + i, data))
        if i % 97 == 0:
            pump(a, b, 0.1, cut=rnd)
    pump(a, b, 0.1, cut=rnd)
    got = [(k, s, bytes(d)) for k, s, d in b.take_frames()]
    assert got == sent
    assert b.stats.data_msgs_rcvd == 3000 == a.stats.data_fragments_sent
    assert b.stats.data_msg_bytes_rcvd == sum(len(d) for _, _, d in sent)


def test_no_batching_sends_at_once() -> None:
    a, b = pair()
    connect(a, b)
    a.send_data(S1, 1, b"x" * 64, 0.0)
    a.send_data(S1, 2, b"x" * 64, 0.0)
    chunks = a.take_bytes()
    assert len(chunks) == 2  # the binding (control), then one write of both frames
    assert a.next_timer() == 1.0  # no batch timer pending


BATCH = "<batching><min-length>1000</min-length><batch-interval>50</batch-interval></batching>"


def test_batch_closes_at_min_length() -> None:
    a, b = pair(BATCH)
    connect(a, b)
    a.send_data(S1, 0, b"x" * 64, 0.0)
    assert len(a.take_bytes()) == 1  # the binding: control goes out at once
    for sqn in range(1, 13):  # 13 frames of 76 bytes: 988, below min-length
        a.send_data(S1, sqn, b"x" * 64, 0.0)
    assert a.take_bytes() == []
    a.send_data(S1, 13, b"x" * 64, 0.0)  # 1064 >= 1000
    (batch,) = a.take_bytes()
    assert len(batch) == 14 * 76
    assert (a.stats.batches, a.stats.batch_msgs_max, a.stats.batch_bytes_max) == (1, 14, 1064)
    b.receive_data(batch, 0.0)  # b never saw the binding: frames of an unknown index
    assert b.take_frames() == [] and b.stats.data_msgs_rcvd_unknown_source == 14


def test_batch_closes_after_batch_interval() -> None:
    a, b = pair(BATCH, tail='<gateway-keepalive interval="0"/>')
    connect(a, b)
    a.send_data(S1, 0, b"x", 0.0)
    assert len(a.take_bytes()) == 1  # the binding; the frame waits in its batch
    assert a.next_timer() == pytest.approx(0.05)
    a.handle_timer(0.05)
    assert len(a.take_bytes()) == 1
    a.send_data(S1, 1, b"y" * 10, 5.0)
    assert a.next_timer() == pytest.approx(5.05)
    a.handle_timer(5.04)
    assert a.take_bytes() == []
    a.handle_timer(5.05)
    (batch,) = a.take_bytes()
    assert len(batch) == 22


def test_smart_batch_flushes_when_the_adapter_takes() -> None:
    a, b = pair("<smart-batch>1</smart-batch>" + BATCH)
    connect(a, b)
    for sqn in range(5):
        a.send_data(S1, sqn, b"x" * 64, 0.0)
    chunks = a.take_bytes()
    assert [len(c) for c in chunks] == [len(chunks[0]), 5 * 76]  # binding, then a 5-frame batch


def test_max_datagram_bounds_a_batch_and_control_flushes_data() -> None:
    a, b = pair("<max-datagram>200</max-datagram>" + BATCH)
    connect(a, b)
    a.send_data(S1, 0, b"x" * 64, 0.0)
    a.take_bytes()
    for sqn in range(1, 6):
        a.send_data(S1, sqn, b"x" * 64, 0.0)  # 76 bytes each: two fit in 200
    assert a.send_interest(InterestKey("T"), 4, 0.0)
    chunks = a.take_bytes()
    assert [len(c) for c in chunks[:3]] == [152, 152, 152]  # the open batch went out first
    b.receive_data(b"".join(chunks), 0.0)
    assert b.take_events() == [InterestReceived(InterestKey("T"), 4, False, False)]
    assert a.stats.batch_bytes_max <= 200


def test_max_queue_drops_and_counts() -> None:
    a, b = pair("<max-queue>1000</max-queue><max-datagram>500</max-datagram>" + BATCH)
    connect(a, b)
    results = [a.send_data(S1, sqn, b"x" * 64, 0.0) for sqn in range(40)]
    accepted = [sqn for sqn, ok in enumerate(results) if ok]
    assert a.pending <= 1500 and not all(results) and not a.writable
    st = a.stats
    assert st.data_fragments_dropped_would_block == 40 - len(accepted)
    assert st.data_fragment_bytes_dropped_would_block == 64 * (40 - len(accepted))
    assert st.data_bytes_enqueued_max <= 1500 and st.data_bytes_enqueued_limit == 1000
    pump(a, b, 0.0)
    a.handle_timer(1.0)
    pump(a, b, 1.0)
    assert a.writable
    assert [s for _, s, _ in b.take_frames()] == accepted  # a prefix, in order, nothing lost
    assert a.send_data(S1, 99, b"x", 1.0)


# --- interest, sources, route information ---------------------------------------------------


def test_control_messages_round_trip() -> None:
    a, b = pair()
    connect(a, b)
    info = RouteInfo(
        0xFEDCBA9876543210,
        "dro-a",
        7,
        3,
        (
            Adjacency((0, 5), 2),
            Adjacency((1, 2**64 - 1), 9),
            Adjacency((2, (0x7F000001 << 16) | 14400), 1),
        ),
    )
    assert a.send_route_info(info, 0.0)
    assert a.send_interest(InterestKey("topic.x"), 11, 0.0)
    assert a.send_interest(InterestKey("^a.*", 1), 12, 0.0, cancel=True)
    assert a.send_interest(InterestKey("b+", 2), 13, 0.0, refresh=True)
    assert a.send_source(S1, 4, 2, 11, 0.0)
    assert a.send_source(S1, 6, 3, None, 0.0, change=True)
    assert not a.send_source(S2, 6, 3, None, 0.0, change=True)  # never advertised
    assert a.send_source_gone(S1, 0.0)
    assert not a.send_source_gone(S1, 0.0)  # once per advertisement
    pump(a, b, 0.0)
    assert b.take_events() == [
        RouteInfoReceived(info),
        InterestReceived(InterestKey("topic.x"), 11, False, False),
        InterestReceived(InterestKey("^a.*", 1), 12, True, False),
        InterestReceived(InterestKey("b+", 2), 13, False, True),
        SourceReceived(S1, 4, 2, 11, False),
        SourceReceived(S1, 6, 3, 11, True),
        SourceGoneReceived(S1),
    ]


def test_unknown_control_is_counted_and_skipped() -> None:
    a, b = pair()
    connect(a, b)
    b.receive_data(
        lbmc.encode(lbmc.LBMCMessage(lbmc.MSG_CONTROL, headers=[lbmc.Domain(0, 1)])), 0.0
    )
    assert b.up and b.stats.cntl_msgs_unhandled == 1


def test_source_gone_ends_its_data_binding() -> None:
    a, b = pair()
    connect(a, b)
    a.send_source(S1, 1, 1, 1, 0.0)
    a.send_data(S1, 1, b"one", 0.0)
    a.send_source_gone(S1, 0.0)
    a.send_source(S1, 1, 1, 1, 0.0)  # seen again: a new binding
    a.send_data(S1, 2, b"two", 0.0)
    a.send_data(S2, 1, b"other", 0.0)
    pump(a, b, 0.0)
    got = [(k, s, bytes(d)) for k, s, d in b.take_frames()]
    assert got == [(S1, 1, b"one"), (S1, 2, b"two"), (S2, 1, b"other")]


def test_otid_must_be_32_bytes() -> None:
    a, b = pair()
    connect(a, b)
    with pytest.raises(LocalProtocolError):
        a.send_data(SourceKey(b"short", "t"), 1, b"x", 0.0)


# --- two DroCores over a link ---------------------------------------------------------------


def dro_cfg(name: str, domain: int) -> DROConfig:
    return load_text(
        f'<tnw-gateway version="1.0"><daemon><name>{name}</name>'
        '<route-info propagation-interval="100" check-interval="75" timeout="400"/>'
        '<route-recalculation backoff-interval="200" warning-interval="2000"/></daemon><portals>'
        f"<endpoint><name>E</name><domain-id>{domain}</domain-id></endpoint>"
        "<peer><name>P</name><cost>3</cost><single-tcp><acceptor><listen-port>0</listen-port>"
        f"</acceptor></single-tcp>{KA}</peer></portals></tnw-gateway>",
        f"<{name}.xml>",
    )


class Pair:
    """Two DROs, each with an endpoint (domains 1 and 2) and a peer portal linked together."""

    def __init__(self) -> None:
        self.now = 0.0
        self.cores = {
            n: DroCore(dro_cfg(n, d), node_id=d * 100, now=0.0) for n, d in (("a", 1), ("b", 2))
        }
        self.links = {
            n: PeerLink(self.cores[n].config.portal("P"), self.cores[n].node_id, n)  # type: ignore[arg-type]
            for n in self.cores
        }
        self.commands: dict[str, list[object]] = {"a": [], "b": []}
        self.events: dict[str, list[object]] = {"a": [], "b": []}
        self.stalled = False
        for n, core in self.cores.items():
            core.receive_portal_up("E", 0.0, address=(f"10.0.0.{len(n)}", 14000))

    def connect(self) -> None:
        for link in self.links.values():
            link.receive_connected(self.now)
        self.step(0.0)

    def step(self, dt: float) -> None:
        self.now = round(self.now + dt, 6)
        now = self.now
        for n, core in self.cores.items():
            t = core.next_timer()
            if t is not None and t <= now:
                core.handle_timer(now)
            link = self.links[n]
            t = link.next_timer()
            if t is not None and t <= now:
                link.handle_timer(now)
        for _ in range(4):  # a few rounds: answers to answers settle within one instant
            for n, core in self.cores.items():
                link = self.links[n]
                for cmd in core.take_commands():
                    if cmd.portal == "P":
                        link_command(link, cmd, now)
                    else:
                        self.commands[n].append(cmd)
                for portal, packet in core.take_lbmr():
                    if portal == "P":
                        link_lbmr(link, packet, now)
                for portal, info in core.take_route_info():
                    if portal == "P":
                        link.send_route_info(info, now)
                drain_queue(core, link, now)
            pump(
                self.links["a"],
                self.links["b"],
                now,
                a_to_b=not self.stalled,
                b_to_a=not self.stalled,
            )
            for n, core in self.cores.items():
                deliver(core, self.links[n], now)
                self.events[n] += core.take_events()

    def run(self, seconds: float, dt: float = 0.025) -> None:
        end = self.now + seconds
        while self.now < end:
            self.step(dt)


def test_two_dros_learn_each_others_domains_over_the_link() -> None:
    net = Pair()
    a, b = net.cores["a"], net.cores["b"]
    assert a.router.domains() == [1] and b.router.domains() == [2]
    net.connect()
    net.run(1.0)
    assert a.router.domains() == [1, 2] and b.router.domains() == [1, 2]
    assert a.router.cost_to(2) == (7, 2)  # portal costs on the path: a's P 3, b's P 3, b's E 1
    assert a.router.toward(2) == "P" and b.router.toward(1) == "P"
    assert any(isinstance(e, RecalcDone) and e.domains == 2 for e in net.events["a"])
    assert net.links["a"].stats.gateway_cntl_msgs_rcvd > 5


def test_data_crosses_two_dros_and_a_lost_link_recalculates() -> None:
    net = Pair()
    a, b = net.cores["a"], net.cores["b"]
    net.connect()
    net.run(1.0)
    b.receive_tqr("E", "AAA", net.now)  # a receiver in domain 2
    net.run(0.5)
    assert any(
        isinstance(c, CreateProxyReceiver) and c.key == InterestKey("AAA")
        for c in net.commands["a"]
    )
    a.receive_source("E", SourceAdvert(S1), net.now)  # a's proxy receiver resolved the source
    net.run(0.5)
    created = [c for c in net.commands["b"] if isinstance(c, CreateProxySource)]
    assert [(c.portal, c.source, c.origin_domain) for c in created] == [("E", S1, 1)]
    for sqn in range(100, 400):
        assert a.receive_frame("E", S1, sqn, b"m%d" % sqn)
    net.run(0.1)
    frames = b.take_frames("E")
    assert [(f.sqn, bytes(f.data)) for f in frames] == [(s, b"m%d" % s) for s in range(100, 400)]
    # the peer stalls: the keepalive timeout takes the link down and b forgets domain 1
    net.stalled = True
    net.run(6.0)
    assert not net.links["b"].up and b.router.domains() == [2]
    assert net.links["b"].stats.losses == 1
    # the adapter reconnects: routes come back
    net.stalled = False
    for link in net.links.values():
        if link.connected:
            link.receive_connection_lost(net.now)
    net.run(0.1)
    net.connect()
    net.run(1.0)
    assert b.router.domains() == [1, 2] and net.links["b"].up


def test_frames_of_an_open_batch_count_as_dropped_when_the_link_goes() -> None:
    a, b = pair(BATCH)
    connect(a, b)
    for sqn in range(3):
        assert a.send_data(S1, sqn, b"x" * 10, 0.0)
    assert a.stats.data_fragments_sent == 0  # counted when their batch closes
    a.receive_connection_lost(0.1)
    st = a.stats
    assert (
        st.data_fragments_dropped_not_operational,
        st.data_fragment_bytes_dropped_not_operational,
    ) == (3, 30)
    assert a.pending == 0
