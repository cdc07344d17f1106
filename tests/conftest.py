"""Shared fixtures: the tshark oracle, and helpers for daemons run as subprocesses."""

from __future__ import annotations

import os
import shutil

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
