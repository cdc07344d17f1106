"""Messages built by the receive path (:class:`DeliveredMessage`) and the fan-out of runs.

The receive path allocates :class:`~umcore.api.message.DeliveredMessage` (``Message`` with
``object.__init__``) and stores the fields itself; these tests pin what applications see: an
instance of ``Message`` with every public field, its ``repr`` and ``respond``, kept messages keep
their contents while a message nobody kept is recycled (its fields all stored anew), and the
fan-out (:class:`umcore.engine.receive.Fanout`: ``deliver`` for one message, ``deliver_many``
for a run, taking an iterator of records with their count) for one and several receivers,
batched receivers, queued receivers and raising callbacks.
"""

from __future__ import annotations

import struct
import sys
from types import SimpleNamespace
from typing import Any

import pytest

from umcore.api import Message
from umcore.api import context as c
from umcore.api import message as m
from umcore.api.message import DeliveredMessage
from umcore.engine.receive import SPARE_REFS, Fanout, JoinedSession
from umcore.errors import UMError
from umcore.transport.delivery import LbtDeliveryController
from umcore.transport.runs import run_struct
from umcore.transport.tcp import DeliveryController


class _Core:
    def new_dc(self, tidx: int, topic: str, deliver: Any, loss: Any, max_burst_loss: int) -> Any:
        return LbtDeliveryController(tidx, topic, deliver, loss, max_burst_loss=max_burst_loss)


class _Session:
    """What a fan-out reads of its joined session (an LBT-RM one: its DC takes packed runs)."""

    core = _Core()
    source_string = "LBTRM:10.0.0.1:14400:00000007"
    features: Any = None

    def new_dc(self, tidx: int, topic: str, deliver: Any, loss: Any, max_burst: int) -> Any:
        return self.core.new_dc(tidx, topic, deliver, loss, max_burst_loss=max_burst)


class _TcpSession(_Session):
    """A TCP joined session: its DC may deliver fragments on their own (``ordered_delivery``
    0)."""

    source_string = "S"

    def new_dc(self, tidx: int, topic: str, deliver: Any, loss: Any, max_burst: int) -> Any:
        return DeliveryController(tidx, topic, deliver, loss, max_burst_loss=max_burst)


class _Ctx:
    """What a receiver tells when its queue fills up or drains (the engine's feeding)."""

    def __init__(self) -> None:
        self.paused: list[str] = []
        self.resumed: list[str] = []

    def pause_feeding(self, topic: str) -> None:
        self.paused.append(topic)

    def resume_feeding(self, topic: str) -> None:
        self.resumed.append(topic)


def _receiver(on_message: Any = None, on_messages: Any = None) -> c.Receiver:
    r = c.Receiver(_Ctx(), "t", on_message)
    r.on_messages = on_messages
    return r


def _fanout(*receivers: c.Receiver) -> Fanout:
    f = Fanout(_Session(), "t", 3, 1024)  # type: ignore[arg-type]
    for r in receivers:
        f.add_receiver(r)
    f.dc.started = True
    return f


def _packed(first: int, count: int, size: int = 8) -> tuple[bytes, int]:
    msglen = 12 + size
    head = struct.Struct("!BBHII")
    buf = b"".join(
        head.pack(0, 0, msglen, 3, s) + s.to_bytes(size, "big") for s in range(first, first + count)
    )
    return buf, msglen


def test_delivered_message_is_a_message_with_every_field() -> None:
    msg = DeliveredMessage()
    msg.type, msg.topic, msg.source, msg.sequence_number, msg.data = 0, "t", "S", 7, b"ab"
    assert isinstance(msg, Message)
    assert (msg.type, msg.topic, msg.source, msg.sequence_number, msg.data) == (
        0,
        "t",
        "S",
        7,
        b"ab",
    )
    assert (msg.flags, msg.count, msg.properties, msg.app_headers, msg.response) == (
        0,
        0,
        None,
        (),
        None,
    )
    assert msg.fragment_info is None
    assert repr(msg) == repr(Message(0, "t", "S", 7, b"ab"))
    msg.fragment_info = (5, 0, 10)  # a rare field lands in the instance only
    assert msg.fragment_info == (5, 0, 10) and DeliveredMessage().fragment_info is None
    with pytest.raises(UMError):
        msg.respond(b"x")
    with pytest.raises(TypeError):
        DeliveredMessage(0)  # type: ignore[call-arg]


def test_packed_run_reaches_one_callback_as_new_messages() -> None:
    got: list[Message] = []
    r = _receiver(got.append)
    f = _fanout(r)
    buf, msglen = _packed(0, 20)
    f.dc.on_packed(0, buf, 0, msglen, 20, 0.0)
    assert [x.sequence_number for x in got] == list(range(20))
    assert [x.data for x in got] == [s.to_bytes(8, "big") for s in range(20)]
    assert {(x.type, x.topic, x.source) for x in got} == {(0, "t", _Session.source_string)}
    assert len({id(x) for x in got}) == 20  # kept messages are never recycled
    assert all(isinstance(x, Message) for x in got)
    assert (r.messages, f.dc.delivered, f.dc.expected) == (20, 20, 20)


