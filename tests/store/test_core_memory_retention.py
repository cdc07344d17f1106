"""What a memory repository keeps for a receiver that went away and came back (issue 16).

The scenario of the report: a receiver with a Session ID consumes 0..29 and leaves, the source
sends 30..59, the receiver returns (OLD, low 30) and asks for 30..59.  A memory repository
keeps, per UM, the newest ``repository-size-threshold`` bytes (default 1024: a few dozen small
messages) and deletes the oldest above it at reception; nothing else releases an SPP message --
not stability, not a receiver's deregistration or expiry.  So at the default the Store serves
only the newest ones and logs that the rest are gone; with a threshold that fits the backlog it
serves all of it.
"""

from __future__ import annotations

from pathlib import Path

from tests.store.corekit import Receiver, Rig, Source, make_rig, topic_config
from umcore.store import compose
from umcore.store.events import DeletionReason, ReceiverDeleted, ReceiverDeregistered
from umcore.store.repository import OVERHEAD, Repository

BIG = 1 << 24
DEFAULT_THRESHOLD = 1024  # repository-size-threshold's documented default
SESSION = 0x4242


def _away_and_back(rig: Rig) -> tuple[Source, Receiver, Repository]:
    """0..29 consumed, the receiver gone, 30..59 sent and stable; the receiver back, OLD at 30."""
    src = Source(rig, "t")
    src.register()
    rcv = Receiver(rig, src, session_id=SESSION)
    rcv.register()
    src.send(*range(30))
    rcv.ack(29)
    src.send(*range(30, 60))
    assert src.acked() == list(range(60))  # every message was stable when it arrived
    back = Receiver(rig, src, session_id=SESSION, port=14600)
    resp = back.register()
    assert resp is not None and resp.old and resp.reg_id == rcv.reg_id
    assert (resp.low_seqnum, resp.high_seqnum) == (30, 59)  # its last ACK + 1 (UM's rule)
    return src, back, rig.core.registry.sources[src.reg_id].repository


def _newest_fitting(src: Source, lead: int, threshold: int) -> int:
    """The oldest sqn of the newest run of messages whose accounted bytes (frame + the Store's
    per-message overhead) stay within ``threshold``."""
    total, sqn = 0, lead
    while sqn >= 0 and total + len(src.frame(sqn)) + OVERHEAD <= threshold:
        total += len(src.frame(sqn)) + OVERHEAD
        sqn -= 1
    return sqn + 1


def test_issue16_default_memory_repository_serves_the_newest_kilobyte_and_says_so(
    tmp_path: Path,
) -> None:
    rig = make_rig(tmp_path, [topic_config("t", repository_type="memory")])
    src, back, repo = _away_and_back(rig)
    trail = _newest_fitting(src, 59, DEFAULT_THRESHOLD)
    assert 30 < trail < 59  # the threshold released part of the receiver's backlog
    assert repo.trail_sqn == trail and repo.frames_held == 60 - trail
    assert repo.mem_bytes <= DEFAULT_THRESHOLD and repo.threshold_releases == trail
    (warning,) = [e for e in rig.events if "resumes at sqn" in e.text]
    assert f"resumes at sqn 30, but sqns 30..{trail - 1} are before" in warning.text
    assert "repository-size-threshold 1024 bytes" in warning.text

    back.request(*range(30, 60))
    got = back.retransmissions()
    assert [r.sqn for r in got] == list(range(trail, 60))  # what it holds, each once
    assert [r.frame for r in got] == [src.frame(s) for s in range(trail, 60)]
    c = rig.core.stats().counters
    assert c["retransmissions"] == 60 - trail
    assert c["rx_not_held"] == c["rx_released"] == trail - 30


def test_memory_repository_with_room_serves_the_returning_receiver_everything(
    tmp_path: Path,
) -> None:
    rig = make_rig(
        tmp_path, [topic_config("t", repository_type="memory", repository_size_threshold=BIG)]
    )
    src, back, repo = _away_and_back(rig)
    assert repo.trail_sqn == 0 and repo.frames_held == 60
    assert not [e for e in rig.events if "resumes at sqn" in e.text]
    back.request(*range(30, 60))
    got = back.retransmissions()
    assert [r.sqn for r in got] == list(range(30, 60))
    assert [r.frame for r in got] == [src.frame(s) for s in range(30, 60)]
    c = rig.core.stats().counters
    assert (c["retransmissions"], c["rx_not_held"], c["rx_released"]) == (30, 0, 0)


def test_spp_memory_releases_nothing_on_deregistration_or_expiry(tmp_path: Path) -> None:
    rig = make_rig(
        tmp_path,
        [
            topic_config(
                "t", repository_type="memory", repository_size_threshold=BIG,
                receiver_activity_timeout=1000, receiver_state_lifetime=2000,
                source_activity_timeout=0,
            )
        ],
    )  # fmt: skip
    src = Source(rig, "t")
    src.register()
    leaving = Receiver(rig, src, session_id=1)
    expiring = Receiver(rig, src, session_id=2, port=14393)
    leaving.register()
    expiring.register()
    src.send(*range(40))
    leaving.ack(39)
    expiring.ack(39)
    repo = rig.core.registry.sources[src.reg_id].repository
    assert src.acked() == list(range(40)) and repo.frames_held == 40  # stable, still held
    d = compose.Deregistration(False, leaving.reg_id, 1, 0, leaving.reply_to, src.reg_id)
    rig.control(d.encode(), leaving.reply_to[0])
    assert rig.events_of(ReceiverDeregistered)
    rig.advance(4.0)  # past the other one's activity timeout and state lifetime
    (gone,) = rig.events_of(ReceiverDeleted)
    assert gone.reason == DeletionReason.STATE_LIFETIME_EXPIRED
    assert src.reg_id in rig.core.registry.sources
    assert (repo.trail_sqn, repo.lead_sqn, repo.frames_held) == (0, 39, 40)
    late = Receiver(rig, src, port=14601)
    resp = late.register()
    assert resp is not None and not resp.old and resp.low_seqnum == 0
    late.request(*range(40))
    assert late.recovered() == list(range(40))
