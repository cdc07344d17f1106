"""Fixtures of the Spectrum / Hot Failover / sending-to-sources / performance tests: the API
tests' loopback configuration (multicast topic resolution on a test-only group, TCP sessions on
ephemeral ports)."""

from tests.api.conftest import mcast_config, opts

__all__ = ["mcast_config", "opts"]
