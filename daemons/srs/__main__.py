"""``SRS [options] [configfile]``: the command line of seed 003 12.1, then :func:`app.serve`.

Start-up order: parse the command line (usage errors: exit 2); ``-x`` prints the XSD; load and
validate the configuration file against it (``-v`` stops there: 0 valid, 1 not; ``-d`` prints
the effective configuration); check the ``<pid-file>`` directory; open the log — any failure
is one line ``SRS: <file>:<line>: <element>: <what>`` and exit 1 (2 for the command line's own
errors: ``-v`` without a file), before anything binds.  Then run until
SIGINT/SIGTERM, exit 0.
"""

from __future__ import annotations

import logging
import socket
import sys

from daemons.srs.app import configure_logging, serve
from daemons.srs.manpage import SRS
from umcore.config import srs as srs_config
from umcore.daemon import lifecycle, pidfile
from umcore.daemon.cli import DaemonArgumentParser, add_metrics_argument
from umcore.errors import ConfigError

PROG = "SRS"

log = logging.getLogger("SRS")


def build_parser() -> DaemonArgumentParser:
    p = DaemonArgumentParser(PROG, SRS)
    p.add_argument("-d", "--dump", action="store_true")
    p.add_argument("-D", "--Debug", metavar="PATH:MASK")
    p.add_argument("-j", "--java", action="count", default=0)
    p.add_argument("-v", "--validate", action="store_true")
    p.add_argument("-x", "--xsd", action="store_true")
    add_metrics_argument(p)
    # pyum: append the framed statistics messages to FILE instead of publishing them over UM
    p.add_argument("--monitor-file", metavar="FILE", help="(pyum) statistics to FILE")
    p.add_argument("config", nargs="?", metavar="configfile")
    return p


def main(argv: list[str] | None = None) -> None:
    args = build_parser().parse_args(argv)
    if args.xsd:
        sys.stdout.write(srs_config.xsd_text())
        raise SystemExit(0)
    try:
        if args.validate:
            lifecycle.validate_and_exit(args.config, srs_config.load, "configfile")
        config = srs_config.load(args.config) if args.config else srs_config.SRSConfig()
        if args.dump:
            sys.stdout.write(srs_config.dump(config))
            raise SystemExit(0)
        try:
            socket.gethostbyname(config.interface)
        except OSError as exc:
            raise ConfigError(
                f"cannot resolve {config.interface!r}: {exc}",
                source=str(config.source),
                what="<srs><interface>",
            ) from None
        if config.pid_file:
            pidfile.check_writable(config.pid_file, source=str(config.source), what="<pid-file>")
    except ConfigError as exc:
        lifecycle.config_error_exit(PROG, exc)
    level = logging.DEBUG if args.Debug else logging.INFO
    log_setup = lifecycle.open_log_or_exit(
        PROG, lambda: configure_logging(config, level=level), source=config.log.file, what="<log>"
    )
    lifecycle.run_and_exit(
        PROG,
        serve(
            config,
            log_setup=log_setup,
            metrics=args.metrics,
            java_info=args.java,
            monitor_file=args.monitor_file,
        ),
        listen=(config.interface, config.port),
        logger=log,
    )


if __name__ == "__main__":
    main()
