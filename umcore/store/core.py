"""StoreCore: one Store instance (a ``<store>`` of umestored), sans-IO.

Theory of operation
-------------------
Inputs, each with ``now`` (seconds, any monotonic origin):

* :meth:`StoreCore.receive_control` -- an LBMC message from the Store's request port (the
  adapter decoded it; bytes that do not decode cost the peer its connection there).  It is
  decoded into a composition (:mod:`umcore.store.compose`) and handled: source and receiver
  registrations and deregistrations, consumption ACKs, keepalives, retransmission requests.  A
  message that is not a store message is counted; one that is malformed is counted and reported
  as :class:`~umcore.store.events.ControlRejected` (the daemon drops that peer).  Nothing a
  peer sends raises out of the core.
* :meth:`StoreCore.receive_frame` -- an LBMC frame of a joined transport session
  (:class:`umcore.engine.raw.RawSession` says which).  DATA (0x0) and PRORX (0x2) frames of the
  session's topic index are appended, undecoded, to the repository of the source registration
  the session matches; control frames (TSNI, SRI, ...) are counted and not stored.
* :meth:`StoreCore.receive_loss` -- the session's messages ``first..last`` are unrecoverable
  (for an adapter that learns of transport loss): stability passes the gap and those sqns are
  NAKed, never ACKed.
* :meth:`StoreCore.receive_io_done` -- a completed :class:`~umcore.store.io.IoJob`: state-file
  jobs are the core's own, the rest go to the repository named by ``job.owner``.
* :meth:`StoreCore.handle_timer` -- at or after :meth:`StoreCore.next_timer`.

Outputs: :meth:`take_sends` (``((ip, port), bytes)``: UIMs to a client's request port),
:meth:`take_io`, :meth:`take_joins` (topics to open/close raw receivers for: a topic is joined
when its first source registers and left when its last is deleted), :meth:`take_events`.

**Matching a session to a registration.**  A source's registration names its topic, transport
index, topic index and request port (PREG resp_ip:resp_port).  A session matches when its
topic and topic index are the registration's and -- when the session's TIR carries a UME
(0x01) or late-join (0x04) topic option, which a persistent source sends -- that option's
request address and transport index are the registration's too; without such an option, the
session's source IP must be the registration's request IP.  Exactly one candidate must remain,
else the frames are counted as unmatched.  Matches are cached per session and recomputed when
registrations change.

**Registration** (persistence-store.md 1.3, 1.5, 1.10, 1.12): topic pattern (ENOPATTERN), RPP
negotiation (ECONFIG: RPP not allowed, an override above the topic's maximum, flight size bytes
missing or above ``source-flight-size-bytes-maximum``, ack-on-reception not allowed,
re-registration with other RPP values; receivers: mode 0 on an RPP repository or 1/2 on an SPP
one), RegID resolution (Session ID map, explicit RegID, else assigned), EREGID for a receiver's
RegID asked by a source and the reverse, ETOPICNAME, EACTIVE for a second live registrant of a
strong RegID (the same registrant -- same Session ID, else same context instance, else same
request address -- asking again is no second registrant: its answer may have been lost, or
its process restarted with its Session ID), ESRCREGID for a receiver naming an unknown source.
A registration retried while its answer waits for the state write is not answered twice.
Success answers carry O (the
state existed, restored ones included) and the sequence numbers: a source's trail and lead (a
fresh one's lead 0xFFFFFFFF), a receiver's low sequence number (its last ACK + 1; new ones: the
trail, limited by ``receiver-new-registration-rollback``; a new RPP receiver: lead + 1, since
late RPP receivers recover nothing) and the lead.  An answer that creates a RegID on a
repository kept on disk waits for the state file's STATE_WRITE to complete.

**Late join to the source** (:mod:`umcore.store.catchup`): a source may send before this Store
has joined its transport, so a registration that leaves a repository empty also sends an
LJI_REQ -- for a new source before its answer, so that the LJ_INFO gives the source's next
sequence number from before it knew of this Store, the repository's first.  Until the LJ_INFO
comes, the frames of a session offering late join are held; the gap from the first sequence
number to the first frame is asked of the source at once; after the join (BOS) a second LJ_INFO
says how far the source got (a burst sent wholly before the join) and what it no longer retains
(declared lost at once).

**Stability** (1.6, 1.10): each source's repository reports newly stable ranges in sequence
order; they are ACKed at once (``stability-ack-minimum-number`` 1) or batched until that many
are pending or ``stability-ack-interval`` passed since the first, as ranged ACKs.  Nothing is
ACKed while the repository is ``full`` (a write failed), or, RPP, while a blocking receiver
holds messages and the room left is at most the source's flight size in bytes (the "one flight
size before full" stop point).  A duplicate of a stable message is ACKed again at once; one the
Store cannot hold (declared lost, before the trail, refused by the size limit) gets a stability
NAK -- the Store never claims stable what it does not hold.  RPP: a message every receiver
consumed is stable, written or not (UM's "delete and ACK"); an RPP repository with no receiver
keeps nothing.

**Consumption ACKs** are cumulative: ``high_ack_sqn`` moves forward only; RPP repositories
release what every receiver consumed (past the stop point, what every *blocking* one did:
non-blocking receivers do not hold back deletion beyond capacity).  ACK positions reach the
state file at most every :data:`STATE_FLUSH_S` (a lost position only causes redelivery).

**Timers**: per source every ``source-check-interval``: activity timeouts and state lifetimes
of the source and its receivers, keepalives to idle clients every ``keepalive-interval`` (with
R = response requested when the client has been silent that long), held ACK batches, state
writes.  **Retransmissions** go through :class:`~umcore.store.retx.RetxQueue` (the instance's
``retransmission-request-processing-rate``); a held frame is spliced into a RETRANS with the
source's OTID and topic (the receiver maps it as it maps the source's own late-join
retransmissions); a frame on disk is answered when its READ completes; a frame not held is
forwarded to the source (``retransmission-request-forwarding`` 1; ``id_2`` = topic index, so
the source's late-join service answers the receiver directly) or counted (``rx_not_held``;
requests before the repository's trail also as ``rx_released``).  A returning receiver whose
last ACK + 1 is before the trail -- its retention released them, e.g. a memory repository at
the default 1 KiB ``repository-size-threshold`` -- is answered with that low all the same (UM's
rule; it reports them as unrecoverable loss after its request timeout) and logged as a warning.

**Proxy sources** (1.13): :attr:`StoreCore.proxy` (:class:`~umcore.store.proxy.ProxyElection`)
is told of registrations, activity timeouts and deletions of sources that asked for a proxy,
and of the SRIs seen as control frames on joined sessions (a source's own, kept -- and in
the state file, so that a restarted Store takes part; when a proxied source's session begins
before one was seen, the Store asks the source for one with an SRI_REQ; another Store's
proxy's, with its election token).  Election algorithm 2's PSERs leave with
:meth:`take_sends` and arrive through :meth:`receive_control`.  SRI requests at the request
port for a proxy are answered through :meth:`take_proxy_sris`; elections won and proxies
deleted come out of :meth:`take_events` as ProxySourceCreated/ProxySourceDeleted.
"""

from __future__ import annotations

import heapq
import logging
import math
import struct
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, fields
from typing import Any, Protocol

from umcore.config.store import StoreInstance, StoreTopic
from umcore.errors import ConfigError, RemoteProtocolError
from umcore.features.latejoin import encode_lji_req, make_otid
from umcore.store import compose
from umcore.store.catchup import CatchUp, Phase, Start
from umcore.store.catchup import Input as CatchUpInput
from umcore.store.diskformat import sqn_column
from umcore.store.events import (
    AckDiscarded,
    ControlRejected,
    DeletionReason,
    ProxySourceCreated,
    ProxySourceDeleted,
    ReceiverDeleted,
    ReceiverDeregistered,
    ReceiverRecreated,
    ReceiverRegistered,
    RegistrationRefused,
    RppRepoEmpty,
    RppWriting,
    SourceDeleted,
    SourceDeregistered,
    SourceRecreated,
    SourceRegistered,
    StoreEvent,
    TopicCreated,
    TopicDeleted,
)
from umcore.store.io import IoDone, IoJob, IoKind
from umcore.store.proxy import ProxyElection, ProxyNote, ProxyStart, SourceIdent, token_of
from umcore.store.registry import (
    NO_SQN,
    ClientEvent,
    Clock,
    Liveness,
    ReceiverEntry,
    Registry,
    SourceEntry,
    Verdict,
    considered_activity,
    considered_lifetime,
    serial_gt,
)
from umcore.store.repair import GapRepair
from umcore.store.repository import (
    PENDING,
    Append,
    Repository,
    RepositoryConfig,
    make_repository,
)
from umcore.store.retx import RetxQueue
from umcore.store.state import ReceiverState, SourceState, encode_state, state_name
from umcore.wire import lbmc
from umcore.wire.lbmr_options import UME_FLAG_LATEJOIN, LateJoinOption, UMEOption

__all__ = [
    "STATE_FLUSH_S",
    "FrameSession",
    "ReceiverStats",
    "RepositoryStats",
    "StoreCore",
    "StoreStats",
]

Address = tuple[str, int]
_M = 0xFFFFFFFF
_HALF = 0x80000000
_TIDX_SQN = struct.Struct("!II")
_U32BE = struct.Struct("!I")
_DATA_HEADER = 12  # an LBMC data frame's fixed header: ver/type, next header, msglen, tidx, sqn
# Fewest frames of a read checked and appended as one block (_receive_block): below it the
# column checks cost about what the per-frame loop does.
BLOCK_MIN = 8
_STORED_TYPES = frozenset((lbmc.MSG_DATA, lbmc.MSG_PRORX))
_CONTROL = lbmc.MSG_CONTROL
# Enum members compared once per stored message: read through their class they cost ~130 ns
# each in CPython 3.11, as module globals ~20.
_ACTIVE = Liveness.ACTIVE
_STORED = Append.STORED
_DUPLICATE = Append.DUPLICATE
# ACK positions (consumption ACKs) reach a source's state file at most this often: a lost
# position only makes the receiver get messages again, which UM allows after a Store restart.
STATE_FLUSH_S = 1.0
# Retransmission requests waiting for a disk READ, across the instance; beyond it they are
# dropped and counted (the receiver asks again): bounds memory when a disk is slow.
MAX_WAITING_READS = 65536
# Lost ranges a source may have declared and not yet passed by stability (each a NAK to send);
# a transport that loses more than this many separate ranges at once is counted, not tracked.
MAX_LOST_RANGES = 1024
# Sequence numbers one source may have marked invalid by daemon control (``mark``, one request
# per sqn): a range an operator marks by hand is small; the bound keeps a scripted flood of
# requests from growing the set without end (refused beyond it).
MAX_MARKS_PER_SOURCE = 65536
_ERR = logging.ERROR
_INFO = logging.INFO
_WARN = logging.WARNING


class FrameSession(Protocol):
    """What :meth:`StoreCore.receive_frame` needs to know of a transport session
    (:class:`umcore.engine.raw.RawSession` has it)."""

    @property
    def topic(self) -> str: ...
    @property
    def topic_index(self) -> int: ...
    @property
    def source_ip(self) -> str: ...
    @property
    def options(self) -> tuple[Any, ...]: ...
    @property
    def source_string(self) -> str: ...


@dataclass(frozen=True, slots=True)
class ReceiverStats:
    """One receiver's state under a source (UM's RcvStat: high_ack_sqn is "ACK")."""

    reg_id: int
    session_id: int
    high_ack_sqn: int
    rpp_mode: int
    state: str
    address: Address


@dataclass(frozen=True, slots=True)
class RepositoryStats:
    reg_id: int
    topic: str
    session_id: int
    transport_idx: int
    topic_idx: int
    rpp: bool
    kind: str
    state: str
    receivers: int
    counters: dict[str, int]
    receiver_stats: tuple[ReceiverStats, ...] = ()
    address: Address = ("0.0.0.0", 0)  # the source's request address


