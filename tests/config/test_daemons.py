"""Daemon XML loaders: SRS (acceptance checks 1-4 of seed-srs-lbmrd), Store, DRO."""

from __future__ import annotations

from pathlib import Path

import pytest

from umcore.config import dro, srs, store
from umcore.config.umxml import UMXml
from umcore.errors import ConfigError

CONFIGS = Path(__file__).parents[2] / "configs"

# The seed's sample (003 L7618-7649), restated.
SRS_SEED = """<?xml version="1.0" encoding="UTF-8" ?>
<um-srs version="1.0">
  <daemon>
    <log type="file" frequency="hourly" size="10" max-history="10"
      total-size-cap="10000" compression="zip">SRS.log</log>
    <pid-file>SRS.pid</pid-file>
  </daemon>
  <srs>
    <interface>10.12.34.56</interface>
    <port>27000</port>
    <state-lifetime>3600</state-lifetime>
  </srs>
  <daemon-monitor topic="/29west/statistics">
    <publishing-interval>
      <default>2000</default>
      <config-opts>20000</config-opts>
      <internal-config-opts>0</internal-config-opts>
    </publishing-interval>
    <lbm-attributes>
      <option scope="context" name="operational_mode" value="embedded" />
      <option scope="context" name="mim_incoming_address" value="0.0.0.0" />
      <option scope="context" name="transport_tcp_port_low" value="14381" />
      <option scope="context" name="transport_tcp_port_high" value="15381" />
      <option scope="source" name="transport_tcp_interface" value="10.29.3.0/24" />
    </lbm-attributes>
    <monitor-format>pb</monitor-format>
  </daemon-monitor>
</um-srs>
"""


def srs_doc(srs_children="", monitor_children="", daemon_children=""):
    return (
        '<?xml version="1.0" encoding="UTF-8" ?><um-srs version="1.0">'
        f"<daemon>{daemon_children}</daemon><srs>{srs_children}</srs>"
        f'<daemon-monitor topic="/29west/statistics">{monitor_children}</daemon-monitor></um-srs>'
    )


def test_srs_check1_xsd_and_samples():
    assert srs.xsd_text().lstrip().startswith("<?xml")
    cfg = srs.load_text(SRS_SEED, "seed.xml")
    assert cfg.interface == "10.12.34.56"
    assert cfg.state_lifetime == 3600
    assert cfg.source_state_lifetime == cfg.interest_state_lifetime == 3600
    assert cfg.publishing["srs-stats"] == 2000
    assert cfg.publishing["config-opts"] == 20000
    assert cfg.publishing["internal-config-opts"] == 0
    assert cfg.log.compression == "zip" and cfg.log.file == "SRS.log"
    mon = cfg.monitor_attributes("context")
    assert mon.get("transport_tcp_port_high") == "15381"
    assert cfg.monitor_attributes("source").get("transport_tcp_interface") == "10.29.3.0/24"
    example = srs.load(CONFIGS / "srs.xml")
    assert example.application_id == "srs1" and example.monitor_format == "pb"


@pytest.mark.parametrize(
    "doc",
    [
        srs_doc("<port>1</port><port>2</port>"),
        srs_doc("<foo/>"),
        srs_doc("<port>70000</port>"),
        srs_doc(monitor_children="<ping-interval>0</ping-interval>"),
        srs_doc(
            monitor_children="<publishing-interval><default>150</default></publishing-interval>"
        ),
        srs_doc(
            monitor_children="<publishing-interval><default>7776000001</default></publishing-interval>"
        ),
        srs_doc("<state-lifetime>20736001</state-lifetime>"),
        srs_doc("<source-leave-backoff>60001</source-leave-backoff>"),
        srs_doc(daemon_children='<log size="0" type="file">x</log>'),
        srs_doc(daemon_children='<log frequency="daily">x</log>'),
        srs_doc(monitor_children="<publish-connection-events/>"),
        "<um-srs><debug-monitor><enabled>TRUE</enabled></debug-monitor></um-srs>",
        srs_doc(monitor_children="<monitor-format>xml</monitor-format>"),
    ],
)
def test_srs_check2_invalid(doc):
    with pytest.raises(ConfigError) as exc:
        srs.load_text(doc, "bad-srs.xml")
    assert str(exc.value).startswith("bad-srs.xml:")


@pytest.mark.parametrize("default", ["0", "200", "7776000000"])
def test_srs_check3_any_order_and_bounds(default):
    doc = srs_doc(
        "<source-leave-backoff>10</source-leave-backoff><port>1</port><interface>127.0.0.1</interface>",
        f"<monitor-format>json</monitor-format><publishing-interval><default>{default}</default>"
        "</publishing-interval><ping-interval>100</ping-interval>",
    )
    cfg = srs.load_text(doc)
    assert cfg.publishing_default == int(default)
    assert cfg.port == 1 and cfg.ping_interval == 100


