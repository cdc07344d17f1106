"""MCS end to end, fed by real publishers: an application with automatic monitoring (UMS), an
SRS and a Store with their daemon monitors (SRS, UMP), and a source of this test sending a DRO
message and garbage on the statistics topic.  One MCS writes UM's SQLite database, another
Parquet files: every kind arrives in its table as UM's JSON, the Parquet files hold the same
messages, the garbage is counted, SIGINT finishes the writes and exits 0; bad configurations
exit 1 with one line before anything starts."""

from __future__ import annotations

import re
import signal
import sqlite3
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.integration.daemon_proc import ROOT, DaemonProcess
from tests.integration.helpers import until
from umcore.api import Context
from umcore.config.attributes import Configuration, reset_global_configuration
from umcore.monitor.attributes import MonAttributes, decode_stats, encode_stats
from umcore.monitor.collector import canonical_json
from umcore.monitor.framing import PacketType
from umcore.monitor.pb import dro_mon_pb2

pytestmark = pytest.mark.slow

WAIT = 45.0  # four cold interpreters (two MCS, the SRS, the Store) on a busy 2-core machine
STATS = "/29west/statistics"


@pytest.fixture
def mon_cfg(unused_udp_port: int, tmp_path: Path) -> Iterator[Path]:
    """Multicast TR on loopback on a free port: every publisher's and MCS's UM configuration,
    and this process's."""
    path = tmp_path / "mon.cfg"
    path.write_text(
        "context resolver_multicast_interface 127.0.0.1\n"
        "context resolver_multicast_address 224.9.10.97\n"
        f"context resolver_multicast_port {unused_udp_port}\n"
        "context transport_tcp_port_low 0\n"
        "context transport_tcp_port_high 0\n"
        "context request_tcp_port_low 0\n"
        "context request_tcp_port_high 0\n"
        "context request_tcp_interface 127.0.0.1\n"
        "source transport_tcp_interface 127.0.0.1\n"
    )
    cfg = Configuration()
    cfg.config_file(path)
    reset_global_configuration(cfg)
    yield path
    reset_global_configuration(None)


def mcs_xml(tmp: Path, name: str, kind: str, prop: str) -> Path:
    """``NAME.xml`` and ``NAME.properties`` for MCS in ``tmp`` (its receiver resolving as
    ``tmp/mon.cfg`` says; also used by tests/spark)."""
    (tmp / f"{name}.properties").write_text(prop + "\n")
    path = tmp / f"{name}.xml"
    path.write_text(
        f"""<?xml version="1.0" encoding="UTF-8" ?>
<um-mcs version="1.0">
  <daemon><pid-file>{name}.pid</pid-file></daemon>
  <connector><type>{kind}</type><properties-file>{name}.properties</properties-file></connector>
  <receiver-transport-opts><config-file>mon.cfg</config-file></receiver-transport-opts>
</um-mcs>
"""
    )
    return path


def srs_xml(tmp: Path, mon: Path) -> Path:
    options = "".join(
        f'<option scope="{s}" name="{n}" value="{v}"/>'
        for s, n, v in (line.split() for line in mon.read_text().splitlines())
    )
    path = tmp / "srs.xml"
    path.write_text(
        f"""<?xml version="1.0" encoding="UTF-8" ?>
<um-srs version="1.0">
  <srs><interface>127.0.0.1</interface><port>0</port><application-id>srs-mcs</application-id></srs>
  <daemon-monitor topic="{STATS}">
    <lbm-attributes>{options}</lbm-attributes>
    <publishing-interval><default>500</default></publishing-interval>
    <monitor-format>pb</monitor-format>
  </daemon-monitor>
</um-srs>
"""
    )
    return path


def store_xml(
    tmp: Path, mon: Path, *, name: str = "store-mcs", topic: str = "x", port: int = 0
) -> Path:
    """A Store publishing its statistics every second on the statistics topic, resolving as
    ``mon`` says (also used by tests/spark)."""
    for d in ("cache", "state"):
        (tmp / d).mkdir()
    path = tmp / "store.xml"
    path.write_text(
        f"""<?xml version="1.0"?>
<ume-store version="1.3">
  <daemon>
    <log type="console"/>
    <lbm-config>{mon}</lbm-config>
    <daemon-monitor topic="{STATS}">
      <lbm-config>{mon}</lbm-config>
      <publishing-interval><group name="default" ivl="1"/></publishing-interval>
    </daemon-monitor>
  </daemon>
  <stores>
    <store name="{name}" interface="127.0.0.1" port="{port}">
      <ume-attributes>
        <option type="store" name="disk-cache-directory" value="{tmp}/cache"/>
        <option type="store" name="disk-state-directory" value="{tmp}/state"/>
      </ume-attributes>
      <topics><topic pattern="{topic}" type="direct"/></topics>
    </store>
  </stores>
</ume-store>
"""
    )
    return path


