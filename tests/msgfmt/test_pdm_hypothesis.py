"""PDM property tests: random definitions and values round trip; mutated bytes only ever raise
PdmError (bounded runs: the whole file takes a few seconds)."""

from __future__ import annotations

import random
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.wire.helpers import fuzz_decoders
from umcore.wire.msgtypes import UMDecimal, UMTimestamp
from umcore.wire.pdm import (
    UNSET,
    FieldType,
    PdmDefinition,
    PdmDefinitionCache,
    PdmError,
    PdmMessage,
)

T = FieldType
SETTINGS = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])

INTS = {
    T.INT8: (-(2**7), 2**7 - 1),
    T.UINT8: (0, 2**8 - 1),
    T.INT16: (-(2**15), 2**15 - 1),
    T.UINT16: (0, 2**16 - 1),
    T.INT32: (-(2**31), 2**31 - 1),
    T.UINT32: (0, 2**32 - 1),
    T.INT64: (-(2**63), 2**63 - 1),
    T.UINT64: (0, 2**64 - 1),
}
# The nested definition MESSAGE fields use (known to readers through a cache).
INNER = PdmDefinition(99, (1, 0))
INNER.add_field(1, T.INT32)
INNER.add_field(2, T.STRING, required=False)
INNER.finalize()
CACHE = PdmDefinitionCache()
CACHE.put(INNER)


def fix_text(width: int) -> st.SearchStrategy[str]:
    return st.text(st.characters(blacklist_characters="\0"), max_size=width).filter(
        lambda s: len(s.encode()) <= width
    )


def base_value(base: FieldType, width: int) -> st.SearchStrategy[Any]:
    if base in INTS:
        return st.integers(*INTS[base])
    if base is T.BOOLEAN:
        return st.booleans()
    if base is T.FLOAT:
        return st.floats(width=32, allow_nan=False)
    if base is T.DOUBLE:
        return st.floats(allow_nan=False)
    if base is T.DECIMAL:
        return st.builds(UMDecimal, st.integers(-(2**63), 2**63 - 1), st.integers(-128, 127))
    if base is T.TIMESTAMP:
        return st.builds(UMTimestamp, st.integers(0, 2**32 - 1), st.integers(0, 2**32 - 1))
    if base in (T.FIX_STRING, T.FIX_UNICODE):
        return fix_text(width)
    if base in (T.STRING, T.UNICODE):
        return st.text(max_size=12)
    if base is T.BLOB:
        return st.binary(max_size=12)
    return st.builds(
        lambda a, b: inner_message(a, b), st.integers(-5, 5), st.none() | st.text(max_size=3)
    )


def inner_message(a: int, b: str | None) -> PdmMessage:
    m = PdmMessage(INNER)
    m[1] = a
    if b is not None:
        m[2] = b
    return m


@st.composite
def definitions_and_values(draw: st.DrawFn) -> tuple[PdmDefinition, list[Any]]:
    int_names = draw(st.booleans())
    d = PdmDefinition(
        draw(st.integers(0, 2**31 - 1)),
        (draw(st.integers(0, 255)), draw(st.integers(0, 255))),
        int_names=int_names,
    )
    values = []
    for i in range(draw(st.integers(0, 8))):
        ftype = draw(st.sampled_from(list(FieldType)))
        base = ftype.base
        width = draw(st.integers(1, 6)) if base in (T.FIX_STRING, T.FIX_UNICODE) else 0
        count = draw(st.integers(0, 3)) if ftype.is_array else 0
        required = draw(st.booleans())
        name: int | str = i * 7 - 3 if int_names else f"f{i}"
        d.add_field(name, ftype, required, fixed_str_len=width, num_arr_elem=count)
        one = base_value(base, width)
        if ftype.is_array:
            value = draw(
                st.lists(one, min_size=count, max_size=count)
                if count
                else st.lists(one, max_size=3)
            )
        else:
            value = draw(one)
        values.append(value if required or draw(st.booleans()) else UNSET)
    return d.finalize(), values


def fill(
    d: PdmDefinition,
    values: list[Any],
    *,
    include_definition: bool = False,
    big_endian: bool = False,
) -> PdmMessage:
    m = PdmMessage(d, include_definition=include_definition, big_endian=big_endian)
    for f, v in zip(d.fields, values, strict=True):
        if v is not UNSET:
            m[f] = v
    return m


