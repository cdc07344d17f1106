"""A Store new to a source gets what the source sent before the Store joined its transport
(umcore.store.catchup): the LJI_REQ goes before the registration answer, the frames of a
late-join session are held until the LJ_INFO says where the stream starts, the initial gap is
asked of the source at once, and what the source no longer retains is declared lost.  Fake clock,
fake source speaking the wire (tests/store/corekit.py)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.store.corekit import STORE_ADDR, Rig, Source, make_rig, topic_config
from umcore.features.latejoin import make_otid
from umcore.store import compose
from umcore.store.catchup import LJI_INTERVAL_S, LJI_MAX_REQUESTS, MAX_HELD_BYTES, PROBE_AFTER_S
from umcore.store.repair import INITIAL_DELAY_S, MESSAGE_TIMEOUT_S
from umcore.wire import lbmc

M = 0xFFFFFFFF


def retrans(src: Source, sqn: int) -> bytes:
    """The source's late-join service's answer to the Store's RXREQ: RETRANS with its OTID."""
    headers: list[lbmc.Header] = [
        lbmc.Otid(0, make_otid(src.reply_to[0], src.reply_to[1], src.transport_idx)),
        lbmc.TopicName(src.topic.encode() + b"\0"),
    ]
    msg = lbmc.LBMCMessage(lbmc.MSG_RETRANS, src.topic_idx, sqn, headers, b"msg%d" % sqn)
    return lbmc.encode(msg)


def ljis(rig: Rig, src: Source) -> list[lbmc.LjiReq]:
    out = []
    for m in rig.take(src.reply_to, lbmc.LBMCMessage):
        h = m.find(lbmc.LjiReq)
        assert h is not None, m
        out.append(h)
    return out


def asked(rig: Rig, src: Source) -> list[int]:
    reqs = rig.take(src.reply_to, compose.RetransmissionRequest)
    return [r.seqnum for m in reqs for r in m.requests]


def acks_in_order(src: Source) -> list[tuple[int, int, bool]]:
    return [(a.first, a.last, a.nak) for a in src.acks()]


def expand(ranges: list[tuple[int, int, bool]]) -> list[int]:
    out: list[int] = []
    for first, last, nak in ranges:
        assert not nak, ranges
        out += range(first, last + 1)
    return out


def joined(rig: Rig, src: Source) -> None:
    """The Store's raw receiver joined the source's session (BOS)."""
    rig.core.receive_session(src.session, True, rig.now)
    rig.pump()


def register_new(rig: Rig, src: Source) -> None:
    """A new registration: the LJI_REQ leaves before the answer, to the source's request port."""
    rig.control(src.preg().encode(), src.reply_to[0])
    inbox = rig.inbox[src.reply_to]
    kinds = [type(m) for m in inbox]
    assert kinds == [lbmc.LBMCMessage, compose.RegistrationResponse], kinds
    resp = inbox[1]
    assert resp.error is None
    src.reg_id = resp.reg_id
    (req,) = ljis(rig, src)
    assert req.request_idx == src.reg_id  # the LJ_INFO's qidx names the source
    assert (req.transport_idx, req.topic_idx) == (src.transport_idx, src.topic_idx)
    assert (lbmc.ip4_to_str(req.req_ip), req.req_port) == STORE_ADDR
    rig.take(src.reply_to, compose.RegistrationResponse)


@pytest.mark.parametrize("kind", ["memory", "disk"])
def test_messages_sent_before_the_join_are_recovered_and_stable_in_order(
    tmp_path: Path, kind: str
) -> None:
    rig = make_rig(tmp_path, [topic_config("t", repository_type=kind)])
    src = Source(rig, "t", late_join=True)
    register_new(rig, src)
    # The source completed and sent 0..4 before the Store joined its session: the Store's
    # first frames are 5, 6, and they arrive before the source's LJ_INFO.
    joined(rig, src)
    assert ljis(rig, src) == []  # the start is not known yet: nothing to probe
    src.send(5, 6)
    assert src.acked() == []  # held: the Store does not know yet where the stream starts
    assert rig.core.counters.lj_held == 2
    # The LJ_INFO, answered before the source knew of the registration: nothing sent, next 0.
    src.lj_info(0, -1)
    assert src.acked() == []  # 5, 6 stored, but 0..4 are missing: nothing stable yet
    (probe,) = ljis(rig, src)  # joined: asked what the source sent and retains
    assert probe.request_idx == src.reg_id
    rig.advance(0.0)  # the initial gap is asked for at once (sent before the join)
    assert asked(rig, src) == [0, 1, 2, 3, 4]
    src.lj_info(0, 6)  # it retains everything (nothing was stable anywhere), sent up to 6
    assert asked(rig, src) == []  # nothing more missing
    for sqn in (3, 0, 4, 1, 2):  # the source's retransmissions, in any order
        rig.control(retrans(src, sqn), src.reply_to[0])
    got = acks_in_order(src)
    assert expand(got) == [0, 1, 2, 3, 4, 5, 6]  # every one, ACKed in sequence order
    assert rig.core.repair.repaired == 5
    src.send(7)
    assert src.acked() == [7]
    rig.advance(MESSAGE_TIMEOUT_S)
    assert asked(rig, src) == []  # nothing left to ask for
    assert not [a for a in src.acks() if a.nak]
    assert rig.core.counters.lj_lost_at_start == 0


