"""DRO reliable loss, sans-IO with a fake clock: a TCP receiver of a DRO proxy source waits
``transport_tcp_dro_loss_recovery_timeout`` for reordered data before declaring loss, fed
through the real TCP receiver session (its fast paths included)."""

from __future__ import annotations

from umcore.features.droloss import MAX_HELD, DroLossController
from umcore.transport.tcp import LOSS, LOSS_BURST, DeliveryController, TcpReceiverSession
from umcore.wire import lbmc


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


class Sink:
    def __init__(self) -> None:
        self.got: list[tuple[int, bytes]] = []
        self.lost: list[tuple[str, int, int]] = []
        self.deadline_changes = 0

    def deliver(self, sqn: int, payload: bytes | memoryview) -> None:
        self.got.append((sqn, bytes(payload)))

    def loss(self, kind: str, sqn: int, count: int) -> None:
        self.lost.append((kind, sqn, count))

    def changed(self) -> None:
        self.deadline_changes += 1


def make(
    timeout: float = 1.0, max_held: int = MAX_HELD
) -> tuple[TcpReceiverSession, DroLossController, Sink, Clock]:
    clock = Clock()
    sink = Sink()
    dc = DroLossController(
        1,
        "T",
        sink.deliver,
        sink.loss,
        timeout=timeout,
        clock=clock,
        on_deadline=sink.changed,
        max_held=max_held,
    )
    s = TcpReceiverSession(None)
    s.subscribe(dc)
    return s, dc, sink, clock


def data(sqn: int) -> bytes:
    return lbmc.encode_data(1, sqn, b"m%d" % sqn)


def feed(s: TcpReceiverSession, *sqns: int) -> None:
    for q in sqns:
        s.receive_data(data(q))


def test_reordered_data_is_delivered_in_order_without_loss() -> None:
    s, dc, sink, clock = make()
    feed(s, 0, 1, 2)
    clock.now = 0.1
    feed(s, 4, 5)  # 3 is late
    assert [q for q, _ in sink.got] == [0, 1, 2]
    assert dc.deadline == 1.1
    clock.now = 0.5
    feed(s, 3)
    assert [q for q, _ in sink.got] == [0, 1, 2, 3, 4, 5]
    assert sink.lost == [] and dc.deadline is None and dc.recovered == 2
    feed(s, 6)  # the fast path again
    assert sink.got[-1] == (6, b"m6")
    assert dc.started


def test_a_gap_still_open_after_the_timeout_is_loss() -> None:
    s, dc, sink, clock = make(timeout=0.5)
    feed(s, 10, 11)
    clock.now = 1.0
    feed(s, 13, 15)  # 12 and 14 missing
    dc.handle_timer(1.4)
    assert [q for q, _ in sink.got] == [10, 11]  # not yet
    dc.handle_timer(1.5)
    assert sink.lost == [(LOSS, 12, 1), (LOSS, 14, 1)]
    assert [q for q, _ in sink.got] == [10, 11, 13, 15]
    assert dc.deadline is None and dc.started
    feed(s, 12)  # too late: a duplicate now
    assert [q for q, _ in sink.got] == [10, 11, 13, 15]


def test_second_gap_gets_its_own_time() -> None:
    s, dc, sink, clock = make(timeout=1.0)
    feed(s, 0)
    clock.now = 1.0
    feed(s, 2)  # gap at 1 revealed at t=1
    clock.now = 1.8
    feed(s, 4)  # gap at 3 revealed at t=1.8
    feed(s, 1)  # the first gap fills: 1, 2 delivered, 4 waits for 3
    assert [q for q, _ in sink.got] == [0, 1, 2]
    assert dc.deadline == 2.8
    dc.handle_timer(2.8)
    assert sink.lost == [(LOSS, 3, 1)]
    assert [q for q, _ in sink.got] == [0, 1, 2, 4]


def test_tsni_tail_waits_too() -> None:
    s, dc, sink, _clock = make(timeout=1.0)
    feed(s, 0, 1)
    tsni = lbmc.encode(lbmc.LBMCMessage(lbmc.MSG_CONTROL, 0, 0, [lbmc.Tsni(((1, 3),))], b""))
    s.receive_data(tsni)  # the source sent up to 3: 2 and 3 are on their way
    assert sink.lost == [] and dc.deadline == 1.0
    feed(s, 2)
    dc.handle_timer(1.0)
    assert sink.lost == [(LOSS, 3, 1)]


