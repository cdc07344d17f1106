"""tshark decodes what the LBT-RU / LBT-RM cores put on the wire in a lossy in-memory run.

The capture is taken at the senders (every datagram the cores emit, dropped ones included, in
emission order) of a :mod:`tests.transport.lbtsim` run with 20 % loss each way, preceded by the
source's TIR (encoded with :mod:`umcore.wire.lbmr`) so tshark ties the data to its topic.  It
must hold DATA, session messages, NAKs, NCFs and retransmissions (LBT-RU also CREQ and ACK),
decode with no Malformed or Error item (NAK / NCF "Sequence" warnings are by design), and show
``lbmc.topic`` on the data.
"""

from __future__ import annotations

import random
import struct
from typing import Any

import pytest

from tests.oracle import Tshark
from tests.transport.lbtsim import Net, connect_ru
from umcore.transport.lbt import LbtReceiver, LbtSource, ReceiverConfig
from umcore.transport.lbtrm import LbtrmReceiver, LbtrmSource
from umcore.transport.lbtru import LbtruReceiver, LbtruSource, RuReceiverConfig
from umcore.wire import lbmr
from umcore.wire.pcap import udp_frame

pytestmark = pytest.mark.tshark

SRC_IP = "10.0.0.5"
SRC_RU_PORT = 14380  # lbtru.source_port_low (tshark's default LBT-RU source range)
GROUP, DPORT, NAK_PORT = "224.10.10.10", 14400, 14390  # tshark's LBT-RM defaults
SID = 0x5A5A0001
TOPIC = "capture.topic"
# Expert items raised by design: a NAK (and the NCF answering it) is flagged "Sequence" Warn.
ALLOWED_WARN = ["lbtru.analysis.nak", "lbtru.analysis.ncf", "lbtrm.analysis.nak",
                "lbtrm.analysis.ncf"]  # fmt: skip


class CapturingNet(Net):
    """lbtsim's network, recording every datagram as an Ethernet frame when it is sent."""

    def __init__(self, *a: Any, ru: bool, **kw: Any) -> None:
        super().__init__(*a, **kw)
        self.ru = ru
        self.frames: list[bytes] = []

    def _push(self, target: Any, data: bytes, frm: Any, direction: str) -> None:
        if direction == "down":
            if self.ru:
                dst = self.addr[id(target)]
                frame = udp_frame(SRC_IP, SRC_RU_PORT, dst[0], dst[1], data)
            else:
                frame = udp_frame(SRC_IP, NAK_PORT, GROUP, DPORT, data)
        else:
            ip, port = frm
            dport = SRC_RU_PORT if self.ru else NAK_PORT
            frame = udp_frame(ip, port, SRC_IP, dport, data)
        # One frame per datagram on the wire (an RM multicast is one frame for every receiver).
        if self.ru or direction == "up" or target is self.receivers[0]:
            self.frames.append(frame)
        super()._push(target, data, frm, direction)


def _tir(kind: str) -> bytes:
    info: Any = (
        lbmr.LBTRUInfo(SRC_IP, SRC_RU_PORT, SID)
        if kind == "lbtru"
        else lbmr.LBTRMInfo(SRC_IP, GROUP, SID, DPORT, NAK_PORT)
    )
    pkt = lbmr.LBMRPacket(lbmr.LBMR_TYPE_NORMAL, tirs=[lbmr.TIR(TOPIC, 0, info)])
    return udp_frame(SRC_IP, 12965, "224.9.10.11", 12965, lbmr.encode(pkt))


def _run(kind: str) -> tuple[list[bytes], LbtSource, LbtReceiver]:
    src: LbtSource
    rcv: LbtReceiver
    if kind == "lbtru":
        src = LbtruSource(SID, None, None, 0.0)
        rcv = LbtruReceiver(SID, RuReceiverConfig(), 0.0, random.Random(4))
    else:
        src = LbtrmSource(SID, NAK_PORT, None, None, 0.0)
        rcv = LbtrmReceiver(SID, NAK_PORT, ReceiverConfig(), 0.0, random.Random(4))
    rng = random.Random(9)
    # Let the connection handshake through; then 20 % of everything is lost.
    net = CapturingNet(src, [rcv], drop=lambda d, b, t: t > 0.06 and rng.random() < 0.2,
                       seed=2, fifo=True, ru=kind == "lbtru")  # fmt: skip
    if kind == "lbtru":
        connect_ru(net)
    tidx = src.add_topic(TOPIC)
    net.subscribe(tidx, TOPIC)
    t0 = net.now + 0.01

    def send(i: int) -> Any:
        return lambda t: src.send(tidx, struct.pack("!I", i) + bytes(28), t, True)

    net.step_until(t0 + 3.0, [(t0 + 0.002 * i, send(i)) for i in range(150)])
    return net.frames, src, rcv


@pytest.mark.parametrize("kind", ["lbtru", "lbtrm"])
def test_lossy_session_capture_decodes_cleanly(tshark: Tshark, kind: str) -> None:
    frames, src, rcv = _run(kind)
    assert src.lstats.rxs_sent > 0 and src.lstats.ncfs_sent > 0 and rcv.stats.naks_sent > 0
    decoded = tshark.decode([_tir(kind), *frames])
    decoded.assert_clean(allow_warn=ALLOWED_WARN)
    assert "lbmr" in decoded.protocols(0)
    types = [int(decoded.value(f"{kind}.hdr.type", i), 0) for i in range(1, len(decoded))]
    # DATA 0, SM 2, NAK 3, NCF 4 (LBT-RU also ACK 5, CREQ 6).
    expected = {0, 2, 3, 4} | ({5, 6} if kind == "lbtru" else set())
    assert expected <= set(types), sorted(set(types))
    data = [i + 1 for i, t in enumerate(types) if t == 0]
    assert len(data) >= 150
    for i in data:
        assert decoded.values("lbmc.topic", i) == [TOPIC], i
    rx_field = "lbtru.hdr.flags.rx" if kind == "lbtru" else "lbtrm.data.flags_fec_type.rx"
    assert sum(1 for i in data if decoded.values(rx_field, i) == ["1"]) == src.lstats.rxs_sent
