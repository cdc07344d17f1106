"""Issue 17: the source's tail before a receiver's session started (TopicRecovery.on_tail).

A persistent (or late-join) receiver whose transport session joins after the source sent its
last messages learns of them only from a TSNI, or from the sqn of the first message the session
delivers (the transport suppresses leading loss).  Deterministic, sans-IO: explicit ``now``, the
Stores' retransmission requests captured through ``request_router``, the source's through
``take_requests`` and a real LateJoinService with a retention buffer.
"""

from __future__ import annotations

from umcore.features.droloss import DroLossController
from umcore.features.latejoin import LateJoinConfig, LateJoinService
from umcore.features.otr import OtrConfig
from umcore.features.recovery import (
    DELIVER_DATA,
    FLAG_RETRANSMIT,
    Delivery,
    LateJoin,
    TopicRecovery,
)
from umcore.features.retention import PER_MESSAGE_OVERHEAD, RetentionBuffer
from umcore.transport.delivery import LbtDeliveryController
from umcore.transport.shm import SmxReceiverSession
from umcore.transport.tcp import DeliveryController
from umcore.wire import lbmc


class _Router:
    """A persistent receiver's request router: what TopicRecovery asks of the Stores."""

    def __init__(self) -> None:
        self.asked: list[int] = []
        self.retried: list[int] = []

    def __call__(self, sqns: list[int], retry: bool) -> None:
        (self.retried if retry else self.asked).extend(sqns)


def _persistent() -> tuple[TopicRecovery, _Router]:
    router = _Router()
    rec = TopicRecovery(
        transport_idx=3,
        topic_idx=7,
        request_idx=42,
        reply_to=("10.0.0.2", 14392),
        late_join=LateJoinConfig(request_maximum=0),  # as the engine sets it with Stores
        request_router=router,
    )
    rec.await_range()
    return rec, router


def _state(rec: TopicRecovery) -> LateJoin:
    return rec.lj_state  # (read through a call: mypy narrows the attribute across asserts)


def _sqns(out: list[Delivery]) -> list[tuple[int, int]]:
    return [(d[1], d[3]) for d in out if d[0] == DELIVER_DATA]


def _recovered_0_to_4(rec: TopicRecovery, router: _Router) -> list[tuple[int, int]]:
    """Registration Complete with the Stores holding 0..4; the Stores answer every request."""
    got = _sqns(rec.on_lj_info(0, 4, 0.0))
    while router.asked:
        sqn = router.asked.pop(0)
        got += _sqns(rec.on_retransmission(sqn, b"%d" % sqn, None, 0.0))
    assert got == [(s, FLAG_RETRANSMIT) for s in range(5)]
    assert rec.lj_state is LateJoin.DONE and not rec.recovering
    return got


def test_tsni_beyond_the_recovered_range_requests_exactly_the_gap() -> None:
    rec, router = _persistent()
    _recovered_0_to_4(rec, router)
    # The source's TSNI (sent 0..6) before the session delivered anything: 5 and 6 were sent
    # before it joined and the Stores hold them.
    assert rec.on_tail(6, 1.0) == []
    assert router.asked == [5, 6]
    assert rec.lj_state is LateJoin.RECOVERING and rec.recovering
    assert rec.stats.tail_extended == 2
    # The TSNI repeats while the source is idle: nothing more is asked.
    router.asked.clear()
    assert rec.on_tail(6, 1.1) == []
    assert router.asked == []
    # Live 7 arrives before the Stores answered: held back, delivered after 5 and 6, once.
    assert rec.on_live(7, b"7", None, 1.2) == []
    # Unanswered within retransmit_request_interval (0.5 s): asked again (another Store).
    assert rec.next_timer() == 1.5
    assert rec.handle_timer(1.5) == []
    assert router.retried == [5, 6] and router.asked == []
    got = _sqns(rec.on_retransmission(5, b"5", None, 1.6))
    got += _sqns(rec.on_retransmission(6, b"6", None, 1.7))
    assert got == [(5, FLAG_RETRANSMIT), (6, FLAG_RETRANSMIT), (7, 0)]
    assert _state(rec) is LateJoin.DONE and not rec.recovering
    # A second answer (another Store) and late live copies are duplicates, not deliveries.
    assert rec.on_retransmission(6, b"6", None, 2.3) == []
    assert rec.on_live(6, b"6", None, 2.4) == []
    assert rec.stats.duplicates == 2
    assert _sqns(rec.on_live(8, b"8", None, 2.5)) == [(8, 0)]


def test_live_copies_of_the_gap_fill_it_and_the_retransmissions_are_dropped() -> None:
    rec, router = _persistent()
    _recovered_0_to_4(rec, router)
    rec.on_tail(6, 1.0)
    assert router.asked == [5, 6]
    got = _sqns(rec.on_live(5, b"5", None, 1.1)) + _sqns(rec.on_live(6, b"6", None, 1.2))
    got += _sqns(rec.on_retransmission(5, b"5", None, 1.3))
    got += _sqns(rec.on_retransmission(6, b"6", None, 1.4))
    assert got == [(5, 0), (6, 0)]
    assert not rec.recovering and rec.stats.duplicates == 2


