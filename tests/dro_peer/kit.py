"""What the peer-link process tests share: DRO configurations with endpoint and peer portals
(short timers), tnwgd as a process, and the TCP port a peer acceptor will listen on.

Timers are short so that faults show quickly: route information every 200 ms (checked every
100 ms, 1.5 s timeout), recalculation back-off 100 ms, initiator reconnect 200 ms, keepalive
every 200 ms with a 1 s timeout where the keepalive is tested (:data:`SHORT_KEEPALIVE`), a 5 s
timeout elsewhere (:data:`KEEPALIVE`, see there why).
"""

from __future__ import annotations

import asyncio
import re
import socket
import struct
import urllib.request
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from xml.sax.saxutils import quoteattr

from tests.dro_proc.kit import Trd
from tests.integration.daemon_proc import METRICS, DaemonProcess
from umcore.api import Message
from umcore.api.message import MSG_DATA
from umcore.tools.certs import CertFiles

SEQ = struct.Struct("!I")

STARTED = re.compile(r"Gwd-7122-1: Gateway named \[([\w-]+)\] with node id: (\d+) has started")
LINK_UP = re.compile(r"peer portal \[(\w+)\]: link up with DRO \[([\w-]+)\]")
LOST = re.compile(r"peer portal \[(\w+)\]: lost connection to")
# Large enough that the test's receiver never makes a DRO drop (no flow control crosses a DRO).
BIG_QUEUE = 256 << 20
# A keepalive query waits behind the data already queued on the link (TCP is one stream): a
# burst of 100,000 messages on a loaded 2-core machine can hold it for over a second, so the
# tests that send bursts use a 5 s timeout, and the tests of the keepalive itself 1 s with light
# traffic.  idle="no": a query every interval whatever else arrives (with UM's default "yes"
# the route information every 200 ms would keep the link from ever sending one).
KEEPALIVE = '<gateway-keepalive idle="no" interval="200" timeout="5000"/>'
SHORT_KEEPALIVE = '<gateway-keepalive idle="no" interval="200" timeout="1000"/>'
TIMERS = (
    '<route-info propagation-interval="200" check-interval="100" timeout="1500"/>'
    '<route-recalculation backoff-interval="100" warning-interval="2000"/>'
)
# The same for the tests that send bursts, with a 5 s route-info timeout (as KEEPALIVE's): a
# DRO descheduled for over 1.5 s on a loaded machine (or the other's route information queued
# behind a burst's backlog on the link) would otherwise let the route to the other DRO time
# out mid-burst -- both DROs recalculate, DRO1's proxy receiver leaves the source, and what the
# source sends until the route is back is gone with no loss a receiver could see (a tail).
BURST_TIMERS = (
    '<route-info propagation-interval="200" check-interval="100" timeout="5000"/>'
    '<route-recalculation backoff-interval="100" warning-interval="2000"/>'
)


def options(scope: str, opts: dict[str, str]) -> str:
    return "".join(
        f"<option scope={quoteattr(scope)} name={quoteattr(k)} value={quoteattr(v)}/>"
        for k, v in opts.items()
    )


