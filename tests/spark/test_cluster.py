"""One job on a Spark standalone cluster -- a master and a worker started here on loopback from
the pyspark installation, stopped after -- gives the same table as ``local[*]``.  The job runs
as an operator runs it, ``python -m umcore.spark JOB --master spark://...`` (a driver of its own,
the package shipped to the executor as a zip, the worker Python being this interpreter)."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.spark.dataset import write_dataset
from umcore.spark.jobs import JOBS

pytestmark = pytest.mark.slow

WAIT = 180.0  # three cold JVMs on a busy 2-core machine


class Daemon:
    """A Spark daemon (``spark-class`` main class) whose output is watched for a line."""

    def __init__(self, cls: str, *args: str, env: dict[str, str]) -> None:
        from pyspark.find_spark_home import _find_spark_home

        spark_class = os.path.join(_find_spark_home(), "bin", "spark-class")
        self.proc = subprocess.Popen(
            [spark_class, cls, *args], stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
            env=env, text=True, start_new_session=True,
        )  # fmt: skip
        self.lines: list[str] = []
        self.changed = threading.Condition()
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            with self.changed:
                self.lines.append(line)
                self.changed.notify_all()
        with self.changed:
            self.changed.notify_all()

    def wait_for(self, pattern: str) -> re.Match[str]:
        rx = re.compile(pattern)
        with self.changed:
            found: list[re.Match[str]] = []

            def seen() -> bool:
                found[:] = [m for m in map(rx.search, self.lines) if m]
                return bool(found) or self.proc.poll() is not None

            assert self.changed.wait_for(seen, WAIT), (
                f"no {pattern!r}:\n{''.join(self.lines[-30:])}"
            )
        assert found, f"exited without {pattern!r}:\n{''.join(self.lines[-30:])}"
        return found[0]

    def stop(self) -> None:
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGTERM)  # the daemon's own process group
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait(30)


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[tuple[str, dict[str, str], Daemon, Daemon]]:
    env = dict(os.environ, SPARK_LOCAL_IP="127.0.0.1", SPARK_WORKER_DIR=str(tmp_path / "work"),
               SPARK_LOG_DIR=str(tmp_path / "logs"), SPARK_NO_DAEMONIZE="1")  # fmt: skip
    master = Daemon("org.apache.spark.deploy.master.Master", "--host", "127.0.0.1", "--port", "0",
                    "--webui-port", "0", env=env)  # fmt: skip
    worker = None
    try:
        url = master.wait_for(r"Starting Spark master at (spark://127\.0\.0\.1:\d+)").group(1)
        worker = Daemon("org.apache.spark.deploy.worker.Worker", "--host", "127.0.0.1", "--port", "0",
                        "--webui-port", "0", "--cores", "1", "--memory", "1g", url, env=env)  # fmt: skip
        worker.wait_for(r"Successfully registered with master")
        yield url, env, master, worker
    finally:
        for d in (worker, master):
            if d is not None:
                d.stop()


def test_source_rates_on_a_standalone_cluster_equals_local(
    spark: Any, cluster: Any, tmp_path: Path
) -> None:
    url, env, master, worker = cluster
    db, _ = write_dataset(tmp_path)
    out = tmp_path / "report"
    job_tmp = tmp_path / "tmp"  # the job's temporary folders (the package zip it ships)
    job_tmp.mkdir()
    proc = subprocess.run(
        [sys.executable, "-m", "umcore.spark", "source-rates", "--input", str(db), "--output", str(out),
         "--master", url, "--interval", "60"],
        capture_output=True, text=True, timeout=WAIT, env={**env, "TMPDIR": str(job_tmp)},
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    leftovers = [p.name for p in job_tmp.iterdir() if p.name.startswith("pyum-spark-")]
    assert not leftovers, f"the job left its temporary folders behind: {leftovers}"
    assert proc.stdout.strip() == str(out / "source-rates" / "index.html")
    remote = spark.read.parquet(str(out / "source-rates" / "table.parquet")).collect()
    local = JOBS["source-rates"].run(spark, str(db), 60).collect()
    assert remote and sorted(map(tuple, remote)) == sorted(map(tuple, local))
    # the work ran on the cluster: the master registered the application, the worker ran it
    master.wait_for(r"Registering app pyum-spark")
    worker.wait_for(r"Asked to launch executor .*pyum-spark|Launching executor")