@dataclass(frozen=True, slots=True)
class StoreStats:
    """A snapshot: the instance's counters and one entry per source repository."""

    counters: dict[str, int]
    sources: int
    receivers: int
    topics: int
    retx_queue: int
    repositories: tuple[RepositoryStats, ...] = field(default=())


@dataclass(slots=True)
class _Counters:
    """The instance's counters (:meth:`StoreCore.stats` copies them)."""

    acks_sent: int = 0
    bad_control: int = 0
    bad_frames: int = 0
    consumption_acks: int = 0
    unstored_frames: int = 0
    control_messages: int = 0
    frames: int = 0
    frames_stored: int = 0
    internal_errors: int = 0
    io_orphans: int = 0
    lost_ranges_dropped: int = 0
    lj_info_late: int = 0  # a source's late-join information came after its first message
    # late join to a source whose repository starts (umcore.store.catchup)
    lj_requests: int = 0  # LJI_REQs sent
    lj_held: int = 0  # frames held until the source's start was known
    lj_held_dropped: int = 0  # frames beyond the hold's bounds (the repair asks again)
    lj_gave_up: int = 0  # sources that never answered: stored from where the Store joined
    lj_lost_at_start: int = 0  # initial-gap messages the source no longer retained
    keepalives_received: int = 0
    keepalives_sent: int = 0
    naks_sent: int = 0
    other_topic_frames: int = 0
    refused_after_shutdown: int = 0
    registration_errors: int = 0
    registrations_waiting: int = 0
    registrations: int = 0
    retransmissions: int = 0
    rx_forwarded: int = 0
    rx_not_held: int = 0
    # requests (forwarded or not) for sqns before the repository's trail, mostly released by
    # its retention (memory: repository-size-threshold/-age-threshold; disk: the file wrap;
    # RPP: consumed); the rest of rx_not_held asked for sqns it never stored
    rx_released: int = 0
    rx_marked: int = 0
    rx_read_dropped: int = 0
    rx_unknown: int = 0
    state_write_errors: int = 0
    unexpected_control: int = 0
    unknown_regid: int = 0
    unmatched_frames: int = 0

    def snapshot(self) -> dict[str, int]:
        return {f.name: getattr(self, f.name) for f in fields(self)}


@dataclass(slots=True)
class _Held:
    """Answers waiting for a state write (a registration that created a RegID)."""

    sends: list[tuple[Address, bytes]]
    events: list[StoreEvent]
    undo: Callable[[float], None]
    done: Callable[[], bool]  # clears the entry's ``creating``; False: it is gone meanwhile


