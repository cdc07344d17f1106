"""Message properties and EXTOPT configuration options: exact bytes, round trips, limits."""

from __future__ import annotations

import contextlib
import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from umcore.errors import LocalProtocolError
from umcore.wire import lbmc
from umcore.wire.lbmc import (
    EXTOPT_MORE,
    MSG_CONTROL,
    MSG_DATA,
    ApphdrChain,
    ExtOpt,
    LBMCError,
    LBMCMessage,
    UmePreg,
)
from umcore.wire.lbmc_props import (
    PROP_BOOLEAN,
    PROP_BYTE,
    PROP_DOUBLE,
    PROP_FLOAT,
    PROP_INT,
    PROP_LONG,
    PROP_SHORT,
    PROP_STRING,
    CfgOpt,
    Property,
    decode_cfgopts,
    decode_properties,
    encode_cfgopts,
    encode_properties,
    extopt_headers,
    reassemble_extopts,
    split_properties,
)

# wire-lbmc-ump.md section 11 f07: a little-endian block with int k_int=1234 and string k_str="abc"
F07_BLOCK = bytes.fromhex(
    "badaacab 0200 00 00 28000000 2e000000 00000000 04000000 32000000 38000000 00000000 08000000"
    " 6b5f696e7400 d2040000 6b5f73747200 61626300".replace(" ", "")
)
F07_PROPS = [Property("k_int", PROP_INT, 1234), Property("k_str", PROP_STRING, "abc")]


def test_properties_exact_bytes() -> None:
    assert encode_properties(F07_PROPS) == F07_BLOCK
    assert decode_properties(F07_BLOCK) == F07_PROPS
    big = encode_properties(F07_PROPS, big_endian=True)
    assert big[:8] == bytes.fromhex("abacdaba00020000")
    assert big[8:24] == bytes.fromhex("00000028 0000002e 00000000 00000004".replace(" ", ""))
    assert decode_properties(big) == F07_PROPS


def test_split_properties_uses_the_apphdr_chain() -> None:
    msg = LBMCMessage(
        MSG_DATA, 1, 44, [ApphdrChain.for_properties(len(F07_BLOCK))], b"payload" + F07_BLOCK
    )
    wire = lbmc.encode(msg)
    assert wire[:12] == bytes.fromhex("0007005b000000010000002c")  # the f07 golden header
    got = lbmc.decode(wire)
    data, props = split_properties(got.payload, got.find(ApphdrChain))
    assert (data, props) == (b"payload", F07_PROPS)
    assert split_properties(b"plain", None) == (b"plain", [])


values = {
    PROP_BOOLEAN: st.booleans(),
    PROP_BYTE: st.integers(-128, 127),
    PROP_SHORT: st.integers(-(2**15), 2**15 - 1),
    PROP_INT: st.integers(-(2**31), 2**31 - 1),
    PROP_LONG: st.integers(-(2**63), 2**63 - 1),
    PROP_DOUBLE: st.floats(allow_nan=False),
    PROP_FLOAT: st.floats(width=32, allow_nan=False),
    PROP_STRING: st.text(
        alphabet=st.characters(blacklist_categories=("Cs",), blacklist_characters="\0"), max_size=20
    ),
}
prop = st.sampled_from(sorted(values)).flatmap(
    lambda t: st.builds(
        Property,
        st.text(
            alphabet=st.characters(blacklist_categories=("Cs",), blacklist_characters="\0"),
            max_size=12,
        ),
        st.just(t),
        values[t],
    )
)


@settings(max_examples=200, deadline=None)
@given(st.lists(prop, max_size=8), st.booleans())
def test_properties_round_trip(props: list[Property], big_endian: bool) -> None:
    got = decode_properties(encode_properties(props, big_endian=big_endian))
    assert len(got) == len(props)
    for g, p in zip(got, props, strict=True):
        assert (g.name, g.prop_type) == (p.name, p.prop_type)
        if isinstance(p.value, float):
            assert (
                isinstance(g.value, float) and math.isclose(g.value, p.value, rel_tol=0)
            ) or g.value == p.value
        else:
            assert g.value == p.value


@settings(max_examples=200, deadline=None)
@given(st.binary(max_size=200))
def test_decode_properties_raises_only_lbmc_error(buf: bytes) -> None:
    for block in (buf, F07_BLOCK[:8] + buf, F07_BLOCK[: len(buf) % len(F07_BLOCK)]):
        with contextlib.suppress(LBMCError):
            decode_properties(block)


def test_bad_properties() -> None:
    with pytest.raises(LocalProtocolError):
        encode_properties([Property("x", 99, 1)])
    with pytest.raises(LocalProtocolError):
        encode_properties([Property("x", PROP_BYTE, 300)])
    with pytest.raises(LocalProtocolError):
        encode_properties([Property("x", PROP_STRING, 5)])
    with pytest.raises(LBMCError):
        split_properties(b"ab", ApphdrChain.for_properties(10))
    with pytest.raises(LBMCError):  # an element of length 0: no room for the block header
        split_properties(b"ab", ApphdrChain.for_properties(0))


def test_cfgopt_exact_bytes_and_golden_preg() -> None:
    opts = [CfgOpt(1, "repository-size-threshold", "1000000")]
    data = encode_cfgopts(opts)
    assert data == b"\x01\x00repository-size-threshold\x001000000\x00"
    preg = UmePreg(0x10, True, 1, 0, 5, 1, 0, 14391, 0, 0x0A000001)
    wire = lbmc.encode(LBMCMessage(MSG_CONTROL, headers=[preg, *extopt_headers(data)]))
    golden = (
        "0812004c fe1c 10 81 00000000 00000005 00000001 00000000 3837 0000 0a000001 | ff2c 00 00 0100 0000 01 00"
        " 7265706f7369746f72792d73697a652d7468726573686f6c6400 3130303030303000"
    )
    assert wire == bytes.fromhex(golden.replace(" ", "").replace("|", ""))
    ((opt_id, subtype, got),) = reassemble_extopts(lbmc.decode(wire).headers)
    assert (opt_id, subtype, decode_cfgopts(got)) == (0, 0x0100, opts)


@settings(max_examples=100, deadline=None)
@given(
    st.lists(
        st.builds(
            CfgOpt,
            st.integers(1, 8),
            st.from_regex(r"[a-z_-]{1,40}", fullmatch=True),
            st.from_regex(r"[0-9a-z]{0,30}", fullmatch=True),
            st.integers(0, 255),
        ),
        max_size=40,
    )
)
def test_cfgopts_split_and_reassemble(opts: list[CfgOpt]) -> None:
    data = encode_cfgopts(opts)
    pieces = extopt_headers(data, opt_id=3)
    assert all(len(p.data) <= 247 for p in pieces)
    assert [bool(p.flags & EXTOPT_MORE) for p in pieces] == [True] * (len(pieces) - 1) + [False]
    msg = LBMCMessage(MSG_CONTROL, headers=[UmePreg(), *pieces])
    ((opt_id, _, got),) = reassemble_extopts(lbmc.decode(lbmc.encode(msg)).headers)
    assert opt_id == 3 and decode_cfgopts(got) == opts


def test_extopt_reassembly_errors() -> None:
    with pytest.raises(LBMCError):
        reassemble_extopts([ExtOpt(0, 1, 0x100, 5, b"x")])  # does not start at 0
    with pytest.raises(LBMCError):
        reassemble_extopts([ExtOpt(EXTOPT_MORE, 1, 0x100, 0, b"x")])  # never finished
    with pytest.raises(LBMCError):
        decode_cfgopts(b"\x01\x00name-without-nul")
