"""Raw receivers and raw sources: what the persistent store and the DRO stand on.

Theory of operation
-------------------
A **raw receiver** (:class:`RawReceiver`) is interest in a topic like a receiver's -- topic
resolution queries for it and the engine joins every source of it -- but instead of
:class:`~umcore.engine.message.Message` objects it is handed the source transport session's
LBMC frames (``bytes``: header chain and payload, undecoded), data and control alike, in
arrival order, each with the :class:`RawSession` it came on: the transport, UM's source string,
the session id and the topic index the topic has on that session.  A store keeps them as they
are; nothing is built per message.

- TCP: every whole frame of the connection's byte stream
  (:attr:`TcpReceiverSession.frame_sink <umcore.transport.tcp.TcpReceiverSession.frame_sink>`);
- LBT-RU / LBT-RM: every frame of each DATA datagram the transport accepts -- in transport
  sequence or recovered by NAK, each datagram once
  (:attr:`LbtReceiver.frame_sink <umcore.transport.lbt.LbtReceiver.frame_sink>`).

A session carries every topic its source maps onto it: frames of other topic indices (and
TSNIs naming several) are handed over too; :attr:`RawSession.topic_index` tells which ones are
the raw receiver's.  ``on_session(session, active)`` (optional) is told BOS (True) and EOS
(False) per session.

A **raw source** (:class:`RawSource`) is a topic source whose messages come pre-framed: a DRO
forwarding frames it did not build.  :meth:`RawSource.send` takes one LBMC data frame, rewrites
its topic index to the raw source's own and batches it keeping its sequence number
(:meth:`BatchingSource.send_framed <umcore.transport.batching.BatchingSource.send_framed>`);
the session's TSNIs then report the last sequence number forwarded.
:meth:`RawSource.send_run_nowait` forwards a run -- frames of one size back to back in one
buffer, a DRO queue's entry -- with the topic index rewritten column by column and one
:meth:`BatchingSource.send_framed_run
<umcore.transport.batching.BatchingSource.send_framed_run>` per piece (TCP: one write).  Back-pressure is a normal
source's: :meth:`RawSource.send` awaits while a receiver is too slow,
:meth:`RawSource.send_nowait` raises :class:`~umcore.errors.WouldBlock` and a WAKEUP event
follows when the session drained.
"""

from __future__ import annotations

import struct
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from umcore.engine.source import EngineSource
from umcore.errors import LocalProtocolError
from umcore.resolver.core import SourceInfo

__all__ = [
    "FRAME_HEADER",
    "RUN_SEND_BYTES",
    "OnFrame",
    "OnFrames",
    "OnSession",
    "RawReceiver",
    "RawSession",
    "RawSource",
]

# An LBMC data frame's fixed header: ver/type, next header, msglen, topic index, sqn.
_HEAD = struct.Struct("!BBHII")
FRAME_HEADER = _HEAD.size
# The ver/type byte of a data frame (version 0, type DATA).
_DATA_TYPE = 0x00
_MSGLEN = struct.Struct("!H")
_SQN = struct.Struct("!I")
# Bytes of a run handed to the transport core at once by :meth:`RawSource.send_run_nowait`:
# a TCP session writes them in one go and only then can tell it is blocked, so this bounds how
# far past ``transport_session_maximum_buffer`` (64 KiB by default) one call may go.
RUN_SEND_BYTES = 32 * 1024


@dataclass(frozen=True, slots=True)
class RawSession:
    """The transport session a frame came on, and the topic index of the raw receiver's
    topic on it."""

    #: ``TCP``, ``LBT-RU`` or ``LBTRM`` (UM's source-string prefixes, as topic resolution keys
    #: sessions).
    transport: str
    #: UM's source string (``TCP:ip:port:sid`` ...).
    source_string: str
    #: The transport's session id (None: a TCP source without session ids).
    session_id: int | None
    #: The topic's index on this session (the TIR's).
    topic_index: int
    #: The raw receiver's topic, the source's IP and the TIR's topic options (a persistent
    #: source's UME / late-join options name its request port and transport index: how a Store
    #: matches the session to the source's registration).
    topic: str = ""
    source_ip: str = ""
    options: tuple[Any, ...] = field(default=(), compare=False)


