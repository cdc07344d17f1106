"""The store core's daemon-control operations (persistence-store.md 4.4, check 34): ``mark`` a
sequence number invalid (never retransmitted until restart; forwarding defeats it), and
``deregister`` a receiver (state deleted; its later ACKs discarded and reported)."""

from __future__ import annotations

from pathlib import Path

from tests.store.corekit import Receiver, Source, make_rig, topic_config
from umcore.store import compose
from umcore.store.core import MAX_MARKS_PER_SOURCE, StoreCore
from umcore.store.events import AckDiscarded, DeletionReason, ReceiverDeleted

BIG = 1 << 24


def test_check34_marked_sqn_is_not_retransmitted_until_restart(tmp_path: Path) -> None:
    rig = make_rig(tmp_path, [topic_config("t", repository_size_threshold=BIG)])
    src = Source(rig, "t")
    src.register()
    src.send(*range(600))
    assert rig.core.mark_invalid(src.reg_id, 500)
    assert rig.core.marked(src.reg_id) == {500}
    rcv = Receiver(rig, src)
    rcv.register()
    rcv.request(499, 500, 501)
    assert rcv.recovered() == [499, 501]
    assert rig.core.stats().counters["rx_marked"] == 1
    # unknown source: refused
    assert not rig.core.mark_invalid(src.reg_id + 1000, 1)
    # a fresh core (a restart) holds no marks: 500 is served again
    again = StoreCore(
        rig.core.instance, store_index=0, address=rig.core.address, now=rig.now, seed=8
    )
    assert again.marked(src.reg_id) == frozenset()


def test_mark_is_defeated_by_forwarding(tmp_path: Path) -> None:
    rig = make_rig(
        tmp_path,
        [topic_config("t", repository_size_threshold=BIG, retransmission_request_forwarding=1)],
    )
    src = Source(rig, "t")
    src.register()
    src.send(*range(10))
    assert rig.core.mark_invalid(src.reg_id, 5)
    rcv = Receiver(rig, src)
    rcv.register()
    rcv.request(5)
    assert rcv.recovered() == []
    (fwd,) = rig.take(src.reply_to, compose.RetransmissionRequest)
    assert [r.seqnum for r in fwd.requests] == [5]


def test_marks_are_bounded_per_source(tmp_path: Path) -> None:
    rig = make_rig(tmp_path, [topic_config("t")])
    src = Source(rig, "t")
    src.register()
    for sqn in range(MAX_MARKS_PER_SOURCE):
        assert rig.core.mark_invalid(src.reg_id, sqn)
    assert not rig.core.mark_invalid(src.reg_id, MAX_MARKS_PER_SOURCE)
    assert rig.core.mark_invalid(src.reg_id, 0)  # an existing mark is no new one


def test_check34_deregister_removes_receiver_and_discards_its_acks(tmp_path: Path) -> None:
    rig = make_rig(tmp_path, [topic_config("t")])
    src = Source(rig, "t")
    src.register()
    rcv = Receiver(rig, src)
    rcv.register()
    src.send(*range(5))
    rcv.ack(2)
    assert rig.core.deregister_receiver(src.reg_id, rcv.reg_id, rig.now)
    rig.pump()
    (deleted,) = rig.events_of(ReceiverDeleted)
    assert (deleted.src_reg_id, deleted.reg_id) == (src.reg_id, rcv.reg_id)
    assert deleted.reason is DeletionReason.DELETED
    (repo,) = rig.core.stats().repositories
    assert repo.receivers == 0
    # the still-running receiver ACKs on: discarded and reported
    rcv.ack(4)
    (discarded,) = rig.events_of(AckDiscarded)
    assert (discarded.src_reg_id, discarded.rcv_reg_id) == (src.reg_id, rcv.reg_id)
    assert "discarded" in discarded.text
    assert rig.core.stats().counters["unknown_regid"] == 1
    # a second time: no such state
    assert not rig.core.deregister_receiver(src.reg_id, rcv.reg_id, rig.now)
