"""MCS connectors (as the writer thread uses them): UM's SQLite database (created by --init-db, one JSON row
per message, refused when missing or lacking UM's tables) and pyum's Parquet files (partitioned
by kind and date, renamed when complete, the same messages as the JSON rows)."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

import pytest

from daemons.mcs.connectors import TABLES, ParquetConnector, SqliteConnector, init_db
from umcore.errors import ConfigError
from umcore.monitor.attributes import MonAttributes, encode_stats
from umcore.monitor.collector import Collector, Record
from umcore.monitor.framing import PacketType
from umcore.monitor.pb import dro_mon_pb2, srs_mon_pb2, ump_mon_pb2, ums_mon_pb2


def records(n: int = 4) -> list[Record]:
    col = Collector()
    out = []
    for i in range(n):
        attrs = MonAttributes(application_id=f"app{i}", timestamp=1_700_000_000 + i * 86_400)
        for ptype, msg in (
            (PacketType.CONTEXT, ums_mon_pb2.UMSMonMsg()),
            (PacketType.UMESTORE, ump_mon_pb2.UMPMonMsg()),
            (PacketType.GATEWAY, dro_mon_pb2.DROMonMsg()),
            (PacketType.SRS, srs_mon_pb2.SRSMonMsg()),
        ):
            if ptype == PacketType.CONTEXT:
                msg.stats.context.fragments_lost = i  # type: ignore[union-attr]
            rec = col.receive(encode_stats(ptype, msg, attrs), f"TCP:10.0.0.{i}:1", 1.0)
            assert rec is not None
            out.append(rec)
    return out


def test_sqlite_rows_are_ums_json_per_table(tmp_path: Path) -> None:
    db = str(tmp_path / "ummon.db")
    init_db(db)
    init_db(db)  # again: the tables exist, nothing changes
    recs = records()
    lite = SqliteConnector(db)
    lite.write(recs[:7])
    lite.write(recs[7:])
    lite.close()
    conn = sqlite3.connect(db)
    for kind, table in TABLES.items():
        rows = [r[0] for r in conn.execute(f"SELECT message FROM {table}")]
        assert rows == [r.json for r in recs if r.kind == kind]  # in arrival order
    (lost,) = conn.execute(
        "SELECT json_extract(message, '$.stats.context.fragmentsLost') FROM umsmonmsg "
        "WHERE json_extract(message, '$.attributes.applicationId') = 'app3'"
    ).fetchone()
    assert lost == "3"  # SQL over UM's JSON, as UM's tools do


def test_sqlite_refuses_a_missing_or_foreign_database(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"does not exist.*MCS --init-db"):
        SqliteConnector(str(tmp_path / "none.db"))
    other = tmp_path / "other.db"
    sqlite3.connect(other).execute("CREATE TABLE t(x)").connection.commit()
    with pytest.raises(ConfigError, match=r"lacks the table.*umsmonmsg"):
        SqliteConnector(str(other))
    junk = tmp_path / "junk.db"
    junk.write_bytes(b"not a database at all" * 100)
    with pytest.raises(ConfigError, match="not a usable SQLite database"):
        SqliteConnector(str(junk))


def test_a_failing_batch_is_rolled_back(tmp_path: Path) -> None:
    db = str(tmp_path / "ummon.db")
    init_db(db)
    conn = SqliteConnector(db)
    recs = records(1)
    with pytest.raises(sqlite3.Error):  # the second table's insert fails: nothing is kept
        conn.store({"umsmonmsg": [(recs[0].json,)], "nosuchtable": [("x",)]})
    conn.write(recs)
    conn.close()
    assert sqlite3.connect(db).execute("SELECT count(*) FROM umsmonmsg").fetchone() == (1,)


def test_parquet_files_by_kind_and_date_hold_the_messages(tmp_path: Path) -> None:
    pq = pytest.importorskip("pyarrow.parquet")
    out = tmp_path / "pq"
    out.mkdir()
    recs = records()
    conn = ParquetConnector(str(out))
    conn.write(recs)
    conn.close()
    assert not list(out.rglob("*.inprogress"))
    parts = sorted(p.relative_to(out).parent.as_posix() for p in out.rglob("*.parquet"))
    assert "kind=ums/date=2023-11-14" in parts and "kind=srs/date=2023-11-17" in parts
    assert len(parts) == 16  # 4 kinds x 4 days
    table = pq.read_table(out / "kind=ums")  # the partition columns come back as columns
    rows = sorted(table.to_pylist(), key=lambda r: r["application_id"])
    ums = [r for r in recs if r.kind == "ums"]
    for row, rec in zip(rows, ums, strict=True):
        assert row["application_id"] == rec.application_id and row["source"] == rec.source
        assert row["raw"] == rec.raw  # the protobuf bytes, as received
        assert row["message"]["stats"]["context"]["fragments_lost"] == int(
            json.loads(rec.json)["stats"]["context"]["fragmentsLost"]
        )


def test_parquet_rows_wait_for_a_whole_row_group(tmp_path: Path) -> None:
    pq = pytest.importorskip("pyarrow.parquet")
    col = Collector()
    attrs = MonAttributes(application_id="app", timestamp=1_700_000_000)
    recs = []
    for i in range(12):
        msg = ums_mon_pb2.UMSMonMsg()
        msg.stats.context.fragments_lost = i
        rec = col.receive(encode_stats(PacketType.CONTEXT, msg, attrs), "TCP:10.0.0.1:1", 1.0)
        assert rec is not None
        recs.append(rec)
    conn = ParquetConnector(str(tmp_path), row_group_rows=5)
    for i in range(0, 12, 4):  # batches of 4: a row group once 5 are held, the rest at close
        conn.write(recs[i : i + 4])
    conn.close()
    (path,) = tmp_path.rglob("*.parquet")
    meta = pq.ParquetFile(path).metadata
    assert [meta.row_group(g).num_rows for g in range(meta.num_row_groups)] == [8, 4]
    lost = [
        r["message"]["stats"]["context"]["fragments_lost"] for r in pq.read_table(path).to_pylist()
    ]
    assert lost == list(range(12))  # every row, in order


def test_parquet_needs_a_writable_directory(tmp_path: Path) -> None:
    pytest.importorskip("pyarrow")
    with pytest.raises(ConfigError, match="not a writable directory"):
        ParquetConnector(str(tmp_path / "missing"))
