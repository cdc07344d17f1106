"""The jobs' questions answered again in plain SQL over UM's SQLite database (the test oracle).

Theory of operation
-------------------
Independent of the Spark code: the JSON paths are written here in UM's camelCase, by hand, and
SQLite's own JSON functions and window functions do the work.  The counter rules are the ones
the issue states: samples of one object (and counter) ordered by time, then value; the "no
sample" values 18446744073709551615 and 4294967295 left out; a negative difference a restart
(it and a series' first sample count nothing).  Each function returns what the matching job's
table must hold, as a dict keyed like :func:`spark_rows` makes from the job's rows.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

ATTRS = """CAST(json_extract(m.message,'$.attributes.timestamp') AS INTEGER) AS t,
  json_extract(m.message,'$.attributes.applicationId') AS application_id,
  json_extract(m.message,'$.attributes.senderIpv4Address') AS sender,
  CAST(json_extract(m.message,'$.attributes.processId') AS INTEGER) AS process_id,
  CAST(json_extract(m.message,'$.attributes.objectId') AS INTEGER) AS object_id"""
BASE = ("application_id", "sender", "process_id", "object_id")
SENTINELS = "('18446744073709551615','4294967295')"


def _query(db: Path, sql: str) -> list[tuple[Any, ...]]:
    conn = sqlite3.connect(db)
    try:
        return conn.execute(sql).fetchall()
    finally:
        conn.close()


def _counter_sums(
    db: Path,
    elements: str,
    keys: Sequence[str],
    counters: Iterable[tuple[str, str, str]],
    group: Sequence[str],
    secs: int,
    *,
    gauge: bool = False,
) -> dict[tuple[Any, ...], dict[str, int]]:
    """``elements``: a query giving ``t``, the keys and ``e`` (one JSON object per sample).
    ``counters``: (metric, counter name, JSON path in ``e``)."""
    k = ", ".join(keys)
    samples = " UNION ALL ".join(
        f"SELECT t, {k}, '{metric}' AS metric, '{name}' AS counter, json_extract(e, '{path}') AS raw FROM el"
        for metric, name, path in counters
    )
    diff = "ABS(v - prev)" if gauge else "CASE WHEN v >= prev THEN v - prev END"
    sql = f"""
WITH el AS ({elements}),
s AS ({samples}),
f AS (SELECT t, {k}, metric, counter, CAST(raw AS INTEGER) AS v FROM s
      WHERE raw IS NOT NULL AND CAST(raw AS TEXT) NOT IN {SENTINELS}),
d AS (SELECT *, LAG(v) OVER (PARTITION BY {k}, counter ORDER BY t, v) AS prev FROM f)
SELECT (t / {secs}) * {secs} AS bucket, {", ".join(group)}, metric, SUM({diff})
FROM d GROUP BY bucket, {", ".join(group)}, metric"""
    out: dict[tuple[Any, ...], dict[str, int]] = {}
    for row in _query(db, sql):
        key = tuple(row[: 1 + len(group)])
        out.setdefault(key, {})[row[-2]] = row[-1] or 0
    return out


def source_rates(db: Path, secs: int) -> dict[tuple[Any, ...], dict[str, int]]:
    el = f"""SELECT {ATTRS}, json_extract(j.value,'$.sourceString') AS source_string,
  CASE WHEN json_extract(j.value,'$.lbtrm') IS NOT NULL THEN 'lbtrm'
       WHEN json_extract(j.value,'$.lbtru') IS NOT NULL THEN 'lbtru'
       WHEN json_extract(j.value,'$.lbtipc') IS NOT NULL THEN 'lbtipc'
       WHEN json_extract(j.value,'$.lbtsmx') IS NOT NULL THEN 'lbtsmx'
       WHEN json_extract(j.value,'$.tcp') IS NOT NULL THEN 'tcp' END AS transport,
  j.value AS e
FROM umsmonmsg m, json_each(m.message, '$.stats.sourceTransports') j"""
    keys = (*BASE, "source_string", "transport")
    counters = [
        (metric, f"{t}.{field}", f"$.{t}.{camel}")
        for metric, field, camel in (
            ("msgs", "msgs_sent", "msgsSent"),
            ("bytes", "bytes_sent", "bytesSent"),
        )
        for t in ("lbtrm", "lbtru", "lbtipc", "lbtsmx")
    ]
    return _counter_sums(db, el, keys, counters, keys, secs)


def loss_hotspots(db: Path) -> dict[tuple[Any, ...], dict[str, int]]:
    parts = []
    for side, array, counters in (
        ("receiver", "receiverTransports", [("lost", "lost"), ("unrecovered", "unrecoveredTxw"),
                                             ("unrecovered", "unrecoveredTmo"), ("naks_sent", "naksSent")]),
        ("source", "sourceTransports", [("naks_rcved", "naksRcved"), ("rxs_sent", "rxsSent")]),
    ):  # fmt: skip
        el = f"""SELECT {ATTRS}, '{side}' AS side, json_extract(j.value,'$.sourceString') AS source_string,
  j.value AS e FROM umsmonmsg m, json_each(m.message, '$.stats.{array}') j"""
        cs = [
            (metric, f"{side}.{t}.{camel}", f"$.{t}.{camel}")
            for metric, camel in counters
            for t in ("lbtrm", "lbtru")
        ]
        parts.append(_counter_sums(db, el, (*BASE, "side", "source_string"), cs, ("sender",), 3600))
    out: dict[tuple[Any, ...], dict[str, int]] = {}
    for part in parts:
        for key, sums in part.items():
            for metric, v in sums.items():
                out.setdefault(key, {})[metric] = out.get(key, {}).get(metric, 0) + v
    return out


def tr_churn(db: Path, secs: int) -> dict[tuple[Any, ...], dict[str, int]]:
    el = f"""SELECT {ATTRS}, json_extract(m.message,'$.stats.context') AS e FROM umsmonmsg m
