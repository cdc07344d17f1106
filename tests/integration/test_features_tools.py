"""lbmreq / lbmresp as processes: 5 requests, each answered with exactly one 25-byte response
(seed 10.12.6's demo)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from tests.integration.daemon_proc import lines_until


def test_lbmreq_lbmresp(tmp_path: Path, unused_udp_port_factory: object) -> None:
    port = unused_udp_port_factory()  # type: ignore[operator]
    cfg = tmp_path / "um.cfg"
    cfg.write_text(
        "context resolver_multicast_interface 127.0.0.1\n"
        "context resolver_multicast_address 224.9.10.97\n"
        f"context resolver_multicast_port {port}\n"
        "context transport_tcp_port_low 0\ncontext transport_tcp_port_high 0\n"
        "context request_tcp_port_low 0\ncontext request_tcp_port_high 0\n"
        "context request_tcp_interface 127.0.0.1\n"
        "source transport_tcp_interface 127.0.0.1\n"
    )
    resp = subprocess.Popen(
        [sys.executable, "-m", "umcore.tools.lbmresp", "-c", str(cfg), "-N", "5", "-v", "rr"],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
    )  # fmt: skip
    try:
        # lbmreq sends its first request a fixed delay after its source exists: the responder
        # must be up by then (a cold interpreter on a busy machine can take longer than that).
        head = lines_until(resp, "lbmresp: receiving requests on topic 'rr'", 60)
        req = subprocess.run(
            [sys.executable, "-m", "umcore.tools.lbmreq", "-c", str(cfg), "-R", "5", "-T", "1",
             "-d", "1.5", "-v", "rr"],
            capture_output=True, text=True, timeout=60,
        )  # fmt: skip
        out, _ = resp.communicate(timeout=30)
        out = "".join(head) + out
    finally:
        if resp.poll() is None:
            resp.kill()
            resp.wait()
    assert req.returncode == 0, req.stdout + req.stderr
    assert "Receiver connect [TCP:" in req.stdout
    assert req.stdout.count(", 25 bytes") == 5, req.stdout
    assert "lbmreq: requests=5 responses=5" in req.stdout
    assert "lbmresp: requests=5 responses=5" in out, out


pytestmark = pytest.mark.timeout(120)
