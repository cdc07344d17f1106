"""The store's disk: runs repository and state I/O jobs off the event loop; reads a store back.

Theory of operation
-------------------
:class:`StoreIO` owns one writer thread and a bounded queue of :class:`IoJob` s.  The loop only
appends to the queue (``submit``); the thread performs the jobs in order (so a segment's delete
follows its writes, a state file's replacement follows the previous one), taking every job
queued by then as one batch, and hands the :class:`IoDone` s back in batches with
``loop.call_soon_threadsafe``: the loop never waits for a disk, and a completion is always a later input to the core, after the bytes were accepted by
the operating system (and ``fdatasync``-ed when the job asks).  Any ``OSError`` (ENOSPC: disk
full) becomes an IoDone with the error: the repository stops advancing stability, counts it and
submits the same job again later; nothing is skipped.  A job refused because the queue is full
comes back the same way (errno EAGAIN), so a refused write is never taken for a written one.

The queue is a :class:`queue.SimpleQueue` (its put and blocking get are C): a job handed to the
idle thread and its completion back cost about 55 us of CPU (both threads, a loaded 2-core
machine) where a ``threading.Condition`` over a deque cost about 70 -- at one write per read of
a source's transport, a large share of the Store's CPU per message.  It is bounded by the jobs
submitted whose completion the loop has not yet had, counted on the loop alone.

The file calls are injectable (:class:`FileOps`, a constructor parameter) so tests can make
writes fail without patching anything.  ``on_batch``, if given, is called on the writer thread
with each batch's start and end (:func:`time.perf_counter`) and its jobs: a diagnostic (the
daemon's stage trace, :mod:`daemons.umestored.trace`).

:func:`load_store` reads a Store instance's state and cache directories at start-up and rebuilds
the repositories: a torn or bad tail is cut back to the last whole record (lost bytes reported
in ``repairs``), a bad record in the middle is reported, counted and not served.  The
directories must exist: they are never created (UM does not either).
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import os
import queue
import threading
import time
from array import array
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

from umcore.errors import ConfigError
from umcore.store import diskformat as fmt
from umcore.store.io import IoDone, IoJob, IoKind
from umcore.store.repository import (
    KINDS,
    Repository,
    RepositoryConfig,
    RestoredSegment,
    SharedLog,
    config_for_state,
    make_repository,
    restore_repository,
)
from umcore.store.state import SourceState, decode_state, parse_state_name

__all__ = ["DEFAULT_MAX_PENDING", "FileOps", "LoadedStore", "StoreIO", "load_store"]

# Jobs submitted and not yet completed (queued, being performed, or their completion on its way
# to the loop): enough for every repository of a busy store to have its two writes and a burst
# of reads outstanding; beyond it submit refuses (counted).
DEFAULT_MAX_PENDING = 65536
# Open files kept by the writer: a disk repository uses two (segment and index) at a time.
MAX_OPEN_FILES = 256
_fdatasync = getattr(os, "fdatasync", os.fsync)  # macOS and Windows have no fdatasync
_O_BINARY = getattr(os, "O_BINARY", 0)  # Windows: no newline translation
# Windows cannot open (or fsync) a directory: a rename there is made durable by the OS itself.
_SYNC_DIRS = os.name != "nt"


def _pwrite_seek(fd: int, data: bytes, offset: int) -> int:
    """``os.pwrite`` where the platform has none (Windows): one thread uses the fds."""
    os.lseek(fd, offset, os.SEEK_SET)
    return os.write(fd, data)


def _pread_seek(fd: int, length: int, offset: int) -> bytes:
    os.lseek(fd, offset, os.SEEK_SET)
    return os.read(fd, length)


_PWRITE: Callable[[int, bytes, int], int] = getattr(os, "pwrite", _pwrite_seek)
_PREAD: Callable[[int, int, int], bytes] = getattr(os, "pread", _pread_seek)


@dataclass(frozen=True, slots=True)
class FileOps:
    """The file calls the writer thread makes (tests inject failing ones)."""

    pwrite: Callable[[int, bytes, int], int] = _PWRITE
    pread: Callable[[int, int, int], bytes] = _PREAD
    fdatasync: Callable[[int], None] = _fdatasync
    fsync: Callable[[int], None] = os.fsync


class StoreIO:
    """Runs :class:`IoJob` s on one writer thread; see the module docstring."""

    def __init__(
        self,
        loop: asyncio.AbstractEventLoop,
        on_done: Callable[[IoDone], None],
        *,
        max_pending: int = DEFAULT_MAX_PENDING,
        ops: FileOps | None = None,
        on_batch: Callable[[float, float, list[IoJob]], None] | None = None,
    ) -> None:
        self._loop = loop
        self._on_batch = on_batch
        self._on_done = on_done
        self._max = max_pending
        self._ops = ops or FileOps()
        # jobs for the thread, in order; None (after the last job) tells it to stop
        self._queue: queue.SimpleQueue[IoJob | None] = queue.SimpleQueue()
        self._pending = 0  # submitted, completion not yet delivered
        self._closing = False
        self._fds: dict[str, int] = {}
        self._idle = asyncio.Event()
        self._idle.set()
        self.refused = 0
        self.completed = 0
        self.errors = 0
        self._thread = threading.Thread(target=self._run, name="umestored-io", daemon=True)
        self._thread.start()

    @property
    def pending(self) -> int:
        return self._pending

    def submit(self, jobs: Iterable[IoJob]) -> None:
        refused: list[IoDone] = []
        put = self._queue.put
        for job in jobs:
            if self._closing or self._pending >= self._max:
                self.refused += 1
                refused.append(IoDone(job, "store I/O queue full", errno.EAGAIN))
                continue
            put(job)
            self._pending += 1
        if self._pending:
            self._idle.clear()
        if refused:
            self._pending += len(refused)
            self._idle.clear()
            self._loop.call_soon(self._deliver, refused)

    async def drain(self) -> None:
        """Wait until every submitted job's completion was delivered."""
        while self._pending:
            self._idle.clear()
            await self._idle.wait()

    async def close(self) -> None:
        await self.drain()
        if not self._closing:
            self._closing = True
            self._queue.put(None)
        await asyncio.to_thread(self._thread.join)

    def _deliver(self, done: list[IoDone]) -> None:
        self._pending -= len(done)
        for d in done:
            self.completed += 1
            if d.error is not None:
                self.errors += 1
            self._on_done(d)
        if not self._pending:
            self._idle.set()

    # --- the writer thread ------------------------------------------------------------------

    def _run(self) -> None:
        get, get_nowait = self._queue.get, self._queue.get_nowait
        stop = False
        while not stop:
            job = get()  # (blocks without the GIL until the loop submits)
            if job is None:
                break
            batch = [job]
            while True:  # everything queued by now: one batch, one completion call
                try:
                    job = get_nowait()
                except queue.Empty:
                    break
                if job is None:
                    stop = True  # (after this batch: every job before it is performed)
                    break
                batch.append(job)
            on_batch = self._on_batch
            start = time.perf_counter() if on_batch is not None else 0.0
            out = [self._perform(job) for job in batch]
            if on_batch is not None:
                on_batch(start, time.perf_counter(), batch)
            try:
                self._loop.call_soon_threadsafe(self._deliver, out)
            except RuntimeError:  # the loop is closed: nobody is waiting any more
                break
        for fd in self._fds.values():
            os.close(fd)
        self._fds.clear()

    def _fd(self, path: str, prealloc: int = 0) -> tuple[int, bool]:
        fd = self._fds.get(path)
        if fd is not None:
            return fd, False
        created = False
        try:
            fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_EXCL | _O_BINARY, 0o644)
            created = True
        except FileExistsError:
            fd = os.open(path, os.O_RDWR | _O_BINARY)
        if created and prealloc:
            os.ftruncate(fd, prealloc)
        if len(self._fds) >= MAX_OPEN_FILES:
            old, ofd = next(iter(self._fds.items()))
            del self._fds[old]
            os.close(ofd)
        self._fds[path] = fd
        return fd, created

    def _forget(self, path: str) -> None:
        fd = self._fds.pop(path, None)
        if fd is not None:
            os.close(fd)

    def _write_all(self, fd: int, data: bytes, offset: int) -> None:
        while data:
            n = self._ops.pwrite(fd, data, offset)
            if n <= 0:
                raise OSError(errno.EIO, "pwrite wrote nothing")
            data = data[n:]  # a short write (rare): the rest again
            offset += n

    def _sync_dir(self, path: str) -> None:
        if not _SYNC_DIRS:
            return
        dfd = os.open(os.path.dirname(path) or ".", os.O_RDONLY)
        try:
            self._ops.fsync(dfd)
        finally:
            os.close(dfd)

    def _perform(self, job: IoJob) -> IoDone:
        try:
            k = job.kind
            if k == IoKind.WRITE:
                fd, created = self._fd(job.path, job.preallocate)
                self._write_all(fd, job.data, job.offset)
                ifd = -1
                icreated = False
                if job.index_path:
                    ifd, icreated = self._fd(job.index_path)
                    self._write_all(ifd, job.index_data, job.index_offset)
                if job.sync:
                    self._ops.fdatasync(fd)
                    if ifd >= 0:
                        self._ops.fdatasync(ifd)
                    if created or icreated:
                        self._sync_dir(job.path)
                return IoDone(job)
            if k == IoKind.READ:
                fd, _ = self._fd(job.path)
                return IoDone(job, data=self._ops.pread(fd, job.length, job.offset))
            if k == IoKind.SYNC:
                fd, _ = self._fd(job.path)
                self._ops.fdatasync(fd)
                return IoDone(job)
            if k == IoKind.STATE_WRITE:
                _atomic_write(job.path, job.data, self._ops)
                return IoDone(job)
            if k in (IoKind.STATE_DELETE, IoKind.REPO_DELETE):
                self._forget(job.path)
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(job.path)
                self._sync_dir(job.path)
                return IoDone(job)
            if k == IoKind.TRUNCATE:
                self._forget(job.path)
                os.truncate(job.path, job.offset)
                if job.preallocate > job.offset:
                    os.truncate(job.path, job.preallocate)
                return IoDone(job)
            return IoDone(job, f"unknown job kind {k!r}", errno.EINVAL)
        except OSError as exc:
            return IoDone(job, f"{exc.strerror or exc} ({job.path})", exc.errno or errno.EIO)


