"""Repositories: where a Store keeps one source's messages, and when they become stable.

Theory of operation
-------------------
One :class:`Repository` per source RegID.  It takes the source's LBMC frames as received
(:meth:`Repository.append`), keeps them by sequence number, says which became *stable* (the
store ACKs those), serves them back (:meth:`Repository.get`) and lets them go by size, age, disk
wrap or, for RPP, consumption.  It does no I/O: disk work leaves as :class:`IoJob` s
(:meth:`Repository.take_io`) and comes back as :class:`IoDone` s (:meth:`Repository.io_done`);
time is a parameter and :meth:`next_timer` / :meth:`handle_timer` drive age expiry, write delay
and write retries.

Kinds (``repository-type``):

``memory``
    frames in memory only; stable on reception in sequence order.  ``repository-size-threshold``
    is the floor above which the oldest are deleted (SPP), ``repository-age-threshold`` deletes
    older ones (SPP), ``repository-size-limit`` bounds the whole repository: at the limit new
    messages are dropped and counted (``size_limit_drops``, ``intentional_drops``).
``disk``
    frames written to segment files (:mod:`umcore.store.diskformat`) in sequence order, a memory
    cache in front: threshold and age release *written* frames from memory only (they stay on
    disk, reads become READ jobs), the limit bounds the memory cache (frames not written yet: a
    gap holds every later frame in memory).  Stable = the write completed (UM: the operating
    system accepted it; ``pyum-repository-disk-fdatasync`` adds fdatasync) and everything before
    it is stable.  ``repository-disk-file-size-limit`` bounds the files: at the limit the oldest
    segment is deleted (the trail advances); RPP never deletes an unconsumed message (writing
    waits, stability stops, the source blocks on its flight size).
``reduced-fd``
    as disk, but the files are one set shared by every reduced-fd repository of the cache
    directory (:class:`SharedLog`), records tagged by RegID; a repository's oldest records are
    released logically (a TRAIL marker record persists it) and a shared segment is deleted when
    no repository holds a record in it.
``no-cache``
    no messages, only the window (state only; the core flags receivers NOCACHE).

RPP (receiver-paced persistence): sizes count the payload only (SPP: frame + our record header
as the Store overhead), threshold and age do not delete, :meth:`release_through` deletes what
every receiver consumed; a disk message consumed before it was written is never written and
counts as stable; ``repository-disk-write-delay`` holds frames in memory that long first;
ack-on-reception makes a disk repository's messages stable on contiguous reception.  The "stop
ACKing one flight size before full" rule needs the source's flight size: the core applies it with
:attr:`Repository.room_bytes`.

Memory: no Python object per message.  Frames are copied into 1 MiB ``bytearray`` arenas;
per sequence number the repository keeps parallel ``array`` columns (arena offset, frame length,
arrival time, slot state, disk segment and offset), positional from a base sequence number.

Sequence numbers are 32-bit and compared with serial-number arithmetic (RFC 1982); a repository
spans less than 2**31 of them.  Window values use ``0xFFFFFFFF`` for "none".

Deviations from and additions to the contract (also in /tmp/store-contract.md, "STORAGE
changes"):

* ``Append.LOST``: the sqn was declared lost with :meth:`Repository.declare_lost` (the store
  answers such duplicates with a stability NAK); ``declare_lost(first, last, now)`` lets the core
  fill a gap that will never be repaired so stability and writing pass it.
* ``PENDING`` is the single member of the enum :class:`Pending`.
* ``make_repository(..., *, wall_offset=0.0)``: ``now + wall_offset`` is wall-clock time, the
  arrival time written to disk (``<restore-last>`` compares it across restarts).
* ``RepositoryConfig.from_topic(..., restore_last_hours=None)``: the Store instance's
  ``<restore-last>`` when the topic has none (``StoreTopic.restore_last`` is None then).
  ``write_delay`` and ``ack_on_reception`` are kept as configured and act only for RPP disk and
  reduced-fd repositories.
* :func:`restore_repository` builds a repository from what :func:`umcore.aio.storeio.load_store`
  read; :func:`config_for_state` applies a restored source's own kind and RPP choices.
* Every job a repository emits has ``owner`` = its RegID; the core hands the completions back in
  :meth:`Repository.io_done` and submits :meth:`Repository.take_io` output in order.
* Read-only extras: ``room_bytes`` (for the RPP stop point), ``stats()``, ``frames_held``,
  ``mem_bytes``, ``disk_bytes``, ``bytes_held``, counters, ``last_error``.

After a restart a repository holds what its segment files hold: an RPP repository's messages
consumed before the restart but sharing a segment with unconsumed ones come back, until the core
releases them again from the receivers' ACK positions (:meth:`release_through`).
"""

from __future__ import annotations

import enum
import os
import struct
import zlib
from array import array
from bisect import bisect_left
from collections import deque
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from itertools import accumulate
from typing import Any, Literal

from umcore.config.store import TOPIC_OPTIONS, StoreTopic
from umcore.errors import ConfigError, ProtocolError
from umcore.store import diskformat as fmt
from umcore.store.io import IoDone, IoJob, IoKind
from umcore.wire import lbmc

__all__ = [
    "KINDS",
    "NO_SQN",
    "PENDING",
    "Append",
    "Pending",
    "Repository",
    "RepositoryConfig",
    "RestoredSegment",
    "SharedLog",
    "config_for_state",
    "make_repository",
    "restore_repository",
    "serial_lt",
]

NO_SQN = 0xFFFFFFFF  # UM's "none" in window fields
_M = 0xFFFFFFFF
_HALF = 0x80000000  # serial arithmetic: a is before b when (b - a) mod 2**32 is in 1..2**31-1
# At most 2**31-1 messages per repository (persistence-store.md trap 9).
MAX_MESSAGES = _HALF - 1
# A frame more than this many sqns ahead of the lead is refused (counted in gap_drops): the gap
# would cost ~30 bytes of bookkeeping per missing sqn, and a real loss burst is repaired long
# before a million messages pile up behind it.
MAX_GAP = 1 << 20
KINDS = ("memory", "disk", "reduced-fd", "no-cache")

# Arena chunk: big enough that the chunk dict stays small (1,000 chunks per GB), small enough
# that a chunk freed by release goes back to the allocator promptly.
CHUNK_BITS = 20
CHUNK = 1 << CHUNK_BITS
_CHUNK_MASK = CHUNK - 1
# Per-message Store overhead counted by SPP accounting: our record header.
OVERHEAD = fmt.RECORD_HEADER_LEN
# Segments: a repository's disk limit is split into about this many segment files, so a wrap
# (deleting the oldest segment) gives back an eighth of the space at a time ...
SEGMENTS_PER_LIMIT = 8
MIN_SEGMENT = 16 * 1024  # ... but no segment is planned smaller (the limit's minimum is 196992)
MAX_SEGMENT = 64 * 1024 * 1024  # or larger: restart reads and deletes whole segments
SHARED_SEGMENT = 16 * 1024 * 1024  # reduced-fd: segment size of the shared set
# Writes in flight per repository: one being written and one filling lets batches grow with load.
MAX_WRITES_IN_FLIGHT = 2
# A failed write (disk full, I/O error) is retried after this many seconds.
RETRY_DELAY = 0.5
# Reads waiting for a slot beyond repository-disk-max-read-async-cbs; beyond it get() refuses.
MAX_QUEUED_READS = 65536
# Disk bytes a record costs beyond itself: its index entry and (at most) a block header.
_INDEX_COST = fmt.INDEX_ENTRY_LEN + fmt.BLOCK_HEADER_LEN
# Compact the positional columns when this many released slots sit in front of the trail.
_COMPACT = 4096

# Slot states
_ABSENT, _MEM, _BOTH, _DISK, _LOST = 0, 1, 2, 3, 4
_HELD = frozenset((_MEM, _BOTH, _DISK))
_MEM_BYTE = bytes((_MEM,))
_BOTH_BYTE = bytes((_BOTH,))
_WRITTEN = bytes.maketrans(bytes((_MEM,)), bytes((_BOTH,)))  # MEM -> BOTH, the rest as is
# the record layout, for the hot path (diskformat.append_record is the reference)
_REC_HEAD = struct.Struct("<IIIHHIdI")
_U32 = struct.Struct("<I")
_ENTRY = fmt.INDEX_ENTRY
_crc = zlib.crc32

# Source option names the core may pass as RPP overrides, mapped to the topic's names.
_OVERRIDE_NAMES = {
    "ume_repository_size_threshold": "repository-size-threshold",
    "ume_repository_size_limit": "repository-size-limit",
    "ume_repository_disk_file_size_limit": "repository-disk-file-size-limit",
    "ume_write_delay": "repository-disk-write-delay",
}
FDATASYNC_OPTION = "pyum-repository-disk-fdatasync"


def _default(name: str) -> Any:
    """The documented default of repository option ``name`` (from the one option table)."""
    vtype, text, _ = TOPIC_OPTIONS[name]
    return vtype.parse(text)


def serial_lt(a: int, b: int) -> bool:
    """``a`` comes before ``b`` in 32-bit serial-number arithmetic."""
    return 0 < ((b - a) & _M) < _HALF


class Append(enum.IntEnum):
    STORED = 0
    DUPLICATE = 1  # already held (the store ACKs it again)
    DROPPED = 2  # refused: size limit, disk too small for it, or too far ahead
    OLD = 3  # before the trail: released, wrapped or never held
    LOST = 4  # declared lost (the store answers with a stability NAK)


class Pending(enum.Enum):
    PENDING = "pending"


PENDING = Pending.PENDING


