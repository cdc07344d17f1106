"""UIMs, requests and responses across the DRO (seed 003 7.3; notes A7; umcore.engine.dro 4, 5).

Theory of operation
-------------------
An application sends a UIM to another domain (``TCP:D:ip:port``) to the request port of the DRO
portal whose remote domain route names D, with a DESTINATION header (domain D, the destination
context's request port, ``hops_taken``, the originator's domain and request port).  A UIM to a
proxy source (``SOURCE:`` + its source string) carries DESTINATION with the originating domain
and no address, plus an OTID header naming the originating source.  Each portal's source context
hands such traffic to :class:`UimForwarder` (``Engine.uim_interceptor``) instead of delivering
it, and the forwarder sends it on, hop by hop, from the source context of the egress portal:

* **Egress.**  The portal whose ``<domain-id>`` is D delivers: to DESTINATION's ``ipaddr:port``,
  or for a source UIM to the request port the origin's TIR named (its EXFUNC option, learned by
  that portal, :attr:`EndpointPortal.source_requests`).  Otherwise the router's portal towards D
  (:meth:`Router.toward`) sends it to the next DRO's portal in that TRD, the one whose remote
  domain route record lists D (:meth:`Router.next_hop`); while the route tree does not know D
  yet (a recalculation waits its back-off), any portal whose TRD has such a record will do.  DESTINATION travels with
  ``hops_taken`` + 1; STREAM and the rest are kept (the receiver reports the originator as
  ``TCP:orig_domain:orig_ip:orig_port``, so answering it goes back the same way).
* **Requests.**  The REQUEST header names where responses go: the DRO rewrites it to the egress
  portal's own request port and a request index of its own, remembering the original
  (:data:`REQUEST_LIFETIME_S`, at most :data:`MAX_PENDING_REQUESTS`).  A response arriving there
  for that index gets the original index back and goes to the original address from the portal
  the request came in through; across two DROs each rewrites, so responses retrace the path.
* **Peer links.**  When the route to D leaves by a peer portal (a link to another DRO), the
  message crosses the link (:meth:`PeerLink.send_immediate <umcore.dro.peer.PeerLink.send_immediate>`,
  with DESTINATION ``hops_taken`` + 1 and REQUEST rewritten as above, the address zero: the
  responses come back over the link under our index) and the other DRO takes it as if it
  had arrived at a portal of its own (:meth:`UimForwarder.receive_peer`): same egress rules,
  same rewriting, its responses sent back over the link to us.  A message that came in over
  a link never goes back over it.
* **Refused.**  No route to D, a destination in the TRD the UIM came from, a source UIM for an
  OTID no portal knows, more than ``max-hop-count`` DROs crossed, a full connection queue: the
  message is dropped and counted (UM: "UIMs and responses can be dropped by an overloaded DRO;
  applications need timeouts and retries").  A UIM without DESTINATION addressed to the DRO's
  own port is not for forwarding (nothing in the DRO receives it): counted.

Counters per portal (:class:`UimPortalStats`, :meth:`UimForwarder.stats`; the ``unicast_*``
fields of ``DROMonMsg``'s endpoint portal statistics): at the portal a UIM, request or response
arrived at, ``rcvd`` (and ``rcvd_no_stream``: without a STREAM header) and ``dropped_no_route``
(no route to its domain, no pending request for a response, no way back); at the portal it
leaves by, ``forwarded`` (routed there), ``sent`` (handed to the connection or the link) and
``dropped_error`` (the send failed); over a peer link, ``dropped_not_operational`` (the link
was down) and ``dropped_would_block`` (its ``max-queue`` was full) instead.  Bytes are the
message's application payload.  A peer portal's counters are the ``unicast_*`` fields of its
``DROMonMsg`` peer statistics.

[inferred] DESTINATION handling beyond what seed 003 and the client contract say (the OTID header
for source UIMs, the rewritten request index) is pyum's; no interoperability with Informatica's
DRO is claimed for it.
"""

from __future__ import annotations

import dataclasses
import logging
import struct
from collections import OrderedDict
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Protocol

from umcore.dro.peer import ImmediateSend
from umcore.errors import UMError
from umcore.features import immediate as im
from umcore.wire import lbmc

