"""umestored's command line (persistence-store.md 5.1; acceptance checks 29-31).

``-v``/``-d``/``-a``/missing directories run in-process through ``main`` (nothing binds before
they exit); the start, SIGINT and restart run the daemon as a subprocess on loopback.
"""

from __future__ import annotations

import asyncio
import logging
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from lxml import etree

from daemons.umestored.__main__ import main, parse_affinity
from daemons.umestored.logsetup import NOTICE, configure_logging
from daemons.umestored.prepare import RECEIVER_DEFAULTS, prepare
from umcore.config import store as store_config
from umcore.config.attributes import Configuration, reset_global_configuration
from umcore.config.store import StoreDaemon
from umcore.errors import ConfigError

ROOT = Path(__file__).resolve().parents[2]
CONFIG = ROOT / "configs" / "umestored.xml"
TIMEOUT = 30.0  # a cold interpreter with lxml on a busy 2-core machine

STORE = """<?xml version="1.0"?>
<ume-store version="1.3">
  <daemon>{daemon}</daemon>
  <stores>
    <store name="s1" interface="127.0.0.1" {port}>
      <ume-attributes>
        <option type="store" name="disk-cache-directory" value="{cache}"/>
        <option type="store" name="disk-state-directory" value="{state}"/>
      </ume-attributes>
      <topics>
        <topic pattern="t.*" type="PCRE">
          <ume-attributes>
            <option type="store" name="repository-type" value="{kind}"/>
            {receiver}
          </ume-attributes>
        </topic>
      </topics>
    </store>
  </stores>
</ume-store>
"""


def store_xml(
    path: Path,
    *,
    port: str = 'port="0"',
    cache: str = "cache",
    state: str = "state",
    kind: str = "memory",
    daemon: str = '<log type="console"/>',
    receiver: str = "",
) -> Path:
    path.write_text(
        STORE.format(
            port=port, cache=cache, state=state, kind=kind, daemon=daemon, receiver=receiver
        )
    )
    return path


