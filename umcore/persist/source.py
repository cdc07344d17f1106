"""PersistentSource: the sans-IO machine of one persistent source (its Stores, stability, flight).

Theory of operation
-------------------
A persistent source (persistence-store.md 1.2-1.6, 1.11, 1.12, 1.14) names its Stores by
``ume_store`` (address) or ``ume_store_name`` (a Store's ``context-name``, resolved by the
engine and given to :meth:`PersistentSource.set_store_address`), each with an optional RegID
and QC group (``ume_store_group`` sizes the groups; without it a group's size is the count of
its Stores).  Every limit below is a named constant saying why.

1. **Registration.**  :meth:`~PersistentSource.start` sends a PREG (S=1) to every known Store:
   the RegID the Store gave us before, else the configured one, else 0 = "assign"; the Session
   ID; the client activity timeout / state lifetime; proxy and RPP requests.  A Store that has
   not answered is asked again every ``ume_registration_interval``, and so is one that refused
   (``REGISTRATION_ERROR``, text naming the Store).  Each success is one
   ``REGISTRATION_SUCCESS_EX`` (OLD, NOACKS, RPP; sequence number = the last the Store holds,
   OLD, else 0).
2. **Registration Complete** when the QC rules hold for the registered Stores
   (``ume_retention_intragroup_stability_behavior``: a group is complete with a majority of its
   Stores registered, all of them for ``all``; ``ume_retention_intergroup_stability_behavior``:
   any / a majority of / all active / all groups complete) AND either every Store answered or
   one full ``ume_registration_interval`` passed since :meth:`start` (trap 5).  The consensus
   sequence number is taken over the OLD answers' last stored sequence numbers by
   ``ume_consensus_sequence_number_behavior`` (default *highest* for sources, trap 4; majority
   = the lower median, as the receiver's): :attr:`next_sqn` is consensus + 1, or 0 for a new
   source (no OLD answer holding a message).  :meth:`send_check` is None from then on while
   the QC rules hold; else UM's ``LBM_EUMENOREG`` text.
3. **SRI** (Source Registration Information) goes on the source's transport
   (:meth:`take_transport`, a CONTROL message carrying TOPIC_IDX): after Complete and after each
   registration change, ``ume_sri_max_number_of_sri_per_update`` of them
   ``ume_sri_inter_sri_interval`` apart; an SRI_REQ is answered at once
   (``ume_sri_immediate_sri_request_response``) or after ``ume_sri_request_response_latency``
   (one answer for all requests in that time).  The overall version starts at 1 and grows with
   every change; a Store's own version starts at 1 and grows each time it is re-registered
   after being unresponsive (or moved), so receivers re-register only with it (1.4).  An SRI
   lists every Store the source has a RegID at.
4. **Stability.**  :meth:`message_sent` appends each fragment to a window (flat lists with a
   head offset: O(1) per fragment, no per-fragment object).  A stability ACK ``first..last``
   sets the Store's bit in each fragment's mask: O(range) -- for a range of one-fragment
   messages alike (the data path: a Store ACKs what it wrote, sent alike) in bulk, by slices
   and one comprehension for the events; the send gate reads one attribute (:attr:`clear`).  A fragment is *stable* when the QC
   rules hold for the ACK bits (memoised per distinct mask); per
   ``ume_message_stability_notification`` each Store's ACK is a ``MESSAGE_STABLE_EX`` with
   STORE (and IA when the Store's group is stable, IR|STABLE when the message is) -- modes 1
   and 3 -- and a whole message once per message with IA|IR|STABLE -- modes 2 and 3, the latter
   with WHOLE_MESSAGE_STABLE; its sequence number is the message's last fragment [inferred].
   A stability NAK (the Store declared the message lost) is a ``MESSAGE_NOT_STABLE`` (STORE,
   LOSS) for that Store; when the Stores left can no longer make it stable the fragment is
   given up (``MESSAGE_NOT_STABLE`` LOSS).
5. **Flight.**  A fragment is in flight until stable (or given up) and, with
   ``ume_retention_unique_confirmations`` N, confirmed by N distinct receivers.
   :attr:`flight_blocked` is in-flight fragments >= ``ume_flight_size`` or in-flight payload
   bytes >= ``ume_flight_size_bytes`` (when set; exceeding either limit triggers the behaviour,
   trap 31).  Block: the engine holds sends while blocked and :meth:`take_unblocked` says when
   to wake them.  Notify: a send made while blocked gives ``FLIGHT_SIZE_NOTIFICATION`` OVER,
   falling below gives UNDER.  Fragments that left flight in sequence order are
   :meth:`take_released` (retention may drop them).
6. **Store activity.**  Any message from a Store is activity.  Every ``ume_store_check_interval``
   a registered Store silent for ``ume_store_activity_timeout`` is ``STORE_UNRESPONSIVE``
   ("store N [ip:port] unresponsive", with " (quorum lost)" when the QC rules no longer hold:
   sends then fail); a Store that never answered its PREG for that long is reported once as
   "... unresponsive - no registration response.".  An unresponsive Store is asked again at once
   and every registration interval; its success bumps the SRI versions.  Stability of pending
   messages is re-evaluated without it (``all-active``).  A Store keepalive with R (response
   requested) is answered with a source keepalive.
7. **Scan.**  Every check interval the unstable fragments are scanned: older than
   ``ume_message_stability_lifetime`` -> given up (``MESSAGE_NOT_STABLE`` TIMEOUT); older than
   ``ume_message_stability_timeout`` (0 = off) since sent or last re-sent -> a proactive
   retransmission to the registered Stores that have not ACKed it (:meth:`take_retransmissions`;
   the engine builds the frames).
8. **Delivery confirmation.**  A ConsumptionAck addressed to the source (``id_2`` = our topic
   index) confirms that one sequence number for receiver ``rcv_reg_id`` [inferred: UM confirms
   per message]; with ``ume_confirmed_delivery_notification`` != 0 it is a
   ``DELIVERY_CONFIRMATION_EX`` (1 per fragment, 2 per message: on its last fragment, 3 both,
   the per-message one with WHOLE_MESSAGE_CONFIRMED; UREGID/EXACK/OOD from the ACK's U/E/O
   flags; UNIQUEACKS once N distinct receivers confirmed).
9. **Deregistration**: a PREG D=1 to each registered Store (again every registration interval
   until answered); each answer is ``DEREGISTRATION_SUCCESS_EX``, all of them
   ``DEREGISTRATION_COMPLETE_EX``; the source may not send any more.

States are :class:`SourceState` / :class:`StoreState` with one transition table each.  Sequence
numbers are 32-bit with serial-number arithmetic (trap 9).  Time is the ``now`` argument.
Not done here: round-robin ``ume_store_behavior`` (legacy; the option only allows qc), proxy
election (the Stores' business), retention and reclaim events (the engine's retention buffer).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from enum import Enum
from itertools import repeat
from operator import itemgetter
from typing import Any, Protocol

from umcore.config.values import StoreEntry, StoreGroupEntry, StoreNameEntry
from umcore.errors import ConfigError, LocalProtocolError
from umcore.events import CoreEvent
from umcore.persist.consensus import BEHAVIORS
from umcore.persist.consensus import consensus as consensus_of
from umcore.persist.events import (
    CONFIRM_FLAG_EXACK,
    CONFIRM_FLAG_OOD,
    CONFIRM_FLAG_UNIQUEACKS,
    CONFIRM_FLAG_UREGID,
    CONFIRM_FLAG_WHOLE_MESSAGE_CONFIRMED,
    FLIGHT_SIZE_OVER,
    FLIGHT_SIZE_TYPE_UME,
    FLIGHT_SIZE_UNDER,
    NOT_STABLE_FLAG_LOSS,
    NOT_STABLE_FLAG_STORE,
    NOT_STABLE_FLAG_TIMEOUT,
    REG_COMPLETE_FLAG_QUORUM,
    REG_FLAG_NOACKS,
    REG_FLAG_OLD,
    REG_FLAG_RPP,
    SRC_EVENT_FLIGHT_SIZE_NOTIFICATION,
    SRC_EVENT_UME_DELIVERY_CONFIRMATION_EX,
    SRC_EVENT_UME_DEREGISTRATION_COMPLETE_EX,
    SRC_EVENT_UME_DEREGISTRATION_SUCCESS_EX,
    SRC_EVENT_UME_MESSAGE_NOT_STABLE,
    SRC_EVENT_UME_MESSAGE_STABLE_EX,
    SRC_EVENT_UME_REGISTRATION_COMPLETE_EX,
    SRC_EVENT_UME_REGISTRATION_ERROR,
    SRC_EVENT_UME_REGISTRATION_SUCCESS_EX,
    SRC_EVENT_UME_STORE_UNRESPONSIVE,
    STABLE_FLAG_INTERGROUP,
    STABLE_FLAG_INTRAGROUP,
    STABLE_FLAG_STABLE,
    STABLE_FLAG_STORE,
    STABLE_FLAG_WHOLE_MESSAGE_STABLE,
    DeliveryConfirmation,
    DeregistrationComplete,
    FlightSizeNotification,
    MessageNotStable,
    RegistrationComplete,
    RegistrationError,
    RegistrationSuccess,
    SourceDeregistrationSuccess,
    StoreUnresponsive,
    message_stable,
    message_stables,
)
from umcore.store import compose
from umcore.wire import lbmc

__all__ = [
    "EUMENOREG_TEXT",
    "MAX_CONFIRM_TRACKED",
    "MAX_GAP_FILL",
    "MAX_LAGGING_FRAGMENTS",
    "MAX_PENDING_EVENTS",
    "MAX_PENDING_OUTPUT",
    "SOURCE_TRANSITIONS",
    "STORE_TRANSITIONS",
    "PersistentSource",
    "SourceConfig",
    "SourceInput",
    "SourceState",
    "StoreInput",
    "StoreSpec",
    "StoreState",
]

Address = tuple[str, int]
_M = 0xFFFFFFFF
_HALF = 0x80000000
NO_SQN = compose.NO_SQN

#: UM's LBM_EUMENOREG text: sends refused before Complete, after quorum loss, once deregistered.
EUMENOREG_TEXT = "not currently registered with enough UMP stores"
# Outputs waiting for take_*(): the engine takes them after every input, so these are never
# approached in normal operation; they bound memory if an engine stops taking.  What does not
# fit is dropped and counted (*_dropped in stats()).
MAX_PENDING_EVENTS = 1 << 20  # per-Store stability events at 100k msg/s x 3 Stores: ~3 s worth
MAX_PENDING_OUTPUT = 65536  # sends, SRIs, retransmissions, released sqns per take
# Fragments kept past stability only so late Stores' ACKs still give their per-Store events:
# beyond this many tracked fragments the oldest stable one is dropped (its late ACKs counted in
# acks_outside) -- bounds memory when a registered Store ACKs nothing.
MAX_LAGGING_FRAGMENTS = 1 << 20
# A send that skips sequence numbers (the engine never does) fills at most this many as
# already-done placeholders; a larger jump restarts the window (everything in it given up).
MAX_GAP_FILL = 65536
# Sequence numbers whose distinct confirming receivers are counted (unique confirmations);
# past it the oldest is forgotten (counted): bounds memory when receivers never confirm.
MAX_CONFIRM_TRACKED = 1 << 20
# Distinct ACK patterns whose QC verdict is memoised; a pattern is a set of Store bits, so 25
# Stores could make 2^25: past this the memo starts again.
_MAX_MEMO = 4096
# The window's lists are compacted when this many entries before the head are dead.
_COMPACT_AT = 65536
# LBM_UME_MAX_STORE_STRLEN: a Store string in an event is at most 24 characters.
_STORE_STRLEN = 24
# Session IDs: 64-bit, 0 = none, at most 0xFFFFFFFFFFFFFFFE.
_MAX_SESSION_ID = 0xFFFFFFFFFFFFFFFE

# Bits of a fragment's mask: Store i's ACK is bit i (i < 25); its NAK bit i + _NAK_SHIFT.
_ACK_BITS = (1 << compose.MAX_STORES) - 1
_NAK_SHIFT = 32
_STABLE = 1 << 25  # stable by the QC rules
_GONE = 1 << 26  # given up (lifetime, losses): never stable
_CONF = 1 << 27  # unique confirmations met (set at once when none are required)
_LEFT = 1 << 28  # left flight (stable or gone, and confirmed)
_RETX = 1 << 29  # proactively retransmitted at least once
# Message record, indices.  A one-fragment message's record is a tuple: CPython stops tracking a
# tuple of untracked values (numbers, None, a str) at the first collection it meets, so records
# never age into the collector's oldest generation, whose full scans (70-250 ms on a loaded
# 2-core machine) were the longest stalls of stability events (bench/persist at 50,000 msgs/s).
# Its UNSTABLE/INFLIGHT/GONE fields are not kept: for one fragment the mask says them (_STABLE,
# _LEFT, _GONE); only _R_DUE changes, by a new tuple (:func:`_rec_set`, the proactive
# retransmission scan).  A fragmented message's record is one list shared by its fragments,
# whose counters are the message's.
_R_FIRST, _R_LAST, _R_BYTES, _R_CLIENTD, _R_SENT, _R_UNSTABLE, _R_INFLIGHT, _R_DUE, _R_GONE = range(
    9
)
_bytes_of = itemgetter(_R_BYTES)
_clientd_of = itemgetter(_R_CLIENTD)


def _rec_set(recs: list[Any], i: int, field: int, value: Any) -> Any:
    """Set ``field`` of the record at ``recs[i]``; returns the record (a new tuple when it was
    one)."""
    rec = recs[i]
    if type(rec) is tuple:
        rec = recs[i] = (*rec[:field], value, *rec[field + 1 :])
    else:
        rec[field] = value
    return rec


_INTRA = ("quorum", "all-active", "all")
_INTER = ("any", "majority", "all-active", "all")


# ==============================================================================================
# Configuration
# ==============================================================================================


class OptionReader(Protocol):
    """What :meth:`SourceConfig.from_options` reads (umcore.engine.options.Options has it)."""

    def get(self, name: str) -> Any: ...
    def seconds(self, name: str) -> float: ...


@dataclass(frozen=True, slots=True)
class StoreSpec:
    """One Store of the source: ``address`` None for a named Store not resolved yet."""

    address: Address | None
    name: str | None
    domain_id: int
    reg_id: int
    group: int


def _cfg_error(what: str, message: str, allowed: str | None = None) -> ConfigError:
    return ConfigError(message, source="API", what=what, allowed=allowed)


@dataclass(frozen=True, slots=True)
class SourceConfig:
    """A persistent source's settings, all from the option registry (times in seconds)."""

    stores: tuple[StoreSpec, ...]
    groups: tuple[tuple[int, int], ...]  # (index, size) for every group a Store is in
    intragroup: str  # quorum | all-active | all
    intergroup: str  # any | majority | all-active | all
    consensus: str  # lowest | majority | highest
    flight_size: int
    flight_size_bytes: int  # 0 = off
    flight_size_behavior_block: bool  # True = Block, False = Notify
    registration_interval: float
    store_check_interval: float
    store_activity_timeout: float
    activity_timeout_ms: int
    state_lifetime_ms: int
    session_id: int
    stability_notification: int  # 0 none, 1 per fragment, 2 per message, 3 both
    stability_timeout: float  # 0 = no proactive retransmission
    stability_lifetime: float  # 0 = never given up [inferred]
    sri_inter_sri_interval: float
    sri_max_per_update: int
    sri_immediate: bool
    sri_response_latency: float
    rpp: bool
    rpp_options: tuple[tuple[str, int], ...]
    proxy: bool
    confirmed_delivery_notification: int  # 0 none, 1 per fragment, 2 per message, 3 both
    unique_confirmations: int
    groups_given: bool = False

    @classmethod
    def from_options(cls, o: OptionReader, *, context_session_id: int = 0) -> SourceConfig:
        """``o`` the source's options; ``context_session_id`` the context's ``ume_session_id``
        (used when the source's is 0).  Raises ConfigError for what UM refuses at creation."""
        entries: tuple[StoreEntry, ...] = tuple(o.get("ume_store") or ())
        names: tuple[StoreNameEntry, ...] = tuple(o.get("ume_store_name") or ())
        group_list: tuple[StoreGroupEntry, ...] = tuple(o.get("ume_store_group") or ())
        stores = tuple(
            StoreSpec((e.address, int(e.port)), None, int(e.domain_id),
                      int(e.registration_id), int(e.group_index))
            for e in entries
        ) + tuple(
            StoreSpec(None, n.name, 0, int(n.registration_id), int(n.group_index)) for n in names
        )  # fmt: skip
        if not stores:
            raise _cfg_error("ume_store", "a persistent source needs ume_store or ume_store_name")
        if len(stores) > compose.MAX_STORES:
            raise _cfg_error(
                "ume_store",
                f"{len(stores)} Stores configured: at most {compose.MAX_STORES} (LBM_MAX_UME_STORES)",
            )
        given: dict[int, int] = {}
        last = -1
        for g in group_list:
            idx, size = int(g.group_index), int(g.group_size)
            if idx <= last:
                raise _cfg_error(
                    "ume_store_group",
                    f"group {idx} given after group {last}: groups must be in increasing order",
                )
            last = idx
            if size < 1:
                raise _cfg_error("ume_store_group", f"group {idx} has size {size}", "size >= 1")
            given[idx] = size
        counted: dict[int, int] = {}
        for s in stores:
            counted[s.group] = counted.get(s.group, 0) + 1
        if given:
            for gidx, n in counted.items():
                if gidx not in given:
                    raise _cfg_error(
                        "ume_store_group",
                        f"a Store is in group {gidx}, which no ume_store_group names",
                    )
                if n > given[gidx]:
                    raise _cfg_error(
                        "ume_store_group",
                        f"group {gidx} has {n} Stores but size {given[gidx]}",
                    )
            groups = tuple(sorted(given.items()))
        else:
            groups = tuple(sorted(counted.items()))
        if len(groups) > compose.MAX_GROUPS:
            raise _cfg_error(
                "ume_store_group",
                f"{len(groups)} QC groups: at most {compose.MAX_GROUPS} (LBM_MAX_UME_GROUPS)",
            )
        intra = str(o.get("ume_retention_intragroup_stability_behavior")).lower()
        inter = str(o.get("ume_retention_intergroup_stability_behavior")).lower()
        consensus = str(o.get("ume_consensus_sequence_number_behavior")).lower()
        for name, value, allowed in (
            ("ume_retention_intragroup_stability_behavior", intra, _INTRA),
            ("ume_retention_intergroup_stability_behavior", inter, _INTER),
            ("ume_consensus_sequence_number_behavior", consensus, BEHAVIORS),
        ):
            if value not in allowed:
                raise _cfg_error(name, f"{name} {value!r}", ", ".join(allowed))
        behavior = str(o.get("ume_flight_size_behavior")).lower()
        if behavior not in ("block", "notify"):
            raise _cfg_error("ume_flight_size_behavior", f"{behavior!r}", "Block, Notify")
        store_behavior = str(o.get("ume_store_behavior")).lower()
        if store_behavior not in ("qc", "quorum-consensus"):
            raise _cfg_error("ume_store_behavior", f"{store_behavior!r}", "qc")
        flight_bytes = int(o.get("ume_flight_size_bytes") or 0)
        rpp = bool(o.get("ume_receiver_paced_persistence"))
        if rpp and not flight_bytes:
            raise _cfg_error(
                "ume_flight_size_bytes",
                "ume_receiver_paced_persistence 1 requires ume_flight_size_bytes",
                "> 0",
            )
        rpp_options: tuple[tuple[str, int], ...] = ()
        if rpp:
            rpp_options = tuple(
                sorted(
                    (name, int(o.get(name)))
                    for name in compose.RPP_OPTIONS
                    if int(o.get(name) or 0)
                )
            )
        proxy = bool(o.get("ume_proxy_source"))
        sid = int(o.get("ume_session_id") or 0) or int(context_session_id)
        if not 0 <= sid <= _MAX_SESSION_ID:
            raise _cfg_error("ume_session_id", f"Session ID {sid:#x} out of range")
        if proxy and not sid and any(s.reg_id == 0 for s in stores):
            raise _cfg_error(
                "ume_proxy_source",
                "a proxy source needs a RegID for every Store or a Session ID (trap 8)",
            )
        flight = int(o.get("ume_flight_size"))
        if flight < 1:
            raise _cfg_error("ume_flight_size", f"ume_flight_size {flight}", ">= 1")
        return cls(
            stores=stores,
            groups=groups,
            intragroup=intra,
            intergroup=inter,
            consensus=consensus,
            flight_size=flight,
            flight_size_bytes=flight_bytes,
            flight_size_behavior_block=behavior == "block",
            registration_interval=o.seconds("ume_registration_interval"),
            store_check_interval=o.seconds("ume_store_check_interval"),
            store_activity_timeout=o.seconds("ume_store_activity_timeout"),
            activity_timeout_ms=int(o.get("ume_activity_timeout")),
            state_lifetime_ms=int(o.get("ume_state_lifetime")),
            session_id=sid,
            stability_notification=int(o.get("ume_message_stability_notification")),
            stability_timeout=o.seconds("ume_message_stability_timeout"),
            stability_lifetime=o.seconds("ume_message_stability_lifetime"),
            sri_inter_sri_interval=o.seconds("ume_sri_inter_sri_interval"),
            sri_max_per_update=int(o.get("ume_sri_max_number_of_sri_per_update")),
            sri_immediate=bool(o.get("ume_sri_immediate_sri_request_response")),
            sri_response_latency=o.seconds("ume_sri_request_response_latency"),
            rpp=rpp,
            rpp_options=rpp_options,
            proxy=proxy,
            confirmed_delivery_notification=int(o.get("ume_confirmed_delivery_notification")),
            unique_confirmations=int(o.get("ume_retention_unique_confirmations") or 0),
            groups_given=bool(given),
        )


