"""PDM: exact bytes of hand-built messages, the definition cache and versions, the API, errors.

The expected bytes are written out field by field from the published layout (the PDM notes in
umcore.wire.pdm's docstring), not produced by the encoder, so a layout change fails here.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import decimal
import struct
from typing import Annotated

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from umcore.errors import LocalProtocolError, RemoteProtocolError
from umcore.wire import pdm
from umcore.wire.msgtypes import UMDecimal, UMTimestamp
from umcore.wire.pdm import (
    UNSET,
    FieldType,
    PdmDefinition,
    PdmDefinitionCache,
    PdmDefinitionError,
    PdmEncodeError,
    PdmError,
    PdmField,
    PdmMessage,
)

T = FieldType


def seed_definition(version: tuple[int, int] = (1, 0)) -> PdmDefinition:
    """Seed 003 10.14.2's example: id 1001, int names 100/101/102, BOOLEAN/INT32/FLOAT."""
    d = PdmDefinition(1001, version)
    d.add_field(100, T.BOOLEAN)
    d.add_field(101, T.INT32)
    d.add_field(102, T.FLOAT)
    return d.finalize()


def seed_message(
    d: PdmDefinition, *, include_definition: bool = False, big_endian: bool = False
) -> PdmMessage:
    m = PdmMessage(d, include_definition=include_definition, big_endian=big_endian)
    m[100] = True
    m[101] = 7
    m[102] = 3.14
    return m


# Header: magic, ver 1 / type 1, next header, def major, def minor, def id, total length.
def header(order: str, next_hdr: int, major: int, minor: int, did: int, total: int) -> bytes:
    return struct.pack(order + "IBBBBII", 0xA71CCAFE, 0x11, next_hdr, major, minor, did, total)


def segment(order: str, next_hdr: int, body: bytes) -> bytes:
    return struct.pack(order + "BBHI", next_hdr, 0, 0, len(body)) + body


SEED_FIXED_LE = b"\x01" + (7).to_bytes(4, "little") + struct.pack("<f", 3.14)


def test_seed_example_exact_bytes_little_endian() -> None:
    expected = (
        header("<", 1, 1, 0, 1001, 16 + 8 + 8 + 9)
        + segment("<", 0, b"")  # empty offset table, data next
        + segment("<", 0xFF, SEED_FIXED_LE)  # data: the three fixed-required fields, end
    )
    assert expected[:4] == b"\xfe\xca\x1c\xa7"
    wire = seed_message(seed_definition()).to_bytes()
    assert wire == expected
    back = PdmMessage.from_bytes(wire, seed_definition())
    assert back[100] is True and back[101] == 7 and back[102] == pytest.approx(3.14, rel=1e-6)


def test_seed_example_exact_bytes_big_endian() -> None:
    fixed = b"\x01" + (7).to_bytes(4, "big") + struct.pack(">f", 3.14)
    expected = header(">", 1, 1, 0, 1001, 41) + segment(">", 0, b"") + segment(">", 0xFF, fixed)
    assert expected[:4] == b"\xa7\x1c\xca\xfe"
    d = seed_definition()
    wire = seed_message(d, big_endian=True).to_bytes()
    assert wire == expected
    assert (
        PdmMessage.from_bytes(wire, d).values
        == PdmMessage.from_bytes(seed_message(d).to_bytes(), d).values
    )


def int_entry(
    fid: int, length: int, fstr: int, narr: int, req: int, fixed: int, name: int, ftype: int
) -> bytes:
    return struct.pack("<IIIIBBiiH", fid, length, fstr, narr, req, fixed, name, 0, ftype)


def test_included_definition_int_names_exact_bytes() -> None:
    entries = (
        int_entry(0, 1, 0, 0, 1, 1, 100, 0)
        + int_entry(1, 4, 0, 0, 1, 1, 101, 5)
        + int_entry(2, 4, 0, 0, 1, 1, 102, 9)
    )
    assert len(entries) == 3 * 28
    defn = struct.pack("<iiBBBBII", 1001, 3, 1, 1, 1, 0, 9, len(entries)) + entries
    body = segment("<", 1, defn) + segment("<", 0, b"") + segment("<", 0xFF, SEED_FIXED_LE)
    expected = header("<", 2, 1, 0, 1001, 16 + len(body)) + body
    wire = seed_message(seed_definition(), include_definition=True).to_bytes()
    assert wire == expected
    # A receiver with no definition at all reads it from the message.
    back = PdmMessage.from_bytes(wire)
    assert back.definition is not None and back.definition.same_layout(seed_definition())
    assert [v for _f, v in back][:2] == [True, 7]