def test_first_live_message_past_the_range_declares_the_sqns_before_it() -> None:
    """The DC's first delivery is 7 (5 and 6 sent before the session joined): it tells the
    recovery "sent up to 6" before handing 7 over."""
    rec, router = _persistent()
    _recovered_0_to_4(rec, router)
    rec.on_tail(6, 1.0)
    assert rec.on_live(7, b"7", None, 1.0) == []
    assert router.asked == [5, 6]
    got = _sqns(rec.on_retransmission(6, b"6", None, 1.1))
    assert got == []  # in order: 5 first
    got += _sqns(rec.on_retransmission(5, b"5", None, 1.2))
    assert got == [(5, FLAG_RETRANSMIT), (6, FLAG_RETRANSMIT), (7, 0)]


def test_tail_before_the_stores_range_widens_it() -> None:
    rec, router = _persistent()
    assert rec.on_tail(6, 0.0) == []  # registration not complete yet: kept
    assert router.asked == []
    rec.on_lj_info(0, 4, 0.1)  # the Stores held 0..4 when they answered
    assert router.asked == list(range(7))
    got: list[tuple[int, int]] = []
    for sqn in range(7):
        got += _sqns(rec.on_retransmission(sqn, b"", None, 0.2))
    assert got == [(s, FLAG_RETRANSMIT) for s in range(7)] and not rec.recovering


def test_tail_within_what_was_delivered_asks_nothing() -> None:
    rec, router = _persistent()
    _recovered_0_to_4(rec, router)
    assert rec.on_tail(4, 1.0) == [] and rec.on_tail(2, 1.0) == []
    assert router.asked == [] and rec.lj_state is LateJoin.DONE


def test_empty_stores_then_tail() -> None:
    """The Stores held nothing of the source (range 5..4 after 0..4 were ACKed): a tail of 6 is
    5 and 6."""
    rec, router = _persistent()
    assert rec.on_lj_info(5, 4, 0.0) == []
    assert rec.lj_state is LateJoin.DONE
    rec.on_tail(6, 1.0)
    assert router.asked == [5, 6]


def test_empty_range_keeps_delivering_what_was_in_flight() -> None:
    """An empty range (the source retains nothing; it had sent up to 4) and then a live 4 still
    in flight on the session: delivered as before; the tail then counts from after it."""
    rec, router = _persistent()
    assert rec.on_lj_info(5, 4, 0.0) == []
    assert _sqns(rec.on_live(4, b"4", None, 0.1)) == [(4, 0)]
    assert rec.on_tail(4, 0.2) == [] and router.asked == []
    rec.on_tail(6, 0.3)
    assert router.asked == [5, 6]


def test_no_range_no_late_join_no_tail_recovery() -> None:
    # Late join abandoned (the registration failed): the tail is not recovered.
    rec, router = _persistent()
    rec.abandon()
    rec.on_live(3, b"3", None, 0.0)
    assert rec.on_tail(9, 1.0) == [] and router.asked == []
    # OTR only: leading messages are not OTR's.
    otr = TopicRecovery(
        transport_idx=3, topic_idx=7, request_idx=1, reply_to=("10.0.0.2", 1), otr=OtrConfig()
    )
    assert otr.on_tail(9, 0.0) == [] and otr.take_requests() == [] and not otr.recovering


def test_plain_late_join_messages_sent_after_the_lj_info_before_the_session_joined() -> None:
    """Non-persistent late join: the source answered the LJI request (0..9 retained), sent 10
    and 11, then the receiver's TCP session joined and its first message is 12."""
    rb = RetentionBuffer(size_threshold=1000 * (8 + PER_MESSAGE_OVERHEAD))
    svc = LateJoinService("10.0.0.1", 14391)
    sent = [0]
    svc.add(3, 7, "topic", rb, lambda: sent[0])

    def send() -> int:
        s = sent[0]
        rb.add(s, s.to_bytes(8, "big"), 0.0)
        sent[0] += 1
        return s

    def serve(reqs: list[bytes]) -> list[lbmc.LBMCMessage]:
        return [lbmc.decode(d) for r in reqs for _a, d in svc.handle(lbmc.decode(r))]

    for _ in range(10):
        send()
    rec = TopicRecovery(
        transport_idx=3,
        topic_idx=7,
        request_idx=42,
        reply_to=("10.0.0.2", 14392),
        late_join=LateJoinConfig(),
    )
    rec.start_late_join(0.0)
    got: list[tuple[int, int]] = []
    pending = serve(rec.take_requests())
    (info,) = pending
    h = info.find(lbmc.UmeLjInfo)
    assert h is not None and (h.low_seqnum, h.high_seqnum) == (0, 9)
    send(), send()  # 10 and 11: before the session joined
    got += _sqns(rec.on_lj_info(h.low_seqnum, h.high_seqnum, 0.0))
    first_live = send()
    got += _sqns(rec.on_tail(first_live - 1, 0.1))  # the DC, before its first delivery
    got += _sqns(rec.on_live(first_live, b"live", None, 0.1))
    for _round in range(100):
        reqs = rec.take_requests()
        asked = [r.seqnum for q in reqs for r in lbmc.decode(q).find_all(lbmc.UmeRxReq)]
        assert len(asked) == len(set(asked))
        msgs = serve(reqs)
        if not msgs:
            break
        for msg in msgs:
            got += _sqns(rec.on_retransmission(msg.sqn, msg.payload, None, 0.2))
    assert [s for s, _f in got] == list(range(13))
    assert all(f == FLAG_RETRANSMIT for s, f in got if s < 12) and got[-1] == (12, 0)
    assert not rec.recovering and rec.stats.filled_lj == 12


