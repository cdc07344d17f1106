"""Automatic monitoring, sans-IO parts: settings, transport options, sampling clock, encoding of
samples into UMSMonMsg packets, and the lbmmon text/JSON rendering."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from umcore.config.attributes import Configuration
from umcore.errors import ConfigError
from umcore.monitor.attributes import SOURCE_IM, MonAttributes, decode_stats, encode_stats
from umcore.monitor.framing import AttrType, PacketType, decode_packet
from umcore.monitor.modopts import (
    DEFAULT_TOPIC,
    MonitorSettings,
    monitoring_attributes,
    parse_format_opts,
    parse_transport_opts,
)
from umcore.monitor.pb import srs_mon_pb2, ums_mon_pb2
from umcore.monitor.textfmt import CONTEXT_TABLE, format_json, format_text, title
from umcore.monitor.umsstats import (
    CONTEXT_FIELDS,
    NO_SAMPLE_MIN,
    UINT64_MAX,
    ContextSample,
    SampleClock,
    TransportSample,
    encode_sample,
)

# -- transport and format options -----------------------------------------------------------------


def test_transport_opts_parse_every_kind_of_pair() -> None:
    opts = parse_transport_opts(
        "config=/etc/um/mon.cfg; topic=/my/stats;wctopic=^/x;allow_debug=on;"
        "context|resolver_multicast_port=13000;source|transport=tcp"
    )
    assert opts.config == "/etc/um/mon.cfg"
    assert opts.topic == "/my/stats"
    assert opts.wctopic == "^/x"
    assert opts.allow_debug is True
    assert opts.options == [
        ("context", "resolver_multicast_port", "13000"),
        ("source", "transport", "tcp"),
    ]


def test_transport_opts_defaults() -> None:
    opts = parse_transport_opts("")
    assert (opts.topic, opts.config, opts.wctopic, opts.options) == (DEFAULT_TOPIC, None, None, [])


@pytest.mark.parametrize(
    "text",
    [
        "topic",  # no '='
        "=x",  # no name
        "colour=blue",  # unknown option
        "topic=",  # empty topic
        "config=",  # empty file name
        "daemon|foo=1",  # unknown scope
        "context|no_such_option=1",  # unknown UM option
        "context|resolver_multicast_port=notanumber",  # bad value
        "allow_debug=maybe",
    ],
)
def test_transport_opts_refuse_bad_pairs(text: str) -> None:
    with pytest.raises(ConfigError):
        parse_transport_opts(text)


def test_format_opts() -> None:
    assert parse_format_opts("passthrough=convert") == {"passthrough": "convert"}
    assert parse_format_opts("") == {}
    with pytest.raises(ConfigError):
        parse_format_opts("passthrough=sideways")
    with pytest.raises(ConfigError):
        parse_format_opts("separator=;")


def _getter(values: dict[str, object]):  # type: ignore[no-untyped-def]
    return lambda name: values.get(name)


def test_settings_off_never_checks_the_format() -> None:
    s = MonitorSettings.from_options(_getter({"monitor_interval": 0, "monitor_format": "csv"}))
    assert not s.enabled


def test_settings_refuse_csv_with_the_fix_in_the_message() -> None:
    with pytest.raises(ConfigError) as info:
        MonitorSettings.from_options(_getter({"monitor_interval": 5, "monitor_format": "csv"}))
    assert "monitor_format pb" in str(info.value)


def test_settings_refuse_snmp_transport() -> None:
    with pytest.raises(ConfigError):
        MonitorSettings.from_options(
            _getter({"monitor_interval": 5, "monitor_format": "pb", "monitor_transport": "lbmsnmp"})
        )


def test_settings_pb() -> None:
    s = MonitorSettings.from_options(
        _getter(
            {
                "monitor_interval": 7,
                "monitor_format": "pb",
                "monitor_transport": "lbm",
                "monitor_transport_opts": "topic=/t",
                "monitor_appid": "app1",
            }
        )
    )
    assert (s.enabled, s.interval, s.appid, s.transport_opts.topic) == (True, 7, "app1", "/t")


def test_monitoring_attributes_layering(tmp_path: Path) -> None:
    cfg = Configuration()
    cfg.config_text("context resolver_multicast_port 12001\ncontext monitor_interval 9\n", "t")
    mon_cfg = tmp_path / "mon.cfg"
    mon_cfg.write_text(
        "context resolver_multicast_port 12002\ncontext monitor_interval 3\n"
        "source transport_tcp_port 14999\n"
    )
    opts = parse_transport_opts(f"config={mon_cfg};context|resolver_multicast_ttl=3")
    attrs = monitoring_attributes(opts, cfg)
    ctx = attrs["context"]
    assert ctx.get_typed("resolver_multicast_port") == 12002  # the file over the defaults
    assert ctx.get_typed("resolver_multicast_ttl") == 3  # the pair over the file
    assert ctx.get_typed("monitor_interval") == 0  # never self-monitoring
    assert attrs["source"].get_typed("transport_tcp_port") == 14999
    # The process defaults are not touched by the module's file.
    assert cfg.defaults("context").get_typed("resolver_multicast_port") == 12001
    assert cfg.defaults("source").get_typed("transport_tcp_port") != 14999


def test_monitoring_attributes_bad_file_is_a_config_error(tmp_path: Path) -> None:
    bad = tmp_path / "bad.cfg"
    bad.write_text("context no_such_option 1\n")
    with pytest.raises(ConfigError):
        monitoring_attributes(parse_transport_opts(f"config={bad}"), Configuration())
    with pytest.raises(ConfigError):
        monitoring_attributes(parse_transport_opts(f"config={tmp_path / 'missing'}"))


# -- the sampling clock ---------------------------------------------------------------------------


def test_clock_first_sample_after_one_interval() -> None:
    c = SampleClock(2.0)
    assert c.next_timer() is None and not c.poll(100.0)
    c.start(10.0)
    assert c.next_timer() == 12.0
    assert not c.poll(11.9)
    assert c.poll(12.0)
    assert c.next_timer() == 14.0
    assert c.samples == 1


def test_clock_late_poll_samples_once() -> None:
    c = SampleClock(1.0)
    c.start(0.0)
    assert c.poll(10.5)
    assert not c.poll(10.6)  # no burst of the nine missed samples
    assert c.next_timer() == 11.5
    c.stop()
    assert c.next_timer() is None and not c.poll(99.0)


def test_clock_refuses_zero() -> None:
    with pytest.raises(ValueError):
        SampleClock(0)


# -- encoding -------------------------------------------------------------------------------------


def _attrs() -> MonAttributes:
    return MonAttributes(
        sender_ipv4="10.1.2.3",
        timestamp=1_700_000_000,
        application_id="app-7",
        object_id=0xDEADBEEF,
        process_id=4242,
        context_instance=bytes(range(8)),
    )


def test_one_packet_per_object_in_order() -> None:
    sample = ContextSample(
        {"tr_dgrams_sent": 5},
        [
            TransportSample("receiver", "tcp", "TCP:1.1.1.1:1:00000001", {"lbm_msgs_rcved": 3}),
            TransportSample("source", "tcp", "TCP:2.2.2.2:2:00000002", {"num_clients": 1}),
            TransportSample("source", "lbtrm", "LBTRM:3.3.3.3:3:3:239.1.1.1:4", {"msgs_sent": 9}),
        ],
    )
    packets = [decode_stats(p) for p in encode_sample(sample, _attrs())]
    assert [p.packet_type for p in packets] == [
        PacketType.CONTEXT,
        PacketType.SOURCE,
        PacketType.SOURCE,
        PacketType.RECEIVER,
    ]
    ctx = packets[0].message
    assert ctx is not None
    assert ctx.stats.HasField("context")  # type: ignore[attr-defined]
    assert ctx.stats.context.tr_dgrams_sent == 5  # type: ignore[attr-defined]
    assert not ctx.stats.source_transports and not ctx.stats.receiver_transports  # type: ignore[attr-defined]
    src = packets[2].message.stats.source_transports  # type: ignore[union-attr]
    assert len(src) == 1 and src[0].WhichOneof("TransportType") == "lbtrm"
    assert src[0].lbtrm.msgs_sent == 9
    rcv = packets[3].message.stats.receiver_transports[0]  # type: ignore[union-attr]
    assert rcv.source_string == "TCP:1.1.1.1:1:00000001"
    assert rcv.tcp.lbm_msgs_rcved == 3
    for p in packets:
        assert p.attributes.application_id == "app-7"
        assert p.attributes.object_id == 0xDEADBEEF
        assert p.attributes.process_id == 4242
        assert p.attributes.context_instance == bytes(range(8))


def test_all_zero_members_are_still_selected() -> None:
    sample = ContextSample({}, [TransportSample("source", "tcp", "TCP:x", {})])
    packets = [decode_stats(p) for p in encode_sample(sample, _attrs())]
    assert packets[0].message.stats.HasField("context")  # type: ignore[union-attr]
    ts = packets[1].message.stats.source_transports[0]  # type: ignore[union-attr]
    assert ts.WhichOneof("TransportType") == "tcp"


def test_im_flag_in_attribute_block_and_payload() -> None:
    attrs = _attrs()
    sample = ContextSample(
        {}, [TransportSample("receiver", "tcp", "TCP:x", {"bytes_rcved": 1}, flag=SOURCE_IM)]
    )
    raw = encode_sample(sample, attrs)
    assert attrs.source_flag == 0  # the template is restored
    entries = dict(decode_packet(raw[1]).attributes)
    assert int.from_bytes(entries[AttrType.SOURCE], "big") == SOURCE_IM
    decoded = decode_stats(raw[1])
    assert decoded.attributes.source_flag == SOURCE_IM
    rt = decoded.message.stats.receiver_transports[0]  # type: ignore[union-attr]
    assert rt.source_flag == SOURCE_IM
    assert title(decoded) == "IM receiver statistics received"


def test_values_clamped_to_uint64() -> None:
    sample = ContextSample({"tr_dgrams_sent": -5, "tr_bytes_sent": 1 << 70})
    msg = decode_stats(encode_sample(sample, _attrs())[0]).message
    assert msg.stats.context.tr_dgrams_sent == 0  # type: ignore[union-attr]
    assert msg.stats.context.tr_bytes_sent == UINT64_MAX  # type: ignore[union-attr]


def test_unknown_field_or_kind_is_a_programming_error() -> None:
    with pytest.raises(AttributeError):
        encode_sample(ContextSample({"no_such_counter": 1}), _attrs())
    with pytest.raises(ValueError):
        TransportSample("source", "carrier-pigeon", "x", {})
    with pytest.raises(ValueError):
        TransportSample("sideways", "tcp", "x", {})


@settings(max_examples=100, deadline=None)
@given(st.lists(st.integers(0, UINT64_MAX), min_size=len(CONTEXT_FIELDS), max_size=24))
def test_context_values_round_trip(values: list[int]) -> None:
    fields = dict(zip(CONTEXT_FIELDS, values, strict=False))
    msg = decode_stats(encode_sample(ContextSample(fields), _attrs())[0]).message
    got = {f: getattr(msg.stats.context, f) for f in CONTEXT_FIELDS}  # type: ignore[union-attr]
    assert got == fields


# -- text and JSON rendering ----------------------------------------------------------------------


def _ctime(ts: float) -> str:
    return f"<t={int(ts)}>"


def test_context_text_has_every_label_aligned() -> None:
    fields = {f: i + 1 for i, f in enumerate(CONTEXT_FIELDS)}
    fields["rcv_cb_svc_time_min"] = NO_SAMPLE_MIN
    sm = decode_stats(encode_sample(ContextSample(fields), _attrs())[0])
    text = format_text(sm, ctime=_ctime)
    lines = text.split("\n")
    assert lines[0] == ""
    assert lines[1] == (
        "Context statistics received from app-7 at 10.1.2.3, process ID=1092, "
        "object ID=deadbeef, context instance=0001020304050607, domain ID=0, "
        "sent <t=1700000000>"
    )
    body = lines[2:-1]
    assert len(body) == len(CONTEXT_TABLE)
    colons = {line.index(": ") for line in body}
    assert len(colons) == 1  # one column for every value
    by_label = {line.split(":")[0].strip(): line.rsplit(": ", 1)[1] for line in body}
    for field, label, _ in CONTEXT_TABLE:
        assert by_label[label] == str(fields[field])


def test_transport_text() -> None:
    sample = ContextSample(
        {},
        [
            TransportSample("source", "tcp", "TCP:2.2.2.2:2:00000002", {"num_clients": 3}),
            TransportSample(
                "receiver", "lbtrm", "LBTRM:x", {"nak_stm_max": 12, "lbm_msgs_rcved": 77}
            ),
        ],
    )
    src, rcv = (decode_stats(p) for p in encode_sample(sample, _attrs())[1:])
    text = format_text(src, ctime=_ctime)
    assert "\nSource statistics received from app-7" in text
    assert "Source: TCP:2.2.2.2:2:00000002\nTransport: TCP\n" in text
    assert "\tClients       : 3\n" in text
    text = format_text(rcv, ctime=_ctime)
    assert "Transport: LBT-RM\n" in text
    assert "Loss recovery maximum time" in text and ": 12ms\n" in text
    assert any(
        line.startswith("\tLBT-RM LBM messages received ") and line.endswith(": 77")
        for line in text.splitlines()
    )


def test_srs_stats_text_and_json() -> None:
    msg = srs_mon_pb2.SRSMonMsg()
    msg.stats.srs.active_clients_count = 4
    msg.stats.srs.clients_connects_count = 11
    attrs = MonAttributes(application_id="srs1", sender_ipv4="127.0.0.1", timestamp=5)
    sm = decode_stats(encode_stats(PacketType.SRS, msg, attrs))
    text = format_text(sm, ctime=_ctime)
    assert text.startswith("\nSRS statistics received from srs1 at 127.0.0.1")
    assert "domain ID" not in text.splitlines()[1]
    assert "\n\t--- stats ---\n\t\t--- srs ---\n" in text
    assert "\n\t\t\tactive_clients_count = 4\n" in text
    assert "\n\t\t\tclients_connects_count = 11\n" in text
    obj = json.loads(format_json(sm))
    assert obj["packetType"] == "SRS"
    assert obj["attributes"]["applicationId"] == "srs1"
    assert obj["message"]["stats"]["srs"]["activeClientsCount"] == "4"


def test_config_message_title() -> None:
    msg = srs_mon_pb2.SRSMonMsg()
    msg.configs.version = "6.16"
    sm = decode_stats(encode_stats(PacketType.SRS, msg, MonAttributes()))
    assert title(sm) == "SRS configuration received"


def test_ums_json_uses_mcs_conventions() -> None:
    sample = ContextSample({"tr_src_topics": 2})
    obj = json.loads(format_json(decode_stats(encode_sample(sample, _attrs())[0])))
    assert obj["packetType"] == "CONTEXT"
    ctx = obj["message"]["stats"]["context"]
    assert ctx["trSrcTopics"] == "2"  # 64-bit integers as strings
    assert ctx["trDgramsSent"] == "0"  # defaults included
    assert obj["message"]["stats"]["receiverTransports"] == []


def test_raw_payload_of_another_format_module() -> None:
    from umcore.monitor.framing import encode_packet

    attrs = MonAttributes(module_id=0x0101)  # CSV
    raw = encode_packet(PacketType.CONTEXT, b"1,2,3", attrs.to_entries())
    sm = decode_stats(raw)
    assert sm.message is None
    assert "\t1,2,3" in format_text(sm, ctime=_ctime)
    assert json.loads(format_json(sm))["raw"] == b"1,2,3".hex()


def test_event_queue_text_units() -> None:
    msg = ums_mon_pb2.UMSMonMsg()
    eq = msg.stats.event_queues.add()
    eq.data_msgs_svc_max = 31
    eq.age_mean = 5
    sm = decode_stats(encode_stats(PacketType.EVENT_QUEUE, msg, MonAttributes()))
    text = format_text(sm, ctime=_ctime)
    assert text.splitlines()[1].startswith("Event queue statistics received")
    assert "domain ID" not in text.splitlines()[1]
    lines = {line.split(":")[0].strip(): line.rsplit(": ", 1)[1] for line in text.splitlines()[2:]}
    assert lines["Data message service maximum time"] == "31us"
    assert lines["Event latency mean time"] == "5us"
    assert lines["Total I/O events enqueued"] == "0"


def test_unframed_json_only_for_json_objects() -> None:
    from umcore.monitor.textfmt import format_unframed_json

    for bad in (b"", b"not json", b"[1,2]", b"{broken", b"\xff{", b"{" * 50 + b"}" * 50):
        assert format_unframed_json(bad, "TCP:x") is None, bad
    deep = b'{"a":' * 40 + b"1" + b"}" * 40
    assert format_unframed_json(deep, "TCP:x") is None
    text = format_unframed_json(b'{"monitorInfoCategory":"CONFIG_OPTS","x":[1]}', "TCP:y")
    assert text == (
        "\nJSON statistics received from TCP:y\n\tmonitorInfoCategory = CONFIG_OPTS\n\tx = [1]\n"
    )
    line = format_unframed_json(b'{"a":1}', "TCP:y", as_json=True)
    assert line is not None and json.loads(line) == {
        "packetType": "JSON",
        "source": "TCP:y",
        "message": {"a": 1},
    }
