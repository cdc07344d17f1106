"""The client library's side of the DRO, and the contract it expects of one.

Theory of operation
-------------------
A DRO (tnwgd, :mod:`daemons.tnwgd`) joins topic resolution domains (TRDs); to an application it
is a few UM contexts in its TRD (one pair per endpoint portal) that speak ordinary topic
resolution and UIM, plus the records below.  The engine's part (seed 003 7.3, 8.1; notes
dro-monitoring-config A2, A4, A5, A7) is split between the sans-IO resolver
(:mod:`umcore.resolver.dro`: use queries, TR requests, domain id, routes, final advertisements,
proxy sources), the hold-back delivery controller (:mod:`umcore.features.droloss`) and this
module, which routes UIMs and builds those controllers for an :class:`~umcore.engine.Engine`.

What an application context exposes: ``Engine.domain_id`` (its TRD id, None until a DRO told
it), ``Engine.domain_routes`` (remote domain id -> :class:`~umcore.resolver.dro.DomainRoute`)
and ``Engine.uim_route(dest)``.

The contract for the DRO side
-----------------------------
What this library sends, and what it expects a DRO endpoint portal to do; items marked
[inferred] are pyum's choices where UM's documentation is silent (no claim of interoperability
with Informatica's DRO for them).

1. **Packet options.**  Every LBMR datagram a portal context sends carries the packet options
   SRC_TYPE = 1 (tnwgd) and LOCAL_DOMAIN = the portal's ``<domain-id>``.  That is how an
   application learns its TRD id (``resolver_domain_id_active_propagation_timeout`` 0, the
   default, accepts it from nothing else) and how it recognises TIRs from proxy sources.  The
   SRS relays the same as DIR records, RTIR/RTER for routes.
2. **Use queries and TR requests.**  LBMR type 4 TMRs of type TOPIC_USE without RESPONSE are
   use queries; the application answers, for each topic it has a receiver of (pattern it has a
   PCRE wildcard receiver of), with the same TMR with RESPONSE (and the WILDCARD_PCRE flag for a
   pattern), sent to the TRD's resolver channel (multicast group or lbmrd), paced by
   ``resolver_sustain_query_bps`` / ``_queries_per_second`` (topics) and
   ``resolver_wildcard_query_bps`` / ``_queries_per_second`` (patterns) [inferred].  An ext 0x04
   Topic Resolution Request with QUERY / WILDCARD_QUERY makes every receiver topic / wildcard
   pattern answer the same way; ADVERTISEMENT makes its sources advertise again (their TIRs go
   out at once and through a new sustaining phase).  Nothing answers GW_REMOTE_INTEREST.
3. **Domain routes.**  A remote domain route record (LBMR ext 0x06) says: the domains listed
   are reached through the portal whose **UIM (request) port** is ``ip:port``.  Routes not
   repeated within :data:`~umcore.resolver.dro.ROUTE_LIFETIME` (30 s) are forgotten; repeat them
   at least every ``<domain-route max-interval>`` (1 s by default).
4. **UIMs to other domains.**  ``send_uim("TCP:D:ip:port", ...)`` with D not the context's own
   domain connects to the request port of the route to D and writes the UIM there (LBMC DATA
   with STREAM, TOPICNAME when it has a topic, REQUEST for a request) with a DESTINATION
   header (0x64): ``domain_id`` D, ``ipaddr``/``port`` the destination context's request port,
   ``hops_taken`` 0, ``orig_domain_id``/``orig_ipaddr``/``orig_port`` this context's domain and
   request port (notes wire-lbmc 10: "STREAM + DESTINATION -> a domain stream").  The DRO is
   expected to forward it, hop by hop, to the portal in domain D, which connects to
   ``ipaddr:port`` and writes the message there with DESTINATION kept and ``hops_taken``
   counting the DROs crossed.  A context receiving a UIM with DESTINATION reports its source as
   ``TCP:orig_domain:orig_ip:orig_port``, so ``send_uim(msg.source, ...)`` answers back through
   the DRO.  A REQUEST header keeps the requester's own address; rewriting it so that responses
   find their way back is the DRO's (issue 19: "REQUEST header rewritten").  D equal to the
   context's domain, or a destination without a domain, goes straight to ``ip:port``; a domain
   with no route raises :class:`~umcore.errors.UMError` when the context knows any route (none
   known: the domain is ignored, as without a DRO).
5. **Sending to a source in another domain.**  ``send_uim("SOURCE:" + source string)`` of a
   proxy source goes to the request port its TIR's EXFUNC option names (the proxy's portal) with
   a DESTINATION header whose ``domain_id`` is the TIR's DOMAIN_ID option (the originating
   domain), ``ipaddr``/``port`` zero, the ``orig_*`` fields this context's, and an OTID header
   (0x0B) carrying the TIR's OTID option [inferred]: the DRO finds the
   originating source by its OTID and forwards to that source's request port.
6. **Proxy sources' TIRs** carry the OTID, COST (hop count 1 or more) and DOMAIN_ID options; a
   TIR with a COST option of cost -1 (:data:`~umcore.resolver.dro.FINAL_COST`) is a **final
   advertisement** [inferred: the SRS's SER convention]: receivers of that topic source get EOS
   at once and forget it (their session is left when it was its last topic).
7. **DRO reliable loss.**  Data forwarded keeps the originating sequence numbers; a TCP receiver
   of a proxy source with ``transport_tcp_dro_loss_recovery_timeout`` > 0 holds data beyond a
   gap that long before declaring the gap lost; ``transport_lbtipc_dro_loss_recovery_timeout``
   does the same for an LBT-IPC proxy source's session (LBT-IPC joins run the TCP receiver
   session and controllers).  Other kinds (LBT-RU, LBT-RM, SMX) recover or lose as usual.
8. **The DRO's own contexts.**  A portal's contexts are UM contexts too: set
   ``ctx.resolver.answer_use_queries = False`` on them, or their proxy receivers answer use
   queries and TR requests like applications and keep interest alive for ever.
9. **Late join and OTR of a proxy source** (notes A2, A7: the DRO keeps no retention buffer;
   requests travel to the originating source).  A proxy source of a late-join source carries a
   LATE_JOIN option naming its portal's request port and a transport index of the DRO's
   [inferred]; the receiver's LJI_REQ and UME_RXREQ go there like to any source, the DRO
   forwards them to the origin and relays LJ_INFO (under the receiver's request index) and
   RETRANS (the origin's sequence numbers, the proxy source's topic index, an OTID naming the
   proxy source's request port and transport index, :func:`~umcore.features.latejoin.make_otid`)
   back.  Nothing changes in the library: a proxy source looks like any late-join source
   (:mod:`umcore.dro.recovery`).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterable
from typing import Any

from umcore.aio.timer import CoreTimer
from umcore.errors import UMError
from umcore.features.droloss import MAX_HELD, DroLossController
from umcore.resolver.dro import DomainTable, is_proxy_source
from umcore.wire import lbmc, lbmr_options

__all__ = [
    "LossFactory",
    "destination_header",
    "loss_dc_factory",
    "parse_uim_destination",
    "source_headers",
    "uim_route",
    "uim_source",
]

Address = tuple[str, int]
LossFactory = Callable[..., DroLossController]


def parse_uim_destination(dest: str) -> tuple[int | None, str, int]:
    """``TCP:ip:port`` or ``TCP:domain:ip:port`` -> (domain or None, ip, port); ValueError."""
    parts = dest.split(":")
    if parts[0].upper() != "TCP" or len(parts) not in (3, 4):
        raise ValueError(f"not a UIM destination (TCP:[domain:]ip:port): {dest!r}")
    domain = int(parts[1]) if len(parts) == 4 else None
    if domain is not None and not 0 <= domain <= 0xFFFFFFFF:
        raise ValueError(f"bad domain id in {dest!r}")
    ip, port = parts[-2], int(parts[-1])
    lbmc.ip4_from_str(ip)
    if not 0 < port < 65536:
        raise ValueError(f"bad port in {dest!r}")
    return domain, ip, port


def destination_header(
    domain: int, ip: str, port: int, own_domain: int | None, own: Address
) -> lbmc.Destination:
    """The DESTINATION header of a UIM leaving for ``domain`` (contract item 4)."""
    return lbmc.Destination(
        0,
        domain,
        lbmc.ip4_from_str(ip),
        port,
        0,
        own_domain or 0,
        lbmc.ip4_from_str(own[0]),
        own[1],
        0,
    )


def uim_route(
    domains: DomainTable, dest: str, own: Address, now: float
) -> tuple[Address, list[lbmc.Header]]:
    """Where a UIM to ``dest`` is written and the headers it needs (contract item 4)."""
    domain, ip, port = parse_uim_destination(dest)
    if domain is None or domain == domains.domain_id:
        return (ip, port), []
    route = domains.route(domain, now)
    if route is None:
        if not domains.live_routes(now):
            return (ip, port), []  # no DRO known at all: as without one
        raise UMError(f"no route to domain {domain} for {dest!r} (no DRO advertises one)")
    hdr = destination_header(domain, ip, port, domains.domain_id, own)
    return (route.ip, route.port), [hdr]


def source_headers(
    options: Iterable[Any], own_domain: int | None, own: Address
) -> list[lbmc.Header]:
    """The headers of a UIM to a proxy source (contract item 5); [] for any other source."""
    opts = tuple(options)
    if not is_proxy_source(opts):
        return []
    otid: bytes | None = None
    origin = 0
    for opt in opts:
        if type(opt) is lbmr_options.OTIDOption:
            otid = bytes(opt.otid)
        elif type(opt) is lbmr_options.DomainIdOption:
            origin = int(opt.domain_id)
    out: list[lbmc.Header] = [destination_header(origin, "0.0.0.0", 0, own_domain, own)]
    if otid is not None:
        out.append(lbmc.Otid(otid=otid))
    return out


def uim_source(msg: lbmc.LBMCMessage, peer_ip: str) -> str:
    """The source string of a UIM: ``TCP:domain:ip:port`` of its originator when a DRO
    forwarded it (DESTINATION), else ``TCP:peer_ip``."""
    d = msg.find(lbmc.Destination)
    if d is None:
        return f"TCP:{peer_ip}"
    return f"TCP:{d.orig_domain_id}:{lbmc.ip4_to_str(d.orig_ipaddr)}:{d.orig_port}"


def loss_dc_factory(
    loop: asyncio.AbstractEventLoop,
    timeout: float,
    ended: Callable[[], bool],
    max_held: int = MAX_HELD,
) -> LossFactory:
    """A joined session's delivery-controller factory for a DRO proxy source: every topic index
    gets a :class:`DroLossController` waiting ``timeout`` seconds, driven by its own timer,
    holding at most ``max_held`` messages (the context's
    ``delivery_control_maximum_total_map_entries``, 0 = no count bound); once ``ended()`` (the
    session is over) a due timer delivers nothing more."""

    def make(
        tidx: int,
        topic: str,
        deliver: Callable[[int, bytes | memoryview], None],
        loss: Callable[[str, int, int], None],
        *,
        max_burst_loss: int = 1024,
    ) -> DroLossController:
        def fire() -> None:
            if ended():
                return  # after EOS nothing is delivered (what was held is dropped with it)
            dc.handle_timer(loop.time())
            timer.arm(dc.deadline)

        timer = CoreTimer(loop, fire)
        dc = DroLossController(
            tidx,
            topic,
            deliver,
            loss,
            timeout=timeout,
            clock=loop.time,
            max_burst_loss=max_burst_loss,
            on_deadline=lambda: timer.arm(dc.deadline),
            max_held=max_held,
        )
        return dc

    return make
