"""PDM against tshark 4.0.17's LBMPDM dissector (Informatica's packet-lbmpdm.c): what we write
decodes with the values we meant, the definition learnt from one message and applied to the next."""

from __future__ import annotations

import pytest

from tests.oracle import Decoded, Tshark
from tests.wire.helpers import lbmc_data, num
from umcore.wire import lbtrm
from umcore.wire.lbtrm import LBTRMData
from umcore.wire.msgtypes import UMDecimal, UMTimestamp
from umcore.wire.pcap import udp_frame
from umcore.wire.pdm import FieldType, PdmDefinition, PdmMessage

pytestmark = pytest.mark.tshark

T = FieldType
PREFS = {"lbmc.dissect_lbmpdm": "TRUE"}


def frame(sqn: int, payload: bytes) -> bytes:
    """An LBT-RM data datagram (default group and port, so tshark's heuristics find it)."""
    data = LBTRMData(0x0A0B0C0D, 14390, sqn, 0, lbmc_data(3, sqn, payload))
    return udp_frame("10.0.0.5", 30000, "224.10.10.10", 14400, lbtrm.encode(data))


def definition(int_names: bool) -> PdmDefinition:
    d = PdmDefinition(1001 if int_names else 1002, (1, 0), int_names=int_names)
    spec = [
        (T.BOOLEAN, True, {}),
        (T.INT32, True, {}),
        (T.DOUBLE, True, {}),
        (T.INT8, False, {}),
        (T.FIX_STRING, True, {"fixed_str_len": 12}),
        (T.STRING, True, {}),
        (T.BOOLEAN_ARR, True, {"num_arr_elem": 3}),
        (T.FIX_STRING_ARR, True, {"fixed_str_len": 5, "num_arr_elem": 2}),
        (T.STRING_ARR, False, {"num_arr_elem": 2}),
        (T.UINT64, False, {}),
        (T.DECIMAL, True, {}),
        (T.TIMESTAMP, True, {}),
        (T.BLOB, False, {}),
        (T.INT16_ARR, False, {"num_arr_elem": 2}),
    ]
    for i, (ftype, required, kw) in enumerate(spec):
        d.add_field(100 + i if int_names else f"Field{100 + i}", ftype, required, **kw)
    return d.finalize()


def message(d: PdmDefinition, include: bool, big: bool, seven: int) -> PdmMessage:
    m = PdmMessage(d, include_definition=include, big_endian=big)
    values = [
        True,
        seven,
        0.5,
        None,
        "Hello World!",
        "variable",
        [True, False, True],
        ["aaaaa", "bb"],
        ["x", "yz"],
        2**64 - 1,
        UMDecimal(-12345, -2),
        UMTimestamp(1_700_000_000, 250_000),
        b"\x01\x02",
        [-1, 2],
    ]
    for f, v in zip(d.fields, values, strict=True):
        if v is not None:
            m[f] = v
    return m


def check(decoded: Decoded, i: int, seven: int) -> None:
    assert [num(v) for v in decoded.values("lbmpdm.magic", i)] == [0xA71CCAFE]
    assert decoded.values("lbmpdm.field.value_boolean", i) == ["1", "1", "0", "1"]
    assert [num(v) for v in decoded.values("lbmpdm.field.value_int32", i)] == [seven]
    assert decoded.values("lbmpdm.field.value_double", i) == ["0.5"]
    assert decoded.values("lbmpdm.field.value_fixed_string", i) == ["Hello World!", "aaaaa", "bb"]
    assert decoded.values("lbmpdm.field.value_string", i) == ["variable", "x", "yz"]
    assert decoded.values("lbmpdm.field.value_uint64", i) == [str(2**64 - 1)]
    assert [num(v) for v in decoded.values("lbmpdm.field.value_int16", i)] == [-1, 2]
    assert decoded.values("lbmpdm.field.value_blob", i) == ["01:02"]
    assert decoded.values("lbmpdm.field.value_int8", i) == []  # unset optional field


@pytest.mark.parametrize("int_names", [True, False])
def test_pdm_fields_decode_and_the_learnt_definition_applies(
    tshark: Tshark, int_names: bool
) -> None:
    d = definition(int_names)
    frames = [
        frame(1, message(d, include=True, big=False, seven=7).to_bytes()),
        frame(2, message(d, include=False, big=False, seven=8).to_bytes()),
        frame(3, message(d, include=True, big=True, seven=9).to_bytes()),
        frame(4, message(d, include=False, big=True, seven=10).to_bytes()),
    ]
    decoded = tshark.decode(frames, prefs=PREFS)
    decoded.assert_clean()
    for i, seven in enumerate((7, 8, 9, 10)):
        check(decoded, i, seven)
        assert num(decoded.value("lbmpdm.def_id", i)) == d.id
    assert decoded.values("lbmpdm.encoding") == [
        "Little-Endian",
        "Little-Endian",
        "Big-Endian",
        "Big-Endian",
    ]
    names = decoded.values("lbmpdm.segment_def.field.str_name", 0)
    assert names == ([] if int_names else [f"Field{100 + i}" for i in range(14)])
    if int_names:
        assert [num(v) for v in decoded.values("lbmpdm.segment_def.field.fld_int_name", 0)] == list(
            range(100, 114)
        )
    assert [num(v) for v in decoded.values("lbmpdm.segment_def.field.fld_type", 0)] == [
        f.type for f in d.fields
    ]


def test_variable_size_numeric_array_is_the_one_thing_tshark_cannot_split(tshark: Tshark) -> None:
    """An array without a declared size (INFERRED "variable-size array") is a byte length and
    packed elements; the dissector, having no element count, shows the first element and
    warns.  Everything around it still decodes: the warning is the dissector's limit, not a
    framing error."""
    d = PdmDefinition(3003)
    d.add_field(1, T.INT32_ARR, required=False)
    d.add_field(2, T.STRING)
    m = PdmMessage(d.finalize(), include_definition=True)
    m[1], m[2] = [5, 6, 7], "after"
    decoded = tshark.decode([frame(1, m.to_bytes())], prefs=PREFS)
    problems = decoded.problems()
    # The type-length warning, and the Malformed marker tshark's JSON adds for its group.
    assert [(p.severity, p.keys) for p in problems] == [
        ("warn", ("_ws.type_length.mismatch",)),
        ("malformed", ()),
    ], problems
    assert "signed integer with length 12" in problems[0].message
    assert [num(v) for v in decoded.values("lbmpdm.field.value_int32", 0)] == [5]
    assert decoded.values("lbmpdm.field.value_string", 0) == ["after"]
