"""PersistentReceiver: the sans-IO machine of one persistent receiver for ONE source.

Theory of operation
-------------------
A receiver learns its source's Stores only from the source's SRIs (Source Registration
Information, a control message on the source's transport; persistence-store.md 1.4, 1.5, trap
1).  The machine, for one topic source (its ``transport_idx``/``topic_idx``):

1. **SRI request.**  :meth:`PersistentReceiver.start` sends an SRI_REQ to the source's request
   port (from its TIR) at once and every ``ume_sri_request_interval`` until an SRI arrives; after
   ``ume_sri_request_maximum`` requests and one more interval without an SRI it reports
   ``LBM_MSG_UME_REGISTRATION_ERROR`` and is :attr:`~PersistentReceiver.failed` (UM: a receiver
   whose initial registration fails does not become a receiver).  ``ume_sri_request_maximum`` 0
   sends no request and waits for the source's own SRIs, never failing [inferred: UM does not
   say what 0 means].
2. **Registration.**  :meth:`~PersistentReceiver.receive_sri`: a PREG (S=0) to every Store the
   SRI names, with the source's RegID there (from the SRI entry), our RegID at that Store (the
   one it assigned us before; else ``registration_fn``'s answer, UM's
   ``ume_registration_extended_function``; else 0 = "assign"), the Session ID (the receiver's
   ``ume_session_id``, else the context's), the RPP mode (``ume_receiver_paced_persistence``)
   and the client activity timeout / state lifetime.  Unanswered Stores are asked again every
   ``ume_registration_interval``.  Each answer is one ``REGISTRATION_SUCCESS_EX`` (flags OLD,
   NOCACHE, RPP, SRC_SID, RPP_IS_NON_BLOCKING, PROACTIVE_KEEPALIVE) or
   ``REGISTRATION_ERROR``.  An error retrying cannot cure (ECONFIG: RPP mode mismatch;
   ETOPICNAME), or an RPP receiver answered without RPP, gives that Store up; when the Stores
   left cannot make a quorum the registration has failed.
3. **Registration Complete** when some QC group has a majority of its Stores registered (the
   group sizes from the SRI's group headers, else the count of its Stores) and either every
   Store answered or one ``ume_registration_interval`` passed since the first PREG [inferred:
   the source's rule, trap 5, applied to receivers so that a consensus sees every Store that is
   up].  The low sequence number is the consensus, by ``ume_consensus_sequence_number_behavior``
   (default *majority* for receivers, trap 4), of the Stores' answers (each Store's low is the
   receiver's last ACK + 1, or, new, the oldest it holds); ``high`` is the newest any Store
   holds.  ``retransmit_request_maximum`` N > 0 caps it at ``high - N`` (flag RXREQMAX; the
   worked example of 1.7: 0..6 stored, 0 ACKed, N 2: low 1, low_rxreq_max 4, first delivered
   4); then ``recovery_fn`` (``ume_recovery_sequence_number_info_function``) may name another
   low (returning the original low, or None, changes nothing; a start past ``high + 1`` is read as
   ``high + 1``, nothing to recover).  :meth:`take_recovery` yields
   ``(first, high)`` once (``first == high + 1``: nothing to recover); the engine feeds it into
   :class:`~umcore.features.recovery.TopicRecovery`, which tracks the holes and calls
   :meth:`rxreq_messages` for the requests it decides to send.
4. **Registration change.**  An SRI with a higher overall version: ``REGISTRATION_CHANGE`` (text
   naming what changed) and a new PREG to each Store whose per-Store version grew (or that is
   new); the others are untouched.  An SRI of the same or a lower version is ignored.
5. **Retransmission requests** go round robin over the registered Stores (``id_2`` = the source's
   RegID at that Store, the retransmission to our request port); a retry of a sequence number
   goes to the Store after the one asked last time for it, so a message any one Store holds is
   recovered (check 17).
6. **Consumption ACKs** are cumulative (trap 3): :meth:`consumed` only records the highest
   sequence number (serial order) and its due time -- ``ume_ack_batching_interval`` (a context
   option) after the first unsent one with ``ume_use_ack_batching``, else at once (due ``now``:
   the adapter's timer fires on its next turn, so a burst of deliveries in one loop turn costs
   one ACK); :meth:`handle_timer` sends one ConsumptionAck to every registered Store (``id_2`` =
   the source's RegID there).  With ``ume_explicit_ack_only`` only :meth:`explicit_ack` ACKs
   (sent at once, flag E; explicit-ack-only and batching are exclusive in UM and the explicit
   setting wins, since it can only have been set after batching's default).
7. **Keepalives.**  A Store keepalive with R (response requested) is answered with a receiver
   keepalive (UME_KEEPALIVE type 1, our RegID there).  With ``ume_proactive_keepalive_interval``
   (a context option; 0 = off) a Store we sent nothing for that long gets our latest ACK again,
   or a UME_RCV_KEEPALIVE when we never ACKed, so it keeps our state alive.
8. **Deregistration** (1.14): a PREG D=1 to every registered Store (again every registration
   interval until answered); each answer is ``DEREGISTRATION_SUCCESS_EX``, all of them
   ``DEREGISTRATION_COMPLETE_EX``.  A deregistered receiver no longer ACKs.
   :meth:`close` (the receiver is deleted) sends the batched ACK at once and stops the timers.

Answers are matched to this receiver by transport and topic index, the Store index (echoed from
our PREG) and, once a Store assigned us a RegID, that RegID.  Two sources that share transport
and topic indices (different processes) registering two receivers of one context with the same
Store for the first time at the same moment cannot be told apart by the answer: the wire has no
field for it [inferred limitation].

Sequence numbers are 32-bit with serial-number arithmetic everywhere (trap 9).  Time is the
``now`` argument (seconds, any origin).  Outputs: :meth:`take_sends` ``((ip, port), bytes)``
UIMs, :meth:`take_events` ``(LBM_MSG_UME_* type, info)``, :meth:`take_recovery`.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from enum import Enum
from typing import Any, Protocol

from umcore.config.options import lookup
from umcore.errors import ConfigError, LocalProtocolError
from umcore.events import CoreEvent
from umcore.persist.consensus import BEHAVIORS, serial_sorted
from umcore.persist.consensus import consensus as consensus_of
from umcore.persist.events import (
    DEREG_FLAG_RPP,
    MSG_UME_DEREGISTRATION_COMPLETE_EX,
    MSG_UME_DEREGISTRATION_SUCCESS_EX,
    MSG_UME_REGISTRATION_CHANGE,
    MSG_UME_REGISTRATION_COMPLETE_EX,
    MSG_UME_REGISTRATION_ERROR,
    MSG_UME_REGISTRATION_SUCCESS_EX,
    RCV_COMPLETE_FLAG_QUORUM,
    RCV_COMPLETE_FLAG_RXREQMAX,
    RCV_COMPLETE_FLAG_SRC_SID,
    RCV_REG_FLAG_NOCACHE,
    RCV_REG_FLAG_OLD,
    RCV_REG_FLAG_PROACTIVE_KEEPALIVE,
    RCV_REG_FLAG_RPP,
    RCV_REG_FLAG_RPP_IS_NON_BLOCKING,
    RCV_REG_FLAG_SRC_SID,
    RcvDeregistrationComplete,
    RcvDeregistrationSuccess,
    RcvRegistrationChange,
    RcvRegistrationComplete,
    RcvRegistrationError,
    RcvRegistrationSuccess,
)
from umcore.store import compose
from umcore.store.registry import serial_gt
from umcore.wire import lbmc

__all__ = [
    "MAX_PENDING_EVENTS",
    "MAX_PENDING_SENDS",
    "MAX_RXREQ_TRACKED",
    "RECEIVER_TRANSITIONS",
    "RECOVERY_FLAG_SRC_SID",
    "STORE_TRANSITIONS",
    "PersistentReceiver",
    "ReceiverConfig",
    "ReceiverInput",
    "ReceiverState",
    "RecoverySequenceInfo",
    "StoreInput",
    "StoreState",
]

Address = tuple[str, int]
_M = 0xFFFFFFFF
_HALF = 0x80000000
NO_SQN = compose.NO_SQN

# Outputs waiting for take_sends()/take_events(): the adapter takes them after every input, so
# these are never approached in normal operation; they bound memory if an adapter stops taking.
# What does not fit is dropped and counted (sends_dropped / events_dropped).
MAX_PENDING_SENDS = 4096
MAX_PENDING_EVENTS = 1024
# Sequence numbers whose last RXREQ Store is remembered (so a retry goes elsewhere).  TopicRecovery
# has at most retransmit_request_outstanding_maximum (default 10) requests in flight; this covers
# any sane setting.  Past it the oldest is forgotten (counted): its retry may hit the same Store.
MAX_RXREQ_TRACKED = 65536
# LBM_UME_MAX_STORE_STRLEN: a Store string in an event is at most 24 characters.
_STORE_STRLEN = 24
# UM's ume_recovery_sequence_number_info_function flag: the source's Session ID is set.
RECOVERY_FLAG_SRC_SID = 0x1
# PREG_RESP errors that asking again cannot cure: the Store is given up (persistence-store.md
# 1.17: ECONFIG = option mismatch such as the RPP mode, ETOPICNAME = another topic's RegID).
_FATAL_ERRORS = frozenset((lbmc.PREG_RESP_ECONFIG, lbmc.PREG_RESP_ETOPICNAME))
_TIME_UNITS = {"milliseconds": 1e-3, "microseconds": 1e-6, "seconds": 1.0}


# ==============================================================================================
# Configuration
# ==============================================================================================


class OptionReader(Protocol):
    """What :meth:`ReceiverConfig.from_options` reads (umcore.engine.options.Options has it)."""

    def get(self, name: str) -> Any: ...
    def seconds(self, name: str) -> float: ...


class _RegistryDefaults:
    """The registry's defaults of one scope, read like an Options object (a context's options
    when the caller has none: tests)."""

    __slots__ = ("scope",)

    def __init__(self, scope: str) -> None:
        self.scope = scope

    def get(self, name: str) -> Any:
        return lookup(self.scope, name, source="API").default_value()

    def seconds(self, name: str) -> float:
        opt = lookup(self.scope, name, source="API")
        factor = _TIME_UNITS.get(opt.unit)
        if factor is None:
            raise ConfigError(f"{name} is not a time option (unit {opt.unit!r})", source="API")
        value: Any = opt.default_value()
        return float(value or 0) * factor


@dataclass(frozen=True, slots=True)
class ReceiverConfig:
    """A persistent receiver's settings, all from the option registry (times in seconds)."""

    use_store: bool
    session_id: int
    registration_interval: float
    sri_request_interval: float
    sri_request_maximum: int
    consensus: str  # "lowest" | "majority" | "highest"
    use_ack_batching: bool
    ack_batching_interval: float
    explicit_ack_only: bool
    proactive_keepalive_interval: float  # 0 = off
    activity_timeout_ms: int
    state_lifetime_ms: int
    rpp_mode: int  # 0 SPP, 1 RPP blocking, 2 RPP non-blocking
    retransmit_request_maximum: int  # 0 = no cap

    @classmethod
    def from_options(
        cls,
        o: OptionReader,
        *,
        context_session_id: int = 0,
        context: OptionReader | None = None,
    ) -> ReceiverConfig:
        """``o`` the receiver's options; ``context`` the context's (for the context-scope
        ``ume_ack_batching_interval`` and ``ume_proactive_keepalive_interval``; None = the
        registry's defaults); ``context_session_id`` the context's ``ume_session_id``, used
        when the receiver's is 0."""
        ctx: OptionReader = context if context is not None else _RegistryDefaults("context")
        consensus = str(o.get("ume_consensus_sequence_number_behavior")).lower()
        if consensus not in BEHAVIORS:
            raise ConfigError(
                f"ume_consensus_sequence_number_behavior {consensus!r}: "
                f"allowed {', '.join(BEHAVIORS)}",
                source="API",
                what="ume_consensus_sequence_number_behavior",
            )
        rpp = int(o.get("ume_receiver_paced_persistence"))
        if rpp not in (0, 1, 2):
            raise ConfigError(
                f"ume_receiver_paced_persistence {rpp}: allowed 0, 1, 2",
                source="API",
                what="ume_receiver_paced_persistence",
            )
        sid = int(o.get("ume_session_id") or 0) or int(context_session_id)
        return cls(
            use_store=bool(o.get("ume_use_store")),
            session_id=sid,
            registration_interval=o.seconds("ume_registration_interval"),
            sri_request_interval=o.seconds("ume_sri_request_interval"),
            sri_request_maximum=int(o.get("ume_sri_request_maximum")),
            consensus=consensus,
            use_ack_batching=bool(o.get("ume_use_ack_batching")),
            ack_batching_interval=ctx.seconds("ume_ack_batching_interval"),
            explicit_ack_only=bool(o.get("ume_explicit_ack_only")),
            proactive_keepalive_interval=ctx.seconds("ume_proactive_keepalive_interval"),
            activity_timeout_ms=int(o.get("ume_activity_timeout")),
            state_lifetime_ms=int(o.get("ume_state_lifetime")),
            rpp_mode=rpp,
            retransmit_request_maximum=int(o.get("retransmit_request_maximum")),
        )


