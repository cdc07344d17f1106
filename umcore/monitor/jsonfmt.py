"""The SRS's deprecated JSON statistics format: envelopes, stat names, and the "changed only" rule.

Theory of operation
-------------------
Before protobuf (UM 6.15) the SRS published its statistics as JSON text, one category per
message (seed-srs-lbmrd.md 1.7.2-1.7.9).  Every message names its category in
``monitorInfoCategory``; then:

- statistics categories carry ``stats``: an array of ``{"name": ..., "value": number}``; the
  per-client ones add ``srsRegistrationInfo`` ``{"ip": str, "port": str, "sessionId": "0x..."}``
  (the port is a *string* in JSON, a uint32 in protobuf: trap 14);
- configuration categories carry ``configOptions``: ``{"name": ..., "value": str}`` where the name
  is the element path with an ``um-srs.`` prefix;
- connection events carry ``connectionEventType`` and an ``events`` array of exactly one element
  whose time is a Java ``Date.toString()`` text such as ``Thu Jan 24 00:28:26 UTC 2019``.

A snapshot holds every statistic; a periodic update holds **only the statistics that changed**
since the last publication of that object, and nothing is published when nothing changed
(trap 17: the protobuf format repeats full values instead; the two rules are kept apart).
:class:`ChangeFilter` applies that rule.  UM's documentation samples carry trailing commas; we
always emit strict JSON (:func:`dumps`), compact, ASCII, no NaN.

The name tables map each JSON statistic to its protobuf field so one statistics object can feed
both formats (:func:`stats_from_pb`, :func:`config_from_pb`).
"""

from __future__ import annotations

import datetime as _dt
import json
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from umcore.config.srs import PUBLISH_CATEGORIES
from umcore.errors import LocalProtocolError
from umcore.monitor.categories import CONFIG_CATEGORIES, PER_CLIENT_CATEGORIES, Category

# -- name tables (seed-srs-lbmrd.md 1.7.3-1.7.9): (JSON name, protobuf field) --------------------

SRS_STATS_NAMES: tuple[tuple[str, str], ...] = (
    ("clients.next.client.ID", "clients_next_client_id"),
    ("active.clients.count", "active_clients_count"),
    ("clients.connects.count", "clients_connects_count"),
    ("clients.disconnects.count", "clients_disconnects_count"),
    ("clients.max.concurrent.connections.count", "clients_max_concurrent_connections_count"),
    ("clients.active.SIR.count", "clients_active_sir_count"),
    ("clients.active.RIR.count", "clients_active_rir_count"),
    ("clients.active.WIR.count", "clients_active_wir_count"),
    ("clients.inactive.SIR.count", "clients_inactive_sir_count"),
    ("clients.inactive.RIR.count", "clients_inactive_rir_count"),
    ("clients.inactive.WIR.count", "clients_inactive_wir_count"),
    ("clients.expired.SIR.count", "clients_expired_sir_count"),
    ("clients.expired.RIR.count", "clients_expired_rir_count"),
    ("clients.expired.WIR.count", "clients_expired_wir_count"),
    ("clients.DR.inactive.SIR.count", "clients_dr_inactive_sir_count"),
    ("clients.SLR.no.OTID.match.count", "clients_slr_no_otid_match_count"),
    ("clients.active.CNIR.count", "clients_active_cnir_count"),
    ("clients.inactive.CNIR.count", "clients_inactive_cnir_count"),
    ("clients.expired.CNIR.count", "clients_expired_cnir_count"),
    ("clients.duplicate.CNIR.count", "clients_duplicate_cnir_count"),
    ("clients.active.DIR.count", "clients_active_dir_count"),
    ("clients.inactive.DIR.count", "clients_inactive_dir_count"),
    ("clients.expired.DIR.count", "clients_expired_dir_count"),
    ("clients.active.RTIR.count", "clients_active_rtir_count"),
    ("clients.inactive.RTIR.count", "clients_inactive_rtir_count"),
    ("clients.expired.RTIR.count", "clients_expired_rtir_count"),
)

