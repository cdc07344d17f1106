"""SRS statistics objects, named after the fields of ``srs_mon.proto``.

Theory of operation
-------------------
The SRS keeps its counters in plain slotted objects whose attribute names are exactly the
protobuf field names of ``SRSMonMsg.Stats.SRS`` / ``SRSError`` / ``UMClient`` / ``UMClientError``
(seed-srs-lbmrd.md 1.7.3-1.7.6).  The hot path does ``stats.x += 1`` and nothing else; the
monitoring publisher copies them into protobuf messages (:func:`fill_pb`) or into the JSON
envelopes of :mod:`umcore.monitor.jsonfmt` (which maps JSON names to the same field names), and
the Prometheus collector reads the protobuf messages.  No protobuf import here: the sans-IO core
stays free of it.
"""

from __future__ import annotations

from typing import Any

__all__ = [
    "CLIENT_ERROR_FIELDS",
    "CLIENT_FIELDS",
    "SRS_ERROR_FIELDS",
    "SRS_FIELDS",
    "ClientErrorStats",
    "ClientStats",
    "SRSErrorStats",
    "SRSStats",
    "fill_pb",
]

SRS_FIELDS = (
    "clients_next_client_id",
    "active_clients_count",
    "clients_connects_count",
    "clients_disconnects_count",
    "clients_max_concurrent_connections_count",
    "clients_active_sir_count",
    "clients_active_rir_count",
    "clients_active_wir_count",
    "clients_inactive_sir_count",
    "clients_inactive_rir_count",
    "clients_inactive_wir_count",
    "clients_expired_sir_count",
    "clients_expired_rir_count",
    "clients_expired_wir_count",
    "clients_dr_inactive_sir_count",
    "clients_slr_no_otid_match_count",
    "clients_active_cnir_count",
    "clients_inactive_cnir_count",
    "clients_expired_cnir_count",
    "clients_duplicate_cnir_count",
    "clients_active_dir_count",
    "clients_inactive_dir_count",
    "clients_expired_dir_count",
    "clients_active_rtir_count",
    "clients_inactive_rtir_count",
    "clients_expired_rtir_count",
)
SRS_ERROR_FIELDS = (
    "clients_duplicate_sir_count",
    "clients_duplicate_rir_count",
    "clients_duplicate_wir_count",
    "clients_invalid_sdr_no_topic_match_count",
    "clients_invalid_sdr_no_otid_match_count",
    "clients_invalid_sdr_no_transport_match_count",
    "clients_invalid_dr_no_topic_match_count",
    "clients_invalid_dr_no_otid_match_count",
    "clients_invalid_dr_no_transport_match_count",
    "clients_invalid_slr_no_topic_match_count",
    "clients_invalid_cnir_name_mismatch_count",
    "clients_duplicate_dir_count",
    "clients_mismatched_dir_count",
    "clients_duplicate_rtir_count",
)
CLIENT_FIELDS = (
    "client_sir_received_count",
    "client_sdr_received_count",
    "client_rir_received_count",
    "client_wir_received_count",
    "client_rdr_received_count",
    "client_wdr_received_count",
    "client_slr_received_count",
    "client_active_sir_count",
    "client_max_concurrent_sir_count",
    "client_rtir_received_count",
    "client_cnir_received_count",
    "client_cnqr_received_count",
    "client_unexpected_cner_received_count",
    "client_sir_sent_count",
    "client_ser_sent_count",
    "client_rir_sent_count",
    "client_rer_sent_count",
    "client_wir_sent_count",
    "client_wer_sent_count",
    "client_dir_sent_count",
    "client_rtir_sent_count",
    "client_rter_sent_count",
    "client_cnir_sent_count",
    "record_queue_depth",
)
CLIENT_ERROR_FIELDS = (
    "client_duplicate_rir_received_count",
    "client_duplicate_wir_received_count",
    "client_invalid_srs_message_received_count",
    "client_invalid_sdr_received_count",
    "client_duplicate_rtir_received_count",
    "client_duplicate_cnir_received_count",
    "client_duplicate_cnqr_received_count",
    "client_unexpected_srs_message_sent_count",
)


