"""SRS wired up: configuration -> service core + TCP endpoint + timers + monitoring + metrics.

The order (umcore.daemon.lifecycle): everything is checked before anything binds; the pid file
is written once the listener is up; at stop the listener and connections close, the monitoring
context closes, then the pid file goes.
"""

from __future__ import annotations

import asyncio
import logging
import os
import platform
import socket
import sys
from collections.abc import Callable, Iterable
from typing import Any

from daemons.srs.debugmon import debug_pages
from daemons.srs.monitor import SRSStats, control_handler, monitor_settings
from umcore import __version__ as pyum_version
from umcore.aio.srs import SRSServerEndpoint
from umcore.config.srs import SRSConfig
from umcore.daemon.lifecycle import StopSignals
from umcore.daemon.logs import LogSetup, configure_log_element
from umcore.daemon.memory import release_free_memory
from umcore.daemon.metrics import MetricSpec, MetricsServer, new_registry
from umcore.daemon.pidfile import PidFile
from umcore.daemon.refusals import RefusalLog
from umcore.daemon.statspub import StatsPublisher, StatsService
from umcore.daemon.web import WebPages
from umcore.monitor.pb import srs_mon_pb2
from umcore.monitor.prometheus import StatsCollector
from umcore.srs.server import PROTOCOL_VERSION, Refusal, ServerConfig, SRSEvent, SRSServer
from umcore.srs.stats import fill_pb

__all__ = [
    "configure_logging",
    "metric_registry",
    "resolve_interface",
    "serve",
    "server_config",
]

log = logging.getLogger("SRS")

# Memory: how often the daemon checks whether bytes of incomplete frames were released, and how
# many must have been released since the last check (from the peak) before it asks the allocator
# to return freed memory to the system (umcore.daemon.memory; a heap walk, hence the threshold).
MEMORY_CHECK_INTERVAL = 5.0
RELEASE_AFTER_BYTES = 16 << 20


def configure_logging(config: SRSConfig, *, level: int = logging.INFO) -> LogSetup:
    """``<log>``: console (stdout) or a rolling file.  OSError if the file cannot be opened."""
    lg = config.log
    return configure_log_element(
        lg.type, lg.file, size_mb=lg.size, frequency=lg.frequency, max_history=lg.max_history,
        compression=lg.compression, total_size_cap_mb=lg.total_size_cap, level=level,
    )  # fmt: skip


def resolve_interface(interface: str) -> str:
    """``<srs><interface>``: a dotted IPv4 address or a host name (no CIDR, trap 6)."""
    return socket.gethostbyname(interface)


def server_config(config: SRSConfig) -> ServerConfig:
    return ServerConfig(
        source_state_lifetime=config.source_state_lifetime,
        interest_state_lifetime=config.interest_state_lifetime,
        route_state_lifetime=config.route_state_lifetime,
        context_name_state_lifetime=config.context_name_state_lifetime,
        source_leave_backoff_ms=config.source_leave_backoff,
        batch_frame_max_record_count=config.batch_frame_max_record_count,
        batch_frame_max_datagram_size=config.batch_frame_max_datagram_size,
        record_queue_service_interval_ms=config.record_queue_service_interval,
        request_stream_max_msg_count=config.request_stream_max_msg_count,
        max_connections=config.limits.max_connections,
        max_clients=config.limits.max_clients,
        max_sources=config.limits.max_sources,
        max_sources_per_client=config.limits.max_sources_per_client,
        max_sources_per_host=config.limits.max_sources_per_host,
        max_buffered_bytes=config.limits.max_buffered_bytes,
        frame_timeout=config.limits.frame_timeout / 1000.0,
        registration_timeout=config.limits.registration_timeout / 1000.0,
        max_silence=config.limits.max_silence / 1000.0,
    )


def log_refusals(refusal_log: RefusalLog) -> Callable[[list[Refusal]], None]:
    """The endpoint's ``on_refusals``: each kind of refusal in its own rate-limited line."""

    def on_refusals(refusals: list[Refusal]) -> None:
        for r in refusals:
            refusal_log.note(r.kind, r.who, r.detail, r.count)

    return on_refusals


