"""The UDP data link of a peer portal (``<udp>``, :mod:`umcore.dro.peerudp`) inside the peer
link core, with a fake clock and no sockets; the last test hands its bytes to tshark.

Two :class:`PeerLink` objects (initiator and acceptor, each with ``<udp>``) are joined by
:class:`Wire`, which carries TCP bytes and UDP datagrams both ways; it can drop chosen DATA
datagrams (the loss NAKs must repair) or every datagram (a blocked UDP port).
"""

from __future__ import annotations

import random
import struct
from collections.abc import Callable

import pytest

from tests.dro.kit import otid
from tests.dro.test_peer_tshark import keys
from tests.oracle import Tshark
from umcore.config.dro import Peer, load_text
from umcore.dro import SourceKey
from umcore.dro.peer import DownCause, LinkDown, LinkUp, PeerLink
from umcore.errors import ConfigError
from umcore.wire import lbtru as w
from umcore.wire.pcap import TcpFlow, udp_frame

KA = '<gateway-keepalive interval="1000" timeout="3000"/>'
UDP = (
    "<udp><port>{port}</port>"
    '<nak-handling backoff-interval="50"/>'
    '<session-message min-interval="50" max-interval="200" activity-timeout="1000"/>'
    '<connect attempt-interval="100" max-attempts="5"/></udp>'
)
S1 = SourceKey(otid(1), "AAA")
S2 = SourceKey(otid(2), "BBB")
SEQ = struct.Struct("!I")


def peer(role: str, udp: str | None) -> Peer:
    side = (
        "<initiator><address>10.0.0.2</address><port>1</port></initiator>"
        if role == "initiator"
        else "<acceptor><listen-port>1</listen-port></acceptor>"
    )
    xml = (
        '<tnw-gateway version="1.0"><daemon><name>d</name></daemon><portals><peer>'
        f"<name>p</name><single-tcp>{side}</single-tcp>{udp or ''}{KA}</peer></portals>"
        "</tnw-gateway>"
    )
    portal = load_text(xml, "<test.xml>").portal("p")
    assert isinstance(portal, Peer)
    return portal


def is_first_data(d: bytes | bytearray) -> bool:
    """A DATA datagram's first transmission (not a retransmission)."""
    return d[0] & 0x0F == w.TYPE_DATA and not (d[2] << 8 | d[3]) & w.FLAG_RX


class Wire:
    """Carries bytes between initiator ``a`` and acceptor ``b``."""

    def __init__(self, udp_a: str | None = UDP, udp_b: str | None = UDP) -> None:
        self.a = PeerLink(peer("initiator", udp_a and udp_a.format(port=5001)), 1, "dro-a")
        self.b = PeerLink(peer("acceptor", udp_b and udp_b.format(port=5002)), 2, "dro-b")
        self.events: dict[PeerLink, list[object]] = {self.a: [], self.b: []}
        self.frames: dict[PeerLink, list[tuple[SourceKey, int, bytes]]] = {self.a: [], self.b: []}
        self.drop: Callable[[bytes | bytearray], bool] = lambda d: False
        self.udp_blocked = False
        self.dropped = 0
        self.datagrams = 0

    def connect(self, now: float) -> None:
        self.a.receive_connected(now)
        self.b.receive_connected(now)
        self.pump(now)

    def pump(self, now: float) -> None:
        for _ in range(1000):
            moved = False
            for src, dst in ((self.a, self.b), (self.b, self.a)):
                for chunk in src.take_bytes():
                    moved = True
                    dst.receive_data(chunk, now)
                for d in src.take_datagrams(now):
                    moved = True
                    self.datagrams += 1
                    if self.udp_blocked or self.drop(d):
                        self.dropped += 1
                        continue
                    dst.receive_datagram(bytes(d), now)
            for link in (self.a, self.b):
                self.events[link] += link.take_events()
                self.frames[link] += [(k, s, bytes(p)) for k, s, p in link.take_frames()]
            if not moved:
                return
        raise AssertionError("the links never went quiet")

    def run(self, now: float, until: float, step: float = 0.01) -> float:
        """Advance the clock to ``until`` firing timers (at most ``step`` apart)."""
        while now < until:
            times = [t for t in (self.a.next_timer(), self.b.next_timer()) if t is not None]
            now = min([until, now + step, *times])
            for link in (self.a, self.b):
                t = link.next_timer()
                if t is not None and t <= now:
                    link.handle_timer(now)
            self.pump(now)
        return now

    def downs(self, link: PeerLink) -> list[LinkDown]:
        return [e for e in self.events[link] if isinstance(e, LinkDown)]


