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

Time: the receive path has no ``now`` (the TCP session feeds the controller from a read), so the
controller reads an injected ``clock`` when a gap opens; its owner calls :meth:`handle_timer`
at :attr:`deadline` and is told through ``on_deadline`` whenever that changes.  No clock is
read anywhere else; tests pass a fake one.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from umcore.transport.tcp import DeliveryController

__all__ = ["MAX_HELD", "MAX_HELD_BYTES", "DroLossController"]

# Messages held per topic source while a gap is open.  The DRO's own duplicate window is 16384
# sequence numbers by default (<sqn-window size>, notes A9): data reordered further than that
# cannot come through a DRO anyway.  Beyond it the oldest gap is given up at once.
MAX_HELD = 16384
# ... and bytes held (the payloads are copies): a bound on memory whatever the message size.
MAX_HELD_BYTES = 64 * 1024 * 1024
_MASK = 0xFFFFFFFF
_HALF = 0x80000000
_DATA = 0
_FRAG = 1


class DroLossController(DeliveryController):
    """A TCP delivery controller that waits ``timeout`` seconds for gaps (module docstring)."""

    __slots__ = (
        "began",
        "clock",
        "deadline",
        "held",
        "held_bytes",
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
    ) -> None:
        super().__init__(tidx, topic, deliver, loss, max_burst_loss=max_burst_loss)
        self.timeout = timeout
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
        if sqn in self.held:
            return  # a duplicate of one held
        data = bytes(payload)
        self.held[sqn] = (self.clock(), kind, data, frag, self.headers)
        self.held_bytes += len(data)
        self.started = False  # every message now goes through _input (module docstring)
        if self.deadline is None:
            self._set_deadline(self.clock() + self.timeout)
        while self.held and (len(self.held) > MAX_HELD or self.held_bytes > MAX_HELD_BYTES):
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
        if self.held:
            self.started = False
            first = min(t for t, *_ in self.held.values())
            self._set_deadline(first + self.timeout)
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
        lowest = min(self.held, key=lambda s: (s - self.expected) & _MASK)
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
