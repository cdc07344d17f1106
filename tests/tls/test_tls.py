"""Encrypted and compressed TCP through real contexts on loopback (seed 003 10.4-10.5).

Topic resolution by multicast on a test group, every port ephemeral; certificates from this
folder's ``conftest.py``.  What is checked: data, late join and request/response over TLS,
LZ4 and both; settings that differ keep a receiver from subscribing and count
``tr_dgrams_dropped_type``; a handshake that fails (plain peer, untrusted certificate, no
suite in common, silence) costs only that connection, logged with the peer and the reason.
"""

from __future__ import annotations

import asyncio
import logging
import socket
import ssl
import time
from collections.abc import Callable
from typing import Any

import pytest

from tests.integration.helpers import load_configuration, until
from umcore.api import Context, Message
from umcore.api import message as m
from umcore.config.attributes import Configuration
from umcore.errors import ConfigError
from umcore.monitor.automatic import sample_context
from umcore.tools.certs import CertFiles
from umcore.tools.common import make_verifiable, verify

MODES = ["tls", "lz4", "tls+lz4"]


@pytest.fixture
def config(unused_udp_port_factory: Callable[[], int], reset_configuration: None) -> Configuration:
    return load_configuration(
        f"""
        context resolver_multicast_interface 127.0.0.1
        context resolver_multicast_address 224.9.23.98
        context resolver_multicast_port {unused_udp_port_factory()}
        context transport_tcp_port_low 0
        context transport_tcp_port_high 0
        context request_tcp_port_low 0
        context request_tcp_port_high 0
        context request_tcp_interface 127.0.0.1
        source transport_tcp_interface 127.0.0.1
        source late_join 1
        source retransmit_retention_size_threshold 50000000
        """
    )


def mode_options(mode: str, certs: CertFiles) -> dict[str, str]:
    opts: dict[str, str] = {}
    if "tls" in mode:
        opts.update(certs.options())
    if "lz4" in mode:
        opts["compression"] = "lz4"
    return opts


class Verified:
    """A receiver callback checking make_verifiable payloads in order."""

    def __init__(self) -> None:
        self.next = 0
        self.errors = 0
        self.types: list[int] = []

    def __call__(self, msg: Message) -> None:
        if msg.type != m.MSG_DATA:
            self.types.append(msg.type)
            return
        _, err = verify(msg.data, self.next)
        self.errors += bool(err)
        self.next += 1


@pytest.mark.parametrize("mode", MODES)
async def test_100k_verified_messages(config: Configuration, certs: CertFiles, mode: str) -> None:
    n = 100_000
    opts = mode_options(mode, certs)
    got = Verified()
    async with await Context.create(opts) as a, await Context.create(opts) as b:
        await b.create_receiver("tls.bulk", got)
        src = await a.create_source("tls.bulk")
        await until(lambda: src.receivers == 1, "receiver connected")
        for i in range(n):
            await src.send(make_verifiable(i, 100))
        src.flush()
        await until(lambda: got.next == n, f"{n} messages (got {got.next})", timeout=120)
        assert got.errors == 0
        assert got.types == [m.MSG_BOS]
        assert a.security.connections_secured >= 1 and b.security.connections_secured >= 1
        assert a.security.handshake_failures == b.security.handshake_failures == 0
        await src.close()


@pytest.mark.parametrize("mode", MODES)
async def test_late_join_and_request_response_secured(
    config: Configuration, certs: CertFiles, mode: str
) -> None:
    opts = mode_options(mode, certs)
    async with await Context.create(opts) as sctx, await Context.create(opts) as rctx:
        src = await sctx.create_source("tls.lj")
        for i in range(50):
            await src.send(i.to_bytes(4, "big"))
        src.flush()
        got: list[Message] = []

        def on_msg(msg: Message) -> None:
            if msg.type == m.MSG_DATA:
                got.append(msg)
            elif msg.type == m.MSG_REQUEST:
                msg.respond(b"answer:" + bytes(msg.data))

        rcv = await rctx.create_receiver("tls.lj", on_msg)
        await until(lambda: src.receivers > 0, "receiver connected")
        for i in range(50, 60):
            await src.send(i.to_bytes(4, "big"), flush=True)
        await until(lambda: len(got) >= 60, f"60 messages, got {len(got)}")
        assert [int.from_bytes(x.data, "big") for x in got] == list(range(60))
        assert any(x.flags & m.MSG_FLAG_RETRANSMIT for x in got)  # late join did recover
        # request (on the data connection) -> response (UIM connection, TLS/LZ4 too)
        responses: list[Message] = []
        req = await src.send_request(b"q", responses.append)
        await until(lambda: len(responses) == 1, "the response")
        assert bytes(responses[0].data) == b"answer:q"
        req.close()
        # late join request and response, and the response, went over the request ports:
        # every connection was secured and none failed
        assert sctx.security.connections_secured >= 2  # data + late join/response incoming
        assert rctx.security.connections_secured >= 2
        assert sctx.security.handshake_failures == rctx.security.handshake_failures == 0
        assert sctx.security.negotiation_failures == rctx.security.negotiation_failures == 0
        await rcv.close()
        await src.close()


