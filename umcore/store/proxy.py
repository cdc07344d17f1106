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
* :meth:`ProxyElection.receive_sri` -- the last SRI the source sent on its transport (a control
  frame of the Store's raw receiver): what a proxy serves, with the source's RegIDs.
* :meth:`ProxyElection.inactive` -- the source's activity timeout: the Store waits a random
  ``[0.5, 1.5] x proxy-election-interval`` (a ``<topic>`` option; UM's rule) and, if nothing cancelled the wait,
  elects itself: :class:`ProxyStart` is queued for the daemon, which opens the UM source.
* :meth:`ProxyElection.deleted` -- the source's state is gone: the proxy goes too (reason
  ``PROXY_SRC_STATE_LIFETIME_EXPIRED``).
* :meth:`ProxyElection.peer_proxy` -- another Store's proxy for the topic was seen (its SRI
  carries a UME_PSRC_ELECTION_TOKEN header).  A Store still waiting stands down; a Store that
  runs a proxy keeps it only if its own token is higher (ties: the lower store address keeps
  it), else withdraws (:class:`ProxyStop`, reason ``DELETED``).  [inferred] UM exchanges the
  token in a PREG with the P flag and an LBMR "proxy source election" record; ours rides on the
  proxy's SRI, which every other Store receives anyway (they stay joined to the topic).
* :meth:`ProxyElection.sri_request` -- an SRI_REQ that reached the Store's request port for a
  proxy's transport/topic index: the SRI bytes to send on the proxy's transport.

