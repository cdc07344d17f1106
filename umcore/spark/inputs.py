"""The collector's output as one DataFrame shape, whichever connector wrote it.

Theory of operation
-------------------
``--input`` is either UM's SQLite database (a file; tables ``<kind>monmsg``, one column
``message`` = protobuf canonical JSON) or pyum's Parquet directory (``kind=<kind>/date=.../``).
:func:`load` gives, for one kind, the columns ``time`` (timestamp), ``application_id``,
``sender``, ``process_id``, ``object_id`` and ``message`` (the struct of
:func:`umcore.spark.schema.spark_type`, snake_case names), taken in both cases from the message's
own ``attributes`` (UM's ``UMMonAttributes``); ``time`` is the sender's timestamp (Parquet's
``time`` column, which is the arrival time where the sender gave none).

The SQLite file is read on the driver with Python's ``sqlite3`` (no JDBC driver needed; on a
cluster the database is where the driver runs, as MCS keeps it on a local disk) and handed to
Spark as Arrow in slices; the JSON is parsed by Spark (``from_json``), in parallel.
"""

from __future__ import annotations

import os
import sqlite3
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from umcore.errors import UMError
from umcore.spark.schema import MESSAGES, spark_type

__all__ = ["InputError", "count_rows", "input_kind", "load"]

SQLITE_MAGIC = b"SQLite format 3\x00"
# Rows per Arrow slice handed to Spark: bounds the driver's memory for a large database.
SLICE_ROWS = 200_000


class InputError(UMError):
    """An input a job cannot use: missing, of an unknown kind, or without the rows it needs."""


def input_kind(path: str) -> str:
    """``"sqlite"`` or ``"parquet"`` for ``path``; :class:`InputError` when it is neither."""
    p = Path(path)
    if p.is_dir():
        return "parquet"
    if not p.exists():
        raise InputError(f"{path}: no such file or directory")
    with open(p, "rb") as f:
        if f.read(len(SQLITE_MAGIC)) == SQLITE_MAGIC:
            return "sqlite"
    raise InputError(f"{path}: neither an SQLite database nor a Parquet directory of MCS")


def _parquet_files(path: str, kind: str) -> list[str]:
    base = os.path.join(path, f"kind={kind}")
    out: list[str] = []
    for root, _dirs, files in os.walk(base):
        out.extend(os.path.join(root, n) for n in files if n.endswith(".parquet"))
    return sorted(out)


def count_rows(path: str, kind: str) -> int:
    """Rows of ``kind`` in the input (Parquet: files; enough to tell empty from not)."""
    if input_kind(path) == "parquet":
        return len(_parquet_files(path, kind))
    conn = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    try:
        (n,) = conn.execute(f"SELECT count(*) FROM {kind}monmsg").fetchone()
    except sqlite3.Error as exc:
        raise InputError(f"{path}: {exc} (not a database MCS wrote?)") from None
    finally:
        conn.close()
    return int(n)


def _keep(fields: Sequence[str] | None) -> set[str] | None:
    """The message fields to read: ``fields`` and the attributes every frame takes its key
    columns from (None: all)."""
    return None if fields is None else {"attributes", *fields}


def _sqlite_frame(
    spark: SparkSession, path: str, kind: str, fields: Sequence[str] | None
) -> DataFrame:
    import pyarrow as pa

    conn = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    try:
        cur = conn.execute(f"SELECT message FROM {kind}monmsg")
        parts: list[DataFrame] = []
        while rows := cur.fetchmany(SLICE_ROWS):
            table = pa.table({"message": pa.array([r[0] for r in rows], pa.large_string())})
            parts.append(spark.createDataFrame(table))
    finally:
        conn.close()
    if not parts:
        return spark.createDataFrame([], "message string")
    df = parts[0]
    for p in parts[1:]:
        df = df.unionAll(p)
    desc = MESSAGES[kind].DESCRIPTOR
    keep = _keep(fields)
    parsed = F.from_json("message", spark_type(desc, json_names=True, keep=keep))
    m = parsed.cast(spark_type(desc, keep=keep)).alias("m")
    df = df.select(m)
    a = F.col("m.attributes")
    return df.select(
        F.timestamp_seconds(a["timestamp"].cast("long")).alias("time"),
        a["application_id"].alias("application_id"),
        a["sender_ipv4_address"].alias("sender"),
        a["process_id"].alias("process_id"),
        a["object_id"].alias("object_id"),
        F.col("m").alias("message"),
    )


def _parquet_frame(
    spark: SparkSession, path: str, kind: str, fields: Sequence[str] | None
) -> DataFrame:
    files = _parquet_files(path, kind)
    df = spark.read.schema(_parquet_schema(kind, _keep(fields))).parquet(*files)
    a = F.col("message.attributes")
    return df.select(
        F.col("time").alias("time"),
        a["application_id"].alias("application_id"),
        a["sender_ipv4_address"].alias("sender"),
        a["process_id"].alias("process_id"),
        a["object_id"].alias("object_id"),
        F.col("message").alias("message"),
    )


def _parquet_schema(kind: str, keep: set[str] | None) -> Any:
    from pyspark.sql import types as T

    return T.StructType(
        [
            T.StructField("time", T.TimestampType(), True),
            T.StructField("message", spark_type(MESSAGES[kind].DESCRIPTOR, keep=keep), True),
        ]
    )


def load(
    spark: SparkSession, path: str, kind: str, fields: Sequence[str] | None = None
) -> DataFrame:
    """The ``kind`` statistics of the collector's output at ``path`` (module docstring);
    ``fields``: the message fields a job reads (dotted paths, :func:`spark_type`'s ``keep``;
    the attributes always), so only they are read and parsed -- None: all of them."""
    if kind not in MESSAGES:
        raise InputError(f"unknown kind {kind!r} (one of {', '.join(MESSAGES)})")
    if count_rows(path, kind) == 0:
        raise InputError(f"{path}: no {kind} statistics (is it the output of MCS?)")
    if input_kind(path) == "sqlite":
        return _sqlite_frame(spark, path, kind, fields)
    return _parquet_frame(spark, path, kind, fields)
