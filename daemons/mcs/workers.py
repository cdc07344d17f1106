"""MCS's conversion workers: the event loop reads headers, processes decode and convert.

Theory of operation
-------------------
Storing a statistics message costs about three decodes in pure Python (the decode, then UM's
JSON row or the Arrow columns), more than the event loop can spare, and a writer thread in the
same process shares its GIL.  So the daemon's process does almost nothing per message and
*conversion worker* processes do the rest:

- :class:`Intake`, on the event loop, reads each message's 12-byte lbmmon header only
  (:data:`~umcore.monitor.framing.HEADER`: signature, lengths, packet type) -- enough to count
  it and to tell a statistics message of UM's four kinds from a control message, another packet
  type or garbage -- and keeps its raw bytes, the source's string and the arrival time in a
  bounded list (:data:`~umcore.monitor.collector.MAX_PENDING`; what does not fit is counted
  ``dropped``).
- :class:`WorkerPool` takes them in batches (:meth:`WorkerPool.submit`, from the event loop,
  never blocks) into a bounded queue (:data:`MAX_QUEUED_BATCHES`; a batch that does not fit is
  counted ``dropped``).  One feeder thread per worker sends the next batch over the worker's
  pipe and waits for the result; the writer thread stores the results in the order the batches
  were submitted (rows in arrival order, whatever worker converted them) with the connector's
  :meth:`~daemons.mcs.connectors.Connector.store`, one batch at a time: the database and the
  files stay in the daemon's process.
- A worker (spawned: a fresh interpreter, nothing of the daemon's state) runs its connector's
  converter (:attr:`~daemons.mcs.connectors.Connector.converter`, :mod:`daemons.mcs.convert`:
  decode, then UM's JSON rows or the Arrow tables; the verdicts -- kinds, ``bad``, ``raw`` --
  are the :class:`~umcore.monitor.collector.Collector`'s) and sends back the result with its
  counts.  A converter's exception fails that batch (counted, logged), not the worker.  It
  ignores SIGINT and SIGTERM (Ctrl-C in a terminal and a service manager signal the
  whole process group; the daemon's stop drains the workers, they must not die first) and
  ends when told to, or when its pipe closes (the daemon is gone).

Stop (:meth:`WorkerPool.close`): every queued batch is converted and stored, then the workers
end and the connector is closed.  Nothing submitted is lost.

A worker that dies (a crash in an extension module, the OOM killer, ``kill -9``) is seen by its
feeder (its pipe closes; an idle worker within :data:`IDLE_CHECK` seconds): the error is logged
naming the worker, its pid and how it ended, counted in ``worker_crashes``, and a new worker
started.  The batch it was converting is counted in ``failed`` and not tried again (it may be
what killed the worker: trying it again would kill the next one); a batch not yet handed over
goes to the new worker.  More than :data:`MAX_RESTARTS` deaths within :data:`RESTART_WINDOW`
seconds mean something is systematically wrong: the pool restarts no more, says why in
``fatal`` and the log, and calls ``on_fatal`` -- the daemon then stops with exit status 1 after
storing what was converted (an operator, or a service manager's ``Restart=on-failure``, sees a
failed collector rather than one that silently loses every batch).  Batches no worker is left
to convert are counted in ``failed``.
"""

from __future__ import annotations

import collections
import contextlib
import logging
import multiprocessing
import os
import queue
import signal
import threading
import time
from collections.abc import Callable
from typing import Any

from daemons.mcs.connectors import TABLES, Connector, load_converter
from daemons.mcs.convert import DECODED
from umcore.monitor.collector import KINDS, MAX_PENDING
from umcore.monitor.framing import (
    HEADER,
    HEADER_SIZE,
    SIGNATURE,
    LBMMonError,
    PacketType,
    decode_packet,
)

__all__ = [
    "IDLE_CHECK",
    "MAX_QUEUED_BATCHES",
    "MAX_RESTARTS",
    "RESTART_WINDOW",
    "START_TIMEOUT",
    "WORKERS",
    "Intake",
    "WorkerPool",
]

log = logging.getLogger("MCS")

