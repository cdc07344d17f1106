"""The duplicate window: which topic sequence numbers of one source were already forwarded.

Theory of operation
-------------------
In a mesh, or while routes change, one source's frames may reach a DRO twice, over two paths.
Each portal's ``<sqn-window size=16384 increment=2048>`` (notes A9) is a per-source window of
topic (fragment) sequence numbers: a frame whose number is already in the window is a duplicate,
dropped and counted (``*_dropped_dup``).  The window covers ``size`` consecutive numbers
``[base, base + size)``; a number above it moves it up in steps of ``increment`` (the smallest
number of steps that makes the number fit), forgetting the lowest numbers.  A number below the
window is too old to tell: it is dropped and counted apart (``dropped_old``), since forwarding
it could repeat a frame.  Sequence numbers are 32-bit and wrap: comparisons use serial-number
arithmetic (RFC 1982), so ``0`` follows ``2**32 - 1``.

The window is a ring of ``size`` bits in a ``bytearray`` (``size`` is a multiple of 8, as UM
requires); the first number seen is placed ``increment`` below the window's top, so frames a
little older than the first one, reordered on the way, are still accepted once.

Runs.  The data path checks a read's consecutive numbers at once (:meth:`SeqWindow.check_run`):
numbers above the window are new whatever the bits say (the slots they take were cleared when
the window moved up to them), so only the run's part inside the window is tested -- a handful
of byte operations, not one test per number.  When every number is new the window ends as
:meth:`SeqWindow.check` would leave it, number by number; otherwise nothing is recorded and
the caller checks them one by one.
"""

from __future__ import annotations

from enum import Enum

from umcore.errors import ConfigError

__all__ = ["SQN_MODULUS", "SeqVerdict", "SeqWindow", "check_window_config"]

# Topic sequence numbers are u32 on the wire (LBMC); arithmetic is modulo 2**32.
SQN_MODULUS = 1 << 32
_HALF = 1 << 31
_MASK = SQN_MODULUS - 1


class SeqVerdict(Enum):
    """What the window says about one frame."""

    NEW = "new"  # forward it
    DUPLICATE = "duplicate"  # seen already: drop, count dropped_dup
    TOO_OLD = "too-old"  # below the window: drop, count dropped_old


def check_window_config(size: int, increment: int) -> None:
    """Refuse what UM refuses: size and increment multiples of 8, increment dividing size and
    smaller than it (notes A9)."""
    if size <= 0 or size % 8 or increment <= 0 or increment % 8:
        raise ConfigError(
            f"sqn-window size={size} increment={increment}", allowed="positive multiples of 8"
        )
    if increment >= size or size % increment:
        raise ConfigError(
            f"sqn-window increment={increment} with size={size}",
            allowed="an increment that divides size and is smaller than it",
        )
    if size > _HALF:
        raise ConfigError(f"sqn-window size={size}", allowed=f"at most {_HALF}")


class SeqWindow:
    """One source's window; :meth:`check` classifies and records a sequence number."""

    __slots__ = ("base", "bits", "head", "increment", "size", "started")

    def __init__(self, size: int = 16384, increment: int = 2048) -> None:
        check_window_config(size, increment)
        self.size = size
        self.increment = increment
        self.bits = bytearray(size // 8)
        self.base = 0  # lowest number the window covers
        self.head = 0  # ring position of ``base``
        self.started = False

    def check(self, sqn: int) -> SeqVerdict:
        sqn &= _MASK
        if not self.started:
            self.started = True
            self.base = (sqn - (self.size - self.increment)) & _MASK
        offset = (sqn - self.base) & _MASK
        if offset >= self.size:
            if offset >= _HALF:  # serial arithmetic: below the window
                return SeqVerdict.TOO_OLD
            self._advance(offset)
            offset = (sqn - self.base) & _MASK
        pos = self.head + offset
        if pos >= self.size:
            pos -= self.size
        byte, bit = pos >> 3, 1 << (pos & 7)
        if self.bits[byte] & bit:
            return SeqVerdict.DUPLICATE
        self.bits[byte] |= bit
        return SeqVerdict.NEW

    def check_run(self, first: int, count: int) -> bool:
        """``count`` consecutive numbers from ``first`` (wrapping) at once: True when
        :meth:`check` would find every one NEW, checked in order, and the window then is what
        those checks leave; False (nothing recorded) when some would not be NEW: the caller
        checks them one by one."""
        if count <= 0:
            return True
        first &= _MASK
        size = self.size
        if not self.started:
            self.started = True
            self.base = (first - (size - self.increment)) & _MASK
        offset = (first - self.base) & _MASK
        if offset >= size:
            if offset >= _HALF:  # the run starts below the window
                return False
        else:
            # the part inside the window must be clear; the rest is new in any case
            inside = min(count, size - offset)
            if not self._clear(offset, inside):
                return False
        last = offset + count - 1
        if last >= size:
            self._advance(last)
            offset = (first - self.base) & _MASK
            if offset >= _HALF:  # the run's first numbers fell below the window
                count -= -offset & _MASK
                offset = 0
        self._mark(offset, count)
        return True

    def _segments(self, offset: int, count: int) -> tuple[tuple[int, int], ...]:
        """The ring positions of ``count`` numbers from window offset ``offset``: one or two
        (start, stop) ranges (``offset + count <= size``)."""
        pos = self.head + offset
        size = self.size
        if pos >= size:
            pos -= size
        end = pos + count
        if end <= size:
            return ((pos, end),)
        return ((pos, size), (0, end - size))

    def _clear(self, offset: int, count: int) -> bool:
        bits = self.bits
        for start, stop in self._segments(offset, count):
            first, last = start >> 3, (stop - 1) >> 3
            if first == last:
                if bits[first] & ((1 << (stop - start)) - 1) << (start & 7):
                    return False
                continue
            if bits[first] >> (start & 7):
                return False
            if bits[last] & ((1 << (stop - (last << 3))) - 1):
                return False
            if bits.count(0, first + 1, last) != last - first - 1:
                return False
        return True

    def _mark(self, offset: int, count: int) -> None:
        bits = self.bits
        for start, stop in self._segments(offset, count):
            first, last = start >> 3, (stop - 1) >> 3
            if first == last:
                bits[first] |= ((1 << (stop - start)) - 1) << (start & 7)
                continue
            bits[first] |= (0xFF << (start & 7)) & 0xFF
            bits[last] |= (1 << (stop - (last << 3))) - 1
            if last - first > 1:
                bits[first + 1 : last] = b"\xff" * (last - first - 1)

    def _advance(self, offset: int) -> None:
        over = offset - self.size + 1
        steps = -(-over // self.increment)
        shift = steps * self.increment
        if shift >= self.size:
            self.bits[:] = bytes(len(self.bits))
            # (the head moves on as it would by steps: check_run's one move is then the same)
            self.head = (self.head + shift) % self.size
        else:
            # forget ``shift`` slots from the head: both multiples of 8, so whole bytes
            first = self.head >> 3
            n = shift >> 3
            nbytes = len(self.bits)
            end = first + n
            if end <= nbytes:
                self.bits[first:end] = bytes(n)
            else:
                self.bits[first:] = bytes(nbytes - first)
                self.bits[: end - nbytes] = bytes(end - nbytes)
            self.head = (self.head + shift) % self.size
        self.base = (self.base + shift) & _MASK
