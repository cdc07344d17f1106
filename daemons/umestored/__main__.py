"""``umestored [-h] [-d] [-f] [-v] [-u] [-a PCPU[,RRLIST]] CONFIG.xml``: persistence-store.md
5.1, then :func:`app.serve`.

Start-up order: parse the command line (usage errors: exit 2); ``-d`` prints the DTD; load and
validate CONFIG.xml (``-v`` stops there: 0 valid, 1 not); check the affinity list, the Stores'
directories and interfaces and the UM option files (:func:`prepare.prepare`); open the log --
any failure is one line ``umestored: <file>:<line>: <element>: <what>`` and exit 1, before
anything binds.  Then pin the process (``-a``), detach (``-f``) and run until SIGINT/SIGTERM.
"""

from __future__ import annotations

import logging
import os
import sys

from daemons.umestored.logsetup import NOTICE, configure_logging
from daemons.umestored.manpage import UMESTORED
from daemons.umestored.prepare import prepare
from umcore.config import store as store_config
from umcore.config import xmlfile
from umcore.daemon import lifecycle
from umcore.daemon.cli import DaemonArgumentParser, add_metrics_argument
from umcore.errors import ConfigError

__all__ = ["build_parser", "main", "parse_affinity"]

PROG = "umestored"

# The interpreter's thread switch interval while the Store runs (CPython's default is 5 ms).  A
# disk repository's stability ACKs wait for the disk writer thread (umcore.aio.storeio), which
# needs the GIL to run each write job and the event loop keeps it through a burst of frames:
# with 2 ms bursts the writer started 2.0-2.1 ms after its job at 5 ms (p50) and 0.6-0.7 ms at
# 0.5 ms.  The writer holds the GIL only briefly, so forced switches stay rare.
SWITCH_INTERVAL_S = 0.0005

log = logging.getLogger("umestored")


def build_parser() -> DaemonArgumentParser:
    p = DaemonArgumentParser(PROG, UMESTORED)
    p.add_argument("-d", "--dump-dtd", action="store_true")
    p.add_argument("-f", "--detach", action="store_true")
    p.add_argument("-v", "--validate", action="store_true")
    p.add_argument("-u", "--use-utc", action="store_true")
    p.add_argument("-a", "--affinitize", metavar="PCPU[,RRLIST]")
    add_metrics_argument(p)
    p.add_argument(
        "--web-monitor-get-reset",
        action="store_true",
        help="the web monitor's Reset Rate Stats also by GET (UM's link); default: POST only",
    )
    p.add_argument("config", nargs="?", metavar="CONFIG.xml")
    return p


def parse_affinity(text: str) -> list[int]:
    """``-a PCPU[,RRLIST]``: CPU numbers, each an existing CPU of this machine."""
    cpus: list[int] = []
    available = (
        sorted(os.sched_getaffinity(0))
        if hasattr(os, "sched_getaffinity")
        else list(range(os.cpu_count() or 1))
    )
    allowed = f"CPU numbers of this machine ({', '.join(map(str, available))}), comma-separated"
    for part in text.split(","):
        part = part.strip()
        if not part.isdigit():
            raise ConfigError(
                f"{part!r} is not a CPU number", source="command line", what="-a", allowed=allowed
            )
        cpu = int(part)
        if cpu not in available:
            raise ConfigError(
                f"CPU {cpu} is not available to this process",
                source="command line",
                what="-a",
                allowed=allowed,
            )
        cpus.append(cpu)
    return cpus


def _pin(cpus: list[int]) -> None:
    """The first CPU for the whole process; UM's per-thread list has no threads to pin here."""
    if not hasattr(os, "sched_setaffinity"):
        log.log(NOTICE, "-a: CPU affinity is not available on this system; not applied")
        return
    os.sched_setaffinity(0, {cpus[0]})
    rest = f"; {','.join(map(str, cpus[1:]))} not applied (one asyncio thread)" if cpus[1:] else ""
    log.log(NOTICE, "-a: process pinned to CPU %d%s", cpus[0], rest)


def main(argv: list[str] | None = None) -> None:
    args = build_parser().parse_args(argv)
    if args.dump_dtd:
        sys.stdout.write(xmlfile.schema_text(store_config.SCHEMA))
        raise SystemExit(0)
    try:
        if args.validate:
            lifecycle.validate_and_exit(args.config, store_config.load, "CONFIG.xml")
        if args.config is None:
            raise ConfigError(
                "a configuration file is required (umestored [options] CONFIG.xml)",
                source="command line",
            )
        cpus = parse_affinity(args.affinitize) if args.affinitize else []
        if args.detach and (os.name == "nt" or not hasattr(os, "fork")):
            raise ConfigError(
                "-f is not available on this system (no fork)", source="command line", what="-f"
            )
        prepared = prepare(store_config.load(args.config))
        if prepared.file.daemon.web_monitor:  # checked before anything starts
            from daemons.umestored.webmon import parse_web_monitor

            parse_web_monitor(prepared.file.daemon.web_monitor, source=prepared.file.source)
    except ConfigError as exc:
        lifecycle.config_error_exit(PROG, exc)
    daemon = prepared.file.daemon
    log_setup = lifecycle.open_log_or_exit(
        PROG,
        lambda: configure_logging(daemon, utc=args.use_utc),
        source=prepared.file.source,
        what="<log>",
    )
    if cpus:
        _pin(cpus)
    if args.detach:
        lifecycle.detach(keep_output=log_setup.path is None)
    # The wiring (engine, store cores, writer) is imported only to run: -d and -v stay quick.
    from daemons.umestored.app import serve

    sys.setswitchinterval(SWITCH_INTERVAL_S)
    first = prepared.stores[0] if prepared.stores else None
    lifecycle.run_and_exit(
        PROG,
        serve(
            prepared,
            log_setup=log_setup,
            metrics=args.metrics,
            web_reset_by_get=args.web_monitor_get_reset,
            own_process=True,
        ),
        listen=(first.bind_ip, first.instance.port) if first else ("0.0.0.0", 0),
        logger=log,
    )


if __name__ == "__main__":
    main()
