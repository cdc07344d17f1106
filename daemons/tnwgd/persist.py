"""Persistence across the DRO at one endpoint portal: the asyncio side of umcore.dro.persist.

Theory of operation
-------------------
What crosses the DRO for a persistent source, and why, is in :mod:`umcore.dro.persist`; this
adapter does it for one :class:`~daemons.tnwgd.portal.EndpointPortal`:

* **Ingress** (the source's TRD).  When a proxy receiver resolves or joins a source whose TIR
  carries the UME option, :meth:`PortalPersistence.identity` gives the advertisement its
  persistent identity; for a source *in* this TRD (no OTID option: not another DRO's proxy)
  :meth:`~PortalPersistence.session_up` starts the SRI requests, sent from the portal's source
  context's request port to the origin's (SRI_REQ with the origin's transport and topic index).
  The joined session's SRIs for the topic (control frames, looked for only on the sessions of
  persistent sources) go to ``core.receive_control``.
* **Egress** (a proxy source's TRD).  The proxy source of a persistent source advertises the
  origin's UME option, and a LATE_JOIN option naming the origin's request port unless the late
  join forwarding (:mod:`umcore.dro.recovery`) gave it one of its own
  (:meth:`~PortalPersistence.proxy_options`).  An SRI the core queued for this portal
  (:meth:`~PortalPersistence.send`) goes out on the proxy source's session with its TOPIC_IDX
  rewritten to the proxy source's, and is repeated from then on (:class:`SriRelay`).

Counters: ``sris_in`` (SRIs taken from origin sessions), ``sris_out`` (sent on proxy sources,
repeats included), ``sri_requests``, ``sri_send_failed``.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

from umcore.aio.timer import CoreTimer
from umcore.dro import SourceKey
from umcore.dro.persist import (
    PersistIdentity,
    SriRelay,
    identity_from_options,
    is_control,
    retarget_sri,
    sri_topic_idx,
)
from umcore.engine import RawSession
from umcore.errors import UMError
from umcore.store import compose
from umcore.wire.lbmr_options import LateJoinOption, OTIDOption, UMEOption

if TYPE_CHECKING:
    from daemons.tnwgd.portal import EndpointPortal
    from daemons.tnwgd.storepath import StoreAdapter

__all__ = ["PortalPersistence", "is_local"]

log = logging.getLogger("tnwgd")


def is_local(options: Iterable[object]) -> bool:
    """A source of this TRD (its TIR has no OTID option: not another DRO's proxy source)."""
    return not any(isinstance(o, OTIDOption) for o in options)


class PortalPersistence:
    """One endpoint portal's share of persistence across the DRO (module docstring)."""

    def __init__(self, portal: EndpointPortal) -> None:
        self.portal = portal
        self.relay = SriRelay()
        self.sessions: set[RawSession] = set()
        self._timer: CoreTimer | None = None
        self.sris_in = 0
        self.sris_out = 0
        self.sri_requests = 0
        self.sri_send_failed = 0
        #: rewrites a relayed SRI's Store addresses to this portal's (daemons.tnwgd.storepath)
        self.store_path: StoreAdapter | None = None

    # ------------------------------------------------------------------ ingress
    @staticmethod
    def identity(options: Iterable[object], topic_idx: int) -> PersistIdentity | None:
        return identity_from_options(options, topic_idx)

    def session_up(
        self, session: RawSession, source: SourceKey, identity: PersistIdentity | None, now: float
    ) -> None:
        if identity is None:
            return
        self.sessions.add(session)
        if is_local(session.options):
            self.relay.source_joined(source, identity, now)
            self._arm()

    def session_down(self, session: RawSession, source: SourceKey) -> None:
        if session in self.sessions:
            self.sessions.discard(session)
            self.relay.source_left(source)

    def frames(self, session: RawSession, source: SourceKey, frames: list[bytes]) -> None:
        """A read of a persistent source's session: its SRIs for the topic to the core."""
        now = self.portal.host.now()
        tidx = session.topic_index
        took = False
        for f in frames:
            if not is_control(f):
                continue
            sri, named = sri_topic_idx(f)
            if not sri or (named is not None and named != tidx):
                continue
            self.sris_in += 1
            self.relay.sri_seen(source, now)
            self.portal.core.receive_control(self.portal.name, source, f, now)
            took = True
        if took:
            self._arm()
            self.portal.host.kick()

    # ------------------------------------------------------------------ egress
    def proxy_options(self, source: SourceKey, options: tuple[Any, ...]) -> tuple[Any, ...]:
        """The TIR options a proxy source of ``source`` adds for persistence (none when the
        source is not persistent)."""
        ident = self.portal.core.persistence(source)
        if ident is None:
            return ()
        extra: tuple[Any, ...] = (
            UMEOption(
                src_tcp_port=ident.request_port, src_tcp_addr=ident.request_ip,
                transport_idx=ident.transport_idx, flags=ident.flags,
            ),
        )  # fmt: skip
        if not any(isinstance(o, LateJoinOption) for o in options):
            extra += (
                LateJoinOption(ident.request_port, ident.request_ip, ident.transport_idx, 0, 0),
            )
        return extra

    def send(self, source: SourceKey, frame: bytes) -> None:
        """An SRI the core queued for this portal: out now, repeated from now on (its Stores of
        other TRDs named at this portal, when the Store path is attached)."""
        ident = self.portal.core.persistence(source)
        if self.store_path is not None and ident is not None:
            frame = self.store_path.rewrite_sri(self.portal.name, source, ident.transport_idx,
                                                frame)  # fmt: skip
        self.relay.sri_out(source, frame, self.portal.host.now())
        self._emit(source, frame)
        self._arm()

    def proxy_gone(self, source: SourceKey) -> None:
        self.relay.proxy_gone(source)

    def _emit(self, source: SourceKey, frame: bytes) -> None:
        px = self.portal.sources.get(source)
        raw = px.raw if px is not None else None
        if raw is None:
            return  # not open yet: the next repeat sends it
        try:
            raw.send_control(retarget_sri(frame, raw.source.tidx))
        except UMError as exc:
            self.sri_send_failed += 1
            log.debug("portal %s: SRI of %r not sent: %s", self.portal.name, source.topic, exc)
            return
        self.sris_out += 1

    # ------------------------------------------------------------------ timers
    def _arm(self) -> None:
        if self._timer is None:
            self._timer = CoreTimer(asyncio.get_running_loop(), self._on_timer)
        self._timer.arm(self.relay.next_timer())

    def _on_timer(self) -> None:
        requests, repeats = self.relay.take_due(self.portal.host.now())
        src = self.portal.src
        for _source, ident in requests:
            if src is None or src.features.port is None:
                break
            req = compose.SriRequest(ident.transport_idx, ident.topic_idx).encode()
            try:
                src.features.request_send((ident.request_ip, ident.request_port), req)
            except UMError as exc:
                self.sri_send_failed += 1
                log.debug("portal %s: SRI request not sent: %s", self.portal.name, exc)
                continue
            self.sri_requests += 1
        for source, frame in repeats:
            self._emit(source, frame)
        self._arm()

    def close(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
        self.sessions.clear()
