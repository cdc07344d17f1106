"""Hot Failover across contexts (HFX, seed 003 10.17.9): one HF topic received through several
contexts, each HF sequence number delivered once.

Theory of operation
-------------------
UM's HFX (deprecated there, kept for applications that use it) is for a multi-homed receiver:
one context per NIC, each receiving the HF sources' messages, and an *HFX object* that is in no
context and drops the copies arriving over the other NICs.  The shape is UM's:

- ``hfx = Hfx(topic, on_message, attributes=...)`` is ``lbm_hfx_create``: the ``hfx``-scope
  options (an attribute mapping of option name to UM's string form, an ``hfx`` attribute
  object, or None for the process configuration with its ``<hfxs>`` XML; defaults only in the
  registry, an unknown option is a :class:`~umcore.errors.ConfigError`);
- ``leg = await hfx.add_context(ctx, attributes=...)`` is ``lbm_hfx_rcv_create``: an HF
  receiver on the topic in ``ctx`` (receiver attributes of its own, as UM's per-context
  receive topic attributes), whose deliveries go to the HFX; ``await leg.close()`` is
  ``lbm_hfx_rcv_delete``;
- ``await hfx.close()`` is ``lbm_hfx_delete``: the legs still open are closed first.
  ``await Hfx.create(topic, contexts, ...)`` does the three steps for a set of contexts.

Deliveries go to ``on_message`` or, without one, to a bounded queue read by ``async for msg in
hfx`` / :meth:`Hfx.get` (at :data:`~umcore.engine.receive.MAX_RECEIVER_QUEUE` messages the
legs' contexts stop reading the topic's sessions and go on at half, as receivers do).  With
``event_queue`` (UM's ``evq`` argument of ``lbm_hfx_create``) the filtering runs on the loop and
``on_message`` from :meth:`~umcore.api.eventqueue.EventQueue.dispatch`, loss events included;
the queue is bounded by its hard limit (as for wildcard receivers, the HFX does not pace it)
and refuses to close while the HFX is open.

**Filtering.**  Each leg is an HF receiver (:mod:`umcore.api.hfspectrum`): it drops the copies
of its own context's sources and sets ``hf_sequence_number``, ``sequence_number`` (the HF
number) and ``original_sequence_number``.  The HFX builds each leg's receiver options from the
attributes given, with three settings of its own, so that the HFX alone orders and decides:
``ordered_delivery`` -1 (the leg hands on a late first copy that fills a gap, instead of
dropping it below the highest number it saw), ``hf_optional_messages`` 1 (an optional number
still counts in the HFX's sequence; a leg whose attributes said 0 has the optional messages
that reach the application through it dropped by the HFX), and ``hf_duplicate_delivery`` 1
when the HFX's ``duplicate_delivery`` is 1 (UM: it "overrides the hf_duplicate_delivery
(receiver) setting on all underlying HFX Receivers"; a leg whose own attributes set it has its
duplicates delivered too).  Across legs, :class:`~umcore.features.hfx.HfxCore` orders by HF
sequence number and reports loss (its module docstring: ``ordered_delivery``,
``delivery_control_max_delay``, burst loss...).  Duplicates are dropped, or delivered flagged
``MSG_FLAG_HF_DUPLICATE``.

**Events.**  BOS, EOS (flagged HF_PASS_THROUGH by the leg) and messages without HF sequence
number (plain ``send`` on an HF source) pass through at once, per leg (not de-duplicated, as
an HF receiver's pass-through).  Loss is the HFX's own, in HF sequence numbers: an
``MSG_UNRECOVERABLE_LOSS`` per HF number no leg delivered within
``delivery_control_max_delay`` (``sequence_number`` and ``hf_sequence_number`` the HF number,
flag HF_32, ``source`` empty: no one source lost it), an ``MSG_UNRECOVERABLE_LOSS_BURST`` with
``count`` for a gap beyond the burst limit.  A leg's own transport loss is not the
application's (another leg may carry the message): it is counted in :attr:`Hfx.leg_loss` and
not delivered.

**Refused** (seed 10.17.9: HFX does not support 64-bit HF sequence numbers,
``lbm_hf_src_send_rcv_reset`` or HF wildcard receivers): a message with a 64-bit HF number is
dropped and counted (:attr:`Hfx.refused_64bit`), so is an HF reset
(:attr:`Hfx.refused_reset`); both are logged (first occurrences, then every power of two).  An
HFX takes one topic name, never a pattern.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Callable, Iterable, Mapping
from typing import Any

from umcore.aio.timer import CoreTimer
from umcore.api.eventqueue import EventQueue
from umcore.config.attributes import Attributes, global_configuration
from umcore.engine import message as m
from umcore.engine.message import Message
from umcore.engine.options import Options
from umcore.engine.receive import DeliveryQueue
from umcore.errors import ConfigError, UMError
from umcore.features.hfx import HfxCore, HfxLoss, HfxSettings

__all__ = ["Hfx", "HfxReceiver"]

log = logging.getLogger("umcore.api")

OnMessage = Callable[[Message], object]
_DATA = m.MSG_DATA
_REQUEST = m.MSG_REQUEST
_LEG_LOSS = (m.MSG_UNRECOVERABLE_LOSS, m.MSG_UNRECOVERABLE_LOSS_BURST)


def _power_of_two(n: int) -> bool:
    return n & (n - 1) == 0


class HfxReceiver:
    """One leg of an :class:`Hfx` (``lbm_hfx_rcv_t``): its HF receiver in one context."""

    __slots__ = ("context", "duplicates", "hfx", "optional", "receiver")

    def __init__(self, hfx: Hfx, context: Any, optional: bool, duplicates: bool) -> None:
        self.hfx = hfx
        self.context = context
        #: ``hf_optional_messages`` of this leg's attributes (the leg itself passes them all).
        self.optional = optional
        #: Deliver the duplicates arriving through this leg (hfx ``duplicate_delivery`` or
        #: this leg's ``hf_duplicate_delivery``).
        self.duplicates = duplicates
        #: The HF receiver (``lbm_rcv_from_hfx_rcv``); set once created.
        self.receiver: Any = None

    def on_message(self, msg: Message) -> None:
        """The leg receiver's callback (runs on the loop)."""
        self.hfx._from_leg(self, msg)

    async def close(self) -> None:
        """``lbm_hfx_rcv_delete``: close this leg's receiver; no delivery through it after."""
        hfx = self.hfx
        if self in hfx._legs:
            hfx._legs.remove(self)
        if self.receiver is not None:
            await self.receiver.close()