def _session(info: SourceInfo, source_string: str) -> RawSession:
    return RawSession(
        str(info.key[0]), source_string, info.session_id, info.index, info.topic, info.ip,
        tuple(info.options),
    )  # fmt: skip


OnFrame = Callable[[RawSession, bytes], object]
OnFrames = Callable[[RawSession, list[bytes]], object]
OnSession = Callable[[RawSession, bool], object]


class RawReceiver:
    """Interest in one topic, handed the frames of its sources (see the module docstring).

    ``on_frame(session, frame)`` is called per frame; ``on_frames(session, frames)``, when
    given instead, once per read (TCP) or datagram (LBT-RU/RM) with that read's frames: a
    store appends a read's frames and answers them with one ACK."""

    def __init__(
        self,
        topic: str,
        on_frame: OnFrame | None,
        on_session: OnSession | None,
        on_frames: OnFrames | None = None,
    ) -> None:
        if (on_frame is None) == (on_frames is None):
            raise LocalProtocolError("a raw receiver takes one of on_frame and on_frames")
        self.topic = topic
        self.on_frame = on_frame
        self.on_frames = on_frames
        self.on_session = on_session
        #: Frames handed over, and exceptions raised by the callback (logged, counted).
        self.frames = 0
        self.callback_errors = 0
        self.closed = False
        #: What this receiver's sinks are attached to: (session key, sink).
        self.attached: list[tuple[tuple[object, ...], Callable[[list[bytes]], None]]] = []

    def sink_for(self, info: SourceInfo, source_string: str) -> Callable[[list[bytes]], None]:
        """The frame sink of one joined session (its identity bound once)."""
        ident = _session(info, source_string)
        on_frames = self.on_frames
        if on_frames is not None:

            def sink(frames: list[bytes]) -> None:
                self.frames += len(frames)
                try:
                    on_frames(ident, frames)
                except Exception:
                    self.callback_errors += 1

            return sink
        on_frame = self.on_frame
        assert on_frame is not None

        def sink_each(frames: list[bytes]) -> None:
            for frame in frames:
                self.frames += 1
                try:
                    on_frame(ident, frame)
                except Exception:
                    self.callback_errors += 1

        return sink_each

    def session_event(self, info: SourceInfo, source_string: str, active: bool) -> None:
        if self.on_session is None:
            return
        ident = _session(info, source_string)
        try:
            self.on_session(ident, active)
        except Exception:
            self.callback_errors += 1


