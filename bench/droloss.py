"""DRO reliable loss benchmark: does recovery cost per message grow with what is held back?

A TCP receiver of a DRO proxy source with ``transport_tcp_dro_loss_recovery_timeout`` holds
messages back while a gap is open (:mod:`umcore.features.droloss`).  Data lost before the DRO
comes back as a repaired datagram -- a run of a few hundred messages in order -- while what
followed it waits.  Measured here, through the real TCP receiver session: a stream of
300-message reads (one datagram each) in which one datagram in ``EVERY`` is late and comes back
only after the whole stream, so about three quarters of the stream is held when the repairs
start (a DRO whose LBT-RM repair takes a few hundred milliseconds at 20 Mbit/s).

The stream is run at two lengths, ``N`` and ``2N`` datagrams (the baseline is the short one):
both are delivered in order without loss, and the cost per message should not depend on how
much is held, so the ratio long/short should stay near 1.  It was ~2 (quadratic: ~1,900 us per
message at 2N) when every in-order message rescanned the held messages for the earliest arrival
and the TCP session rescanned the rest of each read per message while the controller held.

Run alone: ``python -m bench.droloss`` (a few seconds).
"""

from __future__ import annotations

import time

from umcore.features.droloss import DroLossController
from umcore.transport.tcp import TcpReceiverSession
from umcore.wire import lbmc

PER = 300  # messages per datagram (a read)
SHORT = 28  # datagrams of the short stream (the long one has twice as many)
EVERY = 4
REPEATS = 3


def _reads(datagrams: int) -> list[bytes]:
    return [
        b"".join(lbmc.encode_data(1, q, bytes(16)) for q in range(d * PER, (d + 1) * PER))
        for d in range(datagrams)
    ]


def _order(datagrams: int) -> list[int]:
    late = [d for d in range(1, datagrams - 1) if d % EVERY == 1]
    return [0] + [d for d in range(1, datagrams) if d not in late] + late


def _run(reads: list[bytes], order: list[int]) -> float:
    got: list[int] = []
    lost: list[object] = []
    dc = DroLossController(
        1,
        "T",
        lambda q, _p: got.append(q),
        lambda *a: lost.append(a),
        timeout=60.0,
        clock=lambda: 0.0,
        max_held=0,
    )
    s = TcpReceiverSession(None)
    s.subscribe(dc)
    start = time.perf_counter()
    for d in order:
        s.receive_data(reads[d])
    elapsed = time.perf_counter() - start
    if got != list(range(len(reads) * PER)) or lost:
        raise AssertionError("bench/droloss: not delivered in order without loss")
    return elapsed


def main() -> None:
    per_msg = []
    for datagrams in (SHORT, 2 * SHORT):
        reads = _reads(datagrams)
        best = min(_run(reads, _order(datagrams)) for _ in range(REPEATS))
        per_msg.append(best / (datagrams * PER) * 1e6)
    print(
        f"   recovery behind a hold of ~{SHORT * PER * 3 // 4} messages: {per_msg[0]:6.2f} us/msg;"
        f" of ~{SHORT * PER * 3 // 2}: {per_msg[1]:6.2f} us/msg; ratio {per_msg[1] / per_msg[0]:.2f}"
    )


if __name__ == "__main__":
    main()
