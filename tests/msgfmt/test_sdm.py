"""SDM: exact bytes of a hand-built message, the mapping API, arrays and nesting, hypothesis
round trips and fuzz (only SdmError escapes)."""

from __future__ import annotations

import datetime as dt
import decimal
import random
import struct
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.wire.helpers import fuzz_decoders
from umcore.errors import LocalProtocolError, RemoteProtocolError
from umcore.wire.msgtypes import UMDecimal, UMTimestamp
from umcore.wire.sdm import SdmEncodeError, SdmError, SdmField, SdmMessage, SdmType, infer_type

S = SdmType


def field(order: str, ftype: int, name: bytes, value: bytes) -> bytes:
    return struct.pack(order + "BBHI", ftype, 0, len(name), len(value)) + name + value


def test_exact_bytes_both_orders() -> None:
    m = SdmMessage()
    m.add("Field100", 0x42, S.INT8)
    m.add("Field101", 0x1EAD, S.INT16)
    m.add("Field102", 12345, S.INT32)
    for order, big in (("<", False), (">", True)):
        body = (
            field(order, 1, b"Field100", b"\x42")
            + field(order, 3, b"Field101", struct.pack(order + "h", 0x1EAD))
            + field(order, 5, b"Field102", struct.pack(order + "i", 12345))
        )
        head = struct.pack(order + "IBBHII", 0x53444D31, 1, 0, 0, 3, 16 + len(body))
        assert m.to_bytes(big_endian=big) == head + body
        assert SdmMessage.from_bytes(head + body) == m
    assert m.to_bytes()[:4] == b"1MDS" and m.to_bytes(big_endian=True)[:4] == b"SDM1"


def test_mapping_api_types_arrays_nesting() -> None:
    inner = SdmMessage({"a": True})
    m = SdmMessage({"px": 1.5, "sym": "IBM", "n": inner})
    assert m.type_of("px") is S.DOUBLE and m.type_of("n") is S.MESSAGE
    m["px"] = 2  # keeps DOUBLE
    assert m["px"] == 2.0 and m.type_of("px") is S.DOUBLE
    m.set("px", 3, S.INT16)  # explicit type change
    assert m.field("px") == SdmField("px", S.INT16, 3)
    with pytest.raises(SdmEncodeError, match="already exists"):
        m.add("px", 1)
    m.add("sizes", [1, 2, 3], S.UINT32_ARR)
    m["sizes"].append(4)
    m.add("when", dt.datetime(2026, 1, 1, tzinfo=dt.UTC))
    m.add("price", decimal.Decimal("1.25"))
    m.add("blobs", [b"", b"\x00"])
    m.add("subs", [SdmMessage({"a": 1}), SdmMessage({"a": 2})])
    m.add("empty", [], S.STRING_ARR)
    m["n"]["a"] = False  # a nested message may reuse names; it is a live object
    del m["sym"]
    assert "sym" not in m and len(m) == 8
    names = [f.name for f in m.fields()]
    assert names == ["px", "n", "sizes", "when", "price", "blobs", "subs", "empty"]
    back = SdmMessage.from_bytes(m.to_bytes())
    assert back == m
    assert back["when"] == UMTimestamp(1_767_225_600, 0)
    assert back["price"] == UMDecimal(125, -2) and back["price"].to_decimal() == decimal.Decimal(
        "1.25"
    )
    assert back["n"] == SdmMessage({"a": False}) and back["sizes"] == [1, 2, 3, 4]
    assert SdmMessage.from_bytes(m.to_bytes(big_endian=True)) == m


def test_values_checked_when_set() -> None:
    m = SdmMessage()
    for name, value, ftype in [
        ("a", 128, S.INT8),
        ("b", -1, S.UINT64),
        ("c", "x", S.BLOB),
        ("d", b"x", S.STRING),
        ("e", [1, "x"], S.INT32_ARR),
        ("f", 1, S.MESSAGE),
        ("g", decimal.Decimal("NaN"), S.DECIMAL),
        ("h", 2, S.BOOLEAN),
    ]:
        with pytest.raises(SdmEncodeError):
            m.add(name, value, ftype)
    for bad in (object(), [], complex(1, 1)):
        with pytest.raises(SdmEncodeError):
            infer_type(bad)
    with pytest.raises(SdmEncodeError, match="field name"):
        m.add("", 1)
    with pytest.raises(SdmEncodeError, match="field name"):
        m.add("x" * 256, 1)
    assert issubclass(SdmEncodeError, LocalProtocolError) and issubclass(
        SdmError, RemoteProtocolError
    )
    assert len(m) == 0


