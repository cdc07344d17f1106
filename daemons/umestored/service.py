"""``umestoreds``: the Store's Windows service front (persistence-store.md 5.2), on pywin32
(extra ``windows``).

The command line records the service's parameters (``-s install|remove|config``, ``-e``,
``-E``, ``-U``); ``-d`` and ``-v`` work as umestored's.  Run by the Service Control Manager it
loads the recorded configuration file and runs the same :func:`daemons.umestored.app.serve` as
``umestored``, stopped by the service control panel (the Store finishes its writes first).  Not
run in our CI (no Windows); elsewhere it explains itself and exits 1.
"""

from __future__ import annotations

import asyncio
import sys
from collections.abc import Coroutine
from typing import Any

from daemons.umestored.__main__ import parse_affinity
from daemons.umestored.logsetup import configure_logging
from daemons.umestored.manpage import UMESTOREDS
from daemons.umestored.prepare import prepare
from umcore.config import store as store_config
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

PROG = "umestoreds"


def build_parser() -> DaemonArgumentParser:
    p = DaemonArgumentParser(PROG, UMESTOREDS)
    p.add_argument("-d", "--dump-dtd", action="store_true")
    p.add_argument("-v", "--validate", action="store_true")
    p.add_argument("-u", "--use-utc", action="store_true")
    p.add_argument("-a", "--affinitize", metavar="PCPU[,RRLIST]")
    p.add_argument("-s", "--service", nargs="+", metavar="REQUEST")
    p.add_argument("-e", "--event-log-level", choices=list(EVENT_LOG_LEVELS), type=str.upper)
    p.add_argument("-E", "--env_var_file", metavar="FILE")
    p.add_argument("-U", "--unset_env_var_file", action="store_true")
    p.add_argument("config", nargs="?", metavar="CONFIG.xml")
    return p


class StoreService(ServiceFront):
    _svc_name_ = "umestoreds"
    _svc_display_name_ = "UME Store Daemon (pyum umestored)"

    def make_main(
        self, parameters: ServiceParameters, stopping: asyncio.Event
    ) -> Coroutine[Any, Any, int]:  # pragma: no cover - Windows only
        from daemons.umestored.app import serve

        if not parameters.config_file:
            raise ConfigError("no configuration file recorded (umestoreds -s config FILE)")
        prepared = prepare(store_config.load(parameters.config_file))
        log_setup = configure_logging(prepared.file.daemon)
        return serve(prepared, log_setup=log_setup, stopping=stopping)


def main(argv: list[str] | None = None) -> None:
    args = build_parser().parse_args(argv)
    if args.dump_dtd:
        sys.stdout.write(xmlfile.schema_text(store_config.SCHEMA))
        raise SystemExit(0)
    try:
        if args.validate:
            lifecycle.validate_and_exit(args.config, store_config.load, "CONFIG.xml")
        if args.affinitize:
            parse_affinity(args.affinitize)
    except ConfigError as exc:
        lifecycle.config_error_exit(PROG, exc)
    service_main(
        PROG,
        StoreService,
        service=args.service,
        config_file=args.config,
        load_config=store_config.load,
        event_log_level=args.event_log_level,
        env_var_file=args.env_var_file,
        unset_env_var_file=args.unset_env_var_file,
    )


if __name__ == "__main__":
    main()
