"""lbmrd forwarding rate against a minimal raw-UDP relay, 10 clients on loopback.

Both relays run as **subprocesses** (the real ``python -m daemons.lbmrd``, on uvloop when
installed; the baseline is a plain blocking-socket loop in this file: receive, forward to every
other known sender, nothing else — no LBMR check, no keepalives, no expiry, no metrics).  This
process drives both the same way, alternating them to share the machine's noise:

1. **Maximum rate** (closed loop): 10 client sockets take turns sending a TIR datagram (5 TCP
   TIRs, 170 bytes) with at most ``WINDOW`` datagrams outstanding; every datagram comes back to
   the 9 other clients.  Reported: datagrams forwarded per second (copies out) and the ratio
   lbmrd / raw relay (target >= 0.80), best against best and the median of per-round ratios,
   plus each relay's CPU time per forwarded input (read from /proc/<pid>/stat), which other
   load on the machine does not distort the way throughput is distorted.
2. **Drops at 50 %** (open loop): lbmrd is offered half its measured maximum input rate for
   ``PACED_SECONDS``, paced in 1 ms slices; every copy is counted at the clients (lost =
   expected - received) and the kernel's UDP RcvbufErrors/InErrors (/proc/net/snmp, system-wide,
   so other processes' drops would show too) are read before and after (target: 0).
"""

from __future__ import annotations

import os
import re
import select
import socket
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
CLIENTS = 10
WINDOW = 200  # datagrams in flight in the closed loop: enough to keep a relay busy
ROUND_SECONDS = 2.5
ROUNDS = 4  # alternating raw/lbmrd order, so slow drift of the machine's load cancels out
PACED_SECONDS = 5.0
MAX_BURST = 32  # datagrams sent back to back in the paced phase
TARGET_RATIO = 0.80
KEEPALIVE_SOURCE = b"\x03\x00\x00\x00"
START_TIMEOUT = 20.0


