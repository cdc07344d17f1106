"""Spark pipeline benchmark (issue 21): the source-rates job over 1,000,000 monitoring rows on
``local[*]``, and the ``umestore`` scan of 1,000,000 stored messages.

Measures, in one run (the issue's goals in brackets):

* ``source-rates`` over a Parquet directory as MCS writes it (1,000 source transport sessions x
  1,000 samples, 10 s apart, one counter restart each), timed from session start to the report
  written (table, chart, page) [< 30 s including session start]; the session starts as
  ``pyum-spark``'s does, without the ``umestore`` sources (its jobs read MCS's data only);
  baseline: a scan of the same files that only counts the rows, in the same session;
* ``spark.read.format("umestore")`` over 1,000,000 messages (64-byte payloads) written by the
  Store's repository code, every column read [< 10 s], after registering the sources (timed
  and printed apart: a session's one-time cost); baseline: the format's reference reader
  (:func:`umcore.store.diskformat.iter_repository`) over the same files in one Python loop.

The monitoring rows are built with pyarrow from 1,000 messages made by the collector's own
:func:`~umcore.monitor.collector.message_row` (its ``arrow_type`` schema), their time and
counters then set column-wise, so making them takes seconds.
"""

from __future__ import annotations

import shutil
import tempfile
import time
from pathlib import Path
from typing import Any

from umcore.monitor.collector import arrow_type, message_row
from umcore.monitor.pb import ums_mon_pb2
from umcore.store import diskformat as fmt

OBJECTS = 1000
SAMPLES = 1000
ROWS = OBJECTS * SAMPLES
STORED = 1_000_000
T0 = 1_767_225_600
GOAL_JOB_S = 30.0
GOAL_SCAN_S = 10.0


def _replace(arr: Any, path: list[str], new: Any) -> Any:
    """``arr`` (a struct or a list of one struct per row) with the child at ``path`` replaced."""
    import pyarrow as pa

    if pa.types.is_list(arr.type):
        inner = _replace(arr.flatten(), path, new)
        return pa.ListArray.from_arrays(arr.offsets, inner)
    names = [arr.type.field(i).name for i in range(arr.type.num_fields)]
    children = [arr.field(i) for i in range(len(names))]
    k = names.index(path[0])
    children[k] = new if len(path) == 1 else _replace(children[k], path[1:], new)
    return pa.StructArray.from_arrays(children, names=names)


def monitoring_parquet(root: Path) -> Path:
    import numpy as np
    import pyarrow as pa
    import pyarrow.parquet as pq

    rows = []
    for obj in range(OBJECTS):
        m = ums_mon_pb2.UMSMonMsg()
        m.attributes.application_id = f"app-{obj % 50}"
        m.attributes.sender_ipv4_address = f"10.0.{obj // 250}.{obj % 250}"
        m.attributes.process_id = 1000 + obj
        m.attributes.object_id = obj
        st = m.stats.source_transports.add(
            source_string=f"LBTRM:10.0.0.1:{14000 + obj}:1:239.1.1.1:14400"
        )
        st.lbtrm.msgs_sent = 1
        rows.append(message_row(m))
    mtype = arrow_type(ums_mon_pb2.UMSMonMsg.DESCRIPTOR)
    base = pa.array(rows, type=mtype)
    sample = np.repeat(np.arange(SAMPLES, dtype=np.int64), OBJECTS)  # sample-major, like time
    obj = np.tile(np.arange(OBJECTS, dtype=np.int64), SAMPLES)
    msg = base.take(pa.array(obj))
    secs = T0 + sample * 10
    restart = SAMPLES // 2
    msgs = np.where(sample < restart, sample * 100 + obj, (sample - restart) * 100).astype(
        np.uint64
    )
    msg = _replace(msg, ["attributes", "timestamp"], pa.array(secs.astype(np.uint64)))
    msg = _replace(msg, ["stats", "source_transports", "lbtrm", "msgs_sent"], pa.array(msgs))
    msg = _replace(msg, ["stats", "source_transports", "lbtrm", "bytes_sent"], pa.array(msgs * 64))
    table = pa.table({"time": pa.array(secs * 1000, pa.timestamp("ms", tz="UTC")), "message": msg})
    part = root / "kind=ums" / "date=2026-01-01"
    part.mkdir(parents=True)
    for i in range(4):  # four files, as a collector rolling its files would leave
        n = ROWS // 4
        pq.write_table(table.slice(i * n, n), part / f"part-{i}.parquet")
    return root