@dataclass(frozen=True, slots=True)
class RepositoryConfig:
    """A repository's settings, read from the Store's ``<topic>`` (defaults live only in
    :mod:`umcore.config.store`), with a RPP source's overrides applied."""

    # (the defaults are the option table's, for tests and tools that build one directly)
    kind: str = _default("repository-type")
    size_threshold: int = _default("repository-size-threshold")
    size_limit: int = _default("repository-size-limit")
    age_threshold: float = float(_default("repository-age-threshold"))  # seconds, 0 off
    disk_file_size_limit: int = _default("repository-disk-file-size-limit")
    preallocate: bool = bool(_default("repository-disk-file-preallocate"))
    async_buffer_length: int = _default("repository-disk-async-buffer-length")
    max_read_jobs: int = _default("repository-disk-max-read-async-cbs")
    # repository-disk-message-checksum: verify every record's frame CRC on restart
    verify_checksums: bool = bool(_default("repository-disk-message-checksum"))
    # seconds; acts for RPP disk repositories only
    write_delay: float = _default("repository-disk-write-delay") / 1000.0
    fdatasync: bool = bool(_default(FDATASYNC_OPTION))  # pyum-only
    rpp: bool = False
    ack_on_reception: bool = False  # applies to RPP disk repositories only
    restore_last_hours: int = 0

    @classmethod
    def from_topic(
        cls,
        topic: StoreTopic,
        *,
        rpp: bool = False,
        overrides: Mapping[str, int] | None = None,
        ack_on_reception: bool = False,
        restore_last_hours: int | None = None,
    ) -> RepositoryConfig:
        opts: dict[str, Any] = dict(topic.options)
        for name, value in (overrides or {}).items():
            key = _OVERRIDE_NAMES.get(name, name)
            if key not in _OVERRIDE_NAMES.values():
                raise ConfigError(
                    f"{name!r} is not an RPP override",
                    source="API",
                    what="RPP overrides",
                    allowed=", ".join(sorted(_OVERRIDE_NAMES)),
                )
            if rpp and value:
                opts[key] = value
        kind = str(opts["repository-type"])
        hours = topic.restore_last.value if topic.restore_last is not None else None
        if hours is None:
            hours = restore_last_hours or 0
        return cls(
            kind=kind,
            size_threshold=int(opts["repository-size-threshold"]),
            size_limit=int(opts["repository-size-limit"]),
            age_threshold=float(opts["repository-age-threshold"]),
            disk_file_size_limit=int(opts["repository-disk-file-size-limit"]),
            preallocate=bool(opts["repository-disk-file-preallocate"]),
            async_buffer_length=int(opts["repository-disk-async-buffer-length"]),
            max_read_jobs=max(1, int(opts["repository-disk-max-read-async-cbs"])),
            verify_checksums=bool(opts["repository-disk-message-checksum"]),
            write_delay=float(opts["repository-disk-write-delay"]) / 1000.0,
            fdatasync=bool(opts[FDATASYNC_OPTION]),
            rpp=rpp,
            ack_on_reception=ack_on_reception,
            restore_last_hours=int(hours),
        )


def config_for_state(
    config: RepositoryConfig,
    *,
    kind: str,
    rpp: bool,
    overrides: Mapping[str, int],
    ack_on_reception: bool,
) -> RepositoryConfig:
    """``config`` (the topic's) with a restored source's own choices: its repository kind (its
    files are in that kind's layout) and its RPP overrides."""
    changes: dict[str, Any] = {
        "kind": kind if kind in KINDS else config.kind,
        "rpp": rpp,
        "ack_on_reception": ack_on_reception,
    }
    fields_of = {
        "repository-size-threshold": "size_threshold",
        "repository-size-limit": "size_limit",
        "repository-disk-file-size-limit": "disk_file_size_limit",
    }
    for name, value in overrides.items():
        key = _OVERRIDE_NAMES.get(name, name)
        if rpp and value and key in fields_of:
            changes[fields_of[key]] = value
        elif rpp and value and key == "repository-disk-write-delay":
            changes["write_delay"] = value / 1000.0
    return replace(config, **changes)


@dataclass(slots=True)
class RestoredSegment:
    """One segment as :func:`umcore.aio.storeio.load_store` read it back: its records (of this
    repository, in sqn order, bad ones already left out) as columns."""

    segno: int
    seg_bytes: int  # where the next record goes (the end of the last whole record)
    idx_bytes: int  # where the next index block goes
    sqns: array[int]
    offsets: array[int]
    lengths: array[int]  # whole record lengths (header included)
    arrivals: array[float]
    file_bytes: int = 0  # the .seg file's size on disk (preallocated files are larger)


@dataclass(slots=True)
class _Segment:
    segno: int
    path: str
    index_path: str
    first: int  # first sqn written to it (NO_SQN: none yet)
    last: int
    end: int  # bytes planned (headers and every record cut into a job)
    idx_end: int  # bytes of the .idx file (planned)
    size: int  # bytes the .seg file occupies (end, or the preallocated size)
    live: int = 0  # records of unconsumed messages (RPP: a segment is deleted at 0)


@dataclass(slots=True)
class _Write:
    tag: int
    last: int  # sqn through which this write (and the skips before it) covers
    job: IoJob
    done: bool = False


class SharedLog:
    """The reduced-fd file set of one cache directory, shared by its reduced-fd repositories.

    It hands out space in the current shared segment (``reduced-fd-<segno>.seg/.idx``) and
    counts, per segment, the records some repository still holds; a segment nobody holds is
    deleted by the repository that let go of its last record.  One per cache directory
    (:meth:`for_dir`), for the life of the process."""

    # One per cache directory for the life of the process (a new one would number its
    # segments from 1 again, over the files of the old one); load_store installs the one it
    # rebuilt from the files.
    _logs: dict[str, SharedLog] = {}

    def __init__(self, cache_dir: str, now: float, next_segno: int = 1) -> None:
        self.cache_dir = cache_dir
        self.segno = next_segno - 1
        self.end = 0
        self.idx_end = 0
        self.refs: dict[int, int] = {}
        self.created = now
        self.preallocated: set[int] = set()

    @classmethod
    def for_dir(cls, cache_dir: str, now: float) -> SharedLog:
        log = cls._logs.get(cache_dir)
        if log is None:
            log = cls(cache_dir, now)
            cls._logs[cache_dir] = log
        return log

    @classmethod
    def install(cls, log: SharedLog) -> None:
        """Make ``log`` (rebuilt at start-up) the one of its directory."""
        cls._logs[log.cache_dir] = log

    def paths(self, segno: int) -> tuple[str, str]:
        return (
            os.path.join(self.cache_dir, fmt.segment_name(None, segno)),
            os.path.join(self.cache_dir, fmt.index_name(None, segno)),
        )

    def reserve(
        self, data_len: int, idx_len: int, now: float, preallocate: bool
    ) -> tuple[int, int, int, bytes, bytes, int]:
        """Room for one write of ``data_len`` record bytes and ``idx_len`` index bytes:
        ``(segno, data offset, index offset, segment header, index header, preallocate)``
        where the headers are non-empty when the write opens a new segment."""
        seg_head = idx_head = b""
        prealloc = 0
        if self.segno == 0 or (
            self.end > fmt.FILE_HEADER_LEN and self.end + data_len > SHARED_SEGMENT
        ):
            self.segno += 1
            flags = fmt.FILE_SHARED | (fmt.FILE_PREALLOCATED if preallocate else 0)
            seg_head = fmt.encode_file_header(fmt.SEG_MAGIC, flags, 0, self.segno, now)
            idx_head = fmt.encode_file_header(fmt.IDX_MAGIC, fmt.FILE_SHARED, 0, self.segno, now)
            self.end = 0
            self.idx_end = 0
            self.refs.setdefault(self.segno, 0)
            if preallocate:
                prealloc = SHARED_SEGMENT
                self.preallocated.add(self.segno)
        off = self.end + len(seg_head)
        ioff = self.idx_end
        self.end = off + data_len
        self.idx_end = ioff + len(idx_head) + idx_len
        return self.segno, off - len(seg_head), ioff, seg_head, idx_head, prealloc

    def release(self, segno: int, count: int) -> list[IoJob]:
        """``count`` records of ``segno`` are no longer held: the delete jobs if it emptied."""
        left = self.refs.get(segno, 0) - count
        self.refs[segno] = left
        if left > 0 or segno == self.segno:
            return []
        del self.refs[segno]
        seg, idx = self.paths(segno)
        return [IoJob(IoKind.REPO_DELETE, seg), IoJob(IoKind.REPO_DELETE, idx)]


