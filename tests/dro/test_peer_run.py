"""``PeerLink.send_run`` (a queue run of frames at once) against ``send_data`` per frame while
the link is writable, the loop it replaces in the daemon's peer portal: the same bytes on the
wire, the same batches and counters, the same frames left over when ``max-queue`` fills."""

from __future__ import annotations

import dataclasses
import random

import pytest

from tests.dro.test_peer import BATCH, S1, S2, connect, pair
from umcore.dro import InterestKey, SourceKey
from umcore.dro.peer import PeerLink
from umcore.dro.queue import SQN_MASK

CONFIGS = {
    "no-batching": "",
    "batching": BATCH,
    "small-datagram": "<max-datagram>200</max-datagram>" + BATCH,
    "smart-batch": "<smart-batch>1</smart-batch>" + BATCH,
    "max-queue": "<max-queue>1000</max-queue><max-datagram>500</max-datagram>",
    "max-queue-batching": "<max-queue>1000</max-queue><max-datagram>500</max-datagram>" + BATCH,
}
# (source, first sqn, frame size, frames): runs as a DroCore queue hands them out
RUNS = [
    (S1, 7, 76, 40),
    (S2, SQN_MASK - 2, 64, 9),
    (S2, SQN_MASK - 20, 64, 50),  # a batch built by one join, its sequence numbers wrapping
    (S1, 47, 76, 1),
    (S1, 48, 140, 300),
]


def per_frame(link: PeerLink, key: object, sqn: int, data: bytes, size: int, count: int) -> int:
    """What daemons.tnwgd.peerportal's drain did before send_run: one send_data per frame."""
    taken = 0
    while taken < count and link.writable:
        at = taken * size
        link.send_data(S1 if key is S1 else S2, (sqn + taken) & SQN_MASK, data[at : at + size], 0.0)
        taken += 1
    return taken


def feed(link: PeerLink, use_run: bool) -> tuple[list[int], list[bytes]]:
    """Every run, taking bytes (as the adapter's flush) after each; the frames taken per call
    and everything written."""
    taken: list[int] = []
    out: list[bytes] = []
    for key, sqn, size, count in RUNS:
        data = bytes(i & 0xFF for i in range(size * count))
        left = count
        while left:
            done = count - left
            view = memoryview(data)[done * size :]
            if use_run:
                n = link.send_run(key, (sqn + done) & SQN_MASK, view, size, left, 0.0)
            else:
                n = per_frame(link, key, (sqn + done) & SQN_MASK, bytes(view), size, left)
            taken.append(n)
            left -= n
            out += link.take_bytes()  # the socket drains: writable again
    link.handle_timer(0.06)  # batch-interval (50 ms): the open batch closes
    out += link.take_bytes()
    return taken, out


@pytest.mark.parametrize("config", sorted(CONFIGS))
def test_send_run_is_send_data_per_frame(config: str) -> None:
    results = []
    for use_run in (False, True):
        a, b = pair(CONFIGS[config])
        connect(a, b)
        taken, out = feed(a, use_run)
        b.receive_data(b"".join(out), 0.0)
        frames = [(k, s, bytes(p)) for k, s, p in b.take_frames()]
        results.append((taken, b"".join(out), dataclasses.asdict(a.stats), frames))
    old, new = results
    assert sum(new[0]) == sum(old[0]) == sum(r[3] for r in RUNS)
    if old[2]["data_fragments_dropped_would_block"]:
        # send_data per frame drops while writable when max-queue and a full open batch leave
        # no room for the next frame; send_run closes the batch and leaves the frame to the
        # caller instead (the core's queue keeps it): nothing is lost
        assert config.startswith("max-queue")
        assert new[2]["data_fragments_dropped_would_block"] == 0
        assert [s for _, s, _ in new[3]] == [
            (sqn + i) & SQN_MASK for _, sqn, _, count in RUNS for i in range(count)
        ]
        return
    assert new[1] == old[1]  # byte for byte
    assert new[2] == old[2]  # batches, frames and bytes sent, enqueued maxima, drops
    assert new[3] == old[3] and len(new[3]) == sum(r[3] for r in RUNS)


def test_send_run_stops_when_max_queue_fills_and_sends_nothing_when_down() -> None:
    a, b = pair("<max-queue>1000</max-queue><max-datagram>500</max-datagram>")
    connect(a, b)
    a.take_bytes()
    data = bytes(76 * 100)
    n = a.send_run(S1, 0, data, 76, 100, 0.0)
    assert 0 < n < 100 and not a.writable  # the rest stays with the caller (the core's queue)
    assert a.stats.data_fragments_dropped_would_block == 0
    assert a.send_run(S1, n, data[n * 76 :], 76, 100 - n, 0.0) == 0
    a.receive_connection_lost(0.0)
    assert a.send_run(S1, 0, data, 76, 100, 0.0) == 0


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_received_runs_are_the_frames_in_order_whatever_the_split(seed: int) -> None:
    """receive_data finds runs of one source's messages by their headers; take_frame_runs and
    take_frames hand out the same frames, in order, with the same counters, however the
    bytes were cut and with control messages between the data."""
    rng = random.Random(seed)
    a, b = pair()
    connect(a, b)
    sent: list[tuple[SourceKey, int, bytes]] = []
    sqn = {S1: 0, S2: SQN_MASK - 20}
    for _ in range(30):
        key = rng.choice([S1, S2])
        size = rng.choice([20, 76, 76, 76])
        count = rng.randint(1, 40)
        data = bytes(rng.randrange(256) for _ in range(size * count))
        assert a.send_run(key, sqn[key], data, size, count, 0.0) == count
        sent += [
            (key, (sqn[key] + i) & SQN_MASK, data[i * size : (i + 1) * size]) for i in range(count)
        ]
        sqn[key] = (sqn[key] + count) & SQN_MASK
        if rng.random() < 0.3:
            assert a.send_interest(InterestKey(f"T{len(sent)}"), 1, 0.0)  # control between
    wire = b"".join(a.take_bytes())
    got_runs: list[tuple[SourceKey, bytes]] = []
    got_frames: list[tuple[SourceKey, int, bytes]] = []
    for use_runs in (True, False):
        c, d = pair()
        connect(c, d)
        # d must know the bindings: replay a's bytes (bindings are control messages in them)
        pos = 0
        while pos < len(wire):
            cut = rng.randint(1, 3000)
            d.receive_data(wire[pos : pos + cut], 0.0)
            pos += cut
            if use_runs:
                for key, frames in d.take_frame_runs():
                    assert frames and all(len(f) for f in frames)
                    got_runs += [(key, bytes(f)) for f in frames]
            else:
                got_frames += [(k, s, bytes(f)) for k, s, f in d.take_frames()]
        assert d.up and d.stats.data_msgs_rcvd == len(sent)
        assert d.stats.data_msg_bytes_rcvd == sum(len(f) for _, _, f in sent)
    assert got_frames == sent
    assert got_runs == [(k, f) for k, _, f in sent]
