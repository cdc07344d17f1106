"""RegIDs, Session IDs, and the sources and receivers a Store instance knows, with their clocks.

Theory of operation
-------------------
A **RegID** (registration ID) is a 32-bit number naming a source or a receiver to one Store
instance; 0 in a request means "Store, assign one".  No two live objects share one: a source's
RegID may not be a receiver's (EREGID).  A receiver's state is per (source RegID, receiver
RegID) pair, so one receiver RegID may appear under several sources.  The Store assigns
RegIDs from a seeded :class:`random.Random` (any unique non-zero 32-bit value is acceptable;
a seed makes tests repeatable).

A **Session ID** (64-bit, 0 = none) lets a client ask for RegID 0 and get the same RegID back
each time: the registry maps (topic, Session ID) -> RegID, creating the entry on first sight.

Each client (:class:`SourceEntry`, :class:`ReceiverEntry`) moves through :class:`Liveness`
by one transition table (:data:`TRANSITIONS`)::

    RESTORED --register--> ACTIVE --timeout--> INACTIVE --register/activity--> ACTIVE
    any --expire/deregister--> DELETED

*Activity* is any message from the client.  The **activity timeout** is the client's value
when non-zero (UME_CLIENT_LIFETIME), else the Store's (``source-activity-timeout`` /
``receiver-activity-timeout``); a source's is frozen at its first registration (kept in the
state file).  While ACTIVE with a timeout > 0 its RegID is *strong*: a different registrant
asking for it is refused (EACTIVE); timeout 0 makes it *weak* (never inactive, never refused).
The **state lifetime** is the shorter non-zero of the client's and the Store's
(``*-state-lifetime``; 0 = off); state is deleted when the lifetime runs out since the last
activity, or, with no lifetime, as soon as the activity timeout fires.  :meth:`Clock.verdict`
tells the core which applies at ``now``; the core checks every ``source-check-interval``.
"""

from __future__ import annotations

import enum
import random
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from umcore.config.store import StoreTopic

if TYPE_CHECKING:
    from umcore.store.catchup import CatchUp
    from umcore.store.repository import Repository

__all__ = [
    "TRANSITIONS",
    "ClientEvent",
    "Clock",
    "Liveness",
    "ReceiverEntry",
    "Registry",
    "SourceEntry",
    "Verdict",
    "considered_activity",
    "considered_lifetime",
    "serial_gt",
]

Address = tuple[str, int]
_M = 0xFFFFFFFF
_HALF = 0x80000000
NO_SQN = 0xFFFFFFFF


def serial_gt(a: int, b: int) -> bool:
    """``a`` comes after ``b`` in 32-bit serial-number arithmetic."""
    return 0 < ((a - b) & _M) < _HALF


def considered_activity(client_ms: int, store_ms: int) -> int:
    """The activity timeout in force: the client's when non-zero, else the Store's."""
    return client_ms if client_ms else store_ms


def considered_lifetime(client_ms: int, store_ms: int) -> int:
    """The state lifetime in force: the shorter non-zero one (0 = off on both sides)."""
    if client_ms and store_ms:
        return min(client_ms, store_ms)
    return client_ms or store_ms


class Liveness(enum.Enum):
    RESTORED = "restored"  # read back from a state file; not registered since start-up
    ACTIVE = "active"
    INACTIVE = "inactive"  # activity timeout passed; state kept for its lifetime
    DELETED = "deleted"


class ClientEvent(enum.Enum):
    REGISTER = "register"
    ACTIVITY = "activity"
    TIMEOUT = "timeout"
    EXPIRE = "expire"
    DEREGISTER = "deregister"


_L, _E = Liveness, ClientEvent
# (state, event) -> next state; a pair not listed leaves the state unchanged.
TRANSITIONS: dict[tuple[Liveness, ClientEvent], Liveness] = {
    (_L.RESTORED, _E.REGISTER): _L.ACTIVE,
    (_L.INACTIVE, _E.REGISTER): _L.ACTIVE,
    (_L.INACTIVE, _E.ACTIVITY): _L.ACTIVE,
    (_L.ACTIVE, _E.TIMEOUT): _L.INACTIVE,
    (_L.RESTORED, _E.TIMEOUT): _L.INACTIVE,
    **{(s, _E.EXPIRE): _L.DELETED for s in (_L.RESTORED, _L.ACTIVE, _L.INACTIVE)},
    **{(s, _E.DEREGISTER): _L.DELETED for s in (_L.RESTORED, _L.ACTIVE, _L.INACTIVE)},
}


