"""The TCP latency paths: a joined session's one-message reads, and ``send_nowait(flush=True)``.

**Receive.**  A read holding exactly one plain data message in sequence is delivered by the
session core's single-message fast path (:meth:`TcpReceiverSession.receive_data`) straight to
the topic's fan-out (:meth:`umcore.engine.receive.Fanout.deliver`), which hands it to a lone
receiver's callback in a recycled message.  The tests feed crafted reads to a real joined
connection (:class:`umcore.aio.tcp.ReceiverConnection`, as the loop would) and check what the
application and the statistics see: every message delivered once and in order with its
fields, a message recycled only when nobody kept it, the cases the fast paths do not cover
(first bytes, a gap, a duplicate, an unknown topic index, several messages or part of one in a
read, two receivers, a receiver without callback, recovery) delivered correctly all the same,
a raising callback counted, sequence numbers wrapping at 2**32, and the counts -- the
receiver's ``messages``, the core's ``messages_received`` and ``bytes_received``, the DC's
``delivered`` and what monitoring reports -- exact after every read, across receiver changes.

**Send.**  ``send_nowait(flush=True)`` of a plain message takes the core's single-message path
(``send_one``, written by the session).  On the harness (:mod:`tests.api.harness`: a real core
and session, the test's clock, a capturing writer) it must write exactly the bytes, and leave
exactly the counters, sequence numbers and TSNI deadline, that the core's general rules
(``send(..., flush=True)``) give for the same messages at the same times, be refused with
WouldBlock while the session is blocked, and take any buffer and any length.
"""

from __future__ import annotations

import asyncio
import struct
from typing import Any

import pytest

from tests.api.conftest import WAIT, wait_for
from tests.api.harness import make_sources
from umcore.api import Context, Message
from umcore.api import message as m
from umcore.errors import UMError, WouldBlock
from umcore.features.latejoin import LateJoinConfig
from umcore.features.recovery import DELIVER_DATA, TopicRecovery
from umcore.monitor.automatic import sample_context
from umcore.transport.tcp import MAX_LBMC_MESSAGE, TcpSourceSession

_HEAD = struct.Struct("!BBHII")  # LBMC data header: ver/type, next header, msglen, tidx, sqn


def frame(tidx: int, sqn: int, payload: bytes) -> bytes:
    return _HEAD.pack(0, 0, 12 + len(payload), tidx, sqn) + payload


async def _joined(b: Context, src: Any) -> tuple[Any, Any]:
    """The joined session of ``b`` to ``src``'s transport session, and its connection."""
    await wait_for(lambda: src.receivers >= 1 and any(js.conn for js in b.joined.values()))
    js = next(iter(b.joined.values()))
    await wait_for(lambda: js.conn.transport is not None)
    return js, js.conn


class _Counts:
    """The receive counts of one topic of a joined session, checked together."""

    def __init__(self, ctx: Context, js: Any, tidx: int) -> None:
        self.ctx = ctx
        self.js = js
        self.tidx = tidx

    def sample(self) -> dict[str, int]:
        """The session's transport statistics as automatic monitoring reports them."""
        found = [
            t.fields
            for t in sample_context(self.ctx).transports
            if t.direction == "receiver" and t.source_string == self.js.source_string
        ]
        assert len(found) == 1
        return found[0]

    def check(self, *, received: int, nbytes: int, delivered: int) -> None:
        st = self.js.core.stats
        assert (st.messages_received, st.bytes_received) == (received, nbytes)
        assert self.js.fanouts[self.tidx].dc.delivered == delivered
        fields = self.sample()
        assert (fields["lbm_msgs_rcved"], fields["bytes_rcved"]) == (received, nbytes)


