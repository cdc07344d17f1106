"""Retransmissions from the core: what a receiver recovers (checks 6, 11), from memory and
from disk, forwarding to the source (check 18, trap 17), the per-instance rate limit with its
queue of four times the rate (check 19, trap 16)."""

from __future__ import annotations

from pathlib import Path

from hypothesis import given, settings
from hypothesis import strategies as st

from tests.store.corekit import Receiver, Source, make_rig, topic_config
from umcore.features.latejoin import LateJoinService, make_otid, parse_otid
from umcore.features.retention import RetentionBuffer
from umcore.store import compose
from umcore.store.retx import RetxQueue
from umcore.wire import lbmc

BIG = 1 << 24


def test_retransmission_carries_the_source_otid_topic_and_original_frame(tmp_path: Path) -> None:
    rig = make_rig(tmp_path, [topic_config("t", repository_size_threshold=BIG)])
    src = Source(rig, "t", transport_idx=4, topic_idx=2)
    src.register()
    src.send(0, 1, 2)
    rcv = Receiver(rig, src)
    rcv.register()
    rcv.request(1)
    (rx,) = rcv.retransmissions()
    assert rx.frame == src.frame(1) and rx.topic == "t"
    assert parse_otid(rx.otid) == (src.reply_to[0], src.reply_to[1], 4)
    assert rx.otid == make_otid(src.reply_to[0], src.reply_to[1], 4)


def test_check11_restarted_receiver_recovers_42_to_99_exactly_once(tmp_path: Path) -> None:
    rig = make_rig(tmp_path, [topic_config("t", repository_size_threshold=BIG)])
    src = Source(rig, "t")
    src.register()
    rcv = Receiver(rig, src, session_id=9)
    rcv.register()
    src.send(*range(42))
    rcv.ack(41)
    src.send(*range(42, 100))
    back = Receiver(rig, src, session_id=9, port=14600)
    resp = back.register()
    assert resp is not None and resp.low_seqnum == 42
    back.request(*range(resp.low_seqnum, resp.high_seqnum + 1))
    wire = [data for dest, data in rig.wire if dest == back.reply_to]
    kinds = [lbmc.decode(w).msg_type for w in wire]
    assert kinds == [lbmc.MSG_CONTROL] + [lbmc.MSG_RETRANS] * 58  # the answer, then RETRANS
    assert back.recovered() == list(range(42, 100))
    src.send(100)  # then live: the Store does not relay live data (trap 1)
    assert back.recovered() == []


def test_recovery_from_disk_reads(tmp_path: Path) -> None:
    rig = make_rig(tmp_path, [topic_config("t", repository_type="disk")])
    src = Source(rig, "t")
    src.register()
    src.send(*range(200))  # the 1024-byte memory floor keeps only the newest in memory
    repo = rig.core.registry.sources[src.reg_id].repository
    assert repo.mem_trail_sqn > 0
    rcv = Receiver(rig, src)
    rcv.register()
    rcv.request(*range(10))
    got = rcv.retransmissions()
    assert [r.sqn for r in got] == list(range(10))
    assert [lbmc.decode(r.frame).payload for r in got] == [b"msg%d" % i for i in range(10)]
    assert repo.stats()["reads"] >= 1


def test_check18_trap17_forwarding_sends_the_request_to_the_source(tmp_path: Path) -> None:
    rig = make_rig(
        tmp_path,
        [
            topic_config("fwd", retransmission_request_forwarding=1),
            topic_config("nofwd"),
        ],
    )
    src = Source(rig, "fwd", transport_idx=3, topic_idx=5)
    src.register()
    src.send(*range(100))  # the memory repository wrapped: 0 is gone
    rcv = Receiver(rig, src)
    rcv.register()
    rcv.request(0, 99, request_idx=11)
    assert rcv.recovered() == [99]
    (fwd,) = rig.take(src.reply_to, compose.RetransmissionRequest)
    (req,) = fwd.requests
    assert (req.transport_idx, req.id_2, req.seqnum) == (3, 5, 0)  # id_2 = topic index
    assert (req.reply_to, req.request_idx) == (rcv.reply_to, 11)
    # the source's late-join service answers the receiver directly, as the Store would have
    service = LateJoinService(*src.reply_to)
    buffer = RetentionBuffer()
    buffer.add(0, b"msg0", rig.now)
    service.add(3, 5, "fwd", buffer, lambda: 100)
    ((dest, data),) = service.handle(lbmc.decode(fwd.encode()))
    answer = compose.decode(lbmc.decode(data))
    assert dest == rcv.reply_to and isinstance(answer, compose.Retransmission)
    assert answer.sqn == 0 and answer.otid == make_otid(src.reply_to[0], src.reply_to[1], 3)
    # forwarding off (the default): nothing is sent, the miss is counted
    other = Source(rig, "nofwd", port=14393)
    other.register()
    other.send(*range(100))
    rcv2 = Receiver(rig, other, port=14394)
    rcv2.register()
    rcv2.request(0)
    assert rcv2.recovered() == [] and rig.take(other.reply_to, compose.RetransmissionRequest) == []
    c = rig.core.stats().counters
    assert (c["rx_forwarded"], c["rx_not_held"]) == (1, 1)


