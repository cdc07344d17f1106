"""The engine's glue of the chapter-10 features: request port, late join, OTR, request/response, UIM/MIM.

Theory of operation
-------------------
Each :class:`~umcore.engine.context.Engine` owns one :class:`ContextFeatures`, started with it:

- the **request port** (:class:`~umcore.aio.request_port.RequestPort`) unless
  ``request_tcp_bind_request_port`` is 0 — which, as in UM, disables UIM reception, late join,
  OTR and request/response (seed L4386, L5506);
- the **late-join service** (:class:`~umcore.features.latejoin.LateJoinService`) answering
  LJI_REQ and UME_RXREQ for the context's sources with ``late_join`` 1, whose TIRs then carry
  the LATE_JOIN and EXFUNC options; each such source keeps a
  :class:`~umcore.features.retention.RetentionBuffer`;
- one :class:`~umcore.features.recovery.TopicRecovery` per joined topic source whose receiver
  wants late join (``use_late_join`` 1 and the source offers it) or OTR (``use_otr`` 1),
  driven by one timer;
- the **request table** (:class:`~umcore.features.request.RequestTable`) for
  :meth:`~umcore.api.context.Source.send_request`, :meth:`~umcore.api.immediate.FeatureAPI.send_uim_request` and
  :meth:`~umcore.api.immediate.FeatureAPI.send_mim_request`;
- **MIM**: a sending socket (to ``mim_outgoing_address``) and, when ``mim_incoming_address`` is
  set (default 0.0.0.0 = off), a receiving one.

Immediate messages reach, in order of preference: the context's receivers of their topic
(wildcard ones included), else ``ctx.immediate_topic_message_callback``; topicless ones go to
``ctx.immediate_message_callback``.  These callables play the role of UM's
``immediate_message_topic_receiver_function`` / ``immediate_message_receiver_function`` options.
MIM loss goes to ``ctx.mim_loss_callback(count)`` (``mim_unrecoverable_loss_function``).
"""

from __future__ import annotations

import asyncio
import logging
import os
import weakref
from collections.abc import Callable, Iterable, Sequence
from typing import Any, Protocol

from umcore.aio.multicast import MulticastSender, open_multicast_socket
from umcore.aio.request_port import RequestPort
from umcore.aio.timer import CoreTimer
from umcore.aio.tls import Security
from umcore.aio.udp import DatagramEndpoint
from umcore.engine import message as m
from umcore.engine.dro import uim_source
from umcore.engine.message import DeliveredMessage, Message
from umcore.engine.options import Options
from umcore.engine.persist import (
    ContextPersistence,
    SourcePersistence,
    persistent_tir,
    require_port,
)
from umcore.engine.receive import Fanout, Subscriber
from umcore.engine.source import EngineSource
from umcore.errors import LocalProtocolError, UMError
from umcore.features import immediate as im
from umcore.features.hotfailover import hf_info
from umcore.features.latejoin import LateJoinConfig, LateJoinService, parse_otid, tir_options
from umcore.features.otr import OtrConfig, otr_enabled
from umcore.features.properties import AppHeader, MessageProperties, decode_extras, encode_extras
from umcore.features.recovery import DELIVER_BURST, DELIVER_DATA, TopicRecovery
from umcore.features.request import RequestTable, ResponseAddress
from umcore.features.retention import RetentionBuffer
from umcore.features.spectrum import channel_of
from umcore.wire import lbmc, lbmr_options

__all__ = ["ContextFeatures", "Request", "Response"]

log = logging.getLogger("umcore.engine.features")
# Request-port traffic a DRO portal's ``uim_interceptor`` may take (umcore.engine.dro 4, 5):
# UIMs, requests and responses, and late join / OTR, which a DRO forwards to the origin
# (umcore.dro.recovery) instead of answering, and the rest (persistence control: receiver <->
# Store traffic a DRO relays, umcore.dro.storepath).
_FORWARDABLE = frozenset({
    im.KIND_UIM, im.KIND_REQUEST, im.KIND_RESPONSE,
    im.KIND_LJI_REQ, im.KIND_RXREQ, im.KIND_LJ_INFO, im.KIND_RETRANS, im.KIND_OTHER,
})  # fmt: skip

