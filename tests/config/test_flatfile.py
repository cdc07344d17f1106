"""Plain-text configuration files (notes C2 and acceptance checks 25-28)."""

from __future__ import annotations

from pathlib import Path

import pytest

from umcore.config.attributes import Configuration
from umcore.config.flatfile import parse_file, parse_text
from umcore.errors import ConfigError


def test_line_format_comments_and_case():
    settings = parse_text(
        "# header\n\nContext Transport_TCP_Port_Low 4901 # comment\n"
        'context resolver_unicast_interface "en0"\nsource transport LBT-RM\n',
        "a.cfg",
    )
    first = settings[0]
    assert (first.scope, first.name, first.value, first.line) == (
        "context",
        "transport_tcp_port_low",
        4901,
        3,
    )
    assert str(settings[1].value) == '"en0"'
    assert settings[2].value == "lbtrm"


@pytest.mark.parametrize(
    ("text", "needle"),
    [
        ("topic transport tcp\n", "unknown scope"),
        ("context transport_tcp_port_lo 4901\n", "transport_tcp_port_low"),
        ("context transport_tcp_port_low\n", "expected 'scope option value'"),
        ("context transport_tcp_port_low 99999\n", "0..65535"),
        ("source transport udp\n", "tcp"),
        ("context resolver_unicast_daemon 10.1.1.1\n", "IP:port"),
    ],
)
def test_bad_lines_are_reported_with_place(text, needle):
    with pytest.raises(ConfigError) as exc:
        parse_text("# ok\n" + text, "bad.cfg")
    assert "bad.cfg:2" in str(exc.value)
    assert needle in str(exc.value)


def test_bad_file_is_not_applied_at_all():
    cfg = Configuration()
    with pytest.raises(ConfigError, match="1 more"):
        cfg.config_text("context transport_tcp_port_low 4901\nx y z\ncontext a b\n", "f.cfg")
    assert cfg.defaults("context").get("transport_tcp_port_low") == "14371"


def test_lbmrd_list_example():
    cfg = Configuration()
    cfg.config_text(
        "context resolver_unicast_daemon 10.1.1.1:15380\n"
        'context resolver_unicast_daemon "eth0":1234->10.1.1.2:15380,10.1.1.3:15380\n',
        "f.cfg",
    )
    assert len(cfg.defaults("context").get_typed("resolver_unicast_daemon")) == 3
    cfg.config_text("context resolver_unicast_daemon 0.0.0.0:0\n", "g.cfg")
    assert cfg.defaults("context").get_typed("resolver_unicast_daemon") == ()


def test_missing_file_and_url(tmp_path):
    with pytest.raises(ConfigError, match="cannot read"):
        parse_file(tmp_path / "nope.cfg")
    with pytest.raises(ConfigError, match="URL"):
        parse_file("http://example.invalid/a.cfg")


def test_example_file_loads():
    cfg = Configuration()
    cfg.config_file(Path(__file__).parents[2] / "configs" / "app.cfg")
    ctx = cfg.defaults("context")
    assert ctx.get("resolver_unicast_daemon") == "127.0.0.1:15380"
    assert cfg.defaults("source").get_typed("late_join") is True
