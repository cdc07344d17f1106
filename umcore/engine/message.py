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

from typing import Any

__all__ = [
    "MSG_BOS",
    "MSG_DATA",
    "MSG_EOS",
    "MSG_FLAG_HF_32",
    "MSG_FLAG_HF_64",
    "MSG_FLAG_HF_DUPLICATE",
    "MSG_FLAG_HF_OPTIONAL",
    "MSG_FLAG_HF_PASS_THROUGH",
    "MSG_FLAG_IMMEDIATE",
    "MSG_FLAG_OTR",
    "MSG_FLAG_RETRANSMIT",
    "MSG_FLAG_TOPICLESS",
    "MSG_HF_RESET",
    "MSG_REQUEST",
    "MSG_RESPONSE",
    "MSG_UNRECOVERABLE_LOSS",
    "MSG_UNRECOVERABLE_LOSS_BURST",
    "SRC_EVENT_CONNECT",
    "SRC_EVENT_DISCONNECT",
    "SRC_EVENT_WAKEUP",
    "DeliveredMessage",
    "Message",
]

MSG_DATA = 0  # LBM_MSG_DATA
MSG_EOS = 1  # LBM_MSG_EOS: the transport session ended (disconnect, timeout)
MSG_REQUEST = 2  # LBM_MSG_REQUEST: data carrying a response object (``msg.response``)
MSG_RESPONSE = 3  # LBM_MSG_RESPONSE: an answer to one of our requests
MSG_UNRECOVERABLE_LOSS = 4  # LBM_MSG_UNRECOVERABLE_LOSS: one sequence number lost for good
MSG_UNRECOVERABLE_LOSS_BURST = 5  # LBM_MSG_UNRECOVERABLE_LOSS_BURST: a gap beyond the burst limit
MSG_BOS = 20  # LBM_MSG_BOS: first activity seen on a joined transport session

# lbm_msg_t.flags bits (lbm.h)
MSG_FLAG_HF_PASS_THROUGH = 0x4  # an HF receiver's message not ordered by HF sequence number
MSG_FLAG_RETRANSMIT = 0x8  # delivered through late join
MSG_FLAG_IMMEDIATE = 0x10  # a UIM or MIM
MSG_FLAG_HF_DUPLICATE = 0x20  # an HF duplicate delivered (hf_duplicate_delivery 1)
MSG_FLAG_TOPICLESS = 0x100  # an immediate message without topic
MSG_FLAG_HF_OPTIONAL = 0x400  # sent as an optional HF message
MSG_FLAG_HF_32 = 0x800  # hf_sequence_number is a 32-bit HF sequence number
MSG_FLAG_HF_64 = 0x1000  # hf_sequence_number is a 64-bit HF sequence number
MSG_FLAG_OTR = 0x2000  # delivered through off-transport recovery
MSG_HF_RESET = 27  # LBM_MSG_HF_RESET: an HF source reset the HF receivers' sequence state

SRC_EVENT_CONNECT = 1  # LBM_SRC_EVENT_CONNECT: a receiver joined the transport session
SRC_EVENT_DISCONNECT = 2  # LBM_SRC_EVENT_DISCONNECT: a receiver left it
SRC_EVENT_WAKEUP = 3  # LBM_SRC_EVENT_WAKEUP: a send refused with WouldBlock may be retried

_TYPE_NAMES = {
    MSG_DATA: "DATA",
    MSG_EOS: "EOS",
    MSG_UNRECOVERABLE_LOSS: "UNRECOVERABLE_LOSS",
    MSG_UNRECOVERABLE_LOSS_BURST: "UNRECOVERABLE_LOSS_BURST",
    MSG_BOS: "BOS",
    MSG_REQUEST: "REQUEST",
    MSG_RESPONSE: "RESPONSE",
    MSG_HF_RESET: "HF_RESET",
}


