"""The send side of the engine: transport sessions of this context's sources, and topic sources.

Theory of operation
-------------------
A :class:`SourceSession` is one transport session this context sources on: its sans-IO core (a
:class:`~umcore.transport.batching.BatchingSource`: TCP, LBT-RU or LBT-RM), the adapter that
writes the core's output (:class:`~umcore.aio.tcp.SourceListener` for TCP, an
:class:`~umcore.aio.lbt.LbtSourceEndpoint` for the others: both have the :class:`Writer`
shape), one re-armed timer, and the topic sources mapped onto it.

An :class:`EngineSource` is one topic source on a session (the API's ``Source`` is one).  Its
data path's common case -- a message joining the open run of a batch -- is
:meth:`TopicSender.send <umcore.transport.batching.TopicSender.send>`, in the module owning the
batching state; everything else comes to :meth:`EngineSource.send_slow`, which sends through
the core's general rules (:meth:`BatchingSource.send`, ``send_one``, or with extra headers
through :mod:`umcore.engine.features`), writes what the core handed on, closes the open run when
that write blocked the session, and re-arms the session's timer when the core asks.

Back-pressure: :meth:`EngineSource.send` returns an awaitable; while the session is blocked by
a slow receiver (``transport_session_maximum_buffer``) it is a coroutine that waits for the
session to drain (UM's blocking send).  :meth:`EngineSource.send_nowait` raises
:class:`~umcore.errors.WouldBlock` instead, and a WAKEUP source event follows once the session
drained (seed 2.3: only after an EWOULDBLOCK).  Source events: CONNECT / DISCONNECT per
receiver connection, WAKEUP.  An exception raised by ``on_event`` is logged and counted.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from typing import Any, Protocol

from umcore.aio.lbt import SourceTimer
from umcore.aio.timer import CoreTimer
from umcore.engine import message as m
from umcore.errors import UMError, WouldBlock
from umcore.transport.batching import BatchingSource, Step, TopicSender
from umcore.wire import lbmc, lbmr

__all__ = ["EngineSource", "OnSourceEvent", "SourceHost", "SourceSession", "Writer"]

log = logging.getLogger("umcore.engine")

OnSourceEvent = Callable[[int, object], object]
# ``send_nowait``'s default ``app_headers`` (the empty tuple, a singleton in CPython): any other
# empty value takes the general path, which treats it alike.
_NO_HEADERS: tuple[()] = ()


class ExtendedSend(Protocol):
    """Sends that need the features (:mod:`umcore.engine.features`): extra headers, retention."""

    def source_send(
        self,
        src: EngineSource,
        data: bytes | memoryview,
        flush: bool,
        properties: Any,
        app_headers: Any,
        request: lbmc.Request | None = None,
    ) -> bytes | None: ...


class SourceHost(Protocol):
    """What topic sources and their sessions need of their context (the engine)."""

    send_blocked: int
    send_would_block: int

    @property
    def loop(self) -> asyncio.AbstractEventLoop: ...

    @property
    def done(self) -> asyncio.Future[None]: ...

    @property
    def advertised_ip(self) -> str: ...

    @property
    def features(self) -> ExtendedSend: ...

    async def source_closed(self, src: EngineSource) -> None: ...


class Writer(Protocol):
    """A source session's adapter (TCP listener or LBT source endpoint)."""

    #: True while a receiver is too slow (the session's output is held back).
    paused: bool
    #: The one receiver connection to write a chunk to directly, when the adapter has such a
    #: shortcut (TCP with one receiver), else None: :meth:`write` then.
    single: Any
    port: int
    on_connect: Callable[[str], None] | None
    on_disconnect: Callable[[str], None] | None
    on_unblock: Callable[[], None] | None

    @property
    def receivers(self) -> int: ...

    def write(self, data: bytes) -> None: ...

    async def writable(self) -> None: ...

    async def close(self) -> None: ...


