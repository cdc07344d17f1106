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

Frames are kept as the ``memoryview`` the proxy receiver handed in (no copy): the adapter must
hand in a buffer it will not reuse until the frame has been taken.
"""

from __future__ import annotations

from collections import deque

__all__ = ["ForwardedFrame", "PortalQueue"]


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


class PortalQueue:
    """A byte-bounded FIFO of :class:`ForwardedFrame` with drop counters."""

    __slots__ = (
        "bytes_enqueued",
        "bytes_enqueued_max",
        "dropped_bytes",
        "dropped_would_block",
        "enqueued",
        "frames",
        "limit",
    )

    def __init__(self, limit: int) -> None:
        if limit < 0:
            raise ValueError("max-queue is 0 or more bytes")
        self.limit = limit
        self.frames: deque[ForwardedFrame] = deque()
        self.bytes_enqueued = 0
        self.bytes_enqueued_max = 0
        #: Frames refused because the queue was full (``*_dropped_would_block``).
        self.dropped_would_block = 0
        self.dropped_bytes = 0
        #: Frames accepted since start.
        self.enqueued = 0

    def __len__(self) -> int:
        return len(self.frames)

    def offer(self, frame: ForwardedFrame) -> bool:
        """Queue ``frame`` if it fits under the limit; else drop it and count the drop."""
        size = len(frame.data)
        total = self.bytes_enqueued + size
        if total > self.limit:
            self.dropped_would_block += 1
            self.dropped_bytes += size
            return False
        self.frames.append(frame)
        self.bytes_enqueued = total
        self.enqueued += 1
        if total > self.bytes_enqueued_max:
            self.bytes_enqueued_max = total
        return True

    def take(self, max_frames: int = 0) -> list[ForwardedFrame]:
        """Up to ``max_frames`` frames in order (0 = all), removed from the queue."""
        frames = self.frames
        n = len(frames) if max_frames <= 0 else min(max_frames, len(frames))
        out = [frames.popleft() for _ in range(n)]
        self.bytes_enqueued -= sum(len(f.data) for f in out)
        return out

    def peek(self) -> ForwardedFrame | None:
        """The next frame without removing it (for an adapter that may fail to send it)."""
        return self.frames[0] if self.frames else None

    def pop(self) -> ForwardedFrame:
        """Remove and return the next frame (after :meth:`peek` said there is one)."""
        frame = self.frames.popleft()
        self.bytes_enqueued -= len(frame.data)
        return frame

    def clear(self) -> int:
        """Forget every queued frame (the portal went down); returns how many were dropped."""
        n = len(self.frames)
        self.frames.clear()
        self.bytes_enqueued = 0
        return n
