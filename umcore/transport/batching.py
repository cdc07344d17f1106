"""Topics, implicit batching, UM fragmentation and TSNIs: the source side every transport shares.

Theory of operation
-------------------
One :class:`BatchingSource` per transport session (a TCP listener, an LBT-RU port, an LBT-RM
group and port).  Many topic sources share it; each gets a *topic index* (``tidx``, advertised in
its TIR) and its own topic sequence numbers.  :meth:`BatchingSource.send` frames a message as an
LBMC data message into the session's *implicit batch* and hands the batch on when it is due
(seed 8.2): after the message the batch holds at least ``implicit_batching_minimum_length``
bytes (2048) or the caller asked to flush; the batch is handed on *before* adding a message that
would push it past the session's maximum (the transport's datagram max size less its own
header); and :meth:`handle_timer` hands it on once its oldest message has waited
``implicit_batching_interval`` (200 ms).  A message bigger than that maximum minus
:data:`HEADER_RESERVATION` is split by *UM fragmentation*: each fragment is its own LBMC data
message with its own topic sequence number and a FRAG header (first sqn, offset, total length).
An idle topic gets a TSNI (topic sequence number information: the last sqn sent) every
``transport_topic_sequence_number_info_interval`` (5 s) until it has been idle for
``transport_topic_sequence_number_info_active_threshold`` (60 s).

"Handing on" is :meth:`BatchingSource._take`: the base class returns the joined LBMC bytes,
which is what TCP writes to its connections; the datagram transports (LBT-RU, LBT-RM) override
it to wrap the batch in one transport datagram with its own transport sequence number.

**Runs.**  The batch's tail may be an open *run*: consecutive plain messages of one topic and
one payload length (``bytes`` only: they are kept by reference) whose LBMC headers are not
built yet.  Appending to the run is a list append: :meth:`TopicSender.send`, the data path's
common case (a source's send, see :mod:`umcore.engine.source`), does exactly that when
:attr:`BatchingSource.fast_limit`, the run's owner and length allow; :meth:`BatchingSource.send`
has the same case first.  :meth:`BatchingSource._settle` frames the whole run at once when
anything else happens (another topic or length, a flush, a timer, a hand-on): one ``join`` with
the header as separator, then the four sequence-number columns written by strided slice
assignment (all C-level), and it advances the topic's sequence number, last-data time and the
message counter by the run's length.  The run's messages keep the sequence numbers they would
have had framed one by one: the topic's ``sqn`` is the run's first until it settles
(:meth:`BatchingSource.next_sequence_number` counts the run in), and everything that reads or
adds to the batch settles first, so the bytes on the wire are the same.

**Batch start.**  A batch that :meth:`BatchingSource.send` hands on because it reached the
minimum length (or a flush) keeps its open run open, empty, for the next batch: its payload
length is stored as ``~n`` (negative, so the fast case does not match it: the next message
starts a batch, which has rules of its own) and the run's first sequence number is always its
topic's ``sqn``.  The next message of that topic and length reopens the run instead of
settling and recreating it -- :meth:`TopicSender.send_step` when nothing else is due (the run's
time, the batch deadline, a list append; it also hands a batch on, :meth:`hand_on_run`, when a
message of the run brings it to the minimum length without overflowing it), else
:meth:`BatchingSource.send_general`; anything else on the empty run settles it (nothing to
frame) and closes it.  Every other hand-on (timer, flush, overflow, fragmentation, TSNIs)
closes the run, and so does the adapter when a write blocked the transport
(:meth:`BatchingSource.end_run`): the fast case must then stop.

**Batch timer.**  Each batch is due one ``implicit_batching_interval`` after its oldest message
(``_batch_due``).  The deadline :meth:`BatchingSource.next_timer` reports for batching
(``_batch_timer``) is only moved when a batch's deadline is *earlier* than the one pending
(``timer_dirty`` then tells the adapter to re-arm): a busy stream starts a batch every few
microseconds, each due later than the one before, and re-arming the adapter's timer for each
was measurable.  A timer that fires before the current batch is due (it was armed for an
earlier batch, already handed on) moves on to the current batch's deadline -- the adapter
re-arms after every :meth:`BatchingSource.handle_timer` -- so a batch still goes out exactly
one interval after its oldest message, and the loop wakes at most once per interval for it.
The API's adapters hand :meth:`handle_timer` ``max(loop.time(), deadline)``
(:class:`umcore.aio.lbt.SourceTimer`): a timer run early by the loop's rounding would find
nothing due and spin until the deadline.
"""

from __future__ import annotations

import struct
import sys
from array import array
from enum import Enum
from typing import Any