class StoreCore:
    """One Store instance; see the module docstring."""

    def __init__(
        self,
        instance: StoreInstance,
        *,
        store_index: int,
        address: Address,
        now: float,
        restored: Sequence[tuple[SourceState, Repository]] = (),
        seed: int | None = None,
        wall_offset: float = 0.0,
    ) -> None:
        """``now + wall_offset`` is wall-clock time (repositories persist arrival times)."""
        self.instance = instance
        self.wall_offset = wall_offset
        self.store_index = store_index
        self.address = address
        opts = instance.options
        self.cache_dir = str(opts["disk-cache-directory"])
        self.state_dir = str(opts["disk-state-directory"])
        #: ``context-name`` ("" = none): the name the daemon advertises for ``ume_store_name``.
        self.context_name = str(opts["context-name"])
        self.registry = Registry(seed)
        self.ctxinst = self.registry.rng.getrandbits(64).to_bytes(8, "big")
        self.retx: RetxQueue[compose.RxReq] = RetxQueue(
            int(opts["retransmission-request-processing-rate"]), now, _rx_key
        )
        self.counters = _Counters()
        self.closing = False
        self._sends: list[tuple[Address, bytes]] = []
        self._io: list[IoJob] = []
        self._joins: list[str] = []
        self._leaves: list[str] = []
        self._events: list[StoreEvent] = []
        self._held: dict[int, _Held] = {}
        self._tag = 0
        self._sessions: dict[FrameSession, SourceEntry | None] = {}
        self._reads: dict[tuple[int, int], list[compose.RxReq]] = {}
        self._waiting_reads = 0
        # source RegID -> sqns marked invalid (daemon control ``mark``; not persisted)
        self._marks: dict[int, set[int]] = {}
        # (due, sequence, source RegID): a source's entry is current while its due_seq matches
        self._timers: list[tuple[float, int, int]] = []
        self._seq = 0
        self._handlers: dict[type, Callable[[Any, str, float], None]] = {
            compose.SourceRegistration: self._source_registration,
            compose.ReceiverRegistration: self._receiver_registration,
            compose.Deregistration: self._deregistration,
            compose.ConsumptionAck: self._consumption_ack,
            compose.Keepalive: self._keepalive,
            compose.ReceiverKeepalive: self._receiver_keepalive,
            compose.RetransmissionRequest: self._retransmission_request,
            compose.Retransmission: self._retransmission,
        }
        #: What this Store missed of its sources' streams, asked for again (umcore.store.repair).
        self.repair = GapRepair()
        #: Proxy sources (umcore.store.proxy): the daemon reads :meth:`ProxyElection.sri` and
        #: tells :meth:`ProxyElection.started`; SRI requests reach it through receive_control.
        self.proxy = ProxyElection(
            enabled=bool(opts["allow-proxy-source"]),
            store_index=store_index,
            address=address,
            rng=self.registry.rng,
            quorum_required=bool(opts["proxy-source-repo-quorum-required"]),
            ctxinst=self.ctxinst,
        )
        self._proxy_sris: list[tuple[int, bytes]] = []
        self._handlers[compose.SriRequest] = self._sri_request
        for state, repo in restored:
            self._restore(state, repo, now)

    # ==========================================================================================
    # Outputs
    # ==========================================================================================

    def take_sends(self) -> list[tuple[Address, bytes]]:
        out, self._sends = self._sends, []
        psers = self.proxy.take_sends()  # election algorithm 2: to the other Stores
        return out + psers if psers else out

    def take_io(self) -> list[IoJob]:
        out, self._io = self._io, []
        return out

    def take_joins(self) -> tuple[list[str], list[str]]:
        joins, leaves = self._joins, self._leaves
        self._joins, self._leaves = [], []
        return joins, leaves

    def take_events(self) -> list[StoreEvent]:
        for act in self.proxy.take_actions():
            if isinstance(act, ProxyNote):
                self._note(_INFO, act.text)
            elif isinstance(act, ProxyStart):
                self._event(
                    ProxySourceCreated(
                        _INFO,
                        f"proxy source for topic {act.topic!r} (source RegID {act.reg_id}) "
                        f"created, election token {act.token}",
                        act.reg_id,
                        act.topic,
                        act.token,
                    )
                )
            else:
                self._event(
                    ProxySourceDeleted(
                        _INFO,
                        f"proxy source for topic {act.topic!r} (source RegID {act.reg_id}) "
                        f"deleted: {act.reason.name}",
                        act.reg_id,
                        act.topic,
                        act.reason,
                    )
                )
        out, self._events = self._events, []
        return out

    def take_proxy_sris(self) -> list[tuple[int, bytes]]:
        """``(source RegID, SRI bytes)`` to send on that source's proxy transport (answers to
        SRI requests that reached the request port, and the proxies' announcements)."""
        out, self._proxy_sris = self._proxy_sris, []
        announced = self.proxy.take_sris()
        return out + announced if announced else out

    def _sri_request(self, req: compose.SriRequest, peer: str, now: float) -> None:
        answers = self.proxy.sri_request(req)
        if not answers:  # no proxy of ours at those indices: not a Store message for us
            self.counters.unexpected_control += 1
        self._proxy_sris.extend(answers)

    def _send(self, dest: Address, data: bytes) -> None:
        self._sends.append((dest, data))

    def _event(self, event: StoreEvent) -> None:
        self._events.append(event)

    def _note(self, level: int, text: str) -> None:
        self._events.append(StoreEvent(level, text))

    # ==========================================================================================
    # Control messages
    # ==========================================================================================

    def receive_control(self, msg: lbmc.LBMCMessage, peer_ip: str, now: float) -> bool:
        """One LBMC message from the request port, sent by ``peer_ip``.  False when it was a
        malformed store message (also reported as :class:`ControlRejected`): the adapter drops
        the connection it came on."""
        c = self.counters
        c.control_messages += 1
        try:
            comp = compose.decode(msg)
        except RemoteProtocolError as exc:
            c.bad_control += 1
            self._event(ControlRejected(_WARN, f"bad store message from {peer_ip}: {exc}", peer_ip))
            return False
        try:
            if comp is None:
                if msg.msg_type in _STORED_TYPES:
                    self._uim_data(msg, peer_ip, now)
                elif msg.find(lbmc.UmeLjInfo) is not None:
                    self._lj_info(msg, now)
                elif self.proxy.receive_pser(msg, now):  # another Store's election record
                    pass
                else:
                    c.unexpected_control += 1
                return True
            handler = self._handlers.get(type(comp))
            if handler is None:
                c.unexpected_control += 1
                return True
            handler(comp, peer_ip, now)
            self._service_retx(now)
        except Exception as exc:  # a bug of ours must not cost the other clients the Store
            c.internal_errors += 1
            self._note(_ERR, f"internal error handling {type(comp).__name__}: {exc!r}")
        return True

    # --- registration ------------------------------------------------------------------------

    def _refuse(
        self,
        source: bool,
        topic: str,
        req_reg_id: int,
        transport_idx: int,
        topic_idx: int,
        reply_to: Address,
        marker: int,
        store_index: int,
        code: int,
        why: str,
    ) -> None:
        self.counters.registration_errors += 1
        resp = compose.RegistrationResponse(
            source, req_reg_id, transport_idx, topic_idx, 0, NO_SQN, marker,
            store_index=store_index, error=code, ctxinst=self.ctxinst,
        )  # fmt: skip
        self._send(reply_to, resp.encode())
        kind = "source" if source else "receiver"
        text = compose.ERROR_TEXTS[code]
        self._event(
            RegistrationRefused(
                _WARN,
                f"{kind} registration for topic {topic!r} RegID {req_reg_id} from "
                f"{reply_to[0]}:{reply_to[1]} refused: {text} ({why})",
                source,
                topic,
                req_reg_id,
                code,
                reply_to,
            )
        )

    def _check_rpp(self, req: compose.SourceRegistration, cfg: StoreTopic) -> str | None:
        """Why the RPP part of ``req`` is refused (ECONFIG), or None."""
        if not req.rpp:
            return None
        opts = cfg.options
        if not opts["repository-allow-receiver-paced-persistence"]:
            return "RPP requested; repository-allow-receiver-paced-persistence is 0"
        values = dict(req.rpp_options)
        for name, value in values.items():
            bound = compose.RPP_OPTIONS[name]
            limit = int(opts[bound])
            if name == "ume_repository_ack_on_reception":
                if value not in (0, 1):
                    return f"{name}={value} is not 0 or 1"
                if value and not limit:
                    return f"{name}=1 requested; {bound} is 0"
            elif value > limit:
                return f"{name}={value} above {bound}={limit}"
        flight = values.get("ume_flight_size_bytes", 0)
        if not flight:
            return "RPP requires ume_flight_size_bytes"
        return None

    def _source_registration(self, req: compose.SourceRegistration, peer: str, now: float) -> None:
        c = self.counters
        if self.closing:
            c.refused_after_shutdown += 1
            return
        c.registrations += 1
        reg = self.registry

        def refuse(code: int, why: str, reg_id: int = req.reg_id) -> None:
            self._refuse(
                True, req.topic, reg_id, req.transport_idx, req.topic_idx, req.reply_to,
                req.marker, req.store_index, code, why,
            )  # fmt: skip

        cfg = self.instance.match(req.topic)
        if cfg is None:
            refuse(lbmc.PREG_RESP_ENOPATTERN, "no <topic> pattern matches")
            return
        why = self._check_rpp(req, cfg)
        if why is not None:
            refuse(lbmc.PREG_RESP_ECONFIG, why)
            return
        reg_id = req.reg_id
        if req.session_id:
            reg_id = reg.source_sessions.get((req.topic, req.session_id), reg_id)
        if reg_id and reg_id in reg.receivers:
            refuse(lbmc.PREG_RESP_EREGID, "the RegID is a receiver's", reg_id)
            return
        src = reg.sources.get(reg_id) if reg_id else None
        if src is None and not reg_id:
            src = next(
                (
                    s
                    for r in reg.topics.get(req.topic, ())
                    if (s := reg.sources[r]).creating
                    and (s.reply_to, s.transport_idx, s.topic_idx)
                    == (req.reply_to, req.transport_idx, req.topic_idx)
                ),
                None,
            )
        if src is not None and src.creating:
            c.registrations_waiting += 1  # a retry: its answer waits for the state write
            return
        if src is None:
            self._new_source(req, cfg, reg_id or reg.assign(), now)
            return
        if src.topic != req.topic:
            refuse(lbmc.PREG_RESP_ETOPICNAME, f"RegID {reg_id} is topic {src.topic!r}", reg_id)
            return
        if src.clock.strong and not src.same_registrant(req.reply_to, req.ctxinst, req.session_id):
            refuse(lbmc.PREG_RESP_EACTIVE, "the RegID's source is still active", reg_id)
            return
        if (src.rpp or req.rpp) and (src.rpp, src.rpp_options) != (
            req.rpp,
            dict(req.rpp_options),
        ):
            refuse(lbmc.PREG_RESP_ECONFIG, "RPP options differ from the first registration")
            return
        self._reregister_source(src, req, now)

    def _repository_config(
        self, src_rpp: bool, requested: dict[str, int], cfg: StoreTopic
    ) -> RepositoryConfig:
        # ``requested``: the RPP values the source's registration carried (absent = not asked).
        overrides = {
            k: v
            for k, v in requested.items()
            if k not in ("ume_flight_size_bytes", "ume_repository_ack_on_reception")
        }
        return RepositoryConfig.from_topic(
            cfg,
            rpp=src_rpp,
            overrides=overrides,
            ack_on_reception=bool(requested.get("ume_repository_ack_on_reception", 0)),
            restore_last_hours=self.instance.restore_last.value,
        )

    def _new_source(
        self, req: compose.SourceRegistration, cfg: StoreTopic, reg_id: int, now: float
    ) -> None:
        requested = dict(req.rpp_options) if req.rpp else {}
        try:
            rcfg = self._repository_config(req.rpp, requested, cfg)
            repo = make_repository(reg_id, rcfg, self.cache_dir, now, wall_offset=self.wall_offset)
        except ConfigError as exc:
            self._refuse(
                True, req.topic, req.reg_id, req.transport_idx, req.topic_idx, req.reply_to,
                req.marker, req.store_index, lbmc.PREG_RESP_ECONFIG, exc.message,
            )  # fmt: skip
            return
        topts = cfg.options
        clock = Clock(
            considered_activity(req.activity_timeout_ms, int(topts["source-activity-timeout"])),
            considered_lifetime(req.state_lifetime_ms, int(topts["source-state-lifetime"])),
            now,
        )
        src = SourceEntry(
            reg_id=reg_id, topic=req.topic, topic_cfg=cfg, session_id=req.session_id,
            transport_idx=req.transport_idx, topic_idx=req.topic_idx, reply_to=req.reply_to,
            clock=clock, repository=repo, ctxinst=req.ctxinst, store_index=req.store_index,
            rpp=req.rpp, rpp_options=requested,
            ack_on_reception=bool(requested.get("ume_repository_ack_on_reception", 0)),
            flight_size_bytes=requested.get("ume_flight_size_bytes", 0), created=now,
        )  # fmt: skip
        self._set_identity(src)
        src.next_check = now + self._check_s(src)
        self._add_source(src, now)
        self.proxy.registered(reg_id, src.topic, _proxy_wanted(req), now, _ident(src))
        resp, event = self._source_answer(src, req.marker, old=False)
        # Late join to the source (umcore.store.catchup): asked before the answer, on the same
        # connection, so that its LJ_INFO tells the source's next sequence number from before
        # it knew of this registration -- the first message this Store must hold.
        sends = [(src.reply_to, resp)]
        if repo.empty:
            src.catchup = CatchUp(Start.NEXT, now)
            self.counters.lj_requests += 1
            sends.insert(0, (src.reply_to, self._lji_req(src)))
            self._schedule(src)
        self._note(
            _INFO,
            f'new source for topic "{src.topic}" created. Session ID {src.session_id} RegID '
            f"{reg_id} Indices {src.transport_idx}.{src.topic_idx} [{src.reply_to[0]}:"
            f"{src.reply_to[1]}]",
        )
        reg = self.registry

        def undo(now: float) -> None:
            if reg.sources.get(src.reg_id) is src:
                self._delete_source(src, now, DeletionReason.DELETED, quiet=True)

        def done() -> bool:
            src.creating = False
            return reg.sources.get(src.reg_id) is src

        src.creating = self._answer(src, sends, [event], now, undo=undo, done=done)

    def _lji_req(self, src: SourceEntry) -> bytes:
        """Late join's information request to a source whose repository is empty here (new to
        this Store, or re-registering before the Store saw a message): the answer (LJ_INFO,
        :meth:`_lj_info`) says where the repository starts, and the Store repairs from there
        instead of starting at the first message it sees (umcore.store.catchup)."""
        return encode_lji_req(src.reg_id, src.transport_idx, src.topic_idx, self.address)

    def _lj_info(self, msg: lbmc.LBMCMessage, now: float) -> None:
        c = self.counters
        for h in msg.find_all(lbmc.UmeLjInfo):
            src = self.registry.sources.get(h.qidx)
            if src is None:
                c.unexpected_control += 1
                continue
            cu = src.catchup
            if cu is not None and cu.phase is Phase.PROBING:
                if cu.stale_answer():
                    c.lj_info_late += 1  # a repeated first request's answer, not the probe's
                else:
                    self._probed(src, cu, h.low_seqnum, h.high_seqnum, now)
                continue
            if cu is None or not cu.asking:
                if cu is not None:
                    cu.answers += 1  # a repeated first request's answer (start already set)
                c.lj_info_late += 1  # an answer to a request already settled
                continue
            cu.answers += 1
            first = cu.first_of(h.low_seqnum, h.high_seqnum)
            cu.step(CatchUpInput.INFO, now)
            if src.repository.expect_first(first):
                cu.base = first
                self.repair.expect(src.reg_id, first)
                self._store_held(src, cu, now)
                if cu.joined:
                    self._probe(src, cu, now)
            else:
                c.lj_info_late += 1  # data came first: the repository started there
                src.catchup = None
                self._store_held(src, cu, now)
            self._schedule(src)

    def _store_held(self, src: SourceEntry, cu: CatchUp, now: float) -> None:
        """The frames held while asking, stored now that the repository's start is settled."""
        held = cu.take_held()
        if not held:
            return
        for sqn, frame in held:
            self._store(src, sqn, frame, now)
            if src.rpp:
                self._after(src, now)
        self._after(src, now)

    def _hold(
        self, src: SourceEntry, cu: CatchUp, session: FrameSession, frames: Sequence[bytes]
    ) -> bool:
        """While ``src``'s start is asked for: hold the read's data frames of ``session`` when
        it offers late join (True); False: store them as they come (a source without late join
        cannot answer)."""
        if not _offers_late_join(session.options) or not src.repository.empty:
            return False
        c = self.counters
        tindex = session.topic_index
        unpack = _TIDX_SQN.unpack_from
        for frame in frames:
            n = len(frame)
            if n < 12 or frame[0] not in _STORED_TYPES or (frame[2] << 8 | frame[3]) != n:
                continue  # counted (bad, control, unstored) by the caller's walk
            tidx, sqn = unpack(frame, 4)
            if tidx != tindex:
                continue
            if cu.hold(sqn, bytes(frame)):
                c.lj_held += 1
            else:
                c.lj_held_dropped += 1
        return True

    def _probe(self, src: SourceEntry, cu: CatchUp, now: float) -> None:
        """The second question, once this Store joined: what the source sent and retains."""
        cu.step(CatchUpInput.PROBE, now)
        self.counters.lj_requests += 1
        self._send(src.reply_to, self._lji_req(src))

    def _catchup_timer(self, src: SourceEntry, cu: CatchUp, now: float) -> None:
        """No LJ_INFO yet: ask again, or give up and store from where this Store joined.  The
        start set and no BOS seen (a session that began before): probe now."""
        if cu.phase is Phase.BASE_SET:
            self._probe(src, cu, now)
            return
        if not cu.asking:
            return
        if cu.asked_again(now):
            self.counters.lj_requests += 1
            self._send(src.reply_to, self._lji_req(src))
            return
        cu.step(CatchUpInput.GIVE_UP, now)
        src.catchup = None
        self.counters.lj_gave_up += 1
        self._note(
            _WARN,
            f"source RegID {src.reg_id} topic {src.topic!r} did not answer {cu.requests} "
            "late-join information requests: its messages are stored from where this Store "
            "joined its transport",
        )
        self._store_held(src, cu, now)

    def _probed(self, src: SourceEntry, cu: CatchUp, low: int, high: int, now: float) -> None:
        """The source's answer after the join: below ``low`` it retains nothing, so what this
        Store lacks there is declared lost now (stability NAKs), not after the repair's message
        timeout; up to ``high`` it has sent, so what this Store lacks there is asked for."""
        cu.step(CatchUpInput.INFO, now)
        src.catchup = None
        repair = self.repair
        reg_id = src.reg_id
        runs: list[tuple[int, int]] = []
        if serial_gt(low, cu.base):
            for sqn in repair.give_up(reg_id, cu.base, (low - 1) & _M):
                if runs and sqn == (runs[-1][1] + 1) & _M:
                    runs[-1] = (runs[-1][0], sqn)
                else:
                    runs.append((sqn, sqn))
            skipped = repair.skip_to(reg_id, low)  # not seen at all: will never come
            if skipped is not None:
                runs.append(skipped)
        lost = 0
        for first, last in runs:
            if len(src.lost_ranges) >= MAX_LOST_RANGES:
                self.counters.lost_ranges_dropped += 1
                continue
            lost += ((last - first) & _M) + 1
            src.lost_ranges.append((first, last))
            src.repository.declare_lost(first, last, now)
        repair.expect_through(reg_id, high, now)
        missing = repair.holes(reg_id)
        self.counters.lj_lost_at_start += lost
        if lost:
            self._note(
                _WARN,
                f"source RegID {src.reg_id} topic {src.topic!r}: {lost} message(s) from sqn "
                f"{cu.base} sent before this Store joined are no longer retained by the source "
                f"(it retains from sqn {low}): declared lost",
            )
        if missing:
            self._note(
                _INFO,
                f"source RegID {src.reg_id} topic {src.topic!r}: {missing} message(s) from sqn "
                f"{cu.base} to {high} sent before this Store joined its transport are asked of "
                "the source",
            )
        self._after(src, now)

    def _add_source(self, src: SourceEntry, now: float) -> None:
        if self.registry.add_source(src):
            self._joins.append(src.topic)
            self._event(TopicCreated(_INFO, f'new topic "{src.topic}" created', src.topic))
        self._sessions.clear()
        self._schedule(src)

    def _set_identity(self, src: SourceEntry) -> None:
        opts = src.topic_cfg.options
        src.ack_minimum = max(1, int(opts["stability-ack-minimum-number"]))
        src.ack_interval = int(opts["stability-ack-interval"]) / 1000.0
        otid = make_otid(src.reply_to[0], src.reply_to[1], src.transport_idx)
        src.retx_prefix = compose.retransmission_prefix(otid, src.topic)

    def _check_s(self, src: SourceEntry) -> float:
        return max(int(src.topic_cfg.options["source-check-interval"]), 1) / 1000.0

    def _source_answer(
        self, src: SourceEntry, marker: int, *, old: bool
    ) -> tuple[bytes, SourceRegistered]:
        repo = src.repository
        resp = compose.RegistrationResponse(
            True, src.reg_id, src.transport_idx, src.topic_idx, repo.trail_sqn, repo.lead_sqn,
            marker, store_index=src.store_index, old=old, rpp=src.rpp, ctxinst=self.ctxinst,
        )  # fmt: skip
        event = SourceRegistered(
            _INFO,
            f"PREG RESP SRC Session ID {src.session_id} RegID {src.reg_id} "
            f"SQN[{repo.trail_sqn}:{repo.lead_sqn}]{' OLD' if old else ''}"
            f"{' RPP' if src.rpp else ''} topic {src.topic!r}",
            src.reg_id, src.topic, src.session_id, repo.lead_sqn, old, src.rpp,
        )  # fmt: skip
        return resp.encode(), event

    def _answer(
        self,
        src: SourceEntry,
        sends: list[tuple[Address, bytes]],
        events: list[StoreEvent],
        now: float,
        *,
        undo: Callable[[float], None] | None = None,
        done: Callable[[], bool] | None = None,
    ) -> bool:
        """Send ``sends`` and report ``events`` once ``src``'s state is on disk (at once for a
        memory repository, whose state is not kept); True when they wait."""
        job = self._write_state(src, now)
        if job is None or undo is None or done is None:
            for dest, data in sends:
                self._send(dest, data)
            self._events.extend(events)
            return False
        self._held[job.tag] = _Held(sends, events, undo, done)
        return True

    def _reregister_source(
        self, src: SourceEntry, req: compose.SourceRegistration, now: float
    ) -> None:
        old = True
        changed = (src.reply_to, src.transport_idx, src.topic_idx, src.ctxinst) != (
            req.reply_to, req.transport_idx, req.topic_idx, req.ctxinst,
        )  # fmt: skip
        src.reply_to = req.reply_to
        src.transport_idx = req.transport_idx
        src.topic_idx = req.topic_idx
        src.ctxinst = req.ctxinst
        src.store_index = req.store_index
        if req.session_id and not src.session_id:
            src.session_id = req.session_id
            self.registry.source_sessions[(src.topic, req.session_id)] = src.reg_id
            changed = True
        was = src.clock.state
        src.clock.last_heard = src.clock.last_sent = now
        src.clock.step(ClientEvent.REGISTER)
        if changed:
            self._set_identity(src)
            self._sessions.clear()
            src.matched = False
        self.proxy.registered(src.reg_id, src.topic, _proxy_wanted(req), now, _ident(src))
        resp, event = self._source_answer(src, req.marker, old=old)
        if was is Liveness.RESTORED:
            self._note(_INFO, f"source RegID {src.reg_id} re-registered after restart")
        if changed:
            self._write_state(src, now)
        self._send(src.reply_to, resp)
        if src.repository.empty:
            # asked after the answer: start at the oldest message the source retains
            cu = src.catchup
            if cu is None or not cu.asking:
                src.catchup = CatchUp(Start.RETAINED, now)
            else:
                cu.start = Start.RETAINED  # this answer may come after the source sent on
            self.counters.lj_requests += 1
            self._send(src.reply_to, self._lji_req(src))
            self._schedule(src)
        self._event(event)

    def _receiver_registration(
        self, req: compose.ReceiverRegistration, peer: str, now: float
    ) -> None:
        c = self.counters
        if self.closing:
            c.refused_after_shutdown += 1
            return
        c.registrations += 1
        reg = self.registry

        def refuse(code: int, why: str, reg_id: int = req.reg_id) -> None:
            self._refuse(
                False, req.topic, reg_id, req.transport_idx, req.topic_idx, req.reply_to,
                req.marker, req.store_index, code, why,
            )  # fmt: skip

        src = reg.sources.get(req.src_reg_id)
        if src is None:
            refuse(lbmc.PREG_RESP_ESRCREGID, f"no source RegID {req.src_reg_id}")
            return
        if req.topic and req.topic != src.topic:
            refuse(lbmc.PREG_RESP_ETOPICNAME, f"source RegID is topic {src.topic!r}")
            return
        if src.rpp and req.rpp_mode == 0:
            refuse(lbmc.PREG_RESP_ECONFIG, "SPP receiver on an RPP repository")
            return
        if not src.rpp and req.rpp_mode:
            refuse(lbmc.PREG_RESP_ECONFIG, "RPP receiver on an SPP repository")
            return
        reg_id = req.reg_id
        if req.session_id:
            reg_id = reg.receiver_sessions.get((src.topic, req.session_id), reg_id)
        if reg_id and reg_id in reg.sources:
            refuse(lbmc.PREG_RESP_EREGID, "the RegID is a source's", reg_id)
            return
        rcv = src.receivers.get(reg_id) if reg_id else None
        if rcv is None and not reg_id:
            rcv = next(
                (r for r in src.receivers.values() if r.creating and r.reply_to == req.reply_to),
                None,
            )
        if rcv is not None and rcv.creating:
            c.registrations_waiting += 1
            return
        repo = src.repository
        lead = repo.lead_sqn
        if rcv is not None:
            same = (req.session_id and req.session_id == rcv.session_id) or (
                rcv.reply_to == req.reply_to
            )
            if rcv.clock.strong and not same:
                refuse(lbmc.PREG_RESP_EACTIVE, "the RegID's receiver is still active", reg_id)
                return
            if rcv.rpp_mode != req.rpp_mode:
                rcv.rpp_mode = req.rpp_mode
            changed = rcv.reply_to != req.reply_to
            rcv.reply_to = req.reply_to
            rcv.transport_idx, rcv.topic_idx = req.transport_idx, req.topic_idx
            rcv.store_index = req.store_index
            rcv.ctxinst = req.ctxinst
            rcv.clock.last_heard = rcv.clock.last_sent = now
            rcv.clock.step(ClientEvent.REGISTER)
            if rcv.high_ack_sqn != NO_SQN:
                low = (rcv.high_ack_sqn + 1) & _M
                self._note_released(src, rcv, low)
            else:
                low = self._first_for_new(src, rpp=False)
            sends, events = self._receiver_answer(src, rcv, req.marker, low, old=True)
            if changed:
                self._write_state(src, now)
            for dest, data in sends:
                self._send(dest, data)
            self._events.extend(events)
            return
        if not reg_id:
            reg_id = reg.assign()
        topts = src.topic_cfg.options
        clock = Clock(
            considered_activity(req.activity_timeout_ms, int(topts["receiver-activity-timeout"])),
            considered_lifetime(req.state_lifetime_ms, int(topts["receiver-state-lifetime"])),
            now,
        )
        rcv = ReceiverEntry(
            reg_id=reg_id, src_reg_id=src.reg_id, session_id=req.session_id,
            reply_to=req.reply_to, clock=clock, rpp_mode=req.rpp_mode, ctxinst=req.ctxinst,
            transport_idx=req.transport_idx, topic_idx=req.topic_idx,
            store_index=req.store_index, created=now,
        )  # fmt: skip
        low = self._first_for_new(src, rpp=src.rpp)
        if src.rpp:
            rcv.high_ack_sqn = lead  # nothing before its first registration is held for it
        reg.add_receiver(src, rcv)
        sends, events = self._receiver_answer(src, rcv, req.marker, low, old=False)

        def undo(now: float) -> None:
            if src.receivers.get(rcv.reg_id) is rcv:
                self.registry.remove_receiver(src, rcv)
                rcv.clock.step(ClientEvent.EXPIRE)

        def done() -> bool:
            rcv.creating = False
            return src.receivers.get(rcv.reg_id) is rcv

        rcv.creating = self._answer(src, sends, events, now, undo=undo, done=done)

    def _note_released(self, src: SourceEntry, rcv: ReceiverEntry, low: int) -> None:
        """A returning receiver resumes at ``low``, before the repository's trail (its
        retention released them; the answer's low stays its last ACK + 1, as UM's): say so once
        per registration -- the receiver asks for them in vain and reports them as
        unrecoverable loss only after its ``retransmit_request_message_timeout``, which looks
        like a Store that answers nothing (issue 16: a memory repository at the default
        ``repository-size-threshold`` of 1024 bytes keeps only the newest kilobyte)."""
        repo = src.repository
        if not _released(repo, low):
            return
        first_held = repo.trail_sqn
        if first_held == NO_SQN:
            first_held = (repo.lead_sqn + 1) & _M
        cfg = repo.config
        if src.rpp:
            why = "consumed by every receiver, or released at the RPP stop point"
        elif repo.kind == "memory":
            why = (
                f"released by the memory repository's retention: repository-size-threshold "
                f"{cfg.size_threshold} bytes, repository-age-threshold {cfg.age_threshold:g} s"
            )
        else:
            why = (
                f"released by the {repo.kind} repository's wrap: repository-disk-file-size-limit "
                f"{cfg.disk_file_size_limit} bytes"
            )
        self._note(
            _WARN,
            f"receiver RegID {rcv.reg_id} (Session ID {rcv.session_id}) of source RegID "
            f"{src.reg_id} topic {src.topic!r} resumes at sqn {low}, but sqns {low}.."
            f"{(first_held - 1) & _M} are before the repository's oldest, not held ({why}): "
            f"it cannot recover them from this Store",
        )

    def _first_for_new(self, src: SourceEntry, *, rpp: bool) -> int:
        """Where a new receiver's recovery starts."""
        repo = src.repository
        lead, trail = repo.lead_sqn, repo.trail_sqn
        if rpp or lead == NO_SQN:
            return (lead + 1) & _M
        low = trail if trail != NO_SQN else (lead + 1) & _M
        rollback = int(src.topic_cfg.options["receiver-new-registration-rollback"])
        floor = (lead - rollback + 1) & _M
        return floor if serial_gt(floor, low) else low

    def _receiver_answer(
        self, src: SourceEntry, rcv: ReceiverEntry, marker: int, low: int, *, old: bool
    ) -> tuple[list[tuple[Address, bytes]], list[StoreEvent]]:
        lead = src.repository.lead_sqn
        resp = compose.RegistrationResponse(
            False, rcv.reg_id, rcv.transport_idx, rcv.topic_idx, low, lead, marker,
            store_index=rcv.store_index, old=old, no_acks=src.repository.kind == "no-cache",
            rpp=src.rpp, ctxinst=self.ctxinst, session_id=src.session_id,
        )  # fmt: skip
        event = ReceiverRegistered(
            _INFO,
            f"PREG RESP RCV Session ID {rcv.session_id} RegID {rcv.reg_id} SQN[{low}:{lead}] "
            f"source RegID {src.reg_id}{' OLD' if old else ''} topic {src.topic!r}",
            src.reg_id, rcv.reg_id, src.topic, rcv.session_id, low, lead, old, rcv.rpp_mode,
        )  # fmt: skip
        return [(rcv.reply_to, resp.encode())], [event]

    def _deregistration(self, req: compose.Deregistration, peer: str, now: float) -> None:
        reg = self.registry
        low = high = NO_SQN
        if req.source:
            src = reg.sources.get(req.reg_id)
            if src is not None:
                low, high = src.repository.trail_sqn, src.repository.lead_sqn
                self._delete_source(src, now, DeletionReason.DELETED, deregistered=True)
        else:
            src = reg.sources.get(req.src_reg_id)
            rcv = src.receivers.get(req.reg_id) if src is not None else None
            if src is not None and rcv is not None:
                low, high = rcv.high_ack_sqn, src.repository.lead_sqn
                self._delete_receiver(src, rcv, now, DeletionReason.DELETED, deregistered=True)
        resp = compose.RegistrationResponse(
            req.source, req.reg_id, req.transport_idx, req.topic_idx, low, high, req.marker,
            store_index=req.store_index, deregistered=True, ctxinst=self.ctxinst,
        )  # fmt: skip
        self._send(req.reply_to, resp.encode())

    # --- ACKs, keepalives ----------------------------------------------------------------------

    def _consumption_ack(self, ack: compose.ConsumptionAck, peer: str, now: float) -> None:
        c = self.counters
        c.consumption_acks += 1
        src = self.registry.sources.get(ack.src_reg_id)
        rcv = src.receivers.get(ack.rcv_reg_id) if src is not None else None
        if src is None or rcv is None:
            c.unknown_regid += 1
            self._event(
                AckDiscarded(
                    _WARN,
                    f"consumption ACK of sqn {ack.seqnum} from unknown receiver RegID "
                    f"{ack.rcv_reg_id} of source RegID {ack.src_reg_id} discarded",
                    ack.src_reg_id,
                    ack.rcv_reg_id,
                )
            )
            return
        rcv.clock.heard(now)
        if rcv.high_ack_sqn == NO_SQN or serial_gt(ack.seqnum, rcv.high_ack_sqn):
            rcv.high_ack_sqn = ack.seqnum
            self._dirty(src, now)
            if src.rpp:
                self._release(src, now)
                self._after(src, now)

    def _keepalive(self, ka: compose.Keepalive, peer: str, now: float) -> None:
        c = self.counters
        c.keepalives_received += 1
        reg = self.registry
        if ka.role == lbmc.KA_TYPE_SOURCE:
            src = reg.sources.get(ka.reg_id)
            if src is None:
                c.unknown_regid += 1
                return
            src.clock.heard(now)
            if ka.response_requested:
                self._keepalive_to(src.reply_to, src, ka.reg_id, src.store_index, False, now)
                src.clock.last_sent = now
            return
        if ka.role != lbmc.KA_TYPE_RECEIVER:
            c.unexpected_control += 1  # another Store's keepalive is not for us
            return
        states = reg.receiver_states(ka.reg_id)
        if not states:
            c.unknown_regid += 1
            return
        for rcv in states:
            rcv.clock.heard(now)
        if ka.response_requested:
            rcv = states[0]
            owner = reg.sources[rcv.src_reg_id]
            self._keepalive_to(rcv.reply_to, owner, rcv.reg_id, rcv.store_index, False, now)
            rcv.clock.last_sent = now

    def _receiver_keepalive(self, ka: compose.ReceiverKeepalive, peer: str, now: float) -> None:
        c = self.counters
        c.keepalives_received += 1
        states = self.registry.receiver_states(ka.rcv_reg_id)
        if not states:
            c.unknown_regid += 1
        for rcv in states:
            rcv.clock.heard(now)

    def _keepalive_to(
        self,
        dest: Address,
        src: SourceEntry,
        reg_id: int,
        store_index: int,
        respond: bool,
        now: float,
    ) -> None:
        ka = compose.Keepalive(
            lbmc.KA_TYPE_STORE, src.transport_idx, src.topic_idx, reg_id,
            response_requested=respond, no_tir=not src.matched, store_index=store_index,
        )  # fmt: skip
        self.counters.keepalives_sent += 1
        self._send(dest, ka.encode())

    # --- retransmission requests ---------------------------------------------------------------

    def _retransmission_request(
        self, req: compose.RetransmissionRequest, peer: str, now: float
    ) -> None:
        for rx in req.requests:
            self.retx.offer(rx)
        if req.requests:  # activity of the asking receiver (known by its address)
            first = req.requests[0]
            src = self.registry.sources.get(first.id_2)
            if src is not None:
                for rcv in src.receivers.values():
                    if rcv.reply_to == first.reply_to:
                        rcv.clock.heard(now)

    def _service_retx(self, now: float) -> None:
        taken = self.retx.take(now)
        if not taken:
            return
        c = self.counters
        sources = self.registry.sources
        forward: dict[int, list[compose.RxReq]] = {}
        touched: dict[int, SourceEntry] = {}
        marks = self._marks
        for rx in taken:
            src = sources.get(rx.id_2)
            if src is None:
                c.rx_unknown += 1
                continue
            if marks and rx.seqnum in marks.get(src.reg_id, ()):
                c.rx_marked += 1
                self._not_held(src, rx, forward)
                continue
            got = src.repository.get(rx.seqnum)
            if got is PENDING:
                if self._waiting_reads >= MAX_WAITING_READS:
                    c.rx_read_dropped += 1
                    continue
                self._reads.setdefault((src.reg_id, rx.seqnum), []).append(rx)
                self._waiting_reads += 1
                touched[src.reg_id] = src
            elif got is None:
                if _released(src.repository, rx.seqnum):
                    c.rx_released += 1
                self._not_held(src, rx, forward)
            else:
                c.retransmissions += 1
                self._send(rx.reply_to, compose.splice_retransmission(got, src.retx_prefix))
        self._forward(forward)
        for src in touched.values():
            self._after(src, now)

    def _not_held(
        self, src: SourceEntry, rx: compose.RxReq, forward: dict[int, list[compose.RxReq]]
    ) -> None:
        if src.topic_cfg.options["retransmission-request-forwarding"]:
            self.counters.rx_forwarded += 1
            fwd = compose.RxReq(
                src.transport_idx, src.topic_idx, rx.seqnum, rx.reply_to, rx.request_idx,
                rx.tsni, rx.marker,
            )  # fmt: skip
            forward.setdefault(src.reg_id, []).append(fwd)
        else:
            self.counters.rx_not_held += 1

    def _forward(self, forward: dict[int, list[compose.RxReq]]) -> None:
        for reg_id, reqs in forward.items():
            src = self.registry.sources[reg_id]
            for m in compose.rxreq_messages(reqs):
                self._send(src.reply_to, m.encode())

    # ==========================================================================================
    # Frames
    # ==========================================================================================

    def receive_frame(self, session: FrameSession, frame: bytes, now: float) -> None:
        """One LBMC frame of a joined transport session."""
        self.receive_frames(session, (frame,), now)

    def receive_frames(self, session: FrameSession, frames: Sequence[bytes], now: float) -> None:
        """The LBMC frames of one read (TCP) or datagram (LBT-RU/RM) of a joined session, in
        arrival order: each is appended as :meth:`receive_frame` would, and what the
        repository produced is collected once, so a read's messages become stable -- and are
        ACKed -- together (one ranged ACK when ``stability-ack-minimum-number`` is 1)."""
        c = self.counters
        c.frames += len(frames)
        if len(frames) >= BLOCK_MIN:
            done = self._receive_block(session, frames, now)
            if done:
                if done == len(frames):
                    return
                frames = frames[done:]  # (left by the repository: one at a time, below)
        src: Any = _MISSING
        tindex = session.topic_index
        stored = _STORED_TYPES
        unpack = _TIDX_SQN.unpack_from
        # SPP: consecutive sequence numbers are stored as one run (_store_run)
        run: list[bytes] = []
        first = following = 0
        for frame in frames:
            n = len(frame)
            if n < 4 or frame[0] & 0xF0 or (frame[2] << 8 | frame[3]) != n:
                c.bad_frames += 1
                continue
            if frame[0] not in stored:
                c.unstored_frames += 1
                if frame[0] == _CONTROL and self.proxy.enabled:
                    if run:
                        self._store_run(src, first, run, now)
                        run = []
                    self._control_frame(session, frame, now)
                continue
            if n < 12:
                c.bad_frames += 1
                continue
            tidx, sqn = unpack(frame, 4)
            if tidx != tindex:
                c.other_topic_frames += 1
                continue
            if src is _MISSING:
                src = self._source_of(session)
                # (once per read) its start is being asked for: the read is held
                cu = src.catchup if src is not None else None
                if cu is not None and cu.asking and self._hold(src, cu, session, frames):
                    return
            if src is None:
                c.unmatched_frames += 1
                continue
            if not src.rpp:
                if run and sqn == following:
                    run.append(frame)
                else:
                    if run:
                        self._store_run(src, first, run, now)
                    run = [frame]
                    first = sqn
                following = (sqn + 1) & _M
                continue
            try:
                self._store(src, sqn, frame, now)
                # RPP: what became stable before the stop point is ACKed before a later frame
                # of the same read reaches it (stopping "when exactly one flight size of room
                # remains", not at the read's end)
                self._after(src, now)
            except Exception as exc:
                c.internal_errors += 1
                self._note(_ERR, f"internal error storing sqn {sqn} of RegID {src.reg_id}: {exc!r}")
        if run:
            self._store_run(src, first, run, now)
        if src is not None and src is not _MISSING:
            try:
                self._after(src, now)
            except Exception as exc:
                c.internal_errors += 1
                self._note(_ERR, f"internal error after storing for RegID {src.reg_id}: {exc!r}")

    def _receive_block(self, session: FrameSession, frames: Sequence[bytes], now: float) -> int:
        """:meth:`receive_frames`' common case without a Python step per frame: a read of one
        SPP source's DATA frames, all of one length, of the session's topic index, with
        consecutive sequence numbers, the ones expected next.  Checked column by column on
        their concatenation (each header field's bytes sliced at the frame stride and compared
        with what it must hold) and appended by :meth:`Repository.append_block`.  Returns how
        many frames were taken (0: none, the general path decides about every one of them)."""
        count = len(frames)
        flen = len(frames[0])
        if flen < _DATA_HEADER or flen > 0xFFFF:
            return 0
        block = b"".join(frames)
        # all of one length: none shorter, and together as long as count of them
        if len(block) != flen * count or min(map(len, frames)) != flen:
            return 0
        ver_type = block[0]
        if ver_type not in _STORED_TYPES or block[0::flen] != bytes((ver_type,)) * count:
            return 0
        if (
            block[2::flen] != bytes((flen >> 8,)) * count
            or block[3::flen] != bytes((flen & 0xFF,)) * count
        ):
            return 0
        tidx = _TIDX_SQN.pack(session.topic_index, 0)
        for j in range(4):
            if block[4 + j :: flen] != tidx[j : j + 1] * count:
                return 0
        first = _U32BE.unpack_from(block, 8)[0]
        sqns = sqn_column(first, count)  # little-endian: the frames hold them big-endian
        for j in range(4):
            if block[11 - j :: flen] != sqns[j::4]:
                return 0
        src = self._source_of(session)
        if src is None or src.rpp:
            return 0
        cu = src.catchup
        if cu is not None and cu.asking and self._hold(src, cu, session, frames):
            return count  # (held until the source's start is known, as the general path does)
        if not self.repair.in_order_run(src.reg_id, first, count):
            return 0
        self._store_run(src, first, frames, now, memoryview(block))
        try:
            self._after(src, now)
        except Exception as exc:
            self.counters.internal_errors += 1
            self._note(_ERR, f"internal error after storing for RegID {src.reg_id}: {exc!r}")
        return count

    def _control_frame(self, session: FrameSession, frame: bytes, now: float) -> None:
        """A control frame of a joined session, for the proxy election: a source's SRI (kept:
        what a proxy would serve) or another Store's proxy SRI (its election token)."""
        try:
            msg = lbmc.decode(frame)
            comp = compose.decode(msg)
        except (RemoteProtocolError, ValueError):
            self.counters.bad_frames += 1
            return
        if not isinstance(comp, compose.Sri) or comp.topic_idx not in (None, session.topic_index):
            return
        token = token_of(msg)
        if token is not None:
            peer = _advertised(session.options)
            if peer is not None:
                self.proxy.peer_proxy(session.topic, token, peer[0], now, comp)
            return
        src = self._source_of(session)
        if src is not None and self.proxy.receive_sri(src.reg_id, comp):
            self._dirty(src, now)  # the state file keeps the Stores it names (restarts)
            self._note(
                _INFO,
                f"source RegID {src.reg_id} topic {src.topic!r}: SRI naming {len(comp.stores)} "
                "Store(s) kept for a proxy source",
            )

    def receive_session(self, session: FrameSession, active: bool, now: float) -> None:
        """BOS (``active``) / EOS of a joined session."""
        self._sessions.pop(session, None)
        if active:
            joined = self._source_of(session)
            if joined is not None and (cu := joined.catchup) is not None:
                # this Store joined the source: its late join can go on
                cu.joined = True
                if cu.phase is Phase.BASE_SET:
                    self._probe(joined, cu, now)
                    self._schedule(joined)
        if active and self.proxy.enabled:
            src = self._source_of(session)
            if src is not None and self.proxy.needs_sri(src.reg_id):
                # its SRIs may have gone out before this Store joined: ask for one (the source
                # answers on its transport); a proxy needs it, and algorithm 2 the Stores it names
                self._send(
                    src.reply_to, compose.SriRequest(src.transport_idx, src.topic_idx).encode()
                )
        word = "begins" if active else "ends"
        self._note(
            _INFO, f"transport session {session.source_string} {word} (topic {session.topic!r})"
        )

    def receive_loss(self, session: FrameSession, first: int, last: int, now: float) -> None:
        """The session's messages ``first..last`` are unrecoverable (the transport and OTR gave
        up): stability and writing pass the gap, and the source's re-sends of them get a
        stability NAK."""
        src = self._source_of(session)
        if src is None:
            return
        if len(src.lost_ranges) >= MAX_LOST_RANGES:
            self.counters.lost_ranges_dropped += 1
            return
        src.lost_ranges.append((first & _M, last & _M))
        src.repository.declare_lost(first, last, now)
        self._after(src, now)

    def _source_of(self, session: FrameSession) -> SourceEntry | None:
        """The registration ``session`` matches, cached per session (:meth:`_match`)."""
        src = self._sessions.get(session, _MISSING)
        if src is _MISSING:
            src = self._sessions[session] = self._match(session)
        return src  # type: ignore[no-any-return]

    def _match(self, session: FrameSession) -> SourceEntry | None:
        reg = self.registry
        topic = session.topic
        regs = reg.topics.get(topic, ()) if topic else tuple(reg.sources)
        cands = [
            s
            for r in regs
            if (s := reg.sources.get(r)) is not None and s.topic_idx == session.topic_index
        ]
        ident = _advertised(session.options)
        if ident is not None:
            cands = [s for s in cands if (s.reply_to, s.transport_idx) == ident]
        elif session.source_ip:
            cands = [s for s in cands if s.reply_to[0] == session.source_ip]
        if len(cands) != 1:
            if len(cands) > 1:
                self._note(
                    _WARN,
                    f"session {session.source_string} matches {len(cands)} registrations of "
                    f"topic {topic!r}: its frames are not stored",
                )
            return None
        cands[0].matched = True
        return cands[0]

    def _retransmission(self, rx: compose.Retransmission, peer: str, now: float) -> None:
        """A source's answer to this Store's repair request (RETRANS with its OTID)."""
        cands = [
            s
            for s in self.registry.sources.values()
            if make_otid(s.reply_to[0], s.reply_to[1], s.transport_idx) == rx.otid
        ]
        if len(cands) != 1:
            self.counters.unmatched_frames += 1
            return
        src = cands[0]
        src.clock.heard(now)
        self._store(src, rx.sqn, rx.frame, now)
        self._after(src, now)

    def _uim_data(self, msg: lbmc.LBMCMessage, peer_ip: str, now: float) -> None:
        """A data/PRORX message on the request port (a proactive retransmission sent as a UIM):
        matched by its OTID when it has one, else by the sender's IP and topic index."""
        otid = msg.find(lbmc.Otid)
        cands = [s for s in self.registry.sources.values() if s.topic_idx == msg.tidx]
        if otid is not None:
            cands = [
                s
                for s in cands
                if make_otid(s.reply_to[0], s.reply_to[1], s.transport_idx) == bytes(otid.otid)
            ]
        else:
            cands = [s for s in cands if s.reply_to[0] == peer_ip]
        if len(cands) != 1:
            self.counters.unmatched_frames += 1
            return
        rest = [h for h in msg.headers if type(h) not in (lbmc.Otid, lbmc.TopicName)]
        frame = lbmc.encode(lbmc.LBMCMessage(msg.msg_type, msg.tidx, msg.sqn, rest, msg.payload))
        src = cands[0]
        src.clock.heard(now)
        cu = src.catchup
        if cu is not None and cu.asking and src.repository.empty:
            # a persistent source's re-send while its start is asked for: held with the rest
            if cu.hold(msg.sqn, frame):
                self.counters.lj_held += 1
            else:
                self.counters.lj_held_dropped += 1
            return
        self._store(src, msg.sqn, frame, now)
        self._after(src, now)

    def _store_run(
        self,
        src: SourceEntry,
        sqn: int,
        frames: Sequence[bytes],
        now: float,
        block: memoryview | None = None,
    ) -> None:
        """Messages ``sqn``, ``sqn + 1``, ... of an SPP source, from one read: when they are
        the ones expected next (the common case), appended as a run
        (:meth:`Repository.append_run`), else one by one as :meth:`_store` does.  ``block``:
        the frames are all of one length and this is their concatenation, already taken as
        expected by the repair tracker (:meth:`_receive_block`): appended by
        :meth:`Repository.append_block`."""
        try:
            if block is None and (
                len(frames) == 1 or not self.repair.in_order_run(src.reg_id, sqn, len(frames))
            ):
                for i, frame in enumerate(frames):
                    self._store(src, (sqn + i) & _M, frame, now)
                return
            clock = src.clock
            clock.last_heard = now
            if clock.state is not _ACTIVE:
                clock.step(ClientEvent.ACTIVITY)
            repo = src.repository
            i, total = 0, len(frames)
            flen = len(frames[0])
            while i < total:
                if block is not None:
                    k = repo.append_block(
                        (sqn + i) & _M,
                        frames[i:] if i else frames,
                        block[i * flen :] if i else block,
                        now,
                    )
                else:
                    k = repo.append_run((sqn + i) & _M, frames[i:] if i else frames, now)
                if k:
                    self.counters.frames_stored += k
                    i += k
                    continue
                s = (sqn + i) & _M
                self._stored(src, s, repo.append(s, frames[i], now), now)
                i += 1
        except Exception as exc:
            self.counters.internal_errors += 1
            self._note(
                _ERR, f"internal error storing from sqn {sqn} of RegID {src.reg_id}: {exc!r}"
            )

    def _store(self, src: SourceEntry, sqn: int, frame: bytes, now: float) -> None:
        clock = src.clock
        clock.last_heard = now
        if clock.state is not _ACTIVE:
            clock.step(ClientEvent.ACTIVITY)
        repo = src.repository
        repair = self.repair
        if not repair.in_order(src.reg_id, sqn):  # (the common case: no lead_sqn needed)
            repair.seen(src.reg_id, sqn, repo.lead_sqn, now)
        self._stored(src, sqn, repo.append(sqn, frame, now), now)

    def _stored(self, src: SourceEntry, sqn: int, res: Append | None, now: float) -> None:
        """What an append's result asks for: a count, a re-ACK, a NAK, an RPP release."""
        repo = src.repository
        if res is _STORED:
            self.counters.frames_stored += 1
        elif res is _DUPLICATE:
            stable = repo.stable_sqn
            if stable is not None and not serial_gt(sqn, stable) and not self._withheld(src):
                self._stability(src, sqn, sqn, nak=False, now=now)
        elif res is not None:  # LOST, OLD, DROPPED: the Store cannot hold it
            self._stability(src, sqn, sqn, nak=True, now=now)
        if src.rpp and (not src.receivers or repo.room_bytes <= src.flight_size_bytes):
            self._release(src, now)  # no receiver to wait for, or at the stop point
        # what the repository produced is collected once per read, by receive_frames

    # ==========================================================================================
    # Stability, release, state
    # ==========================================================================================

    def _stability(self, src: SourceEntry, first: int, last: int, *, nak: bool, now: float) -> None:
        data = compose.encode_stability(
            src.transport_idx, src.topic_idx, first, last, src.store_index, nak
        )
        if nak:
            self.counters.naks_sent += 1
        else:
            self.counters.acks_sent += 1
        src.clock.last_sent = now
        self._sends.append((src.reply_to, data))

    def _withheld(self, src: SourceEntry) -> bool:
        repo = src.repository
        if repo.full:
            return True
        if not src.rpp or not src.flight_size_bytes:
            return False
        if repo.room_bytes > src.flight_size_bytes:
            return False
        lead = repo.lead_sqn
        return any(
            r.blocking and (r.high_ack_sqn == NO_SQN or serial_gt(lead, r.high_ack_sqn))
            for r in src.receivers.values()
        )

    def _after(self, src: SourceEntry, now: float) -> None:
        """Collect what ``src``'s repository produced: stable ranges, I/O, read results."""
        repo = src.repository
        while (rng := repo.take_newly_stable()) is not None:
            self._newly_stable(src, _after_stable(src, *rng), now)
        if (
            src.ack_count
            and (src.ack_count >= src.ack_minimum or now >= src.ack_since + src.ack_interval)
            and not self._withheld(src)
        ):
            for first, last in src.ack_ranges:
                self._stability(src, first, last, nak=False, now=now)
            src.ack_ranges.clear()
            src.ack_count = 0
        jobs = repo.take_io()
        if jobs:
            self._io.extend(jobs)
            if src.rpp and not src.rpp_writing and any(j.kind is IoKind.WRITE for j in jobs):
                src.rpp_writing = True
                self._event(
                    RppWriting(
                        _INFO,
                        f"RPP source RegID {src.reg_id} topic {src.topic!r} writing to disk",
                        src.reg_id,
                        src.topic,
                    )
                )
        if src.rpp_writing and not repo.frames_held:
            src.rpp_writing = False
            self._event(
                RppRepoEmpty(
                    _INFO,
                    f"RPP source RegID {src.reg_id} topic {src.topic!r} repository empty",
                    src.reg_id,
                    src.topic,
                )
            )
        if self._reads:
            for sqn, frame in repo.take_read_results():
                waiting = self._reads.pop((src.reg_id, sqn), [])
                self._waiting_reads -= len(waiting)
                forward: dict[int, list[compose.RxReq]] = {}
                for rx in waiting:
                    if frame is None:
                        self._not_held(src, rx, forward)
                    else:
                        self.counters.retransmissions += 1
                        self._send(
                            rx.reply_to, compose.splice_retransmission(frame, src.retx_prefix)
                        )
                self._forward(forward)
        if self.registry.sources.get(src.reg_id) is src:
            self._schedule(src)

    def _pending_ack(self, src: SourceEntry, first: int, last: int, now: float) -> None:
        ranges = src.ack_ranges
        if ranges and ranges[-1][1] == ((first - 1) & _M):
            ranges[-1][1] = last
        else:
            if not ranges:
                src.ack_since = now
            ranges.append([first, last])
        src.ack_count += ((last - first) & _M) + 1

    def _release(self, src: SourceEntry, now: float) -> None:
        """RPP: delete what every receiver consumed (past the stop point: every blocking one)."""
        repo = src.repository
        lead = repo.lead_sqn
        if lead == NO_SQN:
            return
        self._release_to(src, now)
        trail = repo.trail_sqn
        released = (trail - 1) & _M if trail != NO_SQN else repo.lead_sqn
        # RPP: a message every receiver consumed is stable, written or not ("delete and ACK")
        self._newly_stable(src, _after_stable(src, (src.stable_through + 1) & _M, released), now)

    def _newly_stable(self, src: SourceEntry, rng: tuple[int, int] | None, now: float) -> None:
        """Queue ``rng`` for a stability ACK, NAKing at once the parts declared lost."""
        if rng is None:
            return
        pieces = _split_lost(rng[0], rng[1], src) if src.lost_ranges else ((*rng, False),)
        for first, last, lost in pieces:
            if lost:
                self._stability(src, first, last, nak=True, now=now)
            else:
                self._pending_ack(src, first, last, now)

    def _release_to(self, src: SourceEntry, now: float) -> None:
        repo = src.repository
        lead = repo.lead_sqn
        rcvs = list(src.receivers.values())
        target = _behind(lead, [r.high_ack_sqn for r in rcvs])
        if target is not None:
            repo.release_through(target, now)
        flight = src.flight_size_bytes
        if not flight or repo.room_bytes > flight:
            return
        # at the stop point non-blocking receivers lose their oldest messages: release toward
        # the slowest blocking receiver (everything held, with none), oldest half at a time
        blocking = [r.high_ack_sqn for r in rcvs if r.blocking]
        cap = _behind(lead, blocking) if blocking else lead
        while cap is not None and repo.room_bytes <= flight:
            trail = repo.trail_sqn
            if trail == NO_SQN or serial_gt(trail, cap):
                return
            repo.release_through((trail + ((cap - trail) & _M) // 2) & _M, now)
            if repo.trail_sqn == trail:
                return

    def _state_of(self, src: SourceEntry) -> SourceState:
        repo = src.repository
        return SourceState(
            reg_id=src.reg_id, topic=src.topic, session_id=src.session_id,
            transport_idx=src.transport_idx, topic_idx=src.topic_idx, ip=src.reply_to[0],
            port=src.reply_to[1], store_index=src.store_index,
            activity_timeout_ms=src.clock.activity_ms, state_lifetime_ms=src.clock.lifetime_ms,
            rpp=src.rpp, rpp_overrides=dict(src.rpp_options),
            ack_on_reception=src.ack_on_reception, repository_type=repo.kind,
            created=src.created, flight_size_bytes=src.flight_size_bytes,
            otid=make_otid(src.reply_to[0], src.reply_to[1], src.transport_idx),
            context_instance=src.ctxinst, lead_sqn=repo.lead_sqn,
            proxy=self.proxy.tracked(src.reg_id), proxy_sri=self.proxy.sri_bytes(src.reg_id),
            receivers=[
                ReceiverState(
                    reg_id=r.reg_id, session_id=r.session_id, high_ack_sqn=r.high_ack_sqn,
                    ip=r.reply_to[0], port=r.reply_to[1],
                    activity_timeout_ms=r.clock.activity_ms,
                    state_lifetime_ms=r.clock.lifetime_ms, rpp_mode=r.rpp_mode,
                    transport_idx=r.transport_idx, topic_idx=r.topic_idx,
                    context_instance=r.ctxinst, created=r.created,
                )
                for r in src.receivers.values()
            ],
        )  # fmt: skip

    def _state_path(self, reg_id: int) -> str:
        return f"{self.state_dir}/{state_name(reg_id)}"

    def _write_state(self, src: SourceEntry, now: float) -> IoJob | None:
        """Queue ``src``'s state file (None: a memory repository keeps no state)."""
        src.state_dirty = False
        if src.repository.kind == "memory":
            return None
        self._tag += 1
        job = IoJob(
            IoKind.STATE_WRITE,
            self._state_path(src.reg_id),
            data=encode_state(self._state_of(src)),
            owner=src.reg_id,
            tag=self._tag,
        )
        self._io.append(job)
        return job

    def _dirty(self, src: SourceEntry, now: float) -> None:
        if not src.state_dirty and src.repository.kind != "memory":
            src.state_dirty = True
            src.state_due = now + STATE_FLUSH_S
            self._schedule(src)

    def receive_io_done(self, done: IoDone, now: float) -> None:
        job = done.job
        if job.kind is IoKind.STATE_WRITE or job.kind is IoKind.STATE_DELETE:
            held = self._held.pop(job.tag, None) if job.kind is IoKind.STATE_WRITE else None
            if done.ok:
                if held is not None and held.done():
                    for dest, data in held.sends:
                        self._send(dest, data)
                    self._events.extend(held.events)
                return
            self.counters.state_write_errors += 1
            self._note(_ERR, f"{job.kind.name} {job.path} failed: {done.error}")
            if held is not None:
                held.undo(now)  # the client asks again; nothing was promised
            return
        src = self.registry.sources.get(job.owner)
        if src is None:
            self.counters.io_orphans += 1
            if not done.ok:
                self._note(_WARN, f"{job.kind.name} {job.path} failed: {done.error}")
            return
        try:
            src.repository.io_done(done, now)
            self._after(src, now)
        except Exception as exc:
            self.counters.internal_errors += 1
            self._note(_ERR, f"internal error on I/O completion {job.path}: {exc!r}")

    # ==========================================================================================
    # Deletion
    # ==========================================================================================

    def _delete_receiver(
        self,
        src: SourceEntry,
        rcv: ReceiverEntry,
        now: float,
        reason: DeletionReason,
        *,
        deregistered: bool = False,
    ) -> None:
        self.registry.remove_receiver(src, rcv)
        rcv.clock.step(ClientEvent.EXPIRE)
        if deregistered:
            self._event(
                ReceiverDeregistered(
                    _INFO,
                    f"receiver RegID {rcv.reg_id} of source RegID {src.reg_id} deregistered",
                    src.reg_id,
                    rcv.reg_id,
                    src.topic,
                )
            )
        else:
            self._event(
                ReceiverDeleted(
                    _INFO,
                    f"receiver RegID {rcv.reg_id} state of source RegID {src.reg_id} topic "
                    f"{src.topic!r} deleted ({reason.name})",
                    src.reg_id,
                    rcv.reg_id,
                    src.topic,
                    reason,
                )
            )
        if src.rpp:
            self._release(src, now)  # an expired RPP receiver implicitly ACKs what it held
            self._after(src, now)
        self._write_state(src, now)

    def _delete_source(
        self,
        src: SourceEntry,
        now: float,
        reason: DeletionReason,
        *,
        deregistered: bool = False,
        quiet: bool = False,
    ) -> None:
        reg = self.registry
        self._marks.pop(src.reg_id, None)
        self.repair.forget(src.reg_id)
        self.proxy.deleted(src.reg_id, now)
        for rcv in list(src.receivers.values()):
            if not quiet:
                self._event(
                    ReceiverDeleted(
                        _INFO,
                        f"receiver RegID {rcv.reg_id} state of source RegID {src.reg_id} topic "
                        f"{src.topic!r} deleted (SRC_DELETED)",
                        src.reg_id,
                        rcv.reg_id,
                        src.topic,
                        DeletionReason.SRC_DELETED,
                    )
                )
            rcv.clock.step(ClientEvent.EXPIRE)
        last = reg.remove_source(src)
        src.clock.step(ClientEvent.EXPIRE)
        self._io.extend(src.repository.destroy())
        if src.repository.kind != "memory":
            self._io.append(IoJob(IoKind.STATE_DELETE, self._state_path(src.reg_id), owner=0))
        for key in [k for k in self._reads if k[0] == src.reg_id]:
            self._waiting_reads -= len(self._reads.pop(key))
        self._sessions.clear()
        if deregistered:
            self._event(
                SourceDeregistered(
                    _INFO,
                    f"source RegID {src.reg_id} topic {src.topic!r} deregistered",
                    src.reg_id,
                    src.topic,
                )
            )
        elif not quiet:
            self._event(
                SourceDeleted(
                    _INFO,
                    f"source RegID {src.reg_id} state for topic {src.topic!r} deleted "
                    f"({reason.name})",
                    src.reg_id,
                    src.topic,
                    reason,
                )
            )
        if last:
            self._leaves.append(src.topic)
            self._event(TopicDeleted(_INFO, f'topic "{src.topic}" deleted', src.topic))

    # ==========================================================================================
    # Start-up, timers, shutdown
    # ==========================================================================================

    def _restore(self, state: SourceState, repo: Repository, now: float) -> None:
        cfg = self.instance.match(state.topic)
        if cfg is None:
            self._note(
                _WARN,
                f"state of source RegID {state.reg_id} topic {state.topic!r} matches no <topic> "
                "pattern any more: not restored (files kept)",
            )
            return
        src = SourceEntry(
            reg_id=state.reg_id, topic=state.topic, topic_cfg=cfg, session_id=state.session_id,
            transport_idx=state.transport_idx, topic_idx=state.topic_idx,
            reply_to=(state.ip, state.port),
            clock=Clock(state.activity_timeout_ms, state.state_lifetime_ms, now, Liveness.RESTORED),
            repository=repo, ctxinst=state.context_instance or bytes(8),
            store_index=state.store_index, rpp=state.rpp, rpp_options=dict(state.rpp_overrides),
            ack_on_reception=state.ack_on_reception, flight_size_bytes=state.flight_size_bytes,
            created=state.created,
        )  # fmt: skip
        for r in state.receivers:
            rcv = ReceiverEntry(
                reg_id=r.reg_id, src_reg_id=src.reg_id, session_id=r.session_id,
                reply_to=(r.ip, r.port),
                clock=Clock(r.activity_timeout_ms, r.state_lifetime_ms, now, Liveness.RESTORED),
                rpp_mode=r.rpp_mode, high_ack_sqn=r.high_ack_sqn,
                ctxinst=r.context_instance or bytes(8), transport_idx=r.transport_idx,
                topic_idx=r.topic_idx, created=r.created,
            )  # fmt: skip
            src.receivers[rcv.reg_id] = rcv
        self._set_identity(src)
        src.next_check = now + self._check_s(src)
        # stability already reported before the restart is not ACKed again
        while repo.take_newly_stable() is not None:
            pass
        stable = repo.stable_sqn
        src.stable_through = NO_SQN if stable is None else stable
        if src.rpp and src.receivers and repo.lead_sqn != NO_SQN:
            # RPP: what every receiver had consumed before the restart may have come back with
            # a segment it shared with unconsumed messages; release it again (nothing to ACK:
            # the source re-registers and learns the Store's window from the answer)
            self._release_to(src, now)
            while repo.take_newly_stable() is not None:
                pass
            self._io.extend(repo.take_io())
        self._add_source(src, now)
        if state.proxy:
            self.proxy.restored(src.reg_id, src.topic, _ident(src), state.proxy_sri, now)
        self._event(
            SourceRecreated(
                _INFO,
                f"source RegID {src.reg_id} topic {src.topic!r} recreated from state; "
                f"SQN[{repo.trail_sqn}:{repo.lead_sqn}]",
                src.reg_id,
                src.topic,
                repo.lead_sqn,
            )
        )
        for rcv in src.receivers.values():
            self._event(
                ReceiverRecreated(
                    _INFO,
                    f"receiver RegID {rcv.reg_id} of source RegID {src.reg_id} recreated; "
                    f"ACK {rcv.high_ack_sqn:#x}",
                    src.reg_id,
                    rcv.reg_id,
                    src.topic,
                    rcv.high_ack_sqn,
                )
            )

    def _due(self, src: SourceEntry) -> float:
        """When ``src`` next needs the timer: its check, its repository's timer, a state
        write, an ACK batch's deadline."""
        due = src.next_check
        t = src.repository.next_timer()
        if t is not None and t < due:
            due = t
        if src.state_dirty and src.state_due < due:
            due = src.state_due
        if src.ack_count and src.ack_since + src.ack_interval < due and not self._withheld(src):
            due = src.ack_since + src.ack_interval
        cu = src.catchup
        if cu is not None and cu.due < due:
            due = cu.due
        return due

    def _schedule(self, src: SourceEntry) -> None:
        """Re-arm ``src`` in the timer heap when its due time changed (stale heap entries are
        skipped later: one entry per change, never a scan of every source)."""
        due = self._due(src)
        if due != src.due:
            self._seq += 1
            src.due, src.due_seq = due, self._seq
            heapq.heappush(self._timers, (due, self._seq, src.reg_id))

    def _top(self) -> tuple[float, int, int] | None:
        timers = self._timers
        sources = self.registry.sources
        while timers:
            _due, seq, reg_id = timers[0]
            src = sources.get(reg_id)
            if src is not None and src.due_seq == seq:
                return timers[0]
            heapq.heappop(timers)
        return None

    def next_timer(self) -> float | None:
        top = self._top()
        t = self.retx.next_time()
        r = self.repair.next_timer()
        if r is not None and (t is None or r < t):
            t = r
        p = self.proxy.next_timer()
        if p is not None and (t is None or p < t):
            t = p
        if top is None:
            return t
        return top[0] if t is None or top[0] < t else t

    def handle_timer(self, now: float) -> None:
        try:
            while (top := self._top()) is not None and top[0] <= now:
                heapq.heappop(self._timers)
                src = self.registry.sources[top[2]]
                src.due = _NEVER
                t = src.repository.next_timer()
                if t is not None and now >= t:
                    src.repository.handle_timer(now)
                if now >= src.next_check:
                    src.next_check = now + self._check_s(src)
                    if not self._check(src, now):
                        continue
                cu = src.catchup
                if cu is not None and now >= cu.due:
                    self._catchup_timer(src, cu, now)
                self._after(src, now)
                if src.state_dirty and now >= src.state_due:
                    self._write_state(src, now)
                self._schedule(src)
            self._service_retx(now)
            r = self.repair.next_timer()
            if r is not None and now >= r:
                self._repair(now)
            p = self.proxy.next_timer()
            if p is not None and now >= p:
                self.proxy.handle_timer(now)
        except Exception as exc:
            self.counters.internal_errors += 1
            self._note(_ERR, f"internal error in the timer: {exc!r}")

    def _repair(self, now: float) -> None:
        """Ask sources again for what this Store missed; declare lost what timed out."""
        requests, lost = self.repair.handle_timer(now)
        sources = self.registry.sources
        for reg_id, sqns in requests:
            src = sources.get(reg_id)
            if src is None:
                continue
            reqs = [
                compose.RxReq(src.transport_idx, src.topic_idx, sqn, self.address) for sqn in sqns
            ]
            for msg in compose.rxreq_messages(reqs):
                self._send(src.reply_to, msg.encode())
        touched: dict[int, SourceEntry] = {}
        for reg_id, sqn in lost:
            src = sources.get(reg_id)
            if src is None:
                continue
            if len(src.lost_ranges) >= MAX_LOST_RANGES:
                self.counters.lost_ranges_dropped += 1
                continue
            src.lost_ranges.append((sqn, sqn))
            src.repository.declare_lost(sqn, sqn, now)
            touched[reg_id] = src
        for src in touched.values():
            self._note(
                _WARN,
                f"source RegID {src.reg_id} topic {src.topic!r}: messages missed and not "
                "repaired by the source in time are declared lost",
            )
            self._after(src, now)

    def _check(self, src: SourceEntry, now: float) -> bool:
        """Liveness of ``src`` and its receivers, keepalives; False when ``src`` was deleted."""
        verdict = src.clock.verdict(now)
        if verdict is Verdict.EXPIRE:
            reason = (
                DeletionReason.STATE_LIFETIME_EXPIRED
                if src.clock.lifetime_ms
                else DeletionReason.DELETED
            )
            self._delete_source(src, now, reason)
            return False
        if verdict is Verdict.TIMEOUT:
            src.clock.step(ClientEvent.TIMEOUT)
            self._note(_INFO, f"source RegID {src.reg_id} topic {src.topic!r} inactive")
            interval = int(src.topic_cfg.options["proxy-election-interval"]) / 1000.0
            self.proxy.inactive(src.reg_id, interval, now)
        for rcv in list(src.receivers.values()):
            v = rcv.clock.verdict(now)
            if v is Verdict.EXPIRE:
                reason = (
                    DeletionReason.STATE_LIFETIME_EXPIRED
                    if rcv.clock.lifetime_ms
                    else DeletionReason.DELETED
                )
                self._delete_receiver(src, rcv, now, reason)
            elif v is Verdict.TIMEOUT:
                rcv.clock.step(ClientEvent.TIMEOUT)
                self._note(_INFO, f"receiver RegID {rcv.reg_id} of source {src.reg_id} inactive")
        ka = int(src.topic_cfg.options["keepalive-interval"]) / 1000.0
        if ka > 0:
            self._idle_keepalive(src.clock, src.reply_to, src, src.reg_id, src.store_index, ka, now)
            for rcv in src.receivers.values():
                self._idle_keepalive(
                    rcv.clock, rcv.reply_to, src, rcv.reg_id, rcv.store_index, ka, now
                )
        return True

    def _idle_keepalive(
        self,
        clock: Clock,
        dest: Address,
        src: SourceEntry,
        reg_id: int,
        store_index: int,
        ka: float,
        now: float,
    ) -> None:
        if clock.state is not Liveness.ACTIVE or now - clock.last_sent < ka:
            return
        respond = now - clock.last_heard >= ka
        self._keepalive_to(dest, src, reg_id, store_index, respond, now)
        clock.last_sent = now

    def shutdown(self, now: float) -> None:
        """Stop taking registrations and write every kept state (ACK positions included); the
        caller then drains :meth:`take_io`."""
        self.closing = True
        for src in self.registry.sources.values():
            self._write_state(src, now)

    # ==========================================================================================
    # Daemon control (persistence-store.md 4.4: umedcmd's mark and deregister)
    # ==========================================================================================

    def mark_invalid(self, src_reg_id: int, sqn: int) -> bool:
        """``mark``: the Store treats ``sqn`` of source ``src_reg_id`` as not held -- never
        retransmitted (a request for it is forwarded to the source when
        ``retransmission-request-forwarding`` is on, which defeats the mark, as in UM) --
        until the Store restarts (marks are not persisted).  False: no such source, or
        :data:`MAX_MARKS_PER_SOURCE` reached."""
        if src_reg_id not in self.registry.sources:
            return False
        marks = self._marks.setdefault(src_reg_id, set())
        if sqn not in marks and len(marks) >= MAX_MARKS_PER_SOURCE:
            return False
        marks.add(sqn & _M)
        self._note(_INFO, f"sqn {sqn & _M} of source RegID {src_reg_id} marked invalid")
        return True

    def deregister_receiver(self, src_reg_id: int, rcv_reg_id: int, now: float) -> bool:
        """``deregister``: delete receiver ``rcv_reg_id``'s state under source ``src_reg_id``
        (RECEIVER_DELETED, reason DELETED).  The receiver is not told; its later ACKs are
        discarded (:class:`~umcore.store.events.AckDiscarded`).  False: no such state."""
        src = self.registry.sources.get(src_reg_id)
        rcv = src.receivers.get(rcv_reg_id) if src is not None else None
        if src is None or rcv is None:
            return False
        self._delete_receiver(src, rcv, now, DeletionReason.DELETED)
        return True

    def marked(self, src_reg_id: int) -> frozenset[int]:
        """The sqns of source ``src_reg_id`` marked invalid."""
        return frozenset(self._marks.get(src_reg_id, ()))

    # ==========================================================================================
    # Views
    # ==========================================================================================

    def store_info(self, reg_id: int, *, grp_idx: int = 0, version: int = 1) -> compose.SriStore:
        """This Store's entry in the SRI of source ``reg_id`` (what the source sends)."""
        src = self.registry.sources[reg_id]
        return compose.SriStore(
            self.address, src.store_index, reg_id, grp_idx=grp_idx, version=version
        )

    def stats(self) -> StoreStats:
        reg = self.registry
        repos = tuple(
            RepositoryStats(
                s.reg_id,
                s.topic,
                s.session_id,
                s.transport_idx,
                s.topic_idx,
                s.rpp,
                s.repository.kind,
                s.clock.state.value,
                len(s.receivers),
                s.repository.stats(),
                tuple(
                    ReceiverStats(
                        r.reg_id,
                        r.session_id,
                        r.high_ack_sqn,
                        r.rpp_mode,
                        r.clock.state.value,
                        r.reply_to,
                    )
                    for r in s.receivers.values()
                ),
                s.reply_to,
            )
            for s in reg.sources.values()
        )
        counters = self.counters.snapshot()
        counters["rx_received"] = self.retx.received
        counters["rx_serviced"] = self.retx.serviced
        counters["rx_dropped"] = self.retx.dropped
        counters["rx_duplicates"] = self.retx.duplicates
        return StoreStats(
            counters,
            len(reg.sources),
            sum(len(s.receivers) for s in reg.sources.values()),
            len(reg.topics),
            len(self.retx),
            repos,
        )


_MISSING: Any = object()
_NEVER = math.inf


def _after_stable(src: SourceEntry, first: int, last: int) -> tuple[int, int] | None:
    """``first..last`` without what was already reported stable; advances the mark."""
    mark = src.stable_through
    if mark != NO_SQN:
        if not serial_gt(last, mark):
            return None
        if not serial_gt(first, mark):
            first = (mark + 1) & _M
    elif serial_gt(first, last):
        return None
    src.stable_through = last
    return first, last


def _released(repo: Repository, sqn: int) -> bool:
    """``sqn`` comes before what ``repo`` holds (its trail; past its lead when it holds nothing
    any more): released by its retention, or from before it started."""
    lead = repo.lead_sqn
    if lead == NO_SQN or repo.kind == "no-cache":
        return False
    trail = repo.trail_sqn
    return serial_gt((lead + 1) & _M if trail == NO_SQN else trail, sqn)


def _rx_key(rx: compose.RxReq) -> tuple[int, int, int, Address]:
    """Requests for the same message to the same place are one request."""
    return rx.transport_idx, rx.id_2, rx.seqnum, rx.reply_to


def _rel(x: int, origin: int) -> int:
    """``x`` as a signed offset from ``origin`` (serial arithmetic)."""
    return ((x - origin + _HALF) & _M) - _HALF


def _split_lost(first: int, last: int, src: SourceEntry) -> list[tuple[int, int, bool]]:
    """``first..last`` cut into (first, last, lost) pieces by ``src.lost_ranges``; lost ranges
    stability has passed are forgotten."""
    n = (last - first) & _M
    cuts: list[tuple[int, int]] = []
    keep: list[tuple[int, int]] = []
    for a, b in src.lost_ranges:
        lo, hi = max(_rel(a, first), 0), min(_rel(b, first), n)
        if lo <= hi:
            cuts.append((lo, hi))
        if _rel(b, first) > n:
            keep.append((a, b))
    src.lost_ranges = keep
    out: list[tuple[int, int, bool]] = []
    pos = 0
    for lo, hi in sorted(cuts):
        if lo < pos:
            lo = pos
        if lo > hi:
            continue
        if lo > pos:
            out.append(((first + pos) & _M, (first + lo - 1) & _M, False))
        out.append(((first + lo) & _M, (first + hi) & _M, True))
        pos = hi + 1
    if pos <= n:
        out.append(((first + pos) & _M, last, False))
    return out


def _behind(lead: int, acks: list[int]) -> int | None:
    """The ACK furthest behind ``lead`` (None: someone ACKed nothing; everything for none).
    An ACK ahead of the lead (the receiver got messages the Store has not) counts as the lead."""
    if not acks:
        return lead
    if any(a == NO_SQN for a in acks):
        return None
    gap = max(d if (d := (lead - a) & _M) < _HALF else 0 for a in acks)
    return (lead - gap) & _M


def _ident(src: SourceEntry) -> SourceIdent:
    """How the Stores of ``src`` name it to each other (proxy election, algorithm 2)."""
    return SourceIdent(src.reply_to, src.transport_idx, src.topic_idx, src.ctxinst)


def _proxy_wanted(req: compose.SourceRegistration) -> bool:
    """The source asked for a proxy and can be proxied: a real RegID or a Session ID (1.13)."""
    return req.proxy and bool(req.reg_id or req.session_id)


def _offers_late_join(options: tuple[Any, ...]) -> bool:
    """A session's TIR offers late join (a persistent source's does: UM forces it on)."""
    for opt in options:
        if isinstance(opt, LateJoinOption):
            return True
        if isinstance(opt, UMEOption) and opt.flags & UME_FLAG_LATEJOIN:
            return True
    return False


def _advertised(options: tuple[Any, ...]) -> tuple[Address, int] | None:
    """The request address and transport index a persistent source's TIR advertises."""
    for opt in options:
        if isinstance(opt, UMEOption):
            return (opt.src_tcp_addr, opt.src_tcp_port), opt.transport_idx
    for opt in options:
        if isinstance(opt, LateJoinOption):
            return (opt.src_ip_addr, opt.src_tcp_port), opt.transport_idx
    return None