def _atomic_write(path: str, data: bytes, ops: FileOps | None = None) -> None:
    """Temporary file in the same directory, write, fsync, rename over ``path``, fsync the
    directory: a reader (or a restart) sees the old file or the new one, never a mix."""
    ops = ops or FileOps()
    tmp = f"{path}.tmp"
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | _O_BINARY, 0o644)
    try:
        off = 0
        while off < len(data):
            n = ops.pwrite(fd, data[off:], off)
            if n <= 0:
                raise OSError(errno.EIO, "pwrite wrote nothing")
            off += n
        ops.fsync(fd)
    except BaseException:
        os.close(fd)
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
    os.close(fd)
    os.replace(tmp, path)
    if not _SYNC_DIRS:
        return
    dfd = os.open(os.path.dirname(path) or ".", os.O_RDONLY)
    try:
        ops.fsync(dfd)
    finally:
        os.close(dfd)


# --- start-up ------------------------------------------------------------------------------


@dataclass
class LoadedStore:
    """What :func:`load_store` found: the sources with their rebuilt repositories, log lines
    for every repair and refusal, and counters."""

    sources: list[tuple[SourceState, Repository]] = field(default_factory=list)
    repairs: list[str] = field(default_factory=list)
    bytes_truncated: int = 0
    corrupt_records: int = 0
    bad_state_files: int = 0
    messages: int = 0
    segments: int = 0
    shared_log: SharedLog | None = None


