"""The receive side of the engine: subscribers, fan-outs and joined transport sessions.

Theory of operation
-------------------
A :class:`Subscriber` is what a topic (or wildcard) receiver is to the engine: a callback
(``on_message``, the fast path), an opt-in batched callback (``on_messages``), or without
either a bounded queue read by ``async for``.  The API's ``Receiver`` is a Subscriber.

A :class:`JoinedSession` is a source transport session this context joined as a receiver (one
connection for TCP, one socket or group membership for LBT-RU/LBT-RM): its transport core, its
connection adapter, and per topic index a :class:`Fanout`, which owns the topic's delivery
controller (DC) and hands what the DC delivers, in order, to the subscribers of the topic.
The DC belongs to the transport core's module (:mod:`umcore.transport.tcp`,
:mod:`umcore.transport.delivery`) and so does its fast path: a read or datagram holding plain
in-sequence data is delivered by the core straight into :meth:`Fanout.deliver` /
:meth:`Fanout.deliver_many`.  A TCP DC has a hook for plain data (``deliver_plain``): while the
topic has one subscriber with a callback and no recovery runs, the fan-out points it at
:meth:`Fanout.deliver_one`, the latency case (the message built or recycled, the callback
called, the delivery counted in a small int that :attr:`Subscriber.messages` adds in).

The first bytes on a session give every mapped subscriber BOS, a subscriber added to an active
session gets BOS at once, and the end of the session gives EOS (seed 3.4).  When a subscriber's
queue holds ``MAX_RECEIVER_QUEUE`` messages the engine stops reading the sessions feeding it
(receiver pacing, counted in :attr:`Subscriber.queue_pauses`) instead of growing without
bound.

**Recycling.**  The paths that deliver plain data to one callback keep the last
:class:`~umcore.engine.message.DeliveredMessage` they handed out (``Fanout.spare``) and hand it
out again when no application kept it (its reference count shows only theirs:
:data:`SPARE_REFS`); see :class:`~umcore.engine.message.DeliveredMessage`.

An exception raised by an application callback is logged (1st, 2nd, 4th... time) and counted,
never allowed to break a session.
"""

from __future__ import annotations

import asyncio
import logging
import re
from collections import deque
from collections.abc import AsyncIterator, Callable, Iterable
from sys import getrefcount
from typing import Any, Protocol

from umcore.engine import message as m
from umcore.engine.message import DeliveredMessage, Message
from umcore.engine.options import Options
from umcore.errors import UMError
from umcore.resolver.core import SourceInfo
from umcore.transport.tcp import LOSS_BURST, DeliveryController, TcpReceiverSession

__all__ = [
    "MAX_RECEIVER_QUEUE",
    "SPARE_REFS",
    "DeliveryQueue",
    "Fanout",
    "JoinedSession",
    "OnMessage",
    "Subscriber",
]

log = logging.getLogger("umcore.engine")

# Messages a receiver without callback may hold for its async iterator before the engine stops
# reading the sessions feeding it (they resume at half).  Events (BOS/EOS/loss) are always
# queued: at most a few per session, they cannot grow without bound.
MAX_RECEIVER_QUEUE = 65536

OnMessage = Callable[[Message], object]
# Deliveries a fan-out's one-callback case counts in a small int before adding them to the
# subscriber's count (CPython caches the ints -5..256: counting up to this allocates nothing).
MAX_FUSED = 256


class _Holder:
    __slots__ = ("spare",)

    def __init__(self) -> None:
        self.spare = DeliveredMessage()


def _spare_refs() -> int:
    """``sys.getrefcount`` of a message held by a fan-out's ``spare`` slot and a local variable
    and by nobody else, measured in the shape the delivery paths test it in (``msg = f.spare``,
    then ``getrefcount(msg)``): 3 on CPython 3.11-3.13 (the slot, the local, the argument); an
    interpreter that borrows the argument's reference gives less, whatever it gives is what a
    message nobody kept reads there."""
    h = _Holder()
    msg = h.spare
    return getrefcount(msg)


#: What :func:`getrefcount` reads for a fan-out's spare message that no application kept.
SPARE_REFS = _spare_refs()


class Feeding(Protocol):
    """What a subscriber tells when its queue fills up or drains (the engine)."""

    def pause_feeding(self, topic: str) -> None: ...

    def resume_feeding(self, topic: str) -> None: ...