SRS_ERROR_STATS_NAMES: tuple[tuple[str, str], ...] = (
    ("clients.duplicate.SIR.count", "clients_duplicate_sir_count"),
    ("clients.duplicate.RIR.count", "clients_duplicate_rir_count"),
    ("clients.duplicate.WIR.count", "clients_duplicate_wir_count"),
    ("clients.invalid.SDR.no.topic.match.count", "clients_invalid_sdr_no_topic_match_count"),
    ("clients.invalid.SDR.no.OTID.match.count", "clients_invalid_sdr_no_otid_match_count"),
    (
        "clients.invalid.SDR.no.transport.match.count",
        "clients_invalid_sdr_no_transport_match_count",
    ),
    ("clients.invalid.DR.no.topic.match.count", "clients_invalid_dr_no_topic_match_count"),
    ("clients.invalid.DR.no.OTID.match.count", "clients_invalid_dr_no_otid_match_count"),
    (
        "clients.invalid.DR.no.transport.match.count",
        "clients_invalid_dr_no_transport_match_count",
    ),
    ("clients.invalid.SLR.no.topic.match.count", "clients_invalid_slr_no_topic_match_count"),
    ("clients.invalid.CNIR.name.mismatch.count", "clients_invalid_cnir_name_mismatch_count"),
    ("clients.duplicate.DIR.count", "clients_duplicate_dir_count"),
    ("clients.mismatched.DIR.count", "clients_mismatched_dir_count"),
    ("clients.duplicate.RTIR.count", "clients_duplicate_rtir_count"),
)

JSON_ONLY_ERROR_STATS: tuple[str, ...] = ("clients.invalid.DR.inactive.SIR.count",)
"""In the 6.16 JSON error table but without a protobuf field (trap 14); should stay 0."""

UM_CLIENT_STATS_NAMES: tuple[tuple[str, str], ...] = (
    ("client.SIR.received.count", "client_sir_received_count"),
    ("client.SDR.received.count", "client_sdr_received_count"),
    ("client.RIR.received.count", "client_rir_received_count"),
    ("client.WIR.received.count", "client_wir_received_count"),
    ("client.RDR.received.count", "client_rdr_received_count"),
    ("client.WDR.received.count", "client_wdr_received_count"),
    ("client.SLR.received.count", "client_slr_received_count"),
    ("client.active.SIR.count", "client_active_sir_count"),
    ("client.max.concurrent.SIR.count", "client_max_concurrent_sir_count"),
    ("client.RTIR.received.count", "client_rtir_received_count"),
    ("client.CNIR.received.count", "client_cnir_received_count"),
    ("client.CNQR.received.count", "client_cnqr_received_count"),
    ("client.unexpected.CNER.received.count", "client_unexpected_cner_received_count"),
    ("client.SIR.sent.count", "client_sir_sent_count"),
    ("client.SER.sent.count", "client_ser_sent_count"),
    ("client.RIR.sent.count", "client_rir_sent_count"),
    ("client.RER.sent.count", "client_rer_sent_count"),
    ("client.WIR.sent.count", "client_wir_sent_count"),
    ("client.WER.sent.count", "client_wer_sent_count"),
    ("client.DIR.sent.count", "client_dir_sent_count"),
    ("client.RTIR.sent.count", "client_rtir_sent_count"),
    ("client.RTER.sent.count", "client_rter_sent_count"),
    ("client.CNIR.sent.count", "client_cnir_sent_count"),
    ("record.queue.depth", "record_queue_depth"),
)

