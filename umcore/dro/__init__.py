"""tnwgd's sans-IO routing core (the Dynamic Routing Option, DRO): rank 2, no I/O, no clock.

Theory of operation
-------------------
A DRO joins topic resolution domains (TRDs).  Its **portals** (endpoint: a pair of UM contexts
in one TRD; peer: a link to another DRO) learn receiver **interest**, create **proxy receivers**
where sources are and **proxy sources** where receivers are, and forward frames between them,
choosing the cheapest path through the DRO network.  This package is that logic, without
sockets or contexts: the portals (UM contexts per TRD over :mod:`umcore.engine`'s raw receiver
and raw source) and the ``tnwgd`` daemon drive it.  Modules:

* :mod:`.interest` -- per-portal interest table: local (TQRs, wildcard TQRs, use-query answers)
  and remote (other DROs' interest records), with the use-query and remote-interest ageing;
* :mod:`.proxy` -- proxy receiver and proxy source life cycles (deletion delay, final
  advertisements);
* :mod:`.seqwindow` -- the per-source duplicate window (``<sqn-window>``);
* :mod:`.queue` -- per-portal egress queues bounded by ``<max-queue>`` with drop counters;
* :mod:`.acl` -- inbound/outbound ACL evaluation;
* :mod:`.routing` -- domain ids, costs, hop counts, shortest paths, recalculation damping;
* :mod:`.ratelimit` -- the ``<rate-limit>`` of each class of TR message;
* :mod:`.mim` -- where a multicast immediate message goes, and its counters;
* :mod:`.recovery` -- late join and OTR: receivers' requests to proxy sources forwarded to the
  originating source, its answers relayed back (``core.recovery``); the DRO retains nothing;
* :mod:`.core` -- :class:`DroCore`, composing them;
* :mod:`.peer` -- the peer link protocol of a peer portal (:class:`~umcore.dro.peer.PeerLink`:
  hello, keepalive, batching, route information, interest, sources and frames over one TCP
  connection) [inferred wire format], and :mod:`.peerglue`, which joins a link to the core
  (its socket side is :mod:`umcore.aio.dropeer`);
* :mod:`.inferred` -- what is *not* documented (the content of DRO-to-DRO route information and
  how it travels), kept in one marked place.  No interoperability with Informatica's DRO is
  claimed for it.

Public API (what an adapter calls, what it gets back)
-----------------------------------------------------
Construction: ``core = DroCore(config, node_id, now)`` with ``config`` from
:func:`umcore.config.dro.load` (every default lives there) and ``node_id`` the DRO's 64-bit id
(UM auto-assigns one; the daemon picks it, e.g. at random, once per start).  Time is always a
float in seconds; the core never reads a clock.

Inputs (all return None; their effects come out of the ``take_*`` calls):

==============================================================  ======================================
``receive_portal_up(portal, now, address=(ip, port),            an endpoint's contexts run (``address``:
peer_node_id=None)``                                            what its domain-route records name), or
                                                                a peer link is up (``peer_node_id``
                                                                once the other DRO is known)
``receive_portal_down(portal, now)``                            contexts or link gone: interest, proxies
                                                                and queue of that portal dropped
``receive_lbmr(portal, packet, now)``                           a decoded LBMR datagram heard in the TRD
                                                                (TQRs, wildcard TQRs, use-query answers,
                                                                TNWG interest, TR requests, domain routes;
                                                                TIRs are the proxy receivers' business).
                                                                The adapter must not loop back the
                                                                core's own packets.
``receive_tqr`` / ``receive_wildcard_tqr`` /                    the same, one record at a time (an SRS
``receive_use_response`` / ``receive_interest`` /               TRD reports receivers through
``receive_tr_request`` / ``receive_domain_route``               ``receive_srs_interest``, which holds
                                                                until withdrawn: no ageing, no
                                                                use queries)
``receive_srs_route(portal, ip, port, domains, now,              another DRO's RTIR (or its RTER:
present=True)``                                                 ``present`` False) relayed by the
                                                                portal's SRS: held as that DRO portal's
                                                                domain route until ended [inferred]
``receive_route_info(portal, RouteInfo, now)``                  another DRO's route information [inferred]
``receive_source(portal, SourceAdvert, now)``                   a proxy receiver resolved a source:
                                                                :func:`advert_from_tir` reads a TIR's
                                                                OTID, COST and DOMAIN_ID options
``receive_source_gone(portal, SourceKey, now)``                 that source's EOS / TIR timeout there
``receive_frame(portal, SourceKey, sqn, data) -> bool``         one frame from a proxy receiver (bytes or
                                                                memoryview, kept without copying until
                                                                taken); True if queued somewhere
``receive_frames(portal, SourceKey, tidx, frames) -> int``     a read's frames from a proxy receiver
                                                                (whole LBMC frames): its data frames of
                                                                topic index ``tidx``, as many
                                                                ``receive_frame`` calls, runs taken whole;
                                                                how many were queued somewhere
``receive_mim(portal, topic, size, request=, origin_domain=,      a multicast immediate message heard
hops_taken=) -> MimRoute``                                      there: the egress portals
                                                                (:mod:`.mim`); ``receive_mim_sent``
                                                                reports each send, ``mim_stats``
                                                                counts
``handle_timer(now)``                                           call at or after ``next_timer()``
==============================================================  ======================================

Outputs:

* ``take_commands() -> list[PortalCommand]``: in order, :class:`CreateProxyReceiver` /
  :class:`DeleteProxyReceiver` (topic, or pattern with ``key.pattern_type`` 1 PCRE / 2 REGEX),
  :class:`CreateProxySource` (its TIRs carry OTID, COST = ``cost``/``hop_count``, DOMAIN_ID =
  ``origin_domain``), :class:`UpdateProxySource` (new cost after a route change),
  :class:`FinalAdvertisement` (send one final advertisement now), :class:`DeleteProxySource`;
* ``take_frames(portal, max_frames=0) -> list[ForwardedFrame]`` (``otid``, ``topic``, ``sqn``
  -- the originating sequence number, to be sent unchanged -- and ``data``); or
  ``queue(portal)`` with ``peek()``/``pop()`` for an adapter that stops at a would-block, or
  ``peek_run()``/``consume(n)``: the queue's :class:`FrameRun` entries (``count`` frames of
  ``size`` bytes back to back in ``data``, sequence numbers from ``sqn``), sent whole;
* ``take_lbmr() -> list[(portal, LBMRPacket)]``: use queries, TNWG interest, remote domain
  routes and initial topic resolution requests, to encode and send in that portal's TRD;
* ``take_route_info() -> list[(portal, RouteInfo)]``: our route information (and relayed
  copies) for the peer protocol [inferred];
* ``take_events() -> list[CoreEvent]``: :class:`InterestAdded`, :class:`InterestRemoved`,
  :class:`RecalcDone`, :class:`RecalcHeldUp` for logs and monitoring;
* ``next_timer() -> float | None``; views ``stats(portal)`` (:class:`PortalStats`),
  ``queue(portal)`` counters, ``proxy_receivers()``, ``proxy_sources()``,
  ``advertised_interest(portal)``, ``router`` (topology: ``domains()``, ``cost_to(d)``,
  ``toward(d)``, ``own_route_info()``).

Late join and OTR (:mod:`umcore.dro.recovery`): ``core.recovery`` hears where origins take
requests (``receive_origin``), gives proxy sources their LATE_JOIN transport index
(``proxy_created``), takes the request-port traffic (``receive_request`` /
``receive_reply``) and returns ``take_sends() -> [(portal, address, bytes)]``.

Errors: a configuration the core cannot run (bad ``<sqn-window>``, a bad ACE pattern or value)
raises :class:`~umcore.errors.ConfigError` from the constructor, naming the file and line.
Nothing a TRD sends can raise: unusable patterns and records are dropped and counted.
"""