# Worker processes: one per processor but one -- that one is the daemon's own (the receiver,
# the event loop, the writer thread); on 2 processors a second worker made the pipeline slower
# (the two workers and the daemon's process contending: each worker's CPU per message grew by
# about 40%).  At least one; at most four: each is an interpreter with protobuf (and pyarrow)
# loaded, tens of MB, and a network's statistics are a few hundred messages a second.
WORKERS = max(1, min(4, (os.cpu_count() or 1) - 1))
# Batches waiting for a worker: with the daemon's batch size, tens of seconds of a busy
# network's statistics; beyond that the workers or the disk are not keeping up and the newest
# batches go (counted).
MAX_QUEUED_BATCHES = 64
# Converted batches waiting for the writer thread, per worker: the workers stop taking batches
# (and the queue above fills) when the disk is slower than they are.
RESULTS_PER_WORKER = 2
# Worker deaths tolerated within RESTART_WINDOW seconds; one more stops the pool (fatal).
MAX_RESTARTS = 5
RESTART_WINDOW = 60.0
# Seconds a new worker has to import its modules and say it is ready (a cold interpreter with
# protobuf and pyarrow on a busy machine takes a few).
START_TIMEOUT = 60.0
# Seconds between checks that an idle worker is still alive.
IDLE_CHECK = 1.0
# Seconds a worker has to end once told to (it has nothing left to do), before it is killed.
STOP_TIMEOUT = 10.0

_HEADER = HEADER.unpack_from
_CONTROL = int(PacketType.CONTROL_MESSAGE)


class Intake:
    """The event loop's part: headers read, raw messages kept for the workers (module docstring).

    ``counts``: messages received; not stored because of their header (control, other packet
    types: ``raw``; not an lbmmon packet: ``bad``); ``dropped`` because the list was full.  What
    the workers find on decoding is the :class:`WorkerPool`'s ``decoded``."""

    def __init__(self, *, max_pending: int = MAX_PENDING) -> None:
        self.max_pending = max_pending
        self._pending: list[tuple[bytes, str, float]] = []
        self.counts: dict[str, int] = dict.fromkeys(
            ("received", "control", "raw", "bad", "dropped"), 0
        )
        #: the last message refused for its header: the reason
        self.last_error = ""

    @property
    def pending(self) -> int:
        return len(self._pending)

    def receive(self, data: bytes, source: str, now: float) -> str | None:
        """One message of the statistics topic: its kind when kept for a worker, else None
        (counted)."""
        c = self.counts
        c["received"] += 1
        if len(data) >= HEADER_SIZE:
            signature, ptype, block, length, _ = _HEADER(data, 0)
            if signature == SIGNATURE and len(data) == HEADER_SIZE + block + length:
                kind = KINDS.get(ptype)
                if kind is None:
                    c["control" if ptype == _CONTROL else "raw"] += 1
                    return None
                if len(self._pending) >= self.max_pending:
                    c["dropped"] += 1
                    return None
                self._pending.append((data, source, now))
                return kind
        c["bad"] += 1
        try:  # the framing's own words for what is wrong (only for a bad message)
            decode_packet(data)
            reason = "not an lbmmon packet"
        except LBMMonError as exc:
            reason = str(exc)
        self.last_error = f"from {source}: {reason}"
        return None

    def take_batch(self, limit: int) -> list[tuple[bytes, str, float]]:
        """Up to ``limit`` kept messages, oldest first."""
        batch = self._pending[:limit]
        del self._pending[:limit]
        return batch


# ------------------------------------------------------------------------------ worker process