class Repository:
    """One source's repository; see the module docstring.  Window and counters are plain
    attributes (read them, never write them)."""

    def __init__(
        self,
        reg_id: int,
        config: RepositoryConfig,
        cache_dir: str,
        now: float,
        wall_offset: float = 0.0,
    ) -> None:
        if config.kind not in KINDS:
            raise ConfigError(f"unknown repository type {config.kind!r}", allowed=", ".join(KINDS))
        self.reg_id = reg_id
        self.config = config
        self.cache_dir = cache_dir
        self.kind = config.kind
        self.created = now
        self._wall = wall_offset  # now + wall_offset = wall-clock time, written as arrival
        self._disk = config.kind in ("disk", "reduced-fd")
        self._nocache = config.kind == "no-cache"
        self._rpp = config.rpp
        self._aor = config.ack_on_reception and config.rpp and self._disk
        self._by_write = self._disk and not self._aor  # stable = written (in order)
        self._buffer_limit = config.async_buffer_length
        self._disk_limit = config.disk_file_size_limit
        # repository-disk-write-delay: RPP disk repositories only
        self._delay = config.write_delay if config.rpp and self._disk else 0.0
        self._shared = SharedLog.for_dir(cache_dir, now) if config.kind == "reduced-fd" else None
        # positional columns: index i <-> sqn (base + i) mod 2**32
        self._base = 0
        self._moff = array("Q")
        self._flen = array("I")
        self._time = array("d")
        self._state = bytearray()
        self._acct = array("I")  # RPP: payload bytes of each message
        self._dseg = array("I")
        self._doff = array("I")
        self._empty = True  # nothing ever appended (base meaningless)
        # index of the first sqn ever held (negative after compaction): window values below
        # it mean "none yet"
        self._floor = 0
        # highest slot whose frame was placed in the arenas out of sequence order (a gap
        # filled late): bulk releases start after it
        self._ooo = -1
        self._fast = False  # append's fast path applies (SPP, not empty)
        self._limit = config.size_limit
        self._thr = config.size_threshold
        # a frame larger than this cannot be written (half the disk limit, for the wrap)
        self._max_frame = (
            config.disk_file_size_limit // 2 - OVERHEAD
            if config.kind in ("disk", "reduced-fd")
            else fmt.MAX_FRAME
        )
        self._t = 0  # index of the trail
        self._mt = 0  # index of the memory trail (oldest frame possibly in memory)
        self._contig = -1  # index of the contiguous-from-trail end
        # arena
        self._chunks: dict[int, bytearray] = {}
        self._live: dict[int, int] = {}
        self._cur_no = -1
        self._cur = bytearray()  # the current chunk
        self._cur_fill = CHUNK
        # disk writing
        self._segments: deque[_Segment] = deque()
        self._next_segno = 1
        self._seg_target = max(
            MIN_SEGMENT, min(MAX_SEGMENT, config.disk_file_size_limit // SEGMENTS_PER_LIMIT)
        )
        self._seg_cap = self._seg_target + fmt.FILE_HEADER_LEN
        self._wt = 0  # index of the next frame to put into a write
        self._wbuf = bytearray()
        self._ibuf = bytearray()
        self._wseg: _Segment | None = None  # segment the buffered records go to
        self._wstart = 0  # its offset of the buffer's first byte
        self._wpre = 0  # preallocate size for a write that opens a segment
        self._whead = b""  # index file header for a write that opens a segment
        self._wlast = -1  # index through which the buffer covers
        self._wcount = 0
        self._windex: list[int] = []  # slots whose records are in the buffer
        self._wrec_bytes = 0  # reduced-fd: record bytes in the buffer
        self._marker_trail = -1  # reduced-fd: trail sqn still to persist as a TRAIL record
        self._cut = -1  # index through which writes were cut (sync_sqn)
        self._complete = -1  # index through which writes completed (sync_complete_sqn)
        self._writes: deque[_Write] = deque()
        self._failed: list[_Write] = []
        self._retry_at: float | None = None
        self._tag = 0
        self._io: list[IoJob] = []
        self._blocked = False  # RPP disk: no room without deleting unconsumed messages
        # reads
        self._reads: dict[int, int] = {}  # tag -> sqn
        self._reading: set[int] = set()
        self._read_wait: deque[int] = deque()
        self._read_results: list[tuple[int, bytes | None]] = []
        # stability
        self._reported = -1  # index through which newly-stable ranges were handed out
        # memory: sqns (first, last) that were stable but deleted by the threshold or age
        # before take_newly_stable handed them out (a read of many frames trims as it appends)
        self._trimmed: tuple[int, int] | None = None
        self._nc_lead = NO_SQN  # no-cache: the window is only numbers
        self._nc_reported = NO_SQN
        # counters
        self.stored = 0
        self.duplicates = 0
        self.old = 0
        self.intentional_drops = 0
        self.size_limit_drops = 0
        self.gap_drops = 0
        self.lost = 0
        self.mem_bytes = 0  # accounted bytes of frames in memory
        self.disk_bytes = 0  # bytes of this repository's files (or records, reduced-fd)
        self.bytes_held = 0  # accounted bytes of every message held (memory or disk)
        self.frames_held = 0
        self.threshold_releases = 0
        self.age_releases = 0
        self.rpp_releases = 0
        self.wrapped = 0  # messages lost to the disk wrap
        self.write_errors = 0
        self.writes = 0
        self.reads = 0
        self.read_errors = 0
        self.read_refused = 0
        self.last_error = ""

    # --- window ---------------------------------------------------------------------------

    def _sqn(self, i: int) -> int:
        return (self._base + i) & _M

    def _n(self) -> int:
        return len(self._state)

    @property
    def empty(self) -> bool:
        """Nothing appended and no first sequence number told (:meth:`expect_first`); False
        for ``no-cache``, which keeps no messages."""
        return self._empty and not self._nocache

    @property
    def lead_sqn(self) -> int:
        if self._nocache:
            return self._nc_lead
        return NO_SQN if self._empty else self._sqn(len(self._state) - 1)

    @property
    def trail_sqn(self) -> int:
        if self._nocache or self._empty or self._t >= len(self._state):
            return NO_SQN
        return self._sqn(self._t)

    @property
    def mem_trail_sqn(self) -> int:
        if self._nocache or self._empty:
            return NO_SQN
        st = self._state
        i = max(self._mt, self._t)
        n = len(st)
        while i < n and st[i] not in (_MEM, _BOTH):
            i += 1
        self._mt = i
        return NO_SQN if i >= n else self._sqn(i)

    @property
    def contig_sqn(self) -> int:
        if self._nocache:
            return self._nc_lead
        return NO_SQN if self._empty or self._contig < self._floor else self._sqn(self._contig)

    @property
    def sync_sqn(self) -> int:
        if not self._disk:
            return self.contig_sqn
        return NO_SQN if self._empty or self._cut < self._floor else self._sqn(self._cut)

    @property
    def sync_complete_sqn(self) -> int:
        if not self._disk:
            return self.contig_sqn
        return NO_SQN if self._empty or self._complete < self._floor else self._sqn(self._complete)

    def _stable_index(self) -> int:
        if not self._disk or self._aor:
            return self._contig
        return min(self._complete, self._contig)

    @property
    def stable_sqn(self) -> int | None:
        if self._nocache:
            return None if self._nc_lead == NO_SQN else self._nc_lead
        i = self._stable_index()
        return None if self._empty or i < self._floor else self._sqn(i)

    @property
    def full(self) -> bool:
        """A write failed and was not yet written again: stability does not advance."""
        return bool(self._failed)

    @property
    def room_bytes(self) -> int:
        """Bytes the repository can still take before refusing (the RPP stop point compares
        this with the source's flight size in bytes)."""
        room = self.config.size_limit - self.mem_bytes
        if self._disk:
            room = min(room, self.config.disk_file_size_limit - self.disk_bytes)
        return max(0, room)

    def take_newly_stable(self) -> tuple[int, int] | None:
        if self._nocache:
            if self._nc_lead == NO_SQN or self._nc_lead == self._nc_reported:
                return None
            first = (self._nc_reported + 1) & _M
            self._nc_reported = self._nc_lead
            return first, self._nc_lead
        if self._trimmed is not None:  # before what is still held: sequence order
            rng, self._trimmed = self._trimmed, None
            return rng
        s = min(self._complete, self._contig) if self._by_write else self._contig
        if s <= self._reported:
            return None
        first = max(self._reported + 1, self._t)
        self._reported = s
        if first > s:
            return None
        return self._sqn(first), self._sqn(s)

    # --- append ---------------------------------------------------------------------------

    def _account(self, frame: bytes) -> int:
        if not self._rpp:
            return len(frame) + OVERHEAD
        if len(frame) >= 12 and frame[1] == 0:
            return len(frame) - 12
        return _payload_len(frame)

    def append(self, sqn: int, frame: bytes, now: float) -> Append:
        """Keep ``frame`` (an LBMC frame as received) as message ``sqn``."""
        st = self._state
        n = len(st)
        if (
            self._fast
            and ((sqn - self._base) & _M) == n
            and self._contig == n - 1
            and n - self._t < MAX_MESSAGES
        ):
            # the common case (SPP, next in order, nothing missing), with few lookups
            flen = len(frame)
            acct = flen + OVERHEAD
            fill = self._cur_fill
            if (
                self.mem_bytes + acct <= self._limit
                and fill + flen <= CHUNK
                and flen <= self._max_frame
            ):
                no = self._cur_no
                self._cur[fill : fill + flen] = frame
                self._live[no] += 1
                self._cur_fill = fill + flen
                self._moff.append((no << CHUNK_BITS) | fill)
                self._flen.append(flen)
                self._time.append(now)
                st.append(_MEM)
                self.stored += 1
                self.frames_held += 1
                self.mem_bytes += acct
                self.bytes_held += acct
                self._contig = n
                if self._disk:
                    if n != self._wt:
                        self._dseg.append(0)
                        self._doff.append(0)
                        return Append.STORED
                    seg = self._wseg
                    rlen = acct  # the record: frame + our header
                    wbuf = self._wbuf
                    if (
                        self._shared is None
                        and seg is not None
                        and seg.end + rlen <= self._seg_cap
                        and self.disk_bytes + rlen + _INDEX_COST <= self._disk_limit
                        and (self._wcount or not wbuf)
                        and len(wbuf) + rlen <= self._buffer_limit
                    ):
                        # _buffer_record's common case, inline: room in the open segment
                        # and in the write buffer
                        if not self._wcount:
                            self._wstart = seg.end
                        doff = seg.end
                        seg.end = doff + rlen
                        if seg.size < doff + rlen:
                            self.disk_bytes += doff + rlen - seg.size
                            seg.size = doff + rlen
                        if seg.first == NO_SQN:
                            seg.first = sqn
                        seg.last = sqn
                        seg.live += 1
                        self._dseg.append(seg.segno)
                        self._doff.append(doff)
                        arrival = now + self._wall
                        head = _REC_HEAD.pack(
                            fmt.REC_MAGIC,
                            self.reg_id,
                            sqn,
                            fmt.REC_PAYLOAD_CRC,
                            0,
                            flen,
                            arrival,
                            _crc(frame),
                        )
                        wbuf += head
                        wbuf += _U32.pack(_crc(head))
                        wbuf += frame
                        self._ibuf += _ENTRY.pack(sqn, rlen, arrival, self.reg_id, 0)
                        self._windex.append(n)
                        self._wcount += 1
                        self._wlast = n
                        self._wt = n + 1
                    else:
                        self._dseg.append(0)
                        self._doff.append(0)
                        if not self._buffer_record(n, frame, now):
                            return Append.STORED
                        self._wt = n + 1
                    if len(self._writes) < MAX_WRITES_IN_FLIGHT:
                        self._cut_write()
                elif self.mem_bytes > self._thr:
                    self._shrink_memory(now)
                    self._maybe_compact()
                return Append.STORED
        got = self._append(sqn, frame, now)
        self._maybe_compact()
        return got

    def _run_fits(self, sqn: int, count: int) -> bool:
        """:meth:`append`'s common case holds for ``count`` messages from ``sqn`` (the checks
        :meth:`append_run` and :meth:`append_block` share; each then bounds the run by the
        room it finds): SPP, next in order, nothing missing, room in the state table, and --
        on disk -- writing not behind, an own open segment, the write buffer not held back."""
        n = len(self._state)
        if (
            not count
            or not self._fast
            or ((sqn - self._base) & _M) != n
            or self._contig != n - 1
            or n - self._t + count >= MAX_MESSAGES
        ):
            return False
        return not self._disk or (
            n == self._wt
            and self._shared is None
            and self._wseg is not None
            and bool(self._wcount or not self._wbuf)
        )

    def append_run(self, sqn: int, frames: Sequence[bytes], now: float) -> int:
        """:meth:`append` of ``frames`` as messages ``sqn``, ``sqn + 1``, ... for as long as
        each is :meth:`append`'s common case (SPP, next in order, nothing missing, room in
        memory, and -- on disk -- room in the open segment and the write buffer, writing not
        behind): how many were stored (each would have been STORED).  The caller appends the
        first one not stored with :meth:`append`, which handles every other case, and goes on.

        One call per read of a transport instead of one per message: the same work on each
        message (the same state, records and index entries as :meth:`append` makes, byte for
        byte), without re-reading the repository's attributes each time."""
        count = len(frames)
        if not self._run_fits(sqn, count):
            return 0
        st = self._state
        n = len(st)
        disk = self._disk
        seg = self._wseg
        wbuf = self._wbuf
        limit = self._limit
        max_frame = self._max_frame
        mem = self.mem_bytes
        cur = self._cur
        no = self._cur_no
        chunk_base = no << CHUNK_BITS
        fill = fill0 = self._cur_fill
        thr = self._thr
        moff = self._moff.append
        flens = self._flen.append
        # Per frame: what differs from frame to frame (offsets, lengths, the record bytes); the
        # columns holding one value for the whole run (time, state, segment, write index) are
        # extended once after the loop.  One budget stands for the limits every frame's record
        # uses up alike (memory, the open segment, the write buffer; their bytes grow by the
        # record's length), and one for the arena chunk (grows by the frame's).
        room = limit - mem
        fill_room = CHUNK - fill
        if disk:
            assert seg is not None
            seg_cap = self._seg_cap
            disk_room = self._disk_limit - _INDEX_COST
            disk_bytes = self.disk_bytes
            reg_id = self.reg_id
            arrival = now + self._wall
            doffs = self._doff.append
            ibuf = self._ibuf
            pack_head = _REC_HEAD.pack
            pack_u32 = _U32.pack
            pack_entry = _ENTRY.pack
            magic = fmt.REC_MAGIC
            flags = fmt.REC_PAYLOAD_CRC
            segno = seg.segno
            end = end0 = seg.end
            size = seg.size
            wcount = self._wcount
            if not wcount:
                self._wstart = end
            room = min(room, seg_cap - end, self._buffer_limit - len(wbuf))
            for frame in frames:
                flen = len(frame)
                acct = flen + OVERHEAD
                if (
                    acct > room
                    or flen > fill_room
                    or flen > max_frame
                    or disk_bytes + acct > disk_room
                ):
                    break
                room -= acct
                fill_room -= flen
                doffs(end)
                end += acct
                if size < end:
                    disk_bytes += end - size
                    size = end
                head = pack_head(magic, reg_id, sqn, flags, 0, flen, arrival, _crc(frame))
                wbuf += head
                wbuf += pack_u32(_crc(head))
                wbuf += frame
                ibuf += pack_entry(sqn, acct, arrival, reg_id, 0)
                cur[fill : fill + flen] = frame
                moff(chunk_base | fill)
                fill += flen
                flens(flen)
                sqn = (sqn + 1) & _M
            stored = (end - end0 - (fill - fill0)) // OVERHEAD
        else:
            for frame in frames:
                flen = len(frame)
                acct = flen + OVERHEAD
                if acct > room or flen > fill_room or flen > max_frame:
                    break
                room -= acct
                fill_room -= flen
                cur[fill : fill + flen] = frame
                moff(chunk_base | fill)
                fill += flen
                flens(flen)
                sqn = (sqn + 1) & _M
            stored = (limit - mem - room - (fill - fill0)) // OVERHEAD
        if stored:
            self._time.extend(array("d", (now,)) * stored)
            st.extend(_MEM_BYTE * stored)
            mem += fill - fill0 + stored * OVERHEAD
            if disk:
                self._dseg.extend(array("I", (segno,)) * stored)
                self._windex.extend(range(n, n + stored))
                wcount += stored
            n += stored
        if not stored:
            return 0
        self._live[no] += stored
        self._cur_fill = fill
        self.stored += stored
        self.frames_held += stored
        added = mem - self.mem_bytes
        self.mem_bytes = mem
        self.bytes_held += added
        self._contig = n - 1
        if disk:
            assert seg is not None
            if seg.first == NO_SQN:
                seg.first = (sqn - stored) & _M
            seg.end = end
            seg.size = size
            seg.last = (sqn - 1) & _M
            seg.live += stored
            self.disk_bytes = disk_bytes
            self._wcount = wcount
            self._wlast = n - 1
            self._wt = n
            if len(self._writes) < MAX_WRITES_IN_FLIGHT:
                self._cut_write()
        elif mem > thr:  # once for the run (append: after each message; the same ones go)
            self._shrink_memory(now)
            self._maybe_compact()
        return stored

    def append_block(
        self, sqn: int, frames: Sequence[bytes], block: bytes | memoryview, now: float
    ) -> int:
        """:meth:`append_run` of ``frames`` that are all of one length, ``block`` being their
        concatenation (the caller checked both: :meth:`StoreCore._receive_block
        <umcore.store.core.StoreCore._receive_block>`): how many were stored (a prefix; the
        caller goes on as after :meth:`append_run`).  The same state, records and index entries, byte for byte, built
        without a Python step per message: the frames are copied into the arena as one slice,
        the columns extended by whole arrays, the records encoded by
        :func:`~umcore.store.diskformat.encode_record_run`."""
        count = len(frames)
        if not self._run_fits(sqn, count):
            return 0
        st = self._state
        n = len(st)
        flen = len(frames[0])
        acct = flen + OVERHEAD
        if flen > self._max_frame or flen == 0 or len(block) != flen * count:
            return 0
        disk = self._disk
        seg = self._wseg
        wbuf = self._wbuf
        fill = self._cur_fill
        # the limits every record uses up alike (memory; on disk also the open segment, the
        # write buffer and the files' limit), and the arena chunk
        k = min(count, (self._limit - self.mem_bytes) // acct, (CHUNK - fill) // flen)
        if disk:
            assert seg is not None  # (_run_fits)
            end = seg.end
            k = min(
                k,
                (self._seg_cap - end) // acct,
                (self._buffer_limit - len(wbuf)) // acct,
                # (append_run's check, with the disk bytes growing by a record each: at most)
                (self._disk_limit - _INDEX_COST - self.disk_bytes) // acct,
            )
        if k <= 0:
            return 0
        if k < count:
            frames = frames[:k]
        size = k * flen
        no = self._cur_no
        at = (no << CHUNK_BITS) | fill
        self._cur[fill : fill + size] = block[:size]
        self._moff.extend(array("Q", range(at, at + size, flen)))
        self._flen.extend(array("I", (flen,)) * k)
        self._time.extend(array("d", (now,)) * k)
        st.extend(_MEM_BYTE * k)
        self._live[no] += k
        self._cur_fill = fill + size
        self.stored += k
        self.frames_held += k
        self.mem_bytes += k * acct
        self.bytes_held += k * acct
        self._contig = n + k - 1
        if not disk:
            if self.mem_bytes > self._thr:  # once for the block, as append_run
                self._shrink_memory(now)
                self._maybe_compact()
            return k
        assert seg is not None
        rlen = k * acct
        if not self._wcount:
            self._wstart = end
        records, entries = fmt.encode_record_run(self.reg_id, sqn, frames, now + self._wall)
        wbuf += records
        self._ibuf += entries
        self._doff.extend(array("I", range(end, end + rlen, acct)))
        self._dseg.extend(array("I", (seg.segno,)) * k)
        self._windex.extend(range(n, n + k))
        seg.end = end + rlen
        if seg.size < seg.end:
            self.disk_bytes += seg.end - seg.size
            seg.size = seg.end
        if seg.first == NO_SQN:
            seg.first = sqn
        seg.last = (sqn + k - 1) & _M
        seg.live += k
        self._wcount += k
        self._wlast = n + k - 1
        self._wt = n + k
        if len(self._writes) < MAX_WRITES_IN_FLIGHT:
            self._cut_write()
        return k

    def _append(self, sqn: int, frame: bytes, now: float) -> Append:
        if self._nocache:
            return self._append_nocache(sqn)
        st = self._state
        if self._empty:
            self._base = sqn & _M
            self._empty = False
            self._fast = not self._rpp
            i = 0
        else:
            i = (sqn - self._base) & _M
            if i >= _HALF:
                self.old += 1
                return Append.OLD
        n = len(st)
        if i < n:
            s = st[i]
            if i < self._t:
                self.old += 1
                return Append.OLD
            if s == _LOST:
                self.duplicates += 1
                return Append.LOST
            if s != _ABSENT:
                self.duplicates += 1
                return Append.DUPLICATE
        elif i - n >= MAX_GAP or i - self._t >= MAX_MESSAGES:
            self.gap_drops += 1
            self.intentional_drops += 1
            return Append.DROPPED
        acct = self._account(frame)
        if self.mem_bytes + acct > self.config.size_limit or (
            self._disk and len(frame) > self._max_frame
        ):
            self.size_limit_drops += 1
            self.intentional_drops += 1
            if n == 0:
                self._empty = True
                self._fast = False
            return Append.DROPPED
        moff = self._put(frame)
        if i >= n:
            if i > n:
                self._grow(i - n)
            self._moff.append(moff)
            self._flen.append(len(frame))
            self._time.append(now)
            st.append(_MEM)
            if self._rpp:
                self._acct.append(acct)
            if self._disk:
                self._dseg.append(0)
                self._doff.append(0)
        else:
            self._ooo = max(self._ooo, i)  # placed after frames of later sqns
            self._moff[i] = moff
            self._flen[i] = len(frame)
            self._time[i] = now
            st[i] = _MEM
            if self._rpp:
                self._acct[i] = acct
        self.stored += 1
        self.frames_held += 1
        self.mem_bytes += acct
        self.bytes_held += acct
        if i == self._contig + 1:
            if i == n:
                self._contig = i  # the in-order case: nothing after it yet
            else:
                self._advance_contig()
        if self._disk:
            if i != self._wt or (self._delay and self.mem_bytes <= self.config.size_threshold):
                pass
            elif i == n and not self._blocked:
                # the in-order case: straight into the write buffer
                if self._buffer_record(i, frame, now):
                    self._wt = i + 1
                    if len(self._writes) < MAX_WRITES_IN_FLIGHT:
                        self._cut_write()
            else:
                self._pump(now)
        elif self.mem_bytes > self.config.size_threshold and not self._rpp:
            self._shrink_memory(now)
        return Append.STORED

    def _append_nocache(self, sqn: int) -> Append:
        if self._nc_lead != NO_SQN and not serial_lt(self._nc_lead, sqn):
            self.duplicates += 1
            return Append.DUPLICATE
        self._nc_lead = sqn & _M
        if self._nc_reported == NO_SQN:
            self._nc_reported = (sqn - 1) & _M
        self.stored += 1
        return Append.STORED

    def _grow(self, k: int) -> None:
        self._moff.extend(array("Q", bytes(8 * k)))
        self._flen.extend(array("I", bytes(4 * k)))
        self._time.extend(array("d", bytes(8 * k)))
        self._state.extend(bytes(k))
        if self._rpp:
            self._acct.extend(array("I", bytes(4 * k)))
        if self._disk:
            self._dseg.extend(array("I", bytes(4 * k)))
            self._doff.extend(array("I", bytes(4 * k)))

    def _put(self, frame: bytes) -> int:
        n = len(frame)
        fill = self._cur_fill
        if fill + n > CHUNK:
            if n > CHUNK:  # a chunk of its own
                no = self._cur_no + 1
                self._chunks[no] = bytearray(frame)
                self._live[no] = 1
                self._cur_no = no + 1
                self._cur_fill = CHUNK  # the next frame opens a fresh chunk
                return no << CHUNK_BITS
            self._cur_no += 1
            self._cur = self._chunks[self._cur_no] = bytearray(CHUNK)
            self._live[self._cur_no] = 0
            fill = 0
        no = self._cur_no
        self._chunks[no][fill : fill + n] = frame
        self._live[no] += 1
        self._cur_fill = fill + n
        return (no << CHUNK_BITS) | fill

    def _frame(self, i: int) -> bytes:
        off = self._moff[i]
        w = off & _CHUNK_MASK
        return bytes(self._chunks[off >> CHUNK_BITS][w : w + self._flen[i]])

    def _free_mem(self, i: int) -> None:
        """Let the frame of slot i go from memory (the slot's state is set by the caller)."""
        no = self._moff[i] >> CHUNK_BITS
        left = self._live[no] - 1
        if left == 0 and no != self._cur_no:
            del self._live[no]
            del self._chunks[no]
        else:
            self._live[no] = left
        acct = self._acct[i] if self._rpp else self._flen[i] + OVERHEAD
        self.mem_bytes -= acct

    def _acct_of(self, i: int) -> int:
        return self._acct[i] if self._rpp else self._flen[i] + OVERHEAD

    def _advance_contig(self) -> None:
        st = self._state
        i = max(self._contig, self._t - 1) + 1
        n = len(st)
        while i < n and st[i] != _ABSENT:
            i += 1
        self._contig = i - 1

    def expect_first(self, sqn: int) -> bool:
        """An empty repository's first message will be ``sqn`` (the source's first retained
        one, from its late-join information): a message arriving after it leaves a gap to
        repair instead of becoming the trail.  False (and nothing changes) once anything was
        appended."""
        if not self._empty or self._nocache:
            return False
        self._base = sqn & _M
        self._empty = False
        self._fast = not self._rpp
        return True

    def declare_lost(self, first: int, last: int, now: float) -> None:
        """The sqns ``first..last`` will never arrive (the core's decision, e.g. a receiver
        declared them unrecoverable): fill them so stability and writing pass them."""
        if self._nocache or self._empty:
            return
        a = (first - self._base) & _M
        b = (last - self._base) & _M
        if a >= _HALF or b >= _HALF or b < a:
            return
        if b >= len(self._state):
            if b - len(self._state) >= MAX_GAP:
                return
            self._grow(b + 1 - len(self._state))
        st = self._state
        for i in range(max(a, self._t), b + 1):
            if st[i] == _ABSENT:
                st[i] = _LOST
                self.lost += 1
        self._advance_contig()
        if self._disk:
            self._pump(now)

    # --- memory release -------------------------------------------------------------------

    def _drop_front(self, i: int) -> None:
        """The trail moves past slot ``i`` (released by size, age, RPP or wrap)."""
        s = self._state[i]
        if s in (_MEM, _BOTH):
            self._free_mem(i)
        if s in _HELD:
            self.frames_held -= 1
            self.bytes_held -= self._acct_of(i)
        self._state[i] = _ABSENT
        self._t = i + 1

    def _shrink_memory(self, now: float) -> None:
        """Memory repository: delete the oldest above the threshold (and by age)."""
        st = self._state
        n = len(st)
        thr = self.config.size_threshold
        age = self.config.age_threshold
        reported, stable = self._reported, self._contig  # memory: stable = contiguous
        i = self._t
        while i < n and (
            self.mem_bytes > thr or (age > 0 and st[i] != _ABSENT and self._time[i] + age <= now)
        ):
            if st[i] in _HELD:
                if self.mem_bytes > thr:
                    self.threshold_releases += 1
                else:
                    self.age_releases += 1
            self._drop_front(i)
            i += 1
        while i < n and st[i] == _ABSENT:
            i += 1
        self._t = i
        gone = min(stable, i - 1)  # stable when deleted: still to be reported stable
        if gone > reported:
            first = self._sqn(reported + 1) if self._trimmed is None else self._trimmed[0]
            self._trimmed = (first, self._sqn(gone))
        self._after_trail_move()

    def _after_trail_move(self) -> None:
        if self._contig < self._t - 1:
            self._contig = self._t - 1
            self._advance_contig()
        if self._reported < self._t - 1:
            self._reported = self._t - 1
        if self._disk:
            if self._wt < self._t:
                self._wt = self._t
            if self._cut < self._t - 1:
                self._cut = self._t - 1
            if self._complete < self._t - 1 and not self._writes and not self._wcount:
                self._complete = self._t - 1

    def _maybe_compact(self) -> None:
        """Drop the released slots in front of the trail from the columns.  Only at the end of
        a public method: inner steps hold slot indexes that a compaction would shift."""
        if self._t > _COMPACT and self._t * 2 > len(self._state):
            self._compact()

    def _compact(self) -> None:
        k = min(self._t, self._windex[0]) if self._windex else self._t
        del self._moff[:k]
        del self._flen[:k]
        del self._time[:k]
        del self._state[:k]
        if self._rpp:
            del self._acct[:k]
        if self._disk:
            del self._dseg[:k]
            del self._doff[:k]
        self._base = (self._base + k) & _M
        self._floor -= k
        self._ooo -= k
        self._t -= k
        self._mt = max(0, self._mt - k)
        self._contig -= k
        self._reported -= k
        self._wt -= k
        self._wlast -= k
        self._cut -= k
        self._complete -= k
        self._windex = [j - k for j in self._windex]
        for w in self._writes:  # (the failed ones are among them)
            w.last -= k

    def _release_cache(self, now: float) -> None:
        """Disk repository: written frames leave memory above the threshold or by age."""
        st = self._state
        n = len(st)
        thr = self.config.size_threshold
        age = self.config.age_threshold
        i = max(self._mt, self._t)
        if self.mem_bytes > thr and i > self._ooo and not self._rpp:
            i = self._release_run(i, self.mem_bytes - thr)
        while i < n and self.mem_bytes > 0:
            s = st[i]
            if s == _MEM:
                break  # not written yet: later ones stay too (sequence order)
            if s == _BOTH:
                if self.mem_bytes > thr:
                    self.threshold_releases += 1
                elif age > 0 and self._time[i] + age <= now:
                    self.age_releases += 1
                else:
                    break
                self._free_mem(i)
                st[i] = _DISK
            i += 1
        self._mt = i

    def _release_run(self, i: int, need: int) -> int:
        """The threshold release of a run of written frames at once (the common case: frames
        placed in the arenas in sequence order, so each chunk's frames are one stretch):
        release from slot ``i`` until ``need`` accounted bytes are freed or an unwritten frame
        comes; returns the slot after the last released."""
        st = self._state
        end = st.find(_MEM_BYTE, i)
        if end < 0:
            end = len(st)
        if end <= i or st.count(_BOTH_BYTE, i, end) != end - i:
            return i  # gaps or frames already on disk only: the careful loop handles them
        sizes = list(accumulate(self._flen[i:end]))
        # k frames free sizes[k-1] + k * OVERHEAD bytes: the smallest k freeing ``need``
        lo, hi = 0, len(sizes)
        while lo < hi:
            mid = (lo + hi) // 2
            if sizes[mid] + (mid + 1) * OVERHEAD >= need:
                hi = mid
            else:
                lo = mid + 1
        k = min(lo + 1, len(sizes))
        j = i + k
        moff = self._moff
        first_no = moff[i] >> CHUNK_BITS
        last_no = moff[j - 1] >> CHUNK_BITS
        pos = i
        for no in range(first_no, last_no + 1):
            stop = bisect_left(moff, (no + 1) << CHUNK_BITS, pos, j)
            count = stop - pos
            if count:
                left = self._live[no] - count
                if left == 0 and no != self._cur_no:
                    del self._live[no]
                    del self._chunks[no]
                else:
                    self._live[no] = left
            pos = stop
        self.mem_bytes -= sizes[k - 1] + k * OVERHEAD
        self.threshold_releases += k
        st[i:j] = bytes((_DISK,)) * k
        return j

    # --- RPP ------------------------------------------------------------------------------

    def release_through(self, sqn: int, now: float) -> None:
        """RPP: every registered receiver consumed everything up to ``sqn``: delete it (a disk
        message not written yet is never written, and counts as stable)."""
        if self._nocache or self._empty:
            return
        end = (sqn - self._base) & _M
        if end >= _HALF:
            return
        end = min(end, len(self._state) - 1)
        st = self._state
        for i in range(self._t, end + 1):
            s = st[i]
            self._drop_front(i)
            if s in _HELD:
                self.rpp_releases += 1
                if s != _MEM or i < self._wt:  # on disk, being written, or buffered
                    self._release_disk(i)
        if self._t <= end:
            self._t = end + 1
        if self._disk and self._wt <= end:
            # never written: skip them (before the write buffer's first record only)
            self._wt = end + 1
            if self._wcount:
                self._wlast = max(self._wlast, end)
            else:
                self._cut = max(self._cut, end)
        self._after_trail_move()
        if self._disk:
            self._blocked = False
            self._pump(now)
        self._maybe_compact()

    def _release_disk(self, i: int) -> None:
        segno = self._dseg[i]
        if self._shared is not None:
            if self._windex and i >= self._windex[0]:
                return  # still in the write buffer: counted when the write is cut
            self.disk_bytes -= self._flen[i] + OVERHEAD
            self._io.extend(self._shared.release(segno, 1))
            return
        for seg in self._segments:
            if seg.segno == segno:
                seg.live -= 1
                break
        # whole segments nobody needs any more go (the open one stays)
        while (
            len(self._segments) > 1
            and self._segments[0].live <= 0
            and self._segments[0] is not self._wseg
        ):
            self._delete_segment(self._segments.popleft())

    # --- disk writing ---------------------------------------------------------------------

    def _new_segment(self, now: float) -> _Segment:
        segno = self._next_segno
        self._next_segno += 1
        seg = _Segment(
            segno,
            os.path.join(self.cache_dir, fmt.segment_name(self.reg_id, segno)),
            os.path.join(self.cache_dir, fmt.index_name(self.reg_id, segno)),
            NO_SQN,
            NO_SQN,
            fmt.FILE_HEADER_LEN,
            fmt.FILE_HEADER_LEN,
            fmt.FILE_HEADER_LEN,
        )
        flags = fmt.FILE_PREALLOCATED if self.config.preallocate else 0
        self._wbuf += fmt.encode_file_header(fmt.SEG_MAGIC, flags, self.reg_id, segno, now)
        self._whead = fmt.encode_file_header(fmt.IDX_MAGIC, 0, self.reg_id, segno, now)
        self._wstart = 0
        if self.config.preallocate:
            self._wpre = seg.size = self._seg_target + fmt.FILE_HEADER_LEN
        self.disk_bytes += seg.size + seg.idx_end
        self._segments.append(seg)
        return seg

    def _delete_segment(self, seg: _Segment) -> None:
        """Drop a whole segment: its messages leave the repository (the trail advances)."""
        self._io.append(IoJob(IoKind.REPO_DELETE, seg.path, owner=self.reg_id))
        self._io.append(IoJob(IoKind.REPO_DELETE, seg.index_path, owner=self.reg_id))
        self.disk_bytes -= seg.size + seg.idx_end
        if seg.last == NO_SQN or self._empty:
            return
        end = (seg.last - self._base) & _M
        if end >= _HALF or end < self._t:
            return
        for i in range(self._t, end + 1):
            if self._state[i] in _HELD:
                self.wrapped += 1
            self._drop_front(i)
        self._after_trail_move()

    def _room(self, need: int) -> bool:
        """Make ``need`` more disk bytes fit under the limit by deleting the oldest segments
        (SPP); False if they cannot (RPP with unconsumed messages there)."""
        limit = self.config.disk_file_size_limit
        while self.disk_bytes + need > limit:
            if not self._segments or self._segments[0] is self._wseg:
                return len(self._segments) == 0 and need <= limit
            old = self._segments[0]
            if self._rpp and old.live > 0:
                self._blocked = True
                return False
            self._segments.popleft()
            self._delete_segment(old)
        return True

    def _pump(self, now: float) -> None:
        """Put every contiguous, due frame after the write point into write buffers."""
        st = self._state
        n = len(st)
        i = self._wt
        delay = self._delay
        while i < n and not self._blocked:
            s = st[i]
            if s == _ABSENT:
                break
            if s != _MEM:  # lost (skipped) or already on disk (restart)
                if s == _LOST:
                    if self._wcount:
                        self._wlast = i
                    else:
                        self._cut = i
                        if not self._writes:
                            self._complete = i
                i += 1
                continue
            if (
                delay
                and self._time[i] + delay > now
                and self.mem_bytes <= self.config.size_threshold
            ):
                break
            if not self._buffer_record(i, self._frame(i), now):
                break
            i += 1
        self._wt = i
        if self._wcount and len(self._writes) < MAX_WRITES_IN_FLIGHT:
            self._cut_write()

    def _buffer_record(self, i: int, frame: bytes, now: float) -> bool:
        """Put slot ``i``'s record into the write buffer; False if it cannot be written now
        (no disk room: RPP, or nothing to wrap)."""
        rlen = len(frame) + OVERHEAD
        wbuf = self._wbuf
        if self._wcount and len(wbuf) + rlen > self._buffer_limit:
            self._cut_write()
            wbuf = self._wbuf
        sqn = (self._base + i) & _M
        if self._shared is not None:
            if not self._fit_shared(rlen):
                return False
            if self._marker_trail >= 0:
                self._add_marker(now)
            doff = len(self._wbuf)  # within the buffer; placed when the write is cut
            self._wrec_bytes += rlen
        else:
            seg = self._wseg
            if (
                seg is None
                or seg.end + rlen > self._seg_cap
                or self.disk_bytes + rlen + _INDEX_COST > self._disk_limit
            ):
                seg = self._fit_segment(rlen, now)
                if seg is None:
                    return False
                wbuf = self._wbuf
            elif not self._wcount:
                self._wstart = seg.end - len(wbuf)
            doff = seg.end
            self._dseg[i] = seg.segno
            seg.end += rlen
            if seg.size < seg.end:
                self.disk_bytes += seg.end - seg.size
                seg.size = seg.end
            if seg.first == NO_SQN:
                seg.first = sqn
            seg.last = sqn
            seg.live += 1
        arrival = self._time[i] + self._wall
        reg_id = self.reg_id
        # fmt.append_record, inline (the hot path)
        head = _REC_HEAD.pack(
            fmt.REC_MAGIC,
            reg_id,
            sqn,
            fmt.REC_PAYLOAD_CRC,
            0,
            rlen - OVERHEAD,
            arrival,
            _crc(frame),
        )
        wbuf += head
        wbuf += _U32.pack(_crc(head))
        wbuf += frame
        self._ibuf += _ENTRY.pack(sqn, rlen, arrival, reg_id, 0)
        self._doff[i] = doff
        self._windex.append(i)
        self._wcount += 1
        self._wlast = i
        return True

    def _fit_segment(self, rlen: int, now: float) -> _Segment | None:
        """The segment the next record of ``rlen`` bytes goes to, opening a new one and
        deleting the oldest (SPP wrap) as needed; None if it cannot be written now."""
        seg = self._wseg
        need = rlen + _INDEX_COST
        roll = seg is None or (
            seg.end + rlen > self._seg_target + fmt.FILE_HEADER_LEN and seg.first != NO_SQN
        )
        if not roll and not self._room(need):
            if self._rpp:
                return None
            roll = True  # the open segment is the oldest: start another, then it can go
        if roll:
            if self._wcount:
                self._cut_write()
            self._wseg = None
            new_cost = 2 * fmt.FILE_HEADER_LEN + (
                self._seg_target if self.config.preallocate else rlen
            )
            if not self._room(new_cost + _INDEX_COST):
                return None
            seg = self._wseg = self._new_segment(now)
        assert seg is not None
        if not self._wcount:
            self._wstart = seg.end - len(self._wbuf)
        return seg

    def _fit_shared(self, rlen: int) -> bool:
        if self.disk_bytes + self._wrec_bytes + rlen <= self.config.disk_file_size_limit:
            return True
        return self._wrap_shared(rlen)

    def _add_marker(self, now: float) -> None:
        """reduced-fd: a TRAIL record telling a restart where this repository now starts."""
        sqn = self._marker_trail
        self._marker_trail = -1
        fmt.append_record(self._wbuf, self.reg_id, sqn, b"", now, fmt.REC_TRAIL)
        self._ibuf += fmt.INDEX_ENTRY.pack(sqn, OVERHEAD, now, self.reg_id, fmt.REC_TRAIL)

    def _wrap_shared(self, need: int) -> bool:
        """reduced-fd: release this repository's oldest written records until ``need`` fits."""
        if self._rpp:
            self._blocked = True
            return False
        st = self._state
        i = self._t
        n = len(st)
        limit = self.config.disk_file_size_limit
        moved = False
        while i < n and self.disk_bytes + self._wrec_bytes + need > limit:
            s = st[i]
            if s == _MEM:
                break  # nothing written left to give back
            if s in (_BOTH, _DISK):
                self._release_disk(i)
                self.wrapped += 1
            self._drop_front(i)
            moved = True
            i += 1
        if moved:
            self._after_trail_move()
            self._marker_trail = self._sqn(self._t)
        return self.disk_bytes + self._wrec_bytes + need <= limit

    def _cut_write(self) -> None:
        """Turn the buffered records into one WRITE job."""
        if not self._wcount:
            return
        self._tag += 1
        data = bytes(self._wbuf)
        entries = self._ibuf
        if self._shared is not None:
            log = self._shared
            segno, off, ioff, seg_head, idx_head, prealloc = log.reserve(
                len(data),
                len(entries) + fmt.BLOCK_HEADER_LEN,
                self.created,
                self.config.preallocate,
            )
            base = off + len(seg_head)
            held = 0
            st = self._state
            for j in self._windex:
                self._doff[j] += base
                self._dseg[j] = segno
                if st[j] != _ABSENT:  # (not released while it waited in the buffer)
                    held += 1
                    self.disk_bytes += self._flen[j] + OVERHEAD
            log.refs[segno] = log.refs.get(segno, 0) + held
            self._wrec_bytes = 0
            seg_path, idx_path = log.paths(segno)
            job = IoJob(
                IoKind.WRITE,
                seg_path,
                off,
                seg_head + data,
                index_path=idx_path,
                index_offset=ioff,
                index_data=idx_head + fmt.encode_index_block(base, entries),
                sync=self.config.fdatasync,
                preallocate=prealloc,
                owner=self.reg_id,
                tag=self._tag,
            )
        else:
            seg = self._wseg
            assert seg is not None
            head = self._whead
            first_off = self._wstart + (fmt.FILE_HEADER_LEN if head else 0)
            block = fmt.encode_index_block(first_off, entries)
            job = IoJob(
                IoKind.WRITE,
                seg.path,
                self._wstart,
                data,
                index_path=seg.index_path,
                index_offset=seg.idx_end - len(head),
                index_data=head + block,
                sync=self.config.fdatasync,
                preallocate=self._wpre,
                owner=self.reg_id,
                tag=self._tag,
            )
            seg.idx_end += len(block)
            self.disk_bytes += len(block)
            windex = self._windex
            lo, hi = windex[0], windex[-1] + 1  # (the write holds records: _wcount > 0)
            if hi - lo == len(windex):  # (appended in sequence order) consecutive: one slice
                self._dseg[lo:hi] = array("I", (seg.segno,)) * (hi - lo)
            else:
                for j in windex:
                    self._dseg[j] = seg.segno
            self._whead = b""
            self._wpre = 0
            self._wstart = seg.end
        self._writes.append(_Write(self._tag, self._wlast, job))
        self._io.append(job)
        self._cut = self._wlast
        self._wbuf = bytearray()
        self._ibuf = bytearray()
        self._windex = []
        self._wcount = 0
        self.writes += 1

    def take_io(self) -> list[IoJob]:
        self._maybe_compact()
        if self._wcount and len(self._writes) < MAX_WRITES_IN_FLIGHT:
            self._cut_write()
        out = self._io
        self._io = []
        return out

    def _write_done(self, w: _Write, now: float) -> None:
        w.done = True
        st = self._state
        writes = self._writes
        while writes and writes[0].done:
            done = writes.popleft()
            if done.last > self._complete:
                # mark its frames written (in memory and on disk now)
                a, b = max(self._complete + 1, self._t), done.last + 1
                st[a:b] = st[a:b].translate(_WRITTEN)
                self._complete = done.last
        if not writes and not self._wcount and self._cut > self._complete:
            self._complete = self._cut
        self._release_cache(now)

    def io_done(self, done: IoDone, now: float) -> None:
        job = done.job
        if job.kind == IoKind.READ:
            self._read_done(done)
            return
        if job.kind != IoKind.WRITE:
            if not done.ok:
                self.last_error = f"{job.kind.name} {job.path}: {done.error}"
            return
        w = next((w for w in self._writes if w.tag == job.tag), None)
        if w is None:
            return
        if done.ok:
            if w in self._failed:
                self._failed.remove(w)
            self._write_done(w, now)
        else:
            self.write_errors += 1
            self.last_error = f"write {job.path}: {done.error}"
            if w not in self._failed:
                self._failed.append(w)
            self._retry_at = now + RETRY_DELAY
        self._pump(now)
        self._maybe_compact()

    # --- reads ----------------------------------------------------------------------------

    def get(self, sqn: int) -> bytes | Literal[Pending.PENDING] | None:
        """The frame of ``sqn`` if in memory; PENDING if on disk (a READ was queued; the frame
        comes from :meth:`take_read_results`); None if not held."""
        if self._nocache or self._empty:
            return None
        i = (sqn - self._base) & _M
        if i >= len(self._state) or i < self._t:
            return None
        s = self._state[i]
        if s in (_MEM, _BOTH):
            return self._frame(i)
        if s != _DISK:
            return None
        if sqn in self._reading:
            return PENDING
        if len(self._reads) < self.config.max_read_jobs:
            self._read(i)
        elif len(self._read_wait) < MAX_QUEUED_READS:
            self._read_wait.append(sqn)
        else:
            self.read_refused += 1
            return None
        self._reading.add(sqn)
        return PENDING

    def _read(self, i: int) -> None:
        self._tag += 1
        sqn = self._sqn(i)
        if self._shared is not None:
            path = self._shared.paths(self._dseg[i])[0]
        else:
            path = os.path.join(self.cache_dir, fmt.segment_name(self.reg_id, self._dseg[i]))
        self._io.append(
            IoJob(
                IoKind.READ,
                path,
                self._doff[i],
                length=self._flen[i] + OVERHEAD,
                owner=self.reg_id,
                tag=self._tag,
            )
        )
        self._reads[self._tag] = sqn
        self.reads += 1

    def _read_done(self, done: IoDone) -> None:
        sqn = self._reads.pop(done.job.tag, None)
        if sqn is None:
            return
        self._reading.discard(sqn)
        frame: bytes | None = None
        if done.ok:
            try:
                rid, got, flags, length, _ = fmt.check_record(done.data, 0, True)
                if (
                    rid == self.reg_id
                    and got == sqn
                    and not flags & (fmt.REC_TRAIL | fmt.REC_DELETE)
                ):
                    frame = done.data[fmt.RECORD_HEADER_LEN : fmt.RECORD_HEADER_LEN + length]
                else:
                    self.last_error = f"read of sqn {sqn}: found RegID {rid} sqn {got}"
            except fmt.StoreFormatError as exc:
                self.last_error = f"read of sqn {sqn}: {exc}"
        else:
            self.last_error = f"read of sqn {sqn}: {done.error}"
        if frame is None:
            self.read_errors += 1
        self._read_results.append((sqn, frame))
        while self._read_wait and len(self._reads) < self.config.max_read_jobs:
            nxt = self._read_wait.popleft()
            i = (nxt - self._base) & _M
            if i < len(self._state) and i >= self._t and self._state[i] == _DISK:
                self._read(i)
            else:
                self._reading.discard(nxt)
                self._read_results.append((nxt, None))

    def take_read_results(self) -> list[tuple[int, bytes | None]]:
        out = self._read_results
        self._read_results = []
        return out

    # --- timers ---------------------------------------------------------------------------

    def next_timer(self) -> float | None:
        due: list[float] = []
        if self._failed and self._retry_at is not None:
            due.append(self._retry_at)
        if self._nocache or self._empty:
            return min(due) if due else None
        age = self.config.age_threshold
        if age > 0 and not (self._rpp and not self._disk):
            i = max(self._mt, self._t)
            st = self._state
            n = len(st)
            while i < n and st[i] not in (_MEM, _BOTH):
                i += 1
            if i < n and (not self._disk or st[i] == _BOTH):
                due.append(self._time[i] + age)
        wt = self._wt
        if self._disk and self._delay and wt < len(self._state) and self._state[wt] == _MEM:
            due.append(self._time[self._wt] + self._delay)
        return min(due) if due else None

    def handle_timer(self, now: float) -> None:
        if self._failed and self._retry_at is not None and now >= self._retry_at:
            self._retry_at = None
            for w in self._failed:
                self._io.append(w.job)
        if self._nocache or self._empty:
            return
        if self._disk:
            self._pump(now)
            self._release_cache(now)
        elif not self._rpp:
            self._shrink_memory(now)
        self._maybe_compact()

    # --- end ------------------------------------------------------------------------------

    def destroy(self) -> list[IoJob]:
        """Delete this repository's files (its state is being deleted)."""
        jobs = self.take_io()
        if self._shared is not None:
            now = self.created
            buf = bytearray()
            fmt.append_record(buf, self.reg_id, 0, b"", now, fmt.REC_DELETE)
            entry = fmt.INDEX_ENTRY.pack(0, len(buf), now, self.reg_id, fmt.REC_DELETE)
            log = self._shared
            segno, off, ioff, seg_head, idx_head, prealloc = log.reserve(
                len(buf), len(entry) + fmt.BLOCK_HEADER_LEN, now, self.config.preallocate
            )
            seg_path, idx_path = log.paths(segno)
            jobs.append(
                IoJob(
                    IoKind.WRITE,
                    seg_path,
                    off,
                    seg_head + bytes(buf),
                    index_path=idx_path,
                    index_offset=ioff,
                    index_data=idx_head + fmt.encode_index_block(off + len(seg_head), entry),
                    preallocate=prealloc,
                    owner=self.reg_id,
                )
            )
            st = self._state
            for i in range(self._t, len(st)):
                if st[i] in (_BOTH, _DISK):
                    jobs.extend(log.release(self._dseg[i], 1))
        else:
            for seg in self._segments:
                jobs.append(IoJob(IoKind.REPO_DELETE, seg.path, owner=self.reg_id))
                jobs.append(IoJob(IoKind.REPO_DELETE, seg.index_path, owner=self.reg_id))
            self._segments.clear()
        self._state = bytearray()
        self._chunks.clear()
        self._live.clear()
        self._empty = True
        self._fast = False
        self.mem_bytes = self.disk_bytes = self.bytes_held = self.frames_held = 0
        return jobs

    def stats(self) -> dict[str, int]:
        return {
            "trail_sqn": self.trail_sqn,
            "mem_trail_sqn": self.mem_trail_sqn,
            "lead_sqn": self.lead_sqn,
            "sync_sqn": self.sync_sqn,
            "sync_complete_sqn": self.sync_complete_sqn,
            "contig_sqn": self.contig_sqn,
            "stored": self.stored,
            "duplicates": self.duplicates,
            "old": self.old,
            "intentional_drops": self.intentional_drops,
            "size_limit_drops": self.size_limit_drops,
            "gap_drops": self.gap_drops,
            "lost": self.lost,
            "mem_bytes": self.mem_bytes,
            "disk_bytes": self.disk_bytes,
            "bytes_held": self.bytes_held,
            "frames_held": self.frames_held,
            "threshold_releases": self.threshold_releases,
            "age_releases": self.age_releases,
            "rpp_releases": self.rpp_releases,
            "wrapped": self.wrapped,
            "writes": self.writes,
            "write_errors": self.write_errors,
            "writes_pending": len(self._writes),
            "reads": self.reads,
            "reads_pending": len(self._reads),
            "read_errors": self.read_errors,
            "read_refused": self.read_refused,
            "full": int(self.full),
        }

    # --- restart --------------------------------------------------------------------------

    def _restore(self, segments: Sequence[RestoredSegment], now: float) -> None:
        """Take the records :func:`restore_repository` handed over (all on disk)."""
        hours = self.config.restore_last_hours
        cutoff = -1.0
        if hours > 0:
            newest = max((max(s.arrivals) for s in segments if len(s.arrivals)), default=0.0)
            cutoff = newest - hours * 3600.0
        shared = self._shared is not None
        for seg in segments:
            keep = 0
            if cutoff > 0:
                arr = seg.arrivals
                while keep < len(arr) and arr[keep] < cutoff:
                    keep += 1
            if not shared:
                s = _Segment(
                    seg.segno,
                    os.path.join(self.cache_dir, fmt.segment_name(self.reg_id, seg.segno)),
                    os.path.join(self.cache_dir, fmt.index_name(self.reg_id, seg.segno)),
                    seg.sqns[0] if len(seg.sqns) else NO_SQN,
                    seg.sqns[-1] if len(seg.sqns) else NO_SQN,
                    seg.seg_bytes,
                    seg.idx_bytes,
                    max(seg.seg_bytes, seg.file_bytes),
                )
                self._next_segno = max(self._next_segno, seg.segno + 1)
                if keep and keep == len(seg.sqns):
                    # wholly older than <restore-last>: not restored, its files go
                    self._io.append(IoJob(IoKind.REPO_DELETE, s.path, owner=self.reg_id))
                    self._io.append(IoJob(IoKind.REPO_DELETE, s.index_path, owner=self.reg_id))
                    continue
                s.live = len(seg.sqns) - keep
                self._segments.append(s)
                self.disk_bytes += s.size + s.idx_end
            elif keep:
                assert self._shared is not None
                self._io.extend(self._shared.release(seg.segno, keep))
            self._load_columns(seg, keep)
            if shared:
                self.disk_bytes += sum(seg.lengths[keep:])
        if not self._segments:
            self._wseg = None
        else:
            last = self._segments[-1]
            if last.end < self._seg_target + fmt.FILE_HEADER_LEN:
                self._wseg = last
                self._wstart = last.end
            else:
                self._wseg = None
        n = len(self._state)
        self._wt = n
        self._cut = self._complete = self._contig = self._reported = n - 1
        if self._t < n:
            self._advance_contig()

    def _load_columns(self, seg: RestoredSegment, keep: int) -> None:
        sqns = seg.sqns
        count = len(sqns) - keep
        if count <= 0:
            return
        first = sqns[keep]
        if self._empty:
            self._base = first
            self._empty = False
            self._fast = not self._rpp
        start = (first - self._base) & _M
        n = len(self._state)
        if start >= _HALF or start < n:
            return  # out of order with the previous segment: storeio already reported it
        if start > n:
            self._grow(start - n)
        last = sqns[-1]
        contiguous = ((last - first) & _M) == count - 1
        if contiguous:
            self._moff.extend(array("Q", bytes(8 * count)))
            self._flen.extend(array("I", (x - OVERHEAD for x in seg.lengths[keep:])))
            self._time.extend(array("d", (t - self._wall for t in seg.arrivals[keep:])))
            self._state.extend(bytes((_DISK,)) * count)
            if self._rpp:
                self._acct.extend(array("I", (x - OVERHEAD for x in seg.lengths[keep:])))
            self._dseg.extend(array("I", (seg.segno,)) * count)
            self._doff.extend(array("I", seg.offsets[keep:]))
        else:
            for k in range(keep, len(sqns)):
                i = (sqns[k] - self._base) & _M
                if i >= _HALF or i < len(self._state):
                    continue
                if i > len(self._state):
                    self._grow(i - len(self._state))
                flen = seg.lengths[k] - OVERHEAD
                self._moff.append(0)
                self._flen.append(flen)
                self._time.append(seg.arrivals[k] - self._wall)
                self._state.append(_DISK)
                if self._rpp:
                    self._acct.append(flen)
                self._dseg.append(seg.segno)
                self._doff.append(seg.offsets[k])
        held = sum(seg.lengths[keep:])
        self.frames_held += count
        self.bytes_held += held - (OVERHEAD * count if self._rpp else 0)


def _payload_len(frame: bytes) -> int:
    """RPP accounting: the payload bytes of an LBMC data frame (headers excluded); the whole
    frame when it does not decode."""
    try:
        _, _, _, payload, _ = lbmc.decode_data(frame)
    except ProtocolError:
        return len(frame)
    return len(payload)


def make_repository(
    reg_id: int, config: RepositoryConfig, cache_dir: str, now: float, *, wall_offset: float = 0.0
) -> Repository:
    """A new, empty repository of ``config.kind`` for source ``reg_id``.  ``now`` is the core's
    clock; ``now + wall_offset`` must be wall-clock seconds (arrival times go to disk and
    ``<restore-last>`` compares them across restarts)."""
    return Repository(reg_id, config, cache_dir, now, wall_offset)


def restore_repository(
    reg_id: int,
    config: RepositoryConfig,
    cache_dir: str,
    segments: Sequence[RestoredSegment],
    now: float,
    *,
    wall_offset: float = 0.0,
) -> Repository:
    """A repository holding what was read back from disk at start-up (segments oldest first;
    for reduced-fd, the shared log must already be installed with :meth:`SharedLog.install`).
    Every restored message is on disk and stable; none is in memory."""
    repo = Repository(reg_id, config, cache_dir, now, wall_offset)
    if repo._disk:
        repo._restore(segments, now)
    return repo
