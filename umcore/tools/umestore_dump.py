"""umestore-dump: print a Store's repositories offline and check every record's checksum.

Theory of operation
-------------------
Reads, never writes, a Store instance's ``disk-cache-directory`` (segment ``.seg`` and index
``.idx`` files, :mod:`umcore.store.diskformat`, described in ``docs/store-format.md``) and,
when given, its ``disk-state-directory`` (``<RegID>-state`` files, :mod:`umcore.store.state`).
Run it on a stopped Store or on a copy: a running Store appends while this reads (a record
being written shows as a torn tail).

For every repository (RegID) it prints the source (topic, Session ID, request address, kind,
from the state file), its receivers (RegID, Session ID, last ACKed sequence number), the
segments, the number of messages and their sequence ranges; with ``--messages`` each message
(sqn, segment, offset, frame length, arrival time, the first payload bytes).

Checks, every one reported with file and offset:

- each file header (magic, version, CRC);
- each record: header CRC, length, and the frame CRC (``repository-disk-message-checksum`` or
  not, pyum always writes one) -- a bad record is an *error*; the walk resynchronises on the
  next record that checks out;
- a record cut short at the end of a segment is a *torn tail* (a write the Store did not finish:
  the Store drops it at restart, so it is a warning, not an error); zeros after the last record
  of a preallocated file are its unused space;
- each index file: its blocks' CRCs (a bad block is an error; a torn last block a warning);
- each state file: that it decodes.

Exit status: 0 when everything checks out (warnings allowed), 1 when an error was found, 2 for
a usage error (a directory that does not exist).
"""

from __future__ import annotations

import argparse
import datetime
import os
import sys
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import TextIO

from umcore.errors import UMError
from umcore.store import diskformat as fmt
from umcore.store.state import NO_SQN, SourceState, decode_state, parse_state_name
from umcore.wire import lbmc

__all__ = ["Report", "check_cache", "main", "sqn_ranges"]

MAX_RANGES_SHOWN = 20
"""Sequence ranges printed per repository (a repository full of holes shows the first ones and
how many more)."""
PAYLOAD_SHOWN = 32
"""Payload bytes of each message printed with ``--messages``."""


@dataclass
class Repo:
    reg_id: int | None  # None: records of a reduced-fd set before their RegID is known
    segments: list[str] = field(default_factory=list)
    sqns: list[int] = field(default_factory=list)
    messages: list[fmt.Record] = field(default_factory=list)


@dataclass
class Report:
    """What a check found: repositories by RegID, errors and warnings (``file: text``)."""

    repos: dict[int, Repo] = field(default_factory=dict)
    states: dict[int, SourceState] = field(default_factory=dict)
    records: int = 0
    errors: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)


def sqn_ranges(sqns: list[int]) -> list[tuple[int, int]]:
    """Sorted sequence numbers as ``(first, last)`` runs (duplicates merged)."""
    out: list[tuple[int, int]] = []
    for s in sorted(set(sqns)):
        if out and s == out[-1][1] + 1:
            out[-1] = (out[-1][0], s)
        else:
            out.append((s, s))
    return out


def _walk(name: str, data: bytes, report: Report) -> Iterator[fmt.Record]:
    """Every record of one segment file that checks out; problems go to ``report``."""
    try:
        header = fmt.decode_file_header(data, fmt.SEG_MAGIC)
    except fmt.StoreFormatError as exc:
        report.errors.append(f"{name}: {exc}")
        return
    parsed = fmt.parse_segment_name(name)
    segno = parsed[1] if parsed else header.segno
    off = fmt.FILE_HEADER_LEN
    n = len(data)
    magic = fmt.REC_MAGIC.to_bytes(4, "little")
    while off < n:
        try:
            rid, sqn, flags, length, arrival = fmt.check_record(data, off, verify=True)
        except fmt.StoreFormatError as exc:
            if not data[off:].strip(b"\0"):
                if not header.flags & fmt.FILE_PREALLOCATED:
                    report.warnings.append(f"{name}: {n - off} zero bytes after the last record")
                return
            nxt = _next_record(data, off + 1, magic)
            if nxt < 0:
                report.warnings.append(f"{name}: torn tail at offset {off}: {exc}")
                return
            report.errors.append(f"{name}: offset {off}: {exc}")
            off = nxt
            continue
        start = off + fmt.RECORD_HEADER_LEN
        report.records += 1
        yield fmt.Record(rid, sqn, flags, arrival, data[start : start + length], segno, off)
        off = start + length


def _next_record(data: bytes, start: int, magic: bytes) -> int:
    """The next offset whose record header checks out, -1 if none."""
    pos = data.find(magic, start)
    while pos >= 0:
        try:
            fmt.decode_record_header(data, pos)
            return pos
        except fmt.StoreFormatError:
            pos = data.find(magic, pos + 1)
    return -1


def _check_index(name: str, data: bytes, report: Report) -> None:
    try:
        idx = fmt.parse_index(data)
    except fmt.StoreFormatError as exc:
        report.errors.append(f"{name}: {exc}")
        return
    if idx.problem is None:
        return
    if "short" in idx.problem or idx.valid_end + fmt.BLOCK_HEADER_LEN >= len(data):
        report.warnings.append(f"{name}: {idx.problem} (a torn last block)")
    else:
        report.errors.append(f"{name}: {idx.problem}")


