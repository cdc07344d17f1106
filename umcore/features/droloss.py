"""DRO reliable loss: a TCP receiver's wait for reordered data from a DRO proxy source.

Theory of operation
-------------------
A DRO forwards a UDP-originated stream (LBT-RM, LBT-RU) frame by frame, keeping the original
sequence numbers, so loss and its recovery before the DRO reach a TCP receiver as *reordered*
data: sqn 7 may come after 8.  A plain TCP delivery controller declares 7 lost the moment 8
arrives.  ``transport_tcp_dro_loss_recovery_timeout`` (receiver; milliseconds, default 0 = that
immediate behaviour, UM before 6.12) makes the receiver wait that long for a gap to fill, only
for sessions a DRO proxy source publishes (notes dro-monitoring-config A2 "DRO Reliable Loss";
:func:`umcore.resolver.dro.is_proxy_source` tells which).  ``transport_lbtipc_dro_loss_recovery_timeout``
is the same for LBT-IPC, whose joins run the same receiver session and controllers (the engine
picks the option by the session's kind, :mod:`umcore.engine.dro`).

:class:`DroLossController` is the TCP :class:`~umcore.transport.tcp.DeliveryController` with a
hold-back buffer in front: data (or a fragment) beyond the expected sqn is kept, not delivered;
when the gap fills, the held messages follow in order; when the gap is still open ``timeout``
after it was revealed (the earliest arrival among the held messages), the controller gives up
on it -- the base controller reports the missing sqns as unrecoverable loss as it always does --
and goes on with what it holds.  A TSNI revealing tail loss waits the same way.  While anything
is held the controller clears ``started``, which sends every message of its topic index through
:meth:`on_data` / :meth:`on_fragment` (the receiver session's in-sequence fast paths test it),
so nothing can overtake the held messages.

How much it holds follows ``delivery_control_maximum_total_map_entries`` (context, default
200000, 0 = unbounded), UM's bound on each delivery controller's order map, which is what this
hold-back buffer is: when more than that many messages are held the oldest gap is given up at
once (UM: "unrecoverable loss is signaled for the oldest gaps and older data is delivered").
:data:`MAX_HELD_BYTES` bounds the bytes whatever the option says.

Cost: the recovery that fills a gap usually arrives as a run (a repaired datagram of a few
hundred messages), while thousands wait behind it.  Every message of that run is in order and
each one re-checks the deadline, so the earliest arrival among the held messages comes from a
queue in arrival order (stale heads skipped, amortised O(1)) and the lowest held sequence number
from a heap (O(log n)), never from a scan of everything held: a scan per message made recovery
quadratic (16,384 held x a 300-message run per repaired datagram) and starved the process.

Time: the receive path has no ``now`` (the TCP session feeds the controller from a read), so the
controller reads an injected ``clock`` when a gap opens; its owner calls :meth:`handle_timer`
at :attr:`deadline` and is told through ``on_deadline`` whenever that changes.  No clock is
read anywhere else; tests pass a fake one.
"""

from __future__ import annotations

import heapq
from collections import deque
from collections.abc import Callable
from typing import Any

from umcore.transport.delivery import DEFAULT_MAX_MAP_ENTRIES
from umcore.transport.tcp import DeliveryController

__all__ = ["MAX_HELD", "MAX_HELD_BYTES", "DroLossController"]

# Messages held per topic source while a gap is open, by default: UM's default for
# delivery_control_maximum_total_map_entries (the engine passes the configured value; module
# docstring).  Beyond it the oldest gap is given up at once.
MAX_HELD = DEFAULT_MAX_MAP_ENTRIES
# ... and bytes held (the payloads are copies): a bound on memory whatever the message size and
# whatever the option says (0 = unbounded there).
MAX_HELD_BYTES = 64 * 1024 * 1024
# Stale entries (already delivered) the arrival queue and the sqn heap may carry beyond twice
# the held count before they are rebuilt from what is held: bounds their memory, amortised O(1).
_SLACK = 1024
_MASK = 0xFFFFFFFF
_HALF = 0x80000000
_DATA = 0
_FRAG = 1


