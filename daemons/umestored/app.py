"""umestored wired up: per ``<store>`` an engine, a request port, a StoreCore, a StoreIO, a timer.

Theory of operation
-------------------
One asyncio loop runs every Store instance of the file.  Per Store (:class:`StoreRuntime`):

- an :class:`~umcore.engine.context.Engine`: the Store's UM context (topic resolution, the
  transport sessions it joins as a receiver of persisted sources), options from
  :class:`~daemons.umestored.prepare.StorePlan`;
- a :class:`~umcore.aio.request_port.RequestPort` on ``<store interface port>``: registrations,
  keepalives, consumption ACKs and retransmission requests come in as LBMC control messages;
  answers leave as UIMs;
- the :class:`~umcore.store.core.StoreCore` (sans-IO), restored from the repositories and state
  files :func:`~umcore.aio.storeio.load_store` read back before anything bound;
- a :class:`~umcore.aio.storeio.StoreIO`: the disk writer thread running the core's I/O jobs;
- one :class:`~umcore.aio.timer.CoreTimer` re-armed to the core's ``next_timer()``.

Inputs (control messages, raw-receiver frames -- a TCP read's or a datagram's at a time --
and BOS/EOS, I/O completions, the timer) go to the core at once; its outputs are taken in one
:meth:`StoreRuntime.flush`, scheduled once per loop iteration however many inputs arrived:
UIMs to the request port, I/O jobs to the writer, topics to join or leave to the engine's raw
receivers, events to the log.

Stop (SIGINT/SIGTERM): "Shutdown requested"; each Store stops taking registrations
(``StoreCore.shutdown``, which also queues every state file) and data (its raw receivers
close), its outstanding writes and state files are finished (``StoreIO.drain``, repeated while
completions bring new jobs, bounded), then its request port, engine and writer close;
"Shutdown complete".  A second SIGINT exits at once
(:class:`~umcore.daemon.lifecycle.StopSignals`, trap 27).
"""

from __future__ import annotations

import asyncio
import gc
import logging
import sys
import time
from collections.abc import Callable, Iterator

from prometheus_client import CollectorRegistry
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from daemons.umestored.logsetup import NOTICE
from daemons.umestored.monitor import MonitorCollector, StoreMonitor, ump_collectors
from daemons.umestored.prepare import ANY, Prepared, StorePlan
from daemons.umestored.proxy import ProxySources
from daemons.umestored.trace import StageTrace
from daemons.umestored.webmon import StoreWebMonitor, parse_web_monitor, start_store_web_monitor
from umcore import __version__ as pyum_version
from umcore.aio.request_port import RequestPort
from umcore.aio.storeio import LoadedStore, StoreIO, load_store
from umcore.aio.timer import CoreTimer
from umcore.config.store import StoreDaemon, StoreInstance
from umcore.daemon.lifecycle import StopSignals
from umcore.daemon.logs import LogSetup, RateLimitedLog
from umcore.daemon.metrics import MetricsServer
from umcore.daemon.pidfile import PidFile
from umcore.engine.context import Engine
from umcore.engine.raw import RawReceiver, RawSession
from umcore.errors import RemoteProtocolError, UMError
from umcore.store.core import StoreCore
from umcore.store.events import AckDiscarded, ControlRejected, StoreEvent
from umcore.store.io import IoDone
from umcore.store.repository import RepositoryConfig
from umcore.wire import lbmc

__all__ = [
    "StoreRuntime",
    "metric_registry",
    "repository_configs",
    "serve",
]

log = logging.getLogger("umestored")

# Rounds of "drain the writer, hand the completions to the core" at stop: each round finishes
# what the previous one's completions asked for (a state write after the last data write...);
# a core that keeps asking after this many is logged and left.
MAX_DRAIN_ROUNDS = 64
# Bound on one round of draining at stop (a disk that hangs must not hang the stop forever;
# the systemd unit allows 120 s in all).
DRAIN_TIMEOUT_S = 60.0
# Repositories exported per Store on a scrape (each is a dozen series): a Store with more
# sources shows the first ones; the per-Store totals still count them all.
MAX_REPOSITORY_SERIES = 1000


