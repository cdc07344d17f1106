"""A job's result as files a person opens: table (Parquet, CSV), chart (PNG), HTML page.

Theory of operation
-------------------
:func:`write_report` takes the result to the driver once, as Arrow (results are aggregates,
small), and writes under ``DIR/<job>/`` from there: ``table.parquet/`` and ``table.csv/`` (one
``part-00000`` file each, the layout Spark's writers leave; written with pyarrow, as two more
Spark jobs over the result cost several times the whole report besides, and on a cluster they
would land on the executors' disks rather than beside the page), ``chart.png`` (matplotlib,
headless ``Agg`` backend) and ``index.html``, which shows the chart and the first rows and links
the rest (matplotlib and pyarrow's writers are imported in a thread while Spark computes the
result).  The CSV has a header line and gives times as Spark's CSV writer does (ISO 8601,
milliseconds, ``Z``: sessions run in UTC); a field holding a comma or a quote is quoted
(RFC 4180).  The chart plots the job's ``x`` against its ``y`` columns; a line chart draws one line per
``series`` (at most :data:`MAX_SERIES`, the largest), a bar chart sums each ``y`` per ``x``.
"""

from __future__ import annotations

import html
import os
import shutil
import threading
from collections import defaultdict
from typing import Any

from pyspark.sql import DataFrame

from umcore.spark.jobs import Job

__all__ = ["MAX_SERIES", "write_report"]

MAX_SERIES = 10  # lines in one chart: more are unreadable; the table has them all
HTML_ROWS = 200  # rows shown on the page; the CSV and Parquet files have all


def _load_libraries() -> None:
    """Import what the report draws and writes with (pyplot alone takes most of a second)."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot
        import pyarrow.compute
        import pyarrow.csv
        import pyarrow.parquet  # noqa: F401
    except ImportError:  # the report's own import says what is missing, in the caller
        pass


def _columns(table: Any, names: list[str]) -> list[dict[str, Any]]:
    """The rows of ``table`` (pyarrow) as dicts of only the columns ``names``: converting a
    result's other columns (decimals, strings) to Python objects would cost more than the
    chart itself."""
    cols = {n: table.column(n).to_pylist() for n in dict.fromkeys(names)}
    return [dict(zip(cols, vals, strict=True)) for vals in zip(*cols.values(), strict=True)]


def _chart_rows(job: Job, table: Any) -> list[dict[str, Any]]:
    """The rows :func:`_chart` draws from: for a line chart only those of its :data:`MAX_SERIES`
    largest lines (a result has thousands; converting every row, times and all, to Python cost
    more than the chart), chosen as :func:`_chart` chooses, so it draws the same lines: each
    line's total summed in row order in doubles (as ``float(v or 0)``), the largest first, ties
    in order of first appearance.  Done with numpy (``bincount`` adds in row order, as Python
    does); y columns that are not integers or floats, or a NaN total, take the Python loop."""
    import numpy as np
    import pyarrow as pa
    import pyarrow.compute as pc

    names = [job.x, *job.y, *job.series]
    if job.chart != "line":
        return _columns(table, names)
    if not all(
        pa.types.is_integer(t) or pa.types.is_floating(t)
        for t in (table.schema.field(y).type for y in job.y)
    ):
        return _chart_rows_python(job, table)
    n = table.num_rows
    group = np.zeros(n, dtype=np.int64)  # a line's base key as one number per row
    for c in job.series:
        col = table.column(c)
        code = pc.index_in(col, value_set=pc.unique(col)).to_numpy(zero_copy_only=False)
        _, group = np.unique(group * (int(code.max(initial=0)) + 1) + code, return_inverse=True)
    groups, first, group = np.unique(group, return_index=True, return_inverse=True)
    ranked = []  # (-total, first row, y's position) of every line
    for k, y in enumerate(job.y):
        values = pc.fill_null(table.column(y), 0).to_numpy(zero_copy_only=False)
        values = np.where(values == 0, 0.0, values.astype(np.float64))  # -0.0 or 0: 0
        total = np.bincount(group, weights=values, minlength=len(groups))
        if np.isnan(total).any():
            return _chart_rows_python(job, table)
        ranked.append((-total, first, np.full(len(groups), k)))
    neg, firsts, ks = (np.concatenate(a) for a in zip(*ranked, strict=True))
    order = np.lexsort((ks, firsts, neg))[:MAX_SERIES]  # stable: ties by first appearance
    chosen = np.zeros(len(groups), dtype=bool)
    chosen[order % len(groups)] = True  # a line's position: y's place * groups + group
    rows = np.nonzero(chosen[group])[0]
    return _columns(table.take(pa.array(rows, pa.int64())), names)


def _chart_rows_python(job: Job, table: Any) -> list[dict[str, Any]]:
    """:func:`_chart_rows`' choice in plain Python, row by row."""
    import pyarrow as pa

    names = [job.x, *job.y, *job.series]
    keys = [table.column(c).to_pylist() for c in job.series]
    ys = [(y, table.column(y).to_pylist()) for y in job.y]
    multi = len(job.y) > 1
    totals: dict[tuple[Any, ...], float] = defaultdict(float)
    for i in range(table.num_rows):
        base = tuple(k[i] for k in keys)
        for y, values in ys:
            totals[base + ((y,) if multi else ())] += float(values[i] or 0)
    biggest = set(sorted(totals, key=lambda k: -totals[k])[:MAX_SERIES])
    rows = [
        i
        for i in range(table.num_rows)
        if any(tuple(k[i] for k in keys) + ((y,) if multi else ()) in biggest for y in job.y)
    ]
    return _columns(table.take(pa.array(rows, pa.int64())), names)  # typed: [] too


