"""Helpers the wire tests share: the datagram fuzz loop, hand-built LBMC/LBMR bytes for the
transport tshark tests, and reading tshark's numbers."""

from __future__ import annotations

import random
import struct
from collections.abc import Callable, Iterable, Sequence
from typing import Any

from tests.oracle import Decoded
from umcore.errors import RemoteProtocolError

# --------------------------------------------------------------------------------------------
# Fuzz


def mutate(rng: random.Random, wire: bytes) -> bytes:
    """1 to 4 random edits of ``wire``: overwrite a byte, truncate, or insert 1-8 random bytes."""
    data = bytearray(wire)
    for _ in range(rng.randint(1, 4)):
        op = rng.random()
        if op < 0.5 and data:
            data[rng.randrange(len(data))] = rng.randrange(256)
        elif op < 0.75:
            del data[rng.randrange(len(data) + 1) :]
        else:
            data[rng.randrange(len(data) + 1) : 0] = rng.randbytes(rng.randint(1, 8))
    return bytes(data)


def fuzz_decoders(
    rng: random.Random,
    seeds: Sequence[bytes],
    decoders: Iterable[Callable[[bytes], Any]],
    error: type[RemoteProtocolError],
    *,
    rounds: int,
    random_every: int,
    random_max: int,
) -> int:
    """Feed every decoder ``rounds`` inputs: each ``random_every``-th is up to ``random_max``
    random bytes, the others a :func:`mutate` of one of ``seeds``.  Only ``error`` may escape,
    with an offset inside the input; returns how many decodes succeeded (callers check that
    the mutations exercised the success paths too)."""
    decoders = tuple(decoders)
    decoded = 0
    for i in range(rounds):
        seed = rng.choice(seeds)
        if i % random_every == 0:
            wire = rng.randbytes(rng.randint(0, random_max))
        else:
            wire = mutate(rng, seed)
        for fn in decoders:
            try:
                fn(wire)
                decoded += 1
            except error as exc:
                assert exc.offset is None or 0 <= exc.offset <= len(wire), (exc, wire)
    return decoded


# --------------------------------------------------------------------------------------------
# Hand-built bytes and tshark values (transport tshark tests)


def lbmc_data(tidx: int, sqn: int, payload: bytes) -> bytes:
    """One LBMC data message built by hand (wire note section 4): ver/type 0, next_hdr 0 (data
    follows), msglen including the 12-byte header, topic index, sequence number."""
    return struct.pack("!BBHII", 0x00, 0x00, 12 + len(payload), tidx, sqn) + payload


def lbmr_tir(topic: str, idx: int, transport_type: int, transport: bytes) -> bytes:
    """An LBMR datagram with one TIR, built by hand (wire note 3.3/3.4): header (TIR count 1),
    the NUL-terminated topic, then ``transport_type, len(transport), flags 0, topic index`` and
    the transport-specific ``transport`` bytes."""
    name = topic.encode() + b"\0"
    head = struct.pack("!BBHI", transport_type, len(transport), 0, idx)
    return struct.pack("!BBH", 0, 0, 1) + name + head + transport


def num(value: str) -> int:
    """A number as tshark prints it (decimal, or hex with 0x)."""
    return int(value, 16) if value.startswith("0x") else int(value)


def check_fields(decoded: Decoded, frame: int, protocol: str, expected: dict[str, object]) -> None:
    """Frame ``frame`` holds ``protocol`` and each tshark field has the expected number (a list
    for repeated fields)."""
    assert protocol in decoded.protocols(frame), decoded.protocols(frame)
    for field, want in expected.items():
        got = [num(v) for v in decoded.values(field, frame)]
        assert got == (want if isinstance(want, list) else [want]), (frame, field, got, want)
