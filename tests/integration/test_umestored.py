"""umestored as a subprocess on loopback, with a plain pyum source and the test playing the
persistent clients' control side (umcore.store.compose over a request port of its own).

The Store and the test's context resolve through an lbmrd.  The test registers the source with
the Store, sends on the source, and checks what a persistent source and receiver would see:
registration success, a stability ACK for every message, a receiver registration, answered
retransmission requests; then SIGINT (status 0, orderly), a restart on the same directories, and
a re-registration that comes back OLD with the last sequence number (a disk repository).
"""

from __future__ import annotations

import asyncio
import os
import re
import signal
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import TypeVar

import pytest
from prometheus_client.parser import text_string_to_metric_families

from tests.integration.daemon_proc import METRICS, DaemonProcess
from tests.integration.helpers import lbmrd_client_lines, load_configuration, until
from umcore.aio.request_port import RequestPort
from umcore.api import Context
from umcore.store import compose
from umcore.store.compose import (
    ConsumptionAck,
    ReceiverRegistration,
    RegistrationResponse,
    Retransmission,
    RetransmissionRequest,
    RxReq,
    SourceRegistration,
    StabilityAck,
)
from umcore.wire import lbmc

pytestmark = pytest.mark.usefixtures("reset_configuration")

TOPIC = "orders"
N = 200
WAIT = 20.0  # generous: a cold Store subprocess on a busy 2-core machine
TCP_LINES = (
    "context transport_tcp_port_low 0\n"
    "context transport_tcp_port_high 0\n"
    "context request_tcp_port_low 0\n"
    "context request_tcp_port_high 0\n"
    "context request_tcp_interface 127.0.0.1\n"
    "source transport_tcp_interface 127.0.0.1\n"
)

STORE_XML = """<?xml version="1.0"?>
<ume-store version="1.3">
  <daemon>
    <log type="console"/>
    <pidfile>{tmp}/umestored.pid</pidfile>
    <lbm-config>{tmp}/store.cfg</lbm-config>
  </daemon>
  <stores>
    <store name="itest" interface="127.0.0.1" port="0">
      <ume-attributes>
        <option type="store" name="disk-cache-directory" value="{tmp}/cache"/>
        <option type="store" name="disk-state-directory" value="{tmp}/state"/>
        <option type="store" name="context-name" value="itest_store"/>
      </ume-attributes>
      <topics>
        <topic pattern="{topic}" type="direct">
          <ume-attributes>
            <option type="store" name="repository-type" value="disk"/>
          </ume-attributes>
        </topic>
      </topics>
    </store>
  </stores>
</ume-store>
"""

C = TypeVar("C")


class Client:
    """The persistent clients' control side: a request port receiving the Store's answers."""

    def __init__(self) -> None:
        self.got: list[compose.Composition] = []
        self.port = RequestPort(self._on_message, ctxinst=os.urandom(8))

    def _on_message(self, msg: lbmc.LBMCMessage, peer_ip: str) -> None:
        comp = compose.decode(msg)
        if comp is not None:
            self.got.append(comp)

    @property
    def address(self) -> tuple[str, int]:
        return ("127.0.0.1", self.port.port)

    def of(self, kind: type[C], pred: Callable[[C], bool] = lambda _c: True) -> list[C]:
        return [c for c in self.got if isinstance(c, kind) and pred(c)]

    async def first(
        self, kind: type[C], pred: Callable[[C], bool] = lambda _c: True, what: str = ""
    ) -> C:
        await until(lambda: self.of(kind, pred), what or kind.__name__, timeout=WAIT)
        return self.of(kind, pred)[0]


@pytest.fixture
async def client() -> AsyncIterator[Client]:
    c = Client()
    await c.port.start("127.0.0.1", 0, 0)
    try:
        yield c
    finally:
        await c.port.close()


async def start_store(cfg: Path) -> DaemonProcess:
    store = await DaemonProcess.start("umestored", "--metrics", "127.0.0.1:0", str(cfg))
    await store.wait_for_line(r"Store itest ready to accept registrations", WAIT)
    return store


async def scrape(store: DaemonProcess) -> dict[tuple[str, frozenset[tuple[str, str]]], float]:
    """The Store's /metrics, parsed by prometheus_client: (sample name, labels) -> value."""
    found = store.find(METRICS)  # logged after "listening on", before "ready"
    assert found is not None
    host, port = found.group(1), int(found.group(2))
    reader, writer = await asyncio.open_connection(host, port)
    writer.write(f"GET /metrics HTTP/1.0\r\nHost: {host}\r\n\r\n".encode())
    async with asyncio.timeout(WAIT):
        raw = await reader.read()
    writer.close()
    head, _, body = raw.partition(b"\r\n\r\n")
    assert head.split(b" ", 2)[1] == b"200", head
    return {
        (s.name, frozenset(s.labels.items())): s.value
        for fam in text_string_to_metric_families(body.decode())
        for s in fam.samples
    }


def stable(client: Client) -> set[int]:
    covered: set[int] = set()
    for ack in client.of(StabilityAck, lambda a: not a.nak):
        covered.update(range(ack.first, ack.last + 1))
    return covered