def test_srs_check4_defaults_dump():
    cfg = srs.SRSConfig()
    text = srs.dump()
    for needle in (
        "<port>27000</port>",
        "<interface>localhost</interface>",
        "<source-state-lifetime>86400</source-state-lifetime>",
        "<route-state-lifetime>30</route-state-lifetime>",
        "<context-name-state-lifetime>86400</context-name-state-lifetime>",
        "<source-leave-backoff>500</source-leave-backoff>",
        "<ping-interval>60000</ping-interval>",
        "<monitor-format>json</monitor-format>",
    ):
        assert needle in text
    reloaded = srs.load_text(text)  # the dump is valid against our XSD
    assert (reloaded.port, reloaded.source_state_lifetime, reloaded.debug_monitor_port) == (
        27000,
        86400,
        27001,
    )
    loaded = srs.load_text(srs.dump(srs.load_text(SRS_SEED)))
    assert loaded.state_lifetime == 3600 and loaded.publishing == srs.load_text(SRS_SEED).publishing
    assert cfg.state_lifetime is None


def test_srs_lbm_attributes_checked():
    doc = srs_doc(
        monitor_children='<lbm-attributes><option scope="context" name="nosuch" value="1"/></lbm-attributes>'
    )
    with pytest.raises(ConfigError, match="unknown context option"):
        srs.load_text(doc, "s.xml")
    doc = srs_doc(
        monitor_children='<lbm-attributes><option scope="event_queue" name="monitor_interval" value="1"/></lbm-attributes>'
    )
    with pytest.raises(ConfigError, match="not usable here"):
        srs.load_text(doc, "s.xml")


STORE = """<ume-store version="1.3">
  <daemon>
    <web-monitor>*:12811</web-monitor>
    <log type="console"/>
    <pidfile>store.pid</pidfile>
    <xml-config application-name="store1">um.xml</xml-config>
  </daemon>
  <stores>
    <store name="store_topic1" interface="127.0.0.0/8" port="12801">
      <ume-attributes>
        <option type="store" name="disk-cache-directory" value="cache"/>
        <option type="store" name="disk-state-directory" value="state"/>
        <option type="store" name="context-name" value="store_topic1"/>
        <option type="lbm-context" name="monitor_appid" value="store1"/>
      </ume-attributes>
      <topics>
        <topic pattern="topic1" type="direct">
          <ume-attributes>
            <option type="store" name="repository-allow-receiver-paced-persistence" value="1"/>
            <option type="store" name="source-flight-size-bytes-maximum" value="1999999999"/>
            <option type="store" name="repository-disk-write-delay" value="1500"/>
            <option type="store" name="repository-type" value="disk"/>
            <option type="store" name="repository-size-threshold" value="141000000"/>
            <option type="store" name="repository-size-limit" value="165000000"/>
            <option type="store" name="repository-disk-file-size-limit" value="8589934592"/>
            <option type="store" name="stability-ack-minimum-number" value="64"/>
            <option type="lbm-receiver" name="use_otr" value="1"/>
          </ume-attributes>
        </topic>
      </topics>
    </store>
  </stores>
</ume-store>
"""


def test_store_with_disk_repository():
    cfg = store.load_text(STORE, "store.xml")
    d = cfg.daemon
    assert (d.web_monitor, d.pidfile, d.xml_config, d.xml_config_application) == (
        "*:12811",
        "store.pid",
        "um.xml",
        "store1",
    )
    assert d.log_size == 10 and d.log_frequency == "disable"
    (inst,) = cfg.stores
    assert (inst.name, inst.port, str(inst.interface)) == ("store_topic1", 12801, "127.0.0.0/8")
    assert inst.options["disk-cache-directory"] == "cache"
    assert inst.options["retransmission-request-processing-rate"] == 262144
    assert inst.options["allow-proxy-source"] is False
    repo = inst.match("topic1")
    assert repo is not None and inst.match("topic2") is None
    o = repo.options
    assert o["repository-type"] == "disk"
    assert o["repository-disk-file-size-limit"] == 8589934592
    assert o["stability-ack-minimum-number"] == 64
    assert o["repository-allow-receiver-paced-persistence"] is True
    # untouched defaults
    assert o["source-activity-timeout"] == 30000
    assert o["receiver-new-registration-rollback"] == 2147483647
    assert o["repository-disk-async-buffer-length"] == 1024000
    assert [s.name for s in inst.lbm_context] == ["monitor_appid"]
    assert [s.name for s in repo.lbm_receiver] == ["use_otr"]
    assert (
        store.load(CONFIGS / "umestored.xml").stores[0].match("x").options["repository-type"]
        == "memory"
    )


