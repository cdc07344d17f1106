"""lbmsrc -T lbtipc / lbtsmx and lbmrcv over shared memory (two tool processes, multicast topic
resolution on loopback): every message delivered and verified, BOS and EOS once."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from tests.integration.daemon_proc import lines_until

ROOT = Path(__file__).resolve().parents[2]
TIMEOUT = 60.0


@pytest.mark.parametrize("transport", ["lbtipc", "lbtsmx"])
def test_lbmsrc_lbmrcv(transport: str, tmp_path: Path, unused_udp_port: int) -> None:
    cfg = tmp_path / "shm.cfg"
    cfg.write_text(
        "context resolver_multicast_interface 127.0.0.1\n"
        "context resolver_multicast_address 224.9.10.96\n"
        f"context resolver_multicast_port {unused_udp_port}\n"
    )
    rcv = subprocess.Popen(
        [sys.executable, "-m", "umcore.tools.lbmrcv", "-c", str(cfg), "-E", "-V", "topic.shm"],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        # lbmsrc sends a fixed delay (-d 1) after its source exists: the receiver must be up by
        # then, or it joins late and misses the first messages (a cold interpreter on a busy
        # machine takes longer than that to start).
        head = lines_until(rcv, "lbmrcv: receiving topic 'topic.shm'", TIMEOUT)
        src = subprocess.run(
            [sys.executable, "-m", "umcore.tools.lbmsrc", "-c", str(cfg), "-T", transport,
             "-M", "5000", "-V", "-d", "1", "-L", "0.5", "topic.shm"],
            cwd=ROOT, capture_output=True, text=True, timeout=TIMEOUT,
        )  # fmt: skip
        out, err = rcv.communicate(timeout=TIMEOUT)
        out = "".join(head) + out
    finally:
        if rcv.poll() is None:
            rcv.kill()
            rcv.wait(10)
    assert src.returncode == 0, src.stderr
    label = "LBT-IPC" if transport == "lbtipc" else "LBT-SMX"
    assert f"source {label}:" in src.stdout
    assert rcv.returncode == 0, err
    assert "messages=5000 " in out and "verify_errors=0" in out and "unrecoverable=0" in out
    assert "bos=1 eos=1" in out
