"""What the command-line tools share: configuration loading, the event loop, exit statuses,
verifiable payloads.

Theory of operation
-------------------
UM's example applications take ``-c FILE`` (repeatable, :func:`add_config_option`) for flat
configuration files and honour ``LBM_DEFAULT_CONFIG_FILE``, ``LBM_XML_CONFIG_FILENAME`` and
``LBM_XML_CONFIG_APPNAME``.  :func:`load_attributes` does the same through :mod:`umcore.config`
and returns the context, source and receiver option sets the API takes.

A tool's ``main`` hands its coroutine to :func:`tool_main`, which runs it (:func:`run`) and maps
what escapes to the exit status: a :class:`~umcore.errors.ConfigError` is 1, any other
:class:`~umcore.errors.UMError` 2 (1 for the request/response tools, which never told them
apart), Ctrl-C 130; errors are printed as ``PROG: text`` on stderr.  Tools that run until told
to stop wait on :func:`signal_event` (SIGINT/SIGTERM set it, so the tool still prints its
summary).

*Verifiable messages* (``lbmsrc -V`` / ``lbmrcv -V``) let a receiver check every byte: a message
is an 8-byte big-endian counter, a 4-byte CRC-32 of the rest, then filler derived from the
counter.  The receiver checks the CRC and that counters follow each other.  (UM's own layout of
verifiable messages is not in our notes; this one is ours.)  ``umesrc -V`` puts the message's
topic sequence number in the counter, so ``umercv -V`` also checks that every message, live or
recovered from a Store, is the one its sequence number names.

Command-line flags that stand for configuration lines (``lbmsrc``/``umesrc -R``, ``umesrc -S``,
``umercv --session-id``...) are applied with :func:`apply_flag` after the ``-c`` files, as UM's
examples call ``*_setopt`` after ``lbm_config``; a bad value is a
:class:`~umcore.errors.ConfigError` naming the flag.  :func:`wait_or_stop` is the tools'
interruptible sleep.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import signal
import struct
import sys
import zlib
from collections.abc import Coroutine, Sequence
from typing import Any

from umcore.errors import ConfigError, UMError

__all__ = [
    "CONFIG_HELP",
    "VERIFIABLE_MIN_LEN",
    "add_config_option",
    "apply_flag",
    "count",
    "load_attributes",
    "make_verifiable",
    "parse_rate",
    "rate_group_options",
    "run",
    "seconds",
    "signal_event",
    "tool_main",
    "verify",
    "wait_or_stop",
]

CONFIG_HELP = "read a flat UM configuration file (repeatable, applied in order)"

_HEAD = struct.Struct("!QI")
VERIFIABLE_MIN_LEN = _HEAD.size


def add_config_option(
    parser: argparse.ArgumentParser, *flags: str, help: str = CONFIG_HELP
) -> None:
    """``-c FILE`` (and any other ``flags``), repeatable, collected in ``args.config``."""
    parser.add_argument(
        "-c", *flags, dest="config", action="append", default=[], metavar="FILE", help=help
    )


def load_attributes(files: Sequence[str]) -> tuple[Any, Any, Any]:
    """Configure the process from the environment and ``files``; (context, source, receiver)
    attributes for the API (None: the process configuration applies, XML included).

    As UM's ``lbm_config``: ``LBM_DEFAULT_CONFIG_FILE`` first (read with the environment's XML
    settings on first use of the process configuration), then each ``-c`` file in order.
    Raises :class:`~umcore.errors.ConfigError` naming the file and line of a bad setting.
    """
    from umcore.config.attributes import global_configuration

    cfg = global_configuration()
    for path in files:
        cfg.config_file(path)
    return None, None, None


def apply_flag(flag: str, lines: str) -> None:
    """Apply the flat configuration ``lines`` a command-line ``flag`` stands for (after the
    ``-c`` files); a bad value raises :class:`~umcore.errors.ConfigError` naming the flag."""
    if lines:
        from umcore.config.attributes import global_configuration

        global_configuration().config_text(lines, f"command line {flag}")


def count(text: str) -> int:
    """argparse type: a count, 0 or more."""
    try:
        value = int(text, 0)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not an integer") from None
    if value < 0:
        raise argparse.ArgumentTypeError(f"{text!r} is negative (0 or more)")
    return value


def seconds(text: str) -> float:
    """argparse type: a duration, 0 or more."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
    if not value >= 0 or value == float("inf"):
        raise argparse.ArgumentTypeError(f"{text!r} is not a finite number >= 0")
    return value


