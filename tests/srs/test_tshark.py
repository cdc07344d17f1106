"""tshark decodes a session recorded between our client cores and our SRS core."""

from __future__ import annotations

import pytest

from tests.oracle import Tshark
from tests.srs.harness import sir
from umcore.srs.client import SRSClient
from umcore.srs.server import ServerConfig, SRSServer
from umcore.wire.pcap import TcpFlow

SERVER = ("10.0.0.1", 27000)
DECODE_AS = [f"tcp.port=={SERVER[1]},lbmsrs"]


def record_session() -> list[bytes]:
    """Two contexts (A: sources, B: receiver) and one SRS; every write becomes a segment."""
    server = SRSServer(ServerConfig(source_leave_backoff_ms=100))  # local domain id 0 (trap 12)
    clients = [
        SRSClient([SERVER], client_addr="10.0.0.2", client_port=14001, session_id=0xA),
        SRSClient([SERVER], client_addr="10.0.0.3", client_port=14002, session_id=0xB),
    ]
    flows = [TcpFlow(("10.0.0.2", 40001), SERVER), TcpFlow(("10.0.0.3", 40002), SERVER)]
    frames: list[bytes] = []
    now = 0.0

    def pump() -> None:
        nonlocal now
        for _ in range(50):
            moved = False
            for i, c in enumerate(clients):
                for slot, _addr in c.take_connects():
                    server.receive_connected(i, flows[i].client, now)
                    c.receive_connected(slot, now)
                for _slot, data in c.take_writes():
                    moved = True
                    frames.append(flows[i].segment(True, data))
                    server.receive_data(i, data, now)
                c.take_events()
            for cid, data in server.take_writes():
                moved = True
                frames.append(flows[cid].segment(False, data))
                clients[cid].receive_data(0, data, now)
            if not moved:
                due = server.service_deadline  # the SRS sends at its queue service interval
                if due is None:
                    return
                now = max(now, due)
                server.handle_timer(now)

    pump()
    a, b = clients
    b.send_receiver("orders.nyse")
    b.send_wildcard("^fx\\.")
    pump()
    for n, topic in enumerate(("orders.nyse", "fx.eurusd", "other"), 1):
        a.send_source(sir(topic, n))
    pump()
    rec = sir("orders.nyse", 1)
    a.send_source_delete(rec.otid, rec.topic)
    pump()
    now = 1.0
    server.handle_timer(now)  # the SER after the back-off (sent at the next queue service)
    for c in clients:
        c.handle_timer(now + 10)  # keepalives
    pump()
    return frames


@pytest.mark.tshark
def test_recorded_session_decodes_clean(tshark: Tshark) -> None:
    frames = record_session()
    decoded = tshark.decode(frames, decode_as=DECODE_AS)
    decoded.assert_clean()
    for i in range(len(frames)):
        assert "lbmsrs" in decoded.protocols(i), (i, decoded.protocols(i))
    topics = decoded.values("lbmsrs.sir.topic")
    # A's three SIRs, B's two (interest + wildcard), and the SER for orders.nyse
    assert sorted(t.rstrip("\x00") for t in topics) == sorted(
        ["orders.nyse", "fx.eurusd", "other", "orders.nyse", "fx.eurusd", "orders.nyse"]
    )
    assert "-1" in decoded.values("lbmsrs.sir.cost")
    assert decoded.values("lbmsrs.rir.topic") == ["orders.nyse"]
    assert decoded.values("lbmsrs.wir.pattern") == ["^fx\\."]
    assert decoded.values("lbmsrs.sdr.topic") == ["orders.nyse"]
    assert len(decoded.values("lbmsrs.registration_response.client_id")) == 2