def test_a_sending_source_new_to_the_store_is_stored_from_its_registration(
    tmp_path: Path,
) -> None:
    """A source already sending (a memory Store restarted under it, check 14): its LJ_INFO from
    before the registration answer says it sent up to 9 (retaining only 9): the Store starts at
    10, and neither asks for nor claims anything before."""
    rig = make_rig(tmp_path, [topic_config("t", repository_type="memory")])
    src = Source(rig, "t", late_join=True, reg_id=4242)
    register_new(rig, src)
    src.lj_info(9, 9)
    joined(rig, src)
    assert len(ljis(rig, src)) == 1  # the probe
    src.send(10, 11)
    assert src.acked() == [10, 11]
    src.lj_info(9, 11)
    rig.advance(MESSAGE_TIMEOUT_S)
    assert asked(rig, src) == []
    assert src.acks() == []  # no NAK either


def test_a_restarted_source_resuming_after_the_consensus_loses_nothing_it_sends(
    tmp_path: Path,
) -> None:
    """A source process restarted, its other Stores OLD at 99: before its Registration Complete
    its LJ_INFO says "next 0", but it resumes at 100.  The probe's answer (it retains from 100)
    declares 0..99 lost at once, and 100.. are stable without waiting the repair's timeout."""
    rig = make_rig(tmp_path, [topic_config("t", repository_type="disk")])
    src = Source(rig, "t", late_join=True)
    register_new(rig, src)
    src.lj_info(0, -1)
    joined(rig, src)
    assert len(ljis(rig, src)) == 1  # the probe
    src.send(100, 101)
    rig.advance(0.0)
    assert asked(rig, src) == list(range(100))
    src.lj_info(100, 101)
    got = acks_in_order(src)
    assert got == [(0, 99, True), (100, 101, False)]  # NAK what it cannot hold, then ACK
    assert rig.core.counters.lj_lost_at_start == 100
    rig.advance(MESSAGE_TIMEOUT_S)
    assert asked(rig, src) == []  # not asked again, not declared lost twice
    assert src.acks() == []


def test_a_source_that_never_answers_is_stored_from_the_join(tmp_path: Path) -> None:
    rig = make_rig(tmp_path, [topic_config("t", repository_type="memory")])
    src = Source(rig, "t", late_join=True)
    register_new(rig, src)
    src.send(5, 6)
    for _ in range(LJI_MAX_REQUESTS - 1):
        rig.advance(LJI_INTERVAL_S)
        assert len(ljis(rig, src)) == 1  # asked again
        assert src.acked() == []
    rig.advance(LJI_INTERVAL_S)
    assert ljis(rig, src) == []
    assert src.acked() == [5, 6]  # given up: from where this Store joined (as before)
    assert rig.core.counters.lj_gave_up == 1
    src.lj_info(0, 6)  # an answer after all changes nothing
    assert rig.core.counters.lj_info_late == 1
    rig.advance(MESSAGE_TIMEOUT_S)
    assert asked(rig, src) == []


def test_a_session_without_late_join_is_not_held(tmp_path: Path) -> None:
    """A source whose TIR does not offer late join could never answer: its frames are stored as
    they come (the Store starts where it joined)."""
    rig = make_rig(tmp_path, [topic_config("t", repository_type="memory")])
    src = Source(rig, "t")
    register_new(rig, src)
    src.send(5, 6)
    assert src.acked() == [5, 6]
    assert rig.core.counters.lj_held == 0


