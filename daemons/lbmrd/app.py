"""lbmrd wired up: configuration -> relay core + UDP endpoint + timer + metrics.

The order matters (umcore.daemon.lifecycle): everything is checked before anything binds; the
pid file is written once the socket listens; at stop the socket closes, then the pid file goes.
"""

from __future__ import annotations

import asyncio
import logging

from daemons.lbmrd.webmon import LbmrdWebPages
from umcore import __version__ as pyum_version
from umcore.aio.timer import CoreTimer
from umcore.aio.udp import DatagramEndpoint
from umcore.config.lbmrd import LbmrdConfig
from umcore.daemon.lifecycle import StopSignals
from umcore.daemon.logs import LogSetup, RateLimitedLog
from umcore.daemon.metrics import MetricSpec, MetricsServer, new_registry
from umcore.daemon.pidfile import PidFile
from umcore.daemon.refusals import RefusalLog
from umcore.lbmrd.core import MAX_CLIENTS, LbmrdRelay, NatRule, NatTable

__all__ = ["REFUSED_TABLE_FULL", "metric_specs", "nat_table", "serve"]

log = logging.getLogger("lbmrd")

# The kind of the client-table refusal in the log (its own rate-limited line, see
# umcore.daemon.refusals).
REFUSED_TABLE_FULL = "client table full"


def nat_table(config: LbmrdConfig) -> NatTable:
    return NatTable(
        ((d.name, d.networks) for d in config.domains),
        (
            (
                t.source,
                t.destination,
                [
                    NatRule(r.match_address, r.match_port, r.replace_address, r.replace_port)
                    for r in t.rules
                ],
            )
            for t in config.transforms
        ),
    )


def metric_specs(relay: LbmrdRelay, endpoint: DatagramEndpoint) -> list[MetricSpec]:
    c = relay.counters
    return [
        MetricSpec("lbmrd_clients_active", "gauge", "Clients in the table", lambda: relay.active_clients),
        MetricSpec("lbmrd_datagrams_received", "counter", "Datagrams received", lambda: c.datagrams_in),
        MetricSpec("lbmrd_bytes_received", "counter", "Bytes received", lambda: c.bytes_in),
        MetricSpec("lbmrd_datagrams_sent", "counter", "Datagrams sent (forwarded copies and keepalives)", lambda: endpoint.datagrams_sent),
        MetricSpec("lbmrd_bytes_sent", "counter", "Bytes sent", lambda: endpoint.bytes_sent),
        MetricSpec("lbmrd_datagrams_forwarded", "counter", "Received datagrams forwarded to the other clients", lambda: c.forwarded),
        MetricSpec("lbmrd_datagrams_dropped", "counter", "Received datagrams dropped (malformed or from refused clients)", lambda: c.dropped),
        MetricSpec("lbmrd_datagrams_malformed", "counter", "Received datagrams that were not valid topic resolution", lambda: c.malformed),
        MetricSpec("lbmrd_client_keepalives_received", "counter", "Client keepalives received", lambda: c.client_keepalives),
        MetricSpec("lbmrd_keepalives_sent", "counter", "Resolver keepalives sent", lambda: c.keepalives_sent),
        MetricSpec("lbmrd_nat_rewrites", "counter", "Forwarded copies rewritten by a NAT rule", lambda: c.nat_rewrites),
        MetricSpec("lbmrd_clients_registered", "counter", "Clients added to the table", lambda: c.clients_registered),
        MetricSpec("lbmrd_clients_expired", "counter", "Clients removed after their ttl", lambda: c.clients_expired),
        MetricSpec("lbmrd_clients_refused", "counter", "New clients refused: table full", lambda: c.clients_refused),
        MetricSpec("lbmrd_send_dropped", "counter", "Sends dropped: socket send buffer full", lambda: endpoint.send_dropped),
        MetricSpec("lbmrd_send_errors", "counter", "Sends the kernel refused", lambda: endpoint.send_errors),
        MetricSpec("lbmrd_receive_errors", "counter", "Socket receive errors", lambda: endpoint.receive_errors),
    ]  # fmt: skip


