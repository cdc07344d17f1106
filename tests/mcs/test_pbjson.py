"""The generated JSON encoders (umcore.monitor.pbjson) against google.protobuf.json_format: for
every statistics message type, with random values in every field (unicode and quotes in strings,
64-bit extremes, unknown enum numbers, oneof members, repeated elements), and for every message of
the benchmark's mix (bench/mcs.py: every field set), ours is json_format's text byte for byte once
that is compact and in declaration order (the order UM's printer writes)."""

from __future__ import annotations

import json
from typing import Any

from google.protobuf import json_format
from google.protobuf.descriptor import FieldDescriptor as F
from hypothesis import given, settings
from hypothesis import strategies as st

from bench.mcs import packets
from umcore.monitor.attributes import decode_stats
from umcore.monitor.pb import dro_mon_pb2, srs_mon_pb2, um_mon_control_pb2, ump_mon_pb2, ums_mon_pb2
from umcore.monitor.pbjson import to_json

TYPES = [
    ums_mon_pb2.UMSMonMsg,
    ump_mon_pb2.UMPMonMsg,
    dro_mon_pb2.DROMonMsg,
    srs_mon_pb2.SRSMonMsg,
    um_mon_control_pb2.UMMonControlMsg,
]
_RANGES = {
    F.TYPE_INT64: (-(2**63), 2**63 - 1),
    F.TYPE_SINT64: (-(2**63), 2**63 - 1),
    F.TYPE_SFIXED64: (-(2**63), 2**63 - 1),
    F.TYPE_UINT64: (0, 2**64 - 1),
    F.TYPE_FIXED64: (0, 2**64 - 1),
    F.TYPE_INT32: (-(2**31), 2**31 - 1),
    F.TYPE_SINT32: (-(2**31), 2**31 - 1),
    F.TYPE_SFIXED32: (-(2**31), 2**31 - 1),
    F.TYPE_UINT32: (0, 2**32 - 1),
    F.TYPE_FIXED32: (0, 2**32 - 1),
}


def fill(msg: Any, draw: Any, depth: int = 0) -> None:
    desc = msg.DESCRIPTOR
    chosen = {
        o.name: draw(st.sampled_from([None, *(f.name for f in o.fields)])) for o in desc.oneofs
    }
    for f in desc.fields:
        if f.containing_oneof is not None and chosen[f.containing_oneof.name] != f.name:
            continue
        count = draw(st.integers(0, 2)) if f.is_repeated else 1
        for _ in range(count):
            if f.type == F.TYPE_MESSAGE:
                if depth > 6:
                    break
                sub = getattr(msg, f.name).add() if f.is_repeated else getattr(msg, f.name)
                sub.SetInParent()
                fill(sub, draw, depth + 1)
                continue
            value = scalar(f, draw)
            if f.is_repeated:
                getattr(msg, f.name).append(value)
            else:
                setattr(msg, f.name, value)


def scalar(f: Any, draw: Any) -> Any:
    t = f.type
    if t in _RANGES:
        lo, hi = _RANGES[t]
        return draw(st.one_of(st.integers(lo, hi), st.sampled_from([lo, hi, 0])))
    if t == F.TYPE_STRING:
        return draw(st.text(max_size=12))
    if t == F.TYPE_BYTES:
        return draw(st.binary(max_size=12))
    if t == F.TYPE_BOOL:
        return draw(st.booleans())
    if t == F.TYPE_ENUM:
        known = [v.number for v in f.enum_type.values]
        return draw(st.sampled_from([*known, 977]))  # open enums keep unknown numbers
    if t in (F.TYPE_DOUBLE, F.TYPE_FLOAT):
        return draw(st.floats(allow_nan=True, width=32 if t == F.TYPE_FLOAT else 64))
    raise AssertionError(t)


def reference(msg: Any) -> str:
    """json_format's canonical JSON of ``msg``, keys in declaration order, compact."""

    def ordered(value: Any, desc: Any) -> Any:
        out = {}
        for f in desc.fields:
            if f.json_name not in value:
                continue
            v = value[f.json_name]
            if f.type == F.TYPE_MESSAGE:
                sub = f.message_type
                v = [ordered(x, sub) for x in v] if f.is_repeated else ordered(v, sub)
            out[f.json_name] = v
        assert len(out) == len(value), sorted(set(value) - set(out))
        return out

    theirs = json_format.MessageToDict(msg, always_print_fields_with_no_presence=True)
    return json.dumps(ordered(theirs, msg.DESCRIPTOR), separators=(",", ":"), ensure_ascii=False)


# 60 examples: each fills every field of its message (hundreds, nested) with a fresh draw, so
# the extremes, unknown enums and odd strings come up many times per example already.
@settings(max_examples=60, deadline=None)
@given(st.sampled_from(TYPES), st.data())
def test_same_json_as_json_format(cls: Any, data: st.DataObject) -> None:
    msg = cls()
    fill(msg, data.draw)
    ours = to_json(msg)
    theirs = json_format.MessageToDict(msg, always_print_fields_with_no_presence=True)
    assert json.loads(ours) == theirs
    assert ours == reference(msg)


def test_the_benchmark_mix_byte_for_byte() -> None:
    """Every distinct message bench/mcs.py stores (UMS context, source and receiver packets, UMP,
    DRO and SRS with every section), as UM's MCS rows hold them; each type seen."""
    seen = set()
    for packet in set(packets()):
        msg = decode_stats(packet).message
        assert msg is not None
        seen.add(type(msg))
        assert to_json(msg) == reference(msg)
    assert seen == set(TYPES[:4])


def test_empty_messages_and_declaration_order() -> None:
    for cls in TYPES:
        msg = cls()
        assert json.loads(to_json(msg)) == json_format.MessageToDict(
            msg, always_print_fields_with_no_presence=True
        )
    msg = ums_mon_pb2.UMSMonMsg()
    msg.stats.context.fragments_lost = 1  # set: json_format puts it first; we keep the order
    keys = list(json.loads(to_json(msg))["stats"]["context"])
    declared = [f.json_name for f in msg.stats.context.DESCRIPTOR.fields]
    assert keys == declared