async def test_store_registers_stores_acks_retransmits_and_restarts_old(
    tmp_path: Path, lbmrd: DaemonProcess, client: Client
) -> None:
    resolver = lbmrd_client_lines(lbmrd.address) + TCP_LINES
    (tmp_path / "store.cfg").write_text(resolver)
    for d in ("cache", "state"):
        (tmp_path / d).mkdir()
    cfg = tmp_path / "store.xml"
    cfg.write_text(STORE_XML.format(tmp=tmp_path, topic=TOPIC))
    load_configuration(resolver)

    store = await start_store(cfg)
    try:
        assert (tmp_path / "umestored.pid").read_text().strip() == str(store.proc.pid)
        async with await Context.create() as ctx:
            src = await ctx.create_source(TOPIC)
            tix, tidx = src.ext.transport_idx, src.tidx
            client.port.send(
                store.address,
                SourceRegistration(
                    TOPIC, tix, tidx, client.address, ctxinst=os.urandom(8)
                ).encode(),
            )
            resp = await client.first(
                RegistrationResponse, lambda r: r.source, "the source's registration response"
            )
            assert resp.error is None, resp.error_text
            assert not resp.old and resp.high_seqnum == compose.NO_SQN
            src_reg_id = resp.reg_id
            assert src_reg_id != 0
            # The Store joins the source's transport (its raw receiver) before data flows.
            await until(lambda: src.receivers >= 1, "the Store connected", timeout=WAIT)
            payloads = [f"order {i}".encode() for i in range(N)]
            for i, p in enumerate(payloads):
                await src.send(p, flush=i == N - 1)
            await until(
                lambda: stable(client) >= set(range(N)), "every message stable", timeout=WAIT
            )
            assert all(a.store_index == 0 for a in client.of(StabilityAck))
            metrics = await scrape(store)
            store_label = frozenset({("store", "itest")})
            assert metrics[("pyum_umestored_sources", store_label)] == 1
            repo_labels = store_label | {
                ("reg_id", str(src_reg_id)),
                ("topic", TOPIC),
                ("kind", "disk"),
            }
            assert metrics[("pyum_umestored_repository_stored", repo_labels)] == N
            assert metrics[("pyum_umestored_io_errors_total", store_label)] == 0
            # A malformed store message (a source registration without its topic) costs the
            # peer its connection: counted, logged, and the Store answers the next one, on a
            # new connection.
            bad = lbmc.UmePreg(0, True, 0, 0, tix, tidx, 0, client.address[1], 0, 0x7F000001)
            client.port.send(
                store.address, lbmc.encode(lbmc.LBMCMessage(lbmc.MSG_CONTROL, headers=[bad]))
            )
            await store.wait_for_line(r"\[WARNING\]: umestored\.itest: bad store message", WAIT)
            metrics = await scrape(store)
            assert metrics[("pyum_umestored_control_rejected_total", store_label)] == 1
            await until(lambda: client.port.outgoing == 0, "the Store dropped us", timeout=WAIT)

            # A receiver registers for the source, ACKs, and asks for three messages again.
            client.port.send(
                store.address,
                ReceiverRegistration(src_reg_id, tix, tidx, client.address, topic=TOPIC).encode(),
            )
            rresp = await client.first(
                RegistrationResponse, lambda r: not r.source, "the receiver's registration"
            )
            assert rresp.error is None, rresp.error_text
            rcv_reg_id = rresp.reg_id
            assert rcv_reg_id not in (0, src_reg_id)
            wanted = (0, N // 2, N - 1)
            reqs = tuple(RxReq(tix, src_reg_id, sqn, client.address) for sqn in wanted)
            client.port.send(store.address, RetransmissionRequest(reqs).encode())
            await until(
                lambda: {r.sqn for r in client.of(Retransmission)} >= set(wanted),
                "the retransmissions",
                timeout=WAIT,
            )
            for r in client.of(Retransmission):
                assert r.topic == TOPIC
                assert r.frame.endswith(payloads[r.sqn])
            client.port.send(
                store.address, ConsumptionAck(tix, src_reg_id, rcv_reg_id, N - 1).encode()
            )
            await src.close()

        # SIGINT: orderly stop, status 0, the pid file gone.
        assert await store.stop(signal.SIGINT) == 0
        lines = "\n".join(store.all_lines())
        assert lines.index("Shutdown requested") < lines.index("Shutdown complete")
        assert not (tmp_path / "umestored.pid").exists()
    finally:
        await store.kill()

    # Restart on the same directories: the source comes back OLD with its last sequence number.
    client.got.clear()
    store = await start_store(cfg)
    try:
        assert store.find(re.compile(r"restored 1 source\(s\)")), store.all_lines()
        client.port.send(
            store.address,
            SourceRegistration(TOPIC, tix, tidx, client.address, reg_id=src_reg_id).encode(),
        )
        again = await client.first(RegistrationResponse, lambda r: r.source, "re-registration")
        assert again.error is None, again.error_text
        assert again.old and again.reg_id == src_reg_id
        assert again.high_seqnum == N - 1
        # ... and the receiver's consumption ACK survived: it resumes after N - 1.
        client.port.send(
            store.address,
            ReceiverRegistration(
                src_reg_id, tix, tidx, client.address, reg_id=rcv_reg_id, topic=TOPIC
            ).encode(),
        )
        rcv_again = await client.first(
            RegistrationResponse, lambda r: not r.source, "receiver re-registration"
        )
        assert rcv_again.error is None, rcv_again.error_text
        assert rcv_again.old and rcv_again.reg_id == rcv_reg_id
        assert rcv_again.low_seqnum == N
        assert await store.stop(signal.SIGINT) == 0
    finally:
        await store.kill()
