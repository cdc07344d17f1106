"""UM's event queue (``lbm_event_queue_t``): callbacks delivered through a queue the application
services, instead of on the context's own path.

Theory of operation
-------------------
In UM (seed 003 3.5) a receiver, wildcard receiver or source created *with an event queue* does
not call its application callback from the context thread: each event (a message, BOS/EOS, a
loss event, a source event) is put on the queue and the application's dispatch thread calls the
callback from ``lbm_event_dispatch()``.  Callbacks keep their semantics; what changes is where
they run.  In pyum the "context thread" is the asyncio loop's receive path; a dispatcher is a
task awaiting :meth:`EventQueue.dispatch`.  Callbacks run there, outside the transport's receive
path, so they may create and delete objects, and a callback may return an awaitable (for
instance ``src.send(...)``) which the dispatcher awaits before the next event.

**Dispatch timeouts** (seed 3.5.3): :data:`BLOCK` dispatches until :meth:`EventQueue.unblock`;
:data:`POLL` dispatches exactly one event if there is one and returns at once otherwise; any
other value is a *minimum* time in milliseconds, checked after each event, and the wait for the
next event is not bounded by it (the seed's rule: use a timer calling ``unblock`` to cap it).
``dispatch`` returns the number of events dispatched.

**Bounds** (a pyum rule; UM's queue is unbounded and the seed warns it can exhaust memory):
at ``limit`` queued events (:data:`MAX_EVENT_QUEUE` by default) the queue stops the sessions
feeding its receivers (receiver pacing, counted in ``stats.pauses``) and lets them go on at half;
events that cannot be paced (BOS/EOS, loss, source events, data of transports that cannot
pause) are still queued up to :data:`HARD_LIMIT_FACTOR` times the limit plus
:data:`READ_OVERSHOOT` (what one read of a paused session may still carry), beyond which they
are refused and counted in ``stats.refused``.  Wildcard receivers are not paced (their sessions
are found per topic); they rely on that hard limit.

**Monitor** (seed 3.5.4, ``event_queue`` options): ``queue_size_warning`` (events) and
``queue_delay_warning`` (microseconds) are checked when an event is dequeued; while either is
exceeded the monitor callback gets ``(SIZE_WARNING | DELAY_WARNING bits, size, delay_us)``.
``queue_enqueue_notification`` 1 calls it on every enqueue with ``(ENQUEUE_NOTIFICATION, 1, 0)``.
``queue_age_enabled``, ``queue_count_enabled`` and ``queue_service_time_enabled`` turn on the
age, per-kind count and callback service time statistics.

Events of an object closed after they were queued are discarded at dispatch (``stats.purged``):
``close()`` of a receiver still guarantees that no callback runs afterwards.  Deletion order is
UM's: close the sources and receivers using a queue before the queue (:meth:`EventQueue.close`
refuses otherwise).
"""

from __future__ import annotations

import asyncio
import inspect
import logging
import time
from collections import deque
from collections.abc import Callable
from typing import Any

from umcore.engine.options import Options
from umcore.errors import UMError

__all__ = [
    "BLOCK",
    "DELAY_WARNING",
    "ENQUEUE_NOTIFICATION",
    "HARD_LIMIT_FACTOR",
    "MAX_EVENT_QUEUE",
    "POLL",
    "READ_OVERSHOOT",
    "SIZE_WARNING",
    "EventQueue",
    "EventQueueStats",
]

log = logging.getLogger("umcore.api")

BLOCK = 0xFFFFFFFF  # LBM_EVENT_QUEUE_BLOCK: dispatch until unblock()
POLL = 0  # LBM_EVENT_QUEUE_POLL: at most one event, no wait
SIZE_WARNING = 0x1  # LBM_EVENT_QUEUE_SIZE_WARNING (monitor bitmap)
DELAY_WARNING = 0x2  # LBM_EVENT_QUEUE_DELAY_WARNING (monitor bitmap)
ENQUEUE_NOTIFICATION = 0x3  # LBM_EVENT_QUEUE_ENQUEUE_NOTIFICATION (an absolute value)

# Queued events at which the feeding sessions are paused (they resume at half): the same bound
# as a receiver's own queue (umcore.api.context.MAX_RECEIVER_QUEUE).
MAX_EVENT_QUEUE = 65536
# Events that cannot be paced are still queued up to this many times the limit (plus one
# read's worth, below), then refused (counted): a transport that cannot pause must not exhaust
# memory.
HARD_LIMIT_FACTOR = 4
# Messages one socket read may still deliver after its session was paused: uvloop reads up to
# 256 KiB at a time and an LBMC data message is at least 12 bytes.
READ_OVERSHOOT = 262144 // 12

# Event kinds (per-kind counts with queue_count_enabled).
KIND_MESSAGE = "message"
KIND_SOURCE_EVENT = "source_event"