async def test_one_message_reads_are_delivered_and_counted_exactly(opts: None) -> None:
    got: list[Message] = []
    async with await Context.create(opts) as a, await Context.create(opts) as b:
        rcv = await b.create_receiver("lat", got.append)
        src = await a.create_source("lat")
        js, conn = await _joined(b, src)
        t = src.tidx
        counts = _Counts(b, js, t)
        first = frame(t, 0, b"first")
        conn.data_received(first)  # first bytes: BOS, then the message
        assert [x.type for x in got] == [m.MSG_BOS, m.MSG_DATA]
        nbytes = len(first)
        counts.check(received=1, nbytes=nbytes, delivered=1)
        for sqn in range(1, 101):
            one = frame(t, sqn, sqn.to_bytes(4, "big") * 3)
            conn.data_received(one)
            nbytes += len(one)
            assert rcv.messages == sqn + 1  # exact after every read
            counts.check(received=sqn + 1, nbytes=nbytes, delivered=sqn + 1)
        data = [x for x in got if x.type == m.MSG_DATA]
        assert [x.sequence_number for x in data] == list(range(101))
        assert [x.data for x in data[1:]] == [s.to_bytes(4, "big") * 3 for s in range(1, 101)]
        assert all(type(x.data) is bytes for x in data)
        assert {(x.topic, x.source, x.fragment_info) for x in data} == {
            ("lat", js.source_string, None)
        }
        two = frame(t, 101, b"x") + frame(t, 102, b"y")  # two messages in one read
        conn.data_received(two)
        nbytes += len(two)
        assert rcv.messages == 103 and [x.data for x in got[-2:]] == [b"x", b"y"]
        counts.check(received=103, nbytes=nbytes, delivered=103)
        assert js.fanouts[t].dc.expected == 103
        await rcv.close()
        await src.close()


async def test_one_message_reads_recycle_only_messages_nobody_kept(opts: None) -> None:
    """A lone callback is handed the same object again while it keeps nothing, a new one after
    it kept one; kept messages keep their contents."""
    seen: list[tuple[int, int, bytes, str]] = []
    kept: list[Message] = []

    def cb(msg: Message) -> None:
        if msg.type != m.MSG_DATA:
            return
        seen.append((id(msg), msg.sequence_number, msg.data, msg.topic))
        if msg.sequence_number in (5, 6, 9):
            kept.append(msg)
        msg.topic = "scribbled"  # on a message it may drop: not carried over

    async with await Context.create(opts) as a, await Context.create(opts) as b:
        rcv = await b.create_receiver("lat", cb)
        src = await a.create_source("lat")
        _js, conn = await _joined(b, src)
        t = src.tidx
        conn.data_received(frame(t, 0, b"first"))
        for sqn in range(1, 13):
            conn.data_received(frame(t, sqn, bytes([sqn]) * 4))
        assert [(q, d, tp) for _i, q, d, tp in seen] == [(0, b"first", "lat")] + [
            (q, bytes([q]) * 4, "lat") for q in range(1, 13)
        ]
        ids = [i for i, *_ in seen[1:]]  # sqn 1..12
        assert len(set(ids[0:5])) == 1  # 1-5: one object, recycled
        assert ids[5] != ids[4] and ids[6] != ids[5]  # after 5 and 6 were kept: new ones
        assert len(set(ids[6:9])) == 1 and ids[9] != ids[8]  # 7-9 one object, 10 after 9
        assert [(x.sequence_number, x.data, x.topic) for x in kept] == [
            (q, bytes([q]) * 4, "scribbled") for q in (5, 6, 9)
        ]
        assert rcv.messages == 13
        await rcv.close()
        await src.close()


