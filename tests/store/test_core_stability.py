"""StoreCore stability and consumption ACKs: batching and ranged ACKs, duplicates and NAKs,
disk stability and a full disk, sequence-number wrap, cumulative consumption ACKs (traps 3, 9,
14, 15), stored frame kinds and session matching."""

from __future__ import annotations

import tempfile
from pathlib import Path

from hypothesis import given, settings
from hypothesis import strategies as st

from tests.store.corekit import Receiver, Source, make_rig, topic_config
from umcore.engine.raw import RawSession
from umcore.store import compose
from umcore.wire import lbmc, lbmr_options

BIG = 1 << 24


def test_each_message_acked_at_once_by_default(tmp_path: Path) -> None:
    rig = make_rig(tmp_path, [topic_config("t", repository_size_threshold=BIG)])
    src = Source(rig, "t")
    src.register()
    for sqn in range(5):
        src.send(sqn)
        (ack,) = src.acks()
        assert (ack.first, ack.last, ack.nak, ack.store_index) == (sqn, sqn, False, 0)
        assert (ack.transport_idx, ack.topic_idx) == (src.transport_idx, src.topic_idx)


def test_a_reads_frames_are_acked_together_in_one_ranged_ack(tmp_path: Path) -> None:
    rig = make_rig(tmp_path, [topic_config("t", repository_size_threshold=BIG)])
    src = Source(rig, "t")
    src.register()
    control = lbmc.encode(lbmc.LBMCMessage(lbmc.MSG_CONTROL, headers=[lbmc.Tsni(((0, 9),))]))
    read = [src.frame(sqn) for sqn in range(5)] + [control] + [src.frame(sqn) for sqn in (5, 6)]
    rig.core.receive_frames(src.session, read, rig.now)
    rig.pump()
    (ack,) = src.acks()
    assert (ack.first, ack.last, ack.nak) == (0, 6, False)
    # a duplicate inside a later read is ACKed again on its own, the new ones together
    rig.core.receive_frames(src.session, [src.frame(3), src.frame(7), src.frame(8)], rig.now)
    rig.pump()
    assert sorted((a.first, a.last) for a in src.acks()) == [(3, 3), (7, 8)]


def test_check08_batched_ranged_acks_and_the_interval(tmp_path: Path) -> None:
    rig = make_rig(
        tmp_path,
        [topic_config("t", stability_ack_minimum_number=64, repository_size_threshold=BIG)],
    )
    src = Source(rig, "t")
    src.register()
    src.send(*range(100))
    (ack,) = src.acks()
    assert (ack.first, ack.last) == (0, 63)
    rig.advance(0.19)
    assert src.acks() == []
    rig.advance(0.02)
    (ack,) = src.acks()
    assert (ack.first, ack.last) == (64, 99)
    # a trickle: each message is ACKed within stability-ack-interval
    for sqn in range(100, 104):
        rig.advance(1.0)
        src.send(sqn)
        assert src.acks() == []
        rig.advance(0.2)
        assert src.acked() == [sqn]


def test_trap15_duplicates_are_acked_again(tmp_path: Path) -> None:
    rig = make_rig(tmp_path, [topic_config("t", repository_size_threshold=BIG)])
    src = Source(rig, "t")
    src.register()
    src.send(0, 1, 2)
    assert src.acked() == [0, 1, 2]
    src.send(1, msg_type=lbmc.MSG_PRORX)  # a proactive retransmission of a stable message
    assert src.acked() == [1]
    assert rig.core.stats().repositories[0].counters["duplicates"] == 1


def test_trap15_declared_lost_and_unheld_messages_get_a_nak(tmp_path: Path) -> None:
    rig = make_rig(tmp_path, [topic_config("t", repository_size_threshold=BIG)])
    src = Source(rig, "t")
    src.register()
    src.send(0, 1)
    src.acks()
    src.send(5)  # 2..4 missing: 5 is not stable yet
    assert src.acks() == []
    rig.core.receive_loss(src.session, 2, 4, rig.now)
    rig.pump()
    # stability passes the gap: 2..4 are NAKed (never claimed stable), 5 is ACKed
    assert [(a.first, a.last, a.nak) for a in src.acks()] == [(2, 4, True), (5, 5, False)]
    src.send(3)  # the source re-sends a message the Store declared lost
    (nak,) = src.acks()
    assert (nak.first, nak.last, nak.nak) == (3, 3, True)
    assert rig.core.stats().counters["naks_sent"] == 2


