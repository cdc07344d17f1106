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
there.  **Not across peer links**: a source whose active ingress is a peer portal has no
request port to forward to here (counted ``no_route``); the peer link protocol carries no
requests [not built].

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
    reply_to: Address  # the receiver's request port
    request_idx: int  # the receiver's index
    expires: float


@dataclasses.dataclass(slots=True)
class _RxWait:
    egress: str
    reply_to: Address  # the receiver's (or the next DRO's) request port
    transport_idx: int  # the proxy source's late-join transport index
    topic_idx: int  # the proxy source's topic index (what the receiver's RXREQ named)
    origin: Origin
    expires: float


class RecoveryForwarder:
    """Late join / OTR request forwarding of one DRO (see the module docstring).

    ``ingress_of(source)``: the portal the core takes that source's frames from (None: none);
    ``address_of(portal)``: that portal's request port (None for a peer portal or one down).
    """

    def __init__(
        self,
        ingress_of: Callable[[SourceKey], str | None],
        address_of: Callable[[str], Address | None],
    ) -> None:
        self._ingress_of = ingress_of
        self._address_of = address_of
        self._origins: dict[tuple[str, SourceKey], Origin] = {}
        self._offered: dict[SourceKey, int] = {}  # portals knowing an origin of the source
        self._proxy_idx: dict[tuple[str, SourceKey], int] = {}
        self._proxies: dict[int, tuple[str, SourceKey]] = {}
        self._next_idx = 1
        self._next_qidx = 1
        self._lji: OrderedDict[tuple[str, int], _LjiWait] = OrderedDict()
        # (ingress, origin topic index, sqn) -> (egress, receiver address) -> who asked
        self._rx: OrderedDict[tuple[str, int, int], dict[tuple[str, Address], _RxWait]] = (
            OrderedDict()
        )
        self._rx_count = 0
        self._out: list[tuple[str, Address, bytes]] = []
        self.stats = RecoveryStats()

    # ------------------------------------------------------------------ origins (ingress side)
    def receive_origin(self, portal: str, source: SourceKey, origin: Origin) -> None:
        """``portal``'s TRD advertises ``source`` with late join at ``origin``."""
        key = (portal, source)
        if key not in self._origins:
            self._offered[source] = self._offered.get(source, 0) + 1
        self._origins[key] = origin

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
        rx_out: dict[tuple[str, Origin], list[lbmc.Header]] = {}
        st = self.stats
        for h in msg.headers:
            kind = type(h)
            if kind is not lbmc.LjiReq and kind is not lbmc.UmeRxReq:
                continue
            assert isinstance(h, (lbmc.LjiReq, lbmc.UmeRxReq))
            proxy = self._proxies.get(h.transport_idx)
            if proxy is None or proxy[0] != portal:
                st.unknown_proxy += 1
                continue
            taken = True
            route = self._route(proxy[1])
            if route is None:
                st.no_route += 1
                continue
            ingress, origin, own = route
            if type(h) is lbmc.LjiReq:
                qidx = self._remember_lji(
                    ingress,
                    _LjiWait(
                        portal, (lbmc.ip4_to_str(h.req_ip), h.req_port), h.request_idx,
                        now + PENDING_LIFETIME_S,
                    ),
                )  # fmt: skip
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
            else:
                assert type(h) is lbmc.UmeRxReq
                wait = _RxWait(
                    portal, (lbmc.ip4_to_str(h.rx_ip), h.rx_port), h.transport_idx, h.id_2,
                    origin, now + PENDING_LIFETIME_S,
                )  # fmt: skip
                self._remember_rx((ingress, origin.topic_idx, h.seqnum), wait)
                fwd_rx = dataclasses.replace(
                    h,
                    transport_idx=origin.transport_idx,
                    id_2=origin.topic_idx,
                    rx_ip=lbmc.ip4_from_str(own[0]),
                    rx_port=own[1],
                )
                rx_out.setdefault((ingress, origin), []).append(fwd_rx)
                st.rxreq_forwarded += 1
        for (ingress, origin), hdrs in rx_out.items():
            body = lbmc.encode(lbmc.LBMCMessage(lbmc.MSG_CONTROL, headers=hdrs))
            self._out.append((ingress, (origin.ip, origin.port), body))
        return taken

    def _route(self, source: SourceKey) -> tuple[str, Origin, Address] | None:
        ingress = self._ingress_of(source)
        if ingress is None:
            return None
        origin = self._origins.get((ingress, source))
        own = self._address_of(ingress)
        if origin is None or own is None:
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

    def _remember_rx(self, key: tuple[str, int, int], wait: _RxWait) -> None:
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
            return self._retrans(portal, msg)
        taken = False
        for h in msg.find_all(lbmc.UmeLjInfo):
            wait = self._lji.pop((portal, h.qidx), None)
            if wait is None:
                self.stats.unknown_reply += 1
                continue
            taken = True
            back = dataclasses.replace(h, qidx=wait.request_idx)
            body = lbmc.encode(lbmc.LBMCMessage(lbmc.MSG_CONTROL, headers=[back]))
            self._out.append((wait.egress, wait.reply_to, body))
            self.stats.lj_info_relayed += 1
        return taken

    def _retrans(self, portal: str, msg: lbmc.LBMCMessage) -> bool:
        waits = self._rx.pop((portal, msg.tidx, msg.sqn), None)
        if waits is None:
            self.stats.unknown_reply += 1
            return False
        self._rx_count -= len(waits)
        otid = msg.find(lbmc.Otid)
        ident = parse_otid(otid.otid) if otid is not None else None
        sent = False
        for w in waits.values():
            o = w.origin
            if ident is not None and ident != (o.ip, o.port, o.transport_idx):
                continue  # another source's (topic index, sqn): not this wait's answer
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
            sent = True
        if not sent:
            self.stats.unknown_reply += 1
        return True

    # ------------------------------------------------------------------ output
    def take_sends(self) -> list[tuple[str, Address, bytes]]:
        """``(portal, address, message)``: write ``message`` to ``address`` from ``portal``'s
        request port (a UIM connection, as the client library's late join does)."""
        out, self._out = self._out, []
        return out

    @property
    def pending(self) -> int:
        """Requests remembered now (LJI_REQs plus RXREQ sqns' askers)."""
        return len(self._lji) + self._rx_count
