"""Who gets which record: the SRS's relay, and the meaning of every record a client sends.

Theory of operation
-------------------
:meth:`Relay.receive_record` applies one record from a registered client to the tables
(:mod:`umcore.srs.registry`) and queues what other clients must hear, on their sessions'
record queues (:mod:`umcore.srs.session`):

- a new SIR goes to every *other* streaming client interested in its topic (an RIR for it, or a
  WIR pattern matching it) and to every flood-mode client; a new RIR/WIR is answered with the
  matching known SIRs;
- forward-interest clients (interest modes 2/3, DROs) also receive other clients' RIR/WIR and
  the RER/WER (receiver / wildcard receiver end records) when that interest ends;
- DIR (domain info) and RTIR (route info) go to every client, CNIR (context name info) to the
  clients that asked with a CNQR (context name query) for that name;
- an SDR (source delete) removes the source at once and its SER (the SIR with cost -1) follows
  after the back-off held by :mod:`umcore.srs.lifetimes`; a SIR for the same source inside the
  back-off cancels the SER.  The SRS never relays SDRs.

:meth:`Relay.send_stream_opening` is the SRS side of a stream opening (routes and domains of
the TRD, every SIR for a flood client, the matching SIRs of interest kept across a
reconnect); :meth:`Relay.expire_unconfirmed` deletes what a lifetime expired and announces the
ends.  Duplicates, mismatches and records a client may not send are counted in the SRS and
client statistics; what the bounds refuse in :class:`~umcore.srs.common.Refused`.
"""

from __future__ import annotations

import struct
import sys

from umcore.srs.common import (
    MAX_INTEREST_PER_CLIENT,
    MAX_NAMES_PER_CLIENT,
    MAX_PATTERNS_PER_CLIENT,
    MAX_ROUTES_PER_CLIENT,
    RefusalTally,
    Refused,
    ServerConfig,
)
from umcore.srs.lifetimes import EXPIRY_KINDS, Lifetimes
from umcore.srs.registry import Client, EventLog, Registry, Source
from umcore.srs.session import QueueService
from umcore.srs.stats import SRSErrorStats, SRSStats
from umcore.wire.srs_messages import (
    SER_COST,
    BatchRecord,
    ContextNameEnd,
    ContextNameInfo,
    ContextNameQuery,
    DomainInfo,
    ReceiverDelete,
    ReceiverEnd,
    ReceiverInfo,
    RouteEnd,
    RouteInfo,
    SourceDelete,
    SourceInfo,
    SourceLeave,
    WildcardReceiverDelete,
    WildcardReceiverEnd,
    WildcardReceiverInfo,
)

__all__ = [
    "REFUSED_INTEREST",
    "REFUSED_NAMES",
    "REFUSED_PATTERNS",
    "REFUSED_ROUTES",
    "REFUSED_SOURCE_CLIENT",
    "REFUSED_SOURCE_HOST",
    "REFUSED_SOURCE_TABLE",
    "Relay",
]

# Kinds of refusal the relay reports (the daemon logs one rate-limited line per kind).  The SRS
# protocol has no way to refuse one record: the client is not told; the log and the counters are
# how the operator learns.
REFUSED_SOURCE_TABLE = "source table full"
REFUSED_SOURCE_CLIENT = "source quota per client"
REFUSED_SOURCE_HOST = "source quota per host"
REFUSED_INTEREST = "receiver topic quota per client"
REFUSED_PATTERNS = "wildcard pattern quota per client"
REFUSED_ROUTES = "DRO route quota per client"
REFUSED_NAMES = "context name quota per client"
# Remembered hosts known to have no inactive client (a negative cache, so a refused flood does
# not scan the client table for each record); cleared beyond this many hosts.
_MAX_NEGATIVE_HOSTS = 1024

_SER_TAIL = struct.pack("!i", SER_COST)


def ser_of(raw: bytes) -> bytes:
    """The SER (source end record) for a source: its SIR with cost -1.  ``cost`` is the SIR's
    last field (an i32), so the SER is the SIR's bytes with their last four replaced."""
    return raw[:-4] + _SER_TAIL