def test_a_resent_message_before_the_trail_gets_a_nak(tmp_path: Path) -> None:
    rig = make_rig(tmp_path, [topic_config("t", repository_size_threshold=200)])
    src = Source(rig, "t")
    src.register()
    src.send(*range(30))  # the 1024-byte floor keeps only the newest
    src.acks()
    trail = rig.core.stats().repositories[0].counters["trail_sqn"]
    assert trail > 0
    src.send(0)
    (nak,) = src.acks()
    assert nak.nak and nak.first == 0


def test_trap14_disk_stability_follows_the_write_and_a_full_disk_stops_acks(
    tmp_path: Path,
) -> None:
    rig = make_rig(tmp_path, [topic_config("t", repository_type="disk")])
    src = Source(rig, "t")
    src.register()
    src.send(0, 1)
    assert src.acked() == [0, 1]
    rig.executor.fail_writes = True
    src.send(2, 3)
    rig.advance(2.0)
    assert src.acks() == []  # writes fail: nothing is stable, nothing ACKed
    assert rig.core.stats().repositories[0].counters["write_errors"] >= 1
    rig.executor.fail_writes = False
    rig.advance(1.0)  # the repository retries
    assert src.acked() == [2, 3]


def test_trap14_a_gap_delays_stability_of_what_follows(tmp_path: Path) -> None:
    rig = make_rig(tmp_path, [topic_config("t", repository_type="disk")])
    src = Source(rig, "t")
    src.register()
    src.send(0, 2, 3)
    assert src.acked() == [0]
    src.send(1)  # repaired
    assert src.acked() == [1, 2, 3]


def test_trap09_sequence_numbers_wrap(tmp_path: Path) -> None:
    rig = make_rig(tmp_path, [topic_config("t", repository_size_threshold=BIG)])
    src = Source(rig, "t")
    src.register()
    rcv = Receiver(rig, src)
    rcv.register()
    sqns = [0xFFFFFFFE, 0xFFFFFFFF, 0, 1]
    src.send(*sqns)
    assert src.acked() == sqns
    rcv.ack(0xFFFFFFFF)
    rcv.ack(1)
    rcv.ack(0xFFFFFFFE)  # older: ignored (cumulative, trap 3)
    again = Receiver(rig, src, reg_id=rcv.reg_id)
    assert again.register().low_seqnum == 2  # type: ignore[union-attr]


def test_check10_trap03_consumption_acks_are_cumulative(tmp_path: Path) -> None:
    rig = make_rig(tmp_path, [topic_config("t", repository_size_threshold=BIG)])
    src = Source(rig, "t")
    src.register()
    rcv = Receiver(rig, src)
    rcv.register()
    src.send(*range(10))
    rcv.ack(7)
    rcv.ack(3)  # out of order: no going back
    (repo,) = rig.core.stats().repositories
    (rstat,) = repo.receiver_stats
    assert (rstat.reg_id, rstat.high_ack_sqn, rstat.address) == (rcv.reg_id, 7, rcv.reply_to)
    back = Receiver(rig, src, reg_id=rcv.reg_id)
    assert back.register().low_seqnum == 8  # type: ignore[union-attr]
    # an ACK naming an unknown source or receiver is counted and dropped
    stray = compose.ConsumptionAck(1, 999, rcv.reg_id, 5)
    rig.control(stray.encode())
    assert rig.core.stats().counters["unknown_regid"] == 1


def test_ack_positions_reach_the_state_file_batched(tmp_path: Path) -> None:
    from umcore.store.state import decode_state

    rig = make_rig(tmp_path, [topic_config("t", repository_type="disk")])
    src = Source(rig, "t")
    src.register()
    rcv = Receiver(rig, src)
    rcv.register()
    src.send(*range(5))
    path = tmp_path / "state" / f"{src.reg_id}-state"
    writes = len([j for j in rig.executor.done if j.path == str(path)])
    for sqn in range(5):
        rcv.ack(sqn)
    assert len([j for j in rig.executor.done if j.path == str(path)]) == writes
    rig.advance(1.1)
    state = decode_state(path.read_bytes())
    assert [r.high_ack_sqn for r in state.receivers] == [4]
    assert len([j for j in rig.executor.done if j.path == str(path)]) == writes + 1


