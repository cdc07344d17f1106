"""Deterministic tests of the sans-IO feature cores (explicit ``now``, no sockets)."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from umcore.errors import LocalProtocolError, WouldBlock
from umcore.features import immediate as im
from umcore.features.latejoin import (
    LateJoinConfig,
    LateJoinService,
    make_otid,
    parse_otid,
)
from umcore.features.otr import OtrConfig, next_interval, otr_enabled
from umcore.features.properties import (
    PROP_BOOLEAN,
    PROP_BYTE,
    PROP_DOUBLE,
    PROP_FLOAT,
    PROP_INT,
    PROP_LONG,
    PROP_SHORT,
    PROP_STRING,
    MessageProperties,
    decode_extras,
    encode_extras,
)
from umcore.features.recovery import (
    DELIVER_BURST,
    DELIVER_DATA,
    DELIVER_LOSS,
    FLAG_OTR,
    FLAG_RETRANSMIT,
    TopicRecovery,
)
from umcore.features.request import RequestTable, ResponseAddress
from umcore.features.retention import PER_MESSAGE_OVERHEAD, RetentionBuffer
from umcore.wire import lbmc


# ----------------------------------------------------------------------------- retention
def test_retention_defaults_keep_one() -> None:
    rb = RetentionBuffer()
    assert rb.defaults_retain_one
    for i in range(100):
        rb.add(i, b"x" * 25, float(i))
    assert rb.range() == (99, 99)
    assert rb.get(99) == (b"x" * 25, ())
    assert rb.get(98) is None


def test_retention_size_threshold() -> None:
    per = 10 + PER_MESSAGE_OVERHEAD
    rb = RetentionBuffer(size_threshold=5 * per)
    for i in range(20):
        rb.add(i, bytes(10), 0.0)
    # the buffer may sit at the threshold, never above it
    assert rb.range() == (15, 19)
    assert rb.size == 5 * per


def test_retention_age_threshold_and_expire() -> None:
    rb = RetentionBuffer(age_threshold=10.0)
    for i in range(5):
        rb.add(i, b"a", float(i))  # times 0..4: none 10 s old yet
    assert rb.range() == (0, 4)
    assert rb.next_timer() == 10.0
    rb.expire(12.5)  # 0, 1 and 2 are at least 10 s old
    assert rb.range() == (3, 4)
    rb.expire(100.0)
    assert rb.range() == (4, 4)  # the newest is kept


def test_retention_hard_limit_beats_age() -> None:
    per = 100 + PER_MESSAGE_OVERHEAD
    rb = RetentionBuffer(size_threshold=10**9, size_limit=3 * per, age_threshold=3600)
    for i in range(10):
        rb.add(i, bytes(100), 0.0)
    assert rb.range() == (7, 9)
    assert rb.stats.discarded_limit == 7


def test_retention_wraps() -> None:
    rb = RetentionBuffer(size_threshold=10**6)
    for k in range(4):
        rb.add((0xFFFFFFFE + k) & 0xFFFFFFFF, bytes([k]), 0.0)
    assert rb.range() == (0xFFFFFFFE, 1)
    assert rb.get(0) == (bytes([2]), ())
    assert 0xFFFFFFFF in rb and 2 not in rb


# ----------------------------------------------------------------------------- late join
class _Source:
    """A source context's serving side plus its retention, for driving TopicRecovery."""

    def __init__(self, retained: int) -> None:
        self.rb = RetentionBuffer(size_threshold=retained * (8 + PER_MESSAGE_OVERHEAD))
        self.svc = LateJoinService("10.0.0.1", 14391)
        self.sqn = 0
        self.svc.add(3, 7, "topic", self.rb, lambda: self.sqn)

    def send(self, now: float) -> tuple[int, bytes]:
        s = self.sqn
        payload = s.to_bytes(8, "big")
        self.rb.add(s, payload, now)
        self.sqn += 1
        return s, payload

    def serve(self, reqs: list[bytes]) -> list[lbmc.LBMCMessage]:
        out = []
        for raw in reqs:
            for _dest, data in self.svc.handle(lbmc.decode(raw)):
                out.append(lbmc.decode(data))
        return out


