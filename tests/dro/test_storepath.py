"""Receiver <-> Store traffic through the DROs (umcore.dro.storepath), sans-IO.

Two topologies: one DRO with two endpoint portals (TRD1: source and Store, TRD2: receiver), and
two DROs joined by a peer link (the bytes one DRO hands its link are fed to the other's
``receive_peer``).  Each checks that the relayed SRI names the DRO's portal, that the receiver's
messages reach the Store's own address with the reply address rewritten to the DRO's, and that
the Store's answers (registration, keepalive, retransmission) reach the receiver unchanged.
"""

from __future__ import annotations

from umcore.dro.events import SourceKey
from umcore.dro.storepath import FROM_STORE, TO_STORE, StorePath
from umcore.features.latejoin import make_otid
from umcore.store import compose
from umcore.wire import lbmc

SRC = SourceKey(b"o" * 32, "t")
STORE = ("10.1.0.9", 14567)  # the Store, in TRD1 (domain 1)
RCV = ("10.2.0.5", 15000)  # the receiver's request port, in TRD2
P1 = ("10.1.0.2", 16001)  # the DRO's request ports: portal "trd1" and "trd2"
P2 = ("10.2.0.2", 16002)
TIDX, TOPIDX, SRC_REG, RCV_REG = 7, 3, 0xABC, 0x55


def _path(portals: dict[str, tuple[tuple[str, int] | None, int | None]], ingress: str) -> StorePath:
    """A StorePath whose source comes in through ``ingress``; ``portals``: name -> (request
    port or None for a peer, domain id or None)."""
    return StorePath(
        lambda source: ingress if source == SRC else None,
        lambda name: portals[name][0],
        lambda name: portals[name][0] is None,
        lambda name: portals[name][1],
    )


def _sri(domain: int = 1) -> bytes:
    store = compose.SriStore(STORE, 0, SRC_REG, domain_id=domain)
    return compose.Sri(1, 0, 10, (store,)).encode()


def _preg(reg_id: int = 0) -> lbmc.LBMCMessage:
    return lbmc.decode(
        compose.ReceiverRegistration(SRC_REG, TIDX, TOPIDX, RCV, reg_id=reg_id).encode()
    )


def _answer(reg_id: int = RCV_REG) -> lbmc.LBMCMessage:
    return lbmc.decode(compose.RegistrationResponse(False, reg_id, TIDX, TOPIDX).encode())


def _decode(data: bytes) -> object:
    return compose.decode(lbmc.decode(data))


def test_one_dro_sri_names_the_portal_and_store_traffic_goes_both_ways() -> None:
    path = _path({"trd1": (P1, 1), "trd2": (P2, 2)}, "trd1")
    sri = _decode(path.rewrite_sri("trd2", SRC, TIDX, _sri()))
    assert isinstance(sri, compose.Sri)
    (st,) = sri.stores
    assert (st.address, st.domain_id, st.src_reg_id) == (P2, 1, SRC_REG)

    # PREG: to the Store's own address from portal trd1, answers to trd1's request port
    assert path.receive_local("trd2", _preg(), 0.0)
    ((portal, addr, data),) = path.take_sends()
    reg = _decode(data)
    assert (portal, addr) == ("trd1", STORE)
    assert isinstance(reg, compose.ReceiverRegistration)
    assert (reg.reply_to, reg.src_reg_id, reg.transport_idx, reg.topic_idx) == (
        P1, SRC_REG, TIDX, TOPIDX,
    )  # fmt: skip

    # the Store's answer goes back to the receiver, its RegID kept
    assert path.receive_local("trd1", _answer(), 0.1)
    ((portal, addr, data),) = path.take_sends()
    resp = _decode(data)
    assert (portal, addr) == ("trd2", RCV)
    assert isinstance(resp, compose.RegistrationResponse) and resp.reg_id == RCV_REG

    # a consumption ACK and a receiver keepalive (known by the receiver's RegID) to the Store
    ack = compose.ConsumptionAck(TIDX, SRC_REG, RCV_REG, 5).encode()
    assert path.receive_local("trd2", lbmc.decode(ack), 0.2)
    ka = compose.Keepalive(lbmc.KA_TYPE_RECEIVER, TIDX, TOPIDX, RCV_REG).encode()
    assert path.receive_local("trd2", lbmc.decode(ka), 0.2)
    assert [(p, a) for p, a, _ in path.take_sends()] == [("trd1", STORE), ("trd1", STORE)]

    # the Store's keepalive to the receiver
    ska = compose.Keepalive(lbmc.KA_TYPE_STORE, TIDX, TOPIDX, RCV_REG, True).encode()
    assert path.receive_local("trd1", lbmc.decode(ska), 0.3)
    assert [(p, a) for p, a, _ in path.take_sends()] == [("trd2", RCV)]

    # retransmission request and the Store's retransmission
    rx = compose.RetransmissionRequest((compose.RxReq(TIDX, SRC_REG, 4, RCV),)).encode()
    assert path.receive_local("trd2", lbmc.decode(rx), 0.4)
    ((portal, addr, data),) = path.take_sends()
    req = _decode(data)
    assert (portal, addr) == ("trd1", STORE)
    assert isinstance(req, compose.RetransmissionRequest) and req.requests[0].reply_to == P1
    otid = make_otid("10.1.0.7", 14000, TIDX)
    retrans = lbmc.LBMCMessage(lbmc.MSG_RETRANS, TOPIDX, 4, [lbmc.Otid(0, otid)], b"payload")
    assert path.receive_local("trd1", retrans, 0.5)
    ((portal, addr, data),) = path.take_sends()
    assert (portal, addr) == ("trd2", RCV)
    assert lbmc.decode(data).payload == b"payload"
    # answered once: the same retransmission again is not ours
    assert not path.receive_local("trd1", retrans, 0.6)
    assert path.stats.to_store == 4 and path.stats.to_receiver == 3


