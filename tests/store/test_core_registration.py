"""StoreCore registration: persistence-store.md section 7 checks 1-6, 12, 14, 20-21, 26 (the
core's part), deregistration, error codes, and traps 6-8 and 12-13."""

from __future__ import annotations

from pathlib import Path

from tests.store.corekit import STORE_ADDR, Receiver, Source, make_rig, topic_config
from umcore.store import compose
from umcore.store.events import (
    DeletionReason,
    ReceiverDeleted,
    ReceiverRegistered,
    RegistrationRefused,
    SourceDeleted,
    SourceDeregistered,
    SourceRegistered,
    TopicCreated,
    TopicDeleted,
)
from umcore.store.io import IoKind
from umcore.wire import lbmc

NO_SQN = 0xFFFFFFFF


def test_check01_new_source_registers_and_its_first_message_is_0(tmp_path: Path) -> None:
    rig = make_rig(tmp_path, [topic_config("orders")])
    src = Source(rig, "orders")
    resp = src.register()
    assert resp is not None and resp.error is None
    assert resp.source and not resp.old and resp.reg_id != 0
    assert resp.high_seqnum == NO_SQN  # fresh: no message yet, the source starts at 0
    assert rig.joins == ["orders"]
    assert [e.topic for e in rig.events_of(TopicCreated)] == ["orders"]
    (reg,) = rig.events_of(SourceRegistered)
    assert (reg.reg_id, reg.lead_sqn, reg.old) == (resp.reg_id, NO_SQN, False)
    assert any("new source for topic" in e.text for e in rig.events)
    src.send(0)
    assert src.acked() == [0]


def test_check02_session_id_maps_to_the_same_regid_with_old_and_last_sqn(tmp_path: Path) -> None:
    rig = make_rig(tmp_path, [topic_config("orders")])
    first = Source(rig, "orders", session_id=0xABC)
    reg_id = first.register().reg_id  # type: ignore[union-attr]
    first.send(0, 1, 2, 3, 4)
    # the process restarts: new context instance and request port, same Session ID, RegID 0
    again = Source(rig, "orders", session_id=0xABC, port=14395, ctxinst=b"NEWCTX02")
    resp = again.register()
    assert resp is not None and resp.error is None
    assert resp.reg_id == reg_id and resp.old
    assert resp.high_seqnum == 4  # the source resumes at 5
    again.send(5)
    assert again.acked() == [5]
    # another topic with the same Session ID is another source
    other = Source(rig, "orders.b", session_id=0xABC)
    rig.core.instance.topics.append(topic_config("orders.b"))
    assert other.register().reg_id != reg_id  # type: ignore[union-attr]


def test_check03_strong_regid_refused_while_active_then_accepted(tmp_path: Path) -> None:
    rig = make_rig(tmp_path, [topic_config("t")])  # source-activity-timeout 30000
    a = Source(rig, "t", reg_id=1234)
    assert a.register().reg_id == 1234  # type: ignore[union-attr]
    b = Source(rig, "t", reg_id=1234, ip="10.0.0.9", ctxinst=b"OTHERCTX")
    resp = b.register()
    assert resp is not None and resp.error == lbmc.PREG_RESP_EACTIVE
    assert resp.error_text == "RegID is in use by a different source"
    (refused,) = rig.events_of(RegistrationRefused)
    assert refused.code == lbmc.PREG_RESP_EACTIVE and refused.reply_to == b.reply_to
    # the same source asking again (its answer was lost) is not a second registrant
    assert a.register().error is None  # type: ignore[union-attr]
    rig.advance(29.0)
    assert b.register().error == lbmc.PREG_RESP_EACTIVE  # type: ignore[union-attr]
    rig.advance(1.5)  # a stopped (sent nothing) 30 s ago
    resp = b.register()
    assert resp is not None and resp.error is None and resp.reg_id == 1234


def test_check03_weak_regids_accept_a_second_registrant(tmp_path: Path) -> None:
    rig = make_rig(tmp_path, [topic_config("t", source_activity_timeout=0)])
    a = Source(rig, "t", reg_id=77)
    b = Source(rig, "t", reg_id=77, ip="10.0.0.9", ctxinst=b"OTHERCTX")
    assert a.register().error is None  # type: ignore[union-attr]
    resp = b.register()
    assert resp is not None and resp.error is None and resp.old and resp.reg_id == 77


def test_check04_topic_matching_no_pattern_is_refused_enopattern(tmp_path: Path) -> None:
    rig = make_rig(tmp_path, [topic_config("^orders\\..*", "PCRE")])
    assert Source(rig, "orders.eu").register().error is None  # type: ignore[union-attr]
    resp = Source(rig, "quotes", port=14392).register()
    assert resp is not None and resp.error == lbmc.PREG_RESP_ENOPATTERN
    assert resp.error_text == "Store has no matching pattern"
    assert rig.joins == ["orders.eu"]
    assert rig.core.stats().counters["registration_errors"] == 1


