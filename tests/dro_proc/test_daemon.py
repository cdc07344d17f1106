"""tnwgd as a process: its command line, and a DRO killed and restarted under running traffic.

The restart test runs the DRO as ``python -m daemons.tnwgd FILE``, a source in TRD1 and a receiver
in TRD2 in the test process.  Killed with SIGKILL (no goodbye on any socket) and started again,
the new DRO rebuilds the receiver's interest from its start-up topic resolution requests, and the
receiver (never restarted) joins the new proxy source and gets the source's later messages.
"""

from __future__ import annotations

import asyncio
import re
import struct
import subprocess
import sys
from pathlib import Path

from daemons.tnwgd.app import check_supported
from tests.dro_proc.kit import Recorder, Trd, dro_xml
from tests.integration.daemon_proc import ROOT, DaemonProcess
from tests.integration.helpers import until
from umcore.api import Context
from umcore.config import dro as dro_config

STARTED = re.compile(r"Gwd-7122-1: Gateway named \[(\w+)\] with node id: (\d+) has started")
_SEQ = struct.Struct("!I")


def _run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "daemons.tnwgd", *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def test_command_line(tmp_path: Path) -> None:
    ok = _run("-v", "configs/dro.xml")
    assert ok.returncode == 0 and ok.stdout.strip() == "configs/dro.xml: valid"
    dtd = _run("-d")
    assert dtd.returncode == 0 and "<!ELEMENT tnw-gateway" in dtd.stdout
    usage = _run("--no-such-option")
    assert usage.returncode == 2 and "tnwgd:" in usage.stderr
    missing = _run()
    assert missing.returncode == 2 and "configuration file is required" in missing.stderr
    bad = tmp_path / "bad.xml"
    bad.write_text('<tnw-gateway version="1.0">\n<portals>\n<endpoint><name>A</name>\n'
                   "<cost>0</cost></endpoint></portals></tnw-gateway>\n")  # fmt: skip
    refused = _run("-v", str(bad))
    assert refused.returncode == 1 and str(bad) in refused.stderr
    # one TRD, two endpoints: refused before anything starts, naming the second one's line
    trd = Trd()
    same = tmp_path / "same.xml"
    same.write_text(dro_xml([("A", 1, trd), ("B", 2, trd)]).replace("<endpoint>", "\n<endpoint>"))
    two = _run(str(same))
    assert two.returncode == 1
    assert f"{same}:3: <endpoint>: endpoints 'A' and 'B' resolve topics the same way" in two.stderr
    dom = tmp_path / "dom.xml"
    dom.write_text(
        dro_xml([("A", 7, Trd()), ("B", 7, Trd())]).replace("<endpoint>", "\n<endpoint>")
    )
    one_id = _run(str(dom))
    assert one_id.returncode == 1 and "share domain-id 7" in one_id.stderr


async def test_dro_killed_and_restarted(tmp_path: Path) -> None:
    trd1, trd2 = Trd(), Trd()
    cfg = tmp_path / "dro.xml"
    cfg.write_text(dro_xml([("TRD1", 1, trd1), ("TRD2", 2, trd2)], name="restarted"))
    rec = Recorder()
    dro = await DaemonProcess.start("tnwgd", str(cfg), wait_listening=False)
    try:
        await dro.wait_for_line(STARTED, 30)
        async with (
            await Context.create(trd1.context()) as a,
            await Context.create(trd2.context()) as b,
        ):
            rcv = await b.create_receiver("dro.restart", rec, attributes=trd2.receiver())
            src = await a.create_source("dro.restart", attributes=trd1.source("tcp"))
            sent = 0

            async def send_until(pred: object, what: str) -> None:
                nonlocal sent
                async with asyncio.timeout(30):
                    while not pred():  # type: ignore[operator]
                        await src.send(_SEQ.pack(sent), flush=True)
                        sent += 1
                        await asyncio.sleep(0.01)  # a steady stream, 100 messages a second

            await send_until(lambda: len(rec.sqns) >= 20, "messages through the first DRO")
            first_session = {js.source_string for js in b.joined.values()}
            dro.proc.kill()  # SIGKILL: nothing is closed politely
            await dro.proc.wait()
            await until(lambda: rec.eos >= 1, "EOS of the dead DRO's proxy source")
            before = rec.sqns[-1]
            dro = await DaemonProcess.start("tnwgd", str(cfg), wait_listening=False)
            await dro.wait_for_line(STARTED, 30)
            await send_until(lambda: rec.sqns[-1] > before + 20, "messages through the new DRO")
            # the same receiver, a new session: the new DRO's proxy source
            assert {js.source_string for js in b.joined.values()} != first_session
            assert rec.bos >= 2
            after = rec.sqns[rec.sqns.index(before) + 1 :]
            assert after == sorted(after)  # in order after the restart too
            await rcv.close()
            await src.close()
    finally:
        await dro.stop()


async def test_pid_file_log_format_and_clean_stop(tmp_path: Path) -> None:
    pid = tmp_path / "dro.pid"
    cfg = tmp_path / "dro.xml"
    cfg.write_text(dro_xml([("TRD1", 1, Trd()), ("TRD2", 2, Trd())], pidfile=str(pid)))
    dro = await DaemonProcess.start("tnwgd", "-u", str(cfg), wait_listening=False)
    try:
        match = await dro.wait_for_line(STARTED, 30)
        assert match.group(1) == "dro"
        await until(pid.exists, "the pid file")
        assert int(pid.read_text()) == dro.proc.pid
        line = next(x for x in dro.lines if "Gwd-7122-1" in x)
        # UM's DRO line: [YYYY-MM-DD HH:MM:SS.uuuuuu] [severity] text
        assert re.match(r"^\[\d{4}-\d\d-\d\d \d\d:\d\d:\d\d\.\d{6}\] \[information\] Gwd-", line)
        assert any("Gwd-7136-1" in x for x in dro.lines)
    finally:
        status = await dro.stop()
    assert status == 0
    assert not pid.exists()


def test_mismatched_datagram_sizes_are_warned_about() -> None:
    trd1 = Trd()
    xml = dro_xml([("TRD1", 1, trd1), ("TRD2", 2, Trd())])
    same = dro_config.load_text(xml, "same.xml")
    assert check_supported(same) == []
    bigger = xml.replace(
        "</lbm-attributes>",
        '<option scope="context" name="resolver_datagram_max_size" value="4096"/></lbm-attributes>',
        1,
    )
    (warning,) = check_supported(dro_config.load_text(bigger, "sizes.xml"))
    assert warning.startswith("resolver_datagram_max_size differs between portals: 4096 (TRD1)")


async def test_log_file_without_size_does_not_roll(tmp_path: Path) -> None:
    log = tmp_path / "dro.log"
    cfg = tmp_path / "dro.xml"
    cfg.write_text(dro_xml([("TRD1", 1, Trd()), ("TRD2", 2, Trd())], log=str(log)))
    dro = await DaemonProcess.start("tnwgd", str(cfg), wait_listening=False)
    try:
        await until(lambda: log.exists() and "has started" in log.read_text(), "the log file")
    finally:
        assert await dro.stop() == 0
    assert "stopping:" in log.read_text()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["dro.log", "dro.xml"]  # one file
