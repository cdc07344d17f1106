"""A source session with the test's clock and a capturing writer, built from the engine's parts.

The send paths of :class:`umcore.api.Source` (an :class:`~umcore.engine.source.EngineSource`)
run on a real :class:`~umcore.transport.tcp.TcpSourceSession` core and a real
:class:`~umcore.engine.source.SourceSession` (its write, flush and timer rules), handed the
adapters the engine would hand them:

- :class:`ClockLoop`: the loop as a source session sees it -- ``time()`` reads the test's
  clock, and ``call_at`` records the deadline the session's timer arms; :meth:`ClockLoop.advance`
  moves the clock and runs what came due, in deadline order (the loop firing the timer).
- :class:`CaptureWriter`: a :class:`~umcore.engine.source.Writer` keeping every write; it can
  block the session on a write (as a receiver connection over its buffer limit does) and
  unblock it (``on_unblock``: WAKEUP).
- :class:`HarnessEngine`: what a source and its session read of their engine.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

from umcore.api import Source
from umcore.engine.source import SourceSession, completed_future
from umcore.transport.tcp import TcpSourceSession
from umcore.wire import lbmc

__all__ = [
    "CaptureWriter",
    "ClockLoop",
    "Harness",
    "HarnessEngine",
    "data_messages",
    "make_sources",
]

START = 100.0  # the test clock's first reading
# Timer deadlines one advance may run (a clock jump over many TSNI intervals runs a few dozen).
MAX_FIRES = 10_000


class _Handle:
    __slots__ = ("callback", "cancelled", "when")

    def __init__(self, when: float, callback: Callable[[], object]) -> None:
        self.when = when
        self.callback = callback
        self.cancelled = False

    def cancel(self) -> None:
        self.cancelled = True


class ClockLoop:
    """``time()`` and ``call_at`` of an event loop, on the test's clock (module docstring)."""

    def __init__(self, now: float = START) -> None:
        self.now = now
        #: How many times a timer was armed (``call_at`` calls).
        self.armed = 0
        #: How many times an armed deadline ran.
        self.fired = 0
        self._handles: list[_Handle] = []

    def time(self) -> float:
        return self.now

    def call_at(self, when: float, callback: Callable[[], object]) -> _Handle:
        self.armed += 1
        h = _Handle(when, callback)
        self._handles.append(h)
        return h

    def advance(self, to: float) -> None:
        """Move the clock to ``to``, running every deadline that comes due on the way (the
        clock reads each deadline while it runs)."""
        for _ in range(MAX_FIRES):
            live = [h for h in self._handles if not h.cancelled]
            self._handles = live
            due = [h for h in live if h.when <= to]
            if not due:
                break
            h = min(due, key=lambda x: x.when)
            self._handles.remove(h)
            self.now = max(self.now, h.when)
            self.fired += 1
            h.callback()
        else:
            raise AssertionError("the timer kept coming due")
        self.now = max(self.now, to)


class CaptureWriter:
    """A source session's writer that keeps what is written (module docstring)."""

    def __init__(self) -> None:
        self.chunks: list[bytes] = []
        self.paused = False
        self.single = None  # no one-receiver shortcut: every write goes through write()
        self.port = 14371
        self.on_connect: Callable[[str], None] | None = None
        self.on_disconnect: Callable[[str], None] | None = None
        self.on_unblock: Callable[[], None] | None = None
        #: The next write blocks the session.
        self.block_next = False
        self._drained: asyncio.Event | None = None

    @property
    def receivers(self) -> int:
        return 1

    def write(self, data: bytes) -> None:
        self.chunks.append(bytes(data))
        if self.block_next:
            self.block_next = False
            self.paused = True

    async def writable(self) -> None:
        while self.paused:
            if self._drained is None:
                self._drained = asyncio.Event()
            await self._drained.wait()

    def unblock(self) -> None:
        """The slow receiver drained: sends may go on (and WAKEUP follows a WouldBlock)."""
        self.paused = False
        if self._drained is not None:
            self._drained.set()
            self._drained = None
        if self.on_unblock is not None:
            self.on_unblock()

    async def close(self) -> None:
        pass


class HarnessEngine:
    """What a topic source and its session read of their engine."""

    def __init__(self, loop: ClockLoop) -> None:
        self.loop = loop
        self.done = completed_future(asyncio.get_running_loop())
        self.advertised_ip = "127.0.0.1"
        self.send_blocked = 0
        self.send_would_block = 0

    async def source_closed(self, src: Any) -> None:
        session = src.session
        session.core.remove_topic(src.tidx)
        session.sources.remove(src)
        if not session.sources:
            await session.close()


class Harness:
    """One TCP source session on the test's clock and its sources."""

    def __init__(
        self,
        engine: HarnessEngine,
        session: SourceSession,
        core: TcpSourceSession,
        writer: CaptureWriter,
        sources: list[Source],
    ) -> None:
        self.engine = engine
        self.loop = engine.loop
        self.session = session
        self.core = core
        self.writer = writer
        self.sources = sources
        #: Source events (code, info) of every source, in order.
        self.events: list[tuple[str, int, object]] = []

    @property
    def deadline(self) -> float | None:
        """The deadline the session's timer is armed for."""
        return self.session.timer.deadline


async def make_sources(*topics: str, **core_options: Any) -> Harness:
    """Sources of ``topics`` on one new TCP session (``core_options``: the core's keyword
    arguments, the registry's defaults otherwise)."""
    loop = ClockLoop()
    engine = HarnessEngine(loop)
    core = TcpSourceSession(0x1234ABCD, **core_options)
    writer = CaptureWriter()
    session = SourceSession(engine, "tcp", core, writer)  # type: ignore[arg-type]
    h = Harness(engine, session, core, writer, [])
    for topic in topics:

        def on_event(code: int, info: object, topic: str = topic) -> None:
            h.events.append((topic, code, info))

        src = Source(engine, topic, session, on_event)  # type: ignore[arg-type]
        session.sources.append(src)
        h.sources.append(src)
    return h


def data_messages(chunks: list[bytes]) -> list[lbmc.LBMCMessage]:
    """The LBMC data messages of what was written, in order."""
    msgs = lbmc.iter_messages(b"".join(chunks))
    return [x for x in msgs if x.msg_type == lbmc.MSG_DATA]
