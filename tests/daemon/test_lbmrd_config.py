"""lbmrd's XML configuration loader: values, units, abbreviations, precedence, located errors."""

from __future__ import annotations

import ipaddress
from pathlib import Path

import pytest

from umcore.config import lbmrd as cfg
from umcore.errors import ConfigError

ROOT = Path(__file__).resolve().parents[2]


def write(tmp_path: Path, daemon: str = "", domains: str = "", rules: str = "") -> Path:
    domains = domains or '<domain name="dummy"><network>0.0.0.0/32</network></domain>'
    rules = rules or (
        '<transform source="dummy" destination="dummy"><rule>'
        '<match address="0.0.0.0" port="0"/><replace address="0.0.0.0" port="0"/>'
        "</rule></transform>"
    )
    path = tmp_path / "l.xml"
    path.write_text(
        '<?xml version="1.0" encoding="UTF-8" ?>\n<lbmrd version="1.0">\n'
        f"<daemon>{daemon}</daemon>\n<domains>{domains}</domains>\n"
        f"<transformations>{rules}</transformations>\n</lbmrd>\n"
    )
    return path


def test_defaults_are_the_seeds() -> None:
    c = cfg.LbmrdConfig()
    assert (c.port, c.ttl_ms, c.activity_ms, c.rcvbuf, c.sndbuf) == (
        15380,
        60000,
        60000,
        1048576,
        1048576,
    )
    assert c.interface is None and c.log is None


def test_daemon_settings(tmp_path: Path) -> None:
    c = cfg.load(
        write(
            tmp_path,
            "<activity>500</activity><interface>10.29.3.0/24</interface><port>12801</port>"
            "<ttl>2000</ttl><log>x.log</log>"
            "<resolver_unicast_receiver_socket_buffer>\n 65536\n"
            "</resolver_unicast_receiver_socket_buffer>"
            "<resolver_unicast_send_socket_buffer>32768</resolver_unicast_send_socket_buffer>",
        )
    )
    assert (c.activity_ms, c.interface, c.port, c.ttl_ms, c.log, c.rcvbuf, c.sndbuf) == (
        500,
        "10.29.3.0/24",
        12801,
        2000,
        "x.log",
        65536,
        32768,
    )
    assert (c.ttl_s, c.activity_s) == (2.0, 0.5)
    assert c.warnings == ()


def test_ttl_that_looks_like_seconds_warns(tmp_path: Path) -> None:
    c = cfg.load(write(tmp_path, "<ttl>60</ttl>"))
    assert c.ttl_ms == 60
    assert len(c.warnings) == 1 and "did you mean 60000" in c.warnings[0]
    # -t (seconds) replaces it, and the warning goes with it.
    d = cfg.apply_command_line(c, ttl_s=5)
    assert d.ttl_ms == 5000 and d.warnings == ()


def test_command_line_wins(tmp_path: Path) -> None:
    c = cfg.load(write(tmp_path, "<port>12801</port><activity>500</activity><log>a</log>"))
    d = cfg.apply_command_line(c, port=13000, logfile="b", rcvbuf=1, interface="lo")
    assert (d.port, d.activity_ms, d.log, d.rcvbuf, d.interface) == (13000, 500, "b", 1, "lo")


def test_nat_example_with_abbreviated_network() -> None:
    c = cfg.load(ROOT / "configs" / "lbmrd-nat.xml")
    assert [(d.name, d.networks) for d in c.domains] == [
        ("Net-NYC", (ipaddress.IPv4Network("10.1.0.0/16"),)),
        ("Net-NJC", (ipaddress.IPv4Network("192.168.1.0/24"),)),
    ]
    ((t,),) = [c.transforms]
    assert (t.source, t.destination) == ("Net-NYC", "Net-NJC")
    ((r,),) = [t.rules]
    assert (r.match_address, r.match_port, r.replace_address, r.replace_port) == (
        "10.1.1.50",
        None,
        "192.168.1.1",
        None,
    )


@pytest.mark.parametrize(
    ("text", "network"),
    [
        ("192.168.1/24", "192.168.1.0/24"),
        ("10/8", "10.0.0.0/8"),
        ("10.1.1.50", "10.1.1.50/32"),
        ("0.0.0.0/32", "0.0.0.0/32"),
        ("10.1.2.3/16", "10.1.0.0/16"),
    ],
)
def test_parse_network(text: str, network: str) -> None:
    assert cfg.parse_network(text) == ipaddress.IPv4Network(network)


@pytest.mark.parametrize(
    "text", ["host.example.com", "10.1/33", "10.1.1", "1.2.3.4.5/8", "300.1.1.1"]
)
def test_parse_network_refuses(text: str) -> None:
    with pytest.raises(ValueError):
        cfg.parse_network(text)


def test_port_star_and_numbers(tmp_path: Path) -> None:
    c = cfg.load(
        write(
            tmp_path,
            rules='<transform source="dummy" destination="dummy"><rule>'
            '<match address="10.0.0.1"/><replace address="10.0.0.2" port="99"/>'
            "</rule></transform>",
        )
    )
    r = c.transforms[0].rules[0]
    assert (r.match_port, r.replace_port) == (None, 99)  # port defaults to "*"


@pytest.mark.parametrize(
    ("daemon", "what"),
    [
        ("<port>0</port>", "<port>"),
        ("<port>65536</port>", "<port>"),
        ("<ttl>-1</ttl>", "<ttl>"),
        ("<activity></activity>", "<activity>"),
        ("<log> </log>", "<log>"),
        ("<port>1</port><port>2</port>", "<port>"),
    ],
)
def test_daemon_errors_are_located(tmp_path: Path, daemon: str, what: str) -> None:
    path = write(tmp_path, daemon)
    with pytest.raises(ConfigError) as exc:
        cfg.load(path)
    assert str(exc.value).startswith(f"{path}:3: {what}: ")


def test_dtd_is_shipped() -> None:
    assert "<!ATTLIST lbmrd version (1.0) #REQUIRED>" in cfg.dtd_text()