def repository_configs(instance: StoreInstance) -> Callable[[str], RepositoryConfig | None]:
    """topic -> its repository settings (the first matching ``<topic>``), for load_store."""

    def config_of(topic: str) -> RepositoryConfig | None:
        matched = instance.match(topic)
        return RepositoryConfig.from_topic(matched) if matched is not None else None

    return config_of


class StoreRuntime:
    """One ``<store>`` running (see the module docstring)."""

    def __init__(
        self,
        plan: StorePlan,
        loaded: LoadedStore,
        wall_offset: float,
        trace: StageTrace | None = None,
    ) -> None:
        self.plan = plan
        #: Stage timestamps of the data path (daemons.umestored.trace; None: off, the default).
        self.trace = trace
        self.name = plan.instance.name
        self.log = logging.getLogger(f"umestored.{self.name}")
        self.loop = asyncio.get_running_loop()
        self.loaded = loaded
        self.wall_offset = wall_offset
        self.engine: Engine | None = None
        self.port: RequestPort | None = None
        self.core: StoreCore | None = None
        self.io: StoreIO | None = None
        #: Proxy sources this Store runs (daemons.umestored.proxy).
        self.proxies: ProxySources | None = None
        self.timer = CoreTimer(self.loop, self._on_timer)
        self.raw: dict[str, RawReceiver] = {}
        self.address: tuple[str, int] = (plan.bind_ip, 0)
        self._flush_pending = False
        #: Set at stop: no raw receiver is opened any more.
        self.stopping = False
        #: UIMs the request port refused (its per-destination buffer was full).
        self.sends_refused = 0
        #: I/O jobs handed to the writer (the stop drains until a round adds none).
        self.jobs_submitted = 0
        #: Control messages the core rejected (not store messages).
        self.control_rejected = 0
        self.limited = RateLimitedLog(self.log, self.loop.time)
        # UMP statistics (daemons.umestored.monitor): the core's events, and since when.
        self.on_events: Callable[[list[StoreEvent]], None] | None = None
        self.started_at = self.loop.time()

    # ---------------------------------------------------------------- start
    async def start(self) -> None:
        plan = self.plan
        engine = Engine(plan.context_attributes, name=plan.context_name)
        self.engine = engine
        await engine.start()
        o = engine.options
        port = RequestPort(
            self._on_control,
            ctxinst=engine.features.ctxinst,
            deletion_timeout=o.seconds("response_tcp_deletion_timeout"),
            max_buffer=int(o.get("response_session_maximum_buffer")),
            nodelay=bool(o.get("response_tcp_nodelay")),
            response_interface=None if plan.bind_ip == ANY else plan.bind_ip,
            security=engine.security,  # the Store context's use_tls/compression (seed 10.4.6)
        )
        self.port = port
        fixed = plan.instance.port
        low = fixed or int(o.get("request_tcp_port_low"))
        high = fixed or int(o.get("request_tcp_port_high"))
        await port.start(plan.bind_ip, low, high, int(o.get("request_tcp_listen_backlog")))
        ip = engine.advertised_ip if plan.bind_ip == ANY else plan.bind_ip
        self.address = (ip, port.port)
        trace = self.trace
        self.io = StoreIO(
            self.loop, self._on_io_done, on_batch=trace.performed if trace is not None else None
        )
        self.core = StoreCore(
            plan.instance,
            store_index=plan.index,
            address=self.address,
            now=self.loop.time(),
            restored=self.loaded.sources,
            wall_offset=self.wall_offset,
        )
        self.proxies = ProxySources(engine, self.core, self.log, self._on_timer)
        self.flush()

    # ---------------------------------------------------------------- inputs
    def _on_control(self, msg: lbmc.LBMCMessage, peer_ip: str) -> None:
        assert self.core is not None
        accepted = self.core.receive_control(msg, peer_ip, self.loop.time())
        self._schedule()
        if not accepted:
            # a malformed store message costs the peer its connection (the request port
            # drops the connection it came on)
            raise RemoteProtocolError(f"bad store message from {peer_ip}")

    def _raw_receiver(self, topic: str) -> RawReceiver:
        """A raw receiver of ``topic`` handing its frames and BOS/EOS to the core."""
        assert self.engine is not None

        def on_frames(session: RawSession, frames: list[bytes]) -> None:
            # A read's (TCP) or a datagram's (LBT-RU/RM) frames at once: appended together and
            # ACKed together (one ranged stability ACK).
            core = self.core
            if core is not None:
                if self.trace is not None:
                    self.trace.read(session.topic_index, frames)
                core.receive_frames(session, frames, self.loop.time())
                self._schedule()

        def on_session(session: RawSession, active: bool) -> None:
            core = self.core
            if core is not None:
                core.receive_session(session, active, self.loop.time())
                self._schedule()

        return self.engine.open_raw_receiver(
            topic,
            on_frames=on_frames,
            on_session=on_session,
            attributes=self.plan.receiver_attributes(topic),
        )

    def _on_io_done(self, done: IoDone) -> None:
        if self.core is None:
            return
        if self.trace is not None:
            self.trace.completed(done)
        self.core.receive_io_done(done, self.loop.time())
        self._schedule()

    def _on_timer(self) -> None:
        assert self.core is not None
        self.core.handle_timer(self.loop.time())
        self.flush()

    # ---------------------------------------------------------------- outputs
    def _schedule(self) -> None:
        if not self._flush_pending:
            self._flush_pending = True
            self.loop.call_soon(self.flush)

    def flush(self) -> None:
        """Take every output of the core and act on it; re-arm the timer."""
        self._flush_pending = False
        core = self.core
        if core is None:
            return
        port = self.port
        trace = self.trace
        for dest, data in core.take_sends():
            if port is None or port.closed:
                self.sends_refused += 1
                continue
            if trace is not None:
                trace.sent(data)
            try:
                port.send(dest, data)
            except UMError:  # WouldBlock: that destination's buffer is full; UIMs may be lost
                self.sends_refused += 1
        jobs = core.take_io()
        if jobs and self.io is not None:
            self.jobs_submitted += len(jobs)
            if trace is not None:
                trace.submitted(jobs)
            self.io.submit(jobs)
        opens, closes = core.take_joins()
        for topic in closes:
            raw = self.raw.pop(topic, None)
            if raw is not None and self.engine is not None:
                self.engine.close_raw_receiver(raw)
        for topic in opens:
            if topic not in self.raw and self.engine is not None and not self.stopping:
                self.raw[topic] = self._raw_receiver(topic)
        events = core.take_events()
        if events and self.on_events is not None:
            self.on_events(events)
        if self.proxies is not None:
            if events and not self.stopping:
                self.proxies.handle(events)
            self.proxies.flush()
        for ev in events:
            if isinstance(ev, ControlRejected):
                # A peer's bytes that are not a store message: counted and logged, rate-limited
                # (a peer could send them at will); _on_control had its connection dropped.
                self.control_rejected += 1
                self.limited.log(ev.level, "control-rejected", "%s", ev.text)
            elif isinstance(ev, AckDiscarded):  # one per ACK of a deregistered receiver
                self.limited.log(ev.level, "ack-discarded", "%s", ev.text)
            else:
                self.log.log(ev.level, "%s", ev.text)
        self.timer.arm(core.next_timer())

    # ---------------------------------------------------------------- stop
    async def shutdown(self) -> None:
        """Stop taking registrations, finish outstanding writes and state (bounded)."""
        core, io = self.core, self.io
        if core is None or io is None:
            return
        core.shutdown(self.loop.time())
        # No new data either: what arrived is written, nothing more is taken in.
        self.stopping = True
        self._close_raw_receivers()
        self.flush()
        for _ in range(MAX_DRAIN_ROUNDS):
            before = self.jobs_submitted
            try:
                await asyncio.wait_for(io.drain(), DRAIN_TIMEOUT_S)
            except TimeoutError:
                self.log.error(
                    "disk writes did not finish within %g s; stopping without them",
                    DRAIN_TIMEOUT_S,
                )
                return
            self.flush()  # drain delivered every completion: take what they led to
            if self.jobs_submitted == before:
                return
        self.log.error("still writing after %d rounds; stopping anyway", MAX_DRAIN_ROUNDS)

    def _close_raw_receivers(self) -> None:
        engine = self.engine
        for raw in self.raw.values():
            if engine is not None:
                engine.close_raw_receiver(raw)
        self.raw.clear()

    async def close(self) -> None:
        self.timer.cancel()
        self.stopping = True
        self._close_raw_receivers()
        engine = self.engine
        if self.proxies is not None:
            await self.proxies.close()
        if self.port is not None:
            await self.port.close()
        if engine is not None:
            await engine.close()
        if self.io is not None:
            await self.io.close()
        self.core = None


