"""LBT-TCP stream framing: incremental decoding, partial tails, limits, failure state."""

from __future__ import annotations

import pytest

from umcore.wire import lbmc
from umcore.wire.lbmc import MSG_CONTROL, LBMCError, LBMCMessage, TcpSid, UmeKeepalive
from umcore.wire.lbttcp import DEFAULT_SOURCE_PORTS, LBTTCPDecoder, tcp_sid_message


def stream() -> tuple[bytes, list[LBMCMessage]]:
    msgs = [
        LBMCMessage(MSG_CONTROL, headers=[TcpSid(0, 0x11223344)]),
        *(lbmc.decode(lbmc.encode_data(7, sqn, b"m" * sqn)) for sqn in range(5)),
        LBMCMessage(MSG_CONTROL, headers=[UmeKeepalive(0x40, 2, 5, 1, 9)]),
        lbmc.decode(lbmc.encode_data(7, 5, bytes(60000))),
    ]
    return b"".join(lbmc.encode(m) for m in msgs), msgs


def test_tcp_sid_message_exact_bytes() -> None:
    # wire-lbmr-transports-srs.md section 9 row 5: receiver -> source confirmation
    assert tcp_sid_message(0x11223344) == bytes.fromhex("086b000cff08000011223344")
    assert 14371 in DEFAULT_SOURCE_PORTS and 14390 in DEFAULT_SOURCE_PORTS


def test_one_byte_at_a_time_equals_all_at_once() -> None:
    wire, msgs = stream()
    assert LBTTCPDecoder().feed(wire) == msgs
    dec = LBTTCPDecoder()
    out: list[LBMCMessage] = []
    for i in range(len(wire)):
        out += dec.feed(wire[i : i + 1])
    assert out == msgs
    assert dec.pending == 0 and dec.messages_out == len(msgs) and dec.bytes_in == len(wire)
    dec.eof()


def test_trailing_partial_bytes_are_kept() -> None:
    wire, msgs = stream()
    dec = LBTTCPDecoder()
    cut = len(wire) - 10
    assert dec.feed(memoryview(wire)[:cut]) == msgs[:-1]
    assert dec.pending == len(lbmc.encode(msgs[-1])) - 10
    with pytest.raises(LBMCError):
        dec.eof()
    assert dec.feed(wire[cut:]) == msgs[-1:]
    assert dec.pending == 0


def test_frames_are_raw_messages() -> None:
    wire, msgs = stream()
    frames = LBTTCPDecoder().feed_frames(bytearray(wire))
    assert [lbmc.decode(f) for f in frames] == msgs
    assert b"".join(frames) == wire


def test_message_over_the_limit_raises_before_buffering() -> None:
    dec = LBTTCPDecoder(max_message=1000)
    big = lbmc.encode_data(1, 1, bytes(2000))
    with pytest.raises(LBMCError):
        dec.feed(big[:4])  # refused as soon as msglen is readable
    with pytest.raises(LBMCError):  # and the stream stays failed
        dec.feed(lbmc.encode_data(1, 2, b"ok"))


@pytest.mark.parametrize(
    "start",
    ["10000010", "03000010", "08ff0003", "0000000b", "00000000"],  # version, type, short msglen
)
def test_bad_message_start_raises(start: str) -> None:
    with pytest.raises(LBMCError):
        LBTTCPDecoder().feed(bytes.fromhex(start) + bytes(20))


def test_bad_chain_fails_the_stream() -> None:
    dec = LBTTCPDecoder()
    with pytest.raises(LBMCError):
        dec.feed(bytes.fromhex("08530010 ff00 0000 00000005 00000001".replace(" ", "")))
    with pytest.raises(LBMCError):
        dec.feed(tcp_sid_message(1))


def test_max_message_bounds() -> None:
    with pytest.raises(ValueError):
        LBTTCPDecoder(max_message=70000)
    dec = LBTTCPDecoder()
    assert dec.max_message == lbmc.MAX_LBMC_MESSAGE
    biggest = lbmc.encode_data(1, 1, bytes(lbmc.MAX_LBMC_MESSAGE - 12))
    assert len(dec.feed(biggest)) == 1
