"""The engine's glue of persistence: persistent sources and receivers on a running context.

Theory of operation
-------------------
The machines are sans-IO (:mod:`umcore.persist.source`, :mod:`umcore.persist.receiver`); this
module feeds them and flushes what they return, one :class:`~umcore.aio.timer.CoreTimer` each.
:class:`ContextPersistence` is owned by the context's features (:mod:`umcore.engine.features`),
which hand it what concerns persistence:

- **a source created** with ``ume_store`` or ``ume_store_name`` entries (seed 002, "source
  registration"): it needs the request port (UM: ``request_tcp_bind_request_port`` 0 disables
  persistence), so without one its creation fails with :class:`~umcore.errors.ConfigError`.
  Late join is forced on (UM logs "Late Join not set, but UME store specified. Setting Late
  Join.") and the retention buffer holds every message until the Stores made it stable
  (:meth:`RetentionBuffer.release_through`).  The TIR carries the UME topic option (0x01: the
  request address and transport index the Stores match the session by, flags STORE, LATEJOIN,
  QCCAP) beside late join's.  A :class:`SourcePersistence` registers with the Stores (named ones
  once topic resolution resolved their context names), is the source's *send gate*
  (:attr:`EngineSource.gate`: UMENoReg before Registration Complete or after quorum is lost,
  waits while the flight size is full with the Block behaviour) and is told every send
  (:meth:`SourcePersistence.sent`).  SRIs go out on the source's own transport session.
- **request-port messages** that are not late join, OTR, UIM or responses: decoded with
  :mod:`umcore.store.compose` and given to the source or receiver they concern
  (:meth:`ContextPersistence.receive`); a Store's malformed message costs that message.  A
  Store's stability ACK (the most frequent of them: one per batch of messages made stable)
  takes a fast path first: :meth:`ContextPersistence.receive_frame` reads its fields from the
  raw frame (:func:`~umcore.store.compose.parse_stability`) and hands them to the source
  (:meth:`PersistentSource.receive_stability`); any other shape is decoded as above.
- **a joined topic source whose TIR carries the UME option**, for a receiver with
  ``ume_use_store`` 1: a :class:`ReceiverPersistence` asks the source for an SRI, registers with
  the Stores the SRI names, and, at Registration Complete, hands the recovery range to the
  fan-out's :class:`~umcore.features.recovery.TopicRecovery` (started with
  :meth:`~umcore.features.recovery.TopicRecovery.await_range` instead of an LJI request), whose
  retransmission requests it routes to the Stores (load-balanced, a retry to another Store).
  The Stores' retransmissions arrive like a late-join source's (same OTID) and are delivered
  with ``MSG_FLAG_RETRANSMIT``.  Every data message delivered is *consumed* once the callbacks
  returned (UM's implicit ACK), unless ``ume_explicit_ack_only`` (then
  :meth:`ReceiverPersistence.explicit_ack`).  SRIs reach it through the transport's
  ``control_sink``.  Its events are delivered as messages of UM's ``LBM_MSG_UME_*`` types with
  ``msg.info``.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Iterable
from typing import Any, Protocol

from umcore.aio.timer import CoreTimer
from umcore.engine import message as m
from umcore.engine.message import Message
from umcore.engine.options import Options
from umcore.errors import ConfigError, RemoteProtocolError, UMENoReg, UMError
from umcore.features.latejoin import make_otid
from umcore.features.recovery import TopicRecovery
from umcore.features.retention import RetentionBuffer
from umcore.persist.receiver import PersistentReceiver, ReceiverConfig
from umcore.persist.source import PersistentSource, SourceConfig
from umcore.store import compose
from umcore.wire import lbmc, lbmr_options

__all__ = ["ContextPersistence", "ReceiverPersistence", "SourcePersistence", "persistent_tir"]

log = logging.getLogger("umcore.engine.persist")

Address = tuple[str, int]

# The UME topic option's flags of a persistent source: it has Stores, offers late join (forced
# on with persistence) and speaks quorum/consensus.
_UME_TIR_FLAGS = (
    lbmr_options.UME_FLAG_STORE | lbmr_options.UME_FLAG_LATEJOIN | lbmr_options.UME_FLAG_QCCAP
)


class PersistHost(Protocol):
    """What the glue needs of its context (the features and the engine behind them)."""

    @property
    def loop(self) -> asyncio.AbstractEventLoop: ...

    @property
    def ip(self) -> str: ...

    @property
    def ctxinst(self) -> bytes: ...

    @property
    def context_options(self) -> Options: ...

    def request_send(self, dest: Address, data: bytes) -> None: ...

    def resolve_context_name(self, name: str, on_resolved: Callable[..., object]) -> Any: ...

    def deliver(self, fan: Any, items: list[Any]) -> None: ...

    def recovery_changed(self, fan: Any) -> None: ...


def persistent_tir(ip: str, port: int, transport_idx: int) -> lbmr_options.UMEOption:
    """The UME topic option (0x01) of a persistent source: its request address and transport
    index (what a Store matches the session by)."""
    return lbmr_options.UMEOption(
        src_tcp_port=port, src_tcp_addr=ip, transport_idx=transport_idx, flags=_UME_TIR_FLAGS
    )


def _send_all(host: PersistHost, sends: Iterable[tuple[Address, bytes]], what: str) -> None:
    """Each message to its request port; one that cannot go (the port refused it: closed, or
    too much held for that peer) is logged and left to the machine's retries."""
    for dest, data in sends:
        try:
            host.request_send(dest, data)
        except UMError as exc:
            log.info("%s to %s:%s not sent: %s", what, dest[0], dest[1], exc)