def advertise(wire: Wire, now: float) -> None:
    """``a`` advertises S1 and S2 (over TCP): the core does before it sends their data."""
    for s in (S1, S2):
        assert wire.a.send_source(s, 1, 0, 7, now)
    wire.pump(now)


def up_pair(**kw: str | None) -> tuple[Wire, float]:
    wire = Wire(**kw)
    wire.connect(0.0)
    now = wire.run(0.0, 1.0)
    advertise(wire, now)
    return wire, now


def test_handshake_exchanges_ports_and_brings_the_udp_link_up() -> None:
    wire, _now = up_pair()
    a, b = wire.a, wire.b
    assert any(isinstance(e, LinkUp) for e in wire.events[a])
    assert any(isinstance(e, LinkUp) for e in wire.events[b])
    # each side learned the other's configured UDP port over TCP
    assert a.udp_peer_port == 5002
    assert b.udp_peer_port == 5001
    assert a.udp_up and b.udp_up
    assert a.writable and b.writable
    assert not wire.downs(a) and not wire.downs(b)


def test_data_goes_over_udp_and_tcp_carries_only_control() -> None:
    wire, now = up_pair()
    a, b = wire.a, wire.b
    tcp_before = a.stats.bytes_sent
    for i in range(2000):
        assert a.send_data(S1 if i % 3 else S2, 100 + i, SEQ.pack(i) + bytes(20), now)
    wire.pump(now)
    got = wire.frames[b]
    assert [SEQ.unpack_from(p)[0] for _k, _s, p in got] == list(range(2000))
    assert [s for k, s, _p in got if k == S1] == [100 + i for i in range(2000) if i % 3]
    # no data on TCP: the link's data counters stay 0, the UDP ones move
    assert a.stats.data_fragments_sent == 0 and b.stats.data_msgs_rcvd == 0
    assert a.stats.bytes_sent == tcp_before
    send, _ = a.udp_stats()
    _, receive = b.udp_stats()
    assert send["msgs_sent"] > 0 and send["bytes_sent"] > 2000 * 36
    assert receive["msgs_rcved"] == send["msgs_sent"]


def test_lost_datagrams_are_recovered_by_naks_in_order() -> None:
    wire, now = up_pair()
    a, b = wire.a, wire.b
    count = [0]

    def every_third(d: bytes | bytearray) -> bool:
        if not is_first_data(d):
            return False
        count[0] += 1
        return count[0] % 3 == 0

    wire.drop = every_third
    sent = 0
    for _burst in range(30):
        for _ in range(100):
            assert a.send_data(S1, sent, SEQ.pack(sent), now)
            sent += 1
        wire.pump(now)  # one datagram per burst: a third of them lost
    now = wire.run(now, now + 2.0)
    assert wire.dropped >= 10
    got = [s for _k, s, _p in wire.frames[b]]
    assert got == list(range(sent))
    send, _ = a.udp_stats()
    _, receive = b.udp_stats()
    assert receive["naks_sent"] >= wire.dropped
    assert send["rxs_sent"] >= wire.dropped
    assert receive["unrecovered_tmo"] == receive["unrecovered_txw"] == 0
    assert not wire.downs(a) and not wire.downs(b)


def test_blocked_udp_port_drops_both_links_and_the_next_connection_restores_them() -> None:
    wire, now = up_pair()
    a, b = wire.a, wire.b
    wire.udp_blocked = True
    # activity-timeout 1000 ms: nothing on UDP for that long is a failure; TCP keepalives
    # (3 s timeout) still flow, so the UDP link is what brings both down
    now = wire.run(now, now + 1.5)
    for link in (a, b):
        downs = wire.downs(link)
        assert downs and downs[0].cause is DownCause.UDP
        assert "1000 ms" in downs[0].reason
        assert not link.connected and not link.udp_up
    # the adapter closes TCP and the initiator reconnects: both links come back
    wire.udp_blocked = False
    wire.connect(now)
    now = wire.run(now, now + 1.0)
    assert a.up and b.up and a.udp_up and b.udp_up
    advertise(wire, now)
    assert a.send_data(S1, 7, b"x", now)
    wire.pump(now)
    assert wire.frames[b][-1][1:] == (7, b"x")
    assert a.stats.connects == b.stats.connects == 2