WHERE json_extract(m.message,'$.stats.context') IS NOT NULL
  AND json_array_length(m.message,'$.stats.sourceTransports') = 0
  AND json_array_length(m.message,'$.stats.receiverTransports') = 0
  AND json_array_length(m.message,'$.stats.eventQueues') = 0"""
    counters = [(n, n, f"$.{c}") for n, c in (("tr_dgrams_sent", "trDgramsSent"), ("tr_dgrams_rcved", "trDgramsRcved"),
                                              ("tr_bytes_sent", "trBytesSent"), ("tr_bytes_rcved", "trBytesRcved"))]  # fmt: skip
    out = _counter_sums(db, el, BASE, counters, BASE, secs)
    gauges = [("topic_changes", "src", "$.trSrcTopics"), ("topic_changes", "rcv", "$.trRcvTopics")]
    for key, sums in _counter_sums(db, el, BASE, gauges, BASE, secs, gauge=True).items():
        out.setdefault(key, {}).update(sums)
    return out


def dro_portals(db: Path, secs: int) -> dict[tuple[Any, ...], dict[str, int]]:
    el = f"""SELECT {ATTRS}, json_extract(j.value,'$.portalName') AS portal,
  CASE WHEN json_extract(j.value,'$.endpoint') IS NOT NULL THEN 'endpoint'
       WHEN json_extract(j.value,'$.peer') IS NOT NULL THEN 'peer' END AS portal_type,
  j.value AS e FROM dromonmsg m, json_each(m.message, '$.stats.portals') j"""
    counters = [
        ("rcvd", "e1", "$.endpoint.receive.transportTopicFragmentsRcvd"),
        ("rcvd", "p1", "$.peer.receive.dataMsgsRcvd"),
        ("rcvd_bytes", "e2", "$.endpoint.receive.transportTopicFragmentBytesRcvd"),
        ("rcvd_bytes", "p2", "$.peer.receive.dataMsgBytesRcvd"),
        ("sent", "e3", "$.endpoint.send.transportTopicFragmentsSent"),
        ("sent", "p3", "$.peer.send.dataFragmentsSent"),
        ("sent_bytes", "e4", "$.endpoint.send.transportTopicFragmentBytesSent"),
        ("sent_bytes", "p4", "$.peer.send.dataFragmentBytesSent"),
        ("dropped", "e5", "$.endpoint.send.transportTopicFragmentsDroppedWouldBlock"),
        ("dropped", "e6", "$.endpoint.send.transportTopicFragmentsDroppedError"),
        ("dropped", "e7", "$.endpoint.send.transportTopicFragmentsDroppedSizeError"),
        ("dropped", "e8", "$.endpoint.send.unicastMsgsDroppedError"),
        ("dropped", "p5", "$.peer.send.dataFragmentsDroppedWouldBlock"),
        ("dropped", "p6", "$.peer.send.dataFragmentsDroppedNotOperational"),
        ("dropped", "p7", "$.peer.send.dataFragmentsDroppedQueueFailure"),
    ]
    return _counter_sums(
        db,
        el,
        (*BASE, "portal", "portal_type"),
        counters,
        ("application_id", "portal", "portal_type"),
        secs,
    )


def store_lag(db: Path) -> set[tuple[Any, ...]]:
    sql = """SELECT CAST(json_extract(m.message,'$.attributes.timestamp') AS INTEGER),
  json_extract(m.message,'$.attributes.applicationId'), json_extract(r.value,'$.srcRegid'),
  json_extract(r.value,'$.topicName'), json_extract(v.value,'$.rcvRegid'),
  json_extract(r.value,'$.leadSqn'), json_extract(v.value,'$.highAckSqn'),
  ((json_extract(r.value,'$.leadSqn') - json_extract(v.value,'$.highAckSqn')) % 4294967296 + 4294967296) % 4294967296
FROM umpmonmsg m, json_each(m.message,'$.stats.srcRepoStats') r, json_each(r.value,'$.rcvStats') v
WHERE json_extract(r.value,'$.leadSqn') != 4294967295 AND json_extract(v.value,'$.highAckSqn') != 4294967295"""
    return set(_query(db, sql))


def spark_rows(
    rows: Iterable[Any], time_col: str, group: Sequence[str], metrics: Sequence[str]
) -> dict[tuple[Any, ...], dict[str, int]]:
    """A job's rows keyed like the oracle: (interval start in Unix seconds, group...) -> sums.
    Metrics the oracle saw no sample of are 0 on both sides; they are left out here too."""
    out: dict[tuple[Any, ...], dict[str, int]] = {}
    for r in rows:
        key = (
            int(r[time_col].timestamp()),
            *(int(r[g]) if g in ("process_id", "object_id") else r[g] for g in group),
        )
        out[key] = {m: int(r[m]) for m in metrics}
    return out


def normalise(
    expected: dict[tuple[Any, ...], dict[str, int]], metrics: Sequence[str]
) -> dict[tuple[Any, ...], dict[str, int]]:
    """The oracle's sums with every metric present (0 where it had no delta)."""
    return {k: {m: int(v.get(m, 0) or 0) for m in metrics} for k, v in expected.items()}
