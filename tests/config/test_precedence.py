"""The worked precedence cases of UM's XML configuration guide (notes seed-core-features 3.4)."""

from __future__ import annotations

import pytest

from umcore.config.attributes import (
    Configuration,
    ContextAttributes,
    SourceAttributes,
    global_configuration,
    reset_global_configuration,
)
from umcore.errors import ConfigError

FACTORY = 14391
XML_DEFAULT = """<um-configuration version="1.0"><applications><application>
<contexts><context><options type="context">
<option name="request_tcp_port_low" default-value="13000"/>
</options></context></contexts></application></applications></um-configuration>"""
XML_RESTRICTED = XML_DEFAULT.replace(
    'default-value="13000"/>',
    'default-value="13000" order="allow,deny"><allow>13000</allow></option>',
)


def low(attrs):
    return attrs.get_typed("request_tcp_port_low")


def test_no_attr_no_files_gives_factory_default():
    cfg = Configuration()
    assert low(cfg.for_object("context")) == FACTORY


def test_flat_file_with_null_attr():
    cfg = Configuration()
    cfg.config_text("context request_tcp_port_low 12000", "a.cfg")
    assert low(cfg.for_object("context")) == 12000


def test_flat_file_with_plain_attr_create():
    cfg = Configuration()
    cfg.config_text("context request_tcp_port_low 12000", "a.cfg")
    assert low(cfg.for_object("context", ContextAttributes.create(cfg))) == 12000


def test_plain_attr_create_ignores_xml_default():
    cfg = Configuration()
    cfg.config_text("context request_tcp_port_low 12000", "a.cfg")
    cfg.config_xml_string(XML_DEFAULT)
    assert low(cfg.for_object("context", ContextAttributes.create(cfg))) == 12000


def test_xml_restriction_fails_plain_create():
    cfg = Configuration()
    cfg.config_text("context request_tcp_port_low 12000", "a.cfg")
    cfg.config_xml_string(XML_RESTRICTED, source="um.xml")
    with pytest.raises(ConfigError) as exc:
        cfg.for_object("context", ContextAttributes.create(cfg))
    text = str(exc.value)
    assert "um.xml:" in text and "request_tcp_port_low" in text and "a.cfg:1" in text
    assert "13000" in text


def test_create_from_xml_applies_xml_default_over_flat_file():
    cfg = Configuration()
    cfg.config_text("context request_tcp_port_low 12000", "a.cfg")
    cfg.config_xml_string(XML_RESTRICTED)
    attrs = ContextAttributes.from_xml(config=cfg)
    assert low(attrs) == 13000
    assert low(cfg.for_object("context", attrs)) == 13000


def test_setopt_after_create_from_xml_wins_and_is_checked():
    cfg = Configuration()
    cfg.config_xml_string(XML_RESTRICTED)
    attrs = ContextAttributes.from_xml(config=cfg)
    attrs.set("request_tcp_port_low", "13001")
    assert attrs.origin("request_tcp_port_low") == "API"
    with pytest.raises(ConfigError):
        cfg.for_object("context", attrs)


def test_null_attr_applies_xml_except_tagged():
    cfg = Configuration()
    cfg.config_xml_string(XML_DEFAULT)
    assert low(cfg.for_object("context")) == 13000
    cfg.config_text("context request_tcp_port_low 12000", "a.cfg")
    assert low(cfg.for_object("context")) == 12000


def test_named_app_and_context():
    cfg = Configuration()
    cfg.config_xml_string(
        """<um-configuration version="1.0"><applications><application name="App1">
        <contexts><context name="MainCtx"><options type="context">
        <option name="transport_tcp_port_low" default-value="20000"/></options></context>
        <context><options type="context"><option name="transport_tcp_port_low" default-value="21000"/>
        </options></context></contexts></application></applications></um-configuration>""",
        "App1",
    )
    assert (
        ContextAttributes.from_xml("MainCtx", config=cfg).get("transport_tcp_port_low") == "20000"
    )
    assert ContextAttributes.from_xml(config=cfg).get("transport_tcp_port_low") == "21000"
    other = ContextAttributes.from_xml("Other", config=cfg)
    assert other.get("transport_tcp_port_low") == "14371"


