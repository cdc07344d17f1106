"""The Windows service front of a pyum daemon (``lbmrds`` and, later, the other daemons' ``*s``).

Theory of operation
-------------------
UM ships each daemon twice on Windows: the console program (``lbmrd``) and a service front
(``lbmrds``, seed 003 15.2) that (a) records the service's parameters in the registry
(``-S install|remove|config``, ``-e`` event-log level, ``-E``/``-U`` environment-variable file) and
(b) is the executable the Service Control Manager runs.  :class:`ServiceFront` is that second part
built on pywin32 (optional extra ``pyum[windows]``): a daemon subclasses it, names the service and
gives the coroutine to run; SvcStop sets the same "stopping" event SIGTERM sets on Unix.
:func:`service_command` is the first part, what every front's command line does once parsed:
check and record the parameters, install or remove the service, or, given nothing to do, hand
the process to the Service Control Manager.

This module imports without pywin32 (``HAVE_PYWIN32`` is then False and :func:`require_pywin32`
explains what to install); it is documented and type-checked here, not run: there is no Windows
machine in our CI.  Registry layout (our choice, one key per service):
``HKLM\\SYSTEM\\CurrentControlSet\\Services\\<name>\\Parameters`` with values ``ConfigFile``,
``EventLogLevel`` (NONE, INFO, WARN, ERROR; default WARN) and ``EnvVarFile``.
"""

from __future__ import annotations

import asyncio
import logging
import sys
from collections.abc import Callable, Coroutine
from typing import Any

__all__ = [
    "EVENT_LOG_LEVELS",
    "HAVE_PYWIN32",
    "ServiceFront",
    "ServiceParameters",
    "require_pywin32",
    "service_command",
    "service_main",
]

try:  # pragma: no cover - only on Windows with pywin32
    import servicemanager
    import win32event
    import win32service
    import win32serviceutil

    HAVE_PYWIN32 = True
    _Base: Any = win32serviceutil.ServiceFramework
except ImportError:
    HAVE_PYWIN32 = False
    _Base = object

log = logging.getLogger("umcore.daemon.winservice")

# The seed's -e values, lowest to highest; WARN is the default.
EVENT_LOG_LEVELS = {
    "NONE": None,
    "INFO": logging.INFO,
    "WARN": logging.WARNING,
    "ERROR": logging.ERROR,
}


def require_pywin32(prog: str) -> None:
    """Raise SystemExit(1) with one line if pywin32 is missing."""
    if not HAVE_PYWIN32:
        raise SystemExit(
            f"{prog}: the Windows service front needs pywin32: pip install 'pyum[windows]' "
            "(on Windows); on Unix run the console daemon under systemd instead"
        )


class ServiceParameters:
    """What ``-S config`` / ``-e`` / ``-E`` store in the registry for the service."""

    __slots__ = ("config_file", "env_var_file", "event_log_level")

    def __init__(
        self,
        config_file: str | None = None,
        event_log_level: str = "WARN",
        env_var_file: str | None = None,
    ) -> None:
        if event_log_level not in EVENT_LOG_LEVELS:
            raise ValueError(f"event log level must be one of {', '.join(EVENT_LOG_LEVELS)}")
        self.config_file = config_file
        self.event_log_level = event_log_level
        self.env_var_file = env_var_file

    def save(self, service_name: str) -> None:  # pragma: no cover - Windows only
        require_pywin32(service_name)
        set_option = win32serviceutil.SetServiceCustomOption
        set_option(service_name, "ConfigFile", self.config_file or "")
        set_option(service_name, "EventLogLevel", self.event_log_level)
        set_option(service_name, "EnvVarFile", self.env_var_file or "")

    @classmethod
    def load(cls, service_name: str) -> ServiceParameters:  # pragma: no cover - Windows only
        require_pywin32(service_name)
        get_option = win32serviceutil.GetServiceCustomOption
        return cls(
            get_option(service_name, "ConfigFile", "") or None,
            get_option(service_name, "EventLogLevel", "WARN") or "WARN",
            get_option(service_name, "EnvVarFile", "") or None,
        )


