"""Receiver <-> Store traffic through the DROs: the Store's address in a relayed SRI is the DRO's.

Theory of operation
-------------------
A persistent receiver registers with, ACKs to, keeps alive and asks retransmissions of the
Stores its source's SRI names, at the addresses the SRI gives (seed 002: "Domain ID, IP address,
TCP port" of each Store).  Across DROs that address is in another TRD; UM routes "all needed
control and retransmission channels" through the DROs (notes A7) and names the Store's Topic
Resolution Domain in the SRI ("If you do not use the DRO, the DomainID is zero. Otherwise, the
DomainID represents the Topic Resolution Domain where the Store resides", seed 003 8).  pyum does
it so that the receiver's client library needs nothing new [inferred: UM does not document how
its DRO does it]:

* **SRI** (:meth:`StorePath.rewrite_sri`, the egress portal: the proxy source's TRD).  Each
  Store of another TRD (its Domain ID is not the portal's; 0, "no DRO", counts as the source's
  TRD) is named with the *portal's request port* as its address; Domain ID, Store index, the
  source's RegID there and the versions are the Store's.  The portal remembers which Store that
  was, by (portal, the source's transport index, the source's RegID at the Store): what every
  receiver-to-Store message names (PREG/deregistration: ``src_reg_id``; consumption ACK:
  ``id_2``; RXREQ: ``id_2``).  A Store in the portal's own TRD keeps its address (direct).
* **Receiver -> Store** (:meth:`StorePath.receive_local` at the portal's request port, or
  :meth:`StorePath.receive_peer` from a link).  The message goes, as the source's frames come,
  towards the source: the core's active ingress for it (``ingress_of``).  From an endpoint ingress
  it is written to the Store's own address from that portal's request port, with the reply
  addresses it carries (PREG ``resp_ip:port``, RXREQ ``rx_ip:port``) rewritten to that request
  port; over a peer link it travels as the recovery messages do (a CONTROL message OTID +
  TOPICNAME of the source carrying it) with those addresses zeroed and a DESTINATION header
  naming the Store (``flags`` :data:`TO_STORE`, its Domain ID, IP and port).  Receiver keepalives
  name only the receiver's RegID: the portal learned which Store it has from the registration
  answer it relayed.
* **Store -> receiver** (answers at the ingress portal's request port, or from a link with
  DESTINATION ``flags`` :data:`FROM_STORE`).  Each DRO remembers, per hop, where an answer goes
  back: a registration/deregistration answer by (ingress, transport index, topic index, Store
  index) -- the oldest waiting PREG that asked for that RegID or for a new one; Store
  keepalives by (ingress, transport index, receiver RegID) once registered; a retransmission by
  (ingress, the OTID's transport index, sequence number) of the RXREQs.  The answer goes back
  unchanged (the receiver knows the source by the origin's identity: its RegIDs, indices and
  OTID are the origin's) to the receiver's address, or over the link it came from.

So RegIDs are kept end to end, and the Store sees the receiver at the ingress portal's address.

Bounds: waiting registrations and retransmission requests live :data:`PENDING_LIFETIME_S` and
are at most :data:`MAX_PENDING`; Store routes and registrations at most :data:`MAX_ROUTES` each
(the oldest forgotten first, counted ``evicted``).  A message no entry matches is not this
module's (False: the portal's context or the other forwarders may take it); one without a route
to its source is dropped and counted (``no_route``); the receiver's own retries recover both.
Limitation [inferred]: two receivers registering for the first time at the same moment with the
same Store for sources with the same transport and topic index, through the same DRO, cannot be
told apart by the answer (the wire has no field for it; the direct path has the same limit).
"""

from __future__ import annotations

import dataclasses
from collections import OrderedDict
from collections.abc import Callable
from typing import Any, NamedTuple, TypeVar

