"""Activity timeouts, state lifetimes and keepalives (section 1.12, traps 6-7), the Store
restart from its own files (check 13) and shutdown."""

from __future__ import annotations

from pathlib import Path

from tests.store.corekit import Receiver, Rig, Source, instance, make_rig, topic_config
from umcore.aio.storeio import load_store
from umcore.store import compose
from umcore.store.core import StoreCore
from umcore.store.events import (
    DeletionReason,
    ReceiverDeleted,
    ReceiverRecreated,
    SourceDeleted,
    SourceRecreated,
)
from umcore.store.repository import RepositoryConfig
from umcore.wire import lbmc


def keepalives(rig: Rig, dest: tuple[str, int]) -> list[compose.Keepalive]:
    return rig.take(dest, compose.Keepalive)


def test_idle_clients_get_store_keepalives_with_r_when_silent(tmp_path: Path) -> None:
    rig = make_rig(tmp_path, [topic_config("t")])
    src = Source(rig, "t")
    src.register()
    rcv = Receiver(rig, src)
    rcv.register()
    rig.advance(2.9)
    assert keepalives(rig, src.reply_to) == []
    rig.advance(0.9)  # 3 s idle, checked every 750 ms
    (ka,) = keepalives(rig, src.reply_to)
    assert (ka.role, ka.reg_id, ka.store_index) == (lbmc.KA_TYPE_STORE, src.reg_id, 0)
    assert ka.response_requested and ka.no_tir  # silent 3 s; no transport session seen yet
    (kr,) = keepalives(rig, rcv.reply_to)
    assert kr.reg_id == rcv.reg_id and kr.response_requested
    # a busy source (ACKs flowing) gets none; its frames clear the T flag
    for sqn in range(8):
        src.send(sqn)
        rig.advance(0.5)
    assert src.acked() == list(range(8))
    assert keepalives(rig, src.reply_to) == []
    rig.advance(3.8)
    (ka,) = keepalives(rig, src.reply_to)
    assert not ka.no_tir


def test_keepalive_with_r_is_answered_and_counts_as_activity(tmp_path: Path) -> None:
    rig = make_rig(tmp_path, [topic_config("t", source_activity_timeout=10000)])
    src = Source(rig, "t")
    src.register()
    ka = compose.Keepalive(lbmc.KA_TYPE_SOURCE, src.transport_idx, src.topic_idx, src.reg_id,
                           response_requested=True)  # fmt: skip
    for _ in range(4):
        rig.advance(5.0)
        rig.control(ka.encode())
        answers = [k for k in keepalives(rig, src.reply_to) if not k.response_requested]
        assert answers and answers[-1].reg_id == src.reg_id
    assert not rig.events_of(SourceDeleted)  # 20 s > 10 s timeout, but it kept talking
    rig.advance(11.0)
    assert rig.events_of(SourceDeleted)


def test_receiver_keepalives_keep_it_and_lifetime_deletes_it(tmp_path: Path) -> None:
    rig = make_rig(
        tmp_path,
        [topic_config("t", receiver_activity_timeout=5000, receiver_state_lifetime=20000,
                      source_activity_timeout=0)],
    )  # fmt: skip
    src = Source(rig, "t")
    src.register()
    rcv = Receiver(rig, src)
    rcv.register()
    alive = compose.ReceiverKeepalive(rcv.reg_id, 0)
    for _ in range(5):
        rig.advance(4.0)
        rig.control(alive.encode())
    assert rig.core.registry.receiver_states(rcv.reg_id)[0].clock.state.value == "active"
    rig.advance(6.0)
    assert rig.core.registry.receiver_states(rcv.reg_id)[0].clock.state.value == "inactive"
    rig.advance(15.0)
    (gone,) = rig.events_of(ReceiverDeleted)
    assert gone.reason == DeletionReason.STATE_LIFETIME_EXPIRED
    # after its state is gone it registers as new
    again = Receiver(rig, src, reg_id=rcv.reg_id)
    assert not again.register().old  # type: ignore[union-attr]


