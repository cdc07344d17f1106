"""``spark.read.format("umestore")``: a Store's repository files as a table (Spark 4's Python
Data Source API), and ``umestore_acks``: its receivers' ACK positions from the state files.

Theory of operation
-------------------
``spark.read.format("umestore").option("stateDir", STATE).load(CACHE)`` gives one row per stored
message (:data:`SCHEMA`): RegID, the source's session id and topic (from its state file
``<RegID>-state`` in ``stateDir``; null without one), sequence number, record flags, arrival time
at the Store, length of the stored LBMC frame, and the application payload.  The files are those
of ``docs/store-format.md``, read with the format's own code
(:func:`umcore.store.diskformat.iter_repository`, :func:`~umcore.store.diskformat.parse_index`,
:func:`umcore.store.state.decode_state`), never parsed again here.

* **Partitions**: one per segment file of a ``disk`` repository, read in parallel; a
  ``reduced-fd`` set is one partition (its TRAIL/DELETE markers apply across its files in order).
  Rows come in file order: by RegID, then sequence number.
* **Pushdown** (:meth:`UMEStoreReader.pushFilters`): ``reg_id`` and ``topic`` (``=``, ``IN``; a
  topic is resolved to its RegIDs through the state files) and ``sqn`` ranges (``=``, ``<``,
  ``<=``, ``>``, ``>=``) are applied by the reader: a segment of another RegID is never opened,
  and one whose sequence numbers (first and last, from its index file) miss the range is not
  read.  Rows are filtered exactly, so Spark does not filter again.
* **Arrow**: :meth:`UMEStoreReader.read` yields ``pyarrow.RecordBatch`` es of
  :data:`BATCH_ROWS` rows.
* **Damage**: records failing their checks are skipped (as the reference reader does); a file
  cut short is read up to its last whole record, with a warning naming it and the bytes left.

``spark.read.format("umestore_acks").load(STATE)``: one row per receiver of every source state
file (:data:`ACK_SCHEMA`), so store lag can be computed offline (the repository's newest sequence
number, or the state's ``lead_sqn``, minus ``high_ack_sqn``).  UM's "no sequence number"
(0xFFFFFFFF) is null.
"""

from __future__ import annotations

import logging
import os
import warnings
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from pyspark.sql.datasource import (
    DataSource,
    DataSourceReader,
    EqualTo,
    Filter,
    GreaterThan,
    GreaterThanOrEqual,
    In,
    InputPartition,
    LessThan,
    LessThanOrEqual,
)

from umcore.errors import UMError
from umcore.store import diskformat as fmt
from umcore.store.state import NO_SQN, SourceState, decode_state, parse_state_name
from umcore.wire import lbmc

__all__ = [
    "ACK_SCHEMA",
    "BATCH_ROWS",
    "SCHEMA",
    "Selection",
    "UMEStoreAcksDataSource",
    "UMEStoreDataSource",
    "ack_rows",
    "plan_segments",
    "read_segments",
    "read_states",
]

log = logging.getLogger(__name__)

SCHEMA = (
    "reg_id long, session_id long, topic string, sqn long, flags int, "
    "arrival timestamp, length int, payload binary"
)
ACK_SCHEMA = (
    "src_reg_id long, topic string, src_session_id long, lead_sqn long, "
    "rcv_reg_id long, rcv_session_id long, high_ack_sqn long"
)
BATCH_ROWS = 65_536  # rows per Arrow batch: a few MB of payloads at most for small messages
_U32 = 1 << 32


class UMEStoreWarning(UserWarning):
    """A repository file that was cut short or damaged (read up to its last whole record)."""


@dataclass
class Selection:
    """What the pushed filters keep: RegIDs (None: all) and an inclusive sequence range."""

    reg_ids: frozenset[int] | None = None
    sqn_lo: int = 0
    sqn_hi: int = _U32 - 1

    def keeps_reg(self, reg_id: int) -> bool:
        return self.reg_ids is None or reg_id in self.reg_ids

    def keeps_range(self, first: int, last: int) -> bool:
        """Whether a segment holding ``first``..``last`` (serial order) may hold a kept sqn."""
        if last < first:  # wraps past 0xFFFFFFFF: it may hold anything
            return True
        return not (last < self.sqn_lo or first > self.sqn_hi)

    def restrict(self, reg_ids: set[int]) -> None:
        self.reg_ids = frozenset(reg_ids if self.reg_ids is None else self.reg_ids & reg_ids)


@dataclass(frozen=True)
class Segment:
    """One ``.seg`` file and what its index says (``first``/``last`` None: no readable index)."""

    path: str
    name: str
    reg_id: int | None  # None: a reduced-fd (shared) file
    segno: int
    first: int | None
    last: int | None


