"""The operator's jobs, by name: each a question over the collector's history.

Theory of operation
-------------------
Every job reads one kind of statistics (:func:`umcore.spark.inputs.load`), picks its objects
(an element of a repeated field, exploded: one source transport session, one portal ...), and
for counters goes through :mod:`umcore.spark.counters` (long form, deltas per object ordered by
time, restarts and sentinels handled), then sums the deltas per interval and group.  A metric may
add up one counter of several transport types (``lbtrm.naks_sent`` + ``lbtru.naks_sent``): UM's
transport statistics are a ``oneof``, so only the one that applies is present.

=================  ====  ===============================================================
job                kind  result, one row per ...
=================  ====  ===============================================================
``source-rates``   ums   interval x source transport session: messages and bytes sent
                         (deltas) and their rates per second
``loss-hotspots``  ums   hour x host: receivers' loss, unrecovered loss and NAKs sent;
                         sources' NAKs received and retransmissions sent
``store-lag``      ump   sample x (store, source RegID, receiver RegID): lead sequence
                         number minus the receiver's last ACK (32-bit serial arithmetic)
``tr-churn``       ums   interval x context: topic resolution datagrams/bytes sent and
                         received, and changes of the topic counts (gauges)
``dro-portals``    dro   interval x (DRO, portal): fragments/bytes received, sent, dropped
=================  ====  ===============================================================

Each :class:`Job` also names the columns its chart plots.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from decimal import Decimal

from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql import functions as F

from umcore.spark.counters import deltas, interval_start, long_form
from umcore.spark.inputs import load
from umcore.spark.schema import U64

__all__ = ["JOBS", "Job"]

BASE_KEYS = ("application_id", "sender", "process_id", "object_id")
RATE_TRANSPORTS = ("lbtrm", "lbtru", "lbtipc", "lbtsmx")  # the source types that count messages
NAK_TRANSPORTS = ("lbtrm", "lbtru")  # the NAK-based (reliable multicast/unicast UDP) types
HOUR = 3600
NO_SQN = 4294967295  # UM's "no sequence number" in a 32-bit field (a sentinel too)
U64_KEYS = ("process_id", "object_id")  # the key columns that are unsigned 64-bit (decimal)
_BIAS = Decimal(1 << 63)  # unsigned 64-bit <-> signed: value - 2^63 keeps the order


@dataclass(frozen=True)
class Job:
    name: str
    kind: str
    run: Callable[[SparkSession, str, int], DataFrame]
    doc: str
    x: str  # chart: the x column
    y: tuple[str, ...]  # chart: the y columns
    series: tuple[str, ...]  # chart: columns naming one line (empty: one line per y)
    chart: str  # "line" or "bar"


def _pairs(element: str, transports: Sequence[str], field: str) -> list[tuple[str, Column]]:
    return [(f"{t}.{field}", F.col(element)[t][field]) for t in transports]


def _transport(element: str, kinds: Sequence[str]) -> Column:
    return F.coalesce(*[F.when(F.col(element)[k].isNotNull(), F.lit(k)) for k in kinds])


def _summed(
    long: DataFrame, keys: Sequence[str], group: Sequence[str], metrics: Sequence[str], secs: int
) -> DataFrame:
    d = deltas(long, keys)  # by the keys: where they are all group columns, no other shuffle
    bucket = interval_start(F.col("time"), secs).alias("interval_start")
    agg = [
        F.coalesce(F.sum(F.when(F.col("metric") == m, F.col("delta"))), F.lit(0))
        .cast("long")
        .alias(m)
        for m in metrics
    ]
    return d.groupBy(bucket, *group).agg(*agg)


def _ordered(df: DataFrame, *cols: str) -> DataFrame:
    """``df`` sorted by ``cols``, in one partition: a result goes to the driver whole (the
    report takes it as one Arrow table), and one sorted partition costs a small shuffle where
    ``orderBy``'s range partitioning costs a sampling job over the result and a shuffle."""
    return df.repartition(1).sortWithinPartitions(*cols)


def _ids_as_longs(df: DataFrame) -> DataFrame:
    """``df`` with the unsigned 64-bit key columns (:data:`U64_KEYS`) as longs, value - 2^63
    (the same order and equality): a job partitions, sorts and groups by them, which on
    decimal(20,0) (Java BigDecimal) costs several times what it does on longs."""
    bias = F.lit(_BIAS).cast(U64)
    return df.withColumns({k: (F.col(k) - bias).cast("long") for k in U64_KEYS})


def _ids_back(df: DataFrame) -> DataFrame:
    """The inverse of :func:`_ids_as_longs`: the key columns as the decimal(20,0) they were."""
    bias = F.lit(_BIAS).cast(U64)
    return df.withColumns({k: (F.col(k).cast(U64) + bias).cast(U64) for k in U64_KEYS})


