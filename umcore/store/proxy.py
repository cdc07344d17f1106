"""Proxy-source election of one Store instance, sans-IO (persistence-store.md 1.13).

Theory of operation
-------------------
A source that registered with ``ume_proxy_source 1`` (the UME_PROXY_SRC header, E flag) and a
real RegID or Session ID asks its Stores to stand in for it when it dies.  A Store with
``allow-proxy-source 1`` runs one :class:`ProxyElection`; :class:`~umcore.store.core.StoreCore`
feeds it:

* :meth:`ProxyElection.registered` -- a source registration succeeded (``wanted``: it asked for
  a proxy and named a RegID or Session ID).  When a proxy of that source runs here it is
  deleted (reason ``PROXY_SRC_REREGISTERED``); a pending election wait is cancelled.
* :meth:`ProxyElection.restored` -- a source read back from the state file at start-up
  (its request for a proxy and its last SRI are kept there): it takes part like the others
  once its activity timeout passes.
* :meth:`ProxyElection.receive_sri` -- the last SRI the source sent on its transport (a control
  frame of the Store's raw receiver): what a proxy serves, with the source's RegIDs and the
  Stores that hold its state.
* :meth:`ProxyElection.inactive` -- the source's activity timeout: the Store waits a random
  ``[0.5, 1.5] x proxy-election-interval`` (a ``<topic>`` option; UM's rule) and, if nothing
  cancelled the wait, elects itself: :class:`ProxyStart` is queued for the daemon, which opens
  the UM source.
* :meth:`ProxyElection.deleted` -- the source's state is gone: the proxy goes too (reason
  ``PROXY_SRC_STATE_LIFETIME_EXPIRED``).
* :meth:`ProxyElection.peer_proxy` -- another Store's proxy for the source was seen (its SRI
  carries a UME_PSRC_ELECTION_TOKEN header; the Store entry with this Store's address names the
  RegID it stands in for here).  A Store still waiting stands down and *follows* that proxy; a
  Store that runs a proxy keeps it only if its own token is higher (ties: the lower store
  address keeps it), else withdraws (:class:`ProxyStop`, reason ``DELETED``) and follows.
  [inferred] UM exchanges the token in a PREG with the P flag and an LBMR "proxy source
  election" record; ours goes, when the proxy starts, in a PSER *claim* (a UME_PSER naming the
  source and the Store plus a UME_PSRC_ELECTION_TOKEN header) straight to the request ports of
  the other Stores the source's SRI names -- so that a Store still waiting stands down within
  the network's latency rather than once it joined the proxy's transport -- and rides on the
  proxy's SRI announcements, which every other Store receives anyway (they stay joined to the
  topic).
* :meth:`ProxyElection.sri_request` -- an SRI_REQ that reached the Store's request port for a
  proxy's transport/topic index: the SRI bytes to send on the proxy's transport.

**Election algorithm 2** (``proxy-source-repo-quorum-required 1``, UM's recommendation since
6.15): only Stores holding state for the source take part (here: a Store takes part in the
election of a source only if it tracks it, i.e. the source registered with it or its state
was restored), and a proxy is created only if a quorum -- a majority of the Stores the source's
SRI names -- takes part.  How a Store learns that others take part is not public; ours
[inferred]: each Store that starts an election wait for the source sends every other Store
its SRI names a UME_PSER (0x41) control message to that Store's request port
(:func:`encode_pser`: the source's request address, transport and topic index and context
instance -- identical at every Store of the source, unlike the per-Store RegIDs -- and the
sending Store's address and context instance), and remembers the PSERs it receives
(:meth:`ProxyElection.receive_pser`) for :data:`PARTICIPATION_WAITS` maximal waits.  At its
wait's end a Store creates the proxy only when itself plus the fresh participants the SRI names
reach the quorum; otherwise it notes "no quorum", draws a new wait and sends its PSERs again
(so a Store that comes back, or a late one, still completes the quorum).  Two Stores that both
reach the quorum resolve the collision by the token, as in algorithm 1.

**Re-election** (UM's REELECT): a Store following another Store's proxy expects its SRI
announcement every ``ANNOUNCE_FRACTION x proxy-election-interval``; when none came for
:func:`silence_bound` (two announcements plus a grace), the proxy is taken as gone with its
Store, and the following Stores run the election again (that Store no longer counts as a
participant).  A running proxy is never re-elected away by silence of others.

The daemon tells :meth:`started` the transport and topic index its UM source got, and sends
on that transport the SRIs :meth:`take_sris` (announcements: at start, then every half
``proxy-election-interval`` [inferred]) and :meth:`sri_request` return; the PSERs to other
Stores come out of :meth:`take_sends`; :class:`ProxyNote` lines (no quorum, re-election) go to
the log.
"""

