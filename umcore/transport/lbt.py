"""What LBT-RU and LBT-RM share: the source's window, rate control, session messages and NAK
policy; the receiver's gap tracking, NAK timers and hand-off to the delivery controllers.

Theory of operation
-------------------
**Source** (:class:`LbtSource`, a :class:`~umcore.transport.batching.BatchingSource`).  Every
batch the implicit batcher hands on becomes one DATA datagram with the next *transport* sequence
number.  The datagram is kept in the *transmission window* (``transport_*_transmission_window_size``
bytes of payload, 24 MB; ``..._limit`` caps payload plus overhead when non-zero): the oldest
datagrams leave it first, and the oldest one still in it is the ``trail_sqn`` every DATA and SM
announces.  The context's data :class:`~umcore.transport.ratelimit.TokenBucket` decides whether a
datagram leaves now: once the interval's budget is spent the session is *blocked* (the datagram
that crossed it still left) and further datagrams wait in a bounded queue until the next refill;
the adapter makes ``send`` wait (or raise WouldBlock) meanwhile and sends WAKEUP afterwards.

*Session messages* (SM) go out when the session is idle: the first ``sm_minimum_interval``
(200 ms) after the last datagram of any kind, then at doubling intervals up to
``sm_maximum_interval`` (10 s) (notes 3.5).  They carry the lead (last sent) and trail sequence
numbers: a receiver learns from them about tail loss.  A new session sends them from its
creation, so a receiver that joins before the first message knows where the stream starts.

*NAKs* are handled oldest sequence number first (notes 1.3): a number no longer in the window
gets an NCF "do not retry" (0); a number retransmitted less than ``ignore_interval`` (500 ms) ago
is rejected, and (UM 6.10+) only the first rejection in that interval gets an NCF "NAK ignored"
(1), later ones are discarded silently; a retransmission the retransmit bucket cannot pay for
is rejected with NCF "NAK shed" (3), with the same one-NCF-per-interval rule.  Otherwise the
datagram is retransmitted at once with its RX flag set.

**Receiver** (:class:`LbtReceiver`).  Tracks the next expected transport sequence number.  A
datagram beyond it opens a gap: each missing number gets a NAK timer, first after the initial
back-off (random in [1/2, 3/2] of ``nak_initial_backoff_interval``; 0 = at once), then every
``nak_backoff_interval`` (randomised the same way); an NCF pushes the next NAK
``nak_suppress_interval`` away, or ("do not retry", or a trail beyond the number) gives up at
once (``unrecovered_txw``).  ``nak_generation_interval`` after detection the transport gives up
(``unrecovered_tmo``) -- with **no** application event: that comes from the DC's own timer
(:mod:`umcore.transport.delivery`).  Datagrams are handed up in arrival order; each LBMC message
goes to the DC of its topic index (unsubscribed indexes are counted, UM's
``lbm_msgs_no_topic_rcved``); a run of same-length plain data messages of one topic with
consecutive sequence numbers (a busy source's whole batch) is validated in C
(:func:`run_length`) and goes to its DC in one piece, still packed.  ``activity_timeout`` (60 s)
without any datagram from the source ends the session (EOS).
"""

from __future__ import annotations

import random
import re
import struct
from collections import deque
from collections.abc import Callable
from typing import Any

from umcore.config.options import OptionReader
from umcore.errors import TransportError
from umcore.transport.batching import BatchingSource, BatchTopic
from umcore.transport.delivery import DEFAULT_MAX_MAP_ENTRIES, LbtDeliveryController
from umcore.transport.ratelimit import RateLimiter
from umcore.transport.runs import RUN_MIN
from umcore.wire import lbmc

__all__ = [
    "MAX_HELD_DATAGRAMS",
    "MAX_MISSING",
    "MAX_NAKS_PER_PACKET",
    "NCF_IGNORED",
    "NCF_NO_RETRY",
    "NCF_SHED",
    "LbtReceiver",
    "LbtSource",
    "ReceiverConfig",
    "SourceConfig",
]

_M = 0xFFFFFFFF
_HALF = 0x80000000

NCF_NO_RETRY = 0  # the data left the transmission window
NCF_IGNORED = 1  # retransmitted less than an ignore interval ago
NCF_RX_DELAY = 2
NCF_SHED = 3  # the retransmit rate limit is reached

# Datagrams a blocked session holds until the rate limiter's next refill.  The API never sends
# while the session is blocked, so only a flush/close batch and TSNIs can land here; the bound
# catches a caller that ignores blocking (refused datagrams are counted: they are then loss the
# receivers recover by NAK, as long as the window holds them).
MAX_HELD_DATAGRAMS = 1024
# Missing transport sequence numbers a receiver tracks; a bigger jump is counted lost at once
# (it is more than a 24 MB window of minimum-size datagrams could hold anyway).
MAX_MISSING = 65_536
# Sequence numbers per NAK packet: 8192-byte datagrams less headers hold ~2040 u32 entries.
MAX_NAKS_PER_PACKET = 1024
# Entries of the source's "retransmitted at" map kept before pruning the ones older than the
# ignore interval (bounded memory under a NAK storm).
MAX_RX_HISTORY = 65_536
# Payload + overhead we count per datagram for transmission_window_limit (UDP + IP headers).
DATAGRAM_OVERHEAD = 28
# ums_mon.proto's "no sample yet" for a minimum (UM starts minimums at the largest u64).
NO_SAMPLE_MIN = 0xFFFFFFFFFFFFFFFF

_DATA_HEAD = struct.Struct("!BBHII")
#: A DATA datagram as the source keeps it (transmission window, held and ready lists): the
#: framed run is handed on as the bytearray it was joined into (no copy per datagram).
Datagram = bytes | bytearray
_TIDX_SQN = struct.Struct("!II")