OnResponse = Callable[[Message], object]
OnImmediate = Callable[[Message], object]


class FeatureHost(Protocol):
    """What the features need of their context (the engine)."""

    @property
    def loop(self) -> asyncio.AbstractEventLoop: ...

    @property
    def options(self) -> Options: ...

    @property
    def advertised_ip(self) -> str: ...

    @property
    def security(self) -> Security: ...

    @property
    def immediate_message_callback(self) -> OnImmediate | None: ...

    @property
    def immediate_topic_message_callback(self) -> OnImmediate | None: ...

    @property
    def mim_loss_callback(self) -> Callable[[int], object] | None: ...

    @property
    def uim_interceptor(self) -> Callable[[lbmc.LBMCMessage, str, str], bool] | None: ...

    def receivers_of(self, topic: str) -> list[Subscriber]: ...

    def resolve_context_name(self, name: str, on_resolved: Callable[..., object]) -> Any: ...


class Response:
    """What a REQUEST message carries (``msg.response``): send any number of responses; the
    UIM connection to the requester is held until :meth:`close` (or garbage collection)."""

    def __init__(self, feat: ContextFeatures, addr: ResponseAddress) -> None:
        self._feat = feat
        self.address = addr
        port = feat.port
        assert port is not None
        port.hold(addr.dest)
        self._finalizer = weakref.finalize(self, port.release, addr.dest)

    def send(
        self,
        data: bytes,
        *,
        properties: MessageProperties | None = None,
        app_headers: Sequence[AppHeader] = (),
    ) -> None:
        """``lbm_send_response``: queue one response (UIMs may be lost; seed L5454)."""
        if not self._finalizer.alive:
            raise UMError("response object is closed")
        port = self._feat.port
        assert port is not None
        extra, tail = encode_extras(properties, app_headers)
        stream, sqn = port.next_stream(self.address.dest)
        port.send(
            self.address.dest,
            im.encode_response(
                self.address.qidx, bytes(data) + tail, ctxinst=self._feat.ctxinst,
                stream_id=stream, sqn=sqn, extra=extra,
            ),
        )  # fmt: skip

    def close(self) -> None:
        """Done responding: the connection's deletion timer may start."""
        self._finalizer()

    def serialize(self) -> bytes:
        return self.address.serialize()


class Request:
    """A request sent by this context; responses reach ``on_response`` until :meth:`close`."""

    def __init__(self, feat: ContextFeatures, qidx: int) -> None:
        self._feat = feat
        self.qidx = qidx

    @property
    def responses(self) -> int:
        return self._feat.requests.responses(self.qidx)

    def close(self) -> None:
        """``lbm_request_delete``: later responses are dropped."""
        self._feat.requests.close(self.qidx)


class _SourceExt:
    __slots__ = ("persist", "retention", "transport_idx")

    def __init__(
        self,
        retention: RetentionBuffer | None,
        transport_idx: int,
        persist: SourcePersistence | None = None,
    ) -> None:
        self.retention = retention
        self.transport_idx = transport_idx
        #: The persistence glue of a persistent source (umcore.engine.persist), else None.
        self.persist = persist


