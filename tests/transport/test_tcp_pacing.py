"""The TCP source session's connection core (sans-IO, the test's clock): session-id deadlines,
garbage, eviction, and ``transport_tcp_multiple_receiver_behavior`` / ``_send_order``."""

from __future__ import annotations

import random

import pytest

from umcore.engine.options import Options
from umcore.errors import TransportError
from umcore.transport.tcp import (
    LOSS,
    MAX_CONFIRMATION,
    MAX_UNCONFIRMED,
    SESSION_ID_TIMEOUT,
    DeliveryController,
    Pacing,
    SourceConnection,
    SourceConnections,
    TcpReceiverSession,
    TcpSourceSession,
    encode_tcp_sid,
)
from umcore.wire import lbmc

SID = 0x1234ABCD
HELLO = encode_tcp_sid(SID)


class Pipe:
    """A connection's handle: what the adapter would write to its transport, kept."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.chunks: list[bytes] = []

    def write(self, data: bytes) -> None:
        self.chunks.append(data)

    def __repr__(self) -> str:
        return self.name


class Sink:
    def __init__(self) -> None:
        self.data: list[tuple[int, bytes]] = []
        self.loss: list[tuple[str, int, int]] = []

    def deliver(self, sqn: int, payload: bytes | memoryview) -> None:
        self.data.append((sqn, bytes(payload)))

    def lose(self, kind: str, sqn: int, count: int) -> None:
        self.loss.append((kind, sqn, count))


def session(pacing: str = "normal", **kw: object) -> TcpSourceSession:
    return TcpSourceSession(SID, pacing=pacing, **kw)  # type: ignore[arg-type]


def confirmed(peers: SourceConnections, *names: str) -> list[tuple[SourceConnection, Pipe]]:
    out = []
    for name in names:
        pipe = Pipe(name)
        c = peers.accept(0.0, pipe)
        assert peers.receive_data(c, HELLO) is True
        out.append((c, pipe))
    return out


def fan_out(peers: SourceConnections, chunk: bytes | None) -> None:
    """What the listener adapter does with one chunk of the session's output."""
    if chunk is None:
        return
    if peers.random_order:
        peers.shuffle()
    peers.count_dropped(len(chunk))
    for h in peers.targets:
        h.write(chunk)


# ------------------------------------------------------------------ listener bounds
def test_unconfirmed_connections_are_closed_at_the_session_id_deadline() -> None:
    peers = session().peers
    a = peers.accept(10.0, Pipe("a"))
    b = peers.accept(11.0, Pipe("b"))
    good = peers.accept(11.5, Pipe("good"))
    assert peers.next_timer() == 10.0 + SESSION_ID_TIMEOUT
    assert peers.receive_data(good, HELLO[:5]) is False
    assert peers.receive_data(good, HELLO[5:]) is True
    peers.handle_timer(10.0 + SESSION_ID_TIMEOUT - 0.001)
    assert peers.take_closing() == []
    peers.handle_timer(10.0 + SESSION_ID_TIMEOUT)
    assert peers.take_closing() == [a] and a.refusal == "timeout" and good.refusal == ""
    assert peers.next_timer() == 11.0 + SESSION_ID_TIMEOUT
    peers.handle_timer(100.0)
    assert peers.take_closing() == [b]
    assert peers.next_timer() is None  # the confirmed one has no deadline
    assert (peers.stats.timed_out, peers.stats.confirmed, peers.stats.accepted) == (2, 1, 3)
    assert peers.receivers == 1 and peers.waiting == 0
    assert peers.stats.refused == 2


@pytest.mark.parametrize(
    ("first", "why"),
    [
        (b"\x00\x00\x00\x02", "msglen below the LBMC minimum"),
        (b"\x00\x00\xff\xff", "claims a frame longer than a confirmation"),
        (bytes(MAX_CONFIRMATION + 1), "more bytes than a confirmation"),
        (lbmc.encode(lbmc.LBMCMessage(lbmc.MSG_DATA, tidx=0, sqn=0, payload=b"x")), "not TCP-SID"),
        (b"GET / HTTP/1.1\r\nHost: x\r\n\r\n", "another protocol"),
    ],
)
def test_garbage_before_the_confirmation_is_refused_at_once(first: bytes, why: str) -> None:
    peers = session().peers
    c = peers.accept(0.0, Pipe("x"))
    with pytest.raises(TransportError):
        peers.receive_data(c, first)
    assert peers.stats.garbage == 1, why
    assert peers.waiting == 0 and peers.next_timer() is None
    assert peers.take_closing() == []  # the adapter closes it on the error
    peers.receive_lost(c)  # then its connection_lost: nothing more to count
    assert peers.stats.refused == 1


