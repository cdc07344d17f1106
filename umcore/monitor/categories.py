"""The SRS daemon-statistics categories, and the names each is known by.

Theory of operation
-------------------
The SRS publishes its statistics in seven *categories* (seed-srs-lbmrd.md 1.7.1): each has its own
publishing interval (``<publishing-interval>`` child element), its own JSON envelope, and is the
unit that control requests snapshot or re-time.  The upper-case names are what travels in JSON
(``monitorInfoCategory``) and in control requests; the element names are the XML spelling.
"""

from __future__ import annotations

import enum


class Category(enum.StrEnum):
    """One SRS statistics category; the value is its wire (upper-case) name."""

    SRS_STATS = "SRS_STATS"
    UM_CLIENT_STATS = "UM_CLIENT_STATS"
    CONNECTION_EVENTS = "CONNECTION_EVENTS"
    SRS_ERROR_STATS = "SRS_ERROR_STATS"
    UM_CLIENT_ERROR_STATS = "UM_CLIENT_ERROR_STATS"
    CONFIG_OPTS = "CONFIG_OPTS"
    INTERNAL_CONFIG_OPTS = "INTERNAL_CONFIG_OPTS"

    @property
    def element(self) -> str:
        """The ``<publishing-interval>`` child element that times this category."""
        return self.value.lower().replace("_", "-")

    @classmethod
    def from_element(cls, name: str) -> Category:
        """The category timed by ``<publishing-interval><name>``; ValueError if none."""
        return cls(name.upper().replace("-", "_"))


ALL_CATEGORIES: tuple[Category, ...] = tuple(Category)

STATS_CATEGORIES = frozenset(
    {
        Category.SRS_STATS,
        Category.SRS_ERROR_STATS,
        Category.UM_CLIENT_STATS,
        Category.UM_CLIENT_ERROR_STATS,
    }
)
"""Categories whose JSON messages carry a ``stats`` array of numbers."""

PER_CLIENT_CATEGORIES = frozenset({Category.UM_CLIENT_STATS, Category.UM_CLIENT_ERROR_STATS})
"""Categories published once per connected client (with ``srsRegistrationInfo``)."""

CONFIG_CATEGORIES = frozenset({Category.CONFIG_OPTS, Category.INTERNAL_CONFIG_OPTS})
"""Categories whose JSON messages carry a ``configOptions`` array of strings."""