@pytest.mark.parametrize(
    ("source_mode", "receiver_mode"),
    [("lz4", ""), ("", "lz4"), ("tls", ""), ("tls", "tls+lz4")],
)
async def test_mismatched_settings_no_subscription_and_dropped_type_rises(
    config: Configuration, certs: CertFiles, source_mode: str, receiver_mode: str
) -> None:
    events: list[Message] = []
    async with (
        await Context.create(mode_options(source_mode, certs)) as a,
        await Context.create(mode_options(receiver_mode, certs)) as b,
    ):
        await b.create_receiver("tls.mismatch", events.append)
        src = await a.create_source("tls.mismatch")
        dropped = b.resolver.stats

        await until(lambda: dropped.datagrams_dropped_type >= 1, "a TIR ignored")
        first = dropped.datagrams_dropped_type
        b.topic_resolution_request()  # more queries: more TIRs, each ignored and counted
        a.topic_resolution_request()
        await until(lambda: dropped.datagrams_dropped_type > first, "dropped_type rising")
        await src.send(b"never seen", flush=True)
        assert src.receivers == 0
        assert not b.joined
        assert events == []
        # automatic monitoring publishes it as UM's context statistic
        assert sample_context(b).context["tr_dgrams_dropped_type"] >= first + 1
        await src.close()


async def test_matching_settings_are_not_counted(config: Configuration, certs: CertFiles) -> None:
    opts = mode_options("tls+lz4", certs)
    got = Verified()
    async with await Context.create(opts) as a, await Context.create(opts) as b:
        await b.create_receiver("tls.match", got)
        src = await a.create_source("tls.match")
        await until(lambda: src.receivers == 1, "receiver connected")
        await src.send(make_verifiable(0, 40), flush=True)
        await until(lambda: got.next == 1, "one message")
        assert b.resolver.stats.datagrams_dropped_type == 0
        await src.close()


@pytest.mark.parametrize("mode", ["tls", "lz4"])
async def test_non_tcp_sources_refused(config: Configuration, certs: CertFiles, mode: str) -> None:
    async with await Context.create(mode_options(mode, certs)) as a:
        for transport in ("lbtru", "lbtrm"):
            with pytest.raises(ConfigError, match="TCP sources only"):
                await a.create_source("tls.udp", attributes={"transport": transport})
        assert not a.sources


# ---------------------------------------------------------------------------- connection faults
def _tls_client(certs: CertFiles) -> ssl.SSLContext:
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    ctx.check_hostname = False
    ctx.load_cert_chain(str(certs.certificate), str(certs.key))
    ctx.load_verify_locations(str(certs.trusted))
    ctx.minimum_version = ctx.maximum_version = ssl.TLSVersion.TLSv1_2
    return ctx


async def _open_source(ctx: Context, topic: str) -> tuple[Any, int]:
    src = await ctx.create_source(topic)
    return src, int(src.transport_info.port)


def _poke(port: int, data: bytes) -> None:
    """A plain TCP peer: connect, send ``data``, wait for the other side to close."""
    with socket.create_connection(("127.0.0.1", port), timeout=10) as s:
        s.sendall(data)
        s.settimeout(10)
        try:
            while s.recv(4096):
                pass
        except OSError:
            pass  # reset: closed as well


async def test_plain_peer_at_tls_port_loses_its_connection_only(
    config: Configuration, certs: CertFiles, caplog: pytest.LogCaptureFixture
) -> None:
    opts = mode_options("tls", certs)
    got = Verified()
    caplog.set_level(logging.WARNING, logger="umcore.aio.tls")
    async with await Context.create(opts) as a, await Context.create(opts) as b:
        src, port = await _open_source(a, "tls.fault")
        await asyncio.to_thread(_poke, port, b"\x00" * 64)  # not a TLS ClientHello
        await until(lambda: a.security.handshake_failures == 1, "the failure counted")
        assert any(
            "TLS handshake from 127.0.0.1:" in r.getMessage() and "failed" in r.getMessage()
            for r in caplog.records
        )
        # the context and the source go on: a TLS receiver still joins and receives
        await b.create_receiver("tls.fault", got)
        await until(lambda: src.receivers == 1, "TLS receiver connected")
        await src.send(make_verifiable(0, 32), flush=True)
        await until(lambda: got.next == 1, "one message")
        await src.close()