class SourceConfig:
    """Session-level options of an LBT source (seconds, bytes)."""

    __slots__ = (
        "batching_interval",
        "batching_minimum_length",
        "datagram_max_size",
        "ignore_interval",
        "sm_maximum_interval",
        "sm_minimum_interval",
        "transmission_window_limit",
        "transmission_window_size",
        "tsni_active_threshold",
        "tsni_interval",
    )

    def __init__(
        self,
        *,
        datagram_max_size: int = 8192,
        batching_minimum_length: int = 2048,
        batching_interval: float = 0.2,
        tsni_interval: float = 5.0,
        tsni_active_threshold: float = 60.0,
        sm_minimum_interval: float = 0.2,
        sm_maximum_interval: float = 10.0,
        ignore_interval: float = 0.5,
        transmission_window_size: int = 25_165_824,
        transmission_window_limit: int = 0,
    ) -> None:
        self.datagram_max_size = datagram_max_size
        self.batching_minimum_length = batching_minimum_length
        self.batching_interval = batching_interval
        self.tsni_interval = tsni_interval
        self.tsni_active_threshold = tsni_active_threshold
        self.sm_minimum_interval = sm_minimum_interval
        self.sm_maximum_interval = sm_maximum_interval
        self.ignore_interval = ignore_interval
        self.transmission_window_size = transmission_window_size
        self.transmission_window_limit = transmission_window_limit

    @staticmethod
    def option_values(kind: str, source: OptionReader, context: OptionReader) -> dict[str, Any]:
        """The shared settings of a ``kind`` (``lbtru``/``lbtrm``) source from its options and
        its context's (the registry's defaults and units), as keyword arguments."""
        p = f"transport_{kind}_"
        size = int(
            context.get(p + "source_datagram_max_size") or context.get(p + "datagram_max_size")
        )
        return {
            "datagram_max_size": size,
            "batching_minimum_length": int(source.get("implicit_batching_minimum_length")),
            "batching_interval": source.seconds("implicit_batching_interval"),
            "tsni_interval": source.seconds("transport_topic_sequence_number_info_interval"),
            "tsni_active_threshold": source.seconds(
                "transport_topic_sequence_number_info_active_threshold"
            ),
            "sm_minimum_interval": source.seconds(p + "sm_minimum_interval"),
            "sm_maximum_interval": source.seconds(p + "sm_maximum_interval"),
            "ignore_interval": source.seconds(p + "ignore_interval"),
            "transmission_window_size": int(source.get(p + "transmission_window_size")),
            "transmission_window_limit": int(source.get(p + "transmission_window_limit")),
        }

    @classmethod
    def from_options(cls, source: OptionReader, context: OptionReader) -> SourceConfig:
        """An LBT-RM source's settings from its options and its context's."""
        return cls(**cls.option_values("lbtrm", source, context))


class LbtSourceStats:
    """UM's source transport statistics for LBT-RM/RU (ums_mon.proto names)."""

    __slots__ = (
        "bytes_sent",
        "datagrams_held",
        "datagrams_refused",
        "msgs_sent",
        "nak_pckts_rcved",
        "naks_ignored",
        "naks_rcved",
        "naks_rx_delay_ignored",
        "naks_shed",
        "ncfs_sent",
        "rctlr_data_msgs",
        "rctlr_rx_msgs",
        "rx_bytes_sent",
        "rxs_sent",
        "sms_sent",
        "txw_bytes",
        "txw_msgs",
    )

    def __init__(self) -> None:
        self.bytes_sent = 0
        self.datagrams_held = 0
        self.datagrams_refused = 0
        self.msgs_sent = 0
        self.nak_pckts_rcved = 0
        self.naks_ignored = 0
        self.naks_rcved = 0
        self.naks_rx_delay_ignored = 0
        self.naks_shed = 0
        self.ncfs_sent = 0
        self.rctlr_data_msgs = 0
        self.rctlr_rx_msgs = 0
        self.rx_bytes_sent = 0
        self.rxs_sent = 0
        self.sms_sent = 0
        self.txw_bytes = 0
        self.txw_msgs = 0


