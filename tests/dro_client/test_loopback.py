"""The client library against a fake DRO endpoint on loopback.

Each context resolves through its own fake portal, which plays the TRD's lbmrd (the context's
``resolver_unicast_daemon``) and sends what a DRO portal sends: datagrams with the SRC_TYPE tnwgd
and LOCAL_DOMAIN packet options, remote domain routes naming the fake DRO's UIM port, a proxy
source's TIRs (OTID, COST, DOMAIN_ID) and its final advertisement.  The fake DRO forwards UIMs
that carry a DESTINATION header to the destination's request port, counting them, as the
contract in :mod:`umcore.engine.dro` asks.  A fake proxy source is a TCP listener writing LBMC
frames in the order the test chooses."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable
from typing import Any

from umcore.api import Context
from umcore.engine import message as m
from umcore.engine.message import Message
from umcore.resolver.dro import FINAL_COST
from umcore.wire import lbmc, lbmr
from umcore.wire import srs as rs
from umcore.wire import srs_messages as srsm

WAIT = 10.0  # bound on every wait
OTID = bytes(range(32))


async def until(pred: Callable[[], object], what: str) -> None:
    try:
        async with asyncio.timeout(WAIT):
            while not pred():
                await asyncio.sleep(0.01)
    except TimeoutError:
        raise AssertionError(f"timed out waiting for {what}") from None


class Portal(asyncio.DatagramProtocol):
    """A DRO endpoint portal's topic resolution as a context hears it (and its lbmrd)."""

    def __init__(self, domain: int) -> None:
        self.domain = domain
        self.clients: set[tuple[str, int]] = set()
        self.transport: asyncio.DatagramTransport | None = None

    def connection_made(self, transport: Any) -> None:
        self.transport = transport

    def datagram_received(self, data: bytes, addr: tuple[str, int]) -> None:
        self.clients.add(addr)

    @property
    def port(self) -> int:
        assert self.transport is not None
        return int(self.transport.get_extra_info("sockname")[1])

    def send(self, packet: lbmr.LBMRPacket) -> None:
        packet = lbmr.LBMRPacket(
            packet.type,
            packet.tqrs,
            packet.tirs,
            (lbmr.SrcTypeOption(lbmr.SRC_TYPE_TNWGD), lbmr.LocalDomainOption(self.domain)),
            packet.version,
            packet.body,
        )
        data = lbmr.encode(packet)
        assert self.transport is not None
        for c in self.clients:
            self.transport.sendto(data, c)

    def route(self, ip: str, port: int, domains: list[int]) -> None:
        self.send(
            lbmr.LBMRPacket(lbmr.LBMR_TYPE_EXT, body=lbmr.RemoteDomainRoute(ip, port, domains))
        )

    def tir(self, topic: str, port: int, *, cost: int = 3, request_port: int = 0) -> None:
        opts: tuple[Any, ...] = (
            lbmr.OTIDOption(OTID),
            lbmr.CostOption(1, cost),
            lbmr.DomainIdOption(9),
        )
        if request_port:  # the proxy's portal request port, for "SOURCE:" UIMs
            opts += (lbmr.ExFuncOption(request_port, "127.0.0.1", 0),)
        t = lbmr.TIR(topic, 4, lbmr.TCPInfo("127.0.0.1", port, 0x55), opts)
        self.send(lbmr.LBMRPacket(lbmr.LBMR_TYPE_NORMAL, tirs=[t]))


