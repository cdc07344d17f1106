"""Late join and OTR through the DRO: requests forwarded to the origin, answers relayed back.

Theory of operation
-------------------
UM's DRO keeps no retention buffer: "proxy sources have no retransmission retention buffer: they
cannot serve Late Join or OTR; retransmission requests travel end-to-end to the originating
source" (notes dro-monitoring-config A2, A7, from UM's droarchitecture.html and
umrouterimplementation.html; seed 003 10.3: OTR guards against loss "at the transport level or
from a DRO").  A receiver in another TRD cannot reach the origin's request port (it is an
address of the origin's TRD), so the DRO stands in for it, hop by hop, and never answers from a
cache of its own.  This module is that forwarding, sans-IO (rank 2): bytes and ``now`` in,
``(portal, address, bytes)`` to send from a portal's request port out.

**Advertising** (egress portal, the proxy source's TRD).  When the origin's TIR (or a joined
session's options) offered late join -- a LATE_JOIN option -- the portal that receives it calls
:meth:`RecoveryForwarder.receive_origin` with the origin's request port, transport index and
topic index.  A proxy source of that source gets a transport index of the DRO's own from
:meth:`~RecoveryForwarder.proxy_created` and advertises a LATE_JOIN option naming its portal's
request port and that index [inferred: the option's fields are UM's; that the DRO rewrites them
to its own port follows from the origin's port being unreachable from the other TRD].  The
receiver's late join and OTR then send LJI_REQ and UME_RXREQ there, as to any source
(:mod:`umcore.features.latejoin`).

**Requests** (:meth:`~RecoveryForwarder.receive_request`, at the egress portal's request port).
The transport index names the proxy source, hence the originating source; the core's active
ingress for it (``ingress_of``: the portal its frames come in through, the cheapest path) sends
the request on to the origin's request port with the origin's transport and topic index and its
own request port as the reply address.  An LJI_REQ gets a request index of ours (the LJ_INFO
comes back under it); a UME_RXREQ is remembered by (ingress, topic index, sqn) with who asked.

**Answers** (:meth:`~RecoveryForwarder.receive_reply`, at the ingress portal's request port).
An LJ_INFO under one of our indices goes back to the receiver under its own index, the range
unchanged.  A RETRANS for a remembered (topic index, sqn) goes to every receiver that asked for
it, with the sequence number unchanged (the origin's), the topic index the receiver knows
(the proxy source's) and an OTID header naming the proxy source (its portal's request port and
transport index, which is how the receiver matches a retransmission to its source,
:func:`umcore.features.latejoin.make_otid`); the payload and other headers are the origin's.

Across several DROs each one stands in for the previous: a DRO's proxy receiver in a transit TRD
sees the other DRO's proxy source, whose LATE_JOIN option names that DRO's portal, and forwards
there.

**Peer links** [inferred: UM documents that requests cross the whole DRO path, not how a peer
link carries them].  A peer portal has no request port; the messages travel over the link
instead, named by their source (OTID and topic), and each DRO keeps its own pending entries:

* the other DRO's advertisement of a source says whether it offers late join
  (:meth:`~RecoveryForwarder.receive_peer_offer`: that DRO forwards for it);
* a request for a source whose active ingress is a peer portal goes out
  (:meth:`~RecoveryForwarder.take_peer_sends`) as the receiver sent it, an LJI_REQ under a
  request index of ours, with the transport/topic indices and reply addresses zeroed (the other
  DRO knows the source by name and the answer comes back over the link); a RXREQ is remembered
  by (peer portal, source, sqn);
* a request that came over a link (:meth:`~RecoveryForwarder.receive_peer_message`) is
  forwarded like any other, remembering that its answer goes back over that link;
* answers go back over the link unchanged (an LJ_INFO under the other DRO's index, a RETRANS as
  the origin sent it); the DRO that faces the receiver rewrites them as above.

Bounds: remembered LJI_REQs and RXREQs expire after :data:`PENDING_LIFETIME_S` and are at most
:data:`MAX_PENDING` (the oldest forgotten first, counted); a request the DRO cannot route, an
answer it does not expect, is dropped and counted.  Nothing a TRD sends can raise.
"""