class LbtSource(BatchingSource):
    """The transport-independent part of an LBT-RU / LBT-RM source session.

    Subclasses define ``header_size``, :meth:`_data_header` (a DATA datagram's header), :meth:`_rx_datagram`
    (the header of a retransmission) and :meth:`_session_message`; the adapter sends
    :attr:`ready` (DATA datagrams for every receiver) and :attr:`outbox` ((datagram, address)
    pairs, or address None = every receiver) after each call, then clears both.
    """

    # Slots as BatchingSource's (see there).
    __slots__ = (
        "_hdr_pack",
        "_hdr_post",
        "_hdr_pre",
        "_held",
        "_last_activity",
        "_ncf_at",
        "_rx_at",
        "_sm_due",
        "_sm_interval",
        "_window",
        "_window_bytes",
        "_window_trail",
        "blocked",
        "config",
        "limiter",
        "lstats",
        "next_sqn",
        "outbox",
        "ready",
        "session_id",
        "sm_sqn",
        "unblocked",
    )

    header_size = 20

    def __init__(
        self,
        session_id: int,
        config: SourceConfig,
        limiter: RateLimiter | None = None,
        now: float = 0.0,
    ) -> None:
        if not 0 < session_id <= _M:
            raise ValueError("a session id is a non-zero 32-bit number")
        super().__init__(
            datagram_max_size=config.datagram_max_size - self.header_size,
            batching_minimum_length=config.batching_minimum_length,
            batching_interval=config.batching_interval,
            tsni_interval=config.tsni_interval,
            tsni_active_threshold=config.tsni_active_threshold,
        )
        self.session_id = session_id
        self.config = config
        self.limiter = limiter
        self.now = now
        self.lstats = LbtSourceStats()
        #: DATA datagrams to send to every receiver now.
        self.ready: list[Datagram] = []
        #: Other datagrams: (bytes, address or None for every receiver).
        self.outbox: list[tuple[bytes, object]] = []
        self.next_sqn = 0  # transport sequence number of the next DATA datagram
        self._window: deque[Datagram] = deque()
        self._window_trail = 0  # sqn of _window[0]
        self._window_bytes = 0  # payload; + DATAGRAM_OVERHEAD each is transmission_window_limit's
        self._held: deque[Datagram] = deque()
        #: True while the data rate limit holds datagrams back; cleared at the next refill.
        self.blocked = False
        #: Set when the session just stopped being blocked (the adapter sends WAKEUP, clears).
        self.unblocked = False
        self._rx_at: dict[int, float] = {}  # sqn -> when it was last retransmitted
        self._ncf_at: dict[int, float] = {}  # sqn -> when its last rejection NCF went out
        self.sm_sqn = 0
        self._last_activity = now
        self._sm_interval = config.sm_minimum_interval
        self._sm_due: float | None = now + config.sm_minimum_interval

    # ------------------------------------------------------------------ protocol hooks
    def set_data_header(self, pre: bytes, post: bytes) -> None:
        """A DATA datagram's header is ``pre``, the sequence number, the trail sequence number
        (u32 each, network order), then ``post``: the subclass gives its constant parts once,
        and the data path packs each header with one precompiled struct (no Python call)."""
        self._hdr_pre = pre
        self._hdr_post = post
        self._hdr_pack = struct.Struct(f"!{len(pre)}sII{len(post)}s").pack

    def _data_header(self, sqn: int, trail: int) -> bytes:
        """The transport header of a DATA datagram (the LBMC batch follows it)."""
        return self._hdr_pack(self._hdr_pre, sqn, trail, self._hdr_post)

    def _rx_datagram(self, original: Datagram, trail: int) -> bytes:
        raise NotImplementedError

    def _session_message(self, lead: int, trail: int) -> None:
        """Queue an SM (to every receiver) on :attr:`outbox`."""
        raise NotImplementedError

    def _ncf(self, sqns: list[int], reason: int, addr: object) -> None:
        raise NotImplementedError

    # ------------------------------------------------------------------ statistics
    #: ums_mon.proto SourceTransport fields this transport reports (LBT-RM's set; LBT-RU
    #: overrides: it has num_clients and no txw_* / rctlr_*).
    MONITOR_FIELDS: tuple[str, ...] = (
        "msgs_sent",
        "bytes_sent",
        "txw_msgs",
        "txw_bytes",
        "nak_pckts_rcved",
        "naks_rcved",
        "naks_ignored",
        "naks_shed",
        "naks_rx_delay_ignored",
        "rxs_sent",
        "rx_bytes_sent",
        "rctlr_data_msgs",
        "rctlr_rx_msgs",
    )

    def receive_datagram(self, data: bytes | memoryview, addr: object, now: float) -> None:
        """A datagram from a receiver (NAK, ACK, connect...): the transport's own."""
        raise NotImplementedError

    def monitor_fields(self) -> dict[str, int]:
        """The session's statistics under their ums_mon.proto names (automatic monitoring).

        ``msgs_sent``/``bytes_sent`` count DATA datagrams as they enter the window (the ones
        the rate controller holds included, as ``rctlr_data_msgs`` counts those), ``txw_*``
        what the transmission window holds now; retransmissions are ``rxs_sent``."""
        ls = self.lstats
        st = self.stats  # every DATA datagram is counted once, there (per datagram, hot path)
        ls.msgs_sent = st.datagrams_sent
        ls.bytes_sent = st.bytes_sent
        ls.txw_msgs = len(self._window)
        ls.txw_bytes = self._window_bytes
        ls.rctlr_data_msgs = ls.datagrams_held
        return {name: int(getattr(ls, name)) for name in self.MONITOR_FIELDS}

    # ------------------------------------------------------------------ window
    @property
    def trail_sqn(self) -> int:
        return self._window_trail if self._window else self.next_sqn

    @property
    def lead_sqn(self) -> int:
        return (self.next_sqn - 1) & _M

    def _take(self) -> bytes:
        parts = self.parts
        self.batch_len = 0
        self._emit(parts)
        parts.clear()
        return b""

    def _take_run(self, t: BatchTopic) -> bytes:
        """The data path's hand-on (the batch is one run of plain messages): the transport
        header and the run's messages framed in one join (:meth:`BatchingSource.frame_run`),
        then :meth:`_queue`."""
        self.batch_len = 0
        sqn = self.next_sqn
        self.next_sqn = (sqn + 1) & _M
        if not self._window:
            self._window_trail = sqn
        pack = self._hdr_pack  # (a slot: called from a local, CPython 3.11 specialises that)
        head = pack(self._hdr_pre, sqn, self._window_trail, self._hdr_post)
        # The framed datagram (a bytearray for a run of two or more, made for it and never
        # changed after) goes to the window and the ready list as it is: no bytes() copy.
        self._queue(self.frame_run(t, head))
        return b""

    def _next_header(self) -> bytes:
        """The DATA header of the next datagram (its transport sequence number taken; the
        caller queues the datagram at once)."""
        sqn = self.next_sqn
        self.next_sqn = (sqn + 1) & _M
        if not self._window:
            self._window_trail = sqn
        return self._hdr_pack(self._hdr_pre, sqn, self._window_trail, self._hdr_post)

    def _emit(self, parts: list[bytes]) -> None:
        """One DATA datagram: the transport header and the LBMC ``parts`` joined in one copy,
        then :meth:`_queue`."""
        parts.insert(0, self._next_header())
        self._queue(b"".join(parts))

    def _queue(self, dgram: Datagram) -> None:
        """A new DATA datagram kept in the transmission window, counted, and released or held
        by the rate limiter.

        The data path runs this once per batch (every ~27 messages of 64 bytes): the window
        check is one comparison while the window is under its size (the rarely set
        ``transmission_window_limit`` adds a second), and the data bucket's common case (budget
        left, no refill due) is :meth:`TokenBucket.take`'s arithmetic done inline."""
        window = self._window
        window.append(dgram)
        n = len(dgram)
        wb = self._window_bytes + n
        self._window_bytes = wb
        cfg = self.config
        limit = cfg.transmission_window_limit
        if wb > cfg.transmission_window_size or (
            limit and wb + DATAGRAM_OVERHEAD * len(window) > limit
        ):
            self._trim_window()
        st = self.stats
        st.datagrams_base += 1
        st.bytes_base += n
        now = self.now
        self._last_activity = now
        if self._sm_interval != cfg.sm_minimum_interval:
            self._activity(now)
        if self.blocked:
            self._hold(dgram)
            return
        limiter = self.limiter
        if limiter is not None:
            bucket = limiter.data
            if bucket.budget:  # 0: unlimited
                tokens = bucket.tokens
                if tokens >= n and now < bucket.next_refill:
                    bucket.tokens = tokens - n
                elif not bucket.take(n, now):
                    self.blocked = True
                    self.timer_dirty = True
                    self._hold(dgram)
                    return
        self.ready.append(dgram)

    def _trim_window(self) -> None:
        """Drop the oldest datagrams until the window is within its size (and limit), keeping
        at least the newest one."""
        window = self._window
        cfg = self.config
        size = cfg.transmission_window_size
        limit = cfg.transmission_window_limit
        wb = self._window_bytes
        trail = self._window_trail
        while len(window) > 1 and (
            wb > size or (limit and wb + DATAGRAM_OVERHEAD * len(window) > limit)
        ):
            wb -= len(window.popleft())
            trail = (trail + 1) & _M
        self._window_bytes = wb
        self._window_trail = trail

    def _hold(self, dgram: Datagram) -> None:
        """A datagram the rate limiter does not let go now: queued until the next refill."""
        if len(self._held) >= MAX_HELD_DATAGRAMS:
            self.lstats.datagrams_refused += 1
            return
        self._held.append(dgram)
        self.lstats.datagrams_held += 1

    def _activity(self, now: float) -> None:
        self._last_activity = now
        if self._sm_interval != self.config.sm_minimum_interval:
            self._sm_interval = self.config.sm_minimum_interval
            self._sm_due = now + self._sm_interval
            self.timer_dirty = True

    def emit_lbmc(self, lbmc_bytes: bytes) -> None:
        """Whole LBMC messages framed elsewhere (TSNIs; the API's messages with extra headers,
        which :meth:`BatchingSource.send` does not frame) in DATA datagrams, split at the size
        limit, onto :attr:`ready`."""
        limit = self.max_size
        pos = 0
        end = len(lbmc_bytes)
        while pos < end:
            chunk_end = pos
            while chunk_end < end:
                (msglen,) = struct.unpack_from("!H", lbmc_bytes, chunk_end + 2)
                if chunk_end + msglen - pos > limit and chunk_end > pos:
                    break
                chunk_end += msglen
            self._emit([lbmc_bytes[pos:chunk_end]])
            pos = chunk_end

    # ------------------------------------------------------------------ timers
    def next_timer(self) -> float | None:
        t = super().next_timer()
        sm = self._sm_due
        if sm is not None and (t is None or sm < t):
            t = sm
        if self.blocked and self.limiter is not None:
            r = self.limiter.next_refill()
            if t is None or r < t:
                t = r
        return t

    def handle_timer(self, now: float) -> bytes | None:
        """Batches, TSNIs, rate-limit refills and session messages that are due; the output is
        on :attr:`ready` / :attr:`outbox` (the return value is for the TCP-shaped caller)."""
        tsnis = super().handle_timer(now)
        if tsnis:
            self.emit_lbmc(tsnis)
        if self.blocked and self.limiter is not None:
            self._release(now)
        due = self._sm_due
        if due is not None and now >= due:
            idle_for = now - self._last_activity
            if idle_for >= self._sm_interval - 1e-9:
                self._session_message(self.lead_sqn, self.trail_sqn)
                self.sm_sqn = (self.sm_sqn + 1) & _M
                self.lstats.sms_sent += 1
                self._last_activity = now
                self._sm_interval = min(self._sm_interval * 2, self.config.sm_maximum_interval)
                self._sm_due = now + self._sm_interval
            else:
                self._sm_due = self._last_activity + self._sm_interval
        self.on_timer(now)
        return b"" if (self.ready or self.outbox) else None

    def on_timer(self, now: float) -> None:
        """Subclass hook (client timeouts)."""

    def _release(self, now: float) -> None:
        limiter = self.limiter
        assert limiter is not None
        held = self._held
        while held and limiter.data.available(now):
            dgram = held.popleft()
            limiter.take_data(len(dgram), now)
            self.ready.append(dgram)
        if not held:
            self.blocked = False
            self.unblocked = True

    # ------------------------------------------------------------------ NAKs
    def handle_nak(self, sqns: tuple[int, ...] | list[int], addr: object, now: float) -> None:
        """A NAK from ``addr``: retransmit or NCF, oldest first (see the module docstring)."""
        st = self.lstats
        st.nak_pckts_rcved += 1
        st.naks_rcved += len(sqns)
        trail = self.trail_sqn
        nxt = self.next_sqn
        ignore = self.config.ignore_interval
        rx_at = self._rx_at
        ncf_at = self._ncf_at
        no_retry: list[int] = []
        ignored: list[int] = []
        shed: list[int] = []
        window = self._window
        limiter = self.limiter
        for sqn in sorted(sqns, key=lambda s: (s - trail) & _M):
            off = (sqn - trail) & _M
            if off >= (nxt - trail) & _M or not window:
                if (sqn - nxt) & _M < _HALF:
                    continue  # never sent: a confused receiver; nothing to say
                no_retry.append(sqn)
                continue
            last = rx_at.get(sqn)
            if last is not None and now - last < ignore:
                st.naks_ignored += 1
                n = ncf_at.get(sqn)
                if n is None or n < last:
                    ncf_at[sqn] = now
                    ignored.append(sqn)
                continue
            original = window[off]
            if limiter is not None and not limiter.take_retransmit(len(original), now):
                st.naks_shed += 1
                n = ncf_at.get(sqn)
                if n is None or now - n >= ignore:
                    ncf_at[sqn] = now
                    shed.append(sqn)
                continue
            rx_at[sqn] = now
            self._retransmit(self._rx_datagram(original, trail), addr)
            st.rxs_sent += 1
            st.rx_bytes_sent += len(original)
            self._activity(now)
        for reason, lst in ((NCF_NO_RETRY, no_retry), (NCF_IGNORED, ignored), (NCF_SHED, shed)):
            for i in range(0, len(lst), MAX_NAKS_PER_PACKET):
                self._ncf(lst[i : i + MAX_NAKS_PER_PACKET], reason, addr)
                st.ncfs_sent += 1
        if len(rx_at) > MAX_RX_HISTORY:
            self._prune(now)

    def _retransmit(self, dgram: bytes, addr: object) -> None:
        self.outbox.append((dgram, addr))

    def _prune(self, now: float) -> None:
        ignore = self.config.ignore_interval
        self._rx_at = {s: t for s, t in self._rx_at.items() if now - t < ignore}
        self._ncf_at = {s: t for s, t in self._ncf_at.items() if now - t < ignore}


