"""Binding to the first free port of a range: one loop for every socket the engine opens.

Theory of operation
-------------------
UM gives most sockets a port range (``*_port_low..high``) and takes the first port of it that
binds; a range of ``0`` means an ephemeral port.  :func:`first_free` tries each port in order
with the caller's ``bind`` coroutine and returns what the first success returned; when every
port fails it raises :class:`~umcore.errors.UMError` naming ``what`` and the last OS error.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterable
from typing import TypeVar

from umcore.errors import UMError

__all__ = ["first_free"]

T = TypeVar("T")


async def first_free(ports: Iterable[int], bind: Callable[[int], Awaitable[T]], what: str) -> T:
    """``await bind(port)`` for each port in turn until one succeeds (see the module docstring)."""
    last: OSError | None = None
    for port in ports:
        try:
            return await bind(port)
        except OSError as exc:
            last = exc
    raise UMError(f"no free port for {what}: {last}")