class ServiceFront(_Base):  # type: ignore[misc]
    """Base class of a daemon's Windows service (pywin32's ServiceFramework).

    Subclasses set ``_svc_name_``, ``_svc_display_name_`` and implement :meth:`make_main`, which
    returns the daemon's coroutine given the stored parameters and the stop event.
    """

    _svc_name_ = "pyum"
    _svc_display_name_ = "pyum daemon"

    def __init__(self, args: Any) -> None:  # pragma: no cover - Windows only
        super().__init__(args)
        self._loop: asyncio.AbstractEventLoop | None = None
        self._stop: asyncio.Event | None = None
        self._stop_handle = win32event.CreateEvent(None, 0, 0, None)

    def make_main(
        self, parameters: ServiceParameters, stopping: asyncio.Event
    ) -> Coroutine[Any, Any, int]:
        raise NotImplementedError

    def SvcStop(self) -> None:  # pywin32 names it  # pragma: no cover
        self.ReportServiceStatus(win32service.SERVICE_STOP_PENDING)
        loop, stop = self._loop, self._stop
        if loop is not None and stop is not None:
            loop.call_soon_threadsafe(stop.set)
        win32event.SetEvent(self._stop_handle)

    def SvcDoRun(self) -> None:  # pywin32 names it  # pragma: no cover
        servicemanager.LogMsg(
            servicemanager.EVENTLOG_INFORMATION_TYPE,
            servicemanager.PYS_SERVICE_STARTED,
            (self._svc_name_, ""),
        )
        parameters = ServiceParameters.load(self._svc_name_)

        async def body() -> int:
            self._loop = asyncio.get_running_loop()
            self._stop = asyncio.Event()
            return await self.make_main(parameters, self._stop)

        asyncio.run(body())


def service_command(
    front: type[ServiceFront],
    *,
    request: str | None,
    config_file: str | None,
    load_config: Callable[[str], object],
    event_log_level: str | None,
    env_var_file: str | None,
    unset_env_var_file: bool,
) -> None:  # pragma: no cover - Windows only
    """Carry out a service front's parsed command line (call :func:`require_pywin32` first).

    ``config_file`` is checked with ``load_config`` (a bad file is refused, not recorded) and,
    with ``event_log_level`` and ``env_var_file`` (``unset_env_var_file`` clears it), stored in
    the service's parameters.  ``request`` ``"install"`` installs the service, then stores them;
    ``"remove"`` removes it; ``"config"`` only stores them.  With no request and nothing to store
    the process was started by the Service Control Manager: it runs the service."""
    if config_file:
        load_config(config_file)  # refuse to record a bad file
    name = front._svc_name_
    params = ServiceParameters.load(name)
    if config_file:
        params.config_file = config_file
    if event_log_level:
        params.event_log_level = event_log_level
    if env_var_file:
        params.env_var_file = env_var_file
    if unset_env_var_file:
        params.env_var_file = None
    if request == "install":
        win32serviceutil.HandleCommandLine(front, argv=[sys.argv[0], "install"])
    elif request == "remove":
        win32serviceutil.HandleCommandLine(front, argv=[sys.argv[0], "remove"])
        return
    elif request is None and not (event_log_level or env_var_file or unset_env_var_file):
        # Started by the Service Control Manager.
        servicemanager.Initialize()
        servicemanager.PrepareToHostSingle(front)
        servicemanager.StartServiceCtrlDispatcher()
        return
    params.save(name)


def service_main(
    prog: str,
    front: type[ServiceFront],
    *,
    service: list[str] | None,
    config_file: str | None,
    load_config: Callable[[str], object],
    event_log_level: str | None,
    env_var_file: str | None,
    unset_env_var_file: bool,
) -> None:
    """A service front's ``main`` after its own checks: ``-E`` with ``-U`` is a usage error
    (exit 2); without pywin32 one line and exit 1; else ``-s REQUEST [CFG]`` (``CFG`` or the
    positional configuration file) handed to :func:`service_command`."""
    if env_var_file and unset_env_var_file:
        sys.stderr.write(f"{prog}: -E and -U cannot be combined\n")
        raise SystemExit(2)
    require_pywin32(prog)
    if not HAVE_PYWIN32:  # pragma: no cover - require_pywin32 exited
        return
    request = service[0] if service else None  # pragma: no cover - Windows only
    cfg = service[1] if service and len(service) > 1 else config_file
    service_command(  # pragma: no cover - Windows only
        front,
        request=request,
        config_file=cfg,
        load_config=load_config,
        event_log_level=event_log_level,
        env_var_file=env_var_file,
        unset_env_var_file=unset_env_var_file,
    )


def handle_command_line(
    front: type[ServiceFront], argv: list[str], save: Callable[[ServiceParameters], None]
) -> int:  # pragma: no cover - Windows only
    """Hand ``-S install|remove`` to pywin32's command-line helper."""
    require_pywin32(front._svc_name_)
    win32serviceutil.HandleCommandLine(front, argv=argv)
    return 0
