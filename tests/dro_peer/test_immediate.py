"""UIMs, a request/response and MIMs across TRD1 - DRO1 ~peer~ DRO2 - TRD2 (tnwgd processes).

Each TRD has a MIM group of its own, so what reaches TRD2 came through both DROs and their
link.  From TRD1: UIMs addressed ``TCP:2:ip:port`` to a context in TRD2, a UIM request that
context answers, MIMs of a topic a TRD2 receiver has (DRO1 learns the interest over the link)
and a MIM request the receiver answers; all arrive, both responses come back to the requester
in TRD1 (the REQUEST headers rewritten at each DRO).  The DROs' Prometheus metrics (the same
figures as DROMonMsg) rise by exactly what was sent, in messages and payload bytes: the peer
portals' unicast and immediate fields, the endpoint portals' sends.
"""

from __future__ import annotations

import asyncio
import gc
import urllib.request
from pathlib import Path

from prometheus_client.parser import text_string_to_metric_families

from tests.dro_peer.kit import LINK_UP, PeerSpec, free_tcp_port, peer_dro_xml, start_dro
from tests.dro_proc.test_mim import MimTrd
from tests.integration.daemon_proc import DaemonProcess
from tests.integration.helpers import until
from umcore.api import Context, Message

TOPIC = "peer.mim.topic"
K = 3  # UIMs TRD1 -> TRD2
N = 4  # MIMs of TOPIC
SIZE = 6  # every payload below is 6 bytes


def _fetch(url: str) -> str:
    with urllib.request.urlopen(url, timeout=10) as r:
        return str(r.read().decode())


async def figures(dro: DaemonProcess) -> dict[tuple[str, str], float]:
    """(sample name, portal label) -> value of every per-portal metric of ``dro``."""
    assert dro.metrics is not None
    host, port = dro.metrics
    text = await asyncio.to_thread(_fetch, f"http://{host}:{port}/metrics")
    out: dict[tuple[str, str], float] = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            if "portal" in s.labels:
                out[(s.name, s.labels["portal"])] = s.value
    return out


