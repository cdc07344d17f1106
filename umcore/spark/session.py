"""The Spark session of a pyum job: any master URL, this package on the executors.

Theory of operation
-------------------
:func:`start_session` builds (or joins) the process's ``SparkSession`` for ``master`` --
``local[*]`` by default, or any URL Spark takes (``spark://``, ``yarn``, ``k8s://``).  The worker
Python is the interpreter running the job (``PYSPARK_PYTHON`` = ``sys.executable``), so a
cluster's executors must have the same path (a shared install or image).  ``umcore`` is zipped
once per session and shipped with ``addPyFile``, so executors need no pyum install of their own
(they need protobuf only for the jobs' driver side; the data source needs the standard library
and pyarrow).  Times are UTC (``spark.sql.session.timeZone``); the Python Data Source filter
pushdown is switched on (``umestore`` uses it); the ``umestore`` sources are registered
(:func:`register_umestore`: the first Python data source registered costs a session about 2 s
-- a Python worker's start -- so ``pyum-spark``'s monitoring jobs, which never read a Store,
start without them: ``umestore=False``).  A
``local`` master starts without the web UI (nobody opens it for a job that ends with its report)
and with the JVM's first JIT compiler only (:data:`LOCAL_JAVA_OPTIONS`, as
``spark.driver.defaultJavaOptions``: options the user gives in ``spark.driver.extraJavaOptions``,
from ``conf`` or Spark's defaults file, come after it and win; a ``conf`` that sets
``spark.driver.defaultJavaOptions`` replaces it); a cluster's driver and executors keep the JVM's
defaults.  A local session's shuffles keep their partitions (:data:`LOCAL_NO_COALESCE`), a
whole number of waves over its cores, unless ``conf`` says otherwise.

A local driver JVM also maps the classes it loads from a class-data sharing archive (Java's
AppCDS, a dynamic archive: ``-XX:SharedArchiveFile``) kept in the user's cache,
``$XDG_CACHE_HOME/pyum/spark-cds/`` (``~/.cache/pyum/spark-cds/``): loading and verifying
Spark's classes is most of a session's start (start plus a first query: median 6.5 s instead of
11.8 s, paired runs on a loaded 2-core machine).  The first local session without one writes
it when its JVM exits (``-XX:ArchiveClassesAtExit``, about 150 MB; this process waits for the
JVM at exit, a few seconds, once): to a temporary name, renamed into place only when the JVM
exited cleanly, so no other process reads a half-written archive (a truncated one crashes the
JVM that maps it).  The name holds a key -- the Java installation (its path, ``release`` file and
``libjvm.so`` size and time), the pyspark version and installation, the driver's extra class
path -- and the file's size, checked before use.  The JVM itself checks the rest (its own
version, the base archive, every class-path jar's size and time) and, when they differ or the
header is damaged, says so in one warning and runs without the archive.  :func:`cds_status`
tells what a session did.  Off with ``PYUM_SPARK_CDS=0`` in the environment, and whenever
``conf`` sets ``spark.driver.defaultJavaOptions``.
"""

from __future__ import annotations

import atexit
import contextlib
import hashlib
import os
import shutil
import sys
import tempfile
import time
import zipfile
from collections.abc import Mapping
from pathlib import Path

import pyspark
from pyspark.sql import SparkSession

__all__ = [
    "CDS_ENV",
    "DEFAULT_MASTER",
    "LOCAL_JAVA_OPTIONS",
    "cds_status",
    "package_zip",
    "register_umestore",
    "start_session",
]

DEFAULT_MASTER = "local[*]"
# Shuffle partitions: Spark's 200 is for clusters; a job's aggregates are small.
SHUFFLE_PARTITIONS = 8
# A local session does not let adaptive execution merge a shuffle's partitions: on a few cores
# the merge leaves a count that does not divide among them (8 of source-rates' window became
# 3 tasks on 2 cores: two waves, the second with one core idle); its partitions are instead
# a whole number of waves (SHUFFLE_PARTITIONS rounded up to a multiple of the cores).
LOCAL_NO_COALESCE = "spark.sql.adaptive.coalescePartitions.enabled"
# A local job run by name lives for seconds to a few minutes in a new JVM, and much of its CPU
# goes to warming that JVM up: C1 alone compiles far less than C1 + C2 (source-rates over
# 1,000,000 rows, session start to report written: JVM CPU 47 s instead of 60 s, wall 0.85-0.97
# of the time, paired runs on 2 cores).  A long local job may want C2 back: pass
# spark.driver.extraJavaOptions=-XX:TieredStopAtLevel=4 (appended after these).
LOCAL_JAVA_OPTIONS = "-XX:TieredStopAtLevel=1"
# The environment variable that switches the class-data sharing archive off ("0", "off", "no").
CDS_ENV = "PYUM_SPARK_CDS"
# The writing JVM's exit is waited for this long at most (the dump takes seconds; a loaded
# machine, tens): past it the temporary file is left to the JVM and never used.
CDS_DUMP_WAIT_S = 120.0
# A temporary archive older than this was left by a process that died: removed.
CDS_STALE_TMP_S = 3600.0
# Archives of other keys kept when a new one is to be written (each is ~150-190 MB; a key
# changes with every Java or pyspark installation, so without a bound the cache only grows):
# the most recently written ones stay, for installations used side by side.
CDS_KEEP_OTHERS = 2
# The dump prints a warning for each class it cannot archive (thousands, from signed jars and
# generated classes): only errors are shown.
CDS_DUMP_LOG = "-Xlog:cds*=error"

