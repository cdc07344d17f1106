"""lbmsrc and lbmrcv as subprocesses, resolving through a real lbmrd; the make-run topology (lbmrd,
the SRS, lbmmon, a pair through each)."""

from __future__ import annotations

import asyncio
import os
import re
import signal
import sqlite3
import sys
from pathlib import Path

import pytest

from tests.integration.daemon_proc import ROOT, DaemonProcess
from tests.integration.helpers import lbmrd_client_lines

TIMEOUT = 60.0
SUMMARY = re.compile(r"messages=(\d+) .*unrecoverable=(\d+) .*verify_errors=(\d+)")


async def tool(name: str, *args: str) -> asyncio.subprocess.Process:
    return await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        f"umcore.tools.{name}",
        *args,
        cwd=ROOT,
        env=dict(os.environ, PYTHONUNBUFFERED="1"),
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )


async def finish(proc: asyncio.subprocess.Process) -> tuple[int, str, str]:
    try:
        out, err = await asyncio.wait_for(proc.communicate(), TIMEOUT)
    finally:
        if proc.returncode is None:
            proc.kill()
            await proc.wait()
    assert proc.returncode is not None
    return proc.returncode, (out or b"").decode(), (err or b"").decode()


async def test_lbmsrc_to_lbmrcv_through_lbmrd(lbmrd: DaemonProcess, tmp_path: Path) -> None:
    cfg = tmp_path / "uc.cfg"
    cfg.write_text(lbmrd_client_lines(lbmrd.address) + "source transport_tcp_interface 127.0.0.1\n")
    n = 20_000
    rcv = await tool("lbmrcv", "-c", str(cfg), "-E", "-V", "tools.topic")
    assert rcv.stdout is not None
    async with asyncio.timeout(TIMEOUT):
        assert b"receiving" in await rcv.stdout.readline()
    src = await tool(
        "lbmsrc",
        "-c",
        str(cfg),
        "-M",
        str(n),
        "-l",
        "100",
        "-V",
        "-d",
        "1",
        "-L",
        "1",
        "tools.topic",
    )
    src_rc, src_out, src_err = await finish(src)
    rc, out, err = await finish(rcv)
    assert src_rc == 0, src_err
    assert rc == 0, err
    last = out.strip().splitlines()[-1]
    found = SUMMARY.search(last)
    assert found, last
    assert found.groups() == (str(n), "0", "0")
    assert f"messages={n}" in src_out


async def test_bad_config_file_is_one_line_and_status_1(tmp_path: Path) -> None:
    cfg = tmp_path / "bad.cfg"
    cfg.write_text("context no_such_option 1\n")
    rc, _out, err = await finish(await tool("lbmrcv", "-c", str(cfg), "-r", "1", "t"))
    assert rc == 1
    assert "bad.cfg:1" in err and "no_such_option" in err