async def test_plain_peer_at_compressed_port_loses_its_connection(
    config: Configuration, certs: CertFiles
) -> None:
    async with await Context.create({"compression": "lz4"}) as a:
        src, port = await _open_source(a, "lz4.fault")
        await asyncio.to_thread(_poke, port, b"\x00" * 64)  # no compression hello
        await until(lambda: a.security.negotiation_failures == 1, "the failure counted")
        await src.close()


async def test_tls_peer_at_plain_port_loses_its_connection(
    config: Configuration, certs: CertFiles, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, logger="umcore.aio.tls")
    tls = {**certs.options(), "tls_compression_negotiation_timeout": "500"}
    async with await Context.create() as a, await Context.create(tls) as b:
        src, port = await _open_source(a, "plain.fault")
        rport = a.features.require_port()
        # the TLS side's handshake gets no ServerHello: it fails, is counted and logged there
        for n, target in enumerate((port, rport.port), 1):
            with pytest.raises(OSError):
                await b.security.connect(asyncio.Protocol, "127.0.0.1", target, timeout=10)
            assert b.security.handshake_failures == n
            assert f"TLS handshake to 127.0.0.1:{target} failed" in caplog.text
        # the plain request port refuses a ClientHello as bad LBT-TCP, and counts it
        await until(lambda: rport.bad_connections == 1, "request port refused, counted")
        # and the plain source goes on serving plain receivers
        got = Verified()
        async with await Context.create() as c:
            await c.create_receiver("plain.fault", got)
            await until(lambda: src.receivers == 1, "plain receiver connected")
            await src.send(make_verifiable(0, 32), flush=True)
            await until(lambda: got.next == 1, "one message")
        await src.close()


async def test_untrusted_certificate_fails_both_sides(
    config: Configuration, certs: CertFiles, stranger: CertFiles, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, logger="umcore.aio.tls")
    # the stranger trusts everyone (our certificate) but is trusted by nobody
    strange = {**stranger.options(), "tls_trusted_certificates": str(certs.trusted)}
    events: list[Message] = []
    async with (
        await Context.create(mode_options("tls", certs)) as a,
        await Context.create(strange) as b,
    ):
        await b.create_receiver("tls.trust", events.append)
        src = await a.create_source("tls.trust")
        await until(lambda: a.security.handshake_failures >= 1, "source side refused")
        await until(lambda: b.security.handshake_failures >= 1, "receiver side failed")
        assert src.receivers == 0
        assert not [e for e in events if e.type == m.MSG_DATA]
        text = "\n".join(r.getMessage() for r in caplog.records)
        assert "CERTIFICATE_VERIFY_FAILED" in text or "certificate" in text.lower()
        await src.close()


async def test_no_cipher_suite_in_common_cancels_the_connection(
    config: Configuration, certs: CertFiles
) -> None:
    one = {**certs.options(), "tls_cipher_suites": "DHE-RSA-AES256-GCM-SHA384"}
    other = {**certs.options(), "tls_cipher_suites": "ECDHE-RSA-AES128-GCM-SHA256"}
    async with await Context.create(one) as a, await Context.create(other) as b:
        await b.create_receiver("tls.suites", lambda _m: None)
        src = await a.create_source("tls.suites")
        await until(lambda: a.security.handshake_failures >= 1, "handshake refused")
        assert src.receivers == 0
        await src.close()


async def test_common_suite_later_in_the_list_is_used(
    config: Configuration, certs: CertFiles
) -> None:
    one = {**certs.options(), "tls_cipher_suites": "ECDHE-RSA-AES128-GCM-SHA256"}
    other = {
        **certs.options(),
        "tls_cipher_suites": "DHE-RSA-AES256-GCM-SHA384, ECDHE-RSA-AES128-GCM-SHA256",
    }
    got = Verified()
    async with await Context.create(one) as a, await Context.create(other) as b:
        await b.create_receiver("tls.suites2", got)
        src = await a.create_source("tls.suites2")
        await until(lambda: src.receivers == 1, "receiver connected")
        await src.send(make_verifiable(0, 32), flush=True)
        await until(lambda: got.next == 1, "one message")
        await src.close()


async def test_silent_peer_times_out(
    config: Configuration, certs: CertFiles, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, logger="umcore.aio.tls")
    opts = {**certs.options(), "tls_compression_negotiation_timeout": "300"}
    async with await Context.create(opts) as a:
        src, port = await _open_source(a, "tls.silent")
        with socket.create_connection(("127.0.0.1", port), timeout=10):
            start = time.monotonic()
            await until(lambda: a.security.handshake_failures == 1, "timed out", timeout=10)
            assert time.monotonic() - start < 5  # 300 ms asked, not the 5 s default
        assert any("tls_compression_negotiation_timeout" in r.getMessage() for r in caplog.records)
        await src.close()