from umcore.wire import lbmc

__all__ = [
    "HEADER_RESERVATION",
    "MAX_LBMC_MESSAGE",
    "MAX_SINGLES",
    "MAX_TSNI_RECORDS",
    "BatchingSource",
    "SourceStats",
    "Step",
    "TopicSender",
]

# LBMC data message header: ver/type, next header, msglen, tidx, sqn.
_DATA_HEADER = 12
# TopicSender.send's default ``app_headers`` (the empty tuple, a singleton in CPython).
_NO_HEADERS: tuple[()] = ()
# Room the source keeps for LBMC headers in every message before deciding to fragment; UM
# reserves "the largest possible header" (seed 8.3) without publishing it.  12 bytes data
# header + 16 bytes FRAG header + slack for options we may add later (topic name, properties).
HEADER_RESERVATION = 64
# LBMC msglen is a u16: no LBMC message, hence no batch, exceeds this.
MAX_LBMC_MESSAGE = 65535
# TSNI records per TSNI header (4 + 8 * 31 = 252 fits the u8 hdr_len; notes wire-lbmc 0x20).
MAX_TSNI_RECORDS = 31
# Messages sent on their own counted in SourceStats.singles before it is folded into the
# large counters: CPython caches the ints -5..256, so counting up to this allocates nothing.
MAX_SINGLES = 256

# The LBMC data message header (lbmc.encode_data's layout), packed inline on the fast path.
_pack_data = struct.Struct("!BBHII").pack
# A run's sequence numbers are packed as one array of u32 (big-endian on the wire).
assert array("I").itemsize == 4
_SWAP = sys.byteorder == "little"


# Sequence number bytes of a run, sliced instead of computed: the low byte of ``sqn + i`` for
# i < 256 is ``_LOW[sqn & 0xFF + i]``; ``_REPEAT[b]`` is 256 bytes of value ``b``.
# Both are bytearrays: assigning a bytearray to a strided bytearray slice is ~3x faster than
# assigning bytes (measured: 48 vs 144 ns for a 27-message column).
_LOW = bytearray(range(256)) * 2
_REPEAT = [bytearray((b,)) * 256 for b in range(256)]


def _sqn_column_bytes(first: int, k: int) -> bytes:
    """``k`` consecutive 32-bit sequence numbers from ``first`` (wrapping), big-endian."""
    if first + k <= 0x1_0000_0000:
        a = array("I", range(first, first + k))
    else:
        a = array("I", [(first + i) & 0xFFFFFFFF for i in range(k)])
    if _SWAP:
        a.byteswap()
    return a.tobytes()


def _encode_fragment(
    tidx: int, sqn: int, piece: bytes | memoryview, first: int, offset: int, total: int
) -> bytes:
    frag = lbmc.Frag(first_sqn=first, offset=offset, total_len=total)
    return lbmc.encode(lbmc.LBMCMessage(lbmc.MSG_DATA, tidx, sqn, [frag], bytes(piece)))


def _encode_tsni(records: list[tuple[int, int]]) -> bytes:
    tsni = lbmc.Tsni(records=tuple(records))
    return lbmc.encode(lbmc.LBMCMessage(lbmc.MSG_CONTROL, headers=[tsni]))


class BatchTopic:
    """One topic of a batching source: its next sequence number and when it last sent data and
    a TSNI (the subclasses and the API's fast paths read and advance these in place)."""

    __slots__ = ("last_data", "last_tsni", "sqn", "topic")

    def __init__(self, topic: str) -> None:
        self.topic = topic
        self.sqn = 0  # next sequence number to use
        self.last_data = 0.0
        self.last_tsni = 0.0


