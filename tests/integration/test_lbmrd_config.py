"""lbmrd's command line and configuration files, as a subprocess: -d, -v, --help, and every bad
file giving one line and exit status 1 before anything binds (acceptance check 21)."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from lxml import etree

from tests.integration.daemon_proc import ROOT

TIMEOUT = 30

GOOD = """<?xml version="1.0" encoding="UTF-8" ?>
<lbmrd version="1.0">
  <daemon>
    <port>12801</port>
  </daemon>
  <domains>
    <domain name="dummy">
      <network>0.0.0.0/32</network>
    </domain>
  </domains>
  <transformations>
    <transform source="dummy" destination="dummy">
      <rule>
        <match address="0.0.0.0" port="0"/>
        <replace address="0.0.0.0" port="0"/>
      </rule>
    </transform>
  </transformations>
</lbmrd>
"""


def run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "daemons.lbmrd", *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=TIMEOUT,
        check=False,
    )


# (name, text, line the error must name, words the message must contain)
BAD = [
    (
        "no-domains",
        GOOD.replace(GOOD[GOOD.index("  <domains>") : GOOD.index("  <transformations>")], ""),
        2,
        "lbmrd",
    ),
    ("no-version", GOOD.replace('<lbmrd version="1.0">', "<lbmrd>"), 2, "version"),
    ("version-2", GOOD.replace('<lbmrd version="1.0">', '<lbmrd version="2.0">'), 2, "2.0"),
    ("unknown-idref", GOOD.replace('source="dummy"', 'source="nosuch"'), 12, "nosuch"),
    (
        "duplicate-domain",
        GOOD.replace(
            "  </domains>",
            '    <domain name="dummy">\n      <network>1.0.0.0/8</network>\n    </domain>\n  </domains>',
        ),
        10,
        "dummy",
    ),
    (
        "rule-order",
        GOOD.replace(
            '<match address="0.0.0.0" port="0"/>\n        <replace address="0.0.0.0" port="0"/>',
            '<replace address="0.0.0.0" port="0"/>\n        <match address="0.0.0.0" port="0"/>',
        ),
        13,
        "match",
    ),
    ("bad-integer", GOOD.replace("<port>12801</port>", "<port>12x01</port>"), 4, "12x01"),
    ("port-range", GOOD.replace("<port>12801</port>", "<port>70000</port>"), 4, "70000"),
    ("bad-network", GOOD.replace("0.0.0.0/32", "host.example.com"), 8, "host.example.com"),
    ("bad-match-port", GOOD.replace('<match address="0.0.0.0" port="0"/>', '<match address="0.0.0.0" port="x"/>'), 14, "port"),
    ("twice", GOOD.replace("<port>12801</port>", "<port>1</port><port>2</port>"), 4, "twice"),
    ("malformed-xml", GOOD.replace("</daemon>", "</daemn>"), 5, "malformed XML"),
    ("wrong-root", GOOD.replace("lbmrd", "lbmrdr"), 2, "lbmrdr"),
]  # fmt: skip


# Every case with -v; a sample also by starting the daemon for real.
CASES = [(*b, True) for b in BAD] + [
    (*b, False) for b in BAD if b[0] in ("no-domains", "unknown-idref", "bad-integer")
]


@pytest.mark.parametrize(
    ("name", "text", "line", "words", "validate"),
    CASES,
    ids=[f"{c[0]}-{'v' if c[4] else 'start'}" for c in CASES],
)
def test_bad_config_one_line_exit_1(
    tmp_path: Path, name: str, text: str, line: int, words: str, validate: bool
) -> None:
    path = tmp_path / f"{name}.xml"
    path.write_text(text)
    # Started for real, it must fail before binding: -p 0 would otherwise succeed and run.
    proc = run("-v", str(path)) if validate else run("-i", "127.0.0.1", str(path))
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert proc.stdout == ""
    lines = proc.stderr.splitlines()
    assert len(lines) == 1, proc.stderr
    assert "Traceback" not in proc.stderr
    assert lines[0].startswith(f"lbmrd: {path}:{line}: "), lines[0]
    assert words in lines[0]


def test_good_configs_validate() -> None:
    for name in ("lbmrd.xml", "lbmrd-nat.xml"):
        proc = run("-v", str(ROOT / "configs" / name))
        assert proc.returncode == 0, proc.stderr
        assert proc.stdout.strip().endswith("valid")


def test_missing_file_is_one_line() -> None:
    proc = run("-v", "/nonexistent/lbmrd.xml")
    assert proc.returncode == 1
    assert proc.stderr.startswith("lbmrd: /nonexistent/lbmrd.xml: cannot read")
    assert len(proc.stderr.splitlines()) == 1


def test_unknown_interface_is_one_line() -> None:
    proc = run("-i", "192.0.2.77", "-p", "0")  # TEST-NET-1: never a local address
    assert proc.returncode == 2  # a fault of the command line itself (the help text's rule)
    assert proc.stderr.startswith("lbmrd: command line: -i: 192.0.2.77 is not an address")
    assert len(proc.stderr.splitlines()) == 1


def test_usage_error_exits_2() -> None:
    proc = run("--no-such-flag")
    assert proc.returncode == 2
    assert proc.stderr.startswith("lbmrd: ")


def test_help_prints_the_man_page() -> None:
    proc = run("--help")
    assert proc.returncode == 0
    for flag in ("--activity", "--dump-dtd", "--interface", "--logfile", "--port", "--ttl",
                 "--rcv-buf", "--snd-buf", "--validate", "--metrics"):  # fmt: skip
        assert flag in proc.stdout


def test_dump_dtd_validates_the_shipped_configs_with_a_stock_tool(tmp_path: Path) -> None:
    proc = run("-d")
    assert proc.returncode == 0
    assert "<!ELEMENT lbmrd (daemon?, domains, transformations)>" in proc.stdout
    dtd = tmp_path / "lbmrd.dtd"
    dtd.write_text(proc.stdout)
    files = [str(ROOT / "configs" / n) for n in ("lbmrd.xml", "lbmrd-nat.xml")]
    xmllint = shutil.which("xmllint")
    if xmllint is not None:
        ok = subprocess.run(
            [xmllint, "--noout", "--dtdvalid", str(dtd), *files],
            capture_output=True,
            text=True,
            timeout=TIMEOUT,
            check=False,
        )
        assert ok.returncode == 0, ok.stderr
        bad = tmp_path / "bad.xml"
        bad.write_text(GOOD.replace('source="dummy"', 'source="nosuch"'))
        refused = subprocess.run(
            [xmllint, "--noout", "--dtdvalid", str(dtd), str(bad)],
            capture_output=True,
            text=True,
            timeout=TIMEOUT,
            check=False,
        )
        assert refused.returncode != 0
    else:  # lxml (libxml2) is the stock validator then
        validator = etree.DTD(str(dtd))
        for f in files:
            assert validator.validate(etree.parse(f)), validator.error_log


def test_lbmrds_without_pywin32_explains_and_exits_1() -> None:
    from umcore.daemon.winservice import HAVE_PYWIN32

    if HAVE_PYWIN32:
        pytest.skip("pywin32 installed: the service front would really act")
    proc = subprocess.run(
        [sys.executable, "-m", "daemons.lbmrd.service", "-S", "install", "x.xml"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=TIMEOUT,
        check=False,
    )
    assert proc.returncode == 1
    assert proc.stderr.startswith("lbmrds: ") and "pywin32" in proc.stderr
    assert len(proc.stderr.splitlines()) == 1
    helped = subprocess.run(
        [sys.executable, "-m", "daemons.lbmrd.service", "--help"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=TIMEOUT,
        check=False,
    )
    assert helped.returncode == 0 and "--event-log-level" in helped.stdout
