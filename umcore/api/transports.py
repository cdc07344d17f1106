"""Transport selection for the API: LBT-RU and LBT-RM source sessions and joined sessions.

Theory of operation
-------------------
A source's ``transport`` option (source scope; ``tcp`` by default, ``lbtru``/``lbt-ru``,
``lbtrm``/``lbt-rm``) picks the transport its topic is mapped onto.  TCP stays in
:mod:`umcore.api.context`; this module builds the other two from the option registry:

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

import functools
import ipaddress
import logging
import random
from typing import TYPE_CHECKING, Any

from umcore.aio.lbt import (
    LbtContext,
    LbtReceiverSession,
    LbtSourceEndpoint,
    SourceTimer,
    bind_in_range,
)
from umcore.aio.multicast import set_multicast_sender
from umcore.errors import UMError
from umcore.transport.lbt import ReceiverConfig, SourceConfig
from umcore.transport.lbtrm import LbtrmReceiver, LbtrmSource
from umcore.transport.lbtru import LbtruReceiver, LbtruSource, RuReceiverConfig, RuSourceConfig
from umcore.transport.ratelimit import RateLimiter
from umcore.wire import lbmr

if TYPE_CHECKING:
    from umcore.api.context import Context, _JoinedSession, _SourceSession
    from umcore.monitor.umsstats import TransportSample
    from umcore.resolver.core import SourceInfo

__all__ = ["lbt_context", "lbt_source_session", "prepare_join", "transport_kind"]

log = logging.getLogger("umcore.api")


def transport_kind(o: Any) -> str:
    """``tcp``, ``lbtru`` or ``lbtrm`` from a source's options (others are refused)."""
    kind = str(o.get("transport", "tcp")).lower().replace("-", "")
    if kind not in ("tcp", "lbtru", "lbtrm"):
        raise UMError(f"transport {kind!r} is not implemented (tcp, lbtru and lbtrm are)")
    return kind


def _ms(value: Any, default: float) -> float:
    return float(value if value is not None else default) / 1000.0


def lbt_context(ctx: Context) -> LbtContext:
    """The context's LBT state, created on first use from its context-scope options."""
    lctx: LbtContext | None = getattr(ctx, "_lbt", None)
    if lctx is None:
        o = ctx._opts
        now = ctx._loop.time()
        ru = RateLimiter(
            int(o.get("transport_lbtru_data_rate_limit", 10_000_000)),
            int(o.get("transport_lbtru_retransmit_rate_limit", 5_000_000)),
            _ms(o.get("transport_lbtru_rate_interval", 100), 100),
            now,
        )
        rm = RateLimiter(
            int(o.get("transport_lbtrm_data_rate_limit", 10_000_000)),
            int(o.get("transport_lbtrm_retransmit_rate_limit", 5_000_000)),
            _ms(o.get("transport_lbtrm_rate_interval", 10), 10),
            now,
        )
        lctx = LbtContext(
            ctx._loop,
            ru,
            rm,
            drop_send=float(o.get("pyum_fault_drop_send", 0.0)),
            drop_receive=float(o.get("pyum_fault_drop_receive", 0.0)),
        )
        ctx._lbt = lctx  # type: ignore[attr-defined]
    return lctx


def _source_config(ctx: Context, o: Any, kind: str) -> dict[str, Any]:
    p = f"transport_{kind}_"
    c = ctx._opts
    size = int(c.get(p + "source_datagram_max_size", 0) or c.get(p + "datagram_max_size", 8192))
    return {
        "datagram_max_size": size,
        "batching_minimum_length": int(o.get("implicit_batching_minimum_length", 2048)),
        "batching_interval": _ms(o.get("implicit_batching_interval", 200), 200),
        "tsni_interval": _ms(o.get("transport_topic_sequence_number_info_interval", 5000), 5000),
        "tsni_active_threshold": float(
            o.get("transport_topic_sequence_number_info_active_threshold", 60)
        ),
        "sm_minimum_interval": _ms(o.get(p + "sm_minimum_interval", 200), 200),
        "sm_maximum_interval": _ms(o.get(p + "sm_maximum_interval", 10000), 10000),
        "ignore_interval": _ms(o.get(p + "ignore_interval", 500), 500),
        "transmission_window_size": int(o.get(p + "transmission_window_size", 25_165_824)),
        "transmission_window_limit": int(o.get(p + "transmission_window_limit", 0)),
    }


def _session_id() -> int:
    return random.SystemRandom().randrange(1, 0x1_0000_0000)


