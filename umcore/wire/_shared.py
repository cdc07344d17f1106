"""Pieces every wire codec uses: the slotted record base.

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
"""

from __future__ import annotations

from typing import Any, ClassVar

__all__ = ["Record"]


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
