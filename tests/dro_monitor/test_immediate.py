"""The DRO's MIM and UIM counters in DROMonMsg and the metrics, on the fake runtime.

The core routes MIMs (:meth:`DroCore.receive_mim`) with the interest :func:`feed` gives it
(``orders`` wanted in TRD2, ``fx`` in domain 3 behind the peer portal); a
:class:`~daemons.tnwgd.uim.UimForwarder` with no endpoint portals to send through drops what
it is given as no route.  Each counter is checked where ``stats_pb`` and the Prometheus
collectors put it.
"""

from __future__ import annotations

from dataclasses import dataclass

from prometheus_client.registry import CollectorRegistry

from daemons.tnwgd.monitor import DROMonMsg, register_metrics, stats_pb
from daemons.tnwgd.uim import UimForwarder
from tests.dro_monitor.kit import FakeRuntime, feed, runtime
from umcore.dro import MimSendResult
from umcore.features import immediate as im
from umcore.wire import lbmc


@dataclass
class UimRuntime(FakeRuntime):
    uim: UimForwarder | None = None


def _runtime() -> UimRuntime:
    base = runtime()
    rt = UimRuntime(base.core, base.config, base.portals, base.started_at)
    rt.uim = UimForwarder(rt.core, {}, lambda: 2.0)
    feed(rt)
    return rt


def _endpoints(rt: UimRuntime) -> dict[str, DROMonMsg.Stats.Portal.Endpoint]:
    msg = DROMonMsg()
    stats_pb(rt, msg.stats)
    return {p.portal_name: p.endpoint for p in msg.stats.portals if p.HasField("endpoint")}


def test_mim_counters_in_dromonmsg_and_metrics() -> None:
    rt = _runtime()
    core = rt.core
    route = core.receive_mim("TRD1", "orders", 10)
    assert route.egress == ("TRD2",) and (route.origin_domain, route.hops_taken) == (1, 1)
    core.receive_mim_sent("TRD2", "orders", 10, MimSendResult.SENT, False)
    assert core.receive_mim("TRD1", "orders", 4, request=True).egress == ("TRD2",)
    core.receive_mim_sent("TRD2", "orders", 4, MimSendResult.WOULD_BLOCK, True)
    assert core.receive_mim("TRD1", "nobody", 6).egress == ()
    assert core.receive_mim("TRD1", "fx", 3).egress == ("PEER",)  # domain 3 is beyond it
    topicless = core.receive_mim("TRD2", None, 5)  # to every TRD: TRD1 (never back to TRD2)
    assert "TRD1" in topicless.egress and "TRD2" not in topicless.egress
    core.receive_mim_sent("TRD1", None, 5, MimSendResult.SIZE_ERROR, False)
    e = _endpoints(rt)
    r1, s2 = e["TRD1"].receive, e["TRD2"].send
    assert (r1.immediate_topic_fragments_rcvd, r1.immediate_topic_fragment_bytes_rcvd) == (4, 23)
    assert (r1.immediate_topic_req_fragments_rcvd, r1.immediate_topic_req_fragment_bytes_rcvd) == (
        1,
        4,
    )
    assert (
        s2.immediate_topic_fragments_forwarded,
        s2.immediate_topic_fragment_bytes_forwarded,
    ) == (
        2,
        14,
    )
    assert (s2.immediate_topic_fragments_sent, s2.immediate_topic_fragment_bytes_sent) == (1, 10)
    assert s2.immediate_topic_req_fragments_sent == 0
    assert (
        s2.immediate_topic_fragments_dropped_would_block,
        s2.immediate_topic_fragment_bytes_dropped_would_block,
    ) == (1, 4)
    assert e["TRD2"].receive.immediate_topicless_fragments_rcvd == 1
    s1 = e["TRD1"].send
    assert s1.immediate_topicless_fragments_forwarded == 1
    assert (
        s1.immediate_topicless_fragments_dropped_size_error,
        s1.immediate_topicless_fragment_bytes_dropped_size_error,
    ) == (1, 5)
    registry = CollectorRegistry()
    register_metrics(registry, rt)

    def metric(name: str, portal: str) -> float | None:
        return registry.get_sample_value(name, {"portal": portal})

    assert metric("pyum_dro_endpoint_send_immediate_topic_fragments_sent_total", "TRD2") == 1
    assert metric("pyum_dro_portal_core_mim_topic_dropped_no_interest_total", "TRD1") == 1
    assert metric("pyum_dro_portal_core_mim_topicless_dropped_no_interest_total", "TRD2") == 0


def test_uim_counters_in_dromonmsg_and_metrics() -> None:
    rt = _runtime()
    fwd = rt.uim
    assert fwd is not None

    def uim(payload: bytes, *, stream: bool = True, dest: int | None = None) -> lbmc.LBMCMessage:
        headers: list[lbmc.Header] = []
        if stream:
            headers.append(lbmc.Stream(0, 1, 0, bytes(8)))
        if dest is not None:
            headers.append(lbmc.Destination(domain_id=dest, ipaddr=0x7F000001, port=14391))
        return lbmc.LBMCMessage(lbmc.MSG_DATA, 0, 0, headers, payload)

    assert fwd.receive("TRD1", uim(b"abc", dest=9), im.KIND_UIM)  # domain 9: no route
    assert fwd.receive("TRD1", uim(b"de", stream=False, dest=9), im.KIND_UIM)
    assert fwd.receive("TRD1", uim(b"f"), im.KIND_UIM)  # no DESTINATION: not for the DRO
    response = lbmc.LBMCMessage(
        lbmc.MSG_DATA, 0, 0, [lbmc.AppHeader(im.RESPONSE_APPHDR_CODE, bytes(4), True)], b"gh"
    )
    assert fwd.receive("TRD2", response, im.KIND_RESPONSE)  # no pending request
    assert (fwd.no_route, fwd.not_for_dro, fwd.unknown_response) == (2, 1, 1)
    e = _endpoints(rt)
    r1 = e["TRD1"].receive
    assert (r1.unicast_data_msgs_rcvd, r1.unicast_data_msg_bytes_rcvd) == (3, 6)
    assert (r1.unicast_data_msgs_rcvd_no_stream, r1.unicast_data_msg_bytes_rcvd_no_stream) == (
        1,
        2,
    )
    assert (r1.unicast_data_msgs_dropped_no_route, r1.unicast_data_msg_bytes_dropped_no_route) == (
        2,
        5,
    )
    r2 = e["TRD2"].receive
    assert (r2.unicast_data_msgs_rcvd, r2.unicast_data_msgs_dropped_no_route) == (1, 1)
    assert r2.unicast_data_msgs_rcvd_no_stream == 1
    assert e["TRD1"].send.unicast_msgs_forwarded == e["TRD2"].send.unicast_msgs_sent == 0
    registry = CollectorRegistry()
    register_metrics(registry, rt)
    assert (
        registry.get_sample_value(
            "pyum_dro_endpoint_receive_unicast_data_msgs_dropped_no_route_total", {"portal": "TRD1"}
        )
        == 2
    )
