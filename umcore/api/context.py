"""The public asyncio client API: :class:`Context`, :class:`Source`, :class:`Receiver`.

Theory of operation
-------------------
A :class:`Context` is UM's context: one per event loop task group, holding topic resolution and
the transport sessions (seed 003 chapter 3).  The asyncio loop plays the role of UM's context
thread: callbacks run on it and must not block.

- **Topic resolution.**  A :class:`~umcore.resolver.core.TopicResolver` (sans-IO) behind one UDP
  socket (:class:`~umcore.aio.udp.DatagramEndpoint`): bound to a port of
  ``resolver_unicast_port_low..high`` and talking to lbmrds when ``resolver_unicast_daemon`` is
  set, otherwise joined to the multicast group.  One :class:`~umcore.aio.timer.CoreTimer` drives
  its schedules.  With ``resolver_service`` the context also resolves through SRSes over TCP,
  and ``resolver_disable_udp_topic_resolution`` 1 removes the UDP socket altogether
  (:mod:`umcore.api.srsresolve`).
- **Sources.**  Each source is mapped round robin onto up to ``transport_tcp_maximum_ports`` TCP
  transport sessions, each a listener on a port of ``transport_tcp_port_low..high``
  (:class:`~umcore.aio.tcp.SourceListener` around a
  :class:`~umcore.transport.tcp.TcpSourceSession`); the source's TIR advertises (ip, port,
  session id, topic index).  :meth:`Source.send` awaits while a receiver's buffer is over
  ``transport_session_maximum_buffer`` (UM's blocking send); :meth:`Source.send_nowait` raises
  :class:`~umcore.errors.WouldBlock` instead and a WAKEUP event follows when it clears.
  ``send_nowait(data, flush=True)`` of a plain message on a TCP session with nothing batched
  is framed, counted and written inline (the latency path, one Python frame).  The throughput
  path is inline too: a message of the core's open run is a list append, and the message that
  starts a batch or completes one (``implicit_batching_minimum_length``) is handled in
  ``Source._send_slow`` without the core's general rules when nothing else is due
  (:mod:`umcore.transport.batching`, "Batch start" and "Batch timer").
- **Receivers.**  A TIR for a topic with receivers makes the context connect to that source's
  session once (:class:`~umcore.aio.tcp.ReceiverConnection`) and add a delivery controller for
  the topic index.  The first bytes on the session give every mapped receiver BOS; a receiver
  added to an already active session gets BOS at once; the end of the connection gives EOS
  (seed 3.4).  Data reach the receiver's callback (the fast path) or, without one, a bounded
  queue read by ``async for msg in receiver``; when that queue holds ``MAX_RECEIVER_QUEUE``
  messages the context stops reading the sessions feeding it (receiver pacing, counted in
  :attr:`Receiver.queue_pauses`) instead of growing without bound.  A read holding exactly
  one plain in-sequence data message for a topic with one callback receiver is delivered by
  the connection itself (:class:`_JoinConnection`, the latency path); anything else takes the
  session core, its delivery controllers and :class:`_Fanout`.
- **Faults.**  A peer's garbage costs that peer its connection or datagram; an exception raised
  by an application callback is logged and counted, never allowed to break a session.

Deletion order follows UM (seed 003 "UM Objects", rules 5-7): sources and receivers are closed
before their context, and event queues (:mod:`umcore.api.eventqueue`) after every object using
them.  UM's C API crashes when the order is broken; pyum refuses instead: :meth:`Context.close`
with live sources or receivers, and :meth:`EventQueue.close` with live users, raise
:class:`~umcore.errors.UMError` and change nothing.  ``async with await Context.create(...) as
ctx`` closes what is left in order (sources, receivers, then the context).  Closing a source
first sends what implicit batching holds (the seed's warning about batched messages); the
seed's advice to wait a few seconds after the last send (for retransmissions) is left to the
application.

Source events: CONNECT/DISCONNECT per receiver connection, and WAKEUP only after a
:meth:`Source.send_nowait` was refused with :class:`~umcore.errors.WouldBlock`, once the
session's buffers drained (seed 2.3: "only after an EWOULDBLOCK").  ``ordered_delivery``: see
:attr:`Receiver.ordered_delivery` (0, fragments delivered one by one, is implemented for TCP).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import random
import re
import struct
from collections import deque
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable, Mapping
from sys import getrefcount
from typing import Any

from umcore.aio.interfaces import context_interface
from umcore.aio.lbt import SourceTimer
from umcore.aio.multicast import open_multicast_socket, route_address
from umcore.aio.tcp import ReceiverConnection, SourceListener
from umcore.aio.timer import CoreTimer
from umcore.aio.udp import DatagramEndpoint
from umcore.api import message as m
from umcore.api import srsresolve, transports
from umcore.api.eventqueue import EventQueue
from umcore.api.features import ContextFeatures, FeatureAPI, Request
from umcore.api.message import DeliveredMessage, Message
from umcore.config.attributes import global_configuration
from umcore.errors import ConfigError, UMError, WouldBlock
from umcore.features.properties import AppHeader, MessageProperties, encode_extras
from umcore.resolver.core import (
    ResolverConfig,
    SourceInfo,
    TopicResolver,
    wildcard_query_timings,
)
from umcore.resolver.schedule import advertisement_timings, query_timings
from umcore.resolver.unicast import UnicastTimings
from umcore.transport.batching import MAX_SINGLES
from umcore.transport.tcp import (
    LOSS_BURST,
    DeliveryController,
    TcpReceiverSession,
    TcpSourceSession,
)
from umcore.wire import lbmc, lbmr

__all__ = ["MAX_RECEIVER_QUEUE", "Context", "Receiver", "Source"]

log = logging.getLogger("umcore.api")

# Messages a receiver without callback may hold for its async iterator before the context stops
# reading the sessions feeding it (they resume at half).  Events (BOS/EOS/loss) are always
# queued: at most a few per session, they cannot grow without bound.
MAX_RECEIVER_QUEUE = 65536
# Bound on one connect attempt to a source's TCP port.
CONNECT_TIMEOUT_S = 5.0
# Deliveries the TCP one-frame path counts in a small int before folding them into the four
# counters they stand for (_Fanout.fold): CPython caches the ints -5..256, so counting up to
# this allocates nothing.  Receiver.messages adds what is not folded yet; monitoring folds first.
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
    message nobody kept reads there (see :class:`~umcore.api.message.DeliveredMessage`)."""
    h = _Holder()
    msg = h.spare
    return getrefcount(msg)


#: What :func:`getrefcount` reads for a fan-out's spare message that no application kept.
SPARE_REFS = _spare_refs()

OnMessage = Callable[[Message], object]
# An LBMC data message's header (umcore.transport.tcp: ver/type, next header, msglen, tidx,
# sqn) as three words: the first is the msglen when version/type and next header are 0 (plain
# data).  The TCP one-message paths (Source.send_nowait, _JoinConnection) pack / check it so.
_DATA_WORDS = struct.Struct("!III")
_pack_data = _DATA_WORDS.pack
_data_head_from = _DATA_WORDS.unpack_from
_DATA_HEADER = _DATA_WORDS.size
_pack_pre = struct.Struct("!II").pack  # the first two words (msglen, tidx) of that header
OnSourceEvent = Callable[[int, object], object]
# Source._rec of a source that may not use the inline fast path: never a core's open run.
_NOT_FAST = object()


# ------------------------------------------------------------------------------ options
class _Options:
    """Typed reads of one object's effective options (:mod:`umcore.config.attributes`).

    ``attributes`` may be an attribute object of the right scope, a mapping of option name to
    UM's string form (set over the current defaults, as ``str_setopt`` would), or None (the
    process configuration: flat files, ``LBM_*`` environment variables, XML).  The process
    configuration then checks XML restrictions (a violation is a ConfigError).
    """

    __slots__ = ("attrs",)

    def __init__(self, scope: str, attributes: Any, name: str | None = None) -> None:
        cfg = global_configuration()
        if isinstance(attributes, Mapping):
            base = cfg.attributes(scope)
            for key, value in attributes.items():
                base.set(key, value if isinstance(value, str) else str(value))
            attributes = base
        self.attrs = cfg.for_object(scope, attributes, name=name)

    def get(self, name: str, default: Any = None) -> Any:
        try:
            return self.attrs.get_typed(name)
        except ConfigError:
            return default


