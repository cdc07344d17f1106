"""LBMR fuzzing: random bytes and mutated valid datagrams (bit flips, truncation, extension,
spliced bytes) handed to ``decode``, ``peek_header``, ``is_client_keepalive`` and
``tir_address_slots``.  The only acceptable outcomes are a result or ``LBMRError``; counts are
bounded and seeded so a failure reproduces."""

from __future__ import annotations

import random
from collections.abc import Callable
from typing import Any

import pytest

from tests.wire.test_lbmr_bytes import CASES
from umcore.wire import lbmr
from umcore.wire.lbmr import LBMRError, decode, encode

SEED = 0x1B3A
RANDOM_COUNT = 3000
MUTATIONS_PER_SEED = 60

TARGETS: list[tuple[str, Callable[[bytes], Any]]] = [
    ("decode", decode),
    ("peek_header", lbmr.peek_header),
    ("is_client_keepalive", lbmr.is_client_keepalive),
    ("tir_address_slots", lbmr.tir_address_slots),
]


def survive(func: Callable[[bytes], Any], data: bytes) -> None:
    try:
        result = func(data)
    except LBMRError as exc:
        assert isinstance(exc.message, str)
        return
    if func is decode:
        # whatever decodes must be encodable again, to bytes that decode to the same packet
        assert decode(encode(result)) == result


def mutate(rng: random.Random, data: bytes) -> bytes:
    buf = bytearray(data)
    op = rng.randrange(6)
    if op == 0 and buf:  # flip bits
        for _ in range(rng.randint(1, 4)):
            buf[rng.randrange(len(buf))] ^= 1 << rng.randrange(8)
    elif op == 1 and buf:  # truncate
        del buf[rng.randrange(len(buf)) :]
    elif op == 2:  # extend
        buf += rng.randbytes(rng.randint(1, 16))
    elif op == 3 and buf:  # overwrite a byte with an interesting value
        buf[rng.randrange(len(buf))] = rng.choice([0, 1, 4, 0x7F, 0x80, 0xFF])
    elif op == 4 and len(buf) > 2:  # delete a slice
        i = rng.randrange(len(buf) - 1)
        del buf[i : i + rng.randint(1, 8)]
    elif buf:  # duplicate a slice in place
        i = rng.randrange(len(buf))
        buf[i:i] = buf[i : i + rng.randint(1, 12)]
    return bytes(buf)


@pytest.mark.parametrize(("name", "func"), TARGETS, ids=[t[0] for t in TARGETS])
def test_random_bytes(name: str, func: Callable[[bytes], Any]) -> None:
    rng = random.Random(SEED)
    for _ in range(RANDOM_COUNT):
        head = bytes((rng.randrange(256), rng.randrange(4), 0, rng.randrange(4)))
        survive(func, head + rng.randbytes(rng.randrange(64)))
        survive(func, rng.randbytes(rng.randrange(12)))


@pytest.mark.parametrize(("name", "func"), TARGETS, ids=[t[0] for t in TARGETS])
def test_mutated_valid_datagrams(name: str, func: Callable[[bytes], Any]) -> None:
    rng = random.Random(SEED + 1)
    seeds = [wire for _, _, wire in CASES]
    for wire in seeds:
        data = wire
        for _ in range(MUTATIONS_PER_SEED):
            data = mutate(rng, data if rng.random() < 0.7 else wire)
            survive(func, data)


def test_mutations_do_hit_decodable_and_refused_cases() -> None:
    # the fuzz above is only meaningful if mutations produce both outcomes
    rng = random.Random(SEED + 2)
    ok = refused = 0
    for _, _, wire in CASES:
        for _ in range(20):
            try:
                decode(mutate(rng, wire))
                ok += 1
            except LBMRError:
                refused += 1
    assert ok > 50 and refused > 50


def test_huge_and_empty_inputs() -> None:
    for func in (decode, lbmr.peek_header, lbmr.tir_address_slots):
        with pytest.raises(LBMRError):
            func(b"")
    assert lbmr.is_client_keepalive(b"") is False
    with pytest.raises(LBMRError):
        decode(b"\x00\x00\x00\x00" + bytes(70000))
    # a TIR count far beyond the body ends quickly with an error, not a long loop
    with pytest.raises(LBMRError):
        decode(b"\x00\x00\xff\xff" + b"t\0" + bytes(8))
