"""The Store's stage trace (daemons.umestored.trace) and StoreIO's ``on_batch`` hook behind it."""

from __future__ import annotations

import asyncio
import json
import threading
from pathlib import Path

from daemons.umestored.trace import StageTrace
from umcore.aio.storeio import StoreIO
from umcore.store.io import IoDone, IoJob, IoKind
from umcore.wire import lbmc

WAIT_S = 30.0


def test_records_each_stage_and_dumps_them(tmp_path: Path) -> None:
    path = tmp_path / "trace.json"
    trace = StageTrace(str(path))
    frames = [lbmc.encode_data(7, sqn, b"x") for sqn in (41, 42, 43)]
    job = IoJob(IoKind.WRITE, "seg", owner=5, tag=9)
    trace.read(7, frames)
    trace.submitted([job])
    trace.performed(1.0, 2.0, [job])
    trace.completed(IoDone(job))
    trace.sent(b"\x01\x02")
    trace.dump()
    got = json.loads(path.read_text())
    assert got["dropped"] == 0
    recs = got["records"]
    assert [r[0] for r in recs] == ["R", "J", "W", "D", "S"]
    assert recs[0][2:] == [7, 41, 43]
    assert recs[1][2] == [[5, 9]] and recs[2] == ["W", 1.0, 2.0, [[5, 9]]]
    assert recs[3][2:] == [5, 9] and recs[4][2] == "0102"
    times = [recs[0][1], recs[1][1], recs[3][1], recs[4][1]]
    assert times == sorted(times)


def test_is_bounded_and_counts_what_it_left_out(tmp_path: Path) -> None:
    trace = StageTrace(str(tmp_path / "t.json"), limit=3)
    for _ in range(5):
        trace.sent(b"a")
    assert len(trace.records) == 3 and trace.dropped == 2


async def test_storeio_reports_each_batch_from_the_writer_thread(tmp_path: Path) -> None:
    loop = asyncio.get_running_loop()
    got: list[IoDone] = []
    batches: list[tuple[float, float, list[IoJob], str]] = []

    def on_batch(start: float, end: float, jobs: list[IoJob]) -> None:
        batches.append((start, end, list(jobs), threading.current_thread().name))

    io = StoreIO(loop, got.append, on_batch=on_batch)
    jobs = [IoJob(IoKind.WRITE, str(tmp_path / "f"), 4 * k, b"abcd", tag=k) for k in range(3)]
    io.submit(jobs)
    await asyncio.wait_for(io.drain(), WAIT_S)
    await io.close()
    assert [d.job.tag for d in got] == [0, 1, 2] and all(d.ok for d in got)
    assert [j for b in batches for j in b[2]] == jobs
    assert all(start <= end for start, end, _, _ in batches)
    assert {name for *_, name in batches} == {"umestored-io"}
    assert (tmp_path / "f").read_bytes() == b"abcd" * 3