def test_string_names_optional_and_variable_fields_exact_bytes() -> None:
    d = PdmDefinition(7, (2, 3), int_names=False)
    d.add_field("px", T.INT16)
    d.add_field("note", T.STRING, required=False)
    d.add_field("flag", T.UINT8, required=False)
    d.add_field("sym", T.FIX_STRING, fixed_str_len=4)
    d.finalize()
    m = PdmMessage(d, include_definition=True)
    m["px"] = -2
    m["note"] = "hi"
    m["sym"] = "AB"

    # Definition entries: u32 entry length, 26 bytes of field info, NUL-terminated name, type.
    def entry(
        fid: int, length: int, fstr: int, req: int, fixed: int, name: bytes, ftype: int
    ) -> bytes:
        body = struct.pack("<IIIIBBii", fid, length, fstr, 0, req, fixed, 0, len(name) + 1)
        body += name + b"\0" + struct.pack("<H", ftype)
        return struct.pack("<I", len(body)) + body

    entries = (
        entry(0, 2, 0, 1, 1, b"px", 3)
        + entry(1, 0, 0, 0, 0, b"note", 14)
        + entry(2, 1, 0, 0, 1, b"flag", 2)
        + entry(3, 5, 4, 1, 1, b"sym", 13)
    )
    defn = struct.pack("<iiBBBBII", 7, 4, 0, 1, 2, 3, 7, len(entries)) + entries
    fixed = struct.pack("<h", -2) + b"AB\0\0\0"  # px, then sym: 4 + 1 bytes NUL-padded
    data = fixed + struct.pack("<I", 2) + b"hi"  # note at offset 7; flag unset: absent
    table = struct.pack("<II", 1, 7)
    body = segment("<", 1, defn) + segment("<", 0, table) + segment("<", 0xFF, data)
    expected = header("<", 2, 2, 3, 7, 16 + len(body)) + body
    assert m.to_bytes() == expected
    back = PdmMessage.from_bytes(expected)
    assert back.as_dict() == {"px": -2, "note": "hi", "sym": "AB"}
    assert not back.is_set("flag")
    with pytest.raises(KeyError):
        back["flag"]


def test_all_types_round_trip_both_orders_with_and_without_definition() -> None:
    inner = seed_definition()
    d = PdmDefinition(2002, (1, 1))
    values: dict[int, object] = {}
    spec = [
        (T.BOOLEAN, {}, False),
        (T.INT8, {}, -128),
        (T.UINT8, {}, 255),
        (T.INT16, {}, -32768),
        (T.UINT16, {}, 65535),
        (T.INT32, {}, -(2**31)),
        (T.UINT32, {}, 2**32 - 1),
        (T.INT64, {}, -(2**63)),
        (T.UINT64, {}, 2**64 - 1),
        (T.FLOAT, {}, 0.5),
        (T.DOUBLE, {}, -1e300),
        (T.DECIMAL, {}, UMDecimal(-12345, -2)),
        (T.TIMESTAMP, {}, UMTimestamp(1_700_000_000, 999_999)),
        (T.FIX_STRING, {"fixed_str_len": 3}, "abc"),
        (T.STRING, {}, ""),
        (T.FIX_UNICODE, {"fixed_str_len": 4}, "é€"[:1]),
        (T.UNICODE, {}, "日本"),
        (T.BLOB, {}, b"\0\xff"),
        (T.MESSAGE, {}, seed_message(inner)),
        (T.INT32_ARR, {"num_arr_elem": 2}, [1, -1]),
        (T.INT32_ARR, {}, [1, 2, 3]),
        (T.DOUBLE_ARR, {}, []),
        (T.DECIMAL_ARR, {"num_arr_elem": 1}, [UMDecimal(1, 127)]),
        (T.TIMESTAMP_ARR, {}, [UMTimestamp(1, 2), UMTimestamp(3, 4)]),
        (T.FIX_STRING_ARR, {"fixed_str_len": 2, "num_arr_elem": 2}, ["a", "bc"]),
        (T.FIX_UNICODE_ARR, {"fixed_str_len": 2}, ["é"]),
        (T.STRING_ARR, {}, ["x", "", "yz"]),
        (T.UNICODE_ARR, {"num_arr_elem": 2}, ["Ω", "日"]),
        (T.BLOB_ARR, {}, [b"", b"1"]),
        (T.MESSAGE_ARR, {}, [seed_message(inner), seed_message(inner)]),
    ]
    for i, (ftype, kw, value) in enumerate(spec):
        d.add_field(i, ftype, required=i % 2 == 0, **kw)
        values[i] = value
    d.finalize()
    cache = PdmDefinitionCache()
    cache.put(inner)
    for big in (False, True):
        for include in (False, True):
            m = PdmMessage(d, include_definition=include, big_endian=big)
            for k, v in values.items():
                m[k] = v
            wire = m.to_bytes()
            back = PdmMessage.from_bytes(wire, None if include else d, cache=cache)
            assert back.definition is not None and back.definition.same_layout(d)
            for k, v in values.items():
                if isinstance(v, PdmMessage):
                    assert back[k].values[:2] == [True, 7]
                elif k == 9:
                    assert back[k] == pytest.approx(0.5)
                elif isinstance(v, list) and v and isinstance(v[0], PdmMessage):
                    assert [x.values[:2] for x in back[k]] == [[True, 7]] * 2
                else:
                    assert back[k] == v, (k, back[k], v)


