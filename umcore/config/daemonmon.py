"""The ``<daemon-monitor>`` element that the Store (umestored) and the DRO (tnwgd) files share.

Theory of operation
-------------------
Both DTDs declare the same element: a ``topic`` attribute (each daemon has its own default:
``umestore.monitor``, ``tnwgd.monitor``), an optional ``<lbm-config>`` file for the monitoring
context, ``<publishing-interval>`` with one ``<group name= ivl=>`` per statistics group (the
group names differ per daemon, and each loader keeps its own rules for ``ivl``), and the
``allow`` flags of ``<remote-snapshot-request>`` and ``<remote-config-changes-request>``.
:func:`read_daemon_monitor` fills a daemon's settings object from a validated element.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Protocol

from lxml import etree

from umcore.config import xmlfile

__all__ = ["DaemonMonitorSettings", "read_daemon_monitor"]


class DaemonMonitorSettings(Protocol):
    """The daemon settings fields :func:`read_daemon_monitor` sets."""

    daemon_monitor: bool
    daemon_monitor_topic: str
    daemon_monitor_lbm_config: str | None
    daemon_monitor_intervals: dict[str, int]
    remote_snapshot_request: bool
    remote_config_changes_request: bool


def read_daemon_monitor(
    d: DaemonMonitorSettings,
    el: etree._Element,
    *,
    default_topic: str,
    source: str,
    groups: Callable[[etree._Element], dict[str, int]],
) -> None:
    """Fill ``d`` from a ``<daemon-monitor>`` element of file ``source``; ``groups`` reads the
    ``<publishing-interval>`` element (group name -> seconds)."""
    d.daemon_monitor = True
    d.daemon_monitor_topic = el.get("topic", default_topic)
    for sub in el:
        if sub.tag == "lbm-config":
            d.daemon_monitor_lbm_config = xmlfile.text_of(sub, source)
        elif sub.tag == "publishing-interval":
            d.daemon_monitor_intervals = groups(sub)
        elif sub.tag == "remote-snapshot-request":
            d.remote_snapshot_request = sub.get("allow") == "1"
        elif sub.tag == "remote-config-changes-request":
            d.remote_config_changes_request = sub.get("allow") == "1"