def _wake(waiters: list[asyncio.Future[None]]) -> None:
    for w in waiters:
        if not w.done():
            w.set_result(None)
    waiters.clear()


class SourcePersistence:
    """One persistent source on the context (module docstring)."""

    def __init__(
        self,
        host: PersistHost,
        src: Any,
        core: PersistentSource,
        retention: RetentionBuffer,
        transport_idx: int,
    ) -> None:
        self.host = host
        self.src = src
        self.core = core
        self.retention = retention
        self.transport_idx = transport_idx
        self.block = core.config.flight_size_behavior_block
        self.loop = host.loop
        self.timer = CoreTimer(self.loop, self._on_timer)
        self._waiters: list[asyncio.Future[None]] = []
        self._complete: list[asyncio.Future[None]] = []
        self._started = False
        self._resolutions: list[Any] = []
        self.closed = False

    def start(self, names: tuple[str, ...]) -> None:
        now = self.loop.time()
        self.core.start(now)
        for name in names:
            self._resolutions.append(self.host.resolve_context_name(name, self._resolved_cb(name)))
        self.flush()

    def _resolved_cb(self, name: str) -> Callable[..., object]:
        def resolved(row: Any) -> None:
            if self.closed:
                return
            self.core.set_store_address(
                name, (str(row.ip), int(row.port)), int(row.domain_id), self.loop.time()
            )
            self.flush()

        return resolved

    # ------------------------------------------------------------------ send gate
    def hold(self) -> bool:
        """Before a send: :class:`UMENoReg` when sends are refused; True while a Block-behaviour
        flight size is full (the caller waits in :meth:`wait`)."""
        core = self.core
        if core.clear:  # (the data path: registered, the flight not full -- one attribute)
            return False
        why = core.send_check()
        if why is not None:
            raise UMENoReg(f"source for {self.src.topic!r}: {why}")
        return self.block and core.flight_blocked

    async def wait(self) -> None:
        fut: asyncio.Future[None] = self.loop.create_future()
        self._waiters.append(fut)
        await fut

    def sent(self, first: int, last: int, nbytes: int, now: float) -> None:
        if self.core.message_sent(first, last, nbytes, now):  # flushed only when it queued
            self.flush()

    # ------------------------------------------------------------------ input
    def receive(self, comp: compose.Composition, peer_ip: str) -> bool:
        if not self.core.receive_control(comp, peer_ip, self.loop.time()):
            return False
        self.flush()
        return True

    def receive_stability(self, store_index: int, first: int, last: int, nak: bool) -> bool:
        """A stability ACK's fields (parsed by :meth:`ContextPersistence.receive_frame`)."""
        if not self.core.receive_stability(store_index, first, last, nak, self.loop.time()):
            return False
        self.flush()
        return True

    def _on_timer(self) -> None:
        self.core.handle_timer(self.loop.time())
        self.flush()

    # ------------------------------------------------------------------ output
    def flush(self) -> None:
        core = self.core
        src = self.src
        host = self.host
        _send_all(host, core.take_sends(), "persistence message")
        if not self._started and core.next_sqn is not None:
            self._started = True
            src.core.set_next_sequence_number(src.tidx, core.next_sqn)
        sris = core.take_transport()
        if sris and not src.closed:
            out = src.core.flush()
            src.session.write((out or b"") + b"".join(sris))
        for sqn, stores in core.take_retransmissions():
            self._proactive(sqn, stores)
        released = core.take_released()
        if released:
            now = self.loop.time()
            self.retention.release_through(released[-1], now)
        events = core.take_events()
        if events:
            src.events(events)
        if self._complete and core.next_sqn is not None and core.send_check() is None:
            _wake(self._complete)
        if core.take_unblocked():
            _wake(self._waiters)
            if src.wants_wakeup:
                src.wants_wakeup = False
                src.event(m.SRC_EVENT_WAKEUP, None)
        self.timer.arm(core.next_timer())

    def _proactive(self, sqn: int, stores: tuple[Address, ...]) -> None:
        """A message not stable after ``ume_message_stability_timeout``: sent again to those
        Stores as a proactive retransmission (PRORX) UIM with the source's OTID, which the
        Store matches it by."""
        got = self.retention.get(sqn)
        if got is None:
            return
        payload, extra = got
        src = self.src
        headers: list[lbmc.Header] = [
            lbmc.Otid(0, make_otid(self.host.ip, self._request_port(), self.transport_idx)),
            lbmc.TopicName(src.topic.encode() + b"\0"),
            *extra,
        ]
        data = lbmc.encode(lbmc.LBMCMessage(lbmc.MSG_PRORX, src.tidx, sqn, headers, payload))
        _send_all(self.host, ((dest, data) for dest in stores), "proactive retransmission")

    def _request_port(self) -> int:
        return int(self.core.reply_to[1])

    # ------------------------------------------------------------------ API
    async def wait_registered(self, timeout: float | None = None) -> None:
        if self.core.next_sqn is not None and self.core.send_check() is None:
            return
        fut: asyncio.Future[None] = self.loop.create_future()
        self._complete.append(fut)
        await asyncio.wait_for(fut, timeout)

    async def deregister(self) -> None:
        """Deregistration goes out; its outcome arrives as DEREGISTRATION_SUCCESS_EX/COMPLETE_EX
        events (as UM's ``lbm_src_ume_deregister`` returns before the Stores answered)."""
        self.core.deregister(self.loop.time())
        self.flush()

    def close(self) -> None:
        self.closed = True
        self.timer.cancel()
        for r in self._resolutions:
            r.cancel()
        _wake(self._waiters)
        _wake(self._complete)


