"""Values the message-format libraries (PDM, SDM) share: UM's decimal and timestamp.

Theory of operation
-------------------
UM's PDM and SDM libraries carry two value types Python has no exact wire twin for:

- **DECIMAL**: a signed 64-bit mantissa and a signed 8-bit power-of-ten exponent, the value
  being ``mantissa * 10**exponent`` (UM's Java ``PDMDecimal(long mantissa, byte exp)``).
  :class:`UMDecimal` holds the pair exactly; :meth:`UMDecimal.to_decimal` and
  :meth:`UMDecimal.from_decimal` convert to and from :class:`decimal.Decimal` (refusing values
  the pair cannot hold).
- **TIMESTAMP**: seconds and microseconds since the Unix epoch, two 32-bit fields (UM's
  ``struct timeval`` shape).  :class:`UMTimestamp` holds the pair; ``to_datetime`` and
  ``from_datetime`` convert to aware UTC :class:`datetime.datetime` values.

Both are named tuples: cheap to build, compared by value, and they flatten straight into a
precompiled ``struct`` (see :mod:`umcore.wire.pdm`).
"""

from __future__ import annotations

import datetime as _dt
import decimal
from typing import NamedTuple

from umcore.errors import LocalProtocolError

__all__ = ["INT8_MAX", "INT8_MIN", "INT64_MAX", "INT64_MIN", "UMDecimal", "UMTimestamp"]

INT64_MIN = -(1 << 63)
INT64_MAX = (1 << 63) - 1
INT8_MIN = -128
INT8_MAX = 127
UINT32_MAX = (1 << 32) - 1
USECS_PER_SEC = 1_000_000
_EPOCH = _dt.datetime(1970, 1, 1, tzinfo=_dt.UTC)


class UMDecimal(NamedTuple):
    """``mantissa * 10**exponent``: int64 mantissa, int8 exponent (UM's DECIMAL)."""

    mantissa: int
    exponent: int

    def to_decimal(self) -> decimal.Decimal:
        """The exact :class:`decimal.Decimal` value."""
        return decimal.Decimal(self.mantissa).scaleb(self.exponent, decimal.Context(prec=40))

    @classmethod
    def from_decimal(cls, value: decimal.Decimal | int) -> UMDecimal:
        """The pair for ``value``; :class:`LocalProtocolError` when it does not fit (NaN,
        infinity, more than 19 digits, an exponent outside -128..127)."""
        value = decimal.Decimal(value)
        if not value.is_finite():
            raise LocalProtocolError(f"DECIMAL cannot hold {value}")
        sign, digits, exponent = value.as_tuple()
        assert isinstance(exponent, int)  # finite values have an int exponent
        mantissa = int("".join(map(str, digits)) or "0")
        if sign:
            mantissa = -mantissa
        # Trailing zeros may move into the exponent, and a large exponent into the mantissa,
        # without changing the value.
        while not INT64_MIN <= mantissa <= INT64_MAX and mantissa % 10 == 0:
            mantissa //= 10
            exponent += 1
        while exponent > INT8_MAX and INT64_MIN <= mantissa * 10 <= INT64_MAX:
            mantissa *= 10
            exponent -= 1
        if not (INT64_MIN <= mantissa <= INT64_MAX and INT8_MIN <= exponent <= INT8_MAX):
            raise LocalProtocolError(f"DECIMAL cannot hold {value}")
        return cls(mantissa, exponent)


class UMTimestamp(NamedTuple):
    """Seconds and microseconds since the Unix epoch (UM's TIMESTAMP)."""

    seconds: int
    microseconds: int

    def to_datetime(self) -> _dt.datetime:
        """An aware UTC datetime."""
        return _EPOCH + _dt.timedelta(seconds=self.seconds, microseconds=self.microseconds)

    @classmethod
    def from_datetime(cls, value: _dt.datetime) -> UMTimestamp:
        """The pair for an aware datetime (a naive one is taken as UTC); refuses dates before
        1970 or after 2106 (the wire's unsigned 32-bit seconds)."""
        if value.tzinfo is None:
            value = value.replace(tzinfo=_dt.UTC)
        delta = value - _EPOCH
        seconds = delta.days * 86_400 + delta.seconds
        if not 0 <= seconds <= UINT32_MAX:
            raise LocalProtocolError(f"TIMESTAMP cannot hold {value.isoformat()}")
        return cls(seconds, delta.microseconds)
