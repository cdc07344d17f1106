"""Contexts accept interface specs as the daemons do: device names, CIDR networks, addresses;
``resolver_unicast_daemon`` entries honour their ``Iface[:SrcPort]->`` part."""

from __future__ import annotations

import asyncio
import socket

import pytest

from tests.api.conftest import configure
from umcore.api import Context
from umcore.config.attributes import reset_global_configuration
from umcore.errors import ConfigError

WAIT = 10.0


@pytest.mark.parametrize("spec", ['"lo"', "127.0.0.0/8", "127.0.0.1"])
async def test_multicast_interface_by_device_cidr_or_address(
    spec: str, unused_udp_port: int
) -> None:
    configure(
        f"""
        context resolver_multicast_interface {spec}
        context resolver_multicast_address 224.9.10.96
        context resolver_multicast_port {unused_udp_port}
        context transport_tcp_port_low 0
        context transport_tcp_port_high 0
        source transport_tcp_interface 127.0.0.0/8
        """
    )
    try:
        async with await Context.create() as ctx:
            assert ctx.advertised_ip == "127.0.0.1"
            src = await ctx.create_source("t")
            assert src.transport_info.ip == "127.0.0.1"
            await src.close()
    finally:
        reset_global_configuration(None)


async def test_an_interface_matching_nothing_is_a_config_error(unused_udp_port: int) -> None:
    configure(
        f"""
        context resolver_multicast_interface "no-such-device0"
        context resolver_multicast_port {unused_udp_port}
        """
    )
    try:
        with pytest.raises(ConfigError):
            await Context.create()
    finally:
        reset_global_configuration(None)


def _free_udp_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


async def test_unicast_daemon_entry_source_port_is_used() -> None:
    lbmrd = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    lbmrd.bind(("127.0.0.1", 0))
    lbmrd.setblocking(False)
    other = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    other.bind(("127.0.0.1", 0))
    other.setblocking(False)
    dport, oport = lbmrd.getsockname()[1], other.getsockname()[1]
    sport = _free_udp_port()
    configure(
        f"""
        context resolver_unicast_daemon "lo":{sport}->127.0.0.1:{dport}
        context resolver_unicast_daemon 127.0.0.1:{oport}
        context resolver_unicast_port_low 0
        context resolver_unicast_port_high 0
        context transport_tcp_port_low 0
        context transport_tcp_port_high 0
        """
    )
    loop = asyncio.get_running_loop()
    try:
        async with await Context.create() as ctx:
            await ctx.create_source("t")  # gives the resolver something to say
            async with asyncio.timeout(WAIT):
                _, peer = await loop.sock_recvfrom(lbmrd, 65536)
                _, other_peer = await loop.sock_recvfrom(other, 65536)
            assert peer == ("127.0.0.1", sport)  # the entry's Iface:SrcPort
            assert other_peer[1] == ctx.resolver_address[1] != sport  # the context's own
            for s in list(ctx.sources):
                await s.close()
    finally:
        reset_global_configuration(None)
        lbmrd.close()
        other.close()