def _interface_ip(value: Any) -> str | None:
    """An interface option's local address, or None when it names none (``0.0.0.0``): the
    caller then binds "any" and advertises the address routed towards its peers.  Device
    names, CIDR networks and host names are resolved among this host's interfaces as the
    daemons do (:func:`umcore.aio.interfaces.context_interface`); a spec matching no local
    interface is a ConfigError."""
    return context_interface(value)


def _daemons(value: Any) -> list[tuple[str, int]]:
    """``resolver_unicast_daemon`` entries (:class:`~umcore.config.values.ResolverEntry`) as
    (ip, port); their ``Iface[:SrcPort]->`` parts are :func:`_daemon_bindings`."""
    out: list[tuple[str, int]] = []
    for entry in value or ():
        address = getattr(entry, "address", None)
        port = getattr(entry, "port", None)
        if address is not None and port is not None:
            out.append((str(address), int(port)))
    return out


def _daemon_bindings(value: Any) -> dict[tuple[str, int], tuple[str | None, int | None]]:
    """For each ``resolver_unicast_daemon`` entry with an ``Iface[:SrcPort]->`` part: the
    local (address, source port) to talk to that lbmrd from (None parts: the context's
    ``resolver_unicast_interface`` / port range)."""
    out: dict[tuple[str, int], tuple[str | None, int | None]] = {}
    for entry in value or ():
        iface = getattr(entry, "interface", None)
        sport = getattr(entry, "source_port", None)
        if iface is None and sport is None:
            continue
        ip = context_interface(iface, what="resolver_unicast_daemon interface")
        out[(str(entry.address), int(entry.port))] = (ip, sport)
    return out


def _random_session_id() -> int:
    return random.SystemRandom().randrange(1, 0x1_0000_0000)


def _set_batched(r: Receiver, on_messages: Callable[[list[Message]], object] | None) -> None:
    if on_messages is None:
        return
    r.on_messages = on_messages
    if r.on_message is None:
        r.on_message = lambda msg: on_messages([msg])


# ------------------------------------------------------------------------------ sources
class _SourceSession:
    """One TCP transport session of this context: core, listener, timer and its sources."""

    def __init__(self, ctx: Context, core: TcpSourceSession, listener: SourceListener) -> None:
        self.ctx = ctx
        self.core = core
        self.listener = listener
        self.sources: list[Source] = []
        #: Hands the core the deadline that fired when the loop ran it early (SourceTimer).
        self.timer: CoreTimer = SourceTimer(ctx._loop, self._on_timer)
        listener.on_connect = self._on_connect
        listener.on_disconnect = self._on_disconnect
        listener.on_unblock = self._on_unblock

    def _on_timer(self) -> None:
        now = self.ctx._loop.time()
        timer = self.timer
        if isinstance(timer, SourceTimer) and timer.fired is not None and timer.fired > now:
            now = timer.fired  # fired early by the loop's rounding (see SourceTimer)
        out = self.core.handle_timer(now)
        if out:
            self.listener.write(out)
        self.core.timer_dirty = False
        self.timer.arm(self.core.next_timer())

    def _on_connect(self, peer: str) -> None:
        for s in self.sources:
            s._event(m.SRC_EVENT_CONNECT, peer)

    def _on_disconnect(self, peer: str) -> None:
        for s in self.sources:
            s._event(m.SRC_EVENT_DISCONNECT, peer)

    def _on_unblock(self) -> None:
        for s in self.sources:
            if s._wants_wakeup:
                s._wants_wakeup = False
                s._event(m.SRC_EVENT_WAKEUP, None)


