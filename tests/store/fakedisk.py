"""An in-memory disk for repository tests: executes IoJobs on a dict of bytearrays.

Theory of operation
-------------------
:class:`FakeDisk` performs the jobs exactly as :class:`umcore.aio.storeio.StoreIO` would (absolute
offsets, preallocation, atomic state replacement, deletes) but on ``files``, a dict of path ->
bytearray, and returns the :class:`IoDone` s.  ``fail`` (a set of paths) makes writes to those
paths fail with ENOSPC until removed, so tests can hold stability and release it.
"""

from __future__ import annotations

import errno
from collections.abc import Iterable

from umcore.store.io import IoDone, IoJob, IoKind


class FakeDisk:
    def __init__(self) -> None:
        self.files: dict[str, bytearray] = {}
        self.fail: set[str] = set()
        self.jobs: list[IoJob] = []

    def _write(self, path: str, offset: int, data: bytes, prealloc: int = 0) -> None:
        f = self.files.setdefault(path, bytearray())
        if prealloc and len(f) < prealloc:
            f.extend(bytes(prealloc - len(f)))
        if len(f) < offset:
            f.extend(bytes(offset - len(f)))
        f[offset : offset + len(data)] = data

    def run(self, jobs: Iterable[IoJob]) -> list[IoDone]:
        out: list[IoDone] = []
        for job in jobs:
            self.jobs.append(job)
            k = job.kind
            if k in (IoKind.WRITE, IoKind.STATE_WRITE) and (
                job.path in self.fail or job.index_path in self.fail
            ):
                out.append(IoDone(job, "No space left on device", errno.ENOSPC))
                continue
            if k == IoKind.WRITE:
                self._write(job.path, job.offset, job.data, job.preallocate)
                if job.index_path:
                    self._write(job.index_path, job.index_offset, job.index_data)
                out.append(IoDone(job))
            elif k == IoKind.READ:
                f = self.files.get(job.path)
                if f is None:
                    out.append(IoDone(job, "No such file", errno.ENOENT))
                else:
                    out.append(IoDone(job, data=bytes(f[job.offset : job.offset + job.length])))
            elif k == IoKind.STATE_WRITE:
                self.files[job.path] = bytearray(job.data)
                out.append(IoDone(job))
            elif k in (IoKind.STATE_DELETE, IoKind.REPO_DELETE):
                self.files.pop(job.path, None)
                out.append(IoDone(job))
            elif k == IoKind.TRUNCATE:
                f = self.files.setdefault(job.path, bytearray())
                del f[job.offset :]
                if job.preallocate and len(f) < job.preallocate:
                    f.extend(bytes(job.preallocate - len(f)))
                out.append(IoDone(job))
            else:
                out.append(IoDone(job))
        return out
