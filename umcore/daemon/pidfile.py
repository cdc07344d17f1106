"""The pid file: written at start-up, removed at clean exit.

Theory of operation
-------------------
Scripts wait for a daemon's pid file to appear to know it is up (the SRS's ``<pid-file>``, our
notes 1.6.6), so :class:`PidFile` writes it only once the daemon is listening, atomically (a
temporary file renamed into place: a reader never sees a half-written number), and removes it
on exit if it still holds our pid.
"""

from __future__ import annotations

import contextlib
import os
from pathlib import Path

__all__ = ["PidFile"]


class PidFile:
    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        self._written = False

    def write(self) -> None:
        """Write our pid (decimal, newline).  Raises OSError if the directory is not writable."""
        tmp = self.path.with_name(f".{self.path.name}.{os.getpid()}.tmp")
        tmp.write_text(f"{os.getpid()}\n", encoding="ascii")
        os.replace(tmp, self.path)
        self._written = True

    def remove(self) -> None:
        """Remove the file if we wrote it and it still names us."""
        if not self._written:
            return
        self._written = False
        with contextlib.suppress(OSError, ValueError):
            if int(self.path.read_text(encoding="ascii").strip()) == os.getpid():
                self.path.unlink()

    def __enter__(self) -> PidFile:
        self.write()
        return self

    def __exit__(self, *exc: object) -> None:
        self.remove()
