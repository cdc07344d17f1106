"""``MCS [options] configfile``: the command line of UM's MCS man page, then :func:`app.serve`.

Start-up order: parse the command line (usage errors: exit 2); ``-x`` prints the XSD, ``-p``
the property keys, ``--init-db`` creates the database; load and validate the configuration and
its properties file (``-v`` stops there), open the connector and check the receiver's UM
configuration, open the log -- any failure is one line ``MCS: <file>:<line>: <element>:
<what>`` and exit 1, before anything starts.  Then collect until SIGINT/SIGTERM, exit 0.
"""

from __future__ import annotations

import logging
import sqlite3
import sys

from daemons.mcs.app import configure_logging, make_connector, receiver_attributes, serve
from daemons.mcs.connectors import init_db
from daemons.mcs.manpage import MCS
from umcore.config import mcs as mcs_config
from umcore.daemon import lifecycle, pidfile
from umcore.daemon.cli import DaemonArgumentParser, add_metrics_argument, host_port
from umcore.errors import ConfigError

PROG = "MCS"

log = logging.getLogger("MCS")


def build_parser() -> DaemonArgumentParser:
    p = DaemonArgumentParser(PROG, MCS)
    p.add_argument("-p", "--property-keys", action="store_true")
    p.add_argument("-v", "--validate", action="store_true")
    p.add_argument("-V", "--verbose", action="store_true")
    p.add_argument("-x", "--xsd", action="store_true")
    p.add_argument("--init-db", metavar="PATH")
    p.add_argument("--web-monitor", type=host_port, metavar="HOST:PORT")
    add_metrics_argument(p)
    p.add_argument("config", nargs="?", metavar="configfile")
    return p


def _load(path: str) -> mcs_config.McsConfig:
    config = mcs_config.load(path)
    receiver_attributes(config)  # the receiver's UM configuration file, checked
    return config


def main(argv: list[str] | None = None) -> None:
    args = build_parser().parse_args(argv)
    if args.xsd:
        sys.stdout.write(mcs_config.xsd_text())
        raise SystemExit(0)
    if args.property_keys:
        for kind, keys in mcs_config.PROPERTY_KEYS.items():
            for key, what in keys.items():
                print(f"{kind}: {key} -- {what}")
        raise SystemExit(0)
    if args.init_db:
        try:
            init_db(args.init_db)
        except (OSError, sqlite3.Error) as exc:
            lifecycle.config_error_exit(PROG, f"{args.init_db}: cannot create the database: {exc}")
        print(f"{args.init_db}: UM's MCS tables ready")
        raise SystemExit(0)
    try:
        if args.validate:
            lifecycle.validate_and_exit(args.config, _load, "configfile")
        if args.config is None:
            raise ConfigError(
                "a configfile is needed (its <connector> names the database or directory)",
                source="command line",
            )
        config = _load(args.config)
        attributes = receiver_attributes(config)
        connector = make_connector(config)
        if config.pid_file:
            pidfile.check_writable(config.pid_file, source=str(args.config), what="<pid-file>")
    except ConfigError as exc:
        lifecycle.config_error_exit(PROG, exc)
    log_setup = lifecycle.open_log_or_exit(
        PROG, lambda: configure_logging(config), source=config.log.file, what="<log>"
    )
    status = lifecycle.run(
        serve(
            config,
            connector,
            attributes=attributes,
            log_setup=log_setup,
            metrics=args.metrics,
            web_monitor=args.web_monitor,
            verbose=args.verbose,
        )
    )
    logging.shutdown()
    raise SystemExit(status)


if __name__ == "__main__":
    main()
