"""The repository's on-disk format: segment files of records, an index per segment, checksums.

Theory of operation
-------------------
Our own format (UM's files are not readable by us); ``docs/store-format.md`` is its one full
description and the place a reader outside pyum (the PySpark issue) starts.  In short:

* a disk repository is a set of *segments* in ``disk-cache-directory``, each a pair of files
  ``<RegID>-cache-<segno>.seg`` (records) and ``<RegID>-cache-<segno>.idx`` (their index); the
  reduced-fd kind shares one set ``reduced-fd-<segno>.seg/.idx`` among the repositories of a Store
  instance, every record tagged with its RegID;
* every file opens with a 64-byte :data:`FILE_HEADER` (magic, version, flags, RegID, segment
  number, creation time, CRC);
* a record is a 36-byte :data:`RECORD_HEADER` (magic, RegID, sequence number, flags, frame
  length, arrival time, frame CRC, header CRC) followed by the LBMC frame bytes as received;
  the header CRC protects every header, so a torn tail is always detected;
* the index file holds blocks, one per write: a 16-byte :data:`BLOCK_HEADER` (magic, entry count,
  the segment offset of the block's first record, CRC of the block) and 24-byte
  :data:`INDEX_ENTRY` s (sqn, record length, arrival time, RegID, flags).  Records are contiguous,
  so a record's offset is its block's ``first_offset`` plus the lengths before it: a reader finds
  message N from the index alone.

Everything here is bytes in, values out; files are read and written by
:mod:`umcore.aio.storeio`.  Decoders raise only :class:`StoreFormatError`, whatever the input.
"""

from __future__ import annotations

import re
import struct
import sys
import zlib
from array import array
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from itertools import accumulate, chain
from operator import itemgetter

from umcore.errors import UMError

__all__ = [
    "BLOCK_HEADER",
    "FILE_HEADER",
    "FILE_PREALLOCATED",
    "FILE_SHARED",
    "FORMAT_VERSION",
    "IDX_MAGIC",
    "INDEX_ENTRY",
    "RECORD_HEADER",
    "REC_DELETE",
    "REC_PAYLOAD_CRC",
    "REC_TRAIL",
    "SEG_MAGIC",
    "FileHeader",
    "IndexData",
    "Record",
    "StoreFormatError",
    "append_record",
    "crc32",
    "decode_file_header",
    "decode_record_header",
    "encode_file_header",
    "encode_index_block",
    "encode_record",
    "encode_record_run",
    "find_record",
    "index_name",
    "iter_repository",
    "parse_index",
    "parse_segment_name",
    "scan_records",
    "segment_name",
    "sqn_column",
    "u32le_column",
]

crc32 = zlib.crc32  # CRC-32 (IEEE, zlib's): in the standard library, a few GB/s

FORMAT_VERSION = 1
SEG_MAGIC = b"PYUMSEG\x00"
IDX_MAGIC = b"PYUMIDX\x00"
# magic, version, header length, flags, RegID (0 = shared), segno, reserved, created, pad, CRC
FILE_HEADER = struct.Struct("<8sHHIIIId24xI")
FILE_HEADER_LEN = FILE_HEADER.size  # 64
FILE_SHARED = 0x1  # a reduced-fd file: records of several repositories
FILE_PREALLOCATED = 0x2  # created at full size: zeros follow the last record

REC_MAGIC = 0x31524D55  # b"UMR1" little-endian
# magic, RegID, sqn, flags, reserved, frame length, arrival (s since the epoch), frame CRC
_REC_HEAD = struct.Struct("<IIIHHIdI")
RECORD_HEADER = struct.Struct("<IIIHHIdII")  # ... plus the CRC of the 32 bytes before it
RECORD_HEADER_LEN = RECORD_HEADER.size  # 36
REC_PAYLOAD_CRC = 0x1  # the frame CRC field is valid
REC_TRAIL = 0x2  # reduced-fd marker: this RegID's records below sqn are released (no frame)
REC_DELETE = 0x4  # reduced-fd marker: this RegID's repository was deleted (no frame)
MAX_FRAME = 0xFFFFFFFF - RECORD_HEADER_LEN  # a frame length is a u32

