"""tnwgd's DROMonMsg statistics and Prometheus metrics, from a real DroCore fed with records
(tests/dro_monitor/kit.py): what the messages carry, configs first, lbmmon prints them, the
pb/lbm-only check, large DROs split over messages, and the exposition promtool accepts."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families

from daemons.tnwgd.monitor import (
    DRO_CATEGORY,
    MAX_CONFIG_TEXT,
    MAX_PORTALS_PER_MESSAGE,
    DROMonMsg,
    context_appids,
    dro_publisher,
    interest_counts,
    monitor_settings,
    register_metrics,
    stats_pb,
    topology_signature,
)
from tests.conftest import promtool_check
from tests.dro.kit import config
from tests.dro_monitor.kit import FAR_ID, FRAME, MAX_QUEUE, NODE_ID, dro_config, feed, runtime
from umcore.config.dro import load
from umcore.dro import InterestKey
from umcore.errors import ConfigError
from umcore.monitor import protogen
from umcore.monitor.attributes import decode_stats
from umcore.monitor.framing import PacketType
from umcore.monitor.textfmt import format_json, format_text

protogen.generate()


def _portal(stats: Any, name: str) -> Any:
    return next(p for p in stats.portals if p.portal_name == name)


def test_statistics_carry_what_the_core_counted() -> None:
    rt = runtime()
    feed(rt)
    msg = DROMonMsg()
    stats_pb(rt, msg.stats)
    s = msg.stats
    assert (s.local.gateway_name, s.local.gateway_id) == ("dro-a", NODE_ID)
    assert s.local.gateway_count == 2  # us and "far"
    assert s.local.trd_count == len(rt.core.router.domains())
    assert s.local.topology_signature == topology_signature(rt.core)
    assert [p.portal_name for p in s.portals] == ["TRD1", "TRD2", "PEER"]
    assert [p.portal_index for p in s.portals] == [0, 1, 2]
    assert [p.WhichOneof("PortalType") for p in s.portals] == ["endpoint", "endpoint", "peer"]

    trd1, trd2, peer = (_portal(s, n) for n in ("TRD1", "TRD2", "PEER"))
    # TRD1: the source's side.  8 frames in (6 new, 1 duplicate, 1 of an unknown source)
    rcv = trd1.endpoint.receive
    assert (rcv.transport_topic_fragments_rcvd, rcv.transport_topic_fragment_bytes_rcvd) == (
        8,
        8 * FRAME,
    )
    assert trd1.endpoint.send.transport_topic_fragments_dropped_dup == 1
    # TRD1 carries interest from TRD2 (orders, ^md\.) and from domain 3 (fx) into its TRD
    assert (trd1.receiver_topics, trd1.receiver_pcre_patterns) == (2, 1)
    assert trd1.proxy_receivers == 3 and trd1.proxy_sources == 0
    # TRD2: the receivers' side.  Its queue holds MAX_QUEUE bytes: 4 frames in, 2 refused
    fits = MAX_QUEUE // FRAME
    assert trd2.cost == 3 and trd2.endpoint.domain_id == 2
    send = trd2.endpoint.send
    assert send.transport_topic_fragments_forwarded == fits
    assert send.transport_topic_fragments_sent == 1  # the adapter took one
    assert send.transport_topic_fragments_dropped_would_block == 6 - fits
    assert send.transport_topic_fragment_bytes_dropped_would_block == (6 - fits) * FRAME
    assert (send.data_bytes_enqueued, send.data_bytes_enqueued_max) == (
        (fits - 1) * FRAME,
        MAX_QUEUE,
    )
    assert send.data_bytes_enqueued_limit == MAX_QUEUE
    ep = trd2.endpoint
    assert (ep.local_interest_topics, ep.local_interest_pcre_patterns) == (1, 1)
    assert ep.remote_interest_topics == 0
    assert trd2.proxy_sources == 1
    # the peer: the other DRO's id and the interest heard over the link (fx for domain 3)
    assert peer.peer.adjacent_gateway_id == FAR_ID
    assert peer.peer.interest_topics == 1
    assert peer.peer.send.data_bytes_enqueued_limit == rt.config.portal("PEER").max_queue
    (far,) = s.other_gateways
    assert (far.gateway_name, far.gateway_id, far.version) == ("far", FAR_ID, 4)
    adj = {(o.WhichOneof("PortalType"), o.cost) for o in far.other_portals}
    assert adj == {("adjacent_gateway_id", 2), ("adjacent_domain_id", 1)}


def test_interest_counts_distinct_keys_by_kind() -> None:
    pairs = [
        (InterestKey("a", 0), 1),
        (InterestKey("a", 0), 2),  # one topic wanted in two domains
        (InterestKey("^b", 1), 1),
        (InterestKey("c.*", 2), 3),
        (InterestKey("d.*", 2), 3),
    ]
    assert interest_counts(pairs) == (1, 1, 2)


def test_configs_first_then_statistics_only(tmp_path: Path) -> None:
    path = tmp_path / "dro.xml"
    xml = Path("configs/dro.xml").read_text()
    path.write_text(xml)
    cfg = load(path)
    rt = runtime(cfg)
    sent: list[bytes] = []
    wall = [1_800_000_000.0]
    pub = dro_publisher(rt, sent.append, now=0.0, interval_s=5, wall_clock=lambda: wall[0], pid=7)
    assert pub.next_timer() == 5.0  # one interval after start
    pub.handle_timer(4.9)
    assert sent == []
    pub.handle_timer(5.0)
    assert pub.next_timer() == 10.0
    pub.handle_timer(10.0)
    first, second = (decode_stats(b) for b in sent)
    for sm in (first, second):
        assert sm.packet_type == PacketType.GATEWAY
        assert sm.attributes.application_id == cfg.daemon.name == "dro1"
        assert sm.attributes.process_id == 7
        assert sm.message.HasField("stats")
    assert first.message.configs.gateway.config_data == xml
    portals = [
        (p.portal_name, p.portal_index, p.portal_type) for p in first.message.configs.portals
    ]
    assert portals == [("TRD1", 0, 0), ("TRD2", 1, 0)]
    assert not second.message.HasField("configs")


def test_lbmmon_prints_a_dro_message() -> None:
    rt = runtime()
    feed(rt)
    sent: list[bytes] = []
    pub = dro_publisher(rt, sent.append, now=0.0, interval_s=1, text="<tnw-gateway/>")
    pub.publish(DRO_CATEGORY)
    text = format_text(decode_stats(sent[0]), ctime=lambda _t: "then")
    assert text.splitlines()[1].startswith("Gateway configuration received from dro-a")
    assert "portal_name = TRD2" in text.replace("\t", "")
    assert "transport_topic_fragments_dropped_would_block = 2" in text.replace("\t", "")
    assert "config_data = <tnw-gateway/>" in text.replace("\t", "")
    as_json = json.loads(format_json(decode_stats(sent[0])))  # lbmmon --json
    portals = as_json["message"]["stats"]["portals"]
    assert [p["portalName"] for p in portals] == ["TRD1", "TRD2", "PEER"]


def test_a_large_dro_is_split_over_messages() -> None:
    n = MAX_PORTALS_PER_MESSAGE + 3
    rt = runtime(config([(f"E{i}", i + 1, 1) for i in range(n)], name="big"))
    sent: list[bytes] = []
    pub = dro_publisher(rt, sent.append, now=0.0, interval_s=1, text="x" * 100)
    pub.publish(DRO_CATEGORY)
    msgs = [decode_stats(b).message for b in sent]
    assert [len(m.stats.portals) for m in msgs] == [MAX_PORTALS_PER_MESSAGE, 3]
    assert [m.HasField("configs") for m in msgs] == [True, False]
    assert len(msgs[0].configs.portals) == n
    names = [p.portal_name for m in msgs for p in m.stats.portals]
    assert names == [f"E{i}" for i in range(n)]


def test_a_long_configuration_file_is_cut(tmp_path: Path) -> None:
    path = tmp_path / "dro.xml"
    base = Path("configs/dro.xml").read_text()
    padding = "<!-- " + "x" * (MAX_CONFIG_TEXT + 100) + " -->\n"
    path.write_text(base.replace("<tnw-gateway", padding + "<tnw-gateway", 1))
    rt = runtime(load(path))
    sent: list[bytes] = []
    pub = dro_publisher(rt, sent.append, now=0.0, interval_s=1)
    pub.publish(DRO_CATEGORY)
    msgs = [decode_stats(b).message for b in sent]
    assert len(msgs[0].configs.gateway.config_data.encode()) == MAX_CONFIG_TEXT


def _with_monitor(body: str) -> Any:
    return config([("E1", 1, 1), ("E2", 2, 1)], name="m", daemon_extra=body)


def test_monitor_settings_accept_lbm_and_pb_only() -> None:
    assert monitor_settings(dro_config()) is None  # no <monitor>
    on = _with_monitor(
        '<monitor interval="3"><transport-module module="lbm" options="topic=/my/stats"/>'
        '<format-module module="pb"/></monitor>'
    )
    interval, opts = monitor_settings(on)  # type: ignore[misc]
    assert (interval, opts.topic) == (3, "/my/stats")
    csv = _with_monitor('<monitor interval="3"><transport-module module="lbm"/></monitor>')
    with pytest.raises(ConfigError) as err:
        monitor_settings(csv)
    assert "csv" in str(err.value) and "pb" in str(err.value)
    bad_opts = _with_monitor(
        '<monitor interval="3"><transport-module module="lbm" options="nonsense"/>'
        '<format-module module="pb"/></monitor>'
    )
    with pytest.raises(ConfigError):
        monitor_settings(bad_opts)


def test_context_application_ids_are_ums() -> None:
    assert context_appids("TRD1") == (
        "Gateway_Portal_TRD1_rcv_ctx",
        "Gateway_Portal_TRD1_src_ctx",
    )


def _samples(registry: CollectorRegistry) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    out = {}
    for fam in text_string_to_metric_families(generate_latest(registry).decode()):
        for s in fam.samples:
            out[(s.name, tuple(sorted(s.labels.items())))] = s.value
    return out


def test_prometheus_exports_the_same_figures(promtool: str) -> None:
    rt = runtime()
    feed(rt)
    registry = CollectorRegistry()
    register_metrics(registry, rt)
    got = _samples(registry)
    trd2 = (("portal", "TRD2"),)
    fits = MAX_QUEUE // FRAME
    assert got[("pyum_dro_endpoint_send_transport_topic_fragments_forwarded_total", trd2)] == fits
    assert (
        got[("pyum_dro_endpoint_send_transport_topic_fragments_dropped_would_block_total", trd2)]
        == 6 - fits
    )
    assert got[("pyum_dro_endpoint_send_data_bytes_enqueued_max", trd2)] == MAX_QUEUE
    assert got[("pyum_dro_portal_proxy_sources", trd2)] == 1
    trd1 = (("portal", "TRD1"),)
    assert got[("pyum_dro_endpoint_receive_transport_topic_fragments_rcvd_total", trd1)] == 8
    assert got[("pyum_dro_portal_core_unknown_source_total", trd1)] == 1
    assert got[("pyum_dro_portal_up", (("portal", "PEER"),))] == 1
    assert got[("pyum_dro_local_gateway", ())] == 2  # gateway_count ("_count" is reserved)
    assert ("pyum_dro_local_recalc_duration_seconds", ()) not in got  # not measured
    # the figures move with the core
    rt.core.receive_portal_down("TRD2", 2.0)
    assert _samples(registry)[("pyum_dro_portal_up", trd2)] == 0
    run = promtool_check(promtool, generate_latest(registry))
    assert run.returncode == 0, run.stdout + run.stderr
