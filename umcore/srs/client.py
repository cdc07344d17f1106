"""The client side of the SRS protocol as a sans-IO core: what a context does with
``resolver_service``.

Theory of operation
-------------------
A context lists up to five SRS addresses (``resolver_service``) and uses **all** of them: it
keeps one TCP connection to each ("hot/hot"), sends every record to every SRS and merges what
they send back.  :class:`SRSClient` manages those connections as numbered *slots* (0..n-1, in
configuration order) without touching a socket:

- the adapter asks :meth:`SRSClient.take_connects` which slots to (re)connect now, reports
  :meth:`~SRSClient.receive_connected` / :meth:`~SRSClient.receive_connect_failed` /
  :meth:`~SRSClient.receive_disconnected`, feeds bytes with :meth:`~SRSClient.receive_data`,
  writes what :meth:`~SRSClient.take_writes` returns, closes what
  :meth:`~SRSClient.take_closes` returns, and calls :meth:`~SRSClient.handle_timer` at
  :meth:`~SRSClient.next_timer`;
- the context calls :meth:`~SRSClient.send_source` / :meth:`~SRSClient.send_source_delete`
  (SIR / SDR), :meth:`~SRSClient.send_receiver` / :meth:`~SRSClient.send_receiver_delete`
  (RIR / RDR, reference-counted per topic) and :meth:`~SRSClient.send_wildcard` /
  :meth:`~SRSClient.send_wildcard_delete` (WIR / WDR), and reads
  :meth:`~SRSClient.take_events`: :class:`SourceResolved` when a source is first learned (or
  its advertisement changed) and :class:`SourceWithdrawn` when it ended (all events derive from
  :class:`Event`);
- context names (Store name resolution over the SRS): :meth:`~SRSClient.send_context_name_info`
  (CNIR: this context advertises a name) and :meth:`~SRSClient.send_context_name_query` (CNQR:
  it looks for one).  The SRS relays a CNIR to the clients that sent a CNQR for its name, now
  or later, and a CNER when the named context's record expired; they come back as
  :class:`ContextNameAnswered` / :class:`ContextNameEnded`.  The SRS protocol has no record
  withdrawing a CNIR or a CNQR: :meth:`~SRSClient.withdraw_context_name` and
  :meth:`~SRSClient.cancel_context_name_query` only stop them being sent again on reconnects
  (the SRS forgets them when this context's state expires there).

Each slot is a small state machine (:class:`SlotState`, moved by :class:`SlotInput` along the
one table :data:`SLOT_TRANSITIONS`): DOWN -> CONNECTING -> REGISTERING -> STREAMING, and back
to DOWN on a lost connection, bad input or silence.  An input the table does not allow is
refused: the SRS's fault (a registration response while streaming, records before it) costs the
slot its connection; the adapter's (reporting a connect for a slot it was not asked to
connect) raises :class:`~umcore.errors.LocalProtocolError`.

Session per slot: SETUP (keepalive interval, max lifetime), registration request on stream 1
(same ``session_id`` for the whole life of the context, so an SRS recognises a reconnect and
keeps its state), registration response, stream request on stream 3, then the **full state**:
every source, receiver topic and pattern is sent again on every (re)connect, unasked — that is
how a context re-synchronises with an SRS that restarted and lost everything.  A KEEPALIVE with
the respond flag goes out every keepalive interval; a slot that hears nothing for the max
lifetime is closed and reconnected.  Reconnects back off from ``reconnect_min`` doubling to
``reconnect_max`` and the back-off resets once a registration succeeds.

Merging several SRSes: a source is *resolved* when the first SRS reports it and *withdrawn*
when every SRS that reported it has sent its SER (source end: the SIR with cost -1).  Losing
the connection to an SRS does not withdraw anything: the others still vouch for the source, and
the lost SRS will resend it after the reconnect.  A source that ended while we were cut off
from every SRS gets no SER; so ``resync_grace`` seconds after a (re)registration, sources that
no connected SRS has re-sent since are withdrawn (``slot`` -1 in the event).

Bad bytes from an SRS cost that slot its connection (counted in ``malformed``), never the
context.
"""

from __future__ import annotations

