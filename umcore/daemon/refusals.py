"""One rate-limited log line per kind of refusal, with counts and who was refused.

Theory of operation
-------------------
A daemon under attack refuses the same thing thousands of times a second (a full client table,
a quota, a malformed peer); logging each refusal would drown the log, and a generic rate limiter
shared with other warnings loses the one line an operator needs (a legitimate client refused
among a flood).  :class:`RefusalLog` keeps one *window* per kind of refusal:

- the first refusal of a kind is logged at once, naming who was refused and why (the reason
  names the bound and the setting that raises it);
- further refusals of that kind within ``period`` seconds are counted: refusals, distinct peers
  (up to :data:`MAX_PEERS_COUNTED`) and the first :data:`SAMPLE` peers' names;
- when the window ends with something counted, one summary line says how many, from how many
  peers (with the sample), and the total since start; a new quiet window begins, so a steady
  flood costs one line per kind per ``period``.  A window that ends with nothing counted is
  closed: the next refusal of that kind is logged at once again.

The clock is a parameter (``clock()``, monotonic seconds), and so is the scheduler of the end
of a window (``call_at(when, callback)``, the event loop's ``call_at`` in the daemons); both are
fakes in the tests.  :meth:`RefusalLog.flush` logs every summary that is due.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

__all__ = ["MAX_KINDS", "MAX_PEERS_COUNTED", "SAMPLE", "RefusalLog"]

# Peers named in a summary line: enough to recognise a pattern (one host, a range) and short
# enough to read.
SAMPLE = 5
# Distinct peers counted per window; past it the summary says "at least".  Bounds the window's
# memory whatever the flood (spoofed UDP sources are unbounded).
MAX_PEERS_COUNTED = 10_000
# Kinds are chosen by the caller (a handful of constants); a safety net all the same.
MAX_KINDS = 64


class _Window:
    __slots__ = ("count", "end", "peers", "sample")

    def __init__(self, end: float) -> None:
        self.end = end
        self.count = 0
        self.peers: set[str] = set()
        self.sample: list[str] = []


class RefusalLog:
    """See the module docstring."""

    def __init__(
        self,
        logger: logging.Logger,
        clock: Callable[[], float],
        *,
        call_at: Callable[[float, Callable[[], None]], object] | None = None,
        period: float = 10.0,
        level: int = logging.WARNING,
    ) -> None:
        self.logger = logger
        self.clock = clock
        self.call_at = call_at
        self.period = period
        self.level = level
        self._windows: dict[str, _Window] = {}
        self._armed: float | None = None  # the end of window a call_at is pending for
        #: Refusals noted since start, per kind.
        self.totals: dict[str, int] = {}

    def note(self, kind: str, who: str, reason: str, count: int = 1) -> None:
        """``count`` refusals of ``kind`` for ``who`` (the last one's ``reason``)."""
        total = self.totals.get(kind, 0) + count
        if kind in self.totals or len(self.totals) < MAX_KINDS:
            self.totals[kind] = total
        now = self.clock()
        window = self._windows.get(kind)
        if window is not None and now >= window.end:
            self._summarise(kind, window, now)
            window = self._windows.get(kind)
        if window is None:
            if len(self._windows) >= MAX_KINDS:
                self.flush()
            self._windows[kind] = _Window(now + self.period)
            more = f" (x{count})" if count > 1 else ""
            self.logger.log(
                self.level, "refused %s: %s%s: %s; %d since start", kind, who, more, reason, total
            )
            self._arm()
            return
        window.count += count
        if len(window.peers) < MAX_PEERS_COUNTED:
            window.peers.add(who)
        if len(window.sample) < SAMPLE and who not in window.sample:
            window.sample.append(who)

    def flush(self) -> None:
        """Log the summaries of the windows that ended; close the quiet ones."""
        now = self.clock()
        for kind, window in list(self._windows.items()):
            if now >= window.end:
                self._summarise(kind, window, now)
        self._arm()

    def next_deadline(self) -> float | None:
        """The end of the earliest open window (None: none open)."""
        return min((w.end for w in self._windows.values()), default=None)

    def _summarise(self, kind: str, window: _Window, now: float) -> None:
        if not window.count:
            del self._windows[kind]  # quiet: the next refusal is logged at once
            return
        peers = len(window.peers)
        at_least = "at least " if peers >= MAX_PEERS_COUNTED else ""
        self.logger.log(
            self.level,
            "refused %s: %d more in the last %g s from %s%d peer(s) (%s%s); %d since start",
            kind,
            window.count,
            self.period,
            at_least,
            peers,
            ", ".join(window.sample),
            ", ..." if peers > len(window.sample) else "",
            self.totals.get(kind, 0),
        )
        self._windows[kind] = _Window(now + self.period)

    def _arm(self) -> None:
        if self.call_at is None:
            return
        due = self.next_deadline()
        if due is None or (self._armed is not None and self._armed <= due):
            return
        self._armed = due
        self.call_at(due, self._fire)

    def _fire(self) -> None:
        self._armed = None
        self.flush()
