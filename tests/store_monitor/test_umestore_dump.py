"""umestore-dump on a repository the store core wrote (real files through corekit's executor):
sources, RegIDs, receivers, sequence ranges and messages printed, every checksum checked; a
corrupted frame is reported with its file and offset and the exit status is 1."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.store.corekit import Receiver, Source, make_rig, topic_config
from umcore.store import diskformat as fmt
from umcore.tools.umestore_dump import check_cache, main, sqn_ranges

ROOT = Path(__file__).resolve().parents[2]


def written(tmp: Path) -> tuple[int, int, int]:
    """A disk repository of 30 messages (sqn 0..29) and a receiver that ACKed 11; another
    source with 5 (0..4).  Returns the RegIDs (source, receiver, other source)."""
    rig = make_rig(tmp, [topic_config("orders", repository_type="disk")])
    src = Source(rig, "orders")
    src.register()
    rcv = Receiver(rig, src, session_id=0x77)
    rcv.register()
    src.send(*range(30))
    rcv.ack(11)
    other = Source(rig, "orders", port=14399)
    other.register()
    other.send(*range(5))
    rig.core.shutdown(rig.now)  # state files with the ACK positions
    rig.pump()
    return src.reg_id, rcv.reg_id, other.reg_id


def test_sqn_ranges() -> None:
    assert sqn_ranges([5, 1, 2, 3, 3, 9, 10]) == [(1, 3), (5, 5), (9, 10)]
    assert sqn_ranges([]) == []


def test_dump_prints_sources_receivers_ranges_and_messages(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    src, rcv, other = written(tmp_path)
    rc = main([str(tmp_path / "cache"), "--state", str(tmp_path / "state"), "--messages"])
    out = capsys.readouterr().out
    assert rc == 0, out
    assert f"source RegID {src}: topic 'orders'" in out
    assert f"  receiver RegID {rcv} Session ID 0x77" in out and "last ACK 11" in out
    assert "30 message(s) in 1 segment(s); sequence ranges: 0-29" in out
    assert "5 message(s) in 1 segment(s); sequence ranges: 0-4" in out
    assert out.count("    sqn ") == 35
    assert "    sqn 7 segment 1 offset " in out and ": b'msg7'" in out
    assert "35 record(s) checked in 2 repositories: 0 error(s)" in out
    assert out.rstrip().endswith("all checksums good")
    # one RegID only
    assert main([str(tmp_path / "cache"), "-r", str(other)]) == 0
    out = capsys.readouterr().out
    assert f"source RegID {other}: (no state file)" in out and f"RegID {src}" not in out


def test_a_bad_checksum_is_reported_with_file_and_offset_exit_1(tmp_path: Path) -> None:
    src, _, _ = written(tmp_path)
    cache = tmp_path / "cache"
    seg = cache / fmt.segment_name(src, 1)
    data = bytearray(seg.read_bytes())
    # the 10th record's last frame byte
    off = fmt.FILE_HEADER_LEN
    for _ in range(9):
        _, _, _, length, _ = fmt.check_record(data, off)
        off += fmt.RECORD_HEADER_LEN + length
    _, sqn, _, length, _ = fmt.check_record(data, off)
    data[off + fmt.RECORD_HEADER_LEN + length - 1] ^= 0xFF
    seg.write_bytes(bytes(data))
    report = check_cache(str(cache))
    assert report.errors == [
        f"{seg.name}: offset {off}: record at {off} (sqn {sqn}): bad frame CRC"
    ]
    assert sorted(report.repos[src].sqns) == [s for s in range(30) if s != sqn]  # walk resumed
    # the console program, as an operator runs it
    proc = subprocess.run(
        [sys.executable, "-m", "umcore.tools.umestore_dump", str(cache)],
        cwd=ROOT,
        env=dict(os.environ, PYTHONPATH=str(ROOT)),
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert f"error: {seg.name}: offset {off}" in proc.stdout
    assert "1 error(s)" in proc.stdout and "errors found" in proc.stdout


def test_a_torn_tail_is_a_warning_and_a_missing_directory_a_usage_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    src, _, _ = written(tmp_path)
    seg = tmp_path / "cache" / fmt.segment_name(src, 1)
    seg.write_bytes(seg.read_bytes()[:-3])  # the last record cut short
    report = check_cache(str(tmp_path / "cache"))
    assert not report.errors
    assert len(report.warnings) == 1 and "torn tail" in report.warnings[0]
    assert sorted(report.repos[src].sqns) == list(range(29))
    assert main([str(tmp_path / "nowhere")]) == 2
    assert "is not a directory" in capsys.readouterr().err
