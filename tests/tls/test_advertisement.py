"""How a source's TLS/LZ4 setting is advertised and how a resolver ignores other settings.

TIRs carry it in pyum's [inferred] extended-functionality bits (EXFUNC_TLS 0x10,
EXFUNC_COMPRESSION 0x20), SRS SIRs in their own encryption and compression bytes; a resolver
ignores TIRs whose bits differ from its context's and counts each in datagrams_dropped_type
(UM's tr_dgrams_dropped_type), silently.
"""

from __future__ import annotations

import pytest

from umcore.engine.srsresolve import info_from_sir, sir_from_source
from umcore.resolver.core import ResolverConfig, TopicResolver
from umcore.wire import lbmr, lbmr_options
from umcore.wire import srs_messages as srsm

TLS = lbmr_options.EXFUNC_TLS
LZ4 = lbmr_options.EXFUNC_COMPRESSION
TCP = lbmr.TCPInfo("127.0.0.1", 40000, 0x1234)


def tir_datagram(topic: str, flags: int) -> bytes:
    opts = (lbmr_options.ExFuncOption(14391, "127.0.0.1", flags),) if flags else ()
    packet = lbmr.LBMRPacket(lbmr.LBMR_TYPE_NORMAL, tirs=(lbmr.TIR(topic, 1, TCP, opts),))
    return lbmr.encode(packet)


@pytest.mark.parametrize("mine", [0, TLS, LZ4, TLS | LZ4])
@pytest.mark.parametrize("theirs", [0, TLS, LZ4, TLS | LZ4])
def test_resolver_takes_only_its_own_setting(mine: int, theirs: int) -> None:
    res = TopicResolver(ResolverConfig(security_flags=mine), 0.0)
    res.add_receiver("t", 0.0)
    found = res.receive_datagram(tir_datagram("t", theirs), ("127.0.0.1", 9999), 0.0)
    if mine == theirs:
        assert [f.topic for f in found] == ["t"]
        assert res.stats.datagrams_dropped_type == 0
    else:
        assert found == []
        assert res.stats.datagrams_dropped_type == 1
        # ignored, not remembered: a receiver created later does not find it either
        assert res.add_receiver("t", 0.0) == []
        res.receive_datagram(tir_datagram("other", theirs), ("127.0.0.1", 9999), 0.0)
        assert res.stats.datagrams_dropped_type == 2  # counted for topics nobody wants too


def test_other_functionality_bits_do_not_matter() -> None:
    res = TopicResolver(ResolverConfig(security_flags=TLS), 0.0)
    res.add_receiver("t", 0.0)
    flags = TLS | lbmr_options.EXFUNC_LATE_JOIN | lbmr_options.EXFUNC_UME
    assert res.receive_datagram(tir_datagram("t", flags), ("127.0.0.1", 9999), 0.0)


def test_tir_bits_survive_the_wire() -> None:
    packet = lbmr.decode(tir_datagram("t", TLS | LZ4 | lbmr_options.EXFUNC_LATE_JOIN))
    (opt,) = [o for o in packet.tirs[0].options if type(o) is lbmr_options.ExFuncOption]
    assert opt.functionality_flags == TLS | LZ4 | lbmr_options.EXFUNC_LATE_JOIN


@pytest.mark.parametrize("flags", [TLS, LZ4, TLS | LZ4])
def test_sir_uses_its_encryption_and_compression_bytes(flags: int) -> None:
    opts = (lbmr_options.ExFuncOption(14391, "127.0.0.1", flags | lbmr_options.EXFUNC_UME),)
    sir = sir_from_source("t", 1, TCP, opts, request=None, context_instance=bytes(8))
    assert sir.functionality_flags == lbmr_options.EXFUNC_UME  # the bits are not sent twice
    assert (sir.encryption, sir.compression) == (int(bool(flags & TLS)), int(bool(flags & LZ4)))
    batch = srsm.decode_message(srsm.Batch([sir]).encode())
    assert isinstance(batch, srsm.Batch)
    received = batch.records[0]
    assert isinstance(received, srsm.SourceInfo)
    info = info_from_sir(received)
    assert info is not None
    (opt,) = [o for o in info.options if type(o) is lbmr_options.ExFuncOption]
    assert opt.functionality_flags & (TLS | LZ4) == flags
    res = TopicResolver(ResolverConfig(security_flags=0), 0.0)
    assert res.security_mismatch(info.options)  # a plain context ignores it (SRS path)
    assert res.stats.datagrams_dropped_type == 1
    assert not TopicResolver(ResolverConfig(security_flags=flags), 0.0).security_mismatch(
        info.options
    )
