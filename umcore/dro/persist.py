"""Persistence across the DRO: the persistent identity of a proxied source, and its SRIs.

Theory of operation
-------------------
A persistent receiver learns its source's Stores only from the source's SRIs (Source
Registration Information, a control message on the source's transport session; seed 002), and
recognises its source as persistent by the UME option (0x01) of the source's TIR.  Across a DRO
the receiver sees a *proxy source* (seed 003 10.4.8: proxy sources keep the originating
sequence numbers and have no retention buffer of their own; retransmission requests go end to
end to the originating source or its Stores; notes A7: "all needed control and retransmission
channels are routed").  So a DRO carries, for a persistent source:

* **Its identity** (:class:`PersistIdentity`): the origin's request address and transport index
  from its TIR's UME option, and its topic index on the origin session.  The ingress portal
  reads it (:func:`identity_from_options`), the core keeps it with the source advertisement
  (``SourceAdvert.persist``), a peer link carries it in the source advertisement, and the egress
  portal's proxy source advertises the *origin's* UME and late-join options, so the receiver
  registers with the origin's Stores for the origin's RegID, and the Stores' retransmissions
  (which name the originating source: OTID and topic name) are recognised as that source's.
* **Its SRIs**: the ingress portal hands the SRI control frames of the source's topic to the
  core (``DroCore.receive_control``), which queues them for the portals the source's frames go
  to (``take_controls``); a peer link carries them; the egress portal rewrites the SRI's
  TOPIC_IDX to its proxy source's topic index (:func:`retarget_sri`) and sends it on the proxy
  source's transport session.
* **SRI freshness** (:class:`SriRelay`, sans-IO timers).  A source sends SRIs on its own only
  after a registration change and when asked (SRI_REQ to its request port, naming the transport
  and topic index *of the origin session*, which a receiver behind a DRO does not know).  So the
  ingress portal asks the origin itself for an SRI when it joins a persistent source (every
  :data:`SRI_REQUEST_INTERVAL` until one arrives, at most :data:`SRI_REQUEST_MAXIMUM` times,
  then every :data:`SRI_REFRESH_INTERVAL`), and the egress portal keeps the latest SRI of each
  proxied source and sends it again every :data:`SRI_REEMIT_INTERVAL` while its proxy source
  exists, so a receiver that joins later registers within about a second (a receiver ignores an
  SRI whose version it has seen).

[inferred] UM documents that persistence works through the DRO and that the Stores are usually
in the source's TRD, not how the DRO carries SRIs or which addresses a proxy source's UME
option names.  The choices above (the origin's identity on the proxy, SRIs relayed and
refreshed by the DRO, the intervals) are pyum's.  Receiver-to-Store traffic (registration,
consumption ACKs, keepalives, retransmission requests) and the Stores' answers and
retransmissions go through the DROs too: the egress portal names itself as the address of every
Store of another TRD in the SRIs it relays and relays that traffic hop by hop
(:mod:`umcore.dro.storepath`), so no IP reachability between the receiver's and the Store's
networks is needed.
"""

from __future__ import annotations

import heapq
from collections.abc import Iterable
from dataclasses import dataclass

from umcore.dro.events import SourceKey
from umcore.errors import RemoteProtocolError
from umcore.wire import lbmc
from umcore.wire.lbmr_options import UMEOption

__all__ = [
    "MAX_RELAYED_SOURCES",
    "SRI_REEMIT_INTERVAL",
    "SRI_REFRESH_INTERVAL",
    "SRI_REQUEST_INTERVAL",
    "SRI_REQUEST_MAXIMUM",
    "PersistIdentity",
    "SriRelay",
    "identity_from_options",
    "is_control",
    "retarget_sri",
    "sri_topic_idx",
]

# [inferred] Seconds between the ingress portal's SRI requests to a persistent source it joined
# until an SRI arrives: UM's receiver default (ume_sri_request_interval 1000 ms).
SRI_REQUEST_INTERVAL = 1.0
# [inferred] Requests before the ingress portal falls back to the slow refresh: UM's receiver
# default (ume_sri_request_maximum 60).
SRI_REQUEST_MAXIMUM = 60
# [inferred] Seconds between SRI requests once one arrived (and after the maximum): a relayed
# SRI lost on the way (a link down) is replaced within this.
SRI_REFRESH_INTERVAL = 10.0
# [inferred] Seconds between the egress portal's repeats of a proxied source's latest SRI, so a
# receiver joining later has it about as soon as its own first SRI request would have got it.
SRI_REEMIT_INTERVAL = 1.0
# Sources whose SRI requests / latest SRI one portal keeps; beyond this new ones are refused
# and counted (``refused``): a DRO proxies far fewer persistent sources than this.
MAX_RELAYED_SOURCES = 65536

# ver/type byte of an LBMC control message (version 0, type CONTROL)
_CONTROL = lbmc.MSG_CONTROL


@dataclass(frozen=True, slots=True)
class PersistIdentity:
    """A persistent source as its receivers must know it: its request address and transport
    index (its TIR's UME option), its topic index on its own session, the option's flags."""

    request_ip: str
    request_port: int
    transport_idx: int
    topic_idx: int
    flags: int


def identity_from_options(options: Iterable[object], topic_idx: int) -> PersistIdentity | None:
    """The identity of a source from its TIR's options (None: not persistent)."""
    for opt in options:
        if isinstance(opt, UMEOption) and opt.src_tcp_port:
            return PersistIdentity(
                str(opt.src_tcp_addr), int(opt.src_tcp_port), int(opt.transport_idx),
                topic_idx, int(opt.flags),
            )  # fmt: skip
    return None


