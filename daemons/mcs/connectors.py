"""MCS connectors: where collected statistics go (SQLite as UM's MCS, Parquet as pyum adds).

Theory of operation
-------------------
A connector stores batches on the writer thread of :class:`~daemons.mcs.workers.WorkerPool`,
never on the event loop: a slow disk delays the writer, never the receiver.  What it stores was
converted in a worker process by its :attr:`Connector.converter` (:mod:`daemons.mcs.convert`).

- :class:`SqliteConnector` -- UM's storage contract (dro-monitoring-config.md B5): a database
  that exists before MCS starts, with UM's four tables ``umsmonmsg``, ``umpmonmsg``,
  ``dromonmsg`` and ``srsmonmsg``, one column ``message`` holding one message as protobuf's
  canonical JSON per row.  ``MCS --init-db PATH`` creates it with UM's ``ummon_db.sql``
  statements (:data:`UM_SCHEMA`).  One transaction per batch.
- :class:`ParquetConnector` (pyum) -- the analytics format: files under
  ``DIR/kind=K/date=YYYY-MM-DD/`` (Hive partitioning, which Spark and pyarrow read as columns),
  each row the flat key columns, the message as a nested struct typed from the ``.proto``
  descriptors, and the raw protobuf bytes, in row groups of :data:`ROW_GROUP_ROWS`; a batch is
  built column by column (:class:`ParquetConverter`, in a worker;
  :class:`~umcore.monitor.pbcolumns.Columns`: no dict per message).  A file is written as
  ``*.parquet.inprogress`` and renamed when closed -- after :data:`ROLL_ROWS` rows or
  :data:`ROLL_SECONDS`, and at stop -- so a reader never sees half a file.
"""

from __future__ import annotations

import logging
import operator
import os
import sqlite3
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from umcore.errors import ConfigError
from umcore.monitor.collector import KEY_COLUMNS, Record, arrow_type
from umcore.monitor.pb import dro_mon_pb2, srs_mon_pb2, ump_mon_pb2, ums_mon_pb2
from umcore.monitor.pbcolumns import Columns

__all__ = [
    "ROLL_ROWS",
    "ROLL_SECONDS",
    "ROW_GROUP_ROWS",
    "TABLES",
    "UM_SCHEMA",
    "Connector",
    "ParquetConnector",
    "ParquetConverter",
    "SqliteConnector",
    "init_db",
    "load_converter",
    "sqlite_rows",
]

log = logging.getLogger("MCS")

# UM's tables, by kind.
TABLES = {"ums": "umsmonmsg", "ump": "umpmonmsg", "dro": "dromonmsg", "srs": "srsmonmsg"}
# UM's MCS/bin/ummon_db.sql, the statements the database is created with.
UM_SCHEMA = (
    "PRAGMA foreign_keys=OFF;\n"
    "BEGIN TRANSACTION;\n"
    + "".join(f"CREATE TABLE {t}(message json);\n" for t in TABLES.values())
    + "COMMIT;\n"
)
# A Parquet file is closed (and becomes visible) after this many rows or seconds.
ROLL_ROWS = 100_000
ROLL_SECONDS = 60.0
# Rows of one kind and date held (as Arrow tables) before they are written as one Parquet row
# group.  Writing a row group costs a fixed setup per leaf column (hundreds in a statistics
# message: UMS has about 200): a row group per batch, some 1,250 rows of a kind, spent more than
# the encoding itself; 10,000 rows amortise it (and readers prefer large row groups).  At most
# four kinds times this many rows wait in memory (tens of MB); a file's rows become visible only
# when it is closed, so holding them changes nothing a reader sees.
ROW_GROUP_ROWS = 10_000
# Seconds SQLite waits for a lock another process holds (a report reading the database).
SQLITE_BUSY_TIMEOUT = 10.0

# A record's key columns, in KEY_COLUMNS order, read in one C call.
_KEYS = operator.attrgetter(*KEY_COLUMNS)

_CLASSES: dict[str, Any] = {
    "ums": ums_mon_pb2.UMSMonMsg,
    "ump": ump_mon_pb2.UMPMonMsg,
    "dro": dro_mon_pb2.DROMonMsg,
    "srs": srs_mon_pb2.SRSMonMsg,
}