async def lbt_source_session(ctx: Context, kind: str, o: Any) -> _SourceSession:
    """The session a new ``kind`` source maps onto (existing, round robin, or new)."""
    from umcore.api.context import _interface_ip

    lctx = lbt_context(ctx)
    c = ctx._opts
    loop = ctx._loop
    sessions: dict[Any, _SourceSession] = lctx.sessions[kind]
    cfg = _source_config(ctx, o, kind)
    host = ctx.advertised_ip
    if kind == "lbtru":
        port = int(o.get("transport_lbtru_port", 0))
        maximum = int(c.get("transport_lbtru_maximum_ports", 5))
        if not port and len(sessions) >= maximum:
            live = list(sessions.values())
            lctx.next_group += 1
            return live[lctx.next_group % len(live)]
        if port and ("port", port) in sessions:
            return sessions[("port", port)]
        core_ru = LbtruSource(
            _session_id(),
            RuSourceConfig(
                client_activity_timeout=_ms(
                    o.get("transport_lbtru_client_activity_timeout", 10000), 10000
                ),
                use_session_id=bool(o.get("transport_lbtru_use_session_id", True)),
                **cfg,
            ),
            lctx.ru_limiter,
            loop.time(),
        )
        low, high = (
            (port, port)
            if port
            else (
                int(c.get("transport_lbtru_port_low", 14380)),
                int(c.get("transport_lbtru_port_high", 14389)),
            )
        )
        bind_host = _interface_ip(o.get("transport_lbtru_interface", None)) or "0.0.0.0"
        ep = await bind_in_range(
            bind_host,
            low,
            high,
            None,
            rcvbuf=int(c.get("transport_lbtru_source_socket_buffer", 1048576)),
            sndbuf=int(c.get("transport_lbtru_source_socket_buffer", 1048576)),
        )
        endpoint = LbtSourceEndpoint(lctx, core_ru, ep)
        key: Any = ("port", endpoint.port)
    else:
        group = str(o.get("transport_lbtrm_multicast_address", "0.0.0.0"))
        dport = int(o.get("transport_lbtrm_destination_port", 14400))
        if group in ("0.0.0.0", "None", ""):
            lo = int(
                ipaddress.IPv4Address(
                    str(c.get("transport_lbtrm_multicast_address_low", "224.10.10.10"))
                )
            )
            hi = int(
                ipaddress.IPv4Address(
                    str(c.get("transport_lbtrm_multicast_address_high", "224.10.10.14"))
                )
            )
            n = max(hi - lo + 1, 1)
            group = str(ipaddress.IPv4Address(lo + lctx.next_group % n))
            lctx.next_group += 1
        key = (group, dport)
        if key in sessions:
            return sessions[key]
        core_rm = LbtrmSource(_session_id(), 0, SourceConfig(**cfg), lctx.rm_limiter, loop.time())
        ep = await bind_in_range(
            host,
            int(c.get("transport_lbtrm_source_port_low", 14390)),
            int(c.get("transport_lbtrm_source_port_high", 14399)),
            None,
            rcvbuf=None,
            sndbuf=int(c.get("transport_lbtrm_source_socket_buffer", 1048576)),
        )
        core_rm.ucast_port = ep.local_address[1]
        set_multicast_sender(ep.sock, host, int(c.get("resolver_multicast_ttl", 16)))
        endpoint = LbtSourceEndpoint(lctx, core_rm, ep)
        endpoint.group = (group, dport)
    s: _SourceSession = _lbt_session_class()(ctx, endpoint.core, endpoint)
    s.timer = SourceTimer(loop, endpoint.on_timer)
    endpoint.timer = s.timer
    endpoint._arm()
    sessions[key] = s
    original_close = endpoint.close

    async def close() -> None:
        sessions.pop(key, None)
        await original_close()

    endpoint.close = close  # type: ignore[method-assign]
    return s


_SESSION_CLASS: Any = None


def _lbt_session_class() -> Any:
    """The API's source session class with the automatic-monitoring hook (built on first use:
    umcore.api.context imports this module)."""
    global _SESSION_CLASS
    if _SESSION_CLASS is None:
        from umcore.api.context import _SourceSession

        class LbtSourceSession(_SourceSession):
            """An LBT-RU / LBT-RM source session of the API."""

            def monitor_sample(self) -> TransportSample:
                from umcore.monitor.umsstats import TransportSample

                lst: Any = self.listener
                kind = "lbtru" if isinstance(self.core, LbtruSource) else "lbtrm"
                return TransportSample(
                    "source",
                    kind,
                    lst.source_string(self.ctx.advertised_ip),
                    self.core.monitor_fields(),  # type: ignore[attr-defined]
                )

        _SESSION_CLASS = LbtSourceSession
    return _SESSION_CLASS


def receiver_sample(js: _JoinedSession) -> TransportSample:
    """A joined LBT-RU / LBT-RM session's statistics (``monitor_sample`` of the session)."""
    from umcore.monitor.umsstats import TransportSample

    core = js.core
    fields = core.monitor_fields()
    conn = js.conn
    if conn is not None:  # datagrams the adapter could not parse at all
        fields["dgrams_dropped_hdr"] += int(getattr(conn, "receive_errors", 0))
    kind = "lbtrm" if isinstance(core, LbtrmReceiver) else "lbtru"
    return TransportSample("receiver", kind, js.source_string, fields)