class Verdict(enum.Enum):
    NONE = 0
    TIMEOUT = 1  # the activity timeout fired now
    EXPIRE = 2  # delete the state now


@dataclass(slots=True)
class Clock:
    """A client's liveness, timeouts in milliseconds and times in seconds."""

    activity_ms: int
    lifetime_ms: int
    last_heard: float
    state: Liveness = Liveness.ACTIVE
    last_sent: float = -1.0  # last message the Store sent it (keepalive idleness); -1: now

    def __post_init__(self) -> None:
        if self.last_sent < 0:
            self.last_sent = self.last_heard

    def step(self, event: ClientEvent) -> Liveness:
        self.state = TRANSITIONS.get((self.state, event), self.state)
        return self.state

    def heard(self, now: float) -> None:
        self.last_heard = now
        self.step(ClientEvent.ACTIVITY)

    @property
    def strong(self) -> bool:
        """The RegID is owned while ACTIVE (activity timeout > 0)."""
        return self.activity_ms > 0 and self.state is Liveness.ACTIVE

    def verdict(self, now: float) -> Verdict:
        silent = (now - self.last_heard) * 1000.0
        if self.state is Liveness.DELETED:
            return Verdict.NONE
        if self.lifetime_ms and silent >= self.lifetime_ms:
            return Verdict.EXPIRE
        timed_out = self.activity_ms > 0 and silent >= self.activity_ms
        if not timed_out:
            return Verdict.NONE
        if not self.lifetime_ms:
            return Verdict.EXPIRE
        if self.state is Liveness.INACTIVE:
            return Verdict.NONE
        return Verdict.TIMEOUT


@dataclass(slots=True)
class ReceiverEntry:
    """One receiver's state under one source."""

    reg_id: int
    src_reg_id: int
    session_id: int
    reply_to: Address
    clock: Clock
    rpp_mode: int = 0
    high_ack_sqn: int = NO_SQN
    ctxinst: bytes = bytes(8)
    transport_idx: int = 0
    topic_idx: int = 0
    store_index: int = 0
    created: float = 0.0
    creating: bool = False  # its answer waits for the state write naming it

    @property
    def blocking(self) -> bool:
        return self.rpp_mode == 1


@dataclass(slots=True)
class SourceEntry:
    """One source's registration and state at this Store (its repository included)."""

    reg_id: int
    topic: str
    topic_cfg: StoreTopic
    session_id: int
    transport_idx: int
    topic_idx: int
    reply_to: Address
    clock: Clock
    repository: Repository
    ctxinst: bytes = bytes(8)
    store_index: int = 0
    rpp: bool = False
    rpp_options: dict[str, int] = field(default_factory=dict)
    ack_on_reception: bool = False
    flight_size_bytes: int = 0
    created: float = 0.0
    receivers: dict[int, ReceiverEntry] = field(default_factory=dict)
    # stability ACK batch: pending [first, last] ranges in order, their size, when the first came
    ack_ranges: list[list[int]] = field(default_factory=list)
    ack_count: int = 0
    # the newest sqn reported stable (ACKed or pending): ranges are clipped after it
    stable_through: int = NO_SQN
    # ranges declared lost (receive_loss) not yet passed by stability: NAKed, never ACKed
    lost_ranges: list[tuple[int, int]] = field(default_factory=list)
    ack_since: float = 0.0
    # state file: a write is due at state_due when dirty (ACK positions)
    state_dirty: bool = False
    state_due: float = 0.0
    next_check: float = 0.0
    retx_prefix: bytes = b""
    matched: bool = False  # a transport session's frames were matched to it
    creating: bool = False  # its answer waits for the state write naming it
    due: float = float("inf")  # when it next needs the core's timer (StoreCore's heap)
    due_seq: int = 0
    rpp_writing: bool = False  # RPP: writing to disk began and the repository is not empty yet
    # stability-ack-minimum-number and stability-ack-interval (seconds), read once
    ack_minimum: int = 1
    ack_interval: float = 0.2
    # late join to the source while its repository starts (umcore.store.catchup); None: none
    catchup: CatchUp | None = None

    def same_registrant(self, reply_to: Address, ctxinst: bytes, session_id: int) -> bool:
        """A registration from the registrant we know, not a second one asking for the RegID:
        the same Session ID (the application's durable identity: a restarted process keeps
        it), else the same context instance when both have one, else the same request
        address."""
        if session_id and session_id == self.session_id:
            return True
        zero = bytes(8)
        if ctxinst != zero and self.ctxinst != zero:
            return ctxinst == self.ctxinst
        return reply_to == self.reply_to