from __future__ import annotations

import enum
import random
from collections.abc import Callable
from dataclasses import dataclass, field, replace

from umcore.errors import LocalProtocolError, RemoteProtocolError
from umcore.store import compose
from umcore.store.events import DeletionReason
from umcore.wire import lbmc

__all__ = [
    "ProxyElection",
    "ProxyNote",
    "ProxyStart",
    "ProxyState",
    "ProxyStop",
    "SourceIdent",
    "decode_pser",
    "encode_pser",
    "silence_bound",
    "token_of",
]

Address = tuple[str, int]

# UM's election wait: a uniform fraction of proxy-election-interval (persistence-store.md 1.13).
WAIT_LOW = 0.5
WAIT_HIGH = 1.5
# A running proxy repeats its SRI every this fraction of proxy-election-interval [inferred]:
# Stores (and receivers) that joined its transport after the first SRI learn of it, so two
# Stores that both elected themselves see each other's token within one interval.
ANNOUNCE_FRACTION = 0.5
# ... and never more often than this (an interval of 0 must not spin).
MIN_ANNOUNCE_S = 0.1
# Re-election [inferred]: a followed proxy is gone when this many announcements in a row did
# not come (one late or lost announcement is not a failure: a busy Store, a TCP retransmission) ...
SILENT_ANNOUNCES = 2
# ... plus this fraction of proxy-election-interval as grace (a proxy that just started
# announces only once its UM source is open, which can take a moment after it was elected).
SILENT_GRACE = 0.5
# Algorithm 2 [inferred]: a Store's PSER counts for this many maximal election waits
# (WAIT_HIGH x interval each): an electing Store sends one per wait, so missing two in a row
# means it stopped electing (it died, follows a proxy, or its source came back).
PARTICIPATION_WAITS = 2
# Sources this Store tracks for proxying; beyond this, registrations asking for a proxy are not
# tracked (counted in ``refused``): the table must stay bounded against a registration flood.
MAX_TRACKED = 65536
# Participants remembered per source: an SRI names at most this many Stores; PSERs from more
# distinct Stores are refused (counted in ``psers_refused``): a peer cannot grow the table.
MAX_PARTICIPANTS = compose.MAX_STORES


def silence_bound(interval_s: float) -> float:
    """How long a followed proxy may stay silent before it is re-elected (see the constants)."""
    announce = max(interval_s * ANNOUNCE_FRACTION, MIN_ANNOUNCE_S)
    return SILENT_ANNOUNCES * announce + SILENT_GRACE * interval_s


class ProxyState(enum.Enum):
    IDLE = "idle"  # the source is alive (or never went inactive, or nothing to serve)
    WAITING = "waiting"  # election wait running
    RUNNING = "running"  # this Store runs the proxy
    FOLLOWING = "following"  # another Store's proxy serves the source; its SRIs are watched


# state -> states it may move to (the one transition table)
_TRANSITIONS: dict[ProxyState, frozenset[ProxyState]] = {
    ProxyState.IDLE: frozenset({ProxyState.WAITING, ProxyState.FOLLOWING}),
    ProxyState.WAITING: frozenset({ProxyState.IDLE, ProxyState.RUNNING, ProxyState.FOLLOWING}),
    ProxyState.RUNNING: frozenset({ProxyState.IDLE, ProxyState.FOLLOWING}),
    ProxyState.FOLLOWING: frozenset({ProxyState.IDLE, ProxyState.WAITING}),
}