async def test_reads_off_the_fast_path_gap_duplicate_unknown_topic_and_split(opts: None) -> None:
    got: list[Message] = []
    async with await Context.create(opts) as a, await Context.create(opts) as b:
        rcv = await b.create_receiver("gap", got.append)
        src = await a.create_source("gap")
        js, conn = await _joined(b, src)
        t = src.tidx
        counts = _Counts(b, js, t)
        reads = [frame(t, 0, b"a"), frame(t, 1, b"b")]
        for r in reads:
            conn.data_received(r)
        gap = frame(t, 4, b"e")  # 2 and 3 lost
        conn.data_received(gap)
        assert [(x.type, x.sequence_number) for x in got[-3:]] == [
            (m.MSG_UNRECOVERABLE_LOSS, 2),
            (m.MSG_UNRECOVERABLE_LOSS, 3),
            (m.MSG_DATA, 4),
        ]
        assert rcv.unrecoverable == 2 and b.fragments_unrecoverably_lost == 2
        assert sample_context(b).context["fragments_unrecoverably_lost"] == 2
        dup = frame(t, 4, b"dup")  # a duplicate: dropped
        conn.data_received(dup)
        assert got[-1].data == b"e"
        no_topic = frame(t + 7, 0, b"x")  # a topic index nobody subscribed to
        conn.data_received(no_topic)
        assert js.core.stats.messages_no_topic == 1
        assert counts.sample()["lbm_msgs_no_topic_rcved"] == 1
        pair = frame(t, 5, b"f") + frame(t, 6, b"g")
        conn.data_received(pair)
        assert [x.data for x in got[-2:]] == [b"f", b"g"]
        whole = frame(t, 7, b"split")
        conn.data_received(whole[:5])  # part of a message, then the rest
        assert got[-1].data == b"g"
        conn.data_received(whole[5:])
        assert got[-1].data == b"split"
        last = frame(t, 8, b"h")  # one message in sequence again
        conn.data_received(last)
        assert got[-1].data == b"h"
        assert [x.sequence_number for x in got if x.type == m.MSG_DATA] == [0, 1, 4, 5, 6, 7, 8]
        assert rcv.messages == 7
        nbytes = sum(map(len, [*reads, gap, dup, no_topic, pair, whole, last]))
        counts.check(received=9, nbytes=nbytes, delivered=7)
        await rcv.close()
        await src.close()


async def test_two_receivers_and_a_receiver_without_callback(opts: None) -> None:
    one: list[Message] = []
    two: list[Message] = []
    async with await Context.create(opts) as a, await Context.create(opts) as b:
        r1 = await b.create_receiver("two", one.append)
        src = await a.create_source("two")
        js, conn = await _joined(b, src)
        t = src.tidx
        conn.data_received(frame(t, 0, b"a"))
        r2 = await b.create_receiver("two", two.append)
        await wait_for(lambda: len(js.fanouts[t].receivers) == 2)
        conn.data_received(frame(t, 1, b"b"))  # two receivers: both get it, one object
        assert [x.data for x in one if x.type == m.MSG_DATA] == [b"a", b"b"]
        assert [x.data for x in two if x.type == m.MSG_DATA] == [b"b"]
        assert one[-1] is two[-1]
        assert (r1.messages, r2.messages) == (2, 1)
        await r2.close()
        conn.data_received(frame(t, 2, b"c"))  # one receiver again
        assert [x.data for x in one][-1] == b"c" and [x.data for x in two][-1] == b"b"
        assert (r1.messages, r2.messages) == (3, 1)
        # One receiver left, without callback: the async iterator gets the message.
        r3 = await b.create_receiver("two")
        await r1.close()
        assert js.fanouts[t].receivers == [r3] and not conn.closed
        conn.data_received(frame(t, 3, b"d"))
        async with asyncio.timeout(WAIT):
            msg = await r3.get()
            while msg.type != m.MSG_DATA:
                msg = await r3.get()
        assert (msg.data, msg.sequence_number, r3.messages) == (b"d", 3, 1)
        assert [x.data for x in one][-1] == b"c" and r1.messages == 3
        assert js.fanouts[t].dc.delivered == 4
        await r3.close()
        await src.close()


async def test_one_message_read_counts_a_raising_callback(opts: None) -> None:
    got: list[int] = []

    def cb(msg: Message) -> None:
        if msg.type == m.MSG_DATA:
            got.append(msg.sequence_number)
            if msg.data == b"boom":
                raise RuntimeError("application bug")

    async with await Context.create(opts) as a, await Context.create(opts) as b:
        rcv = await b.create_receiver("err", cb)
        src = await a.create_source("err")
        js, conn = await _joined(b, src)
        t = src.tidx
        conn.data_received(frame(t, 0, b"ok"))
        conn.data_received(frame(t, 1, b"boom"))  # counted, not propagated
        conn.data_received(frame(t, 2, b"ok"))
        assert got == [0, 1, 2]
        assert rcv.callback_errors == 1 and rcv.messages == 3
        assert js.fanouts[t].dc.expected == 3 and js.core.stats.messages_received == 3
        assert conn.transport is not None and not conn.closed
        await rcv.close()
        await src.close()


