"""The LBT data path's fast cases give what the general rules give, on a real source's stream.

Send: :meth:`TopicSender.send_step` (a batch start is a list append; the message that fills
a batch hands it on, the run kept open) drives a source as the engine's ``send_slow`` does; it
must put on the wire exactly the datagrams of a source driven message by message through
:meth:`BatchingSource.send`'s general rules, and the batch after a fast hand-on is due one
batching interval after its own first message.

Receive: a real source core's datagrams (whole runs of one topic, runs split by a wrap of the
sequence number's low byte, other topics and lengths, a topic without DC), delivered in order,
with gaps, duplicates, reordering and RX-flagged retransmissions of the lost ones, give the same
deliveries, losses, counters, NAKs and end state to a receiver fed ``bytes`` (uvloop's
datagrams, used in place) and to one fed memoryviews (the plain asyncio loop's reused buffer,
copied once).
"""

from __future__ import annotations

import random
import struct
from collections.abc import Iterable
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from umcore.transport.batching import Step, TopicSender
from umcore.transport.lbtrm import LbtrmReceiver, LbtrmSource

SID = 0x5EED0002
PORT = 14391
_RX_FLAG_OFFSET = 16  # LBT-RM DATA: flags byte


def _receiver(log: list[object]) -> LbtrmReceiver:
    rcv = LbtrmReceiver(SID, PORT, None, 0.0, random.Random(1))
    for tidx in (0, 1):  # topic 2 has no DC (counted as no-topic)

        def deliver(sqn: int, p: bytes, tidx: int = tidx) -> None:
            log.append(("data", tidx, sqn, bytes(p)))

        def lose(kind: str, sqn: int, n: int, tidx: int = tidx) -> None:
            log.append((kind, tidx, sqn, n))

        dc = rcv.new_dc(tidx, f"t{tidx}", deliver, lose)
        if tidx == 0:  # topic 0 batched (deliver_many), topic 1 message by message

            def many(recs: Iterable[tuple[int, bytes]], count: int, tidx: int = tidx) -> None:
                got = [("data", tidx, s, bytes(p)) for s, p in recs]
                assert len(got) == count
                log.extend(got)

            dc.deliver_many = many
        rcv.subscribe(dc)
    return rcv


def _state(rcv: LbtrmReceiver) -> tuple[object, ...]:
    dcs = tuple(
        (t, dc.expected, dc.high, dict(dc.missing), dc.delivered, dc.started)
        for t, dc in sorted(rcv.dcs.items())
    )
    stats = {name: getattr(rcv.stats, name) for name in rcv.stats.__slots__}
    return (stats, rcv.expected, sorted(rcv.missing), rcv.trail, dcs)


def _source_datagrams(topics: list[int], sizes: list[int]) -> tuple[LbtrmSource, list[bytes]]:
    """A real source core's DATA datagrams: 64-byte messages of topic ``topics[i]`` in turn
    (a run of 27 per datagram while one topic keeps sending), some of other ``sizes``."""
    src = LbtrmSource(SID, PORT, None, None, 0.0)
    for name in ("a", "b", "c"):
        src.add_topic(name)
    out: list[bytes] = []
    now = 0.0
    for i, (tidx, size) in enumerate(zip(topics, sizes, strict=True)):
        now += 0.0001
        src.send(tidx, struct.pack("!I", i) + bytes(size - 4), now)
        out.extend(bytes(d) for d in src.ready)
        src.ready.clear()
    src.handle_timer(now + 1.0)  # the last batch
    out.extend(bytes(d) for d in src.ready)
    src.ready.clear()
    src.outbox.clear()
    return src, out


def _run(arrivals: list[bytes], src: LbtrmSource, lost: set[int]) -> tuple[Any, ...]:
    bytes_log: list[object] = []
    view_log: list[object] = []
    as_bytes, as_view = _receiver(bytes_log), _receiver(view_log)
    now = 1.0

    def both(d: bytes) -> None:
        as_bytes.receive_datagram(d, now)
        as_view.receive_datagram(memoryview(d), now)

    for d in arrivals:
        now += 0.001
        both(d)
    # The lost ones come back as the source's retransmissions (RX flag set).
    if lost:
        src.handle_nak(sorted(lost), ("10.0.0.2", 14360), now)
        for d, _addr in src.outbox:
            if d[0] & 0x0F == 0:
                assert d[_RX_FLAG_OFFSET] & 0x20
                now += 0.001
                both(bytes(d))
        src.outbox.clear()
    for t in (now + 1.0, now + 5.0, now + 30.0):  # NAK and loss timers of what is left
        as_bytes.handle_timer(t)
        as_view.handle_timer(t)
    assert bytes_log == view_log
    assert _state(as_bytes) == _state(as_view)
    assert as_bytes.outbox == as_view.outbox
    return as_bytes, as_view, bytes_log


def test_in_order_whole_runs_deliver_every_message_once_in_order() -> None:
    n = 2000
    src, dgrams = _source_datagrams([0] * n, [64] * n)
    _as_bytes, _as_view, log = _run(dgrams, src, set())
    assert [e[2] for e in log] == list(range(n))