Monitor = Callable[[int, int, int], object]


class EventQueueStats:
    """Counters (``lbm_event_queue_retrieve_stats``); ages and service times in microseconds."""

    __slots__ = (
        "age_max_us",
        "age_total_us",
        "by_kind",
        "dispatched",
        "enqueued",
        "max_size",
        "pauses",
        "purged",
        "refused",
        "service_max_us",
        "service_total_us",
    )

    def __init__(self) -> None:
        self.enqueued = 0
        self.dispatched = 0
        self.refused = 0  # beyond the hard limit
        self.purged = 0  # of closed objects, or dropped by shutdown()
        self.pauses = 0  # times the feeding sessions were paused
        self.max_size = 0
        self.by_kind: dict[str, int] = {}
        self.age_total_us = 0
        self.age_max_us = 0
        self.service_total_us = 0
        self.service_max_us = 0

    def as_dict(self) -> dict[str, Any]:
        return {name: getattr(self, name) for name in self.__slots__}


class EventQueue:
    """An event queue; give it to ``create_receiver`` / ``create_wildcard_receiver`` /
    ``create_source`` (``event_queue=``) and run ``await evq.dispatch(BLOCK)`` in a task."""

    def __init__(
        self,
        attributes: Any = None,
        *,
        monitor: Monitor | None = None,
        limit: int = MAX_EVENT_QUEUE,
    ) -> None:
        if limit < 1:
            raise ValueError("an event queue limit is at least 1")
        o = Options("event_queue", attributes)
        self.size_warning = int(o.get("queue_size_warning") or 0)
        self.delay_warning_us = int(o.get("queue_delay_warning") or 0)
        self.enqueue_notification = bool(o.get("queue_enqueue_notification"))
        self.age_enabled = bool(o.get("queue_age_enabled"))
        self.count_enabled = bool(o.get("queue_count_enabled"))
        self.service_time_enabled = bool(o.get("queue_service_time_enabled"))
        self.monitor = monitor
        self.limit = limit
        self.hard_limit = limit * HARD_LIMIT_FACTOR + READ_OVERSHOOT
        self.stats = EventQueueStats()
        #: Exceptions raised by callbacks or the monitor (logged, counted, never propagated).
        self.callback_errors = 0
        self.closed = False
        self._timed = self.age_enabled or self.delay_warning_us > 0
        # (enqueue time or 0.0, owner, callback, argument, kind)
        self._q: deque[tuple[float, Any, Callable[[Any], object], Any, str]] = deque()
        self._waiter: asyncio.Future[None] | None = None
        self._unblocked = False
        self._paused = False
        #: Receivers and sources using this queue (close them before the queue).
        self._users: set[Any] = set()

    # ------------------------------------------------------------------ producers
    def size(self) -> int:
        """``lbm_event_queue_size``: events waiting."""
        return len(self._q)

    def __len__(self) -> int:
        return len(self._q)

    def enqueue(
        self, owner: Any, callback: Callable[[Any], object], arg: Any, kind: str, pace: bool
    ) -> bool:
        """Queue ``callback(arg)`` for ``owner``; False if refused (hard limit or closed).
        ``pace``: the event comes from a session that can be paused (data)."""
        q = self._q
        n = len(q)
        if self.closed or n >= self.hard_limit:
            self.stats.refused += 1
            return False
        q.append((time.monotonic() if self._timed else 0.0, owner, callback, arg, kind))
        st = self.stats
        st.enqueued += 1
        if n >= st.max_size:
            st.max_size = n + 1
        if self.count_enabled:
            st.by_kind[kind] = st.by_kind.get(kind, 0) + 1
        w = self._waiter
        if w is not None and not w.done():
            w.set_result(None)
        if pace and n + 1 >= self.limit and not self._paused:
            self._paused = True
            st.pauses += 1
            self._pace(True)
        if self.enqueue_notification and self.monitor is not None:
            self._call_monitor(ENQUEUE_NOTIFICATION, 1, 0)
        return True

    def _pace(self, pause: bool) -> None:
        for user in list(self._users):
            topic = getattr(user, "topic", None)
            ctx = getattr(user, "context", None)
            if topic is None or ctx is None or getattr(user, "pattern", None) is not None:
                continue
            if pause:
                ctx.pause_feeding(topic)
            else:
                ctx.resume_feeding(topic)

    # ------------------------------------------------------------------ dispatch
    async def dispatch(self, timeout: int = BLOCK) -> int:
        """``lbm_event_dispatch``: run queued callbacks; returns how many (see the module
        docstring for ``timeout``).  Raises UMError once the queue is closed."""
        if self.closed:
            raise UMError("event queue is closed")
        self._unblocked = False
        count = 0
        if timeout == POLL:
            if self._q:
                count += await self._one()
            return count
        start = time.monotonic()
        limit_s = None if timeout == BLOCK else timeout / 1000.0
        while not self._unblocked and not self.closed:
            if not self._q:
                self._waiter = asyncio.get_running_loop().create_future()
                try:
                    await self._waiter
                finally:
                    self._waiter = None
                continue
            count += await self._one()
            if limit_s is not None and time.monotonic() - start >= limit_s:
                break
        return count

    def unblock(self) -> None:
        """``lbm_event_dispatch_unblock``: make a running :meth:`dispatch` return."""
        self._unblocked = True
        w = self._waiter
        if w is not None and not w.done():
            w.set_result(None)

    async def _one(self) -> int:
        q = self._q
        queued_at, owner, callback, arg, _kind = q.popleft()
        st = self.stats
        if self._paused and len(q) <= self.limit // 2:
            self._paused = False
            self._pace(False)
        if self._timed:
            age_us = int((time.monotonic() - queued_at) * 1e6)
            if self.age_enabled:
                st.age_total_us += age_us
                if age_us > st.age_max_us:
                    st.age_max_us = age_us
        else:
            age_us = 0
        if self.monitor is not None and (self.size_warning or self.delay_warning_us):
            bits = 0
            if self.size_warning and len(q) + 1 > self.size_warning:
                bits |= SIZE_WARNING
            if self.delay_warning_us and age_us > self.delay_warning_us:
                bits |= DELAY_WARNING
            if bits:
                self._call_monitor(bits, len(q) + 1, age_us)
        if getattr(owner, "closed", False):
            st.purged += 1
            return 0
        t0 = time.monotonic() if self.service_time_enabled else 0.0
        try:
            result = callback(arg)
            if inspect.isawaitable(result):
                await result
        except Exception:
            self.callback_errors += 1
            n = self.callback_errors
            if n & (n - 1) == 0:
                log.exception("event queue callback failed (%d so far)", n)
        if self.service_time_enabled:
            us = int((time.monotonic() - t0) * 1e6)
            st.service_total_us += us
            if us > st.service_max_us:
                st.service_max_us = us
        st.dispatched += 1
        return 1

    def _call_monitor(self, code: int, size: int, delay_us: int) -> None:
        assert self.monitor is not None
        try:
            self.monitor(code, size, delay_us)
        except Exception:
            self.callback_errors += 1
            log.exception("event queue monitor callback failed")

    # ------------------------------------------------------------------ lifetime
    def retrieve_stats(self) -> EventQueueStats:
        return self.stats

    def reset_stats(self) -> None:
        self.stats = EventQueueStats()

    def shutdown(self) -> int:
        """``lbm_event_queue_shutdown``: purge every queued event (risky, as in UM); returns
        how many were dropped."""
        n = len(self._q)
        self._q.clear()
        self.stats.purged += n
        if self._paused:
            self._paused = False
            self._pace(False)
        return n

    def close(self) -> None:
        """``lbm_event_queue_delete``: the objects using the queue must be closed first."""
        live = [u for u in self._users if not getattr(u, "closed", False)]
        if live:
            raise UMError(
                f"close the {len(live)} sources/receivers using this event queue before it"
            )
        self.shutdown()
        self.closed = True
        self.unblock()

    # ------------------------------------------------------------------ wiring (context)
    def attach_receiver(self, receiver: Any) -> None:
        """Route a receiver's deliveries through this queue (called by the context)."""
        if self.closed:
            raise UMError("event queue is closed")
        self._users.add(receiver)
        on_message = receiver.on_message
        on_messages = receiver.on_messages
        enqueue = self.enqueue

        if on_message is not None:

            def queued(msg: Any) -> None:
                enqueue(receiver, on_message, msg, KIND_MESSAGE, msg.type == 0)

            receiver.on_message = queued
        else:
            # No callback: the receiver's own async iterator; the queue then carries nothing.
            self._users.discard(receiver)
            raise UMError("a receiver using an event queue needs a callback")
        if on_messages is not None:

            def queued_many(msgs: list[Any]) -> None:
                enqueue(receiver, on_messages, msgs, KIND_MESSAGE, True)

            receiver.on_messages = queued_many

    def attach_source(self, source: Any) -> None:
        """Route a source's events (CONNECT, DISCONNECT, WAKEUP...) through this queue."""
        if self.closed:
            raise UMError("event queue is closed")
        self._users.add(source)
        on_event = source.on_event
        if on_event is None:
            return
        enqueue = self.enqueue

        def queued(code: int, info: object) -> None:
            enqueue(source, _call2, (on_event, code, info), KIND_SOURCE_EVENT, False)

        source.on_event = queued


def _call2(arg: tuple[Callable[[int, object], object], int, object]) -> object:
    fn, code, info = arg
    return fn(code, info)
