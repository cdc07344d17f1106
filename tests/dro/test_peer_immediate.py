"""UIMs and MIMs across a peer link (issues 19/20), sans-IO, fake clock, no sockets.

The link alone (:meth:`PeerLink.send_immediate`, :class:`ImmediateReceived`): a UIM and a MIM
arrive as sent, over TCP also when ``<udp>`` carries the data; a link that is down, full or
given a message too long drops it and says why; a bad immediate message is counted and skipped.
Then two DROs (:class:`tests.dro.test_peer.Pair`: DroCores joined by their links) with the
daemon's forwarders (:class:`~daemons.tnwgd.uim.UimForwarder`,
:class:`~daemons.tnwgd.mim.MimForwarder`) around fake endpoint portals: a UIM crosses hop by hop,
a request's REQUEST is rewritten at each DRO and its response retraces the path with the
original index, the hop limit and "never back over the link it came by" hold, and a MIM
follows the far TRD's interest across with its origin and hop mark; counters rise by exactly
what was sent.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from daemons.tnwgd.mim import MimForwarder
from daemons.tnwgd.uim import UimForwarder
from tests.dro.test_peer import Pair, connect, pair, pump
from tests.dro.test_peer_udp import up_pair
from tests.oracle import Tshark
from umcore.dro import InterestKey
from umcore.dro.peer import (
    IMMEDIATE_MIM,
    IMMEDIATE_UIM,
    ImmediateReceived,
    ImmediateSend,
    PeerLink,
)
from umcore.features import immediate as im
from umcore.wire import lbmc
from umcore.wire.pcap import TcpFlow

IP_B = "10.2.2.2"  # the destination context in domain 2
IP_A = "10.1.1.1"  # the requester in domain 1


def uim(
    payload: bytes,
    domain: int,
    *,
    hops: int = 0,
    request: int | None = None,
    topic: str | None = None,
) -> lbmc.LBMCMessage:
    """A UIM to ``TCP:domain:IP_B:5000`` as a client sends it to its DRO's portal."""
    headers: list[lbmc.Header] = []
    if topic is not None:
        headers.append(lbmc.TopicName(topic.encode() + b"\0"))
    headers.append(lbmc.Stream(0, 3, 9, b"ctxinst8"))
    if request is not None:
        headers.append(lbmc.Request(0, 0, request, 6000, 0, lbmc.ip4_from_str(IP_A)))
    headers.append(
        lbmc.Destination(
            domain_id=domain,
            ipaddr=lbmc.ip4_from_str(IP_B),
            port=5000,
            hops_taken=hops,
            orig_domain_id=1,
            orig_ipaddr=lbmc.ip4_from_str(IP_A),
            orig_port=6000,
        )
    )
    return lbmc.LBMCMessage(lbmc.MSG_DATA, 0, 9, headers, payload)


def response(qidx: int, payload: bytes) -> lbmc.LBMCMessage:
    hdr = lbmc.AppHeader(im.RESPONSE_APPHDR_CODE, qidx.to_bytes(4, "big"), True)
    return lbmc.LBMCMessage(lbmc.MSG_DATA, 0, 0, [hdr, lbmc.Stream(0, 4, 0, b"ctxinst9")], payload)


def mim(payload: bytes, topic: str | None, *, request: int | None = None) -> lbmc.LBMCMessage:
    headers: list[lbmc.Header] = []
    if topic is not None:
        headers.append(lbmc.TopicName(topic.encode() + b"\0"))
    if request is not None:
        headers.append(lbmc.Request(0, 0, request, 6000, 0, lbmc.ip4_from_str(IP_A)))
    return lbmc.LBMCMessage(lbmc.MSG_DATA, 0, 0, headers, payload)


def immediates(link: PeerLink) -> list[ImmediateReceived]:
    return [e for e in link.take_events() if isinstance(e, ImmediateReceived)]


# --- the link alone ---------------------------------------------------------------------------


def test_uim_and_mim_cross_the_link_as_sent() -> None:
    a, b = pair()
    connect(a, b)
    sent = [uim(b"u1", 2, request=5, topic="t.u"), mim(b"m1", "t.m"), mim(b"m2", None)]
    assert a.send_immediate(sent[0], 0.0) is ImmediateSend.SENT
    assert a.send_immediate(sent[1], 0.0, multicast=True) is ImmediateSend.SENT
    assert a.send_immediate(sent[2], 0.0, multicast=True) is ImmediateSend.SENT
    before = b.stats.gateway_cntl_msgs_rcvd
    pump(a, b, 0.0)
    assert immediates(b) == [
        ImmediateReceived(False, sent[0]),
        ImmediateReceived(True, sent[1]),
        ImmediateReceived(True, sent[2]),
    ]
    assert b.stats.gateway_cntl_msgs_rcvd - before == 3 and b.stats.cntl_msgs_unhandled == 0


