"""Which address a TCP source listens on (seed 003 / notes transports 1.1):
``transport_tcp_interface`` (source), else ``default_interface`` (context), else any; the TIR
names the address listened on."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from umcore.aio.tcp import SourceListener
from umcore.api import Context
from umcore.config.attributes import Configuration, reset_global_configuration
from umcore.wire.lbmr import TCPInfo


@pytest.fixture
def fresh_config() -> Iterator[None]:
    yield
    reset_global_configuration(None)


def _configure(port: int, extra: str) -> None:
    cfg = Configuration()
    cfg.config_text(
        f"""
        context resolver_multicast_interface 127.0.0.1
        context resolver_multicast_address 224.9.10.94
        context resolver_multicast_port {port}
        context transport_tcp_port_low 0
        context transport_tcp_port_high 0
        {extra}
        """,
        "test",
    )
    reset_global_configuration(cfg)


async def _listening(ctx: Context) -> tuple[str, str]:
    src = await ctx.create_source("iface")
    listener = src.session.writer
    assert isinstance(listener, SourceListener) and listener.server is not None
    bound = listener.server.sockets[0].getsockname()[0]
    info = src.transport_info
    assert isinstance(info, TCPInfo)
    await src.close()
    return str(bound), info.ip


@pytest.mark.parametrize(
    ("extra", "bound"),
    [
        ("", "0.0.0.0"),
        ("context default_interface 127.0.0.1", "127.0.0.1"),
        ('context default_interface "lo"', "127.0.0.1"),
        ("source transport_tcp_interface 127.0.0.0/8", "127.0.0.1"),
    ],
)
async def test_the_listen_address_follows_the_interface_options(
    unused_udp_port: int, fresh_config: None, extra: str, bound: str
) -> None:
    _configure(unused_udp_port, extra)
    async with await Context.create() as ctx:
        got, advertised = await _listening(ctx)
        assert got == bound
        assert advertised == (bound if bound != "0.0.0.0" else ctx.advertised_ip)