class SourceSession:
    """One transport session of this context: core, writer, timer and its sources."""

    def __init__(
        self,
        engine: SourceHost,
        kind: str,
        core: BatchingSource,
        writer: Writer,
        *,
        timer: SourceTimer | None = None,
        info: Callable[[str], tuple[lbmr.TCPInfo | lbmr.LBTRMInfo, str]] | None = None,
    ) -> None:
        self.engine = engine
        #: ``tcp``, ``lbtru`` or ``lbtrm``.
        self.kind = kind
        self.core = core
        self.writer = writer
        self.sources: list[EngineSource] = []
        loop = engine.loop
        #: Hands the core the deadline that fired when the loop ran it early (SourceTimer).
        self.timer: CoreTimer = timer if timer is not None else SourceTimer(loop, self._on_timer)
        self._info = info
        #: The address a TCP session listens on when not "any": its TIRs name it instead of
        #: the context's advertised address.
        self.ip: str | None = None
        writer.on_connect = self._on_connect
        writer.on_disconnect = self._on_disconnect
        writer.on_unblock = self._on_unblock

    def transport_info(self, ip: str) -> tuple[lbmr.TCPInfo | lbmr.LBTRMInfo, str]:
        """What a TIR advertises for this session (address ``ip``), and UM's source string."""
        if self._info is not None:
            return self._info(ip)
        core: Any = self.core
        port = self.writer.port
        sid = core.session_id
        ip = self.ip or ip
        return (
            lbmr.TCPInfo(ip, port, sid if core.use_session_id else None),
            f"TCP:{ip}:{port}:{sid:08x}",
        )

    def _on_timer(self) -> None:
        now = self.engine.loop.time()
        timer = self.timer
        if isinstance(timer, SourceTimer) and timer.fired is not None and timer.fired > now:
            now = timer.fired  # fired early by the loop's rounding (see SourceTimer)
        out = self.core.handle_timer(now)
        if out:
            self.writer.write(out)
        self.core.timer_dirty = False
        self.timer.arm(self.core.next_timer())

    def write(self, out: bytes | None) -> None:
        """Write what the core handed on; close the open run if that blocked the session (the
        fast case must stop until it drains); re-arm the timer when the core asks."""
        core = self.core
        w = self.writer
        if out is not None:
            w.write(out)
            if w.paused:
                core.end_run()
        if core.timer_dirty:
            self.rearm()

    def rearm(self) -> None:
        """The core's next deadline moved: re-arm the session's timer."""
        core = self.core
        core.timer_dirty = False
        self.timer.arm(core.next_timer())

    def flush(self) -> None:
        out = self.core.flush()
        if out is not None:
            self.writer.write(out)
        self.timer.arm(self.core.next_timer())

    def _on_connect(self, peer: str) -> None:
        for s in self.sources:
            s.event(m.SRC_EVENT_CONNECT, peer)

    def _on_disconnect(self, peer: str) -> None:
        for s in self.sources:
            s.event(m.SRC_EVENT_DISCONNECT, peer)

    def _on_unblock(self) -> None:
        for s in self.sources:
            if s.wants_wakeup:
                s.wants_wakeup = False
                s.event(m.SRC_EVENT_WAKEUP, None)

    async def close(self) -> None:
        self.timer.cancel()
        out = self.core.flush()
        if out:
            self.writer.write(out)
        await self.writer.close()


