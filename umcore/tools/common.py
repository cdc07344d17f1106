"""What the command-line tools share: configuration loading, the event loop, verifiable payloads.

Theory of operation
-------------------
UM's example applications take ``-c FILE`` (repeatable) for flat configuration files and honour
``LBM_DEFAULT_CONFIG_FILE``, ``LBM_XML_CONFIG_FILENAME`` and ``LBM_XML_CONFIG_APPNAME``.
:func:`load_attributes` does the same through :mod:`umcore.config` and returns the context,
source and receiver option sets the API takes.

*Verifiable messages* (``lbmsrc -V`` / ``lbmrcv -V``) let a receiver check every byte: a message
is an 8-byte big-endian counter, a 4-byte CRC-32 of the rest, then filler derived from the
counter.  The receiver checks the CRC and that counters follow each other.  (UM's own layout of
verifiable messages is not in our notes; this one is ours.)
"""

from __future__ import annotations

import asyncio
import struct
import zlib
from collections.abc import Coroutine, Sequence
from typing import Any

__all__ = [
    "VERIFIABLE_MIN_LEN",
    "load_attributes",
    "make_verifiable",
    "run",
    "verify",
]

_HEAD = struct.Struct("!QI")
VERIFIABLE_MIN_LEN = _HEAD.size


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
