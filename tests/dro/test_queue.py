"""Per-portal queues: bounded by max-queue, drops counted, never blocking the other portals."""

from __future__ import annotations

from tests.dro.kit import config, otid
from umcore.dro import DroCore, ForwardedFrame, PortalQueue, SourceAdvert, SourceKey


def frame(n: int, size: int) -> ForwardedFrame:
    return ForwardedFrame(otid(1), "T", n, memoryview(bytes(size)))


def test_queue_refuses_what_does_not_fit_and_counts_it() -> None:
    q = PortalQueue(1000)
    assert all(q.offer(frame(i, 300)) for i in range(3))
    assert not q.offer(frame(3, 300))  # 1200 > 1000
    assert q.offer(frame(4, 100))  # exactly 1000
    assert (q.dropped_would_block, q.dropped_bytes) == (1, 300)
    assert (q.bytes_enqueued, q.bytes_enqueued_max, len(q)) == (1000, 1000, 4)
    assert [f.sqn for f in q.take(2)] == [0, 1]
    assert q.bytes_enqueued == 400
    assert q.peek() is not None and q.pop().sqn == 2
    assert [f.sqn for f in q.take()] == [4]
    assert q.bytes_enqueued == 0 and q.bytes_enqueued_max == 1000


def test_a_full_portal_drops_without_blocking_the_others() -> None:
    cfg = config(
        [("E1", 1, 1), ("E2", 2, 1), ("E3", 3, 1)],
        portal_extra={"E2": "<max-queue>2000</max-queue>"},
    )
    core = DroCore(cfg, 1)
    for i, p in enumerate(("E1", "E2", "E3")):
        core.receive_portal_up(p, 0.0, address=(f"10.0.0.{i + 1}", 14000))
    core.receive_tqr("E2", "T", 0.0)
    core.receive_tqr("E3", "T", 0.0)
    sk = SourceKey(otid(9), "T")
    core.receive_source("E1", SourceAdvert(sk), 0.0)
    payload = memoryview(bytes(500))
    results = [core.receive_frame("E1", sk, i, payload) for i in range(10)]
    assert all(results)  # E3 took every frame
    e2, e3 = core.queue("E2"), core.queue("E3")
    assert (len(e2), e2.dropped_would_block, e2.bytes_enqueued_max) == (4, 6, 2000)
    assert (len(e3), e3.dropped_would_block) == (10, 0)
    # the slow portal drains; the next frames fit again
    assert [f.sqn for f in core.take_frames("E2")] == [0, 1, 2, 3]
    assert core.receive_frame("E1", sk, 10, payload)
    assert [f.sqn for f in core.take_frames("E2")] == [10]
    # forwarded frames keep the originating sequence numbers and the very buffer
    frames = core.take_frames("E3")
    assert [f.sqn for f in frames] == list(range(11))
    assert frames[0].data is payload
