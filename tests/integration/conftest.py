"""Fixtures of the integration tests: an lbmrd subprocess, the process configuration's reset,
the persistence topology (lbmrd plus Stores on demand)."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest

from tests.integration.daemon_proc import DaemonProcess
from tests.integration.persistkit import Topology, topology
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


@pytest.fixture
async def topo(tmp_path: Path, lbmrd: DaemonProcess) -> AsyncIterator[Topology]:
    """The persistence tests' topology: ``lbmrd`` for resolution, Stores added by the test
    (``await topo.add_store()``), every process stopped after it."""
    async with topology(tmp_path, lbmrd) as t:
        yield t
