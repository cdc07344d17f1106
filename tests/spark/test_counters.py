"""umcore.spark.counters.deltas on unsigned 64-bit counters across the whole range: values on
both sides of 2^63 (where a signed long would turn negative), near 2^64 but not a sentinel,
two samples in one second, a restart, a gauge going down; the answers worked out by hand."""

from __future__ import annotations

import datetime as dt
from decimal import Decimal
from typing import Any

from pyspark.sql import types as T

from umcore.spark.counters import deltas
from umcore.spark.schema import U64

HALF = 1 << 63
TOP = (1 << 64) - 2  # the largest value that is not UM's 64-bit sentinel


def frame(spark: Any, samples: list[tuple[str, int, int]]) -> Any:
    schema = T.StructType(
        [
            T.StructField("obj", T.StringType()),
            T.StructField("time", T.TimestampType()),
            T.StructField("counter", T.StringType()),
            T.StructField("value", U64),
        ]
    )
    t0 = dt.datetime(2026, 1, 1, tzinfo=dt.UTC)
    rows = [(o, t0 + dt.timedelta(seconds=s), "c", Decimal(v)) for o, s, v in samples]
    return spark.createDataFrame(rows, schema)


def by_object(df: Any) -> dict[str, list[tuple[int, int | None]]]:
    out: dict[str, list[tuple[int, int | None]]] = {}
    for r in df.orderBy("obj", "time", "value").collect():
        out.setdefault(r["obj"], []).append((int(r["value"]), r["delta"]))
    return out


def test_counter_deltas_across_the_unsigned_range(spark: Any) -> None:
    samples = [
        ("a", 0, HALF - 5),
        ("a", 10, HALF + 5),  # crosses 2^63: +10
        ("a", 20, TOP),  # +2^63 - 7
        ("b", 0, 100),
        ("b", 10, 7),  # a restart: counts nothing, the next differences against it
        ("b", 10, 3),  # the same second: ordered by value, 3 first (a restart from 100)
        ("b", 20, 9),
        ("c", 0, (1 << 64) - 1),  # the 64-bit sentinel: dropped
        ("c", 10, 4),
        ("c", 20, 4294967295),  # the 32-bit sentinel: dropped
        ("c", 30, 6),
    ]
    got = by_object(deltas(frame(spark, samples), ["obj"]))
    assert got == {
        "a": [(HALF - 5, None), (HALF + 5, 10), (TOP, TOP - HALF - 5)],
        "b": [(100, None), (3, None), (7, 4), (9, 2)],
        "c": [(4, None), (6, 2)],
    }


def test_gauge_changes_either_way_across_2_63(spark: Any) -> None:
    samples = [("g", 0, HALF + 1), ("g", 10, HALF - 2), ("g", 20, 5), ("g", 30, HALF + 1)]
    got = by_object(deltas(frame(spark, samples), ["obj"], gauge=True))
    assert got == {
        "g": [(HALF + 1, None), (HALF - 2, 3), (5, HALF - 7), (HALF + 1, HALF - 4)],
    }
