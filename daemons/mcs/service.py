"""``mcsds``: MCS's Windows service front (UM's ``mcsds``), on pywin32 (extra ``windows``).

The command line records the service's parameters (``-s install|remove|config``, ``-e``,
``-E``, ``-U``, ``-l``, ``-p``); run by the Service Control Manager it loads the recorded
configuration file and runs the same :func:`daemons.mcs.app.serve` as ``MCS``, stopped by the
service control panel.  Not run in our CI (no Windows); elsewhere it explains itself and exits 1.
"""

from __future__ import annotations

import asyncio
from collections.abc import Coroutine
from typing import Any

from daemons.mcs.app import configure_logging, make_connector, serve
from daemons.mcs.manpage import MCSDS
from umcore.config import mcs as mcs_config
from umcore.daemon.cli import DaemonArgumentParser
from umcore.daemon.winservice import (
    EVENT_LOG_LEVELS,
    ServiceFront,
    ServiceParameters,
    service_main,
)

PROG = "mcsds"


def build_parser() -> DaemonArgumentParser:
    p = DaemonArgumentParser(PROG, MCSDS)
    p.add_argument("-l", "--service-log", metavar="FILE")
    p.add_argument("-p", "--process-log", metavar="FILE")
    p.add_argument("-s", "--service", nargs="+", metavar="REQUEST")
    p.add_argument("-e", "--event-log-level", choices=list(EVENT_LOG_LEVELS), type=str.upper)
    p.add_argument("-E", "--env_var_file", metavar="FILE")
    p.add_argument("-f", "--flatdir", action="store_true")
    p.add_argument("-U", "--noenv_var_file", action="store_true")
    p.add_argument("config", nargs="?", metavar="configfile")
    return p


class MCSService(ServiceFront):
    _svc_name_ = "MCS"
    _svc_display_name_ = "UM Monitoring Collector Service (pyum MCS)"

    def make_main(
        self, parameters: ServiceParameters, stopping: asyncio.Event
    ) -> Coroutine[Any, Any, int]:  # pragma: no cover - Windows only
        config = mcs_config.load(parameters.config_file or "mcs.xml")
        log_setup = configure_logging(config)
        return serve(config, make_connector(config), log_setup=log_setup, stopping=stopping)


def main(argv: list[str] | None = None) -> None:
    args = build_parser().parse_args(argv)
    service_main(
        PROG,
        MCSService,
        service=args.service,
        config_file=args.config,
        load_config=mcs_config.load,
        event_log_level=args.event_log_level,
        env_var_file=args.env_var_file,
        unset_env_var_file=args.noenv_var_file,
    )


if __name__ == "__main__":
    main()