# ==============================================================================================
# States
# ==============================================================================================


class SourceState(Enum):
    IDLE = "idle"  # built, not started
    REGISTERING = "registering"  # PREGs out, Registration Complete not reached
    REGISTERED = "registered"  # Complete, QC rules hold: may send
    NO_QUORUM = "no-quorum"  # Complete once, QC rules no longer hold: sends refused
    DEREGISTERING = "deregistering"  # PREG D=1 out
    DEREGISTERED = "deregistered"  # every registered Store answered the deregistration


# Read on every send (send_check): an Enum member read through its class costs ~130 ns in
# CPython 3.11, a module global ~20.
_REGISTERED = SourceState.REGISTERED


class SourceInput(Enum):
    START = "start"
    COMPLETE = "complete"
    QUORUM_LOST = "quorum-lost"
    QUORUM_BACK = "quorum-back"
    DEREGISTER = "deregister"
    DEREGISTERED = "deregistered"


_P, _PI = SourceState, SourceInput
#: The source's machine: (state, input) -> next state; anything else is a LocalProtocolError.
SOURCE_TRANSITIONS: dict[tuple[SourceState, SourceInput], SourceState] = {
    (_P.IDLE, _PI.START): _P.REGISTERING,
    (_P.REGISTERING, _PI.COMPLETE): _P.REGISTERED,
    (_P.REGISTERED, _PI.QUORUM_LOST): _P.NO_QUORUM,
    (_P.NO_QUORUM, _PI.QUORUM_BACK): _P.REGISTERED,
    (_P.IDLE, _PI.DEREGISTER): _P.DEREGISTERING,
    (_P.REGISTERING, _PI.DEREGISTER): _P.DEREGISTERING,
    (_P.REGISTERED, _PI.DEREGISTER): _P.DEREGISTERING,
    (_P.NO_QUORUM, _PI.DEREGISTER): _P.DEREGISTERING,
    (_P.DEREGISTERING, _PI.DEREGISTERED): _P.DEREGISTERED,
}