from umcore.dro.events import SourceKey
from umcore.errors import RemoteProtocolError
from umcore.features.latejoin import parse_otid
from umcore.store import compose
from umcore.wire import lbmc

__all__ = [
    "FROM_STORE",
    "MAX_PENDING",
    "MAX_ROUTES",
    "PENDING_LIFETIME_S",
    "TO_STORE",
    "StorePath",
    "StorePathStats",
]

Address = tuple[str, int]
_K = TypeVar("_K", bound=tuple[Any, ...])
_V = TypeVar("_V")

# [inferred] DESTINATION ``flags`` of Store traffic on a peer link: towards the Store named by
# the header, or an answer of a Store going back.
TO_STORE = 0x1
FROM_STORE = 0x2
# Seconds a relayed PREG or RXREQ waits for its answer: the receiver asks again every
# ume_registration_interval (0.5 s) / retransmit_request_interval (0.5 s), each time remembered
# afresh; 10 s (as umcore.dro.recovery) covers any WAN round trip.
PENDING_LIFETIME_S = 10.0
# Waiting PREGs and RXREQ sequence numbers at once: hundreds of recovering receivers; beyond it
# the oldest is forgotten (its answer dropped and counted, the receiver asks again).
MAX_PENDING = 65536
# Store routes (one per Store per persistent source per portal) and relayed registrations:
# far more than a DRO proxies; beyond it the oldest is forgotten and counted.
MAX_ROUTES = 65536


class _Route(NamedTuple):
    """Where a receiver's message for one Store goes: the source and the Store."""

    source: SourceKey
    store: Address
    domain: int


class _Back(NamedTuple):
    """Where a Store's answer goes: a portal and the receiver's address (None: over that
    portal's peer link), and the route it answers for."""

    portal: str
    reply_to: Address | None
    route: _Route


@dataclasses.dataclass(slots=True)
class _RegWait:
    back: _Back
    reg_id: int  # the RegID the PREG asked for (0: a new one)
    expires: float


@dataclasses.dataclass(slots=True)
class StorePathStats:
    """Counters of the Store path: messages towards Stores and back, dropped for no route,
    answers nobody waited for, entries forgotten for the bounds."""

    to_store: int = 0
    to_receiver: int = 0
    no_route: int = 0
    unknown_answer: int = 0
    evicted: int = 0
    sris_rewritten: int = 0


def _drop(table: OrderedDict[_K, _V], portal: str) -> None:
    for key in [k for k in table if k[0] == portal]:
        del table[key]


