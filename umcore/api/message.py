"""What a receiver is handed: :class:`Message` and UM's message types and source event codes.

The definitions live in :mod:`umcore.engine.message` (the engine builds messages); this module
is their public name.
"""

from umcore.engine.message import (
    MSG_BOS,
    MSG_DATA,
    MSG_EOS,
    MSG_FLAG_HF_32,
    MSG_FLAG_HF_64,
    MSG_FLAG_HF_DUPLICATE,
    MSG_FLAG_HF_OPTIONAL,
    MSG_FLAG_HF_PASS_THROUGH,
    MSG_FLAG_IMMEDIATE,
    MSG_FLAG_OTR,
    MSG_FLAG_RETRANSMIT,
    MSG_FLAG_TOPICLESS,
    MSG_HF_RESET,
    MSG_REQUEST,
    MSG_RESPONSE,
    MSG_UNRECOVERABLE_LOSS,
    MSG_UNRECOVERABLE_LOSS_BURST,
    SRC_EVENT_CONNECT,
    SRC_EVENT_DISCONNECT,
    SRC_EVENT_WAKEUP,
    DeliveredMessage,
    Message,
)

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
