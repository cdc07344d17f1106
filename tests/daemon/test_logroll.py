"""The log roller every daemon's ``<log type="file">`` uses: size and daily rolls, naming, history."""

from __future__ import annotations

import datetime as dt
import logging
import os
from pathlib import Path

from umcore.daemon.logroll import RollingFileHandler, rolled_files


def test_log_rolls_by_size_with_pid_date_sequence_and_history(tmp_path: Path) -> None:
    path = tmp_path / "daemon.log"
    day = dt.datetime(2024, 5, 1, 12, 0, 0)
    handler = RollingFileHandler(str(path), size_mb=1, max_history=2, clock=lambda: day)
    logger = logging.getLogger("test.daemon.roll")
    logger.propagate = False
    logger.addHandler(handler)
    try:
        line = "x" * 1000
        for _ in range(3 * 1100):  # > 3 MiB: three rolls
            logger.warning(line)
    finally:
        logger.removeHandler(handler)
        handler.close()
    rolled = rolled_files(path)
    names = sorted(p.name for p in rolled)
    pid = os.getpid()
    assert names == [f"daemon.log_{pid}.2024-05-01.2", f"daemon.log_{pid}.2024-05-01.3"]
    assert all(p.stat().st_size >= 1 << 20 for p in rolled)
    assert path.stat().st_size < 1 << 20


def test_log_rolls_daily_at_midnight(tmp_path: Path) -> None:
    path = tmp_path / "daemon.log"
    now = [dt.datetime(2024, 5, 1, 23, 59, 0)]
    handler = RollingFileHandler(str(path), frequency="daily", clock=lambda: now[0])
    rec = logging.LogRecord("x", logging.INFO, "", 0, "hello", (), None)
    handler.emit(rec)
    assert rolled_files(path) == []
    now[0] = dt.datetime(2024, 5, 2, 0, 0, 1)
    handler.emit(rec)
    handler.close()
    assert [p.name.rsplit(".", 2)[1:] for p in rolled_files(path)] == [["2024-05-01", "1"]]