import enum
import os
import struct
from collections.abc import Iterable
from dataclasses import dataclass

from umcore.errors import LocalProtocolError, RemoteProtocolError
from umcore.events import CoreEvent
from umcore.wire.srs import (
    FLAG_NEXT,
    Error,
    Keepalive,
    RequestResponse,
    RequestStream,
    Setup,
    SRSStreamDecoder,
    encode,
)
from umcore.wire.srs_messages import (
    APP_TYPE_APPLICATION,
    APP_TYPE_STORE,
    INTEREST_MODE_FILTER,
    SER_COST,
    Batch,
    BatchRecord,
    ContextNameEnd,
    ContextNameInfo,
    ContextNameQuery,
    DomainInfo,
    ReceiverDelete,
    ReceiverEnd,
    ReceiverInfo,
    RegistrationRequest,
    RegistrationResponse,
    RouteEnd,
    RouteInfo,
    SourceDelete,
    SourceInfo,
    SRSError,
    StreamRequest,
    WildcardReceiverDelete,
    WildcardReceiverEnd,
    WildcardReceiverInfo,
)

__all__ = [
    "MAX_NAMES",
    "MAX_RESOLVED",
    "MAX_SERVERS",
    "SLOT_TRANSITIONS",
    "ContextNameAnswered",
    "ContextNameEnded",
    "DroRecord",
    "Event",
    "InterestReported",
    "Registered",
    "SRSClient",
    "SlotDown",
    "SlotInput",
    "SlotState",
    "SourceResolved",
    "SourceWithdrawn",
]

# UM accepts at most five resolver_service entries.
MAX_SERVERS = 5
# Sources learned from the SRSes that we keep (flood mode learns every source of the TRD): each
# costs ~1 KB; beyond this new sources are refused and counted in ``refused_sources``.
MAX_RESOLVED = 1_000_000
# Context names this context advertises or queries over the SRS (the SRS's own per-client bound,
# umcore.srs.common.MAX_NAMES_PER_CLIENT, is larger; a context needs a handful).
MAX_NAMES = 1_000
# Events waiting for take_events(): the context drains them after each input.
MAX_EVENTS = 1_000_000
# Largest frame we build for our batches (the SRS's default batch-frame-max-datagram-size).
BATCH_FRAME_BYTES = 8192
REGISTRATION_STREAM = 1
RECORD_STREAM = 3

_HEAD = struct.Struct("!IH")
_PAYLOAD_NEXT = (0x0A << 10) | FLAG_NEXT

SourceKey = tuple[bytes, str]


class SlotState(enum.Enum):
    """Where one SRS connection (a *slot*) is in its life."""

    DOWN = "down"  # waiting for the reconnect time
    CONNECTING = "connecting"  # the adapter is connecting
    REGISTERING = "registering"  # SETUP + registration request sent
    STREAMING = "streaming"  # registered, stream open, state sent


class SlotInput(enum.Enum):
    """What moves a slot: the adapter's reports, the SRS's answers and our timers."""

    RECONNECT_DUE = "reconnect due"  # timer: the back-off ran out
    CONNECTED = "connected"  # adapter: the TCP connection is up
    CONNECT_FAILED = "connect failed"  # adapter: the connect failed or timed out
    REGISTERED = "registered"  # SRS: the registration response
    RECORDS = "records"  # SRS: a batch of records
    LOST = "lost"  # connection lost, bad input or silence: back to DOWN


#: The slot machine: (state, input) -> next state.  Anything else is refused by _transition.
SLOT_TRANSITIONS: dict[tuple[SlotState, SlotInput], SlotState] = {
    (SlotState.DOWN, SlotInput.RECONNECT_DUE): SlotState.CONNECTING,
    (SlotState.CONNECTING, SlotInput.CONNECTED): SlotState.REGISTERING,
    (SlotState.CONNECTING, SlotInput.CONNECT_FAILED): SlotState.DOWN,
    (SlotState.CONNECTING, SlotInput.LOST): SlotState.DOWN,
    (SlotState.REGISTERING, SlotInput.REGISTERED): SlotState.STREAMING,
    (SlotState.REGISTERING, SlotInput.LOST): SlotState.DOWN,
    (SlotState.STREAMING, SlotInput.RECORDS): SlotState.STREAMING,
    (SlotState.STREAMING, SlotInput.LOST): SlotState.DOWN,
}
#: Inputs that come from the SRS: refusing one is the peer's fault (RemoteProtocolError).
REMOTE_SLOT_INPUTS = frozenset({SlotInput.REGISTERED, SlotInput.RECORDS})


