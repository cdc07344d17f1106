"""What the peer-link process tests share: DRO configurations with endpoint and peer portals
(short timers), tnwgd as a process, and the TCP port a peer acceptor will listen on.

Timers are short so that faults show quickly: keepalive every 200 ms with a 1 s timeout, route
information every 200 ms (checked every 100 ms, 1.5 s timeout), recalculation back-off 100 ms,
initiator reconnect 200 ms.
"""

from __future__ import annotations

import re
import socket
from dataclasses import dataclass
from pathlib import Path
from xml.sax.saxutils import quoteattr

from tests.dro_proc.kit import Trd
from tests.integration.daemon_proc import DaemonProcess
from umcore.tools.certs import CertFiles

STARTED = re.compile(r"Gwd-7122-1: Gateway named \[([\w-]+)\] with node id: (\d+) has started")
LINK_UP = re.compile(r"peer portal \[(\w+)\]: link up with DRO \[([\w-]+)\]")
LOST = re.compile(r"peer portal \[(\w+)\]: lost connection to")
# Large enough that the test's receiver never makes a DRO drop (no flow control crosses a DRO).
BIG_QUEUE = 256 << 20
KEEPALIVE = '<gateway-keepalive interval="200" timeout="1000"/>'
TIMERS = (
    '<route-info propagation-interval="200" check-interval="100" timeout="1500"/>'
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
            f"<max-queue>{BIG_QUEUE}</max-queue>{batch}{KEEPALIVE}</peer>"
        )


def peer_dro_xml(name: str, endpoints: list[tuple[str, int, Trd]], peers: list[PeerSpec]) -> str:
    """A DRO with endpoint portals (name, domain id, TRD; TCP proxy sources) and peer portals."""
    parts = [f'<tnw-gateway version="1.0"><daemon><name>{name}</name>{TIMERS}</daemon><portals>']
    for pname, dom, trd in endpoints:
        parts.append(
            f"<endpoint><name>{pname}</name><domain-id>{dom}</domain-id>"
            f"<max-queue>{BIG_QUEUE}</max-queue><lbm-attributes>"
            + options("context", trd.context())
            + options("source", trd.source("tcp"))
            + options("receiver", trd.receiver())
            + "</lbm-attributes></endpoint>"
        )
    parts += [p.xml() for p in peers]
    parts.append("</portals></tnw-gateway>")
    return "".join(parts)


async def start_dro(folder: Path, name: str, xml: str) -> DaemonProcess:
    """``python -m daemons.tnwgd FILE`` (log on stdout), returned once it has started."""
    cfg = folder / f"{name}.xml"
    cfg.write_text(xml)
    dro = await DaemonProcess.start("tnwgd", str(cfg), wait_listening=False)
    try:
        await dro.wait_for_line(STARTED, 30)
    except BaseException:
        await dro.kill()
        raise
    return dro
