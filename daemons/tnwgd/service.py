"""``tnwgds``: the DRO's Windows service front (notes A11), on pywin32 (extra ``windows``).

The command line records the service's parameters (``-s install|remove|config``, ``-e``,
``-E``, ``-U``); ``-d`` and ``-v`` work as tnwgd's.  Run by the Service Control Manager it loads
the recorded configuration file, refuses what tnwgd refuses, and runs the same
:func:`daemons.tnwgd.app.serve` as ``tnwgd``, stopped by the service control panel.  Not run in
our CI (no Windows); elsewhere it explains itself and exits 1.
"""

from __future__ import annotations

import asyncio
import sys
from collections.abc import Coroutine
from pathlib import Path
from typing import Any

from daemons.tnwgd.manpage import TNWGDS
from umcore.config import dro as dro_config
from umcore.config import xmlfile
from umcore.daemon import lifecycle
from umcore.daemon.cli import DaemonArgumentParser
from umcore.daemon.winservice import (
    EVENT_LOG_LEVELS,
    ServiceFront,
    ServiceParameters,
    service_main,
)
from umcore.errors import ConfigError

PROG = "tnwgds"


def build_parser() -> DaemonArgumentParser:
    p = DaemonArgumentParser(PROG, TNWGDS)
    p.add_argument("-d", "--dump-dtd", action="store_true")
    p.add_argument("-v", "--validate", action="store_true")
    p.add_argument("-u", "--use-utc", action="store_true")
    p.add_argument("-s", "--service", nargs="+", metavar="REQUEST")
    p.add_argument("-e", "--event-log-level", choices=list(EVENT_LOG_LEVELS), type=str.upper)
    p.add_argument("-E", "--env_var_file", metavar="FILE")
    p.add_argument("-U", "--unset-env-var-file", action="store_true")
    p.add_argument("config", nargs="?", metavar="configfile")
    return p


class DroService(ServiceFront):
    _svc_name_ = "tnwgds"
    _svc_display_name_ = "UM Dynamic Routing Option (pyum tnwgd)"

    def make_main(
        self, parameters: ServiceParameters, stopping: asyncio.Event
    ) -> Coroutine[Any, Any, int]:  # pragma: no cover - Windows only
        from daemons.tnwgd.app import check_supported, serve
        from daemons.tnwgd.logsetup import configure_logging

        if not parameters.config_file:
            raise ConfigError("no configuration file recorded (tnwgds -s config FILE)")
        config = dro_config.load(parameters.config_file)
        base = Path(parameters.config_file).resolve().parent
        xml = config.xml_table(base)
        check_supported(config, xml=xml, base=base)
        log_setup = configure_logging(config.daemon)
        return serve(config, log_setup=log_setup, stopping=stopping, base=base, xml=xml)


def main(argv: list[str] | None = None) -> None:
    args = build_parser().parse_args(argv)
    if args.dump_dtd:
        sys.stdout.write(xmlfile.schema_text(dro_config.SCHEMA))
        raise SystemExit(0)
    if args.validate:
        try:
            lifecycle.validate_and_exit(args.config, dro_config.load, "configfile")
        except ConfigError as exc:
            lifecycle.config_error_exit(PROG, exc)
    service_main(
        PROG,
        DroService,
        service=args.service,
        config_file=args.config,
        load_config=dro_config.load,
        event_log_level=args.event_log_level,
        env_var_file=args.env_var_file,
        unset_env_var_file=args.unset_env_var_file,
    )


if __name__ == "__main__":
    main()