async def wait_or_stop(stop: asyncio.Event, delay: float) -> bool:
    """Wait ``delay`` seconds unless ``stop`` is set first; True when it is set."""
    if delay > 0 and not stop.is_set():
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(stop.wait(), delay)
    return stop.is_set()


_SUFFIX = {"k": 1_000, "m": 1_000_000, "g": 1_000_000_000}


def _bits(text: str) -> int:
    t = text.strip().lower()
    mult = _SUFFIX.get(t[-1:], 1)
    if mult != 1:
        t = t[:-1]
    value = float(t)
    if value < 0:
        raise ValueError(text)
    return int(value * mult)


def parse_rate(text: str) -> tuple[str, int, int]:
    """``-R [UM]DATA/RETR`` (UM's lbmsrc and umesrc) -> (transport, data bits/s, retransmit
    bits/s)."""
    kind = "lbtrm"
    t = text.strip()
    if t[:1].upper() in ("U", "M"):
        kind = "lbtru" if t[0].upper() == "U" else "lbtrm"
        t = t[1:]
    data, sep, retr = t.partition("/")
    try:
        if not sep:
            raise ValueError(text)
        return kind, _bits(data), _bits(retr)
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"bad rate {text!r}: expected [UM]DATA/RETR, e.g. 1m/500k"
        ) from None


def rate_group_options(rate: tuple[str, int, int] | None, group: str | None) -> str:
    """The flat configuration lines that ``-R`` and ``-G`` stand for."""
    lines = []
    if rate is not None:
        kind, data, retr = rate
        lines += [
            f"source transport {kind}",
            f"context transport_{kind}_data_rate_limit {data}",
            f"context transport_{kind}_retransmit_rate_limit {retr}",
        ]
    if group is not None:
        addr, _, port = group.partition(":")
        lines += ["source transport lbtrm", f"source transport_lbtrm_multicast_address {addr}"]
        if port:
            lines.append(f"source transport_lbtrm_destination_port {int(port)}")
    return "".join(line + "\n" for line in lines)


def make_verifiable(counter: int, length: int) -> bytes:
    """A verifiable message of ``length`` bytes (at least :data:`VERIFIABLE_MIN_LEN`)."""
    length = max(length, VERIFIABLE_MIN_LEN)
    fill_len = length - VERIFIABLE_MIN_LEN
    seed = counter.to_bytes(8, "big")
    fill = (seed * (fill_len // 8 + 1))[:fill_len]
    return _HEAD.pack(counter, zlib.crc32(fill)) + fill


def verify(data: bytes, expected: int | None) -> tuple[int | None, str | None]:
    """Check a verifiable message: (its counter, or None; an error text, or None)."""
    if len(data) < VERIFIABLE_MIN_LEN:
        return None, f"message of {len(data)} bytes is shorter than a verifiable header"
    counter, crc = _HEAD.unpack_from(data)
    fill = data[VERIFIABLE_MIN_LEN:]
    if zlib.crc32(fill) != crc:
        return counter, f"message {counter}: CRC mismatch"
    if expected is not None and counter != expected:
        return counter, f"message {counter} where {expected} was expected"
    return counter, None


def run(main: Coroutine[Any, Any, int]) -> int:
    """Run ``main`` on uvloop when installed, else asyncio's default loop."""
    try:
        import uvloop
    except ImportError:  # pragma: no cover - uvloop is a dependency on our platforms
        return asyncio.run(main)
    result: int = uvloop.run(main)
    return result


def signal_event() -> asyncio.Event:
    """An event that SIGINT and SIGTERM set (from now on, in the running loop)."""
    event = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, event.set)
    return event


def tool_main(
    prog: str,
    main: Coroutine[Any, Any, int],
    *,
    um_error_status: int = 2,
    interrupted_status: int | None = 130,
) -> int:
    """Run a tool's ``main`` coroutine; the process exit status.

    ``main``'s own status, or: 1 for a :class:`~umcore.errors.ConfigError`,
    ``um_error_status`` for any other :class:`~umcore.errors.UMError` (both printed as
    ``PROG: error`` on stderr), ``interrupted_status`` for Ctrl-C (None: KeyboardInterrupt
    propagates).
    """
    try:
        return run(main)
    except ConfigError as exc:
        print(f"{prog}: {exc}", file=sys.stderr)
        return 1
    except UMError as exc:
        print(f"{prog}: {exc}", file=sys.stderr)
        return um_error_status
    except KeyboardInterrupt:
        if interrupted_status is None:
            raise
        return interrupted_status