def _recovery(**kw: object) -> TopicRecovery:
    return TopicRecovery(
        transport_idx=3,
        topic_idx=7,
        request_idx=42,
        reply_to=("10.0.0.2", 14392),
        **kw,  # type: ignore[arg-type]
    )


def _feed(rec: TopicRecovery, msgs: list[lbmc.LBMCMessage], now: float) -> list:
    out = []
    for m in msgs:
        if m.msg_type == lbmc.MSG_CONTROL:
            info = m.find(lbmc.UmeLjInfo)
            assert info is not None and info.qidx == 42
            out += rec.on_lj_info(info.low_seqnum, info.high_seqnum, now)
        else:
            assert m.msg_type == lbmc.MSG_RETRANS
            otid = m.find(lbmc.Otid)
            assert otid is not None and parse_otid(otid.otid) == ("10.0.0.1", 14391, 3)
            out += rec.on_retransmission(m.sqn, m.payload, None, now)
    return out


@pytest.mark.parametrize("live_before_info", [0, 3])
def test_late_join_seam_no_gap_no_duplicate(live_before_info: int) -> None:
    src = _Source(retained=1000)
    now = 0.0
    for _ in range(200):
        src.send(now)
    rec = _recovery(late_join=LateJoinConfig())
    rec.start_late_join(now)
    reqs = rec.take_requests()
    assert len(reqs) == 1 and lbmc.decode(reqs[0]).find(lbmc.LjiReq) is not None
    delivered: list[tuple[int, int]] = []
    # live messages arrive before the LJ info (the receiver is already connected)
    for _ in range(live_before_info):
        s, p = src.send(now)
        delivered += [(d[1], d[3]) for d in rec.on_live(s, p, None, now)]
    assert delivered == []  # held until the retained range is known
    pending = src.serve(reqs)
    for _round in range(1000):
        out = _feed(rec, pending, now)
        delivered += [(d[1], d[3]) for d in out]
        s, p = src.send(now)  # the live stream goes on meanwhile
        delivered += [(d[1], d[3]) for d in rec.on_live(s, p, None, now)]
        pending = src.serve(rec.take_requests())
        if not pending and not rec.recovering:
            break
    sqns = [d[0] for d in delivered]
    assert sqns == list(range(sqns[-1] + 1))  # from 0, no gap, no duplicate
    first_live = 200
    assert all(f == FLAG_RETRANSMIT for s, f in delivered if s < first_live)
    assert all(f == 0 for s, f in delivered if s >= first_live)
    assert rec.stats.filled_lj == 200


def test_late_join_outstanding_maximum_respected() -> None:
    src = _Source(retained=100)
    for _ in range(100):
        src.send(0.0)
    rec = _recovery(late_join=LateJoinConfig(request_outstanding_maximum=10))
    rec.start_late_join(0.0)
    _feed(rec, src.serve(rec.take_requests()), 0.0)
    reqs = rec.take_requests()
    asked = [h.seqnum for r in reqs for h in lbmc.decode(r).find_all(lbmc.UmeRxReq)]
    assert asked == list(range(10))  # oldest first, ten at a time


def test_late_join_request_maximum() -> None:
    src = _Source(retained=1000)
    for _ in range(500):
        src.send(0.0)
    rec = _recovery(late_join=LateJoinConfig(request_maximum=10))
    rec.start_late_join(0.0)
    got = []
    pending = src.serve(rec.take_requests())
    while pending:
        got += _feed(rec, pending, 0.0)
        pending = src.serve(rec.take_requests())
    assert [d[1] for d in got] == list(range(490, 500))


