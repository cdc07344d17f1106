"""LBT-IPC / LBT-SMX through the API in one process (and one receiver process killed): pacing
and loss, transport ids, SMX's restrictions and zero-copy delivery, other hosts' TIRs."""

from __future__ import annotations

import asyncio
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.transport_shm.peer import configure
from umcore.api import Context
from umcore.api.message import (
    MSG_BOS,
    MSG_FLAG_RETRANSMIT,
    MSG_UNRECOVERABLE_LOSS,
    MSG_UNRECOVERABLE_LOSS_BURST,
)
from umcore.engine import shm
from umcore.errors import UMError, WouldBlock
from umcore.resolver.core import SourceInfo
from umcore.wire import lbmr

ROOT = Path(__file__).resolve().parents[2]
GROUP = "224.9.10.93"
WAIT = 20.0
SMALL_RING = (
    "source transport_lbtipc_transmission_window_size 4096\n"
    "context transport_lbtipc_datagram_max_size 500\n"
    "source implicit_batching_minimum_length 1\n"
)


class Got:
    def __init__(self) -> None:
        self.data: list[int] = []
        self.events: list[Any] = []
        self.bos = asyncio.Event()
        self.last = asyncio.Event()
        self.want = -1

    def __call__(self, msg: Any) -> None:
        if msg.type == 0:
            i = int.from_bytes(bytes(msg.data[:4]), "big")
            self.data.append(i)
            if i == self.want:
                self.last.set()
            return
        self.events.append(msg)
        if msg.type == MSG_BOS:
            self.bos.set()


async def pair(ctx: Context, topic: str, got: Got, **kw: Any) -> Any:
    r = await ctx.create_receiver(topic, got)
    src = await ctx.create_source(topic, **kw)
    await asyncio.wait_for(got.bos.wait(), WAIT)
    return src, r


async def test_source_paced_overrun_reports_loss_keeps_order(unused_udp_port: int) -> None:
    configure(GROUP, unused_udp_port, "lbtipc", SMALL_RING)
    async with await Context.create() as ctx:
        got = Got()
        got.want = 999
        src, r = await pair(ctx, "paced.src", got)
        got.want = 0
        src.send_nowait(bytes(32), flush=True)  # delivered first: loss after it is not leading
        await asyncio.wait_for(got.last.wait(), WAIT)
        got.last.clear()
        got.want = 999
        for i in range(1, 1000):  # no await: the receiver cannot read before the ring laps
            src.send_nowait(i.to_bytes(4, "big") * 8, flush=True)
        await asyncio.wait_for(got.last.wait(), WAIT)
        await src.close()
        await r.close()
    assert got.data == sorted(got.data) and got.data[-1] == 999
    assert len(got.data) < 1000  # the ring holds ~90 of these: most were overwritten
    lost = [
        m for m in got.events if m.type in (MSG_UNRECOVERABLE_LOSS, MSG_UNRECOVERABLE_LOSS_BURST)
    ]
    assert lost  # ... and reported as unrecoverable loss, not silently skipped


async def test_receiver_paced_blocks_instead_of_losing(unused_udp_port: int) -> None:
    configure(
        GROUP,
        unused_udp_port,
        "lbtipc",
        SMALL_RING + "source transport_lbtipc_behavior receiver_paced",
    )
    async with await Context.create() as ctx:
        got = Got()
        got.want = 1999
        src, r = await pair(ctx, "paced.rcv", got)
        blocked = 0
        for i in range(2000):
            payload = i.to_bytes(4, "big") * 8
            try:
                src.send_nowait(payload, flush=True)
            except WouldBlock:
                blocked += 1
                await src.send(payload, flush=True)  # UM's blocking send: waits for room
        await asyncio.wait_for(got.last.wait(), WAIT)
        await src.close()
        await r.close()
    assert blocked > 0
    assert got.data == list(range(2000))
    assert [m.type for m in got.events] == [MSG_BOS]  # no loss events


