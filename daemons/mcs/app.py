"""MCS wired up: a monitoring receiver -> headers read -> batches -> conversion workers -> the
writer thread (:mod:`daemons.mcs.workers`).

The order (umcore.daemon.lifecycle): the configuration, the connector (the database exists and
has UM's tables; the Parquet directory is writable) and the receiver's UM configuration are all
checked before anything starts (``__main__``); then the conversion workers start (a worker that
cannot: exit 1), the monitoring context joins the statistics topic, the metrics and status pages
start, the pid file is written.  At stop (SIGINT/SIGTERM) the receiver closes first, what was
received is handed to the workers, every batch is converted and stored, the workers end and the
connector is closed (UM: "SIGINT = clean shutdown, outstanding IO finished"), then the pid file
goes.  Workers that keep dying (more than :data:`~daemons.mcs.workers.MAX_RESTARTS` within
:data:`~daemons.mcs.workers.RESTART_WINDOW` seconds) stop the daemon the same way, with exit
status 1; a single death is logged, counted and the worker replaced.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from typing import Any

from daemons.mcs.connectors import Connector, ParquetConnector, SqliteConnector
from daemons.mcs.workers import Intake, WorkerPool, WorkerStartError
from umcore import __version__ as pyum_version
from umcore.config.mcs import McsConfig
from umcore.daemon.lifecycle import StopSignals
from umcore.daemon.logs import LogSetup, configure_log_element
from umcore.daemon.metrics import MetricSpec, MetricsServer, new_registry
from umcore.daemon.pidfile import PidFile
from umcore.daemon.web import Block, Heading, Para, Table, WebPages
from umcore.errors import ConfigError
from umcore.monitor.attributes import decode_stats
from umcore.monitor.framing import LBMMonError
from umcore.monitor.modopts import MONITOR_CONTEXT_NAME, TransportOpts, monitoring_attributes

__all__ = [
    "BATCH",
    "FLUSH_INTERVAL",
    "configure_logging",
    "counts",
    "make_connector",
    "receiver_attributes",
    "serve",
]

log = logging.getLogger("MCS")

# Records handed to the writer at once at most, and how often what was received is handed over:
# a transaction per quarter second keeps SQLite's per-commit cost small against the rows.
BATCH = 5000
FLUSH_INTERVAL = 0.25


def configure_logging(config: McsConfig, *, level: int = logging.INFO) -> LogSetup:
    """``<daemon><log>``: console (stdout) or a rolling file.  OSError if it cannot be opened."""
    lg = config.log
    return configure_log_element(
        lg.type, lg.file, size_mb=lg.size, frequency=lg.frequency, max_history=lg.max_history,
        compression=lg.compression, level=level,
    )  # fmt: skip


def make_connector(config: McsConfig) -> Connector:
    """The configured connector, opened; ConfigError (naming the properties file) when its
    database or directory is missing or unusable."""
    source = config.properties_file or f"{config.source}: <connector>"
    if config.connector == "parquet":
        if not config.parquet_directory:
            raise ConfigError(
                "the parquet connector needs parquet_directory in <properties-file>",
                source=source, what="parquet_directory",
            )  # fmt: skip
        return ParquetConnector(config.parquet_directory, source=source)
    if not config.database:
        raise ConfigError(
            "the sqlite connector needs sqlite_database_path in <properties-file>",
            source=source, what="sqlite_database_path",
        )  # fmt: skip
    return SqliteConnector(config.database, source=source)


def receiver_attributes(config: McsConfig) -> dict[str, Any]:
    """The monitoring context's attribute objects (``<config-file>`` applied); ConfigError
    naming the file and line of a bad setting."""
    opts = TransportOpts(
        config=config.config_file, topic=config.topic, wctopic=config.wildcard_topic
    )
    return monitoring_attributes(opts)


def counts(intake: Intake, pool: WorkerPool) -> dict[str, int]:
    """The messages received: in all; stored per kind; not stored -- control, other formats
    (raw), unparsable (bad: by the header, or by the worker's decode), dropped (the received
    list was full).  A kind's count grows when a worker has decoded the message."""
    a, d = intake.counts, pool.decoded
    return {
        "received": a["received"],
        "ums": d["ums"],
        "ump": d["ump"],
        "dro": d["dro"],
        "srs": d["srs"],
        "control": a["control"] + d["control"],
        "raw": a["raw"] + d["raw"],
        "bad": a["bad"] + d["bad"],
        "dropped": a["dropped"],
    }