@SETTINGS
@given(definitions_and_values(), st.booleans(), st.booleans())
def test_random_definitions_round_trip(
    dv: tuple[PdmDefinition, list[Any]], big: bool, include: bool
) -> None:
    d, values = dv
    wire = fill(d, values, big_endian=big, include_definition=include).to_bytes()
    back = PdmMessage.from_bytes(wire, None if include else d, cache=CACHE)
    assert back.definition is not None and back.definition.same_layout(d)
    assert back.values == values
    # Canonical: what we parsed serialises to the same bytes.
    again = PdmMessage(back.definition, big_endian=big, include_definition=include)
    again.values = back.values
    assert again.to_bytes() == wire


def seeds(cache: PdmDefinitionCache) -> list[bytes]:
    """Varied valid messages, half carrying their definition, the others' definitions cached."""
    rng = random.Random(24)
    out = []
    for _ in range(40):
        d, values = _draw(rng)
        include = rng.random() < 0.5
        if not include:
            cache.put(d)
        m = fill(d, values, include_definition=include, big_endian=rng.random() < 0.5)
        out.append(m.to_bytes())
    return out


def _draw(rng: random.Random) -> tuple[PdmDefinition, list[Any]]:
    """A deterministic varied definition for the fuzz seeds (no hypothesis draw outside @given)."""
    d = PdmDefinition(rng.randrange(1000), (1, rng.randrange(3)), int_names=rng.random() < 0.5)
    values: list[Any] = []
    samples: dict[FieldType, Any] = {
        T.BOOLEAN: True,
        T.INT8: -1,
        T.UINT8: 1,
        T.INT16: -2,
        T.UINT16: 2,
        T.INT32: -3,
        T.UINT32: 3,
        T.INT64: -4,
        T.UINT64: 4,
        T.FLOAT: 0.25,
        T.DOUBLE: 0.5,
        T.DECIMAL: UMDecimal(5, -1),
        T.TIMESTAMP: UMTimestamp(6, 7),
        T.FIX_STRING: "ab",
        T.STRING: "str",
        T.FIX_UNICODE: "é",
        T.UNICODE: "ü",
        T.BLOB: b"\x00\x01",
        T.MESSAGE: inner_message(1, "x"),
    }
    for i in range(rng.randint(1, 7)):
        ftype = FieldType(rng.randrange(38))
        base = ftype.base
        count = rng.randint(0, 2) if ftype.is_array else 0
        width = 3 if base in (T.FIX_STRING, T.FIX_UNICODE) else 0
        d.add_field(
            i if d.int_names else f"n{i}",
            ftype,
            rng.random() < 0.6,
            fixed_str_len=width,
            num_arr_elem=count,
        )
        one = samples[base]
        values.append([one] * (count or rng.randint(0, 2)) if ftype.is_array else one)
    return d.finalize(), values


def test_fuzz_only_pdm_error_escapes() -> None:
    rng = random.Random(2024)
    cache = PdmDefinitionCache()
    cache.put(INNER)
    corpus = seeds(cache)

    def with_cache(wire: bytes) -> None:
        PdmMessage.from_bytes(wire, cache=cache)

    decoded = fuzz_decoders(
        rng, corpus, [with_cache], PdmError, rounds=4000, random_every=10, random_max=64
    )
    assert decoded > 100  # the mutations also reach the success paths


@SETTINGS
@given(st.binary(max_size=200))
def test_random_bytes_after_a_valid_header_only_raise_pdm_error(tail: bytes) -> None:
    wire = bytes.fromhex("feca1ca71101010063000000") + (16 + len(tail)).to_bytes(4, "little") + tail
    try:
        PdmMessage.from_bytes(wire, cache=CACHE)
    except PdmError as exc:
        assert exc.offset is not None and 0 <= exc.offset <= len(wire)


def test_fuzz_receiver_with_a_fixed_only_definition() -> None:
    """Mutations of a fixed-required-only message at a receiver holding the definition: the
    one-pack path (prefix check, one unpack) or the general parser, only PdmError escapes."""
    d = PdmDefinition(77, (1, 2))
    d.add_field(1, T.FIX_STRING, fixed_str_len=6)
    d.add_field(2, T.DOUBLE)
    d.add_field(3, T.DECIMAL)
    d.add_field(4, T.INT16_ARR, num_arr_elem=3)
    d.finalize()
    corpus = []
    for i, big in enumerate((False, True) * 4):
        m = PdmMessage(d, big_endian=big, include_definition=i >= 4)
        m[1], m[2], m[3], m[4] = "é" * (i % 4), i / 3, UMDecimal(i, -i), [i, -i, 0]
        corpus.append(m.to_bytes())
    reader = PdmMessage(d)
    decoded = fuzz_decoders(
        random.Random(77),
        corpus,
        [reader.parse],
        PdmError,
        rounds=3000,
        random_every=10,
        random_max=64,
    )
    assert decoded > 100
