"""Multicast immediate messages across the DRO: the sockets around ``DroCore.receive_mim``.

Theory of operation
-------------------
Per endpoint portal whose TRD has MIM reception on (``mim_incoming_address`` other than
0.0.0.0 in the portal's source-context options, as for any UM context), :class:`MimForwarder`
listens on that group and port (a socket of its own, shared with the portal's contexts by
address reuse) and orders the datagrams per MIM transport session
(:class:`~umcore.features.immediate.MimReceiver`).  Every data message goes to the core
(:meth:`DroCore.receive_mim <umcore.dro.DroCore.receive_mim>`: topic, payload size, whether it
is a request, and the origin domain and hops of its DESTINATION header), which answers with the
egress portals (:mod:`umcore.dro.mim`: interest, the routing tree, no ACLs).

Into each egress portal's TRD the MIM is sent again on that portal's own temporary MIM transport
session (:class:`~umcore.features.immediate.MimSender`, a socket bound to the portal's
interface, to ``mim_outgoing_address``:``mim_outgoing_destination_port``), with the topic,
payload and headers as received, except:

- DESTINATION: domain id 0, the origin domain and the hops taken (the core's verdict), so no
  DRO sends it back towards its origin [inferred, :mod:`umcore.dro.mim`];
- REQUEST (``lbm_multicast_immediate_request``): rewritten to the egress portal's request port
  by the UIM forwarder (:meth:`UimForwarder.rewrite_request
  <daemons.tnwgd.uim.UimForwarder.rewrite_request>`), so the responses, which are UIMs, come
  back through this DRO.

An egress that is a peer portal (a link to another DRO) gets the MIM over its link instead
(:meth:`PeerLink.send_immediate <umcore.dro.peer.PeerLink.send_immediate>`: the message with its
topic, the same DESTINATION mark and REQUEST rewrite, the request's address zero: the responses
come back over the link); the other DRO takes it as heard at its peer portal
(:meth:`MimForwarder.receive_peer`), so the core routes it by interest from there with the
origin domain and hops of the mark, never back over that link.  A link that is down, full
(``max-queue``) or a message too long for it count as the send's error, would-block or size
error, as a socket's would.

A datagram from one of this forwarder's own sending sockets (its copy heard in the TRD it was
sent into) is dropped at once (``own_echoes``).  A send is non-blocking and never queued (MIM
has no flow control; UM: "not recommended for traffic across DROs"): a full socket buffer, an
oversized datagram or another socket error drops that copy, and the core counts it per portal.
"""

from __future__ import annotations

import errno
import logging
import os
import socket
import struct
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING

from umcore.aio.multicast import open_multicast_socket, set_multicast_sender
from umcore.aio.udp import DatagramEndpoint
from umcore.dro import MimSendResult
from umcore.dro.peer import ImmediateSend
from umcore.errors import LocalProtocolError
from umcore.features import immediate as im
from umcore.wire import lbmc

if TYPE_CHECKING:
    from daemons.tnwgd.portal import EndpointPortal
    from daemons.tnwgd.uim import ImmediatePeer, UimForwarder
    from umcore.dro import DroCore

__all__ = ["MimForwarder"]

log = logging.getLogger("tnwgd")

# The MIM TTL: UM's MIM sessions use the resolver's multicast TTL option family; a DRO portal
# forwards into its own TRD only, where the contexts' defaults apply (16, as the MIM sockets
# of umcore.aio.multicast).
MIM_TTL = 16
_DISABLED = ("", "0.0.0.0", "None")
_LINK_RESULT = {
    ImmediateSend.SENT: MimSendResult.SENT,
    ImmediateSend.WOULD_BLOCK: MimSendResult.WOULD_BLOCK,
    ImmediateSend.TOO_LONG: MimSendResult.SIZE_ERROR,
    ImmediateSend.NOT_OPERATIONAL: MimSendResult.ERROR,
}


def _session_id() -> int:
    return int.from_bytes(os.urandom(4), "big") or 1


class _Port:
    """One endpoint portal's MIM sockets and session state."""

    __slots__ = ("dest", "own", "receiver", "rx", "sender", "tx")

    def __init__(self) -> None:
        self.rx: DatagramEndpoint | None = None
        self.tx: socket.socket | None = None
        self.own: tuple[str, int] | None = None
        self.dest: tuple[str, int] = ("224.10.10.21", 14401)
        self.receiver = im.MimReceiver()
        self.sender: im.MimSender | None = None

    def close(self) -> None:
        if self.rx is not None:
            self.rx.close()
            self.rx = None
        if self.tx is not None:
            self.tx.close()
            self.tx = None