class FilesPartition(InputPartition):
    """The segment files one task reads, what it keeps, and the states it names rows with."""

    def __init__(self, files: list[Segment], sel: Selection, states: dict[int, tuple[int, str]]):
        super().__init__(tuple(f.name for f in files))
        self.files = files
        self.sel = sel
        self.states = states


def read_states(state_dir: str | None) -> dict[int, SourceState]:
    """Every readable source state file of ``state_dir`` by RegID (a bad one: warned, left out)."""
    out: dict[int, SourceState] = {}
    if not state_dir:
        return out
    for name in sorted(os.listdir(state_dir)):
        reg = parse_state_name(name)
        if reg is None:
            continue
        path = os.path.join(state_dir, name)
        try:
            with open(path, "rb") as f:
                out[reg] = decode_state(f.read())
        except (OSError, fmt.StoreFormatError) as exc:
            warnings.warn(f"{path}: {exc}; left out", UMEStoreWarning, stacklevel=2)
    return out


def plan_segments(cache_dir: str, sel: Selection) -> list[list[Segment]]:
    """The groups of segment files to read (one partition each), pruned by ``sel``."""
    own: list[Segment] = []
    shared: list[Segment] = []
    for name in sorted(os.listdir(cache_dir)):
        parsed = fmt.parse_segment_name(name)
        if parsed is None or parsed[2] != "seg":
            continue
        reg, segno, _ = parsed
        if reg is not None and not sel.keeps_reg(reg):
            continue
        first = last = None
        path = os.path.join(cache_dir, name)
        if reg is not None:
            first, last = _index_range(path, os.path.join(cache_dir, fmt.index_name(reg, segno)))
        seg = Segment(path, name, reg, segno, first, last)
        if reg is None:
            shared.append(seg)
            continue
        if first is not None and last is not None and not sel.keeps_range(first, last):
            continue
        own.append(seg)
    own.sort(key=lambda s: (s.reg_id or 0, s.segno))
    groups = [[s] for s in own]
    if shared:
        groups.append(sorted(shared, key=lambda s: s.segno))
    return groups


def _index_range(seg_path: str, idx_path: str) -> tuple[int | None, int | None]:
    """The first and last sequence numbers of a segment by its index; ``(None, None)`` when the
    index cannot say: missing, damaged, or lagging its segment (a crash between the two writes
    leaves records after the indexed ones; none follow when the bytes there are not a record)."""
    try:
        with open(idx_path, "rb") as f:
            index = fmt.parse_index(f.read())
        with open(seg_path, "rb") as f:
            f.seek(index.data_end)
            after = f.read(fmt.RECORD_HEADER_LEN)
    except (OSError, fmt.StoreFormatError):
        return None, None
    if not index.sqns or index.problem is not None or after.strip(b"\x00"):
        return None, None
    return index.sqns[0], index.sqns[-1]


def _payload(frame: bytes) -> bytes | None:
    try:
        return bytes(lbmc.decode_data(frame)[3])
    except UMError:
        return None


def read_segments(
    files: list[Segment], sel: Selection, states: dict[int, tuple[int, str]], verify: bool = True
) -> Iterator[Any]:
    """The rows of ``files`` kept by ``sel`` as ``pyarrow.RecordBatch`` es of :data:`SCHEMA`."""
    import pyarrow as pa

    datas = []
    for seg in files:
        with open(seg.path, "rb") as f:
            datas.append((seg, f.read()))
    only = next(iter(sel.reg_ids)) if sel.reg_ids is not None and len(sel.reg_ids) == 1 else None
    ends: dict[int, int] = {}
    cols: dict[str, list[Any]] = {c: [] for c in _COLUMNS}
    schema = pa.schema(
        [
            ("reg_id", pa.int64()),
            ("session_id", pa.int64()),
            ("topic", pa.string()),
            ("sqn", pa.int64()),
            ("flags", pa.int32()),
            ("arrival", pa.timestamp("us", tz="UTC")),
            ("length", pa.int32()),
            ("payload", pa.binary()),
        ]
    )
    lo, hi = sel.sqn_lo, sel.sqn_hi
    for rec in fmt.iter_repository(((s.name, d) for s, d in datas), reg_id=only, verify=verify):
        n = len(rec.frame)
        ends[rec.segno] = max(ends.get(rec.segno, 0), rec.offset + fmt.RECORD_HEADER_LEN + n)
        if not (lo <= rec.sqn <= hi and sel.keeps_reg(rec.reg_id)):
            continue
        session, topic = states.get(rec.reg_id, (None, None))
        cols["reg_id"].append(rec.reg_id)
        cols["session_id"].append(session)
        cols["topic"].append(topic)
        cols["sqn"].append(rec.sqn)
        cols["flags"].append(rec.flags)
        cols["arrival"].append(int(rec.arrival * 1_000_000))
        cols["length"].append(n)
        cols["payload"].append(_payload(rec.frame))
        if len(cols["sqn"]) >= BATCH_ROWS:
            yield pa.RecordBatch.from_pydict(cols, schema=schema)
            cols = {c: [] for c in _COLUMNS}
    if cols["sqn"]:
        yield pa.RecordBatch.from_pydict(cols, schema=schema)
    for seg, data in datas:
        end = ends.get(seg.segno, fmt.FILE_HEADER_LEN) if seg.reg_id is not None else None
        if end is None:
            continue
        rest = len(data) - end
        if rest > 0 and data[end:].strip(b"\x00"):
            msg = (
                f"{seg.path}: cut short or damaged after offset {end}: read up to the last "
                f"whole record, {rest} bytes left unread"
            )
            log.warning(msg)
            warnings.warn(msg, UMEStoreWarning, stacklevel=2)


