"""A daemon's ``<log>`` element: a file rolled by size and/or time (every pyum daemon).

Theory of operation
-------------------
``<log type="file" frequency=... size=... max-history=... total-size-cap=... compression=...>``
(seed-srs-lbmrd.md 1.6.5).  The file is opened for append (never truncated at start-up).  A roll
happens when the **next** record is written after either limit is reached: ``size`` MiB
(2^20 bytes, the element table's unit) or a time boundary (``daily`` at midnight, ``hourly`` at
the top of the hour, local time).  Rolling renames the file to
``<name>_<pid>.<YYYY-MM-DD>.<n>`` — ``n`` counts the rolls of this process from 1, the date is the
day the rolled content was written — optionally compresses it (``.gz`` / ``.zip``, an [I]
suffix), reopens ``<name>``, then deletes the oldest rolled files of this log while more than
``max-history`` remain or they total more than ``total-size-cap`` MiB.
"""

from __future__ import annotations

import contextlib
import datetime as _dt
import gzip
import logging
import os
import shutil
import zipfile
from collections.abc import Callable
from pathlib import Path

__all__ = ["RollingFileHandler", "rolled_files"]

MIB = 1 << 20
# A roll whose new file cannot be opened is retried after this long, not on every line.
ROLL_RETRY_S = 60.0


def rolled_files(path: str | Path) -> list[Path]:
    """The rolled files of the log ``path`` (any pid), oldest first by modification time."""
    p = Path(path)
    prefix = p.name + "_"
    found = [f for f in p.parent.glob(prefix + "*") if f.is_file()]
    return sorted(found, key=lambda f: (f.stat().st_mtime, f.name))


class RollingFileHandler(logging.FileHandler):
    """A FileHandler that rolls by size and/or time, keeping a bounded history."""

    def __init__(
        self,
        path: str,
        *,
        size_mb: int = 10,
        frequency: str = "disable",
        max_history: int = 10,
        total_size_cap_mb: int = 1000,
        compression: str = "none",
        clock: Callable[[], _dt.datetime] = _dt.datetime.now,
    ) -> None:
        super().__init__(path, mode="a", encoding="utf-8", delay=False)
        self.max_bytes = size_mb * MIB
        self.frequency = frequency
        self.max_history = max_history
        self.total_cap = total_size_cap_mb * MIB
        self.compression = compression
        self.clock = clock
        self.sequence = 0
        self._opened = clock()
        self._boundary = self._next_boundary(self._opened)
        # After a roll that could not open the new file, no new attempt before this time (the
        # size check would otherwise retry, and fail, on every line).
        self._retry_at: _dt.datetime | None = None
        #: Rolls that failed (the old file kept).
        self.roll_failures = 0

    def _next_boundary(self, when: _dt.datetime) -> _dt.datetime | None:
        if self.frequency == "daily":
            return (when + _dt.timedelta(days=1)).replace(hour=0, minute=0, second=0, microsecond=0)
        if self.frequency == "hourly":
            return (when + _dt.timedelta(hours=1)).replace(minute=0, second=0, microsecond=0)
        return None

    def _size(self) -> int:
        try:
            return os.fstat(self.stream.fileno()).st_size if self.stream else 0
        except (OSError, ValueError):
            return 0

    def emit(self, record: logging.LogRecord) -> None:
        try:
            now = self.clock()
            due = self._size() >= self.max_bytes or (
                self._boundary is not None and now >= self._boundary
            )
            if due and (self._retry_at is None or now >= self._retry_at):
                self.roll(now)
        except Exception:  # never let logging kill the daemon
            self.handleError(record)
        super().emit(record)

    def roll(self, now: _dt.datetime | None = None) -> Path:
        """Roll now; returns the rolled file's path.  When the new file cannot be opened (its
        directory removed...), the file already open is kept and written on, the failure is
        counted and the next attempt waits :data:`ROLL_RETRY_S`."""
        now = now or self.clock()
        self.sequence += 1
        base = Path(self.baseFilename)
        day = self._opened.strftime("%Y-%m-%d")
        target = base.with_name(f"{base.name}_{os.getpid()}.{day}.{self.sequence}")
        if os.name == "nt" and self.stream:  # Windows cannot rename an open file
            self.stream.close()
            self.stream = None
        try:
            if base.exists():
                os.replace(base, target)  # the open stream follows the file (POSIX)
            stream = open(self.baseFilename, "a", encoding="utf-8")  # noqa: SIM115
        except OSError:
            self.roll_failures += 1
            self._retry_at = now + _dt.timedelta(seconds=ROLL_RETRY_S)
            return target
        self._retry_at = None
        old = self.setStream(stream)
        if old is not None:
            old.close()
        if target.exists():
            target = self._compress(target)
        self._opened = now
        self._boundary = self._next_boundary(now)
        self._prune()
        return target

    def _compress(self, path: Path) -> Path:
        if self.compression == "gzip":
            out = path.with_name(path.name + ".gz")
            with path.open("rb") as src, gzip.open(out, "wb") as dst:
                shutil.copyfileobj(src, dst)
        elif self.compression == "zip":
            out = path.with_name(path.name + ".zip")
            with zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED) as z:
                z.write(path, arcname=path.name)
        else:
            return path
        path.unlink()
        return out

    def _prune(self) -> None:
        files = rolled_files(self.baseFilename)
        total = 0
        sizes = []
        for f in files:
            with contextlib.suppress(OSError):
                sizes.append(f.stat().st_size)
                continue
            sizes.append(0)
        total = sum(sizes)
        while files and (len(files) > self.max_history or total > self.total_cap):
            victim = files.pop(0)
            total -= sizes.pop(0)
            with contextlib.suppress(OSError):
                victim.unlink()
