"""umestored's log: UM's time stamps and severities, console or a rolled file.

Theory of operation
-------------------
Lines read ``Www Mmm dd hh:mm:ss yyyy [SEVERITY]: <logger>: text`` (persistence-store.md 2.7;
UM's ``Store-NNNN-NNNN`` message ids have no counterpart here, the logger names the Store:
``umestored.<store name>``).  UM's NOTICE severity is registered between INFO and WARNING.
``-u`` gives UTC time stamps.  ``<log type="file">`` appends and rolls by ``frequency`` and
``size`` (:class:`~umcore.daemon.logroll.RollingFileHandler`); UM's Store never deletes old
logs, so neither history nor total size is capped.
"""

from __future__ import annotations

import logging
import sys
import time

from umcore.config.store import StoreDaemon
from umcore.daemon.logroll import RollingFileHandler
from umcore.daemon.logs import LogSetup

__all__ = ["LOG_FORMAT", "NOTICE", "UM_DATE_FORMAT", "configure_logging"]

#: UM's NOTICE severity, between INFO and WARNING.
NOTICE = 25
#: UM's log time stamp: ``Www Mmm dd hh:mm:ss yyyy``.
UM_DATE_FORMAT = "%a %b %d %H:%M:%S %Y"
LOG_FORMAT = "%(asctime)s [%(levelname)s]: %(name)s: %(message)s"


def configure_logging(daemon: StoreDaemon, *, utc: bool = False) -> LogSetup:
    """``<log>``: stdout, or a file (module docstring).  OSError if it cannot be opened."""
    logging.addLevelName(NOTICE, "NOTICE")
    handler: logging.Handler
    path: str | None = None
    if daemon.log_type == "file" and daemon.log_file:
        path = daemon.log_file
        handler = RollingFileHandler(
            path,
            size_mb=daemon.log_size,
            frequency=daemon.log_frequency,
            max_history=sys.maxsize,
            total_size_cap_mb=sys.maxsize,
        )
    else:
        handler = logging.StreamHandler(sys.stdout)
    formatter = logging.Formatter(LOG_FORMAT, UM_DATE_FORMAT)
    if utc:
        formatter.converter = time.gmtime
    handler.setFormatter(formatter)
    root = logging.getLogger()
    for old in list(root.handlers):
        root.removeHandler(old)
    root.addHandler(handler)
    root.setLevel(logging.INFO)
    return LogSetup(handler, path)
