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


# --- the Windows service front's command line, with pywin32 replaced by fakes ---------------


class _FakePywin32:
    """Stands in for win32serviceutil and servicemanager: records what the front asked."""

    def __init__(self) -> None:
        self.options: dict[tuple[str, str], str] = {}
        self.calls: list[tuple[str, object]] = []

    # win32serviceutil
    def GetServiceCustomOption(self, service: str, name: str, default: str) -> str:
        return self.options.get((service, name), default)

    def SetServiceCustomOption(self, service: str, name: str, value: str) -> None:
        self.options[(service, name)] = value

    def HandleCommandLine(self, front: type, argv: list[str]) -> None:
        self.calls.append(("HandleCommandLine", argv[1:]))

    # servicemanager
    def Initialize(self) -> None:
        self.calls.append(("Initialize", None))

    def PrepareToHostSingle(self, front: type) -> None:
        self.calls.append(("PrepareToHostSingle", front))

    def StartServiceCtrlDispatcher(self) -> None:
        self.calls.append(("StartServiceCtrlDispatcher", None))


@pytest.fixture
def pywin32(monkeypatch: pytest.MonkeyPatch) -> _FakePywin32:
    from umcore.daemon import winservice

    fake = _FakePywin32()
    monkeypatch.setattr(winservice, "HAVE_PYWIN32", True)
    monkeypatch.setattr(winservice, "win32serviceutil", fake, raising=False)
    monkeypatch.setattr(winservice, "servicemanager", fake, raising=False)
    return fake


def _command(**kwargs: object) -> list[str]:
    from umcore.daemon.winservice import ServiceFront, service_command

    class Front(ServiceFront):
        _svc_name_ = "svc"

    loaded: list[str] = []
    args: dict[str, object] = {
        "request": None,
        "config_file": None,
        "event_log_level": None,
        "env_var_file": None,
        "unset_env_var_file": False,
    }
    args.update(kwargs)
    service_command(Front, load_config=loaded.append, **args)  # type: ignore[arg-type]
    return loaded


def test_service_install_checks_and_records_the_parameters(pywin32: _FakePywin32) -> None:
    loaded = _command(request="install", config_file="c.xml", event_log_level="INFO")
    assert loaded == ["c.xml"]
    assert pywin32.calls == [("HandleCommandLine", ["install"])]
    assert pywin32.options == {
        ("svc", "ConfigFile"): "c.xml",
        ("svc", "EventLogLevel"): "INFO",
        ("svc", "EnvVarFile"): "",
    }


def test_service_config_updates_only_what_is_given(pywin32: _FakePywin32) -> None:
    pywin32.options[("svc", "ConfigFile")] = "old.xml"
    pywin32.options[("svc", "EnvVarFile")] = "env.txt"
    _command(request="config", unset_env_var_file=True)
    assert pywin32.calls == []
    assert pywin32.options[("svc", "ConfigFile")] == "old.xml"
    assert pywin32.options[("svc", "EnvVarFile")] == ""


def test_service_remove_records_nothing(pywin32: _FakePywin32) -> None:
    _command(request="remove", env_var_file="env.txt")
    assert pywin32.calls == [("HandleCommandLine", ["remove"])]
    assert pywin32.options == {}


def test_service_without_request_is_run_by_the_scm(pywin32: _FakePywin32) -> None:
    _command()
    assert [name for name, _ in pywin32.calls] == [
        "Initialize",
        "PrepareToHostSingle",
        "StartServiceCtrlDispatcher",
    ]
    assert pywin32.options == {}


def test_service_refuses_a_bad_config_file_before_recording(pywin32: _FakePywin32) -> None:
    from umcore.daemon.winservice import ServiceFront, service_command

    def load(path: str) -> None:
        raise ConfigError("bad", source=path)

    with pytest.raises(ConfigError):
        service_command(
            ServiceFront,
            request="install",
            config_file="bad.xml",
            load_config=load,
            event_log_level=None,
            env_var_file=None,
            unset_env_var_file=False,
        )
    assert pywin32.calls == [] and pywin32.options == {}


def test_run_other_os_error_is_not_called_a_bind_failure(
    shutdowns: list[bool], capsys: pytest.CaptureFixture[str]
) -> None:
    """Issue 22 item 7: an OSError that is not a bind failure is reported as what it is."""

    async def body() -> int:
        raise OSError(28, "No space left on device")

    with pytest.raises(SystemExit) as info:
        lifecycle.run_and_exit(
            "lbmrd", body(), listen=("127.0.0.1", 15380), logger=logging.getLogger("lbmrd")
        )
    assert info.value.code == 1
    assert capsys.readouterr().err == (
        "lbmrd: stopped by an error: [Errno 28] No space left on device\n"
    )
