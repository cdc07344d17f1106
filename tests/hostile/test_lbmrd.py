"""Hostile replay against the lbmrd daemon (issue 22 item 5), scaled down: ``--max-clients 64``
instead of 4096, 300 attacking UDP sockets, a 1 s ttl.  lbmrd runs as a subprocess on loopback
(log to a file).  Asserted: it survives (and stops with 0); the clients admitted before the
flood keep exchanging topic resolution (a TIR reaches the other within LEGIT_WITHIN s); a
legitimate client refused while the table is full is admitted once the attackers' entries
expire; resident memory stays under a stated bound (psutil); client-table refusals have their
own log line, separate from the malformed-datagram warnings, with counts."""

from __future__ import annotations

import os
import re
import socket
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import psutil
import pytest

from tests.daemon.lbmr_samples import KEEPALIVE_RECEIVER, tir_tcp

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[2]
MIB = 1 << 20
WAIT = 10.0  # bound on every wait
MAX_CLIENTS = 64
ATTACKERS = 300
FLOOD_ROUNDS = 10  # each attacker sends this many datagrams: 3,000 in all
LEGIT_WITHIN = 2.0
RSS_ABOVE_IDLE = 30 * MIB
RESOLVER_KEEPALIVE = b"\x00\x00\x00\x00"


def until(pred: Callable[[], bool], what: str, timeout: float = WAIT) -> float:
    start = time.monotonic()
    while not pred():
        assert time.monotonic() - start < timeout, f"timed out waiting for {what}"
        time.sleep(0.02)
    return time.monotonic() - start


def udp() -> socket.socket:
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    s.bind(("127.0.0.1", 0))
    s.setblocking(False)
    return s


def received(s: socket.socket) -> list[bytes]:
    out = []
    while True:
        try:
            out.append(s.recv(65536))
        except BlockingIOError:
            return out


def test_a_flood_of_new_clients_is_refused_visibly_and_legit_traffic_flows(
    tmp_path: Path,
) -> None:
    log_path = tmp_path / "lbmrd.log"
    proc = subprocess.Popen(
        [sys.executable, "-m", "daemons.lbmrd", "-i", "127.0.0.1", "-p", "0", "-t", "1",
         "-a", "200", "-L", str(log_path), "--max-clients", str(MAX_CLIENTS)],
        cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )  # fmt: skip
    socks: list[socket.socket] = []

    def log() -> str:
        return log_path.read_text() if log_path.exists() else ""

    def lines(prefix: str) -> list[str]:
        return [ln for ln in log().splitlines() if f"lbmrd: {prefix}" in ln]

    try:
        until(lambda: "listening on" in log(), "lbmrd listening")
        m = re.search(r"listening on [\d.]+:(\d+)", log())
        assert m is not None and f"at most {MAX_CLIENTS} clients" in log()
        lbmrd = ("127.0.0.1", int(m.group(1)))
        rss = psutil.Process(proc.pid).memory_info
        idle = rss().rss

        a, b = udp(), udp()
        socks += [a, b]
        for s in (a, b):
            s.sendto(KEEPALIVE_RECEIVER, lbmrd)
            until(lambda s=s: RESOLVER_KEEPALIVE in received(s), "keepalive answer")  # type: ignore[misc]

        attackers = [udp() for _ in range(ATTACKERS)]
        socks += attackers
        peak = idle
        for _ in range(FLOOD_ROUNDS):
            for s in attackers:
                s.sendto(KEEPALIVE_RECEIVER, lbmrd)
            for s in attackers[:50]:  # and garbage, a refusal of another kind
                s.sendto(b"\xff" * 32, lbmrd)
            # keep up the admitted clients' side, as live contexts do
            a.sendto(KEEPALIVE_RECEIVER, lbmrd)
            b.sendto(KEEPALIVE_RECEIVER, lbmrd)
            peak = max(peak, rss().rss)
            for s in attackers:
                received(s)  # do not let their receive buffers fill
        # a legitimate new client arrives while the table is full: refused
        c = udp()
        socks.append(c)
        c.sendto(KEEPALIVE_RECEIVER, lbmrd)

        # the admitted clients still exchange topic resolution
        received(b)
        a.sendto(tir_tcp("legit/topic", "127.0.0.1", 14001), lbmrd)
        took = until(
            lambda: any(b"legit/topic" in d for d in received(b)), "A's TIR at B", LEGIT_WITHIN
        )
        assert took < LEGIT_WITHIN
        until(lambda: len(lines("refused client table full:")) >= 1, "the refusal line")

        # the attackers go silent: after the ttl they are removed, and C gets in
        def c_admitted() -> bool:
            c.sendto(KEEPALIVE_RECEIVER, lbmrd)
            a.sendto(KEEPALIVE_RECEIVER, lbmrd)
            b.sendto(KEEPALIVE_RECEIVER, lbmrd)
            return RESOLVER_KEEPALIVE in received(c)

        until(c_admitted, "the legitimate client admitted after the attackers left")
        until(lambda: len(lines("refused client table full:")) >= 2, "the summary", 15)
        peak = max(peak, rss().rss)
        assert proc.poll() is None
        assert peak - idle < RSS_ABOVE_IDLE, f"RSS {peak / MIB:.1f} MiB, idle {idle / MIB:.1f}"

        refusals = lines("refused client table full:")
        assert 1 <= len(refusals) <= 4
        assert f"the table holds {MAX_CLIENTS} clients (--max-clients)" in refusals[0]
        summary = refusals[1]
        counted = re.search(r": (\d+) more in the last 10 s from (\d+) peer", summary)
        assert counted is not None, summary
        assert int(counted.group(2)) >= ATTACKERS - MAX_CLIENTS  # every refused client counted
        malformed = lines("dropped a datagram")
        assert 1 <= len(malformed) <= 6  # their own (rate-limited) kind, never mixed in
        assert not any("refused" in ln for ln in malformed)
    finally:
        for s in socks:
            s.close()
        proc.terminate()
        assert proc.wait(WAIT) == 0
