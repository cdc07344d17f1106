"""A live capture of encrypted and compressed pairs, read by tshark (the independent oracle).

Four source/receiver pairs run one after the other on loopback while dumpcap captures: plain,
LZ4, TLS, TLS + LZ4.  Each sends the same compressible, market-data-like messages carrying a
marker of its own, then a request answered by a response (data connection one way, UIM
connection the other).  What tshark must find:

- plain (the control): LBMC frames on the data port, its marker in clear in the capture;
- TLS and TLS + LZ4: on the data port and both request ports every segment with payload is TLS,
  the handshake chose TLS 1.2 and UM's default suite, application data travels in TLS 1.2
  records, no LBMC frame decodes there, and the marker is nowhere in the capture;
- compression: the LZ4 pair's data connection carries fewer bytes than the plain pair's, and
  the TLS + LZ4 pair's fewer than the TLS pair's.
"""

from __future__ import annotations

import asyncio
import functools
import os
import shutil
import signal
import time
from pathlib import Path

import pytest

from tests.integration.helpers import WAIT, until
from tests.integration.test_persist import captured_so_far
from tests.oracle import Tshark
from tests.tls.test_tls import config, mode_options  # noqa: F401 - the fixture, used below
from umcore.api import Context, Message
from umcore.api import message as m
from umcore.config.attributes import Configuration
from umcore.tools.certs import CertFiles

N = 300


def quote(i: int, marker: bytes) -> bytes:
    """A market-data-like message: repetitive fields, a few changing digits, the marker."""
    return (
        b"%s|sym=EUR/USD|bid=1.0834%d|ask=1.0836%d|bsz=1000000|asz=2000000|venue=EBS|"
        b"cond=REGULAR|seq=%08d|" % (marker, i % 10, (i + 3) % 10, i)
    ) * 4


async def run_pair(mode: str, certs: CertFiles, marker: bytes) -> dict[str, int]:
    """One pair: N messages and a request/response; returns its ports."""
    opts = mode_options(mode, certs)
    got: list[bytes] = []

    def on_msg(msg: Message) -> None:
        if msg.type == m.MSG_DATA:
            got.append(bytes(msg.data))
        elif msg.type == m.MSG_REQUEST:
            msg.respond(marker + b" response")

    async with await Context.create(opts) as a, await Context.create(opts) as b:
        rcv = await b.create_receiver(f"cap.{mode}", on_msg)
        src = await a.create_source(f"cap.{mode}")
        await until(lambda: src.receivers == 1, f"{mode}: receiver connected")
        for i in range(N):
            await src.send(quote(i, marker), flush=True)
        await until(lambda: len(got) == N, f"{mode}: {N} messages")
        assert got == [quote(i, marker) for i in range(N)]
        responses: list[Message] = []
        req = await src.send_request(marker + b" request", responses.append)
        await until(lambda: len(responses) == 1, f"{mode}: the response")
        req.close()
        ports = {
            "data": int(src.transport_info.port),
            "request_a": a.features.require_port().port,
            "request_b": b.features.require_port().port,
        }
        await rcv.close()
        await src.close()
    return ports