# What a forward-interest client hears of other contexts' interest, and its mode bit.
_INTEREST_RECORDS = (ReceiverInfo, ReceiverEnd, WildcardReceiverInfo, WildcardReceiverEnd)
_FORWARD_INTEREST = 0x02


@dataclass(frozen=True, slots=True)
class Event(CoreEvent):
    """Base of everything :meth:`SRSClient.take_events` returns (each names its ``slot``)."""


@dataclass(frozen=True, slots=True, repr=False)
class SourceResolved(Event):
    """A source was learned (``updated`` when a known source's advertisement changed)."""

    record: SourceInfo
    slot: int
    updated: bool = False

    def __repr__(self) -> str:
        return f"SourceResolved({self.record.topic!r}, {self.record.source!r}, slot={self.slot})"


@dataclass(frozen=True, slots=True, repr=False)
class SourceWithdrawn(Event):
    """Every SRS that reported the source sent its SER: the source is gone."""

    record: SourceInfo
    slot: int

    def __repr__(self) -> str:
        return f"SourceWithdrawn({self.record.topic!r}, {self.record.source!r}, slot={self.slot})"


@dataclass(frozen=True, slots=True)
class ContextNameAnswered(Event):
    """An SRS relayed a CNIR: a named context (Store) and its address."""

    record: ContextNameInfo
    slot: int


@dataclass(frozen=True, slots=True)
class ContextNameEnded(Event):
    """An SRS relayed a CNER: the named context's record expired there."""

    record: ContextNameEnd
    slot: int


@dataclass(frozen=True, slots=True)
class DroRecord(Event):
    """An SRS relayed a DRO's record: DIR (its TRD's domain id), RTIR (a route through one of
    its portals) or RTER (that route ended).  For the context's domain table
    (:mod:`umcore.resolver.dro`)."""

    record: DomainInfo | RouteInfo | RouteEnd
    slot: int


@dataclass(frozen=True, slots=True)
class InterestReported(Event):
    """A forward-interest client (a DRO endpoint, interest mode 2/3) heard another context's
    interest: RIR / WIR (receivers of a topic / pattern there), RER / WER (that interest ended,
    by a delete or the SRS's interest-state lifetime)."""

    record: ReceiverInfo | ReceiverEnd | WildcardReceiverInfo | WildcardReceiverEnd
    slot: int


@dataclass(frozen=True, slots=True)
class Registered(Event):
    """Slot ``slot`` registered with its SRS (``client_id`` from the response)."""

    slot: int
    client_id: int


@dataclass(frozen=True, slots=True)
class SlotDown(Event):
    """Slot ``slot`` lost (or failed to open) its connection; ``reason`` for the log."""

    slot: int
    reason: str


class _Slot:
    __slots__ = (
        "address",
        "backoff",
        "client_id",
        "connects",
        "decoder",
        "index",
        "last_rx",
        "next_keepalive",
        "reconnect_at",
        "resync_at",
        "state",
    )

    def __init__(self, index: int, address: tuple[str, int]) -> None:
        self.index = index
        self.address = address
        self.state = SlotState.DOWN
        self.reconnect_at = 0.0
        self.backoff = 0.0
        self.decoder = SRSStreamDecoder()
        self.last_rx = 0.0
        self.next_keepalive = 0.0
        self.client_id: int | None = None
        self.connects = 0
        self.resync_at: float | None = None

    def _transition(self, what: SlotInput) -> SlotState:
        """Move along :data:`SLOT_TRANSITIONS`; an input the table does not allow in this state
        is the SRS's fault (:class:`RemoteProtocolError`) or the adapter's
        (:class:`LocalProtocolError`)."""
        nxt = SLOT_TRANSITIONS.get((self.state, what))
        if nxt is None:
            message = f"slot {self.index}: {what.value} while {self.state.value}"
            if what in REMOTE_SLOT_INPUTS:
                raise RemoteProtocolError(message, record="SRS session")
            raise LocalProtocolError(message)
        self.state = nxt
        return nxt