def test_files_apply_in_order_and_lists_accumulate(tmp_path):
    a = tmp_path / "a.cfg"
    b = tmp_path / "b.cfg"
    a.write_text(
        "context transport_tcp_port_low 4901\ncontext resolver_unicast_daemon 10.1.1.1:15380\n"
    )
    b.write_text(
        "context transport_tcp_port_low 4902\ncontext resolver_unicast_daemon 10.1.1.2:15380\n"
    )
    cfg = Configuration()
    cfg.config_file(a)
    cfg.config_file(b)
    attrs = ContextAttributes.create(cfg)
    assert attrs.get("transport_tcp_port_low") == "4902"
    assert attrs.get("resolver_unicast_daemon") == "10.1.1.1:15380,10.1.1.2:15380"
    assert attrs.origin("transport_tcp_port_low") == f"{b}:1"


def test_environment(tmp_path, monkeypatch):
    flat = tmp_path / "env.cfg"
    flat.write_text("context monitor_interval 7\nsource transport lbtru\n")
    xml = tmp_path / "um.xml"
    xml.write_text(
        '<um-configuration version="1.0"><applications><application name="envapp"><contexts>'
        '<context><sources><topic topicname="t"><options type="source">'
        '<option name="transport" default-value="lbtrm"/></options></topic></sources></context>'
        "</contexts></application></applications></um-configuration>"
    )
    monkeypatch.setenv("LBM_DEFAULT_CONFIG_FILE", str(flat))
    monkeypatch.setenv("LBM_XML_CONFIG_FILENAME", str(xml))
    monkeypatch.setenv("LBM_XML_CONFIG_APPNAME", "envapp")
    monkeypatch.setenv("LBM_MONITOR_INTERVAL", "5")
    monkeypatch.setenv("LBM_MONITOR_FORMAT", "pb")
    reset_global_configuration()
    try:
        ctx = ContextAttributes.from_environment()
        # monitor_interval explicitly set in a file wins over LBM_MONITOR_INTERVAL ...
        assert ctx.get("monitor_interval") == "7"
        # ... while an option only the environment sets takes the environment's default.
        assert ctx.get("monitor_format") == "pb"
        assert SourceAttributes.from_environment("t").get("transport") == "lbtrm"
        assert SourceAttributes.from_environment("u").get("transport") == "lbtru"
        assert global_configuration().application is not None
    finally:
        reset_global_configuration()


def test_environment_bad_file_names_the_variable(tmp_path, monkeypatch):
    monkeypatch.setenv("LBM_DEFAULT_CONFIG_FILE", str(tmp_path / "missing.cfg"))
    cfg = Configuration()
    with pytest.raises(ConfigError, match="LBM_DEFAULT_CONFIG_FILE"):
        cfg.load_environment()


def test_monitor_env_does_not_override_explicit():
    cfg = Configuration()
    cfg.config_text("context monitor_interval 9", "x.cfg")
    cfg.load_environment({"LBM_MONITOR_INTERVAL": "5"})
    assert cfg.defaults("context").get("monitor_interval") == "9"
    assert cfg.defaults("event_queue").get("monitor_interval") == "5"
    with pytest.raises(ConfigError, match="LBM_MONITOR_INTERVAL"):
        Configuration().load_environment({"LBM_MONITOR_INTERVAL": "soon"})


def test_convenience_and_alias_options():
    attrs = ContextAttributes()
    attrs.set("resolver_multicast_address", "239.1.2.3")
    assert attrs.get("resolver_multicast_incoming_address") == "239.1.2.3"
    assert attrs.get("resolver_multicast_outgoing_address") == "239.1.2.3"
    src = SourceAttributes()
    src.set("ume_late_join", "1")
    assert src.get_typed("late_join") is True


def test_set_errors_say_where():
    attrs = ContextAttributes()
    with pytest.raises(ConfigError) as exc:
        attrs.set("transport_tcp_port_low", "70000", source="app.cfg", line=4)
    assert str(exc.value).startswith("app.cfg:4: context transport_tcp_port_low")
    assert "0..65535" in str(exc.value)
    with pytest.raises(ConfigError, match="API"):
        attrs.set("resolver_service", ",".join(f"10.0.0.{i}:1" for i in range(6)))