def release_memory_if_freed(core: SRSServer) -> bool:
    """After at least RELEASE_AFTER_BYTES of incomplete frames were released since the peak,
    return freed memory to the system; True when it did."""
    if core.buffered_peak - core.buffered_bytes < RELEASE_AFTER_BYTES:
        return False
    freed = core.buffered_peak - core.buffered_bytes
    core.reset_buffered_peak()
    if release_free_memory():
        log.info(
            "returned freed memory to the system (%d MiB of incomplete frames released)",
            freed >> 20,
        )
        return True
    return False


def _refused_getter(core: SRSServer, name: str) -> Callable[[], float]:
    return lambda: float(getattr(core.refused, name))


def metric_registry(
    core: SRSServer, endpoint: SRSServerEndpoint, monitor: StatsPublisher[SRSEvent] | None
) -> Any:
    """Prometheus: SRS_STATS and SRS_ERROR_STATS, per-client stats (bounded series), refusals."""
    registry = new_registry(
        [
            MetricSpec("pyum_srs_connections_open", "gauge", "TCP connections open", lambda: core.connections),
            MetricSpec("pyum_srs_sources", "gauge", "Sources held (active and inactive)", core.source_count),
            MetricSpec("pyum_srs_bytes_received", "counter", "Bytes received from clients", lambda: endpoint.bytes_in),
            MetricSpec("pyum_srs_bytes_sent", "counter", "Bytes sent to clients", lambda: endpoint.bytes_out),
            MetricSpec("pyum_srs_slow_clients_dropped", "counter", "Connections dropped: the client did not read", lambda: endpoint.slow_dropped),
            MetricSpec("pyum_srs_writes_paused", "counter", "Times a connection's write buffer was full (TCP back-pressure)", lambda: endpoint.writes_paused),
            *(
                MetricSpec(
                    f"pyum_srs_refused_{name}",
                    "counter",
                    f"Refused or dropped by a bound: {name.replace('_', ' ')}",
                    _refused_getter(core, name),
                )
                for name in core.refused.__slots__
            ),
            MetricSpec("pyum_srs_monitor_messages_published", "counter", "Statistics messages published", lambda: monitor.published if monitor else 0),
        ]
    )  # fmt: skip
    SRS = srs_mon_pb2.SRSMonMsg.Stats

    def srs() -> Iterable[tuple[Any, dict[str, str]]]:
        yield fill_pb(core.snapshot_stats(), SRS.SRS()), {}

    def srs_error() -> Iterable[tuple[Any, dict[str, str]]]:
        yield fill_pb(core.errors, SRS.SRSError()), {}

    def clients() -> Iterable[tuple[Any, dict[str, str]]]:
        for c in core.connected_clients():
            yield (
                fill_pb(c.stats, SRS.UMClient()),
                {"client": f"{c.addr}:{c.port}", "session_id": f"0x{c.session_id:08x}"},
            )

    labels = ("client", "session_id")
    registry.register(StatsCollector("pyum", "srs", SRS.SRS.DESCRIPTOR, srs))  # type: ignore[arg-type]
    registry.register(StatsCollector("pyum", "srs_error", SRS.SRSError.DESCRIPTOR, srs_error))  # type: ignore[arg-type]
    registry.register(
        StatsCollector(
            "pyum",
            "srs_client",
            SRS.UMClient.DESCRIPTOR,  # type: ignore[arg-type]
            clients,
            labelnames=labels,
            exclude=("um_client_info",),
        )
    )
    return registry


def _log_events(events: list[SRSEvent]) -> None:
    for ev in events:
        c = ev.client
        if ev.kind == "UM_CLIENT_CONNECT":
            log.info(
                "Registration protocolVersion[%d] received for client[%s:%d] sessionID[0x%08x]",
                c.protocol_version,
                c.addr,
                c.port,
                c.session_id,
            )
        elif ev.kind == "UM_CLIENT_DISCONNECT":
            log.info(
                "TCP Disconnect received for client[%s:%d] sessionId[0x%08x] (%s)",
                c.addr,
                c.port,
                c.session_id,
                ev.detail,
            )