class DeliveryQueue:
    """The deliveries a receiver without callback holds for ``get()`` / ``async for``.

    Bounded: at :data:`MAX_RECEIVER_QUEUE` messages ``pause()`` is called (its owner stops
    reading the sessions feeding it; counted in :attr:`pauses`), at half ``resume()``.
    :meth:`close` wakes a waiting :meth:`get`, which raises UMError (naming ``what``) once the
    queue is closed and drained.  Shared by :class:`Subscriber` and the API's HFX."""

    __slots__ = ("_pause", "_paused", "_resume", "_waiter", "_what", "closed", "items", "pauses")

    def __init__(self, what: str, pause: Callable[[], None], resume: Callable[[], None]) -> None:
        self.items: deque[Message] = deque()
        self.closed = False
        #: Times the queue filled up and ``pause()`` was called.
        self.pauses = 0
        self._what = what
        self._pause = pause
        self._resume = resume
        self._waiter: asyncio.Future[None] | None = None
        self._paused = False

    def put(self, msg: Message) -> None:
        self.items.append(msg)
        self._queued()

    def extend(self, msgs: list[Message]) -> None:
        self.items.extend(msgs)
        self._queued()

    def _queued(self) -> None:
        """Wake a waiting :meth:`get`; pause the feeding of a full queue."""
        self._wake()
        if len(self.items) >= MAX_RECEIVER_QUEUE and not self._paused:
            self._paused = True
            self.pauses += 1
            self._pause()

    def _wake(self) -> None:
        w = self._waiter
        if w is not None and not w.done():
            w.set_result(None)

    def close(self) -> None:
        """No more deliveries: a waiting :meth:`get` wakes up (and raises once drained)."""
        self.closed = True
        self._wake()

    async def get(self) -> Message:
        """The next delivery; UMError once closed and drained."""
        q = self.items
        while not q:
            if self.closed:
                raise UMError(f"{self._what} is closed")
            self._waiter = asyncio.get_running_loop().create_future()
            try:
                await self._waiter
            finally:
                self._waiter = None
        msg = q.popleft()
        if self._paused and len(q) <= MAX_RECEIVER_QUEUE // 2:
            self._paused = False
            self._resume()
        return msg

    def get_nowait(self) -> Message | None:
        return self.items.popleft() if self.items else None

    async def iterate(self) -> AsyncIterator[Message]:
        """Every delivery until closed and drained."""
        while not (self.closed and not self.items):
            try:
                yield await self.get()
            except UMError:
                return