async def serve(
    config: LbmrdConfig,
    address: str,
    *,
    log_setup: LogSetup | None = None,
    metrics: tuple[str, int] | None = None,
    pid_file: str | None = None,
    stopping: asyncio.Event | None = None,
    web: tuple[str, int] | None = None,
    max_clients: int = MAX_CLIENTS,
) -> int:
    """Run lbmrd on ``address:config.port`` until SIGTERM/SIGINT (or ``stopping`` is set);
    ``web``: serve its web pages (daemons.lbmrd.webmon) on that host and port;
    ``max_clients``: the bound on the client table (``--max-clients``, pyum)."""
    loop = asyncio.get_running_loop()
    signals: StopSignals | None = None
    if stopping is None:
        signals = StopSignals(loop, on_reload=log_setup.reopen if log_setup else None)
        signals.install()
        stopping = signals.stopping
    nat = nat_table(config)
    relay = LbmrdRelay(
        now=loop.time(),
        ttl=config.ttl_s,
        activity=config.activity_s,
        nat=nat,
        max_clients=max_clients,
    )
    counters = relay.counters
    limited = RateLimitedLog(log, loop.time)
    refusals = RefusalLog(log, loop.time, call_at=loop.call_at)
    refusal_reason = (
        f"the table holds {max_clients} clients (--max-clients); its datagrams are dropped "
        "and it gets no keepalives"
    )
    endpoint: DatagramEndpoint | None = None
    timer: CoreTimer

    def on_timer() -> None:
        assert endpoint is not None
        expired = counters.clients_expired
        for payload, addr in relay.handle_timer(loop.time()):
            endpoint.sendto(payload, addr)
        if counters.clients_expired != expired:
            log.info(
                "removed %d client(s) silent for more than %g s; %d active",
                counters.clients_expired - expired,
                relay.ttl,
                relay.active_clients,
            )
        timer.arm(relay.next_timer())

    def on_datagram(data: bytes | memoryview, addr: tuple[str, int]) -> None:
        malformed = counters.malformed
        registered = counters.clients_registered
        refused = counters.clients_refused
        out = relay.receive_datagram(data, addr, loop.time())
        if out:
            send_batch(out)
        if counters.malformed != malformed:
            limited.warning(
                "malformed",
                "dropped a datagram from %s:%d that is not valid topic resolution "
                "(%d bytes, first byte 0x%02x); %d so far",
                addr[0],
                addr[1],
                len(data),
                data[0] if len(data) else 0,
                counters.malformed,
            )
        elif counters.clients_registered != registered:
            limited.log(logging.INFO, "new-client", "new client %s:%d", addr[0], addr[1])
            # The relay's next deadline only moves when its table stops being empty (and in
            # handle_timer, which re-arms itself): no re-arm on the forwarding path.
            timer.arm(relay.next_timer())
        elif counters.clients_refused != refused:
            refusals.note(REFUSED_TABLE_FULL, f"{addr[0]}:{addr[1]}", refusal_reason)

    timer = CoreTimer(loop, on_timer)
    log.info(
        "pyum lbmrd %s (unicast UDP topic resolution daemon) starting on %s",
        pyum_version,
        "uvloop" if type(loop).__module__.startswith("uvloop") else "asyncio's default loop",
    )
    for warning in config.warnings:
        log.warning("%s", warning)
    endpoint = await DatagramEndpoint.bind(
        address, config.port, on_datagram, rcvbuf=config.rcvbuf, sndbuf=config.sndbuf
    )
    send_batch = endpoint.send_batch
    granted_rcv, granted_snd = endpoint.socket_buffers()
    # Linux reports twice what it grants (bookkeeping included); less than asked means capped by
    # net.core.rmem_max / wmem_max.
    if granted_rcv < config.rcvbuf:
        log.warning(
            "receive buffer: asked %d bytes, the kernel granted %d (raise net.core.rmem_max)",
            config.rcvbuf,
            granted_rcv,
        )
    if granted_snd < config.sndbuf:
        log.warning(
            "send buffer: asked %d bytes, the kernel granted %d (raise net.core.wmem_max)",
            config.sndbuf,
            granted_snd,
        )
    metrics_server: MetricsServer | None = None
    web_pages: LbmrdWebPages | None = None
    pid: PidFile | None = None
    try:
        if metrics is not None:
            metrics_server = MetricsServer(new_registry(metric_specs(relay, endpoint)))
            host, port = await metrics_server.start(*metrics)
            log.info("metrics on http://%s:%d/metrics", host, port)
        if web is not None:
            web_pages = LbmrdWebPages(relay, endpoint, config, nat, monotonic=loop.time)
            await web_pages.start(*web)
        timer.arm(relay.next_timer())
        host, port = endpoint.local_address
        # The pid file before the "listening" line: whoever waits for that line may read it.
        if pid_file is not None:
            pid = PidFile(pid_file)
            pid.write()
        log.info(
            "listening on %s:%d (ttl %g s, activity %g s, %d NAT transform(s), at most %d clients)",
            host,
            port,
            config.ttl_s,
            config.activity_s,
            len(config.transforms),
            relay.max_clients,
        )
        await stopping.wait()
    finally:
        timer.cancel()
        endpoint.close()
        if metrics_server is not None:
            await metrics_server.close()
        if web_pages is not None:
            await web_pages.close()
        if pid is not None:
            pid.remove()
        if signals is not None:
            signals.uninstall()
        log.info(
            "stopped: %s",
            ", ".join(f"{k} {v}" for k, v in counters.as_dict().items()),
        )
    return 0
