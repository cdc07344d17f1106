"""What a Store instance reports: frozen slotted events with a log level and a log line.

Theory of operation
-------------------
:class:`StoreCore <umcore.store.core.StoreCore>` hands these out from ``take_events()``.
Every event has ``level`` (a :mod:`logging` level number) and ``text`` (the log line, in the
words of UM's Store log where one exists: "new source for topic ... created. Session ID s RegID
r Indices t.i"); the kind-specific fields serve statistics (UM's UMP statistics events:
SOURCE_REGISTERED, RECEIVER_DELETED ... with a deletion reason) and tests.

:class:`ControlRejected` is also an instruction to the adapter: the peer sent a control message
that does not parse as a store message; the daemon drops that peer's connection.
"""

from __future__ import annotations

import enum
import logging
from dataclasses import dataclass

from umcore.events import CoreEvent

__all__ = [
    "AckDiscarded",
    "ControlRejected",
    "DeletionReason",
    "ProxySourceCreated",
    "ProxySourceDeleted",
    "ReceiverDeleted",
    "ReceiverDeregistered",
    "ReceiverRecreated",
    "ReceiverRegistered",
    "RegistrationRefused",
    "RppRepoEmpty",
    "RppWriting",
    "SourceDeleted",
    "SourceDeregistered",
    "SourceRecreated",
    "SourceRegistered",
    "StoreEvent",
    "TopicCreated",
    "TopicDeleted",
]

INFO = logging.INFO
WARNING = logging.WARNING


class DeletionReason(enum.IntEnum):
    """UM's deletion reasons (ump_mon.proto)."""

    DELETED = 1
    STATE_LIFETIME_EXPIRED = 2
    PROXY_SRC_REREGISTERED = 3
    PROXY_SRC_STATE_LIFETIME_EXPIRED = 4
    SRC_DELETED = 5
    SRC_RECREATED = 6


@dataclass(frozen=True, slots=True)
class StoreEvent(CoreEvent):
    """A plain log line (notices, warnings without a statistics kind)."""

    level: int
    text: str


@dataclass(frozen=True, slots=True)
class TopicCreated(StoreEvent):
    topic: str


@dataclass(frozen=True, slots=True)
class TopicDeleted(StoreEvent):
    topic: str


@dataclass(frozen=True, slots=True)
class SourceRegistered(StoreEvent):
    reg_id: int
    topic: str
    session_id: int
    lead_sqn: int
    old: bool
    rpp: bool


@dataclass(frozen=True, slots=True)
class SourceRecreated(StoreEvent):
    reg_id: int
    topic: str
    lead_sqn: int


@dataclass(frozen=True, slots=True)
class SourceDeleted(StoreEvent):
    reg_id: int
    topic: str
    reason: DeletionReason


@dataclass(frozen=True, slots=True)
class SourceDeregistered(StoreEvent):
    reg_id: int
    topic: str


@dataclass(frozen=True, slots=True)
class ReceiverRegistered(StoreEvent):
    src_reg_id: int
    reg_id: int
    topic: str
    session_id: int
    low_sqn: int
    high_sqn: int
    old: bool
    rpp_mode: int


@dataclass(frozen=True, slots=True)
class ReceiverRecreated(StoreEvent):
    src_reg_id: int
    reg_id: int
    topic: str
    high_ack_sqn: int


@dataclass(frozen=True, slots=True)
class ReceiverDeleted(StoreEvent):
    src_reg_id: int
    reg_id: int
    topic: str
    reason: DeletionReason


@dataclass(frozen=True, slots=True)
class ReceiverDeregistered(StoreEvent):
    src_reg_id: int
    reg_id: int
    topic: str


@dataclass(frozen=True, slots=True)
class RegistrationRefused(StoreEvent):
    source: bool
    topic: str
    reg_id: int
    code: int
    reply_to: tuple[str, int]


@dataclass(frozen=True, slots=True)
class RppWriting(StoreEvent):
    """An RPP source's repository started writing to disk (UM's RPP_WRITING_EVENT): its
    receivers did not consume within the write delay."""

    reg_id: int
    topic: str


@dataclass(frozen=True, slots=True)
class RppRepoEmpty(StoreEvent):
    """An RPP source's repository that was writing holds nothing any more: every receiver
    consumed everything (RPP_REPO_EMPTY_EVENT)."""

    reg_id: int
    topic: str


@dataclass(frozen=True, slots=True)
class AckDiscarded(StoreEvent):
    """A consumption ACK naming a source or receiver this Store holds no state for (one the
    daemon control ``deregister`` removed, say) was discarded.  A peer can send these at will:
    the daemon logs them rate-limited."""

    src_reg_id: int
    rcv_reg_id: int


@dataclass(frozen=True, slots=True)
class ProxySourceCreated(StoreEvent):
    """This Store won the election and runs a proxy source (UM's PROXY_SOURCE_CREATED_EVENT)."""

    reg_id: int
    topic: str
    token: int


@dataclass(frozen=True, slots=True)
class ProxySourceDeleted(StoreEvent):
    """This Store's proxy source was deleted (UM's PROXY_SOURCE_DELETED_EVENT)."""

    reg_id: int
    topic: str
    reason: DeletionReason


@dataclass(frozen=True, slots=True)
class ControlRejected(StoreEvent):
    """A control message from ``peer_ip`` did not parse as a store message: drop the peer."""

    peer_ip: str