class Subscriber:
    """A topic or wildcard receiver as the engine sees it (the API's ``Receiver`` is one).

    With ``on_message`` every delivery calls it on the loop (the fast path); without, deliveries
    queue for ``async for msg in receiver`` / :meth:`get`.
    """

    def __init__(
        self,
        feeding: Feeding,
        topic: str,
        on_message: OnMessage | None,
        *,
        pattern: re.Pattern[str] | None = None,
        options: Options | None = None,
    ) -> None:
        #: The context (engine) delivering to this subscriber; told when the queue fills up.
        self.context: Any = feeding
        #: The topic, or for a wildcard receiver its pattern (messages carry their own topic).
        self.topic = topic
        #: Compiled pattern of a wildcard receiver, None for a topic receiver.
        self.pattern = pattern
        #: The delivery paths read ``_cb``; :attr:`on_message` (a property) keeps the fast-path
        #: state of the fan-outs this subscriber is in (``_fanouts``) in step with it.
        self._cb: OnMessage | None = on_message
        self._fanouts: list[Fanout] = []
        #: Opt-in batched delivery: called with a list of messages, in order, wherever the
        #: transport parsed several at once; single deliveries (events, slow-path data) then
        #: arrive through :attr:`on_message`, which is set to a wrapper calling
        #: ``on_messages([msg])`` when none was given.
        self.on_messages: Callable[[list[Message]], object] | None = None
        self.closed = False
        #: Deliveries waiting for :meth:`get` (no callback), bounded (receiver pacing).
        self.queue = DeliveryQueue(
            f"receiver for {topic!r}",
            lambda: self.context.pause_feeding(self.topic),
            lambda: self.context.resume_feeding(self.topic),
        )
        #: Exceptions raised by ``on_message`` (logged, counted, never propagated).
        self.callback_errors = 0
        self._messages = 0
        #: Messages reported lost for good (loss events' counts).
        self.unrecoverable = 0
        #: The receiver's effective options (late join / OTR and LBT joins read them); None
        #: for a wildcard receiver.
        self.options = options
        #: ``ordered_delivery``: TCP delivers in order whatever the mode (no retransmission
        #: can reorder it), so 1 and -1 behave alike there; 0 (seed 8.8.3, deprecated in UM)
        #: delivers each UM fragment as its own message with ``msg.fragment_info`` instead of
        #: reassembling (first receiver of a topic source wins, as for the other DC options).
        self.ordered_delivery = 1 if options is None else int(options.get("ordered_delivery"))
        #: ``delivery_control_maximum_burst_loss`` (first receiver of a topic wins).
        self.max_burst_loss = (
            1024 if options is None else int(options.get("delivery_control_maximum_burst_loss"))
        )

    @property
    def queue_pauses(self) -> int:
        """Times the queue filled up and reading from the sources was paused."""
        return self.queue.pauses

    @property
    def fanouts(self) -> tuple[Fanout, ...]:
        """The fan-outs (joined topic sources) delivering to this subscriber."""
        return tuple(self._fanouts)

    @property
    def messages(self) -> int:
        """Messages delivered (data and requests; not events), those the one-callback case
        counted in a fan-out's small int (:attr:`Fanout.fused`) included."""
        n = self._messages
        for f in self._fanouts:
            if f.fast_r is self:
                n += f.fused
        return n

    @messages.setter
    def messages(self, value: int) -> None:
        self._messages = value

    def set_batched(self, on_messages: Callable[[list[Message]], object] | None) -> None:
        """Opt in to batched delivery (see :attr:`on_messages`)."""
        if on_messages is None:
            return
        self.on_messages = on_messages
        if self._cb is None:
            self.on_message = lambda msg: on_messages([msg])

    @property
    def on_message(self) -> OnMessage | None:
        """The per-message callback (None: deliveries queue for the async iterator).  May be
        replaced at any time; the next delivery uses the new one."""
        return self._cb

    @on_message.setter
    def on_message(self, cb: OnMessage | None) -> None:
        self._cb = cb
        for f in self._fanouts:
            f.refresh()

    def deliver(self, msg: Message) -> None:
        """Hand one message or event to the callback, or queue it."""
        cb = self._cb
        if cb is not None:
            try:
                cb(msg)
            except Exception:
                self._callback_failed()
            return
        self.queue.put(msg)

    def enqueue(self, msg: Message) -> None:
        """Queue one delivery for the async iterator whatever the callback (a filter installed
        as the callback -- Spectrum, Hot Failover -- hands on what it keeps for the queue)."""
        self.queue.put(msg)

    def _deliver_many(self, msgs: list[Message]) -> None:
        """Queue a run of messages for the async iterator (same bound as :meth:`deliver`)."""
        self.queue.extend(msgs)

    def _callback_failed(self) -> None:
        self.callback_errors += 1
        n = self.callback_errors
        if n & (n - 1) == 0:  # the 1st, 2nd, 4th, 8th... failure: bounded log output
            log.exception("receiver callback failed (%d so far, topic %r)", n, self.topic)

    async def get(self) -> Message:
        """The next delivery (data or event)."""
        return await self.queue.get()

    def get_nowait(self) -> Message | None:
        return self.queue.get_nowait()

    def __aiter__(self) -> AsyncIterator[Message]:
        return self.queue.iterate()

    def detach(self) -> None:
        """Closing: no callback runs after this; a waiting :meth:`get` wakes up."""
        self.closed = True
        self.on_message = None
        self.on_messages = None
        self.queue.close()


