"""What joins a :class:`~umcore.dro.peer.PeerLink` to the :class:`~umcore.dro.DroCore` (sans-IO).

Theory of operation
-------------------
The routing core speaks of portals; a peer portal's link speaks bytes.  The daemon's runtime
takes the core's outputs once per turn and hands each portal its share; for a peer portal these
functions turn that share into link calls, and the link's events and frames back into core
inputs.  Everything stays sans-IO: the runtime (or a test) calls them with ``now``.

Core -> link (call for the outputs whose portal is this peer portal):

* :func:`link_command` -- ``CreateProxySource``/``UpdateProxySource`` advertise the source to
  the other DRO, the first ``FinalAdvertisement`` and ``DeleteProxySource`` withdraw it; proxy
  receiver commands need no message on a peer link (the interest records already told the
  other DRO what we receive) and return False;
* :func:`link_lbmr` -- the core's TNWG interest for this portal, one interest record each (other
  LBMR bodies are topic resolution for endpoints and are not sent over a link);
* ``link.send_route_info(info, now)`` for each ``take_route_info()`` entry of this portal;
* :func:`drain_queue` -- forwarded frames from the core's egress queue while the link is
  writable (what does not fit stays in that queue, which drops and counts past max-queue).

Persistence (:mod:`umcore.dro.persist`): a source's persistent identity travels with its
advertisement, and the core's ``take_controls`` entries for this portal (SRIs) go out with
``link.send_sri``; a received SRI is ``receive_control``.

Late join and OTR (:mod:`umcore.dro.recovery`): a source advertised with ``late_join`` (the
core's recovery forwarder offers it) tells the other DRO to forward requests for it over the
link; a received ``RecoveryReceived`` goes to ``core.recovery.receive_peer_message`` (what that
forwarder sends over this link, ``take_peer_sends``, goes out with ``link.send_recovery``).

Immediate messages (UIMs, MIMs) are not the core's: what the daemon's forwarders route over
the link goes out with ``link.send_immediate``, and :func:`deliver` leaves the
``ImmediateReceived`` events it returns to them (``daemons.tnwgd.peerportal``).

Link -> core: :func:`deliver` (events and frames).  A ``LinkUp`` is
``receive_portal_up(peer_node_id=...)``, a ``LinkDown`` is ``receive_portal_down``; route
information, interest and sources go to the matching ``receive_*``; frames to
``receive_frame``.
"""

from __future__ import annotations

from collections.abc import Callable

from umcore.dro.core import DroCore, SourceAdvert
from umcore.dro.events import (
    CreateProxySource,
    DeleteProxySource,
    FinalAdvertisement,
    PortalCommand,
    SourceKey,
    UpdateProxySource,
)
from umcore.dro.interest import InterestKey
from umcore.dro.peer import (
    ControlReceived,
    InterestReceived,
    LinkDown,
    LinkUp,
    PeerLink,
    RecoveryReceived,
    RouteInfoReceived,
    SourceGoneReceived,
    SourceReceived,
)
from umcore.dro.persist import PersistIdentity
from umcore.events import CoreEvent
from umcore.wire import lbmc, lbmr
from umcore.wire.lbmr_ext import (
    TNWG_INTEREST_FLAG_CANCEL,
    TNWG_INTEREST_FLAG_PATTERN,
    TNWG_INTEREST_FLAG_REFRESH,
)

__all__ = ["deliver", "drain_queue", "link_command", "link_lbmr"]