def source_rates(spark: SparkSession, path: str, interval: int) -> DataFrame:
    st = "stats.source_transports"
    # what the job reads: each transport's struct is tested for presence (one field suffices)
    fields = [f"{st}.source_string", f"{st}.tcp.num_clients"] + [
        f"{st}.{t}.{c}" for t in RATE_TRANSPORTS for c in ("msgs_sent", "bytes_sent")
    ]
    df = _ids_as_longs(load(spark, path, "ums", fields))
    e = df.select(
        "time", *BASE_KEYS, F.explode("message.stats.source_transports").alias("e")
    ).select(
        "time",
        *BASE_KEYS,
        F.col("e.source_string").alias("source_string"),
        _transport("e", (*RATE_TRANSPORTS, "tcp")).alias("transport"),
        "e",
    )
    keys = (*BASE_KEYS, "source_string", "transport")
    long = long_form(
        e,
        keys,
        {
            "msgs": _pairs("e", RATE_TRANSPORTS, "msgs_sent"),
            "bytes": _pairs("e", RATE_TRANSPORTS, "bytes_sent"),
        },
    )
    out = _ids_back(_summed(long, keys, keys, ("msgs", "bytes"), interval))
    out = out.select(
        "*",
        (F.col("msgs") / F.lit(float(interval))).alias("msgs_per_s"),
        (F.col("bytes") / F.lit(float(interval))).alias("bytes_per_s"),
    )
    return _ordered(out, "interval_start", *keys)


def loss_hotspots(spark: SparkSession, path: str, interval: int) -> DataFrame:
    df = load(spark, path, "ums")
    keys = (*BASE_KEYS, "side", "source_string")
    parts = []
    for side, field, counters in (
        (
            "receiver",
            "receiver_transports",
            {
                "lost": _pairs("e", NAK_TRANSPORTS, "lost"),
                "unrecovered": _pairs("e", NAK_TRANSPORTS, "unrecovered_txw")
                + _pairs("e", NAK_TRANSPORTS, "unrecovered_tmo"),
                "naks_sent": _pairs("e", NAK_TRANSPORTS, "naks_sent"),
            },
        ),
        (
            "source",
            "source_transports",
            {
                "naks_rcved": _pairs("e", NAK_TRANSPORTS, "naks_rcved"),
                "rxs_sent": _pairs("e", NAK_TRANSPORTS, "rxs_sent"),
            },
        ),
    ):
        e = df.select(
            "time",
            *BASE_KEYS,
            F.lit(side).alias("side"),
            F.explode(F.col("message.stats")[field]).alias("e"),
        ).select("time", *BASE_KEYS, "side", F.col("e.source_string").alias("source_string"), "e")
        parts.append(long_form(e, keys, counters))
    long = parts[0].unionByName(parts[1])
    metrics = ("lost", "unrecovered", "naks_sent", "naks_rcved", "rxs_sent")
    out = _summed(long, keys, ("sender",), metrics, HOUR).withColumnRenamed(
        "interval_start", "hour"
    )
    total = sum((F.col(m) for m in metrics), F.lit(0))
    return _ordered(out.select("*", total.alias("total")), "hour", "sender")


def store_lag(spark: SparkSession, path: str, interval: int) -> DataFrame:
    df = load(spark, path, "ump")
    r = df.select(
        "time", "application_id", F.explode("message.stats.src_repo_stats").alias("r")
    ).select(
        "time",
        F.col("application_id").alias("store"),
        F.col("r.src_regid").alias("src_regid"),
        F.col("r.topic_name").alias("topic"),
        F.col("r.lead_sqn").alias("lead_sqn"),
        F.explode("r.rcv_stats").alias("v"),
    )
    lead, ack = F.col("lead_sqn"), F.col("v.high_ack_sqn")
    out = r.where((lead != NO_SQN) & (ack != NO_SQN)).select(
        "time",
        "store",
        "src_regid",
        "topic",
        F.col("v.rcv_regid").alias("rcv_regid"),
        "lead_sqn",
        ack.alias("high_ack_sqn"),
        F.pmod(lead - ack, F.lit(1 << 32)).alias("lag"),
    )
    return _ordered(out, "time", "store", "src_regid", "rcv_regid")