class Fanout:
    """Delivery of one topic index of one joined session to the subscribers of that topic."""

    __slots__ = (
        "dc",
        "fast_cb",
        "fast_r",
        "features",
        "fragments",
        "fused",
        "persist",
        "plain_hook",
        "receivers",
        "recovery",
        "request_dest",
        "session",
        "source",
        "spare",
        "topic",
    )

    def __init__(self, session: JoinedSession, topic: str, tidx: int, max_burst: int) -> None:
        self.session = session
        self.topic = topic
        self.features = session.features
        self.receivers: list[Subscriber] = []
        self.dc: Any = session.new_dc(tidx, topic, self.deliver, self._loss, max_burst)
        self.dc.deliver_many = self.deliver_many
        #: The DC has a plain-data hook (TCP's :attr:`DeliveryController.deliver_plain`): with
        #: one callback subscriber it is pointed at :meth:`deliver_one`.
        self.plain_hook = hasattr(self.dc, "deliver_plain")
        #: UM's source string, as messages carry it.
        self.source = session.source_string
        #: The DC may deliver fragments on their own (``ordered_delivery`` 0: TCP's DC has
        #: ``fragment``, the fragment info during such a delivery).
        self.fragments = hasattr(self.dc, "fragment")
        #: Late join / OTR state (umcore.features.recovery.TopicRecovery) or None; set through
        #: :meth:`set_recovery`.
        self.recovery: Any = None
        self.request_dest: tuple[str, int] = ("", 0)
        #: A persistent receiver's glue (umcore.engine.persist.ReceiverPersistence) or None.
        self.persist: Any = None
        #: The one-message fast path's state, checked once here instead of per message: with
        #: one receiver, that receiver has a callback and no recovery runs, ``fast_r`` is the
        #: receiver and ``fast_cb`` its callback; else both None.  Kept current by
        #: :meth:`refresh`, called whenever one of those changes.
        self.fast_r: Subscriber | None = None
        self.fast_cb: OnMessage | None = None
        #: Deliveries :meth:`deliver_one` counted for :attr:`fast_r` and not yet added to its
        #: count: a small int (CPython caches -5..256: counting allocates nothing), folded at
        #: :data:`MAX_FUSED` and whenever :attr:`fast_r` changes.
        self.fused = 0
        #: The last message the one-callback paths delivered, handed out again for the next
        #: delivery when no application kept it (module docstring, "Recycling").
        self.spare = DeliveredMessage()

    def set_recovery(self, rec: Any) -> None:
        self.recovery = rec
        # every DC (TCP's, LBT-RU/RM's, the DRO's, LBT-SMX's) reports the source's tail, what
        # it sent before the DC's first delivery, through before_start
        self.dc.before_start = self._before_start if rec is not None else None
        self.refresh()

    def _before_start(self, sqn: int) -> None:
        """The source sent up to ``sqn`` before what the DC delivers (its first delivery or a
        TSNI before it): late join / persistence may recover them (features)."""
        if self.recovery is not None:
            self.features.source_tail(self, sqn)

    def refresh(self) -> None:
        """Recompute the fast-path state (:attr:`fast_cb`, :attr:`fast_r`) and point the DC's
        plain-data hook at :meth:`deliver_one` when it applies."""
        r = self.fast_r
        if r is not None and self.fused:
            r._messages += self.fused
            self.fused = 0
        rs = self.receivers
        if len(rs) == 1 and self.recovery is None and rs[0]._cb is not None:
            self.fast_r = rs[0]
            self.fast_cb = rs[0]._cb
        else:
            self.fast_r = self.fast_cb = None
        if self.plain_hook:
            one = self.fast_cb is not None and not self.fragments_on_their_own()
            self.dc.deliver_plain = self.deliver_one if one else self.deliver

    def fragments_on_their_own(self) -> bool:
        """``ordered_delivery`` 0: a TCP DC hands UM fragments over one by one."""
        return self.fragments and not self.dc.reassemble

    def deliver_one(self, sqn: int, payload: bytes) -> None:
        """The DC's plain-data hook with one subscriber with a callback and no recovery (the
        latency case): the spare message again unless an application kept it, its five fields
        stored, the callback called; counted in :attr:`fused`."""
        msg = self.spare
        if getrefcount(msg) != SPARE_REFS:
            msg = self.spare = DeliveredMessage()
        msg.type = 0
        msg.topic = self.topic
        msg.source = self.source
        msg.sequence_number = sqn
        msg.data = payload
        k = self.fused
        if k < MAX_FUSED:
            self.fused = k + 1
        else:
            self.fold()
        cb = self.fast_cb
        if cb is None:  # (never: the hook is this method only while there is one)
            return
        try:
            cb(msg)
        except Exception:
            r = self.fast_r
            if r is not None:
                r._callback_failed()

    def fold(self) -> None:
        """Add :attr:`fused` (and this delivery) to the subscriber's count."""
        r = self.fast_r
        if r is not None:
            r._messages += self.fused + 1
        self.fused = 0

    def add_receiver(self, r: Subscriber) -> None:
        self.receivers.append(r)
        r._fanouts.append(self)
        self.refresh()

    def remove_receiver(self, r: Subscriber) -> None:
        self.receivers.remove(r)
        r._fanouts.remove(self)
        self.refresh()

    def deliver_event(self, msg: Message) -> None:
        for r in self.receivers:
            r.deliver(msg)

    def deliver_data(self, msg: Message) -> None:
        """A message built elsewhere (late join, OTR, properties) to every subscriber."""
        for r in self.receivers:
            r._messages += 1
            r.deliver(msg)

    def deliver_loss(self, burst: bool, sqn: int, count: int) -> None:
        """An unrecoverable-loss event (a burst, or ``count`` single losses from ``sqn``) to
        every subscriber, counted in their ``unrecoverable``."""
        t = m.MSG_UNRECOVERABLE_LOSS_BURST if burst else m.MSG_UNRECOVERABLE_LOSS
        msg = Message(t, self.topic, self.source, sqn, b"", count)
        for r in self.receivers:
            r.unrecoverable += count
            r.deliver(msg)

    def deliver(self, sqn: int, payload: bytes | memoryview) -> None:
        """The DC's delivery of one message, in order."""
        if type(payload) is bytes and self.recovery is None and not self.dc.headers:
            # Fast path (plain data, the latency case): one Message, each receiver called;
            # the spare one again unless an application kept it (DeliveredMessage).
            frag = self.dc.fragment if self.fragments else None
            if frag is None:
                msg = self.spare
                if getrefcount(msg) != SPARE_REFS:
                    msg = self.spare = DeliveredMessage()
            else:
                msg = DeliveredMessage()  # a fragment on its own: never recycled
                msg.fragment_info = frag
            msg.type = 0
            msg.topic = self.topic
            msg.source = self.source
            msg.sequence_number = sqn
            msg.data = payload
            cb = self.fast_cb
            if cb is not None:  # one receiver with a callback (checked when it changed)
                r = self.fast_r
                assert r is not None
                r._messages += 1
                try:
                    cb(msg)
                except Exception:
                    r._callback_failed()
                return
            for r in self.receivers:
                r._messages += 1
                cb = r._cb
                if cb is None:
                    r.deliver(msg)
                    continue
                try:
                    cb(msg)
                except Exception:
                    r._callback_failed()
            return
        if type(payload) is not bytes:
            payload = bytes(payload)
        headers = self.dc.headers
        if self.recovery is not None:
            self.features.live(self, sqn, payload, headers)
            return
        if headers:
            feat_msg = self.features.make_message(self.topic, self.source, sqn, payload, headers)
            if feat_msg is None:
                return
            msg = feat_msg
        else:
            msg = DeliveredMessage()  # allocated in C, the fields stored here
            msg.type = 0
            msg.topic = self.topic
            msg.source = self.source
            msg.sequence_number = sqn
            msg.data = payload
        frag = getattr(self.dc, "fragment", None)
        if frag is not None:
            msg.fragment_info = frag
        self.deliver_data(msg)

    def deliver_many(self, records: Iterable[tuple[int, bytes]], count: int) -> None:
        """A run of ``count`` in-sequence plain data messages ``(sqn, payload)`` parsed in one
        pass (``records`` iterated once: a list or the unpacking iterator itself)."""
        if self.recovery is not None:  # late join / OTR / persistence decide (features)
            self.features.live_many(self, records)
            return
        topic = self.topic
        source = self.source
        receivers = self.receivers
        new = DeliveredMessage
        if len(receivers) == 1:
            r = receivers[0]
            cb = r._cb
            if r.on_messages is None and cb is not None:
                # One receiver with a per-message callback (the default API): build each
                # message as it is delivered (no list), allocated in C (DeliveredMessage),
                # without a try block per message (an exception resumes the iterator).
                r._messages += count
                it = iter(records)
                msg = self.spare
                refs = getrefcount  # (locals: no global load per message)
                spare_refs = SPARE_REFS
                while True:
                    try:
                        for sqn, payload in it:
                            # Recycling: the last message again unless the application kept
                            # it; all five fields are stored anew.
                            if refs(msg) != spare_refs:
                                msg = self.spare = new()
                            msg.type = 0
                            msg.topic = topic
                            msg.source = source
                            msg.sequence_number = sqn
                            msg.data = payload
                            cb(msg)
                        return
                    except Exception:
                        r._callback_failed()
        msgs: list[Message] = []
        append = msgs.append
        for sqn, payload in records:
            msg = new()
            msg.type = 0
            msg.topic = topic
            msg.source = source
            msg.sequence_number = sqn
            msg.data = payload
            append(msg)
        n = len(msgs)
        for r in receivers:
            r._messages += n
            many = r.on_messages
            if many is not None:
                try:
                    many(msgs)
                except Exception:
                    r._callback_failed()
                continue
            cb = r._cb
            if cb is None:
                r._deliver_many(msgs)
                continue
            for msg in msgs:
                try:
                    cb(msg)
                except Exception:
                    r._callback_failed()

    def _loss(self, kind: str, sqn: int, count: int) -> None:
        if self.recovery is not None:
            self.features.transport_loss(self, sqn, count)
            return
        self.session.count_loss(count)
        self.deliver_loss(kind == LOSS_BURST, sqn, count)