def test_trap06_lifetime_0_deletes_at_the_activity_timeout(tmp_path: Path) -> None:
    rig = make_rig(tmp_path, [topic_config("t", receiver_activity_timeout=5000)])
    src = Source(rig, "t", activity_timeout_ms=60000)  # client value overrides the Store's
    src.register()
    rcv = Receiver(rig, src)
    rcv.register()
    rig.advance(6.0)
    (gone,) = rig.events_of(ReceiverDeleted)
    assert gone.reason == DeletionReason.DELETED
    assert not rig.events_of(SourceDeleted)
    rig.advance(55.0)
    assert rig.events_of(SourceDeleted)


def restart(tmp: Path, rig: Rig, topics: list, seed: int) -> Rig:  # type: ignore[type-arg]
    rig.core.shutdown(rig.now)
    rig.pump()
    inst = instance(tmp, topics)

    def configs(topic: str) -> RepositoryConfig | None:
        cfg = inst.match(topic)
        return None if cfg is None else RepositoryConfig.from_topic(cfg)

    loaded = load_store(
        str(tmp / "cache"), str(tmp / "state"), configs, now=rig.now + 10, wall_offset=0.0
    )
    core = StoreCore(
        inst, store_index=0, address=rig.core.address, now=rig.now + 10,
        restored=loaded.sources, seed=seed,
    )  # fmt: skip
    second = Rig(core, now=rig.now + 10)
    second.pump()
    return second


def test_check13_disk_store_restart_recreates_sources_and_receivers(tmp_path: Path) -> None:
    topics = [topic_config("t", repository_type="disk", source_state_lifetime=600000)]
    rig = make_rig(tmp_path, topics)
    src = Source(rig, "t", session_id=0x51)
    src.register()
    rcv = Receiver(rig, src, session_id=0x52)
    rcv.register()
    src.send(*range(10))
    rcv.ack(3)
    second = restart(tmp_path, rig, topics, seed=8)
    (sev,) = second.events_of(SourceRecreated)
    assert (sev.reg_id, sev.lead_sqn) == (src.reg_id, 9)
    (rev,) = second.events_of(ReceiverRecreated)
    assert (rev.reg_id, rev.high_ack_sqn) == (rcv.reg_id, 3)
    assert second.joins == ["t"]
    src2 = Source(second, "t", session_id=0x51, port=14444, ctxinst=b"RESTART2")
    resp = src2.register()
    assert resp is not None and resp.old and (resp.reg_id, resp.high_seqnum) == (src.reg_id, 9)
    src2.send(10)
    assert src2.acked() == [10]
    rcv2 = Receiver(second, src2, session_id=0x52, port=14445)
    resp = rcv2.register()
    assert resp is not None and resp.old and resp.reg_id == rcv.reg_id and resp.low_seqnum == 4
    rcv2.request(*range(4, 11))
    # 10 is answered from memory at once, 4..9 when their disk reads complete
    got = sorted(rcv2.retransmissions(), key=lambda r: r.sqn)
    assert [r.sqn for r in got] == list(range(4, 11))
    assert [lbmc.decode(r.frame).payload for r in got] == [b"msg%d" % i for i in range(4, 11)]


def test_shutdown_writes_state_and_refuses_registrations(tmp_path: Path) -> None:
    rig = make_rig(tmp_path, [topic_config("t", repository_type="disk")])
    src = Source(rig, "t")
    src.register()
    rcv = Receiver(rig, src)
    rcv.register()
    src.send(0, 1)
    rcv.ack(1)
    rig.core.shutdown(rig.now)
    rig.pump()
    from umcore.store.state import decode_state

    state = decode_state((tmp_path / "state" / f"{src.reg_id}-state").read_bytes())
    assert [r.high_ack_sqn for r in state.receivers] == [1]
    assert Source(rig, "t", port=15000).register() is None
    assert rig.core.stats().counters["refused_after_shutdown"] == 1


def test_each_source_times_out_on_its_own_clock(tmp_path: Path) -> None:
    """The timer heap wakes each source when it is due, among many."""
    rig = make_rig(tmp_path, [topic_config("t")])
    srcs = []
    for i in range(20):
        s = Source(rig, "t", port=20000 + i, activity_timeout_ms=1000 * (20 - i))
        s.register()
        srcs.append(s)
    gone: list[int] = []
    for _ in range(22):
        rig.advance(1.0)
        gone += [e.reg_id for e in rig.events_of(SourceDeleted) if e.reg_id not in gone]
    assert gone == [s.reg_id for s in reversed(srcs)]
    assert rig.core.next_timer() is None and rig.leaves == ["t"]