class _Counters:
    __slots__: tuple[str, ...] = ()
    FIELDS: tuple[str, ...] = ()

    def __init__(self) -> None:
        for name in self.FIELDS:
            setattr(self, name, 0)

    def as_dict(self) -> dict[str, int]:
        return {name: getattr(self, name) for name in self.FIELDS}

    def __repr__(self) -> str:
        nonzero = ", ".join(f"{k}={v}" for k, v in self.as_dict().items() if v)
        return f"{type(self).__name__}({nonzero})"


class SRSStats(_Counters):
    """``Stats.SRS`` (SRS_STATS).  The active/inactive counts are kept current by the server."""

    FIELDS = SRS_FIELDS
    __slots__ = SRS_FIELDS
    clients_next_client_id: int
    active_clients_count: int
    clients_connects_count: int
    clients_disconnects_count: int
    clients_max_concurrent_connections_count: int
    clients_active_sir_count: int
    clients_active_rir_count: int
    clients_active_wir_count: int
    clients_inactive_sir_count: int
    clients_inactive_rir_count: int
    clients_inactive_wir_count: int
    clients_expired_sir_count: int
    clients_expired_rir_count: int
    clients_expired_wir_count: int
    clients_dr_inactive_sir_count: int
    clients_slr_no_otid_match_count: int
    clients_active_cnir_count: int
    clients_inactive_cnir_count: int
    clients_expired_cnir_count: int
    clients_duplicate_cnir_count: int
    clients_active_dir_count: int
    clients_inactive_dir_count: int
    clients_expired_dir_count: int
    clients_active_rtir_count: int
    clients_inactive_rtir_count: int
    clients_expired_rtir_count: int


class SRSErrorStats(_Counters):
    """``Stats.SRSError`` (SRS_ERROR_STATS)."""

    FIELDS = SRS_ERROR_FIELDS
    __slots__ = SRS_ERROR_FIELDS
    clients_duplicate_sir_count: int
    clients_duplicate_rir_count: int
    clients_duplicate_wir_count: int
    clients_invalid_sdr_no_topic_match_count: int
    clients_invalid_sdr_no_otid_match_count: int
    clients_invalid_sdr_no_transport_match_count: int
    clients_invalid_dr_no_topic_match_count: int
    clients_invalid_dr_no_otid_match_count: int
    clients_invalid_dr_no_transport_match_count: int
    clients_invalid_slr_no_topic_match_count: int
    clients_invalid_cnir_name_mismatch_count: int
    clients_duplicate_dir_count: int
    clients_mismatched_dir_count: int
    clients_duplicate_rtir_count: int


class ClientStats(_Counters):
    """``Stats.UMClient`` (UM_CLIENT_STATS) of one client, without ``um_client_info``."""

    FIELDS = CLIENT_FIELDS
    __slots__ = CLIENT_FIELDS
    client_sir_received_count: int
    client_sdr_received_count: int
    client_rir_received_count: int
    client_wir_received_count: int
    client_rdr_received_count: int
    client_wdr_received_count: int
    client_slr_received_count: int
    client_active_sir_count: int
    client_max_concurrent_sir_count: int
    client_rtir_received_count: int
    client_cnir_received_count: int
    client_cnqr_received_count: int
    client_unexpected_cner_received_count: int
    client_sir_sent_count: int
    client_ser_sent_count: int
    client_rir_sent_count: int
    client_rer_sent_count: int
    client_wir_sent_count: int
    client_wer_sent_count: int
    client_dir_sent_count: int
    client_rtir_sent_count: int
    client_rter_sent_count: int
    client_cnir_sent_count: int
    record_queue_depth: int


class ClientErrorStats(_Counters):
    """``Stats.UMClientError`` (UM_CLIENT_ERROR_STATS) of one client."""

    FIELDS = CLIENT_ERROR_FIELDS
    __slots__ = CLIENT_ERROR_FIELDS
    client_duplicate_rir_received_count: int
    client_duplicate_wir_received_count: int
    client_invalid_srs_message_received_count: int
    client_invalid_sdr_received_count: int
    client_duplicate_rtir_received_count: int
    client_duplicate_cnir_received_count: int
    client_duplicate_cnqr_received_count: int
    client_unexpected_srs_message_sent_count: int


def fill_pb(counters: _Counters, message: Any) -> Any:
    """Copy every counter into the protobuf message of the same shape; returns ``message``."""
    for name in counters.FIELDS:
        setattr(message, name, getattr(counters, name))
    return message
