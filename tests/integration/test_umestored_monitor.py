"""umestored's UMP statistics and daemon control end to end (persistence-store.md checks 33, 34):
a umestored subprocess with ``<daemon-monitor>`` publishes ``UMPMonMsg`` on its topic; ``lbmmon``
(a subprocess, ``--json``) decodes them; the test plays the persistent clients' control side
(umcore.store.compose over a request port) as tests/integration/test_umestored.py does, and
sends umedcmd's requests as UIM requests to the monitoring context's request port.  /metrics
passes promtool."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import re
import signal
import sys
import urllib.request
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import promtool_check
from tests.integration.daemon_proc import METRICS, ROOT, DaemonProcess
from tests.integration.helpers import lbmrd_client_lines, load_configuration, until
from tests.integration.test_umestored import TCP_LINES, Client, scrape, stable
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
)

pytestmark = [pytest.mark.usefixtures("reset_configuration"), pytest.mark.slow]

TOPIC = "quotes"
STATS_TOPIC = "umestore.monitor"
N = 5
WAIT = 30.0  # two cold interpreters (the Store, lbmmon) on a busy 2-core machine
CONTROL = re.compile(r"control requests on (TCP:[\d.]+:\d+)")

STORE_XML = """<?xml version="1.0"?>
<ume-store version="1.3">
  <daemon>
    <log type="console"/>
    <lbm-config>{tmp}/store.cfg</lbm-config>
    <daemon-monitor topic="{stats}">
      <lbm-config>{tmp}/mon.cfg</lbm-config>
      <publishing-interval>
        <group name="default" ivl="1"/>
        <group name="store" ivl="3"/>
      </publishing-interval>
      <remote-snapshot-request allow="1"/>
      <remote-config-changes-request allow="1"/>
    </daemon-monitor>
  </daemon>
  <stores>
    <store name="mstore" interface="127.0.0.1" port="0">
      <ume-attributes>
        <option type="store" name="disk-cache-directory" value="{tmp}/cache"/>
        <option type="store" name="disk-state-directory" value="{tmp}/state"/>
      </ume-attributes>
      <topics>
        <topic pattern="{topic}" type="direct">
          <ume-attributes>
            <option type="store" name="repository-type" value="memory"/>
          </ume-attributes>
        </topic>
      </topics>
    </store>
  </stores>
</ume-store>
"""


class Lbmmon:
    """``python -m umcore.tools.lbmmon --json``: each stdout line decoded as it arrives."""

    def __init__(self, proc: asyncio.subprocess.Process) -> None:
        self.proc = proc
        self.objects: list[dict[str, Any]] = []
        self.stderr: list[str] = []
        self._tasks = [asyncio.create_task(self._out()), asyncio.create_task(self._err())]

    async def _out(self) -> None:
        assert self.proc.stdout is not None
        while line := await self.proc.stdout.readline():
            self.objects.append(json.loads(line))

    async def _err(self) -> None:
        assert self.proc.stderr is not None
        while line := await self.proc.stderr.readline():
            self.stderr.append(line.decode(errors="replace").rstrip("\n"))

    def messages(self, part: str) -> list[dict[str, Any]]:
        """The decoded UMPMonMsg bodies carrying ``part`` (configs, stats, events)."""
        return [
            o["message"][part]
            for o in self.objects
            if o.get("packetType") == "UMESTORE" and part in o.get("message", {})
        ]

    def events(self) -> list[dict[str, Any]]:
        return [e for m in self.messages("events") for e in m.get("events", [])]

    async def close(self) -> None:
        if self.proc.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                self.proc.kill()
            await self.proc.wait()
        for t in self._tasks:
            t.cancel()
            with contextlib.suppress(BaseException):
                await t


@contextlib.asynccontextmanager
async def lbmmon(cfg: Path) -> AsyncIterator[Lbmmon]:
    env = dict(os.environ, PYTHONUNBUFFERED="1")
    env.pop("LBM_DEFAULT_CONFIG_FILE", None)
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "umcore.tools.lbmmon",
        "-c",
        str(cfg),
        "--topic",
        STATS_TOPIC,
        "--json",
        cwd=ROOT,
        env=env,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    mon = Lbmmon(proc)
    try:
        await until(
            lambda: any("receiving statistics on" in line for line in mon.stderr),
            "lbmmon to start",
            timeout=WAIT,
        )
        yield mon
    finally:
        await mon.close()


@pytest.fixture
async def client() -> AsyncIterator[Client]:
    c = Client()
    await c.port.start("127.0.0.1", 0, 0)
    try:
        yield c
    finally:
        await c.port.close()


async def request(ctx: Context, dest: str, text: str) -> str:
    """One umedcmd request (a topicless UIM request); the Store's answer."""
    replies: list[bytes] = []
    req = ctx.send_uim_request(dest, text.encode("ascii"), lambda msg: replies.append(msg.data))
    try:
        await until(lambda: replies, f"the answer to {text!r}", timeout=WAIT)
    finally:
        req.close()
    return replies[0].decode("ascii")