def _check_dir(path: str, what: str) -> None:
    if not os.path.isdir(path):
        raise ConfigError(
            f"directory {path!r} does not exist (the Store does not create it)",
            what=what,
            allowed="an existing directory",
        )


def _file_size(path: str) -> int:
    try:
        return os.stat(path).st_size
    except FileNotFoundError:
        return 0


def _read(path: str, offset: int = 0, length: int = -1) -> bytes:
    try:
        with open(path, "rb") as f:
            f.seek(offset)
            return f.read() if length < 0 else f.read(length)
    except FileNotFoundError:
        return b""


def _header_ok(buf: bytes, off: int, reg_id: int, sqn: int, length: int) -> bool:
    try:
        rid, got, _flags, flen, _, _ = fmt.decode_record_header(buf, off)
    except fmt.StoreFormatError:
        return False
    return rid == reg_id and got == sqn and flen + fmt.RECORD_HEADER_LEN == length


def _nonzero_end(buf: bytes) -> int:
    return len(buf.rstrip(b"\x00"))


def _load_segment(
    cache_dir: str,
    reg_id: int,
    segno: int,
    verify: bool,
    after: int | None,
    out: LoadedStore,
) -> RestoredSegment | None:
    """Read one segment of a disk repository back, repairing its tail; None if unusable."""
    seg_path = os.path.join(cache_dir, fmt.segment_name(reg_id, segno))
    idx_path = os.path.join(cache_dir, fmt.index_name(reg_id, segno))
    size = _file_size(seg_path)
    head = _read(seg_path, 0, fmt.FILE_HEADER_LEN)
    try:
        fh = fmt.decode_file_header(head, fmt.SEG_MAGIC)
        if fh.reg_id != reg_id or fh.segno != segno:
            raise fmt.StoreFormatError(f"names RegID {fh.reg_id} segment {fh.segno}")
    except fmt.StoreFormatError as exc:
        # a segment whose first write was cut short holds nothing that was ever ACKed
        out.repairs.append(
            f"{seg_path}: {exc}; removed ({_nonzero_end(_read(seg_path))} bytes lost)"
        )
        out.bytes_truncated += _nonzero_end(_read(seg_path))
        for p in (seg_path, idx_path):
            with contextlib.suppress(FileNotFoundError):
                os.unlink(p)
        return None
    prealloc = bool(fh.flags & fmt.FILE_PREALLOCATED)
    ibuf = _read(idx_path)
    try:
        index = fmt.parse_index(ibuf)
    except fmt.StoreFormatError as exc:
        out.repairs.append(f"{idx_path}: {exc}; rebuilt from the segment")
        index = fmt.parse_index(fmt.encode_file_header(fmt.IDX_MAGIC, 0, reg_id, segno, fh.created))
        index.valid_end = 0
    if index.problem is not None and index.valid_end < len(ibuf):
        out.repairs.append(
            f"{idx_path}: {index.problem}; index cut to {index.valid_end} bytes "
            "(records after it are found by scanning the segment)"
        )
    sqns, offsets, lengths, arrivals = index.sqns, index.offsets, index.lengths, index.arrivals
    n = len(sqns)
    # entries the data file does not back (never fully written): drop them
    while n and offsets[n - 1] + lengths[n - 1] > size:
        n -= 1
    data = b""
    if verify:
        data = _read(seg_path)
    # the last indexed record must check out, else walk back
    while n:
        off, ln = offsets[n - 1], lengths[n - 1]
        buf = data if verify else _read(seg_path, off, fmt.RECORD_HEADER_LEN)
        if _header_ok(buf, off if verify else 0, reg_id, sqns[n - 1], ln):
            break
        n -= 1
    keep = array("B", b"\x01") * n
    if verify:
        for k in range(n):
            try:
                fmt.check_record(data, offsets[k], True)
                ok = _header_ok(data, offsets[k], reg_id, sqns[k], lengths[k])
            except fmt.StoreFormatError:
                ok = False
            if not ok:
                keep[k] = 0
                out.corrupt_records += 1
                out.repairs.append(
                    f"{seg_path}: record of sqn {sqns[k]} at offset {offsets[k]} is corrupt; "
                    "skipped, not served"
                )
    data_end = offsets[n - 1] + lengths[n - 1] if n else fmt.FILE_HEADER_LEN
    idx_end = index.valid_end if n == len(sqns) else 0
    # records beyond the index: scan them
    tail = data[data_end:] if verify else _read(seg_path, data_end)
    recs, end, problem = fmt.scan_records(tail, 0, True)
    extra = [r for r in recs if r[1] == reg_id and not r[3] & (fmt.REC_TRAIL | fmt.REC_DELETE)]
    good_end = data_end + end
    lost = (_nonzero_end(tail) - end) if prealloc else (len(tail) - end)
    if problem is not None and lost > 0:
        out.repairs.append(
            f"{seg_path}: torn or bad tail at offset {good_end} ({problem}): cut to the last "
            f"whole record, {lost} bytes lost"
        )
        out.bytes_truncated += lost
    if good_end < size:
        os.truncate(seg_path, good_end)
        if prealloc:
            os.truncate(seg_path, size)
    # rewrite the index when it lost entries or misses the scanned ones
    sqns_l = array("I", sqns[:n])
    offs_l = array("Q", offsets[:n])
    lens_l = array("I", lengths[:n])
    arr_l = array("d", arrivals[:n])
    if extra or idx_end != len(ibuf):
        if idx_end == 0 or n != len(sqns):
            _rewrite_index(idx_path, reg_id, segno, fh.created, sqns_l, offs_l, lens_l, arr_l)
            idx_end = _file_size(idx_path)
        else:
            os.truncate(idx_path, idx_end)
        if extra:
            entries = b"".join(fmt.INDEX_ENTRY.pack(r[2], r[4], r[5], reg_id, 0) for r in extra)
            block = fmt.encode_index_block(data_end + extra[0][0], entries)
            with open(idx_path, "r+b") as f:
                f.seek(idx_end)
                f.write(block)
            idx_end += len(block)
        for r in extra:
            sqns_l.append(r[2])
            offs_l.append(data_end + r[0])
            lens_l.append(r[4])
            arr_l.append(r[5])
            keep.append(1)
    # sequence order: after the previous segment, rising inside this one
    prev = after
    out_s, out_o, out_l, out_a = array("I"), array("I"), array("I"), array("d")
    all_good = keep.count(0) == 0
    if all_good and len(sqns_l):
        first = sqns_l[0]
        all_good = ((sqns_l[-1] - first) & 0xFFFFFFFF) == len(sqns_l) - 1
        if prev is not None:
            all_good = all_good and 0 < ((first - prev) & 0xFFFFFFFF) < 0x80000000
    if all_good:
        out_s, out_l, out_a = sqns_l, lens_l, arr_l
        out_o = array("I", offs_l)
    else:
        for k in range(len(sqns_l)):
            if not keep[k]:
                continue
            s = sqns_l[k]
            if prev is not None and not 0 < ((s - prev) & 0xFFFFFFFF) < 0x80000000:
                out.corrupt_records += 1
                out.repairs.append(f"{seg_path}: sqn {s} out of order after {prev}; skipped")
                continue
            prev = s
            out_s.append(s)
            out_o.append(offs_l[k])
            out_l.append(lens_l[k])
            out_a.append(arr_l[k])
    out.segments += 1
    out.messages += len(out_s)
    return RestoredSegment(
        segno, good_end, idx_end, out_s, out_o, out_l, out_a, file_bytes=max(size, good_end)
    )