BLOCK_MAGIC = 0x31424D55  # b"UMB1"
BLOCK_HEADER = struct.Struct("<IIII")  # magic, count, first_offset, CRC(first 12 bytes + entries)
BLOCK_HEADER_LEN = BLOCK_HEADER.size  # 16
INDEX_ENTRY = struct.Struct("<IIdII")  # sqn, record length, arrival, RegID, flags
INDEX_ENTRY_LEN = INDEX_ENTRY.size  # 24
_WORDS = INDEX_ENTRY_LEN // 4  # u32 words per entry
_DOUBLES = INDEX_ENTRY_LEN // 8
_BIG = sys.byteorder == "big"

_SEG_NAME = re.compile(r"^(?:(\d{1,10})-cache|(reduced-fd))-(\d{8,10})\.(seg|idx)$")


class StoreFormatError(UMError):
    """Bytes that are not a valid piece of a repository or state file (where, what)."""


# --- names -----------------------------------------------------------------------------------


def segment_name(reg_id: int | None, segno: int) -> str:
    """``<RegID>-cache-<segno>.seg``; ``reg_id`` None names the shared reduced-fd set."""
    stem = "reduced-fd" if reg_id is None else f"{reg_id}-cache"
    return f"{stem}-{segno:08d}.seg"


def index_name(reg_id: int | None, segno: int) -> str:
    return segment_name(reg_id, segno)[:-4] + ".idx"


def parse_segment_name(name: str) -> tuple[int | None, int, str] | None:
    """(RegID or None for reduced-fd, segno, "seg" | "idx") of a file name, None if not ours."""
    m = _SEG_NAME.match(name)
    if m is None:
        return None
    reg = None if m.group(2) else int(m.group(1))
    return reg, int(m.group(3)), m.group(4)


# --- file header -----------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class FileHeader:
    magic: bytes
    version: int
    flags: int
    reg_id: int
    segno: int
    created: float


def encode_file_header(magic: bytes, flags: int, reg_id: int, segno: int, created: float) -> bytes:
    body = FILE_HEADER.pack(
        magic, FORMAT_VERSION, FILE_HEADER_LEN, flags, reg_id, segno, 0, created, 0
    )
    return body[:-4] + struct.pack("<I", crc32(body[:-4]))


def decode_file_header(buf: bytes | bytearray | memoryview, magic: bytes) -> FileHeader:
    if len(buf) < FILE_HEADER_LEN:
        raise StoreFormatError(f"file header: {len(buf)} bytes, need {FILE_HEADER_LEN}")
    got, version, hlen, flags, reg_id, segno, _, created, crc = FILE_HEADER.unpack_from(buf)
    if got != magic:
        raise StoreFormatError(f"file header: magic {got!r}, expected {magic!r}")
    if crc != crc32(bytes(buf[: FILE_HEADER_LEN - 4])):
        raise StoreFormatError("file header: bad CRC")
    if version != FORMAT_VERSION or hlen != FILE_HEADER_LEN:
        raise StoreFormatError(f"file header: version {version}, we read {FORMAT_VERSION}")
    return FileHeader(got, version, flags, reg_id, segno, created)


# --- records ---------------------------------------------------------------------------------


def append_record(
    out: bytearray, reg_id: int, sqn: int, frame: bytes, arrival: float, flags: int = 0
) -> int:
    """Append one record (header + frame) to ``out``; returns the record's length."""
    head = _REC_HEAD.pack(
        REC_MAGIC, reg_id, sqn, flags | REC_PAYLOAD_CRC, 0, len(frame), arrival, crc32(frame)
    )
    out += head
    out += crc32(head).to_bytes(4, "little")
    out += frame
    return RECORD_HEADER_LEN + len(frame)


# A run's 36-byte record headers as one bytes object per header (encode_record_run's interleave),
# and their first 32 bytes (what each header CRC covers).
_HEAD36 = struct.Struct(f"{RECORD_HEADER_LEN}s")
_HEAD32 = struct.Struct(f"{RECORD_HEADER_LEN - 4}s4x")
_first = itemgetter(0)


def u32le_column(values: Iterable[int]) -> bytes:
    """``values`` as consecutive little-endian u32s (C loops: one ``array`` build)."""
    col = array("I", values)
    if _BIG:
        col.byteswap()
    return col.tobytes()


def sqn_column(first: int, count: int) -> bytes:
    """Sequence numbers ``first, first + 1, ...`` (``count`` of them, wrapping after
    0xFFFFFFFF) as little-endian u32s."""
    wrap = 0x1_0000_0000 - first
    if count <= wrap:
        return u32le_column(range(first, first + count))
    return u32le_column(range(first, 0x1_0000_0000)) + u32le_column(range(count - wrap))