async def test_transport_ids_round_robin_and_explicit(unused_udp_port: int) -> None:
    configure(
        GROUP,
        unused_udp_port,
        "lbtipc",
        "context transport_lbtipc_id_low 21001\ncontext transport_lbtipc_id_high 21002\n",
    )
    async with await Context.create() as ctx:
        srcs = [await ctx.create_source(f"ids.{i}") for i in range(3)]
        ids = [s.source_string.rsplit(":", 1)[1] for s in srcs]
        assert ids == ["21001", "21002", "21001"]  # seed 6.4.6's round robin
        assert srcs[0].source_string == srcs[2].source_string  # same session
        from umcore.config.attributes import SourceAttributes

        attrs = SourceAttributes()
        attrs.set("transport", "lbtipc")  # (an attributes object starts from the defaults)
        attrs.set("transport_lbtipc_id", "22222")
        pinned = await ctx.create_source("ids.pinned", attributes=attrs)
        assert pinned.source_string.endswith(":22222")
        info = pinned.transport_info
        assert type(info) is lbmr.LBTIPCInfo and info.xport_id == 22222
        assert lbmr.LBTIPCInfo.transport_type == lbmr.TRANSPORT_LBTIPC
        for s in (*srcs, pinned):
            await s.close()


async def test_smx_restrictions_and_zero_copy_views(unused_udp_port: int) -> None:
    configure(
        GROUP,
        unused_udp_port,
        "lbtsmx",
        "source transport_lbtsmx_datagram_max_size 256\n"
        "source transport_lbtsmx_transmission_window_size 5000\n",
    )
    kept: list[Any] = []
    sqns: list[int] = []
    async with await Context.create() as ctx:
        got = Got()
        got.want = 2

        def cb(msg: Any) -> None:
            if msg.type == 0:
                assert type(msg.data) is memoryview  # into the segment, no copy
                kept.append(msg.data)
                sqns.append(msg.sequence_number)
            got(msg)

        r = await ctx.create_receiver("smx.t", cb)
        src = await ctx.create_source("smx.t")
        await asyncio.wait_for(got.bos.wait(), WAIT)
        with pytest.raises(UMError, match="exceeds"):
            await src.send(bytes(241))  # 256 - 16 = 240 at most: no fragmentation
        with pytest.raises(UMError, match="SMX"):
            await src.send(b"x", app_headers=[(1, b"h")])
        await src.send((0).to_bytes(4, "big"))
        bufs = shm.smx_buffers(src)
        v = bufs.acquire(4)
        v[:] = (99).to_bytes(4, "big")
        bufs.cancel()  # never published, its sequence number reused
        for i in (1, 2):
            v = bufs.acquire(4)
            v[:] = i.to_bytes(4, "big")
        bufs.complete()
        await asyncio.wait_for(got.last.wait(), WAIT)
        assert shm.smx_buffers(src).endpoint.ring.size == 8192  # 5000 rounded up to 2**13
        await src.close()
        await r.close()
    assert got.data == [0, 1, 2]
    with pytest.raises(ValueError):
        bytes(kept[0])  # released after its callback: not valid outside it (seed 6.5.4)
    assert sqns == [0, 1, 2]  # the cancelled message's sequence number was reused


async def test_smx_buffers_refused_on_ipc(unused_udp_port: int) -> None:
    configure(GROUP, unused_udp_port, "lbtipc")
    async with await Context.create() as ctx:
        src = await ctx.create_source("not.smx")
        with pytest.raises(UMError, match="lbtsmx"):
            shm.smx_buffers(src)
        await src.close()


async def test_other_hosts_tir_is_not_joined(unused_udp_port: int) -> None:
    configure(GROUP, unused_udp_port, "lbtipc")
    async with await Context.create() as ctx:
        got = Got()
        r = await ctx.create_receiver("far.away", got)
        far = lbmr.LBTIPCInfo(shm.local_host_id() ^ 0x5A5A5A5A, 0x1234, 20001)
        js = ctx.join(SourceInfo("far.away", 0, far))  # type: ignore[arg-type]
        assert js is not None and js.closed and js.conn is None
        assert got.events == []
        await r.close()