@pytest.mark.slow
async def test_topology_shows_messages_crossing_lbmrd_and_the_srs(tmp_path: Path) -> None:
    db = tmp_path / "ummon.db"
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "umcore.tools.topology",
        "--messages",
        "2000",
        "--rate",
        "2000",
        "--stats-interval",
        "0.2",
        "--mcs-db",
        str(db),
        cwd=ROOT,
        env=dict(os.environ, PYTHONUNBUFFERED="1"),
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.STDOUT,
    )
    rc, out, _ = await finish(proc)
    assert rc == 0, out
    assert "[lbmrd ]" in out and "new client" in out
    # the Store started from configs/umestored.xml, resolving through lbmrd, stopped in order
    store = [line for line in out.splitlines() if line.startswith("[store ]")]
    assert any("Store store1 ready to accept registrations" in line for line in store), out
    assert any("Shutdown complete" in line for line in store), out
    for name in ("lbmrcv", "srsrcv"):  # through lbmrd, through the SRS (UDP TR off)
        summary = [
            line for line in out.splitlines() if line.startswith(f"[{name}] lbmrcv: messages=")
        ]
        assert summary and "messages=2000 " in summary[0] and "unrecoverable=0" in summary[0], name
    # the SRS registered the two SRS-resolved tools, and lbmmon printed its live statistics
    assert out.count("[srs   ]") and out.count("Registration protocolVersion[3] received") == 2
    heads = [
        line for line in out.splitlines() if line.startswith("[lbmmon] SRS statistics received")
    ]
    assert heads and all(" from demo-srs at 127.0.0.1" in h for h in heads), out
    counts = re.findall(r"^\[lbmmon\] \t\t\tactive_clients_count = (\d+)$", out, re.M)
    assert counts and max(map(int, counts)) == 2, counts
    # the persisted pair: the restarted umercv recovers from the Store exactly what it missed
    ume = [line for line in out.splitlines() if line.startswith("[umercv] umercv: messages=")]
    assert len(ume) == 2, out
    first, second = (int(re.findall(r"messages=(\d+)", line)[0]) for line in ume)
    assert first >= 500 and first + second == 2000, ume
    assert "unrecoverable=0 duplicates=0 " in ume[1] and "verify_errors=0 " in ume[1], ume
    assert int(re.findall(r"recovered=(\d+)", ume[1])[0]) > 0, ume
    assert f"OLD[SQN {first}]" in out, out
    assert "[umesrc] umesrc: sent=2000 stable=2000 " in out, out
    # MCS collected the SRS's and the monitored pair's statistics into UM's SQLite tables
    assert f"[topo  ] mcs      collecting '/29west/statistics' into {db}" in out, out
    conn = sqlite3.connect(db)
    try:
        srs_rows = [r[0] for r in conn.execute("SELECT message FROM srsmonmsg")]
        ums_rows = [r[0] for r in conn.execute("SELECT message FROM umsmonmsg")]
    finally:
        conn.close()
    assert any('"applicationId":"demo-srs"' in r for r in srs_rows), len(srs_rows)
    assert any('"applicationId":"demo-pair"' in r for r in ums_rows), len(ums_rows)


@pytest.mark.slow
async def test_topology_ctrl_c_leaves_no_process() -> None:
    """SIGINT to the whole process group, as a terminal's Ctrl-C does: everything stops."""
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "umcore.tools.topology", "--stats-interval", "1",
        cwd=ROOT, env=dict(os.environ, PYTHONUNBUFFERED="1"), start_new_session=True,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT,
    )  # fmt: skip
    assert proc.stdout is not None
    lines: list[str] = []
    try:
        async with asyncio.timeout(TIMEOUT):
            while not any(
                line.startswith("[srsrcv] lbmrcv: ") and "total" in line for line in lines
            ):
                line = await proc.stdout.readline()
                assert line, lines
                lines.append(line.decode(errors="replace").rstrip("\n"))
        os.killpg(proc.pid, signal.SIGINT)
        rest, _ = await asyncio.wait_for(proc.communicate(), TIMEOUT)
    finally:
        if proc.returncode is None:
            os.killpg(proc.pid, signal.SIGKILL)
            await proc.wait()
    assert proc.returncode == 0, rest.decode()
    out = "\n".join(lines) + rest.decode(errors="replace")
    assert "[topo  ] stopping (Ctrl-C)" in out
    pids = [int(p) for p in re.findall(r"^\[topo  \] \w+ .*\(pid (\d+)\)", out, re.M)]
    # lbmrd, the store, srs, lbmmon, two pairs, the persisted pair (and, if it was restarted
    # already, the second umercv)
    assert len(pids) >= 10, out
    for pid in pids:
        with pytest.raises(ProcessLookupError):
            os.kill(pid, 0)


async def test_lbmwrcv_pattern_through_lbmrd(lbmrd: DaemonProcess, tmp_path: Path) -> None:
    cfg = tmp_path / "uc.cfg"
    cfg.write_text(lbmrd_client_lines(lbmrd.address) + "source transport_tcp_interface 127.0.0.1\n")
    rcv = await tool("lbmwrcv", "-c", str(cfg), "-r", "500", "-V", r"^wild\.")
    assert rcv.stdout is not None
    async with asyncio.timeout(TIMEOUT):
        assert b"matching" in await rcv.stdout.readline()
    src = await tool("lbmsrc", "-c", str(cfg), "-M", "500", "-V", "-d", "1", "-L", "0", "wild.one")
    assert (await finish(src))[0] == 0
    rc, out, err = await finish(rcv)
    assert rc == 0, err
    found = SUMMARY.search(out.strip().splitlines()[-1])
    assert found and found.groups() == ("500", "0", "0")
