"""The receiver's recovery core for one topic source: late join and OTR on top of a transport.

Theory of operation
-------------------
A :class:`TopicRecovery` sits between a transport's delivery controller and the application.
It receives *live* messages (:meth:`~TopicRecovery.on_live`), the transport's *unrecoverable
loss* reports (:meth:`~TopicRecovery.on_transport_loss`), *retransmissions* from the source's
retention buffer (:meth:`~TopicRecovery.on_retransmission`) and the source's late-join
information (:meth:`~TopicRecovery.on_lj_info`).  It returns deliveries in sequence-number order
(``ordered_delivery`` 1) and queues the requests to send to the source's request port
(:meth:`~TopicRecovery.take_requests`).  Time is an argument; :meth:`next_timer` and
:meth:`handle_timer` drive the retries.

State: ``next`` is the next sqn owed to the application; ``holes`` are sqns known missing (each
with its request schedule), ``cache`` the messages that arrived ahead of a hole.  Gaps are
*declared*, never guessed from a sqn jump, because a reassembled UM-fragmented message legitimately
skips the sqns of its other fragments:

- **late join** declares the range [start, end] from the LJ_INFO: ``end`` is just before the
  first live message (or the source's newest when nothing live arrived yet), ``start`` the oldest
  retained one, or ``end - retransmit_request_maximum + 1``.  The range is materialised into holes
  lazily, oldest first, ``retransmit_request_outstanding_maximum`` at a time (the seed's "request
  0-9; on receiving 0 request 10").  Until the LJ_INFO comes live messages are cached; if it never
  comes (``late_join_info_request_maximum`` requests) they are delivered as they are.
- **the source's tail** (:meth:`~TopicRecovery.on_tail`): the transport session's evidence that
  the source sent up to some sqn before anything the session delivers live -- a TSNI (Topic
  Sequence Number Info, the idle source's "last sqn sent") on a session that has delivered
  nothing yet, or the sqn before the session's first delivered message.  Messages sent after the
  late-join range was fixed (the LJ_INFO's, or the Stores' registration answer: their "high")
  but before the session joined reach the receiver by no other path, and the transport
  suppresses leading loss, so late join declares them: the range is extended to that sqn (a
  finished late join recovers again), requested from the same place (the source's retention
  buffer, or the Stores: persistence-store.md 1.7, the receiver recovers up to the source's
  newest sqn it knows of).  Before the range is known the tail is kept and widens it when it
  comes.  Without late join (OTR only) leading messages are not recovered (seed: OTR recovers
  loss *after* the receiver started).
- **OTR** declares the sqns of each loss the transport reports (see :mod:`umcore.features.otr`).
  A loss wider than the burst limit, or any loss with OTR off, is passed on as an event, in order.

A hole is filled by its retransmission (flag RETRANSMIT 0x8 for late join, OTR 0x2000) or, after
its timeout, becomes an UNRECOVERABLE_LOSS event.  Live messages behind holes are cached while
the cache is under its bound (``otr_message_caching_threshold`` and
``retransmit_message_caching_proximity``); past it they are dropped and become holes themselves,
to be requested like the rest.  A live sqn below ``next`` is a duplicate (the seam between the
retransmitted range and the live stream): dropped and counted.

Sequence numbers are 32-bit and wrap; inside, they are unwrapped to integers relative to the
first one seen.
"""

from __future__ import annotations

from collections.abc import Callable
from enum import Enum
from typing import Any

from umcore.errors import LocalProtocolError
from umcore.features.latejoin import LateJoinConfig, encode_lji_req, encode_rxreqs
from umcore.features.otr import OtrConfig, next_interval

__all__ = [
    "DELIVER_BURST",
    "DELIVER_DATA",
    "DELIVER_LOSS",
    "FLAG_OTR",
    "FLAG_RETRANSMIT",
    "LATE_JOIN_TRANSITIONS",
    "MAX_CACHE",
    "MAX_HOLES",
    "Delivery",
    "LateJoin",
    "LateJoinInput",
    "TopicRecovery",
]

DELIVER_DATA = 0  # LBM_MSG_DATA
DELIVER_LOSS = 4  # LBM_MSG_UNRECOVERABLE_LOSS
DELIVER_BURST = 5  # LBM_MSG_UNRECOVERABLE_LOSS_BURST
FLAG_RETRANSMIT = 0x8  # LBM_MSG_FLAG_RETRANSMIT: delivered through late join
FLAG_OTR = 0x2000  # LBM_MSG_FLAG_OTR: delivered through OTR
# Hard bounds whatever the options say (a receiver must not grow without bound): messages cached
# ahead of holes, and holes tracked at once.  Past MAX_HOLES the oldest holes are declared lost.
MAX_CACHE = 1_000_000
MAX_HOLES = 100_000

