"""The Store asks its source again for messages it missed (umcore.store.repair, check 15's
"B catches up"): RXREQs to the source's request port after the initial delay, retried, the
source's RETRANS fills the hole, and what never comes is declared lost so stability goes on."""

from __future__ import annotations

from pathlib import Path

from tests.store.corekit import STORE_ADDR, Source, make_rig, topic_config
from umcore.features.latejoin import make_otid
from umcore.store import compose
from umcore.store.repair import INITIAL_DELAY_S, MESSAGE_TIMEOUT_S, GapRepair
from umcore.wire import lbmc


def retrans(src: Source, sqn: int) -> bytes:
    """The source's late-join service's answer: RETRANS with its OTID and topic."""
    headers: list[lbmc.Header] = [
        lbmc.Otid(0, make_otid(src.reply_to[0], src.reply_to[1], src.transport_idx)),
        lbmc.TopicName(src.topic.encode() + b"\0"),
    ]
    msg = lbmc.LBMCMessage(lbmc.MSG_RETRANS, src.topic_idx, sqn, headers, b"msg%d" % sqn)
    return lbmc.encode(msg)


def test_a_gap_is_asked_for_and_filled_by_the_source(tmp_path: Path) -> None:
    rig = make_rig(tmp_path, [topic_config("t", repository_type="memory")])
    src = Source(rig, "t")
    assert src.register() is not None
    src.send(0, 1, 2, 6, 7)
    assert src.acked() == [0, 1, 2]  # 6, 7 wait behind the gap
    rig.advance(INITIAL_DELAY_S / 2)
    assert not rig.take(src.reply_to, compose.RetransmissionRequest)  # transport may repair
    rig.advance(INITIAL_DELAY_S / 2 + 0.01)
    reqs = rig.take(src.reply_to, compose.RetransmissionRequest)
    asked = sorted(r.seqnum for m in reqs for r in m.requests)
    assert asked == [3, 4, 5]
    for m in reqs:
        for r in m.requests:
            assert r.reply_to == STORE_ADDR
            assert (r.transport_idx, r.id_2) == (src.transport_idx, src.topic_idx)
    for sqn in (3, 4, 5):
        rig.control(retrans(src, sqn), src.reply_to[0])
    assert sorted(src.acked()) == [3, 4, 5, 6, 7]
    assert rig.core.repair.repaired == 3
    rig.advance(MESSAGE_TIMEOUT_S)
    assert not rig.take(src.reply_to, compose.RetransmissionRequest)  # nothing left to ask


def test_what_never_comes_is_declared_lost_and_stability_goes_on(tmp_path: Path) -> None:
    rig = make_rig(tmp_path, [topic_config("t", repository_type="memory")])
    src = Source(rig, "t")
    assert src.register() is not None
    src.send(0, 2)
    assert src.acked() == [0]
    rig.advance(INITIAL_DELAY_S + 0.01)
    assert rig.take(src.reply_to, compose.RetransmissionRequest)
    rig.advance(1.0)
    again = rig.take(src.reply_to, compose.RetransmissionRequest)
    assert {r.seqnum for m in again for r in m.requests} == {1}  # asked again
    rig.advance(MESSAGE_TIMEOUT_S)
    assert src.acked() == [2]
    assert rig.core.repair.lost == 1
    src.send(1)  # the source re-sends it after all: the Store says it cannot hold it
    naks = [a for a in src.acks() if a.nak]
    assert [(a.first, a.last) for a in naks] == [(1, 1)]


def test_the_lead_of_a_restored_repository_seeds_the_expectation() -> None:
    rep = GapRepair()
    rep.seen(5, 20, 9, 0.0)  # the repository holds ..9: 10..19 were missed while down
    assert rep.holes(5) == 10
    rep.seen(6, 0, 0xFFFFFFFF, 0.0)  # a new source: whatever comes first
    rep.seen(6, 1, 0, 0.0)
    assert rep.holes(6) == 0
    requests, lost = rep.handle_timer(INITIAL_DELAY_S)
    assert requests == [(5, list(range(10, 20)))] and not lost


def lj_info(src: Source, low: int, high: int) -> bytes:
    """The source's answer to the Store's late-join information request (qidx = RegID)."""
    hdr = lbmc.UmeLjInfo(0, low, high, src.reg_id)
    return lbmc.encode(lbmc.LBMCMessage(lbmc.MSG_CONTROL, headers=[hdr]))


def test_a_store_back_empty_repairs_from_where_the_stream_starts(tmp_path: Path) -> None:
    """A source re-registering with a repository still empty here (the Store kept its state
    but crashed before it saw a message) is asked where its stream starts (LJI_REQ); the
    Store then asks for 0..2 instead of starting at 3 and refusing them as old."""
    rig = make_rig(tmp_path, [topic_config("t", repository_type="disk")])
    src = Source(rig, "t")
    assert src.register() is not None
    first = [m for m in rig.take(src.reply_to) if isinstance(m, lbmc.LBMCMessage)]
    assert len(first) == 1  # a source new to this Store is asked too (catchup.py), unanswered
    assert src.register() is not None  # again, nothing stored yet
    (lji,) = [m for m in rig.take(src.reply_to) if isinstance(m, lbmc.LBMCMessage)]
    req = lji.find(lbmc.LjiReq)
    assert req is not None and req.request_idx == src.reg_id
    assert (lbmc.ip4_to_str(req.req_ip), req.req_port) == STORE_ADDR
    rig.control(lj_info(src, 0, 2), src.reply_to[0])  # the source retains 0..2
    src.send(3, 4)
    assert src.acked() == []  # a disk repository writes in order: 3, 4 wait for 0..2
    # sent before the Store saw anything: no transport repairs them, asked for at once
    rig.advance(0.0)
    reqs = rig.take(src.reply_to, compose.RetransmissionRequest)
    assert sorted(r.seqnum for m in reqs for r in m.requests) == [0, 1, 2]
    for sqn in (0, 1, 2):
        rig.control(retrans(src, sqn), src.reply_to[0])
    assert sorted(src.acked()) == [0, 1, 2, 3, 4]


def test_late_information_changes_nothing(tmp_path: Path) -> None:
    rig = make_rig(tmp_path, [topic_config("t", repository_type="memory")])
    src = Source(rig, "t")
    assert src.register() is not None
    src.send(5, 6)
    assert src.acked() == [5, 6]
    rig.control(lj_info(src, 0, 6), src.reply_to[0])  # came after the data: too late
    assert rig.core.counters.lj_info_late == 1
    rig.advance(MESSAGE_TIMEOUT_S)
    assert not rig.take(src.reply_to, compose.RetransmissionRequest)