class _Known:
    __slots__ = ("raw", "record", "slots")

    def __init__(self, record: SourceInfo, raw: bytes) -> None:
        self.record = record
        self.raw = raw
        self.slots: set[int] = set()


def _payload_frame(stream_id: int, body: bytes) -> bytes:
    size = _HEAD.size + len(body)
    return size.to_bytes(3, "big") + _HEAD.pack(stream_id, _PAYLOAD_NEXT) + body


def _frames(raws: list[bytes], max_bytes: int = BATCH_FRAME_BYTES) -> bytes:
    """Batch PAYLOAD frames on the record stream carrying ``raws`` in order."""
    limit = max_bytes - 3 - _HEAD.size
    out: list[bytes] = []
    batch: list[bytes] = []
    size = 0
    for raw in raws:
        if batch and size + len(raw) > limit:
            out.append(_payload_frame(RECORD_STREAM, b"".join(batch)))
            batch, size = [], 0
        batch.append(raw)
        size += len(raw)
    if batch:
        out.append(_payload_frame(RECORD_STREAM, b"".join(batch)))
    return b"".join(out)


class SRSClient:
    """One context's connections to its SRS instances; see the module docstring."""

    def __init__(
        self,
        servers: list[tuple[str, int]],
        *,
        now: float = 0.0,
        client_addr: str = "0.0.0.0",
        client_port: int = 0,
        session_id: int | None = None,
        host_id: int = 0,
        interest_mode: int = INTEREST_MODE_FILTER,
        app_type: int = APP_TYPE_APPLICATION,
        local_domain_id: int = 0,
        context_instance: bytes | None = None,
        keepalive_interval: float = 5.0,
        max_lifetime: float = 20.0,
        reconnect_min: float = 0.1,
        reconnect_max: float = 5.0,
        resync_grace: float = 5.0,
    ) -> None:
        if not 1 <= len(servers) <= MAX_SERVERS:
            raise ValueError(f"resolver_service takes 1..{MAX_SERVERS} SRS addresses")
        self.slots = [_Slot(i, addr) for i, addr in enumerate(servers)]
        self.client_addr = client_addr
        self.client_port = client_port
        self.session_id = (
            session_id if session_id is not None else int.from_bytes(os.urandom(4), "big")
        )
        self.host_id = host_id
        self.interest_mode = interest_mode
        self.app_type = app_type
        self.local_domain_id = local_domain_id
        self.context_instance = context_instance or os.urandom(8)
        self.keepalive_interval = keepalive_interval
        self.max_lifetime = max_lifetime
        self.reconnect_min = reconnect_min
        self.reconnect_max = reconnect_max
        self.resync_grace = resync_grace
        # our state, as encoded records (sent again in full on every connect)
        self._sources: dict[SourceKey, bytes] = {}
        self._receivers: dict[str, int] = {}  # topic -> reference count
        self._receiver_raw: dict[str, bytes] = {}
        self._patterns: dict[str, int] = {}
        self._pattern_raw: dict[str, bytes] = {}
        self._name_infos: dict[str, bytes] = {}  # own context names: name -> CNIR
        self._name_queries: dict[str, bytes] = {}  # names looked for: name -> CNQR
        self._dro_records: dict[bytes, bytes] = {}  # a DRO endpoint's DIR / RTIRs (raw -> raw)
        # a DRO endpoint's remote interest: (symbol, is pattern) -> (domain id, RIR / WIR)
        self._remote: dict[tuple[str, bool], tuple[int, bytes]] = {}
        # what the SRSes told us
        self._known: dict[SourceKey, _Known] = {}
        self._writes: dict[int, list[bytes]] = {}
        self._closes: list[int] = []
        self._connects: list[int] = []
        self._events: list[Event] = []
        #: Frames or records from an SRS that did not decode (the slot was reconnected).
        self.malformed = 0
        #: SIR records received from all SRSes (SERs included), for measurements.
        self.sirs_received = 0
        #: Sources not kept: MAX_RESOLVED reached.
        self.refused_sources = 0
        #: Events dropped: nobody drained them.
        self.refused_events = 0
        for slot in self.slots:  # connect to every SRS at once
            slot._transition(SlotInput.RECONNECT_DUE)
            self._connects.append(slot.index)

    # ------------------------------------------------------------------ the context's side

    def send_source(self, record: SourceInfo) -> None:
        """Advertise a source (SIR) to every SRS; replaces an earlier one with the same key."""
        raw = record.encode()
        key = (record.otid, record.topic)
        if self._sources.get(key) == raw:
            return
        self._sources[key] = raw
        self._broadcast(raw)

    def send_source_delete(self, otid: bytes, topic: str) -> None:
        """Delete a source (SDR) at every SRS."""
        if self._sources.pop((otid, topic), None) is not None:
            self._broadcast(SourceDelete(otid, topic).encode())

    def send_receiver(self, topic: str) -> None:
        """Register interest in ``topic`` (one RIR per topic, however many receivers)."""
        count = self._receivers.get(topic, 0)
        self._receivers[topic] = count + 1
        if count == 0:
            raw = self._interest_record(ReceiverInfo, topic)
            self._receiver_raw[topic] = raw
            self._broadcast(raw)

    def send_receiver_delete(self, topic: str) -> None:
        """Drop one receiver's interest in ``topic`` (the RDR goes with the last one)."""
        count = self._receivers.get(topic, 0)
        if count > 1:
            self._receivers[topic] = count - 1
        elif count == 1:
            del self._receivers[topic]
            del self._receiver_raw[topic]
            self._broadcast(self._interest_record(ReceiverDelete, topic))

    def send_dro_records(self, records: list[DomainInfo | RouteInfo]) -> None:
        """A DRO endpoint's DIR (its TRD's domain id) and RTIRs (its routes): the set it holds
        now.  New ones go out at once; all are sent again on every (re)connect.  The protocol
        has no record withdrawing an RTIR: one no longer held is only not sent again (the SRS
        ends it with an RTER when this context's route state expires there)."""
        new = {r.encode(): r for r in records}
        fresh = [raw for raw in new if raw not in self._dro_records]
        self._dro_records = {raw: raw for raw in new}
        if fresh:
            for slot in self.slots:
                if slot.state is SlotState.STREAMING:
                    self._send(slot.index, _frames(fresh))

    def send_remote_interest(self, entries: Iterable[tuple[str, bool, int]]) -> None:
        """A DRO endpoint's remote interest, the set it holds now: (topic or PCRE pattern, is
        pattern, domain id of the receivers behind it) -> RIR / WIR whose ``domain_id`` is that
        remote domain (not this context's), RDR / WDR for entries no longer held; all sent
        again on every (re)connect.  How interest crosses a transit TRD resolved by the SRS,
        where the TNWG interest records have no datagram path [inferred: UM documents the
        records' domain id field, not what a DRO puts there].  The SRS keeps one record per
        topic (pattern) and context: one domain per entry, and the context must not also
        hold a receiver of that topic (a DRO's source context holds none)."""
        new: dict[tuple[str, bool], tuple[int, bytes]] = {}
        for symbol, is_pattern, domain in entries:
            cls = WildcardReceiverInfo if is_pattern else ReceiverInfo
            new[(symbol, is_pattern)] = (domain, self._remote_record(cls, symbol, domain))
        out: list[bytes] = []
        for key, (domain, _raw) in self._remote.items():
            held = new.get(key)
            if held is None or held[0] != domain:  # gone, or now another domain's: end it
                cls_d = WildcardReceiverDelete if key[1] else ReceiverDelete
                out.append(self._remote_record(cls_d, key[0], domain))
        for key, (domain, raw) in new.items():
            old = self._remote.get(key)
            if old is None or old[0] != domain:
                out.append(raw)
        self._remote = new
        if out:
            for slot in self.slots:
                if slot.state is SlotState.STREAMING:
                    self._send(slot.index, _frames(out))

    def _remote_record(
        self,
        cls: type[ReceiverInfo | ReceiverDelete | WildcardReceiverInfo | WildcardReceiverDelete],
        symbol: str,
        domain: int,
    ) -> bytes:
        return cls(
            symbol,
            domain_id=domain,
            context_instance=self.context_instance,
            context_type=self.app_type,
        ).encode()

    def send_wildcard(self, pattern: str) -> None:
        """Register a wildcard receiver's pattern (WIR)."""
        count = self._patterns.get(pattern, 0)
        self._patterns[pattern] = count + 1
        if count == 0:
            raw = self._pattern_record(WildcardReceiverInfo, pattern)
            self._pattern_raw[pattern] = raw
            self._broadcast(raw)

    def send_wildcard_delete(self, pattern: str) -> None:
        """Drop one wildcard receiver's pattern (the WDR goes with the last one)."""
        count = self._patterns.get(pattern, 0)
        if count > 1:
            self._patterns[pattern] = count - 1
        elif count == 1:
            del self._patterns[pattern]
            del self._pattern_raw[pattern]
            self._broadcast(self._pattern_record(WildcardReceiverDelete, pattern))

    def send_context_name_info(
        self, name: str, ip: str, port: int, *, domain_id: int | None = None
    ) -> None:
        """Advertise this context's ``name`` at ``ip:port`` (CNIR) to every SRS; replaces an
        earlier address.  LocalProtocolError beyond MAX_NAMES names."""
        raw = ContextNameInfo(
            name,
            ip,
            port,
            domain_id=self.local_domain_id if domain_id is None else domain_id,
            origin_context_instance=self.context_instance,
            context_instance=self.context_instance,
            context_type=APP_TYPE_STORE,
        ).encode()
        if self._name_infos.get(name) == raw:
            return
        if name not in self._name_infos and len(self._name_infos) >= MAX_NAMES:
            raise LocalProtocolError(f"at most {MAX_NAMES} context names per context")
        self._name_infos[name] = raw
        self._broadcast(raw)

    def withdraw_context_name(self, name: str) -> None:
        """Stop re-sending ``name``'s CNIR (see the module docstring)."""
        self._name_infos.pop(name, None)

    def send_context_name_query(self, name: str) -> None:
        """Look for the context called ``name`` (CNQR, once per name); answers come as
        :class:`ContextNameAnswered`.  LocalProtocolError beyond MAX_NAMES names."""
        if name in self._name_queries:
            return
        if len(self._name_queries) >= MAX_NAMES:
            raise LocalProtocolError(f"at most {MAX_NAMES} context name queries per context")
        raw = ContextNameQuery(
            name, domain_id=self.local_domain_id, context_instance=self.context_instance
        ).encode()
        self._name_queries[name] = raw
        self._broadcast(raw)

    def cancel_context_name_query(self, name: str) -> None:
        """Stop re-sending ``name``'s CNQR (see the module docstring)."""
        self._name_queries.pop(name, None)

    def resolved(self, topic: str | None = None) -> list[SourceInfo]:
        """Sources currently known (for ``topic``, or all)."""
        return [k.record for key, k in self._known.items() if topic is None or key[1] == topic]

    @property
    def resolved_count(self) -> int:
        return len(self._known)

    def registered_slots(self) -> list[int]:
        return [s.index for s in self.slots if s.state is SlotState.STREAMING]

    def _interest_record(self, cls: type[ReceiverInfo | ReceiverDelete], topic: str) -> bytes:
        return cls(
            topic,
            domain_id=self.local_domain_id,
            context_instance=self.context_instance,
            context_type=self.app_type,
        ).encode()

    def _pattern_record(
        self, cls: type[WildcardReceiverInfo | WildcardReceiverDelete], pattern: str
    ) -> bytes:
        return cls(
            pattern,
            domain_id=self.local_domain_id,
            context_instance=self.context_instance,
            context_type=self.app_type,
        ).encode()

    def _broadcast(self, raw: bytes) -> None:
        for slot in self.slots:
            if slot.state is SlotState.STREAMING:
                self._send(slot.index, _frames([raw]))

    # ------------------------------------------------------------------ the adapter's side

    def take_connects(self) -> list[tuple[int, tuple[str, int]]]:
        """Slots to connect now, with their SRS address; each is now CONNECTING."""
        out = [(i, self.slots[i].address) for i in self._connects]
        self._connects = []
        return out

    def take_writes(self) -> list[tuple[int, bytes]]:
        writes = self._writes
        if not writes:
            return []
        self._writes = {}
        return [(i, b"".join(chunks)) for i, chunks in writes.items()]

    def take_closes(self) -> list[int]:
        closes, self._closes = self._closes, []
        return closes

    def take_events(self) -> list[Event]:
        events, self._events = self._events, []
        return events

    def receive_connected(self, index: int, now: float) -> None:
        """The adapter connected slot ``index``: SETUP and the registration request go out."""
        slot = self.slots[index]
        slot._transition(SlotInput.CONNECTED)
        slot.decoder = SRSStreamDecoder()
        slot.last_rx = now
        slot.next_keepalive = now + self.keepalive_interval
        slot.connects += 1
        setup = Setup(int(self.keepalive_interval * 1000), int(self.max_lifetime * 1000))
        request = RegistrationRequest(
            self.client_addr,
            self.client_port,
            self.session_id,
            app_type=self.app_type,
            host_id=self.host_id,
            interest_mode=self.interest_mode,
            local_domain_id=self.local_domain_id,
        )
        self._send(index, encode(setup) + encode(RequestResponse(REGISTRATION_STREAM, request)))

    def receive_connect_failed(
        self, index: int, now: float, reason: str = "connect failed"
    ) -> None:
        """The adapter's connect for slot ``index`` failed: reconnect after the back-off."""
        self._down(self.slots[index], now, reason, close=False, what=SlotInput.CONNECT_FAILED)

    def receive_disconnected(self, index: int, now: float) -> None:
        """Slot ``index``'s connection is gone (ignored when the core already dropped it)."""
        slot = self.slots[index]
        if slot.state is not SlotState.DOWN:
            self._down(slot, now, "connection lost", close=False)

    def receive_data(self, index: int, data: bytes | bytearray | memoryview, now: float) -> None:
        """Bytes from slot ``index``'s SRS."""
        slot = self.slots[index]
        if slot.state not in (SlotState.REGISTERING, SlotState.STREAMING):
            return
        slot.last_rx = now
        try:
            for frame in slot.decoder.feed(data):
                if isinstance(frame, Keepalive):
                    if frame.respond:
                        self._send(index, encode(Keepalive(False, 0)))
                    continue
                if isinstance(frame, Error):
                    raise SRSError(f"SRS sent ERROR 0x{frame.code:x}: {frame.text[:80]}")
                message = getattr(frame, "message", None)
                if isinstance(message, RegistrationResponse):
                    self._registered(slot, message, now)
                elif isinstance(message, Batch):
                    slot._transition(SlotInput.RECORDS)
                    for rec in message.records:
                        self._record(slot, rec)
                elif message is not None:
                    raise SRSError(f"unexpected {type(message).__name__} from the SRS")
        except RemoteProtocolError as exc:  # SRSError included
            self.malformed += 1
            self._down(slot, now, f"bad input from the SRS: {exc}", close=True)

    def handle_timer(self, now: float) -> None:
        for slot in self.slots:
            if slot.state is SlotState.DOWN:
                if now >= slot.reconnect_at:
                    slot._transition(SlotInput.RECONNECT_DUE)
                    self._connects.append(slot.index)
            elif slot.state in (SlotState.REGISTERING, SlotState.STREAMING):
                if slot.resync_at is not None and now >= slot.resync_at:
                    slot.resync_at = None
                    self._drop_unconfirmed()
                if now - slot.last_rx > self.max_lifetime:
                    self._down(slot, now, "SRS silent beyond the max lifetime", close=True)
                elif now >= slot.next_keepalive:
                    slot.next_keepalive = now + self.keepalive_interval
                    self._send(slot.index, encode(Keepalive(True, 0)))

    def next_timer(self) -> float | None:
        deadline: float | None = None
        for slot in self.slots:
            if slot.state is SlotState.DOWN:
                t = slot.reconnect_at
            elif slot.state in (SlotState.REGISTERING, SlotState.STREAMING):
                t = min(slot.next_keepalive, slot.last_rx + self.max_lifetime)
                if slot.resync_at is not None:
                    t = min(t, slot.resync_at)
            else:
                continue
            if deadline is None or t < deadline:
                deadline = t
        return deadline

    # -------------------------------------------------------------------------- internals

    def _registered(self, slot: _Slot, response: RegistrationResponse, now: float) -> None:
        slot._transition(SlotInput.REGISTERED)
        slot.client_id = response.client_id
        slot.backoff = 0.0
        slot.resync_at = now + self.resync_grace
        out = [encode(RequestStream(RECORD_STREAM, StreamRequest()))]
        state = [
            *self._sources.values(),
            *self._receiver_raw.values(),
            *self._pattern_raw.values(),
            *self._name_infos.values(),
            *self._name_queries.values(),
            *self._dro_records.values(),
            *(raw for _d, raw in self._remote.values()),
        ]
        if state:
            out.append(_frames(state))
        self._send(slot.index, b"".join(out))
        self._event(Registered(slot.index, response.client_id))

    def _record(self, slot: _Slot, rec: BatchRecord) -> None:
        if type(rec) is ContextNameInfo:
            assert isinstance(rec, ContextNameInfo)
            self._event(ContextNameAnswered(rec, slot.index))
            return
        if type(rec) is ContextNameEnd:
            assert isinstance(rec, ContextNameEnd)
            self._event(ContextNameEnded(rec, slot.index))
            return
        if type(rec) in (DomainInfo, RouteInfo, RouteEnd):
            assert isinstance(rec, (DomainInfo, RouteInfo, RouteEnd))
            self._event(DroRecord(rec, slot.index))
            return
        if type(rec) in _INTEREST_RECORDS:
            if self.interest_mode & _FORWARD_INTEREST:
                self._event(InterestReported(rec, slot.index))  # type: ignore[arg-type]
            return
        if type(rec) is not SourceInfo:
            return
        assert isinstance(rec, SourceInfo)
        self.sirs_received += 1
        key = (rec.otid, rec.topic)
        known = self._known.get(key)
        if rec.cost == SER_COST:
            if known is None:
                return
            known.slots.discard(slot.index)
            if not known.slots:
                del self._known[key]
                self._event(SourceWithdrawn(known.record, slot.index))
            return
        raw = rec.encode()
        if known is None:
            if len(self._known) >= MAX_RESOLVED:
                self.refused_sources += 1
                return
            known = self._known[key] = _Known(rec, raw)
            known.slots.add(slot.index)
            self._event(SourceResolved(rec, slot.index))
            return
        known.slots.add(slot.index)
        if known.raw != raw:
            known.record, known.raw = rec, raw
            self._event(SourceResolved(rec, slot.index, updated=True))

    def _drop_unconfirmed(self) -> None:
        """After a re-sync: withdraw the sources no connected SRS re-sent (they ended while we
        were disconnected, so no SER will ever come)."""
        for key in [k for k, known in self._known.items() if not known.slots]:
            known = self._known.pop(key)
            self._event(SourceWithdrawn(known.record, -1))

    def _down(
        self,
        slot: _Slot,
        now: float,
        reason: str,
        *,
        close: bool,
        what: SlotInput = SlotInput.LOST,
    ) -> None:
        was = slot.state
        slot._transition(what)
        slot.client_id = None
        slot.resync_at = None
        self._writes.pop(slot.index, None)
        if close and was is not SlotState.DOWN:
            self._closes.append(slot.index)
        if slot.backoff <= 0:
            slot.backoff = self.reconnect_min
        else:
            slot.backoff = min(slot.backoff * 2, self.reconnect_max)
        slot.reconnect_at = now + slot.backoff
        # This SRS no longer vouches for anything until it re-sends; nothing is withdrawn.
        for known in self._known.values():
            known.slots.discard(slot.index)
        self._event(SlotDown(slot.index, reason))

    def _send(self, index: int, data: bytes) -> None:
        chunks = self._writes.get(index)
        if chunks is None:
            self._writes[index] = [data]
        else:
            chunks.append(data)

    def _event(self, event: Event) -> None:
        if len(self._events) >= MAX_EVENTS:
            self.refused_events += 1
            return
        self._events.append(event)