async def test_uims_requests_and_mims_cross_a_peer_link(tmp_path: Path) -> None:
    t1, t2 = MimTrd(), MimTrd()
    port = free_tcp_port()
    xml1 = peer_dro_xml("dro1", [("TRD1", 1, t1)], [PeerSpec("PEER", "acceptor", port)])
    xml2 = peer_dro_xml("dro2", [("TRD2", 2, t2)], [PeerSpec("PEER", "initiator", port)])
    dro1, dro2 = await asyncio.gather(
        start_dro(tmp_path, "dro1", xml1, metrics=True),
        start_dro(tmp_path, "dro2", xml2, metrics=True),
    )
    uims: list[Message] = []
    mims: list[Message] = []
    answers: list[Message] = []

    def on_uim(msg: Message) -> None:
        uims.append(msg)
        if msg.response is not None:
            msg.respond(b"resp-u")

    def on_mim(msg: Message) -> None:
        mims.append(msg)
        if msg.response is not None:
            msg.respond(b"resp-m")

    try:
        await dro1.wait_for_line(LINK_UP, 20)
        await dro2.wait_for_line(LINK_UP, 20)
        async with (
            await Context.create(t1.context()) as a,
            await Context.create(t2.context()) as b,
        ):
            b.immediate_message_callback = on_uim
            await b.create_receiver(TOPIC, on_mim, attributes=t2.receiver())

            async def interest_crossed() -> bool:
                got = await figures(dro1)
                return got.get(("pyum_dro_peer_interest_topics", "PEER"), 0) >= 1

            async with asyncio.timeout(20):
                while not await interest_crossed():  # DRO1 learned TRD2's interest
                    await asyncio.sleep(0.05)
            await until(lambda: a.domain_id == 1 and 2 in a.domain_routes, "TRD1 routes to 2")
            before1, before2 = await figures(dro1), await figures(dro2)

            bip, bport = b.request_address.split(":")[1:]  # type: ignore[union-attr]
            for i in range(K):
                a.send_uim(f"TCP:2:{bip}:{bport}", b"uim-%02d" % i)
            ureq = a.send_uim_request(f"TCP:2:{bip}:{bport}", b"uimreq", answers.append)
            for i in range(N):
                a.send_mim(TOPIC, b"mim-%02d" % i)
            mreq = a.send_mim_request(TOPIC, b"mimreq", answers.append)

            await until(lambda: len(uims) == K + 1, "the UIMs and the request in TRD2")
            await until(lambda: len(mims) == N + 1, "the MIMs and the request in TRD2")
            await until(lambda: len(answers) == 2, "both responses back in TRD1")
            assert sorted(bytes(m.data) for m in uims) == sorted(
                [b"uim-%02d" % i for i in range(K)] + [b"uimreq"]
            )
            assert [bytes(m.data) for m in mims] == [b"mim-%02d" % i for i in range(N)] + [
                b"mimreq"
            ]
            assert all(m.topic == TOPIC for m in mims)
            assert sorted(bytes(m.data) for m in answers) == [b"resp-m", b"resp-u"]
            assert (ureq.responses, mreq.responses) == (1, 1)
            ip_a, port_a = a.request_address.split(":")[1:]  # type: ignore[union-attr]
            assert {m.source for m in uims} == {f"TCP:1:{ip_a}:{port_a}"}  # the originator

            # every figure rose before the message it counts reached the application
            after1, after2 = await figures(dro1), await figures(dro2)

            def d1(name: str, portal: str) -> float:
                return after1.get((name, portal), 0) - before1.get((name, portal), 0)

            def d2(name: str, portal: str) -> float:
                return after2.get((name, portal), 0) - before2.get((name, portal), 0)

            uim_n, resp_n, mim_n = K + 1, 2, N + 1
            pr, ps = "pyum_dro_peer_receive_", "pyum_dro_peer_send_"
            er, es = "pyum_dro_endpoint_receive_", "pyum_dro_endpoint_send_"
            expected1 = {  # DRO1: UIMs in from TRD1, over the link; responses back
                (er + "unicast_data_msgs_rcvd_total", "TRD1"): uim_n,
                (er + "unicast_data_msg_bytes_rcvd_total", "TRD1"): uim_n * SIZE,
                (er + "immediate_topic_fragments_rcvd_total", "TRD1"): mim_n,
                (er + "immediate_topic_req_fragments_rcvd_total", "TRD1"): 1,
                (ps + "unicast_msgs_forwarded_total", "PEER"): uim_n,
                (ps + "unicast_msgs_sent_total", "PEER"): uim_n,
                (ps + "unicast_msg_bytes_sent_total", "PEER"): uim_n * SIZE,
                (ps + "unicast_msgs_dropped_not_operational_total", "PEER"): 0,
                (ps + "unicast_msgs_dropped_would_block_total", "PEER"): 0,
                (pr + "unicast_data_msgs_rcvd_total", "PEER"): resp_n,
                (pr + "unicast_data_msg_bytes_rcvd_total", "PEER"): resp_n * SIZE,
                (es + "unicast_msgs_sent_total", "TRD1"): resp_n,
                (pr + "immediate_topic_fragment_data_msgs_rcvd_total", "PEER"): 0,
            }
            expected2 = {  # DRO2: over the link, into TRD2; responses in from TRD2, back over
                (pr + "unicast_data_msgs_rcvd_total", "PEER"): uim_n,
                (pr + "unicast_data_msg_bytes_rcvd_total", "PEER"): uim_n * SIZE,
                (pr + "unicast_data_msgs_dropped_no_route_total", "PEER"): 0,
                (pr + "immediate_topic_fragment_data_msgs_rcvd_total", "PEER"): mim_n,
                (pr + "immediate_topic_fragment_data_msg_bytes_rcvd_total", "PEER"): mim_n * SIZE,
                (pr + "immediate_topic_req_fragment_data_msgs_rcvd_total", "PEER"): 1,
                (es + "unicast_msgs_sent_total", "TRD2"): uim_n,
                (es + "unicast_msg_bytes_sent_total", "TRD2"): uim_n * SIZE,
                (es + "immediate_topic_fragments_sent_total", "TRD2"): mim_n,
                (es + "immediate_topic_fragment_bytes_sent_total", "TRD2"): mim_n * SIZE,
                (es + "immediate_topic_req_fragments_sent_total", "TRD2"): 1,
                (er + "unicast_data_msgs_rcvd_total", "TRD2"): resp_n,
                (ps + "unicast_msgs_sent_total", "PEER"): resp_n,
                (ps + "unicast_msg_bytes_sent_total", "PEER"): resp_n * SIZE,
            }
            for key in (*expected1, *expected2):  # every figure named is exported
                assert key in after1 or key in after2, key
            got1 = {k: d1(*k) for k in expected1}
            got2 = {k: d2(*k) for k in expected2}
            assert (got1, got2) == (expected1, expected2)
            ureq.close()
            mreq.close()
            # the requests' response objects hold connections back to the requester until they
            # are collected: let that happen while the loop still runs
            uims.clear()
            mims.clear()
            gc.collect()
    finally:
        await asyncio.gather(dro2.stop(), dro1.stop())
