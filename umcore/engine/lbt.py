"""Transport selection for the engine: LBT-RU and LBT-RM source sessions and joined sessions.

Theory of operation
-------------------
A source's ``transport`` option (source scope; ``tcp`` by default, ``lbtru``/``lbt-ru``,
``lbtrm``/``lbt-rm``) picks the transport its topic is mapped onto.  TCP stays in
:mod:`umcore.engine.context`; this module builds the other two from the option registry:

- **LBT-RU source sessions**: a round-robin pool of at most ``transport_lbtru_maximum_ports``
  (5) sessions per context, each on a UDP port of ``transport_lbtru_port_low..high``
  (14380-14389; ``low`` 0 = ephemeral), or the source's own ``transport_lbtru_port``.
- **LBT-RM source sessions**: one per multicast group of the pool
  ``transport_lbtrm_multicast_address_low..high`` (224.10.10.10-14, round robin; or the source's
  ``transport_lbtrm_multicast_address``), destination port ``transport_lbtrm_destination_port``
  (14400), each with its own NAK port from ``transport_lbtrm_source_port_low..high``.  Data is
  multicast on the context's interface (the one topic resolution uses).
- Both share the context's rate limiters (``transport_lbt{ru,rm}_{data,retransmit}_rate_limit``
  and ``..._rate_interval``) and the pyum-only fault-injection settings
  (:mod:`umcore.aio.lbt`).
- **Joined sessions**: a TIR of either type makes the context join (one
  :class:`~umcore.aio.lbt.LbtReceiverSession` per session) with the first receiver's options
  (UM: first receiver wins): NAK timings, activity timeout, ``ordered_delivery``,
  ``delivery_control_maximum_burst_loss`` and ``delivery_control_loss_check_interval``.
  ``ordered_delivery`` 1 is sequence order; -1 is arrival order with reassembly; 0 (UM's
  deprecated "arrival order, fragments delivered one by one") is **not** implemented: it
  behaves as -1 (each UM-fragmented message is reassembled and delivered once, with the
  sequence number of its last fragment).

The datagram max sizes (``transport_lbt*_datagram_max_size``, 8192) bound each DATA datagram,
header included; batching and UM fragmentation work inside that (see
:mod:`umcore.transport.batching`).
"""

from __future__ import annotations

import ipaddress
import logging
from typing import Any, Protocol

from umcore.aio.lbt import (
    LbtContext,
    LbtReceiverSession,
    LbtSourceEndpoint,
    SourceTimer,
    bind_in_range,
)
from umcore.aio.multicast import set_multicast_sender
from umcore.engine.options import Options, random_session_id
from umcore.engine.receive import JoinedSession
from umcore.engine.source import SourceHost, SourceSession
from umcore.errors import UMError
from umcore.resolver.core import SourceInfo
from umcore.transport.lbt import ReceiverConfig, SourceConfig
from umcore.transport.lbtrm import LbtrmReceiver, LbtrmSource
from umcore.transport.lbtru import LbtruReceiver, LbtruSource, RuReceiverConfig, RuSourceConfig
from umcore.transport.ratelimit import RateLimiter
from umcore.wire import lbmr

__all__ = [
    "LbtHost",
    "LbtState",
    "join",
    "lbt_state",
    "prepare_join",
    "source_session",
    "transport_kind",
]

log = logging.getLogger("umcore.engine")

#: A context's LBT state (umcore.aio.lbt.LbtContext): rate limiters, session pools, sockets.
LbtState = LbtContext


class LbtHost(SourceHost, Protocol):
    """What LBT sessions need of their context (the engine), besides a source's needs."""

    lbt: LbtContext | None

    @property
    def options(self) -> Options: ...

    def join_failed(self, js: JoinedSession) -> None: ...


def transport_kind(o: Options) -> str:
    """``tcp``, ``lbtru``, ``lbtrm``, ``lbtipc`` or ``lbtsmx`` from a source's options (the
    last two are :mod:`umcore.engine.shm`'s; others are refused)."""
    kind = str(o.get("transport")).lower().replace("-", "")
    if kind not in ("tcp", "lbtru", "lbtrm", "lbtipc", "lbtsmx"):
        raise UMError(
            f"transport {kind!r} is not implemented (tcp, lbtru, lbtrm, lbtipc and lbtsmx are)"
        )
    return kind


def lbt_state(engine: LbtHost) -> LbtContext:
    """The engine's LBT state, created on first use from its context-scope options."""
    lctx = engine.lbt
    if lctx is None:
        o = engine.options
        now = engine.loop.time()
        ru = RateLimiter.from_options("lbtru", o, now)
        rm = RateLimiter.from_options("lbtrm", o, now)
        lctx = engine.lbt = LbtContext(
            engine.loop,
            ru,
            rm,
            drop_send=float(o.get("pyum_fault_drop_send")),
            drop_receive=float(o.get("pyum_fault_drop_receive")),
            timestamps=bool(o.get("transport_lbtrm_receiver_timestamp")),
        )
    return lctx