def first(items: list[Any], pred: Callable[[Any], bool]) -> Any:
    return next((i for i in items if pred(i)), None)


async def test_check33_check34_lbmmon_shows_ump_statistics_and_control_works(
    tmp_path: Path, lbmrd: DaemonProcess, client: Client, promtool: str
) -> None:
    resolver = lbmrd_client_lines(lbmrd.address) + TCP_LINES
    (tmp_path / "store.cfg").write_text(resolver)
    (tmp_path / "mon.cfg").write_text(resolver)
    for d in ("cache", "state"):
        (tmp_path / d).mkdir()
    cfg = tmp_path / "store.xml"
    cfg.write_text(STORE_XML.format(tmp=tmp_path, stats=STATS_TOPIC, topic=TOPIC))
    load_configuration(resolver)

    async with lbmmon(tmp_path / "mon.cfg") as mon:
        store = await DaemonProcess.start("umestored", "--metrics", "127.0.0.1:0", str(cfg))
        try:
            await store.wait_for_line(r"Store mstore ready to accept registrations", WAIT)
            control = (await store.wait_for_line(CONTROL, WAIT)).group(1)
            port = store.address[1]
            # check 33: configs with the store's name and port; STORE_CREATED first
            # The configs published at start went out before lbmmon joined the topic (no late
            # join): a snapshot request, as a monitor that has just started sends.
            await until(lambda: mon.objects, "lbmmon to receive statistics", timeout=WAIT)
            async with await Context.create() as ctx:
                assert (await request(ctx, control, "snap config")).endswith("- OK")
            await until(lambda: mon.messages("configs"), "the configs", timeout=WAIT)
            c0 = mon.messages("configs")[0]
            assert (c0["storeName"], c0["port"]) == ("mstore", port)
            assert not c0["topicConfigs"]
            # events go at the store group's ticks: the first, 3 s after start, carries
            # STORE_CREATED (lbmmon, started first, has joined the topic by then)
            await until(lambda: mon.events(), "STORE_CREATED", timeout=WAIT)
            assert mon.events()[0]["eventType"] == "STORE_CREATED_EVENT"
            app = mon.objects[0]["attributes"]
            assert app["applicationId"] == "mstore"

            async with await Context.create() as ctx:
                src = await ctx.create_source(TOPIC)
                tix, tidx = src.ext.transport_idx, src.tidx
                client.port.send(
                    store.address,
                    SourceRegistration(
                        TOPIC, tix, tidx, client.address, ctxinst=os.urandom(8)
                    ).encode(),
                )
                resp = await client.first(RegistrationResponse, lambda r: r.source)
                assert resp.error is None, resp.error_text
                src_reg = resp.reg_id
                await until(lambda: src.receivers >= 1, "the Store joined", timeout=WAIT)
                for i in range(N):
                    await src.send(b"quote %d" % i, flush=i == N - 1)
                await until(lambda: stable(client) >= set(range(N)), "stable", timeout=WAIT)
                client.port.send(
                    store.address,
                    ReceiverRegistration(src_reg, tix, tidx, client.address, topic=TOPIC).encode(),
                )
                rresp = await client.first(RegistrationResponse, lambda r: not r.source)
                assert rresp.error is None, rresp.error_text
                rcv_reg = rresp.reg_id

                # check 33: repo configs once the source registered, lead_sqn tracking,
                # the events in order
                def repo_config() -> Any:
                    for c in mon.messages("configs"):
                        for t in c.get("topicConfigs", []):
                            for r in t["repoConfigs"]:
                                if r["srcRegid"] == src_reg and r.get("rcvConfigs"):
                                    return t, r
                    return None

                await until(repo_config, "configs with the repository", timeout=WAIT)
                topic_cfg, rc = repo_config()
                assert topic_cfg["topicName"] == TOPIC
                assert rc["repositoryType"] == "REPO_TYPE_MEMORY"
                assert rc["rcvConfigs"][0]["rcvRegid"] == rcv_reg

                def leads() -> set[int]:
                    return {
                        int(r["leadSqn"])
                        for s in mon.messages("stats")
                        for r in s.get("srcRepoStats", [])
                        if r["srcRegid"] == src_reg
                    }

                await until(lambda: N - 1 in leads(), f"lead_sqn {N - 1}", timeout=WAIT)
                await until(
                    lambda: first(
                        mon.events(), lambda e: e["eventType"] == "RECEIVER_REGISTERED_EVENT"
                    ),
                    "RECEIVER_REGISTERED",
                    timeout=WAIT,
                )
                kinds = [e["eventType"] for e in mon.events()]
                assert kinds[:4] == [
                    "STORE_CREATED_EVENT",
                    "TOPIC_CREATE_EVENT",
                    "SOURCE_REGISTERED_EVENT",
                    "RECEIVER_REGISTERED_EVENT",
                ], kinds
                reg = first(mon.events(), lambda e: e["eventType"] == "SOURCE_REGISTERED_EVENT")
                assert (reg["leadSqn"], reg["srcRegid"], reg["topicName"]) == (
                    0xFFFFFFFF,
                    src_reg,
                    TOPIC,
                )
                rreg = first(mon.events(), lambda e: e["eventType"] == "RECEIVER_REGISTERED_EVENT")
                assert (rreg["rcvRegid"], rreg["highSqn"]) == (rcv_reg, N - 1)

                # daemon control: answered, carried out, counted
                assert (await request(ctx, control, "version")).startswith("version 1 ")
                assert (await request(ctx, control, "bogus request")).startswith("ERROR:")
                answer = await request(ctx, control, f"mark 127.0.0.1 {port} {src_reg} 2")
                assert answer.endswith("- OK"), answer
                # check 34: the marked sqn is not delivered to a recovering receiver
                reqs = tuple(RxReq(tix, src_reg, q, client.address) for q in (1, 2, 3))
                client.port.send(store.address, RetransmissionRequest(reqs).encode())
                await until(
                    lambda: {r.sqn for r in client.of(Retransmission)} >= {1, 3},
                    "1 and 3 retransmitted",
                    timeout=WAIT,
                )
                metrics = await scrape(store)
                store_label = frozenset({("store", "mstore")})
                assert metrics[("pyum_umestored_rx_marked_total", store_label)] == 1
                assert 2 not in {r.sqn for r in client.of(Retransmission)}
                # check 34: deregister; the still-running receiver's ACKs are logged discarded
                answer = await request(
                    ctx, control, f"deregister 127.0.0.1 {port} {src_reg} {rcv_reg}"
                )
                assert answer.endswith("- OK"), answer
                await until(
                    lambda: first(
                        mon.events(),
                        lambda e: (
                            e["eventType"] == "RECEIVER_DELETED_EVENT"
                            and e["deletionReasonCode"] == "DELETED"
                        ),
                    ),
                    "RECEIVER_DELETED (DELETED)",
                    timeout=WAIT,
                )
                client.port.send(
                    store.address, ConsumptionAck(tix, src_reg, rcv_reg, N - 1).encode()
                )
                await store.wait_for_line(
                    rf"consumption ACK .* unknown receiver RegID {rcv_reg} .* discarded", WAIT
                )
                metrics = await scrape(store)
                outcome = {
                    lbl: v
                    for (name, labels), v in metrics.items()
                    if name == "pyum_umestored_control_requests_total"
                    for lbl in [dict(labels)["outcome"]]
                }
                assert outcome == {"ok": 4, "refused": 0, "malformed": 1, "failed": 0}
                await src.close()

            found = store.find(METRICS)
            assert found is not None
            url = f"http://{found.group(1)}:{found.group(2)}/metrics"

            def get() -> bytes:
                with urllib.request.urlopen(url, timeout=10) as r:
                    body: bytes = r.read()
                    return body

            body = await asyncio.to_thread(get)
            assert b"pyum_ump_source_lead_sqn" in body
            result = promtool_check(promtool, body)
            assert result.returncode == 0, (result.stdout + result.stderr).decode()
            assert await store.stop(signal.SIGINT) == 0
        finally:
            await store.kill()
    assert compose.NO_SQN == 0xFFFFFFFF