def test_store_in_the_receivers_trd_stays_direct_and_unknown_traffic_is_not_taken() -> None:
    path = _path({"trd1": (P1, 1), "trd2": (P2, 2)}, "trd1")
    sri = _decode(path.rewrite_sri("trd2", SRC, TIDX, _sri(domain=2)))
    assert isinstance(sri, compose.Sri) and sri.stores[0].address == STORE
    # no Store named at this portal for that RegID: not Store traffic for the DRO
    assert not path.receive_local("trd2", _preg(), 0.0)
    # an answer nobody waits for
    assert not path.receive_local("trd1", _answer(), 0.0)
    assert path.take_sends() == []


def test_no_route_to_the_source_drops_and_counts() -> None:
    path = StorePath(lambda s: None, lambda n: P2, lambda n: False, lambda n: 2)
    path.rewrite_sri("trd2", SRC, TIDX, _sri())
    assert path.receive_local("trd2", _preg(), 0.0)
    assert path.take_sends() == [] and path.stats.no_route == 1


def test_waiting_registrations_expire() -> None:
    path = _path({"trd1": (P1, 1), "trd2": (P2, 2)}, "trd1")
    path.rewrite_sri("trd2", SRC, TIDX, _sri())
    assert path.receive_local("trd2", _preg(), 0.0)
    path.take_sends()
    assert not path.receive_local("trd1", _answer(), 60.0)  # long after PENDING_LIFETIME_S


def test_two_dros_over_a_peer_link() -> None:
    # DRO2 faces the receiver (trd2) and reaches the source over its link "peer"; DRO1 has the
    # source in trd1 and the link "peer" back to DRO2.
    dro2 = _path({"trd2": (P2, 2), "peer": (None, None)}, "peer")
    dro1 = _path({"trd1": (P1, 1), "peer": (None, None)}, "trd1")
    sri = _decode(dro2.rewrite_sri("trd2", SRC, TIDX, _sri()))
    assert isinstance(sri, compose.Sri) and sri.stores[0].address == P2

    assert dro2.receive_local("trd2", _preg(), 0.0)
    ((link, source, body),) = dro2.take_peer_sends()
    assert (link, source) == ("peer", SRC)
    msg = lbmc.decode(body)
    dest = msg.find(lbmc.Destination)
    assert dest is not None and dest.flags == TO_STORE and dest.port == STORE[1]
    assert dest.domain_id == 1
    pr = msg.find(lbmc.UmePreg)
    assert pr is not None and (pr.resp_ip, pr.resp_port) == (0, 0)  # DRO1 puts its own

    assert dro1.receive_peer("peer", SRC, msg, 0.0)
    ((portal, addr, data),) = dro1.take_sends()
    reg = _decode(data)
    assert (portal, addr) == ("trd1", STORE)
    assert isinstance(reg, compose.ReceiverRegistration) and reg.reply_to == P1

    assert dro1.receive_local("trd1", _answer(), 0.1)
    ((link, source, body),) = dro1.take_peer_sends()
    back = lbmc.decode(body)
    bdest = back.find(lbmc.Destination)
    assert bdest is not None and bdest.flags == FROM_STORE
    assert dro2.receive_peer("peer", SRC, back, 0.1)
    ((portal, addr, data),) = dro2.take_sends()
    assert (portal, addr) == ("trd2", RCV)
    resp = _decode(data)  # the Store's answer as it sent it: no DESTINATION left
    assert isinstance(resp, compose.RegistrationResponse) and resp.reg_id == RCV_REG
    assert lbmc.decode(data).find(lbmc.Destination) is None

    # a receiver keepalive crosses too (DRO2 learned the receiver's Store from the answer)
    ka = compose.ReceiverKeepalive(RCV_REG).encode()
    assert dro2.receive_local("trd2", lbmc.decode(ka), 0.2)
    ((_link, _source, body),) = dro2.take_peer_sends()
    assert dro1.receive_peer("peer", SRC, lbmc.decode(body), 0.2)
    assert [(p, a) for p, a, _ in dro1.take_sends()] == [("trd1", STORE)]

    # a late-join/OTR message on the same channel (no DESTINATION) is not the Store path's
    lji = lbmc.LBMCMessage(lbmc.MSG_CONTROL, headers=[lbmc.UmeRxReq(0, 0, 0, 0, 0, 1, 0, 0, 0)])
    assert not dro1.receive_peer("peer", SRC, lji, 0.3)
