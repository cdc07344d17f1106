"""The peer portal adapter (:mod:`umcore.aio.dropeer`) on loopback: two links, real sockets.

Each test builds an acceptor and an initiator from ``<peer>`` XML (ephemeral listen port,
short timers), waits for events with a timeout (never sleeps to synchronise) and stops by itself.
Covered: 100,000 messages in order, plain and with LZ4 + TLS (self-signed certificates made for
the run); a stalled peer (reading paused past the keepalive timeout) is lost and the link comes
back; a peer sending garbage loses its link and the initiator backs off; a TLS handshake that
fails is logged with its reason and retried; a second connection to an acceptor is refused.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.dro.kit import otid
from tests.integration.helpers import until
from umcore.aio.dropeer import PeerPortalLink
from umcore.config.dro import Peer, load_text
from umcore.dro import SourceKey
from umcore.dro.peer import DownCause, LinkDown, LinkUp, PeerLink
from umcore.errors import ConfigError
from umcore.events import CoreEvent
from umcore.tools.certs import CertFiles, make_certificates

S1 = SourceKey(otid(1), "AAA")
FAST_KA = '<gateway-keepalive interval="100" timeout="400"/>'
WAIT = 20.0


@pytest.fixture(scope="module")
def certs(tmp_path_factory: pytest.TempPathFactory) -> tuple[CertFiles, CertFiles]:
    folder: Path = tmp_path_factory.mktemp("dropeer-certs")
    return make_certificates(folder, "dro"), make_certificates(folder, "stranger")


def tls_xml(c: CertFiles, trusted: CertFiles | None = None) -> str:
    return (
        f"<tls><certificate>{c.certificate}</certificate><certificate-key>{c.key}"
        f"</certificate-key><trusted-certificates>{(trusted or c).trusted}"
        "</trusted-certificates></tls>"
    )


def portal(
    role: str,
    *,
    port: int = 0,
    security: str = "",
    extra: str = "",
    ka: str = "",
    options: str = "<keepalive/><nodelay/>",
) -> Peer:
    end = (
        f'<initiator reconnect-interval="50"><address>127.0.0.1</address><port>{port}</port>'
        "</initiator>"
        if role == "initiator"
        else "<acceptor><listen-port>0</listen-port></acceptor>"
    )
    xml = (
        '<tnw-gateway version="1.0"><daemon><name>d</name></daemon><portals><peer><name>P</name>'
        f"<single-tcp><interface>127.0.0.1</interface>{options}{security}{end}"
        f"</single-tcp>{extra}{ka}</peer></portals></tnw-gateway>"
    )
    p = load_text(xml, f"<{role}.xml>").portal("P")
    assert isinstance(p, Peer)
    return p


class Side:
    """One DRO's end: a link, its adapter, and what it received (order checked as it comes)."""

    def __init__(self, cfg: Peer, node_id: int) -> None:
        self.link = PeerLink(cfg, node_id, f"dro{node_id}")
        self.adapter = PeerPortalLink(cfg, self.link, on_activity=self.activity)
        self.events: list[CoreEvent] = []
        self.received = 0
        self.out_of_order = 0

    def activity(self) -> None:
        self.events += self.link.take_events()
        expect = self.received
        bad = 0
        for _key, sqn, _data in self.link.take_frames():
            bad += sqn != expect
            expect = sqn + 1
        self.out_of_order += bad
        self.received = expect

    def count(self, kind: type[CoreEvent], pred: Callable[[CoreEvent], bool] = bool) -> int:
        return sum(1 for e in self.events if isinstance(e, kind) and pred(e))


async def pair(acc_cfg: Peer, make_init: Callable[[int], Peer]) -> tuple[Side, Side]:
    a = Side(acc_cfg, 1)
    await a.adapter.start()
    b = Side(make_init(a.adapter.port), 2)
    await b.adapter.start()
    return a, b


async def blast(side: Side, n: int, payload: bytes) -> None:
    """Send ``n`` frames as fast as the link takes them (waiting while it is full)."""
    link, adapter = side.link, side.adapter
    loop = asyncio.get_running_loop()
    for sqn in range(n):
        if not link.writable:
            adapter.flush()
            assert await adapter.wait_writable(), "link went down while sending"
        assert link.send_data(S1, sqn, payload, loop.time())
        if sqn & 255 == 255:
            adapter.flush()
            await asyncio.sleep(0)  # let the loop write and read: a yield, not a wait
    adapter.flush()


