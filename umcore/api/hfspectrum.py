"""Spectrum channels and Hot Failover on the API's sources and receivers (seed 003 10.16-10.17).

Theory of operation
-------------------
:class:`SourceExtras` and :class:`ReceiverExtras` are mixed into
:class:`~umcore.api.context.Source` and :class:`~umcore.api.context.Receiver`.

Sources.  ``ch = src.channel(n)`` is UM's ``lbm_src_channel_create``: a
:class:`SourceChannel` holding the channel's ready APPHDR_CHAIN element, so ``ch.send(data)``
allocates nothing for the channel.  An HF source (``ctx.create_hf_source``, UM's
``lbm_hf_src_create``) sends with ``src.send_hf(data, sqn, bits=32|64, optional=False)``
(``lbm_hf_src_send_ex`` with HF_32 / HF_64 / HF_OPTIONAL); a plain ``send`` on it passes
through HF receivers unordered, as in UM.  ``src.hf_send_rcv_reset(sqn)`` makes HF receivers
forget their HF state (``lbm_hf_src_send_rcv_reset``; they get an ``LBM_MSG_HF_RESET``).
Wire format: :mod:`umcore.features.spectrum`, :mod:`umcore.features.hotfailover`.  Both ride
in the APPHDR_CHAIN, so such a message takes the send path of messages with headers (it must
fit one LBMC message, as messages with properties must).

Receivers.  Without Spectrum subscriptions, HF or ``null_channel_behavior`` "discard" a receiver
is untouched: its callback gets every delivery on the engine's fast paths.  The first
``subscribe_channel`` (or an HF receiver, or the discard option) installs :meth:`_route` as the
engine-facing callback; the application's callback stays what ``rcv.on_message`` reads and sets.
``_route`` applies, in order: the HF filter (data and requests; a copy of the message is
delivered, with ``sequence_number`` the 32-bit HF sequence number or 0 for 64-bit ones and
``original_sequence_number`` the topic's), then the Spectrum routing
(:class:`~umcore.features.spectrum.ChannelMap`).  Events (BOS, EOS, loss) always go to the
receiver's callback; an HF receiver's EOS is flagged HF_PASS_THROUGH as UM does.  A receiver
without callback queues what reaches it for ``async for`` as before; channel callbacks are
called in delivery order, so order holds across channels.  With an event queue, the
receiver's callback runs from the queue as usual; channel callbacks are called on the loop
(they are not queued).  Batched delivery (``on_messages``) is refused with channels or HF.

HF wildcard receivers (``hf_receiver`` 1 in the wildcard receiver's attributes) keep one
:class:`~umcore.features.hotfailover.HfFilter` per topic, created on the topic's first message
and dropped ``resolver_no_source_linger_timeout`` after the topic's last source ended (its
EOS), unless a source came back meanwhile (seed 10.17.3).  A topic HF receiver keeps its state
until it is closed.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any

from umcore.engine import message as m
from umcore.engine.message import Message
from umcore.engine.options import Options
from umcore.engine.receive import Subscriber
from umcore.errors import UMError
from umcore.features import hotfailover as hfc
from umcore.features.properties import MessageProperties
from umcore.features.spectrum import (
    ROUTE_DISCARD,
    ROUTE_RECEIVER,
    ChannelMap,
    channel_element,
)

__all__ = ["ReceiverExtras", "SourceChannel", "SourceExtras"]

OnMessage = Callable[[Message], object]
NO_STAMP = (0, 0)  # hr_timestamp "none"


class SourceChannel:
    """A Spectrum source channel (``lbm_src_channel_object_t``): sends on channel ``number``."""

    __slots__ = ("elements", "number", "source")

    def __init__(self, source: SourceExtras, number: int) -> None:
        self.source = source
        self.number = number
        self.elements = (channel_element(number),)

    def send(
        self, data: bytes | memoryview, flush: bool = False, properties: Any = None
    ) -> Awaitable[None]:
        """``lbm_src_send_ex`` with this channel (awaitable as :meth:`Source.send`)."""
        src: Any = self.source
        return src.send(data, flush=flush, properties=properties, app_headers=self.elements)  # type: ignore[no-any-return]

    def send_nowait(
        self, data: bytes | memoryview, flush: bool = False, properties: Any = None
    ) -> None:
        """As :meth:`send`, raising :class:`~umcore.errors.WouldBlock` instead of waiting."""
        src: Any = self.source
        src.send_nowait(data, flush, properties, self.elements)


class SourceExtras:
    """Spectrum channels and HF sends of a source (mixed into the API's Source)."""

    #: True for a source made by ``create_hf_source`` (UM's ``lbm_hf_src_create``).
    hf_source = False

    # Provided by EngineSource (send, send_nowait through ``_engine``).
    topic: str

    @property
    def _engine(self) -> Any:
        return self

    def channel(self, number: int) -> SourceChannel:
        """``lbm_src_channel_create``: an object sending on Spectrum channel ``number``
        (0..4294967295; :class:`~umcore.errors.ConfigError` otherwise)."""
        return SourceChannel(self, number)

    def _hf_elements(
        self, sqn: int, bits: int, optional: bool, channel: SourceChannel | None
    ) -> tuple[Any, ...]:
        if not self.hf_source:
            raise UMError(f"source {self.topic!r} is not an HF source (create_hf_source)")
        elem = hfc.hf_element(sqn, bits, optional=optional)
        return (elem,) if channel is None else (elem, *channel.elements)

    def send_hf(
        self,
        data: bytes | memoryview,
        sqn: int,
        bits: int = 32,
        *,
        optional: bool = False,
        flush: bool = False,
        channel: SourceChannel | None = None,
        properties: MessageProperties | None = None,
    ) -> Awaitable[None]:
        """``lbm_hf_src_send_ex``: ``data`` with HF sequence number ``sqn`` (``bits`` 32 or
        64), optionally flagged optional or on a Spectrum channel.  Sends on one source must
        not interleave HF numbers out of order (seed 10.17.1)."""
        elems = self._hf_elements(sqn, bits, optional, channel)
        return self._engine.send(data, flush=flush, properties=properties, app_headers=elems)  # type: ignore[no-any-return]

    def send_hf_nowait(
        self,
        data: bytes | memoryview,
        sqn: int,
        bits: int = 32,
        *,
        optional: bool = False,
        flush: bool = False,
        channel: SourceChannel | None = None,
    ) -> None:
        """:meth:`send_hf` raising :class:`~umcore.errors.WouldBlock` instead of waiting."""
        self._engine.send_nowait(data, flush, None, self._hf_elements(sqn, bits, optional, channel))

    def hf_send_rcv_reset(self, sqn: int = 0, bits: int = 32) -> Awaitable[None]:
        """``lbm_hf_src_send_rcv_reset``: HF receivers forget the HF sequence numbers seen
        and deliver ``LBM_MSG_HF_RESET``; use only where sources and receivers cannot be
        re-created (seed 10.17.1).  The reset travels as an empty message (non-HF receivers
        of the topic see an empty DATA message)."""
        if not self.hf_source:
            raise UMError(f"source {self.topic!r} is not an HF source (create_hf_source)")
        elem = hfc.hf_element(sqn, bits, reset=True)
        return self._engine.send(b"", flush=True, properties=None, app_headers=(elem,))  # type: ignore[no-any-return]


class ReceiverExtras:
    """Spectrum subscriptions and the HF filter of a receiver (mixed into the API's Receiver;
    see the module docstring)."""

    # Provided by Subscriber.
    topic: str
    pattern: Any
    options: Options | None
    ordered_delivery: int
    closed: bool
    context: Any
    _cb: OnMessage | None

    def _extras_init(self) -> None:
        if "_routing" in self.__dict__:
            return
        #: True while :meth:`_route` is the engine-facing callback.
        self._routing = False
        self._app_cb: OnMessage | None = None
        self._channels: ChannelMap | None = None
        #: HF: topic -> its filter (None: not an HF receiver).
        self._hf: dict[str, hfc.HfFilter] | None = None
        self._hf_sources: dict[str, set[str]] = {}
        self._hf_linger: dict[str, asyncio.TimerHandle] = {}
        self._hf_options: tuple[bool, bool, bool] = (True, False, True)
        self._hf_linger_s = 1.0
        #: Messages dropped: HF duplicates and optional ones, Spectrum discards.
        self.hf_dropped = 0
        self.channel_discarded = 0
        #: ``transport_lbtrm_receiver_timestamp`` of the context: data messages get
        #: ``hr_timestamp`` from the LBT-RM datagram being handled (umcore.aio.rxstamp).
        self._stamps = False

    # ------------------------------------------------------------ the callback property
    @property
    def on_message(self) -> OnMessage | None:
        """The application's callback (None: deliveries queue for ``async for``)."""
        self._extras_init()
        return self._app_cb if self._routing else self._cb

    @on_message.setter
    def on_message(self, cb: OnMessage | None) -> None:
        self._extras_init()
        if self._routing and not self.closed:
            self._app_cb = cb
            return
        self._routing = False
        _set_engine_cb(self, cb)

    def _start_routing(self) -> None:
        self._extras_init()
        if self._routing:
            return
        if getattr(self, "on_messages", None) is not None:
            raise UMError(
                "Spectrum channels and Hot Failover are not available with on_messages "
                "(batched delivery): use on_message"
            )
        self._app_cb = self._cb
        self._routing = True
        _set_engine_cb(self, self._route)

    # ------------------------------------------------------------ Spectrum
    def _channel_map(self) -> ChannelMap:
        self._extras_init()
        if self._channels is None:
            o = self.options
            if o is None:  # a wildcard receiver: the receiver-scope defaults for its pattern
                o = Options("receiver", None, self.topic)
            self._channels = ChannelMap(
                o.get("null_channel_behavior"), o.get("unrecognized_channel_behavior")
            )
        return self._channels

    def apply_channel_options(self) -> None:
        """At creation: ``null_channel_behavior`` "discard" routes even without subscriptions;
        so does a context with ``transport_lbtrm_receiver_timestamp`` 1 (hr_timestamp)."""
        if self._channel_map().active:
            self._start_routing()
        if bool(self.context.options.get("transport_lbtrm_receiver_timestamp")):
            self._stamps = True
            self._start_routing()

    def subscribe_channel(self, channel: int, on_message: OnMessage | None = None) -> None:
        """``lbm_rcv_subscribe_channel``: data on ``channel`` go to ``on_message`` (None: this
        receiver's own callback).  Events never go to channel callbacks."""
        if self.closed:
            raise UMError(f"receiver for {self.topic!r} is closed")
        self._channel_map().subscribe(channel, on_message)
        self._start_routing()

    def unsubscribe_channel(self, channel: int) -> None:
        """``lbm_rcv_unsubscribe_channel``; UMError when ``channel`` was not subscribed.  Later
        messages on it follow ``unrecognized_channel_behavior`` (when other subscriptions
        remain) or reach the receiver's callback (none left)."""
        if not self._channel_map().unsubscribe(channel):
            raise UMError(f"channel {channel} is not subscribed")

    @property
    def channels(self) -> tuple[int, ...]:
        """The subscribed Spectrum channels."""
        return tuple(self._channel_map().subscriptions)

    # ------------------------------------------------------------ Hot Failover
    def enable_hot_failover(self, options: Options) -> None:
        """Make this an HF receiver (``ctx.create_hf_receiver`` / ``hf_receiver`` 1 on a
        wildcard receiver) with ``options``' hf_* settings."""
        self._extras_init()
        ordered = int(options.get("ordered_delivery")) if options.scope == "receiver" else (
            self.ordered_delivery
        )  # fmt: skip
        self._hf_options = (
            ordered != 0 and ordered != -1,
            bool(options.get("hf_duplicate_delivery")) if options.scope == "receiver" else False,
            bool(options.get("hf_optional_messages")) if options.scope == "receiver" else True,
        )
        if options.scope == "wildcard_receiver":
            self._hf_linger_s = options.seconds("resolver_no_source_linger_timeout")
            ro = Options("receiver", None, self.topic)
            self._hf_options = (
                self._hf_options[0],
                bool(ro.get("hf_duplicate_delivery")),
                bool(ro.get("hf_optional_messages")),
            )
        self._hf = {}
        self._start_routing()

    @property
    def hot_failover(self) -> bool:
        self._extras_init()
        return self._hf is not None

    def hf_filter(self, topic: str | None = None) -> hfc.HfFilter | None:
        """The HF filter of ``topic`` (default: this receiver's topic), or None."""
        self._extras_init()
        return None if self._hf is None else self._hf.get(topic or self.topic)

    def _hf_pass(self, msg: Message) -> Message | None:
        hf = self._hf
        assert hf is not None
        info = msg.hf_info
        out = _copy(msg)  # shared with other receivers, or a recycled fast-path message
        if info is None:
            out.flags |= m.MSG_FLAG_HF_PASS_THROUGH
            return out
        f = hf.get(msg.topic)
        if f is None:
            ordered, dup, optional = self._hf_options
            f = hf[msg.topic] = hfc.HfFilter(
                ordered=ordered, duplicate_delivery=dup, optional=optional
            )
        verdict = f.receive(info)
        if verdict == hfc.DROP:
            self.hf_dropped += 1
            return None
        out.original_sequence_number = msg.sequence_number
        out.sequence_number = info.sqn if info.bits == 32 else 0
        if verdict == hfc.DELIVER_DUPLICATE:
            out.flags |= m.MSG_FLAG_HF_DUPLICATE
        elif verdict == hfc.RESET:
            out.type = m.MSG_HF_RESET
        return out

    def _hf_event(self, msg: Message) -> Message:
        t = msg.type
        topic = msg.topic
        if t == m.MSG_BOS:
            self._hf_sources.setdefault(topic, set()).add(msg.source)
            handle = self._hf_linger.pop(topic, None)
            if handle is not None:
                handle.cancel()
            return msg
        if t != m.MSG_EOS:
            return msg
        out = _copy(msg)
        out.flags |= m.MSG_FLAG_HF_PASS_THROUGH
        live = self._hf_sources.get(topic)
        if live is not None:
            live.discard(msg.source)
            if not live and self.pattern is not None and topic not in self._hf_linger:
                # HF wildcard receiver: the topic's state goes after the linger timeout.
                self._hf_linger[topic] = self.context.loop.call_later(
                    self._hf_linger_s, self._hf_forget, topic
                )
        return out

    def _hf_forget(self, topic: str) -> None:
        self._hf_linger.pop(topic, None)
        if self._hf is not None and not self._hf_sources.get(topic):
            self._hf.pop(topic, None)
            self._hf_sources.pop(topic, None)

    def cancel_hf_timers(self) -> None:
        """Closing: the HF wildcard receiver's linger timers go."""
        self._extras_init()
        for handle in self._hf_linger.values():
            handle.cancel()
        self._hf_linger.clear()

    # ------------------------------------------------------------ the router
    def _route(self, msg: Message) -> None:
        """The engine-facing callback while routing (module docstring).  Exceptions from the
        application's callbacks propagate to the engine, which counts and logs them."""
        t = msg.type
        if t == m.MSG_DATA or t == m.MSG_REQUEST:
            if self._stamps:
                lbt = self.context.lbt
                msg.hr_timestamp = NO_STAMP if lbt is None else lbt.rx_stamp.value
            if self._hf is not None:
                out = self._hf_pass(msg)
                if out is None:
                    return
                msg = out
                if msg.type == m.MSG_HF_RESET:
                    self._to_app(msg)
                    return
            chans = self._channels
            if chans is not None:
                where = chans.route(msg.channel_info)
                if where is ROUTE_DISCARD:
                    self.channel_discarded += 1
                    return
                if where is not ROUTE_RECEIVER:
                    where(msg)
                    return
        elif self._hf is not None:
            msg = self._hf_event(msg)
        self._to_app(msg)

    def _to_app(self, msg: Message) -> None:
        cb = self._app_cb
        if cb is None:
            me: Any = self
            me.enqueue(msg)
        else:
            cb(msg)


def _set_engine_cb(r: Any, cb: OnMessage | None) -> None:
    """Set the engine's (Subscriber's) callback of ``r``, bypassing the extras' property."""
    prop: property = Subscriber.__dict__["on_message"]
    assert prop.fset is not None
    prop.fset(r, cb)


def _copy(msg: Message) -> Message:
    """A copy of ``msg`` for one receiver to change (its five slots and whatever rarer fields
    it carries in its ``__dict__``): cheaper than ``copy.copy``."""
    out = Message(msg.type, msg.topic, msg.source, msg.sequence_number, msg.data)
    extra = msg.__dict__
    if extra:
        out.__dict__.update(extra)
    return out
