"""UM's DECIMAL and TIMESTAMP values: exact conversions, and the values they cannot hold."""

from __future__ import annotations

import datetime as dt
import decimal

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from umcore.errors import LocalProtocolError
from umcore.wire.msgtypes import UMDecimal, UMTimestamp

D = decimal.Decimal


@pytest.mark.parametrize(
    ("value", "pair"),
    [
        (D("123.45"), (12345, -2)),
        (D("-0.001"), (-1, -3)),
        (D(10**20), (10**18, 2)),  # trailing zeros fold into the exponent until it fits
        (D("1E+130"), (1000, 127)),  # a large exponent moves into the mantissa
        (7, (7, 0)),
        (D("0"), (0, 0)),
    ],
)
def test_decimal_pairs(value: D | int, pair: tuple[int, int]) -> None:
    got = UMDecimal.from_decimal(value)
    assert got == pair
    assert got.to_decimal() == D(value)


@pytest.mark.parametrize("value", [D("NaN"), D("Infinity"), D("1E-129"), D(2**64), D("1E+150")])
def test_decimal_refusals(value: D) -> None:
    with pytest.raises(LocalProtocolError, match="DECIMAL cannot hold"):
        UMDecimal.from_decimal(value)


@settings(max_examples=200, deadline=None)
@given(st.integers(-(2**63), 2**63 - 1), st.integers(-128, 127))
def test_decimal_round_trip(mantissa: int, exponent: int) -> None:
    value = UMDecimal(mantissa, exponent).to_decimal()
    assert UMDecimal.from_decimal(value).to_decimal() == value


def test_timestamps() -> None:
    when = dt.datetime(2026, 11, 27, 4, 35, 0, 123456, tzinfo=dt.UTC)
    ts = UMTimestamp.from_datetime(when)
    assert ts == (int(when.timestamp()), 123456) and ts.to_datetime() == when
    naive = UMTimestamp.from_datetime(when.replace(tzinfo=None))
    assert naive == ts  # a naive datetime is taken as UTC
    plus_two = dt.timezone(dt.timedelta(hours=2))
    assert UMTimestamp.from_datetime(when.astimezone(plus_two)) == ts
    for bad in (dt.datetime(1969, 12, 31, 23, 59, tzinfo=dt.UTC), dt.datetime(2107, 1, 1)):
        with pytest.raises(LocalProtocolError, match="TIMESTAMP cannot hold"):
            UMTimestamp.from_datetime(bad)
