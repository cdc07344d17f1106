"""The LBT data path's per-datagram shortcuts: sources pack DATA headers from constant parts and
hand on the framed datagram itself; receivers parse the whole datagram from an offset, on
``bytes`` (uvloop) and on a memoryview of a reused buffer (plain asyncio loop)."""

from __future__ import annotations

import random
import struct

import pytest

from umcore.transport.lbtrm import LbtrmReceiver, LbtrmSource
from umcore.transport.lbtru import (
    LbtruReceiver,
    LbtruSource,
    RuReceiverConfig,
    RuSourceConfig,
)
from umcore.wire import lbtrm as wrm
from umcore.wire import lbtru as wru

SID = 0x1234_5678
PORT = 14_001


def _lbmc_run(tidx: int, first: int, count: int, size: int = 64) -> bytes:
    """``count`` plain LBMC data messages (12-byte header + payload) of one topic."""
    out = b""
    for i in range(count):
        payload = struct.pack("!Q", first + i) + bytes(size - 8)
        out += struct.pack("!BBHII", 0, 0, 12 + size, tidx, first + i) + payload
    return out


def test_data_headers_equal_the_wire_encoders_and_follow_the_nak_port() -> None:
    s = LbtrmSource(SID, 0)
    s.ucast_port = PORT  # the adapter sets it once bound: the header follows
    assert s._data_header(7, 3) == wrm.encode_data(SID, PORT, 7, 3, b"")
    for use_sid in (True, False):
        u = LbtruSource(SID, RuSourceConfig(use_session_id=use_sid))
        assert u._data_header(9, 2) == wru.encode_data(9, 2, b"", SID if use_sid else None)


def _rm_receiver() -> tuple[LbtrmReceiver, list[tuple[int, bytes]]]:
    rcv = LbtrmReceiver(SID, PORT, None, 0.0, random.Random(1))
    return rcv, _subscribe(rcv)


def _ru_receiver() -> tuple[LbtruReceiver, list[tuple[int, bytes]]]:
    rcv = LbtruReceiver(SID, RuReceiverConfig(), 0.0, random.Random(1))
    return rcv, _subscribe(rcv)


def _subscribe(rcv: LbtrmReceiver | LbtruReceiver) -> list[tuple[int, bytes]]:
    got: list[tuple[int, bytes]] = []
    dc = rcv.new_dc(TIDX, "t", lambda sqn, p: got.append((sqn, bytes(p))), lambda *a: None)
    rcv.subscribe(dc)
    return got


TIDX = 3
PER_DGRAM = 12  # messages per datagram: a run (>= RUN_MIN) the receiver hands on packed


def _datagrams(kind: str, n: int) -> list[bytes]:
    """``n`` DATA datagrams of PER_DGRAM plain messages each, encoded by the wire codecs."""
    out = []
    for d in range(n):
        lbmc = _lbmc_run(TIDX, d * PER_DGRAM, PER_DGRAM)
        if kind == "rm":
            out.append(wrm.encode_data(SID, PORT, d, 0, lbmc))
        else:
            out.append(wru.encode_data(d, 0, lbmc, SID))
    return out


@pytest.mark.parametrize("kind", ["rm", "ru"])
@pytest.mark.parametrize("as_view", [False, True])
def test_receiver_parses_from_the_offset_and_owns_what_it_holds(kind: str, as_view: bool) -> None:
    """Datagrams as ``bytes`` (uvloop) or as a memoryview of ONE reused receive buffer (the plain
    loop's drain): the datagram behind a gap is held packed; overwriting the buffer afterwards
    must not change what is delivered once the repair arrives."""
    rcv, got = _rm_receiver() if kind == "rm" else _ru_receiver()
    dgrams = _datagrams(kind, 4)
    buf = bytearray(4096)

    def feed(d: bytes, now: float) -> None:
        if not as_view:
            rcv.receive_datagram(d, now)
            return
        buf[: len(d)] = d
        rcv.receive_datagram(memoryview(buf)[: len(d)], now)
        buf[:] = b"\xee" * len(buf)  # the next read overwrites the buffer

    feed(dgrams[0], 0.0)
    feed(dgrams[2], 0.01)  # dgrams[1] missing: dgrams[2] is held behind the gap
    assert [s for s, _ in got] == list(range(PER_DGRAM))
    feed(dgrams[1], 0.02)  # the repair
    feed(dgrams[3], 0.03)
    expect = [
        (i, struct.pack("!Q", i) + bytes(56)) for i in range(4 * PER_DGRAM)
    ]  # sqn and payload of every message, in order
    assert got == expect
