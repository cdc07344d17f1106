"""A fresh process configuration per test (UM's ``lbm_config``), on loopback; a bounded poll."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterator

import pytest

from umcore.config.attributes import Configuration, reset_global_configuration

WAIT = 10.0  # bound on every wait of the API tests


def configure(text: str) -> Configuration:
    cfg = Configuration()
    cfg.config_text(text, "test")
    reset_global_configuration(cfg)
    return cfg


@pytest.fixture
def mcast_config(unused_udp_port: int) -> Iterator[Configuration]:
    """Multicast TR on loopback, on a test-only group and a free port (suites running at the
    same time do not hear each other); TCP sessions on ephemeral ports."""
    yield configure(
        f"""
        context resolver_multicast_interface 127.0.0.1
        context resolver_multicast_address 224.9.10.99
        context resolver_multicast_port {unused_udp_port}
        context transport_tcp_port_low 0
        context transport_tcp_port_high 0
        source transport_tcp_interface 127.0.0.1
        """
    )
    reset_global_configuration(None)


@pytest.fixture
def opts(mcast_config: object) -> None:
    """The attributes argument of ``Context.create``: None (the process configuration, set by
    :func:`mcast_config`, applies)."""
    return None


async def wait_for(pred: Callable[[], object], timeout: float = WAIT) -> None:
    """Poll ``pred`` until it is true; TimeoutError after ``timeout`` seconds."""
    async with asyncio.timeout(timeout):
        while not pred():
            await asyncio.sleep(0.01)