def _set_column(buf: bytearray, offset: int, stride: int, col: bytes) -> None:
    """Write the u32 column ``col`` (little-endian) into ``buf`` at ``offset`` of every
    ``stride``-byte item: four strided byte copies."""
    for j in range(4):
        buf[offset + j :: stride] = col[j::4]


def encode_record_run(
    reg_id: int, first_sqn: int, frames: Sequence[bytes], arrival: float
) -> tuple[bytes, bytes]:
    """The records of ``frames`` -- all of one length, messages ``first_sqn``, ``first_sqn + 1``,
    ... arrived at ``arrival``; ValueError if they are not -- and their index entries:
    ``(records, entries)``, byte for byte
    what :func:`append_record` and :data:`INDEX_ENTRY` give one frame at a time.

    Built column by column instead of record by record (a Store's hot path: a read of a source's
    transport is hundreds of frames): one header template repeated, the sequence numbers and
    the CRCs written into their byte columns, the two CRC columns computed by ``map`` (C loops),
    the headers and frames interleaved by one join."""
    count = len(frames)
    if not count:
        return b"", b""
    flen = len(frames[0])
    if array("I", map(len, frames)) != array("I", (flen,)) * count:
        raise ValueError("encode_record_run: frames of more than one length")
    rlen = RECORD_HEADER_LEN + flen
    sqns = sqn_column(first_sqn, count)
    heads = (
        bytearray(
            _REC_HEAD.pack(REC_MAGIC, reg_id, 0, REC_PAYLOAD_CRC, 0, flen, arrival, 0) + bytes(4)
        )
        * count
    )
    _set_column(heads, 8, RECORD_HEADER_LEN, sqns)
    _set_column(heads, 28, RECORD_HEADER_LEN, u32le_column(map(crc32, frames)))
    hcrcs = u32le_column(map(crc32, map(_first, _HEAD32.iter_unpack(heads))))
    _set_column(heads, 32, RECORD_HEADER_LEN, hcrcs)
    heads_each = map(_first, _HEAD36.iter_unpack(heads))
    records = b"".join(chain.from_iterable(zip(heads_each, frames, strict=True)))
    entries = bytearray(INDEX_ENTRY.pack(0, rlen, arrival, reg_id, 0)) * count
    _set_column(entries, 0, INDEX_ENTRY_LEN, sqns)
    return records, bytes(entries)


def encode_record(reg_id: int, sqn: int, frame: bytes, arrival: float, flags: int = 0) -> bytes:
    out = bytearray()
    append_record(out, reg_id, sqn, frame, arrival, flags)
    return bytes(out)


def decode_record_header(
    buf: bytes | bytearray | memoryview, offset: int = 0
) -> tuple[int, int, int, int, float, int]:
    """``(reg_id, sqn, flags, frame_length, arrival, frame_crc)`` of the record at ``offset``;
    StoreFormatError if the header is short, has a bad magic or a bad CRC."""
    if offset < 0 or len(buf) - offset < RECORD_HEADER_LEN:
        raise StoreFormatError(f"record at {offset}: short header")
    magic, reg_id, sqn, flags, _, length, arrival, pcrc, hcrc = RECORD_HEADER.unpack_from(
        buf, offset
    )
    if magic != REC_MAGIC:
        raise StoreFormatError(f"record at {offset}: bad magic {magic:#x}")
    if hcrc != crc32(bytes(buf[offset : offset + RECORD_HEADER_LEN - 4])):
        raise StoreFormatError(f"record at {offset}: bad header CRC")
    return reg_id, sqn, flags, length, arrival, pcrc


@dataclass(frozen=True, slots=True)
class Record:
    """One record as read back.  ``offset`` is its place in segment ``segno``."""

    reg_id: int
    sqn: int
    flags: int
    arrival: float
    frame: bytes
    segno: int
    offset: int


def check_record(
    buf: bytes | bytearray | memoryview, offset: int, verify: bool = True
) -> tuple[int, int, int, int, float]:
    """Validate the whole record at ``offset`` (header, length, frame CRC when ``verify``):
    ``(reg_id, sqn, flags, frame_length, arrival)``."""
    reg_id, sqn, flags, length, arrival, pcrc = decode_record_header(buf, offset)
    start = offset + RECORD_HEADER_LEN
    if len(buf) - start < length:
        raise StoreFormatError(f"record at {offset}: frame of {length} bytes cut short")
    if verify and flags & REC_PAYLOAD_CRC and crc32(bytes(buf[start : start + length])) != pcrc:
        raise StoreFormatError(f"record at {offset} (sqn {sqn}): bad frame CRC")
    return reg_id, sqn, flags, length, arrival


