"""tnwgd's log: UM's DRO line format, console, syslog or a rolled file.

Theory of operation
-------------------
Lines read ``[YYYY-MM-DD HH:MM:SS.uuuuuu] [severity] text`` with UM's severity words
(``information``, ``warning``, ``error`` ...; notes A12) and UM's message ids (``Gwd-7122-1: ...``)
at the start of the text where our notes give them.  ``-u`` gives UTC time stamps.
``<log type="file">`` appends and rolls by ``frequency`` and ``size``
(:class:`~umcore.daemon.logroll.RollingFileHandler`); like UM, old files are never deleted.
``type="syslog"`` goes to the local syslog socket (``/dev/log``), or stdout where there is none.
"""

from __future__ import annotations

import logging
import logging.handlers
import os
import sys
import time

from umcore.config.dro import DROdaemon
from umcore.daemon.logroll import RollingFileHandler
from umcore.daemon.logs import LogSetup

__all__ = ["DroFormatter", "configure_logging"]

# UM's severity words for Python's levels.
_SEVERITY = {
    logging.DEBUG: "debug",
    logging.INFO: "information",
    25: "notice",
    logging.WARNING: "warning",
    logging.ERROR: "error",
    logging.CRITICAL: "critical",
}
_SYSLOG = "/dev/log"


class DroFormatter(logging.Formatter):
    """``[YYYY-MM-DD HH:MM:SS.uuuuuu] [severity] text`` (local time, or UTC)."""

    def __init__(self, *, utc: bool = False) -> None:
        super().__init__()
        self.utc = utc

    def format(self, record: logging.LogRecord) -> str:
        t = time.gmtime(record.created) if self.utc else time.localtime(record.created)
        micros = int((record.created % 1) * 1_000_000)
        stamp = time.strftime("%Y-%m-%d %H:%M:%S", t)
        sev = _SEVERITY.get(record.levelno, record.levelname.lower())
        line = f"[{stamp}.{micros:06d}] [{sev}] {record.getMessage()}"
        if record.exc_info:
            line += "\n" + self.formatException(record.exc_info)
        return line


def configure_logging(daemon: DROdaemon, *, utc: bool = False) -> LogSetup:
    """``<log>``: stdout, syslog or a rolling file.  OSError if the file cannot be opened."""
    handler: logging.Handler
    path: str | None = None
    if daemon.log_type == "file" and daemon.log_file:
        path = daemon.log_file
        handler = RollingFileHandler(
            path,
            size_mb=daemon.log_size or sys.maxsize,  # size 0: no size rolling (notes A12)
            frequency=daemon.log_frequency,
            max_history=sys.maxsize,
            total_size_cap_mb=sys.maxsize,
        )
    elif daemon.log_type == "syslog" and os.path.exists(_SYSLOG):
        handler = logging.handlers.SysLogHandler(address=_SYSLOG)
    else:
        handler = logging.StreamHandler(sys.stdout)
    handler.setFormatter(DroFormatter(utc=utc))
    root = logging.getLogger()
    for old in list(root.handlers):
        root.removeHandler(old)
    root.addHandler(handler)
    root.setLevel(logging.INFO)
    return LogSetup(handler, path)