class StoreCollector(Collector):
    """Prometheus, read at scrape time: per Store (label ``store``) its gauges, the core's
    counters, the writer's and request port's; per source repository (labels ``store``,
    ``reg_id``, ``topic``, ``kind``) its sequence window and counters, at most
    :data:`MAX_REPOSITORY_SERIES` repositories per Store (a scrape stays bounded)."""

    def __init__(self, runtimes: list[StoreRuntime]) -> None:
        self.runtimes = runtimes

    def collect(self) -> Iterator[Metric]:
        gauges: dict[str, GaugeMetricFamily] = {}
        counters: dict[str, CounterMetricFamily] = {}
        repo: dict[str, GaugeMetricFamily] = {}
        store_label = ["store"]
        repo_labels = ["store", "reg_id", "topic", "kind"]

        def gauge(name: str, help: str, store: str, value: float) -> None:
            fam = gauges.get(name)
            if fam is None:
                fam = gauges[name] = GaugeMetricFamily(
                    f"pyum_umestored_{name}", help, labels=store_label
                )
            fam.add_metric([store], value)

        def counter(name: str, store: str, value: float) -> None:
            fam = counters.get(name)
            if fam is None:
                fam = counters[name] = CounterMetricFamily(
                    f"pyum_umestored_{name}",
                    f"umestored: {name.replace('_', ' ')}",
                    labels=store_label,
                )
            fam.add_metric([store], value)

        for rt in self.runtimes:
            name = rt.name
            counter("uims_refused", name, rt.sends_refused)
            counter("io_jobs_submitted", name, rt.jobs_submitted)
            counter("control_rejected", name, rt.control_rejected)
            gauge("raw_receivers", "Topics joined (raw receivers open)", name, len(rt.raw))
            if rt.port is not None:
                counter("uim_connect_failures", name, rt.port.connect_failures)
                counter("request_port_bad_connections", name, rt.port.bad_connections)
                gauge("uim_connections", "Outgoing UIM connections", name, rt.port.outgoing)
            if rt.io is not None:
                io = rt.io
                counter("io_completed", name, io.completed)
                counter("io_errors", name, io.errors)
                counter("io_refused", name, io.refused)
                gauge("io_pending", "Disk jobs submitted and not completed", name, io.pending)
            core = rt.core
            if core is None:
                continue
            st = core.stats()
            gauge("sources", "Source registrations held", name, st.sources)
            gauge("receivers", "Receiver registrations held", name, st.receivers)
            gauge("topics", "Topics with at least one source", name, st.topics)
            gauge("retx_queue", "Retransmission requests waiting", name, st.retx_queue)
            for key, value in st.counters.items():
                counter(key, name, value)
            for r in st.repositories[:MAX_REPOSITORY_SERIES]:
                labels = [name, str(r.reg_id), r.topic, r.kind]
                for key, value in (("receivers", r.receivers), *r.counters.items()):
                    fam = repo.get(key)
                    if fam is None:
                        fam = repo[key] = GaugeMetricFamily(
                            f"pyum_umestored_repository_{key}",
                            f"umestored repository: {key.replace('_', ' ')}",
                            labels=repo_labels,
                        )
                    fam.add_metric(labels, value)
        yield from gauges.values()
        yield from counters.values()
        yield from repo.values()


