"""tshark decodes a live peer link between two ``tnwgd`` processes as LBT-TCP.

dumpcap records the loopback (the peer link's port, and UDP port 9 for the catch-up token of
:func:`tests.integration.test_persist.captured_so_far`) while DRO1 and DRO2 link up, carry a
receiver's interest, a source advertisement and 200 messages, and exchange keepalives.  Decoded
with ``-d tcp.port==N,lbttcp`` (our link is back-to-back LBMC messages, LBT-TCP framing:
:mod:`umcore.dro.inferred`), the capture has no Malformed or Error item, names the DRO headers
(TNWG capabilities, route information, interest, advertisement, keepalive), and carries every
message's LBMC data header.
"""

from __future__ import annotations

import asyncio
import os
import shutil
import signal
import struct
from pathlib import Path

import pytest

from tests.dro.test_peer_tshark import keys
from tests.dro_peer.kit import LINK_UP, PeerSpec, free_tcp_port, peer_dro_xml, start_dro
from tests.dro_proc.kit import Recorder, Trd
from tests.integration.helpers import until
from tests.integration.test_persist import captured_so_far
from tests.oracle import Tshark
from umcore.api import Context

WAIT = 20.0
COUNT = 200
_SEQ = struct.Struct("!I")


@pytest.mark.tshark
async def test_tshark_decodes_a_live_peer_link(tshark: Tshark, tmp_path: Path) -> None:
    dumpcap = shutil.which("dumpcap")
    if dumpcap is None or os.geteuid() != 0:
        pytest.skip("a live capture needs dumpcap and root")
    trd1, trd2 = Trd(), Trd()
    port = free_tcp_port()
    pcap = tmp_path / "peer.pcapng"
    errlog = tmp_path / "dumpcap.err"
    with errlog.open("wb") as err:  # a file, not a pipe nobody reads while capturing
        cap = await asyncio.create_subprocess_exec(
            dumpcap, "-q", "-i", "lo", "-f", f"tcp port {port} or udp port 9", "-w", str(pcap),
            stdout=asyncio.subprocess.DEVNULL, stderr=err,
        )  # fmt: skip
    dros = []
    rec = Recorder()
    try:
        await until(lambda: b"Capturing on" in errlog.read_bytes(), "dumpcap", timeout=WAIT)
        await captured_so_far(pcap)
        xml1 = peer_dro_xml("dro1", [("TRD1", 1, trd1)], [PeerSpec("PEER", "acceptor", port)])
        xml2 = peer_dro_xml("dro2", [("TRD2", 2, trd2)], [PeerSpec("PEER", "initiator", port)])
        dros = list(
            await asyncio.gather(
                start_dro(tmp_path, "dro1", xml1), start_dro(tmp_path, "dro2", xml2)
            )
        )
        await dros[0].wait_for_line(LINK_UP, WAIT)
        async with (
            await Context.create(trd1.context()) as a,
            await Context.create(trd2.context()) as b,
        ):
            rcv = await b.create_receiver("peer.wire", rec, attributes=trd2.receiver())
            src = await a.create_source("peer.wire", attributes=trd1.source("tcp"))
            async with asyncio.timeout(WAIT):
                while not rec.sqns:
                    await src.send(b"probe", flush=True)
                    await asyncio.sleep(0.05)
            first = len(rec.sqns)
            for i in range(COUNT):
                await src.send(_SEQ.pack(i) + bytes(12), flush=i % 50 == 49)
            src.flush()
            await until(lambda: len(rec.sqns) >= first + COUNT, "the messages", timeout=WAIT)
            await rcv.close()
            await src.close()
        await captured_so_far(pcap)
    finally:
        for d in reversed(dros):
            await d.stop()
        if cap.returncode is None:
            cap.send_signal(signal.SIGINT)
            await asyncio.wait_for(cap.wait(), WAIT)
    decoded = tshark.decode_file(
        pcap, decode_as=[f"tcp.port=={port},lbttcp"], display_filter="lbmc"
    )
    assert len(decoded) > 0
    decoded.assert_clean()
    names = {
        "lbmc.tnwg_capabilities",
        "lbmc.route_info",
        "lbmc.gateway_name",
        "lbmc.topic_interest",
        "lbmc.advertisement",
        "lbmc.otid",
        "lbmc.tnwg_ka",
    }
    seen = names & set(keys(decoded.layers))
    assert seen == names, names - seen
    # every message crossed the link as an LBMC data message (probes and the COUNT)
    assert len(decoded.values("lbmc.sqn")) >= COUNT + 1