from __future__ import annotations

import dataclasses
from collections import OrderedDict
from collections.abc import Callable
from typing import NamedTuple

from umcore.dro.events import SourceKey
from umcore.features.latejoin import make_otid, parse_otid
from umcore.wire import lbmc

__all__ = [
    "MAX_PENDING",
    "MAX_PROXIES",
    "PENDING_LIFETIME_S",
    "Origin",
    "RecoveryForwarder",
    "RecoveryStats",
]

Address = tuple[str, int]

# How long a forwarded request waits for its answer.  UM documents none for the DRO [inferred];
# the receiver re-sends a request every retransmit_request_interval (0.5 s) or
# otr_request_minimum_interval (1 s, doubling to 10 s) and each re-send is remembered afresh, so
# an answer only has to come within one round trip to the origin; 10 s (the default
# retransmit_request_message_timeout) covers any WAN.
PENDING_LIFETIME_S = 10.0
# Requests remembered at once (LJI_REQs and RXREQ sqns together): a receiver asks for at most
# retransmit_request_outstanding_maximum (10) / otr_request_outstanding_maximum (200) at a time,
# so this serves hundreds of recovering receivers; a flood beyond it forgets the oldest (its
# answer is then dropped and counted, and the receiver asks again).
MAX_PENDING = 65536
# Proxy sources given a late-join transport index at once: the core's MAX_SOURCES bound (one
# proxy source per originating source per egress portal) already keeps this far lower.
MAX_PROXIES = 1 << 20
_U32 = 0xFFFFFFFF


RxKey = tuple[str, int | SourceKey, int]  # (ingress, origin topic index or source, sqn)


class Origin(NamedTuple):
    """Where an originating source (or the previous DRO's proxy source) takes late-join and
    OTR requests, as its TIR's LATE_JOIN option and topic index say."""

    ip: str
    port: int
    transport_idx: int
    topic_idx: int


class RecoveryStats:
    """Counters (cumulative) of one forwarder."""

    __slots__ = (
        "lj_info_relayed",
        "lji_forwarded",
        "no_route",
        "pending_evicted",
        "retrans_relayed",
        "rxreq_forwarded",
        "unknown_proxy",
        "unknown_reply",
    )

    def __init__(self) -> None:
        self.lji_forwarded = 0  # LJI_REQ headers sent on to an origin
        self.rxreq_forwarded = 0  # UME_RXREQ headers sent on to an origin
        self.lj_info_relayed = 0  # LJ_INFOs relayed back to a receiver
        self.retrans_relayed = 0  # RETRANS copies relayed back (one per receiver that asked)
        self.unknown_proxy = 0  # a request naming no proxy source of that portal
        self.no_route = 0  # the source has no ingress with a request port (gone, peer link)
        self.unknown_reply = 0  # an LJ_INFO / RETRANS nobody (still) waits for
        self.pending_evicted = 0  # remembered requests forgotten to stay under MAX_PENDING


@dataclasses.dataclass(slots=True)
class _LjiWait:
    egress: str  # the portal the LJI_REQ came in through
    reply_to: Address | None  # the receiver's request port (None: back over the peer link)
    request_idx: int  # the receiver's (or the other DRO's) index
    source: SourceKey
    expires: float


@dataclasses.dataclass(slots=True)
class _RxWait:
    egress: str
    reply_to: Address | None  # the receiver's (or the next DRO's) request port; None: link
    transport_idx: int  # the proxy source's late-join transport index
    topic_idx: int  # the proxy source's topic index (what the receiver's RXREQ named)
    origin: Origin | None  # None: the source's ingress is a peer portal
    source: SourceKey
    expires: float


