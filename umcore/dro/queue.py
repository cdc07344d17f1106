"""Per-portal egress queues: frames waiting for a proxy source or a peer link, bounded in bytes.

Theory of operation
-------------------
TCP flow control does not cross a DRO (notes A2, A9): a slow receiver behind one portal may not
slow the source or the other portals.  Each portal therefore has its own queue, bounded by its
``<max-queue>`` (bytes, default 1000000).  The core appends every frame it forwards to the egress
portal's queue (:meth:`PortalQueue.offer`); the adapter takes frames while its proxy source or
peer link accepts them (:meth:`PortalQueue.take`) and stops taking when the send would block,
so the queue holds exactly the blocked data.  A frame that does not fit is refused and counted
(``dropped_would_block``, UM's "dropped due to blocking"); the queue never waits, never grows
past its limit, and other portals' queues are untouched.  The counters are the monitoring
fields ``data_bytes_enqueued``, ``data_bytes_enqueued_max`` and ``data_bytes_enqueued_limit``.

Frames are kept as the buffer the proxy receiver handed in (no copy): the adapter must hand in a
buffer it will not reuse until the frame has been taken.

Runs.  The queue holds :class:`FrameRun` entries, not one object per frame: ``count`` frames of
one source, ``size`` bytes each, back to back in one buffer, with consecutive sequence numbers
(what :meth:`DroCore.receive_frames <umcore.dro.DroCore.receive_frames>` finds in a read; a frame
on its own is a run of one, of any length).  :meth:`PortalQueue.offer_run` takes a run as
``count`` calls of :meth:`PortalQueue.offer` would, frame by frame: the frames are the same size,
so the ones that fit are a prefix, and the rest are dropped and counted.  An adapter sends the
head run (:meth:`PortalQueue.peek_run`) and removes what went (:meth:`PortalQueue.consume`);
:meth:`take`, :meth:`peek` and :meth:`pop` still hand out :class:`ForwardedFrame` objects, one
per frame (a frame of a run is a ``memoryview`` slice of its buffer).
"""

from __future__ import annotations

from collections import deque

__all__ = ["SQN_MASK", "ForwardedFrame", "FrameRun", "PortalQueue"]

# Topic sequence numbers are u32 (LBMC): a run's numbers wrap at 2**32.
SQN_MASK = 0xFFFFFFFF


class ForwardedFrame:
    """One frame to send out of an egress portal, with the originating source's identity and
    its original topic sequence number (a proxy source sends it on unchanged)."""

    __slots__ = ("data", "otid", "sqn", "topic")

    def __init__(self, otid: bytes, topic: str, sqn: int, data: bytes | memoryview) -> None:
        self.otid = otid
        self.topic = topic
        self.sqn = sqn
        self.data = data

    def __repr__(self) -> str:
        return f"ForwardedFrame({self.topic!r}, sqn={self.sqn}, {len(self.data)} bytes)"


class FrameRun:
    """``count`` frames of one source, ``size`` bytes each, back to back in ``data``, with
    sequence numbers ``sqn``, ``sqn + 1``, ... (wrapping at 2**32).  A queue's own entry: the
    queue advances it in place as frames are consumed (read-only for everyone else)."""

    __slots__ = ("count", "data", "otid", "size", "sqn", "topic")

    def __init__(
        self, otid: bytes, topic: str, sqn: int, data: bytes | memoryview, size: int, count: int
    ) -> None:
        self.otid = otid
        self.topic = topic
        self.sqn = sqn
        self.data = data
        self.size = size
        self.count = count

    @property
    def nbytes(self) -> int:
        return self.size * self.count

    def frame(self, i: int) -> ForwardedFrame:
        """Frame ``i`` of the run (a run of one: its very buffer)."""
        size = self.size
        data = self.data if self.count == 1 else memoryview(self.data)[i * size : (i + 1) * size]
        return ForwardedFrame(self.otid, self.topic, (self.sqn + i) & SQN_MASK, data)

    def __repr__(self) -> str:
        return f"FrameRun({self.topic!r}, sqn={self.sqn}, {self.count} x {self.size} bytes)"


