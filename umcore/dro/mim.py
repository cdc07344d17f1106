"""Multicast immediate messages (MIM) through the DRO: the routing verdict and its counters.

Theory of operation
-------------------
A MIM (``lbm_multicast_immediate_message``, seed 003 10.8) has no source object and no topic
resolution: it is an LBMC data message in an LBT-RM datagram sent to the MIM group of its TRD
(``mim_outgoing_address``), the topic (if any) in its TOPICNAME header.  A DRO endpoint portal
whose TRD has MIM reception on (``mim_incoming_address`` set in its ``<lbm-attributes>``) hears
them; the core (:meth:`DroCore.receive_mim <umcore.dro.DroCore.receive_mim>`) decides where each
goes, the adapter (``daemons.tnwgd.mim``) re-sends it to the MIM group of each egress portal's
TRD, and reports how the send went (:meth:`DroCore.receive_mim_sent
<umcore.dro.DroCore.receive_mim_sent>`).

Where a MIM goes ("MIMs follow interest", issue 19):

- **with a topic**: out of every other portal that has interest in the topic (a receiver topic
  or a matching pattern) for a domain beyond it, on the shortest-path tree from the MIM's origin
  domain -- the same rule as a source's data (:meth:`DroCore._egress_of`) *without* ACLs: UM's
  DRO does not filter MIMs by ACL (notes A7, A8).  No such interest: dropped, counted
  (``dropped_no_interest`` of the ingress portal);
- **topicless**: to every TRD (notes A7 "MIM: forwarded to all TRDs"): out of every other portal
  that leads to a domain on that tree (an endpoint's own domain, or one the router reaches
  through it);
- **never** back into the TRD it came from or its origin domain, and not past ``max-hop-count``
  DROs (``dropped_hop_limit``).

The origin and the hop count travel in the forwarded copy as a DESTINATION header (domain id 0:
"every domain", ``orig_domain_id``, ``hops_taken``) [inferred: how UM's DRO marks a forwarded
MIM is not documented; without a mark, the copy a DRO sends into a TRD would come back to it, or
to another DRO there, as a new MIM of that TRD and loop].  A MIM without the header is a MIM of
the ingress portal's own TRD (its ``<domain-id>``; a peer portal's: unknown origin).

Counters (per portal, cumulative; the ``immediate_*`` fields of ``DROMonMsg``'s endpoint portal
statistics): received (all, and those that are requests: a REQUEST header), forwarded (the
core chose this portal), sent / dropped would-block / dropped error / dropped size error (what
the adapter reported), each in messages and bytes, separately for topic and topicless MIMs.
Bytes are the application payload of the message.  A MIM is never fragmented here (the sender
puts one message in one datagram), so a message is one "fragment" of UM's field names.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum

__all__ = ["MimCounters", "MimRoute", "MimSendResult", "MimStats"]


class MimSendResult(Enum):
    """How the adapter's send of a forwarded MIM went."""

    SENT = "sent"
    WOULD_BLOCK = "would_block"  # the socket's buffer was full (no queue for MIM: dropped)
    ERROR = "error"  # any other socket error
    SIZE_ERROR = "size_error"  # too big for a datagram


@dataclass(frozen=True, slots=True)
class MimRoute:
    """The core's verdict for one MIM: the egress portals (configuration order), and what the
    forwarded copy's DESTINATION header carries (origin domain, hops taken so far + 1)."""

    egress: tuple[str, ...]
    origin_domain: int
    hops_taken: int


class MimCounters:
    """One kind (topic or topicless) of one portal's MIM counters, messages and bytes."""

    __slots__ = (
        "bytes_dropped_error",
        "bytes_dropped_hop_limit",
        "bytes_dropped_no_interest",
        "bytes_dropped_size_error",
        "bytes_dropped_would_block",
        "bytes_forwarded",
        "bytes_rcvd",
        "bytes_sent",
        "dropped_error",
        "dropped_hop_limit",
        "dropped_no_interest",
        "dropped_size_error",
        "dropped_would_block",
        "forwarded",
        "rcvd",
        "req_bytes_rcvd",
        "req_bytes_sent",
        "req_rcvd",
        "req_sent",
        "sent",
    )

    def __init__(self) -> None:
        # ingress side
        self.rcvd = self.bytes_rcvd = 0  # every MIM heard (requests included)
        self.req_rcvd = self.req_bytes_rcvd = 0  # of those, requests
        self.dropped_no_interest = self.bytes_dropped_no_interest = 0  # went nowhere
        self.dropped_hop_limit = self.bytes_dropped_hop_limit = 0  # past max-hop-count
        # egress side
        self.forwarded = self.bytes_forwarded = 0  # routed out of this portal
        self.sent = self.bytes_sent = 0  # and sent (requests included)
        self.req_sent = self.req_bytes_sent = 0  # of those, requests
        self.dropped_would_block = self.bytes_dropped_would_block = 0
        self.dropped_error = self.bytes_dropped_error = 0
        self.dropped_size_error = self.bytes_dropped_size_error = 0

    def sent_result(self, result: MimSendResult, size: int, request: bool) -> None:
        if result is MimSendResult.SENT:
            self.sent += 1
            self.bytes_sent += size
            if request:
                self.req_sent += 1
                self.req_bytes_sent += size
        elif result is MimSendResult.WOULD_BLOCK:
            self.dropped_would_block += 1
            self.bytes_dropped_would_block += size
        elif result is MimSendResult.SIZE_ERROR:
            self.dropped_size_error += 1
            self.bytes_dropped_size_error += size
        else:
            self.dropped_error += 1
            self.bytes_dropped_error += size


class MimStats:
    """One portal's MIM counters: ``topic`` and ``topicless`` (:class:`MimCounters`)."""

    __slots__ = ("topic", "topicless")

    def __init__(self) -> None:
        self.topic = MimCounters()
        self.topicless = MimCounters()

    def of(self, topic: str | None) -> MimCounters:
        return self.topicless if topic is None else self.topic