class Registry:
    """Every source and receiver of one Store instance, the RegIDs in use and the Session ID
    maps.  Bookkeeping only: the core decides."""

    def __init__(self, seed: int | None = None) -> None:
        self.rng = random.Random(seed)
        self.sources: dict[int, SourceEntry] = {}
        # receiver RegID -> {source RegID: entry}
        self.receivers: dict[int, dict[int, ReceiverEntry]] = {}
        self.source_sessions: dict[tuple[str, int], int] = {}
        self.receiver_sessions: dict[tuple[str, int], int] = {}
        self.topics: dict[str, set[int]] = {}

    def in_use(self, reg_id: int) -> bool:
        return reg_id in self.sources or reg_id in self.receivers

    def assign(self) -> int:
        """A new unique non-zero RegID."""
        while True:
            reg_id = self.rng.getrandbits(32)
            if reg_id and not self.in_use(reg_id):
                return reg_id

    # --- sources ---------------------------------------------------------------------------

    def add_source(self, src: SourceEntry) -> bool:
        """Record ``src``; True when it is the first source of its topic."""
        self.sources[src.reg_id] = src
        if src.session_id:
            self.source_sessions[(src.topic, src.session_id)] = src.reg_id
        regs = self.topics.setdefault(src.topic, set())
        first = not regs
        regs.add(src.reg_id)
        for rcv in src.receivers.values():
            self.add_receiver(src, rcv)
        return first

    def remove_source(self, src: SourceEntry) -> bool:
        """Forget ``src`` and its receivers; True when it was the last source of its topic."""
        for rcv in list(src.receivers.values()):
            self.remove_receiver(src, rcv)
        self.sources.pop(src.reg_id, None)
        if src.session_id and self.source_sessions.get((src.topic, src.session_id)) == src.reg_id:
            del self.source_sessions[(src.topic, src.session_id)]
        regs = self.topics.get(src.topic)
        if regs is None:
            return False
        regs.discard(src.reg_id)
        if regs:
            return False
        del self.topics[src.topic]
        return True

    # --- receivers -------------------------------------------------------------------------

    def add_receiver(self, src: SourceEntry, rcv: ReceiverEntry) -> None:
        src.receivers[rcv.reg_id] = rcv
        self.receivers.setdefault(rcv.reg_id, {})[src.reg_id] = rcv
        if rcv.session_id:
            self.receiver_sessions[(src.topic, rcv.session_id)] = rcv.reg_id

    def remove_receiver(self, src: SourceEntry, rcv: ReceiverEntry) -> None:
        src.receivers.pop(rcv.reg_id, None)
        by_src = self.receivers.get(rcv.reg_id)
        if by_src is not None:
            by_src.pop(src.reg_id, None)
            if not by_src:
                del self.receivers[rcv.reg_id]
                key = (src.topic, rcv.session_id)
                if rcv.session_id and self.receiver_sessions.get(key) == rcv.reg_id:
                    del self.receiver_sessions[key]

    def receiver_states(self, reg_id: int) -> list[ReceiverEntry]:
        return list(self.receivers.get(reg_id, {}).values())