def test_trap02_frames_stored_per_source_for_the_matching_session_and_topic_index(
    tmp_path: Path,
) -> None:
    rig = make_rig(tmp_path, [topic_config("t", repository_size_threshold=BIG)])
    a = Source(rig, "t", transport_idx=1, topic_idx=3)
    b = Source(rig, "t", ip="10.0.0.5", transport_idx=1, topic_idx=3, advertise=False)
    a.register()
    b.register()
    a.send(0)
    b.send(0, 1)
    assert a.acked() == [0] and b.acked() == [0, 1]
    # trap 2: one repository per source, not per topic
    held = {r.reg_id: r.counters["frames_held"] for r in rig.core.stats().repositories}
    assert held == {a.reg_id: 1, b.reg_id: 2}
    core = rig.core
    # another topic's index on the same session, control frames, garbage: not stored
    core.receive_frame(a.session, lbmc.encode_data(4, 9, b"x"), rig.now)
    tsni = lbmc.encode(lbmc.LBMCMessage(lbmc.MSG_CONTROL, headers=[lbmc.Tsni(((3, 0),))]))
    core.receive_frame(a.session, tsni, rig.now)
    core.receive_frame(a.session, b"\x00\x00\x00", rig.now)
    # a session advertising an unknown request port matches nothing
    opt = lbmr_options.UMEOption(src_tcp_port=1, src_tcp_addr="10.0.0.1", transport_idx=1)
    stray = RawSession("TCP", "TCP:x", 1, 3, "t", "10.0.0.1", (opt,))
    core.receive_frame(stray, a.frame(1), rig.now)
    rig.pump()
    c = core.stats().counters
    assert (c["other_topic_frames"], c["unstored_frames"], c["bad_frames"]) == (1, 1, 1)
    assert c["unmatched_frames"] == 1 and c["frames_stored"] == 3
    assert a.acks() == []


def test_proactive_retransmission_over_uim_is_stored(tmp_path: Path) -> None:
    rig = make_rig(tmp_path, [topic_config("t", repository_size_threshold=BIG)])
    src = Source(rig, "t")
    src.register()
    src.send(0)
    src.acks()
    prorx = lbmc.encode_data(src.topic_idx, 1, b"late", msg_type=lbmc.MSG_PRORX)
    rig.control(prorx, src.reply_to[0])
    assert src.acked() == [1]


def test_declared_lost_ranges_across_the_wrap(tmp_path: Path) -> None:
    rig = make_rig(tmp_path, [topic_config("t", repository_size_threshold=BIG)])
    src = Source(rig, "t")
    src.register()
    src.send(0xFFFFFFFC)
    src.acks()
    src.send(1, 3)
    rig.core.receive_loss(src.session, 0xFFFFFFFD, 0, rig.now)
    rig.core.receive_loss(src.session, 2, 2, rig.now)
    rig.pump()
    got = [(a.first, a.last, a.nak) for a in src.acks()]
    assert got == [(0xFFFFFFFD, 0, True), (1, 1, False), (2, 2, True), (3, 3, False)]


@settings(max_examples=40, deadline=None)
@given(
    order=st.lists(st.integers(0, 39), min_size=1, max_size=80),
    kind=st.sampled_from(["memory", "disk"]),
    minimum=st.sampled_from([1, 4]),
)
def test_acks_cover_only_what_was_received_and_everything_contiguous(
    order: list[int], kind: str, minimum: int
) -> None:
    """Whatever the arrival order (gaps, repeats), a stability ACK never names a sqn not yet
    received, and once first..n arrived they are all ACKed (batches flushed by the interval).
    The repository's trail starts at the first sqn it receives: one arriving later but before
    it is NAKed (the Store never held it)."""
    with tempfile.TemporaryDirectory() as tmp:
        rig = make_rig(
            Path(tmp),
            [topic_config("t", repository_type=kind, repository_size_threshold=BIG,
                          stability_ack_minimum_number=minimum)],
        )  # fmt: skip
        src = Source(rig, "t")
        src.register()
        seen: set[int] = set()
        acked: set[int] = set()
        for sqn in order:
            src.send(sqn)
            seen.add(sqn)
            rig.advance(0.05)
            for a in src.acks():
                covered = set(range(a.first, a.last + 1))
                assert covered <= seen, (a, seen)
                if a.nak:
                    assert a.first == a.last and a.first < order[0], (a, order)
                else:
                    acked |= covered
        rig.advance(1.0)
        acked |= set(src.acked())
        contiguous = order[0]
        while contiguous in seen:
            contiguous += 1
        assert set(range(order[0], contiguous)) <= acked