class RecoveryForwarder:
    """Late join / OTR request forwarding of one DRO (see the module docstring).

    ``ingress_of(source)``: the portal the core takes that source's frames from (None: none);
    ``address_of(portal)``: that portal's request port (None for a peer portal or one down);
    ``is_peer(portal)``: a peer portal (its traffic goes over the link, :meth:`take_peer_sends`).
    """

    def __init__(
        self,
        ingress_of: Callable[[SourceKey], str | None],
        address_of: Callable[[str], Address | None],
        is_peer: Callable[[str], bool] = lambda portal: False,
    ) -> None:
        self._ingress_of = ingress_of
        self._address_of = address_of
        self._is_peer = is_peer
        # where each portal's side takes requests for a source (None: over that peer link)
        self._origins: dict[tuple[str, SourceKey], Origin | None] = {}
        self._offered: dict[SourceKey, int] = {}  # portals knowing an origin of the source
        self._proxy_idx: dict[tuple[str, SourceKey], int] = {}
        self._proxies: dict[int, tuple[str, SourceKey]] = {}
        self._next_idx = 1
        self._next_qidx = 1
        self._lji: OrderedDict[tuple[str, int], _LjiWait] = OrderedDict()
        # (ingress, origin topic index or source, sqn) -> (egress, receiver address) -> who asked
        self._rx: OrderedDict[RxKey, dict[tuple[str, Address | None], _RxWait]] = OrderedDict()
        self._rx_count = 0
        self._out: list[tuple[str, Address, bytes]] = []
        self._peer_out: list[tuple[str, SourceKey, bytes]] = []
        self.stats = RecoveryStats()
        #: ``store_path(portal, source, msg, now)`` True: a peer link's message was receiver <->
        #: Store traffic, taken (umcore.dro.storepath; it shares this channel of the link)
        self.store_path: Callable[[str, SourceKey, lbmc.LBMCMessage, float], bool] | None = None

    # ------------------------------------------------------------------ origins (ingress side)
    def receive_origin(self, portal: str, source: SourceKey, origin: Origin | None) -> None:
        """``portal``'s TRD advertises ``source`` with late join at ``origin``."""
        key = (portal, source)
        if key not in self._origins:
            self._offered[source] = self._offered.get(source, 0) + 1
        self._origins[key] = origin

    def receive_peer_offer(self, portal: str, source: SourceKey) -> None:
        """The DRO at the other end of peer portal ``portal`` advertised ``source`` as offering
        late join: requests for it go over that link."""
        self.receive_origin(portal, source, None)

    def receive_origin_gone(self, portal: str, source: SourceKey) -> None:
        """``source`` is gone from ``portal``'s TRD."""
        if self._origins.pop((portal, source), None) is None:
            return
        n = self._offered[source] - 1
        if n:
            self._offered[source] = n
        else:
            del self._offered[source]

    def offers_late_join(self, source: SourceKey) -> bool:
        """Some portal's TRD advertises ``source`` with late join (its proxy sources may)."""
        return source in self._offered

    def origin(self, portal: str, source: SourceKey) -> Origin | None:
        """Where ``portal``'s TRD takes requests for ``source`` (None: unknown, or a peer)."""
        return self._origins.get((portal, source))

    # ------------------------------------------------------------------ proxies (egress side)
    def proxy_created(self, portal: str, source: SourceKey) -> int | None:
        """A proxy source of ``source`` in ``portal``: the transport index its LATE_JOIN option
        names (None: the table is full; the proxy then offers no late join)."""
        key = (portal, source)
        idx = self._proxy_idx.get(key)
        if idx is not None:
            return idx
        if len(self._proxies) >= MAX_PROXIES:
            return None
        idx = self._next_idx
        while idx in self._proxies:
            idx = idx % _U32 + 1
        self._next_idx = idx % _U32 + 1
        self._proxy_idx[key] = idx
        self._proxies[idx] = key
        return idx

    def proxy_deleted(self, portal: str, source: SourceKey) -> None:
        idx = self._proxy_idx.pop((portal, source), None)
        if idx is not None:
            del self._proxies[idx]

    def portal_down(self, portal: str) -> None:
        """Everything of ``portal`` goes: its origins, proxies and waiting requests."""
        for key in [k for k in self._origins if k[0] == portal]:
            self.receive_origin_gone(*key)
        for key in [k for k in self._proxy_idx if k[0] == portal]:
            self.proxy_deleted(*key)
        for lk in [k for k, w in self._lji.items() if portal in (k[0], w.egress)]:
            del self._lji[lk]
        for rk in list(self._rx):
            waits = self._rx[rk]
            if rk[0] == portal:
                self._rx_count -= len(waits)
                del self._rx[rk]
                continue
            for wk in [wk for wk in waits if wk[0] == portal]:
                del waits[wk]
                self._rx_count -= 1
            if not waits:
                del self._rx[rk]

    # ------------------------------------------------------------------ requests in
    def receive_request(self, portal: str, msg: lbmc.LBMCMessage, now: float) -> bool:
        """An LJI_REQ / UME_RXREQ message at ``portal``'s request port; True when one of its
        headers named a proxy source of ``portal`` (forwarded, or dropped and counted), False
        when none did (counted ``unknown_proxy``: not ours, the portal's context may have a
        use for it)."""
        self._expire(now)
        taken = False
        batch = _Batch()
        for h in msg.headers:
            if type(h) is not lbmc.LjiReq and type(h) is not lbmc.UmeRxReq:
                continue
            assert isinstance(h, (lbmc.LjiReq, lbmc.UmeRxReq))
            proxy = self._proxies.get(h.transport_idx)
            if proxy is None or proxy[0] != portal:
                self.stats.unknown_proxy += 1
                continue
            taken = True
            if type(h) is lbmc.LjiReq:
                reply: Address = (lbmc.ip4_to_str(h.req_ip), h.req_port)
            else:
                assert type(h) is lbmc.UmeRxReq
                reply = (lbmc.ip4_to_str(h.rx_ip), h.rx_port)
            self._forward(portal, reply, proxy[1], h, now, batch)
        self._flush_batch(batch)
        return taken

    def receive_peer_message(
        self, portal: str, source: SourceKey, msg: lbmc.LBMCMessage, now: float
    ) -> bool:
        """A late-join/OTR message of ``source`` that came over peer portal ``portal``'s link:
        a request to forward (its answer goes back over the link) or an answer to relay.
        False: nothing in it for us (counted)."""
        if self.store_path is not None and self.store_path(portal, source, msg, now):
            return True
        self._expire(now)
        if msg.msg_type == lbmc.MSG_RETRANS:
            return self._retrans((portal, source, msg.sqn), msg, check_origin=False)
        batch = _Batch()
        taken = False
        for h in msg.headers:
            if type(h) is lbmc.UmeLjInfo:
                taken = self._lj_info(portal, h) or taken
            elif type(h) is lbmc.LjiReq or type(h) is lbmc.UmeRxReq:
                assert isinstance(h, (lbmc.LjiReq, lbmc.UmeRxReq))
                taken = True
                self._forward(portal, None, source, h, now, batch)
        self._flush_batch(batch)
        if not taken:
            self.stats.unknown_reply += 1
        return taken

    def _forward(
        self,
        egress: str,
        reply: Address | None,
        source: SourceKey,
        h: lbmc.LjiReq | lbmc.UmeRxReq,
        now: float,
        batch: _Batch,
    ) -> None:
        """One request header towards ``source``'s origin; ``reply``: where its answer goes
        (None: back over ``egress``'s peer link)."""
        st = self.stats
        route = self._route(source)
        if route is None:
            st.no_route += 1
            return
        ingress, origin, own = route
        expires = now + PENDING_LIFETIME_S
        if type(h) is lbmc.LjiReq:
            qidx = self._remember_lji(ingress, _LjiWait(egress, reply, h.request_idx, source,
                                                        expires))  # fmt: skip
            if origin is None:  # over the link: the other DRO knows the source by name
                fwd = dataclasses.replace(
                    h, request_idx=qidx, transport_idx=0, topic_idx=0, req_ip=0, req_port=0
                )
                body = lbmc.encode(lbmc.LBMCMessage(lbmc.MSG_CONTROL, headers=[fwd]))
                self._peer_out.append((ingress, source, body))
            else:
                assert own is not None
                fwd = dataclasses.replace(
                    h,
                    request_idx=qidx,
                    transport_idx=origin.transport_idx,
                    topic_idx=origin.topic_idx,
                    req_ip=lbmc.ip4_from_str(own[0]),
                    req_port=own[1],
                )
                body = lbmc.encode(lbmc.LBMCMessage(lbmc.MSG_CONTROL, headers=[fwd]))
                self._out.append((ingress, (origin.ip, origin.port), body))
            st.lji_forwarded += 1
            return
        assert type(h) is lbmc.UmeRxReq
        wait = _RxWait(egress, reply, h.transport_idx, h.id_2, origin, source, expires)
        if origin is None:
            self._remember_rx((ingress, source, h.seqnum), wait)
            fwd_rx = dataclasses.replace(h, transport_idx=0, id_2=0, rx_ip=0, rx_port=0)
            batch.peer.setdefault((ingress, source), []).append(fwd_rx)
        else:
            assert own is not None
            self._remember_rx((ingress, origin.topic_idx, h.seqnum), wait)
            fwd_rx = dataclasses.replace(
                h,
                transport_idx=origin.transport_idx,
                id_2=origin.topic_idx,
                rx_ip=lbmc.ip4_from_str(own[0]),
                rx_port=own[1],
            )
            batch.origin.setdefault((ingress, origin), []).append(fwd_rx)
        st.rxreq_forwarded += 1

    def _flush_batch(self, batch: _Batch) -> None:
        """The RXREQs of one incoming message, one message per destination."""
        for (ingress, origin), hdrs in batch.origin.items():
            body = lbmc.encode(lbmc.LBMCMessage(lbmc.MSG_CONTROL, headers=hdrs))
            self._out.append((ingress, (origin.ip, origin.port), body))
        for (ingress, source), hdrs in batch.peer.items():
            body = lbmc.encode(lbmc.LBMCMessage(lbmc.MSG_CONTROL, headers=hdrs))
            self._peer_out.append((ingress, source, body))

    def _route(self, source: SourceKey) -> tuple[str, Origin | None, Address | None] | None:
        """(ingress, origin or None for a peer link, the ingress's own request port)."""
        ingress = self._ingress_of(source)
        if ingress is None or (ingress, source) not in self._origins:
            return None
        origin = self._origins[(ingress, source)]
        if origin is None:
            return (ingress, None, None) if self._is_peer(ingress) else None
        own = self._address_of(ingress)
        if own is None:
            return None
        return ingress, origin, own

    def _remember_lji(self, ingress: str, wait: _LjiWait) -> int:
        self._make_room()
        qidx = self._next_qidx
        while (ingress, qidx) in self._lji:
            qidx = qidx % _U32 + 1
        self._next_qidx = qidx % _U32 + 1
        self._lji[(ingress, qidx)] = wait
        return qidx

    def _remember_rx(self, key: RxKey, wait: _RxWait) -> None:
        waits = self._rx.get(key)
        if waits is None:
            self._make_room()
            waits = self._rx[key] = {}
        else:
            self._rx.move_to_end(key)  # expiry order: the newest request for it
        wk = (wait.egress, wait.reply_to)
        if wk not in waits:
            self._rx_count += 1
        waits[wk] = wait

    def _make_room(self) -> None:
        while len(self._lji) + self._rx_count >= MAX_PENDING:
            self.stats.pending_evicted += 1
            if self._lji and (not self._rx or self._rx_count <= len(self._lji)):
                self._lji.popitem(last=False)
            else:
                _k, waits = self._rx.popitem(last=False)
                self._rx_count -= len(waits)

    def _expire(self, now: float) -> None:
        lji = self._lji
        while lji:
            first = next(iter(lji.values()))
            if first.expires > now:
                break
            lji.popitem(last=False)
        rx = self._rx
        while rx:
            waits = next(iter(rx.values()))
            if max(w.expires for w in waits.values()) > now:
                break
            rx.popitem(last=False)
            self._rx_count -= len(waits)

    # ------------------------------------------------------------------ answers in
    def receive_reply(self, portal: str, msg: lbmc.LBMCMessage, now: float) -> bool:
        """An LJ_INFO or RETRANS at ``portal``'s request port; True when it answered a request
        this DRO forwarded (relayed), False when it is not ours (counted ``unknown_reply``; an
        application context would drop it too)."""
        self._expire(now)
        if msg.msg_type == lbmc.MSG_RETRANS:
            return self._retrans((portal, msg.tidx, msg.sqn), msg, check_origin=True)
        taken = False
        for h in msg.find_all(lbmc.UmeLjInfo):
            taken = self._lj_info(portal, h) or taken
        return taken

    def _lj_info(self, ingress: str, h: lbmc.UmeLjInfo) -> bool:
        wait = self._lji.pop((ingress, h.qidx), None)
        if wait is None:
            self.stats.unknown_reply += 1
            return False
        back = dataclasses.replace(h, qidx=wait.request_idx)
        body = lbmc.encode(lbmc.LBMCMessage(lbmc.MSG_CONTROL, headers=[back]))
        if wait.reply_to is None:
            self._peer_out.append((wait.egress, wait.source, body))
        else:
            self._out.append((wait.egress, wait.reply_to, body))
        self.stats.lj_info_relayed += 1
        return True

    def _retrans(self, key: RxKey, msg: lbmc.LBMCMessage, *, check_origin: bool) -> bool:
        waits = self._rx.get(key)
        if waits is None:
            self.stats.unknown_reply += 1
            return False
        otid = msg.find(lbmc.Otid)
        ident = parse_otid(otid.otid) if otid is not None and check_origin else None
        answered = [
            w for w in waits.values()
            if ident is None or w.origin is None
            or ident == (w.origin.ip, w.origin.port, w.origin.transport_idx)
        ]  # fmt: skip
        if not answered:
            # the same (topic index, sqn) of another source at that port: not this one's
            self.stats.unknown_reply += 1
            return True
        del self._rx[key]
        self._rx_count -= len(waits)
        relayed: bytes | None = None
        for w in answered:
            if w.reply_to is None:  # back over the link, as the origin sent it
                if relayed is None:
                    relayed = lbmc.encode(msg)
                self._peer_out.append((w.egress, w.source, relayed))
                self.stats.retrans_relayed += 1
                continue
            own = self._address_of(w.egress)
            if own is None:
                continue  # its portal went down meanwhile
            mine = lbmc.Otid(0, make_otid(own[0], own[1], w.transport_idx))
            headers: list[lbmc.Header] = [mine if type(h) is lbmc.Otid else h for h in msg.headers]
            if otid is None:
                headers.insert(0, mine)
            out = lbmc.LBMCMessage(lbmc.MSG_RETRANS, w.topic_idx, msg.sqn, headers, msg.payload)
            self._out.append((w.egress, w.reply_to, lbmc.encode(out)))
            self.stats.retrans_relayed += 1
        return True

    # ------------------------------------------------------------------ output
    def take_sends(self) -> list[tuple[str, Address, bytes]]:
        """``(portal, address, message)``: write ``message`` to ``address`` from ``portal``'s
        request port (a UIM connection, as the client library's late join does)."""
        out, self._out = self._out, []
        return out

    def take_peer_sends(self) -> list[tuple[str, SourceKey, bytes]]:
        """``(peer portal, source, message)``: send ``message`` (one LBMC message: a request or
        an answer) of ``source`` over that portal's link."""
        out, self._peer_out = self._peer_out, []
        return out

    @property
    def pending(self) -> int:
        """Requests remembered now (LJI_REQs plus RXREQ sqns' askers)."""
        return len(self._lji) + self._rx_count


class _Batch:
    """The RXREQs of one incoming message, by destination."""

    __slots__ = ("origin", "peer")

    def __init__(self) -> None:
        self.origin: dict[tuple[str, Origin], list[lbmc.Header]] = {}
        self.peer: dict[tuple[str, SourceKey], list[lbmc.Header]] = {}