@dataclass(frozen=True, slots=True)
class RecoverySequenceInfo:
    """What ``recovery_fn`` (UM's ``ume_recovery_sequence_number_info_function``) is given:
    the consensus low sequence number, the low after ``retransmit_request_maximum``, the newest
    sequence number the Stores hold, UM's source string and the source's Session ID (flag
    :data:`RECOVERY_FLAG_SRC_SID` when it is set)."""

    low_sequence_number: int
    low_rxreq_max_sequence_number: int
    high_sequence_number: int
    source: str
    src_session_id: int
    flags: int = 0


# ==============================================================================================
# States
# ==============================================================================================


class ReceiverState(Enum):
    IDLE = "idle"  # built, not started, no SRI yet
    SRI_WAIT = "sri-wait"  # asking the source for an SRI
    REGISTERING = "registering"  # PREGs out, no quorum yet
    COMPLETE = "complete"  # Registration Complete: recovering / ACKing
    FAILED = "failed"  # no SRI after the maximum requests, or no quorum possible
    DEREGISTERING = "deregistering"  # PREG D=1 out
    DEREGISTERED = "deregistered"  # every Store answered the deregistration
    CLOSED = "closed"  # the receiver was deleted


class ReceiverInput(Enum):
    START = "start"
    SRI = "sri"
    SRI_EXHAUSTED = "sri-exhausted"
    QUORUM = "quorum"
    IMPOSSIBLE = "impossible"
    DEREGISTER = "deregister"
    DEREGISTERED = "deregistered"
    CLOSE = "close"