def test_a_link_not_up_full_or_given_too_much_drops_and_says_why() -> None:
    a, b = pair("<max-queue>1000</max-queue>")
    msg = uim(b"x" * 300, 2)
    assert a.send_immediate(msg, 0.0) is ImmediateSend.NOT_OPERATIONAL  # no connection yet
    connect(a, b)
    results = [a.send_immediate(msg, 0.0) for _ in range(6)]
    sent = results.count(ImmediateSend.SENT)
    assert 1 <= sent < 6 and results[sent:] == [ImmediateSend.WOULD_BLOCK] * (6 - sent)
    assert a.up  # none of this costs the link
    pump(a, b, 0.0)
    head = len(lbmc.encode(uim(b"", 2)))
    huge = uim(b"y" * (lbmc.MAX_LBMC_MESSAGE - 5 - head), 2)  # fits LBMC, not with the wrapper
    assert len(lbmc.encode(huge)) == lbmc.MAX_LBMC_MESSAGE - 5
    assert a.send_immediate(huge, 0.0) is ImmediateSend.TOO_LONG
    assert len(immediates(b)) == sent
    assert a.send_immediate(msg, 0.0) is ImmediateSend.SENT  # room again once written


def test_a_bad_immediate_message_is_counted_and_skipped() -> None:
    a, b = pair()
    connect(a, b)
    for flags, payload in ((IMMEDIATE_UIM, b"\x00\x01"), (IMMEDIATE_MIM, b"")):
        bad = lbmc.LBMCMessage(lbmc.MSG_CONTROL, headers=[lbmc.Domain(flags, 0)], payload=payload)
        b.receive_data(lbmc.encode(bad), 0.0)
    assert b.up and b.stats.cntl_msgs_unhandled == 2 and immediates(b) == []
    assert a.send_immediate(mim(b"after", "t"), 0.0, multicast=True) is ImmediateSend.SENT
    pump(a, b, 0.0)
    assert [e.message.payload for e in immediates(b)] == [b"after"]


def test_with_a_udp_data_link_they_travel_on_tcp() -> None:
    wire, now = up_pair()
    datagrams = wire.datagrams
    assert wire.a.udp_up
    msg = uim(b"over tcp", 2)
    assert wire.a.send_immediate(msg, now) is ImmediateSend.SENT
    assert wire.b.send_immediate(mim(b"back", "t"), now, multicast=True) is ImmediateSend.SENT
    wire.pump(now)
    got_b = [e for e in wire.events[wire.b] if isinstance(e, ImmediateReceived)]
    got_a = [e for e in wire.events[wire.a] if isinstance(e, ImmediateReceived)]
    assert got_b == [ImmediateReceived(False, msg)]
    assert [e.message.payload for e in got_a] == [b"back"]
    assert wire.datagrams == datagrams  # nothing of them went over UDP


def test_tshark_decodes_immediate_messages_on_a_link(tshark: Tshark) -> None:
    a, b = pair()
    flow = TcpFlow(("127.0.0.1", 40001), ("127.0.0.1", 24501))
    frames: list[bytes] = []

    def carry() -> None:
        for src, dst, from_client in ((a, b, True), (b, a, False)):
            chunk = b"".join(src.take_bytes())
            if chunk:
                frames.append(flow.segment(from_client, chunk))
                dst.receive_data(chunk, 0.0)

    a.receive_connected(0.0)
    b.receive_connected(0.0)
    carry()
    carry()
    assert a.up and b.up
    a.send_immediate(uim(b"u", 2, request=1, topic="t.u"), 0.0)
    a.send_immediate(mim(b"m", "t.m"), 0.0, multicast=True)
    b.send_immediate(response(1, b"r"), 0.0)
    carry()
    decoded = tshark.decode(frames, decode_as=["tcp.port==24501,lbttcp"])
    decoded.assert_clean()
    flags = [int(str(v), 0) for v in decoded.values("lbmc.domain.flags")]
    assert sorted(flags) == [IMMEDIATE_UIM, IMMEDIATE_UIM, IMMEDIATE_MIM]


# --- two DROs with their forwarders -----------------------------------------------------------


@dataclass
class FakePort:
    """An endpoint portal's request port: what the forwarder sends from it."""

    port: int
    sent: list[tuple[tuple[str, int], lbmc.LBMCMessage]] = field(default_factory=list)

    def send(self, addr: tuple[str, int], data: bytes) -> None:
        self.sent.append((addr, lbmc.decode(data)))


@dataclass
class FakeFeatures:
    port: FakePort


@dataclass
class FakeContext:
    features: FakeFeatures
    advertised_ip: str