class Connector:
    """What a connector does.  Storing messages is two steps: *convert* them (decode, the JSON
    rows, the Arrow tables: the costly part, run in a conversion worker process,
    :mod:`daemons.mcs.workers`) and :meth:`store` the result (the transaction, the files: on the
    writer thread of the daemon's process).  :attr:`converter` names, as ``module:callable``, the
    factory a worker calls once to get its conversion function (:mod:`daemons.mcs.convert`);
    :meth:`write` does both steps for decoded records in the calling thread."""

    name = "connector"
    converter = ""

    def write(self, batch: Sequence[Record]) -> None:
        raise NotImplementedError

    def store(self, converted: Any) -> None:
        raise NotImplementedError

    def close(self) -> None:
        """Finish what is written (at stop)."""


def load_converter(spec: str) -> Any:
    """The object ``module:name`` names (a connector's :attr:`Connector.converter`)."""
    import importlib

    module, _, name = spec.partition(":")
    return getattr(importlib.import_module(module), name)


def sqlite_rows(batch: Sequence[Record]) -> dict[str, list[tuple[str]]]:
    """The SQLite connector's conversion: UM's JSON row of every record, by table."""
    by_table: dict[str, list[tuple[str]]] = {}
    for r in batch:
        by_table.setdefault(TABLES[r.kind], []).append((r.json,))
    return by_table


def init_db(path: str) -> None:
    """``MCS --init-db``: create UM's database at ``path`` (the tables it lacks, when it
    exists already).  OSError / sqlite3.Error when it cannot."""
    conn = sqlite3.connect(path)
    try:
        with conn:
            for table in TABLES.values():
                conn.execute(f"CREATE TABLE IF NOT EXISTS {table}(message json)")
    finally:
        conn.close()


class SqliteConnector(Connector):
    """UM's SQLite storage (module docstring)."""

    name = "sqlite"
    converter = "daemons.mcs.convert:sqlite"

    def __init__(self, path: str, *, source: str = "sqlite_database_path") -> None:
        if not Path(path).is_file():
            raise ConfigError(
                f"the database {path} does not exist (UM's MCS needs it created first: "
                f"MCS --init-db {path})",
                source=source,
            )
        try:
            self.conn = sqlite3.connect(
                path, timeout=SQLITE_BUSY_TIMEOUT, check_same_thread=False, isolation_level=None
            )
            have = {
                r[0] for r in self.conn.execute("SELECT name FROM sqlite_master WHERE type='table'")
            }
        except sqlite3.Error as exc:
            raise ConfigError(
                f"{path} is not a usable SQLite database: {exc}", source=source
            ) from None
        missing = [t for t in TABLES.values() if t not in have]
        if missing:
            self.conn.close()
            raise ConfigError(
                f"{path} lacks the table(s) {', '.join(missing)} (create them with MCS --init-db {path})",
                source=source,
            )
        self.path = path

    def write(self, batch: Sequence[Record]) -> None:
        self.store(sqlite_rows(batch))

    def store(self, converted: dict[str, list[tuple[str]]]) -> None:
        """One transaction: the rows of :func:`sqlite_rows`."""
        by_table = converted
        cur = self.conn.cursor()
        cur.execute("BEGIN")
        try:
            for table, rows in by_table.items():
                cur.executemany(f"INSERT INTO {table}(message) VALUES (?)", rows)
            cur.execute("COMMIT")
        except BaseException:
            cur.execute("ROLLBACK")
            raise

    def close(self) -> None:
        self.conn.close()


class _OpenFile:
    __slots__ = ("final", "held", "held_rows", "opened", "path", "rows", "writer")

    def __init__(self, writer: Any, path: Path, final: Path, opened: float) -> None:
        self.writer = writer
        self.path = path
        self.final = final
        self.rows = 0
        self.opened = opened
        self.held: list[Any] = []  # tables not yet written (the next row group)
        self.held_rows = 0