class StoreState(Enum):
    UNRESOLVED = "unresolved"  # named Store, no address yet
    NEW = "new"  # address known, not asked yet
    REGISTERING = "registering"  # PREG out, no answer yet
    REGISTERED = "registered"  # answered with success, active
    REFUSED = "refused"  # answered with an error: asked again every registration interval
    UNRESPONSIVE = "unresponsive"  # silent for the activity timeout: asked again
    DEREGISTERING = "deregistering"  # PREG D=1 out
    DEREGISTERED = "deregistered"  # answered the deregistration, or left out of it


class StoreInput(Enum):
    RESOLVED = "resolved"
    PREG = "preg"
    SUCCESS = "success"
    ERROR = "error"
    SILENT = "silent"
    MOVED = "moved"
    DEREGISTER = "deregister"
    DROP = "drop"
    DEREGISTERED = "deregistered"


_S, _SI = StoreState, StoreInput
#: One Store's machine, as this source sees it.
STORE_TRANSITIONS: dict[tuple[StoreState, StoreInput], StoreState] = {
    (_S.UNRESOLVED, _SI.RESOLVED): _S.NEW,
    (_S.NEW, _SI.PREG): _S.REGISTERING,
    (_S.REGISTERING, _SI.PREG): _S.REGISTERING,  # a retry
    (_S.REFUSED, _SI.PREG): _S.REGISTERING,
    (_S.UNRESPONSIVE, _SI.PREG): _S.REGISTERING,
    (_S.REGISTERING, _SI.SUCCESS): _S.REGISTERED,
    (_S.REGISTERING, _SI.ERROR): _S.REFUSED,
    (_S.REGISTERED, _SI.SILENT): _S.UNRESPONSIVE,
    **{
        (s, _SI.MOVED): _S.NEW
        for s in (_S.NEW, _S.REGISTERING, _S.REGISTERED, _S.REFUSED, _S.UNRESPONSIVE)
    },
    (_S.REGISTERED, _SI.DEREGISTER): _S.DEREGISTERING,
    **{
        (s, _SI.DROP): _S.DEREGISTERED
        for s in (_S.UNRESOLVED, _S.NEW, _S.REGISTERING, _S.REFUSED, _S.UNRESPONSIVE)
    },
    (_S.DEREGISTERING, _SI.DEREGISTERED): _S.DEREGISTERED,
}


class _Store:
    """One Store of the source and our registration there."""

    __slots__ = (
        "address",
        "answered",
        "bit",
        "domain_id",
        "ever_registered",
        "group",
        "group_bit",
        "high",
        "index",
        "last_heard",
        "name",
        "next_try",
        "reg_id",
        "silence_reported",
        "state",
        "text",
        "tried_since",
        "version",
    )

    def __init__(self, index: int, spec: StoreSpec, group_pos: int) -> None:
        self.index = index
        self.bit = 1 << index
        self.group = spec.group
        self.group_bit = 1 << group_pos
        self.name = spec.name
        self.address: Address | None = spec.address
        self.domain_id = spec.domain_id
        self.reg_id = spec.reg_id  # the one to ask for; the Store's own once it answered
        self.state = StoreState.NEW if spec.address is not None else StoreState.UNRESOLVED
        self.answered = False  # answered (success or error) since the source started
        self.ever_registered = False
        self.version = 0  # per-Store SRI version (1 at the first registration)
        self.high = NO_SQN  # last sequence number the Store holds (its answer)
        self.next_try: float | None = None  # PREG / deregistration retry time
        self.tried_since: float | None = None  # first unanswered PREG of the current round
        self.last_heard = 0.0
        self.silence_reported = False
        self.text = self._text()

    def _text(self) -> str:
        if self.address is None:
            return (self.name or "?")[:_STORE_STRLEN]
        return f"{self.address[0]}:{self.address[1]}"[:_STORE_STRLEN]

    def relabel(self) -> None:
        self.text = self._text()

    def step(self, event: StoreInput) -> None:
        nxt = STORE_TRANSITIONS.get((self.state, event))
        if nxt is None:
            raise LocalProtocolError(
                f"store {self.index} {self.text}: {event.value} in state {self.state.value}"
            )
        self.state = nxt


