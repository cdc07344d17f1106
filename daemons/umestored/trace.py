"""Stage timestamps of a Store's data path: where a stability ACK's latency goes.

Theory of operation
-------------------
Off unless the environment variable :data:`TRACE_ENV` names a file (a diagnostic for
benchmarks, not one of UM's settings; ``bench/store`` sets it).  Then every Store of the daemon
records, with :func:`time.perf_counter` (``CLOCK_MONOTONIC`` on Linux, so comparable with another
process's ``perf_counter``):

- ``R`` each read's frames handed to the core: topic index, first and last sequence number;
- ``J`` each batch of jobs handed to the writer thread: ``[owner, tag]`` per job;
- ``W`` each batch the writer thread performed (on that thread): its start and end, the jobs;
- ``D`` each completion delivered to the core on the loop: owner, tag;
- ``S`` each UIM sent (stability ACKs among them): its bytes in hex.

At most :data:`MAX_RECORDS` records (the rest only counted); written as one JSON object
(``{"dropped": N, "records": [...]}``) when the daemon stops.  The writer thread appends its
records to the same list (``list.append`` is atomic under the GIL).
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Sequence

from umcore.store.io import IoDone, IoJob

__all__ = ["MAX_RECORDS", "TRACE_ENV", "StageTrace"]

TRACE_ENV = "PYUM_UMESTORED_TRACE"
# Records kept at most: a benchmark's run (reads, batches, ACKs) is well below; beyond, a trace
# left on would grow without bound.
MAX_RECORDS = 2_000_000

_clock = time.perf_counter


class StageTrace:
    """The records of one daemon (see the module docstring)."""

    def __init__(self, path: str, *, limit: int = MAX_RECORDS) -> None:
        self.path = path
        self.limit = limit
        self.records: list[list[object]] = []
        self.dropped = 0

    @classmethod
    def from_environment(cls) -> StageTrace | None:
        path = os.environ.get(TRACE_ENV)
        return cls(path) if path else None

    def _add(self, record: list[object]) -> None:
        if len(self.records) < self.limit:
            self.records.append(record)
        else:
            self.dropped += 1

    def read(self, topic_index: int, frames: Sequence[bytes]) -> None:
        first, last = frames[0], frames[-1]
        if len(first) >= 12 and len(last) >= 12:
            sqn0 = int.from_bytes(first[8:12], "big")
            self._add(["R", _clock(), topic_index, sqn0, int.from_bytes(last[8:12], "big")])

    def submitted(self, jobs: Sequence[IoJob]) -> None:
        self._add(["J", _clock(), [[j.owner, j.tag] for j in jobs]])

    def performed(self, start: float, end: float, jobs: Sequence[IoJob]) -> None:
        """(On the writer thread.)"""
        self._add(["W", start, end, [[j.owner, j.tag] for j in jobs]])

    def completed(self, done: IoDone) -> None:
        self._add(["D", _clock(), done.job.owner, done.job.tag])

    def sent(self, data: bytes) -> None:
        self._add(["S", _clock(), bytes(data).hex()])

    def dump(self) -> None:
        with open(self.path, "w", encoding="ascii") as f:
            json.dump({"dropped": self.dropped, "records": self.records}, f)