class ReceiverPersistence:
    """One persistent receiver of one source (module docstring)."""

    def __init__(
        self, host: PersistHost, fan: Any, core: PersistentReceiver, rec: TopicRecovery
    ) -> None:
        self.host = host
        self.fan = fan
        self.core = core
        self.rec = rec
        self.loop = host.loop
        self.explicit = core.config.explicit_ack_only
        self.timer = CoreTimer(self.loop, self._on_timer)
        self._recovering = False
        self._abandoned = False

    def start(self) -> None:
        self.rec.await_range()
        self.core.start(self.loop.time())
        self.flush()

    # ------------------------------------------------------------------ input
    def receive_sri(self, sri: compose.Sri) -> None:
        self.core.receive_sri(sri, self.loop.time())
        self.flush()

    def receive(self, comp: compose.Composition, peer_ip: str) -> bool:
        if not self.core.receive_control(comp, peer_ip, self.loop.time()):
            return False
        self.flush()
        return True

    def route(self, sqns: list[int], retry: bool) -> None:
        """TopicRecovery's retransmission requests: to the Stores."""
        reqs = self.core.rxreq_messages(sqns, retry, self.rec.request_idx)
        _send_all(self.host, reqs, "retransmission request")

    def consumed(self, sqn: int) -> None:
        if not self.explicit and self.core.consumed(sqn, self.loop.time()):
            self._arm()  # (only when the ACK deadline moved: the data path's common case not)

    def explicit_ack(self, sqn: int) -> None:
        self.core.explicit_ack(sqn, self.loop.time())
        self.flush()

    def _on_timer(self) -> None:
        self.core.handle_timer(self.loop.time())
        self.flush()

    def _arm(self) -> None:
        self.timer.arm(self.core.next_timer())

    # ------------------------------------------------------------------ output
    def flush(self) -> None:
        core = self.core
        fan = self.fan
        _send_all(self.host, core.take_sends(), "persistence message")
        for code, info in core.take_events():
            msg = Message(code, fan.topic, fan.source)
            msg.info = info
            fan.deliver_event(msg)
        rng = core.take_recovery()
        now = self.loop.time()
        if rng is not None and not self._recovering:
            self._recovering = True
            low, high = rng
            self.host.deliver(fan, self.rec.on_lj_info(low, high, now))
            self.host.recovery_changed(fan)  # its retries and timeouts need the timer
        elif core.failed and not self._abandoned and not self._recovering:
            self._abandoned = True
            self.host.deliver(fan, self.rec.abandon())
            self.host.recovery_changed(fan)
        self._arm()

    async def deregister(self) -> None:
        self.core.deregister(self.loop.time())
        self.flush()

    def close(self) -> None:
        """The receiver is deleted: batched consumption ACKs go out now, timers stop."""
        self.core.close(self.loop.time())
        _send_all(self.host, self.core.take_sends(), "persistence message")
        self.timer.cancel()


