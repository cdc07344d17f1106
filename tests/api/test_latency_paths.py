"""The TCP latency paths of the API: a joined session's one-message read delivered in one frame
(``_JoinConnection.data_received``) and ``Source.send_nowait(flush=True)``'s inline send.

The receive tests feed crafted reads to a real joined connection and watch whether the session
core's general path ran (a spy on ``TcpReceiverSession.data_received``): the fused path must
deliver exactly what the general path would, and every case it does not cover (first bytes, a
gap, an unknown topic index, two messages in a read, two receivers, a receiver without callback)
must fall back.  The send tests capture the bytes written to the receiver connections.
"""

from __future__ import annotations

import asyncio
import struct
from collections.abc import Callable
from typing import Any

from tests.api.conftest import WAIT, wait_for
from umcore.api import Context, Message
from umcore.api import message as m
from umcore.errors import WouldBlock
from umcore.transport.tcp import MAX_LBMC_MESSAGE

_HEAD = struct.Struct("!BBHII")  # LBMC data header: ver/type, next header, msglen, tidx, sqn


def frame(tidx: int, sqn: int, payload: bytes) -> bytes:
    return _HEAD.pack(0, 0, 12 + len(payload), tidx, sqn) + payload


class _Spy:
    """Counts calls of the session core's general ``data_received``."""

    def __init__(self, core: Any) -> None:
        self.calls = 0
        self._inner: Callable[[bytes], bool] = core.data_received
        core.data_received = self

    def __call__(self, data: bytes) -> bool:
        self.calls += 1
        return self._inner(data)


async def _joined(b: Context, src: Any) -> tuple[Any, Any, _Spy]:
    """The joined session of ``b`` to ``src``'s transport session, its connection and a spy."""
    await wait_for(lambda: src.receivers >= 1 and any(js.conn for js in b._joined.values()))
    js = next(iter(b._joined.values()))
    await wait_for(lambda: js.conn.transport is not None)
    return js, js.conn, _Spy(js.core)


async def test_one_message_reads_take_the_fused_path(opts: None) -> None:
    got: list[Message] = []
    async with await Context.create(opts) as a, await Context.create(opts) as b:
        rcv = await b.create_receiver("lat", got.append)
        src = await a.create_source("lat")
        js, conn, spy = await _joined(b, src)
        t = src.tidx
        conn.data_received(frame(t, 0, b"first"))  # first bytes: BOS, general path
        assert spy.calls == 1
        assert [x.type for x in got] == [m.MSG_BOS, m.MSG_DATA]
        f = js.fanouts[t]
        stats = js.core.stats
        before = (stats.messages_received, stats.bytes_received, f.dc.delivered, rcv.messages)
        for sqn in range(1, 101):
            conn.data_received(frame(t, sqn, sqn.to_bytes(4, "big") * 3))
        assert spy.calls == 1  # all 100 on the fused path
        data = [x for x in got if x.type == m.MSG_DATA]
        assert [x.sequence_number for x in data] == list(range(101))
        assert [x.data for x in data[1:]] == [s.to_bytes(4, "big") * 3 for s in range(1, 101)]
        assert all(type(x.data) is bytes for x in data)
        assert {(x.topic, x.source, x.fragment_info) for x in data} == {
            ("lat", js.source_string, None)
        }
        assert rcv.messages - before[3] == 100  # counted by the DC, added when read
        js.fold()  # what statistics sampling does first (the session's messages_received)
        assert (
            stats.messages_received - before[0],
            stats.bytes_received - before[1],
            f.dc.delivered - before[2],
            rcv.messages - before[3],
        ) == (100, 100 * 24, 100, 100)
        js.fold()  # folding twice adds nothing
        conn.data_received(frame(t, 101, b"x") + frame(t, 102, b"y"))  # general path: 2 more
        assert spy.calls == 2 and rcv.messages - before[3] == 102
        js.fold()
        assert stats.messages_received - before[0] == 102 and f.dc.delivered - before[2] == 102
        assert f.dc.expected == 103
        await rcv.close()
        await src.close()