def test_check19_rate_limit_drops_and_recovery_still_completes(tmp_path: Path) -> None:
    total, outstanding_max, rate = 3000, 1000, 100
    rig = make_rig(
        tmp_path,
        [topic_config("t", repository_size_threshold=BIG)],
        retransmission_request_processing_rate=rate,
    )
    src = Source(rig, "t")
    src.register()
    src.send(*range(total))
    rcv = Receiver(rig, src)
    rcv.register()
    missing = list(range(total))
    got: set[int] = set()
    for _ in range(200):  # the receiver's retransmit_request_interval loop (0.5 s)
        ask = [q for q in missing if q not in got][:outstanding_max]
        if not ask:
            break
        rcv.request(*ask)
        rig.advance(0.5)
        got.update(rcv.recovered())
    assert got == set(range(total))
    c = rig.core.stats().counters
    assert c["rx_dropped"] > 0
    queued = rig.core.stats().retx_queue
    assert c["rx_received"] == c["rx_serviced"] + c["rx_dropped"] + c["rx_duplicates"] + queued
    assert c["retransmissions"] >= total


def test_trap16_the_rate_is_per_instance_across_topics_with_a_queue_of_4x(tmp_path: Path) -> None:
    rig = make_rig(
        tmp_path,
        [topic_config("a", repository_size_threshold=BIG), topic_config("b", repository_size_threshold=BIG)],
        retransmission_request_processing_rate=10,
    )  # fmt: skip
    a = Source(rig, "a")
    b = Source(rig, "b", port=14393)
    for s in (a, b):
        s.register()
        s.send(*range(40))
    ra, rb = Receiver(rig, a), Receiver(rig, b, port=14394)
    ra.register()
    rb.register()
    ra.request(*range(30))
    rb.request(*range(30))
    served = len(ra.recovered()) + len(rb.recovered())
    assert served == 10  # one second's worth of tokens, shared
    c = rig.core.stats()
    # 60 received, 10 served at once, the queue holds 4 x 10: 10 dropped
    assert (c.counters["rx_received"], c.counters["rx_dropped"], c.retx_queue) == (60, 10, 40)
    rig.advance(1.0)
    assert len(ra.recovered()) + len(rb.recovered()) == 10
    rig.advance(3.0)
    assert len(ra.recovered()) + len(rb.recovered()) == 30
    assert rig.core.stats().retx_queue == 0


def test_requests_for_unknown_sources_are_counted(tmp_path: Path) -> None:
    rig = make_rig(tmp_path, [topic_config("t")])
    req = compose.RetransmissionRequest((compose.RxReq(1, 12345, 0, ("10.0.0.2", 1)),))
    rig.control(req.encode())
    assert rig.core.stats().counters["rx_unknown"] == 1
    assert rig.wire == []


@settings(max_examples=100, deadline=None)
@given(
    rate=st.integers(0, 50),
    steps=st.lists(st.tuples(st.integers(0, 120), st.floats(0.0, 2.0)), max_size=30),
)
def test_retx_queue_accounts_for_every_request(rate: int, steps: list[tuple[int, float]]) -> None:
    q: RetxQueue[int] = RetxQueue(rate, 0.0, key=lambda x: x % 97)
    now = 0.0
    served = 0
    for n, dt in steps:
        for i in range(n):
            q.offer(i)
        now += dt
        got = q.take(now)
        served += len(got)
        assert len(q) <= 4 * rate
        assert len(got) <= rate or rate == 0
    assert q.received == q.serviced + q.dropped + q.duplicates + len(q)
    assert served == q.serviced
    t = q.next_time()
    assert (t is None) == (len(q) == 0 or rate == 0)
