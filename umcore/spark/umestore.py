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
* **Checks**: as the Store's own start-up (``repository-disk-message-checksum`` 0, UM's
  default), the records a segment's index lists are read as they are and the bytes after them
  are scanned and checked for whole records; ``.option("verify", "true")`` checks every
  record's CRCs (a bad one is left out).  A reduced-fd set, or a segment without a usable index,
  is read record by record by the reference reader, every record checked.  A file cut short is
  read up to its last whole record, with a warning naming it and the bytes left.

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


def _arrow_schema() -> Any:
    import pyarrow as pa

    return pa.schema(
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


def _warn_tail(path: str, data: bytes, end: int) -> None:
    rest = len(data) - end
    if rest > 0 and data[end:].strip(b"\x00"):
        msg = (
            f"{path}: cut short or damaged after offset {end}: read up to the last "
            f"whole record, {rest} bytes left unread"
        )
        log.warning(msg)
        warnings.warn(msg, UMEStoreWarning, stacklevel=3)


def _batches(cols: dict[str, list[Any]], sel: Selection) -> Iterator[Any]:
    import pyarrow as pa
    import pyarrow.compute as pc

    batch = pa.RecordBatch.from_pydict(cols, schema=_arrow_schema())
    if sel.sqn_lo > 0 or sel.sqn_hi < _U32 - 1:
        sqn = batch.column("sqn")
        batch = batch.filter(
            pc.and_(pc.greater_equal(sqn, sel.sqn_lo), pc.less_equal(sqn, sel.sqn_hi))
        )
    for start in range(0, batch.num_rows, BATCH_ROWS):
        yield batch.slice(start, BATCH_ROWS)


def _read_indexed(
    seg: Segment, sel: Selection, states: dict[int, tuple[int, str]], verify: bool
) -> Iterator[Any] | None:
    """A ``disk`` segment read by its index (None: no usable index; read it record by record).
    As the Store's start-up does with ``repository-disk-message-checksum`` 0, the records its
    index lists are taken as they are (``verify``: every record's CRCs checked too) and the
    bytes after them are scanned, and checked, for whole records the index missed."""
    assert seg.reg_id is not None
    try:
        with open(seg.path, "rb") as f:
            data = f.read()
        with open(seg.path[: -len(".seg")] + ".idx", "rb") as f:
            index = fmt.parse_index(f.read())
        fmt.decode_file_header(data, fmt.SEG_MAGIC)
    except (OSError, fmt.StoreFormatError):
        return None
    n = len(index.sqns)
    while n and index.offsets[n - 1] + index.lengths[n - 1] > len(data):
        n -= 1  # listed, but beyond the end of the file (the index was written, the data cut)
    rows = list(range(n))
    if verify:
        rows = [i for i in rows if _whole(data, index.offsets[i])]
    end = index.offsets[n - 1] + index.lengths[n - 1] if n else fmt.FILE_HEADER_LEN
    tail, stop, _problem = fmt.scan_records(data, end, True)
    _warn_tail(seg.path, data, stop)
    offs = [index.offsets[i] for i in rows] + [t[0] for t in tail]
    lens = [index.lengths[i] for i in rows] + [t[4] for t in tail]
    head = fmt.RECORD_HEADER_LEN
    unpack = fmt.RECORD_HEADER.unpack_from
    session, topic = states.get(seg.reg_id, (None, None))
    k = len(offs)
    cols: dict[str, list[Any]] = {
        "reg_id": [seg.reg_id] * k,
        "session_id": [session] * k,
        "topic": [topic] * k,
        "sqn": [index.sqns[i] for i in rows] + [t[2] for t in tail],
        # the record's own flags (FRAME_CRC...); an index entry keeps only the marker bits
        "flags": [unpack(data, o)[3] for o in offs],
        "arrival": [int(index.arrivals[i] * 1_000_000) for i in rows]
        + [int(t[5] * 1_000_000) for t in tail],
        "length": [n - head for n in lens],
        # a bare data message (no extension header: its next-header byte is 0) is the common
        # case: its payload follows the 12-byte data header
        "payload": [
            data[o + head + DATA_HEADER : o + n]
            if data[o + head + 1] == 0
            else _payload(data[o + head : o + n])
            for o, n in zip(offs, lens, strict=True)
        ],
    }
    return _batches(cols, sel)


DATA_HEADER = 12  # LBMC data header: ver/type, next header, length, topic index, sequence number


def _whole(data: bytes, offset: int) -> bool:
    try:
        fmt.check_record(data, offset, True)
    except fmt.StoreFormatError:
        return False
    return True


def read_segments(
    files: list[Segment], sel: Selection, states: dict[int, tuple[int, str]], verify: bool = False
) -> Iterator[Any]:
    """The rows of ``files`` kept by ``sel`` as ``pyarrow.RecordBatch`` es of :data:`SCHEMA`:
    a ``disk`` segment by its index (:func:`_read_indexed`), a reduced-fd set (or a segment
    without a usable index) record by record with the format's reader."""
    rest = []
    for seg in files:
        got = _read_indexed(seg, sel, states, verify) if seg.reg_id is not None else None
        if got is None:
            rest.append(seg)
        else:
            yield from got
    if rest:
        yield from _read_records(rest, sel, states)


def _read_records(
    files: list[Segment], sel: Selection, states: dict[int, tuple[int, str]]
) -> Iterator[Any]:
    datas = []
    for seg in files:
        with open(seg.path, "rb") as f:
            datas.append((seg, f.read()))
    only = next(iter(sel.reg_ids)) if sel.reg_ids is not None and len(sel.reg_ids) == 1 else None
    ends: dict[int, int] = {}
    cols: dict[str, list[Any]] = {c: [] for c in _COLUMNS}
    for rec in fmt.iter_repository(((s.name, d) for s, d in datas), reg_id=only, verify=True):
        n = len(rec.frame)
        ends[rec.segno] = max(ends.get(rec.segno, 0), rec.offset + fmt.RECORD_HEADER_LEN + n)
        if not sel.keeps_reg(rec.reg_id):
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
    yield from _batches(cols, sel)
    for seg, data in datas:
        if seg.reg_id is not None:
            _warn_tail(seg.path, data, ends.get(seg.segno, fmt.FILE_HEADER_LEN))


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
        self.verify = str(options.get("verify", "false")).lower() == "true"
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