class _Recovery:
    """Late join / OTR state as a fan-out's ``recovery`` (the surface the features layer
    uses): holds live messages until told to release them."""

    def __init__(self) -> None:
        self.live: list[tuple[int, bytes]] = []
        self.release = False
        self.recovering = False
        self.requests_pending = False

    def pass_live(self, sqn: int) -> bool:
        return False  # every message through on_live

    def on_live(self, sqn: int, payload: bytes, meta: Any, now: float) -> list[Any]:
        self.live.append((sqn, payload))
        if not self.release:
            return []
        out = [(DELIVER_DATA, s, p, 0, (), 0) for s, p in self.live]
        self.live.clear()
        return out


async def test_one_message_reads_go_through_recovery(opts: None) -> None:
    """A topic with late join / OTR state hands live data to the features layer, which
    decides when the application gets it."""
    got: list[Message] = []
    async with await Context.create(opts) as a, await Context.create(opts) as b:
        rcv = await b.create_receiver("rec", got.append)
        src = await a.create_source("rec")
        js, conn = await _joined(b, src)
        t = src.tidx
        conn.data_received(frame(t, 0, b"a"))
        f = js.fanouts[t]
        rec = _Recovery()
        f.set_recovery(rec)  # as fanout_created does with a TopicRecovery
        assert f.fast_cb is None
        try:
            conn.data_received(frame(t, 1, b"b"))
            assert rec.live == [(1, b"b")]
            assert [x.data for x in got if x.type == m.MSG_DATA] == [b"a"]
            assert rcv.messages == 1
            rec.release = True
            conn.data_received(frame(t, 2, b"c"))
            assert [x.data for x in got if x.type == m.MSG_DATA] == [b"a", b"b", b"c"]
            assert rcv.messages == 3 and f.dc.delivered == 3
        finally:
            f.set_recovery(None)
        assert f.fast_cb is not None
        conn.data_received(frame(t, 3, b"d"))
        assert [x.sequence_number for x in got if x.type == m.MSG_DATA] == [0, 1, 2, 3]
        assert rcv.messages == 4
        await rcv.close()
        await src.close()


async def test_runs_go_through_recovery_in_order(opts: None) -> None:
    """Reads of ten messages (runs: Fanout.deliver_many) of a topic with recovery state:
    cached while late join waits, delivered in order once it is over, then passed straight
    through (features.live_many), every message counted once."""
    got: list[Message] = []
    async with await Context.create(opts) as a, await Context.create(opts) as b:
        rcv = await b.create_receiver("runs", got.append)
        src = await a.create_source("runs")
        js, conn = await _joined(b, src)
        t = src.tidx
        conn.data_received(frame(t, 0, b"p00"))
        f = js.fanouts[t]
        rec = TopicRecovery(
            transport_idx=0, topic_idx=t, request_idx=1, reply_to=("127.0.0.1", 1),
            late_join=LateJoinConfig(),
        )  # fmt: skip
        rec.await_range()  # a persistent receiver's: live messages wait for the range
        f.set_recovery(rec)

        def data() -> list[bytes]:
            return [x.data for x in got if x.type == m.MSG_DATA]

        try:
            conn.data_received(b"".join(frame(t, k, b"p%02d" % k) for k in range(1, 11)))
            assert data() == [b"p00"] and len(rec.cache) == 10
            b.features.deliver(f, rec.abandon())  # no range after all: the cache, in order
            conn.data_received(b"".join(frame(t, k, b"p%02d" % k) for k in range(11, 21)))
            assert data() == [b"p%02d" % k for k in range(21)]
            assert [x.sequence_number for x in got if x.type == m.MSG_DATA] == list(range(21))
            assert rcv.messages == 21 and rec.next == 21 and not rec.cache
        finally:
            f.set_recovery(None)
        await rcv.close()
        await src.close()