def test_run_with_a_raising_callback_counts_and_goes_on() -> None:
    seen: list[int] = []

    def cb(msg: Message) -> None:
        seen.append(msg.sequence_number)
        if msg.sequence_number % 3 == 0:
            raise ValueError("application bug")

    r = _receiver(cb)
    f = _fanout(r)
    f.deliver_many(iter(run_struct(20).iter_unpack(_packed(0, 10)[0])), 10)
    assert seen == list(range(10))
    assert (r.callback_errors, r.messages) == (4, 10)


def test_run_fans_out_to_several_kinds_of_receivers() -> None:
    one: list[Message] = []
    batches: list[list[Message]] = []
    r1 = _receiver(one.append)
    r2 = _receiver(None, batches.append)
    r3 = _receiver(None)  # async iterator queue
    f = _fanout(r1, r2, r3)
    buf, msglen = _packed(0, 12)
    f.dc.on_packed(0, buf, 0, msglen, 12, 0.0)
    assert [x.sequence_number for x in one] == list(range(12))
    assert [[x.sequence_number for x in b] for b in batches] == [list(range(12))]
    queued = _drain(r3)
    assert [x.sequence_number for x in queued] == list(range(12))
    assert one[5] is batches[0][5] is queued[5]  # one message object per delivery
    assert (r1.messages, r2.messages, r3.messages) == (12, 12, 12)


def _drain(r: c.Receiver) -> list[Message]:
    out = []
    while (msg := r.get_nowait()) is not None:
        out.append(msg)
    return out


