"""The public asyncio client API: :class:`Context`, :class:`Source`, :class:`Receiver`.

Theory of operation
-------------------
A :class:`Context` is UM's context (seed 003 chapter 3): the asyncio loop plays the role of UM's
context thread; callbacks run on it and must not block.  This module is a facade: topic
resolution, transport sessions, the send and receive paths and the request port are the
engine's (:mod:`umcore.engine`, whose :mod:`~umcore.engine.context` module docstring is the
theory of operation), and what is here is the public surface UM applications know:

- ``await Context.create(attributes)``: the context's options (an attribute object, a mapping of
  option name to UM's string form, or None for the process configuration), topic resolution
  started; ``async with`` closes what is left in order (sources, receivers, the context).
- :meth:`Context.create_source` / :class:`Source`: ``await src.send(data)`` waits while a
  receiver is too slow (UM's blocking send); :meth:`Source.send_nowait` raises
  :class:`~umcore.errors.WouldBlock` instead and a WAKEUP event follows when sending may go on.
- :meth:`Context.create_receiver` / :meth:`Context.create_wildcard_receiver` /
  :class:`Receiver`: deliveries (data and events, as :class:`Message`) go to ``on_message``
  (the fast path), or to a bounded queue read by ``async for msg in receiver``.
- Immediate messaging and requests: :class:`~umcore.api.immediate.FeatureAPI`.
- Automatic monitoring (``monitor_interval`` above 0): :mod:`umcore.monitor.automatic`.

Deletion order follows UM (seed 003 "UM Objects", rules 5-7): sources and receivers are closed
before their context, and event queues (:mod:`umcore.api.eventqueue`) after every object using
them.  UM's C API crashes when the order is broken; pyum refuses instead: :meth:`Context.close`
with live sources or receivers raises :class:`~umcore.errors.UMError` and changes nothing.
Closing a source first sends what implicit batching holds; the seed's advice to wait a few
seconds after the last send (for retransmissions) is left to the application.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

from umcore.api.eventqueue import EventQueue
from umcore.api.hfspectrum import ReceiverExtras, SourceExtras
from umcore.api.immediate import FeatureAPI
from umcore.api.smartsource import SmartSource
from umcore.engine.context import Engine
from umcore.engine.features import Request
from umcore.engine.message import Message
from umcore.engine.options import Options
from umcore.engine.receive import MAX_RECEIVER_QUEUE, OnMessage, Subscriber
from umcore.engine.source import EngineSource, OnSourceEvent
from umcore.errors import ConfigError, UMError
from umcore.monitor.automatic import start_automatic_monitoring
from umcore.monitor.modopts import MonitorSettings
from umcore.wire import lbmc

__all__ = ["MAX_RECEIVER_QUEUE", "Context", "Receiver", "Source"]


class Source(EngineSource, SourceExtras):
    """A topic source (``lbm_src_t``); create with :meth:`Context.create_source`.

    ``send(data, flush=False, properties=None, app_headers=())`` sends one message and returns
    an awaitable (a completed one when nothing is blocked: no coroutine per message);
    ``send_nowait`` raises :class:`~umcore.errors.WouldBlock` instead of waiting.  Pass
    ``flush``, ``properties`` and ``app_headers`` by keyword (they are not keyword-only because
    CPython 3.11/3.12 do not specialise calls to functions with keyword-only parameters).
    """

    context: Context

    @property
    def persistent(self) -> bool:
        """True for a source with Stores (``ume_store`` / ``ume_store_name``)."""
        return self.gate is not None

    def _persistence(self) -> Any:
        if self.gate is None:
            raise UMError(f"source {self.topic!r} is not persistent (no ume_store)")
        return self.gate

    async def wait_registered(self, timeout: float | None = None) -> None:
        """Wait for Registration Complete (sends are refused with UMENoReg before it);
        ``asyncio.TimeoutError`` after ``timeout`` seconds."""
        await self._persistence().wait_registered(timeout)

    async def deregister(self) -> None:
        """``lbm_src_ume_deregister``: the Stores delete this source's state (events
        DEREGISTRATION_SUCCESS_EX per Store, then DEREGISTRATION_COMPLETE_EX); it may not
        send afterwards."""
        await self._persistence().deregister()

    async def send_request(
        self, data: bytes, on_response: Callable[[Message], object], *, clientd: Any = None
    ) -> Request:
        """``lbm_send_request``: a message every receiver gets as a REQUEST; responses reach
        ``on_response`` (message type RESPONSE) until the returned request is closed."""
        feat = self.context.features
        port = feat.require_port()
        if self.writer.paused:
            await self.writer.writable()
        self.check()
        qidx = feat.requests.open(on_response, clientd)
        hdr = lbmc.Request(0, 0, qidx, port.port, 0, lbmc.ip4_from_str(feat.ip))
        self.session.write(self.send_extended(data, True, None, (), hdr))
        return Request(feat, qidx)


class Receiver(ReceiverExtras, Subscriber):
    """A topic receiver (``lbm_rcv_t``); create with :meth:`Context.create_receiver`.

    With ``on_message`` every delivery calls it on the loop (the fast path); without, deliveries
    queue for ``async for msg in receiver`` / :meth:`get`.
    """

    context: Context
    #: ``ume_registration_extended_function``: (src RegID, store index, store, source) ->
    #: the RegID to request (0 = the Store assigns one).
    on_registration: Callable[..., int] | None = None
    #: ``ume_recovery_sequence_number_info_function``: gets the recovery range info and may
    #: return a new low sequence number (None = unchanged).
    on_recovery_sequence: Callable[..., int | None] | None = None

    def _persisting(self) -> list[Any]:
        return [f.persist for f in self.fanouts if f.persist is not None]

    def explicit_ack(self, msg: Message) -> None:
        """``lbm_msg_ume_send_explicit_ack``: with ``ume_explicit_ack_only`` 1, ACK ``msg`` (and
        everything before it from that source) to the Stores."""
        for p in self._persisting():
            if p.fan.source == msg.source and p.fan.topic == msg.topic:
                p.explicit_ack(msg.sequence_number)
                return
        raise UMError(f"no persistent registration for {msg.source} on {msg.topic!r}")

    async def deregister(self) -> None:
        """``lbm_rcv_ume_deregister``: deregister from every source's Stores (events
        DEREGISTRATION_SUCCESS_EX per Store, then DEREGISTRATION_COMPLETE_EX); the receiver
        still receives but no longer ACKs."""
        for p in self._persisting():
            await p.deregister()

    async def close(self) -> None:
        """Delete the receiver; no callback runs after this returns."""
        if self.closed:
            return
        self.cancel_hf_timers()
        self.context.unsubscribe(self)


class Context(Engine, FeatureAPI):
    """A UM context; create with ``await Context.create(attributes)``."""

    source_class = Source
    subscriber_class = Receiver

    def __init__(self, attributes: Any = None, *, name: str | None = None) -> None:
        super().__init__(attributes, name=name)
        self._monitor: Any = None
        self._monitor_settings: MonitorSettings | None = None
        if int(self.options.get("monitor_interval") or 0) > 0:
            # ConfigError before any I/O
            self._monitor_settings = MonitorSettings.from_options(self.options.get)

    @classmethod
    async def create(cls, attributes: Any = None, *, name: str | None = None) -> Context:
        ctx = cls(attributes, name=name)
        await ctx.start()
        if ctx._monitor_settings is not None:
            try:
                ctx._monitor = await start_automatic_monitoring(ctx, ctx._monitor_settings)
            except BaseException:
                await ctx.close()
                raise
        return ctx

    async def __aenter__(self) -> Context:
        return self

    async def __aexit__(self, *exc: object) -> None:
        for s in list(self.sources):
            await s.close()
        for rs in list(self.receivers.values()):
            for r in list(rs):
                self.unsubscribe(r)
        for w in list(self.wildcards):
            self.unsubscribe(w)
        for raws in list(self.raw_receivers.values()):
            for raw, _opts in list(raws):
                self.close_raw_receiver(raw)
        await self.close()

    @property
    def resolver_stats(self) -> Any:
        return self.resolver.stats

    @property
    def resolver_address(self) -> tuple[str, int]:
        assert self.endpoint is not None
        addr: tuple[str, int] = self.endpoint.local_address
        return addr

    async def create_source(
        self,
        topic: str,
        *,
        attributes: Any = None,
        on_event: OnSourceEvent | None = None,
        event_queue: EventQueue | None = None,
    ) -> Source:
        """A source of ``topic``; its events go to ``on_event(code, info)``, through
        ``event_queue`` when one is given."""
        self.check()
        if event_queue is not None and event_queue.closed:
            raise UMError("event queue is closed")
        src = await self.open_source(topic, Options("source", attributes, topic), on_event)
        assert isinstance(src, Source)
        if event_queue is not None:
            event_queue.attach_source(src)
        return src

    async def create_receiver(
        self,
        topic: str,
        on_message: OnMessage | None = None,
        *,
        attributes: Any = None,
        on_messages: Callable[[list[Message]], object] | None = None,
        event_queue: EventQueue | None = None,
        on_registration: Callable[..., int] | None = None,
        on_recovery_sequence: Callable[..., int | None] | None = None,
    ) -> Receiver:
        """A receiver of ``topic``.  Deliveries (data and events, as :class:`Message`) go to
        ``on_message`` one by one (the fast path), or without it to a bounded queue read by
        ``async for msg in receiver``.  ``on_messages`` (opt-in, faster still) receives lists
        of messages in order wherever the transport parsed several at once; what arrives
        alone goes to ``on_message`` if given, else to ``on_messages`` as a list of one.
        With ``event_queue`` the callbacks run from :meth:`EventQueue.dispatch` instead.
        Persistence (a source with Stores): ``on_registration`` is UM's
        ``ume_registration_extended_function``, ``on_recovery_sequence`` its
        ``ume_recovery_sequence_number_info_function``."""
        self.check()
        options = Options("receiver", attributes, topic)
        base = self._setup(on_messages, event_queue)

        def setup(r: Subscriber) -> None:
            assert isinstance(r, Receiver)
            r.on_registration = on_registration
            r.on_recovery_sequence = on_recovery_sequence
            base(r)
            r.apply_channel_options()  # null_channel_behavior "discard" (Spectrum)

        r = self.subscribe(topic, on_message, options, setup)
        assert isinstance(r, Receiver)
        return r

    async def create_wildcard_receiver(
        self,
        pattern: str,
        on_message: OnMessage | None = None,
        *,
        attributes: Any = None,
        on_messages: Callable[[list[Message]], object] | None = None,
        event_queue: EventQueue | None = None,
    ) -> Receiver:
        """A receiver of every topic matching ``pattern`` (UM's ``pattern_type`` "pcre").

        Patterns are matched with Python's :func:`re.search` (unanchored, like ``pcre_exec``).
        Differences from PCRE that matter here: no ``\\Q..\\E`` quoting, no recursion
        ``(?R)``, no ``\\K`` or callouts, and ``$`` also matches before a final newline as in
        PCRE's default.  A pattern ``re`` cannot compile raises :class:`ConfigError`.
        """
        self.check()
        try:
            regex = re.compile(pattern)
        except re.error as exc:
            raise ConfigError(
                f"cannot compile wildcard pattern: {exc}", source="API", what=pattern
            ) from None
        options = Options("wildcard_receiver", attributes, pattern)
        base = self._setup(on_messages, event_queue)

        def setup(r: Subscriber) -> None:
            assert isinstance(r, Receiver)
            base(r)
            r.apply_channel_options()
            if bool(options.get("hf_receiver")):  # HF wildcard receiver (seed 10.17.3)
                r.enable_hot_failover(options)

        r = self.subscribe_pattern(regex, on_message, options, setup)
        assert isinstance(r, Receiver)
        return r

    async def create_smart_source(
        self,
        topic: str,
        *,
        attributes: Any = None,
        on_event: OnSourceEvent | None = None,
    ) -> SmartSource:
        """UM's Smart Source (``lbm_ssrc_create``): pre-allocated buffers, no allocation per
        fixed-size message (:mod:`umcore.api.smartsource`); ``smart_src_*`` options from
        ``attributes``."""
        options = Options("source", attributes, topic)
        src = await self.create_source(topic, attributes=attributes, on_event=on_event)
        try:
            return SmartSource(src, options)
        except BaseException:
            await src.close()
            raise

    async def create_hf_source(
        self,
        topic: str,
        *,
        attributes: Any = None,
        on_event: OnSourceEvent | None = None,
        event_queue: EventQueue | None = None,
    ) -> Source:
        """``lbm_hf_src_create``: a source whose :meth:`Source.send_hf` tags messages with HF
        sequence numbers (:mod:`umcore.api.hfspectrum`)."""
        src = await self.create_source(
            topic, attributes=attributes, on_event=on_event, event_queue=event_queue
        )
        src.hf_source = True
        return src

    async def create_hf_receiver(
        self,
        topic: str,
        on_message: OnMessage | None = None,
        *,
        attributes: Any = None,
        event_queue: EventQueue | None = None,
    ) -> Receiver:
        """``lbm_hf_rcv_create``: a receiver delivering each HF sequence number once across
        the topic's HF sources (``hf_duplicate_delivery``, ``hf_optional_messages`` and
        ``ordered_delivery`` from its attributes; :mod:`umcore.api.hfspectrum`)."""
        self.check()
        options = Options("receiver", attributes, topic)
        base = self._setup(None, event_queue)

        def setup(r: Subscriber) -> None:
            assert isinstance(r, Receiver)
            r.enable_hot_failover(options)  # before any delivery (BOS may come at once)
            base(r)
            r.apply_channel_options()

        r = self.subscribe(topic, on_message, options, setup)
        assert isinstance(r, Receiver)
        return r

    @staticmethod
    def _setup(
        on_messages: Callable[[list[Message]], object] | None, event_queue: EventQueue | None
    ) -> Callable[[Subscriber], object]:
        """A new receiver's batched callback and event queue, set before its first delivery."""

        def setup(r: Subscriber) -> None:
            r.set_batched(on_messages)
            if event_queue is not None:
                event_queue.attach_receiver(r)

        return setup

    async def close(self) -> None:
        """Delete the context; its sources and receivers must be closed first (UM's rule)."""
        if self.closed:
            return
        if self.live_objects() or self.raw_receivers:
            await super().close()  # raises, naming what remains
            return
        if self._monitor is not None:
            await self._monitor.close()
            self._monitor = None
        await super().close()