# ============================================================================ receiver
class ReceiverConfig:
    """Receiver-side transport options (seconds)."""

    __slots__ = (
        "activity_timeout",
        "loss_check_interval",
        "max_burst_loss",
        "max_map_entries",
        "nak_backoff_interval",
        "nak_generation_interval",
        "nak_initial_backoff_interval",
        "nak_suppress_interval",
        "ordered",
        "send_naks",
    )

    def __init__(
        self,
        *,
        activity_timeout: float = 60.0,
        nak_initial_backoff_interval: float = 0.05,
        nak_backoff_interval: float = 0.2,
        nak_generation_interval: float = 10.0,
        nak_suppress_interval: float = 1.0,
        send_naks: bool = True,
        max_burst_loss: int = 1024,
        ordered: bool = True,
        loss_check_interval: float = 0.0,
        max_map_entries: int = DEFAULT_MAX_MAP_ENTRIES,
    ) -> None:
        self.activity_timeout = activity_timeout
        self.nak_initial_backoff_interval = nak_initial_backoff_interval
        self.nak_backoff_interval = nak_backoff_interval
        self.nak_generation_interval = nak_generation_interval
        self.nak_suppress_interval = nak_suppress_interval
        self.send_naks = send_naks
        self.max_burst_loss = max_burst_loss
        self.ordered = ordered
        self.loss_check_interval = loss_check_interval
        #: delivery_control_maximum_total_map_entries (context): each DC's order map bound.
        self.max_map_entries = max_map_entries

    @staticmethod
    def option_values(kind: str, receiver: OptionReader, context: OptionReader) -> dict[str, Any]:
        """The shared settings of a ``kind`` (``lbtru``/``lbtrm``) receiver from the first
        receiver's options and the context's (the registry's defaults and units)."""
        p = f"transport_{kind}_"
        return {
            "activity_timeout": receiver.seconds(p + "activity_timeout"),
            "nak_initial_backoff_interval": receiver.seconds(p + "nak_initial_backoff_interval"),
            "nak_backoff_interval": receiver.seconds(p + "nak_backoff_interval"),
            "nak_generation_interval": receiver.seconds(p + "nak_generation_interval"),
            "nak_suppress_interval": receiver.seconds(p + "nak_suppress_interval"),
            "send_naks": bool(receiver.get(p + "send_naks")),
            "max_burst_loss": int(receiver.get("delivery_control_maximum_burst_loss")),
            "ordered": int(receiver.get("ordered_delivery")) == 1,
            "loss_check_interval": receiver.seconds("delivery_control_loss_check_interval"),
            # context scope, but it bounds each DC's order map separately (Configuration Guide)
            "max_map_entries": int(context.get("delivery_control_maximum_total_map_entries")),
        }

    @classmethod
    def from_options(cls, receiver: OptionReader, context: OptionReader) -> ReceiverConfig:
        """An LBT-RM receiver's settings from the first receiver's options and the context's."""
        return cls(**cls.option_values("lbtrm", receiver, context))


