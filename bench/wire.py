"""Wire codec benchmark: the LBMC data path (encode + decode), single messages and batch datagrams.

Measures, in one run:

* one LBMC data message (topic index, sequence number, 64-byte payload): ``encode_data`` then
  ``decode_data`` — target <= 2 us per message;
* one datagram of 20 such messages, built with ``encode_data_into`` in one bytearray and walked
  with ``decode_data`` — target <= 15 us per datagram;
* the same two through the general path (``LBMCMessage``/``encode``/``decode_all``), for scale;
* a baseline: a bare ``struct.pack`` + ``unpack_from`` of the same 12 header bytes (plus the
  payload concatenation), the floor any Python codec pays.

Machines here are noisy, so each figure is the best of several repeats and the baseline ratio is
the number to compare across runs.
"""

from __future__ import annotations

import struct
import time
from collections.abc import Callable

from umcore.wire import lbmc

TARGET_SINGLE_US = 2.0
TARGET_BATCH_US = 15.0
BATCH = 20
PAYLOAD = bytes(range(64))
REPEATS = 5
_HDR = struct.Struct("!BBHII")


def _best_us(fn: Callable[[int], None], loops: int) -> float:
    """Best-of-REPEATS time of one call of ``fn``'s inner operation, in microseconds."""
    best = float("inf")
    for _ in range(REPEATS):
        start = time.perf_counter()
        fn(loops)
        best = min(best, time.perf_counter() - start)
    return best / loops * 1e6


def _baseline_single(loops: int) -> None:
    pack, unpack, payload = _HDR.pack, _HDR.unpack_from, PAYLOAD
    for i in range(loops):
        wire = pack(0, 0, 76, 7, i) + payload
        unpack(wire, 0)
        memoryview(wire)[12:]


def _single(loops: int) -> None:
    enc, dec, payload = lbmc.encode_data, lbmc.decode_data, PAYLOAD
    for i in range(loops):
        dec(enc(7, i, payload))


def _baseline_batch(loops: int) -> None:
    pack, unpack, payload = _HDR.pack, _HDR.unpack_from, PAYLOAD
    for i in range(loops):
        buf = bytearray()
        for j in range(BATCH):
            buf += pack(0, 0, 76, 7, i + j)
            buf += payload
        pos = 0
        while pos < len(buf):
            unpack(buf, pos)
            pos += 76


def _batch(loops: int) -> None:
    into, dec, payload = lbmc.encode_data_into, lbmc.decode_data, PAYLOAD
    for i in range(loops):
        buf = bytearray()
        off = 0
        for j in range(BATCH):
            off = into(buf, off, 7, i + j, payload)
        pos = 0
        end = len(buf)
        while pos < end:
            pos = dec(buf, pos)[4]


def _general_single(loops: int) -> None:
    for i in range(loops):
        lbmc.decode(lbmc.encode(lbmc.LBMCMessage(lbmc.MSG_DATA, 7, i, [], PAYLOAD)))


def _general_batch(loops: int) -> None:
    for i in range(loops):
        msgs = [lbmc.LBMCMessage(lbmc.MSG_DATA, 7, i + j, [], PAYLOAD) for j in range(BATCH)]
        lbmc.decode_all(b"".join(lbmc.encode(m) for m in msgs))


def _check() -> None:
    """The benchmarked paths really round-trip (a benchmark of a broken codec is worthless)."""
    tidx, sqn, _, payload, _ = lbmc.decode_data(lbmc.encode_data(7, 9, PAYLOAD))
    assert (tidx, sqn, bytes(payload)) == (7, 9, PAYLOAD)
    buf = bytearray()
    off = 0
    for j in range(BATCH):
        off = lbmc.encode_data_into(buf, off, 7, j, PAYLOAD)
    msgs = lbmc.decode_all(buf)
    assert [m.sqn for m in msgs] == list(range(BATCH)) and all(m.payload == PAYLOAD for m in msgs)


def main() -> None:
    _check()
    rows = [
        ("baseline struct pack+unpack, 1 msg", _best_us(_baseline_single, 100_000), 1, None),
        ("LBMC data path, 1 msg enc+dec", _best_us(_single, 100_000), 1, TARGET_SINGLE_US),
        (
            "baseline struct pack+unpack, 20-msg datagram",
            _best_us(_baseline_batch, 10_000),
            BATCH,
            None,
        ),
        (
            "LBMC data path, 20-msg datagram enc+dec",
            _best_us(_batch, 10_000),
            BATCH,
            TARGET_BATCH_US,
        ),
        ("LBMC general path, 1 msg enc+dec", _best_us(_general_single, 20_000), 1, None),
        ("LBMC general path, 20-msg datagram", _best_us(_general_batch, 2_000), BATCH, None),
    ]
    base = {1: rows[0][1], BATCH: rows[2][1]}
    print(f"   {'operation':46} {'us/op':>8} {'msgs/s':>11} {'vs target':>9} {'vs baseline':>11}")
    for name, us, n, target in rows:
        vs_target = f"{us / target:.2f}x" if target else "-"
        print(f"   {name:46} {us:8.2f} {n / us * 1e6:11,.0f} {vs_target:>9} {us / base[n]:10.2f}x")
    print("   (vs target < 1.00x means within target; baseline = bare struct.pack + unpack_from)")


if __name__ == "__main__":
    main()