def _rewrite_index(
    path: str,
    reg_id: int,
    segno: int,
    created: float,
    sqns: array[int],
    offsets: array[int],
    lengths: array[int],
    arrivals: array[float],
) -> None:
    head = fmt.encode_file_header(fmt.IDX_MAGIC, 0, reg_id, segno, created)
    body = b""
    if len(sqns):
        entries = b"".join(
            fmt.INDEX_ENTRY.pack(sqns[k], lengths[k], arrivals[k], reg_id, 0)
            for k in range(len(sqns))
        )
        body = fmt.encode_index_block(offsets[0], entries)
    _atomic_write(path, head + body)


def _load_shared(
    cache_dir: str, segnos: list[int], wanted: dict[int, RepositoryConfig], out: LoadedStore
) -> tuple[dict[int, list[RestoredSegment]], SharedLog]:
    """Read the reduced-fd set back: every indexed record is checked (the set is small and
    deprecated; correctness first), markers applied, records of unknown RegIDs let go."""
    found: dict[int, list[tuple[int, int, int, int, float]]] = {}  # reg -> (segno,sqn,off,len,t)
    marks: dict[int, tuple[int, int]] = {}  # reg -> (position, trail sqn)
    deleted: dict[int, int] = {}
    pos = 0
    log = SharedLog(cache_dir, time.monotonic(), next_segno=(max(segnos) + 1) if segnos else 1)
    last_end = last_idx_end = 0
    for segno in sorted(segnos):
        seg_path, idx_path = log.paths(segno)
        data = _read(seg_path)
        ibuf = _read(idx_path)
        try:
            fh = fmt.decode_file_header(data, fmt.SEG_MAGIC)
            fmt.decode_file_header(ibuf, fmt.IDX_MAGIC)
        except fmt.StoreFormatError as exc:
            out.repairs.append(f"{seg_path}: {exc}; removed")
            out.bytes_truncated += _nonzero_end(data)
            for p in (seg_path, idx_path):
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(p)
            continue
        blocks = _shared_blocks(ibuf)
        end = fmt.FILE_HEADER_LEN
        idx_end = fmt.FILE_HEADER_LEN
        for _, bend, first, entries in blocks:
            off = first
            for sqn, rlen, arrival, rid, flags in fmt.INDEX_ENTRY.iter_unpack(entries):
                cfg = wanted.get(rid)
                verify = cfg.verify_checksums if cfg is not None else False
                try:
                    got = fmt.check_record(data, off, verify)
                except fmt.StoreFormatError:
                    got = None
                if got is None or got[0] != rid or got[1] != sqn or got[3] + 36 != rlen:
                    out.corrupt_records += 1
                    out.repairs.append(
                        f"{seg_path}: record of RegID {rid} sqn {sqn} at {off} is bad; skipped"
                    )
                    off += rlen
                    continue
                pos += 1
                if flags & fmt.REC_TRAIL:
                    marks[rid] = (pos, sqn)
                elif flags & fmt.REC_DELETE:
                    deleted[rid] = pos
                    found.pop(rid, None)
                    marks.pop(rid, None)
                else:
                    found.setdefault(rid, []).append((segno, sqn, off, rlen, arrival))
                off += rlen
            end = max(end, off)
            idx_end = max(idx_end, bend)
        size = len(data)
        lost = (_nonzero_end(data) if fh.flags & fmt.FILE_PREALLOCATED else size) - end
        if lost > 0:
            out.repairs.append(
                f"{seg_path}: {lost} bytes after the last indexed record (never acknowledged) cut"
            )
            out.bytes_truncated += lost
            os.truncate(seg_path, end)
            if fh.flags & fmt.FILE_PREALLOCATED:
                os.truncate(seg_path, size)
        if idx_end < len(ibuf):
            os.truncate(idx_path, idx_end)
        last_end, last_idx_end = end, idx_end
        if fh.flags & fmt.FILE_PREALLOCATED:
            log.preallocated.add(segno)
    log.segno = max(segnos) if segnos else 0
    log.end = last_end
    log.idx_end = last_idx_end
    per_repo: dict[int, list[RestoredSegment]] = {}
    for rid, recs in found.items():
        if rid not in wanted:
            continue
        mark = marks.get(rid)
        if mark is not None:
            low = mark[1]
            recs = [r for r in recs if 0 <= ((r[1] - low) & 0xFFFFFFFF) < 0x80000000]
        segs: dict[int, RestoredSegment] = {}
        prev: int | None = None
        for segno, sqn, off, rlen, arrival in recs:
            if prev is not None and not 0 < ((sqn - prev) & 0xFFFFFFFF) < 0x80000000:
                continue  # a duplicate written again after a retry: the first copy serves
            prev = sqn
            rs = segs.get(segno)
            if rs is None:
                rs = segs[segno] = RestoredSegment(
                    segno, 0, 0, array("I"), array("I"), array("I"), array("d")
                )
            rs.sqns.append(sqn)
            rs.offsets.append(off)
            rs.lengths.append(rlen)
            rs.arrivals.append(arrival)
            log.refs[segno] = log.refs.get(segno, 0) + 1
            out.messages += 1
        per_repo[rid] = [segs[k] for k in sorted(segs)]
    for segno in sorted(segnos):
        if log.refs.get(segno, 0) == 0 and segno != log.segno:
            seg_path, idx_path = log.paths(segno)
            for p in (seg_path, idx_path):
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(p)
            log.refs.pop(segno, None)
    out.segments += len(segnos)
    return per_repo, log