class Source:
    """A topic source (``lbm_src_t``); create with :meth:`Context.create_source`."""

    def __init__(
        self, ctx: Context, topic: str, session: _SourceSession, on_event: OnSourceEvent | None
    ) -> None:
        self.context = ctx
        self.topic = topic
        self._session = session
        self._core = session.core
        self._listener = session.listener
        self._loop = ctx._loop
        self.tidx = self._core.add_topic(topic, self._loop.time())
        #: The core's per-topic record while :meth:`send`'s inline fast path may run (open, no
        #: retention: :attr:`_ext`), else a marker that is never the core's open run.
        self._rec: Any = self._core.topics[self.tidx]
        #: The open run's ``append`` (the core never replaces that list), bound once.
        self._push = self._core._run_pl.append
        #: A TCP session (its core and listener exactly ours): :meth:`send_nowait`'s
        #: one-message path frames and writes inline.
        self._tcp = type(self._core) is TcpSourceSession and type(self._listener) is SourceListener
        #: The core's per-topic record while that inline one-message path may run (TCP, open,
        #: no retention), else None.
        self._one: Any = self._rec if self._tcp else None
        #: That path's framing for one payload length (the last one sent): the length, the
        #: header's first two words packed, and a struct packing those, the sqn and the payload.
        self._one_n = -1
        self._one_pre = b""
        self._one_pack: Callable[..., bytes] = _pack_data
        #: Late-join retention and transport index (umcore.api.features), set by the context.
        self._ext_: Any = None
        #: True while the plain paths may run: open, no retention (:attr:`_ext`).
        self._fast = True
        self.on_event = on_event
        self._time = self._loop.time
        self._done = ctx._done
        self._wants_wakeup = False
        self.closed = False
        #: Exceptions raised by ``on_event`` (logged, counted, never propagated).
        self.callback_errors = 0
        ip = ctx.advertised_ip
        self.transport_info: lbmr.TCPInfo | lbmr.LBTRMInfo
        lbt: Any = self._listener
        if hasattr(lbt, "transport_info"):  # LBT-RU / LBT-RM (umcore.api.transports)
            self.transport_info = lbt.transport_info(ip)
            self.source_string = lbt.source_string(ip)
        else:
            self.transport_info = lbmr.TCPInfo(
                ip,
                self._listener.port,
                self._core.session_id if self._core.use_session_id else None,
            )
            self.source_string = f"TCP:{ip}:{self._listener.port}:{self._core.session_id:08x}"

    @property
    def receivers(self) -> int:
        """Receivers connected to this source's transport session."""
        return self._listener.receivers

    def _event(self, code: int, info: object) -> None:
        if self.on_event is None:
            return
        try:
            self.on_event(code, info)
        except Exception:
            self.callback_errors += 1
            log.exception("source event callback failed (topic %r)", self.topic)

    def _check(self) -> None:
        if self.closed:
            raise UMError(f"source for {self.topic!r} is closed")

    def _extended(
        self,
        data: bytes | memoryview,
        flush: bool,
        properties: MessageProperties | None,
        app_headers: Any,
        request: lbmc.Request | None = None,
    ) -> bytes | None:
        headers, tail = encode_extras(properties, app_headers)
        if request is not None:
            headers.append(request)
        return self.context._features.source_send(self, data, flush, headers, tail)

    @property
    def _ext(self) -> Any:
        """Late-join retention and transport index (:mod:`umcore.api.features`)."""
        return self._ext_

    @_ext.setter
    def _ext(self, ext: Any) -> None:
        self._ext_ = ext
        self._set_fast(not self.closed and (ext is None or ext.retention is None))

    def _set_fast(self, fast: bool) -> None:
        self._fast = fast
        core = self._core
        rec = core.topics[self.tidx]
        if not fast and rec is not None and core._run is rec:
            core.end_run()  # its messages are framed; the next ones take the general path
        self._rec = rec if fast else _NOT_FAST
        self._one = rec if fast and self._tcp else None

    def _plain(self) -> bool:
        ext = self._ext
        return ext is None or ext.retention is None

    def send(
        self,
        data: bytes | memoryview,
        flush: bool = False,
        properties: MessageProperties | None = None,
        app_headers: tuple[AppHeader, ...] | list[AppHeader] = (),
    ) -> Awaitable[None]:
        """Send one message; ``await src.send(data)`` waits while a receiver is too slow (UM's
        blocking send).  ``properties`` / ``app_headers``: UM's send-ex PROPERTIES / APPHDR_CHAIN.
        Pass ``flush``, ``properties`` and ``app_headers`` by keyword (they are not keyword-only
        because CPython 3.11/3.12 do not specialise calls to functions with keyword-only
        parameters: ~20 ns per message).

        When nothing is blocked the message is framed (or sent) before this returns and the
        awaitable is an already completed future: no coroutine is created per message.  Only a
        blocked session returns a coroutine, which waits for the session to drain and then sends.
        """
        # Fast path (the data path): one more message of the core's open run (this topic,
        # this payload length, ``bytes``) that joins a non-empty batch and leaves it below
        # core.fast_limit: a list append; the core frames the run at once later
        # (umcore.transport.batching, "Runs").  The run is this source's only while it may use
        # this path (self._rec: open, no retention) and the session is not blocked (a run ends
        # at every hand-on but the data path's, which is when a transport can become blocked,
        # and the data path's hand-on ends it if the write blocked).  Anything else goes to
        # _send_slow, which starts and hands on batches of the run inline as well.
        core = self._core
        n = len(data)
        size = core.batch_len + 12 + n
        if (
            n == core._run_n
            and size < core.fast_limit
            and core._run is self._rec
            and type(data) is bytes
            and not flush
            and properties is None
            and not app_headers
        ):
            core.batch_len = size
            push = self._push  # a bound list.append held in an attribute: calling it as
            push(data)  # self._push(...) would take CPython 3.11's generic LOAD_METHOD
            return self._done
        return self._send_slow(data, flush, properties, app_headers)

    def _send_slow(
        self,
        data: bytes | memoryview,
        flush: bool,
        properties: MessageProperties | None,
        app_headers: tuple[AppHeader, ...] | list[AppHeader],
    ) -> Awaitable[None]:
        """:meth:`send` for everything but a message joining a batch without completing it.

        A message of the open run that starts a batch or completes one is handled inline when
        nothing else is due, leaving the state :meth:`BatchingSource.send` would leave
        (umcore.transport.batching, "Batch start"): a batch start (the run kept open, empty,
        by the last hand-on: ``core._run_n`` is ``~n``) is a list append when the batching
        deadline already pending comes no later than this batch's (so the timer stays) and
        the TSNI check is armed; a message that brings the batch to
        ``batching_minimum_length`` without overflowing it hands the batch on
        (:meth:`BatchingSource.hand_on_run`, the run kept open) and the session writes it."""
        core = self._core
        if (
            core._run is self._rec
            and type(data) is bytes
            and not flush
            and properties is None
            and not app_headers
            and (core._tsni_check is not None or core.tsni_interval <= 0)
        ):
            n = len(data)
            run_n = core._run_n
            if n == ~run_n:
                size = 12 + n
                clock = self._time  # (a bound method held in an attribute: see send_nowait)
                now = clock()
                due = now + core.batching_interval
                bt = core._batch_timer
                if bt is not None and bt <= due and size < core.fast_limit:
                    core._run_n = n
                    core._run_time = now
                    core._batch_due = due
                    core.batch_len = size
                    push = self._push
                    push(data)
                    return self._done
            elif n == run_n:
                size = core.batch_len + 12 + n
                if core.batching_minimum_length <= size <= core.max_size:
                    push = self._push
                    push(data)
                    core.batch_len = size
                    listener = self._listener
                    clock = self._time
                    listener.write(core.hand_on_run(clock()))
                    if listener._paused:
                        core.end_run()  # that write blocked the session (see above)
                    if core.timer_dirty:
                        core.timer_dirty = False
                        self._session.timer.arm(core.next_timer())
                    return self._done
        listener = self._listener
        if listener._paused or self.closed:
            return self._send_blocked(data, flush, properties, app_headers)
        if properties is None and not app_headers and self._fast:
            out = core.send(self.tidx, data, self._time(), flush)
        else:
            out = self._extended(data, flush, properties, app_headers)
        if out is not None:
            listener.write(out)
            if listener._paused and core._run is not None:
                core.end_run()  # that write blocked the session: no fast path until it drains
        if core.timer_dirty:
            core.timer_dirty = False
            self._session.timer.arm(core.next_timer())
        return self._done

    async def _send_blocked(
        self,
        data: bytes | memoryview,
        flush: bool,
        properties: MessageProperties | None,
        app_headers: tuple[AppHeader, ...] | list[AppHeader],
    ) -> None:
        listener = self._listener
        while listener._paused:
            self._check()
            self.context.send_blocked += 1
            await listener.writable()
        self._check()
        await self.send(data, flush=flush, properties=properties, app_headers=app_headers)

    def send_nowait(
        self,
        data: bytes | memoryview,
        flush: bool = False,
        properties: MessageProperties | None = None,
        app_headers: tuple[AppHeader, ...] | list[AppHeader] = (),
    ) -> None:
        """Send one message or raise :class:`WouldBlock` (UM's ``LBM_SRC_NONBLOCK``); a WAKEUP
        source event follows when sending may go on.  Pass ``flush``, ``properties`` and
        ``app_headers`` by keyword (not keyword-only for the reason :meth:`send` gives: CPython
        3.11/3.12 do not specialise calls to functions with keyword-only parameters)."""
        # The latency path on a TCP session, a message on its own that needs neither batching
        # nor fragmentation: TcpSourceSession.send_one's framing and counting inline, then the
        # listener's write to every confirmed receiver (one Python frame for the whole send;
        # the same bytes, counters and TSNI arming).  Written as guard clauses, each falling
        # back to _send_nowait_general right after its test, and with the rare cases in helper
        # methods: CPython 3.11 specialises a comparison only when a short conditional jump
        # follows it (a jump over a long block needs EXTENDED_ARG and leaves the comparison
        # generic, ~100 instructions), and calls an attribute holding a bound method (_time,
        # _one_pack) through a generic LOAD_METHOD unless it is loaded into a local first.
        t = self._one
        if t is None or not flush or properties is not None or app_headers:
            return self._send_nowait_general(data, flush, properties, app_headers)
        core = self._core
        listener = self._listener
        n = len(data)
        if core.batch_len or listener._paused or n > core.max_payload:
            return self._send_nowait_general(data, flush, properties, app_headers)
        sqn = t.sqn
        if n == self._one_n:
            # One precompiled struct for the payload length of the last send: header prefix,
            # sqn and payload in one pack (~20 ns less than a header pack and a concatenation).
            pack = self._one_pack
            try:
                framed = pack(self._one_pre, sqn, data)
            except struct.error:  # a memoryview ('s' takes bytes-likes but not memoryview)
                framed = _pack_data(_DATA_HEADER + n, self.tidx, sqn) + data
        else:
            framed = self._one_length(n, sqn, data)
        clock = self._time
        now = clock()  # (core.now is not set: only the LBT cores read it)
        # The next sqn, wrapping at 2**32 without an & (one int object less); the first test
        # compares two one-digit ints (CPython's fast path).
        t.sqn = sqn + 1 if sqn < 0x3FFFFFFF or sqn != 0xFFFFFFFF else 0
        t.last_data = now
        if core._tsni_check is None and core.tsni_interval > 0:
            core._tsni_check = now + core.tsni_interval
            core.timer_dirty = True
        st = core.stats  # SourceStats.count_single inline: small ints only
        k = st.singles
        if k < MAX_SINGLES and n == st.single_n:
            st.singles = k + 1
        else:
            st.restart_singles(n)
        ws = listener._writers
        if len(ws) == 1:  # one receiver: no list iterator (an allocation) for the loop
            ws[0].write(framed)
        else:
            for w in ws:
                w.write(framed)
        if listener._paused or core.timer_dirty:
            self._after_one()
        return None

    def _one_length(self, n: int, sqn: int, data: bytes | memoryview) -> bytes:
        """:meth:`send_nowait`'s inline framing for a payload length other than the last one's:
        the per-length struct made for the next sends of this length."""
        self._one_n = n
        self._one_pre = _pack_pre(_DATA_HEADER + n, self.tidx)
        self._one_pack = struct.Struct(f"!8sI{n}s").pack
        return _pack_data(_DATA_HEADER + n, self.tidx, sqn) + data

    def _after_one(self) -> None:
        """:meth:`send_nowait`'s inline path after a write that blocked the session or left
        a timer to arm."""
        core = self._core
        if self._listener._paused and core._run is not None:
            core.end_run()
        if core.timer_dirty:
            core.timer_dirty = False
            self._session.timer.arm(core.next_timer())

    def _send_nowait_general(
        self,
        data: bytes | memoryview,
        flush: bool,
        properties: MessageProperties | None,
        app_headers: tuple[AppHeader, ...] | list[AppHeader],
    ) -> None:
        """:meth:`send_nowait` for everything but its inline TCP path."""
        if (
            flush
            and self._fast
            and properties is None
            and not app_headers
            and not self._listener._paused
        ):
            # The latency path, a message on its own: the core's single-message send.
            core = self._core
            out = core.send_one(self.tidx, data, self._time())
            if out is not None:
                listener = self._listener
                listener.write(out)
                if listener._paused and core._run is not None:
                    core.end_run()
            if core.timer_dirty:
                core.timer_dirty = False
                self._session.timer.arm(core.next_timer())
            return
        self._check()
        if self._listener._paused:
            self._wants_wakeup = True
            self.context.send_would_block += 1
            raise WouldBlock(f"transport session of {self.topic!r} is blocked by a slow receiver")
        if flush:  # the latency path (a message on its own): straight to the general path
            self._send_slow(data, flush, properties, app_headers)
        else:
            self.send(data, properties=properties, app_headers=app_headers)

    async def send_request(
        self, data: bytes, on_response: Callable[[Message], object], *, clientd: Any = None
    ) -> Request:
        """``lbm_send_request``: a message every receiver gets as a REQUEST; responses reach
        ``on_response`` (message type RESPONSE) until the returned request is closed."""
        feat = self.context._features
        port = feat._require_port()
        if self._listener._paused:
            await self._listener.writable()
        self._check()
        qidx = feat.requests.open(on_response, clientd)
        hdr = lbmc.Request(0, 0, qidx, port.port, 0, lbmc.ip4_from_str(feat.ip))
        out = self._extended(data, True, None, (), hdr)
        if out is not None:
            self._listener.write(out)
        return Request(feat, qidx)

    def flush(self) -> None:
        """Send what implicit batching holds now (``lbm_src_flush``)."""
        out = self._core.flush()
        if out is not None:
            self._listener.write(out)
        self._session.timer.arm(self._core.next_timer())

    async def close(self) -> None:
        """Delete the source: batched messages go out first; a session left without sources
        closes, which gives its receivers EOS."""
        if self.closed:
            return
        self.flush()
        self.closed = True
        self._set_fast(False)
        ctx = self.context
        ctx._sources.discard(self)
        ctx._features.source_closed(self)
        ctx._resolver.remove_source(self.topic, self.tidx, self.transport_info)
        self._core.remove_topic(self.tidx)
        self._session.sources.remove(self)
        if not self._session.sources:
            await ctx._close_session(self._session)