# ==============================================================================================
# The machine
# ==============================================================================================


class PersistentSource:
    """One persistent source; see the module docstring."""

    def __init__(
        self,
        config: SourceConfig,
        *,
        topic: str,
        transport_idx: int,
        topic_idx: int,
        reply_to: Address,
        ctxinst: bytes,
        now: float,
    ) -> None:
        self.config = config
        self.topic = topic
        self.transport_idx = transport_idx
        self.topic_idx = topic_idx
        self.reply_to = reply_to
        self.ctxinst = bytes(ctxinst)
        self.state = SourceState.IDLE
        group_pos = {g: i for i, (g, _size) in enumerate(config.groups)}
        self._stores = [_Store(i, s, group_pos[s.group]) for i, s in enumerate(config.stores)]
        # per group (in config.groups order): (store bits, size, majority)
        self._gmasks: list[tuple[int, int, int]] = []
        for g, size in config.groups:
            bits = 0
            for st in self._stores:
                if st.group == g:
                    bits |= st.bit
            self._gmasks.append((bits, size, size // 2 + 1))
        self.next_sqn: int | None = None
        self.in_flight = 0
        self.in_flight_bytes = 0
        self.sri_version = 0
        self._consensus: int | None = None
        self._started_at: float | None = None
        self._reg_bits = 0  # Stores in REGISTERED state
        self._memo: dict[int, int] = {}  # ACK bits -> (met groups << 1) | stable
        # window: fragment i of the window is _masks[_head + i], sqn _base + i
        self._masks: list[int] = []
        self._recs: list[Any] = []  # tuples (one fragment) or shared lists (module top)
        self._head = 0
        self._rel = 0  # absolute index: fragments before it are released
        self._base = 0
        # Absolute index of the newest list record in the window (a fragmented message's or a
        # placeholder's; -1: none): the fragments after it are one-fragment tuples, which the
        # ranged ACK path (_acks) handles in bulk.
        self._last_list = -1
        self._next_expected: int | None = None  # after the last fragment sent (None: none yet)
        self._confirms: dict[int, set[int]] = {}
        self._blocked_latch = False
        self._over = False
        self._unblocked = False
        #: True: a send may go now, no question asked (REGISTERED, and with the Block behaviour
        #: the flight not full) -- the engine's send gate reads this one attribute per send;
        #: False: ask :meth:`send_check` and :attr:`flight_blocked` (it may be False while both
        #: would let the send go: it is only ever set True when it holds).
        self.clear = False
        # The configuration message_sent reads per send, held once (it is frozen).
        self._init_mask = 0 if config.unique_confirmations else _CONF
        self._block = config.flight_size_behavior_block
        self._flight_size = config.flight_size
        self._flight_bytes = config.flight_size_bytes
        self._fragments_sent = 0  # counted here, not in _counters: one dict update less a send
        # outputs
        self._sends: list[tuple[Address, bytes]] = []
        self._transport: list[bytes] = []
        self._events: list[tuple[int, CoreEvent]] = []
        self._retx: list[tuple[int, tuple[Address, ...]]] = []
        self._released: list[int] = []
        # timers
        self._next_check: float | None = None
        self._sri_left = 0
        self._sri_next: float | None = None
        self._sri_reply_at: float | None = None
        self._deadline: float | None = None
        self._now = now
        self._counters: dict[str, int] = dict.fromkeys(
            (
                "registrations_sent",
                "registration_successes",
                "registration_errors",
                "deregistrations_sent",
                "stability_acks",
                "stability_naks",
                "acks_outside",
                "acks_duplicate",
                "acks_unregistered",
                "fragments_stable",
                "fragments_given_up",
                "fragments_sent",
                "sqn_gaps",
                "window_restarts",
                "lagging_dropped",
                "keepalives_answered",
                "keepalives_received",
                "sris_sent",
                "sri_requests",
                "sri_requests_ignored",
                "proactive_retransmissions",
                "confirmations",
                "confirm_tracking_evicted",
                "unresponsive",
                "unmatched_control",
                "duplicate_answers",
                "sends_dropped",
                "events_dropped",
                "released_dropped",
            ),
            0,
        )

    # ==========================================================================================
    # Properties
    # ==========================================================================================

    @property
    def flight_blocked(self) -> bool:
        return self.in_flight >= self._flight_size or (
            0 < self._flight_bytes <= self.in_flight_bytes
        )

    @property
    def stores(self) -> tuple[Address, ...]:
        """Addresses of the Stores registered now."""
        return tuple(
            s.address for s in self._stores if s.state is StoreState.REGISTERED and s.address
        )

    def send_check(self) -> str | None:
        """None: the source may send; else UM's LBM_EUMENOREG text."""
        if self.state is _REGISTERED:
            return None
        return EUMENOREG_TEXT

    def _sync_clear(self) -> None:
        """Recompute :attr:`clear` (after a state change, the flight filling or draining)."""
        self.clear = self.state is _REGISTERED and not (
            self._block and (self._blocked_latch or self.flight_blocked)
        )

    # ==========================================================================================
    # Outputs
    # ==========================================================================================

    def take_sends(self) -> list[tuple[Address, bytes]]:
        if not self._sends:
            return []
        out, self._sends = self._sends, []
        return out

    def take_transport(self) -> list[bytes]:
        if not self._transport:
            return []
        out, self._transport = self._transport, []
        return out

    def take_events(self) -> list[tuple[int, CoreEvent]]:
        if not self._events:
            return []
        out, self._events = self._events, []
        return out

    def take_retransmissions(self) -> list[tuple[int, tuple[Address, ...]]]:
        if not self._retx:
            return []
        out, self._retx = self._retx, []
        return out

    def take_released(self) -> list[int]:
        """Sequence numbers (in order) that left flight: stable (or given up) and confirmed."""
        if not self._released:
            return []
        out, self._released = self._released, []
        return out

    def take_unblocked(self) -> bool:
        if self._unblocked:
            self._unblocked = False
            return True
        return False

    def stats(self) -> dict[str, int]:
        out = dict(self._counters)
        out["fragments_sent"] = self._fragments_sent
        out["in_flight"] = self.in_flight
        out["in_flight_bytes"] = self.in_flight_bytes
        out["stores_registered"] = bin(self._reg_bits).count("1")
        out["sri_version"] = self.sri_version
        out["tracked_fragments"] = len(self._masks) - self._head
        return out

    def _send(self, st: _Store, data: bytes) -> None:
        if st.address is None:
            return
        if len(self._sends) >= MAX_PENDING_OUTPUT:
            self._counters["sends_dropped"] += 1
            return
        self._sends.append((st.address, data))

    def _event(self, code: int, info: CoreEvent) -> None:
        if len(self._events) >= MAX_PENDING_EVENTS:
            self._counters["events_dropped"] += 1
            return
        self._events.append((code, info))

    def _step(self, event: SourceInput) -> None:
        nxt = SOURCE_TRANSITIONS.get((self.state, event))
        if nxt is None:
            raise LocalProtocolError(
                f"persistent source: {event.value} in state {self.state.value}"
            )
        self.state = nxt
        self._sync_clear()

    def _label(self, st: _Store) -> str:
        return f"store {st.index} [{st.text}]"

    # ==========================================================================================
    # QC rules
    # ==========================================================================================

    def _groups_ok(self, met: int, active: int) -> bool:
        """The intergroup rule over the groups ``met`` (bit per group) given the ``active``
        ones (a quorum of their Stores registered)."""
        n = len(self._gmasks)
        inter = self.config.intergroup
        if inter == "any":
            return met != 0
        if inter == "majority":
            return bin(met).count("1") >= n // 2 + 1
        if inter == "all-active":
            return active != 0 and (active & ~met) == 0
        return met == (1 << n) - 1

    def _active_groups(self, reg: int) -> int:
        active = 0
        for i, (bits, _size, major) in enumerate(self._gmasks):
            if bin(reg & bits).count("1") >= major:
                active |= 1 << i
        return active

    def _quorum(self) -> bool:
        """The registration rules hold for the Stores registered now."""
        reg = self._reg_bits
        complete = 0
        all_mode = self.config.intragroup == "all"
        for i, (bits, size, major) in enumerate(self._gmasks):
            if bin(reg & bits).count("1") >= (size if all_mode else major):
                complete |= 1 << i
        return self._groups_ok(complete, self._active_groups(reg))

    def _verdict(self, acks: int) -> int:
        """``(met groups << 1) | stable`` for the ACK bits ``acks`` (memoised)."""
        v = self._memo.get(acks)
        if v is not None:
            return v
        reg = self._reg_bits
        intra = self.config.intragroup
        met = 0
        for i, (bits, size, major) in enumerate(self._gmasks):
            n = bin(acks & bits).count("1")
            if intra == "quorum":
                ok = n >= major
            elif intra == "all":
                ok = n >= size
            else:  # all-active: every registered Store of an active group
                r = reg & bits
                ok = bin(r).count("1") >= major and (acks & r) == r
            if ok:
                met |= 1 << i
        v = (met << 1) | int(self._groups_ok(met, self._active_groups(reg)))
        if len(self._memo) >= _MAX_MEMO:
            self._memo.clear()
        self._memo[acks] = v
        return v

    def _registered_changed(self) -> None:
        self._reg_bits = sum(s.bit for s in self._stores if s.state is StoreState.REGISTERED)
        self._memo.clear()

    # ==========================================================================================
    # Registration
    # ==========================================================================================

    def start(self, now: float) -> None:
        """Send PREGs to every known Store."""
        if self.state is not SourceState.IDLE:
            return
        self._now = now
        self._step(SourceInput.START)
        self._started_at = now
        for st in self._stores:
            if st.state is StoreState.NEW:
                self._register(st, now)
        self._next_check = now + self.config.store_check_interval
        self._check_complete(now)
        self._plan()

    def set_store_address(self, name: str, address: Address, domain_id: int, now: float) -> None:
        """The named Store ``name`` resolved (or moved) to ``address``: register with it."""
        self._now = now
        for st in self._stores:
            if st.name != name or st.address == address:
                continue
            st.address = (str(address[0]), int(address[1]))
            st.domain_id = domain_id
            st.relabel()
            if st.state is StoreState.UNRESOLVED:
                st.step(StoreInput.RESOLVED)
            elif st.state in (StoreState.DEREGISTERING, StoreState.DEREGISTERED):
                continue
            else:
                was = st.state is StoreState.REGISTERED
                st.step(StoreInput.MOVED)
                if was:
                    self._registered_changed()
                    self._after_loss(now)
            if self.state in (SourceState.REGISTERING, SourceState.REGISTERED,
                              SourceState.NO_QUORUM):  # fmt: skip
                self._register(st, now)
        self._plan()

    def _register(self, st: _Store, now: float) -> None:
        cfg = self.config
        req = compose.SourceRegistration(
            self.topic, self.transport_idx, self.topic_idx, self.reply_to,
            reg_id=st.reg_id, store_index=st.index, session_id=cfg.session_id,
            ctxinst=self.ctxinst, activity_timeout_ms=cfg.activity_timeout_ms,
            state_lifetime_ms=cfg.state_lifetime_ms, proxy=cfg.proxy, rpp=cfg.rpp,
            rpp_options=cfg.rpp_options,
        )  # fmt: skip
        st.step(StoreInput.PREG)
        st.next_try = now + cfg.registration_interval
        if st.tried_since is None:
            st.tried_since = now
        self._counters["registrations_sent"] += 1
        self._send(st, req.encode())

    def _answer(self, st: _Store, resp: compose.RegistrationResponse, now: float) -> None:
        c = self._counters
        st.answered = True
        st.tried_since = None
        st.silence_reported = False
        if resp.deregistered:
            if st.state is StoreState.DEREGISTERING:
                st.step(StoreInput.DEREGISTERED)
                st.next_try = None
                high = resp.high_seqnum if resp.high_seqnum != NO_SQN else 0
                self._event(
                    SRC_EVENT_UME_DEREGISTRATION_SUCCESS_EX,
                    SourceDeregistrationSuccess(resp.reg_id, high, st.index, st.text),
                )
                self._check_deregistered()
            else:
                c["duplicate_answers"] += 1
            return
        if st.state is not StoreState.REGISTERING:
            c["duplicate_answers"] += 1  # a retry's answer crossing the first one
            return
        error = resp.error_text if resp.error is not None else None
        if error is None and self.config.rpp and not resp.rpp:
            # seed 002, RPP compatibility matrix, "Granted - Source Error": the Store granted
            # the registration without acknowledging RPP (1.10)
            error = "RPP requested but not acknowledged by the Store"
        if error is not None:
            c["registration_errors"] += 1
            st.step(StoreInput.ERROR)
            self._event(
                SRC_EVENT_UME_REGISTRATION_ERROR,
                RegistrationError(f"{self._label(st)} registration error: {error}", st.index),
            )
            self._check_complete(now)
            return
        c["registration_successes"] += 1
        st.step(StoreInput.SUCCESS)
        st.reg_id = resp.reg_id
        st.high = resp.high_seqnum
        st.next_try = None
        flags = (
            (REG_FLAG_OLD if resp.old else 0)
            | (REG_FLAG_NOACKS if resp.no_acks else 0)
            | (REG_FLAG_RPP if resp.rpp else 0)
        )
        sqn = resp.high_seqnum if resp.old and resp.high_seqnum != NO_SQN else 0
        self._event(
            SRC_EVENT_UME_REGISTRATION_SUCCESS_EX,
            RegistrationSuccess(flags, resp.reg_id, sqn, st.index, st.text),
        )
        st.version += 1  # 1 at the first registration; a re-registration bumps it (1.4)
        st.ever_registered = True
        self._registered_changed()
        if self.state is SourceState.REGISTERING:
            self._check_complete(now)
            return
        if self.state is SourceState.NO_QUORUM and self._quorum():
            self._step(SourceInput.QUORUM_BACK)
        if self.state in (SourceState.REGISTERED, SourceState.NO_QUORUM):
            self._sri_change(now)
            self._reevaluate(now)

    def _check_complete(self, now: float) -> None:
        if self.state is not SourceState.REGISTERING or not self._quorum():
            return
        everyone = all(s.answered for s in self._stores)
        assert self._started_at is not None
        if not everyone and now < self._started_at + self.config.registration_interval:
            return
        highs = [
            s.high for s in self._stores
            if s.state is StoreState.REGISTERED and s.high != NO_SQN
        ]  # fmt: skip
        if highs:
            consensus = consensus_of(highs, self.config.consensus)
            self._consensus = consensus
            self.next_sqn = (consensus + 1) & _M
        else:
            consensus = 0
            self.next_sqn = 0
        self._step(SourceInput.COMPLETE)
        self._event(
            SRC_EVENT_UME_REGISTRATION_COMPLETE_EX,
            RegistrationComplete(REG_COMPLETE_FLAG_QUORUM, consensus),
        )
        self._sri_change(now)

    def deregister(self, now: float) -> None:
        """PREG D=1 to every registered Store; DEREGISTRATION_SUCCESS_EX per answer, then
        DEREGISTRATION_COMPLETE_EX.  The source may not send afterwards."""
        if self.state in (SourceState.DEREGISTERING, SourceState.DEREGISTERED):
            return
        self._now = now
        self._step(SourceInput.DEREGISTER)
        self._sri_left = 0
        self._sri_next = self._sri_reply_at = None
        for st in self._stores:
            if st.state is StoreState.REGISTERED:
                st.step(StoreInput.DEREGISTER)
                self._deregister_one(st, now)
            else:
                st.step(StoreInput.DROP)
                st.next_try = None
        self._registered_changed()
        self._check_deregistered()
        self._plan()

    def _deregister_one(self, st: _Store, now: float) -> None:
        d = compose.Deregistration(
            True, st.reg_id, self.transport_idx, self.topic_idx, self.reply_to,
            store_index=st.index, session_id=self.config.session_id,
        )  # fmt: skip
        st.next_try = now + self.config.registration_interval
        self._counters["deregistrations_sent"] += 1
        self._send(st, d.encode())

    def _check_deregistered(self) -> None:
        if self.state is not SourceState.DEREGISTERING:
            return
        if any(s.state is StoreState.DEREGISTERING for s in self._stores):
            return
        self._step(SourceInput.DEREGISTERED)
        self._next_check = None
        self._event(SRC_EVENT_UME_DEREGISTRATION_COMPLETE_EX, DeregistrationComplete())

    # ==========================================================================================
    # Control messages
    # ==========================================================================================

    def receive_stability(
        self, store_index: int, first: int, last: int, nak: bool, now: float
    ) -> bool:
        """A stability ACK (``nak``: NAK) of ``first..last`` from the Store at ``store_index``,
        already known to be this source's (its transport and topic index): what
        :meth:`receive_control` does with a :class:`~umcore.store.compose.StabilityAck`, for a
        caller that parsed the ACK's fields alone (:func:`umcore.store.compose.parse_stability`).
        False: no such Store."""
        self._now = now
        st = self._store_at(store_index)
        if st is None:
            return False
        st.last_heard = now
        self._stability(st, first, last, nak, now)
        return True

    def receive_control(self, comp: compose.Composition, peer: str, now: float) -> bool:
        """A decoded store message from our request port; False: not this source's."""
        self._now = now
        ours = (self.transport_idx, self.topic_idx)
        if isinstance(comp, compose.StabilityAck):
            if (comp.transport_idx, comp.topic_idx) != ours:
                return False
            return self.receive_stability(comp.store_index, comp.first, comp.last, comp.nak, now)
        if isinstance(comp, compose.RegistrationResponse):
            if not comp.source or (comp.transport_idx, comp.topic_idx) != ours:
                return False
            st = self._store_at(comp.store_index)
            if st is None:
                return False
            st.last_heard = now
            self._answer(st, comp, now)
        elif isinstance(comp, compose.Keepalive):
            if comp.role != lbmc.KA_TYPE_STORE or (comp.transport_idx, comp.topic_idx) != ours:
                return False
            st = self._store_at(comp.store_index)
            if st is None:
                st = self._store_by_reg_id(comp.reg_id)
            if st is None:
                return False
            st.last_heard = now
            self._counters["keepalives_received"] += 1
            if comp.response_requested and st.state is StoreState.REGISTERED:
                ka = compose.Keepalive(
                    lbmc.KA_TYPE_SOURCE, self.transport_idx, self.topic_idx, st.reg_id,
                    store_index=st.index,
                )  # fmt: skip
                self._counters["keepalives_answered"] += 1
                self._send(st, ka.encode())
        elif isinstance(comp, compose.SriRequest):
            if (comp.transport_idx, comp.topic_idx) != ours:
                return False
            self._sri_request(now)
        elif isinstance(comp, compose.ConsumptionAck):
            if (comp.transport_idx, comp.src_reg_id) != ours:
                return False
            self._confirmation(comp, now)
        else:
            return False
        self._plan()
        return True

    def _store_at(self, index: int | None) -> _Store | None:
        if index is None or not 0 <= index < len(self._stores):
            return None
        return self._stores[index]

    def _store_by_reg_id(self, reg_id: int) -> _Store | None:
        for st in self._stores:
            if st.reg_id == reg_id and st.ever_registered:
                return st
        return None

    # ==========================================================================================
    # Sending, stability, flight
    # ==========================================================================================

    def message_sent(
        self, first_sqn: int, last_sqn: int, nbytes: int, now: float, clientd: object = None
    ) -> bool:
        """A send took ``first_sqn..last_sqn`` (its fragments) with ``nbytes`` payload bytes.
        True when that queued output (a flight-size event); else there is nothing to take."""
        masks = self._masks
        if (
            first_sqn == last_sqn
            and first_sqn == self._next_expected
            and self._block
            and len(masks) != self._head
        ):
            # The data path: one fragment, next in order, Block behaviour (no OVER event), the
            # window not empty (its base stays) -- the general case below, less its branches.
            self._next_expected = (first_sqn + 1) & _M
            masks.append(self._init_mask)
            self._recs.append((first_sqn, first_sqn, nbytes, clientd, now, 1, 1, 0.0, False))
            self._fragments_sent += 1
            in_flight = self.in_flight = self.in_flight + 1
            in_bytes = self.in_flight_bytes = self.in_flight_bytes + nbytes
            if not self._blocked_latch and (
                in_flight >= self._flight_size or 0 < self._flight_bytes <= in_bytes
            ):
                self._blocked_latch = True
                self.clear = False  # (Block: this path's behaviour)
            return False
        n = ((last_sqn - first_sqn) & _M) + 1
        nxt = self._next_expected
        queued = False
        if nxt is None or len(masks) == self._head:
            self._base = first_sqn  # an empty window starts where the send does
        elif first_sqn != nxt:
            queued = True  # (rare: the caller takes whatever a restart queued)
            gap = (first_sqn - nxt) & _M
            self._counters["sqn_gaps"] += 1
            if gap >= MAX_GAP_FILL:
                self._restart_window()
                self._base = first_sqn
            else:
                done = _GONE | _CONF | _LEFT
                masks.extend([done] * gap)
                self._recs.extend([_DUMMY] * gap)
                self._last_list = len(masks) - 1
        self._next_expected = (last_sqn + 1) & _M
        init = self._init_mask
        if n == 1:
            masks.append(init)
            self._recs.append((first_sqn, last_sqn, nbytes, clientd, now, 1, 1, 0.0, False))
        else:
            rec = [first_sqn, last_sqn, nbytes, clientd, now, n, n, 0.0, False]
            masks.extend([init] * n)
            self._recs.extend([rec] * n)
            self._last_list = len(masks) - 1
        if not self._block and not self._over and self.flight_blocked:
            self._over = True  # (sent while the flight was already full: Notify's OVER)
            self._event(
                SRC_EVENT_FLIGHT_SIZE_NOTIFICATION,
                FlightSizeNotification(FLIGHT_SIZE_TYPE_UME, FLIGHT_SIZE_OVER),
            )
            queued = True
        in_flight = self.in_flight = self.in_flight + n
        in_bytes = self.in_flight_bytes = self.in_flight_bytes + nbytes
        self._fragments_sent += n
        if not self._blocked_latch and (  # flight_blocked, inline
            in_flight >= self._flight_size or 0 < self._flight_bytes <= in_bytes
        ):
            self._blocked_latch = True
            if self._block:
                self.clear = False
        return queued

    def _restart_window(self) -> None:
        """Forget every tracked fragment: those in flight are given up (counted)."""
        self._counters["window_restarts"] += 1
        masks, recs = self._masks, self._recs
        for i in range(self._head, len(masks)):
            if not masks[i] & _LEFT:
                self._counters["fragments_given_up"] += 1
        self.in_flight = 0
        self.in_flight_bytes = 0
        masks.clear()
        recs.clear()
        self._head = self._rel = 0
        self._last_list = -1
        self._after_flight()

    def _stability(self, st: _Store, first: int, last: int, nak: bool, now: float) -> None:
        c = self._counters
        if nak:
            c["stability_naks"] += 1
        else:
            c["stability_acks"] += 1
        if st.state is not StoreState.REGISTERED:
            c["acks_unregistered"] += 1
            return
        head = self._head
        length = len(self._masks) - head
        n = ((last - first) & _M) + 1
        off = (first - self._base) & _M
        if off >= _HALF:  # starts before the window
            skip = (self._base - first) & _M
            if skip >= n:
                c["acks_outside"] += n
                return
            c["acks_outside"] += skip
            n -= skip
            off = 0
        if off >= length:
            c["acks_outside"] += n
            return
        end = off + n
        if end > length:
            c["acks_outside"] += end - length
            end = length
        if nak:
            self._naks(st, head + off, head + end)
            self._advance()
        elif self._acks(st, head + off, head + end):
            self._advance(head + off, head + end)
        else:
            self._advance()

    def _acks(self, st: _Store, lo: int, hi: int) -> bool:
        """Store ``st`` ACKed fragments ``lo..hi-1`` (absolute indexes).  The data path: per
        fragment a mask update, and when it became stable :meth:`_became_stable`'s work done
        here (its counters and the flight totals summed once per ACK); events in order.

        What follows from a fragment's mask alone (its new mask, its QC verdict, whether it
        becomes stable and leaves flight, its event's flags) is worked out once per run of
        equal masks -- in a ranged ACK of fragments sent alike, once -- not per fragment.
        True when every one of them left flight (:meth:`_advance` may then skip them)."""
        masks, recs = self._masks, self._recs
        bit = st.bit
        gbit = st.group_bit << 1
        notification = self.config.stability_notification
        per_store = notification & 1
        whole = notification & 2
        index, text = st.index, st.text
        base = self._base - self._head
        events = self._events
        code = SRC_EVENT_UME_MESSAGE_STABLE_EX
        n = hi - lo
        if not whole and lo > self._last_list and len(events) + n <= MAX_PENDING_EVENTS:
            # The data path in bulk: one-fragment messages (tuples), no whole-message events,
            # room for the events -- and (checked next, C-level) all of them alike.
            seg = masks[lo:hi]
            m = seg[0]
            if seg.count(m) == n:
                return self._acks_alike(st, lo, hi, m)
        dup = stable = left = left_bytes = dropped = 0
        prev = -1  # the mask the values below were worked out for
        new = flags = 0
        becomes = leaves = False
        for i in range(lo, hi):
            m = masks[i]
            if m != prev:
                prev = m
                new, becomes, leaves, flags = self._mask_step(m, bit, gbit)
            if new < 0:
                dup += 1
                continue
            masks[i] = new
            rec = recs[i]
            if becomes:
                stable += 1
                if type(rec) is tuple:  # one fragment: the whole message (and not gone)
                    if whole:
                        self._whole_stable(rec)
                    if leaves:
                        left += 1
                        left_bytes += rec[_R_BYTES]
                else:
                    unstable = rec[_R_UNSTABLE] = rec[_R_UNSTABLE] - 1
                    if whole and unstable == 0 and not rec[_R_GONE]:
                        self._whole_stable(rec)
                    if leaves:
                        left += 1
                        inflight = rec[_R_INFLIGHT] = rec[_R_INFLIGHT] - 1
                        if inflight == 0:
                            left_bytes += rec[_R_BYTES]
            if per_store:
                if len(events) < MAX_PENDING_EVENTS:
                    events.append(
                        (code, message_stable(flags, (base + i) & _M, index, text, rec[_R_CLIENTD]))
                    )
                else:
                    dropped += 1
        c = self._counters
        if stable:
            c["fragments_stable"] += stable
            self.in_flight -= left
            self.in_flight_bytes -= left_bytes
        if dup:
            c["acks_duplicate"] += dup
        if dropped:
            c["events_dropped"] += dropped
        return False

    def _mask_step(self, m: int, bit: int, gbit: int) -> tuple[int, bool, bool, int]:
        """What the ACK of the Store of ``bit`` (group bit ``gbit``) does to a fragment of mask
        ``m``: its new mask (-1: a duplicate), whether it becomes stable, whether it then leaves
        flight (:meth:`_leave`), and its per-Store event's flags."""
        if m & bit:
            return -1, False, False, 0
        new = m | bit
        acks = new & _ACK_BITS
        v = self._memo.get(acks)
        if v is None:
            v = self._verdict(acks)
        becomes = bool(v & 1) and not new & (_STABLE | _GONE)
        leaves = False
        if becomes:
            new |= _STABLE
            if new & _CONF:  # left flight (_leave)
                new |= _LEFT
                leaves = True
        flags = STABLE_FLAG_STORE
        if v & gbit:
            flags |= STABLE_FLAG_INTRAGROUP
        if v & 1:
            flags |= STABLE_FLAG_INTERGROUP | STABLE_FLAG_STABLE
        return new, becomes, leaves, flags

    def _acks_alike(self, st: _Store, lo: int, hi: int, m: int) -> bool:
        """:meth:`_acks` of fragments ``lo..hi-1`` that are all one-fragment messages (tuple
        records) with the same mask ``m``, per-Store events only (the caller checked): the same
        outcome, each step done once for the range (C-level slices, one comprehension for the
        events) instead of per fragment."""
        n = hi - lo
        c = self._counters
        new, becomes, leaves, flags = self._mask_step(m, st.bit, st.group_bit << 1)
        if new < 0:
            c["acks_duplicate"] += n
            return False
        self._masks[lo:hi] = [new] * n
        recs = self._recs
        if becomes:
            c["fragments_stable"] += n
            if leaves:
                self.in_flight -= n
                self.in_flight_bytes -= sum(map(_bytes_of, recs[lo:hi]))
        if self.config.stability_notification & 1:
            first = (self._base - self._head + lo) & _M
            sqns: Iterable[int] = range(first, first + n)
            if first + n > _M + 1:  # across the wrap
                sqns = [sqn & _M for sqn in sqns]
            evs = message_stables(flags, sqns, n, st.index, st.text, map(_clientd_of, recs[lo:hi]))
            self._events += zip(repeat(SRC_EVENT_UME_MESSAGE_STABLE_EX, n), evs, strict=True)
        return leaves

    def _became_stable(self, i: int, m: int) -> None:
        """Fragment at absolute index ``i`` (mask ``m``, STABLE just set) is stable."""
        self._counters["fragments_stable"] += 1
        rec = self._recs[i]
        if type(rec) is tuple:  # one fragment (module top): the message is stable
            whole = True
        else:
            rec[_R_UNSTABLE] -= 1
            whole = rec[_R_UNSTABLE] == 0 and not rec[_R_GONE]
        if whole and self.config.stability_notification & 2:
            self._whole_stable(rec)
        if m & _CONF:
            self._leave(i)

    def _whole_stable(self, rec: Any) -> None:
        """The message of ``rec`` is stable (its last fragment was): notification 2 and 3."""
        flags = STABLE_FLAG_INTRAGROUP | STABLE_FLAG_INTERGROUP | STABLE_FLAG_STABLE
        if self.config.stability_notification == 3:
            flags |= STABLE_FLAG_WHOLE_MESSAGE_STABLE
        self._event(
            SRC_EVENT_UME_MESSAGE_STABLE_EX,
            message_stable(flags, rec[_R_LAST], 0, "", rec[_R_CLIENTD]),
        )

    def _leave(self, i: int) -> None:
        self._masks[i] |= _LEFT
        self.in_flight -= 1
        rec = self._recs[i]
        if type(rec) is tuple:  # one fragment (module top): the message left flight
            self.in_flight_bytes -= rec[_R_BYTES]
            return
        rec[_R_INFLIGHT] -= 1
        if rec[_R_INFLIGHT] == 0:
            self.in_flight_bytes -= rec[_R_BYTES]

    def _naks(self, st: _Store, lo: int, hi: int) -> None:
        masks, recs = self._masks, self._recs
        nbit = st.bit << _NAK_SHIFT
        base = self._base - self._head
        for i in range(lo, hi):
            m = masks[i]
            if m & nbit:
                continue
            m |= nbit
            masks[i] = m
            sqn = (base + i) & _M
            self._event(
                SRC_EVENT_UME_MESSAGE_NOT_STABLE,
                MessageNotStable(NOT_STABLE_FLAG_STORE | NOT_STABLE_FLAG_LOSS, sqn, st.index,
                                 st.text, recs[i][_R_CLIENTD]),
            )  # fmt: skip
            if not m & (_STABLE | _GONE) and not self._possible(m):
                self._give_up(i, NOT_STABLE_FLAG_LOSS)

    def _possible(self, m: int) -> bool:
        """Fragment mask ``m`` can still become stable: the registered Stores that did not NAK
        it would make it stable if they all ACKed."""
        naks = (m >> _NAK_SHIFT) & _ACK_BITS
        return bool(self._verdict((self._reg_bits & ~naks) | (m & _ACK_BITS)) & 1)

    def _give_up(self, i: int, flag: int) -> None:
        masks = self._masks
        m = masks[i] | _GONE
        masks[i] = m
        rec = self._recs[i]
        if type(rec) is not tuple:  # (a tuple's are its mask's: module top)
            rec[_R_GONE] = True
            rec[_R_UNSTABLE] -= 1
        self._counters["fragments_given_up"] += 1
        sqn = (self._base - self._head + i) & _M
        self._event(
            SRC_EVENT_UME_MESSAGE_NOT_STABLE, MessageNotStable(flag, sqn, 0, "", rec[_R_CLIENTD])
        )
        if not m & _LEFT:
            self._leave(i)

    def _advance(self, left_lo: int = 0, left_hi: int = 0) -> None:
        """Release the fragments that left flight in order; trim the window; flight checks.
        ``left_lo..left_hi-1``: absolute indexes the caller knows left flight (skipped)."""
        masks = self._masks
        rel = self._rel
        end = len(masks)
        if rel < end and masks[rel] & _LEFT:
            released = self._released
            start = rel
            rel = left_hi if left_lo <= rel < left_hi else rel + 1
            while rel < end and masks[rel] & _LEFT:
                rel += 1
            # their sequence numbers, in order: one range (two when they wrap past 2**32 - 1)
            first = (self._base - self._head + start) & _M
            stop = first + rel - start
            if stop <= _M + 1:
                released.extend(range(first, stop))
            else:
                released.extend(range(first, _M + 1))
                released.extend(range(stop - _M - 1))
            if len(released) > MAX_PENDING_OUTPUT:
                # keep the newest: release is cumulative (through the last one), counted
                self._counters["released_dropped"] += len(released) - MAX_PENDING_OUTPUT
                del released[: len(released) - MAX_PENDING_OUTPUT]
            self._rel = rel
        self._trim()
        self._after_flight()

    def _trim(self) -> None:
        masks, recs = self._masks, self._recs
        head, rel = self._head, self._rel
        need = self._reg_bits
        over = len(masks) - head - MAX_LAGGING_FRAGMENTS
        prev = -1  # the last mask found done (answered by every registered Store, or gone)
        while head < rel:
            m = masks[head]
            if m != prev:
                answered = (m | (m >> _NAK_SHIFT)) & need
                if answered != need and not m & _GONE:
                    if over <= 0:
                        break
                    self._counters["lagging_dropped"] += 1
                else:
                    prev = m
                    left = rel - head
                    if left > 1 and masks[head:rel].count(m) == left:
                        head = rel  # (the common case: all alike, done: C-level)
                        break
            head += 1
            over -= 1
        old = self._head
        if head != old:
            # Nothing reads a record before the head: drop them now, not at the compaction up
            # to _COMPACT_AT messages later -- a record freed young never reaches the garbage
            # collector's oldest generation, whose full scans (tens of ms with tens of
            # thousands of them alive) were the data path's longest stalls.
            recs[old:head] = [_DUMMY] * (head - old)
            self._base = (self._base + head - self._head) & _M
            self._head = head
            if head >= _COMPACT_AT and head * 2 >= len(masks):
                del masks[:head]
                del self._recs[:head]
                self._rel -= head
                self._last_list -= head
                self._head = 0

    def _after_flight(self) -> None:
        if self._blocked_latch and not self.flight_blocked:
            self._blocked_latch = False
            self._unblocked = True
            self._sync_clear()
        if self._over and not self.flight_blocked:
            self._over = False
            self._event(
                SRC_EVENT_FLIGHT_SIZE_NOTIFICATION,
                FlightSizeNotification(FLIGHT_SIZE_TYPE_UME, FLIGHT_SIZE_UNDER),
            )

    def _reevaluate(self, now: float) -> None:
        """The registered set changed: re-judge every unstable fragment."""
        masks = self._masks
        for i in range(self._rel, len(masks)):
            m = masks[i]
            if m & (_STABLE | _GONE):
                continue
            v = self._verdict(m & _ACK_BITS)
            if v & 1:
                m |= _STABLE
                masks[i] = m
                self._became_stable(i, m)
        self._advance()

    # ==========================================================================================
    # Delivery confirmations
    # ==========================================================================================

    def _confirmation(self, ack: compose.ConsumptionAck, now: float) -> None:
        cfg = self.config
        c = self._counters
        c["confirmations"] += 1
        sqn = ack.seqnum
        off = (sqn - self._base) & _M
        i = self._head + off if off < len(self._masks) - self._head else -1
        unique = False
        need = cfg.unique_confirmations
        if need:
            seen = self._confirms.get(sqn)
            if seen is None:
                if len(self._confirms) >= MAX_CONFIRM_TRACKED:
                    self._confirms.pop(next(iter(self._confirms)))
                    c["confirm_tracking_evicted"] += 1
                seen = self._confirms[sqn] = set()
            if ack.rcv_reg_id not in seen:
                seen.add(ack.rcv_reg_id)
                if len(seen) == need:
                    unique = True
                    if i >= 0:
                        m = self._masks[i]
                        if not m & _CONF:
                            m |= _CONF
                            self._masks[i] = m
                            if m & (_STABLE | _GONE) and not m & _LEFT:
                                self._leave(i)
                    self._confirms.pop(sqn, None)
                    self._advance()
        mode = cfg.confirmed_delivery_notification
        if not mode:
            return
        flags = (
            (CONFIRM_FLAG_UNIQUEACKS if unique else 0)
            | (CONFIRM_FLAG_UREGID if ack.flags & lbmc.ACK_FLAG_U else 0)
            | (CONFIRM_FLAG_EXACK if ack.flags & lbmc.ACK_FLAG_E else 0)
            | (CONFIRM_FLAG_OOD if ack.flags & lbmc.ACK_FLAG_O else 0)
        )
        clientd = None
        last_of_message = True
        if i >= 0:
            rec = self._recs[i]
            clientd = rec[_R_CLIENTD]
            last_of_message = rec[_R_LAST] == sqn
        if mode & 1:
            self._event(
                SRC_EVENT_UME_DELIVERY_CONFIRMATION_EX,
                DeliveryConfirmation(flags, sqn, ack.rcv_reg_id, clientd),
            )
        if mode & 2 and last_of_message:
            whole = flags | (CONFIRM_FLAG_WHOLE_MESSAGE_CONFIRMED if mode == 3 else 0)
            self._event(
                SRC_EVENT_UME_DELIVERY_CONFIRMATION_EX,
                DeliveryConfirmation(whole, sqn, ack.rcv_reg_id, clientd),
            )

    # ==========================================================================================
    # SRI
    # ==========================================================================================

    def _sri_change(self, now: float) -> None:
        self.sri_version = (self.sri_version + 1) & _M
        self._sri_left = self.config.sri_max_per_update
        self._sri_next = now if self._sri_left else None
        self._emit_sris(now)

    def _sri_request(self, now: float) -> None:
        c = self._counters
        c["sri_requests"] += 1
        if self.state not in (SourceState.REGISTERED, SourceState.NO_QUORUM):
            c["sri_requests_ignored"] += 1
            return
        if self.config.sri_immediate:
            self._emit_sri()
        elif self._sri_reply_at is None:
            self._sri_reply_at = now + self.config.sri_response_latency

    def _emit_sris(self, now: float) -> None:
        if self._sri_next is not None and self._sri_next <= now and self._sri_left > 0:
            self._emit_sri()
            self._sri_left -= 1
            self._sri_next = now + self.config.sri_inter_sri_interval if self._sri_left else None
        if self._sri_reply_at is not None and self._sri_reply_at <= now:
            self._sri_reply_at = None
            self._emit_sri()

    def build_sri(self) -> compose.Sri | None:
        """The SRI as it would be sent now (None before any Store registered)."""
        stores = tuple(
            compose.SriStore(s.address, s.index, s.reg_id, s.group, s.domain_id, s.version)
            for s in self._stores
            if s.ever_registered and s.address is not None
            and s.state not in (StoreState.DEREGISTERING, StoreState.DEREGISTERED)
        )  # fmt: skip
        if not stores:
            return None
        nxt = self.next_sqn if self.next_sqn is not None else 0
        sent = self._next_expected  # (the last fragment sent + 1)
        high = ((sent if sent is not None else nxt) - 1) & _M
        low = self._base if len(self._masks) > self._head else (high + 1) & _M
        cfg = self.config
        return compose.Sri(
            self.sri_version, low, high, stores,
            groups=tuple(compose.SriGroup(g, size) for g, size in cfg.groups),
            ack_to_source=bool(cfg.confirmed_delivery_notification or cfg.unique_confirmations),
            topic_idx=self.topic_idx,
        )  # fmt: skip

    def _emit_sri(self) -> None:
        sri = self.build_sri()
        if sri is None:
            return
        if len(self._transport) >= MAX_PENDING_OUTPUT:
            self._counters["sends_dropped"] += 1
            return
        self._counters["sris_sent"] += 1
        self._transport.append(sri.encode())

    # ==========================================================================================
    # Timers
    # ==========================================================================================

    def next_timer(self) -> float | None:
        return self._deadline

    def _plan(self) -> None:
        times = [t for t in (self._next_check, self._sri_next, self._sri_reply_at) if t is not None]
        if self.state is SourceState.REGISTERING and self._started_at is not None:
            wait_until = self._started_at + self.config.registration_interval
            if self._now < wait_until:  # after it, completion waits for answers, not time
                times.append(wait_until)
        for st in self._stores:
            if st.next_try is not None:
                times.append(st.next_try)
        self._deadline = min(times) if times else None

    def handle_timer(self, now: float) -> None:
        self._now = now
        cfg = self.config
        for st in self._stores:
            if st.next_try is None or st.next_try > now:
                continue
            if st.state is StoreState.DEREGISTERING:
                self._deregister_one(st, now)
            elif st.state in (StoreState.REGISTERING, StoreState.REFUSED,
                              StoreState.UNRESPONSIVE, StoreState.NEW):  # fmt: skip
                self._register(st, now)
            else:
                st.next_try = None
        self._check_complete(now)
        if self._next_check is not None and self._next_check <= now:
            self._next_check = now + cfg.store_check_interval
            self._check_stores(now)
            self._scan(now)
        self._emit_sris(now)
        self._plan()

    def _check_stores(self, now: float) -> None:
        timeout = self.config.store_activity_timeout
        lost = False
        for st in self._stores:
            if st.state is StoreState.REGISTERED and now - st.last_heard >= timeout:
                st.step(StoreInput.SILENT)
                self._counters["unresponsive"] += 1
                self._registered_changed()
                quorum_lost = self.state is SourceState.REGISTERED and not self._quorum()
                if quorum_lost:
                    self._step(SourceInput.QUORUM_LOST)
                text = f"{self._label(st)} unresponsive{' (quorum lost)' if quorum_lost else ''}"
                self._event(
                    SRC_EVENT_UME_STORE_UNRESPONSIVE, StoreUnresponsive(text, st.index, quorum_lost)
                )
                st.tried_since = None
                st.silence_reported = True  # reported once: not again as "no response"
                self._register(st, now)
                lost = True
            elif (
                st.state is StoreState.REGISTERING
                and not st.silence_reported
                and st.tried_since is not None
                and now - st.tried_since >= timeout
            ):
                st.silence_reported = True
                self._event(
                    SRC_EVENT_UME_STORE_UNRESPONSIVE,
                    StoreUnresponsive(
                        f"{self._label(st)} unresponsive - no registration response.", st.index
                    ),
                )
        if lost:
            self._after_loss(now)

    def _after_loss(self, now: float) -> None:
        """A Store left the registered set: pending fragments may now be stable (all-active) or
        never (too few Stores left that did not NAK them)."""
        if self.state is SourceState.REGISTERED and not self._quorum():
            self._step(SourceInput.QUORUM_LOST)
        self._reevaluate(now)

    def _scan(self, now: float) -> None:
        """Stability lifetime and proactive retransmission over the unstable fragments."""
        cfg = self.config
        lifetime, timeout = cfg.stability_lifetime, cfg.stability_timeout
        if not lifetime and not timeout:
            return
        masks, recs = self._masks, self._recs
        base = self._base - self._head
        reg = self._reg_bits
        first_due = min(t for t in (lifetime, timeout) if t)
        gave_up = False
        for i in range(self._rel, len(masks)):
            m = masks[i]
            if m & (_STABLE | _GONE):
                continue
            rec = recs[i]
            sent = rec[_R_SENT]
            if not m & _RETX and sent + first_due > now:
                break  # later fragments were sent later and never re-sent
            if lifetime and sent + lifetime <= now:
                self._give_up(i, NOT_STABLE_FLAG_TIMEOUT)
                gave_up = True
                continue
            if not timeout:
                continue
            again = now + timeout
            due = rec[_R_DUE] or sent + timeout
            if due > now and rec[_R_DUE] != again:  # (== again: a fragment of a message
                continue  # re-sent in this scan: it goes too)
            _rec_set(recs, i, _R_DUE, again)
            answered = (m | (m >> _NAK_SHIFT)) & _ACK_BITS
            dests = tuple(
                s.address for s in self._stores
                if reg & s.bit and not answered & s.bit and s.address is not None
            )  # fmt: skip
            masks[i] = m | _RETX
            if dests and len(self._retx) < MAX_PENDING_OUTPUT:
                self._retx.append(((base + i) & _M, dests))
                self._counters["proactive_retransmissions"] += 1
        if gave_up:
            self._advance()


# The record of sequence numbers a send skipped (placeholders: never in flight, never sent).
_DUMMY: list[Any] = [0, 0, 0, None, 0.0, 0, 0, 0.0, True]
