"""The jobs on a hand-built history (a counter restart, UM's sentinels, a sequence number wrap),
each answer checked against plain SQL over the SQLite database (tests/spark/oracle.py) and
against the same job over the Parquet files MCS wrote of the same messages; a few figures worked
out by hand from the dataset's definition besides; the report files; bad input."""

from __future__ import annotations

import csv as csvlib
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.spark import oracle
from tests.spark.dataset import SOURCE_A, T0, write_dataset
from umcore.spark.jobs import JOBS
from umcore.spark.report import write_report

INTERVAL = 60
METRICS = {
    "source-rates": ("msgs", "bytes"),
    "loss-hotspots": ("lost", "unrecovered", "naks_sent", "naks_rcved", "rxs_sent"),
    "tr-churn": (
        "tr_dgrams_sent",
        "tr_dgrams_rcved",
        "tr_bytes_sent",
        "tr_bytes_rcved",
        "topic_changes",
    ),
    "dro-portals": ("rcvd", "rcvd_bytes", "sent", "sent_bytes", "dropped"),
}
GROUPS = {
    "source-rates": (
        "interval_start",
        ("application_id", "sender", "process_id", "object_id", "source_string", "transport"),
    ),
    "loss-hotspots": ("hour", ("sender",)),
    "tr-churn": ("interval_start", ("application_id", "sender", "process_id", "object_id")),
    "dro-portals": ("interval_start", ("dro", "portal", "portal_type")),
}


@pytest.fixture(scope="module")
def data(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    return write_dataset(tmp_path_factory.mktemp("history"))


def expected(job: str, db: Path) -> Any:
    if job == "source-rates":
        return oracle.source_rates(db, INTERVAL)
    if job == "loss-hotspots":
        return oracle.loss_hotspots(db)
    if job == "tr-churn":
        return oracle.tr_churn(db, INTERVAL)
    if job == "dro-portals":
        return oracle.dro_portals(db, INTERVAL)
    return oracle.store_lag(db)


def answer(job: str, rows: list[Any]) -> Any:
    if job == "store-lag":
        return {
            (
                int(r.time.timestamp()),
                r.store,
                r.src_regid,
                r.topic,
                r.rcv_regid,
                r.lead_sqn,
                r.high_ack_sqn,
                r.lag,
            )
            for r in rows
        }
    time_col, group = GROUPS[job]
    return oracle.spark_rows(rows, time_col, group, METRICS[job])


def check_against_sql(spark: Any, job: str, db: Path) -> list[Any]:
    rows = JOBS[job].run(spark, str(db), INTERVAL).collect()
    want = expected(job, db)
    if job != "store-lag":
        want = oracle.normalise(want, METRICS[job])
    assert answer(job, rows) == want
    return rows


@pytest.mark.parametrize("job", sorted(JOBS))
def test_job_agrees_with_sql_and_with_parquet(
    spark: Any, data: tuple[Path, Path], job: str
) -> None:
    db, pq = data
    rows = check_against_sql(spark, job, db)
    assert rows, "the dataset has something for every job"
    from_parquet = JOBS[job].run(spark, str(pq), INTERVAL).collect()
    assert answer(job, from_parquet) == answer(job, rows)


def test_restart_and_sentinels_by_hand(spark: Any, data: tuple[Path, Path]) -> None:
    db, _ = data
    rows = JOBS["source-rates"].run(spark, str(db), INTERVAL).where("process_id = 11").collect()
    by_interval = {int(r.interval_start.timestamp()) - T0: r.msgs for r in rows}
    # source A: 100, 250, (sentinel), 400, 410 | restart at 70 s: 5, 55 | 95
    assert [v for _, v in SOURCE_A] == [100, 250, 2**64 - 1, 400, 410, 5, 55, 95]
    assert by_interval == {0: 150 + 150 + 10, 60: 0 + 50, 120: 40}
    assert {r.transport for r in rows} == {"lbtrm"}
    lag = JOBS["store-lag"].run(spark, str(db), INTERVAL).collect()
    # lead 5 after a wrap, receiver 7 at 0xFFFFFFF0: 21 behind; no ACK yet / no lead: no row
    assert sorted((int(r.time.timestamp()) - T0, r.rcv_regid, r.lag) for r in lag) == [
        (0, 8, 10), (60, 7, 21), (60, 8, 1)
    ]  # fmt: skip


def test_report_files(spark: Any, data: tuple[Path, Path], tmp_path: Path) -> None:
    db, _ = data
    job = JOBS["source-rates"]
    page = Path(write_report(job, job.run(spark, str(db), INTERVAL), str(tmp_path)))
    base = tmp_path / "source-rates"
    assert page == base / "index.html"
    html = page.read_text()
    assert '<img src="chart.png"' in html and "LBTRM:10.0.0.1:14390" in html
    assert (base / "chart.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    (csv,) = (base / "table.csv").glob("part-*.csv")
    lines = csv.read_text().splitlines()
    assert lines[0].startswith("interval_start,application_id,sender")
    rows = job.run(spark, str(db), INTERVAL).collect()
    assert len(lines) == 1 + len(rows)
    # the CSV holds the result's rows, in order, times as Spark's CSV writer gives them
    keys = ("interval_start", "application_id", "process_id", "source_string", "msgs", "bytes")
    got = [tuple(r[k] for k in keys) for r in csvlib.DictReader(lines)]
    stamp = "%Y-%m-%dT%H:%M:%S.000Z"
    assert got == [
        (r.interval_start.strftime(stamp), r.application_id, str(r.process_id), r.source_string,
         str(r.msgs), str(r.bytes))
        for r in rows
    ]  # fmt: skip
    parquet = spark.read.parquet(str(base / "table.parquet"))
    types = [(f.name, f.dataType) for f in parquet.schema]
    assert types == [(f.name, f.dataType) for f in job.run(spark, str(db), INTERVAL).schema]
    assert sorted(map(tuple, parquet.collect())) == sorted(map(tuple, rows))


@pytest.mark.parametrize(
    ("make", "message"),
    [
        (lambda p: p / "nope.db", "no such file or directory"),
        (lambda p: (p / "x.txt").write_text("hello") and p / "x.txt", "neither an SQLite database"),
        (lambda p: (p / "empty").mkdir() or p / "empty", "no ums statistics"),
    ],
)
def test_bad_input_one_line_and_non_zero(tmp_path: Path, make: Any, message: str) -> None:
    path = make(tmp_path)
    proc = subprocess.run(
        [sys.executable, "-m", "umcore.spark", "source-rates", "--input", str(path), "--output", str(tmp_path / "out")],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert proc.returncode == 1
    assert proc.stderr.count("\n") == 1 and message in proc.stderr, proc.stderr
    assert not (tmp_path / "out").exists()


def test_empty_database_is_refused(tmp_path: Path) -> None:
    from daemons.mcs.connectors import init_db

    init_db(str(tmp_path / "ummon.db"))
    proc = subprocess.run(
        [sys.executable, "-m", "umcore.spark", "dro-portals", "--input", str(tmp_path / "ummon.db"), "--output", str(tmp_path / "out")],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert proc.returncode == 1 and "no dro statistics" in proc.stderr