def link_command(
    link: PeerLink,
    cmd: PortalCommand,
    now: float,
    persist: PersistIdentity | None = None,
    *,
    late_join: Callable[[SourceKey], bool] | None = None,
) -> bool:
    """Send what ``cmd`` (for ``link``'s portal) means on the link; False if nothing.
    ``persist``: the source's persistent identity (``DroCore.persistence``), advertised with
    it (:mod:`umcore.dro.persist`); ``late_join(source)``: the source offers late join
    (``core.recovery.offers_late_join``)."""
    lj = False
    if late_join is not None and isinstance(cmd, (CreateProxySource, UpdateProxySource)):
        lj = late_join(cmd.source)
    if isinstance(cmd, CreateProxySource):
        return link.send_source(
            cmd.source, cmd.cost, cmd.hop_count, cmd.origin_domain, now, persist=persist,
            late_join=lj,
        )  # fmt: skip
    if isinstance(cmd, UpdateProxySource):
        return link.send_source(
            cmd.source, cmd.cost, cmd.hop_count, None, now, change=True, persist=persist,
            late_join=lj,
        )  # fmt: skip
    if isinstance(cmd, (FinalAdvertisement, DeleteProxySource)):
        # the burst is for UM receivers' EOS; over a link the first one withdraws the source
        # and the rest (and the deletion) find nothing left to withdraw
        return link.send_source_gone(cmd.source, now)
    return False


def link_lbmr(link: PeerLink, packet: lbmr.LBMRPacket, now: float) -> int:
    """Send the interest records of one of the core's LBMR packets for this portal; returns
    how many records were sent."""
    body = packet.body
    if not isinstance(body, lbmr.TNWGInterest):
        return 0
    sent = 0
    for rec in body.records:
        pattern = bool(rec.flags & TNWG_INTEREST_FLAG_PATTERN)
        key = InterestKey(rec.symbol, rec.pattern_type if pattern else 0)
        sent += link.send_interest(
            key,
            rec.domain_id,
            now,
            cancel=bool(rec.flags & TNWG_INTEREST_FLAG_CANCEL),
            refresh=bool(rec.flags & TNWG_INTEREST_FLAG_REFRESH),
        )
    return sent


def drain_queue(core: DroCore, link: PeerLink, now: float) -> int:
    """Move frames from the core's egress queue of this portal to the link while it is
    writable; returns how many moved."""
    queue = core.queue(link.portal)
    moved = 0
    while link.writable:
        frame = queue.peek()
        if frame is None:
            break
        queue.pop()
        link.send_data(SourceKey(frame.otid, frame.topic), frame.sqn, frame.data, now)
        moved += 1
    return moved


def deliver(core: DroCore, link: PeerLink, now: float) -> list[CoreEvent]:
    """Hand the link's events and frames to the core; returns the events (for logs)."""
    portal = link.portal
    events = link.take_events()
    for ev in events:
        if isinstance(ev, LinkUp):
            core.receive_portal_up(portal, now, peer_node_id=ev.node_id)
        elif isinstance(ev, LinkDown):
            core.receive_portal_down(portal, now)
        elif isinstance(ev, RouteInfoReceived):
            core.receive_route_info(portal, ev.info, now)
        elif isinstance(ev, InterestReceived):
            core.receive_interest(portal, ev.key, ev.domain, now, cancel=ev.cancel)
        elif isinstance(ev, SourceReceived):
            if ev.late_join:  # before the core creates proxy sources of it
                core.recovery.receive_peer_offer(portal, ev.source)
            advert = SourceAdvert(
                ev.source, None, ev.cost, ev.hop_count, ev.origin_domain, ev.persist
            )
            core.receive_source(portal, advert, now)
        elif isinstance(ev, SourceGoneReceived):
            core.receive_source_gone(portal, ev.source, now)
        elif isinstance(ev, RecoveryReceived):
            try:
                msg = lbmc.decode(ev.message)
            except lbmc.LBMCError:
                core.recovery.stats.unknown_reply += 1  # not a message: nothing to forward
            else:
                core.recovery.receive_peer_message(portal, ev.source, msg, now)
        elif isinstance(ev, ControlReceived):
            core.receive_control(portal, ev.source, ev.frame, now)
    for source, sqn, data in link.take_frames():
        core.receive_frame(portal, source, sqn, data)
    return events
