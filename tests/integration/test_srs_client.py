"""TCP-based topic resolution end to end: the SRS daemon as a subprocess, applications using the
real :class:`~umcore.api.Context` with ``resolver_service`` (UDP TR disabled unless a test says
otherwise), every port ephemeral, every wait bounded."""

from __future__ import annotations

import asyncio
import contextlib
import signal
import sys
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import pytest

from tests.integration.daemon_proc import ROOT, DaemonProcess, UdpClient, wait_for
from tests.integration.helpers import lbmrd_client_lines, load_configuration
from tests.integration.test_srs import srs_xml
from umcore.api import Context, Message, Source
from umcore.api import message as m

pytestmark = pytest.mark.slow

WAIT = 15.0  # cold interpreter starts + TCP resolution on a shared 2-core machine

# Every context of these tests: loopback, ephemeral transport and request ports.
BASE = """
context transport_tcp_port_low 0
context transport_tcp_port_high 0
context request_tcp_port_low 0
context request_tcp_port_high 0
context request_tcp_interface 127.0.0.1
context default_interface 127.0.0.1
source transport_tcp_interface 127.0.0.1
"""


@pytest.fixture
def configure(reset_configuration: None) -> Callable[..., None]:
    """``configure(*srs_addresses, udp=False, extra="")`` loads this process's configuration:
    ``resolver_service`` naming the SRSes, UDP TR disabled unless ``udp``."""

    def load(*servers: tuple[str, int], udp: bool = False, extra: str = "") -> None:
        service = ",".join(f"{h}:{p}" for h, p in servers)
        load_configuration(
            BASE
            + f"context resolver_service {service}\n"
            + f"context resolver_disable_udp_topic_resolution {0 if udp else 1}\n"
            + extra,
            "srs-client-test",
        )

    return load


async def start_srs(tmp: Path, name: str = "srs.xml", **kw: Any) -> DaemonProcess:
    return await DaemonProcess.start("srs", str(srs_xml(tmp, name, **kw)))


class Inbox:
    """What one receiver got, by type."""

    def __init__(self) -> None:
        self.messages: list[Message] = []

    def __call__(self, msg: Message) -> None:
        self.messages.append(msg)

    def data(self) -> list[bytes]:
        return [x.data for x in self.messages if x.type == m.MSG_DATA]

    def count(self, kind: int) -> int:
        return sum(1 for x in self.messages if x.type == kind)


@contextlib.asynccontextmanager
async def closing(*ctxs: Context) -> AsyncIterator[None]:
    try:
        yield
    finally:
        for ctx in ctxs:
            for s in list(ctx.sources):
                await s.close()
            for rs in list(ctx.receivers.values()):
                for r in list(rs):
                    await r.close()
            for w in list(ctx.wildcards):
                await w.close()
            await ctx.close()


async def until(pred: Callable[[], object], what: str, proc: DaemonProcess | None = None) -> None:
    await wait_for(pred, WAIT, what=what, proc=proc)