async def test_killed_receiver_does_not_hold_a_receiver_paced_source(
    unused_udp_port: int, tmp_path: Path
) -> None:
    extra = SMALL_RING + "source transport_lbtipc_behavior receiver_paced\n"
    configure(GROUP, unused_udp_port, "lbtipc", extra)
    cfg = tmp_path / "rcv.cfg"
    cfg.write_text(
        "context resolver_multicast_interface 127.0.0.1\n"
        f"context resolver_multicast_address {GROUP}\n"
        f"context resolver_multicast_port {unused_udp_port}\n"
    )
    rcv = subprocess.Popen(
        [sys.executable, "-m", "umcore.tools.lbmrcv", "-c", str(cfg), "killed.rcv"],
        cwd=ROOT,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        async with await Context.create() as ctx:
            src = await ctx.create_source("killed.rcv")
            loop = asyncio.get_running_loop()
            deadline = loop.time() + WAIT
            while src.receivers < 1:
                assert loop.time() < deadline, "lbmrcv never attached"
                await asyncio.sleep(0.01)
            rcv.send_signal(signal.SIGSTOP)  # a stuck receiver: the ring fills up
            blocked = False
            for i in range(500):
                try:
                    src.send_nowait(i.to_bytes(4, "big") * 8, flush=True)
                except WouldBlock:
                    blocked = True
                    break
            assert blocked  # receiver pacing held the source
            rcv.kill()
            rcv.wait(10)
            # The dead receiver's slot is freed: the blocking send completes (bounded).
            await asyncio.wait_for(src.send(b"after", flush=True), WAIT)
            assert src.receivers == 0
            await src.close()
    finally:
        if rcv.poll() is None:
            rcv.kill()
            rcv.wait(10)


async def test_late_join_over_ipc_then_live_no_gap_no_duplicate(unused_udp_port: int) -> None:
    """Late join works over LBT-IPC as over the other transports (seed 6.4.4: through the
    source's retention and the request port, not the ring)."""
    configure(
        GROUP,
        unused_udp_port,
        "lbtipc",
        "context request_tcp_port_low 0\ncontext request_tcp_port_high 0\n"
        "context request_tcp_interface 127.0.0.1\nsource late_join 1\n"
        "source retransmit_retention_size_threshold 50000000\n",
    )
    async with await Context.create() as sctx, await Context.create() as rctx:
        src = await sctx.create_source("lj.ipc")
        for i in range(300):
            await src.send(i.to_bytes(4, "big"), flush=(i % 50 == 49))
        src.flush()
        got: list[Any] = []
        done = asyncio.Event()

        def cb(msg: Any) -> None:
            if msg.type == 0:
                got.append(msg)
                if len(got) >= 400:
                    done.set()

        rcv = await rctx.create_receiver("lj.ipc", cb)
        loop = asyncio.get_running_loop()
        deadline = loop.time() + WAIT
        while src.receivers < 1:
            assert loop.time() < deadline, "never joined"
            await asyncio.sleep(0.01)
        for i in range(300, 400):
            await src.send(i.to_bytes(4, "big"), flush=True)
        await asyncio.wait_for(done.wait(), WAIT)
        assert [msg.sequence_number for msg in got] == list(range(400))
        assert [int.from_bytes(bytes(msg.data), "big") for msg in got] == list(range(400))
        rx = [msg.sequence_number for msg in got if msg.flags & MSG_FLAG_RETRANSMIT]
        assert len(rx) >= 300 and rx == list(range(len(rx)))
        assert got[0].source.startswith("LBT-IPC:")
        await rcv.close()
        await src.close()


@pytest.mark.parametrize("transport", ["lbtipc", "lbtsmx"])
async def test_monitoring_samples_fill_ums_mon(transport: str, unused_udp_port: int) -> None:
    """Automatic monitoring's transport samples of IPC/SMX sessions fill UM's LBTIPC/LBTSMX
    members of ums_mon (source and receiver), with the messages counted."""
    from umcore.monitor.umsstats import TransportSample, transport_message

    configure(GROUP, unused_udp_port, transport)
    async with await Context.create() as ctx:
        got = Got()
        got.want = 9
        src, r = await pair(ctx, f"mon.{transport}", got)
        for i in range(10):
            await src.send(i.to_bytes(4, "big"), flush=True)
        await asyncio.wait_for(got.last.wait(), WAIT)
        loop = asyncio.get_running_loop()
        deadline = loop.time() + WAIT
        while src.session.core.clients < 1:  # the source's liveness scan counts receivers
            assert loop.time() < deadline
            await asyncio.sleep(0.01)
        samples = {s[0]: s for s in ctx.transport_samples() if s[1] == transport}
        for direction in ("source", "receiver"):
            msg = transport_message(TransportSample(*samples[direction], flag=0))
            side = (
                msg.stats.source_transports
                if direction == "source"
                else msg.stats.receiver_transports
            )
            member = getattr(side[0], transport)
            if direction == "source":
                assert member.msgs_sent >= 10 and member.num_clients == 1
            else:
                assert member.lbm_msgs_rcved == 10 and member.bytes_rcved > 0
            assert side[0].source_string.startswith(
                "LBT-IPC:" if transport == "lbtipc" else "LBT-SMX:"
            )
        await src.close()
        await r.close()