async def test_one_frame_path_recycles_only_messages_nobody_kept(opts: None) -> None:
    """The one-frame path hands the same object out again while the callback keeps nothing, a
    new one after the callback kept one; kept messages keep their contents."""
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
        _js, conn, spy = await _joined(b, src)
        t = src.tidx
        conn.data_received(frame(t, 0, b"first"))  # first bytes: general path
        for sqn in range(1, 13):
            conn.data_received(frame(t, sqn, bytes([sqn]) * 4))
        assert spy.calls == 1  # all 12 on the one-frame path
        assert [(q, d, tp) for _i, q, d, tp in seen] == [(0, b"first", "lat")] + [
            (q, bytes([q]) * 4, "lat") for q in range(1, 13)
        ]
        ids = [i for i, *_ in seen[1:]]  # sqn 1..12
        assert len(set(ids[0:5])) == 1  # 1-5: one object, recycled
        assert ids[5] != ids[4] and ids[6] != ids[5]  # after 5 and 6 were kept: new ones
        assert len(set(ids[6:9])) == 1 and ids[9] != ids[8]  # 7-9 one object, 10 after 9
        assert [(x.sequence_number, x.data) for x in kept] == [
            (q, bytes([q]) * 4) for q in (5, 6, 9)
        ]
        await rcv.close()
        await src.close()


async def test_fused_read_falls_back_on_gap_unknown_topic_and_runs(opts: None) -> None:
    got: list[Message] = []
    async with await Context.create(opts) as a, await Context.create(opts) as b:
        rcv = await b.create_receiver("gap", got.append)
        src = await a.create_source("gap")
        js, conn, spy = await _joined(b, src)
        t = src.tidx
        conn.data_received(frame(t, 0, b"a"))
        conn.data_received(frame(t, 1, b"b"))
        assert spy.calls == 1
        conn.data_received(frame(t, 4, b"e"))  # gap: 2 and 3 lost
        assert spy.calls == 2
        assert [(x.type, x.sequence_number) for x in got[-3:]] == [
            (m.MSG_UNRECOVERABLE_LOSS, 2),
            (m.MSG_UNRECOVERABLE_LOSS, 3),
            (m.MSG_DATA, 4),
        ]
        conn.data_received(frame(t, 4, b"dup"))  # duplicate: general path, dropped
        assert spy.calls == 3 and got[-1].data == b"e"
        no_topic = js.core.stats.messages_no_topic
        conn.data_received(frame(t + 7, 0, b"x"))  # unknown topic index
        assert spy.calls == 4 and js.core.stats.messages_no_topic == no_topic + 1
        conn.data_received(frame(t, 5, b"f") + frame(t, 6, b"g"))  # two messages in a read
        assert spy.calls == 5 and [x.data for x in got[-2:]] == [b"f", b"g"]
        whole = frame(t, 7, b"split")
        conn.data_received(whole[:5])  # part of a message, then the rest: general path
        conn.data_received(whole[5:])
        assert spy.calls == 7 and got[-1].data == b"split"
        conn.data_received(frame(t, 8, b"h"))  # back on the fused path
        assert spy.calls == 7 and got[-1].data == b"h"
        assert [x.sequence_number for x in got if x.type == m.MSG_DATA] == [0, 1, 4, 5, 6, 7, 8]
        await rcv.close()
        await src.close()


