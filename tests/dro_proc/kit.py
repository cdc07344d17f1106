"""What the DRO process tests share: a TRD on loopback of its own, a DRO configuration joining
TRDs, an in-process DRO runtime, and a receiver that records what it got.

Each :class:`Trd` has its own multicast group and resolver port (chosen at random among groups
no other suite uses: 224.11.x.y), so the TRDs of one test, and the tests of suites run at the
same time, do not hear each other; every transport port is ephemeral.
"""

from __future__ import annotations

import random
import socket
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from xml.sax.saxutils import quoteattr

from daemons.tnwgd.app import DroRuntime
from umcore.api import Message
from umcore.api import message as m
from umcore.config import dro as dro_config


def free_udp_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _group() -> str:
    return f"224.11.{random.randrange(1, 250)}.{random.randrange(1, 250)}"


@dataclass
class Trd:
    """One topic resolution domain on loopback (multicast topic resolution)."""

    group: str = field(default_factory=_group)
    port: int = field(default_factory=free_udp_port)
    data_group: str = field(default_factory=_group)
    data_port: int = field(default_factory=free_udp_port)
    #: The DRO portal's own extras: source-scope options of its proxy sources, its max-queue.
    dro_source: dict[str, str] = field(default_factory=dict)
    max_queue: int | None = None
    #: Topic resolution through this lbmrd (or SRS) instead of multicast.
    lbmrd: tuple[str, int] | None = None
    srs: tuple[str, int] | None = None

    def resolution(self) -> dict[str, str]:
        if self.srs is not None:
            return {
                "resolver_service": f"{self.srs[0]}:{self.srs[1]}",
                "resolver_disable_udp_topic_resolution": "1",
                "default_interface": "127.0.0.1",
            }
        if self.lbmrd is not None:
            return {
                "resolver_unicast_daemon": f"{self.lbmrd[0]}:{self.lbmrd[1]}",
                "resolver_unicast_interface": "127.0.0.1",
                "resolver_unicast_port_low": "0",
                "resolver_unicast_port_high": "0",
                # register with the lbmrd at once (recommended with DROs: an application
                # without sources or receivers still hears the DRO's domain id and routes)
                "resolver_unicast_force_alive": "1",
            }
        return {
            "resolver_multicast_interface": "127.0.0.1",
            "resolver_multicast_address": self.group,
            "resolver_multicast_port": str(self.port),
        }

    def context(self) -> dict[str, str]:
        """Context-scope options of an application (or a DRO portal) in this TRD."""
        return {
            **self.resolution(),
            "transport_tcp_port_low": "0",
            "transport_tcp_port_high": "0",
            "request_tcp_port_low": "0",
            "request_tcp_port_high": "0",
            "request_tcp_interface": "127.0.0.1",
            "transport_lbtru_port_low": "0",
            "transport_lbtru_port_high": "0",
            "transport_lbtrm_source_port_low": "0",
            "transport_lbtrm_source_port_high": "0",
            "transport_lbtrm_multicast_address_low": self.data_group,
            "transport_lbtrm_multicast_address_high": self.data_group,
        }

    def source(self, transport: str = "tcp") -> dict[str, str]:
        """Source-scope options of a source on ``transport`` (tcp, lbtru, lbtrm)."""
        return {
            "transport": transport,
            "transport_tcp_interface": "127.0.0.1",
            "transport_lbtru_interface": "127.0.0.1",
            "transport_lbtrm_destination_port": str(self.data_port),
        }

    def receiver(self) -> dict[str, str]:
        return {
            "transport_lbtru_port_low": "0",
            "transport_lbtru_port_high": "0",
            "transport_lbtru_interface": "127.0.0.1",
        }


def _options(scope: str, opts: dict[str, str]) -> str:
    return "".join(
        f"<option scope={quoteattr(scope)} name={quoteattr(k)} value={quoteattr(v)}/>"
        for k, v in opts.items()
    )


def dro_xml(
    portals: list[tuple[str, int, Trd]],
    *,
    name: str = "dro",
    max_queue: int | None = None,
    transport: str = "tcp",
    log: str | None = None,
    pidfile: str | None = None,
) -> str:
    """A DRO joining ``portals`` (name, domain id, TRD); proxy sources on ``transport``."""
    parts = [f'<tnw-gateway version="1.0"><daemon><name>{name}</name>']
    if log:
        parts.append(f'<log type="file">{log}</log>')
    if pidfile:
        parts.append(f"<pidfile>{pidfile}</pidfile>")
    parts.append("</daemon><portals>")
    for pname, dom, trd in portals:
        parts.append(f"<endpoint><name>{pname}</name><domain-id>{dom}</domain-id>")
        limit = trd.max_queue if trd.max_queue is not None else max_queue
        if limit is not None:
            parts.append(f"<max-queue>{limit}</max-queue>")
        parts.append("<lbm-attributes>")
        parts.append(_options("context", trd.context()))
        parts.append(_options("source", {**trd.source(transport), **trd.dro_source}))
        parts.append(_options("receiver", trd.receiver()))
        parts.append("</lbm-attributes></endpoint>")
    parts.append("</portals></tnw-gateway>")
    return "".join(parts)


@asynccontextmanager
async def running_dro(xml: str) -> AsyncIterator[DroRuntime]:
    """An in-process DRO from ``xml``, closed at the end."""
    rt = DroRuntime(dro_config.load_text(xml, "test-dro.xml"))
    await rt.start()
    try:
        yield rt
    finally:
        await rt.close()


class Recorder:
    """A receiver callback keeping data sequence numbers and counting losses and events."""

    def __init__(self) -> None:
        self.sqns: list[int] = []
        self.payloads: list[bytes] = []
        self.losses = 0
        self.bos = 0
        self.eos = 0
        self.keep_payloads = False

    def __call__(self, msg: Message) -> None:
        t = msg.type
        if t == m.MSG_DATA:
            self.sqns.append(msg.sequence_number)
            if self.keep_payloads:
                self.payloads.append(bytes(msg.data))
        elif t in (m.MSG_UNRECOVERABLE_LOSS, m.MSG_UNRECOVERABLE_LOSS_BURST):
            self.losses += 1
        elif t == m.MSG_BOS:
            self.bos += 1
        elif t == m.MSG_EOS:
            self.eos += 1


def proxy_ready(rt: DroRuntime, portal: str, topic: str) -> bool:
    """Has ``portal`` an open proxy source of ``topic`` with a receiver joined to it?"""
    for (_otid, t), px in rt.portals[portal].sources.items():
        if t == topic and px.raw is not None and px.raw.source.receivers >= 1:
            return True
    return False


def proxy_source_strings(rt: DroRuntime, portal: str, topic: str) -> list[str]:
    return [
        px.raw.source_string
        for (_otid, t), px in rt.portals[portal].sources.items()
        if t == topic and px.raw is not None
    ]