def test_late_join_empty_source_and_info_give_up() -> None:
    src = _Source(retained=10)
    rec = _recovery(late_join=LateJoinConfig())
    rec.start_late_join(0.0)
    assert _feed(rec, src.serve(rec.take_requests()), 0.0) == []
    assert not rec.recovering
    assert [d[1] for d in rec.on_live(0, b"a", None, 0.0)] == [0]
    # A source that never answers: LJI repeated every interval up to the maximum, then live
    rec2 = _recovery(late_join=LateJoinConfig(info_request_interval=1.0, info_request_maximum=3))
    rec2.start_late_join(0.0)
    assert rec2.on_live(5, b"x", None, 0.5) == []
    sent = len(rec2.take_requests())
    t = 0.0
    out = []
    while rec2.next_timer() is not None:
        t = rec2.next_timer()  # type: ignore[assignment]
        out += rec2.handle_timer(t)
        sent += len(rec2.take_requests())
    assert sent == 3 and t == 3.0
    assert [d[1] for d in out] == [5]


def test_late_join_retransmission_timeout_reports_loss() -> None:
    src = _Source(retained=5)
    for _ in range(5):
        src.send(0.0)
    cfg = LateJoinConfig(request_interval=0.5, request_message_timeout=2.0)
    rec = _recovery(late_join=cfg)
    rec.start_late_join(0.0)
    _feed(rec, src.serve(rec.take_requests()), 0.0)
    reqs = rec.take_requests()
    msgs = src.serve(reqs)
    # sqn 1's retransmission is lost; everything else arrives
    out = _feed(rec, [m for m in msgs if m.sqn != 1], 0.1)
    assert [d[1] for d in out] == [0]
    t = 0.1
    resent = 0
    while rec.recovering:
        t = rec.next_timer()  # type: ignore[assignment]
        out += rec.handle_timer(t)
        resent += sum(len(lbmc.decode(r).find_all(lbmc.UmeRxReq)) for r in rec.take_requests())
    assert t == pytest.approx(2.0)
    assert resent == 3  # re-requested at 0.5, 1.0, 1.5
    assert [(d[0], d[1]) for d in out] == [
        (DELIVER_DATA, 0), (DELIVER_LOSS, 1), (DELIVER_DATA, 2), (DELIVER_DATA, 3),
        (DELIVER_DATA, 4),
    ]  # fmt: skip


# ----------------------------------------------------------------------------- OTR
def test_otr_timers_and_fill() -> None:
    src = _Source(retained=100)
    cfg = OtrConfig(initial_delay=2.0, minimum_interval=1.0, maximum_interval=4.0)
    rec = _recovery(otr=cfg)
    out = []
    for i in range(10):
        s, p = src.send(0.0)
        if i == 4:
            continue  # the transport lost sqn 4 ...
        if i == 5:
            out += rec.on_transport_loss(4, 1, 0.0)  # ... and gave up on it
        out += rec.on_live(s, p, None, 0.0)
    assert [d[1] for d in out] == [0, 1, 2, 3]
    assert rec.next_timer() == 2.0  # the initial delay
    times = []
    t = 0.0
    for _ in range(4):  # requests at 2, 3, 5, 9: interval 1 doubling, capped at 4
        t = rec.next_timer()  # type: ignore[assignment]
        rec.handle_timer(t)
        if rec.take_requests():
            times.append(t)
    assert times == [2.0, 3.0, 5.0, 9.0]
    reqs_msg = src.serve(
        [lbmc.encode(lbmc.LBMCMessage(lbmc.MSG_CONTROL, headers=[
            lbmc.UmeRxReq(0, 0, 42, 3, 7, 4, 14392, 0, lbmc.ip4_from_str("10.0.0.2"))]))]
    )  # fmt: skip
    got = rec.on_retransmission(reqs_msg[0].sqn, reqs_msg[0].payload, None, 9.5)
    assert [(d[1], d[3]) for d in got] == [(4, FLAG_OTR)] + [(k, 0) for k in range(5, 10)]
    assert not rec.recovering and rec.next_timer() is None