def test_check05_the_core_exposes_its_context_name_and_address(tmp_path: Path) -> None:
    rig = make_rig(tmp_path, [topic_config("t")], context_name="store_topic1")
    assert rig.core.context_name == "store_topic1"
    assert rig.core.address == STORE_ADDR
    src = Source(rig, "t")
    src.register()
    info = rig.core.store_info(src.reg_id, grp_idx=1, version=3)
    assert info == compose.SriStore(STORE_ADDR, 0, src.reg_id, 1, 0, 3)


def test_check06_receiver_after_0_to_6_recovers_them_and_goes_live(tmp_path: Path) -> None:
    rig = make_rig(tmp_path, [topic_config("t")])
    src = Source(rig, "t")
    src.register()
    src.send(*range(7))
    rcv = Receiver(rig, src)
    resp = rcv.register()
    assert resp is not None and resp.error is None and not resp.source
    assert (resp.low_seqnum, resp.high_seqnum) == (0, 6)
    (ev,) = rig.events_of(ReceiverRegistered)
    assert (ev.high_sqn, ev.low_sqn, ev.src_reg_id) == (6, 0, src.reg_id)
    rcv.request(*range(resp.low_seqnum, resp.high_seqnum + 1))
    got = rcv.retransmissions()
    assert [r.sqn for r in got] == list(range(7))
    assert all(r.topic == "t" for r in got)
    assert [lbmc.decode(r.frame).payload for r in got] == [b"msg%d" % i for i in range(7)]
    c = rig.core.stats().counters
    assert (c["rx_received"], c["rx_serviced"], c["retransmissions"]) == (7, 7, 7)
    rcv.ack(6)
    src.send(7)
    assert src.acked() == [*range(7), 7]


def test_check12_source_restart_same_regid_resumes_after_last(tmp_path: Path) -> None:
    rig = make_rig(tmp_path, [topic_config("t", source_state_lifetime=600000)])
    src = Source(rig, "t", reg_id=500)
    src.register()
    src.send(0, 1, 2, 3, 4)
    restarted = Source(rig, "t", reg_id=500, port=14399, ctxinst=b"RESTART1", transport_idx=9)
    assert restarted.register().error == lbmc.PREG_RESP_EACTIVE  # type: ignore[union-attr]
    rig.advance(31.0)  # activity timeout: inactive, state kept for its lifetime
    resp = restarted.register()
    assert resp is not None and resp.error is None and resp.old
    assert (resp.reg_id, resp.high_seqnum) == (500, 4)
    restarted.send(5)  # the new session (transport 9) matches the re-registration
    assert restarted.acked() == [5]


def test_check14_memory_repository_restart_has_no_state(tmp_path: Path) -> None:
    rig = make_rig(tmp_path, [topic_config("t")])
    src = Source(rig, "t", session_id=5)
    src.register()
    src.send(0, 1, 2)
    assert not list((tmp_path / "state").iterdir())  # a memory repository keeps no state
    rig.core.shutdown(rig.now)
    rig.pump()
    second = make_rig(tmp_path, [topic_config("t")], seed=8)
    again = Source(second, "t", session_id=5)
    resp = again.register()
    assert resp is not None and resp.error is None and not resp.old
    assert resp.high_seqnum == NO_SQN
    rcv = Receiver(second, again)
    rcv.register()
    rcv.request(0, 1, 2)
    assert rcv.recovered() == []


def test_check26_clean_exit_defaults_delete_state_after_30s(tmp_path: Path) -> None:
    rig = make_rig(tmp_path, [topic_config("t")])
    src = Source(rig, "t")
    src.register()
    rcv = Receiver(rig, src)
    rcv.register()
    src.send(0, 1)
    rcv.ack(1)
    rig.advance(29.0)
    assert not rig.events_of(SourceDeleted)
    rig.advance(2.0)
    (gone,) = rig.events_of(SourceDeleted)
    assert gone.reg_id == src.reg_id and gone.reason == DeletionReason.DELETED
    # the source's state goes first, taking its receiver's with it
    assert [e.reason for e in rig.events_of(ReceiverDeleted)] == [DeletionReason.SRC_DELETED]
    assert [e.topic for e in rig.events_of(TopicDeleted)] == ["t"]
    assert rig.leaves == ["t"]
    assert rig.core.stats().sources == 0