class Hfx:
    """An HFX object (``lbm_hfx_t``); see the module docstring."""

    def __init__(
        self,
        topic: str,
        on_message: OnMessage | None = None,
        *,
        attributes: Any = None,
        event_queue: EventQueue | None = None,
    ) -> None:
        if not isinstance(topic, str) or not topic:
            raise ConfigError("an HFX needs a topic name", source="API", what=repr(topic))
        self.topic = topic
        #: The effective hfx-scope options (ConfigError here for an unknown or bad one).
        self.options = Options("hfx", attributes, topic)
        self.settings = HfxSettings.from_options(self.options)
        self.core = HfxCore(self.settings, topic)
        self.on_message: OnMessage | None = on_message
        #: Batched delivery is not offered (an event queue reads this).
        self.on_messages: Callable[[list[Message]], object] | None = None
        self.closed = False
        self._legs: list[HfxReceiver] = []
        #: Deliveries waiting for :meth:`get` (no callback); when full, every leg's context
        #: stops reading the topic's sessions (as a receiver's does).
        self.queue = DeliveryQueue(f"HFX for {topic!r}", self._pause_legs, self._resume_legs)
        self._timer: CoreTimer | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        #: HF numbers taken from a leg whose attributes refuse optional messages.
        self._drop_optional: set[int] = set()
        #: Counters: messages refused for carrying a 64-bit HF number or an HF reset; loss
        #: events of the legs' own transports (not delivered); duplicates dropped; optional
        #: messages dropped; pass-through deliveries; callback exceptions; queue pauses.
        self.refused_64bit = 0
        self.refused_reset = 0
        self.leg_loss = 0
        self.duplicates_dropped = 0
        self.dropped_optional = 0
        self.passed_through = 0
        self.callback_errors = 0
        if event_queue is not None:
            event_queue.attach_receiver(self)  # UMError without a callback, or when closed

    @classmethod
    async def create(
        cls,
        topic: str,
        contexts: Iterable[Any],
        on_message: OnMessage | None = None,
        *,
        attributes: Any = None,
        receiver_attributes: Any = None,
        event_queue: EventQueue | None = None,
    ) -> Hfx:
        """``lbm_hfx_create`` and one ``lbm_hfx_rcv_create`` per context of ``contexts``
        (each leg with ``receiver_attributes``); on failure, what was made is closed."""
        hfx = cls(topic, on_message, attributes=attributes, event_queue=event_queue)
        try:
            for ctx in contexts:
                await hfx.add_context(ctx, attributes=receiver_attributes)
        except BaseException:
            await hfx.close()
            raise
        return hfx

    async def __aenter__(self) -> Hfx:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    # ------------------------------------------------------------------ legs
    @property
    def legs(self) -> tuple[HfxReceiver, ...]:
        return tuple(self._legs)

    async def add_context(self, context: Any, *, attributes: Any = None) -> HfxReceiver:
        """``lbm_hfx_rcv_create``: an HF receiver on this HFX's topic in ``context``, with
        receiver ``attributes`` (a mapping, a receiver attribute object or None) and the
        three settings the HFX makes its own (module docstring)."""
        if self.closed:
            raise UMError(f"HFX for {self.topic!r} is closed")
        if any(leg.context is context for leg in self._legs):
            raise UMError(f"HFX for {self.topic!r} already has a receiver in this context")
        attrs = _receiver_attributes(attributes, self.topic)
        optional = bool(attrs.get_typed("hf_optional_messages"))
        dup = self.settings.duplicate_delivery or bool(attrs.get_typed("hf_duplicate_delivery"))
        attrs.set("ordered_delivery", "-1")
        attrs.set("hf_optional_messages", "1")
        if dup:
            attrs.set("hf_duplicate_delivery", "1")
        if self._loop is None:
            self._loop = asyncio.get_running_loop()
            self._timer = CoreTimer(self._loop, self._on_timer)
        leg = HfxReceiver(self, context, optional, dup)
        self._legs.append(leg)
        try:
            leg.receiver = await context.create_hf_receiver(
                self.topic, leg.on_message, attributes=attrs
            )
        except BaseException:
            self._legs.remove(leg)
            raise
        return leg

    async def close(self) -> None:
        """``lbm_hfx_delete``: close the legs, then the HFX; no callback runs after this."""
        for leg in list(self._legs):
            await leg.close()
        self.closed = True
        self.on_message = None
        if self._timer is not None:
            self._timer.cancel()
        self.queue.close()

    # ------------------------------------------------------------------ statistics
    @property
    def delivered(self) -> int:
        """HF-sequenced messages delivered (each HF number once; duplicates not counted)."""
        return self.core.delivered

    @property
    def duplicates(self) -> int:
        """Copies the HFX found already delivered, held or declared lost."""
        return self.core.duplicates

    @property
    def lost(self) -> int:
        """Loss events delivered (one per HF number, one per burst)."""
        return self.core.lost

    # ------------------------------------------------------------------ the data path
    def _from_leg(self, leg: HfxReceiver, msg: Message) -> None:
        if self.closed:
            return
        t = msg.type
        if t in (_DATA, _REQUEST):
            info = msg.hf_info
            if info is None:  # not HF-sequenced: passes through (flagged by the leg)
                self.passed_through += 1
                self._emit(msg)
                return
            if info.bits != 32:
                self.refused_64bit += 1
                if _power_of_two(self.refused_64bit):
                    log.warning(
                        "HFX %r: dropped %d message(s) with 64-bit HF sequence numbers "
                        "(HFX takes 32-bit ones only)",
                        self.topic,
                        self.refused_64bit,
                    )
                return
            sqn = info.sqn
            assert self._loop is not None
            core = self.core
            if not core.receive_message(sqn, msg, self._loop.time()):
                if leg.duplicates:
                    msg.flags |= m.MSG_FLAG_HF_DUPLICATE
                    self._emit(msg)
                else:
                    self.duplicates_dropped += 1
                return
            if info.optional and not leg.optional:
                self._drop_optional.add(sqn)
            self._flush()
            return
        if t == m.MSG_HF_RESET:
            self.refused_reset += 1
            if _power_of_two(self.refused_reset):
                log.warning(
                    "HFX %r: ignored %d HF reset(s) (HFX does not support "
                    "lbm_hf_src_send_rcv_reset)",
                    self.topic,
                    self.refused_reset,
                )
            return
        if t in _LEG_LOSS:
            self.leg_loss += msg.count or 1
            return
        self._emit(msg)  # BOS, EOS, no-source notification...

    def _flush(self) -> None:
        for item in self.core.take_events():
            if type(item) is HfxLoss:
                self._emit(self._loss_message(item))
                continue
            if self._drop_optional and item.flags & m.MSG_FLAG_HF_OPTIONAL:
                sqn = item.hf_sequence_number
                if sqn in self._drop_optional:
                    self._drop_optional.discard(sqn)
                    self.dropped_optional += 1
                    continue
            self._emit(item)
        timer = self._timer
        if timer is not None:
            timer.arm(self.core.next_timer())

    def _loss_message(self, loss: HfxLoss) -> Message:
        if loss.burst:
            msg = Message(
                m.MSG_UNRECOVERABLE_LOSS_BURST, self.topic, "", loss.sqn, count=loss.count
            )
        else:
            msg = Message(m.MSG_UNRECOVERABLE_LOSS, self.topic, "", loss.sqn)
            self._drop_optional.discard(loss.sqn)
        msg.hf_sequence_number = loss.sqn
        msg.flags = m.MSG_FLAG_HF_32
        return msg

    def _on_timer(self) -> None:
        if self.closed or self._loop is None:
            return
        self.core.handle_timer(self._loop.time())
        self._flush()

    def _emit(self, msg: Message) -> None:
        cb = self.on_message
        if cb is not None:
            try:
                cb(msg)
            except Exception:
                self.callback_errors += 1
                if _power_of_two(self.callback_errors):
                    log.exception(
                        "HFX callback failed (%d so far, topic %r)",
                        self.callback_errors,
                        self.topic,
                    )
            return
        self.queue.put(msg)

    # ------------------------------------------------------------------ the queue
    def _pause_legs(self) -> None:
        for leg in self._legs:
            leg.context.pause_feeding(self.topic)

    def _resume_legs(self) -> None:
        for leg in self._legs:
            leg.context.resume_feeding(self.topic)

    @property
    def queue_pauses(self) -> int:
        """Times the queue filled up and the legs' contexts stopped reading the topic."""
        return self.queue.pauses

    async def get(self) -> Message:
        """The next delivery (data or event); UMError once closed and drained."""
        return await self.queue.get()

    def get_nowait(self) -> Message | None:
        return self.queue.get_nowait()

    def __aiter__(self) -> AsyncIterator[Message]:
        return self.queue.iterate()


def _receiver_attributes(attributes: Any, topic: str) -> Attributes:
    """A leg's receiver attributes, a copy the HFX may set its own settings on."""
    cfg = global_configuration()
    if attributes is None:
        return cfg.for_object("receiver", None, name=topic)
    if isinstance(attributes, Mapping):
        base = cfg.attributes("receiver")
        for key, value in attributes.items():
            base.set(key, value if isinstance(value, str) else str(value))
        return base
    if isinstance(attributes, Attributes):
        if attributes.scope != "receiver":
            raise ConfigError(
                f"{attributes.scope} attributes given for an HFX receiver", source="API"
            )
        return attributes.copy()
    raise ConfigError(
        "HFX receiver attributes must be a mapping, receiver attributes or None",
        source="API",
        what=type(attributes).__name__,
    )
