"""The start-up steps every daemon's __main__ shares (umcore.daemon.lifecycle): -v, opening the
log, running the body.  The daemons' own command lines are covered end to end in
tests/integration (test_lbmrd*.py, test_srs*.py)."""

from __future__ import annotations

import logging

import pytest

from umcore.daemon import lifecycle
from umcore.errors import ConfigError


def test_validate_needs_a_file() -> None:
    with pytest.raises(ConfigError) as info:
        lifecycle.validate_and_exit(None, lambda path: None, "config-file")
    assert str(info.value) == "command line: -v needs a config-file to check"


def test_validate_prints_valid_and_exits_0(capsys: pytest.CaptureFixture[str]) -> None:
    loaded: list[str] = []
    with pytest.raises(SystemExit) as info:
        lifecycle.validate_and_exit("a.xml", loaded.append, "configfile")
    assert info.value.code == 0
    assert loaded == ["a.xml"]
    assert capsys.readouterr().out == "a.xml: valid\n"


def test_validate_lets_the_config_error_through(capsys: pytest.CaptureFixture[str]) -> None:
    def load(path: str) -> None:
        raise ConfigError("bad", source=path, line=3, what="<port>")

    with pytest.raises(ConfigError, match="bad"):
        lifecycle.validate_and_exit("b.xml", load, "configfile")
    assert capsys.readouterr().out == ""


def test_open_log_returns_the_setup() -> None:
    marker = object()
    assert lifecycle.open_log_or_exit("d", lambda: marker, source=None, what="<log>") is marker


def test_open_log_failure_is_one_line_and_exit_1(capsys: pytest.CaptureFixture[str]) -> None:
    def configure() -> None:
        raise FileNotFoundError(2, "No such file or directory")

    with pytest.raises(SystemExit) as info:
        lifecycle.open_log_or_exit("lbmrd", configure, source="/no/x.log", what="-L")
    assert info.value.code == 1
    assert capsys.readouterr().err == (
        "lbmrd: /no/x.log: -L: cannot open the log file: No such file or directory\n"
    )


@pytest.fixture
def shutdowns(monkeypatch: pytest.MonkeyPatch) -> list[bool]:
    """Record logging.shutdown() instead of closing pytest's own log handlers."""
    calls: list[bool] = []
    monkeypatch.setattr(lifecycle.logging, "shutdown", lambda: calls.append(True))
    return calls


def test_run_exits_with_the_body_status(shutdowns: list[bool]) -> None:
    async def body() -> int:
        return 3

    with pytest.raises(SystemExit) as info:
        lifecycle.run_and_exit(
            "d", body(), listen=("127.0.0.1", 1), logger=logging.getLogger("d"), use_uvloop=False
        )
    assert info.value.code == 3
    assert shutdowns == [True]


def test_run_bind_failure_is_one_line_and_exit_1(
    shutdowns: list[bool], capsys: pytest.CaptureFixture[str], caplog: pytest.LogCaptureFixture
) -> None:
    async def body() -> int:
        raise OSError(98, "Address already in use")

    with pytest.raises(SystemExit) as info:
        lifecycle.run_and_exit(
            "SRS", body(), listen=("127.0.0.1", 27000), logger=logging.getLogger("SRS")
        )
    assert info.value.code == 1
    assert (
        capsys.readouterr().err == "SRS: cannot listen on 127.0.0.1:27000: Address already in use\n"
    )
    assert [r.getMessage() for r in caplog.records if r.name == "SRS"] == [
        "cannot listen on 127.0.0.1:27000: [Errno 98] Address already in use"
    ]
    assert shutdowns == [True]