class Message:
    """One delivery to a receiver.

    ``data`` is the payload (bytes; empty for events), ``sequence_number`` the topic sequence
    number (for a reassembled message, that of its last fragment; for a loss event the first
    lost one), ``source`` UM's source string (``TCP:ip:port:sid``), ``count`` the number of
    messages a burst-loss event covers.  ``flags`` holds UM's ``LBM_MSG_FLAG_*`` bits
    (RETRANSMIT for late join, OTR, IMMEDIATE, TOPICLESS), ``properties`` the message
    properties (None when the message had none), ``app_headers`` its application headers as
    (subtype, bytes) (an empty tuple when it had none), ``response`` the response object of a REQUEST (``msg.respond(data)``).
    """

    # The five fields every delivery has are slots, set by the constructor; the others are
    # class-level defaults that the rare message carrying them overrides in its ``__dict__``
    # (created only then).  Building a data message is then five stores: it is done once per
    # delivered message, on the data path.
    __slots__ = ("__dict__", "data", "sequence_number", "source", "topic", "type")

    count = 0
    flags = 0
    properties: Any = None
    app_headers: Any = ()
    response: Any = None
    #: The info of a persistence event (``LBM_MSG_UME_*`` types: umcore.persist.events).
    info: Any = None
    #: ``lbm_msg_retrieve_fragment_info``: (first sqn, offset, total length) of a fragment
    #: delivered on its own (``ordered_delivery`` 0); None otherwise.
    fragment_info: tuple[int, int, int] | None = None
    #: Spectrum: the channel number the message was sent on (None: no channel).
    channel_info: int | None = None
    #: Hot Failover: the HF sequence number (flags HF_32 / HF_64 tell its size; 0: none).
    hf_sequence_number = 0
    #: Hot Failover: the decoded HF element (umcore.features.hotfailover.HfInfo) or None.
    hf_info: Any = None
    #: ``lbm_msg_retrieve_original_sequence_number``: an HF receiver's message keeps the topic
    #: sequence number here (``sequence_number`` then holds the 32-bit HF one, or 0).
    original_sequence_number: int | None = None
    #: ``hr_timestamp`` (sec, nsec): the kernel's receive time of the datagram (LBT-RM with
    #: ``transport_lbtrm_receiver_timestamp`` 1 and SO_TIMESTAMPNS available); (0, 0) = none.
    hr_timestamp: tuple[int, int] = (0, 0)

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
        if count:
            self.count = count

    def respond(self, data: bytes, **kwargs: Any) -> None:
        """Answer a REQUEST (``lbm_send_response``); raises UMError for other messages."""
        if self.response is None:
            from umcore.errors import UMError

            raise UMError("this message is not a request (or its response was detached)")
        self.response.send(data, **kwargs)

    @property
    def type_name(self) -> str:
        return _TYPE_NAMES.get(self.type, str(self.type))

    def __repr__(self) -> str:
        return (
            f"Message({self.type_name}, topic={self.topic!r}, source={self.source!r}, "
            f"sqn={self.sequence_number}, len={len(self.data)})"
        )


class DeliveredMessage(Message):
    """A :class:`Message` built by the receive path (``isinstance(msg, Message)`` holds; same
    fields, ``repr`` and :meth:`~Message.respond`).

    It only swaps :class:`Message`'s Python ``__init__`` for ``object``'s: ``DeliveredMessage()``
    is then an allocation in C (no Python frame, no ``object.__new__`` argument checks) and the
    receive path stores the five fields itself -- 58 vs 79 ns per message measured against
    ``Message.__new__(Message)``, the data path's largest per-message cost.

    **Recycling.**  Applications may keep messages past their callback, and a kept message keeps
    its contents.  A message nobody kept is handed out again: the paths that deliver plain data
    to one callback (``_Fanout``'s run, single-message and TCP one-frame paths) hold the last
    message they delivered and, before the next delivery, read its reference count
    (``sys.getrefcount``).  When it shows only their own references (no list, queue, closure or
    attribute of the application's holds it) they store the five fields anew into that object
    instead of allocating one; otherwise the kept message is left alone and a new one is
    allocated.  The count their own references give is measured once at import in the same code
    shape (``umcore.api.context.SPARE_REFS``), so an interpreter that counts differently changes
    the constant, not the outcome.  Allocating and freeing a message (a GC-tracked object) was
    ~55 ns of ~145 per delivered message; recycling costs one ``getrefcount`` call (~10 ns).
    This is UM's own model turned safe: UM reuses ``lbm_msg_t`` after the callback unless the
    application calls ``lbm_msg_retain``; here holding a reference is the retain.  The one thing
    not reset is what an application adds to a message it then drops (its own attributes, or
    one of the rarely set fields such as ``flags``): the paths that set those fields themselves
    (late join, OTR, properties, fragments delivered on their own, events) never recycle.
    """

    __slots__ = ()
    # object.__init__ in the type's slot: CPython calls the C function directly.
    __init__ = object.__init__
