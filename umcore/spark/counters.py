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

from umcore.spark.schema import U64

__all__ = ["SENTINELS", "deltas", "interval_start", "long_form"]

# UM's "no sample yet" values: ULONG_MAX where unsigned long is 64 bits, and 32 bits (Windows,
# 32-bit builds) -- dro-monitoring-config.md B2 and B7.
SENTINELS = (18446744073709551615, 4294967295)
# deltas(): a sample's value minus 2^63 (the order-preserving map of an unsigned 64-bit value
# onto a signed one) is held in a column of this name while the deltas are taken.
_BIASED = "_value_biased"


def long_form(
    df: DataFrame, keys: Sequence[str], counters: Mapping[str, Sequence[tuple[str, Column]]]
) -> DataFrame:
    """``df`` (with ``time`` and ``keys``) as rows ``keys..., time, metric, counter, value``:
    ``counters`` maps a metric to its ``(counter name, column)`` pairs (a metric may sum
    several counters, e.g. the same count of each transport type)."""
    cells = [
        F.struct(
            F.lit(metric).alias("metric"),
            F.lit(name).alias("counter"),
            col.cast(U64).alias("value"),
        )
        for metric, pairs in counters.items()
        for name, col in pairs
    ]
    # Only the cells that hold a sample become rows: a metric summing the same counter of
    # several transport types finds one present (a oneof), so most cells are null, and
    # exploding them only for deltas() to drop them was most of a job's time.
    present = F.filter(F.array(*cells), lambda c: _sampled(c["value"]))
    out = df.select("time", *keys, F.explode(present).alias("c"))
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
    kept = samples.where(_sampled(v)).withColumn(_BIASED, biased)
    b = F.col(_BIASED)
    w = Window.partitionBy(*keys, "counter").orderBy("time", _BIASED)
    prev = F.lag(b).over(w)
    delta = F.abs(b - prev) if gauge else F.when(b >= prev, b - prev)
    return kept.withColumn("delta", delta.cast("long")).drop(_BIASED)


def interval_start(time: Column, seconds: int) -> Column:
    """The start of the ``seconds``-long interval holding ``time`` (Unix-aligned)."""
    secs = F.unix_seconds(time)
    return F.timestamp_seconds(F.floor(secs / F.lit(seconds)) * F.lit(seconds))