def test_the_hold_is_bounded_and_what_it_refused_is_repaired(tmp_path: Path) -> None:
    rig = make_rig(
        tmp_path,
        [topic_config("t", repository_type="memory", repository_size_threshold=2**31)],
    )
    src = Source(rig, "t", late_join=True)
    register_new(rig, src)
    body = b"x" * 60000
    frame_len = len(src.frame(0, body))
    fits = MAX_HELD_BYTES // frame_len
    frames = [src.frame(q, body) for q in range(fits + 1)]
    rig.core.receive_frames(src.session, frames, rig.now)  # one read
    rig.pump()
    c = rig.core.counters
    assert (c.lj_held, c.lj_held_dropped) == (fits, 1)
    src.lj_info(0, -1)
    assert expand(acks_in_order(src)) == list(range(fits))
    src.send(fits + 1)  # the next message shows the refused one missing
    rig.advance(0.0)
    assert asked(rig, src) == []  # not the initial gap: the transport may still repair it
    rig.control(retrans(src, fits), src.reply_to[0])
    assert expand(acks_in_order(src)) == [fits, fits + 1]


def test_a_burst_sent_wholly_before_the_join_is_recovered(tmp_path: Path) -> None:
    """The source sent 0..9 and went idle before the Store joined: no frame ever shows the gap;
    the probe after the join (the source sent up to 9) does, and the Store asks at once."""
    rig = make_rig(tmp_path, [topic_config("t", repository_type="disk")])
    src = Source(rig, "t", late_join=True)
    register_new(rig, src)
    src.lj_info(0, -1)
    joined(rig, src)
    assert len(ljis(rig, src)) == 1
    src.lj_info(0, 9)
    rig.advance(0.0)
    assert asked(rig, src) == list(range(10))
    assert any("sent before this Store joined" in e.text for e in rig.events)
    for sqn in range(10):
        rig.control(retrans(src, sqn), src.reply_to[0])
    assert expand(acks_in_order(src)) == list(range(10))
    src.send(10)
    assert src.acked() == [10]


def test_without_a_bos_the_probe_goes_after_a_while(tmp_path: Path) -> None:
    """A session that began before this registration brings no BOS: the probe goes out
    PROBE_AFTER_S after the start was set."""
    rig = make_rig(tmp_path, [topic_config("t", repository_type="memory")])
    src = Source(rig, "t", late_join=True)
    register_new(rig, src)
    src.lj_info(0, -1)
    src.send(0, 1)
    assert src.acked() == [0, 1]
    rig.advance(PROBE_AFTER_S / 2)
    assert ljis(rig, src) == []
    rig.advance(PROBE_AFTER_S / 2 + 0.01)
    assert len(ljis(rig, src)) == 1
    src.lj_info(0, 3)  # it sent 2, 3 meanwhile, not arrived (yet)
    rig.advance(0.5)
    assert asked(rig, src) == []  # still arriving, maybe: the repair's initial delay first
    src.send(2)
    rig.advance(INITIAL_DELAY_S - 0.5 + 0.01)
    assert asked(rig, src) == [3]
    rig.control(retrans(src, 3), src.reply_to[0])
    assert src.acked() == [2, 3]


def test_a_slow_first_answer_repeated_is_not_taken_for_the_probes(tmp_path: Path) -> None:
    """The first LJ_INFO was slow (a loaded source): the Store asked twice.  The first answer
    sets the start, the join brings the probe, and the repeated request's answer (nothing sent
    yet) arrives before the probe's: taken for the probe's, it would hide the burst the source
    sent before the join.  Answers come in the order asked, so it is skipped."""
    rig = make_rig(tmp_path, [topic_config("t", repository_type="memory")])
    src = Source(rig, "t", late_join=True)
    register_new(rig, src)
    rig.advance(LJI_INTERVAL_S + 0.01)
    assert len(ljis(rig, src)) == 1  # asked again
    src.lj_info(0, -1)  # the first request's answer: nothing sent, next 0
    joined(rig, src)
    assert len(ljis(rig, src)) == 1  # the probe
    late = rig.core.counters.lj_info_late
    src.lj_info(0, -1)  # the repeated request's answer, from before the burst
    assert rig.core.counters.lj_info_late == late + 1
    rig.advance(0.0)
    assert asked(rig, src) == []
    src.lj_info(0, 9)  # the probe's: the source sent 0..9 before the join
    rig.advance(0.0)
    assert asked(rig, src) == list(range(10))
    for sqn in range(10):
        rig.control(retrans(src, sqn), src.reply_to[0])
    assert expand(acks_in_order(src)) == list(range(10))