def _status_pages(
    config: McsConfig, intake: Intake, writer: WorkerPool, where: str, monotonic: Any
) -> WebPages:
    pages = WebPages(
        monotonic=monotonic, label="status page", title="pyum MCS", daemon="MCS",
        log=log,
    )  # fmt: skip

    def data() -> dict[str, Any]:
        return {
            "receiving": where,
            "connector": config.connector,
            "destination": config.database or config.parquet_directory,
            "received": counts(intake, writer),
            "pending": intake.pending,
            "written": dict(writer.written),
            "queued_batches": writer.queued,
            "dropped_by_writer": writer.dropped,
            "failed": writer.failed,
            "worker_crashes": writer.worker_crashes,
            "fatal": writer.fatal,
            "last_error": writer.fatal or writer.last_error or writer.last_bad or intake.last_error,
        }

    def blocks(d: dict[str, Any]) -> list[Block]:
        return [
            Para(
                f"Receiving {d['receiving']}; writing to the {d['connector']} connector "
                f"({d['destination']})."
            ),
            Heading("Messages"),
            Table(["counter", "value"], sorted(d["received"].items())),
            Heading("Written"),
            Table(["kind", "rows"], sorted(d["written"].items())),
            Table(
                ["pending", "queued batches", "dropped by the writer", "failed", "worker crashes"],
                [
                    [
                        d["pending"],
                        d["queued_batches"],
                        d["dropped_by_writer"],
                        d["failed"],
                        d["worker_crashes"],
                    ]
                ],
            ),
            Para(f"Last error: {d['last_error'] or 'none'}"),
        ]

    pages.add_page("/", title="MCS", data=data, render=blocks, refresh_s=5)
    return pages


def _registry(intake: Intake, writer: WorkerPool) -> Any:
    def counter(name: str) -> Any:
        return lambda: counts(intake, writer)[name]

    def written(kind: str) -> Any:
        return lambda: writer.written[kind]

    return new_registry(
        [
            *(
                MetricSpec(f"pyum_mcs_received_{k}", "counter", f"Statistics messages: {k}", counter(k))
                for k in counts(intake, writer)
            ),
            *(
                MetricSpec(f"pyum_mcs_written_{k}", "counter", f"Rows written: {k}", written(k))
                for k in writer.written
            ),
            MetricSpec("pyum_mcs_pending", "gauge", "Messages waiting to be batched", lambda: intake.pending),
            MetricSpec("pyum_mcs_writer_queued_batches", "gauge", "Batches queued for the conversion workers", lambda: writer.queued),
            MetricSpec("pyum_mcs_writer_dropped", "counter", "Records dropped: the writer's queue was full", lambda: writer.dropped),
            MetricSpec("pyum_mcs_write_failed", "counter", "Records the connector failed to write", lambda: writer.failed),
            MetricSpec("pyum_mcs_worker_crashes", "counter", "Conversion worker processes that died", lambda: writer.worker_crashes),
        ]
    )  # fmt: skip


