"""MIMs and UIMs through one DRO, and their counters in DROMonMsg and the metrics.

TRD1 and TRD2 (multicast TR) each have a MIM group of their own, so a MIM published in TRD1
can reach TRD2 only through the DRO (daemons.tnwgd.mim).  A receiver of the topic in TRD2: the
MIMs of that topic arrive there (and a MIM request is answered back through the DRO, the
response a UIM), those of a topic nobody wants do not leave TRD1, a topicless MIM reaches TRD2;
UIMs ``TCP:2:ip:port`` cross too.  The DRO's portal statistics (``stats_pb``, the content of
DROMonMsg) and its Prometheus metrics rise by exactly what was sent.
"""

from __future__ import annotations

import random
import time
from dataclasses import dataclass, field

from prometheus_client.registry import CollectorRegistry

from daemons.tnwgd.app import DroRuntime
from daemons.tnwgd.monitor import DROMonMsg, register_metrics, stats_pb
from daemons.tnwgd.webmon import DroWebMonitor
from tests.dro_proc.kit import Trd, dro_xml, free_udp_port, running_dro
from tests.integration.helpers import until
from umcore.api import Context, Message
from umcore.dro import InterestKey

TOPIC = "dro.mim.topic"
N = 5  # MIMs of TOPIC
UNWANTED = 2  # MIMs of a topic nobody wants
K = 3  # UIMs from TRD1 to TRD2
PAYLOAD = b"mim-%d"
SIZE = len(PAYLOAD % 0)


def _group() -> str:
    return f"224.11.{random.randrange(1, 250)}.{random.randrange(1, 250)}"


@dataclass
class MimTrd(Trd):
    """A TRD whose contexts (the DRO's portal among them) send and hear MIMs on its own group."""

    mim_group: str = field(default_factory=_group)
    mim_port: int = field(default_factory=free_udp_port)

    def context(self) -> dict[str, str]:
        return {
            **super().context(),
            "mim_address": self.mim_group,
            "mim_destination_port": str(self.mim_port),
        }


def _portal(rt: DroRuntime, name: str) -> DROMonMsg.Stats.Portal:
    msg = DROMonMsg()
    stats_pb(rt, msg.stats)
    [p] = [p for p in msg.stats.portals if p.portal_name == name]
    return p