_R, _RI = ReceiverState, ReceiverInput
#: The receiver's machine: (state, input) -> next state; anything else is a LocalProtocolError.
RECEIVER_TRANSITIONS: dict[tuple[ReceiverState, ReceiverInput], ReceiverState] = {
    (_R.IDLE, _RI.START): _R.SRI_WAIT,
    (_R.IDLE, _RI.SRI): _R.REGISTERING,
    (_R.SRI_WAIT, _RI.SRI): _R.REGISTERING,
    (_R.SRI_WAIT, _RI.SRI_EXHAUSTED): _R.FAILED,
    (_R.REGISTERING, _RI.SRI): _R.REGISTERING,
    (_R.REGISTERING, _RI.QUORUM): _R.COMPLETE,
    (_R.REGISTERING, _RI.IMPOSSIBLE): _R.FAILED,
    (_R.COMPLETE, _RI.SRI): _R.COMPLETE,
    (_R.IDLE, _RI.DEREGISTER): _R.DEREGISTERED,
    (_R.SRI_WAIT, _RI.DEREGISTER): _R.DEREGISTERED,
    (_R.FAILED, _RI.DEREGISTER): _R.DEREGISTERED,
    (_R.REGISTERING, _RI.DEREGISTER): _R.DEREGISTERING,
    (_R.COMPLETE, _RI.DEREGISTER): _R.DEREGISTERING,
    (_R.DEREGISTERING, _RI.DEREGISTERED): _R.DEREGISTERED,
    **{(s, _RI.CLOSE): _R.CLOSED for s in ReceiverState if s is not _R.CLOSED},
}


class StoreState(Enum):
    NEW = "new"  # named by an SRI, not asked yet
    REGISTERING = "registering"  # PREG out, no answer yet
    REGISTERED = "registered"  # answered with success
    REREGISTERING = "reregistering"  # registered; a new PREG is out (its version grew)
    REFUSED = "refused"  # answered with an error: asked again every registration interval
    GIVEN_UP = "given-up"  # an error asking again cannot cure, or left out of deregistration
    DEREGISTERING = "deregistering"  # PREG D=1 out
    DEREGISTERED = "deregistered"  # answered the deregistration


class StoreInput(Enum):
    PREG = "preg"
    SUCCESS = "success"
    ERROR = "error"
    FATAL = "fatal"
    DEREGISTER = "deregister"
    DROP = "drop"
    DEREGISTERED = "deregistered"


