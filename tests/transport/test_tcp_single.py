"""TcpReceiverSession's single-message read path: the same deliveries and events as the loop."""

from __future__ import annotations

from umcore.transport.tcp import LOSS, DeliveryController, TcpReceiverSession
from umcore.wire import lbmc


class Sink:
    def __init__(self) -> None:
        self.got: list[tuple[int, bytes]] = []
        self.lost: list[tuple[str, int, int]] = []

    def deliver(self, sqn: int, payload: bytes | memoryview) -> None:
        self.got.append((sqn, bytes(payload)))

    def lose(self, kind: str, sqn: int, count: int) -> None:
        self.lost.append((kind, sqn, count))


def test_one_message_reads_deliver_in_order_and_count() -> None:
    rcv = TcpReceiverSession(1)
    sink = Sink()
    rcv.subscribe(DeliveryController(3, "t", sink.deliver, sink.lose))
    active = []
    rcv.on_active = lambda: active.append(True)
    assert rcv.receive_data(lbmc.encode_data(3, 10, b"first")) is True  # BOS time
    for sqn in range(11, 20):
        assert rcv.receive_data(lbmc.encode_data(3, sqn, b"m%d" % sqn)) is False
    assert active == [True]
    assert sink.got == [(10, b"first")] + [(s, b"m%d" % s) for s in range(11, 20)]
    assert rcv.stats.messages_received == 10
    assert rcv.stats.bytes_received == sum(len(b"m%d" % s) + 12 for s in range(11, 20)) + 17


def test_one_message_reads_gap_unknown_topic_and_split() -> None:
    rcv = TcpReceiverSession(1)
    sink = Sink()
    rcv.subscribe(DeliveryController(3, "t", sink.deliver, sink.lose))
    rcv.receive_data(lbmc.encode_data(3, 0, b"a"))
    rcv.receive_data(lbmc.encode_data(3, 3, b"d"))  # a gap: loss events, then delivery
    assert sink.lost == [(LOSS, 1, 1), (LOSS, 2, 1)]
    rcv.receive_data(lbmc.encode_data(9, 0, b"x"))  # nobody subscribed
    assert rcv.stats.messages_no_topic == 1
    msg = lbmc.encode_data(3, 4, b"split")
    rcv.receive_data(msg[:5])  # pending bytes: the next read completes it
    rcv.receive_data(msg[5:])
    rcv.receive_data(lbmc.encode_data(3, 3, b"old"))  # a duplicate: dropped
    assert sink.got == [(0, b"a"), (3, b"d"), (4, b"split")]
    assert rcv.stats.messages_received == 5