_cds: dict[str, str] = {}


def cds_status() -> tuple[str, str]:
    """What this process's local session did with the class-data sharing archive (module
    docstring): ``("used", path)``, ``("made", path)`` (written at the JVM's exit), or
    ``("off", why)``."""
    return _cds.get("state", "off"), _cds.get("detail", "no local session started")


def _cds_dir() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "pyum" / "spark-cds"


def _cds_key(conf: Mapping[str, str]) -> str | None:
    """The archive's key, or None without a Java to key on (Spark's launcher finds the JVM
    the same way: ``$JAVA_HOME/bin/java``, else ``java`` on the PATH)."""
    home = os.environ.get("JAVA_HOME")
    java = os.path.join(home, "bin", "java") if home else shutil.which("java")
    if not java or not os.path.exists(java):
        return None
    java = os.path.realpath(java)
    jhome = Path(java).parents[1]
    h = hashlib.sha256()
    h.update(java.encode())
    release = jhome / "release"
    if release.is_file():
        h.update(release.read_bytes())
    for jvm in (jhome / "lib" / "server" / "libjvm.so", Path(java)):
        if jvm.exists():
            st = jvm.stat()
            h.update(f"{jvm}:{st.st_size}:{st.st_mtime_ns}".encode())
    h.update(f"{pyspark.__version__}:{os.path.dirname(pyspark.__file__)}".encode())
    spark_home = os.environ.get("SPARK_HOME", "")
    h.update(spark_home.encode())
    # The JVM maps an archive only while every classpath jar has the size and modification
    # time it had when the archive was written: a pyspark installed again at the same path
    # (a rebuilt virtualenv) must get a new archive, not one the JVM refuses on every start.
    jars = Path(spark_home or os.path.dirname(pyspark.__file__)) / "jars"
    with contextlib.suppress(OSError):
        for jar in sorted(os.scandir(jars), key=lambda e: e.name):
            st = jar.stat()
            h.update(f"{jar.name}:{st.st_size}:{st.st_mtime_ns}".encode())
    h.update(conf.get("spark.driver.extraClassPath", "").encode())
    return h.hexdigest()[:16]


def _cds_options(conf: Mapping[str, str]) -> tuple[str, Path | None]:
    """Java options for a local driver, and the temporary file the JVM is to write (None when
    an archive is used or sharing is off); sets :func:`cds_status`."""
    if os.environ.get(CDS_ENV, "1").lower() in ("0", "off", "no", "false"):
        _cds.update(state="off", detail=f"{CDS_ENV}={os.environ[CDS_ENV]}")
        return "", None
    key = _cds_key(conf)
    if key is None:
        _cds.update(state="off", detail="no java found to key the archive on")
        return "", None
    d = _cds_dir()
    try:
        d.mkdir(parents=True, exist_ok=True)
        now = time.time()
        for old in d.glob("*.tmp"):
            if now - old.stat().st_mtime > CDS_STALE_TMP_S:
                old.unlink(missing_ok=True)
        for f in sorted(d.glob(f"spark-{key}-*.jsa")):
            size = f.name[len(f"spark-{key}-") : -len(".jsa")]
            if size.isdigit() and f.stat().st_size == int(size):
                _cds.update(state="used", detail=str(f))
                return f"-XX:SharedArchiveFile={f}", None
            f.unlink(missing_ok=True)  # not what was renamed into place: never mapped
        others = sorted(
            (f for f in d.glob("spark-*.jsa") if not f.name.startswith(f"spark-{key}-")),
            key=lambda f: f.stat().st_mtime,
        )
        for old in others[: max(0, len(others) - CDS_KEEP_OTHERS)]:
            old.unlink(missing_ok=True)  # the oldest other installations' archives
        fd, tmp = tempfile.mkstemp(prefix=f"spark-{key}.", suffix=".tmp", dir=d)
        os.close(fd)  # the name taken; the JVM writes the file anew at its exit
    except OSError as e:
        _cds.update(state="off", detail=f"cache {d}: {e}")
        return "", None
    _cds.update(state="made", detail=str(d / f"spark-{key}-SIZE.jsa"))
    return f"-XX:ArchiveClassesAtExit={tmp} {CDS_DUMP_LOG}", Path(tmp)


