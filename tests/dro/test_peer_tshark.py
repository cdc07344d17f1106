"""tshark decodes a peer link as LBT-TCP (``-d tcp.port==N,lbttcp``): our oracle for the framing.

The link's bytes come from two :class:`~umcore.dro.peer.PeerLink` objects joined in memory (the
sans-IO session of :mod:`tests.dro.test_peer`): hello, route information, interest, a source
advertisement, its data binding, data frames, a keepalive query and answer, a source gone.  Each
direction's writes become TCP segments of one flow; tshark must find every LBMC message, name
the DRO headers, and report no Malformed or Error item.
"""

from __future__ import annotations

from collections.abc import Iterator

from tests.dro.test_peer import S1, S2, pair
from tests.oracle import Tshark
from umcore.dro import Adjacency, InterestKey, RouteInfo
from umcore.wire.pcap import TcpFlow

PORT = 24500


def keys(node: object) -> Iterator[str]:
    """Every field and subtree name in tshark's JSON tree."""
    if isinstance(node, dict):
        for key, value in node.items():
            yield key
            yield from keys(value)
    elif isinstance(node, list):
        for item in node:
            yield from keys(item)


def test_tshark_decodes_a_peer_link_session(tshark: Tshark) -> None:
    a, b = pair()
    flow = TcpFlow(("127.0.0.1", 40000), ("127.0.0.1", PORT))
    frames: list[bytes] = []

    def carry(now: float) -> None:
        while True:
            moved = False
            for src, dst, from_client in ((a, b, True), (b, a, False)):
                chunk = b"".join(src.take_bytes())
                if chunk:
                    moved = True
                    frames.append(flow.segment(from_client, chunk))
                    dst.receive_data(chunk, now)
            if not moved:
                return

    a.receive_connected(0.0)
    b.receive_connected(0.0)
    carry(0.0)
    assert a.up and b.up
    a.send_route_info(
        RouteInfo(1, "dro-a", 3, 0, (Adjacency((0, 7), 1), Adjacency((1, 2), 4))), 0.1
    )
    b.send_interest(InterestKey("AAA"), 9, 0.1)
    b.send_interest(InterestKey("^B.*", 1), 9, 0.1, refresh=True)
    a.send_source(S1, 3, 1, 7, 0.1)
    for sqn in range(5):
        a.send_data(S1, 100 + sqn, b"payload %d" % sqn, 0.1)
        a.send_data(S2, sqn, b"other", 0.1)
    carry(0.1)
    a.handle_timer(1.1)  # keepalive query (idle for an interval) ...
    carry(1.1)  # ... and b's answer
    a.send_source_gone(S1, 1.2)
    carry(1.2)
    assert a.stats.rtt_samples == 1
    decoded = tshark.decode(frames, decode_as=[f"tcp.port=={PORT},lbttcp"])
    decoded.assert_clean()
    names = {
        "lbmc.tnwg_capabilities",
        "lbmc.route_info",
        "lbmc.route_info_neighbor",
        "lbmc.gateway_name",
        "lbmc.topic_interest",
        "lbmc.pattern_interest",
        "lbmc.advertisement",
        "lbmc.otid",
        "lbmc.topic_idx",
        "lbmc.tnwg_ka",
    }
    seen = set(names) & set(keys(decoded.layers))
    assert seen == names, names - seen
    # every data frame was decoded as an LBMC data message with its originating sqn
    assert sorted(int(v) for v in decoded.values("lbmc.sqn")) == sorted(
        [*range(100, 105), *range(5)]
    )