class DroLossController(DeliveryController):
    """A TCP delivery controller that waits ``timeout`` seconds for gaps (module docstring)."""

    __slots__ = (
        "_anchor",
        "_arrivals",
        "_lowest",
        "began",
        "clock",
        "deadline",
        "held",
        "held_bytes",
        "max_held",
        "on_deadline",
        "recovered",
        "timeout",
        "tsni_target",
    )

    def __init__(
        self,
        tidx: int,
        topic: str,
        deliver: Callable[[int, bytes | memoryview], None],
        loss: Callable[[str, int, int], None],
        *,
        timeout: float,
        clock: Callable[[], float],
        max_burst_loss: int = 1024,
        on_deadline: Callable[[], object] | None = None,
        max_held: int = MAX_HELD,
    ) -> None:
        super().__init__(tidx, topic, deliver, loss, max_burst_loss=max_burst_loss)
        self.timeout = timeout
        #: delivery_control_maximum_total_map_entries: most messages held (0 = no count bound).
        self.max_held = max_held
        self.clock = clock
        #: Told whenever :attr:`deadline` changes (the owner re-arms its timer).
        self.on_deadline = on_deadline
        #: sqn -> (arrival time, kind, payload, fragment fields, headers)
        self.held: dict[int, tuple[float, int, bytes, tuple[int, int, int], tuple[Any, ...]]] = {}
        self.held_bytes = 0
        #: When the open gap (or awaited TSNI tail) is given up, or None.
        self.deadline: float | None = None
        #: The last sqn a TSNI announced while data up to it was missing, or None.
        self.tsni_target: int | None = None
        #: Anything delivered yet (the base's ``started`` is cleared while holding).
        self.began = False
        #: Messages that arrived out of order and were delivered in order after all.
        self.recovered = 0
        #: (arrival time, sqn) in arrival order; entries no longer held are skipped lazily.
        self._arrivals: deque[tuple[float, int]] = deque()
        #: heap of (sqn - _anchor) mod 2**32 of held sqns (stale ones skipped lazily): the lowest
        #: held sqn.  _anchor is the expected sqn when holding began: every held sqn is ahead of
        #: it and of every later expected one, so the order of the keys is the sqns' order.
        self._lowest: list[int] = []
        self._anchor = 0

    # -------------------------------------------------------------- input
    def on_data(self, sqn: int, payload: bytes | memoryview) -> None:
        self._input(sqn, _DATA, payload, (0, 0, 0))

    def on_fragment(
        self, sqn: int, first: int, offset: int, total: int, payload: bytes | memoryview
    ) -> None:
        self._input(sqn, _FRAG, payload, (first, offset, total))

    def _input(
        self, sqn: int, kind: int, payload: bytes | memoryview, frag: tuple[int, int, int]
    ) -> None:
        if not self.began:
            self.began = True  # the first message starts the stream (leading loss is no gap)
            self._pass(sqn, kind, payload, frag)
            return
        diff = (sqn - self.expected) & _MASK
        if diff == 0:
            self.started = True
            self._pass(sqn, kind, payload, frag)
            self._drain()
        elif diff < _HALF:
            self._hold(sqn, kind, payload, frag)
        # else: behind us (a duplicate): dropped, as the base controller does

    def on_tsni(self, sqn: int) -> None:
        if not self.began:
            if self.before_start is not None:  # leading loss: the recovery layer's (base)
                self.before_start(sqn)
            return
        diff = ((sqn + 1) - self.expected) & _MASK
        if diff == 0 or diff >= _HALF:
            return
        t = self.tsni_target
        if t is None or ((sqn - t) & _MASK) < _HALF:
            self.tsni_target = sqn
        if self.deadline is None:
            self._set_deadline(self.clock() + self.timeout)

    def _pass(
        self, sqn: int, kind: int, payload: bytes | memoryview, frag: tuple[int, int, int]
    ) -> None:
        if kind == _DATA:
            super().on_data(sqn, payload)
        else:
            super().on_fragment(sqn, frag[0], frag[1], frag[2], payload)

    def _hold(
        self, sqn: int, kind: int, payload: bytes | memoryview, frag: tuple[int, int, int]
    ) -> None:
        held = self.held
        if sqn in held:
            return  # a duplicate of one held
        if not held:
            self._arrivals.clear()
            self._lowest.clear()
            self._anchor = self.expected
        data = bytes(payload)
        now = self.clock()
        held[sqn] = (now, kind, data, frag, self.headers)
        self.held_bytes += len(data)
        self._arrivals.append((now, sqn))
        heapq.heappush(self._lowest, (sqn - self._anchor) & _MASK)
        self.started = False  # every message now goes through _input (module docstring)
        if self.deadline is None:
            self._set_deadline(now + self.timeout)
        limit = self.max_held
        while held and ((limit and len(held) > limit) or self.held_bytes > MAX_HELD_BYTES):
            self._give_up()

    # -------------------------------------------------------------- in order again
    def _replay(self, sqn: int) -> None:
        _t, kind, data, frag, headers = self.held.pop(sqn)
        self.held_bytes -= len(data)
        saved = self.headers
        self.headers = headers
        try:
            self.started = True
            self._pass(sqn, kind, data, frag)
        finally:
            self.headers = saved

    def _drain(self) -> None:
        """Deliver the held messages that are next in order; recompute the deadline."""
        held = self.held
        while held and self.expected in held:
            self.recovered += 1
            self._replay(self.expected)
        self._settle()

    def _settle(self) -> None:
        held = self.held
        if held:
            self.started = False
            arrivals = self._arrivals
            while True:  # the earliest arrival still held (module docstring: cost)
                t, sqn = arrivals[0]
                entry = held.get(sqn)
                if entry is not None and entry[0] == t:
                    break
                arrivals.popleft()
            if len(arrivals) > 2 * len(held) + _SLACK:
                self._arrivals = deque((e[0], q) for q, e in held.items())  # arrival order
            self._set_deadline(t + self.timeout)
            return
        self.started = True
        if self.tsni_target is not None:
            diff = ((self.tsni_target + 1) - self.expected) & _MASK
            if diff == 0 or diff >= _HALF:
                self.tsni_target = None
        if self.tsni_target is None:
            self._set_deadline(None)

    def _give_up(self) -> None:
        """Give up the open gap: the lowest held message goes to the base controller, which
        reports what is missing before it as lost; then what follows it in order."""
        held = self.held
        heap = self._lowest
        anchor = self._anchor
        while True:
            lowest = (heap[0] + anchor) & _MASK
            if lowest in held:
                break
            heapq.heappop(heap)  # delivered meanwhile
        if len(heap) > 2 * len(held) + _SLACK:
            self._lowest = heap = [(q - anchor) & _MASK for q in held]
            heapq.heapify(heap)
        self._replay(lowest)
        held = self.held
        while held and self.expected in held:
            self._replay(self.expected)

    # -------------------------------------------------------------- time
    def _set_deadline(self, when: float | None) -> None:
        if when != self.deadline:
            self.deadline = when
            if self.on_deadline is not None:
                self.on_deadline()

    def handle_timer(self, now: float) -> None:
        """Give up every gap whose time is over; then a TSNI tail whose time is over."""
        while self.deadline is not None and self.deadline <= now:
            if self.held:
                self._give_up()
                self._settle()
                continue
            target = self.tsni_target
            self.tsni_target = None
            self._set_deadline(None)
            if target is not None:
                super().on_tsni(target)
