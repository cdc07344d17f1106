"""Issue 22, items 6-9, unit level: hostile XML refused before parsing, the element at fault
named, pid-file and exit-status conventions, a log that cannot be re-opened, interface errors
located at the flat file's line, and the HTTP runner's client-error line.  Every message is
checked word for word (file, line, what, allowed values)."""

from __future__ import annotations

import asyncio
import datetime as dt
import logging
import signal
from collections.abc import Iterator
from pathlib import Path

import pytest

from umcore.config import lbmrd as lbmrd_config
from umcore.config import srs as srs_config
from umcore.config import store as store_config
from umcore.config import xmlfile
from umcore.config.attributes import Configuration, reset_global_configuration
from umcore.daemon import lifecycle, logs, pidfile
from umcore.daemon.logroll import ROLL_RETRY_S, RollingFileHandler
from umcore.daemon.web import CLIENT_ERROR_LOG_BURST, REQUEST_HEAD_TIMEOUT, serve_app
from umcore.engine.options import Options
from umcore.errors import ConfigError

ENTITY = xmlfile.REFUSE_ENTITY
EXTERNAL = xmlfile.REFUSE_EXTERNAL_DTD
SUBSET = xmlfile.REFUSE_INTERNAL_SUBSET

# Wording is part of the contract: operators grep for it.
assert ENTITY == (
    "entity declarations are not allowed in a configuration file (nothing was read or expanded)"
)
assert EXTERNAL == (
    "an external DTD is not allowed (nothing was fetched; the daemon validates against the "
    "schema it ships)"
)
assert SUBSET == (
    "an internal DTD subset is not allowed (the daemon validates against the schema it ships)"
)

LAUGHS = (
    '<?xml version="1.0"?>\n<!DOCTYPE lbmrd [\n <!ENTITY l0 "lollollollol">\n'
    + "".join(f' <!ENTITY l{i} "{f"&l{i - 1};" * 10}">\n' for i in range(1, 10))
    + "]>\n<lbmrd>&l9;</lbmrd>\n"
)


# ------------------------------------------------------------------ item 6: hostile XML
@pytest.mark.parametrize(
    ("text", "line", "message"),
    [
        # an external entity (what the probe used against the SRS)
        (
            '<?xml version="1.0"?>\n<!DOCTYPE um-srs [\n<!ENTITY x SYSTEM "file:///etc/passwd">\n'
            ']>\n<um-srs version="1.0"><daemon><log>&x;</log></daemon></um-srs>\n',
            3,
            ENTITY,
        ),
        # billion laughs: refused at its first declaration, nothing expanded
        (LAUGHS, 3, ENTITY),
        # a parameter entity
        ("<!DOCTYPE a [<!ENTITY % pe SYSTEM 'http://127.0.0.1:1/x'> %pe;]><a/>", 1, ENTITY),
        # an external DTD, SYSTEM and PUBLIC
        (
            '<?xml version="1.0"?>\n<!DOCTYPE um-srs SYSTEM "http://127.0.0.1:1/x.dtd">\n<a/>',
            2,
            EXTERNAL,
        ),
        ('<!DOCTYPE a PUBLIC "-//x//EN" "x.dtd"><a/>', 1, EXTERNAL),
        # an internal subset without entities (ATTLIST defaults would change the document)
        ("<!DOCTYPE a [\n<!ATTLIST a port CDATA '1'>\n]><a/>", 1, SUBSET),
    ],
)
def test_hostile_doctype_is_one_located_line(text: str, line: int, message: str) -> None:
    with pytest.raises(ConfigError) as info:
        xmlfile.parse_text(text.encode(), "hostile.xml")
    assert str(info.value) == f"hostile.xml:{line}: <!DOCTYPE>: {message}"


@pytest.mark.parametrize("codec", ["utf-16", "utf-16-le", "utf-8-sig"])
def test_hostile_doctype_in_other_encodings_is_refused(codec: str) -> None:
    text = LAUGHS.replace('version="1.0"?>', f'version="1.0" encoding="{codec[:6]}"?>')
    with pytest.raises(ConfigError) as info:
        xmlfile.parse_text(text.encode(codec), "h.xml")
    assert str(info.value) == f"h.xml:3: <!DOCTYPE>: {ENTITY}"