async def serve(
    config: McsConfig,
    connector: Connector,
    *,
    attributes: dict[str, Any] | None = None,
    log_setup: LogSetup | None = None,
    metrics: tuple[str, int] | None = None,
    web_monitor: tuple[str, int] | None = None,
    verbose: bool = False,
    stopping: asyncio.Event | None = None,
) -> int:
    """Collect until SIGTERM/SIGINT (or ``stopping``); returns the exit status."""
    from umcore.api import Context
    from umcore.api import message as m

    loop = asyncio.get_running_loop()
    signals: StopSignals | None = None
    if stopping is None:
        signals = StopSignals(loop, on_reload=log_setup.reopen if log_setup else None)
        signals.install()
        stopping = signals.stopping
    log.info("pyum MCS %s (Monitoring Collector Service) starting", pyum_version)
    attrs = attributes if attributes is not None else receiver_attributes(config)
    intake = Intake()
    writer = WorkerPool(connector, on_fatal=lambda reason: loop.call_soon_threadsafe(stopping.set))
    try:
        await asyncio.to_thread(writer.start)
    except WorkerStartError as exc:
        log.error("not started: %s", exc)
        connector.close()
        if signals is not None:
            signals.uninstall()
        return 1

    def flush() -> None:
        while batch := intake.take_batch(BATCH):
            writer.submit(batch)

    def on_message(msg: m.Message) -> None:
        if msg.type != m.MSG_DATA:
            if msg.type in (m.MSG_BOS, m.MSG_EOS):
                log.info("[%s] %s", msg.source, msg.type_name)
            return
        bad = intake.counts["bad"]
        kind = intake.receive(msg.data, msg.source, time.time())
        if kind is not None:
            if verbose:  # the one place the daemon's process decodes a message
                try:
                    a = decode_stats(msg.data).attributes
                    sender = f"{a.application_id!r} ({a.sender_ipv4})"
                except LBMMonError as exc:  # a worker will count it bad
                    sender = f"? ({exc})"
                log.info("%s message from %s at %s", kind, sender, msg.source)
            if intake.pending >= BATCH:
                flush()
        elif intake.counts["bad"] != bad and (verbose or intake.counts["bad"] == bad + 1 == 1):
            log.warning("bad statistics message %s (counted; the first is logged)",
                        intake.last_error)  # fmt: skip

    where = (
        f"topics matching {config.wildcard_topic!r}"
        if config.wildcard_topic
        else f"topic {config.topic!r}"
    )
    metrics_server: MetricsServer | None = None
    status: WebPages | None = None
    pid: PidFile | None = None
    ticker: asyncio.Task[None] | None = None
    try:
        ctx = await Context.create(attrs["context"], name=MONITOR_CONTEXT_NAME)
    except BaseException:
        await asyncio.to_thread(writer.close)
        raise
    receiver: Any = None
    try:
        if config.wildcard_topic:
            receiver = await ctx.create_wildcard_receiver(
                config.wildcard_topic, on_message, attributes=attrs["wildcard_receiver"]
            )
        else:
            receiver = await ctx.create_receiver(
                config.topic, on_message, attributes=attrs["receiver"]
            )

        async def tick() -> None:
            while True:
                await asyncio.sleep(FLUSH_INTERVAL)
                flush()

        ticker = asyncio.create_task(tick(), name="MCS flush")
        if metrics is not None:
            metrics_server = MetricsServer(_registry(intake, writer))
            mhost, mport = await metrics_server.start(*metrics)
            log.info("metrics on http://%s:%d/metrics", mhost, mport)
        if web_monitor is not None:
            status = _status_pages(config, intake, writer, where, loop.time)
            try:
                await status.start(*web_monitor)
            except OSError as exc:
                log.error("status page not started on %s:%d: %s", *web_monitor, exc)
                status = None
        dest = config.database or config.parquet_directory
        if config.pid_file:  # before the "collecting" line: whoever waits for it may read it
            pid = PidFile(config.pid_file)
            pid.write()
        log.info("collecting %s into the %s connector (%s)", where, config.connector, dest)
        await stopping.wait()
        log.info("Shutdown requested")
    finally:
        if ticker is not None:
            ticker.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await ticker
        if receiver is not None:
            await receiver.close()
        await ctx.close()
        flush()
        await asyncio.to_thread(writer.close)
        if metrics_server is not None:
            await metrics_server.close()
        if status is not None:
            await status.close()
        if pid is not None:
            pid.remove()
        if signals is not None:
            signals.uninstall()
        c = counts(intake, writer)
        log.info(
            "stopped: received %d (ums %d, ump %d, dro %d, srs %d; control %d, other formats %d, "
            "bad %d, dropped %d); written %d, dropped by the writer %d, failed %d; "
            "conversion worker deaths %d",
            c["received"], c["ums"], c["ump"], c["dro"], c["srs"], c["control"], c["raw"],
            c["bad"], c["dropped"], sum(writer.written.values()), writer.dropped, writer.failed,
            writer.worker_crashes,
        )  # fmt: skip
    if writer.fatal:
        log.error("exit status 1: %s", writer.fatal)
        return 1
    return 0