class MimForwarder:
    """Forwards MIMs between the endpoint portals (see the module docstring).  Counters
    (cumulative, all portals): ``received``, ``own_echoes``, ``malformed``, ``lost`` (datagrams
    missing in a MIM session), ``not_mim`` (something else from a peer link); per portal ones
    are the core's
    (:meth:`DroCore.mim_stats <umcore.dro.DroCore.mim_stats>`)."""

    def __init__(
        self,
        core: DroCore,
        portals: dict[str, EndpointPortal],
        now: Callable[[], float],
        uim: UimForwarder,
        peers: Mapping[str, ImmediatePeer] | None = None,
    ) -> None:
        """``portals``: the endpoint portals; ``peers``: the peer portals (links to DROs)."""
        self.core = core
        self.portals = portals
        self.peers: Mapping[str, ImmediatePeer] = peers if peers is not None else {}
        self.now = now
        self.uim = uim
        self._ports: dict[str, _Port] = {}
        self._own: set[tuple[str, int]] = set()
        self.received = 0
        self.own_echoes = 0
        self.malformed = 0
        self.lost = 0
        self.not_mim = 0

    # ------------------------------------------------------------------ life
    def attach(self, portal: EndpointPortal) -> None:
        """Open ``portal``'s MIM sockets (call once it started; again after a restart)."""
        self.detach(portal.name)
        eng = portal.src
        if eng is None:
            return
        port = _Port()
        o = eng.options
        interface = o.interface("default_interface") or eng.advertised_ip
        port.dest = (
            str(o.get("mim_outgoing_address")),
            int(o.get("mim_outgoing_destination_port")),
        )
        tx = socket.socket(socket.AF_INET, socket.SOCK_DGRAM, socket.IPPROTO_UDP)
        try:
            tx.setblocking(False)
            set_multicast_sender(tx, interface, MIM_TTL)
            tx.bind((interface, 0))
        except BaseException:
            tx.close()
            raise
        port.tx = tx
        port.own = tx.getsockname()[:2]
        self._own.add(port.own)
        port.sender = im.MimSender(_session_id(), eng.options.seconds("mim_src_deletion_timeout"))
        incoming = str(o.get("mim_incoming_address"))
        if incoming not in _DISABLED:
            try:
                sock = open_multicast_socket(
                    incoming, int(o.get("mim_incoming_destination_port")), interface
                )
            except BaseException:
                port.close()
                self._own.discard(port.own)
                raise
            name = portal.name
            port.rx = DatagramEndpoint(
                eng.loop, sock, lambda data, addr: self._on_datagram(name, data, addr)
            )
        self._ports[portal.name] = port

    def detach(self, name: str) -> None:
        port = self._ports.pop(name, None)
        if port is not None:
            port.close()
            if port.own is not None:
                self._own.discard(port.own)

    def close(self) -> None:
        for name in list(self._ports):
            self.detach(name)

    # ------------------------------------------------------------------ input
    def _on_datagram(self, portal: str, data: bytes | memoryview, addr: tuple[str, int]) -> None:
        if (addr[0], addr[1]) in self._own:
            self.own_echoes += 1
            return
        port = self._ports.get(portal)
        if port is None:
            return
        now = self.now()
        before = port.receiver.dropped_malformed
        msgs, lost = port.receiver.receive(data, addr, now)
        self.malformed += port.receiver.dropped_malformed - before
        self.lost += lost
        for msg in msgs:
            if msg.msg_type == lbmc.MSG_DATA:
                self.receive(portal, msg, now)

    def receive_peer(self, peer: str, msg: lbmc.LBMCMessage) -> None:
        """A MIM the DRO at the other end of peer portal ``peer`` sent over the link."""
        if msg.msg_type != lbmc.MSG_DATA:
            self.not_mim += 1
            return
        self.receive(peer, msg, self.now())

    def receive(self, ingress: str, msg: lbmc.LBMCMessage, now: float) -> None:
        """One MIM data message heard at portal ``ingress``: routed by the core, sent on."""
        self.received += 1
        tn = msg.find(lbmc.TopicName)
        topic = im.decode_topic(tn.topic) if tn is not None else None
        req = msg.find(lbmc.Request)
        dest = msg.find(lbmc.Destination)
        size = len(msg.payload)
        route = self.core.receive_mim(
            ingress,
            topic,
            size,
            request=req is not None,
            origin_domain=dest.orig_domain_id if dest is not None else None,
            hops_taken=dest.hops_taken if dest is not None else 0,
        )
        if not route.egress:
            return
        kept = [h for h in msg.headers if type(h) not in (lbmc.TopicName, lbmc.Destination)]
        mark = lbmc.Destination(
            domain_id=0, hops_taken=route.hops_taken, orig_domain_id=route.origin_domain
        )
        for name in route.egress:
            peer = self.peers.get(name)
            port = self._ports.get(name)
            if peer is None and port is None:
                self.core.receive_mim_sent(name, topic, size, MimSendResult.ERROR, req is not None)
                continue
            headers: list[lbmc.Header] = [mark]
            for h in kept:
                if type(h) is lbmc.Request:
                    h = self.uim.rewrite_request(ingress, name, h, now)
                headers.append(h)
            if peer is not None:  # over the link to the other DRO, with its topic
                if tn is not None:
                    headers.insert(0, tn)
                out = lbmc.LBMCMessage(lbmc.MSG_DATA, 0, 0, headers, msg.payload)
                sent = _LINK_RESULT[peer.send_immediate(out, multicast=True)]
                self.core.receive_mim_sent(name, topic, size, sent, req is not None)
                continue
            assert port is not None
            result = self._send(port, topic, bytes(msg.payload), headers, now)
            self.core.receive_mim_sent(name, topic, size, result, req is not None)

    def _send(
        self,
        port: _Port,
        topic: str | None,
        payload: bytes,
        headers: list[lbmc.Header],
        now: float,
    ) -> MimSendResult:
        tx, sender = port.tx, port.sender
        if tx is None or sender is None:
            return MimSendResult.ERROR
        try:
            dgram = sender.datagram(
                topic, payload, now, new_session_id=_session_id(), extra=headers
            )
            tx.sendto(dgram, port.dest)
        except BlockingIOError:
            return MimSendResult.WOULD_BLOCK
        except OSError as exc:
            if exc.errno == errno.EMSGSIZE:
                return MimSendResult.SIZE_ERROR
            log.debug("MIM to %s:%d not sent: %s", *port.dest, exc)
            return MimSendResult.ERROR
        except (ValueError, struct.error, LocalProtocolError) as exc:  # does not encode
            log.debug("MIM to %s:%d not built: %s", *port.dest, exc)
            return MimSendResult.SIZE_ERROR
        return MimSendResult.SENT
