"""``make run ARGS="--tls --compression lz4"``: the demo topology encrypted and compressed."""

from __future__ import annotations

import asyncio
import os
import sys

import pytest

from tests.integration.daemon_proc import ROOT
from tests.integration.test_tools import finish


@pytest.mark.slow
async def test_topology_runs_encrypted_and_compressed() -> None:
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "umcore.tools.topology", "--messages", "2000", "--rate", "2000",
        "--stats-interval", "1", "--tls", "--compression", "lz4",
        cwd=ROOT, env=dict(os.environ, PYTHONUNBUFFERED="1"),
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT,
    )  # fmt: skip
    rc, out, _ = await finish(proc)
    assert rc == 0, out
    lines = out.splitlines()
    assert any(line.startswith("[topo  ] tls      ") and "TLS 1.2" in line for line in lines), out
    assert any(line.startswith("[topo  ] compress ") and "lz4" in line for line in lines), out
    # nothing failed a handshake; every pair got everything, verified
    assert "handshake" not in out and "negotiation" not in out, out
    for name in ("lbmrcv", "srsrcv"):
        summary = [line for line in lines if line.startswith(f"[{name}] lbmrcv: messages=")]
        assert summary and "messages=2000 " in summary[0] and "verify_errors=0" in summary[0]
    ume = [line for line in lines if line.startswith("[umercv] umercv: messages=")]
    assert len(ume) == 2 and "verify_errors=0 " in ume[1], ume
    assert "[umesrc] umesrc: sent=2000 stable=2000 " in out, out