def test_otr_gives_up_after_message_timeout() -> None:
    rec = _recovery(otr=OtrConfig(initial_delay=2.0, message_timeout=60.0))
    rec.on_live(0, b"0", None, 0.0)
    rec.on_transport_loss(1, 2, 0.0)
    out = rec.on_live(3, b"3", None, 0.0)
    assert out == []
    t = 0.0
    while rec.recovering:
        t = rec.next_timer()  # type: ignore[assignment]
        out += rec.handle_timer(t)
    assert t == 60.0
    assert [(d[0], d[1]) for d in out] == [(DELIVER_LOSS, 1), (DELIVER_LOSS, 2), (DELIVER_DATA, 3)]


def test_burst_beats_otr_and_otr_off_passes_loss() -> None:
    rec = _recovery(otr=OtrConfig(), max_burst_loss=10)
    rec.on_live(0, b"0", None, 0.0)
    out = rec.on_transport_loss(1, 50, 0.0)
    assert [(d[0], d[5]) for d in out] == [(DELIVER_BURST, 50)]
    assert [d[1] for d in rec.on_live(51, b"", None, 0.0)] == [51]
    plain = _recovery()
    plain.on_live(0, b"0", None, 0.0)
    assert [(d[0], d[1]) for d in plain.on_transport_loss(1, 2, 0.0)] == [
        (DELIVER_LOSS, 1), (DELIVER_LOSS, 2),
    ]  # fmt: skip


def test_otr_caching_threshold_turns_live_into_holes() -> None:
    rec = _recovery(otr=OtrConfig(caching_threshold=3, initial_delay=0.0))
    rec.on_live(0, b"", None, 0.0)
    rec.on_transport_loss(1, 1, 0.0)
    for s in range(2, 8):
        rec.on_live(s, b"", None, 0.0)
    assert len(rec.cache) == 3 and rec.stats.live_dropped == 3
    rec.handle_timer(0.0)
    asked = sorted(
        h.seqnum for r in rec.take_requests() for h in lbmc.decode(r).find_all(lbmc.UmeRxReq)
    )
    assert asked == [1, 5, 6, 7]


def test_otr_helpers() -> None:
    cfg = OtrConfig(minimum_interval=1.0, maximum_interval=10.0)
    assert [next_interval(x, cfg) for x in (1.0, 4.0, 8.0)] == [2.0, 8.0, 10.0]
    assert otr_enabled(1) and not otr_enabled(2) and otr_enabled(2, persistent=True)
    assert not otr_enabled(0, persistent=True)


def test_otid_round_trip() -> None:
    otid = make_otid("192.168.1.2", 14393, 77)
    assert len(otid) == 32 and parse_otid(otid) == ("192.168.1.2", 14393, 77)
    assert parse_otid(bytes(32)) is None


def test_service_ignores_unknown_and_missing() -> None:
    src = _Source(retained=2)
    for _ in range(5):
        src.send(0.0)
    rx = [lbmc.UmeRxReq(0, 0, 1, 3, 7, s, 1, 0, 1) for s in (0, 4)]
    rx.append(lbmc.UmeRxReq(0, 0, 1, 9, 9, 4, 1, 0, 1))
    out = src.svc.handle(lbmc.LBMCMessage(lbmc.MSG_CONTROL, headers=list(rx)))
    assert [lbmc.decode(d).sqn for _, d in out] == [4]
    assert src.svc.stats.rx_missing == 1 and src.svc.stats.unknown_topic == 1


# ----------------------------------------------------------------------------- properties
def test_properties_every_type_round_trip() -> None:
    props = MessageProperties()
    props.set("My Prop 1", 7, PROP_INT)
    props.set("b", True)
    props.set("y", -5, PROP_BYTE)
    props.set("s", 30000, PROP_SHORT)
    props.set("l", 1 << 40)
    props.set("f", 1.5, PROP_FLOAT)
    props.set("d", 2.25)
    props.set("str", "héllo")
    assert [props.type_of(n) for n in props] == [
        PROP_INT, PROP_BOOLEAN, PROP_BYTE, PROP_SHORT, PROP_LONG, PROP_FLOAT, PROP_DOUBLE,
        PROP_STRING,
    ]  # fmt: skip
    headers, tail = encode_extras(props, [(3, b"apphdr")])
    raw = lbmc.encode(lbmc.LBMCMessage(lbmc.MSG_DATA, 0, 0, headers, b"data" + tail))
    m = lbmc.decode(raw)
    data, got, app = decode_extras(m.headers, m.payload)
    assert data == b"data" and got == props and app == [(3, b"apphdr")]


