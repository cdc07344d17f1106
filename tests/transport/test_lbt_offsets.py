"""The LBT data path's per-datagram shortcuts: sources pack DATA headers from constant parts and
hand on the framed datagram itself; receivers parse the whole datagram from an offset, on
``bytes`` (uvloop) and on a memoryview of a reused buffer (plain asyncio loop)."""

from __future__ import annotations

import struct

from umcore.transport.lbtrm import LbtrmSource
from umcore.transport.lbtru import LbtruSource, RuSourceConfig
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