async def test_one_message_reads_wrap_sequence_numbers_at_2_32(opts: None) -> None:
    got: list[Message] = []
    async with await Context.create(opts) as a, await Context.create(opts) as b:
        rcv = await b.create_receiver("wrap", got.append)
        src = await a.create_source("wrap")
        js, conn = await _joined(b, src)
        t = src.tidx
        conn.data_received(frame(t, 0xFFFFFFFE, b"a"))  # first bytes
        conn.data_received(frame(t, 0xFFFFFFFF, b"b"))
        conn.data_received(frame(t, 0, b"c"))
        conn.data_received(frame(t, 1, b"d"))
        data = [(x.sequence_number, x.data) for x in got if x.type == m.MSG_DATA]
        assert data == [(0xFFFFFFFE, b"a"), (0xFFFFFFFF, b"b"), (0, b"c"), (1, b"d")]
        assert js.fanouts[t].dc.expected == 2 and rcv.unrecoverable == 0
        await rcv.close()
        await src.close()


async def test_counts_survive_receiver_changes_and_reach_monitoring(opts: None) -> None:
    got1: list[Message] = []
    got2: list[Message] = []
    async with await Context.create(opts) as a, await Context.create(opts) as b:
        r1 = await b.create_receiver("cnt", got1.append)
        src = await a.create_source("cnt")
        js, conn = await _joined(b, src)
        t = src.tidx
        counts = _Counts(b, js, t)
        for sqn in range(10):
            conn.data_received(frame(t, sqn, b"m"))
        assert r1.messages == 10
        counts.check(received=10, nbytes=10 * 13, delivered=10)
        r2 = await b.create_receiver("cnt", got2.append)  # two receivers
        assert js.fanouts[t].fast_r is None
        for sqn in range(10, 15):
            conn.data_received(frame(t, sqn, b"n"))
        assert (r1.messages, r2.messages) == (15, 5)
        counts.check(received=15, nbytes=15 * 13, delivered=15)
        await r2.close()  # one receiver again
        assert js.fanouts[t].fast_r is r1
        for sqn in range(15, 20):
            conn.data_received(frame(t, sqn, b"o"))
        assert (r1.messages, r2.messages) == (20, 5)
        counts.check(received=20, nbytes=20 * 13, delivered=20)
        assert len([x for x in got1 if x.type == m.MSG_DATA]) == 20
        assert len([x for x in got2 if x.type == m.MSG_DATA]) == 5
        await r1.close()
        await src.close()


