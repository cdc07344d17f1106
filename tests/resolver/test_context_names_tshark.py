"""tshark as the oracle for the context-name datagrams the resolver sends: a Store's
advertisement and a source's query (LBMR extended type 0x03, "context info") decode in
Wireshark's packet-lbmr.c with no Malformed/Error/Warn item and the field values we meant."""

from __future__ import annotations

import pytest

from tests.oracle import Tshark
from umcore.resolver.core import ResolverConfig, TopicResolver
from umcore.wire.pcap import udp_frame

pytestmark = pytest.mark.tshark

INSTANCE = bytes.fromhex("0102030405060708")


def test_advert_and_query_decode_as_meant(tshark: Tshark) -> None:
    r = TopicResolver(ResolverConfig(), 0.0, instance=INSTANCE)
    r.advertise_context_name("store1", "10.1.2.3", 14567, 0.0)
    r.query_context_name("other-Store_2", 0.0)
    sent = r.take_datagrams()
    assert [addr for _, addr in sent] == [("224.9.10.11", 12965)] * 2  # the TR channel
    frames = [udp_frame("127.0.0.1", 14402, addr[0], addr[1], data) for data, addr in sent]
    dec = tshark.decode(frames)
    dec.assert_clean()
    for frame in (0, 1):
        assert dec.value("lbmr.hdr.type", frame) == "0x07"
        assert dec.value("lbmr.hdr.ext_type", frame) == "0x03"
        assert dec.value("lbmr.ctxinfo.instance", frame) == "01:02:03:04:05:06:07:08"
        assert dec.value("lbmr.ctxinfo.hop_count", frame) == "0"
        assert int(dec.value("lbmr.ctxinfo.len", frame)) == len(sent[frame][0])
    expected = {
        # advertisement: IP | INSTANCE | NAME, the Store's address
        0: ("0x6001", "0", "1", "1", "1", "store1", "10.1.2.3", "14567"),
        # query: QUERY | INSTANCE | NAME, no address
        1: ("0xa001", "1", "0", "1", "1", "other-Store_2", "0.0.0.0", "0"),
    }
    for frame, (flags, query, ip_flag, inst, name_flag, name, ip, port) in expected.items():
        assert dec.value("lbmr.ctxinfo.flags", frame) == flags
        assert dec.value("lbmr.ctxinfo.flags.query", frame) == query
        assert dec.value("lbmr.ctxinfo.flags.ip", frame) == ip_flag
        assert dec.value("lbmr.ctxinfo.flags.instance", frame) == inst
        assert dec.value("lbmr.ctxinfo.flags.name", frame) == name_flag
        for other in ("tnwg_src", "tnwg_rcv", "proxy"):
            assert dec.value(f"lbmr.ctxinfo.flags.{other}", frame) == "0"
        assert dec.value("lbmr.ctxinfo.name", frame) == name
        assert dec.value("lbmr.ctxinfo.ip", frame) == ip
        assert dec.value("lbmr.ctxinfo.port", frame) == port
