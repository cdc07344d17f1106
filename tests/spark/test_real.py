"""Every job over statistics real processes published, collected by a real ``MCS`` into UM's
SQLite database, each answer checked against plain SQL over that database (tests/spark/oracle.py).

Publishers: two contexts of this process with automatic monitoring (an LBT-RU source and its
receiver: source and receiver transport statistics, context statistics), a persistent source
and receiver on a real ``umestored`` whose daemon monitor publishes its repositories (store lag),
and DRO statistics sent on the statistics topic by this test (pyum has no DRO daemon yet, so
its messages are made here, framed as a DRO frames them)."""

from __future__ import annotations

import asyncio
import contextlib
import signal
import sqlite3
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.integration.daemon_proc import ROOT, DaemonProcess
from tests.integration.helpers import until
from tests.integration.persistkit import free_port
from tests.integration.test_mcs import mcs_xml, store_xml
from tests.spark.test_jobs import check_against_sql
from umcore.api import Context
from umcore.config.attributes import Configuration, reset_global_configuration
from umcore.errors import UMENoReg
from umcore.monitor.attributes import MonAttributes, encode_stats
from umcore.monitor.framing import PacketType
from umcore.monitor.pb import dro_mon_pb2
from umcore.spark.jobs import JOBS

pytestmark = pytest.mark.slow

WAIT = 60.0  # cold MCS and Store interpreters on a busy 2-core machine
STATS = "/29west/statistics"


@pytest.fixture
def mon_cfg(unused_udp_port: int, tmp_path: Path) -> Iterator[Path]:
    path = tmp_path / "mon.cfg"
    path.write_text(
        "context resolver_multicast_interface 127.0.0.1\n"
        "context resolver_multicast_address 224.9.10.98\n"
        f"context resolver_multicast_port {unused_udp_port}\n"
        "context transport_tcp_port_low 0\n"
        "context transport_tcp_port_high 0\n"
        "context request_tcp_port_low 0\n"
        "context request_tcp_port_high 0\n"
        "context request_tcp_interface 127.0.0.1\n"
        "source transport_tcp_interface 127.0.0.1\n"
        "context transport_lbtru_port_low 0\n"
        "context transport_lbtru_port_high 0\n"
        "source transport_lbtru_interface 127.0.0.1\n"
        "receiver transport_lbtru_port_low 0\n"
        "receiver transport_lbtru_port_high 0\n"
        "receiver transport_lbtru_interface 127.0.0.1\n"
    )
    cfg = Configuration()
    cfg.config_file(path)
    reset_global_configuration(cfg)
    yield path
    reset_global_configuration(None)


def _count(db: Path, table: str, needle: str) -> int:
    conn = sqlite3.connect(db)
    try:
        return sum(needle in r[0] for r in conn.execute(f"SELECT message FROM {table}"))
    finally:
        conn.close()


def _dro(t: int, sent: int) -> bytes:
    d = dro_mon_pb2.DROMonMsg()
    d.stats.local.gateway_name = "dro-real"
    ep = d.stats.portals.add(portal_name="ep-1").endpoint
    ep.send.transport_topic_fragments_sent = sent
    ep.send.transport_topic_fragments_dropped_would_block = sent // 10
    return encode_stats(
        PacketType.GATEWAY, d, MonAttributes(application_id="dro-real", timestamp=t)
    )


async def collect(tmp: Path, mon: Path) -> Path:
    db = tmp / "ummon.db"
    subprocess.run(
        [sys.executable, "-m", "daemons.mcs", "--init-db", str(db)],
        check=True,
        cwd=ROOT,
        timeout=60,
    )
    mcs_xml(tmp, "mcs", "sqlite", "sqlite_database_path=ummon.db")
    port = free_port()
    store_xml(tmp, mon, name="store-real", topic="orders", port=port)
    mcs = await DaemonProcess.start("mcs", str(tmp / "mcs.xml"), wait_listening=False)
    procs = [mcs]
    try:
        await mcs.wait_for_line(r"collecting topic '/29west/statistics'", WAIT)
        store = await DaemonProcess.start("umestored", str(tmp / "store.xml"), wait_listening=False)
        procs.append(store)
        await store.wait_for_line(r"ready to accept registrations", WAIT)
        mon = {"monitor_interval": "1", "monitor_format": "pb"}
        pub = await Context.create({**mon, "monitor_appid": "pub-real"})
        sub = await Context.create({**mon, "monitor_appid": "sub-real"})
        got: list[Any] = []
        rates = await sub.create_receiver("rates", got.append)
        orders_rcv = await sub.create_receiver("orders", got.append)
        rsrc = await pub.create_source("rates", attributes={"transport": "lbtru"})
        osrc = await pub.create_source("orders", attributes={"ume_store": f"127.0.0.1:{port}"})
        stats = await pub.create_source(STATS)

        async def publish() -> None:
            n = 0
            while True:
                n += 1
                await rsrc.send(b"r" * (10 + n % 7), flush=True)
                with contextlib.suppress(UMENoReg):  # until it has registered with the Store
                    await osrc.send(b"o%d" % n, flush=True)
                await asyncio.sleep(0.02)  # a paced publisher: about 50 messages/s per topic

        task = asyncio.create_task(publish())
        try:
            await until(
                lambda: stats.receivers >= 1, "MCS joins the statistics source", timeout=WAIT
            )
            for i, sent in enumerate((100, 250, 270)):
                await stats.send(_dro(1_767_225_600 + 60 * i, sent), flush=True)

            def enough() -> bool:
                return (
                    _count(db, "umsmonmsg", '"lbtru":{"msgsSent"') >= 4
                    and _count(db, "umsmonmsg", '"trDgramsSent"') >= 2
                    and _count(db, "umpmonmsg", '"rcvStats":[{') >= 3
                    and _count(db, "dromonmsg", "dro-real") == 3
                )

            await until(enough, "statistics of every kind in the database", timeout=WAIT)
        finally:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
            for obj in (rsrc, osrc, stats, rates, orders_rcv, pub, sub):
                await obj.close()
        assert got, "the receivers got messages"
        assert await mcs.stop(signal.SIGINT) == 0
    finally:
        for p in procs:
            if p.proc.returncode is None:
                await p.stop()
    return db


async def test_jobs_over_real_statistics_agree_with_sql(
    spark: Any, mon_cfg: Path, tmp_path: Path
) -> None:
    db = await collect(tmp_path, mon_cfg)
    for job in sorted(JOBS):
        rows = check_against_sql(spark, job, db)
        assert rows, f"{job}: nothing in the result"
    lag = JOBS["store-lag"].run(spark, str(db), 60).collect()
    assert {r.store for r in lag} == {"store-real"} and all(r.lag >= 0 for r in lag)
    rates = JOBS["source-rates"].run(spark, str(db), 60).where("transport = 'lbtru'").collect()
    assert sum(r.msgs for r in rates) > 0