async def test_fused_read_falls_back_for_two_receivers_and_no_callback(opts: None) -> None:
    one: list[Message] = []
    two: list[Message] = []
    async with await Context.create(opts) as a, await Context.create(opts) as b:
        r1 = await b.create_receiver("two", one.append)
        src = await a.create_source("two")
        js, conn, spy = await _joined(b, src)
        t = src.tidx
        conn.data_received(frame(t, 0, b"a"))
        r2 = await b.create_receiver("two", two.append)
        await wait_for(lambda: len(js.fanouts[t].receivers) == 2)
        calls = spy.calls
        conn.data_received(frame(t, 1, b"b"))  # two receivers: general path, both get it
        assert spy.calls == calls + 1
        assert [x.data for x in one if x.type == m.MSG_DATA] == [b"a", b"b"]
        assert [x.data for x in two if x.type == m.MSG_DATA] == [b"b"]
        assert (r1.messages, r2.messages) == (2, 1)
        await r2.close()
        calls = spy.calls
        conn.data_received(frame(t, 2, b"c"))  # one receiver again: fused
        assert spy.calls == calls and [x.data for x in one][-1] == b"c"
        # One receiver left, without callback: the async iterator gets the message.
        r3 = await b.create_receiver("two")
        await r1.close()
        assert js.fanouts[t].receivers == [r3] and not conn.closed
        calls = spy.calls
        conn.data_received(frame(t, 3, b"d"))
        assert spy.calls == calls + 1
        async with asyncio.timeout(WAIT):
            msg = await r3.get()
            while msg.type != m.MSG_DATA:
                msg = await r3.get()
        assert (msg.data, msg.sequence_number, r3.messages) == (b"d", 3, 1)
        await r3.close()
        await src.close()


async def test_fused_read_counts_a_raising_callback(opts: None) -> None:
    got: list[int] = []

    def cb(msg: Message) -> None:
        if msg.type == m.MSG_DATA:
            got.append(msg.sequence_number)
            if msg.data == b"boom":
                raise RuntimeError("application bug")

    async with await Context.create(opts) as a, await Context.create(opts) as b:
        rcv = await b.create_receiver("err", cb)
        src = await a.create_source("err")
        js, conn, spy = await _joined(b, src)
        t = src.tidx
        conn.data_received(frame(t, 0, b"ok"))
        calls = spy.calls
        conn.data_received(frame(t, 1, b"boom"))  # fused path: counted, not propagated
        conn.data_received(frame(t, 2, b"ok"))
        assert spy.calls == calls
        assert got == [0, 1, 2]
        assert rcv.callback_errors == 1 and rcv.messages == 3
        assert js.fanouts[t].dc.expected == 3
        assert conn.transport is not None and not conn.closed
        await rcv.close()
        await src.close()


class _Capture:
    """Stands in for a receiver connection's transport: records what the source writes."""

    def __init__(self) -> None:
        self.writes: list[bytes] = []

    def write(self, data: bytes) -> None:
        self.writes.append(bytes(data))


async def test_inline_send_bytes_counters_and_fallbacks(opts: None) -> None:
    async with await Context.create(opts) as a, await Context.create(opts) as b:
        rcv = await b.create_receiver("snd", lambda msg: None)
        src = await a.create_source("snd")
        await wait_for(lambda: src.receivers == 1)
        assert src._one is src._core.topics[src.tidx]
        cap = _Capture()
        listener = src._listener
        saved = listener._writers
        listener._writers = [cap]
        try:
            st = src._core.stats
            before = (st.messages_sent, st.datagrams_sent, st.bytes_sent)
            src.send_nowait(b"one", flush=True)
            src.send_nowait(memoryview(b"two!"), flush=True)  # any buffer
            assert cap.writes == [frame(src.tidx, 0, b"one"), frame(src.tidx, 1, b"two!")]
            assert (st.messages_sent, st.datagrams_sent, st.bytes_sent) == (
                before[0] + 2,
                before[1] + 2,
                before[2] + 15 + 16,
            )
            assert src._core.topics[src.tidx].last_data > 0
            # A batched message first: the flush sends both, in order, in one write.
            await src.send(b"batched")
            assert src._core.batch_len and len(cap.writes) == 2
            src.send_nowait(b"flushed", flush=True)
            assert cap.writes[2:] == [
                frame(src.tidx, 2, b"batched") + frame(src.tidx, 3, b"flushed")
            ]
            # Bigger than one LBMC message can carry: fragmented by the general path.
            big = bytes(MAX_LBMC_MESSAGE)
            src.send_nowait(big, flush=True)
            assert len(cap.writes) > 3 and src._core.next_sequence_number(src.tidx) > 5
            assert src._core.stats.fragments_sent > 0
            # Properties / app headers never take the inline path (covered elsewhere); a closed
            # source never does either.
        finally:
            listener._writers = saved
        await rcv.close()
        await src.close()
        assert src._one is None
        try:
            src.send_nowait(b"late", flush=True)
            raise AssertionError("a closed source sent")
        except Exception as exc:  # UMError
            assert "closed" in str(exc)