_S, _SI = StoreState, StoreInput
#: One Store's machine, as this receiver sees it.
STORE_TRANSITIONS: dict[tuple[StoreState, StoreInput], StoreState] = {
    (_S.NEW, _SI.PREG): _S.REGISTERING,
    (_S.REGISTERING, _SI.PREG): _S.REGISTERING,  # a retry
    (_S.REFUSED, _SI.PREG): _S.REGISTERING,
    (_S.REGISTERED, _SI.PREG): _S.REREGISTERING,
    (_S.REREGISTERING, _SI.PREG): _S.REREGISTERING,
    (_S.REGISTERING, _SI.SUCCESS): _S.REGISTERED,
    (_S.REREGISTERING, _SI.SUCCESS): _S.REGISTERED,
    (_S.REGISTERING, _SI.ERROR): _S.REFUSED,
    (_S.REREGISTERING, _SI.ERROR): _S.REFUSED,
    (_S.REGISTERING, _SI.FATAL): _S.GIVEN_UP,
    (_S.REREGISTERING, _SI.FATAL): _S.GIVEN_UP,
    (_S.REGISTERED, _SI.DEREGISTER): _S.DEREGISTERING,
    (_S.REREGISTERING, _SI.DEREGISTER): _S.DEREGISTERING,
    (_S.NEW, _SI.DROP): _S.GIVEN_UP,
    (_S.REGISTERING, _SI.DROP): _S.GIVEN_UP,
    (_S.REFUSED, _SI.DROP): _S.GIVEN_UP,
    (_S.GIVEN_UP, _SI.DROP): _S.GIVEN_UP,
    (_S.DEREGISTERING, _SI.DEREGISTERED): _S.DEREGISTERED,
}
_USABLE = frozenset((_S.REGISTERED, _S.REREGISTERING))
_ASKING = frozenset((_S.REGISTERING, _S.REREGISTERING, _S.REFUSED))
_ASSIGNED = frozenset((_S.REGISTERED, _S.REREGISTERING, _S.DEREGISTERING, _S.DEREGISTERED))
_ACTIVE = frozenset((ReceiverState.REGISTERING, ReceiverState.COMPLETE))


class _Store:
    """One Store of the source, as the SRI named it, and our registration there."""

    __slots__ = (
        "address",
        "answered",
        "domain_id",
        "grp_idx",
        "high",
        "index",
        "last_sent",
        "low",
        "next_try",
        "reg_id",
        "rpp",
        "src_reg_id",
        "state",
        "text",
        "version",
    )

    def __init__(self, entry: compose.SriStore) -> None:
        self.address: Address = entry.address
        self.index = entry.store_idx
        self.grp_idx = entry.grp_idx
        self.domain_id = entry.domain_id
        self.version = entry.version
        self.src_reg_id = entry.src_reg_id
        self.reg_id = 0  # ours at this Store, once it assigned one
        self.state = StoreState.NEW
        self.answered = False  # answered the current registration round (success or error)
        self.low = 0
        self.high = NO_SQN
        self.rpp = False
        self.next_try: float | None = None  # PREG / deregistration retry time
        self.last_sent = 0.0  # for the proactive keepalive
        self.text = f"{entry.address[0]}:{entry.address[1]}"[:_STORE_STRLEN]

    def step(self, event: StoreInput) -> None:
        nxt = STORE_TRANSITIONS.get((self.state, event))
        if nxt is None:
            raise LocalProtocolError(
                f"store {self.text}: {event.value} in state {self.state.value}"
            )
        self.state = nxt


# ==============================================================================================
# The machine
# ==============================================================================================

RegistrationFn = Callable[[int, int, str, str], int]
RecoveryFn = Callable[[RecoverySequenceInfo], int | None]


