"""Message formats: PDM serialise/deserialise of one market-data record against json and struct.

The record (a quote: symbol as an 8-byte FIX_STRING, bid, ask as DOUBLE, bid and ask sizes as
INT32, sequence number as UINT64, a BOOLEAN flag) goes through, in one run:

* **PDM, dataclass API**: ``pdm.dumps(obj)`` / ``pdm.loads(Quote, data)`` (fixed-required
  fields only: the definition's precompiled whole-message struct);
* **PDM, field API**: a reused :class:`~umcore.wire.pdm.PdmMessage`, values set by
  :class:`FieldInfo`, ``to_bytes`` then ``parse`` into a second reused message;
* **SDM**: an :class:`~umcore.wire.sdm.SdmMessage` with the same fields by name;
* **json**: ``json.dumps`` of the record's dict (``encode``) and ``json.loads``;
* **struct**: a bare ``struct.pack``/``unpack_from`` of the same values (the floor: no header,
  no checks).

Each figure is the best of :data:`REPEATS` interleaved rounds of :data:`N` messages; only the ratios
mean anything on these shared machines.  Bounded to a few seconds.
"""

from __future__ import annotations

import dataclasses
import json
import struct
import time
from collections.abc import Callable
from typing import Annotated

from umcore.wire import pdm
from umcore.wire.pdm import FieldType, PdmField, PdmMessage
from umcore.wire.sdm import SdmMessage, SdmType

N = 2_000
REPEATS = 9


@pdm.message(id=42, version=(1, 0))
@dataclasses.dataclass
class Quote:
    symbol: Annotated[str, PdmField(FieldType.FIX_STRING, fixed_str_len=8)]
    bid: float
    ask: float
    bid_size: Annotated[int, FieldType.INT32]
    ask_size: Annotated[int, FieldType.INT32]
    seq: Annotated[int, FieldType.UINT64]
    firm: bool


QUOTE = Quote("IBM", 123.25, 123.5, 300, 500, 1_234_567, True)
_FLOOR = struct.Struct("<8sddiiQ?")


def _time(fn: Callable[[], object]) -> float:
    """Microseconds per call over one loop of N calls."""
    start = time.perf_counter()
    for _ in range(N):
        fn()
    return (time.perf_counter() - start) / N * 1e6


def main() -> None:
    codec = pdm.codec(Quote)
    d = codec.definition
    fields = d.fields
    out = PdmMessage(d)
    for f, v in zip(fields, dataclasses.astuple(QUOTE), strict=True):
        out[f] = v
    into = PdmMessage(d)
    wire_pdm = pdm.dumps(QUOTE)
    wire_field = out.to_bytes()
    assert wire_pdm == wire_field and pdm.loads(Quote, wire_pdm) == QUOTE

    sdm = SdmMessage()
    for f, v in zip(fields, dataclasses.astuple(QUOTE), strict=True):
        sdm_type = SdmType.STRING if f.type is FieldType.FIX_STRING else SdmType(f.type)
        sdm.add(str(f.name), v, sdm_type)
    wire_sdm = sdm.to_bytes()

    record = dataclasses.asdict(QUOTE)
    wire_json = json.dumps(record)
    values = (b"IBM", 123.25, 123.5, 300, 500, 1_234_567, True)
    wire_struct = _FLOOR.pack(*values)

    rows = [
        ("PDM dataclass", lambda: pdm.dumps(QUOTE), lambda: pdm.loads(Quote, wire_pdm), wire_pdm),
        ("PDM field API", out.to_bytes, lambda: into.parse(wire_field), wire_field),
        ("SDM", sdm.to_bytes, lambda: SdmMessage.from_bytes(wire_sdm), wire_sdm),
        ("json", lambda: json.dumps(record), lambda: json.loads(wire_json), wire_json),
        (
            "struct (floor)",
            lambda: _FLOOR.pack(*values),
            lambda: _FLOOR.unpack_from(wire_struct),
            wire_struct,
        ),
    ]
    # Rounds interleave every row, so a burst of load from other processes hits them alike;
    # each keeps its best round.
    results = {name: (float("inf"), float("inf"), len(wire)) for name, _e, _d, wire in rows}
    for _ in range(REPEATS):
        for name, enc, dec, _wire in rows:
            best_enc, best_dec, size = results[name]
            results[name] = (min(best_enc, _time(enc)), min(best_dec, _time(dec)), size)
    json_enc, json_dec, _ = results["json"]
    floor_enc, floor_dec, _ = results["struct (floor)"]
    print(f"   {N:,} messages of one quote record (7 fields), best of {REPEATS}")
    print(
        f"   {'':16} {'encode us':>10} {'decode us':>10} {'bytes':>6} {'vs json':>14} {'vs struct':>14}"
    )
    for name, (enc_us, dec_us, size) in results.items():
        print(
            f"   {name:16} {enc_us:10.2f} {dec_us:10.2f} {size:6d} "
            f"{enc_us / json_enc:6.2f}/{dec_us / json_dec:<6.2f} "
            f"{enc_us / floor_enc:6.2f}/{dec_us / floor_dec:<6.2f}"
        )
    print("   (ratios: encode/decode time relative to json and to a bare struct; lower is faster)")


if __name__ == "__main__":
    main()