class FeatureHooks(Protocol):
    """What fan-outs hand to late join / OTR and message decoding
    (:class:`umcore.engine.features.ContextFeatures`)."""

    def fanout_created(
        self, fan: Fanout, options: tuple[Any, ...], ropts: Options, receiver: Any = None
    ) -> None: ...

    def fanout_joined(self, fan: Fanout, options: tuple[Any, ...]) -> None: ...

    def fanout_removed(self, fan: Fanout) -> None: ...

    def live(self, fan: Fanout, sqn: int, payload: bytes, headers: tuple[Any, ...]) -> None: ...

    def live_many(self, fan: Fanout, records: Iterable[tuple[int, bytes]]) -> None: ...

    def transport_loss(self, fan: Fanout, sqn: int, count: int) -> None: ...

    def source_tail(self, fan: Fanout, sqn: int) -> None: ...

    def make_message(
        self,
        topic: str,
        source: str,
        sqn: int,
        payload: bytes,
        headers: tuple[Any, ...] | list[Any],
        flags: int = 0,
    ) -> Message | None: ...


class SessionOwner(Protocol):
    """What a joined session reports to (the engine)."""

    @property
    def features(self) -> FeatureHooks: ...

    def session_ended(self, js: JoinedSession) -> None: ...

    def count_loss(self, count: int) -> None: ...