class PersistentReceiver:
    """One persistent receiver of one source; see the module docstring."""

    def __init__(
        self,
        config: ReceiverConfig,
        *,
        topic: str,
        transport_idx: int,
        topic_idx: int,
        source_request: Address,
        reply_to: Address,
        ctxinst: bytes,
        now: float,
        registration_fn: RegistrationFn | None = None,
        recovery_fn: RecoveryFn | None = None,
        source: str = "",
    ) -> None:
        self.config = config
        self.topic = topic
        self.transport_idx = transport_idx
        self.topic_idx = topic_idx
        self.source_request = source_request
        self.reply_to = reply_to
        self.ctxinst = bytes(ctxinst)
        self.source = source
        self.registration_fn = registration_fn
        self.recovery_fn = recovery_fn
        self.state = ReceiverState.IDLE
        self.sri_version: int | None = None
        self.src_session_id = 0
        self._stores: dict[int, _Store] = {}  # by store index (the SRI's)
        self._groups: dict[int, int] = {}  # group index -> size
        self._sends: list[tuple[Address, bytes]] = []
        self._events: list[tuple[int, CoreEvent]] = []
        self._recovery: tuple[int, int] | None = None
        self._recovery_taken = False
        self._sri_count = 0
        self._sri_next: float | None = None
        self._reg_started: float | None = None
        # consumption ACKs: the hot path only writes these two
        self._ack_high: int | None = None
        self._ack_due: float | None = None
        self._ack_sent: int | None = None  # last cumulative ACK sent
        self._ack_delay = config.ack_batching_interval if config.use_ack_batching else 0.0
        self._acking = not config.explicit_ack_only
        self._timer_other: float | None = None  # next_timer() of everything but the ACK batch
        self._now = now  # the latest ``now`` of an input other than consumed() (hot path)
        self._rr = 0  # RXREQ round-robin position
        self._rx_last: dict[int, int] = {}  # sqn -> store index of its last RXREQ
        self._counters: dict[str, int] = dict.fromkeys(
            (
                "sri_requests",
                "sris_received",
                "sris_ignored",
                "registrations_sent",
                "registration_successes",
                "registration_errors",
                "deregistrations_sent",
                "ack_messages",
                "acks_without_store",
                "keepalives_answered",
                "proactive_keepalives",
                "rxreqs_sent",
                "rxreq_retries",
                "rxreq_without_store",
                "rxreq_tracking_evicted",
                "unmatched_control",
                "callback_errors",
                "sends_dropped",
                "events_dropped",
            ),
            0,
        )

    # ==========================================================================================
    # Properties
    # ==========================================================================================

    @property
    def registered(self) -> bool:
        """Registered with at least one Store now."""
        return any(s.state in _USABLE for s in self._stores.values())

    @property
    def complete(self) -> bool:
        return self.state is ReceiverState.COMPLETE

    @property
    def failed(self) -> bool:
        return self.state is ReceiverState.FAILED

    @property
    def stores(self) -> tuple[Address, ...]:
        """The addresses of the Stores this receiver is registered with."""
        return tuple(s.address for s in self._stores.values() if s.state in _USABLE)

    # ==========================================================================================
    # Outputs
    # ==========================================================================================

    def take_sends(self) -> list[tuple[Address, bytes]]:
        if not self._sends:
            return []
        out, self._sends = self._sends, []
        return out

    def take_events(self) -> list[tuple[int, CoreEvent]]:
        if not self._events:
            return []
        out, self._events = self._events, []
        return out

    def take_recovery(self) -> tuple[int, int] | None:
        """Once, at Registration Complete: ``(first, high)`` to recover from the Stores
        (``first == high + 1``: nothing).  None before and after."""
        if self._recovery is None or self._recovery_taken:
            return None
        self._recovery_taken = True
        return self._recovery

    def stats(self) -> dict[str, int]:
        out = dict(self._counters)
        out["stores_registered"] = sum(1 for s in self._stores.values() if s.state in _USABLE)
        out["ack_sqn"] = NO_SQN if self._ack_sent is None else self._ack_sent
        return out

    def _send(self, dest: Address, data: bytes) -> None:
        if len(self._sends) >= MAX_PENDING_SENDS:
            self._counters["sends_dropped"] += 1
            return
        self._sends.append((dest, data))

    def _to_store(self, st: _Store, data: bytes, now: float) -> None:
        st.last_sent = now
        self._send(st.address, data)

    def _event(self, code: int, info: CoreEvent) -> None:
        if len(self._events) >= MAX_PENDING_EVENTS:
            self._counters["events_dropped"] += 1
            return
        self._events.append((code, info))

    def _error(self, text: str, store_index: int = 0) -> None:
        self._event(MSG_UME_REGISTRATION_ERROR, RcvRegistrationError(text, store_index))

    def _step(self, event: ReceiverInput) -> ReceiverState:
        nxt = RECEIVER_TRANSITIONS.get((self.state, event))
        if nxt is None:
            raise LocalProtocolError(
                f"persistent receiver: {event.value} in state {self.state.value}"
            )
        self.state = nxt
        return nxt

    # ==========================================================================================
    # Inputs
    # ==========================================================================================

    def start(self, now: float) -> None:
        """Begin: ask the source for an SRI (unless one already came)."""
        if self.state is not ReceiverState.IDLE:
            return
        self._step(ReceiverInput.START)
        if self.config.sri_request_maximum > 0:
            self._sri_request(now)
        self._plan()

    def _sri_request(self, now: float) -> None:
        self._sri_count += 1
        self._counters["sri_requests"] += 1
        self._send(
            self.source_request, compose.SriRequest(self.transport_idx, self.topic_idx).encode()
        )
        self._sri_next = now + self.config.sri_request_interval

    def receive_sri(self, sri: compose.Sri, now: float) -> None:
        """An SRI from the source's transport (for this topic)."""
        self._now = now
        c = self._counters
        c["sris_received"] += 1
        st = self.state
        if st not in (ReceiverState.IDLE, ReceiverState.SRI_WAIT, ReceiverState.REGISTERING,
                      ReceiverState.COMPLETE):  # fmt: skip
            c["sris_ignored"] += 1
            return
        if self.sri_version is not None and not serial_gt(sri.version, self.sri_version):
            c["sris_ignored"] += 1  # a repeat (or an old one): nothing new
            return
        first = self.sri_version is None
        old_version = self.sri_version
        self.sri_version = sri.version
        self._groups = {g.grp_idx: g.grp_sz for g in sri.groups}
        self._step(ReceiverInput.SRI)
        self._sri_next = None
        changes: list[str] = []
        for entry in sri.stores:
            known = self._stores.get(entry.store_idx)
            if known is None:
                store = _Store(entry)
                self._stores[entry.store_idx] = store
                if not first:
                    changes.append(f"Store {entry.store_idx} {store.text} added")
                self._register(store, now)
                continue
            moved = known.address != entry.address
            if not moved and not serial_gt(entry.version, known.version):
                continue
            changes.append(
                f"Store {entry.store_idx} {known.text} version {known.version} -> {entry.version}"
            )
            known.version = entry.version
            known.address = entry.address
            known.text = f"{entry.address[0]}:{entry.address[1]}"[:_STORE_STRLEN]
            known.src_reg_id = entry.src_reg_id
            known.grp_idx = entry.grp_idx
            known.domain_id = entry.domain_id
            if known.state in (StoreState.GIVEN_UP, StoreState.DEREGISTERED,
                               StoreState.DEREGISTERING):  # fmt: skip
                continue
            self._register(known, now)
        if not first:
            what = "; ".join(changes) if changes else "no Store changed"
            self._event(
                MSG_UME_REGISTRATION_CHANGE,
                RcvRegistrationChange(
                    f"source {self.source or self.topic} SRI version {old_version} -> "
                    f"{sri.version}: {what}"
                ),
            )
        self._check_complete(now)
        self._plan()

    def _register(self, st: _Store, now: float) -> None:
        """A PREG to ``st`` (first time, retry, or re-registration)."""
        if st.reg_id == 0 and self.registration_fn is not None:
            st.reg_id = self._ask_reg_id(st)
        req = compose.ReceiverRegistration(
            st.src_reg_id, self.transport_idx, self.topic_idx, self.reply_to,
            reg_id=st.reg_id, store_index=st.index, topic=self.topic,
            session_id=self.config.session_id, ctxinst=self.ctxinst,
            activity_timeout_ms=self.config.activity_timeout_ms,
            state_lifetime_ms=self.config.state_lifetime_ms, rpp_mode=self.config.rpp_mode,
        )  # fmt: skip
        st.step(StoreInput.PREG)
        st.answered = False
        st.next_try = now + self.config.registration_interval
        if self._reg_started is None:
            self._reg_started = now
        self._counters["registrations_sent"] += 1
        self._to_store(st, req.encode(), now)

    def _ask_reg_id(self, st: _Store) -> int:
        fn = self.registration_fn
        assert fn is not None
        try:
            value = fn(st.src_reg_id, st.index, st.text, self.source)
        except Exception as exc:  # the application's callback: report it, ask for "assign"
            self._counters["callback_errors"] += 1
            self._error(f"ume_registration_extended_function raised {exc!r}; using RegID 0",
                        st.index)  # fmt: skip
            return 0
        if not isinstance(value, int) or not 0 <= value <= _M:
            self._counters["callback_errors"] += 1
            self._error(f"ume_registration_extended_function returned {value!r} (a RegID is "
                        "0..4294967295); using RegID 0", st.index)  # fmt: skip
            return 0
        return value

    def receive_control(self, comp: compose.Composition, peer: str, now: float) -> bool:
        """A decoded store message from the request port; False: not this receiver's."""
        if self.state is ReceiverState.CLOSED:
            return False
        self._now = now
        if isinstance(comp, compose.RegistrationResponse):
            if comp.source or (comp.transport_idx, comp.topic_idx) != (
                self.transport_idx, self.topic_idx,
            ):  # fmt: skip
                return False
            st = self._stores.get(comp.store_index)
            if st is None:
                return False
            # once the Store assigned us a RegID its answers carry it (before, a Session ID
            # mapping may answer with another RegID than the one asked for)
            if st.state in _ASSIGNED and comp.reg_id != st.reg_id:
                return False
            if comp.deregistered:
                return self._deregistered(st, comp, now)
            if st.state not in (StoreState.REGISTERING, StoreState.REREGISTERING):
                # a late answer to a retry we already had an answer to
                return st.state in _USABLE and comp.error is None
            if comp.error is not None:
                self._refused(st, comp, now)
            else:
                self._accepted(st, comp, now)
            self._check_complete(now)
            self._plan()
            return True
        if isinstance(comp, compose.Keepalive):
            if comp.role != lbmc.KA_TYPE_STORE or (comp.transport_idx, comp.topic_idx) != (
                self.transport_idx, self.topic_idx,
            ):  # fmt: skip
                return False
            for st in self._stores.values():
                if (
                    st.reg_id == comp.reg_id
                    and st.state in _ASSIGNED
                    and (comp.store_index is None or comp.store_index == st.index)
                ):
                    # ours; answered while registered (not while leaving)
                    if comp.response_requested and st.state in _USABLE:
                        self._counters["keepalives_answered"] += 1
                        ka = compose.Keepalive(
                            lbmc.KA_TYPE_RECEIVER, self.transport_idx, self.topic_idx,
                            st.reg_id, store_index=st.index,
                        )  # fmt: skip
                        self._to_store(st, ka.encode(), now)
                        self._plan()
                    return True
            return False
        return False

    def _accepted(self, st: _Store, resp: compose.RegistrationResponse, now: float) -> None:
        c = self._counters
        if self.config.rpp_mode and not resp.rpp:
            c["registration_errors"] += 1
            st.step(StoreInput.FATAL)
            st.next_try = None
            self._error(f"Store {st.index} {st.text}: RPP requested but not granted", st.index)
            return
        c["registration_successes"] += 1
        st.step(StoreInput.SUCCESS)
        st.answered = True
        st.next_try = None
        st.reg_id = resp.reg_id
        st.low = resp.low_seqnum
        st.high = resp.high_seqnum
        st.rpp = resp.rpp
        if resp.session_id:
            self.src_session_id = resp.session_id
        flags = (
            (RCV_REG_FLAG_OLD if resp.old else 0)
            | (RCV_REG_FLAG_NOCACHE if resp.no_acks else 0)
            | (RCV_REG_FLAG_RPP if resp.rpp else 0)
            | (RCV_REG_FLAG_SRC_SID if resp.session_id else 0)
            | (RCV_REG_FLAG_RPP_IS_NON_BLOCKING if resp.rpp and self.config.rpp_mode == 2 else 0)
            | (RCV_REG_FLAG_PROACTIVE_KEEPALIVE if self.config.proactive_keepalive_interval else 0)
        )
        self._event(
            MSG_UME_REGISTRATION_SUCCESS_EX,
            RcvRegistrationSuccess(
                flags, st.src_reg_id, st.reg_id, resp.low_seqnum, st.index, st.text,
                resp.session_id,
            ),
        )  # fmt: skip
        # a Store that (re)registered after we ACKed learns where we are at once; an ACK
        # that found no Store goes out on the next timer turn
        if self._ack_sent is not None:
            self._ack_to(st, self._ack_sent, 0, now)
        high = self._ack_high
        if (
            high is not None
            and self._ack_due is None
            and (self._ack_sent is None or serial_gt(high, self._ack_sent))
        ):
            self._ack_due = now

    def _refused(self, st: _Store, resp: compose.RegistrationResponse, now: float) -> None:
        self._counters["registration_errors"] += 1
        code = resp.error
        st.answered = True
        text = f"Store {st.index} {st.text}: registration refused: {resp.error_text}"
        if code in _FATAL_ERRORS:
            st.step(StoreInput.FATAL)
            st.next_try = None
        else:
            st.step(StoreInput.ERROR)
            st.next_try = now + self.config.registration_interval
        self._error(text, st.index)

    # --- Registration Complete ------------------------------------------------------------------

    def _quorum(self) -> bool:
        """Some group has a majority of its Stores registered."""
        registered: dict[int, int] = {}
        counts: dict[int, int] = {}
        for st in self._stores.values():
            counts[st.grp_idx] = counts.get(st.grp_idx, 0) + 1
            if st.state in _USABLE:
                registered[st.grp_idx] = registered.get(st.grp_idx, 0) + 1
        for grp, n in registered.items():
            size = self._groups.get(grp) or counts[grp]
            if n >= size // 2 + 1:
                return True
        return False

    def _possible(self) -> bool:
        """A quorum can still come: some group has a majority not given up."""
        alive: dict[int, int] = {}
        counts: dict[int, int] = {}
        for st in self._stores.values():
            counts[st.grp_idx] = counts.get(st.grp_idx, 0) + 1
            if st.state is not StoreState.GIVEN_UP:
                alive[st.grp_idx] = alive.get(st.grp_idx, 0) + 1
        for grp, n in alive.items():
            size = self._groups.get(grp) or counts[grp]
            if n >= size // 2 + 1:
                return True
        return False

    def _check_complete(self, now: float) -> None:
        if self.state is not ReceiverState.REGISTERING:
            return
        if self._quorum():
            everyone = all(s.answered for s in self._stores.values())
            started = self._reg_started if self._reg_started is not None else now
            if everyone or now >= started + self.config.registration_interval:
                self._completed()
            return
        if not self._possible():
            self._step(ReceiverInput.IMPOSSIBLE)
            self._error(
                f"registration with the Stores of source {self.source or self.topic} failed: "
                "too few Stores accept this receiver for a quorum"
            )

    def _completed(self) -> None:
        answers = [s for s in self._stores.values() if s.state in _USABLE]
        low = consensus_of([s.low for s in answers], self.config.consensus)
        highs = [s.high for s in answers if s.high != NO_SQN]
        high = serial_sorted(highs)[-1] if highs else (low - 1) & _M
        if serial_gt(low, (high + 1) & _M):
            low = (high + 1) & _M  # a Store cannot have us start past what it holds
        flags = RCV_COMPLETE_FLAG_QUORUM
        low_max = low
        cap = self.config.retransmit_request_maximum
        if cap > 0:
            capped = (high - cap) & _M
            if serial_gt(capped, low) and not serial_gt(capped, high):
                low_max = capped
                flags |= RCV_COMPLETE_FLAG_RXREQMAX
        first = low_max
        if self.src_session_id:
            flags |= RCV_COMPLETE_FLAG_SRC_SID
        if self.recovery_fn is not None:
            info = RecoverySequenceInfo(
                low, low_max, high, self.source, self.src_session_id,
                RECOVERY_FLAG_SRC_SID if self.src_session_id else 0,
            )  # fmt: skip
            try:
                chosen = self.recovery_fn(info)
            except Exception as exc:  # the application's callback: report it, keep ours
                self._counters["callback_errors"] += 1
                self._error(f"ume_recovery_sequence_number_info_function raised {exc!r}")
                chosen = None
            if chosen is not None:
                if not isinstance(chosen, int) or not 0 <= chosen <= _M:
                    self._counters["callback_errors"] += 1
                    self._error(
                        f"ume_recovery_sequence_number_info_function returned {chosen!r} "
                        "(a sequence number is 0..4294967295); ignored"
                    )
                elif serial_gt(chosen, (high + 1) & _M):
                    # past what the Stores hold: as for ``low`` above, recovery starts after
                    # the newest stored message (none to recover), not at a range that wraps
                    first = (high + 1) & _M
                elif chosen != low:
                    first = chosen
        self._step(ReceiverInput.QUORUM)
        self._recovery = (first, high)
        self._event(
            MSG_UME_REGISTRATION_COMPLETE_EX,
            RcvRegistrationComplete(flags, first, self.src_session_id),
        )

    # --- retransmission requests ---------------------------------------------------------------

    def rxreq_messages(
        self, sqns: list[int], retry: bool, request_idx: int
    ) -> list[tuple[Address, bytes]]:
        """UME_RXREQs for ``sqns``, spread round robin over the registered Stores; a retry goes
        to the Store after the one its sequence number was last asked of."""
        c = self._counters
        usable = [s for s in self._stores.values() if s.state in _USABLE]
        if not usable:
            c["rxreq_without_store"] += len(sqns)
            return []
        n = len(usable)
        position = {s.index: i for i, s in enumerate(usable)}
        per: list[list[compose.RxReq]] = [[] for _ in usable]
        last = self._rx_last
        for sqn in sqns:
            i = -1
            if retry:
                prev = last.get(sqn)
                if prev is not None and prev in position:
                    i = (position[prev] + 1) % n
            if i < 0:
                i = self._rr % n
                self._rr = (self._rr + 1) % n
            st = usable[i]
            per[i].append(
                compose.RxReq(self.transport_idx, st.src_reg_id, sqn, self.reply_to, request_idx)
            )
            if sqn in last:
                del last[sqn]  # re-inserted last: the dict stays in age order
            elif len(last) >= MAX_RXREQ_TRACKED:
                del last[next(iter(last))]
                c["rxreq_tracking_evicted"] += 1
            last[sqn] = st.index
        c["rxreqs_sent"] += len(sqns)
        if retry:
            c["rxreq_retries"] += len(sqns)
        out: list[tuple[Address, bytes]] = []
        for st, reqs in zip(usable, per, strict=True):
            if not reqs:
                continue
            st.last_sent = self._now  # (no ``now`` argument: the latest input's)
            for msg in compose.rxreq_messages(reqs):
                out.append((st.address, msg.encode()))
        return out

    # --- consumption ACKs -----------------------------------------------------------------------

    def consumed(self, sqn: int, now: float) -> bool:
        """The application consumed ``sqn`` (hot path: O(1), two attribute writes).  True when
        that set the ACK batch's deadline (:meth:`next_timer` moved); else it did not move."""
        if not self._acking:
            return False
        high = self._ack_high
        if high is None or 0 < ((sqn - high) & _M) < _HALF:
            self._ack_high = sqn
            if self._ack_due is None:
                self._ack_due = now + self._ack_delay
                return True
        return False

    def explicit_ack(self, sqn: int, now: float) -> None:
        """The application ACKs ``sqn`` (and everything before it): sent at once."""
        if self.state in (ReceiverState.DEREGISTERING, ReceiverState.DEREGISTERED,
                          ReceiverState.CLOSED):  # fmt: skip
            return
        self._now = now
        high = self._ack_high
        if high is None or serial_gt(sqn, high):
            self._ack_high = sqn
        self._flush_acks(now, lbmc.ACK_FLAG_E)
        self._plan()

    def _flush_acks(self, now: float, flags: int = 0) -> None:
        self._ack_due = None
        sqn = self._ack_high
        if sqn is None:
            return
        sent = self._ack_sent
        if sent is not None and not serial_gt(sqn, sent):
            return
        usable = [s for s in self._stores.values() if s.state in _USABLE]
        if not usable:
            self._counters["acks_without_store"] += 1
            return  # kept in _ack_high: a Store registering later gets it
        self._ack_sent = sqn
        for st in usable:
            self._ack_to(st, sqn, flags, now)

    def _ack_to(self, st: _Store, sqn: int, flags: int, now: float) -> None:
        self._counters["ack_messages"] += 1
        ack = compose.ConsumptionAck(self.transport_idx, st.src_reg_id, st.reg_id, sqn, flags)
        self._to_store(st, ack.encode(), now)

    # --- deregistration, close ------------------------------------------------------------------

    def deregister(self, now: float) -> None:
        """PREG D=1 to every registered Store (UM's ``lbm_rcv_ume_deregister``)."""
        if self.state in (ReceiverState.DEREGISTERING, ReceiverState.DEREGISTERED,
                          ReceiverState.CLOSED):  # fmt: skip
            return
        self._now = now
        self._flush_acks(now)  # what was consumed is ACKed before the state goes
        self._acking = False
        self._ack_high = None
        self._ack_due = None
        targets = [s for s in self._stores.values() if s.state in _USABLE]
        for st in self._stores.values():
            if st.state in _USABLE:
                st.step(StoreInput.DEREGISTER)
            elif st.state is not StoreState.DEREGISTERED:
                st.step(StoreInput.DROP)
            st.next_try = None
        self._sri_next = None
        state = self._step(ReceiverInput.DEREGISTER)
        if not targets:
            if state is ReceiverState.DEREGISTERING:
                self._step(ReceiverInput.DEREGISTERED)
            self._event(MSG_UME_DEREGISTRATION_COMPLETE_EX, RcvDeregistrationComplete())
        for st in targets:
            self._send_dereg(st, now)
        self._plan()

    def _send_dereg(self, st: _Store, now: float) -> None:
        self._counters["deregistrations_sent"] += 1
        d = compose.Deregistration(
            False, st.reg_id, self.transport_idx, self.topic_idx, self.reply_to,
            src_reg_id=st.src_reg_id, store_index=st.index, session_id=self.config.session_id,
        )  # fmt: skip
        st.next_try = now + self.config.registration_interval
        self._to_store(st, d.encode(), now)

    def _deregistered(self, st: _Store, resp: compose.RegistrationResponse, now: float) -> bool:
        if st.state is not StoreState.DEREGISTERING:
            return st.state is StoreState.DEREGISTERED  # a repeat answer: ours, nothing to do
        st.step(StoreInput.DEREGISTERED)
        st.next_try = None
        self._event(
            MSG_UME_DEREGISTRATION_SUCCESS_EX,
            RcvDeregistrationSuccess(
                DEREG_FLAG_RPP if st.rpp else 0, st.src_reg_id, st.reg_id, resp.low_seqnum,
                st.index, st.text,
            ),
        )  # fmt: skip
        if all(s.state is not StoreState.DEREGISTERING for s in self._stores.values()):
            self._step(ReceiverInput.DEREGISTERED)
            self._event(MSG_UME_DEREGISTRATION_COMPLETE_EX, RcvDeregistrationComplete())
        self._plan()
        return True

    def close(self, now: float) -> None:
        """The receiver is deleted: a batched ACK goes out now; no timer after this."""
        if self.state is ReceiverState.CLOSED:
            return
        if self._acking:
            self._flush_acks(now)
        self._acking = False
        self._ack_due = None
        self._step(ReceiverInput.CLOSE)
        self._timer_other = None

    # ==========================================================================================
    # Timers
    # ==========================================================================================

    def next_timer(self) -> float | None:
        a = self._ack_due
        o = self._timer_other
        if a is None:
            return o
        if o is None or a < o:
            return a
        return o

    def _plan(self) -> None:
        """Recompute the next deadline of everything but the ACK batch."""
        st = self.state
        if st is ReceiverState.CLOSED:
            self._timer_other = None
            return
        best: float | None = None
        if st is ReceiverState.SRI_WAIT:
            best = self._sri_next
        ka = self.config.proactive_keepalive_interval
        retrying = st in _ACTIVE or st is ReceiverState.DEREGISTERING
        for s in self._stores.values():
            t = s.next_try
            if retrying and t is not None and (best is None or t < best):
                best = t
            if ka > 0 and s.state in _USABLE and st is ReceiverState.COMPLETE:
                t = s.last_sent + ka
                if best is None or t < best:
                    best = t
        # Registration Complete waits for this deadline once a quorum is in
        if st is ReceiverState.REGISTERING and self._reg_started is not None and self._quorum():
            t = self._reg_started + self.config.registration_interval
            if best is None or t < best:
                best = t
        self._timer_other = best

    def handle_timer(self, now: float) -> None:
        st = self.state
        if st is ReceiverState.CLOSED:
            return
        self._now = now
        due = self._ack_due
        if due is not None and now >= due:
            self._flush_acks(now)
        if st is ReceiverState.SRI_WAIT and self._sri_next is not None and now >= self._sri_next:
            if self._sri_count >= self.config.sri_request_maximum:
                self._sri_next = None
                self._step(ReceiverInput.SRI_EXHAUSTED)
                self._error(
                    f"no SRI from source {self.source or self.topic} after "
                    f"{self._sri_count} SRI requests: registration failed"
                )
            else:
                self._sri_request(now)
        retrying = self.state in _ACTIVE or self.state is ReceiverState.DEREGISTERING
        for s in self._stores.values():
            t = s.next_try
            if not retrying or t is None or now < t:
                continue
            if s.state in _ASKING:
                self._register(s, now)
            elif s.state is StoreState.DEREGISTERING:
                self._send_dereg(s, now)
        self._check_complete(now)
        ka = self.config.proactive_keepalive_interval
        if ka > 0 and self.state is ReceiverState.COMPLETE:
            for s in self._stores.values():
                if s.state in _USABLE and now >= s.last_sent + ka:
                    self._counters["proactive_keepalives"] += 1
                    if self._ack_sent is not None and self._acking:
                        self._ack_to(s, self._ack_sent, 0, now)
                    else:
                        rk = compose.ReceiverKeepalive(
                            s.reg_id, self.config.session_id, self.ctxinst
                        )
                        self._to_store(s, rk.encode(), now)
        self._plan()
