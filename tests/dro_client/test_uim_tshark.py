"""tshark reads the UIMs this library sends through a DRO: STREAM + DESTINATION (a "domain
stream" in packet-lbmc.c), to a destination in another domain and to a proxy source by OTID."""

from __future__ import annotations

import pytest

from tests.oracle import Tshark
from umcore.engine.dro import source_headers, uim_route
from umcore.features import immediate as im
from umcore.resolver.dro import DomainTable
from umcore.wire import lbmc, lbmr
from umcore.wire.pcap import TcpFlow

pytestmark = pytest.mark.tshark

OWN = ("10.0.0.1", 14391)
DRO = ("10.0.0.9", 14392)


def test_uims_through_the_dro_decode_clean(tshark: Tshark) -> None:
    domains = DomainTable()
    domains.receive_packet(
        (lbmr.SrcTypeOption(lbmr.SRC_TYPE_TNWGD), lbmr.LocalDomainOption(1)), 0.0
    )
    domains.receive_route(DRO[0], DRO[1], [2], 0.0)
    addr, hdrs = uim_route(domains, "TCP:2:10.0.0.2:14393", OWN, 1.0)
    assert addr == DRO
    uim = im.encode_uim(b"hello", topic="dro.topic", ctxinst=bytes(8), stream_id=1, sqn=0,
                        extra=hdrs)  # fmt: skip
    proxy_opts = (lbmr.OTIDOption(bytes(range(32))), lbmr.CostOption(1, 2), lbmr.DomainIdOption(9))
    to_src = im.encode_uim(b"to source", topic=None, ctxinst=bytes(8), stream_id=1, sqn=1,
                           extra=source_headers(proxy_opts, 1, OWN))  # fmt: skip
    flow = TcpFlow((OWN[0], 40001), DRO)
    frames = [flow.segment(True, uim), flow.segment(True, to_src)]
    d = tshark.decode(frames, decode_as=["tcp.port==14392,lbttcp"])
    d.assert_clean()
    assert d.value("lbmc.destination.domain_id", 0) == "2"
    assert d.value("lbmc.destination.ipaddr", 0) == "10.0.0.2"
    assert d.value("lbmc.destination.port", 0) == "14393"
    assert d.value("lbmc.destination.orig_domain_id", 0) == "1"
    assert d.value("lbmc.destination.orig_ipaddr", 0) == OWN[0]
    assert d.value("lbmc.destination.orig_port", 0) == str(OWN[1])
    assert d.value("lbmc.destination.domain_id", 1) == "9"
    assert d.value("lbmc.otid.otid", 1).replace(":", "") == bytes(range(32)).hex()
    assert lbmc.decode(uim).find(lbmc.Stream) is not None