class PortalQueue:
    """A byte-bounded FIFO of frames (kept as :class:`FrameRun` entries) with drop counters."""

    __slots__ = (
        "bytes_enqueued",
        "bytes_enqueued_max",
        "count",
        "dropped_bytes",
        "dropped_would_block",
        "enqueued",
        "limit",
        "runs",
    )

    def __init__(self, limit: int) -> None:
        if limit < 0:
            raise ValueError("max-queue is 0 or more bytes")
        self.limit = limit
        self.runs: deque[FrameRun] = deque()
        #: Frames queued now (over every run).
        self.count = 0
        self.bytes_enqueued = 0
        self.bytes_enqueued_max = 0
        #: Frames refused because the queue was full (``*_dropped_would_block``).
        self.dropped_would_block = 0
        self.dropped_bytes = 0
        #: Frames accepted since start.
        self.enqueued = 0

    def __len__(self) -> int:
        return self.count

    def offer(self, frame: ForwardedFrame) -> bool:
        """Queue ``frame`` if it fits under the limit; else drop it and count the drop."""
        data = frame.data
        return self.offer_run(frame.otid, frame.topic, frame.sqn, data, len(data), 1) == 1

    def offer_run(
        self, otid: bytes, topic: str, sqn: int, data: bytes | memoryview, size: int, count: int
    ) -> int:
        """Queue ``count`` frames of ``size`` bytes (back to back in ``data``, sequence numbers
        from ``sqn``) as ``count`` calls of :meth:`offer` would: the prefix that fits under the
        limit; the rest is dropped and counted.  Returns how many were queued."""
        nbytes = size * count
        total = self.bytes_enqueued + nbytes
        if total > self.limit:
            fit = (self.limit - self.bytes_enqueued) // size  # size > 0: else total fits
            drop = count - fit
            self.dropped_would_block += drop
            self.dropped_bytes += drop * size
            if not fit:
                return 0
            count = fit
            nbytes = size * fit
            data = memoryview(data)[:nbytes]
            total = self.bytes_enqueued + nbytes
        self.runs.append(FrameRun(otid, topic, sqn, data, size, count))
        self.count += count
        self.bytes_enqueued = total
        self.enqueued += count
        if total > self.bytes_enqueued_max:
            self.bytes_enqueued_max = total
        return count

    def peek_run(self) -> FrameRun | None:
        """The run at the head (its frames are the next to go), or None."""
        return self.runs[0] if self.runs else None

    def consume(self, n: int) -> None:
        """Remove the first ``n`` frames of the head run (``n`` at most its count)."""
        run = self.runs[0]
        if n >= run.count:
            self.runs.popleft()
            n = run.count
        else:
            cut = n * run.size
            run.data = memoryview(run.data)[cut:]
            run.sqn = (run.sqn + n) & SQN_MASK
            run.count -= n
        self.count -= n
        self.bytes_enqueued -= n * run.size

    def take(self, max_frames: int = 0) -> list[ForwardedFrame]:
        """Up to ``max_frames`` frames in order (0 = all), removed from the queue."""
        left = self.count if max_frames <= 0 else min(max_frames, self.count)
        out: list[ForwardedFrame] = []
        while left:
            run = self.runs[0]
            n = min(left, run.count)
            out += [run.frame(i) for i in range(n)]
            self.consume(n)
            left -= n
        return out

    def peek(self) -> ForwardedFrame | None:
        """The next frame without removing it (for an adapter that may fail to send it)."""
        return self.runs[0].frame(0) if self.runs else None

    def pop(self) -> ForwardedFrame:
        """Remove and return the next frame (after :meth:`peek` said there is one)."""
        frame = self.runs[0].frame(0)
        self.consume(1)
        return frame

    def clear(self) -> int:
        """Forget every queued frame (the portal went down); returns how many were dropped."""
        n = self.count
        self.runs.clear()
        self.count = 0
        self.bytes_enqueued = 0
        return n
