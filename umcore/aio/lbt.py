"""asyncio adapters for LBT-RU and LBT-RM: sockets, timers, port/group pools, fault injection.

Theory of operation
-------------------
Each sans-IO core of :mod:`umcore.transport.lbtru` / :mod:`umcore.transport.lbtrm` gets one UDP
socket drained by :class:`~umcore.aio.udp.DatagramEndpoint` and one
:class:`~umcore.aio.timer.CoreTimer`; after every input the adapter sends what the core queued
and re-arms the timer when the core says its deadline moved (``timer_dirty``).

- :class:`LbtSourceEndpoint` is the source session's socket.  It has the shape the API's source
  session expects of a TCP listener (``write``, ``writable``, ``paused``, ``receivers``,
  ``close``, ``on_connect``/``on_disconnect``/``on_unblock``): ``write`` sends the core's DATA
  datagrams to every receiver (LBT-RU: each connected client; LBT-RM: the group) and its other
  datagrams where they belong; ``paused`` is the rate limiter's *blocked* state.  LBT-RU binds
  a port of ``transport_lbtru_port_low..high`` (context); LBT-RM binds its NAK port from
  ``transport_lbtrm_source_port_low..high`` and multicasts from that socket
  (``IP_MULTICAST_IF`` = the context's interface, loop on, TTL ``resolver_multicast_ttl``).
- :class:`LbtReceiverSession` is one joined session: LBT-RU binds its own socket in the
  receiver's ``transport_lbtru_port_low..high`` (ephemeral when none is free) and connects;
  LBT-RM shares one socket per (group, destination port) per context (:class:`_GroupSocket`,
  bound to the group with SO_REUSEADDR so other contexts on the host get their copy) and is
  demultiplexed by (source IP, NAK port, session id).
- :class:`LbtContext` is what a context holds for these transports: one
  :class:`~umcore.transport.ratelimit.RateLimiter` per transport type (the rate limits are
  context options), the group sockets and the round-robin pools.

**Fault injection (not a UM option).**  The context options ``pyum_fault_drop_send`` and
``pyum_fault_drop_receive`` (fractions 0..1, default 0, registered in a pyum-only group of the
option registry) drop that fraction of this context's LBT-RU/LBT-RM datagrams on send or on
receive, at random, so loss recovery can be shown with the real programs (the kernel here has
no netem).  Topic resolution traffic is never dropped.  Drops are counted in
:attr:`LbtContext.fault_dropped`.
"""

from __future__ import annotations

import asyncio
import logging
import random
import struct
from collections.abc import Callable
from typing import Any

from umcore.aio.multicast import open_group_socket
from umcore.aio.rxstamp import RxStamp, TimestampedEndpoint, enable_timestamps
from umcore.aio.timer import CoreTimer
from umcore.aio.udp import DatagramEndpoint
from umcore.errors import RemoteProtocolError, UMError
from umcore.transport.lbt import LbtReceiver, LbtSource
from umcore.transport.lbtrm import LbtrmReceiver, LbtrmSource
from umcore.transport.lbtru import LbtruReceiver, LbtruSource
from umcore.transport.ratelimit import RateLimiter
from umcore.wire import lbmr
from umcore.wire import lbtrm as wrm

__all__ = [
    "LbtContext",
    "LbtReceiverSession",
    "LbtSourceEndpoint",
    "SourceTimer",
    "bind_in_range",
]

log = logging.getLogger("umcore.aio.lbt")

Address = tuple[str, int]

# An LBT-RM header's NAK port and session id (bytes 2-7): with the sender's IP, the key that
# demultiplexes a group socket's datagrams to their session.
_PORT_SID = struct.Struct("!HI")