def tr_churn(spark: SparkSession, path: str, interval: int) -> DataFrame:
    df = load(spark, path, "ums")
    s = F.col("message.stats")
    # a context-only message: every repeated statistic empty (UM sends one object per message)
    only = (
        s["context"].isNotNull()
        & (F.size(s["receiver_transports"]) == 0)
        & (F.size(s["source_transports"]) == 0)
        & (F.size(s["event_queues"]) == 0)
    )
    c = df.where(only).select("time", *BASE_KEYS, F.col("message.stats.context").alias("c"))
    counters = ("tr_dgrams_sent", "tr_dgrams_rcved", "tr_bytes_sent", "tr_bytes_rcved")
    long = long_form(c, BASE_KEYS, {n: [(n, F.col("c")[n])] for n in counters})
    summed = _summed(long, BASE_KEYS, BASE_KEYS, counters, interval)
    gauges = long_form(
        c,
        BASE_KEYS,
        {"topic_changes": [(n, F.col("c")[n]) for n in ("tr_src_topics", "tr_rcv_topics")]},
    )
    g = deltas(gauges, BASE_KEYS, gauge=True)
    changes = g.groupBy(
        interval_start(F.col("time"), interval).alias("interval_start"), *BASE_KEYS
    ).agg(F.coalesce(F.sum("delta"), F.lit(0)).cast("long").alias("topic_changes"))
    out = summed.join(changes, ["interval_start", *BASE_KEYS], "full_outer").fillna(
        0, [*counters, "topic_changes"]
    )
    return _ordered(out, "interval_start", *BASE_KEYS)


def dro_portals(spark: SparkSession, path: str, interval: int) -> DataFrame:
    df = load(spark, path, "dro")
    p = df.select("time", *BASE_KEYS, F.explode("message.stats.portals").alias("p")).select(
        "time",
        *BASE_KEYS,
        F.col("p.portal_name").alias("portal"),
        _transport("p", ("endpoint", "peer")).alias("portal_type"),
        "p",
    )
    ep, pe = F.col("p.endpoint"), F.col("p.peer")
    er, es, pr, ps = ep["receive"], ep["send"], pe["receive"], pe["send"]
    counters = {
        "rcvd": [
            ("endpoint.transport_topic_fragments_rcvd", er["transport_topic_fragments_rcvd"]),
            ("peer.data_msgs_rcvd", pr["data_msgs_rcvd"]),
        ],
        "rcvd_bytes": [
            (
                "endpoint.transport_topic_fragment_bytes_rcvd",
                er["transport_topic_fragment_bytes_rcvd"],
            ),
            ("peer.data_msg_bytes_rcvd", pr["data_msg_bytes_rcvd"]),
        ],
        "sent": [
            ("endpoint.transport_topic_fragments_sent", es["transport_topic_fragments_sent"]),
            ("peer.data_fragments_sent", ps["data_fragments_sent"]),
        ],
        "sent_bytes": [
            (
                "endpoint.transport_topic_fragment_bytes_sent",
                es["transport_topic_fragment_bytes_sent"],
            ),
            ("peer.data_fragment_bytes_sent", ps["data_fragment_bytes_sent"]),
        ],
        "dropped": [
            (f"endpoint.{n}", es[n])
            for n in (
                "transport_topic_fragments_dropped_would_block",
                "transport_topic_fragments_dropped_error",
                "transport_topic_fragments_dropped_size_error",
                "unicast_msgs_dropped_error",
            )
        ]
        + [
            (f"peer.{n}", ps[n])
            for n in (
                "data_fragments_dropped_would_block",
                "data_fragments_dropped_not_operational",
                "data_fragments_dropped_queue_failure",
            )
        ],
    }
    keys = (*BASE_KEYS, "portal", "portal_type")
    long = long_form(p, keys, counters)
    out = _summed(
        long, keys, ("application_id", "portal", "portal_type"), tuple(counters), interval
    ).withColumnRenamed("application_id", "dro")
    return _ordered(out, "interval_start", "dro", "portal")


JOBS: dict[str, Job] = {
    j.name: j
    for j in (
        Job(
            "source-rates", "ums", source_rates,
            "Messages and bytes each source transport session sent, per interval, and the rates.",
            "interval_start", ("msgs_per_s",), ("application_id", "source_string"), "line",
        ),
        Job(
            "loss-hotspots", "ums", loss_hotspots,
            "Where loss and NAKs concentrate: receivers' loss, unrecovered loss and NAKs sent, "
            "sources' NAKs received and retransmissions, by hour and host.",
            "sender", ("lost", "unrecovered", "naks_sent", "naks_rcved", "rxs_sent"), (), "bar",
        ),
        Job(
            "store-lag", "ump", store_lag,
            "How far each persistent receiver's last ACK is behind its source's lead sequence "
            "number at its Store, sample by sample.",
            "time", ("lag",), ("store", "src_regid", "rcv_regid"), "line",
        ),
        Job(
            "tr-churn", "ums", tr_churn,
            "Topic resolution traffic per context and interval, and how much the topic counts "
            "changed.",
            "interval_start", ("tr_dgrams_sent", "tr_dgrams_rcved", "topic_changes"), (), "line",
        ),
        Job(
            "dro-portals", "dro", dro_portals,
            "DRO portal throughput and drops per interval.",
            "interval_start", ("sent", "dropped"), ("dro", "portal"), "line",
        ),
    )
}  # fmt: skip
