"""Proxy receivers and proxy sources: their life cycles as state machines.

Theory of operation
-------------------
To carry a topic across, the DRO makes a **proxy receiver** in the TRD where sources are (one
per topic, or per pattern for wildcard interest, per ingress portal) and a **proxy source** in
the TRD where receivers are (one per originating source, named by its OTID and topic, per
egress portal) (notes A2).  Proxies exist only while there is interest.

:class:`ProxyReceiver` follows :data:`RECEIVER_TRANSITIONS`: ABSENT until the core finds
interest on another portal that routes through this one (WANTED: command
:class:`~umcore.dro.events.CreateProxyReceiver`), back to ABSENT when that interest is gone
(UNWANTED: :class:`~umcore.dro.events.DeleteProxyReceiver`) or the portal went down (no command:
the portal's contexts are gone with it).

:class:`ProxySource` follows :data:`SOURCE_TRANSITIONS`: ACTIVE once created; when the
originating source is gone from this portal's routes (EOS at the ingress, interest aged out,
a route change) it waits ``source-deletion-delay`` (1000 ms) in DELETE_PENDING -- a source seen
again in that time keeps its proxy -- then sends a burst of final advertisements
(FINAL_ADVERTISING, :data:`FINAL_ADVERTISEMENTS` of them :data:`FINAL_ADVERTISEMENT_INTERVAL`
apart) so receivers see EOS at once and switch paths, then is deleted.  A source seen again
during the burst gets a new proxy after the old one is deleted.  Each step returns the commands
to hand the adapter, in order.
"""

from __future__ import annotations

from enum import Enum

from umcore.dro.events import (
    CreateProxyReceiver,
    CreateProxySource,
    DeleteProxyReceiver,
    DeleteProxySource,
    FinalAdvertisement,
    PortalCommand,
    SourceKey,
    UpdateProxySource,
)
from umcore.dro.interest import InterestKey

__all__ = [
    "FINAL_ADVERTISEMENTS",
    "FINAL_ADVERTISEMENT_INTERVAL",
    "RECEIVER_TRANSITIONS",
    "SOURCE_TRANSITIONS",
    "ProxyReceiver",
    "ProxySource",
    "ReceiverEvent",
    "ReceiverState",
    "SourceEvent",
    "SourceState",
]

# The final-advertisement burst of a deleted proxy source [inferred: the docs say "a burst of
# final advertisements" without a count or spacing].  Three, 100 ms apart, so one lost datagram
# does not cost a receiver its prompt EOS, and the burst ends well inside the 1 s deletion delay
# a following proxy source on another path would wait.
FINAL_ADVERTISEMENTS = 3
FINAL_ADVERTISEMENT_INTERVAL = 0.1


class ReceiverState(Enum):
    ABSENT = "absent"
    ACTIVE = "active"


class ReceiverEvent(Enum):
    WANTED = "wanted"
    UNWANTED = "unwanted"
    PORTAL_DOWN = "portal-down"


RECEIVER_TRANSITIONS: dict[tuple[ReceiverState, ReceiverEvent], ReceiverState] = {
    (ReceiverState.ABSENT, ReceiverEvent.WANTED): ReceiverState.ACTIVE,
    (ReceiverState.ACTIVE, ReceiverEvent.WANTED): ReceiverState.ACTIVE,
    (ReceiverState.ACTIVE, ReceiverEvent.UNWANTED): ReceiverState.ABSENT,
    (ReceiverState.ABSENT, ReceiverEvent.UNWANTED): ReceiverState.ABSENT,
    (ReceiverState.ACTIVE, ReceiverEvent.PORTAL_DOWN): ReceiverState.ABSENT,
    (ReceiverState.ABSENT, ReceiverEvent.PORTAL_DOWN): ReceiverState.ABSENT,
}


class ProxyReceiver:
    """One proxy (wildcard) receiver of one portal."""

    __slots__ = ("key", "portal", "state")

    def __init__(self, portal: str, key: InterestKey) -> None:
        self.portal = portal
        self.key = key
        self.state = ReceiverState.ABSENT

    def step(self, event: ReceiverEvent) -> list[PortalCommand]:
        before = self.state
        self.state = RECEIVER_TRANSITIONS[(before, event)]
        if before is ReceiverState.ABSENT and self.state is ReceiverState.ACTIVE:
            return [CreateProxyReceiver(self.portal, self.key)]
        if before is ReceiverState.ACTIVE and event is ReceiverEvent.UNWANTED:
            return [DeleteProxyReceiver(self.portal, self.key)]
        return []


class SourceState(Enum):
    ABSENT = "absent"
    ACTIVE = "active"
    DELETE_PENDING = "delete-pending"
    FINAL_ADVERTISING = "final-advertising"


class SourceEvent(Enum):
    SEEN = "seen"  # the originating source routes out of this portal
    GONE = "gone"  # it no longer does
    DELAY_ELAPSED = "delay-elapsed"  # source-deletion-delay passed
    FINAL_SENT = "final-sent"  # one final advertisement sent, more to come
    LAST_FINAL_SENT = "last-final-sent"  # the burst is over
    PORTAL_DOWN = "portal-down"


