"""``lbmrds``: lbmrd's Windows service front (seed 003 15.2), on pywin32 (extra ``windows``).

The command line records the service's parameters (``-S install|remove|config``, ``-e``, ``-E``,
``-U``); run by the Service Control Manager it loads the recorded configuration file and runs the
same :func:`daemons.lbmrd.app.serve` as ``lbmrd``, stopped by the service control panel.  Not run
in our CI (no Windows); on other systems it explains itself and exits 1.
"""

from __future__ import annotations

import asyncio
from collections.abc import Coroutine
from typing import Any

from daemons.lbmrd.app import serve
from daemons.lbmrd.manpage import LBMRDS
from umcore.config import lbmrd as lbmrd_config
from umcore.daemon import interfaces, logs
from umcore.daemon.cli import DaemonArgumentParser
from umcore.daemon.winservice import (
    EVENT_LOG_LEVELS,
    HAVE_PYWIN32,
    ServiceFront,
    ServiceParameters,
    require_pywin32,
    service_command,
)

PROG = "lbmrds"


def build_parser() -> DaemonArgumentParser:
    p = DaemonArgumentParser(PROG, LBMRDS)
    p.add_argument("-E", "--env-var-file", metavar="FILE")
    p.add_argument("-U", "--unset-env-var-file", action="store_true")
    p.add_argument("-S", "--service", choices=["install", "remove", "config"])
    p.add_argument("-e", "--event-log-level", choices=list(EVENT_LOG_LEVELS), type=str.upper)
    p.add_argument("config", nargs="?", metavar="config-file")
    return p


class LbmrdService(ServiceFront):
    _svc_name_ = "lbmrd"
    _svc_display_name_ = "UM resolver daemon (pyum lbmrd)"

    def make_main(
        self, parameters: ServiceParameters, stopping: asyncio.Event
    ) -> Coroutine[Any, Any, int]:  # pragma: no cover - Windows only
        config = (
            lbmrd_config.load(parameters.config_file)
            if parameters.config_file
            else lbmrd_config.LbmrdConfig()
        )
        resolved = interfaces.resolve(config.interface, source=parameters.config_file or "defaults")
        log_setup = logs.configure(config.log)
        return serve(config, resolved.address, log_setup=log_setup, stopping=stopping)


def main(argv: list[str] | None = None) -> None:
    args = build_parser().parse_args(argv)
    require_pywin32(PROG)
    if not HAVE_PYWIN32:  # pragma: no cover - require_pywin32 exited
        return
    service_command(  # pragma: no cover - Windows only
        LbmrdService,
        request=args.service,
        config_file=args.config,
        load_config=lbmrd_config.load,
        event_log_level=args.event_log_level,
        env_var_file=args.env_var_file,
        unset_env_var_file=args.unset_env_var_file,
    )


if __name__ == "__main__":
    main()