def _cds_finish(spark: SparkSession, tmp: Path) -> None:
    """At this process's exit: end the JVM (its standard input closed, as pyspark's own exit
    does), wait for its archive, and rename a complete one into place."""
    proc = getattr(getattr(spark.sparkContext, "_gateway", None), "proc", None)
    try:
        if proc is not None and proc.stdin is not None:
            proc.stdin.close()
            if proc.wait(timeout=CDS_DUMP_WAIT_S) == 0 and tmp.exists():
                size = tmp.stat().st_size
                with open(tmp, "rb") as f:
                    magic = f.read(4)
                if size > 0 and magic != b"\0\0\0\0":  # the header is written last
                    key = tmp.name.split(".")[0]
                    os.replace(tmp, tmp.with_name(f"{key}-{size}.jsa"))
                    return
    except Exception:  # an exiting process: the archive is an optimisation, never an error
        pass
    with contextlib.suppress(OSError):
        tmp.unlink(missing_ok=True)


def package_zip(directory: str) -> str:
    """A zip of the ``umcore`` package (sources only) in ``directory``; its path."""
    root = Path(__file__).resolve().parents[1]  # .../umcore
    path = os.path.join(directory, "umcore.zip")
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as z:
        for f in sorted(root.rglob("*")):
            if "__pycache__" in f.parts or not f.is_file():
                continue
            if f.suffix in (".py", ".typed") or f.parent.name == "schemas":
                z.write(f, f.relative_to(root.parent).as_posix())
    return path


def start_session(
    master: str = DEFAULT_MASTER,
    *,
    app: str = "pyum-spark",
    conf: Mapping[str, str] | None = None,
    umestore: bool = True,
) -> SparkSession:
    """The session for ``master`` (module docstring); ``conf`` adds Spark settings;
    ``umestore``: the Store's data sources registered (:func:`register_umestore`)."""
    os.environ["PYSPARK_PYTHON"] = sys.executable
    os.environ["PYSPARK_DRIVER_PYTHON"] = sys.executable
    builder = (
        SparkSession.builder.master(master)
        .appName(app)
        .config("spark.pyspark.python", sys.executable)
        .config("spark.sql.session.timeZone", "UTC")
        .config("spark.sql.python.filterPushdown.enabled", "true")
        .config("spark.sql.shuffle.partitions", str(SHUFFLE_PARTITIONS))
        .config("spark.sql.execution.arrow.pyspark.enabled", "true")
        .config("spark.ui.showConsoleProgress", "false")
    )
    dump: Path | None = None
    if master.startswith("local"):
        # A job run by name ends when its report is written: nobody opens a local web UI, and
        # starting one is part of every job's start-up.  A cluster keeps its UI.
        builder = builder.config("spark.ui.enabled", "false")
        if "spark.driver.defaultJavaOptions" not in (conf or {}):
            cds, dump = _cds_options(conf or {})
            options = f"{LOCAL_JAVA_OPTIONS} {cds}".strip()
            builder = builder.config("spark.driver.defaultJavaOptions", options)
        else:
            _cds.update(state="off", detail="conf sets spark.driver.defaultJavaOptions")
    for k, v in (conf or {}).items():
        builder = builder.config(k, v)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    if master.startswith("local"):
        given = conf or {}
        if LOCAL_NO_COALESCE not in given:
            spark.conf.set(LOCAL_NO_COALESCE, "false")
        if "spark.sql.shuffle.partitions" not in given:
            cores = max(1, spark.sparkContext.defaultParallelism)
            waves = -(-SHUFFLE_PARTITIONS // cores)
            spark.conf.set("spark.sql.shuffle.partitions", str(waves * cores))
    if dump is not None:
        atexit.register(_cds_finish, spark, dump)
    tmp = tempfile.mkdtemp(prefix="pyum-spark-")
    # Spark serves the zip from this folder to executors as their tasks start, for as long as
    # the session lives: removed when this (driver) process exits, not before.
    atexit.register(shutil.rmtree, tmp, ignore_errors=True)
    spark.sparkContext.addPyFile(package_zip(tmp))
    if umestore:
        register_umestore(spark)
    return spark


def register_umestore(spark: SparkSession) -> None:
    """``spark.read.format("umestore")`` and ``format("umestore_acks")`` on ``spark``
    (:mod:`umcore.spark.umestore`); registering them again is harmless."""
    from umcore.spark.umestore import UMEStoreAcksDataSource, UMEStoreDataSource

    spark.dataSource.register(UMEStoreDataSource)
    spark.dataSource.register(UMEStoreAcksDataSource)