@pytest.mark.parametrize(
    ("wire", "what"),
    [
        (b"1MDS", "shorter than the SDM header"),
        (b"XXXX" + bytes(12), "bad magic"),
        (struct.pack("<IBBHII", 0x53444D31, 2, 0, 0, 0, 16), "version 2"),
        (struct.pack("<IBBHII", 0x53444D31, 1, 0, 0, 0, 17), "header length"),
        (struct.pack("<IBBHII", 0x53444D31, 1, 0, 0, 1, 16), "field header cut"),
        (struct.pack("<IBBHII", 0x53444D31, 1, 0, 0, 1, 25) + field("<", 13, b"a", b""), "type 13"),
        (
            struct.pack("<IBBHII", 0x53444D31, 1, 0, 0, 1, 28) + field("<", 5, b"a", b"abc"),
            "INT32 of 3",
        ),
        (
            struct.pack("<IBBHII", 0x53444D31, 1, 0, 0, 1, 25) + field("<", 14, b"\xff", b""),
            "not UTF-8",
        ),
        (
            struct.pack("<IBBHII", 0x53444D31, 1, 0, 0, 2, 34)
            + field("<", 14, b"a", b"")
            + field("<", 14, b"a", b""),
            "appears twice",
        ),
        (
            struct.pack("<IBBHII", 0x53444D31, 1, 0, 0, 1, 30)
            + field("<", 24, b"a", b"\x09\0\0\0\0"),
            "9 elements",
        ),
    ],
)
def test_bad_bytes_raise_sdm_error(wire: bytes, what: str) -> None:
    with pytest.raises(SdmError, match=what):
        SdmMessage.from_bytes(wire)


def test_nesting_is_bounded() -> None:
    m = SdmMessage({"x": 1})
    for _ in range(40):
        m = SdmMessage({"x": m})
    with pytest.raises(SdmError, match="nested deeper"):
        SdmMessage.from_bytes(m.to_bytes())


INTS = {
    S.INT8: (-(2**7), 2**7 - 1),
    S.UINT8: (0, 255),
    S.INT16: (-(2**15), 2**15 - 1),
    S.UINT16: (0, 2**16 - 1),
    S.INT32: (-(2**31), 2**31 - 1),
    S.UINT32: (0, 2**32 - 1),
    S.INT64: (-(2**63), 2**63 - 1),
    S.UINT64: (0, 2**64 - 1),
}


def base_values(base: SdmType, depth: int) -> st.SearchStrategy[Any]:
    if base in INTS:
        return st.integers(*INTS[base])
    return {
        S.BOOLEAN: st.booleans(),
        S.FLOAT: st.floats(width=32, allow_nan=False),
        S.DOUBLE: st.floats(allow_nan=False),
        S.DECIMAL: st.builds(UMDecimal, st.integers(-(2**63), 2**63 - 1), st.integers(-128, 127)),
        S.TIMESTAMP: st.builds(UMTimestamp, st.integers(0, 2**32 - 1), st.integers(0, 2**32 - 1)),
        S.STRING: st.text(max_size=8),
        S.UNICODE: st.text(max_size=8),
        S.BLOB: st.binary(max_size=8),
        S.MESSAGE: messages(depth + 1) if depth < 2 else st.just(SdmMessage()),
    }[base]


def messages(depth: int = 0) -> st.SearchStrategy[SdmMessage]:
    @st.composite
    def build(draw: st.DrawFn) -> SdmMessage:
        m = SdmMessage()
        for name in draw(st.lists(st.text(min_size=1, max_size=6), max_size=5, unique=True)):
            ftype = draw(st.sampled_from(list(SdmType)))
            one = base_values(ftype.base, depth)
            value = draw(st.lists(one, max_size=3) if ftype.is_array else one)
            m.add(name, value, ftype)
        return m

    return build()


@settings(max_examples=150, deadline=None)
@given(messages(), st.booleans())
def test_random_messages_round_trip(m: SdmMessage, big: bool) -> None:
    wire = m.to_bytes(big_endian=big)
    back = SdmMessage.from_bytes(wire)
    assert back == m
    assert back.to_bytes(big_endian=big) == wire


def test_fuzz_only_sdm_error_escapes() -> None:
    rng = random.Random(13)
    corpus = []
    for i in range(20):
        m = SdmMessage({"i": i, "s": "x" * i, "n": SdmMessage({"b": b"\0" * i})})
        m.add("a", [1.5] * (i % 3), S.DOUBLE_ARR)
        m.add("ts", [UMTimestamp(i, i)], S.TIMESTAMP_ARR)
        m.add("ss", ["a", "bc"][: i % 3], S.STRING_ARR)
        corpus.append(m.to_bytes(big_endian=i % 2 == 1))
    decoded = fuzz_decoders(
        rng, corpus, [SdmMessage.from_bytes], SdmError, rounds=4000, random_every=10, random_max=64
    )
    assert decoded > 50
