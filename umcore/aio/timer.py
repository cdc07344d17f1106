"""One re-armed timer per sans-IO core.

Theory of operation
-------------------
A sans-IO core exposes its next deadline with ``next_timer()`` (``loop.time()`` base, ``None``
when it has nothing to wait for) and expects ``handle_timer(now)`` to be called once that time has
come.  The adapter keeps exactly one :class:`CoreTimer` per core and, after every input it feeds
the core, calls ``timer.arm(core.next_timer())``.  Re-arming to the deadline already armed is
free, so the hot path pays one float comparison, not a cancel and a new ``TimerHandle``.

The callback runs from the loop with no argument; it is expected to call ``handle_timer`` with
``loop.time()`` and re-arm.  A deadline in the past fires on the next loop iteration.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable

__all__ = ["CoreTimer"]


class CoreTimer:
    """A single cancellable deadline on ``loop``; see the module docstring."""

    __slots__ = ("_callback", "_deadline", "_handle", "_loop")

    def __init__(self, loop: asyncio.AbstractEventLoop, callback: Callable[[], object]) -> None:
        self._loop = loop
        self._callback = callback
        self._handle: asyncio.TimerHandle | None = None
        self._deadline: float | None = None

    @property
    def deadline(self) -> float | None:
        """The armed deadline (``loop.time()`` base), or ``None`` when disarmed."""
        return self._deadline

    def arm(self, deadline: float | None) -> None:
        """Fire the callback at ``deadline``; ``None`` disarms.  Replaces any earlier deadline."""
        if deadline == self._deadline and (deadline is None or self._handle is not None):
            return
        if self._handle is not None:
            self._handle.cancel()
            self._handle = None
        self._deadline = deadline
        if deadline is not None:
            self._handle = self._loop.call_at(deadline, self._fire)

    def cancel(self) -> None:
        """Disarm; the callback will not run until armed again."""
        self.arm(None)

    def _fire(self) -> None:
        self._handle = None
        self._deadline = None
        self._callback()