def test_tcp_delivery_controller_tells_the_tail_before_its_first_delivery() -> None:
    events: list[tuple[str, int]] = []
    dc = DeliveryController(
        7,
        "topic",
        lambda sqn, _p: events.append(("deliver", sqn)),
        lambda _kind, sqn, n: events.append(("loss", sqn)),
    )
    dc.before_start = lambda sqn: events.append(("tail", sqn))
    dc.on_tsni(6)  # before any data: leading loss, told to the recovery layer
    dc.on_data(9, b"x")  # the first delivery: 8 was sent before it
    dc.on_tsni(9)  # caught up: nothing
    dc.on_tsni(10)  # started: a real tail loss, the transport's (OTR's) business
    dc.on_data(12, b"y")
    assert events == [
        ("tail", 6), ("tail", 8), ("deliver", 9), ("loss", 10), ("loss", 11), ("deliver", 12),
    ]  # fmt: skip
    # A reassembled first message: the tail is the sqn before its first fragment.
    events.clear()
    dc2 = DeliveryController(7, "t", lambda sqn, _p: events.append(("deliver", sqn)),
                             lambda *_a: None)  # fmt: skip
    dc2.before_start = lambda sqn: events.append(("tail", sqn))
    dc2.on_fragment(21, 20, 4, 8, b"late")  # the end of a message begun before the join
    dc2.on_fragment(22, 22, 0, 8, b"abcd")
    dc2.on_fragment(23, 22, 4, 8, b"efgh")
    assert events == [("tail", 21), ("deliver", 23)]
    # No recovery attached: nothing is told (and nothing breaks).
    dc3 = DeliveryController(7, "t", lambda *_a: None, lambda *_a: None)
    dc3.on_tsni(5)
    dc3.on_data(6, b"z")


def test_smx_fast_path_tells_the_tail_before_its_first_delivery() -> None:
    """LBT-SMX delivers plain data records past the DC's on_data: its first one tells the tail."""
    events: list[tuple[str, int]] = []
    session = SmxReceiverSession()
    dc = DeliveryController(7, "t", lambda sqn, _p: events.append(("deliver", sqn)),
                            lambda *_a: None)  # fmt: skip
    dc.before_start = lambda sqn: events.append(("tail", sqn))
    session.subscribe(dc)
    for sqn in (5, 6):
        session.receive_record(memoryview(lbmc.encode_data(7, sqn, b"p")))
    assert events == [("tail", 4), ("deliver", 5), ("deliver", 6)]


def test_lbt_delivery_controller_tells_the_tail_before_its_start() -> None:
    events: list[tuple[str, int]] = []
    dc = LbtDeliveryController(
        7,
        "topic",
        lambda sqn, _p: events.append(("deliver", sqn)),
        lambda _kind, sqn, n: events.append(("loss", sqn)),
    )
    dc.before_start = lambda sqn: events.append(("tail", sqn))
    dc.on_tsni(6, 0.0)
    dc.on_message(9, b"x", None, 0.0)
    dc.on_tsni(9, 0.1)
    dc.on_message(10, b"y", None, 0.2)
    assert events == [("tail", 6), ("tail", 8), ("deliver", 9), ("deliver", 10)]
    # A tentative start (older datagrams still being recovered): told at the confirmation,
    # from the lowest message buffered.
    events.clear()
    dc2 = LbtDeliveryController(7, "t", lambda sqn, _p: events.append(("deliver", sqn)),
                                lambda *_a: None)  # fmt: skip
    dc2.before_start = lambda sqn: events.append(("tail", sqn))
    dc2.on_message(31, b"b", None, 0.0, tentative=True)
    dc2.on_message(30, b"a", None, 0.0, tentative=True)
    assert events == []
    dc2.confirm(0.1)
    assert events == [("tail", 29), ("deliver", 30), ("deliver", 31)]


def test_dro_loss_controller_tells_the_tail_before_its_first_delivery() -> None:
    events: list[tuple[str, int]] = []
    dc = DroLossController(
        7,
        "topic",
        lambda sqn, _p: events.append(("deliver", sqn)),
        lambda _kind, sqn, n: events.append(("loss", sqn)),
        timeout=1.0,
        clock=lambda: 0.0,
    )
    dc.before_start = lambda sqn: events.append(("tail", sqn))
    dc.on_tsni(6)
    dc.on_data(9, b"x")
    dc.on_data(10, b"y")
    assert events == [("tail", 6), ("tail", 8), ("deliver", 9), ("deliver", 10)]
