"""Prometheus exposition: promtool-clean names, unit handling, and bounded label sets."""

from __future__ import annotations

import re

import pytest
from prometheus_client import CollectorRegistry, generate_latest

from tests.monitor.conftest import promtool_check
from umcore.monitor.pb import dro_mon_pb2, srs_mon_pb2, ums_mon_pb2
from umcore.monitor.prometheus import (
    OVERFLOW_LABEL,
    StatsCollector,
    is_gauge,
    metric_name,
    register,
)

SRS = srs_mon_pb2.SRSMonMsg.Stats


def sample_registry(n_clients: int = 5, cap: int = 100) -> tuple[CollectorRegistry, StatsCollector]:
    reg = CollectorRegistry()
    srs = SRS.SRS(active_clients_count=n_clients, clients_connects_count=n_clients + 2)
    clients = []
    for i in range(n_clients):
        c = SRS.UMClient(client_sir_received_count=i + 1, record_queue_depth=1)
        c.um_client_info.ip = f"10.0.{i // 250}.{i % 250}"
        c.um_client_info.port = 14000 + i
        clients.append(c)
    per_client = StatsCollector(
        "pyum",
        "srs_client",
        SRS.UMClient.DESCRIPTOR,
        lambda: [
            (c, {"client": f"{c.um_client_info.ip}:{c.um_client_info.port}"}) for c in clients
        ],
        labelnames=("client",),
        max_series=cap,
    )
    ctx = ums_mon_pb2.UMSMonMsg.Stats.Context(tr_dgrams_sent=10, rcv_cb_svc_time_min=2**64 - 1)
    local = dro_mon_pb2.DROMonMsg.Stats.Local(
        gateway_name="dro1", recalc_duration_sec=2, recalc_duration_usec=500000, gateway_count=2
    )
    register(
        reg,
        StatsCollector("pyum", "srs", SRS.SRS.DESCRIPTOR, lambda: [(srs, {})]),
        StatsCollector(
            "pyum", "srs_error", SRS.SRSError.DESCRIPTOR, lambda: [(SRS.SRSError(), {})]
        ),
        per_client,
        StatsCollector(
            "pyum",
            "context",
            ctx.DESCRIPTOR,
            lambda: [(ctx, {})],
            scales={"rcv_cb_svc_time_min": 1e-6},
        ),
        StatsCollector("pyum", "dro", local.DESCRIPTOR, lambda: [(local, {})]),
    )
    return reg, per_client


def samples(text: str, name: str) -> dict[str, float]:
    out = {}
    for line in text.splitlines():
        m = re.match(rf"{name}(\{{[^}}]*\}})? (\S+)$", line)
        if m:
            out[m.group(1) or ""] = float(m.group(2))
    return out


def test_promtool_accepts_our_exposition(promtool: str) -> None:
    reg, _ = sample_registry(n_clients=20, cap=8)
    exposition = generate_latest(reg)
    result = promtool_check(promtool, exposition)
    assert result.returncode == 0, (result.stdout + result.stderr).decode()


def test_promtool_would_catch_a_bad_name(promtool: str) -> None:
    # The oracle can fail: a gauge named like a counter is reported.
    bad = b"# HELP x_total h\n# TYPE x_total gauge\nx_total 1\n"
    assert promtool_check(promtool, bad).returncode != 0


def test_names_kinds_and_units() -> None:
    text = generate_latest(sample_registry()[0]).decode()
    assert "# TYPE pyum_srs_active_clients gauge" in text
    assert "# TYPE pyum_srs_clients_connects_total counter" in text
    assert samples(text, "pyum_srs_clients_connects_total") == {"": 7.0}
    assert "# TYPE pyum_srs_client_record_queue_depth gauge" in text
    # sec + usec are one metric in seconds
    assert samples(text, "pyum_dro_recalc_duration_seconds") == {"": 2.5}
    # "no sample yet" minimum is left out, not exported as 1.8e19
    assert samples(text, "pyum_context_rcv_cb_svc_time_min_seconds") == {}
    assert samples(text, "pyum_context_tr_dgrams_sent_total") == {"": 10.0}
    # strings are not exported
    assert "gateway_name" not in text


@pytest.mark.parametrize(
    ("parts", "counter", "expected"),
    [
        (("pyum", "srs", "active_clients_count"), False, "pyum_srs_active_clients"),
        (("pyum", "srs", "clients_connects_count"), True, "pyum_srs_clients_connects_total"),
        (("pyum", "x", "bytes_total"), False, "pyum_x_bytes"),
        (("pyum", "x", "smallBlockSize"), False, "pyum_x_small_block_size"),
        (("pyum", "a-b", "c.d"), True, "pyum_a_b_c_d_total"),
        (("9lives",), False, "_9lives"),
    ],
)
def test_metric_name(parts: tuple[str, ...], counter: bool, expected: str) -> None:
    assert metric_name(*parts, counter=counter) == expected


def test_gauge_heuristic() -> None:
    assert is_gauge("clients_active_sir_count")
    assert is_gauge("clients_max_concurrent_connections_count")
    assert is_gauge("clients_next_client_id")
    assert not is_gauge("clients_expired_sir_count")
    assert not is_gauge("client_sir_received_count")
    assert not is_gauge("data_msgs")
    assert is_gauge("data_msgs", gauges={"data_msgs"})


def test_label_sets_stay_within_the_cap_and_totals_are_kept() -> None:
    reg, collector = sample_registry(n_clients=500, cap=50)
    text = generate_latest(reg).decode()
    series = samples(text, "pyum_srs_client_client_sir_received_total")
    assert len(series) == 50
    assert f'{{client="{OVERFLOW_LABEL}"}}' in series
    assert sum(series.values()) == sum(range(1, 501))
    assert samples(text, "pyum_srs_client_series_overflow") == {"": 451.0}
    assert collector.last_overflow == 451


def test_admission_is_sticky_and_slots_are_freed() -> None:
    rows: list[tuple[SRS.UMClient, dict[str, str]]] = []

    def read() -> list[tuple[SRS.UMClient, dict[str, str]]]:
        return rows

    c = StatsCollector(
        "pyum", "t", SRS.UMClient.DESCRIPTOR, read, labelnames=("client",), max_series=3
    )
    reg = CollectorRegistry()
    reg.register(c)

    def clients() -> set[str]:
        text = generate_latest(reg).decode()
        return set(re.findall(r'pyum_t_record_queue_depth\{client="([^"]+)"\}', text))

    rows[:] = [(SRS.UMClient(), {"client": n}) for n in ("z", "y", "x", "w")]
    assert clients() == {"z", "y", OVERFLOW_LABEL}
    rows.insert(0, (SRS.UMClient(), {"client": "a"}))  # a newcomer does not displace anyone
    assert clients() == {"z", "y", OVERFLOW_LABEL}
    rows[:] = [r for r in rows if r[1]["client"] != "z"]  # z leaves: its slot is free again
    assert clients() == {"y", "a", OVERFLOW_LABEL}


def test_registry_is_the_callers() -> None:
    reg = CollectorRegistry()
    c = StatsCollector("pyum", "only", SRS.SRS.DESCRIPTOR, lambda: [(SRS.SRS(), {})])
    register(reg, c)
    with pytest.raises(ValueError):  # duplicate names are caught at registration
        register(reg, StatsCollector("pyum", "only", SRS.SRS.DESCRIPTOR, lambda: []))