class LbtReceiverStats:
    """UM's receiver transport statistics for LBT-RM/RU (ums_mon.proto names)."""

    __slots__ = (
        "bytes_rcved",
        "dgrams_dropped_hdr",
        "dgrams_dropped_sid",
        "dgrams_dropped_type",
        "duplicate_data",
        "lbm_msgs_no_topic_rcved",
        "lbm_msgs_rcved",
        "lost",
        "msgs_rcved",
        "nak_pckts_sent",
        "naks_sent",
        "ncfs_ignored",
        "ncfs_rx_delay",
        "ncfs_shed",
        "ncfs_unknown",
        "out_of_order",
        "rxs_rcved",
        "sms_rcved",
        "tsnis_rcved",
        "unrecovered_tmo",
        "unrecovered_txw",
    )

    def __init__(self) -> None:
        self.bytes_rcved = 0
        self.dgrams_dropped_hdr = 0
        self.dgrams_dropped_sid = 0
        self.dgrams_dropped_type = 0
        self.duplicate_data = 0
        self.lbm_msgs_no_topic_rcved = 0
        self.lbm_msgs_rcved = 0
        self.lost = 0
        self.msgs_rcved = 0
        self.nak_pckts_sent = 0
        self.naks_sent = 0
        self.ncfs_ignored = 0
        self.ncfs_rx_delay = 0
        self.ncfs_shed = 0
        self.ncfs_unknown = 0
        self.out_of_order = 0
        self.rxs_rcved = 0
        self.sms_rcved = 0
        self.tsnis_rcved = 0
        self.unrecovered_tmo = 0
        self.unrecovered_txw = 0


# Run validation patterns, one per message length (bounded: a peer choosing lengths cannot grow
# the cache; a real source uses few lengths).
_MAX_RUN_PATTERNS = 64
_RUN_PATTERNS: dict[int, re.Pattern[bytes]] = {}
_RAMP = bytes(range(256))