class ParquetConverter:
    """The Parquet connector's conversion (and its converter factory): records to one Arrow
    table per kind and date, column by column.  Needs pyarrow (ImportError)."""

    def __init__(self) -> None:
        import pyarrow as pa

        self.pa = pa
        self.schemas = {kind: self._schema(cls) for kind, cls in _CLASSES.items()}
        self.columns = {kind: Columns(cls.DESCRIPTOR) for kind, cls in _CLASSES.items()}

    def _schema(self, cls: Any) -> Any:
        pa = self.pa
        return pa.schema(
            [
                pa.field("time", pa.timestamp("ms", tz="UTC")),
                pa.field("application_id", pa.string()),
                pa.field("sender", pa.string()),
                pa.field("process_id", pa.uint64()),
                pa.field("object_id", pa.uint64()),
                pa.field("context_instance", pa.string()),
                pa.field("domain_id", pa.uint32()),
                pa.field("source", pa.string()),
                pa.field("message", arrow_type(cls.DESCRIPTOR)),
                pa.field("raw", pa.binary()),
            ]
        )

    def __call__(self, batch: Sequence[Record]) -> list[tuple[str, str, Any]]:
        groups: dict[tuple[str, str], list[Record]] = {}
        for r in batch:
            groups.setdefault((r.kind, r.date), []).append(r)
        pa = self.pa
        out = []
        for (kind, date), recs in groups.items():
            # column-wise: the key columns transposed in C, the messages through the kind's
            # column builders (no dict per message)
            keys: dict[str, Any] = dict(
                zip(KEY_COLUMNS, zip(*map(_KEYS, recs), strict=True), strict=True)
            )
            keys["time"] = [int(t * 1000) for t in keys["time"]]
            message = self.columns[kind]
            message.extend([r.message for r in recs])
            schema = self.schemas[kind]
            arrays = [pa.array(keys[c], schema.field(c).type) for c in KEY_COLUMNS]
            arrays.append(message.build())
            arrays.append(pa.array([r.raw for r in recs], pa.binary()))
            out.append((kind, date, pa.Table.from_arrays(arrays, schema=schema)))
        return out


class ParquetConnector(Connector):
    """Parquet files partitioned by kind and date (module docstring).  Needs pyarrow."""

    name = "parquet"
    converter = "daemons.mcs.convert:parquet"

    def __init__(
        self,
        directory: str,
        *,
        source: str = "parquet_directory",
        row_group_rows: int = ROW_GROUP_ROWS,
    ) -> None:
        try:
            import pyarrow as pa
            import pyarrow.parquet as pq
        except ImportError:
            raise ConfigError(
                "the parquet connector needs pyarrow (pip install 'pyum[parquet]')", source=source
            ) from None
        self.pa, self.pq = pa, pq
        self.dir = Path(directory)
        if not self.dir.is_dir() or not os.access(self.dir, os.W_OK):
            raise ConfigError(f"{directory} is not a writable directory", source=source)
        self._convert = ParquetConverter()
        self.schemas = self._convert.schemas
        self.row_group_rows = row_group_rows
        self.open: dict[tuple[str, str], _OpenFile] = {}
        self.seq = 0
        self.files_closed = 0

    def write(self, batch: Sequence[Record]) -> None:
        self.store(self._convert(batch))

    def store(self, converted: list[tuple[str, str, Any]]) -> None:
        """The tables of :class:`ParquetConverter` (or each as an Arrow IPC stream, as a worker
        sends them) into their files (held until a row group is full; a file rolled after
        :data:`ROLL_ROWS` rows or :data:`ROLL_SECONDS`)."""
        now = time.monotonic()
        for kind, date, data in converted:
            table = data
            if not isinstance(data, self.pa.Table):
                table = self.pa.ipc.open_stream(data).read_all()
            key = (kind, date)
            f = self._file(key, now)
            f.held.append(table)
            f.held_rows += table.num_rows
            f.rows += table.num_rows
            if f.held_rows >= self.row_group_rows:
                self._flush(f)
            if f.rows >= ROLL_ROWS:
                self._close(key)
        for key in [k for k, f in self.open.items() if now - f.opened >= ROLL_SECONDS]:
            self._close(key)

    def _file(self, key: tuple[str, str], now: float) -> _OpenFile:
        f = self.open.get(key)
        if f is None:
            kind, date = key
            part = self.dir / f"kind={kind}" / f"date={date}"
            part.mkdir(parents=True, exist_ok=True)
            self.seq += 1
            name = f"part-{time.strftime('%Y%m%dT%H%M%S')}-{os.getpid()}-{self.seq}.parquet"
            path = part / (name + ".inprogress")
            writer = self.pq.ParquetWriter(str(path), self.schemas[kind])
            f = self.open[key] = _OpenFile(writer, path, part / name, now)
        return f

    def _flush(self, f: _OpenFile) -> None:
        """Write the held tables as one row group."""
        if f.held:
            table = self.pa.concat_tables(f.held)
            f.writer.write_table(table, row_group_size=table.num_rows)
            f.held.clear()
            f.held_rows = 0

    def _close(self, key: tuple[str, str]) -> None:
        f = self.open.pop(key)
        self._flush(f)
        f.writer.close()
        os.replace(f.path, f.final)
        self.files_closed += 1

    def close(self) -> None:
        for key in list(self.open):
            self._close(key)