def rows(db: Path, table: str) -> list[str]:
    conn = sqlite3.connect(db)
    try:
        return [r[0] for r in conn.execute(f"SELECT message FROM {table}")]
    finally:
        conn.close()


async def test_real_publishers_reach_sqlite_and_parquet(mon_cfg: Path, tmp_path: Path) -> None:
    pq = pytest.importorskip("pyarrow.parquet")
    db = tmp_path / "ummon.db"
    subprocess.run(
        [sys.executable, "-m", "daemons.mcs", "--init-db", str(db)], check=True, cwd=ROOT,
        timeout=60, capture_output=True,
    )  # fmt: skip
    (tmp_path / "pq").mkdir()
    lite = await DaemonProcess.start(
        "mcs", str(mcs_xml(tmp_path, "lite", "sqlite", "sqlite_database_path=ummon.db")),
        wait_listening=False,
    )  # fmt: skip
    parq = await DaemonProcess.start(
        "mcs", str(mcs_xml(tmp_path, "parq", "parquet", "parquet_directory=pq")),
        wait_listening=False,
    )  # fmt: skip
    procs = [lite, parq]
    try:
        for p in (lite, parq):
            await p.wait_for_line(r"collecting topic '/29west/statistics'", WAIT)
        srs = await DaemonProcess.start("srs", str(srs_xml(tmp_path, mon_cfg)))
        procs.append(srs)
        store = await DaemonProcess.start(
            "umestored", str(store_xml(tmp_path, mon_cfg)), wait_listening=False
        )
        procs.append(store)
        app = await Context.create(
            {"monitor_interval": "1", "monitor_format": "pb", "monitor_appid": "app-mcs"}
        )
        src = await app.create_source(STATS)
        try:
            await until(
                lambda: src.receivers == 2, "both MCS join the statistics source", timeout=WAIT
            )
            dro = dro_mon_pb2.DROMonMsg()
            dro.stats.local.gateway_name = "dro-mcs"
            dro.stats.local.gateway_id = 4242
            packet = encode_stats(
                PacketType.GATEWAY, dro, MonAttributes(application_id="dro-mcs", timestamp=7)
            )
            await src.send(b"\x00\x07 not a statistics message")
            await src.send(packet, flush=True)

            def have_all() -> bool:
                return all(
                    any(app_id in r for r in rows(db, table))
                    for table, app_id in (
                        ("umsmonmsg", '"applicationId":"app-mcs"'),
                        ("srsmonmsg", '"applicationId":"srs-mcs"'),
                        ("umpmonmsg", '"applicationId":"store-mcs"'),
                        ("dromonmsg", '"applicationId":"dro-mcs"'),
                    )
                )

            await until(have_all, "rows of all four kinds in SQLite", timeout=WAIT)
        finally:
            await src.close()
            await app.close()
        assert await lite.stop(signal.SIGINT) == 0, "\n".join(lite.lines[-25:])
        assert await parq.stop(signal.SIGINT) == 0
    finally:
        for p in procs:
            if p.proc.returncode is None:
                await p.stop()
    # UM's JSON form, compact, as UM's tools grep it
    (dro_row,) = rows(db, "dromonmsg")
    assert dro_row == canonical_json(decode_stats(packet).message)  # type: ignore[arg-type]
    assert '"gatewayName":"dro-mcs"' in dro_row and '"gatewayId":"4242"' in dro_row
    ums = rows(db, "umsmonmsg")
    assert any('"context":{' in r for r in ums) and all(", " not in r for r in ums[:5])
    # the garbage was counted, and written is what was stored
    summary = re.compile(r"stopped: received (\d+) .*bad (\d+), dropped 0\); written (\d+)")
    for p in (lite, parq):
        m = p.find(summary)
        assert m is not None, p.lines[-5:]
        assert int(m.group(2)) == 1
    # the Parquet files hold the same DRO message, and messages of every kind
    base = tmp_path / "pq"
    assert not list(base.rglob("*.inprogress"))
    dro_table = pq.read_table(base / "kind=dro").to_pylist()
    (dro_pq,) = dro_table
    assert dro_pq["raw"] == decode_stats(packet).data
    assert dro_pq["message"]["stats"]["local"]["gateway_name"] == "dro-mcs"
    for kind, app_id in (("ums", "app-mcs"), ("srs", "srs-mcs"), ("ump", "store-mcs")):
        ids = {r["application_id"] for r in pq.read_table(base / f"kind={kind}").to_pylist()}
        assert app_id in ids, (kind, ids)


