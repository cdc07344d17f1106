"""lbmrcv --hfx (pyum's spelling of UM's lbmhfxrcv): two contexts (-I twice), two HF lbmsrc
processes sending the same 100 HF sequence numbers, each delivered once and in order; -I
without --hfx (and --hfx with --hf or -N) refused before anything starts."""

from __future__ import annotations

import asyncio
import re
from pathlib import Path

import pytest

from tests.integration.test_tools import finish, tool
from umcore.tools import lbmrcv

TIMEOUT = 60.0


async def test_lbmrcv_hfx_two_contexts_two_hf_sources(tmp_path: Path, unused_udp_port: int) -> None:
    cfg = tmp_path / "mc.cfg"
    cfg.write_text(
        "context resolver_multicast_interface 127.0.0.1\n"
        "context resolver_multicast_address 224.9.10.99\n"
        f"context resolver_multicast_port {unused_udp_port}\n"
        "source transport_tcp_interface 127.0.0.1\n"
        "hfx delivery_control_maximum_burst_loss 100000\n"
    )
    args = ["-c", str(cfg), "--hfx", "-I", "127.0.0.1", "-I", "127.0.0.1", "-vv", "-E"]
    rcv = await tool("lbmrcv", *args, "tools.hfx")
    assert rcv.stdout is not None
    async with asyncio.timeout(TIMEOUT):
        assert b"(HFX, 2 contexts)" in await rcv.stdout.readline()
    src_args = ["-c", str(cfg), "--hf", "--hf-start", "1000", "-M", "100", "-l", "20",
                "-d", "2", "-L", "1", "tools.hfx"]  # fmt: skip
    srcs = [await tool("lbmsrc", *src_args) for _ in range(2)]
    for s in srcs:
        src_rc, src_out, src_err = await finish(s)
        assert src_rc == 0, src_err
        assert "messages=100" in src_out
    rc, out, err = await finish(rcv)
    assert rc == 0, err
    hf = [int(x) for x in re.findall(r" hf=(\d+)", out)]
    assert hf == list(range(1000, 1100))  # four copies of each (2 sources x 2 contexts): one
    assert "messages=100 " in out.strip().splitlines()[-1]


def test_lbmrcv_iface_needs_hfx(capsys: pytest.CaptureFixture[str]) -> None:
    for argv in (["-I", "127.0.0.1", "t"], ["--hfx", "--hf", "t"], ["--hfx", "-N", "1", "t"]):
        with pytest.raises(SystemExit) as exc:
            lbmrcv.main(argv)
        assert exc.value.code == 2 and "--hfx" in capsys.readouterr().err