@dataclass(frozen=True, slots=True)
class SourceIdent:
    """How the Stores of one source name it to each other (a PSER's source fields): its
    request address, transport and topic index, context instance -- the same at every Store,
    whereas each Store gave the source its own RegID."""

    address: Address
    transport_idx: int
    topic_idx: int
    ctxinst: bytes = bytes(8)

    @property
    def key(self) -> tuple[Address, int, int]:
        return (self.address, self.transport_idx, self.topic_idx)


@dataclass(frozen=True, slots=True)
class ProxyStart:
    """Open a UM source for ``topic`` standing in for source ``reg_id``."""

    reg_id: int
    topic: str
    token: int


@dataclass(frozen=True, slots=True)
class ProxyStop:
    """Close the proxy of source ``reg_id``."""

    reg_id: int
    topic: str
    reason: DeletionReason


@dataclass(frozen=True, slots=True)
class ProxyNote:
    """A log line about the election of source ``reg_id`` (another Store's proxy followed, no
    quorum, re-election)."""

    reg_id: int
    topic: str
    text: str


ProxyAction = ProxyStart | ProxyStop | ProxyNote


@dataclass(slots=True)
class _Tracked:
    reg_id: int
    topic: str
    ident: SourceIdent | None = None
    state: ProxyState = ProxyState.IDLE
    deadline: float = 0.0
    interval_s: float = 0.0
    announce_s: float = 0.0
    gone: bool = False  # the source's activity timeout passed (cleared when it registers)
    sri: compose.Sri | None = None
    token: int = 0
    # the proxy's transport and topic index (known once the daemon opened the source)
    transport_idx: int | None = None
    topic_idx: int | None = None
    # the last other Store's proxy seen for this source: its address and when
    peer: Address | None = None
    peer_token: int = 0
    peer_seen: float = 0.0
    # algorithm 2: Store address -> when its last PSER for this source came
    participants: dict[Address, float] = field(default_factory=dict)
    reported: int = -1  # the participant count last noted as "no quorum"

    def move(self, to: ProxyState) -> None:
        if to not in _TRANSITIONS[self.state]:
            raise AssertionError(f"proxy {self.reg_id}: {self.state} -> {to}")
        self.state = to


def token_of(msg: lbmc.LBMCMessage) -> int | None:
    """The election token a proxy's SRI carries, or None (a real source's SRI)."""
    h = msg.find(lbmc.UmePsrcElectionToken)
    return None if h is None else int(h.token)


def encode_pser(
    source: SourceIdent,
    store: Address,
    store_ctxinst: bytes,
    token: int | None = None,
    store_index: int = 0,
) -> bytes:
    """[inferred] A Store's "I take part in the election of ``source``": one UME_PSER header
    (layout from Wireshark's dissector) in a control message to another Store's request port.
    With ``token``: "I run a proxy of ``source`` with this election token" (a
    UME_PSRC_ELECTION_TOKEN header follows; :func:`token_of` reads it)."""
    try:
        h = lbmc.UmePser(
            0, lbmc.ip4_from_str(source.address[0]), lbmc.ip4_from_str(store[0]),
            source.transport_idx, source.topic_idx, source.address[1], store[1],
            bytes(source.ctxinst[:8]).ljust(8, b"\0"), bytes(store_ctxinst[:8]).ljust(8, b"\0"),
        )  # fmt: skip
    except ValueError as exc:
        raise LocalProtocolError(f"PSER: {exc}") from None
    headers: list[lbmc.Header] = [h]
    if token is not None:
        headers.append(lbmc.UmePsrcElectionToken(0, store_index & 0xFF, token))
    return lbmc.encode(lbmc.LBMCMessage(lbmc.MSG_CONTROL, headers=headers))


def decode_pser(msg: lbmc.LBMCMessage) -> tuple[SourceIdent, Address] | None:
    """The source and the sending Store of a PSER message; None when ``msg`` holds none."""
    h = msg.find(lbmc.UmePser)
    if h is None:
        return None
    source = (lbmc.ip4_to_str(h.source_ip), int(h.source_port))
    store = (lbmc.ip4_to_str(h.store_ip), int(h.store_port))
    ident = SourceIdent(source, int(h.transport_idx), int(h.topic_idx), bytes(h.source_ctxinst))
    return ident, store