def test_tcp_loss_ends_the_udp_session_too() -> None:
    wire, now = up_pair()
    a, b = wire.a, wire.b
    old_sid = a.udp_stats()
    a.receive_connection_lost(now, "reset")
    b.receive_connection_lost(now, "reset")
    assert not a.udp_up and not b.udp_up
    assert a.take_datagrams(now) == []
    assert not a.send_data(S1, 1, b"x", now)
    assert a.stats.data_fragments_dropped_not_operational == 1
    assert old_sid  # the ended session's figures stay in the totals
    assert a.udp_stats()[0]["msgs_sent"] >= 0


def test_udp_that_never_answers_fails_after_max_attempts() -> None:
    wire = Wire()
    wire.udp_blocked = True
    wire.connect(0.0)
    now = wire.run(0.0, 3.0)
    for link in (wire.a, wire.b):
        downs = wire.downs(link)
        assert downs and downs[0].cause is DownCause.UDP
        assert "5 UDP connection requests" in downs[0].reason
    assert now <= 3.0


def test_udp_on_one_side_only_is_refused_or_times_out() -> None:
    # the acceptor has no <udp>: it refuses the initiator's offer with a clear reason
    wire = Wire(udp_b=None)
    wire.connect(0.0)
    downs = wire.downs(wire.b)
    assert downs and downs[0].cause is DownCause.REFUSED and "<udp>" in downs[0].reason
    # the initiator has none: the acceptor waits for an offer that never comes, then gives up
    wire = Wire(udp_a=None)
    wire.connect(0.0)
    wire.run(0.0, 7.0, step=0.5)
    downs = wire.downs(wire.b)
    assert downs and downs[0].cause is DownCause.UDP and "no UDP port" in downs[0].reason


def test_rate_limit_holds_data_in_the_portal_not_in_the_link() -> None:
    udp = UDP.replace(
        "<nak-handling", '<peer-rate-limit data="800000" interval="100"/><nak-handling'
    )
    wire, now = up_pair(udp_a=udp, udp_b=udp)
    a = wire.a
    sent = 0
    # 800 kbit/s, 100 ms: 10,000 bytes per interval; the link stops taking data when spent
    while a.writable and sent < 10_000:
        assert a.send_data(S1, sent, bytes(500), now)
        sent += 1
        if sent % 10 == 0:
            wire.pump(now)
    assert not a.writable and sent < 10_000
    now = wire.run(now, now + 0.25)
    assert a.writable
    assert len(wire.frames[wire.b]) == sent


@pytest.mark.parametrize(
    ("udp", "what"),
    [
        ("<udp></udp>", "port"),
        ("<udp><port>70000</port></udp>", "<port>"),
        ('<udp><port>9</port><nak-handling send-naks="maybe"/></udp>', "send-naks"),
        ('<udp><port>9</port><connect max-attempts="0"/></udp>', "max-attempts"),
        ('<udp><port>9</port><peer-rate-limit interval="0"/></udp>', "interval"),
        (
            '<udp><port>9</port><session-message min-interval="500" max-interval="100"/></udp>',
            "min-interval",
        ),
    ],
)
def test_bad_udp_values_are_refused_with_file_and_line(udp: str, what: str) -> None:
    with pytest.raises(ConfigError) as err:
        peer("initiator", udp)
    text = str(err.value)
    assert "<test.xml>" in text and what in text


def test_loss_recovery_with_random_drops_is_deterministic_per_seed() -> None:
    rng = random.Random(7)
    wire, now = up_pair()
    wire.drop = lambda d: is_first_data(d) and rng.random() < 0.2
    for i in range(3000):
        assert wire.a.send_data(S2, i, SEQ.pack(i), now)
        if i % 50 == 49:
            wire.pump(now)
            now = wire.run(now, now + 0.01)
    now = wire.run(now, now + 2.0)
    assert [s for _k, s, _p in wire.frames[wire.b]] == list(range(3000))