@pytest.mark.parametrize(
    ("xml", "props", "error"),
    [
        ("<um-mcs><connectr/></um-mcs>", None, r"mcs\.xml:1: <connectr>: .*not expected"),
        (
            "<um-mcs><connector><type>sqlite</type><properties-file>p</properties-file>"
            "</connector></um-mcs>",
            "sqlite_database_path=missing.db",
            r"does not exist \(UM's MCS needs it created first: MCS --init-db",
        ),
        (
            "<um-mcs><connector><type>hdfs</type></connector></um-mcs>",
            None,
            r"unknown connector type 'hdfs' \(UM's HDFS connector is not in pyum: use parquet\)",
        ),
        (
            "<um-mcs><receiver-transport-opts><config-file>bad.cfg</config-file>"
            "</receiver-transport-opts><connector><properties-file>p</properties-file>"
            "</connector></um-mcs>",
            "sqlite_database_path=x.db",
            r"bad\.cfg:1: .*no_such_option",
        ),
    ],
    ids=["schema", "no-database", "hdfs", "bad-um-config"],
)
def test_bad_configuration_is_one_line_and_exit_1(
    tmp_path: Path, xml: str, props: str | None, error: str
) -> None:
    (tmp_path / "mcs.xml").write_text(xml)
    if props is not None:
        (tmp_path / "p").write_text(props + "\n")
    (tmp_path / "bad.cfg").write_text("context no_such_option 1\n")
    (tmp_path / "x.db").write_bytes(b"")
    run = subprocess.run(
        [sys.executable, "-m", "daemons.mcs", str(tmp_path / "mcs.xml")],
        capture_output=True, text=True, timeout=60, cwd=ROOT,
    )  # fmt: skip
    assert run.returncode == 1, run
    lines = run.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("MCS: "), run.stderr
    assert re.search(error, lines[0]), lines[0]
    assert not (tmp_path / "mcs.pid").exists()


def test_command_line_prints_and_creates() -> None:
    def mcs(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "daemons.mcs", *args],
            capture_output=True, text=True, timeout=60, cwd=ROOT,
        )  # fmt: skip

    x = mcs("-x")
    assert x.returncode == 0 and '<xs:element name="um-mcs">' in x.stdout
    p = mcs("-p")
    assert p.returncode == 0 and "sqlite: sqlite_database_path" in p.stdout
    h = mcs("--help")
    assert h.returncode == 0 and "Monitoring Collector Service" in h.stdout
    assert mcs("--no-such-flag").returncode == 2
    none = mcs()
    assert none.returncode == 2 and "a configfile is needed" in none.stderr  # a command-line fault


def test_the_shipped_configuration_validates() -> None:
    """configs/mcs.xml (and its properties file) as shipped pass ``MCS -v``."""
    run = subprocess.run(
        [sys.executable, "-m", "daemons.mcs", "-v", str(ROOT / "configs" / "mcs.xml")],
        capture_output=True, text=True, timeout=60, cwd=ROOT,
    )  # fmt: skip
    assert run.returncode == 0, run.stderr
    assert run.stdout.strip().endswith("mcs.xml: valid")


def test_mcsds_without_pywin32_explains_and_exits_1() -> None:
    from umcore.daemon.winservice import HAVE_PYWIN32

    if HAVE_PYWIN32:
        pytest.skip("pywin32 installed: the service front would really act")
    run = subprocess.run(
        [sys.executable, "-m", "daemons.mcs.service", "-s", "install", "mcs.xml"],
        capture_output=True, text=True, timeout=60, cwd=ROOT,
    )  # fmt: skip
    assert run.returncode == 1
    assert run.stderr.startswith("mcsds: ") and "pywin32" in run.stderr