def metric_registry(
    runtimes: list[StoreRuntime], monitor: StoreMonitor | None = None
) -> CollectorRegistry:
    registry = CollectorRegistry(auto_describe=True)
    registry.register(StoreCollector(runtimes))
    for collector in ump_collectors(lambda: runtimes):  # UMPMonMsg's figures
        registry.register(collector)
    if monitor is not None:  # daemon control and the statistics publisher's counters
        registry.register(MonitorCollector(monitor))
    return registry


def _log_daemon_settings(daemon: StoreDaemon) -> None:
    if daemon.daemon_monitor:
        log.log(
            NOTICE,
            "<daemon-monitor>: pyum publishes protobuf UMPMonMsg statistics, not the "
            "deprecated binary daemon statistics",
        )
    if daemon.uid or daemon.gid:
        log.log(
            NOTICE,
            "<uid>/<gid>: not applied by pyum; start umestored as the user it should run as "
            "(systemd: User= or DynamicUser=)",
        )


def _advertise_context_name(rt: StoreRuntime) -> None:
    """``context-name``: the Store's context answers name queries (``ume_store_name``) with
    the request port's address."""
    name = rt.plan.context_name
    if name is None or rt.engine is None:
        return
    ip, port = rt.address
    rt.engine.advertise_context_name(name, ip, port)
    rt.log.info("context-name %s advertised at %s:%d", name, ip, port)


