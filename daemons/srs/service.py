"""``srsds``: the SRS's Windows service front (seed 003 12.2), on pywin32 (extra ``windows``).

The command line records the service's parameters (``-s install|remove|config``, ``-e``,
``-E``, ``-U``, ``-l``, ``-p``); run by the Service Control Manager it loads the recorded
configuration file and runs the same :func:`daemons.srs.app.serve` as ``SRS``, stopped by the
service control panel.  Not run in our CI (no Windows); elsewhere it explains itself and exits 1.
"""

from __future__ import annotations

import asyncio
from collections.abc import Coroutine
from typing import Any

from daemons.srs.app import configure_logging, serve
from daemons.srs.manpage import SRSDS
from umcore.config import srs as srs_config
from umcore.daemon.cli import DaemonArgumentParser
from umcore.daemon.winservice import (
    EVENT_LOG_LEVELS,
    ServiceFront,
    ServiceParameters,
    service_main,
)

PROG = "srsds"


def build_parser() -> DaemonArgumentParser:
    p = DaemonArgumentParser(PROG, SRSDS)
    p.add_argument("-l", "--service-log", metavar="FILE")
    p.add_argument("-p", "--process-log", metavar="FILE")
    p.add_argument("-s", "--service", nargs="+", metavar="REQUEST")
    p.add_argument("-e", "--event-log-level", choices=list(EVENT_LOG_LEVELS), type=str.upper)
    p.add_argument("-E", "--env_var_file", metavar="FILE")
    p.add_argument("-f", "--flatdir", action="store_true")
    p.add_argument("-U", "--noenv_var_file", action="store_true")
    p.add_argument("config", nargs="?", metavar="srs_cfgfile_name")
    return p


class SRSService(ServiceFront):
    _svc_name_ = "SRS"
    _svc_display_name_ = "UM Stateful Resolver Service (pyum SRS)"

    def make_main(
        self, parameters: ServiceParameters, stopping: asyncio.Event
    ) -> Coroutine[Any, Any, int]:  # pragma: no cover - Windows only
        config = (
            srs_config.load(parameters.config_file)
            if parameters.config_file
            else srs_config.SRSConfig()
        )
        log_setup = configure_logging(config)
        return serve(config, log_setup=log_setup, stopping=stopping)


def main(argv: list[str] | None = None) -> None:
    args = build_parser().parse_args(argv)
    service_main(
        PROG,
        SRSService,
        service=args.service,
        config_file=args.config,
        load_config=srs_config.load,
        event_log_level=args.event_log_level,
        env_var_file=args.env_var_file,
        unset_env_var_file=args.noenv_var_file,
    )


if __name__ == "__main__":
    main()
