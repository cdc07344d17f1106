"""LBT-IPC and LBT-SMX between two processes: a source process (tests/transport_shm/peer.py)
and a receiver in this one, resolving each other over multicast topic resolution on loopback.

- 100,000 messages over LBT-IPC and over LBT-SMX (zero-copy send), every one delivered, in
  order, whole, then EOS when the source closes;
- a source killed with SIGKILL mid-stream: the receiver gets EOS (no hang), never a torn
  message, and the resource manager finds the segment it left and reclaims it;
- a segment with a bad header is refused with what to run to clean it up.
"""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.transport_shm.peer import configure
from umcore.aio import shm as aio_shm
from umcore.api import Context
from umcore.api.message import (
    MSG_BOS,
    MSG_EOS,
    MSG_UNRECOVERABLE_LOSS,
    MSG_UNRECOVERABLE_LOSS_BURST,
)
from umcore.transport import shmring
from umcore.transport.shmring import SegmentError

ROOT = Path(__file__).resolve().parents[2]
GROUP = "224.9.10.97"
WAIT = 60.0  # bound on every wait (2 shared cores; 100,000 messages take a few seconds)


class Collector:
    """A receiver callback that checks each message (in order, whole) and keeps the events."""

    def __init__(self, want: int) -> None:
        self.want = want
        self.next = 0
        self.errors: list[str] = []
        self.events: list[tuple[int, str]] = []
        self.done = asyncio.Event()
        self.eos = asyncio.Event()
        self.some = asyncio.Event()

    def __call__(self, msg: object) -> None:
        t = msg.type  # type: ignore[attr-defined]
        if t != 0:
            self.events.append((t, msg.source))  # type: ignore[attr-defined]
            if t == MSG_EOS:
                self.eos.set()
            return
        data = bytes(msg.data)  # type: ignore[attr-defined]
        i = int.from_bytes(data[:8], "big")
        if len(data) != 32 or data != data[:8] * 4:
            self.errors.append(f"torn message at {self.next}: {data!r}")
        elif i != self.next:
            self.errors.append(f"expected {self.next}, got {i}")
        self.next = i + 1
        if self.next >= 1000:
            self.some.set()
        if self.next == self.want:
            self.done.set()


