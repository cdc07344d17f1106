"""A daemon's life: refuse a bad configuration before binding, run on the best loop, stop cleanly.

Theory of operation
-------------------
1. **Validate, then bind.**  Everything that can be checked without binding is checked first; a
   :class:`~umcore.errors.ConfigError` becomes exactly one line on stderr,
   ``<prog>: <file>:<line>: <element>: <what>``, and exit status 1 (:func:`config_error_exit`;
   2 when the fault is in the command line itself, as argparse exits for its usage errors).
   No traceback: the operator needs the place and the reason, nothing else.  The steps every
   daemon's ``__main__`` shares are here: ``-v`` (:func:`validate_and_exit`: ``<file>: valid``
   and 0, or the one line and 1), opening the log (:func:`open_log_or_exit`: a file that cannot
   be opened is that one line too) and running the body (:func:`run_and_exit`: a socket that
   cannot bind is one line on stderr, one in the log, and exit 1; any other OSError out of the
   body is reported as what it is, never as "cannot listen").
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
import errno
import logging
import os
import signal
import socket
import sys
from collections.abc import Callable, Coroutine
from typing import Any, NoReturn, TypeVar

from umcore.errors import ConfigError

__all__ = [
    "COMMAND_LINE",
    "EXIT_CONFIG",
    "EXIT_FORCED",
    "EXIT_USAGE",
    "StopSignals",
    "config_error_exit",
    "detach",
    "new_event_loop",
    "open_log_or_exit",
    "run",
    "run_and_exit",
    "uvloop_available",
    "validate_and_exit",
]

# Exit statuses, one convention for every daemon (their man pages say the same): 1 when a file
# is wrong (the configuration, a log or pid file that cannot be written) or the daemon cannot
# start (a port in use); 2 when the command line is (an unknown option, a missing operand, a
# value out of range: argparse's own status for its usage errors).
EXIT_CONFIG = 1
EXIT_USAGE = 2
# ConfigError.source of an error in the command line itself (exit EXIT_USAGE).
COMMAND_LINE = "command line"
# 128 + SIGINT, the shell's convention for "killed by Ctrl-C".
EXIT_FORCED = 130

log = logging.getLogger("umcore.daemon")

# What binding a socket fails with (in use, not a local address, a privileged port): only these
# are reported as "cannot listen"; any other OSError is reported as what it is.
_BIND_ERRNOS = frozenset({errno.EADDRINUSE, errno.EADDRNOTAVAIL, errno.EACCES, errno.EPERM})


def config_error_exit(prog: str, exc: ConfigError | str) -> NoReturn:
    """Print ``<prog>: <exc>`` on stderr and exit: status 2 (:data:`EXIT_USAGE`) when the error
    is in the command line itself (``source`` :data:`COMMAND_LINE`), else 1."""
    sys.stderr.write(f"{prog}: {exc}\n")
    sys.stderr.flush()
    usage = isinstance(exc, ConfigError) and exc.source == COMMAND_LINE
    raise SystemExit(EXIT_USAGE if usage else EXIT_CONFIG)


def validate_and_exit(path: str | None, load: Callable[[str], object], file_word: str) -> NoReturn:
    """``-v``: load ``path`` with ``load`` (which raises ConfigError on any fault), print
    ``<path>: valid`` and exit 0.  Without a path, ConfigError "-v needs a <file_word> to
    check"; the caller turns ConfigError into :func:`config_error_exit`."""
    if path is None:
        raise ConfigError(f"-v needs a {file_word} to check", source=COMMAND_LINE)
    load(path)
    print(f"{path}: valid")
    raise SystemExit(0)


_L = TypeVar("_L")


def open_log_or_exit(
    prog: str, configure: Callable[[], _L], *, source: str | None, what: str
) -> _L:
    """``configure()`` (the daemon's log set-up); if the log file cannot be opened (OSError),
    the one-line exit ``<prog>: <source>: <what>: cannot open the log file: <reason>``."""
    try:
        return configure()
    except OSError as exc:
        config_error_exit(
            prog,
            ConfigError(
                f"cannot open the log file: {exc.strerror or exc}", source=source, what=what
            ),
        )


def run_and_exit(
    prog: str,
    main: Coroutine[Any, Any, int],
    *,
    listen: tuple[str, int],
    logger: logging.Logger,
    use_uvloop: bool = True,
) -> NoReturn:
    """:func:`run` the daemon's body and exit with its status.  An OSError out of it means the
    daemon could not bind ``listen`` (host, port): logged, one line on stderr, status 1."""
    try:
        status = run(main, use_uvloop=use_uvloop)
    except OSError as exc:
        host, port = listen
        if exc.errno in _BIND_ERRNOS or isinstance(exc, socket.gaierror):
            logger.error("cannot listen on %s:%d: %s", host, port, exc)
            sys.stderr.write(f"{prog}: cannot listen on {host}:{port}: {exc.strerror or exc}\n")
        else:  # not a bind failure: say what it was (the log keeps the traceback)
            logger.exception("stopped by an error: %s", exc)
            sys.stderr.write(f"{prog}: stopped by an error: {exc}\n")
        status = 1
    logging.shutdown()
    raise SystemExit(status)


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
                try:
                    self.on_reload()
                except Exception as exc:  # a reload that fails must not stop the daemon
                    log.error("SIGHUP: reload failed, running on: %s", exc)
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


def detach(*, keep_output: bool) -> None:
    """``-f`` (UM's daemons): fork; the parent returns 0 to the shell, the child leaves the
    session with standard input on /dev/null, and standard output and error too unless the log
    goes there (``keep_output``: console logging)."""
    sys.stdout.flush()
    sys.stderr.flush()
    if os.fork() > 0:
        os._exit(0)
    os.setsid()
    devnull = os.open(os.devnull, os.O_RDWR)
    for fd in (0,) if keep_output else (0, 1, 2):
        os.dup2(devnull, fd)
    os.close(devnull)
