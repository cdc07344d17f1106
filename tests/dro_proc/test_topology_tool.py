"""``make run ARGS="--dro"`` itself: umcore.tools.drotopology with a few messages.

Three TRDs (lbmrd, multicast, SRS), two tnwgd processes, lbmsrc in TRD1, lbmwrcv in TRD2 and
lbmrcv in TRD3.  The run must end by itself (the TRD3 receiver exits on its source's EOS) with
status 0, and both receivers' summaries must show every message and no unrecoverable loss.
Run as root, the tool enters a network namespace of its own (127.0.N.1 per TRD); otherwise it
falls back to 127.0.0.1 for all.  A child that cannot start fails the run at once.
"""

from __future__ import annotations

import asyncio
import os
import re
import sys
from pathlib import Path

import pytest

from umcore.tools import drotopology
from umcore.tools.children import START_TIMEOUT_S, ChildFailed, started

ROOT = Path(__file__).resolve().parents[2]
MESSAGES = 40
# Bound on the whole run (start-up of seven children, the source's 2 s delay and linger);
# the tool's own --timeout fails it first with its output.
RUN_TIMEOUT_S = 60.0
_SUMMARY = re.compile(r"\[(\w+)\s*\] lbmrcv: messages=(\d+) .*unrecoverable=(\d+) .*eos=(\d+)")


async def _run(*args: str) -> tuple[int, str]:
    env = dict(os.environ, PYTHONUNBUFFERED="1")
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "umcore.tools.drotopology", *args,
        cwd=ROOT, env=env, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT,
    )  # fmt: skip
    try:
        async with asyncio.timeout(RUN_TIMEOUT_S):
            out, _ = await proc.communicate()
    except TimeoutError:
        proc.kill()
        await proc.wait()
        raise
    assert proc.returncode is not None
    return proc.returncode, out.decode(errors="replace")


@pytest.mark.slow  # seven processes start: 10-20 s on a loaded 2-core machine
@pytest.mark.parametrize("variant", [(), ("--peer",)], ids=["transit", "peer-link"])
async def test_make_run_dro_delivers_across_three_trds(variant: tuple[str, ...]) -> None:
    """Transit (TRD1 -DRO1- TRD2 -DRO2- TRD3) and the peer-link variant (TRD1 -DRO1~DRO2-
    TRD3, the wildcard receiver in TRD3)."""
    rc, out = await _run(
        *variant, "--messages", str(MESSAGES), "--rate", "400", "--stats-interval", "1",
        "--timeout", "40",
    )  # fmt: skip
    tail = "\n".join(line for line in out.splitlines() if "[lbmmon]" not in line)[-4000:]
    summaries = {m.group(1): m for m in _SUMMARY.finditer(out)}
    assert rc == 0, tail
    assert "the TRD3 receiver saw its source finish" in out, tail
    for name in ("rcv3", "wrcv"):
        assert name in summaries, tail
        got = summaries[name]
        assert int(got.group(2)) == MESSAGES, tail
        assert int(got.group(3)) == 0, tail
        assert int(got.group(4)) == 1, tail
    # the DROs' statistics reached lbmmon (in TRD2; in TRD1 for the peer link)
    assert "[lbmmon]" in out


def test_separate_addresses_per_trd() -> None:
    t1, t2, t3 = drotopology.trds(True)
    assert [t.address for t in (t1, t2, t3)] == ["127.0.1.1", "127.0.2.1", "127.0.3.1"]
    assert len({t.mc_group for t in (t1, t2, t3)}) == 3
    assert {t.address for t in drotopology.trds(False)} == {"127.0.0.1"}


async def test_child_exiting_before_ready_fails_at_once() -> None:
    loop = asyncio.get_running_loop()
    t0 = loop.time()
    with pytest.raises(ChildFailed, match=r"boom exited \(status 3\) before it was ready"):
        await started(
            "boom", "-c", "import sys; print('no readiness here'); sys.exit(3)",
            ready=re.compile(rb"never printed"),
        )  # fmt: skip
    assert loop.time() - t0 < START_TIMEOUT_S / 2  # not the start-up bound: at once