class ContextFeatures:
    """Per-context state of the chapter-10 features (see the module docstring)."""

    def __init__(self, ctx: FeatureHost) -> None:
        self.ctx = ctx
        self._loop = ctx.loop
        self.ctxinst = os.urandom(8)
        self.port: RequestPort | None = None
        self.ip = ctx.advertised_ip
        self.service: LateJoinService | None = None
        self.requests = RequestTable()
        self._transport_idx: dict[int, int] = {}  # id(source session) -> transport index
        self._by_idx: dict[int, TopicRecovery] = {}
        self._by_key: dict[tuple[object, ...], tuple[TopicRecovery, Fanout]] = {}
        self._fanouts: dict[int, Fanout] = {}
        self._next_request_idx = 1
        self._timer = CoreTimer(self._loop, self._on_timer)
        self._mim_tx: MulticastSender | None = None
        self._mim_dest = ("224.10.10.21", 14401)
        self._mim_sender: im.MimSender | None = None
        self._mim_rx: DatagramEndpoint | None = None
        self._mim_core = im.MimReceiver()
        self.dropped_unknown = 0
        #: Source string -> (its request address, fan-outs holding it): "SOURCE:" UIMs.
        self._source_addresses: dict[str, tuple[tuple[str, int] | None, int]] = {}
        self._learned: set[int] = set()  # id() of the fan-outs counted there
        #: Persistent sources and receivers (umcore.engine.persist).
        self.persist = ContextPersistence(self)

    # ------------------------------------------------------------------ PersistHost
    @property
    def loop(self) -> asyncio.AbstractEventLoop:
        return self._loop

    @property
    def context_options(self) -> Options:
        return self.ctx.options

    def request_send(self, dest: tuple[str, int], data: bytes) -> None:
        self.require_port().send(dest, data)

    def resolve_context_name(self, name: str, on_resolved: Callable[..., object]) -> Any:
        return self.ctx.resolve_context_name(name, on_resolved)

    # ------------------------------------------------------------------ lifetime
    async def start(self) -> None:
        o = self.ctx.options
        default_if = o.interface("default_interface")
        port: RequestPort | None = None
        if bool(o.get("request_tcp_bind_request_port")):
            port = RequestPort(
                self._on_message,
                ctxinst=self.ctxinst,
                on_frame=self._on_frame,
                deletion_timeout=o.seconds("response_tcp_deletion_timeout"),
                max_buffer=int(o.get("response_session_maximum_buffer")),
                nodelay=bool(o.get("response_tcp_nodelay")),
                response_interface=o.interface("response_tcp_interface"),
                security=self.ctx.security,
            )
            iface = o.interface("request_tcp_interface") or default_if
            fixed = int(o.get("request_tcp_port"))
            low = fixed or int(o.get("request_tcp_port_low"))
            high = fixed or int(o.get("request_tcp_port_high"))
            try:
                await port.start(
                    iface or "0.0.0.0", low, high, int(o.get("request_tcp_listen_backlog"))
                )
            except UMError as exc:
                # UM fails the context here; we go on without the request-port features, which
                # keeps many short-lived contexts on one host (tests, tools) usable.  Deviation.
                log.warning("no request port (%s): UIM reception, late join, OTR and "
                            "request/response are disabled for this context", exc)  # fmt: skip
                await port.close()
                port = None
        if port is not None:
            self.port = port
            self.ip = o.interface("request_tcp_interface") or default_if or (self.ctx.advertised_ip)
            self.service = LateJoinService(self.ip, port.port)
        group = str(o.get("mim_outgoing_address"))
        self._mim_dest = (group, int(o.get("mim_outgoing_destination_port")))
        incoming = str(o.get("mim_incoming_address"))
        if incoming not in ("", "0.0.0.0", "None"):
            sock = open_multicast_socket(
                incoming,
                int(o.get("mim_incoming_destination_port")),
                default_if or self.ctx.advertised_ip,
            )
            self._mim_rx = DatagramEndpoint(self._loop, sock, self._on_mim)

    async def close(self) -> None:
        self._timer.cancel()
        self.persist.close()
        if self._mim_rx is not None:
            self._mim_rx.close()
        if self._mim_tx is not None:
            self._mim_tx.close()
        if self.port is not None:
            await self.port.close()

    @property
    def request_address(self) -> str | None:
        """``TCP:ip:port`` of the request port (UM's "Immediate messaging target")."""
        return None if self.port is None else f"TCP:{self.ip}:{self.port.port}"

    def require_port(self) -> RequestPort:
        if self.port is None:
            raise UMError("request_tcp_bind_request_port is 0: no request port")
        return self.port

    def request_idx(self) -> int:
        q = self._next_request_idx
        self._next_request_idx = (q + 1) & 0xFFFFFFFF or 1
        return q

    # ------------------------------------------------------------------ sources
    def check_source(self, topic: str, opts: Options) -> None:
        """Before a source is created: a persistent one's settings, the errors UM gives at
        creation (ConfigError), so that a refused source leaves nothing behind."""
        if self.persist.wanted(opts):
            require_port(self.port, topic)
            self.persist.check_source(opts)

    def source_created(self, src: EngineSource, opts: Options) -> tuple[Any, ...]:
        """Set up late join for a new source; returns its TIR options."""
        key = id(src.session)
        tix = self._transport_idx.setdefault(key, len(self._transport_idx))
        persistent = self.persist.wanted(opts)
        if persistent:
            require_port(self.port, src.topic)
            if not bool(opts.get("late_join")):
                log.info('Late Join not set, but UME store specified. Setting Late Join. '
                         '(source "%s")', src.topic)  # fmt: skip
        elif not bool(opts.get("late_join")) or self.service is None or self.port is None:
            src.set_extension(_SourceExt(None, tix))
            if self.port is None:
                return ()
            # The request port, so that receivers can send to this source ("SOURCE:" UIMs).
            return (lbmr_options.ExFuncOption(self.port.port, self.ip, 0),)
        assert self.service is not None and self.port is not None
        rb = RetentionBuffer(
            int(opts.get("retransmit_retention_size_threshold")),
            int(opts.get("retransmit_retention_size_limit")),
            opts.seconds("retransmit_retention_age_threshold"),
            hold_unreleased=persistent,
        )
        if rb.defaults_retain_one and not persistent:
            log.info('NOTICE: Source "%s" has no retention settings (1 message retained max)',
                     src.topic)  # fmt: skip
        self.service.add(tix, src.tidx, src.topic, rb, src.next_sequence_number)
        options = tir_options(self.ip, self.port.port, tix, None)
        if not persistent:
            src.set_extension(_SourceExt(rb, tix))
            return options
        ext = _SourceExt(rb, tix)
        src.set_extension(ext)
        ext.persist = self.persist.source_created(src, opts, rb, tix, self.port.port)
        return (persistent_tir(self.ip, self.port.port, tix), *options)

    def source_closed(self, src: EngineSource) -> None:
        ext = src.ext
        if ext is not None and ext.retention is not None and self.service is not None:
            self.service.remove(ext.transport_idx, src.tidx)
        if ext is not None and ext.persist is not None:
            self.persist.source_closed(ext.persist)

    def source_send(
        self,
        src: EngineSource,
        data: bytes | memoryview,
        flush: bool,
        properties: MessageProperties | None,
        app_headers: Sequence[AppHeader],
        request: lbmc.Request | None = None,
    ) -> bytes | None:
        """Send through the source's session with extra headers and/or retention."""
        core, tidx = src.core, src.tidx
        now = self._loop.time()
        ext = src.ext
        rb = ext.retention if ext is not None else None
        persist = ext.persist if ext is not None else None
        if properties is None and not app_headers and request is None:
            # No extra headers (the data path of a retaining or persistent source).
            first = core.next_sequence_number(tidx)
            out = core.send(tidx, data, now, flush)
            n = len(data)
            if n <= core.max_payload:  # one message, one sequence number
                if rb is not None:
                    rb.add(first, data if type(data) is bytes else bytes(data), now)
                if persist is not None and persist.core.message_sent(first, first, n, now):
                    persist.flush()  # (SourcePersistence.sent, one call less per message)
                return out
            if rb is not None:  # one entry per UM fragment, as sent (batching.BatchingSource)
                view = memoryview(data)
                for i, off in enumerate(range(0, n, core.max_payload)):
                    piece = bytes(view[off : off + core.max_payload])
                    rb.add((first + i) & 0xFFFFFFFF, piece, now,
                           (lbmc.Frag(first, off, n),))  # fmt: skip
            if persist is not None:
                last = (core.next_sequence_number(tidx) - 1) & 0xFFFFFFFF
                persist.sent(first, last, n, now)
            return out
        headers, tail = encode_extras(properties, app_headers)
        if request is not None:
            headers.append(request)
        payload = bytes(data) + tail
        overhead = sum(2 + len(h.body_bytes()) for h in headers)
        if len(payload) + overhead > core.max_payload:
            raise LocalProtocolError(
                "a message with properties, application headers or a request header must fit "
                f"one LBMC message ({core.max_payload - overhead} bytes here): UM fragmentation "
                "of such messages is not implemented"
            )
        # The batching source has no header-carrying send in a batch: whatever is batched goes
        # first, then this message on its own, taking the topic's next sequence number.
        sqn, msg = core.send_with_headers(tidx, headers, payload, now, flush)
        if rb is not None:
            rb.add(sqn, payload, now, tuple(headers))
        if persist is not None:
            persist.sent(sqn, sqn, len(payload), now)
        return msg

    # ------------------------------------------------------------------ receivers
    def fanout_created(
        self, fan: Fanout, options: tuple[Any, ...], ropts: Options, receiver: Any = None
    ) -> None:
        """A joined topic source: attach late join / OTR recovery when configured, and the
        persistence glue when the source is persistent (its TIR's UME option) and the receiver
        uses the Store (``ume_use_store``)."""
        self._learn_source_address(fan, options)
        if self.port is None:
            return
        ume = self.persist.receiver_wanted(options, ropts)
        lj_opt = None
        for opt in options:
            if type(opt) is lbmr_options.LateJoinOption:
                lj_opt = opt
        if lj_opt is None:
            return  # the source offers neither late join nor OTR (both need late_join 1)
        use_lj = bool(ropts.get("use_late_join"))
        use_otr = otr_enabled(int(ropts.get("use_otr")), persistent=ume is not None)
        if ume is not None and not use_lj:
            ume = None  # use_late_join 0 also disables persistent recovery (UM)
        if not (use_lj or use_otr):
            return
        idx = self.request_idx()
        lj_cfg = LateJoinConfig.from_options(ropts) if use_lj else None
        if ume is not None and lj_cfg is not None:
            # The receiver's machine applies retransmit_request_maximum to the Stores' range.
            lj_cfg.request_maximum = 0
        rec = TopicRecovery(
            transport_idx=lj_opt.transport_idx,
            topic_idx=fan.dc.tidx,
            request_idx=idx,
            reply_to=(self.ip, self.port.port),
            late_join=lj_cfg,
            otr=OtrConfig.from_options(ropts) if use_otr else None,
            max_burst_loss=fan.dc.max_burst_loss,
        )
        fan.set_recovery(rec)
        fan.request_dest = (str(lj_opt.src_ip_addr), lj_opt.src_tcp_port)
        self._by_idx[idx] = rec
        key = (fan.request_dest[0], fan.request_dest[1], lj_opt.transport_idx, fan.dc.tidx)
        self._by_key[key] = (rec, fan)
        self._fanouts[idx] = fan
        if ume is not None:
            # A Store's retransmissions name the originating source (OTID: the request port and
            # transport index of its UME option) and the topic; behind a DRO that is not the
            # proxy source's topic index (umcore.dro.persist), so the topic keys them too.
            ukey = (str(ume.src_tcp_addr), int(ume.src_tcp_port), ume.transport_idx, fan.topic)
            self._by_key[ukey] = (rec, fan)
            callbacks = (
                getattr(receiver, "on_registration", None),
                getattr(receiver, "on_recovery_sequence", None),
            )
            fan.persist = self.persist.fanout_created(
                fan, ume, ropts, rec, (self.ip, self.port.port), callbacks
            )
        elif use_lj:
            rec.start_late_join(self._loop.time())
        self._flush(fan)

    def fanout_joined(self, fan: Fanout, options: tuple[Any, ...]) -> None:
        """A joined topic source of a wildcard receiver (no late join / OTR / persistence
        there): only its request port is learnt."""
        self._learn_source_address(fan, options)

    def _learn_source_address(self, fan: Fanout, options: tuple[Any, ...]) -> None:
        """Sending to sources (seed 10.15): a joined source's request port, from its TIR's
        EXFUNC (or late-join) option, kept while a fan-out of that source string exists."""
        for opt in options:
            if type(opt) in (lbmr_options.ExFuncOption, lbmr_options.LateJoinOption):
                port = int(opt.src_tcp_port)
                if port:
                    n = self._source_addresses.get(fan.source, (None, 0))[1]
                    self._source_addresses[fan.source] = ((str(opt.src_ip_addr), port), n + 1)
                    self._learned.add(id(fan))
                return

    def source_address(self, source: str) -> tuple[str, int]:
        """The request port of a joined source named by its source string (an optional
        trailing ``[topic index]`` ignored): where ``"SOURCE:"`` UIMs go.  UMError when no
        joined source of that string advertised one."""
        key = source.split("[", 1)[0]
        hit = self._source_addresses.get(key)
        if hit is None or hit[0] is None:
            raise UMError(
                f"unknown source {source!r}: a UIM to SOURCE: needs a source this context "
                "receives from (its topic resolution gave the source's request port)"
            )
        return hit[0]

    def fanout_removed(self, fan: Fanout) -> None:
        hit = self._source_addresses.get(fan.source)
        if id(fan) in self._learned:
            self._learned.discard(id(fan))
        else:
            hit = None
        if hit is not None:
            if hit[1] <= 1:
                del self._source_addresses[fan.source]
            else:
                self._source_addresses[fan.source] = (hit[0], hit[1] - 1)
        if fan.persist is not None:
            self.persist.fanout_removed(fan.persist)
            fan.persist = None
        rec = fan.recovery
        if rec is None:
            return
        self._by_idx.pop(rec.request_idx, None)
        self._fanouts.pop(rec.request_idx, None)
        for k, (r, _f) in list(self._by_key.items()):
            if r is rec:
                del self._by_key[k]
        fan.set_recovery(None)

    def recovery_changed(self, fan: Fanout) -> None:
        """``fan``'s recovery was driven from outside (the persistence glue started it with the
        Stores' range, or abandoned it): its requests go out and its timer is re-armed, else
        RXREQs nobody answers are never retried nor declared lost."""
        self._flush(fan)

    def _flush(self, fan: Fanout) -> None:
        rec = fan.recovery
        if rec is None or self.port is None:
            return
        for req in rec.take_requests():
            try:
                self.port.send(fan.request_dest, req)
            except UMError as exc:
                log.info("late join/OTR request to %s not sent: %s", fan.request_dest, exc)
        self._arm()

    def _arm(self) -> None:
        best: float | None = None
        for rec in self._by_idx.values():
            t = rec.next_timer()
            if t is not None and (best is None or t < best):
                best = t
        self._timer.arm(best)

    def _on_timer(self) -> None:
        now = self._loop.time()
        for idx, rec in list(self._by_idx.items()):
            t = rec.next_timer()
            if t is not None and t <= now:
                fan = self._fanouts[idx]
                self.deliver(fan, rec.handle_timer(now))
                self._flush(fan)
        self._arm()

    def live(self, fan: Fanout, sqn: int, payload: bytes, headers: tuple[Any, ...]) -> None:
        rec = fan.recovery
        assert rec is not None
        if not headers and rec.pass_live(sqn):
            # The common case (nothing to recover; no properties or app headers): the message
            # as the plain path builds it (DeliveredMessage: allocated in C), then consumed.
            msg = DeliveredMessage()
            msg.type = m.MSG_DATA
            msg.topic = fan.topic
            msg.source = fan.source
            msg.sequence_number = sqn
            msg.data = payload
            fan.deliver_data(msg)
            persist = fan.persist
            if persist is not None:
                persist.consumed(sqn)
            return
        self.deliver(fan, rec.on_live(sqn, payload, headers, self._loop.time()))
        if rec.recovering or rec.requests_pending:
            self._flush(fan)

    def live_many(self, fan: Fanout, records: Iterable[tuple[int, bytes]]) -> None:
        """A run of plain data messages (:meth:`Fanout.deliver_many`) of a fan-out with
        recovery: :meth:`live`'s common case per message without the two calls leading to it
        (``fan.deliver``, :meth:`live`); anything else through ``fan.deliver`` as before.
        A persistent receiver is told the consumption once per stretch of such messages, with
        its last one (consumption is cumulative: what the batched ACK carries is the highest),
        before anything else is delivered and at the end."""
        rec = fan.recovery
        topic, source = fan.topic, fan.source
        consumer: Any = None  # the persistence glue owed `high` as consumed
        high = 0
        for sqn, payload in records:
            if (
                fan.recovery is rec
                and rec is not None
                and type(payload) is bytes
                and not fan.dc.headers
                and rec.pass_live(sqn)
            ):
                msg = DeliveredMessage()
                msg.type = m.MSG_DATA
                msg.topic = topic
                msg.source = source
                msg.sequence_number = sqn
                msg.data = payload
                fan.deliver_data(msg)
                persist = fan.persist
                if persist is not None:
                    if persist is not consumer and consumer is not None:
                        consumer.consumed(high)
                    consumer = persist
                    high = sqn
            else:
                if consumer is not None:
                    consumer.consumed(high)
                    consumer = None
                fan.deliver(sqn, payload)
        if consumer is not None:
            consumer.consumed(high)

    def source_tail(self, fan: Fanout, sqn: int) -> None:
        """The source sent up to ``sqn`` before ``fan``'s transport session delivered anything
        (TopicRecovery.on_tail): late join / persistence may recover what it missed."""
        rec = fan.recovery
        assert rec is not None
        self.deliver(fan, rec.on_tail(sqn, self._loop.time()))
        self._flush(fan)

    def transport_loss(self, fan: Fanout, sqn: int, count: int) -> None:
        rec = fan.recovery
        assert rec is not None
        self.deliver(fan, rec.on_transport_loss(sqn, count, self._loop.time()))
        self._arm()

    def deliver(self, fan: Fanout, items: list[Any]) -> None:
        persist = fan.persist
        for kind, sqn, payload, flags, meta, count in items:
            if kind == DELIVER_DATA:
                msg = self.make_message(fan.topic, fan.source, sqn, payload,
                                        meta or (), flags)  # fmt: skip
                if msg is None:
                    continue
                fan.deliver_data(msg)
                if persist is not None:
                    persist.consumed(sqn)
            else:
                fan.deliver_loss(kind == DELIVER_BURST, sqn, count)

    def make_message(
        self,
        topic: str,
        source: str,
        sqn: int,
        payload: bytes,
        headers: tuple[Any, ...] | list[Any],
        flags: int = 0,
    ) -> Message | None:
        """A data/request message with its properties, app headers and response object."""
        try:
            data, props, app = decode_extras(headers, payload)
        except lbmc.LBMCError as exc:
            log.info("dropping a message with bad properties from %s: %s", source, exc)
            return None
        req = None
        for h in headers:
            if type(h) is lbmc.Request:
                req = h
        msg = Message(m.MSG_REQUEST if req is not None else m.MSG_DATA, topic, source, sqn, data)
        msg.flags = flags
        msg.properties = props
        msg.app_headers = app
        chain_fields(msg, headers)
        if req is not None and self.port is not None:
            msg.response = Response(self, ResponseAddress(lbmc.ip4_to_str(req.ipaddr), req.port,
                                                          req.qidx))  # fmt: skip
        return msg

    # ------------------------------------------------------------------ request port input
    def _on_frame(self, frame: bytes, peer_ip: str) -> bool:
        """The request port's fast path: a Store's stability ACK, unless a DRO portal's
        interceptor may want to forward it (then every message takes :meth:`_on_message`)."""
        if self.ctx.uim_interceptor is not None:
            return False
        return self.persist.receive_frame(frame, peer_ip)

    def _on_message(self, msg: lbmc.LBMCMessage, peer_ip: str) -> None:
        kind = im.classify(msg)
        hook = self.ctx.uim_interceptor  # a DRO portal's: what it forwards (_FORWARDABLE)
        if hook is not None and kind in _FORWARDABLE and hook(msg, peer_ip, kind):
            return
        if kind in (im.KIND_LJI_REQ, im.KIND_RXREQ):
            if self.service is not None and self.port is not None:
                for dest, data in self.service.handle(msg):
                    self.port.send(dest, data)
            return
        now = self._loop.time()
        if kind == im.KIND_LJ_INFO:
            for h in msg.find_all(lbmc.UmeLjInfo):
                rec = self._by_idx.get(h.qidx)
                if rec is None:
                    self.dropped_unknown += 1
                    continue
                fan = self._fanouts[h.qidx]
                self.deliver(fan, rec.on_lj_info(h.low_seqnum, h.high_seqnum, now))
                self._flush(fan)
            return
        if kind == im.KIND_RETRANS:
            otid = msg.find(lbmc.Otid)
            ident = parse_otid(otid.otid) if otid is not None else None
            hit = None
            if ident is not None:
                tn = msg.find(lbmc.TopicName)  # a persistent receiver's key first (above)
                if tn is not None:
                    topic = im.decode_topic(tn.topic)
                    hit = self._by_key.get((ident[0], ident[1], ident[2], topic))
                if hit is None:
                    hit = self._by_key.get((ident[0], ident[1], ident[2], msg.tidx))
            if hit is None:
                self.dropped_unknown += 1
                return
            rec, fan = hit
            extra = tuple(h for h in msg.headers if type(h) not in (lbmc.Otid, lbmc.TopicName))
            self.deliver(fan, rec.on_retransmission(msg.sqn, msg.payload, extra, now))
            self._flush(fan)
            return
        if kind == im.KIND_RESPONSE:
            qidx = im.response_index(msg)
            hit2 = self.requests.response(qidx)
            if hit2 is None:
                return
            cb, _clientd = hit2
            out = self.make_message("", f"TCP:{peer_ip}", msg.sqn, msg.payload, msg.headers)
            if out is None:
                return
            out.type = m.MSG_RESPONSE
            out.response = None
            try:
                cb(out)
            except Exception:
                log.exception("response callback failed")
            return
        if kind in (im.KIND_UIM, im.KIND_REQUEST):
            # through a DRO: TCP:domain:ip:port of the originator (umcore.engine.dro)
            self.immediate(msg, uim_source(msg, peer_ip))
        elif not self.persist.receive(msg, peer_ip):
            self.dropped_unknown += 1

    def immediate(self, msg: lbmc.LBMCMessage, source: str) -> None:
        """Deliver a UIM or MIM (see the module docstring for where it goes)."""
        tn = msg.find(lbmc.TopicName)
        topic = im.decode_topic(tn.topic) if tn is not None else None
        flags = m.MSG_FLAG_IMMEDIATE | (m.MSG_FLAG_TOPICLESS if topic is None else 0)
        out = self.make_message(topic or "", source, msg.sqn, msg.payload, msg.headers, flags)
        if out is None:
            return
        ctx = self.ctx
        if topic is not None:
            receivers = ctx.receivers_of(topic)
            if receivers:
                for r in receivers:
                    r.messages += 1
                    r.deliver(out)
                return
            cb = ctx.immediate_topic_message_callback
        else:
            cb = ctx.immediate_message_callback
        if cb is None:
            self.dropped_unknown += 1
            return
        try:
            cb(out)
        except Exception:
            log.exception("immediate message callback failed")

    # ------------------------------------------------------------------ MIM
    def _mim_socket(self) -> MulticastSender:
        if self._mim_tx is None:
            self._mim_tx = MulticastSender(self.ctx.advertised_ip)
            self._mim_sender = im.MimSender(
                int.from_bytes(os.urandom(4), "big") or 1,
                self.ctx.options.seconds("mim_src_deletion_timeout"),
            )
        return self._mim_tx

    def send_mim(self, topic: str | None, data: bytes, headers: list[lbmc.Header]) -> None:
        sender = self._mim_socket()
        assert self._mim_sender is not None
        dgram = self._mim_sender.datagram(
            topic, data, self._loop.time(),
            new_session_id=int.from_bytes(os.urandom(4), "big") or 1, extra=headers,
        )  # fmt: skip
        sender.send(dgram, self._mim_dest)

    def _on_mim(self, data: bytes | memoryview, addr: tuple[str, int]) -> None:
        msgs, lost = self._mim_core.receive(data, addr, self._loop.time())
        if lost:
            cb = self.ctx.mim_loss_callback
            if cb is not None:
                try:
                    cb(lost)
                except Exception:
                    log.exception("MIM loss callback failed")
        for msg in msgs:
            if msg.msg_type == lbmc.MSG_DATA:
                self.immediate(msg, f"LBTRM:{addr[0]}:{addr[1]}")


def chain_fields(msg: Message, headers: tuple[Any, ...] | list[Any]) -> None:
    """A received message's Spectrum channel (``msg.channel_info``) and HF fields
    (``msg.hf_sequence_number``, flags HF_32/HF_64/HF_OPTIONAL, ``msg.hf_info``) from its
    APPHDR_CHAIN (umcore.features.spectrum / hotfailover)."""
    channel = channel_of(headers)
    if channel is not None:
        msg.channel_info = channel
    hf = hf_info(headers)
    if hf is not None:
        msg.hf_info = hf
        msg.hf_sequence_number = hf.sqn
        msg.flags |= (m.MSG_FLAG_HF_32 if hf.bits == 32 else m.MSG_FLAG_HF_64) | (
            m.MSG_FLAG_HF_OPTIONAL if hf.optional else 0
        )