@pytest.mark.slow
@pytest.mark.tshark
async def test_capture_tls_records_only_and_compression_saves_bytes(
    config: Configuration,  # noqa: F811 - the fixture imported above
    certs: CertFiles,
    tshark: Tshark,
    tmp_path: Path,
) -> None:
    dumpcap = shutil.which("dumpcap")
    if dumpcap is None or os.geteuid() != 0:
        pytest.skip("a live capture needs dumpcap and root")
    pcap = tmp_path / "tls.pcapng"
    errlog = tmp_path / "dumpcap.err"
    markers = {mode: f"PYUM-MARK-{mode}-{os.urandom(4).hex()}".encode() for mode in
               ("plain", "lz4", "tls", "tls+lz4")}  # fmt: skip
    ports: dict[str, dict[str, int]] = {}
    windows: dict[str, tuple[float, float]] = {}
    with errlog.open("wb") as err:
        cap = await asyncio.create_subprocess_exec(
            dumpcap, "-q", "-i", "lo", "-f", "tcp or udp port 9", "-w", str(pcap),
            stdout=asyncio.subprocess.DEVNULL, stderr=err,
        )  # fmt: skip
    try:
        await until(lambda: b"Capturing on" in errlog.read_bytes(), "dumpcap", timeout=WAIT)
        await captured_so_far(pcap)
        for mode, marker in markers.items():
            start = time.time()
            ports[mode] = await run_pair("" if mode == "plain" else mode, certs, marker)
            windows[mode] = (start, time.time())
        await captured_so_far(pcap)
    finally:
        if cap.returncode is None:
            cap.send_signal(signal.SIGINT)
            await asyncio.wait_for(cap.wait(), WAIT)
    raw = pcap.read_bytes()

    @functools.cache
    def ours(mode: str, port: int) -> str:
        """A display filter for the pair's connections to ``port``: the TCP streams whose SYN
        went to it while the pair ran (other programs on this machine use ports too, and an
        ephemeral port can come back)."""
        t0, t1 = windows[mode]
        syns = tshark.decode_file(
            pcap,
            display_filter=f"tcp.dstport=={port} && tcp.flags.syn==1 && tcp.flags.ack==0 && "
            f"frame.time_epoch >= {t0 - 0.5:.6f} && frame.time_epoch <= {t1 + 0.5:.6f}",
        )
        streams = sorted(set(syns.values("tcp.stream")), key=int)
        assert streams, f"{mode}: no connection to port {port} captured"
        return f"tcp.stream in {{{' '.join(streams)}}}"

    def data_bytes(mode: str) -> int:
        where = ours(mode, ports[mode]["data"])
        d = tshark.decode_file(pcap, display_filter=f"{where} && tcp.len>0")
        return sum(int(v) for v in d.values("tcp.len"))

    # the control: the plain pair is LBMC in clear
    plain = tshark.decode_file(
        pcap,
        decode_as=[f"tcp.port=={ports['plain']['data']},lbttcp"],
        display_filter=f"{ours('plain', ports['plain']['data'])} && lbmc",
    )
    assert len(plain) > 0
    assert markers["plain"] in raw

    for mode in ("tls", "tls+lz4"):
        assert markers[mode] not in raw, f"{mode}: payload bytes in clear"
        for name, port in ports[mode].items():
            seen = tshark.decode_file(
                pcap,
                decode_as=[f"tcp.port=={port},tls"],
                # a retransmitted segment repeats bytes already shown as TLS: tshark does not
                # dissect it again
                display_filter=f"{ours(mode, port)} && tcp.len>0 && !tcp.analysis.retransmission",
            )
            assert len(seen) > 0, f"{mode} {name}: nothing captured"
            for i in range(len(seen)):
                # a TLS record longer than a segment: tshark shows TLS on its last segment and
                # names it on the others (tcp.reassembled_in)
                is_tls = "tls" in seen.protocols(i) or seen.values("tcp.reassembled_in", i)
                assert is_tls, f"{mode} {name}: frame {i} is not TLS: {seen.protocols(i)}"
            versions = set(seen.values("tls.handshake.version"))
            assert "0x0303" in versions, f"{mode} {name}: handshake versions {versions}"
            suites = set(seen.values("tls.handshake.ciphersuite"))
            assert "0x009f" in suites, suites  # DHE-RSA-AES256-GCM-SHA384, UM's default
            app = [
                v
                for i in range(len(seen))
                if "23" in seen.values("tls.record.content_type", i)
                for v in seen.values("tls.record.version", i)
            ]
            assert app and set(app) == {"0x0303"}, f"{mode} {name}: record versions {set(app)}"
            lbmc = tshark.decode_file(
                pcap,
                decode_as=[f"tcp.port=={port},lbttcp"],
                display_filter=f"{ours(mode, port)} && lbmc",
            )
            assert len(lbmc) == 0, f"{mode} {name}: LBMC decoded on an encrypted connection"
            print(mode, name, len(seen), "TLS segments, record versions", set(app))

    sizes = {mode: data_bytes(mode) for mode in markers}
    print("bytes on the data connection:", sizes)  # the figures, in the test's output
    assert sizes["lz4"] < 0.7 * sizes["plain"]
    assert sizes["tls+lz4"] < 0.7 * sizes["tls"]
