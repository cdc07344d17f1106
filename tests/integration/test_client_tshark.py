"""tshark decodes what our resolver and TCP transport cores emit, with topic names on the data.

The frames are the exact bytes the sans-IO cores produce (the asyncio layer writes them
unchanged), wrapped with umcore.wire.pcap: a unicast TIR sent to lbmrd, the receiver's
session-id confirmation, then batched, fragmented and TSNI traffic from the source's port.
"""

from __future__ import annotations

import pytest

from tests.oracle import Tshark
from umcore.resolver.core import ResolverConfig, TopicResolver
from umcore.transport.tcp import TcpReceiverSession, TcpSourceSession
from umcore.wire import lbmr
from umcore.wire.pcap import TcpFlow, udp_frame

SRC_IP = "127.0.0.1"
TCP_PORT = 14371  # inside lbttcp.source_port_low..high: tshark binds it to the TIR
UC_PORT = 14402  # resolver_unicast_port_low: tshark's LBMR unicast heuristic
LBMRD = ("127.0.0.1", 15380)
SID = 0x5EED1234


@pytest.mark.tshark
def test_tshark_shows_topic_names_on_our_tcp_data(tshark: Tshark) -> None:
    frames: list[bytes] = []
    res = TopicResolver(ResolverConfig(unicast_daemons=[LBMRD]), 0.0)
    src = TcpSourceSession(SID, batching_minimum_length=300, datagram_max_size=1500)
    topics = ["pyum.alpha", "pyum.beta"]
    tidx = {t: src.add_topic(t) for t in topics}
    for t in topics:
        res.add_source(t, tidx[t], lbmr.TCPInfo(SRC_IP, TCP_PORT, SID), 0.0)
    res.handle_timer(0.0)
    for data, dest in res.take_datagrams():
        assert dest == LBMRD
        frames.append(udp_frame(SRC_IP, UC_PORT, dest[0], dest[1], data))
    n_tr = len(frames)

    flow = TcpFlow(("127.0.0.1", 40001), (SRC_IP, TCP_PORT))
    hello = TcpReceiverSession(SID).connect_message()
    assert hello is not None
    frames.append(flow.segment(True, hello))
    chunks = []
    for i in range(40):
        out = src.send(tidx[topics[i % 2]], f"message {i}".encode() * 3, 0.0)
        if out:
            chunks.append(out)
    chunks.append(src.send(tidx["pyum.beta"], bytes(4000), 0.0, flush=True) or b"")  # fragmented
    chunks.append(src.handle_timer(5.0) or b"")  # TSNI for both topics
    for c in chunks:
        if c:
            frames.append(flow.segment(False, c))

    decoded = tshark.decode(frames)
    decoded.assert_clean()
    assert decoded.values("lbmr.tir.name") == topics
    assert {int(v, 0) for v in decoded.values("lbmr.tir.tcp.session_id")} == {SID}
    assert [int(v, 0) for v in decoded.values("lbmc.tcp_sid.sid")] == [SID]
    data_topics = []
    for i in range(n_tr + 1, len(frames)):
        data_topics += decoded.values("lbmc.topic", i)
    assert set(data_topics) == set(topics)
    # every data message carries its topic name: 40 small + the fragments of the big one
    assert len(data_topics) == len(decoded.values("lbmc.tidx")) >= 43
    assert decoded.values("lbmc.frag.first_sqn")
    assert decoded.values("lbmc.tsni.num_recs")