def scan_records(
    buf: bytes | bytearray | memoryview, start: int, verify: bool = True
) -> tuple[list[tuple[int, int, int, int, int, float]], int, str | None]:
    """Walk whole records from ``start``: ``(records, end, problem)`` where each record is
    ``(offset, reg_id, sqn, flags, record_length, arrival)``, ``end`` the offset after the last
    whole one, and ``problem`` why the walk stopped before the end of ``buf`` (None if it
    reached it).  Used for the part of a segment its index does not cover."""
    out: list[tuple[int, int, int, int, int, float]] = []
    off = start
    n = len(buf)
    while off < n:
        try:
            reg_id, sqn, flags, length, arrival = check_record(buf, off, verify)
        except StoreFormatError as exc:
            return out, off, str(exc)
        size = RECORD_HEADER_LEN + length
        out.append((off, reg_id, sqn, flags, size, arrival))
        off += size
    return out, off, None


# --- index -----------------------------------------------------------------------------------


def encode_index_block(first_offset: int, entries: bytes | bytearray) -> bytes:
    """One index block for the records starting at ``first_offset`` of the segment;
    ``entries`` is the concatenation of their :data:`INDEX_ENTRY` s."""
    count = len(entries) // INDEX_ENTRY_LEN
    head = struct.pack("<III", BLOCK_MAGIC, count, first_offset)
    crc = crc32(entries, crc32(head))
    return head + crc.to_bytes(4, "little") + bytes(entries)


@dataclass(slots=True)
class IndexData:
    """A segment's index as columns (one element per record, in file order).

    ``offsets[i]`` is record i's offset in the segment, ``lengths[i]`` its whole length (header
    included); ``valid_end`` is where the index file's last whole block ends and ``data_end``
    the segment offset after the last indexed record; ``problem`` says why reading stopped
    early (None: the whole file was good)."""

    sqns: array[int]
    lengths: array[int]
    offsets: array[int]
    arrivals: array[float]
    reg_ids: array[int]
    flags: array[int]
    valid_end: int
    data_end: int
    problem: str | None


def parse_index(
    buf: bytes | bytearray | memoryview, data_start: int = FILE_HEADER_LEN
) -> IndexData:
    """Read an index file's bytes (its file header included).  A torn or bad block ends the
    index there (``problem`` says so); what it lists after ``valid_end`` is ignored."""
    decode_file_header(buf, IDX_MAGIC)
    mv = memoryview(buf).cast("B")
    off = FILE_HEADER_LEN
    parts: list[memoryview] = []
    firsts: list[tuple[int, int, int]] = []  # (entry index, first_offset, block start)
    count_all = 0
    problem: str | None = None
    total = len(mv)
    unpack = BLOCK_HEADER.unpack_from
    while off < total:
        if total - off < BLOCK_HEADER_LEN:
            problem = f"index block at {off}: short header"
            break
        magic, count, first, crc = unpack(mv, off)
        body = off + BLOCK_HEADER_LEN
        end = body + count * INDEX_ENTRY_LEN
        if magic != BLOCK_MAGIC or end > total:
            problem = f"index block at {off}: bad magic or cut short"
            break
        if crc32(mv[body:end], crc32(mv[off : off + 12])) != crc:
            problem = f"index block at {off}: bad CRC"
            break
        parts.append(mv[body:end])
        firsts.append((count_all, first, off))
        count_all += count
        off = end
    blob = b"".join(parts)
    words = array("I", blob)
    doubles = array("d", blob)
    if _BIG:
        words.byteswap()
        doubles.byteswap()
    lengths = words[1::_WORDS]
    offsets = array("Q", accumulate(lengths, initial=data_start))
    # records are contiguous: each block must start where the one before it ended
    for k, first, start in firsts:
        if offsets[k] != first:
            problem = f"index block at {start}: starts at {first}, expected {offsets[k]}"
            off = start
            del words[k * _WORDS :]
            del doubles[k * _DOUBLES :]
            del lengths[k:]
            del offsets[k + 1 :]
            break
    expect = offsets.pop()
    return IndexData(
        sqns=words[0::_WORDS],
        lengths=lengths,
        offsets=offsets,
        arrivals=doubles[1::_DOUBLES],
        reg_ids=words[4::_WORDS],
        flags=words[5::_WORDS],
        valid_end=off,
        data_end=expect,
        problem=problem,
    )


