"""The LBT receiver adapter (umcore.aio.lbt.LbtReceiverSession): its timer must hand the core the
deadline that fired, not the earlier loop time uvloop may run it at (else the core finds nothing
due, asks for the same deadline again and the loop spins through it)."""

from __future__ import annotations

import asyncio
import random

from umcore.aio.lbt import LbtContext, LbtReceiverSession, SourceTimer
from umcore.transport.lbt import ReceiverConfig
from umcore.transport.lbtrm import LbtrmReceiver
from umcore.transport.ratelimit import RateLimiter

SID = 0x0BADCAFE
NAK_PORT = 14402


def session() -> tuple[LbtReceiverSession, LbtrmReceiver]:
    loop = asyncio.get_running_loop()
    now = loop.time()
    lctx = LbtContext(loop, RateLimiter(0, 0, 0.1, now), RateLimiter(0, 0, 0.1, now))
    cfg = ReceiverConfig(nak_initial_backoff_interval=0.05)
    core = LbtrmReceiver(SID, NAK_PORT, cfg, loop.time(), random.Random(7))
    s = LbtReceiverSession(lctx, core, ("127.0.0.1", NAK_PORT), lambda: None, lambda: None)
    return s, core


async def test_early_timer_sends_the_due_nak_once() -> None:
    s, core = session()
    now = asyncio.get_running_loop().time()
    core.receive_data(0, 0, False, b"", 0, now)
    core.receive_data(2, 0, False, b"", 0, now)  # sequence number 1 is missing: a NAK timer
    due = core.next_timer()
    assert due is not None and due == core._nak_due
    assert isinstance(s.timer, SourceTimer)
    assert asyncio.get_running_loop().time() < due  # not due yet by the loop's clock
    s.timer.arm(due)
    s.timer._fire()  # the loop runs the callback early
    assert core.stats.naks_sent == 1 and core.stats.nak_pckts_sent == 1
    assert s.timer.fired is None
    assert s.timer.deadline is not None and s.timer.deadline > due  # re-armed past it
    s.abort()


async def test_timer_run_by_the_loop_is_never_early_for_the_core() -> None:
    """Run by the loop, the timer hands the core a time at or past the deadline (never the
    earlier loop time a timer run early would see), and the due NAK goes out."""
    s, core = session()
    loop = asyncio.get_running_loop()
    core.receive_data(0, 0, False, b"", 0, loop.time())
    core.receive_data(2, 0, False, b"", 0, loop.time())
    due = core.next_timer()
    assert due is not None
    fired = asyncio.Event()
    seen: list[float] = []
    real = core.handle_timer

    def spy(now: float) -> None:
        seen.append(now)
        real(now)
        fired.set()

    core.handle_timer = spy  # type: ignore[method-assign]
    s.timer.arm(due)
    async with asyncio.timeout(5):
        await fired.wait()
    assert seen[0] >= due  # never before the deadline as the core sees it
    assert core.stats.naks_sent == 1
    s.abort()
