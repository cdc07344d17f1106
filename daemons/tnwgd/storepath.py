"""Receiver <-> Store traffic through the DRO: the asyncio side of :mod:`umcore.dro.storepath`.

Theory of operation
-------------------
The relaying decisions are :class:`umcore.dro.storepath.StorePath`'s (one per DRO).  This
adapter moves bytes: it takes the persistence traffic that reaches an endpoint portal's source
context's request port -- receivers' PREGs, consumption ACKs, keepalives and RXREQs for the
Stores a relayed SRI named at that port, the Stores' answers, keepalives and retransmissions --
before the client library or the late-join/UIM forwarders would (``Engine.uim_interceptor``,
chained in front of theirs), and writes what the core returns from the named portal's request
port or over a peer portal's link (:meth:`PeerPortal.send_recovery
<daemons.tnwgd.peerportal.PeerPortal.send_recovery>`, the channel late join uses; the other
DRO's :class:`~umcore.dro.recovery.RecoveryForwarder` hands it to its ``store_path``).  The
egress portal's relayed SRIs are rewritten here before they go out
(:meth:`StoreAdapter.rewrite_sri`, called by :class:`~daemons.tnwgd.persist.PortalPersistence`).
A write that fails drops that message and counts ``send_failed``: the receiver's registration,
keepalive and retransmission timers send again.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

from daemons.tnwgd.peerportal import PeerPortal
from daemons.tnwgd.portal import EndpointPortal
from daemons.tnwgd.relaysend import write_relayed
from umcore.dro import DroCore, SourceKey
from umcore.dro.storepath import StorePath
from umcore.features import immediate as im
from umcore.wire import lbmc

__all__ = ["StoreAdapter"]


# request-port traffic that may be Store traffic: persistence control (KIND_OTHER), RXREQs to a
# Store, RETRANS from one
_KINDS = frozenset({im.KIND_OTHER, im.KIND_RXREQ, im.KIND_RETRANS})


class StoreAdapter:
    """Feeds the portals' Store traffic to a :class:`StorePath` and sends its output.
    Counter: ``send_failed``."""

    def __init__(
        self,
        core: DroCore,
        portals: Mapping[str, EndpointPortal | PeerPortal],
        now: Callable[[], float],
    ) -> None:
        self.portals = portals
        self.now = now
        self.send_failed = 0

        def domain_of(name: str) -> int | None:
            p = portals.get(name)
            return p.domain_id if isinstance(p, EndpointPortal) else None

        self.path = StorePath(core.ingress_of, core.portal_address, core.is_peer, domain_of)
        core.recovery.store_path = self.path.receive_peer  # what peer links bring

    def attach(self, portal: EndpointPortal) -> None:
        """Take ``portal``'s Store traffic (call after the late-join forwarder attached)."""
        src = portal.src
        if src is None:
            return
        name = portal.name
        after = src.uim_interceptor
        path = self.path
        portal.persist.store_path = self

        def intercept(msg: lbmc.LBMCMessage, peer_ip: str, kind: str) -> bool:
            if kind in _KINDS and path.receive_local(name, msg, self.now()):
                self.flush()
                return True
            if kind == im.KIND_OTHER:
                return False  # not Store traffic: the context's own (it counts it)
            return after(msg, peer_ip, kind) if after is not None else False

        src.uim_interceptor = intercept

    def rewrite_sri(
        self, portal: str, source: SourceKey, transport_idx: int, frame: bytes
    ) -> bytes:
        return self.path.rewrite_sri(portal, source, transport_idx, frame)

    def flush(self) -> None:
        """Write what the path asked to send (to request ports, over peer links)."""
        self.send_failed += write_relayed(
            self.portals, self.path.take_peer_sends(), self.path.take_sends(), "Store message"
        )
