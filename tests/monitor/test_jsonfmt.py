"""The SRS's JSON statistics format: strict JSON, envelopes, names, changed-only rule."""

from __future__ import annotations

import json
import re
from typing import Any

import pytest

from umcore.errors import LocalProtocolError
from umcore.monitor import jsonfmt
from umcore.monitor.categories import Category
from umcore.monitor.jsonfmt import ChangeFilter, Registration
from umcore.monitor.pb import srs_mon_pb2


def strict_loads(data: bytes) -> Any:
    """Parse as strict JSON: no NaN/Infinity, no trailing commas, ASCII only."""

    def refuse(name: str) -> Any:
        raise ValueError(f"non-standard constant {name}")

    text = data.decode("ascii")
    assert not re.search(r",\s*[\]}]", text), "trailing comma"
    return json.loads(text, parse_constant=refuse)


REG = Registration("10.29.4.121", 14391, 0x5A3B)


def test_srs_stats_envelope() -> None:
    msg = jsonfmt.stats_message(Category.SRS_STATS, {"active.clients.count": 4})
    doc = strict_loads(jsonfmt.dumps(msg))
    assert doc == {
        "monitorInfoCategory": "SRS_STATS",
        "stats": [{"name": "active.clients.count", "value": 4}],
    }


def test_per_client_envelope_has_registration_with_string_port() -> None:
    msg = jsonfmt.stats_message(Category.UM_CLIENT_STATS, {"client.SIR.received.count": 1}, REG)
    doc = strict_loads(jsonfmt.dumps(msg))
    assert doc["srsRegistrationInfo"] == {
        "ip": "10.29.4.121",
        "port": "14391",
        "sessionId": "0x5a3b",
    }
    with pytest.raises(LocalProtocolError):
        jsonfmt.stats_message(Category.UM_CLIENT_STATS, {})
    with pytest.raises(LocalProtocolError):
        jsonfmt.stats_message(Category.SRS_STATS, {}, REG)
    with pytest.raises(LocalProtocolError):
        jsonfmt.stats_message(Category.CONFIG_OPTS, {})


def test_config_envelope_values_are_strings() -> None:
    msg = jsonfmt.config_message(Category.CONFIG_OPTS, {"um-srs.srs.port": 27000})  # type: ignore[dict-item]
    doc = strict_loads(jsonfmt.dumps(msg))
    assert doc == {
        "monitorInfoCategory": "CONFIG_OPTS",
        "configOptions": [{"name": "um-srs.srs.port", "value": "27000"}],
    }
    with pytest.raises(LocalProtocolError):
        jsonfmt.config_message(Category.SRS_STATS, {})


def test_connection_events() -> None:
    when = 1548289706.0  # 2019-01-24 00:28:26 UTC
    connect = strict_loads(jsonfmt.dumps(jsonfmt.connection_event("UM_CLIENT_CONNECT", REG, when)))
    assert connect["monitorInfoCategory"] == "CONNECTION_EVENTS"
    assert connect["connectionEventType"] == "UM_CLIENT_CONNECT"
    assert connect["srsRegistrationInfo"]["port"] == "14391"
    assert connect["events"] == [
        {
            "connectionEventType": "UM_CLIENT_CONNECT",
            "connectionEventTime": "Thu Jan 24 00:28:26 UTC 2019",
        }
    ]
    gone = jsonfmt.connection_event("UM_CLIENT_DISCONNECT", REG, when)
    assert gone["events"][0]["srsRegistrationInfo"] == REG.to_json()
    sir = jsonfmt.connection_event(
        "SIR", REG, when, topic="AAA", source="LBTRM:10.0.0.1:14390:6f80ecc8:239.101.3.2:14400"
    )
    assert len(sir["events"]) == 1
    assert sir["events"][0]["topic"] == "AAA" and sir["events"][0]["source"].startswith("LBTRM:")
    with pytest.raises(LocalProtocolError):
        jsonfmt.connection_event("SDR", REG, when)
    with pytest.raises(LocalProtocolError):
        jsonfmt.connection_event("SER", REG, when, topic="a", source="b")


def test_java_date() -> None:
    assert jsonfmt.java_date(0.0) == "Thu Jan 01 00:00:00 UTC 1970"


