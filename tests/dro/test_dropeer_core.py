"""Two DroCores joined by a real peer link on loopback, driven the way tnwgd's runtime will be.

:class:`MiniDro` is the smallest runtime a peer portal needs (and the reference for the
daemon's): one DroCore, one endpoint portal left to the test (its commands and frames are
collected, its topic resolution is played by calling the core), one peer portal made of a
:class:`PeerLink` and its :class:`PeerPortalLink`, and one ``turn()`` run after every input and
at the core's timer.  Checked: the DROs learn each other's domains over the link, interest
crosses it, a source advertised on one side becomes a proxy source on the other, 10,000 frames
arrive in order with their originating sequence numbers, and a link that goes away takes the
remote domain out of the routes.
"""

from __future__ import annotations

import asyncio

from tests.dro.kit import otid
from tests.integration.helpers import until
from umcore.aio.dropeer import PeerPortalLink
from umcore.aio.timer import CoreTimer
from umcore.config.dro import Peer, load_text
from umcore.dro import (
    CreateProxyReceiver,
    CreateProxySource,
    DroCore,
    ForwardedFrame,
    InterestKey,
    PortalCommand,
    SourceAdvert,
    SourceKey,
)
from umcore.dro.peer import PeerLink
from umcore.dro.peerglue import deliver, drain_queue, link_command, link_lbmr

S1 = SourceKey(otid(7), "prices.IBM")
WAIT = 20.0


def dro_xml(name: str, domain: int, link: str) -> str:
    # Short timers so a lost link is forgotten fast, yet not so short that a loaded machine's
    # pause in the 10,000-frame burst (one loop for both DROs) passes for a dead peer: at 400 ms
    # the keepalive timeout dropped the link mid-burst in a loaded run.
    return (
        f'<tnw-gateway version="1.0"><daemon><name>{name}</name>'
        '<route-info propagation-interval="100" check-interval="50" timeout="2000"/>'
        '<route-recalculation backoff-interval="100" warning-interval="2000"/></daemon><portals>'
        f"<endpoint><name>E</name><domain-id>{domain}</domain-id></endpoint>"
        f"<peer><name>P</name><cost>2</cost><single-tcp><interface>127.0.0.1</interface>{link}"
        '</single-tcp><gateway-keepalive interval="200" timeout="3000"/></peer>'
        "</portals></tnw-gateway>"
    )


class MiniDro:
    """One DRO: a core, a test-driven endpoint ``E`` and a peer portal ``P`` over TCP."""

    def __init__(self, name: str, domain: int, link: str) -> None:
        self.loop = asyncio.get_running_loop()
        cfg = load_text(dro_xml(name, domain, link), f"<{name}.xml>")
        peer = cfg.portal("P")
        assert isinstance(peer, Peer)
        node_id = domain * 1000
        self.core = DroCore(cfg, node_id, self.loop.time())
        self.link = PeerLink(peer, node_id, name)
        self.adapter = PeerPortalLink(peer, self.link, on_activity=self.turn)
        self.timer = CoreTimer(self.loop, self.turn)
        self.endpoint_commands: list[PortalCommand] = []
        self.endpoint_frames: list[ForwardedFrame] = []
        self.core.receive_portal_up("E", self.loop.time(), address=(f"10.0.0.{domain}", 14400))

    async def start(self) -> None:
        await self.adapter.start()
        self.turn()

    def turn(self) -> None:
        """What the runtime does after any input: timers due, link -> core, core -> portals."""
        now = self.loop.time()
        due = self.core.next_timer()
        if due is not None and due <= now:
            self.core.handle_timer(now)
        deliver(self.core, self.link, now)
        for cmd in self.core.take_commands():
            if cmd.portal == "P":
                link_command(self.link, cmd, now)
            else:
                self.endpoint_commands.append(cmd)
        for portal, packet in self.core.take_lbmr():
            if portal == "P":
                link_lbmr(self.link, packet, now)
        for portal, info in self.core.take_route_info():
            if portal == "P":
                self.link.send_route_info(info, now)
        drain_queue(self.core, self.link, now)
        self.endpoint_frames += self.core.take_frames("E")
        self.adapter.flush()
        self.timer.arm(self.core.next_timer())

    async def close(self) -> None:
        self.timer.cancel()
        await self.adapter.close()


async def test_two_dros_route_and_forward_over_a_real_link() -> None:
    a = MiniDro("dro-a", 1, "<acceptor><listen-port>0</listen-port></acceptor>")
    await a.start()
    port = a.adapter.port
    b = MiniDro(
        "dro-b",
        2,
        f'<initiator reconnect-interval="50"><address>127.0.0.1</address><port>{port}</port>'
        "</initiator>",
    )
    await b.start()
    try:
        await until(
            lambda: a.core.router.domains() == [1, 2] and b.core.router.domains() == [1, 2],
            "each DRO routes to the other's domain",
            timeout=WAIT,
        )
        assert a.core.router.toward(2) == "P" and a.link.peer_node_id == 2000
        # a receiver in domain 2 asks for the topic: dro-a must create a proxy receiver in 1
        b.core.receive_tqr("E", S1.topic, b.loop.time())
        b.turn()
        await until(
            lambda: any(
                isinstance(c, CreateProxyReceiver) and c.key == InterestKey(S1.topic)
                for c in a.endpoint_commands
            ),
            "proxy receiver in domain 1",
            timeout=WAIT,
        )
        # dro-a's proxy receiver resolves the source: dro-b must advertise a proxy source in 2
        a.core.receive_source("E", SourceAdvert(S1), a.loop.time())
        a.turn()
        await until(
            lambda: any(isinstance(c, CreateProxySource) for c in b.endpoint_commands),
            "proxy source in domain 2",
            timeout=WAIT,
        )
        (created,) = [c for c in b.endpoint_commands if isinstance(c, CreateProxySource)]
        assert (created.source, created.origin_domain) == (S1, 1)
        n = 10_000
        for sqn in range(n):
            assert a.core.receive_frame("E", S1, 5000 + sqn, b"px%d" % sqn)
            if sqn % 500 == 499:
                a.turn()
                await asyncio.sleep(0)  # a yield: let the loop carry the bytes
        a.turn()
        await until(lambda: len(b.endpoint_frames) >= n, f"{n} frames in domain 2", timeout=WAIT)
        got = [(f.sqn, bytes(f.data)) for f in b.endpoint_frames]
        assert got == [(5000 + i, b"px%d" % i) for i in range(n)]
        assert b.link.stats.data_msgs_rcvd == n
        # the link goes away: dro-a's routes lose domain 2 (route-info timeout, recalculation)
        await b.close()
        await until(lambda: a.core.router.domains() == [1], "domain 2 forgotten", timeout=WAIT)
        assert not a.link.up
    finally:
        await b.close()
        await a.close()