def _shared_blocks(ibuf: bytes) -> list[tuple[int, int, int, bytes]]:
    """Every good index block of a shared index file: (start, end, first_offset, entries);
    holes and bad blocks (writes of other repositories cut by a crash) are skipped."""
    out: list[tuple[int, int, int, bytes]] = []
    magic = fmt.BLOCK_MAGIC.to_bytes(4, "little")
    off = fmt.FILE_HEADER_LEN
    n = len(ibuf)
    while off + fmt.BLOCK_HEADER_LEN <= n:
        m, count, first, crc = fmt.BLOCK_HEADER.unpack_from(ibuf, off)
        end = off + fmt.BLOCK_HEADER_LEN + count * fmt.INDEX_ENTRY_LEN
        if m == fmt.BLOCK_MAGIC and end <= n:
            body = ibuf[off + fmt.BLOCK_HEADER_LEN : end]
            if fmt.crc32(body, fmt.crc32(ibuf[off : off + 12])) == crc:
                out.append((off, end, first, body))
                off = end
                continue
        nxt = ibuf.find(magic, off + 1)
        if nxt < 0:
            break
        off = nxt
    return out


def load_store(
    cache_dir: str,
    state_dir: str,
    configs: Callable[[str], RepositoryConfig | None],
    *,
    now: float | None = None,
    wall_offset: float | None = None,
) -> LoadedStore:
    """Read a Store instance's state files and caches back (see the module docstring).

    ``configs(topic)`` gives the topic's repository settings (None: no ``<topic>`` matches any
    more; the source is not restored and a line says so).  ``now`` is the core's clock
    (default ``time.monotonic()``, asyncio's) and ``now + wall_offset`` wall-clock time."""
    _check_dir(cache_dir, "disk-cache-directory")
    _check_dir(state_dir, "disk-state-directory")
    if now is None:
        now = time.monotonic()
    if wall_offset is None:
        wall_offset = time.time() - time.monotonic()
    out = LoadedStore()
    states: list[SourceState] = []
    for name in sorted(os.listdir(state_dir)):
        path = os.path.join(state_dir, name)
        if name.endswith("-state.tmp"):
            out.repairs.append(f"{path}: an interrupted state write; removed")
            os.unlink(path)
            continue
        if parse_state_name(name) is None:
            continue
        try:
            state = decode_state(_read(path))
        except fmt.StoreFormatError as exc:
            out.bad_state_files += 1
            out.repairs.append(f"{path}: {exc}; source not restored")
            continue
        if state.reg_id != parse_state_name(name):
            out.bad_state_files += 1
            out.repairs.append(f"{path}: holds RegID {state.reg_id}; source not restored")
            continue
        states.append(state)
    wanted: dict[int, tuple[SourceState, RepositoryConfig]] = {}
    for state in states:
        cfg = configs(state.topic)
        if cfg is None:
            out.repairs.append(
                f"source RegID {state.reg_id} topic {state.topic!r}: no <topic> of this Store "
                "matches it any more; not restored"
            )
            continue
        kind = state.repository_type if state.repository_type in KINDS else cfg.kind
        cfg = config_for_state(
            cfg,
            kind=kind,
            rpp=state.rpp,
            overrides=state.rpp_overrides,
            ack_on_reception=state.ack_on_reception,
        )
        wanted[state.reg_id] = (state, cfg)
    own: dict[int, list[int]] = {}
    shared: list[int] = []
    for name in os.listdir(cache_dir):
        parsed = fmt.parse_segment_name(name)
        if parsed is None or parsed[2] != "seg":
            continue
        reg, segno, _ = parsed
        if reg is None:
            shared.append(segno)
        else:
            own.setdefault(reg, []).append(segno)
    per_shared: dict[int, list[RestoredSegment]] = {}
    if shared or any(c.kind == "reduced-fd" for _, c in wanted.values()):
        per_shared, log = _load_shared(
            cache_dir,
            shared,
            {r: c for r, (_, c) in wanted.items() if c.kind == "reduced-fd"},
            out,
        )
        SharedLog.install(log)
        out.shared_log = log
    for reg_id, (state, cfg) in sorted(wanted.items()):
        if cfg.kind == "disk":
            segs: list[RestoredSegment] = []
            prev: int | None = None
            for segno in sorted(own.pop(reg_id, [])):
                seg = _load_segment(cache_dir, reg_id, segno, cfg.verify_checksums, prev, out)
                if seg is not None:
                    segs.append(seg)
                    if len(seg.sqns):
                        prev = seg.sqns[-1]
            repo = restore_repository(reg_id, cfg, cache_dir, segs, now, wall_offset=wall_offset)
        elif cfg.kind == "reduced-fd":
            repo = restore_repository(
                reg_id, cfg, cache_dir, per_shared.get(reg_id, []), now, wall_offset=wall_offset
            )
        else:
            repo = make_repository(reg_id, cfg, cache_dir, now, wall_offset=wall_offset)
        out.sources.append((state, repo))
    for reg_id, segnos in sorted(own.items()):
        out.repairs.append(
            f"{cache_dir}: {len(segnos)} segment(s) of RegID {reg_id} have no state file; "
            "left in place, not restored"
        )
    return out
