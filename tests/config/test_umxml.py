"""um.xml: templates, applications, topics, patterns, restrictions (notes C3)."""

from __future__ import annotations

from pathlib import Path

import pytest

from umcore.config.attributes import Configuration, ContextAttributes, SourceAttributes
from umcore.config.umxml import UMXml
from umcore.errors import ConfigError

CONFIGS = Path(__file__).parents[2] / "configs"

# In the style of mcs_demo's um.xml: shared templates, per-application template lists, one
# context per TRD for the DRO, per-topic multicast groups.
VENDOR = """<?xml version="1.0" encoding="UTF-8" ?>
<um-configuration version="1.0">
  <templates>
    <template name="perf">
      <options type="context">
        <option name="default_interface" default-value="127.0.0.0/8"/>
        <option name="transport_lbtrm_datagram_max_size" default-value="1472"/>
        <option name="dynamic_fragmentation_reduction" default-value="1"/>
        <option name="fd_management_type" default-value="epoll"/>
      </options>
      <options type="source">
        <option name="transport" default-value="lbtrm"/>
        <option name="ume_flight_size" default-value="100000"/>
      </options>
      <options type="receiver">
        <option name="delivery_control_maximum_burst_loss" default-value="100000000"/>
        <option name="use_otr" default-value="0"/>
      </options>
    </template>
    <template name="res_trd1">
      <options type="context">
        <option name="resolver_service" default-value="127.0.0.1:12601"/>
        <option name="resolver_disable_udp_topic_resolution" default-value="1"/>
      </options>
    </template>
    <template name="res_trd2">
      <options type="context">
        <option name="resolver_multicast_interface" default-value="127.0.0.0/8"/>
        <option name="resolver_multicast_address" default-value="239.101.3.1"/>
      </options>
    </template>
    <template name="mon_ctx">
      <options type="context">
        <option name="resolver_unicast_daemon" default-value="127.0.0.1:12801"/>
        <option name="mim_incoming_address" default-value="0.0.0.0"/>
        <option name="resolver_unicast_port_low" default-value="12802"/>
        <option name="resolver_unicast_port_high" default-value="12819"/>
      </options>
      <options type="source">
        <option name="transport" default-value="tcp"/>
      </options>
    </template>
  </templates>
  <applications>
    <application name="umesrc" template="perf,res_trd1">
      <contexts>
        <context>
          <sources>
            <topic topicname="topic1">
              <options type="source">
                <option name="transport_lbtrm_multicast_address" default-value="239.101.3.2"/>
                <option name="ume_store_name" default-value="store_topic1"/>
              </options>
            </topic>
          </sources>
        </context>
      </contexts>
    </application>
    <application name="tnwgd" template="perf">
      <contexts>
        <context name="TRD1" template="res_trd1">
          <sources><topic topicname="topic1"><options type="source">
            <option name="transport_lbtrm_multicast_address" default-value="239.101.3.4"/>
          </options></topic></sources>
        </context>
        <context name="TRD2" template="res_trd2">
          <sources><topic topicname="topic1"><options type="source">
            <option name="transport_lbtrm_multicast_address" default-value="239.101.3.3"/>
          </options></topic></sources>
        </context>
        <context name="29west_statistics_context" template="mon_ctx"/>
      </contexts>
    </application>
  </applications>
</um-configuration>
"""


def config(appname):
    cfg = Configuration()
    cfg.config_xml_string(VENDOR, appname, source="vendor-um.xml")
    return cfg


def test_three_trds_resolve_per_context():
    cfg = config("tnwgd")
    trd1 = ContextAttributes.from_xml("TRD1", config=cfg)
    trd2 = ContextAttributes.from_xml("TRD2", config=cfg)
    mon = ContextAttributes.from_xml("29west_statistics_context", config=cfg)
    # TRD1: SRS only
    assert trd1.get("resolver_service") == "127.0.0.1:12601"
    assert trd1.get_typed("resolver_disable_udp_topic_resolution") is True
    assert trd1.get("resolver_unicast_daemon") == ""
    # TRD2: multicast TR on its own group
    assert trd2.get("resolver_multicast_address") == "239.101.3.1"
    assert trd2.get("resolver_multicast_outgoing_address") == "239.101.3.1"
    assert trd2.get("resolver_service") == ""
    # monitoring TRD through an lbmrd
    assert mon.get("resolver_unicast_daemon") == "127.0.0.1:12801"
    assert mon.get("resolver_unicast_port_low") == "12802"
    assert mon.get("mim_incoming_address") == "0.0.0.0"
    # the application template applies to all three
    for attrs in (trd1, trd2, mon):
        assert attrs.get("transport_lbtrm_datagram_max_size") == "1472"
        assert attrs.get("fd_management_type") == "epoll"


def test_per_topic_resolution_in_each_context():
    cfg = config("tnwgd")

    def group(ctx, topic):
        return SourceAttributes.from_xml(topic, context_name=ctx, config=cfg).get(
            "transport_lbtrm_multicast_address"
        )

    assert group("TRD1", "topic1") == "239.101.3.4"
    assert group("TRD2", "topic1") == "239.101.3.3"
    assert group("TRD1", "topic2") == "0.0.0.0"
    mon_src = SourceAttributes.from_xml(
        "/29west/statistics", context_name="29west_statistics_context", config=cfg
    )
    assert mon_src.get("transport") == "tcp"
    assert (
        SourceAttributes.from_xml("x", context_name="TRD1", config=cfg).get("transport") == "lbtrm"
    )


