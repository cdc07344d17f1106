"""Command lines as the seed's man pages give them, with ``--help`` printing our man page.

Theory of operation
-------------------
Each daemon declares its flags exactly as its seed man page spells them (``-a/--activity`` ...)
on a :class:`DaemonArgumentParser`.  ``-h/--help`` prints the daemon's man page, written in our
words (a module-level string in the daemon package), and exits 0.  Every pyum daemon also takes
``--metrics HOST:PORT`` (our addition; off by default), added by :func:`add_metrics_argument`.
Usage errors print one line naming the program and exit 2 (argparse's convention); configuration
errors are the configuration loader's business (exit 1, see :mod:`umcore.daemon.lifecycle`).
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from typing import Any, NoReturn

__all__ = ["DaemonArgumentParser", "add_metrics_argument", "host_port", "nonnegative_int"]


class _ManPageAction(argparse.Action):
    def __init__(self, option_strings: Sequence[str], dest: str, **kwargs: Any) -> None:
        super().__init__(option_strings, dest=argparse.SUPPRESS, nargs=0, **kwargs)

    def __call__(
        self,
        parser: argparse.ArgumentParser,
        namespace: argparse.Namespace,
        values: Any,
        option_string: str | None = None,
    ) -> None:
        assert isinstance(parser, DaemonArgumentParser)
        sys.stdout.write(parser.man_page)
        if not parser.man_page.endswith("\n"):
            sys.stdout.write("\n")
        parser.exit(0)


class DaemonArgumentParser(argparse.ArgumentParser):
    """argparse with ``-h/--help`` printing ``man_page``, and one-line usage errors."""

    def __init__(self, prog: str, man_page: str, **kwargs: Any) -> None:
        super().__init__(prog=prog, add_help=False, allow_abbrev=False, **kwargs)
        self.man_page = man_page
        self.add_argument("-h", "--help", action=_ManPageAction, help="print the man page, exit")

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"{self.prog}: {message} (try {self.prog} --help)\n")


def host_port(text: str) -> tuple[str, int]:
    """``HOST:PORT`` (IPv4 or name; port 0 = ephemeral) for argparse ``type=``."""
    host, sep, port = text.rpartition(":")
    if not sep or not host or not port.isdigit() or int(port) > 65535:
        raise argparse.ArgumentTypeError(f"{text!r} is not HOST:PORT (e.g. 127.0.0.1:9101)")
    return host, int(port)


def nonnegative_int(text: str) -> int:
    """An integer >= 0 for argparse ``type=``."""
    try:
        value = int(text, 10)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not an integer") from None
    if value < 0:
        raise argparse.ArgumentTypeError(f"{value} is negative")
    return value


def positive_int(text: str) -> int:
    """An integer >= 1 for argparse ``type=``."""
    value = nonnegative_int(text)
    if value == 0:
        raise argparse.ArgumentTypeError("0 is not allowed here")
    return value


def add_metrics_argument(parser: argparse.ArgumentParser) -> None:
    """``--metrics HOST:PORT``: serve Prometheus metrics at http://HOST:PORT/metrics."""
    parser.add_argument(
        "--metrics",
        metavar="HOST:PORT",
        type=host_port,
        default=None,
        help="serve Prometheus metrics on http://HOST:PORT/metrics (pyum; off by default)",
    )