def spawn(port: int, *args: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [
            sys.executable,
            "-m",
            "tests.transport_shm.peer",
            "--group",
            GROUP,
            "--port",
            str(port),
            *args,
        ],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


@pytest.fixture
def procs() -> Iterator[list[subprocess.Popen[str]]]:
    started: list[subprocess.Popen[str]] = []
    yield started
    for p in started:
        if p.poll() is None:
            p.kill()
        p.wait(10)


async def receive(port: int, transport: str, col: Collector, proc: subprocess.Popen[str]) -> None:
    configure(GROUP, port, transport)
    async with await Context.create() as ctx:
        r = await ctx.create_receiver("shm-test", col)
        try:
            await asyncio.wait_for(col.done.wait(), WAIT)
            await asyncio.wait_for(col.eos.wait(), WAIT)
        finally:
            await r.close()
    rc = await asyncio.get_running_loop().run_in_executor(None, proc.wait, WAIT)
    out, err = proc.communicate()
    assert rc == 0, err
    assert "done" in out


@pytest.mark.slow
@pytest.mark.parametrize(
    ("transport", "extra"),
    [("lbtipc", []), ("lbtsmx", ["--zero-copy"])],
)
async def test_100k_messages_in_order(
    transport: str, extra: list[str], unused_udp_port: int, procs: list[subprocess.Popen[str]]
) -> None:
    n = 100_000
    col = Collector(n)
    p = spawn(unused_udp_port, "--transport", transport, "--count", str(n), *extra)
    procs.append(p)
    await receive(unused_udp_port, transport, col, p)
    assert col.errors == []
    assert col.next == n
    kinds = [t for t, _ in col.events]
    assert kinds == [MSG_BOS, MSG_EOS]
    label = "LBT-IPC" if transport == "lbtipc" else "LBT-SMX"
    assert all(s.startswith(label + ":") for _, s in col.events)


async def test_sigkill_source_gives_eos_and_leaves_a_reclaimable_segment(
    unused_udp_port: int, procs: list[subprocess.Popen[str]]
) -> None:
    col = Collector(-1)
    p = spawn(unused_udp_port, "--transport", "lbtipc", "--count", "0")
    procs.append(p)
    configure(GROUP, unused_udp_port, "lbtipc")
    async with await Context.create() as ctx:
        r = await ctx.create_receiver("shm-test", col)
        try:
            await asyncio.wait_for(col.some.wait(), WAIT)
            p.send_signal(signal.SIGKILL)
            await asyncio.wait_for(col.eos.wait(), 10.0)  # liveness: 0.2 s, not a hang
        finally:
            await r.close()
    p.wait(10)
    assert col.errors == []  # in order, never torn
    assert col.next >= 1000
    # The killed source's segment is still there, reported stale, and reclaimed.
    mine = [
        rep for rep in aio_shm.scan_segments() if rep.header is not None and rep.header.pid == p.pid
    ]
    assert len(mine) == 1 and mine[0].stale and not mine[0].source_alive
    with pytest.raises(SegmentError, match="gone") as exc:  # a late joiner refuses it
        aio_shm.open_segment(mine[0].name)
    assert "--reclaim" in str(exc.value)
    out = subprocess.run(
        [sys.executable, "-m", "umcore.tools.ipcrm"], cwd=ROOT, capture_output=True, text=True,
        timeout=30,
    )  # fmt: skip
    assert out.returncode == 1 and mine[0].name in out.stdout and "--reclaim" in out.stdout
    out = subprocess.run(
        [sys.executable, "-m", "umcore.tools.ipcrm", "--reclaim"], cwd=ROOT,
        capture_output=True, text=True, timeout=30,
    )  # fmt: skip
    assert out.returncode == 0 and f"Process {p.pid} not found" in out.stdout
    assert not os.path.exists(os.path.join(aio_shm.SHM_DIR, mine[0].name))


def test_bad_segment_is_refused_not_mapped(tmp_path: Path) -> None:
    name = f"LBTIPC_{os.getpid():x}_{os.getpid() % 60000 + 1}"
    path = os.path.join(aio_shm.SHM_DIR, name)
    size = shmring.header_size_for(4) + 4096
    buf = bytearray(size)
    shmring.init_header(
        memoryview(buf), kind=shmring.KIND_IPC, data_size=4096, session_id=1, xport_id=1,
        pid=os.getpid(), max_receivers=4, max_record=1024, receiver_paced=False, doorbell=b"",
        now_ns=0,
    )  # fmt: skip
    buf[8:10] = (shmring.VERSION + 1).to_bytes(2, "little")  # a newer layout
    with open(path, "wb") as f:
        f.write(buf)
    try:
        with pytest.raises(SegmentError, match="version") as exc:
            aio_shm.open_segment(name)
        assert "umcore.tools.ipcrm" in str(exc.value)
        rep = [r for r in aio_shm.scan_segments() if r.name == name]
        assert len(rep) == 1 and rep[0].stale and "version" in str(rep[0].problem)
    finally:
        os.unlink(path)
    with pytest.raises(SegmentError, match="no such segment"):
        aio_shm.open_segment(name)


async def test_source_paced_overrun_across_processes_never_tears(
    unused_udp_port: int, procs: list[subprocess.Popen[str]]
) -> None:
    """A source in another process laps a slow receiver on a 4 KB ring, concurrently with its
    reads: every message delivered is whole and in order, the overwritten ones are reported
    as loss, and the newest arrive."""
    n = 20_000
    small = (
        "source transport_lbtipc_transmission_window_size 4096\\n"
        "context transport_lbtipc_datagram_max_size 500"
    )
    got: list[int] = []
    torn: list[bytes] = []
    lost = 0
    done = asyncio.Event()

    def on_msg(msg: Any) -> None:
        nonlocal lost
        if msg.type in (MSG_UNRECOVERABLE_LOSS, MSG_UNRECOVERABLE_LOSS_BURST):
            lost += 1
        if msg.type != 0:
            return
        data = bytes(msg.data)
        if len(data) != 32 or data != data[:8] * 4:
            torn.append(data)
        got.append(int.from_bytes(data[:8], "big"))
        sum(range(200))  # a slow receiver
        if got[-1] == n - 1:
            done.set()

    p = spawn(unused_udp_port, "--transport", "lbtipc", "--count", str(n), "--extra", small)
    procs.append(p)
    configure(GROUP, unused_udp_port, "lbtipc")
    async with await Context.create() as ctx:
        r = await ctx.create_receiver("shm-test", on_msg)
        try:
            await asyncio.wait_for(done.wait(), WAIT)
        finally:
            await r.close()
    assert torn == []
    assert got == sorted(set(got)) and got[-1] == n - 1
    if len(got) < n:
        assert lost > 0
