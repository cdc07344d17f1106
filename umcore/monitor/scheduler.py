"""When to publish each statistics category: a sans-IO publishing scheduler.

Theory of operation
-------------------
A daemon's statistics are published per *category*, each at its own interval in milliseconds
(SRS: ``<daemon-monitor><publishing-interval>`` with ``<default>`` and one element per category,
seed-srs-lbmrd.md 1.4/1.7).  The rules:

- a category's interval is its own element when given, else ``<default>``; ``<default>`` itself
  defaults to **0, which means off** (trap 3: a ``<daemon-monitor>`` without intervals publishes
  nothing), and an explicit 0 turns one category off;
- a periodic category is first published one interval after start, then every interval; the
  categories in ``publish_at_start`` (the SRS's CONFIG_OPTS and INTERNAL_CONFIG_OPTS, OBS in
  mcs_demo) are also published immediately at start;
- a snapshot request (REPORT_MONITOR_INFO) publishes the category at once, whatever its interval,
  without moving its periodic schedule;
- SET_PUBLISHING_INTERVAL changes a category's interval while running (not persisted): the next
  publication is one new interval from the change, or never for 0;
- a late poll publishes a category once, not once per missed interval, and the schedule restarts
  from that poll (no bursts after a stall).

Time comes in as ``now`` (float seconds, any monotonic origin); :meth:`next_timer` says when to
call :meth:`poll` next; :meth:`poll` returns the :class:`Publish` items due.  Category names are
plain strings (``Category`` values for the SRS), so the Store's and DRO's groups can reuse it.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from umcore.errors import ConfigError
from umcore.monitor.categories import ALL_CATEGORIES, Category

DEFAULT_PUBLISH_AT_START: tuple[str, ...] = (Category.CONFIG_OPTS, Category.INTERNAL_CONFIG_OPTS)


class Publish:
    """One category to publish now; ``snapshot`` for an on-request full publication."""

    __slots__ = ("category", "snapshot")

    def __init__(self, category: str, snapshot: bool = False) -> None:
        self.category = category
        self.snapshot = snapshot

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Publish):
            return NotImplemented
        return (self.category, self.snapshot) == (other.category, other.snapshot)

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return f"Publish({self.category!r}{', snapshot=True' if self.snapshot else ''})"


class PublishingScheduler:
    """Per-category publishing intervals with snapshots and run-time changes."""

    __slots__ = ("_due", "_explicit", "_order", "_snapshots", "_start_set", "default_ms")

    def __init__(
        self,
        intervals: Mapping[str, int] | None = None,
        *,
        default_ms: int = 0,
        categories: Iterable[str] = ALL_CATEGORIES,
        publish_at_start: Iterable[str] = DEFAULT_PUBLISH_AT_START,
    ) -> None:
        self._order: tuple[str, ...] = tuple(categories)
        known = set(self._order)
        explicit = dict(intervals or {})
        for name, ms in [*explicit.items(), ("default", default_ms)]:
            if name != "default" and name not in known:
                raise ConfigError(
                    f"unknown publishing category {name!r}",
                    what="publishing-interval",
                    allowed=", ".join(self._order),
                )
            if ms < 0:
                raise ConfigError(f"negative interval {ms} ms", what=f"publishing-interval {name}")
        self.default_ms = default_ms
        self._explicit = explicit
        self._start_set = frozenset(publish_at_start) & known
        self._due: dict[str, float] = {}
        self._snapshots: list[str] = []

    def interval(self, category: str) -> int:
        """The effective interval of ``category`` in ms (0: not published periodically)."""
        return self._explicit.get(category, self.default_ms)

    def enabled(self) -> bool:
        """True when at least one category is published periodically."""
        return any(self.interval(c) > 0 for c in self._order)

    def start(self, now: float) -> None:
        """Begin at ``now``: schedule every enabled category."""
        self._due.clear()
        for cat in self._order:
            ms = self.interval(cat)
            if ms > 0:
                self._due[cat] = now if cat in self._start_set else now + ms / 1000.0

    def set_interval(self, category: str | None, ms: int, now: float) -> None:
        """Change the interval of one category (None: all) from ``now`` on."""
        if ms < 0:
            raise ValueError(f"negative interval {ms} ms")
        targets = self._order if category is None else (category,)
        for cat in targets:
            if cat not in self._order:
                raise ValueError(f"unknown category {cat!r}")
            self._explicit[cat] = ms
            if ms > 0:
                self._due[cat] = now + ms / 1000.0
            else:
                self._due.pop(cat, None)

    def request_snapshot(self, categories: Iterable[str] | None = None) -> None:
        """Publish these categories (None: all) at the next poll, as snapshots."""
        for cat in self._order if categories is None else categories:
            if cat not in self._order:
                raise ValueError(f"unknown category {cat!r}")
            if cat not in self._snapshots:
                self._snapshots.append(cat)

    def next_timer(self) -> float | None:
        """When :meth:`poll` should next be called; None when nothing is scheduled.

        Pending snapshots are due at once: the result is then ``-inf``.
        """
        if self._snapshots:
            return float("-inf")
        return min(self._due.values(), default=None)

    def poll(self, now: float) -> list[Publish]:
        """The publications due at ``now``: snapshots first, then periodic ones, in category
        order; a category both snapshotted and due is published once, as a snapshot."""
        out = [Publish(c, snapshot=True) for c in self._snapshots]
        snapped = set(self._snapshots)
        self._snapshots.clear()
        for cat in self._order:
            due = self._due.get(cat)
            if due is None or due > now:
                continue
            ms = self.interval(cat)
            nxt = due + ms / 1000.0
            self._due[cat] = nxt if nxt > now else now + ms / 1000.0
            if cat not in snapped:
                out.append(Publish(cat))
        return out