def store_repository(root: Path) -> Path:
    import asyncio

    from umcore.aio.storeio import StoreIO
    from umcore.store.io import IoDone
    from umcore.store.repository import RepositoryConfig, make_repository
    from umcore.wire import lbmc

    async def write() -> None:
        loop = asyncio.get_running_loop()
        cache = root / "cache"
        cache.mkdir(parents=True)
        cfg = RepositoryConfig(
            kind="disk", size_threshold=1, size_limit=1 << 31, disk_file_size_limit=1 << 31
        )
        repo = make_repository(
            7, cfg, str(cache), loop.time(), wall_offset=time.time() - loop.time()
        )

        def done(d: IoDone) -> None:
            repo.io_done(d, loop.time())
            io.submit(repo.take_io())

        io = StoreIO(loop, done)
        payload = bytes(range(64))
        step = 10_000
        for start in range(0, STORED, step):
            frames = [lbmc.encode_data(1, s, payload) for s in range(start, start + step)]
            i = 0
            while i < step:
                k = repo.append_run(start + i, frames[i:], loop.time())
                if k == 0:
                    repo.append(start + i, frames[i], loop.time())
                    k = 1
                i += k
            io.submit(repo.take_io())
            await io.drain()
        await io.close()

    asyncio.run(write())
    return root / "cache"


def main() -> None:
    tmp = Path(tempfile.mkdtemp(prefix="pyum-bench-spark-"))
    try:
        t = time.perf_counter()
        pq_dir = monitoring_parquet(tmp / "pq")
        cache = store_repository(tmp / "store")
        print(
            f"   data made: {ROWS:,} monitoring rows, {STORED:,} stored messages ({time.perf_counter() - t:.1f} s)"
        )

        from pyspark.sql import functions as F

        from umcore.spark.jobs import JOBS
        from umcore.spark.report import write_report
        from umcore.spark.session import cds_status, register_umestore, start_session

        start = time.perf_counter()
        spark = start_session("local[*]", app="pyum-bench", umestore=False)  # as pyum-spark
        session = time.perf_counter() - start
        state, detail = cds_status()
        print(f"   driver JVM class-data sharing archive: {state} ({detail})")
        try:
            job = JOBS["source-rates"]
            t = time.perf_counter()
            write_report(job, job.run(spark, str(pq_dir), 60), str(tmp / "report"))
            took = time.perf_counter() - t
            total = session + took
            t = time.perf_counter()
            n = spark.read.parquet(str(pq_dir / "kind=ums")).count()
            scan = time.perf_counter() - t
            assert n == ROWS
            print(
                f"   source-rates over {ROWS:,} rows, local[*]: {total:.1f} s including session start "
                f"({session:.1f} s) (goal < {GOAL_JOB_S:.0f} s); job alone {took:.1f} s, "
                f"{ROWS / took:,.0f} rows/s"
            )
            print(
                f"   baseline: the same files scanned and counted: {scan:.1f} s; job / scan {took / scan:.1f}"
            )

            t = time.perf_counter()
            register_umestore(spark)
            registering = time.perf_counter() - t
            t = time.perf_counter()
            row = (
                spark.read.format("umestore").load(str(cache))
                .agg(F.count("*"), F.sum("length"), F.sum(F.length("payload")), F.max("arrival"))
                .collect()[0]
            )  # fmt: skip
            took = time.perf_counter() - t
            assert row[0] == STORED, row
            t = time.perf_counter()
            files = [(p.name, p.read_bytes()) for p in cache.iterdir()]
            count = sum(1 for _ in fmt.iter_repository(files))
            ref = time.perf_counter() - t
            assert count == STORED
            print(
                f"   umestore scan of {STORED:,} messages: {took:.1f} s (goal < {GOAL_SCAN_S:.0f} s), "
                f"{STORED / took:,.0f} messages/s; before it, registering the umestore sources "
                f"(once per session, a Python worker's start): {registering:.1f} s"
            )
            print(
                f"   baseline: iter_repository in one Python loop: {ref:.1f} s; ratio {ref / took:.2f}"
            )
        finally:
            spark.stop()
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