class ProxyElection:
    """One Store instance's proxy sources (module docstring)."""

    def __init__(
        self,
        *,
        enabled: bool,
        store_index: int,
        address: Address,
        rng: random.Random,
        quorum_required: bool,
        uniform: Callable[[float, float], float] | None = None,
        ctxinst: bytes = bytes(8),
    ) -> None:
        """``enabled``/``quorum_required``: the Store options ``allow-proxy-source`` and
        ``proxy-source-repo-quorum-required`` (election algorithm 2), as the core read them;
        ``ctxinst``: this Store's context instance, sent in its PSERs."""
        self.enabled = enabled
        self.quorum_required = quorum_required
        self.store_index = store_index
        self.address = address
        self.ctxinst = ctxinst
        self.rng = rng
        self.uniform = uniform if uniform is not None else rng.uniform
        self._by_reg: dict[int, _Tracked] = {}
        self._by_ident: dict[tuple[Address, int, int], int] = {}
        self._actions: list[ProxyAction] = []
        self._sris: list[tuple[int, bytes]] = []
        self._sends: list[tuple[Address, bytes]] = []
        self.refused = 0
        self.elections_lost = 0
        self.withdrawn = 0
        #: re-elections started because a followed proxy went silent
        self.reelections = 0
        #: algorithm 2: waits that ended without a quorum; PSERs sent, taken, not matched
        #: to a tracked source (or from this Store itself), refused (table full)
        self.no_quorum = 0
        self.psers_sent = 0
        self.psers_received = 0
        self.psers_unmatched = 0
        self.psers_refused = 0
        #: proxies claimed by PSER with a token (sent when this Store's proxy starts; taken)
        self.claims_sent = 0
        self.claims_received = 0

    # ------------------------------------------------------------------ inputs
    def registered(
        self, reg_id: int, topic: str, wanted: bool, now: float, ident: SourceIdent | None = None
    ) -> None:
        """``ident``: how the other Stores name the source in their PSERs (algorithm 2)."""
        t = self._by_reg.get(reg_id)
        if t is not None:
            self._stand_down(t, DeletionReason.PROXY_SRC_REREGISTERED)
            if not wanted:
                self._forget(t)
                return
            t.gone = False
            t.peer = None
            t.participants.clear()
            t.reported = -1
            self._set_ident(t, ident)
            return
        if not (self.enabled and wanted):
            return
        self._track(reg_id, topic, ident)

    def restored(self, reg_id: int, topic: str, ident: SourceIdent, sri: bytes, now: float) -> None:
        """A source that asked for a proxy, read back from its state file with its last SRI
        (``sri``: the bytes :meth:`sri_bytes` gave; b"" or undecodable: none kept -- the Store
        then learns it from another Store's proxy, or has nothing to serve)."""
        if not self.enabled:
            return
        t = self._track(reg_id, topic, ident)
        if t is not None and sri:
            try:
                comp = compose.decode(lbmc.decode(sri))
            except (RemoteProtocolError, ValueError):
                comp = None
            if isinstance(comp, compose.Sri):
                t.sri = comp

    def receive_sri(self, reg_id: int, sri: compose.Sri) -> bool:
        """The source's SRI; True when the Stores it names changed (the state file keeps it)."""
        t = self._by_reg.get(reg_id)
        if t is None:
            return False
        changed = t.sri is None or t.sri.stores != sri.stores
        t.sri = sri
        return changed

    def inactive(self, reg_id: int, interval_s: float, now: float) -> None:
        """``interval_s``: the source's topic's ``proxy-election-interval``."""
        t = self._by_reg.get(reg_id)
        if t is None or t.state is not ProxyState.IDLE:
            return
        t.gone = True
        t.interval_s = interval_s
        t.announce_s = max(interval_s * ANNOUNCE_FRACTION, MIN_ANNOUNCE_S)
        if t.sri is None:  # never heard an SRI: nothing to serve (until a peer proxy's)
            return
        if self._peer_alive(t, now):
            self._follow(t)
        else:
            self._start_wait(t, now)

    def deleted(self, reg_id: int, now: float) -> None:
        t = self._by_reg.get(reg_id)
        if t is not None:
            self._stand_down(t, DeletionReason.PROXY_SRC_STATE_LIFETIME_EXPIRED)
            self._forget(t)

    def peer_proxy(
        self,
        topic: str,
        token: int,
        peer: Address,
        now: float,
        sri: compose.Sri | None = None,
    ) -> None:
        """Another Store's proxy for ``topic`` (token ``token``, request address ``peer``;
        ``sri``: its SRI, whose entry with this Store's address names the source it stands in
        for here; without one, every source of ``topic`` is meant)."""
        if peer == self.address:
            return
        for t in self._peer_targets(topic, sri):
            self._peer_seen(t, token, peer, now, sri)

    def receive_pser(self, msg: lbmc.LBMCMessage, now: float) -> bool:
        """A PSER from another Store (algorithm 2, module docstring); False when ``msg`` holds
        none (a PSER's fields are all plain numbers: any value decodes)."""
        got = decode_pser(msg)
        if got is None:
            return False
        self.psers_received += 1
        ident, store = got
        reg_id = self._by_ident.get(ident.key)
        t = None if reg_id is None else self._by_reg.get(reg_id)
        if t is None or store == self.address:
            self.psers_unmatched += 1
            return True
        token = token_of(msg)
        if token is not None:  # a claim: that Store runs a proxy of the source
            self.claims_received += 1
            self._peer_seen(t, token, store, now, None)
            return True
        if store not in t.participants and len(t.participants) >= MAX_PARTICIPANTS:
            self.psers_refused += 1
            return True
        t.participants[store] = now
        return True

    def started(self, reg_id: int, transport_idx: int, topic_idx: int, now: float) -> None:
        """The daemon's UM source of proxy ``reg_id`` is open: its SRI goes out now (see
        :meth:`take_sris`) and again every ``ANNOUNCE_FRACTION x proxy-election-interval``."""
        t = self._by_reg.get(reg_id)
        if t is not None and t.state is ProxyState.RUNNING:
            t.transport_idx, t.topic_idx = transport_idx, topic_idx
            t.deadline = now

    def sri_request(self, req: compose.SriRequest) -> list[tuple[int, bytes]]:
        """``(source RegID, SRI bytes)`` for each running proxy at those indices."""
        return [
            (t.reg_id, self.sri(t.reg_id))
            for t in self._by_reg.values()
            if t.state is ProxyState.RUNNING
            and (t.transport_idx, t.topic_idx) == (req.transport_idx, req.topic_idx)
        ]

    # ------------------------------------------------------------------ outputs
    def sri(self, reg_id: int) -> bytes:
        """The SRI the proxy of ``reg_id`` sends on its transport: the source's last SRI
        (Stores, RegIDs, version, range) under the proxy's topic index, with the election
        token header."""
        t = self._by_reg[reg_id]
        assert t.sri is not None
        sri = replace(t.sri, topic_idx=t.topic_idx)
        msg = lbmc.decode(sri.encode())
        msg.headers.append(lbmc.UmePsrcElectionToken(0, self.store_index & 0xFF, t.token))
        return lbmc.encode(msg)

    def sri_bytes(self, reg_id: int) -> bytes:
        """The source's last SRI as kept in its state file (b"": not tracked, or none yet)."""
        t = self._by_reg.get(reg_id)
        return b"" if t is None or t.sri is None else t.sri.encode()

    def needs_sri(self, reg_id: int) -> bool:
        """The source is tracked but no SRI of it was seen yet."""
        t = self._by_reg.get(reg_id)
        return t is not None and t.sri is None

    def tracked(self, reg_id: int) -> bool:
        return reg_id in self._by_reg

    def state(self, reg_id: int) -> ProxyState | None:
        t = self._by_reg.get(reg_id)
        return None if t is None else t.state

    def running(self) -> list[int]:
        return [t.reg_id for t in self._by_reg.values() if t.state is ProxyState.RUNNING]

    def participants(self, reg_id: int, now: float) -> tuple[int, int]:
        """Algorithm 2: (Stores taking part now, this one included; the quorum needed)."""
        t = self._by_reg[reg_id]
        return self._participation(t, now)

    def take_sris(self) -> list[tuple[int, bytes]]:
        """``(source RegID, SRI bytes)`` due on the proxies' transports (announcements)."""
        out, self._sris = self._sris, []
        return out

    def take_sends(self) -> list[tuple[Address, bytes]]:
        """PSERs to other Stores' request ports (algorithm 2)."""
        out, self._sends = self._sends, []
        return out

    def take_actions(self) -> list[ProxyAction]:
        out, self._actions = self._actions, []
        return out

    def next_timer(self) -> float | None:
        """Election waits, announcements of started proxies, silence of followed ones."""
        due = [
            t.deadline
            for t in self._by_reg.values()
            if t.state is ProxyState.WAITING
            or t.state is ProxyState.FOLLOWING
            or (t.state is ProxyState.RUNNING and t.topic_idx is not None)
        ]
        return min(due) if due else None

    def handle_timer(self, now: float) -> None:
        for t in self._by_reg.values():
            if t.deadline > now:
                continue
            if t.state is ProxyState.WAITING:
                self._wait_ended(t, now)
            elif t.state is ProxyState.RUNNING and t.topic_idx is not None:
                self._sris.append((t.reg_id, self.sri(t.reg_id)))
                t.deadline = now + t.announce_s
            elif t.state is ProxyState.FOLLOWING and t.sri is None:
                t.move(ProxyState.IDLE)  # followed on a claim alone: nothing to serve here
            elif t.state is ProxyState.FOLLOWING:
                self.reelections += 1
                silent = now - t.peer_seen
                peer = t.peer
                if peer is not None:
                    t.participants.pop(peer, None)
                t.peer = None
                self._actions.append(
                    ProxyNote(
                        t.reg_id, t.topic,
                        f"proxy source for topic {t.topic!r} (source RegID {t.reg_id}) at "
                        f"Store {_fmt(peer)} silent for {silent:.1f} s: electing again",
                    )
                )  # fmt: skip
                self._start_wait(t, now)

    # ------------------------------------------------------------------ internals
    def _peer_seen(
        self, t: _Tracked, token: int, peer: Address, now: float, sri: compose.Sri | None
    ) -> None:
        """Another Store's proxy of ``t``'s source (its SRI, or its claim by PSER)."""
        # the proxy followed: the one that survives collisions (highest token, then
        # address); any proxy's announcement shows that one runs
        switched = False
        if t.peer is None or t.peer == peer or (token, peer) > (t.peer_token, t.peer):
            switched = t.peer is not None and t.peer != peer
            t.peer, t.peer_token = peer, token
        t.peer_seen = now
        t.participants.pop(peer, None)  # a Store running a proxy is not electing
        if t.sri is None and sri is not None:
            t.sri = replace(sri, topic_idx=None)  # learnt: what to serve if it goes
        if t.state is ProxyState.WAITING:
            self.elections_lost += 1
            self._follow(t)
        elif t.state is ProxyState.RUNNING:
            if (t.token, peer) < (token, self.address):
                self.withdrawn += 1
                self._actions.append(ProxyStop(t.reg_id, t.topic, DeletionReason.DELETED))
                self._follow(t)
        elif t.state is ProxyState.FOLLOWING:
            t.deadline = now + silence_bound(t.interval_s)
            if switched:
                self._note_following(t)
        elif t.gone:  # IDLE: its SRI was unknown here until now
            self._follow(t)

    def _track(self, reg_id: int, topic: str, ident: SourceIdent | None) -> _Tracked | None:
        if len(self._by_reg) >= MAX_TRACKED:
            self.refused += 1
            return None
        t = _Tracked(reg_id, topic)
        self._by_reg[reg_id] = t
        self._set_ident(t, ident)
        return t

    def _set_ident(self, t: _Tracked, ident: SourceIdent | None) -> None:
        if ident is None or ident == t.ident:
            return
        if t.ident is not None and self._by_ident.get(t.ident.key) == t.reg_id:
            del self._by_ident[t.ident.key]
        t.ident = ident
        self._by_ident[ident.key] = t.reg_id

    def _forget(self, t: _Tracked) -> None:
        self._by_reg.pop(t.reg_id, None)
        if t.ident is not None and self._by_ident.get(t.ident.key) == t.reg_id:
            del self._by_ident[t.ident.key]

    def _peer_targets(self, topic: str, sri: compose.Sri | None) -> list[_Tracked]:
        if sri is not None:
            for s in sri.stores:
                if s.address == self.address:
                    t = self._by_reg.get(s.src_reg_id)
                    return [t] if t is not None and t.topic == topic else []
        return [t for t in self._by_reg.values() if t.topic == topic]

    def _peer_alive(self, t: _Tracked, now: float) -> bool:
        return t.peer is not None and now - t.peer_seen < silence_bound(t.interval_s)

    def _follow(self, t: _Tracked) -> None:
        t.move(ProxyState.FOLLOWING)
        t.deadline = t.peer_seen + silence_bound(t.interval_s)
        self._note_following(t)

    def _note_following(self, t: _Tracked) -> None:
        self._actions.append(
            ProxyNote(
                t.reg_id, t.topic,
                f"proxy source for topic {t.topic!r} (source RegID {t.reg_id}) runs at Store "
                f"{_fmt(t.peer)}: following it",
            )
        )  # fmt: skip

    def _start_wait(self, t: _Tracked, now: float) -> None:
        if t.state is not ProxyState.WAITING:
            t.move(ProxyState.WAITING)
        t.deadline = now + self.uniform(WAIT_LOW, WAIT_HIGH) * t.interval_s
        if self.quorum_required and t.ident is not None and t.sri is not None:
            data = encode_pser(t.ident, self.address, self.ctxinst)
            for s in t.sri.stores:
                if s.address != self.address:
                    self._sends.append((s.address, data))
                    self.psers_sent += 1

    def _participation(self, t: _Tracked, now: float) -> tuple[int, int]:
        if t.sri is None:
            return 1, 1
        names = {s.address for s in t.sri.stores}
        names.discard(self.address)
        ttl = PARTICIPATION_WAITS * WAIT_HIGH * t.interval_s
        have = 1 + sum(1 for a, at in t.participants.items() if a in names and now - at <= ttl)
        return have, len(t.sri.stores) // 2 + 1

    def _wait_ended(self, t: _Tracked, now: float) -> None:
        if self.quorum_required:
            have, need = self._participation(t, now)
            if have < need:
                self.no_quorum += 1
                if have != t.reported:
                    t.reported = have
                    n = 0 if t.sri is None else len(t.sri.stores)
                    self._actions.append(
                        ProxyNote(
                            t.reg_id, t.topic,
                            f"proxy source for topic {t.topic!r} (source RegID {t.reg_id}): "
                            f"{have} of {n} Stores take part, {need} needed "
                            "(proxy-source-repo-quorum-required): no quorum, no proxy",
                        )
                    )  # fmt: skip
                self._start_wait(t, now)
                return
        t.move(ProxyState.RUNNING)
        t.token = self.rng.getrandbits(32)
        t.transport_idx = t.topic_idx = None
        t.reported = -1
        self._actions.append(ProxyStart(t.reg_id, t.topic, t.token))
        if t.ident is not None and t.sri is not None:
            # [inferred] the claim goes to the other Stores at once (UM: a PREG with the
            # token): a Store still waiting stands down without waiting for the proxy's
            # transport and SRI, which narrows the window for collisions to the network's
            # latency; the SRI announcements then keep it followed
            data = encode_pser(t.ident, self.address, self.ctxinst, t.token, self.store_index)
            for s in t.sri.stores:
                if s.address != self.address:
                    self._sends.append((s.address, data))
                    self.claims_sent += 1

    def _stand_down(self, t: _Tracked, reason: DeletionReason) -> None:
        if t.state is ProxyState.RUNNING:
            self._actions.append(ProxyStop(t.reg_id, t.topic, reason))
        if t.state is not ProxyState.IDLE:
            t.move(ProxyState.IDLE)


def _fmt(addr: Address | None) -> str:
    return "?" if addr is None else f"{addr[0]}:{addr[1]}"
