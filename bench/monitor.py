"""Monitoring benchmark: one SRS_STATS message in protobuf + lbmmon framing vs the JSON format.

Measures, in one run, the cost of publishing one SRS_STATS sample (26 counters):

* ``pb``: fill an ``SRSMonMsg``, serialise it and frame it with its attribute block
  (``encode_stats``), then the receiver side (``decode_stats``);
* ``json`` (the baseline, and the SRS's deprecated format): build the JSON envelope of the same
  26 statistics and ``dumps`` it (strict JSON), then ``json.loads`` it back.

Also prints the encoded sizes.  Each figure is the best of several repeats; the ratio to the JSON
baseline measured in the same run is the number to compare across machines.  A daemon publishes a
handful of these per interval (seconds), so both are far from mattering; the benchmark is here to
catch a regression by orders of magnitude.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable

from umcore.monitor import jsonfmt, protogen

REPEATS = 5
LOOPS = 5000


def _best_us(fn: Callable[[], object]) -> float:
    best = float("inf")
    for _ in range(REPEATS):
        start = time.perf_counter()
        for _ in range(LOOPS):
            fn()
        best = min(best, time.perf_counter() - start)
    return best / LOOPS * 1e6


def main() -> None:
    protogen.generate()
    from umcore.monitor.attributes import MonAttributes, decode_stats, encode_stats
    from umcore.monitor.categories import Category
    from umcore.monitor.framing import PacketType
    from umcore.monitor.pb import srs_mon_pb2

    values = {field: 1000 + i for i, (_, field) in enumerate(jsonfmt.SRS_STATS_NAMES)}
    attrs = MonAttributes(
        sender_ipv4="10.29.4.101", timestamp=1693260077, application_id="srs1", process_id=3753
    )

    def pb_encode() -> bytes:
        msg = srs_mon_pb2.SRSMonMsg()
        srs = msg.stats.srs
        for field, value in values.items():
            setattr(srs, field, value)
        return encode_stats(PacketType.SRS, msg, attrs)

    def json_encode() -> bytes:
        stats = [(name, values[field]) for name, field in jsonfmt.SRS_STATS_NAMES]
        return jsonfmt.dumps(jsonfmt.stats_message(Category.SRS_STATS, stats))

    pb_wire = pb_encode()
    json_wire = json_encode()

    pb_enc = _best_us(pb_encode)
    json_enc = _best_us(json_encode)
    pb_dec = _best_us(lambda: decode_stats(pb_wire))
    json_dec = _best_us(lambda: json.loads(json_wire))
    print(f"   SRS_STATS sample: pb+framing {len(pb_wire)} bytes, JSON {len(json_wire)} bytes")
    print(
        f"   encode: pb+framing {pb_enc:7.2f} us   JSON {json_enc:7.2f} us   ratio {pb_enc / json_enc:.2f}"
    )
    print(
        f"   decode: pb+framing {pb_dec:7.2f} us   JSON {json_dec:7.2f} us   ratio {pb_dec / json_dec:.2f}"
    )