def test_check26_state_lifetime_keeps_state_for_a_late_receiver(tmp_path: Path) -> None:
    rig = make_rig(tmp_path, [topic_config("t", source_state_lifetime=600000)])
    src = Source(rig, "t")
    src.register()
    src.send(0, 1, 2)
    rig.advance(300.0)
    assert not rig.events_of(SourceDeleted)
    rcv = Receiver(rig, src)
    resp = rcv.register()
    assert resp is not None and resp.error is None and resp.high_seqnum == 2
    rcv.request(0, 1, 2)
    assert rcv.recovered() == [0, 1, 2]
    rig.advance(600.0)
    (gone,) = rig.events_of(SourceDeleted)
    assert gone.reason == DeletionReason.STATE_LIFETIME_EXPIRED


def test_client_lifetime_values_override_and_shorter_lifetime_wins(tmp_path: Path) -> None:
    """Trap 6: the client's activity timeout overrides the Store's; the shorter non-zero
    lifetime wins; trap 7: the source's timeout is frozen at its first registration."""
    rig = make_rig(tmp_path, [topic_config("t", source_state_lifetime=60000)])
    src = Source(rig, "t", activity_timeout_ms=5000, state_lifetime_ms=20000)
    src.register()
    again = Source(rig, "t", reg_id=src.reg_id, activity_timeout_ms=90000)
    assert again.register().error is None  # type: ignore[union-attr]
    rig.advance(6.0)
    assert not rig.events_of(SourceDeleted)  # inactive (5 s, frozen), kept for 20 s
    # the source went inactive: a second registrant may take the RegID now
    other = Source(rig, "t", reg_id=src.reg_id, ip="10.0.0.7", ctxinst=b"OTHERCTX")
    assert other.register().old  # type: ignore[union-attr]
    rig.advance(21.0)
    (gone,) = rig.events_of(SourceDeleted)
    assert gone.reason == DeletionReason.STATE_LIFETIME_EXPIRED


def test_error_codes_eregid_esrcregid_etopicname(tmp_path: Path) -> None:
    rig = make_rig(tmp_path, [topic_config("t"), topic_config("u")])
    src = Source(rig, "t")
    src.register()
    rcv = Receiver(rig, src)
    rcv.register()
    # a source asking for a receiver's RegID
    resp = Source(rig, "t", reg_id=rcv.reg_id, port=14393).register()
    assert resp is not None and resp.error == lbmc.PREG_RESP_EREGID
    # a receiver asking for a source's RegID
    bad = Receiver(rig, src, reg_id=src.reg_id, port=14394)
    assert bad.register().error == lbmc.PREG_RESP_EREGID  # type: ignore[union-attr]
    # a receiver naming an unknown source
    ghost = Source(rig, "t", reg_id=42)
    assert Receiver(rig, ghost, port=14395).register().error == lbmc.PREG_RESP_ESRCREGID  # type: ignore[union-attr]
    # a source's RegID re-registered for another topic
    moved = Source(rig, "u", reg_id=src.reg_id, port=14396)
    assert moved.register().error == lbmc.PREG_RESP_ETOPICNAME  # type: ignore[union-attr]


def test_receiver_reregistration_old_low_is_last_ack_plus_one(tmp_path: Path) -> None:
    """Check 11's registration part: ACKed up to 41, killed, 42..99 sent, back with the same
    Session ID: the same RegID, OLD, low 42, and it recovers 42..99 exactly once."""
    rig = make_rig(tmp_path, [topic_config("t", repository_size_threshold=1 << 20)])
    src = Source(rig, "t")
    src.register()
    rcv = Receiver(rig, src, session_id=0x77)
    rcv.register()
    src.send(*range(42))
    rcv.ack(41)
    src.send(*range(42, 100))
    back = Receiver(rig, src, session_id=0x77, port=14500)
    resp = back.register()
    assert resp is not None and resp.error is None and resp.old
    assert (resp.reg_id, resp.low_seqnum, resp.high_seqnum) == (rcv.reg_id, 42, 99)
    back.request(*range(42, 100))
    got = back.rig.take(back.reply_to)
    assert [m.sqn for m in got] == list(range(42, 100))
    assert all(lbmc.decode(m.encode()).msg_type == lbmc.MSG_RETRANS for m in got)


def test_receiver_new_registration_rollback_limits_recovery(tmp_path: Path) -> None:
    rig = make_rig(
        tmp_path,
        [
            topic_config(
                "t", receiver_new_registration_rollback=10, repository_size_threshold=1 << 20
            )
        ],
    )
    src = Source(rig, "t")
    src.register()
    src.send(*range(50))
    resp = Receiver(rig, src).register()
    assert resp is not None and (resp.low_seqnum, resp.high_seqnum) == (40, 49)


