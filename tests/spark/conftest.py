"""One SparkSession for the whole run (starting one costs seconds), and the marker's rules.

Every test here carries the ``spark`` marker.  Without Java or pyspark the tests are skipped on
a developer's machine, but fail under CI (``CI`` set): CI must run them."""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from typing import Any

import pytest


def _missing() -> str | None:
    if shutil.which("java") is None and not os.environ.get("JAVA_HOME"):
        return "no Java runtime (java on PATH or JAVA_HOME)"
    try:
        import pyarrow  # noqa: F401
        import pyspark  # noqa: F401
    except ImportError as exc:
        return f"pyspark/pyarrow not installed ({exc}); pip install -e '.[spark]'"
    return None


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    here = os.path.dirname(__file__)
    for item in items:
        if str(item.fspath).startswith(here):
            item.add_marker(pytest.mark.spark)


@pytest.fixture(scope="session")
def spark() -> Iterator[Any]:
    why = _missing()
    if why is not None:
        if os.environ.get("CI"):
            pytest.fail(f"spark tests must run in CI: {why}")
        pytest.skip(why)
    from umcore.spark.session import start_session

    # two cores are shared with other test runs: two tasks at a time, small memory
    # the Store's data sources are registered by test_umestore (register_umestore), as a user
    # of a session without them would
    session = start_session(
        "local[2]", app="pyum-tests", conf={"spark.driver.memory": "1g"}, umestore=False
    )
    yield session
    session.stop()
