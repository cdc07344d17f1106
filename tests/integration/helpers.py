"""What the integration tests share: free loopback ports, the process configuration, lbmrd client
and LBT settings, and a bounded poll.

Fixtures (``lbmrd``, ``reset_configuration``) are in this folder's ``conftest.py``.
"""

from __future__ import annotations

import asyncio
import socket
from collections.abc import Callable

from umcore.config.attributes import Configuration, reset_global_configuration

WAIT = 20.0  # default bound of :func:`until`: resolution and joins on a shared 2-core machine


def free_udp_port() -> int:
    """A UDP port free on loopback just now (for options that cannot take 0 = ephemeral)."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def load_configuration(text: str, source: str = "test") -> Configuration:
    """Make flat-file ``text`` this process's configuration (what ``Context.create()`` without
    attributes uses); reset it after the test (fixture ``reset_configuration``)."""
    cfg = Configuration()
    cfg.config_text(text, source)
    reset_global_configuration(cfg)
    return cfg


def lbmrd_client_lines(*daemons: tuple[str, int]) -> str:
    """Unicast topic resolution through the lbmrds ``daemons`` (in order), from loopback with
    ephemeral resolver ports (other suites may hold 14402-14406)."""
    return "".join(f"context resolver_unicast_daemon {ip}:{port}\n" for ip, port in daemons) + (
        "context resolver_unicast_interface 127.0.0.1\n"
        "context resolver_unicast_port_low 0\n"
        "context resolver_unicast_port_high 0\n"
    )


def lbt_lines(transport: str, *, resolver_group: str, data_group: str) -> str:
    """Sources on ``transport`` (``lbtru`` or ``lbtrm``), everything on loopback: multicast topic
    resolution on ``resolver_group`` and a free port, LBT-RM data on ``data_group`` and a free
    destination port, LBT-RU and LBT-RM ports ephemeral (test groups apart keep suites running
    at the same time from hearing each other)."""
    return f"""
        context resolver_multicast_interface 127.0.0.1
        context resolver_multicast_address {resolver_group}
        context resolver_multicast_port {free_udp_port()}
        context transport_lbtru_port_low 0
        context transport_lbtru_port_high 0
        context transport_lbtrm_source_port_low 0
        context transport_lbtrm_source_port_high 0
        context transport_lbtrm_multicast_address_low {data_group}
        context transport_lbtrm_multicast_address_high {data_group}
        source transport {transport}
        source transport_lbtrm_destination_port {free_udp_port()}
        source transport_lbtru_interface 127.0.0.1
        receiver transport_lbtru_port_low 0
        receiver transport_lbtru_port_high 0
        receiver transport_lbtru_interface 127.0.0.1
        """


async def until(
    pred: Callable[[], object],
    what: str = "",
    *,
    timeout: float = WAIT,
    detail: Callable[[], str] | None = None,
) -> None:
    """Poll ``pred`` until it is true; fail naming ``what`` after ``timeout`` seconds, with
    ``detail()`` (the state worth seeing when it fails) in the message."""
    try:
        async with asyncio.timeout(timeout):
            while not pred():
                await asyncio.sleep(0.01)  # polling a condition, bounded by the timeout
    except TimeoutError:
        more = f"\n{detail()}" if detail is not None else ""
        raise AssertionError(
            f"timed out after {timeout} s waiting for {what or pred}{more}"
        ) from None
