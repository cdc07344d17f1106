"""Daemon logging: console or file, timestamps and levels, re-opened on SIGHUP, rate-limited.

Theory of operation
-------------------
:func:`configure` points the daemon's root logger at stdout (UM's daemons log to stdout unless a
log file is configured: ``-L`` or the ``<log>`` element) or at a file, with lines like::

    2024-05-01 12:00:00.123 [INFO]: lbmrd: listening on 127.0.0.1:15380

File logging re-opens the file on :meth:`LogSetup.reopen`, which the daemon calls on SIGHUP so that
logrotate's "move, then HUP" works.  :class:`RateLimitedLog` bounds messages a peer can trigger at
will (a malformed datagram per packet would otherwise fill a disk): at most ``burst`` lines per
``period`` per key, then one summary line saying how many were suppressed.
"""

from __future__ import annotations

import io
import logging
import sys
from collections.abc import Callable
from typing import cast

__all__ = ["LOG_FORMAT", "LogSetup", "RateLimitedLog", "configure", "configure_log_element"]

LOG_FORMAT = "%(asctime)s.%(msecs)03d [%(levelname)s]: %(name)s: %(message)s"
DATE_FORMAT = "%Y-%m-%d %H:%M:%S"

_log = logging.getLogger("umcore.daemon")


class LogSetup:
    """The handler :func:`configure` installed; ``reopen()`` re-opens a log file."""

    def __init__(self, handler: logging.Handler, path: str | None) -> None:
        self.handler = handler
        self.path = path

    def reopen(self) -> bool:
        """Re-open the log file (after logrotate moved it); no-op on the console.

        The new file is opened before the old one is let go: when it cannot be opened (its
        directory removed, a full disk, permissions) the daemon keeps logging to the file it
        has, logs one error line saying so there, and runs on.  True if re-opened (or console)."""
        handler = self.handler
        if not isinstance(handler, logging.FileHandler):
            return True
        try:
            # What FileHandler opens, through its documented attributes (its own opener is
            # private): the same file, mode, encoding and error handling.
            stream = open(  # noqa: SIM115 - the handler owns the stream and closes it
                handler.baseFilename,
                handler.mode,
                encoding=handler.encoding,
                errors=handler.errors,
            )
        except OSError as exc:
            msg = (
                f"cannot re-open the log file {handler.baseFilename}: {exc.strerror or exc};"
                " still logging to the file already open"
            )
            record = _log.makeRecord(_log.name, logging.ERROR, __file__, 0, msg, (), None)
            _log.handle(record)
            # The file may be out of anyone's sight (its directory removed): stderr too.
            sys.stderr.write(handler.format(record) + "\n")
            sys.stderr.flush()
            return False
        old = handler.setStream(cast(io.TextIOWrapper, stream))  # text mode: one
        if old is not None:
            old.close()
        return True

    def close(self) -> None:
        logging.getLogger().removeHandler(self.handler)
        self.handler.close()


def configure(logfile: str | None, *, level: int = logging.INFO) -> LogSetup:
    """Send all logging to ``logfile`` (appending) or to stdout.  Raises OSError if the file
    cannot be opened (the caller turns that into its one-line start-up error)."""
    handler: logging.Handler
    if logfile:
        handler = logging.FileHandler(logfile, mode="a", encoding="utf-8", delay=False)
    else:
        handler = logging.StreamHandler(sys.stdout)
    handler.setFormatter(logging.Formatter(LOG_FORMAT, DATE_FORMAT))
    root = logging.getLogger()
    for old in list(root.handlers):
        root.removeHandler(old)
    root.addHandler(handler)
    root.setLevel(level)
    return LogSetup(handler, logfile)


def configure_log_element(
    kind: str,
    path: str,
    *,
    size_mb: int,
    frequency: str,
    max_history: int,
    compression: str,
    total_size_cap_mb: int = 1000,
    level: int = logging.INFO,
) -> LogSetup:
    """A daemon's ``<log type=... >FILE</log>``: a rolling file (:mod:`umcore.daemon.logroll`:
    size, daily/hourly, history, compression) when ``kind`` is ``file`` and ``path`` is given,
    else stdout.  Raises OSError if the file cannot be opened."""
    from umcore.daemon.logroll import RollingFileHandler

    handler: logging.Handler
    if kind == "file" and path:
        handler = RollingFileHandler(
            path, size_mb=size_mb, frequency=frequency, max_history=max_history,
            total_size_cap_mb=total_size_cap_mb, compression=compression,
        )  # fmt: skip
        logfile: str | None = path
    else:
        handler = logging.StreamHandler(sys.stdout)
        logfile = None
    handler.setFormatter(logging.Formatter(LOG_FORMAT, DATE_FORMAT))
    root = logging.getLogger()
    for old in list(root.handlers):
        root.removeHandler(old)
    root.addHandler(handler)
    root.setLevel(level)
    return LogSetup(handler, logfile)


class RateLimitedLog:
    """At most ``burst`` messages per ``period`` seconds per key; the rest are counted and
    summarised in the next message that gets through.  ``clock`` is a monotonic time source."""

    # Keys are chosen by the caller (a reason, not a peer address) so this table stays small;
    # the bound is a safety net against a caller keying by something unbounded.
    MAX_KEYS = 1024

    def __init__(
        self,
        logger: logging.Logger,
        clock: Callable[[], float],
        *,
        period: float = 10.0,
        burst: int = 5,
    ) -> None:
        self.logger = logger
        self.clock = clock
        self.period = period
        self.burst = burst
        self._windows: dict[str, list[float | int]] = {}  # key -> [window start, sent, suppressed]
        #: Messages suppressed since start, all keys.
        self.suppressed = 0

    def log(self, level: int, key: str, msg: str, *args: object) -> bool:
        """Log unless ``key`` used up its burst in the current period; True if logged."""
        now = self.clock()
        window = self._windows.get(key)
        if window is None or now - window[0] >= self.period:
            held = int(window[2]) if window is not None else 0
            if window is None and len(self._windows) >= self.MAX_KEYS:
                self._windows.clear()
            window = [now, 0, 0]
            self._windows[key] = window
            if held:
                msg = f"{msg} ({held} similar messages suppressed)"
        if window[1] >= self.burst:
            window[2] = int(window[2]) + 1
            self.suppressed += 1
            return False
        window[1] = int(window[1]) + 1
        self.logger.log(level, msg, *args)
        return True

    def warning(self, key: str, msg: str, *args: object) -> bool:
        return self.log(logging.WARNING, key, msg, *args)