@pytest.mark.parametrize(
    ("old", "new", "needle"),
    [
        (
            'name="repository-type" value="disk"',
            'name="repository-type" value="tape"',
            "memory | disk",
        ),
        ('name="repository-size-limit"', 'name="repository-size-limt"', "repository-size-limit"),
        ('port="12801"', "", "port"),
        ('value="8589934592"', 'value="1000"', "196992"),
        ('type="lbm-receiver"', 'type="lbm-context"', "not usable at topic level"),
        ('name="use_otr"', 'name="use_otr2"', "use_otr"),
    ],
)
def test_store_errors(old, new, needle):
    with pytest.raises(ConfigError) as exc:
        store.load_text(STORE.replace(old, new), "store.xml")
    assert needle in str(exc.value)
    assert "store.xml:" in str(exc.value)


DRO = """<?xml version="1.0" encoding="UTF-8" ?>
<tnw-gateway version="1.0">
  <daemon>
    <name>dro1</name>
    <log type="console"/>
    <pidfile>dro.pid</pidfile>
    <monitor interval="5">
      <transport-module module="lbm" options="config=mon.cfg"/>
      <format-module module="pb"/>
    </monitor>
    <xml-config>um.xml</xml-config>
  </daemon>
  <portals>
    <endpoint>
      <name>TRD1</name>
      <domain-id>1</domain-id>
      <lbm-attributes>
        <option name="context_name" scope="context" value="TRD1" />
      </lbm-attributes>
    </endpoint>
    <endpoint>
      <name>TRD2</name>
      <domain-id>2</domain-id>
      <lbm-attributes>
        <option name="context_name" scope="context" value="TRD2" />
        <option name="resolver_multicast_address" scope="context" value="239.1.1.1" />
      </lbm-attributes>
    </endpoint>
  </portals>
</tnw-gateway>
"""


def test_dro_two_endpoints_and_defaults():
    cfg = dro.load_text(DRO, "dro.xml")
    d = cfg.daemon
    assert (d.name, d.monitor_interval, d.monitor_transport, d.monitor_format) == (
        "dro1",
        5,
        "lbm",
        "pb",
    )
    assert d.monitor_transport_options == "config=mon.cfg"
    assert (
        d.route_info.propagation_interval,
        d.route_info.check_interval,
        d.route_info.timeout,
        d.route_info.max_hop_count,
    ) == (1000, 750, 4000, 100)
    assert (d.route_recalculation.backoff_interval, d.route_recalculation.warning_interval) == (
        5000,
        10000,
    )
    assert (d.topicmap.hash_function, d.topicmap.size) == ("murmur2", 131111)
    trd1, trd2 = cfg.endpoints
    assert (trd1.name, trd1.domain_id, trd2.name, trd2.domain_id) == ("TRD1", 1, "TRD2", 2)
    for e in (trd1, trd2):
        assert (e.cost, e.max_queue, e.source_deletion_delay, e.smart_batch, e.hotlink_index) == (
            1,
            1000000,
            1000,
            0,
            0,
        )
        tr = e.topic_resolution
        assert (
            tr.topic_use_query.timeout,
            tr.topic_use_query.max,
            tr.topic_use_query.periodic_interval,
        ) == (3000, 5, 300000)
        assert (
            tr.topic_use_query.rate_limit.bps,
            tr.topic_use_query.rate_limit.objects_per_second,
        ) == (500000, 500)
        assert (tr.remote_topic_interest.min_interval, tr.remote_topic_interest.max_interval) == (
            1000,
            60000,
        )
        assert (
            tr.remote_topic_interest.rate_limit.bps,
            tr.remote_topic_interest.rate_limit.objects_per_second,
        ) == (500000, 0)
        assert (tr.domain_route.min_interval, tr.domain_route.max_interval) == (100, 1000)
        assert (tr.domain_route.rate_limit.bps, tr.domain_route.rate_limit.objects_per_second) == (
            0,
            50,
        )
        assert (tr.initial_request.periodic_interval, tr.initial_request.duration) == (1000, 10)
        assert (
            e.remote_topic.check_interval,
            e.remote_topic.max_topics,
            e.remote_topic.timeout,
        ) == (90000, 100, 300000)
        assert (e.sqn_window.size, e.sqn_window.increment) == (16384, 2048)
        assert (
            e.context_query.periodic_interval,
            e.context_query.max_contexts,
            e.context_query.interval,
            e.context_query.timeout,
        ) == (300000, 20, 200, 900)