async def test_queued_run_is_bounded_and_pauses_feeding() -> None:
    r = _receiver(None)
    f = _fanout(r)
    n = c.MAX_RECEIVER_QUEUE
    recs = [(s, b"x") for s in range(n)]
    f.deliver_many(iter(recs), n)
    assert r.messages == n and r.queue_pauses == 1
    feeding = r.context
    assert feeding.paused == ["t"] and feeding.resumed == []
    first = await r.get()
    assert type(first) is DeliveredMessage and first.data == b"x" and first.sequence_number == 0
    for _ in range(n // 2 - 2):
        await r.get()
    assert feeding.resumed == []
    last = await r.get()  # the queue is down to half: feeding resumes
    assert feeding.resumed == ["t"] and last.sequence_number == n // 2 - 1
    assert last.type == m.MSG_DATA


# ---------------------------------------------------------------- fast-path state invalidation
def _state(f: Fanout) -> tuple[Any, Any]:
    return f.fast_r, f.fast_cb


def _js() -> JoinedSession:
    info = SimpleNamespace(
        key=("TCP", "10.0.0.1", 1, 7), ip="10.0.0.1", port=1, session_id=7, options=()
    )
    features = SimpleNamespace(  # no late join / OTR here
        fanout_removed=lambda f: None, fanout_joined=lambda f, o: None
    )
    owner = SimpleNamespace(features=features, session_ended=lambda js: None, count_loss=print)
    return JoinedSession(owner, info)  # type: ignore[arg-type]


def test_fast_path_state_follows_receivers_callbacks_and_recovery() -> None:
    js = _js()
    got1: list[Message] = []
    got2: list[Message] = []
    r1 = _receiver(got1.append)
    js.add("t", 3, r1)
    f = js.fanouts[3]
    assert _state(f) == (r1, got1.append)  # one receiver with a callback
    f.deliver(0, b"a")
    r2 = _receiver(got2.append)
    js.add("t", 3, r2)
    assert _state(f) == (None, None)  # two receivers
    f.deliver(1, b"b")
    js.remove(r2)
    assert _state(f) == (r1, got1.append) and r2 not in f.receivers
    r1.on_message = got2.append  # callback replaced: the next delivery uses the new one
    assert _state(f) == (r1, got2.append)
    f.deliver(2, b"c")
    r1.on_message = None  # no callback: deliveries queue
    assert _state(f) == (None, None)
    f.deliver(3, b"d")
    r1.on_message = got1.append
    f.set_recovery(object())  # recovery starting: the general path
    assert _state(f) == (None, None) and f.recovery is not None
    f.set_recovery(None)
    assert _state(f) == (r1, got1.append)
    f.deliver(4, b"e")
    assert [(x.sequence_number, x.data) for x in got1] == [(0, b"a"), (1, b"b"), (4, b"e")]
    assert [(x.sequence_number, x.data) for x in got2] == [(1, b"b"), (2, b"c")]
    queued = r1.get_nowait()
    assert queued is not None and (queued.sequence_number, queued.data) == (3, b"d")
    assert r1.get_nowait() is None
    assert (r1.messages, r2.messages) == (5, 1)


def test_fast_path_counts_a_raising_callback() -> None:
    js = _js()

    def cb(msg: Message) -> None:
        raise RuntimeError("application bug")

    r = _receiver(cb)
    js.add("t", 3, r)
    f = js.fanouts[3]
    f.deliver(0, b"a")
    f.deliver(1, b"b")
    assert (r.callback_errors, r.messages) == (2, 2)


def test_closing_a_receiver_clears_its_fast_path() -> None:
    js = _js()
    r = _receiver(lambda msg: None)
    js.add("t", 3, r)
    f = js.fanouts[3]
    r.on_message = None  # what Receiver.close does first
    assert _state(f) == (None, None)
    r.on_message = lambda msg: None
    assert _state(f) == (r, r.on_message)
    js.remove(r)  # closing the receiver: gone from the fan-out, and so is its fast path
    assert _state(f) == (None, None) and f.receivers == [] and 3 not in js.fanouts


# ---------------------------------------------------------------- recycling
def _fields(msg: Message) -> tuple[Any, ...]:
    return (msg.type, msg.topic, msg.source, msg.sequence_number, msg.data)


def _expected(sqns: range) -> list[tuple[Any, ...]]:
    return [(0, "t", _Session.source_string, s, s.to_bytes(8, "big")) for s in sqns]


def test_a_run_recycles_the_message_nobody_kept() -> None:
    seen: list[tuple[Any, ...]] = []
    ids: set[int] = set()

    def cb(msg: Message) -> None:  # reads, keeps nothing
        seen.append(_fields(msg))
        ids.add(id(msg))

    f = _fanout(_receiver(cb))
    buf, msglen = _packed(0, 20)
    f.dc.on_packed(0, buf, 0, msglen, 20, 0.0)
    f.deliver(20, (20).to_bytes(8, "big"))  # the single-message path takes the same spare
    assert seen == _expected(range(21))
    assert ids == {id(f.spare)}  # one object for all 21 deliveries


def test_kept_messages_keep_their_contents_among_recycled_ones() -> None:
    kept: list[Message] = []
    seen: list[tuple[Any, ...]] = []

    def cb(msg: Message) -> None:
        seen.append(_fields(msg))
        if msg.sequence_number % 3 == 0:
            kept.append(msg)

    f = _fanout(_receiver(cb))
    buf, msglen = _packed(0, 30)
    f.dc.on_packed(0, buf, 0, msglen, 30, 0.0)
    for s in range(30, 36):
        f.deliver(s, s.to_bytes(8, "big"))
    assert seen == _expected(range(36))
    assert [_fields(x) for x in kept] == _expected(range(0, 36, 3))  # untouched since
    assert len({id(x) for x in kept}) == 12


def test_a_message_kept_only_for_a_while_is_not_touched_while_kept() -> None:
    held: list[Message] = []
    snapshots: list[tuple[Any, ...]] = []

    def cb(msg: Message) -> None:
        if held:  # the message kept by the previous call, checked and then dropped
            snapshots.append(_fields(held.pop()))
        held.append(msg)

    f = _fanout(_receiver(cb))
    buf, msglen = _packed(0, 16)
    f.dc.on_packed(0, buf, 0, msglen, 16, 0.0)
    assert snapshots == _expected(range(15))


def test_recycling_stores_every_field_anew() -> None:
    seen: list[tuple[Any, ...]] = []

    def cb(msg: Message) -> None:  # an application scribbling on a message it drops
        seen.append(_fields(msg))
        msg.type, msg.topic, msg.source, msg.sequence_number, msg.data = 9, "x", "y", -1, b"z"

    f = _fanout(_receiver(cb))
    buf, msglen = _packed(0, 10)
    f.dc.on_packed(0, buf, 0, msglen, 10, 0.0)
    for s in range(10, 13):
        f.deliver(s, s.to_bytes(8, "big"))
    assert seen == _expected(range(13))


def test_a_fragment_delivered_on_its_own_is_never_recycled() -> None:
    got: list[Any] = []

    def cb(msg: Message) -> None:
        if msg.fragment_info is not None:
            got.append(msg)
        got.append((*_fields(msg), msg.fragment_info))

    f = Fanout(_TcpSession(), "t", 3, 1024)  # type: ignore[arg-type]
    assert f.fragments  # a TCP DC: it may deliver fragments on their own
    f.add_receiver(_receiver(cb))
    f.dc.fragment = (5, 0, 10)
    f.deliver(5, b"part")
    f.dc.fragment = None
    f.deliver(6, b"whole")
    frag_msg, frag_fields, plain_fields = got
    assert frag_fields == (0, "t", "S", 5, b"part", (5, 0, 10))
    assert plain_fields == (0, "t", "S", 6, b"whole", None)  # no fragment info carried over
    assert frag_msg is not f.spare and frag_msg.fragment_info == (5, 0, 10)


def test_spare_refs_is_what_an_unkept_spare_reads() -> None:
    f = _fanout(_receiver(lambda msg: None))
    msg = f.spare
    assert sys.getrefcount(msg) == SPARE_REFS  # the shape the delivery paths test
    extra = [msg]
    assert sys.getrefcount(msg) == SPARE_REFS + 1
    del extra
