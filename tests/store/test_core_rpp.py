"""Receiver-paced persistence in the core: negotiation and refusals (checks 20, 21, trap 12),
receiver modes (trap 13), the stop point one flight size before full (check 22, trap 11),
non-blocking receivers (check 23), write delay (check 24) and late RPP receivers (check 25)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.store.corekit import Receiver, Rig, Source, make_rig, topic_config
from umcore.store import compose
from umcore.store.events import DeletionReason, ReceiverDeleted, RppRepoEmpty, RppWriting
from umcore.store.io import IoKind
from umcore.wire import lbmc

RPP_TOPIC = dict(
    repository_allow_receiver_paced_persistence=1,
    repository_size_limit=1000,
    source_flight_size_bytes_maximum=400,
)
PAYLOAD = b"0123456789"  # RPP counts payload bytes only


def rpp_rig(tmp: Path, **extra: Any) -> Rig:
    return make_rig(tmp, [topic_config("t", **{**RPP_TOPIC, **extra})])


def rpp_source(rig: Rig, flight: int = 100, **opts: int) -> Source:
    options = {"ume_flight_size_bytes": flight, **opts}
    return Source(rig, "t", rpp=True, rpp_options=tuple(sorted(options.items())))


def send(src: Source, *sqns: int) -> None:
    for sqn in sqns:
        src.rig.core.receive_frame(src.session, src.frame(sqn, PAYLOAD), src.rig.now)
        src.rig.pump()


def test_check20_rpp_needs_the_topic_to_allow_it(tmp_path: Path) -> None:
    rig = make_rig(tmp_path, [topic_config("t")])
    resp = rpp_source(rig).register()
    assert resp is not None and resp.error == lbmc.PREG_RESP_ECONFIG
    assert resp.error_text == "Source and store configuration values are incompatible"
    rig2 = rpp_rig(tmp_path / "2")
    resp = rpp_source(rig2).register()
    assert resp is not None and resp.error is None and resp.rpp


@pytest.mark.parametrize(
    ("mode", "ok"), [(0, False), (1, True), (2, True)], ids=["spp", "blocking", "non-blocking"]
)
def test_check20_trap13_receiver_mode_must_match(tmp_path: Path, mode: int, ok: bool) -> None:
    rig = rpp_rig(tmp_path)
    src = rpp_source(rig)
    src.register()
    resp = Receiver(rig, src, rpp_mode=mode).register()
    assert resp is not None
    if ok:
        assert resp.error is None and resp.rpp
        assert rig.core.registry.receiver_states(resp.reg_id)[0].rpp_mode == mode
    else:
        assert resp.error == lbmc.PREG_RESP_ECONFIG


def test_rpp_receiver_on_an_spp_repository_is_refused(tmp_path: Path) -> None:
    rig = rpp_rig(tmp_path)
    src = Source(rig, "t")
    src.register()
    assert Receiver(rig, src, rpp_mode=1).register().error == lbmc.PREG_RESP_ECONFIG  # type: ignore[union-attr]


@pytest.mark.parametrize(
    ("topic", "opts"),
    [
        ({}, {"ume_flight_size_bytes": 401}),
        ({}, {"ume_flight_size_bytes": 0}),
        ({"repository_type": "disk", "repository_disk_write_delay": 100}, {"ume_write_delay": 101}),
        ({}, {"ume_repository_size_limit": 1001}),
        ({}, {"ume_repository_size_threshold": 2048}),
        ({"repository_disk_file_size_limit": 300000}, {"ume_repository_disk_file_size_limit": 300001}),
        ({}, {"ume_repository_ack_on_reception": 1}),
    ],
    ids=["flight-over", "flight-missing", "write-delay", "size-limit", "threshold", "disk-limit", "aor"],
)  # fmt: skip
def test_check21_trap12_overrides_above_the_maximum_are_refused_not_clamped(
    tmp_path: Path, topic: dict[str, Any], opts: dict[str, int]
) -> None:
    rig = rpp_rig(tmp_path, **topic)
    options = {"ume_flight_size_bytes": 100, **opts}
    src = Source(rig, "t", rpp=True, rpp_options=tuple(sorted(options.items())))
    resp = src.register()
    assert resp is not None and resp.error == lbmc.PREG_RESP_ECONFIG
    assert rig.core.stats().sources == 0


def test_check21_allowed_overrides_and_ack_on_reception(tmp_path: Path) -> None:
    rig = rpp_rig(tmp_path, repository_allow_ack_on_reception=1, repository_type="disk")
    src = rpp_source(rig, ume_repository_size_limit=800, ume_repository_ack_on_reception=1)
    resp = src.register()
    assert resp is not None and resp.error is None and resp.rpp
    config = rig.core.registry.sources[src.reg_id].repository.config
    assert (config.size_limit, config.ack_on_reception, config.rpp) == (800, True, True)


def test_trap12_reregistration_must_repeat_identical_values(tmp_path: Path) -> None:
    rig = rpp_rig(tmp_path)
    src = rpp_source(rig, flight=100)
    src.register()
    other = Source(rig, "t", reg_id=src.reg_id, rpp=True,
                   rpp_options=(("ume_flight_size_bytes", 200),))  # fmt: skip
    assert other.register().error == lbmc.PREG_RESP_ECONFIG  # type: ignore[union-attr]
    spp = Source(rig, "t", reg_id=src.reg_id)
    assert spp.register().error == lbmc.PREG_RESP_ECONFIG  # type: ignore[union-attr]
    assert src.register().old  # type: ignore[union-attr]


def test_check22_trap11_blocking_receiver_stops_acks_one_flight_size_before_full(
    tmp_path: Path,
) -> None:
    rig = rpp_rig(tmp_path, receiver_state_lifetime=60000, source_activity_timeout=300000)
    src = rpp_source(rig, flight=100)
    src.register()
    rcv = Receiver(rig, src, rpp_mode=1, session_id=3)
    rcv.register()
    send(src, *range(5))
    rcv.ack(4)
    assert src.acked() == list(range(5))
    # the receiver stops; 1000-byte limit, 100-byte flight: ACKs stop once 900 bytes are held
    send(src, *range(5, 100))
    acked = src.acked()
    held = rig.core.stats().repositories[0].counters["bytes_held"]
    room = rig.core.registry.sources[src.reg_id].repository.room_bytes
    assert (room, held) == (50, 950)
    assert acked == list(range(5, 94))  # 5..93 held 890 bytes; 94 left exactly 100 of room
    assert src.acks() == []
    # the receiver comes back within its state lifetime, recovers and ACKs: the source unblocks
    back = Receiver(rig, src, rpp_mode=1, session_id=3, port=14600)
    resp = back.register()
    assert resp is not None and resp.old and resp.low_seqnum == 5
    back.request(*range(5, 15))
    assert back.recovered() == list(range(5, 15))
    back.ack(99)
    assert src.acked() == list(range(94, 100))


def test_check22_state_lifetime_expiry_implicitly_acks_and_unblocks(tmp_path: Path) -> None:
    rig = rpp_rig(tmp_path, receiver_state_lifetime=60000)
    src = rpp_source(rig, flight=100)
    src.register()
    rcv = Receiver(rig, src, rpp_mode=1)
    rcv.register()
    send(src, *range(100))
    src.acks()
    assert rig.core.registry.sources[src.reg_id].repository.room_bytes <= 100
    keepalive = compose.Keepalive(lbmc.KA_TYPE_SOURCE, src.transport_idx, src.topic_idx, src.reg_id)
    for _ in range(5):
        rig.advance(10.0)
        rig.control(keepalive.encode(), src.reply_to[0])  # the source stays alive
        assert src.acks() == []
    rig.advance(11.0)
    (gone,) = rig.events_of(ReceiverDeleted)
    assert gone.reason == DeletionReason.STATE_LIFETIME_EXPIRED and gone.reg_id == rcv.reg_id
    assert src.acked()  # what it held is released: stability resumes
    assert rig.core.registry.sources[src.reg_id].repository.room_bytes > 100


def test_check23_non_blocking_receiver_never_blocks_the_source(tmp_path: Path) -> None:
    rig = rpp_rig(tmp_path)
    src = rpp_source(rig, flight=100)
    src.register()
    Receiver(rig, src, rpp_mode=2).register()
    send(src, *range(500))  # five times the repository
    assert src.acked() == list(range(500))
    repo = rig.core.registry.sources[src.reg_id].repository
    assert repo.trail_sqn > 0  # the stopped non-blocking receiver lost the oldest


def test_check24_write_delay_with_fast_receivers_writes_nothing(tmp_path: Path) -> None:
    rig = rpp_rig(
        tmp_path, repository_type="disk", repository_disk_write_delay=1000,
        repository_size_limit=1 << 20,
    )  # fmt: skip
    src = rpp_source(rig, flight=400, ume_write_delay=1000)
    src.register()
    rcv = Receiver(rig, src, rpp_mode=1)
    rcv.register()
    for sqn in range(20):
        send(src, sqn)
        rcv.ack(sqn)
        rig.advance(0.1)
    assert src.acked() == list(range(20))
    assert not [j for j in rig.executor.done if j.kind == IoKind.WRITE]
    assert not rig.events_of(RppWriting)
    send(src, 20, 21)  # the receiver stops: after the delay they are written
    rig.advance(1.5)
    assert [j for j in rig.executor.done if j.kind == IoKind.WRITE]
    assert src.acked() == [20, 21]
    (ev,) = rig.events_of(RppWriting)
    assert ev.reg_id == src.reg_id
    rcv.ack(21)  # consumed: nothing stays on disk
    rig.advance(0.1)
    (empty,) = rig.events_of(RppRepoEmpty)
    assert empty.reg_id == src.reg_id


def test_check25_late_rpp_receiver_starts_after_the_lead(tmp_path: Path) -> None:
    rig = rpp_rig(tmp_path)
    src = rpp_source(rig)
    src.register()
    first = Receiver(rig, src, rpp_mode=1)
    first.register()
    send(src, *range(10))
    late = Receiver(rig, src, rpp_mode=1, port=14700)
    resp = late.register()
    assert resp is not None and (resp.low_seqnum, resp.high_seqnum) == (10, 9)
    first.ack(9)
    # the late receiver owes nothing before its registration: everything is released
    assert rig.core.registry.sources[src.reg_id].repository.frames_held == 0


def test_an_ack_ahead_of_the_store_does_not_release_what_another_receiver_needs(
    tmp_path: Path,
) -> None:
    rig = rpp_rig(tmp_path)
    src = rpp_source(rig)
    src.register()
    fast, slow = Receiver(rig, src, rpp_mode=1), Receiver(rig, src, rpp_mode=1, port=14800)
    fast.register()
    slow.register()
    send(src, *range(10))
    slow.ack(4)
    fast.ack(15)  # ahead of what the Store received
    repo = rig.core.registry.sources[src.reg_id].repository
    assert repo.trail_sqn == 5 and repo.frames_held == 5
    slow.request(5, 9)
    assert slow.recovered() == [5, 9]


def test_rpp_restart_releases_again_what_every_receiver_had_consumed(tmp_path: Path) -> None:
    from tests.store.test_core_lifetimes import restart

    topics = [
        topic_config(
            "t", **{**RPP_TOPIC, "repository_size_limit": 100000}, repository_type="disk",
            source_state_lifetime=600000, receiver_state_lifetime=600000,
        )
    ]  # fmt: skip
    rig = make_rig(tmp_path, topics)
    src = rpp_source(rig, flight=100)
    src.register()
    rcv = Receiver(rig, src, rpp_mode=1, session_id=3)
    rcv.register()
    send(src, *range(20))
    rcv.ack(9)
    second = restart(tmp_path, rig, topics, seed=8)
    (repo,) = second.core.stats().repositories
    assert (repo.counters["trail_sqn"], repo.counters["lead_sqn"]) == (10, 19)


def test_check22_one_read_crossing_the_stop_point_acks_up_to_it(tmp_path: Path) -> None:
    """The frames of one read (receive_frames) that cross the stop point: those before it are
    ACKed, not withheld with the rest of the read (as frame by frame above)."""
    rig = rpp_rig(tmp_path, receiver_state_lifetime=60000, source_activity_timeout=300000)
    src = rpp_source(rig, flight=100)
    src.register()
    rcv = Receiver(rig, src, rpp_mode=1, session_id=3)
    rcv.register()
    frames = [src.frame(sqn, PAYLOAD) for sqn in range(100)]
    rig.core.receive_frames(src.session, frames, rig.now)
    rig.pump()
    assert src.acked() == list(range(89))  # 890 bytes held: the next leaves exactly 100