@pytest.mark.parametrize("mode", ["plain", "lz4+tls"])
async def test_100k_messages_in_order(mode: str, certs: tuple[CertFiles, CertFiles]) -> None:
    sec = "" if mode == "plain" else "<compression>LZ4</compression>" + tls_xml(certs[0])
    a, b = await pair(
        portal("acceptor", security=sec), lambda p: portal("initiator", port=p, security=sec)
    )
    try:
        await until(lambda: a.link.up and b.link.up, "link up", timeout=WAIT)
        assert a.count(LinkUp) == 1 and b.link.peer_node_id == 1
        n = 100_000
        await blast(b, n, b"q" * 64)
        await until(lambda: a.received >= n, f"{n} messages", timeout=60)
        assert (a.received, a.out_of_order) == (n, 0)
        st = b.link.stats
        assert st.data_fragments_sent == n and st.data_fragments_dropped_would_block == 0
        assert a.link.stats.data_msgs_rcvd == n
        if mode != "plain":
            assert b.adapter.security.tls and b.adapter.security.connections_secured == 1
            assert b.adapter.security.bytes_compressed < b.adapter.security.bytes_uncompressed
    finally:
        await b.adapter.close()
        await a.adapter.close()


async def test_stalled_peer_is_lost_and_the_link_recovers() -> None:
    a, b = await pair(
        portal("acceptor", ka=FAST_KA), lambda p: portal("initiator", port=p, ka=FAST_KA)
    )
    try:
        await until(lambda: a.link.up and b.link.up, "link up", timeout=WAIT)
        b.adapter.pause_reading()  # b hears nothing, as if stopped, past the 400 ms timeout
        await until(lambda: b.count(LinkDown) == 1, "b loses the link", timeout=WAIT)
        down = next(e for e in b.events if isinstance(e, LinkDown))
        assert down.cause is DownCause.TIMEOUT and "400 ms" in down.reason
        await until(lambda: a.count(LinkDown) == 1, "a sees the connection end", timeout=WAIT)
        await until(
            lambda: a.count(LinkUp) == 2 and b.count(LinkUp) == 2, "reconnected", timeout=WAIT
        )
        assert b.adapter.attempts == 2 and b.adapter.failures == 0
        await blast(b, 1000, b"after")
        await until(lambda: a.received >= 1000, "traffic after the stall", timeout=WAIT)
        assert a.out_of_order == 0
        # a quiet link: each side asks after an interval of silence, and measures the round trip
        await until(
            lambda: a.link.stats.rtt_samples > 0 and b.link.stats.rtt_samples > 0, "RTT samples"
        )
        assert 0 < b.link.stats.rtt_min <= b.link.stats.rtt_max < 400_000
    finally:
        await b.adapter.close()
        await a.adapter.close()