def test_properties_empty_and_absent() -> None:
    headers, tail = encode_extras(MessageProperties(), ())
    data, got, app = decode_extras(headers, b"x" + tail)
    assert data == b"x" and got is not None and len(got) == 0 and app == []
    assert encode_extras(None, ()) == ([], b"")
    assert decode_extras([], b"x") == (b"x", None, [])


def test_properties_refuse_bad_values() -> None:
    p = MessageProperties()
    with pytest.raises(LocalProtocolError):
        p.set("x", 300, PROP_BYTE)
    with pytest.raises(LocalProtocolError):
        p.set("", 1)
    with pytest.raises(LocalProtocolError):
        p.set("x", "a", PROP_INT)
    with pytest.raises(LocalProtocolError):
        encode_extras(None, [(70000, b"")])


@settings(max_examples=100, deadline=None)
@given(st.dictionaries(
    st.text(st.characters(blacklist_categories=("Cs",), blacklist_characters="\0"),
            min_size=1, max_size=20),
    st.one_of(st.booleans(), st.integers(-(1 << 63), (1 << 63) - 1),
              st.floats(allow_nan=False), st.text(st.characters(
                  blacklist_categories=("Cs",), blacklist_characters="\0"), max_size=30)),
    max_size=8,
))  # fmt: skip
def test_properties_round_trip_property(values: dict[str, object]) -> None:
    props = MessageProperties(values)
    headers, tail = encode_extras(props)
    _, got, _ = decode_extras(headers, b"payload" + tail)
    assert got is not None and got.as_dict() == props.as_dict()


# ----------------------------------------------------------------------------- UIM / MIM
def test_uim_framing_and_classify() -> None:
    ctx = b"ABCDEFGH"
    raw = im.encode_uim(b"hi", topic="t1", ctxinst=ctx, stream_id=5, sqn=9)
    m = lbmc.decode(raw)
    assert im.classify(m) == im.KIND_UIM
    assert m.find(lbmc.TopicName) == lbmc.TopicName(b"t1\0")
    assert m.find(lbmc.Stream) == lbmc.Stream(0, 5, 9, ctx)
    req = lbmc.decode(
        im.encode_uim(b"q", topic=None, ctxinst=ctx, stream_id=1, sqn=0,
                      request=(77, "10.1.2.3", 14391))
    )  # fmt: skip
    assert im.classify(req) == im.KIND_REQUEST
    r = req.find(lbmc.Request)
    assert r is not None and (r.qidx, r.port, lbmc.ip4_to_str(r.ipaddr)) == (77, 14391, "10.1.2.3")
    resp = lbmc.decode(im.encode_response(77, b"ans", ctxinst=ctx, stream_id=1, sqn=0))
    assert im.classify(resp) == im.KIND_RESPONSE and im.response_index(resp) == 77
    assert resp.payload == b"ans"
    assert im.parse_destination("TCP:1.2.3.4:14391") == ("1.2.3.4", 14391)
    assert im.parse_destination("TCP:5:1.2.3.4:99") == ("1.2.3.4", 99)
    for bad in ("UDP:1.2.3.4:1", "TCP:1.2.3:4", "TCP:1.2.3.4:0", "TCP:x"):
        with pytest.raises(ValueError):
            im.parse_destination(bad)
    assert im.decode_topic(b"abc\0") == "abc"