class Relay:
    """The records' semantics and their fan-out; see the module docstring."""

    __slots__ = (
        "_none_inactive",
        "config",
        "errors",
        "events",
        "lifetimes",
        "queues",
        "refused",
        "registry",
        "stats",
        "tally",
    )

    def __init__(
        self,
        config: ServerConfig,
        registry: Registry,
        queues: QueueService,
        lifetimes: Lifetimes,
        events: EventLog,
        stats: SRSStats,
        errors: SRSErrorStats,
        refused: Refused,
        tally: RefusalTally | None = None,
    ) -> None:
        self.tally = tally if tally is not None else RefusalTally(refused)
        # host (None: any) -> Registry.inactive_epoch when it was found to have no inactive client
        self._none_inactive: dict[str | None, int] = {}
        self.config = config
        self.registry = registry
        self.queues = queues
        self.lifetimes = lifetimes
        self.events = events
        self.stats = stats
        self.errors = errors
        self.refused = refused

    def _queue(self, client: Client, raw: bytes) -> None:
        conn = client.conn
        if conn is not None:
            self.queues.queue(conn, raw)

    def _schedule_ser(self, src: Source, now: float) -> None:
        """A source was deleted: its SER goes out after the back-off (at once without one)."""
        if not self.lifetimes.schedule_ser(src, now):
            self.send_ser(src)

    def send_stream_opening(self, client: Client) -> None:
        """Initial exchange, SRS side: routes and domains of the TRD, every SIR in flood mode,
        and the matching SIRs of interest the client kept across a reconnect."""
        for other in self.registry.clients.values():
            if other is client:
                continue
            for dr, _flag in other.dr_records.values():
                self._queue(client, dr.encode())
                client.stats.client_dir_sent_count += 1
            for rt, _flag in other.routes.values():
                self._queue(client, rt.encode())
                client.stats.client_rtir_sent_count += 1
        if not client.filter_mode:
            for src in self.registry.sources.values():
                if src.owner is not client:
                    self._queue_sir(client, src)
        if client.forward_interest:
            # a DRO endpoint connecting after the receivers: their interest so far, each
            # record with its own domain id and context instance (a DRO's remote interest
            # names the domain behind it, not the TRD's)
            for other in self.registry.clients.values():
                if other is client:
                    continue
                kind = other.app_type
                for topic, active in other.interest.items():
                    if active:
                        dom, inst = other.interest_ids.get(
                            (topic, False), (other.domain_id, bytes(8))
                        )
                        rir = ReceiverInfo(
                            topic, domain_id=dom, context_instance=inst, context_type=kind
                        )
                        self._queue(client, rir.encode())
                        client.stats.client_rir_sent_count += 1
                for pattern, active in other.patterns.items():
                    if active:
                        dom, inst = other.interest_ids.get(
                            (pattern, True), (other.domain_id, bytes(8))
                        )
                        wir = WildcardReceiverInfo(
                            pattern, domain_id=dom, context_instance=inst, context_type=kind
                        )
                        self._queue(client, wir.encode())
                        client.stats.client_wir_sent_count += 1

    def receive_record(self, client: Client, rec: BatchRecord, now: float) -> None:
        t = type(rec)
        if t is SourceInfo:
            assert isinstance(rec, SourceInfo)
            self._sir(client, rec, now)
        elif t is ReceiverInfo:
            assert isinstance(rec, ReceiverInfo)
            self._rir(client, rec, now)
        elif t is SourceDelete:
            assert isinstance(rec, SourceDelete)
            self._sdr(client, rec, now)
        elif t is ReceiverDelete:
            assert isinstance(rec, ReceiverDelete)
            self._rdr(client, rec, now)
        elif t is WildcardReceiverInfo:
            assert isinstance(rec, WildcardReceiverInfo)
            self._wir(client, rec, now)
        elif t is WildcardReceiverDelete:
            assert isinstance(rec, WildcardReceiverDelete)
            self._wdr(client, rec, now)
        elif t is SourceLeave:
            assert isinstance(rec, SourceLeave)
            self._slr(client, rec, now)
        elif t is DomainInfo:
            assert isinstance(rec, DomainInfo)
            self._dir(client, rec, now)
        elif t is RouteInfo:
            assert isinstance(rec, RouteInfo)
            self._rtir(client, rec, now)
        elif t is ContextNameInfo:
            assert isinstance(rec, ContextNameInfo)
            self._cnir(client, rec, now)
        elif t is ContextNameQuery:
            assert isinstance(rec, ContextNameQuery)
            self._cnqr(client, rec, now)
        elif t is ContextNameEnd:
            client.stats.client_unexpected_cner_received_count += 1
        else:  # RER, WER, RTER: the SRS's own records, never sent by a client
            client.err.client_invalid_srs_message_received_count += 1

    def _sir(self, client: Client, rec: SourceInfo, now: float) -> None:
        st = client.stats
        if rec.cost == SER_COST:  # a client may not end sources by SER; SDR is the way
            client.err.client_invalid_srs_message_received_count += 1
            return
        topic = rec.topic = sys.intern(rec.topic)  # one string per topic, however many refer
        key = (rec.otid, topic)
        src = self.registry.sources.get(key)
        raw = rec.encode()
        if src is not None:
            if src.owner is not client:
                self.errors.clients_duplicate_sir_count += 1
                return
            pending = self.lifetimes.cancel_ser(key)
            changed = src.raw != raw
            if not src.active:  # re-confirmed after a reconnect
                src.active = True
            elif pending is None and not changed:
                self.errors.clients_duplicate_sir_count += 1
                return
            src.raw = raw
            if changed:
                self._relay_sir(src)
            return
        deleted = self.lifetimes.pending_ser(key)
        if deleted is not None and deleted.owner is client:
            # Deleted and re-created inside the back-off: cancel the SER; receivers still
            # hold the source, so relay only if it changed.
            self.lifetimes.cancel_ser(key)
            changed = deleted.raw != raw
        else:
            changed = True
        if not self._room_for_source(client, topic, now):
            self.refused.sources += 1
            return
        st.client_sir_received_count += 1
        src = Source(key, raw, client)
        self.registry.add_source(src)
        st.client_active_sir_count = len(client.sources)
        if st.client_active_sir_count > st.client_max_concurrent_sir_count:
            st.client_max_concurrent_sir_count = st.client_active_sir_count
        if self.events.keep:
            self.events.add("SIR", client, now, rec)
        if changed:
            self._relay_sir(src)

    def _room_for_source(self, client: Client, topic: str, now: float) -> bool:
        """Whether a new source of ``client`` fits its quota, its host's and the table; inactive
        clients (of the host for its quota, of any host for the table) are expired early, the
        longest-inactive first, to make room.  A refusal is counted and tallied for the log."""
        cfg = self.config
        registry = self.registry
        held = len(client.sources)
        if held >= cfg.max_sources_per_client:
            self.refused.sources_client_quota += 1
            self.tally.add(
                REFUSED_SOURCE_CLIENT,
                client.describe(),
                f"SIR for topic {topic!r} refused: the client holds {held} sources "
                f"(<pyum-limits><max-sources-per-client> {cfg.max_sources_per_client})",
            )
            return False
        host = client.host
        while registry.host_sources.get(host, 0) >= cfg.max_sources_per_host:
            victim = self._inactive(host)
            if victim is None:
                self.refused.sources_host_quota += 1
                self.tally.add(
                    REFUSED_SOURCE_HOST,
                    client.describe(),
                    f"SIR for topic {topic!r} refused: host {host} holds "
                    f"{registry.host_sources.get(host, 0)} sources "
                    f"(<pyum-limits><max-sources-per-host> {cfg.max_sources_per_host})",
                )
                return False
            self.evict(victim, now)
        while len(registry.sources) >= cfg.max_sources:
            victim = self._inactive(None)
            if victim is None:
                self.tally.add(
                    REFUSED_SOURCE_TABLE,
                    client.describe(),
                    f"SIR for topic {topic!r} refused: the SRS holds {len(registry.sources)} "
                    f"sources, all of connected clients "
                    f"(<pyum-limits><max-sources> {cfg.max_sources})",
                )
                return False
            self.evict(victim, now)
        return True

    def _inactive(self, host: str | None) -> Client | None:
        """The longest-inactive client (of ``host``, or any), remembering a miss until another
        client goes inactive."""
        epoch = self.registry.inactive_epoch
        if self._none_inactive.get(host) == epoch:
            return None
        victim = self.registry.oldest_inactive(host)
        if victim is None:
            if len(self._none_inactive) >= _MAX_NEGATIVE_HOSTS:
                self._none_inactive.clear()
            self._none_inactive[host] = epoch
        return victim

    def evict(self, client: Client, now: float) -> None:
        """Expire an inactive client now, every kind of its records (announcing the ends as
        its lifetimes would), and forget it: room for a new client or new sources."""
        self.refused.clients_evicted += 1
        for kind in EXPIRY_KINDS:
            self.expire_unconfirmed(client, kind, now)
        self.registry.clients.pop(client.key, None)

    def _refuse(self, kind: str, client: Client, what: str, bound: int) -> None:
        """Tally a refusal by a fixed per-client bound (a named constant of common)."""
        self.tally.add(
            kind, client.describe(), f"{what} refused: the client holds {bound} (a pyum bound)"
        )

    def _relay_sir(self, src: Source) -> None:
        for c in self.registry.recipients(src.key[1], src.owner):
            if c.streaming:
                self._queue_sir(c, src)

    def _queue_sir(self, client: Client, src: Source) -> None:
        self._queue(client, src.raw)
        client.stats.client_sir_sent_count += 1

    def _sdr(self, client: Client, rec: SourceDelete, now: float) -> None:
        client.stats.client_sdr_received_count += 1
        key = (rec.otid, rec.topic)
        src = client.sources.get(key)
        if src is None:
            if rec.topic not in self.registry.by_topic:
                self.errors.clients_invalid_sdr_no_topic_match_count += 1
            else:
                self.errors.clients_invalid_sdr_no_otid_match_count += 1
            client.err.client_invalid_sdr_received_count += 1
            return
        self.registry.remove_source(src)
        client.stats.client_active_sir_count = len(client.sources)
        if self.events.keep:
            self.events.add("SDR", client, now, rec)
        self._schedule_ser(src, now)

    def send_ser(self, src: Source) -> None:
        raw = ser_of(src.raw)
        for c in self.registry.recipients(src.key[1], src.owner):
            if c.streaming:
                self._queue(c, raw)
                c.stats.client_ser_sent_count += 1

    def _rir(self, client: Client, rec: ReceiverInfo, now: float) -> None:
        topic = rec.topic = sys.intern(rec.topic)
        state = client.interest.get(topic)
        if state is True:
            self.errors.clients_duplicate_rir_count += 1
            client.err.client_duplicate_rir_received_count += 1
            return
        if state is None:
            if len(client.interest) >= MAX_INTEREST_PER_CLIENT:
                self.refused.interest += 1
                self._refuse(
                    REFUSED_INTEREST, client, f"RIR for topic {topic!r}", MAX_INTEREST_PER_CLIENT
                )
                return
            client.stats.client_rir_received_count += 1
            self.registry.add_interest(client, topic)
            client.interest_ids[(topic, False)] = (rec.domain_id, bytes(rec.context_instance))
            if self.events.keep:
                self.events.add("RIR", client, now, rec)
            self._forward_interest(client, rec, "rir")
        client.interest[topic] = True
        if client.streaming:
            for src in self.registry.by_topic.get(topic, {}).values():
                if src.owner is not client:
                    self._queue_sir(client, src)

    def _rdr(self, client: Client, rec: ReceiverDelete, now: float) -> None:
        client.stats.client_rdr_received_count += 1
        if client.interest.pop(rec.topic, None) is None:
            return
        client.interest_ids.pop((rec.topic, False), None)
        self.registry.drop_interest(client, rec.topic)
        if self.events.keep:
            self.events.add("RDR", client, now, rec)
        end = ReceiverEnd(
            rec.topic,
            domain_id=rec.domain_id,
            context_instance=rec.context_instance,
            context_type=rec.context_type,
        )
        self._forward_interest(client, end, "rer")

    def _wir(self, client: Client, rec: WildcardReceiverInfo, now: float) -> None:
        pattern = rec.pattern
        state = client.patterns.get(pattern)
        if state is True:
            self.errors.clients_duplicate_wir_count += 1
            client.err.client_duplicate_wir_received_count += 1
            return
        entry = self.registry.patterns.get(pattern)
        regex = entry[0] if entry is not None else None
        if state is None:
            if len(client.patterns) >= MAX_PATTERNS_PER_CLIENT:
                self.refused.patterns += 1
                self._refuse(
                    REFUSED_PATTERNS, client, f"WIR for {pattern!r}", MAX_PATTERNS_PER_CLIENT
                )
                return
            regex = self.registry.add_pattern(client, pattern)
            if regex is None:
                client.err.client_invalid_srs_message_received_count += 1
                return
            client.stats.client_wir_received_count += 1
            client.interest_ids[(pattern, True)] = (rec.domain_id, bytes(rec.context_instance))
            if self.events.keep:
                self.events.add("WIR", client, now, rec)
            self._forward_interest(client, rec, "wir")
        client.patterns[pattern] = True
        if client.streaming and regex is not None:
            for topic, sources in self.registry.by_topic.items():
                if regex.search(topic) is not None:
                    for src in sources.values():
                        if src.owner is not client:
                            self._queue_sir(client, src)

    def _wdr(self, client: Client, rec: WildcardReceiverDelete, now: float) -> None:
        client.stats.client_wdr_received_count += 1
        if client.patterns.pop(rec.pattern, None) is None:
            return
        client.interest_ids.pop((rec.pattern, True), None)
        self.registry.drop_pattern(client, rec.pattern)
        if self.events.keep:
            self.events.add("WDR", client, now, rec)
        end = WildcardReceiverEnd(
            rec.pattern,
            domain_id=rec.domain_id,
            context_instance=rec.context_instance,
            context_type=rec.context_type,
        )
        self._forward_interest(client, end, "wer")

    def _forward_interest(self, origin: Client, rec: BatchRecord, kind: str) -> None:
        if not self.registry.forward:
            return
        raw = rec.encode()
        for c in self.registry.forward:
            if c is not origin and c.streaming:
                self._queue(c, raw)
                counter = f"client_{kind}_sent_count"
                setattr(c.stats, counter, getattr(c.stats, counter) + 1)

    def _slr(self, client: Client, rec: SourceLeave, now: float) -> None:
        client.stats.client_slr_received_count += 1
        if (rec.otid, rec.topic) in self.registry.sources:
            pass
        elif rec.topic not in self.registry.by_topic:
            self.errors.clients_invalid_slr_no_topic_match_count += 1
        else:
            self.stats.clients_slr_no_otid_match_count += 1
        if self.events.keep:
            self.events.add("SLR", client, now, rec)

    def _dir(self, client: Client, rec: DomainInfo, now: float) -> None:
        entry = client.dr_records.get(rec.domain_id)
        if entry is not None and entry[1]:
            self.errors.clients_duplicate_dir_count += 1
            return
        if self.registry.dir_domain is not None and self.registry.dir_domain != rec.domain_id:
            self.errors.clients_mismatched_dir_count += 1
        self.registry.dir_domain = rec.domain_id
        if entry is None and len(client.dr_records) >= MAX_ROUTES_PER_CLIENT:
            self.refused.routes += 1
            self._refuse(REFUSED_ROUTES, client, "DIR", MAX_ROUTES_PER_CLIENT)
            return
        client.dr_records[rec.domain_id] = (rec, True)
        if entry is None:
            raw = rec.encode()
            for c in self.registry.clients.values():
                if c is not client and c.streaming:
                    self._queue(c, raw)
                    c.stats.client_dir_sent_count += 1

    def _rtir(self, client: Client, rec: RouteInfo, now: float) -> None:
        client.stats.client_rtir_received_count += 1
        raw = rec.encode()
        entry = client.routes.get(raw)
        if entry is not None and entry[1]:
            self.errors.clients_duplicate_rtir_count += 1
            client.err.client_duplicate_rtir_received_count += 1
            return
        if entry is None and len(client.routes) >= MAX_ROUTES_PER_CLIENT:
            self.refused.routes += 1
            self._refuse(REFUSED_ROUTES, client, "RTIR", MAX_ROUTES_PER_CLIENT)
            return
        client.routes[raw] = (rec, True)
        if self.events.keep:
            self.events.add("RTIR", client, now, rec)
        if entry is None:
            for c in self.registry.clients.values():
                if c is not client and c.streaming:
                    self._queue(c, raw)
                    c.stats.client_rtir_sent_count += 1

    def _cnir(self, client: Client, rec: ContextNameInfo, now: float) -> None:
        client.stats.client_cnir_received_count += 1
        entry = client.names.get(rec.name)
        if entry is not None and entry[1]:
            if entry[0] == rec:
                self.stats.clients_duplicate_cnir_count += 1
                client.err.client_duplicate_cnir_received_count += 1
                return
            self.errors.clients_invalid_cnir_name_mismatch_count += 1
        elif client.names and rec.name not in client.names:
            self.errors.clients_invalid_cnir_name_mismatch_count += 1
        if entry is None and len(client.names) >= MAX_NAMES_PER_CLIENT:
            self.refused.names += 1
            self._refuse(REFUSED_NAMES, client, "CNIR", MAX_NAMES_PER_CLIENT)
            return
        client.names[rec.name] = (rec, True)
        if self.events.keep:
            self.events.add("CNIR", client, now, rec)
        raw = rec.encode()
        for c in self.registry.clients.values():
            if c is not client and rec.name in c.cname_query and c.streaming:
                self._queue(c, raw)
                c.stats.client_cnir_sent_count += 1

    def _cnqr(self, client: Client, rec: ContextNameQuery, now: float) -> None:
        client.stats.client_cnqr_received_count += 1
        if rec.name in client.cname_query:
            client.err.client_duplicate_cnqr_received_count += 1
        elif len(client.cname_query) >= MAX_NAMES_PER_CLIENT:
            self.refused.names += 1
            self._refuse(REFUSED_NAMES, client, "CNQR", MAX_NAMES_PER_CLIENT)
            return
        client.cname_query.add(rec.name)
        if self.events.keep:
            self.events.add("CNQR", client, now, rec)
        if client.streaming:
            for other in self.registry.clients.values():
                entry = other.names.get(rec.name)
                if entry is not None and other is not client:
                    self._queue(client, entry[0].encode())
                    client.stats.client_cnir_sent_count += 1

    def expire_unconfirmed(self, client: Client, kind: str, now: float) -> None:
        s = self.stats
        if kind == "sources":
            for src in [x for x in client.sources.values() if not x.active]:
                self.registry.remove_source(src)
                s.clients_expired_sir_count += 1
                self._schedule_ser(src, now)
            client.stats.client_active_sir_count = len(client.sources)
        elif kind == "interest":
            for topic in [t for t, a in client.interest.items() if not a]:
                del client.interest[topic]
                self.registry.drop_interest(client, topic)
                s.clients_expired_rir_count += 1
                dom, inst = client.interest_ids.pop((topic, False), (client.domain_id, bytes(8)))
                end_r = ReceiverEnd(
                    topic, domain_id=dom, context_instance=inst, context_type=client.app_type
                )
                self._forward_interest(client, end_r, "rer")
            for pattern in [p for p, a in client.patterns.items() if not a]:
                del client.patterns[pattern]
                self.registry.drop_pattern(client, pattern)
                s.clients_expired_wir_count += 1
                dom, inst = client.interest_ids.pop((pattern, True), (client.domain_id, bytes(8)))
                end_w = WildcardReceiverEnd(
                    pattern, domain_id=dom, context_instance=inst, context_type=client.app_type
                )
                self._forward_interest(client, end_w, "wer")
        elif kind == "routes":
            for key, (rt, active) in list(client.routes.items()):
                if not active:
                    del client.routes[key]
                    s.clients_expired_rtir_count += 1
                    end = RouteEnd(
                        rt.domains,
                        rt.ip,
                        rt.port,
                        route_index=rt.route_index,
                        context_instance=rt.context_instance,
                        context_type=rt.context_type,
                    ).encode()
                    for c in self.registry.clients.values():
                        if c is not client and c.streaming:
                            self._queue(c, end)
                            c.stats.client_rter_sent_count += 1
            for dom, (_d, active) in list(client.dr_records.items()):
                if not active:
                    del client.dr_records[dom]
                    s.clients_expired_dir_count += 1
        elif kind == "names":
            for name, (cn, active) in list(client.names.items()):
                if not active:
                    del client.names[name]
                    s.clients_expired_cnir_count += 1
                    end = ContextNameEnd(
                        cn.name,
                        cn.ip,
                        cn.port,
                        domain_id=cn.domain_id,
                        origin_context_instance=cn.origin_context_instance,
                        context_instance=cn.context_instance,
                        context_type=cn.context_type,
                    ).encode()
                    for c in self.registry.clients.values():
                        if c is not client and name in c.cname_query and c.streaming:
                            self._queue(c, end)
