"""tshark decodes the Spectrum channel and HF sequence number elements our sources send, on LBT-TCP
and LBT-RM: the APPHDR_CHAIN header (0x07) with a CHANNEL_NUMBER element (type 1) and an HF_SQN
element (type 2) carrying the values sent, no Malformed or Error item.

The frames are the bytes the transport cores emit for a message with those elements (what
:meth:`umcore.engine.features.ContextFeatures.source_send` hands them), wrapped with
umcore.wire.pcap; tshark 4.0.17 shows these two element types as generic elements (next,
length, reserved word, data), so the values are read from the element data.
"""

from __future__ import annotations

import pytest

from tests.oracle import Tshark
from umcore.features.hotfailover import hf_element
from umcore.features.properties import MessageProperties, encode_extras
from umcore.features.spectrum import channel_element
from umcore.transport.lbtrm import LbtrmSource
from umcore.transport.tcp import TcpReceiverSession, TcpSourceSession
from umcore.wire import lbmr
from umcore.wire.pcap import TcpFlow, udp_frame

pytestmark = pytest.mark.tshark

SRC_IP = "10.0.0.5"
TCP_PORT = 14371  # inside tshark's lbttcp.source_port_low..high
GROUP, DPORT, NAK_PORT = "224.10.10.10", 14400, 14390  # tshark's LBT-RM defaults
SID = 0x5A5A0002

# (channel, HF sequence number, HF bits, optional, with properties)
CASES = [
    (7, 1000, 32, False, False),
    (0xFFFFFFFF, (1 << 40) + 3, 64, True, False),
    (12, 1001, 32, False, True),
]


def _headers(channel: int, sqn: int, bits: int, optional: bool, props: bool) -> tuple:
    elems = [hf_element(sqn, bits, optional=optional), channel_element(channel)]
    headers, tail = encode_extras(MessageProperties({"k": 1}) if props else None, elems)
    return headers, tail


def _elements(d, frame: int) -> list[tuple[int, str]]:
    """(type, data hex) of the generic chain elements of ``frame``, the types read from the
    chain's first_chain_hdr and each element's next_hdr."""
    first = [int(v, 0) for v in d.values("lbmc.apphdr_chain.first_chain_hdr", frame)]
    nexts = [int(v, 0) for v in d.values("lbmc.apphdr_chain.element.next_hdr", frame)]
    datas = d.values("lbmc.apphdr_chain.element.data_raw", frame)[::5]  # (hex, off, len, ...)
    if first[0] == 6:  # a properties-length element leads (tshark decodes that one)
        first = [int(v, 0) for v in d.values("lbmc.apphdr_chain.msgprop.next_hdr", frame)]
    types = [first[0], *nexts[:-1]]
    return list(zip(types, [x.replace(":", "") for x in datas], strict=True))


def _expect(channel: int, sqn: int, bits: int) -> list[tuple[int, str]]:
    return [(2, f"{sqn:0{bits // 4}x}"), (1, f"{channel:08x}")]


def _check(d, data_frames: list[int]) -> None:
    d.assert_clean()
    assert len(data_frames) == len(CASES)
    for frame, (channel, sqn, bits, optional, props) in zip(data_frames, CASES, strict=True):
        assert _elements(d, frame) == _expect(channel, sqn, bits), frame
        res = [int(v, 0) for v in d.values("lbmc.apphdr_chain.element.res", frame)]
        assert res[0] == (1 if optional else 0)  # the HF element's OPTIONAL bit
        if props:
            assert d.values("lbmc.lbm_msg_properties.data.num_fields", frame) == ["1"]


def test_channel_and_hf_elements_on_tcp(tshark: Tshark) -> None:
    src = TcpSourceSession(SID, batching_minimum_length=1, datagram_max_size=1500)
    tidx = src.add_topic("hf.spectrum.tcp")
    flow = TcpFlow(("10.0.0.6", 40001), (SRC_IP, TCP_PORT))
    hello = TcpReceiverSession(SID).connect_message()
    assert hello is not None
    frames = [flow.segment(True, hello)]
    for i, case in enumerate(CASES):
        headers, tail = _headers(*case)
        _sqn, out = src.send_with_headers(tidx, headers, b"payload %d" % i + tail, 0.0, True)
        frames.append(flow.segment(False, out))
    d = tshark.decode(frames, raw=True)
    _check(d, [1, 2, 3])
    assert all("lbttcp" in d.protocols(i) for i in (1, 2, 3))


def test_channel_and_hf_elements_on_lbtrm(tshark: Tshark) -> None:
    src = LbtrmSource(SID, NAK_PORT, None, None, 0.0)
    tidx = src.add_topic("hf.spectrum.rm")
    tir = lbmr.LBMRPacket(
        lbmr.LBMR_TYPE_NORMAL,
        tirs=[
            lbmr.TIR("hf.spectrum.rm", tidx, lbmr.LBTRMInfo(SRC_IP, GROUP, SID, DPORT, NAK_PORT))
        ],
    )
    frames = [udp_frame(SRC_IP, 12965, "224.9.10.11", 12965, lbmr.encode(tir))]
    for i, case in enumerate(CASES):
        headers, tail = _headers(*case)
        _sqn, out = src.send_with_headers(tidx, headers, b"payload %d" % i + tail, 0.0, True)
        src.emit_lbmc(out)  # what the LBT source endpoint's write does with it
        for dgram in src.ready:
            frames.append(udp_frame(SRC_IP, NAK_PORT, GROUP, DPORT, bytes(dgram)))
        src.ready.clear()
        src.outbox.clear()
    d = tshark.decode(frames, raw=True)
    assert len(d) == 1 + len(CASES)
    _check(d, [1, 2, 3])
    assert d.values("lbmc.topic", 1) == ["hf.spectrum.rm"]
