"""Writing what the DRO's relaying cores (late join/OTR, Store traffic) asked to send.

Theory of operation
-------------------
:class:`umcore.dro.recovery.RecoveryForwarder` and :class:`umcore.dro.storepath.StorePath` both
hand back two lists: messages for a peer portal's link (``(peer portal, source, message)``) and
messages to write from an endpoint portal's request port to an address (``(portal, address,
message)``, a UIM connection as the client library's late join uses).  :func:`write_relayed`
writes both and returns how many it could not: no such portal, no request port, a link down
or a full connection queue.  A failed write drops that one message; the receiver's or the
Store's timers send again, so nothing here retries.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping

from daemons.tnwgd.peerportal import PeerPortal
from daemons.tnwgd.portal import EndpointPortal
from umcore.dro import SourceKey
from umcore.errors import UMError

__all__ = ["write_relayed"]

log = logging.getLogger("tnwgd")


def write_relayed(
    portals: Mapping[str, EndpointPortal | PeerPortal],
    peer_sends: Iterable[tuple[str, SourceKey, bytes]],
    sends: Iterable[tuple[str, tuple[str, int], bytes]],
    what: str,
) -> int:
    """Send ``peer_sends`` over peer links and ``sends`` from request ports; ``what`` names
    the traffic in the debug log of a dropped message.  Returns the number dropped."""
    failed = 0
    for peer_name, source, message in peer_sends:
        peer = portals.get(peer_name)
        if not isinstance(peer, PeerPortal) or not peer.send_recovery(source, message):
            failed += 1
    for name, addr, data in sends:
        p = portals.get(name)
        src = p.src if isinstance(p, EndpointPortal) else None
        port = src.features.port if src is not None else None
        if port is None:
            failed += 1
            continue
        try:
            port.send(addr, data)
        except UMError as exc:  # WouldBlock (full connection queue) among them
            failed += 1
            log.debug("portal %s: %s to %s:%d dropped: %s", name, what, *addr, exc)
    return failed
