"""A DRO peer portal in tnwgd: one DRO-to-DRO link (``<peer>``) driven by the routing core.

Theory of operation
-------------------
A peer portal is the sans-IO :class:`~umcore.dro.peer.PeerLink` (the link protocol: hello,
keepalive, route information, interest, source advertisements, batched data frames) and its
asyncio adapter :class:`~umcore.aio.dropeer.PeerPortalLink` (the TCP connection: initiator or
acceptor, reconnect back-off, LZ4, TLS).  This module joins them to the daemon's runtime the
way :class:`tests.dro.test_dropeer_core.MiniDro` does, through :mod:`umcore.dro.peerglue`:

* **Link -> core.**  After every input of the adapter (bytes, timer, connection change) its
  ``on_activity`` calls :func:`~umcore.dro.peerglue.deliver`: ``LinkUp`` becomes
  ``core.receive_portal_up(peer_node_id=...)``, ``LinkDown`` ``receive_portal_down`` (the core
  forgets what it learned through the link and recalculates with back-off), route information,
  interest and sources their ``receive_*``, frames ``receive_frame``.  Then the runtime drains
  the endpoint portals at once (the data path: frames from the link leave through the proxy
  sources in the same loop turn) and schedules a pump for the rest.
* **Core -> link.**  The runtime's pump hands this portal its share of the core's output like
  an endpoint portal's: :meth:`PeerPortal.apply` (commands: proxy source advertisements become
  source records on the link, proxy receiver commands need nothing), :meth:`send_lbmr` (the
  core's TNWG interest), :meth:`send_route_info`, and :meth:`drain` (the core's egress queue of
  this portal onto the link while the link is writable; past ``<max-queue>`` the core's queue
  drops and counts, the link never blocks an endpoint portal).  After each the adapter
  flushes.  When the link stops taking data (its own queue at ``max-queue`` because the socket
  is flow-controlled) one task waits for it to take data again and pumps.

Immediate messages (UIMs, requests, responses, MIMs) the runtime's forwarders route to this
portal go over the link with :meth:`PeerPortal.send_immediate`; those the other DRO sends come
out of the link as :class:`~umcore.dro.peer.ImmediateReceived` events and go to the runtime
(``host.receive_immediate``), which hands them to its UIM or MIM forwarder as arrived here.

The portal offers the runtime's portal view (``name``, ``index``, ``domain_id`` None, ``kind``
``"peer"``, ``contexts()`` none) plus :attr:`link` and :attr:`adapter`, read by the monitor for
the peer fields of ``DROMonMsg`` (link state, keepalive RTT, bytes and messages each way,
drops).  Bad TLS files or compression are refused by :func:`check_peers` before the daemon
starts (a :class:`~umcore.errors.ConfigError` naming the file, line and element).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import struct
from typing import Protocol

from umcore.aio.dropeer import PeerPortalLink, peer_security
from umcore.config.dro import DROConfig, Peer
from umcore.dro import (
    CreateProxySource,
    DroCore,
    PortalCommand,
    SourceKey,
    UpdateProxySource,
)
from umcore.dro.inferred import RouteInfo
from umcore.dro.peer import ImmediateReceived, ImmediateSend, LinkDown, LinkUp, PeerLink
from umcore.dro.peerglue import deliver, link_command, link_lbmr
from umcore.engine import Engine
from umcore.wire import lbmc, lbmr

__all__ = ["PeerPortal", "check_peers"]

log = logging.getLogger("tnwgd")

# An LBMC data frame's header (ver/type, next header, length, topic index, sequence number):
# the topic index of a run's first frame is the one its originating session gave the topic.
_FRAME_HEADER = struct.Struct("!BBHII")


class PeerHost(Protocol):
    """What a peer portal needs of the runtime (the same as an endpoint portal's host)."""

    @property
    def core(self) -> DroCore: ...
    @property
    def node_id(self) -> int: ...
    def now(self) -> float: ...
    def kick(self) -> None: ...
    def drain(self) -> None: ...
    def receive_immediate(self, portal: str, message: lbmc.LBMCMessage, multicast: bool) -> None:
        """A UIM/request/response (``multicast`` False) or MIM from the link of ``portal``."""


def check_peers(config: DROConfig) -> None:
    """Refuse, before anything starts, a peer portal whose compression or TLS files are bad
    (ConfigError with the file, the line and the element)."""
    for p in config.peers:
        peer_security(p, str(config.source)).close()


class PeerPortal:
    """One ``<peer>`` portal of the running DRO (see the module docstring)."""

    kind = "peer"
    domain_id: int | None = None

    def __init__(self, host: PeerHost, config: DROConfig, peer: Peer, index: int) -> None:
        self.host = host
        self.core = host.core
        self.config = peer
        self.name = peer.name
        self.index = index
        self.cost = peer.cost
        self.link = PeerLink(peer, host.node_id, config.daemon.name or "")
        self.adapter = PeerPortalLink(
            peer, self.link, source=str(config.source), on_activity=self._activity
        )
        #: Frames moved from the core's queue onto the link, and their bytes.
        self.frames_forwarded = 0
        self.bytes_forwarded = 0
        #: Times the link refused more data (its queue at max-queue): the core's queue held it.
        self.would_block = 0
        #: Sessions that came up / went down (the adapter logs each with its reason).
        self.links_up = 0
        self.links_down = 0
        self.tr_malformed = 0  # an endpoint's figure; a peer has no topic resolution datagrams
        self._waiter: asyncio.Task[None] | None = None
        self._closed = False

    # ------------------------------------------------------------------ portal view
    @property
    def up(self) -> bool:
        return self.link.up

    def contexts(self) -> list[Engine]:
        return []

    def context_names(self) -> tuple[str | None, str | None]:
        return None, None

    def context_app_ids(self) -> list[tuple[str, Engine]]:
        return []

    # ------------------------------------------------------------------ life
    async def start(self) -> None:
        await self.adapter.start()

    async def close(self) -> None:
        self._closed = True
        if self._waiter is not None:
            self._waiter.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._waiter
            self._waiter = None
        await self.adapter.close()

    def describe(self) -> str:
        """The log line of a started portal."""
        st = self.config.single_tcp
        if st.role == "acceptor":
            where = f"accepting on port {self.adapter.port}"
        else:
            where = f"connecting to {st.address}:{st.port}"
        extras = [x for x, on in (("LZ4", st.compression), ("TLS", st.tls)) if on]
        if self.config.udp is not None:
            extras.append(f"data over UDP port {self.config.udp.port}")
        return f"peer portal [{self.name}] cost {self.cost} {where}" + (
            f" ({' + '.join(extras)})" if extras else ""
        )

    # ------------------------------------------------------------------ link -> core
    def _activity(self) -> None:
        if self._closed:
            return
        now = self.host.now()
        # frames first taken here so that deliver() hands over only the events; each run of one
        # source's frames (views of the link's immutable read buffer: the originating source's
        # LBMC frames, header and sequence number unchanged) goes to the core in one call
        runs = self.link.take_frame_runs()
        events = deliver(self.core, self.link, now)
        if runs:
            self._frames_in(runs)
        for ev in events:
            if isinstance(ev, ImmediateReceived):
                self.host.receive_immediate(self.name, ev.message, ev.multicast)
            elif isinstance(ev, LinkUp):
                self.links_up += 1
            elif isinstance(ev, LinkDown):
                self.links_down += 1
        self.host.drain()
        self.host.kick()

    def _frames_in(self, runs: list[tuple[SourceKey, list[memoryview]]]) -> None:
        receive_frames = self.core.receive_frames
        portal = self.name
        unpack = _FRAME_HEADER.unpack_from
        for source, run in runs:
            first = run[0]
            if len(first) >= _FRAME_HEADER.size:
                receive_frames(portal, source, unpack(first)[3], run)

    # ------------------------------------------------------------------ core -> link
    def apply(self, commands: list[PortalCommand]) -> None:
        now = self.host.now()
        for cmd in commands:
            # a persistent source's identity travels with it (umcore.dro.persist)
            persist = (
                self.core.persistence(cmd.source)
                if isinstance(cmd, (CreateProxySource, UpdateProxySource))
                else None
            )
            link_command(
                self.link, cmd, now, persist, late_join=self.core.recovery.offers_late_join
            )
        self.adapter.flush()

    def send_control(self, source: SourceKey, frame: bytes) -> None:
        """A control frame (SRI) the core queued for this portal: over the link."""
        self.link.send_sri(source, frame, self.host.now())
        self.adapter.flush()

    def send_lbmr(self, packet: lbmr.LBMRPacket) -> None:
        link_lbmr(self.link, packet, self.host.now())
        self.adapter.flush()

    def send_recovery(self, source: SourceKey, message: bytes) -> bool:
        """A late-join/OTR message of ``source`` over the link (daemons.tnwgd.recovery)."""
        sent = self.link.send_recovery(source, message, self.host.now())
        self.adapter.flush()
        return sent

    def send_immediate(self, message: lbmc.LBMCMessage, *, multicast: bool) -> ImmediateSend:
        """A UIM/request/response or a MIM the runtime's forwarders route out of this portal:
        over the link (:meth:`PeerLink.send_immediate`); how it went, for their counters."""
        result = self.link.send_immediate(message, self.host.now(), multicast=multicast)
        self.adapter.flush()
        return result

    def send_route_info(self, info: RouteInfo) -> None:
        self.link.send_route_info(info, self.host.now())
        self.adapter.flush()

    def drain(self, max_frames: int = 0) -> bool:
        """Move up to ``max_frames`` (0: no bound) frames of the core's queue onto the link
        while it is writable; True if frames are left only because the share ran out."""
        queue = self.core.queue(self.name)
        link = self.link
        send_run = link.send_run
        now = self.host.now()
        limit = max_frames if max_frames > 0 else len(queue)
        moved = 0
        nbytes = 0
        key: SourceKey | None = None
        while moved < limit and link.writable:
            run = queue.peek_run()  # the head run: frames of one source, one size, in order
            if run is None:
                break
            otid, topic = run.otid, run.topic
            if key is None or key.otid != otid or key.topic != topic:
                key = SourceKey(otid, topic)
            size = run.size
            # the run's frames at once, as many as the link takes (one batch append per run)
            sent = send_run(key, run.sqn, run.data, size, min(run.count, limit - moved), now)
            if not sent:
                break
            queue.consume(sent)
            moved += sent
            nbytes += sent * size
        self.frames_forwarded += moved
        self.bytes_forwarded += nbytes
        self.adapter.flush()
        left = len(queue) > 0
        if left and link.up and not link.writable:
            self.would_block += 1
            if self._waiter is None and not self._closed:
                self._waiter = asyncio.get_running_loop().create_task(self._wait_writable())
            return False
        return left and moved >= limit

    async def _wait_writable(self) -> None:
        try:
            await self.adapter.wait_writable()
        finally:
            self._waiter = None
        self.host.kick()
