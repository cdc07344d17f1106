"""The kill loop (issue 17): umesrc sends with stability notification while the Store (disk
repository) is SIGKILLed and restarted ten times at random moments; then a fresh umercv recovers
every message umesrc reported stable, each the one its sequence number names (``-V``: the
sequence number is in the payload, with a CRC of the rest), none twice, none missing -- so the
source never re-used a sequence number across the Store's deaths, and nothing acknowledged was
lost.  The seed is fixed (the kill moments are reproducible up to the machine's timing)."""

from __future__ import annotations

import asyncio
import random
import re
import signal
from pathlib import Path

from tests.integration.daemon_proc import DaemonProcess
from tests.integration.helpers import until
from tests.tools.test_ume_cli import RCV_SUMMARY, SRC_SUMMARY
from tests.tools.test_ume_pair import TOPIC, client_config, start_store, store_dir
from tests.tools.toolproc import TIMEOUT, free_tcp_port, run_tool, start_tool

CYCLES = 10
N = 1500
RATE = 150  # msgs/s: ten seconds of sending, long enough for ten kills and restarts
SEED = 17
STABLE = re.compile(r"message stable\. SQN (\d+)\. Flags 0x([0-9a-f]+)")
STABLE_FLAG = 0x4  # LBM_SRC_EVENT_UME_MESSAGE_STABLE_EX_FLAG_STABLE


async def test_ten_store_kills_lose_nothing_stable(lbmrd: DaemonProcess, tmp_path: Path) -> None:
    rng = random.Random(SEED)
    port = free_tcp_port()
    xml = store_dir(lbmrd, tmp_path, port)
    st = await start_store(xml)
    cfg = client_config(
        tmp_path / "c.cfg",
        lbmrd,
        "source ume_store_activity_timeout 1000\n"
        "source ume_store_check_interval 200\n"
        "source ume_registration_interval 300\n"
        "source ume_message_stability_timeout 1000\n",
    )
    src = await start_tool(
        "umesrc", "-c", str(cfg), "-S", f"127.0.0.1:{port}", "-M", str(N), "-m", str(RATE),
        "-V", "-v", "-L", str(4 * TIMEOUT), TOPIC,
    )  # fmt: skip

    def stable() -> set[int]:
        return {
            int(m.group(1))
            for x in src.all_lines()
            if (m := STABLE.search(x)) and int(m.group(2), 16) & STABLE_FLAG
        }

    kills = 0
    try:
        await src.wait_for_line(r"message stable\. SQN", TIMEOUT)
        for _ in range(CYCLES):
            await asyncio.sleep(rng.uniform(0.1, 0.7))  # a random moment: the kill itself
            await st.kill()
            kills += 1
            st = await start_store(xml)
            # registered again before the next kill (else the kills only hit a Store no source
            # talks to)
            await src.wait_for_line(r"registration success\. RegID \d+\. Flags 0x1 OLD", TIMEOUT)
            src.lines[:] = [x for x in src.lines if "registration success" not in x]
        await src.wait_for_line(rf"^umesrc: sent {N} messages", 4 * TIMEOUT)
        await until(lambda: stable() >= set(range(N)), "every message stable", timeout=TIMEOUT)
        # a fresh umercv while the source lingers (a receiver learns its Stores from the
        # source's SRI: no source, no registration -- persistence-store.md trap 1)
        rc, out = await run_tool("umercv", "-c", str(cfg), "-r", str(N), "-V", TOPIC)
        assert rc == 0, "\n".join(out[-30:])
        got = RCV_SUMMARY.match(out[-1])
        assert got, out[-30:]
        messages, unrecoverable, duplicates, _recovered, verify_errors = got.groups()[:5]
        assert (messages, unrecoverable, duplicates, verify_errors) == (str(N), "0", "0", "0")
        assert await src.stop(signal.SIGINT) == 0
    finally:
        await src.kill()
        await st.stop(signal.SIGINT)
    assert kills == CYCLES
    found = SRC_SUMMARY.match(src.all_lines()[-1])
    assert found and found.group(1) == str(N), src.all_lines()[-30:]
