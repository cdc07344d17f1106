"""Our .proto files against the notes' field tables, and the JSON names MCS shows for real UM."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from google.protobuf import json_format
from google.protobuf.descriptor import Descriptor, FieldDescriptor

from umcore.monitor.pb import (
    dro_mon_pb2,
    srs_mon_pb2,
    um_mon_attributes_pb2,
    um_mon_control_pb2,
    ump_mon_pb2,
    ums_mon_pb2,
)

T = FieldDescriptor
TYPE_NAMES = {
    T.TYPE_UINT64: "uint64",
    T.TYPE_UINT32: "uint32",
    T.TYPE_INT32: "int32",
    T.TYPE_STRING: "string",
    T.TYPE_BYTES: "bytes",
}

# Written from the notes' tables (dro-monitoring-config.md A15/B4, seed-srs-lbmrd.md part 3,
# persistence-store.md 4.2) for the messages every consumer touches first.
SRS_STATS_FIELDS = [
    "clients_next_client_id",
    "active_clients_count",
    "clients_connects_count",
    "clients_disconnects_count",
    "clients_max_concurrent_connections_count",
    "clients_active_sir_count",
    "clients_active_rir_count",
    "clients_active_wir_count",
    "clients_inactive_sir_count",
    "clients_inactive_rir_count",
    "clients_inactive_wir_count",
    "clients_expired_sir_count",
    "clients_expired_rir_count",
    "clients_expired_wir_count",
    "clients_dr_inactive_sir_count",
    "clients_slr_no_otid_match_count",
    "clients_active_cnir_count",
    "clients_inactive_cnir_count",
    "clients_expired_cnir_count",
    "clients_duplicate_cnir_count",
    "clients_active_dir_count",
    "clients_inactive_dir_count",
    "clients_expired_dir_count",
    "clients_active_rtir_count",
    "clients_inactive_rtir_count",
    "clients_expired_rtir_count",
]

CRITICAL: dict[str, dict[str, tuple[int, str]]] = {
    "lbmmon.UMMonAttributes": {
        "sender_ipv4_address": (1, "string"),
        "timestamp": (2, "uint64"),
        "application_id": (3, "string"),
        "object_id": (4, "uint64"),
        "process_id": (5, "uint64"),
        "context_instance": (6, "bytes"),
        "domain_id": (7, "uint32"),
    },
    "lbmmon.UMMonControlMsg": {
        "command": (1, "Command"),
        "node_type": (2, "NodeType"),
        "application_id": (3, "string"),
        "data": (4, "string"),
    },
    "lbmmon.SRSMonMsg": {
        "attributes": (1, "UMMonAttributes"),
        "configs": (2, "Configs"),
        "stats": (3, "Stats"),
        "events": (4, "Events"),
    },
    "lbmmon.SRSMonMsg.Stats": {
        "srs": (1, "SRS"),
        "srs_error": (2, "SRSError"),
        "um_client": (3, "UMClient"),
        "um_client_error": (4, "UMClientError"),
    },
    "lbmmon.SRSMonMsg.Stats.SRS": {f: (i, "uint64") for i, f in enumerate(SRS_STATS_FIELDS, 1)},
    "lbmmon.SRSMonMsg.UMClientInfo": {
        "ip": (1, "string"),
        "port": (2, "uint32"),
        "session_id": (3, "string"),
    },
    "lbmmon.UMSMonMsg": {
        "attributes": (1, "UMMonAttributes"),
        "stats": (2, "Stats"),
        "events": (3, "Events"),
    },
    "lbmmon.UMSMonMsg.Stats": {
        "context": (1, "Context"),
        "receiver_transports": (2, "ReceiverTransport"),
        "source_transports": (3, "SourceTransport"),
        "event_queues": (4, "EventQueue"),
    },
    "lbmmon.UMSMonMsg.Stats.SourceTransport": {
        "source_string": (1, "string"),
        "source_flag": (2, "SourceType"),
        "tcp": (3, "TCP"),
        "lbtrm": (4, "LBTRM"),
        "lbtru": (5, "LBTRU"),
        "lbtipc": (6, "LBTIPC"),
        "lbtsmx": (7, "LBTSMX"),
    },
    "lbmmon.UMPMonMsg": {
        "attributes": (1, "UMMonAttributes"),
        "configs": (2, "Configs"),
        "stats": (3, "Stats"),
        "events": (4, "Events"),
    },
    "lbmmon.DROMonMsg": {
        "attributes": (1, "UMMonAttributes"),
        "configs": (2, "Configs"),
        "stats": (3, "Stats"),
    },
    "lbmmon.DROMonMsg.Stats.Portal.Peer": {
        "adjacent_gateway_id": (1, "uint64"),
        "interest_topics": (2, "uint32"),
        "interest_pcre_patterns": (3, "uint32"),
        "interest_regex_patterns": (4, "uint32"),
        "receive": (10, "Receive"),
        "send": (11, "Send"),
        "udp_receive": (12, "UDPReceive"),
        "udp_send": (13, "UDPSend"),
    },
}

ONEOFS = {
    ("lbmmon.UMSMonMsg.Stats.ReceiverTransport", "TransportType"): {
        "tcp",
        "lbtrm",
        "lbtru",
        "lbtipc",
        "lbtsmx",
    },
    ("lbmmon.UMSMonMsg.Stats.SourceTransport", "TransportType"): {
        "tcp",
        "lbtrm",
        "lbtru",
        "lbtipc",
        "lbtsmx",
    },
    ("lbmmon.DROMonMsg.Stats.Portal", "PortalType"): {"endpoint", "peer"},
    ("lbmmon.DROMonMsg.Stats.OtherGateway.OtherPortal", "PortalType"): {
        "adjacent_domain_id",
        "adjacent_gateway_id",
    },
}

ROOTS = [
    um_mon_attributes_pb2.UMMonAttributes,
    um_mon_control_pb2.UMMonControlMsg,
    ums_mon_pb2.UMSMonMsg,
    ump_mon_pb2.UMPMonMsg,
    dro_mon_pb2.DROMonMsg,
    srs_mon_pb2.SRSMonMsg,
]


def _all_descriptors() -> dict[str, Descriptor]:
    out: dict[str, Descriptor] = {}

    def walk(d: Descriptor) -> None:
        out[d.full_name] = d
        for n in d.nested_types:
            walk(n)

    for cls in ROOTS:
        walk(cls.DESCRIPTOR)
    return out


def _type_name(fd: FieldDescriptor) -> str:
    if fd.message_type is not None:
        return str(fd.message_type.name)
    if fd.enum_type is not None:
        return str(fd.enum_type.name)
    return TYPE_NAMES[fd.type]


@pytest.mark.parametrize("full_name", sorted(CRITICAL))
def test_critical_messages_match_the_notes(full_name: str) -> None:
    d = _all_descriptors()[full_name]
    got = {f.name: (f.number, _type_name(f)) for f in d.fields}
    assert got == CRITICAL[full_name]


def test_oneofs() -> None:
    descs = _all_descriptors()
    for (msg, oneof), members in ONEOFS.items():
        o = descs[msg].oneofs_by_name[oneof]
        assert {f.name for f in o.fields} == members


def test_package_and_java_options() -> None:
    for cls in ROOTS:
        fd = cls.DESCRIPTOR.file
        assert fd.package == "lbmmon"
        opts = fd.GetOptions()
        assert opts.java_outer_classname.endswith("Protos")
        expected_pkg = "" if cls is um_mon_control_pb2.UMMonControlMsg else "com.latencybusters.lbm"
        assert opts.java_package == expected_pkg


# -- every table of the notes, when the notes are at hand ------------------------------------------

SPEC = Path("/work/shared/spec")


def _notes_fields() -> dict[tuple[str, str], tuple[int, str]]:
    """(message, field) -> (number, type) from the markdown tables of the notes."""
    rows: dict[tuple[str, str], tuple[int, str]] = {}
    text = (SPEC / "dro-monitoring-config.md").read_text("utf-8")
    cur = None
    kind = None
    for line in text.splitlines():
        m = re.match(r"\*\*([\w.]+)\*\* \((message|enum|oneof)\)", line)
        if m:
            cur, kind = m.group(1), m.group(2)
            continue
        m = re.match(r"\| (\d+) \| `(\w+)` \| (.+?) \|$", line)
        if m and cur and kind != "enum":
            owner = cur.rsplit(".", 1)[0] if kind == "oneof" else cur
            ftype = m.group(3).removeprefix("repeated ").strip()
            rows[(owner, m.group(2))] = (int(m.group(1)), ftype)
    srs = (SPEC / "seed-srs-lbmrd.md").read_text("utf-8")
    for line in srs.splitlines():
        m = re.match(r"\| (SRSMonMsg[\w.]*) \| (\w+) \| (\d+) \| ([\w.]+)", line)
        if m:
            rows[(m.group(1), m.group(2))] = (int(m.group(3)), m.group(4).rsplit(".", 1)[-1])
    ump = (SPEC / "persistence-store.md").read_text("utf-8")
    section = ump[ump.index("| UMPMonMsg | attributes") : ump.index("Events.EventType: NON_EVENT")]
    owner = ""
    for line in section.splitlines():
        m = re.match(r"\|\s*([\w.]*)\s*\| (\w+) \| (\d+) \| (?:repeated )?(\w+)", line)
        if not m:
            continue
        if m.group(1):
            owner = m.group(1)
        full = owner if owner.startswith(("UMPMonMsg", "UMMonAttributes")) else ""
        if not full:
            # The table abbreviates nesting: Configs, TopicConfig.RepoConfig, SrcRepoStat.RcvStat...
            full = {
                "Configs": "UMPMonMsg.Configs",
                "Configs.PatternConfig": "UMPMonMsg.Configs.PatternConfig",
                "Configs.TopicConfig": "UMPMonMsg.Configs.TopicConfig",
                "TopicConfig.RepoConfig": "UMPMonMsg.Configs.TopicConfig.RepoConfig",
                "RepoConfig.RcvConfig": "UMPMonMsg.Configs.TopicConfig.RepoConfig.RcvConfig",
                "Stats": "UMPMonMsg.Stats",
                "Stats.SmartHeapStat": "UMPMonMsg.Stats.SmartHeapStat",
                "Stats.SrcRepoStat": "UMPMonMsg.Stats.SrcRepoStat",
                "SrcRepoStat.SrcDiskStat": "UMPMonMsg.Stats.SrcRepoStat.SrcDiskStat",
                "SrcRepoStat.RcvStat": "UMPMonMsg.Stats.SrcRepoStat.RcvStat",
                "Events": "UMPMonMsg.Events",
                "Events.Event": "UMPMonMsg.Events.Event",
            }[owner]
        rows[(full, m.group(2))] = (int(m.group(3)), m.group(4))
    return rows


@pytest.mark.skipif(not SPEC.is_dir(), reason="the notes (/work/shared/spec) are not here")
def test_every_field_of_the_notes_tables() -> None:
    rows = _notes_fields()
    assert len(rows) > 600  # the tables were found
    descs = _all_descriptors()
    ours = {
        (name.removeprefix("lbmmon."), f.name): (f.number, _type_name(f))
        for name, d in descs.items()
        for f in d.fields
    }
    assert rows == ours


# -- encodings and JSON --------------------------------------------------------------------------


def test_encoding_sanity_vector() -> None:
    # seed-srs-lbmrd.md part 3: SRSMonMsg{stats{srs{active_clients_count: 4}}}
    msg = srs_mon_pb2.SRSMonMsg()
    msg.stats.srs.active_clients_count = 4
    assert msg.SerializeToString() == bytes.fromhex("1a040a021004")


def _mcs_json(msg: object) -> dict[str, object]:
    return json.loads(  # type: ignore[no-any-return]
        json_format.MessageToJson(msg, always_print_fields_with_no_presence=True)  # type: ignore[arg-type]
    )


def test_srs_json_names_as_mcs_shows_them() -> None:
    msg = srs_mon_pb2.SRSMonMsg()
    msg.attributes.application_id = "srs1"
    msg.attributes.timestamp = 1693260077
    msg.stats.srs.clients_next_client_id = 5
    doc = _mcs_json(msg)
    srs = doc["stats"]["srs"]  # type: ignore[index]
    assert srs["clientsNextClientId"] == "5"  # uint64 -> JSON string
    assert srs["clientsActiveRtirCount"] == "0"  # zero values present
    assert len(srs) == 26
    attrs = doc["attributes"]
    assert attrs == {  # type: ignore[comparison-overlap]
        "senderIpv4Address": "",
        "timestamp": "1693260077",
        "applicationId": "srs1",
        "objectId": "0",
        "processId": "0",
        "contextInstance": "",
        "domainId": 0,  # uint32 -> JSON number
    }
    client = srs_mon_pb2.SRSMonMsg()
    client.stats.um_client.um_client_info.port = 14391
    info = _mcs_json(client)["stats"]["umClient"]["umClientInfo"]  # type: ignore[index]
    assert info == {"ip": "", "port": 14391, "sessionId": ""}


def test_ums_json_conventions() -> None:
    msg = ums_mon_pb2.UMSMonMsg()
    msg.attributes.context_instance = bytes.fromhex("50b2e6602af36a93")
    st = msg.stats.source_transports.add()
    st.source_string = "LBTRM:10.29.4.101:14392:6f80ecc8:239.101.3.2:14400"
    st.source_flag = ums_mon_pb2.UMSMonMsg.Stats.SourceTransport.SOURCE_IM
    st.lbtrm.msgs_sent = 7
    doc = _mcs_json(msg)
    assert doc["attributes"]["contextInstance"] == "ULLmYCrzapM="  # type: ignore[index]
    stats = doc["stats"]
    assert stats["receiverTransports"] == []  # type: ignore[index]
    assert stats["eventQueues"] == []  # type: ignore[index]
    src = stats["sourceTransports"][0]  # type: ignore[index]
    assert src["sourceFlag"] == "SOURCE_IM"
    assert src["lbtrm"]["msgsSent"] == "7"
    assert "tcp" not in src  # only the oneof member that is set


# A row in the shape MCS stores (mcs_demo output/mcs.out conventions), written for this test.
MCS_STYLE_ROW = (
    '{"attributes":{"senderIpv4Address":"10.0.3.7","timestamp":"1700000000",'
    '"applicationId":"dro1","objectId":"0","processId":"4242","contextInstance":"","domainId":0},'
    '"stats":{"local":{"gatewayName":"dro1","gatewayId":"12345","version":2,'
    '"topologySignature":3,"recalcDurationSec":"0","recalcDurationUsec":"250","graphVersion":1,'
    '"gatewayCount":1,"trdCount":2,"mallocInfo":{"arena":1,"ordblks":2,"hblks":3,"hblkhd":4,'
    '"uordblks":5,"fordblks":6}},"portals":[{"portalName":"TRD1","portalIndex":0,"cost":1,'
    '"proxyReceivers":0,"receiverTopics":0,"receiverPcrePatterns":0,"receiverRegexPatterns":0,'
    '"proxySources":0,"recalcDurationSec":"0","recalcDurationUsec":"0",'
    '"proxyRecRecalcDurationSec":"0","proxyRecRecalcDurationUsec":"0","endpoint":{"domainId":1,'
    '"localInterestTopics":0,"localInterestPcrePatterns":0,"localInterestRegexPatterns":0,'
    '"remoteInterestTopics":0,"remoteInterestPcrePatterns":0,"remoteInterestRegexPatterns":0}}],'
    '"otherGateways":[]}}'
)


def test_mcs_style_row_round_trips() -> None:
    msg = json_format.Parse(MCS_STYLE_ROW, dro_mon_pb2.DROMonMsg())
    assert msg.stats.portals[0].WhichOneof("PortalType") == "endpoint"
    assert msg.stats.local.malloc_info.fordblks == 6
    again = dro_mon_pb2.DROMonMsg()
    again.ParseFromString(msg.SerializeToString())
    assert again == msg
    assert _mcs_json(again) == json.loads(MCS_STYLE_ROW)


def test_every_message_round_trips_populated() -> None:
    """Set every scalar field of every message to a distinct value; bytes survive both ways."""
    for cls in ROOTS:
        msg = cls()
        _fill(msg, counter=[1])
        data = msg.SerializeToString()
        back = cls()
        back.ParseFromString(data)
        assert back == msg
        assert back.SerializeToString() == data


def _fill(msg: object, counter: list[int], depth: int = 0) -> None:
    d = msg.DESCRIPTOR  # type: ignore[attr-defined]
    for oneof in d.oneofs:  # fill the first member of each oneof only
        first = oneof.fields[0]
        if first.message_type is not None:
            _fill(getattr(msg, first.name), counter, depth + 1)
        else:
            setattr(msg, first.name, 99)
    in_oneof = {f.name for o in d.oneofs for f in o.fields}
    for f in d.fields:
        if f.name in in_oneof:
            continue
        counter[0] += 1
        n = counter[0]
        if f.message_type is not None:
            if depth > 6:
                continue
            target = getattr(msg, f.name).add() if f.is_repeated else getattr(msg, f.name)
            _fill(target, counter, depth + 1)
        elif f.is_repeated:
            getattr(msg, f.name).append(n)
        elif f.enum_type is not None:
            setattr(msg, f.name, f.enum_type.values[-1].number)
        elif f.type == T.TYPE_STRING:
            setattr(msg, f.name, f"s{n}")
        elif f.type == T.TYPE_BYTES:
            setattr(msg, f.name, bytes([n % 256]) * 8)
        else:
            setattr(msg, f.name, n)
