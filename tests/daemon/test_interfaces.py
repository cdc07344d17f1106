"""Interface discovery and specs against a fake address table (psutil's shape): every IPv4
address of every interface, secondary ones and Linux alias labels included, in the OS's order."""

from __future__ import annotations

import socket
from collections.abc import Mapping, Sequence
from typing import NamedTuple

import psutil
import pytest

from umcore.aio.interfaces import context_interface, local_addresses, resolve
from umcore.errors import ConfigError


class Addr(NamedTuple):
    """A stand-in for psutil's ``snicaddr``: only what discovery reads."""

    family: int
    address: str


V4, V6, LINK = socket.AF_INET, socket.AF_INET6, psutil.AF_LINK

# As psutil reports a Linux host whose lo carries 127.0.1.1/32 beside 127.0.0.1, whose eth0 has
# two addresses in 10.29.3/24 and one in 192.168.50/24, plus an address labelled eth0:1.
TABLE: dict[str, list[Addr]] = {
    "lo": [Addr(V4, "127.0.0.1"), Addr(V4, "127.0.1.1"), Addr(V6, "::1"), Addr(LINK, "00:00")],
    "eth0": [
        Addr(V4, "10.29.3.101"),
        Addr(V4, "10.29.3.102"),
        Addr(V4, "192.168.50.9"),
        Addr(V6, "fe80::1%eth0"),
        Addr(LINK, "02:fc:00:00:00:01"),
    ],
    "v6only": [Addr(V6, "fd00::5"), Addr(LINK, "02:fc:00:00:00:02")],
    "eth0:1": [Addr(V4, "10.29.4.1")],
}


def table(t: Mapping[str, Sequence[Addr]] = TABLE) -> dict[str, list[Addr]]:
    return {name: list(entries) for name, entries in t.items()}


LOCAL = local_addresses(table)


def test_every_ipv4_address_of_every_interface_in_the_os_order() -> None:
    assert LOCAL == [
        ("lo", "127.0.0.1"),
        ("lo", "127.0.1.1"),
        ("eth0", "10.29.3.101"),
        ("eth0", "10.29.3.102"),
        ("eth0", "192.168.50.9"),
        ("eth0:1", "10.29.4.1"),
    ]


def test_the_os_order_is_kept_not_sorted() -> None:
    """Windows, say, may list loopback last: the default is then the first adapter listed."""
    reordered = {"eth0": TABLE["eth0"], "lo": TABLE["lo"]}
    local = local_addresses(lambda: reordered)
    assert [a for _, a in local] == [
        "10.29.3.101",
        "10.29.3.102",
        "192.168.50.9",
        "127.0.0.1",
        "127.0.1.1",
    ]
    got = resolve(None, addresses=local)
    assert (got.address, got.defaulted) == ("10.29.3.101", True)
    assert "eth0" in got.how


@pytest.mark.parametrize(
    ("spec", "address", "defaulted"),
    [
        (None, "127.0.0.1", True),  # the first address of the first interface found
        ("", "127.0.0.1", True),
        ("0.0.0.0", "127.0.0.1", True),
        ("127.0.1.1", "127.0.1.1", False),  # a secondary address of lo
        ("10.29.3.102", "10.29.3.102", False),  # a secondary address of eth0
        ("10.29.4.1", "10.29.4.1", False),  # under an alias label
        ("127.0.1.0/24", "127.0.1.1", False),  # the network holds only lo's secondary
        ("192.168.50.0/24", "192.168.50.9", False),  # eth0's third address
        ("192.168/16", "192.168.50.9", False),
        ("10.29.3.0/24", "10.29.3.101", False),  # two inside: the first
        ("10.29.3.102/32", "10.29.3.102", False),
        ("10.29.0.0/16", "10.29.3.101", False),  # eth0 before eth0:1
        ("10.29.4/24", "10.29.4.1", False),
        ("lo", "127.0.0.1", False),  # a device: its first address
        ("eth0", "10.29.3.101", False),
        ('"eth0"', "10.29.3.101", False),
        ('"eth0:1"', "10.29.4.1", False),
    ],
)
def test_specs_among_several_addresses(spec: str | None, address: str, defaulted: bool) -> None:
    got = resolve(spec, addresses=LOCAL)
    assert (got.address, got.defaulted) == (address, defaulted)


@pytest.mark.parametrize(
    ("spec", "named"),
    [
        ("10.29.3.103", "10.29.3.103 is not an address of this host"),
        ("172.16.0.0/12", "no local address in 172.16.0.0/12"),
        ("10.29.5/24", "no local address in 10.29.5/24 (10.29.5.0/24)"),
        ('"v6only"', "no device named 'v6only'"),  # no IPv4 address: not an IPv4 interface
        ('"eth9"', "no device named 'eth9'"),
    ],
)
def test_a_spec_matching_nothing_names_it_and_every_address_found(spec: str, named: str) -> None:
    with pytest.raises(ConfigError) as exc:
        resolve(spec, source="f.xml", line=7, what="<interface>", addresses=LOCAL)
    text = str(exc.value)
    assert text.startswith(f"f.xml:7: <interface>: {named}"), text
    for name, addr in LOCAL:
        assert f"{name}={addr}" in text


def test_no_ipv4_address_at_all_is_a_clear_error() -> None:
    local = local_addresses(lambda: {"v6only": TABLE["v6only"]})
    assert local == []
    with pytest.raises(ConfigError) as exc:
        resolve(None, addresses=local)
    assert "no IPv4 address was found on any interface" in str(exc.value)
    assert "none" in str(exc.value)


def test_context_interfaces_use_the_same_table() -> None:
    assert context_interface("127.0.1.1", addresses=LOCAL) == "127.0.1.1"
    assert context_interface('"eth0"', addresses=LOCAL) == "10.29.3.101"
    assert context_interface("192.168.50.0/24", addresses=LOCAL) == "192.168.50.9"
    for unnamed in (None, "", "0.0.0.0", "0.0.0.0/0"):
        assert context_interface(unnamed, addresses=LOCAL) is None
    with pytest.raises(ConfigError) as exc:
        context_interface("10.29.3.103", what="resolver_multicast_interface", addresses=LOCAL)
    assert "lo=127.0.1.1" in str(exc.value)


def test_every_address_of_this_host_is_accepted_as_itself() -> None:
    """On the real host (psutil's table): each address found resolves to itself."""
    local = local_addresses()
    assert any(addr == "127.0.0.1" for _, addr in local)
    for name, addr in local:
        got = resolve(addr)
        assert got.address == addr and not got.defaulted, (name, got)