def test_definition_cache_and_version_mismatch() -> None:
    v10, v11 = seed_definition((1, 0)), seed_definition((1, 1))
    wire = seed_message(v11).to_bytes()
    # The receiver holds 1.0, the message is 1.1 and does not carry its definition.
    with pytest.raises(PdmDefinitionError, match=r"version 1\.1, receiver holds 1\.0") as err:
        PdmMessage.from_bytes(wire, v10)
    assert isinstance(err.value, RemoteProtocolError) and err.value.offset == 6
    # Nobody knows 1001/1.1: neither a definition nor the cache.
    with pytest.raises(PdmDefinitionError, match="unknown"):
        PdmMessage.from_bytes(wire)
    cache = PdmDefinitionCache()
    cache.put(v10)
    with pytest.raises(PdmDefinitionError, match="unknown"):
        PdmMessage.from_bytes(wire, cache=cache)
    cache.put(v11)
    assert len(cache) == 2 and cache.get(1001, 1, 1) is v11
    assert PdmMessage.from_bytes(wire, cache=cache).definition is v11
    # The cache is looked into only when the message asks for it (UM's setTryToLoadDefFromCache).
    reader = PdmMessage(cache=cache)
    with pytest.raises(PdmDefinitionError):
        reader.parse(wire)
    reader.try_cache = True
    reader.parse(wire)
    assert reader[101] == 7
    cache.remove(1001, 1, 1)
    assert cache.get(1001, 1, 1) is None
    # A carried definition of another version than the receiver's: refused too.
    carried = seed_message(v11, include_definition=True).to_bytes()
    with pytest.raises(PdmDefinitionError):
        PdmMessage.from_bytes(carried, v10)
    # A receiver definition with another id lets the carried one be used (UM).
    other = PdmDefinition(5).finalize()
    assert PdmMessage.from_bytes(carried, other).definition is not other


def test_message_reuse_iterator_and_field_lookup() -> None:
    d = PdmDefinition(3, int_names=False)
    a = d.add_field("a", T.INT32)
    b = d.add_field("b", T.INT8, required=False)
    d.finalize()
    with pytest.raises(PdmEncodeError, match="finalized"):
        d.add_field("c", T.INT8)
    assert d.field("a") is a and "b" in d and "z" not in d
    m = PdmMessage(d)
    m[a] = 1
    first = m.to_bytes()
    m[b] = -1
    second = m.to_bytes()
    reader = PdmMessage(d)
    reader.parse(second)
    assert list(reader) == [(a, 1), (b, -1)]
    reader.parse(first)  # reused: the optional field is unset again
    assert list(reader) == [(a, 1), (b, UNSET)]
    del m[b]
    assert m.to_bytes() == first
    m.clear()
    with pytest.raises(PdmEncodeError, match="required field 'a'"):
        m.to_bytes()


def test_encode_errors_are_local() -> None:
    d = PdmDefinition(4)
    fs = d.add_field(1, T.FIX_STRING, fixed_str_len=3)
    i8 = d.add_field(2, T.INT8)
    arr = d.add_field(3, T.INT16_ARR, num_arr_elem=2)
    d.finalize()
    m = PdmMessage(d)
    m[fs], m[i8], m[arr] = "abcd", 1, [1, 2]
    with pytest.raises(PdmEncodeError, match="does not fit"):
        m.to_bytes()
    m[fs], m[i8] = "abc", 128
    with pytest.raises(PdmEncodeError):
        m.to_bytes()
    m[i8], m[arr] = 1, [1]
    with pytest.raises(PdmEncodeError, match="1 elements"):
        m.to_bytes()
    assert issubclass(PdmEncodeError, LocalProtocolError)
    for bad in (
        lambda: PdmDefinition(-1),
        lambda: PdmDefinition(1, (256, 0)),
        lambda: PdmDefinition(1).add_field("x", T.INT8),
        lambda: PdmDefinition(1, int_names=False).add_field(1, T.INT8),
        lambda: PdmDefinition(1).add_field(1, T.FIX_STRING),
        lambda: PdmDefinition(1).add_field(1, T.INT8, num_arr_elem=2),
    ):
        with pytest.raises(PdmEncodeError):
            bad()


