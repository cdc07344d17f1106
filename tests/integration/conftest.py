"""Fixtures of the integration tests: an lbmrd subprocess, the process configuration's reset."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator

import pytest

from tests.integration.daemon_proc import DaemonProcess
from umcore.config.attributes import reset_global_configuration


@pytest.fixture
async def lbmrd() -> AsyncIterator[DaemonProcess]:
    """An lbmrd on loopback, on an ephemeral port (``lbmrd.address``); stopped after the test."""
    d = await DaemonProcess.start("lbmrd", "-i", "127.0.0.1", "-p", "0")
    try:
        yield d
    finally:
        await d.stop()


@pytest.fixture
def reset_configuration() -> Iterator[None]:
    """After the test, the process configuration is the default one again."""
    yield
    reset_global_configuration(None)