def check_cache(cache_dir: str, state_dir: str | None = None, reg_id: int | None = None) -> Report:
    """Read a cache directory (and a state directory) and check everything (module docstring)."""
    report = Report()
    if state_dir is not None:
        for entry in sorted(os.listdir(state_dir)):
            rid = parse_state_name(entry)
            if rid is None or (reg_id is not None and rid != reg_id):
                continue
            path = os.path.join(state_dir, entry)
            try:
                with open(path, "rb") as f:
                    report.states[rid] = decode_state(f.read())
            except (OSError, UMError) as exc:
                report.errors.append(f"{path}: {exc}")
    segs: list[tuple[int, int, str]] = []
    for entry in os.listdir(cache_dir):
        parsed = fmt.parse_segment_name(entry)
        if parsed is None:
            continue
        owner, segno, kind = parsed
        if reg_id is not None and owner is not None and owner != reg_id:
            continue
        path = os.path.join(cache_dir, entry)
        if kind == "idx":
            with open(path, "rb") as f:
                _check_index(entry, f.read(), report)
            continue
        segs.append((0 if owner is None else 1, segno, entry))
    segs.sort()
    for _, _, entry in segs:
        with open(os.path.join(cache_dir, entry), "rb") as f:
            data = f.read()
        for rec in _walk(entry, data, report):
            if reg_id is not None and rec.reg_id != reg_id:
                continue
            repo = report.repos.setdefault(rec.reg_id, Repo(rec.reg_id))
            if entry not in repo.segments:
                repo.segments.append(entry)
            if rec.flags & (fmt.REC_TRAIL | fmt.REC_DELETE):
                continue  # reduced-fd markers are not messages
            repo.sqns.append(rec.sqn)
            repo.messages.append(rec)
    for rid in report.states:
        report.repos.setdefault(rid, Repo(rid))
    return report


def _payload(frame: bytes) -> bytes:
    """The message payload of a stored LBMC frame (the whole frame if it does not decode)."""
    try:
        return bytes(lbmc.decode(frame).payload)
    except UMError:
        return frame


def _sqn(s: int) -> str:
    return "none" if s == NO_SQN else str(s)


def _when(t: float) -> str:
    return datetime.datetime.fromtimestamp(t, datetime.UTC).strftime("%Y-%m-%d %H:%M:%S.%f")


def print_report(report: Report, out: TextIO, *, messages: bool) -> None:
    for rid in sorted(report.repos):
        repo = report.repos[rid]
        st = report.states.get(rid)
        if st is not None:
            out.write(
                f"source RegID {rid}: topic {st.topic!r} Session ID {st.session_id:#x} "
                f"request {st.ip}:{st.port} {st.repository_type}"
                f"{' RPP' if st.rpp else ''} lead {_sqn(st.lead_sqn)}\n"
            )
            for r in st.receivers:
                out.write(
                    f"  receiver RegID {r.reg_id} Session ID {r.session_id:#x} "
                    f"at {r.ip}:{r.port} last ACK {_sqn(r.high_ack_sqn)}\n"
                )
        else:
            out.write(f"source RegID {rid}: (no state file)\n")
        ranges = sqn_ranges(repo.sqns)
        shown = ", ".join(f"{a}" if a == b else f"{a}-{b}" for a, b in ranges[:MAX_RANGES_SHOWN])
        more = (
            f" and {len(ranges) - MAX_RANGES_SHOWN} more" if len(ranges) > MAX_RANGES_SHOWN else ""
        )
        out.write(
            f"  {len(repo.sqns)} message(s) in {len(repo.segments)} segment(s); "
            f"sequence ranges: {shown or 'none'}{more}\n"
        )
        if messages:
            for rec in repo.messages:
                tail = _payload(rec.frame)[:PAYLOAD_SHOWN]
                out.write(
                    f"    sqn {rec.sqn} segment {rec.segno} offset {rec.offset} "
                    f"{len(rec.frame)} bytes at {_when(rec.arrival)}: {tail!r}\n"
                )
    for line in report.warnings:
        out.write(f"warning: {line}\n")
    for line in report.errors:
        out.write(f"error: {line}\n")
    verdict = "errors found" if report.errors else "all checksums good"
    out.write(
        f"{report.records} record(s) checked in {len(report.repos)} repositor"
        f"{'y' if len(report.repos) == 1 else 'ies'}: {len(report.errors)} error(s), "
        f"{len(report.warnings)} warning(s): {verdict}\n"
    )


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="umestore-dump",
        description="Print a umestored repository (sources, RegIDs, sequence ranges, messages) "
        "and check every record's checksum. Exit 1 if a check fails.",
    )
    p.add_argument("cache_dir", metavar="CACHE_DIR", help="the Store's disk-cache-directory")
    p.add_argument("-s", "--state", metavar="STATE_DIR", help="the Store's disk-state-directory")
    p.add_argument("-r", "--regid", type=int, metavar="REGID", help="only this source RegID")
    p.add_argument("-m", "--messages", action="store_true", help="print every message")
    return p


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    for what, path in (("CACHE_DIR", args.cache_dir), ("--state", args.state)):
        if path is not None and not os.path.isdir(path):
            sys.stderr.write(f"umestore-dump: {what} {path!r} is not a directory\n")
            return 2
    report = check_cache(args.cache_dir, args.state, args.regid)
    print_report(report, sys.stdout, messages=args.messages)
    return 1 if report.errors else 0


if __name__ == "__main__":
    sys.exit(main())