class FakeDro:
    """Forwards UIMs with a DESTINATION header to ``ipaddr:port``, hops_taken + 1."""

    def __init__(self) -> None:
        self.forwarded: list[lbmc.LBMCMessage] = []
        self.server: asyncio.Server | None = None
        self.out: dict[tuple[str, int], asyncio.StreamWriter] = {}

    async def start(self) -> int:
        self.server = await asyncio.start_server(self._conn, "127.0.0.1", 0)
        return int(self.server.sockets[0].getsockname()[1])

    async def _conn(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        buf = bytearray()
        try:
            while chunk := await reader.read(65536):
                buf += chunk
                frames, pos = lbmc.split_frames(buf)
                del buf[:pos]
                for f in frames:
                    await self._forward(lbmc.decode(f))
        finally:
            writer.close()

    async def _forward(self, msg: lbmc.LBMCMessage) -> None:
        d = msg.find(lbmc.Destination)
        assert d is not None, "a UIM reached the DRO without DESTINATION"
        self.forwarded.append(msg)
        if d.ipaddr == 0:
            return  # to a source by its OTID: the origin is not modelled here
        dest = (lbmc.ip4_to_str(d.ipaddr), d.port)
        headers = [
            lbmc.Destination(
                d.flags, d.domain_id, d.ipaddr, d.port, d.hops_taken + 1,
                d.orig_domain_id, d.orig_ipaddr, d.orig_port, 0,
            ) if type(h) is lbmc.Destination else h
            for h in msg.headers
        ]  # fmt: skip
        w = self.out.get(dest)
        if w is None:
            _r, w = await asyncio.open_connection(*dest)
            self.out[dest] = w
        w.write(
            lbmc.encode(lbmc.LBMCMessage(msg.msg_type, msg.tidx, msg.sqn, headers, msg.payload))
        )
        await w.drain()

    async def close(self) -> None:
        for w in self.out.values():
            w.close()
        if self.server is not None:
            self.server.close()
            await self.server.wait_closed()


async def portal(domain: int) -> Portal:
    loop = asyncio.get_running_loop()
    _t, p = await loop.create_datagram_endpoint(lambda: Portal(domain), local_addr=("127.0.0.1", 0))
    return p


def attrs(p: Portal) -> dict[str, str]:
    return {
        "resolver_unicast_daemon": f"127.0.0.1:{p.port}",
        "resolver_unicast_force_alive": "1",
        "resolver_unicast_port_low": "0",
        "resolver_unicast_port_high": "0",
        "request_tcp_interface": "127.0.0.1",
        "request_tcp_port_low": "0",
        "request_tcp_port_high": "0",
    }


async def test_uim_across_the_dro_both_ways() -> None:
    p1, p2 = await portal(1), await portal(2)
    dro = FakeDro()
    uim_port = await dro.start()
    a = await Context.create(attrs(p1))
    b = await Context.create(attrs(p2))
    try:
        await until(lambda: p1.clients and p2.clients, "both contexts alive at their portals")
        assert a.domain_id is None and a.domain_routes == {}
        p1.route("127.0.0.1", uim_port, [2, 3])
        p2.route("127.0.0.1", uim_port, [1])
        await until(lambda: a.domain_id == 1 and b.domain_id == 2, "domain ids")
        assert sorted(a.domain_routes) == [2, 3]
        assert a.domain_routes[2].port == uim_port
        got_b: list[Message] = []
        got_a: list[Message] = []
        b.immediate_message_callback = got_b.append
        a.immediate_message_callback = got_a.append
        a.immediate_topic_message_callback = got_a.append  # a topic UIM without a receiver
        assert b.request_address is not None and a.request_address is not None
        b_ip, b_port = b.request_address.split(":")[1:]
        a.send_uim(f"TCP:2:{b_ip}:{b_port}", b"over the DRO")
        await until(lambda: got_b, "the UIM in domain 2")
        msg = got_b[0]
        assert msg.data == b"over the DRO" and msg.flags & m.MSG_FLAG_TOPICLESS
        a_ip, a_port = a.request_address.split(":")[1:]
        assert msg.source == f"TCP:1:{a_ip}:{a_port}"
        assert len(dro.forwarded) == 1  # it took the DRO path
        d = dro.forwarded[0].find(lbmc.Destination)
        assert d is not None and (d.domain_id, d.port, d.orig_domain_id) == (2, int(b_port), 1)
        # the answer goes back through the DRO to the source string the UIM gave
        b.send_uim(msg.source, b"reply", topic="answers")
        await until(lambda: got_a, "the reply in domain 1")
        assert got_a[0].data == b"reply" and got_a[0].source == f"TCP:2:{b_ip}:{b_port}"
        assert got_a[0].topic == "answers"
        assert len(dro.forwarded) == 2
        # same domain and plain addresses go direct; an unknown domain has no route
        a.send_uim(f"TCP:1:{b_ip}:{b_port}", b"direct")
        await until(lambda: len(got_b) == 2, "the direct UIM")
        assert got_b[1].source == f"TCP:{a_ip}" and len(dro.forwarded) == 2
        try:
            a.send_uim(f"TCP:7:{b_ip}:{b_port}", b"nowhere")
        except Exception as exc:  # UMError: no DRO advertises domain 7
            assert "no route to domain 7" in str(exc)
        else:
            raise AssertionError("a UIM to an unrouted domain was accepted")
    finally:
        await a.close()
        await b.close()
        await dro.close()
        for p in (p1, p2):
            assert p.transport is not None
            p.transport.close()


class ProxySource:
    """A DRO proxy source's TCP transport session: writes the frames it is told to."""

    def __init__(self) -> None:
        self.writers: list[asyncio.StreamWriter] = []
        self.server: asyncio.Server | None = None

    async def start(self) -> int:
        self.server = await asyncio.start_server(self._conn, "127.0.0.1", 0)
        return int(self.server.sockets[0].getsockname()[1])

    async def _conn(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await reader.readexactly(12)  # the receiver's session-id confirmation
        self.writers.append(writer)

    def send(self, *sqns: int) -> None:
        for q in sqns:
            for w in self.writers:
                w.write(lbmc.encode_data(4, q, b"m%d" % q))

    async def close(self) -> None:
        for w in self.writers:
            w.close()
        if self.server is not None:
            self.server.close()
            await self.server.wait_closed()


async def run_proxy(timeout_ms: int) -> tuple[list[Message], list[Message]]:
    """A receiver of a proxy source that delivers 0, 1, 3, 2, 4 and then sends its final
    advertisement: (data and loss deliveries, EOS deliveries)."""
    p = await portal(1)
    src = ProxySource()
    port = await src.start()
    ctx = await Context.create(attrs(p))
    got: list[Message] = []
    eos: list[Message] = []

    def on_msg(msg: Message) -> None:
        (eos if msg.type == m.MSG_EOS else got).append(msg)

    try:
        await until(lambda: p.clients, "the context alive at its portal")
        rcv = await ctx.create_receiver(
            "proxied",
            on_msg,
            attributes={"transport_tcp_dro_loss_recovery_timeout": str(timeout_ms)},
        )
        p.tir("proxied", port)
        await until(lambda: src.writers, "the receiver joined the proxy source")
        src.send(0, 1, 3, 2, 4)
        await until(
            lambda: [x.sequence_number for x in got if x.type == m.MSG_DATA][-1:] == [4], "data"
        )
        assert eos == []
        p.tir("proxied", port, cost=FINAL_COST)  # the final advertisement
        await until(lambda: eos, "EOS from the final advertisement")
        assert src.writers and not src.writers[0].is_closing()  # not from a disconnect
        await rcv.close()
        return got, eos
    finally:
        await ctx.close()
        await src.close()
        assert p.transport is not None
        p.transport.close()


async def test_proxy_source_reordering_waits_then_final_advertisement_ends_it() -> None:
    got, eos = await run_proxy(1000)
    assert [x.type for x in got if x.type == m.MSG_BOS] == [m.MSG_BOS]
    # 3 came before 2: held, then delivered in order, nothing declared lost
    assert [(x.type, x.sequence_number) for x in got if x.type != m.MSG_BOS] == [
        (m.MSG_DATA, q) for q in range(5)
    ]
    assert [x.topic for x in eos] == ["proxied"]


async def test_proxy_source_without_the_timeout_loses_at_once() -> None:
    got, _eos = await run_proxy(0)
    kinds = [(x.type, x.sequence_number) for x in got if x.type != m.MSG_BOS]
    assert kinds == [
        (m.MSG_DATA, 0),
        (m.MSG_DATA, 1),
        (m.MSG_UNRECOVERABLE_LOSS, 2),
        (m.MSG_DATA, 3),
        (m.MSG_DATA, 4),
    ]


class FakeSrs:
    """An SRS that registers one client and relays a DRO's DIR / RTIR / RTER records."""

    def __init__(self) -> None:
        self.writers: list[asyncio.StreamWriter] = []
        self.server: asyncio.Server | None = None

    async def start(self) -> int:
        self.server = await asyncio.start_server(self._conn, "127.0.0.1", 0)
        return int(self.server.sockets[0].getsockname()[1])

    async def _conn(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await reader.read(65536)  # SETUP + the registration request
        writer.write(rs.encode(rs.Payload(1, srsm.RegistrationResponse(7), complete=True)))
        self.writers.append(writer)
        with contextlib.suppress(ConnectionError):
            while await reader.read(65536):
                pass  # the stream request, our records, keepalives

    def relay(self, *records: Any) -> None:
        for w in self.writers:
            w.write(rs.encode(rs.Payload(3, srsm.Batch(list(records)))))

    async def close(self) -> None:
        for w in self.writers:
            w.close()
        if self.server is not None:
            self.server.close()
            await self.server.wait_closed()


async def test_domain_and_routes_from_the_srs() -> None:
    srs = FakeSrs()
    port = await srs.start()
    ctx = await Context.create(
        {
            "resolver_service": f"127.0.0.1:{port}",
            "resolver_disable_udp_topic_resolution": "1",
            "request_tcp_interface": "127.0.0.1",
            "request_tcp_port_low": "0",
            "request_tcp_port_high": "0",
        }
    )
    try:
        await until(lambda: srs.writers, "the context registered")
        srs.relay(
            srsm.DomainInfo(5),
            srsm.RouteInfo([6, 7], "127.0.0.1", 14391),
        )
        await until(lambda: ctx.domain_id == 5 and len(ctx.domain_routes) == 2, "DIR and RTIR")
        assert ctx.domain_routes[6].port == 14391
        assert ctx.domain_routes[6].expires is None  # held until its RTER
        srs.relay(srsm.RouteEnd([7], "127.0.0.1", 14391))
        await until(lambda: sorted(ctx.domain_routes) == [6], "RTER")
    finally:
        await ctx.close()
        await srs.close()


async def test_uim_to_a_proxy_source_goes_to_its_origin_through_the_dro() -> None:
    p = await portal(1)
    src = ProxySource()
    port = await src.start()
    dro = FakeDro()
    uim_port = await dro.start()
    ctx = await Context.create(attrs(p))
    got: list[Message] = []
    try:
        await until(lambda: p.clients, "the context alive at its portal")
        p.route("127.0.0.1", uim_port, [9])
        await until(lambda: ctx.domain_id == 1, "domain id")
        rcv = await ctx.create_receiver("proxied", got.append)
        p.tir("proxied", port, request_port=uim_port)
        await until(lambda: src.writers, "joined")
        src.send(0)
        await until(lambda: any(x.type == m.MSG_DATA for x in got), "data")
        source = next(x.source for x in got if x.type == m.MSG_DATA)
        ctx.send_uim("SOURCE:" + source, b"to the origin", topic="proxied")
        await until(lambda: dro.forwarded, "the UIM at the DRO")
        msg = dro.forwarded[0]
        d = msg.find(lbmc.Destination)
        otid = msg.find(lbmc.Otid)
        assert d is not None and otid is not None
        assert (d.domain_id, d.ipaddr, d.port, d.orig_domain_id) == (9, 0, 0, 1)
        assert otid.otid == OTID and msg.payload == b"to the origin"
        await rcv.close()
    finally:
        await ctx.close()
        await src.close()
        await dro.close()
        assert p.transport is not None
        p.transport.close()