def run_main(argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    with pytest.raises(SystemExit) as info:
        main(argv)
    out, err = capsys.readouterr()
    code = info.value.code
    return (code if isinstance(code, int) else 1), out, err


@pytest.fixture
def fresh_configuration() -> Iterator[None]:
    """prepare() loads UM option files into the process configuration: a fresh one per test."""
    reset_global_configuration(Configuration())
    yield
    reset_global_configuration(None)


# ------------------------------------------------------------------ check 29: -v and -d
def test_validate_the_shipped_config_exits_0(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run_main(["-v", str(CONFIG)], capsys)
    assert code == 0
    assert out == f"{CONFIG}: valid\n"


def test_a_store_without_port_is_refused_with_file_and_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    bad = store_xml(tmp_path / "noport.xml", port="")
    code, out, err = run_main(["-v", str(bad)], capsys)
    assert code != 0
    assert out == ""
    assert err.startswith(f"umestored: {bad}:5: <store>:") and "port" in err
    assert err.count("\n") == 1


def test_an_unknown_store_option_names_the_close_ones(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    bad = store_xml(tmp_path / "typo.xml")
    bad.write_text(bad.read_text().replace("repository-type", "repository-typ"))
    code, _, err = run_main(["-v", str(bad)], capsys)
    assert code == 1
    assert f"{bad}:13:" in err and "did you mean repository-type" in err


def test_dump_dtd_validates_the_shipped_config_with_a_stock_tool(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, _ = run_main(["-d"], capsys)
    assert code == 0
    assert "<!ELEMENT ume-store (daemon, stores?)>" in out
    dtd = tmp_path / "umestored.dtd"
    dtd.write_text(out)
    bad = store_xml(tmp_path / "noport.xml", port="")
    xmllint = shutil.which("xmllint")
    if xmllint is None:
        if os.environ.get("CI"):
            pytest.fail("xmllint is required in CI (.ci/run installs libxml2-utils)")
        validator = etree.DTD(str(dtd))  # libxml2 through lxml, then
        assert validator.validate(etree.parse(str(CONFIG))), validator.error_log
        assert not validator.validate(etree.parse(str(bad)))
        return
    ok = subprocess.run(
        [xmllint, "--noout", "--dtdvalid", str(dtd), str(CONFIG)],
        capture_output=True,
        text=True,
        timeout=TIMEOUT,
        check=False,
    )
    assert ok.returncode == 0, ok.stderr
    refused = subprocess.run(
        [xmllint, "--noout", "--dtdvalid", str(dtd), str(bad)],
        capture_output=True,
        text=True,
        timeout=TIMEOUT,
        check=False,
    )
    assert refused.returncode != 0 and "port" in refused.stderr


def test_help_prints_the_man_page(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run_main(["--help"], capsys)
    assert code == 0
    for flag in ("--dump-dtd", "--detach", "--validate", "--use-utc", "--affinitize", "--metrics"):
        assert flag in out


def test_a_config_file_is_required(capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = run_main([], capsys)
    assert code == 2  # a usage error (the man page's convention)
    assert err == (
        "umestored: command line: a configuration file is required "
        "(umestored [options] CONFIG.xml)\n"
    )


def test_unknown_flag_is_a_usage_error(capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = run_main(["-x", str(CONFIG)], capsys)
    assert code == 2
    assert err.startswith("umestored: unrecognized arguments: -x")


# ------------------------------------------------------------------ -a
def test_affinity_takes_cpu_numbers_of_this_machine() -> None:
    cpus = sorted(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else [0]
    assert parse_affinity(",".join(map(str, cpus))) == cpus
    with pytest.raises(ConfigError, match="is not a CPU number"):
        parse_affinity("0,x")
    with pytest.raises(ConfigError, match="CPU 4096 is not available") as info:
        parse_affinity("4096")
    assert info.value.allowed is not None and str(cpus[0]) in info.value.allowed


def test_bad_affinity_exits_2_before_anything_starts(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, err = run_main(["-a", "4096", str(CONFIG)], capsys)
    assert code == 2 and out == ""  # a value out of range on the command line: usage error
    assert err.startswith("umestored: command line: -a: CPU 4096 is not available")


# ------------------------------------------------------------------ check 30: directories
@pytest.mark.parametrize("kind", ["memory", "disk"])
def test_a_missing_cache_directory_is_refused_not_created(
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    kind: str,
    fresh_configuration: None,
) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "state").mkdir()
    cfg = store_xml(tmp_path / "store.xml", kind=kind)
    code, out, err = run_main([str(cfg)], capsys)
    assert code == 1 and out == ""
    assert err == (
        f"umestored: {cfg}:7: <store name=\"s1\"> disk-cache-directory: directory 'cache' "
        f"does not exist (relative to the working directory {tmp_path}); umestored does not "
        "create it (allowed: an existing, writable directory)\n"
    )
    assert not (tmp_path / "cache").exists()


def test_a_missing_default_state_directory_is_refused(
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    fresh_configuration: None,
) -> None:
    """The option absent: the default umestored-state, reported at the <store> line."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "cache").mkdir()
    cfg = store_xml(tmp_path / "store.xml")
    cfg.write_text(re.sub(r'\s*<option[^>]*disk-state-directory"[^>]*/>', "", cfg.read_text()))
    code, _, err = run_main([str(cfg)], capsys)
    assert code == 1
    assert err.startswith(f'umestored: {cfg}:5: <store name="s1"> disk-state-directory:')
    assert "'umestored-state' does not exist" in err
    assert not (tmp_path / "umestored-state").exists()


def test_a_file_where_a_directory_should_be_is_refused(
    tmp_path: Path, fresh_configuration: None
) -> None:
    (tmp_path / "state").mkdir()
    (tmp_path / "cache").write_text("")
    cfg = store_xml(
        tmp_path / "store.xml", cache=str(tmp_path / "cache"), state=str(tmp_path / "state")
    )
    with pytest.raises(ConfigError, match="is not a directory"):
        prepare(store_config.load(cfg))


def test_two_stores_on_one_port_are_refused(tmp_path: Path, fresh_configuration: None) -> None:
    for d in ("cache", "state"):
        (tmp_path / d).mkdir()
    text = store_xml(
        tmp_path / "one.xml",
        port='port="14999"',
        cache=str(tmp_path / "cache"),
        state=str(tmp_path / "state"),
    ).read_text()
    store = text[text.index("<store ") : text.index("</store>") + len("</store>")]
    two = text.replace(store, store + store.replace('name="s1"', 'name="s2"'))
    (tmp_path / "two.xml").write_text(two)
    with pytest.raises(ConfigError, match="port 14999 is already the port of store 's1'"):
        prepare(store_config.load(tmp_path / "two.xml"))


# ------------------------------------------------------------------ UM options of a Store
def test_store_receivers_default_to_otr_and_no_burst_loss(
    tmp_path: Path, fresh_configuration: None
) -> None:
    for d in ("cache", "state"):
        (tmp_path / d).mkdir()
    common = {"cache": str(tmp_path / "cache"), "state": str(tmp_path / "state")}
    plan = prepare(store_config.load(store_xml(tmp_path / "a.xml", **common))).stores[0]
    attrs = plan.receiver_attributes("t1")
    assert attrs.get("use_otr") == RECEIVER_DEFAULTS["use_otr"] == "1"
    assert attrs.get("delivery_control_maximum_burst_loss") == "4294967295"
    # a topic's lbm-receiver option wins over the Store default
    own = '<option type="lbm-receiver" name="use_otr" value="0"/>'
    with_own = store_xml(tmp_path / "b.xml", receiver=own, **common)
    plan = prepare(store_config.load(with_own)).stores[0]
    assert plan.receiver_attributes("t1").get("use_otr") == "0"
    assert plan.receiver_attributes("zzz").get("use_otr") == "1"


def test_bad_lbm_config_lines_are_warnings_and_good_ones_apply(
    tmp_path: Path, fresh_configuration: None
) -> None:
    for d in ("cache", "state"):
        (tmp_path / d).mkdir()
    flat = tmp_path / "store.cfg"
    flat.write_text("context no_such_option 1\ncontext request_tcp_port_low 15001\n")
    cfg = store_xml(
        tmp_path / "a.xml",
        cache=str(tmp_path / "cache"),
        state=str(tmp_path / "state"),
        daemon=f"<lbm-config>{flat}</lbm-config>",
    )
    prepared = prepare(store_config.load(cfg))
    assert len(prepared.warnings) == 1
    assert f"{flat}:1" in prepared.warnings[0] and "no_such_option" in prepared.warnings[0]
    assert prepared.stores[0].context_attributes.get("request_tcp_port_low") == "15001"


def test_an_xml_config_with_an_unknown_application_is_refused(
    tmp_path: Path, fresh_configuration: None
) -> None:
    for d in ("cache", "state"):
        (tmp_path / d).mkdir()
    cfg = store_xml(
        tmp_path / "a.xml",
        cache=str(tmp_path / "cache"),
        state=str(tmp_path / "state"),
        daemon=f'<xml-config application-name="nosuch">{ROOT / "configs" / "um.xml"}</xml-config>',
    )
    with pytest.raises(ConfigError, match="nosuch"):
        prepare(store_config.load(cfg))


# ------------------------------------------------------------------ check 31: SIGINT
async def _start(cwd: Path, *args: str) -> asyncio.subprocess.Process:
    return await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "daemons.umestored",
        *args,
        cwd=cwd,
        env=dict(os.environ, PYTHONUNBUFFERED="1", PYTHONPATH=str(ROOT)),
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.STDOUT,
    )


async def _read_until(proc: asyncio.subprocess.Process, pattern: str, lines: list[str]) -> None:
    assert proc.stdout is not None
    rx = re.compile(pattern)
    async with asyncio.timeout(TIMEOUT):
        while not any(rx.search(line) for line in lines):
            raw = await proc.stdout.readline()
            assert raw, f"exited before {pattern!r}: {lines}"
            lines.append(raw.decode(errors="replace").rstrip("\n"))


async def _run_once(tmp_path: Path) -> list[str]:
    proc = await _start(tmp_path, "store.xml")
    lines: list[str] = []
    try:
        await _read_until(proc, r"ready to accept registrations", lines)
        assert (tmp_path / "umestored.pid").read_text().strip() == str(proc.pid)
        proc.send_signal(signal.SIGINT)
        await _read_until(proc, r"Shutdown complete", lines)
        async with asyncio.timeout(TIMEOUT):
            rest = await proc.stdout.read() if proc.stdout else b""
            lines += rest.decode(errors="replace").splitlines()
            assert await proc.wait() == 0, lines
    finally:
        if proc.returncode is None:
            proc.kill()
            await proc.wait()
    return lines


async def test_sigint_stops_in_order_with_status_0_and_starts_again(tmp_path: Path) -> None:
    for d in ("cache", "state"):
        (tmp_path / d).mkdir()
    store_xml(
        tmp_path / "store.xml",
        kind="disk",
        daemon='<log type="console"/><pidfile>umestored.pid</pidfile>',
    )
    first = await _run_once(tmp_path)
    text = "\n".join(first)
    order = [
        text.index("listening on 127.0.0.1:"),
        text.index("Store s1 ready to accept registrations"),
        text.index("Shutdown requested"),
        text.index("Shutdown complete"),
    ]
    assert order == sorted(order), text
    assert re.search(
        r"^\w{3} \w{3} [ \d]\d \d\d:\d\d:\d\d \d{4} \[INFO\]: umestored\.s1: listening", text, re.M
    ), text
    assert not (tmp_path / "umestored.pid").exists()
    second = await _run_once(tmp_path)
    assert any("restored 0 source(s)" in line for line in second), second
    assert not any("[ERROR]" in line or "[WARNING]" in line for line in first + second)


async def test_a_port_in_use_is_one_line_and_status_1(tmp_path: Path) -> None:
    for d in ("cache", "state"):
        (tmp_path / d).mkdir()
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        store_xml(tmp_path / "store.xml", port=f'port="{port}"')
        proc = await _start(tmp_path, "store.xml")
        async with asyncio.timeout(TIMEOUT):
            out, _ = await proc.communicate()
    assert proc.returncode == 1
    text = out.decode()
    assert f"umestored: store 's1': cannot listen on 127.0.0.1:{port}: " in text, text
    assert "ready to accept registrations" not in text


async def test_detach_returns_at_once_and_the_store_runs_on(tmp_path: Path) -> None:
    """-f: the command exits 0; the child writes the pid file, logs to its file and stops on
    SIGINT like the foreground daemon (its pid file goes)."""
    for d in ("cache", "state"):
        (tmp_path / d).mkdir()
    log = tmp_path / "store.log"
    store_xml(
        tmp_path / "store.xml",
        daemon=f'<log type="file">{log}</log><pidfile>{tmp_path / "store.pid"}</pidfile>',
    )
    proc = await _start(tmp_path, "-f", "-a", "0", "store.xml")
    async with asyncio.timeout(TIMEOUT):
        out, _ = await proc.communicate()
    assert proc.returncode == 0, out
    pid_file = tmp_path / "store.pid"

    def text() -> str:
        return log.read_text() if log.exists() else ""

    try:
        await until(lambda: "ready to accept registrations" in text() and pid_file.exists())
        child = int(pid_file.read_text())
        assert child != proc.pid
        os.kill(child, signal.SIGINT)
        await until(lambda: "Shutdown complete" in text() and not pid_file.exists())
    finally:
        if pid_file.exists():
            os.kill(int(pid_file.read_text()), signal.SIGKILL)
    assert "-a: process pinned to CPU 0" in text()


def test_use_utc_stamps_lines_in_utc(fresh_root_logger: None) -> None:
    setup = configure_logging(StoreDaemon(), utc=True)
    record = logging.LogRecord("umestored.s1", NOTICE, __file__, 1, "hello", None, None)
    record.created = 0.0  # the epoch: 1970-01-01 00:00:00 UTC, whatever the local zone
    record.msecs = 0
    line = setup.handler.format(record)
    setup.close()
    assert line == "Thu Jan 01 00:00:00 1970 [NOTICE]: umestored.s1: hello"


@pytest.fixture
def fresh_root_logger() -> Iterator[None]:
    """configure_logging replaces the root logger's handlers: put pytest's back afterwards."""
    root = logging.getLogger()
    handlers, level = list(root.handlers), root.level
    yield
    for h in list(root.handlers):
        root.removeHandler(h)
    for h in handlers:
        root.addHandler(h)
    root.setLevel(level)


async def until(pred: Callable[[], object], timeout: float = TIMEOUT) -> None:
    """Poll a condition (a file another process writes), bounded by ``timeout``."""
    async with asyncio.timeout(timeout):
        while not pred():
            await asyncio.sleep(0.02)


async def test_two_stores_in_one_process(tmp_path: Path) -> None:
    """Several <store>s per process: each its own port and directories, one stop for all."""
    for d in ("c1", "s1", "c2", "s2"):
        (tmp_path / d).mkdir()
    text = store_xml(tmp_path / "store.xml", cache="c1", state="s1").read_text()
    store = text[text.index("<store ") : text.index("</store>") + len("</store>")]
    second = store.replace('name="s1"', 'name="s2"').replace('"c1"', '"c2"')
    text = text.replace(store, store + second.replace('"s1"', '"s2"'))
    (tmp_path / "store.xml").write_text(text)
    proc = await _start(tmp_path, "store.xml")
    lines: list[str] = []
    try:
        await _read_until(proc, r"Store s1 ready", lines)
        await _read_until(proc, r"Store s2 ready", lines)
        proc.send_signal(signal.SIGINT)
        await _read_until(proc, r"Shutdown complete", lines)
        async with asyncio.timeout(TIMEOUT):
            assert await proc.wait() == 0
    finally:
        if proc.returncode is None:
            proc.kill()
            await proc.wait()
    ports = re.findall(r"umestored\.(s[12]): listening on 127\.0\.0\.1:(\d+)", "\n".join(lines))
    assert [name for name, _ in ports] == ["s1", "s2"]
    assert ports[0][1] != ports[1][1]
    assert any(f"from {tmp_path / 's2'} and {tmp_path / 'c2'}" in line for line in lines), lines


def test_a_pid_file_in_a_missing_directory_is_refused(
    tmp_path: Path, fresh_configuration: None
) -> None:
    for d in ("cache", "state"):
        (tmp_path / d).mkdir()
    cfg = store_xml(
        tmp_path / "a.xml",
        cache=str(tmp_path / "cache"),
        state=str(tmp_path / "state"),
        daemon=f"<pidfile>{tmp_path / 'no' / 'x.pid'}</pidfile>",
    )
    with pytest.raises(ConfigError, match="cannot write the pid file") as info:
        prepare(store_config.load(cfg))
    assert info.value.what == "<pidfile>"


def test_a_cidr_interface_picks_the_matching_local_address(
    tmp_path: Path, fresh_configuration: None
) -> None:
    for d in ("cache", "state"):
        (tmp_path / d).mkdir()
    cfg = store_xml(
        tmp_path / "a.xml", cache=str(tmp_path / "cache"), state=str(tmp_path / "state")
    )
    text = cfg.read_text()
    cfg.write_text(text.replace('interface="127.0.0.1"', 'interface="127.0.0.0/8"'))
    assert prepare(store_config.load(cfg)).stores[0].bind_ip == "127.0.0.1"
    cfg.write_text(text.replace('interface="127.0.0.1"', 'interface="203.0.113.0/24"'))
    with pytest.raises(ConfigError, match=re.escape("no local address in 203.0.113.0/24")) as info:
        prepare(store_config.load(cfg))
    assert info.value.line == 5 and info.value.what == '<store name="s1"> interface'
    assert info.value.allowed is not None and "127.0.0.1" in info.value.allowed
