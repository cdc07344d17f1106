"""Extra LBMC headers (request, properties, app headers) of LBT messages reach the application
also when the message waited in the delivery controller's order map behind a gap."""

from __future__ import annotations

import random

from tests.transport.lbtsim import Net
from umcore.transport.delivery import LbtDeliveryController
from umcore.transport.lbtrm import LbtrmReceiver, LbtrmSource
from umcore.wire import lbmc

SID = 0x4EAD0001


def _dc() -> tuple[LbtDeliveryController, list[tuple[int, bytes, tuple[object, ...]]]]:
    out: list[tuple[int, bytes, tuple[object, ...]]] = []
    holder: list[LbtDeliveryController] = []

    def deliver(sqn: int, payload: bytes) -> None:
        out.append((sqn, bytes(payload), holder[0].headers))

    dc = LbtDeliveryController(1, "t", deliver, lambda *a: None)
    holder.append(dc)
    return dc, out


def test_headers_of_a_buffered_message_come_with_it() -> None:
    dc, out = _dc()
    h2 = (lbmc.Request(0, 0, 7, 14391, 0, lbmc.ip4_from_str("10.0.0.9")),)
    h3 = (lbmc.Request(0, 0, 8, 14391, 0, lbmc.ip4_from_str("10.0.0.9")),)
    dc.on_message(0, b"a", None, 0.0)
    dc.on_message(2, b"c", None, 0.1, False, h2)  # held behind the gap at 1
    dc.on_message(3, b"d", None, 0.1, False, h3)
    dc.on_message(4, b"e", None, 0.1)
    assert [o[0] for o in out] == [0]
    dc.on_message(1, b"b", None, 0.2)  # the repair: 1, then 2, 3, 4 from the order map
    assert out == [(0, b"a", ()), (1, b"b", ()), (2, b"c", h2), (3, b"d", h3), (4, b"e", ())]
    assert dc.headers == () and dc._held_headers == {}


def test_headers_of_an_in_order_message_and_duplicates() -> None:
    dc, out = _dc()
    h = (lbmc.Request(0, 0, 1, 1, 0, 0),)
    dc.on_message(5, b"x", None, 0.0, False, h)
    dc.on_message(5, b"x", None, 0.0, False, h)  # duplicate: nothing kept
    assert out == [(5, b"x", h)] and dc._held_headers == {}


def test_headers_survive_a_lost_datagram_through_the_cores() -> None:
    src = LbtrmSource(SID, 14390, None, None, 0.0)
    rcv = LbtrmReceiver(SID, 14390, None, 0.0, random.Random(2))
    drop_first_data = {"done": False}

    def drop(direction: str, data: bytes, now: float) -> bool:
        # Lose the original of the datagram with topic sqn 1 once (type DATA, sqn 1).
        is_sqn1 = direction == "down" and data[0] & 0x0F == 0 and data[8:12] == b"\0\0\0\1"
        if is_sqn1 and not drop_first_data["done"] and not data[16] & 0x20:
            drop_first_data["done"] = True
            return True
        return False

    net = Net(src, [rcv], drop=drop, seed=3, fifo=True)
    tidx = src.add_topic("t")
    got: list[tuple[int, bytes, tuple[object, ...]]] = []
    dc = rcv.new_dc(tidx, "t", lambda s, p: got.append((s, bytes(p), dc.headers)), lambda *a: None)
    rcv.subscribe(dc)
    req = lbmc.Request(0, 0, 42, 14391, 0, lbmc.ip4_from_str("10.1.2.3"))

    def send(i: int, headers: list[lbmc.Header]) -> None:
        sqn = src.next_sequence_number(tidx)
        topic = src.topics[tidx]
        assert topic is not None
        topic.sqn = sqn + 1
        msg = lbmc.encode(lbmc.LBMCMessage(lbmc.MSG_DATA, tidx, sqn, headers, bytes([i]) * 8))
        src.parts.append(msg)
        src.batch_len += len(msg)
        src._take()

    sends = [(0.01 * (i + 1), (lambda t, i=i: send(i, [req] if i == 2 else []))) for i in range(4)]
    net.step_until(2.0, sends)
    assert drop_first_data["done"]
    assert [(s, p[0]) for s, p, _h in got] == [(0, 0), (1, 1), (2, 2), (3, 3)]
    assert got[2][2] == (req,) and got[0][2] == got[1][2] == got[3][2] == ()
    assert rcv.stats.rxs_rcved == 1
