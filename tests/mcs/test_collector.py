"""The MCS core (umcore.monitor.collector): routing by packet type, UM's JSON form of a row,
counting what is not stored, the bounded queue, and the Arrow structure typed from the .proto
descriptors."""

from __future__ import annotations

import base64
import json

import pytest

from umcore.monitor.attributes import MonAttributes, encode_stats
from umcore.monitor.collector import KINDS, Collector, arrow_type, canonical_json, message_row
from umcore.monitor.framing import FORMAT_CSV, AttrType, PacketType, encode_packet, make_module_id
from umcore.monitor.pb import (
    dro_mon_pb2,
    srs_mon_pb2,
    um_mon_control_pb2,
    ump_mon_pb2,
    ums_mon_pb2,
)

ATTRS = MonAttributes(
    application_id="app-1", sender_ipv4="10.1.2.3", timestamp=1_700_000_000, process_id=4242,
    object_id=77, context_instance=bytes(range(8)), domain_id=5,
)  # fmt: skip


def ums_context() -> ums_mon_pb2.UMSMonMsg:
    msg = ums_mon_pb2.UMSMonMsg()
    msg.stats.context.tr_dgrams_sent = 12345678901  # a uint64: a JSON string
    msg.stats.context.fragments_lost = 3
    return msg


def with_source(msg: ums_mon_pb2.UMSMonMsg) -> ums_mon_pb2.UMSMonMsg:
    src = msg.stats.source_transports.add()
    src.source_string = "TCP:10.1.2.3:14390"
    src.tcp.num_clients = 2  # one member of the TransportType oneof
    return msg


def test_canonical_json_is_ums_form() -> None:
    msg = with_source(ums_context())
    packet = encode_stats(PacketType.CONTEXT, msg, ATTRS)
    col = Collector()
    rec = col.receive(packet, "TCP:10.1.2.3:14390", 5.0)
    assert rec is not None and rec.kind == "ums"
    assert ", " not in rec.json and ": " not in rec.json  # compact
    d = json.loads(rec.json)
    assert d["attributes"]["applicationId"] == "app-1"  # lowerCamelCase
    assert d["stats"]["context"]["trDgramsSent"] == "12345678901"  # 64-bit as a string
    assert d["stats"]["context"]["trDgramsRcved"] == "0"  # defaults emitted
    ctxinst = d["attributes"]["contextInstance"]
    assert base64.b64decode(ctxinst) == bytes(range(8))  # bytes as base64
    assert d["stats"]["sourceTransports"][0]["sourceFlag"] == "SOURCE_NORMAL"  # enums by name
    assert d["stats"]["sourceTransports"][0]["tcp"]["numClients"] == "2"  # the oneof member set
    assert "lbtrm" not in d["stats"]["sourceTransports"][0]
    assert rec.json == canonical_json(msg)
    assert (rec.time, rec.application_id, rec.sender, rec.process_id) == (
        1_700_000_000.0, "app-1", "10.1.2.3", 4242,
    )  # fmt: skip
    assert rec.context_instance == bytes(range(8)).hex() and rec.domain_id == 5
    assert rec.source == "TCP:10.1.2.3:14390" and rec.date == "2023-11-14"


@pytest.mark.parametrize(
    ("ptype", "message", "kind"),
    [
        (PacketType.SOURCE, ums_mon_pb2.UMSMonMsg(), "ums"),
        (PacketType.RECEIVER, ums_mon_pb2.UMSMonMsg(), "ums"),
        (PacketType.EVENT_QUEUE, ums_mon_pb2.UMSMonMsg(), "ums"),
        (PacketType.CONTEXT, ums_mon_pb2.UMSMonMsg(), "ums"),
        (PacketType.RECEIVER_TOPIC, ums_mon_pb2.UMSMonMsg(), "ums"),
        (PacketType.WILDCARD_RECEIVER, ums_mon_pb2.UMSMonMsg(), "ums"),
        (PacketType.UMESTORE, ump_mon_pb2.UMPMonMsg(), "ump"),
        (PacketType.GATEWAY, dro_mon_pb2.DROMonMsg(), "dro"),
        (PacketType.SRS, srs_mon_pb2.SRSMonMsg(), "srs"),
    ],
)
def test_each_packet_type_goes_to_its_table(ptype: int, message: object, kind: str) -> None:
    col = Collector()
    rec = col.receive(encode_stats(ptype, message, ATTRS), "src", 1.0)  # type: ignore[arg-type]
    assert rec is not None and rec.kind == kind == KINDS[ptype]
    assert col.counts[kind] == 1 and col.counts["received"] == 1


def test_what_is_not_stored_is_counted() -> None:
    col = Collector()
    assert col.receive(b"\x00\x01 not an lbmmon packet", "src", 1.0) is None
    assert col.counts["bad"] == 1 and "src" in col.last_error
    ctl = um_mon_control_pb2.UMMonControlMsg()
    assert col.receive(encode_stats(PacketType.CONTROL_MESSAGE, ctl, ATTRS), "src", 1.0) is None
    assert col.counts["control"] == 1
    csv_module = make_module_id(FORMAT_CSV, 1).to_bytes(2, "big")
    csv = encode_packet(PacketType.CONTEXT, b"1,2,3", [(AttrType.FORMAT_MODULEID, csv_module)])
    assert col.receive(csv, "src", 1.0) is None
    assert col.counts["raw"] == 1
    assert col.counts["received"] == 3 and col.pending == 0


def test_the_queue_is_bounded_and_batches_come_oldest_first() -> None:
    col = Collector(max_pending=5)
    for i in range(8):
        msg = ums_context()
        msg.stats.context.fragments_lost = i
        col.receive(encode_stats(PacketType.CONTEXT, msg, ATTRS), "src", 1.0)
    assert col.pending == 5 and col.counts["dropped"] == 3 and col.counts["ums"] == 5
    first = col.take_batch(2)
    assert [r.message.stats.context.fragments_lost for r in first] == [0, 1]  # type: ignore[attr-defined]
    rest = col.take_batch(100)
    assert [r.message.stats.context.fragments_lost for r in rest] == [2, 3, 4]  # type: ignore[attr-defined]
    assert col.take_batch(10) == []


def test_arrow_structure_holds_every_message_type() -> None:
    pa = pytest.importorskip("pyarrow")
    for cls in (ums_mon_pb2.UMSMonMsg, ump_mon_pb2.UMPMonMsg, dro_mon_pb2.DROMonMsg, srs_mon_pb2.SRSMonMsg):  # fmt: skip
        row = message_row(cls())
        arr = pa.array([row], type=arrow_type(cls.DESCRIPTOR))  # every default fits its type
        assert arr.to_pylist()[0] == row
    row = message_row(with_source(ums_context()))
    back = pa.array([row], type=arrow_type(ums_mon_pb2.UMSMonMsg.DESCRIPTOR)).to_pylist()[0]
    assert back["stats"]["context"]["tr_dgrams_sent"] == 12345678901
    assert back["stats"]["context"]["fragments_lost"] == 3
    (s,) = back["stats"]["source_transports"]
    assert s["source_string"] == "TCP:10.1.2.3:14390"
    assert s["source_flag"] == "SOURCE_NORMAL"  # an enum by name
    assert s["tcp"]["num_clients"] == 2
    assert s["lbtrm"] is None and s["lbtru"] is None  # the oneof members not set