def _worker_main(conn: Any, converter: str) -> None:
    """A worker process: batches in, ``(status, converted, error, counts, records, last_bad,
    cpu seconds)`` out (module docstring)."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    try:
        convert = load_converter(converter)()
    except BaseException as exc:
        conn.send(("error", f"{converter}: {type(exc).__name__}: {exc}"))
        return
    conn.send(("ready", os.getpid()))
    while True:
        try:
            batch = conn.recv()
        except (EOFError, OSError):  # the daemon is gone
            return
        if batch is None:
            return
        cpu = time.process_time()
        try:
            converted, counts, records, last_bad = convert(batch)
            status, error = "ok", ""
        except Exception as exc:  # a bug for some message: the batch fails, the worker lives
            converted, status, error = None, "error", f"{type(exc).__name__}: {exc}"
            counts, records, last_bad = {}, len(batch), ""
        out = (status, converted, error, counts, records, last_bad)
        try:
            conn.send((*out, time.process_time() - cpu))
        except (EOFError, OSError):
            return
        except Exception as exc:  # the result does not pickle
            reason = f"result not sent: {type(exc).__name__}: {exc}"
            conn.send(("error", None, reason, counts, records, last_bad, 0.0))


# ------------------------------------------------------------------------------- the pool


class _Worker:
    __slots__ = ("conn", "index", "proc")

    def __init__(self, index: int) -> None:
        self.index = index
        self.proc: Any = None
        self.conn: Any = None


class WorkerStartError(RuntimeError):
    """A conversion worker did not start (its converter does not load, or it took too long)."""


_STOP: Any = object()


def _lost(records: int, reason: str) -> tuple[int, str]:
    """The result of a batch that came to nothing (its worker died, no worker was left)."""
    return (records, reason)


class WorkerPool:
    """Conversion workers and the writer thread for one connector (module docstring).  Counters
    are read by the event loop (plain ints, each written by one thread)."""

    def __init__(
        self,
        connector: Connector,
        *,
        workers: int = WORKERS,
        converter: str | None = None,
        max_restarts: int = MAX_RESTARTS,
        restart_window: float = RESTART_WINDOW,
        on_fatal: Callable[[str], object] | None = None,
    ) -> None:
        self.connector = connector
        self.converter = converter or connector.converter
        self.max_restarts = max_restarts
        self.restart_window = restart_window
        self.on_fatal = on_fatal
        self._ctx = multiprocessing.get_context("spawn")
        self._queue: queue.Queue[Any] = queue.Queue(MAX_QUEUED_BATCHES)
        self._workers = [_Worker(i) for i in range(workers)]
        self._feeders: list[threading.Thread] = []
        self._writer: threading.Thread | None = None
        self._cond = threading.Condition()
        self._results: dict[int, Any] = {}
        self._next = 0  # the next batch the writer stores
        self._seq = 0  # the next batch submitted (event loop)
        self._closing = False
        self._done = False
        self._deaths: collections.deque[float] = collections.deque()
        self._lock = threading.Lock()
        #: rows stored per kind
        self.written: dict[str, int] = dict.fromkeys(TABLES, 0)
        #: what the workers found decoding: messages per kind, control, other formats, bad
        self.decoded: dict[str, int] = dict.fromkeys(DECODED, 0)
        self.batches = 0
        self.dropped = 0
        self.failed = 0
        self.worker_crashes = 0
        self.last_error = ""
        #: the last message a worker found unparsable: the reason
        self.last_bad = ""
        #: why the pool gave up (empty while it works)
        self.fatal = ""
        #: the workers' CPU seconds spent decoding and converting
        self.cpu_seconds = 0.0

    # -- start, submit -----------------------------------------------------------------------

    def start(self) -> None:
        """Start the workers (waiting until each is ready) and the threads.  Blocks: call it
        from a thread.  :class:`WorkerStartError` when a worker cannot start."""
        try:
            for w in self._workers:
                self._spawn(w)
        except WorkerStartError:
            self._stop_workers()
            raise
        self._writer = threading.Thread(target=self._write, name="mcs-writer", daemon=True)
        self._writer.start()
        for w in self._workers:
            t = threading.Thread(
                target=self._feed, args=(w,), name=f"mcs-feeder-{w.index}", daemon=True
            )
            t.start()
            self._feeders.append(t)

    def _spawn(self, w: _Worker) -> None:
        parent, child = self._ctx.Pipe()
        proc = self._ctx.Process(
            target=_worker_main, args=(child, self.converter), name=f"mcs-worker-{w.index}",
            daemon=True,
        )  # fmt: skip
        proc.start()
        child.close()
        try:
            if not parent.poll(START_TIMEOUT):
                raise WorkerStartError(
                    f"conversion worker {w.index} not ready within {START_TIMEOUT:g} s"
                )
            hello = parent.recv()
        except (EOFError, OSError):
            proc.join(STOP_TIMEOUT)
            raise WorkerStartError(
                f"conversion worker {w.index} ended before it was ready ({_ended(proc)})"
            ) from None
        except WorkerStartError:
            proc.kill()
            proc.join()
            raise
        if hello[0] != "ready":
            proc.join(STOP_TIMEOUT)
            raise WorkerStartError(f"conversion worker {w.index}: {hello[1]}")
        w.proc, w.conn = proc, parent

    def submit(self, batch: list[tuple[bytes, str, float]]) -> bool:
        """Queue ``batch`` (from :meth:`Intake.take_batch`); False (counted in ``dropped``)
        when the queue is full."""
        try:
            self._queue.put_nowait((self._seq, batch))
        except queue.Full:
            self.dropped += len(batch)
            return False
        self._seq += 1
        return True

    @property
    def queued(self) -> int:
        return self._queue.qsize()

    @property
    def pids(self) -> list[int]:
        """The workers' process ids (a dead worker's until its feeder replaced it)."""
        return [w.proc.pid for w in self._workers if w.proc is not None]

    # -- the feeders -------------------------------------------------------------------------

    def _feed(self, w: _Worker) -> None:
        limit = RESULTS_PER_WORKER * len(self._workers)
        while True:
            try:
                item = self._queue.get(timeout=IDLE_CHECK)
            except queue.Empty:
                if self._closing:
                    break
                if w.proc.exitcode is not None and not self._died(w, None):
                    break
                continue
            if item is _STOP:
                break
            seq, batch = item
            result = self._convert(w, batch)
            with self._cond:
                self._results[seq] = result
                self._cond.notify_all()
                while len(self._results) > limit and not self._done:
                    self._cond.wait()
            if w.proc is None:  # fatal: no worker here any more
                break
        if w.proc is not None:
            self._stop_worker(w)

    def _convert(self, w: _Worker, batch: list[tuple[bytes, str, float]]) -> Any:
        """The worker's answer for ``batch``, or :func:`_lost`."""
        while True:
            if w.proc is None:
                return _lost(len(batch), f"no conversion worker left ({self.fatal})")
            try:
                w.conn.send(batch)
            except (OSError, ValueError):  # it died before taking the batch: a new one takes it
                if not self._died(w, None):
                    return _lost(len(batch), f"no conversion worker left ({self.fatal})")
                continue
            try:
                return w.conn.recv()
            except (EOFError, OSError):
                dead = w.proc.pid
                self._died(w, len(batch))
                return _lost(
                    len(batch), f"conversion worker {w.index} (pid {dead}) died converting it"
                )

    def _died(self, w: _Worker, converting: int | None) -> str:
        """A worker found dead: logged, counted, replaced; how it ended ("" when it is not
        replaced: too many deaths, or a new one does not start -- ``fatal`` says why)."""
        proc = w.proc
        proc.join(STOP_TIMEOUT)
        how = f"pid {proc.pid}, {_ended(proc)}"
        w.conn.close()
        w.proc = w.conn = None
        now = time.monotonic()
        with self._lock:
            self.worker_crashes += 1
            self._deaths.append(now)
            while self._deaths and now - self._deaths[0] > self.restart_window:
                self._deaths.popleft()
            too_many = len(self._deaths) > self.max_restarts or bool(self.fatal)
        doing = (
            f"converting a batch of {converting} messages (counted as failed, not tried again)"
            if converting is not None
            else "while idle"
        )
        log.error("conversion worker %d died (%s) %s", w.index, how, doing)
        if too_many:
            self._give_up(
                f"{len(self._deaths)} conversion worker deaths within {self.restart_window:g} s"
                f" (at most {self.max_restarts}): not restarting them"
            )
            return ""
        try:
            self._spawn(w)
        except WorkerStartError as exc:
            self._give_up(f"a conversion worker could not be restarted: {exc}")
            return ""
        log.warning("conversion worker %d restarted (pid %d)", w.index, w.proc.pid)
        return how

    def _give_up(self, reason: str) -> None:
        with self._lock:
            first = not self.fatal
            if first:
                self.fatal = reason
        if first:
            log.error("MCS stops: %s", reason)
            if self.on_fatal is not None:
                self.on_fatal(reason)

    def _stop_worker(self, w: _Worker) -> None:
        with contextlib.suppress(OSError, ValueError):
            w.conn.send(None)
        w.proc.join(STOP_TIMEOUT)
        if w.proc.exitcode is None:
            log.error("conversion worker %d (pid %d) did not end: killed", w.index, w.proc.pid)
            w.proc.kill()
            w.proc.join()
        w.conn.close()

    def _stop_workers(self) -> None:
        for w in self._workers:
            if w.proc is not None:
                self._stop_worker(w)
                w.proc = w.conn = None

    # -- the writer --------------------------------------------------------------------------

    def _write(self) -> None:
        while True:
            with self._cond:
                while self._next not in self._results and not self._done:
                    self._cond.wait()
                if self._next not in self._results:
                    if not self._results:
                        break
                    self._next = min(self._results)  # not expected: no batch is skipped
                result = self._results.pop(self._next)
                self._next += 1
                self._cond.notify_all()
            try:
                self._store(result)
            except Exception as exc:  # not expected: the writer must go on (the stop waits)
                log.exception("storing a batch failed: %s", exc)
        try:
            self.connector.close()
        except Exception as exc:
            log.error("%s connector: closing failed: %s", self.connector.name, exc)

    def _store(self, result: Any) -> None:
        if len(result) == 2:  # lost
            self._fail_batch(*result)
            return
        status, converted, error, counts, records, last_bad, cpu = result
        self.cpu_seconds += cpu
        for k, v in counts.items():
            self.decoded[k] += v
        if last_bad:
            if not self.last_bad:
                log.warning("bad statistics message %s (counted; the first is logged)", last_bad)
            self.last_bad = last_bad
        if status != "ok":
            self._fail_batch(records, error)
            return
        if not records:
            return
        try:
            self.connector.store(converted)
        except Exception as exc:  # a full disk, a locked database: the next batch retries
            self._fail_batch(records, f"{type(exc).__name__}: {exc}")
            return
        self.batches += 1
        for kind in self.written:
            self.written[kind] += counts[kind]

    def _fail_batch(self, records: int, reason: str) -> None:
        self.failed += records
        if reason != self.last_error:
            log.error("%s connector: a batch of %d not written: %s",
                      self.connector.name, records, reason)  # fmt: skip
        self.last_error = reason

    # -- stop --------------------------------------------------------------------------------

    def close(self) -> None:
        """Convert and store everything submitted, end the workers, close the connector
        (blocks: call it from a thread, e.g. ``asyncio.to_thread``)."""
        self._closing = True
        for _ in self._feeders:
            try:
                self._queue.put_nowait(_STOP)
            except queue.Full:  # the feeders see the queue empty and ``_closing``
                break
        for t in self._feeders:
            t.join()
        left = 0
        while True:  # only when no worker was left to take them
            try:
                item = self._queue.get_nowait()
            except queue.Empty:
                break
            if item is not _STOP:
                seq, batch = item
                left += len(batch)
                with self._cond:
                    self._results[seq] = _lost(
                        len(batch), f"no conversion worker left ({self.fatal})"
                    )
        if left:
            log.error("%d messages not converted: no conversion worker left", left)
        with self._cond:
            self._done = True
            self._cond.notify_all()
        if self._writer is not None:
            self._writer.join()
        else:
            self.connector.close()


def _ended(proc: Any) -> str:
    code = proc.exitcode
    if code is None:
        return "still running"
    if code < 0:
        try:
            return f"killed by {signal.Signals(-code).name}"
        except ValueError:
            return f"killed by signal {-code}"
    return f"exit status {code}"