# ------------------------------------------------------------------------------ receivers
class Receiver:
    """A topic receiver (``lbm_rcv_t``); create with :meth:`Context.create_receiver`.

    With ``on_message`` every delivery calls it on the loop (the fast path); without, deliveries
    queue for ``async for msg in receiver`` / :meth:`get`.
    """

    def __init__(
        self,
        ctx: Context,
        topic: str,
        on_message: OnMessage | None,
        *,
        pattern: re.Pattern[str] | None = None,
    ) -> None:
        self.context = ctx
        #: The topic, or for a wildcard receiver its pattern (messages carry their own topic).
        self.topic = topic
        #: Compiled PCRE-style pattern of a wildcard receiver (Python ``re``: see
        #: :meth:`Context.create_wildcard_receiver`), None for a topic receiver.
        self.pattern = pattern
        #: The delivery paths read ``_cb``; :attr:`on_message` (a property) keeps the fast-path
        #: state of the fan-outs this receiver is in (``_fanouts``) in step with it.
        self._cb: OnMessage | None = on_message
        self._fanouts: list[_Fanout] = []
        #: Opt-in batched delivery (:meth:`Context.create_receiver` ``on_messages``): called
        #: with a list of messages, in order, wherever the transport parsed several at once;
        #: single deliveries (events, slow-path data) then arrive through :attr:`on_message`,
        #: which is set to a wrapper calling ``on_messages([msg])`` when none was given.
        self.on_messages: Callable[[list[Message]], object] | None = None
        self.closed = False
        self._queue: deque[Message] = deque()
        self._waiter: asyncio.Future[None] | None = None
        self._paused = False
        #: Times the queue filled up and reading from the sources was paused.
        self.queue_pauses = 0
        #: Exceptions raised by ``on_message`` (logged, counted, never propagated).
        self.callback_errors = 0
        self._messages = 0
        self.unrecoverable = 0
        #: ``ordered_delivery``: TCP delivers in order whatever the mode (no retransmission
        #: can reorder it), so 1 and -1 behave alike here; 0 (seed 8.8.3, deprecated in UM)
        #: delivers each UM fragment as its own message with ``msg.fragment_info`` (first
        #: sqn, offset, total length) instead of reassembling (first receiver of a topic
        #: source wins, as for the other DC options).
        self.ordered_delivery = 1
        #: ``delivery_control_maximum_burst_loss`` (first receiver of a topic wins).
        self.max_burst_loss = 1024
        #: The receiver's effective options (late join / OTR read them when joining).
        self._opts: Any = None

    @property
    def messages(self) -> int:
        """Messages delivered to this receiver (data and requests; not events), those the TCP
        one-frame path delivered since the last :meth:`_Fanout.fold` included."""
        n = self._messages
        for f in self._fanouts:
            if f.fast_r is self:
                n += f.fused
        return n

    @messages.setter
    def messages(self, value: int) -> None:
        self._messages = value

    @property
    def on_message(self) -> OnMessage | None:
        """The per-message callback (None: deliveries queue for the async iterator).  May be
        replaced at any time; the next delivery uses the new one."""
        return self._cb

    @on_message.setter
    def on_message(self, cb: OnMessage | None) -> None:
        self._cb = cb
        for f in self._fanouts:
            f._refresh()

    def _deliver(self, msg: Message) -> None:
        cb = self._cb
        if cb is not None:
            try:
                cb(msg)
            except Exception:
                self._callback_failed()
            return
        q = self._queue
        q.append(msg)
        w = self._waiter
        if w is not None and not w.done():
            w.set_result(None)
        if len(q) >= MAX_RECEIVER_QUEUE and not self._paused:
            self._paused = True
            self.queue_pauses += 1
            self.context._pause_feeding(self.topic)

    def _deliver_many(self, msgs: list[Message]) -> None:
        """Queue a run of messages for the async iterator (same bound as :meth:`_deliver`)."""
        q = self._queue
        q.extend(msgs)
        w = self._waiter
        if w is not None and not w.done():
            w.set_result(None)
        if len(q) >= MAX_RECEIVER_QUEUE and not self._paused:
            self._paused = True
            self.queue_pauses += 1
            self.context._pause_feeding(self.topic)

    def _callback_failed(self) -> None:
        self.callback_errors += 1
        n = self.callback_errors
        if n & (n - 1) == 0:  # the 1st, 2nd, 4th, 8th... failure: bounded log output
            log.exception("receiver callback failed (%d so far, topic %r)", n, self.topic)

    async def get(self) -> Message:
        """The next delivery (data or event)."""
        q = self._queue
        while not q:
            if self.closed:
                raise UMError(f"receiver for {self.topic!r} is closed")
            self._waiter = self.context._loop.create_future()
            try:
                await self._waiter
            finally:
                self._waiter = None
        msg = q.popleft()
        if self._paused and len(q) <= MAX_RECEIVER_QUEUE // 2:
            self._paused = False
            self.context._resume_feeding(self.topic)
        return msg

    def get_nowait(self) -> Message | None:
        return self._queue.popleft() if self._queue else None

    def __aiter__(self) -> AsyncIterator[Message]:
        return self._iterate()

    async def _iterate(self) -> AsyncIterator[Message]:
        while not (self.closed and not self._queue):
            try:
                yield await self.get()
            except UMError:
                return

    async def close(self) -> None:
        """Delete the receiver; no callback runs after this returns."""
        if self.closed:
            return
        self.closed = True
        self.on_message = None
        self.on_messages = None
        w = self._waiter
        if w is not None and not w.done():
            w.set_result(None)
        self.context._remove_receiver(self)