async def source_session(engine: LbtHost, kind: str, o: Options) -> SourceSession:
    """The session a new ``kind`` source maps onto (existing, round robin, or new)."""
    lctx = lbt_state(engine)
    c = engine.options
    loop = engine.loop
    sessions: dict[Any, SourceSession] = lctx.sessions[kind]
    host = engine.advertised_ip
    if kind == "lbtru":
        port = int(o.get("transport_lbtru_port"))
        maximum = int(c.get("transport_lbtru_maximum_ports"))
        if not port and len(sessions) >= maximum:
            live = list(sessions.values())
            lctx.next_group += 1
            return live[lctx.next_group % len(live)]
        if port and ("port", port) in sessions:
            return sessions[("port", port)]
        core_ru = LbtruSource(
            random_session_id(), RuSourceConfig.from_options(o, c), lctx.ru_limiter, loop.time()
        )
        low, high = (
            (port, port)
            if port
            else (
                int(c.get("transport_lbtru_port_low")),
                int(c.get("transport_lbtru_port_high")),
            )
        )
        bind_host = o.interface("transport_lbtru_interface") or "0.0.0.0"
        ep = await bind_in_range(
            bind_host,
            low,
            high,
            None,
            rcvbuf=int(c.get("transport_lbtru_source_socket_buffer")),
            sndbuf=int(c.get("transport_lbtru_source_socket_buffer")),
        )
        endpoint = LbtSourceEndpoint(lctx, core_ru, ep)
        key: Any = ("port", endpoint.port)
    else:
        group = str(o.get("transport_lbtrm_multicast_address") or "0.0.0.0")
        dport = int(o.get("transport_lbtrm_destination_port"))
        if group in ("0.0.0.0", "None", ""):
            lo = int(ipaddress.IPv4Address(str(c.get("transport_lbtrm_multicast_address_low"))))
            hi = int(ipaddress.IPv4Address(str(c.get("transport_lbtrm_multicast_address_high"))))
            n = max(hi - lo + 1, 1)
            group = str(ipaddress.IPv4Address(lo + lctx.next_group % n))
            lctx.next_group += 1
        key = (group, dport)
        if key in sessions:
            return sessions[key]
        core_rm = LbtrmSource(
            random_session_id(), 0, SourceConfig.from_options(o, c), lctx.rm_limiter, loop.time()
        )
        ep = await bind_in_range(
            host,
            int(c.get("transport_lbtrm_source_port_low")),
            int(c.get("transport_lbtrm_source_port_high")),
            None,
            rcvbuf=None,
            sndbuf=int(c.get("transport_lbtrm_source_socket_buffer")),
        )
        core_rm.ucast_port = ep.local_address[1]
        set_multicast_sender(ep.sock, host, int(c.get("resolver_multicast_ttl")))
        endpoint = LbtSourceEndpoint(lctx, core_rm, ep)
        endpoint.group = (group, dport)
    timer = SourceTimer(loop, endpoint.on_timer)
    s = SourceSession(
        engine,
        kind,
        endpoint.core,
        endpoint,
        timer=timer,
        info=lambda ip: (endpoint.transport_info(ip), endpoint.source_string(ip)),
    )
    endpoint.timer = timer
    endpoint.arm()
    sessions[key] = s
    return s


def prepare_join(
    engine: LbtHost, js: JoinedSession, info: SourceInfo, options: Options | None
) -> None:
    """Give a new joined session its LBT receiver core (before any DC is added), built from
    the first receiver's options (UM: first receiver wins)."""
    o = options if options is not None else Options("receiver", None, info.topic)
    t = info.transport
    now = engine.loop.time()
    if isinstance(t, lbmr.LBTRMInfo):
        cfg = ReceiverConfig.from_options(o, engine.options)
        js.set_core(
            LbtrmReceiver(t.session_id, t.sport, cfg, now),
            f"LBTRM:{t.src_ip}:{t.sport}:{t.session_id:08x}:{t.mc_group}:{t.dport}",
        )
        kind = "lbtrm"
    else:
        rcfg = RuReceiverConfig.from_options(o, engine.options)
        sid = f":{info.session_id:08x}" if info.session_id else ""
        js.set_core(LbtruReceiver(info.session_id, rcfg, now), f"LBT-RU:{info.ip}:{info.port}{sid}")
        kind = "lbtru"
    js.join_options = o

    def sample() -> tuple[str, str, str, dict[str, int]]:
        fields = js.core.monitor_fields()
        conn: Any = js.conn
        if conn is not None:  # datagrams the adapter could not parse at all
            fields["dgrams_dropped_hdr"] += int(getattr(conn, "receive_errors", 0))
        return ("receiver", kind, js.source_string, fields)

    js.sample = sample


async def join(engine: LbtHost, js: JoinedSession, info: SourceInfo) -> None:
    """Open the joined session's socket (LBT-RU: connect; LBT-RM: join the group)."""
    lctx = lbt_state(engine)
    o = js.join_options
    assert o is not None
    t = info.transport
    core = js.core

    def ended() -> None:
        js.eos(None)

    try:
        if isinstance(t, lbmr.LBTRMInfo):
            assert isinstance(core, LbtrmReceiver)
            conn = await LbtReceiverSession.join_rm(
                lctx,
                t,
                core,
                js.bos,
                ended,
                interface=engine.advertised_ip,
                rcvbuf=int(engine.options.get("transport_lbtrm_receiver_socket_buffer")),
            )
        else:
            assert isinstance(core, LbtruReceiver)
            host = o.interface("transport_lbtru_interface") or "0.0.0.0"
            conn = await LbtReceiverSession.join_ru(
                lctx,
                t,
                core,
                js.bos,
                ended,
                host=host,
                low=int(o.get("transport_lbtru_port_low")),
                high=int(o.get("transport_lbtru_port_high")),
                rcvbuf=int(engine.options.get("transport_lbtru_receiver_socket_buffer")),
            )
    except (OSError, UMError) as exc:
        log.info("cannot join %s: %s", js.source_string, exc)
        engine.join_failed(js)
        return
    if js.closed:
        conn.abort()
        return
    js.conn = conn