async def test_mim_follows_interest_through_the_dro_and_is_counted() -> None:
    t1, t2 = MimTrd(), MimTrd()
    assert (t1.mim_group, t1.mim_port) != (t2.mim_group, t2.mim_port)
    got: list[Message] = []
    topicless: list[Message] = []
    uims: list[Message] = []
    answers: list[Message] = []

    def on_topic(msg: Message) -> None:
        got.append(msg)
        if msg.response is not None:
            msg.respond(b"pong")

    async with (
        running_dro(dro_xml([("TRD1", 1, t1), ("TRD2", 2, t2)])) as rt,
        await Context.create(t1.context()) as a,
        await Context.create(t2.context()) as b,
    ):
        registry = CollectorRegistry()
        register_metrics(registry, rt)
        b.immediate_message_callback = topicless.append
        b.immediate_topic_message_callback = uims.append  # UIMs of a topic with no receiver
        await b.create_receiver(TOPIC, on_topic, attributes=t2.receiver())
        key = InterestKey(TOPIC)
        await until(lambda: (key, 2) in rt.core.interest("TRD2"), "the DRO hears the interest")
        await until(lambda: b.domain_id == 2 and 1 in b.domain_routes, "TRD2 learns domain 1")
        await until(lambda: a.domain_id == 1 and 2 in a.domain_routes, "TRD1 learns domain 2")
        before1, before2 = _portal(rt, "TRD1").endpoint, _portal(rt, "TRD2").endpoint
        assert before1.receive.immediate_topic_fragments_rcvd == 0

        for i in range(N):
            a.send_mim(TOPIC, PAYLOAD % i)
        for i in range(UNWANTED):
            a.send_mim("dro.mim.nobody", PAYLOAD % i)
        a.send_mim(None, PAYLOAD % 9)
        req = a.send_mim_request(TOPIC, PAYLOAD % 8, answers.append)
        bip, bport = b.request_address.split(":")[1:]  # type: ignore[union-attr]
        for i in range(K):
            a.send_uim(f"TCP:2:{bip}:{bport}", PAYLOAD % i, topic="dro.uim.topic")

        await until(lambda: len(got) == N + 1, "the MIMs (and the request) in TRD2")
        await until(lambda: len(topicless) == 1, "the topicless MIM in TRD2")
        await until(lambda: len(uims) == K, "the UIMs in TRD2")
        await until(lambda: len(answers) == 1, "the MIM request's response back in TRD1")
        # the DRO hears its own copies in TRD2 and drops them
        await until(lambda: rt.mim.own_echoes == N + 2, "the DRO's own MIM copies")
        req.close()
        assert sorted(bytes(m.data) for m in got) == sorted(
            [PAYLOAD % i for i in range(N)] + [PAYLOAD % 8]
        )
        assert all(m.topic == TOPIC and m.source.startswith("LBTRM:") for m in got)
        assert bytes(topicless[0].data) == PAYLOAD % 9 and bytes(answers[0].data) == b"pong"
        assert rt.uim.responses_forwarded == 1 and rt.mim.lost == rt.mim.malformed == 0

        p1, p2 = _portal(rt, "TRD1").endpoint, _portal(rt, "TRD2").endpoint
        mims, reqs, n_topic = N + 1, 1, N + 1 + UNWANTED

        def delta(after: object, before: object, field: str) -> int:
            return int(getattr(after, field)) - int(getattr(before, field))

        r1, r0 = p1.receive, before1.receive
        assert delta(r1, r0, "immediate_topic_fragments_rcvd") == n_topic
        assert delta(r1, r0, "immediate_topic_fragment_bytes_rcvd") == n_topic * SIZE
        assert delta(r1, r0, "immediate_topic_req_fragments_rcvd") == reqs
        assert delta(r1, r0, "immediate_topicless_fragments_rcvd") == 1
        assert delta(r1, r0, "unicast_data_msgs_rcvd") == K
        assert delta(r1, r0, "unicast_data_msg_bytes_rcvd") == K * SIZE
        s2, s0 = p2.send, before2.send
        for field, value in (
            ("immediate_topic_fragments_forwarded", mims),
            ("immediate_topic_fragments_sent", mims),
            ("immediate_topic_fragment_bytes_sent", mims * SIZE),
            ("immediate_topic_req_fragments_sent", reqs),
            ("immediate_topicless_fragments_sent", 1),
            ("immediate_topic_fragments_dropped_error", 0),
            ("unicast_msgs_forwarded", K),
            ("unicast_msgs_sent", K),
            ("unicast_msg_bytes_sent", K * SIZE),
            ("unicast_msgs_dropped_error", 0),
        ):
            assert delta(s2, s0, field) == value, field
        # nothing went back into TRD1 but the response; TRD2 heard no MIM of its own
        assert p1.send.immediate_topic_fragments_forwarded == 0
        assert p1.send.unicast_msgs_sent == 1  # the response
        assert p2.receive.immediate_topic_fragments_rcvd == 0
        assert p2.receive.unicast_data_msgs_rcvd == 1  # the response
        assert rt.core.mim_stats("TRD1").topic.dropped_no_interest == UNWANTED

        def metric(name: str, portal: str) -> float | None:
            return registry.get_sample_value(name, {"portal": portal})

        assert metric("pyum_dro_endpoint_send_immediate_topic_fragments_sent_total", "TRD2") == mims
        assert metric("pyum_dro_endpoint_receive_immediate_topic_fragments_rcvd_total", "TRD1") == (
            n_topic
        )
        assert metric("pyum_dro_endpoint_send_unicast_msgs_sent_total", "TRD2") == K
        assert metric("pyum_dro_endpoint_receive_unicast_data_msgs_rcvd_total", "TRD1") == K
        drops = "pyum_dro_portal_core_mim_topic_dropped_no_interest_total"
        assert metric(drops, "TRD1") == UNWANTED and metric(drops, "TRD2") == 0
        # the web monitor's portal page shows the same figures
        page = DroWebMonitor(rt, monotonic=time.monotonic).portal({"portal": "TRD2"})
        assert page is not None
        rows = {label: (msgs, size) for label, msgs, size in page["send"]}
        assert rows["immediate_topic_fragments_sent"] == (mims, mims * SIZE)
        assert rows["unicast_msgs_sent"] == (K, K * SIZE)
        assert page["core"]["mim_topic_dropped_no_interest"] == 0


async def test_mim_crosses_two_dros() -> None:
    """TRD1 -- DRO1 -- TRD2 -- DRO2 -- TRD3: the TRD3 receiver's interest crosses DRO2 into TRD2,
    so DRO1 sends TRD1's MIMs there, and DRO2 takes them on (origin 1, one DRO crossed)."""
    t1, t2, t3 = MimTrd(), MimTrd(), MimTrd()
    got: list[Message] = []
    async with (
        running_dro(dro_xml([("TRD1", 1, t1), ("TRD2", 2, t2)], name="dro1")) as d1,
        running_dro(dro_xml([("TRD2", 2, t2), ("TRD3", 3, t3)], name="dro2")) as d2,
        await Context.create(t1.context()) as a,
        await Context.create(t3.context()) as c,
    ):
        await c.create_receiver(TOPIC, got.append, attributes=t3.receiver())
        key = InterestKey(TOPIC)
        await until(lambda: (key, 3) in d1.core.interest("TRD2"), "DRO1 hears TRD3's interest")
        for i in range(N):
            a.send_mim(TOPIC, PAYLOAD % i)
        a.send_mim("dro.mim.nobody", PAYLOAD % 0)
        await until(lambda: len(got) == N, "the MIMs in TRD3")
        assert [bytes(m.data) for m in got] == [PAYLOAD % i for i in range(N)]  # in order
        m1, m2 = d1.core.mim_stats, d2.core.mim_stats
        assert (m1("TRD1").topic.rcvd, m1("TRD2").topic.sent) == (N + 1, N)
        assert m1("TRD1").topic.dropped_no_interest == 1
        assert (m2("TRD2").topic.rcvd, m2("TRD3").topic.sent) == (N, N)
        assert m1("TRD2").topic.rcvd == m2("TRD3").topic.rcvd == 0  # own copies dropped
        assert m1("TRD1").topic.forwarded == m2("TRD2").topic.forwarded == 0  # none came back
