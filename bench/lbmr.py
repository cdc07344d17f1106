"""LBMR codec throughput: decode+encode of a 10-TIR datagram, against a floor in the same run.

The baseline is the least any datagram handler does: copy the datagram (``bytes(data)``) and
unpack its 4-byte header with a precompiled ``struct``.  Figures are per second on this machine;
only the ratios mean anything across machines.  Also measured: decode alone, encode alone, and
lbmrd's ``tir_address_slots`` walk (NAT), on the same datagram.
"""

from __future__ import annotations

import struct
import time
from collections.abc import Callable

from umcore.wire import lbmr

RUN_SECONDS = 1.5  # per measurement; 5 measurements plus warm-up stay well under a minute


def sample_datagram() -> bytes:
    """10 TIRs as a UM source context would advertise them: mixed transports, a few options."""
    ctx = bytes(range(8))
    tirs = []
    for i in range(10):
        topic = f"MARKET.DATA.EQUITY.SYM{i:04d}"
        if i % 3 == 0:
            info: lbmr.TransportInfo = lbmr.TCPInfo("10.20.30.40", 14371, 0x11223344)
        elif i % 3 == 1:
            info = lbmr.LBTRUInfo("10.20.30.40", 14380, 0x55667788)
        else:
            info = lbmr.LBTRMInfo("10.20.30.40", "224.10.10.10", 0x99AABBCC, 14400, 14390)
        options = [lbmr.CtxInstOption(ctx), lbmr.DomainIdOption(5)] if i % 2 else []
        tirs.append(lbmr.TIR(topic, i, info, options))
    packet = lbmr.LBMRPacket(0, tirs=tirs, options=[lbmr.SrcIdOption(ctx), lbmr.VersionOption(1)])
    return lbmr.encode(packet)


def rate(func: Callable[[], object], seconds: float = RUN_SECONDS) -> float:
    """Calls per second of ``func`` over about ``seconds`` (batches of 200 calls)."""
    func()
    calls = 0
    start = time.perf_counter()
    deadline = start + seconds
    while True:
        for _ in range(200):
            func()
        calls += 200
        now = time.perf_counter()
        if now >= deadline:
            return calls / (now - start)


def main() -> None:
    data = sample_datagram()
    header = struct.Struct(">BBH")
    packet = lbmr.decode(data)
    assert lbmr.encode(packet) == data

    def baseline() -> object:
        copy = bytes(memoryview(data))  # memoryview: bytes(bytes) would not copy
        return header.unpack_from(copy, 0)

    def round_trip() -> object:
        return lbmr.encode(lbmr.decode(data))

    figures = {
        "baseline copy+header": rate(baseline),
        "decode+encode": rate(round_trip),
        "decode": rate(lambda: lbmr.decode(data)),
        "encode": rate(lambda: lbmr.encode(packet)),
        "tir_address_slots": rate(lambda: lbmr.tir_address_slots(data)),
    }
    base = figures["baseline copy+header"]
    print(f"   datagram: {len(data)} bytes, 10 TIRs (TCP/LBT-RU/LBT-RM, topic and packet options)")
    for name, per_second in figures.items():
        tirs = per_second * 10
        print(
            f"   {name:22s} {per_second:12,.0f} datagrams/s  {tirs:12,.0f} TIRs/s"
            f"  {base / per_second:7.1f}x baseline cost"
        )


if __name__ == "__main__":
    main()