def find_record(index: IndexData, sqn: int, reg_id: int | None = None) -> int | None:
    """Position in ``index`` of the record of ``sqn`` (and ``reg_id``, for a shared segment), or
    None.  Sequence numbers of one repository rise (serial arithmetic) through a segment, so
    a binary search over their distance from the first one finds it."""
    sqns = index.sqns
    if reg_id is not None:
        hits = [i for i, r in enumerate(index.reg_ids) if r == reg_id and sqns[i] == sqn]
        return hits[-1] if hits else None
    if not sqns:
        return None
    base = sqns[0]
    want = (sqn - base) & 0xFFFFFFFF
    lo, hi = 0, len(sqns)
    while lo < hi:
        mid = (lo + hi) // 2
        if (sqns[mid] - base) & 0xFFFFFFFF < want:
            lo = mid + 1
        else:
            hi = mid
    return lo if lo < len(sqns) and sqns[lo] == sqn else None


# --- the reader ------------------------------------------------------------------------------


def iter_repository(
    files: Iterable[tuple[str, bytes]], reg_id: int | None = None, verify: bool = True
) -> Iterator[Record]:
    """Every whole, valid message record of a cache directory, oldest segment first.

    ``files`` are ``(file name, bytes)`` pairs, e.g. from ``os.scandir`` or Spark's
    ``binaryFiles`` (only ``*.seg`` files are needed; others are ignored).  ``reg_id`` picks one
    repository (records of a reduced-fd set included), None gives all.  Records that fail their
    checks are skipped; a torn tail ends its segment.  For a reduced-fd set the TRAIL/DELETE
    markers are applied: records a marker released are not given.
    """
    segs: list[tuple[int, int, str, bytes]] = []
    for name, data in files:
        parsed = parse_segment_name(name.rsplit("/", 1)[-1])
        if parsed is None or parsed[2] != "seg":
            continue
        owner, segno, _ = parsed
        if reg_id is not None and owner is not None and owner != reg_id:
            continue
        segs.append((0 if owner is None else 1, segno, name, data))
    segs.sort(key=lambda s: (s[0], s[1]))
    shared: list[Record] = []
    for kind, segno, _, data in segs:
        try:
            decode_file_header(data, SEG_MAGIC)
        except StoreFormatError:
            continue
        off = FILE_HEADER_LEN
        while off < len(data):
            try:
                rid, sqn, flags, length, arrival = check_record(data, off, verify)
            except StoreFormatError:
                off = _resync(data, off + 1)
                if off < 0:
                    break
                continue
            start = off + RECORD_HEADER_LEN
            rec = Record(rid, sqn, flags, arrival, bytes(data[start : start + length]), segno, off)
            off = start + length
            if reg_id is not None and rid != reg_id:
                continue
            if kind == 0:
                shared.append(rec)
            elif not flags & (REC_TRAIL | REC_DELETE):
                yield rec
    yield from _apply_markers(shared)


def _resync(data: bytes, start: int) -> int:
    """The offset of the next record header that checks out after ``start``, -1 if none."""
    magic = REC_MAGIC.to_bytes(4, "little")
    pos = data.find(magic, start)
    while pos >= 0:
        try:
            decode_record_header(data, pos)
        except StoreFormatError:
            pos = data.find(magic, pos + 1)
            continue
        return pos
    return -1


def _apply_markers(records: list[Record]) -> Iterator[Record]:
    trail: dict[int, int] = {}
    deleted_at: dict[int, int] = {}
    for i, rec in enumerate(records):
        if rec.flags & REC_TRAIL:
            trail[rec.reg_id] = rec.sqn
        elif rec.flags & REC_DELETE:
            deleted_at[rec.reg_id] = i
            trail.pop(rec.reg_id, None)
    for i, rec in enumerate(records):
        if rec.flags & (REC_TRAIL | REC_DELETE) or i < deleted_at.get(rec.reg_id, -1):
            continue
        low = trail.get(rec.reg_id)
        if low is not None and (rec.sqn - low) & 0xFFFFFFFF >= 0x80000000:
            continue
        yield rec