def test_fragments_reassemble_across_the_reordering() -> None:
    s, _dc, sink, _clock = make()
    feed(s, 0)
    parts = [b"ab", b"cd", b"ef"]
    frags = []
    for i, p in enumerate(parts):
        frags.append(
            lbmc.encode(lbmc.LBMCMessage(lbmc.MSG_DATA, 1, 1 + i, [lbmc.Frag(1, 2 * i, 6)], p))
        )
    s.receive_data(frags[0])
    s.receive_data(frags[2])
    s.receive_data(frags[1])
    assert sink.got == [(0, b"m0"), (3, b"abcdef")] and sink.lost == []


def test_hold_bound_gives_up_the_oldest_gap() -> None:
    """The bound is delivery_control_maximum_total_map_entries (UM's order map bound; the
    engine passes the context's value): one more than it held gives up the oldest gap."""
    assert MAX_HELD == 200_000  # UM's default for the option
    limit = 1000
    s, dc, sink, _clock = make(timeout=100.0, max_held=limit)
    feed(s, 0)
    sqns = list(range(2, 2 + limit))
    for i in range(0, len(sqns), 256):  # reads of 256 messages
        s.receive_data(b"".join(data(q) for q in sqns[i : i + 256]))
    assert sink.lost == [] and len(dc.held) == limit  # at the bound: still waiting
    feed(s, 2 + limit)
    assert sink.lost == [(LOSS, 1, 1)]
    assert len(sink.got) == 1 + limit + 1 and not dc.held


def test_hold_bound_zero_is_unbounded_in_count() -> None:
    """0 = unbounded, as UM's option (only MAX_HELD_BYTES still bounds the memory)."""
    s, dc, sink, clock = make(timeout=1.0, max_held=0)
    feed(s, 0)
    s.receive_data(b"".join(data(q) for q in range(2, 3002)))
    assert sink.lost == [] and len(dc.held) == 3000
    dc.handle_timer(clock.now + 1.0)
    assert sink.lost == [(LOSS, 1, 1)] and len(sink.got) == 3001


def test_recovery_runs_behind_a_large_hold_in_order() -> None:
    """The DRO's shape of recovery: a stream of 300-message datagrams (one read each) where
    every fourth datagram is lost and comes back late, repaired, while thousands of messages
    wait behind the first gap; then a second wave of gaps.  Every message is delivered once,
    in order, without loss, the fast path resumes, and the deadline follows the earliest
    message still held.  (Recovering this used to scan everything held once per in-order
    message: 12,000 held x 16,000 messages; bench/droloss.py measures it.)"""
    s, dc, sink, clock = make(timeout=5.0)
    per = 300

    def datagram(d: int) -> None:
        s.receive_data(b"".join(data(q) for q in range(d * per, (d + 1) * per)))

    datagram(0)
    late = [d for d in range(1, 56) if d % 4 == 1]  # 1, 5, ... 53: each followed by others
    for d in range(1, 56):
        clock.now = d * 0.001
        if d not in late:
            datagram(d)
    assert dc.deadline == 0.002 + 5.0  # datagram 2's arrival: the first held
    assert len(dc.held) == (55 - len(late)) * per
    clock.now = 1.0
    for d in late[:-1]:
        datagram(d)
        # the earliest still held: the datagram after the next gap
        nxt = late[late.index(d) + 1] + 1
        assert dc.deadline == nxt * 0.001 + 5.0
    datagram(late[-1])
    assert dc.deadline is None and not dc.held and dc.started
    assert [q for q, _ in sink.got] == list(range(56 * per)) and sink.lost == []
    assert dc.recovered == (55 - len(late)) * per
    clock.now = 2.0  # a second wave, the stream goes on from where it was
    datagram(57)
    datagram(56)
    datagram(58)
    assert [q for q, _ in sink.got][-3 * per :] == list(range(56 * per, 59 * per))
    assert sink.lost == [] and dc.started and dc.deadline is None


def test_zero_timeout_controller_is_the_plain_one() -> None:
    """Timeout 0 is not this class at all (the engine keeps UM's immediate loss): check the
    plain controller declares the gap at once, the baseline the tests above differ from."""
    sink = Sink()
    dc = DeliveryController(1, "T", sink.deliver, sink.loss)
    s = TcpReceiverSession(None)
    s.subscribe(dc)
    feed(s, 0, 2, 1)
    assert sink.lost == [(LOSS, 1, 1)] and [q for q, _ in sink.got] == [0, 2]
    assert LOSS_BURST != LOSS