class _Fanout:
    """Delivery of one topic index of one joined session to the context's receivers of it."""

    __slots__ = (
        "_recovery",
        "dc",
        "fast_cb",
        "fast_r",
        "fragments",
        "fused",
        "fused_n",
        "receivers",
        "request_dest",
        "session",
        "spare",
        "topic",
    )

    def __init__(self, session: _JoinedSession, topic: str, tidx: int, max_burst: int) -> None:
        self.session = session
        self.topic = topic
        self.receivers: list[Receiver] = []
        new_dc = getattr(session.core, "new_dc", None)  # LBT-RU / LBT-RM receiver cores
        self.dc: Any = (
            DeliveryController(tidx, topic, self._data, self._loss, max_burst_loss=max_burst)
            if new_dc is None
            else new_dc(tidx, topic, self._data, self._loss, max_burst_loss=max_burst)
        )
        self.dc.deliver_many = self._data_many
        #: The DC may deliver fragments on their own (``ordered_delivery`` 0: TCP's DC has
        #: ``fragment``, the fragment info during such a delivery).
        self.fragments = hasattr(self.dc, "fragment")
        self._recovery: Any = None
        self.request_dest: tuple[str, int] = ("", 0)
        #: The one-message fast path's state, checked once here instead of per message: with
        #: one receiver, that receiver has a callback and no recovery runs, ``fast_r`` is the
        #: receiver and ``fast_cb`` its callback; else both None.  Kept current by
        #: :meth:`_refresh`, called whenever one of those changes (receiver added/removed,
        #: :attr:`Receiver.on_message` set, :attr:`recovery` set).
        self.fast_r: Receiver | None = None
        self.fast_cb: OnMessage | None = None
        #: Deliveries of the TCP one-frame path not yet counted elsewhere (see :meth:`fold`).
        self.fused = 0
        self.fused_n = 0  #: the length of the reads counted in :attr:`fused`
        #: The last message the one-callback paths delivered, handed out again for the next
        #: delivery when no application kept it (:class:`DeliveredMessage`, "Recycling").
        self.spare = DeliveredMessage()

    @property
    def recovery(self) -> Any:
        """Late join / OTR state (umcore.features.recovery.TopicRecovery) or None."""
        return self._recovery

    @recovery.setter
    def recovery(self, rec: Any) -> None:
        self._recovery = rec
        self._refresh()

    def fold(self) -> None:
        """Counting.  The TCP one-frame path (:class:`_JoinConnection`) counts a delivery only
        in :attr:`fused`, a small int (0..:data:`MAX_FUSED`, CPython's cached ints: adding
        to it allocates nothing, unlike each of the four large counters it stands for), its
        reads being all :attr:`fused_n` bytes long; this adds them to the DC's
        ``delivered``, the session's ``messages_received`` and ``bytes_received`` and the
        receiver's count.  Called when a read of another length comes or :data:`MAX_FUSED`
        are counted (:meth:`restart`), before :attr:`fast_r` changes, and before statistics
        are sampled (:meth:`_JoinedSession.fold`); :attr:`Receiver.messages` adds what is
        not folded yet when read."""
        k = self.fused
        if k:
            self.fused = 0
            self.dc.delivered += k
            st = self.session.core.stats
            st.messages_received += k
            st.bytes_received += k * self.fused_n
            r = self.fast_r
            if r is not None:
                r._messages += k

    def restart(self, n: int) -> None:
        """:meth:`fold`, then count one one-frame delivery of a read of ``n`` bytes."""
        self.fold()
        self.fused = 1
        self.fused_n = n

    def _refresh(self) -> None:
        """Recompute the fast-path state (:attr:`fast_cb`, :attr:`fast_r`)."""
        self.fold()
        rs = self.receivers
        if len(rs) == 1 and self._recovery is None and rs[0]._cb is not None:
            self.fast_r = rs[0]
            self.fast_cb = rs[0]._cb
        else:
            self.fast_r = self.fast_cb = None

    def add_receiver(self, r: Receiver) -> None:
        self.receivers.append(r)
        r._fanouts.append(self)
        self._refresh()

    def remove_receiver(self, r: Receiver) -> None:
        self.receivers.remove(r)
        r._fanouts.remove(self)
        self._refresh()

    def _data(self, sqn: int, payload: bytes | memoryview) -> None:
        if type(payload) is bytes and self._recovery is None and not self.dc.headers:
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
            msg.source = self.session.source_string
            msg.sequence_number = sqn
            msg.data = payload
            cb = self.fast_cb
            if cb is not None:  # one receiver with a callback (checked when it changed)
                r = self.fast_r
                r._messages += 1  # type: ignore[union-attr]
                try:
                    cb(msg)
                except Exception:
                    r._callback_failed()  # type: ignore[union-attr]
                return
            for r in self.receivers:
                r._messages += 1
                cb = r._cb
                if cb is None:
                    r._deliver(msg)
                    continue
                try:
                    cb(msg)
                except Exception:
                    r._callback_failed()
            return
        if type(payload) is not bytes:
            payload = bytes(payload)
        headers = self.dc.headers
        if self._recovery is not None:
            self.session.ctx._features.live(self, sqn, payload, headers)
            return
        if headers:
            feat_msg = self.session.ctx._features.make_message(
                self.topic, self.session.source_string, sqn, payload, headers
            )
            if feat_msg is None:
                return
            msg = feat_msg
        else:
            msg = DeliveredMessage()  # allocated in C, the fields stored here
            msg.type = 0
            msg.topic = self.topic
            msg.source = self.session.source_string
            msg.sequence_number = sqn
            msg.data = payload
        frag = getattr(self.dc, "fragment", None)
        if frag is not None:
            msg.fragment_info = frag
        for r in self.receivers:
            r._messages += 1
            cb = r._cb
            if cb is None:
                r._deliver(msg)
                continue
            try:
                cb(msg)
            except Exception:
                r._callback_failed()

    def _data_many(self, records: Iterable[tuple[int, bytes]], count: int) -> None:
        """A run of ``count`` in-sequence plain data messages ``(sqn, payload)`` parsed in one
        pass (``records`` iterated once: a list or the unpacking iterator itself)."""
        if self._recovery is not None:
            data = self._data
            for sqn, payload in records:
                data(sqn, payload)
            return
        topic = self.topic
        source = self.session.source_string
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
                while True:
                    try:
                        for sqn, payload in it:
                            # Recycling (DeliveredMessage): the last message again unless
                            # the application kept it; all five fields are stored anew.
                            if getrefcount(msg) != SPARE_REFS:
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
        if self._recovery is not None:
            self.session.ctx._features.transport_loss(self, sqn, count)
            return
        t = m.MSG_UNRECOVERABLE_LOSS_BURST if kind == LOSS_BURST else m.MSG_UNRECOVERABLE_LOSS
        msg = Message(t, self.topic, self.session.source_string, sqn, b"", count)
        self.session.ctx.fragments_unrecoverably_lost += count
        for r in self.receivers:
            r.unrecoverable += count
            r._deliver(msg)


