"""The SRS's deadlines for state: source-leave back-off and state lifetimes.

Theory of operation
-------------------
Two kinds of deadline, on one heap (earliest first):

- **SER back-off.**  An SDR (source delete) removes a source at once; its SER (source end
  record: the SIR with cost -1) goes out ``source-leave-backoff`` later, unless the owner
  re-advertises the source inside the back-off (the SER is cancelled: flapping is damped).
  :meth:`Lifetimes.schedule_ser` records the pending SER, :meth:`Lifetimes.cancel_ser` cancels
  it.
- **State lifetimes.**  When a client's connection is lost, :meth:`Lifetimes.client_lost`
  marks its records inactive and schedules one expiry per kind (sources after
  ``source-state-lifetime``, interest after ``interest-state-lifetime``, DRO records after
  ``route-state-lifetime``, Store names after ``context-name-state-lifetime``; 0 = never).  An
  expiry is stale (ignored by the caller) when the client disconnected again since.

:meth:`Lifetimes.take_due` returns what fell due; deleting and announcing is the relay's job
(:mod:`umcore.srs.relay`).  Nothing here sends.
"""

from __future__ import annotations

import heapq
from dataclasses import dataclass

from umcore.events import CoreEvent
from umcore.srs.common import ServerConfig, SourceKey
from umcore.srs.registry import Client, Source

__all__ = ["EXPIRY_KINDS", "Due", "Expiry", "Lifetimes", "SerDue"]

# The kinds of record with their own state lifetime, in expiry order.
EXPIRY_KINDS = ("sources", "interest", "routes", "names")


@dataclass(frozen=True, slots=True)
class Due(CoreEvent):
    """Base of what :meth:`Lifetimes.take_due` returns."""


@dataclass(frozen=True, slots=True)
class SerDue(Due):
    """The back-off of a deleted source ran out: its SER goes out now."""

    source: Source


@dataclass(frozen=True, slots=True)
class Expiry(Due):
    """A state lifetime counted from the disconnect at ``lost_at`` ran out."""

    client: Client
    kind: str
    lost_at: float


class Lifetimes:
    """The heap of deadlines and the pending SERs; see the module docstring."""

    __slots__ = ("_heap", "_pending_ser", "_seq", "config")

    def __init__(self, config: ServerConfig) -> None:
        self.config = config
        self._heap: list[tuple[float, int, Due | SourceKey]] = []
        self._seq = 0
        self._pending_ser: dict[SourceKey, tuple[float, Source]] = {}

    def _push(self, due: float, item: Due | SourceKey) -> None:
        self._seq += 1
        heapq.heappush(self._heap, (due, self._seq, item))

    def next_deadline(self) -> float | None:
        return self._heap[0][0] if self._heap else None

    # -- SER back-off

    def schedule_ser(self, src: Source, now: float) -> bool:
        """Hold the SER of a deleted source for the back-off; False: no back-off, send now."""
        backoff = self.config.source_leave_backoff_ms / 1000.0
        if backoff <= 0:
            return False
        due = now + backoff
        self._pending_ser[src.key] = (due, src)
        self._push(due, src.key)
        return True

    def pending_ser(self, key: SourceKey) -> Source | None:
        """The deleted source whose SER is pending for ``key``, if any."""
        pending = self._pending_ser.get(key)
        return pending[1] if pending is not None else None

    def cancel_ser(self, key: SourceKey) -> Source | None:
        """Cancel the pending SER for ``key``; returns its source (None: nothing pending)."""
        pending = self._pending_ser.pop(key, None)
        return pending[1] if pending is not None else None

    # -- state lifetimes

    def client_lost(self, client: Client, now: float) -> bool:
        """``client``'s connection is gone: its records become inactive and expire after
        their lifetimes.  True when some of its sources were inactive already (never
        re-confirmed since an earlier disconnect)."""
        client.inactive_since = now
        client.lost_at = now
        had_inactive = False
        for src in client.sources.values():
            if not src.active:
                had_inactive = True
            src.active = False
        for table in (client.interest, client.patterns):
            for k in table:
                table[k] = False
        for rk, (rt, _f) in list(client.routes.items()):
            client.routes[rk] = (rt, False)
        for dk, (dr, _f) in list(client.dr_records.items()):
            client.dr_records[dk] = (dr, False)
        for nk, (cn, _f) in list(client.names.items()):
            client.names[nk] = (cn, False)
        cfg = self.config
        lifetimes = (
            cfg.source_state_lifetime,
            cfg.interest_state_lifetime,
            cfg.route_state_lifetime,
            cfg.context_name_state_lifetime,
        )
        for kind, lifetime in zip(EXPIRY_KINDS, lifetimes, strict=True):
            if lifetime > 0:
                self._push(now + lifetime, Expiry(client, kind, now))
        return had_inactive

    def take_due(self, now: float) -> list[SerDue | Expiry]:
        """What fell due by ``now``, in deadline order."""
        heap = self._heap
        out: list[SerDue | Expiry] = []
        while heap and heap[0][0] <= now:
            _due, _seq, item = heapq.heappop(heap)
            if isinstance(item, Expiry):
                out.append(item)
                continue
            assert isinstance(item, tuple)
            pending = self._pending_ser.get(item)
            if pending is not None and pending[0] <= now:
                del self._pending_ser[item]
                out.append(SerDue(pending[1]))
        return out