class LbtContext:
    """Per-context state of the datagram transports (see the module docstring)."""

    def __init__(
        self,
        loop: asyncio.AbstractEventLoop,
        ru_limiter: RateLimiter,
        rm_limiter: RateLimiter,
        *,
        drop_send: float = 0.0,
        drop_receive: float = 0.0,
        seed: int | None = None,
        timestamps: bool = False,
    ) -> None:
        self.loop = loop
        #: ``transport_lbtrm_receiver_timestamp``: LBT-RM group sockets read kernel receive
        #: timestamps into :attr:`rx_stamp` (umcore.aio.rxstamp).
        self.timestamps = timestamps
        #: The receive time of the LBT-RM datagram being handled, (0, 0) otherwise.
        self.rx_stamp = RxStamp()
        self.ru_limiter = ru_limiter
        self.rm_limiter = rm_limiter
        self.drop_send = drop_send
        self.drop_receive = drop_receive
        self.rng = random.Random(seed)
        self.fault_dropped = 0
        self.groups: dict[Address, _GroupSocket] = {}
        self.next_group = 0
        #: The API's source sessions per transport kind ("lbtru"/"lbtrm"), by pool key.
        self.sessions: dict[str, dict[Any, Any]] = {"lbtru": {}, "lbtrm": {}}
        #: LBT-RM datagrams of no joined session on closed group sockets (context stat).
        self.rm_unknown_closed = 0

    def forget(self, session: object) -> None:
        """A source session closed: it is no longer a pool member."""
        for by_key in self.sessions.values():
            for key, s in list(by_key.items()):
                if s is session:
                    del by_key[key]

    def source_sessions(self) -> list[Any]:
        """Every LBT-RU / LBT-RM source session of the context (automatic monitoring)."""
        return [s for by_key in self.sessions.values() for s in by_key.values()]

    @property
    def lbtrm_unknown_msgs_rcved(self) -> int:
        """UM's context stat: LBT-RM datagrams for no session this context joined."""
        return self.rm_unknown_closed + sum(g.unknown for g in self.groups.values())

    def drop_out(self) -> bool:
        if self.drop_send and self.rng.random() < self.drop_send:
            self.fault_dropped += 1
            return True
        return False

    def drop_in(self) -> bool:
        if self.drop_receive and self.rng.random() < self.drop_receive:
            self.fault_dropped += 1
            return True
        return False


async def bind_in_range(
    host: str, low: int, high: int, on_datagram: Any, *, rcvbuf: int | None, sndbuf: int | None
) -> DatagramEndpoint:
    """A UDP endpoint on the first free port of ``low..high`` (``low == 0``: ephemeral)."""
    last: OSError | None = None
    for port in [0] if low == 0 else range(low, high + 1):
        try:
            return await DatagramEndpoint.bind(
                host, port, on_datagram, rcvbuf=rcvbuf, sndbuf=sndbuf
            )
        except OSError as exc:
            last = exc
    raise UMError(f"no free UDP port in {low}-{high} on {host}: {last}")


# ============================================================================ source
class SourceTimer(CoreTimer):
    """The timer of a source session and of a joined receiver session: a :class:`CoreTimer`
    that tells its callback which deadline fired (:attr:`fired`).

    uvloop rounds a timer's delay to the millisecond, so a timer may run up to half a
    millisecond before ``loop.time()`` reaches its deadline.  A core told that earlier time
    finds nothing due and asks for the same deadline again, and the loop spins through it (a
    session message deadline measured ~130 wake-ups in a busy run).  The adapter hands the core
    ``max(loop.time(), fired)`` instead: what is due at the deadline happens at most half a
    millisecond early, once."""

    __slots__ = ("fired",)

    def __init__(self, loop: asyncio.AbstractEventLoop, callback: Callable[[], object]) -> None:
        super().__init__(loop, callback)
        #: The deadline of the current callback (None outside one).
        self.fired: float | None = None

    def _fire(self) -> None:
        self.fired = self.deadline
        try:
            super()._fire()
        finally:
            self.fired = None