@settings(max_examples=120, deadline=None)
@given(
    # Stretches of (topic, messages, payload size): mostly long 64-byte runs of topic 0 (whole
    # datagrams of one run), some of topic 1, of topic 2 (no DC), of other lengths.
    st.lists(
        st.tuples(
            st.sampled_from([0, 0, 0, 1, 2]),
            st.integers(1, 120),
            st.sampled_from([64, 64, 64, 8, 100]),
        ),
        min_size=1,
        max_size=12,
    ),
    st.data(),
)
def test_gaps_duplicates_reordering_and_retransmissions_give_the_same_outcome(
    stretches: list[tuple[int, int, int]], data: st.DataObject
) -> None:
    topics = [t for t, k, _ in stretches for _ in range(k)]
    sizes = [size for _, k, size in stretches for _ in range(k)]
    src, dgrams = _source_datagrams(topics, sizes)
    sqn_of = {bytes(d): struct.unpack_from("!I", d, 8)[0] for d in dgrams}
    arrivals: list[bytes] = []
    lost: set[int] = set()
    for d in dgrams:
        fate = data.draw(st.sampled_from(["deliver"] * 6 + ["drop", "twice", "late"]))
        if fate == "drop":
            lost.add(sqn_of[d])
        elif fate == "twice":
            arrivals += [d, d]
        elif fate == "late" and arrivals:
            arrivals.insert(data.draw(st.integers(0, len(arrivals) - 1)), d)
        else:
            arrivals.append(d)
    _run(arrivals, src, lost)


# ------------------------------------------------------------------------------- send side
class EngineLikeSender(TopicSender):
    """``send_slow`` as the engine's source runs it on the plain path (umcore.engine.source)."""

    def __init__(self, core: LbtrmSource, topic: str, clock: list[float]) -> None:
        super().__init__(core, topic, 0.0, None)
        self.clock = clock
        self.handed_on = 0

    def send_slow(
        self, data: bytes | memoryview, flush: bool, properties: Any, app_headers: Any
    ) -> Any:
        now = self.clock[0]
        if not flush:
            step = self.send_step(data, now)
            if step is None:
                return self.done
            if step is not Step.UNHANDLED:
                self.handed_on += 1
                return self.done
        self.core.send(self.tidx, data, now, flush)
        return self.done


@settings(max_examples=150, deadline=None)
@given(
    st.lists(
        st.tuples(
            st.sampled_from([0, 0, 0, 0, 0, 1]),
            st.sampled_from([64, 64, 64, 64, 10, 200]),
            st.sampled_from([False] * 30 + [True]),
            st.sampled_from([0.0] * 20 + [0.00001, 0.001, 0.05, 0.15, 0.3]),
        ),
        min_size=1,
        max_size=800,
    )
)
def test_topic_sender_puts_the_same_datagrams_on_the_wire_as_the_general_rules(
    msgs: list[tuple[int, int, bool, float]],
) -> None:
    fast = LbtrmSource(SID, PORT, None, None, 0.0)
    general = LbtrmSource(SID, PORT, None, None, 0.0)
    clock = [0.0]
    senders = [EngineLikeSender(fast, name, clock) for name in ("a", "b")]
    tidxs = [general.add_topic(name) for name in ("a", "b")]
    fast_wire: list[bytes] = []
    general_wire: list[bytes] = []

    def drain() -> None:
        for core, wire in ((fast, fast_wire), (general, general_wire)):
            wire.extend(bytes(d) for d in core.ready)
            wire.extend(bytes(d) for d, _ in core.outbox)
            core.ready.clear()
            core.outbox.clear()

    for i, (topic, size, flush, dt) in enumerate(msgs):
        clock[0] += dt
        now = clock[0]
        for core in (fast, general):
            due = core.next_timer()
            if due is not None and due <= now:
                core.handle_timer(now)
        payload = struct.pack("!I", i) + bytes(size - 4)
        senders[topic].send(payload, flush)
        general.send(tidxs[topic], payload, now, flush)
        drain()
        assert fast_wire == general_wire
        assert fast.next_timer() == general.next_timer()
    for core in (fast, general):
        core.handle_timer(clock[0] + 1.0)
    drain()
    assert fast_wire == general_wire
    if sum(1 for t, s, f, _ in msgs if t == 0 and s == 64 and not f) >= 200:
        assert senders[0].handed_on > 0  # the fast hand-on ran


def test_the_batch_after_a_fast_hand_on_is_due_one_interval_after_its_own_first_message() -> None:
    """27 messages of 64 bytes at t=0 fill a batch (handed on by send_step, the run kept open);
    one more at t=0.1 starts the next batch, due at 0.3 (not at 0.2, the previous one's)."""
    fast = LbtrmSource(SID, PORT, None, None, 0.0)
    general = LbtrmSource(SID, PORT, None, None, 0.0)
    clock = [0.0]
    sender = EngineLikeSender(fast, "a", clock)
    tidx = general.add_topic("a")
    wires: tuple[list[bytes], list[bytes]] = ([], [])

    def send(i: int) -> None:
        payload = struct.pack("!I", i) + bytes(60)
        sender.send(payload)
        general.send(tidx, payload, clock[0])

    def timers(now: float) -> None:
        for core, wire in zip((fast, general), wires, strict=True):
            core.handle_timer(now)
            wire.extend(bytes(d) for d in core.ready)
            core.ready.clear()

    for i in range(27):
        send(i)
    assert sender.handed_on == 1
    clock[0] = 0.1
    send(27)
    timers(0.25)
    assert wires[0] == wires[1] and len(wires[1]) == 1  # the second batch is not due yet
    timers(0.31)
    assert wires[0] == wires[1] and len(wires[1]) == 2