class StorePath:
    """Receiver <-> Store relaying of one DRO (module docstring).

    ``ingress_of(source)``: the portal the core takes that source's frames from;
    ``address_of(portal)``: an up endpoint portal's request port (None: a peer or down);
    ``is_peer(portal)``; ``domain_of(portal)``: an endpoint portal's Domain ID (None: a peer)."""

    def __init__(
        self,
        ingress_of: Callable[[SourceKey], str | None],
        address_of: Callable[[str], Address | None],
        is_peer: Callable[[str], bool],
        domain_of: Callable[[str], int | None],
    ) -> None:
        self._ingress_of = ingress_of
        self._address_of = address_of
        self._is_peer = is_peer
        self._domain_of = domain_of
        # egress: (portal, transport index, source RegID at the Store) -> the Store
        self._stores: OrderedDict[tuple[str, int, int], _Route] = OrderedDict()
        # egress: (portal, receiver RegID) -> the Store (for receiver keepalives)
        self._rcv: OrderedDict[tuple[str, int], _Route] = OrderedDict()
        # ingress side: (ingress, transport idx, topic idx, Store index) -> waiting PREGs
        self._reg: OrderedDict[tuple[str, int, int, int], list[_RegWait]] = OrderedDict()
        # ingress side: (ingress, transport idx, receiver RegID) -> where its answers go
        self._est: OrderedDict[tuple[str, int, int], _Back] = OrderedDict()
        # ingress side: (ingress, transport idx, sqn) -> (back, expires) of the RXREQs
        self._rx: OrderedDict[tuple[str, int, int], dict[_Back, float]] = OrderedDict()
        self._out: list[tuple[str, Address, bytes]] = []
        self._peer_out: list[tuple[str, SourceKey, bytes]] = []
        self.stats = StorePathStats()

    # ------------------------------------------------------------------ SRIs (egress)
    def rewrite_sri(
        self, portal: str, source: SourceKey, transport_idx: int, frame: bytes
    ) -> bytes:
        """The SRI ``frame`` of ``source`` as ``portal``'s TRD gets it: Stores of other TRDs at
        the portal's request port (unchanged when the portal has no address or the SRI does
        not decode: the receiver then tries the Store directly)."""
        own = self._address_of(portal)
        mine = self._domain_of(portal)
        if own is None:
            return frame
        try:
            sri = compose.decode(lbmc.decode(frame))
        except (RemoteProtocolError, ValueError):
            return frame
        if not isinstance(sri, compose.Sri):
            return frame
        stores = []
        for st in sri.stores:
            if mine is not None and st.domain_id == mine and st.domain_id != 0:
                stores.append(st)  # a Store in this TRD: direct
                continue
            self._put(self._stores, (portal, transport_idx, st.src_reg_id),
                      _Route(source, st.address, st.domain_id))  # fmt: skip
            stores.append(dataclasses.replace(st, address=own))
        self.stats.sris_rewritten += 1
        return dataclasses.replace(sri, stores=tuple(stores)).encode()

    def _put(self, table: OrderedDict[_K, _V], key: _K, value: _V) -> None:
        table[key] = value
        table.move_to_end(key)
        if len(table) > MAX_ROUTES:
            table.popitem(last=False)
            self.stats.evicted += 1

    # ------------------------------------------------------------------ input
    def receive_local(self, portal: str, msg: lbmc.LBMCMessage, now: float) -> bool:
        """A message at endpoint ``portal``'s request port: a receiver's to a Store this portal
        named, or a Store's answer to one this DRO relayed (True: taken)."""
        self._expire(now)
        if msg.msg_type == lbmc.MSG_RETRANS:
            return self._retrans(portal, msg)
        try:
            comp = compose.decode(msg)
        except RemoteProtocolError:
            return False
        if comp is None:
            return False
        route = self._receiver_route(portal, comp)
        if route is not None:
            self._forward((portal, None), route, comp, msg, now)
            return True
        return self._answer(portal, comp, msg)

    def receive_peer(
        self, portal: str, source: SourceKey, msg: lbmc.LBMCMessage, now: float
    ) -> bool:
        """A message of ``source`` from peer portal ``portal``'s link: Store traffic when it
        carries a DESTINATION header with :data:`TO_STORE` or :data:`FROM_STORE` (True)."""
        dest = msg.find(lbmc.Destination)
        if dest is None or dest.flags not in (TO_STORE, FROM_STORE):
            return False
        self._expire(now)
        headers = [h for h in msg.headers if type(h) is not lbmc.Destination]
        inner = lbmc.LBMCMessage(msg.msg_type, msg.tidx, msg.sqn, headers, msg.payload)
        if dest.flags == FROM_STORE:
            if inner.msg_type == lbmc.MSG_RETRANS:
                if not self._retrans(portal, inner):
                    self.stats.unknown_answer += 1
                return True
            try:
                comp = compose.decode(inner)
            except RemoteProtocolError:
                comp = None
            if comp is None or not self._answer(portal, comp, inner):
                self.stats.unknown_answer += 1
            return True
        try:
            comp = compose.decode(inner)
        except RemoteProtocolError:
            comp = None
        if comp is None:
            self.stats.no_route += 1
            return True
        route = _Route(source, (lbmc.ip4_to_str(dest.ipaddr), dest.port), dest.domain_id)
        self._forward((portal, source), route, comp, inner, now)
        return True

    def _receiver_route(self, portal: str, comp: object) -> _Route | None:
        """The Store a receiver's message at ``portal`` is for (None: not such a message)."""
        stores = self._stores
        if isinstance(comp, compose.ReceiverRegistration):
            return stores.get((portal, comp.transport_idx, comp.src_reg_id))
        if isinstance(comp, compose.Deregistration) and not comp.source:
            return stores.get((portal, comp.transport_idx, comp.src_reg_id))
        if isinstance(comp, compose.ConsumptionAck):
            return stores.get((portal, comp.transport_idx, comp.src_reg_id))
        if isinstance(comp, compose.RetransmissionRequest):
            r = comp.requests[0]
            return stores.get((portal, r.transport_idx, r.id_2))
        if isinstance(comp, compose.Keepalive) and comp.role == lbmc.KA_TYPE_RECEIVER:
            return self._rcv.get((portal, comp.reg_id))
        if isinstance(comp, compose.ReceiverKeepalive):
            return self._rcv.get((portal, comp.rcv_reg_id))
        return None

    # ------------------------------------------------------------------ towards the Store
    def _forward(
        self,
        back_of: tuple[str, SourceKey | None],
        route: _Route,
        comp: object,
        msg: lbmc.LBMCMessage,
        now: float,
    ) -> None:
        """``msg`` towards ``route``'s Store, one hop; its answers go back to ``back_of``'s
        portal (the receiver's address from the message, or over that peer link)."""
        back_portal, via_peer = back_of
        ingress = self._ingress_of(route.source)
        if ingress is None or ingress == back_portal:
            self.stats.no_route += 1
            return
        peer = self._is_peer(ingress)
        own = None if peer else self._address_of(ingress)
        if not peer and own is None:
            self.stats.no_route += 1
            return
        reply = (0, 0) if own is None else (lbmc.ip4_from_str(own[0]), own[1])
        headers: list[lbmc.Header] = []
        asked: Address | None = None
        expires = now + PENDING_LIFETIME_S
        for h in msg.headers:
            if type(h) is lbmc.UmePreg:
                asked = (lbmc.ip4_to_str(h.resp_ip), h.resp_port)
                h = dataclasses.replace(h, resp_ip=reply[0], resp_port=reply[1])
            elif type(h) is lbmc.UmeRxReq:
                asked = (lbmc.ip4_to_str(h.rx_ip), h.rx_port)
                h = dataclasses.replace(h, rx_ip=reply[0], rx_port=reply[1])
            headers.append(h)
        back = _Back(back_portal, None if via_peer is not None else asked, route)
        if isinstance(comp, (compose.ReceiverRegistration, compose.Deregistration)):
            key = (ingress, comp.transport_idx, comp.topic_idx, comp.store_index)
            waits = self._reg.get(key)
            if waits is None:
                self._make_room()
                waits = self._reg[key] = []
            waits[:] = [w for w in waits if w.back != back or w.reg_id != comp.reg_id]
            waits.append(_RegWait(back, comp.reg_id, expires))
            self._reg.move_to_end(key)
        elif isinstance(comp, compose.RetransmissionRequest):
            for r in comp.requests:
                rk = (ingress, r.transport_idx, r.seqnum)
                backs = self._rx.get(rk)
                if backs is None:
                    self._make_room()
                    backs = self._rx[rk] = {}
                backs[back] = expires
                self._rx.move_to_end(rk)
        if peer:
            ip, port = route.store
            headers.append(lbmc.Destination(TO_STORE, route.domain, lbmc.ip4_from_str(ip), port))
            body = lbmc.encode(lbmc.LBMCMessage(msg.msg_type, msg.tidx, msg.sqn, headers,
                                                msg.payload))  # fmt: skip
            self._peer_out.append((ingress, route.source, body))
        else:
            body = lbmc.encode(lbmc.LBMCMessage(msg.msg_type, msg.tidx, msg.sqn, headers,
                                                msg.payload))  # fmt: skip
            self._out.append((ingress, route.store, body))
        self.stats.to_store += 1

    # ------------------------------------------------------------------ back from the Store
    def _answer(self, ingress: str, comp: object, msg: lbmc.LBMCMessage) -> bool:
        if isinstance(comp, compose.RegistrationResponse) and not comp.source:
            key = (ingress, comp.transport_idx, comp.topic_idx, comp.store_index)
            waits = self._reg.get(key)
            if not waits:
                return False
            hit = next((w for w in waits if w.reg_id == comp.reg_id), None)
            if hit is None:
                hit = next((w for w in waits if w.reg_id == 0), None)
            if hit is None:
                return False
            waits.remove(hit)
            if not waits:
                del self._reg[key]
            back = hit.back
            est = (ingress, comp.transport_idx, comp.reg_id)
            if comp.deregistered or comp.error is not None:
                self._est.pop(est, None)
            else:
                self._put(self._est, est, back)
                if back.reply_to is not None:
                    self._put(self._rcv, (back.portal, comp.reg_id), back.route)
            self._back(back, msg)
            return True
        if isinstance(comp, compose.Keepalive) and comp.role == lbmc.KA_TYPE_STORE:
            back2 = self._est.get((ingress, comp.transport_idx, comp.reg_id))
            if back2 is None:
                return False
            self._back(back2, msg)
            return True
        return False

    def _retrans(self, ingress: str, msg: lbmc.LBMCMessage) -> bool:
        otid = msg.find(lbmc.Otid)
        ident = parse_otid(otid.otid) if otid is not None else None
        if ident is None:
            return False
        backs = self._rx.pop((ingress, ident[2], msg.sqn), None)
        if backs is None:
            return False
        for back in backs:
            self._back(back, msg)
        return True

    def _back(self, back: _Back, msg: lbmc.LBMCMessage) -> None:
        if back.reply_to is None:
            headers = [*msg.headers, lbmc.Destination(FROM_STORE)]
            body = lbmc.encode(lbmc.LBMCMessage(msg.msg_type, msg.tidx, msg.sqn, headers,
                                                msg.payload))  # fmt: skip
            self._peer_out.append((back.portal, back.route.source, body))
        else:
            self._out.append((back.portal, back.reply_to, lbmc.encode(msg)))
        self.stats.to_receiver += 1

    # ------------------------------------------------------------------ bounds
    def _make_room(self) -> None:
        while len(self._reg) + len(self._rx) >= MAX_PENDING:
            self.stats.evicted += 1
            if self._reg and (not self._rx or len(self._reg) >= len(self._rx)):
                self._reg.popitem(last=False)
            else:
                self._rx.popitem(last=False)

    def _expire(self, now: float) -> None:
        reg = self._reg
        while reg:
            key, waits = next(iter(reg.items()))
            if any(w.expires > now for w in waits):
                break
            del reg[key]
        rx = self._rx
        while rx:
            rk, backs = next(iter(rx.items()))
            if any(t > now for t in backs.values()):
                break
            del rx[rk]

    def portal_down(self, portal: str) -> None:
        """Everything routed through ``portal`` goes (its receivers register again)."""
        _drop(self._stores, portal)
        _drop(self._rcv, portal)
        _drop(self._reg, portal)
        _drop(self._est, portal)
        _drop(self._rx, portal)

    # ------------------------------------------------------------------ output
    def take_sends(self) -> list[tuple[str, Address, bytes]]:
        """``(portal, address, message)``: write it to ``address`` from that portal's request
        port."""
        out, self._out = self._out, []
        return out

    def take_peer_sends(self) -> list[tuple[str, SourceKey, bytes]]:
        """``(peer portal, source, message)``: send it over that portal's link."""
        out, self._peer_out = self._peer_out, []
        return out
