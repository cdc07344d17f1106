"""Pieces every wire codec uses: the slotted record base and the IPv4 conversions.

Theory of operation
-------------------
Records on the wire layer are plain slotted classes (cheap to build, unlike frozen dataclasses;
see the house rules on the data path).  :class:`Record` gives them value equality, a hash and a
readable ``repr`` derived from their slots, so each codec declares only its fields:

- ``_fields`` is computed once per class when it is defined: every slot along the class
  hierarchy, base classes first, each name once.  A family that wants another order overrides
  :meth:`Record._order_fields` (the SRS messages sort theirs by name).
- Equality holds only between records of the same class; the hash covers the class name and the
  values, so records of different classes with equal values still hash apart.
- ``repr`` is ``ClassName(field=value, ...)`` in ``_fields`` order.

Treat records as immutable once built (they are hashed by value).

IPv4 addresses are dotted-quad strings in the records and 4 raw bytes (network order) on the
wire; LBMC headers keep them as ``int``.  :func:`ip4_bytes` is the one parser: it accepts only
the canonical form (four decimal octets 0-255, ASCII digits, no leading zeros, no spaces) and
raises :class:`~umcore.errors.LocalProtocolError` for anything else, since the strings come
from our own callers (configuration, sockets), never from a peer's bytes.  No ``socket`` or
``ipaddress`` here: these run on the data path.
"""

from __future__ import annotations

import functools
from typing import Any, ClassVar

from umcore.errors import LocalProtocolError

__all__ = ["Record", "ip4_bytes", "ip4_int", "ip4_int_str", "ip4_str"]


def _all_slots(cls: type) -> tuple[str, ...]:
    """Every slot of ``cls`` and its bases, base classes first, each name once."""
    names: list[str] = []
    for klass in reversed(cls.__mro__):
        for name in klass.__dict__.get("__slots__", ()):
            if name not in names:
                names.append(name)
    return tuple(names)


class Record:
    """Base of the wire records: value equality, hash and repr from ``__slots__``."""

    __slots__: tuple[str, ...] = ()
    _fields: ClassVar[tuple[str, ...]] = ()

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        cls._fields = cls._order_fields(_all_slots(cls))

    @classmethod
    def _order_fields(cls, names: tuple[str, ...]) -> tuple[str, ...]:
        """The order of the fields in ``repr``, equality and hash (default: as declared)."""
        return names

    def _values(self) -> tuple[Any, ...]:
        return tuple(getattr(self, name) for name in self._fields)

    def __eq__(self, other: object) -> bool:
        if type(other) is not type(self):
            return NotImplemented
        return self._values() == other._values()

    def __hash__(self) -> int:
        return hash((type(self).__name__, *self._values()))

    def __repr__(self) -> str:
        args = ", ".join(f"{name}={getattr(self, name)!r}" for name in self._fields)
        return f"{type(self).__name__}({args})"


# --- IPv4 ---------------------------------------------------------------------------------------


def ip4_str(raw: bytes | bytearray | memoryview) -> str:
    """4 raw bytes (network order) -> dotted quad."""
    return f"{raw[0]}.{raw[1]}.{raw[2]}.{raw[3]}"


# Encoders see the same few addresses over and over (a context's own interface, its peers); the
# cache bounds the memory of that memo to 4096 distinct strings.
@functools.lru_cache(maxsize=4096)
def ip4_bytes(addr: str) -> bytes:
    """Dotted quad -> 4 raw bytes; only the canonical form (no leading zeros, no spaces)."""
    parts = addr.split(".") if isinstance(addr, str) else []
    if len(parts) != 4:
        raise LocalProtocolError(f"not a dotted-quad IPv4 address: {addr!r}")
    out = bytearray(4)
    for i, part in enumerate(parts):
        if not part.isdigit() or not part.isascii() or str(int(part)) != part:
            raise LocalProtocolError(f"not a dotted-quad IPv4 address: {addr!r}")
        value = int(part)
        if value > 255:
            raise LocalProtocolError(f"not a dotted-quad IPv4 address: {addr!r}")
        out[i] = value
    return bytes(out)


def ip4_int_str(addr: int) -> str:
    """An address as a 32-bit int in network order (``0x0A000001``) -> ``"10.0.0.1"``."""
    return f"{addr >> 24 & 255}.{addr >> 16 & 255}.{addr >> 8 & 255}.{addr & 255}"


def ip4_int(addr: str) -> int:
    """Dotted quad -> 32-bit int in network order; the same rules as :func:`ip4_bytes`."""
    return int.from_bytes(ip4_bytes(addr), "big")
