"""Counter handling shared by the jobs: cumulative samples in, per-interval deltas out.

Theory of operation
-------------------
UM's statistics are mostly cumulative counters since the object was created; a rate needs two
samples of the same object (dro-monitoring-config.md B7).  A job turns its samples into *long
form* -- one row per (object keys, counter path, time, value) -- and :func:`deltas` then:

1. drops UM's "no sample" values (:data:`SENTINELS`: ``ULONG_MAX`` of a 64-bit and of a 32-bit
   build; minimum statistics start there) and missing ones, so they neither count nor break a
   series (:func:`long_form` already leaves them out, before the rows multiply);
2. orders each object's counter by time (then value, for two samples in one second) and takes
   the difference with the sample before it;
3. treats a negative difference as a restart: the object's counters began again, so that sample
   is the first of a new series and counts nothing (the samples after it difference against
   it).  The first sample of every series is its baseline and counts nothing either.

For a *gauge* (a level, such as the number of topics) the difference's absolute value is the
change and there are no restarts.  :func:`interval_start` buckets a time to whole intervals.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from decimal import Decimal

from pyspark.sql import Column, DataFrame, Window
from pyspark.sql import functions as F
from pyspark.sql import types as T

from umcore.spark.schema import U64

__all__ = ["SENTINELS", "deltas", "interval_start", "long_form"]

# UM's "no sample yet" values: ULONG_MAX where unsigned long is 64 bits, and 32 bits (Windows,
# 32-bit builds) -- dro-monitoring-config.md B2 and B7.
SENTINELS = (18446744073709551615, 4294967295)
# deltas(): a sample's value minus 2^63 (the order-preserving map of an unsigned 64-bit value
# onto a signed one) is held in a column of this name while the deltas are taken.
_BIASED = "_value_biased"
_PREV = "_value_prev"  # the series' sample before, biased likewise


def long_form(
    df: DataFrame, keys: Sequence[str], counters: Mapping[str, Sequence[tuple[str, Column]]]
) -> DataFrame:
    """``df`` (with ``time`` and ``keys``) as rows ``keys..., time, metric, counter, value``:
    ``counters`` maps a metric to its ``(counter name, column)`` pairs (a metric may sum
    several counters, e.g. the same count of each transport type)."""
    # Only the cells that hold a sample become rows: a metric summing the same counter of
    # several transport types finds one present (a oneof), so most cells are null, and
    # exploding them only for deltas() to drop them after a shuffle was most of a job's time.
    # A cell without a sample is a null struct, dropped right after the explode, in the same
    # generated code (an array ``filter`` with a lambda is interpreted, row by row: slower).
    cells = [
        F.when(
            _sampled(col.cast(U64)),
            F.struct(
                F.lit(metric).alias("metric"),
                F.lit(name).alias("counter"),
                col.cast(U64).alias("value"),
            ),
        )
        for metric, pairs in counters.items()
        for name, col in pairs
    ]
    out = df.select("time", *keys, F.explode(F.array(*cells)).alias("c")).where(
        F.col("c").isNotNull()
    )
    return out.select("time", *keys, "c.metric", "c.counter", "c.value")


def _sampled(v: Column) -> Column:
    """True where ``v`` is a sample: neither missing nor one of the :data:`SENTINELS`."""
    return v.isNotNull() & ~v.isin(*[F.lit(Decimal(x)).cast(U64) for x in SENTINELS])


def deltas(samples: DataFrame, keys: Sequence[str], *, gauge: bool = False) -> DataFrame:
    """``samples`` in :func:`long_form` with a ``delta`` column (null: a series' first sample or
    a restart); sentinels and missing values are dropped first (module docstring)."""
    v = F.col("value")
    # The samples are ordered and differenced as 64-bit signed integers, value - 2^63 (the same
    # order and the same differences as the unsigned values), not as the decimal(20,0) an
    # unsigned 64-bit counter is read as: sorting and subtracting decimals of that precision
    # (Java BigDecimal) was most of a job's time.  A difference beyond a long fails the job as
    # the decimal's cast to long did (Spark's ANSI mode, its default).
    biased = (v - F.lit(Decimal(1 << 63)).cast(U64)).cast("long")
    # Shuffled by the keys alone (the window wants rows clustered by the keys and the counter;
    # the keys suffice): a caller grouping the deltas by columns that include every key then
    # needs no other shuffle.  After the values became longs: fewer bytes to move.
    kept = samples.where(_sampled(v)).withColumn(_BIASED, biased).drop("value").repartition(*keys)
    b, prev = F.col(_BIASED), F.col(_PREV)
    # The series' rows are sorted by the window's partition columns first: numbers before
    # strings, so most comparisons end at a number (the sort's 8-byte prefix) instead of going
    # through the strings (application names, source strings) every row of a series shares --
    # the order of the partition columns changes nothing but the sort's cost.
    numeric = [k for k in keys if isinstance(samples.schema[k].dataType, T.NumericType)]
    rest = [k for k in keys if k not in numeric]
    w = Window.partitionBy(*numeric, "counter", *rest).orderBy("time", _BIASED)
    delta = F.abs(b - prev) if gauge else F.when(b >= prev, b - prev)
    # the value again as it came (a caller not reading it costs nothing: the column is pruned)
    value = (b.cast(U64) + F.lit(Decimal(1 << 63)).cast(U64)).cast(U64)
    out = kept.withColumn(_PREV, F.lag(b).over(w))  # once: two lags in delta's expression
    cols = [value.alias(c) if c == "value" else F.col(c) for c in samples.columns]
    return out.select(*cols, delta.cast("long").alias("delta"))


def interval_start(time: Column, seconds: int) -> Column:
    """The start of the ``seconds``-long interval holding ``time`` (Unix-aligned)."""
    secs = F.unix_seconds(time)
    return F.timestamp_seconds(F.floor(secs / F.lit(seconds)) * F.lit(seconds))