def prepare_join(ctx: Context, js: _JoinedSession, info: SourceInfo, receivers: list[Any]) -> None:
    """Give a new joined session its LBT receiver core (before any DC is added)."""
    opts = None
    for r in receivers:
        opts = getattr(r, "_opts", None)
        if opts is not None:
            break
    if opts is None:
        from umcore.api.context import _Options

        opts = _Options("receiver", None, info.topic)
    o = opts
    t = info.transport
    first = receivers[0] if receivers else None
    common: dict[str, Any] = {
        "max_burst_loss": int(getattr(first, "max_burst_loss", 1024)),
        "ordered": int(getattr(first, "ordered_delivery", 1)) == 1,
        "loss_check_interval": _ms(o.get("delivery_control_loss_check_interval", 0), 0),
        # context scope, but it bounds each DC's order map separately (Configuration Guide)
        "max_map_entries": int(ctx._opts.get("delivery_control_maximum_total_map_entries", 200000)),
    }
    now = ctx._loop.time()
    if isinstance(t, lbmr.LBTRMInfo):
        p = "transport_lbtrm_"
        cfg = ReceiverConfig(
            activity_timeout=_ms(o.get(p + "activity_timeout", 60000), 60000),
            nak_initial_backoff_interval=_ms(o.get(p + "nak_initial_backoff_interval", 50), 50),
            nak_backoff_interval=_ms(o.get(p + "nak_backoff_interval", 200), 200),
            nak_generation_interval=_ms(o.get(p + "nak_generation_interval", 10000), 10000),
            nak_suppress_interval=_ms(o.get(p + "nak_suppress_interval", 1000), 1000),
            send_naks=bool(o.get(p + "send_naks", True)),
            **common,
        )
        js.core = LbtrmReceiver(t.session_id, t.sport, cfg, now)
        js.source_string = f"LBTRM:{t.src_ip}:{t.sport}:{t.session_id:08x}:{t.mc_group}:{t.dport}"
    else:
        p = "transport_lbtru_"
        rcfg = RuReceiverConfig(
            activity_timeout=_ms(o.get(p + "activity_timeout", 60000), 60000),
            nak_initial_backoff_interval=_ms(o.get(p + "nak_initial_backoff_interval", 0), 0),
            nak_backoff_interval=_ms(o.get(p + "nak_backoff_interval", 200), 200),
            nak_generation_interval=_ms(o.get(p + "nak_generation_interval", 10000), 10000),
            nak_suppress_interval=_ms(o.get(p + "nak_suppress_interval", 1000), 1000),
            send_naks=bool(o.get(p + "send_naks", True)),
            connect_interval=_ms(o.get(p + "connect_interval", 100), 100),
            maximum_connect_attempts=int(o.get(p + "maximum_connect_attempts", 600)),
            acknowledgement_interval=_ms(o.get(p + "acknowledgement_interval", 500), 500),
            **common,
        )
        js.core = LbtruReceiver(info.session_id, rcfg, now)
        sid = f":{info.session_id:08x}" if info.session_id else ""
        js.source_string = f"LBT-RU:{info.ip}:{info.port}{sid}"
    js._lbt_opts = o  # type: ignore[attr-defined]
    js.monitor_sample = functools.partial(receiver_sample, js)  # type: ignore[attr-defined]


async def join(ctx: Context, js: _JoinedSession, info: SourceInfo) -> None:
    """Open the joined session's socket (LBT-RU: connect; LBT-RM: join the group)."""
    from umcore.api.context import _interface_ip

    lctx = lbt_context(ctx)
    o = js._lbt_opts  # type: ignore[attr-defined]
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
                interface=ctx.advertised_ip,
                rcvbuf=int(ctx._opts.get("transport_lbtrm_receiver_socket_buffer", 8388608)),
            )
        else:
            assert isinstance(core, LbtruReceiver)
            host = _interface_ip(o.get("transport_lbtru_interface", None)) or "0.0.0.0"
            conn = await LbtReceiverSession.join_ru(
                lctx,
                t,
                core,
                js.bos,
                ended,
                host=host,
                low=int(o.get("transport_lbtru_port_low", 14360)),
                high=int(o.get("transport_lbtru_port_high", 14379)),
                rcvbuf=int(ctx._opts.get("transport_lbtru_receiver_socket_buffer", 8388608)),
            )
    except (OSError, UMError) as exc:
        log.info("cannot join %s: %s", js.source_string, exc)
        js.closed = True
        if ctx._joined.get(js.key) is js:
            del ctx._joined[js.key]
        return
    if js.closed:
        conn.abort()
        return
    js.conn = conn  # type: ignore[assignment]
