"""Hostile replays against the SRS daemon (issue 22 items 3 and 4), scaled down with small
``<pyum-limits>`` so every bound is reached in seconds.  The SRS runs as a subprocess on
loopback; attackers and legitimate clients register from different 127.0.0.x addresses (distinct
hosts to the per-host quota).  Each test asserts: the daemon survives (and stops with 0),
legitimate traffic flows within LEGIT_WITHIN seconds during and after the attack, resident
memory stays under a stated bound (psutil), and the log has one line per kind of refusal
(the first at once, then at most one summary per 10 s)."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from tests.hostile.srs_kit import WAIT, RawClient, SRSProcess, loopback_hosts_work, until

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(not loopback_hosts_work(), reason="needs 127.0.0.2.. on loopback"),
]

MIB = 1 << 20
LEGIT_WITHIN = 5.0  # seconds for a legitimate SIR to reach an interested receiver
MAX_LINES_PER_KIND = 4  # a test lasts < 30 s: the first line plus one summary per 10 s


def kind_lines(srs: SRSProcess, kind: str) -> list[str]:
    return srs.lines(f"refused {kind}:")


def assert_one_line_per_kind(srs: SRSProcess, kinds: list[str]) -> None:
    for kind in kinds:
        n = len(kind_lines(srs, kind))
        assert 1 <= n <= MAX_LINES_PER_KIND, f"{n} log lines for {kind!r}"


# -- item 3: half-written frames, trickles and idle connections ---------------------------------

BUFFER_BOUND = 16 * MIB
ATTACK_CONNECTIONS = 150
ATTACK_PARTIAL = 700 * 1024  # of a 1 MiB frame: 105 MB attempted, 6.5x the bound
PEAK_ABOVE_IDLE = 64 * MIB  # the bound plus read buffers and allocator slack
AFTER_ABOVE_IDLE = 24 * MIB  # once the attackers left and the freed memory was returned
_METADATA_PUSH = bytes(4) + ((0x0C << 10) | 0x100).to_bytes(2, "big")


async def test_half_written_frames_are_bounded_timed_out_and_memory_returned(
    tmp_path: Path,
) -> None:
    srs = SRSProcess(
        tmp_path,
        {
            "max-buffered-bytes": BUFFER_BOUND,
            "frame-timeout": 2000,
            "registration-timeout": 2000,
        },
    )
    await srs.start()
    clients: list[RawClient] = []
    try:
        idle = srs.rss()
        receiver = await RawClient(srs, "127.0.0.3", 1).connect()
        source = await RawClient(srs, "127.0.0.4", 2).connect()
        clients += [receiver, source]
        receiver.send_rir("legit/during")
        receiver.send_rir("legit/after")

        # 150 connections each hold 700 KiB of a 1 MiB frame
        attackers: list[tuple[asyncio.StreamReader, asyncio.StreamWriter]] = []
        chunk = MIB.to_bytes(3, "big") + (_METADATA_PUSH + bytes(ATTACK_PARTIAL))[:ATTACK_PARTIAL]
        peak = idle
        for _ in range(ATTACK_CONNECTIONS):
            r, w = await asyncio.open_connection("127.0.0.1", srs.port, local_addr=("127.0.0.2", 0))
            w.write(chunk)
            attackers.append((r, w))
            peak = max(peak, srs.rss())
        # a trickle: registered, then one byte of a frame every 0.3 s (frame timeout)
        trickle = [await RawClient(srs, "127.0.0.5", 100 + i).connect() for i in range(10)]
        # idle: connected, never a byte (registration timeout)
        idlers = [await RawClient(srs, "127.0.0.6", 0).connect(register=False) for _ in range(10)]
        clients += trickle + idlers

        # legitimate traffic during the attack
        source.send_sirs(["legit/during"], 1)
        took = await until(lambda: "legit/during" in receiver.topics, "legit SIR during")
        assert took < LEGIT_WITHIN

        async def drip() -> None:
            for c in trickle:
                c.send((4096).to_bytes(3, "big"))
            for _ in range(30):
                for c in trickle:
                    c.send(b"\x00")
                await asyncio.sleep(0.3)  # the attacker's pace, not a synchronisation

        dripping = asyncio.create_task(drip())

        async def all_closed() -> None:
            for r, _w in attackers:
                while await r.read(65536):
                    pass
            for c in trickle + idlers:
                await c.closed.wait()

        closing = asyncio.create_task(all_closed())
        while not closing.done():  # sample the daemon's memory until every attacker is closed
            peak = max(peak, srs.rss())
            await asyncio.wait({closing}, timeout=0.1)
        await asyncio.wait_for(closing, WAIT)
        dripping.cancel()
        assert srs.alive
        assert peak - idle < PEAK_ABOVE_IDLE, f"RSS {peak / MIB:.0f} MiB, idle {idle / MIB:.0f}"
        for _r, w in attackers:
            w.close()

        # the attackers are gone: memory goes back (checked every 5 s by the daemon)
        await until(lambda: srs.rss() - idle < AFTER_ABOVE_IDLE, "memory returned", timeout=15)
        await until(lambda: bool(srs.lines("returned freed memory")), "the release", timeout=10)
        after = srs.rss()
        print(f"SRS RSS: idle {idle / MIB:.1f} MiB, peak {peak / MIB:.1f}, after {after / MIB:.1f}")

        # legitimate traffic after the attack; the legitimate clients were never cut
        source.send_sirs(["legit/after"], 2)
        took = await until(lambda: "legit/after" in receiver.topics, "legit SIR after")
        assert took < LEGIT_WITHIN
        assert not receiver.closed.is_set() and not source.closed.is_set()
        assert_one_line_per_kind(
            srs, ["buffered bytes bound", "frame timeout", "registration timeout"]
        )
    finally:
        for c in clients:
            await c.close()
        assert await srs.stop() == 0


# -- item 4: a few clients try to fill the source table ---------------------------------------


async def test_a_few_clients_cannot_fill_the_source_table(tmp_path: Path) -> None:
    srs = SRSProcess(
        tmp_path,
        {"max-sources": 3000, "max-sources-per-client": 500, "max-sources-per-host": 1000},
    )
    await srs.start()
    clients: list[RawClient] = []
    try:
        idle = srs.rss()
        receiver = await RawClient(srs, "127.0.0.3", 1).connect()
        source = await RawClient(srs, "127.0.0.4", 2).connect()
        clients += [receiver, source]
        receiver.send_rir("legit/1")
        receiver.send_rir("legit/2")

        # five clients of one host try 800 sources each: the host gets 1,000 in all
        n = 1000
        attackers = [await RawClient(srs, "127.0.0.2", 10 + i).connect() for i in range(5)]
        clients += attackers
        for a in attackers:
            for start in range(0, 800, 200):
                a.send_sirs([f"junk/{a.session}/{k}" for k in range(start, start + 200)], n)
                n += 200
        await until(lambda: len(kind_lines(srs, "source quota per host")) >= 1, "host quota")
        source.send_sirs(["legit/1"], 1)
        took = await until(lambda: "legit/1" in receiver.topics, "legit SIR while attacked")
        assert took < LEGIT_WITHIN

        # more hosts fill the table exactly (1,000 + 1 + 1,000 + 999); a legitimate new source
        # is then the first refused for a full table: logged at once, naming it
        more = [
            await RawClient(srs, host, 20 + i).connect()
            for i, host in enumerate(["127.0.0.5", "127.0.0.5", "127.0.0.6", "127.0.0.6"])
        ]
        clients += more
        counts = (500, 500, 500, 499)
        last = [f"junk/{a.session}/{c - 1}" for a, c in zip(more, counts, strict=True)]
        for topic in last:  # the receiver learns when each attacker's last SIR is in
            receiver.send_rir(topic)
        for a, count in zip(more, counts, strict=True):
            a.send_sirs([f"junk/{a.session}/{k}" for k in range(count)], n)
            n += count
        await until(lambda: receiver.topics.issuperset(last), "the table filled")
        source.send_sirs(["legit/2"], 2)
        await until(lambda: bool(kind_lines(srs, "source table full")), "the table-full refusal")
        [first] = kind_lines(srs, "source table full")
        assert "sessionID[0x00000002] from 127.0.0.4" in first and "'legit/2'" in first
        late = await RawClient(srs, "127.0.0.7", 30).connect()  # and an attacker after it
        clients.append(late)
        late.send_sirs(["junk/late"], n)
        assert srs.rss() - idle < 50 * MIB

        # the attackers leave: their (inactive) sources make room at once, no state lifetime
        for a in [*attackers, *more, late]:
            await a.close()
        await until(lambda: len(srs.lines("TCP Disconnect")) >= 10, "the attackers' disconnects")
        source.send_sirs(["legit/2"], 2)
        took = await until(lambda: "legit/2" in receiver.topics, "legit SIR after the attack")
        assert took < LEGIT_WITHIN
        assert srs.alive
        assert_one_line_per_kind(
            srs, ["source quota per client", "source quota per host", "source table full"]
        )
    finally:
        for c in clients:
            await c.close()
        assert await srs.stop() == 0
