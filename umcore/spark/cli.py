"""``pyum-spark JOB --input PATH --output DIR [--master URL]``: run one job, write its report.

Theory of operation
-------------------
The input is checked before Spark starts (a missing file, an unknown format or no statistics of
the kind the job reads: one line and exit status 1), then the session starts
(:func:`umcore.spark.session.start_session`), the job runs (:data:`umcore.spark.jobs.JOBS`) and
:func:`umcore.spark.report.write_report` writes ``DIR/<job>/index.html`` with its table and
chart; the page's path is printed.
"""

from __future__ import annotations

import argparse
import sys

from umcore.spark.inputs import InputError, count_rows
from umcore.spark.jobs import JOBS
from umcore.spark.session import DEFAULT_MASTER

__all__ = ["build_parser", "main"]

DEFAULT_INTERVAL = 60  # seconds per interval: UM's monitor_interval is often 60 or 600


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="pyum-spark",
        description="Reports over the monitoring history MCS collected, on Spark.",
    )
    p.add_argument("job", metavar="JOB", choices=sorted(JOBS), help=", ".join(sorted(JOBS)))
    p.add_argument("--input", required=True, metavar="PATH",
                   help="MCS's SQLite database or its Parquet directory")  # fmt: skip
    p.add_argument("--output", required=True, metavar="DIR", help="where the report goes")
    p.add_argument("--master", default=DEFAULT_MASTER, metavar="URL",
                   help=f"Spark master URL (default {DEFAULT_MASTER})")  # fmt: skip
    p.add_argument("--interval", type=int, default=DEFAULT_INTERVAL, metavar="SECONDS",
                   help=f"interval of rates (default {DEFAULT_INTERVAL})")  # fmt: skip
    return p


def main(argv: list[str] | None = None) -> None:
    args = build_parser().parse_args(argv)
    job = JOBS[args.job]
    if args.interval <= 0:
        print(f"pyum-spark: --interval {args.interval}: must be a positive number of seconds",
              file=sys.stderr)  # fmt: skip
        sys.exit(1)
    try:
        if count_rows(args.input, job.kind) == 0:
            raise InputError(f"{args.input}: no {job.kind} statistics for job {job.name}")
    except InputError as exc:
        print(f"pyum-spark: {exc}", file=sys.stderr)
        sys.exit(1)
    from umcore.spark.report import write_report
    from umcore.spark.session import start_session

    spark = start_session(args.master, umestore=False)  # the jobs read MCS's data only
    try:
        page = write_report(job, job.run(spark, args.input, args.interval), args.output)
    finally:
        spark.stop()
    print(page)


if __name__ == "__main__":
    main()
