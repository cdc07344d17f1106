"""The pid file: written at start-up, removed at clean exit.

Theory of operation
-------------------
Scripts wait for a daemon's pid file to appear to know it is up (the SRS's ``<pid-file>``, our
notes 1.6.6), so :class:`PidFile` writes it only once the daemon is listening, atomically (a
temporary file renamed into place: a reader never sees a half-written number), and removes it
on exit if it still holds our pid.  Because it is written late, :func:`check_writable` is called
before anything binds: a pid file that could not be written is one start-up error line (exit 1)
instead of a failure after "listening".
"""

from __future__ import annotations

import contextlib
import os
from pathlib import Path

from umcore.errors import ConfigError

__all__ = ["PidFile", "check_writable"]


def check_writable(path: str | Path, *, source: str | None, what: str) -> None:
    """ConfigError (``source``, ``what``) unless a pid file can be written at ``path`` (written
    as a temporary file in its directory, renamed into place): its directory must exist and be
    writable, and ``path`` must not be a directory."""
    p = Path(path)
    folder = p.parent
    if p.is_dir():
        reason = f"{str(p)!r} is a directory"
    elif not folder.is_dir():
        reason = f"its directory {str(folder)!r} does not exist"
    elif not os.access(folder, os.W_OK | os.X_OK):
        reason = f"its directory {str(folder)!r} is not writable"
    else:
        return
    named = "" if source == str(path) else f" {str(p)!r}"
    raise ConfigError(f"cannot write the pid file{named}: {reason}", source=source, what=what)


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