UM_CLIENT_ERROR_STATS_NAMES: tuple[tuple[str, str], ...] = (
    ("client.duplicate.RIR.received.count", "client_duplicate_rir_received_count"),
    ("client.duplicate.WIR.received.count", "client_duplicate_wir_received_count"),
    ("client.invalid.SRS.message.received.count", "client_invalid_srs_message_received_count"),
    ("client.invalid.SDR.received.count", "client_invalid_sdr_received_count"),
    ("client.duplicate.RTIR.received.count", "client_duplicate_rtir_received_count"),
    ("client.duplicate.CNIR.received.count", "client_duplicate_cnir_received_count"),
    ("client.duplicate.CNQR.received.count", "client_duplicate_cnqr_received_count"),
    ("client.unexpected.SRS.message.sent.count", "client_unexpected_srs_message_sent_count"),
)

STATS_NAMES: dict[Category, tuple[tuple[str, str], ...]] = {
    Category.SRS_STATS: SRS_STATS_NAMES,
    Category.SRS_ERROR_STATS: SRS_ERROR_STATS_NAMES,
    Category.UM_CLIENT_STATS: UM_CLIENT_STATS_NAMES,
    Category.UM_CLIENT_ERROR_STATS: UM_CLIENT_ERROR_STATS_NAMES,
}

_CONFIG_OPTION_PATHS = (
    "version",
    "daemon.log",
    "daemon.log.type",
    "daemon.log.frequency",
    "daemon.log.size",
    "daemon.log.max-history",
    "daemon.log.total-size-cap",
    "daemon.log.compression",
    "daemon.pid-file",
    "srs.interface",
    "srs.port",
    "srs.state-lifetime",
    "srs.source-state-lifetime",
    "srs.interest-state-lifetime",
    "srs.route-state-lifetime",
    "srs.context-name-state-lifetime",
    "srs.source-leave-backoff",
    "srs.clientactor.request-stream-max-msg-count",
    "srs.clientactor.record-queue-service-interval",
    "srs.clientactor.batch-frame-max-record-count",
    "srs.clientactor.batch-frame-max-datagram-size",
    "srs.application-id",
    "debug-monitor.interface",
    "debug-monitor.port",
    "debug-monitor.enabled",
    "debug-monitor.ping-interval",
    "daemon-monitor.topic",
    "daemon-monitor.ping-interval",
    *(f"daemon-monitor.publishing-interval.{c}" for c in ("default", *PUBLISH_CATEGORIES)),
    "daemon-monitor.publish-connection-events.allow",
    "daemon-monitor.remote-snapshot-request.allow",
    "daemon-monitor.remote-config-changes-request.allow",
    "daemon-monitor.monitor-format",
)
_INTERNAL_OPTION_PATHS = (
    "srs.otidmap.shards",
    "srs.topicmap.shards",
    "srs.routemap.shards",
    "srs.namemap.shards",
)


def _pb_name(path: str) -> str:
    # The protobuf Configs field is the element path with "." and "-" turned into "_" (1.7.8).
    return path.replace(".", "_").replace("-", "_")


CONFIG_OPTS_NAMES: tuple[tuple[str, str], ...] = tuple(
    (f"um-srs.{p}", _pb_name(p)) for p in _CONFIG_OPTION_PATHS
)
"""(JSON option name, ``SRSMonMsg.Configs`` field) for CONFIG_OPTS."""

INTERNAL_CONFIG_OPTS_NAMES: tuple[tuple[str, str], ...] = tuple(
    (f"um-srs.{p}", _pb_name(p)) for p in _INTERNAL_OPTION_PATHS
)
"""(JSON option name, ``SRSMonMsg.Configs.Internal`` field) for INTERNAL_CONFIG_OPTS."""

LBM_ATTRIBUTES_PREFIX = "um-srs.daemon-monitor.lbm-attributes."
"""JSON name prefix of the monitoring context's options: ``<prefix><scope>.<option_name>``."""

CONNECTION_EVENT_TYPES = ("UM_CLIENT_CONNECT", "UM_CLIENT_DISCONNECT", "SIR", "SDR")
"""``connectionEventType`` values of the JSON CONNECTION_EVENTS category (1.7.7)."""

