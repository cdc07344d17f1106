"""umcore.spark.report without a session: the chart's rows chosen with numpy are the rows the
row-by-row choice takes (random tables of every job's shape, with nulls, ties, zeros of both
signs and a NaN), and the CSV's times, formatted once per distinct time, are every row's own."""

from __future__ import annotations

import csv as csvlib
import datetime as dt
import io
import random
from pathlib import Path
from typing import Any

import pytest

from umcore.spark.jobs import JOBS
from umcore.spark.report import MAX_SERIES, _chart_rows, _chart_rows_python, _write_tables

pa = pytest.importorskip("pyarrow")
pc = pytest.importorskip("pyarrow.compute")
T0 = dt.datetime(2026, 1, 1, tzinfo=dt.UTC)


def _table(rng: random.Random, job_name: str, rows: int, *, nan: bool = False) -> Any:
    """A random result of ``job_name``'s chart columns: few distinct series values (ties of
    whole lines among them), small integers as y (equal totals), some nulls."""
    job = JOBS[job_name]

    def maybe(v: object) -> object:
        return None if rng.random() < 0.05 else v

    cols: dict[str, object] = {
        job.x: pa.array(
            [T0 + dt.timedelta(seconds=60 * rng.randrange(20)) for _ in range(rows)],
            pa.timestamp("us", tz="UTC"),
        )
    }
    for c in job.series:
        if c in ("src_regid", "rcv_regid"):
            cols[c] = pa.array([maybe(rng.randrange(4)) for _ in range(rows)], pa.int64())
        else:
            cols[c] = pa.array([maybe(f"{c}-{rng.randrange(5)}") for _ in range(rows)])
    for y in job.y:
        if y.endswith("_per_s"):
            vals = [
                maybe(rng.choice([0.0, -0.0, 0.5, 1 / 3, rng.random() * 1e6])) for _ in range(rows)
            ]
            if nan and rows:
                vals[rng.randrange(rows)] = float("nan")
            cols[y] = pa.array(vals, pa.float64())
        else:
            cols[y] = pa.array([maybe(rng.randrange(-3, 4)) for _ in range(rows)], pa.int64())
    return pa.table(cols)


@pytest.mark.parametrize("job_name", sorted(JOBS))
def test_chart_rows_are_the_row_by_row_choice(job_name: str) -> None:
    rng = random.Random(job_name)
    job = JOBS[job_name]
    for rows in (0, 1, 7, 50, 400, 3000):
        for nan in (False, True):
            table = _table(rng, job_name, rows, nan=nan)
            # repr: a NaN drawn is equal to itself only so
            got, want = _chart_rows(job, table), _chart_rows_python(job, table)
            assert repr(got) == repr(want), (rows, nan)
    # the choice leaves lines out where there are more than the chart draws
    table = _table(rng, job_name, 3000)
    keys = list(zip(*(table.column(c).to_pylist() for c in job.series), strict=True))
    if job.chart == "line" and len(set(keys)) * len(job.y) > MAX_SERIES:
        assert 0 < len(_chart_rows(job, table)) < table.num_rows


def test_csv_times_are_each_rows_own(tmp_path: Path) -> None:
    rng = random.Random(7)
    times = [
        None if rng.random() < 0.1 else T0 + dt.timedelta(milliseconds=rng.randrange(10**9))
        for _ in range(2000)
    ]
    times += times[:500]  # repeats, as a result's intervals repeat
    table = pa.table({"t": pa.array(times, pa.timestamp("us", tz="UTC")), "n": range(len(times))})
    _write_tables(table, str(tmp_path))
    text = (tmp_path / "table.csv" / "part-00000.csv").read_text()
    lines = list(csvlib.reader(io.StringIO(text)))
    want = [
        "" if t is None else t.strftime("%Y-%m-%dT%H:%M:%S.") + f"{t.microsecond // 1000:03d}Z"
        for t in times
    ]
    assert lines[0] == ["t", "n"]
    assert [line[0] for line in lines[1:]] == want