class SourceStats:
    """A source transport session's counters.

    Messages sent on their own as one datagram each (TCP's single-message paths: the latency
    case) are counted in two small ints, :attr:`singles` (how many, at most
    :data:`MAX_SINGLES`) and :attr:`single_n` (their payload length), instead of in three
    large ones (updating a large int allocates one: ~250 instructions): :meth:`count_single`
    folds them into ``messages_sent``, ``datagrams_sent`` and ``bytes_sent`` when the limit
    is reached or the length changes, and those three add what is not folded when read.
    Internal sites (this module and the LBT sessions) add to the ``*_base`` fields: the counts
    without the singles not yet folded."""

    __slots__ = (
        "bytes_base",
        "datagrams_base",
        "fragments_sent",
        "messages_base",
        "single_n",
        "singles",
        "tsnis_sent",
    )

    def __init__(self) -> None:
        self.messages_base = 0
        self.datagrams_base = 0
        self.bytes_base = 0
        self.singles = 0
        self.single_n = 0
        self.fragments_sent = 0
        self.tsnis_sent = 0

    def count_single(self, n: int) -> None:
        """One more message of ``n`` payload bytes sent on its own (one datagram)."""
        k = self.singles
        if k < MAX_SINGLES and n == self.single_n:
            self.singles = k + 1
        else:
            self.restart_singles(n)

    def restart_singles(self, n: int) -> None:
        """Fold the singles counted so far; count one of ``n`` payload bytes."""
        k = self.singles
        self.messages_base += k
        self.datagrams_base += k
        self.bytes_base += k * (_DATA_HEADER + self.single_n)
        self.singles = 1
        self.single_n = n

    @property
    def messages_sent(self) -> int:
        return self.messages_base + self.singles

    @messages_sent.setter
    def messages_sent(self, value: int) -> None:
        self.messages_base = value - self.singles

    @property
    def datagrams_sent(self) -> int:
        return self.datagrams_base + self.singles

    @datagrams_sent.setter
    def datagrams_sent(self, value: int) -> None:
        self.datagrams_base = value - self.singles

    @property
    def bytes_sent(self) -> int:
        return self.bytes_base + self.singles * (_DATA_HEADER + self.single_n)

    @bytes_sent.setter
    def bytes_sent(self, value: int) -> None:
        self.bytes_base = value - self.singles * (_DATA_HEADER + self.single_n)