def test_deregistration_deletes_state_and_answers_with_d(tmp_path: Path) -> None:
    rig = make_rig(tmp_path, [topic_config("t", repository_type="disk")])
    src = Source(rig, "t")
    src.register()
    rcv = Receiver(rig, src)
    rcv.register()
    src.send(0, 1, 2)
    d = compose.Deregistration(False, rcv.reg_id, src.transport_idx, src.topic_idx, rcv.reply_to,
                               src_reg_id=src.reg_id)  # fmt: skip
    rig.control(d.encode())
    (resp,) = rig.take(rcv.reply_to, compose.RegistrationResponse)
    assert resp.deregistered and resp.error is None and resp.reg_id == rcv.reg_id
    assert rig.core.stats().receivers == 0
    state_file = tmp_path / "state" / f"{src.reg_id}-state"
    assert state_file.exists()
    resp = src.deregister()
    assert resp.deregistered and (resp.low_seqnum, resp.high_seqnum) == (0, 2)
    assert [e.reg_id for e in rig.events_of(SourceDeregistered)] == [src.reg_id]
    assert not state_file.exists()
    assert rig.leaves == ["t"]
    assert not [p for p in (tmp_path / "cache").iterdir() if p.stat().st_size]
    # deregistering again is answered the same way (its first answer may have been lost)
    assert src.deregister().deregistered


def test_response_creating_a_regid_waits_for_the_state_write(tmp_path: Path) -> None:
    rig = make_rig(tmp_path, [topic_config("t", repository_type="disk")])
    rig.executor.hold = {IoKind.STATE_WRITE}
    src = Source(rig, "t")
    assert src.register() is None  # held
    assert not rig.events_of(SourceRegistered)
    (job,) = rig.executor.held
    rig.release()
    (resp,) = rig.take(src.reply_to, compose.RegistrationResponse)
    assert resp.error is None and job.owner == resp.reg_id
    assert (tmp_path / "state" / f"{resp.reg_id}-state").exists()
    assert rig.events_of(SourceRegistered)


def test_a_failed_state_write_answers_nothing_and_forgets_the_regid(tmp_path: Path) -> None:
    rig = make_rig(tmp_path, [topic_config("t", repository_type="disk")])
    rig.core.state_dir = str(tmp_path / "missing")  # every STATE_WRITE fails
    src = Source(rig, "t")
    assert src.register() is None
    assert rig.core.stats().sources == 0 and rig.leaves == ["t"]
    assert rig.core.stats().counters["state_write_errors"] == 1


def test_trap08_regid_0_is_assigned_unique_and_deterministic(tmp_path: Path) -> None:
    ids = []
    for run in range(2):
        rig = make_rig(tmp_path / str(run), [topic_config("t")], seed=99)
        ids.append([Source(rig, "t", port=15000 + i).register().reg_id for i in range(5)])  # type: ignore[union-attr]
    assert ids[0] == ids[1]
    assert len(set(ids[0])) == 5 and 0 not in ids[0]


def test_a_retry_while_the_answer_waits_creates_nothing_twice(tmp_path: Path) -> None:
    rig = make_rig(tmp_path, [topic_config("t", repository_type="disk")])
    rig.executor.hold = {IoKind.STATE_WRITE}
    src = Source(rig, "t")
    assert src.register() is None
    assert src.register() is None  # the source's registration retry
    rcv_src = rig.core.registry.sources
    assert len(rcv_src) == 1
    rig.executor.hold = set()
    rig.release()
    (resp,) = rig.take(src.reply_to, compose.RegistrationResponse)
    assert resp.error is None and not resp.old
    src.reg_id = resp.reg_id
    rig.executor.hold = {IoKind.STATE_WRITE}
    rcv = Receiver(rig, src)
    assert rcv.register() is None
    assert rcv.register() is None
    rig.executor.hold = set()
    rig.release()
    (rresp,) = rig.take(rcv.reply_to, compose.RegistrationResponse)
    assert rresp.error is None and rig.core.stats().receivers == 1
    assert rig.core.stats().counters["registrations_waiting"] == 2


def test_receiver_regids_strong_and_weak(tmp_path: Path) -> None:
    rig = make_rig(tmp_path, [topic_config("t"), topic_config("w", receiver_activity_timeout=0)])
    for topic, strong in (("t", True), ("w", False)):
        src = Source(rig, topic, port=14391 if strong else 14390)
        src.register()
        first = Receiver(rig, src, reg_id=4242 if strong else 4343)
        assert first.register().error is None  # type: ignore[union-attr]
        second = Receiver(rig, src, reg_id=first.reg_id, ip="10.0.0.3")
        resp = second.register()
        assert resp is not None
        if strong:
            assert resp.error == lbmc.PREG_RESP_EACTIVE
        else:
            assert resp.error is None and resp.old
