"""The option registry and the value types."""

from __future__ import annotations

import pytest

from umcore.config.options import REGISTRY, all_options, lookup, normalize_scope
from umcore.config.values import (
    CLEAR,
    INTERFACE,
    RESOLVER_SERVICE_LIST,
    SESSION_ID,
    STORE_GROUP_LIST,
    STORE_LIST,
    UNICAST_DAEMON_LIST,
    BadValue,
    Interface,
    ResolverEntry,
    StoreEntry,
)
from umcore.errors import ConfigError

OPTIONS = all_options()


@pytest.mark.parametrize("opt", OPTIONS, ids=[f"{o.scope}-{o.name}" for o in OPTIONS])
def test_default_parses_and_prints_back(opt):
    assert opt.type.format(opt.type.parse(opt.default)) == opt.default


def test_registry_covers_the_notes_groups():
    # C4.1-C4.20 list 303 rows; seeds add monitoring, event queue, MIM, HF and LBT-IPC options.
    assert len(OPTIONS) >= 300
    for scope, name in [
        ("context", "resolver_unicast_daemon"),
        ("context", "resolver_service"),
        ("source", "ume_store"),
        ("receiver", "use_otr"),
        ("wildcard_receiver", "pattern_type"),
        ("source", "implicit_batching_interval"),
        ("receiver", "delivery_control_maximum_burst_loss"),
        ("context", "mim_outgoing_address"),
        ("context", "monitor_interval"),
    ]:
        assert name in REGISTRY[scope]


def test_documented_defaults():
    assert REGISTRY["context"]["request_tcp_port_low"].default == "14391"
    assert REGISTRY["context"]["resolver_multicast_address"].default == "224.9.10.11"
    assert REGISTRY["receiver"]["transport_lbtru_port_low"].default == "14360"
    assert REGISTRY["context"]["transport_lbtru_port_low"].default == "14380"
    assert REGISTRY["context"]["transport_lbtrm_rate_interval"].default == "10"
    assert REGISTRY["context"]["mim_incoming_address"].default == "0.0.0.0"


def test_lookup_is_case_insensitive_and_suggests():
    assert lookup("context", "Transport_TCP_Port_Low").name == "transport_tcp_port_low"
    with pytest.raises(ConfigError) as exc:
        lookup("context", "resolver_unicst_daemon", source="f.cfg", line=3)
    assert "resolver_unicast_daemon" in str(exc.value)
    assert "f.cfg:3" in str(exc.value)
    with pytest.raises(ConfigError, match="receiver option"):
        lookup("source", "use_otr")
    assert normalize_scope("Wildcard-Receiver") == "wildcard_receiver"
    with pytest.raises(ConfigError, match="unknown scope"):
        normalize_scope("topic")


def test_unicast_daemon_list_accumulates_and_clears():
    t = UNICAST_DAEMON_LIST
    value = t.merge((), t.parse("10.1.1.1:15380"))
    value = t.merge(value, t.parse('"eth0":1234->10.1.1.2:15380,10.1.1.3:15380'))
    assert value == (
        ResolverEntry("10.1.1.1", 15380),
        ResolverEntry("10.1.1.2", 15380, Interface("device", "eth0"), 1234),
        ResolverEntry("10.1.1.3", 15380),
    )
    assert t.format(value) == '10.1.1.1:15380,"eth0":1234->10.1.1.2:15380,10.1.1.3:15380'
    assert t.merge(value, t.parse("0.0.0.0:0")) == ()
    assert t.parse("10.29.3.0/24->10.1.1.1:1") == (
        ResolverEntry("10.1.1.1", 1, Interface("cidr", "10.29.3.0", 24)),
    )
    assert t.parse("0.0.0.0:0") == (CLEAR,)


def test_resolver_service_at_most_five():
    t = RESOLVER_SERVICE_LIST
    five = t.merge((), t.parse(",".join(f"10.0.0.{i}:27000" for i in range(1, 6))))
    assert len(five) == 5
    with pytest.raises(BadValue, match="at most 5"):
        t.merge(five, t.parse("10.0.0.9:27000"))


def test_ume_store_forms():
    assert STORE_LIST.parse("10.1.1.1:14567") == (StoreEntry("10.1.1.1", 14567, 0, 0, 0),)
    assert STORE_LIST.parse("3:10.1.1.1:14567:100:1") == (StoreEntry("10.1.1.1", 14567, 3, 100, 1),)
    with pytest.raises(BadValue):
        STORE_LIST.parse("10.1.1.1")


def test_store_groups_ascending():
    t = STORE_GROUP_LIST
    v = t.merge((), t.parse("0:2,1:3"))
    with pytest.raises(BadValue, match="ascending"):
        t.merge(v, t.parse("1:1"))
    assert t.merge(v, t.parse("0:0")) == ()


@pytest.mark.parametrize(
    ("text", "kind"),
    [
        ("10.29.3.0/24", "cidr"),
        ("127.0.0.1", "cidr"),
        ('"en0"', "device"),
        ("host.example/8", "host"),
    ],
)
def test_interfaces(text, kind):
    value = INTERFACE.parse(text)
    assert value.kind == kind
    assert INTERFACE.format(value) == text


@pytest.mark.parametrize("text", ["10.0.0.300", "10.0.0.0/33", '"en0', "", "a b"])
def test_bad_interfaces(text):
    with pytest.raises(BadValue):
        INTERFACE.parse(text)


def test_interface_selection():
    local = [("lo", "127.0.0.1"), ("eth0", "10.29.3.7")]
    assert INTERFACE.parse("10.0.0.0/8").select(local) == "10.29.3.7"
    assert INTERFACE.parse('"lo"').select(local) == "127.0.0.1"
    assert INTERFACE.parse("10.29.3.8").select(local) is None


def test_session_id_forms():
    assert SESSION_ID.parse("0x10") == 16
    assert SESSION_ID.parse("010") == 8
    assert SESSION_ID.parse("18446744073709551614") == 2**64 - 2
    with pytest.raises(BadValue):
        SESSION_ID.parse("18446744073709551615")


def test_enums_and_ranges():
    transport = REGISTRY["source"]["transport"]
    assert transport.type.parse("LBT-RM") == "lbtrm"
    assert REGISTRY["context"]["transport_lbtrm_rate_interval"].type.parse("50") == 50
    with pytest.raises(BadValue):
        REGISTRY["context"]["transport_lbtrm_rate_interval"].type.parse("7")
    with pytest.raises(BadValue):
        REGISTRY["context"]["transport_tcp_datagram_max_size"].type.parse("499")
    assert REGISTRY["context"]["transport_lbtrm_receiver_datagram_max_size"].type.parse("0") == 0
    with pytest.raises(BadValue):
        REGISTRY["source"]["transport_lbtrm_tgsz"].type.parse("12")
