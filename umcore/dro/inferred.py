"""[INFERRED] What the DRO core assumes where UM's documentation is silent.

Theory of operation
-------------------
Everything in this module, and every choice listed below, is pyum's own: the DRO-to-DRO peer
protocol and the content of route information are not public (issue 20), so nothing here claims
interoperability with Informatica's DRO.  The rest of :mod:`umcore.dro` follows the notes
(shared/spec/dro-monitoring-config.md part A) and the documented LBMR records.

Defined here:

* :class:`Adjacency` and :class:`RouteInfo` -- the route information DROs exchange.  Its content
  (node id, name, version, adjacent domains and DROs with their costs) is what UM's monitoring
  shows on its "Topology Info" page and in ``DROMonMsg.Stats.OtherGateway``; its encoding and
  transport are not documented.  The core hands it out per portal (``take_route_info``) and
  takes it back (``receive_route_info``); the peer-link adapter (issue 20) chooses the bytes.
  Over an endpoint, the core relies instead on the documented remote domain route record
  (LBMR ext 0x06), which is enough for chains of endpoint-only DROs through transit TRDs.
* :data:`RELAY_SUPPRESSION` -- route information is relayed to every other portal with its hop
  count increased, at most once per half propagation interval per originating DRO, so a copy
  that comes round a loop dies out (``max-hop-count`` bounds it anyway).

Listed (the constants live where they are used, each marked [inferred]):

* the cost a proxy source advertises (COST option): the incoming COST plus the ingress and the
  egress portal costs -- "path cost = sum of portal costs along the path" -- and one more hop;
* the DOMAIN_ID option of a proxy source's TIR names the *originating* source's domain (a local
  source's TIR names its own, which is the same thing), so a DRO can tell where a source came
  from and never send it back;
* :data:`umcore.dro.proxy.FINAL_ADVERTISEMENTS` / ``FINAL_ADVERTISEMENT_INTERVAL``: the "burst"
  of final advertisements is 3, 100 ms apart;
* :data:`umcore.dro.core.INITIAL_REQUEST_FLAGS`: the start-up topic resolution requests set
  QUERY, WILDCARD_QUERY and GW_REMOTE_INTEREST;
* TNWG interest records: new pairs are sent with no flag, the periodic resend of all of them
  with REFRESH, withdrawn ones with CANCEL; use queries are TOPIC_USE TMRs without RESPONSE
  (patterns with the WILDCARD flag of their type) and answers carry RESPONSE (notes A5 say so
  "by interpretation");
* ACLs: a transport condition that is "silently ignored" (outbound, or not applicable to the
  source's transport) makes its ACE match nothing (:mod:`umcore.dro.acl`);
* equal-cost ties: candidates are ordered by (cost, DRO hops, next node's id), TRDs before
  DROs, smaller ids first -- "by node id" in the notes, the exact order unknown;
* a frame below the duplicate window is dropped (``dropped_old``), not forwarded;
* a proxy source is keyed by (OTID, topic), not by the OTID alone: the notes say "one proxy
  source per originating source, keyed by OTID", and one transport (one OTID, as our SRS and
  late-join code build it) carries many topics, so the topic completes the key;
* domains learned only from remote domain route records count
  :data:`umcore.dro.routing.DOMAIN_ROUTE_HOP_COST` per hop (the record carries no cost);
* our own links coming up are routed at once; every other change waits the backoff.
* a transit TRD resolved by the SRS (issue 19; UM documents the SRS's DRO records -- DIR, RTIR,
  RTER -- but not how a DRO uses them): no LBMR record travels there, so a DRO portal's remote
  domain route record becomes one RTIR it holds at the SRS (``route_index`` 0, its domains and
  its source context's request port, next to its DIR), and its TNWG interest records become
  RIR / WIR whose ``domain_id`` names the domain of the receivers behind it (RDR / WDR when
  withdrawn; :meth:`umcore.srs.client.SRSClient.send_remote_interest`).  The other DROs there
  take each relayed RTIR as that portal's remote domain route record, the latest one per
  address, and hold it until its RTER (an RTER naming other domains ends an older record of
  that address: ignored), feeding it to the router again on every timer, since the SRS relays a
  record once where UDP repeats it (:meth:`umcore.dro.core.DroCore.receive_srs_route`); DIRs
  are not routes; RIR / WIR of a DRO naming another domain are held remote interest of that
  domain, those naming the TRD's own domain are proxy receivers' (not interest).
* a MIM forwarded into a TRD carries a DESTINATION header (domain id 0, ``orig_domain_id``,
  ``hops_taken``) naming where it came from, so no DRO takes it back towards its origin or
  round a loop; a MIM with a topic follows receiver interest as a source's data would, a
  topicless one goes to every TRD (:mod:`umcore.dro.mim`).
* late join and OTR (:mod:`umcore.dro.recovery`; the notes only say requests "traverse the whole
  DRO path back to the originating source"): a proxy source of a late-join source advertises a
  LATE_JOIN option naming its portal's request port and a transport index of the DRO's (retained
  range 0, 0), and the DRO forwards LJI_REQ/UME_RXREQ to the origin with its own reply address,
  relaying LJ_INFO under the receiver's index and RETRANS with the proxy source's topic index and
  an OTID of the proxy's request port and transport index; a forwarded request waits
  :data:`umcore.dro.recovery.PENDING_LIFETIME_S` for its answer.
* persistence (:mod:`umcore.dro.persist`; UM documents only that persistence works through
  the DRO, Stores usually in the source's TRD): a proxy source of a persistent source advertises
  the *origin's* UME option (request address, transport index), so receivers register with the
  origin's Stores for the origin's RegID; the ingress portal asks the origin for SRIs
  (SRI_REQ with the origin's indices, every 1 s until one arrives, then every 10 s), the DROs
  relay the SRIs, and the egress portal sends each on the proxy source's session with its
  TOPIC_IDX rewritten and repeats the latest every 1 s.
* receiver <-> Store traffic (:mod:`umcore.dro.storepath`; UM says only that "all needed control
  and retransmission channels are routed" and that the SRI's Domain ID names the Store's TRD):
  the egress portal rewrites each Store of another TRD in a relayed SRI to its own request port
  (Domain ID, Store index, RegIDs unchanged; a Store whose Domain ID is the portal's stays
  direct, Domain ID 0 counts as the source's TRD), so the receiver's client needs nothing new;
  a receiver's PREG, consumption ACK, keepalive or RXREQ at that port is known by (transport
  index, the source's RegID at the Store) -- receiver keepalives by the receiver's RegID learned
  from the relayed answer -- and goes towards the source's active ingress, where the DRO writes
  it to the Store's own address with the reply addresses rewritten to its request port; the
  Store's answers go back by (transport index, topic index, Store index) for registrations,
  (transport index, receiver RegID) for keepalives, (OTID's transport index, sqn) for
  retransmissions, unchanged; waiting entries live 10 s.

The peer link (:mod:`umcore.dro.peer`) is pyum's own protocol throughout: UM documents what a
peer portal does (notes A3: one TCP connection, ``<gateway-keepalive>``, batching) and Wireshark
names the LBMC headers DROs use (TNWG_CAPABILITIES, TNWG_KA, ROUTE_INFO, ...; wire-lbmc-ump.md
section 7), but not which messages a DRO sends, in what order, or what each field means to it.
So the stream is back-to-back LBMC messages (LBT-TCP framing: ``tshark -d tcp.port==N,lbttcp``
decodes it) and the choices below are ours:

* :data:`PEER_PROTOCOL_VERSION` in the flags of the TNWG_CAPABILITIES header of the *hello*,
  the first message each side sends (with ROUTE_INFO naming its node id and GATEWAY_NAME);
  a version outside :data:`SUPPORTED_PEER_VERSIONS` refuses the link;
* :data:`PEER_HANDSHAKE_TIMEOUT`: the hello must arrive within it (UM's peer-link TLS
  negotiation timeout is hard-coded to 5 s: the same bound);
* keepalive: TNWG_KA with flag Q (query, sender's clock in ts_seconds/ts_microseconds) answered
  by flag R echoing index and time; with ``idle="yes"`` a side queries only after an interval in
  which it heard nothing;
* route information: ROUTE_INFO (``node_id``; ``gateway_version`` = version modulo 2**32;
  ``topology`` = hop count) + GATEWAY_NAME + one ROUTE_INFO_NEIGHBOR per adjacency (``flags`` =
  the node kind of :data:`NodeKey`, ``node_id`` = its id, both costs = the link's cost);
* interest: TOPICNAME + TOPIC_INTEREST, or TOPICNAME + PATTERN_INTEREST (flags cancel/refresh
  as documented for those headers), one record per CONTROL message;
* sources: OTID + TOPICNAME + ADVERTISEMENT (``cost``, ``hop_count``, ``domain_id`` = origin
  domain; flag 0x10 "change" for an update, 0x40 EOS for a source gone);
* data: a source is bound to a link topic index by a CONTROL message OTID + TOPICNAME +
  TOPIC_IDX; each frame is then a bare LBMC data message (tidx = that index, sqn = the
  originating sequence number, payload = the frame), 12 bytes of overhead;
* a ``<peer>`` without ``<batching>`` does not batch (data goes out as soon as the adapter
  writes); max-queue bounds the batches not yet written plus at most one open batch;
* late join and OTR: a source that offers late join is advertised with ADVERTISEMENT
  ``ad_flags`` LJ (0x80000000); a request or answer for it is a CONTROL message OTID + TOPICNAME
  (nothing else) whose payload is the LBMC message itself (LJI_REQ under the sender's request
  index, UME_RXREQ, LJ_INFO, or the origin's RETRANS), addresses and indices zeroed where the
  other DRO uses its own (:mod:`umcore.dro.recovery`).
* persistence: a persistent source's advertisement also sets ``ad_flags`` UME (0x40000000), its
  ``transport_idx``/``topic_idx`` name the origin's, and a TOPIC_SOURCE_EXFUNC header carries
  the origin's request address (``flags`` = the UME option's flags); an SRI travels as a CONTROL
  message OTID + TOPICNAME + the SRI's own headers without TOPIC_IDX (:mod:`umcore.dro.persist`);
  receiver <-> Store traffic travels on the late-join channel (CONTROL OTID + TOPICNAME carrying
  the message) with a DESTINATION header added: ``flags`` 1 towards the Store it names
  (``domain_id``, ``ipaddr``, ``port``; reply addresses in the message zeroed), ``flags`` 2 for a
  Store's answer going back (:mod:`umcore.dro.storepath`).
* immediate messages (issues 19/20; UM documents that UIMs and MIMs cross DROs, not how a peer
  link carries them): a UIM, request or response, or a MIM, routed over a link is a CONTROL
  message with one DOMAIN header (``flags`` :data:`umcore.dro.peer.IMMEDIATE_UIM` 0x0001 or
  :data:`~umcore.dro.peer.IMMEDIATE_MIM` 0x0002, ``domain`` 0) whose payload is the immediate
  message itself, one LBMC data message: a UIM with its DESTINATION (``hops_taken`` already
  counting the sending DRO) and a request's REQUEST naming the sending DRO's own request index
  with address 0.0.0.0:0 (its responses come back over the link, to that index); a MIM with its
  TOPICNAME and the DESTINATION mark of a forwarded MIM (origin domain, hops).  They travel on
  the TCP link also when ``<udp>`` carries the data (the UDP stream has no room for them and
  they are not ordered with the data anyway); unlike other control messages they are dropped,
  not queued, when ``max-queue`` bytes already wait, as UM says an overloaded DRO may.

The UDP data link (``<udp>``, :mod:`umcore.dro.peerudp`).  The notes (A3) give its shape -- TCP
keeps the control traffic, the data goes "using the same reliable-unicast protocol as LBT-RU",
the initiator sends its UDP port over TCP and the acceptor answers with its own, either link
failing drops both -- but not the bytes; our choices:

* the port offer is a CONTROL message TCP_SID (``sid`` = the LBT-RU session id of the sender's
  UDP source) + TOPIC_SOURCE_EXFUNC (``src_port`` = its ``<udp><port>``, ``src_ip`` 0: "the
  address you see me at"); the initiator sends it right after its hello, the acceptor answers
  with its own once it has the initiator's; an offer to a portal without ``<udp>`` refuses the
  link, and a link whose UDP side is not working within :data:`PEER_HANDSHAKE_TIMEOUT` plus
  ``<connect>``'s attempts after the connection is dropped;
* each side runs one LBT-RU source (its one client: the other DRO's receiver) and one LBT-RU
  receiver on the one UDP socket, a new session id per connection; the link carries data once
  our receiver is connected and our source has its client;
* the UDP stream is the TCP link's data stream moved: bindings (OTID + TOPICNAME + TOPIC_IDX)
  and bare data messages, in LBT-RU DATA datagrams of up to
  :data:`~umcore.dro.peerudp.UDP_DATAGRAM_MAX` bytes, handed up in transport order;
* LZ4 and TLS stay on the TCP link (UM has them on the UDP link from 6.17 only).
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = [
    "PEER_HANDSHAKE_TIMEOUT",
    "PEER_PROTOCOL_VERSION",
    "RELAY_SUPPRESSION",
    "SUPPORTED_PEER_VERSIONS",
    "Adjacency",
    "NodeKey",
    "RouteInfo",
]

# A node of the topology map: (kind, id); kinds 0 = TRD (domain id), 1 = DRO (node id), 2 = a
# DRO known only by the ip and port of its portal in a domain route record (ip << 16 | port).
NodeKey = tuple[int, int]

# Route information of one DRO is relayed at most once per this fraction of the
# propagation interval (see the module docstring).
RELAY_SUPPRESSION = 0.5

# The peer-link protocol version pyum speaks (see the module docstring), and those it accepts.
PEER_PROTOCOL_VERSION = 1
SUPPORTED_PEER_VERSIONS = frozenset({PEER_PROTOCOL_VERSION})
# Seconds for the other side's hello after the connection (and TLS, if any) is up.
PEER_HANDSHAKE_TIMEOUT = 5.0


@dataclass(frozen=True, slots=True)
class Adjacency:
    """One link of a DRO: to a domain (an endpoint portal) or to a DRO (a peer portal)."""

    node: NodeKey
    cost: int


@dataclass(frozen=True, slots=True)
class RouteInfo:
    """What one DRO tells the others about itself (its node id, its links and their costs).

    ``version`` changes whenever its links change; ``hop_count`` is how many DROs the record
    has crossed."""

    node_id: int
    name: str
    version: int
    hop_count: int
    adjacencies: tuple[Adjacency, ...]
