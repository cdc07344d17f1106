"""Sequential mode (``operational_mode`` "sequential"): the application drives the context.

Theory of operation
-------------------
UM runs a context in one of two modes (seed 003 "Context object", "Extended process events"):
*embedded*, where UM's own context thread does topic resolution, timers and receive callbacks,
and *sequential*, where the application lends it a thread by calling
``lbm_context_process_events(ctx, msec)`` in a loop, and ``lbm_context_unblock`` makes a
running call return early.

In pyum the asyncio event loop plays the context thread.  An ``async`` application already
drives the loop (``asyncio.run``): that *is* sequential mode, and nothing more is needed.
:class:`SequentialContext` is for the synchronous application that wants UM's call shape: it
owns a private event loop that runs only inside :meth:`SequentialContext.process_events`, so
callbacks run on the caller's thread, during that call, as in UM.

- ``sc = SequentialContext(attributes)`` creates the loop and the context (``operational_mode``
  is set to "sequential" in the context's options);
- ``sc.call(coro)`` runs one of the context's coroutines to completion on that loop (creating
  sources and receivers, ``await src.send``); plain methods (``src.send_nowait``,
  ``ctx.send_uim``) may be called directly between calls;
- ``sc.process_events(timeout)`` runs the loop for ``timeout`` seconds; it returns True when
  :meth:`SequentialContext.unblock` (callable from any thread, or from a callback) ended it
  early, False when the time ran out;
- ``sc.close()`` closes the context's sources and receivers, the context, then the loop.

USER_TIME / NO_MAIN_LOOP_MUTEX of ``process_events_ex`` have no counterpart: the loop's clock
is the monotonic clock and there is no mutex to skip.  A SequentialContext may not be made or
driven from a thread whose event loop is running (that loop already is the context thread).
"""

from __future__ import annotations

import asyncio
from collections.abc import Coroutine, Mapping
from typing import Any, TypeVar

from umcore.api.context import Context
from umcore.config.attributes import Attributes
from umcore.errors import UMError

__all__ = ["SequentialContext"]

_T = TypeVar("_T")


def _no_running_loop(what: str) -> None:
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return
    raise UMError(f"{what}: an event loop runs in this thread (use the async API there)")


class SequentialContext:
    """A context driven by :meth:`process_events` (see the module docstring)."""

    def __init__(self, attributes: Any = None, *, name: str | None = None) -> None:
        _no_running_loop("SequentialContext")
        self.loop = asyncio.new_event_loop()
        self._wake: asyncio.Future[bool] | None = None
        self._pending_unblock = False
        attrs = _sequential(attributes)
        try:
            self.context: Context = self.loop.run_until_complete(Context.create(attrs, name=name))
        except BaseException:
            self.loop.close()
            raise

    def call(self, coro: Coroutine[Any, Any, _T]) -> _T:
        """Run ``coro`` (a coroutine of the context's API) to completion on the context's loop;
        the context processes events meanwhile."""
        _no_running_loop("SequentialContext.call")
        return self.loop.run_until_complete(coro)

    def process_events(self, timeout: float) -> bool:
        """``lbm_context_process_events``: run the context for ``timeout`` seconds (callbacks
        run now, on this thread).  True when :meth:`unblock` ended it early."""
        _no_running_loop("SequentialContext.process_events")
        if timeout < 0:
            raise UMError(f"process_events timeout must be >= 0, not {timeout}")
        loop = self.loop
        if self._pending_unblock:
            self._pending_unblock = False
            return True
        wake: asyncio.Future[bool] = loop.create_future()
        self._wake = wake
        handle = loop.call_later(timeout, _settle, wake, False)
        try:
            return loop.run_until_complete(wake)
        finally:
            handle.cancel()
            self._wake = None

    def unblock(self) -> None:
        """``lbm_context_unblock``: make the running (or the next) :meth:`process_events` return
        at once.  Thread-safe."""
        self.loop.call_soon_threadsafe(self._unblock)

    def _unblock(self) -> None:
        wake = self._wake
        if wake is None:
            self._pending_unblock = True
        else:
            _settle(wake, True)

    def close(self) -> None:
        """Close the context (its sources and receivers first), then the loop."""
        if self.loop.is_closed():
            return
        try:
            self.loop.run_until_complete(self.context.__aexit__(None, None, None))
        finally:
            self.loop.close()

    def __enter__(self) -> SequentialContext:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _settle(fut: asyncio.Future[bool], value: bool) -> None:
    if not fut.done():
        fut.set_result(value)


def _sequential(attributes: Any) -> Any:
    """``attributes`` with ``operational_mode`` "sequential"."""
    if attributes is None:
        return {"operational_mode": "sequential"}
    if isinstance(attributes, Attributes):
        dup = attributes.copy()
        dup.set("operational_mode", "sequential")
        return dup
    if isinstance(attributes, Mapping):
        return {**attributes, "operational_mode": "sequential"}
    return attributes