async def test_inline_send_refused_while_blocked(opts: None) -> None:
    async with await Context.create(opts) as a, await Context.create(opts) as b:
        rcv = await b.create_receiver("blk", lambda msg: None)
        src = await a.create_source("blk")
        await wait_for(lambda: src.receivers == 1)
        listener = src._listener
        fake = object()
        listener._pause(fake)  # as a connection over its buffer limit would
        try:
            sqn = src._core.next_sequence_number(src.tidx)
            try:
                src.send_nowait(b"x", flush=True)
                raise AssertionError("send_nowait did not raise WouldBlock")
            except WouldBlock:
                pass
            assert src._core.next_sequence_number(src.tidx) == sqn
            assert src._wants_wakeup
        finally:
            listener._resumed(fake)
        await rcv.close()
        await src.close()


async def test_fused_read_falls_back_under_recovery(opts: None) -> None:
    """A topic with late join / OTR state (``_Fanout.recovery``) hands live data to the
    features layer: never the fused path."""
    got: list[Message] = []
    async with await Context.create(opts) as a, await Context.create(opts) as b:
        rcv = await b.create_receiver("rec", got.append)
        src = await a.create_source("rec")
        js, conn, spy = await _joined(b, src)
        t = src.tidx
        conn.data_received(frame(t, 0, b"a"))
        live: list[tuple[int, bytes]] = []
        f = js.fanouts[t]
        feat: Any = b._features
        feat.live = lambda fan, sqn, payload, headers: live.append((sqn, payload))
        f.recovery = object()  # as fanout_created would set a TopicRecovery
        try:
            calls = spy.calls
            conn.data_received(frame(t, 1, b"b"))
            assert spy.calls == calls + 1 and live == [(1, b"b")]
            assert [x.data for x in got if x.type == m.MSG_DATA] == [b"a"]
        finally:
            f.recovery = None
            del feat.live
        await rcv.close()
        await src.close()


async def test_inline_send_length_cache_and_positional_flush(opts: None) -> None:
    """The inline send's per-length struct: repeated, changed and memoryview/bytearray payloads
    of a cached length give the same bytes as one-by-one framing; ``flush`` positionally."""
    async with await Context.create(opts) as a, await Context.create(opts) as b:
        rcv = await b.create_receiver("len", lambda msg: None)
        src = await a.create_source("len")
        await wait_for(lambda: src.receivers == 1)
        cap = _Capture()
        listener = src._listener
        saved = listener._writers
        listener._writers = [cap]
        try:
            payloads: list[Any] = [
                b"abcd",
                b"efgh",  # cached length
                memoryview(b"ijkl"),  # cached length, not packable by 's': general framing
                bytearray(b"mnop"),  # cached length, packable
                b"longer payload",  # new length: cache replaced
                b"x" * 14,
                b"",
                b"",
            ]
            base = src._core.next_sequence_number(src.tidx)
            for i, p in enumerate(payloads):
                if i % 2:
                    src.send_nowait(p, True)  # positional flush: same path
                else:
                    src.send_nowait(p, flush=True)
            assert cap.writes == [
                frame(src.tidx, base + i, bytes(p)) for i, p in enumerate(payloads)
            ]
            assert src._core.next_sequence_number(src.tidx) == base + len(payloads)
        finally:
            listener._writers = saved
        await rcv.close()
        await src.close()