async def send_until(src: Source, inbox: Inbox, payload: bytes, what: str) -> None:
    """Send ``payload`` (flushed) until ``inbox`` has it: resolution and the join are what the
    wait is for, not a number of messages."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + WAIT
    while payload not in inbox.data():
        assert loop.time() < deadline, f"timed out waiting for {what}"
        await src.send(payload, flush=True)
        await asyncio.sleep(0.05)


async def test_pubsub_with_udp_tr_disabled_sends_no_resolver_datagram(
    tmp_path: Path, configure: Callable[..., None]
) -> None:
    """SRS only: messages flow, and a stand-in lbmrd named by ``resolver_unicast_daemon`` hears
    nothing from either context (no resolver socket exists), while a context with UDP TR on
    does reach it (the probe works)."""
    srs = await start_srs(tmp_path)
    probe = UdpClient()
    extra = lbmrd_client_lines(("127.0.0.1", probe.address[1]))
    try:
        configure(srs.address, extra=extra)
        a = await Context.create()
        b = await Context.create()
        async with closing(a, b):
            src = await a.create_source("srs.only")
            inbox = Inbox()
            await b.create_receiver("srs.only", inbox)
            await until(lambda: src.receivers == 1, "the receiver to join", srs)
            for i in range(100):
                await src.send(b"m%d" % i)
            src.flush()
            await until(lambda: len(inbox.data()) == 100, "100 messages", srs)
            assert inbox.data() == [b"m%d" % i for i in range(100)]
            assert inbox.count(m.MSG_BOS) == 1
            assert a.endpoint is None and b.endpoint is None
            for ctx in (a, b):
                st = ctx.resolver_stats
                assert (st.datagrams_sent, st.datagrams_received, st.keepalives_sent) == (0, 0, 0)
                assert ctx.srs is not None and ctx.srs.registered() == 1
            assert probe.pending() == []
            # The control: UDP TR on, same unicast daemon: the probe hears from it.
            c = await Context.create({"resolver_disable_udp_topic_resolution": "0"})
            async with closing(c):
                await c.create_source("udp.on")
                await probe.recv(WAIT)
                assert c.endpoint is not None
    finally:
        probe.close()
        assert await srs.stop(signal.SIGINT) == 0


async def test_receiver_started_after_the_source_resolves_it(
    tmp_path: Path, configure: Callable[..., None]
) -> None:
    srs = await start_srs(tmp_path)
    try:
        configure(srs.address)
        a = await Context.create()
        async with closing(a):
            src = await a.create_source("late.topic")
            other = await a.create_source("late.other")
            await until(lambda: a.srs is not None and a.srs.registered() == 1, "A registered")
            for i in range(20):
                await src.send(b"early%d" % i, flush=True)
            b = await Context.create()
            async with closing(b):
                first, second, wild = Inbox(), Inbox(), Inbox()
                await b.create_receiver("late.topic", first)
                await send_until(src, first, b"live", "B to resolve the older source")
                assert first.count(m.MSG_BOS) == 1
                assert not any(d.startswith(b"early") for d in first.data())  # no late join
                # A second receiver of the topic in the same context: no new SIR comes from
                # the SRS (one RIR per topic), the context's SRS cache must serve it.
                await b.create_receiver("late.topic", second)
                assert second.count(m.MSG_BOS) == 1
                # A wildcard receiver finds both topics through the SRS (WIR).
                await b.create_wildcard_receiver("^late\\.", wild)
                await send_until(other, wild, b"wild", "the wildcard receiver")
                await send_until(src, second, b"again", "the second receiver")
                assert b"again" in wild.data()
                assert sorted({x.topic for x in wild.messages}) == ["late.other", "late.topic"]
    finally:
        assert await srs.stop(signal.SIGINT) == 0


async def test_source_gone_from_the_srs_is_withdrawn_and_the_receiver_gets_eos(
    tmp_path: Path, configure: Callable[..., None]
) -> None:
    """A's SRS connection dies for good (its data session stays up): after the source state
    lifetime the SRS withdraws A's source and B's receiver gets EOS and leaves the session —
    the withdrawal, not a transport disconnect, ends it."""
    extra = (
        "<source-state-lifetime>1</source-state-lifetime>"
        "<source-leave-backoff>100</source-leave-backoff>"
    )
    srs = await start_srs(tmp_path, extra=extra)
    try:
        configure(srs.address)
        a = await Context.create()
        b = await Context.create()
        async with closing(a, b):
            src = await a.create_source("withdrawn")
            inbox = Inbox()
            await b.create_receiver("withdrawn", inbox)
            await send_until(src, inbox, b"hello", "B to receive")
            assert a.srs is not None and b.srs is not None
            await a.srs.close()  # no SDR: like a context cut off from the SRS
            await srs.wait_for_line("TCP Disconnect received for client", WAIT)
            await until(lambda: inbox.count(m.MSG_EOS) == 1, "EOS after the lifetime", srs)
            assert b.srs.withdrawn_events == 1
            assert b.srs.known("withdrawn") == []
            await until(lambda: src.receivers == 0, "B to leave A's session")
            assert inbox.count(m.MSG_BOS) == 1
            # A receiver created now finds nothing to join.
            late = Inbox()
            await b.create_receiver("withdrawn", late)
            await src.send(b"unheard", flush=True)
            assert late.messages == [] and src.receivers == 0
    finally:
        assert await srs.stop(signal.SIGINT) == 0


async def test_stopped_source_process_eos_then_withdrawn_after_the_lifetimes(
    tmp_path: Path, configure: Callable[..., None]
) -> None:
    """lbmsrc (a real process resolving through the SRS only) is killed: the receiver gets EOS,
    and after the lifetimes the SRS withdraws the source."""
    extra = (
        "<source-state-lifetime>1</source-state-lifetime>"
        "<source-leave-backoff>100</source-leave-backoff>"
    )
    srs = await start_srs(tmp_path, extra=extra)
    cfg = tmp_path / "srs.cfg"
    host, port = srs.address
    cfg.write_text(
        BASE + f"context resolver_service {host}:{port}\n"
        "context resolver_disable_udp_topic_resolution 1\n"
    )
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "umcore.tools.lbmsrc", "-c", str(cfg), "-M", "100000", "-P", "20",
        "stopped.src", cwd=ROOT, stdout=asyncio.subprocess.DEVNULL,
        stderr=asyncio.subprocess.DEVNULL,
    )  # fmt: skip
    try:
        configure(srs.address)
        b = await Context.create()
        async with closing(b):
            inbox = Inbox()
            await b.create_receiver("stopped.src", inbox)
            await until(lambda: len(inbox.data()) >= 3, "lbmsrc's messages", srs)
            assert b.srs is not None and len(b.srs.known("stopped.src")) == 1
            proc.kill()
            await asyncio.wait_for(proc.wait(), WAIT)
            await until(lambda: inbox.count(m.MSG_EOS) == 1, "EOS", srs)
            await until(lambda: not b.srs.known("stopped.src"), "the withdrawal", srs)  # type: ignore[union-attr]
            assert b.srs.withdrawn_events == 1
            assert inbox.count(m.MSG_EOS) == 1  # the withdrawal does not add a second EOS
            assert b.srs.rejoins == 0  # a session that ended after BOS is not knocked on again
    finally:
        if proc.returncode is None:
            proc.kill()
            await proc.wait()
        assert await srs.stop(signal.SIGINT) == 0


async def test_two_srs_one_killed_resolution_keeps_working(
    tmp_path: Path, configure: Callable[..., None]
) -> None:
    one = await start_srs(tmp_path, "one.xml")
    two = await start_srs(tmp_path, "two.xml")
    try:
        configure(one.address, two.address)
        a = await Context.create()
        b = await Context.create()
        async with closing(a, b):
            src = await a.create_source("ft.one")
            inbox = Inbox()
            await b.create_receiver("ft.one", inbox)
            await until(
                lambda: a.srs.registered() == 2 and b.srs.registered() == 2,  # type: ignore[union-attr]
                "both contexts on both SRSes",
            )
            await send_until(src, inbox, b"before", "B to receive")
            await one.kill()  # SIGKILL: no goodbye
            await until(lambda: b.srs.registered() == 1, "B to notice")  # type: ignore[union-attr]
            # new state after the loss: a new source, a new receiver in a new context
            src2 = await a.create_source("ft.two")
            c = await Context.create()
            async with closing(c):
                late = Inbox()
                await c.create_receiver("ft.two", late)
                await send_until(src2, late, b"via-the-survivor", "C through the survivor")
                await send_until(src, inbox, b"still", "B still receiving")
            assert inbox.count(m.MSG_EOS) == 0
            assert b.srs is not None and b.srs.withdrawn_events == 0
    finally:
        await one.kill()
        assert await two.stop(signal.SIGINT) == 0


async def test_srs_restart_clients_recover_unaided(
    tmp_path: Path, configure: Callable[..., None]
) -> None:
    first = await start_srs(tmp_path)
    port = first.address[1]
    srs: DaemonProcess | None = None
    try:
        configure(first.address)
        a = await Context.create()
        b = await Context.create()
        async with closing(a, b):
            src = await a.create_source("restart.old")
            inbox = Inbox()
            await b.create_receiver("restart.old", inbox)
            await send_until(src, inbox, b"before", "B to receive")
            assert await first.stop(signal.SIGINT) == 0
            await until(
                lambda: a.srs.registered() == 0 and b.srs.registered() == 0,  # type: ignore[union-attr]
                "both contexts to notice",
            )
            await send_until(src, inbox, b"during", "data to flow without the SRS")
            srs = await start_srs(tmp_path, "again.xml", port=port)
            await until(
                lambda: a.srs.registered() == 1 and b.srs.registered() == 1,  # type: ignore[union-attr]
                "both contexts to re-register by themselves",
                srs,
            )
            # The restarted SRS learnt A's source from A's re-sync: a new context finds it.
            c = await Context.create()
            async with closing(c):
                late = Inbox()
                await c.create_receiver("restart.old", late)
                await send_until(src, late, b"after", "C to resolve the pre-restart source")
            # And new state flows to an old context: A's new source, B's new receiver.
            src2 = await a.create_source("restart.new")
            fresh = Inbox()
            await b.create_receiver("restart.new", fresh)
            await send_until(src2, fresh, b"new", "B to resolve the post-restart source")
            assert inbox.count(m.MSG_EOS) == 0 and inbox.count(m.MSG_BOS) == 1
            assert b"during" in inbox.data() and b"after" in inbox.data()
    finally:
        await first.kill()
        if srs is not None:
            assert await srs.stop(signal.SIGINT) == 0


async def test_srs_and_udp_tr_together(
    tmp_path: Path, configure: Callable[..., None], unused_udp_port: int
) -> None:
    """resolver_service does not disable UDP TR: a context on the SRS with multicast TR still on
    resolves a source that only multicasts its TIRs (no SRS), and one that only uses the SRS."""
    srs = await start_srs(tmp_path)
    mport = unused_udp_port
    mcast = (
        "context resolver_multicast_interface 127.0.0.1\n"
        "context resolver_multicast_address 224.9.10.97\n"
        f"context resolver_multicast_port {mport}\n"
    )
    try:
        configure(srs.address, udp=True, extra=mcast)
        both = await Context.create()
        udp_only = await Context.create({"resolver_service": "0.0.0.0:0"})
        srs_only = await Context.create({"resolver_disable_udp_topic_resolution": "1"})
        async with closing(both, udp_only, srs_only):
            assert udp_only.srs is None and srs_only.endpoint is None
            s1 = await udp_only.create_source("mix.udp")
            s2 = await srs_only.create_source("mix.srs")
            in1, in2 = Inbox(), Inbox()
            await both.create_receiver("mix.udp", in1)
            await both.create_receiver("mix.srs", in2)
            await send_until(s1, in1, b"by-multicast", "multicast TR")
            await send_until(s2, in2, b"by-srs", "TCP TR")
    finally:
        assert await srs.stop(signal.SIGINT) == 0


async def test_late_join_through_the_srs(tmp_path: Path, configure: Callable[..., None]) -> None:
    """The SIR carries what late join needs (EXFUNC flags, request port, transport index in the
    OTID): a receiver resolving through the SRS only recovers messages sent before it existed."""
    srs = await start_srs(tmp_path)
    try:
        configure(
            srs.address,
            extra="source late_join 1\nsource retransmit_retention_size_threshold 1000000\n",
        )
        a = await Context.create()
        b = await Context.create()
        async with closing(a, b):
            src = await a.create_source("lj.srs")
            for i in range(30):
                await src.send(b"old%d" % i, flush=True)
            inbox = Inbox()
            await b.create_receiver("lj.srs", inbox)
            await until(lambda: len(inbox.data()) == 30, "30 late-join messages", srs)
            assert inbox.data() == [b"old%d" % i for i in range(30)]
            retransmitted = [x for x in inbox.messages if x.type == m.MSG_DATA]
            assert all(x.flags & m.MSG_FLAG_RETRANSMIT for x in retransmitted)
            await send_until(src, inbox, b"live", "live data after the late join")
    finally:
        assert await srs.stop(signal.SIGINT) == 0


async def test_failed_join_is_retried(tmp_path: Path, configure: Callable[..., None]) -> None:
    """An SIR naming a port nobody listens on: the join fails and is tried again (the SRS sends
    an SIR once), until the SRSes stop vouching for the source."""
    import socket

    from umcore.srs.client import SourceResolved, SourceWithdrawn
    from umcore.wire.srs_messages import SourceInfo as SIR

    srs = await start_srs(tmp_path)
    closed = socket.socket()  # bound, not listening: connects are refused
    closed.bind(("127.0.0.1", 0))
    try:
        configure(srs.address)
        b = await Context.create()
        async with closing(b):
            inbox = Inbox()
            await b.create_receiver("nobody.home", inbox)
            assert b.srs is not None
            port = closed.getsockname()[1]
            rec = SIR(bytes(32), "nobody.home", f"TCP:127.0.0.1:{port}:00000001")
            b.srs._on_events([SourceResolved(rec, 0)])
            # A re-join is counted when its connect starts: wait for the second one to have
            # failed too (a failed connect leaves no joined session behind).
            await until(
                lambda: b.srs.rejoins >= 2 and not b.joined,  # type: ignore[union-attr]
                "two failed re-joins",
            )
            assert inbox.messages == []
            b.srs._on_events([SourceWithdrawn(rec, 0)])
            n = b.srs.rejoins
            assert b.srs.known("nobody.home") == [] and b.srs._retryable() == []
            assert b.srs.rejoins == n
    finally:
        closed.close()
        assert await srs.stop(signal.SIGINT) == 0