_COLUMNS = ("reg_id", "session_id", "topic", "sqn", "flags", "arrival", "length", "payload")


def _values(f: EqualTo | In) -> list[Any]:
    return list(f.value) if isinstance(f, In) else [f.value]


class UMEStoreReader(DataSourceReader):
    def __init__(self, options: dict[str, str]) -> None:
        path = options.get("path")
        if not path or not os.path.isdir(path):
            raise UMError(f"umestore: {path!r} is not a cache directory (disk-cache-directory)")
        self.cache_dir = path
        self.state_dir = options.get("stateDir") or options.get("statedir")
        self.verify = str(options.get("verify", "true")).lower() != "false"
        self.states = {r: (s.session_id, s.topic) for r, s in read_states(self.state_dir).items()}
        self.sel = Selection()

    def pushFilters(self, filters: list[Filter]) -> Iterator[Filter]:
        for f in filters:
            col = f.attribute if hasattr(f, "attribute") else ()
            if col == ("reg_id",) and isinstance(f, (EqualTo, In)):
                self.sel.restrict({int(v) for v in _values(f) if v is not None})
            elif col == ("topic",) and isinstance(f, (EqualTo, In)):
                topics = set(_values(f))
                self.sel.restrict({r for r, (_, t) in self.states.items() if t in topics})
            elif col == ("sqn",) and isinstance(
                f, (EqualTo, GreaterThan, GreaterThanOrEqual, LessThan, LessThanOrEqual)
            ):
                v = int(f.value)
                if isinstance(f, (EqualTo, GreaterThan, GreaterThanOrEqual)):
                    low = v + 1 if isinstance(f, GreaterThan) else v
                    self.sel.sqn_lo = max(self.sel.sqn_lo, low)
                if isinstance(f, (EqualTo, LessThan, LessThanOrEqual)):
                    high = v - 1 if isinstance(f, LessThan) else v
                    self.sel.sqn_hi = min(self.sel.sqn_hi, high)
            else:
                yield f

    def partitions(self) -> list[InputPartition]:
        groups = plan_segments(self.cache_dir, self.sel)
        return [FilesPartition(g, self.sel, self.states) for g in groups]

    def read(self, partition: InputPartition) -> Iterator[Any]:
        assert isinstance(partition, FilesPartition)
        yield from read_segments(partition.files, partition.sel, partition.states, self.verify)


class UMEStoreDataSource(DataSource):
    """``spark.read.format("umestore")`` (module docstring)."""

    @classmethod
    def name(cls) -> str:
        return "umestore"

    def schema(self) -> str:
        return SCHEMA

    def reader(self, schema: Any) -> DataSourceReader:
        return UMEStoreReader(dict(self.options))


def ack_rows(state_dir: str) -> list[tuple[Any, ...]]:
    """The rows of ``umestore_acks`` for ``state_dir``: one per receiver of each source."""

    def sqn(v: int) -> int | None:
        return None if v == NO_SQN else v

    out = []
    for reg, st in sorted(read_states(state_dir).items()):
        for r in st.receivers:
            out.append(
                (reg, st.topic, st.session_id, sqn(st.lead_sqn), r.reg_id, r.session_id,
                 sqn(r.high_ack_sqn))
            )  # fmt: skip
    return out


class _AcksReader(DataSourceReader):
    def __init__(self, path: str) -> None:
        self.path = path

    def read(self, partition: InputPartition) -> Iterator[tuple[Any, ...]]:
        yield from ack_rows(self.path)


class UMEStoreAcksDataSource(DataSource):
    """``spark.read.format("umestore_acks").load(STATE_DIR)`` (module docstring)."""

    @classmethod
    def name(cls) -> str:
        return "umestore_acks"

    def schema(self) -> str:
        return ACK_SCHEMA

    def reader(self, schema: Any) -> DataSourceReader:
        path = self.options.get("path")
        if not path or not os.path.isdir(path):
            raise UMError(f"umestore_acks: {path!r} is not a state directory")
        return _AcksReader(path)