class FakeEndpoint:
    """The endpoint portal ``E`` of a DRO (its domain), as the forwarders see one."""

    def __init__(self, domain: int) -> None:
        self.name = "E"
        self.domain_id = domain
        self.up = True
        self.source_requests: dict[bytes, tuple[str, int]] = {}
        self.port = FakePort(14390 + domain)
        self.src = FakeContext(FakeFeatures(self.port), f"10.0.0.{domain}")

    def request_address(self) -> tuple[str, int]:
        return (self.src.advertised_ip, self.port.port)


class FakePeer:
    """The peer portal ``P``: its link, and what the link brings goes to the other DRO."""

    def __init__(self, net: Pair, side: str) -> None:
        self.name = "P"
        self.net = net
        self.link = net.links[side]

    @property
    def up(self) -> bool:
        return self.link.up

    def send_immediate(self, message: lbmc.LBMCMessage, *, multicast: bool) -> ImmediateSend:
        return self.link.send_immediate(message, self.net.now, multicast=multicast)


class Dros:
    """Two DROs a (domain 1) and b (domain 2) joined by a link, each with UIM/MIM forwarders."""

    def __init__(self) -> None:
        self.net = Pair()
        self.net.connect()
        self.net.run(1.0)
        self.ends: dict[str, FakeEndpoint] = {"a": FakeEndpoint(1), "b": FakeEndpoint(2)}
        self.uim: dict[str, UimForwarder] = {}
        self.mim: dict[str, MimForwarder] = {}
        for side, ep in self.ends.items():
            core = self.net.cores[side]
            eps: dict[str, Any] = {"E": ep}
            peers = {"P": FakePeer(self.net, side)}
            self.uim[side] = UimForwarder(core, eps, lambda: self.net.now, peers)
            self.mim[side] = MimForwarder(core, eps, lambda: self.net.now, self.uim[side], peers)

    def carry(self) -> None:
        """Bytes across the link; what arrives goes to that DRO's forwarders."""
        links = self.net.links
        pump(links["a"], links["b"], self.net.now)
        for side, link in links.items():
            for ev in immediates(link):
                if ev.multicast:
                    self.mim[side].receive_peer("P", ev.message)
                else:
                    self.uim[side].receive_peer("P", ev.message)


def test_uim_and_request_response_cross_a_peer_link() -> None:
    d = Dros()
    a, b = d.uim["a"], d.uim["b"]
    assert d.net.cores["a"].router.toward(2) == "P"
    # a UIM TCP:2:IP_B:5000 from TRD1 is delivered in TRD2, one hop counted per DRO
    assert a.receive("E", uim(b"hello", 2, topic="t.u"), im.KIND_UIM)
    d.carry()
    [(addr, got)] = d.ends["b"].port.sent
    assert addr == (IP_B, 5000) and got.payload == b"hello"
    dest = got.find(lbmc.Destination)
    assert dest is not None and (dest.hops_taken, dest.orig_domain_id, dest.domain_id) == (2, 1, 2)
    assert got.find(lbmc.TopicName) == lbmc.TopicName(b"t.u\0")
    # a request: each DRO rewrites REQUEST, the response comes back with the original index
    assert a.receive("E", uim(b"q", 2, request=77), im.KIND_REQUEST)
    d.carry()
    _, req = d.ends["b"].port.sent[1]
    r = req.find(lbmc.Request)
    assert r is not None
    assert (lbmc.ip4_to_str(r.ipaddr), r.port) == d.ends["b"].request_address() and r.qidx != 77
    assert b.receive("E", response(r.qidx, b"answer"), im.KIND_RESPONSE)  # to b's E port
    d.carry()
    [(back, resp)] = d.ends["a"].port.sent
    assert back == (IP_A, 6000) and resp.payload == b"answer"
    assert im.response_index(resp) == 77
    assert (a.responses_forwarded, b.responses_forwarded) == (1, 1)
    assert (a.forwarded, b.forwarded) == (2, 2)
    # counters, per portal, exactly what crossed (payload bytes)
    sa, sb = a.stats, b.stats
    assert (sa("E").rcvd, sa("E").bytes_rcvd) == (2, 6)
    assert (sa("P").forwarded, sa("P").sent, sa("P").bytes_sent) == (2, 2, 6)
    assert (sb("P").rcvd, sb("P").bytes_rcvd, sb("E").sent, sb("E").bytes_sent) == (2, 6, 2, 6)
    assert (sb("E").rcvd, sb("P").sent, sb("P").bytes_sent) == (1, 1, 6)  # the response
    assert (sa("P").rcvd, sa("E").sent, sa("E").bytes_sent) == (1, 1, 6)
    assert a.no_route == b.no_route == a.send_failed == b.send_failed == 0


