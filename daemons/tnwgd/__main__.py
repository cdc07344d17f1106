"""``tnwgd [options] configfile``: the DRO's command line (notes A11), then :func:`app.serve`.

Start-up order: parse the command line (usage errors: exit 2); ``-d`` prints the DTD; load and
validate the configuration against it (``-v`` stops there: ``<file>: valid`` and 0, or the one
line and 1); refuse configurations UM does not support (two endpoints with one domain id or in one
topic resolution domain) and ``<monitor>``/``<web-monitor>`` settings pyum cannot honour; check the ``<pidfile>`` directory; open the log -- any failure is one line
``tnwgd: <file>:<line>: <element>: <what>`` and exit 1, before anything binds.  Then detach
(``-f``) and run until SIGINT/SIGTERM, exit 0.
"""

from __future__ import annotations

import logging
import os
import sys
from pathlib import Path

from daemons.tnwgd.logsetup import configure_logging
from daemons.tnwgd.manpage import TNWGD
from umcore.config import dro as dro_config
from umcore.config import xmlfile
from umcore.daemon import lifecycle, pidfile
from umcore.daemon.cli import DaemonArgumentParser, add_metrics_argument
from umcore.errors import ConfigError

PROG = "tnwgd"

log = logging.getLogger("tnwgd")


def build_parser() -> DaemonArgumentParser:
    p = DaemonArgumentParser(PROG, TNWGD)
    p.add_argument("-d", "--dump-dtd", action="store_true")
    p.add_argument("-f", "--detach", action="store_true")
    p.add_argument("-u", "--use-utc", action="store_true")
    p.add_argument("-v", "--validate", action="store_true")
    add_metrics_argument(p)
    p.add_argument("config", nargs="?", metavar="configfile")
    return p


def main(argv: list[str] | None = None) -> None:
    args = build_parser().parse_args(argv)
    if args.dump_dtd:
        sys.stdout.write(xmlfile.schema_text(dro_config.SCHEMA))
        raise SystemExit(0)
    try:
        if args.validate:
            lifecycle.validate_and_exit(args.config, dro_config.load, "configfile")
        if args.config is None:
            raise ConfigError(
                "a configuration file is required (tnwgd [options] configfile)",
                source=lifecycle.COMMAND_LINE,
            )
        if args.detach and (os.name == "nt" or not hasattr(os, "fork")):
            raise ConfigError(
                "-f is not available on this system (no fork)",
                source=lifecycle.COMMAND_LINE,
                what="-f",
            )
        config = dro_config.load(args.config)
        base = Path(args.config).resolve().parent
        xml = config.xml_table(base)
        # imported to run only: -d and -v stay quick
        from daemons.tnwgd.app import check_supported

        check_supported(config, xml=xml, base=base)
        from daemons.tnwgd.peerportal import check_peers

        check_peers(config)  # a peer's compression or TLS files: refused now
        from daemons.tnwgd.monitor import monitor_settings
        from daemons.tnwgd.webmon import parse_web_monitor

        monitor_settings(config)  # a <monitor> module pyum does not implement: refused now
        if config.daemon.web_monitor:
            parse_web_monitor(config.daemon.web_monitor, source=config.source)
        if config.daemon.pidfile:
            pidfile.check_writable(
                config.daemon.pidfile, source=str(config.source), what="<pidfile>"
            )
    except ConfigError as exc:
        lifecycle.config_error_exit(PROG, exc)
    log_setup = lifecycle.open_log_or_exit(
        PROG,
        lambda: configure_logging(config.daemon, utc=args.use_utc),
        source=str(config.source),
        what="<log>",
    )
    if args.detach:
        lifecycle.detach(keep_output=log_setup.path is None)
    from daemons.tnwgd.app import serve

    lifecycle.run_and_exit(
        PROG,
        serve(config, log_setup=log_setup, metrics=args.metrics, base=base, xml=xml),
        listen=("0.0.0.0", 0),
        logger=log,
    )


if __name__ == "__main__":
    main()