from umcore.dro.acl import CompiledAcl, SourceTransport, compile_acl
from umcore.dro.core import DroCore, PortalState, PortalStats, SourceAdvert, advert_from_tir
from umcore.dro.events import (
    CreateProxyReceiver,
    CreateProxySource,
    DeleteProxyReceiver,
    DeleteProxySource,
    FinalAdvertisement,
    InterestAdded,
    InterestRemoved,
    PortalCommand,
    RecalcDone,
    RecalcHeldUp,
    SourceKey,
    UpdateProxySource,
)
from umcore.dro.interest import InterestKey, LocalState
from umcore.dro.mim import MimCounters, MimRoute, MimSendResult, MimStats
from umcore.dro.proxy import ReceiverState, SourceState
from umcore.dro.queue import ForwardedFrame, FrameRun, PortalQueue
from umcore.dro.routing import Adjacency, RouteInfo, Router, domain_node, dro_node
from umcore.dro.seqwindow import SeqVerdict, SeqWindow

__all__ = [
    "Adjacency",
    "CompiledAcl",
    "CreateProxyReceiver",
    "CreateProxySource",
    "DeleteProxyReceiver",
    "DeleteProxySource",
    "DroCore",
    "FinalAdvertisement",
    "ForwardedFrame",
    "FrameRun",
    "InterestAdded",
    "InterestKey",
    "InterestRemoved",
    "LocalState",
    "MimCounters",
    "MimRoute",
    "MimSendResult",
    "MimStats",
    "PortalCommand",
    "PortalQueue",
    "PortalState",
    "PortalStats",
    "RecalcDone",
    "RecalcHeldUp",
    "ReceiverState",
    "RouteInfo",
    "Router",
    "SeqVerdict",
    "SeqWindow",
    "SourceAdvert",
    "SourceKey",
    "SourceState",
    "SourceTransport",
    "UpdateProxySource",
    "advert_from_tir",
    "compile_acl",
    "domain_node",
    "dro_node",
]