def run_length(buf: bytes, pos: int, end: int, msglen: int) -> int:
    """How many records of ``msglen`` bytes at ``buf[pos:end]`` form a run: plain LBMC data
    messages (type 0, no chained header) of this length, the first one's topic index, and
    consecutive sequence numbers.  The caller checked the first record's bytes 0-3.

    Everything runs in C: one regular expression per message length matches records whose bytes
    0-3 are ``00 00 msglen`` and whose bytes 4-10 (topic index, the sequence number's high three
    bytes) repeat the first record's (a back-reference); the low bytes of the sequence numbers,
    one strided slice, must then count up from the first's.  A carry into the high bytes ends
    the match, so a run stops where the low byte wraps (the next one starts there).  The
    repetition is possessive (``*+``): nothing follows it, so backtracking could never find
    another match, and without the state it saves per record sre runs ~20 % faster.

    Returns ``k`` >= 1 for a run of ``k``, else minus the number of records the caller should
    take one by one before trying again (at least 1: the work a peer can cause is linear in the
    datagram).  The caller tries only where :data:`RUN_MIN` records could follow; a shorter run
    found there (it ends at a carry) is still cheaper in one piece."""
    pat = _RUN_PATTERNS.get(msglen)
    if pat is None:
        if len(_RUN_PATTERNS) >= _MAX_RUN_PATTERNS:
            _RUN_PATTERNS.clear()
        head = re.escape(b"\x00\x00" + msglen.to_bytes(2, "big"))
        rest = b".{%d}" % (msglen - 11)
        pat = _RUN_PATTERNS[msglen] = re.compile(
            head + b"(.{7})" + rest + b"(?:" + head + rb"\1" + rest + b")*+", re.DOTALL
        )
    m = pat.match(buf, pos, end)
    if m is None:
        return -1
    matched = (m.end() - pos) // msglen
    lo = buf[pos + 11]
    if (
        matched > 256 - lo
        or buf[pos + 11 : pos + matched * msglen : msglen] != _RAMP[lo : lo + matched]
    ):
        # Not consecutive, or the low byte wraps while the high bytes stay (no source sends
        # that): message by message.
        return -matched
    return matched


class _Gap:
    """NAK state of one missing transport sequence number."""

    __slots__ = ("give_up", "next_nak")

    def __init__(self, next_nak: float, give_up: float) -> None:
        self.next_nak = next_nak
        self.give_up = give_up


