"""The monitoring tests need the generated protobuf modules: build them if missing or stale
(``make proto`` does the same; this keeps ``pytest tests/monitor`` working on its own)."""

from __future__ import annotations

import os
import shutil
import subprocess

import pytest

from umcore.monitor import protogen

protogen.generate()


@pytest.fixture(scope="session")
def promtool() -> str:
    """Prometheus' ``promtool``: skipped on a developer machine without it, a failure in CI
    (``CI`` set; .ci/run installs Debian's ``prometheus`` package), like the tshark fixture."""
    exe = shutil.which("promtool")
    if exe is None:
        if os.environ.get("CI"):
            pytest.fail("promtool is required in CI (.ci/run installs prometheus) but not found")
        pytest.skip("promtool not installed (apt-get install prometheus)")
    return exe


def promtool_check(exe: str, exposition: bytes) -> subprocess.CompletedProcess[bytes]:
    """Run ``promtool check metrics`` on an exposition; bounded in time."""
    return subprocess.run(
        [exe, "check", "metrics"], input=exposition, capture_output=True, timeout=60, check=False
    )