# (type, sqn, payload, flags, meta, count)
Delivery = tuple[int, int, bytes, int, Any, int]

_LJ, _OTR = 0, 1


class LateJoin(Enum):
    """Where a topic's late join is."""

    NONE = "none"  # not started (or not wanted)
    WAIT_INFO = "wait-info"  # LJI_REQ sent, waiting for the source's retained range (LJ_INFO)
    RECOVERING = "recovering"  # requesting and delivering the retained messages
    DONE = "done"  # finished, abandoned, or nothing to recover: live delivery only


# Members the data path compares with, as module constants: an Enum member read through its
# class costs ~130 ns in CPython 3.11, a global ~20.
_WAIT_INFO = LateJoin.WAIT_INFO
_RECOVERING = LateJoin.RECOVERING


class LateJoinInput(Enum):
    """What moves late join on."""

    START = "start"  # the receiver joined a source that offers late join
    INFO = "info"  # LJ_INFO with something to recover
    NOTHING = "nothing"  # LJ_INFO with nothing to recover
    GIVE_UP = "give-up"  # no LJ_INFO after the maximum requests, or the live cache is full
    RECOVERED = "recovered"  # every retained message asked for is delivered or given up
    TAIL = "tail"  # the source sent more than the range covers before the session joined


#: The late-join machine: (state, input) -> next state; anything else is a LocalProtocolError.
LATE_JOIN_TRANSITIONS: dict[tuple[LateJoin, LateJoinInput], LateJoin] = {
    (LateJoin.NONE, LateJoinInput.START): LateJoin.WAIT_INFO,
    (LateJoin.WAIT_INFO, LateJoinInput.INFO): LateJoin.RECOVERING,
    (LateJoin.WAIT_INFO, LateJoinInput.NOTHING): LateJoin.DONE,
    (LateJoin.WAIT_INFO, LateJoinInput.GIVE_UP): LateJoin.DONE,
    (LateJoin.RECOVERING, LateJoinInput.RECOVERED): LateJoin.DONE,
    (LateJoin.DONE, LateJoinInput.TAIL): LateJoin.RECOVERING,
}


class _Hole:
    __slots__ = ("deadline", "interval", "kind", "next_at", "requested")

    def __init__(self, kind: int, next_at: float, interval: float, deadline: float | None) -> None:
        self.kind = kind
        self.next_at = next_at  # time of the (next) request
        self.interval = interval
        self.deadline = deadline  # give up then (None: set at the first request)
        self.requested = False


class RecoveryStats:
    __slots__ = (
        "duplicates",
        "filled_lj",
        "filled_otr",
        "gave_up",
        "live_dropped",
        "lji_sent",
        "requests_sent",
        "tail_extended",
    )

    def __init__(self) -> None:
        self.lji_sent = 0
        self.requests_sent = 0
        self.filled_lj = 0
        self.filled_otr = 0
        self.gave_up = 0
        self.duplicates = 0
        self.live_dropped = 0  # cached-over-bound live messages turned into holes
        self.tail_extended = 0  # sqns a source's tail (on_tail) added to the late-join range