class LbtReceiver:
    """The transport-independent part of an LBT-RU / LBT-RM receiver session.

    Subclasses feed DATA through :meth:`receive_data`, SMs through :meth:`receive_sm`, NCFs through
    :meth:`_ncf`, and define :meth:`_send_nak`.  Output datagrams (to the source) collect on
    :attr:`outbox`; the adapter sends and clears it after every call.
    """

    def __init__(
        self, config: ReceiverConfig, now: float = 0.0, rng: random.Random | None = None
    ) -> None:
        self.config = config
        self.rng = rng or random.Random()
        self.stats = LbtReceiverStats()
        self.dcs: dict[int, LbtDeliveryController] = {}
        self.outbox: list[bytes] = []
        self.started = False  # the transport knows its first sequence number
        self.active = False  # a datagram arrived: BOS time
        self.ended = False
        self.expected = 0  # next transport sequence number
        self.trail = 0
        self.missing: dict[int, _Gap] = {}
        self._nak_due: float | None = None
        self._pending_starts: list[tuple[int, LbtDeliveryController]] = []
        self._last_activity = now
        self._activity_check: float | None = now + config.activity_timeout
        self._loss_check: float | None = (
            now + config.loss_check_interval if config.loss_check_interval > 0 else None
        )
        #: Called once, at the first datagram (BOS), and when the session ends (EOS).
        self.on_active: Callable[[], None] | None = None
        self.on_end: Callable[[], None] | None = None
        self.timer_dirty = False
        #: A raw receiver's sink (umcore.engine.raw): called once per DATA datagram the
        #: transport accepts (first copy; duplicates are dropped before) with its LBMC frames
        #: (a list, never empty), in arrival order, before the DCs see them.
        self.frame_sink: Callable[[list[bytes]], None] | None = None
        #: Told every CONTROL message other than a plain TSNI (a persistent source's SRI, ...):
        #: the engine's persistence glue sets it; None = such messages are dropped.
        self.control_sink: Callable[[lbmc.LBMCMessage], None] | None = None

    # ------------------------------------------------------------------ statistics
    #: ums_mon.proto ReceiverTransport fields of both LBT-RM and LBT-RU; subclasses add
    #: their own (RM ``out_of_order``, RU ``dgrams_dropped_sid``).
    MONITOR_FIELDS: tuple[str, ...] = (
        "msgs_rcved",
        "bytes_rcved",
        "nak_pckts_sent",
        "naks_sent",
        "lost",
        "ncfs_ignored",
        "ncfs_shed",
        "ncfs_rx_delay",
        "ncfs_unknown",
        "duplicate_data",
        "unrecovered_txw",
        "unrecovered_tmo",
        "lbm_msgs_rcved",
        "lbm_msgs_no_topic_rcved",
        "dgrams_dropped_type",
        "dgrams_dropped_hdr",
    )

    def monitor_fields(self) -> dict[str, int]:
        """The session's statistics under their ums_mon.proto names (automatic monitoring).
        Recovery times and transmissions per NAK (``nak_stm_*``, ``nak_tx_*``) are not
        measured: their minimums say "no sample", the rest is left at 0."""
        st = self.stats
        out = {name: int(getattr(st, name)) for name in self.MONITOR_FIELDS}
        out["nak_stm_min"] = out["nak_tx_min"] = NO_SAMPLE_MIN
        return out

    def receive_datagram(self, data: bytes | memoryview, now: float) -> None:
        """A datagram from the source (DATA, SM, NCF...): the transport's own."""
        raise NotImplementedError

    # ------------------------------------------------------------------ DCs
    def subscribe(self, dc: LbtDeliveryController) -> None:
        self.dcs[dc.tidx] = dc

    def unsubscribe(self, tidx: int) -> None:
        self.dcs.pop(tidx, None)

    def new_dc(
        self,
        tidx: int,
        topic: str,
        deliver: Callable[[int, bytes], None],
        loss: Callable[[str, int, int], None],
        *,
        max_burst_loss: int | None = None,
    ) -> LbtDeliveryController:
        cfg = self.config
        return LbtDeliveryController(
            tidx,
            topic,
            deliver,
            loss,
            max_burst_loss=cfg.max_burst_loss if max_burst_loss is None else max_burst_loss,
            loss_timeout=cfg.nak_generation_interval,
            ordered=cfg.ordered,
            max_map_entries=cfg.max_map_entries,
        )

    # ------------------------------------------------------------------ input
    def _touch(self, now: float) -> None:
        self._last_activity = now
        if not self.active:
            self.active = True
            if self.on_active is not None:
                self.on_active()

    def _start_at(self, sqn: int) -> None:
        self.started = True
        self.expected = sqn

    def receive_sm(self, lead: int, trail: int, now: float) -> None:
        """A session message: tail loss shows as lead >= expected."""
        self.stats.sms_rcved += 1
        self._touch(now)
        if not self.started:
            self._start_at((lead + 1) & _M)
            self.trail = trail
            return
        self.trail = trail
        nxt = (lead + 1) & _M
        if (nxt - self.expected) & _M < _HALF and nxt != self.expected:
            self._open(self.expected, nxt, now)
            self.expected = nxt
        self._flush_naks(now)

    def receive_data(
        self, sqn: int, trail: int, rx: bool, data: bytes | memoryview, off: int, now: float
    ) -> None:
        """A DATA datagram ``data`` whose LBMC messages start at ``off`` (the whole datagram is
        passed, not a slice of it: no copy on the common ``bytes`` input)."""
        st = self.stats
        st.msgs_rcved += 1
        st.bytes_rcved += len(data) - off
        if self.active:
            self._last_activity = now  # _touch's common case, inline
        else:
            self._touch(now)
        if not self.started:
            if rx:
                return  # a retransmission for someone else, before we know our start
            self._start_at(sqn)
        self.trail = trail
        exp = self.expected
        if sqn == exp:
            self.expected = (sqn + 1) & _M
            tentative_from = sqn if self.missing else -1
        else:
            d = (sqn - exp) & _M
            if d < _HALF:
                st.out_of_order += 1
                self._open(exp, sqn, now)
                self.expected = (sqn + 1) & _M
                tentative_from = sqn
            else:
                if self.missing.pop(sqn, None) is None:
                    st.duplicate_data += 1
                    return
                if rx:
                    st.rxs_rcved += 1
                tentative_from = sqn
        if self.frame_sink is not None:
            self._to_sink(self.frame_sink, data, off)
        self._payload(data, off, now, tentative_from)
        if self._pending_starts:
            self._confirm_starts(now)
        if self._nak_due is not None and self._nak_due <= now:
            self._flush_naks(now)

    def _to_sink(
        self, sink: Callable[[list[bytes]], None], data: bytes | memoryview, off: int
    ) -> None:
        try:
            frames, _end = lbmc.split_frames(data, off)
        except lbmc.LBMCError:
            self.stats.dgrams_dropped_hdr += 1
            return
        if frames:
            sink(frames)

    def _payload(self, data: bytes | memoryview, off: int, now: float, datagram: int) -> None:
        """Hand each LBMC message of a DATA datagram (``data[off:]``) to its DC (arrival order);
        a run of same-length plain data messages of one topic goes to its DC in one piece,
        still packed (:func:`run_length`, :meth:`LbtDeliveryController.on_packed`).

        ``data`` is the whole datagram: ``bytes`` (uvloop) is used as it is; anything else (the
        plain asyncio loop's memoryview of a reused receive buffer, valid only during this
        call) is copied once, so what a DC keeps (a :class:`PackedRun` behind a gap, a
        fragment) owns its bytes."""
        buf = data if type(data) is bytes else bytes(data)
        end = len(buf)
        pos = off
        dcs = self.dcs
        st = self.stats
        unpack = _DATA_HEAD.unpack_from
        norun = 0
        while end - pos >= 4:
            msglen = buf[pos + 2] << 8 | buf[pos + 3]
            if msglen < 4 or pos + msglen > end:
                st.dgrams_dropped_hdr += 1
                return
            nxt = pos + msglen
            if msglen >= 12 and buf[pos] == 0 and buf[pos + 1] == 0:
                if pos >= norun and end - pos >= msglen * RUN_MIN:
                    k = run_length(buf, pos, end, msglen)
                    if k > 0:
                        # The run of k messages goes to its started DC in one piece (a DC not
                        # started yet takes the per-message path below).
                        tidx, sqn = _TIDX_SQN.unpack_from(buf, pos + 4)
                        dc = dcs.get(tidx)
                        if dc is None:
                            st.lbm_msgs_rcved += k
                            st.lbm_msgs_no_topic_rcved += k
                            pos += k * msglen
                            continue
                        if dc.started:
                            st.lbm_msgs_rcved += k
                            dc.on_packed(sqn, buf, pos, msglen, k, now)
                            pos += k * msglen
                            continue
                    # Not a run (or a DC not started): no new attempt inside it (bounds the
                    # work a peer mixing lengths can cause).
                    norun = pos + (k if k > 0 else -k) * msglen
                _, _, _, tidx, sqn = unpack(buf, pos)
                st.lbm_msgs_rcved += 1
                dc = dcs.get(tidx)
                if dc is None:
                    st.lbm_msgs_no_topic_rcved += 1
                elif dc.started:
                    dc.on_message(sqn, buf[pos + 12 : nxt], None, now)
                else:
                    self._to_new_dc(dc, sqn, buf[pos + 12 : nxt], None, now, datagram)
            else:
                self._slow(buf[pos:nxt], now, datagram)
            pos = nxt

    def _to_new_dc(
        self,
        dc: LbtDeliveryController,
        sqn: int,
        payload: bytes,
        frag: tuple[int, int, int] | None,
        now: float,
        datagram: int,
        headers: tuple[object, ...] = (),
    ) -> None:
        tentative = datagram >= 0 and self._gap_below(datagram)
        if tentative and not dc.tentative:
            self._pending_starts.append((datagram, dc))
        dc.on_message(sqn, payload, frag, now, tentative, headers)

    def _gap_below(self, sqn: int) -> bool:
        return any((m - sqn) & _M >= _HALF for m in self.missing)

    def _confirm_starts(self, now: float) -> None:
        keep = []
        for datagram, dc in self._pending_starts:
            if self._gap_below(datagram):
                keep.append((datagram, dc))
            else:
                dc.confirm(now)
        self._pending_starts = keep

    def _slow(self, msg: bytes, now: float, datagram: int) -> None:
        try:
            m = lbmc.decode(msg)
        except lbmc.LBMCError:
            self.stats.dgrams_dropped_hdr += 1
            return
        st = self.stats
        if m.msg_type in (lbmc.MSG_DATA, lbmc.MSG_RETRANS):
            st.lbm_msgs_rcved += 1
            dc = self.dcs.get(m.tidx)
            if dc is None:
                st.lbm_msgs_no_topic_rcved += 1
                return
            f = m.find(lbmc.Frag)
            frag = None if f is None else (f.first_sqn, f.offset, f.total_len)
            extra = tuple(h for h in m.headers if type(h) is not lbmc.Frag)
            try:
                if dc.started:
                    dc.on_message(m.sqn, m.payload, frag, now, False, extra)
                else:
                    self._to_new_dc(dc, m.sqn, m.payload, frag, now, datagram, extra)
            except TransportError:
                st.dgrams_dropped_hdr += 1
        elif m.msg_type == lbmc.MSG_CONTROL:
            for tsni in m.find_all(lbmc.Tsni):
                st.tsnis_rcved += 1
                for tidx, sqn in tsni.records:
                    dc = self.dcs.get(tidx)
                    if dc is not None:
                        dc.on_tsni(sqn, now)
            sink = self.control_sink
            if sink is not None and any(type(h) is not lbmc.Tsni for h in m.headers):
                sink(m)

    # ------------------------------------------------------------------ gaps and NAKs
    def _backoff(self, interval: float) -> float:
        return interval * (0.5 + self.rng.random()) if interval > 0 else 0.0

    def _open(self, start: int, end: int, now: float) -> None:
        """Transport sqns start..end-1 are missing."""
        count = (end - start) & _M
        missing = self.missing
        cfg = self.config
        room = MAX_MISSING - len(missing)
        if count > room:
            lost = count - max(room, 0)
            self.stats.lost += lost
            self.stats.unrecovered_tmo += lost
            start = (end - max(room, 0)) & _M
            count = max(room, 0)
        give_up = now + cfg.nak_generation_interval
        first = now + self._backoff(cfg.nak_initial_backoff_interval)
        if not cfg.send_naks:
            first = give_up
        s = start
        for _ in range(count):
            missing[s] = _Gap(first, give_up)
            s = (s + 1) & _M
        self.stats.lost += count
        if count and (self._nak_due is None or first < self._nak_due):
            self._nak_due = first
            self.timer_dirty = True

    def _flush_naks(self, now: float) -> None:
        """Send the NAKs that are due; give up what is past its generation interval."""
        missing = self.missing
        if not missing:
            self._nak_due = None
            return
        cfg = self.config
        st = self.stats
        trail = self.trail
        due: list[int] = []
        gone: list[int] = []
        nxt: float | None = None
        backoff = cfg.nak_backoff_interval
        for sqn, g in missing.items():
            if (sqn - trail) & _M >= _HALF:
                gone.append(sqn)
                st.unrecovered_txw += 1
                continue
            if now >= g.give_up:
                gone.append(sqn)
                st.unrecovered_tmo += 1
                continue
            if now >= g.next_nak and cfg.send_naks:
                due.append(sqn)
                g.next_nak = min(now + self._backoff(backoff), g.give_up)
            t = g.next_nak if g.next_nak < g.give_up else g.give_up
            if nxt is None or t < nxt:
                nxt = t
        for sqn in gone:
            del missing[sqn]
        self._nak_due = nxt
        if due:
            due.sort(key=lambda s: (s - trail) & _M)
            for i in range(0, len(due), MAX_NAKS_PER_PACKET):
                chunk = due[i : i + MAX_NAKS_PER_PACKET]
                self._send_nak(chunk)
                st.nak_pckts_sent += 1
                st.naks_sent += len(chunk)
        if gone and self._pending_starts:
            self._confirm_starts(now)

    def _send_nak(self, sqns: list[int]) -> None:
        raise NotImplementedError

    def _ncf(self, reason: int, trail: int, sqns: tuple[int, ...], now: float) -> None:
        st = self.stats
        self._touch(now)
        self.trail = trail
        if reason == NCF_IGNORED:
            st.ncfs_ignored += 1
        elif reason == NCF_SHED:
            st.ncfs_shed += 1
        elif reason == NCF_RX_DELAY:
            st.ncfs_rx_delay += 1
        elif reason != NCF_NO_RETRY:
            st.ncfs_unknown += 1
        suppress = self.config.nak_suppress_interval
        gone = False
        for sqn in sqns:
            g = self.missing.get(sqn)
            if g is None:
                continue
            if reason == NCF_NO_RETRY:
                del self.missing[sqn]
                st.unrecovered_txw += 1
                gone = True
            else:
                g.next_nak = max(g.next_nak, now + suppress)
        if gone and self._pending_starts:
            self._confirm_starts(now)

    # ------------------------------------------------------------------ timers
    def next_timer(self) -> float | None:
        t = self._nak_due
        for other in (self._activity_check, self._loss_check):
            if other is not None and (t is None or other < t):
                t = other
        return t

    def handle_timer(self, now: float) -> None:
        if self.ended:
            return
        if self._nak_due is not None and now >= self._nak_due:
            self._flush_naks(now)
        if self._loss_check is not None and now >= self._loss_check:
            for dc in list(self.dcs.values()):
                dc.check(now)
            self._loss_check = now + self.config.loss_check_interval
        check = self._activity_check
        if check is not None and now >= check:
            deadline = self._last_activity + self.config.activity_timeout
            if now >= deadline:
                self.end()
                return
            self._activity_check = deadline
        self.on_timer(now)

    def on_timer(self, now: float) -> None:
        """Subclass hook (connection requests, ACKs)."""

    def end(self) -> None:
        """The session is over (activity timeout, or the source reset it): EOS."""
        if self.ended:
            return
        self.ended = True
        self._nak_due = None
        self._activity_check = None
        self._loss_check = None
        if self.on_end is not None:
            self.on_end()