def test_every_daemon_loader_refuses_entities(tmp_path: Path) -> None:
    hostile = tmp_path / "hostile.xml"
    hostile.write_text(LAUGHS)
    for load in (lbmrd_config.load, srs_config.load, store_config.load):
        with pytest.raises(ConfigError) as info:
            load(hostile)
        assert str(info.value) == f"{hostile}:3: <!DOCTYPE>: {ENTITY}"


def test_a_bare_doctype_and_doctype_text_after_the_root_are_not_refused() -> None:
    tree = xmlfile.parse_text(b"<!DOCTYPE lbmrd>\n<lbmrd version='1.0'/>", "ok.xml")
    assert tree.getroot().tag == "lbmrd"
    tree = xmlfile.parse_text(b"<a><!-- <!DOCTYPE x SYSTEM 'y'> --></a>", "ok.xml")
    assert tree.getroot().tag == "a"


# ------------------------------------------------------------------ item 9: element at fault
def test_the_element_named_is_the_one_at_fault_on_a_shared_line(tmp_path: Path) -> None:
    one_line = tmp_path / "one-line.xml"
    one_line.write_text(
        "<lbmrd version='1.0'><daemon><interface>lo</interface><bogus/><log>x</log></daemon>"
        "<domains/><transformations/></lbmrd>"
    )
    with pytest.raises(ConfigError) as info:
        lbmrd_config.load(one_line)
    # Before, the last element starting on the line (<log>) was named; lxml's first complaint
    # is about <daemon>'s content (<bogus> inside it).
    assert str(info.value) == (
        f"{one_line}:1: <daemon>: Element daemon content does not follow the DTD, expecting "
        "(activity | interface | port | ttl | log | resolver_unicast_receiver_socket_buffer | "
        "resolver_unicast_send_socket_buffer)*, got (interface bogus log)"
    )


def test_srs_error_names_the_element_not_the_last_on_the_line() -> None:
    text = b"<um-srs version='1.0'><daemon><log>x</log><pid-file>p</pid-file></daemon></um-srs>"
    with pytest.raises(ConfigError) as info:
        srs_config.load_text(text, "srs.xml")
    assert str(info.value) == (
        "srs.xml:1: <log>: Element 'log': The attribute 'type' is required but missing."
    )


# ------------------------------------------------------------------ item 9: pid file, exit codes
def test_pid_file_checks_name_the_file_and_the_reason(tmp_path: Path) -> None:
    missing = tmp_path / "gone" / "x.pid"
    with pytest.raises(ConfigError) as info:
        pidfile.check_writable(missing, source=str(missing), what="--pid-file")
    assert str(info.value) == (
        f"{missing}: --pid-file: cannot write the pid file: its directory "
        f"{str(missing.parent)!r} does not exist"
    )
    with pytest.raises(ConfigError) as info:
        pidfile.check_writable(tmp_path, source="srs.xml", what="<pid-file>")
    assert str(info.value) == (
        f"srs.xml: <pid-file>: cannot write the pid file {str(tmp_path)!r}: "
        f"{str(tmp_path)!r} is a directory"
    )
    pidfile.check_writable(tmp_path / "ok.pid", source="x", what="--pid-file")  # no error


def test_exit_status_2_for_the_command_line_1_for_a_file(
    capsys: pytest.CaptureFixture[str],
) -> None:
    with pytest.raises(SystemExit) as info:
        lifecycle.config_error_exit(
            "lbmrd",
            ConfigError("out of range", source="command line", what="-p", allowed="0..65535"),
        )
    assert info.value.code == lifecycle.EXIT_USAGE == 2
    assert capsys.readouterr().err == "lbmrd: command line: -p: out of range (allowed: 0..65535)\n"
    with pytest.raises(SystemExit) as info:
        lifecycle.config_error_exit(
            "SRS", ConfigError("bad", source="srs.xml", line=4, what="<port>")
        )
    assert info.value.code == lifecycle.EXIT_CONFIG == 1
    assert capsys.readouterr().err == "SRS: srs.xml:4: <port>: bad\n"