class _JoinedSession:
    """A source transport session this context has joined as a receiver."""

    def __init__(self, ctx: Context, info: SourceInfo) -> None:
        self.ctx = ctx
        self.key = info.key
        self.ip, self.port, self.session_id = info.ip, info.port, info.session_id
        self.source_string = f"TCP:{info.ip}:{info.port}:{info.session_id or 0:08x}"
        self.core: Any = TcpReceiverSession(info.session_id)
        self.options = info.options
        self.fanouts: dict[int, _Fanout] = {}
        self.conn: ReceiverConnection | None = None
        self.transport: asyncio.Transport | None = None
        self.active = False
        self.closed = False

    def bos(self) -> None:
        self.active = True
        for f in self.fanouts.values():
            for r in f.receivers:
                r._deliver(Message(m.MSG_BOS, f.topic, self.source_string))

    def eos(self, exc: Exception | None) -> None:
        if self.closed:
            return
        self.closed = True
        self.ctx._joined.pop(self.key, None)
        if exc is not None:
            log.info("session %s ended: %s", self.source_string, exc)
        for f in self.fanouts.values():
            for r in f.receivers:
                r._deliver(Message(m.MSG_EOS, f.topic, self.source_string))

    def fold(self) -> None:
        """Bring ``core.stats.messages_received`` and the receivers' counts up to date
        (:meth:`_Fanout.fold`)."""
        for f in self.fanouts.values():
            f.fold()

    def add(self, topic: str, tidx: int, receiver: Receiver) -> None:
        f = self.fanouts.get(tidx)
        if f is None:
            f = self.fanouts[tidx] = _Fanout(self, topic, tidx, receiver.max_burst_loss)
            if receiver.ordered_delivery == 0 and hasattr(f.dc, "reassemble"):
                f.dc.reassemble = False
            self.core.subscribe(f.dc)
            if receiver._opts is not None:
                self.ctx._features.fanout_created(f, self.options, receiver)
        if receiver in f.receivers:
            return
        f.add_receiver(receiver)
        if self.active:
            receiver._deliver(Message(m.MSG_BOS, topic, self.source_string))

    def remove(self, receiver: Receiver) -> None:
        for tidx, f in list(self.fanouts.items()):
            if receiver in f.receivers:
                f.remove_receiver(receiver)
            if not f.receivers:
                self.ctx._features.fanout_removed(f)
                del self.fanouts[tidx]
                self.core.unsubscribe(tidx)
        if not self.fanouts and self.conn is not None:
            self.conn.abort()  # nobody listens any more: leave the session (no EOS to anyone)
            self.closed = True
            self.ctx._joined.pop(self.key, None)


class _JoinConnection(ReceiverConnection):
    """The connection of a joined TCP session, with the latency case fused in.

    A read holding exactly one plain, in-sequence data message for a topic index with one
    receiver that has a callback is delivered in this one frame: the checks and counters of
    :meth:`TcpReceiverSession.data_received`'s single-message path and of
    :meth:`_Fanout._data`'s plain path, the :class:`Message` built and the callback called.
    Everything else (several messages or part of one, other message types, the first bytes
    (BOS), a gap, an unknown topic index, late join / OTR, several receivers or one without a
    callback) goes to :meth:`ReceiverConnection.data_received`, the general path.
    """

    def __init__(self, js: _JoinedSession) -> None:
        super().__init__(js.core, on_active=js.bos, on_closed=js.eos)
        self._fanouts = js.fanouts
        self._source = js.source_string

    def data_received(self, data: bytes) -> None:
        # ``data`` is bytes (asyncio's Protocol contract, uvloop's too): the payload slice
        # below is then bytes, as Message.data must be.  Guard clauses, each falling back to
        # the general path right after its test: CPython 3.11 specialises a comparison only
        # when a short conditional jump follows it (see Source.send_nowait).
        n = len(data)
        core = self.session
        if n < _DATA_HEADER or not core.active or core._pending:
            return ReceiverConnection.data_received(self, data)
        # The first word is version/type 0, next header 0 and msglen: equal to the read's
        # length exactly when the read is one plain data message.
        word, tidx, sqn = _data_head_from(data)
        if word != n:
            return ReceiverConnection.data_received(self, data)
        f = self._fanouts.get(tidx)
        if f is None:
            return ReceiverConnection.data_received(self, data)
        cb = f.fast_cb  # one receiver, with a callback, no recovery (else None)
        dc = f.dc
        if cb is None or sqn != dc.expected or not dc.started or dc._frag_buf is not None:
            return ReceiverConnection.data_received(self, data)
        dc.expected = sqn + 1 if sqn < 0x3FFFFFFF or sqn != 0xFFFFFFFF else 0  # as on send
        # Counted in small ints, f.fused and f.fused_n (the read's length), folded into the
        # DC's, the session's and the receiver's counts (_Fanout.fold) every MAX_FUSED
        # messages and when the length changes.
        k = f.fused
        if k < MAX_FUSED and n == f.fused_n:
            f.fused = k + 1
        else:
            f.restart(n)
        msg = f.spare  # recycled unless kept (DeliveredMessage)
        if getrefcount(msg) != SPARE_REFS:
            msg = f.spare = DeliveredMessage()
        msg.type = 0
        msg.topic = f.topic
        msg.source = self._source
        msg.sequence_number = sqn
        msg.data = data[_DATA_HEADER:]
        try:
            cb(msg)
        except Exception:
            f.fast_r._callback_failed()  # type: ignore[union-attr]
        return None


