"""``tnwgd [options] configfile``: the DRO's command line (notes A11), then :func:`app.serve`.

Start-up order: parse the command line (usage errors: exit 2); ``-d`` prints the DTD; load and
validate the configuration against it (``-v`` stops there: ``<file>: valid`` and 0, or the one
line and 1); refuse configurations UM does not support (two endpoints with one domain id or in one
topic resolution domain); check the ``<pidfile>`` directory; open the log -- any failure is one line
``tnwgd: <file>:<line>: <element>: <what>`` and exit 1, before anything binds.  Then detach
(``-f``) and run until SIGINT/SIGTERM, exit 0.
"""

from __future__ import annotations

import logging
import os
import sys
from pathlib import Path

from daemons.tnwgd.logsetup import configure_logging
from umcore.config import dro as dro_config
from umcore.config import xmlfile
from umcore.daemon import lifecycle, pidfile
from umcore.daemon.cli import DaemonArgumentParser, add_metrics_argument
from umcore.errors import ConfigError

PROG = "tnwgd"

log = logging.getLogger("tnwgd")

USAGE = """\
tnwgd - the Dynamic Routing Option (DRO) daemon, joining topic resolution domains (pyum)

Usage: tnwgd [options] configfile

Each <endpoint> portal of configfile is a pair of UM contexts in one topic resolution domain
(multicast, lbmrd or SRS topic resolution, as its <lbm-config>/<lbm-attributes> say).  The DRO
learns which topics receivers want in each domain, creates proxy receivers where the sources are
and proxy sources where the receivers are, and forwards the messages between them.

Options:
  -d, --dump-dtd        print the DTD configfile is checked against, then exit
  -f, --detach          start in the background: the command returns once the configuration
                        is checked and the log is open
  -h, --help            print this text, then exit
  -u, --use-utc         log timestamps in UTC instead of local time
  -v, --validate        check configfile against the DTD, print "<file>: valid" and exit 0, or
                        the first problem with its line and exit 1
  --metrics=HOST:PORT   serve Prometheus metrics at http://HOST:PORT/metrics (pyum; off by
                        default)

Exit status: 0 after a clean stop (SIGTERM, SIGINT), 1 for a bad configuration file (or one UM
does not support: two endpoints with one <domain-id>, or two endpoints in one topic resolution
domain), a log or pid file that cannot be written, or a portal that cannot start; 2 for a bad
command line.  Portal datagram max sizes that differ are logged as a warning.

pyum implements endpoint portals; <peer> portals (DRO-to-DRO links) parse and are reported as
not available in this build.
"""


def build_parser() -> DaemonArgumentParser:
    p = DaemonArgumentParser(PROG, USAGE)
    p.add_argument("-d", "--dump-dtd", action="store_true")
    p.add_argument("-f", "--detach", action="store_true")
    p.add_argument("-u", "--use-utc", action="store_true")
    p.add_argument("-v", "--validate", action="store_true")
    add_metrics_argument(p)
    p.add_argument("config", nargs="?", metavar="configfile")
    return p


def _detach(*, keep_output: bool) -> None:
    """``-f``: fork; the parent returns 0 to the shell, the child leaves the session with
    standard input on /dev/null, and standard output and error too unless the log goes there."""
    sys.stdout.flush()
    sys.stderr.flush()
    if os.fork() > 0:
        os._exit(0)
    os.setsid()
    devnull = os.open(os.devnull, os.O_RDWR)
    for fd in (0,) if keep_output else (0, 1, 2):
        os.dup2(devnull, fd)
    os.close(devnull)


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
        _detach(keep_output=log_setup.path is None)
    from daemons.tnwgd.app import serve

    lifecycle.run_and_exit(
        PROG,
        serve(config, log_setup=log_setup, metrics=args.metrics, base=base, xml=xml),
        listen=("0.0.0.0", 0),
        logger=log,
    )


if __name__ == "__main__":
    main()