# ------------------------------------------------------------------ item 9: flat-file interface
@pytest.fixture
def configuration() -> Iterator[Configuration]:
    cfg = Configuration()
    reset_global_configuration(cfg)
    yield cfg
    reset_global_configuration(None)


def test_an_interface_error_names_file_line_and_option(
    tmp_path: Path, configuration: Configuration
) -> None:
    flat = tmp_path / "um.cfg"
    flat.write_text("# test\ncontext default_interface 10.99.99.99\n")
    configuration.config_file(flat)
    with pytest.raises(ConfigError) as info:
        Options("context").interface("default_interface")
    err = info.value
    assert (err.source, err.line, err.what) == (str(flat), 2, "default_interface")
    assert err.message == "10.99.99.99 is not an address of this host"
    assert err.allowed is not None and err.allowed.startswith("local interfaces: ")
    assert str(err).startswith(
        f"{flat}:2: default_interface: 10.99.99.99 is not an address of this host "
        "(allowed: local interfaces: "
    )


def test_an_interface_set_by_the_api_says_so(configuration: Configuration) -> None:
    with pytest.raises(ConfigError) as info:
        Options("context", {"resolver_unicast_interface": "10.99.99.98"}).interface(
            "resolver_unicast_interface"
        )
    assert (info.value.source, info.value.line) == ("API", None)
    assert info.value.what == "resolver_unicast_interface"
    assert Options("context").interface("default_interface") is None  # 0.0.0.0: none named


