"""What the DRO core hands its adapters: commands for proxies and events worth a log line.

Theory of operation
-------------------
Every output is a frozen, slotted dataclass deriving from :class:`umcore.events.CoreEvent`.
*Commands* (``Create*``/``Delete*``/``FinalAdvertisement``/``UpdateProxySource``) tell a portal
adapter to make, change or remove a proxy receiver or proxy source in its TRD; they come out of
:meth:`DroCore.take_commands <umcore.dro.core.DroCore.take_commands>` in the order they must be
applied.  *Events* (``InterestAdded``... ``RecalcHeldUp``) report what changed, for logs and
monitoring, out of ``take_events``.  :class:`SourceKey` names an originating source everywhere:
its Originating Transport ID (OTID, 32 bytes carried in topic advertisements, notes A2/A5) and
its topic, since one transport carries many topics (the SRS keys sources the same way).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import NamedTuple

from umcore.dro.interest import InterestKey
from umcore.events import CoreEvent

__all__ = [
    "CreateProxyReceiver",
    "CreateProxySource",
    "DeleteProxyReceiver",
    "DeleteProxySource",
    "FinalAdvertisement",
    "InterestAdded",
    "InterestRemoved",
    "PortalCommand",
    "RecalcDone",
    "RecalcHeldUp",
    "SourceKey",
    "UpdateProxySource",
]


class SourceKey(NamedTuple):
    """An originating source: Originating Transport ID and topic.  A named tuple, not a
    dataclass: it is the key of the data path's per-frame lookup, and a tuple hashes in C."""

    otid: bytes
    topic: str


@dataclass(frozen=True, slots=True)
class PortalCommand(CoreEvent):
    """Base of the commands: ``portal`` is the portal's configured name."""

    portal: str


@dataclass(frozen=True, slots=True)
class CreateProxyReceiver(PortalCommand):
    """Receive ``key`` in the portal's TRD: a receiver for a topic, a wildcard receiver for a
    pattern (``key.pattern_type`` 1 PCRE, 2 REGEX)."""

    key: InterestKey


@dataclass(frozen=True, slots=True)
class DeleteProxyReceiver(PortalCommand):
    key: InterestKey


@dataclass(frozen=True, slots=True)
class CreateProxySource(PortalCommand):
    """Advertise ``source`` in the portal's TRD and send its forwarded frames.  The proxy's TIRs
    carry the OTID option (``source.otid``), the COST option (``cost``, ``hop_count``) and the
    DOMAIN_ID option (``origin_domain``); it keeps no retransmission buffer."""

    source: SourceKey
    cost: int
    hop_count: int
    origin_domain: int


@dataclass(frozen=True, slots=True)
class UpdateProxySource(PortalCommand):
    """The route changed: advertise the new cost and hop count from now on."""

    source: SourceKey
    cost: int
    hop_count: int


@dataclass(frozen=True, slots=True)
class FinalAdvertisement(PortalCommand):
    """Send one final advertisement of a proxy source being deleted (so receivers, including
    other DROs' proxy receivers, see EOS at once); ``remaining`` more follow."""

    source: SourceKey
    remaining: int


@dataclass(frozen=True, slots=True)
class DeleteProxySource(PortalCommand):
    source: SourceKey


@dataclass(frozen=True, slots=True)
class InterestAdded(CoreEvent):
    """Receivers in ``domain`` behind ``portal`` want ``key``."""

    portal: str
    key: InterestKey
    domain: int


@dataclass(frozen=True, slots=True)
class InterestRemoved(CoreEvent):
    portal: str
    key: InterestKey
    domain: int


@dataclass(frozen=True, slots=True)
class RecalcDone(CoreEvent):
    """Routes were recalculated (UM logs ``RecalcTrigger``); ``version`` counts recalculations."""

    version: int
    domains: int
    dros: int


@dataclass(frozen=True, slots=True)
class RecalcHeldUp(CoreEvent):
    """The topology has not settled for ``warning-interval``: recalculation still waits."""

    waiting: float