def _chart(job: Job, rows: list[dict[str, Any]], path: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(10, 5), dpi=100)
    try:
        if job.chart == "bar":
            totals: dict[str, dict[str, float]] = defaultdict(lambda: defaultdict(float))
            for r in rows:
                for y in job.y:
                    totals[str(r[job.x])][y] += float(r[y] or 0)
            xs = sorted(totals)
            width = 0.8 / max(1, len(job.y))
            for i, y in enumerate(job.y):
                ax.bar(
                    [k + i * width for k in range(len(xs))],
                    [totals[x][y] for x in xs],
                    width,
                    label=y,
                )
            ax.set_xticks([k + 0.4 - width / 2 for k in range(len(xs))], xs, rotation=30)
        else:
            lines: dict[tuple[Any, ...], list[tuple[Any, float]]] = defaultdict(list)
            for r in rows:
                for y in job.y:
                    key = tuple(r[c] for c in job.series) + ((y,) if len(job.y) > 1 else ())
                    lines[key].append((r[job.x], float(r[y] or 0)))
            biggest = sorted(lines, key=lambda k: -sum(v for _, v in lines[k]))[:MAX_SERIES]
            for key in biggest:
                pts = sorted(lines[key], key=lambda p: p[0])
                ax.plot(
                    [p[0] for p in pts],
                    [p[1] for p in pts],
                    marker=".",
                    label=" ".join(map(str, key)),
                )
            fig.autofmt_xdate()
        ax.set_xlabel(job.x)
        ax.set_ylabel(", ".join(job.y))
        ax.set_title(job.name)
        if rows:
            ax.legend(fontsize="small")
        fig.tight_layout()
        fig.savefig(path, format="png")
    finally:
        plt.close(fig)


def _part(base: str, name: str) -> str:
    """``base/name/``, emptied (a report written again replaces the old), and its one part file."""
    folder = os.path.join(base, name)
    shutil.rmtree(folder, ignore_errors=True)
    os.makedirs(folder)
    return os.path.join(folder, "part-00000" + os.path.splitext(name)[1])


def _write_tables(table: Any, base: str) -> None:
    """``table`` (pyarrow) as ``base/table.parquet/`` and ``base/table.csv/`` (module docstring)."""
    import pyarrow as pa
    import pyarrow.compute as pc
    import pyarrow.csv as pacsv
    import pyarrow.parquet as pq

    pq.write_table(table, _part(base, "table.parquet"))
    columns = []
    for col in table.columns:
        if pa.types.is_timestamp(col.type):
            # each distinct time formatted once (a result has few: one per interval), then
            # looked up: strftime over every row was most of the tables' time
            ms = col.cast(pa.timestamp("ms", tz="UTC"))
            distinct = pc.unique(ms)
            text = pc.binary_join_element_wise(
                pc.strftime(distinct, format="%Y-%m-%dT%H:%M:%S"), "Z", ""
            )
            col = text.take(pc.index_in(ms, value_set=distinct))
        columns.append(col)
    text = pa.table(columns, names=table.column_names)
    with open(_part(base, "table.csv"), "wb") as f:
        header = ",".join(_csv_field(n) for n in table.column_names) + "\n"
        f.write(header.encode("utf-8"))
        opts = pacsv.WriteOptions(include_header=False, quoting_style="needed")
        pacsv.write_csv(text, f, opts)


def _csv_field(name: str) -> str:
    if any(c in name for c in ',"\r\n'):
        return '"' + name.replace('"', '""') + '"'
    return name


def write_report(job: Job, result: DataFrame, out_dir: str) -> str:
    """Write ``result`` of ``job`` under ``out_dir/<job>/``; the HTML page's path."""
    base = os.path.join(out_dir, job.name)
    os.makedirs(base, exist_ok=True)
    # The libraries are imported while Spark computes the result: this process only waits on
    # the JVM meanwhile.  The thread is joined before they are used.
    loading = threading.Thread(target=_load_libraries, name="pyum-report-imports", daemon=True)
    loading.start()
    try:
        table = result.toArrow()  # the one Spark job; Arrow: far faster than Rows
    finally:
        loading.join()
    _write_tables(table, base)
    _chart(job, _chart_rows(job, table), os.path.join(base, "chart.png"))
    n_rows = table.num_rows
    rows: list[dict[str, Any]] = table.slice(0, HTML_ROWS).to_pylist()
    cols = result.columns
    head = "".join(f"<th>{html.escape(c)}</th>" for c in cols)
    body = "\n".join(
        "<tr>" + "".join(f"<td>{html.escape(str(r[c]))}</td>" for c in cols) + "</tr>" for r in rows
    )
    more = f"<p>First {HTML_ROWS} of {n_rows} rows.</p>" if n_rows > HTML_ROWS else ""
    page = f"""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><title>pyum: {job.name}</title>
<style>body{{font-family:sans-serif;margin:2em}}table{{border-collapse:collapse;font-size:small}}
td,th{{border:1px solid #ccc;padding:2px 6px;text-align:right}}</style></head>
<body><h1>{job.name}</h1><p>{html.escape(job.doc)}</p>
<img src="chart.png" alt="{job.name} chart">
<p>{n_rows} rows; the whole table: <a href="table.csv/">CSV</a>, <a href="table.parquet/">Parquet</a>.</p>
{more}<table><tr>{head}</tr>
{body}
</table></body></html>
"""
    path = os.path.join(base, "index.html")
    with open(path, "w", encoding="utf-8") as f:
        f.write(page)
    return path
