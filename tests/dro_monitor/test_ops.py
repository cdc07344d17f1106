"""tnwgd's operations pieces: the man pages name every option the command lines take, the
Windows service front explains itself without pywin32 and validates like tnwgd, and the
systemd unit passes ``systemd-analyze verify``."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from daemons.tnwgd import service
from daemons.tnwgd.manpage import TNWGD, TNWGDS
from umcore.daemon import winservice

ROOT = Path(__file__).resolve().parents[2]
UNIT = ROOT / "configs" / "systemd" / "tnwgd.service"


def _options(parser: object) -> set[str]:
    return {
        opt
        for action in parser._actions  # type: ignore[attr-defined]  # argparse's documented list
        for opt in action.option_strings
    }


def test_the_man_pages_name_every_option() -> None:
    for opt in _options(service.build_parser()):
        assert opt.split("=")[0] in TNWGDS, opt
    from daemons.tnwgd.__main__ import build_parser

    for opt in _options(build_parser()):
        assert opt in TNWGD, opt
    # UM's options (notes A11)
    for opt in ("-d", "-h", "-v", "-u", "-f"):
        assert f"  {opt}, " in TNWGD
    for opt in ("-s", "-e", "-E", "-U"):
        assert f"  {opt}, " in TNWGDS


def _run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "daemons.tnwgd.service", *args],
        capture_output=True, text=True, timeout=60, cwd=ROOT,
    )  # fmt: skip


@pytest.mark.skipif(winservice.HAVE_PYWIN32, reason="pywin32 installed: the front would act")
def test_the_service_front_without_pywin32_says_so_and_validates(tmp_path: Path) -> None:
    run = _run("-s", "install", "configs/dro.xml")
    assert run.returncode == 1
    assert len(run.stderr.splitlines()) == 1 and "needs pywin32" in run.stderr
    assert _run("-v", "configs/dro.xml").stdout.strip() == "configs/dro.xml: valid"
    bad = tmp_path / "bad.xml"
    bad.write_text('<tnw-gateway version="1.0"><portals/></tnw-gateway>\n')
    run = _run("-v", str(bad))
    assert run.returncode == 1 and run.stderr.startswith("tnwgds: ") and "bad.xml" in run.stderr
    run = _run("-E", "env.txt", "-U", "-s", "install")
    assert run.returncode == 2 and "cannot be combined" in run.stderr
    assert "<!ELEMENT tnw-gateway" in _run("-d").stdout


def test_the_systemd_unit_verifies(tmp_path: Path) -> None:
    analyze = shutil.which("systemd-analyze")
    if analyze is None:
        pytest.skip("systemd-analyze not installed")
    text = UNIT.read_text()
    assert "ExecStart=/usr/local/bin/tnwgd /etc/pyum/dro.xml" in text
    assert "ExecStartPre=/usr/local/bin/tnwgd -v /etc/pyum/dro.xml" in text
    # verify wants the executables: stand-ins in a temporary directory
    bindir = tmp_path / "bin"
    bindir.mkdir()
    exe = bindir / "tnwgd"
    exe.write_text("#!/bin/sh\n")
    exe.chmod(0o755)

    def verify(unit_text: str, name: str) -> str:
        unit = tmp_path / name
        unit.write_text(unit_text.replace("/usr/local/bin/", f"{bindir}/"))
        run = subprocess.run(
            [analyze, "verify", str(unit)], capture_output=True, text=True, timeout=60
        )
        return (run.stdout + run.stderr).strip()

    assert verify(text, "tnwgd.service") == ""
    broken = text.replace("KillSignal=SIGTERM", "KillSignal=SIGTREM")
    assert "SIGTREM" in verify(broken, "broken.service")  # the check can fail
