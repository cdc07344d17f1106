"""MCS's conversion workers: a stop converts and stores everything submitted, in order, and ends
the workers; a worker that dies is logged, counted and replaced, the batch it was converting
counted as failed and the next ones written; too many deaths give up (``on_fatal``); a worker
that cannot start is refused before anything runs."""

from __future__ import annotations

import logging
import os
import signal
import sqlite3
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import pytest

from daemons.mcs.connectors import SqliteConnector, init_db
from daemons.mcs.convert import json_rows
from daemons.mcs.workers import Intake, WorkerPool, WorkerStartError
from umcore.monitor.attributes import MonAttributes, encode_stats
from umcore.monitor.framing import PacketType
from umcore.monitor.pb import ums_mon_pb2

CRASH = "crash-me"  # the source of a message that makes the test's converter die
RAISE = "raise-me"  # ... raise
WAIT = 60.0  # a spawned interpreter on a busy 2-core machine


def crashing() -> Callable[[Sequence[tuple[bytes, str, float]]], Any]:
    """A converter factory (named to the workers by module:name): the SQLite converter, except
    that a message from CRASH ends the worker's process at once, as a crash would."""

    def convert(batch: Sequence[tuple[bytes, str, float]]) -> Any:
        if any(source == CRASH for _, source, _ in batch):
            os._exit(3)
        if any(source == RAISE for _, source, _ in batch):
            raise ValueError("no JSON for this one")
        return json_rows(batch)

    return convert


def batch(first: int, n: int, source: str = "TCP:10.0.0.1:1") -> list[tuple[bytes, str, float]]:
    out = []
    for i in range(first, first + n):
        msg = ums_mon_pb2.UMSMonMsg()
        msg.stats.context.fragments_lost = i
        data = encode_stats(PacketType.CONTEXT, msg, MonAttributes(application_id=f"app{i}"))
        out.append((data, source, 1.0))
    return out


def lost_values(db: str) -> list[int]:
    conn = sqlite3.connect(db)
    try:
        return [
            int(r[0])
            for r in conn.execute(
                "SELECT json_extract(message, '$.stats.context.fragmentsLost') FROM umsmonmsg"
            )
        ]
    finally:
        conn.close()


def until(cond: Callable[[], bool], what: str) -> None:
    deadline = time.monotonic() + WAIT
    while not cond():
        assert time.monotonic() < deadline, f"not within {WAIT} s: {what}"
        time.sleep(0.02)


@pytest.fixture
def db(tmp_path: Path) -> str:
    path = str(tmp_path / "ummon.db")
    init_db(path)
    return path


def test_intake_reads_headers_only() -> None:
    intake = Intake(max_pending=2)
    good = batch(0, 3)
    assert intake.receive(good[0][0], "s", 1.0) == "ums"
    assert intake.receive(b"\x00\x07 not a statistics message", "s", 1.0) is None
    assert intake.receive(good[1][0], "s", 1.0) == "ums"
    assert intake.receive(good[2][0], "s", 1.0) is None  # the list is full
    assert intake.counts == {"received": 4, "control": 0, "raw": 0, "bad": 1, "dropped": 1}
    assert "bad signature" in intake.last_error
    assert intake.take_batch(5) == [(good[0][0], "s", 1.0), (good[1][0], "s", 1.0)]
    assert intake.pending == 0


def test_stop_stores_everything_submitted_in_order(db: str) -> None:
    pool = WorkerPool(SqliteConnector(db), workers=2)
    pool.start()
    pids = pool.pids
    assert len(pids) == 2
    for k in range(8):
        assert pool.submit(batch(k * 50, 50))
    pool.close()  # no waiting before: the stop itself drains
    assert pool.written["ums"] == 400 and pool.failed == 0 and pool.batches == 8
    assert pool.decoded["ums"] == 400 and pool.worker_crashes == 0
    assert lost_values(db) == list(range(400))  # arrival order, whichever worker converted
    for pid in pids:  # the workers ended (reaped: no such process any more)
        with pytest.raises(ProcessLookupError):
            os.kill(pid, 0)
    with pytest.raises(sqlite3.ProgrammingError):  # the connector is closed
        pool.connector.store({})


def test_a_worker_that_dies_is_logged_counted_and_replaced(
    db: str, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, logger="MCS")
    pool = WorkerPool(SqliteConnector(db), workers=1, converter="tests.mcs.test_workers:crashing")
    pool.start()
    (first,) = pool.pids
    pool.submit(batch(0, 10))
    pool.submit(batch(10, 5, source=CRASH))
    pool.submit(batch(15, 10))
    pool.close()
    assert pool.worker_crashes == 1 and pool.failed == 5 and pool.written["ums"] == 20
    assert lost_values(db) == [*range(10), *range(15, 25)]
    assert not pool.fatal
    text = caplog.text
    assert (
        f"conversion worker 0 died (pid {first}, exit status 3) converting a batch of 5 messages"
        in text
    )
    assert "conversion worker 0 restarted" in text


def test_a_batch_whose_conversion_fails_is_counted_and_the_next_one_written(
    db: str, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.ERROR, logger="MCS")
    pool = WorkerPool(SqliteConnector(db), workers=1, converter="tests.mcs.test_workers:crashing")
    pool.start()
    (pid,) = pool.pids
    pool.submit(batch(0, 5, source=RAISE))
    pool.submit(batch(5, 5))
    pool.close()
    assert pool.failed == 5 and pool.written["ums"] == 5 and pool.worker_crashes == 0
    assert pool.pids == [pid]  # the same worker converted the next batch
    assert pool.last_error == "ValueError: no JSON for this one"
    assert "sqlite connector: a batch of 5 not written: ValueError: no JSON" in caplog.text
    assert lost_values(db) == list(range(5, 10))


def test_too_many_deaths_give_up(db: str, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.ERROR, logger="MCS")
    reasons: list[str] = []
    pool = WorkerPool(
        SqliteConnector(db), workers=1, converter="tests.mcs.test_workers:crashing",
        max_restarts=0, on_fatal=reasons.append,
    )  # fmt: skip
    pool.start()
    pool.submit(batch(0, 10))
    pool.submit(batch(10, 5, source=CRASH))
    pool.submit(batch(15, 10))
    pool.close()
    assert len(reasons) == 1 and "not restarting" in reasons[0] and pool.fatal == reasons[0]
    assert pool.written["ums"] == 10 and pool.failed == 15 and pool.pids == []
    assert "MCS stops: 1 conversion worker deaths within 60 s (at most 0)" in caplog.text
    assert lost_values(db) == list(range(10))


def test_an_idle_worker_killed_is_replaced(db: str) -> None:
    pool = WorkerPool(SqliteConnector(db), workers=1)
    pool.start()
    (first,) = pool.pids
    os.kill(first, signal.SIGKILL)
    until(lambda: pool.worker_crashes == 1 and pool.pids not in ([], [first]), "a new worker")
    pool.submit(batch(0, 10))
    pool.close()
    assert pool.written["ums"] == 10 and pool.failed == 0


def test_a_worker_that_cannot_start_is_refused(db: str) -> None:
    conn = SqliteConnector(db)
    pool = WorkerPool(conn, workers=1, converter="daemons.mcs.convert:no_such_converter")
    with pytest.raises(WorkerStartError, match="no_such_converter"):
        pool.start()
    assert pool.pids == []
    conn.close()