@pytest.mark.parametrize(
    ("mangle", "what"),
    [
        (lambda w: w[:15], "shorter than the PDM header"),
        (lambda w: b"\0\0\0\0" + w[4:], "bad magic"),
        (lambda w: w[:4] + b"\x21" + w[5:], "PDM version 2"),
        (lambda w: w + b"\0", "header length"),
        (lambda w: w[:16] + b"\x00\x00\x00\x00\xff\x00\x00\x00" + w[24:], "past the message"),
        (lambda w: w[:16] + b"\xff" + w[17:], "after the last segment"),
        (lambda w: w[:5] + b"\xff" + w[6:12] + struct.pack("<I", 16), "no data segment"),
        (lambda w: w[:5] + b"\x07" + w[6:], "segment type 7 unknown"),
    ],
)
def test_bad_bytes_raise_pdm_error(mangle: object, what: str) -> None:
    wire = seed_message(seed_definition()).to_bytes()
    with pytest.raises(PdmError, match=what):
        PdmMessage.from_bytes(mangle(wire), seed_definition())  # type: ignore[operator]


def test_ignorable_unknown_segment_is_skipped() -> None:
    d = seed_definition()
    wire = seed_message(d).to_bytes()
    extra = struct.pack("<BBHI", 1, 0x80, 0, 3) + b"xyz"  # type 9, flags 0x80, then the table
    spliced = (
        wire[:5] + b"\x09" + wire[6:12] + struct.pack("<I", len(wire) + 11) + extra + wire[16:]
    )
    assert PdmMessage.from_bytes(spliced, d)[101] == 7


# -- the dataclass API ----------------------------------------------------------------------


@pdm.message(id=11, version=(1, 0))
@dataclasses.dataclass
class Leg:
    qty: Annotated[int, T.INT32]
    px: float


@pdm.message(id=12, version=(2, 0))
@dataclasses.dataclass
class Order:
    symbol: Annotated[str, PdmField(T.FIX_STRING, fixed_str_len=8)]
    qty: Annotated[int, PdmField(T.UINT32)]
    price: decimal.Decimal
    when: dt.datetime
    legs: list[Leg]
    main: Leg
    flags: Annotated[list[bool], PdmField(T.BOOLEAN_ARR, num_arr_elem=2)]
    note: str | None = None


@pdm.message(id=13)
@dataclasses.dataclass
class Quote:
    bid: Annotated[float, PdmField(T.DOUBLE, name=1)]
    ask: Annotated[float, PdmField(T.DOUBLE, name=2)]
    size: Annotated[int, PdmField(T.INT32, name=3)]


def test_dataclass_round_trip_and_definition() -> None:
    when = dt.datetime(2026, 11, 27, 4, 35, 1, 250, tzinfo=dt.UTC)
    o = Order(
        "IBM",
        100,
        decimal.Decimal("123.45"),
        when,
        [Leg(1, 2.5), Leg(-3, 0.0)],
        Leg(7, 1.0),
        [True, False],
    )
    wire = pdm.dumps(o)
    assert pdm.loads(Order, wire) == o
    assert pdm.loads(Order, pdm.dumps(o, big_endian=True, include_definition=True)) == o
    o.note = "urgent"
    assert pdm.loads(Order, pdm.dumps(o)) == o
    d = pdm.codec(Order).definition
    assert [(f.name, f.type, f.required) for f in d.fields] == [
        ("symbol", T.FIX_STRING, True),
        ("qty", T.UINT32, True),
        ("price", T.DECIMAL, True),
        ("when", T.TIMESTAMP, True),
        ("legs", T.MESSAGE_ARR, True),
        ("main", T.MESSAGE, True),
        ("flags", T.BOOLEAN_ARR, True),
        ("note", T.STRING, False),
    ]
    # The same bytes parse with the low-level API and the cache holding the nested definition.
    cache = PdmDefinitionCache()
    cache.put(pdm.codec(Leg).definition)
    low = PdmMessage.from_bytes(wire, d, cache=cache)
    assert low["symbol"] == "IBM" and low["price"] == UMDecimal(12345, -2)
    assert low["main"]["qty"] == 7