def _start_failed(plan: StorePlan, what: str, exc: BaseException) -> int:
    """A Store that cannot start: one log line, one stderr line, exit status 1."""
    reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
    logging.getLogger(f"umestored.{plan.instance.name}").error("%s: %s", what, reason)
    sys.stderr.write(f"umestored: store {plan.instance.name!r}: {what}: {reason}\n")
    return 1


async def serve(
    prepared: Prepared,
    *,
    log_setup: LogSetup | None = None,
    metrics: tuple[str, int] | None = None,
    stopping: asyncio.Event | None = None,
    web_reset_by_get: bool = False,
    own_process: bool = False,
) -> int:
    """Run every Store of ``prepared`` until SIGINT/SIGTERM (or ``stopping``); exit status.
    ``web_reset_by_get``: the web monitor's rate reset also by GET (UM's link form).
    ``own_process``: the daemon owns the interpreter (``python -m daemons.umestored``): what
    start-up built is frozen out of the garbage collector's reach once the Stores are ready."""
    loop = asyncio.get_running_loop()
    signals: StopSignals | None = None
    if stopping is None:
        signals = StopSignals(loop, on_reload=log_setup.reopen if log_setup else None)
        signals.install()
        stopping = signals.stopping
    daemon = prepared.file.daemon
    log.info(
        "pyum umestored %s (persistent store) starting: %s, %d store(s), on %s",
        pyum_version,
        prepared.file.source,
        len(prepared.stores),
        "uvloop" if type(loop).__module__.startswith("uvloop") else "asyncio's default loop",
    )
    for warning in prepared.warnings:
        log.warning("%s", warning)
    _log_daemon_settings(daemon)
    runtimes: list[StoreRuntime] = []
    monitor: StoreMonitor | None = None
    metrics_server: MetricsServer | None = None
    web: StoreWebMonitor | None = None
    pid: PidFile | None = None
    status = 0
    trace = StageTrace.from_environment()
    # The loop's clock is the cores' (monotonic); this turns it into wall-clock time for the
    # arrival times repositories keep on disk.
    wall_offset = time.time() - loop.time()
    try:
        loaded: list[LoadedStore] = []
        for plan in prepared.stores:
            slog = logging.getLogger(f"umestored.{plan.instance.name}")
            try:
                ld = load_store(
                    plan.cache_dir,
                    plan.state_dir,
                    repository_configs(plan.instance),
                    now=loop.time(),
                    wall_offset=wall_offset,
                )
            except (UMError, OSError) as exc:  # a directory gone since the check, unreadable
                return _start_failed(plan, "cannot read its repositories and state", exc)
            for line in ld.repairs:
                slog.warning("%s", line)
            slog.info(
                "restored %d source(s) from %s and %s", len(ld.sources), plan.state_dir,
                plan.cache_dir,
            )  # fmt: skip
            loaded.append(ld)
        # <daemon-monitor>: UMP statistics and daemon control (None: not configured)
        monitor = await StoreMonitor.open(daemon, wall_offset=wall_offset)
        for plan, ld in zip(prepared.stores, loaded, strict=True):
            rt = StoreRuntime(plan, ld, wall_offset, trace)
            runtimes.append(rt)
            if monitor is not None:
                monitor.attach(rt)
            try:
                await rt.start()
            except (UMError, OSError) as exc:
                where = f"cannot listen on {plan.bind_ip}:{plan.instance.port}"
                return _start_failed(plan, where, exc)
            if monitor is not None:
                monitor.started(rt)
            host, port = rt.address
            rt.log.info(
                "listening on %s:%d (store index %d, %d topic pattern(s))",
                plan.bind_ip if plan.bind_ip != ANY else host,
                port,
                plan.index,
                len(plan.instance.topics),
            )
            _advertise_context_name(rt)
        if metrics is not None:
            metrics_server = MetricsServer(metric_registry(runtimes, monitor))
            mhost, mport = await metrics_server.start(*metrics)
            log.info("metrics on http://%s:%d/metrics", mhost, mport)
        # <web-monitor>: the Store web monitor (daemons.umestored.webmon)
        if daemon.web_monitor:
            web = await start_store_web_monitor(
                runtimes, parse_web_monitor(daemon.web_monitor), monotonic=loop.time,
                reset_by_get=web_reset_by_get, log=log,
            )  # fmt: skip
        if daemon.pidfile:
            pid = PidFile(daemon.pidfile)
            pid.write()
        if own_process:
            # Start-up's objects (modules, configuration, restored repositories) live as long
            # as the daemon: frozen, a full collection walks only what running created.  Not
            # frozen, each one walked them all: a 65-95 ms stall of every Store (data, ACKs)
            # measured with bench/persist at 50,000 msgs/s on a loaded 2-core machine.
            gc.collect()
            gc.freeze()
        for rt in runtimes:
            rt.log.info("Store %s ready to accept registrations", rt.name)
        await stopping.wait()
        log.info("Shutdown requested")
        for rt in runtimes:
            await rt.shutdown()
            rt.log.info("Store %s: writes and state finished", rt.name)
    finally:
        if monitor is not None:
            await monitor.close()
        for rt in reversed(runtimes):
            try:
                await rt.close()
            except Exception:  # one Store's failing close must not keep the others open
                status = 1
                rt.log.exception("closing failed")
        if metrics_server is not None:
            await metrics_server.close()
        if web is not None:
            await web.close()
        if pid is not None:
            pid.remove()
        if signals is not None:
            signals.uninstall()
        if trace is not None:
            try:
                trace.dump()
            except OSError as exc:
                log.error("cannot write the stage trace %s: %s", trace.path, exc)
        log.info("Shutdown complete")
    return status