@pytest.mark.parametrize(
    ("category", "message"),
    [
        (Category.SRS_STATS, srs_mon_pb2.SRSMonMsg.Stats.SRS),
        (Category.SRS_ERROR_STATS, srs_mon_pb2.SRSMonMsg.Stats.SRSError),
        (Category.UM_CLIENT_STATS, srs_mon_pb2.SRSMonMsg.Stats.UMClient),
        (Category.UM_CLIENT_ERROR_STATS, srs_mon_pb2.SRSMonMsg.Stats.UMClientError),
    ],
)
def test_name_tables_cover_every_protobuf_counter(category: Category, message: Any) -> None:
    table = jsonfmt.STATS_NAMES[category]
    pb_fields = [f.name for f in message.DESCRIPTOR.fields if f.name != "um_client_info"]
    assert [pb for _, pb in table] == pb_fields  # same fields, in field-number order
    assert len({name for name, _ in table}) == len(table)
    msg = message()
    for i, field in enumerate(pb_fields, 1):
        setattr(msg, field, i * 10)
    values = jsonfmt.stats_from_pb(category, msg)
    assert list(values.values()) == [i * 10 for i in range(1, len(pb_fields) + 1)]


def test_config_names_map_onto_configs_fields() -> None:
    configs = srs_mon_pb2.SRSMonMsg.Configs
    names = {f.name for f in configs.DESCRIPTOR.fields}
    mapped = {pb for _, pb in jsonfmt.CONFIG_OPTS_NAMES}
    assert mapped == names - {"daemon_monitor_lbm_attributes", "internal"}
    internal = {f.name for f in configs.Internal.DESCRIPTOR.fields}
    assert {pb for _, pb in jsonfmt.INTERNAL_CONFIG_OPTS_NAMES} == internal
    cfg = configs(srs_port="27000", daemon_monitor_publishing_interval_srs_stats="5000")
    attr = cfg.daemon_monitor_lbm_attributes.add()
    attr.scope, attr.name, attr.value = "context", "context_name", "statsLbmContext"
    cfg.internal.srs_otidmap_shards = "4"
    out = jsonfmt.config_from_pb(cfg)
    assert out["um-srs.srs.port"] == "27000"
    assert out["um-srs.daemon-monitor.publishing-interval.srs-stats"] == "5000"
    assert out["um-srs.daemon-monitor.lbm-attributes.context.context_name"] == "statsLbmContext"
    assert jsonfmt.internal_config_from_pb(cfg)["um-srs.srs.otidmap.shards"] == "4"


def test_changed_only_rule() -> None:
    f = ChangeFilter()
    first = {"active.clients.count": 1, "clients.connects.count": 1}
    assert f.filter(Category.SRS_STATS, first) == list(first.items())  # never published: all
    assert f.filter(Category.SRS_STATS, first) is None  # nothing changed: not published
    second = {"active.clients.count": 1, "clients.connects.count": 2}
    assert f.filter(Category.SRS_STATS, second) == [("clients.connects.count", 2)]
    assert f.filter(Category.SRS_STATS, second, snapshot=True) == list(second.items())
    # Per-client objects are tracked separately and forgotten when the client leaves.
    assert f.filter(Category.UM_CLIENT_STATS, {"a": 1}, REG.key()) == [("a", 1)]
    assert f.filter(Category.UM_CLIENT_STATS, {"a": 1}, REG.key()) is None
    f.forget_object(REG.key())
    assert f.filter(Category.UM_CLIENT_STATS, {"a": 1}, REG.key()) == [("a", 1)]


def test_change_filter_is_bounded() -> None:
    f = ChangeFilter(max_tracked=3)
    for i in range(10):
        assert f.filter(Category.UM_CLIENT_STATS, {"a": 1}, i) == [("a", 1)]
    assert len(f) == 3 and f.untracked == 7


def test_per_client_messages_only_for_changes() -> None:
    f = ChangeFilter()
    other = Registration("10.0.0.2", 1, 2)
    clients = [(REG, {"x": 1}), (other, {"x": 5})]
    assert len(jsonfmt.per_client_messages(Category.UM_CLIENT_STATS, clients, f)) == 2
    clients = [(REG, {"x": 2}), (other, {"x": 5})]
    out = jsonfmt.per_client_messages(Category.UM_CLIENT_STATS, clients, f)
    assert [m["srsRegistrationInfo"]["ip"] for m in out] == ["10.29.4.121"]
    assert out[0]["stats"] == [{"name": "x", "value": 2}]
    for m in out:
        strict_loads(jsonfmt.dumps(m))


def test_dumps_refuses_nan() -> None:
    with pytest.raises(ValueError):
        jsonfmt.dumps({"v": float("nan")})