def test_a_stale_session_id_is_counted_apart() -> None:
    peers = session().peers
    c = peers.accept(0.0, Pipe("x"))
    with pytest.raises(TransportError):
        peers.receive_data(c, encode_tcp_sid(SID + 1))
    assert (peers.stats.stale, peers.stats.garbage) == (1, 0)


def test_a_flood_of_waiting_connections_evicts_the_oldest() -> None:
    peers = session().peers
    conns = [peers.accept(i * 0.001, Pipe(str(i))) for i in range(MAX_UNCONFIRMED + 3)]
    assert peers.take_closing() == conns[:3]
    assert {c.refusal for c in conns[:3]} == {"evicted"}
    assert peers.stats.evicted == 3 and peers.waiting == MAX_UNCONFIRMED
    assert peers.next_timer() == conns[3].deadline
    # The newest still confirms; an evicted one's late bytes are ignored.
    assert peers.receive_data(conns[-1], HELLO) is True
    assert peers.receive_data(conns[0], HELLO) is False
    assert peers.receivers == 1


def test_without_session_ids_a_connection_is_a_receiver_at_once() -> None:
    peers = session(use_session_id=False).peers
    pipe = Pipe("old")
    peers.accept(0.0, pipe)
    assert peers.receivers == 1 and peers.next_timer() is None and peers.targets == [pipe]


# ------------------------------------------------------------------ pacing
def test_normal_is_receiver_paced_by_any_confirmed_peer() -> None:
    peers = session("normal").peers
    (_fast, fp), (slow, sp) = confirmed(peers, "fast", "slow")
    peers.receive_paused(slow)
    assert peers.blocked and peers.targets == [fp, sp] and peers.lossy == []
    fan_out(peers, b"chunk")  # a timer's write while blocked: buffered for both
    assert sp.chunks == fp.chunks == [b"chunk"] and peers.stats.dropped_chunks == 0
    peers.receive_resumed(slow)
    assert not peers.blocked
    # A paused connection that goes away unblocks too.
    peers.receive_paused(slow)
    assert peers.blocked
    peers.receive_lost(slow)
    assert not peers.blocked and peers.targets == [fp] and peers.single is fp


def test_source_paced_never_blocks_and_the_slow_one_loses_whole_chunks() -> None:
    src = session("source_paced", batching_minimum_length=1, tsni_interval=5.0)
    tidx = src.add_topic("t")
    peers = src.peers
    (_fast, fp), (slow, sp) = confirmed(peers, "fast", "slow")
    now = 0.0
    for i in range(3):
        fan_out(peers, src.send(tidx, b"m%d" % i, now))
    peers.receive_paused(slow)  # its buffer went above the limit
    assert not peers.blocked and peers.targets == [fp] and peers.lossy == [slow]
    assert peers.single is None  # one-message writes go through the counting path
    for i in range(3, 7):
        fan_out(peers, src.send(tidx, b"m%d" % i, now))
    peers.receive_resumed(slow)
    assert peers.targets == [fp, sp] and peers.lossy == []
    for i in range(7, 9):
        fan_out(peers, src.send(tidx, b"m%d" % i, now))
    assert (slow.dropped_chunks, peers.stats.dropped_chunks, peers.stats.lossy_episodes) == (
        4,
        4,
        1,
    )
    results = {}
    for name, pipe in (("fast", fp), ("slow", sp)):
        rcv = TcpReceiverSession(SID)
        sink = Sink()
        rcv.subscribe(DeliveryController(tidx, "t", sink.deliver, sink.lose))
        for chunk in pipe.chunks:  # whole frames: the stream stays valid LBMC
            rcv.receive_data(chunk)
        results[name] = sink
    assert [sqn for sqn, _ in results["fast"].data] == list(range(9))
    assert results["fast"].loss == []
    slow_sink = results["slow"]
    assert [sqn for sqn, _ in slow_sink.data] == [0, 1, 2, 7, 8]
    assert slow_sink.data[3] == (7, b"m7")
    assert slow_sink.loss == [(LOSS, sqn, 1) for sqn in range(3, 7)]  # UM's unrecoverable loss