class LbtSourceEndpoint:
    """The socket of one LBT-RU / LBT-RM source session (see the module docstring)."""

    def __init__(self, lctx: LbtContext, core: LbtSource, endpoint: DatagramEndpoint) -> None:
        self.lctx = lctx
        self.core = core
        self.endpoint = endpoint
        self.port = endpoint.local_address[1]
        self.group: Address | None = None  # LBT-RM: (group, dport)
        self.timer: CoreTimer | None = None
        self.on_connect: Callable[[str], None] | None = None
        self.on_disconnect: Callable[[str], None] | None = None
        self.on_unblock: Callable[[], None] | None = None
        self._waiters: list[asyncio.Future[None]] = []
        self.receive_errors = 0
        self.closed = False
        #: LBT-RU's connect/disconnect events (an empty tuple for LBT-RM): pending ones send
        #: :meth:`write` down the general path, which reports them.
        self._events: list[tuple[str, object]] | tuple[()] = (
            core.events if isinstance(core, LbtruSource) else ()
        )
        #: The one address DATA goes to, for :meth:`write`'s fast path (None: general path);
        #: recomputed after every general write.
        self._dest: Address | None = None
        endpoint.set_handler(self._on_datagram)

    # -- the TCP listener's shape, as the API's source session uses it
    #: The core's *blocked* state as of the last :meth:`write` (every call that can block or
    #: unblock the core is followed by one): a plain attribute, read on every send.
    paused = False
    #: The TCP listener's one-receiver shortcut: never for a datagram session (its writes go
    #: through :meth:`write`, which sends what the core queued).
    single: None = None

    @property
    def receivers(self) -> int:
        """LBT-RU: connected clients.  LBT-RM: unknown to a multicast source, reported 0."""
        core = self.core
        return len(core.clients) if isinstance(core, LbtruSource) else 0

    def transport_info(self, ip: str) -> lbmr.TCPInfo | lbmr.LBTRMInfo:
        core = self.core
        if isinstance(core, LbtrmSource):
            assert self.group is not None
            return lbmr.LBTRMInfo(ip, self.group[0], core.session_id, self.group[1], self.port)
        assert isinstance(core, LbtruSource)
        return lbmr.LBTRUInfo(ip, self.port, core.session_id if core.use_session_id else None)

    def source_string(self, ip: str) -> str:
        core = self.core
        if isinstance(core, LbtrmSource):
            assert self.group is not None
            g, d = self.group
            return f"LBTRM:{ip}:{self.port}:{core.session_id:08x}:{g}:{d}"
        return f"LBT-RU:{ip}:{self.port}:{core.session_id:08x}"

    async def writable(self) -> None:
        while self.core.blocked and not self.closed:
            fut = self.lctx.loop.create_future()
            self._waiters.append(fut)
            await fut

    def write(self, out: bytes | None = None) -> None:
        """Send what the core queued.  ``out`` is what the API got back from the core: empty
        (a marker) from the core's own send paths, or LBMC messages the API framed itself
        (messages with properties, application headers, requests), which go out now in their
        own DATA datagrams.

        The data path calls this once per batch with one DATA datagram on ``core.ready`` and
        nothing else queued: with one destination (LBT-RM's group, LBT-RU's only client) and
        no fault injection that is one ``sendto`` per datagram on the socket, the endpoint's
        counters kept.  Everything else (fan-out to several LBT-RU clients, fault injection,
        retransmissions, SMs, NCFs, connect events) goes through :meth:`_write_general`."""
        core = self.core
        if out:
            core.emit_lbmc(out)
        dest = self._dest
        if dest is not None and not core.outbox and not self._events:
            ready = core.ready
            if ready:
                ep = self.endpoint
                sendto = ep.sock.sendto
                for d in ready:
                    try:
                        nbytes = sendto(d, dest)
                    except OSError:
                        ep.sendto(d, dest)  # the endpoint's error handling and counters
                        continue
                    ep.datagrams_sent += 1
                    ep.bytes_sent += nbytes
                ready.clear()
        else:
            self._write_general(core)
        self._after_write(core)

    def _after_write(self, core: LbtSource) -> None:
        self.paused = core.blocked
        if core.unblocked:
            core.unblocked = False
            waiters, self._waiters = self._waiters, []
            for fut in waiters:
                if not fut.done():
                    fut.set_result(None)
            if self.on_unblock is not None:
                self.on_unblock()
        timer = self.timer
        if timer is not None and (core.timer_dirty or timer.deadline is None):
            core.timer_dirty = False
            timer.arm(core.next_timer())

    def _single_destination(self) -> Address | None:
        """Where every DATA datagram goes when that is one address and no fault injection
        needs to see each datagram: LBT-RM's group, or LBT-RU's only client."""
        if self.lctx.drop_send > 0:
            return None
        if self.group is not None:
            return self.group
        core = self.core
        if isinstance(core, LbtruSource) and len(core.clients) == 1:
            (addr,) = core.clients
            return addr  # type: ignore[return-value]
        return None

    def _write_general(self, core: LbtSource) -> None:
        send = self.endpoint.sendto
        lctx = self.lctx
        faults = lctx.drop_send > 0
        if isinstance(core, LbtruSource):
            clients = list(core.clients)
            for d in core.ready:
                for addr in clients:
                    if not (faults and lctx.drop_out()):
                        send(d, addr)  # type: ignore[arg-type]
            for d, addr in core.outbox:
                for a in clients if addr is None else (addr,):
                    if not (faults and lctx.drop_out()):
                        send(d, a)  # type: ignore[arg-type]
            for kind, addr in core.events:
                cb = self.on_connect if kind == "connect" else self.on_disconnect
                if cb is not None:
                    cb(f"{addr[0]}:{addr[1]}")  # type: ignore[index]
            core.events.clear()
        else:
            group = self.group
            assert group is not None
            for d in core.ready:
                if not (faults and lctx.drop_out()):
                    send(d, group)
            for d, _addr in core.outbox:
                if not (faults and lctx.drop_out()):
                    send(d, group)
        core.ready.clear()
        core.outbox.clear()
        # LBT-RU clients come and go only in datagram_received and handle_timer, whose output
        # always takes this path: the fast path's destination is brought up to date here.
        self._dest = self._single_destination()

    def arm(self) -> None:
        core = self.core
        if self.timer is not None and (core.timer_dirty or self.timer.deadline is None):
            core.timer_dirty = False
            self.timer.arm(core.next_timer())

    def on_timer(self) -> None:
        if self.closed:
            return
        core = self.core
        now = self.lctx.loop.time()
        timer = self.timer
        if isinstance(timer, SourceTimer) and timer.fired is not None and timer.fired > now:
            now = timer.fired  # fired early by the loop's rounding (see SourceTimer)
        core.handle_timer(now)
        self._write_general(core)
        self._after_write(core)
        if self.timer is not None:
            core.timer_dirty = False
            self.timer.arm(core.next_timer())

    def _on_datagram(self, data: bytes | memoryview, addr: Address) -> None:
        lctx = self.lctx
        if lctx.drop_receive and lctx.drop_in():
            return
        try:
            self.core.receive_datagram(data, addr, lctx.loop.time())
        except RemoteProtocolError:
            self.receive_errors += 1
            return
        core = self.core
        if core.ready or core.outbox or core.timer_dirty or self._events:
            self._write_general(core)
            self._after_write(core)

    async def close(self) -> None:
        if self.closed:
            return
        core = self.core
        if core.batch_len:
            core.flush()
        self.write()
        self.closed = True
        if self.timer is not None:
            self.timer.cancel()
        for fut in self._waiters:
            if not fut.done():
                fut.set_result(None)
        self.endpoint.close()


