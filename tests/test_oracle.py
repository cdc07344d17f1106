"""The oracle harness itself must be able to tell clean from broken packets."""

from __future__ import annotations

import struct

import pytest

from tests.oracle import Tshark
from umcore.wire.pcap import udp_frame

pytestmark = pytest.mark.tshark


def test_keepalive_decodes_clean(tshark: Tshark) -> None:
    frames = [udp_frame("127.0.0.1", 14402, "127.0.0.1", 15380, b"\x03\x00\x00\x00")]
    decoded = tshark.decode(frames)
    assert decoded.protocols(0)[-1] == "lbmr"
    assert decoded.value("lbmr.hdr.type", 0) == "0x03"
    decoded.assert_clean()


def test_wrong_tir_length_is_reported(tshark: Tshark) -> None:
    tir = b"T\x00" + bytes([0x00, 5]) + struct.pack("!HI", 0, 1) + b"\x7f\x00\x00\x01\x30"
    frames = [udp_frame("127.0.0.1", 14402, "127.0.0.1", 15380, b"\x00\x00\x00\x01" + tir)]
    decoded = tshark.decode(frames)
    severities = {e.severity for e in decoded.problems()}
    assert {"error", "malformed"} <= severities
    with pytest.raises(AssertionError):
        decoded.assert_clean()
