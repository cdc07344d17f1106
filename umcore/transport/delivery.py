"""The delivery controller of the datagram transports (LBT-RU, LBT-RM): order map and loss timer.

Theory of operation
-------------------
UM splits reliability in two levels (seed 003 L3178-3212, L3682-3762; notes 3.1, 3.7).  The
*transport* (one per session) detects missing transport sequence numbers, NAKs them and hands
datagrams up **in arrival order**; it knows nothing of topics.  The *delivery controller* (DC,
one per subscribed topic source) sees topic sequence numbers: it reassembles fragments and, in
``ordered_delivery`` 1 (the default), keeps messages that arrive after a gap in its *order map*
until the gap is filled by a retransmission, then delivers the repaired message followed by the
buffered ones.  Topics untouched by a loss keep flowing: the order map is per DC.

**Loss timer.**  A DC does no recovery itself.  When it sees a topic gap (a later message, or a
TSNI announcing a sequence number it has not seen) it starts a timer of the NAK generation
interval (10 s) for the missing numbers.  Once that timer has expired, the next *receive event*
for the DC (a message or a TSNI; or :meth:`LbtDeliveryController.check` when
``delivery_control_loss_check_interval`` is set) declares them lost: one
``LBM_MSG_UNRECOVERABLE_LOSS`` per sequence number, in sequence order, each followed by the
buffered messages it was holding back.  This is the seed's worked example: a datagram lost at
T=0 and discovered by the DC through a TSNI at T=5 gives its loss event at T=15, whatever the
transport did at T=10.2.  A gap larger than ``delivery_control_maximum_burst_loss`` (1024) is one
``LBM_MSG_UNRECOVERABLE_LOSS_BURST`` at once; the order map is cleared (its messages discarded).
No loss is reported before the first delivered message (leading loss, 6.12+); how far the source
got before the DC started (a TSNI before it, the sqn before its first message) is told to
:attr:`LbtDeliveryController.before_start` instead, for late join and persistence to recover
(:meth:`umcore.features.recovery.TopicRecovery.on_tail`).

**Order map limit.**  ``delivery_control_maximum_total_map_entries`` (context scope, default
200000, 0 = unbounded) bounds each DC's order map; UM's configuration guide: "although this
option is context scoped ... there is a separate Order Map for each Delivery Controller.  Those
Order Maps are sized independently".  When a DC's map holds *more* than the limit,
"unrecoverable loss is signaled for the oldest gaps and older data is delivered until the Order
Map size is below" the limit.  So the message that overflows the map is kept, then the oldest
missing sequence number is declared lost at once (one ``LBM_MSG_UNRECOVERABLE_LOSS`` each,
exactly as if its loss timer had expired, leading loss still suppressed), the messages it held
back are delivered, and so on, oldest gap first, until fewer than the limit remain.  A message
that arrived is therefore never refused: the map drains instead of stalling until the 10 s loss
timer (a repair arriving afterwards is behind the delivery point: a duplicate, discarded).
:attr:`LbtDeliveryController.map_limit_lost` counts the numbers the limit declared lost,
:attr:`~LbtDeliveryController.map_limit_hits` the times it acted.  The guide says nothing about
a DC still starting *tentatively* (below): our choice is that a tentative DC whose buffer
overflows starts at once at the lowest number it holds (as :meth:`confirm` would), and the limit
then applies as above; anything older that the transport still recovers is leading loss.

**Tentative start.**  A DC created while its transport still has older datagrams missing cannot
know whether the first topic message it sees is really the first: an earlier one may sit in a
datagram being recovered.  The transport then starts the DC *tentatively*: messages are only
buffered, and :meth:`LbtDeliveryController.confirm` (called when every transport sequence
number before that datagram was received or given up) starts delivery at the lowest one seen.

**Runs.**  The transport hands a datagram's run of same-length plain data messages of one topic
with consecutive sequence numbers in one piece (:meth:`LbtDeliveryController.on_packed`, still in
wire form).  In sequence it is delivered (``deliver_many``) as the C-level unpacking iterator
over the datagram (records unpacked as the fan-out takes them, no list); behind a gap it waits in the order map as one :class:`PackedRun` -- the datagram's bytes, not a
tuple and two objects per message, so a gap held open for a NAK back-off costs the receiver
little more than in-sequence delivery (no per-message objects for the garbage collector to walk,
compact memory) -- and is unpacked when the repair drains it.  It counts as its number of
messages against the order map limit.  Anything that is not plainly new data or a whole repair
goes message by message.

``ordered_delivery`` -1 (arrival order) delivers at once; gaps are still timed and reported the
same way, and a late retransmission is delivered when it arrives.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

from umcore.errors import TransportError
from umcore.transport.runs import run_struct

__all__ = [
    "DEFAULT_MAX_MAP_ENTRIES",
    "LOSS",
    "LOSS_BURST",
    "MAX_ORDER_MAP",
    "MAX_TRACKED_GAP",
    "LbtDeliveryController",
    "PackedRun",
]

LOSS = "unrecoverable_loss"
LOSS_BURST = "unrecoverable_loss_burst"

_M = 0xFFFFFFFF
_HALF = 0x80000000
# UM's default for delivery_control_maximum_total_map_entries: messages ONE DC's order map may
# hold (each DC's map is sized independently, Configuration Guide); beyond it the oldest gaps
# are declared lost and what they held is delivered (theory of operation above).
DEFAULT_MAX_MAP_ENTRIES = 200_000
# Partial reassemblies an arrival-order DC keeps (one per fragmented message in progress).
MAX_ORDER_MAP = DEFAULT_MAX_MAP_ENTRIES
# Missing topic sequence numbers one DC times individually.  A larger gap is reported as burst
# loss whatever delivery_control_maximum_burst_loss says (UM recommends 1e9 for that option;
# timing a billion numbers one by one is not an option).
MAX_TRACKED_GAP = 65_536
# Largest message reassembled from fragments (a broken peer must not make us allocate more).
MAX_REASSEMBLY_BYTES = 64 * 1024 * 1024


Deliver = Callable[[int, bytes], None]
Loss = Callable[[str, int, int], None]
Frag = tuple[int, int, int]  # first_sqn, offset, total_len
Records = list[tuple[int, bytes]]
# deliver_many(records, count): ``count`` in-sequence (sqn, payload) pairs, iterated once.
DeliverMany = Callable[[Iterable[tuple[int, bytes]], int], None]


class PackedRun:
    """A run of ``count`` plain data messages of one topic, one length and consecutive sequence
    numbers, still in its wire form (``data``: the LBMC records back to back, validated by the
    transport).  The order map keeps a run behind a gap in this form -- one bytes object per
    datagram instead of a tuple, an int and a bytes object per message -- and unpacks it only
    when it is delivered (:meth:`records`)."""

    __slots__ = ("count", "data", "fmt")

    def __init__(self, data: bytes, msglen: int, count: int) -> None:
        self.data = data
        self.fmt = run_struct(msglen)
        self.count = count

    def records(self) -> Records:
        """The run as ``(sqn, payload)`` pairs."""
        return list(self.fmt.iter_unpack(self.data))


def _records(run: Records | PackedRun) -> Records:
    return run.records() if isinstance(run, PackedRun) else run


class LbtDeliveryController:
    """Ordered (or arrival-order) delivery, reassembly and loss timing for one topic source."""

    __slots__ = (
        "_cur",
        "_frag_buf",
        "_frag_first",
        "_frag_got",
        "_frag_total",
        "_frags",
        "_held_headers",
        "_run_msgs",
        "_runs",
        "before_start",
        "deliver",
        "deliver_many",
        "delivered",
        "duplicates",
        "expected",
        "headers",
        "high",
        "loss",
        "loss_timeout",
        "map_limit_hits",
        "map_limit_lost",
        "map_refused",
        "max_burst_loss",
        "max_map_entries",
        "missing",
        "order_map",
        "ordered",
        "started",
        "tentative",
        "tidx",
        "topic",
        "unrecoverable",
    )

    def __init__(
        self,
        tidx: int,
        topic: str,
        deliver: Deliver,
        loss: Loss,
        *,
        max_burst_loss: int = 1024,
        loss_timeout: float = 10.0,
        ordered: bool = True,
        max_map_entries: int = DEFAULT_MAX_MAP_ENTRIES,
    ) -> None:
        self.tidx = tidx
        self.topic = topic
        self.deliver = deliver  # (sqn, payload bytes)
        #: Optional bulk form of ``deliver``: ``(records, count)``, an iterable of ``count``
        #: in-sequence ``(sqn, payload)`` pairs (a run of plain data messages the transport
        #: parsed in one pass, :meth:`on_run`), iterated once: a list, or straight the
        #: unpacking iterator over the datagram (:meth:`on_packed`, no list built).
        self.deliver_many: DeliverMany | None = None
        self.loss = loss  # (kind, first_sqn, count)
        #: Told the newest sqn the source sent before this DC's start, since leading loss is
        #: not reported: a TSNI's before it, and the sqn before the one it starts at.  The
        #: recovery layer (late join, persistence) decides whether to recover them
        #: (umcore.features.recovery.TopicRecovery.on_tail); None: no one.
        self.before_start: Callable[[int], None] | None = None
        self.max_burst_loss = max(2, max_burst_loss)
        self.loss_timeout = loss_timeout
        self.ordered = ordered
        #: delivery_control_maximum_total_map_entries: most messages this DC's order map
        #: holds (0 = unbounded, as in UM).
        self.max_map_entries = max(0, max_map_entries)
        self.started = False
        self.tentative = False
        self.expected = 0  # next sequence number to deliver (ordered) / lowest not yet seen
        self.high = 0  # one past the highest sequence number seen or announced
        #: Missing topic sequence numbers -> time their DC loss timer expires.
        self.missing: dict[int, float] = {}
        #: Order map: sqn -> (payload, fragment info or None), messages after a gap.
        self.order_map: dict[int, tuple[bytes, Frag | None]] = {}
        #: The order map's runs: first sqn -> a run of plain messages (:meth:`on_run`) kept
        #: whole behind a gap (one entry per datagram, delivered whole); their message count.
        self._runs: dict[int, Records | PackedRun] = {}
        self._run_msgs = 0
        self.delivered = 0
        self.unrecoverable = 0
        self.duplicates = 0
        #: Arrival-order partial reassemblies refused (MAX_ORDER_MAP in progress at once).
        self.map_refused = 0
        #: Sequence numbers the order map limit declared lost, and times the limit acted.
        self.map_limit_lost = 0
        self.map_limit_hits = 0
        #: Extra LBMC headers (REQUEST, APPHDR_CHAIN, PROPERTIES...) of the message being
        #: delivered, set around each ``deliver`` call (the API's features read them); () else.
        #: A message held in the order map keeps its headers until it is delivered.
        self.headers: tuple[object, ...] = ()
        self._held_headers: dict[int, tuple[object, ...]] = {}
        self._cur: tuple[int, tuple[object, ...]] | None = None
        self._frag_buf: bytearray | None = None
        self._frag_first = 0
        self._frag_total = 0
        self._frag_got = 0
        self._frags: dict[int, list[object]] = {}  # arrival mode: first_sqn -> [buf, got, total]

    # ------------------------------------------------------------------ input
    def on_message(
        self,
        sqn: int,
        payload: bytes,
        frag: Frag | None,
        now: float,
        tentative: bool = False,
        headers: tuple[object, ...] = (),
    ) -> None:
        """A topic message (``frag``: (first_sqn, offset, total) of a fragment, else None;
        ``headers``: its extra LBMC headers, handed on with it whenever it is delivered)."""
        if headers:
            self._cur = (sqn, headers)
            try:
                self._on_message(sqn, payload, frag, now, tentative)
            finally:
                self._cur = None
            if sqn in self.order_map:
                self._held_headers[sqn] = headers
            return
        self._on_message(sqn, payload, frag, now, tentative)

    def on_packed(
        self, first: int, buf: bytes, pos: int, msglen: int, count: int, now: float
    ) -> None:
        """A run of ``count`` plain data messages of ``msglen`` bytes at ``buf[pos:]``, sequence
        numbers ``first, first + 1, ...`` (no wrap past 2**32 - 1), validated by the
        transport, for a started DC.  In sequence (the lossless path) it is unpacked straight
        from ``buf`` and delivered; otherwise it goes to :meth:`on_run` as a
        :class:`PackedRun` (unpacked only when delivered)."""
        stop = pos + count * msglen
        whole = pos == 0 and stop == len(buf)
        if first == self.expected and self.high == first and not self.missing and self.started:
            self.expected = self.high = (first + count) & _M
            # _deliver_run inline; the records go on as the unpacking iterator (no list).
            self._frag_buf = None
            self.delivered += count
            records = run_struct(msglen).iter_unpack(buf if whole else memoryview(buf)[pos:stop])
            many = self.deliver_many
            if many is not None:
                many(records, count)
                return
            deliver = self.deliver
            for sqn, payload in records:
                deliver(sqn, payload)
            return
        self.on_run(first, PackedRun(buf if whole else buf[pos:stop], msglen, count), now)

    def on_run(self, first: int, records: Records | PackedRun, now: float) -> None:
        """Plain data messages ``first, first + 1, ...`` (``records``: ``(sqn, payload)`` or a
        :class:`PackedRun`, no wrap past 2**32 - 1) that the transport parsed in one pass, for
        a started DC.  In sequence they are delivered at once (``deliver_many``); behind a gap
        (ordered delivery) they wait in the order map as one unit; a retransmission filling a
        gap is taken whole.  Any other case (duplicates, overlaps, a full order map) goes
        message by message through :meth:`on_message`."""
        k = records.count if isinstance(records, PackedRun) else len(records)
        end = (first + k) & _M
        high = self.high
        missing = self.missing
        if first == self.expected and high == first and not missing and self.started:
            self.expected = self.high = end
            self._deliver_run(records)
            return
        if self.ordered and self.started:
            if (first - high) & _M < _HALF:  # new data at or beyond the highest seen
                if not self._open_gap(high, first, now):
                    # Burst: everything before ``first`` is gone (reported); deliver.
                    self.expected = self.high = end
                    self._deliver_run(records)
                    return
                self.high = end
                if first == self.expected:
                    self.expected = end
                    self._deliver_run(records)
                    self._drain()
                else:
                    self._runs[first] = records
                    self._run_msgs += k
                    self._limit()
                if missing:
                    self.check(now)
                return
            elif (
                (first - self.expected) & _M < _HALF
                and (high - end) & _M < _HALF
                # every one missing and none past its loss timer (one by one, the first
                # message's receive event would declare an expired later one lost)
                and all(missing.get(s, now) > now for s in range(first, first + k))
            ):  # fills (part of) a gap: a retransmission
                for s in range(first, first + k):
                    del missing[s]
                if first == self.expected:
                    self.expected = end
                    self._deliver_run(records)
                    self._drain()
                else:
                    self._runs[first] = records
                    self._run_msgs += k
                    self._limit()
                if missing:
                    self.check(now)
                return
        on_message = self.on_message
        for sqn, payload in _records(records):
            on_message(sqn, payload, None, now)

    def _deliver_run(self, run: Records | PackedRun) -> None:
        """Deliver a run in sequence; a :class:`PackedRun` goes on as its unpacking iterator
        (as :meth:`on_packed`'s in-sequence path does: no list of tuples kept alive; the held
        path of a DC micro-benchmark went from 134 to 116 ns per message, in order 78)."""
        self._frag_buf = None
        records: Iterable[tuple[int, bytes]]
        if isinstance(run, PackedRun):
            n = run.count
            records = run.fmt.iter_unpack(run.data)
        else:
            n = len(run)
            records = run
        self.delivered += n
        many = self.deliver_many
        if many is not None:
            many(records, n)
            return
        deliver = self.deliver
        for sqn, payload in records:
            deliver(sqn, payload)

    def _deliver(self, sqn: int, data: bytes) -> None:
        """``deliver`` with :attr:`headers` set to the message's own extra headers."""
        h: tuple[object, ...] = ()
        if self._held_headers:
            h = self._held_headers.pop(sqn, ())
        cur = self._cur
        if not h and cur is not None and cur[0] == sqn:
            h = cur[1]
        if not h:
            deliver = self.deliver  # a slot holding a callback: from a local (CPython 3.11
            deliver(sqn, data)  # does not specialise a method call on it)
            return
        self.headers = h
        try:
            self.deliver(sqn, data)
        finally:
            self.headers = ()

    def _on_message(
        self, sqn: int, payload: bytes, frag: Frag | None, now: float, tentative: bool
    ) -> None:
        if not self.started:
            if tentative or self.tentative:
                if not self._buffer_tentative(sqn, payload, frag, now):
                    return
                # The buffer overflowed: started now (the message is in the order map).
                self._limit()
                if self.missing:
                    self.check(now)
                return
            self.started = True
            self.expected = self.high = sqn
            if self.before_start is not None:
                self.before_start((sqn - 1) & _M)
        d = (sqn - self.expected) & _M
        if d == 0 and not self.order_map and not self._runs and self.ordered:
            self.expected = nxt = (sqn + 1) & _M
            if self.missing:
                self.missing.pop(sqn, None)
            if (nxt - self.high) & _M < _HALF:
                self.high = nxt
            self._consume(sqn, payload, frag)
        elif d >= _HALF:
            self.duplicates += 1  # behind the delivery point: already delivered or declared lost
        elif not self.ordered:
            self._arrival(sqn, payload, frag, now)
        else:
            self._ahead(sqn, payload, frag, now)
        if self.missing:
            self.check(now)

    def on_tsni(self, sqn: int, now: float) -> None:
        """The source's last sent topic sequence number is ``sqn`` (tail-loss detection; before
        the DC started: leading loss, told to :attr:`before_start`)."""
        if not self.started:
            if self.before_start is not None:
                self.before_start(sqn)
            return
        nxt = (sqn + 1) & _M
        ahead = (nxt - self.high) & _M < _HALF and nxt != self.high
        if ahead and self._open_gap(self.high, nxt, now):
            self.high = nxt
        if self.missing:
            self.check(now)

    def check(self, now: float) -> None:
        """Declare lost what the loss timer gave up on (a receive event, or the loss check)."""
        missing = self.missing
        if not missing:
            return
        if self.ordered:
            while True:
                exp = self.expected
                deadline = missing.get(exp)
                if deadline is None or deadline > now:
                    break
                del missing[exp]
                self._lost(exp)
                self.expected = (exp + 1) & _M
                self._drain()
        else:
            due = [s for s, t in missing.items() if t <= now]
            for s in sorted(due, key=lambda s: (s - self.expected) & _M):
                del missing[s]
                self._lost(s)

    def confirm(self, now: float) -> None:
        """The transport resolved every datagram before the tentative start: deliver from the
        lowest sequence number buffered; the holes above it are ordinary gaps from now on."""
        if self.started or not self.tentative:
            return
        self.tentative = False
        self.started = True
        buffered = self.order_map
        if not buffered:
            return
        low = min(buffered, key=lambda s: (s - self.expected) & _M)
        if self.before_start is not None:
            self.before_start((low - 1) & _M)
        self.expected = low
        top = max(buffered, key=lambda s: (s - low) & _M)
        self.high = (top + 1) & _M
        s = low
        while s != self.high:
            if s not in buffered:
                self.missing[s] = now + self.loss_timeout
            s = (s + 1) & _M
        if not self.ordered:
            items = sorted(buffered.items(), key=lambda kv: (kv[0] - low) & _M)
            buffered.clear()
            for sqn, (payload, frag) in items:
                self._arrival_deliver(sqn, payload, frag)
            return
        self._drain()

    # ------------------------------------------------------------------ internals
    def _buffer_tentative(self, sqn: int, payload: bytes, frag: Frag | None, now: float) -> bool:
        """Hold ``sqn`` until :meth:`confirm`; True when that made the buffer exceed the order
        map limit and the DC started at once (our choice, theory of operation)."""
        if not self.tentative:
            self.tentative = True
            self.expected = sqn
        elif (sqn - self.expected) & _M >= _HALF:
            self.expected = sqn  # a lower one: the start moves back
        if sqn in self.order_map:
            self.duplicates += 1
            return False
        self.order_map[sqn] = (payload, frag)
        limit = self.max_map_entries
        if limit and len(self.order_map) > limit:
            self.confirm(now)
            return True
        return False

    def _open_gap(self, start: int, end: int, now: float) -> bool:
        """Numbers start..end-1 are newly missing; False when that was a burst (handled)."""
        count = (end - start) & _M
        if count == 0:
            return True
        if count > self.max_burst_loss or len(self.missing) + count > MAX_TRACKED_GAP:
            self._burst(end)
            return False
        deadline = now + self.loss_timeout
        missing = self.missing
        s = start
        for _ in range(count):
            missing[s] = deadline
            s = (s + 1) & _M
        return True

    def _burst(self, new_expected: int) -> None:
        count = (new_expected - self.expected) & _M
        if self.delivered:
            self.unrecoverable += 1
            self.loss(LOSS_BURST, self.expected, count)
        self.order_map.clear()
        self._runs.clear()
        self._run_msgs = 0
        self._held_headers.clear()
        self.missing.clear()
        self._frag_buf = None
        self._frags.clear()
        self.expected = self.high = new_expected

    def _ahead(self, sqn: int, payload: bytes, frag: Frag | None, now: float) -> None:
        if (sqn - self.high) & _M < _HALF:  # at or beyond the highest seen: new gap below it
            if not self._open_gap(self.high, sqn, now):
                # Burst: everything before sqn is gone; sqn itself is delivered now.
                self.expected = self.high = (sqn + 1) & _M
                self._consume(sqn, payload, frag)
                return
            self.high = (sqn + 1) & _M
        elif sqn in self.missing:
            del self.missing[sqn]  # a retransmission filling a hole above the delivery point
        else:
            self.duplicates += 1
            return
        if sqn == self.expected:
            self.expected = (sqn + 1) & _M
            self._consume(sqn, payload, frag)
            self._drain()
            return
        self.order_map[sqn] = (payload, frag)
        self._limit()

    def _limit(self) -> None:
        """Enforce the order map limit (theory of operation): while the map holds more than
        ``max_map_entries``, declare the oldest gap lost and deliver what it held back, until
        fewer than the limit remain."""
        limit = self.max_map_entries
        if not limit or len(self.order_map) + self._run_msgs <= limit:
            return
        self.map_limit_hits += 1
        missing = self.missing
        while self.order_map or self._runs:
            if len(self.order_map) + self._run_msgs < limit:
                return
            exp = self.expected
            # ``expected`` is never held here (it would have been drained): it is a gap.
            missing.pop(exp, None)
            self.map_limit_lost += 1
            self._lost(exp)
            self.expected = (exp + 1) & _M
            self._drain()

    def _drain(self) -> None:
        order_map = self.order_map
        runs = self._runs
        while True:
            sqn = self.expected
            if runs:
                run = runs.pop(sqn, None)
                if run is not None:
                    k = run.count if isinstance(run, PackedRun) else len(run)
                    self._run_msgs -= k
                    self.expected = (sqn + k) & _M
                    self._deliver_run(run)
                    continue
            if not order_map:
                return
            item = order_map.pop(sqn, None)
            if item is None:
                return
            self.expected = (sqn + 1) & _M
            self._consume(sqn, item[0], item[1])

    def _lost(self, sqn: int) -> None:
        self._frag_buf = None  # a message missing a fragment can never complete
        if self.delivered:
            self.unrecoverable += 1
            self.loss(LOSS, sqn, 1)

    def _consume(self, sqn: int, payload: bytes, frag: Frag | None) -> None:
        """The next message in sequence order: deliver it, or add it to the reassembly."""
        if frag is None:
            self._frag_buf = None
            self.delivered += 1
            self._deliver(sqn, payload)
            return
        first, offset, total = frag
        if offset == 0:
            if total > MAX_REASSEMBLY_BYTES:
                raise TransportError(f"fragmented message of {total} bytes exceeds our limit")
            self._frag_buf = bytearray(total)
            self._frag_first, self._frag_total, self._frag_got = first, total, 0
        buf = self._frag_buf
        if buf is None or first != self._frag_first:
            return  # joined mid-message, or a fragment of a message already given up
        end = offset + len(payload)
        if end > self._frag_total:
            raise TransportError("fragment beyond the message's total length")
        buf[offset:end] = payload
        self._frag_got += len(payload)
        if self._frag_got >= self._frag_total:
            self._frag_buf = None
            self.delivered += 1
            # Seed 8.4: a reassembled message carries the sqn of its last fragment.
            self._deliver(sqn, bytes(buf))

    def _arrival(self, sqn: int, payload: bytes, frag: Frag | None, now: float) -> None:
        if (sqn - self.high) & _M < _HALF:
            if not self._open_gap(self.high, sqn, now):
                self.expected = sqn
            self.high = (sqn + 1) & _M
        elif sqn in self.missing:
            del self.missing[sqn]
        else:
            self.duplicates += 1
            return
        # ``expected`` tracks the lowest number not yet delivered or declared lost.
        if self.missing:
            self.expected = min(self.missing, key=lambda s: (s - self.expected) & _M)
        else:
            self.expected = self.high
        self._arrival_deliver(sqn, payload, frag)

    def _arrival_deliver(self, sqn: int, payload: bytes, frag: Frag | None) -> None:
        if frag is None:
            self.delivered += 1
            self._deliver(sqn, payload)
            return
        first, offset, total = frag
        if total > MAX_REASSEMBLY_BYTES:
            raise TransportError(f"fragmented message of {total} bytes exceeds our limit")
        entry = self._frags.get(first)
        if entry is None:
            if len(self._frags) >= MAX_ORDER_MAP:
                self.map_refused += 1
                return
            entry = self._frags[first] = [bytearray(total), 0, total]
        buf = entry[0]
        assert isinstance(buf, bytearray)
        end = offset + len(payload)
        if end > total or total != entry[2]:
            raise TransportError("fragment beyond the message's total length")
        buf[offset:end] = payload
        got = int(entry[1]) + len(payload)  # type: ignore[call-overload]
        entry[1] = got
        if got >= total:
            del self._frags[first]
            self.delivered += 1
            self._deliver(sqn, bytes(buf))