# ============================================================================ receivers
class _GroupSocket:
    """One LBT-RM group + destination port of a context, shared by its joined sessions."""

    def __init__(
        self, lctx: LbtContext, endpoint: DatagramEndpoint | TimestampedEndpoint, key: Address
    ) -> None:
        self.lctx = lctx
        self.endpoint = endpoint
        self.key = key
        self.sessions: dict[tuple[str, int, int], LbtReceiverSession] = {}
        self.unknown = 0  # lbtrm_unknown_msgs_rcved
        endpoint.set_handler(self._on_datagram)

    def _on_datagram(self, data: bytes | memoryview, addr: Address) -> None:
        if len(data) < wrm.HEADER_SIZE:
            self.unknown += 1
            return
        s = self.sessions.get((addr[0], *_PORT_SID.unpack_from(data, 2)))
        if s is None:
            self.unknown += 1
            return
        # LbtReceiverSession._on_datagram inline (one Python call less per datagram).
        lctx = self.lctx
        if lctx.drop_receive and lctx.drop_in():
            return
        core = s.core
        try:
            core.receive_datagram(data, lctx.loop.time())
        except RemoteProtocolError:
            s.receive_errors += 1
            return
        if core.outbox or core.timer_dirty:
            s._flush()


class LbtReceiverSession:
    """One joined LBT-RU / LBT-RM session (the API's ``conn`` of a joined session)."""

    def __init__(
        self,
        lctx: LbtContext,
        core: LbtReceiver,
        dest: Address,
        on_active: Callable[[], None],
        on_end: Callable[[], None],
    ) -> None:
        self.lctx = lctx
        self.core = core
        self.dest = dest  # where NAKs / CREQs / ACKs go
        self.endpoint: DatagramEndpoint | TimestampedEndpoint | None = None
        self.group: _GroupSocket | None = None
        self._group_key: tuple[str, int, int] | None = None
        self.timer = SourceTimer(lctx.loop, self._on_timer)
        self.receive_errors = 0
        self.closed = False
        core.on_active = on_active
        core.on_end = self._ended
        self._on_end = on_end

    @classmethod
    async def join_ru(
        cls,
        lctx: LbtContext,
        info: lbmr.TCPInfo,
        core: LbtruReceiver,
        on_active: Callable[[], None],
        on_end: Callable[[], None],
        *,
        host: str,
        low: int,
        high: int,
        rcvbuf: int | None,
    ) -> LbtReceiverSession:
        self = cls(lctx, core, (info.ip, info.port), on_active, on_end)
        try:
            self.endpoint = await bind_in_range(
                host, low, high, self._on_datagram, rcvbuf=rcvbuf, sndbuf=None
            )
        except UMError:
            log.warning("no free LBT-RU receiver port in %d-%d; using an ephemeral one", low, high)
            self.endpoint = await bind_in_range(
                host, 0, 0, self._on_datagram, rcvbuf=rcvbuf, sndbuf=None
            )
        core.connect(lctx.loop.time())
        self._flush()
        return self

    @classmethod
    async def join_rm(
        cls,
        lctx: LbtContext,
        info: lbmr.LBTRMInfo,
        core: LbtrmReceiver,
        on_active: Callable[[], None],
        on_end: Callable[[], None],
        *,
        interface: str,
        rcvbuf: int | None,
    ) -> LbtReceiverSession:
        self = cls(lctx, core, (info.src_ip, info.sport), on_active, on_end)
        key = (info.mc_group, info.dport)
        group = lctx.groups.get(key)
        if group is None:
            sock = open_group_socket(info.mc_group, info.dport, interface, rcvbuf)
            ep: DatagramEndpoint | TimestampedEndpoint
            if lctx.timestamps and enable_timestamps(sock):
                ep = TimestampedEndpoint(lctx.loop, sock, lambda d, a: None, lctx.rx_stamp)
            else:
                ep = DatagramEndpoint(lctx.loop, sock, lambda d, a: None)
            group = lctx.groups[key] = _GroupSocket(lctx, ep, key)
        self.group = group
        self.endpoint = group.endpoint
        self._group_key = (info.src_ip, info.sport, info.session_id)
        group.sessions[self._group_key] = self
        self._flush()
        return self

    def _on_datagram(self, data: bytes | memoryview, addr: Address) -> None:
        """A datagram of this session (LBT-RU: its own socket; LBT-RM's group socket runs the
        same steps inline in :meth:`_GroupSocket._on_datagram`: keep the two alike)."""
        lctx = self.lctx
        if lctx.drop_receive and lctx.drop_in():
            return
        core = self.core
        try:
            core.receive_datagram(data, lctx.loop.time())
        except RemoteProtocolError:
            self.receive_errors += 1
            return
        if core.outbox or core.timer_dirty:
            self._flush()

    def _flush(self) -> None:
        core = self.core
        ep = self.endpoint
        if core.outbox:
            if ep is not None and not self.closed:
                lctx = self.lctx
                for d in core.outbox:
                    if not (lctx.drop_send and lctx.drop_out()):
                        ep.sendto(d, self.dest)
            core.outbox.clear()
        core.timer_dirty = False
        if not self.closed:
            self.timer.arm(core.next_timer())

    def _on_timer(self) -> None:
        if self.closed:
            return
        now = self.lctx.loop.time()
        fired = self.timer.fired
        if fired is not None and fired > now:
            now = fired  # fired early by the loop's rounding (see SourceTimer)
        self.core.handle_timer(now)
        self._flush()

    def _ended(self) -> None:
        self._close()
        self._on_end()

    # -- the TCP connection's shape, as the API's joined session uses it
    def pause_reading(self) -> None:
        """UDP cannot push back: a receiver that falls behind loses datagrams and recovers."""

    def resume_reading(self) -> None:
        """See :meth:`pause_reading`."""

    def abort(self) -> None:
        self._close()

    def _close(self) -> None:
        if self.closed:
            return
        self.closed = True
        self.timer.cancel()
        if self.group is not None:
            assert self._group_key is not None
            self.group.sessions.pop(self._group_key, None)
            if not self.group.sessions:
                self.lctx.groups.pop(self.group.key, None)
                self.lctx.rm_unknown_closed += self.group.unknown
                self.group.endpoint.close()
        elif self.endpoint is not None:
            self.endpoint.close()
