"""What persistent sources and receivers report: UM's event codes, message types and their info.

Theory of operation
-------------------
A persistent source reports through its ``on_event(code, info)`` callback (and the source's
event iterator) with UM's ``LBM_SRC_EVENT_*`` numbers (lbm.h 6.17, persistence-store.md 1.16);
``info`` is one of the frozen dataclasses below.  A persistent receiver reports through its
message callback: a :class:`~umcore.engine.message.Message` whose ``type`` is one of UM's
``LBM_MSG_UME_*`` numbers and whose ``info`` is the dataclass for it.  The flag names are UM's.

The sans-IO cores (:mod:`umcore.persist.source`, :mod:`umcore.persist.receiver`) hand these out
from ``take_events()`` as ``(code, info)`` pairs; the engine passes them on unchanged.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from itertools import repeat

from umcore.events import CoreEvent

__all__ = [
    "CONFIRM_FLAG_EXACK",
    "CONFIRM_FLAG_OOD",
    "CONFIRM_FLAG_UNIQUEACKS",
    "CONFIRM_FLAG_UREGID",
    "CONFIRM_FLAG_WHOLE_MESSAGE_CONFIRMED",
    "DEREG_FLAG_RPP",
    "FLIGHT_SIZE_OVER",
    "FLIGHT_SIZE_TYPE_UME",
    "FLIGHT_SIZE_UNDER",
    "MSG_UME_DEREGISTRATION_COMPLETE_EX",
    "MSG_UME_DEREGISTRATION_SUCCESS_EX",
    "MSG_UME_REGISTRATION_CHANGE",
    "MSG_UME_REGISTRATION_COMPLETE_EX",
    "MSG_UME_REGISTRATION_ERROR",
    "MSG_UME_REGISTRATION_SUCCESS_EX",
    "NOT_STABLE_FLAG_LOSS",
    "NOT_STABLE_FLAG_STORE",
    "NOT_STABLE_FLAG_TIMEOUT",
    "RCV_COMPLETE_FLAG_QUORUM",
    "RCV_COMPLETE_FLAG_RXREQMAX",
    "RCV_COMPLETE_FLAG_SRC_SID",
    "RCV_REG_FLAG_NOCACHE",
    "RCV_REG_FLAG_OLD",
    "RCV_REG_FLAG_PROACTIVE_KEEPALIVE",
    "RCV_REG_FLAG_RANGED_RXREQ",
    "RCV_REG_FLAG_RPP",
    "RCV_REG_FLAG_RPP_IS_NON_BLOCKING",
    "RCV_REG_FLAG_SRC_SID",
    "RECLAIMED_FLAG_FORCED",
    "REG_COMPLETE_FLAG_QUORUM",
    "REG_FLAG_NOACKS",
    "REG_FLAG_OLD",
    "REG_FLAG_RPP",
    "SRC_EVENT_FLIGHT_SIZE_NOTIFICATION",
    "SRC_EVENT_SEQUENCE_NUMBER_INFO",
    "SRC_EVENT_UME_DELIVERY_CONFIRMATION_EX",
    "SRC_EVENT_UME_DEREGISTRATION_COMPLETE_EX",
    "SRC_EVENT_UME_DEREGISTRATION_SUCCESS_EX",
    "SRC_EVENT_UME_MESSAGE_NOT_STABLE",
    "SRC_EVENT_UME_MESSAGE_RECLAIMED_EX",
    "SRC_EVENT_UME_MESSAGE_STABLE_EX",
    "SRC_EVENT_UME_REGISTRATION_COMPLETE_EX",
    "SRC_EVENT_UME_REGISTRATION_ERROR",
    "SRC_EVENT_UME_REGISTRATION_SUCCESS_EX",
    "SRC_EVENT_UME_STORE_UNRESPONSIVE",
    "STABLE_FLAG_INTERGROUP",
    "STABLE_FLAG_INTRAGROUP",
    "STABLE_FLAG_STABLE",
    "STABLE_FLAG_STORE",
    "STABLE_FLAG_USER",
    "STABLE_FLAG_WHOLE_MESSAGE_STABLE",
    "DeliveryConfirmation",
    "DeregistrationComplete",
    "FlightSizeNotification",
    "MessageNotStable",
    "MessageReclaimed",
    "MessageStable",
    "RcvDeregistrationComplete",
    "RcvDeregistrationSuccess",
    "RcvRegistrationChange",
    "RcvRegistrationComplete",
    "RcvRegistrationError",
    "RcvRegistrationSuccess",
    "RegistrationComplete",
    "RegistrationError",
    "RegistrationSuccess",
    "SequenceNumberInfo",
    "SourceDeregistrationSuccess",
    "StoreUnresponsive",
    "message_stable",
    "message_stables",
]

# --- source events (LBM_SRC_EVENT_*, lbm.h 6.17) --------------------------------------------------
SRC_EVENT_UME_REGISTRATION_ERROR = 5
SRC_EVENT_UME_STORE_UNRESPONSIVE = 9
SRC_EVENT_UME_REGISTRATION_SUCCESS_EX = 11
SRC_EVENT_UME_REGISTRATION_COMPLETE_EX = 12
SRC_EVENT_UME_MESSAGE_STABLE_EX = 13
SRC_EVENT_UME_DELIVERY_CONFIRMATION_EX = 14
SRC_EVENT_SEQUENCE_NUMBER_INFO = 15
SRC_EVENT_FLIGHT_SIZE_NOTIFICATION = 29
SRC_EVENT_UME_MESSAGE_RECLAIMED_EX = 30
SRC_EVENT_UME_DEREGISTRATION_SUCCESS_EX = 31
SRC_EVENT_UME_DEREGISTRATION_COMPLETE_EX = 32
SRC_EVENT_UME_MESSAGE_NOT_STABLE = 33

# REGISTRATION_SUCCESS_EX flags
REG_FLAG_OLD = 0x1
REG_FLAG_NOACKS = 0x2
REG_FLAG_RPP = 0x4
# REGISTRATION_COMPLETE_EX flags
REG_COMPLETE_FLAG_QUORUM = 0x1
# MESSAGE_STABLE_EX flags
STABLE_FLAG_INTRAGROUP = 0x1  # "IA": stable within a group
STABLE_FLAG_INTERGROUP = 0x2  # "IR": stable across groups
STABLE_FLAG_STABLE = 0x4
STABLE_FLAG_STORE = 0x8  # reported by one Store (store/store_index name it)
STABLE_FLAG_WHOLE_MESSAGE_STABLE = 0x10
STABLE_FLAG_USER = 0x20
# DELIVERY_CONFIRMATION_EX flags
CONFIRM_FLAG_UNIQUEACKS = 0x1
CONFIRM_FLAG_UREGID = 0x2
CONFIRM_FLAG_OOD = 0x4
CONFIRM_FLAG_EXACK = 0x8
CONFIRM_FLAG_WHOLE_MESSAGE_CONFIRMED = 0x10
# MESSAGE_RECLAIMED_EX flags
RECLAIMED_FLAG_FORCED = 0x1
# MESSAGE_NOT_STABLE flags
NOT_STABLE_FLAG_STORE = 0x8
NOT_STABLE_FLAG_LOSS = 0x40
NOT_STABLE_FLAG_TIMEOUT = 0x80
# FLIGHT_SIZE_NOTIFICATION type and state
FLIGHT_SIZE_TYPE_UME = 1
FLIGHT_SIZE_OVER = 1
FLIGHT_SIZE_UNDER = 2

# --- receiver message types (lbm_msg_t.type) ---------------------------------------------------
MSG_UME_REGISTRATION_ERROR = 7
MSG_UME_REGISTRATION_CHANGE = 9
MSG_UME_REGISTRATION_SUCCESS_EX = 10
MSG_UME_REGISTRATION_COMPLETE_EX = 11
MSG_UME_DEREGISTRATION_SUCCESS_EX = 12
MSG_UME_DEREGISTRATION_COMPLETE_EX = 13

# receiver REGISTRATION_SUCCESS_EX flags
RCV_REG_FLAG_OLD = 0x1
RCV_REG_FLAG_NOCACHE = 0x2
RCV_REG_FLAG_RPP = 0x4
RCV_REG_FLAG_SRC_SID = 0x8
RCV_REG_FLAG_RPP_IS_NON_BLOCKING = 0x10
RCV_REG_FLAG_PROACTIVE_KEEPALIVE = 0x20
RCV_REG_FLAG_RANGED_RXREQ = 0x40
# receiver REGISTRATION_COMPLETE_EX flags
RCV_COMPLETE_FLAG_QUORUM = 0x1
RCV_COMPLETE_FLAG_RXREQMAX = 0x2
RCV_COMPLETE_FLAG_SRC_SID = 0x4
# receiver DEREGISTRATION_SUCCESS_EX flags
DEREG_FLAG_RPP = 0x1


# --- source event infos ----------------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class RegistrationError(CoreEvent):
    """SRC_EVENT_UME_REGISTRATION_ERROR: ``text`` as UM logs it (names the Store)."""

    text: str
    store_index: int = 0


@dataclass(frozen=True, slots=True)
class RegistrationSuccess(CoreEvent):
    """SRC_EVENT_UME_REGISTRATION_SUCCESS_EX: one Store accepted the source.  ``sequence_number``
    is the last one that Store holds (OLD) or 0; ``store`` is ``ip:port`` (at most 24 chars)."""

    flags: int
    registration_id: int
    sequence_number: int
    store_index: int
    store: str


@dataclass(frozen=True, slots=True)
class RegistrationComplete(CoreEvent):
    """SRC_EVENT_UME_REGISTRATION_COMPLETE_EX: enough Stores answered; ``sequence_number`` is the
    consensus sequence number (the next message takes ``sequence_number + 1`` after an OLD
    re-registration, 0 for a new source)."""

    flags: int
    sequence_number: int


@dataclass(frozen=True, slots=True)
class MessageStable(CoreEvent):
    """SRC_EVENT_UME_MESSAGE_STABLE_EX."""

    flags: int
    sequence_number: int
    store_index: int = 0
    store: str = ""
    msg_clientd: object = None


# The data path builds one MessageStable per message and Store.  A frozen dataclass's __init__
# stores each field through object.__setattr__ (a lookup and a call per field: ~1.4 us for
# five); the slots' own descriptors store the same values at half that.  Same object (equal,
# frozen), only built faster.
_new = object.__new__
_ms_flags, _ms_sqn, _ms_index, _ms_store, _ms_clientd = (
    vars(MessageStable)[f].__set__
    for f in ("flags", "sequence_number", "store_index", "store", "msg_clientd")
)


def message_stable(
    flags: int, sequence_number: int, store_index: int, store: str, msg_clientd: object
) -> MessageStable:
    """``MessageStable(flags, sequence_number, store_index, store, msg_clientd)``, faster."""
    ev: MessageStable = _new(MessageStable)
    _ms_flags(ev, flags)
    _ms_sqn(ev, sequence_number)
    _ms_index(ev, store_index)
    _ms_store(ev, store)
    _ms_clientd(ev, msg_clientd)
    return ev


# Runs an iterator to its end, keeping nothing (a deque of length 0 takes it C-level).
_drain: Callable[[Iterable[object]], None] = deque[object](maxlen=0).extend


def message_stables(
    flags: int,
    sequence_numbers: Iterable[int],
    n: int,
    store_index: int,
    store: str,
    clientds: Iterable[object],
) -> list[MessageStable]:
    """``n`` MessageStables alike but for their sequence numbers and clientds (one Store's
    ranged ACK): :func:`message_stable`'s steps each done for all of them by ``map`` (C-level
    iteration, no Python frame per event: a quarter less per event than calling it n times)."""
    evs: list[MessageStable] = list(map(_new, repeat(MessageStable, n)))
    _drain(map(_ms_flags, evs, repeat(flags, n)))
    _drain(map(_ms_sqn, evs, sequence_numbers))
    _drain(map(_ms_index, evs, repeat(store_index, n)))
    _drain(map(_ms_store, evs, repeat(store, n)))
    _drain(map(_ms_clientd, evs, clientds))
    return evs


@dataclass(frozen=True, slots=True)
class DeliveryConfirmation(CoreEvent):
    """SRC_EVENT_UME_DELIVERY_CONFIRMATION_EX."""

    flags: int
    sequence_number: int
    rcv_registration_id: int
    msg_clientd: object = None


@dataclass(frozen=True, slots=True)
class StoreUnresponsive(CoreEvent):
    """SRC_EVENT_UME_STORE_UNRESPONSIVE: ``text`` contains "(quorum lost)" when it is."""

    text: str
    store_index: int = 0
    quorum_lost: bool = False


@dataclass(frozen=True, slots=True)
class MessageReclaimed(CoreEvent):
    """SRC_EVENT_UME_MESSAGE_RECLAIMED_EX (FORCED: released before it was stable)."""

    flags: int
    sequence_number: int
    msg_clientd: object = None


@dataclass(frozen=True, slots=True)
class MessageNotStable(CoreEvent):
    """SRC_EVENT_UME_MESSAGE_NOT_STABLE."""

    flags: int
    sequence_number: int
    store_index: int = 0
    store: str = ""
    msg_clientd: object = None


@dataclass(frozen=True, slots=True)
class SourceDeregistrationSuccess(CoreEvent):
    """SRC_EVENT_UME_DEREGISTRATION_SUCCESS_EX."""

    registration_id: int
    sequence_number: int
    store_index: int
    store: str


@dataclass(frozen=True, slots=True)
class DeregistrationComplete(CoreEvent):
    """SRC_EVENT_UME_DEREGISTRATION_COMPLETE_EX (and the receiver's DEREGISTRATION_COMPLETE_EX)."""


@dataclass(frozen=True, slots=True)
class FlightSizeNotification(CoreEvent):
    """SRC_EVENT_FLIGHT_SIZE_NOTIFICATION: ``state`` OVER (1) or UNDER (2)."""

    type: int
    state: int


@dataclass(frozen=True, slots=True)
class SequenceNumberInfo(CoreEvent):
    """SRC_EVENT_SEQUENCE_NUMBER_INFO: the sequence numbers one send took."""

    first_sequence_number: int
    last_sequence_number: int
    msg_clientd: object = None


# --- receiver message infos --------------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class RcvRegistrationError(CoreEvent):
    """LBM_MSG_UME_REGISTRATION_ERROR."""

    text: str
    store_index: int = 0


@dataclass(frozen=True, slots=True)
class RcvRegistrationSuccess(CoreEvent):
    """LBM_MSG_UME_REGISTRATION_SUCCESS_EX: ``sequence_number`` is where this Store would start
    the receiver's recovery (its low sequence number)."""

    flags: int
    src_registration_id: int
    rcv_registration_id: int
    sequence_number: int
    store_index: int
    store: str
    src_session_id: int = 0


@dataclass(frozen=True, slots=True)
class RcvRegistrationComplete(CoreEvent):
    """LBM_MSG_UME_REGISTRATION_COMPLETE_EX: ``sequence_number`` is the first message recovery
    delivers (after ``retransmit_request_maximum`` and the recovery-sequence callback)."""

    flags: int
    sequence_number: int
    src_session_id: int = 0


@dataclass(frozen=True, slots=True)
class RcvRegistrationChange(CoreEvent):
    """LBM_MSG_UME_REGISTRATION_CHANGE: the source's Store information changed."""

    text: str


@dataclass(frozen=True, slots=True)
class RcvDeregistrationSuccess(CoreEvent):
    """LBM_MSG_UME_DEREGISTRATION_SUCCESS_EX."""

    flags: int
    src_registration_id: int
    rcv_registration_id: int
    sequence_number: int
    store_index: int
    store: str


@dataclass(frozen=True, slots=True)
class RcvDeregistrationComplete(CoreEvent):
    """LBM_MSG_UME_DEREGISTRATION_COMPLETE_EX."""
