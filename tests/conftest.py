"""Shared fixtures: the tshark oracle, promtool, and helpers for daemons run as subprocesses."""

from __future__ import annotations

import os
import shutil
import subprocess

import pytest

from tests.oracle import Tshark


@pytest.fixture(scope="session")
def tshark() -> Tshark:
    """tshark, our independent wire oracle: skipped on a developer machine without it, a failure
    in CI (``CI`` set), so the oracle suite can never be silently skipped there."""
    exe = shutil.which("tshark")
    if exe is None:
        if os.environ.get("CI"):
            pytest.fail("tshark is required in CI (.ci/run installs it) but was not found")
        pytest.skip("tshark not installed (apt-get install tshark)")
    return Tshark(exe)


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