_READS = st.lists(
    st.tuples(
        st.integers(-3, 2),  # first sqn relative to the next expected
        st.integers(1, 40),  # frames in the read
        st.sampled_from(["", "longer", "other_tidx", "control", "bad_msglen", "prorx"]),
        st.integers(0, 39),  # where the odd frame goes
    ),
    min_size=1,
    max_size=12,
)


@settings(max_examples=40, deadline=None)
@given(st.sampled_from(["memory", "disk"]), _READS)
def test_a_read_taken_as_one_block_is_what_frames_one_by_one_give(
    kind: str, reads: list[tuple[int, int, str, int]]
) -> None:
    """receive_frames' block path (a read of equal-sized, consecutive DATA frames checked and
    appended at once) against the same frames fed a few at a time (below BLOCK_MIN: the
    per-frame path): the same counters, the same sqns ACKed and NAKed, the same messages held.
    Odd frames inside a read (another length, another topic index, a control frame, a bad
    msglen, a PRORX) send the read down the per-frame path; they are counted alike."""
    from umcore.store.core import BLOCK_MIN

    control = lbmc.encode(lbmc.LBMCMessage(lbmc.MSG_CONTROL, headers=[lbmc.Tsni(((0, 9),))]))
    sides = []
    for piece in (None, BLOCK_MIN - 1):
        with tempfile.TemporaryDirectory() as tmp:
            rig = make_rig(
                Path(tmp), [topic_config("t", repository_type=kind, repository_size_threshold=BIG)]
            )
            src = Source(rig, "t")
            src.register()
            src.lj_info(0, -1)  # (the source's start: nothing retained, next sqn 0)
            nxt = 0
            acked: list[int] = []
            naked: list[tuple[int, int]] = []
            for delta, count, odd, where in reads:
                first = max(0, nxt + delta)
                read = [src.frame(first + k, bytes(20)) for k in range(count)]
                at = where % count
                if odd == "longer":
                    read[at] = src.frame(first + at, bytes(21))
                elif odd == "other_tidx":
                    read[at] = lbmc.encode_data(src.topic_idx + 1, first + at, bytes(20))
                elif odd == "control":
                    read.insert(at, control)
                elif odd == "bad_msglen":
                    read[at] = read[at][:3] + b"\x07" + read[at][4:]
                elif odd == "prorx":
                    read[at] = src.frame(first + at, bytes(20), msg_type=lbmc.MSG_PRORX)
                step = piece or len(read)
                for i in range(0, len(read), step):
                    rig.core.receive_frames(src.session, read[i : i + step], rig.now)
                    rig.pump()
                for a in src.acks():
                    if a.nak:
                        naked.append((a.first, a.last))
                    else:
                        acked += range(a.first, a.last + 1)
                nxt = max(nxt, first + count)
            repo = rig.core.stats().repositories[0]
            held = {q: src_repo_get(rig, src, q) for q in range(nxt + 1)}
            counters = dict(rig.core.stats().counters)
            del counters["acks_sent"]  # (one ranged ACK per read or per piece)
            # (the write jobs' shape: one write per read or per piece, an index block each)
            shape = {"writes", "writes_pending", "disk_bytes"}
            rc = {k: v for k, v in repo.counters.items() if k not in shape}
            sides.append((counters, sorted(acked), sorted(naked), rc, held))
    block, single = sides
    assert block[0] == single[0]  # the instance's counters
    assert block[1] == single[1]  # every sqn ACKed (ranges differ: one per read or piece)
    assert block[2] == single[2]
    assert block[3] == single[3]  # the repository's counters
    assert block[4] == single[4]  # the messages held


def src_repo_get(rig: object, src: Source, sqn: int) -> object:
    """Message ``sqn`` as the Store holds it (in memory for these repositories)."""
    from umcore.store.core import StoreCore

    core = rig.core  # type: ignore[attr-defined]
    assert isinstance(core, StoreCore)
    entry = core.registry.sources[src.reg_id]
    return entry.repository.get(sqn)
