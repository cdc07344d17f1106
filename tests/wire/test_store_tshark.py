"""tshark decodes what the store core and its clients exchange (persistence-store.md check 35):
registrations and their answers, SRI and SRI request, stability (single, ranged, NAK) and
consumption ACKs, keepalives, retransmission requests, a forwarded request and a
retransmission -- no Malformed, Error or Warn item, and the field values we meant.

The conversation is played through :class:`StoreCore` with test clients (tests/store/corekit.py)
and written as UIM connections: a client's message travels on a connection from the client to
the Store's port, the Store's answer on a connection the Store opens to the client's request
port (wire-lbmc-ump.md trap 10); the SRI on the source's LBT-TCP session.  One tshark run.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.oracle import Decoded, Tshark
from tests.store.corekit import STORE_ADDR, Receiver, Rig, Source, make_rig, topic_config
from umcore.store import compose
from umcore.wire import lbmc
from umcore.wire.pcap import TcpFlow

pytestmark = pytest.mark.tshark

SOURCE_UIM = ("10.0.0.1", 14391)
RECEIVER_UIM = ("10.0.0.2", 14392)
LBTTCP = ("10.0.0.1", 14371)


class Capture:
    """Frames of UIM connections, one per (from, to) pair, and what each frame should show."""

    def __init__(self) -> None:
        self.frames: list[bytes] = []
        self.expect: list[tuple[str, dict[str, Any]]] = []
        self._flows: dict[tuple[tuple[str, int], tuple[str, int]], TcpFlow] = {}
        self._ports = 40000

    def add(
        self, src_ip: str, dest: tuple[str, int], data: bytes, what: str, **fields: Any
    ) -> None:
        key = ((src_ip, 0), dest)
        flow = self._flows.get(key)
        if flow is None:
            self._ports += 1
            flow = self._flows[key] = TcpFlow((src_ip, self._ports), dest)
        self.frames.append(flow.segment(True, data))
        self.expect.append((what, fields))


def play(rig: Rig, cap: Capture) -> None:
    """Move what the core sent since the last call into the capture."""
    for dest, data in rig.wire:
        msg = lbmc.decode(data)
        comp = compose.decode(msg)
        cap.add(STORE_ADDR[0], dest, data, type(comp).__name__, **fields_of(comp))
    rig.wire.clear()


def fields_of(comp: Any) -> dict[str, Any]:
    if isinstance(comp, compose.RegistrationResponse):
        return {
            "lbmc.ume_preg_resp.reg_id": comp.reg_id,
            "lbmc.ume_preg_resp.s_flag": int(comp.source),
            "lbmc.ume_preg_resp.low_seqnum": comp.low_seqnum,
            "lbmc.ume_preg_resp.high_seqnum": comp.high_seqnum,
            "lbmc.ume_storeid.store_id": comp.store_index,
        }
    if isinstance(comp, compose.StabilityAck):
        out = {
            "lbmc.ume_ack.type": 1,
            "lbmc.ume_ack.transport_idx": comp.transport_idx,
            "lbmc.ume_ack.id_2": comp.topic_idx,
            "lbmc.ume_ack.seqnum": comp.first,
            "lbmc.ume_ack.flags": compose.ACK_FLAG_NAK if comp.nak else 0,
        }
        if comp.last != comp.first:
            out["lbmc.ume_ranged_ack.first_seqnum"] = comp.first
            out["lbmc.ume_ranged_ack.last_seqnum"] = comp.last
        return out
    if isinstance(comp, compose.Keepalive):
        return {
            "lbmc.ume_keepalive.type": comp.role,
            "lbmc.ume_keepalive.reg_id": comp.reg_id,
            "lbmc.ume_keepalive.flags.r_flag": int(comp.response_requested),
            "lbmc.ume_keepalive.flags.t_flag": int(comp.no_tir),
        }
    if isinstance(comp, compose.Retransmission):
        return {
            "lbmc.type": lbmc.MSG_RETRANS,
            "lbmc.sqn": comp.sqn,
            "lbmc.topicname.topic": comp.topic,
            "lbmc.otid.otid": comp.otid,
        }
    if isinstance(comp, compose.RetransmissionRequest):
        return {
            "lbmc.ume_rxreq.seqnum": [r.seqnum for r in comp.requests],
            "lbmc.ume_rxreq.id_2": [r.id_2 for r in comp.requests],
            "lbmc.ume_rxreq.rx_port": [r.reply_to[1] for r in comp.requests],
        }
    return {}


def same(got: str, want: Any) -> bool:
    if isinstance(want, bytes):
        return got.replace(":", "") == want.hex()
    if isinstance(want, int):
        return int(got, 0) == want
    return got == want


@pytest.fixture(scope="module")
def conversation(
    tshark: Tshark, tmp_path_factory: pytest.TempPathFactory
) -> tuple[Decoded, Capture]:
    tmp: Path = tmp_path_factory.mktemp("store-tshark")
    rig = make_rig(
        tmp,
        [topic_config("persist.topic", stability_ack_minimum_number=3,
                      retransmission_request_forwarding=1, repository_size_threshold=1 << 20)],
    )  # fmt: skip
    cap = Capture()
    src = Source(rig, "persist.topic", ip=SOURCE_UIM[0], port=SOURCE_UIM[1], transport_idx=5,
                 topic_idx=1, session_id=0x1122334455, activity_timeout_ms=20000)  # fmt: skip
    preg = src.preg()
    cap.add(SOURCE_UIM[0], STORE_ADDR, preg.encode(), "SourceRegistration", **{
        "lbmc.ume_preg.s_flag": 1, "lbmc.ume_preg.transport_idx": 5, "lbmc.ume_preg.topic_idx": 1,
        "lbmc.ume_preg.resp_port": SOURCE_UIM[1], "lbmc.topicname.topic": "persist.topic",
        "lbmc.ume_sid.sid": 0x1122334455, "lbmc.ume_client_lifetime.activity_tmo": 20000,
    })  # fmt: skip
    src.register()
    play(rig, cap)
    src.send(0, 1, 2, 3)  # data travels on the transport (not in this capture)
    play(rig, cap)  # one ranged ACK 0..2 (minimum number 3)
    rig.advance(0.25)
    play(rig, cap)  # 3 after stability-ack-interval
    rig.core.receive_loss(src.session, 5, 5, rig.now)
    src.send(6, 5)
    play(rig, cap)  # NAK 5, ACK 6, NAK for the re-sent 5
    # the source's SRI on its transport, with this Store's entry
    sri = compose.Sri(
        2, 0, 6, (rig.core.store_info(src.reg_id, version=2),), (compose.SriGroup(0, 1),)
    )
    cap.frames.append(TcpFlow(("10.0.0.2", 50000), LBTTCP).segment(False, sri.encode()))
    cap.expect.append(("Sri", {
        "lbmc.sri.version": 2, "lbmc.sri.high_sqn": 6, "lbmc.ume_store_ext.src_reg_id": src.reg_id,
        "lbmc.ume_store_ext.store_tcp_port": STORE_ADDR[1], "lbmc.ume_store_ext.store_ip_addr":
        STORE_ADDR[0], "lbmc.ume_store_ext.version": 2, "lbmc.ume_store_group.grp_sz": 1,
    }))  # fmt: skip
    srireq = compose.SriRequest(5, 1)
    cap.add(RECEIVER_UIM[0], SOURCE_UIM, srireq.encode(), "SriRequest",
            **{"lbmc.sri_req.transport_idx": 5, "lbmc.sri_req.topic_idx": 1})  # fmt: skip
    rcv = Receiver(rig, src, ip=RECEIVER_UIM[0], port=RECEIVER_UIM[1], rpp_mode=0)
    rreg = compose.ReceiverRegistration(src.reg_id, 5, 1, RECEIVER_UIM, topic="persist.topic")
    cap.add(RECEIVER_UIM[0], STORE_ADDR, rreg.encode(), "ReceiverRegistration", **{
        "lbmc.ume_preg.s_flag": 0, "lbmc.ume_preg.src_reg_id": src.reg_id,
    })  # fmt: skip
    rcv.register()
    play(rig, cap)
    ack = compose.ConsumptionAck(5, src.reg_id, rcv.reg_id, 3, lbmc.ACK_FLAG_E)
    cap.add(RECEIVER_UIM[0], STORE_ADDR, ack.encode(), "ConsumptionAck", **{
        "lbmc.ume_ack.type": 0, "lbmc.ume_ack.id_2": src.reg_id,
        "lbmc.ume_ack.rcv_reg_id": rcv.reg_id, "lbmc.ume_ack.seqnum": 3,
    })  # fmt: skip
    rig.control(ack.encode(), RECEIVER_UIM[0])
    reqs = tuple(compose.RxReq(5, src.reg_id, q, RECEIVER_UIM, 9) for q in (0, 1, 99))
    rx = compose.RetransmissionRequest(reqs)
    cap.add(RECEIVER_UIM[0], STORE_ADDR, rx.encode(), "RetransmissionRequest", **fields_of(rx))
    rig.control(rx.encode(), RECEIVER_UIM[0])
    play(rig, cap)  # two RETRANS to the receiver, 99 forwarded to the source
    rka = compose.ReceiverKeepalive(rcv.reg_id, 0)
    cap.add(RECEIVER_UIM[0], STORE_ADDR, rka.encode(), "ReceiverKeepalive",
            **{"lbmc.ume_receiver_keepalive.rcv_regid": rcv.reg_id})  # fmt: skip
    rig.control(rka.encode(), RECEIVER_UIM[0])
    rig.advance(3.8)
    play(rig, cap)  # idle keepalives
    d = compose.Deregistration(True, src.reg_id, 5, 1, SOURCE_UIM)
    cap.add(SOURCE_UIM[0], STORE_ADDR, d.encode(), "Deregistration",
            **{"lbmc.ume_preg.flags.d_flag": 1})  # fmt: skip
    rig.control(d.encode(), SOURCE_UIM[0])
    play(rig, cap)
    ports = {STORE_ADDR[1], SOURCE_UIM[1], RECEIVER_UIM[1], LBTTCP[1]}
    decoded = tshark.decode(cap.frames, decode_as=[f"tcp.port=={p},lbttcp" for p in sorted(ports)])
    return decoded, cap


def test_the_conversation_has_every_message_kind(conversation: tuple[Decoded, Capture]) -> None:
    _, cap = conversation
    kinds = {what for what, _ in cap.expect}
    assert kinds >= {
        "SourceRegistration", "RegistrationResponse", "StabilityAck", "Sri", "SriRequest",
        "ReceiverRegistration", "ConsumptionAck", "RetransmissionRequest", "Retransmission",
        "Keepalive", "ReceiverKeepalive", "Deregistration",
    }  # fmt: skip
    acks = [f for what, f in cap.expect if what == "StabilityAck"]
    assert any("lbmc.ume_ranged_ack.first_seqnum" in f for f in acks)
    assert any(f["lbmc.ume_ack.flags"] == compose.ACK_FLAG_NAK for f in acks)


def test_tshark_decodes_everything_clean(conversation: tuple[Decoded, Capture]) -> None:
    decoded, cap = conversation
    assert len(decoded) == len(cap.frames)
    for i in range(len(decoded)):
        assert "lbttcp" in decoded.protocols(i), (i, cap.expect[i][0], decoded.protocols(i))
        assert decoded.values("lbmc.msglen", i), (i, cap.expect[i][0])
    decoded.assert_clean()


def test_tshark_shows_the_values_we_meant(conversation: tuple[Decoded, Capture]) -> None:
    decoded, cap = conversation
    checked = 0
    for i, (what, fields) in enumerate(cap.expect):
        for name, want in fields.items():
            got = decoded.values(name, i)
            wanted = want if isinstance(want, list) else [want]
            assert len(got) == len(wanted), (i, what, name, got, wanted)
            for g, w in zip(got, wanted, strict=True):
                assert same(g, w), (i, what, name, g, w)
                checked += 1
    assert checked > 60