MAX_TRACKED_OBJECTS = 100_000
"""Most (category, object) pairs whose last published values :class:`ChangeFilter` remembers.
One per category for the daemon plus one per connected client and category; the SRS's own client
limit keeps it far below this.  Beyond it an object is published in full and not remembered
(counted in ``ChangeFilter.untracked``), so memory stays bounded even if callers never call
:meth:`ChangeFilter.forget`."""


class Registration:
    """``srsRegistrationInfo``: which connected context (client) a message is about."""

    __slots__ = ("ip", "port", "session_id")

    def __init__(self, ip: str, port: int, session_id: int | str) -> None:
        self.ip = ip
        self.port = port
        self.session_id = session_id

    def session_text(self) -> str:
        """The session ID as the SRS writes it: ``0x`` and lower-case hex."""
        if isinstance(self.session_id, int):
            return f"0x{self.session_id:x}"
        return self.session_id

    def to_json(self) -> dict[str, str]:
        return {"ip": self.ip, "port": str(self.port), "sessionId": self.session_text()}

    def key(self) -> tuple[str, int, str]:
        return (self.ip, self.port, self.session_text())


def dumps(obj: Any) -> bytes:
    """Strict, compact, ASCII JSON: what every published message is serialised with."""
    return json.dumps(obj, allow_nan=False, ensure_ascii=True, separators=(",", ":")).encode(
        "ascii"
    )


def stats_message(
    category: Category,
    stats: Mapping[str, int] | Iterable[tuple[str, int]],
    registration: Registration | None = None,
) -> dict[str, Any]:
    """The JSON envelope of a statistics category (``stats`` array in the given order)."""
    if category not in STATS_NAMES:
        raise LocalProtocolError(f"{category} is not a statistics category")
    per_client = category in PER_CLIENT_CATEGORIES
    if per_client != (registration is not None):
        raise LocalProtocolError(
            f"{category}: srsRegistrationInfo is {'required' if per_client else 'not allowed'}"
        )
    items = stats.items() if isinstance(stats, Mapping) else stats
    msg: dict[str, Any] = {"monitorInfoCategory": category.value}
    if registration is not None:
        msg["srsRegistrationInfo"] = registration.to_json()
    msg["stats"] = [{"name": name, "value": int(value)} for name, value in items]
    return msg


def config_message(
    category: Category, options: Mapping[str, str] | Iterable[tuple[str, str]]
) -> dict[str, Any]:
    """The JSON envelope of CONFIG_OPTS or INTERNAL_CONFIG_OPTS (values are strings)."""
    if category not in CONFIG_CATEGORIES:
        raise LocalProtocolError(f"{category} is not a configuration category")
    items = options.items() if isinstance(options, Mapping) else options
    return {
        "monitorInfoCategory": category.value,
        "configOptions": [{"name": name, "value": str(value)} for name, value in items],
    }


def java_date(now: float, tz: _dt.tzinfo = _dt.UTC) -> str:
    """``now`` as Java's ``Date.toString()`` prints it: ``Thu Jan 24 00:28:26 UTC 2019``."""
    when = _dt.datetime.fromtimestamp(now, tz)
    return when.strftime("%a %b %d %H:%M:%S ") + (when.tzname() or "UTC") + when.strftime(" %Y")


