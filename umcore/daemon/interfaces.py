"""Interface specifications for the daemons: re-exported from :mod:`umcore.aio.interfaces`.

Theory of operation
-------------------
The resolution of UM interface specifications (address, CIDR network, device name, host name)
moved to :mod:`umcore.aio.interfaces` so that client contexts use it too; daemons keep importing
it from here.
"""

from __future__ import annotations

from umcore.aio.interfaces import Resolved, local_addresses, resolve

__all__ = ["Resolved", "local_addresses", "resolve"]