def free_tcp_port() -> int:
    """A TCP port free now on 127.0.0.1 (an acceptor binds it moments later)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@dataclass
class PeerSpec:
    """One ``<peer>`` portal: an acceptor on ``port`` or an initiator to it."""

    name: str
    role: str  # "acceptor" | "initiator"
    port: int
    cost: int = 1
    lz4: bool = False
    tls: CertFiles | None = None
    batching: bool = False
    keepalive: str = KEEPALIVE
    udp: str = ""  # a <udp> element: the data link over UDP

    def xml(self) -> str:
        if self.role == "acceptor":
            side = f"<acceptor><listen-port>{self.port}</listen-port></acceptor>"
        else:
            side = (
                '<initiator reconnect-interval="200"><address>127.0.0.1</address>'
                f"<port>{self.port}</port></initiator>"
            )
        sec = "<compression>LZ4</compression>" if self.lz4 else ""
        if self.tls is not None:
            c = self.tls
            sec += (
                f"<tls><certificate>{c.certificate}</certificate><certificate-key>{c.key}"
                f"</certificate-key><trusted-certificates>{c.trusted}</trusted-certificates></tls>"
            )
        batch = '<batching min-length="16384" batch-interval="5"/>' if self.batching else ""
        return (
            f"<peer><name>{self.name}</name><cost>{self.cost}</cost>"
            f"<single-tcp><interface>127.0.0.1</interface><nodelay/>{sec}{side}</single-tcp>"
            f"{self.udp}<max-queue>{BIG_QUEUE}</max-queue>{batch}{self.keepalive}</peer>"
        )


def peer_dro_xml(
    name: str,
    endpoints: list[tuple[str, int, Trd]],
    peers: list[PeerSpec],
    cost: int = 1,
    *,
    timers: str = TIMERS,
) -> str:
    """A DRO with endpoint portals (name, domain id, TRD; TCP proxy sources; ``cost``) and peer
    portals; ``timers``: its route-info and recalculation timers."""
    parts = [f'<tnw-gateway version="1.0"><daemon><name>{name}</name>{timers}</daemon><portals>']
    for pname, dom, trd in endpoints:
        parts.append(
            f"<endpoint><name>{pname}</name><domain-id>{dom}</domain-id><cost>{cost}</cost>"
            f"<max-queue>{BIG_QUEUE}</max-queue><lbm-attributes>"
            + options("context", trd.context())
            + options("source", trd.source("tcp"))
            + options("receiver", trd.receiver())
            + "</lbm-attributes></endpoint>"
        )
    parts += [p.xml() for p in peers]
    parts.append("</portals></tnw-gateway>")
    return "".join(parts)


async def start_dro(
    folder: Path, name: str, xml: str, *, metrics: bool = False, env: dict[str, str] | None = None
) -> DaemonProcess:
    """``python -m daemons.tnwgd FILE`` (log on stdout, ``env`` added to its environment),
    returned once it has started (and, with ``metrics``, serves Prometheus metrics:
    ``dro.metrics`` is their address)."""
    cfg = folder / f"{name}.xml"
    cfg.write_text(xml)
    args = ["--metrics", "127.0.0.1:0"] if metrics else []
    dro = await DaemonProcess.start("tnwgd", *args, str(cfg), wait_listening=False, env=env)
    try:
        await dro.wait_for_line(STARTED, 30)
        if metrics:
            found = await dro.wait_for_line(METRICS, 30)
            dro.metrics = (found.group(1), int(found.group(2)))
    except BaseException:
        await dro.kill()
        raise
    return dro


def count_lines(dro: DaemonProcess, pattern: re.Pattern[str]) -> int:
    return sum(1 for line in dro.all_lines() if pattern.search(line))


class Arrivals:
    """A receiver callback keeping, per data message, (source string, counter, loop time)."""

    def __init__(self) -> None:
        self.got: list[tuple[str, int, float]] = []
        self.loop = asyncio.get_running_loop()

    def __call__(self, msg: Message) -> None:
        if msg.type == MSG_DATA and len(msg.data) >= 4:
            self.got.append((msg.source, SEQ.unpack_from(msg.data)[0], self.loop.time()))

    def sources(self) -> list[str]:
        """Source strings in the order they first delivered."""
        return list(dict.fromkeys(s for s, _, _ in self.got))

    def first_from(self, source: str) -> float | None:
        return next((t for s, _, t in self.got if s == source), None)

    def count_from(self, source: str) -> int:
        return sum(1 for s, _, _ in self.got if s == source)


async def ticker(send: Callable[[bytes], Awaitable[object]], period: float) -> None:
    """Send a counter every ``period`` seconds until cancelled."""
    i = 0
    while True:
        await send(SEQ.pack(i))
        i += 1
        await asyncio.sleep(period)  # the sending rate, not a synchronisation


def _get(url: str) -> str:
    with urllib.request.urlopen(url, timeout=10) as r:
        return str(r.read().decode())


async def metric(dro: DaemonProcess, name: str) -> float:
    """One sample of the DRO's Prometheus metric ``name`` (no labels)."""
    assert dro.metrics is not None
    host, port = dro.metrics
    text = await asyncio.to_thread(_get, f"http://{host}:{port}/metrics")
    for line in text.splitlines():
        if line.startswith((name + " ", name + "_total ")):  # a counter's sample is NAME_total
            return float(line.split()[1])
    raise AssertionError(f"no metric {name}")
