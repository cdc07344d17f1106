"""``lbmrd [options] [config-file]``: the command line of seed 003 15.1, then :func:`app.serve`.

Start-up order: parse the command line (usage errors: exit 2); ``-d`` prints the DTD; load and
check the configuration file, apply the command line over it (CLI wins), resolve the interface,
check the ``--pid-file`` directory and open the log file — any failure is one line
``lbmrd: <file>:<line>: <element>: <what>`` and exit 1 (2 when the value at fault is the command
line's own: ``-p`` out of range, ``-i`` not an interface here, ``-v`` without a file), before
anything binds; ``-v`` stops there with 0.  Then run until SIGTERM/SIGINT.
"""

from __future__ import annotations

import logging
import sys

from daemons.lbmrd.app import serve
from daemons.lbmrd.manpage import LBMRD
from umcore.config import lbmrd as lbmrd_config
from umcore.daemon import interfaces, lifecycle, logs, pidfile
from umcore.daemon.cli import (
    DaemonArgumentParser,
    add_metrics_argument,
    host_port,
    nonnegative_int,
    positive_int,
)
from umcore.errors import ConfigError
from umcore.lbmrd.core import MAX_CLIENTS

PROG = "lbmrd"

log = logging.getLogger("lbmrd")


def build_parser() -> DaemonArgumentParser:
    p = DaemonArgumentParser(PROG, LBMRD)
    p.add_argument("-a", "--activity", metavar="IVL", type=positive_int)
    p.add_argument("-d", "--dump-dtd", action="store_true")
    p.add_argument("-i", "--interface", metavar="ADDR")
    p.add_argument("-L", "--logfile", metavar="FILE")
    p.add_argument("-p", "--port", metavar="PORT", type=nonnegative_int)
    p.add_argument("-t", "--ttl", metavar="TTL", type=positive_int)
    p.add_argument("-r", "--rcv-buf", metavar="SIZE", type=positive_int)
    p.add_argument("-s", "--snd-buf", metavar="SIZE", type=positive_int)
    p.add_argument("-v", "--validate", action="store_true")
    p.add_argument("--pid-file", metavar="FILE")
    p.add_argument("--max-clients", metavar="N", type=positive_int, default=MAX_CLIENTS)
    p.add_argument(
        "--web-monitor",
        metavar="HOST:PORT",
        type=host_port,
        default=None,
        help="serve lbmrd's web pages (clients, rates, NAT domains) on http://HOST:PORT/ "
        "(pyum; off by default)",
    )
    add_metrics_argument(p)
    p.add_argument("config", nargs="?", metavar="config-file")
    return p


def main(argv: list[str] | None = None) -> None:
    args = build_parser().parse_args(argv)
    if args.dump_dtd:
        sys.stdout.write(lbmrd_config.dtd_text())
        raise SystemExit(0)
    if args.port is not None and args.port > 65535:
        lifecycle.config_error_exit(
            PROG,
            ConfigError(
                "out of range", source=lifecycle.COMMAND_LINE, what="-p", allowed="0..65535"
            ),
        )
    try:
        if args.validate:
            lifecycle.validate_and_exit(args.config, lbmrd_config.load, "config-file")
        config = lbmrd_config.load(args.config) if args.config else lbmrd_config.LbmrdConfig()
        config = lbmrd_config.apply_command_line(
            config,
            activity_ms=args.activity,
            interface=args.interface,
            port=args.port,
            ttl_s=args.ttl,
            logfile=args.logfile,
            rcvbuf=args.rcv_buf,
            sndbuf=args.snd_buf,
        )
        from_cli = args.interface is not None or config.source is None
        resolved = interfaces.resolve(
            config.interface,
            source="command line" if from_cli else str(config.source),
            what="-i" if args.interface is not None else "<interface>",
        )
        if args.pid_file is not None:
            pidfile.check_writable(args.pid_file, source=args.pid_file, what="--pid-file")
    except ConfigError as exc:
        lifecycle.config_error_exit(PROG, exc)
    log_setup = lifecycle.open_log_or_exit(
        PROG,
        lambda: logs.configure(config.log),
        source=config.log,
        what="-L" if args.logfile else "<log>",
    )
    if resolved.defaulted:
        log.warning(
            "no interface given (-i or <interface>): like UM's lbmrd, using the %s, %s; "
            "this is NOT all interfaces and is often loopback - name an interface",
            resolved.how,
            resolved.address,
        )
    log.info("Using interface [%s] (%s)", resolved.address, resolved.how)
    lifecycle.run_and_exit(
        PROG,
        serve(
            config,
            resolved.address,
            log_setup=log_setup,
            metrics=args.metrics,
            pid_file=args.pid_file,
            web=args.web_monitor,
            max_clients=args.max_clients,
        ),
        listen=(resolved.address, config.port),
        logger=log,
    )


if __name__ == "__main__":
    main()