class ContextPersistence:
    """A context's persistent sources and receivers (module docstring)."""

    def __init__(self, host: PersistHost) -> None:
        self.host = host
        self.sources: dict[tuple[int, int], SourcePersistence] = {}
        self.receivers: dict[tuple[int, int], list[ReceiverPersistence]] = {}
        #: Store messages no source or receiver of this context took, and malformed ones.
        self.unplaced = 0
        self.malformed = 0
        #: Stability ACKs read by the fast path (:meth:`receive_frame`), placed or not.
        self.fast_acks = 0

    # ------------------------------------------------------------------ sources
    @staticmethod
    def wanted(opts: Options) -> bool:
        return bool(opts.get("ume_store")) or bool(opts.get("ume_store_name"))

    def check_source(self, opts: Options) -> None:
        """A persistent source's settings (ConfigError for those UM refuses at creation)."""
        ctx_sid = int(self.host.context_options.get("ume_session_id") or 0)
        SourceConfig.from_options(opts, context_session_id=ctx_sid)

    def source_created(
        self,
        src: Any,
        opts: Options,
        retention: RetentionBuffer,
        transport_idx: int,
        request_port: int,
    ) -> SourcePersistence:
        """A persistent source: its machine, gate and registration (module docstring)."""
        host = self.host
        ctx_sid = int(host.context_options.get("ume_session_id") or 0)
        config = SourceConfig.from_options(opts, context_session_id=ctx_sid)
        loop = host.loop
        core = PersistentSource(
            config,
            topic=src.topic,
            transport_idx=transport_idx,
            topic_idx=src.tidx,
            reply_to=(host.ip, request_port),
            ctxinst=host.ctxinst,
            now=loop.time(),
        )
        sp = SourcePersistence(host, src, core, retention, transport_idx)
        self.sources[(transport_idx, src.tidx)] = sp
        src.gate = sp
        names = tuple(e.name for e in (opts.get("ume_store_name") or ()))
        sp.start(names)
        return sp

    def source_closed(self, sp: SourcePersistence) -> None:
        self.sources.pop((sp.transport_idx, sp.src.tidx), None)
        sp.close()

    # ------------------------------------------------------------------ receivers
    def receiver_wanted(self, options: tuple[Any, ...], ropts: Options) -> Any:
        """The UME option of a joined source's TIR when this receiver persists through it."""
        if not bool(ropts.get("ume_use_store")):
            return None
        for opt in options:
            if isinstance(opt, lbmr_options.UMEOption):
                return opt
        return None

    def fanout_created(
        self,
        fan: Any,
        ume: lbmr_options.UMEOption,
        ropts: Options,
        rec: TopicRecovery,
        reply_to: Address,
        callbacks: tuple[Any, Any],
    ) -> ReceiverPersistence:
        host = self.host
        ctx = host.context_options
        config = ReceiverConfig.from_options(
            ropts,
            context_session_id=int(ctx.get("ume_session_id") or 0),
            context=ctx,
        )
        on_registration, on_recovery = callbacks
        core = PersistentReceiver(
            config,
            topic=fan.topic,
            transport_idx=ume.transport_idx,
            topic_idx=fan.dc.tidx,
            source_request=(str(ume.src_tcp_addr), int(ume.src_tcp_port)),
            reply_to=reply_to,
            ctxinst=host.ctxinst,
            now=host.loop.time(),
            registration_fn=on_registration,
            recovery_fn=on_recovery,
            source=fan.source,
        )
        rp = ReceiverPersistence(host, fan, core, rec)
        rec.request_router = rp.route
        self.receivers.setdefault((ume.transport_idx, fan.dc.tidx), []).append(rp)
        session_core = fan.session.core
        if getattr(session_core, "control_sink", None) is None:
            session_core.control_sink = self._control_sink(fan.session)
        rp.start()
        return rp

    def fanout_removed(self, rp: ReceiverPersistence) -> None:
        key = (rp.core.transport_idx, rp.core.topic_idx)
        lst = self.receivers.get(key)
        if lst is not None and rp in lst:
            lst.remove(rp)
            if not lst:
                del self.receivers[key]
        rp.close()

    def _control_sink(self, session: Any) -> Callable[[lbmc.LBMCMessage], None]:
        def sink(msg: lbmc.LBMCMessage) -> None:
            try:
                comp = compose.decode(msg)
            except RemoteProtocolError as exc:
                self.malformed += 1
                log.info("dropping a malformed control message on %s: %s",
                         session.source_string, exc)  # fmt: skip
                return
            if not isinstance(comp, compose.Sri):
                return
            for fan in list(session.fanouts.values()):
                if comp.topic_idx is not None and comp.topic_idx != fan.dc.tidx:
                    continue
                rp = fan.persist
                if rp is not None:
                    rp.receive_sri(comp)

        return sink

    # ------------------------------------------------------------------ request port
    def receive_frame(self, frame: bytes, peer_ip: str) -> bool:
        """The fast path of a request-port frame, before it is decoded: a Store's stability ACK
        in the shape :func:`~umcore.store.compose.parse_stability` knows goes to its source as
        :meth:`receive` would give it (the source's events are the same), without building the
        general message and composition.  False: not one (decode it and call :meth:`receive`);
        always False on a context without persistent sources (nothing to parse for)."""
        if not self.sources:
            return False
        ack = compose.parse_stability(frame)
        if ack is None:
            return False
        self.fast_acks += 1
        transport_idx, topic_idx, first, last, store_index, nak = ack
        sp = self.sources.get((transport_idx, topic_idx))
        if sp is None or not sp.receive_stability(store_index, first, last, nak):
            self.unplaced += 1
        return True

    def receive(self, msg: lbmc.LBMCMessage, peer_ip: str) -> bool:
        """A request-port message that may be the store protocol's; False: not one."""
        try:
            comp = compose.decode(msg)
        except RemoteProtocolError as exc:
            self.malformed += 1
            log.info("dropping a malformed persistence message from %s: %s", peer_ip, exc)
            return True
        if comp is None:
            return False
        t = type(comp)
        if t is compose.RegistrationResponse:
            assert isinstance(comp, compose.RegistrationResponse)
            key = (comp.transport_idx, comp.topic_idx)
            if comp.source:
                return self._to_source(key, comp, peer_ip)
            return self._to_receivers(key, comp, peer_ip)
        if isinstance(comp, (compose.StabilityAck, compose.SriRequest)):
            return self._to_source((comp.transport_idx, comp.topic_idx), comp, peer_ip)
        if t is compose.Keepalive:
            assert isinstance(comp, compose.Keepalive)
            key = (comp.transport_idx, comp.topic_idx)
            if key in self.sources and self._to_source(key, comp, peer_ip):
                return True
            return self._to_receivers(key, comp, peer_ip)
        if t is compose.ConsumptionAck:
            assert isinstance(comp, compose.ConsumptionAck)
            for (tix, _tidx), sp in list(self.sources.items()):
                if tix == comp.transport_idx and sp.receive(comp, peer_ip):
                    return True
            self.unplaced += 1
            return True
        self.unplaced += 1
        return True

    def _to_source(self, key: tuple[int, int], comp: Any, peer_ip: str) -> bool:
        sp = self.sources.get(key)
        if sp is None or not sp.receive(comp, peer_ip):
            self.unplaced += 1
        return True

    def _to_receivers(self, key: tuple[int, int], comp: Any, peer_ip: str) -> bool:
        for rp in list(self.receivers.get(key, ())):
            if rp.receive(comp, peer_ip):
                return True
        self.unplaced += 1
        return True

    def close(self) -> None:
        for sp in list(self.sources.values()):
            sp.close()
        for lst in list(self.receivers.values()):
            for rp in lst:
                rp.close()


def require_port(port: object, topic: str) -> None:
    """Persistence needs the request port (seed 002: request_tcp_bind_request_port 0 disables
    it): a ConfigError at the source's creation otherwise."""
    if port is None:
        raise ConfigError(
            f"source {topic!r} asks for persistence (ume_store / ume_store_name) but this "
            "context has no request port (request_tcp_bind_request_port 0, or it could not "
            "bind): persistence needs it",
            source="API",
            what="request_tcp_bind_request_port",
        )
