"""tshark decodes the request-port traffic our feature cores produce: LJI request, LJ info,
retransmission requests and retransmissions (late join / OTR), a request (on the transport and
as a UIM), a response, UIMs and a MIM datagram, with message properties."""

from __future__ import annotations

import pytest

from tests.oracle import Tshark
from umcore.features import immediate as im
from umcore.features.latejoin import LateJoinService, encode_lji_req, encode_rxreqs
from umcore.features.properties import MessageProperties, encode_extras
from umcore.features.retention import RetentionBuffer
from umcore.wire import lbmc
from umcore.wire.pcap import TcpFlow, udp_frame

SRC = ("10.0.0.1", 14391)  # the source context's request port
RCV = ("10.0.0.2", 14392)  # the receiver context's request port
CTX = b"ctxinst1"


def _service() -> LateJoinService:
    rb = RetentionBuffer(size_threshold=10**6)
    headers, tail = encode_extras(MessageProperties({"My Prop 1": 7}))
    for s in range(5):
        extra = tuple(headers) if s == 3 else ()
        rb.add(s, f"msg{s}".encode() + (tail if s == 3 else b""), 0.0, extra)
    svc = LateJoinService(*SRC)
    svc.add(2, 0, "lj.topic", rb, lambda: 5)
    return svc


@pytest.mark.tshark
def test_late_join_and_otr_exchange_decodes_clean(tshark: Tshark) -> None:
    svc = _service()
    to_src = TcpFlow((RCV[0], 40001), SRC)  # receiver -> source request port
    to_rcv = TcpFlow((SRC[0], 40002), RCV)  # source -> receiver request port
    lji = encode_lji_req(9, 2, 0, RCV, rx_req_max=0, rx_req_outstanding_max=10)
    replies = svc.handle(lbmc.decode(lji))
    rxreqs = encode_rxreqs(9, 2, 0, [0, 1, 2, 3, 4], RCV)
    retrans = [data for raw in rxreqs for _, data in svc.handle(lbmc.decode(raw))]
    frames = [to_src.segment(True, lji)]
    frames += [to_rcv.segment(True, data) for _, data in replies]
    frames += [to_src.segment(True, raw) for raw in rxreqs]
    frames += [to_rcv.segment(True, data) for data in retrans]
    d = tshark.decode(frames, decode_as=["tcp.port==14391,lbttcp", "tcp.port==14392,lbttcp"])
    d.assert_clean()
    assert d.value("lbmc.lji_req.request_idx", 0) == "9"
    assert d.value("lbmc.lji_req.req_port", 0) == "14392"
    assert d.value("lbmc.lji_req.req_ip", 0) == "10.0.0.2"
    assert d.value("lbmc.ume_lj_info.low_seqnum", 1) == "0"
    assert d.value("lbmc.ume_lj_info.high_seqnum", 1) == "4"
    assert d.values("lbmc.ume_rxreq.seqnum", 2) == [str(k) for k in range(5)]
    types = [d.values("lbmc.type", i) for i in range(3, 3 + len(retrans))]
    assert all(t == ["10"] for t in types), types
    assert d.values("lbmc.lbm_msg_properties.data.num_fields") == ["1"]


@pytest.mark.tshark
def test_request_response_uim_mim_decode_clean(tshark: Tshark) -> None:
    props = MessageProperties({"k": "v", "n": 3})
    extra, tail = encode_extras(props, [(1, b"ah")])
    uim = im.encode_uim(b"hello" + tail, topic="uim.topic", ctxinst=CTX, stream_id=1, sqn=0,
                        extra=extra)  # fmt: skip
    bare = im.encode_uim(b"bare", topic=None, ctxinst=CTX, stream_id=1, sqn=1)
    req = im.encode_uim(b"req", topic="req.topic", ctxinst=CTX, stream_id=1, sqn=2,
                        request=(5, RCV[0], RCV[1]))  # fmt: skip
    resp = im.encode_response(5, b"answer", ctxinst=b"ctxinst2", stream_id=3, sqn=0)
    tcp_req = lbmc.encode(lbmc.LBMCMessage(lbmc.MSG_DATA, 0, 7, [
        lbmc.Request(0, 0, 6, RCV[1], 0, lbmc.ip4_from_str(RCV[0]))], b"q"))  # fmt: skip
    mim = im.MimSender(0x55).datagram("mim.topic", b"m", 0.0, new_session_id=1)
    a = TcpFlow((RCV[0], 40003), SRC)
    b = TcpFlow((SRC[0], 40004), RCV)
    t = TcpFlow((RCV[0], 40005), ("10.0.0.1", 14371))  # a request on an LBT-TCP transport
    frames = [
        a.segment(True, uim + bare),
        a.segment(True, req),
        b.segment(True, resp),
        t.segment(False, tcp_req),
        udp_frame(SRC[0], 14390, "224.10.10.21", 14401, mim),
    ]
    d = tshark.decode(
        frames, decode_as=["tcp.port==14391,lbttcp", "tcp.port==14392,lbttcp",
                           "tcp.port==14371,lbttcp", "udp.port==14401,lbtrm"],
    )  # fmt: skip
    d.assert_clean()
    assert d.values("lbmc.topicname.topic", 0)[0].startswith("uim.topic")
    assert d.value("lbmc.lbm_msg_properties.data.num_fields", 0) == "2"
    assert d.value("lbmc.tcp_request.qidx", 1) == "5"
    assert d.value("lbmc.tcp_request.port", 1) == "14392"
    assert d.value("lbmc.apphdr.code", 2) == str(im.RESPONSE_APPHDR_CODE)
    assert d.value("lbmc.tcp_request.qidx", 3) == "6"
    assert "lbtrm" in d.protocols(4)
    assert d.value("lbmc.topicname.topic", 4).startswith("mim.topic")
