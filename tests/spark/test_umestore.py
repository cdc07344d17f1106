"""``spark.read.format("umestore")`` over repositories the Store's code wrote: every message in
order with its fields, filters pushed down (fewer files read, same rows as filtering in Python),
a truncated file read to its last whole record with a warning, and the ACK positions."""

from __future__ import annotations

import shutil
import time
from pathlib import Path
from typing import Any

import pytest

from tests.spark.storekit import Source, frame, payload, write_store
from umcore.spark.umestore import Selection, UMEStoreWarning, plan_segments, read_segments

SOURCES = [
    Source(1001, "orders", 5, range(0, 600), ((7, 100), (8, 0xFFFFFFFF))),
    Source(2002, "quotes", 6, range(10, 300), ((9, 299),)),
]


@pytest.fixture(scope="module")
def spark(spark: Any) -> Any:
    """The run's session (conftest), which starts without the Store's data sources, with them."""
    from umcore.spark.session import register_umestore

    register_umestore(spark)
    return spark


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path, float, float]:
    root = tmp_path_factory.mktemp("store")
    before = time.time()
    cache, state = write_store(root, SOURCES)
    return cache, state, before, time.time()


def expected(keep: Any = lambda s, q: True) -> list[tuple[Any, ...]]:
    return [
        (s.reg_id, s.session_id, s.topic, q, 1, len(frame(s.reg_id, q)), payload(s.reg_id, q))
        for s in SOURCES
        for q in s.sqns
        if keep(s, q)
    ]


def rows(df: Any) -> list[tuple[Any, ...]]:
    return [
        (r.reg_id, r.session_id, r.topic, r.sqn, r.flags, r.length, bytes(r.payload))
        for r in df.collect()
    ]


def test_every_message_in_order_with_its_fields(spark: Any, store: Any) -> None:
    cache, state, before, after = store
    df = spark.read.format("umestore").option("stateDir", str(state)).load(str(cache))
    assert rows(df) == expected()
    assert df.rdd.getNumPartitions() == len(list(cache.glob("*.seg"))) > 2  # a task per file
    times = [r.arrival.timestamp() for r in df.select("arrival").collect()]
    assert all(before - 1 <= t <= after + 1 for t in times)
    assert times == sorted(times)
    # every record's CRCs checked: the same rows
    checked = spark.read.format("umestore").option("stateDir", str(state)).option("verify", "true")
    assert rows(checked.load(str(cache))) == expected()
    # without the state directory the rows are the same, unnamed
    bare = spark.read.format("umestore").load(str(cache)).select("topic", "session_id").distinct()
    assert [tuple(r) for r in bare.collect()] == [(None, None)]


@pytest.mark.parametrize(
    ("where", "keep"),
    [
        ("reg_id = 2002", lambda s, q: s.reg_id == 2002),
        ("topic = 'orders' AND sqn >= 450", lambda s, q: s.topic == "orders" and q >= 450),
        ("sqn < 40", lambda s, q: q < 40),
        (
            "reg_id IN (1001) AND sqn BETWEEN 100 AND 130",
            lambda s, q: s.reg_id == 1001 and 100 <= q <= 130,
        ),
    ],
)
def test_filters_are_pushed_down(spark: Any, store: Any, where: str, keep: Any) -> None:
    cache, state, _, _ = store

    def load() -> Any:
        # a DataFrame per query: pyspark 4.3.0 keeps the pushed-down scan of a Python data
        # source on the relation, so a second query of the same DataFrame may reuse it
        return spark.read.format("umestore").option("stateDir", str(state)).load(str(cache))

    filtered = load().where(where)
    assert rows(filtered) == expected(keep)
    files = len(list(cache.glob("*.seg")))
    assert 0 < load().where(where).rdd.getNumPartitions() < load().rdd.getNumPartitions() == files


def test_truncated_file_is_read_to_its_last_whole_record(store: Any, tmp_path: Path) -> None:
    cache, _, _, _ = store
    copy = tmp_path / "cache"
    shutil.copytree(cache, copy)
    last = sorted(copy.glob("1001-cache-*.seg"))[-1]
    data = last.read_bytes()
    last.write_bytes(data[: len(data) - 7])  # the last record loses its end
    groups = plan_segments(str(copy), Selection(reg_ids=frozenset({1001})))
    got: list[int] = []
    with pytest.warns(
        UMEStoreWarning, match=rf"{last.name}: cut short .* read up to the last whole record"
    ):
        for g in groups:
            for batch in read_segments(g, Selection(reg_ids=frozenset({1001})), {}):
                got.extend(batch.column("sqn").to_pylist())
    assert got == list(range(599))  # every whole record, the cut one left out


def test_ack_positions_from_the_state_files(spark: Any, store: Any) -> None:
    _, state, _, _ = store
    acks = spark.read.format("umestore_acks").load(str(state)).orderBy("rcv_reg_id")
    assert [
        (r.src_reg_id, r.topic, r.rcv_reg_id, r.rcv_session_id, r.high_ack_sqn)
        for r in acks.collect()
    ] == [
        (1001, "orders", 7, 12, 100),
        (1001, "orders", 8, 13, None),  # UM's "no sequence number yet"
        (2002, "quotes", 9, 15, 299),
    ]


def test_not_a_directory_is_refused(spark: Any, tmp_path: Path) -> None:
    with pytest.raises(Exception, match="is not a cache directory"):
        spark.read.format("umestore").load(str(tmp_path / "missing")).collect()