# ------------------------------------------------------------------------------ context
class Context(FeatureAPI):
    """A UM context; create with ``await Context.create(attributes)``.

    Immediate messaging and requests: :class:`~umcore.api.features.FeatureAPI`."""

    def __init__(self, attributes: Any = None, *, name: str | None = None) -> None:
        self._loop = asyncio.get_running_loop()
        self.name = name
        self._opts = _Options("context", attributes, name)
        self._sources: set[Source] = set()
        self._receivers: dict[str, list[Receiver]] = {}
        self._wildcards: list[Receiver] = []
        self._sessions: list[_SourceSession] = []
        self._next_session = 0
        self._joined: dict[tuple[object, ...], _JoinedSession] = {}
        self._tasks: set[asyncio.Task[Any]] = set()
        self._endpoint: DatagramEndpoint | None = None
        #: lbmrd (ip, port) -> the resolver socket of its ``Iface[:SrcPort]->`` entry part.
        self._daemon_endpoints: dict[tuple[str, int], DatagramEndpoint] = {}
        self._resolver: TopicResolver
        self._timer = CoreTimer(self._loop, self._on_timer)
        #: What :meth:`Source.send` returns when it sent at once: awaiting a completed future
        #: costs less than creating a coroutine per message.
        self._done: asyncio.Future[None] = self._loop.create_future()
        self._done.set_result(None)
        self.advertised_ip = "127.0.0.1"
        self.closed = False
        self._features = ContextFeatures(self)
        #: TCP-based topic resolution (``resolver_service``), None without SRSes.
        self.srs: srsresolve.SRSResolution | None = None
        # Statistics for automatic monitoring (umcore.monitor.automatic): sends that blocked
        # or raised WouldBlock, and messages lost for good (gaps a receiver was told about).
        self.send_blocked = 0
        self.send_would_block = 0
        self.fragments_unrecoverably_lost = 0
        self._monitor: Any = None
        self._monitor_settings: Any = None
        if int(self._opts.get("monitor_interval", 0) or 0) > 0:
            from umcore.monitor.modopts import MonitorSettings  # ConfigError before any I/O

            self._monitor_settings = MonitorSettings.from_options(self._opts.get)

    @classmethod
    async def create(cls, attributes: Any = None, *, name: str | None = None) -> Context:
        ctx = cls(attributes, name=name)
        await ctx._start()
        return ctx

    async def __aenter__(self) -> Context:
        return self

    async def __aexit__(self, *exc: object) -> None:
        for s in list(self._sources):
            await s.close()
        for rs in list(self._receivers.values()):
            for r in list(rs):
                await r.close()
        for w in list(self._wildcards):
            await w.close()
        await self.close()

    # -------------------------------------------------------------- topic resolution
    def _resolver_config(self) -> ResolverConfig:
        o = self._opts
        ms = float
        return ResolverConfig(
            unicast_daemons=_daemons(o.get("resolver_unicast_daemon", [])),
            multicast_address=str(o.get("resolver_multicast_address", "224.9.10.11")),
            multicast_port=int(o.get("resolver_multicast_port", 12965)),
            unicast_timings=UnicastTimings(
                ms(o.get("resolver_unicast_keepalive_interval", 500)) / 1000,
                ms(o.get("resolver_unicast_activity_timeout", 1000)) / 1000,
                ms(o.get("resolver_unicast_check_interval", 200)) / 1000,
                ms(o.get("resolver_unicast_change_interval", 200)) / 1000,
            ),
            datagram_max_size=int(o.get("resolver_datagram_max_size", 8192)),
            force_alive=bool(o.get("resolver_unicast_force_alive", False)),
            ignore_unknown_source=bool(o.get("resolver_unicast_ignore_unknown_source", True)),
        )

    async def _start(self) -> None:
        o = self._opts
        cfg = self._resolver_config()
        self._resolver, self.srs, udp = srsresolve.make_resolver(self, cfg, self._loop.time())
        default_if = _interface_ip(o.get("default_interface", None))
        if not udp:  # SRS only (or no TR at all): no resolver socket
            srs = self.srs.servers[0][0] if self.srs is not None else "127.0.0.1"
            self.advertised_ip = default_if or route_address(srs)
        elif cfg.unicast_daemons:
            iface = _interface_ip(o.get("resolver_unicast_interface", None)) or default_if
            low = int(o.get("resolver_unicast_port_low", 14402))
            high = int(o.get("resolver_unicast_port_high", 14406))
            bindings = _daemon_bindings(o.get("resolver_unicast_daemon", []))
            named = next((ip for ip, _ in bindings.values() if ip is not None), None)
            self.advertised_ip = iface or named or route_address(cfg.unicast_daemons[0][0])
            rcvbuf = int(o.get("resolver_unicast_receiver_socket_buffer", 8388608))
            last: OSError | None = None
            for port in [0] if low == 0 else range(low, high + 1):
                try:
                    self._endpoint = await DatagramEndpoint.bind(
                        iface or "0.0.0.0", port, self._on_datagram, rcvbuf=rcvbuf
                    )
                    break
                except OSError as exc:
                    last = exc
            if self._endpoint is None:
                raise UMError(f"no free resolver_unicast port in {low}-{high}: {last}")
            await self._bind_daemon_endpoints(o, iface, low, high, rcvbuf)
        else:
            iface = _interface_ip(o.get("resolver_multicast_interface", None)) or default_if
            self.advertised_ip = iface or route_address(cfg.multicast_address)
            sock = open_multicast_socket(
                cfg.multicast_address,
                cfg.multicast_port,
                iface or self.advertised_ip,
                ttl=int(o.get("resolver_multicast_ttl", 16)),
                rcvbuf=int(o.get("resolver_multicast_receiver_socket_buffer", 8388608)),
            )
            self._endpoint = DatagramEndpoint(self._loop, sock, self._on_datagram)
        self._features.ip = self.advertised_ip
        try:
            await self._features.start()
        except BaseException:
            self._timer.cancel()
            if self._endpoint is not None:
                self._endpoint.close()
            raise
        if self.srs is not None:
            self.srs.start()  # after the request port: the SIRs name it
        self._flush_resolver()
        if self._monitor_settings is not None:
            from umcore.monitor.automatic import start_automatic_monitoring

            try:
                self._monitor = await start_automatic_monitoring(self, self._monitor_settings)
            except BaseException:
                self._timer.cancel()
                if self._endpoint is not None:
                    self._endpoint.close()
                if self.srs is not None:
                    await self.srs.close()
                raise

    def _on_datagram(self, data: bytes | memoryview, addr: tuple[str, int]) -> None:
        found = self._resolver.receive_datagram(data, addr, self._loop.time())
        for info in found:
            self._join(info)
        self._flush_resolver()

    def _on_timer(self) -> None:
        self._resolver.handle_timer(self._loop.time())
        self._flush_resolver()

    async def _bind_daemon_endpoints(
        self, o: _Options, iface: str | None, low: int, high: int, rcvbuf: int
    ) -> None:
        """One more resolver socket per distinct ``Iface[:SrcPort]`` of the
        ``resolver_unicast_daemon`` entries; datagrams to such an lbmrd leave (and its answers
        arrive) there, the others use the context's resolver socket."""
        by_local: dict[tuple[str, int | None], DatagramEndpoint] = {}
        for daemon, (ip, sport) in _daemon_bindings(o.get("resolver_unicast_daemon", [])).items():
            host = ip or iface or "0.0.0.0"
            ep = by_local.get((host, sport))
            if ep is None:
                ports = [sport] if sport is not None else [0] if low == 0 else range(low, high + 1)
                last: OSError | None = None
                for port in ports:
                    try:
                        ep = await DatagramEndpoint.bind(
                            host, port, self._on_datagram, rcvbuf=rcvbuf
                        )
                        break
                    except OSError as exc:
                        last = exc
                if ep is None:
                    for other in by_local.values():
                        other.close()
                    raise UMError(f"cannot bind the resolver socket for lbmrd {daemon}: {last}")
                by_local[(host, sport)] = ep
            self._daemon_endpoints[daemon] = ep

    def _flush_resolver(self) -> None:
        ep = self._endpoint
        if ep is not None:
            per_daemon = self._daemon_endpoints
            for data, addr in self._resolver.take_datagrams():
                (per_daemon.get(addr, ep) if per_daemon else ep).sendto(data, addr)
        self._timer.arm(self._resolver.next_timer())

    def topic_resolution_request(self) -> None:
        """``lbm_context_topic_resolution_request()``: restart sustaining phases."""
        self._resolver.request_resolution(self._loop.time())
        self._flush_resolver()

    @property
    def resolver_stats(self) -> Any:
        return self._resolver.stats

    @property
    def resolver_address(self) -> tuple[str, int]:
        assert self._endpoint is not None
        addr: tuple[str, int] = self._endpoint.local_address
        return addr

    # -------------------------------------------------------------- sources
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
        self._check()
        if event_queue is not None and event_queue.closed:
            raise UMError("event queue is closed")
        session_opts = _Options("source", attributes, topic)
        session = await self._session_for(session_opts)
        src = Source(self, topic, session, on_event)
        if event_queue is not None:
            event_queue.attach_source(src)
        session.sources.append(src)
        self._sources.add(src)
        so = session_opts
        local = self._resolver.add_source(
            topic,
            src.tidx,
            src.transport_info,
            self._loop.time(),
            timings=advertisement_timings(
                so.get("resolver_advertisement_minimum_initial_interval", 10),
                so.get("resolver_advertisement_maximum_initial_interval", 500),
                so.get("resolver_advertisement_minimum_initial_duration", 5000),
                so.get("resolver_advertisement_sustain_interval", 1000),
                so.get("resolver_advertisement_minimum_sustain_duration", 60),
            ),
            send_initial=bool(so.get("resolver_send_initial_advertisement", True)),
            options=self._features.source_created(src, so),
        )
        for info in local:
            self._join(info)
        self._flush_resolver()
        return src

    async def _session_for(self, o: _Options) -> _SourceSession:
        kind = transports.transport_kind(o)
        if kind != "tcp":
            return await transports.lbt_source_session(self, kind, o)
        maximum = int(self._opts.get("transport_tcp_maximum_ports", 10))
        if len(self._sessions) >= maximum:
            s = self._sessions[self._next_session % len(self._sessions)]
            self._next_session += 1
            return s
        use_sid = bool(o.get("transport_tcp_use_session_id", True))
        core = TcpSourceSession(
            _random_session_id(),
            datagram_max_size=int(self._opts.get("transport_tcp_datagram_max_size", 65535)),
            batching_minimum_length=int(o.get("implicit_batching_minimum_length", 2048)),
            batching_interval=float(o.get("implicit_batching_interval", 200)) / 1000,
            tsni_interval=float(o.get("transport_topic_sequence_number_info_interval", 5000))
            / 1000,
            tsni_active_threshold=float(
                o.get("transport_topic_sequence_number_info_active_threshold", 60)
            ),
            use_session_id=use_sid,
        )
        listener = SourceListener(
            core,
            max_buffer=int(o.get("transport_session_maximum_buffer", 65536)),
            nodelay=bool(o.get("transport_tcp_nodelay", True)),
        )
        host = _interface_ip(o.get("transport_tcp_interface", None)) or "0.0.0.0"
        port = int(o.get("transport_tcp_port", 0))
        if port:
            low = high = port
        else:
            low = int(self._opts.get("transport_tcp_port_low", 14371))
            high = int(self._opts.get("transport_tcp_port_high", 14390))
        await listener.start(host, low, high, int(o.get("transport_tcp_listen_backlog", 5)))
        s = _SourceSession(self, core, listener)
        self._sessions.append(s)
        self._next_session += 1
        return s

    async def _close_session(self, s: _SourceSession) -> None:
        s.timer.cancel()
        out = s.core.flush()
        if out:
            s.listener.write(out)
        if s in self._sessions:
            self._sessions.remove(s)
        await s.listener.close()

    # -------------------------------------------------------------- receivers
    async def create_receiver(
        self,
        topic: str,
        on_message: OnMessage | None = None,
        *,
        attributes: Any = None,
        on_messages: Callable[[list[Message]], object] | None = None,
        event_queue: EventQueue | None = None,
    ) -> Receiver:
        """A receiver of ``topic``.  Deliveries (data and events, as :class:`Message`) go to
        ``on_message`` one by one (the fast path), or without it to a bounded queue read by
        ``async for msg in receiver``.  ``on_messages`` (opt-in, faster still) receives lists
        of messages in order wherever the transport parsed several at once; what arrives
        alone goes to ``on_message`` if given, else to ``on_messages`` as a list of one.
        With ``event_queue`` the callbacks run from :meth:`EventQueue.dispatch` instead."""
        self._check()
        ropts = _Options("receiver", attributes, topic)
        r = Receiver(self, topic, on_message)
        _set_batched(r, on_messages)
        if event_queue is not None:
            event_queue.attach_receiver(r)
        r.ordered_delivery = int(ropts.get("ordered_delivery", 1))
        r.max_burst_loss = int(ropts.get("delivery_control_maximum_burst_loss", 1024))
        r._opts = ropts
        self._receivers.setdefault(topic, []).append(r)
        found = self._resolver.add_receiver(
            topic,
            self._loop.time(),
            timings=query_timings(
                ropts.get("resolver_query_minimum_initial_interval", 20),
                ropts.get("resolver_query_maximum_initial_interval", 200),
                ropts.get("resolver_query_minimum_initial_duration", 5000),
                ropts.get("resolver_query_sustain_interval", 1000),
                ropts.get("resolver_query_minimum_sustain_duration", 60),
            ),
            query_threshold=int(
                ropts.get("resolution_number_of_sources_query_threshold", 10_000_000)
            ),
        )
        for info in found:
            self._join(info)
        self._flush_resolver()
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
        self._check()
        try:
            regex = re.compile(pattern)
        except re.error as exc:
            raise ConfigError(
                f"cannot compile wildcard pattern: {exc}", source="API", what=pattern
            ) from None
        wopts = _Options("wildcard_receiver", attributes, pattern)
        r = Receiver(self, pattern, on_message, pattern=regex)
        _set_batched(r, on_messages)
        if event_queue is not None:
            event_queue.attach_receiver(r)
        self._wildcards.append(r)
        found = self._resolver.add_wildcard_receiver(
            pattern,
            self._loop.time(),
            timings=wildcard_query_timings(
                wopts.get("resolver_query_minimum_interval", 50),
                wopts.get("resolver_query_maximum_interval", 1000),
                wopts.get("resolver_query_minimum_duration", 60),
            ),
        )
        for info in found:  # the receiver-side cache holds this context's own sources too
            self._join(info)
        self._flush_resolver()
        return r

    def _remove_receiver(self, r: Receiver) -> None:
        if r.pattern is not None:
            if r in self._wildcards:
                self._wildcards.remove(r)
                self._resolver.remove_wildcard_receiver(r.topic)
                for js in list(self._joined.values()):
                    js.remove(r)
            return
        rs = self._receivers.get(r.topic)
        if rs is None or r not in rs:
            return
        rs.remove(r)
        if not rs:
            del self._receivers[r.topic]
        self._resolver.remove_receiver(r.topic)
        for js in list(self._joined.values()):
            js.remove(r)

    def _receivers_of(self, topic: str) -> list[Receiver]:
        found = list(self._receivers.get(topic, ()))
        for w in self._wildcards:
            if w.pattern is not None and w.pattern.search(topic):
                found.append(w)
        return found

    def _join(self, info: SourceInfo) -> None:
        receivers = self._receivers_of(info.topic)
        if not receivers:
            return
        js = self._joined.get(info.key)
        if js is None:
            js = self._joined[info.key] = _JoinedSession(self, info)
            lbt = info.key[0] != "TCP"
            if lbt:
                transports.prepare_join(self, js, info, receivers)
            for r in receivers:
                js.add(info.topic, info.index, r)
            self._spawn(transports.join(self, js, info) if lbt else self._connect(js))
        else:
            for r in receivers:
                js.add(info.topic, info.index, r)

    async def _connect(self, js: _JoinedSession) -> None:
        conn = _JoinConnection(js)
        js.conn = conn
        try:
            await asyncio.wait_for(
                self._loop.create_connection(lambda: conn, js.ip, js.port), CONNECT_TIMEOUT_S
            )
        except (TimeoutError, OSError) as exc:
            # Never connected: no BOS was given, so no EOS either; a later TIR retries.
            log.info("cannot join %s: %s", js.source_string, exc)
            js.closed = True
            if self._joined.get(js.key) is js:
                del self._joined[js.key]

    def _pause_feeding(self, topic: str) -> None:
        for js in self._joined.values():
            if js.conn is not None and any(f.topic == topic for f in js.fanouts.values()):
                js.conn.pause_reading()

    def _resume_feeding(self, topic: str) -> None:
        for js in self._joined.values():
            if js.conn is not None and any(f.topic == topic for f in js.fanouts.values()):
                js.conn.resume_reading()

    # -------------------------------------------------------------- lifetime
    def _spawn(self, coro: Any) -> None:
        task = self._loop.create_task(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    def _check(self) -> None:
        if self.closed:
            raise UMError("context is closed")

    async def close(self) -> None:
        """Delete the context; its sources and receivers must be closed first (UM's rule)."""
        if self.closed:
            return
        if self._sources or self._receivers or self._wildcards:
            raise UMError(
                "close the context's sources and receivers first "
                f"({len(self._sources)} sources, {sum(map(len, self._receivers.values()))} "
                "receivers remain)"
            )
        self.closed = True
        if self._monitor is not None:
            await self._monitor.close()
        self._timer.cancel()
        for t in list(self._tasks):
            t.cancel()
        for t in list(self._tasks):
            with contextlib.suppress(BaseException):
                await t
        for js in list(self._joined.values()):
            if js.conn is not None:
                js.conn.abort()
        self._joined.clear()
        for s in list(self._sessions):
            await self._close_session(s)
        if self.srs is not None:
            await self.srs.close()
        await self._features.close()
        if self._endpoint is not None:
            self._endpoint.close()
        for ep in set(self._daemon_endpoints.values()):
            ep.close()