class RawSource:
    """A topic source sending pre-framed LBMC data messages (see the module docstring)."""

    def __init__(self, source: EngineSource) -> None:
        self.source = source
        source.set_fast(False)
        self.topic = source.topic
        self._tidx = struct.pack("!I", source.tidx)

    @property
    def source_string(self) -> str:
        return self.source.source_string

    def _frame(self, frame: bytes | memoryview) -> tuple[bytes, int]:
        n = len(frame)
        if n < FRAME_HEADER:
            raise LocalProtocolError(f"a {n}-byte frame is shorter than an LBMC data header")
        ver_type, _next, msglen, _tidx, sqn = _HEAD.unpack_from(frame)
        if ver_type != _DATA_TYPE or msglen != n:
            raise LocalProtocolError(
                f"not one LBMC data frame (ver/type 0x{ver_type:02x}, msglen {msglen} of {n})"
            )
        return b"".join((frame[:4], self._tidx, frame[8:])), sqn

    def _send(self, frame: bytes, flush: bool) -> None:
        src = self.source
        framed, sqn = self._frame(frame)
        core = src.core
        src.session.write(core.send_framed(src.tidx, framed, sqn, src.engine.loop.time(), flush))

    def send(self, frame: bytes, flush: bool = False) -> Awaitable[None]:
        """Forward one frame keeping its sequence number; await it (waits while blocked)."""
        src = self.source
        if src.writer.paused or src.closed:
            return self._send_blocked(frame, flush)
        self._send(frame, flush)
        return src.done  # type: ignore[return-value]

    async def _send_blocked(self, frame: bytes, flush: bool) -> None:
        await self.source.wait_writable()
        self._send(frame, flush)

    def send_nowait(self, frame: bytes, flush: bool = False) -> None:
        """Forward one frame or raise :class:`WouldBlock`; WAKEUP follows when it may go on."""
        src = self.source
        src.check()
        src.refuse_if_blocked()
        self._send(frame, flush)

    def send_many_nowait(self, frames: Sequence[bytes | memoryview]) -> int:
        """Forward ``frames`` in order, keeping their sequence numbers, until the session
        blocks; returns how many went (the rest wait for the WAKEUP).  WouldBlock when not even
        the first may go; LocalProtocolError when the first is not one data frame or is longer
        than the session's datagram max size.  One clock read and one check for the lot: the
        DRO's data path."""
        src = self.source
        src.check()
        src.refuse_if_blocked()
        core = src.core
        tidx = src.tidx
        session = src.session
        writer = src.writer
        send = core.send_framed
        frame_of = self._frame
        now = src.engine.loop.time()
        n = 0
        for frame in frames:
            framed, sqn = frame_of(frame)
            try:
                out = send(tidx, framed, sqn, now, False)
            except ValueError as exc:  # longer than this session's datagram max size
                if n:
                    break  # the ones before it went; the next call refuses it first
                raise LocalProtocolError(str(exc)) from exc
            n += 1
            if out is not None:
                session.write(out)
                if writer.paused:
                    break
        if core.timer_dirty:
            session.rearm()
        return n

    def send_run_nowait(
        self, data: bytes | memoryview, size: int, count: int, flush: bool = False
    ) -> int:
        """Forward ``count`` data frames of ``size`` bytes each, back to back in ``data``,
        keeping their sequence numbers (a DRO queue's run, :class:`umcore.dro.FrameRun`): one
        check, one clock read, the topic index rewritten column by column and one
        :meth:`BatchingSource.send_framed_run
        <umcore.transport.batching.BatchingSource.send_framed_run>` (TCP: one write) per
        :data:`RUN_SEND_BYTES` at most, so a blocked session is noticed between them.  Returns
        how many went (fewer when the session blocked).  ``flush``: a run of two or more that
        went whole leaves with what was batched, in the same write.  WouldBlock when none may go;
        LocalProtocolError when they are not data frames of that size or are longer than the
        session's datagram max size (none went)."""
        src = self.source
        src.check()
        src.refuse_if_blocked()
        if count == 1:
            return self.send_many_nowait((data,))
        if size < FRAME_HEADER or len(data) < size * count:
            raise LocalProtocolError(f"{count} frames of {size} bytes are not in {len(data)} bytes")
        core = src.core
        session = src.session
        writer = src.writer
        tidx = src.tidx
        now = src.engine.loop.time()
        per_call = max(1, RUN_SEND_BYTES // size)
        head = _MSGLEN.pack(size)
        done = 0
        while done < count:
            k = min(per_call, count - done)
            buf = bytearray(data[done * size : (done + k) * size])
            # every frame a data frame of ``size`` bytes (ver/type 0, msglen = size): columns
            if (
                buf[0::size] != bytes(k)
                or buf[2::size] != head[:1] * k
                or buf[3::size] != head[1:] * k
            ):
                if done:
                    break  # the ones before went; the next call refuses them first
                raise LocalProtocolError(f"not {k} LBMC data frames of {size} bytes")
            for j in range(4):  # the topic index, one column per byte
                buf[4 + j :: size] = self._tidx[j : j + 1] * k
            last = _SQN.unpack_from(buf, (k - 1) * size + 8)[0]
            try:
                out = core.send_framed_run(
                    tidx, buf, size, k, last, now, flush and done + k == count
                )
            except ValueError as exc:  # longer than this session's datagram max size
                if done:
                    break
                raise LocalProtocolError(str(exc)) from exc
            done += k
            if out is not None:
                session.write(out)
                if writer.paused:
                    break
        if core.timer_dirty:
            session.rearm()
        return done

    def send_control(self, frame: bytes) -> None:
        """Send one LBMC control message (a DRO's relayed SRI, umcore.dro.persist) on the
        session, after what is batched (as a persistent source sends its SRIs); UMError when
        the source is closed."""
        src = self.source
        src.check()
        out = src.core.flush()
        src.session.write((out or b"") + frame)

    def flush(self) -> None:
        self.source.flush()

    async def close(self) -> None:
        await self.source.close()
