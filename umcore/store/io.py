"""Disk work as data: the jobs a repository or the store core asks for, and their completions.

Theory of operation
-------------------
The store's cores never touch a file.  A repository that wants bytes on disk returns an
:class:`IoJob` from ``take_io()``; an adapter (:class:`umcore.aio.storeio.StoreIO`) performs it
off the event loop and hands an :class:`IoDone` back, which the core routes to its owner by
``IoJob.owner`` and ``IoJob.tag``.  Every job is idempotent (writes carry their absolute offset),
so a job that failed is simply submitted again: nothing unwritten is ever reported written.

Kinds (:class:`IoKind`):

``WRITE``
    ``pwrite(data)`` at ``offset`` of ``path`` (created if missing; if ``preallocate`` > 0 a new
    file is first extended to that size), then, if ``index_path`` is set, ``pwrite(index_data)``
    at ``index_offset`` of that file, then ``fdatasync`` of both when ``sync`` is set (and of the
    directory when the job created a file).  Completed = the operating system accepted every byte.
``READ``
    ``pread(length)`` at ``offset``; the bytes come back in :attr:`IoDone.data`.
``SYNC``
    ``fdatasync`` of ``path``.
``STATE_WRITE``
    atomic replacement of ``path`` by ``data``: temporary file in the same directory, write,
    ``fsync``, ``os.replace``, ``fsync`` of the directory.
``STATE_DELETE`` / ``REPO_DELETE``
    remove ``path`` (a state file / one repository file), then ``fsync`` the directory; a file
    already gone is not an error.
``TRUNCATE``
    cut ``path`` to ``offset`` bytes (start-up repair), then extend to ``preallocate`` if > 0.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass

__all__ = ["IoDone", "IoJob", "IoKind"]


class IoKind(enum.IntEnum):
    WRITE = 1
    READ = 2
    SYNC = 3
    STATE_WRITE = 4
    STATE_DELETE = 5
    REPO_DELETE = 6
    TRUNCATE = 7


@dataclass(frozen=True, slots=True)
class IoJob:
    """One piece of disk work.  ``owner`` is the RegID of the repository or state it belongs to
    (0: the store itself); ``tag`` is the owner's own number for matching the completion."""

    kind: IoKind
    path: str
    offset: int = 0
    data: bytes = b""
    length: int = 0  # READ: bytes wanted
    index_path: str = ""  # WRITE: a second file written after the first (the segment's index)
    index_offset: int = 0
    index_data: bytes = b""
    sync: bool = False  # WRITE: fdatasync before the job counts as done
    preallocate: int = 0  # WRITE of a new file / TRUNCATE: size to extend the file to
    owner: int = 0
    tag: int = 0


@dataclass(frozen=True, slots=True)
class IoDone:
    """The completion of ``job``: ``error`` is None on success, else the OS error's text and
    ``errno`` its number (``errno.ENOSPC`` for a full disk); ``data`` holds what a READ read."""

    job: IoJob
    error: str | None = None
    errno: int = 0
    data: bytes = b""

    @property
    def ok(self) -> bool:
        return self.error is None
