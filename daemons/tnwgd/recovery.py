"""Late join and OTR across the DRO: the asyncio side of :mod:`umcore.dro.recovery`.

Theory of operation
-------------------
The forwarding decisions are the core's (:class:`umcore.dro.recovery.RecoveryForwarder`, held
by the routing core as ``core.recovery``; the portals tell it where origins take requests and
which transport index each proxy source advertises).  This adapter only moves bytes: it takes
the late-join and OTR traffic that reaches a portal's source context's request port --
LJI_REQ and UME_RXREQ from receivers of the portal's proxy sources, LJ_INFO and RETRANS from
the origins -- before the client library would handle it (``Engine.uim_interceptor``, chained in
front of the UIM and MIM forwarders'), gives it to the core with the runtime's clock and writes
what the core returns from the named portal's request port (a UIM connection, as late join
uses) or over a peer portal's link (:meth:`PeerPortal.send_recovery
<daemons.tnwgd.peerportal.PeerPortal.send_recovery>`; what a link brings reaches the core
through :func:`umcore.dro.peerglue.deliver`, and the runtime's pump flushes what that produced).
What the core does not take (a request naming none of the portal's proxy sources, an answer
nobody waits for) is left to the context, as before.  A write that fails (no connection, a full
queue, a link down) drops that message and counts ``send_failed``: the receiver asks again
after its retransmit/OTR interval.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING

from daemons.tnwgd.peerportal import PeerPortal
from daemons.tnwgd.portal import EndpointPortal
from daemons.tnwgd.relaysend import write_relayed
from umcore.features import immediate as im
from umcore.wire import lbmc

if TYPE_CHECKING:
    from umcore.dro import DroCore

__all__ = ["RecoveryAdapter"]


_REQUESTS = frozenset({im.KIND_LJI_REQ, im.KIND_RXREQ})
_REPLIES = frozenset({im.KIND_LJ_INFO, im.KIND_RETRANS})


class RecoveryAdapter:
    """Feeds the portals' late-join/OTR traffic to ``core.recovery`` and sends its output.
    Counter: ``send_failed``."""

    def __init__(
        self,
        core: DroCore,
        portals: Mapping[str, EndpointPortal | PeerPortal],
        now: Callable[[], float],
    ) -> None:
        self.core = core
        self.forwarder = core.recovery
        self.portals = portals
        self.now = now
        self.send_failed = 0

    def attach(self, portal: EndpointPortal) -> None:
        """Take ``portal``'s late-join/OTR traffic (call after the UIM forwarder attached:
        other request-port traffic still goes to the interceptor found there)."""
        src = portal.src
        if src is None:
            return
        name = portal.name
        after = src.uim_interceptor
        fwd = self.forwarder

        def intercept(msg: lbmc.LBMCMessage, peer_ip: str, kind: str) -> bool:
            if kind in _REQUESTS:
                taken = fwd.receive_request(name, msg, self.now())
            elif kind in _REPLIES:
                taken = fwd.receive_reply(name, msg, self.now())
            else:
                return after(msg, peer_ip, kind) if after is not None else False
            self.flush()
            # not a request for one of our proxy sources, nor an answer we wait for: the
            # context handles it as it would without the DRO (counts it, or its own use)
            return taken

        src.uim_interceptor = intercept

    def flush(self) -> None:
        """Write what the core asked to send (to request ports, over peer links)."""
        self.send_failed += write_relayed(
            self.portals,
            self.forwarder.take_peer_sends(),
            self.forwarder.take_sends(),
            "late join/OTR message",
        )
