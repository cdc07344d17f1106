"""The SQLite converter's short way (the attribute block checked in place, no full decode) gives
the Collector's rows and verdicts: on every kind of statistics message, on other formats and
control messages, and on thousands of damaged packets (bytes changed, cut, appended)."""

from __future__ import annotations

import random

import pytest

from daemons.mcs.connectors import sqlite_rows
from daemons.mcs.convert import (
    DECODED,
    decode_batch,
    json_rows,
    parquet,
    plain_frame,
    records_of,
)
from umcore.monitor.attributes import MonAttributes, encode_stats
from umcore.monitor.framing import (
    AttrType,
    PacketType,
    encode_packet,
    make_module_id,
)
from umcore.monitor.pb import dro_mon_pb2, srs_mon_pb2, um_mon_control_pb2, ump_mon_pb2, ums_mon_pb2

SOURCE = "TCP:10.0.0.1:14390"


def packets() -> list[bytes]:
    out = []
    for i, (ptype, msg) in enumerate(
        [
            (PacketType.CONTEXT, ums_mon_pb2.UMSMonMsg()),
            (PacketType.SOURCE, ums_mon_pb2.UMSMonMsg()),
            (PacketType.UMESTORE, ump_mon_pb2.UMPMonMsg()),
            (PacketType.GATEWAY, dro_mon_pb2.DROMonMsg()),
            (PacketType.SRS, srs_mon_pb2.SRSMonMsg()),
            (PacketType.CONTROL_MESSAGE, um_mon_control_pb2.UMMonControlMsg()),
        ]
    ):
        if ptype == PacketType.CONTEXT:
            msg.stats.context.fragments_lost = 7  # type: ignore[attr-defined]
        if ptype == PacketType.GATEWAY:
            msg.stats.local.gateway_name = "dro-é"  # type: ignore[attr-defined]
        attrs = MonAttributes(
            application_id=f"app{i}", sender_ipv4="10.0.0.9", timestamp=1_700_000_000 + i,
            context_instance=bytes(range(8)), object_id=i, process_id=4242,
        )  # fmt: skip
        out.append(encode_stats(ptype, msg, attrs))
    csv = make_module_id(1, 1)
    out.append(
        encode_packet(
            PacketType.SOURCE, b"1,2,3", [(AttrType.FORMAT_MODULEID, csv.to_bytes(2, "big"))]
        )
    )
    out.append(encode_packet(PacketType.UMDS, b"", [(AttrType.TIMESTAMP, b"\0\0\0\1")]))
    out.append(encode_packet(PacketType.CONTEXT, b"", []))  # no attribute block at all
    return out


def collector_way(batch: list[tuple[bytes, str, float]]) -> tuple[object, dict[str, int], int]:
    records, counts, _ = decode_batch(batch)
    return sqlite_rows(records), counts, len(records)


def test_every_kind_as_the_collector_has_it() -> None:
    batch = [(p, SOURCE, 1.0) for p in packets()]
    assert all(plain_frame(p) is not None for p in packets()[:6])  # UM's packets: the short way
    rows, counts, stored, last_bad = json_rows(batch)
    want_rows, want_counts, want_stored = collector_way(batch)
    assert rows == want_rows and counts == want_counts and stored == want_stored
    assert counts == {"ums": 3, "ump": 1, "dro": 1, "srs": 1, "control": 1, "raw": 2, "bad": 0}
    assert '"gatewayName":"dro-é"' in rows["dromonmsg"][0][0] and last_bad == ""


def damaged_packets() -> list[tuple[bytes, str, float]]:
    """3,000 of :func:`packets`, each with a byte changed, cut short or lengthened."""
    rng = random.Random(21)
    good = packets()
    damaged = []
    for _ in range(3000):
        p = bytearray(rng.choice(good))
        how = rng.randrange(3)
        if how == 0:  # a byte changed, mostly in the header and the attribute block
            at = rng.randrange(min(len(p), 12 + 120))
            p[at] = rng.randrange(256)
        elif how == 1:
            del p[rng.randrange(len(p)) :]
        else:
            p += bytes(rng.randrange(256) for _ in range(rng.randrange(1, 4)))
        damaged.append((bytes(p), SOURCE, 1.0))
    return damaged


def test_damaged_packets_get_the_collectors_verdict() -> None:
    damaged = damaged_packets()
    rows, counts, stored, last_bad = json_rows(damaged)
    want_rows, want_counts, want_stored = collector_way(damaged)
    assert counts == want_counts and stored == want_stored
    assert rows == want_rows
    short = sum(plain_frame(p) is not None for p, _, _ in damaged)
    assert counts["bad"] > 1000 and stored > 300 and short > 300  # both ways were exercised
    assert last_bad.startswith(f"from {SOURCE}: ")
    assert set(counts) == set(DECODED)


def test_parquet_converter_counts_and_tables() -> None:
    pytest.importorskip("pyarrow")
    batch = [(p, SOURCE, 1.0) for p in packets()] + [(b"junk", SOURCE, 1.0)]
    tables, counts, stored, last_bad = parquet()(batch)
    assert counts["bad"] == 1 and counts["raw"] == 2 and counts["control"] == 1 and stored == 6
    assert "shorter than" in last_bad
    pa = pytest.importorskip("pyarrow")
    read = [pa.ipc.open_stream(t).read_all() for _, _, t in tables]  # as they cross the pipe
    assert sum(t.num_rows for t in read) == 6
    rows = sorted((k, d, t.num_rows) for (k, d, _), t in zip(tables, read, strict=True))
    assert rows == [  # the message with no attributes has the arrival time's date
        ("dro", "2023-11-14", 1), ("srs", "2023-11-14", 1), ("ump", "2023-11-14", 1),
        ("ums", "1970-01-01", 1), ("ums", "2023-11-14", 2),
    ]  # fmt: skip


def test_records_the_short_way_are_the_collectors() -> None:
    batch = [(p, SOURCE, 2.0) for p in packets()] + damaged_packets()
    records, counts, last_bad = records_of(batch)
    want, want_counts, want_bad = decode_batch(batch)
    assert counts == want_counts and last_bad == want_bad
    assert len(records) == len(want) > 300
    for got, rec in zip(records, want, strict=True):
        assert (got.kind, got.keys(), got.raw) == (rec.kind, rec.keys(), rec.raw)
        assert got.message == rec.message