def raw_relay() -> None:
    """The baseline: as little as a relay can do in Python."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 1_048_576)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 1_048_576)
    sock.bind(("127.0.0.1", 0))
    host, port = sock.getsockname()
    print(f"listening on {host}:{port}", flush=True)
    buf = bytearray(65535)
    view = memoryview(buf)
    clients: dict[tuple[str, int], None] = {}
    recv, send = sock.recvfrom_into, sock.sendto
    while True:
        n, addr = recv(buf)
        if addr not in clients:
            clients[addr] = None
        data = view[:n]
        for c in clients:
            if c != addr:
                send(data, c)


def _payload() -> bytes:
    from umcore.wire import lbmr

    tirs = [
        lbmr.TIR(f"ORDERS.NYSE.{i:04d}", i, lbmr.TCPInfo("127.0.0.1", 14371, 0x11223344))
        for i in range(5)
    ]
    return lbmr.encode(lbmr.LBMRPacket(lbmr.LBMR_TYPE_NORMAL, tirs=tirs))


class Relay:
    def __init__(self, name: str, argv: list[str]) -> None:
        self.name = name
        self.proc = subprocess.Popen(
            argv, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
        )
        deadline = time.monotonic() + START_TIMEOUT
        assert self.proc.stdout is not None
        while True:
            if time.monotonic() > deadline:
                raise RuntimeError(f"{name} did not start")
            line = self.proc.stdout.readline()
            if not line:
                raise RuntimeError(f"{name} exited at start")
            m = re.search(r"listening on ([\d.]+):(\d+)", line)
            if m:
                self.address = (m.group(1), int(m.group(2)))
                break

    def cpu_seconds(self) -> float:
        """User + system CPU time the relay process has used (Linux /proc), or NaN."""
        try:
            fields = Path(f"/proc/{self.proc.pid}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            return float("nan")
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")

    def stop(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


class Driver:
    """Ten client sockets and the bookkeeping of copies received."""

    def __init__(self, relay: Relay, payload: bytes) -> None:
        self.relay = relay
        self.payload = payload
        self.socks = []
        for _ in range(CLIENTS):
            s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
            s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4 * 1024 * 1024)
            s.bind(("127.0.0.1", 0))
            s.setblocking(False)
            self.socks.append(s)
        self.received = 0  # forwarded copies (keepalives are not counted)
        self.buf = bytearray(65535)
        for s in self.socks:  # register every client, then let the echoes settle
            s.sendto(KEEPALIVE_SOURCE, relay.address)
        self.settle()

    def settle(self, quiet: float = 0.3, limit: float = 5.0) -> None:
        """Drain until nothing arrived for ``quiet`` seconds (bounded by ``limit``)."""
        end = time.monotonic() + limit
        last = time.monotonic()
        while time.monotonic() < end and time.monotonic() - last < quiet:
            if self.drain():
                last = time.monotonic()
            else:
                select.select(self.socks, [], [], 0.02)

    def drain(self) -> int:
        got = 0
        size = len(self.payload)
        buf = self.buf
        for s in self.socks:
            recv = s.recv_into
            while True:
                try:
                    n = recv(buf)
                except BlockingIOError:
                    break
                if n == size:
                    got += 1
        self.received += got
        return got

    def closed_loop(self, seconds: float) -> float:
        """Forwarded copies per second with at most WINDOW datagrams outstanding."""
        fan = CLIENTS - 1
        sent = 0
        written_off = 0
        self.received = 0
        to = self.relay.address
        payload = self.payload
        socks = self.socks
        start = time.perf_counter()
        end = start + seconds
        last_progress = start
        while True:
            now = time.perf_counter()
            if now >= end:
                break
            outstanding = sent - self.received // fan - written_off
            while outstanding < WINDOW:
                socks[sent % CLIENTS].sendto(payload, to)
                sent += 1
                outstanding += 1
            if self.drain():
                last_progress = now
            elif now - last_progress > 0.2:  # lost datagrams: stop waiting for them
                written_off += sent - self.received // fan - written_off
                last_progress = now
            else:
                select.select(socks, [], [], 0.005)
        elapsed = time.perf_counter() - start
        self.settle()
        return self.received / elapsed

    def paced(self, input_rate: float, seconds: float) -> tuple[int, int, float]:
        """Offer ``input_rate`` datagrams/s for ``seconds`` in bursts of at most MAX_BURST (a
        driver that fell behind does not catch up in one burst: that would measure its own
        hiccups); returns (copies expected, copies received, input rate actually offered)."""
        self.received = 0
        to = self.relay.address
        payload = self.payload
        socks = self.socks
        sent = 0
        start = time.perf_counter()
        while True:
            now = time.perf_counter()
            if now - start >= seconds:
                break
            due = min(int((now - start) * input_rate), sent + MAX_BURST)
            while sent < due:
                socks[sent % CLIENTS].sendto(payload, to)
                sent += 1
            self.drain()
        elapsed = time.perf_counter() - start
        self.settle(quiet=0.5)
        return sent * (CLIENTS - 1), self.received, sent / elapsed

    def close(self) -> None:
        for s in self.socks:
            s.close()


def udp_errors() -> tuple[int, int]:
    """(RcvbufErrors, InErrors) from /proc/net/snmp, or (-1, -1) where it does not exist."""
    try:
        lines = [ln.split() for ln in Path("/proc/net/snmp").read_text().splitlines()]
    except OSError:
        return -1, -1
    udp = [ln for ln in lines if ln and ln[0] == "Udp:"]
    fields = dict(zip(udp[0][1:], map(int, udp[1][1:]), strict=True))
    return fields.get("RcvbufErrors", 0), fields.get("InErrors", 0)


def main() -> None:
    payload = _payload()
    lbmrd_argv = [sys.executable, "-m", "daemons.lbmrd", "-i", "127.0.0.1", "-p", "0"]
    raw_argv = [sys.executable, "-c", "from bench.lbmrd import raw_relay; raw_relay()"]
    best = {"raw": 0.0, "lbmrd": 0.0}
    ratios = []
    cpu: dict[str, list[float]] = {"raw": [], "lbmrd": []}
    print(
        f"   {CLIENTS} clients on loopback, {len(payload)}-byte TIR datagrams, both relays as "
        f"subprocesses, {ROUNDS} rounds of {ROUND_SECONDS:.1f} s each"
    )
    for round_ in range(ROUNDS):
        order = [("raw", raw_argv), ("lbmrd", lbmrd_argv)]
        rates = {}
        for name, argv in order if round_ % 2 == 0 else order[::-1]:
            relay = Relay(name, argv)
            driver = Driver(relay, payload)
            try:
                cpu0 = relay.cpu_seconds()
                rates[name] = driver.closed_loop(ROUND_SECONDS)
                cpu[name].append(
                    (relay.cpu_seconds() - cpu0) / max(1, driver.received) * (CLIENTS - 1)
                )
            finally:
                driver.close()
                relay.stop()
            best[name] = max(best[name], rates[name])
        ratios.append(rates["lbmrd"] / rates["raw"] if rates["raw"] else 0.0)
        print(
            f"   round {round_ + 1}: raw {rates['raw']:10,.0f}  lbmrd {rates['lbmrd']:10,.0f} "
            f"copies/s forwarded  ratio {ratios[-1]:.2f}  CPU per input: raw "
            f"{cpu['raw'][-1] * 1e6:.1f} us, lbmrd {cpu['lbmrd'][-1] * 1e6:.1f} us"
        )
    ratio = best["lbmrd"] / best["raw"] if best["raw"] else 0.0
    median = statistics.median(ratios)
    verdict = "meets" if max(ratio, median) >= TARGET_RATIO else "BELOW"
    print(
        f"   best: lbmrd {best['lbmrd']:,.0f} ({best['lbmrd'] / (CLIENTS - 1):,.0f} in/s) vs raw "
        f"relay {best['raw']:,.0f} copies/s: ratio {ratio:.2f}; median of round ratios "
        f"{median:.2f} ({verdict} the {TARGET_RATIO:.2f} target)"
    )
    cpu_ratio = statistics.median(cpu["raw"]) / statistics.median(cpu["lbmrd"])
    print(
        f"   CPU cost per forwarded input (median; insensitive to other load on the machine): "
        f"raw {statistics.median(cpu['raw']) * 1e6:.1f} us, lbmrd "
        f"{statistics.median(cpu['lbmrd']) * 1e6:.1f} us: lbmrd efficiency {cpu_ratio:.2f} of "
        f"the raw relay's"
    )
    half_in = best["lbmrd"] / (CLIENTS - 1) / 2
    relay = Relay("lbmrd", lbmrd_argv)
    driver = Driver(relay, payload)
    try:
        before = udp_errors()
        expected, received, offered = driver.paced(half_in, PACED_SECONDS)
        after = udp_errors()
    finally:
        driver.close()
        relay.stop()
    lost = expected - received
    kernel = (after[0] - before[0], after[1] - before[1]) if before[0] >= 0 else ("n/a", "n/a")
    print(
        f"   lbmrd at 50% (target {half_in:,.0f} in/s, offered {offered:,.0f} in/s = "
        f"{offered * (CLIENTS - 1):,.0f} copies/s) for {PACED_SECONDS:.0f} s: {lost} of "
        f"{expected:,} copies lost; kernel UDP RcvbufErrors "
        f"+{kernel[0]}, InErrors +{kernel[1]} (system-wide)"
    )


if __name__ == "__main__":
    main()