def test_dataclass_int_names_use_the_fast_path_and_match_the_low_level_bytes() -> None:
    d = PdmDefinition(13)
    for name in (1, 2):
        d.add_field(name, T.DOUBLE)
    d.add_field(3, T.INT32)
    m = PdmMessage(d.finalize())
    m[1], m[2], m[3] = 1.5, 1.75, 100
    q = Quote(1.5, 1.75, 100)
    assert pdm.dumps(q) == m.to_bytes()
    assert pdm.loads(Quote, m.to_bytes()) == q
    assert PdmDefinition.from_dataclass(Quote, 13).same_layout(d)
    with pytest.raises(PdmDefinitionError):
        pdm.loads(Leg, pdm.dumps(q))


def test_dataclass_mistakes_are_named() -> None:
    @dataclasses.dataclass
    class Bad:
        x: complex

    with pytest.raises(PdmEncodeError, match="no PDM type"):
        pdm.message(id=1)(Bad)
    with pytest.raises(PdmEncodeError, match="not decorated"):
        pdm.codec(Bad)

    @dataclasses.dataclass
    class Mixed:
        a: Annotated[int, PdmField(name=1)]
        b: int

    with pytest.raises(PdmEncodeError, match="int name"):
        pdm.message(id=1)(Mixed)
    with pytest.raises(PdmEncodeError):
        pdm.dumps(Leg(2**40, 1.0))


def test_fixed_only_definition_with_conversions_exact_bytes() -> None:
    """Fixed strings, decimals, timestamps and fixed arrays take the one-pack path too."""
    d = PdmDefinition(21, (3, 4))
    d.add_field(1, T.FIX_STRING, fixed_str_len=4)
    d.add_field(2, T.DECIMAL)
    d.add_field(3, T.TIMESTAMP_ARR, num_arr_elem=2)
    d.add_field(4, T.BOOLEAN_ARR, num_arr_elem=2)
    d.finalize()
    m = PdmMessage(d)
    m[1], m[2] = "ab", UMDecimal(-5, -1)
    m[3], m[4] = [UMTimestamp(1, 2), UMTimestamp(3, 4)], [False, True]
    fixed = (
        b"ab\0\0\0"  # 4 + 1 bytes
        + struct.pack("<bq", -1, -5)  # exponent, then mantissa
        + struct.pack("<IIII", 1, 2, 3, 4)
        + b"\x00\x01"
    )
    expected = header("<", 1, 3, 4, 21, 16 + 16 + len(fixed))
    expected += segment("<", 0, b"") + segment("<", 0xFF, fixed)
    assert m.to_bytes() == expected
    reader = PdmMessage(d)
    reader.parse(expected)
    assert reader.values == m.values
    # The same message with its definition goes through the general parser to the same values.
    m.include_definition = True
    assert PdmMessage.from_bytes(m.to_bytes()).values == m.values


@pdm.message(id=14, version=(1, 0))
@dataclasses.dataclass
class Tick:
    symbol: Annotated[str, PdmField(T.FIX_STRING, fixed_str_len=6)]
    px: float
    qty: Annotated[int, T.UINT32]
    venue: str | None
    legs: list[Leg]
    stamps: Annotated[list[int], PdmField(T.INT64_ARR, num_arr_elem=2)]


@settings(max_examples=100, deadline=None)
@given(
    st.text(st.characters(blacklist_characters="\0"), max_size=6).filter(
        lambda s: len(s.encode()) <= 6
    ),
    st.floats(allow_nan=False),
    st.integers(0, 2**32 - 1),
    st.none() | st.text(max_size=5),
    st.lists(
        st.builds(Leg, st.integers(-(2**31), 2**31 - 1), st.floats(allow_nan=False)), max_size=3
    ),
    st.lists(st.integers(-(2**63), 2**63 - 1), min_size=2, max_size=2),
    st.booleans(),
)
def test_dataclass_random_round_trip(
    symbol: str,
    px: float,
    qty: int,
    venue: str | None,
    legs: list[Leg],
    stamps: list[int],
    big: bool,
) -> None:
    tick = Tick(symbol, px, qty, venue, legs, stamps)
    assert pdm.loads(Tick, pdm.dumps(tick, big_endian=big)) == tick