# ------------------------------------------------------------------ item 7: logs
def test_reopen_keeps_the_old_log_when_the_new_one_cannot_be_opened(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    folder = tmp_path / "logs"
    folder.mkdir()
    path = folder / "d.log"
    handler = logging.FileHandler(path, encoding="utf-8")
    handler.setFormatter(logging.Formatter(logs.LOG_FORMAT, logs.DATE_FORMAT))
    setup = logs.LogSetup(handler, str(path))
    logger = logging.getLogger("umcore.daemon")
    logger.addHandler(handler)
    old_propagate, logger.propagate = logger.propagate, False
    try:
        (path).rename(tmp_path / "moved.log")
        folder.rmdir()
        assert setup.reopen() is False
        logger.warning("still here")
        handler.flush()
    finally:
        logger.removeHandler(handler)
        logger.propagate = old_propagate
        handler.close()
    lines = (tmp_path / "moved.log").read_text().splitlines()
    expected = (
        f"umcore.daemon: cannot re-open the log file {path}: No such file or directory; "
        "still logging to the file already open"
    )
    assert len(lines) == 2 and lines[0].endswith(expected) and "[ERROR]" in lines[0]
    assert lines[1].endswith("umcore.daemon: still here")
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.rstrip().endswith(expected)


def test_a_roll_that_cannot_open_the_new_file_keeps_the_old_one(tmp_path: Path) -> None:
    folder = tmp_path / "logs"
    folder.mkdir()
    now = [dt.datetime(2026, 1, 1, 12, 0, 0)]
    handler = RollingFileHandler(str(folder / "s.log"), size_mb=1, clock=lambda: now[0])
    try:
        (folder / "s.log").rename(tmp_path / "kept.log")
        folder.rmdir()
        handler.roll()
        assert handler.roll_failures == 1
        handler.emit(logging.makeLogRecord({"msg": "after", "levelno": 20, "levelname": "INFO"}))
        handler.flush()
        assert (tmp_path / "kept.log").read_text().strip().endswith("after")
        # not retried on every line: only after ROLL_RETRY_S
        handler.max_bytes = 0
        handler.emit(logging.makeLogRecord({"msg": "again"}))
        assert handler.roll_failures == 1
        now[0] += dt.timedelta(seconds=ROLL_RETRY_S)
        handler.emit(logging.makeLogRecord({"msg": "retry"}))
        assert handler.roll_failures == 2
    finally:
        handler.close()


def test_a_failing_reload_hook_is_one_line_and_the_daemon_runs_on(
    caplog: pytest.LogCaptureFixture,
) -> None:
    async def body() -> None:
        loop = asyncio.get_running_loop()
        calls: list[int] = []

        def reload() -> None:
            calls.append(1)
            raise OSError(2, "No such file or directory")

        signals = lifecycle.StopSignals(loop, on_reload=reload)
        signals.install()
        try:
            signal.raise_signal(signal.SIGHUP)
            async with asyncio.timeout(5):
                while not calls:
                    await asyncio.sleep(0)
            assert not signals.stopping.is_set()
        finally:
            signals.uninstall()

    with caplog.at_level(logging.INFO, logger="umcore.daemon"):
        asyncio.run(body())
    errors = [r for r in caplog.records if r.levelno >= logging.ERROR]
    assert [r.getMessage() for r in errors] == [
        "SIGHUP: reload failed, running on: [Errno 2] No such file or directory"
    ]
    assert errors[0].exc_info is None


# ------------------------------------------------------------------ item 8: HTTP client errors
def test_oversized_headers_are_one_rate_limited_line_and_the_server_serves_on(
    caplog: pytest.LogCaptureFixture,
) -> None:
    assert 0 < REQUEST_HEAD_TIMEOUT <= 30  # documented bound, README and module constant

    async def body() -> bytes:
        from aiohttp import web

        async def ok(request: web.Request) -> web.Response:
            return web.Response(text="ok")

        app = web.Application()
        app.router.add_get("/x", ok)
        runner, (host, port) = await serve_app(app, "127.0.0.1", 0)
        try:
            for _ in range(20):
                reader, writer = await asyncio.open_connection(host, port)
                writer.write(b"GET /x HTTP/1.1\r\nHost: h\r\nX-Big: " + b"a" * 20000 + b"\r\n\r\n")
                async with asyncio.timeout(10):
                    reply = await reader.read()
                assert reply.startswith(b"HTTP/1.0 400") or reply.startswith(b"HTTP/1.1 400")
                writer.close()
            reader, writer = await asyncio.open_connection(host, port)
            writer.write(b"GET /x HTTP/1.1\r\nHost: h\r\nConnection: close\r\n\r\n")
            async with asyncio.timeout(10):
                good = await reader.read()
            writer.close()
            return good
        finally:
            await runner.cleanup()

    with caplog.at_level(logging.DEBUG):
        good = asyncio.run(body())
    assert good.startswith(b"HTTP/1.1 200") and good.endswith(b"ok")
    web_lines = [r for r in caplog.records if r.name.startswith(("umcore.daemon.web", "aiohttp"))]
    assert len(web_lines) == CLIENT_ERROR_LOG_BURST
    for record in web_lines:
        assert record.exc_info is None and record.levelno == logging.WARNING
        assert record.getMessage().startswith(
            "HTTP: refused a request from 127.0.0.1 (LineTooLong): Got more than 8190 bytes"
        )


def test_a_bad_pid_file_is_reported_before_anything_listens(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from daemons.lbmrd.__main__ import main as lbmrd_main
    from daemons.srs.__main__ import main as srs_main

    bad = tmp_path / "gone" / "d.pid"
    with pytest.raises(SystemExit) as info:
        lbmrd_main(["-i", "127.0.0.1", "-p", "0", "--pid-file", str(bad)])
    out, err = capsys.readouterr()
    assert info.value.code == 1 and out == ""
    assert err == (
        f"lbmrd: {bad}: --pid-file: cannot write the pid file: its directory "
        f"{str(bad.parent)!r} does not exist\n"
    )
    cfg = tmp_path / "srs.xml"
    cfg.write_text(
        '<um-srs version="1.0">\n<daemon><pid-file>'
        f"{bad}</pid-file></daemon>\n<srs><interface>127.0.0.1</interface><port>0</port></srs>"
        "</um-srs>\n"
    )
    with pytest.raises(SystemExit) as info:
        srs_main([str(cfg)])
    out, err = capsys.readouterr()
    assert info.value.code == 1 and out == ""
    assert err == (
        f"SRS: {cfg}: <pid-file>: cannot write the pid file {str(bad)!r}: its directory "
        f"{str(bad.parent)!r} does not exist\n"
    )