class TopicRecovery:
    """Late join + OTR recovery of one topic source (see the module docstring)."""

    def __init__(
        self,
        *,
        transport_idx: int,
        topic_idx: int,
        request_idx: int,
        reply_to: tuple[str, int],
        late_join: LateJoinConfig | None = None,
        otr: OtrConfig | None = None,
        max_burst_loss: int = 1024,
        request_router: Callable[[list[int], bool], object] | None = None,
    ) -> None:
        #: Persistent receivers: retransmission requests go to the Stores, not the source.
        #: Called with the sqns due and whether they are retries (which the router sends to
        #: another Store than last time); None = UME_RXREQs to the source (take_requests).
        self.request_router = request_router
        self.transport_idx = transport_idx
        self.topic_idx = topic_idx
        self.request_idx = request_idx
        self.reply_to = reply_to
        self.lj = late_join
        self.otr = otr
        self.max_burst_loss = max_burst_loss
        self.stats = RecoveryStats()
        self.next: int | None = None
        self._ref: int | None = None  # unwrapping reference (an unwrapped sqn)
        self.holes: dict[int, _Hole] = {}
        self.cache: dict[int, tuple[int, bytes, int, Any, int]] = {}
        self._out: list[bytes] = []
        self.lj_state = LateJoin.NONE
        self._lji_count = 0
        self._lji_next: float | None = None
        self._lj_from = 0  # next LJ sqn to materialise as a hole
        self._lj_end = -1  # last LJ sqn
        self._newest_live: int | None = None
        self._newest_rx: int | None = None
        self._last_pump = float("-inf")
        #: The newest sqn the source's tail (on_tail) named while the range was unknown.
        self._tail: int | None = None
        #: The late-join range came (LJ_INFO or the Stores'): a tail past it is recovered.
        self._ranged = False
        #: The sqn after an empty late-join range, while nothing was delivered: where a tail
        #: would be recovered from (``next`` stays None: a live message still in flight from
        #: before the range is delivered as it comes).
        self._floor: int | None = None

    # ------------------------------------------------------------------ helpers
    def _unwrap(self, sqn: int) -> int:
        ref = self._ref
        if ref is None:
            self._ref = sqn
            return sqn
        diff = (sqn - ref) & 0xFFFFFFFF
        if diff >= 0x80000000:
            diff -= 0x1_0000_0000
        u = ref + diff
        if u > ref:
            self._ref = u
        return u

    @property
    def recovering(self) -> bool:
        return bool(self.holes) or self.lj_state in (LateJoin.WAIT_INFO, LateJoin.RECOVERING)

    @property
    def late_join_active(self) -> bool:
        return self.lj_state in (LateJoin.WAIT_INFO, LateJoin.RECOVERING)

    @property
    def requests_pending(self) -> bool:
        """Requests are queued for :meth:`take_requests`."""
        return bool(self._out)

    def take_requests(self) -> list[bytes]:
        """Messages for the source's request port."""
        out, self._out = self._out, []
        return out

    # ------------------------------------------------------------------ late join
    def _transition(self, event: LateJoinInput) -> None:
        nxt = LATE_JOIN_TRANSITIONS.get((self.lj_state, event))
        if nxt is None:
            raise LocalProtocolError(f"late join: {event.value} in state {self.lj_state.value}")
        self.lj_state = nxt

    def start_late_join(self, now: float) -> None:
        """The receiver joined a source that offers late join: ask for its retained range."""
        if self.lj is None or self.lj_state is not LateJoin.NONE:
            return
        self._transition(LateJoinInput.START)
        self._send_lji(now)

    def await_range(self) -> None:
        """A persistent receiver: late join's range will come from the Stores' registration
        (:meth:`on_lj_info` with it), not from an LJI request; live messages are cached
        meanwhile."""
        if self.lj is None or self.lj_state is not LateJoin.NONE:
            return
        self._transition(LateJoinInput.START)
        self._lji_next = None

    def abandon(self) -> list[Delivery]:
        """Stop waiting for a late-join range (a persistent receiver's registration failed):
        deliver what was cached, in order."""
        if self.lj_state is not LateJoin.WAIT_INFO:
            return []
        self._transition(LateJoinInput.GIVE_UP)
        self._lji_next = None
        return self._drain_start()

    def _send_lji(self, now: float) -> None:
        assert self.lj is not None
        self._lji_count += 1
        self.stats.lji_sent += 1
        self._out.append(
            encode_lji_req(
                self.request_idx,
                self.transport_idx,
                self.topic_idx,
                self.reply_to,
                rx_req_max=self.lj.request_maximum,
                rx_req_outstanding_max=self.lj.request_outstanding_maximum,
            )
        )
        self._lji_next = now + self.lj.info_request_interval

    def on_lj_info(self, low: int, high: int, now: float) -> list[Delivery]:
        if self.lj_state is not LateJoin.WAIT_INFO or self.lj is None:
            return []
        self._lji_next = None
        if self.cache:
            first_live = min(self.cache)
            end = first_live - 1
            u_high = first_live + (((high - first_live) + 0x80000000) & 0xFFFFFFFF) - 0x80000000
            u_low = first_live + (((low - first_live) + 0x80000000) & 0xFFFFFFFF) - 0x80000000
        else:
            u_high = self._unwrap(high)
            u_low = u_high - ((high - low) & 0xFFFFFFFF)
            if ((high - low + 1) & 0xFFFFFFFF) == 0 or u_low > u_high:
                u_low = u_high + 1  # empty
            end = u_high
            tail = self._tail
            if tail is not None and tail > end:
                self.stats.tail_extended += tail - end
                end = tail  # the source sent more before the session joined (on_tail)
        self._tail = None
        self._ranged = True
        start = u_low
        if self.lj.request_maximum > 0:
            start = max(start, min(end, u_high) - self.lj.request_maximum + 1)
        if end < start:
            self._transition(LateJoinInput.NOTHING)
            if not self.cache and self.next is None:
                self._floor = start
            return self._drain_start()
        self._transition(LateJoinInput.INFO)
        self.next = start
        self._lj_from, self._lj_end = start, end
        self._materialise(now)
        self._pump(now)
        return []

    def on_tail(self, sqn: int, now: float) -> list[Delivery]:
        """The source sent everything up to ``sqn`` before what the transport session will
        deliver live (a TSNI before the session delivered anything; the sqn before its first
        delivered message): the late-join range is extended to it (module docstring)."""
        if self.lj is None:
            return []
        state = self.lj_state
        if state is LateJoin.NONE:
            return []
        u = self._unwrap(sqn)
        if state is LateJoin.WAIT_INFO:
            if self._tail is None or u > self._tail:
                self._tail = u
            return []
        nxt = self.next
        if nxt is None:
            nxt = self._floor  # an empty range, nothing delivered yet
        if not self._ranged or nxt is None or u < nxt:
            return []  # late join abandoned (no range), or nothing past what is owed
        if state is LateJoin.RECOVERING:
            if u <= self._lj_end:
                return []
            self.stats.tail_extended += u - self._lj_end
            self._lj_end = u
        else:
            self._transition(LateJoinInput.TAIL)
            self.stats.tail_extended += u - nxt + 1
            self.next = nxt
            self._lj_from, self._lj_end = nxt, u
        self._materialise(now)
        out = self._drain()
        self._pump(now)
        return out

    def _materialise(self, now: float) -> None:
        """Turn the next LJ sqns into holes, up to the outstanding maximum of unfilled ones."""
        assert self.lj is not None
        limit = self.lj.request_outstanding_maximum
        pending = sum(1 for h in self.holes.values() if h.kind == _LJ)
        while pending < limit and self._lj_from <= self._lj_end:
            u = self._lj_from
            self._lj_from += 1
            if u in self.cache or u in self.holes:
                continue
            self.holes[u] = _Hole(_LJ, now, self.lj.request_interval, None)
            pending += 1
        if not pending and self._lj_from > self._lj_end and self.lj_state is LateJoin.RECOVERING:
            self._transition(LateJoinInput.RECOVERED)

    def _drain_start(self) -> list[Delivery]:
        """Late join over (or abandoned) before it began: deliver what was cached, in order."""
        if self.cache and self.next is None:
            self.next = min(self.cache)
        return self._drain()

    # ------------------------------------------------------------------ input
    def pass_live(self, sqn: int) -> bool:
        """:meth:`on_live`'s common case decided in O(1), without building its result: nothing
        missing or cached, late join neither waiting nor recovering, ``sqn`` not before the
        next one expected.  True: the message is delivered as it came (the state advanced as
        :meth:`on_live` would have); False: call :meth:`on_live`."""
        if self.holes or self.cache:
            return False
        nxt = self.next
        state = self.lj_state
        if nxt is None or state is _WAIT_INFO or state is _RECOVERING:
            return False
        ref = self._ref  # _unwrap inline (idempotent: on_live may unwrap the same sqn again)
        if ref is None:
            return False
        diff = (sqn - ref) & 0xFFFFFFFF
        if diff >= 0x80000000:
            diff -= 0x1_0000_0000
        u = ref + diff
        if u < nxt:
            return False
        if u > ref:
            self._ref = u
        newest = self._newest_live
        if newest is None or u > newest:
            self._newest_live = u
        self.next = u + 1
        return True

    def on_live(self, sqn: int, payload: bytes, meta: Any, now: float) -> list[Delivery]:
        """A message the transport delivered (in its order)."""
        u = self._unwrap(sqn)
        if self._newest_live is None or u > self._newest_live:
            self._newest_live = u
        if self.lj_state is LateJoin.WAIT_INFO:
            if len(self.cache) >= self._cache_bound():
                # Cannot hold the live stream any longer: abandon late join.
                self._transition(LateJoinInput.GIVE_UP)
                self._lji_next = None
                out = self._drain_start()
                return out + self.on_live(sqn, payload, meta, now)
            self.cache[u] = (DELIVER_DATA, payload, 0, meta, 0)
            return []
        nxt = self.next
        if nxt is None:
            self.next = u + 1
            return [(DELIVER_DATA, sqn, payload, 0, meta, 0)]
        if u < nxt or u in self.cache:
            self.stats.duplicates += 1
            return []
        hole = self.holes.pop(u, None)
        if hole is not None:  # a late live copy fills its own hole
            self.cache[u] = (DELIVER_DATA, payload, 0, meta, 0)
            return self._drain()
        if not self.holes and self.lj_state is not LateJoin.RECOVERING:
            if self.cache:
                self.cache[u] = (DELIVER_DATA, payload, 0, meta, 0)
                return self._drain()
            self.next = u + 1
            return [(DELIVER_DATA, sqn, payload, 0, meta, 0)]
        if self._may_cache(u):
            self.cache[u] = (DELIVER_DATA, payload, 0, meta, 0)
        else:
            self.stats.live_dropped += 1
            if self.lj_state is LateJoin.RECOVERING and self.lj is not None:
                self._lj_end = max(self._lj_end, u)  # requested later as part of the range
            elif self.otr is not None:
                self._add_otr_hole(u, now)
        return []

    def _cache_bound(self) -> int:
        bound = MAX_CACHE
        if self.otr is not None:
            bound = min(bound, max(1, self.otr.caching_threshold))
        return bound

    def _may_cache(self, u: int) -> bool:
        if len(self.cache) >= self._cache_bound():
            return False
        lj, rx = self.lj, self._newest_rx
        return not (lj is not None and rx is not None and u - rx >= lj.caching_proximity)

    def _add_otr_hole(self, u: int, now: float) -> None:
        cfg = self.otr
        assert cfg is not None
        self.holes[u] = _Hole(
            _OTR, now + cfg.initial_delay, cfg.minimum_interval, now + cfg.message_timeout
        )

    def on_transport_loss(self, sqn: int, count: int, now: float) -> list[Delivery]:
        """The transport gave up on ``count`` messages from ``sqn`` (a burst when ``count`` is
        over the burst limit)."""
        u = self._unwrap(sqn)
        burst = count > self.max_burst_loss
        if self.otr is None or burst or self.next is None:
            if burst:
                entries = [(u, (DELIVER_BURST, b"", 0, None, count))]
            else:
                entries = [(u + k, (DELIVER_LOSS, b"", 0, None, 1)) for k in range(count)]
            nxt = self.next
            if nxt is None or (not self.holes and not self.cache and not self.late_join_active):
                if nxt is not None and u < nxt:
                    return []
                self.next = u + count
                return [(e[0], k & 0xFFFFFFFF, b"", 0, None, e[4]) for k, e in entries]
            for k, e in entries:
                if k >= nxt and k not in self.cache:
                    self.holes.pop(k, None)
                    self.cache[k] = e
            return self._drain()
        if u < self.next:
            return []
        if len(self.holes) + count > MAX_HOLES:
            return self._give_up_oldest(count, now)
        for k in range(count):
            if u + k not in self.cache and u + k not in self.holes:
                self._add_otr_hole(u + k, now)
        return []

    def on_retransmission(self, sqn: int, payload: bytes, meta: Any, now: float) -> list[Delivery]:
        """A RETRANS message for this topic source (late join or OTR)."""
        u = self._unwrap(sqn)
        hole = self.holes.pop(u, None)
        if hole is None:
            self.stats.duplicates += 1
            return []
        if self._newest_rx is None or u > self._newest_rx:
            self._newest_rx = u
        if hole.kind == _LJ:
            self.stats.filled_lj += 1
            flag = FLAG_RETRANSMIT
        else:
            self.stats.filled_otr += 1
            flag = FLAG_OTR
        self.cache[u] = (DELIVER_DATA, payload, flag, meta, 0)
        out = self._drain()
        if hole.kind == _LJ and self.lj_state is LateJoin.RECOVERING:
            self._materialise(now)
            out += self._drain()
        self._pump(now)
        return out

    # ------------------------------------------------------------------ ordered output
    def _drain(self) -> list[Delivery]:
        out: list[Delivery] = []
        cache = self.cache
        holes = self.holes
        if self.next is None or not cache:
            return out
        nxt = self.next
        first_hole = min(holes) if holes else None
        lj_gate = self._lj_from if self.lj_state is LateJoin.RECOVERING else None
        for k in sorted(cache):
            if first_hole is not None and k > first_hole:
                break
            if lj_gate is not None and k >= lj_gate and k <= self._lj_end:
                break  # not yet materialised part of the late-join range
            kind, payload, flags, meta, count = cache.pop(k)
            if k < nxt:
                self.stats.duplicates += 1
                continue
            out.append((kind, k & 0xFFFFFFFF, payload, flags, meta, count))
            nxt = k + (count if kind == DELIVER_BURST else 1)
        self.next = nxt
        if (
            self.lj_state is LateJoin.RECOVERING
            and self._lj_from > self._lj_end
            and not any(hole.kind == _LJ for hole in holes.values())
        ):
            self._transition(LateJoinInput.RECOVERED)
            if cache:
                return out + self._drain()
        return out

    def _give_up(self, u: int) -> None:
        self.stats.gave_up += 1
        self.cache[u] = (DELIVER_LOSS, b"", 0, None, 1)

    def _give_up_oldest(self, count: int, now: float) -> list[Delivery]:
        for u in sorted(self.holes)[: max(count, len(self.holes) // 2)]:
            del self.holes[u]
            self._give_up(u)
        return self._drain()

    # ------------------------------------------------------------------ timers
    def _pump(self, now: float) -> None:
        """Send the requests that are due, within the outstanding maxima."""
        self._last_pump = now
        due: list[int] = []
        retries: list[int] = []
        lj_flight = otr_flight = 0
        for h in self.holes.values():
            if h.requested:
                if h.kind == _LJ:
                    lj_flight += 1
                else:
                    otr_flight += 1
        lj_max = self.lj.request_outstanding_maximum if self.lj is not None else 0
        otr_max = self.otr.outstanding_maximum if self.otr is not None else 0
        for u in sorted(self.holes):
            h = self.holes[u]
            if h.next_at > now:
                continue
            if not h.requested:
                if h.kind == _LJ:
                    if lj_flight >= lj_max:
                        continue
                    lj_flight += 1
                    assert self.lj is not None
                    h.deadline = now + self.lj.request_message_timeout
                else:
                    if otr_max and otr_flight >= otr_max:
                        continue
                    otr_flight += 1
                h.requested = True
                due.append(u)
            else:
                if h.kind == _OTR and self.otr is not None:
                    h.interval = next_interval(h.interval, self.otr)
                retries.append(u)
            h.next_at = now + h.interval
        router = self.request_router
        if router is not None:
            self.stats.requests_sent += len(due) + len(retries)
            if due:
                router([u & 0xFFFFFFFF for u in due], False)
            if retries:
                router([u & 0xFFFFFFFF for u in retries], True)
            return
        due += retries
        if due:
            due.sort()
            self.stats.requests_sent += len(due)
            self._out.extend(
                encode_rxreqs(
                    self.request_idx,
                    self.transport_idx,
                    self.topic_idx,
                    [u & 0xFFFFFFFF for u in due],
                    self.reply_to,
                )
            )

    def handle_timer(self, now: float) -> list[Delivery]:
        out: list[Delivery] = []
        lji_next = self._lji_next
        if self.lj_state is LateJoin.WAIT_INFO and lji_next is not None and now >= lji_next:
            assert self.lj is not None
            if self._lji_count >= self.lj.info_request_maximum:
                self._transition(LateJoinInput.GIVE_UP)
                self._lji_next = None
                out += self._drain_start()
            else:
                self._send_lji(now)
        expired = [u for u, h in self.holes.items() if h.deadline is not None and h.deadline <= now]
        for u in expired:
            del self.holes[u]
            self._give_up(u)
        if expired:
            if self.lj_state is LateJoin.RECOVERING:
                self._materialise(now)
            out += self._drain()
        self._pump(now)
        return out

    def next_timer(self) -> float | None:
        best = self._lji_next
        now_floor = self._last_pump
        for h in self.holes.values():
            t: float | None = h.next_at
            if not h.requested and t is not None and t <= now_floor:
                t = None  # due but waiting for an outstanding slot: a fill will pump it
            for x in (t, h.deadline):
                if x is not None and (best is None or x < best):
                    best = x
        return best
