"""The LZ4 framing (umcore.wire.lz4stream): round trips in any cut, and refusals."""

from __future__ import annotations

import os
import struct

import lz4.block
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from umcore.errors import RemoteProtocolError
from umcore.wire.lz4stream import HELLO, MAX_BLOCK, Lz4Decoder, encode_blocks


def feed_all(stream: bytes, cut: int) -> bytes:
    d = Lz4Decoder()
    out: list[bytes] = []
    for i in range(0, len(stream), cut):
        out += d.receive_data(stream[i : i + cut])
    assert d.bytes_in == len(stream)
    return b"".join(out)


@settings(max_examples=60, deadline=None)
@given(
    chunks=st.lists(st.binary(max_size=3000) | st.just(b"tick 101.25 " * 400), max_size=6),
    cut=st.integers(1, 5000),
)
def test_round_trip_any_cut(chunks: list[bytes], cut: int) -> None:
    stream = HELLO + b"".join(b"".join(encode_blocks(c)) for c in chunks if c)
    assert feed_all(stream, cut) == b"".join(chunks)


def test_big_input_is_cut_into_blocks_and_compressible_data_shrinks() -> None:
    data = b"EUR/USD 1.08345 1.08347 1000000 " * 10_000  # 320,000 bytes
    framed = encode_blocks(data)
    headers = framed[0::2]
    assert len(headers) == -(-len(data) // MAX_BLOCK)
    assert all(struct.unpack("!II", h)[1] <= MAX_BLOCK for h in headers)
    assert sum(map(len, framed)) < len(data) / 10
    assert feed_all(HELLO + b"".join(framed), 4096) == data


def test_incompressible_data_travels_raw() -> None:
    data = os.urandom(1000)
    framed = encode_blocks(data)
    assert struct.unpack("!II", framed[0]) == (1000, 1000)
    assert framed[1] == data


@pytest.mark.parametrize(
    "stream",
    [
        b"\x00" * 8,  # a plain LBMC peer: no hello
        b"UMZ\x02\x01\x00\x00\x00",  # another version
        b"\x16\x03\x01\x00",  # a TLS ClientHello's start (the hello prefix check fails at once)
        HELLO + struct.pack("!II", 10, 0),  # raw length 0
        HELLO + struct.pack("!II", 10, MAX_BLOCK + 1),  # bigger than a block may be
        HELLO + struct.pack("!II", 11, 10) + bytes(11),  # stored longer than raw
        HELLO + struct.pack("!II", 5, 100) + b"\xff" * 5,  # not an LZ4 block of 100
    ],
)
def test_refused(stream: bytes) -> None:
    with pytest.raises(RemoteProtocolError):
        Lz4Decoder().receive_data(stream)


def test_block_decompressing_short_is_refused() -> None:
    packed = lz4.block.compress(b"a" * 200, store_size=False)
    with pytest.raises(RemoteProtocolError):
        Lz4Decoder().receive_data(HELLO + struct.pack("!II", len(packed), 300) + packed)


def test_partial_hello_waits() -> None:
    d = Lz4Decoder()
    assert d.receive_data(HELLO[:3]) == []
    assert not d.hello_seen
    assert d.receive_data(HELLO[3:] + b"".join(encode_blocks(b"abc"))) == [b"abc"]
