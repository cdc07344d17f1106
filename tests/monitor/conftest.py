"""The monitoring tests need the generated protobuf modules: build them if missing or stale
(``make proto`` does the same; this keeps ``pytest tests/monitor`` working on its own).

The ``promtool`` fixture and :func:`promtool_check` live in ``tests/conftest.py`` (the
integration tests use them too); the helper is re-exported here for older imports."""

from __future__ import annotations

from tests.conftest import promtool_check
from umcore.monitor import protogen

__all__ = ["promtool_check"]

protogen.generate()