class BatchingSource:
    """Topics, implicit batching, UM fragmentation and TSNIs of one transport session's source
    end (see the module docstring).  :meth:`_take` turns the batch into the transport's unit;
    here it returns the joined LBMC bytes (TCP writes them as they are)."""

    # Slots: the data path reads and writes these per message or per batch (a slot is CPython's
    # fastest attribute; with 40-odd attributes in an instance dict its lookups need a hash).
    # ``__dict__`` stays for anything else set on an instance (tests replace methods).
    __slots__ = (
        "__dict__",
        "_batch_due",
        "_batch_timer",
        "_run",
        "_run_n",
        "_run_pl",
        "_run_tidx",
        "_run_time",
        "_tsni_check",
        "batch_len",
        "batching_interval",
        "batching_minimum_length",
        "fast_limit",
        "max_payload",
        "max_size",
        "now",
        "parts",
        "stats",
        "timer_dirty",
        "topics",
        "tsni_active_threshold",
        "tsni_interval",
    )

    def __init__(
        self,
        *,
        datagram_max_size: int = 65535,
        batching_minimum_length: int = 2048,
        batching_interval: float = 0.2,
        tsni_interval: float = 5.0,
        tsni_active_threshold: float = 60.0,
    ) -> None:
        self.max_size = min(datagram_max_size, MAX_LBMC_MESSAGE)
        self.max_payload = self.max_size - HEADER_RESERVATION
        self.batching_minimum_length = batching_minimum_length
        #: A message that joins a non-empty batch and leaves it shorter than this needs none
        #: of the batching rules (no fragmentation, no overflow, no hand-on): the fast case
        #: (:meth:`TopicSender.send`) checks only this bound.
        self.fast_limit = min(batching_minimum_length, self.max_payload + 1)
        self.batching_interval = batching_interval
        self.tsni_interval = tsni_interval
        self.tsni_active_threshold = tsni_active_threshold
        self.stats = SourceStats()
        self.topics: list[BatchTopic | None] = []
        # The batch: encoded messages joined on send (measured 3x cheaper per 64-byte message
        # than encoding into one preallocated bytearray).
        self.parts: list[bytes] = []
        self.batch_len = 0
        # The open run (module docstring): its topic record (None: no run), topic index,
        # payload length (-1: no run, so no payload length matches; ``~n`` < 0: a run kept
        # open, empty, across a hand-on, see "Batch start"), time stamp (for TSNI
        # idleness) and payloads.  The run's first sequence number is its topic's ``sqn`` (not
        # advanced until the run is framed).  ``_run_pl`` is never replaced (TopicSender binds
        # its ``append``).  A run may be open and empty: kept open across a hand-on by
        # :meth:`send` (module docstring, "Batch start").
        self._run: BatchTopic | None = None
        self._run_tidx = 0
        self._run_n = -1
        self._run_time = 0.0
        self._run_pl: list[bytes] = []
        #: When the current batch is due (its oldest message's time + the batching interval);
        #: meaningful while the batch is not empty.
        self._batch_due = 0.0
        #: The batching deadline :meth:`next_timer` reports: the current batch's ``_batch_due``
        #: or an earlier one left from a batch already handed on (module docstring, "Batch
        #: timer"); None when no batching deadline is pending.
        self._batch_timer: float | None = None
        self._tsni_check: float | None = None
        #: Set when :meth:`next_timer` moved earlier or appeared; the adapter re-arms its timer
        #: only then and clears it (a per-message re-arm is measurable on the data path).
        self.timer_dirty = False
        #: The ``now`` of the latest :meth:`send` / :meth:`handle_timer` call, for subclasses'
        #: :meth:`_take` (which the batching logic calls without a time).
        self.now = 0.0

    # ------------------------------------------------------------------ topics
    def add_topic(self, topic: str, now: float = 0.0) -> int:
        """A new topic source on this session; returns its topic index."""
        self.topics.append(BatchTopic(topic))
        t = self.topics[-1]
        assert t is not None
        t.last_data = now
        return len(self.topics) - 1

    def remove_topic(self, tidx: int) -> None:
        if self._run is not None and self._run is self.topics[tidx]:
            self._settle()
        self.topics[tidx] = None

    def topic_count(self) -> int:
        return sum(1 for t in self.topics if t is not None)

    def next_sequence_number(self, tidx: int) -> int:
        t = self.topics[tidx]
        if t is None:
            raise KeyError(tidx)
        if t is self._run:
            return (t.sqn + len(self._run_pl)) & 0xFFFFFFFF
        return t.sqn

    def set_next_sequence_number(self, tidx: int, sqn: int) -> None:
        """The sequence number topic ``tidx``'s next message takes: a persistent source that
        re-registered with its Stores resumes after their consensus (seed 002, "source
        recovery").  What is batched goes out with the numbers it already has."""
        t = self.topics[tidx]
        if t is None:
            raise KeyError(tidx)
        self._settle()
        t.sqn = sqn & 0xFFFFFFFF

    # ------------------------------------------------------------------ runs
    def frame_run(self, t: BatchTopic, prefix: bytes) -> bytes | bytearray:
        """``prefix`` followed by the open run's messages framed (one join; see the module
        docstring); the run's list is emptied and its topic's sequence number, last-data time
        and the message counter advance by the run's length.  The run stays open."""
        pl = self._run_pl
        k = len(pl)
        sqn = t.sqn
        step = _DATA_HEADER + self._run_n
        head = _pack_data(0, 0, step, self._run_tidx, sqn)
        buf: bytes | bytearray
        if k == 1:
            buf = prefix + head + pl[0]
        else:
            pl.insert(0, prefix)  # the separator then goes before every payload
            # Every header is the first one so far; now its sequence number column.
            buf = bytearray(head).join(pl)
            o = len(prefix)
            low = sqn & 0xFF
            if low + k <= 256:  # only the low byte changes along the run
                buf[o + 11 :: step] = _LOW[low : low + k]
            elif k <= 256 and sqn & 0xFF00 != 0xFF00:  # ... and the next byte once
                buf[o + 11 :: step] = _LOW[low : low + k]
                byte = sqn >> 8 & 0xFF
                buf[o + 10 :: step] = (
                    _REPEAT[byte][: 256 - low] + _REPEAT[byte + 1][: low + k - 256]
                )
            else:
                cols = _sqn_column_bytes(sqn, k)
                buf[o + 8 :: step] = cols[0::4]
                buf[o + 9 :: step] = cols[1::4]
                buf[o + 10 :: step] = cols[2::4]
                buf[o + 11 :: step] = cols[3::4]
        pl.clear()
        t.sqn = (sqn + k) & 0xFFFFFFFF
        t.last_data = self._run_time
        self.stats.messages_base += k
        return buf

    def _settle(self, keep: bool = False) -> None:
        """Frame the open run (if any) into the batch (see the module docstring); ``keep``: the
        run stays open (empty) for the next messages of its topic and length."""
        t = self._run
        if t is None:
            return
        if self._run_pl:
            self.parts.append(bytes(self.frame_run(t, b"")))
        if not keep:
            self._run = None
            self._run_n = -1

    def end_run(self) -> None:
        """Close the open run, so the fast case (:meth:`TopicSender.send`) stops until the next
        send through :meth:`send` (the adapter calls this when its transport becomes blocked)."""
        self._settle()

    def _hand_on(self, keep: bool = False) -> bytes:
        """The batch as the transport's unit (:meth:`_take`), the open run framed first (a batch
        that is just the run is framed straight into the unit: :meth:`_take_run`); ``keep``:
        the run stays open, empty (:meth:`_settle`)."""
        t = self._run
        if t is None:
            return self._take()
        if self._run_pl and not self.parts:
            out = self._take_run(t)
            if not keep:
                self._run = None
                self._run_n = -1
        else:
            self._settle(keep)
            out = self._take()
        if keep:
            # Open for a batch start only: no message of the run's length matches ``~n``
            # (send_step or send_general reopens it, anything else settles the empty run).
            self._run_n = ~self._run_n
        return out

    def hand_on_run(self, now: float) -> bytes:
        """:meth:`TopicSender.send_step`'s hand-on: a message of the open run was appended that
        brings the batch to at least ``batching_minimum_length`` bytes, at most
        :attr:`max_size`; what :meth:`send` would do for it: hand the batch on, the run kept
        open, empty."""
        self.now = now
        self._run_time = now
        t = self._run
        if self.parts or t is None:
            return self._hand_on(True)
        out = self._take_run(t)  # the data path: the batch is the run alone
        self._run_n = ~self._run_n
        return out

    def _start_batch(self, now: float) -> None:
        """The batch's first message, at ``now``: the batch is due one batching interval later;
        the batching deadline only moves when that is earlier than the one pending (module
        docstring, "Batch timer")."""
        due = now + self.batching_interval
        self._batch_due = due
        bt = self._batch_timer
        if bt is None or due < bt:
            self._batch_timer = due
            self.timer_dirty = True

    # ------------------------------------------------------------------ sending
    def _take(self) -> bytes:
        parts = self.parts
        out = parts[0] if len(parts) == 1 else b"".join(parts)
        parts.clear()
        self.batch_len = 0
        st = self.stats
        st.datagrams_base += 1
        st.bytes_base += len(out)
        return out

    def _take_run(self, t: BatchTopic) -> bytes:
        """:meth:`_take` of a batch that is the open run ``t`` alone (not empty)."""
        out = bytes(self.frame_run(t, b""))
        self.batch_len = 0
        st = self.stats
        st.datagrams_base += 1
        st.bytes_base += len(out)
        return out

    def send(
        self, tidx: int, payload: bytes | memoryview, now: float, flush: bool = False
    ) -> bytes | None:
        """Frame one message; returns bytes to write to every receiver now, or None (batched)."""
        # Fast path (the data path: one more message of the open run that leaves the batch
        # below fast_limit, no flush); the general rules are in send_general.
        n = len(payload)
        size = self.batch_len + _DATA_HEADER + n
        if (
            n == self._run_n
            and size < self.fast_limit
            and not flush
            and self._run is self.topics[tidx]
            and type(payload) is bytes
        ):
            self._run_pl.append(payload)
            self._run_time = now
            self.batch_len = size
            return None
        return self.send_general(tidx, payload, now, flush)

    def send_one(self, tidx: int, payload: bytes | memoryview, now: float) -> bytes | None:
        """``send(tidx, payload, now, flush=True)`` for the latency case: when the batch is
        empty and the message needs no fragmentation it is framed and handed on at once,
        without the batching rules (which would hand it on at once too)."""
        t = self.topics[tidx]
        n = len(payload)
        if self.batch_len or t is None or n > self.max_payload:
            return self.send_general(tidx, payload, now, True)
        self.now = now
        sqn = t.sqn
        self._counted(t, sqn, now)
        self.parts.append(_pack_data(0, 0, _DATA_HEADER + n, tidx, sqn) + payload)
        self.batch_len = _DATA_HEADER + n
        return self._take()

    def _counted(self, t: BatchTopic, sqn: int, now: float) -> None:
        """One message of topic ``t`` framed with ``sqn`` at ``now``: the topic's next sequence
        number, its last-data time, the message counter, and the TSNI check armed."""
        t.sqn = (sqn + 1) & 0xFFFFFFFF
        t.last_data = now
        self.stats.messages_base += 1
        if self._tsni_check is None and self.tsni_interval > 0:
            self._tsni_check = now + self.tsni_interval
            self.timer_dirty = True

    def send_general(
        self, tidx: int, payload: bytes | memoryview, now: float, flush: bool
    ) -> bytes | None:
        t = self.topics[tidx]
        if t is None:
            raise KeyError(f"topic index {tidx} is not a source on this session")
        self.now = now
        n = len(payload)
        if n > self.max_payload:
            return self._send_fragmented(t, tidx, payload, now, flush)
        out: bytes | None = None
        length = self.batch_len
        if length + _DATA_HEADER + n > self.max_size:
            out = self._hand_on()
            length = 0
        if self._run is t and n == ~self._run_n and not flush and type(payload) is bytes:
            self._run_n = n  # a batch start: the run the last hand-on kept open, empty
        if self._run is t and n == self._run_n and type(payload) is bytes:
            # The run goes on (the batch is due, a flush, a batch start, or a run kept open).
            self._run_pl.append(payload)
            self._run_time = now
        elif flush or type(payload) is not bytes:
            # Framed at once: a flushed message is handed on now, and a buffer that is not
            # ``bytes`` may change after we return.
            if self._run is not None:
                self._settle()
            sqn = t.sqn
            t.sqn = (sqn + 1) & 0xFFFFFFFF
            t.last_data = now
            # lbmc.encode_data's bytes, inline (n <= max_payload: none of its checks can fail).
            self.parts.append(_pack_data(0, 0, _DATA_HEADER + n, tidx, sqn) + payload)
            self.stats.messages_base += 1
        else:
            if self._run is not None:
                self._settle()
            self._run = t
            self._run_tidx = tidx
            self._run_n = n
            self._run_time = now
            self._run_pl.append(payload)
        self.batch_len = length + _DATA_HEADER + n
        # A message that joins an open run without completing the batch takes the fast path,
        # so this runs at least once per batch: the TSNI check is (re)armed often enough, since
        # a batch never outlives the TSNI interval's first check.
        if self._tsni_check is None and self.tsni_interval > 0:
            self._tsni_check = now + self.tsni_interval
            self.timer_dirty = True
        if flush or self.batch_len >= self.batching_minimum_length:
            # The run stays open: the topic's next message starts the next batch on the
            # API's fast path (module docstring, "Batch start").
            chunk = self._hand_on(True)
            return chunk if out is None else out + chunk
        if length == 0:
            self._start_batch(now)
        return out

    def _send_fragmented(
        self, t: BatchTopic, tidx: int, payload: bytes | memoryview, now: float, flush: bool
    ) -> bytes | None:
        view = memoryview(payload)
        total = len(view)
        chunks: list[bytes] = []
        if self.batch_len:
            chunks.append(self._hand_on())
        first = t.sqn
        step = self.max_payload
        for offset in range(0, total, step):
            piece = view[offset : offset + step]
            sqn = t.sqn
            t.sqn = (sqn + 1) & 0xFFFFFFFF
            msg = _encode_fragment(tidx, sqn, piece, first, offset, total)
            self.stats.fragments_sent += 1
            if self.batch_len + len(msg) > self.max_size:
                chunks.append(self._take())
            self.parts.append(msg)
            self.batch_len += len(msg)
        t.last_data = now
        self.stats.messages_base += 1
        if flush or self.batch_len >= self.batching_minimum_length:
            chunks.append(self._take())
        elif self.batch_len:
            self._start_batch(now)  # the last fragment starts a batch
        if self._tsni_check is None and self.tsni_interval > 0:
            self._tsni_check = now + self.tsni_interval
            self.timer_dirty = True
        return b"".join(chunks) if chunks else None

    def send_framed(
        self, tidx: int, frame: bytes, sqn: int, now: float, flush: bool = False
    ) -> bytes | None:
        """Batch one pre-framed LBMC message of topic ``tidx`` that carries sequence number
        ``sqn`` (a raw source re-sending frames it did not build, e.g. the DRO); the topic's
        next sequence number becomes ``sqn + 1``.  The batching rules are :meth:`send`'s: the
        batch is handed on first if the frame would overflow it, and after it once it holds
        ``batching_minimum_length`` bytes or on ``flush``.  Returns bytes for every receiver
        now, or None (batched)."""
        t = self.topics[tidx]
        if t is None:
            raise KeyError(f"topic index {tidx} is not a source on this session")
        n = len(frame)
        if n > self.max_size:
            raise ValueError(f"a {n}-byte frame exceeds this session's {self.max_size} bytes")
        self.now = now
        self._settle()
        out: bytes | None = None
        if self.batch_len + n > self.max_size:
            out = self._hand_on()
        length = self.batch_len
        self.parts.append(frame)
        self.batch_len = length + n
        self._counted(t, sqn, now)
        if flush or self.batch_len >= self.batching_minimum_length:
            chunk = self._hand_on()
            return chunk if out is None else out + chunk
        if length == 0:
            self._start_batch(now)
        return out

    def send_framed_run(
        self,
        tidx: int,
        data: bytes | bytearray | memoryview,
        size: int,
        count: int,
        last_sqn: int,
        now: float,
        flush: bool = False,
    ) -> bytes | None:
        """``count`` pre-framed LBMC messages of topic ``tidx``, ``size`` bytes each, back to
        back in ``data``, the last carrying ``last_sqn``: exactly what ``count`` calls of
        :meth:`send_framed` (the last with ``flush``) would do -- the same batches, handed on by
        the same rules, the same counters and deadlines -- with a few slices per batch instead
        of a call per message.  What was handed on comes back joined (TCP: one write).  The
        buffer may be reused once this returns (what stays batched is copied)."""
        t = self.topics[tidx]
        if t is None:
            raise KeyError(f"topic index {tidx} is not a source on this session")
        if size > self.max_size:
            raise ValueError(f"a {size}-byte frame exceeds this session's {self.max_size} bytes")
        if size <= 0 or count <= 0 or len(data) < size * count:
            raise ValueError(f"{count} frames of {size} bytes are not in {len(data)} bytes")
        self.now = now
        self._settle()
        view = memoryview(data)
        parts = self.parts
        max_size = self.max_size
        minimum = self.batching_minimum_length
        outs: list[bytes] = []
        i = 0
        while i < count:
            length = self.batch_len
            if length + size > max_size:
                outs.append(self._hand_on())
                length = 0
            if length == 0 and size < minimum and not (flush and i == count - 1):
                self._start_batch(now)  # as the batch's first frame would
            fit = (max_size - length) // size
            need = -(-(minimum - length) // size) if minimum > length else 1
            m = min(fit, need, count - i)
            parts.append(view[i * size : (i + m) * size])  # type: ignore[arg-type]
            length += m * size
            self.batch_len = length
            i += m
            if length >= minimum:
                outs.append(self._hand_on())
        self._counted(t, last_sqn, now)
        self.stats.messages_base += count - 1
        if flush and self.batch_len:
            outs.append(self._hand_on())
        if self.batch_len:
            # what stays batched must not change with the caller's buffer
            parts[-1] = bytes(parts[-1])
        if not outs:
            return None
        return b"".join(outs)

    def send_with_headers(
        self, tidx: int, headers: list[lbmc.Header], payload: bytes, now: float, flush: bool
    ) -> tuple[int, bytes]:
        """One message carrying extra LBMC headers (properties, application headers, a
        request) on its own: what is batched goes first, then this message, with the topic's
        next sequence number, written at once (``flush`` is accepted for the caller's symmetry:
        such a message is never batched).  Returns that sequence number and the bytes to write.
        Such a message must fit one LBMC message (no UM fragmentation)."""
        t = self.topics[tidx]
        if t is None:
            raise KeyError(f"topic index {tidx} is not a source on this session")
        pre = self.flush()
        self.now = now
        sqn = t.sqn
        self._counted(t, sqn, now)
        msg = lbmc.encode(lbmc.LBMCMessage(lbmc.MSG_DATA, tidx, sqn, list(headers), payload))
        return sqn, msg if pre is None else pre + msg

    def flush(self) -> bytes | None:
        """``lbm_src_flush``: whatever is batched, now."""
        return self._hand_on() if self.batch_len else None

    # ------------------------------------------------------------------ timers
    def next_timer(self) -> float | None:
        a, b = self._batch_timer, self._tsni_check
        if a is None:
            return b
        if b is None:
            return a
        return min(a, b)

    def handle_timer(self, now: float) -> bytes | None:
        """Send a batch whose interval ran out, and due TSNIs; returns bytes for all receivers."""
        self.now = now
        parts: list[bytes] = []
        bt = self._batch_timer
        if bt is not None and now >= bt:
            if not self.batch_len:
                self._batch_timer = None  # left from a batch already handed on
            elif now >= self._batch_due:
                parts.append(self._hand_on())
                self._batch_timer = None
            else:  # a later batch: its own deadline (the adapter re-arms after every call)
                self._batch_timer = self._batch_due
        if self._tsni_check is not None and now >= self._tsni_check:
            parts.extend(self._tsnis(now))
        return b"".join(parts) if parts else None

    def _tsnis(self, now: float) -> list[bytes]:
        self._settle()  # the open run's topic gets its sequence number and last-data time
        interval, threshold = self.tsni_interval, self.tsni_active_threshold
        records: list[tuple[int, int]] = []
        next_check: float | None = None
        for tidx, t in enumerate(self.topics):
            if t is None or t.sqn == 0:
                continue
            idle = now - t.last_data
            if threshold > 0 and idle > threshold:
                continue
            due = max(t.last_data, t.last_tsni) + interval
            if now >= due:
                records.append((tidx, (t.sqn - 1) & 0xFFFFFFFF))
                t.last_tsni = now
                due = now + interval
            if next_check is None or due < next_check:
                next_check = due
        self._tsni_check = next_check
        out = []
        for i in range(0, len(records), MAX_TSNI_RECORDS):
            out.append(_encode_tsni(records[i : i + MAX_TSNI_RECORDS]))
            self.stats.tsnis_sent += 1
        if out and self.batch_len:
            # Anything batched goes first: a TSNI must not overtake the data it describes.
            out.insert(0, self._hand_on())
        return out


# TopicSender.fast_rec of a sender that may not take the fast case: never a core's open run.
_NOT_FAST = object()


class Step(Enum):
    """What :meth:`TopicSender.send_step` returns for a message it leaves to the general
    rules (None is a result: batched, nothing to write)."""

    UNHANDLED = 0


class TopicSender:
    """One topic source's handle on its session's :class:`BatchingSource`.

    The data path's common case lives here, beside the state it reads (module docstring,
    "Runs"): a message of the core's open run (this topic, this payload length, ``bytes``)
    that joins a non-empty batch and leaves it below :attr:`BatchingSource.fast_limit` is a
    list append, and :meth:`send` returns :attr:`done` (whatever the adapter gave: the API's
    completed future).  Everything else goes to :meth:`send_slow`, which the adapter's
    subclass implements (the general rules of :meth:`BatchingSource.send`, the writes, the
    timer and back-pressure).  :meth:`set_fast` switches the fast case off, for a source
    whose every message must be seen (late-join retention) or that closed.
    """

    __slots__ = ("core", "done", "fast_rec", "tidx")

    def __init__(self, core: BatchingSource, topic: str, now: float, done: object) -> None:
        self.core = core
        self.tidx = core.add_topic(topic, now)
        #: The core's record of this topic while the fast case may run, else a marker that is
        #: never the core's open run.
        self.fast_rec: object = core.topics[self.tidx]
        self.done = done

    def send(
        self,
        data: bytes | memoryview,
        flush: bool = False,
        properties: object = None,
        app_headers: object = (),
    ) -> Any:
        """Send one message (see the class docstring); ``properties`` and ``app_headers``
        (the API's send-ex options) always take :meth:`send_slow`."""
        core = self.core
        n = len(data)
        size = core.batch_len + 12 + n  # (12: _DATA_HEADER, a literal here: no global load)
        if (
            n == core._run_n
            and size < core.fast_limit
            and core._run is self.fast_rec
            and type(data) is bytes
            and not flush
            and properties is None
            # The default ``()`` (a singleton): an identity test, not a truth test (a C call
            # per message); any other empty value takes send_slow, which treats it alike.
            and app_headers is _NO_HEADERS
        ):
            core.batch_len = size
            # list.append called as a method: CPython 3.11 runs that inline
            # (PRECALL_NO_KW_LIST_APPEND), a bound append held in a variable is a C call.
            core._run_pl.append(data)
            return self.done
        return self.send_slow(data, flush, properties, app_headers)

    def send_slow(
        self, data: bytes | memoryview, flush: bool, properties: Any, app_headers: Any
    ) -> Any:
        """Everything but the fast case: the adapter's subclass sends through the core."""
        raise NotImplementedError

    def send_step(self, data: bytes | memoryview, now: float) -> bytes | Step | None:
        """The two other common cases of the data path, when nothing else is due (the TSNI
        check armed), for a message of the open run: the message that starts a batch (the run
        the last hand-on kept open, module docstring "Batch start") is a list append when the
        batching deadline already pending comes no later than this batch's; the message that
        brings the batch to ``batching_minimum_length`` without overflowing it hands the batch
        on, the run kept open.  Returns what to write (None: nothing), or ``Step.UNHANDLED``
        for :meth:`BatchingSource.send`'s general rules."""
        core = self.core
        if (
            core._run is not self.fast_rec
            or type(data) is not bytes
            or (core._tsni_check is None and core.tsni_interval > 0)
        ):
            return Step.UNHANDLED
        n = len(data)
        run_n = core._run_n
        if n == ~run_n:
            size = _DATA_HEADER + n
            due = now + core.batching_interval
            bt = core._batch_timer
            if bt is not None and bt <= due and size < core.fast_limit:
                core._run_n = n
                core._run_time = now
                core._batch_due = due
                core.batch_len = size
                core._run_pl.append(data)
                return None
        elif n == run_n:
            size = core.batch_len + _DATA_HEADER + n
            if core.batching_minimum_length <= size <= core.max_size:
                core._run_pl.append(data)
                core.batch_len = size
                return core.hand_on_run(now)
        return Step.UNHANDLED

    def set_fast(self, fast: bool) -> None:
        """Allow or forbid the fast case; forbidding it closes the topic's open run (its
        messages are framed; the next ones take the general path)."""
        core = self.core
        rec = core.topics[self.tidx]
        if not fast and rec is not None and core._run is rec:
            core.end_run()
        self.fast_rec = rec if fast else _NOT_FAST

    def next_sequence_number(self) -> int:
        """The sequence number this topic's next message will carry."""
        return self.core.next_sequence_number(self.tidx)