if TYPE_CHECKING:
    from daemons.tnwgd.portal import EndpointPortal
    from umcore.dro import DroCore

__all__ = [
    "MAX_PENDING_REQUESTS",
    "REQUEST_LIFETIME_S",
    "ImmediatePeer",
    "UimForwarder",
    "UimPortalStats",
]

log = logging.getLogger("tnwgd")

# How long a rewritten request waits for its responses: UM's requests have no fixed lifetime
# (the requester closes them); responses after this are dropped and counted.  A minute covers
# any request/response exchange meant to cross a WAN; the bound keeps the table small.
REQUEST_LIFETIME_S = 60.0
# Rewritten requests remembered at once; beyond this the oldest is forgotten (its late
# responses are counted as unknown): a flood of requests cannot grow the DRO without bound.
MAX_PENDING_REQUESTS = 65536
_U32 = struct.Struct("!I")
# Where a request that left over a peer link names its responses: nowhere (the other DRO sends
# them back over the link, under our request index).
_NO_ADDRESS = ("0.0.0.0", 0)
_UNICAST_KINDS = frozenset({im.KIND_UIM, im.KIND_REQUEST, im.KIND_RESPONSE})


class ImmediatePeer(Protocol):
    """What the forwarders need of a peer portal (:class:`daemons.tnwgd.peerportal.PeerPortal`)."""

    @property
    def name(self) -> str: ...
    @property
    def up(self) -> bool: ...
    def send_immediate(self, message: lbmc.LBMCMessage, *, multicast: bool) -> ImmediateSend: ...


@dataclasses.dataclass(slots=True)
class _Pending:
    back: str  # the portal the request came in through (responses leave from there)
    address: tuple[str, int]  # the requester's (or previous DRO's) request port
    qidx: int  # its request index
    expires: float


class UimPortalStats:
    """One portal's UIM counters (see the module docstring), messages and payload bytes."""

    __slots__ = (
        "bytes_dropped_error",
        "bytes_dropped_no_route",
        "bytes_dropped_not_operational",
        "bytes_dropped_would_block",
        "bytes_forwarded",
        "bytes_rcvd",
        "bytes_rcvd_no_stream",
        "bytes_sent",
        "dropped_error",
        "dropped_no_route",
        "dropped_not_operational",
        "dropped_would_block",
        "forwarded",
        "rcvd",
        "rcvd_no_stream",
        "sent",
    )

    def __init__(self) -> None:
        self.rcvd = self.bytes_rcvd = 0
        self.rcvd_no_stream = self.bytes_rcvd_no_stream = 0
        self.dropped_no_route = self.bytes_dropped_no_route = 0
        self.forwarded = self.bytes_forwarded = 0
        self.sent = self.bytes_sent = 0
        self.dropped_error = self.bytes_dropped_error = 0
        self.dropped_not_operational = self.bytes_dropped_not_operational = 0  # peer link down
        self.dropped_would_block = self.bytes_dropped_would_block = 0  # peer link full


