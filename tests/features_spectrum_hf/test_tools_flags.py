"""lbmsrc / lbmrcv flags for Spectrum (-N) and Hot Failover (--hf): two HF lbmsrc processes
sending the same 100 HF sequence numbers on channel 5, one lbmrcv --hf -N 5 counting 100."""

from __future__ import annotations

import asyncio
import re
from pathlib import Path

from tests.integration.test_tools import finish, tool

TIMEOUT = 60.0


async def test_hf_sources_on_a_channel_to_hf_receiver(tmp_path: Path, unused_udp_port: int) -> None:
    cfg = tmp_path / "mc.cfg"
    cfg.write_text(
        "context resolver_multicast_interface 127.0.0.1\n"
        "context resolver_multicast_address 224.9.10.99\n"
        f"context resolver_multicast_port {unused_udp_port}\n"
        "source transport_tcp_interface 127.0.0.1\n"
    )
    rcv = await tool("lbmrcv", "-c", str(cfg), "--hf", "-N", "5", "-vv", "-E", "tools.hf")
    assert rcv.stdout is not None
    async with asyncio.timeout(TIMEOUT):
        assert b"receiving" in await rcv.stdout.readline()
    args = ["-c", str(cfg), "--hf", "--hf-start", "1000", "-N", "5", "-M", "100", "-l", "20",
            "-d", "2", "-L", "1", "tools.hf"]  # fmt: skip
    srcs = [await tool("lbmsrc", *args) for _ in range(2)]
    for s in srcs:
        src_rc, src_out, src_err = await finish(s)
        assert src_rc == 0, src_err
        assert "messages=100" in src_out
    rc, out, err = await finish(rcv)
    assert rc == 0, err
    hf = [int(x) for x in re.findall(r"channel=5 hf=(\d+)", out)]
    assert hf == list(range(1000, 1100))  # each once, in order, from two sources
    assert "messages=100 " in out.strip().splitlines()[-1]