def test_dro_portal_attributes_xml_wins_over_lbm_attributes(tmp_path):
    cfg = dro.load_text(DRO, "dro.xml")
    xml = UMXml.from_text(
        """<um-configuration version="1.0"><applications><application name="tnwgd"><contexts>
        <context name="TRD1"><options type="context"><option name="resolver_service" default-value="127.0.0.1:12601"/>
        </options></context>
        <context name="TRD2"><options type="context"><option name="resolver_multicast_address" default-value="239.101.3.1"/>
        </options></context></contexts></application></applications></um-configuration>"""
    )
    trd1 = cfg.portal_attributes(cfg.portal("TRD1"), xml=xml)
    trd2 = cfg.portal_attributes(cfg.portal("TRD2"), xml=xml)
    assert trd1.get("resolver_service") == "127.0.0.1:12601"
    assert trd1.get("context_name") == "TRD1"
    assert trd2.get("resolver_multicast_address") == "239.101.3.1"  # lbm-attributes lose
    example = dro.load(CONFIGS / "dro.xml")
    assert (
        example.portal_attributes(example.portal("TRD1")).get("resolver_service")
        == "127.0.0.1:27000"
    )
    assert (
        example.portal_attributes(example.portal("TRD2")).get("resolver_unicast_daemon")
        == "127.0.0.1:15380"
    )


PEER = """<tnw-gateway version="1.0"><portals>
  <endpoint><name>E</name><domain-id>1</domain-id></endpoint>
  <peer><name>P</name><cost>2</cost>
    <single-tcp><interface>127.0.0.1</interface><nodelay/>
      <initiator><address>127.0.0.1</address><port>23000</port></initiator></single-tcp>
    <udp><port>23001</port><nak-handling backoff-interval="300"/></udp>
    <gateway-keepalive interval="0"/>
  </peer>
</portals></tnw-gateway>"""


def test_dro_peer_defaults():
    p = dro.load_text(PEER).peers[0]
    assert (p.cost, p.max_datagram, p.sourcemap_size) == (2, 65500, 131072)
    st = p.single_tcp
    assert (st.role, st.address, st.port, st.reconnect_interval, st.nodelay, st.keepalive) == (
        "initiator",
        "127.0.0.1",
        23000,
        5000,
        True,
        False,
    )
    assert p.udp is not None and p.udp.port == 23001
    assert (p.udp.nak_handling.backoff_interval, p.udp.nak_handling.ignore_interval) == (300, 100)
    assert (p.udp.receive_buffer, p.udp.send_buffer, p.udp.coalesce_threshold) == (
        8388608,
        1048576,
        15,
    )
    assert (
        p.gateway_keepalive.idle,
        p.gateway_keepalive.interval,
        p.gateway_keepalive.timeout,
    ) == ("yes", 0, 15000)
    assert (p.batching.min_length, p.batching.batch_interval) == (8192, 200)


@pytest.mark.parametrize(
    ("old", "new", "needle"),
    [
        (
            "<name>TRD1</name>\n      <domain-id>1</domain-id>",
            "<domain-id>1</domain-id><name>TRD1</name>",
            "<endpoint>",
        ),
        ("<domain-id>2</domain-id>", "<domain-id>1</domain-id>", "share domain-id"),
        ('scope="context" value="TRD2"', 'scope="context" value="TRD 2"', "context_name"),
        ('<monitor interval="5">', '<monitor interval="five">', "interval"),
        ("<pidfile>dro.pid</pidfile>", "<pidfile>dro.pid</pidfile><nosuch/>", "nosuch"),
    ],
)
def test_dro_errors(old, new, needle):
    with pytest.raises(ConfigError) as exc:
        dro.load_text(DRO.replace(old, new), "dro.xml")
    assert needle in str(exc.value)
    assert "dro.xml:" in str(exc.value)


def test_dro_ace_needs_match():
    doc = PEER.replace(
        "<endpoint><name>E</name><domain-id>1</domain-id></endpoint>",
        "<endpoint><name>E</name><domain-id>1</domain-id><acl><inbound><ace><topic>ABC</topic></ace>"
        "</inbound></acl></endpoint>",
    )
    with pytest.raises(ConfigError, match="match"):
        dro.load_text(doc)
    ok = dro.load_text(doc.replace("<ace>", '<ace match="accept">'))
    acl = ok.endpoints[0].acl
    assert acl is not None and acl.inbound[0].conditions[0].value == "ABC"