async def test_counts_stay_exact_over_many_reads_of_changing_lengths(opts: None) -> None:
    async with await Context.create(opts) as a, await Context.create(opts) as b:
        rcv = await b.create_receiver("many", lambda msg: None)
        src = await a.create_source("many")
        js, conn = await _joined(b, src)
        t = src.tidx
        counts = _Counts(b, js, t)
        n = 1200
        nbytes = 0
        for sqn in range(n):
            one = frame(t, sqn, b"z" * (1 + (sqn // 100) % 3))  # the length changes now and then
            conn.data_received(one)
            nbytes += len(one)
            if sqn % 97 == 0:
                counts.check(received=sqn + 1, nbytes=nbytes, delivered=sqn + 1)
                assert rcv.messages == sqn + 1
        counts.check(received=n, nbytes=nbytes, delivered=n)
        assert rcv.messages == n
        await rcv.close()
        await src.close()


# ------------------------------------------------------------------------------------- send
def _reference(topic: str) -> tuple[TcpSourceSession, int]:
    """A core of the same session id and options, to be driven by the general rules."""
    ref = TcpSourceSession(0x1234ABCD)
    return ref, ref.add_topic(topic, 100.0)


def _same_state(core: TcpSourceSession, ref: TcpSourceSession, tidx: int) -> None:
    a, b = core.stats, ref.stats
    assert (a.messages_sent, a.datagrams_sent, a.bytes_sent, a.fragments_sent) == (
        b.messages_sent,
        b.datagrams_sent,
        b.bytes_sent,
        b.fragments_sent,
    )
    assert core.next_sequence_number(tidx) == ref.next_sequence_number(tidx)
    assert core.next_timer() == ref.next_timer()  # the TSNI check (and batch deadline) alike
    assert core.batch_len == ref.batch_len


async def test_flushed_send_nowait_writes_what_the_general_path_would() -> None:
    h = await make_sources("snd")
    (src,) = h.sources
    core, loop = h.core, h.loop
    ref, rt = _reference("snd")
    assert rt == src.tidx
    expected: list[bytes] = []

    def general(payload: Any, flush: bool = True) -> None:
        out = ref.send(rt, payload, loop.now, flush)
        if out is not None:
            expected.append(out)

    payloads: list[Any] = [
        b"one",
        memoryview(b"two!"),  # any buffer
        bytearray(b"thr3"),
        b"four",  # the same length again
        b"a longer payload",  # another length
        b"x" * 16,
        b"",
        b"",
        b"abcd",  # alternating lengths
        b"abcdefgh",
        b"abcd",
    ]
    for i, p in enumerate(payloads):
        loop.now = 100.0 + 0.001 * i
        if i % 2:
            src.send_nowait(p, True)  # flush passed positionally: the same path
        else:
            src.send_nowait(p, flush=True)
        general(p)
        assert h.writer.chunks == expected
        _same_state(core, ref, rt)
        assert h.deadline == core.next_timer() == pytest.approx(100.0 + 5.0)  # the TSNI check
    assert expected[0] == frame(src.tidx, 0, b"one")
    # A batched message first: the flush sends both, in order, in one write.
    loop.now = 101.0
    src.send(b"batched")
    general(b"batched", False)
    assert len(h.writer.chunks) == len(payloads)
    src.send_nowait(b"flushed", flush=True)
    general(b"flushed")
    assert h.writer.chunks[-1] == frame(src.tidx, 11, b"batched") + frame(src.tidx, 12, b"flushed")
    assert h.writer.chunks == expected
    _same_state(core, ref, rt)
    # Bigger than one LBMC message can carry: UM fragmentation, as the general path does it.
    big = bytes(MAX_LBMC_MESSAGE)
    src.send_nowait(big, flush=True)
    general(big)
    assert h.writer.chunks == expected and core.stats.fragments_sent > 0
    _same_state(core, ref, rt)
    # The timer runs: both cores send the same TSNI.
    loop.advance(110.0)
    out = ref.handle_timer(106.0)
    assert out is not None and h.writer.chunks[-1] == out
    await src.close()
    assert not src.plain
    with pytest.raises(UMError, match="closed"):
        src.send_nowait(b"late", flush=True)


async def test_flushed_send_nowait_refused_while_blocked() -> None:
    h = await make_sources("blk")
    (src,) = h.sources
    w = h.writer
    src.send_nowait(b"before", flush=True)
    w.paused = True  # as a receiver connection over its buffer limit makes it
    sqn = src.next_sequence_number()
    with pytest.raises(WouldBlock):
        src.send_nowait(b"x", flush=True)
    with pytest.raises(WouldBlock):
        src.send_nowait(memoryview(b"y"), flush=True)
    assert src.next_sequence_number() == sqn and h.core.batch_len == 0
    assert len(w.chunks) == 1 and src.wants_wakeup and h.engine.send_would_block == 2
    assert h.events == []
    w.unblock()
    assert h.events == [("blk", m.SRC_EVENT_WAKEUP, None)] and not src.wants_wakeup
    src.send_nowait(b"after", flush=True)
    assert w.chunks[-1] == frame(src.tidx, sqn, b"after")
    await src.close()


async def test_flushed_send_nowait_wraps_sequence_numbers_at_2_32() -> None:
    h = await make_sources("wrap")
    (src,) = h.sources
    t = src.tidx
    # A raw source's pre-framed message sets the topic's next sequence number.
    h.session.write(h.core.send_framed(t, frame(t, 0xFFFFFFFE, b"w"), 0xFFFFFFFE, 100.0, True))
    src.send_nowait(b"x", flush=True)
    src.send_nowait(b"y", flush=True)
    assert h.writer.chunks == [
        frame(t, 0xFFFFFFFE, b"w"),
        frame(t, 0xFFFFFFFF, b"x"),
        frame(t, 0, b"y"),
    ]
    assert src.next_sequence_number() == 1
    await src.close()
