"""The one base of every sans-IO core's events.

Theory of operation
-------------------
A core reports what happened (a source resolved, a connection event, a lifetime ran out) as an
event: a frozen, slotted dataclass deriving from :class:`CoreEvent`, handed out by the core's
``take_*`` methods or returned by its ``receive_*`` methods.  Frozen, because an event is a fact
the adapter may pass on and keep; slotted, because some cores hand out many.  One base lets an
adapter or a log treat every core's events alike (``isinstance(ev, CoreEvent)``).
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["CoreEvent"]


@dataclass(frozen=True, slots=True)
class CoreEvent:
    """Base of the events of every sans-IO core."""
