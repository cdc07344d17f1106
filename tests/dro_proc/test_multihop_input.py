"""What a portal reads from another DRO's proxy source in its TRD (the multi-hop case, seed 7.3):
a TIR carrying OTID, COST and DOMAIN_ID makes a proxy source on the other portal that keeps the
OTID, adds one hop and the two portal costs and names the originating domain; that DRO's final
advertisement (COST cost -1) makes this DRO let its proxy go.  The "other DRO" here is a socket
that multicasts the two TIRs into TRD1."""

from __future__ import annotations

import socket

from tests.dro_proc.kit import Recorder, Trd, dro_xml, proxy_ready, running_dro
from tests.integration.helpers import until
from umcore.aio.multicast import set_multicast_sender
from umcore.api import Context
from umcore.dro import SourceKey
from umcore.wire import lbmr
from umcore.wire.lbmr_options import SRC_TYPE_TNWGD


def _tir(topic: str, otid: bytes, cost: int, port: int) -> bytes:
    tir = lbmr.TIR(
        topic,
        3,
        lbmr.TCPInfo("127.0.0.1", port, 0x1234),
        [lbmr.OTIDOption(otid), lbmr.CostOption(1, cost), lbmr.DomainIdOption(7)],
    )
    pkt = lbmr.LBMRPacket(0, tirs=[tir], options=[lbmr.SrcTypeOption(SRC_TYPE_TNWGD)])
    return lbmr.encode(pkt)


async def test_a_proxy_of_a_proxy_and_its_final_advertisement() -> None:
    trd1, trd2 = Trd(), Trd()
    otid = bytes(range(32))
    key = SourceKey(otid, "dro.hop")
    with socket.socket() as nowhere:  # a TCP port nothing answers on: the join just fails
        nowhere.bind(("127.0.0.1", 0))
        dead_port = nowhere.getsockname()[1]
    async with (
        running_dro(dro_xml([("TRD1", 1, trd1), ("TRD2", 2, trd2)])) as rt,
        await Context.create(trd2.context()) as b,
    ):
        rcv = await b.create_receiver("dro.hop", Recorder(), attributes=trd2.receiver())
        await until(lambda: "dro.hop" in rt.portals["TRD1"].receivers, "the proxy receiver")
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
            set_multicast_sender(s, "127.0.0.1", 1)
            s.sendto(_tir("dro.hop", otid, 5, dead_port), (trd1.group, trd1.port))
            await until(lambda: proxy_ready(rt, "TRD2", "dro.hop"), "our proxy of that proxy")
            src = rt.portals["TRD2"].src
            assert src is not None
            (info,) = [i for i in src.resolver.cached_sources("dro.hop") if i.options]
            opts = {type(o): o for o in info.options}
            assert opts[lbmr.OTIDOption].otid == otid  # the originating transport, kept
            cost = opts[lbmr.CostOption]
            assert (cost.cost, cost.hop_count) == (5 + 1 + 1, 2)  # + both portals, one more hop
            assert opts[lbmr.DomainIdOption].domain_id == 7  # where the source is
            s.sendto(_tir("dro.hop", otid, -1, dead_port), (trd1.group, trd1.port))
            await until(lambda: ("TRD2", key) not in rt.core.proxy_sources(), "our proxy gone")
        assert key not in rt.portals["TRD2"].sources
        await rcv.close()
