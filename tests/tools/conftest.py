"""Fixtures of the tools tests: the integration suite's lbmrd subprocess."""

from tests.integration.conftest import lbmrd

__all__ = ["lbmrd"]