SOURCE_TRANSITIONS: dict[tuple[SourceState, SourceEvent], SourceState] = {
    (SourceState.ABSENT, SourceEvent.SEEN): SourceState.ACTIVE,
    (SourceState.ACTIVE, SourceEvent.SEEN): SourceState.ACTIVE,
    (SourceState.ACTIVE, SourceEvent.GONE): SourceState.DELETE_PENDING,
    (SourceState.DELETE_PENDING, SourceEvent.SEEN): SourceState.ACTIVE,
    (SourceState.DELETE_PENDING, SourceEvent.GONE): SourceState.DELETE_PENDING,
    (SourceState.DELETE_PENDING, SourceEvent.DELAY_ELAPSED): SourceState.FINAL_ADVERTISING,
    (SourceState.FINAL_ADVERTISING, SourceEvent.FINAL_SENT): SourceState.FINAL_ADVERTISING,
    (SourceState.FINAL_ADVERTISING, SourceEvent.LAST_FINAL_SENT): SourceState.ABSENT,
    (SourceState.FINAL_ADVERTISING, SourceEvent.SEEN): SourceState.FINAL_ADVERTISING,
    (SourceState.FINAL_ADVERTISING, SourceEvent.GONE): SourceState.FINAL_ADVERTISING,
    (SourceState.ABSENT, SourceEvent.PORTAL_DOWN): SourceState.ABSENT,
    (SourceState.ACTIVE, SourceEvent.PORTAL_DOWN): SourceState.ABSENT,
    (SourceState.DELETE_PENDING, SourceEvent.PORTAL_DOWN): SourceState.ABSENT,
    (SourceState.FINAL_ADVERTISING, SourceEvent.PORTAL_DOWN): SourceState.ABSENT,
}


class ProxySource:
    """One proxy source of one portal; ``due`` is when its next timed step is (or None)."""

    __slots__ = (
        "cost",
        "deletion_delay",
        "due",
        "finals_left",
        "hop_count",
        "origin_domain",
        "portal",
        "revive",
        "source",
        "state",
    )

    def __init__(
        self,
        portal: str,
        source: SourceKey,
        cost: int,
        hop_count: int,
        origin_domain: int,
        deletion_delay: float,
    ) -> None:
        self.portal = portal
        self.source = source
        self.cost = cost
        self.hop_count = hop_count
        self.origin_domain = origin_domain
        self.deletion_delay = deletion_delay
        self.state = SourceState.ABSENT
        self.due: float | None = None
        self.finals_left = 0
        self.revive = False  # seen again during the final burst: recreate after deletion

    @property
    def forwarding(self) -> bool:
        """Frames go out only while ACTIVE (a pending deletion already stopped the stream)."""
        return self.state is SourceState.ACTIVE

    def seen(self, cost: int, hop_count: int, origin_domain: int) -> list[PortalCommand]:
        before = self.state
        self.state = SOURCE_TRANSITIONS[(before, SourceEvent.SEEN)]
        if self.state is SourceState.FINAL_ADVERTISING:
            self.revive = True
            self.cost, self.hop_count, self.origin_domain = cost, hop_count, origin_domain
            return []
        changed = (cost, hop_count) != (self.cost, self.hop_count)
        self.cost, self.hop_count, self.origin_domain = cost, hop_count, origin_domain
        self.due = None
        if before is SourceState.ABSENT:
            return [CreateProxySource(self.portal, self.source, cost, hop_count, origin_domain)]
        if changed:
            return [UpdateProxySource(self.portal, self.source, cost, hop_count)]
        return []

    def gone(self, now: float) -> list[PortalCommand]:
        before = self.state
        if before is SourceState.ABSENT:
            return []
        self.state = SOURCE_TRANSITIONS[(before, SourceEvent.GONE)]
        if before is SourceState.ACTIVE:
            self.due = now + self.deletion_delay
        if before is SourceState.FINAL_ADVERTISING:
            self.revive = False
        return []

    def timer(self, now: float) -> list[PortalCommand]:
        """The ``due`` time came."""
        self.due = None
        if self.state is SourceState.DELETE_PENDING:
            self.state = SOURCE_TRANSITIONS[(self.state, SourceEvent.DELAY_ELAPSED)]
            self.finals_left = FINAL_ADVERTISEMENTS
        if self.state is not SourceState.FINAL_ADVERTISING:
            return []
        self.finals_left -= 1
        out: list[PortalCommand] = [FinalAdvertisement(self.portal, self.source, self.finals_left)]
        if self.finals_left > 0:
            self.state = SOURCE_TRANSITIONS[(self.state, SourceEvent.FINAL_SENT)]
            self.due = now + FINAL_ADVERTISEMENT_INTERVAL
            return out
        self.state = SOURCE_TRANSITIONS[(self.state, SourceEvent.LAST_FINAL_SENT)]
        out.append(DeleteProxySource(self.portal, self.source))
        if self.revive:
            self.revive = False
            out += self.seen(self.cost, self.hop_count, self.origin_domain)
        return out

    def portal_down(self) -> None:
        self.state = SOURCE_TRANSITIONS[(self.state, SourceEvent.PORTAL_DOWN)]
        self.due = None
        self.revive = False