async def _start_debug_monitor(
    config: SRSConfig,
    core: SRSServer,
    listening: tuple[str, int],
    monotonic: Callable[[], float],
) -> WebPages | None:
    """``<debug-monitor>``: a support page; if it cannot start, the SRS goes on without it."""
    pages = debug_pages(core, config, listening=listening, monotonic=monotonic)
    try:
        await pages.start(
            resolve_interface(config.debug_monitor_interface), config.debug_monitor_port
        )
    except OSError as exc:
        log.error(
            "debug monitor not started on %s:%d: %s",
            config.debug_monitor_interface,
            config.debug_monitor_port,
            exc,
        )
        return None
    return pages


async def serve(
    config: SRSConfig,
    *,
    log_setup: LogSetup | None = None,
    metrics: tuple[str, int] | None = None,
    stopping: asyncio.Event | None = None,
    java_info: int = 0,
    monitor_file: str | None = None,
) -> int:
    """Run the SRS until SIGTERM/SIGINT (or ``stopping``); returns the exit status."""
    loop = asyncio.get_running_loop()
    signals: StopSignals | None = None
    if stopping is None:
        signals = StopSignals(loop, on_reload=log_setup.reopen if log_setup else None)
        signals.install()
        stopping = signals.stopping
    log.info("pyum SRS %s (Stateful Resolver Service) starting", pyum_version)
    log.info("SRS Protocol Version: %d", PROTOCOL_VERSION)
    if java_info:
        log.info("platform: Python %s on %s", sys.version.split()[0], platform.platform())
        if java_info > 1:
            log.info("executable %s, pid %d, cwd %s", sys.executable, os.getpid(), os.getcwd())
    address = resolve_interface(config.interface)
    core = SRSServer(server_config(config), now=loop.time())
    # Connection events kept (logged, and published once the stats service is up) from the
    # first connection: the port accepts them from here on, before "listening" is logged.
    core.keep_events = True
    stats: StatsService[SRSEvent] | None = None

    def on_events(events: list[SRSEvent]) -> None:
        _log_events(events)
        if stats is not None:
            stats.receive_events(events)

    refusal_log = RefusalLog(log, loop.time, call_at=loop.call_at)
    endpoint = SRSServerEndpoint(core, on_events=on_events, on_refusals=log_refusals(refusal_log))
    host, port = await endpoint.start(address, config.port)
    memory_check: asyncio.TimerHandle | None = None

    def check_memory() -> None:
        nonlocal memory_check
        release_memory_if_freed(core)
        memory_check = loop.call_later(MEMORY_CHECK_INTERVAL, check_memory)

    memory_check = loop.call_later(MEMORY_CHECK_INTERVAL, check_memory)
    log.info("SRS Server IP address: %s port: %d", host, port)
    metrics_server: MetricsServer | None = None
    debug: WebPages | None = None
    pid: PidFile | None = None
    try:
        stats = await StatsService.start(
            monitor_settings(config),
            SRSStats(config, core),
            control_handler(config),
            sender_ipv4=address,
            log=log,
            monitor_file=monitor_file,
            pid=os.getpid(),
        )
        if metrics is not None:
            metrics_server = MetricsServer(
                metric_registry(core, endpoint, stats.publisher if stats else None)
            )
            mhost, mport = await metrics_server.start(*metrics)
            log.info("metrics on http://%s:%d/metrics", mhost, mport)
        if config.debug_monitor_enabled:
            debug = await _start_debug_monitor(config, core, (host, port), loop.time)
        if config.pid_file:  # before "listening": whoever waits for that line may read it
            pid = PidFile(config.pid_file)
            pid.write()
        log.info("listening on %s:%d", host, port)
        await stopping.wait()
    finally:
        if memory_check is not None:
            memory_check.cancel()
        await endpoint.close()
        if stats is not None:
            await stats.close()
        if metrics_server is not None:
            await metrics_server.close()
        if debug is not None:
            await debug.close()
        if pid is not None:
            pid.remove()
        if signals is not None:
            signals.uninstall()
        s = core.snapshot_stats()
        log.info(
            "stopped: %d connects, %d disconnects, %d sources, %d malformed connections",
            s.clients_connects_count,
            s.clients_disconnects_count,
            core.source_count(),
            core.refused.connections_malformed,
        )
    return 0