class UimForwarder:
    """Forwards UIMs, requests and responses between the portals (see the module docstring).
    Counters (cumulative): ``forwarded``, ``responses_forwarded``, ``no_route``,
    ``not_for_dro``, ``unknown_response``, ``send_failed``, ``too_many_hops``."""

    def __init__(
        self,
        core: DroCore,
        portals: dict[str, EndpointPortal],
        now: Callable[[], float],
        peers: Mapping[str, ImmediatePeer] | None = None,
    ) -> None:
        """``portals``: the endpoint portals; ``peers``: the peer portals (links to DROs)."""
        self.core = core
        self.now = now
        self.portals = portals
        self.peers: Mapping[str, ImmediatePeer] = peers if peers is not None else {}
        self._pending: OrderedDict[tuple[str, int], _Pending] = OrderedDict()
        self._next_qidx = 1
        self.forwarded = 0
        self.responses_forwarded = 0
        self.no_route = 0
        self.not_for_dro = 0
        self.unknown_response = 0
        self.send_failed = 0
        self.too_many_hops = 0
        self._stats = {name: UimPortalStats() for name in (*portals, *self.peers)}

    def stats(self, portal: str) -> UimPortalStats:
        """``portal``'s UIM counters (a fresh zero set for a portal that is not an endpoint)."""
        st = self._stats.get(portal)
        if st is None:
            st = self._stats[portal] = UimPortalStats()
        return st

    def attach(self, portal: EndpointPortal) -> None:
        """Take the UIM traffic of ``portal``'s source context (call once it started)."""
        if portal.src is None:
            return
        name = portal.name

        def intercept(msg: lbmc.LBMCMessage, peer_ip: str, kind: str) -> bool:
            return self.receive(name, msg, kind)

        portal.src.uim_interceptor = intercept

    # ------------------------------------------------------------------ input
    def receive_peer(self, peer: str, msg: lbmc.LBMCMessage) -> None:
        """A UIM, request or response the DRO at the other end of peer portal ``peer`` sent
        over the link: forwarded as one arriving at a portal of ours.  Anything else (not an
        immediate message a DRO forwards) is counted in ``not_for_dro``."""
        kind = im.classify(msg)
        if kind not in _UNICAST_KINDS:
            self.not_for_dro += 1
            return
        self.receive(peer, msg, kind)

    def receive(self, ingress: str, msg: lbmc.LBMCMessage, kind: str) -> bool:
        """A UIM (``kind`` of :mod:`umcore.features.immediate`) at portal ``ingress``'s request
        port; True: taken (forwarded or dropped and counted)."""
        now = self.now()
        st = self.stats(ingress)
        size = len(msg.payload)
        st.rcvd += 1
        st.bytes_rcvd += size
        if msg.find(lbmc.Stream) is None:
            st.rcvd_no_stream += 1
            st.bytes_rcvd_no_stream += size
        if kind == im.KIND_RESPONSE:
            return self._response(ingress, msg, now)
        dest = msg.find(lbmc.Destination)
        if dest is None:
            self.not_for_dro += 1
            return True
        if dest.hops_taken + 1 > self.core.router.max_hop_count:
            self.too_many_hops += 1
            return True
        hop = self._egress(ingress, msg, dest)
        if hop is None:
            self.no_route += 1
            st.dropped_no_route += 1
            st.bytes_dropped_no_route += size
            return True
        egress, addr = hop
        headers: list[lbmc.Header] = []
        for h in msg.headers:
            if type(h) is lbmc.Destination:
                h = dataclasses.replace(dest, hops_taken=dest.hops_taken + 1)
            elif type(h) is lbmc.Request:
                h = self.rewrite_request(ingress, egress, h, now)
            headers.append(h)
        out = lbmc.LBMCMessage(msg.msg_type, msg.tidx, msg.sqn, headers, msg.payload)
        if self._send(egress, addr, out):
            self.forwarded += 1
        return True

    # ------------------------------------------------------------------ routing
    def _egress(
        self, ingress: str, msg: lbmc.LBMCMessage, dest: lbmc.Destination
    ) -> tuple[str, tuple[str, int] | None] | None:
        """The portal the message leaves by and the address it goes to there (None: over
        that peer portal's link), or None: no route."""
        domain = dest.domain_id
        for p in self.portals.values():
            if p.domain_id == domain and p.up:
                if p.name == ingress:
                    return None  # addressed to the TRD it came from: not ours to loop back
                if dest.ipaddr:
                    return p.name, (lbmc.ip4_to_str(dest.ipaddr), dest.port)
                otid = msg.find(lbmc.Otid)  # a UIM to a source (umcore.engine.dro 5)
                addr = p.source_requests.get(bytes(otid.otid)) if otid is not None else None
                return None if addr is None else (p.name, addr)
        router = self.core.router
        toward = router.toward(domain)
        peer = self.peers.get(toward) if toward is not None else None
        if peer is not None:  # the route leaves by a link to another DRO
            if toward == ingress or not peer.up:
                return None  # never back over the link it came by
            return peer.name, None
        if toward is not None:
            candidates = [self.portals[toward]] if toward in self.portals else []
        else:  # not in the route tree (yet: recalculation waits its back-off): any portal
            candidates = list(self.portals.values())  # whose TRD has a route record for it
        for via in candidates:
            if not via.up or via.name == ingress or via.domain_id is None:
                continue
            nxt = router.next_hop(via.domain_id, domain)
            if nxt is not None:
                ip, port = nxt
                return via.name, (lbmc.ip4_to_str(ip), port)
        return None

    def rewrite_request(
        self, ingress: str, egress: str, req: lbmc.Request, now: float
    ) -> lbmc.Request:
        """Responses to this request (a UIM's or a MIM's, daemons.tnwgd.mim) come to portal
        ``egress``'s request port (a peer portal: back over its link, the address zero),
        under an index of ours; they go back to the original requester from ``ingress`` (a
        peer portal: over its link, under the other DRO's index)."""
        self._expire(now)
        if len(self._pending) >= MAX_PENDING_REQUESTS:
            self._pending.popitem(last=False)
        qidx = self._next_qidx
        self._next_qidx = qidx % 0xFFFFFFFF + 1
        self._pending[(egress, qidx)] = _Pending(
            ingress, (lbmc.ip4_to_str(req.ipaddr), req.port), req.qidx, now + REQUEST_LIFETIME_S
        )
        ep = self.portals.get(egress)
        ip, port = ep.request_address() if ep is not None else _NO_ADDRESS
        return dataclasses.replace(req, qidx=qidx, port=port, ipaddr=lbmc.ip4_from_str(ip))

    def _response(self, ingress: str, msg: lbmc.LBMCMessage, now: float) -> bool:
        qidx = im.response_index(msg)
        self._expire(now)
        entry = self._pending.get((ingress, qidx))
        st = self.stats(ingress)
        if entry is None:
            self.unknown_response += 1
            st.dropped_no_route += 1
            st.bytes_dropped_no_route += len(msg.payload)
            return True
        back = self.portals.get(entry.back)
        peer = self.peers.get(entry.back)
        if (back is None or not back.up) and (peer is None or not peer.up):
            self.no_route += 1
            st.dropped_no_route += 1
            st.bytes_dropped_no_route += len(msg.payload)
            return True
        headers: list[lbmc.Header] = []
        for h in msg.headers:
            if type(h) is lbmc.AppHeader and h.code == im.RESPONSE_APPHDR_CODE:
                h = dataclasses.replace(h, data=_U32.pack(entry.qidx) + h.data[4:])
            headers.append(h)
        out = lbmc.LBMCMessage(msg.msg_type, msg.tidx, msg.sqn, headers, msg.payload)
        if self._send(entry.back, None if peer is not None else entry.address, out):
            self.responses_forwarded += 1
        return True

    def _expire(self, now: float) -> None:
        pending = self._pending
        while pending:
            key, first = next(iter(pending.items()))
            if first.expires > now:
                return
            del pending[key]

    def _send(self, name: str, addr: tuple[str, int] | None, msg: lbmc.LBMCMessage) -> bool:
        """``msg`` out of portal ``name``: to ``addr`` from its request port, or (``addr``
        None) over the peer portal's link."""
        st = self.stats(name)
        size = len(msg.payload)
        st.forwarded += 1
        st.bytes_forwarded += size
        peer = self.peers.get(name)
        if peer is not None:
            result = peer.send_immediate(msg, multicast=False)
            if result is ImmediateSend.SENT:
                st.sent += 1
                st.bytes_sent += size
                return True
            self.send_failed += 1
            if result is ImmediateSend.NOT_OPERATIONAL:
                st.dropped_not_operational += 1
                st.bytes_dropped_not_operational += size
            elif result is ImmediateSend.WOULD_BLOCK:
                st.dropped_would_block += 1
                st.bytes_dropped_would_block += size
            else:
                st.dropped_error += 1
                st.bytes_dropped_error += size
            return False
        portal = self.portals[name]
        src = portal.src
        port = src.features.port if src is not None else None
        if port is None or addr is None:
            self.send_failed += 1
            st.dropped_error += 1
            st.bytes_dropped_error += size
            return False
        try:
            port.send(addr, lbmc.encode(msg))
        except UMError as exc:  # WouldBlock (full connection queue) among them
            self.send_failed += 1
            st.dropped_error += 1
            st.bytes_dropped_error += size
            log.debug("portal %s: UIM to %s:%d dropped: %s", portal.name, *addr, exc)
            return False
        st.sent += 1
        st.bytes_sent += size
        return True
