"""``<daemon-monitor>`` in the Store and DRO files (one reader, umcore.config.daemonmon): topic
defaults per daemon, lbm-config, publishing groups, the allow flags, and each daemon's own
``ivl`` rules."""

from __future__ import annotations

import pytest

from umcore.config import dro, store
from umcore.errors import ConfigError

STORE = """<ume-store version="1.3">
  <daemon>{monitor}</daemon>
  <stores>
    <store name="s1" port="12801">
      <ume-attributes><option type="store" name="disk-cache-directory" value="c"/></ume-attributes>
      <topics><topic pattern=".*" type="PCRE"/></topics>
    </store>
  </stores>
</ume-store>
"""
DRO = """<tnw-gateway version="1.0">
  <daemon>{monitor}</daemon>
  <portals>
    <endpoint><name>A</name><domain-id>1</domain-id></endpoint>
    <endpoint><name>B</name><domain-id>2</domain-id></endpoint>
  </portals>
</tnw-gateway>
"""
FULL = """<daemon-monitor topic="{topic}">
  <lbm-config>mon.cfg</lbm-config>
  <publishing-interval>
    <group name="default" ivl="{ivl1}"/><group name="{group}" ivl="{ivl2}"/>
  </publishing-interval>
  <remote-snapshot-request allow="1"/>
  <remote-config-changes-request allow="0"/>
</daemon-monitor>"""
LOADERS = [
    pytest.param(store.load_text, STORE, "store", "umestore.monitor", id="store"),
    pytest.param(dro.load_text, DRO, "portal-stats", "tnwgd.monitor", id="dro"),
]


@pytest.mark.parametrize(("load", "doc", "group", "default_topic"), LOADERS)
def test_absent_monitor_is_off(load, doc, group, default_topic):
    d = load(doc.format(monitor=""), "x.xml").daemon
    assert d.daemon_monitor is False and d.daemon_monitor_topic == default_topic
    assert d.daemon_monitor_lbm_config is None and d.daemon_monitor_intervals == {}
    assert d.remote_snapshot_request is False and d.remote_config_changes_request is False


@pytest.mark.parametrize(("load", "doc", "group", "default_topic"), LOADERS)
def test_every_child_read(load, doc, group, default_topic):
    mon = FULL.format(topic="my.mon", group=group, ivl1="5", ivl2="30")
    d = load(doc.format(monitor=mon), "x.xml").daemon
    assert d.daemon_monitor is True and d.daemon_monitor_topic == "my.mon"
    assert d.daemon_monitor_lbm_config == "mon.cfg"
    assert d.daemon_monitor_intervals == {"default": 5, group: 30}
    assert d.remote_snapshot_request is True and d.remote_config_changes_request is False


@pytest.mark.parametrize(("load", "doc", "group", "default_topic"), LOADERS)
def test_bare_element_takes_the_daemons_topic(load, doc, group, default_topic):
    d = load(doc.format(monitor="<daemon-monitor/>"), "x.xml").daemon
    assert d.daemon_monitor is True and d.daemon_monitor_topic == default_topic
    assert d.daemon_monitor_intervals == {} and d.remote_snapshot_request is False


@pytest.mark.parametrize(("load", "doc", "group", "default_topic"), LOADERS)
def test_bad_interval_is_located(load, doc, group, default_topic):
    mon = FULL.format(topic="t", group=group, ivl1="5", ivl2="soon")
    with pytest.raises(ConfigError) as info:
        load(doc.format(monitor=mon), "x.xml")
    group_line = doc.count("\n", 0, doc.index("{monitor}")) + 4  # FULL's 4th line
    assert info.value.source == "x.xml" and info.value.line == group_line
    assert "ivl='soon'" in str(info.value)