def test_source_paced_tail_loss_is_revealed_by_the_tsni() -> None:
    src = session("source_paced", batching_minimum_length=1, tsni_interval=5.0)
    tidx = src.add_topic("t")
    peers = src.peers
    ((slow, sp),) = confirmed(peers, "slow")
    fan_out(peers, src.send(tidx, b"a", 0.0))
    peers.receive_paused(slow)
    fan_out(peers, src.send(tidx, b"b", 0.0))  # lost, and nothing follows
    peers.receive_resumed(slow)
    deadline = src.next_timer()
    assert deadline is not None
    fan_out(peers, src.handle_timer(deadline))  # the TSNI
    rcv = TcpReceiverSession(SID)
    sink = Sink()
    rcv.subscribe(DeliveryController(tidx, "t", sink.deliver, sink.lose))
    for chunk in sp.chunks:
        rcv.receive_data(chunk)
    assert sink.data == [(0, b"a")] and sink.loss == [(LOSS, 1, 1)]


def test_bounded_latency_is_paced_by_the_fastest_receiver() -> None:
    peers = session("bounded_latency").peers
    (a, ap), (b, bp) = confirmed(peers, "a", "b")
    peers.receive_paused(a)
    assert not peers.blocked and peers.targets == [bp] and peers.lossy == [a]
    fan_out(peers, b"1")
    peers.receive_paused(b)  # nobody can take more: blocked, nothing lost
    assert peers.blocked and peers.targets == [ap, bp] and peers.lossy == []
    fan_out(peers, b"2")
    peers.receive_resumed(b)
    assert not peers.blocked and peers.targets == [bp] and peers.lossy == [a]
    fan_out(peers, b"3")
    assert ap.chunks == [b"2"] and bp.chunks == [b"1", b"2", b"3"]
    assert a.dropped_chunks == 2 and peers.stats.lossy_episodes == 2


@pytest.mark.parametrize("pacing", ["normal", "source_paced", "bounded_latency"])
def test_a_waiting_connection_never_paces_the_source(pacing: str) -> None:
    peers = session(pacing).peers
    ((_good, gp),) = confirmed(peers, "good")
    idle = peers.accept(0.0, Pipe("idle"))
    peers.receive_paused(idle)  # not confirmed: nothing is written to it anyway
    assert not peers.blocked and peers.targets == [gp] and peers.single is gp


def test_send_order_serial_and_random() -> None:
    serial = session().peers
    pipes = [p for _, p in confirmed(serial, "a", "b", "c", "d")]
    for _ in range(3):
        fan_out(serial, b"x")
        assert serial.targets == pipes
    rnd = session(random_order=True, rng=random.Random(7)).peers
    pipes = [p for _, p in confirmed(rnd, "a", "b", "c", "d")]
    orders = set()
    for _ in range(20):
        fan_out(rnd, b"x")
        assert sorted(rnd.targets, key=repr) == pipes
        orders.add(tuple(map(repr, rnd.targets)))
    assert len(orders) > 1
    assert all(p.chunks == [b"x"] * 20 for p in pipes)


def test_the_options_reach_the_core_through_the_registry() -> None:
    ctx = Options("context", None)
    default = TcpSourceSession.from_options(7, Options("source", None), ctx)
    assert default.peers.pacing is Pacing.NORMAL and not default.peers.random_order
    src = Options(
        "source",
        {
            "transport_tcp_multiple_receiver_behavior": "source_paced",
            "transport_tcp_multiple_receiver_send_order": "random",
        },
    )
    tcp = TcpSourceSession.from_options(7, src, ctx)
    assert tcp.peers.pacing is Pacing.SOURCE_PACED and tcp.peers.random_order
    bl = Options("source", {"transport_tcp_multiple_receiver_behavior": "bounded_latency"})
    assert TcpSourceSession.from_options(7, bl, ctx).peers.pacing is Pacing.BOUNDED_LATENCY