def test_uim_connection_table_deletion_timer() -> None:
    t = im.UimConnections(deletion_timeout=20.0, max_buffer=10, ctxinst=bytes(8))
    dest = ("127.0.0.1", 14391)
    assert t.send(dest, b"12345", 0.0) == (True, b"")  # open a connection; held
    assert t.send(dest, b"67890", 1.0) == (False, b"")
    with pytest.raises(WouldBlock):
        t.send(dest, b"x", 1.0)
    assert t.connected(dest, 1.5) == b"1234567890"
    assert t.send(dest, b"z", 5.0) == (False, b"z")
    assert t.next_timer() == 25.0  # restarted by each use
    assert t.handle_timer(24.9) == []
    assert t.handle_timer(25.0) == [dest]
    t.closed(dest)
    assert dest not in t
    # a request-triggered connection: the timer starts only at release
    t.hold(dest, 0.0)
    assert t.next_timer() is None
    t.send(dest, b"r", 3.0)
    assert t.next_timer() is None
    t.release(dest, 7.0)
    assert t.next_timer() == 27.0


def test_mim_sender_receiver() -> None:
    s = im.MimSender(0x1234, deletion_timeout=30.0)
    r = im.MimReceiver()
    addr = ("127.0.0.1", 5000)
    d0 = s.datagram("t", b"a", 0.0, new_session_id=1)
    d1 = s.datagram(None, b"b", 1.0, new_session_id=1)
    d2 = s.datagram("t", b"c", 2.0, new_session_id=1)
    msgs, lost = r.receive(d0, addr, 0.0)
    assert lost == 0 and msgs[0].find(lbmc.TopicName) is not None and msgs[0].payload == b"a"
    msgs, lost = r.receive(d2, addr, 2.0)  # d1 lost
    assert lost == 1 and msgs[0].payload == b"c"
    assert r.receive(d1, addr, 2.0) == ([], 0) and r.dropped_duplicate == 1
    d3 = s.datagram("t", b"d", 40.0, new_session_id=99)  # idle > 30 s: a new session
    assert s.sessions_started == 2
    msgs, lost = r.receive(d3, addr, 40.0)
    assert lost == 0 and msgs[0].payload == b"d"
    assert r.receive(b"garbage", addr, 40.0) == ([], 0) and r.dropped_malformed == 1


# ----------------------------------------------------------------------------- requests
def test_request_table() -> None:
    tab = RequestTable()
    seen: list[object] = []
    q = tab.open(lambda *a: seen.append(a), "cd")
    q2 = tab.open(lambda *a: None)
    assert q != q2
    hit = tab.response(q)
    assert hit is not None and hit[1] == "cd"
    assert tab.responses(q) == 1
    assert tab.close(q) and tab.response(q) is None
    assert tab.stats.responses_dropped == 1
    addr = ResponseAddress("10.0.0.1", 14391, 5)
    assert ResponseAddress.deserialize(addr.serialize()).dest == ("10.0.0.1", 14391)


def test_late_join_machine_every_state_reachable_and_illegal_inputs_refused() -> None:
    from umcore.errors import LocalProtocolError
    from umcore.features.recovery import LATE_JOIN_TRANSITIONS, LateJoin, LateJoinInput

    reached = {LateJoin.NONE}
    frontier = [LateJoin.NONE]
    while frontier:
        state = frontier.pop()
        for (src, _inp), dst in LATE_JOIN_TRANSITIONS.items():
            if src is state and dst not in reached:
                reached.add(dst)
                frontier.append(dst)
    assert reached == set(LateJoin)
    rec = TopicRecovery(
        transport_idx=0,
        topic_idx=0,
        request_idx=1,
        reply_to=("127.0.0.1", 1),
        late_join=LateJoinConfig(),
        otr=None,
    )
    assert rec.lj_state is LateJoin.NONE
    with pytest.raises(LocalProtocolError, match="recovered in state none"):
        rec._transition(LateJoinInput.RECOVERED)
    rec.start_late_join(0.0)
    assert rec.lj_state is LateJoin.WAIT_INFO
    rec.start_late_join(0.0)  # a second start is ignored, not a transition
    assert rec.lj_state is LateJoin.WAIT_INFO
