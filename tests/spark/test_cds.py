"""The local driver's class-data sharing archive (:mod:`umcore.spark.session`): the first session
writes it at its JVM's exit and the next one maps it; a damaged archive, or one whose size is not
the one its name records, never breaks a session.  Each step is a process of its own (a JVM's
start is what the archive is for) with its own cache directory."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

pytestmark = pytest.mark.slow

WAIT = 240.0  # a cold JVM, a first query and, once, a 150 MB dump on a busy 2-core machine
ROOT = Path(__file__).resolve().parents[2]

# A session, a query with a known answer, and what the session did with the archive.
SCRIPT = """
import json
from umcore.spark.session import cds_status, start_session
spark = start_session("local[1]", app="pyum-cds-test", umestore=False)
rows = spark.range(1000).selectExpr("id % 3 AS k").groupBy("k").count().collect()
state, detail = cds_status()
print(json.dumps({"state": state, "detail": detail, "counts": sorted(r[1] for r in rows)}))
"""


def run(cache: Path) -> dict[str, Any]:
    env = {**os.environ, "XDG_CACHE_HOME": str(cache)}
    env.pop("PYUM_SPARK_CDS", None)
    done = subprocess.run(
        [sys.executable, "-c", SCRIPT],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=WAIT,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    result: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    assert result["counts"] == [333, 333, 334]
    return result


def test_archive_made_once_used_next_and_damage_tolerated(spark: Any, tmp_path: Path) -> None:
    # ``spark``: the suite's skip/fail rules for Java and pyspark (the session itself is unused)
    archives = tmp_path / "pyum" / "spark-cds"
    # three archives of other installations: writing a new one keeps the two newest of them
    archives.mkdir(parents=True)
    others = [archives / f"spark-{k:016x}-4.jsa" for k in range(3)]
    for age, other in enumerate(others):
        other.write_bytes(b"jsa!")
        os.utime(other, (1_000_000 + age, 1_000_000 + age))
    first = run(tmp_path)
    assert first["state"] == "made", first
    assert [f.exists() for f in others] == [False, True, True]
    for other in others[1:]:
        other.unlink()
    made = sorted(archives.glob("*.jsa"))
    assert len(made) == 1, made
    archive = made[0]
    assert archive.name == Path(first["detail"]).name.replace("SIZE", str(archive.stat().st_size))
    assert not list(archives.glob("*.tmp"))

    second = run(tmp_path)
    assert second == {**second, "state": "used", "detail": str(archive)}

    # damage: the header overwritten (same size: the JVM rejects it and runs without);
    # a truncated copy whose name records a larger size sorts first and must be removed unused
    with open(archive, "r+b") as f:
        f.write(b"\xa5" * 4096)
    key, size = archive.stem.rsplit("-", 1)
    truncated = archives / f"{key}-1{size}.jsa"
    truncated.write_bytes(archive.read_bytes()[: 1 << 20])
    third = run(tmp_path)
    assert third["state"] == "used" and third["detail"] == str(archive), third
    assert not truncated.exists()