def test_tshark_decodes_the_offers_and_the_udp_link(tshark: Tshark) -> None:
    """The TCP side (hello, UDP port offers) as LBT-TCP and the UDP side as LBT-RU: every
    datagram type of the session (CREQ, SYN session message, DATA with its bindings and data
    messages, ACK, NAK, retransmission) decodes with no Malformed or Error item."""
    wire = Wire()
    flow = TcpFlow(("127.0.0.1", 40000), ("127.0.0.1", 24501))
    frames: list[bytes] = []
    ports = {wire.a: 5001, wire.b: 5002}
    count = [0]

    def carry(now: float) -> None:
        for _ in range(100):
            moved = False
            for src, dst in ((wire.a, wire.b), (wire.b, wire.a)):
                chunk = b"".join(src.take_bytes())
                if chunk:
                    moved = True
                    frames.append(flow.segment(src is wire.a, chunk))
                    dst.receive_data(chunk, now)
                for d in src.take_datagrams(now):
                    moved = True
                    frames.append(udp_frame("127.0.0.1", ports[src], "127.0.0.1", ports[dst], d))
                    if is_first_data(d):
                        count[0] += 1
                        if count[0] == 2:  # the second DATA datagram is lost: NAK, RX
                            continue
                    dst.receive_datagram(bytes(d), now)
            if not moved:
                return

    wire.a.receive_connected(0.0)
    wire.b.receive_connected(0.0)
    now = 0.0
    while now < 0.6:
        carry(now)
        now += 0.05
        for link in (wire.a, wire.b):
            link.handle_timer(now)
    assert wire.a.udp_up and wire.b.udp_up
    assert wire.a.send_source(S1, 1, 0, 7, now)
    carry(now)
    for i in range(3):
        wire.a.send_data(S1, 100 + i, b"payload %d" % i, now)
        carry(now)
    for step in range(1, 20):
        for link in (wire.a, wire.b):
            link.handle_timer(now + step * 0.05)
        carry(now + step * 0.05)
    got = [s for k, s, _p in wire.b.take_frames()]
    assert got == [100, 101, 102]
    decoded = tshark.decode(
        frames, decode_as=["tcp.port==24501,lbttcp", "udp.port==5001,lbtru", "udp.port==5002,lbtru"]
    )
    decoded.assert_clean(allow_warn=["lbtru.analysis.nak"])  # a NAK is a Warn by design
    seen = set(keys(decoded.layers))
    assert {"lbmc.tcp_sid", "lbmc.topic_source_exfunc", "lbmc.tnwg_capabilities"} <= seen
    assert {"lbtru.analysis.creq", "lbtru.analysis.sm.syn", "lbtru.data", "lbtru.nak"} <= seen
    assert {"lbtru.ack", "lbtru.hdr.flags.rx"} <= seen
    # 101 twice: lost (still captured), then retransmitted
    assert sorted(int(v) for v in decoded.values("lbmc.sqn")) == [100, 101, 101, 102]


def test_frames_wait_for_their_source_advertisement_on_tcp() -> None:
    """The two links do not keep each other's order: frames that arrive over UDP before their
    source's advertisement over TCP wait for it (the core would drop them as unknown)."""
    wire = Wire()
    wire.connect(0.0)
    now = wire.run(0.0, 1.0)
    a, b = wire.a, wire.b
    assert a.send_source(S1, 1, 0, 7, now)
    advert = b"".join(a.take_bytes())  # held back: the TCP advertisement is "late"
    for i in range(5):
        assert a.send_data(S1, i, b"x", now)
    wire.pump(now)  # the UDP datagram arrives first
    assert wire.frames[b] == []
    b.receive_data(advert, now)
    frames = b.take_frames()  # the advertisement is in this input's events: released
    events = b.take_events()
    assert [s for _k, s, _p in frames] == [0, 1, 2, 3, 4]
    assert any(getattr(e, "source", None) == S1 for e in events)
    # frames of a source never advertised wait, bounded, and are never handed out
    assert a.send_data(S2, 9, b"y", now)
    wire.pump(now)
    assert all(k == S1 for k, _s, _p in wire.frames[b])
    assert b.udp_frames_dropped_unadvertised == 0