class EngineSource(TopicSender):
    """A topic source on one of the context's transport sessions (see the module docstring)."""

    def __init__(
        self,
        engine: SourceHost,
        topic: str,
        session: SourceSession,
        on_event: OnSourceEvent | None,
    ) -> None:
        loop = engine.loop
        super().__init__(session.core, topic, loop.time(), engine.done)
        self.engine = engine
        #: The context this source belongs to (the engine; the API's Context).
        self.context: Any = engine
        self.topic = topic
        self.session = session
        self.writer = session.writer
        self.on_event = on_event
        self._time = loop.time
        self.wants_wakeup = False
        self.closed = False
        #: Late-join retention and transport index (umcore.engine.features), set by it.
        self.ext: Any = None
        #: True while the plain paths may run: open, no retention.
        self.plain = True
        #: Exceptions raised by ``on_event`` (logged, counted, never propagated).
        self.callback_errors = 0
        #: A persistent source's send gate (umcore.engine.persist.SourcePersistence): its
        #: ``hold()`` raises UMENoReg when sends are refused and is True while the flight size
        #: blocks; ``await wait()`` until that may have changed; ``core.clear`` True: a send
        #: may go at once (what send_nowait reads first).  None: not persistent.
        self.gate: Any = None
        self.transport_info, self.source_string = session.transport_info(engine.advertised_ip)

    @property
    def receivers(self) -> int:
        """Receivers connected to this source's transport session."""
        return self.writer.receivers

    def set_extension(self, ext: Any) -> None:
        """Late-join retention (:mod:`umcore.engine.features`): every message of a retaining
        source must be seen, so the fast case and the plain paths stop."""
        self.ext = ext
        self.plain = not self.closed and (ext is None or ext.retention is None)
        self.set_fast(self.plain)

    def event(self, code: int, info: object) -> None:
        if self.on_event is None:
            return
        try:
            self.on_event(code, info)
        except Exception:
            self.callback_errors += 1
            log.exception("source event callback failed (topic %r)", self.topic)

    def events(self, items: list[tuple[int, Any]]) -> None:
        """:meth:`event` for each ``(code, info)`` of ``items``, in order (what a persistence
        core queued, taken at once: one call per event less on the data path)."""
        for code, info in items:
            cb = self.on_event
            if cb is None:
                return
            try:
                cb(code, info)
            except Exception:
                self.callback_errors += 1
                log.exception("source event callback failed (topic %r)", self.topic)

    def check(self) -> None:
        if self.closed:
            raise UMError(f"source for {self.topic!r} is closed")

    def send_extended(
        self,
        data: bytes | memoryview,
        flush: bool,
        properties: Any,
        app_headers: Any,
        request: lbmc.Request | None = None,
    ) -> bytes | None:
        """A message with properties, application headers or a request header, or of a
        retaining source: through :mod:`umcore.engine.features`."""
        return self.engine.features.source_send(self, data, flush, properties, app_headers, request)

    def send_slow(
        self, data: bytes | memoryview, flush: bool, properties: Any, app_headers: Any
    ) -> Awaitable[None]:
        """:meth:`send` for everything but a message joining the open run (module docstring)."""
        writer = self.writer
        gate = self.gate
        if writer.paused or self.closed or (gate is not None and gate.hold()):
            return self._send_blocked(data, flush, properties, app_headers)
        if properties is None and not app_headers and self.plain:
            clock = self._time  # (a bound method held in an attribute: called from a local)
            now = clock()
            if not flush:
                step = self.send_step(data, now)
                if step is None:  # a batch start: nothing to write, no deadline moved
                    return self.done  # type: ignore[return-value]
                if step is not Step.UNHANDLED:  # a batch handed on
                    writer.write(step)
                    if writer.paused:
                        self.core.end_run()  # that write blocked the session
                    return self.done  # type: ignore[return-value]
            out = self.core.send(self.tidx, data, now, flush)
        else:
            out = self.send_extended(data, flush, properties, app_headers)
        self.session.write(out)
        return self.done  # type: ignore[return-value]

    async def _send_blocked(
        self, data: bytes | memoryview, flush: bool, properties: Any, app_headers: Any
    ) -> None:
        await self.wait_writable()
        await self.send(data, flush=flush, properties=properties, app_headers=app_headers)

    async def wait_writable(self) -> None:
        """UM's blocking send: wait while a slow receiver blocks the session, or a persistent
        source's flight size is full (each wait counted); UMError if the source is or gets
        closed (UMENoReg if it may not send)."""
        writer = self.writer
        while True:
            self.check()
            if writer.paused:
                self.engine.send_blocked += 1
                await writer.writable()
                continue
            gate = self.gate
            if gate is not None and gate.hold():
                self.engine.send_blocked += 1
                await gate.wait()
                continue
            return

    def refuse_if_blocked(self) -> None:
        """UM's non-blocking send: :class:`WouldBlock` while a slow receiver blocks the
        session, and a WAKEUP event once it drained."""
        if self.writer.paused:
            self.wants_wakeup = True
            self.engine.send_would_block += 1
            raise WouldBlock(f"transport session of {self.topic!r} is blocked by a slow receiver")
        gate = self.gate
        if gate is not None and gate.hold():
            self.wants_wakeup = True
            self.engine.send_would_block += 1
            raise WouldBlock(f"source {self.topic!r}: persistence flight size is full")

    def send_nowait(
        self,
        data: bytes | memoryview,
        flush: bool = False,
        properties: Any = None,
        app_headers: Any = (),
    ) -> None:
        """Send one message or raise :class:`WouldBlock` (UM's ``LBM_SRC_NONBLOCK``); a WAKEUP
        source event follows when sending may go on.  With ``flush`` a plain message takes the
        core's single-message path (the latency case)."""
        writer = self.writer
        if (
            flush
            and self.plain
            and properties is None
            and app_headers is _NO_HEADERS  # the default: identity, not a truth test (a C call)
            and not writer.paused
        ):
            core = self.core
            clock = self._time  # (a bound method held in an attribute: called from a local)
            out = core.send_one(self.tidx, data, clock())
            if out is not None:
                one = writer.single
                if one is not None:
                    one.write(out)
                else:
                    writer.write(out)
                if writer.paused:
                    core.end_run()  # that write blocked the session
            if core.timer_dirty:
                self.session.rearm()
            return
        if self.closed:
            self.check()
        gate = self.gate
        if writer.paused or (gate is not None and not gate.core.clear):
            self.refuse_if_blocked()  # (a persistent source's gate open: one attribute read)
        if not self.plain:
            # A retaining (or persistent) source: send_slow's checks were just made (open, not
            # paused, the gate open); its path is the features' send (send_extended's).
            out = self.engine.features.source_send(self, data, flush, properties, app_headers)
            self.session.write(out)
        elif flush:
            self.send_slow(data, flush, properties, app_headers)
        else:
            self.send(data, properties=properties, app_headers=app_headers)

    def flush(self) -> None:
        """Send what implicit batching holds now (``lbm_src_flush``)."""
        self.session.flush()

    async def close(self) -> None:
        """Delete the source: batched messages go out first; a session left without sources
        closes, which gives its receivers EOS."""
        if self.closed:
            return
        self.flush()
        self.closed = True
        self.plain = False
        self.set_fast(False)
        await self.engine.source_closed(self)


def completed_future(loop: asyncio.AbstractEventLoop) -> asyncio.Future[None]:
    """A completed future: what :meth:`EngineSource.send` returns when it sent at once
    (awaiting it costs less than creating a coroutine per message)."""
    done: asyncio.Future[None] = loop.create_future()
    done.set_result(None)
    return done