class Connection(Protocol):
    """A joined session's adapter: a TCP connection or an LBT receiver socket."""

    def abort(self) -> None: ...

    def pause_reading(self) -> None: ...

    def resume_reading(self) -> None: ...


class JoinedSession:
    """A source transport session this context has joined as a receiver.

    TCP sessions are built here; :mod:`umcore.engine.lbt` replaces :attr:`core` and
    :attr:`source_string` for LBT-RU / LBT-RM before the first fan-out is added
    (:meth:`set_core`)."""

    def __init__(self, owner: SessionOwner, info: SourceInfo) -> None:
        self.owner = owner
        self.features = owner.features
        self.key = info.key
        self.kind = str(info.key[0])
        self.ip, self.port, self.session_id = info.ip, info.port, info.session_id
        self.source_string = f"TCP:{info.ip}:{info.port}:{info.session_id or 0:08x}"
        self.core: Any = TcpReceiverSession(info.session_id)
        self.options = info.options
        self.fanouts: dict[int, Fanout] = {}
        self.conn: Connection | None = None
        self.active = False
        self.closed = False
        #: Raw receivers' frame sinks (:mod:`umcore.engine.raw`), called with the LBMC frames
        #: of each read (TCP) or datagram (LBT-RU/RM).
        self.frame_sinks: list[Callable[[list[bytes]], None]] = []
        #: Told BOS (True) and EOS (False) of this session (raw receivers).
        self.session_watchers: list[Callable[[bool], None]] = []
        #: LBT-RU / LBT-RM: the options the session was joined with, and its statistics hook.
        self.join_options: Options | None = None
        self.sample: Callable[[], tuple[str, str, str, dict[str, int]]] | None = None
        #: Builds the delivery controllers of a DRO proxy source's TCP/LBT-IPC session with
        #: ``transport_*_dro_loss_recovery_timeout`` > 0 (umcore.engine.dro); None: the plain one.
        self.dc_factory: Callable[..., Any] | None = None

    def set_core(self, core: Any, source_string: str) -> None:
        self.core = core
        self.source_string = source_string

    def new_dc(
        self, tidx: int, topic: str, deliver: Any, loss: Any, max_burst: int
    ) -> DeliveryController | Any:
        new = getattr(self.core, "new_dc", None)  # LBT-RU / LBT-RM receiver cores
        if new is None and self.dc_factory is not None:
            return self.dc_factory(tidx, topic, deliver, loss, max_burst_loss=max_burst)
        if new is None:
            return DeliveryController(tidx, topic, deliver, loss, max_burst_loss=max_burst)
        return new(tidx, topic, deliver, loss, max_burst_loss=max_burst)

    def count_loss(self, count: int) -> None:
        self.owner.count_loss(count)

    def add_frame_sink(self, sink: Callable[[list[bytes]], None]) -> None:
        """A raw receiver's sink: the LBMC frames of this session, a read's or a datagram's at a
        time, in arrival order."""
        self.frame_sinks.append(sink)
        self.core.frame_sink = sink if len(self.frame_sinks) == 1 else self._fan_frames

    def remove_frame_sink(self, sink: Callable[[list[bytes]], None]) -> None:
        if sink in self.frame_sinks:
            self.frame_sinks.remove(sink)
        sinks = self.frame_sinks
        self.core.frame_sink = (
            None if not sinks else sinks[0] if len(sinks) == 1 else (self._fan_frames)
        )
        self._leave_if_unused()

    def _fan_frames(self, frames: list[bytes]) -> None:
        for sink in self.frame_sinks:
            sink(frames)

    def bos(self) -> None:
        self.active = True
        for watch in self.session_watchers:
            watch(True)
        for f in self.fanouts.values():
            f.deliver_event(Message(m.MSG_BOS, f.topic, self.source_string))

    def eos(self, exc: Exception | None) -> None:
        if self.closed:
            return
        self.closed = True
        self.owner.session_ended(self)
        if exc is not None:
            log.info("session %s ended: %s", self.source_string, exc)
        for watch in self.session_watchers:
            watch(False)
        for f in self.fanouts.values():
            f.deliver_event(Message(m.MSG_EOS, f.topic, self.source_string))

    def add(self, topic: str, tidx: int, receiver: Subscriber) -> None:
        f = self.fanouts.get(tidx)
        if f is None:
            f = self.fanouts[tidx] = Fanout(self, topic, tidx, receiver.max_burst_loss)
            if receiver.ordered_delivery == 0 and hasattr(f.dc, "reassemble"):
                f.dc.reassemble = False
            self.core.subscribe(f.dc)
            if receiver.options is not None:
                self.features.fanout_created(f, self.options, receiver.options, receiver)
            else:  # a wildcard receiver's: only what any joined source gives (SOURCE: UIMs)
                self.features.fanout_joined(f, self.options)
        if receiver in f.receivers:
            return
        f.add_receiver(receiver)
        if self.active:
            receiver.deliver(Message(m.MSG_BOS, topic, self.source_string))

    def remove(self, receiver: Subscriber) -> None:
        for tidx, f in list(self.fanouts.items()):
            if receiver in f.receivers:
                f.remove_receiver(receiver)
            if not f.receivers:
                self.features.fanout_removed(f)
                del self.fanouts[tidx]
                self.core.unsubscribe(tidx)
        self._leave_if_unused()

    def drop_topic(self, tidx: int, topic: str) -> None:
        """The source of ``topic`` at ``tidx`` went away (an SRS withdrawal): EOS to its
        subscribers, and leave that topic index (the session when it was the last)."""
        f = self.fanouts.get(tidx)
        if f is None or f.topic != topic:
            return
        del self.fanouts[tidx]
        self.features.fanout_removed(f)
        self.core.unsubscribe(tidx)
        if self.active and not self.closed:
            f.deliver_event(Message(m.MSG_EOS, f.topic, self.source_string))
        self._leave_if_unused()

    def _leave_if_unused(self) -> None:
        if not self.fanouts and not self.frame_sinks and not self.closed:
            # Nobody listens any more: leave the session (no EOS to anyone).
            self.closed = True
            self.owner.session_ended(self)
            if self.conn is not None:
                self.conn.abort()

    def feeds(self, topic: str) -> bool:
        return any(f.topic == topic for f in self.fanouts.values())