def test_hop_limit_and_no_way_back_over_the_link() -> None:
    d = Dros()
    a, b = d.uim["a"], d.uim["b"]
    limit = d.net.cores["b"].router.max_hop_count
    assert a.receive("E", uim(b"far", 2, hops=limit - 1), im.KIND_UIM)  # a's hop is the last
    d.carry()
    assert b.too_many_hops == 1 and d.ends["b"].port.sent == []
    # addressed to domain 1 but arriving from the link whose way to 1 is that link: dropped
    b.receive_peer("P", uim(b"loop", 1))
    assert b.no_route == 1 and b.stats("P").dropped_no_route == 1
    b.receive_peer("P", mim(b"not a uim", None))  # no DESTINATION: not for a DRO
    assert b.not_for_dro == 1
    assert d.net.links["a"].stats.gateway_cntl_msgs_dropped_not_operational == 0


def test_mim_follows_interest_across_the_link() -> None:
    d = Dros()
    cb = d.net.cores["b"]
    cb.receive_tqr("E", "t.m", d.net.now)  # a receiver of t.m in domain 2
    d.net.run(0.5)
    ca = d.net.cores["a"]
    assert (InterestKey("t.m"), 2) in ca.interest("P")
    d.mim["a"].receive("E", mim(b"m1", "t.m"), d.net.now)
    d.mim["a"].receive("E", mim(b"q", "t.m", request=5), d.net.now)
    d.mim["a"].receive("E", mim(b"nobody", "t.none"), d.net.now)
    d.carry()
    # b routed both to its endpoint (no MIM socket here: counted as that send's error)
    assert (cb.mim_stats("P").topic.rcvd, cb.mim_stats("P").topic.req_rcvd) == (2, 1)
    assert cb.mim_stats("P").topic.bytes_rcvd == 3
    assert cb.mim_stats("E").topic.forwarded == 2
    assert cb.mim_stats("E").topic.dropped_error == 2
    pa = ca.mim_stats("P").topic
    assert (pa.forwarded, pa.sent, pa.req_sent, pa.bytes_sent) == (2, 2, 1, 3)
    assert ca.mim_stats("E").topic.dropped_no_interest == 1
    # what crossed: the topic, the origin and hop mark, the request rewritten to a's index
    d.mim["a"].receive("E", mim(b"m2", "t.m", request=6), d.net.now)
    links = d.net.links
    pump(links["a"], links["b"], d.net.now)
    sent = [e.message for e in immediates(links["b"])]
    [m] = sent
    assert m.find(lbmc.TopicName) == lbmc.TopicName(b"t.m\0")
    mark = m.find(lbmc.Destination)
    assert mark is not None and (mark.domain_id, mark.orig_domain_id, mark.hops_taken) == (0, 1, 1)
    r = m.find(lbmc.Request)
    assert r is not None and (r.ipaddr, r.port) == (0, 0) and r.qidx != 6
    # a MIM that came over the link does not go back over it, nor past the hop limit
    back = d.mim["b"]
    back.receive_peer("P", mim(b"x", None))  # topicless from the link: only into TRD2
    assert cb.mim_stats("P").topicless.forwarded == 0
    assert cb.mim_stats("E").topicless.forwarded == 1


def test_a_uim_to_a_source_crosses_to_its_origin() -> None:
    """``SOURCE:`` + a proxy source's string in TRD2: DESTINATION names domain 1 and no address,
    OTID the origin; DRO a delivers to the request port the origin's TIR named."""
    d = Dros()
    origin = bytes(range(32))
    d.ends["a"].source_requests[origin] = ("10.1.1.7", 14391)
    dest = lbmc.Destination(domain_id=1, orig_domain_id=2)
    msg = lbmc.LBMCMessage(
        lbmc.MSG_DATA, 0, 0, [lbmc.Stream(0, 1, 0, bytes(8)), dest, lbmc.Otid(0, origin)], b"to src"
    )
    assert d.uim["b"].receive("E", msg, im.KIND_UIM)
    d.carry()
    [(addr, got)] = d.ends["a"].port.sent
    assert addr == ("10.1.1.7", 14391) and got.payload == b"to src"
    assert got.find(lbmc.Otid) == lbmc.Otid(0, origin)
    assert (d.uim["b"].stats("P").sent, d.uim["a"].stats("P").rcvd) == (1, 1)


def test_a_topicless_mim_reaches_the_trd_beyond_the_link() -> None:
    d = Dros()
    d.mim["a"].receive("E", mim(b"all", None), d.net.now)
    d.carry()
    ca, cb = d.net.cores["a"], d.net.cores["b"]
    assert (ca.mim_stats("P").topicless.forwarded, ca.mim_stats("P").topicless.sent) == (1, 1)
    assert cb.mim_stats("P").topicless.rcvd == 1
    assert cb.mim_stats("E").topicless.forwarded == 1  # into TRD2 (no socket here: an error)