async def test_garbage_peer_loses_its_link_and_the_initiator_backs_off() -> None:
    async def garbage(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        writer.write(b"HTTP/1.1 400 Bad Request\r\n\r\n" * 4)
        await writer.drain()
        await reader.read()  # until the DRO closes
        writer.close()

    server = await asyncio.start_server(garbage, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    b = Side(portal("initiator", port=port), 2)
    await b.adapter.start()
    try:
        await until(lambda: b.adapter.failures >= 3, "three failed sessions", timeout=WAIT)
        downs = [e for e in b.events if isinstance(e, LinkDown)]
        assert downs and all(e.cause is DownCause.PROTOCOL for e in downs)
        assert b.adapter.next_delay == pytest.approx(0.05 * min(2**b.adapter.failures, 8))
        assert b.count(LinkUp) == 0
    finally:
        await b.adapter.close()
        server.close()
        await server.wait_closed()


async def test_acceptor_drops_garbage_and_refuses_a_second_connection() -> None:
    a = Side(portal("acceptor"), 1)
    await a.adapter.start()
    try:
        _, w = await asyncio.open_connection("127.0.0.1", a.adapter.port)
        w.write(b"\xff" * 64)
        await until(lambda: a.count(LinkDown) == 1, "garbage refused", timeout=WAIT)
        w.close()
        down = next(e for e in a.events if isinstance(e, LinkDown))
        assert down.cause is DownCause.PROTOCOL
        b = Side(portal("initiator", port=a.adapter.port), 2)
        await b.adapter.start()
        await until(lambda: a.link.up and b.link.up, "real peer linked", timeout=WAIT)
        r2, w2 = await asyncio.open_connection("127.0.0.1", a.adapter.port)
        assert await asyncio.wait_for(r2.read(), WAIT) == b""  # closed at once
        w2.close()
        assert a.adapter.refused == 1 and a.link.up
        await b.adapter.close()
    finally:
        await a.adapter.close()


async def test_tls_handshake_failure_is_logged_and_retried(
    certs: tuple[CertFiles, CertFiles], caplog: pytest.LogCaptureFixture
) -> None:
    dro, stranger = certs
    caplog.set_level(logging.INFO)
    # the initiator trusts only the stranger's certificate: its handshake fails every time
    a, b = await pair(
        portal("acceptor", security=tls_xml(dro)),
        lambda p: portal("initiator", port=p, security=tls_xml(dro, trusted=stranger)),
    )
    try:
        await until(lambda: b.adapter.attempts >= 3, "three attempts", timeout=WAIT)
        text = caplog.text
        assert "TLS handshake to 127.0.0.1" in text and "CERTIFICATE_VERIFY_FAILED" in text
        assert "Initiator: peer portal [P] cannot connect to [127.0.0.1" in text
        assert "retrying in" in text
        assert b.count(LinkUp) == 0 and b.adapter.security.handshake_failures >= 2
    finally:
        await b.adapter.close()
        await a.adapter.close()


def test_runs_on_uvloop() -> None:
    """The daemon runs on uvloop, whose transports are not asyncio.Transport subclasses."""
    uvloop = pytest.importorskip("uvloop")

    async def exchange() -> tuple[int, int]:
        a, b = await pair(portal("acceptor"), lambda p: portal("initiator", port=p))
        try:
            await until(lambda: a.link.up and b.link.up, "link up", timeout=WAIT)
            await blast(b, 5000, b"u" * 64)
            await until(lambda: a.received >= 5000, "5000 messages", timeout=WAIT)
            return a.received, a.out_of_order
        finally:
            await b.adapter.close()
            await a.adapter.close()

    assert uvloop.run(exchange()) == (5000, 0)


async def test_socket_options_follow_the_configuration() -> None:
    bufs = "<receive-buffer>262144</receive-buffer><send-buffer>131072</send-buffer>"
    a, b = await pair(
        portal("acceptor", options=""),
        lambda p: portal("initiator", port=p, options=bufs + "<keepalive/><nodelay/>"),
    )
    try:
        await until(lambda: a.link.up and b.link.up, "link up", timeout=WAIT)
        on, off = b.adapter.socket_options(), a.adapter.socket_options()
        assert (on["SO_KEEPALIVE"], on["TCP_NODELAY"]) == (1, 1)
        assert (off["SO_KEEPALIVE"], off["TCP_NODELAY"]) == (0, 0)  # asyncio's default undone
        assert on["SO_RCVBUF"] >= 262144 and on["SO_SNDBUF"] >= 131072  # Linux doubles them
    finally:
        await b.adapter.close()
        await a.adapter.close()
    assert b.adapter.socket_options() == {}


def test_bad_security_settings_fail_before_anything_starts(tmp_path: Path) -> None:
    with pytest.raises(ConfigError) as err:
        portal_link(portal("acceptor", security="<compression>ZSTD</compression>"))
    assert err.value.allowed == "LZ4" and err.value.line is not None and "ZSTD" in str(err.value)
    missing = tmp_path / "nope.pem"
    sec = (
        f"<tls><certificate>{missing}</certificate><certificate-key>{missing}</certificate-key>"
        "</tls>"
    )
    with pytest.raises(ConfigError) as err:
        portal_link(portal("acceptor", security=sec))
    assert "nope.pem" in str(err.value) and "<acceptor.xml>" in str(err.value)


def portal_link(cfg: Peer) -> PeerPortalLink:
    return PeerPortalLink(cfg, PeerLink(cfg, 1, "x"), source="<acceptor.xml>")
