"""The Spark session of a pyum job: any master URL, this package on the executors.

Theory of operation
-------------------
:func:`start_session` builds (or joins) the process's ``SparkSession`` for ``master`` --
``local[*]`` by default, or any URL Spark takes (``spark://``, ``yarn``, ``k8s://``).  The worker
Python is the interpreter running the job (``PYSPARK_PYTHON`` = ``sys.executable``), so a
cluster's executors must have the same path (a shared install or image).  ``umcore`` is zipped
once per session and shipped with ``addPyFile``, so executors need no pyum install of their own
(they need protobuf only for the jobs' driver side; the data source needs the standard library
and pyarrow).  Times are UTC (``spark.sql.session.timeZone``); the Python Data Source filter
pushdown is switched on (``umestore`` uses it); the ``umestore`` sources are registered
(:func:`register_umestore`: the first Python data source registered costs a session about 2 s
-- a Python worker's start -- so ``pyum-spark``'s monitoring jobs, which never read a Store,
start without them: ``umestore=False``).  A
``local`` master starts without the web UI (nobody opens it for a job that ends with its report)
and with the JVM's first JIT compiler only (:data:`LOCAL_JAVA_OPTIONS`, as
``spark.driver.defaultJavaOptions``: options the user gives in ``spark.driver.extraJavaOptions``,
from ``conf`` or Spark's defaults file, come after it and win; a ``conf`` that sets
``spark.driver.defaultJavaOptions`` replaces it); a cluster's driver and executors keep the JVM's
defaults.
"""

from __future__ import annotations

import atexit
import os
import shutil
import sys
import tempfile
import zipfile
from collections.abc import Mapping
from pathlib import Path

from pyspark.sql import SparkSession

__all__ = [
    "DEFAULT_MASTER",
    "LOCAL_JAVA_OPTIONS",
    "package_zip",
    "register_umestore",
    "start_session",
]

DEFAULT_MASTER = "local[*]"
# Shuffle partitions: Spark's 200 is for clusters; a job's aggregates are small.
SHUFFLE_PARTITIONS = 8
# A local job run by name lives for seconds to a few minutes in a new JVM, and much of its CPU
# goes to warming that JVM up: C1 alone compiles far less than C1 + C2 (source-rates over
# 1,000,000 rows, session start to report written: JVM CPU 47 s instead of 60 s, wall 0.85-0.97
# of the time, paired runs on 2 cores).  A long local job may want C2 back: pass
# spark.driver.extraJavaOptions=-XX:TieredStopAtLevel=4 (appended after these).
LOCAL_JAVA_OPTIONS = "-XX:TieredStopAtLevel=1"


def package_zip(directory: str) -> str:
    """A zip of the ``umcore`` package (sources only) in ``directory``; its path."""
    root = Path(__file__).resolve().parents[1]  # .../umcore
    path = os.path.join(directory, "umcore.zip")
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as z:
        for f in sorted(root.rglob("*")):
            if "__pycache__" in f.parts or not f.is_file():
                continue
            if f.suffix in (".py", ".typed") or f.parent.name == "schemas":
                z.write(f, f.relative_to(root.parent).as_posix())
    return path


def start_session(
    master: str = DEFAULT_MASTER,
    *,
    app: str = "pyum-spark",
    conf: Mapping[str, str] | None = None,
    umestore: bool = True,
) -> SparkSession:
    """The session for ``master`` (module docstring); ``conf`` adds Spark settings;
    ``umestore``: the Store's data sources registered (:func:`register_umestore`)."""
    os.environ["PYSPARK_PYTHON"] = sys.executable
    os.environ["PYSPARK_DRIVER_PYTHON"] = sys.executable
    builder = (
        SparkSession.builder.master(master)
        .appName(app)
        .config("spark.pyspark.python", sys.executable)
        .config("spark.sql.session.timeZone", "UTC")
        .config("spark.sql.python.filterPushdown.enabled", "true")
        .config("spark.sql.shuffle.partitions", str(SHUFFLE_PARTITIONS))
        .config("spark.sql.execution.arrow.pyspark.enabled", "true")
        .config("spark.ui.showConsoleProgress", "false")
    )
    if master.startswith("local"):
        # A job run by name ends when its report is written: nobody opens a local web UI, and
        # starting one is part of every job's start-up.  A cluster keeps its UI.
        builder = builder.config("spark.ui.enabled", "false")
        if "spark.driver.defaultJavaOptions" not in (conf or {}):
            builder = builder.config("spark.driver.defaultJavaOptions", LOCAL_JAVA_OPTIONS)
    for k, v in (conf or {}).items():
        builder = builder.config(k, v)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    tmp = tempfile.mkdtemp(prefix="pyum-spark-")
    # Spark serves the zip from this folder to executors as their tasks start, for as long as
    # the session lives: removed when this (driver) process exits, not before.
    atexit.register(shutil.rmtree, tmp, ignore_errors=True)
    spark.sparkContext.addPyFile(package_zip(tmp))
    if umestore:
        register_umestore(spark)
    return spark


def register_umestore(spark: SparkSession) -> None:
    """``spark.read.format("umestore")`` and ``format("umestore_acks")`` on ``spark``
    (:mod:`umcore.spark.umestore`); registering them again is harmless."""
    from umcore.spark.umestore import UMEStoreAcksDataSource, UMEStoreDataSource

    spark.dataSource.register(UMEStoreDataSource)
    spark.dataSource.register(UMEStoreAcksDataSource)
