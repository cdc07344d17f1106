"""lbmsrc / lbmrcv flags for Spectrum (-N) and Hot Failover (--hf): two HF lbmsrc processes
sending the same 100 HF sequence numbers on channel 5, one lbmrcv --hf -N 5 counting 100."""

from __future__ import annotations

import asyncio
import os
import re
import sys
from pathlib import Path

from tests.integration.daemon_proc import ROOT

TIMEOUT = 60.0


async def _tool(name: str, *args: str) -> asyncio.subprocess.Process:
    return await asyncio.create_subprocess_exec(
        sys.executable, "-m", f"umcore.tools.{name}", *args, cwd=ROOT,
        env=dict(os.environ, PYTHONUNBUFFERED="1"),
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
    )  # fmt: skip


async def _finish(proc: asyncio.subprocess.Process) -> tuple[int, str, str]:
    try:
        out, err = await asyncio.wait_for(proc.communicate(), TIMEOUT)
    finally:
        if proc.returncode is None:
            proc.kill()
            await proc.wait()
    assert proc.returncode is not None
    return proc.returncode, out.decode(), err.decode()


async def test_hf_sources_on_a_channel_to_hf_receiver(tmp_path: Path, unused_udp_port: int) -> None:
    cfg = tmp_path / "mc.cfg"
    cfg.write_text(
        "context resolver_multicast_interface 127.0.0.1\n"
        "context resolver_multicast_address 224.9.10.99\n"
        f"context resolver_multicast_port {unused_udp_port}\n"
        "source transport_tcp_interface 127.0.0.1\n"
    )
    rcv = await _tool("lbmrcv", "-c", str(cfg), "--hf", "-N", "5", "-vv", "-E", "tools.hf")
    assert rcv.stdout is not None
    async with asyncio.timeout(TIMEOUT):
        assert b"receiving" in await rcv.stdout.readline()
    args = ["-c", str(cfg), "--hf", "--hf-start", "1000", "-N", "5", "-M", "100", "-l", "20",
            "-d", "2", "-L", "1", "tools.hf"]  # fmt: skip
    srcs = [await _tool("lbmsrc", *args) for _ in range(2)]
    for s in srcs:
        src_rc, src_out, src_err = await _finish(s)
        assert src_rc == 0, src_err
        assert "messages=100" in src_out
    rc, out, err = await _finish(rcv)
    assert rc == 0, err
    hf = [int(x) for x in re.findall(r"channel=5 hf=(\d+)", out)]
    assert hf == list(range(1000, 1100))  # each once, in order, from two sources
    assert "messages=100 " in out.strip().splitlines()[-1]
