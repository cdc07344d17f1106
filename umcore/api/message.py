"""What a receiver is handed: :class:`Message`, with UM's message types; source event codes.

Theory of operation
-------------------
UM delivers everything a topic receiver learns through one callback, the message type telling
data from events (``lbm_msg_t.type``): data, BOS (beginning of a transport session, type 20),
EOS (end of it, type 1), unrecoverable loss (4) and burst loss (5).  pyum keeps that shape: the
receiver callback and the receiver's async iterator both yield :class:`Message` objects.  The
numbers are UM's (lbm.h) so logs and tools read the same.

A source's events (a receiver connected or disconnected, a blocked send can go on) reach the
source's ``on_event(code, info)`` with UM's ``LBM_SRC_EVENT_*`` numbers.
"""

from __future__ import annotations

__all__ = [
    "MSG_BOS",
    "MSG_DATA",
    "MSG_EOS",
    "MSG_UNRECOVERABLE_LOSS",
    "MSG_UNRECOVERABLE_LOSS_BURST",
    "SRC_EVENT_CONNECT",
    "SRC_EVENT_DISCONNECT",
    "SRC_EVENT_WAKEUP",
    "Message",
]

MSG_DATA = 0  # LBM_MSG_DATA
MSG_EOS = 1  # LBM_MSG_EOS: the transport session ended (disconnect, timeout)
MSG_UNRECOVERABLE_LOSS = 4  # LBM_MSG_UNRECOVERABLE_LOSS: one sequence number lost for good
MSG_UNRECOVERABLE_LOSS_BURST = 5  # LBM_MSG_UNRECOVERABLE_LOSS_BURST: a gap beyond the burst limit
MSG_BOS = 20  # LBM_MSG_BOS: first activity seen on a joined transport session

SRC_EVENT_CONNECT = 1  # LBM_SRC_EVENT_CONNECT: a receiver joined the transport session
SRC_EVENT_DISCONNECT = 2  # LBM_SRC_EVENT_DISCONNECT: a receiver left it
SRC_EVENT_WAKEUP = 3  # LBM_SRC_EVENT_WAKEUP: a send refused with WouldBlock may be retried

_TYPE_NAMES = {
    MSG_DATA: "DATA",
    MSG_EOS: "EOS",
    MSG_UNRECOVERABLE_LOSS: "UNRECOVERABLE_LOSS",
    MSG_UNRECOVERABLE_LOSS_BURST: "UNRECOVERABLE_LOSS_BURST",
    MSG_BOS: "BOS",
}


class Message:
    """One delivery to a receiver.

    ``data`` is the payload (bytes; empty for events), ``sequence_number`` the topic sequence
    number (for a reassembled message, that of its last fragment; for a loss event the first
    lost one), ``source`` UM's source string (``TCP:ip:port:sid``), ``count`` the number of
    messages a burst-loss event covers.
    """

    __slots__ = ("count", "data", "sequence_number", "source", "topic", "type")

    def __init__(
        self,
        type: int,
        topic: str,
        source: str,
        sequence_number: int = 0,
        data: bytes = b"",
        count: int = 0,
    ) -> None:
        self.type = type
        self.topic = topic
        self.source = source
        self.sequence_number = sequence_number
        self.data = data
        self.count = count

    @property
    def type_name(self) -> str:
        return _TYPE_NAMES.get(self.type, str(self.type))

    def __repr__(self) -> str:
        return (
            f"Message({self.type_name}, topic={self.topic!r}, source={self.source!r}, "
            f"sqn={self.sequence_number}, len={len(self.data)})"
        )