def connection_event(
    event_type: str,
    registration: Registration,
    now: float,
    *,
    topic: str | None = None,
    source: str | None = None,
    tz: _dt.tzinfo = _dt.UTC,
) -> dict[str, Any]:
    """One CONNECTION_EVENTS message (1.7.7): a connect, disconnect, SIR or SDR."""
    if event_type not in CONNECTION_EVENT_TYPES:
        raise LocalProtocolError(f"unknown connection event type {event_type!r}")
    event: dict[str, Any] = {}
    if event_type == "UM_CLIENT_DISCONNECT":
        event["srsRegistrationInfo"] = registration.to_json()
    elif event_type in ("SIR", "SDR"):
        if topic is None or source is None:
            raise LocalProtocolError(f"{event_type} events need a topic and a source string")
        event["topic"] = topic
        event["source"] = source
    event["connectionEventType"] = event_type
    event["connectionEventTime"] = java_date(now, tz)
    return {
        "monitorInfoCategory": Category.CONNECTION_EVENTS.value,
        "srsRegistrationInfo": registration.to_json(),
        "connectionEventType": event_type,
        "events": [event],
    }


def stats_from_pb(category: Category, message: Any) -> dict[str, int]:
    """JSON statistic name -> value, read from the matching ``SRSMonMsg.Stats.*`` message."""
    return {name: int(getattr(message, field)) for name, field in STATS_NAMES[category]}


def config_from_pb(configs: Any) -> dict[str, str]:
    """CONFIG_OPTS JSON options from an ``SRSMonMsg.Configs`` (lbm-attributes included)."""
    out = {name: str(getattr(configs, field)) for name, field in CONFIG_OPTS_NAMES}
    for attr in configs.daemon_monitor_lbm_attributes:
        out[f"{LBM_ATTRIBUTES_PREFIX}{attr.scope}.{attr.name}"] = attr.value
    return out


def internal_config_from_pb(configs: Any) -> dict[str, str]:
    """INTERNAL_CONFIG_OPTS JSON options from an ``SRSMonMsg.Configs`` (its ``internal``)."""
    return {name: str(getattr(configs.internal, f)) for name, f in INTERNAL_CONFIG_OPTS_NAMES}


class ChangeFilter:
    """The JSON "only changed statistics" rule, per (category, object).

    ``filter`` returns what to publish: every statistic for a snapshot or an object never
    published before, otherwise only those whose value changed, or None when nothing changed (the
    message is then not published at all).
    """

    __slots__ = ("_last", "max_tracked", "untracked")

    def __init__(self, max_tracked: int = MAX_TRACKED_OBJECTS) -> None:
        self._last: dict[tuple[Category, Any], dict[str, int]] = {}
        self.max_tracked = max_tracked
        self.untracked = 0
        """Publications made in full because the table of remembered objects was full."""

    def __len__(self) -> int:
        return len(self._last)

    def filter(
        self,
        category: Category,
        stats: Mapping[str, int],
        key: Any = None,
        *,
        snapshot: bool = False,
    ) -> list[tuple[str, int]] | None:
        """Statistics to publish for object ``key`` (None: the daemon itself), in input order."""
        slot = (category, key)
        last = self._last.get(slot)
        current = {name: int(value) for name, value in stats.items()}
        if last is None and slot not in self._last and len(self._last) >= self.max_tracked:
            self.untracked += 1
            return list(current.items())
        self._last[slot] = current
        if snapshot or last is None:
            return list(current.items())
        changed = [(n, v) for n, v in current.items() if last.get(n) != v]
        return changed or None

    def forget(self, category: Category, key: Any = None) -> None:
        """Drop what was remembered for an object (a client that disconnected)."""
        self._last.pop((category, key), None)

    def forget_object(self, key: Any) -> None:
        """Drop every category remembered for ``key``."""
        for slot in [s for s in self._last if s[1] == key]:
            del self._last[slot]


def per_client_messages(
    category: Category,
    clients: Sequence[tuple[Registration, Mapping[str, int]]],
    changes: ChangeFilter,
    *,
    snapshot: bool = False,
) -> list[dict[str, Any]]:
    """One envelope per client whose statistics changed (all of them for a snapshot)."""
    out = []
    for registration, stats in clients:
        items = changes.filter(category, stats, registration.key(), snapshot=snapshot)
        if items is not None:
            out.append(stats_message(category, items, registration))
    return out
