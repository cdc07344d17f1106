"""Late join / OTR forwarding in the DRO core (umcore.dro.recovery), sans-IO, fake clock.

The receiver is the client library's own recovery machine (TopicRecovery), the origin its own
late-join service (LateJoinService over a RetentionBuffer); between them one or two DRO cores.
A tiny "network" carries every message to the request port it is addressed to, so what is
checked is what each party would really send and accept.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable

from tests.dro.kit import config, otid
from umcore.dro import DroCore, SourceAdvert, SourceKey
from umcore.dro.recovery import PENDING_LIFETIME_S, Origin, RecoveryForwarder
from umcore.features import immediate as im
from umcore.features.latejoin import (
    LateJoinConfig,
    LateJoinService,
    encode_rxreqs,
    parse_otid,
)
from umcore.features.otr import OtrConfig
from umcore.features.recovery import DELIVER_DATA, FLAG_OTR, FLAG_RETRANSMIT, TopicRecovery
from umcore.features.retention import RetentionBuffer
from umcore.wire import lbmc

Address = tuple[str, int]
ORIGIN: Address = ("10.1.0.5", 6000)
RECEIVER: Address = ("10.2.0.9", 7000)
TOPIC = "lj.topic"
SK = SourceKey(otid(1), TOPIC)
ORIGIN_TIDX, ORIGIN_TOPIC = 3, 7  # the origin's transport and topic index
PROXY_TOPIC = 42  # the proxy source's topic index in the receiver's TRD


def _origin(count: int) -> LateJoinService:
    svc = LateJoinService(*ORIGIN)
    rb = RetentionBuffer(size_threshold=10_000_000)
    for i in range(count):
        rb.add(i, b"m%d" % i, 0.0)
    svc.add(ORIGIN_TIDX, ORIGIN_TOPIC, TOPIC, rb, lambda: count)
    return svc


def _core(a: Address, b: Address) -> DroCore:
    """A DRO with endpoint portals A (the origin's TRD) and B, up at ``a`` and ``b``, which has
    resolved the source at A."""
    core = DroCore(config([("A", 1, 1), ("B", 2, 1)]), node_id=1)
    core.receive_portal_up("A", 0.0, address=a)
    core.receive_portal_up("B", 0.0, address=b)
    core.receive_source("A", SourceAdvert(SK), 0.0)
    return core


class Net:
    """Request ports by address; :meth:`run` carries messages until none is left."""

    def __init__(self) -> None:
        self.ports: dict[Address, Callable[[lbmc.LBMCMessage], list[tuple[Address, bytes]]]] = {}
        self.wire: deque[tuple[Address, bytes]] = deque()
        self.carried = 0

    def dro_portal(self, fwd: RecoveryForwarder, portal: str, address: Address, now: float) -> None:
        """``portal``'s request port, as daemons.tnwgd.recovery feeds it."""

        def port(msg: lbmc.LBMCMessage) -> list[tuple[Address, bytes]]:
            kind = im.classify(msg)
            if kind in (im.KIND_LJI_REQ, im.KIND_RXREQ):
                fwd.receive_request(portal, msg, now)
            else:
                fwd.receive_reply(portal, msg, now)
            return [(addr, data) for _p, addr, data in fwd.take_sends()]

        self.ports[address] = port

    def send(self, items: list[tuple[Address, bytes]]) -> None:
        self.wire.extend(items)

    def run(self) -> None:
        while self.wire:
            addr, data = self.wire.popleft()
            self.carried += 1
            self.send(self.ports[addr](lbmc.decode(data)))


class Receiver:
    """A receiver's TopicRecovery of the proxy source at ``proxy`` (transport index ``tidx``)."""

    def __init__(self, proxy: Address, tidx: int, *, lj: bool = True, otr: bool = False) -> None:
        self.proxy = proxy
        self.tidx = tidx
        self.rec = TopicRecovery(
            transport_idx=tidx,
            topic_idx=PROXY_TOPIC,
            request_idx=9,
            reply_to=RECEIVER,
            late_join=LateJoinConfig() if lj else None,
            otr=OtrConfig(initial_delay=0.0) if otr else None,
        )
        self.delivered: list[tuple[int, bytes, int]] = []
        self.otids: set[tuple[str, int, int] | None] = set()
        self.now = 0.0

    def take(self) -> list[tuple[Address, bytes]]:
        return [(self.proxy, r) for r in self.rec.take_requests()]

    def port(self, msg: lbmc.LBMCMessage) -> list[tuple[Address, bytes]]:
        """What the engine's request port does with LJ_INFO / RETRANS (umcore.engine.features)."""
        if msg.msg_type == lbmc.MSG_RETRANS:
            o = msg.find(lbmc.Otid)
            self.otids.add(parse_otid(o.otid) if o is not None else None)
            assert msg.tidx == PROXY_TOPIC
            self._deliver(self.rec.on_retransmission(msg.sqn, msg.payload, (), self.now))
        else:
            for h in msg.find_all(lbmc.UmeLjInfo):
                assert h.qidx == 9  # the receiver's own request index came back
                self._deliver(self.rec.on_lj_info(h.low_seqnum, h.high_seqnum, self.now))
        return self.take()

    def _deliver(self, items: list[tuple[int, int, bytes, int, object, int]]) -> None:
        for kind, sqn, payload, flags, _meta, _n in items:
            assert kind == DELIVER_DATA, "a loss was declared"
            self.delivered.append((sqn, payload, flags))


def test_late_join_is_forwarded_to_the_origin_and_answered_back() -> None:
    a, b = ("10.0.0.1", 5001), ("10.0.0.2", 5002)
    core = _core(a, b)
    fwd = core.recovery
    fwd.receive_origin("A", SK, Origin(*ORIGIN, ORIGIN_TIDX, ORIGIN_TOPIC))
    assert fwd.offers_late_join(SK)
    tidx = fwd.proxy_created("B", SK)
    assert tidx is not None and fwd.proxy_created("B", SK) == tidx  # one per proxy source
    svc = _origin(25)
    net = Net()
    net.ports[ORIGIN] = svc.handle
    net.dro_portal(fwd, "A", a, 0.0)
    net.dro_portal(fwd, "B", b, 0.0)
    r = Receiver(b, tidx)
    net.ports[RECEIVER] = r.port
    r.rec.start_late_join(0.0)
    net.send(r.take())
    net.run()
    assert [(s, p) for s, p, _f in r.delivered] == [(i, b"m%d" % i) for i in range(25)]
    assert all(f & FLAG_RETRANSMIT for _s, _p, f in r.delivered)
    # the origin answered everything (the DRO holds no retention buffer), to the DRO's portal A
    assert svc.stats.lji_requests == 1 and svc.stats.retransmissions == 25
    assert svc.stats.unknown_topic == 0
    # the receiver saw the proxy source's identity on every retransmission (its matching key)
    assert r.otids == {(b[0], b[1], tidx)}
    st = fwd.stats
    assert (st.lji_forwarded, st.lj_info_relayed) == (1, 1)
    assert (st.rxreq_forwarded, st.retrans_relayed) == (25, 25)
    assert st.unknown_reply == st.unknown_proxy == st.no_route == 0
    assert fwd.pending == 0


def test_two_dros_in_a_row_each_stand_in_for_the_previous() -> None:
    """TRD1 -DRO1- TRD2 -DRO2- TRD3: DRO2's origin is DRO1's proxy source in TRD2."""
    a1, b1 = ("10.0.1.1", 5001), ("10.0.2.1", 5002)  # DRO1: A in TRD1, B in TRD2
    x2, y2 = ("10.0.2.2", 5003), ("10.0.3.2", 5004)  # DRO2: X in TRD2, Y in TRD3
    dro1 = _core(a1, b1)
    dro1.recovery.receive_origin("A", SK, Origin(*ORIGIN, ORIGIN_TIDX, ORIGIN_TOPIC))
    t1 = dro1.recovery.proxy_created("B", SK)
    assert t1 is not None
    dro2 = DroCore(config([("X", 2, 1), ("Y", 3, 1)]), node_id=2)
    dro2.receive_portal_up("X", 0.0, address=x2)
    dro2.receive_portal_up("Y", 0.0, address=y2)
    dro2.receive_source("X", SourceAdvert(SK, None, 1, 1, 1), 0.0)
    # DRO1's proxy source advertised LATE_JOIN(b1, t1) with topic index 11 in TRD2
    dro2.recovery.receive_origin("X", SK, Origin(*b1, t1, 11))
    t2 = dro2.recovery.proxy_created("Y", SK)
    assert t2 is not None
    svc = _origin(12)
    net = Net()
    net.ports[ORIGIN] = svc.handle
    for core, portal, addr in ((dro1, "A", a1), (dro1, "B", b1), (dro2, "X", x2), (dro2, "Y", y2)):
        net.dro_portal(core.recovery, portal, addr, 0.0)
    r = Receiver(y2, t2)
    net.ports[RECEIVER] = r.port
    r.rec.start_late_join(0.0)
    net.send(r.take())
    net.run()
    assert [s for s, _p, _f in r.delivered] == list(range(12))
    assert svc.stats.retransmissions == 12
    assert r.otids == {(y2[0], y2[1], t2)}
    for core in (dro1, dro2):
        assert core.recovery.stats.retrans_relayed == 12
        assert core.recovery.pending == 0


def test_otr_requests_reach_the_origin_and_fill_the_gap() -> None:
    a, b = ("10.0.0.1", 5001), ("10.0.0.2", 5002)
    core = _core(a, b)
    fwd = core.recovery
    fwd.receive_origin("A", SK, Origin(*ORIGIN, ORIGIN_TIDX, ORIGIN_TOPIC))
    tidx = fwd.proxy_created("B", SK)
    assert tidx is not None
    svc = _origin(10)
    net = Net()
    net.ports[ORIGIN] = svc.handle
    net.dro_portal(fwd, "A", a, 0.0)
    net.dro_portal(fwd, "B", b, 0.0)
    r = Receiver(b, tidx, lj=False, otr=True)
    net.ports[RECEIVER] = r.port
    r._deliver(r.rec.on_live(0, b"m0", (), 0.0))
    r._deliver(r.rec.on_live(1, b"m1", (), 0.0))
    r._deliver(r.rec.on_transport_loss(2, 3, 0.0))  # 2, 3, 4 lost on the proxy's transport
    r._deliver(r.rec.on_live(5, b"m5", (), 0.0))
    r._deliver(r.rec.handle_timer(0.0))
    net.send(r.take())
    net.run()
    assert [s for s, _p, _f in r.delivered] == list(range(6))
    assert {s for s, _p, f in r.delivered if f & FLAG_OTR} == {2, 3, 4}
    assert svc.stats.rx_requests == 3 and fwd.stats.retrans_relayed == 3


def _bare(ingress: str | None = "A") -> RecoveryForwarder:
    addresses = {"A": ("10.0.0.1", 5001), "B": ("10.0.0.2", 5002)}
    fwd = RecoveryForwarder(lambda sk: ingress, addresses.get)
    fwd.receive_origin("A", SK, Origin(*ORIGIN, ORIGIN_TIDX, ORIGIN_TOPIC))
    return fwd


def _rxreq(tidx: int, sqns: list[int], reply: Address) -> lbmc.LBMCMessage:
    (data,) = encode_rxreqs(1, tidx, PROXY_TOPIC, sqns, reply)
    return lbmc.decode(data)


def _retrans(sqn: int, topic_idx: int = ORIGIN_TOPIC, ident: Address = ORIGIN) -> bytes:
    svc = LateJoinService(*ident)
    return lbmc.encode(
        lbmc.LBMCMessage(
            lbmc.MSG_RETRANS, topic_idx, sqn,
            [lbmc.Otid(0, svc.otid(ORIGIN_TIDX)), lbmc.TopicName(TOPIC.encode() + b"\0")], b"x",
        )
    )  # fmt: skip


def test_each_receiver_that_asked_gets_the_retransmission_once() -> None:
    fwd = _bare()
    tidx = fwd.proxy_created("B", SK)
    assert tidx is not None
    other = ("10.2.0.10", 7001)
    fwd.receive_request("B", _rxreq(tidx, [5], RECEIVER), 0.0)
    fwd.receive_request("B", _rxreq(tidx, [5], other), 0.1)
    fwd.receive_request("B", _rxreq(tidx, [5], RECEIVER), 0.2)  # a retry: asked once still
    sent = fwd.take_sends()
    assert len(sent) == 3 and {(p, addr) for p, addr, _d in sent} == {("A", ORIGIN)}
    rx = lbmc.decode(sent[0][2]).find(lbmc.UmeRxReq)
    assert rx is not None
    assert (rx.transport_idx, rx.id_2, rx.seqnum) == (ORIGIN_TIDX, ORIGIN_TOPIC, 5)
    assert (lbmc.ip4_to_str(rx.rx_ip), rx.rx_port) == ("10.0.0.1", 5001)  # answers come to A
    assert fwd.receive_reply("A", lbmc.decode(_retrans(5)), 0.3)
    out = fwd.take_sends()
    assert sorted(addr for _p, addr, _d in out) == sorted([RECEIVER, other])
    for p, _addr, data in out:
        msg = lbmc.decode(data)
        assert p == "B" and (msg.tidx, msg.sqn, msg.payload) == (PROXY_TOPIC, 5, b"x")
        o = msg.find(lbmc.Otid)
        assert o is not None and parse_otid(o.otid) == ("10.0.0.2", 5002, tidx)
        assert msg.find(lbmc.TopicName) is not None  # the origin's other headers kept
    # a second copy (the answer to the retry) is nobody's any more
    assert not fwd.receive_reply("A", lbmc.decode(_retrans(5)), 0.4)
    assert fwd.take_sends() == [] and fwd.stats.unknown_reply == 1


def test_a_retransmission_of_another_source_is_not_relayed() -> None:
    fwd = _bare()
    tidx = fwd.proxy_created("B", SK)
    assert tidx is not None
    fwd.receive_request("B", _rxreq(tidx, [8], RECEIVER), 0.0)
    fwd.take_sends()
    # same topic index and sqn at portal A, but another source's OTID
    fwd.receive_reply("A", lbmc.decode(_retrans(8, ident=("10.1.0.6", 6000))), 0.1)
    assert fwd.take_sends() == [] and fwd.stats.unknown_reply == 1


def test_forgotten_after_the_pending_lifetime() -> None:
    fwd = _bare()
    tidx = fwd.proxy_created("B", SK)
    assert tidx is not None
    fwd.receive_request("B", _rxreq(tidx, [1, 2], RECEIVER), 0.0)
    fwd.take_sends()
    assert fwd.pending == 2
    assert fwd.receive_reply("A", lbmc.decode(_retrans(1)), PENDING_LIFETIME_S - 0.1)
    assert len(fwd.take_sends()) == 1
    assert not fwd.receive_reply("A", lbmc.decode(_retrans(2)), PENDING_LIFETIME_S + 0.1)
    assert fwd.take_sends() == [] and fwd.pending == 0


def test_unroutable_requests_are_counted_not_sent() -> None:
    fwd = _bare(ingress=None)  # the source is seen nowhere (gone)
    tidx = fwd.proxy_created("B", SK)
    assert tidx is not None
    assert fwd.receive_request("B", _rxreq(tidx, [1], RECEIVER), 0.0)
    assert fwd.stats.no_route == 1
    fwd = _bare(ingress="P")  # frames come over a peer link: no request port to forward to
    tidx = fwd.proxy_created("B", SK)
    assert tidx is not None
    fwd.receive_request("B", _rxreq(tidx, [1], RECEIVER), 0.0)
    assert fwd.stats.no_route == 1
    # not a proxy of portal A, no such proxy: not taken (left to the portal's context)
    assert not fwd.receive_request("A", _rxreq(tidx, [1], RECEIVER), 0.0)
    assert not fwd.receive_request("B", _rxreq(tidx + 1, [1], RECEIVER), 0.0)
    assert fwd.stats.unknown_proxy == 2
    assert fwd.take_sends() == [] and fwd.pending == 0


def test_portal_down_and_source_gone_forget_everything_of_it() -> None:
    a, b = ("10.0.0.1", 5001), ("10.0.0.2", 5002)
    core = _core(a, b)
    fwd = core.recovery
    fwd.receive_origin("A", SK, Origin(*ORIGIN, ORIGIN_TIDX, ORIGIN_TOPIC))
    tidx = fwd.proxy_created("B", SK)
    assert tidx is not None
    fwd.receive_request("B", _rxreq(tidx, [1, 2, 3], RECEIVER), 0.0)
    assert fwd.pending == 3
    core.receive_portal_down("B", 1.0)
    assert fwd.pending == 0
    fwd.receive_request("B", _rxreq(tidx, [1], RECEIVER), 1.0)
    assert fwd.stats.unknown_proxy == 1  # its proxy sources went with it
    core.receive_source_gone("A", SK, 2.0)
    assert not fwd.offers_late_join(SK) and fwd.origin("A", SK) is None


class Link:
    """Two peer portals' links, carrying the forwarders' peer sends both ways."""

    def __init__(self, net: Net, ends: dict[str, tuple[RecoveryForwarder, str]]) -> None:
        self.net = net
        self.ends = ends  # portal -> (the forwarder at the other end, its portal)
        self.messages = 0

    def carry(self, fwd: RecoveryForwarder) -> list[tuple[Address, bytes]]:
        """What ``fwd`` sends over its links, delivered at the other ends (and what those
        answer on request ports, for the network)."""
        out: list[tuple[Address, bytes]] = []
        todo = [(fwd, item) for item in fwd.take_peer_sends()]
        while todo:
            _src, (portal, source, data) = todo.pop(0)
            self.messages += 1
            other, there = self.ends[portal]
            assert other.receive_peer_message(there, source, lbmc.decode(data), 0.0)
            out.extend((addr, d) for _p, addr, d in other.take_sends())
            todo.extend((other, item) for item in other.take_peer_sends())
        return out


def _peer_pair() -> tuple[DroCore, DroCore]:
    """DRO1: endpoint A (the origin's TRD) and peer P1; DRO2: peer P2 and endpoint Y."""
    dro1 = DroCore(config([("A", 1, 1)], [("P1", 1, "initiator")]), node_id=1)
    dro2 = DroCore(config([("Y", 3, 1)], [("P2", 1, "acceptor")]), node_id=2)
    dro1.receive_portal_up("A", 0.0, address=("10.0.1.1", 5001))
    dro1.receive_portal_up("P1", 0.0, peer_node_id=2)
    dro2.receive_portal_up("P2", 0.0, peer_node_id=1)
    dro2.receive_portal_up("Y", 0.0, address=("10.0.3.2", 5004))
    dro1.receive_source("A", SourceAdvert(SK), 0.0)
    dro2.receive_source("P2", SourceAdvert(SK, None, 1, 1, 1), 0.0)
    return dro1, dro2


def test_late_join_crosses_a_peer_link() -> None:
    dro1, dro2 = _peer_pair()
    assert dro2.ingress_of(SK) == "P2" and dro2.is_peer("P2") and not dro2.is_peer("Y")
    dro1.recovery.receive_origin("A", SK, Origin(*ORIGIN, ORIGIN_TIDX, ORIGIN_TOPIC))
    assert not dro2.recovery.offers_late_join(SK)
    dro2.recovery.receive_peer_offer("P2", SK)  # DRO1's advertisement said late join
    assert dro2.recovery.offers_late_join(SK)
    tidx = dro2.recovery.proxy_created("Y", SK)
    assert tidx is not None
    svc = _origin(15)
    net = Net()
    net.ports[ORIGIN] = svc.handle
    for core, portal, addr in ((dro1, "A", ("10.0.1.1", 5001)), (dro2, "Y", ("10.0.3.2", 5004))):
        net.dro_portal(core.recovery, portal, addr, 0.0)
    link = Link(net, {"P2": (dro1.recovery, "P1"), "P1": (dro2.recovery, "P2")})
    r = Receiver(("10.0.3.2", 5004), tidx)
    net.ports[RECEIVER] = r.port
    r.rec.start_late_join(0.0)
    net.send(r.take())
    # the network first, then whatever crossed the links, until both are quiet
    while True:
        net.run()
        moved = [link.carry(core.recovery) for core in (dro2, dro1)]
        if not any(moved):
            break
        for items in moved:
            net.send(items)
    assert [(s, p) for s, p, _f in r.delivered] == [(i, b"m%d" % i) for i in range(15)]
    assert r.otids == {("10.0.3.2", 5004, tidx)}
    assert svc.stats.lji_requests == 1 and svc.stats.retransmissions == 15
    for core in (dro1, dro2):
        st = core.recovery.stats
        assert (st.lji_forwarded, st.lj_info_relayed, st.retrans_relayed) == (1, 1, 15)
        assert st.no_route == st.unknown_reply == 0 and core.recovery.pending == 0
    assert link.messages >= 2 + 1 + 15  # LJI_REQ, LJ_INFO, RXREQ message(s), 15 RETRANS


def test_a_peer_that_did_not_offer_late_join_gets_no_request() -> None:
    dro1, dro2 = _peer_pair()
    fwd = dro2.recovery
    tidx = fwd.proxy_created("Y", SK)  # (a proxy the test forces: no offer was heard)
    assert tidx is not None
    fwd.receive_request("Y", _rxreq(tidx, [1], RECEIVER), 0.0)
    assert fwd.stats.no_route == 1 and fwd.take_peer_sends() == []
    # over the link, a request for a source DRO1 has no origin of: dropped and counted
    fwd1 = dro1.recovery
    assert fwd1.receive_peer_message("P1", SK, _rxreq(0, [1], ("0.0.0.0", 0)), 0.0)
    assert fwd1.stats.no_route == 1 and fwd1.take_sends() == []
    # an answer nobody waits for is not taken
    assert not fwd1.receive_peer_message("P1", SK, lbmc.decode(_retrans(1)), 0.0)
    assert fwd1.stats.unknown_reply == 1