def is_control(frame: bytes | memoryview) -> bool:
    """An LBMC control frame (SRI, TSNI, ...), as opposed to data."""
    return len(frame) >= 4 and frame[0] == _CONTROL


def sri_topic_idx(frame: bytes | memoryview) -> tuple[bool, int | None]:
    """(is an SRI, its TOPIC_IDX or None) of a control frame; a frame that does not decode is
    not an SRI."""
    try:
        msg = lbmc.decode(frame)
    except (RemoteProtocolError, ValueError):
        return False, None
    if msg.find(lbmc.Sri) is None:
        return False, None
    ti = msg.find(lbmc.TopicIdx)
    return True, None if ti is None else ti.tidx


def retarget_sri(frame: bytes | memoryview, topic_idx: int) -> bytes:
    """The SRI ``frame`` naming ``topic_idx`` (a proxy source's) in its TOPIC_IDX header;
    RemoteProtocolError if it is not an SRI."""
    msg = lbmc.decode(frame)
    if msg.find(lbmc.Sri) is None:
        raise RemoteProtocolError("not an SRI")
    headers = [h for h in msg.headers if not isinstance(h, lbmc.TopicIdx)]
    headers.append(lbmc.TopicIdx(0, topic_idx))
    return lbmc.encode(lbmc.LBMCMessage(lbmc.MSG_CONTROL, headers=headers))


def strip_topic_idx(frame: bytes | memoryview) -> list[lbmc.Header]:
    """An SRI's headers without TOPIC_IDX (what a peer link carries: the topic index means
    nothing beyond the session it was sent on)."""
    msg = lbmc.decode(frame)
    return [h for h in msg.headers if not isinstance(h, lbmc.TopicIdx)]


class _Want:
    __slots__ = ("due", "identity", "left")

    def __init__(self, identity: PersistIdentity, due: float) -> None:
        self.identity = identity
        self.due = due
        self.left = SRI_REQUEST_MAXIMUM


class SriRelay:
    """One endpoint portal's SRI timers (module docstring): the SRI requests it owes the
    persistent sources its proxy receivers joined, and the repeats of the latest SRI of each
    source its proxy sources proxy.  Sans-IO: ``now`` in seconds."""

    def __init__(self) -> None:
        self._wants: dict[SourceKey, _Want] = {}
        self._latest: dict[SourceKey, tuple[bytes, float]] = {}
        self._heap: list[tuple[float, int, int, SourceKey]] = []  # due, seq, kind, source
        self._seq = 0
        #: sources refused for MAX_RELAYED_SOURCES; SRIs seen; SRI requests due
        self.refused = 0
        self.sris_seen = 0
        self.requests = 0

    def _push(self, due: float, kind: int, source: SourceKey) -> None:
        self._seq += 1
        heapq.heappush(self._heap, (due, self._seq, kind, source))

    # --- ingress: a persistent source in this portal's TRD
    def source_joined(self, source: SourceKey, identity: PersistIdentity, now: float) -> None:
        if source in self._wants:
            return
        if len(self._wants) >= MAX_RELAYED_SOURCES:
            self.refused += 1
            return
        self._wants[source] = _Want(identity, now)
        self._push(now, 0, source)

    def source_left(self, source: SourceKey) -> None:
        self._wants.pop(source, None)

    def sri_seen(self, source: SourceKey, now: float) -> None:
        """An SRI of that source arrived: requests slow down to the refresh."""
        self.sris_seen += 1
        w = self._wants.get(source)
        if w is not None and w.left:
            w.left = 0
            w.due = now + SRI_REFRESH_INTERVAL
            self._push(w.due, 0, source)

    # --- egress: a source this portal's proxy source proxies
    def sri_out(self, source: SourceKey, frame: bytes, now: float) -> None:
        """``frame`` (already sent) is the latest SRI of ``source``: repeat it from now on."""
        if source not in self._latest and len(self._latest) >= MAX_RELAYED_SOURCES:
            self.refused += 1
            return
        due = now + SRI_REEMIT_INTERVAL
        self._latest[source] = (frame, due)
        self._push(due, 1, source)

    def proxy_gone(self, source: SourceKey) -> None:
        self._latest.pop(source, None)

    # --- timers
    def next_timer(self) -> float | None:
        return self._heap[0][0] if self._heap else None

    def take_due(
        self, now: float
    ) -> tuple[list[tuple[SourceKey, PersistIdentity]], list[tuple[SourceKey, bytes]]]:
        """(SRI requests to send: source and its identity; SRIs to send again)."""
        requests: list[tuple[SourceKey, PersistIdentity]] = []
        repeats: list[tuple[SourceKey, bytes]] = []
        heap = self._heap
        while heap and heap[0][0] <= now:
            due, _seq, kind, source = heapq.heappop(heap)
            if kind == 0:
                w = self._wants.get(source)
                if w is None or w.due != due:
                    continue  # gone, or rescheduled
                requests.append((source, w.identity))
                self.requests += 1
                if w.left:
                    w.left -= 1
                w.due = now + (SRI_REQUEST_INTERVAL if w.left else SRI_REFRESH_INTERVAL)
                self._push(w.due, 0, source)
            else:
                got = self._latest.get(source)
                if got is None:
                    continue
                frame, at = got
                if at != due:
                    continue  # a newer SRI went out since: its own repeat is queued
                repeats.append((source, frame))
                at = now + SRI_REEMIT_INTERVAL
                self._latest[source] = (frame, at)
                self._push(at, 1, source)
        return requests, repeats
