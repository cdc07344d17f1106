"""The consensus of the Stores' answers (``ume_consensus_sequence_number_behavior``).

Theory of operation
-------------------
A persistent source re-registering (its next sequence number) and a persistent receiver
registering (its low sequence number) each take one value out of the sequence numbers their
Stores answered, by the behaviour the option names: ``lowest``, ``highest``, or ``majority``
-- the highest value a majority of the answers reach, i.e. the lower median (of two answers,
the lower).  Sequence numbers are 32-bit; the answers lie within half the space of each other,
so they are ordered relative to the first.
"""

from __future__ import annotations

__all__ = ["BEHAVIORS", "consensus", "serial_sorted"]

_M = 0xFFFFFFFF
_HALF = 0x80000000

#: The option's values.
BEHAVIORS = ("lowest", "majority", "highest")


def serial_sorted(values: list[int]) -> list[int]:
    """``values`` in serial order (relative to the first)."""
    ref = values[0]
    return sorted(values, key=lambda v: (v - ref + _HALF) & _M)


def consensus(values: list[int], behavior: str) -> int:
    """The value the Stores' answers agree on (module docstring)."""
    ordered = serial_sorted(values)
    if behavior == "lowest":
        return ordered[0]
    if behavior == "highest":
        return ordered[-1]
    return ordered[(len(ordered) - 1) // 2]
