"""A secondary address on this host, for real: in a private network namespace (``unshare --net``,
so the host's interfaces are never changed) whose lo carries ``127.0.1.1/32`` beside
``127.0.0.1``, the interface code and lbmrd accept ``127.0.1.1``.  Skipped where a namespace
cannot be made (no ``unshare``/``ip``, or not permitted)."""

from __future__ import annotations

import asyncio
import os
import shlex
import shutil
import subprocess
import sys

import pytest

from tests.integration.daemon_proc import LISTENING, ROOT, START_TIMEOUT, DaemonProcess

TIMEOUT = 30
SECONDARY = "127.0.1.1"
# Inside the new namespace: bring lo up (127.0.0.1) and give it a secondary address.
SETUP = f"ip link set lo up && ip addr add {SECONDARY}/32 dev lo"


def in_netns(command: list[str]) -> list[str]:
    """``command`` run in a fresh network namespace after SETUP (exec'd: same process id)."""
    return ["unshare", "--net", "sh", "-c", f"{SETUP} && exec {shlex.join(command)}"]


@pytest.fixture(scope="module")
def netns() -> None:
    if shutil.which("unshare") is None or shutil.which("ip") is None:
        pytest.skip("unshare or ip not installed")
    try:
        proc = subprocess.run(
            in_netns(["true"]), capture_output=True, text=True, timeout=TIMEOUT, check=False
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        pytest.skip(f"cannot make a network namespace: {exc}")
    if proc.returncode != 0:
        pytest.skip(f"cannot make a network namespace: {proc.stderr.strip()}")


SNIPPET = f"""
from umcore.aio.interfaces import context_interface, local_addresses, resolve
from umcore.errors import ConfigError
local = local_addresses()
assert ("lo", "127.0.0.1") in local and ("lo", "{SECONDARY}") in local, local
assert resolve("{SECONDARY}").address == "{SECONDARY}"
assert resolve("127.0.1.0/24").address == "{SECONDARY}"
assert resolve("lo").address == "127.0.0.1"
assert resolve(None).address == "127.0.0.1"
assert context_interface("{SECONDARY}") == "{SECONDARY}"
try:
    resolve("127.0.2.1")
except ConfigError as exc:
    assert "lo={SECONDARY}" in str(exc), exc
else:
    raise AssertionError("127.0.2.1 accepted")
print("ok")
"""


def test_a_secondary_address_resolves(netns: None) -> None:
    proc = subprocess.run(
        in_netns([sys.executable, "-c", SNIPPET]),
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=TIMEOUT,
        check=False,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert proc.stdout.strip() == "ok"


async def test_lbmrd_listens_on_a_secondary_address(netns: None) -> None:
    command = [sys.executable, "-m", "daemons.lbmrd", "-i", SECONDARY, "-p", "0"]
    proc = await asyncio.create_subprocess_exec(
        *in_netns(command),
        cwd=ROOT,
        env=dict(os.environ, PYTHONUNBUFFERED="1"),
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.STDOUT,
    )
    daemon = DaemonProcess(proc, None)
    try:
        match = await daemon.wait_for_line(LISTENING, START_TIMEOUT)
        assert match.group(1) == SECONDARY
        assert any(f"Using interface [{SECONDARY}]" in line for line in daemon.all_lines())
    finally:
        status = await daemon.stop()
    assert status == 0, "\n".join(daemon.all_lines())  # a clean stop on SIGTERM