def test_per_application():
    src = SourceAttributes.from_xml("topic1", config=config("umesrc"))
    assert src.get("ume_store_name") == "store_topic1"
    assert src.get("transport_lbtrm_multicast_address") == "239.101.3.2"
    assert src.get("ume_flight_size") == "100000"


def test_unknown_application_fails():
    with pytest.raises(ConfigError, match="no <application> for 'app3'"):
        config("app3")


TEMPLATES = """<um-configuration version="1.0"><templates>
<template name="a"><options type="context"><option name="transport_tcp_port_low" default-value="1000"/>
<option name="transport_tcp_port_high" default-value="1001"/></options></template>
<template name="b"><options type="context"><option name="transport_tcp_port_low" default-value="2000"/></options></template>
</templates><applications><application template="a,b"/></applications></um-configuration>"""


def test_template_list_later_wins():
    cfg = Configuration()
    cfg.config_xml_string(TEMPLATES)
    attrs = ContextAttributes.from_xml(config=cfg)
    assert attrs.get("transport_tcp_port_low") == "2000"
    assert attrs.get("transport_tcp_port_high") == "1001"


def topic_rules(order, first, second):
    return f"""<um-configuration version="1.0"><applications><application><contexts><context>
    <sources order="{order}">
      <topic pattern="^trade" rule="{first}"/>
      <topic pattern="^trade\\.NASD" rule="{second}"/>
    </sources></context></contexts></application></applications></um-configuration>"""


def test_topic_rules_last_match_wins():
    cfg = Configuration()
    cfg.config_xml_string(topic_rules("deny,allow", "deny", "allow"))
    cfg.for_object("source", name="trade.NASD.xyz")
    with pytest.raises(ConfigError, match="denied"):
        cfg.for_object("source", name="trade.NYSE")
    cfg.for_object("source", name="other")  # no match under deny,allow: allowed

    cfg = Configuration()
    cfg.config_xml_string(topic_rules("allow,deny", "allow", "deny"))
    cfg.for_object("source", name="trade.NYSE")
    with pytest.raises(ConfigError, match="denied"):
        cfg.for_object("source", name="trade.NASD.xyz")
    with pytest.raises(ConfigError, match="no matching element"):
        cfg.for_object("source", name="other")


def test_deny_restriction_on_values():
    cfg = Configuration()
    cfg.config_xml_string(
        """<um-configuration version="1.0"><applications><application><contexts><context>
        <options type="context"><option name="fd_management_type"><deny>poll</deny></option>
        </options></context></contexts></application></applications></um-configuration>"""
    )
    attrs = ContextAttributes.create(cfg)
    cfg.for_object("context", attrs)
    attrs.set("fd_management_type", "POLL")
    with pytest.raises(ConfigError, match="anything except poll"):
        cfg.for_object("context", attrs)


def test_context_rules_and_event_queues():
    cfg = Configuration()
    cfg.config_xml_string(
        """<um-configuration version="1.0"><applications><application>
        <contexts order="allow,deny"><context name="ok"/></contexts>
        <event-queues><event-queue name="q1"><options type="event-queue">
        <option name="queue_age_enabled" default-value="1"/></options></event-queue></event-queues>
        <contexts/></application></applications></um-configuration>"""
    )
    # the later empty <contexts> replaces the first: (order deny,allow, nothing listed)
    cfg.for_object("context", name="anything")
    q = cfg.attributes_from_xml("event_queue", "q1")
    assert q.get_typed("queue_age_enabled") is True


def test_wildcard_receivers_match_exact_pattern():
    cfg = Configuration()
    cfg.config_xml_string(
        """<um-configuration version="1.0"><applications><application><contexts><context>
        <wildcard-receivers><wildcard-receiver pattern="^AA.*">
        <options type="wildcard-receiver"><option name="resolver_query_minimum_duration" default-value="0"/>
        </options></wildcard-receiver></wildcard-receivers></context></contexts></application>
        </applications></um-configuration>"""
    )
    w = cfg.attributes_from_xml("wildcard_receiver", "^AA.*")
    assert w.get("resolver_query_minimum_duration") == "0"
    assert (
        cfg.attributes_from_xml("wildcard_receiver", "^AAB").get("resolver_query_minimum_duration")
        == "60"
    )


def test_example_file():
    cfg = Configuration()
    cfg.config_xml_file(CONFIGS / "um.xml", "publisher")
    ctx = cfg.for_object("context", name="pub_ctx")
    assert ctx.get("transport_tcp_port_low") == "15000"
    assert ctx.get("request_tcp_port_low") == "14391"
    orders = cfg.for_object("source", name="orders", context_name="pub_ctx")
    assert orders.get("transport") == "lbtrm"
    assert orders.get("ume_store") == "127.0.0.1:14567"
    assert cfg.for_object("source", name="md.ibm", context_name="pub_ctx").get("transport") == "tcp"
    bad = ContextAttributes.from_xml("pub_ctx", config=cfg)
    bad.set("request_tcp_port_low", "14392")
    with pytest.raises(ConfigError, match=r"only 14391 \| 14400"):
        cfg.for_object("context", bad)


def test_load_from_file_matches_string(tmp_path):
    path = tmp_path / "um.xml"
    path.write_text(VENDOR)
    assert set(UMXml.load(path).applications) == {"umesrc", "tnwgd"}