The daemon tells :meth:`started` the transport and topic index its UM source got, and sends
on that transport the SRIs :meth:`take_sris` (announcements: at start, then every half
``proxy-election-interval`` [inferred]) and :meth:`sri_request` return.  Election
algorithm 2 (``proxy-source-repo-quorum-required``) is not implemented: every Store with
``allow-proxy-source`` participates (algorithm 1, UM's default).
"""

from __future__ import annotations

import enum
import random
from collections.abc import Callable
from dataclasses import dataclass, replace

from umcore.store import compose
from umcore.store.events import DeletionReason
from umcore.wire import lbmc

__all__ = ["ProxyElection", "ProxyStart", "ProxyState", "ProxyStop", "token_of"]

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
# Sources this Store tracks for proxying; beyond this, registrations asking for a proxy are not
# tracked (counted in ``refused``): the table must stay bounded against a registration flood.
MAX_TRACKED = 65536


class ProxyState(enum.Enum):
    IDLE = "idle"  # the source is alive (or never went inactive)
    WAITING = "waiting"  # election wait running
    RUNNING = "running"  # this Store runs the proxy


# state -> states it may move to (the one transition table)
_TRANSITIONS: dict[ProxyState, frozenset[ProxyState]] = {
    ProxyState.IDLE: frozenset({ProxyState.WAITING}),
    ProxyState.WAITING: frozenset({ProxyState.IDLE, ProxyState.RUNNING}),
    ProxyState.RUNNING: frozenset({ProxyState.IDLE}),
}


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


ProxyAction = ProxyStart | ProxyStop


@dataclass(slots=True)
class _Tracked:
    reg_id: int
    topic: str
    state: ProxyState = ProxyState.IDLE
    deadline: float = 0.0
    announce_s: float = 0.0
    sri: compose.Sri | None = None
    token: int = 0
    # the proxy's transport and topic index (known once the daemon opened the source)
    transport_idx: int | None = None
    topic_idx: int | None = None

    def move(self, to: ProxyState) -> None:
        if to not in _TRANSITIONS[self.state]:
            raise AssertionError(f"proxy {self.reg_id}: {self.state} -> {to}")
        self.state = to


def token_of(msg: lbmc.LBMCMessage) -> int | None:
    """The election token a proxy's SRI carries, or None (a real source's SRI)."""
    h = msg.find(lbmc.UmePsrcElectionToken)
    return None if h is None else int(h.token)


class ProxyElection:
    """One Store instance's proxy sources (module docstring)."""

    def __init__(
        self,
        *,
        enabled: bool,
        store_index: int,
        address: Address,
        rng: random.Random,
        uniform: Callable[[float, float], float] | None = None,
    ) -> None:
        self.enabled = enabled
        self.store_index = store_index
        self.address = address
        self.rng = rng
        self.uniform = uniform if uniform is not None else rng.uniform
        self._by_reg: dict[int, _Tracked] = {}
        self._actions: list[ProxyAction] = []
        self._sris: list[tuple[int, bytes]] = []
        self.refused = 0
        self.elections_lost = 0
        self.withdrawn = 0

    # ------------------------------------------------------------------ inputs
    def registered(self, reg_id: int, topic: str, wanted: bool, now: float) -> None:
        t = self._by_reg.get(reg_id)
        if t is not None:
            self._stand_down(t, DeletionReason.PROXY_SRC_REREGISTERED)
            if not wanted:
                del self._by_reg[reg_id]
            return
        if not (self.enabled and wanted):
            return
        if len(self._by_reg) >= MAX_TRACKED:
            self.refused += 1
            return
        self._by_reg[reg_id] = _Tracked(reg_id, topic)

    def receive_sri(self, reg_id: int, sri: compose.Sri) -> None:
        t = self._by_reg.get(reg_id)
        if t is not None:
            t.sri = sri

    def inactive(self, reg_id: int, interval_s: float, now: float) -> None:
        """``interval_s``: the source's topic's ``proxy-election-interval``."""
        t = self._by_reg.get(reg_id)
        if t is None or t.state is not ProxyState.IDLE or t.sri is None:
            return
        t.move(ProxyState.WAITING)
        t.deadline = now + self.uniform(WAIT_LOW, WAIT_HIGH) * interval_s
        t.announce_s = max(interval_s * ANNOUNCE_FRACTION, MIN_ANNOUNCE_S)

    def deleted(self, reg_id: int, now: float) -> None:
        t = self._by_reg.pop(reg_id, None)
        if t is not None:
            self._stand_down(t, DeletionReason.PROXY_SRC_STATE_LIFETIME_EXPIRED)

    def peer_proxy(self, topic: str, token: int, peer: Address, now: float) -> None:
        """Another Store's proxy for ``topic`` (token ``token``, request address ``peer``)."""
        if peer == self.address:
            return
        for t in self._by_reg.values():
            if t.topic != topic:
                continue
            if t.state is ProxyState.WAITING:
                self.elections_lost += 1
                t.move(ProxyState.IDLE)
            elif t.state is ProxyState.RUNNING and (t.token, peer) < (token, self.address):
                self.withdrawn += 1
                self._stand_down(t, DeletionReason.DELETED)

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

    def state(self, reg_id: int) -> ProxyState | None:
        t = self._by_reg.get(reg_id)
        return None if t is None else t.state

    def running(self) -> list[int]:
        return [t.reg_id for t in self._by_reg.values() if t.state is ProxyState.RUNNING]

    def take_sris(self) -> list[tuple[int, bytes]]:
        """``(source RegID, SRI bytes)`` due on the proxies' transports (announcements)."""
        out, self._sris = self._sris, []
        return out

    def take_actions(self) -> list[ProxyAction]:
        out, self._actions = self._actions, []
        return out

    def next_timer(self) -> float | None:
        """Election waits, and announcements of started proxies."""
        due = [
            t.deadline
            for t in self._by_reg.values()
            if t.state is ProxyState.WAITING
            or (t.state is ProxyState.RUNNING and t.topic_idx is not None)
        ]
        return min(due) if due else None

    def handle_timer(self, now: float) -> None:
        for t in self._by_reg.values():
            if t.deadline > now:
                continue
            if t.state is ProxyState.WAITING:
                t.move(ProxyState.RUNNING)
                t.token = self.rng.getrandbits(32)
                t.transport_idx = t.topic_idx = None
                self._actions.append(ProxyStart(t.reg_id, t.topic, t.token))
            elif t.state is ProxyState.RUNNING and t.topic_idx is not None:
                self._sris.append((t.reg_id, self.sri(t.reg_id)))
                t.deadline = now + t.announce_s

    def _stand_down(self, t: _Tracked, reason: DeletionReason) -> None:
        if t.state is ProxyState.RUNNING:
            self._actions.append(ProxyStop(t.reg_id, t.topic, reason))
        if t.state is not ProxyState.IDLE:
            t.move(ProxyState.IDLE)