async def test_fused_paths_wrap_sequence_numbers_at_2_32(opts: None) -> None:
    """Both one-frame paths step the topic sequence number past 2**32 - 1 to 0."""
    got: list[Message] = []
    async with await Context.create(opts) as a, await Context.create(opts) as b:
        rcv = await b.create_receiver("wrap", got.append)
        src = await a.create_source("wrap")
        js, conn, spy = await _joined(b, src)
        t = src.tidx
        conn.data_received(frame(t, 0xFFFFFFFE, b"a"))  # first bytes: general path
        conn.data_received(frame(t, 0xFFFFFFFF, b"b"))
        conn.data_received(frame(t, 0, b"c"))
        conn.data_received(frame(t, 1, b"d"))
        assert spy.calls == 1  # the last three on the fused path
        data = [(x.sequence_number, x.data) for x in got if x.type == m.MSG_DATA]
        assert data == [(0xFFFFFFFE, b"a"), (0xFFFFFFFF, b"b"), (0, b"c"), (1, b"d")]
        assert js.fanouts[t].dc.expected == 2
        cap = _Capture()
        listener = src._listener
        saved = listener._writers
        listener._writers = [cap]
        try:
            src._core.topics[t].sqn = 0xFFFFFFFF
            src.send_nowait(b"x", flush=True)
            src.send_nowait(b"y", flush=True)
            assert cap.writes == [frame(t, 0xFFFFFFFF, b"x"), frame(t, 0, b"y")]
            assert src._core.next_sequence_number(t) == 1
        finally:
            listener._writers = saved
        await rcv.close()
        await src.close()


async def test_one_frame_counts_survive_receiver_changes_and_reach_monitoring(opts: None) -> None:
    """Deliveries the one-frame path counted in the DC only are the first receiver's when a
    second receiver joins (the fast path then stops), and the session's sample has them."""
    from umcore.monitor.automatic import _tcp_receiver_sample

    got1: list[Message] = []
    got2: list[Message] = []
    async with await Context.create(opts) as a, await Context.create(opts) as b:
        r1 = await b.create_receiver("cnt", got1.append)
        src = await a.create_source("cnt")
        js, conn, spy = await _joined(b, src)
        t = src.tidx
        for sqn in range(10):
            conn.data_received(frame(t, sqn, b"m"))
        assert spy.calls == 1 and r1.messages == 10  # 9 of them on the one-frame path
        r2 = await b.create_receiver("cnt", got2.append)  # two receivers: general path
        assert js.fanouts[t].fast_r is None
        for sqn in range(10, 15):
            conn.data_received(frame(t, sqn, b"n"))
        assert (r1.messages, r2.messages) == (15, 5)
        await r2.close()  # one receiver again: the one-frame path resumes
        for sqn in range(15, 20):
            conn.data_received(frame(t, sqn, b"o"))
        assert spy.calls == 1 + 5 and (r1.messages, r2.messages) == (20, 5)
        assert _tcp_receiver_sample(js).fields["lbm_msgs_rcved"] == 20
        assert len([x for x in got1 if x.type == m.MSG_DATA]) == 20
        await r1.close()
        await src.close()


async def test_one_frame_count_folds_itself_every_max_fused(opts: None) -> None:
    """The one-frame path's small count never passes MAX_FUSED: every MAX_FUSED deliveries,
    and when the read length changes, it is folded into the DC's, the session's (messages and
    bytes) and the receiver's counters by itself."""
    from umcore.api.context import MAX_FUSED

    async with await Context.create(opts) as a, await Context.create(opts) as b:
        rcv = await b.create_receiver("fold", lambda msg: None)
        src = await a.create_source("fold")
        js, conn, spy = await _joined(b, src)
        t = src.tidx
        f = js.fanouts[t]
        n = 2 * MAX_FUSED + 37
        sizes = [1 + (sqn // 100) % 3 for sqn in range(n)]  # the length changes now and then
        for sqn in range(n):
            conn.data_received(frame(t, sqn, b"z" * sizes[sqn]))
            assert 0 <= f.fused <= MAX_FUSED
        assert spy.calls == 1  # the first read (BOS) took the general path
        assert f.dc.delivered + f.fused == n and f.dc.delivered >= n - MAX_FUSED
        stats = js.core.stats
        assert stats.messages_received + f.fused == n and rcv.messages == n
        nbytes = sum(12 + k for k in sizes)
        assert stats.bytes_received + f.fused * f.fused_n == nbytes
        js.fold()
        assert (f.fused, f.dc.delivered, stats.messages_received, rcv.messages) == (0, n, n, n)
        assert stats.bytes_received == nbytes
        await rcv.close()
        await src.close()
