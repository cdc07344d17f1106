"""A daemon's life: refuse a bad configuration before binding, run on the best loop, stop cleanly.

Theory of operation
-------------------
1. **Validate, then bind.**  Everything that can be checked without binding is checked first; a
   :class:`~umcore.errors.ConfigError` becomes exactly one line on stderr,
   ``<prog>: <file>:<line>: <element>: <what>``, and exit status 1 (:func:`config_error_exit`).
   No traceback: the operator needs the place and the reason, nothing else.
2. **The loop.**  :func:`run` runs the daemon's coroutine on uvloop when it is installed (it
   drains sockets and runs timers faster), else on asyncio's default loop.
3. **Signals.**  :class:`StopSignals` turns SIGTERM and SIGINT into a graceful stop (the daemon's
   coroutine awaits :attr:`StopSignals.stopping`, closes its sockets and returns); a second SIGINT
   while stopping forces an immediate exit (status 130), for a stop that hangs.  SIGHUP calls the
   daemon's reload hook (re-open the log file).  Where ``loop.add_signal_handler`` does not exist
   (Windows) the handlers are installed with :func:`signal.signal` and hop onto the loop with
   ``call_soon_threadsafe``; Windows has no SIGHUP, so there is no reload there.
"""

from __future__ import annotations

import asyncio
import logging
import os
import signal
import sys
from collections.abc import Callable, Coroutine
from typing import Any, NoReturn

from umcore.errors import ConfigError

__all__ = [
    "EXIT_CONFIG",
    "EXIT_FORCED",
    "StopSignals",
    "config_error_exit",
    "new_event_loop",
    "run",
    "uvloop_available",
]

EXIT_CONFIG = 1
# 128 + SIGINT, the shell's convention for "killed by Ctrl-C".
EXIT_FORCED = 130

log = logging.getLogger("umcore.daemon")


def config_error_exit(prog: str, exc: ConfigError | str) -> NoReturn:
    """Print ``<prog>: <exc>`` on stderr and exit with status 1."""
    sys.stderr.write(f"{prog}: {exc}\n")
    sys.stderr.flush()
    raise SystemExit(EXIT_CONFIG)


def uvloop_available() -> bool:
    try:
        import uvloop  # noqa: F401
    except ImportError:
        return False
    return True


def new_event_loop(*, use_uvloop: bool = True) -> asyncio.AbstractEventLoop:
    """uvloop's loop when installed (and wanted), else asyncio's default."""
    if use_uvloop:
        try:
            import uvloop
        except ImportError:
            pass
        else:
            loop: asyncio.AbstractEventLoop = uvloop.new_event_loop()
            return loop
    return asyncio.new_event_loop()


def run(main: Coroutine[Any, Any, int], *, use_uvloop: bool = True) -> int:
    """Run a daemon's body to completion and return its exit status."""
    with asyncio.Runner(loop_factory=lambda: new_event_loop(use_uvloop=use_uvloop)) as runner:
        return runner.run(main)


class StopSignals:
    """SIGTERM/SIGINT -> :attr:`stopping` is set; second SIGINT -> exit now; SIGHUP -> reload."""

    def __init__(
        self,
        loop: asyncio.AbstractEventLoop,
        *,
        on_reload: Callable[[], object] | None = None,
        force_exit: Callable[[int], object] = os._exit,
    ) -> None:
        self.loop = loop
        self.on_reload = on_reload
        self.stopping = asyncio.Event()
        #: The name of the signal that asked us to stop, for the log.
        self.reason: str | None = None
        self._force_exit = force_exit
        self._installed: list[signal.Signals] = []
        self._previous: dict[signal.Signals, Any] = {}

    def install(self) -> None:
        wanted = [signal.SIGTERM, signal.SIGINT]
        if hasattr(signal, "SIGHUP"):
            wanted.append(signal.SIGHUP)
        for sig in wanted:
            try:
                self.loop.add_signal_handler(sig, self._on_signal, sig)
            except NotImplementedError:
                # Windows: no add_signal_handler.  signal.signal runs the handler in the main
                # thread between bytecodes; hop onto the loop to touch its state.
                self._previous[sig] = signal.signal(sig, self._threadsafe)
            except (RuntimeError, ValueError):  # not the main thread: the embedder handles it
                continue
            self._installed.append(sig)

    def _threadsafe(self, signum: int, frame: object) -> None:
        self.loop.call_soon_threadsafe(self._on_signal, signal.Signals(signum))

    def _on_signal(self, sig: signal.Signals) -> None:
        if hasattr(signal, "SIGHUP") and sig == signal.SIGHUP:
            log.info("SIGHUP: re-opening the log file")
            if self.on_reload is not None:
                self.on_reload()
            return
        if self.stopping.is_set():
            if sig == signal.SIGINT:
                log.warning("second SIGINT while stopping: exiting now")
                logging.shutdown()
                self._force_exit(EXIT_FORCED)
            return
        self.reason = sig.name
        log.info("%s: stopping", sig.name)
        self.stopping.set()

    def uninstall(self) -> None:
        for sig in self._installed:
            if sig in self._previous:
                signal.signal(sig, self._previous.pop(sig))
            else:
                self.loop.remove_signal_handler(sig)
        self._installed.clear()
